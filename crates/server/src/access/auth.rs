//! Who is calling and what they may do: bearer tokens (only their SHA-256 hashes are kept),
//! client-certificate identities (mutual TLS), and the two roles.
//!
//! The auth file has one caller per line (blank lines and `#` comments are ignored):
//!
//! ```text
//! # CALLER  ROLE    CREDENTIAL
//! payments  writer  sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! finance   reader  sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
//! settle-svc writer mtls
//! ```
//!
//! `sha256:<hex>` is the SHA-256 of the whole token (as `ledger token new` prints it); `mtls`
//! maps a client certificate whose identity (subject CN, else its first DNS SAN) is CALLER.
//! A caller may have several token lines (rotation). Pure logic only: no I/O but [`AuthFile::load`].

use crate::grpc::ANONYMOUS;
pub use crate::grpc::MAX_CALLER_BYTES;
use ledger_core::hold::LEDGER_CALLER;
use ledger_core::{LedgerError, Reason};
use sha2::{Digest, Sha256};
use std::fmt;

/// Random bytes in a token.
pub const TOKEN_RANDOM_BYTES: usize = 32;
/// The prefix of every token (so a leaked one is recognisable in code scanners).
pub const TOKEN_PREFIX: &str = "ldg_";
/// Bytes of an `authorization` header value that we look at, at most.
pub const MAX_AUTHORIZATION_BYTES: usize = 512;

/// What a caller may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Every RPC.
    Writer,
    /// Only Get* and List*.
    Reader,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "writer" => Some(Role::Writer),
            "reader" => Some(Role::Reader),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Reader => "reader",
        }
    }
}

/// Whether a method (the last segment of the gRPC path) needs the writer role: everything
/// but `Get*` and `List*` (an allowlist, so an RPC added later is closed to readers until
/// someone decides otherwise).
pub fn needs_writer(method: &str) -> bool {
    !(method.starts_with("Get") || method.starts_with("List"))
}

/// A caller's name is 1..=[`MAX_CALLER_BYTES`] bytes without whitespace or control
/// characters, and not a reserved name: the one of unauthenticated calls, and the ledger's
/// own (it records the releases of expired holds).
pub fn validate_caller(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_CALLER_BYTES {
        return Err(format!(
            "caller name must be 1..={MAX_CALLER_BYTES} bytes (limit MAX_CALLER_BYTES)"
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "caller name {name:?} must not contain whitespace or control characters"
        ));
    }
    if name == ANONYMOUS {
        return Err(format!(
            "caller name {ANONYMOUS:?} is reserved for calls without authentication"
        ));
    }
    if name == LEDGER_CALLER {
        return Err(format!(
            "caller name {LEDGER_CALLER:?} is reserved for the ledger's own postings (releases of expired holds)"
        ));
    }
    Ok(())
}

/// A new random token: the prefix and [`TOKEN_RANDOM_BYTES`] random bytes in hex (URL-safe).
pub fn new_token() -> String {
    let mut bytes = [0u8; TOKEN_RANDOM_BYTES];
    getrandom::getrandom(&mut bytes).expect("the operating system's random source");
    format!("{TOKEN_PREFIX}{}", hex(&bytes))
}

/// The SHA-256 of a token, as stored in the auth file.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The auth-file line for a token.
pub fn auth_line(caller: &str, role: Role, token: &str) -> String {
    format!(
        "{caller} {} sha256:{}",
        role.as_str(),
        hex(&token_hash(token))
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Equality of two hashes in time independent of where they differ (`subtle`, whose
/// comparisons are built to resist the optimiser turning them into early exits).
pub fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    subtle::ConstantTimeEq::ct_eq(&a[..], &b[..]).into()
}

#[derive(Clone, PartialEq, Eq)]
enum Credential {
    TokenSha256([u8; 32]),
    Mtls,
}

#[derive(Clone, PartialEq, Eq)]
struct Line {
    caller: String,
    role: Role,
    credential: Credential,
}

/// The parsed auth file.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthFile {
    lines: Vec<Line>,
}

impl fmt::Debug for AuthFile {
    // Hashes are not secrets, but there is no reason to print them either.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuthFile({} lines)", self.lines.len())
    }
}

/// An auth file that cannot be used, with the line at fault.
#[derive(Debug)]
pub struct AuthFileError(pub String);

impl fmt::Display for AuthFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AuthFileError {}

impl AuthFile {
    /// Reads and parses an auth file.
    pub fn load(path: &std::path::Path) -> Result<AuthFile, AuthFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AuthFileError(format!("cannot read auth file {}: {e}", path.display())))?;
        AuthFile::parse(&text)
            .map_err(|e| AuthFileError(format!("auth file {}: {}", path.display(), e.0)))
    }

    /// Parses the text of an auth file.
    pub fn parse(text: &str) -> Result<AuthFile, AuthFileError> {
        let mut lines: Vec<Line> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let n = n + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let fields: Vec<&str> = content.split_whitespace().collect();
            let [caller, role, credential] = fields[..] else {
                return Err(AuthFileError(format!(
                    "line {n}: expected `CALLER ROLE sha256:<hex>` or `CALLER ROLE mtls`, found {} fields",
                    fields.len()
                )));
            };
            validate_caller(caller).map_err(|e| AuthFileError(format!("line {n}: {e}")))?;
            let role = Role::parse(role).ok_or_else(|| {
                AuthFileError(format!(
                    "line {n}: role {role:?} is not `writer` or `reader`"
                ))
            })?;
            let credential = if credential == "mtls" {
                Credential::Mtls
            } else if let Some(h) = credential.strip_prefix("sha256:") {
                Credential::TokenSha256(unhex32(&h.to_ascii_lowercase()).ok_or_else(|| {
                    AuthFileError(format!(
                        "line {n}: sha256: must be followed by 64 hex digits"
                    ))
                })?)
            } else {
                return Err(AuthFileError(format!(
                    "line {n}: credential must be `sha256:<hex>` or `mtls`"
                )));
            };
            let clash = lines.iter().any(|l| match (&l.credential, &credential) {
                (Credential::TokenSha256(a), Credential::TokenSha256(b)) => a == b,
                (Credential::Mtls, Credential::Mtls) => l.caller == caller,
                _ => false,
            });
            if clash {
                return Err(AuthFileError(format!(
                    "line {n}: this credential is already listed above"
                )));
            }
            lines.push(Line {
                caller: caller.to_owned(),
                role,
                credential,
            });
        }
        Ok(AuthFile { lines })
    }

    /// Number of credentials.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The caller holding this token. Every token line is compared (in constant time each),
    /// so the time taken does not tell which line or how much of a hash matched.
    pub fn by_token(&self, token: &str) -> Option<(&str, Role)> {
        let h = token_hash(token);
        let mut found = None;
        for l in &self.lines {
            if let Credential::TokenSha256(want) = &l.credential {
                if constant_time_eq(want, &h) && found.is_none() {
                    found = Some((l.caller.as_str(), l.role));
                }
            }
        }
        found
    }

    /// The role of a client-certificate identity.
    pub fn by_certificate(&self, identity: &str) -> Option<Role> {
        self.lines
            .iter()
            .find(|l| l.credential == Credential::Mtls && l.caller == identity)
            .map(|l| l.role)
    }
}

/// How the ledger authenticates its callers.
#[derive(Clone, Debug, Default)]
pub struct AuthPolicy {
    /// `--auth-tokens`: when set, every ledger call needs a credential listed in it.
    pub file: Option<AuthFile>,
    /// Mutual TLS is on: connections carry a verified client certificate.
    pub mtls: bool,
}

/// The credentials a request presented.
#[derive(Debug, Default)]
pub struct Presented<'a> {
    /// The `authorization` header, if any (raw bytes; not necessarily text).
    pub authorization: Option<&'a [u8]>,
    /// The verified client certificate's identity, if the connection has one.
    pub certificate_identity: Option<Result<String, String>>,
}

fn unauthenticated(msg: impl Into<String>) -> LedgerError {
    LedgerError::new(Reason::Unauthenticated, msg)
}

impl AuthPolicy {
    /// Whether any authentication is on.
    pub fn enabled(&self) -> bool {
        self.file.is_some() || self.mtls
    }

    /// The caller of a request to `method`, or why it is refused.
    pub fn authorize(&self, method: &str, presented: Presented<'_>) -> Result<String, LedgerError> {
        if !self.enabled() {
            return Ok(ANONYMOUS.to_owned());
        }
        let (caller, role) = self.authenticate(presented)?;
        if role == Role::Reader && needs_writer(method) {
            return Err(LedgerError::new(
                Reason::PermissionDenied,
                format!("caller {caller:?} has role reader; {method} needs role writer"),
            ));
        }
        Ok(caller)
    }

    fn authenticate(&self, presented: Presented<'_>) -> Result<(String, Role), LedgerError> {
        if let (Some(file), Some(header)) = (&self.file, presented.authorization) {
            let token = bearer(header)?;
            return file
                .by_token(token)
                .map(|(c, r)| (c.to_owned(), r))
                .ok_or_else(|| unauthenticated("the bearer token is not valid"));
        }
        if self.mtls {
            let identity = match presented.certificate_identity {
                Some(Ok(id)) => id,
                Some(Err(e)) => {
                    return Err(unauthenticated(format!(
                        "the client certificate has no usable identity: {e}"
                    )))
                }
                None => return Err(unauthenticated("no client certificate was presented")),
            };
            return match &self.file {
                None => Ok((identity, Role::Writer)),
                Some(file) => file
                    .by_certificate(&identity)
                    .map(|r| (identity.clone(), r))
                    .ok_or_else(|| {
                        unauthenticated(format!(
                            "client certificate identity {identity:?} has no `mtls` line in the auth file"
                        ))
                    }),
            };
        }
        Err(unauthenticated(
            "this call needs an `authorization: Bearer TOKEN` header",
        ))
    }
}

/// The token of an `authorization: Bearer TOKEN` header.
fn bearer(header: &[u8]) -> Result<&str, LedgerError> {
    let bad = || unauthenticated("the authorization header must be `Bearer TOKEN`");
    if header.len() > MAX_AUTHORIZATION_BYTES {
        return Err(unauthenticated(format!(
            "the authorization header is over {MAX_AUTHORIZATION_BYTES} bytes (limit MAX_AUTHORIZATION_BYTES)"
        )));
    }
    let text = std::str::from_utf8(header).map_err(|_| bad())?;
    let (scheme, token) = text.trim().split_once(' ').ok_or_else(bad)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(bad());
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(bad());
    }
    Ok(token)
}

/// The identity of a client certificate (DER): its subject common name, else its first DNS
/// subject alternative name.
pub fn certificate_identity(der: &[u8]) -> Result<String, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned);
    let name = match cn {
        Some(cn) => cn,
        None => {
            let san = cert.subject_alternative_name().map_err(|e| e.to_string())?;
            san.and_then(|ext| {
                ext.value.general_names.iter().find_map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
                    _ => None,
                })
            })
            .ok_or("neither a subject common name nor a DNS subject alternative name")?
        }
    };
    validate_caller(&name)?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> AuthPolicy {
        AuthPolicy {
            file: Some(AuthFile::parse(text).unwrap()),
            mtls: false,
        }
    }

    fn with_header(h: &str) -> Presented<'_> {
        Presented {
            authorization: Some(h.as_bytes()),
            certificate_identity: None,
        }
    }

    #[test]
    fn reserved_and_malformed_caller_names_are_refused() {
        for bad in [
            "",
            "anonymous",
            "ledger",
            "a b",
            "tab\there",
            &"x".repeat(MAX_CALLER_BYTES + 1),
        ] {
            assert!(validate_caller(bad).is_err(), "{bad:?}");
        }
        for good in ["svc", "ledger-ops", "Ledger", &"x".repeat(MAX_CALLER_BYTES)] {
            assert!(validate_caller(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn a_new_token_is_random_url_safe_and_long_enough() {
        let a = new_token();
        let b = new_token();
        assert_ne!(a, b);
        let body = a.strip_prefix(TOKEN_PREFIX).unwrap();
        assert_eq!(body.len(), 2 * TOKEN_RANDOM_BYTES);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn an_auth_line_holds_the_hash_and_never_the_token() {
        let t = new_token();
        let line = auth_line("svc", Role::Reader, &t);
        assert!(!line.contains(&t));
        assert!(!line.contains(t.strip_prefix(TOKEN_PREFIX).unwrap()));
        let file = AuthFile::parse(&line).unwrap();
        assert_eq!(file.by_token(&t), Some(("svc", Role::Reader)));
        assert_eq!(file.by_token(&new_token()), None);
    }

    #[test]
    fn outcomes_of_authorization_by_token_and_method() {
        let w = new_token();
        let r = new_token();
        let p = policy(&format!(
            "# comment\n\n{}\n{}  # trailing comment\n",
            auth_line("svc-w", Role::Writer, &w),
            auth_line("svc-r", Role::Reader, &r)
        ));
        let table: Vec<(String, &str, Result<&str, Reason>)> = vec![
            (format!("Bearer {w}"), "Post", Ok("svc-w")),
            (format!("bearer {w}"), "Void", Ok("svc-w")),
            (format!("Bearer {r}"), "GetBalance", Ok("svc-r")),
            (format!("Bearer {r}"), "ListPostings", Ok("svc-r")),
            (format!("Bearer {r}"), "Post", Err(Reason::PermissionDenied)),
            (format!("Bearer {r}"), "Void", Err(Reason::PermissionDenied)),
            (
                format!("Bearer {r}"),
                "Capture",
                Err(Reason::PermissionDenied),
            ),
            (format!("Bearer {w}"), "Capture", Ok("svc-w")),
            (
                format!("Bearer {r}"),
                "CreateAccount",
                Err(Reason::PermissionDenied),
            ),
            (
                format!("Bearer {r}"),
                "SomethingNew",
                Err(Reason::PermissionDenied),
            ),
            (format!("Bearer {w}"), "SomethingNew", Ok("svc-w")),
            (
                format!("Bearer {w}x"),
                "GetBalance",
                Err(Reason::Unauthenticated),
            ),
            (w.clone(), "GetBalance", Err(Reason::Unauthenticated)),
            (
                format!("Basic {w}"),
                "GetBalance",
                Err(Reason::Unauthenticated),
            ),
            ("Bearer ".into(), "GetBalance", Err(Reason::Unauthenticated)),
            (
                format!("Bearer {}", "x".repeat(600)),
                "GetBalance",
                Err(Reason::Unauthenticated),
            ),
        ];
        for (header, method, want) in table {
            let got = p.authorize(method, with_header(&header));
            match (got, want) {
                (Ok(c), Ok(w)) => assert_eq!(c, w, "{method}"),
                (Err(e), Err(w)) => {
                    assert_eq!(e.reason, w, "{method}: {}", e.message);
                    assert!(
                        !e.message.contains(&header[header.len().min(7)..]) || header.len() < 12,
                        "token in message: {}",
                        e.message
                    );
                }
                (got, want) => panic!("{method}: got {got:?}, want {want:?}"),
            }
        }
        let none = p.authorize("GetBalance", Presented::default()).unwrap_err();
        assert_eq!(none.reason, Reason::Unauthenticated);
    }

    #[test]
    fn without_authentication_everyone_is_the_anonymous_writer() {
        let p = AuthPolicy::default();
        assert_eq!(
            p.authorize("Post", Presented::default()).unwrap(),
            ANONYMOUS
        );
    }

    #[test]
    fn mtls_identities_take_their_role_from_the_auth_file() {
        let p = AuthPolicy {
            file: Some(AuthFile::parse("svc-a writer mtls\nsvc-b reader mtls").unwrap()),
            mtls: true,
        };
        let cert = |id: &str| Presented {
            authorization: None,
            certificate_identity: Some(Ok(id.to_owned())),
        };
        assert_eq!(p.authorize("Post", cert("svc-a")).unwrap(), "svc-a");
        assert_eq!(p.authorize("GetAccount", cert("svc-b")).unwrap(), "svc-b");
        assert_eq!(
            p.authorize("Post", cert("svc-b")).unwrap_err().reason,
            Reason::PermissionDenied
        );
        assert_eq!(
            p.authorize("GetAccount", cert("svc-c")).unwrap_err().reason,
            Reason::Unauthenticated
        );
        let open = AuthPolicy {
            file: None,
            mtls: true,
        };
        assert_eq!(open.authorize("Post", cert("svc-c")).unwrap(), "svc-c");
    }

    #[test]
    fn malformed_auth_files_are_refused_with_the_line() {
        let h = format!("sha256:{}", "ab".repeat(32));
        let table = [
            "svc writer".to_string(),
            format!("svc admin {h}"),
            "svc writer sha256:abc".to_string(),
            format!("svc writer md5:{}", "ab".repeat(32)),
            format!("anonymous writer {h}"),
            format!("a writer {h}\nb reader {h}"),
            "a writer mtls\na reader mtls".to_string(),
            format!("{} writer {h}", "c".repeat(MAX_CALLER_BYTES + 1)),
        ];
        for text in table {
            let e = AuthFile::parse(&text).expect_err(&text);
            assert!(e.0.starts_with("line "), "{text}: {e}");
        }
    }

    #[test]
    fn constant_time_eq_compares_whole_hashes() {
        let a = token_hash("a");
        let mut b = a;
        assert!(constant_time_eq(&a, &b));
        b[31] ^= 1;
        assert!(!constant_time_eq(&a, &b));
    }
}

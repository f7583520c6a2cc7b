//! Who is calling and what they may do: bearer tokens (only their SHA-256 hashes are kept),
//! client-certificate identities (mutual TLS), the three roles and the ledgers each line
//! grants.
//!
//! The auth file has one credential per line (blank lines and `#` comments are ignored):
//!
//! ```text
//! # CALLER   ROLE    CREDENTIAL                        LEDGERS
//! payments   writer  sha256:9f86d081…(64 hex digits)   acme,globex
//! finance    reader  sha256:60303ae2…(64 hex digits)
//! platform   admin   sha256:fd61a03a…(64 hex digits)   *
//! settle-svc writer  mtls                              acme
//! ```
//!
//! `sha256:<hex>` is the SHA-256 of the whole token (as `ledger token new` prints it); `mtls`
//! maps a client certificate whose identity (subject CN, else its first DNS SAN) is CALLER.
//! LEDGERS, optional, is the ledgers the line grants: comma-separated ledger codes, or `*` for
//! every ledger; without it, `default` alone (what such a line meant before ledgers). A caller
//! may have several lines (token rotation, a token and a certificate); they must agree on role
//! and ledgers. Pure logic only: no I/O but [`AuthFile::load`].

pub use crate::grpc::MAX_CALLER_BYTES;
use crate::grpc::{Caller, ANONYMOUS};
use ledger_core::hold::LEDGER_CALLER;
use ledger_core::ledger::{validate_ledger_code, Grants};
use ledger_core::{LedgerError, Reason};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fmt;

/// Random bytes in a token.
pub const TOKEN_RANDOM_BYTES: usize = 32;
/// The prefix of every token (so a leaked one is recognisable in code scanners).
pub const TOKEN_PREFIX: &str = "ldg_";
/// Bytes of an `authorization` header value that we look at, at most.
pub const MAX_AUTHORIZATION_BYTES: usize = 512;
/// The fourth column's word for every ledger.
pub const ALL_LEDGERS: &str = "*";

/// What a caller may do; each role may do everything the ones before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Only Get* and List*.
    Reader,
    /// Every RPC but the administrators' ([`ADMIN_METHODS`]).
    Writer,
    /// Every RPC.
    Admin,
}

/// The roles, as an error message lists them.
pub const ROLE_NAMES: &str = "`reader`, `writer` or `admin`";

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "reader" => Some(Role::Reader),
            "writer" => Some(Role::Writer),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Writer => "writer",
            Role::Admin => "admin",
        }
    }

    /// The least role that may call a method (the last segment of the gRPC path).
    pub fn needed_for(method: &str) -> Role {
        if needs_admin(method) {
            Role::Admin
        } else if needs_writer(method) {
            Role::Writer
        } else {
            Role::Reader
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The methods only the admin role may call.
pub const ADMIN_METHODS: [&str; 2] = ["CreateLedger", "ClosePeriod"];

/// Whether a method (the last segment of the gRPC path) needs the admin role.
pub fn needs_admin(method: &str) -> bool {
    ADMIN_METHODS.contains(&method)
}

/// Whether a method (the last segment of the gRPC path) needs the writer role: everything
/// but `Get*` and `List*` (an allowlist, so an RPC added later is closed to readers until
/// someone decides otherwise).
pub fn needs_writer(method: &str) -> bool {
    !(method.starts_with("Get") || method.starts_with("List"))
}

/// The fourth column of an auth-file line: `*` (every ledger) or comma-separated ledger codes
/// (each at most once, none empty).
pub fn parse_grants(column: &str) -> Result<Grants, String> {
    if column == ALL_LEDGERS {
        return Ok(Grants::All);
    }
    let mut codes = BTreeSet::new();
    for code in column.split(',') {
        if code == ALL_LEDGERS {
            return Err("ledgers: `*` grants every ledger and stands alone, not in a list".into());
        }
        if code.is_empty() {
            return Err(
                "ledgers: an empty ledger code (comma-separated codes without spaces, or `*`)"
                    .into(),
            );
        }
        validate_ledger_code(code).map_err(|e| format!("ledgers: {}", e.message))?;
        if !codes.insert(code.to_owned()) {
            return Err(format!("ledgers: the ledger {code:?} is listed twice"));
        }
    }
    Ok(Grants::Only(codes))
}

/// The fourth column that grants `grants` (`*`, or the codes comma-separated).
pub fn grants_column(grants: &Grants) -> String {
    match grants {
        Grants::All => ALL_LEDGERS.to_owned(),
        Grants::Only(codes) => codes
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(","),
    }
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

/// The auth-file line for a token, without a fourth column (it grants `default` alone).
pub fn auth_line(caller: &str, role: Role, token: &str) -> String {
    format!(
        "{caller} {} sha256:{}",
        role.as_str(),
        hex(&token_hash(token))
    )
}

/// The auth-file line for a token that grants `ledgers` (a fourth column; `Grants::Only` of
/// at least one code).
pub fn auth_line_granting(caller: &str, role: Role, token: &str, ledgers: &Grants) -> String {
    assert!(
        *ledgers != Grants::Only(BTreeSet::new()),
        "an auth-file line grants at least one ledger"
    );
    format!(
        "{} {}",
        auth_line(caller, role, token),
        grants_column(ledgers)
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
    /// Its number in the file, from 1 (errors name it).
    n: usize,
    caller: String,
    role: Role,
    credential: Credential,
    grants: Grants,
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

/// One line's fields (`content`: without its comment, not blank), each checked alone.
fn parse_line(n: usize, content: &str) -> Result<Line, String> {
    let fields: Vec<&str> = content.split_whitespace().collect();
    let (caller, role, credential, grants) = match fields[..] {
        [caller, role, credential] => (caller, role, credential, None),
        [caller, role, credential, grants] => (caller, role, credential, Some(grants)),
        _ => {
            return Err(format!(
                "expected `CALLER ROLE CREDENTIAL [LEDGERS]` (CREDENTIAL `sha256:<hex>` or `mtls`; LEDGERS comma-separated ledger codes or `*`), found {} fields",
                fields.len()
            ))
        }
    };
    validate_caller(caller)?;
    let role = Role::parse(role).ok_or_else(|| format!("role {role:?} is not {ROLE_NAMES}"))?;
    let credential = if credential == "mtls" {
        Credential::Mtls
    } else if let Some(h) = credential.strip_prefix("sha256:") {
        Credential::TokenSha256(
            unhex32(&h.to_ascii_lowercase()).ok_or("sha256: must be followed by 64 hex digits")?,
        )
    } else {
        return Err("credential must be `sha256:<hex>` or `mtls`".into());
    };
    let grants = grants.map_or(Ok(Grants::default_only()), parse_grants)?;
    Ok(Line {
        n,
        caller: caller.to_owned(),
        role,
        credential,
        grants,
    })
}

/// Why `line` cannot join the lines above it: its credential is listed already, or its
/// caller has another role or other ledgers on an earlier line.
fn conflict(above: &[Line], line: &Line) -> Option<String> {
    let clash = above
        .iter()
        .any(|l| match (&l.credential, &line.credential) {
            (Credential::TokenSha256(a), Credential::TokenSha256(b)) => a == b,
            (Credential::Mtls, Credential::Mtls) => l.caller == line.caller,
            _ => false,
        });
    if clash {
        return Some("this credential is already listed above".into());
    }
    let other = above
        .iter()
        .find(|l| l.caller == line.caller && (l.role, &l.grants) != (line.role, &line.grants))?;
    Some(format!(
        "caller {:?} has role {} and ledgers {} here but role {} and ledgers {} on line {}; a caller's lines must agree on role and ledgers",
        line.caller,
        line.role,
        grants_column(&line.grants),
        other.role,
        grants_column(&other.grants),
        other.n
    ))
}

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
            let line =
                parse_line(n, content).map_err(|e| AuthFileError(format!("line {n}: {e}")))?;
            if let Some(e) = conflict(&lines, &line) {
                return Err(AuthFileError(format!("line {n}: {e}")));
            }
            lines.push(line);
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

    /// The caller holding this token, its role and its ledgers. Every token line is compared
    /// (in constant time each), so the time taken does not tell which line or how much of a
    /// hash matched.
    pub fn by_token(&self, token: &str) -> Option<(&str, Role, &Grants)> {
        let h = token_hash(token);
        let mut found = None;
        for l in &self.lines {
            if let Credential::TokenSha256(want) = &l.credential {
                if constant_time_eq(want, &h) && found.is_none() {
                    found = Some((l.caller.as_str(), l.role, &l.grants));
                }
            }
        }
        found
    }

    /// The role and the ledgers of a client-certificate identity.
    pub fn by_certificate(&self, identity: &str) -> Option<(Role, &Grants)> {
        self.lines
            .iter()
            .find(|l| l.credential == Credential::Mtls && l.caller == identity)
            .map(|l| (l.role, &l.grants))
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

    /// The caller of a request to `method` (with the ledgers it is granted), or why it is
    /// refused. Without authentication: [`Caller::anonymous`], granted every ledger.
    pub fn authorize(&self, method: &str, presented: Presented<'_>) -> Result<Caller, LedgerError> {
        if !self.enabled() {
            return Ok(Caller::anonymous());
        }
        let (caller, role) = self.authenticate(presented)?;
        let needed = Role::needed_for(method);
        if role < needed {
            return Err(LedgerError::new(
                Reason::PermissionDenied,
                format!(
                    "caller {:?} has role {role}; {method} needs role {needed}",
                    caller.name
                ),
            ));
        }
        Ok(caller)
    }

    fn authenticate(&self, presented: Presented<'_>) -> Result<(Caller, Role), LedgerError> {
        let caller = |name: &str, grants: &Grants| Caller {
            name: name.to_owned(),
            grants: grants.clone(),
        };
        if let (Some(file), Some(header)) = (&self.file, presented.authorization) {
            let token = bearer(header)?;
            return file
                .by_token(token)
                .map(|(c, r, g)| (caller(c, g), r))
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
                // No auth file: every certificate the CA signed is a writer of every ledger.
                None => Ok((caller(&identity, &Grants::All), Role::Writer)),
                Some(file) => file
                    .by_certificate(&identity)
                    .map(|(r, g)| (caller(&identity, g), r))
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
        assert_eq!(
            file.by_token(&t),
            Some(("svc", Role::Reader, &Grants::default_only()))
        );
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
                (Ok(c), Ok(w)) => assert_eq!(c.name, w, "{method}"),
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
    fn without_authentication_everyone_is_the_anonymous_admin_of_every_ledger() {
        let p = AuthPolicy::default();
        for method in ["Post", "CreateLedger", "ListLedgers"] {
            let c = p.authorize(method, Presented::default()).unwrap();
            assert_eq!(c, Caller::anonymous());
            assert_eq!((c.name.as_str(), c.grants), (ANONYMOUS, Grants::All));
        }
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
        assert_eq!(p.authorize("Post", cert("svc-a")).unwrap().name, "svc-a");
        assert_eq!(
            p.authorize("GetAccount", cert("svc-b")).unwrap().name,
            "svc-b"
        );
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
        assert_eq!(open.authorize("Post", cert("svc-c")).unwrap().name, "svc-c");
    }

    #[test]
    fn malformed_auth_files_are_refused_with_the_line() {
        let h = format!("sha256:{}", "ab".repeat(32));
        let table = [
            "svc writer".to_string(),
            format!("svc owner {h}"),
            format!("svc writer {h} acme extra"),
            format!("svc writer {h} Acme"),
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

    fn h(n: u8) -> String {
        format!("sha256:{}", format!("{n:02x}").repeat(32))
    }

    fn only(codes: &[&str]) -> Grants {
        Grants::Only(codes.iter().map(|c| c.to_string()).collect())
    }

    #[test]
    fn a_fourth_column_grants_its_ledgers_and_a_line_without_one_grants_default_alone() {
        let table = [
            (format!("svc writer {}", h(1)), only(&["default"])),
            (format!("svc writer {} default", h(1)), only(&["default"])),
            (format!("svc writer {} acme", h(1)), only(&["acme"])),
            (
                format!("svc reader {} globex,acme", h(1)),
                only(&["acme", "globex"]),
            ),
            (
                format!("svc admin {} acme,default  # comment", h(1)),
                only(&["acme", "default"]),
            ),
            (format!("svc admin {} *", h(1)), Grants::All),
            (
                format!("svc writer {} *  # every ledger", h(1)),
                Grants::All,
            ),
        ];
        for (text, want) in table {
            let file = AuthFile::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(file.lines[0].grants, want, "{text}");
        }
    }

    #[test]
    fn bad_ledger_columns_are_refused_naming_the_line_and_the_fault() {
        let table = [
            ("Acme", "MAX_LEDGER_CODE_CHARS"),
            ("a.b", "MAX_LEDGER_CODE_CHARS"),
            (&"a".repeat(65), "MAX_LEDGER_CODE_CHARS"),
            ("acme,", "empty ledger code"),
            (",acme", "empty ledger code"),
            ("acme,,globex", "empty ledger code"),
            (",", "empty ledger code"),
            ("*,acme", "stands alone"),
            ("acme,*", "stands alone"),
            ("**", "MAX_LEDGER_CODE_CHARS"),
            ("acme,acme", "listed twice"),
            ("acme, globex", "found 5 fields"),
        ];
        for (column, fault) in table {
            let text = format!(
                "ok writer {}
svc writer {} {column}",
                h(1),
                h(2)
            );
            let e = AuthFile::parse(&text).expect_err(&text);
            assert!(e.0.starts_with("line 2: "), "{text}: {e}");
            assert!(e.0.contains(fault), "{text}: {e}");
        }
    }

    #[test]
    fn the_lines_of_one_caller_must_agree_on_role_and_ledgers() {
        let table = [
            (format!("svc writer {}\nsvc writer {}", h(1), h(2)), true),
            (
                format!("svc writer {}\nsvc writer {} default", h(1), h(2)),
                true,
            ),
            (
                format!(
                    "svc writer {} acme,globex\nsvc writer {} globex,acme",
                    h(1),
                    h(2)
                ),
                true,
            ),
            (format!("svc writer {} *\nsvc writer mtls *", h(1)), true),
            (
                format!("svc writer {}\nother reader {} acme", h(1), h(2)),
                true,
            ),
            (format!("svc writer {}\nsvc reader {}", h(1), h(2)), false),
            (format!("svc writer {}\nsvc admin {}", h(1), h(2)), false),
            (
                format!("svc writer {} acme\nsvc writer {} globex", h(1), h(2)),
                false,
            ),
            (
                format!("svc writer {} acme\nsvc writer {} acme,globex", h(1), h(2)),
                false,
            ),
            (format!("svc writer {}\nsvc writer {} *", h(1), h(2)), false),
            (format!("svc writer {} acme\nsvc writer mtls", h(1)), false),
            (format!("svc reader mtls\nsvc writer {}", h(1)), false),
        ];
        for (text, agree) in table {
            let got = AuthFile::parse(&text);
            match (got, agree) {
                (Ok(_), true) => {}
                (Err(e), false) => {
                    assert!(e.0.starts_with("line 2: caller \"svc\""), "{text}: {e}");
                    assert!(e.0.contains("on line 1;"), "{text}: {e}");
                }
                (got, _) => panic!("{text}: {got:?}"),
            }
        }
    }

    #[test]
    fn each_role_may_call_what_its_role_and_the_ones_below_it_may() {
        let (r, w, a) = (new_token(), new_token(), new_token());
        let p = policy(&format!(
            "{}\n{}\n{}",
            auth_line("svc-r", Role::Reader, &r),
            auth_line("svc-w", Role::Writer, &w),
            auth_line_granting("svc-a", Role::Admin, &a, &Grants::All)
        ));
        // method, and whether reader, writer, admin may call it
        let table = [
            ("GetAccount", [true, true, true]),
            ("ListPostings", [true, true, true]),
            ("GetLedger", [true, true, true]),
            ("ListLedgers", [true, true, true]),
            ("CreateAccount", [false, true, true]),
            ("UpdateAccount", [false, true, true]),
            ("ListAccountVersions", [true, true, true]),
            ("Post", [false, true, true]),
            ("PostBatch", [false, true, true]),
            ("Void", [false, true, true]),
            ("Capture", [false, true, true]),
            ("SomethingNew", [false, true, true]),
            ("CreateLedger", [false, false, true]),
            ("GetDigest", [true, true, true]),
            ("GetInclusionProof", [true, true, true]),
            ("GetConsistencyProof", [true, true, true]),
            ("ListPeriodCloses", [true, true, true]),
            ("ListRollups", [true, true, true]),
            ("ClosePeriod", [false, false, true]),
        ];
        for (method, allowed) in table {
            for (token, ok) in [&r, &w, &a].into_iter().zip(allowed) {
                let got = p.authorize(method, with_header(&format!("Bearer {token}")));
                match (got, ok) {
                    (Ok(_), true) => {}
                    (Err(e), false) => {
                        assert_eq!(e.reason, Reason::PermissionDenied, "{method}");
                        let needed = Role::needed_for(method);
                        assert!(
                            e.message
                                .ends_with(&format!("{method} needs role {needed}")),
                            "{method}: {}",
                            e.message
                        );
                    }
                    (got, _) => panic!("{method}: {got:?}"),
                }
            }
        }
        let e = p
            .authorize("CreateLedger", with_header(&format!("Bearer {w}")))
            .unwrap_err();
        assert_eq!(
            e.message,
            "caller \"svc-w\" has role writer; CreateLedger needs role admin"
        );
    }

    #[test]
    fn only_ledger_creation_and_period_closes_need_admin_and_every_write_method_still_needs_writer()
    {
        let writes = [
            "CreateAccount",
            "UpdateAccount",
            "Post",
            "PostBatch",
            "Void",
            "Capture",
            "CreateLedger",
            "ClosePeriod",
        ];
        let methods =
            crate::access::METHODS
                .into_iter()
                .chain(["CreateLedger", "GetLedger", "ListLedgers"]);
        for m in methods {
            assert_eq!(needs_writer(m), writes.contains(&m), "{m}");
            let admin = m == "CreateLedger" || m == "ClosePeriod";
            assert_eq!(needs_admin(m), admin, "{m}");
            let want = match m {
                _ if admin => Role::Admin,
                _ if writes.contains(&m) => Role::Writer,
                _ => Role::Reader,
            };
            assert_eq!(Role::needed_for(m), want, "{m}");
        }
        assert!(Role::Reader < Role::Writer && Role::Writer < Role::Admin);
        for role in [Role::Reader, Role::Writer, Role::Admin] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
        assert_eq!(Role::parse("owner"), None);
    }

    #[test]
    fn a_callers_grants_come_with_it_from_its_token_or_its_certificate_line() {
        let t = new_token();
        let p = AuthPolicy {
            file: Some(
                AuthFile::parse(&format!(
                    "{}\nsvc-m writer mtls globex\nsvc-d reader mtls\nsvc-s admin mtls *",
                    auth_line_granting("svc-t", Role::Writer, &t, &only(&["acme"]))
                ))
                .unwrap(),
            ),
            mtls: true,
        };
        let cert = |id: &str| Presented {
            authorization: None,
            certificate_identity: Some(Ok(id.to_owned())),
        };
        let header = format!("Bearer {t}");
        let table = [
            (with_header(&header), "svc-t", only(&["acme"])),
            (cert("svc-m"), "svc-m", only(&["globex"])),
            (cert("svc-d"), "svc-d", Grants::default_only()),
            (cert("svc-s"), "svc-s", Grants::All),
        ];
        for (presented, name, grants) in table {
            let c = p.authorize("GetAccount", presented).unwrap();
            assert_eq!(
                c,
                Caller {
                    name: name.into(),
                    grants
                },
                "{name}"
            );
        }
        let open = AuthPolicy {
            file: None,
            mtls: true,
        };
        let c = open.authorize("Post", cert("svc-x")).unwrap();
        assert_eq!(
            c.grants,
            Grants::All,
            "no auth file: every certificate, every ledger"
        );
        assert_eq!(
            open.authorize("CreateLedger", cert("svc-x"))
                .unwrap_err()
                .reason,
            Reason::PermissionDenied
        );
    }

    #[test]
    fn a_granting_line_prints_its_fourth_column_and_parses_back_to_the_same_grants() {
        let t = new_token();
        for (grants, column) in [
            (Grants::All, "*"),
            (only(&["globex", "acme"]), "acme,globex"),
            (Grants::default_only(), "default"),
        ] {
            let line = auth_line_granting("svc", Role::Admin, &t, &grants);
            assert!(line.ends_with(&format!(" {column}")), "{line}");
            assert_eq!(line.split_whitespace().count(), 4, "{line}");
            let file = AuthFile::parse(&line).unwrap();
            assert_eq!(file.by_token(&t), Some(("svc", Role::Admin, &grants)));
            assert_eq!(parse_grants(column).unwrap(), grants);
            assert_eq!(grants_column(&grants), column);
        }
        assert_eq!(
            auth_line("svc", Role::Writer, &t)
                .split_whitespace()
                .count(),
            3
        );
    }
}

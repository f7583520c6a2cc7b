//! TLS to PostgreSQL with rustls: libpq's `sslmode` (`disable`, `prefer`, `require`,
//! `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file, or `system` for the platform's
//! roots), read from the database URL.
//!
//! Why our own `MakeTlsConnect` on `tokio-rustls` rather than the `tokio-postgres-rustls`
//! crate: the TLS stack is already in the tree (the server's), and that crate only wraps a
//! `rustls::ClientConfig` the caller builds: the part that matters here, libpq's meaning of
//! each `sslmode` (`require` encrypts without checking who answers unless a root certificate
//! is given; `verify-ca` checks the chain but not the name; `verify-full` both), would be ours
//! to write either way. tokio-postgres itself parses only `disable`, `prefer` and `require` and
//! refuses `sslrootcert`, so both are taken out of the URL here before it parses the rest.
//!
//! Channel binding (`tls-server-end-point`, RFC 5929) is computed from the server's
//! certificate, so SCRAM-SHA-256-PLUS works and `channel_binding=require` can be asked for.

use super::StorageError;
use sha2::Digest;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::{
    verify_tls12_signature, verify_tls13_signature, CryptoProvider,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error as TlsError, RootCertStore,
    SignatureScheme,
};

/// libpq's `sslmode`, all five (tokio-postgres knows the first three).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    /// TLS when the server offers it, unverified (libpq's default, and ours).
    Prefer,
    /// TLS or no connection; the server is verified only when `sslrootcert` is given.
    Require,
    /// TLS, the server's chain verified against `sslrootcert`, any name.
    VerifyCa,
    /// TLS, the chain verified and the certificate naming the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode, StorageError> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(StorageError::Config(format!(
                    "sslmode {other:?} is not one of disable, prefer, require, verify-ca, \
                     verify-full (allow is not supported)"
                )))
            }
        })
    }

    /// What tokio-postgres is told: whether TLS is tried and whether it is required.
    pub(super) fn driver(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        }
    }
}

/// Where the certificates that vouch for the server come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootCert {
    File(PathBuf),
    /// `sslrootcert=system`: the platform's trusted roots.
    System,
}

/// The TLS settings of a database URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsParams {
    pub mode: SslMode,
    pub root_cert: Option<RootCert>,
}

/// Takes `sslmode` and `sslrootcert` out of a database URL (`postgres://…?…` or
/// `key=value …`): the rest, for tokio-postgres to parse, and what they said. Pure.
pub fn split_tls_params(url: &str) -> Result<(String, TlsParams), StorageError> {
    let is_uri = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let (rest, found) = if is_uri {
        split_uri(url)
    } else {
        split_key_values(url)?
    };
    let mut params = TlsParams {
        mode: SslMode::Prefer,
        root_cert: None,
    };
    for (key, value) in found {
        match key.as_str() {
            "sslmode" => params.mode = SslMode::parse(&value)?,
            _ if value == "system" => params.root_cert = Some(RootCert::System),
            _ => params.root_cert = Some(RootCert::File(PathBuf::from(value))),
        }
    }
    if params.mode == SslMode::Disable && params.root_cert.is_some() {
        params.root_cert = None;
    }
    Ok((rest, params))
}

const TLS_KEYS: [&str; 2] = ["sslmode", "sslrootcert"];

/// The URI form: query parameters, `&`-separated, percent-encoded.
fn split_uri(url: &str) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), Vec::new());
    };
    let mut kept = Vec::new();
    let mut found = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(k);
        if TLS_KEYS.contains(&key.as_str()) {
            found.push((key, percent_decode(v)));
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rest, found)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h * 16 + l);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `key=value` form (values may be quoted with `'`, with `\` escapes, as libpq reads them):
/// the pairs other than the TLS ones kept as they were written.
fn split_key_values(s: &str) -> Result<(String, Vec<(String, String)>), StorageError> {
    let chars: Vec<char> = s.chars().collect();
    let (mut i, mut kept, mut found) = (0, Vec::new(), Vec::new());
    loop {
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if i == chars.len() {
            break;
        }
        let start = i;
        while i < chars.len() && chars[i] != '=' && !chars[i].is_whitespace() {
            i += 1;
        }
        let key: String = chars[start..i].iter().collect();
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        if chars.get(i) != Some(&'=') {
            return Err(StorageError::Config(format!("{key:?} has no value")));
        }
        i += 1;
        while i < chars.len() && chars[i].is_whitespace() {
            i += 1;
        }
        let (value, end) = conn_value(&chars, i)?;
        i = end;
        if TLS_KEYS.contains(&key.as_str()) {
            found.push((key, value));
        } else {
            kept.push(chars[start..end].iter().collect::<String>());
        }
    }
    Ok((kept.join(" "), found))
}

/// One value from `at`: quoted (`'…'`) or up to the next blank, `\` escaping a character.
fn conn_value(chars: &[char], mut i: usize) -> Result<(String, usize), StorageError> {
    let quoted = chars.get(i) == Some(&'\'');
    if quoted {
        i += 1;
    }
    let mut value = String::new();
    loop {
        match chars.get(i) {
            None if quoted => {
                return Err(StorageError::Config("a quoted value is not closed".into()))
            }
            None => return Ok((value, i)),
            Some('\'') if quoted => return Ok((value, i + 1)),
            Some(c) if c.is_whitespace() && !quoted => return Ok((value, i)),
            Some('\\') if i + 1 < chars.len() => {
                value.push(chars[i + 1]);
                i += 2;
            }
            Some(c) => {
                value.push(*c);
                i += 1;
            }
        }
    }
}

/// The connector every database connection of the ledger uses (pool, migrations, check,
/// publisher, replicas): rustls configured for the URL's `sslmode`.
#[derive(Clone)]
pub struct Tls {
    mode: SslMode,
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tls({:?})", self.mode)
    }
}

impl Tls {
    /// The connector for these settings: reads `sslrootcert` now, so a missing or broken file
    /// is refused at start, by name.
    pub fn new(params: &TlsParams) -> Result<Tls, StorageError> {
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let verify_chain = match params.mode {
            SslMode::VerifyCa | SslMode::VerifyFull => true,
            // libpq: with a root certificate, `require` verifies as `verify-ca` does.
            SslMode::Require => params.root_cert.is_some(),
            SslMode::Disable | SslMode::Prefer => false,
        };
        let verifier: Arc<dyn ServerCertVerifier> = if verify_chain {
            let roots = root_store(params.root_cert.as_ref(), params.mode)?;
            let webpki =
                WebPkiServerVerifier::builder_with_provider(roots.into(), provider.clone())
                    .build()
                    .map_err(|e| StorageError::Config(format!("sslrootcert: {e}")))?;
            Arc::new(Verify {
                webpki,
                check_name: params.mode == SslMode::VerifyFull,
            })
        } else {
            Arc::new(NoVerify(provider.clone()))
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StorageError::Config(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Tls {
            mode: params.mode,
            config: Arc::new(config),
        })
    }

    pub fn mode(&self) -> SslMode {
        self.mode
    }
}

fn root_store(root: Option<&RootCert>, mode: SslMode) -> Result<RootCertStore, StorageError> {
    let mut roots = RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = match root {
        None => {
            return Err(StorageError::Config(format!(
                "sslmode={} needs sslrootcert=<CA file> (or sslrootcert=system); the ledger \
                 does not read ~/.postgresql/root.crt",
                if mode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                }
            )))
        }
        Some(RootCert::System) => rustls_native_certs::load_native_certs().certs,
        Some(RootCert::File(path)) => {
            let pem = std::fs::read(path).map_err(|e| {
                StorageError::Config(format!("sslrootcert {}: {e}", path.display()))
            })?;
            CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    StorageError::Config(format!("sslrootcert {} is not PEM: {e}", path.display()))
                })?
        }
    };
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| StorageError::Config(format!("sslrootcert: {e}")))?;
    }
    if roots.is_empty() {
        return Err(StorageError::Config(
            "sslrootcert holds no certificate".into(),
        ));
    }
    Ok(roots)
}

/// `verify-ca` (the chain only) and `verify-full` (the chain and the host's name).
#[derive(Debug)]
struct Verify {
    webpki: Arc<WebPkiServerVerifier>,
    check_name: bool,
}

impl ServerCertVerifier for Verify {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let verdict =
            self.webpki
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now);
        match verdict {
            // The chain is checked before the name: a name error means the chain held.
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.check_name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `prefer`, and `require` without a root certificate: encrypted, whoever answers (libpq's
/// meaning). The handshake's signatures are still checked, against the certificate shown.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl<S> MakeTlsConnect<S> for Tls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type TlsConnect = Connect;
    type Error = std::io::Error;

    /// Called for every host, also for a unix socket (`domain` empty), where no TLS happens.
    fn make_tls_connect(&mut self, domain: &str) -> Result<Connect, std::io::Error> {
        Ok(Connect {
            config: self.config.clone(),
            name: ServerName::try_from(domain.to_owned()).ok(),
            domain: domain.to_owned(),
        })
    }
}

/// The handshake with one host.
pub struct Connect {
    config: Arc<ClientConfig>,
    name: Option<ServerName<'static>>,
    domain: String,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type Error = std::io::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<TlsStream<S>, std::io::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let Some(name) = self.name else {
                return Err(std::io::Error::other(format!(
                    "host {:?} is neither a DNS name nor an IP address, as TLS needs",
                    self.domain
                )));
            };
            let tls = tokio_rustls::TlsConnector::from(self.config)
                .connect(name, stream)
                .await?;
            Ok(TlsStream(tls))
        })
    }
}

/// A TLS session with PostgreSQL.
pub struct TlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for TlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        let (_, session) = self.0.get_ref();
        match session.peer_certificates().and_then(|c| c.first()) {
            Some(cert) => end_point_binding(cert.as_ref()),
            None => ChannelBinding::none(),
        }
    }
}

/// `tls-server-end-point` (RFC 5929 §4.1): the certificate hashed with its signature's hash,
/// SHA-256 in place of MD5 or SHA-1; none for signatures without one (Ed25519, RSA-PSS).
fn end_point_binding(der: &[u8]) -> ChannelBinding {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return ChannelBinding::none();
    };
    let oid = cert.signature_algorithm.algorithm.to_id_string();
    let hash = match oid.as_str() {
        "1.2.840.113549.1.1.4"
        | "1.2.840.113549.1.1.5"
        | "1.2.840.113549.1.1.11"
        | "1.2.840.10045.4.1"
        | "1.2.840.10045.4.3.2" => sha2::Sha256::digest(der).to_vec(),
        "1.2.840.113549.1.1.12" | "1.2.840.10045.4.3.3" => sha2::Sha384::digest(der).to_vec(),
        "1.2.840.113549.1.1.13" | "1.2.840.10045.4.3.4" => sha2::Sha512::digest(der).to_vec(),
        _ => return ChannelBinding::none(),
    };
    ChannelBinding::tls_server_end_point(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, SslMode, Option<RootCert>) {
        let (rest, p) = split_tls_params(url).unwrap();
        (rest, p.mode, p.root_cert)
    }

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_both_url_forms() {
        let f = |p: &str| Some(RootCert::File(PathBuf::from(p)));
        let cases = [
            (
                "postgresql://u@h1:1,h2:2/db?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=%2Fca%20dir%2Fca.pem",
                "postgresql://u@h1:1,h2:2/db?target_session_attrs=read-write",
                SslMode::VerifyFull,
                f("/ca dir/ca.pem"),
            ),
            ("postgres://u@h/db?sslmode=require", "postgres://u@h/db", SslMode::Require, None),
            ("postgres://u@h/db", "postgres://u@h/db", SslMode::Prefer, None),
            (
                "host=h port=1 sslmode = verify-ca sslrootcert='/a b/c\\'s.pem' dbname=x",
                "host=h port=1 dbname=x",
                SslMode::VerifyCa,
                f("/a b/c's.pem"),
            ),
            ("host=/run/pg dbname=ledger", "host=/run/pg dbname=ledger", SslMode::Prefer, None),
            ("host=h sslmode=disable sslrootcert=/x", "host=h", SslMode::Disable, None),
            ("host=h sslrootcert=system", "host=h", SslMode::Prefer, Some(RootCert::System)),
        ];
        for (url, rest, mode, root) in cases {
            assert_eq!(split(url), (rest.to_owned(), mode, root), "{url}");
        }
    }

    #[test]
    fn unknown_sslmodes_and_verification_without_a_root_are_refused_by_name() {
        let e = split_tls_params("host=h sslmode=allow")
            .unwrap_err()
            .to_string();
        assert!(e.contains("allow"), "{e}");
        assert!(split_tls_params("host=h password='open").is_err());
        let (_, p) = split_tls_params("host=h sslmode=verify-full").unwrap();
        let e = Tls::new(&p).unwrap_err().to_string();
        assert!(e.contains("sslrootcert"), "{e}");
        let (_, p) = split_tls_params("host=h sslmode=verify-ca sslrootcert=/nonexistent").unwrap();
        let e = Tls::new(&p).unwrap_err().to_string();
        assert!(e.contains("/nonexistent"), "{e}");
        let (_, p) = split_tls_params("host=h sslmode=require").unwrap();
        assert_eq!(Tls::new(&p).unwrap().mode(), SslMode::Require);
    }
}

//! Reaching a ledger server: its address (`host:port` as grpcurl takes it, or a URL), TLS
//! (a CA to trust, a client certificate for mutual TLS) and a bearer token.

use crate::error::{Error, ErrorKind};
use crate::pb::ledger_client::LedgerClient;
use std::time::Duration;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Longest wait for a connection to be made (limit CONNECT_TIMEOUT).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest response the client accepts: the server's own encoding limit (16 MiB).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// How to reach a server.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// `host:port` (plain, or TLS when a CA or client certificate is given), or an
    /// `http://` / `https://` URL.
    pub server: String,
    /// Bearer token sent as `authorization: Bearer TOKEN` on every call.
    pub token: Option<String>,
    /// CA certificate (PEM) to trust for the server's certificate: turns TLS on.
    pub ca_cert: Option<Vec<u8>>,
    /// Client certificate chain and key (PEM) for mutual TLS: turns TLS on.
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to check the server's certificate against (default: the host).
    pub tls_domain: Option<String>,
}

impl ConnectOptions {
    fn tls(&self) -> bool {
        self.ca_cert.is_some() || self.client_identity.is_some()
    }
}

/// Adds the bearer token, when there is one, to every call.
#[derive(Clone, Debug)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// The generated client over one connection, with the token added to every call.
pub type RawClient = LedgerClient<InterceptedService<Channel, Bearer>>;

/// The URL of `server`: `host:port` becomes `http://host:port`, or `https://…` with TLS.
pub fn server_url(server: &str, tls: bool) -> Result<String, Error> {
    let invalid = |why: &str| {
        Error::new(
            ErrorKind::Invalid,
            format!("server address {server:?} {why}; give host:port (127.0.0.1:50051) or a URL (https://ledger.internal:50051)"),
        )
    };
    let url = match server.split_once("://") {
        Some(("http", _)) if tls => {
            return Err(invalid("is plain http:// but TLS options are given"))
        }
        Some(("http" | "https", rest)) if !rest.is_empty() => server.to_owned(),
        Some(_) => return Err(invalid("is not an http:// or https:// URL")),
        None if server
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) =>
        {
            format!("{}://{server}", if tls { "https" } else { "http" })
        }
        None => return Err(invalid("has no port")),
    };
    Ok(url)
}

/// The host and port of a URL made by [`server_url`], for messages.
fn authority(url: &str) -> &str {
    url.split_once("://")
        .map_or(url, |(_, rest)| rest.trim_end_matches('/'))
}

/// Connects (at most [`CONNECT_TIMEOUT`]). A server that is down says so: "connection refused
/// at 127.0.0.1:50051", with the cause chain for anything else.
pub async fn connect(opts: &ConnectOptions) -> Result<RawClient, Error> {
    let url = server_url(&opts.server, opts.tls())?;
    let bearer = match &opts.token {
        None => Bearer(None),
        Some(t) => Bearer(Some(
            MetadataValue::try_from(format!("Bearer {t}")).map_err(|_| {
                Error::new(
                    ErrorKind::Invalid,
                    "the token holds characters a header cannot carry",
                )
            })?,
        )),
    };
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| Error::new(ErrorKind::Invalid, format!("server address {url:?}: {e}")))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    if opts.tls() {
        endpoint = endpoint
            .tls_config(tls_config(opts))
            .map_err(|e| Error::new(ErrorKind::Invalid, format!("TLS options: {}", chain(&e))))?;
    }
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| connect_error(&e, &url))?;
    Ok(LedgerClient::with_interceptor(channel, bearer)
        .max_decoding_message_size(MAX_RESPONSE_BYTES))
}

/// A client whose channel would connect only when first used: for tests of what is sent
/// around a call, never through it.
#[cfg(test)]
pub(crate) fn unconnected() -> RawClient {
    let channel = Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
    LedgerClient::with_interceptor(channel, Bearer(None))
}

fn tls_config(opts: &ConnectOptions) -> ClientTlsConfig {
    let mut tls = ClientTlsConfig::new();
    if let Some(ca) = &opts.ca_cert {
        tls = tls.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some((cert, key)) = &opts.client_identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    if let Some(d) = &opts.tls_domain {
        tls = tls.domain_name(d.clone());
    }
    tls
}

/// "connection refused at HOST:PORT" when that is what happened, else the cause chain.
fn connect_error(e: &tonic::transport::Error, url: &str) -> Error {
    let at = authority(url);
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return Error::new(
                    ErrorKind::Connect,
                    format!("connection refused at {at}: is the ledger running there?"),
                );
            }
        }
        source = s.source();
    }
    Error::new(
        ErrorKind::Connect,
        format!("cannot reach the ledger at {at}: {}", chain(e)),
    )
}

/// An error and its causes, "outer: inner: innermost", without repeats.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port_or_urls() {
        assert_eq!(
            server_url("127.0.0.1:50051", false).unwrap(),
            "http://127.0.0.1:50051"
        );
        assert_eq!(
            server_url("ledger:50051", true).unwrap(),
            "https://ledger:50051"
        );
        assert_eq!(
            server_url("[::1]:50051", false).unwrap(),
            "http://[::1]:50051"
        );
        assert_eq!(server_url("https://l:1", true).unwrap(), "https://l:1");
        assert_eq!(server_url("http://l:1", false).unwrap(), "http://l:1");
        for bad in ["ledger", ":50051", "ftp://x:1", "http://", "host:notaport"] {
            let e = server_url(bad, false).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Invalid, "{bad}");
            assert!(e.message.contains("host:port"), "{}", e.message);
        }
        assert!(
            server_url("http://l:1", true).is_err(),
            "TLS asked for, plain URL given"
        );
    }

    #[tokio::test]
    async fn a_server_that_is_down_is_named_as_refusing_the_connection() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let opts = ConnectOptions {
            server: format!("127.0.0.1:{port}"),
            ..Default::default()
        };
        let e = connect(&opts).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Connect);
        assert!(
            e.message
                .starts_with(&format!("connection refused at 127.0.0.1:{port}")),
            "{}",
            e.message
        );
        assert!(e.is_retry_safe());
    }
}

//! TLS and mutual TLS with rustls: the server's identity, the client CA ([`TlsPem`]), and the
//! verified client certificate handed to the access layer.

use std::sync::Arc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

/// TLS material in PEM.
#[derive(Clone)]
pub struct TlsPem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    /// When set, clients must present a certificate signed by this CA (mutual TLS).
    pub client_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsPem(mutual: {})", self.client_ca.is_some())
    }
}

impl TlsPem {
    /// Reads the PEM files.
    pub fn load(
        cert: &std::path::Path,
        key: &std::path::Path,
        client_ca: Option<&std::path::Path>,
    ) -> std::io::Result<TlsPem> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot read {}: {e}", p.display()))
            })
        };
        Ok(TlsPem {
            cert: read(cert)?,
            key: read(key)?,
            client_ca: client_ca.map(read).transpose()?,
        })
    }
}

/// The verified client certificate of a mutual-TLS connection (DER), a request extension of
/// every request on it; the access layer names the caller after it.
#[derive(Clone, Debug)]
pub struct PeerCertificate(pub Arc<[u8]>);

/// The acceptor for `pem`: HTTP/2 only (ALPN `h2`); with a client CA, a client certificate
/// signed by it is required.
pub(super) fn acceptor(pem: &TlsPem) -> Result<tokio_rustls::TlsAcceptor, String> {
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &pem.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca, "the client CA")? {
                roots
                    .add(cert)
                    .map_err(|e| format!("TLS: the client CA: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .map_err(|e| format!("TLS: the client CA: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let key = PrivateKeyDer::from_pem_slice(&pem.key)
        .map_err(|e| format!("TLS: the server key is not a PEM private key: {e}"))?;
    let mut config = builder
        .with_single_cert(certificates(&pem.cert, "the server certificate")?, key)
        .map_err(|e| format!("TLS: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("TLS: {what} is not PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("TLS: {what} holds no certificate"));
    }
    Ok(certs)
}

/// The first certificate the client presented (its own), once the handshake verified it.
pub(super) fn peer_certificate<IO>(
    tls: &tokio_rustls::server::TlsStream<IO>,
) -> Option<PeerCertificate> {
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .map(|c| PeerCertificate(Arc::from(c.as_ref())))
}

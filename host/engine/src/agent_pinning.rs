//! HTTPS to a ramdisk agent, pinned to the certificate it sent (auto-TLS).
//!
//! From API 1.68 ironic-python-agent makes a self-signed certificate at every boot, serves
//! its command API with it, and sends it as `agent_verify_ca` in its heartbeats. The engine
//! then trusts that certificate, and only it, for that agent: no system roots, no CA.
//!
//! The check is an exact match of the end-entity certificate the agent presents against
//! the one it registered, followed by the usual verification of the handshake signature
//! with the certificate's key. That is stricter than building a chain to the certificate as
//! a root (nothing else could ever be accepted), and it does not depend on which signature
//! algorithms a path builder accepts for the self-signature (IPA signs with SHA-512).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Why a certificate cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("agent_verify_ca is not a PEM certificate: {0}")]
    NotPem(String),
    #[error("agent_verify_ca holds {0} certificates; expected exactly one")]
    Count(usize),
}

/// The DER of the one certificate in `pem`.
pub fn parse_pem(pem: &str) -> Result<CertificateDer<'static>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::NotPem(e.to_string()))?;
    match certs.len() {
        1 => Ok(certs.into_iter().next().expect("one")),
        n => Err(TlsError::Count(n)),
    }
}

/// Accepts exactly one certificate.
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "the agent presented a certificate other than the one it registered (agent_verify_ca)".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// How long a connection to an agent stays open unused: the calls of one heartbeat's
/// driver step reuse it; between heartbeats (seconds to minutes apart) it is closed.
/// Kept longer, every deploying node held an idle TLS connection with its buffers
/// (`bench fleet`: tens of KiB a node).
const AGENT_IDLE: Duration = Duration::from_secs(2);

/// TLS sessions a pinned client keeps for resuming: it talks to one agent. rustls's
/// default cache holds 256 and allocates room for them in every client (28 KiB each).
const RESUMABLE_SESSIONS: usize = 2;

/// An HTTP client that speaks HTTPS only to the holder of `cert`. It has no overall
/// timeout (an image write takes what it takes): callers set one per request.
pub fn pinned_client(cert: CertificateDer<'static>) -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { cert, provider }))
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::in_memory_sessions(RESUMABLE_SESSIONS);
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(AGENT_IDLE)
        .pool_max_idle_per_host(1)
        .build()
        .expect("a client over a preconfigured rustls config")
}

/// Pinned clients by certificate, so connections to an agent are reused across calls.
/// Bounded: past [`MAX_CLIENTS`] certificates the cache starts afresh (each boot of each
/// agent has its own certificate, so old entries are dead weight).
#[derive(Default)]
pub struct PinnedClients {
    clients: Mutex<HashMap<Vec<u8>, reqwest::Client>>,
}

const MAX_CLIENTS: usize = 4096;

impl PinnedClients {
    pub fn get(&self, cert: &CertificateDer<'static>) -> reqwest::Client {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(cert.as_ref()) {
            return c.clone();
        }
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        let client = pinned_client(cert.clone());
        clients.insert(cert.as_ref().to_vec(), client.clone());
        client
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deployd_agent::tls::Identity;

    /// The agent's own TLS server with a fresh identity, answering `GET /`; its url and
    /// the certificate it serves.
    async fn agent() -> (String, String) {
        let identity = Identity::generate("127.0.0.1").unwrap();
        let pem = identity.pem.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/", listener.local_addr().unwrap());
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "agent" }));
        tokio::spawn(async move { deployd_agent::tls::serve(listener, router, &identity).await });
        (url, pem)
    }

    #[tokio::test]
    async fn only_the_registered_certificate_is_accepted() {
        let (url, pem) = agent().await;
        let pinned = pinned_client(parse_pem(&pem).unwrap());
        let answer = pinned.get(&url).send().await.unwrap();
        assert_eq!(answer.text().await.unwrap(), "agent");

        // Another boot's certificate for the same address: refused in the handshake.
        let other = Identity::generate("127.0.0.1").unwrap();
        let wrong = pinned_client(parse_pem(&other.pem).unwrap());
        let err = wrong.get(&url).send().await.unwrap_err();
        assert!(
            format!("{err:?}").contains("other than the one it registered"),
            "{err:?}"
        );

        // The engine's plain client has no roots at all: no HTTPS without a pin.
        let plain = reqwest::Client::new();
        assert!(plain.get(&url).send().await.is_err());
    }

    #[test]
    fn agent_verify_ca_must_be_one_pem_certificate() {
        let one = Identity::generate("10.0.0.5").unwrap().pem;
        assert!(parse_pem(&one).is_ok());
        assert_eq!(parse_pem("not a certificate"), Err(TlsError::Count(0)));
        let two = format!("{one}{}", Identity::generate("10.0.0.6").unwrap().pem);
        assert_eq!(parse_pem(&two), Err(TlsError::Count(2)));
    }
}

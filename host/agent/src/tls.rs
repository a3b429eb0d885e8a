//! Auto-TLS, as ironic-python-agent does it from API 1.68: a self-signed certificate made
//! at every start (never written to disk), valid for the address the engine calls back,
//! served on the command API and sent to the engine as `agent_verify_ca`, which pins it.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, pki_types};

/// A certificate for this boot, and the server config that uses it.
pub struct Identity {
    /// The certificate in PEM, as `agent_verify_ca` carries it.
    pub pem: String,
    acceptor: TlsAcceptor,
}

impl Identity {
    /// A new key (ECDSA P-256) and a certificate for `host` (an IP address or a name),
    /// valid from a minute ago (clock skew) for 30 days.
    pub fn generate(host: &str) -> anyhow::Result<Identity> {
        let key = rcgen::KeyPair::generate().context("generating the agent's TLS key")?;
        let mut params = rcgen::CertificateParams::new(vec![host.to_owned()])
            .context("certificate parameters for the agent")?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "deployd-agent");
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(1);
        params.not_after = now + time::Duration::days(30);
        let cert = params
            .self_signed(&key)
            .context("signing the agent's certificate")?;
        let der = pki_types::CertificateDer::from(cert.der().to_vec());
        let key_der = pki_types::PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| anyhow::anyhow!("the agent's key: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_no_client_auth()
            .with_single_cert(vec![der], key_der)
            .context("the agent's TLS configuration")?;
        Ok(Identity {
            pem: cert.pem(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// Serves `router` over TLS on `listener` until the future is dropped. A client that fails
/// the handshake is dropped alone.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    identity: &Identity,
) -> anyhow::Result<()> {
    loop {
        let (stream, peer): (_, SocketAddr) = listener.accept().await.context("accepting")?;
        let acceptor = identity.acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(stream).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, "TLS handshake failed: {e}");
                    return;
                }
            };
            let builder = hyper::server::conn::http1::Builder::new();
            if let Err(e) = builder.serve_connection(TokioIo::new(tls), service).await {
                tracing::debug!(%peer, "connection ended: {e}");
            }
        });
    }
}

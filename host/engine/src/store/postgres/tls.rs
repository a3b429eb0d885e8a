//! TLS to the database, asked for in the store URL as libpq asks for it: `sslmode` and
//! `sslrootcert` (`postgres://deployd@db/fleet?sslmode=verify-full&sslrootcert=/etc/deployd/db-ca.pem`).
//!
//! - `disable`, or `prefer` (the default when the URL says nothing): no TLS. (libpq's
//!   `prefer` would try TLS without checking the certificate, which protects from nothing
//!   an attacker on the path cannot undo.)
//! - `require`, `verify-ca`, `verify-full`: TLS, the server's certificate checked against
//!   the CA in `sslrootcert` and its name against the URL's host, always — stricter than
//!   libpq's `require` and `verify-ca`, which check less. Without `sslrootcert` the URL is
//!   refused: there is nothing to check the server against.
//!
//! The connector is rustls with ring, as the rest of the engine's TLS.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::store::StoreError;

/// How the engine's connections to the database are made.
#[derive(Clone)]
pub(super) enum Tls {
    Plain,
    Verified(MakeRustlsConnect),
}

/// The URL's connection settings (with `sslrootcert` taken out, which tokio-postgres does
/// not know, and a verifying mode told to it as `require`) and the TLS they ask for.
pub(super) fn settings(url: &str) -> Result<(String, Tls), StoreError> {
    let refused = |why: String| StoreError::Shared(format!("the store URL: {why}"));
    let (base, query, separator) = match url.split_once("://") {
        // A URL: its parameters are the query's.
        Some(_) => match url.split_once('?') {
            Some((base, query)) => (base.to_owned(), query.to_owned(), '&'),
            None => (url.to_owned(), String::new(), '&'),
        },
        // Key-value settings (`host=db dbname=fleet sslmode=…`).
        None => (String::new(), url.to_owned(), ' '),
    };
    let (mut mode, mut root) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split(separator).filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sslrootcert", file)) => root = Some(decoded(file)),
            Some(("sslmode", value)) => mode = Some(value.to_owned()),
            _ => kept.push(pair.to_owned()),
        }
    }
    let tls = match mode.as_deref() {
        None | Some("disable") | Some("prefer") => {
            kept.extend(mode.map(|m| format!("sslmode={m}")));
            Tls::Plain
        }
        Some("require" | "verify-ca" | "verify-full") => {
            kept.push("sslmode=require".into());
            let root = root.ok_or_else(|| {
                refused(
                    "sslmode asks for TLS, and deployd checks the database's certificate: name the CA that signed it with sslrootcert=<PEM file>".into(),
                )
            })?;
            Tls::Verified(connector(&root).map_err(refused)?)
        }
        Some(other) => {
            return Err(refused(format!(
                "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
            )));
        }
    };
    let settings = match (base.is_empty(), kept.is_empty()) {
        (true, _) => kept.join(" "),
        (false, true) => base,
        (false, false) => format!("{base}?{}", kept.join("&")),
    };
    Ok((settings, tls))
}

/// A connector that trusts the certificates in the PEM file `root` and nothing else.
fn connector(root: &str) -> Result<MakeRustlsConnect, String> {
    let pem = std::fs::read(root).map_err(|e| format!("sslrootcert {root}: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("sslrootcert {root}: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("sslrootcert {root}: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("sslrootcert {root} holds no certificate"));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// A URL parameter's value with its `%XX` escapes decoded (a path may be written
/// `%2Fetc%2Fca.pem`).
fn decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_tls_settings_is_left_as_it_is() {
        let (settings, tls) = settings("postgres://deployd@db:5432/fleet").unwrap();
        assert_eq!(settings, "postgres://deployd@db:5432/fleet");
        assert!(matches!(tls, Tls::Plain));
        let (settings, _) =
            settings_of("postgres://deployd@db/fleet?sslmode=disable&connect_timeout=5");
        assert_eq!(
            settings,
            "postgres://deployd@db/fleet?connect_timeout=5&sslmode=disable"
        );
    }

    #[test]
    fn tls_without_a_ca_to_check_against_is_refused() {
        for mode in ["require", "verify-ca", "verify-full"] {
            let url = format!("postgres://deployd@db/fleet?sslmode={mode}");
            let Err(e) = settings(&url) else {
                panic!("{mode} without sslrootcert was taken");
            };
            assert!(e.to_string().contains("sslrootcert=<PEM file>"), "{e}");
        }
        let Err(e) = settings("postgres://db/fleet?sslmode=allow") else {
            panic!("an unknown sslmode was taken");
        };
        assert!(e.to_string().contains("sslmode=allow"), "{e}");
        let Err(e) = settings("postgres://db/fleet?sslmode=verify-full&sslrootcert=%2Fnone.pem")
        else {
            panic!("a missing CA file was taken");
        };
        assert!(e.to_string().contains("/none.pem"), "{e}");
    }

    fn settings_of(url: &str) -> (String, bool) {
        let (s, tls) = settings(url).unwrap();
        (s, matches!(tls, Tls::Verified(_)))
    }
}

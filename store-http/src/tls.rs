//! TLS with rustls (the `ring` provider): the server's certificate and
//! key from PEM files, and the roots an `https://` store trusts (a CA file
//! given in its URL, or the system's).

use baton_core::Error;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bad = |e: &dyn std::fmt::Display| {
        Error::invalid(
            field,
            format!("cannot read certificates from {}: {e}", path.display()),
        )
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"the file holds no PEM certificate"));
    }
    Ok(certs)
}

/// The server's TLS configuration. Errors name `tls-cert` or `tls-key`.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, Error> {
    let chain = certs("tls-cert", cert)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        Error::invalid(
            "tls-key",
            format!("cannot read a private key from {}: {e}", key.display()),
        )
    })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid("tls-cert", format!("{e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            Error::invalid(
                "tls-key",
                format!("the key does not go with the certificate: {e}"),
            )
        })?;
    Ok(Arc::new(config))
}

/// What an `https://` store trusts: the certificates in `ca` (a PEM
/// file), or the system's roots.
pub fn client_config(ca: Option<&Path>) -> Result<rustls::ClientConfig, Error> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid("store", format!("{e}")))?;
    let config = match ca {
        Some(path) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs("store", path)? {
                roots
                    .add(c)
                    .map_err(|e| Error::invalid("store", format!("ca {}: {e}", path.display())))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => {
            use hyper_rustls::ConfigBuilderExt;
            builder
                .with_native_roots()
                .map_err(|e| Error::unavailable(format!("cannot read the system's roots: {e}")))?
                .with_no_client_auth()
        }
    };
    Ok(config)
}

//! TLS beyond the `rediss://` defaults: a private certificate authority to trust instead of the
//! system's roots, and a client certificate for servers that authenticate their clients
//! (`tls-auth-clients yes`). Built into one rustls configuration that every connection of the
//! client uses (commands, pub/sub, cluster and sentinel nodes).
//!
//! rustls is compiled in only with the `tls` feature. Without it `TlsOptions` still exists, so
//! code that sets it compiles either way, but [`configure`] refuses a TLS URL or `Config::tls`
//! with a clear error: fred would otherwise connect to a `rediss://` URL in plain text.

#[cfg(feature = "tls")]
use fred::rustls::pki_types::pem::PemObject;
#[cfg(feature = "tls")]
use fred::rustls::pki_types::{CertificateDer, PrivateKeyDer};
#[cfg(feature = "tls")]
use fred::rustls::{ClientConfig, RootCertStore};
use fred::types::config::Config as FredConfig;
#[cfg(feature = "tls")]
use fred::types::config::TlsConnector;

use crate::config::{Config, TlsOptions};
use crate::error::{Error, Result};

impl TlsOptions {
    /// The rustls connector these options describe; a malformed certificate or key is an
    /// [`Error::InvalidArgument`] naming which.
    #[cfg(feature = "tls")]
    pub(crate) fn connector(&self) -> Result<TlsConnector> {
        let roots = match &self.root_certificates_pem {
            Some(pem) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates(pem, "tls root_certificates_pem")? {
                    roots.add(cert).map_err(|err| {
                        invalid(format!(
                            "tls root_certificates_pem: unusable certificate: {err}"
                        ))
                    })?;
                }
                roots
            }
            None => system_roots(),
        };
        let builder = ClientConfig::builder().with_root_certificates(roots);
        let config = match &self.client_identity_pem {
            Some((cert_pem, key_pem)) => {
                let chain = certificates(cert_pem, "tls client certificate")?;
                let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|err| {
                    // The error names the PEM problem, never the key's bytes.
                    invalid(format!("tls client private key: {err}"))
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|err| invalid(format!("tls client certificate and key: {err}")))?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(TlsConnector::from(config))
    }
}

/// Applies `config`'s TLS settings to fred's configuration parsed from the same URL: the
/// connector of [`Config::tls`], which needs a TLS URL.
#[cfg(feature = "tls")]
pub(crate) fn configure(config: &Config, fred_config: &mut FredConfig) -> Result<()> {
    if let Some(tls) = &config.tls {
        if !fred_config.uses_tls() {
            return Err(invalid(format!(
                "tls options are set but `{}` does not use TLS (use rediss://)",
                config.redacted_url()
            )));
        }
        fred_config.tls = Some(tls.connector()?.into());
    }
    Ok(())
}

/// Without the `tls` feature: refuses a TLS URL (which fred would silently use in plain text)
/// and `Config::tls`.
#[cfg(not(feature = "tls"))]
pub(crate) fn configure(config: &Config, _fred_config: &mut FredConfig) -> Result<()> {
    // fred recognises TLS by these scheme prefixes (`rediss-cluster`, `valkeys-sentinel`, ...).
    let tls_url = url::Url::parse(&config.url).is_ok_and(|url| {
        ["rediss", "valkeys"]
            .iter()
            .any(|s| url.scheme().starts_with(s))
    });
    let what = match (tls_url, config.tls.is_some()) {
        (true, _) => format!("the url `{}` uses TLS", config.redacted_url()),
        (false, true) => "Config::tls is set".to_string(),
        (false, false) => return Ok(()),
    };
    Err(invalid(format!(
        "{what}, but TLS support is not compiled in: enable ferrisson's `tls` feature \
         (ferrisson = {{ version = \"0.1\", features = [\"tls\"] }})"
    )))
}

/// Every certificate of `pem`; at least one.
#[cfg(feature = "tls")]
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|err| invalid(format!("{what}: {err}")))?;
    if certs.is_empty() {
        return Err(invalid(format!("{what}: no CERTIFICATE block in the PEM")));
    }
    Ok(certs)
}

/// The system's root certificates, as fred loads them for plain `rediss://`.
#[cfg(feature = "tls")]
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    // A system certificate rustls cannot use is skipped: the others still verify servers.
    let (_added, _skipped) =
        roots.add_parsable_certificates(fred::rustls_native_certs::load_native_certs().certs);
    roots
}

/// Whether fred reports `kind` as a TLS error (a kind that exists only with TLS compiled in).
#[cfg(feature = "tls")]
pub(crate) fn is_tls_kind(kind: &fred::error::ErrorKind) -> bool {
    matches!(kind, fred::error::ErrorKind::Tls)
}

/// Without TLS compiled in, fred has no TLS error kind.
#[cfg(not(feature = "tls"))]
pub(crate) fn is_tls_kind(_kind: &fred::error::ErrorKind) -> bool {
    false
}

/// Whether a connection error is rustls refusing the handshake, or reporting the server's
/// refusal (fred passes rustls errors on as text inside an I/O error).
pub(crate) fn handshake_refused(details: &str) -> bool {
    [
        "InvalidCertificate",
        "AlertReceived",
        "NoCertificatesPresented",
    ]
    .iter()
    .any(|marker| details.contains(marker))
}

fn invalid(message: String) -> Error {
    Error::InvalidArgument(message)
}

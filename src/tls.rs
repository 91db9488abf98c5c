//! TLS beyond the `rediss://` defaults: a private certificate authority to trust instead of the
//! system's roots, and a client certificate for servers that authenticate their clients
//! (`tls-auth-clients yes`). Built into one rustls configuration that every connection of the
//! client uses (commands, pub/sub, cluster and sentinel nodes).

use fred::rustls::pki_types::pem::PemObject;
use fred::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use fred::rustls::{ClientConfig, RootCertStore};
use fred::types::config::TlsConnector;

use crate::error::{Error, Result};

/// TLS settings of a [`Config`](crate::Config), for `rediss://` URLs.
///
/// Without them a `rediss://` URL trusts the system's root certificates and presents no client
/// certificate. `Debug` never prints the client's private key.
///
/// ```
/// use ferrisson::{Config, TlsOptions};
///
/// # fn pems() -> (Vec<u8>, Vec<u8>, Vec<u8>) { (vec![], vec![], vec![]) }
/// let (ca_pem, cert_pem, key_pem) = pems(); // e.g. std::fs::read("ca.crt")?
/// let mut config = Config::new("rediss://127.0.0.1:6380");
/// config.tls = Some(TlsOptions::default().trust_pem(ca_pem).identity_pem(cert_pem, key_pem));
/// assert!(!format!("{config:?}").contains("PRIVATE KEY"));
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct TlsOptions {
    /// PEM certificates of the authorities to trust instead of the system's roots (one or more
    /// `CERTIFICATE` blocks). `None`: the system's roots.
    pub root_certificates_pem: Option<Vec<u8>>,
    /// The client's certificate chain (PEM, leaf first) and private key (PEM: PKCS#8, PKCS#1 or
    /// SEC1), for servers that require client certificates. `None`: no client certificate.
    pub client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsOptions {
    /// Trusts the authorities in `pem` (instead of the system's roots).
    ///
    /// ```
    /// let options = ferrisson::TlsOptions::default().trust_pem(b"...".to_vec());
    /// assert!(options.root_certificates_pem.is_some());
    /// ```
    pub fn trust_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificates_pem = Some(pem.into());
        self
    }

    /// Presents the certificate chain `cert_pem` with its private key `key_pem`.
    ///
    /// ```
    /// let options = ferrisson::TlsOptions::default().identity_pem(b"..".to_vec(), b"..".to_vec());
    /// assert!(options.client_identity_pem.is_some());
    /// ```
    pub fn identity_pem(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_identity_pem = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The rustls connector these options describe; a malformed certificate or key is an
    /// [`Error::InvalidArgument`] naming which.
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

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field(
                "root_certificates_pem",
                &self
                    .root_certificates_pem
                    .as_ref()
                    .map(|pem| format!("{} bytes", pem.len())),
            )
            .field(
                "client_identity_pem",
                &self
                    .client_identity_pem
                    .as_ref()
                    .map(|(cert, _)| format!("certificate {} bytes, key ***", cert.len())),
            )
            .finish()
    }
}

/// Every certificate of `pem`; at least one.
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
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    // A system certificate rustls cannot use is skipped: the others still verify servers.
    let (_added, _skipped) =
        roots.add_parsable_certificates(fred::rustls_native_certs::load_native_certs().certs);
    roots
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

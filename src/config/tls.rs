//! TLS settings as data ([`TlsOptions`]); the transport builds them into rustls
//! (`src/transport/tls.rs`), with the `tls` feature.

/// TLS settings of a [`Config`](crate::Config), for `rediss://` URLs.
///
/// Without them a `rediss://` URL trusts the system's root certificates and presents no client
/// certificate. `Debug` never prints the client's private key.
///
/// TLS needs ferrisson's `tls` feature (`ferrisson = { version = "0.1", features = ["tls"] }`).
/// Without it this type still exists, but connecting with a `rediss://` URL or with
/// `Config::tls` set fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument) saying so.
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
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let roots = self.root_certificates_pem.as_ref();
        let identity = self.client_identity_pem.as_ref();
        f.debug_struct("TlsOptions")
            .field(
                "root_certificates_pem",
                &roots.map(|pem| format!("{} bytes", pem.len())),
            )
            .field(
                "client_identity_pem",
                &identity.map(|(cert, _)| format!("certificate {} bytes, key ***", cert.len())),
            )
            .finish()
    }
}

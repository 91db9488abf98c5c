//! Locks over TLS with a private certificate authority and, for servers that authenticate
//! their clients (`tls-auth-clients yes`), a client certificate.
//!
//! ```text
//! cargo run --features tls --example tls -- rediss://127.0.0.1:6380 ca.crt [client.crt client.key]
//! ```
//!
//! Without a CA file the system's root certificates are trusted. A `rediss://` URL is what
//! turns TLS on; every connection of the client (commands, pub/sub, cluster and sentinel
//! nodes) uses the same settings.

use ferrisson::{Client, Config, TlsOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(url) = args.first() else {
        return Err(
            "usage: tls rediss://HOST:PORT [CA_PEM [CLIENT_CERT_PEM CLIENT_KEY_PEM]]".into(),
        );
    };
    let mut tls = TlsOptions::default();
    if let Some(ca) = args.get(1) {
        tls = tls.trust_pem(std::fs::read(ca).map_err(|err| format!("{ca}: {err}"))?);
    }
    if let (Some(cert), Some(key)) = (args.get(2), args.get(3)) {
        let read = |path: &String| std::fs::read(path).map_err(|err| format!("{path}: {err}"));
        tls = tls.identity_pem(read(cert)?, read(key)?);
    }
    let mut config = Config::new(url.as_str());
    config.tls = Some(tls);
    // A bad certificate, an untrusted server or a missing client certificate is an
    // `Error::InvalidArgument` here, saying which: not an outage to retry.
    let client = Client::new(config).await?;

    let lock = client.lock("example:tls");
    let guard = lock.lock().await?;
    println!(
        "locked {} over TLS (hold count {})",
        lock.name(),
        lock.hold_count().await?
    );
    guard.unlock().await?;
    client.shutdown().await;
    Ok(())
}

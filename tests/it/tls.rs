//! TLS to a local `redis-server` TLS port (issue 13, section 4), with a certificate authority,
//! a server certificate and a client certificate generated for the test run: the server
//! requires client certificates (`tls-auth-clients yes`). ferrisson trusts the private CA and
//! presents the client certificate through `Config::tls`; commands, pub/sub wake-ups and
//! watchdog renewals all go over TLS. Without the CA, or without the client certificate, the
//! connection fails with a clear error, and no key material appears in `Debug` output.

use crate::support;

use std::time::{Duration, Instant};

use ferrisson::{Config, Error, Owner, TlsOptions};
use support::redis_state::{channel_of, wait_numsub};
use support::tls::{generate_pki, tls_server};
use support::{connect_with, raw_client};
use tokio::time::timeout;

fn tls_config(port: u16, tls: Option<TlsOptions>) -> Config {
    let mut config = Config::new(format!("rediss://127.0.0.1:{port}"));
    config.tls = tls;
    // Long enough that the waiter's TTL-bounded retries (one per lease) rarely coincide with
    // the release, so the wake-up is the unlock message's; short enough to see renewals.
    config.watchdog_timeout = Duration::from_millis(2400);
    config.connect_timeout = Duration::from_secs(2);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_over_tls_with_a_private_ca_and_a_client_certificate() {
    if support::tls::unsupported() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, tls_port, pki) = tls_server(dir.path());
    let raw = raw_client(&server.url()).await;
    let options = TlsOptions::default()
        .trust_pem(pki.ca.clone())
        .identity_pem(pki.client_cert.clone(), pki.client_key.clone());
    let holder_client = connect_with(tls_config(tls_port, Some(options.clone()))).await;
    let waiter_client = connect_with(tls_config(tls_port, Some(options))).await;
    let name = "tls:lock";

    let guard = holder_client
        .lock(name)
        .with_owner(Owner::new())
        .lock()
        .await
        .expect("lock over TLS");
    let waiter = tokio::spawn({
        let lock = waiter_client.lock(name).with_owner(Owner::new());
        async move { lock.try_lock_within(Duration::from_secs(10)).await }
    });
    wait_numsub(&raw, &channel_of(name), 1, Duration::from_secs(5)).await;
    // Renewals over TLS keep the 2.4 s lease alive past its end.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(!guard.is_lost());
    assert!(!waiter.is_finished());
    guard.unlock().await.expect("release over TLS");
    let released = Instant::now();
    let taken = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was not woken over TLS")
        .expect("waiter task")
        .expect("acquire")
        .acquired()
        .expect("acquired");
    assert!(released.elapsed() < Duration::from_secs(1));
    assert_eq!(taken.acquisition().woken_by, ferrisson::WokenBy::Message);
    taken.unlock().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_certificate_fails_the_connection_clearly() {
    if support::tls::unsupported() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, tls_port, pki) = tls_server(dir.path());
    // The system's roots do not know the test CA.
    let options = TlsOptions::default().identity_pem(pki.client_cert, pki.client_key);
    let err = ferrisson::Client::new(tls_config(tls_port, Some(options)))
        .await
        .expect_err("the server's certificate is not trusted");
    let text = err.to_string();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(text.to_lowercase().contains("certificate"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_client_certificate_fails_instead_of_locking() {
    if support::tls::unsupported() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, tls_port, pki) = tls_server(dir.path());
    let options = TlsOptions::default().trust_pem(pki.ca);
    let started = Instant::now();
    let outcome = match ferrisson::Client::new(tls_config(tls_port, Some(options))).await {
        // With TLS 1.3 the server's refusal can arrive after the handshake: then the first
        // command fails.
        Ok(client) => client
            .lock("tls:no-client-cert")
            .with_owner(Owner::new())
            .try_lock()
            .await
            .map(drop),
        Err(err) => Err(err),
    };
    let err = outcome.expect_err("the server requires a client certificate");
    assert!(
        matches!(err, Error::InvalidArgument(_) | Error::Unavailable(_)),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_options_are_typed_errors_and_keys_never_printed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = generate_pki(dir.path());
    // TLS options on a URL without TLS.
    let mut config = Config::new("redis://127.0.0.1:1");
    config.tls = Some(TlsOptions::default().trust_pem(pki.ca.clone()));
    let err = ferrisson::Client::new(config)
        .await
        .expect_err("redis:// with tls");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // Garbage where PEM belongs.
    for options in [
        TlsOptions::default().trust_pem(b"not a certificate".to_vec()),
        TlsOptions::default().identity_pem(pki.client_cert.clone(), b"not a key".to_vec()),
    ] {
        let err = ferrisson::Client::new(tls_config(1, Some(options)))
            .await
            .expect_err("malformed PEM");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        assert!(err.to_string().contains("tls"), "{err}");
    }
    // The private key stays out of Debug output.
    let options = TlsOptions::default()
        .trust_pem(pki.ca)
        .identity_pem(pki.client_cert, pki.client_key.clone());
    let printed = format!("{:?}", tls_config(1, Some(options)));
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");
    let key_body: String = pki.client_key.lines().nth(1).unwrap_or_default().to_owned();
    assert!(!printed.contains(&key_body), "{printed}");
}

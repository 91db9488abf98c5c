//! A TLS-enabled `redis-server` with a certificate authority, a server certificate and a client
//! certificate generated for the test run (the server requires client certificates).

use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
};

use super::{free_port, RedisServer};

/// PEM material of one test run.
pub struct Pki {
    pub ca: String,
    pub client_cert: String,
    pub client_key: String,
}

/// A distinguished name of just a common name (rcgen's default is the same for every
/// certificate, which would make each look self-signed).
fn named(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

/// Generates a CA, a server certificate for 127.0.0.1 and a client certificate, and writes them
/// all into `dir` (`ca.crt`, `server.crt`, `server.key`, `client.crt`, `client.key`).
pub fn generate_pki(dir: &Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = named("ferrisson test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("CA key"))
        .expect("CA certificate");
    let server_key = KeyPair::generate().expect("server key");
    let mut server_params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("server params");
    server_params.distinguished_name = named("ferrisson test server");
    let server_cert = server_params
        .signed_by(&server_key, &ca)
        .expect("server certificate");
    let client_key = KeyPair::generate().expect("client key");
    let mut client_params =
        CertificateParams::new(vec!["ferrisson-test-client".into()]).expect("client params");
    client_params.distinguished_name = named("ferrisson test client");
    let client_cert = client_params
        .signed_by(&client_key, &ca)
        .expect("client certificate");
    for (file, pem) in [
        ("ca.crt", ca.pem()),
        ("server.crt", server_cert.pem()),
        ("server.key", server_key.serialize_pem()),
        ("client.crt", client_cert.pem()),
        ("client.key", client_key.serialize_pem()),
    ] {
        std::fs::write(dir.join(file), pem).expect("write a PEM file");
    }
    Pki {
        ca: ca.pem(),
        client_cert: client_cert.pem(),
        client_key: client_key.serialize_pem(),
    }
}

/// Whether the test server binary lacks TLS (the registries' Redis 6.2 and Valkey builds do):
/// then the calling test is skipped with that reason (see [`super::skip`]).
pub fn unsupported() -> bool {
    super::skip(
        super::server_binary().tls,
        "this server binary was built without TLS",
    )
}

/// A server with a plain port (for the fixture and assertions) and a TLS port that requires
/// client certificates; returns it with the TLS port and the test's PEM material.
pub fn tls_server(pki_dir: &Path) -> (RedisServer, u16, Pki) {
    let pki = generate_pki(pki_dir);
    let tls_port = free_port();
    let file = |name: &str| pki_dir.join(name).to_string_lossy().into_owned();
    let args = [
        "--tls-port".to_owned(),
        tls_port.to_string(),
        "--tls-cert-file".to_owned(),
        file("server.crt"),
        "--tls-key-file".to_owned(),
        file("server.key"),
        "--tls-ca-cert-file".to_owned(),
        file("ca.crt"),
        "--tls-auth-clients".to_owned(),
        "yes".to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (RedisServer::start_with_args(&args), tls_port, pki)
}

//! A TLS front for a plain-HTTP test server: what makes an upstream or a collector an
//! `https://` one with a private CA (the auth crate's test CA, whose server certificate names
//! `localhost` and `127.0.0.1`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// The test CA's certificate file (PEM): what `--upstream-tls-roots` and
/// `OTEL_EXPORTER_OTLP_CERTIFICATE` are given.
pub fn ca_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../auth/tests/fixtures/tls-ca.pem")
}

/// Accept TLS on a free loopback port and relay each connection to `target` in the clear,
/// on a runtime of its own for the life of the test process; the port's address.
pub fn relay(target: SocketAddr) -> SocketAddr {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../auth/tests/fixtures");
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(fixtures.join("tls-server.pem"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_file(fixtures.join("tls-server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
    });
    addr
}

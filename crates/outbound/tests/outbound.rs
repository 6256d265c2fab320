//! The outbound client against real sockets: an HTTPS server with a private CA (trusted only
//! when given), connections pooled, an `HTTPS_PROXY`-style CONNECT tunnel, an `HTTP_PROXY`
//! forward proxy with credentials, and `NO_PROXY`.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use durable_mcp_outbound::{Outbound, OutboundError};
use http::Request;
use http_body_util::Full;
use hyper_util::client::proxy::matcher::Matcher;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../auth/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

const DEADLINE: Duration = Duration::from_secs(5);

/// Read one HTTP/1.1 request head (no body) from `stream`; its text.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// An HTTPS server (the fixtures' certificate for localhost and 127.0.0.1) answering `ok`
/// to every request on keep-alive connections; its port and the connections it accepted.
async fn https_server() -> (u16, Arc<AtomicU64>) {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(fixture("tls-server.pem").as_bytes())
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_slice(fixture("tls-server.key").as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicU64::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    return;
                };
                while read_head(&mut stream).await.is_some() {
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    (port, accepted)
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::new(Bytes::new())).unwrap()
}

#[tokio::test]
async fn https_with_a_private_ca_only_when_trusted_and_pooled() {
    let (port, accepted) = https_server().await;
    let url = format!("https://localhost:{port}/jwks");
    let untrusting = Outbound::with_proxies(None, Matcher::builder().build()).unwrap();
    let refused = untrusting
        .send(get(&url), DEADLINE, 1024)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, OutboundError::Connect { .. }),
        "an unknown CA is refused before anything is sent: {refused}"
    );

    let client =
        Outbound::with_proxies(Some(&fixture("tls-ca.pem")), Matcher::builder().build()).unwrap();
    for _ in 0..3 {
        let response = client.send(get(&url), DEADLINE, 1024).await.unwrap();
        assert_eq!(
            (response.status().as_u16(), response.body().as_ref()),
            (200, &b"ok"[..])
        );
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "one refused handshake, then one pooled connection for three requests"
    );
    assert!(matches!(
        Outbound::new(Some("not a pem")),
        Err(OutboundError::Roots(_))
    ));
}

/// A proxy: CONNECT tunnels (counted) to their target, and plain requests (absolute form)
/// answered by itself with the request line and its `Proxy-Authorization`.
async fn proxy() -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let tunnels = Arc::new(AtomicU64::new(0));
    let counter = tunnels.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let Some(head) = read_head(&mut client).await else {
                    return;
                };
                let request_line = head.lines().next().unwrap_or_default().to_owned();
                if let Some(target) = request_line
                    .strip_prefix("CONNECT ")
                    .and_then(|rest| rest.split(' ').next())
                {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                } else {
                    let auth = head
                        .lines()
                        .find_map(|l| l.strip_prefix("proxy-authorization: "))
                        .unwrap_or("none")
                        .to_owned();
                    let body = format!("{request_line}|{auth}");
                    let _ = client
                        .write_all(
                            format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            )
                            .as_bytes(),
                        )
                        .await;
                }
            });
        }
    });
    (port, tunnels)
}

#[tokio::test]
async fn proxies_tunnel_https_forward_http_and_skip_no_proxy_hosts() {
    let (server, accepted) = https_server().await;
    let (proxy_port, tunnels) = proxy().await;
    let ca = fixture("tls-ca.pem");
    let proxies = Matcher::builder()
        .https(format!("http://127.0.0.1:{proxy_port}"))
        .http(format!("http://app:s3cret@127.0.0.1:{proxy_port}"))
        .build();
    let client = Outbound::with_proxies(Some(&ca), proxies).unwrap();

    let response = client
        .send(
            get(&format!("https://localhost:{server}/v1/traces")),
            DEADLINE,
            1024,
        )
        .await
        .unwrap();
    assert_eq!(response.body().as_ref(), b"ok");
    assert_eq!(
        tunnels.load(Ordering::SeqCst),
        1,
        "https went through a CONNECT tunnel"
    );

    let response = client
        .send(get("http://upstream.test:8080/mcp"), DEADLINE, 1024)
        .await
        .unwrap();
    let seen = String::from_utf8(response.body().to_vec()).unwrap();
    assert!(
        seen.starts_with("GET http://upstream.test:8080/mcp HTTP/1.1|Basic "),
        "absolute form with the proxy's credentials: {seen}"
    );

    let secure = Matcher::builder()
        .all("https://user:pw@proxy.test:443".to_owned())
        .build();
    let refused = Outbound::with_proxies(None, secure)
        .unwrap()
        .send(get("https://example.test/"), DEADLINE, 1024)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("not an http:// proxy") && !refused.to_string().contains("pw"),
        "{refused}"
    );
    let direct = Matcher::builder()
        .all(format!("http://127.0.0.1:{proxy_port}"))
        .no("localhost")
        .build();
    let client = Outbound::with_proxies(Some(&ca), direct).unwrap();
    let before = accepted.load(Ordering::SeqCst);
    client
        .send(
            get(&format!("https://localhost:{server}/jwks")),
            DEADLINE,
            1024,
        )
        .await
        .unwrap();
    assert_eq!(tunnels.load(Ordering::SeqCst), 1, "NO_PROXY: no tunnel");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        before + 1,
        "straight to the server"
    );
}

#[tokio::test]
async fn an_unreachable_target_is_a_connect_error_and_a_slow_one_times_out() {
    let client = Outbound::with_proxies(None, Matcher::builder().build()).unwrap();
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = client
        .send(get(&format!("http://127.0.0.1:{closed}/")), DEADLINE, 1024)
        .await
        .unwrap_err();
    assert!(matches!(error, OutboundError::Connect { .. }), "{error}");
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let error = client
        .send(
            get(&format!("http://127.0.0.1:{port}/")),
            Duration::from_millis(300),
            1024,
        )
        .await
        .unwrap_err();
    assert!(matches!(error, OutboundError::Timeout(_)), "{error}");
    drop(silent);
}

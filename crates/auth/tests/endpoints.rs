//! The authorization server's endpoints for real: a JWKS over HTTPS (a local TLS server
//! whose certificate a test CA signed) and RFC 7662 introspection over HTTP, both on
//! 127.0.0.1 in the test.

#![allow(clippy::unwrap_used, missing_docs)] // tests: a panic is the failure report

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_mcp_auth::{
    AuthError, AuthMethod, FetchFailures, IntrospectionConfig, OAuth, OAuthConfig,
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

const ISSUER: &str = "https://auth.test";
const RESOURCE: &str = "https://mcp.test/mcp";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// What a test endpoint saw and answers.
#[derive(Default)]
struct Seen {
    requests: AtomicU64,
    last: Mutex<String>,
}

type Answer = Arc<dyn Fn(&str) -> Value + Send + Sync>;

/// Serve one HTTP/1.1 exchange on `stream`: read the request (head and body), answer JSON
/// (an answer with an `error` member as a 400, as OAuth endpoints send their errors).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, seen: &Seen, answer: &Answer) {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request).into_owned();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length = text[..head_end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if request.len() >= head_end + 4 + length {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&request).into_owned();
    seen.requests.fetch_add(1, Ordering::SeqCst);
    *seen.last.lock().unwrap() = text.clone();
    let answer = answer(&text);
    let status = if answer.get("error").is_some() {
        "400 Bad Request"
    } else {
        "200 OK"
    };
    let body = answer.to_string();
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// An endpoint on 127.0.0.1 (TLS with the test CA's server certificate if `tls`); its URL
/// base (`http://127.0.0.1:PORT` or `https://...`).
async fn endpoint(tls: bool, answer: Answer) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let acceptor = tls.then(|| {
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(fixture("tls-server.pem").as_bytes())
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_slice(fixture("tls-server.key").as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    });
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (seen, answer, acceptor) = (s.clone(), answer.clone(), acceptor.clone());
            tokio::spawn(async move {
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            exchange(stream, &seen, &answer).await;
                        }
                    }
                    None => exchange(tcp, &seen, &answer).await,
                }
            });
        }
    });
    let scheme = if tls { "https" } else { "http" };
    (format!("{scheme}://{addr}"), seen)
}

fn token() -> String {
    token_until(now() + 600)
}

fn token_until(exp: u64) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("ed-1".into());
    let claims =
        json!({"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "exp": exp, "scope": "mcp"});
    jsonwebtoken::encode(
        &header,
        &claims,
        &EncodingKey::from_ed_pem(fixture("ed.pem").as_bytes()).unwrap(),
    )
    .unwrap()
}

fn jwks() -> Answer {
    let set = json!({"keys": [serde_json::from_str::<Value>(&fixture("ed.jwk.json")).unwrap()]});
    Arc::new(move |_| set.clone())
}

/// The MCP spec requires HTTPS for authorization server endpoints: a JWKS served over TLS
/// is fetched and verified against the configured extra root. A token past its `exp` (and
/// the leeway) is refused as expired.
#[tokio::test]
async fn https_jwks_is_fetched_with_the_configured_root() {
    let (base, seen) = endpoint(true, jwks()).await;
    let mut config = OAuthConfig::new(ISSUER, RESOURCE, format!("{base}/jwks"));
    config.tls_roots_pem = Some(fixture("tls-ca.pem"));
    let oauth = OAuth::new(config).unwrap();
    let who = oauth.verify(&token()).await.unwrap();
    assert_eq!(who.principal.as_str(), "oauth:https://auth.test#alice");
    assert_eq!(who.method, AuthMethod::Jwt);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
    assert!(seen.last.lock().unwrap().starts_with("GET /jwks HTTP/1.1"));
    assert_eq!(
        oauth.verify(&token_until(now() - 120)).await,
        Err(AuthError::Expired)
    );
    assert_eq!(
        oauth.take_fetch_failures(),
        FetchFailures::default(),
        "no fetch failed"
    );
}

/// A certificate no trusted root signed: nothing is fetched, every token is refused (503,
/// never let through), and the failed fetch is counted once.
#[tokio::test]
async fn https_jwks_with_an_untrusted_certificate_is_refused() {
    let (base, seen) = endpoint(true, jwks()).await;
    let oauth = OAuth::new(OAuthConfig::new(ISSUER, RESOURCE, format!("{base}/jwks"))).unwrap();
    let refused = oauth.verify(&token()).await;
    assert!(
        matches!(refused, Err(AuthError::Unavailable(_))),
        "{refused:?}"
    );
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        0,
        "the TLS handshake failed before any request"
    );
    assert_eq!(
        oauth.take_fetch_failures(),
        FetchFailures {
            jwks: 1,
            introspection: 0
        }
    );
    assert_eq!(
        oauth.take_fetch_failures(),
        FetchFailures::default(),
        "each failure is taken once"
    );
}

/// RFC 7662: an opaque token is introspected (form-encoded, with the client's Basic
/// credentials), its answer cached until the token's `exp`, and checked (active, aud).
#[tokio::test]
async fn opaque_tokens_are_introspected_and_cached_until_they_expire() {
    let exp = now() + 2;
    let answer: Answer = Arc::new(move |request: &str| {
        if request.contains("token=opaque-good") {
            json!({"active": true, "sub": "bob", "aud": RESOURCE, "iss": ISSUER, "exp": exp, "scope": "mcp files:read"})
        } else if request.contains("token=opaque-elsewhere") {
            json!({"active": true, "sub": "bob", "aud": "https://other.test", "exp": exp})
        } else {
            json!({"active": false})
        }
    });
    let (base, seen) = endpoint(false, answer).await;
    let mut config = OAuthConfig::new(ISSUER, RESOURCE, "http://127.0.0.1:9/unused");
    config.jwks_url = None;
    config.leeway = Duration::ZERO;
    config.introspection = Some(IntrospectionConfig::new(
        format!("{base}/introspect"),
        Some("rs".into()),
        Some("s3cret".into()),
    ));
    let oauth = OAuth::new(config).unwrap();
    let who = oauth.verify("opaque-good").await.unwrap();
    assert_eq!(who.principal.as_str(), "oauth:https://auth.test#bob");
    assert_eq!(who.method, AuthMethod::Introspection);
    assert!(who.scopes.contains("files:read"));
    let request = seen.last.lock().unwrap().clone();
    assert!(
        request.starts_with("POST /introspect HTTP/1.1"),
        "{request}"
    );
    assert!(
        request.contains("token=opaque-good&token_type_hint=access_token"),
        "{request}"
    );
    // base64("rs:s3cret")
    assert!(
        request
            .to_ascii_lowercase()
            .contains("authorization: basic cnm6cznjcmv0"),
        "{request}"
    );
    assert_eq!(oauth.verify("opaque-good").await.unwrap(), who);
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1, "cached");
    assert!(matches!(
        oauth.verify("opaque-inactive").await,
        Err(AuthError::InvalidToken(_))
    ));
    assert!(matches!(
        oauth.verify("opaque-inactive").await,
        Err(AuthError::InvalidToken(_))
    ));
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        2,
        "a refusal is cached too (briefly)"
    );
    assert!(
        matches!(
            oauth.verify("opaque-elsewhere").await,
            Err(AuthError::InvalidToken(_))
        ),
        "another resource's token"
    );
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert_eq!(
        oauth.verify("opaque-good").await,
        Err(AuthError::Expired),
        "expired: asked again, refused"
    );
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        4,
        "the cache ended with the token"
    );
}

/// oidc-provider answers the introspection of a token it cannot read (any JWT-shaped
/// string) with 400 `unsupported_token_type`: an invalid token (401), not an outage (503),
/// and cached like any refusal. Another 400 is an outage.
#[tokio::test]
async fn an_introspection_refusing_the_token_type_means_an_invalid_token() {
    let answer: Answer = Arc::new(|request: &str| {
        if request.contains("token=bad-request") {
            json!({"error": "invalid_request"})
        } else {
            json!({"error": "unsupported_token_type", "error_description": "unsupported token type"})
        }
    });
    let (base, seen) = endpoint(false, answer).await;
    let mut config = OAuthConfig::new(ISSUER, RESOURCE, "http://127.0.0.1:9/unused");
    config.jwks_url = None;
    config.introspection = Some(IntrospectionConfig::new(
        format!("{base}/introspect"),
        None,
        None,
    ));
    let oauth = OAuth::new(config).unwrap();
    let jwt_shaped = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln";
    assert!(matches!(
        oauth.verify(jwt_shaped).await,
        Err(AuthError::InvalidToken(_))
    ));
    assert!(matches!(
        oauth.verify(jwt_shaped).await,
        Err(AuthError::InvalidToken(_))
    ));
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        1,
        "the refusal is cached"
    );
    assert_eq!(
        oauth.take_fetch_failures(),
        FetchFailures::default(),
        "not a failure of the authorization server"
    );
    assert!(
        matches!(
            oauth.verify("bad-request").await,
            Err(AuthError::Unavailable(_))
        ),
        "a 400 about the request itself"
    );
    assert_eq!(
        oauth.take_fetch_failures(),
        FetchFailures {
            jwks: 0,
            introspection: 1
        }
    );
}

/// RFC 9068: with `require_at_jwt`, a JWT whose `typ` is not `at+jwt` is refused, one
/// whose `typ` is `at+jwt` (or `application/at+jwt`) passes; without it both pass.
#[tokio::test]
async fn at_jwt_typ_is_required_when_asked() {
    let (base, _seen) = endpoint(false, jwks()).await;
    let signed = |typ: &str| {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some("ed-1".into());
        header.typ = Some(typ.into());
        let claims = json!({"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "exp": now() + 600});
        jsonwebtoken::encode(
            &header,
            &claims,
            &EncodingKey::from_ed_pem(fixture("ed.pem").as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let mut config = OAuthConfig::new(ISSUER, RESOURCE, format!("{base}/jwks"));
    let lenient = OAuth::new(config.clone()).unwrap();
    assert!(lenient.verify(&signed("JWT")).await.is_ok());
    config.require_at_jwt = true;
    let strict = OAuth::new(config).unwrap();
    assert!(
        matches!(
            strict.verify(&signed("JWT")).await,
            Err(AuthError::InvalidToken(_))
        ),
        "an ID-token-like typ"
    );
    assert!(strict.verify(&signed("at+jwt")).await.is_ok());
    assert!(strict.verify(&signed("application/AT+JWT")).await.is_ok());
}

/// Keys and token answers fetched in the clear can be forged on the path: a plain-HTTP
/// endpoint of another host is refused at start unless explicitly allowed.
#[test]
fn plain_http_endpoints_elsewhere_are_refused_unless_allowed() {
    let mut config = OAuthConfig::new(ISSUER, RESOURCE, "http://auth.test/jwks");
    let refused = OAuth::new(config.clone()).unwrap_err().to_string();
    assert!(refused.contains("--auth-allow-insecure-http"), "{refused}");
    config.allow_insecure_http = true;
    assert!(OAuth::new(config).is_ok());
}

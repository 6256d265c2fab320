//! Token parsing: an `Authorization` header is parsed (API keys, bearer syntax), a JWT's
//! header and, for tokens signed with a key the server trusts, its claims are checked,
//! all without a panic; only a well-formed token with the right issuer, audience, subject
//! and times is accepted. The input's first byte picks the mode; the JWKS is served by a
//! local endpoint of this process.
#![no_main]

use std::sync::OnceLock;

use base64::Engine as _;
use durable_mcp_auth::{ApiKeys, Authenticator, OAuthConfig};
use http::{HeaderMap, HeaderValue, header};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ISSUER: &str = "https://as.fuzz";
const AUDIENCE: &str = "http://localhost/mcp";
const KEY_PEM: &str = include_str!("../../crates/auth/tests/fixtures/ed.pem");
const JWK: &str = include_str!("../../crates/auth/tests/fixtures/ed.jwk.json");

struct World {
    runtime: tokio::runtime::Runtime,
    oauth: Authenticator,
    keys: Authenticator,
    signing: EncodingKey,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a runtime");
        let jwks = format!("{{\"keys\":[{JWK}]}}");
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("a local port");
        let url = format!("http://{}/jwks", listener.local_addr().expect("an address"));
        runtime.spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else { continue };
                let body = jwks.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf).await;
                    let response = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                    let _ = conn.write_all(response.as_bytes()).await;
                });
            }
        });
        let mut config = OAuthConfig::new(ISSUER, AUDIENCE, url);
        config.scopes = vec!["mcp".into()];
        let oauth = Authenticator::oauth(config).expect("an OAuth configuration");
        let keys = Authenticator::ApiKeys(std::sync::Arc::new(
            ApiKeys::parse("alice k-alice-0123456789abcdef mcp\nbob sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b").expect("keys"),
        ));
        let signing = EncodingKey::from_ed_pem(KEY_PEM.as_bytes()).expect("the fixture key");
        World { runtime, oauth, keys, signing }
    })
}

fn authorization(value: &[u8]) -> Option<HeaderMap> {
    let mut headers = HeaderMap::new();
    headers.insert(header::AUTHORIZATION, HeaderValue::from_bytes(value).ok()?);
    Some(headers)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let world = world();
    match mode % 4 {
        // An Authorization header against API keys, and a key file's text.
        0 => {
            if let Some(headers) = authorization(rest) {
                let _ = world
                    .runtime
                    .block_on(world.keys.authenticate(&headers, None));
            }
            let _ = ApiKeys::parse(&String::from_utf8_lossy(rest));
        }
        // An Authorization header against the OAuth resource server (JWT header parsing).
        1 => {
            if let Some(headers) = authorization(rest) {
                let _ = world
                    .runtime
                    .block_on(world.oauth.authenticate(&headers, None));
            }
        }
        // Claims signed with the trusted key: their checks.
        2 => {
            let Ok(Value::Object(claims)) = serde_json::from_slice::<Value>(rest) else {
                return;
            };
            let mut header = Header::new(Algorithm::EdDSA);
            header.kid = Some("ed-1".into());
            let Ok(token) = jsonwebtoken::encode(&header, &claims, &world.signing) else {
                return;
            };
            let headers = authorization(format!("Bearer {token}").as_bytes())
                .expect("a token is a header value");
            if let Ok(who) = world
                .runtime
                .block_on(world.oauth.authenticate(&headers, None))
            {
                assert_eq!(
                    claims.get("iss").and_then(Value::as_str),
                    Some(ISSUER),
                    "accepted another issuer"
                );
                assert!(
                    claims.get("sub").and_then(Value::as_str).is_some(),
                    "accepted a token without a subject"
                );
                assert!(!who.principal.is_anonymous());
            }
        }
        // A header of the input's JSON over valid claims and a signature of the trusted key
        // (over another header): the header's checks.
        _ => {
            let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(rest) else {
                return;
            };
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let header = b64.encode(Value::Object(fields).to_string());
            let mut claims = Map::new();
            claims.insert("iss".into(), ISSUER.into());
            claims.insert("aud".into(), AUDIENCE.into());
            claims.insert("sub".into(), "u1".into());
            claims.insert("exp".into(), Value::from(u64::MAX / 4));
            let mut good = Header::new(Algorithm::EdDSA);
            good.kid = Some("ed-1".into());
            let Ok(real) = jsonwebtoken::encode(&good, &claims, &world.signing) else {
                return;
            };
            let mut parts = real.splitn(3, '.');
            let (_, payload, signature) = (
                parts.next(),
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            let token = format!("{header}.{payload}.{signature}");
            if let Some(headers) = authorization(format!("Bearer {token}").as_bytes()) {
                let accepted = world
                    .runtime
                    .block_on(world.oauth.authenticate(&headers, None))
                    .is_ok();
                assert!(!accepted, "a signature over another header verified");
            }
        }
    }
});

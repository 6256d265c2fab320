//! Authorization at the HTTP edge (issue 11): an OAuth 2.1 resource server against a real
//! local JWKS endpoint with tokens minted here (RS256, ES256, EdDSA), scope checks per tool
//! in both eras, key rotation, the protected resource metadata, API keys and the trusted
//! proxy mode. Every refused request leaves the store untouched.

#![allow(clippy::unwrap_used, missing_docs)] // tests: a panic is the failure report

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use base64::Engine as _;
use durable_mcp_auth::{ApiKeys, Authenticator, OAuthConfig, TrustedProxy};
use durable_mcp_engine::{Engine, EngineOptions};
use durable_mcp_handler::rmcp::handler::server::{router::tool::ToolRouter, tool::Extension};
use durable_mcp_handler::rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use durable_mcp_handler::rmcp::{self, ServerHandler, tool, tool_handler, tool_router};
use durable_mcp_handler::{AuthInfo, McpHandler, required_scopes};
use durable_mcp_http::{HttpConfig, Transport};
use durable_mcp_store::Store;
use durable_mcp_store::testing::CountingStore;
use durable_mcp_store_memory::MemoryStore;
use http::{Request, StatusCode};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::{POST_HEADERS, Reply, messages, parse_sse};
use tower::ServiceExt;

const ISSUER: &str = "https://auth.test";
const RESOURCE: &str = "http://localhost/mcp";
const METADATA: &str = "http://localhost/.well-known/oauth-protected-resource/mcp";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../auth/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn jwk(name: &str) -> Value {
    serde_json::from_str(&fixture(&format!("{name}.jwk.json"))).unwrap()
}

/// The handler: `whoami` tells what the handler sees of its caller; `write` needs a scope.
#[derive(Clone)]
struct Scoped {
    #[allow(dead_code)] // read by the `tool_handler` expansion in some rmcp versions
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Scoped {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Who the caller is")]
    async fn whoami(&self, Extension(auth): Extension<AuthInfo>) -> String {
        json!({"principal": auth.principal, "scopes": auth.scopes, "tenant": auth.claims.get("tenant")}).to_string()
    }

    #[tool(description = "Write a file", meta = required_scopes(&["files:write"]))]
    async fn write(&self) -> String {
        "written".into()
    }
}

#[tool_handler]
impl ServerHandler for Scoped {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("scoped", "1.0.0"))
    }
}

/// A JWKS endpoint on 127.0.0.1 whose key set the test switches, counting its fetches.
struct JwksServer {
    url: String,
    keys: Arc<Mutex<Value>>,
    hits: Arc<AtomicU64>,
}

async fn jwks_server(keys: Value) -> JwksServer {
    let keys = Arc::new(Mutex::new(keys));
    let hits = Arc::new(AtomicU64::new(0));
    let (k, h) = (keys.clone(), hits.clone());
    let app = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            let (k, h) = (k.clone(), h.clone());
            async move {
                h.fetch_add(1, Ordering::SeqCst);
                axum::Json(k.lock().unwrap().clone())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/jwks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    JwksServer { url, keys, hits }
}

struct Server {
    router: axum::Router,
    store: Arc<CountingStore>,
}

fn server(auth: Authenticator) -> Server {
    server_with({
        let mut o = HttpConfig::default();
        o.auth = auth;
        o
    })
}

fn server_with(config: HttpConfig) -> Server {
    let store = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
    let engine = Engine::new(
        store.clone() as Arc<dyn Store>,
        McpHandler::new(Scoped::new()),
        EngineOptions::default(),
    );
    let router = Transport::new(engine, config).router();
    Server { router, store }
}

fn oauth_config(jwks: &JwksServer) -> OAuthConfig {
    let mut config = OAuthConfig::new(ISSUER, RESOURCE, &jwks.url);
    config.scopes = vec!["mcp".into()];
    config.scopes_supported = vec!["files:write".into()];
    config
}

async fn oauth_server(jwks: &JwksServer) -> Server {
    server(Authenticator::oauth(oauth_config(jwks)).unwrap())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(sub: &str, scope: &str) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "exp": now() + 600, "iat": now(), "scope": scope, "tenant": "acme"})
}

fn mint(alg: Algorithm, kid: &str, key: &str, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = Some(kid.to_owned());
    let pem = fixture(&format!("{key}.pem"));
    let key = match alg {
        Algorithm::ES256 => EncodingKey::from_ec_pem(pem.as_bytes()).unwrap(),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem.as_bytes()).unwrap(),
        _ => EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
    };
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

fn rsa(claims: &Value) -> String {
    mint(Algorithm::RS256, "rsa-1", "rsa1", claims)
}

async fn request(
    router: &axum::Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Reply {
    let mut builder = Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let response = router
        .clone()
        .oneshot(
            builder
                .body(body.map(Body::from).unwrap_or_else(Body::empty))
                .unwrap(),
        )
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// A legacy POST with `token` (if any).
async fn post(
    router: &axum::Router,
    token: Option<&str>,
    session: Option<&str>,
    body: Value,
) -> Reply {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    if let Some(b) = &bearer {
        headers.push(("authorization", b));
    }
    if let Some(s) = session {
        headers.push(("mcp-session-id", s));
    }
    request(router, "POST", "/mcp", &headers, Some(body.to_string())).await
}

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
}

async fn initialize(router: &axum::Router, token: &str) -> String {
    let reply = post(router, Some(token), None, initialize_body()).await;
    assert_eq!(reply.status, StatusCode::OK);
    let id = reply
        .headers
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let ack = post(
        router,
        Some(token),
        Some(&id),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(ack.status, StatusCode::ACCEPTED);
    id
}

fn call(id: u64, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}}})
}

/// The outcome of a legacy tools/call answered on SSE.
async fn outcome(reply: Reply) -> Value {
    assert_eq!(reply.status, StatusCode::OK);
    messages(&parse_sse(&reply.text().await)).pop().unwrap()
}

fn challenge(reply: &Reply) -> String {
    reply
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

async fn whoami(router: &axum::Router, token: &str) -> Value {
    let session = initialize(router, token).await;
    let result = outcome(post(router, Some(token), Some(&session), call(1, "whoami")).await).await;
    serde_json::from_str(result["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn valid_tokens_of_each_algorithm_are_served_as_their_principal() {
    let jwks = jwks_server(json!({"keys": [jwk("rsa1"), jwk("ec"), jwk("ed")]})).await;
    let s = oauth_server(&jwks).await;
    for (alg, kid, key, sub) in [
        (Algorithm::RS256, "rsa-1", "rsa1", "alice"),
        (Algorithm::ES256, "ec-1", "ec", "bob"),
        (Algorithm::EdDSA, "ed-1", "ed", "carol"),
    ] {
        let token = mint(alg, kid, key, &claims(sub, "mcp"));
        let me = whoami(&s.router, &token).await;
        assert_eq!(me["principal"], format!("oauth:{ISSUER}#{sub}"), "{alg:?}");
        assert_eq!(me["scopes"], json!(["mcp"]));
        assert_eq!(me["tenant"], "acme", "the handler reads the token's claims");
    }
    assert_eq!(
        jwks.hits.load(Ordering::SeqCst),
        1,
        "the JWKS is fetched once and cached"
    );
}

/// Without authentication every request is served as `anonymous`, and handlers still find
/// their caller in the extensions.
#[tokio::test]
async fn without_authentication_handlers_see_the_anonymous_principal() {
    let s = server(Authenticator::None);
    let me = whoami(&s.router, "ignored").await;
    assert_eq!(me["principal"], "anonymous");
    assert_eq!(me["scopes"], json!([]));
}

#[tokio::test]
async fn refused_tokens_are_401_with_a_challenge_and_write_nothing() {
    let jwks = jwks_server(json!({"keys": [jwk("rsa1"), jwk("ec")]})).await;
    let s = oauth_server(&jwks).await;
    // Missing: the challenge points at the metadata and names the endpoint's scopes.
    let reply = post(&s.router, None, None, initialize_body()).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge(&reply),
        format!(r#"Bearer resource_metadata="{METADATA}", scope="mcp""#)
    );
    // A token in the query string is not looked at.
    let good = rsa(&claims("alice", "mcp"));
    let uri = format!("/mcp?access_token={good}");
    let reply = request(
        &s.router,
        "POST",
        &uri,
        &POST_HEADERS,
        Some(initialize_body().to_string()),
    )
    .await;
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "tokens only from the Authorization header"
    );

    let mut expired = claims("alice", "mcp");
    expired["exp"] = json!(now() - 120);
    let mut immature = claims("alice", "mcp");
    immature["nbf"] = json!(now() + 300);
    let mut wrong_iss = claims("alice", "mcp");
    wrong_iss["iss"] = json!("https://evil.test");
    let mut wrong_aud = claims("alice", "mcp");
    wrong_aud["aud"] = json!("http://localhost/other");
    let mut no_aud = claims("alice", "mcp");
    no_aud.as_object_mut().unwrap().remove("aud");
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let alg_none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT", "kid": "rsa-1"})),
        b64(&claims("alice", "mcp"))
    );
    // The classic confusion: HS256 keyed with the RSA public key the JWKS publishes.
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("rsa-1".into());
    let confused = jsonwebtoken::encode(
        &hs,
        &claims("alice", "mcp"),
        &EncodingKey::from_secret(fixture("rsa1.pub.pem").as_bytes()).unwrap(),
    )
    .unwrap();
    // ES256 token naming the RSA key.
    let cross = mint(Algorithm::ES256, "rsa-1", "ec", &claims("alice", "mcp"));
    let bad_signature = mint(Algorithm::RS256, "rsa-1", "rsa2", &claims("alice", "mcp"));
    let unknown_kid = mint(Algorithm::RS256, "nobody", "rsa1", &claims("alice", "mcp"));
    let cases = [
        ("expired", rsa(&expired)),
        ("not yet valid", rsa(&immature)),
        ("wrong issuer", rsa(&wrong_iss)),
        ("wrong audience", rsa(&wrong_aud)),
        ("no audience", rsa(&no_aud)),
        ("bad signature", bad_signature),
        ("alg none", alg_none),
        ("HS256 with the public key", confused),
        ("ES256 naming an RSA key", cross),
        ("unknown kid", unknown_kid),
        ("garbage", "not-a-token".to_owned()),
    ];
    for (what, token) in cases {
        let reply = post(&s.router, Some(&token), None, initialize_body()).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{what}");
        let value = challenge(&reply);
        assert!(
            value.starts_with(r#"Bearer error="invalid_token", error_description=""#),
            "{what}: {value}"
        );
        assert!(
            value.contains(&format!(r#"resource_metadata="{METADATA}""#))
                && value.contains(r#"scope="mcp""#),
            "{what}: {value}"
        );
        assert!(
            !value.contains(&token) || token.is_empty(),
            "the token is not echoed"
        );
        let body = reply.json().await;
        assert_eq!(body["jsonrpc"], "2.0", "{what}");
    }
    assert_eq!(
        s.store.hook().writes(),
        0,
        "a refused request writes nothing"
    );
    // The same server serves a good token.
    assert_eq!(
        post(&s.router, Some(&good), None, initialize_body())
            .await
            .status,
        StatusCode::OK
    );
    // GET and DELETE are authenticated too.
    let reply = request(
        &s.router,
        "GET",
        "/mcp",
        &[("accept", "text/event-stream"), ("mcp-session-id", "x")],
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let reply = request(
        &s.router,
        "DELETE",
        "/mcp",
        &[("mcp-session-id", "x")],
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn endpoint_scope_missing_is_403_insufficient_scope() {
    let jwks = jwks_server(json!({"keys": [jwk("rsa1")]})).await;
    let s = oauth_server(&jwks).await;
    let reply = post(
        &s.router,
        Some(&rsa(&claims("alice", "other"))),
        None,
        initialize_body(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!(
        challenge(&reply),
        format!(
            r#"Bearer error="insufficient_scope", scope="mcp", resource_metadata="{METADATA}""#
        )
    );
    assert_eq!(s.store.hook().writes(), 0);
}

const MODERN: &str = "2026-07-28";

async fn modern_call(router: &axum::Router, token: &str, tool: &str) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": tool, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}});
    let bearer = format!("Bearer {token}");
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    headers.extend([
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
        ("authorization", &bearer),
    ]);
    request(router, "POST", "/mcp", &headers, Some(body.to_string())).await
}

/// SEP-2350: a tool whose declared scope the token lacks is refused with HTTP 403 and the
/// complete set the call needs, in both eras, before the call runs or is journaled.
#[tokio::test]
async fn a_tool_whose_scope_is_missing_is_403_listing_every_scope_it_needs() {
    let jwks = jwks_server(json!({"keys": [jwk("rsa1")]})).await;
    let s = oauth_server(&jwks).await;
    let expected = format!(
        r#"Bearer error="insufficient_scope", scope="mcp files:write", resource_metadata="{METADATA}""#
    );
    let reader = rsa(&claims("alice", "mcp"));
    let writer = rsa(&claims("alice", "mcp files:write"));
    // Legacy era.
    let session = initialize(&s.router, &reader).await;
    let before = s.store.hook().writes();
    let reply = post(&s.router, Some(&reader), Some(&session), call(1, "write")).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!(challenge(&reply), expected);
    assert_eq!(
        reply.json().await["id"],
        1,
        "the refusal answers the request's id"
    );
    assert_eq!(
        s.store.hook().writes(),
        before,
        "the refused call journaled nothing"
    );
    let ok = outcome(
        post(
            &s.router,
            Some(&writer),
            Some(&initialize(&s.router, &writer).await),
            call(2, "write"),
        )
        .await,
    )
    .await;
    assert_eq!(ok["result"]["content"][0]["text"], "written");
    // A tool without declared scopes needs the endpoint's only.
    let me = outcome(post(&s.router, Some(&reader), Some(&session), call(3, "whoami")).await).await;
    assert!(
        me["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("alice")
    );
    // Modern era.
    let before = s.store.hook().writes();
    let reply = modern_call(&s.router, &reader, "write").await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert_eq!(challenge(&reply), expected);
    assert_eq!(s.store.hook().writes(), before);
    let reply = modern_call(&s.router, &writer, "write").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.json().await["result"]["content"][0]["text"],
        "written"
    );
}

/// Prompts and resources have their scopes from the server's rules: checked before the
/// request runs (403 naming the complete set), passed to the handler with them.
#[tokio::test]
async fn prompt_and_resource_scopes_are_checked_before_the_handler() {
    let jwks = jwks_server(json!({"keys": [jwk("rsa1")]})).await;
    let rules = durable_mcp_auth::ScopeRules::default()
        .prompt("audit", &["audit:read"])
        .resource("file:///private/", &["files:read"]);
    let s = server_with({
        let mut o = HttpConfig::default();
        o.auth = Authenticator::oauth(oauth_config(&jwks)).unwrap();
        o.scope_rules = rules;
        o
    });
    let reader = rsa(&claims("alice", "mcp"));
    let session = initialize(&s.router, &reader).await;
    let prompt =
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": {"name": "audit"}});
    let reply = post(&s.router, Some(&reader), Some(&session), prompt.clone()).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(
        challenge(&reply).contains(r#"scope="mcp audit:read""#),
        "{}",
        challenge(&reply)
    );
    let read = |uri: &str| json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": uri}});
    let reply = post(
        &s.router,
        Some(&reader),
        Some(&session),
        read("file:///private/a"),
    )
    .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    assert!(
        challenge(&reply).contains(r#"scope="mcp files:read""#),
        "{}",
        challenge(&reply)
    );
    // Another resource, and the same requests with the scopes: passed on to the handler.
    assert_eq!(
        post(
            &s.router,
            Some(&reader),
            Some(&session),
            read("file:///public/a")
        )
        .await
        .status,
        StatusCode::OK
    );
    let auditor = rsa(&claims("alice", "mcp audit:read files:read"));
    let session = initialize(&s.router, &auditor).await;
    assert_eq!(
        post(&s.router, Some(&auditor), Some(&session), prompt)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        post(
            &s.router,
            Some(&auditor),
            Some(&session),
            read("file:///private/a")
        )
        .await
        .status,
        StatusCode::OK
    );
}

/// The authorization server rotates its key: a token with the new `kid` is accepted without
/// a restart (one refetch), and unknown kids refetch at most once per interval.
#[tokio::test]
async fn key_rotation_is_picked_up_and_refetches_are_rate_limited() {
    // Every token is signed before the clock matters: an RSA signature in a debug build
    // on a loaded machine takes long enough to let the refetch interval run out between
    // requests that must fall inside it.
    let first = rsa(&claims("a", "mcp"));
    let rotated = mint(Algorithm::RS256, "rsa-2", "rsa2", &claims("a", "mcp"));
    let unknowns: Vec<String> = (0..5)
        .map(|i| {
            mint(
                Algorithm::RS256,
                &format!("nobody-{i}"),
                "rsa1",
                &claims("a", "mcp"),
            )
        })
        .collect();
    let unknown_later = mint(Algorithm::RS256, "nobody", "rsa1", &claims("a", "mcp"));
    let interval = Duration::from_millis(1_000);
    let jwks = jwks_server(json!({"keys": [jwk("rsa1")]})).await;
    let mut config = oauth_config(&jwks);
    config.jwks_refetch_interval = interval;
    let s = server(Authenticator::oauth(config).unwrap());
    assert_eq!(
        post(&s.router, Some(&first), None, initialize_body())
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(jwks.hits.load(Ordering::SeqCst), 1);
    *jwks.keys.lock().unwrap() = json!({"keys": [jwk("rsa2")]});
    tokio::time::sleep(interval + Duration::from_millis(100)).await;
    assert_eq!(
        post(&s.router, Some(&rotated), None, initialize_body())
            .await
            .status,
        StatusCode::OK,
        "the new key is fetched"
    );
    assert_eq!(jwks.hits.load(Ordering::SeqCst), 2);
    // Unknown kids within the interval: refused, no fetch.
    for unknown in &unknowns {
        assert_eq!(
            post(&s.router, Some(unknown), None, initialize_body())
                .await
                .status,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        jwks.hits.load(Ordering::SeqCst),
        2,
        "refetches are rate limited"
    );
    tokio::time::sleep(interval + Duration::from_millis(100)).await;
    assert_eq!(
        post(&s.router, Some(&unknown_later), None, initialize_body())
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        jwks.hits.load(Ordering::SeqCst),
        3,
        "after the interval an unknown kid fetches again"
    );
    // The removed key no longer verifies once the set is refetched.
    assert_eq!(
        post(&s.router, Some(&first), None, initialize_body())
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn protected_resource_metadata_is_served_at_both_paths() {
    let jwks = jwks_server(json!({"keys": [jwk("rsa1")]})).await;
    let s = oauth_server(&jwks).await;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let reply = request(&s.router, "GET", path, &[], None).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        let doc = reply.json().await;
        assert_eq!(doc["resource"], RESOURCE);
        assert_eq!(doc["authorization_servers"], json!([ISSUER]));
        assert_eq!(doc["scopes_supported"], json!(["mcp", "files:write"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    // Without OAuth there is none.
    let open = server(Authenticator::None);
    assert_eq!(
        request(
            &open.router,
            "GET",
            "/.well-known/oauth-protected-resource/mcp",
            &[],
            None
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn api_keys_mode_serves_the_right_key_only() {
    let mut keys = ApiKeys::parse("ci k-ci-123 mcp\nro k-ro-456 other\n").unwrap();
    keys.scopes = vec!["mcp".into()];
    let s = server(Authenticator::ApiKeys(Arc::new(keys)));
    assert_eq!(whoami(&s.router, "k-ci-123").await["principal"], "key:ci");
    for wrong in ["k-ci-124", "k-ci-12", "K-CI-123"] {
        let reply = post(&s.router, Some(wrong), None, initialize_body()).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{wrong}");
        assert!(challenge(&reply).starts_with(r#"Bearer error="invalid_token""#));
    }
    let reply = post(&s.router, None, None, initialize_body()).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(challenge(&reply), r#"Bearer realm="mcp""#);
    assert_eq!(
        post(&s.router, Some("k-ro-456"), None, initialize_body())
            .await
            .status,
        StatusCode::FORBIDDEN,
        "a key without the endpoint's scope"
    );
}

/// The proxy's header is believed from the configured addresses only, with the peer address
/// of the real connection (the accept loop hands it on).
#[tokio::test]
async fn trusted_proxy_header_is_honoured_only_from_configured_addresses() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn over_tcp(from: &[&str]) -> String {
        let proxy = TrustedProxy::new("x-user", from).unwrap();
        let store = Arc::new(MemoryStore::new());
        let engine = Engine::new(
            store,
            McpHandler::new(Scoped::new()),
            EngineOptions::default(),
        );
        let transport = Transport::new(engine, {
            let mut o = HttpConfig::default();
            o.auth = Authenticator::TrustedProxy(Arc::new(proxy));
            o
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(durable_mcp_http::serve(
            listener,
            transport,
            std::future::pending(),
        ));
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let body = initialize_body().to_string();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nx-user: alice\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut response = String::new();
        tokio::time::timeout(Duration::from_secs(10), tcp.read_to_string(&mut response))
            .await
            .unwrap()
            .unwrap();
        response
    }
    let trusted = over_tcp(&["127.0.0.0/8"]).await;
    assert!(trusted.starts_with("HTTP/1.1 200"), "{trusted}");
    assert!(
        trusted.to_ascii_lowercase().contains("mcp-session-id"),
        "{trusted}"
    );
    let untrusted = over_tcp(&["10.0.0.0/8"]).await;
    assert!(
        untrusted.starts_with("HTTP/1.1 401"),
        "the header from another address is ignored: {untrusted}"
    );
}

/// D13 at the edge: B's token on A's session, stream and event ids gets "unknown".
#[tokio::test]
async fn another_principal_sees_none_of_a_sessions_ids() {
    let jwks = jwks_server(json!({"keys": [jwk("rsa1")]})).await;
    let s = oauth_server(&jwks).await;
    let alice = rsa(&claims("alice", "mcp"));
    let bob = rsa(&claims("bob", "mcp"));
    let session = initialize(&s.router, &alice).await;
    let events = parse_sse(
        &post(&s.router, Some(&alice), Some(&session), call(1, "whoami"))
            .await
            .text()
            .await,
    );
    let event_id = events
        .iter()
        .find_map(|(id, _)| id.clone())
        .expect("a resumable event id");
    assert_eq!(
        post(&s.router, Some(&bob), Some(&session), call(2, "whoami"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let bearer = format!("Bearer {bob}");
    let get = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", session.as_str()),
        ("authorization", bearer.as_str()),
    ];
    assert_eq!(
        request(&s.router, "GET", "/mcp", &get, None).await.status,
        StatusCode::NOT_FOUND
    );
    let resume = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", session.as_str()),
        ("last-event-id", event_id.as_str()),
        ("authorization", bearer.as_str()),
    ];
    assert_eq!(
        request(&s.router, "GET", "/mcp", &resume, None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let delete = [
        ("mcp-session-id", session.as_str()),
        ("authorization", bearer.as_str()),
    ];
    assert_eq!(
        request(&s.router, "DELETE", "/mcp", &delete, None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Bob's own session cannot resume Alice's event either.
    let bobs = initialize(&s.router, &bob).await;
    let resume = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", bobs.as_str()),
        ("last-event-id", event_id.as_str()),
        ("authorization", bearer.as_str()),
    ];
    assert_eq!(
        request(&s.router, "GET", "/mcp", &resume, None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    // Alice still can.
    assert_eq!(
        post(&s.router, Some(&alice), Some(&session), call(3, "whoami"))
            .await
            .status,
        StatusCode::OK
    );
}

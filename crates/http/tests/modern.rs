//! Modern era (2026-07-28): stateless requests with per-request `_meta` and standard headers.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use http::StatusCode;
use serde_json::{Value, json};
use support::*;

const V: &str = "2026-07-28";

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    })
}

fn request(id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

async fn modern(h: &Harness, body: Value, extra: &[(&str, &str)]) -> Reply {
    let method = body["method"].as_str().unwrap().to_owned();
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    headers.push(("mcp-protocol-version", V));
    headers.push(("mcp-method", &method));
    headers.extend_from_slice(extra);
    send(&h.router, "POST", &headers, Some(body.to_string())).await
}

#[tokio::test]
async fn discover_describes_the_server() {
    let h = harness();
    let reply = modern(&h, request(1, "server/discover", json!({})), &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = reply.json().await;
    let result = &body["result"];
    assert_eq!(result["resultType"], "complete");
    assert!(
        result["supportedVersions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == V)
    );
    assert!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string());
    assert!(result.get("ttlMs").is_some() && result.get("cacheScope").is_some());
}

#[tokio::test]
async fn results_carry_result_type_and_server_info() {
    let h = harness();
    let reply = modern(
        &h,
        request(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "m"}}),
        ),
        &[("mcp-name", "echo")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let body = reply.json().await;
    assert_eq!(body["result"]["resultType"], "complete");
    assert_eq!(
        body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "test-server"
    );
    assert_eq!(body["result"]["content"][0]["text"], "m");
}

#[tokio::test]
async fn header_mismatches_are_400_with_32020() {
    let h = harness();
    let body = request(
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "m"}}),
    );
    // Missing Mcp-Name.
    let reply = modern(&h, body.clone(), &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json().await["error"]["code"], -32020);
    // Wrong Mcp-Name.
    let reply = modern(&h, body.clone(), &[("mcp-name", "other")]).await;
    assert_eq!(reply.json().await["error"]["code"], -32020);
    // Base64 sentinel that decodes to the right name is accepted.
    let reply = modern(&h, body.clone(), &[("mcp-name", "=?base64?ZWNobw==?=")]).await;
    assert_eq!(reply.status, StatusCode::OK);
    // Wrong Mcp-Method.
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    headers.extend_from_slice(&[
        ("mcp-protocol-version", V),
        ("mcp-method", "tools/list"),
        ("mcp-name", "echo"),
    ]);
    let reply = send(&h.router, "POST", &headers, Some(body.to_string())).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json().await["error"]["code"], -32020);
    // Version header that disagrees with _meta.
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    headers.extend_from_slice(&[
        ("mcp-protocol-version", "2025-11-25"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ]);
    let reply = send(&h.router, "POST", &headers, Some(body.to_string())).await;
    assert_eq!(reply.json().await["error"]["code"], -32020);
}

#[tokio::test]
async fn missing_meta_is_400_with_32602() {
    let h = harness();
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}});
    let reply = modern(&h, body, &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json().await["error"]["code"], -32602);
}

#[tokio::test]
async fn unsupported_version_is_400_with_32022() {
    let h = harness();
    let mut body = request(5, "tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    headers.extend_from_slice(&[
        ("mcp-protocol-version", "2099-01-01"),
        ("mcp-method", "tools/list"),
    ]);
    let reply = send(&h.router, "POST", &headers, Some(body.to_string())).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let body = reply.json().await;
    assert_eq!(body["error"]["code"], -32022, "{body}");
}

#[tokio::test]
async fn unknown_method_is_404_with_32601() {
    let h = harness();
    let reply = modern(&h, request(6, "no/such", json!({})), &[]).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.json().await["error"]["code"], -32601);
    let reply = modern(
        &h,
        request(7, "logging/setLevel", json!({"level": "info"})),
        &[],
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn trap_log_messages_only_when_meta_asks() {
    let h = harness();
    let body = request(
        8,
        "tools/call",
        json!({"name": "chatty", "arguments": {"count": 2}}),
    );
    let reply = modern(&h, body.clone(), &[("mcp-name", "chatty")]).await;
    let text = reply.text().await;
    assert!(
        !text.contains("notifications/message"),
        "no logLevel, no log messages: {text}"
    );
    let mut asked = body;
    asked["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let reply = modern(&h, asked, &[("mcp-name", "chatty")]).await;
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    let msgs = messages(&reply.events().await);
    assert_eq!(
        msgs.iter()
            .filter(|m| m["method"] == "notifications/message")
            .count(),
        2
    );
    assert_eq!(
        msgs.last().unwrap()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "test-server"
    );
}

#[tokio::test]
async fn get_and_delete_are_405_and_session_headers_ignored() {
    let h = harness();
    let reply = send(
        &h.router,
        "GET",
        &[("accept", "text/event-stream"), ("mcp-protocol-version", V)],
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    let reply = send(&h.router, "DELETE", &[("mcp-protocol-version", V)], None).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    let reply = modern(
        &h,
        request(9, "tools/list", json!({})),
        &[("mcp-session-id", "bogus"), ("last-event-id", "bogus")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.headers.get("mcp-session-id").is_none());
}

#[tokio::test]
async fn closing_the_stream_cancels_the_handler() {
    let h = harness();
    // The response waits for the slow tool's first message; the client going away
    // (dropping the request future) must cancel the handler.
    let slow = request(
        11,
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 60_000}}),
    );
    let router = h.router.clone();
    let task = tokio::spawn(async move {
        let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        headers.extend_from_slice(&[
            ("mcp-protocol-version", V),
            ("mcp-method", "tools/call"),
            ("mcp-name", "slow"),
        ]);
        send(&router, "POST", &headers, Some(slow.to_string())).await
    });
    eventually("the slow call is in flight", async || {
        h.engine.in_flight() == 1
    })
    .await;
    task.abort();
    let _ = task.await;
    // The run's stream was closed without an outcome once the handler saw cancellation.
    eventually(
        "no run left in flight after the client went away",
        async || h.engine.in_flight() == 0,
    )
    .await;
}

/// A header and `_meta` naming a version later than 2026-07-28 are refused by the transport
/// itself (rmcp's own check refused them too, with the same code).
#[tokio::test]
async fn unknown_modern_version_is_refused_with_400() {
    let h = harness();
    let mut body = request(3, "tools/list", json!({}));
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-29");
    let headers = [
        POST_HEADERS[0],
        POST_HEADERS[1],
        ("mcp-protocol-version", "2026-07-29"),
        ("mcp-method", "tools/list"),
    ];
    let reply = send(&h.router, "POST", &headers, Some(body.to_string())).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let body = reply.json().await;
    assert_eq!(body["error"]["code"], -32022, "{body}");
    assert_eq!(body["id"], 3);
}

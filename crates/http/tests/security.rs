//! Security defaults and hostile input: each rejection has its status and a JSON-RPC body,
//! and nothing panics or hangs.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use http::StatusCode;
use serde_json::{Value, json};
use support::*;

async fn assert_rejected(reply: Reply, status: StatusCode, code: Option<i64>) {
    assert_eq!(reply.status, status);
    let body: Value = reply.json().await;
    assert_eq!(body["jsonrpc"], "2.0");
    if let Some(code) = code {
        assert_eq!(body["error"]["code"], code, "{body}");
    }
}

#[tokio::test]
async fn dns_rebinding_host_and_origin_are_403() {
    let h = harness();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let request = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "evil.example:80")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.clone()))
        .unwrap();
    let response = tower::ServiceExt::oneshot(h.router.clone(), request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let mut headers = POST_HEADERS.to_vec();
    headers.push(("origin", "http://evil.example"));
    assert_rejected(
        send(&h.router, "POST", &headers, Some(body.clone())).await,
        StatusCode::FORBIDDEN,
        None,
    )
    .await;
    headers.pop();
    headers.push(("origin", "http://localhost:3000"));
    let reply = send(
        &h.router,
        "POST",
        &headers,
        Some(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
            .to_string(),
        ),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "a loopback origin is allowed");
}

#[tokio::test]
async fn accept_and_content_type_are_checked() {
    let h = harness();
    let body = Some(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string());
    let reply = send(
        &h.router,
        "POST",
        &[
            ("accept", "application/json"),
            ("content-type", "application/json"),
        ],
        body.clone(),
    )
    .await;
    assert_rejected(reply, StatusCode::NOT_ACCEPTABLE, None).await;
    let reply = send(
        &h.router,
        "POST",
        &[
            ("accept", "application/json, text/event-stream"),
            ("content-type", "text/plain"),
        ],
        body,
    )
    .await;
    assert_rejected(reply, StatusCode::UNSUPPORTED_MEDIA_TYPE, None).await;
    let reply = send(&h.router, "GET", &[("accept", "application/json")], None).await;
    assert_rejected(reply, StatusCode::NOT_ACCEPTABLE, None).await;
    let reply = send(&h.router, "PUT", &[], None).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let mut config = durable_mcp_http::HttpConfig::default();
    config.max_body_bytes = 1024;
    let h = harness_with(config);
    let big =
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x".repeat(4096)}})
            .to_string();
    assert_rejected(
        send(&h.router, "POST", &POST_HEADERS, Some(big)).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        None,
    )
    .await;
}

#[tokio::test]
async fn malformed_json_is_parse_error() {
    let h = harness();
    for bad in ["{", "not json", "{\"jsonrpc\": \"2.0\", \"id\": 1,", ""] {
        assert_rejected(
            send(&h.router, "POST", &POST_HEADERS, Some(bad.to_owned())).await,
            StatusCode::BAD_REQUEST,
            Some(-32700),
        )
        .await;
    }
    let invalid_utf8 = axum::body::Body::from(vec![b'{', 0xff, 0xfe, b'}']);
    let request = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "localhost")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(invalid_utf8)
        .unwrap();
    let response = tower::ServiceExt::oneshot(h.router.clone(), request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn deeply_nested_json_is_rejected_without_overflow() {
    let h = harness();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_rejected(
        send(&h.router, "POST", &POST_HEADERS, Some(deep)).await,
        StatusCode::BAD_REQUEST,
        Some(-32700),
    )
    .await;
    let nested = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"a\":{}1{}}}}}",
        "{\"b\":".repeat(50_000),
        "}".repeat(50_000)
    );
    assert_rejected(
        send(&h.router, "POST", &POST_HEADERS, Some(nested)).await,
        StatusCode::BAD_REQUEST,
        Some(-32700),
    )
    .await;
}

#[tokio::test]
async fn wrong_jsonrpc_shapes_are_invalid_request() {
    let h = harness();
    for bad in [
        json!(1),
        json!("x"),
        json!({"id": 1, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": [1], "method": "ping"}),
        json!([]),
    ] {
        assert_rejected(
            send(&h.router, "POST", &POST_HEADERS, Some(bad.to_string())).await,
            StatusCode::BAD_REQUEST,
            Some(-32600),
        )
        .await;
    }
}

#[tokio::test]
async fn unknown_methods_are_method_not_found() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let reply = post(
        &h.router,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}),
    )
    .await;
    let msgs = messages(&reply.events().await);
    assert_eq!(msgs[0]["error"]["code"], -32601);
}

#[tokio::test]
async fn invalid_header_bytes_are_400_not_a_panic() {
    let h = harness();
    let value = http::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap();
    let request = http::Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "localhost")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", value)
        .body(axum::body::Body::from(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
        ))
        .unwrap();
    let response = tower::ServiceExt::oneshot(h.router.clone(), request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

/// Batches outside 2025-03-26 sessions (later versions removed them), and batches that are
/// not valid whole, are refused: 400, invalid request, a message saying why, and nothing in
/// the batch is run or journaled.
#[tokio::test]
async fn batches_outside_2025_03_26_or_not_valid_whole_are_refused_whole() {
    let h = harness();
    let echo = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "batched"}}});
    let old = initialize(&h.router, "2025-03-26").await;
    let newer = initialize(&h.router, "2025-06-18").await;
    let initialize_request = json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let cases = [
        (&newer, json!([echo(1)]), "only in 2025-03-26 sessions"),
        (
            &newer,
            json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
            "only in 2025-03-26 sessions",
        ),
        (&old, json!([]), "an empty JSON-RPC batch"),
        (
            &old,
            json!([echo(2), {"jsonrpc": "2.0", "id": 3}]),
            "batch element 1",
        ),
        (&old, json!([echo(4), 7]), "batch element 1"),
        (
            &old,
            json!([initialize_request]),
            "initialize may not be part of a JSON-RPC batch",
        ),
    ];
    for (session, batch, says) in cases {
        let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        headers.push(("mcp-session-id", session));
        let reply = send(&h.router, "POST", &headers, Some(batch.to_string())).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{batch}");
        let body: Value = reply.json().await;
        assert_eq!(body["error"]["code"], -32600, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains(says),
            "{batch}: {body}"
        );
    }
    assert_eq!(h.engine.in_flight(), 0);
    let journaled = h
        .store
        .list_records(durable_mcp_store::RecordKind::Run, "", 10)
        .await
        .unwrap();
    let aliases = h
        .store
        .list_records(durable_mcp_store::RecordKind::Alias, "", 10)
        .await
        .unwrap();
    assert!(
        journaled.is_empty() && aliases.is_empty(),
        "nothing of a refused batch was journaled: {journaled:?} {aliases:?}"
    );
}

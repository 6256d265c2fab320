//! Legacy era (2025-03-26 .. 2025-11-25) over the in-process router.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::collections::HashSet;

use http::StatusCode;
use serde_json::{Value, json};
use support::*;

#[tokio::test]
async fn initialize_creates_a_random_visible_ascii_session() {
    let h = harness();
    let a = initialize(&h.router, "2025-11-25").await;
    let b = initialize(&h.router, "2025-06-18").await;
    assert_ne!(a, b);
    assert_eq!(a.len(), 64);
    assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c)));
}

#[tokio::test]
async fn unsupported_initialize_version_negotiates_latest_legacy() {
    let h = harness();
    let reply = post(
        &h.router,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "1999-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.json().await["result"]["protocolVersion"],
        "2025-11-25"
    );
}

#[tokio::test]
async fn session_header_missing_is_400_unknown_is_404_deleted_is_404() {
    let h = harness();
    let reply = post(
        &h.router,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json().await["jsonrpc"], "2.0");
    let unknown = "ab".repeat(32);
    let reply = post(
        &h.router,
        Some(&unknown),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    let reply = post(
        &h.router,
        Some("not-a-session"),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);

    let session = initialize(&h.router, "2025-11-25").await;
    let reply = send(&h.router, "DELETE", &[("mcp-session-id", &session)], None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let reply = post(
        &h.router,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(
        reply.status,
        StatusCode::NOT_FOUND,
        "D5: ended sessions are 404"
    );
    let reply = send(&h.router, "DELETE", &[("mcp-session-id", &session)], None).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn d1_d2_priming_event_then_result_with_unique_ids() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let mut ids = HashSet::new();
    for n in 0..3 {
        let reply = post(
            &h.router,
            Some(&session),
            call(n, "echo", json!({"text": "hi"})),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.headers["content-type"], "text/event-stream");
        let text = reply.text().await;
        assert!(text.starts_with("id: "), "{text}");
        assert!(
            text.contains("\nretry: "),
            "priming event carries retry: {text}"
        );
        let events = parse_sse(&text);
        assert_eq!(events[0].1, "", "priming event has empty data");
        for (id, _) in &events {
            let id = id.clone().expect("every event has an id");
            assert_ne!(id, "0");
            assert!(ids.insert(id), "no two events share an id");
        }
        let msgs = messages(&events);
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0]["id"], n);
        assert_eq!(msgs[0]["result"]["content"][0]["text"], "hi");
        // D1: what was sent is in the store.
        let stream_event: durable_mcp_store::EventId =
            events[1].0.as_ref().unwrap().parse().unwrap();
        let read = h
            .store
            .read_after(&stream_event.stream, 0, 10)
            .await
            .unwrap();
        assert!(read.finished);
        assert_eq!(read.events.last().unwrap().data, events[1].1);
    }
}

#[tokio::test]
async fn older_versions_get_no_priming_event() {
    let h = harness();
    let session = initialize(&h.router, "2025-06-18").await;
    let reply = post(
        &h.router,
        Some(&session),
        call(1, "echo", json!({"text": "x"})),
    )
    .await;
    let events = reply.events().await;
    assert_eq!(events.len(), 1);
    assert!(!events[0].1.is_empty());
}

#[tokio::test]
async fn trap_progress_and_logs_go_on_the_request_stream_not_the_get_stream() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let get = send(
        &h.router,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
        ],
        None,
    )
    .await;
    assert_eq!(get.status, StatusCode::OK);
    let mut body = json!(call(7, "chatty", json!({"count": 3})));
    body["params"]["_meta"] = json!({"progressToken": "tok"});
    let reply = post(&h.router, Some(&session), body).await;
    let msgs = messages(&reply.events().await);
    let methods: Vec<&str> = msgs
        .iter()
        .map(|m| m["method"].as_str().unwrap_or("response"))
        .collect();
    assert_eq!(
        methods
            .iter()
            .filter(|m| **m == "notifications/progress")
            .count(),
        3,
        "{methods:?}"
    );
    assert_eq!(
        methods
            .iter()
            .filter(|m| **m == "notifications/message")
            .count(),
        3,
        "{methods:?}"
    );
    assert_eq!(*methods.last().unwrap(), "response");
    // The GET stream got only its priming event.
    drop(get);
    let standalone = h
        .store
        .load_session(
            &durable_mcp_store::Principal::anonymous(),
            &session.parse().unwrap(),
        )
        .await
        .unwrap()
        .standalone_stream;
    let read = h.store.read_after(&standalone, 0, 100).await.unwrap();
    assert!(
        read.events.iter().all(|e| e.data.is_empty()),
        "nothing but priming on the GET stream"
    );
}

#[tokio::test]
async fn log_level_filters_messages() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let reply = post(&h.router, Some(&session), json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "error"}})).await;
    assert!(messages(&reply.events().await)[0].get("result").is_some());
    let reply = post(
        &h.router,
        Some(&session),
        call(2, "chatty", json!({"count": 2})),
    )
    .await;
    let msgs = messages(&reply.events().await);
    assert_eq!(
        msgs.len(),
        1,
        "info messages filtered at level error: {msgs:?}"
    );
}

#[tokio::test]
async fn list_changed_goes_to_the_get_stream() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let get = send(
        &h.router,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
        ],
        None,
    )
    .await;
    let reply = post(&h.router, Some(&session), call(1, "change", json!({}))).await;
    let msgs = messages(&reply.events().await);
    assert_eq!(
        msgs.len(),
        1,
        "only the response on the request stream: {msgs:?}"
    );
    let events = get.first_events(2).await;
    let msgs = messages(&events);
    assert_eq!(msgs[0]["method"], "notifications/tools/list_changed");
}

#[tokio::test]
async fn elicitation_round_trip_on_the_request_stream() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let reply = post(&h.router, Some(&session), call(5, "ask", json!({}))).await;
    let mut stream = reply.body.into_data_stream();
    let mut text = String::new();
    let question = loop {
        use futures::StreamExt;
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        if let Some(q) = messages(&parse_sse(&text))
            .into_iter()
            .find(|m| m["method"] == "elicitation/create")
        {
            break q;
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"answer": "forty-two"}}});
    let ack = post(&h.router, Some(&session), answer).await;
    assert_eq!(ack.status, StatusCode::ACCEPTED);
    let rest = loop {
        use futures::StreamExt;
        match tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .unwrap()
        {
            Some(chunk) => text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap()),
            None => break messages(&parse_sse(&text)),
        }
    };
    let result = rest.last().unwrap();
    assert_eq!(result["id"], 5);
    assert_eq!(result["result"]["content"][0]["text"], "\"forty-two\"");
}

#[tokio::test]
async fn d3_resume_after_priming_replays_the_whole_stream() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let reply = post(
        &h.router,
        Some(&session),
        call(3, "chatty", json!({"count": 4})),
    )
    .await;
    let all = reply.events().await;
    for k in 0..all.len() {
        let last = all[k].0.clone().unwrap();
        let resumed = send(
            &h.router,
            "GET",
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
                ("last-event-id", &last),
            ],
            None,
        )
        .await;
        assert_eq!(resumed.status, StatusCode::OK);
        let events = resumed.events().await;
        assert_eq!(
            events,
            all[k + 1..].to_vec(),
            "exact suffix after event {k}"
        );
    }
}

#[tokio::test]
async fn bad_last_event_id_is_a_clear_4xx() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let other = initialize(&h.router, "2025-11-25").await;
    let reply = post(
        &h.router,
        Some(&other),
        call(1, "echo", json!({"text": "x"})),
    )
    .await;
    let foreign = reply.events().await[0].0.clone().unwrap();
    let unknown = format!("{}_1", "0".repeat(32));
    for bad in ["garbage", "0", unknown.as_str(), foreign.as_str()] {
        let reply = send(
            &h.router,
            "GET",
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
                ("last-event-id", bad),
            ],
            None,
        )
        .await;
        assert!(reply.status.is_client_error(), "{bad}: {}", reply.status);
        let body = reply.json().await;
        assert!(body["error"]["code"].is_i64(), "{bad}: JSON-RPC error body");
    }
}

#[tokio::test]
async fn cancelled_notification_stops_the_handler_without_a_response() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let reply = post(
        &h.router,
        Some(&session),
        call(9, "slow", json!({"ms": 30_000})),
    )
    .await;
    let cancel = post(
        &h.router,
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}),
    )
    .await;
    assert_eq!(cancel.status, StatusCode::ACCEPTED);
    let events = reply.events().await;
    assert!(
        messages(&events).is_empty(),
        "no response after cancellation: {events:?}"
    );
}

#[tokio::test]
async fn unsupported_protocol_version_header_is_400() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let mut headers = POST_HEADERS.to_vec();
    headers.push(("mcp-session-id", &session));
    headers.push(("mcp-protocol-version", "1999-01-01"));
    let reply = send(
        &h.router,
        "POST",
        &headers,
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string()),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    headers.pop();
    headers.push(("mcp-protocol-version", "2025-06-18"));
    let reply = send(
        &h.router,
        "POST",
        &headers,
        Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string()),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
}

#[tokio::test]
async fn json_response_mode_answers_with_one_object() {
    let h = harness_with(configured::<durable_mcp_http::HttpConfig>(|c| {
        c.json_response = true;
    }));
    let session = initialize(&h.router, "2025-11-25").await;
    let reply = post(
        &h.router,
        Some(&session),
        call(1, "echo", json!({"text": "j"})),
    )
    .await;
    assert_eq!(reply.headers["content-type"], "application/json");
    assert_eq!(reply.json().await["result"]["content"][0]["text"], "j");
}

/// Regression: rmcp cancels its own token when its service loop ends, which raced with the
/// engine reading the outcome, and the engine took it for a client's cancellation and
/// dropped the response (37 of 60 calls in one probe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_outcome_kept_when_rmcp_loop_ends_first() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    for n in 0..200 {
        let reply = post(
            &h.router,
            Some(&session),
            call(n, "echo", json!({"text": "r"})),
        )
        .await;
        let msgs = messages(&reply.events().await);
        assert_eq!(msgs.len(), 1, "call {n} lost its response");
        assert_eq!(msgs[0]["id"], n);
    }
}

/// D5: a session ended by another worker (straight in the store, as that worker's DELETE
/// does) cancels a handler still running for it here, long before the handler would end.
#[tokio::test]
async fn d5_a_session_ended_elsewhere_cancels_its_handler_here() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let (router, header) = (h.router.clone(), session.clone());
    let call = tokio::spawn(async move {
        post(
            &router,
            Some(&header),
            call(1, "slow", json!({"ms": 60_000})),
        )
        .await
        .text()
        .await
    });
    eventually("the handler runs", async || h.engine.in_flight() == 1).await;
    assert!(
        h.store
            .end_session(
                &durable_mcp_store::Principal::anonymous(),
                &session.parse().unwrap()
            )
            .await
            .unwrap()
    );
    eventually("the handler is cancelled", async || {
        h.engine.in_flight() == 0
    })
    .await;
    call.abort();
}

#[tokio::test]
async fn d5_idle_session_expires_everywhere() {
    let options = configured::<durable_mcp_engine::EngineOptions>(|c| {
        c.retention = durable_mcp_store::Retention {
            session_idle_ttl_ms: Some(1_000),
            max_stream_age_ms: None,
        };
    });
    let h = harness_full(durable_mcp_http::HttpConfig::default(), options);
    let active = initialize(&h.router, "2025-11-25").await;
    let idle = initialize(&h.router, "2025-11-25").await;
    let idle_since = std::time::Instant::now();
    // Use `active` (every 10 ms, far within the TTL) until the TTL has passed since `idle`
    // was last used.
    eventually("the TTL passes", async || {
        let reply = post(
            &h.router,
            Some(&active),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "use keeps a session alive");
        let _ = reply.text().await;
        idle_since.elapsed() > std::time::Duration::from_millis(1_100)
    })
    .await;
    let reply = post(
        &h.router,
        Some(&idle),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "idle past the TTL");
    let gone = h
        .store
        .load_session(
            &durable_mcp_store::Principal::anonymous(),
            &idle.parse().unwrap(),
        )
        .await;
    assert!(
        gone.is_err(),
        "ended in the store, so every worker answers 404"
    );
}

#[tokio::test]
async fn d14_on_demand_prune_removes_old_finished_streams_only() {
    let options = configured::<durable_mcp_engine::EngineOptions>(|c| {
        c.retention = durable_mcp_store::Retention {
            session_idle_ttl_ms: None,
            max_stream_age_ms: Some(50),
        };
    });
    let h = harness_full(durable_mcp_http::HttpConfig::default(), options);
    let session = initialize(&h.router, "2025-11-25").await;
    let done = post(
        &h.router,
        Some(&session),
        call(1, "echo", json!({"text": "x"})),
    )
    .await
    .events()
    .await;
    let running = post(
        &h.router,
        Some(&session),
        call(2, "slow", json!({"ms": 5_000})),
    )
    .await;
    let first = running.first_events(1).await;
    // Prune until the finished stream is past its maximum age; the open one never goes.
    let mut deleted = 0;
    eventually("the finished stream is pruned", async || {
        deleted += h.engine.prune().await.unwrap().streams_deleted;
        deleted > 0
    })
    .await;
    assert_eq!(deleted, 1);
    let finished_id: durable_mcp_store::EventId = done[0].0.clone().unwrap().parse().unwrap();
    let open_id: durable_mcp_store::EventId = first[0].0.clone().unwrap().parse().unwrap();
    assert!(
        h.store
            .read_after(&finished_id.stream, 0, 10)
            .await
            .is_err()
    );
    assert!(
        h.store.read_after(&open_id.stream, 0, 10).await.is_ok(),
        "a running request's stream is kept"
    );
    let resumed = send(
        &h.router,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
            ("last-event-id", done[0].0.as_ref().unwrap()),
        ],
        None,
    )
    .await;
    assert_eq!(
        resumed.status,
        StatusCode::NOT_FOUND,
        "resuming a pruned stream is a clear 4xx"
    );
}

#[tokio::test]
async fn shutdown_ends_open_sse_connections() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let mut get = open_get(&h.router, &session, None).await;
    get.until(|s| !s.events().is_empty()).await;
    h.transport.shutdown_token().cancel();
    get.until(|_| false).await;
    assert!(get.ended, "the connection ends");
    assert_eq!(
        get.events().len(),
        1,
        "the priming event, then nothing: {}",
        get.text
    );
}

const LIST_CHANGED: &str = "notifications/tools/list_changed";

/// Streamable HTTP, "Multiple Connections": each message on only one of the connected
/// streams, never broadcast. Both GET streams are read until the message arrives or three
/// keep-alives show they had nothing more to send.
#[tokio::test]
async fn spec_multiple_connections_one_list_changed_reaches_one_get_stream() {
    let h = harness_with(configured::<durable_mcp_http::HttpConfig>(|c| {
        c.keep_alive = std::time::Duration::from_millis(100);
    }));
    let session = initialize(&h.router, "2025-11-25").await;
    let mut a = open_get(&h.router, &session, None).await;
    a.until(|s| !s.events().is_empty()).await;
    let mut b = open_get(&h.router, &session, None).await;
    b.until(|s| !s.events().is_empty()).await;
    let _ = post(&h.router, Some(&session), call(1, "change", json!({})))
        .await
        .events()
        .await;
    let (before_a, before_b) = (a.keep_alives(), b.keep_alives());
    a.until(|s| s.count(LIST_CHANGED) > 0 || s.keep_alives() >= before_a + 3)
        .await;
    b.until(|s| s.count(LIST_CHANGED) > 0 || s.keep_alives() >= before_b + 3)
        .await;
    assert_eq!(
        a.count(LIST_CHANGED) + b.count(LIST_CHANGED),
        1,
        "exactly one GET stream gets it:\nA: {}\nB: {}",
        a.text,
        b.text
    );
    assert_eq!(b.count(LIST_CHANGED), 1, "the newest GET stream delivers");
}

/// D3: a GET stream that closed before a message was committed leaves it for the next GET.
#[tokio::test]
async fn d3_get_that_drops_before_delivery_leaves_the_message_for_the_next_get() {
    let h = harness_with(configured::<durable_mcp_http::HttpConfig>(|c| {
        c.keep_alive = std::time::Duration::from_millis(100);
    }));
    let session = initialize(&h.router, "2025-11-25").await;
    let mut first = open_get(&h.router, &session, None).await;
    first.until(|s| !s.events().is_empty()).await;
    drop(first);
    let _ = post(&h.router, Some(&session), call(1, "change", json!({})))
        .await
        .events()
        .await;
    let mut next = open_get(&h.router, &session, None).await;
    next.until(|s| {
        (s.count(LIST_CHANGED) > 0 && s.text.contains("\nretry: ")) || s.keep_alives() >= 3
    })
    .await;
    assert_eq!(
        next.count(LIST_CHANGED),
        1,
        "the undelivered message reaches the next GET: {}",
        next.text
    );
    assert!(
        next.text.contains("\nretry: "),
        "the next GET still gets its priming event, after it: {}",
        next.text
    );
}

/// D3 and "MUST NOT replay messages that would have been delivered on a different stream":
/// resuming a GET stream replays what it was given after that id, not what another GET
/// stream of the session delivered meanwhile, then continues live.
#[tokio::test]
async fn d3_resume_replays_only_what_that_get_stream_was_given() {
    let h = harness_with(configured::<durable_mcp_http::HttpConfig>(|c| {
        c.keep_alive = std::time::Duration::from_millis(100);
    }));
    let session = initialize(&h.router, "2025-11-25").await;
    let mut a = open_get(&h.router, &session, None).await;
    a.until(|s| !s.events().is_empty()).await;
    let priming = a.events()[0].0.clone().expect("priming id");
    let _ = post(&h.router, Some(&session), call(1, "change", json!({})))
        .await
        .events()
        .await;
    a.until(|s| s.count(LIST_CHANGED) == 1).await;
    let first = a.events().last().unwrap().0.clone().unwrap();
    let mut b = open_get(&h.router, &session, None).await;
    b.until(|s| !s.events().is_empty()).await;
    let _ = post(&h.router, Some(&session), call(2, "change", json!({})))
        .await
        .events()
        .await;
    b.until(|s| s.count(LIST_CHANGED) == 1).await;
    let second = b.events().last().unwrap().0.clone().unwrap();
    drop(a);

    let mut resumed = open_get(&h.router, &session, Some(&priming)).await;
    resumed.until(|s| s.count(LIST_CHANGED) == 1).await;
    let _ = post(&h.router, Some(&session), call(3, "change", json!({})))
        .await
        .events()
        .await;
    resumed.until(|s| s.count(LIST_CHANGED) == 2).await;
    let ids: Vec<String> = resumed
        .events()
        .into_iter()
        .filter(|(_, d)| !d.is_empty())
        .map(|(id, _)| id.unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{}", resumed.text);
    assert_eq!(
        ids[0], first,
        "the resumed stream's own message is replayed"
    );
    assert!(
        !ids.contains(&second),
        "the message delivered on the other GET stream is not replayed: {}",
        resumed.text
    );
    b.until(|s| s.keep_alives() >= 3).await;
    assert_eq!(
        b.count(LIST_CHANGED),
        1,
        "the resumed stream took the delivery over: {}",
        b.text
    );
}

/// The bound: opening one GET stream more than `max_get_streams_per_session` closes the
/// session's oldest; the others stay open.
#[tokio::test]
async fn get_streams_over_the_bound_close_the_oldest() {
    let config = configured::<durable_mcp_http::HttpConfig>(|c| {
        c.keep_alive = std::time::Duration::from_millis(100);
        c.max_get_streams_per_session = 2;
    });
    let h = harness_with(config);
    let session = initialize(&h.router, "2025-11-25").await;
    let mut gets = Vec::new();
    for _ in 0..3 {
        let mut get = open_get(&h.router, &session, None).await;
        get.until(|s| !s.events().is_empty()).await;
        gets.push(get);
    }
    gets[0].until(|_| false).await;
    assert!(gets[0].ended, "the oldest GET stream is closed");
    for get in &mut gets[1..] {
        get.until(|s| s.keep_alives() >= 2).await;
        assert!(!get.ended, "the newer GET streams stay open");
    }
    assert_eq!(h.engine.open_get_streams(), 2);
}

/// Regression (issue 9, 12a): versions were compared as strings, so a header later than
/// 2026-07-28 was taken for 2026-07-28 instead of being refused.
#[tokio::test]
async fn unknown_protocol_version_headers_are_400_not_the_nearest_known_version() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    for unknown in ["9999-99-99", "2026-07-29"] {
        let mut headers = POST_HEADERS.to_vec();
        headers.push(("mcp-session-id", &session));
        headers.push(("mcp-protocol-version", unknown));
        let reply = send(
            &h.router,
            "POST",
            &headers,
            Some(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).to_string()),
        )
        .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{unknown}");
        let body = reply.json().await;
        assert_eq!(body["error"]["code"], -32022, "{unknown}: {body}");
        assert_eq!(body["error"]["data"]["requested"], unknown);
        assert_eq!(body["id"], 5);
        let get = send(
            &h.router,
            "GET",
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
                ("mcp-protocol-version", unknown),
            ],
            None,
        )
        .await;
        assert_eq!(get.status, StatusCode::BAD_REQUEST, "GET with {unknown}");
    }
}

#[tokio::test]
async fn initialize_with_a_version_durable_mcp_does_not_serve_negotiates_the_latest_legacy() {
    let h = harness();
    let reply = post(
        &h.router,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.json().await["result"]["protocolVersion"],
        "2025-11-25"
    );
}

/// Regression (issue 9, 12d): error bodies said `"id": null` although the request's id was
/// readable.
#[tokio::test]
async fn error_bodies_echo_the_request_id() {
    let h = harness();
    let request = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/list"}).to_string();
    let mut unknown_session = POST_HEADERS.to_vec();
    unknown_session.push(("mcp-session-id", "no-such-session"));
    let reply = send(&h.router, "POST", &unknown_session, Some(request.clone())).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.json().await["id"], 41, "404 Session not found");
    let reply = send(&h.router, "POST", &POST_HEADERS, Some(request.clone())).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json().await["id"], 41, "400 session required");
    let reply = send(
        &h.router,
        "POST",
        &[
            ("accept", "application/json"),
            ("content-type", "application/json"),
        ],
        Some(request.clone()),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(reply.json().await["id"], 41, "406");
    let reply = send(
        &h.router,
        "POST",
        &[POST_HEADERS[0], ("content-type", "text/plain")],
        Some(request),
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(reply.json().await["id"], 41, "415");
}

async fn subscription(h: &Harness, session: &str, method: &str, uri: &str) {
    let reply = post(
        &h.router,
        Some(session),
        json!({"jsonrpc": "2.0", "id": 30, "method": method, "params": {"uri": uri}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.text().await;
}

/// Regression (issue 9, 12c): `resources/updated` listed every live session to find the
/// subscribed ones. It reaches exactly the sessions subscribed to its URI, through either
/// worker, and lists no sessions.
#[tokio::test]
async fn resource_update_reaches_exactly_the_subscribed_sessions_without_listing_sessions() {
    use durable_mcp_engine::EngineOptions;
    use durable_mcp_store::testing::{CountingStore, Op};
    use durable_mcp_store::{Principal, SessionId, Store};
    let store = std::sync::Arc::new(CountingStore::counting(std::sync::Arc::new(
        durable_mcp_store_memory::MemoryStore::new(),
    )));
    let a = harness_on(store.clone(), Default::default(), EngineOptions::default());
    let b = harness_on(store.clone(), Default::default(), EngineOptions::default());
    let on_a = initialize(&a.router, "2025-11-25").await;
    let on_b = initialize(&b.router, "2025-06-18").await;
    let other_uri = initialize(&a.router, "2025-11-25").await;
    let unsubscribed = initialize(&b.router, "2025-11-25").await;
    let bystander = initialize(&b.router, "2025-11-25").await;
    subscription(&a, &on_a, "resources/subscribe", "test://x").await;
    subscription(&b, &on_b, "resources/subscribe", "test://x").await;
    subscription(&a, &other_uri, "resources/subscribe", "test://x/y").await;
    subscription(&b, &unsubscribed, "resources/subscribe", "test://x").await;
    subscription(&a, &unsubscribed, "resources/unsubscribe", "test://x").await;

    let lists = store.hook().count(Op::ListSessions);
    post(
        &b.router,
        Some(&bystander),
        call(9, "touch", json!({"text": "test://x"})),
    )
    .await
    .text()
    .await;
    assert_eq!(
        store.hook().count(Op::ListSessions),
        lists,
        "the update listed the live sessions"
    );

    for (session, expected) in [
        (&on_a, 1),
        (&on_b, 1),
        (&other_uri, 0),
        (&unsubscribed, 0),
        (&bystander, 0),
    ] {
        let id: SessionId = session.parse().unwrap();
        let record = store
            .load_session(&Principal::anonymous(), &id)
            .await
            .unwrap();
        let events = store
            .read_after(&record.standalone_stream, 0, 100)
            .await
            .unwrap()
            .events;
        let updates = events
            .iter()
            .filter(|e| e.data.contains("notifications/resources/updated"))
            .count();
        assert_eq!(updates, expected, "session {session}: {events:?}");
        if expected == 1 {
            assert!(
                events.iter().any(|e| e.data.contains("\"test://x\"")),
                "{events:?}"
            );
        }
    }
}

/// The frames of `reply`'s body that are ready now, and whether the body ended among them.
fn ready_frames(reply: Reply) -> (Vec<String>, bool) {
    use futures::{FutureExt, StreamExt};
    let mut stream = reply.body.into_data_stream();
    let mut frames = Vec::new();
    loop {
        match stream.next().now_or_never() {
            Some(Some(chunk)) => {
                frames.push(String::from_utf8_lossy(&chunk.expect("a body chunk")).into_owned())
            }
            Some(None) => return (frames, true),
            None => return (frames, false),
        }
    }
}

/// `HttpConfig::first_event_wait`: while another request runs on the worker, a quick answer is
/// ready with the priming event when the response starts (so on a socket it leaves in the
/// same write: one wake-up of the client), and a slow handler's client gets its priming event
/// after the wait, long before the answer; a worker with nothing else to do, or no wait,
/// starts the response before the handler answers.
#[tokio::test]
async fn a_quick_answer_leaves_with_its_priming_event_while_the_worker_is_busy() {
    use std::time::{Duration, Instant};
    let config = configured::<durable_mcp_http::HttpConfig>(|c| {
        c.first_event_wait = Duration::from_millis(300);
    });
    let h = harness_with(config);
    let session = initialize(&h.router, "2025-11-25").await;
    // Alone, the response starts at once with its priming event (a quick handler may have
    // answered by then: the request's path runs in a task of its own, see `Engine::accept`).
    let started = Instant::now();
    let (frames, _) = ready_frames(
        post(
            &h.router,
            Some(&session),
            call(1, "echo", json!({"text": "alone"})),
        )
        .await,
    );
    assert!(
        started.elapsed() < Duration::from_millis(250) && frames.concat().contains("\nretry: "),
        "alone: the priming event at once: {frames:?}"
    );

    eventually("the first call to end", async || h.engine.in_flight() == 0).await;
    // A slow call keeps the worker busy (it started alone: its response started at once).
    let started = Instant::now();
    let busy = post(
        &h.router,
        Some(&session),
        call(2, "slow", json!({"ms": 5000})),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "alone, the slow call was not held"
    );
    let (frames, ended) = ready_frames(
        post(
            &h.router,
            Some(&session),
            call(3, "echo", json!({"text": "hi"})),
        )
        .await,
    );
    assert!(
        ended,
        "busy: the whole body is ready when the response starts: {frames:?}"
    );
    let text = frames.concat();
    assert!(
        text.contains("\nretry: ") && text.contains("\"text\":\"hi\""),
        "{text}"
    );
    assert_eq!(messages(&parse_sse(&text)).len(), 1, "{text}");

    let started = Instant::now();
    let reply = post(
        &h.router,
        Some(&session),
        call(4, "slow", json!({"ms": 3000})),
    )
    .await;
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_millis(2500),
        "the priming event waited {waited:?}"
    );
    let (frames, ended) = ready_frames(reply);
    assert!(
        !ended && frames.concat().contains("\nretry: "),
        "the priming event, not the answer: {frames:?}"
    );
    drop(busy);

    let h = harness_with(configured::<durable_mcp_http::HttpConfig>(|c| {
        c.first_event_wait = Duration::ZERO;
    }));
    let session = initialize(&h.router, "2025-11-25").await;
    let _busy = post(
        &h.router,
        Some(&session),
        call(5, "slow", json!({"ms": 5000})),
    )
    .await;
    let started = Instant::now();
    let reply = post(
        &h.router,
        Some(&session),
        call(6, "slow", json!({"ms": 3000})),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "no wait: the response starts at once"
    );
    let (frames, ended) = ready_frames(reply);
    assert!(
        !ended && frames.concat().contains("\nretry: "),
        "{frames:?}"
    );
}

/// D6 (issue 29): a request id the session used for one tool, sent again for another tool,
/// is the client's error (400, -32600 naming the id), never the first tool's answer; the
/// re-send of the first request still gets that answer.
#[tokio::test]
async fn d6_a_reused_id_with_another_tool_is_a_jsonrpc_error() {
    let h = harness();
    let session = initialize(&h.router, "2025-11-25").await;
    let first = messages(
        &post(
            &h.router,
            Some(&session),
            call(3, "echo", json!({"text": "first"})),
        )
        .await
        .events()
        .await,
    );
    assert_eq!(
        first.last().unwrap()["result"]["content"][0]["text"],
        "first",
        "{first:?}"
    );
    let reply = post(&h.router, Some(&session), call(3, "slow", json!({"ms": 1}))).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let body = reply.json().await;
    assert_eq!(
        (body["id"].clone(), body["error"]["code"].clone()),
        (json!(3), json!(-32600)),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("request id 3 was already used in this session by another request"),
        "{body}"
    );
    let again = messages(
        &post(
            &h.router,
            Some(&session),
            call(3, "echo", json!({"text": "first"})),
        )
        .await
        .events()
        .await,
    );
    assert_eq!(
        again.last(),
        first.last(),
        "the re-send of the first request gets its answer"
    );
}

/// A POST of a JSON-RPC batch on `session`.
async fn post_batch(h: &Harness, session: &str, batch: Value) -> Reply {
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    headers.push(("mcp-session-id", session));
    send(&h.router, "POST", &headers, Some(batch.to_string())).await
}

/// 2025-03-26 (transports, "Sending Messages to the Server"): a batch's requests are
/// answered on one SSE stream, each once; its notifications are handled; a batch of
/// notifications and responses only is answered 202.
#[tokio::test]
async fn spec_2025_03_26_batches_are_received() {
    let h = harness();
    let session = initialize(&h.router, "2025-03-26").await;
    let batch = json!([
        call(1, "echo", json!({"text": "one"})),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        call(2, "echo", json!({"text": "two"})),
    ]);
    let reply = post_batch(&h, &session, batch).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    let mut answers: Vec<(u64, String)> = reply
        .events()
        .await
        .into_iter()
        .map(|(_, data)| serde_json::from_str::<Value>(&data).unwrap())
        .map(|m| {
            (
                m["id"].as_u64().unwrap(),
                m["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    answers.sort();
    assert_eq!(answers, [(1, "one".to_owned()), (2, "two".to_owned())]);

    let one_way = json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}, {"jsonrpc": "2.0", "id": 77, "result": {}}]);
    assert_eq!(
        post_batch(&h, &session, one_way).await.status,
        StatusCode::ACCEPTED
    );
    // A request of a batch is a request like any other: re-sent alone, it is answered again.
    let again = post(
        &h.router,
        Some(&session),
        call(2, "echo", json!({"text": "two"})),
    )
    .await;
    assert_eq!(again.events().await.len(), 1);
}

/// With `json_response`, a batch's answers come back as one JSON array in the batch's order.
#[tokio::test]
async fn spec_2025_03_26_batch_in_json_response_mode_is_an_array_in_order() {
    let h = harness_with(configured::<durable_mcp_http::HttpConfig>(|c| {
        c.json_response = true;
    }));
    let session = initialize(&h.router, "2025-03-26").await;
    let reply = post_batch(
        &h,
        &session,
        json!([
            call(5, "echo", json!({"text": "a"})),
            call(4, "echo", json!({"text": "b"}))
        ]),
    )
    .await;
    assert_eq!(reply.headers["content-type"], "application/json");
    let body = reply.json().await;
    let ids: Vec<u64> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [5, 4], "{body}");
    assert_eq!(body[1]["result"]["content"][0]["text"], "b");
}

/// `T::default()` with `set` applied (the options structs are `#[non_exhaustive]`).
fn configured<T: Default>(set: impl FnOnce(&mut T)) -> T {
    let mut value = T::default();
    set(&mut value);
    value
}

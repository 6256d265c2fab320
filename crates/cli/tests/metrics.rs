//! Prometheus metrics end to end with the real binary (`serve --metrics-listen ADDR`, a
//! SQLite store in a temp dir): known traffic, then a scrape of `/metrics` over HTTP whose
//! counts and histogram buckets must be exactly what the traffic implies; no `/metrics`
//! unless configured; a crash-recovered run counted as a recovery; authentication refusals
//! counted by reason; a durable handler's answer taken from the journal counted. The proxy's
//! metrics are checked in `proxy.rs`.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::scrape::*;
use support::*;

/// The bucket bounds of the MCP semantic conventions, as the exposition writes them.
const MCP_BUCKETS: [&str; 15] = [
    "0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10", "30", "60", "120", "300",
    "+Inf",
];

/// Start a server with metrics on; returns it and the metrics address, once it answers.
fn start(store: &str, port: u16, extra: &[&str]) -> (Server, SocketAddr) {
    let metrics = metrics_addr();
    let mut args = vec!["--metrics-listen".to_owned(), metrics.to_string()];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(store, port, &args);
    wait_for_listener(metrics);
    (server, metrics)
}

fn call(id: u64, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}}})
}

const OPERATION: &str = "mcp_server_operation_duration_seconds";

/// After initialize, N `tools/call` of one tool, one failing call, one `Last-Event-ID`
/// resume and a `DELETE`, the scrape holds exactly those counts: the operation histogram
/// per method and tool (the failing one with `error_type`), with the buckets of the
/// semantic conventions; the sessions gauge up then down and the session duration
/// recorded at the end; store latency by backend `sqlite`; the resume and its event; a
/// task's status transitions.
#[test]
fn a_scrape_after_known_traffic_has_exact_counts_and_buckets() {
    const N: u64 = 5;
    let dir = temp_dir("metrics");
    let store = format!("sqlite:{}", dir.join("metrics.db").display());
    let (server, metrics) = start(&store, free_port(), &[]);
    let addr = server.addr;

    let session = initialize(addr);
    let scraped = scrape(metrics);
    assert_eq!(
        scraped.value("durable_mcp_sessions_live", &[]),
        1.0,
        "initialize opened one session"
    );
    assert_eq!(
        scraped.value(
            &format!("{OPERATION}_count"),
            &[("mcp_method_name", "initialize")]
        ),
        1.0
    );

    let mut resume_from = None;
    for id in 1..=N {
        let mut response = post(addr, Some(&session), &call(id, "test_simple_text"));
        assert_eq!(response.status, 200);
        if id == N {
            // The last call: read its priming event only, then resume after it.
            let (priming, data) = response.next_event().expect("priming event");
            assert_eq!(data, "");
            resume_from = priming;
            drop(response);
        } else {
            let messages = response.messages();
            assert_eq!(messages.last().unwrap().1["id"], json!(id), "{messages:?}");
        }
    }
    let resumed = resume(addr, &session, &resume_from.unwrap()).messages();
    assert_eq!(
        resumed.len(),
        1,
        "the rest of the stream: its outcome: {resumed:?}"
    );
    assert_eq!(resumed[0].1["id"], json!(N));
    let failed = post(addr, Some(&session), &call(100, "test_error_handling")).messages();
    assert_eq!(failed.last().unwrap().1["result"]["isError"], json!(true));
    let unknown = post(addr, Some(&session), &call(101, "no_such_tool")).messages();
    assert_eq!(unknown.last().unwrap().1["error"]["code"], json!(-32602));

    // A task-augmented call (2025-11-25): answered by its create result, then the task
    // runs to `completed`.
    let task_call = json!({"jsonrpc": "2.0", "id": 200, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 1, "step_ms": 10}, "task": {}}});
    let created = post(addr, Some(&session), &task_call).messages();
    let task_id = created.last().unwrap().1["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let tasks = "durable_mcp_tasks_transitions_total";
    let scraped = scrape_until(metrics, "the task to complete", |s| {
        s.exact(tasks, &[("status", "completed")]) == Some(1.0)
    });
    assert_eq!(
        scraped.value(tasks, &[("status", "working")]),
        1.0,
        "task {task_id} was created working"
    );
    assert_eq!(
        scraped.value(
            &format!("{OPERATION}_count"),
            &[
                ("mcp_method_name", "tools/call"),
                ("gen_ai_tool_name", "steps")
            ]
        ),
        1.0
    );

    let delete = request(addr, "DELETE", &[("mcp-session-id", &session)], None);
    assert_eq!(delete.status, 200);

    let scraped = scrape_until(metrics, "the SSE streams to close", |s| {
        s.exact("durable_mcp_sse_streams_open", &[]) == Some(0.0)
    });
    let tool = [
        ("mcp_method_name", "tools/call"),
        ("gen_ai_tool_name", "test_simple_text"),
    ];
    assert_eq!(
        scraped.value(&format!("{OPERATION}_count"), &tool),
        N as f64,
        "one operation per call"
    );
    let buckets = scraped.buckets(OPERATION, &tool);
    let bounds: Vec<&str> = buckets.iter().map(|(le, _)| le.as_str()).collect();
    assert_eq!(bounds, MCP_BUCKETS, "the semantic conventions' buckets");
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "cumulative buckets: {buckets:?}"
    );
    assert_eq!(
        buckets.iter().find(|(le, _)| le == "300").unwrap().1,
        N as f64,
        "every call took under 300 s"
    );
    assert_eq!(buckets.last().unwrap().1, N as f64, "+Inf holds every call");
    assert!(scraped.value(&format!("{OPERATION}_sum"), &tool) > 0.0);

    let failing = [
        ("mcp_method_name", "tools/call"),
        ("gen_ai_tool_name", "test_error_handling"),
        ("error_type", "tool_error"),
    ];
    assert_eq!(
        scraped.value(&format!("{OPERATION}_count"), &failing),
        1.0,
        "the failing call carries error_type"
    );
    assert_eq!(
        scraped.exact(
            &format!("{OPERATION}_count"),
            &[
                ("mcp_method_name", "tools/call"),
                ("gen_ai_tool_name", "test_error_handling")
            ]
        ),
        None,
        "and is not counted as a success"
    );

    let unknown = [
        ("mcp_method_name", "tools/call"),
        ("gen_ai_tool_name", "_OTHER"),
        ("error_type", "-32602"),
    ];
    assert_eq!(
        scraped.value(&format!("{OPERATION}_count"), &unknown),
        1.0,
        "an unknown tool's name mints no series"
    );
    assert!(!scraped.1.contains("no_such_tool"));

    assert_eq!(
        scraped.value("durable_mcp_sessions_live", &[]),
        0.0,
        "DELETE ended the session"
    );
    assert_eq!(
        scraped.value("mcp_server_session_duration_seconds_count", &[]),
        1.0
    );
    assert_eq!(
        scraped
            .buckets("mcp_server_session_duration_seconds", &[])
            .len(),
        MCP_BUCKETS.len()
    );
    assert_eq!(
        scraped.value("durable_mcp_requests_in_flight", &[]),
        0.0,
        "every run ended"
    );
    assert_eq!(
        scraped.value("durable_mcp_sse_replays_total", &[("stream", "request")]),
        1.0
    );
    assert_eq!(
        scraped.value("durable_mcp_sse_replayed_events_total", &[]),
        1.0,
        "the resume carried the outcome only"
    );

    let commit = [("backend", "sqlite"), ("operation", "commit")];
    let commits = scraped.value(
        "durable_mcp_store_operation_duration_seconds_count",
        &commit,
    );
    assert!(
        commits >= (N + 1) as f64,
        "every call commits at least once: {commits}"
    );
    assert!(
        scraped.value(
            "durable_mcp_store_operation_duration_seconds_count",
            &[("backend", "sqlite"), ("operation", "create_session")]
        ) >= 1.0
    );
    assert_eq!(
        scraped.value("durable_mcp_store_commits_total", &[("backend", "sqlite")]),
        commits,
        "every timed commit succeeded"
    );
    assert_eq!(
        scraped.value(
            "durable_mcp_store_batch_ops_count",
            &[("backend", "sqlite")]
        ),
        commits,
        "one batch size per commit"
    );
    assert!(
        scraped.value("durable_mcp_store_batch_ops_sum", &[("backend", "sqlite")]) >= commits,
        "at least one op per batch"
    );
    assert!(
        !scraped.names().iter().any(|n| n.contains('.')),
        "dots become underscores"
    );
}

/// Without `--metrics-listen` nothing serves `/metrics`: not the MCP listener either.
#[test]
fn metrics_are_absent_unless_configured() {
    let dir = temp_dir("metrics-off");
    let store = format!("sqlite:{}", dir.join("off.db").display());
    let server = Server::start(&store, free_port(), &[]);
    let _session = initialize(server.addr);
    let response = request_at(server.addr, "GET", "/metrics", &[], None);
    assert_eq!(response.status, 404, "no metrics on the MCP listener");
    // With the flag, the MCP listener still does not serve them (only their own address).
    let (on, metrics) = start(
        &format!("sqlite:{}", dir.join("on.db").display()),
        free_port(),
        &[],
    );
    assert_eq!(
        request_at(on.addr, "GET", "/metrics", &[], None).status,
        404
    );
    assert_eq!(
        scrape(metrics)
            .exact("durable_mcp_sessions_live", &[])
            .unwrap_or(0.0),
        0.0,
        "no session yet"
    );
}

/// A worker killed mid-run and restarted on the same SQLite file takes its own run over
/// and runs it again: the new process counts one takeover (`own`) and one recovery.
#[test]
fn a_crash_recovered_run_is_counted() {
    let dir = temp_dir("metrics-crash");
    let store = format!("sqlite:{}", dir.join("crash.db").display());
    let port = free_port();
    let lease = ["--lease-ms", "1500"];
    let (mut first, _) = start(&store, port, &lease);
    let session = initialize(first.addr);
    let ledger = dir.join("effects.ledger");
    let steps = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 3, "step_ms": 1000, "ledger": ledger.display().to_string()}}});
    let mut response = post(first.addr, Some(&session), &steps);
    assert_eq!(response.status, 200);
    let (priming, _) = response.next_event().expect("priming event");
    drop(response);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&ledger)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "step 1 never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill();
    let (second, metrics) = start(&store, port, &lease);
    let rest = resume(second.addr, &session, &priming.unwrap())
        .within(RECOVERY_WITHIN)
        .messages();
    assert_eq!(
        rest.last().unwrap().1["result"]["structuredContent"]["steps"],
        json!([1, 2, 3]),
        "{rest:?}"
    );
    let scraped = scrape(metrics);
    assert_eq!(
        scraped.value("durable_mcp_journal_takeovers_total", &[("from", "own")]),
        1.0
    );
    assert_eq!(
        scraped.value("durable_mcp_journal_recoveries_total", &[("kind", "rerun")]),
        1.0
    );
    assert_eq!(
        scraped.exact(
            "durable_mcp_journal_takeovers_total",
            &[("from", "expired")]
        ),
        None
    );
}

/// Any durable handler's question answered from the journal is counted (not only the
/// proxy's): the `multi_input` fixture asks two questions; a 2026-07-28 retry answers the
/// first (journaled), the next retry the second, and the handler's re-run takes the first
/// answer from the journal instead of asking it again.
#[test]
fn a_durable_handlers_answer_taken_from_the_journal_is_counted() {
    const REUSED: &str = "durable_mcp_journal_answers_reused_total";
    let dir = temp_dir("metrics-answers");
    let store = format!("sqlite:{}", dir.join("answers.db").display());
    let (server, metrics) = start(&store, free_port(), &[]);
    let round = |id: u64, responses: Option<(&str, &str, &str)>| {
        let mut params = json!({"name": "multi_input", "arguments": {}});
        if let Some((key, answer, state)) = responses {
            params["inputResponses"] =
                json!({key: {"action": "accept", "content": {"name": answer}}});
            params["requestState"] = json!(state);
        }
        modern(server.addr, id, "tools/call", params, false)
    };
    let first = round(1, None);
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let mut keys: Vec<String> = first["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    keys.sort();
    assert_eq!(keys.len(), 2, "{first}");
    let second = round(
        2,
        Some((
            &keys[0],
            "A",
            first["result"]["requestState"].as_str().unwrap(),
        )),
    );
    assert_eq!(
        second["result"]["resultType"], "input_required",
        "the second question is still open: {second}"
    );
    assert_eq!(
        scrape(metrics).exact(REUSED, &[("method", "elicitation/create")]),
        None,
        "nothing taken from the journal yet"
    );
    let third = round(
        3,
        Some((
            &keys[1],
            "B",
            second["result"]["requestState"].as_str().unwrap(),
        )),
    );
    assert_eq!(
        third["result"]["content"][0]["text"], "multi_input: a=A, b=B",
        "{third}"
    );
    let scraped = scrape(metrics);
    assert_eq!(
        scraped.value(REUSED, &[("method", "elicitation/create")]),
        1.0,
        "the first answer, from the journal: {}",
        scraped.1
    );
}

/// With API keys and an endpoint scope (`--auth-scopes mcp`): requests without
/// credentials, with an unknown key, with a malformed `Authorization` header and with a key
/// lacking the scope are each counted once by reason; the accepted ones by method. No key
/// or principal appears in the exposition.
#[test]
fn auth_refusals_are_counted_by_reason_and_accepted_credentials_by_method() {
    let dir = temp_dir("metrics-auth");
    let keys = dir.join("keys");
    std::fs::write(
        &keys,
        "alice k-alice-0123456789 mcp\nbob k-bob-9876543210\n",
    )
    .unwrap();
    let (server, metrics) = start(
        "memory:",
        free_port(),
        &[
            "--auth-api-keys",
            keys.to_str().unwrap(),
            "--auth-scopes",
            "mcp",
        ],
    );
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "metrics-test", "version": "1"}}})
    .to_string();
    let post_with = |authorization: Option<&str>| {
        let mut headers = vec![
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
        ];
        if let Some(value) = authorization {
            headers.push(("authorization", value));
        }
        let response = request(server.addr, "POST", &headers, Some(&initialize));
        let status = response.status;
        let _ = response.body();
        status
    };
    assert_eq!(post_with(None), 401);
    assert_eq!(post_with(Some("Bearer k-nobody")), 401);
    assert_eq!(post_with(Some("Bearer k-alice-0123456789x")), 401);
    assert_eq!(post_with(Some("Bearer a b")), 400);
    assert_eq!(
        post_with(Some("Bearer k-bob-9876543210")),
        403,
        "bob's key lacks the endpoint's scope"
    );
    assert_eq!(post_with(Some("Bearer k-alice-0123456789")), 200);
    assert_eq!(post_with(Some("Bearer k-alice-0123456789")), 200);

    let scraped = scrape(metrics);
    let refused = "durable_mcp_auth_refused_total";
    assert_eq!(scraped.value(refused, &[("reason", "missing")]), 1.0);
    assert_eq!(scraped.value(refused, &[("reason", "invalid_token")]), 2.0);
    assert_eq!(scraped.value(refused, &[("reason", "malformed")]), 1.0);
    assert_eq!(
        scraped.value(refused, &[("reason", "insufficient_scope")]),
        1.0
    );
    for reason in ["expired", "unavailable"] {
        assert_eq!(
            scraped.exact(refused, &[("reason", reason)]),
            None,
            "no {reason} refusal happened"
        );
    }
    assert_eq!(
        scraped.value(
            "durable_mcp_auth_authenticated_total",
            &[("method", "api_key")]
        ),
        2.0
    );
    assert_eq!(
        scraped.exact(
            "durable_mcp_auth_fetch_failures_total",
            &[("endpoint", "jwks")]
        ),
        None,
        "no authorization server here"
    );
    for secret in ["k-alice", "k-bob", "k-nobody", "key:alice"] {
        assert!(
            !scraped.1.contains(secret),
            "no credential or principal in the exposition: {secret}"
        );
    }
}

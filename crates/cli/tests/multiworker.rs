//! Several workers on one shared store (PostgreSQL, Redis): a stream resumes on another
//! worker after its worker is killed (D3, D4), live messages and answers cross workers, and
//! a store outage fails fast and heals by itself (D15).
//!
//! These tests read `DATABASE_URL` / `REDIS_URL` (defaults on loopback). Outside CI a missing
//! service skips them with a printed reason; in CI (`durable_mcp_store::in_ci`) they fail.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::backend::Backend;
use support::proxy::Proxy;
use support::*;

/// Worker A is killed with SIGKILL while a call runs; the client resumes on worker B, which
/// takes the call over once A's lease expires and re-runs it (D3, D4, D7).
fn resume_on_another_worker(backend: Backend) {
    let Some((mut a, b)) = two_workers(backend, &[]) else {
        return;
    };
    let session = initialize(a.addr);
    // 100 ms between steps: after three messages the call has more than a second to go.
    let (last, seen) = read_part(a.addr, &session, &emit_call(42, 10, 100), 3);
    a.kill();
    let resumed = resume(b.addr, &session, &last);
    assert_eq!(resumed.status, 200, "D4: worker B serves A's session");
    let rest = resumed.within(RECOVERY_WITHIN).messages();
    check_recovered_rest(42, 10, &seen, &rest);
}

/// D6, D7: worker A is killed while a call runs; its client re-sends the request (same
/// session, same id) to worker B. B cannot tell a dead worker from a live one before A's
/// lease runs out: the re-send is attached to the run and answered once B takes it over,
/// within the lease and a recovery pass (docs/durable-execution.md).
fn resend_to_another_worker_after_a_crash(backend: Backend) {
    const LEASE: Duration = Duration::from_secs(3);
    let Some((mut a, b)) = two_workers(backend, &["--lease-ms", "3000"]) else {
        return;
    };
    let session = initialize(a.addr);
    let call = emit_call(43, 10, 100);
    let (_, seen) = read_part(a.addr, &session, &call, 3);
    assert_eq!(seen.len(), 3);
    a.kill();
    let killed = Instant::now();
    let messages = post(b.addr, Some(&session), &call)
        .within(RECOVERY_WITHIN)
        .messages();
    let waited = killed.elapsed();
    let outcomes: Vec<&Value> = messages
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m["id"] == 43)
        .collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {messages:?}");
    assert_eq!(
        outcomes[0]["result"]["content"][0]["text"], "10",
        "{}",
        outcomes[0]
    );
    eprintln!(
        "{backend:?}: a re-send to another worker after a crash was answered {waited:?} after the kill (lease {LEASE:?})"
    );
    assert!(
        waited < LEASE + Duration::from_secs(3),
        "answered after {waited:?}"
    );
}

fn live_delivery_and_answers_cross_workers(backend: Backend) {
    let Some((a, b)) = two_workers(backend, &[]) else {
        return;
    };
    let session = initialize(a.addr);

    // A GET stream on B receives, live, the list changes caused by calls on A. The
    // latency (call sent on A .. message read on B, including the call's own round trip)
    // is printed for the docs.
    let mut get = request(
        b.addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
        ],
        None,
    );
    assert_eq!(get.status, 200);
    let _priming = get.next_event().expect("priming");
    let mut latencies = Vec::new();
    for i in 0..40 {
        let started = Instant::now();
        let call = json!({"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": {"name": "test_trigger_tool_change", "arguments": {}}});
        let sent = post(a.addr, Some(&session), &call);
        let (_, data) = get.next_event().expect("live event on B");
        latencies.push(started.elapsed());
        let message: Value = serde_json::from_str(&data).unwrap();
        assert_eq!(message["method"], "notifications/tools/list_changed");
        let _ = sent.messages();
    }
    latencies.sort();
    eprintln!(
        "{backend:?}: cross-worker delivery median {:?}, p99 {:?} (40 samples)",
        latencies[latencies.len() / 2],
        latencies[latencies.len() * 99 / 100]
    );

    // An elicitation asked on A is answered through B.
    let call = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "test_elicitation", "arguments": {"message": "name?"}}});
    let mut stream = post(a.addr, Some(&session), &call);
    let question = loop {
        let (_, data) = stream.next_event().expect("question");
        if data.is_empty() {
            continue;
        }
        let m: Value = serde_json::from_str(&data).unwrap();
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"username": "grace", "email": "g@example.com"}}});
    assert_eq!(post(b.addr, Some(&session), &answer).status, 202);
    let result = stream
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .find(|m| m["id"] == 6)
        .expect("result on A");
    assert!(result.to_string().contains("grace"), "{result}");
}

/// Streamable HTTP "Multiple Connections" across workers: two GET streams of one session,
/// on two workers; each list change reaches exactly one of them (the newest).
fn exactly_one_get_stream_across_workers(backend: Backend) {
    let Some((a, b)) = two_workers(backend, &["--sse-keep-alive-ms", "200"]) else {
        return;
    };
    let session = initialize(a.addr);
    let headers = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", session.as_str()),
    ];
    let mut on_a = request(a.addr, "GET", &headers, None);
    on_a.next_event().expect("priming on A");
    let mut on_b = request(b.addr, "GET", &headers, None);
    on_b.next_event().expect("priming on B");
    for i in 0..3 {
        let call = json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": {"name": "test_trigger_tool_change", "arguments": {}}});
        let _ = post(a.addr, Some(&session), &call).messages();
    }
    let on_b_count = count_until_idle(&mut on_b, "notifications/tools/list_changed", 3, 3);
    let on_a_count = count_until_idle(&mut on_a, "notifications/tools/list_changed", 3, 3);
    assert_eq!(
        on_a_count + on_b_count,
        3,
        "each change on exactly one GET stream (A {on_a_count}, B {on_b_count})"
    );
    assert_eq!(on_b_count, 3, "the newest GET stream (on B) delivers");

    // D3: when B's GET stream closes, the one on A takes the delivery over (within a few
    // keep-alive ticks) and gets what was committed after.
    drop(on_b);
    let call = json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {"name": "test_trigger_tool_change", "arguments": {}}});
    let _ = post(a.addr, Some(&session), &call).messages();
    let handed_over = count_until_idle(&mut on_a, "notifications/tools/list_changed", 1, 50);
    assert_eq!(
        handed_over, 1,
        "the GET stream on A took over after B's closed"
    );
}

#[test]
fn spec_postgres_exactly_one_get_stream_across_workers() {
    exactly_one_get_stream_across_workers(Backend::Postgres);
}

#[test]
fn spec_redis_exactly_one_get_stream_across_workers() {
    exactly_one_get_stream_across_workers(Backend::Redis);
}

fn outage_fails_fast_and_heals(backend: Backend) {
    if !backend.available() {
        return;
    }
    let proxy = Proxy::start(backend.addr());
    let store = backend.store_url(Some(proxy.addr));
    let server = Server::start(&store, free_port(), &[]);
    let session = initialize(server.addr);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(post(server.addr, Some(&session), &list).status, 200);

    proxy.cut();
    let started = Instant::now();
    let response = post(server.addr, Some(&session), &list);
    let took = started.elapsed();
    assert_eq!(response.status, 503, "D15: the store is down");
    let body = response.json();
    assert!(body["error"]["code"].is_i64(), "{body}");
    assert!(took < Duration::from_secs(10), "fails fast ({took:?})");

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = post(server.addr, Some(&session), &list);
        if response.status == 200 {
            let msgs = response.messages();
            assert!(msgs.last().unwrap().1["result"]["tools"].is_array());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker recovers by itself when the store returns"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // The session is whole: a call streams and completes as before the outage.
    let call = emit_call(9, 3, 20);
    let msgs = post(server.addr, Some(&session), &call).messages();
    assert_eq!(
        msgs.iter()
            .filter(|(_, m)| m["method"] == "notifications/progress")
            .count(),
        3
    );
    assert_eq!(msgs.last().unwrap().1["id"], 9);
}

/// D15, regression (issue 9, 12b): a store that accepts connections and stops answering made
/// the first request wait the whole 30 s operation timeout on a pooled connection. Pooled
/// connections are checked (here at every reuse) within a short timeout, so the request fails
/// within the check and connect timeouts, and the worker heals when the store answers again.
fn hung_store_fails_fast_and_heals(store: &str, proxy: &Proxy) {
    let server = Server::start(store, free_port(), &[]);
    let session = initialize(server.addr);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(post(server.addr, Some(&session), &list).status, 200);

    proxy.hang();
    let started = Instant::now();
    let response = post(server.addr, Some(&session), &list);
    let took = started.elapsed();
    eprintln!("hung store: HTTP {} after {took:?}", response.status);
    assert_eq!(response.status, 503, "D15: the store does not answer");
    // At worst a background loop holds the one connection in a query the hung server never
    // answers: the request then gives up waiting for it after the acquire timeout (5 s), far
    // below the 30 s operation timeout; otherwise it spends a check and a reconnect (1 s + 2 s).
    assert!(
        took < Duration::from_secs(10),
        "fails fast, not after the 30 s operation timeout ({took:?})"
    );

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(30);
    while post(server.addr, Some(&session), &list).status != 200 {
        assert!(
            Instant::now() < deadline,
            "the worker recovers by itself when the store answers again"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// D4: sessions created on a worker that died are served by a fresh worker, and many
/// concurrent first requests to the restored sessions all succeed.
fn concurrent_first_requests_to_restored_sessions(backend: Backend) {
    if !backend.available() {
        return;
    }
    let store = backend.store_url(None);
    let mut a = Server::start(&store, free_port(), &[]);
    let sessions: Vec<String> = (0..20).map(|_| initialize(a.addr)).collect();
    a.kill();
    let b = Server::start(&store, free_port(), &[]);
    let mut threads = Vec::new();
    for session in &sessions {
        for i in 0..12 {
            let (addr, session) = (b.addr, session.clone());
            threads.push(std::thread::spawn(move || {
                let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}});
                let response = post(addr, Some(&session), &call);
                if response.status != 200 {
                    return Err(format!("HTTP {}", response.status));
                }
                match response.messages().last() {
                    Some((_, m)) if m["id"] == i && m.get("result").is_some() => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }));
        }
    }
    let total = threads.len();
    let errors: Vec<String> = threads
        .into_iter()
        .filter_map(|t| t.join().unwrap().err())
        .collect();
    eprintln!(
        "{backend:?}: {total} concurrent first requests to restored sessions, {} errors",
        errors.len()
    );
    assert!(errors.is_empty(), "{errors:?}");
}

/// D4: per-session state updated concurrently from two workers loses no update.
fn session_state_shared_by_workers(backend: Backend) {
    if !backend.available() {
        return;
    }
    let store = backend.store_url(None);
    let workers = [
        Server::start(&store, free_port(), &[]),
        Server::start(&store, free_port(), &[]),
    ];
    let session = initialize(workers[0].addr);
    let mut threads = Vec::new();
    for i in 0..30u64 {
        let (addr, session) = (workers[(i % 2) as usize].addr, session.clone());
        threads.push(std::thread::spawn(move || {
            let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "session_counter", "arguments": {}}});
            let msgs = post(addr, Some(&session), &call).messages();
            msgs.last().unwrap().1["result"]["content"][0]["text"].as_str().unwrap().parse::<u64>().unwrap()
        }));
    }
    let mut values: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    values.sort();
    assert_eq!(
        values,
        (1..=30).collect::<Vec<_>>(),
        "every increment seen exactly once: no lost update"
    );
    // The state is deleted with the session.
    assert_eq!(
        request(
            workers[1].addr,
            "DELETE",
            &[("mcp-session-id", &session)],
            None
        )
        .status,
        200
    );
}

/// D5: DELETE on one worker ends the session on all: a request waiting on another worker
/// for an answer ends, and every worker answers 404.
fn delete_ends_the_session_everywhere(backend: Backend) {
    if !backend.available() {
        return;
    }
    let store = backend.store_url(None);
    let (a, b) = (
        Server::start(&store, free_port(), &[]),
        Server::start(&store, free_port(), &[]),
    );
    let session = initialize(a.addr);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_elicitation", "arguments": {"message": "never answered"}}});
    let mut waiting = post(a.addr, Some(&session), &call);
    loop {
        let (_, data) = waiting.next_event().expect("the question");
        if data.contains("elicitation/create") {
            break;
        }
    }
    let started = Instant::now();
    assert_eq!(
        request(b.addr, "DELETE", &[("mcp-session-id", &session)], None).status,
        200
    );
    let rest = waiting.messages();
    assert!(
        rest.iter().all(|(_, m)| m["id"] != 3),
        "no result after the session ended: {rest:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the waiting stream ends promptly"
    );
    for w in [&a, &b] {
        assert_eq!(
            post(
                w.addr,
                Some(&session),
                &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
            )
            .status,
            404
        );
    }
}

/// A resource subscription made through worker A is honoured when the resource changes
/// because of a request on worker B, from another session.
fn resource_subscription_across_workers(backend: Backend) {
    if !backend.available() {
        return;
    }
    let store = backend.store_url(None);
    let (a, b) = (
        Server::start(&store, free_port(), &[]),
        Server::start(&store, free_port(), &[]),
    );
    let watcher = initialize(a.addr);
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": "test://watched-resource"}});
    let _ = post(a.addr, Some(&watcher), &subscribe).messages();
    let mut get = request(
        a.addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &watcher),
        ],
        None,
    );
    let _priming = get.next_event();
    let other = initialize(b.addr);
    let trigger = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "trigger_resource_update", "arguments": {"uri": "test://watched-resource"}}});
    let _ = post(b.addr, Some(&other), &trigger).messages();
    let (_, data) = get.next_event().expect("resources/updated on A");
    let message: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(message["method"], "notifications/resources/updated");
    assert_eq!(message["params"]["uri"], "test://watched-resource");
}

/// D11: `notifications/cancelled` POSTed to worker B cancels the handler running on A: its
/// stream ends without a response, well before the work would have finished.
fn cancellation_reaches_another_worker(backend: Backend) {
    let Some((a, b)) = two_workers(backend, &["--lease-ms", "1500"]) else {
        return;
    };
    let session = initialize(a.addr);
    let call = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {
        "name": "emit_events", "arguments": {"count": 200, "interval_ms": 50}, "_meta": {"progressToken": "p"}}});
    let mut response = post(a.addr, Some(&session), &call);
    response.next_event().expect("priming");
    response.next_event().expect("first progress");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 42, "reason": "test"}});
    let cancelled_at = Instant::now();
    assert_eq!(post(b.addr, Some(&session), &cancel).status, 202);
    let rest: Vec<Value> = response.messages().into_iter().map(|(_, m)| m).collect();
    let took = cancelled_at.elapsed();
    assert!(
        !rest.iter().any(|m| m["id"] == 42),
        "no response after a cancellation: {:?}",
        rest.last()
    );
    assert!(
        took < Duration::from_secs(5),
        "the handler on A stopped {took:?} after the cancellation on B"
    );
    let progress = rest
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert!(
        progress < 150,
        "stopped early ({progress} more progress messages)"
    );
}

#[test]
fn d11_postgres_cancellation_reaches_another_worker() {
    cancellation_reaches_another_worker(Backend::Postgres);
}

#[test]
fn d11_redis_cancellation_reaches_another_worker() {
    cancellation_reaches_another_worker(Backend::Redis);
}

#[test]
fn postgres_resource_subscription_across_workers() {
    resource_subscription_across_workers(Backend::Postgres);
}

#[test]
fn redis_resource_subscription_across_workers() {
    resource_subscription_across_workers(Backend::Redis);
}

#[test]
fn d5_postgres_delete_ends_the_session_everywhere() {
    delete_ends_the_session_everywhere(Backend::Postgres);
}

#[test]
fn d5_redis_delete_ends_the_session_everywhere() {
    delete_ends_the_session_everywhere(Backend::Redis);
}

#[test]
fn d4_postgres_session_state_shared_by_workers() {
    session_state_shared_by_workers(Backend::Postgres);
}

#[test]
fn d4_redis_session_state_shared_by_workers() {
    session_state_shared_by_workers(Backend::Redis);
}

#[test]
fn d4_postgres_concurrent_first_requests_to_restored_sessions() {
    concurrent_first_requests_to_restored_sessions(Backend::Postgres);
}

#[test]
fn d4_redis_concurrent_first_requests_to_restored_sessions() {
    concurrent_first_requests_to_restored_sessions(Backend::Redis);
}

#[test]
fn d3_postgres_resume_on_another_worker() {
    resume_on_another_worker(Backend::Postgres);
}

#[test]
fn d3_redis_resume_on_another_worker() {
    resume_on_another_worker(Backend::Redis);
}

#[test]
fn d6_postgres_resend_to_another_worker_after_a_crash() {
    resend_to_another_worker_after_a_crash(Backend::Postgres);
}

#[test]
fn d6_redis_resend_to_another_worker_after_a_crash() {
    resend_to_another_worker_after_a_crash(Backend::Redis);
}

#[test]
fn postgres_live_delivery_and_answers_cross_workers() {
    live_delivery_and_answers_cross_workers(Backend::Postgres);
}

#[test]
fn redis_live_delivery_and_answers_cross_workers() {
    live_delivery_and_answers_cross_workers(Backend::Redis);
}

#[test]
fn d15_postgres_outage_fails_fast_and_heals() {
    outage_fails_fast_and_heals(Backend::Postgres);
}

#[test]
fn d15_postgres_hung_store_fails_fast_and_heals() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let proxy = Proxy::start(backend.addr());
    // One pooled connection, checked at every reuse: the request (or a background loop
    // before it) meets the hung connection for certain.
    let store = format!(
        "{}&pool_size=1&connect_timeout=2&check_after_ms=0&check_timeout_ms=1000",
        backend.store_url(Some(proxy.addr))
    );
    hung_store_fails_fast_and_heals(&store, &proxy);
}

#[test]
fn d15_redis_outage_fails_fast_and_heals() {
    outage_fails_fast_and_heals(Backend::Redis);
}

/// 2026-07-28 `subscriptions/listen` on one worker hears of changes announced through
/// another (`Durable::announce`, here by the example's triggers): a tools-and-prompts
/// listener gets each change once, in order, with its subscription id; a prompts-only
/// listener gets only the prompts change; a listener that subscribed a resource gets its
/// update.
fn announced_changes_reach_every_worker(a: std::net::SocketAddr, b: std::net::SocketAddr) {
    let mut tools = listen(
        b,
        json!({"toolsListChanged": true, "promptsListChanged": true}),
        false,
    );
    let mut prompts = listen(b, json!({"promptsListChanged": true}), false);
    let mut resource = listen(
        b,
        json!({"resourceSubscriptions": ["test://watched-resource"]}),
        false,
    );
    let mut subscriptions = Vec::new();
    for stream in [&mut tools, &mut prompts, &mut resource] {
        let ack = next_message(stream);
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        subscriptions
            .push(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone());
    }
    let changed = modern(
        a,
        1,
        "tools/call",
        json!({"name": "test_trigger_tool_change", "arguments": {}}),
        false,
    );
    assert!(
        changed["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("dynamic_tool"),
        "{changed}"
    );
    let started = Instant::now();
    let told = next_message(&mut tools);
    assert_eq!(told["method"], "notifications/tools/list_changed", "{told}");
    assert_eq!(
        told["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        subscriptions[0]
    );
    let took = started.elapsed();
    eprintln!(
        "tools/list_changed reached the other worker's listen stream {took:?} after the call returned"
    );
    // The docs say "within 250 ms" (each worker reads announcements every 250 ms); the bound
    // here leaves room for a loaded machine and still fails a worker that does not read them.
    assert!(
        took < Duration::from_secs(2),
        "an announcement took {took:?} to reach another worker"
    );
    // The example keeps its switch in the server's state: the other worker lists the tool.
    let listed = |id: u64| {
        modern(b, id, "tools/list", json!({}), false)["result"]["tools"]
            .to_string()
            .contains("\"dynamic_tool\"")
    };
    assert!(listed(10), "dynamic_tool is listed by the other worker too");
    modern(
        a,
        2,
        "tools/call",
        json!({"name": "test_trigger_prompt_change", "arguments": {}}),
        false,
    );
    let told = next_message(&mut prompts);
    assert_eq!(
        told["method"], "notifications/prompts/list_changed",
        "the tools change is not for this listener: {told}"
    );
    assert_eq!(
        told["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        subscriptions[1]
    );
    assert_eq!(
        next_message(&mut tools)["method"],
        "notifications/prompts/list_changed",
        "each change once"
    );
    modern(
        a,
        3,
        "tools/call",
        json!({"name": "trigger_resource_update", "arguments": {"uri": "test://watched-resource"}}),
        false,
    );
    let told = next_message(&mut resource);
    assert_eq!(
        (told["method"].as_str(), told["params"]["uri"].as_str()),
        (
            Some("notifications/resources/updated"),
            Some("test://watched-resource")
        ),
        "{told}"
    );
    // The resource update is not for the tools-and-prompts listener: it hears the next
    // tools change next.
    modern(
        a,
        4,
        "tools/call",
        json!({"name": "test_trigger_tool_change", "arguments": {}}),
        false,
    );
    assert_eq!(
        next_message(&mut tools)["method"],
        "notifications/tools/list_changed"
    );
    assert!(!listed(11), "hidden again, on every worker");
}

#[test]
fn sqlite_announced_changes_reach_listen_streams() {
    let server = Server::start(
        &format!("sqlite:{}", temp_dir("announce").join("store.db").display()),
        free_port(),
        &[],
    );
    announced_changes_reach_every_worker(server.addr, server.addr);
}

fn announced_changes_across_workers(backend: Backend) {
    let Some((a, b)) = two_workers(backend, &[]) else {
        return;
    };
    announced_changes_reach_every_worker(a.addr, b.addr);
}

#[test]
fn postgres_announced_changes_reach_every_worker() {
    announced_changes_across_workers(Backend::Postgres);
}

#[test]
fn redis_announced_changes_reach_every_worker() {
    announced_changes_across_workers(Backend::Redis);
}

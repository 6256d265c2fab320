//! Failures that users of stdio gateways run into, ruled out here (docs/proxy.md, "Known
//! gateway failures, and the test that rules each out"): a client that reconnects keeps
//! its session's child and that child's state; several SSE clients at once are each served
//! their own messages, and the proxy neither crashes nor panics.

use std::collections::BTreeSet;

use super::changes::{KEEP_ALIVE_MS, QUIET, TOOLS_CHANGED, carried, get_stream};
use super::*;

/// Whether the proxy process still runs.
fn running(server: &mut Server) -> bool {
    server.child.try_wait().unwrap().is_none()
}

/// The messages of a stream (empty-data events left out) until `want` of them, or its end.
fn read_messages(stream: &mut Response, want: usize) -> Vec<(String, Value)> {
    let mut messages = Vec::new();
    while messages.len() < want {
        let Some((id, data)) = stream.next_event() else {
            break;
        };
        if !data.is_empty() {
            messages.push((id.unwrap_or_default(), serde_json::from_str(&data).unwrap()));
        }
    }
    messages
}

/// D3: a client that drops its connections and comes back keeps its session's child. Its
/// call's SSE response is closed mid-call; while the call runs, GET streams of the session
/// are opened (one beside another still open) and closed; the client resumes with
/// `Last-Event-ID`, drops that too, and resumes again. The call (not idempotent: a child
/// stopped under it would turn its outcome into the interrupted error) ends with its
/// result, once, each step once; the same child serves the next call with its state
/// kept; the proxy runs on.
#[test]
fn d3_a_client_that_reconnects_keeps_its_sessions_child_and_its_state() {
    let Some(python) = python() else { return };
    let dir = temp_dir("proxy-reconnect");
    let mut server = start_proxy(
        &python,
        "memory:",
        free_port(),
        &["--sse-keep-alive-ms", KEEP_ALIVE_MS],
    );
    let addr = server.addr;
    let session = initialize(addr);
    let (n, pid) = count_of(text(&outcome(
        post(addr, Some(&session), &call(1, "count", json!({}))),
        1,
    )));
    assert_eq!(n, 1);

    const STEPS: u64 = 5;
    let ledger = dir.join("ledger");
    let (last, mut seen) = read_some(
        addr,
        &session,
        &slow_call(
            2,
            "slow_append",
            json!({"path": ledger.to_str().unwrap()}),
            STEPS,
        ),
        1,
    );
    let held = get_stream(addr, &session);
    for _ in 0..3 {
        drop(get_stream(addr, &session));
    }
    drop(held);
    let mut resumed = resume(addr, &session, &last);
    assert_eq!(resumed.status, 200);
    let more = read_messages(&mut resumed, 1);
    drop(resumed);
    let last = more.last().map_or(last, |(id, _)| id.clone());
    seen.extend(more.into_iter().map(|(_, m)| m));
    let resumed = resume(addr, &session, &last);
    assert_eq!(resumed.status, 200);
    seen.extend(
        resumed
            .within(Duration::from_secs(30))
            .messages()
            .into_iter()
            .map(|(_, m)| m),
    );

    let outcomes: Vec<&Value> = seen.iter().filter(|m| m["id"] == 2).collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {seen:?}");
    assert_eq!(
        outcomes[0]["result"]["content"][0]["text"],
        format!("done {STEPS}"),
        "the result, not the interrupted error: {}",
        outcomes[0]
    );
    assert_eq!(
        progress_of(&seen),
        (1..=STEPS).collect::<Vec<_>>(),
        "each step once, in order: {seen:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap(),
        "start\n",
        "the call reached the upstream once"
    );
    let (n, same) = count_of(text(&outcome(
        post(addr, Some(&session), &call(3, "count", json!({}))),
        3,
    )));
    assert_eq!(
        (n, same),
        (2, pid),
        "the session's same child, its state kept"
    );
    assert!(running(&mut server), "the proxy runs on");
}

/// D3 with several SSE clients at once: three sessions each post a call with progress
/// (their own token) and calls of their own child's counter, while one of them holds two
/// GET streams, and 2026-07-28 clients call the pool, all concurrently. Each client gets
/// its own messages and nothing else, each session its own child; a list change of the
/// session with two GET streams reaches exactly one of them; the proxy runs on and its log
/// has no panic.
#[test]
fn d3_several_sse_clients_at_once_each_get_their_own_messages_and_the_proxy_runs_on() {
    let Some(python) = python() else { return };
    let dir = temp_dir("proxy-sse-clients");
    let log = dir.join("proxy.log");
    let upstream = [python, repo_root().join("tests/python/upstream_server.py")];
    let stderr = Stdio::from(std::fs::File::create(&log).unwrap());
    let mut server = launch_proxy(
        &upstream,
        "memory:",
        free_port(),
        &["--sse-keep-alive-ms", KEEP_ALIVE_MS],
        stderr,
    );
    let addr = server.addr;
    let sessions: Vec<String> = (0..3).map(|_| initialize(addr)).collect();
    let mut streams = [
        get_stream(addr, &sessions[0]),
        get_stream(addr, &sessions[0]),
    ];

    let legacy: Vec<_> = sessions
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, session)| {
            std::thread::spawn(move || {
                let token = format!("t{i}");
                let slow = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow",
                    "arguments": {"steps": 3, "interval_ms": 100}, "_meta": {"progressToken": token}}});
                let messages: Vec<Value> = post(addr, Some(&session), &slow).within(Duration::from_secs(60)).messages().into_iter().map(|(_, m)| m).collect();
                let progress = messages.iter().filter(|m| m["method"] == "notifications/progress");
                assert!(progress.clone().all(|m| m["params"]["progressToken"] == token.as_str()), "only its own progress: {messages:?}");
                assert_eq!(progress_of(&messages), vec![1, 2, 3], "{messages:?}");
                let outcomes: Vec<&Value> = messages.iter().filter(|m| m["id"] == 1).collect();
                assert_eq!(outcomes.len(), 1, "one outcome: {messages:?}");
                assert_eq!(text(outcomes[0]), "done 3");
                let (n1, pid) = count_of(text(&outcome(post(addr, Some(&session), &call(2, "count", json!({}))), 2)));
                let (n2, same) = count_of(text(&outcome(post(addr, Some(&session), &call(3, "count", json!({}))), 3)));
                assert_eq!((n1, n2, same), (1, 2, pid), "its own child's counter");
                pid
            })
        })
        .collect();
    let modern_clients: Vec<_> = (0..3)
        .map(|i| {
            std::thread::spawn(move || {
                let key = format!("m{i}");
                let got = modern(
                    addr,
                    1,
                    "tools/call",
                    json!({"name": "lookup", "arguments": {"key": key, "delay_ms": 200}}),
                    false,
                );
                assert_eq!(text(&got), format!("value of {key}"), "{got}");
            })
        })
        .collect();
    let pids: BTreeSet<u32> = legacy
        .into_iter()
        .map(|client| client.join().unwrap())
        .collect();
    assert_eq!(pids.len(), 3, "a child per session: {pids:?}");
    for client in modern_clients {
        client.join().unwrap();
    }

    let _ = outcome(
        post(
            addr,
            Some(&sessions[0]),
            &call(4, "change_tools", json!({})),
        ),
        4,
    );
    let told: usize = streams
        .iter_mut()
        .map(|stream| carried(stream, TOOLS_CHANGED, 1, QUIET).len())
        .sum();
    assert_eq!(told, 1, "on exactly one of the session's two GET streams");
    assert!(running(&mut server), "the proxy runs on");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(!log.contains("panicked"), "{log}");
}

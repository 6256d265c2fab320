//! Moving a store (issue 12): `dump` of a store with a live session, `load` into another
//! backend, and a client resumes with a `Last-Event-ID` it got before the move and gets
//! exactly the rest, its task id still resolving; `copy` killed mid-way and run again
//! loses and duplicates nothing. SQLite always, PostgreSQL and Redis when reachable
//! (`DATABASE_URL` / `REDIS_URL`; in CI they must be).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// The stores a test moves into: another SQLite file always, and the shared backends when
/// their services are reachable.
fn targets(dir: &std::path::Path, name: &str) -> Vec<(&'static str, String)> {
    let mut out = vec![(
        "sqlite",
        format!("sqlite:{}", dir.join(format!("{name}-target.db")).display()),
    )];
    for (label, backend) in [
        ("postgres", backend::Backend::Postgres),
        ("redis", backend::Backend::Redis),
    ] {
        if backend.available() {
            out.push((label, backend.store_url(None)));
        }
    }
    out
}

fn rpc(addr: std::net::SocketAddr, session: &str, id: u64, method: &str, params: Value) -> Value {
    let messages = post(
        addr,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    )
    .messages();
    messages.last().unwrap().1.clone()
}

/// D3 and D10 across a move between backends: events keep their ids, so a resume after an
/// id the client got before the move gets exactly the rest; the session is still live;
/// the task still resolves with its status.
#[test]
fn dump_then_load_into_another_backend_resumes_with_last_event_id_exactly() {
    let dir = temp_dir("ops-dump");
    let source = format!("sqlite:{}", dir.join("source.db").display());
    let server = Server::start(&source, free_port(), &[]);
    let session = initialize(server.addr);
    let all = post(server.addr, Some(&session), &emit_call(1, 6, 10)).messages();
    assert_eq!(
        all.last().unwrap().1["id"],
        1,
        "the call's outcome: {all:?}"
    );
    let ledger = dir.join("task.ledger").display().to_string();
    let created = rpc(
        server.addr,
        &session,
        2,
        "tools/call",
        json!({"name": "steps", "arguments": {"count": 1, "step_ms": 10, "ledger": ledger}, "task": {"ttl": 600_000}}),
    );
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let got = rpc(
            server.addr,
            &session,
            3,
            "tasks/get",
            json!({"taskId": task_id}),
        );
        let status = got["result"]["status"].as_str().unwrap_or("").to_owned();
        if status == "completed" {
            break status;
        }
        assert!(Instant::now() < deadline, "task still {status}: {got}");
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(server);
    let dump = dir.join("store.jsonl");
    run(&[
        "dump",
        "--store",
        &source,
        "--output",
        dump.to_str().unwrap(),
    ]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dump).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode, 0o600,
            "a dump holds the key ring: its owner's only, not {mode:o}"
        );
    }
    let text = std::fs::read_to_string(&dump).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(
        (
            header["header"]["format"].as_str(),
            header["header"]["version"].as_u64()
        ),
        (Some("durable-mcp-dump"), Some(1)),
        "{header}"
    );
    let seen = 2;
    let (last_seen, _) = &all[seen - 1];
    for (label, target) in targets(&dir, "dump") {
        let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
            .args(["load", "--store", &target, "--json"])
            .stdin(std::fs::File::open(&dump).unwrap())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{label}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["sessions_created"], 1, "{label}: {summary}");
        let moved = Server::start(&target, free_port(), &[]);
        let rest = resume(moved.addr, &session, last_seen).messages();
        assert_eq!(
            rest,
            all[seen..].to_vec(),
            "{label}: exactly the rest after {last_seen}"
        );
        let got = rpc(
            moved.addr,
            &session,
            4,
            "tasks/get",
            json!({"taskId": task_id}),
        );
        assert_eq!(
            got["result"]["status"],
            status.as_str(),
            "{label}: the task id resolves after the move: {got}"
        );
        // Loading again changes nothing (a resumed load duplicates nothing).
        let again: Value = serde_json::from_str(&run(&[
            "load",
            "--store",
            &target,
            "--input",
            dump.to_str().unwrap(),
            "--json",
        ]))
        .unwrap();
        assert_eq!(
            (
                again["sessions_created"].as_u64(),
                again["events_appended"].as_u64(),
                again["records_written"].as_u64()
            ),
            (Some(0), Some(0), Some(0)),
            "{label}: {again}"
        );
    }
}

/// A dump cut short is loaded as far as it goes and reported as truncated.
#[test]
fn a_truncated_dump_is_an_error_after_loading_what_it_holds() {
    let dir = temp_dir("ops-truncated");
    let source = source_store(&dir, 3, 4);
    let dump = run(&["dump", "--store", &source]);
    let cut: String = dump
        .lines()
        .take(dump.lines().count() - 3)
        .map(|l| format!("{l}\n"))
        .collect();
    let target = format!("sqlite:{}", dir.join("t.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(["load", "--store", &target])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(cut.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "a truncated dump fails");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("truncated"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A SQLite source with `streams` sessionless streams of `events` events each (the last
/// stream left open), two sessions with events on their standalone streams, and records of
/// several kinds: built by loading a dump written here (fast: synchronous=off).
fn source_store(dir: &std::path::Path, streams: usize, events: usize) -> String {
    let url = format!("sqlite:{}?synchronous=off", dir.join("source.db").display());
    let mut lines = vec![
        json!({"header": {"format": "durable-mcp-dump", "version": 1, "backend": "test", "created_ms": 0}}),
    ];
    let now = durable_mcp::store::now_ms();
    let mut sessions = Vec::new();
    for n in 0..2 {
        let (id, standalone) = (
            format!("{:064x}", 0xabc0 + n),
            format!("{:032x}", 0xdef0 + n),
        );
        lines.push(json!({"session": {"id": id, "principal": "alice", "protocol_version": "2025-11-25",
            "client": {"clientInfo": {"name": "ops", "version": "1"}}, "log_level": null, "subscriptions": [], "state": {"k": n},
            "standalone_stream": standalone, "created_at_ms": now, "last_seen_ms": now, "delivery": null}}));
        sessions.push((id, standalone));
    }
    let mut counts = (2, 0, 0, 0);
    for (kind, key) in [
        ("task", "t/1"),
        ("state", "counter"),
        ("step", "run-1/step-1"),
    ] {
        lines.push(json!({"record": {"kind": kind, "key": key, "value": format!("{{\"v\":\"{key}\"}}"), "expires_at_ms": null}}));
        counts.1 += 1;
    }
    let mut stream_lines = |id: String,
                            owner: Value,
                            n: usize,
                            closed: bool,
                            lines: &mut Vec<Value>| {
        lines.push(json!({"stream": {"id": id, "owner": owner, "first_seq": 1, "last_seq": n, "closed": closed}}));
        for seq in 1..=n {
            lines.push(json!({"event": {"stream": id, "seq": seq, "data": format!("{{\"n\":{seq},\"s\":\"{id}\"}}")}}));
        }
        counts.2 += 1;
        counts.3 += n;
    };
    for (session, standalone) in &sessions {
        stream_lines(
            standalone.clone(),
            json!({"principal": "alice", "session": session}),
            3,
            false,
            &mut lines,
        );
    }
    for i in 0..streams {
        stream_lines(
            format!("{:032x}", 0x1000 + i),
            json!({"principal": format!("p{}", i % 3), "session": null}),
            events,
            i + 1 < streams,
            &mut lines,
        );
    }
    lines.push(json!({"end": {"sessions": counts.0, "records": counts.1, "streams": counts.2, "events": counts.3}}));
    let path = dir.join("source.jsonl");
    std::fs::write(
        &path,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    run(&["load", "--store", &url, "--input", path.to_str().unwrap()]);
    url
}

/// Everything a store holds, as dumped (the header left out), sorted: backends may list
/// sessions created in the same millisecond in either order. Sorting keeps duplicates.
fn contents(store: &str) -> Vec<String> {
    let mut lines: Vec<String> = run(&["dump", "--store", store])
        .lines()
        .skip(1)
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// D3 across an interrupted copy: `copy` SIGKILLed mid-way and run again leaves the
/// destination holding exactly what the source holds: nothing lost, nothing twice.
#[test]
fn copy_killed_mid_way_and_run_again_loses_and_duplicates_nothing() {
    let dir = temp_dir("ops-copy");
    let (streams, events) = (600, 10);
    let source = source_store(&dir, streams, events);
    let want = contents(&source);
    for (label, target) in targets(&dir, "copy") {
        // Kill it once some events have landed, well before all of them.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let watched = runtime.block_on(durable_mcp::open_store(&target)).unwrap();
        let mut copy = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
            .args(["copy", "--from", &source, "--to", &target])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let landed = loop {
            let copied = runtime
                .block_on(watched.list_streams(None, usize::MAX))
                .map(|s| s.len())
                .unwrap_or(0);
            if copied >= 20 {
                break copied;
            }
            assert!(
                Instant::now() < deadline,
                "{label}: the copy made no progress"
            );
            assert!(
                copy.try_wait().unwrap().is_none(),
                "{label}: the copy ended before it could be interrupted"
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        copy.kill().unwrap();
        copy.wait().unwrap();
        let partial = contents(&target);
        assert!(
            partial.len() < want.len(),
            "{label}: interrupted mid-way ({landed} streams had landed)"
        );
        let summary: Value = serde_json::from_str(&run(&[
            "copy", "--from", &source, "--to", &target, "--json",
        ]))
        .unwrap();
        assert!(
            summary["events_skipped"].as_u64().unwrap() > 0,
            "{label}: the second copy resumed: {summary}"
        );
        assert_eq!(
            contents(&target),
            want,
            "{label}: the destination holds exactly the source"
        );
        let stats: Value =
            serde_json::from_str(&run(&["stats", "--store", &target, "--json"])).unwrap();
        assert_eq!(
            stats["kinds"]["event"]["count"],
            streams * events + 2 * 3,
            "{label}: {stats}"
        );
        assert_eq!(stats["kinds"]["stream"]["count"], streams + 2, "{label}");
        assert_eq!(stats["kinds"]["session"]["count"], 2, "{label}");
        assert_eq!(
            stats["principals"]["p0"]["streams"],
            streams / 3,
            "{label}: {stats}"
        );
        assert_eq!(
            stats["principals"]["alice"]["sessions"], 2,
            "{label}: {stats}"
        );
        assert_eq!(
            stats["longest_stream"]["events"], events,
            "{label}: {stats}"
        );
        assert!(
            stats["latency"]
                .as_array()
                .unwrap()
                .iter()
                .all(|l| l["samples"] == 5
                    && l["max_ms"].as_f64().unwrap() >= l["min_ms"].as_f64().unwrap()),
            "{label}: {stats}"
        );
    }
}

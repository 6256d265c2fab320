//! The operator commands on a real store: inspect, replay, prune.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::process::Command;

use serde_json::json;
use support::*;


#[test]
fn inspect_replay_and_prune_a_sqlite_store() {
    let dir = temp_dir("commands");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let mut server = Server::start(&store, free_port(), &[]);
    let session = initialize(server.addr);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}});
    let messages = post(server.addr, Some(&session), &call).messages();
    let (event_id, result) = messages.last().expect("result").clone();
    server.kill();

    let listing = run(&["inspect", "--store", &store]);
    assert!(listing.contains(&session), "{listing}");

    let stream = event_id.split('_').next().expect("stream part");
    let replay = run(&["replay", "--store", &store, &format!("{stream}_0")]);
    let last = replay.lines().last().expect("events");
    assert!(last.starts_with(&event_id), "{replay}");
    assert_eq!(serde_json::from_str::<serde_json::Value>(last.split('\t').nth(1).unwrap()).unwrap(), result);

    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let report = run(&["prune", "--store", &store, "--session-ttl-secs", "0", "--max-stream-age-secs", "1"]);
    assert_eq!(report.trim(), "sessions ended: 0, streams deleted: 1, journal records expired: 0");
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(["replay", "--store", &store, &format!("{stream}_0")])
        .output()
        .expect("run");
    assert!(!out.status.success(), "the pruned stream is gone: replay fails with a clear error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"), "{}", String::from_utf8_lossy(&out.stderr));
    let listing = run(&["inspect", "--store", &store]);
    assert!(listing.contains(&session), "the session itself is kept (no TTL)");
}

/// `inspect runs` lists a journaled request while it runs (its worker, its lease) and not
/// once it has finished; `inspect tasks` lists a task; `--json` gives the same as objects.
/// The server keeps running: inspecting reads the store beside it.
#[test]
fn inspect_runs_and_tasks_of_a_live_store() {
    let dir = temp_dir("inspect-runs");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let server = Server::start(&store, free_port(), &["--worker-id", "w-inspect"]);
    let session = initialize(server.addr);
    let ledger = dir.join("inspect.ledger").display().to_string();
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 2, "step_ms": 1_000, "ledger": ledger}}});
    let mut running = post(server.addr, Some(&session), &call);
    running.next_event().expect("priming event");
    let runs = run(&["inspect", "runs", "--store", &store]);
    let line = runs.lines().find(|l| l.contains("tools/call steps")).unwrap_or_else(|| panic!("{runs}"));
    assert!(line.contains("id=7") && line.contains("owner=w-inspect") && line.contains("lease=expires in"), "{line}");
    let as_json: serde_json::Value = serde_json::from_str(run(&["inspect", "runs", "--store", &store, "--json"]).lines().next().unwrap()).unwrap();
    assert_eq!((as_json["method"].as_str(), as_json["target"].as_str(), as_json["owner"].as_str()), (Some("tools/call"), Some("steps"), Some("w-inspect")));

    let task_call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "slow_compute", "arguments": {"seconds": 30}, "task": {"ttl": 60_000}}});
    let created = post(server.addr, Some(&session), &task_call).messages();
    let task_id = created.last().unwrap().1["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    let tasks = run(&["inspect", "tasks", "--store", &store]);
    let line = tasks.lines().find(|l| l.starts_with(&task_id)).unwrap_or_else(|| panic!("{tasks}"));
    assert!(line.contains("  working  ") && line.contains("design=2025-11-25") && line.contains("ttl_ms=60000"), "{line}");
    let as_json: serde_json::Value = serde_json::from_str(run(&["inspect", "tasks", "--store", &store, "--json"]).lines().next().unwrap()).unwrap();
    assert_eq!(as_json["taskId"].as_str().or(as_json["task_id"].as_str()), Some(task_id.as_str()));

    let outcome = running.messages().into_iter().map(|(_, m)| m).find(|m| m["id"] == 7).expect("the result");
    assert_eq!(outcome["result"]["structuredContent"]["steps"], json!([1, 2]));
    // The journal entry goes right after the outcome is committed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let runs = loop {
        let runs = run(&["inspect", "runs", "--store", &store]);
        if !runs.contains("id=7") || std::time::Instant::now() > deadline {
            break runs;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(!runs.contains("id=7"), "a finished request leaves the journal: {runs}");
    assert!(runs.contains("tools/call slow_compute"), "the task's run is still journaled: {runs}");
}

#[test]
fn migrate_reports_the_schema_version() {
    let dir = temp_dir("migrate");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    assert_eq!(run(&["migrate", "--store", &store]).trim(), "schema version 3");
    assert_eq!(run(&["migrate", "--store", &store]).trim(), "schema version 3", "idempotent");
    assert!(run(&["migrate", "--store", "memory:"]).contains("no schema"));
}

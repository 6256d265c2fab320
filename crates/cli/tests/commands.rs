//! The operator commands on a real store: inspect, replay, prune.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::process::Command;

use serde_json::json;
use support::*;

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp")).args(args).output().expect("run durable-mcp");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

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

#[test]
fn migrate_reports_the_schema_version() {
    let dir = temp_dir("migrate");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    assert_eq!(run(&["migrate", "--store", &store]).trim(), "schema version 3");
    assert_eq!(run(&["migrate", "--store", &store]).trim(), "schema version 3", "idempotent");
    assert!(run(&["migrate", "--store", "memory:"]).contains("no schema"));
}

//! The operator commands on a real store: inspect, replay, prune; and what `serve` does by
//! itself or by default: the background pruner, the loopback bind.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(last.split('\t').nth(1).unwrap()).unwrap(),
        result
    );

    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let report = run(&[
        "prune",
        "--store",
        &store,
        "--session-ttl-secs",
        "0",
        "--max-stream-age-secs",
        "1",
    ]);
    assert_eq!(
        report.trim(),
        "sessions ended: 0, streams deleted: 1, journal records expired: 0"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(["replay", "--store", &store, &format!("{stream}_0")])
        .output()
        .expect("run");
    assert!(
        !out.status.success(),
        "the pruned stream is gone: replay fails with a clear error"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = run(&["inspect", "--store", &store]);
    assert!(
        listing.contains(&session),
        "the session itself is kept (no TTL)"
    );
}

/// `prune --dry-run` reports what `prune` would remove and changes nothing: two dry runs
/// agree (text and `--json`), the session and its stream are still there, the prune that
/// follows removes exactly those counts, and a dry run after it finds nothing.
#[test]
fn prune_dry_run_reports_what_prune_removes_and_changes_nothing() {
    let dir = temp_dir("prune-dry-run");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let mut server = Server::start(&store, free_port(), &[]);
    let session = initialize(server.addr);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}});
    let (event_id, _) = post(server.addr, Some(&session), &call)
        .messages()
        .last()
        .expect("result")
        .clone();
    server.kill();
    let stream = format!("{}_0", event_id.split('_').next().expect("stream part"));
    std::thread::sleep(Duration::from_millis(1_100));
    let retention = ["--session-ttl-secs", "1", "--max-stream-age-secs", "1"];
    let prune = |extra: &[&str]| {
        let mut args = vec!["prune", "--store", &store];
        args.extend(retention);
        args.extend(extra);
        run(&args).trim().to_owned()
    };
    let counts = |line: &str| -> Vec<u64> {
        line.split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect()
    };

    let dry = prune(&["--dry-run"]);
    let [sessions, streams, records] = counts(&dry)[..] else {
        panic!("three counts: {dry}");
    };
    assert_eq!(
        dry,
        format!(
            "would end {sessions} sessions, delete {streams} streams, expire {records} journal \
             records; nothing changed (--dry-run)"
        )
    );
    assert_eq!(sessions, 1, "the idle session: {dry}");
    assert!(streams >= 1, "the finished request stream: {dry}");
    assert_eq!(prune(&["--dry-run"]), dry, "a dry run changes nothing");
    let as_json: serde_json::Value =
        serde_json::from_str(&prune(&["--dry-run", "--json"])).unwrap();
    assert_eq!(
        as_json,
        json!({"sessions_ended": sessions, "streams_deleted": streams,
            "records_expired": records, "dry_run": true})
    );
    assert!(run(&["inspect", "--store", &store]).contains(&session));
    assert!(
        run(&["replay", "--store", &store, &stream]).contains(&event_id),
        "the stream is still there"
    );

    assert_eq!(
        prune(&[]),
        format!(
            "sessions ended: {sessions}, streams deleted: {streams}, journal records expired: \
             {records}"
        ),
        "prune removes what the dry run reported"
    );
    assert_eq!(
        prune(&["--dry-run"]),
        "would end 0 sessions, delete 0 streams, expire 0 journal records; nothing changed \
         (--dry-run)"
    );
    assert!(!run(&["inspect", "--store", &store]).contains(&session));
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
    let line = runs
        .lines()
        .find(|l| l.contains("tools/call steps"))
        .unwrap_or_else(|| panic!("{runs}"));
    assert!(
        line.contains("id=7")
            && line.contains("owner=w-inspect")
            && line.contains("lease=expires in"),
        "{line}"
    );
    let as_json: serde_json::Value = serde_json::from_str(
        run(&["inspect", "runs", "--store", &store, "--json"])
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (
            as_json["method"].as_str(),
            as_json["target"].as_str(),
            as_json["owner"].as_str()
        ),
        (Some("tools/call"), Some("steps"), Some("w-inspect"))
    );

    let task_call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "slow_compute", "arguments": {"seconds": 30}, "task": {"ttl": 60_000}}});
    let created = post(server.addr, Some(&session), &task_call).messages();
    let task_id = created.last().unwrap().1["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let tasks = run(&["inspect", "tasks", "--store", &store]);
    let line = tasks
        .lines()
        .find(|l| l.starts_with(&task_id))
        .unwrap_or_else(|| panic!("{tasks}"));
    assert!(
        line.contains("  working  ")
            && line.contains("design=2025-11-25")
            && line.contains("ttl_ms=60000"),
        "{line}"
    );
    let as_json: serde_json::Value = serde_json::from_str(
        run(&["inspect", "tasks", "--store", &store, "--json"])
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        as_json["taskId"].as_str().or(as_json["task_id"].as_str()),
        Some(task_id.as_str())
    );

    let outcome = running
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .find(|m| m["id"] == 7)
        .expect("the result");
    assert_eq!(
        outcome["result"]["structuredContent"]["steps"],
        json!([1, 2])
    );
    // The journal entry goes right after the outcome is committed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let runs = loop {
        let runs = run(&["inspect", "runs", "--store", &store]);
        if !runs.contains("id=7") || std::time::Instant::now() > deadline {
            break runs;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        !runs.contains("id=7"),
        "a finished request leaves the journal: {runs}"
    );
    assert!(
        runs.contains("tools/call slow_compute"),
        "the task's run is still journaled: {runs}"
    );
}

#[test]
fn migrate_reports_the_schema_version() {
    let dir = temp_dir("migrate");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    assert_eq!(
        run(&["migrate", "--store", &store]).trim(),
        "schema version 5"
    );
    assert_eq!(
        run(&["migrate", "--store", &store]).trim(),
        "schema version 5",
        "idempotent"
    );
    assert!(run(&["migrate", "--store", "memory:"]).contains("no schema"));
}

/// The benchmark is a binary of its own (`durable-mcp-bench`, crates/bench): this one lists
/// no `bench` command and has only the hidden `bench-server` the benchmark starts (its
/// durable-mcp servers; stock rmcp is not in this binary).
#[test]
fn the_benchmark_is_not_a_command_of_this_binary() {
    let help = run(&["--help"]);
    assert!(help.contains("serve") && !help.contains("bench"), "{help}");
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(["bench", "--help"])
        .output()
        .expect("run");
    assert!(!out.status.success(), "`durable-mcp bench` still runs");
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(["bench-server", "rmcp"])
        .output()
        .expect("run");
    assert!(
        !out.status.success(),
        "stock rmcp is still served by durable-mcp"
    );
}

/// The background pruner (`serve --prune-interval-secs`; D14 retention, D5 "expiry ends a
/// session"): with short retention the server itself ends an idle session and deletes its
/// old finished stream, with no request and no `durable-mcp prune`. Observed in the store
/// (`inspect`, `replay`), which a request to the session would not touch.
#[test]
fn d14_background_pruner_ends_an_idle_session_and_deletes_its_old_stream() {
    let dir = temp_dir("pruner");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let retention = [
        "--session-ttl-secs",
        "3",
        "--max-stream-age-secs",
        "1",
        "--prune-interval-secs",
        "1",
    ];
    let server = Server::start(&store, free_port(), &retention);
    let session = initialize(server.addr);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}});
    let last_seen = Instant::now();
    let (event_id, _) = post(server.addr, Some(&session), &call)
        .messages()
        .last()
        .expect("result")
        .clone();
    let stream = format!("{}_0", event_id.split('_').next().expect("stream part"));
    let first = run(&["inspect", "--store", &store]);
    assert!(
        first.contains(&session) || last_seen.elapsed() >= Duration::from_secs(3),
        "in the store while not idle: {first}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sessions = run(&["inspect", "--store", &store]);
        let replay = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
            .args(["replay", "--store", &store, &stream])
            .output()
            .expect("run");
        if !sessions.contains(&session) && !replay.status.success() {
            assert!(
                String::from_utf8_lossy(&replay.stderr).contains("not found"),
                "{}",
                String::from_utf8_lossy(&replay.stderr)
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not pruned 30 s after a 3 s idle TTL: sessions {sessions:?}, stream replays: {}",
            replay.status.success()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = post(
        server.addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    );
    assert_eq!(after.status, 404, "a pruned session is unknown (D5)");
}

/// The listening sockets (`st` 0A) in `/proc/<pid>/net/tcp` and `tcp6`: their local
/// addresses as the kernel prints them (`0100007F:1F90` is 127.0.0.1:8080).
fn listening_sockets(pid: u32) -> Vec<String> {
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    (fields.get(3) == Some(&"0A")).then(|| fields[1].to_owned())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `durable-mcp serve` without `--listen` binds 127.0.0.1 only (docs/deployment.md:
/// "workers bind 127.0.0.1 ... by default"; the facade's `bind address: default
/// 127.0.0.1:8080 (loopback: safe by default)`). The default port is fixed, so the server
/// runs in a network namespace of its own (`unshare`), where no other process holds 8080
/// and `/proc/<pid>/net` lists exactly its sockets; the test asserts the one listening
/// socket's address.
#[test]
fn default_bind_is_loopback_only() {
    const IN_NAMESPACE: [&str; 4] = ["--user", "--map-root-user", "--net", "sh"];
    let probe = Command::new("unshare")
        .args(IN_NAMESPACE)
        .args(["-c", "ip link set lo up"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|status| status.success()) {
        assert!(
            !durable_mcp_store::in_ci(),
            "CI needs unprivileged network namespaces (unshare, ip) for this test"
        );
        eprintln!("skipped: no unprivileged network namespace (unshare --user --net, ip)");
        return;
    }
    let dir = temp_dir("default-bind");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let child = Command::new("unshare")
        .args(IN_NAMESPACE)
        .args([
            "-c",
            r#"ip link set lo up && exec "$0" serve --store "$1""#,
            env!("CARGO_BIN_EXE_durable-mcp"),
            &store,
        ])
        .env_remove("DURABLE_MCP_LISTEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn unshare");
    // `unshare` and `sh` exec the server: one pid. `Server` kills it on drop.
    let mut server = Server {
        child,
        addr: "127.0.0.1:8080".parse().unwrap(),
    };
    let pid = server.child.id();
    let namespace = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
    let ours = namespace("self");
    let deadline = Instant::now() + Duration::from_secs(20);
    let listening = loop {
        // Until `unshare` has made its namespace, /proc/<pid>/net is the test's own.
        let listening = if namespace(&pid.to_string()) != ours {
            listening_sockets(pid)
        } else {
            Vec::new()
        };
        if !listening.is_empty() {
            break listening;
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("serve exited at start: {status}");
        }
        assert!(Instant::now() < deadline, "serve never listened");
        std::thread::sleep(Duration::from_millis(20));
    };
    server.kill();
    assert_eq!(
        listening,
        ["0100007F:1F90"],
        "one listening socket, 127.0.0.1:8080 (loopback only)"
    );
}

/// `--version` names the version and the commit the binary was built from.
#[test]
fn version_names_the_commit() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .arg("--version")
        .output()
        .expect("run durable-mcp --version");
    assert!(output.status.success());
    let line = String::from_utf8(output.stdout).expect("utf-8");
    assert!(
        line.starts_with(&format!(
            "durable-mcp {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{line}"
    );
    let commit = line
        .trim()
        .trim_end_matches(')')
        .rsplit(' ')
        .next()
        .unwrap_or_default();
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=10", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success());
    match head {
        Some(head) => assert_eq!(
            commit,
            String::from_utf8_lossy(&head.stdout).trim(),
            "{line}"
        ),
        None => assert_eq!(commit, "unknown", "{line}"),
    }
}

//! The operator side of issue 12 on the real binary: `/healthz` and `/readyz` (503 while
//! draining and while the store is unreachable), `sessions` (end = an HTTP DELETE),
//! `doctor` (a test per setting it detects), `serve --config FILE` with environment and
//! flags over it, `config` (secrets redacted) and JSON logs.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::io::{BufRead, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

fn sqlite(dir: &std::path::Path, query: &str) -> String {
    format!("sqlite:{}{query}", dir.join("store.db").display())
}

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn get(addr: std::net::SocketAddr, path: &str) -> (u16, Value) {
    let response = request_at(addr, "GET", path, &[], None);
    let status = response.status;
    (
        status,
        serde_json::from_str(&response.body()).unwrap_or(Value::Null),
    )
}

/// `doctor --json` for these arguments: (its exit status was success, the checks by name).
fn doctor(args: &[&str]) -> (bool, Value) {
    let mut all = vec!["doctor", "--json"];
    all.extend_from_slice(args);
    let out = cli(&all);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let mut checks = serde_json::Map::new();
    for check in report["checks"].as_array().unwrap() {
        checks.insert(check["check"].as_str().unwrap().to_owned(), check.clone());
    }
    (out.status.success(), Value::Object(checks))
}

#[test]
fn healthz_and_readyz_on_a_healthy_sqlite_worker() {
    let dir = temp_dir("ops-ready");
    let server = Server::start(&sqlite(&dir, ""), free_port(), &[]);
    let (status, live) = get(server.addr, "/healthz");
    assert_eq!((status, &live["status"]), (200, &json!("up")), "{live}");
    let (status, ready) = get(server.addr, "/readyz");
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["checks"]["store"]["ok"], true, "{ready}");
    assert_eq!(
        ready["checks"]["schema"]["found"], ready["checks"]["schema"]["expected"],
        "{ready}"
    );
    assert_eq!(ready["checks"]["not_draining"]["ok"], true, "{ready}");
}

/// `/readyz` is 503 while the store's schema is not the one this binary writes (here a
/// newer one, as a later release's migration would leave it), 200 again once it is.
#[test]
fn readyz_is_503_while_the_schema_is_not_current() {
    let dir = temp_dir("ops-schema");
    let server = Server::start(&sqlite(&dir, ""), free_port(), &[]);
    let (_, ready) = get(server.addr, "/readyz");
    let current = ready["checks"]["schema"]["expected"].as_i64().unwrap();
    let set_version = |version: i64| {
        let out = Command::new("sqlite3")
            .arg(dir.join("store.db"))
            .arg(format!("PRAGMA user_version = {version}"))
            .output();
        match out {
            Ok(out) if out.status.success() => true,
            Ok(out) => panic!("sqlite3: {}", String::from_utf8_lossy(&out.stderr)),
            Err(error) if !durable_mcp_store::in_ci() => {
                eprintln!("skipped: no sqlite3 command: {error}");
                false
            }
            Err(error) => panic!("sqlite3 is required in CI: {error}"),
        }
    };
    if !set_version(current + 1) {
        return;
    }
    let (status, ready) = get(server.addr, "/readyz");
    assert_eq!(status, 503, "{ready}");
    assert_eq!(
        (
            ready["checks"]["schema"]["ok"].clone(),
            ready["checks"]["schema"]["found"].clone()
        ),
        (json!(false), json!(current + 1)),
        "{ready}"
    );
    set_version(current);
    assert_eq!(get(server.addr, "/readyz").0, 200);
}

/// During a graceful shutdown (SIGTERM) with a request still in flight, `/readyz` is 503
/// (draining) while `/healthz` stays 200; the worker exits once the request ends.
#[test]
fn readyz_is_503_while_the_worker_drains() {
    let dir = temp_dir("ops-drain");
    let mut server = Server::start(&sqlite(&dir, ""), free_port(), &[]);
    // A request in flight: its head sent, its body not yet. The server's `100 Continue`
    // says it has started reading the body: the request is in flight before the SIGTERM.
    let mut slow = TcpStream::connect(server.addr).unwrap();
    write!(slow, "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nexpect: 100-continue\r\ncontent-length: 500\r\n\r\n").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut continued = String::new();
    std::io::BufReader::new(&slow)
        .read_line(&mut continued)
        .unwrap();
    assert!(continued.starts_with("HTTP/1.1 100"), "{continued:?}");
    write!(slow, "{{").unwrap();
    let term = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let ready = loop {
        let (status, ready) = get(server.addr, "/readyz");
        if status == 503 {
            break ready;
        }
        assert!(
            Instant::now() < deadline,
            "readyz stayed {status} after SIGTERM: {ready}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(ready["checks"]["not_draining"]["ok"], false, "{ready}");
    assert_eq!(
        get(server.addr, "/healthz").0,
        200,
        "the process is still up"
    );
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "still draining its request"
    );
    drop(slow);
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the worker did not exit after its last request"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `/readyz` is 503 while the store does not answer (a cut connection to PostgreSQL or
/// Redis), 200 again once it does; `/healthz` stays 200.
#[test]
fn readyz_is_503_while_the_store_is_unreachable() {
    for backend in [backend::Backend::Postgres, backend::Backend::Redis] {
        if !backend.available() {
            continue;
        }
        let proxy = proxy::Proxy::start(backend.addr());
        let server = Server::start(&backend.store_url(Some(proxy.addr)), free_port(), &[]);
        assert_eq!(get(server.addr, "/readyz").0, 200, "{backend:?}");
        proxy.cut();
        let (status, ready) = get(server.addr, "/readyz");
        assert_eq!(status, 503, "{backend:?}: {ready}");
        assert_eq!(
            ready["checks"]["store"]["ok"], false,
            "{backend:?}: {ready}"
        );
        assert_eq!(
            get(server.addr, "/healthz").0,
            200,
            "{backend:?}: the process is up"
        );
        proxy.hang();
        let started = Instant::now();
        let (status, ready) = get(server.addr, "/readyz");
        assert_eq!(
            status, 503,
            "{backend:?}: a store that does not answer: {ready}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{backend:?}: readyz answers within its timeout"
        );
        proxy.restore();
        let deadline = Instant::now() + Duration::from_secs(30);
        while get(server.addr, "/readyz").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "{backend:?}: ready again once the store answers"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// D5: `sessions end` is what a DELETE does: a later request with that session id gets
/// 404 from the running worker; `sessions list` and `show` see the session before.
#[test]
fn sessions_end_is_a_delete_on_every_backend() {
    let dir = temp_dir("ops-sessions");
    let mut stores = vec![sqlite(&dir, "")];
    for backend in [backend::Backend::Postgres, backend::Backend::Redis] {
        if backend.available() {
            stores.push(backend.store_url(None));
        }
    }
    for store in stores {
        let server = Server::start(&store, free_port(), &[]);
        let session = initialize(server.addr);
        let list = String::from_utf8(cli(&["sessions", "list", "--store", &store]).stdout).unwrap();
        assert!(list.contains(&session), "{store}: {list}");
        let out = cli(&["sessions", "show", "--store", &store, &session, "--json"]);
        let shown: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(shown["session"]["id"], session.as_str());
        assert!(
            shown["streams"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["id"] == shown["session"]["standalone_stream"]),
            "{shown}"
        );
        let ended = cli(&["sessions", "end", "--store", &store, &session]);
        assert!(
            ended.status.success(),
            "{store}: {}",
            String::from_utf8_lossy(&ended.stderr)
        );
        let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
        assert_eq!(
            post(server.addr, Some(&session), &ping).status,
            404,
            "{store}: the ended session is gone"
        );
        assert!(
            !cli(&["sessions", "end", "--store", &store, &session])
                .status
                .success(),
            "{store}: ending it twice fails"
        );
    }
}

/// `sessions end --all-idle`: the sessions idle for the age given end (a dry run only
/// lists them), and a session in use stays.
#[test]
fn sessions_end_all_idle_ends_only_the_idle_ones() {
    let dir = temp_dir("ops-idle");
    let store = sqlite(&dir, "");
    let server = Server::start(&store, free_port(), &[]);
    let idle = [initialize(server.addr), initialize(server.addr)];
    std::thread::sleep(Duration::from_millis(1_500));
    let fresh = initialize(server.addr);
    let lines = |out: Output| -> Vec<Value> {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    let end = |dry: bool| {
        let mut args = vec![
            "sessions",
            "end",
            "--store",
            &store,
            "--all-idle",
            "--older-than",
            "1s",
            "--json",
        ];
        if dry {
            args.push("--dry-run");
        }
        lines(cli(&args))
    };
    let listed = end(true);
    let named: Vec<&str> = listed
        .iter()
        .map(|l| l["session"].as_str().unwrap())
        .collect();
    assert_eq!(named.len(), 2, "{listed:?}");
    assert!(
        idle.iter().all(|s| named.contains(&s.as_str())),
        "{listed:?}"
    );
    assert!(listed.iter().all(|l| l["result"] == "would_end"));
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    assert_eq!(
        post(server.addr, Some(&idle[0]), &ping).status,
        200,
        "a dry run ends nothing"
    );
    let ended = end(false);
    assert_eq!(ended.len(), 2, "{ended:?}");
    assert!(ended.iter().all(|l| l["result"] == "ended"));
    for session in &idle {
        assert_eq!(post(server.addr, Some(session), &ping).status, 404);
    }
    assert_eq!(
        post(server.addr, Some(&fresh), &ping).status,
        200,
        "the session in use stays"
    );
    let refused = cli(&["sessions", "end", "--store", &store, "--all-idle"]);
    assert!(!refused.status.success(), "--all-idle needs --older-than");
}

/// `stats --top N`: the largest streams and sessions, by their events' bytes, largest
/// first.
#[test]
fn stats_lists_the_largest_streams_and_sessions() {
    let dir = temp_dir("ops-stats-top");
    let store = sqlite(&dir, "");
    let server = Server::start(&store, free_port(), &[]);
    let (busy, quiet) = (initialize(server.addr), initialize(server.addr));
    let call = |session: &str, id: u64| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "test_simple_text", "arguments": {}}});
        assert_eq!(post(server.addr, Some(session), &body).messages().len(), 1);
    };
    for id in 1..=4 {
        call(&busy, id);
    }
    call(&quiet, 1);
    let out = cli(&["stats", "--store", &store, "--top", "2", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sessions = stats["largest_sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{stats:#}");
    assert_eq!(sessions[0]["session"], busy.as_str(), "{stats:#}");
    assert_eq!(sessions[1]["session"], quiet.as_str());
    assert_eq!(
        sessions[0]["streams"], 5,
        "four calls and the standalone stream"
    );
    assert!(sessions[0]["bytes"].as_u64().unwrap() > 3 * sessions[1]["bytes"].as_u64().unwrap());
    let streams = stats["largest_streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "--top 2: {stats:#}");
    assert!(streams[0]["bytes"].as_u64() >= streams[1]["bytes"].as_u64());
}

#[test]
fn doctor_flags_sqlite_synchronous_off() {
    let dir = temp_dir("ops-doc-off");
    let (ok, checks) = doctor(&["--store", &sqlite(&dir, "?synchronous=off")]);
    assert!(!ok);
    assert_eq!(checks["setting synchronous"]["status"], "warn", "{checks}");
    assert!(
        checks["setting synchronous"]["fix"]
            .as_str()
            .unwrap()
            .contains("synchronous=off"),
        "{checks}"
    );
}

#[test]
fn doctor_flags_sqlite_synchronous_normal() {
    let dir = temp_dir("ops-doc-normal");
    let (_, checks) = doctor(&["--store", &sqlite(&dir, "?synchronous=normal")]);
    assert_eq!(checks["setting synchronous"]["status"], "warn", "{checks}");
}

/// No shared requestState key (a store without a key ring, no `--state-key`): flagged,
/// with the command that fixes it; after that command, not flagged.
#[test]
fn doctor_flags_no_shared_request_state_key() {
    let dir = temp_dir("ops-doc-state-key");
    let store = sqlite(&dir, "");
    let (ok, checks) = doctor(&["--store", &store]);
    assert!(!ok);
    assert_eq!(
        checks["requestState key"]["status"], "warn",
        "no key ring yet: {checks}"
    );
    assert!(
        checks["requestState key"]["fix"]
            .as_str()
            .unwrap()
            .contains("keys rotate"),
        "{checks}"
    );
    run(&[
        "keys",
        "rotate",
        "--store",
        &store,
        "--activate-in-secs",
        "0",
    ]);
    let (_, checks) = doctor(&["--store", &store]);
    assert_eq!(checks["requestState key"]["status"], "ok", "{checks}");
}

/// A healthy SQLite store with its key ring: every check is ok (so each warning in the
/// other tests comes from the setting they change), and doctor succeeds.
#[test]
fn doctor_passes_a_sqlite_store_with_full_sync_and_a_key_ring() {
    let dir = temp_dir("ops-doc-full");
    let store = sqlite(&dir, "");
    run(&[
        "keys",
        "rotate",
        "--store",
        &store,
        "--activate-in-secs",
        "0",
    ]);
    let (ok, checks) = doctor(&["--store", &store]);
    assert!(ok, "{checks}");
    assert_eq!(
        checks["setting synchronous"]["detail"],
        "synchronous = FULL"
    );
    assert_eq!(checks["requestState key"]["status"], "ok");
}

#[test]
fn doctor_flags_a_memory_store() {
    let (ok, checks) = doctor(&[
        "--store",
        "memory:",
        "--state-key",
        "0123456789abcdef0123456789abcdef",
    ]);
    assert!(!ok);
    assert_eq!(checks["setting backend"]["status"], "warn", "{checks}");
    assert_eq!(
        checks["requestState key"]["status"], "ok",
        "a fixed key: {checks}"
    );
}

#[test]
fn doctor_flags_redis_without_aof() {
    if !backend::Backend::Redis.available() {
        return;
    }
    let (ok, checks) = doctor(&["--store", &backend::Backend::Redis.store_url(None)]);
    assert!(!ok);
    assert_eq!(
        checks["setting appendonly"]["status"], "warn",
        "the test Redis keeps nothing on disk: {checks}"
    );
    assert!(
        checks["setting appendonly"]["fix"]
            .as_str()
            .unwrap()
            .contains("appendonly yes")
    );
}

/// A lease the heartbeat cannot renew in time (each store round trip slower than a third
/// of the lease) is flagged; the same store at full speed, with the default lease, is not.
#[test]
fn doctor_flags_a_lease_shorter_than_a_heartbeat_can_renew() {
    for backend in [backend::Backend::Redis, backend::Backend::Postgres] {
        if !backend.available() {
            continue;
        }
        let proxy = proxy::Proxy::start(backend.addr());
        let store = backend.store_url(Some(proxy.addr));
        let (_, checks) = doctor(&["--store", &store]);
        assert_eq!(checks["lease"]["status"], "ok", "{backend:?}: {checks}");
        proxy.slow(Duration::from_millis(150));
        let (_, checks) = doctor(&["--store", &store, "--lease-ms", "300"]);
        assert_eq!(checks["lease"]["status"], "warn", "{backend:?}: {checks}");
        assert!(
            checks["lease"]["fix"]
                .as_str()
                .unwrap()
                .starts_with("--lease-ms "),
            "{checks}"
        );
        return;
    }
}

/// Clock skew between workers, read from the leases they hold: a worker renewing its
/// leases to 5 s ahead while doctor expects 1 s leases is flagged (as a clock 4 s ahead
/// would be); judged with the lease it runs with, it is not.
#[test]
fn doctor_flags_a_worker_whose_leases_run_ahead_of_this_clock() {
    let dir = temp_dir("ops-doc-clock");
    let store = sqlite(&dir, "");
    let server = Server::start(
        &store,
        free_port(),
        &["--worker-id", "w-ahead", "--lease-ms", "5000"],
    );
    let session = initialize(server.addr);
    let ledger = dir.join("clock.ledger").display().to_string();
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "steps", "arguments": {"count": 3, "step_ms": 1_500, "ledger": ledger}}});
    let mut running = post(server.addr, Some(&session), &call);
    running
        .next_event()
        .expect("priming event: the run is journaled and held");
    let (_, checks) = doctor(&["--store", &store, "--lease-ms", "1000"]);
    assert_eq!(checks["worker clocks"]["status"], "warn", "{checks}");
    assert!(
        checks["worker clocks"]["detail"]
            .as_str()
            .unwrap()
            .contains("w-ahead"),
        "{checks}"
    );
    let (_, checks) = doctor(&["--store", &store, "--lease-ms", "5000"]);
    assert_eq!(checks["worker clocks"]["status"], "ok", "{checks}");
}

/// PostgreSQL with `synchronous_commit = off` (set on the role the store connects as).
#[test]
fn doctor_flags_postgres_synchronous_commit_off() {
    let backend = backend::Backend::Postgres;
    if !backend.available() {
        return;
    }
    let base = backend.base();
    let psql = |sql: &str| {
        Command::new("psql")
            .args([base.as_str(), "-v", "ON_ERROR_STOP=1", "-qc", sql])
            .output()
    };
    let role = "dmcp_doctor_nosync";
    let setup = format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$;
         ALTER ROLE {role} SET synchronous_commit = off; GRANT CREATE ON DATABASE {db} TO {role};",
        db = base.rsplit('/').next().unwrap().split('?').next().unwrap()
    );
    match psql(&setup) {
        Ok(out) if out.status.success() => {}
        Ok(out) if !durable_mcp_store::in_ci() => {
            return eprintln!(
                "skipped: psql could not create a role: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Err(error) if !durable_mcp_store::in_ci() => return eprintln!("skipped: no psql: {error}"),
        other => panic!("setting up the role: {other:?}"),
    }
    let url = backend.store_url(None);
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let (_, checks) = doctor(&["--store", &format!("{scheme}://{role}@{host}")]);
    assert_eq!(
        checks["setting synchronous_commit"]["status"], "warn",
        "{checks}"
    );
    let (_, checks) = doctor(&["--store", &url]);
    assert_eq!(
        checks["setting synchronous_commit"]["status"], "ok",
        "the default role: {checks}"
    );
}

/// `serve --config FILE`: the file's settings apply; an environment variable overrides
/// the file; a flag overrides both; an unknown key is an error.
#[test]
fn serve_reads_a_toml_file_under_environment_and_flags() {
    let dir = temp_dir("ops-config");
    let (file_port, env_port) = (free_port(), free_port());
    let file = dir.join("serve.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:{file_port}\"\npath = \"/from-file\"\nstore = \"{}\"\nlease-ms = 7000\nallow-host = [\"127.0.0.1\", \"localhost\"]\n",
            sqlite(&dir, "")
        ),
    )
    .unwrap();
    let launch = |env_listen: Option<u16>, port: u16| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_durable-mcp"));
        command
            .args(["serve", "--config", file.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null());
        if let Some(env_port) = env_listen {
            command.env("DURABLE_MCP_LISTEN", format!("127.0.0.1:{env_port}"));
        }
        Server::launch(command, format!("127.0.0.1:{port}").parse().unwrap())
    };
    let server = launch(None, file_port);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let body = init.to_string();
    assert_eq!(
        request_at(server.addr, "POST", "/from-file", &headers, Some(&body)).status,
        200,
        "the file's path"
    );
    assert_eq!(
        request_at(server.addr, "POST", "/mcp", &headers, Some(&body)).status,
        404,
        "not the default path"
    );
    drop(server);
    let server = launch(Some(env_port), env_port);
    assert_eq!(
        get(server.addr, "/healthz").0,
        200,
        "the environment's listen address over the file's"
    );
    drop(server);
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args([
            "config",
            "--config",
            file.to_str().unwrap(),
            "--lease-ms",
            "8000",
            "--json",
        ])
        .env("DURABLE_MCP_LISTEN", "127.0.0.1:1")
        .output()
        .unwrap();
    let settings: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let setting = |name: &str| {
        settings
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (
            setting("lease-ms")["values"][0].clone(),
            setting("lease-ms")["source"].clone()
        ),
        (json!("8000"), json!("flag"))
    );
    assert_eq!(
        (
            setting("listen")["values"][0].clone(),
            setting("listen")["source"].clone()
        ),
        (json!("127.0.0.1:1"), json!("env"))
    );
    assert_eq!(
        (
            setting("path")["values"][0].clone(),
            setting("path")["source"].clone()
        ),
        (json!("/from-file"), json!("file"))
    );
    assert_eq!(
        setting("allow-host")["values"],
        json!(["127.0.0.1", "localhost"])
    );
    assert_eq!(setting("max-connections")["source"], "default");
    std::fs::write(dir.join("bad.toml"), "lease-ms = 1\nno-such-flag = true\n").unwrap();
    let bad = cli(&["serve", "--config", dir.join("bad.toml").to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unknown setting \"no-such-flag\""),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// `config` never prints a secret: passwords in store URLs and the state key are redacted,
/// in TOML and in JSON.
#[test]
fn config_redacts_secrets() {
    let key = "k".repeat(40);
    for format in [None, Some("--json")] {
        let mut args = vec![
            "config",
            "--store",
            "postgres://app:hunter2@db:5432/prod",
            "--state-key",
            &key,
        ];
        args.extend(format);
        let out = String::from_utf8(cli(&args).stdout).unwrap();
        assert!(!out.contains("hunter2") && !out.contains(&key), "{out}");
        assert!(
            out.contains("postgres://app:<redacted>@db:5432/prod"),
            "{out}"
        );
    }
}

/// `serve --log-format json`: log lines are JSON objects with a level and a message.
#[test]
fn serve_logs_json_lines() {
    let dir = temp_dir("ops-logs");
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_durable-mcp"));
    command
        .args([
            "serve",
            "--log-format",
            "json",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--store",
            &sqlite(&dir, ""),
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut server = Server::launch(command, format!("127.0.0.1:{port}").parse().unwrap());
    let stderr = std::io::BufReader::new(server.child.stderr.take().unwrap());
    let serving = stderr
        .lines()
        .map(|line| line.unwrap())
        .find(|line| line.contains("durable-mcp serving"))
        .expect("the start-up line");
    let line: Value = serde_json::from_str(&serving).unwrap_or_else(|e| panic!("{e}: {serving}"));
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(line["message"], "durable-mcp serving", "{line}");
    assert_eq!(line["path"], "/mcp", "fields are top-level: {line}");
}

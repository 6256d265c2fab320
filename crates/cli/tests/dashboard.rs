//! The operator dashboard end to end with the real binary (`serve --dashboard-listen ADDR`,
//! a SQLite store in a temp dir, real HTTP): the snapshot shows a client's session, its
//! streams, a request in flight with its worker and lease, a task, store latency and the
//! journal counters; payloads only with `--dashboard-show-payloads`; the `Host` check; a
//! non-loopback address refused without `--dashboard-allow-remote`; viewers authenticated
//! with API keys, a read-only key that cannot act, an action from the dashboard's API
//! ending a live run, and actions refused without authentication.
//! The page itself is tested in a headless browser by `scripts/dashboard-test.sh`.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// Start a server with the dashboard (and metrics) on; returns it and the dashboard's
/// address, once that answers.
fn start(store: &str, extra: &[&str]) -> (Server, SocketAddr) {
    let dashboard: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut args = vec![
        "--dashboard-listen".to_owned(),
        dashboard.to_string(),
        "--metrics-listen".to_owned(),
        metrics,
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(store, free_port(), &args);
    wait_listening(dashboard);
    (server, dashboard)
}

fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "the dashboard never came up on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A GET of `path` with exactly this `Host` header (none if `None`): status, headers
/// (lower-cased names) and body.
fn get(addr: SocketAddr, path: &str, host: Option<&str>) -> (u16, String, String) {
    let host = host.map(|h| format!("host: {h}\r\n")).unwrap_or_default();
    exchange(
        addr,
        &format!("GET {path} HTTP/1.1\r\n{host}connection: close\r\n\r\n"),
    )
}

/// Send `request` as it is on a new connection; the answer's status, lower-cased head and
/// body.
fn exchange(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn snapshot(addr: SocketAddr) -> (Value, String) {
    let (status, head, body) = get(addr, "/api/snapshot", Some(&addr.to_string()));
    assert_eq!(status, 200, "{head}{body}");
    assert!(head.contains("content-type: application/json"), "{head}");
    (serde_json::from_str(&body).unwrap(), body)
}

/// Poll the snapshot until `ok` holds.
fn snapshot_until(addr: SocketAddr, what: &str, ok: impl Fn(&Value) -> bool) -> (Value, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (snap, text) = snapshot(addr);
        if ok(&snap) {
            return (snap, text);
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rows<'a>(snap: &'a Value, key: &str) -> &'a Vec<Value> {
    snap[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {snap}"))
}

/// A `steps` call that runs ~2 s, with a ledger path (a payload) in its arguments.
fn slow_call(id: u64, ledger: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 2, "step_ms": 1_000, "ledger": ledger}}})
}

/// The page and its assets are served from the binary with a strict CSP; the snapshot shows
/// the worker, a client's session, the streams, the request in flight (tool, worker,
/// lease), a task, store latency and the journal counters, and no payload by default.
#[test]
fn snapshot_shows_sessions_streams_requests_and_tasks_without_payloads() {
    let dir = temp_dir("dashboard");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let (server, dashboard) = start(&store, &["--worker-id", "w-dash"]);

    let (status, head, page) = get(dashboard, "/", Some(&dashboard.to_string()));
    assert_eq!(status, 200);
    assert!(
        head.contains("content-type: text/html")
            && head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{head}"
    );
    assert!(
        page.contains(r#"<script src="/dashboard.js""#) && page.contains(r#"id="in-flight""#),
        "{page}"
    );
    for asset in ["/dashboard.js", "/dashboard.css"] {
        let (status, _, body) = get(dashboard, asset, Some("localhost"));
        assert_eq!(status, 200, "{asset}");
        assert!(!body.is_empty());
    }
    let (js_status, _, js) = get(dashboard, "/dashboard.js", Some("localhost"));
    assert_eq!(js_status, 200);
    assert!(
        js.contains("/api/snapshot") && !js.contains("innerHTML"),
        "the page polls the snapshot and never writes markup"
    );

    let session = initialize(server.addr);
    let ledger = dir.join("dash.ledger").display().to_string();
    let mut running = post(server.addr, Some(&session), &slow_call(7, &ledger));
    running.next_event().expect("priming event");
    let task_call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "slow_compute", "arguments": {"seconds": 30, "label": "secret-label"}, "task": {"ttl": 60_000}}});
    let created = post(server.addr, Some(&session), &task_call).messages();
    let task_id = created.last().unwrap().1["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    let (snap, text) = snapshot_until(dashboard, "the running steps call", |snap| {
        snap["in_flight"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|r| r["target"] == "steps"))
    });
    assert_eq!(snap["worker_id"], "w-dash");
    assert_eq!(snap["show_payloads"], false);
    let listed = rows(&snap, "sessions")
        .iter()
        .find(|s| s["id"] == session.as_str())
        .unwrap_or_else(|| panic!("session {session} in {text}"));
    assert_eq!(listed["principal"], "anonymous");
    assert!(
        listed["protocol_version"]
            .as_str()
            .unwrap()
            .starts_with("20"),
        "{listed}"
    );
    assert!(
        listed["created_at_ms"].as_u64().unwrap() > 0
            && listed["last_seen_ms"].as_u64().unwrap()
                >= listed["created_at_ms"].as_u64().unwrap()
    );
    assert!(
        listed.get("state").is_none() && listed.get("client").is_none(),
        "no payload by default: {listed}"
    );

    let run = rows(&snap, "in_flight")
        .iter()
        .find(|r| r["target"] == "steps")
        .unwrap();
    assert_eq!(
        (
            run["method"].as_str(),
            run["owner"].as_str(),
            run["request_id"].as_u64()
        ),
        (Some("tools/call"), Some("w-dash"), Some(7))
    );
    assert!(
        run["lease"].as_str().unwrap().starts_with("expires in"),
        "{run}"
    );
    assert_eq!(run["session"], session.as_str());
    assert!(run.get("arguments").is_none(), "{run}");
    assert!(
        !text.contains("dash.ledger") && !text.contains("secret-label"),
        "request arguments are redacted: {text}"
    );

    let task = rows(&snap, "tasks")
        .iter()
        .find(|t| t["task_id"] == task_id.as_str())
        .unwrap_or_else(|| panic!("task {task_id} in {text}"));
    assert_eq!(task["status"], "working");

    let streams = &snap["streams"];
    assert!(
        streams["open"].as_u64().unwrap() >= 1 && streams["total"].as_u64().unwrap() >= 2,
        "{streams}"
    );
    let recent = streams["recent"].as_array().unwrap();
    assert!(
        recent.iter().any(|s| s["session"] == session.as_str()
            && s["closed"] == false
            && s["events"].as_u64().unwrap() >= 1),
        "{streams}"
    );

    let operations: Vec<&str> = rows(&snap, "store_latency")
        .iter()
        .map(|l| l["operation"].as_str().unwrap())
        .collect();
    for operation in [
        "list_sessions",
        "list_streams",
        "list_records(run)",
        "list_records(task)",
    ] {
        assert!(
            operations.contains(&operation),
            "{operation} timed: {operations:?}"
        );
    }
    assert!(
        snap["recoveries"]["counters"].is_object(),
        "metrics are on: the journal counters are read"
    );
    assert_eq!(snap["errors"], json!([]));

    // Updating: once the call has finished, it leaves the in-flight list.
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
    snapshot_until(dashboard, "the finished call to leave the list", |snap| {
        snap["in_flight"]
            .as_array()
            .is_some_and(|runs| !runs.iter().any(|r| r["target"] == "steps"))
    });
}

/// `--dashboard-show-payloads` adds request arguments, session state and the client's
/// `initialize` params.
#[test]
fn payloads_are_shown_only_when_asked() {
    let dir = temp_dir("dashboard-payloads");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let (server, dashboard) = start(&store, &["--dashboard-show-payloads"]);
    let session = initialize(server.addr);
    let ledger = dir.join("shown.ledger").display().to_string();
    let mut running = post(server.addr, Some(&session), &slow_call(3, &ledger));
    running.next_event().expect("priming event");
    let (snap, _) = snapshot_until(dashboard, "the running call", |snap| {
        snap["in_flight"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|r| r["target"] == "steps"))
    });
    assert_eq!(snap["show_payloads"], true);
    let run = rows(&snap, "in_flight")
        .iter()
        .find(|r| r["target"] == "steps")
        .unwrap();
    assert_eq!(run["arguments"]["ledger"], ledger.as_str(), "{run}");
    let listed = rows(&snap, "sessions")
        .iter()
        .find(|s| s["id"] == session.as_str())
        .unwrap();
    assert!(
        listed["client"]["clientInfo"].is_object() && listed["state"].is_object(),
        "{listed}"
    );
    drop(running);
}

/// DNS rebinding: a `Host` that is neither the listen address nor a loopback name is 403,
/// on the page and on the snapshot; the listen address and loopback names are served.
#[test]
fn the_host_header_must_name_the_dashboard_or_loopback() {
    let dir = temp_dir("dashboard-host");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let (_server, dashboard) = start(&store, &[]);
    let port = dashboard.port();
    for host in [
        Some("evil.example"),
        Some(&*format!("evil.example:{port}")),
        Some(&*format!("localhost:{}", port.wrapping_add(1))),
        Some("127.0.0.2"),
        None,
    ] {
        for path in ["/", "/api/snapshot", "/dashboard.js"] {
            let (status, _, body) = get(dashboard, path, host);
            assert_eq!(status, 403, "{path} with host {host:?}: {body}");
            assert!(!body.contains("worker_id"), "{body}");
        }
    }
    for host in [
        dashboard.to_string(),
        format!("localhost:{port}"),
        "localhost".into(),
        format!("[::1]:{port}"),
    ] {
        let (status, _, body) = get(dashboard, "/api/snapshot", Some(&host));
        assert_eq!(status, 200, "host {host}: {body}");
    }
}

/// The dashboard has no authentication: `serve` refuses a non-loopback dashboard address
/// unless `--dashboard-allow-remote`, and then serves it.
#[test]
fn a_non_loopback_dashboard_needs_allow_remote() {
    let dir = temp_dir("dashboard-remote");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let port = free_port();
    let any = format!("0.0.0.0:{port}");
    let refused = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args([
            "serve",
            "--store",
            &store,
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--dashboard-listen",
            &any,
        ])
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--dashboard-allow-remote") && stderr.contains(&any),
        "{stderr}"
    );

    let server = Server::start(
        &store,
        free_port(),
        &["--dashboard-listen", &any, "--dashboard-allow-remote"],
    );
    let dashboard: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_listening(dashboard);
    let (status, _, body) = get(
        dashboard,
        "/api/snapshot",
        Some(&format!("localhost:{port}")),
    );
    assert_eq!(status, 200, "{body}");
    drop(server);
}

/// A request to the dashboard at `addr` (its own `Host`): method, path, `Authorization:
/// Bearer` token, more headers, JSON body. Status, lower-cased head, body.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String, String) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    if let Some(token) = token {
        head.push_str(&format!("authorization: Bearer {token}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.map(Value::to_string).unwrap_or_default();
    head.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    exchange(addr, &head)
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[test]
fn viewers_are_authenticated_and_only_the_act_scope_acts() {
    let dir = temp_dir("dashboard-auth");
    let keys = dir.join("dashboard-keys");
    std::fs::write(
        &keys,
        "viewer viewer-secret dashboard:read\nops ops-secret dashboard:read,dashboard:act\nother other-secret mcp\n",
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let (server, dashboard) = start(&store, &["--dashboard-api-keys", keys.to_str().unwrap()]);

    // No credential, a wrong one, one without the read scope.
    let (status, head, _) = call(dashboard, "GET", "/api/snapshot", None, &[], None);
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    assert_eq!(
        call(dashboard, "GET", "/api/snapshot", Some("nope"), &[], None).0,
        401
    );
    assert_eq!(
        call(
            dashboard,
            "GET",
            "/api/snapshot",
            Some("other-secret"),
            &[],
            None
        )
        .0,
        403
    );
    // The page itself holds no data: it loads, and asks for a key.
    assert_eq!(get(dashboard, "/", Some(&dashboard.to_string())).0, 200);
    assert_eq!(
        get(dashboard, "/favicon.ico", Some(&dashboard.to_string())).0,
        404
    );

    let (status, _, body) = call(
        dashboard,
        "GET",
        "/api/whoami",
        Some("viewer-secret"),
        &[],
        None,
    );
    assert_eq!(status, 200);
    let who: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (who["principal"].as_str(), who["can_act"].as_bool()),
        (Some("key:viewer"), Some(false))
    );

    // A long call on the worker.
    let session = initialize(server.addr);
    let long = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 500, "step_ms": 40}}});
    let _call = post(server.addr, Some(&session), &long);
    let deadline = Instant::now() + Duration::from_secs(10);
    let run_id = loop {
        let (_, _, body) = call(
            dashboard,
            "GET",
            "/api/snapshot",
            Some("viewer-secret"),
            &[],
            None,
        );
        let snap: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(snap["can_act"], false);
        if let Some(run) = rows(&snap, "in_flight").first() {
            assert_eq!(run["state"], "running");
            break run["run_id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "the call never showed");
        std::thread::sleep(Duration::from_millis(50));
    };
    let kill = format!("/api/runs/{run_id}/kill");
    let reason = json!({"reason": "runaway"});

    // The read-only key cannot act; nor can a page of another origin, nor a form post.
    let (status, _, body) = call(
        dashboard,
        "POST",
        &kill,
        Some("viewer-secret"),
        &[JSON],
        Some(&reason),
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("dashboard:act"), "{body}");
    let evil = ("origin", "http://evil.example");
    assert_eq!(
        call(
            dashboard,
            "POST",
            &kill,
            Some("ops-secret"),
            &[JSON, evil],
            Some(&reason)
        )
        .0,
        403
    );
    let form = ("content-type", "application/x-www-form-urlencoded");
    assert_eq!(
        call(dashboard, "POST", &kill, Some("ops-secret"), &[form], None).0,
        415
    );
    assert_eq!(
        call(
            dashboard,
            "POST",
            "/api/runs/nope/kill",
            Some("ops-secret"),
            &[JSON],
            Some(&reason)
        )
        .0,
        404
    );
    assert_eq!(
        call(
            dashboard,
            "POST",
            &format!("/api/runs/{run_id}/retry"),
            Some("ops-secret"),
            &[JSON],
            Some(&reason)
        )
        .0,
        409,
        "a running run is not parked"
    );

    // The act key kills it, from its own origin: the action names the key's principal.
    let own = format!("http://{dashboard}");
    let (status, _, body) = call(
        dashboard,
        "POST",
        &kill,
        Some("ops-secret"),
        &[JSON, ("origin", &own)],
        Some(&reason),
    );
    assert_eq!(status, 200, "{body}");
    let action: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (action["action"].as_str(), action["by"].as_str()),
        (Some("kill"), Some("key:ops"))
    );
    let (status, _, body) = call(
        dashboard,
        "GET",
        &format!("/api/runs/{run_id}"),
        Some("viewer-secret"),
        &[],
        None,
    );
    assert_eq!(status, 200);
    let timeline: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(timeline["in_journal"], false, "{timeline:#}");
    assert_eq!(timeline["actions"][0]["reason"], "runaway");
    let outcome = timeline["stream"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(outcome["error"]["code"], -32040, "{timeline:#}");
    assert_eq!(
        call(
            dashboard,
            "GET",
            "/api/runs/nope",
            Some("viewer-secret"),
            &[],
            None
        )
        .0,
        404
    );

    // The charts read this worker's metrics.
    let (status, _, body) = call(
        dashboard,
        "GET",
        "/api/history",
        Some("viewer-secret"),
        &[],
        None,
    );
    assert_eq!(status, 200);
    let history: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (
            history["metrics"].as_bool(),
            history["interval_ms"].as_u64()
        ),
        (Some(true), Some(10_000))
    );
}

#[test]
fn without_authentication_nothing_can_be_done_from_the_dashboard() {
    let dir = temp_dir("dashboard-noauth");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let (_server, dashboard) = start(&store, &[]);
    let (status, _, body) = call(dashboard, "GET", "/api/whoami", None, &[], None);
    assert_eq!(status, 200);
    assert!(body.contains(r#""can_act":false"#), "{body}");
    let (status, _, body) = call(
        dashboard,
        "POST",
        "/api/runs/any/cancel",
        None,
        &[JSON],
        Some(&json!({})),
    );
    assert_eq!(status, 403);
    assert!(body.contains("acting needs authentication"), "{body}");
}

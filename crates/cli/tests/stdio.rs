//! The stdio transport with the real binary: same handler, same engine.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `durable-mcp serve --stdio` with its stdout read line by line on a thread, so that a
/// test waits for a message with a deadline instead of blocking forever.
struct StdioServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl StdioServer {
    fn start(store: &str) -> StdioServer {
        Self::start_with(store, &[])
    }

    fn start_with(store: &str, extra: &[&str]) -> StdioServer {
        let mut child = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
            .args(["serve", "--stdio", "--store", store])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        StdioServer {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message, within 20 s.
    fn recv(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(20))
            .expect("no message from the server within 20 s");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    /// Messages until `done` holds for the ones read so far (within 20 s).
    fn recv_until(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        while !done(&seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => seen
                    .push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))),
                Err(_) => panic!("timed out; messages so far: {seen:#?}"),
            }
        }
        seen
    }

    fn initialize(&mut self, version: &str) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {"elicitation": {}}, "clientInfo": {"name": "stdio-test", "version": "1"}}}));
        let init = self.recv();
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init
    }

    /// Close stdin and wait (at most 20 s) for a clean exit.
    fn close(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "exits cleanly when stdin closes: {status}"
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit within 20 s of stdin closing"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn has(messages: &[Value], pred: impl Fn(&Value) -> bool) -> bool {
    messages.iter().any(pred)
}

#[test]
fn stdio_initialize_list_call_and_elicit() {
    let mut server = StdioServer::start("memory:");
    let init = server.initialize("2025-06-18");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");

    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let list = server.recv();
    assert!(
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "test_simple_text")
    );

    server.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}}));
    let call = server.recv();
    assert_eq!(call["id"], 3);
    assert!(call["result"]["content"][0]["text"].is_string());

    server.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "test_elicitation", "arguments": {"message": "name?"}}}));
    let question = server.recv();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    server.send(json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}}));
    let answer = server.recv();
    assert_eq!(answer["id"], 4, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("accept"),
        "{answer}"
    );

    server.send(json!({"jsonrpc": "2.0", "id": 5, "method": "no/such"}));
    assert_eq!(server.recv()["error"]["code"], -32601);
    writeln!(server.stdin.as_mut().unwrap(), "{{not json").unwrap();
    server.stdin.as_mut().unwrap().flush().unwrap();
    assert_eq!(server.recv()["error"]["code"], -32700);

    server.close();
}

/// Messages the engine routes to the session's standalone stream (list changes, updates of
/// subscribed resources) reach a stdio client: stdio has no GET, so the transport itself
/// follows that stream from `initialize` on.
#[test]
fn stdio_client_gets_list_changes_and_resource_updates() {
    let mut server = StdioServer::start("memory:");
    server.initialize("2025-11-25");

    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test_trigger_tool_change", "arguments": {}}}));
    let seen = server.recv_until(|m| {
        has(m, |v| v["id"] == 2) && has(m, |v| v["method"] == "notifications/tools/list_changed")
    });
    assert!(
        seen.iter().find(|v| v["id"] == 2).unwrap()["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("listed"),
        "{seen:?}"
    );

    server.send(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe", "params": {"uri": "test://watched-resource"}}));
    assert_eq!(server.recv()["id"], 3);
    server.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "trigger_resource_update", "arguments": {}}}));
    let seen = server.recv_until(|m| {
        has(m, |v| v["id"] == 4) && has(m, |v| v["method"] == "notifications/resources/updated")
    });
    let update = seen
        .iter()
        .find(|v| v["method"] == "notifications/resources/updated")
        .unwrap();
    assert_eq!(
        update["params"]["uri"], "test://watched-resource",
        "{update}"
    );

    // 2025-11-25 tasks: status notifications go to the creating session's standalone stream.
    server.send(
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "steps",
        "arguments": {"count": 1, "step_ms": 10}, "task": {"ttl": 60_000}}}),
    );
    let created = server.recv();
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let completed = |v: &Value| {
        v["method"] == "notifications/tasks/status"
            && v["params"]["taskId"] == task_id.as_str()
            && v["params"]["status"] == "completed"
    };
    server.recv_until(|m| has(m, completed));

    server.close();
}

/// The end of input is not the end of the requests in flight: they get the grace period
/// to finish, and their messages are written before the process exits.
#[test]
fn stdio_answers_requests_in_flight_at_the_end_of_input() {
    let mut server = StdioServer::start("memory:");
    server.initialize("2025-11-25");
    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "emit_events", "arguments": {"count": 3, "interval_ms": 100}}}));
    drop(server.stdin.take());
    let seen = server.recv_until(|m| has(m, |v| v["id"] == 2));
    assert_eq!(
        seen.iter().find(|v| v["id"] == 2).unwrap()["result"]["content"][0]["text"],
        "3",
        "{seen:?}"
    );
    server.close();
}

/// Lines of a `steps` ledger that start with `<index> `.
fn ledger_count(path: &std::path::Path, index: u32) -> usize {
    let prefix = format!("{index} ");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .count()
}

fn wait_for(what: &str, timeout: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// D7 for stdio: `serve --stdio` runs recovery like the HTTP server does. A call whose
/// process is SIGKILLed in its second step is finished by the next process started on the
/// same store (same worker name): the step committed before the crash is not run again,
/// and the run leaves the journal once its outcome is committed.
#[test]
fn d7_stdio_restart_finishes_the_unfinished_call() {
    let dir = durable_mcp_testkit::temp_dir("stdio-recovery");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let ledger = dir.join("calls.ledger");
    let mut server = StdioServer::start(&store);
    server.initialize("2025-11-25");
    server.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "steps",
        "arguments": {"count": 3, "step_ms": 400, "ledger": ledger.display().to_string()}}}),
    );
    wait_for("step 2 to start", Duration::from_secs(20), || {
        ledger_count(&ledger, 2) == 1
    });
    drop(server); // SIGKILL

    let server = StdioServer::start(&store);
    wait_for("step 3 after the restart", Duration::from_secs(20), || {
        ledger_count(&ledger, 3) == 1
    });
    let runs_left = || {
        let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
            .args(["inspect", "runs", "--json", "--store", &store])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().is_empty()
    };
    wait_for(
        "the run to leave the journal",
        Duration::from_secs(20),
        runs_left,
    );
    assert_eq!(
        ledger_count(&ledger, 1),
        1,
        "a committed step is not run again"
    );
    assert!(
        (1..=2).contains(&ledger_count(&ledger, 2)),
        "the interrupted step runs again, at most once more"
    );
    server.close();
}

/// A request that cannot finish (its question is never answered) does not keep the process
/// alive once input ends: after the grace period its lease is given back and the process
/// exits.
#[test]
fn stdio_exits_after_the_grace_period_with_a_question_unanswered() {
    let mut server = StdioServer::start_with("memory:", &["--shutdown-grace-secs", "1"]);
    server.initialize("2025-11-25");
    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test_elicitation", "arguments": {"message": "name?"}}}));
    assert_eq!(server.recv()["method"], "elicitation/create");
    server.close();
}

//! D10, D12 end to end with the real binary: durable tasks in both designs, answered by
//! any worker and surviving SIGKILL of the worker running them, and multi-round-trip
//! requests whose sealed `requestState` continues the same run.
//!
//! The cross-worker tests read `DATABASE_URL` / `REDIS_URL`; outside CI a missing service
//! skips them with a printed reason, in CI (`durable_mcp_store::in_ci`) they fail.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use durable_mcp::store::now_ms;

use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

const EXT: &str = TASKS_EXTENSION;

fn ledger(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn sqlite(name: &str) -> String {
    format!("sqlite:{}", temp_dir(name).join("store.db").display())
}

#[test]
fn d10_extension_task_lifecycle_and_input() {
    let server = Server::start(&sqlite("tasks-ext"), free_port(), &[]);
    let addr = server.addr;
    // Declared: a task, committed before the create result (strongly consistent get).
    let created = modern(
        addr,
        1,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "x"}}),
        true,
    );
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    let task_id = task["taskId"].as_str().unwrap().to_owned();
    assert_eq!(task_id.len(), 32, "unguessable 128-bit ids");
    assert!(
        task["ttlMs"].as_u64().is_some() && task.get("ttl").is_none(),
        "{task}"
    );
    assert_eq!(
        task_get(addr, &task_id)["result"]["taskId"],
        task_id.as_str()
    );
    let done = wait_terminal(addr, &task_id, Duration::from_secs(10));
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "slow_compute(x) finished after 1s"
    );
    // Not declared: the same tool answers directly; a task-required tool is refused.
    let direct = modern(
        addr,
        2,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0}}),
        false,
    );
    assert!(direct["result"]["content"].is_array(), "{direct}");
    let refused = modern(
        addr,
        3,
        "tools/call",
        json!({"name": "failing_job", "arguments": {}}),
        false,
    );
    assert_eq!(refused["error"]["code"], -32021);
    assert!(refused["error"]["data"]["requiredCapabilities"]["extensions"][EXT].is_object());
    // isError ends an extension task as completed; a JSON-RPC error as failed.
    let failing = modern(
        addr,
        4,
        "tools/call",
        json!({"name": "failing_job", "arguments": {}}),
        true,
    );
    let failing = wait_terminal(
        addr,
        failing["result"]["taskId"].as_str().unwrap(),
        Duration::from_secs(10),
    );
    assert_eq!(
        (
            failing["status"].as_str(),
            failing["result"]["isError"].as_bool()
        ),
        (Some("completed"), Some(true))
    );
    let broken = modern(
        addr,
        5,
        "tools/call",
        json!({"name": "protocol_error_job", "arguments": {}}),
        true,
    );
    let broken = wait_terminal(
        addr,
        broken["result"]["taskId"].as_str().unwrap(),
        Duration::from_secs(10),
    );
    assert_eq!(broken["status"], "failed");
    assert!(
        broken["error"]["code"].is_i64() && broken.get("result").is_none(),
        "{broken}"
    );
    // Questions become inputRequests; tasks/update answers them (unknown keys ignored).
    let multi = modern(
        addr,
        6,
        "tools/call",
        json!({"name": "multi_input", "arguments": {}}),
        true,
    );
    let multi_id = multi["result"]["taskId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(5);
    let keys: Vec<String> = loop {
        let got = task_get(addr, &multi_id)["result"].clone();
        if let Some(requests) = got["inputRequests"].as_object()
            && requests.len() == 2
        {
            assert_eq!(got["status"], "input_required");
            break requests.keys().cloned().collect();
        }
        assert!(Instant::now() < deadline, "{got}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let answer = |name: &str| json!({"action": "accept", "content": {"name": name}});
    let ack = modern(
        addr,
        7,
        "tasks/update",
        json!({"taskId": multi_id, "inputResponses": {&keys[0]: answer("one"), "bogus": {}}}),
        true,
    );
    assert_eq!(ack["result"], json!({"resultType": "complete"}));
    let partial = task_get(addr, &multi_id)["result"].clone();
    assert_eq!(partial["status"], "input_required");
    assert!(
        partial["inputRequests"].get(&keys[0]).is_none()
            && partial["inputRequests"].get(&keys[1]).is_some(),
        "{partial}"
    );
    modern(
        addr,
        8,
        "tasks/update",
        json!({"taskId": multi_id, "inputResponses": {&keys[1]: answer("two")}}),
        true,
    );
    let multi_done = wait_terminal(addr, &multi_id, Duration::from_secs(10));
    assert_eq!(
        multi_done["result"]["content"][0]["text"],
        "multi_input: a=one, b=two"
    );
    // Cancel: an empty acknowledgement, idempotent; the run stops and the status stays.
    let long = modern(
        addr,
        9,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 60}}),
        true,
    );
    let long_id = long["result"]["taskId"].as_str().unwrap().to_owned();
    for n in 0..2 {
        let ack = modern(
            addr,
            10 + n,
            "tasks/cancel",
            json!({"taskId": long_id}),
            true,
        );
        assert_eq!(ack["result"], json!({"resultType": "complete"}));
    }
    assert_eq!(
        wait_terminal(addr, &long_id, Duration::from_secs(2))["status"],
        "cancelled"
    );
    // Unknown ids and clients without the extension.
    assert_eq!(
        task_get(addr, "00000000000000000000000000000000")["error"]["code"],
        -32602
    );
    let gated = modern(addr, 12, "tasks/get", json!({"taskId": long_id}), false);
    assert_eq!(gated["error"]["code"], -32021);
}

/// A tool that asks first (a synchronous `input_required`) and then becomes a task with
/// `Durable::start_task`: the second round's answer is the create result.
#[test]
fn d10_question_then_task() {
    let server = Server::start(&sqlite("tasks-compose"), free_port(), &[]);
    let addr = server.addr;
    let round1 = modern(
        addr,
        1,
        "tools/call",
        json!({"name": "test_tool_with_task", "arguments": {}}),
        true,
    );
    assert_eq!(round1["result"]["resultType"], "input_required", "{round1}");
    assert!(round1["result"].get("taskId").is_none());
    let key = round1["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let state = round1["result"]["requestState"].clone();
    let round2 = modern(
        addr,
        2,
        "tools/call",
        json!({"name": "test_tool_with_task", "arguments": {},
        "inputResponses": {key: {"action": "accept", "content": {"name": "Alice"}}}, "requestState": state}),
        true,
    );
    let created = &round2["result"];
    assert_eq!(created["resultType"], "task", "{round2}");
    assert!(created.get("requestState").is_none() && created.get("inputRequests").is_none());
    let done = wait_terminal(
        addr,
        created["taskId"].as_str().unwrap(),
        Duration::from_secs(10),
    );
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Hello, Alice! (from a task)"
    );
}

/// D12: a durable question in a stateless request without tasks is an `input_required`
/// result with a sealed state; the retry continues the same run; tampering is refused.
#[test]
fn d12_stateless_questions_continue_the_same_run() {
    let server = Server::start(&sqlite("mrtr"), free_port(), &[]);
    let addr = server.addr;
    let first = modern(
        addr,
        1,
        "tools/call",
        json!({"name": "ask", "arguments": {"question": "name?"}}),
        false,
    );
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let state = result["requestState"].as_str().unwrap().to_owned();
    let (key, question) = result["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(question["method"], "elicitation/create");
    let responses = json!({key: {"action": "accept", "content": {"answer": "Ada"}}});
    let mut forged = state.clone();
    forged.pop();
    forged.push(if state.ends_with('A') { 'B' } else { 'A' });
    let tampered = modern(
        addr,
        2,
        "tools/call",
        json!({"name": "ask", "arguments": {"question": "name?"},
        "inputResponses": responses, "requestState": forged}),
        false,
    );
    assert_eq!(tampered["error"]["code"], -32602, "{tampered}");
    let other_params = modern(
        addr,
        3,
        "tools/call",
        json!({"name": "ask", "arguments": {"question": "other?"},
        "inputResponses": responses, "requestState": state}),
        false,
    );
    assert_eq!(
        other_params["error"]["code"], -32602,
        "bound to the parameters: {other_params}"
    );
    let second = modern(
        addr,
        4,
        "tools/call",
        json!({"name": "ask", "arguments": {"question": "name?"},
        "inputResponses": responses, "requestState": state}),
        false,
    );
    assert_eq!(second["result"]["content"][0]["text"], "Ada", "{second}");
}

/// D10 across workers and a crash: a four-step task whose worker is killed during step 3
/// is finished by another worker (shared store) or by the same worker restarted (SQLite);
/// `tasks/get` shows one result.
fn task_survives_its_worker(backend: Option<Backend>) {
    if backend.is_some_and(|b| !b.available()) {
        return;
    }
    let store = match backend {
        Some(backend) => backend.store_url(None),
        None => sqlite("task-crash-sqlite"),
    };
    let a_port = free_port();
    let mut a = Server::start(&store, a_port, &["--lease-ms", "1500"]);
    let b = match backend {
        Some(_) => Server::start(&store, free_port(), &["--lease-ms", "1500"]),
        None => Server::start(&sqlite("unused"), free_port(), &[]),
    };
    let dir = temp_dir("task-crash");
    let path = dir.join("task.ledger");
    let created = modern(
        a.addr,
        1,
        "tools/call",
        json!({"name": "steps",
        "arguments": {"count": 4, "step_ms": 700, "ledger": path.display().to_string()}}),
        true,
    );
    let task_id = created["result"]["taskId"].as_str().unwrap().to_owned();
    if backend.is_some() {
        assert_eq!(
            task_get(b.addr, &task_id)["result"]["status"],
            "working",
            "any worker answers for any task"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ledger(&path).iter().any(|l| l.starts_with("3 ")) {
        assert!(Instant::now() < deadline, "step 3 never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    a.kill();
    let survivor = match backend {
        Some(_) => b.addr,
        None => {
            a = Server::start(&store, a_port, &["--lease-ms", "1500"]);
            a.addr
        }
    };
    let done = wait_terminal(survivor, &task_id, Duration::from_secs(20));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["steps"],
        json!([1, 2, 3, 4])
    );
    let lines = ledger(&path);
    let count = |i: &str| {
        lines
            .iter()
            .filter(|l| l.starts_with(&format!("{i} ")))
            .count()
    };
    assert_eq!((count("1"), count("2"), count("4")), (1, 1, 1), "{lines:?}");
    assert!((1..=2).contains(&count("3")), "{lines:?}");
    let keys: std::collections::BTreeSet<&str> = lines
        .iter()
        .filter(|l| l.starts_with("3 "))
        .map(|l| l.split_once(' ').unwrap().1)
        .collect();
    assert_eq!(keys.len(), 1, "same idempotency key: {lines:?}");
}

#[test]
fn d10_sqlite_task_survives_a_restart() {
    task_survives_its_worker(None);
}

#[test]
fn d10_postgres_task_survives_its_worker() {
    task_survives_its_worker(Some(Backend::Postgres));
}

#[test]
fn d10_redis_task_survives_its_worker() {
    task_survives_its_worker(Some(Backend::Redis));
}

/// 2025-11-25 tasks: `params.task`, `tasks/get`, `tasks/result` (blocks, carries the
/// question, returns the result with related-task), `tasks/list`, `tasks/cancel`.
#[test]
fn d10_legacy_tasks_with_params_task() {
    let server = Server::start(&sqlite("tasks-2025"), free_port(), &[]);
    let addr = server.addr;
    let session = initialize(addr);
    // The session's GET stream, where notifications/tasks/status arrive.
    let mut standalone = request(
        addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
        ],
        None,
    );
    assert_eq!(standalone.status, 200);
    let call = |id: u64, name: &str, arguments: Value, task: bool| {
        let mut params = json!({"name": name, "arguments": arguments});
        if task {
            params["task"] = json!({"ttl": 60_000});
        }
        post(
            addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
        )
        .messages()
    };
    let tools = post(
        addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"}),
    )
    .messages();
    let tools = tools.last().unwrap().1["result"]["tools"]
        .as_array()
        .unwrap()
        .clone();
    let support = |name: &str| {
        tools.iter().find(|t| t["name"] == name).unwrap()["execution"]["taskSupport"].clone()
    };
    assert_eq!(
        (
            support("steps"),
            support("failing_job"),
            support("test_simple_text")
        ),
        (json!("optional"), json!("required"), Value::Null)
    );
    let required = call(11, "failing_job", json!({}), false);
    assert_eq!(
        required.last().unwrap().1["error"]["code"],
        -32601,
        "task-required tools refuse plain calls"
    );
    let refused = call(1, "test_simple_text", json!({}), true);
    assert_eq!(
        refused.last().unwrap().1["error"]["code"],
        -32601,
        "forbidden tools refuse params.task"
    );
    let created = call(2, "ask", json!({"question": "colour?"}), true);
    let task = created.last().unwrap().1["result"]["task"].clone();
    assert_eq!(task["status"], "working", "{task}");
    assert_eq!(task["ttl"], 60_000);
    let task_id = task["taskId"].as_str().unwrap().to_owned();
    // D6: the same request id again gets the same task, not a second run.
    let again = call(2, "ask", json!({"question": "colour?"}), true);
    assert_eq!(
        again.last().unwrap().1["result"]["task"]["taskId"],
        task_id.as_str(),
        "{again:?}"
    );
    // tasks/result relays the question, tied to the task; the answer goes back as usual.
    let mut result = post(
        addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id}}),
    );
    let question = loop {
        let (_, data) = result.next_event().expect("question");
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&data).unwrap();
        if message["method"] == "elicitation/create" {
            break message;
        }
    };
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    let get = post(
        addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"taskId": task_id}}),
    )
    .messages();
    assert_eq!(get.last().unwrap().1["result"]["status"], "input_required");
    let reply = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"answer": "teal"}}});
    assert_eq!(post(addr, Some(&session), &reply).status, 202);
    let outcome = result
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .find(|m| m["id"] == 3)
        .unwrap();
    assert_eq!(outcome["result"]["content"][0]["text"], "teal");
    assert_eq!(
        outcome["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    let list = post(
        addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/list", "params": {}}),
    )
    .messages();
    assert!(
        list.last().unwrap().1["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["taskId"] == task_id.as_str())
    );
    let cancel = post(addr, Some(&session), &json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/cancel", "params": {"taskId": task_id}})).messages();
    assert_eq!(
        cancel.last().unwrap().1["error"]["code"],
        -32602,
        "a terminal task cannot be cancelled"
    );
    // Every status change was announced on the session's GET stream, in order, with the
    // task itself and without related-task.
    let mut statuses = Vec::new();
    while statuses.last().map(String::as_str) != Some("completed") {
        let (_, data) = standalone.next_event().expect("a task status notification");
        let Ok(message) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        if message["method"] == "notifications/tasks/status" {
            assert_eq!(message["params"]["taskId"], task_id.as_str(), "{message}");
            assert!(
                message["params"]["createdAt"].is_string() && message["params"]["ttl"] == 60_000,
                "{message}"
            );
            assert!(message["params"].get("_meta").is_none(), "{message}");
            statuses.push(message["params"]["status"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(statuses, ["input_required", "working", "completed"]);
    // A cancelled task is announced too.
    let long = call(7, "slow_compute", json!({"seconds": 60}), true);
    let long_id = long.last().unwrap().1["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    post(
        addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 8, "method": "tasks/cancel", "params": {"taskId": long_id}}),
    );
    let cancelled = loop {
        let (_, data) = standalone
            .next_event()
            .expect("the cancellation's notification");
        let Ok(message) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        if message["method"] == "notifications/tasks/status"
            && message["params"]["taskId"] == long_id.as_str()
        {
            break message;
        }
    };
    assert_eq!(cancelled["params"]["status"], "cancelled", "{cancelled}");
}

/// D7 for a 2025-11-25 task whose handler is an ordinary one (`emit_events`, no durable
/// context): its worker is killed after `tasks/result` relayed progress 10 of 40; the task
/// is run again from the top (by the same worker restarted on SQLite, by the other worker
/// on a shared store) and the relay goes on. The client resumes `tasks/result` with
/// `Last-Event-ID` and sees each progress value once, increasing, each log line once, and
/// one result: the re-run does not repeat on the task's stream what it already holds.
fn task_rerun_progress_never_goes_backwards(backend: Option<Backend>) {
    const COUNT: u64 = 40;
    if backend.is_some_and(|b| !b.available()) {
        return;
    }
    let store = match backend {
        Some(backend) => backend.store_url(None),
        None => sqlite("task-rerun-sqlite"),
    };
    let lease = ["--lease-ms", "1500"];
    let a_port = free_port();
    let mut a = Server::start(&store, a_port, &lease);
    let b = backend.map(|_| Server::start(&store, free_port(), &lease));
    let session = initialize(a.addr);
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "emit_events", "arguments": {"count": COUNT, "interval_ms": 100},
        "task": {"ttl": 60_000}, "_meta": {"progressToken": "task"}}});
    let created = post(a.addr, Some(&session), &call).messages();
    let task_id = created.last().unwrap().1["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut relay = post(
        a.addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id}}),
    );
    assert_eq!(relay.status, 200);
    let mut last = relay.next_event().unwrap().0.expect("priming id");
    let mut seen: Vec<Value> = Vec::new();
    while !seen.iter().any(|m| m["params"]["progress"] == 10.0) {
        let (id, data) = relay.next_event().expect("relayed event before the crash");
        last = id.unwrap();
        seen.push(serde_json::from_str(&data).unwrap());
    }
    drop(relay);
    a.kill();
    let survivor = match &b {
        Some(b) => b.addr,
        None => {
            a = Server::start(&store, a_port, &lease);
            a.addr
        }
    };
    let resumed = resume(survivor, &session, &last);
    assert_eq!(
        resumed.status, 200,
        "D3: the tasks/result stream resumes after the crash"
    );
    let rest: Vec<Value> = resumed.messages().into_iter().map(|(_, m)| m).collect();
    let all: Vec<&Value> = seen.iter().chain(&rest).collect();
    assert_events_sent_once(&all, "task", COUNT);
    let results: Vec<&&Value> = all.iter().filter(|m| m["id"] == 3).collect();
    assert_eq!(results.len(), 1, "D7: exactly one outcome: {rest:#?}");
    assert_eq!(
        results[0]["result"]["content"][0]["text"],
        COUNT.to_string()
    );
    assert_eq!(
        results[0]["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    drop(a);
}

#[test]
fn d7_sqlite_task_rerun_progress_never_goes_backwards() {
    task_rerun_progress_never_goes_backwards(None);
}

#[test]
fn d7_postgres_task_rerun_progress_never_goes_backwards() {
    task_rerun_progress_never_goes_backwards(Some(Backend::Postgres));
}

/// D9 for roots and sampling: in a session, each is a server-to-client request asked once;
/// the answers (POSTed back) are committed and used.
#[test]
fn d9_roots_and_sampling_in_a_session() {
    let server = Server::start(&sqlite("consult-legacy"), free_port(), &[]);
    let addr = server.addr;
    let session = initialize(addr);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "consult", "arguments": {"prompt": "hello?"}}});
    let mut response = post(addr, Some(&session), &call);
    let mut asked = Vec::new();
    let outcome = loop {
        let (_, data) = response.next_event().expect("event");
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&data).unwrap();
        let reply = match message["method"].as_str() {
            Some("roots/list") => json!({"roots": [{"uri": "file:///work", "name": "work"}]}),
            Some("sampling/createMessage") => {
                assert_eq!(
                    message["params"]["messages"][0]["content"]["text"],
                    "hello?"
                );
                json!({"role": "assistant", "content": {"type": "text", "text": "hi there"}, "model": "test-model"})
            }
            _ => break message,
        };
        asked.push(message["method"].as_str().unwrap().to_owned());
        let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": reply});
        assert_eq!(post(addr, Some(&session), &answer).status, 202);
    };
    assert_eq!(
        asked,
        ["roots/list", "sampling/createMessage"],
        "each asked once, in order"
    );
    assert_eq!(
        outcome["result"]["structuredContent"],
        json!({"roots": 1, "model": "test-model", "text": "hi there"}),
        "{outcome}"
    );
}

/// D9, D12 over several rounds: a stateless request asks for roots (round 1), then for a
/// sample (round 2, its answer to roots carried by the run, not re-asked), then completes.
#[test]
fn d12_multi_round_questions_continue_one_run() {
    let server = Server::start(&sqlite("consult-modern"), free_port(), &[]);
    let addr = server.addr;
    let params = json!({"name": "consult", "arguments": {"prompt": "hello?"}});
    let round1 = modern(addr, 1, "tools/call", params.clone(), false);
    let requests = round1["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .clone();
    assert_eq!(requests.len(), 1, "{round1}");
    let (k1, q1) = requests.iter().next().unwrap();
    assert_eq!(q1["method"], "roots/list");
    let mut retry = params.clone();
    retry["inputResponses"] = json!({k1: {"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}]}});
    retry["requestState"] = round1["result"]["requestState"].clone();
    let round2 = modern(addr, 2, "tools/call", retry, false);
    let requests = round2["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .clone();
    assert_eq!(requests.len(), 1, "only the new question: {round2}");
    let (k2, q2) = requests.iter().next().unwrap();
    assert_eq!(q2["method"], "sampling/createMessage");
    let mut last = params.clone();
    last["inputResponses"] = json!({k2: {"role": "assistant", "content": {"type": "text", "text": "two roots"}, "model": "m"}});
    last["requestState"] = round2["result"]["requestState"].clone();
    let round3 = modern(addr, 3, "tools/call", last, false);
    assert_eq!(
        round3["result"]["structuredContent"],
        json!({"roots": 2, "model": "m", "text": "two roots"}),
        "{round3}"
    );
}

/// 2026-07-28 `notifications/tasks`: a listen stream on worker `b` follows a task running
/// on worker `a`: acknowledged task ids, then the whole detailed task for its current
/// state and for every change (questions, answers from `tasks/update`, the result).
fn task_notifications_on_listen(a: SocketAddr, b: SocketAddr) {
    let created = modern(
        a,
        1,
        "tools/call",
        json!({"name": "multi_input", "arguments": {}}),
        true,
    );
    let task_id = created["result"]["taskId"].as_str().unwrap().to_owned();
    // Refusals: task ids without the extension; task ids that are not strings.
    let refused = last_message(listen(b, json!({"taskIds": [task_id]}), false));
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    let malformed = last_message(listen(b, json!({"taskIds": [1, 2]}), true));
    assert_eq!(malformed["error"]["code"], -32602, "{malformed}");
    let unknown = "00000000000000000000000000000000";
    let mut stream = listen(
        b,
        json!({"taskIds": [task_id, unknown], "toolsListChanged": true}),
        true,
    );
    assert_eq!(stream.status, 200);
    let ack = next_message(&mut stream);
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([task_id]),
        "only the caller's existing tasks: {ack}"
    );
    let subscription = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone();
    let mut next_task = || {
        let message = next_message(&mut stream);
        assert_eq!(message["method"], "notifications/tasks", "{message}");
        assert_eq!(
            message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], subscription,
            "{message}"
        );
        assert_eq!(message["params"]["taskId"], task_id.as_str());
        assert!(message["params"].get("resultType").is_none(), "{message}");
        message["params"].clone()
    };
    let questions = loop {
        let task = next_task();
        if let Some(requests) = task["inputRequests"].as_object()
            && requests.len() == 2
        {
            assert_eq!(task["status"], "input_required");
            break requests.keys().cloned().collect::<Vec<_>>();
        }
    };
    let answer = |name: &str| json!({"action": "accept", "content": {"name": name}});
    modern(
        a,
        2,
        "tasks/update",
        json!({"taskId": task_id, "inputResponses": {&questions[0]: answer("one")}}),
        true,
    );
    let partial = next_task();
    assert_eq!(partial["status"], "input_required");
    assert_eq!(
        partial["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        [&questions[1]],
        "{partial}"
    );
    modern(
        a,
        3,
        "tasks/update",
        json!({"taskId": task_id, "inputResponses": {&questions[1]: answer("two")}}),
        true,
    );
    let done = loop {
        let task = next_task();
        if task["status"] != "working" {
            break task;
        }
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "multi_input: a=one, b=two"
    );
    let mut get = task_get(a, &task_id)["result"].clone();
    get.as_object_mut().unwrap().remove("resultType");
    let mut told = done.clone();
    told.as_object_mut().unwrap().remove("_meta");
    assert_eq!(told, get, "a notification carries what tasks/get answers");
    drop(stream);
    // Subscribing to a task that already ended: its final state, once.
    let mut late = listen(b, json!({"taskIds": [task_id]}), true);
    assert_eq!(
        next_message(&mut late)["params"]["notifications"]["taskIds"],
        json!([task_id])
    );
    let last = next_message(&mut late);
    assert_eq!(
        (last["method"].as_str(), last["params"]["status"].as_str()),
        (Some("notifications/tasks"), Some("completed")),
        "{last}"
    );
    // Too many ids: refused.
    let many: Vec<String> = (0..300).map(|n| format!("{n:032x}")).collect();
    assert_eq!(
        last_message(listen(b, json!({"taskIds": many}), true))["error"]["code"],
        -32602
    );
}

#[test]
fn d10_task_notifications_on_listen() {
    let server = Server::start(&sqlite("tasks-listen"), free_port(), &[]);
    task_notifications_on_listen(server.addr, server.addr);
}

fn task_notifications_across_workers(backend: Backend) {
    let Some((a, b)) = two_workers(backend, &[]) else {
        return;
    };
    task_notifications_on_listen(a.addr, b.addr);
}

#[test]
fn d10_postgres_task_notifications_across_workers() {
    task_notifications_across_workers(Backend::Postgres);
}

#[test]
fn d10_redis_task_notifications_across_workers() {
    task_notifications_across_workers(Backend::Redis);
}

/// How the worker relaying a `tasks/result` goes away.
#[derive(Clone, Copy, PartialEq)]
enum Stop {
    /// SIGKILL: the relay's lease expires, then another worker takes it over.
    Kill,
    /// SIGTERM (no grace period): the relay's lease is handed over at once.
    Term,
}

/// A 2025-11-25 `tasks/result` outlives the worker relaying it: that worker goes away
/// after relaying the task's question; the client answers through the other worker and
/// resumes the `tasks/result` stream there with `Last-Event-ID`, and gets the task's
/// result, once. With SIGTERM the lease (10 s here) is handed over, so the result comes
/// well before it could have expired.
fn task_result_relay_survives_its_worker(backend: Backend, stop: Stop) {
    let args: &[&str] = match stop {
        Stop::Kill => &["--lease-ms", "1500"],
        Stop::Term => &["--lease-ms", "10000", "--shutdown-grace-secs", "0"],
    };
    let Some((mut a, b)) = two_workers(backend, args) else {
        return;
    };
    let session = initialize(b.addr);
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "ask", "arguments": {"question": "colour?"}, "task": {"ttl": 60_000}}});
    let created = post(b.addr, Some(&session), &call).messages();
    let task_id = created.last().unwrap().1["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut relay = post(
        a.addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id}}),
    );
    let (question_event, question) = loop {
        let (id, data) = relay.next_event().expect("the question");
        if let Ok(message) = serde_json::from_str::<Value>(&data)
            && message["method"] == "elicitation/create"
        {
            break (id.unwrap(), message);
        }
    };
    let stopped = Instant::now();
    match stop {
        Stop::Kill => a.kill(),
        Stop::Term => {
            assert!(
                std::process::Command::new("kill")
                    .args(["-TERM", &a.child.id().to_string()])
                    .status()
                    .unwrap()
                    .success()
            );
            let _ = a.child.wait();
        }
    }
    drop(relay);
    let reply = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"answer": "teal"}}});
    assert_eq!(post(b.addr, Some(&session), &reply).status, 202);
    let rest: Vec<Value> = resume(b.addr, &session, &question_event)
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let results: Vec<&Value> = rest.iter().filter(|m| m["id"] == 3).collect();
    assert_eq!(results.len(), 1, "{rest:#?}");
    assert_eq!(results[0]["result"]["content"][0]["text"], "teal");
    assert_eq!(
        results[0]["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id.as_str()
    );
    assert!(
        rest.iter().all(|m| m["method"] != "elicitation/create"),
        "the question is not relayed twice: {rest:#?}"
    );
    if stop == Stop::Term {
        // Handed over: B's next recovery pass (1 s) takes it; the 10 s lease, renewed
        // every 3.3 s, would otherwise have held it for at least 6.7 s.
        assert!(
            stopped.elapsed() < Duration::from_secs(6),
            "result {:?} after SIGTERM: the relay was not handed over",
            stopped.elapsed()
        );
    }
}

#[test]
fn d10_postgres_task_result_relay_survives_its_worker() {
    task_result_relay_survives_its_worker(Backend::Postgres, Stop::Kill);
}

#[test]
fn d10_redis_task_result_relay_survives_its_worker() {
    task_result_relay_survives_its_worker(Backend::Redis, Stop::Kill);
}

#[test]
fn d10_postgres_task_result_relay_handed_over_at_shutdown() {
    task_result_relay_survives_its_worker(Backend::Postgres, Stop::Term);
}

#[test]
fn d10_redis_task_result_relay_handed_over_at_shutdown() {
    task_result_relay_survives_its_worker(Backend::Redis, Stop::Term);
}

/// D10 "a task is removed once its TTL has passed", end to end: a 2025-11-25 task asking
/// for a 1 s TTL (the shortest the server grants) is listed at first, and once the TTL has
/// passed `tasks/get` answers it as unknown and `tasks/list` no longer has it, while its
/// run is still sleeping.
#[test]
fn d10_task_is_gone_from_get_and_list_once_its_ttl_has_passed() {
    let server = Server::start(&sqlite("tasks-ttl"), free_port(), &[]);
    let addr = server.addr;
    let session = initialize(addr);
    let rpc = |id: u64, method: &str, params: Value| {
        post(
            addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .messages()
        .last()
        .unwrap()
        .1
        .clone()
    };
    let asked = Instant::now();
    let created = rpc(
        1,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 60}, "task": {"ttl": 1_000}}),
    );
    let task = created["result"]["task"].clone();
    assert_eq!(
        (task["status"].as_str(), task["ttl"].as_u64()),
        (Some("working"), Some(1_000)),
        "{created}"
    );
    let task_id = task["taskId"].as_str().unwrap().to_owned();
    let listed = |list: &Value| {
        list["result"]["tasks"]
            .as_array()
            .is_some_and(|tasks| tasks.iter().any(|t| t["taskId"] == task_id.as_str()))
    };
    let first = rpc(2, "tasks/list", json!({}));
    assert!(
        listed(&first) || asked.elapsed() >= Duration::from_secs(1),
        "listed while its TTL runs: {first}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let get = rpc(3, "tasks/get", json!({"taskId": task_id}));
        let list = rpc(4, "tasks/list", json!({}));
        if get.get("error").is_some() && !listed(&list) {
            assert_eq!(
                get["error"]["code"], -32602,
                "an expired task is unknown: {get}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still there 30 s after a 1 s TTL: {get} {list}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The wake-up time a durable sleep committed in the journal of the SQLite `store`:
/// step `sleep:<name>` of whichever run reached it (waits until one has).
fn committed_wake_up(store: &str, name: &str) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = durable_mcp::open_store(store).await.unwrap();
        let suffix = format!(
            "/s/{}",
            durable_mcp_store::key_part(&format!("sleep:{name}"))
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let steps = store
                .list_records(durable_mcp_store::RecordKind::Step, "", 1_000)
                .await
                .unwrap();
            if let Some(step) = steps.iter().find(|step| step.key.ends_with(&suffix)) {
                let (value, _) =
                    durable_mcp::engine::inspect::decode_step(&step.key, &step.value).unwrap();
                return value.as_u64().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "the sleep's wake-up time was never committed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// A durable sleep re-run after SIGKILL waits only what is left (docs/durable-execution.md:
/// "the wake-up time is committed on the first run; a re-run sleeps only what is left";
/// D7, D8): a task sleeping 10 s
/// is killed 4 s in and its worker restarted; it completes at the wake-up time committed
/// in the journal (a generous 3 s after it at most), not 10 s after the restart (which
/// would be at least 4 s after it).
#[test]
fn d7_rerun_sleep_after_sigkill_waits_only_the_rest() {
    const SLEEP_MS: u64 = 10_000;
    let store = sqlite("sleep-rerun");
    let port = free_port();
    let mut server = Server::start(&store, port, &[]);
    let created = modern(
        server.addr,
        1,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": SLEEP_MS / 1000}}),
        true,
    );
    let task_id = created["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let wake_at = committed_wake_up(&store, "compute");
    while now_ms() < wake_at - 6_000 {
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();
    let restarted_at = now_ms();
    server = Server::start(&store, port, &[]);
    let done = wait_terminal(server.addr, &task_id, Duration::from_secs(30));
    let finished = now_ms();
    assert_eq!(done["status"], "completed", "{done}");
    assert!(
        finished >= wake_at,
        "the re-run woke {} ms before the committed wake-up",
        wake_at - finished
    );
    assert!(
        finished < wake_at + 3_000,
        "finished {} ms after the committed wake-up (restarted {} ms before it): the re-run slept the whole {SLEEP_MS} ms again",
        finished - wake_at,
        wake_at.saturating_sub(restarted_at)
    );
}

//! `durable-mcp runs`: an operator lists, cancels and kills a long tool call, end to end
//! with the real binary. The call runs on a worker; the command is another process on the
//! same store (SQLite file, or PostgreSQL or Redis shared by two workers). The client sees
//! the outcome on its stream, the `steps` fixture's ledger stops growing (nothing runs
//! afterwards), and the action is kept.
//!
//! The stores come from `DATABASE_URL` / `REDIS_URL`; outside CI a missing service skips
//! with a printed reason, in CI (`durable_mcp_store::in_ci`) it fails.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

/// A short lease: the worker beats every 300 ms, and so obeys a cancel within that.
const LEASE: &[&str] = &["--lease-ms", "900"];

/// A `durable-mcp` command run to its end (success or not).
fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(args)
        .output()
        .expect("run durable-mcp")
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The runs `runs list` prints as JSON with `filters`.
fn listed(store: &str, filters: &[&str]) -> Vec<Value> {
    let mut args = vec!["runs", "list", "--store", store, "--json"];
    args.extend_from_slice(filters);
    run(&args)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A long `steps` call on `addr` in a new session, cancelled or killed through `store` by
/// an operator while its steps run.
fn an_operator_ends_a_long_call(addr: SocketAddr, store: &str, kill: bool) {
    let dir = temp_dir("runs-act");
    let ledger = dir.join("effects.ledger");
    let session = initialize(addr);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 500, "step_ms": 40, "ledger": ledger.display().to_string()}}});
    let mut response = post(addr, Some(&session), &call);
    assert_eq!(response.status, 200);
    let priming = response.next_event().unwrap().0.expect("priming id");
    wait_for("the steps to run", Duration::from_secs(10), || {
        ledger_lines(&ledger).len() >= 3
    });

    let runs = listed(store, &["--tool", "steps", "--state", "running"]);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let id = runs[0]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(runs[0]["session"], session.as_str());
    assert!(listed(store, &["--state", "waiting"]).is_empty());
    assert!(listed(store, &["--tool", "other"]).is_empty());
    assert!(listed(store, &["--older-than", "1h"]).is_empty());

    let verb = if kill { "kill" } else { "cancel" };
    let action: Value = serde_json::from_str(&run(&[
        "runs",
        verb,
        "--store",
        store,
        &id,
        "--reason",
        "stuck on a lock",
        "--by",
        "ops",
        "--json",
    ]))
    .unwrap();
    assert_eq!(
        (action["action"].as_str(), action["by"].as_str()),
        (Some(verb), Some("ops"))
    );

    // The client reads who ended its request, and why, as its one outcome: on its stream,
    // or (a kill, whose worker closes the connection once its lease is gone) where it
    // resumes it, as any client of a resumable stream does.
    let mut last = priming;
    let mut outcomes = Vec::new();
    for (id, message) in response.messages() {
        last = id;
        outcomes.extend((message["id"] == 7).then_some(message));
    }
    if outcomes.is_empty() {
        outcomes.extend(
            resume(addr, &session, &last)
                .messages()
                .into_iter()
                .map(|(_, message)| message)
                .filter(|message| message["id"] == 7),
        );
    }
    assert_eq!(outcomes.len(), 1, "one outcome: {outcomes:#?}");
    let error = &outcomes[0]["error"];
    assert_eq!(error["code"], -32040, "{error:#}");
    let ended = if kill { "killed" } else { "cancelled" };
    assert_eq!(
        error["message"],
        format!("the request was {ended} by an operator: stuck on a lock")
    );

    // Nothing runs afterwards: at most the step in flight finishes.
    let after = ledger_lines(&ledger).len();
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        ledger_lines(&ledger).len() <= after + 1,
        "the handler went on after the {verb}"
    );
    assert!(listed(store, &[]).is_empty(), "the run left the journal");

    let shown: Value =
        serde_json::from_str(&run(&["runs", "show", "--store", store, &id, "--json"])).unwrap();
    assert_eq!(shown["in_journal"], false);
    assert_eq!(shown["actions"].as_array().unwrap().len(), 1, "{shown:#}");
    assert_eq!(shown["actions"][0]["reason"], "stuck on a lock");

    // An action that does not apply is refused, with why.
    let again = cli(&["runs", "kill", "--store", store, &id]);
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("is not in the journal"), "{stderr}");
}

fn sqlite_store(name: &str) -> String {
    format!("sqlite:{}", temp_dir(name).join("store.db").display())
}

#[test]
fn an_operator_kills_a_long_call_on_sqlite() {
    let store = sqlite_store("runs-kill-sqlite");
    let server = Server::start(&store, free_port(), LEASE);
    an_operator_ends_a_long_call(server.addr, &store, true);
}

#[test]
fn an_operator_cancels_a_long_call_on_sqlite() {
    let store = sqlite_store("runs-cancel-sqlite");
    let server = Server::start(&store, free_port(), LEASE);
    an_operator_ends_a_long_call(server.addr, &store, false);
}

/// Two workers on `backend`: the call runs on one, the other stays up (it must not take
/// the ended run over).
fn on_two_workers(backend: Backend, kill: bool) {
    if !backend.available() {
        return;
    }
    let store = backend.store_url(None);
    let a = Server::start(&store, free_port(), LEASE);
    let _b = Server::start(&store, free_port(), LEASE);
    an_operator_ends_a_long_call(a.addr, &store, kill);
}

#[test]
fn an_operator_kills_a_long_call_on_postgres() {
    on_two_workers(Backend::Postgres, true);
}

#[test]
fn an_operator_cancels_a_long_call_on_postgres() {
    on_two_workers(Backend::Postgres, false);
}

#[test]
fn an_operator_kills_a_long_call_on_redis() {
    on_two_workers(Backend::Redis, true);
}

#[test]
fn an_operator_cancels_a_long_call_on_redis() {
    on_two_workers(Backend::Redis, false);
}

#[test]
fn runs_list_refuses_an_age_it_cannot_read() {
    let store = sqlite_store("runs-age");
    let out = cli(&["runs", "list", "--store", &store, "--older-than", "soon"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a duration"));
}

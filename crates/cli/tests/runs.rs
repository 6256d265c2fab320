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
    if let Some((store, a, _b)) = shared(backend) {
        an_operator_ends_a_long_call(a.addr, &store, kill);
    }
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

/// A `steps` call through `session` on `addr`: `count` steps, each appending to `ledger`;
/// step `poison_at` fails (a retryable error, or with `crash` an aborted worker) while
/// `poison` exists.
fn poisoned_call(
    addr: SocketAddr,
    session: &str,
    id: u64,
    ledger: &std::path::Path,
    poison: &std::path::Path,
    crash: bool,
) -> (Response, String) {
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "_meta": {"progressToken": format!("p{id}")},
        "name": "steps", "arguments": {
            "count": 5, "step_ms": 10, "ledger": ledger.display().to_string(),
            "poison": poison.display().to_string(), "poison_at": 3, "poison_crash": crash}}});
    let mut response = post(addr, Some(session), &call);
    assert_eq!(response.status, 200);
    let priming = response.next_event().unwrap().0.expect("priming id");
    (response, priming)
}

/// The runs `runs list --state parked` shows, once there are `want`.
fn parked(store: &str, want: usize, mut meanwhile: impl FnMut()) -> Vec<Value> {
    let mut runs = Vec::new();
    wait_for("the run to be parked", Duration::from_secs(60), || {
        meanwhile();
        runs = listed(store, &["--state", "parked"]);
        runs.len() >= want
    });
    assert_eq!(runs.len(), want, "{runs:#?}");
    runs
}

/// The one outcome of request `id`: on its open stream, or where the client resumes it
/// (on `addr`) after that stream ended.
fn outcome(response: Response, addr: SocketAddr, session: &str, priming: &str, id: u64) -> Value {
    let mut last = priming.to_owned();
    let mut outcomes = Vec::new();
    for (event, message) in response.within(Duration::from_secs(30)).messages() {
        last = event;
        outcomes.extend((message["id"] == id).then_some(message));
    }
    if outcomes.is_empty() {
        outcomes.extend(
            resume(addr, session, &last)
                .within(Duration::from_secs(30))
                .messages()
                .into_iter()
                .map(|(_, message)| message)
                .filter(|message| message["id"] == id),
        );
    }
    assert_eq!(outcomes.len(), 1, "one outcome: {outcomes:#?}");
    outcomes.remove(0)
}

/// Each of `steps` ran exactly once (D8), and nothing else did.
fn ran_once(ledger: &std::path::Path, steps: std::ops::RangeInclusive<u32>) {
    let mut indices: Vec<u32> = ledger_lines(ledger).iter().map(|(i, _)| *i).collect();
    indices.sort_unstable();
    assert_eq!(indices, steps.collect::<Vec<_>>(), "each step once");
}

/// An operator retries `parked_run` (after the fix): the client gets the call's result, and the
/// steps before the poisoned one are replayed, not repeated (D8).
fn retried(
    store: &str,
    parked_run: &Value,
    poison: &std::path::Path,
    ledger: &std::path::Path,
) -> String {
    let id = parked_run["run_id"].as_str().unwrap().to_owned();
    ran_once(ledger, 1..=2);
    std::fs::remove_file(poison).unwrap();
    let action: Value = serde_json::from_str(&run(&[
        "runs", "retry", "--store", store, &id, "--reason", "fixed", "--json",
    ]))
    .unwrap();
    assert_eq!(action["action"], "retry");
    id
}

/// The call `id` answered with all five steps, each run once.
fn answered_after_retry(outcome: &Value, ledger: &std::path::Path) {
    assert_eq!(
        outcome["result"]["structuredContent"]["steps"],
        json!([1, 2, 3, 4, 5]),
        "{outcome:#}"
    );
    ran_once(ledger, 1..=5);
}

/// A handler error the handler marks as retryable parks the run; an operator retries it.
fn a_failed_run_is_retried(addr: SocketAddr, store: &str) {
    let dir = temp_dir("runs-retry");
    let (ledger, poison) = (dir.join("effects.ledger"), dir.join("payments.poison"));
    std::fs::write(&poison, "").unwrap();
    let session = initialize(addr);
    let (response, priming) = poisoned_call(addr, &session, 11, &ledger, &poison, false);
    let runs = parked(store, 1, || {});
    assert_eq!(runs[0]["parked"]["reason"], "retryable_error");
    let error = runs[0]["parked"]["error"].as_str().unwrap();
    assert!(error.contains("step 3 is poisoned"), "{error}");
    assert_eq!(
        runs[0]["owner"],
        Value::Null,
        "no worker holds a parked run"
    );
    // Kept, not re-run by itself.
    std::thread::sleep(Duration::from_millis(1_500));
    ran_once(&ledger, 1..=2);
    let id = retried(store, &runs[0], &poison, &ledger);
    answered_after_retry(&outcome(response, addr, &session, &priming, 11), &ledger);
    assert!(listed(store, &[]).is_empty(), "the run left the journal");
    assert_eq!(timeline(store, &id)["actions"][0]["action"], "retry");
}

/// A fresh store of `backend` and two workers on it; `None` when the service is missing.
fn shared(backend: Backend) -> Option<(String, Server, Server)> {
    if !backend.available() {
        return None;
    }
    let store = backend.store_url(None);
    let a = Server::start(&store, free_port(), LEASE);
    let b = Server::start(&store, free_port(), LEASE);
    Some((store, a, b))
}

#[test]
fn a_failed_run_is_retried_on_sqlite() {
    let store = sqlite_store("runs-retry-sqlite");
    let server = Server::start(&store, free_port(), LEASE);
    a_failed_run_is_retried(server.addr, &store);
}

#[test]
fn a_failed_run_is_retried_on_postgres() {
    if let Some((store, a, _b)) = shared(Backend::Postgres) {
        a_failed_run_is_retried(a.addr, &store);
    }
}

#[test]
fn a_failed_run_is_retried_on_redis() {
    if let Some((store, a, _b)) = shared(Backend::Redis) {
        a_failed_run_is_retried(a.addr, &store);
    }
}

/// Workers on one store that a poisoned tool kills: a dead one is started again, as a
/// supervisor (systemd, Kubernetes) would.
struct Workers {
    store: String,
    servers: Vec<Server>,
}

impl Workers {
    const ARGS: &[&str] = &["--lease-ms", "900", "--max-attempts", "2"];

    fn start(store: &str, count: usize) -> Workers {
        Workers {
            store: store.to_owned(),
            servers: (0..count)
                .map(|_| Server::start(store, free_port(), Self::ARGS))
                .collect(),
        }
    }

    /// Starts again each worker that died; how many did.
    fn revive(&mut self) -> usize {
        let mut revived = 0;
        for server in &mut self.servers {
            if server.child.try_wait().unwrap().is_some() {
                *server = Server::start(&self.store, free_port(), Self::ARGS);
                revived += 1;
            }
        }
        revived
    }

    fn addr(&self) -> SocketAddr {
        self.servers[0].addr
    }
}

/// A run that kills its worker each time it runs is parked after `--max-attempts` (2),
/// while its workers are restarted; after the fix, an operator retries it.
fn a_run_that_kills_its_worker_is_parked(mut workers: Workers) {
    let store = workers.store.clone();
    let dir = temp_dir("runs-poison");
    let (ledger, poison) = (dir.join("effects.ledger"), dir.join("release.poison"));
    std::fs::write(&poison, "").unwrap();
    let addr = workers.addr();
    let session = initialize(addr);
    let (response, priming) = poisoned_call(addr, &session, 12, &ledger, &poison, true);
    let mut deaths = 0;
    let runs = parked(&store, 1, || deaths += workers.revive());
    assert!(
        deaths >= 2,
        "it killed its worker on each of its 2 attempts"
    );
    assert_eq!(runs[0]["parked"]["reason"], "too_many_failures");
    assert_eq!(runs[0]["failures"], 2, "{runs:#?}");
    // Parked: the workers stay up.
    std::thread::sleep(Duration::from_millis(2_000));
    assert_eq!(workers.revive(), 0, "a parked run is not run again");

    // Its timeline: its two attempts each lost their worker (the claim that parked it ran
    // nothing, and is no attempt); the two steps before the poisoned one were committed
    // once, by the first attempt, with how long they ran; their progress is on the stream.
    let id = runs[0]["run_id"].as_str().unwrap();
    let shown = timeline(&store, id);
    let attempts = shown["run"]["attempts"].as_array().unwrap();
    let endings: Vec<&str> = attempts
        .iter()
        .map(|attempt| attempt["ended"]["how"].as_str().unwrap())
        .collect();
    assert_eq!(endings, ["lease_lost", "lease_lost"], "{shown:#}");
    assert_eq!(shown["run"]["attempt"], 2, "{shown:#}");
    let steps: Vec<&Value> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|step| step["kind"] == "step")
        .collect();
    assert_eq!(steps.len(), 2, "{shown:#}");
    for (step, name) in steps.iter().zip(["step-1", "step-2"]) {
        assert_eq!(step["name"], name);
        assert_eq!(step["attempt"], 1);
        assert_eq!(step["worker"], attempts[0]["worker"]);
        assert!(step["ms"].as_u64().unwrap() >= 10, "{step:#}");
    }
    let progress = shown["stream"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 2, "{shown:#}");

    retried(&store, &runs[0], &poison, &ledger);
    answered_after_retry(
        &outcome(response, workers.addr(), &session, &priming, 12),
        &ledger,
    );
    // Finished: the journal entry is gone; the stream keeps the outcome.
    let shown = timeline(&store, id);
    assert_eq!(shown["in_journal"], false);
    assert_eq!(shown["stream"]["state"], "finished", "{shown:#}");
    let last = shown["stream"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    assert_eq!(
        (last["kind"].as_str(), &last["error"]),
        (Some("outcome"), &Value::Null)
    );
}

/// `runs show ID --json`.
fn timeline(store: &str, id: &str) -> Value {
    serde_json::from_str(&run(&["runs", "show", "--store", store, id, "--json"])).unwrap()
}

#[test]
fn a_run_that_kills_its_worker_is_parked_on_sqlite() {
    let store = sqlite_store("runs-poison-sqlite");
    a_run_that_kills_its_worker_is_parked(Workers::start(&store, 1));
}

#[test]
fn a_run_that_kills_its_worker_is_parked_on_postgres() {
    if Backend::Postgres.available() {
        let store = Backend::Postgres.store_url(None);
        a_run_that_kills_its_worker_is_parked(Workers::start(&store, 2));
    }
}

#[test]
fn a_run_that_kills_its_worker_is_parked_on_redis() {
    if Backend::Redis.available() {
        let store = Backend::Redis.store_url(None);
        a_run_that_kills_its_worker_is_parked(Workers::start(&store, 2));
    }
}

/// `runs purge --dry-run` lists the parked runs and changes nothing; `runs purge` ends
/// exactly those, and their clients read why.
fn purge_removes_what_it_listed(addr: SocketAddr, store: &str) {
    let dir = temp_dir("runs-purge");
    let poison = dir.join("payments.poison");
    std::fs::write(&poison, "").unwrap();
    let session = initialize(addr);
    let calls: Vec<(Response, String)> = (0..2)
        .map(|n| {
            let ledger = dir.join(format!("call-{n}.ledger"));
            poisoned_call(addr, &session, 20 + n, &ledger, &poison, false)
        })
        .collect();
    parked(store, 2, || {});
    // A running call, which the default `--state parked` leaves alone.
    let long = json!({"jsonrpc": "2.0", "id": 30, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 500, "step_ms": 40}}});
    let _running = post(addr, Some(&session), &long);
    wait_for("the long call to run", Duration::from_secs(10), || {
        listed(store, &["--state", "running"]).len() == 1
    });
    // What a dry run must leave as it is (a live lease is renewed meanwhile).
    let journal = || -> Vec<Value> {
        let mut runs = listed(store, &[]);
        for run in &mut runs {
            run.as_object_mut().unwrap().remove("lease_until_ms");
        }
        runs
    };
    let before = journal();
    assert_eq!(before.len(), 3, "{before:#?}");

    let purge = |extra: &[&str]| -> Vec<Value> {
        let mut args = vec!["runs", "purge", "--store", store, "--json", "--by", "ops"];
        args.extend_from_slice(extra);
        run(&args)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    assert!(purge(&["--dry-run", "--older-than", "1h"]).is_empty());
    let listed_ids = |runs: &[Value], field: &str| -> Vec<String> {
        let mut ids: Vec<String> = runs
            .iter()
            .map(|run| run[field].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let would = purge(&["--dry-run"]);
    assert_eq!(would.len(), 2, "{would:#?}");
    assert!(would.iter().all(|run| run["parked"].is_object()));
    assert_eq!(journal(), before, "--dry-run changed nothing");

    let purged = purge(&["--reason", "a bad release"]);
    assert!(purged.iter().all(|action| action["action"] == "purge"));
    assert_eq!(listed_ids(&purged, "run_id"), listed_ids(&would, "run_id"));
    let left = listed(store, &[]);
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(left[0]["request_id"], 30, "the running call is left alone");

    for (n, (response, priming)) in calls.into_iter().enumerate() {
        let id = 20 + n as u64;
        let error = outcome(response, addr, &session, &priming, id)["error"].clone();
        assert_eq!(
            error["message"], "the request was purged by an operator: a bad release",
            "{error:#}"
        );
    }
}

#[test]
fn purge_removes_what_it_listed_on_sqlite() {
    let store = sqlite_store("runs-purge-sqlite");
    let server = Server::start(&store, free_port(), LEASE);
    purge_removes_what_it_listed(server.addr, &store);
}

#[test]
fn purge_removes_what_it_listed_on_postgres() {
    if let Some((store, a, _b)) = shared(Backend::Postgres) {
        purge_removes_what_it_listed(a.addr, &store);
    }
}

#[test]
fn purge_removes_what_it_listed_on_redis() {
    if let Some((store, a, _b)) = shared(Backend::Redis) {
        purge_removes_what_it_listed(a.addr, &store);
    }
}

/// `tasks cancel` of a long task running on `addr`, through `store`: the task is
/// `cancelled` when the command returns (as after a client's `tasks/cancel`), with the
/// operator's words; its run stops (the ledger stops growing); a second cancel is refused
/// as the spec refuses one of a task in a terminal status.
fn an_operator_cancels_a_task(addr: SocketAddr, store: &str) {
    let dir = temp_dir("tasks-cancel");
    let ledger = dir.join("effects.ledger");
    let session = initialize(addr);
    let call = json!({"jsonrpc": "2.0", "id": 40, "method": "tools/call", "params": {
        "name": "steps", "task": {"ttl": 60_000},
        "arguments": {"count": 500, "step_ms": 40, "ledger": ledger.display().to_string()}}});
    let created = post(addr, Some(&session), &call).messages();
    let task_id = created.last().unwrap().1["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for("the task's steps to run", Duration::from_secs(10), || {
        ledger_lines(&ledger).len() >= 3
    });
    let tasks: Vec<Value> = run(&[
        "tasks", "list", "--store", store, "--status", "working", "--json",
    ])
    .lines()
    .map(|line| serde_json::from_str(line).unwrap())
    .collect();
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    assert_eq!(tasks[0]["task_id"], task_id.as_str());
    let runs = listed(store, &["--tool", "steps"]);
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["task_id"], task_id.as_str());
    assert_eq!(
        tasks[0]["run_id"], runs[0]["run_id"],
        "the task names its run"
    );

    let action: Value = serde_json::from_str(&run(&[
        "tasks",
        "cancel",
        "--store",
        store,
        &task_id,
        "--reason",
        "wrong input",
        "--json",
    ]))
    .unwrap();
    assert_eq!(action["action"], "cancel");
    let got = post(
        addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 41, "method": "tasks/get", "params": {"taskId": task_id}}),
    );
    let got = last_message(got);
    assert_eq!(got["result"]["status"], "cancelled", "{got:#}");
    assert_eq!(
        got["result"]["statusMessage"],
        "the request was cancelled by an operator: wrong input"
    );

    // Its run stops within a heartbeat: at most the step in flight then finishes.
    std::thread::sleep(Duration::from_millis(1_000));
    let after = ledger_lines(&ledger).len();
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        ledger_lines(&ledger).len() <= after + 1,
        "the task's run went on"
    );

    let again = cli(&["tasks", "cancel", "--store", store, &task_id]);
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("is already cancelled"), "{stderr}");
    let shown: Value = serde_json::from_str(&run(&[
        "tasks", "show", "--store", store, &task_id, "--json",
    ]))
    .unwrap();
    assert_eq!(shown["task"]["status"], "cancelled");
    assert_eq!(
        shown["timeline"]["actions"][0]["reason"], "wrong input",
        "{shown:#}"
    );
    let missing = cli(&["tasks", "cancel", "--store", store, "no-such-task"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("is not in the store"));
}

#[test]
fn an_operator_cancels_a_task_on_sqlite() {
    let store = sqlite_store("tasks-cancel-sqlite");
    let server = Server::start(&store, free_port(), LEASE);
    an_operator_cancels_a_task(server.addr, &store);
}

#[test]
fn an_operator_cancels_a_task_on_postgres() {
    if let Some((store, a, _b)) = shared(Backend::Postgres) {
        an_operator_cancels_a_task(a.addr, &store);
    }
}

#[test]
fn an_operator_cancels_a_task_on_redis() {
    if let Some((store, a, _b)) = shared(Backend::Redis) {
        an_operator_cancels_a_task(a.addr, &store);
    }
}

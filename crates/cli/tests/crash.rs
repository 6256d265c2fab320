//! D6–D9 end to end with the real binary: a journaled tool call survives SIGKILL of the
//! worker running it. On SQLite the worker is restarted on the same file (and resumes its
//! own runs at once); on PostgreSQL, Redis and a Redis Cluster a second worker takes the run
//! over when the dead worker's lease expires. The client resumes with `GET` + `Last-Event-ID`.
//!
//! The `steps` fixture appends `<index> <idempotency key>` to a ledger file the test owns
//! before sleeping in each step: the ledger is the external effect counter.
//!
//! The stores come from `DATABASE_URL` / `REDIS_URL` / `REDIS_CLUSTER_URL`; outside CI a
//! missing service skips with a printed reason, in CI (`durable_mcp_store::in_ci`) it fails.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

const LEASE: &[&str] = &["--lease-ms", "1500"];

/// Where the crashed run is resumed.
enum Target {
    /// SQLite: the same worker, restarted on the same file and port.
    Restart(String),
    /// A shared store: worker B takes over.
    Takeover(Backend),
}

struct Cluster {
    store: String,
    a: Server,
    a_port: u16,
    b: Option<Server>,
    restart: bool,
}

impl Cluster {
    fn new(target: &Target) -> Option<Cluster> {
        let (store, restart) = match target {
            Target::Restart(store) => (store.clone(), true),
            Target::Takeover(backend) => {
                if !backend.available() {
                    return None;
                }
                (backend.store_url(None), false)
            }
        };
        let a_port = free_port();
        let a = Server::start(&store, a_port, LEASE);
        let b = (!restart).then(|| Server::start(&store, free_port(), LEASE));
        Some(Cluster {
            store,
            a,
            a_port,
            b,
            restart,
        })
    }

    /// SIGKILL worker A. SQLite: start it again on the same file and port. Shared store:
    /// B (which takes the run over) becomes A, and a fresh worker becomes B. Returns the
    /// address to resume on (the new A).
    fn crash(&mut self) -> SocketAddr {
        self.a.kill();
        if self.restart {
            self.a = Server::start(&self.store, self.a_port, LEASE);
        } else {
            let survivor = self.b.take().unwrap();
            self.a_port = survivor.addr.port();
            self.a = survivor;
            self.b = Some(Server::start(&self.store, free_port(), LEASE));
        }
        self.a.addr
    }
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A four-step tool killed after step 2 committed and during step 3.
fn four_steps_killed_during_step_three(target: Target) {
    let Some(mut cluster) = Cluster::new(&target) else {
        return;
    };
    let dir = temp_dir("crash-steps");
    let ledger = dir.join("effects.ledger");
    let session = initialize(cluster.a.addr);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 4, "step_ms": 800, "ledger": ledger.display().to_string()},
        "_meta": {"progressToken": "t"}}});
    let mut response = post(cluster.a.addr, Some(&session), &call);
    assert_eq!(response.status, 200);
    let mut seen = Vec::new();
    let mut last = response.next_event().unwrap().0.expect("priming id");
    // Progress 2 is sent after step 2 committed.
    while !seen.iter().any(|m: &Value| m["params"]["progress"] == 2.0) {
        let (id, data) = response.next_event().expect("event before the crash");
        last = id.unwrap();
        seen.push(serde_json::from_str(&data).unwrap());
    }
    drop(response);
    // Step 3's effect is in the ledger: the worker is inside step 3 (sleeping 800 ms).
    wait_for("step 3 to start", Duration::from_secs(10), || {
        ledger_lines(&ledger).iter().any(|(i, _)| *i == 3)
    });
    let killed = Instant::now();
    let resume_on = cluster.crash();

    let resumed = resume(resume_on, &session, &last);
    assert_eq!(
        resumed.status, 200,
        "D3/D4: the stream resumes after the crash"
    );
    let rest: Vec<Value> = resumed.messages().into_iter().map(|(_, m)| m).collect();
    let recovery = killed.elapsed();
    let all: Vec<&Value> = seen.iter().chain(&rest).collect();
    let results: Vec<&&Value> = all.iter().filter(|m| m["id"] == 7).collect();
    assert_eq!(results.len(), 1, "D7: exactly one outcome: {all:#?}");
    assert_eq!(
        results[0]["result"]["structuredContent"]["steps"],
        json!([1, 2, 3, 4]),
        "{:#}",
        results[0]
    );
    let progress: Vec<f64> = all
        .iter()
        .filter_map(|m| m["params"]["progress"].as_f64())
        .collect();
    assert_eq!(
        progress,
        vec![1.0, 2.0, 3.0, 4.0],
        "progress is not repeated by the re-run"
    );

    let mut by_step: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (index, key) in ledger_lines(&ledger) {
        by_step.entry(index).or_default().push(key);
    }
    assert_eq!(
        by_step[&1].len(),
        1,
        "D8: committed step 1 ran once: {by_step:?}"
    );
    assert_eq!(
        by_step[&2].len(),
        1,
        "D8: committed step 2 ran once: {by_step:?}"
    );
    assert!(
        (1..=2).contains(&by_step[&3].len()),
        "step 3 ran at most twice: {by_step:?}"
    );
    assert!(
        by_step[&3].iter().all(|k| k == &by_step[&3][0]),
        "D8: the same idempotency key each time: {by_step:?}"
    );
    assert_eq!(by_step[&4].len(), 1, "step 4 ran once: {by_step:?}");
    let keys: std::collections::BTreeSet<&String> = by_step.values().flatten().collect();
    assert_eq!(keys.len(), 4, "one key per step");
    eprintln!(
        "recovered and finished {:?} after the kill (lease 1.5 s, 1.6 s of steps left)",
        recovery
    );
}

/// D6 in the words "journaled before its first effect", with D7 and D8: a call killed
/// inside its first step, before the step committed, was journaled before the step
/// started, and its client holds the stream's priming event: the call runs again to its
/// one outcome, the interrupted step with the same idempotency key.
fn killed_in_its_first_step(target: Target) {
    let Some(mut cluster) = Cluster::new(&target) else {
        return;
    };
    let dir = temp_dir("crash-first-step");
    let ledger = dir.join("effects.ledger");
    let session = initialize(cluster.a.addr);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 2, "step_ms": 800, "ledger": ledger.display().to_string()}}});
    let mut response = post(cluster.a.addr, Some(&session), &call);
    assert_eq!(response.status, 200);
    let priming = response.next_event().unwrap().0.expect("priming id");
    wait_for("step 1 to start", Duration::from_secs(10), || {
        ledger_lines(&ledger).iter().any(|(i, _)| *i == 1)
    });
    drop(response);
    let resume_on = cluster.crash();

    let resumed = resume(resume_on, &session, &priming);
    assert_eq!(resumed.status, 200, "the stream resumes after the crash");
    let messages: Vec<Value> = resumed.messages().into_iter().map(|(_, m)| m).collect();
    let results: Vec<&Value> = messages.iter().filter(|m| m["id"] == 7).collect();
    assert_eq!(results.len(), 1, "D7: exactly one outcome: {messages:#?}");
    assert_eq!(
        results[0]["result"]["structuredContent"]["steps"],
        json!([1, 2]),
        "{:#}",
        results[0]
    );
    let first: Vec<String> = ledger_lines(&ledger)
        .into_iter()
        .filter(|(i, _)| *i == 1)
        .map(|(_, key)| key)
        .collect();
    assert_eq!(first.len(), 2, "the interrupted step ran again: {first:?}");
    assert_eq!(first[0], first[1], "D8: with the same idempotency key");
}

fn ask(addr: SocketAddr, session: &str, id: u64, question: &str, then_ms: u64) -> Response {
    post(
        addr,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "ask", "arguments": {"question": question, "then_ms": then_ms}}}),
    )
}

fn answer(addr: SocketAddr, session: &str, wire_id: &Value, text: &str) {
    let reply = json!({"jsonrpc": "2.0", "id": wire_id, "result": {"action": "accept", "content": {"answer": text}}});
    assert_eq!(post(addr, Some(session), &reply).status, 202);
}

/// Read events until the elicitation request; returns (last event id, its JSON-RPC id).
fn read_question(response: &mut Response) -> (String, Value) {
    loop {
        let (id, data) = response.next_event().expect("the question");
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&data).unwrap();
        if message["method"] == "elicitation/create" {
            return (id.unwrap(), message["id"].clone());
        }
    }
}

/// D9: an answer committed before the crash is not asked again; a question pending at the
/// crash is asked again (same id) and its answer, even sent to another worker, is used.
fn questions_survive_a_crash(target: Target) {
    let Some(mut cluster) = Cluster::new(&target) else {
        return;
    };
    let session = initialize(cluster.a.addr);

    // 1. Answered before the crash (the run is in its 1.5 s wait when killed).
    let mut response = ask(cluster.a.addr, &session, 11, "colour?", 1_500);
    let (last, wire) = read_question(&mut response);
    answer(cluster.a.addr, &session, &wire, "blue");
    drop(response);
    std::thread::sleep(Duration::from_millis(300));
    let resume_on = cluster.crash();
    let rest: Vec<Value> = resume(resume_on, &session, &last)
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert!(
        !rest.iter().any(|m| m["method"] == "elicitation/create"),
        "D9: not asked again: {rest:#?}"
    );
    let results: Vec<&Value> = rest.iter().filter(|m| m["id"] == 11).collect();
    assert_eq!(results.len(), 1, "{rest:#?}");
    assert_eq!(results[0]["result"]["content"][0]["text"], "blue");

    // 2. Pending at the crash: asked again after recovery, with the same id; the answer
    // is sent to whichever worker serves the session now.
    let session = initialize(cluster.a.addr);
    let mut response = ask(cluster.a.addr, &session, 12, "size?", 0);
    let (last, wire) = read_question(&mut response);
    drop(response);
    let resume_on = cluster.crash();
    let mut resumed = resume(resume_on, &session, &last);
    assert_eq!(resumed.status, 200);
    let (_, asked_again) = read_question(&mut resumed);
    assert_eq!(
        asked_again, wire,
        "D9: asked again with the same request id"
    );
    answer(resume_on, &session, &wire, "large");
    let rest: Vec<Value> = resumed.messages().into_iter().map(|(_, m)| m).collect();
    let results: Vec<&Value> = rest.iter().filter(|m| m["id"] == 12).collect();
    assert_eq!(results.len(), 1, "{rest:#?}");
    assert_eq!(results[0]["result"]["content"][0]["text"], "large");
}

/// D7 with an ordinary handler (no durable context): `emit_events` killed after the
/// client saw progress 10 of 40 is run again from the top on recovery. The re-run's
/// progress up to what the stream already committed, and its log lines already committed,
/// are not sent again: across the crash the client sees each progress value once,
/// strictly increasing (utilities/progress), each log line once, and one result.
fn rerun_progress_never_goes_backwards(target: Target) {
    const COUNT: u64 = 40;
    let Some(mut cluster) = Cluster::new(&target) else {
        return;
    };
    let session = initialize(cluster.a.addr);
    let call = json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {
        "name": "emit_events", "arguments": {"count": COUNT, "interval_ms": 100}, "_meta": {"progressToken": "rerun"}}});
    let mut response = post(cluster.a.addr, Some(&session), &call);
    assert_eq!(response.status, 200);
    let mut last = response.next_event().unwrap().0.expect("priming id");
    let mut seen: Vec<(String, Value)> = Vec::new();
    while !seen.iter().any(|(_, m)| m["params"]["progress"] == 10.0) {
        let (id, data) = response.next_event().expect("event before the crash");
        last = id.unwrap();
        seen.push((last.clone(), serde_json::from_str(&data).unwrap()));
    }
    drop(response);
    let resume_on = cluster.crash();
    let resumed = resume(resume_on, &session, &last);
    assert_eq!(
        resumed.status, 200,
        "D3: the stream resumes after the crash"
    );
    let rest = resumed.messages();
    let all: Vec<&Value> = seen.iter().chain(&rest).map(|(_, m)| m).collect();

    assert_events_sent_once(&all, "rerun", COUNT);
    let results: Vec<&&Value> = all.iter().filter(|m| m["id"] == 21).collect();
    assert_eq!(results.len(), 1, "D7: exactly one outcome");
    assert_eq!(
        results[0]["result"]["content"][0]["text"],
        COUNT.to_string()
    );
    assert_eq!(all.last().unwrap()["id"], 21, "the result comes last");
    let ids: std::collections::BTreeSet<&String> =
        seen.iter().chain(&rest).map(|(id, _)| id).collect();
    assert_eq!(ids.len(), seen.len() + rest.len(), "no duplicate event ids");
}

fn sqlite_target(name: &str) -> Target {
    Target::Restart(format!(
        "sqlite:{}",
        temp_dir(name).join("store.db").display()
    ))
}

#[test]
fn d8_sqlite_four_steps_killed_during_step_three() {
    four_steps_killed_during_step_three(sqlite_target("crash-sqlite"));
}

#[test]
fn d8_postgres_four_steps_killed_during_step_three() {
    four_steps_killed_during_step_three(Target::Takeover(Backend::Postgres));
}

#[test]
fn d8_redis_four_steps_killed_during_step_three() {
    four_steps_killed_during_step_three(Target::Takeover(Backend::Redis));
}

#[test]
fn d8_redis_cluster_four_steps_killed_during_step_three() {
    four_steps_killed_during_step_three(Target::Takeover(Backend::RedisCluster));
}

#[test]
fn d6_sqlite_killed_in_its_first_step_a_call_runs_again() {
    killed_in_its_first_step(sqlite_target("crash-first-sqlite"));
}

#[test]
fn d6_postgres_killed_in_its_first_step_a_call_runs_again() {
    killed_in_its_first_step(Target::Takeover(Backend::Postgres));
}

#[test]
fn d6_redis_killed_in_its_first_step_a_call_runs_again() {
    killed_in_its_first_step(Target::Takeover(Backend::Redis));
}

#[test]
fn d9_sqlite_questions_survive_a_crash() {
    questions_survive_a_crash(sqlite_target("crash-ask-sqlite"));
}

#[test]
fn d9_postgres_questions_survive_a_crash() {
    questions_survive_a_crash(Target::Takeover(Backend::Postgres));
}

#[test]
fn d9_redis_questions_survive_a_crash() {
    questions_survive_a_crash(Target::Takeover(Backend::Redis));
}

#[test]
fn d9_redis_cluster_questions_survive_a_crash() {
    questions_survive_a_crash(Target::Takeover(Backend::RedisCluster));
}

#[test]
fn d7_sqlite_rerun_progress_never_goes_backwards() {
    rerun_progress_never_goes_backwards(sqlite_target("crash-rerun-sqlite"));
}

#[test]
fn d7_postgres_rerun_progress_never_goes_backwards() {
    rerun_progress_never_goes_backwards(Target::Takeover(Backend::Postgres));
}

#[test]
fn d7_redis_rerun_progress_never_goes_backwards() {
    rerun_progress_never_goes_backwards(Target::Takeover(Backend::Redis));
}

/// D6: a legacy client that re-sends a request with the same id in the same session (it
/// never saw an event id) is attached to the existing run and gets its one outcome.
#[test]
fn d6_resent_request_attaches_to_its_run() {
    let dir = temp_dir("resend");
    let ledger = dir.join("resend.ledger");
    let server = Server::start(
        &format!("sqlite:{}", dir.join("store.db").display()),
        free_port(),
        LEASE,
    );
    let session = initialize(server.addr);
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 2, "step_ms": 300, "ledger": ledger.display().to_string()}}});
    let first = post(server.addr, Some(&session), &call);
    drop(first);
    let again = post(server.addr, Some(&session), &call).messages();
    let results: Vec<&Value> = again
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m["id"] == 5)
        .collect();
    assert_eq!(results.len(), 1);
    assert_eq!(
        results[0]["result"]["structuredContent"]["steps"],
        json!([1, 2])
    );
    assert_eq!(ledger_lines(&ledger).len(), 2, "the tool ran once");
    let third = post(server.addr, Some(&session), &call).messages();
    assert_eq!(
        third
            .iter()
            .map(|(_, m)| m)
            .filter(|m| m["id"] == 5)
            .count(),
        1,
        "after the run ended too"
    );
    assert_eq!(ledger_lines(&ledger).len(), 2);
}

/// D7, graceful shutdown: SIGTERM with no grace period gives the running request's lease
/// back, so the other worker resumes it well before the lease would have expired.
fn graceful_shutdown_hands_runs_over(backend: Backend) {
    const LEASE_MS: u64 = 10_000;
    let Some((mut a, b)) = two_workers(
        backend,
        &["--lease-ms", "10000", "--shutdown-grace-secs", "0"],
    ) else {
        return;
    };
    let dir = temp_dir("graceful");
    let ledger = dir.join("graceful.ledger");
    let session = initialize(a.addr);
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 3, "step_ms": 1_000, "ledger": ledger.display().to_string()},
        "_meta": {"progressToken": "g"}}});
    let mut response = post(a.addr, Some(&session), &call);
    response.next_event().expect("priming");
    let last = loop {
        let (id, data) = response.next_event().expect("progress 1");
        if serde_json::from_str::<Value>(&data).unwrap()["params"]["progress"] == 1.0 {
            break id.unwrap();
        }
    };
    drop(response);
    let stopped = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &a.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let _ = a.child.wait();
    let rest: Vec<Value> = resume(b.addr, &session, &last)
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let took = stopped.elapsed();
    let results: Vec<&Value> = rest.iter().filter(|m| m["id"] == 9).collect();
    assert_eq!(results.len(), 1, "{rest:#?}");
    assert_eq!(
        results[0]["result"]["structuredContent"]["steps"],
        json!([1, 2, 3])
    );
    // With the hand-over B resumes within its next recovery pass (1 s), then runs 2 s of
    // steps; without it, B would first wait for the 10 s lease (renewed every 3.3 s) to
    // expire: at least 6.7 s.
    assert!(
        took < Duration::from_millis(LEASE_MS * 6 / 10),
        "finished {took:?} after SIGTERM: the lease was not handed over"
    );
    let lines = ledger_lines(&ledger);
    assert_eq!(
        lines.iter().filter(|(i, _)| *i == 1).count(),
        1,
        "{lines:?}"
    );
    eprintln!("graceful hand-over: finished {took:?} after SIGTERM (2 s of steps left)");
}

#[test]
fn d7_postgres_graceful_shutdown_hands_runs_over() {
    graceful_shutdown_hands_runs_over(Backend::Postgres);
}

#[test]
fn d7_redis_graceful_shutdown_hands_runs_over() {
    graceful_shutdown_hands_runs_over(Backend::Redis);
}

//! The randomised fault test (D3, D6, D7, D8, D10): many concurrent multi-step tool calls
//! against several workers while workers are killed with SIGKILL at random moments and
//! restarted. A third of the calls run as 2025-11-25 tasks: the client gets the task from
//! the call (re-sending the call attaches to the same task) and its result with
//! `tasks/result` (resumed with `Last-Event-ID` when the worker relaying it dies). A
//! checker then verifies the whole history:
//!
//! - every accepted call got exactly one outcome, and it is the right one (for a task:
//!   one create result, then one result of that task);
//! - no committed step ran twice (each call's ledger of step effects is in step order, one
//!   idempotency key per step, every step present);
//! - no event was lost or duplicated on any stream (the events a client received across
//!   all its reconnections are the stream's sequence 1..n, each once), and no progress
//!   notification was repeated by a re-run.
//!
//! It prints the counts (calls, kills, interrupted calls, re-run steps, violations) and the
//! recovery time after a disconnect (median, worst). SQLite runs one worker that is
//! killed and restarted on its file; PostgreSQL and Redis run three workers sharing the
//! store. `CHAOS_SECS` bounds each run (default 15, 45 in CI, `durable_mcp_store::in_ci`); `CHAOS_SEED` replays
//! a schedule.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

const LEASE_MS: &str = "2000";
const CLIENTS: usize = 6;

/// xorshift64*: a small deterministic generator, so a failing schedule can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

struct Worker {
    port: u16,
    server: Mutex<Option<Server>>,
}

struct Fleet {
    store: String,
    workers: Vec<Worker>,
}

impl Fleet {
    fn start(store: String, n: usize) -> Arc<Fleet> {
        let workers = (0..n)
            .map(|_| {
                let port = free_port();
                Worker {
                    port,
                    server: Mutex::new(Some(Server::start(
                        &store,
                        port,
                        &["--lease-ms", LEASE_MS],
                    ))),
                }
            })
            .collect();
        Arc::new(Fleet { store, workers })
    }

    fn addr(&self, i: usize) -> SocketAddr {
        format!("127.0.0.1:{}", self.workers[i % self.workers.len()].port)
            .parse()
            .unwrap()
    }
}

/// What one client saw of one request, across its reconnections.
struct Exchange {
    id: u64,
    events: Vec<(String, Value)>,
    completed: bool,
    disconnects: usize,
    recoveries: Vec<Duration>,
}

/// One `steps` call: answered directly, or (every third call) run as a 2025-11-25 task
/// whose result is fetched with `tasks/result`.
struct Call {
    id: u64,
    count: u64,
    ledger: PathBuf,
    /// The `tools/call` (for a task, its outcome is the create result).
    call: Exchange,
    /// For a task: the `tasks/result` exchange.
    result: Option<Exchange>,
}

fn try_post(addr: SocketAddr, session: &str, body: &Value) -> Option<Response> {
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-session-id", session),
    ];
    try_request(addr, "POST", &headers, Some(&body.to_string())).ok()
}

fn try_resume(addr: SocketAddr, session: &str, last: &str) -> Option<Response> {
    try_request(
        addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", session),
            ("last-event-id", last),
        ],
        None,
    )
    .ok()
}

fn try_initialize(fleet: &Fleet, rng: &mut Rng) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "no worker would initialize a session"
        );
        let addr = fleet.addr(rng.next() as usize);
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "chaos", "version": "1"}}});
        let headers = [
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
        ];
        if let Ok(response) = try_request(addr, "POST", &headers, Some(&body.to_string()))
            && response.status == 200
            && let Some(session) = response.header("mcp-session-id").map(str::to_owned)
        {
            let _ = response.body();
            if try_post(
                addr,
                &session,
                &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .is_some_and(|r| r.status == 202)
            {
                return session;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run one call to its outcome through any live worker, resuming after every disconnect.
fn run_call(
    fleet: &Fleet,
    rng: &mut Rng,
    session: &str,
    id: u64,
    dir: &Path,
    give_up: Instant,
) -> Call {
    let count = rng.range(2, 5);
    let step_ms = rng.range(20, 250);
    let as_task = rng.range(1, 3) == 1;
    let ledger = dir.join(format!("call-{id}.ledger"));
    let mut body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": count, "step_ms": step_ms, "ledger": ledger.display().to_string()},
        "_meta": {"progressToken": id}}});
    if as_task {
        body["params"]["task"] = json!({"ttl": 600_000});
    }
    let call = run_request(fleet, rng, session, id, &body, give_up);
    let task_id = call
        .events
        .iter()
        .find(|(_, m)| m["id"] == id)
        .and_then(|(_, m)| m["result"]["task"]["taskId"].as_str());
    let result = match task_id {
        Some(task_id) if as_task => {
            let fetch = json!({"jsonrpc": "2.0", "id": id + 50_000, "method": "tasks/result", "params": {"taskId": task_id}});
            Some(run_request(
                fleet,
                rng,
                session,
                id + 50_000,
                &fetch,
                give_up,
            ))
        }
        _ => None,
    };
    Call {
        id,
        count,
        ledger,
        call,
        result,
    }
}

/// Run one request to its outcome through any live worker, resuming after every disconnect.
fn run_request(
    fleet: &Fleet,
    rng: &mut Rng,
    session: &str,
    id: u64,
    body: &Value,
    give_up: Instant,
) -> Exchange {
    let mut call = Exchange {
        id,
        events: Vec::new(),
        completed: false,
        disconnects: 0,
        recoveries: Vec::new(),
    };
    let mut disconnected_at: Option<Instant> = None;
    while !call.completed && Instant::now() < give_up {
        let addr = fleet.addr(rng.next() as usize);
        // Until an event id was seen, the request itself is re-sent (same id: it attaches to
        // its run, D6); afterwards the stream is resumed with Last-Event-ID (D3).
        let response = match call.events.last() {
            None => try_post(addr, session, body),
            Some((last, _)) => try_resume(addr, session, last),
        };
        let Some(mut response) = response.filter(|r| r.status == 200) else {
            std::thread::sleep(Duration::from_millis(30));
            continue;
        };
        while let Some((event_id, data)) = response.next_event() {
            if let Some(since) = disconnected_at.take() {
                call.recoveries.push(since.elapsed());
            }
            let message = if data.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&data).unwrap()
            };
            if message["id"] == id {
                call.completed = true;
            }
            call.events.push((event_id.unwrap_or_default(), message));
        }
        if !call.completed {
            call.disconnects += 1;
            disconnected_at.get_or_insert_with(Instant::now);
        }
    }
    call
}

#[derive(Default)]
struct Verdict {
    violations: Vec<String>,
    rerun_steps: usize,
}

/// One request's history: exactly one outcome (returned), on one stream whose events
/// arrived as the sequence 1..n, each once.
fn check_exchange<'a>(exchange: &'a Exchange, fail: &mut impl FnMut(String)) -> Option<&'a Value> {
    let id = exchange.id;
    if !exchange.completed {
        fail(format!("request {id}: no outcome"));
    }
    let results: Vec<&Value> = exchange
        .events
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m["id"] == id)
        .collect();
    if results.len() > 1 {
        fail(format!("request {id}: {} outcomes", results.len()));
    }
    let mut streams = BTreeSet::new();
    let mut seqs = Vec::new();
    for (event_id, _) in &exchange.events {
        match event_id.rsplit_once('_') {
            Some((stream, seq)) => {
                streams.insert(stream.to_owned());
                seqs.push(seq.parse::<u64>().unwrap_or(0));
            }
            None => fail(format!("event without an id: {event_id:?}")),
        }
    }
    if streams.len() > 1 {
        fail(format!("events from {} streams", streams.len()));
    }
    if seqs != (1..=seqs.len() as u64).collect::<Vec<_>>() {
        fail(format!(
            "request {id}: event sequence lost or duplicated: {seqs:?}"
        ));
    }
    results.first().copied()
}

/// A call's exchanges: the call, then its `tasks/result` if it ran as a task.
fn exchanges(call: &Call) -> Vec<&Exchange> {
    std::iter::once(&call.call)
        .chain(call.result.as_ref())
        .collect()
}

fn check(call: &Call, verdict: &mut Verdict) {
    let id = call.id;
    let mut fail = |what: String| verdict.violations.push(format!("call {id}: {what}"));
    let expected: Vec<u64> = (1..=call.count).collect();
    let outcome = check_exchange(&call.call, &mut fail);
    // A task's steps and progress arrive through tasks/result; the call's outcome is the
    // create result.
    let (outcome, events) = match (&call.result, outcome) {
        (Some(result), Some(created)) => {
            let task_id = created["result"]["task"]["taskId"].clone();
            let outcome = check_exchange(result, &mut fail);
            if let Some(outcome) = outcome
                && outcome["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
                    != task_id
            {
                fail(format!("tasks/result of another task: {outcome}"));
            }
            (outcome, &result.events)
        }
        (None, Some(created)) if created["result"].get("task").is_some() => {
            fail("a task whose result was never fetched".into());
            (None, &call.call.events)
        }
        _ => (outcome, &call.call.events),
    };
    if let Some(result) = outcome
        && result["result"]["structuredContent"]["steps"] != json!(expected)
    {
        fail(format!("wrong outcome {result}"));
    }
    let progress: Vec<u64> = events
        .iter()
        .filter_map(|(_, m)| m["params"]["progress"].as_f64())
        .map(|p| p as u64)
        .collect();
    if progress.iter().collect::<BTreeSet<_>>().len() != progress.len() {
        fail(format!("progress repeated: {progress:?}"));
    }
    // Ledger: in step order (a committed step re-run would appear after a later step), one
    // key per step, every step.
    let text = std::fs::read_to_string(&call.ledger).unwrap_or_default();
    let lines: Vec<(u64, String)> = text
        .lines()
        .filter_map(|l| {
            l.split_once(' ')
                .map(|(i, k)| (i.parse().unwrap_or(0), k.to_owned()))
        })
        .collect();
    if lines.windows(2).any(|w| w[1].0 < w[0].0) {
        fail(format!("a committed step ran again: {lines:?}"));
    }
    let mut keys: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for (index, key) in &lines {
        keys.entry(*index).or_default().insert(key.clone());
    }
    if keys.values().any(|k| k.len() != 1) {
        fail(format!("a step ran with two idempotency keys: {keys:?}"));
    }
    if outcome.is_some() && keys.keys().copied().collect::<Vec<_>>() != expected {
        fail(format!("steps missing from the ledger: {lines:?}"));
    }
    verdict.rerun_steps += lines.len().saturating_sub(keys.len());
}

/// The runs take turns: on a small machine, three at once would measure the machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn chaos(name: &str, store: String, workers: usize) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let secs: u64 = std::env::var("CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if durable_mcp_store::in_ci() { 45 } else { 15 });
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("chaos {name}: {secs} s, {workers} worker(s), {CLIENTS} clients, CHAOS_SEED={seed}");
    let dir = temp_dir(&format!("chaos-{name}"));
    let fleet = Fleet::start(store, workers);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(AtomicU64::new(0));

    let killer = {
        let (fleet, stop, kills) = (fleet.clone(), stop.clone(), kills.clone());
        let mut rng = Rng(seed.wrapping_mul(31) | 1);
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(rng.range(400, 2_500)));
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let victim = &fleet.workers[rng.next() as usize % fleet.workers.len()];
                let mut slot = victim.server.lock().unwrap();
                if let Some(mut server) = slot.take() {
                    server.kill();
                    kills.fetch_add(1, Ordering::SeqCst);
                }
                // Down for a moment, or long enough for its lease to expire (takeover).
                std::thread::sleep(Duration::from_millis(rng.range(0, 3_000)));
                *slot = Some(Server::start(
                    &fleet.store,
                    victim.port,
                    &["--lease-ms", LEASE_MS],
                ));
            }
        })
    };

    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (fleet, dir) = (fleet.clone(), dir.clone());
            let mut rng = Rng(seed.wrapping_add(c as u64 * 7_919) | 1);
            std::thread::spawn(move || {
                let session = try_initialize(&fleet, &mut rng);
                let mut calls = Vec::new();
                let mut n = 0;
                while Instant::now() < deadline {
                    n += 1;
                    let id = (c as u64 + 1) * 100_000 + n;
                    calls.push(run_call(
                        &fleet,
                        &mut rng,
                        &session,
                        id,
                        &dir,
                        deadline + Duration::from_secs(60),
                    ));
                }
                calls
            })
        })
        .collect();
    let calls: Vec<Call> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    stop.store(true, Ordering::SeqCst);
    killer.join().unwrap();

    let mut verdict = Verdict::default();
    for call in &calls {
        check(call, &mut verdict);
    }
    let interrupted = calls
        .iter()
        .filter(|c| exchanges(c).iter().any(|e| e.disconnects > 0))
        .count();
    let tasks = calls.iter().filter(|c| c.result.is_some()).count();
    let interrupted_relays = calls
        .iter()
        .filter(|c| c.result.as_ref().is_some_and(|r| r.disconnects > 0))
        .count();
    let mut recoveries: Vec<Duration> = calls
        .iter()
        .flat_map(exchanges)
        .flat_map(|e| e.recoveries.iter().copied())
        .collect();
    recoveries.sort();
    let median = recoveries
        .get(recoveries.len() / 2)
        .copied()
        .unwrap_or_default();
    let worst = recoveries.last().copied().unwrap_or_default();
    let summary = format!(
        "chaos {name}: {secs} s, seed {seed}: calls={} (as tasks: {tasks}) kills={} interrupted_calls={} (of them tasks/result: {interrupted_relays}) recovered={} rerun_steps={} violations={} \
         recovery_after_disconnect median={} ms worst={} ms (n={})",
        calls.len(),
        kills.load(Ordering::SeqCst),
        interrupted,
        calls
            .iter()
            .filter(|c| {
                let all = exchanges(c);
                all.iter().any(|e| e.disconnects > 0) && all.iter().all(|e| e.completed)
            })
            .count(),
        verdict.rerun_steps,
        verdict.violations.len(),
        median.as_millis(),
        worst.as_millis(),
        recoveries.len(),
    );
    eprintln!("{summary}");
    // Also kept beside the build output, so that CI can print it after a captured run.
    let report_dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let _ = std::fs::write(
        report_dir.join(format!("chaos-{name}.txt")),
        format!("{summary}\n"),
    );
    for violation in verdict.violations.iter().take(20) {
        eprintln!("  violation: {violation}");
    }
    assert!(kills.load(Ordering::SeqCst) > 0, "the run killed no worker");
    assert!(
        interrupted > 0,
        "no call was interrupted: the run proved nothing"
    );
    assert!(
        verdict.violations.is_empty(),
        "{} violations (CHAOS_SEED={seed})",
        verdict.violations.len()
    );
}

#[test]
fn chaos_sqlite_one_worker_killed_and_restarted() {
    let store = format!(
        "sqlite:{}",
        temp_dir("chaos-sqlite-db").join("store.db").display()
    );
    chaos("sqlite", store, 1);
}

#[test]
fn chaos_postgres_three_workers() {
    if Backend::Postgres.available() {
        chaos("postgres", Backend::Postgres.store_url(None), 3);
    }
}

#[test]
fn chaos_redis_three_workers() {
    if Backend::Redis.available() {
        chaos("redis", Backend::Redis.store_url(None), 3);
    }
}

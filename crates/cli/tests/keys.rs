//! D9, D12 with default flags (no `--state-key`): the key ring that seals 2026-07-28
//! `requestState` lives in the store, so a multi-round-trip retry is accepted after the
//! worker restarts and by any other worker on the same store; `durable-mcp keys rotate`
//! brings in a new key while states sealed with the old one still open; a state sealed
//! with a dropped key is refused with a clear error.
//!
//! Two fixtures seal states: the durable `ask` tool (the engine seals the run it
//! continues) and the example server's own SEP-2322 `multi_round` flow (the handler seals
//! its progress with the ring it gets from its request's extensions).
//!
//! The cross-worker tests read `DATABASE_URL` / `REDIS_URL`; outside CI a missing service
//! skips them with a printed reason, with `CI=true` they fail.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::net::SocketAddr;
use std::process::Command;

use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

const MULTI_ROUND: &str = "test_input_required_result_multi_round";

fn sqlite(name: &str) -> String {
    format!("sqlite:{}", temp_dir(name).join("store.db").display())
}

fn cli(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(args)
        .output()
        .expect("run durable-mcp");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Round 1 of the durable `ask` fixture: the question's key and the sealed state.
fn ask_round1(addr: SocketAddr, question: &str) -> (String, String) {
    let first = modern(
        addr,
        1,
        "tools/call",
        json!({"name": "ask", "arguments": {"question": question}}),
        false,
    );
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let key = result["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    (key, result["requestState"].as_str().unwrap().to_owned())
}

/// The retry of [`ask_round1`] with the answer `answer`.
fn ask_retry(addr: SocketAddr, question: &str, key: &str, state: &str, answer: &str) -> Value {
    modern(
        addr,
        2,
        "tools/call",
        json!({"name": "ask", "arguments": {"question": question},
        "inputResponses": {key: {"action": "accept", "content": {"answer": answer}}}, "requestState": state}),
        false,
    )
}

/// Round 1 of the example's multi-round flow: its sealed state.
fn multi_round1(addr: SocketAddr) -> String {
    let round1 = modern(
        addr,
        10,
        "tools/call",
        json!({"name": MULTI_ROUND, "arguments": {}}),
        false,
    );
    assert_eq!(round1["result"]["resultType"], "input_required", "{round1}");
    round1["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Round 2 of the example's multi-round flow (the name answered with the state of round 1).
fn multi_round2(addr: SocketAddr, state: &str) -> Value {
    modern(
        addr,
        11,
        "tools/call",
        json!({"name": MULTI_ROUND, "arguments": {},
        "inputResponses": {"step1": {"action": "accept", "content": {"name": "Ada"}}}, "requestState": state}),
        false,
    )
}

fn assert_round2(round2: &Value) {
    assert_eq!(
        round2["result"]["resultType"], "input_required",
        "the name was accepted, the colour is asked: {round2}"
    );
    assert!(
        round2["result"]["inputRequests"].get("step2").is_some(),
        "{round2}"
    );
}

/// The states sealed on `a` are accepted on `b` (`a` and `b` may be the same address, the
/// worker restarted in between): the engine's and the handler's.
fn states_from(a: SocketAddr) -> impl FnOnce(SocketAddr) {
    let (key, state) = ask_round1(a, "name?");
    let handler_state = multi_round1(a);
    move |b| {
        let retry = ask_retry(b, "name?", &key, &state, "Ada");
        assert_eq!(
            retry["result"]["content"][0]["text"], "Ada",
            "D9: the retry continues the run: {retry}"
        );
        assert_round2(&multi_round2(b, &handler_state));
    }
}

/// (a) SIGKILL and restart on the same SQLite file, no `--state-key`: the retries with the
/// states sealed before the restart are accepted.
#[test]
fn d9_input_required_retry_after_sigkill_and_restart_with_default_flags() {
    let store = sqlite("keys-restart");
    let port = free_port();
    let mut server = Server::start(&store, port, &[]);
    let check = states_from(server.addr);
    server.kill();
    let server = Server::start(&store, port, &[]);
    check(server.addr);
}

/// (b) Round 1 on worker A, the retry on worker B of the same shared store.
fn retry_on_another_worker(backend: Backend) {
    let Some((a, b)) = two_workers(backend, &[]) else {
        return;
    };
    states_from(a.addr)(b.addr);
    // And the other way round.
    states_from(b.addr)(a.addr);
}

#[test]
fn d9_postgres_input_required_retry_on_another_worker_with_default_flags() {
    retry_on_another_worker(Backend::Postgres);
}

#[test]
fn d9_redis_input_required_retry_on_another_worker_with_default_flags() {
    retry_on_another_worker(Backend::Redis);
}

/// (c) Two workers started at the same moment on an empty store both create the ring:
/// the first commit wins and both seal with its key (`keys list` shows one key).
#[test]
fn d12_workers_racing_on_an_empty_store_share_one_key() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let store = backend.store_url(None);
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| Server::start(&store, free_port(), &[]));
        let b = scope.spawn(|| Server::start(&store, free_port(), &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    states_from(a.addr)(b.addr);
    states_from(b.addr)(a.addr);
    let listing = cli(&["keys", "list", "--store", &store]);
    assert_eq!(listing.lines().count(), 1, "one key in the ring: {listing}");
}

/// (d) Rotation: a state sealed before `keys rotate` still opens after it (the old key is
/// kept for opening), a new state is sealed with the new key; after a rotation that drops
/// the old keys at once, a state sealed with them is refused with a clear error.
#[test]
fn d12_rotation_keeps_old_states_open_and_refuses_dropped_keys() {
    let store = sqlite("keys-rotate");
    let port = free_port();
    let mut server = Server::start(&store, port, &[]);
    let before = states_from(server.addr);
    let first_key = cli(&["keys", "list", "--store", &store]);
    assert_eq!(first_key.lines().count(), 1, "{first_key}");
    assert!(
        !first_key.contains("secret"),
        "keys list never prints a secret: {first_key}"
    );

    let rotated = cli(&[
        "keys",
        "rotate",
        "--store",
        &store,
        "--activate-in-secs",
        "0",
    ]);
    assert!(rotated.contains("current"), "{rotated}");
    let listing = cli(&["keys", "list", "--store", &store]);
    assert_eq!(
        listing.lines().count(),
        2,
        "the old key is kept for opening: {listing}"
    );
    // A restarted worker reads the ring as it is now (a running one within seconds).
    server.kill();
    let mut server = Server::start(&store, port, &[]);
    before(server.addr);
    let (key, sealed_with_second) = ask_round1(server.addr, "colour?");
    let handler_state = multi_round1(server.addr);

    cli(&[
        "keys",
        "rotate",
        "--store",
        &store,
        "--activate-in-secs",
        "0",
        "--keep-old-secs",
        "0",
    ]);
    let listing = cli(&["keys", "list", "--store", &store]);
    assert_eq!(
        listing.lines().count(),
        1,
        "the old keys are dropped: {listing}"
    );
    server.kill();
    let server = Server::start(&store, port, &[]);
    let refused = ask_retry(server.addr, "colour?", &key, &sealed_with_second, "red");
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("invalid requestState") && message.contains("unknown key"),
        "{refused}"
    );
    let refused = multi_round2(server.addr, &handler_state);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    // The worker itself goes on: a new round-trip works with the new key.
    states_from(server.addr)(server.addr);
}

/// The id of the key that sealed a `requestState` (rmcp's `rs2` format names it, base64url),
/// for the engine's (`dmcp.` prefix) and the handler's states alike.
fn sealing_key_of(state: &str) -> String {
    let token = state.strip_prefix("dmcp.").unwrap_or(state);
    let kid = token.split('.').nth(1).unwrap_or_default();
    // The ids are `k<n>`: decode the few base64url characters by hand.
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits: Vec<u8> = kid
        .bytes()
        .map(|c| alphabet.iter().position(|&a| a == c).unwrap() as u8)
        .collect();
    let mut out = Vec::new();
    let (mut acc, mut n) = (0u32, 0);
    for b in bits {
        acc = (acc << 6) | u32::from(b);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((acc >> n) as u8);
            acc &= (1 << n) - 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// A running worker (not restarted) re-reads the ring: after `keys rotate` it seals with
/// the new key within the refresh interval (10 s), and still opens what it sealed before.
#[test]
fn d12_a_running_worker_takes_up_a_rotated_key() {
    let store = sqlite("keys-refresh");
    let server = Server::start(&store, free_port(), &[]);
    let (key, before) = ask_round1(server.addr, "name?");
    assert_eq!(sealing_key_of(&before), "k1");
    cli(&[
        "keys",
        "rotate",
        "--store",
        &store,
        "--activate-in-secs",
        "0",
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let state = multi_round1(server.addr);
        if sealing_key_of(&state) == "k2" {
            assert_round2(&multi_round2(server.addr, &state));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still sealing with the old key: {state}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let retry = ask_retry(server.addr, "name?", &key, &before, "Ada");
    assert_eq!(
        retry["result"]["content"][0]["text"], "Ada",
        "sealed before the rotation, opened after: {retry}"
    );
}

//! D1/D3/D4/D7 end to end with the real binary: a client reads part of a stream, its
//! connection drops, the server is killed with SIGKILL while the tool is still running and
//! started again on the same store; the restarted worker re-runs the journaled call at once,
//! and the client resumes with `GET` + `Last-Event-ID`: it receives the rest of the stream
//! after the id it gave, and exactly one outcome.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use serde_json::json;
use support::*;

const N: u64 = 12;
const K: usize = 4;

#[test]
fn d7_sqlite_sigkill_mid_call_then_restart_recovers_and_resumes() {
    let dir = temp_dir("restart");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let port = free_port();
    let mut server = Server::start(&store, port, &[]);
    let session = initialize(server.addr);
    // 100 ms between steps: after K messages (two steps) the call has ten steps to go.
    let (last, seen) = read_part(server.addr, &session, &emit_call(42, N, 100), K);
    server.kill();
    // Killed mid-flight: the call is still journaled, with no outcome.
    let runs = run(&["inspect", "runs", "--store", &store]);
    assert!(
        runs.contains("tools/call emit_events"),
        "the call was still running when the worker died: {runs}"
    );

    let server = Server::start(&store, port, &[]);
    let resumed = resume(server.addr, &session, &last);
    assert_eq!(resumed.status, 200, "D4: the session survives the restart");
    let rest = resumed.within(RECOVERY_WITHIN).messages();
    check_recovered_rest(42, N, &seen, &rest);
    // The session itself still works, without a new initialize.
    let list = post(
        server.addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
    );
    let msgs = list.messages();
    assert!(msgs.last().unwrap().1["result"]["tools"].is_array());
}

/// A `Last-Event-ID` that is not an event id, or names a stream that does not exist, is
/// refused by the restarted worker as unknown (D3): 404, the JSON-RPC invalid-request code,
/// and a message naming the header.
#[test]
fn d3_bad_last_event_id_after_restart_is_404_unknown_event() {
    let dir = temp_dir("badresume");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let port = free_port();
    let mut server = Server::start(&store, port, &[]);
    let session = initialize(server.addr);
    server.kill();
    let server = Server::start(&store, port, &[]);
    for bad in ["nonsense", "00000000000000000000000000000000_3"] {
        let response = resume(server.addr, &session, bad);
        assert_eq!(response.status, 404, "{bad}");
        let body = response.json();
        assert_eq!(body["error"]["code"], -32600, "{bad}: {body}");
        assert_eq!(
            body["error"]["message"],
            format!("Unknown Last-Event-ID: {bad}"),
            "{bad}: {body}"
        );
    }
}

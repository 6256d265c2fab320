//! Many GET streams on one session (SQLite): they open in linear time, at most the bound
//! stay open, and closing them gives every file handle back.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

/// The default of `--max-get-streams`.
const BOUND: usize = 8;
/// The SQLite store's reader connections at most (`MAX_READERS`), each a database and a
/// WAL handle.
const READER_HANDLES: usize = 2 * 8;

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Wait (10 s at most) until the server holds at most `limit` file handles; the count.
fn fds_settle_to(pid: u32, limit: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = open_fds(pid);
        if n <= limit || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn d14_many_get_streams_on_sqlite_are_bounded_and_give_their_handles_back() {
    let dir = temp_dir("getstreams");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let server = Server::start(&store, free_port(), &[]);
    let pid = server.child.id();
    let session = initialize(server.addr);
    for id in 1..=3 {
        let _ = post(
            server.addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        )
        .messages();
    }
    let (baseline, rss_before) = (open_fds(pid), rss_kb(pid));

    let started = Instant::now();
    let mut gets = Vec::new();
    for _ in 0..300 {
        let mut get = request(
            server.addr,
            "GET",
            &[
                ("accept", "text/event-stream"),
                ("mcp-session-id", &session),
            ],
            None,
        );
        assert_eq!(get.status, 200);
        get.next_event().expect("priming event");
        gets.push(get);
    }
    let took = started.elapsed();
    // Structural: the bound's GET sockets, the store's bounded reader connections, slack.
    let limit = baseline + BOUND + READER_HANDLES + 4;
    let open = fds_settle_to(pid, limit);
    assert!(
        open <= limit,
        "300 GETs opened: {open} file handles (baseline {baseline}, limit {limit})"
    );
    assert_eq!(
        gets[0].next_event(),
        None,
        "the oldest GET stream was closed by the bound"
    );

    drop(gets);
    let limit = baseline + READER_HANDLES;
    let after = fds_settle_to(pid, limit);
    eprintln!(
        "300 GETs opened in {took:?}; handles: baseline {baseline}, open {open}, after close {after}; RSS {rss_before} kB -> {} kB",
        rss_kb(pid)
    );
    assert!(
        after <= limit,
        "after closing: {after} file handles (baseline {baseline}, limit {limit})"
    );
}

//! The provisioning example end to end: a legacy client confirms and gets one server; the
//! worker is killed while the server boots (after the charge) and restarted: the client
//! resumes and gets the same result, and the payment system recorded one charge.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use serde_json::{Value, json};
use support::*;

fn provision(addr: std::net::SocketAddr, session: &str, id: u64) -> Response {
    post(
        addr,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "provision_server", "arguments": {"region": "eu-west", "size": "medium"}, "_meta": {"progressToken": id}}}),
    )
}

#[test]
fn provisioning_survives_a_crash_after_the_charge() {
    let dir = temp_dir("provisioning");
    let store = format!("sqlite:{}", dir.join("store.db").display());
    let port = free_port();
    let mut server = Server::start_example("provisioning", &store, port, &[]);
    let session = initialize(server.addr);
    let mut response = provision(server.addr, &session, 1);
    let mut last = String::new();
    let question = loop {
        let (id, data) = response.next_event().expect("the confirmation question");
        last = id.unwrap_or(last);
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&data).unwrap();
        if message["method"] == "elicitation/create" {
            break message;
        }
    };
    assert!(
        question["params"]["message"]
            .as_str()
            .unwrap()
            .contains("$20.00 a month"),
        "{question}"
    );
    let yes = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    assert_eq!(post(server.addr, Some(&session), &yes).status, 202);
    // Progress 2 follows the charge; the boot takes 2 s: kill the worker during it.
    loop {
        let (id, data) = response.next_event().expect("progress");
        last = id.unwrap();
        let message: Value = serde_json::from_str(&data).unwrap();
        if message["params"]["progress"] == 2.0 {
            break;
        }
    }
    drop(response);
    server.kill();
    let server = Server::start_example("provisioning", &store, port, &[]);
    let rest: Vec<Value> = resume(server.addr, &session, &last)
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    assert!(
        !rest.iter().any(|m| m["method"] == "elicitation/create"),
        "not asked again: {rest:#?}"
    );
    let results: Vec<&Value> = rest.iter().filter(|m| m["id"] == 1).collect();
    assert_eq!(results.len(), 1, "{rest:#?}");
    let outcome = &results[0]["result"]["structuredContent"];
    assert_eq!(outcome["state"], "running", "{outcome}");
    assert!(
        outcome["receipt"]
            .as_str()
            .unwrap()
            .starts_with("rcpt-2000-")
    );
    // The restarted worker's (in-memory, simulated) payment system saw the charge step
    // replayed from the journal, not run again: no new charge.
    let report = post(
        server.addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "billing_report", "arguments": {}}}),
    )
    .messages();
    assert_eq!(
        report.last().unwrap().1["result"]["structuredContent"]["charges"],
        0
    );
}

#[test]
fn provisioning_declined_releases_the_reservation() {
    let dir = temp_dir("provisioning-declined");
    let server = Server::start_example(
        "provisioning",
        &format!("sqlite:{}", dir.join("s.db").display()),
        free_port(),
        &[],
    );
    let session = initialize(server.addr);
    let mut response = provision(server.addr, &session, 1);
    let question = loop {
        let (_, data) = response.next_event().expect("question");
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&data).unwrap();
        if message["method"] == "elicitation/create" {
            break message;
        }
    };
    let no = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}});
    assert_eq!(post(server.addr, Some(&session), &no).status, 202);
    let outcome = response
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .find(|m| m["id"] == 1)
        .unwrap();
    assert_eq!(outcome["result"]["structuredContent"]["state"], "declined");
    let report = post(
        server.addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "billing_report", "arguments": {}}}),
    )
    .messages();
    assert_eq!(
        report.last().unwrap().1["result"]["structuredContent"],
        json!({"reservations": 2, "charges": 0})
    );
}

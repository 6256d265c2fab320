//! Encryption at rest end to end with the real binary on SQLite: `serve
//! --encryption-key-file` stores no payload in clear (read with the `sqlite3` command);
//! after `keys encryption rotate` and a restart, a client resumes with `Last-Event-ID` and
//! gets the events sealed under the old key back, new events are sealed with the new key,
//! and the old key cannot be retired while values still use it.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::process::Command;

use support::*;

/// Every value of the SQLite file's `table.column`, as the `sqlite3` command prints it.
fn column(db: &std::path::Path, table: &str, column: &str) -> Vec<String> {
    let out = Command::new("sqlite3")
        .arg(db)
        .arg(format!("SELECT {column} FROM {table};"))
        .output()
        .expect("run sqlite3 (the SQLite command-line shell)");
    assert!(
        out.status.success(),
        "sqlite3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The primary key's id, from `keys encryption list`.
fn primary(key_file: &str) -> String {
    let listed = run(&["keys", "encryption", "list", "--key-file", key_file]);
    let line = listed
        .lines()
        .find(|l| l.ends_with("(primary)"))
        .unwrap_or_else(|| panic!("no primary key: {listed}"));
    line.split_whitespace().next().unwrap().to_owned()
}

#[test]
fn encrypted_sqlite_store_hides_payloads_and_resumes_across_a_key_rotation() {
    let dir = temp_dir("encryption");
    let db = dir.join("store.db");
    let store = format!("sqlite:{}", db.display());
    let key_file = dir.join("keys.json").display().to_string();
    run(&["keys", "encryption", "rotate", "--key-file", &key_file]);
    let old = primary(&key_file);
    let flags = ["--encryption-key-file", key_file.as_str()];

    let port = free_port();
    let mut server = Server::start(&store, port, &flags);
    let session = initialize(server.addr);
    let mut response = post(server.addr, Some(&session), &emit_call(42, 3, 10));
    assert_eq!(response.status, 200);
    let (priming, data) = response.next_event().unwrap();
    assert_eq!(data, "", "the priming event");
    let first = response.messages();
    assert_eq!(
        first.last().unwrap().1["result"]["content"][0]["text"],
        "3",
        "{first:?}"
    );
    server.kill();

    // On disk: every event, record and session value sealed, no JSON-RPC in clear.
    let events = column(&db, "events", "data");
    assert!(events.len() >= 5, "{events:?}");
    let records = column(&db, "records", "value");
    let sessions = column(&db, "sessions", "record");
    for value in events.iter().chain(&records) {
        assert!(value.starts_with(&format!("enc1:{old}:")), "{value}");
        assert!(
            !value.contains("progress") && !value.contains("jsonrpc"),
            "{value}"
        );
    }
    assert!(
        sessions
            .iter()
            .all(|s| s.contains(&format!("\"client\":\"enc1:{old}:")) && !s.contains("clientInfo")),
        "{sessions:?}"
    );

    // Rotate, restart: the old events come back on a resume, new ones use the new key.
    run(&["keys", "encryption", "rotate", "--key-file", &key_file]);
    let new = primary(&key_file);
    assert_ne!(new, old);
    let server = Server::start(&store, port, &flags);
    let resumed = resume(server.addr, &session, &priming.unwrap());
    assert_eq!(resumed.status, 200);
    assert_eq!(
        resumed.messages(),
        first,
        "D3: exactly the events after the priming id, sealed under the old key"
    );
    let again = post(server.addr, Some(&session), &emit_call(43, 2, 10)).messages();
    assert_eq!(again.last().unwrap().1["result"]["content"][0]["text"], "2");
    let sealed_new = column(&db, "events", "data")
        .iter()
        .filter(|d| d.starts_with(&format!("enc1:{new}:")))
        .count();
    assert!(
        sealed_new >= 3,
        "the new call's events are sealed with the new key"
    );

    // The old key still seals stored values: retiring it is refused.
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args([
            "keys",
            "encryption",
            "retire",
            "--key-file",
            &key_file,
            "--store",
            &store,
            &old,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("key {old} still seals")),
        "{stderr}"
    );
    let listed = run(&[
        "keys",
        "encryption",
        "list",
        "--key-file",
        &key_file,
        "--store",
        &store,
    ]);
    assert!(
        listed.contains(&old) && listed.contains(&new) && !listed.contains("\"key\""),
        "ids and counts only: {listed}"
    );

    // Without the keys, the operator commands see only envelopes.
    let replayed = run(&[
        "replay",
        "--store",
        &store,
        &format!("{}_0", first[0].0.rsplit_once('_').unwrap().0),
    ]);
    assert!(
        replayed.contains("enc1:") && !replayed.contains("jsonrpc"),
        "{replayed}"
    );
}

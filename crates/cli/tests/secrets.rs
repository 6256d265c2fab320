//! Secrets never leave the process: a server run at `RUST_LOG=trace`, given a store URL
//! with a password and API keys, and sent bearer tokens (valid and not), a cookie, an API
//! key header and a secret in a tool's arguments, writes none of them to its log. With
//! `--log-bodies` the body shows (so the log is the one that would show it). An unknown
//! store scheme is refused without echoing the password.
//!
//! Reads `DATABASE_URL`; outside CI a missing PostgreSQL skips the test with a printed
//! reason, with `CI=true` it fails.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::process::{Command, Stdio};

use serde_json::json;
use support::backend::Backend;
use support::*;

const API_KEY: &str = "k-secret-api-key-5f1c2b";
const WRONG_TOKEN: &str = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.wrong-token-sig-77aa";
const COOKIE: &str = "session-cookie-secret-9d3e";
const KEY_HEADER: &str = "x-api-key-header-secret-41b0";
const STORE_PASSWORD: &str = "store-pw-c0ffee";
const ARGUMENT: &str = "argument-secret-b16b00b5";

/// `url` with `password` set on its user (`postgres://user@host` → `postgres://user:pw@host`).
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (user, host) = rest.split_once('@').unwrap_or(("postgres", rest));
    let user = user.split(':').next().unwrap();
    format!("{scheme}://{user}:{password}@{host}")
}

/// Run a server with `extra` flags, send it every credential, stop it; its whole log.
fn log_of_a_run(store: &str, name: &str, extra: &[&str]) -> String {
    let dir = temp_dir(name);
    let keys = dir.join("keys");
    std::fs::write(&keys, format!("alice {API_KEY}\n")).unwrap();
    let log_path = dir.join("server.log");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_durable-mcp"));
    command
        .args([
            "serve",
            "--example",
            "everything",
            "--listen",
            &addr.to_string(),
            "--store",
            store,
        ])
        .args(["--auth-api-keys", keys.to_str().unwrap()])
        .args(extra)
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap());
    let mut server = Server::launch(command, addr);

    let bearer = format!("Bearer {API_KEY}");
    let cookie = format!("sid={COOKIE}");
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("authorization", bearer.as_str()),
        ("cookie", cookie.as_str()),
        ("x-api-key", KEY_HEADER),
    ];
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "secrets-test", "version": "1"}}});
    let response = request(addr, "POST", &headers, Some(&init.to_string()));
    assert_eq!(response.status, 200, "initialize");
    let session = response.header("mcp-session-id").unwrap().to_owned();
    let mut with_session = headers.to_vec();
    with_session.push(("mcp-session-id", &session));
    with_session.push(("mcp-protocol-version", "2025-11-25"));
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {"note": ARGUMENT}}});
    assert_eq!(
        request(addr, "POST", &with_session, Some(&call.to_string())).status,
        200,
        "tools/call"
    );
    let wrong = format!("Bearer {WRONG_TOKEN}");
    let refused = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("authorization", wrong.as_str()),
    ];
    assert_eq!(
        request(addr, "POST", &refused, Some(&init.to_string())).status,
        401,
        "a wrong token"
    );
    server.kill();
    std::fs::read_to_string(&log_path).unwrap()
}

#[test]
fn a_trace_level_log_holds_no_credential() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let store = with_password(&backend.store_url(None), STORE_PASSWORD);
    let log = log_of_a_run(&store, "secrets-trace", &[]);
    assert!(
        log.contains("request") && log.contains("<redacted>"),
        "the run logged its requests at debug level, credentials redacted:\n{log}"
    );
    for secret in [
        API_KEY,
        WRONG_TOKEN,
        COOKIE,
        KEY_HEADER,
        STORE_PASSWORD,
        ARGUMENT,
    ] {
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
    }

    // Asked for, bodies are logged at trace (and the credentials still are not).
    let log = log_of_a_run(&store, "secrets-bodies", &["--log-bodies"]);
    assert!(
        log.contains(ARGUMENT),
        "--log-bodies logs the body at trace level"
    );
    for secret in [API_KEY, WRONG_TOKEN, COOKIE, KEY_HEADER, STORE_PASSWORD] {
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
    }
}

#[test]
fn an_unknown_store_scheme_is_refused_without_its_password() {
    let out = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args([
            "migrate",
            "--store",
            &format!("rediss+bogus://default:{STORE_PASSWORD}@cache.example:6380/0"),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused");
    assert!(
        stderr.contains("unsupported store URL") && stderr.contains("<redacted>"),
        "{stderr}"
    );
    assert!(!stderr.contains(STORE_PASSWORD), "{stderr}");
}

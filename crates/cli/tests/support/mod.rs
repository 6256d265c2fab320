//! Test support for driving the real `durable-mcp` binary: spawn servers; the HTTP/SSE
//! client and the shared stores come from `durable-mcp-testkit`.
#![allow(dead_code, missing_docs, clippy::unwrap_used)]

pub mod nginx;
pub mod proxy;
pub mod scrape;
pub mod tls;

use std::net::SocketAddr;
use std::process::{Command, Stdio};

pub use durable_mcp_testkit::*;

/// Run a `durable-mcp` command to completion; its stdout (it must succeed).
pub fn run(args: &[&str]) -> String {
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

/// Servers of the `durable-mcp` binary.
pub trait DurableMcpServer {
    /// `durable-mcp serve --example everything` on `port`.
    fn start(store: &str, port: u16, extra: &[&str]) -> Server;
    /// `durable-mcp serve --example <example>` on `port`.
    fn start_example(example: &str, store: &str, port: u16, extra: &[&str]) -> Server;
}

impl DurableMcpServer for Server {
    fn start(store: &str, port: u16, extra: &[&str]) -> Server {
        Self::start_example("everything", store, port, extra)
    }

    fn start_example(example: &str, store: &str, port: u16, extra: &[&str]) -> Server {
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_durable-mcp"));
        command
            .args([
                "serve",
                "--example",
                example,
                "--listen",
                &addr.to_string(),
                "--store",
                store,
            ])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("DMCP_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        Server::launch(command, addr)
    }
}

/// Two workers sharing a fresh store of `backend`; `None` when the service is missing
/// (outside CI the test then skips; in CI, `available` fails it).
pub fn two_workers(backend: backend::Backend, args: &[&str]) -> Option<(Server, Server)> {
    if !backend.available() {
        return None;
    }
    let store = backend.store_url(None);
    Some((
        Server::start(&store, free_port(), args),
        Server::start(&store, free_port(), args),
    ))
}

/// The lines `<index> <idempotency key>` the `steps` fixture appends to its ledger file
/// (the external effect counter of the durability tests).
pub fn ledger_lines(path: &std::path::Path) -> Vec<(u32, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (index, key) = line.split_once(' ').unwrap();
            (index.parse().unwrap(), key.to_owned())
        })
        .collect()
}

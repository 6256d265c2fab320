//! The tasks example with a 2026-07-28 client that declares the Tasks extension: the call
//! answers with a task at once, `tasks/get` follows it to its result. Without the
//! extension the same tool answers directly.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::{Command, Stdio};
use std::time::Duration;

use durable_mcp_testkit::{Server, free_port, modern, temp_dir, wait_terminal};
use serde_json::json;

#[test]
fn tasks_example_runs_render_as_a_task() {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let store = format!(
        "sqlite:{}",
        temp_dir("example-tasks").join("store.db").display()
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-tasks"));
    command
        .args([addr.to_string(), store])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    let server = Server::launch(command, addr);
    let args = json!({"name": "render", "arguments": {"scene": "teapot", "frames": 3}});
    let created = modern(server.addr, 1, "tools/call", args.clone(), true);
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task_id = created["result"]["taskId"].as_str().unwrap();
    let done = wait_terminal(server.addr, task_id, Duration::from_secs(20));
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "teapot: 3 frames",
        "{done}"
    );
    let direct = modern(server.addr, 2, "tools/call", args, false);
    assert_eq!(
        direct["result"]["content"][0]["text"], "teapot: 3 frames",
        "{direct}"
    );
}

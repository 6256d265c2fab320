//! Three workers sharing PostgreSQL (and again Redis) behind nginx in plain round-robin,
//! with no stickiness: a client session hops across all three workers, and a call whose
//! worker is killed mid-flight is recovered by another.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use serde_json::{Value, json};
use support::backend::Backend;
use support::nginx::{self, Nginx};
use support::*;

fn nginx_available() -> bool {
    if nginx::binary().is_some() {
        return true;
    }
    if durable_mcp_store::in_ci() {
        panic!("nginx is required in CI (scripts/setup-nginx.sh installs it)");
    }
    eprintln!("skipped: nginx not installed (run scripts/setup-nginx.sh)");
    false
}

fn session_hops_across_three_workers(backend: Backend) {
    if !backend.available() || !nginx_available() {
        return;
    }
    let store = backend.store_url(None);
    let mut workers: Vec<Server> = (0..3)
        .map(|_| Server::start(&store, free_port(), &[]))
        .collect();
    let dir = temp_dir("nginx");
    let lb = Nginx::start(
        &dir,
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        &workers.iter().map(|w| w.addr).collect::<Vec<_>>(),
    );

    // initialize and calls through the balancer: consecutive requests land on different
    // workers (round-robin), none of which holds the session in memory.
    let session = initialize(lb.addr);
    for i in 0..9 {
        let call = json!({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}});
        let msgs = post(lb.addr, Some(&session), &call).messages();
        assert_eq!(msgs.last().unwrap().1["id"], 100 + i, "call {i}");
    }
    // Every worker serves the session directly too.
    for w in &workers {
        let msgs = post(
            w.addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
        )
        .messages();
        assert!(msgs.last().unwrap().1["result"]["tools"].is_array());
    }

    // The GET stream on one worker receives what a call on another causes.
    let mut get = request(
        workers[2].addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
        ],
        None,
    );
    let _ = get.next_event();
    let change = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "test_trigger_tool_change", "arguments": {}}});
    let _ = post(workers[0].addr, Some(&session), &change).messages();
    let (_, data) = get.next_event().expect("live message");
    assert_eq!(
        serde_json::from_str::<Value>(&data).unwrap()["method"],
        "notifications/tools/list_changed"
    );
    drop(get);

    // A call on worker 1, which is killed with SIGKILL while the call runs; the client
    // resumes through the balancer on a surviving worker, which re-runs the call once
    // worker 1's lease expires (D7).
    let (last, seen) = read_part(workers[1].addr, &session, &emit_call(9, 8, 100), 3);
    workers[1].kill();
    let resumed = resume(lb.addr, &session, &last);
    assert_eq!(resumed.status, 200);
    let rest = resumed.within(RECOVERY_WITHIN).messages();
    check_recovered_rest(9, 8, &seen, &rest);

    // DELETE through the balancer ends the session on every worker (D5).
    let deleted = request(lb.addr, "DELETE", &[("mcp-session-id", &session)], None);
    assert_eq!(deleted.status, 200);
    for w in [&workers[0], &workers[2]] {
        assert_eq!(
            post(
                w.addr,
                Some(&session),
                &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            )
            .status,
            404
        );
    }
}

#[test]
fn postgres_session_hops_across_three_workers_behind_nginx() {
    session_hops_across_three_workers(Backend::Postgres);
}

#[test]
fn redis_session_hops_across_three_workers_behind_nginx() {
    session_hops_across_three_workers(Backend::Redis);
}

/// The nginx settings `docs/deployment.md` recommends are the ones the load-balancer tests
/// and `scripts/lb-conformance.sh` run (`scripts/nginx.conf.template`): same upstream and
/// location directives, in the same order.
#[test]
fn nginx_config_matches_the_docs() {
    let docs = include_str!("../../../docs/deployment.md");
    let start = docs
        .find("```nginx")
        .expect("docs/deployment.md has an nginx block");
    let block = &docs[start..];
    let block = &block[..block[3..].find("```").expect("the nginx block ends") + 3];
    let worker: std::net::SocketAddr = "127.0.0.1:8081".parse().unwrap();
    let tested = nginx::config(
        std::path::Path::new("/tmp/nginx"),
        "127.0.0.1:8080".parse().unwrap(),
        &[worker],
    );
    for opening in ["upstream mcp {", "location /mcp {"] {
        let documented = nginx::block_directives(block, opening);
        let tested = nginx::block_directives(&tested, opening);
        assert!(
            !tested.is_empty(),
            "scripts/nginx.conf.template has no `{opening}` block"
        );
        assert_eq!(
            documented, tested,
            "`{opening}` in docs/deployment.md differs from scripts/nginx.conf.template"
        );
    }
}

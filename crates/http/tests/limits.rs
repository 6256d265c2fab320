//! Connection limits of `serve` over real sockets: silent, half-sent and idle connections
//! are closed after their timeouts, an SSE stream outlives the idle timeout, and a
//! connection over the cap is refused while the others keep working.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use durable_mcp_http::HttpConfig;
use serde_json::json;
use support::{Harness, call, harness_with, initialize, post, round_trip};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const LONG: Duration = Duration::from_secs(60);

fn config(header_read: Duration, idle: Duration, max_connections: usize) -> HttpConfig {
    {
        let mut o = HttpConfig::default();
        o.header_read_timeout = header_read;
        o.idle_timeout = idle;
        o.max_connections = max_connections;
        o.keep_alive = LONG;
        o
    }
}

async fn start(config: HttpConfig) -> (Harness, SocketAddr) {
    let h = harness_with(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(durable_mcp_http::serve(
        listener,
        h.transport.clone(),
        std::future::pending(),
    ));
    (h, addr)
}

/// Reads until the server closes `conn` (end of stream or reset); panics if it is still
/// open after `within`. Returns what was read.
async fn wait_closed(conn: &mut TcpStream, within: Duration) -> Vec<u8> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => panic!(
                "connection still open after {within:?}; read {:?}",
                String::from_utf8_lossy(&seen)
            ),
            Ok(Ok(0) | Err(_)) => return seen,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// One `initialize` on a new connection (`connection: close`): the status line, or `None`
/// if the server closed or reset the connection without one.
async fn status_on_new_connection(addr: SocketAddr) -> Option<String> {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{INIT}",
        INIT.len()
    );
    if conn.write_all(request.as_bytes()).await.is_err() {
        return None;
    }
    let seen = wait_closed(&mut conn, Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&seen);
    text.lines()
        .next()
        .filter(|l| l.starts_with("HTTP/1.1"))
        .map(str::to_owned)
}

#[tokio::test]
async fn silent_connection_is_closed_after_the_header_read_timeout() {
    let (_h, addr) = start(config(Duration::from_millis(300), LONG, 16)).await;
    let mut conn = TcpStream::connect(addr).await.unwrap();
    wait_closed(&mut conn, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn half_sent_request_head_is_closed_after_the_header_read_timeout() {
    let (_h, addr) = start(config(Duration::from_millis(300), LONG, 16)).await;
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: appl")
        .await
        .unwrap();
    wait_closed(&mut conn, Duration::from_secs(5)).await;
}

#[tokio::test]
async fn idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(1500);
    let (_h, addr) = start(config(Duration::from_millis(200), idle, 16)).await;
    let mut conn = BufReader::new(TcpStream::connect(addr).await.unwrap());
    let (head, _) = round_trip(&mut conn, INIT, None).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let idle_from = Instant::now();
    wait_closed(conn.get_mut(), Duration::from_secs(10)).await;
    // Closed by the idle timeout, not by the much shorter header read timeout.
    assert!(
        idle_from.elapsed() > idle / 2,
        "closed after {:?}, idle timeout {idle:?}",
        idle_from.elapsed()
    );
}

#[tokio::test]
async fn sse_stream_outlives_the_idle_timeout() {
    let (h, addr) = start(config(
        Duration::from_secs(5),
        Duration::from_millis(300),
        16,
    ))
    .await;
    let session = initialize(&h.router, "2025-11-25").await;
    let mut get = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nhost: localhost\r\naccept: text/event-stream\r\nmcp-session-id: {session}\r\nmcp-protocol-version: 2025-11-25\r\n\r\n"
    );
    get.write_all(request.as_bytes()).await.unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), get.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "GET stream closed: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    // A keep-alive connection opened after the stream has been idled out: the idle timeout
    // has passed for the stream's connection too (and it carried no keep-alive comment).
    let mut other = BufReader::new(TcpStream::connect(addr).await.unwrap());
    round_trip(&mut other, INIT, None).await;
    wait_closed(other.get_mut(), Duration::from_secs(10)).await;
    let reply = post(&h.router, Some(&session), call(1, "change", json!({}))).await;
    reply.text().await;
    while !seen.contains("notifications/tools/list_changed") {
        let n = tokio::time::timeout(Duration::from_secs(10), get.read(&mut buf))
            .await
            .expect("event within 10s")
            .unwrap();
        assert!(n > 0, "GET stream closed by the idle timeout: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[tokio::test]
async fn connection_over_the_cap_is_refused_and_a_closed_one_frees_its_slot() {
    let (_h, addr) = start(config(LONG, LONG, 2)).await;
    let mut first = BufReader::new(TcpStream::connect(addr).await.unwrap());
    let mut second = BufReader::new(TcpStream::connect(addr).await.unwrap());
    assert!(
        round_trip(&mut first, INIT, None)
            .await
            .0
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        round_trip(&mut second, INIT, None)
            .await
            .0
            .starts_with("HTTP/1.1 200")
    );

    // The third is answered 503 (or just closed) at once, not served and not left waiting.
    let refused = tokio::time::timeout(Duration::from_secs(5), status_on_new_connection(addr))
        .await
        .expect("refused promptly");
    assert!(
        refused
            .as_deref()
            .is_none_or(|s| s.starts_with("HTTP/1.1 503")),
        "{refused:?}"
    );

    // The first two still work.
    assert!(
        round_trip(&mut first, INIT, None)
            .await
            .0
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        round_trip(&mut second, INIT, None)
            .await
            .0
            .starts_with("HTTP/1.1 200")
    );

    // Once one closes, a new connection is served (its slot comes back when the server
    // notices the close).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = status_on_new_connection(addr).await;
        if status
            .as_deref()
            .is_some_and(|s| s.starts_with("HTTP/1.1 200"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection served after one closed: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

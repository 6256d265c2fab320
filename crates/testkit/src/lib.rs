//! Test support shared by the integration tests of the binaries (the `durable-mcp`
//! command, the examples): launch a server process and wait for its port, and a minimal
//! blocking HTTP/1.1 client that reads SSE incrementally. Not published; tests only.
#![allow(missing_docs, clippy::unwrap_used)] // test support: a panic is the failure report

pub mod backend;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A port on 127.0.0.1 for a server a test is about to start, that nothing else takes
/// before the server binds it.
///
/// A port the kernel picks (`bind` to port 0) is free again when this returns, and any
/// process may get it from the kernel in turn (another test binary, another worktree's
/// tests) while the server starts: the proxy starts its upstream before it binds, seconds
/// under load. Then the test talks to the other process's server, or to nothing once that
/// one ends (`d10_redis_any_upstream_tool_as_a_task_over_two_proxy_workers`: connection
/// refused). So the port is taken from below the kernel's ephemeral range, which `bind` to
/// port 0 and `connect` never use, and claimed across processes with a file in
/// `$TMPDIR/durable-mcp-ports` (reclaimed after [`PORT_CLAIM`]).
pub fn free_port() -> u16 {
    let low = ephemeral_low();
    let span = u32::from(low.saturating_sub(PORTS_FROM).max(1));
    let dir = std::env::temp_dir().join("durable-mcp-ports");
    std::fs::create_dir_all(&dir).unwrap();
    let start = (rand_suffix() as u32) ^ std::process::id().rotate_left(16);
    for i in 0..span {
        let port = PORTS_FROM + ((start.wrapping_add(i) % span) as u16);
        if claim(&dir.join(port.to_string())) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!(
        "no free port in {PORTS_FROM}..{low} (claims in {})",
        dir.display()
    );
}

/// The lowest port [`free_port`] hands out.
const PORTS_FROM: u16 = 20_000;
/// How long a port handed out by [`free_port`] stays claimed (longer than any test).
const PORT_CLAIM: Duration = Duration::from_secs(3600);

/// The first port of the kernel's ephemeral range (Linux; 32768 elsewhere).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Claim a port's file: create it, or take it over when its claim is older than [`PORT_CLAIM`].
fn claim(file: &std::path::Path) -> bool {
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(file)
            .is_ok()
    };
    if create() {
        return true;
    }
    let expired = std::fs::metadata(file)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > PORT_CLAIM));
    expired && std::fs::remove_file(file).is_ok() && create()
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "durable-mcp-{name}-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A running server process; killed (SIGKILL) on drop.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Server {
    /// Spawn `command` (a server that will listen on `addr`) and wait until it does.
    pub fn launch(mut command: Command, addr: SocketAddr) -> Server {
        let mut child = command.spawn().expect("spawn the server");
        let deadline = Instant::now() + Duration::from_secs(20);
        // Something answering on the port is not enough: another process may hold it (the
        // server then fails to bind and exits, maybe seconds later). Wait until the
        // listener is this child's own, where that can be seen.
        while !listens(&child, addr) {
            assert!(
                Instant::now() < deadline,
                "server did not start listening on {addr}"
            );
            if let Ok(Some(status)) = child.try_wait() {
                panic!("server on {addr} exited at start ({status}): port taken?");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, addr }
    }

    /// SIGKILL: no shutdown, no flush, nothing graceful.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `child` listens on `addr`'s port: on Linux, a listening socket on that port in
/// `/proc/net/tcp` or `tcp6` (a server may listen on every address, or on IPv6 and IPv4 at
/// once) is one of the child's open files; elsewhere, a connection is accepted.
fn listens(child: &Child, addr: SocketAddr) -> bool {
    let Ok(v4) = std::fs::read_to_string("/proc/net/tcp") else {
        return TcpStream::connect(addr).is_ok();
    };
    let table = v4 + &std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    let port = format!(":{:04X}", addr.port());
    // Columns: sl local_address rem_address st ... inode (the tenth); st 0A is LISTEN.
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|cols| cols.len() > 9 && cols[1].ends_with(&port) && cols[3] == "0A")
        .map(|cols| format!("socket:[{}]", cols[9]))
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", child.id())) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|link| inodes.iter().any(|i| link.as_os_str() == i.as_str()))
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    remaining: Option<usize>,
    chunk_left: usize,
    done: bool,
    buffer: String,
    deadline: Option<Instant>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Stop reading at `within` from now: the stream then ends as if the server closed it
    /// (for a test to fail on what it has, rather than wait on keep-alives forever).
    pub fn within(mut self, within: Duration) -> Self {
        self.deadline = Some(Instant::now() + within);
        self
    }

    fn read_some(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.reader.get_ref().set_read_timeout(Some(left)).is_err() {
                self.done = true;
                return None;
            }
        }
        if self.chunked {
            if self.chunk_left == 0 {
                let mut size = String::new();
                if self.reader.read_line(&mut size).ok()? == 0 {
                    self.done = true;
                    return None;
                }
                let n = usize::from_str_radix(size.trim(), 16).ok()?;
                if n == 0 {
                    self.done = true;
                    return None;
                }
                self.chunk_left = n;
            }
            let mut buf = vec![0; self.chunk_left];
            self.reader.read_exact(&mut buf).ok()?;
            self.chunk_left = 0;
            let mut crlf = [0; 2];
            self.reader.read_exact(&mut crlf).ok()?;
            Some(String::from_utf8(buf).unwrap())
        } else {
            let n = self.remaining.unwrap_or(0);
            let mut buf = vec![0; n];
            self.reader.read_exact(&mut buf).ok()?;
            self.done = true;
            Some(String::from_utf8(buf).unwrap())
        }
    }

    pub fn body(mut self) -> String {
        let mut all = std::mem::take(&mut self.buffer);
        while let Some(part) = self.read_some() {
            all.push_str(&part);
        }
        all
    }

    pub fn json(self) -> Value {
        serde_json::from_str(&self.body()).unwrap()
    }

    /// The next SSE block as sent, comments (`: keep-alive`) included; None at the end.
    pub fn next_block(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                return Some(self.buffer.drain(..end + 2).collect());
            }
            let part = self.read_some()?;
            self.buffer.push_str(&part);
        }
    }

    /// The next SSE event (id, data), skipping comments; None at the end of the stream.
    pub fn next_event(&mut self) -> Option<(Option<String>, String)> {
        loop {
            let block = self.next_block()?;
            if block.lines().all(|l| l.starts_with(':') || l.is_empty()) {
                continue;
            }
            let mut id = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = v.trim_start().to_owned();
                }
            }
            return Some((id, data));
        }
    }

    /// All remaining JSON messages of the SSE stream (empty-data events left out).
    pub fn messages(mut self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        while let Some((id, data)) = self.next_event() {
            if !data.is_empty() {
                out.push((id.unwrap_or_default(), serde_json::from_str(&data).unwrap()));
            }
        }
        out
    }
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    try_request(addr, method, headers, body).unwrap()
}

/// [`request`], with connection and header failures as errors (the server may be dead).
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Response> {
    try_request_at(addr, method, "/mcp", headers, body)
}

/// [`request`] to another path than `/mcp` (an application's own routes).
pub fn request_at(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    try_request_at(addr, method, path, headers, body).unwrap()
}

fn try_request_at(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Response> {
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut text = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    text.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    (&stream).write_all(text.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("status line"))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').ok_or_else(|| bad("header line"))?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let remaining = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok());
    Ok(Response {
        status,
        headers,
        reader,
        chunked,
        remaining,
        chunk_left: 0,
        done: false,
        buffer: String::new(),
        deadline: None,
    })
}

const POST: [(&str, &str); 2] = [
    ("accept", "application/json, text/event-stream"),
    ("content-type", "application/json"),
];

pub fn post(addr: SocketAddr, session: Option<&str>, body: &Value) -> Response {
    let mut headers = POST.to_vec();
    if let Some(s) = session {
        headers.push(("mcp-session-id", s));
    }
    request(addr, "POST", &headers, Some(&body.to_string()))
}

pub fn initialize(addr: SocketAddr) -> String {
    let response = post(
        addr,
        None,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "cli-test", "version": "1"}}}),
    );
    assert_eq!(response.status, 200);
    let session = response
        .header("mcp-session-id")
        .expect("session id")
        .to_owned();
    let _ = response.body();
    let ack = post(
        addr,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(ack.status, 202);
    session
}

/// How long a resumed stream may take to end when its call is re-run after a worker died:
/// another worker's lease expiry (5 s), its recovery pass (1 s) and the call itself, with room.
pub const RECOVERY_WITHIN: Duration = Duration::from_secs(30);

/// An `emit_events(count)` call with progress token `"p"`, its steps `interval_ms` apart.
pub fn emit_call(id: u64, count: u64, interval_ms: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "emit_events", "arguments": {"count": count, "interval_ms": interval_ms}, "_meta": {"progressToken": "p"}}})
}

/// D3/D7 after a worker died mid-call and the call was re-run: the resumed rest of the
/// stream has every step after the ones the client saw, in order, once; exactly one outcome
/// (`count` as text), last; and no event id twice.
pub fn check_recovered_rest(
    id: u64,
    count: u64,
    seen: &[(String, Value)],
    rest: &[(String, Value)],
) {
    let progress_of = |messages: &[(String, Value)]| -> Vec<u64> {
        messages
            .iter()
            .filter(|(_, m)| m["method"] == "notifications/progress")
            .map(|(_, m)| m["params"]["progress"].as_f64().unwrap() as u64)
            .collect()
    };
    let highest_seen = progress_of(seen).last().copied().unwrap_or(0);
    assert!(
        highest_seen < count,
        "the client saw the whole call: nothing was recovered"
    );
    let after = progress_of(rest);
    let later: Vec<u64> = after
        .iter()
        .copied()
        .filter(|p| *p > highest_seen)
        .collect();
    assert_eq!(
        later,
        (highest_seen + 1..=count).collect::<Vec<_>>(),
        "every later step, in order, once: {after:?}"
    );
    let outcomes: Vec<&Value> = seen
        .iter()
        .chain(rest)
        .map(|(_, m)| m)
        .filter(|m| m["id"] == id)
        .collect();
    assert_eq!(outcomes.len(), 1, "exactly one outcome: {outcomes:?}");
    assert_eq!(
        outcomes[0]["result"]["content"][0]["text"],
        count.to_string(),
        "the re-run's outcome"
    );
    assert_eq!(
        rest.last().map(|(_, m)| &m["id"]),
        Some(&json!(id)),
        "the outcome comes last"
    );
    let ids: std::collections::BTreeSet<&String> =
        seen.iter().chain(rest).map(|(id, _)| id).collect();
    assert_eq!(ids.len(), seen.len() + rest.len(), "no event id twice");
}

/// Post `call`, read the priming event and then `k` messages, and drop the connection (the
/// call goes on running). Returns the last event id read and the messages.
pub fn read_part(
    addr: SocketAddr,
    session: &str,
    call: &Value,
    k: usize,
) -> (String, Vec<(String, Value)>) {
    let mut response = post(addr, Some(session), call);
    assert_eq!(response.status, 200);
    let (priming, data) = response.next_event().expect("priming event");
    assert_eq!(data, "", "first event is the priming event");
    let mut last = priming.expect("priming id");
    let mut seen = Vec::new();
    while seen.len() < k {
        let (id, data) = response.next_event().expect("event");
        last = id.expect("id");
        seen.push((last.clone(), serde_json::from_str(&data).unwrap()));
    }
    (last, seen)
}

pub fn resume(addr: SocketAddr, session: &str, last_event_id: &str) -> Response {
    request(
        addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", session),
            ("last-event-id", last_event_id),
        ],
        None,
    )
}

/// Read a GET stream until it has carried `want` messages with `method`, or `idle`
/// keep-alive comments in a row (it had nothing more to send); returns how many it carried.
pub fn count_until_idle(stream: &mut Response, method: &str, want: usize, idle: usize) -> usize {
    let (mut seen, mut quiet) = (0, 0);
    while seen < want && quiet < idle {
        let Some(block) = stream.next_block() else {
            break;
        };
        if block.starts_with(": keep-alive") {
            quiet += 1;
        } else if block.contains(&format!("\"method\":\"{method}\"")) {
            seen += 1;
            quiet = 0;
        }
    }
    seen
}

/// The 2026-07-28 protocol version.
pub const V: &str = "2026-07-28";
/// The Tasks extension's name.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
const EXT: &str = TASKS_EXTENSION;

/// One 2026-07-28 request; returns the final JSON-RPC message (JSON or the SSE's last).
pub fn modern(addr: SocketAddr, id: u64, method: &str, mut params: Value, ext: bool) -> Value {
    let caps = if ext {
        json!({"elicitation": {}, "extensions": {EXT: {}}})
    } else {
        json!({"elicitation": {}})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut headers = vec![
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", V),
        ("mcp-method", method),
    ];
    if let Some(name) = &name {
        headers.push(("mcp-name", name));
    }
    last_message(request(addr, "POST", &headers, Some(&body.to_string())))
}

/// The final JSON-RPC message of a response: its JSON body or its SSE stream's last.
pub fn last_message(response: Response) -> Value {
    if response
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"))
    {
        response.messages().pop().unwrap().1
    } else {
        response.json()
    }
}

/// A task's `tasks/get` (2026-07-28, the Tasks extension declared).
pub fn task_get(addr: SocketAddr, task_id: &str) -> Value {
    modern(addr, 900, "tasks/get", json!({"taskId": task_id}), true)
}

/// `tasks/get` until the task is terminal (within `timeout`); returns its result.
pub fn wait_terminal(addr: SocketAddr, task_id: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let got = task_get(addr, task_id);
        let status = got["result"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
            return got["result"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "task {task_id} still {status}: {got}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Open a 2026-07-28 `subscriptions/listen` stream.
pub fn listen(addr: SocketAddr, notifications: Value, ext: bool) -> Response {
    let caps = if ext {
        json!({"extensions": {EXT: {}}})
    } else {
        json!({})
    };
    let body = json!({"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen", "params": {
    "notifications": notifications,
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    }}});
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", V),
        ("mcp-method", "subscriptions/listen"),
    ];
    request(addr, "POST", &headers, Some(&body.to_string()))
}

/// The next JSON message of an SSE stream.
pub fn next_message(stream: &mut Response) -> Value {
    loop {
        let (_, data) = stream.next_event().expect("the stream ended");
        if !data.is_empty() {
            return serde_json::from_str(&data).unwrap();
        }
    }
}

/// D7 across a re-run of `emit_events(count)` (progress token `token`): in `messages` (all
/// the client received, before and after the crash) each progress value 1..=count comes
/// once and in increasing order, and each log line once.
pub fn assert_events_sent_once(messages: &[&Value], token: &str, count: u64) {
    let progress: Vec<f64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .inspect(|m| assert_eq!(m["params"]["progressToken"], token, "{m}"))
        .map(|m| m["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "D7: progress never goes backwards across the re-run: {progress:?}"
    );
    let expected: Vec<f64> = (1..=count).map(|n| n as f64).collect();
    assert_eq!(progress, expected, "each progress value exactly once");
    let mut logs: Vec<u64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .map(|m| m["params"]["data"]["event"].as_u64().unwrap())
        .collect();
    let sent = logs.len();
    logs.sort_unstable();
    logs.dedup();
    assert_eq!(logs.len(), sent, "D7: no log line sent twice");
    assert_eq!(logs, (1..=count).collect::<Vec<_>>(), "each log line once");
}

//! OpenTelemetry traces end to end with the real binary: a small OTLP/HTTP receiver in the
//! test (protobuf, decoded with `opentelemetry-proto`) gets what `durable-mcp serve`
//! exports when an OTLP endpoint variable is set.
//! - a `tools/call` with `_meta.traceparent` makes a server span in that trace, child of
//!   the client's span, with the semantic conventions' attributes, the HTTP request's
//!   context as a link, and store calls as its child spans; errors carry `error.type`;
//! - a request re-run after SIGKILL of its worker, on another worker (PostgreSQL, shared),
//!   makes a server span linked to the original trace and server span;
//! - with traces off (no variable, or `OTEL_SDK_DISABLED=true`), a graceful shutdown (which
//!   flushes an exporter) sends nothing.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{Span, span, status};
use prost::Message as _;
use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

/// The client's trace and span, as sent in `_meta.traceparent`.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
/// Another trace, sent in the HTTP `traceparent` header.
const HTTP_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const HTTP_SPAN: &str = "b7ad6b7169203331";

/// One exported span with the service that sent it.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    span: Span,
}

impl Exported {
    fn trace(&self) -> String {
        hex(&self.span.trace_id)
    }
    fn attr(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

/// A minimal OTLP/HTTP receiver: `POST /v1/traces` with a protobuf
/// `ExportTraceServiceRequest`, answered `200` with an empty (default) response.
struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Exported>>>,
    requests: Arc<Mutex<usize>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(Mutex::new(0));
        let (into, counted) = (spans.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (into, counted) = (into.clone(), counted.clone());
                std::thread::spawn(move || serve_export(stream, &into, &counted));
            }
        });
        Receiver {
            addr,
            spans,
            requests,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    fn spans(&self) -> Vec<Exported> {
        self.spans.lock().unwrap().clone()
    }

    /// Wait until a span matching `find` was received; it.
    fn wait_for(&self, what: &str, find: impl Fn(&Exported) -> bool) -> Exported {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(found) = self.spans().into_iter().find(&find) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} exported; got {:#?}",
                self.spans()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Serve export requests on one connection (keep-alive or not) until it closes.
fn serve_export(
    stream: std::net::TcpStream,
    spans: &Mutex<Vec<Exported>>,
    requests: &Mutex<usize>,
) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let mut length = 0;
        let mut content_type = String::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap(),
                "content-type" => content_type = value.trim().to_owned(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        assert_eq!(target, "/v1/traces");
        assert_eq!(content_type, "application/x-protobuf");
        let export =
            ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP protobuf export");
        *requests.lock().unwrap() += 1;
        let mut received = spans.lock().unwrap();
        for resource in export.resource_spans {
            let service = resource
                .resource
                .as_ref()
                .and_then(|r| attribute(&r.attributes, "service.name"))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    received.push(Exported {
                        service: service.clone(),
                        span,
                    });
                }
            }
        }
        drop(received);
        writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n").unwrap();
    }
}

/// `durable-mcp serve` with `env` set.
fn start(store: &str, port: u16, env: &[(&str, &str)], extra: &[&str]) -> Server {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
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
        .args(extra)
        .env(
            "RUST_LOG",
            std::env::var("DMCP_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_SDK_DISABLED",
        "OTEL_SERVICE_NAME",
        "DURABLE_MCP_OTEL",
    ] {
        command.env_remove(var);
    }
    // Export batches quickly (the default is every 5 s).
    command.env("OTEL_BSP_SCHEDULE_DELAY", "50");
    command.envs(env.iter().copied());
    Server::launch(command, addr)
}

/// A worker exporting to `receiver` as service `name`.
fn traced(store: &str, port: u16, receiver: &Receiver, name: &str, extra: &[&str]) -> Server {
    start(
        store,
        port,
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &receiver.endpoint()),
            ("OTEL_SERVICE_NAME", name),
        ],
        extra,
    )
}

/// POST `body` with extra headers.
fn post_with(addr: SocketAddr, session: &str, headers: &[(&str, &str)], body: &Value) -> Response {
    let mut all = vec![
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-session-id", session),
    ];
    all.extend_from_slice(headers);
    request(addr, "POST", &all, Some(&body.to_string()))
}

/// SIGTERM, then wait for the process to exit (a graceful shutdown flushes the exporter).
fn terminate(server: &mut Server) {
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the server did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn call(id: u64, tool: &str, meta: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {}, "_meta": meta}})
}

/// A `tools/call` with `_meta.traceparent` (and another context in the HTTP headers):
/// a server span in the `_meta` trace, child of the client's span, with the semantic
/// conventions' attributes; the HTTP context as a link; the store calls as children.
#[test]
fn a_tools_call_with_meta_traceparent_makes_a_server_span_in_that_trace() {
    let receiver = Receiver::start();
    let dir = temp_dir("traces-call");
    let store = format!("sqlite:{}", dir.join("traces.db").display());
    let server = traced(&store, free_port(), &receiver, "traces-test", &[]);
    let session = initialize(server.addr);

    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let http_traceparent = format!("00-{HTTP_TRACE}-{HTTP_SPAN}-01");
    let body = call(
        5,
        "test_simple_text",
        json!({"traceparent": traceparent, "tracestate": "rojo=00f067aa0ba902b7"}),
    );
    let response = post_with(
        server.addr,
        &session,
        &[("traceparent", &http_traceparent)],
        &body,
    );
    assert_eq!(response.status, 200);
    let messages = response.messages();
    assert!(
        messages.last().unwrap().1["result"].is_object(),
        "{messages:?}"
    );

    let server_span = receiver.wait_for("server span of the call", |s| {
        s.trace() == TRACE && s.span.kind == span::SpanKind::Server as i32
    });
    assert_eq!(
        server_span.service, "traces-test",
        "OTEL_SERVICE_NAME names the service"
    );
    assert_eq!(
        server_span.span.name, "tools/call test_simple_text",
        "span name {{mcp.method.name}} {{target}}"
    );
    assert_eq!(
        hex(&server_span.span.parent_span_id),
        PARENT,
        "the _meta span is the parent"
    );
    assert_eq!(
        server_span.span.trace_state, "rojo=00f067aa0ba902b7",
        "the _meta tracestate goes on"
    );
    assert_eq!(
        server_span.attr("mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        server_span.attr("gen_ai.tool.name").as_deref(),
        Some("test_simple_text")
    );
    assert_eq!(
        server_span.attr("gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(server_span.attr("jsonrpc.request.id").as_deref(), Some("5"));
    assert_eq!(
        server_span.attr("mcp.session.id").as_deref(),
        Some(session.as_str())
    );
    assert_eq!(
        server_span.attr("mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    assert_eq!(
        server_span.attr("error.type"),
        None,
        "no error.type on success"
    );
    assert_ne!(
        server_span.span.status.as_ref().map(|s| s.code),
        Some(status::StatusCode::Error as i32)
    );
    let links: Vec<(String, String)> = server_span
        .span
        .links
        .iter()
        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
        .collect();
    assert_eq!(
        links,
        vec![(HTTP_TRACE.to_owned(), HTTP_SPAN.to_owned())],
        "the HTTP request's context is a link"
    );

    let server_id = server_span.span.span_id.clone();
    let store_span = receiver.wait_for("a store span of the call", |s| {
        s.span.parent_span_id == server_id
    });
    assert_eq!(store_span.trace(), TRACE);
    assert!(
        store_span.span.name.starts_with("store "),
        "{}",
        store_span.span.name
    );
    assert_eq!(store_span.span.kind, span::SpanKind::Client as i32);
    assert_eq!(store_span.attr("db.system.name").as_deref(), Some("sqlite"));
    assert!(store_span.attr("db.operation.name").is_some());

    // Only the header: it is the parent.
    let response = post_with(
        server.addr,
        &session,
        &[("traceparent", &http_traceparent)],
        &call(6, "test_simple_text", json!({})),
    );
    assert_eq!(response.status, 200);
    drop(response.messages());
    let by_header = receiver.wait_for("the span of call 6", |s| {
        s.attr("jsonrpc.request.id").as_deref() == Some("6")
    });
    assert_eq!(
        (by_header.trace(), hex(&by_header.span.parent_span_id)),
        (HTTP_TRACE.to_owned(), HTTP_SPAN.to_owned())
    );

    // Errors: a tool error, and a JSON-RPC error (an unknown tool).
    let meta = json!({"traceparent": traceparent});
    drop(
        post_with(
            server.addr,
            &session,
            &[],
            &call(7, "test_error_handling", meta.clone()),
        )
        .messages(),
    );
    let failed = receiver.wait_for("the span of call 7", |s| {
        s.attr("jsonrpc.request.id").as_deref() == Some("7")
    });
    assert_eq!(failed.attr("error.type").as_deref(), Some("tool_error"));
    assert_eq!(
        failed.span.status.as_ref().unwrap().code,
        status::StatusCode::Error as i32
    );
    drop(post_with(server.addr, &session, &[], &call(8, "no_such_tool", meta)).messages());
    let unknown = receiver.wait_for("the span of call 8", |s| {
        s.attr("jsonrpc.request.id").as_deref() == Some("8")
    });
    assert_eq!(unknown.attr("error.type").as_deref(), Some("-32602"));
    assert_eq!(
        unknown.attr("rpc.response.status_code").as_deref(),
        Some("-32602")
    );
    assert_eq!(
        unknown.span.status.as_ref().unwrap().code,
        status::StatusCode::Error as i32
    );
    assert!(
        !unknown.span.status.as_ref().unwrap().message.is_empty(),
        "the JSON-RPC error's message"
    );

    // An invalid traceparent is ignored: the request is served, its span starts a trace.
    let garbage = call(
        9,
        "test_simple_text",
        json!({"traceparent": "00-not-a-trace-parent", "tracestate": "x".repeat(10_000)}),
    );
    let response = post_with(server.addr, &session, &[], &garbage);
    assert_eq!(response.status, 200);
    assert!(response.messages().last().unwrap().1["result"].is_object());
    let root = receiver.wait_for("the span of call 9", |s| {
        s.attr("jsonrpc.request.id").as_deref() == Some("9")
    });
    assert!(
        root.span.parent_span_id.is_empty(),
        "no parent from an invalid traceparent"
    );
    assert_ne!(root.trace(), TRACE);

    // 2026-07-28 (no session): the same span, with that version and no session id.
    let body = json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "traces-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
        "traceparent": traceparent}}});
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "test_simple_text"),
    ];
    let answer = last_message(request(
        server.addr,
        "POST",
        &headers,
        Some(&body.to_string()),
    ));
    assert!(answer["result"].is_object(), "{answer}");
    let modern = receiver.wait_for("the span of call 12", |s| {
        s.attr("jsonrpc.request.id").as_deref() == Some("12")
    });
    assert_eq!(
        (modern.trace(), hex(&modern.span.parent_span_id)),
        (TRACE.to_owned(), PARENT.to_owned())
    );
    assert_eq!(modern.span.name, "tools/call test_simple_text");
    assert_eq!(
        modern.attr("mcp.protocol.version").as_deref(),
        Some("2026-07-28")
    );
    assert_eq!(
        modern.attr("mcp.session.id"),
        None,
        "no session in 2026-07-28"
    );

    // initialize has its span too (no session yet).
    let init = receiver.wait_for("the initialize span", |s| s.span.name == "initialize");
    assert_eq!(init.attr("mcp.method.name").as_deref(), Some("initialize"));
}

/// A journaled request whose worker is SIGKILLed mid-run is re-run by another worker
/// sharing the store (PostgreSQL): that worker's server span is linked to the original
/// trace and to the original server span (known from the store spans the first worker
/// exported before it died, which are its children).
#[test]
fn a_rerun_after_sigkill_on_another_worker_is_linked_to_the_original_trace() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let receiver = Receiver::start();
    let store = backend.store_url(None);
    let lease = ["--lease-ms", "1500"];
    let mut a = traced(&store, free_port(), &receiver, "worker-a", &lease);
    let b = traced(&store, free_port(), &receiver, "worker-b", &lease);
    let session = initialize(a.addr);
    let dir = temp_dir("traces-crash");
    let ledger = dir.join("effects.ledger");
    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let steps = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {
        "name": "steps", "arguments": {"count": 3, "step_ms": 1000, "ledger": ledger.display().to_string()},
        "_meta": {"traceparent": traceparent}}});
    let mut response = post_with(a.addr, &session, &[], &steps);
    assert_eq!(response.status, 200);
    let (priming, _) = response.next_event().expect("priming event");
    drop(response);
    // The run record was committed under the server span: that store span names it.
    let journaled = receiver.wait_for("a store span of worker A in the call's trace", |s| {
        s.service == "worker-a" && s.trace() == TRACE && s.span.name.starts_with("store ")
    });
    let original = hex(&journaled.span.parent_span_id);
    assert_ne!(
        original, PARENT,
        "the store span's parent is A's server span, not the client's"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&ledger)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "step 1 never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    a.kill();

    let rest = resume(b.addr, &session, &priming.unwrap())
        .within(RECOVERY_WITHIN)
        .messages();
    assert_eq!(
        rest.last().unwrap().1["result"]["structuredContent"]["steps"],
        json!([1, 2, 3]),
        "{rest:?}"
    );
    let rerun = receiver.wait_for("worker B's re-run span", |s| {
        s.service == "worker-b" && s.attr("durable_mcp.rerun").as_deref() == Some("true")
    });
    assert_eq!(rerun.span.name, "tools/call steps");
    assert_eq!(rerun.span.kind, span::SpanKind::Server as i32);
    assert_eq!(rerun.attr("jsonrpc.request.id").as_deref(), Some("11"));
    assert_eq!(
        rerun.attr("mcp.session.id").as_deref(),
        Some(session.as_str())
    );
    assert_eq!(rerun.attr("durable_mcp.attempt").as_deref(), Some("2"));
    let links: Vec<(String, String)> = rerun
        .span
        .links
        .iter()
        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
        .collect();
    assert_eq!(
        links,
        vec![(TRACE.to_owned(), original)],
        "linked to the original trace and server span"
    );
    assert_ne!(rerun.trace(), TRACE, "the re-run is a trace of its own");
    assert!(rerun.span.parent_span_id.is_empty());
    drop(b);
}

/// Off unless asked for: a server with no OTLP variable, and one with an endpoint but
/// `OTEL_SDK_DISABLED=true` (and `--otel`), serve traced requests and shut down
/// gracefully (an exporter would flush then) without sending anything; the same
/// traffic with the endpoint alone is exported (the control).
#[test]
fn nothing_is_exported_when_traces_are_off() {
    let dir = temp_dir("traces-off");
    let traffic = |server: &Server| {
        let session = initialize(server.addr);
        let body = call(
            3,
            "test_simple_text",
            json!({"traceparent": format!("00-{TRACE}-{PARENT}-01")}),
        );
        let response = post_with(
            server.addr,
            &session,
            &[("traceparent", &format!("00-{HTTP_TRACE}-{HTTP_SPAN}-01"))],
            &body,
        );
        assert_eq!(response.status, 200);
        assert!(response.messages().last().unwrap().1["result"].is_object());
    };

    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let store = format!("sqlite:{}", dir.join("off.db").display());
    // No variable: nothing is built (no endpoint to send to; none would be guessed).
    let mut off = start(&store, free_port(), &[], &[]);
    traffic(&off);
    terminate(&mut off);
    let mut disabled = start(
        &store,
        free_port(),
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
            ("OTEL_SDK_DISABLED", "true"),
        ],
        &["--otel"],
    );
    traffic(&disabled);
    terminate(&mut disabled);
    assert_eq!(
        *receiver.requests.lock().unwrap(),
        0,
        "nothing exported: {:#?}",
        receiver.spans()
    );

    let mut on = start(
        &store,
        free_port(),
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
        &[],
    );
    traffic(&on);
    terminate(&mut on);
    assert!(
        receiver.spans().iter().any(|s| s.trace() == TRACE),
        "the control exports at shutdown: {:#?}",
        receiver.spans()
    );
}

/// An `https://` collector with a private CA: spans reach it when its CA is given
/// (`OTEL_EXPORTER_OTLP_CERTIFICATE`); without it nothing does (the certificate is refused,
/// the requests are still served).
#[test]
fn an_https_collector_with_a_private_ca_gets_the_spans() {
    let receiver = Receiver::start();
    let tls = tls::relay(receiver.addr);
    let endpoint = format!("https://localhost:{}/v1/traces", tls.port());
    let dir = temp_dir("traces-https");
    let store = format!("sqlite:{}", dir.join("https.db").display());
    let ca = tls::ca_file();

    let mut untrusting = start(
        &store,
        free_port(),
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)],
        &[],
    );
    let session = initialize(untrusting.addr);
    assert_eq!(
        post_with(
            untrusting.addr,
            &session,
            &[],
            &call(3, "test_simple_text", json!({}))
        )
        .status,
        200
    );
    terminate(&mut untrusting);
    assert_eq!(
        *receiver.requests.lock().unwrap(),
        0,
        "an unknown CA is refused: {:#?}",
        receiver.spans()
    );

    let server = start(
        &store,
        free_port(),
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca.to_str().unwrap()),
        ],
        &[],
    );
    let session = initialize(server.addr);
    let body = call(
        4,
        "test_simple_text",
        json!({"traceparent": format!("00-{TRACE}-{PARENT}-01")}),
    );
    assert_eq!(post_with(server.addr, &session, &[], &body).status, 200);
    receiver.wait_for("the span of call 4 over https", |s| {
        s.attr("jsonrpc.request.id").as_deref() == Some("4")
    });
}

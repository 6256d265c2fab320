//! One upstream process: spawned with piped stdio, spoken to in newline-delimited JSON-RPC
//! (the MCP stdio transport), initialized once, then shared by the requests routed to it.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durable_mcp_handler::{Questions, UpstreamError};
use durable_mcp_protocol::jsonrpc::code;
use durable_mcp_protocol::methods;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::ProxyError;
use crate::metrics::{LiveChild, Start, Stop};
use crate::reports::Reports;

/// How long a stopped child has to exit after its stdin closed, before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// What the upstream process is: the command line of every child.
#[derive(Debug, Clone)]
pub struct Command {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// Where a request's notifications go, with the highest progress already sent for it (a
/// request sent again to a fresh child reports its progress from the start again: only
/// what goes beyond is forwarded).
#[derive(Debug, Clone)]
pub(crate) struct Sink {
    tx: mpsc::UnboundedSender<Value>,
    /// The client's progress token, restored in the notifications forwarded.
    token: Option<Value>,
    sent_progress: Arc<Mutex<Option<f64>>>,
    /// Where the upstream's questions for the request go (journaled requests only).
    questions: Option<Questions>,
}

impl Sink {
    pub(crate) fn new(
        tx: mpsc::UnboundedSender<Value>,
        token: Option<Value>,
        questions: Option<Questions>,
    ) -> Self {
        Self {
            tx,
            token,
            sent_progress: Arc::default(),
            questions,
        }
    }

    /// Whether the client gave the request a progress token.
    pub(crate) fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Where the request's questions go (journaled requests only).
    pub(crate) fn questions(&self) -> Option<Questions> {
        self.questions.clone()
    }

    pub(crate) fn forward(&self, mut message: Value) {
        if message.get("method").and_then(Value::as_str) == Some("notifications/progress") {
            let Some(progress) = message.pointer("/params/progress").and_then(Value::as_f64) else {
                return;
            };
            let mut sent = crate::lock(&self.sent_progress);
            if sent.is_some_and(|s| progress <= s) {
                return;
            }
            *sent = Some(progress);
            match (
                &self.token,
                message.get_mut("params").and_then(Value::as_object_mut),
            ) {
                (Some(token), Some(params)) => {
                    params.insert("progressToken".into(), token.clone());
                }
                _ => return,
            }
        }
        let _ = self.tx.send(message);
    }
}

/// Why a call on a child did not give the upstream's answer.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The upstream answered with a JSON-RPC error.
    Upstream(UpstreamError),
    /// The process exited (or closed its stdout) before it answered.
    Gone,
    /// The caller cancelled it (the child was told with `notifications/cancelled`).
    Cancelled,
}

struct Pending {
    reply: oneshot::Sender<Result<Value, UpstreamError>>,
    sink: Option<Sink>,
    /// Cancelled when the call ends, however it ends (a question relayed for it stops
    /// waiting then).
    ended: CancellationToken,
}

#[derive(Default)]
struct State {
    /// By the child-local request id, oldest first.
    pending: BTreeMap<u64, Pending>,
    exited: bool,
}

/// A running upstream process.
pub struct Child {
    pid: Option<u32>,
    writer: mpsc::UnboundedSender<String>,
    state: Mutex<State>,
    next_id: AtomicU64,
    /// Cancelled once the process is gone (its stdout closed or it exited).
    gone: CancellationToken,
    /// Cancel to stop the process (stdin closed, then SIGKILL after a grace period).
    stop: CancellationToken,
    /// Why the proxy stopped it, if it did.
    stop_cause: Mutex<Option<Stop>>,
    /// Holds it in the live-children gauge from its start until it ends (metrics on).
    live: Mutex<Option<LiveChild>>,
    last_used: Mutex<Instant>,
    /// When the process was found gone.
    gone_at: Mutex<Option<Instant>>,
    in_flight: AtomicU64,
    /// The upstream's `initialize` result.
    pub(crate) initialized: Mutex<Value>,
    /// Unique among the processes this worker started.
    pub(crate) serial: u64,
    /// Where its list changes and resource updates go (see `reports`); `None`: dropped.
    reports: Arc<Mutex<Option<Reports>>>,
    /// Its reports, delivered one after another in the order it sent them.
    report_tx: mpsc::UnboundedSender<Value>,
}

/// Numbers the processes of this worker.
static SERIAL: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for Child {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Child")
            .field("pid", &self.pid)
            .field("gone", &self.gone.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Child {
    /// Spawn the process and initialize it with `initialize` params, within `timeout`;
    /// counted as started for `reason` once initialized.
    pub(crate) async fn start(
        command: &Command,
        params: Value,
        timeout: Duration,
        reason: Start,
    ) -> Result<Arc<Child>, ProxyError> {
        let mut process = tokio::process::Command::new(&command.program)
            .args(&command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ProxyError::Spawn {
                program: command.program.clone(),
                source,
            })?;
        let (Some(mut stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
            return Err(ProxyError::Protocol(
                "the child's stdio was not piped".into(),
            ));
        };
        let (writer, mut lines) = mpsc::unbounded_channel::<String>();
        let (report_tx, mut report_rx) = mpsc::unbounded_channel::<Value>();
        let reports: Arc<Mutex<Option<Reports>>> = Arc::default();
        let deliver = Arc::clone(&reports);
        tokio::spawn(async move {
            // Ends when the child is dropped (its sender with it).
            while let Some(message) = report_rx.recv().await {
                let target = crate::lock(&deliver).clone();
                match target {
                    Some(target) => target.deliver(message).await,
                    None => {
                        tracing::debug!(method = ?message.get("method"), "an upstream report with nowhere to go is dropped")
                    }
                }
            }
        });
        let child = Arc::new(Child {
            pid: process.id(),
            writer,
            state: Mutex::default(),
            next_id: AtomicU64::new(1),
            gone: CancellationToken::new(),
            stop: CancellationToken::new(),
            stop_cause: Mutex::new(None),
            live: Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
            gone_at: Mutex::new(None),
            in_flight: AtomicU64::new(0),
            initialized: Mutex::new(Value::Null),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            reports,
            report_tx,
        });
        let stop = child.stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    line = lines.recv() => {
                        let Some(mut line) = line else { break };
                        line.push('\n');
                        if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                            break;
                        }
                    }
                    () = stop.cancelled() => break,
                }
            }
            // Dropping stdin closes it: a stdio server exits at the end of its input.
        });
        let reader = Arc::clone(&child);
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout).lines();
            loop {
                match stdout.next_line().await {
                    Ok(Some(line)) => reader.received(&line),
                    Ok(None) => break,
                    Err(error) => {
                        tracing::warn!(pid = ?reader.pid, %error, "reading the upstream's stdout failed");
                        break;
                    }
                }
            }
            reader.exited();
        });
        let waiter = Arc::clone(&child);
        tokio::spawn(async move {
            let status = tokio::select! {
                status = process.wait() => {
                    tracing::info!(pid = ?waiter.pid, ?status, "upstream process exited");
                    status.ok()
                }
                () = waiter.stop.cancelled() => {
                    let status = match tokio::time::timeout(STOP_GRACE, process.wait()).await {
                        Ok(status) => status.ok(),
                        Err(_) => {
                            let _ = process.kill().await;
                            None
                        }
                    };
                    tracing::debug!(pid = ?waiter.pid, "upstream process stopped");
                    status
                }
            };
            waiter.exited();
            waiter.ended(status);
        });
        let initialize = async {
            let result = child
                .call("initialize", Some(params), None, &CancellationToken::new())
                .await;
            match result {
                Ok(result) => {
                    child.notify("notifications/initialized", None);
                    Ok(result)
                }
                Err(CallError::Upstream(error)) => Err(ProxyError::Initialize(error.to_string())),
                Err(CallError::Gone) => Err(ProxyError::Initialize(
                    "the process exited before it answered `initialize`".into(),
                )),
                Err(CallError::Cancelled) => Err(ProxyError::Initialize("cancelled".into())),
            }
        };
        let result = match tokio::time::timeout(timeout, initialize).await {
            Ok(Ok(result)) => result,
            Ok(Err(error)) => {
                child.stop.cancel();
                return Err(error);
            }
            Err(_) => {
                child.stop.cancel();
                return Err(ProxyError::Initialize(format!(
                    "no answer to `initialize` within {timeout:?}"
                )));
            }
        };
        tracing::info!(pid = ?child.pid, "upstream process started");
        *crate::lock(&child.initialized) = result;
        {
            // Checked under the lock `ended` takes after `gone` is set: a child that is
            // already gone is never put in the gauge.
            let mut live = crate::lock(&child.live);
            if !child.is_gone() {
                *live = crate::metrics::started(reason);
            }
        }
        Ok(child)
    }

    /// The process id (for logs and tests).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whether the process is gone.
    pub fn is_gone(&self) -> bool {
        self.gone.is_cancelled()
    }

    /// Requests in flight on it.
    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// How long since it last served a request.
    pub(crate) fn idle_for(&self) -> Duration {
        crate::lock(&self.last_used).elapsed()
    }

    /// Where its list changes and resource updates go from now on.
    pub(crate) fn set_reports(&self, reports: Reports) {
        *crate::lock(&self.reports) = Some(reports);
    }

    /// Stop the process for `cause`: close its stdin, and kill it if it has not exited
    /// after a grace period. Requests in flight on it fail as [`CallError::Gone`].
    pub(crate) fn stop(&self, cause: Stop) {
        if !self.is_gone() {
            crate::lock(&self.stop_cause).get_or_insert(cause);
        }
        self.stop.cancel();
    }

    /// Whether the proxy stopped it (rather than it exiting by itself or being killed).
    pub(crate) fn stopped_by_proxy(&self) -> bool {
        crate::lock(&self.stop_cause).is_some()
    }

    /// Whether it exited by itself (or was killed by someone else) less than `within` ago.
    pub(crate) fn died_within(&self, within: Duration) -> bool {
        !self.stopped_by_proxy()
            && crate::lock(&self.gone_at).is_some_and(|at| at.elapsed() < within)
    }

    /// The process ended with `status` (`None`: unknown, or killed after the grace period):
    /// counted as stopped, by the proxy's cause or by how it ended.
    fn ended(&self, status: Option<std::process::ExitStatus>) {
        let Some(live) = crate::lock(&self.live).take() else {
            return;
        };
        let cause = crate::lock(&self.stop_cause).unwrap_or_else(|| {
            if killed_by_signal(status) {
                Stop::Killed
            } else {
                Stop::Exited
            }
        });
        crate::metrics::stopped(live, cause);
    }

    /// Send one request and wait for its answer, forwarding the notifications that belong
    /// to it into `sink`. Cancelling `cancel` tells the child (`notifications/cancelled`).
    pub(crate) async fn call(
        &self,
        method: &str,
        params: Option<Value>,
        sink: Option<Sink>,
        cancel: &CancellationToken,
    ) -> Result<Value, CallError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let mut params = params;
        if sink.as_ref().is_some_and(|s| s.token.is_some())
            && let Some(meta) = params
                .as_mut()
                .and_then(|p| p.get_mut("_meta"))
                .and_then(Value::as_object_mut)
        {
            // The child's own token: clients of one pooled child may use the same ones.
            meta.insert("progressToken".into(), Value::from(id));
        }
        let (reply, answer) = oneshot::channel();
        let ended = CancellationToken::new();
        let _ended = ended.clone().drop_guard();
        {
            let mut state = crate::lock(&self.state);
            if state.exited {
                return Err(CallError::Gone);
            }
            state.pending.insert(id, Pending { reply, sink, ended });
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _done = InFlight(self);
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        if self.writer.send(message.to_string()).is_err() {
            crate::lock(&self.state).pending.remove(&id);
            return Err(CallError::Gone);
        }
        tokio::select! {
            answer = answer => match answer {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(error)) => Err(CallError::Upstream(error)),
                Err(_) => Err(CallError::Gone),
            },
            () = cancel.cancelled() => {
                crate::lock(&self.state).pending.remove(&id);
                self.notify("notifications/cancelled", Some(json!({"requestId": id, "reason": "cancelled by the client"})));
                Err(CallError::Cancelled)
            }
        }
    }

    /// Send a notification.
    pub(crate) fn notify(&self, method: &str, params: Option<Value>) {
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        let _ = self.writer.send(message.to_string());
    }

    /// One line of the child's stdout.
    fn received(&self, line: &str) {
        let message: Value = match serde_json::from_str(line) {
            Ok(message) => message,
            Err(error) => {
                tracing::debug!(pid = ?self.pid, %error, "the upstream wrote a line that is not JSON");
                return;
            }
        };
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (method, message.get("id").cloned()) {
            (None, Some(id)) => {
                let Some(pending) = id
                    .as_u64()
                    .and_then(|id| crate::lock(&self.state).pending.remove(&id))
                else {
                    return;
                };
                let _ = pending.reply.send(outcome(&message));
            }
            (Some(method), Some(id)) => self.question(method, id, message.get("params").cloned()),
            (Some(method), None) => self.route_notification(&method, message),
            (None, None) => {}
        }
    }

    /// A request of the upstream to its client: `ping` is answered here; a question
    /// (elicitation, sampling, roots) is relayed for the oldest journaled request in flight
    /// (stdio does not say which request a question belongs to), and answered when the
    /// client's answer is committed. With no such request it is refused.
    fn question(&self, method: String, id: Value, params: Option<Value>) {
        if method == "ping" {
            let _ = self
                .writer
                .send(json!({"jsonrpc": "2.0", "id": id, "result": {}}).to_string());
            return;
        }
        let target = crate::lock(&self.state).pending.values().find_map(|p| {
            p.sink
                .as_ref()
                .and_then(|s| s.questions.clone())
                .map(|q| (q, p.ended.clone()))
        });
        let Some((questions, ended)) = target else {
            tracing::debug!(pid = ?self.pid, %method, "an upstream question with no journaled request in flight is refused");
            let mut reply = json!({"jsonrpc": "2.0", "id": id});
            if let (Some(reply), Value::Object(body)) = (reply.as_object_mut(), refusal(&method)) {
                reply.extend(body);
            }
            let _ = self.writer.send(reply.to_string());
            return;
        };
        let (writer, gone) = (self.writer.clone(), self.gone.clone());
        tokio::spawn(async move {
            let body = tokio::select! {
                body = questions.ask(&method, params.unwrap_or_else(|| json!({}))) => body,
                () = gone.cancelled() => return,
                () = ended.cancelled() => return,
            };
            let mut reply = json!({"jsonrpc": "2.0", "id": id});
            if let (Some(reply), Value::Object(body)) = (reply.as_object_mut(), body) {
                reply.extend(body);
            }
            let _ = writer.send(reply.to_string());
        });
    }

    /// Progress goes to the request whose token it carries; a log message to the oldest
    /// request in flight (stdio has no other link between the two); list changes and
    /// resource updates are reports, not tied to a request (see `reports`). Other
    /// notifications are not forwarded.
    fn route_notification(&self, method: &str, message: Value) {
        if REPORTS.contains(&method) {
            let _ = self.report_tx.send(message);
            return;
        }
        let state = crate::lock(&self.state);
        let sink = match method {
            "notifications/progress" => message
                .pointer("/params/progressToken")
                .and_then(Value::as_u64)
                .and_then(|id| state.pending.get(&id))
                .and_then(|p| p.sink.as_ref()),
            "notifications/message" => state.pending.values().find_map(|p| p.sink.as_ref()),
            _ => {
                tracing::debug!(pid = ?self.pid, %method, "upstream notification not forwarded");
                None
            }
        };
        if let Some(sink) = sink {
            sink.forward(message);
        }
    }

    /// The process is gone: every request in flight fails as [`CallError::Gone`].
    fn exited(&self) {
        let pending = {
            let mut state = crate::lock(&self.state);
            state.exited = true;
            std::mem::take(&mut state.pending)
        };
        drop(pending);
        crate::lock(&self.gone_at).get_or_insert_with(Instant::now);
        self.gone.cancel();
        self.stop.cancel();
    }
}

/// Whether a signal ended the process.
fn killed_by_signal(status: Option<std::process::ExitStatus>) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.is_some_and(|s| s.signal().is_some())
    }
    #[cfg(not(unix))]
    {
        let _ = status;
        false
    }
}

/// The notifications a child reports outside requests.
const REPORTS: [&str; 4] = [
    methods::NOTIFICATION_TOOLS_LIST_CHANGED,
    methods::NOTIFICATION_PROMPTS_LIST_CHANGED,
    methods::NOTIFICATION_RESOURCES_LIST_CHANGED,
    methods::NOTIFICATION_RESOURCES_UPDATED,
];

/// The outcome in a JSON-RPC response: its result, or its error.
pub(crate) fn outcome(message: &Value) -> Result<Value, UpstreamError> {
    match (message.get("result"), message.get("error")) {
        (Some(result), _) => Ok(result.clone()),
        (None, Some(error)) => Err(UpstreamError {
            code: error
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(code::INTERNAL_ERROR),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("upstream error")
                .to_owned(),
            data: error.get("data").cloned(),
        }),
        (None, None) => Err(UpstreamError {
            code: code::INTERNAL_ERROR,
            message: "the upstream's response had neither result nor error".into(),
            data: None,
        }),
    }
}

/// The answer body to an upstream's question asked while no journaled request is in
/// flight (none can relay it).
pub(crate) fn refusal(method: &str) -> Value {
    json!({"error": {"code": code::METHOD_NOT_FOUND,
        "message": format!("durable-mcp proxy relays {method} only while it serves a tools/call, prompts/get, resources/read or completion/complete")}})
}

/// Counts a request in flight on a child, and marks the child used when it ends.
struct InFlight<'a>(&'a Child);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        *crate::lock(&self.0.last_used) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(token: u64, value: u64) -> Value {
        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": value, "total": 5}})
    }

    /// D7 within one run: a call sent again to a fresh child reports progress from 1 again;
    /// the client gets only what goes beyond what it had, with its own token.
    #[test]
    fn d7_progress_already_forwarded_is_not_forwarded_again_and_carries_the_clients_token() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = Sink::new(tx, Some(json!("client-token")), None);
        for value in [1, 2, 3] {
            sink.forward(progress(7, value));
        }
        // The fresh child (another child-local token) starts again.
        for value in [1, 2, 3, 4, 5] {
            sink.clone().forward(progress(9, value));
        }
        sink.forward(json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}));
        let mut got = Vec::new();
        while let Ok(message) = rx.try_recv() {
            got.push(message);
        }
        let values: Vec<u64> = got
            .iter()
            .filter_map(|m| m.pointer("/params/progress").and_then(Value::as_u64))
            .collect();
        assert_eq!(values, [1, 2, 3, 4, 5]);
        assert!(
            got.iter()
                .filter(|m| m["method"] == "notifications/progress")
                .all(|m| m["params"]["progressToken"] == "client-token")
        );
        assert_eq!(
            got.last().map(|m| &m["method"]),
            Some(&json!("notifications/message")),
            "other notifications pass"
        );
    }
}

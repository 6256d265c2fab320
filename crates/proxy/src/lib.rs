//! The upstream side of `durable-mcp proxy`: any MCP server that speaks stdio, run as child
//! processes of the worker, behind the durable Streamable HTTP endpoint; or a Streamable
//! HTTP server ([`HttpProxy`], [`remote`]), a session of its own per client session.
//!
//! [`Proxy`] implements [`durable_mcp_handler::Upstream`]; wrapped in a
//! [`durable_mcp_handler::Forward`] it is an ordinary handler of the engine, which gives
//! it sessions, streams, `Last-Event-ID`, both protocol eras, the journal and recovery.
//! What this crate adds:
//!
//! - **a child per session**: each legacy session's requests go to a process of its own,
//!   started on the worker that serves the session when it is first needed, and initialized
//!   with the session's stored `initialize` params (so a session moved to another worker,
//!   or served after a restart, gets a fresh child there without a new `initialize` from
//!   its client). 2026-07-28 requests (stateless) go to a small pool of children.
//! - **lifecycle**: idle children are stopped after [`ProxyConfig::idle_stop`]; a key whose
//!   child died is restarted on its next request after a backoff (100 ms, doubling, at
//!   most 5 s); at most [`ProxyConfig::max_children`] per worker (the longest idle is
//!   stopped to make room; if all are busy the request is refused at once).
//! - **interrupted requests** ([`policy`]): a request whose child died before answering is
//!   sent once more to a fresh child if that is safe (reads, tools annotated
//!   `readOnlyHint` or `idempotentHint`, tools the operator marked retryable); otherwise it
//!   is answered with [`code::UPSTREAM_INTERRUPTED`]. A journaled request the engine runs
//!   again after the worker died (attempt 2 and later) follows the same rule.
//! - **questions**: a child's `elicitation/create`, `sampling/createMessage` or `roots/list`
//!   is relayed for the oldest journaled request in flight on it, through that request's
//!   [`durable_mcp_handler::Questions`] (asked once, the answer committed first); each
//!   send of a request to a fresh child matches its questions from the first again.
//! - **changes** (`reports.rs`): list changes and resource updates a child reports, in or
//!   outside a request, go through the engine's [`durable_mcp_handler::Outbox`]: a
//!   session's child's to that session's standalone stream (the GET stream), a pool
//!   child's announced once to the `subscriptions/listen` streams (several pool children
//!   reporting one change within [`ProxyConfig::change_window`] are that one change). A
//!   fresh child takes over the resource subscriptions of its session, a pool child those
//!   the listen streams follow.
//!
//! # Durability
//! In plain words: the client gets exactly one outcome of each request, and never waits
//! for a child that is gone. Stated more precisely: a `tools/call`, `prompts/get`,
//! `resources/read` or `completion/complete` is journaled before it is forwarded (D6: the
//! forward waits for `Durable::journaled`); the proxy forwards it; if the child exits first, the request fails over to a fresh child
//! only when [`policy::resend`] allows it (at most [`ProxyConfig::max_resends`] times),
//! otherwise its outcome is the interrupted error; if the worker dies, the engine runs it
//! again (D7) and a request that is not safe to send again gets the interrupted error
//! without reaching a child. What the upstream sent for a request (progress, log
//! messages) is committed before a client sees it (D1), and progress the client already
//! has is not sent twice (D7).

pub mod child;
mod http;
pub mod metrics;
pub mod policy;
pub mod remote;
mod reports;
mod supervisor;

pub use remote::{HttpProxy, HttpProxyConfig};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use durable_mcp_handler::context::BoxFuture;
use durable_mcp_handler::{Outbox, Upstream, UpstreamError, UpstreamRequest};
use durable_mcp_protocol::jsonrpc::code;
use serde_json::{Value, json};

use crate::child::{CallError, Sink};
use crate::metrics::Interruption;
use crate::supervisor::{Key, Supervisor};

/// Errors of starting the proxy or one of its children.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The upstream command could not be started.
    #[error("cannot start the upstream {program:?}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The upstream did not complete `initialize`.
    #[error("the upstream did not initialize: {0}")]
    Initialize(String),
    /// The upstream broke the protocol.
    #[error("the upstream broke the protocol: {0}")]
    Protocol(String),
    /// Every child this worker may run is busy.
    #[error("this worker runs {0} upstream processes already, all busy (--max-children)")]
    TooManyChildren(usize),
}

/// How the proxy runs its upstream.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The upstream's program (run with piped stdin/stdout; its stderr is the proxy's).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Stop a child that served no request for this long (default 5 minutes).
    pub idle_stop: Duration,
    /// At most this many children per worker (default 64).
    pub max_children: usize,
    /// Children serving 2026-07-28 (stateless) requests (default 2).
    pub pool_size: usize,
    /// Tools sent again after an interruption although their annotations do not say it is
    /// safe (`--retryable-tool`).
    pub retryable_tools: Vec<String>,
    /// How long a child has to answer `initialize` (default 30 s).
    pub init_timeout: Duration,
    /// How many times one request is sent again to a fresh child (default 2).
    pub max_resends: u32,
    /// Answer a request with an error if its upstream has not answered it within this
    /// time (default: never; a child that exits is noticed at once either way).
    pub request_timeout: Option<Duration>,
    /// Reports of one change (a list change of one kind, an update of one resource) by
    /// several pool children within this time of the first are that one change, announced
    /// once (default 1 s; see "Changes" in `docs/proxy.md`).
    pub change_window: Duration,
}

impl ProxyConfig {
    /// The defaults for `program args...`.
    pub fn new(program: impl Into<String>, args: Vec<String>) -> Self {
        Self {
            program: program.into(),
            args,
            idle_stop: Duration::from_secs(300),
            max_children: 64,
            pool_size: 2,
            retryable_tools: Vec::new(),
            init_timeout: Duration::from_secs(30),
            max_resends: 2,
            request_timeout: None,
            change_window: Duration::from_secs(1),
        }
    }
}

/// A stdio upstream run as child processes: an [`Upstream`] for
/// [`durable_mcp_handler::Forward`]. Cheap to clone (one set of children); the children
/// are stopped when the last clone is dropped.
#[derive(Clone)]
pub struct Proxy(Arc<Shared>);

struct Shared {
    config: ProxyConfig,
    supervisor: Supervisor,
    /// The upstream's `initialize` result, from the first child.
    info: Value,
    /// The upstream's tools by name, as last listed (annotations decide re-sends).
    tools: RwLock<HashMap<String, Value>>,
    /// The idle reaper; aborted with the proxy.
    reaper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("program", &self.0.config.program)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Start the proxy: one child of the pool is started at once, initialized, and asked
    /// for its tools (the upstream's capabilities and tool annotations come from it), so
    /// that a command that cannot run fails here rather than at the first request.
    pub async fn start(config: ProxyConfig) -> Result<Proxy, ProxyError> {
        let supervisor = Supervisor::new(config.clone());
        let first = supervisor.child(&Key::Pool(0), None, None).await?;
        let info = crate::lock(&first.initialized).clone();
        if !info.is_object() {
            return Err(ProxyError::Protocol(format!(
                "its initialize result is not an object: {info}"
            )));
        }
        let proxy = Arc::new(Shared {
            config,
            supervisor,
            info,
            tools: RwLock::default(),
            reaper: Mutex::new(None),
        });
        if proxy.info.pointer("/capabilities/tools").is_some() {
            match first
                .call(
                    "tools/list",
                    None,
                    None,
                    &tokio_util::sync::CancellationToken::new(),
                )
                .await
            {
                Ok(result) => proxy.learn_tools(&result),
                Err(error) => tracing::warn!(
                    ?error,
                    "the upstream did not list its tools: no tool is sent again after an interruption"
                ),
            }
        }
        let reaper = reap_idle(&proxy, proxy.config.idle_stop, |proxy| async move {
            proxy.supervisor.stop_idle()
        });
        *crate::lock(&proxy.reaper) = Some(reaper);
        Ok(Proxy(proxy))
    }

    /// Children running on this worker now.
    pub fn children(&self) -> usize {
        self.0.supervisor.live()
    }

    /// Stop every child (at shutdown; dropping the last clone does the same).
    pub fn stop(&self) {
        self.0.stop();
    }
}

impl Shared {
    fn stop(&self) {
        if let Some(reaper) = crate::lock(&self.reaper).take() {
            reaper.abort();
        }
        self.supervisor.stop_all();
    }

    fn learn_tools(&self, result: &Value) {
        learn_tools(&self.tools, result);
    }

    async fn forward(self: Arc<Self>, request: UpstreamRequest) -> Result<Value, UpstreamError> {
        let UpstreamRequest {
            method,
            params,
            session,
            client,
            attempt,
            cancel,
            notifications,
            questions,
            outbox,
        } = request;
        if let Some(outbox) = &outbox {
            // Announcing a pool child's report needs no caller: any request's outbox does.
            let _ = self.supervisor.pool.outbox.set(outbox.clone());
        }
        let resending = Resending::of(
            &method,
            params.as_ref(),
            &self.tools,
            &self.config.retryable_tools,
            attempt,
        )?;
        let key = match session {
            Some(session) => Key::Session(session),
            None => self.supervisor.pool_key(),
        };
        let token = params
            .as_ref()
            .and_then(|p| p.pointer("/_meta/progressToken"))
            .cloned();
        let sink = Sink::new(notifications, token, questions.clone());
        let mut resends = 0;
        loop {
            if let Some(questions) = &questions {
                // A fresh process asks from its first question again.
                questions.restart().await;
            }
            let child = self
                .supervisor
                .child(&key, client.as_ref(), outbox.as_ref())
                .await
                .map_err(|error| unavailable(&error))?;
            let call = child.call(&method, params.clone(), Some(sink.clone()), &cancel);
            let outcome = match self.config.request_timeout {
                Some(limit) => match tokio::time::timeout(limit, call).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        child.notify("notifications/cancelled", None);
                        return Err(UpstreamError {
                            code: code::UPSTREAM_UNAVAILABLE,
                            message: format!(
                                "the upstream did not answer {method} within {limit:?}"
                            ),
                            data: None,
                        });
                    }
                },
                None => call.await,
            };
            match outcome {
                Ok(result) => {
                    self.supervisor.record(&key, false);
                    if method == "tools/list" {
                        self.learn_tools(&result);
                    }
                    return Ok(result);
                }
                Err(CallError::Upstream(error)) => return Err(error),
                Err(CallError::Cancelled) => {
                    return Err(UpstreamError {
                        code: code::SERVER_ERROR,
                        message: "request cancelled".into(),
                        data: None,
                    });
                }
                Err(CallError::Gone) => {
                    tracing::warn!(?key, pid = ?child.pid(), %method, resend = ?resending.rule, "the upstream process exited before it answered");
                    self.supervisor.record(&key, true);
                    resending.after_lost(
                        resends,
                        self.config.max_resends,
                        Interruption::ChildExited,
                        "its upstream process exited before it answered",
                    )?;
                    resends += 1;
                }
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Upstream for Proxy {
    fn info(&self) -> Value {
        self.0.info.clone()
    }

    fn tool(&self, name: &str) -> Option<Value> {
        self.0.tool(name)
    }

    fn request(
        &self,
        request: UpstreamRequest,
    ) -> BoxFuture<'static, Result<Value, UpstreamError>> {
        Box::pin(Arc::clone(&self.0).forward(request))
    }

    /// The pool's children subscribe to `uris` while the listen stream lives (every live
    /// one now, each one that starts later); a pool child is started if none runs.
    fn follow(&self, uris: Vec<String>, outbox: Option<Outbox>) -> Box<dyn Send> {
        let shared = &self.0;
        if let Some(outbox) = outbox {
            let _ = shared.supervisor.pool.outbox.set(outbox);
        }
        let new = shared.supervisor.pool.follow(&uris);
        if !uris.is_empty() && !shared.supervisor.pool_running() {
            // It subscribes to every followed URI as it starts.
            let proxy = Arc::clone(shared);
            tokio::spawn(async move {
                if let Err(error) = proxy.supervisor.child(&Key::Pool(0), None, None).await {
                    tracing::warn!(%error, "could not start a pool process for a listen stream's resources");
                }
            });
        }
        shared
            .supervisor
            .pool_subscriptions("resources/subscribe", new);
        Box::new(Following {
            proxy: Arc::downgrade(shared),
            uris,
        })
    }
}

/// A listen stream's following of resources: dropped when the stream ends.
struct Following {
    proxy: std::sync::Weak<Shared>,
    uris: Vec<String>,
}

impl Drop for Following {
    fn drop(&mut self) {
        let Some(proxy) = self.proxy.upgrade() else {
            return;
        };
        let gone = proxy.supervisor.pool.unfollow(&self.uris);
        proxy
            .supervisor
            .pool_subscriptions("resources/unsubscribe", gone);
    }
}

impl Shared {
    fn tool(&self, name: &str) -> Option<Value> {
        tool(&self.tools, name)
    }
}

/// Remember the tools of a `tools/list` result (their annotations decide re-sends).
/// Run `reap` on `owner` every quarter of `idle_stop` (between 100 ms and 30 s), until
/// `owner` is dropped: the idle stop of both upstreams (children, HTTP sessions).
fn reap_idle<T, F, Fut>(owner: &Arc<T>, idle_stop: Duration, reap: F) -> tokio::task::JoinHandle<()>
where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let weak = Arc::downgrade(owner);
    let every = (idle_stop / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(every);
        loop {
            ticker.tick().await;
            let Some(owner) = weak.upgrade() else { return };
            reap(owner).await;
        }
    })
}

fn learn_tools(known: &RwLock<HashMap<String, Value>>, result: &Value) {
    let Some(tools) = result.get("tools").and_then(Value::as_array) else {
        return;
    };
    let mut known = known.write().unwrap_or_else(|p| p.into_inner());
    for tool in tools {
        if let Some(name) = tool.get("name").and_then(Value::as_str) {
            known.insert(name.to_owned(), tool.clone());
        }
    }
}

/// The tool `name` as last listed.
fn tool(known: &RwLock<HashMap<String, Value>>, name: &str) -> Option<Value> {
    known
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .cloned()
}

/// A forwarded request's re-send rule (by its method, its tool's annotations and
/// `--retryable-tool`), the same for every kind of upstream.
struct Resending<'a> {
    method: &'a str,
    /// The tool of a `tools/call`, named in the interrupted error.
    tool: Option<String>,
    rule: policy::Resend,
}

impl<'a> Resending<'a> {
    /// The rule of `method` with `params`. A re-run after the worker that forwarded the
    /// request died (`attempt` 2 and later) reaches the upstream only when the rule allows a
    /// re-send: the upstream may have acted on it already. Otherwise it is the interrupted
    /// error (D7).
    fn of(
        method: &'a str,
        params: Option<&Value>,
        tools: &RwLock<HashMap<String, Value>>,
        retryable: &[String],
        attempt: u32,
    ) -> Result<Self, UpstreamError> {
        let tool_name = (method == "tools/call").then(|| {
            params
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        });
        let annotated = tool_name.as_deref().and_then(|name| tool(tools, name));
        let resending = Resending {
            method,
            rule: policy::resend(method, params, annotated.as_ref(), retryable),
            tool: tool_name,
        };
        if attempt > 1 {
            resending.after_lost(
                0,
                u32::MAX,
                Interruption::WorkerStopped,
                "the worker forwarding it stopped before the upstream answered",
            )?;
        }
        Ok(resending)
    }

    /// After the upstream's answer was lost (`cause`): `Ok` to send the request again
    /// (counted), the interrupted error when the rule forbids it or `max` re-sends are
    /// spent.
    fn after_lost(
        &self,
        resends: u32,
        max: u32,
        cause: Interruption,
        why: &str,
    ) -> Result<(), UpstreamError> {
        if !self.rule.allowed() || resends >= max {
            // Allowed, yet not sent again: `--max-resends` is reached.
            crate::metrics::interrupted(cause, self.rule.allowed());
            return Err(interrupted(self.method, self.tool.as_deref(), why));
        }
        crate::metrics::resent(cause, self.rule);
        Ok(())
    }
}

/// The error of a request that was interrupted and not sent again.
fn interrupted(method: &str, tool: Option<&str>, why: &str) -> UpstreamError {
    let what = match tool {
        Some(tool) => format!("tools/call {tool:?}"),
        None => method.to_owned(),
    };
    UpstreamError {
        code: code::UPSTREAM_INTERRUPTED,
        message: format!(
            "{what} was interrupted and not retried: {why}, and it is not known to be safe to run again (not read-only or idempotent); it may or may not have taken effect"
        ),
        data: Some(json!({"interrupted": true, "retried": false, "method": method, "tool": tool})),
    }
}

fn unavailable(error: &ProxyError) -> UpstreamError {
    UpstreamError {
        code: code::UPSTREAM_UNAVAILABLE,
        message: format!("the upstream is unavailable: {error}"),
        data: None,
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

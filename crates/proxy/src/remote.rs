//! A Streamable HTTP upstream (`durable-mcp proxy --upstream URL`): the same
//! [`Upstream`] as the stdio [`crate::Proxy`], over HTTP sessions instead of processes.
//!
//! Each legacy client session gets an upstream session of its own (an `Mcp-Session-Id`
//! from the upstream, if it uses them), initialized with the session's stored `initialize`
//! params on the worker that serves it; 2026-07-28 requests share one session of the
//! proxy's own. The upstream is spoken to in the 2025 era (it is initialized), so any
//! server that speaks 2025-03-26, 2025-06-18 or 2025-11-25 is an upstream, with JSON or SSE
//! answers. When the upstream answers 404 for a session (it restarted, or expired the
//! session) the session is initialized again and the request sent again: a 404 means the
//! upstream did not run it. What the upstream sends on a request's SSE answer is that
//! request's: its progress and log messages go to the client, its questions are relayed
//! (asked once, [`durable_mcp_handler::Questions`]). A stream that ends before the
//! answer is resumed with `Last-Event-ID` when the upstream names its events.
//!
//! # Durability
//! In plain words: the same as for a stdio upstream. Stated more precisely: a request whose
//! answer did not come (the connection broke, the stream ended and could not be resumed)
//! is sent again only when [`policy::resend`] allows it, at most
//! [`HttpProxyConfig::max_resends`] times, otherwise its outcome is the interrupted
//! error; after the worker died (attempt 2 and later) the same rule decides whether the
//! engine's re-run reaches the upstream at all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use durable_mcp_handler::context::BoxFuture;
use durable_mcp_handler::{Upstream, UpstreamError, UpstreamRequest};
use durable_mcp_protocol::jsonrpc::code;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::child::Sink;
use crate::http::{Body, Endpoint, HttpError, Reply};
use crate::metrics::Interruption;
use crate::supervisor::{Key, initialize_params};
use crate::{ProxyError, Resending, unavailable};

/// How `durable-mcp proxy --upstream URL` speaks to its upstream.
#[derive(Debug, Clone)]
pub struct HttpProxyConfig {
    /// The upstream's Streamable HTTP endpoint (`http[s]://host:port/path`).
    pub url: String,
    /// More trust anchors (PEM certificates) for an `https://` upstream, besides the
    /// built-in Mozilla roots: an upstream with a private CA.
    pub tls_roots_pem: Option<String>,
    /// End an upstream session that served no request for this long (default 5 minutes).
    pub idle_stop: Duration,
    /// Tools sent again after an interruption although their annotations do not say it is
    /// safe (`--retryable-tool`).
    pub retryable_tools: Vec<String>,
    /// How long the upstream has to answer `initialize` (default 30 s).
    pub init_timeout: Duration,
    /// How many times one request is sent again after an interruption (default 2).
    pub max_resends: u32,
    /// Answer a request with an error if the upstream has not answered it within this time.
    pub request_timeout: Option<Duration>,
}

impl HttpProxyConfig {
    /// The defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            tls_roots_pem: None,
            idle_stop: Duration::from_secs(300),
            retryable_tools: Vec::new(),
            init_timeout: Duration::from_secs(30),
            max_resends: 2,
            request_timeout: None,
        }
    }
}

/// A Streamable HTTP upstream: an [`Upstream`] for [`durable_mcp_handler::Forward`].
#[derive(Clone)]
pub struct HttpProxy(Arc<Remote>);

impl std::fmt::Debug for HttpProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProxy")
            .field("url", &self.0.config.url)
            .finish_non_exhaustive()
    }
}

/// One upstream session as this worker knows it.
#[derive(Debug, Clone, PartialEq)]
struct Link {
    /// Its `Mcp-Session-Id` (none for an upstream without sessions).
    session: Option<String>,
    /// The version the upstream answered `initialize` with.
    version: String,
}

/// A key's upstream session: initialized under the lock, on first use.
#[derive(Default)]
struct Slot {
    link: tokio::sync::Mutex<Option<Link>>,
    last_used: Mutex<Option<Instant>>,
    in_flight: AtomicU64,
}

struct Remote {
    endpoint: Endpoint,
    config: HttpProxyConfig,
    /// The upstream's `initialize` result.
    info: Value,
    tools: RwLock<HashMap<String, Value>>,
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    next_id: AtomicU64,
}

/// Why a call did not give the upstream's answer.
enum CallError {
    Upstream(UpstreamError),
    /// The upstream does not know the session (404): it did not run the request.
    SessionGone,
    /// The upstream could not be reached: the request was not sent.
    Unreachable(String),
    /// The answer did not come (the connection or the stream broke).
    Gone(String),
    Cancelled,
}

impl From<HttpError> for CallError {
    fn from(error: HttpError) -> Self {
        match error {
            HttpError::SessionGone => CallError::SessionGone,
            HttpError::Connect(why) => CallError::Unreachable(why),
            HttpError::Io(why) => CallError::Gone(why),
            other => CallError::Upstream(UpstreamError {
                code: code::INTERNAL_ERROR,
                message: other.to_string(),
                data: None,
            }),
        }
    }
}

impl HttpProxy {
    /// Initialize a session with the upstream (its capabilities and tool annotations become
    /// the proxy's), so that an upstream that cannot be reached fails here.
    pub async fn start(config: HttpProxyConfig) -> Result<HttpProxy, ProxyError> {
        let endpoint = Endpoint::parse(&config.url, config.tls_roots_pem.as_deref())?;
        let mut remote = Remote {
            endpoint,
            config,
            info: Value::Null,
            tools: RwLock::default(),
            slots: Mutex::default(),
            next_id: AtomicU64::new(1),
        };
        let (link, info) = remote.initialize(None).await?;
        if !info.is_object() {
            return Err(ProxyError::Protocol(format!(
                "its initialize result is not an object: {info}"
            )));
        }
        remote.info = info;
        let pool = Arc::new(Slot::default());
        *pool.link.lock().await = Some(link.clone());
        crate::lock(&remote.slots).insert(Key::Pool(0), pool);
        let remote = Arc::new(remote);
        if remote.info.pointer("/capabilities/tools").is_some() {
            match remote
                .call(&link, "tools/list", None, None, &CancellationToken::new())
                .await
            {
                Ok(result) => crate::learn_tools(&remote.tools, &result),
                Err(_) => tracing::warn!(
                    "the upstream did not list its tools: no tool is sent again after an interruption"
                ),
            }
        }
        // Ends with the last clone (it holds the upstream weakly).
        crate::reap_idle(&remote, remote.config.idle_stop, |remote| async move {
            remote.end_idle().await
        });
        Ok(HttpProxy(remote))
    }

    /// Upstream sessions this worker holds now.
    pub fn sessions(&self) -> usize {
        crate::lock(&self.0.slots).len()
    }
}

impl Remote {
    /// `initialize` a new upstream session with `client`'s params (the proxy's own if none).
    async fn initialize(&self, client: Option<&Value>) -> Result<(Link, Value), ProxyError> {
        let message = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params(client)});
        let deadline = self.config.init_timeout;
        let exchange = async {
            let reply = self.endpoint.post(&message, None, None, deadline).await?;
            let session = reply.session.clone();
            let result = match answer_of(reply, &json!(0)).await {
                Some(Ok(result)) => result,
                Some(Err(error)) => return Err(ProxyError::Initialize(error.to_string())),
                None => return Err(ProxyError::Initialize("no answer to `initialize`".into())),
            };
            let version = result
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or("2025-03-26")
                .to_owned();
            let link = Link { session, version };
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            self.endpoint
                .post(
                    &initialized,
                    link.session.as_deref(),
                    Some(&link.version),
                    deadline,
                )
                .await?;
            tracing::info!(session = ?link.session, version = %link.version, "upstream session initialized");
            Ok((link, result))
        };
        tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| {
                ProxyError::Initialize(format!("no answer to `initialize` within {deadline:?}"))
            })?
    }

    fn slot(&self, key: &Key) -> Arc<Slot> {
        Arc::clone(crate::lock(&self.slots).entry(key.clone()).or_default())
    }

    /// The upstream session of `key`, initialized if it has none.
    async fn link(&self, slot: &Slot, client: Option<&Value>) -> Result<Link, ProxyError> {
        let mut link = slot.link.lock().await;
        if let Some(link) = &*link {
            return Ok(link.clone());
        }
        let (fresh, _) = self.initialize(client).await?;
        *link = Some(fresh.clone());
        Ok(fresh)
    }

    /// Forget `stale` (the upstream answered 404 for it), unless it was replaced already.
    async fn expire(&self, slot: &Slot, stale: &Link) {
        let mut link = slot.link.lock().await;
        if link.as_ref() == Some(stale) {
            tracing::info!(session = ?stale.session, "the upstream forgot the session: initializing it again");
            *link = None;
        }
    }

    /// End the upstream sessions idle for longer than the configured time.
    async fn end_idle(&self) {
        let idle: Vec<(Key, Arc<Slot>)> = crate::lock(&self.slots)
            .iter()
            .filter(|(key, slot)| {
                **key != Key::Pool(0)
                    && slot.in_flight.load(Ordering::SeqCst) == 0
                    && crate::lock(&slot.last_used)
                        .is_some_and(|t| t.elapsed() >= self.config.idle_stop)
            })
            .map(|(k, s)| (k.clone(), Arc::clone(s)))
            .collect();
        for (key, slot) in idle {
            crate::lock(&self.slots).remove(&key);
            if let Some(Link {
                session: Some(session),
                version,
            }) = slot.link.lock().await.take()
            {
                tracing::debug!(?key, %session, "ending an idle upstream session");
                self.endpoint.delete(&session, Some(&version)).await;
            }
        }
    }

    /// Send one request in `link` and read its answer, forwarding what the upstream sends
    /// for it into `sink`.
    async fn call(
        &self,
        link: &Link,
        method: &str,
        params: Option<Value>,
        sink: Option<&Sink>,
        cancel: &CancellationToken,
    ) -> Result<Value, CallError> {
        let id = json!(format!(
            "dmcp-{}",
            self.next_id.fetch_add(1, Ordering::SeqCst)
        ));
        let mut params = params;
        if sink.is_some_and(Sink::has_token)
            && let Some(meta) = params
                .as_mut()
                .and_then(|p| p.get_mut("_meta"))
                .and_then(Value::as_object_mut)
        {
            // The proxy's own token: clients of the shared session may use the same ones.
            meta.insert("progressToken".into(), id.clone());
        }
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        // Without --request-timeout-secs, a day bounds only the wait for the answer's head.
        let deadline = self
            .config
            .request_timeout
            .unwrap_or(Duration::from_secs(86_400));
        let ended = CancellationToken::new();
        let _ended = ended.clone().drop_guard();
        let exchange = async {
            let reply = self
                .endpoint
                .post(
                    &message,
                    link.session.as_deref(),
                    Some(&link.version),
                    deadline,
                )
                .await?;
            let mut events = match reply.body {
                Body::Json(answer) => {
                    return response(&answer, &id).ok_or_else(|| {
                        CallError::Gone("a JSON answer without the response".into())
                    })?;
                }
                Body::Accepted => {
                    return Err(CallError::Gone(
                        "the upstream accepted a request without answering it".into(),
                    ));
                }
                Body::Stream(events) => events,
            };
            let mut resumes = 0;
            loop {
                match events.next().await {
                    Ok(Some(message)) => {
                        if let Some(outcome) = response(&message, &id) {
                            return outcome;
                        }
                        self.received(link, message, &id, sink, &ended);
                    }
                    outcome => {
                        // The stream ended (or broke) before the answer: resume it if we can.
                        let why = match outcome {
                            Err(error) => error.to_string(),
                            _ => "the upstream's stream ended before its answer".to_owned(),
                        };
                        let Some(last) = events.last_id.clone().filter(|_| resumes < 3) else {
                            return Err(CallError::Gone(why));
                        };
                        resumes += 1;
                        tokio::time::sleep(Duration::from_millis(100 * resumes)).await;
                        tracing::debug!(%why, %last, "resuming the upstream's stream");
                        events = match self
                            .endpoint
                            .resume(
                                &last,
                                link.session.as_deref(),
                                Some(&link.version),
                                deadline,
                            )
                            .await?
                        {
                            Reply {
                                body: Body::Stream(events),
                                ..
                            } => events,
                            _ => return Err(CallError::Gone(why)),
                        };
                    }
                }
            }
        };
        let (outcome, why) = tokio::select! {
            outcome = exchange => return outcome,
            () = cancel.cancelled() => (Err(CallError::Cancelled), "cancelled by the client"),
            () = elapsed(self.config.request_timeout) => {
                let timeout = UpstreamError { code: code::UPSTREAM_UNAVAILABLE, message: format!("the upstream did not answer {method} within {deadline:?}"), data: None };
                (Err(CallError::Upstream(timeout)), "the proxy's --request-timeout-secs")
            }
        };
        let notice = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": why}});
        let (endpoint, link) = (self.endpoint.clone(), link.clone());
        tokio::spawn(async move {
            let _ = endpoint
                .post(
                    &notice,
                    link.session.as_deref(),
                    Some(&link.version),
                    Duration::from_secs(5),
                )
                .await;
        });
        outcome
    }

    /// A message on a request's stream that is not its answer: its progress or log message
    /// (for the client), or a question of the upstream's (relayed; its answer POSTed back).
    fn received(
        &self,
        link: &Link,
        message: Value,
        id: &Value,
        sink: Option<&Sink>,
        ended: &CancellationToken,
    ) {
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (method, message.get("id").cloned()) {
            (Some(method), None) => {
                // Its progress and its log messages; other notifications (list changes,
                // resource updates) are not forwarded, as from a stdio upstream.
                let mine = match method.as_str() {
                    "notifications/progress" => {
                        message.pointer("/params/progressToken") == Some(id)
                    }
                    "notifications/message" => true,
                    _ => false,
                };
                if let (true, Some(sink)) = (mine, sink) {
                    sink.forward(message);
                }
            }
            (Some(method), Some(question)) => {
                let questions = sink.and_then(Sink::questions);
                let (endpoint, link, ended) = (self.endpoint.clone(), link.clone(), ended.clone());
                let params = message.get("params").cloned().unwrap_or_else(|| json!({}));
                tokio::spawn(async move {
                    let body = match (method.as_str(), questions) {
                        ("ping", _) => json!({"result": {}}),
                        (_, Some(questions)) => tokio::select! {
                            body = questions.ask(&method, params) => body,
                            () = ended.cancelled() => return,
                        },
                        (_, None) => crate::child::refusal(&method),
                    };
                    let mut reply = json!({"jsonrpc": "2.0", "id": question});
                    if let (Some(reply), Value::Object(body)) = (reply.as_object_mut(), body) {
                        reply.extend(body);
                    }
                    if let Err(error) = endpoint
                        .post(
                            &reply,
                            link.session.as_deref(),
                            Some(&link.version),
                            Duration::from_secs(30),
                        )
                        .await
                    {
                        tracing::warn!(%error, "the answer to an upstream's question could not be sent to it");
                    }
                });
            }
            _ => {}
        }
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
            outbox: _,
        } = request;
        let resending = Resending::of(
            &method,
            params.as_ref(),
            &self.tools,
            &self.config.retryable_tools,
            attempt,
        )?;
        let key = session.map_or(Key::Pool(0), Key::Session);
        let slot = self.slot(&key);
        slot.in_flight.fetch_add(1, Ordering::SeqCst);
        let _used = Used(&slot);
        let token = params
            .as_ref()
            .and_then(|p| p.pointer("/_meta/progressToken"))
            .cloned();
        let sink = Sink::new(notifications, token, questions.clone());
        let (mut resends, mut sessions) = (0, 0);
        loop {
            if let Some(questions) = &questions {
                // Sent again: the upstream asks from its first question again.
                questions.restart().await;
            }
            let link = self
                .link(&slot, client.as_ref())
                .await
                .map_err(|error| unavailable(&error))?;
            match self
                .call(&link, &method, params.clone(), Some(&sink), &cancel)
                .await
            {
                Ok(result) => {
                    if method == "tools/list" {
                        crate::learn_tools(&self.tools, &result);
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
                Err(CallError::Unreachable(why)) => {
                    return Err(UpstreamError {
                        code: code::UPSTREAM_UNAVAILABLE,
                        message: format!("the upstream is unavailable: {why}"),
                        data: None,
                    });
                }
                Err(CallError::SessionGone) => {
                    self.expire(&slot, &link).await;
                    sessions += 1;
                    if sessions > 2 {
                        return Err(UpstreamError {
                            code: code::UPSTREAM_UNAVAILABLE,
                            message: "the upstream keeps forgetting its sessions".into(),
                            data: None,
                        });
                    }
                }
                Err(CallError::Gone(why)) => {
                    tracing::warn!(?key, %method, resend = ?resending.rule, %why, "the upstream's answer did not come");
                    resending.after_lost(
                        resends,
                        self.config.max_resends,
                        Interruption::AnswerLost,
                        &format!("its answer did not come ({why})"),
                    )?;
                    resends += 1;
                    tokio::time::sleep(crate::supervisor::backoff(resends)).await;
                }
            }
        }
    }
}

/// Fires after `limit`; never without one (no timer is set).
async fn elapsed(limit: Option<Duration>) {
    match limit {
        Some(limit) => tokio::time::sleep(limit).await,
        None => std::future::pending().await,
    }
}

/// Marks a key's session used while a request is in flight on it.
struct Used<'a>(&'a Slot);

impl Drop for Used<'_> {
    fn drop(&mut self) {
        *crate::lock(&self.0.last_used) = Some(Instant::now());
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The outcome in `message` if it is the response to `id`.
fn response(message: &Value, id: &Value) -> Option<Result<Value, CallError>> {
    if message.get("method").is_some() || message.get("id") != Some(id) {
        return None;
    }
    Some(crate::child::outcome(message).map_err(CallError::Upstream))
}

/// The answer to request `id` in a reply (its JSON body, or the first response on its stream).
async fn answer_of(reply: Reply, id: &Value) -> Option<Result<Value, UpstreamError>> {
    let found = |message: &Value| match response(message, id)? {
        Ok(result) => Some(Ok(result)),
        Err(CallError::Upstream(error)) => Some(Err(error)),
        Err(_) => None,
    };
    match reply.body {
        Body::Json(message) => found(&message),
        Body::Accepted => None,
        Body::Stream(mut events) => loop {
            match events.next().await {
                Ok(Some(message)) => {
                    if let Some(answer) = found(&message) {
                        return Some(answer);
                    }
                }
                _ => return None,
            }
        },
    }
}

impl Upstream for HttpProxy {
    fn info(&self) -> Value {
        self.0.info.clone()
    }

    fn tool(&self, name: &str) -> Option<Value> {
        crate::tool(&self.0.tools, name)
    }

    fn request(
        &self,
        request: UpstreamRequest,
    ) -> BoxFuture<'static, Result<Value, UpstreamError>> {
        Box::pin(Arc::clone(&self.0).forward(request))
    }
}

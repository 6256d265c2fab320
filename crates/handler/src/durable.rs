//! The durable context a handler gets for each journaled request: steps that run once,
//! questions asked once, progress and logs that are not repeated, durable sleep and a
//! cancellation signal.
//!
//! A handler written with rmcp's macros takes it with the `Extension` extractor:
//!
//! ```no_run
//! use durable_mcp_handler::Durable;
//! use rmcp::handler::server::tool::Extension;
//! use rmcp::model::{CallToolResult, ContentBlock};
//! use rmcp::{ErrorData as McpError, tool, tool_router};
//!
//! /// A payment service that deduplicates charges by idempotency key.
//! async fn charge_card(cents: u64, idempotency_key: &str) -> String {
//!     format!("receipt-{cents}-{idempotency_key}")
//! }
//!
//! #[derive(Clone)]
//! struct Shop;
//!
//! #[tool_router]
//! impl Shop {
//!     #[tool(description = "Charge a card, once")]
//!     async fn charge(&self, Extension(durable): Extension<Durable>) -> Result<CallToolResult, McpError> {
//!         let receipt: String = durable
//!             .step("charge", |key| async move { charge_card(100, key.idempotency_key()).await })
//!             .await?;
//!         Ok(CallToolResult::success(vec![ContentBlock::text(receipt)]))
//!     }
//! }
//! ```
//!
//! (`examples/durable-steps` in the repository is a whole server.)
//!
//! # The rule: code between steps may run again
//!
//! If the worker running a request dies, another worker (or the same one, restarted) runs
//! the handler again from the top. Every step whose result was committed returns that
//! result at once, without running its closure; every question already answered returns
//! the answer without asking. Everything else runs again. So:
//!
//! - put every effect on the outside world (a payment, an e-mail, a file append, a call to
//!   another service) inside a [`Durable::step`], and pass [`StepKey::idempotency_key`] to
//!   the other system where it accepts one: a step interrupted before its commit runs
//!   again with the same key;
//! - make the code between steps deterministic: the same steps, questions, progress and
//!   log calls in the same order on every run. Read the clock, random numbers or anything
//!   that changes inside a step, never between steps;
//! - step names are unique within a request (`"charge"`, `format!("line-{i}")`).
//!
//! Questions, progress and log messages are numbered in the order they are made, which is
//! why that order must not change between runs.
//!
//! Notifications a handler sends through rmcp's peer instead are not numbered, but a
//! re-run does not repeat them either (D7): the engine drops a re-run's progress that is
//! not above what its stream already holds for the token, and any other notification
//! identical to one already on the stream (`docs/durable-execution.md`, "Notifications of
//! a re-run").

// Sampling, roots and logging are deprecated upstream (SEP-2577) but still part of the
// protocol versions durable-mcp serves.
#![allow(deprecated)]

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ListRootsResult, LoggingLevel,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::context::BoxFuture;
use crate::state_keys::StateKeys;

/// The JSON-RPC error code a handler's run ends with when it must wait for client input
/// in the stateless era; the engine replaces that outcome with an `input_required` result.
pub const SUSPENDED_CODE: i32 = -32_099;

/// Why a durable operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DurableError {
    /// The store could not commit or read the journal. The request fails; nothing
    /// half-done is visible, and a re-run starts from the last committed step.
    #[error("journal unavailable: {0}")]
    Journal(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// A committed result does not decode as the type asked for (the step's type changed
    /// between deployments, say).
    #[error("step {name:?}: stored result does not decode: {source}")]
    Decode {
        /// The step or question.
        name: String,
        /// The decoding error.
        source: serde_json::Error,
    },
    /// A step's result could not be encoded.
    #[error("step {name:?}: result does not encode: {source}")]
    Encode {
        /// The step.
        name: String,
        /// The encoding error.
        source: serde_json::Error,
    },
    /// The request was cancelled (D11).
    #[error("the request was cancelled")]
    Cancelled,
    /// The client answered a question with a JSON-RPC error.
    #[error("the client refused {method}: {message} ({code})")]
    Refused {
        /// The question's method.
        method: String,
        /// The client's error code.
        code: i64,
        /// The client's error message.
        message: String,
    },
    /// The request must wait for the client's input (stateless era): return this error
    /// from the handler (`?` does it) and durable-mcp answers `input_required`; the retry
    /// continues from the last committed step.
    #[error("waiting for the client's input")]
    InputRequired,
    /// The request failed in a way a retry after a fix may mend (a service it needs is
    /// down, a bug): return it from the handler ([`DurableError::retryable`]) and, where
    /// the client can read a later outcome (a legacy session's stream, a task), durable-mcp
    /// parks the run for an operator instead of answering. `durable-mcp runs retry` runs it
    /// again with its committed steps replayed. A stateless request's client gets the error.
    #[error("{0}")]
    Retryable(String),
}

impl DurableError {
    /// A [`DurableError::Retryable`] saying `message`.
    pub fn retryable(message: impl Into<String>) -> Self {
        DurableError::Retryable(message.into())
    }
}

impl From<DurableError> for rmcp::ErrorData {
    fn from(error: DurableError) -> Self {
        match error {
            DurableError::InputRequired => rmcp::ErrorData::new(
                rmcp::model::ErrorCode(SUSPENDED_CODE),
                "waiting for the client's input",
                Some(json!({durable_mcp_protocol::meta::SUSPENDED: true})),
            ),
            DurableError::Retryable(message) => rmcp::ErrorData::internal_error(
                message,
                Some(json!({durable_mcp_protocol::meta::RETRYABLE: true})),
            ),
            DurableError::Cancelled => {
                rmcp::ErrorData::new(rmcp::model::ErrorCode(-32_800), error.to_string(), None)
            }
            other => rmcp::ErrorData::internal_error(other.to_string(), None),
        }
    }
}

/// A change of the server that every `subscriptions/listen` stream (2026-07-28) may want
/// to hear of, on every worker: see [`Durable::announce`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerChange {
    /// `notifications/tools/list_changed`.
    ToolsListChanged,
    /// `notifications/prompts/list_changed`.
    PromptsListChanged,
    /// `notifications/resources/list_changed`.
    ResourcesListChanged,
    /// `notifications/resources/updated` for this URI.
    ResourceUpdated(String),
}

/// The engine's side of a durable context: where steps, answers and emitted messages of
/// one journaled request are committed.
pub trait DurableBackend: Send + Sync + 'static {
    /// The journaled request's id, stable across re-runs.
    fn run_id(&self) -> &str;
    /// Which run of the request this is: 1 for the first, 2 after one recovery, ...
    fn attempt(&self) -> u32;
    /// The committed result of step `name`, if any.
    fn load_step<'a>(&'a self, name: &'a str)
    -> BoxFuture<'a, Result<Option<Value>, DurableError>>;
    /// Commit `value` as step `name`'s result, which its body took `ran` to produce,
    /// unless one is already committed; returns the committed result (the first commit
    /// wins).
    fn commit_step<'a>(
        &'a self,
        name: &'a str,
        value: Value,
        ran: std::time::Duration,
    ) -> BoxFuture<'a, Result<Value, DurableError>>;
    /// Ask the client question number `index` (`elicitation/create`, ...) and return the
    /// client's response (the whole JSON-RPC response object), asking at most once per
    /// run unless unanswered at recovery.
    fn ask<'a>(
        &'a self,
        index: u64,
        method: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, DurableError>>;
    /// Send notification number `index` unless an earlier run already sent it.
    fn emit<'a>(
        &'a self,
        index: u64,
        method: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<(), DurableError>>;
    /// Turn this request into a task (2026-07-28 Tasks extension): `Ok(true)` once the
    /// task is committed and its create result sent; `Ok(false)` if the client cannot use
    /// tasks (the request goes on synchronously).
    fn start_task(&self) -> BoxFuture<'_, Result<bool, DurableError>>;
    /// Fires when the request is cancelled.
    fn cancellation(&self) -> CancellationToken;
    /// The request's progress token, if it has one.
    fn progress_token(&self) -> Option<Value>;
    /// Announce a server change to the listen streams of every worker.
    fn announce(&self, change: ServerChange) -> BoxFuture<'_, Result<(), DurableError>>;
    /// Wait until the request is journaled (see [`Durable::journaled`]). The default: it
    /// always is.
    fn journaled(&self) -> BoxFuture<'_, Result<(), DurableError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The durable context of one journaled request. Cheap to clone; clones share the
/// question and message counters.
#[derive(Clone)]
pub struct Durable {
    backend: Arc<dyn DurableBackend>,
    questions: Arc<AtomicU64>,
    messages: Arc<AtomicU64>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable")
            .field("run", &self.backend.run_id())
            .field("attempt", &self.backend.attempt())
            .finish()
    }
}

/// What a step's closure gets: the step's stable identity.
#[derive(Debug, Clone)]
pub struct StepKey {
    key: String,
    attempt: u32,
}

impl StepKey {
    /// A key that is the same every time this step of this request runs, and different for
    /// every other step and request: pass it to external systems that deduplicate.
    ///
    /// Pass the whole key: it is `<run id>:<step name>`, and a run id begins with the time
    /// its request was journaled, so a prefix of the key is shared by other runs.
    pub fn idempotency_key(&self) -> &str {
        &self.key
    }

    /// Which run of the request is executing the step (1 = first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// How a [`Durable::retry_step`] retries failures before committing the last one.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Tries in all, the first included (at least 1).
    pub max_attempts: u32,
    /// Wait before the second try; doubled after each failure.
    pub initial_backoff: Duration,
    /// Longest wait between tries.
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

fn decode<T: DeserializeOwned>(name: &str, value: Value) -> Result<T, DurableError> {
    serde_json::from_value(value).map_err(|source| DurableError::Decode {
        name: name.to_owned(),
        source,
    })
}

impl Durable {
    /// A context over `backend` (the engine builds it; handlers receive it).
    pub fn new(backend: Arc<dyn DurableBackend>) -> Self {
        Self {
            backend,
            questions: Arc::default(),
            messages: Arc::default(),
        }
    }

    /// The journaled request's id, stable across re-runs.
    pub fn run_id(&self) -> &str {
        self.backend.run_id()
    }

    /// Which run of the request this is: 1 for the first, 2 after one recovery, ...
    pub fn attempt(&self) -> u32 {
        self.backend.attempt()
    }

    /// The idempotency key of step `name` (the one its closure receives).
    pub fn idempotency_key(&self, name: &str) -> String {
        format!("{}:{name}", self.backend.run_id())
    }

    fn key(&self, name: &str) -> StepKey {
        StepKey {
            key: self.idempotency_key(name),
            attempt: self.backend.attempt(),
        }
    }

    /// Run `f` once: if step `name` has a committed result (from this run or an earlier
    /// one), return it without running `f`; otherwise run `f`, commit its result, and
    /// return it (D8). An error your closure returns inside `T` (`T = Result<_, _>`) is a
    /// result like any other: committed, and returned on every re-run. Use
    /// [`Durable::retry_step`] to retry failures before committing.
    ///
    /// If the worker dies while `f` runs, `f` runs again on recovery, with the same
    /// [`StepKey::idempotency_key`].
    pub async fn step<T, F, Fut>(&self, name: &str, f: F) -> Result<T, DurableError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(StepKey) -> Fut,
        Fut: Future<Output = T>,
    {
        if let Some(stored) = self.backend.load_step(name).await? {
            return decode(name, stored);
        }
        if self.backend.cancellation().is_cancelled() {
            return Err(DurableError::Cancelled);
        }
        let started = std::time::Instant::now();
        let value = f(self.key(name)).await;
        let ran = started.elapsed();
        let encoded = serde_json::to_value(&value).map_err(|source| DurableError::Encode {
            name: name.to_owned(),
            source,
        })?;
        let committed = self.backend.commit_step(name, encoded, ran).await?;
        decode(name, committed)
    }

    /// Like [`Durable::step`] for a fallible closure: failures are retried with exponential
    /// backoff (the same idempotency key every time), and the first success, or the last
    /// failure once `retry.max_attempts` are spent, is committed and returned.
    pub async fn retry_step<T, E, F, Fut>(
        &self,
        name: &str,
        retry: Retry,
        mut f: F,
    ) -> Result<Result<T, E>, DurableError>
    where
        T: Serialize + DeserializeOwned,
        E: Serialize + DeserializeOwned + std::fmt::Display,
        F: FnMut(StepKey) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let cancel = self.backend.cancellation();
        self.step(name, |key| async move {
            let mut backoff = retry.initial_backoff;
            let mut tries = 1;
            loop {
                match f(key.clone()).await {
                    Ok(value) => return Ok(value),
                    Err(error) if tries >= retry.max_attempts.max(1) || cancel.is_cancelled() => {
                        return Err(error);
                    }
                    Err(error) => {
                        tracing::debug!(%error, tries, "step failed; retrying");
                        tokio::select! {
                            () = tokio::time::sleep(backoff) => {}
                            () = cancel.cancelled() => {}
                        }
                        backoff = (backoff * 2).min(retry.max_backoff);
                        tries += 1;
                    }
                }
            }
        })
        .await
    }

    /// Sleep until `duration` after the first time this sleep was reached: a re-run after
    /// the wake-up time returns at once; one before it sleeps only the rest. Ends early
    /// with [`DurableError::Cancelled`] if the request is cancelled.
    pub async fn sleep(&self, name: &str, duration: Duration) -> Result<(), DurableError> {
        let wake_at_ms: u64 = self
            .step(&format!("sleep:{name}"), |_| async move {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or(0);
                now.saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
            })
            .await?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let rest = Duration::from_millis(wake_at_ms.saturating_sub(now));
        let cancel = self.backend.cancellation();
        tokio::select! {
            () = tokio::time::sleep(rest) => Ok(()),
            () = cancel.cancelled() => Err(DurableError::Cancelled),
        }
    }

    async fn ask_raw(&self, method: &str, params: Value) -> Result<Value, DurableError> {
        let index = self.questions.fetch_add(1, Ordering::SeqCst) + 1;
        let response = self.backend.ask(index, method, params).await?;
        if let Some(error) = response.get("error") {
            return Err(DurableError::Refused {
                method: method.to_owned(),
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            });
        }
        Ok(response.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Ask question number `index` (1, 2, ...) as it is, once (D9), and return the client's
    /// whole JSON-RPC response (`{"result": ...}` or `{"error": ...}`): for a relay that
    /// numbers the questions it passes on itself (the proxy's [`crate::forward::Questions`]).
    /// The typed [`Durable::elicit`], [`Durable::sample`] and [`Durable::list_roots`] number
    /// theirs in the order they are made; do not use both kinds in one request.
    pub async fn ask_at(
        &self,
        index: u64,
        method: &str,
        params: Value,
    ) -> Result<Value, DurableError> {
        self.backend.ask(index, method, params).await
    }

    /// Ask the client for input (`elicitation/create`), once (D9): the answer is committed
    /// when it arrives, at any worker; a re-run gets it without asking again. A question
    /// still unanswered when the worker died is asked again, with the same request id.
    pub async fn elicit(&self, params: ElicitRequestParams) -> Result<ElicitResult, DurableError> {
        let params = serde_json::to_value(params).map_err(|source| DurableError::Encode {
            name: "elicit".into(),
            source,
        })?;
        decode(
            "elicitation/create",
            self.ask_raw("elicitation/create", params).await?,
        )
    }

    /// Ask the client's model (`sampling/createMessage`), once (D9).
    pub async fn sample(
        &self,
        params: CreateMessageRequestParams,
    ) -> Result<CreateMessageResult, DurableError> {
        let params = serde_json::to_value(params).map_err(|source| DurableError::Encode {
            name: "sample".into(),
            source,
        })?;
        decode(
            "sampling/createMessage",
            self.ask_raw("sampling/createMessage", params).await?,
        )
    }

    /// Ask for the client's roots (`roots/list`), once (D9).
    pub async fn list_roots(&self) -> Result<ListRootsResult, DurableError> {
        decode("roots/list", self.ask_raw("roots/list", json!({})).await?)
    }

    /// Report progress (if the request has a progress token). Committed as an event of
    /// the request's stream; a re-run does not send it again.
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), DurableError> {
        let index = self.messages.fetch_add(1, Ordering::SeqCst) + 1;
        let Some(token) = self.backend.progress_token() else {
            return Ok(());
        };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        self.backend
            .emit(index, "notifications/progress", params)
            .await
    }

    /// Send a log message (filtered by the session's or request's log level like any
    /// other). A re-run does not send it again.
    pub async fn log(
        &self,
        level: LoggingLevel,
        logger: Option<&str>,
        data: Value,
    ) -> Result<(), DurableError> {
        let index = self.messages.fetch_add(1, Ordering::SeqCst) + 1;
        let mut params = json!({"level": level, "data": data});
        if let Some(logger) = logger {
            params["logger"] = json!(logger);
        }
        self.backend
            .emit(index, "notifications/message", params)
            .await
    }

    /// Go on as a durable task, if the client can use tasks (it declared the 2026-07-28
    /// Tasks extension): the task is committed, the client gets `resultType: "task"` now,
    /// and the rest of the handler runs as the task's work (its result becomes the task's,
    /// its questions the task's `inputRequests`). Returns whether it became a task; when
    /// not, the request simply goes on. A tool that asks questions before it becomes a task
    /// (a synchronous `input_required` round first) calls this after them. On a re-run of
    /// a request that already became a task it returns `true` at once.
    pub async fn start_task(&self) -> Result<bool, DurableError> {
        self.backend.start_task().await
    }

    /// Tell every `subscriptions/listen` stream (2026-07-28) on every worker that `change`
    /// happened: those whose accepted filter covers it get the notification, tagged with
    /// their subscription id. The announcement is committed to the store, so a listen
    /// stream served by another worker hears of it too (within a quarter of a second;
    /// at once on this worker). A server whose lists change at run time announces here
    /// instead of broadcasting in its own process, where only its own worker would hear.
    ///
    /// It is not a step: a re-run announces again, which is harmless (a list-changed
    /// notification only tells the client to read the list again). Legacy sessions are
    /// told through the request's peer, as in any rmcp server.
    pub async fn announce(&self, change: ServerChange) -> Result<(), DurableError> {
        self.backend.announce(change).await
    }

    /// Wait until the request is journaled (D6): a new request's journal entry is committed
    /// with its first durable effect (a step, a question, a message), so that a call that
    /// answers before any costs one commit; code between steps runs before it may be.
    /// Call this before an effect outside steps that must not happen for a request the
    /// journal does not know: from then on, a crash re-runs the request instead of leaving
    /// it to the client to send again. `Durable::step` and the questions do it themselves.
    pub async fn journaled(&self) -> Result<(), DurableError> {
        self.backend.journaled().await
    }

    /// Whether the request was cancelled (D11).
    pub fn is_cancelled(&self) -> bool {
        self.backend.cancellation().is_cancelled()
    }

    /// Completes when the request is cancelled (D11): `select!` on it around long work.
    pub fn cancelled(&self) -> WaitForCancellationFutureOwned {
        self.backend.cancellation().cancelled_owned()
    }
}

/// Seals the `requestState` of a journaled request that waits for the client's input in
/// the stateless era (D12): authenticated with the server's [`StateKeys`], bound to the
/// principal, the method and the request's parameters, and expiring.
#[derive(Debug, Clone)]
pub struct StateSealer {
    keys: StateKeys,
}

/// The prefix that marks a `requestState` as durable-mcp's own.
pub const SEALED_STATE_PREFIX: &str = "dmcp.";

/// Why a sealed state was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// It does not start with [`SEALED_STATE_PREFIX`].
    #[error("invalid requestState: not durable-mcp's")]
    Foreign,
    /// Forged, tampered, expired, bound to something else, or sealed with a key this
    /// server does not hold (any more).
    #[error("invalid requestState: {0}")]
    Refused(#[source] rmcp::model::RequestStateError),
    /// Authentic, but its payload is not JSON.
    #[error("invalid requestState: {0}")]
    Payload(#[source] serde_json::Error),
}

impl StateSealer {
    /// A sealer with `keys`: the current key seals, every key still in use opens.
    pub fn new(keys: StateKeys) -> Self {
        Self { keys }
    }

    /// Seal `payload`, bound to `binding`, valid for `ttl`.
    pub fn seal(&self, payload: &Value, binding: &[u8], ttl: Duration) -> String {
        let options = rmcp::model::SealOptions::new()
            .associated_data(binding)
            .ttl(ttl);
        let sealed = self
            .keys
            .codec()
            .seal_with(payload.to_string().as_bytes(), &options);
        format!("{SEALED_STATE_PREFIX}{sealed}")
    }

    /// Open a state sealed by [`StateSealer::seal`] with the same binding.
    pub fn open(&self, sealed: &str, binding: &[u8]) -> Result<Value, SealError> {
        let token = sealed
            .strip_prefix(SEALED_STATE_PREFIX)
            .ok_or(SealError::Foreign)?;
        let bytes = self
            .keys
            .codec()
            .open_with(token, binding)
            .map_err(SealError::Refused)?;
        serde_json::from_slice(&bytes).map_err(SealError::Payload)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU32;

    use super::*;

    /// A journal of committed steps in memory, first commit wins (what the engine's run does).
    #[derive(Default)]
    struct Steps {
        committed: Mutex<HashMap<String, Value>>,
        cancel: CancellationToken,
    }

    impl DurableBackend for Steps {
        fn run_id(&self) -> &str {
            "run-1"
        }
        fn attempt(&self) -> u32 {
            1
        }
        fn load_step<'a>(
            &'a self,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Option<Value>, DurableError>> {
            Box::pin(async move { Ok(self.committed.lock().unwrap().get(name).cloned()) })
        }
        fn commit_step<'a>(
            &'a self,
            name: &'a str,
            value: Value,
            _ran: std::time::Duration,
        ) -> BoxFuture<'a, Result<Value, DurableError>> {
            Box::pin(async move {
                Ok(self
                    .committed
                    .lock()
                    .unwrap()
                    .entry(name.to_owned())
                    .or_insert(value)
                    .clone())
            })
        }
        fn ask<'a>(
            &'a self,
            _index: u64,
            _method: &'a str,
            _params: Value,
        ) -> BoxFuture<'a, Result<Value, DurableError>> {
            Box::pin(async { Ok(Value::Null) })
        }
        fn emit<'a>(
            &'a self,
            _index: u64,
            _method: &'a str,
            _params: Value,
        ) -> BoxFuture<'a, Result<(), DurableError>> {
            Box::pin(async { Ok(()) })
        }
        fn start_task(&self) -> BoxFuture<'_, Result<bool, DurableError>> {
            Box::pin(async { Ok(false) })
        }
        fn cancellation(&self) -> CancellationToken {
            self.cancel.clone()
        }
        fn progress_token(&self) -> Option<Value> {
            None
        }
        fn announce(&self, _change: ServerChange) -> BoxFuture<'_, Result<(), DurableError>> {
            Box::pin(async { Ok(()) })
        }
    }

    const QUICK: Retry = Retry {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
    };

    fn now_ms() -> u64 {
        u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap()
    }

    /// An ordinary failure is retried under its policy, with the same idempotency key, and
    /// the first success is what is committed (D8: a re-run returns it without a try).
    #[tokio::test]
    async fn d8_retry_step_retries_a_failure_until_the_first_success() {
        let backend = Arc::new(Steps::default());
        let durable = Durable::new(backend.clone());
        let tries = AtomicU32::new(0);
        let keys = Mutex::new(Vec::new());
        let outcome: Result<String, String> = durable
            .retry_step("charge", QUICK, |key| {
                let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
                keys.lock().unwrap().push(key.idempotency_key().to_owned());
                async move {
                    if n < 3 {
                        Err(format!("try {n} failed"))
                    } else {
                        Ok(format!("receipt after {n}"))
                    }
                }
            })
            .await
            .unwrap();
        assert_eq!(outcome, Ok("receipt after 3".to_owned()));
        assert_eq!(
            tries.load(Ordering::SeqCst),
            3,
            "two failures retried, then the success"
        );
        assert_eq!(
            *keys.lock().unwrap(),
            vec!["run-1:charge"; 3],
            "one idempotency key for every try"
        );

        let again: Result<String, String> = Durable::new(backend)
            .retry_step("charge", QUICK, |_| async {
                Ok::<_, String>("a second charge".to_owned())
            })
            .await
            .unwrap();
        assert_eq!(
            again,
            Ok("receipt after 3".to_owned()),
            "a re-run returns the committed success"
        );
    }

    /// Once `max_attempts` tries have failed the last failure ends the step: it is committed
    /// and returned, and a re-run returns it without trying again.
    #[tokio::test]
    async fn d8_retry_step_commits_the_last_failure_once_its_attempts_are_spent() {
        let backend = Arc::new(Steps::default());
        let tries = AtomicU32::new(0);
        let outcome: Result<String, String> = Durable::new(backend.clone())
            .retry_step("charge", QUICK, |_| {
                let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
                async move { Err(format!("declined on try {n}")) }
            })
            .await
            .unwrap();
        assert_eq!(outcome, Err("declined on try 4".to_owned()));
        assert_eq!(
            tries.load(Ordering::SeqCst),
            QUICK.max_attempts,
            "exactly max_attempts tries"
        );

        let rerun_tries = AtomicU32::new(0);
        let again: Result<String, String> = Durable::new(backend)
            .retry_step("charge", QUICK, |_| {
                rerun_tries.fetch_add(1, Ordering::SeqCst);
                async { Ok("approved".to_owned()) }
            })
            .await
            .unwrap();
        assert_eq!(
            again,
            Err("declined on try 4".to_owned()),
            "the committed failure is the step's result"
        );
        assert_eq!(
            rerun_tries.load(Ordering::SeqCst),
            0,
            "a re-run does not try again"
        );
    }

    /// A re-run of a sleep whose wake-up time is already committed waits only the rest.
    #[tokio::test]
    async fn d8_rerun_sleep_waits_only_until_the_committed_wake_up() {
        let backend = Arc::new(Steps::default());
        let wake_at = now_ms() + 300;
        backend
            .committed
            .lock()
            .unwrap()
            .insert("sleep:bake".to_owned(), json!(wake_at));
        let durable = Durable::new(backend);
        tokio::time::timeout(
            Duration::from_secs(20),
            durable.sleep("bake", Duration::from_secs(60)),
        )
        .await
        .expect("the rest, not the whole minute")
        .unwrap();
        assert!(now_ms() >= wake_at, "not before the committed wake-up time");
    }
}

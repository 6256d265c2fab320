//! Asking the client for input in either protocol era, logging rules, and sealed
//! `requestState`.
//!
//! A fixture describes the [`Question`]s it needs answered and calls [`gather`]:
//!
//! * legacy sessions: each question is sent now as a server-to-client request through
//!   `context.peer` (`elicitation/create`, `sampling/createMessage`, `roots/list`) and the
//!   answers come back inline;
//! * 2026-07-28: the answers are read from the retry's `inputResponses`; if any is missing,
//!   [`Gathered::InputRequired`] carries the `inputRequests` to return in an
//!   `InputRequiredResult`.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationSchema, InputRequest,
    InputRequests, InputResponses, ListRootsRequest, ListRootsResult, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion, RequestStateCodec,
    SealOptions,
};
use rmcp::service::{RequestContext, ServiceError};
use rmcp::{ErrorData as McpError, RoleServer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// How long a sealed `requestState` stays valid.
const STATE_TTL: Duration = Duration::from_secs(600);

/// Whether this request uses the stateless 2026-07-28 (or later) protocol.
pub(super) fn is_stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Whether a log message at `level` may be sent for this request: on 2026-07-28 only if
/// `_meta` asks for a log level at or below `level`; in legacy sessions always.
pub(super) fn may_log(context: &RequestContext<RoleServer>, level: LoggingLevel) -> bool {
    match context.meta.log_level() {
        Some(threshold) => severity(level) >= severity(threshold),
        None => !is_stateless(context),
    }
}

/// Sends `notifications/message` if [`may_log`] allows it. Delivery failures are logged
/// and otherwise ignored: the request goes on.
pub(super) async fn log(
    context: &RequestContext<RoleServer>,
    level: LoggingLevel,
    logger: &str,
    data: Value,
) {
    if !may_log(context, level) {
        return;
    }
    let message = LoggingMessageNotificationParam::new(level, data).with_logger(logger);
    if let Err(error) = context.peer.notify_logging_message(message).await {
        tracing::debug!(%error, "could not send a log notification");
    }
}

/// Sends `notifications/progress` if the request carries a progress token.
pub(super) async fn progress(
    context: &RequestContext<RoleServer>,
    progress: f64,
    total: f64,
    message: impl Into<String>,
) {
    let Some(token) = context.meta.get_progress_token() else {
        return;
    };
    let params = ProgressNotificationParam::new(token, progress)
        .with_total(total)
        .with_message(message);
    if let Err(error) = context.peer.notify_progress(params).await {
        tracing::debug!(%error, "could not send a progress notification");
    }
}

/// What a fixture asks the client.
pub(super) enum Ask {
    /// `elicitation/create` (form mode).
    Elicit {
        message: String,
        schema: ElicitationSchema,
    },
    /// `sampling/createMessage` with one user text message.
    Sample { prompt: String, max_tokens: u32 },
    /// `roots/list`.
    Roots,
}

/// One input a fixture needs, under the key used in `inputRequests`.
pub(super) struct Question {
    pub key: &'static str,
    pub ask: Ask,
}

impl Question {
    pub fn elicit(
        key: &'static str,
        message: impl Into<String>,
        schema: ElicitationSchema,
    ) -> Self {
        Self {
            key,
            ask: Ask::Elicit {
                message: message.into(),
                schema,
            },
        }
    }

    pub fn sample(key: &'static str, prompt: impl Into<String>, max_tokens: u32) -> Self {
        Self {
            key,
            ask: Ask::Sample {
                prompt: prompt.into(),
                max_tokens,
            },
        }
    }

    pub fn roots(key: &'static str) -> Self {
        Self {
            key,
            ask: Ask::Roots,
        }
    }

    /// The request as it appears in `inputRequests`.
    pub fn input_request(&self) -> InputRequest {
        match &self.ask {
            Ask::Elicit { message, schema } => InputRequest::Elicitation(ElicitRequest::new(
                elicit_params(message.clone(), schema.clone()),
            )),
            Ask::Sample { prompt, max_tokens } => InputRequest::CreateMessage(
                CreateMessageRequest::new(sample_params(prompt.clone(), *max_tokens)),
            ),
            Ask::Roots => InputRequest::ListRoots(ListRootsRequest::default()),
        }
    }
}

fn elicit_params(message: String, requested_schema: ElicitationSchema) -> ElicitRequestParams {
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    }
}

fn sample_params(prompt: String, max_tokens: u32) -> CreateMessageRequestParams {
    CreateMessageRequestParams::new(
        vec![rmcp::model::SamplingMessage::user_text(prompt)],
        max_tokens,
    )
}

/// The client's answer to one [`Question`].
pub(super) enum Answer {
    Elicit(ElicitResult),
    Sample(CreateMessageResult),
    Roots(ListRootsResult),
}

impl Answer {
    /// A one-line human-readable rendering for tool results.
    pub fn describe(&self) -> String {
        match self {
            Answer::Elicit(result) => describe_elicitation(result),
            Answer::Sample(result) => sampled_text(result),
            Answer::Roots(result) => {
                let uris: Vec<&str> = result.roots.iter().map(|root| root.uri.as_str()).collect();
                format!("[{}]", uris.join(", "))
            }
        }
    }

    /// A string field of an accepted elicitation's content.
    pub fn field(&self, name: &str) -> Option<String> {
        match self {
            Answer::Elicit(result) => result
                .content
                .as_ref()
                .and_then(|content| content.get(name))
                .map(|value| match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                }),
            _ => None,
        }
    }
}

/// `action=<action>, content=<json>`.
fn describe_elicitation(result: &ElicitResult) -> String {
    let action = serde_json::to_value(&result.action)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", result.action));
    let content = result
        .content
        .as_ref()
        .map_or_else(|| "{}".to_owned(), Value::to_string);
    format!("action={action}, content={content}")
}

fn sampled_text(result: &CreateMessageResult) -> String {
    result
        .message
        .content
        .first()
        .and_then(|block| block.as_text())
        .map_or_else(|| "(no text response)".to_owned(), |text| text.text.clone())
}

/// The answers, by question key.
pub(super) type Answers = BTreeMap<&'static str, Answer>;

/// The outcome of [`gather`].
pub(super) enum Gathered {
    /// Every question is answered.
    Complete(Answers),
    /// 2026-07-28: some answers are missing; return these `inputRequests`.
    InputRequired(InputRequests),
}

fn missing_capability(ask: &Ask) -> McpError {
    let builder = ClientCapabilities::builder();
    let required = match ask {
        Ask::Elicit { .. } => builder.enable_elicitation().build(),
        Ask::Sample { .. } => builder.enable_sampling().build(),
        Ask::Roots => builder.enable_roots().build(),
    };
    McpError::missing_required_client_capability(required)
}

/// Whether the request's client declared the capability `ask` needs. Unknown capabilities
/// (a legacy run without the session's `initialize` params) count as declared.
pub(super) fn client_supports(context: &RequestContext<RoleServer>, ask: &Ask) -> bool {
    let Some(capabilities) = context.client_capabilities() else {
        return !is_stateless(context);
    };
    match ask {
        Ask::Elicit { .. } => capabilities.elicitation.is_some(),
        Ask::Sample { .. } => capabilities.sampling.is_some(),
        Ask::Roots => capabilities.roots.is_some(),
    }
}

fn parse_response<T: DeserializeOwned>(
    key: &str,
    what: &str,
    value: &Value,
) -> Result<T, McpError> {
    serde_json::from_value(value.clone()).map_err(|error| {
        McpError::invalid_params(
            format!("inputResponses.{key} is not a valid {what}: {error}"),
            Some(serde_json::json!({ "key": key })),
        )
    })
}

fn parse_answer(question: &Question, value: &Value) -> Result<Answer, McpError> {
    let key = question.key;
    Ok(match question.ask {
        Ask::Elicit { .. } => Answer::Elicit(parse_response(key, "ElicitResult", value)?),
        Ask::Sample { .. } => Answer::Sample(parse_response(key, "CreateMessageResult", value)?),
        Ask::Roots => Answer::Roots(parse_response(key, "ListRootsResult", value)?),
    })
}

fn service_error(error: ServiceError) -> McpError {
    match error {
        ServiceError::McpError(error) => error,
        other => McpError::internal_error(format!("request to the client failed: {other}"), None),
    }
}

async fn ask_now(
    context: &RequestContext<RoleServer>,
    question: &Question,
) -> Result<Answer, McpError> {
    let peer = &context.peer;
    Ok(match &question.ask {
        Ask::Elicit { message, schema } => Answer::Elicit(
            peer.create_elicitation(elicit_params(message.clone(), schema.clone()))
                .await
                .map_err(service_error)?,
        ),
        Ask::Sample { prompt, max_tokens } => Answer::Sample(
            peer.create_message(sample_params(prompt.clone(), *max_tokens))
                .await
                .map_err(service_error)?,
        ),
        Ask::Roots => Answer::Roots(peer.list_roots().await.map_err(service_error)?),
    })
}

/// Gets the answers to `questions`.
///
/// # Errors
///
/// -32021 if the client did not declare a capability a question needs; -32602 if a
/// 2026-07-28 `inputResponses` entry for a question has the wrong shape; in legacy
/// sessions, whatever the client's answer or the transport failed with.
pub(super) async fn gather(
    context: &RequestContext<RoleServer>,
    responses: Option<&InputResponses>,
    questions: Vec<Question>,
) -> Result<Gathered, McpError> {
    if let Some(question) = questions.iter().find(|q| !client_supports(context, &q.ask)) {
        return Err(missing_capability(&question.ask));
    }
    let mut answers = Answers::new();
    if !is_stateless(context) {
        for question in &questions {
            answers.insert(question.key, ask_now(context, question).await?);
        }
        return Ok(Gathered::Complete(answers));
    }
    let mut complete = true;
    for question in &questions {
        match responses.and_then(|responses| responses.get(question.key)) {
            Some(value) => {
                answers.insert(question.key, parse_answer(question, value)?);
            }
            None => complete = false,
        }
    }
    if complete {
        return Ok(Gathered::Complete(answers));
    }
    Ok(Gathered::InputRequired(
        questions
            .iter()
            .map(|question| (question.key.to_owned(), question.input_request()))
            .collect(),
    ))
}

/// Seals a fixture's progress into `requestState`, bound to `scope` (the tool or prompt
/// name) so it cannot be replayed against another fixture.
pub(super) fn seal<T: Serialize>(
    codec: &RequestStateCodec,
    scope: &str,
    state: &T,
) -> Result<String, McpError> {
    let options = SealOptions::new()
        .associated_data(scope.as_bytes())
        .ttl(STATE_TTL);
    codec.seal_json_with(state, &options).map_err(|error| {
        McpError::internal_error(format!("cannot seal requestState: {error}"), None)
    })
}

/// Opens a `requestState` sealed by [`seal`] for `scope`.
///
/// # Errors
///
/// -32602 for any forged, tampered, expired or foreign value (one message for all, as
/// rmcp advises).
pub(super) fn open<T: DeserializeOwned>(
    codec: &RequestStateCodec,
    scope: &str,
    sealed: &str,
) -> Result<T, McpError> {
    codec
        .open_json_with(sealed, scope.as_bytes())
        .map_err(|error| {
            tracing::debug!(%error, scope, "rejected requestState");
            McpError::invalid_params("requestState failed integrity verification", None)
        })
}

//! The dashboard's authentication and its API beyond the snapshot: who is looking
//! ([`Viewer`]), a run's timeline, a task's page, the operators' actions, and the charts'
//! history.
//!
//! Every `/api/*` request is authenticated with the [`DashboardAuth`]'s authenticator (the
//! same mechanisms as the MCP endpoint: API keys, OAuth bearer tokens, a trusted proxy):
//! reading needs the read scope (or the act scope), acting the act scope. Without an
//! authenticator the page is readable (on loopback) and nothing can be done from it. An
//! action is also refused unless it is a JSON `POST` from the dashboard's own origin, so
//! that no other web page can make a viewer's browser send one.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use durable_mcp_auth::{AuthError, Authenticator};
use durable_mcp_engine::{ActionKind, EngineError};
use http::{HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::json;

use super::Shared;

/// How many steps and stream events a timeline reads.
const TIMELINE_LIMIT: usize = 10_000;

/// Who may look at the dashboard, and who may act from it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DashboardAuth {
    /// How viewers are authenticated ([`Authenticator::None`]: not at all; then nobody can
    /// act).
    pub authenticator: Authenticator,
    /// The scope that lets a viewer read (default `dashboard:read`).
    pub read_scope: String,
    /// The scope that lets a viewer act: cancel, kill, retry, purge (default
    /// `dashboard:act`; it lets them read too).
    pub act_scope: String,
}

impl Default for DashboardAuth {
    fn default() -> Self {
        Self {
            authenticator: Authenticator::None,
            read_scope: "dashboard:read".into(),
            act_scope: "dashboard:act".into(),
        }
    }
}

impl DashboardAuth {
    /// Viewers authenticated by `authenticator`, with the default scopes.
    pub fn new(authenticator: Authenticator) -> Self {
        Self {
            authenticator,
            ..Self::default()
        }
    }

    /// The scopes that let a viewer read, and act.
    pub fn scopes(mut self, read: impl Into<String>, act: impl Into<String>) -> Self {
        self.read_scope = read.into();
        self.act_scope = act.into();
        self
    }
}

/// Who is looking, as their credentials say.
#[derive(Debug, Clone)]
pub(super) struct Viewer {
    principal: String,
    can_act: bool,
    authenticated: bool,
}

impl Viewer {
    pub(super) fn can_act(&self) -> bool {
        self.can_act
    }
}

/// A refusal as the page reads it: a status and `{"error": ...}`.
fn refuse(status: StatusCode, error: impl Into<String>) -> Response {
    (status, Json(json!({"error": error.into()}))).into_response()
}

/// Authenticate an `/api/*` request and put its [`Viewer`] in its extensions.
pub(super) async fn authenticate(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    let auth = &shared.auth;
    let viewer = if auth.authenticator.is_enabled() {
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip());
        match auth
            .authenticator
            .authenticate(request.headers(), peer)
            .await
        {
            Ok(who) => {
                let can_act = who.scopes.contains(&auth.act_scope);
                if !can_act && !who.scopes.contains(&auth.read_scope) {
                    return refuse(
                        StatusCode::FORBIDDEN,
                        format!(
                            "these credentials lack the scope `{}` the dashboard needs",
                            auth.read_scope
                        ),
                    );
                }
                Viewer {
                    principal: who.principal.as_str().to_owned(),
                    can_act,
                    authenticated: true,
                }
            }
            Err(error) => return refusal(&auth.authenticator, &error),
        }
    } else {
        Viewer {
            principal: "anonymous".into(),
            can_act: false,
            authenticated: false,
        }
    };
    request.extensions_mut().insert(viewer);
    next.run(request).await
}

/// The answer to credentials that were refused, with its challenge.
fn refusal(authenticator: &Authenticator, error: &AuthError) -> Response {
    let mut response = refuse(error.status(), error.to_string());
    let challenge = authenticator
        .challenge(error)
        .unwrap_or_else(|| "Bearer".to_owned());
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// `GET /api/whoami`.
pub(super) async fn whoami(viewer: axum::Extension<Viewer>) -> Response {
    Json(json!({
        "principal": viewer.principal,
        "can_act": viewer.can_act,
        "auth": viewer.authenticated,
    }))
    .into_response()
}

/// `GET /api/runs/{id}`: the run's timeline.
pub(super) async fn run(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match shared.engine.run_timeline(&id, TIMELINE_LIMIT).await {
        Ok(Some(timeline)) => Json(timeline).into_response(),
        Ok(None) => refuse(
            StatusCode::NOT_FOUND,
            format!("nothing is known of run {id}"),
        ),
        Err(error) => failed(&error),
    }
}

/// `GET /api/tasks/{id}`: the task and its run's timeline.
pub(super) async fn task(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> Response {
    match shared.engine.task_timeline(&id, TIMELINE_LIMIT).await {
        Ok(Some((task, timeline))) => {
            Json(json!({"task": task, "timeline": timeline})).into_response()
        }
        Ok(None) => refuse(
            StatusCode::NOT_FOUND,
            format!("task {id} is not in the store: it expired, or never existed"),
        ),
        Err(error) => failed(&error),
    }
}

/// `GET /api/history`: the charts' points.
pub(super) async fn history(State(shared): State<Arc<Shared>>) -> Response {
    Json(json!({
        "interval_ms": super::history::INTERVAL.as_millis(),
        "metrics": shared.metrics.is_some(),
        "points": shared.history.points(),
    }))
    .into_response()
}

/// The body of an action.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActionBody {
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /api/runs/{id}/{action}`: cancel, kill, retry or purge a run.
pub(super) async fn act_on_run(
    State(shared): State<Arc<Shared>>,
    viewer: axum::Extension<Viewer>,
    Path((id, action)): Path<(String, String)>,
    request: Request,
) -> Response {
    let kind = match action.as_str() {
        "cancel" => ActionKind::Cancel,
        "kill" => ActionKind::Kill,
        "retry" => ActionKind::Retry,
        "purge" => ActionKind::Purge,
        other => {
            return refuse(
                StatusCode::NOT_FOUND,
                format!("no action `{other}`: cancel, kill, retry or purge"),
            );
        }
    };
    let reason = match action_request(&shared, &viewer, request).await {
        Ok(reason) => reason,
        Err(refused) => return refused,
    };
    let by = viewer.principal.clone();
    let engine = &shared.engine;
    let done = match kind {
        ActionKind::Cancel => engine.cancel_run(&id, by, reason).await,
        ActionKind::Kill => engine.kill_run(&id, by, reason).await,
        ActionKind::Retry => engine.retry_run(&id, by, reason).await,
        _ => engine.purge_run(&id, by, reason).await,
    };
    acted(done)
}

/// `POST /api/tasks/{id}/cancel`.
pub(super) async fn cancel_task(
    State(shared): State<Arc<Shared>>,
    viewer: axum::Extension<Viewer>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    let reason = match action_request(&shared, &viewer, request).await {
        Ok(reason) => reason,
        Err(refused) => return refused,
    };
    acted(
        shared
            .engine
            .cancel_task(&id, viewer.principal.clone(), reason)
            .await,
    )
}

/// The reason of an action request, once it is known to come from a viewer who may act,
/// through the dashboard's own page: JSON, from its own origin.
async fn action_request(
    shared: &Shared,
    viewer: &Viewer,
    request: Request,
) -> Result<Option<String>, Response> {
    if !viewer.can_act {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            if viewer.authenticated {
                format!(
                    "these credentials lack the scope `{}` that acting needs",
                    shared.auth.act_scope
                )
            } else {
                "acting needs authentication: start the dashboard with API keys or OAuth (docs/dashboard.md)".to_owned()
            },
        ));
    }
    let headers = request.headers();
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !json {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "an action is a JSON POST",
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let own = origin
            .to_str()
            .ok()
            .and_then(|origin| origin.strip_prefix("http://"))
            .is_some_and(|host| super::host_allowed(host, shared.local));
        if !own {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                "an action must come from the dashboard's own page",
            ));
        }
    }
    let body = axum::body::to_bytes(request.into_body(), 16 * 1024)
        .await
        .map_err(|_| refuse(StatusCode::PAYLOAD_TOO_LARGE, "the body is too large"))?;
    if body.is_empty() {
        return Ok(None);
    }
    let body: ActionBody = serde_json::from_slice(&body).map_err(|error| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!("the body is not {{\"reason\": ...}}: {error}"),
        )
    })?;
    Ok(body.reason.filter(|reason| !reason.trim().is_empty()))
}

/// The answer to an action.
fn acted(done: Result<durable_mcp_engine::ActionRecord, EngineError>) -> Response {
    match done {
        Ok(action) => Json(action).into_response(),
        Err(error @ (EngineError::RunNotFound(_) | EngineError::TaskNotFound(_))) => {
            refuse(StatusCode::NOT_FOUND, error.to_string())
        }
        Err(error @ (EngineError::RunNotParked(_) | EngineError::TaskTerminal { .. })) => {
            refuse(StatusCode::CONFLICT, error.to_string())
        }
        Err(error) => failed(&error),
    }
}

/// A store or engine failure, logged and answered 500 (its text names no secret: store
/// errors never carry credentials).
fn failed(error: &EngineError) -> Response {
    tracing::warn!(%error, "dashboard: a request failed");
    refuse(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

//! The operator dashboard: a web page of what the workers sharing a store are doing
//! (sessions, streams, requests in flight with their worker and lease, tasks, recoveries,
//! store latency, charts of the last hour), where an operator with the right scope can
//! cancel, kill, retry and purge runs and cancel tasks. Served by one worker on a listener
//! of its own (`serve --dashboard-listen ADDR`).
//!
//! The page (`dashboard/index.html`, `.css`, `.js`, embedded in the binary) polls
//! [`SNAPSHOT`] every second and writes what it gets into the DOM as text, never as markup.
//!
//! # Security
//! The `/api/*` requests are authenticated as [`DashboardAuth`] says (module `api`): a
//! read scope to look, an act scope to act; without authentication the page can be read
//! and nothing can be done from it. The dashboard refuses to listen on a non-loopback
//! address unless [`DashboardOptions::allow_remote`], answers 403 to a request whose
//! `Host` is neither its listen address nor a loopback name (DNS rebinding), and leaves
//! payloads out of its snapshot (request arguments, session state values, the client's
//! `initialize` params) unless [`DashboardOptions::show_payloads`]. Ids, principals,
//! methods, tool names and statuses are always shown.

mod api;
mod history;

pub use api::DashboardAuth;

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use durable_mcp_engine::{Engine, inspect};
use durable_mcp_store::{StoreError, StreamId, now_ms};
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::{HttpConfig, MetricsRender, serve_router};

/// The JSON snapshot the page polls.
pub const SNAPSHOT: &str = "/api/snapshot";

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const DASHBOARD_CSS: &str = include_str!("dashboard/dashboard.css");
const DASHBOARD_JS: &str = include_str!("dashboard/dashboard.js");

/// At most this many rows of each kind in a snapshot.
const ROWS: usize = 200;
/// Streams are listed in pages of this many (their ids are time-ordered: the recent ones
/// are the last pages) ...
const STREAM_PAGE: usize = 500;
/// ... at most this many pages per snapshot, so that a huge store costs a bounded read.
const STREAM_PAGES: usize = 20;
/// The most recent streams shown.
const RECENT_STREAMS: usize = 50;
/// The store latency window: the last this many samples of each operation.
const LATENCY_WINDOW: usize = 60;

/// How the dashboard is served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DashboardOptions {
    /// Listen on a non-loopback address too (default: refused). The dashboard has no
    /// authentication: put it behind a proxy that has.
    pub allow_remote: bool,
    /// Show payloads: request arguments, session state values and the client's
    /// `initialize` params (default: left out of the snapshot).
    pub show_payloads: bool,
}

impl DashboardOptions {
    /// Whether to listen on a non-loopback address (see [`DashboardOptions::allow_remote`]).
    pub fn allow_remote(mut self, allow: bool) -> Self {
        self.allow_remote = allow;
        self
    }

    /// Whether to show payloads (see [`DashboardOptions::show_payloads`]).
    pub fn show_payloads(mut self, show: bool) -> Self {
        self.show_payloads = show;
        self
    }
}

/// Why the dashboard could not be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DashboardError {
    /// A non-loopback address without [`DashboardOptions::allow_remote`].
    #[error(
        "the dashboard has no authentication: refusing to listen on non-loopback {0} without --dashboard-allow-remote (put it behind a proxy that authenticates)"
    )]
    Remote(SocketAddr),
    /// Binding or serving failed.
    #[error("dashboard listener: {0}")]
    Io(#[from] io::Error),
}

/// Check `addr` against `options` before binding: a non-loopback address needs
/// [`DashboardOptions::allow_remote`].
///
/// # Errors
/// [`DashboardError::Remote`].
pub fn check_addr(addr: SocketAddr, options: DashboardOptions) -> Result<(), DashboardError> {
    if addr.ip().is_loopback() || options.allow_remote {
        Ok(())
    } else {
        Err(DashboardError::Remote(addr))
    }
}

/// What the dashboard's handlers share.
struct Shared {
    engine: Engine,
    options: DashboardOptions,
    auth: DashboardAuth,
    metrics: Option<MetricsRender>,
    history: Arc<history::History>,
    /// The listen address, as a `Host` header may name it.
    local: SocketAddr,
    latency: Mutex<BTreeMap<&'static str, VecDeque<f64>>>,
}

/// The dashboard's router for a listener bound at `local`: the page, its assets and its
/// API ([`SNAPSHOT`], a run's timeline, a task, the actions, the charts' history; viewers
/// authenticated as `auth` says), behind the `Host` check. `metrics` (the Prometheus
/// renderer, when metrics are on) adds this process's recovery and takeover counters to
/// the snapshot and feeds the charts; the returned future samples them, and must run for
/// the charts to fill (it never ends).
pub fn dashboard_router(
    engine: Engine,
    options: DashboardOptions,
    auth: DashboardAuth,
    metrics: Option<MetricsRender>,
    local: SocketAddr,
) -> (Router, impl Future<Output = ()> + Send + 'static) {
    let history = Arc::new(history::History::default());
    let sampler = {
        let history = history.clone();
        let metrics = metrics.clone();
        async move {
            match metrics {
                Some(render) => history::sampler(history, render).await,
                None => std::future::pending().await,
            }
        }
    };
    let shared = Arc::new(Shared {
        engine,
        options,
        auth,
        metrics,
        history,
        local,
        latency: Mutex::new(BTreeMap::new()),
    });
    let api = Router::new()
        .route(SNAPSHOT, get(snapshot))
        .route("/api/whoami", get(api::whoami))
        .route("/api/history", get(api::history))
        .route("/api/runs/{id}", get(api::run))
        .route("/api/runs/{id}/{action}", post(api::act_on_run))
        .route("/api/tasks/{id}", get(api::task))
        .route("/api/tasks/{id}/cancel", post(api::cancel_task))
        // Only the routes: any other path is a plain 404.
        .route_layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            api::authenticate,
        ));
    let router = Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/dashboard.css",
            get(|| async { asset("text/css; charset=utf-8", DASHBOARD_CSS) }),
        )
        .route(
            "/dashboard.js",
            get(|| async { asset("text/javascript; charset=utf-8", DASHBOARD_JS) }),
        )
        .merge(api)
        .layer(axum::middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared);
    (router, sampler)
}

/// Serve [`dashboard_router`] on `listener` until `shutdown` resolves.
///
/// # Errors
/// [`DashboardError::Io`] if the listener fails.
pub async fn serve_dashboard(
    listener: TcpListener,
    engine: Engine,
    options: DashboardOptions,
    auth: DashboardAuth,
    metrics: Option<MetricsRender>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DashboardError> {
    let local = listener.local_addr()?;
    check_addr(local, options)?;
    tracing::info!(
        addr = %local,
        show_payloads = options.show_payloads,
        authenticated = auth.authenticator.is_enabled(),
        "dashboard at http://{local}/"
    );
    let (router, sampler) = dashboard_router(engine, options, auth, metrics, local);
    let sampler = tokio::spawn(sampler);
    let served = serve_router(listener, router, &HttpConfig::default(), shutdown).await;
    sampler.abort();
    Ok(served?)
}

/// A static asset, with the headers of every dashboard response.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The `Host` check (403 unless it names the listen address or a loopback name), and the
/// headers of every answer: no caching, no framing, no sniffing, scripts and styles from
/// this origin only.
async fn guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok());
    let mut response = if host.is_some_and(|host| host_allowed(host, shared.local)) {
        next.run(request).await
    } else {
        tracing::debug!(?host, "dashboard: refused a request for another host");
        (StatusCode::FORBIDDEN, "forbidden: the Host header names neither the dashboard's address nor a loopback name\n").into_response()
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether a `Host` header value may reach the dashboard listening at `local`: the listen
/// address itself, or `localhost` / `127.0.0.1` / `[::1]` with the listen port or none.
fn host_allowed(host: &str, local: SocketAddr) -> bool {
    let host = host.trim().to_ascii_lowercase();
    if host == local.to_string() {
        return true;
    }
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if !name.ends_with(':') && !port.ends_with(']') => (name, Some(port)),
        _ => (host.as_str(), None),
    };
    let port_ok =
        port.is_none_or(|port| port.parse::<u16>().is_ok_and(|port| port == local.port()));
    port_ok && matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

/// The snapshot: everything the page shows, read now.
#[derive(Debug, Serialize)]
struct Snapshot {
    worker_id: String,
    /// Whether the viewer may act (cancel, kill, retry, purge).
    can_act: bool,
    now_ms: u64,
    show_payloads: bool,
    sessions: Vec<SessionRow>,
    streams: Streams,
    in_flight: Vec<RunRow>,
    tasks: Vec<inspect::TaskSummary>,
    recoveries: Recoveries,
    store_latency: Vec<Latency>,
    /// Store calls of this snapshot that failed (the rest is still shown).
    errors: Vec<String>,
}

#[derive(Debug, Serialize)]
struct SessionRow {
    id: String,
    principal: String,
    protocol_version: String,
    client_name: Option<String>,
    created_at_ms: u64,
    last_seen_ms: u64,
    subscriptions: usize,
    state_keys: Vec<String>,
    /// Payloads (with `show_payloads` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<BTreeMap<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client: Option<Value>,
}

#[derive(Debug, Serialize)]
struct Streams {
    /// Streams read (at most `STREAM_PAGE * STREAM_PAGES`).
    total: usize,
    /// Whether there were more than that.
    more: bool,
    open: usize,
    closed: usize,
    /// The most recent, newest first.
    recent: Vec<StreamRow>,
}

#[derive(Debug, Serialize)]
struct StreamRow {
    id: String,
    principal: String,
    session: Option<String>,
    closed: bool,
    /// Events appended over its life.
    events: u64,
    /// Events still retained.
    retained: u64,
}

#[derive(Debug, Serialize)]
struct RunRow {
    #[serde(flatten)]
    run: inspect::RunSummary,
    /// `running`, `waiting` or `parked`.
    state: &'static str,
    lease: String,
    /// A payload (with `show_payloads` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<Value>,
}

#[derive(Debug, Serialize)]
struct Recoveries {
    /// Unfinished runs started more than once (taken over or restarted).
    runs: Vec<RecoveredRun>,
    /// This process's journal counters (`durable_mcp_journal_*`), when metrics are on.
    counters: Option<BTreeMap<String, f64>>,
}

#[derive(Debug, Serialize)]
struct RecoveredRun {
    run_id: String,
    method: String,
    target: Option<String>,
    owner: Option<String>,
    attempt: u32,
    failures: u32,
}

#[derive(Debug, Serialize)]
struct Latency {
    operation: &'static str,
    samples: usize,
    last_ms: f64,
    p50_ms: f64,
    max_ms: f64,
}

async fn snapshot(
    State(shared): State<Arc<Shared>>,
    viewer: axum::Extension<api::Viewer>,
) -> Response {
    let mut snapshot = read(&shared).await;
    snapshot.can_act = viewer.can_act();
    axum::Json(snapshot).into_response()
}

/// Time `call` as store operation `operation` of this snapshot.
async fn timed<T>(shared: &Shared, operation: &'static str, call: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = call.await;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut latency = shared
        .latency
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let window = latency.entry(operation).or_default();
    if window.len() == LATENCY_WINDOW {
        window.pop_front();
    }
    window.push_back(ms);
    out
}

async fn read(shared: &Shared) -> Snapshot {
    let store = shared.engine.store().as_ref();
    let payloads = shared.options.show_payloads;
    let mut errors = Vec::new();
    let mut failed = |what: &str, error: &dyn std::fmt::Display| {
        tracing::warn!(%error, what, "dashboard: a store read failed");
        errors.push(format!("{what}: {error}"));
    };

    let sessions = match timed(shared, "list_sessions", store.list_sessions(None, ROWS)).await {
        Ok(sessions) => sessions
            .into_iter()
            .map(|s| SessionRow {
                id: s.id.to_string(),
                principal: s.principal.as_str().to_owned(),
                protocol_version: s.protocol_version,
                client_name: s
                    .client
                    .pointer("/clientInfo/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                created_at_ms: s.created_at_ms,
                last_seen_ms: s.last_seen_ms,
                subscriptions: s.subscriptions.len(),
                state_keys: s.state.keys().cloned().collect(),
                state: payloads.then_some(s.state),
                client: payloads.then_some(s.client),
            })
            .collect(),
        Err(error) => {
            failed("sessions", &error);
            Vec::new()
        }
    };

    let streams = match streams(shared).await {
        Ok(streams) => streams,
        Err(error) => {
            failed("streams", &error);
            Streams {
                total: 0,
                more: false,
                open: 0,
                closed: 0,
                recent: Vec::new(),
            }
        }
    };

    let now = now_ms();
    let runs = match timed(shared, "list_records(run)", inspect::runs(store, ROWS)).await {
        Ok(runs) => runs,
        Err(error) => {
            failed("requests in flight", &error);
            Vec::new()
        }
    };
    let recovered = runs
        .iter()
        .filter(|run| run.attempt > 1)
        .map(|run| RecoveredRun {
            run_id: run.run_id.clone(),
            method: run.method.clone(),
            target: run.target.clone(),
            owner: run.owner.clone(),
            attempt: run.attempt,
            failures: run.failures,
        })
        .collect();
    let in_flight = runs
        .into_iter()
        .map(|mut run| {
            let arguments = run.arguments.take().filter(|_| payloads);
            RunRow {
                state: run.state(now).as_str(),
                lease: run.lease_state(now),
                arguments,
                run,
            }
        })
        .collect();

    let tasks = match timed(shared, "list_records(task)", inspect::tasks(store, ROWS)).await {
        Ok(tasks) => tasks,
        Err(error) => {
            failed("tasks", &error);
            Vec::new()
        }
    };

    let counters = shared
        .metrics
        .as_ref()
        .map(|render| journal_counters(&render()));
    Snapshot {
        worker_id: shared.engine.options().worker_id.clone(),
        can_act: false,
        now_ms: now,
        show_payloads: payloads,
        sessions,
        streams,
        in_flight,
        tasks,
        recoveries: Recoveries {
            runs: recovered,
            counters,
        },
        store_latency: latency(shared),
        errors,
    }
}

/// The streams, paged through in id order (time order), the most recent kept.
async fn streams(shared: &Shared) -> Result<Streams, StoreError> {
    let store = shared.engine.store().as_ref();
    let mut out = Streams {
        total: 0,
        more: false,
        open: 0,
        closed: 0,
        recent: Vec::new(),
    };
    let mut recent = VecDeque::with_capacity(RECENT_STREAMS);
    let mut after: Option<StreamId> = None;
    for page in 0..STREAM_PAGES {
        let infos = timed(
            shared,
            "list_streams",
            store.list_streams(after.as_ref(), STREAM_PAGE),
        )
        .await?;
        let full = infos.len() == STREAM_PAGE;
        after = infos.last().map(|info| info.id.clone());
        for info in infos {
            out.total += 1;
            if info.closed {
                out.closed += 1;
            } else {
                out.open += 1;
            }
            if recent.len() == RECENT_STREAMS {
                recent.pop_front();
            }
            recent.push_back(StreamRow {
                id: info.id.to_string(),
                principal: info.owner.principal.as_str().to_owned(),
                session: info.owner.session.as_ref().map(ToString::to_string),
                closed: info.closed,
                events: info.last_seq,
                retained: (info.last_seq + 1).saturating_sub(info.first_seq),
            });
        }
        if !full {
            break;
        }
        out.more = page + 1 == STREAM_PAGES;
    }
    out.recent = recent.into_iter().rev().collect();
    Ok(out)
}

/// The latency window of each store operation.
fn latency(shared: &Shared) -> Vec<Latency> {
    let latency = shared
        .latency
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    latency
        .iter()
        .filter_map(|(operation, window)| {
            let last_ms = *window.back()?;
            let mut sorted: Vec<f64> = window.iter().copied().collect();
            sorted.sort_by(f64::total_cmp);
            Some(Latency {
                operation,
                samples: sorted.len(),
                last_ms,
                p50_ms: sorted[sorted.len() / 2],
                max_ms: sorted[sorted.len() - 1],
            })
        })
        .collect()
}

/// The `durable_mcp_journal_*` counters of a Prometheus exposition, summed over labels.
fn journal_counters(exposition: &str) -> BTreeMap<String, f64> {
    let mut counters = BTreeMap::new();
    for line in exposition
        .lines()
        .filter(|line| line.starts_with("durable_mcp_journal_"))
    {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let Ok(value) = value.parse::<f64>() {
            *counters.entry(name.to_owned()).or_insert(0.0) += value;
        }
    }
    counters
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    #[test]
    fn hosts_allowed_are_the_listen_address_and_loopback_names() {
        let local: SocketAddr = "127.0.0.1:9100".parse().unwrap();
        for host in [
            "127.0.0.1:9100",
            "localhost:9100",
            "LOCALHOST",
            "[::1]:9100",
            "127.0.0.1",
        ] {
            assert!(host_allowed(host, local), "{host}");
        }
        for host in [
            "evil.example:9100",
            "localhost:9101",
            "127.0.0.2:9100",
            "localhost.evil.example",
            "",
            "[::1]:x",
        ] {
            assert!(!host_allowed(host, local), "{host}");
        }
        let remote: SocketAddr = "10.1.2.3:9100".parse().unwrap();
        assert!(host_allowed("10.1.2.3:9100", remote));
        assert!(!host_allowed("10.1.2.3:9101", remote));
    }

    #[test]
    fn journal_counters_are_summed_over_labels() {
        let text = "# TYPE durable_mcp_journal_recoveries_total counter\ndurable_mcp_journal_recoveries_total 2\ndurable_mcp_journal_takeovers_total{x=\"a\"} 1\ndurable_mcp_journal_takeovers_total{x=\"b\"} 3\nother_total 9\n";
        let counters = journal_counters(text);
        assert_eq!(
            counters.get("durable_mcp_journal_recoveries_total"),
            Some(&2.0)
        );
        assert_eq!(
            counters.get("durable_mcp_journal_takeovers_total"),
            Some(&4.0)
        );
        assert_eq!(counters.len(), 2);
    }

    #[test]
    fn a_non_loopback_address_needs_allow_remote() {
        let remote: SocketAddr = "0.0.0.0:9100".parse().unwrap();
        assert!(matches!(
            check_addr(remote, DashboardOptions::default()),
            Err(DashboardError::Remote(_))
        ));
        assert!(check_addr(remote, DashboardOptions::default().allow_remote(true)).is_ok());
        let local: SocketAddr = "[::1]:9100".parse().unwrap();
        assert!(check_addr(local, DashboardOptions::default()).is_ok());
    }
}

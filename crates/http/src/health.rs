//! Health endpoints on the serve listener, for load balancers and orchestrators:
//!
//! - `GET /healthz`: 200 while the process serves HTTP (liveness);
//! - `GET /readyz`: 200 only when this worker should get traffic (readiness): the store
//!   answers within [`READY_TIMEOUT`], its schema is the one this build writes, it commits
//!   a write (a probe record that expires in a minute: a full disk, a read-only replica
//!   after a failover, a store that stopped answering, all fail it), and the worker is not
//!   draining (a graceful shutdown has not begun). Otherwise 503. The JSON body names each
//!   check and its outcome.
//!
//! Neither is Host-checked (probes come with the pod's address as Host) and neither says
//! more than the checks' outcomes.

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{CACHE_CONTROL, CONNECTION, HeaderValue, RETRY_AFTER};
use serde_json::{Value, json};

use crate::Transport;

/// The liveness path.
pub const HEALTHZ: &str = "/healthz";
/// The readiness path.
pub const READYZ: &str = "/readyz";
/// How long `/readyz` waits for the store before calling it unreachable.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /healthz`: the process is up.
pub(crate) async fn healthz() -> Response {
    no_cache((StatusCode::OK, Json(json!({"status": "up"}))).into_response())
}

/// `GET /readyz`: the store answers and commits, its schema is current, the worker is not
/// draining.
pub(crate) async fn readyz(State(transport): State<Transport>) -> Response {
    let draining = transport.shutdown.is_cancelled();
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    let status = tokio::time::timeout_at(deadline, transport.engine.store().status()).await;
    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (store, schema) = match status {
        Ok(Ok(status)) => {
            let schema = match status.schema {
                Some(schema) => {
                    json!({"ok": schema.is_current(), "found": schema.found, "expected": schema.expected})
                }
                None => json!({"ok": true, "found": null, "expected": null}),
            };
            (
                json!({"ok": true, "backend": transport.engine.store().backend(), "latency_ms": latency_ms}),
                schema,
            )
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, "readyz: the store failed");
            (
                json!({"ok": false, "backend": transport.engine.store().backend(), "error": error.to_string()}),
                json!({"ok": false, "error": "store unavailable"}),
            )
        }
        Err(_) => {
            tracing::warn!(
                timeout_ms = READY_TIMEOUT.as_millis() as u64,
                "readyz: the store did not answer in time"
            );
            let error = format!("no answer within {} ms", READY_TIMEOUT.as_millis());
            (
                json!({"ok": false, "backend": transport.engine.store().backend(), "error": error}),
                json!({"ok": false, "error": "store unavailable"}),
            )
        }
    };
    let writes = if store["ok"] == Value::Bool(true) {
        write_check(&transport, deadline).await
    } else {
        json!({"ok": false, "error": "store unavailable"})
    };
    ready_response(store, schema, writes, json!({"ok": !draining}))
}

/// Commit a probe record (random key, expiring in a minute, removed by retention): whether
/// this worker can commit at all, within what is left of [`READY_TIMEOUT`].
async fn write_check(transport: &Transport, deadline: tokio::time::Instant) -> Value {
    use durable_mcp_store::{Expect, RecordKind, StreamId, now_ms};
    let key = format!("durable-mcp-ready/{}", StreamId::random());
    let write = transport.engine.store().put_record(
        RecordKind::Alias,
        &key,
        "{}".into(),
        Some(now_ms() + 60_000),
        Expect::Absent,
    );
    match tokio::time::timeout_at(deadline, write).await {
        Ok(Ok(_)) => json!({"ok": true}),
        Ok(Err(error)) => {
            tracing::warn!(%error, "readyz: the store refused a write");
            json!({"ok": false, "error": error.to_string()})
        }
        Err(_) => {
            tracing::warn!(
                timeout_ms = READY_TIMEOUT.as_millis() as u64,
                "readyz: a store write did not finish in time"
            );
            json!({"ok": false, "error": format!("no commit within {} ms", READY_TIMEOUT.as_millis())})
        }
    }
}

fn ready_response(store: Value, schema: Value, writes: Value, draining: Value) -> Response {
    let ok = [&store, &schema, &writes, &draining]
        .iter()
        .all(|check| check["ok"] == Value::Bool(true));
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if ok { "ready" } else { "not ready" },
        "checks": {"store": store, "schema": schema, "writes": writes, "not_draining": draining},
    });
    no_cache((code, Json(body)).into_response())
}

/// What a connection accepted while the server drains gets: `/healthz` is still 200,
/// `/readyz` is 503 (draining), anything else 503 with `Retry-After`; each response
/// closes its connection.
pub(crate) fn draining(path: &str) -> Response {
    let mut response = match path {
        HEALTHZ => (
            StatusCode::OK,
            Json(json!({"status": "up", "draining": true})),
        )
            .into_response(),
        READYZ => {
            let skipped = json!({"ok": null, "skipped": "draining"});
            ready_response(
                skipped.clone(),
                skipped.clone(),
                skipped,
                json!({"ok": false}),
            )
        }
        _ => {
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "this worker is shutting down; retry on another"})),
            )
                .into_response();
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    };
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    no_cache(response)
}

fn no_cache(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

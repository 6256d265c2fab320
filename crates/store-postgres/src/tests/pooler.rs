//! Reads `PGBOUNCER_SESSION_URL` and `PGBOUNCER_TRANSACTION_URL`: two PgBouncers in front
//! of the shared PostgreSQL, which `scripts/tls-services.sh start` runs and writes to
//! `.tools/tls/env`. Unset, the tests print `skipped: ...` and pass, except in CI.

use super::*;

/// Session pooling keeps a server connection per client connection: the store works as on
/// a direct connection, live tails across workers included (LISTEN/NOTIFY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_serves_the_store_and_its_wake_ups() {
    let Some(url) = service_var("PGBOUNCER_SESSION_URL") else {
        return;
    };
    let Some(options) = fresh_options_at(url, &[("poll_ms", "600000"), ("pool_size", "2")]).await
    else {
        return;
    };
    let watcher: Arc<dyn Store> = Arc::new(
        PgStore::open(options.clone())
            .await
            .expect("open through session pooling"),
    );
    let writer: Arc<dyn Store> =
        Arc::new(PgStore::open(options).await.expect("open a second worker"));
    durable_mcp_store::contract::d3_live_tail_wakes_on_append(watcher, writer).await;
}

/// Transaction pooling breaks LISTEN and session settings: refused at open, quickly, with
/// an error that names the cause and the fix.
#[tokio::test]
async fn transaction_mode_is_refused_at_open_naming_the_fix() {
    let Some(url) = service_var("PGBOUNCER_TRANSACTION_URL") else {
        return;
    };
    let Some(options) = fresh_options_at(url, &[]).await else {
        return;
    };
    let started = Instant::now();
    let Err(error) = PgStore::open(options).await else {
        panic!("opened through transaction pooling")
    };
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused after {:?}",
        started.elapsed()
    );
    assert!(matches!(error, StoreError::Incompatible(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("transaction mode") && message.contains("session-mode pooler endpoint"),
        "{message}"
    );
}

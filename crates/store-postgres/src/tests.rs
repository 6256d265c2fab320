//! The contract suite and PostgreSQL-specific tests. Each test gets a fresh schema in the
//! database named by `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! If the server is unreachable the tests print `skipped: ...` and pass, except with
//! CI (`durable_mcp_store::in_ci`), where they fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use durable_mcp_store::contract::{WAKE_WINDOW, events_after_wake};
use durable_mcp_store::{
    Expect, Principal, RecordKind, SessionChange, Store, StoreError, StreamId, StreamOwner, in_ci,
};
use futures::StreamExt;

use super::*;

const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const SCHEMA_PREFIX: &str = "dmcp_test_";

/// The variable `name` (a server of `scripts/tls-services.sh`), or `None`: the test
/// skips outside CI and fails in CI.
fn service_var(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                !in_ci(),
                "CI is set and {name} is not: run scripts/tls-services.sh start and source .tools/tls/env"
            );
            eprintln!(
                "skipped: {name} is not set (scripts/tls-services.sh start; source .tools/tls/env)"
            );
            None
        }
    }
}

fn database_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// `url` with one more query parameter.
fn with_param(url: &str, key: &str, value: &str) -> String {
    format!(
        "{url}{}{key}={value}",
        if url.contains('?') { '&' } else { '?' }
    )
}

fn without_schema(options: &PgOptions) -> PgOptions {
    let mut options = options.clone();
    options.schema = None;
    options
}

/// A raw connection for test setup (no schema).
async fn admin(options: &PgOptions) -> tokio_postgres::Client {
    pool::connect(&without_schema(options))
        .await
        .expect("admin connection")
}

/// Options for a new, empty schema `dmcp_test_<pid>_<random>` (with `extra` URL
/// parameters); `None` if the server is unreachable outside CI.
async fn fresh_options(extra: &[(&str, &str)]) -> Option<PgOptions> {
    fresh_options_at(database_url(), extra).await
}

/// [`fresh_options`] on the server at `url`.
async fn fresh_options_at(mut url: String, extra: &[(&str, &str)]) -> Option<PgOptions> {
    for (key, value) in extra {
        url = with_param(&url, key, value);
    }
    let mut options = PgOptions::from_url(&url).expect("DATABASE_URL parses");
    // A session id is random throughout (a stream id begins with its creation time).
    let random = SessionId::random();
    options.schema = Some(format!(
        "{SCHEMA_PREFIX}{}_{}",
        std::process::id(),
        &random.as_str()[..16]
    ));
    options.pool_size = 4;
    match pool::connect(&without_schema(&options)).await {
        Ok(_) => {}
        // The inner error reads "PostgreSQL not reachable at host:port/db: <cause>".
        Err(StoreError::Unavailable(error)) => {
            assert!(!in_ci(), "CI is set and {error}");
            eprintln!("skipped: {error}");
            return None;
        }
        Err(other) => panic!(
            "PostgreSQL at {} refused the test setup: {other}",
            options.target()
        ),
    }
    drop_stale_schemas(&options).await;
    Some(options)
}

/// Once per test process: drop test schemas left by test processes that are gone.
async fn drop_stale_schemas(options: &PgOptions) {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::SeqCst) {
        return;
    }
    let client = admin(options).await;
    let rows = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)",
            &[&SCHEMA_PREFIX],
        )
        .await
        .expect("list test schemas");
    for row in rows {
        let name: String = row.get(0);
        let pid = name[SCHEMA_PREFIX.len()..].split('_').next().unwrap_or("");
        let alive = pid == std::process::id().to_string()
            || std::path::Path::new(&format!("/proc/{pid}")).exists();
        if !alive {
            let _ = client
                .batch_execute(&format!(
                    "DROP SCHEMA IF EXISTS {} CASCADE",
                    options::quote_ident(&name)
                ))
                .await;
        }
    }
}

async fn fresh() -> Option<Arc<dyn Store>> {
    let options = fresh_options(&[]).await?;
    Some(Arc::new(PgStore::open(options).await.expect("open")))
}

/// Two workers on one fresh schema, re-reading only every ten minutes: only NOTIFY can wake
/// the watcher in time.
async fn pair() -> Option<(Arc<dyn Store>, Arc<dyn Store>)> {
    let options = fresh_options(&[("poll_ms", "600000")]).await?;
    let watcher = PgStore::open(options.clone()).await.expect("open watcher");
    let writer = PgStore::open(options).await.expect("open writer");
    Some((Arc::new(watcher), Arc::new(writer)))
}

durable_mcp_store::store_contract_tests!(fresh(), pair = pair());

/// The same contract over TLS, and what each `sslmode` does, against the private server of
/// `scripts/tls-services.sh` (`hostssl` lines only in its `pg_hba.conf`).
mod tls;

/// Through PgBouncer, in session mode (works) and transaction mode (refused at open).
mod pooler;

fn anonymous_owner() -> StreamOwner {
    StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    }
}

/// Waits up to 5 s for one wake-up (not for the end of the wake-ups).
async fn woken(wake: &mut durable_mcp_store::WakeUps) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(5), wake.next()).await,
        Ok(Some(()))
    )
}

#[tokio::test]
async fn d1_committed_events_survive_reopen() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let stream = StreamId::random();
    {
        let store = PgStore::open(options.clone()).await.unwrap();
        store
            .create_stream(&stream, &anonymous_owner())
            .await
            .unwrap();
        for i in 0..10 {
            store.append(&stream, format!("{i}"), false).await.unwrap();
        }
    }
    let store = PgStore::open(options).await.unwrap();
    let read = store.read_after(&stream, 4, 100).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        ["4", "5", "6", "7", "8", "9"]
    );
    assert_eq!(
        store.migrate().await.unwrap(),
        SCHEMA_VERSION,
        "migrating again is a no-op"
    );
}

#[tokio::test]
async fn newer_schema_is_refused_with_a_clear_message() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let store = PgStore::open(options.clone()).await.unwrap();
    let client = admin(&options).await;
    let table = format!(
        "{}.durable_mcp_schema",
        options::quote_ident(options.schema.as_deref().unwrap())
    );
    client
        .execute(
            &format!("INSERT INTO {table} (version) VALUES ($1)"),
            &[&(SCHEMA_VERSION + 1)],
        )
        .await
        .unwrap();
    let err = PgStore::open(options).await.unwrap_err();
    assert!(matches!(err, StoreError::Incompatible(_)), "{err}");
    assert!(err.to_string().contains("upgrade durable-mcp"), "{err}");
    let err = store.migrate().await.unwrap_err();
    assert!(matches!(err, StoreError::Incompatible(_)), "{err}");
}

#[tokio::test]
async fn concurrent_opens_migrate_exactly_once() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let opens = (0..4).map(|_| PgStore::open(options.clone()));
    for store in futures::future::join_all(opens).await {
        store.expect("every concurrent open succeeds");
    }
    let client = admin(&options).await;
    let table = format!(
        "{}.durable_mcp_schema",
        options::quote_ident(options.schema.as_deref().unwrap())
    );
    let row = client
        .query_one(&format!("SELECT count(*), max(version) FROM {table}"), &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (SCHEMA_VERSION, SCHEMA_VERSION)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_another_worker_sees_appends_through_watch() {
    // A poll interval far beyond the test's timeouts: only NOTIFY can wake the tail.
    let Some(options) = fresh_options(&[("poll_ms", "600000")]).await else {
        return;
    };
    let (a, b) = (
        PgStore::open(options.clone()).await.unwrap(),
        PgStore::open(options).await.unwrap(),
    );
    let stream = StreamId::random();
    a.create_stream(&stream, &anonymous_owner()).await.unwrap();
    let mut wake = b.watch(&stream).await.unwrap();
    let mut seen = 0;
    for i in 1..=3u64 {
        a.append(&stream, format!("e{i}"), i == 3).await.unwrap();
        let events = events_after_wake(&mut wake, &b, &stream, seen, WAKE_WINDOW).await;
        assert_eq!(
            events.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
            [format!("e{i}")],
            "worker B woken by append {i}"
        );
        seen = i;
    }
    assert!(b.read_after(&stream, 0, 100).await.unwrap().finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_ending_a_session_wakes_other_workers_tails() {
    let Some(options) = fresh_options(&[("poll_ms", "600000")]).await else {
        return;
    };
    let (a, b) = (
        PgStore::open(options.clone()).await.unwrap(),
        PgStore::open(options).await.unwrap(),
    );
    let who = Principal::new("alice");
    let record = durable_mcp_store::contract::session(&who);
    a.create_session(record.clone()).await.unwrap();
    let mut wake = b.watch(&record.standalone_stream).await.unwrap();
    assert!(a.end_session(&who, &record.id).await.unwrap());
    assert!(woken(&mut wake).await, "the remote tail is woken");
    assert!(matches!(
        b.read_after(&record.standalone_stream, 0, 10).await,
        Err(StoreError::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d2_appenders_on_two_workers_give_one_gap_free_log() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let (a, b) = (
        PgStore::open(options.clone()).await.unwrap(),
        PgStore::open(options).await.unwrap(),
    );
    let stream = StreamId::random();
    a.create_stream(&stream, &anonymous_owner()).await.unwrap();
    const PER_TASK: usize = 40;
    let mut tasks = Vec::new();
    for (w, store) in [a.clone(), b.clone(), a.clone(), b.clone()]
        .into_iter()
        .enumerate()
    {
        let stream = stream.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_TASK {
                store
                    .append(&stream, format!("w{w}-{i}"), false)
                    .await
                    .unwrap();
            }
        }));
    }
    // A tail on each worker, reading while the appends run: every read continues exactly
    // where the previous one ended (no event is skipped and seen later).
    let total = (4 * PER_TASK) as u64;
    let tails = [a.clone(), b.clone()].map(|store| {
        let stream = stream.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let deadline = Instant::now() + Duration::from_secs(60);
            while last < total {
                assert!(Instant::now() < deadline, "tail stuck at {last}");
                let read = store.read_after(&stream, last, 7).await.unwrap();
                for e in &read.events {
                    assert_eq!(e.id.seq, last + 1, "no gap in what a reader sees");
                    last = e.id.seq;
                }
                if read.events.is_empty() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        })
    });
    for task in tasks {
        task.await.unwrap();
    }
    for tail in tails {
        tail.await.unwrap();
    }
    let read = b.read_after(&stream, 0, usize::MAX).await.unwrap();
    assert_eq!(
        read.events.iter().map(|e| e.id.seq).collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>()
    );
    for w in 0..4 {
        let mine: Vec<&str> = read
            .events
            .iter()
            .map(|e| e.data.as_str())
            .filter(|d| d.starts_with(&format!("w{w}-")))
            .collect();
        assert_eq!(mine.len(), PER_TASK, "writer {w}");
    }
}

#[tokio::test]
async fn d14_max_events_prunes_and_resume_from_pruned_is_named() {
    let Some(options) = fresh_options(&[("max_events", "3")]).await else {
        return;
    };
    let store = PgStore::open(options).await.unwrap();
    let stream = StreamId::random();
    store
        .create_stream(&stream, &anonymous_owner())
        .await
        .unwrap();
    for i in 1..=6 {
        store.append(&stream, format!("{i}"), false).await.unwrap();
    }
    let err = store.read_after(&stream, 1, 10).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Pruned {
                oldest_retained: 4,
                ..
            }
        ),
        "{err}"
    );
    let read = store.read_after(&stream, 3, 10).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        ["4", "5", "6"]
    );
}

#[tokio::test]
async fn d15_open_on_a_closed_port_fails_fast_as_unavailable() {
    let started = Instant::now();
    let err = PgStore::open_url("postgres://postgres@127.0.0.1:1/test?connect_timeout=2")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(
        err.to_string()
            .contains("not reachable at 127.0.0.1:1/test"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_missing_database_is_refused_not_retried() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let mut url = database_url();
    let db = options.target().rsplit('/').next().unwrap_or("").to_owned();
    url = url.replacen(&format!("/{db}"), "/dmcp_no_such_database", 1);
    let err = PgStore::open_url(&url).await.unwrap_err();
    assert!(matches!(err, StoreError::Incompatible(_)), "{err}");
    assert!(err.to_string().contains("refused the connection"), "{err}");
}

/// Terminate this test's server backends whose current query starts with `query_prefix`.
async fn kill_backends(options: &PgOptions, app: &str, query_prefix: &str) -> u64 {
    admin(options)
        .await
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = $1 AND starts_with(query, $2) AND pid <> pg_backend_pid()",
            &[&app, &query_prefix],
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_listener_reconnects_by_itself() {
    let app = format!("dmcp_listener_{}", &SessionId::random().as_str()[..12]);
    let Some(options) = fresh_options(&[("poll_ms", "600000"), ("application_name", &app)]).await
    else {
        return;
    };
    let (a, b) = (
        PgStore::open(options.clone()).await.unwrap(),
        PgStore::open(options.clone()).await.unwrap(),
    );
    let stream = StreamId::random();
    a.create_stream(&stream, &anonymous_owner()).await.unwrap();
    let mut wake = b.watch(&stream).await.unwrap();
    assert!(
        kill_backends(&options, &app, "LISTEN").await >= 2,
        "both listeners killed"
    );
    // After reconnecting, a listener wakes every tail (notifications may have been lost)...
    assert!(
        woken(&mut wake).await,
        "woken after the listener reconnected"
    );
    // ...and listens again: a later append on the other worker wakes the tail.
    a.append(&stream, "after".into(), false).await.unwrap();
    let events = events_after_wake(&mut wake, &b, &stream, 0, WAKE_WINDOW).await;
    assert_eq!(
        events.iter().map(|e| e.data.as_str()).collect::<Vec<_>>(),
        ["after"],
        "woken by NOTIFY on the new connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d15_pool_replaces_killed_connections() {
    let app = format!("dmcp_pool_{}", &SessionId::random().as_str()[..12]);
    let Some(options) = fresh_options(&[("application_name", &app)]).await else {
        return;
    };
    let store = PgStore::open(options.clone()).await.unwrap();
    let who = Principal::anonymous();
    let record = durable_mcp_store::contract::session(&who);
    store.create_session(record.clone()).await.unwrap();
    // Kill every connection of the pool (idle ones show their last query).
    let killed = kill_backends(&options, &app, "").await;
    assert!(killed >= 2, "killed {killed}");
    let mut failures = 0;
    loop {
        match store
            .update_session(&who, &record.id, SessionChange::Touch)
            .await
        {
            Ok(_) => break,
            Err(StoreError::Unavailable(_)) if failures < options.pool_size + 1 => failures += 1,
            Err(other) => panic!("after {failures} failures: {other}"),
        }
    }
    assert!(store.load_session(&who, &record.id).await.is_ok());
}

#[tokio::test]
async fn a_version_1_schema_migrates_forward_keeping_its_data() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let stream = StreamId::random();
    {
        let store = PgStore::open(options.clone()).await.unwrap();
        store
            .create_stream(&stream, &anonymous_owner())
            .await
            .unwrap();
        store.append(&stream, "kept".into(), false).await.unwrap();
    }
    // Back to version 1: no journal records yet, no batch functions, events' foreign key.
    let client = admin(&options).await;
    let schema = options::quote_ident(options.schema.as_deref().unwrap());
    client
        .batch_execute(&format!(
            "DROP TABLE {schema}.records; DROP FUNCTION {schema}.dmcp_commit; DROP FUNCTION {schema}.dmcp_op;
            ALTER TABLE {schema}.events ADD CONSTRAINT events_stream_fkey FOREIGN KEY (stream) REFERENCES {schema}.streams (id) ON DELETE CASCADE;
            DELETE FROM {schema}.durable_mcp_schema WHERE version > 1"
        ))
        .await
        .unwrap();
    let store = PgStore::open(options).await.unwrap();
    assert_eq!(
        store.read_after(&stream, 0, 10).await.unwrap().events[0].data,
        "kept"
    );
    assert_eq!(
        store
            .put_record(RecordKind::Run, "r", "{}".into(), None, Expect::Absent)
            .await
            .unwrap(),
        1
    );
    let batch = WriteBatch::new()
        .append(stream.clone(), "batched")
        .put_record(RecordKind::Run, "s", "{}", None, Expect::Absent);
    assert_eq!(
        store.commit(batch).await.unwrap().ops.len(),
        2,
        "a batch of several ops runs through the functions migration 3 made"
    );
    assert_eq!(SCHEMA_VERSION, 3);
}

#[tokio::test]
async fn record_prefixes_are_literal_and_ordered_bytewise() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let store = PgStore::open(options).await.unwrap();
    for key in ["a_1", "ab1", "a%", "a%x", "a\\_", "B", "a", "é"] {
        store
            .put_record(
                RecordKind::Alias,
                key,
                format!("\"{key}\""),
                None,
                Expect::Absent,
            )
            .await
            .unwrap();
    }
    let keys = |records: Vec<durable_mcp_store::Record>| {
        records.into_iter().map(|r| r.key).collect::<Vec<_>>()
    };
    assert_eq!(
        keys(
            store
                .list_records(RecordKind::Alias, "a_", 10)
                .await
                .unwrap()
        ),
        ["a_1"]
    );
    assert_eq!(
        keys(
            store
                .list_records(RecordKind::Alias, "a%", 10)
                .await
                .unwrap()
        ),
        ["a%", "a%x"]
    );
    assert_eq!(
        keys(store.list_records(RecordKind::Alias, "", 10).await.unwrap()),
        ["B", "a", "a%", "a%x", "a\\_", "a_1", "ab1", "é"],
        "byte order, whatever the database's collation"
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "a_").await.unwrap(),
        1
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "a").await.unwrap(),
        5
    );
    assert_eq!(
        keys(store.list_records(RecordKind::Alias, "", 10).await.unwrap()),
        ["B", "é"]
    );
    assert_eq!(
        store.delete_records(RecordKind::Alias, "").await.unwrap(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_first_commit_wins_across_workers() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let (a, b) = (
        PgStore::open(options.clone()).await.unwrap(),
        PgStore::open(options).await.unwrap(),
    );
    durable_mcp_store::contract::d8_first_commit_wins_across_workers(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_first_batch_wins_across_workers() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let (a, b) = (
        PgStore::open(options.clone()).await.unwrap(),
        PgStore::open(options).await.unwrap(),
    );
    durable_mcp_store::contract::d8_first_batch_wins_across_workers(&a, &b).await;
}

/// Regression (issue 10: PostgreSQL `tools/call` fell to 77 calls/s at one client): an
/// operation abandoned mid-query (the engine aborts a request's watcher task in the middle
/// of its read after every response) closed its pooled connection, so the next operation
/// opened a new one and prepared its statements again, several round trips each time. The
/// connection is kept instead, and nothing the abandoned operations left in flight (a
/// query, a transaction that had just begun) reaches the operations after them.
#[tokio::test]
async fn an_abandoned_operation_keeps_its_connection_and_leaks_nothing() {
    use futures::FutureExt;
    let Some(mut options) = fresh_options(&[]).await else {
        return;
    };
    options.pool_size = 1;
    let store = PgStore::open(options.clone()).await.unwrap();
    let other = PgStore::open(options).await.unwrap();
    let who = Principal::anonymous();
    let record = durable_mcp_store::contract::session(&who);
    store.create_session(record.clone()).await.unwrap();
    let stream = StreamId::random();
    store
        .create_stream(&stream, &anonymous_owner())
        .await
        .unwrap();
    store.append(&stream, "1".into(), false).await.unwrap();
    let opened = store.shared.pool.opened();
    // Each is polled once (its query is sent) and dropped before its answer.
    assert!(
        store.read_after(&stream, 0, 10).now_or_never().is_none(),
        "the read waits for its answer"
    );
    assert!(
        store
            .update_session(&who, &record.id, SessionChange::Touch)
            .now_or_never()
            .is_none(),
        "the transaction waits"
    );
    let id = store.append(&stream, "2".into(), false).await.unwrap();
    assert_eq!(id.seq, 2);
    let read = store.read_after(&stream, 0, 10).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        ["1", "2"],
        "the answer of this read, not of the abandoned one"
    );
    // Committed, not held inside the abandoned transaction: another worker sees it.
    assert_eq!(
        other.read_after(&stream, 0, 10).await.unwrap().events.len(),
        2
    );
    assert!(
        store
            .update_session(&who, &record.id, SessionChange::Touch)
            .await
            .is_ok(),
        "no lock left behind"
    );
    assert_eq!(store.shared.pool.opened(), opened, "no new connection");
}

/// D14/D3 for appends committed together (one statement for a group's appends): with
/// `max_events`, a group of appends to one stream keeps only the newest, including of the
/// events it inserted itself; an append that closes its stream refuses the ones queued after
/// it; the ids are the stream's next sequences, in the order the appends were made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d14_appends_committed_together_keep_at_most_max_events_and_stop_at_a_close() {
    let Some(options) = fresh_options(&[("max_events", "3")]).await else {
        return;
    };
    let store = PgStore::open(options.clone()).await.unwrap();
    let stream = StreamId::random();
    store
        .create_stream(&stream, &anonymous_owner())
        .await
        .unwrap();
    let appends = (1..=20).map(|i| store.append(&stream, format!("{i}"), i == 18));
    let results = futures::future::join_all(appends).await;
    let seqs: Vec<u64> = results[..18]
        .iter()
        .map(|r| r.as_ref().map(|id| id.seq).unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=18).collect::<Vec<_>>(),
        "sequences in the order of the appends"
    );
    for late in &results[18..] {
        assert!(
            matches!(late, Err(StoreError::StreamClosed { .. })),
            "{late:?}"
        );
    }
    let read = store.read_after(&stream, 15, 10).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        ["16", "17", "18"]
    );
    assert!(read.finished);
    assert!(matches!(
        store.read_after(&stream, 0, 10).await,
        Err(StoreError::Pruned {
            oldest_retained: 16,
            ..
        })
    ));
    let table = format!(
        "{}.events",
        options::quote_ident(options.schema.as_deref().unwrap())
    );
    let rows: i64 = admin(&options)
        .await
        .query_one(
            &format!("SELECT count(*) FROM {table} WHERE stream = $1"),
            &[&stream.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 3, "no row older than the limit is kept");
}

/// A NUL, which PostgreSQL's text cannot hold, is refused at its op, in a batch committed
/// alone and in one grouped with others (the group is retried job by job): the batch
/// leaves nothing, the others commit.
#[tokio::test]
async fn a_nul_refuses_its_batch_alone_at_its_op() {
    use durable_mcp_store::StoreErrorKind;
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let store = Arc::new(PgStore::open(options).await.unwrap());
    let batch = |key: &str, value: &str| {
        WriteBatch::new()
            .put_record(RecordKind::Run, key, "{}", None, Expect::Absent)
            .put_record(
                RecordKind::Run,
                format!("{key}/2"),
                value,
                None,
                Expect::Absent,
            )
    };
    let refused_at_second_op = |error: StoreError| {
        assert!(
            matches!(error, StoreError::BatchOp { index: 1, .. }),
            "{error:?}"
        );
        assert_eq!(error.kind(), StoreErrorKind::Refused, "{error:?}");
    };
    refused_at_second_op(store.commit(batch("alone", "a\0b")).await.unwrap_err());
    let commits = (0..8).map(|n| {
        let store = Arc::clone(&store);
        async move {
            store
                .commit(batch(
                    &format!("grouped{n}"),
                    if n == 3 { "a\0b" } else { "{}" },
                ))
                .await
        }
    });
    for (n, result) in futures::future::join_all(commits)
        .await
        .into_iter()
        .enumerate()
    {
        if n == 3 {
            refused_at_second_op(result.unwrap_err());
        } else {
            assert_eq!(result.unwrap().ops.len(), 2, "batch {n}");
        }
    }
    for key in ["alone", "grouped3"] {
        assert!(
            store
                .get_record(RecordKind::Run, key)
                .await
                .unwrap()
                .is_none(),
            "{key} was undone with its batch"
        );
    }
    assert!(
        store
            .get_record(RecordKind::Run, "grouped2/2")
            .await
            .unwrap()
            .is_some()
    );
}

/// Events have no foreign key to their stream (migration 3): ending a session, pruning an
/// idle one and pruning a finished stream delete their events' rows too (D5).
#[tokio::test]
async fn d5_ended_sessions_and_pruned_streams_leave_no_event_rows() {
    let Some(options) = fresh_options(&[]).await else {
        return;
    };
    let store = PgStore::open(options.clone()).await.unwrap();
    let client = admin(&options).await;
    let count = format!(
        "SELECT count(*) FROM {}.events WHERE stream = $1",
        options::quote_ident(options.schema.as_deref().unwrap())
    );
    let rows = |stream: StreamId| {
        let (client, count) = (&client, &count);
        async move {
            client
                .query_one(count.as_str(), &[&stream.as_str()])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    let who = Principal::anonymous();
    let (ended, idle) = (
        durable_mcp_store::contract::session(&who),
        durable_mcp_store::contract::session(&who),
    );
    let (of_ended, of_idle, finished) =
        (StreamId::random(), StreamId::random(), StreamId::random());
    for (session, stream) in [(&ended, &of_ended), (&idle, &of_idle)] {
        store.create_session(session.clone()).await.unwrap();
        store
            .create_stream(
                stream,
                &StreamOwner {
                    principal: who.clone(),
                    session: Some(session.id.clone()),
                },
            )
            .await
            .unwrap();
        store.append(stream, "event".into(), false).await.unwrap();
    }
    store
        .create_stream(&finished, &anonymous_owner())
        .await
        .unwrap();
    store.append(&finished, "last".into(), true).await.unwrap();
    assert_eq!(
        (
            rows(of_ended.clone()).await,
            rows(of_idle.clone()).await,
            rows(finished.clone()).await
        ),
        (1, 1, 1)
    );

    assert!(store.end_session(&who, &ended.id).await.unwrap());
    assert_eq!(
        rows(of_ended).await,
        0,
        "ending a session deletes its streams' events"
    );
    assert_eq!(
        (rows(of_idle.clone()).await, rows(finished.clone()).await),
        (1, 1)
    );

    let retention = durable_mcp_store::Retention {
        session_idle_ttl_ms: Some(0),
        max_stream_age_ms: Some(0),
    };
    let report = store
        .prune(&retention, durable_mcp_store::now_ms() + 60_000)
        .await
        .unwrap();
    assert!(
        report.sessions_ended >= 1 && report.streams_deleted >= 1,
        "{report:?}"
    );
    assert_eq!(
        rows(of_idle).await,
        0,
        "pruning an idle session deletes its streams' events"
    );
    assert_eq!(
        rows(finished).await,
        0,
        "pruning a finished stream deletes its events"
    );
}

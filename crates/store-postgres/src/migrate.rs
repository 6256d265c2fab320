//! Versioned schema with forward migrations.
//!
//! Applied versions are rows of `durable_mcp_schema`; the schema's version is the largest.
//! Every worker migrates at start, inside one transaction holding a transaction-scoped
//! advisory lock, so concurrent starts run each migration exactly once and none sees a
//! half-migrated schema (PostgreSQL DDL is transactional). A database whose version is
//! newer than this build's is refused rather than misread.

use durable_mcp_store::{StoreError, StoreResult};
use tokio_postgres::Client;

use crate::error::from_pg;
use crate::options::quote_ident;
use crate::pool::Conn;

/// Each entry migrates from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: sessions, streams and their events. Deleting a session deletes its streams,
    // deleting a stream deletes its events (D5).
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        record TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        last_seen_ms BIGINT NOT NULL
    );
    CREATE INDEX sessions_by_principal ON sessions (principal, created_at_ms, id);
    CREATE INDEX sessions_by_age ON sessions (created_at_ms, id);
    CREATE INDEX sessions_by_last_seen ON sessions (last_seen_ms);
    CREATE TABLE streams (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        session TEXT REFERENCES sessions (id) ON DELETE CASCADE,
        first_seq BIGINT NOT NULL DEFAULT 1,
        last_seq BIGINT NOT NULL DEFAULT 0,
        closed BOOLEAN NOT NULL DEFAULT FALSE,
        last_event_ms BIGINT NOT NULL
    );
    CREATE INDEX streams_by_session ON streams (session);
    CREATE INDEX streams_closed_by_age ON streams (last_event_ms) WHERE closed;
    CREATE TABLE events (
        stream TEXT NOT NULL REFERENCES streams (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (stream, seq)
    );",
    // 1 -> 2: journal records (runs, steps, tasks, aliases), versioned, optionally
    // expiring. Keys compare bytewise ("C"), so prefix ranges use the primary key.
    "CREATE TABLE records (
        kind TEXT NOT NULL,
        key TEXT COLLATE \"C\" NOT NULL,
        version BIGINT NOT NULL,
        value TEXT NOT NULL,
        expires_at BIGINT NULL,
        PRIMARY KEY (kind, key)
    );
    CREATE INDEX records_by_expiry ON records (expires_at) WHERE expires_at IS NOT NULL;",
];

/// The schema version this build writes.
pub const LATEST: i64 = MIGRATIONS.len() as i64;

/// The first key of the advisory lock migrations hold (`'dmcp'`); the second is a hash of
/// the schema name, so deployments in different schemas migrate independently.
const LOCK_CLASS: i32 = 0x646d_6370;

/// Bring the schema up to [`LATEST`] and return it, refusing newer databases with
/// [`StoreError::Incompatible`].
pub(crate) async fn migrate(client: &mut Client, schema: Option<&str>) -> StoreResult<i64> {
    let tx = client.transaction().await.map_err(from_pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", &[&LOCK_CLASS, &schema.unwrap_or("")]).await.map_err(from_pg)?;
    if let Some(schema) = schema {
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(schema))).await.map_err(from_pg)?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS durable_mcp_schema (
            version BIGINT PRIMARY KEY,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(from_pg)?;
    let current: i64 = tx.query_one("SELECT COALESCE(MAX(version), 0) FROM durable_mcp_schema", &[]).await.and_then(|row| row.try_get(0)).map_err(from_pg)?;
    if current > LATEST {
        return Err(StoreError::Incompatible(format!(
            "the PostgreSQL schema{} is at version {current}, but this durable-mcp understands up to {LATEST}: upgrade durable-mcp",
            schema.map(|s| format!(" {s:?}")).unwrap_or_default()
        )));
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(current).unwrap_or(0)) {
        let version = index as i64 + 1;
        tx.batch_execute(sql).await.map_err(from_pg)?;
        tx.execute("INSERT INTO durable_mcp_schema (version) VALUES ($1)", &[&version]).await.map_err(from_pg)?;
        tracing::info!(version, schema = schema.unwrap_or(""), "postgres schema migrated");
    }
    tx.commit().await.map_err(from_pg)?;
    Ok(LATEST)
}

/// What `Store::status` reads: the schema version, the server's clock and the settings
/// that decide whether a commit survives a crash.
pub(crate) async fn status(conn: &mut Conn) -> StoreResult<durable_mcp_store::StoreStatus> {
    use durable_mcp_store::SchemaVersion;
    const STATUS: &str = "SELECT (SELECT COALESCE(MAX(version), 0) FROM durable_mcp_schema),
        (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT,
        current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes')";
    let statement = conn.statements.get(&conn.client, STATUS).await?;
    let row = conn.client.query_one(&statement, &[]).await.map_err(from_pg)?;
    let found: i64 = row.try_get(0).map_err(from_pg)?;
    let now: i64 = row.try_get(1).map_err(from_pg)?;
    let fsync: String = row.try_get(2).map_err(from_pg)?;
    let synchronous_commit: String = row.try_get(3).map_err(from_pg)?;
    let full_page_writes: String = row.try_get(4).map_err(from_pg)?;
    let settings = judge_settings(fsync, synchronous_commit, full_page_writes);
    Ok(durable_mcp_store::StoreStatus { schema: Some(SchemaVersion { found, expected: LATEST }), server_time_ms: u64::try_from(now).ok(), settings })
}

/// The server settings that decide whether an acknowledged commit survives a crash, each
/// judged (`doctor` prints the weak ones with their fix).
pub(crate) fn judge_settings(fsync: String, synchronous_commit: String, full_page_writes: String) -> Vec<durable_mcp_store::Setting> {
    use durable_mcp_store::Setting;
    let fsync = if fsync == "off" {
        Setting::weak(
            "fsync",
            fsync,
            "commits are not flushed to disk: a server crash can lose acknowledged events and corrupt the cluster",
            "set `fsync = on` in postgresql.conf",
        )
    } else {
        Setting::fine("fsync", fsync)
    };
    let synchronous_commit = if synchronous_commit == "off" {
        Setting::weak(
            "synchronous_commit",
            synchronous_commit,
            "a commit is acknowledged before it is flushed: a server crash can lose the last acknowledged events",
            "set `synchronous_commit = on` (server or role) or remove it from the connection options",
        )
    } else {
        Setting::fine("synchronous_commit", synchronous_commit)
    };
    let full_page_writes = if full_page_writes == "off" {
        Setting::weak("full_page_writes", full_page_writes, "a power loss during a write can corrupt pages", "set `full_page_writes = on` in postgresql.conf")
    } else {
        Setting::fine("full_page_writes", full_page_writes)
    };
    vec![fsync, synchronous_commit, full_page_writes]
}

#[cfg(test)]
mod judged {
    use super::judge_settings;

    fn weak(fsync: &str, commit: &str, fpw: &str) -> Vec<&'static str> {
        let names = ["fsync", "synchronous_commit", "full_page_writes"];
        judge_settings(fsync.into(), commit.into(), fpw.into()).iter().zip(names).filter(|(s, _)| s.weakness.is_some()).map(|(_, n)| n).collect()
    }

    #[test]
    fn each_setting_that_loses_acknowledged_commits_is_flagged_alone() {
        assert!(weak("on", "on", "on").is_empty());
        assert!(weak("on", "remote_apply", "on").is_empty());
        assert_eq!(weak("off", "on", "on"), ["fsync"]);
        assert_eq!(weak("on", "off", "on"), ["synchronous_commit"]);
        assert_eq!(weak("on", "on", "off"), ["full_page_writes"]);
    }
}

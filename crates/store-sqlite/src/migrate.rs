//! Versioned schema with forward migrations. The version lives in `PRAGMA user_version`; a
//! database written by a newer durable-mcp is refused rather than misread.

use durable_mcp_store::StoreError;
use rusqlite::Connection;

/// Each entry migrates from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: sessions, streams and their events.
    "CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        record TEXT NOT NULL,
        last_seen_ms INTEGER NOT NULL
    );
    CREATE TABLE streams (
        id TEXT PRIMARY KEY,
        principal TEXT NOT NULL,
        session TEXT,
        first_seq INTEGER NOT NULL DEFAULT 1,
        last_seq INTEGER NOT NULL DEFAULT 0,
        closed INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX streams_by_session ON streams(session);
    CREATE TABLE events (
        stream TEXT NOT NULL,
        seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (stream, seq)
    ) WITHOUT ROWID;",
];

/// The schema version this build writes.
pub const LATEST: i64 = MIGRATIONS.len() as i64;

/// Bring the schema up to [`LATEST`], refusing newer databases.
pub fn migrate(conn: &mut Connection) -> Result<i64, StoreError> {
    let current: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(crate::error::from_sqlite)?;
    if current > LATEST {
        return Err(StoreError::Incompatible(format!(
            "the database has schema version {current}, but this durable-mcp understands up to {LATEST}: upgrade durable-mcp"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(usize::try_from(current).unwrap_or(0)) {
        let tx = conn.transaction().map_err(crate::error::from_sqlite)?;
        tx.execute_batch(sql).map_err(crate::error::from_sqlite)?;
        tx.pragma_update(None, "user_version", version as i64 + 1).map_err(crate::error::from_sqlite)?;
        tx.commit().map_err(crate::error::from_sqlite)?;
        tracing::info!(version = version + 1, "sqlite schema migrated");
    }
    Ok(LATEST)
}

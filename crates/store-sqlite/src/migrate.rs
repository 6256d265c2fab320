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
    // 1 -> 2: retention needs each stream's last activity.
    "ALTER TABLE streams ADD COLUMN last_event_ms INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX sessions_by_last_seen ON sessions(last_seen_ms);
    CREATE INDEX streams_closed_by_age ON streams(closed, last_event_ms);",
    // 2 -> 3: journal records (runs, steps, tasks, aliases), versioned, optionally expiring.
    "CREATE TABLE records (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        version INTEGER NOT NULL,
        value TEXT NOT NULL,
        expires_at INTEGER NULL,
        PRIMARY KEY (kind, key)
    ) WITHOUT ROWID;
    CREATE INDEX records_by_expiry ON records(expires_at) WHERE expires_at IS NOT NULL;",
    // 3 -> 4: retention looks for finished streams only, so only they are indexed by age: an
    // append to an open stream (every event) no longer moves an index entry.
    "DROP INDEX streams_closed_by_age;
    CREATE INDEX streams_finished_by_age ON streams(last_event_ms) WHERE closed = 1;",
    // 4 -> 5: ending a session is one row, whatever its number of streams: the session's
    // id goes here, its streams read as gone at once and are deleted by the next prunes,
    // a batch at a time (one transaction deleting them all held the writer, and grew the
    // WAL and the statement journal by their size).
    "CREATE TABLE ended_sessions (id TEXT PRIMARY KEY) WITHOUT ROWID;",
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
    for (version, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        let tx = conn.transaction().map_err(crate::error::from_sqlite)?;
        tx.execute_batch(sql).map_err(crate::error::from_sqlite)?;
        tx.pragma_update(None, "user_version", version as i64 + 1)
            .map_err(crate::error::from_sqlite)?;
        tx.commit().map_err(crate::error::from_sqlite)?;
        tracing::info!(version = version + 1, "sqlite schema migrated");
    }
    Ok(LATEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_database_migrates_forward_keeping_its_data() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute("INSERT INTO streams (id, principal) VALUES ('s', 'p')", [])
            .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, LATEST);
        let age: i64 = conn
            .query_row(
                "SELECT last_event_ms FROM streams WHERE id = 's'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(age, 0);
        let records: i64 = conn
            .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
            .unwrap();
        assert_eq!(records, 0);
    }

    #[test]
    fn a_version_3_database_indexes_only_finished_streams_by_age() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..3] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.execute("INSERT INTO streams (id, principal, closed, last_event_ms) VALUES ('open', 'p', 0, 5), ('done', 'p', 1, 5)", []).unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let plan: String = conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT id FROM streams WHERE closed = 1 AND last_event_ms < 10",
                [],
                |r| r.get(3),
            )
            .unwrap();
        assert!(
            plan.contains("streams_finished_by_age"),
            "retention's query uses the partial index: {plan}"
        );
        let found: Vec<String> = conn
            .prepare("SELECT id FROM streams WHERE closed = 1 AND last_event_ms < 10")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(found, ["done"]);
        let old: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'streams_closed_by_age'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(old, 0, "the old index is gone");
    }

    #[test]
    fn a_version_2_database_gains_the_records_table() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch(MIGRATIONS[1]).unwrap();
        conn.pragma_update(None, "user_version", 2).unwrap();
        conn.execute(
            "INSERT INTO sessions (id, principal, record, last_seen_ms) VALUES ('x', 'p', '{}', 7)",
            [],
        )
        .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, LATEST);
        conn.execute(
            "INSERT INTO records (kind, key, version, value) VALUES ('run', 'k', 1, '{}')",
            [],
        )
        .unwrap();
        let seen: i64 = conn
            .query_row(
                "SELECT last_seen_ms FROM sessions WHERE id = 'x'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(seen, 7, "existing data kept");
        assert_eq!(
            migrate(&mut conn).unwrap(),
            LATEST,
            "migrating again is a no-op"
        );
    }
}

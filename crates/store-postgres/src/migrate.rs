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
    // 2 -> 3: an event no longer checks its stream's row by foreign key: an append finds
    // and locks that row itself before it inserts, and whatever deletes streams deletes
    // their events in the same transaction (after, in a statement of its own, so it sees
    // every event committed before the streams' rows were locked).
    //
    // A write batch (or a group of them) as one statement. `dmcp_op` runs one op
    // and answers what it did: a result (>= 0) or, having written nothing, a refusal (< 0;
    // see `batch::Refusal`). `dmcp_commit` runs a group's ops in order, the ops of a job
    // of several in a block of their own: a refused op there (or a value the server
    // refuses) undoes its job alone, and the group's other jobs go on. A job of one op
    // needs no block (a refused op wrote nothing); a value refused there fails the whole
    // statement. One row per op, in order: its result, or, when its value was refused, the
    // SQLSTATE and message (`NULL` result). The ops of a refused job before the one refused
    // keep the results of their undone writes: the job is answered by its refusal.
    "ALTER TABLE events DROP CONSTRAINT events_stream_fkey;
    CREATE FUNCTION dmcp_op(p_op SMALLINT, p_a TEXT, p_b TEXT, p_c TEXT, p_n BIGINT, p_m BIGINT, p_f BOOLEAN, p_w BOOLEAN,
        p_now BIGINT, p_max BIGINT, p_channel TEXT) RETURNS BIGINT LANGUAGE plpgsql AS $fn$
    DECLARE
        v_seq BIGINT;
        v_first BIGINT;
        v_closed BOOLEAN;
        v_count BIGINT;
    BEGIN
        CASE p_op
        WHEN 1 THEN
            -- Create stream p_a of principal p_b and session p_c. The session's row is
            -- locked as its foreign key would, so it cannot end before this commits.
            IF p_c IS NOT NULL THEN
                PERFORM 1 FROM sessions WHERE id = p_c FOR KEY SHARE;
                IF NOT FOUND THEN
                    -- A stream that exists is refused as such first, as a lone create is.
                    PERFORM 1 FROM streams WHERE id = p_a;
                    IF FOUND THEN RETURN -1; END IF;
                    RETURN -5;
                END IF;
            END IF;
            INSERT INTO streams (id, principal, session, last_event_ms) VALUES (p_a, p_b, p_c, p_now) ON CONFLICT (id) DO NOTHING;
            IF NOT FOUND THEN RETURN -1; END IF;
            RETURN 0;
        WHEN 2 THEN
            -- Append p_b to stream p_a, closing it if p_f, waking its tails if p_w, keeping
            -- at most p_max events (NULL: all).
            UPDATE streams SET last_seq = last_seq + 1, closed = p_f, last_event_ms = p_now,
                first_seq = GREATEST(first_seq, last_seq + 2 - p_max)
            WHERE id = p_a AND NOT closed RETURNING last_seq, first_seq INTO v_seq, v_first;
            IF NOT FOUND THEN
                SELECT closed INTO v_closed FROM streams WHERE id = p_a;
                IF NOT FOUND THEN RETURN -2; END IF;
                IF v_closed THEN RETURN -3; END IF;
                RETURN -4;
            END IF;
            INSERT INTO events (stream, seq, data) VALUES (p_a, v_seq, p_b);
            IF p_max IS NOT NULL THEN
                DELETE FROM events WHERE stream = p_a AND seq < v_first;
            END IF;
            IF p_w THEN PERFORM pg_notify(p_channel, p_a); END IF;
            RETURN v_seq;
        WHEN 3 THEN
            -- Close stream p_a, waking its tails if p_w.
            UPDATE streams SET closed = TRUE, last_event_ms = p_now WHERE id = p_a AND NOT closed;
            IF NOT FOUND THEN
                PERFORM 1 FROM streams WHERE id = p_a;
                IF NOT FOUND THEN RETURN -2; END IF;
                RETURN -3;
            END IF;
            IF p_w THEN PERFORM pg_notify(p_channel, p_a); END IF;
            RETURN 0;
        WHEN 4 THEN
            -- Put record (kind p_a, key p_b) = p_c expiring at p_n, if absent or expired.
            INSERT INTO records (kind, key, version, value, expires_at) VALUES (p_a, p_b, 1, p_c, p_n)
            ON CONFLICT (kind, key) DO UPDATE SET version = 1, value = EXCLUDED.value, expires_at = EXCLUDED.expires_at
            WHERE records.expires_at IS NOT NULL AND records.expires_at <= p_now;
            IF NOT FOUND THEN RETURN -6; END IF;
            RETURN 1;
        WHEN 5 THEN
            -- Put it if unexpired at version p_m.
            UPDATE records SET version = version + 1, value = p_c, expires_at = p_n
            WHERE kind = p_a AND key = p_b AND version = p_m AND (expires_at IS NULL OR expires_at > p_now)
            RETURNING version INTO v_count;
            IF NOT FOUND THEN RETURN -6; END IF;
            RETURN v_count;
        WHEN 6 THEN
            -- Delete it if unexpired at version p_m.
            DELETE FROM records WHERE kind = p_a AND key = p_b AND version = p_m AND (expires_at IS NULL OR expires_at > p_now);
            IF NOT FOUND THEN RETURN -6; END IF;
            RETURN 1;
        WHEN 7 THEN
            -- Delete the records of kind p_a whose key starts with p_b (p_c: the first key
            -- after them, NULL: none); count those unexpired.
            IF p_c IS NULL THEN
                WITH deleted AS (DELETE FROM records WHERE kind = p_a AND key >= p_b RETURNING expires_at)
                SELECT count(*) INTO v_count FROM deleted WHERE expires_at IS NULL OR expires_at > p_now;
            ELSE
                WITH deleted AS (DELETE FROM records WHERE kind = p_a AND key >= p_b AND key < p_c RETURNING expires_at)
                SELECT count(*) INTO v_count FROM deleted WHERE expires_at IS NULL OR expires_at > p_now;
            END IF;
            RETURN v_count;
        WHEN 8 THEN
            -- Close a stream the op before closed with its append.
            RETURN 0;
        END CASE;
    END $fn$;
    CREATE FUNCTION dmcp_commit(p_job INT[], p_op SMALLINT[], p_a TEXT[], p_b TEXT[], p_c TEXT[], p_n BIGINT[], p_m BIGINT[],
        p_f BOOLEAN[], p_w BOOLEAN[], p_now BIGINT, p_max BIGINT, p_channel TEXT)
        RETURNS TABLE (result BIGINT, failure TEXT) LANGUAGE plpgsql AS $fn$
    DECLARE
        v_total INT := coalesce(array_length(p_op, 1), 0);
        v_results BIGINT[] := array_fill(NULL::BIGINT, ARRAY[v_total]);
        v_failures TEXT[] := array_fill(NULL::TEXT, ARRAY[v_total]);
        v_start INT := 1;
        v_end INT;
        v_i INT;
    BEGIN
        WHILE v_start <= v_total LOOP
            v_end := v_start;
            WHILE v_end < v_total AND p_job[v_end + 1] = p_job[v_start] LOOP
                v_end := v_end + 1;
            END LOOP;
            IF v_start = v_end THEN
                -- One op: refused, it wrote nothing.
                v_results[v_start] := dmcp_op(p_op[v_start], p_a[v_start], p_b[v_start], p_c[v_start], p_n[v_start], p_m[v_start],
                    p_f[v_start], p_w[v_start], p_now, p_max, p_channel);
            ELSE
                v_i := v_start;
                BEGIN
                    WHILE v_i <= v_end LOOP
                        v_results[v_i] := dmcp_op(p_op[v_i], p_a[v_i], p_b[v_i], p_c[v_i], p_n[v_i], p_m[v_i], p_f[v_i], p_w[v_i],
                            p_now, p_max, p_channel);
                        IF v_results[v_i] < 0 THEN
                            RAISE EXCEPTION USING ERRCODE = 'DM001';
                        END IF;
                        v_i := v_i + 1;
                    END LOOP;
                EXCEPTION
                    WHEN SQLSTATE 'DM001' THEN NULL;
                    WHEN data_exception OR program_limit_exceeded THEN
                        v_results[v_i] := NULL;
                        v_failures[v_i] := SQLSTATE || ' ' || SQLERRM;
                END;
            END IF;
            v_start := v_end + 1;
        END LOOP;
        RETURN QUERY SELECT r, f FROM unnest(v_results, v_failures) WITH ORDINALITY AS t(r, f, i) ORDER BY i;
    END $fn$;",
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
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&LOCK_CLASS, &schema.unwrap_or("")],
    )
    .await
    .map_err(from_pg)?;
    if let Some(schema) = schema {
        tx.batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS {}",
            quote_ident(schema)
        ))
        .await
        .map_err(from_pg)?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS durable_mcp_schema (
            version BIGINT PRIMARY KEY,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await
    .map_err(from_pg)?;
    let current: i64 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM durable_mcp_schema",
            &[],
        )
        .await
        .and_then(|row| row.try_get(0))
        .map_err(from_pg)?;
    if current > LATEST {
        return Err(StoreError::Incompatible(format!(
            "the PostgreSQL schema{} is at version {current}, but this durable-mcp understands up to {LATEST}: upgrade durable-mcp",
            schema.map(|s| format!(" {s:?}")).unwrap_or_default()
        )));
    }
    for (index, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        let version = index as i64 + 1;
        tx.batch_execute(sql).await.map_err(from_pg)?;
        tx.execute(
            "INSERT INTO durable_mcp_schema (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(from_pg)?;
        tracing::info!(
            version,
            schema = schema.unwrap_or(""),
            "postgres schema migrated"
        );
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
    let row = conn
        .client
        .query_one(&statement, &[])
        .await
        .map_err(from_pg)?;
    let found: i64 = row.try_get(0).map_err(from_pg)?;
    let now: i64 = row.try_get(1).map_err(from_pg)?;
    let fsync: String = row.try_get(2).map_err(from_pg)?;
    let synchronous_commit: String = row.try_get(3).map_err(from_pg)?;
    let full_page_writes: String = row.try_get(4).map_err(from_pg)?;
    let settings = judge_settings(fsync, synchronous_commit, full_page_writes);
    Ok(durable_mcp_store::StoreStatus {
        schema: Some(SchemaVersion {
            found,
            expected: LATEST,
        }),
        server_time_ms: u64::try_from(now).ok(),
        settings,
    })
}

/// The server settings that decide whether an acknowledged commit survives a crash, each
/// judged (`doctor` prints the weak ones with their fix).
pub(crate) fn judge_settings(
    fsync: String,
    synchronous_commit: String,
    full_page_writes: String,
) -> Vec<durable_mcp_store::Setting> {
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
        Setting::weak(
            "full_page_writes",
            full_page_writes,
            "a power loss during a write can corrupt pages",
            "set `full_page_writes = on` in postgresql.conf",
        )
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
        judge_settings(fsync.into(), commit.into(), fpw.into())
            .iter()
            .zip(names)
            .filter(|(s, _)| s.weakness.is_some())
            .map(|(_, n)| n)
            .collect()
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

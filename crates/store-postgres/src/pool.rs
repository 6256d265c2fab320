//! A small connection pool: at most `pool_size` connections, opened on demand, each with
//! its own cache of prepared statements. A connection that failed, timed out or was closed
//! by the server is dropped instead of returned, so the next operation reconnects: the
//! store heals by itself when the server comes back (D15).
//!
//! An operation whose caller stopped waiting for it (its future was dropped mid-query: a
//! `select!` that took another branch, an aborted task) gives its connection back too,
//! marked as unchecked: the next operation on it first sends an empty query, which the
//! server answers only after whatever the abandoned operation left in flight (tokio-postgres
//! keeps requests in order, discards answers nobody waits for, and rolls back a dropped
//! [`tokio_postgres::Transaction`]). Reconnecting instead, with every statement prepared
//! again, costs several round trips: paid on every such cancellation, it dominated a request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use durable_mcp_store::{StoreError, StoreResult};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::{Client, Connection, GenericClient, Socket, Statement};

use crate::error::{describe, from_connect, from_pg, unavailable};
use crate::options::{PgOptions, quote_ident};
use crate::tls::RustlsStream;

/// A raw connection, before anything drives it: the whole attempt (TCP, TLS handshake,
/// login) is bounded by the connect timeout (tokio-postgres' own covers only the TCP
/// connect), and failures say where the store tried to connect.
pub(crate) async fn connect_raw(
    options: &PgOptions,
) -> StoreResult<(Client, Connection<Socket, RustlsStream>)> {
    let target = options.target();
    let (tls, encrypted) = options.tls().connector();
    let connected = tokio::time::timeout(
        options.connect_timeout,
        options.connect_config().connect(tls),
    )
    .await
    .map_err(|_| {
        unavailable(format!(
            "PostgreSQL not reachable at {target}: no answer within {:?}",
            options.connect_timeout
        ))
    })?
    .map_err(|e| from_connect(&target, e))?;
    if !encrypted.load(std::sync::atomic::Ordering::Relaxed) {
        options.tls().note_plaintext(&target);
    }
    Ok(connected)
}

/// Open one connection for queries: its I/O driven by a spawned task, its `search_path`
/// set to the store's schema, and its prepared statements planned once (generic plans).
///
/// Every statement of the store is a short keyed one whose best plan does not depend on
/// its parameters; left to choose, PostgreSQL plans some of them again at every execution
/// (the group commit's many-appends statement: the planning took longer than the run).
pub(crate) async fn connect(options: &PgOptions) -> StoreResult<Client> {
    let (client, connection) = connect_raw(options).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(error = %describe(&error), "postgres connection ended");
        }
    });
    let mut setup = String::from("SET plan_cache_mode TO force_generic_plan");
    if let Some(schema) = &options.schema {
        setup.push_str(&format!("; SET search_path TO {}", quote_ident(schema)));
    }
    client.batch_execute(&setup).await.map_err(from_pg)?;
    Ok(client)
}

/// Prepared statements of one connection, keyed by their SQL text.
#[derive(Default)]
pub(crate) struct Statements {
    cache: HashMap<&'static str, Statement>,
}

impl Statements {
    /// The prepared form of `sql` on this connection, preparing it on first use. `client` is
    /// the connection itself or a transaction on it.
    pub(crate) async fn get<C: GenericClient + Sync>(
        &mut self,
        client: &C,
        sql: &'static str,
    ) -> StoreResult<Statement> {
        if let Some(statement) = self.cache.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql).await.map_err(from_pg)?;
        self.cache.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Prepare whichever of `sqls` this connection has not prepared yet, all in one round
    /// trip (the requests are pipelined).
    pub(crate) async fn prepare_all<C: GenericClient + Sync>(
        &mut self,
        client: &C,
        sqls: &[&'static str],
    ) -> StoreResult<()> {
        let mut missing: Vec<&'static str> = sqls
            .iter()
            .copied()
            .filter(|sql| !self.cache.contains_key(sql))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        let prepared =
            futures::future::join_all(missing.iter().map(|sql| client.prepare(sql))).await;
        for (sql, statement) in missing.into_iter().zip(prepared) {
            self.cache.insert(sql, statement.map_err(from_pg)?);
        }
        Ok(())
    }

    /// The prepared form of `sql`, if [`Self::get`] or [`Self::prepare_all`] prepared it.
    pub(crate) fn prepared(&self, sql: &str) -> Option<&Statement> {
        self.cache.get(sql)
    }
}

/// One pooled connection.
pub(crate) struct Conn {
    /// The connection.
    pub(crate) client: Client,
    /// Its prepared statements.
    pub(crate) statements: Statements,
    /// When it was last given back to the pool.
    idle_since: Instant,
    /// Its last operation was abandoned: check it before the next one.
    unchecked: bool,
}

/// The pool.
pub(crate) struct Pool {
    options: PgOptions,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
    /// Connections opened so far (for tests and logs).
    opened: AtomicU64,
}

impl Pool {
    pub(crate) fn new(options: PgOptions) -> Self {
        let permits = Semaphore::new(options.pool_size);
        Self {
            options,
            idle: Mutex::new(Vec::new()),
            permits,
            opened: AtomicU64::new(0),
        }
    }

    /// How many connections this pool has opened since it was created.
    #[cfg(test)]
    pub(crate) fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        // The vector is only pushed to and popped from; a panic cannot leave it half-updated.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection: an idle one if any is still open, else a new one. Waits at most the
    /// acquire timeout (bounded by the operation timeout) for a free slot.
    pub(crate) async fn get(&self) -> StoreResult<PoolGuard<'_>> {
        let timeout = self.options.acquire_timeout.min(self.options.op_timeout);
        let permit = tokio::time::timeout(timeout, self.permits.acquire())
            .await
            .map_err(|_| unavailable(format!("no free PostgreSQL connection within {timeout:?}")))?
            .map_err(|_| unavailable("the PostgreSQL pool is closed"))?;
        let reused = loop {
            match self.idle().pop() {
                Some(conn) if conn.client.is_closed() => continue,
                other => break other,
            }
        };
        let mut guard = PoolGuard {
            pool: self,
            conn: reused,
            _permit: permit,
        };
        if let Some(conn) = &mut guard.conn
            && (conn.unchecked || conn.idle_since.elapsed() >= self.options.check_after)
        {
            // Dropped while checking, the guard gives the connection back still unchecked.
            if self.answers(conn).await {
                conn.unchecked = false;
            } else {
                guard.conn = None;
            }
        }
        if guard.conn.is_none() {
            let client = connect(&self.options).await?;
            self.opened.fetch_add(1, Ordering::Relaxed);
            guard.conn = Some(Conn {
                client,
                statements: Statements::default(),
                idle_since: Instant::now(),
                unchecked: false,
            });
        }
        Ok(guard)
    }
}

impl Pool {
    /// Whether a pooled connection still answers (an empty query) within the check
    /// timeout. One that does not is dropped by the caller (closing it), so an operation
    /// never waits its whole timeout on a server that stopped answering. The answer comes
    /// after those of every request sent before it, so a connection that answers is idle.
    async fn answers(&self, conn: &Conn) -> bool {
        let timeout = self.options.check_timeout;
        match tokio::time::timeout(timeout, conn.client.batch_execute("")).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::debug!(error = %describe(&error), "a pooled PostgreSQL connection failed its check; reconnecting");
                false
            }
            Err(_) => {
                tracing::warn!(
                    ?timeout,
                    "a pooled PostgreSQL connection did not answer its check; reconnecting"
                );
                false
            }
        }
    }
}

/// A connection taken from the pool, given back by [`PoolGuard::settle`].
///
/// A guard dropped without `settle` (the caller's future was cancelled mid-operation)
/// gives its connection back as unchecked: the next operation checks it first, which also
/// waits until what the cancelled one left in flight is done (see the module docs).
pub(crate) struct PoolGuard<'a> {
    pool: &'a Pool,
    /// Always `Some` until `settle` or `drop` takes it.
    conn: Option<Conn>,
    _permit: SemaphorePermit<'a>,
}

impl PoolGuard<'_> {
    /// The connection.
    pub(crate) fn conn(&mut self) -> &mut Conn {
        match &mut self.conn {
            Some(conn) => conn,
            // `conn` is only taken by `settle` (which consumes the guard) and `drop`.
            None => unreachable!("a pool guard without its connection"),
        }
    }

    /// Give the connection back and pass `result` through, unless `result` says the store
    /// is unavailable: then the connection may be broken or stuck behind an unanswered
    /// query, so it is closed and the next operation opens a fresh one.
    pub(crate) fn settle<T>(mut self, result: StoreResult<T>) -> StoreResult<T> {
        if let Some(conn) = self.conn.take() {
            let broken = matches!(result, Err(StoreError::Unavailable(_)));
            self.pool.give_back(conn, broken, false);
        }
        result
    }
}

impl Drop for PoolGuard<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back(conn, false, true);
        }
    }
}

impl Pool {
    /// Put `conn` back among the idle ones (to be checked first if `unchecked`), or close
    /// it if it is `broken` or closed.
    fn give_back(&self, mut conn: Conn, broken: bool, unchecked: bool) {
        if broken || conn.client.is_closed() {
            return;
        }
        conn.idle_since = Instant::now();
        conn.unchecked = unchecked;
        self.idle().push(conn);
    }
}

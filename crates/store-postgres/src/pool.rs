//! A small connection pool: at most `pool_size` connections, opened on demand, each with
//! its own cache of prepared statements. A connection that failed, timed out or was closed
//! by the server is dropped instead of returned, so the next operation reconnects: the
//! store heals by itself when the server comes back (D15).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use durable_mcp_store::{StoreError, StoreResult};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Connection, GenericClient, NoTls, Socket, Statement};

use crate::error::{describe, from_connect, from_pg, unavailable};
use crate::options::{PgOptions, quote_ident};

/// A raw connection, before anything drives it: the whole attempt is bounded by the
/// connect timeout (tokio-postgres' own covers only the TCP connect, not the startup
/// exchange), and failures say where the store tried to connect.
pub(crate) async fn connect_raw(options: &PgOptions) -> StoreResult<(Client, Connection<Socket, NoTlsStream>)> {
    let target = options.target();
    tokio::time::timeout(options.connect_timeout, options.connect_config().connect(NoTls))
        .await
        .map_err(|_| unavailable(format!("PostgreSQL not reachable at {target}: no answer within {:?}", options.connect_timeout)))?
        .map_err(|e| from_connect(&target, e))
}

/// Open one connection for queries: its I/O driven by a spawned task, its `search_path`
/// set to the store's schema.
pub(crate) async fn connect(options: &PgOptions) -> StoreResult<Client> {
    let (client, connection) = connect_raw(options).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(error = %describe(&error), "postgres connection ended");
        }
    });
    if let Some(schema) = &options.schema {
        client.batch_execute(&format!("SET search_path TO {}", quote_ident(schema))).await.map_err(from_pg)?;
    }
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
    pub(crate) async fn get<C: GenericClient + Sync>(&mut self, client: &C, sql: &'static str) -> StoreResult<Statement> {
        if let Some(statement) = self.cache.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql).await.map_err(from_pg)?;
        self.cache.insert(sql, statement.clone());
        Ok(statement)
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
}

/// The pool.
pub(crate) struct Pool {
    options: PgOptions,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
}

impl Pool {
    pub(crate) fn new(options: PgOptions) -> Self {
        let permits = Semaphore::new(options.pool_size);
        Self { options, idle: Mutex::new(Vec::new()), permits }
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
        let conn = match reused {
            Some(conn) if conn.idle_since.elapsed() < self.options.check_after => conn,
            Some(conn) if self.answers(&conn).await => conn,
            _ => Conn { client: connect(&self.options).await?, statements: Statements::default(), idle_since: Instant::now() },
        };
        Ok(PoolGuard { pool: self, conn, _permit: permit })
    }
}

impl Pool {
    /// Whether a pooled connection still answers (an empty query) within the check
    /// timeout. One that does not is dropped by the caller (closing it), so an operation
    /// never waits its whole timeout on a server that stopped answering.
    async fn answers(&self, conn: &Conn) -> bool {
        let timeout = self.options.check_timeout;
        match tokio::time::timeout(timeout, conn.client.batch_execute("")).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::debug!(error = %describe(&error), "a pooled PostgreSQL connection failed its check; reconnecting");
                false
            }
            Err(_) => {
                tracing::warn!(?timeout, "a pooled PostgreSQL connection did not answer its check; reconnecting");
                false
            }
        }
    }
}

/// A connection taken from the pool, given back by [`PoolGuard::settle`].
///
/// A guard dropped without `settle` (the caller's future was cancelled mid-operation)
/// closes its connection rather than give back one that may still be busy; an unfinished
/// transaction on it is rolled back by the server.
pub(crate) struct PoolGuard<'a> {
    pool: &'a Pool,
    conn: Conn,
    _permit: SemaphorePermit<'a>,
}

impl PoolGuard<'_> {
    /// The connection.
    pub(crate) fn conn(&mut self) -> &mut Conn {
        &mut self.conn
    }

    /// Give the connection back and pass `result` through, unless `result` says the store
    /// is unavailable: then the connection may be broken or stuck behind an unanswered
    /// query, so it is closed and the next operation opens a fresh one.
    pub(crate) fn settle<T>(self, result: StoreResult<T>) -> StoreResult<T> {
        let broken = matches!(result, Err(StoreError::Unavailable(_))) || self.conn.client.is_closed();
        if !broken {
            let mut conn = self.conn;
            conn.idle_since = Instant::now();
            self.pool.idle().push(conn);
        }
        result
    }
}

//! The Redis store: one Redis shared by many durable-mcp workers.
//!
//! Open it with [`RedisStore::open_url`]`("redis://127.0.0.1:6379/0?prefix=dmcp")` or
//! [`RedisStore::open`] with [`RedisOptions`]. Needs Redis 6.2 or newer (or a compatible
//! server) with `maxmemory-policy noeviction`: every key here has a TTL, so a `volatile-*`
//! or `allkeys-*` policy could evict events from the middle of a log.
//!
//! - **One script per write.** Creating, updating and ending sessions, creating streams,
//!   appending, writing a journal record, and each removal by prune are single Lua scripts
//!   (`EVALSHA`, loaded on demand): atomic, and they check before they write, so a refused
//!   or failed call leaves nothing half-written (D15), and of writers racing on one record
//!   exactly one commits (D7, D8). Deleting records by prefix deletes 256 per script. A
//!   write batch (`Store::commit`) is one script too: it checks every op, then applies
//!   them all.
//! - **A stream's events live in its meta hash** (key layout 2): event `n` is field `n`
//!   beside the meta fields (which are not numbers). An append is part of the one `HSET`
//!   that saves the stream's state, so it costs no command of its own; a read after `a` is
//!   one `HMGET` of the fields `a+1 ..= min(last, a+limit)`, in order, and a missing field
//!   is an error, never a gap (D3); trimming to `max_events` deletes the exact prefix. The
//!   meta hash knows `first_seq` and `last_seq`, so nothing else is needed. A request's
//!   retained stream costs about 1.2 KB of Redis memory this way. Streams created under
//!   layout 1 keep their events in a Redis stream of their own (`XADD`, `XRANGE`, `XTRIM
//!   MINID`), which Redis gives a 4 KiB listpack up front, about 4.9 KB per retained request;
//!   this release reads and appends to both. See *Layout versions* below.
//! - **Wake-ups over pub/sub.** Appends `PUBLISH` on `<prefix>:wake`; each store handle
//!   keeps one subscribed connection and a periodic tick as a fallback (see `wake_tick`).
//! - **Reconnects by itself.** Commands go through a multiplexed connection that reconnects
//!   after a failure; calls made while Redis is away fail fast with
//!   [`StoreError::Unavailable`] (bounded by `connect_timeout` and `response_timeout`).
//!
//! # Key layout
//!
//! `P` is the prefix (default `dmcp`). Braces are Redis Cluster hash tags: every key of one
//! session, including its streams' keys, shares the tag `{s:<session>}` and so one hash
//! slot; a sessionless (modern) stream's keys share `{t:<stream>}`.
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `P:{s:<session>}:session` | hash | `principal`, `record` (the [`SessionRecord`] as JSON), `version` (bumped by every update) |
//! | `P:{s:<session>}:streams` | set | every stream of the session (deleted with it) |
//! | `P:{s:<session>}:open` | set | its open streams (their TTL is refreshed when the session is used) |
//! | `P:{s:<session>}:stream:<id>` | hash | stream meta: `principal`, `session`, `first_seq`, `last_seq`, `closed`, `last_event_ms`, `inline` (`1`: layout 2); under layout 2 also its events, field `<seq>` |
//! | `P:{s:<session>}:events:<id>` | stream | the events of a stream created under layout 1: entry `<seq>-0`, field `d` |
//! | `P:{t:<id>}:stream:<id>`, `P:{t:<id>}:events:<id>` | hash, stream | the same for a sessionless stream |
//! | `P:streamidx:<id>` | string | the tag of a session stream (`s:<session>`); a resume has only the event id. Sessionless streams need no entry: their tag is `t:<id>` |
//! | `P:sessions` | sorted set | session ids by `last_seen_ms` (prune, listing) |
//! | `P:finished` | sorted set | closed stream ids by the time of their final event (prune) |
//! | `P:record:<kind>:<key>` | hash | a journal record: `version`, `value`, `expires_at` (absent: never) |
//! | `P:records:<kind>` | sorted set | every key of the kind at score 0 (`ZRANGEBYLEX` lists a prefix in key order) |
//! | `P:records:<kind>:expiring` | sorted set | the keys of the kind that have an expiry, scored by it (prune) |
//! | `P:layout` | string | the key layout's version (see below); no expiry |
//! | `P:wake` | channel | `a:<stream>` after an append, `g:<id>,<id>...` when streams are deleted |
//!
//! **Cluster** ([`RedisOptions::cluster`]). The scripts touch the global keys (`streamidx`,
//! `sessions`, `finished`) together with a session's keys, a record together with its kind's
//! indexes, and a write batch any of them, deriving names from the prefix: they need every
//! key on one primary. On a cluster the prefix itself becomes a hash tag, `{P}`, which comes
//! first in every key name and so decides its slot: the whole store lives in the one slot of
//! `{P}`, every script stays atomic on the primary that holds it, and a failover moves it
//! whole. The inner tags then no longer matter. Each script invocation names `{P}:layout` as
//! its first key, so `EVALSHA` is routed there; commands that name no key (`INFO`, `SCAN`,
//! `TIME`, `CONFIG`, `WAIT`) are sent to that slot's primary.
//!
//! # Layout versions
//!
//! `P:layout` says where new streams keep their events: `1` in a Redis stream each (every
//! release before this key existed), `2` in their meta hash. This release reads and appends
//! to both kinds; the layout decides only where a *new* stream's events go. The first worker
//! that opens a prefix with no data sets it to 2. A prefix that holds data but no layout key
//! was written by an earlier release, whose workers cannot read layout-2 streams: it is set
//! to 1, so a rolling upgrade loses nothing, and each worker logs a warning at start. Once
//! every worker of the prefix runs this release, `SET <prefix>:layout 2` moves it on;
//! running workers see it within 30 s (a move back to 1, before a downgrade, as well). A
//! prefix with no key but a subscriber on its channel also gets 1 (this release sets the key
//! before it subscribes). A worker refuses to open a prefix whose layout is newer than it
//! knows ([`StoreError::Incompatible`]).
//!
//! # Retention
//!
//! Every key expires (D14) even if [`Store::prune`] is never called: a session and its open
//! streams after [`RedisOptions::session_idle_ttl`] without use (`update_session` refreshes
//! them; an append refreshes its own stream), a closed sessionless stream
//! [`RedisOptions::closed_stream_ttl`] after its final event, a closed session stream
//! `session_idle_ttl` after it. A stream of a session that has ended or expired is
//! `NotFound` at once, even before its own keys expire. A journal record with an expiry is
//! given the same time as its Redis expiry (`PEXPIREAT`); records without one stay until
//! deleted. `prune` applies the contract's [`Retention`] on top, through the two sorted
//! sets, and deletes expired records through the expiry indexes; entries of keys Redis has
//! expired are swept from them along the way (and listings take such entries out of the
//! listing index). `list_sessions` reads every live session: it is an
//! operator's tool, O(sessions).
//!
//! # Durability
//!
//! In plain words: a call that returned has been applied by the Redis server, in memory, and
//! is visible to every worker at once; whether it survives a restart *of Redis* is decided by
//! the server's persistence settings, not by this crate. Stated more precisely, an
//! acknowledged write (D1, D4, the commit of every operation) is as durable as:
//!
//! - **No persistence** (`save ""`, `appendonly no`; the development machine's Redis runs
//!   like this): it survives any number of worker crashes and restarts, and is lost
//!   entirely when Redis restarts or crashes. Sessions, logs and ids are gone; clients get
//!   404 / unknown event.
//! - **RDB snapshots** (`save <seconds> <changes>`): a Redis crash loses everything since the
//!   last snapshot, minutes of writes. Worse than loss, sequences restart from the
//!   snapshot's values, so ids a client already saw can be reused for other events (D2);
//!   use RDB alone only where losing the store is acceptable.
//! - **AOF, `appendfsync everysec`** (the usual production setting): Redis normally hands
//!   each write to the OS before it replies, so a crash of Redis alone loses nothing (unless
//!   a stalled disk made it postpone that, up to 2 s); a crash of the machine (kernel,
//!   power) loses up to the last one to two seconds of acknowledged writes, with the same
//!   id-reuse caveat for them.
//! - **AOF, `appendfsync always`**: Redis fsyncs before it replies; acknowledged writes
//!   survive power loss, like SQLite with `synchronous=FULL`, at the cost of an fsync per
//!   write batch.
//!
//! Replication is asynchronous: a failover to a replica may lose the last acknowledged
//! writes whatever the persistence, unless [`RedisOptions::wait_replicas`] makes every write
//! wait (`WAIT`) until that many replicas have it. A call that
//! fails with [`StoreError::Unavailable`] after sending its script (for example a reply
//! timeout) may or may not have been applied; it is then applied whole, never in part.

mod batch;
mod error;
mod keys;
mod layout;
mod options;
mod records;
mod scripts;
mod sessions;
mod streams;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use durable_mcp_store::{
    BatchOutcome, EventId, Expect, Principal, PruneReport, Record, RecordKind, Retention,
    SessionChange, SessionId, SessionRecord, Store, StoreError, StoreResult, StreamId, StreamOwner,
    StreamRead, WakeUps, WriteBatch, now_ms,
};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

pub use options::{DEFAULT_PREFIX, RedisOptions, RedisTls};

use crate::error::from_redis;
use crate::keys::Keys;
use crate::options::redact;

/// Up to `limit` members of the sorted set `index` scored below `cutoff`, from `offset`
/// (the prune candidates of the session and finished-stream indexes: a prune takes them
/// from 0, as each leaves the range; its preview pages through them).
pub(crate) async fn older_than(
    shared: &Shared,
    index: &str,
    cutoff: u64,
    offset: usize,
    limit: usize,
) -> StoreResult<Vec<String>> {
    redis::cmd("ZRANGEBYSCORE")
        .arg(index)
        .arg("-inf")
        .arg(format!("({cutoff}"))
        .arg("LIMIT")
        .arg(offset)
        .arg(limit)
        .query_async(&mut shared.conn())
        .await
        .map_err(error::from_redis)
}

/// The command connection: to one server (reconnecting by itself), or to a cluster (which
/// follows the slot map, failovers included).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

impl Conn {
    /// Run a command that names no key (`INFO`, `CONFIG GET`, `TIME`, `SCAN`, `PUBSUB`) on
    /// the server that holds `anchor`'s slot: on a cluster, the primary holding the whole
    /// store (every key of a prefix shares its slot).
    pub(crate) async fn on_store_node<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        anchor: &str,
    ) -> redis::RedisResult<T> {
        match self {
            Conn::Single(conn) => cmd.query_async(&mut conn.clone()).await,
            Conn::Cluster(conn) => {
                use redis::cluster_routing::{
                    Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr,
                };
                let route = Route::with_slot(Slot::for_key(anchor), SlotAddr::Master);
                let value = conn
                    .clone()
                    .route_command(
                        cmd.clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?;
                redis::from_redis_value(value.extract_error()?).map_err(Into::into)
            }
        }
    }
}

pub(crate) struct Shared {
    options: RedisOptions,
    keys: Keys,
    channel: String,
    conn: Conn,
    /// Where new streams keep their events.
    layout: layout::Layout,
    watchers: wake::Watchers,
    /// Stops the pub/sub listener when the last handle is dropped.
    _listener: wake::Listener,
}

impl Shared {
    /// Run a script that writes; with [`RedisOptions::wait_replicas`], then wait until that
    /// many replicas have it.
    pub(crate) async fn write<T: redis::FromRedisValue>(
        &self,
        call: &redis::ScriptInvocation<'_>,
    ) -> StoreResult<T> {
        let reply = call
            .invoke_async(&mut self.conn())
            .await
            .map_err(from_redis)?;
        self.replicated().await?;
        Ok(reply)
    }

    /// Wait for [`RedisOptions::wait_replicas`] replicas to acknowledge every write sent so
    /// far on the command connection (`WAIT`, on the primary that took them).
    pub(crate) async fn replicated(&self) -> StoreResult<()> {
        let wanted = self.options.wait_replicas;
        if wanted == 0 {
            return Ok(());
        }
        let ms = u64::try_from(self.options.wait_timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let acknowledged: u64 = self
            .conn
            .on_store_node(redis::cmd("WAIT").arg(wanted).arg(ms), &self.keys.layout())
            .await
            .map_err(from_redis)?;
        if acknowledged < u64::from(wanted) {
            return Err(StoreError::Unavailable(
                format!("a write reached {acknowledged} of {wanted} replicas within {ms} ms: the primary applied it, a failover may lose it").into(),
            ));
        }
        Ok(())
    }

    /// A command connection (a cheap handle to the shared multiplexed connection).
    pub(crate) fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// An invocation of `script` with the common arguments (prefix, channel) in place. On a
    /// cluster its first key is the layout key, whose slot is the whole store's, so that
    /// `EVALSHA` reaches the primary holding it (scripts read their own keys, if any, from
    /// the end of `KEYS`).
    pub(crate) fn script(
        &self,
        script: &'static redis::Script,
    ) -> redis::ScriptInvocation<'static> {
        let mut call = script.prepare_invoke();
        if self.options.cluster.is_some() {
            call.key(self.keys.layout());
        }
        call.arg(self.keys.prefix()).arg(&self.channel);
        call
    }
}

/// The Redis store. Cheap to clone; clones share one command connection and one pub/sub
/// listener. Separate [`RedisStore::open`] calls behave as separate workers.
#[derive(Clone)]
pub struct RedisStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &redact(&self.shared.options.url))
            .field("prefix", &self.shared.options.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connect to the server described by `options` and subscribe to its wake-ups.
    ///
    /// Fails within [`RedisOptions::connect_timeout`] with [`StoreError::Unavailable`] if
    /// the server cannot be reached, and with [`StoreError::Incompatible`] for a bad URL or
    /// a server older than 6.2.
    pub async fn open(options: RedisOptions) -> Result<Self, StoreError> {
        options.validate()?;
        let url = redact(&options.url);
        let timeout = options.connect_timeout;
        let store = match tokio::time::timeout(timeout, Self::connect(options)).await {
            Ok(Ok(store)) => store,
            Ok(Err(StoreError::Unavailable(error))) => {
                return Err(StoreError::Unavailable(
                    format!("redis at {url}: {error}").into(),
                ));
            }
            Ok(Err(error)) => return Err(error),
            Err(_) => {
                return Err(StoreError::Unavailable(
                    format!("redis at {url}: no connection within {timeout:?}").into(),
                ));
            }
        };
        tracing::info!(%url, prefix = %store.shared.options.prefix, "redis store open");
        Ok(store)
    }

    /// Open the store named by a `redis://` or `rediss://` URL (see [`RedisOptions::from_url`]).
    pub async fn open_url(url: &str) -> Result<Self, StoreError> {
        Self::open(RedisOptions::from_url(url)?).await
    }

    /// The settings this store was opened with.
    pub fn options(&self) -> &RedisOptions {
        &self.shared.options
    }

    async fn connect(options: RedisOptions) -> Result<Self, StoreError> {
        // On a cluster every key of the prefix carries the hash tag `{P}`: the whole store is
        // in one slot, so every script and batch stays atomic on the primary that holds it.
        let keys = match options.cluster {
            Some(_) => Keys::new(&format!("{{{}}}", options.prefix)),
            None => Keys::new(&options.prefix),
        };
        let (conn, clients) = match &options.cluster {
            None => {
                let client = client(&options)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(options.connect_timeout))
                    .set_response_timeout(Some(options.response_timeout))
                    .set_number_of_retries(options.connect_retries)
                    .set_min_delay(Duration::from_millis(50))
                    .set_max_delay(Duration::from_secs(1));
                let conn = ConnectionManager::new_with_config(client.clone(), config)
                    .await
                    .map_err(from_redis)?;
                (Conn::Single(conn), vec![client])
            }
            Some(nodes) => {
                let mut builder =
                    redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                        .connection_timeout(options.connect_timeout)
                        .response_timeout(options.response_timeout)
                        .retries(u32::try_from(options.connect_retries).unwrap_or(u32::MAX));
                if let Some(certificates) = options.tls.certificates()? {
                    builder = builder.certs(certificates);
                }
                let cluster = builder.build().map_err(from_redis)?;
                let conn = cluster.get_async_connection().await.map_err(from_redis)?;
                // Wake-ups: PUBLISH reaches every node of a cluster, so any node serves the
                // subscription; the listener moves on to the next seed when one fails.
                let clients = nodes
                    .iter()
                    .map(|node| {
                        client(&RedisOptions {
                            url: node.clone(),
                            cluster: None,
                            ..options.clone()
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                (Conn::Cluster(conn), clients)
            }
        };
        check_server(&conn, &keys).await?;
        let layout = layout::open(&conn, &keys, options.cluster.is_some()).await?;
        let channel = keys.channel();
        let watchers = wake::Watchers::default();
        let timeouts = wake::Timeouts {
            connect: options.connect_timeout,
            response: options.response_timeout,
        };
        let listener = wake::listen(clients, channel.clone(), watchers.clone(), timeouts).await?;
        Ok(Self {
            shared: Arc::new(Shared {
                options,
                keys,
                channel,
                conn,
                layout,
                watchers,
                _listener: listener,
            }),
        })
    }
}

/// The driver's client for `options`: the URL, with the TLS files read.
pub(crate) fn client(options: &RedisOptions) -> Result<redis::Client, StoreError> {
    match options.tls.certificates()? {
        None => redis::Client::open(options.url.as_str()),
        Some(certificates) => redis::Client::build_with_tls(options.url.as_str(), certificates),
    }
    .map_err(from_redis)
}

/// Refuse servers without `XTRIM MINID`; warn about settings that weaken the contract.
async fn check_server(conn: &Conn, keys: &Keys) -> Result<(), StoreError> {
    let info: String = match conn
        .on_store_node(&redis::cmd("INFO"), &keys.layout())
        .await
    {
        Ok(info) => info,
        Err(error) if error.code() == Some("NOPERM") || error.code() == Some("ERR") => {
            tracing::debug!(%error, "INFO not allowed; skipping the server checks");
            return Ok(());
        }
        Err(error) => return Err(from_redis(error)),
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|line| {
                line.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix(':'))
            })
            .map(str::trim)
    };
    if let Some(version) = field("redis_version") {
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if (major, minor) < (6, 2) {
            return Err(StoreError::Incompatible(format!(
                "redis {version} is too old: durable-mcp needs 6.2 or newer"
            )));
        }
    }
    if let Some(policy) = field("maxmemory_policy")
        && policy != "noeviction"
    {
        tracing::warn!(
            policy,
            "redis maxmemory-policy is not noeviction: under memory pressure Redis may evict events (D3)"
        );
    }
    if field("aof_enabled") == Some("0") {
        tracing::info!(
            "redis has no AOF: acknowledged writes do not survive a Redis restart beyond the last RDB snapshot, if any"
        );
    }
    Ok(())
}

#[async_trait]
impl Store for RedisStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    async fn create_session(&self, record: SessionRecord) -> StoreResult<()> {
        sessions::create(&self.shared, record).await
    }

    async fn load_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> StoreResult<SessionRecord> {
        sessions::load(&self.shared, principal, id).await
    }

    async fn update_session(
        &self,
        principal: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord> {
        sessions::update(&self.shared, principal, id, change).await
    }

    async fn end_session(&self, principal: &Principal, id: &SessionId) -> StoreResult<bool> {
        sessions::end(&self.shared, principal, id).await
    }

    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>> {
        sessions::list(&self.shared, principal, limit).await
    }

    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
        streams::create(&self.shared, id, owner).await
    }

    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId> {
        streams::append(&self.shared, stream, data, close).await
    }

    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner> {
        streams::owner(&self.shared, stream).await
    }

    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead> {
        streams::read_after(&self.shared, stream, after, limit).await
    }

    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        let mut report = PruneReport::default();
        if let Some(ttl) = retention.session_idle_ttl_ms {
            report.sessions_ended =
                sessions::prune_idle(&self.shared, now_ms.saturating_sub(ttl)).await?;
        }
        if let Some(age) = retention.max_stream_age_ms {
            report.streams_deleted =
                streams::prune_finished(&self.shared, now_ms.saturating_sub(age)).await?;
        }
        report.records_expired = records::prune_expired(&self.shared, now_ms).await?;
        if report != PruneReport::default() {
            tracing::info!(
                sessions_ended = report.sessions_ended,
                streams_deleted = report.streams_deleted,
                records_expired = report.records_expired,
                "redis store pruned"
            );
        }
        Ok(report)
    }

    /// # Durability
    /// Reads only: the prune's candidates (its indexes, a page at a time) judged by the
    /// functions its own scripts judge them by. Each page is read in one script (one
    /// snapshot); the whole count is not one snapshot.
    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        let idle_cutoff = retention
            .session_idle_ttl_ms
            .map(|ttl| now_ms.saturating_sub(ttl));
        let mut report = PruneReport::default();
        if let Some(cutoff) = idle_cutoff {
            report.sessions_ended = sessions::count_idle(&self.shared, cutoff).await?;
        }
        if let Some(age) = retention.max_stream_age_ms {
            report.streams_deleted =
                streams::count_finished(&self.shared, now_ms.saturating_sub(age), idle_cutoff)
                    .await?;
        }
        report.records_expired = records::count_expired(&self.shared, now_ms).await?;
        Ok(report)
    }

    async fn put_record(
        &self,
        kind: RecordKind,
        key: &str,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> StoreResult<u64> {
        records::put(
            &self.shared,
            kind,
            key,
            value,
            expires_at_ms,
            expect,
            now_ms(),
        )
        .await
    }

    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>> {
        records::get(&self.shared, kind, key, now_ms()).await
    }

    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        records::list(&self.shared, kind, prefix, limit, now_ms()).await
    }

    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64> {
        records::delete(&self.shared, kind, prefix, now_ms()).await
    }

    /// # Durability
    /// One Lua script that checks every op before its first write (see the `batch`
    /// module): all or nothing, atomic for every reader (D15).
    async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome> {
        if batch.is_empty() {
            return Ok(BatchOutcome::default());
        }
        batch::commit(&self.shared, batch).await
    }

    async fn list_streams(
        &self,
        after: Option<&durable_mcp_store::StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<durable_mcp_store::StreamInfo>> {
        streams::list(&self.shared, after, limit).await
    }

    async fn stream_info(
        &self,
        stream: &durable_mcp_store::StreamId,
    ) -> StoreResult<durable_mcp_store::StreamInfo> {
        streams::info(&self.shared, stream).await
    }

    async fn status(&self) -> StoreResult<durable_mcp_store::StoreStatus> {
        streams::status(&self.shared).await
    }

    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps> {
        Ok(self
            .shared
            .watchers
            .watch(stream, self.shared.options.wake_tick))
    }
}

#[cfg(test)]
mod tests;

//! Settings of the Redis store and the `redis://` URL that carries them.

use std::path::PathBuf;
use std::time::Duration;

use durable_mcp_store::StoreError;

/// The key prefix used when the URL names none.
pub const DEFAULT_PREFIX: &str = "dmcp";

/// Settings of the Redis store.
///
/// Build one with [`RedisOptions::new`] (defaults) or [`RedisOptions::from_url`], then adjust
/// fields. The TTLs are Redis key expiries, a backstop that bounds memory even if nobody
/// calls [`prune`](durable_mcp_store::Store::prune); keep them at least as long as the
/// engine's retention settings, or Redis expires what retention would still keep.
#[derive(Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The connection URL handed to the Redis client: `redis://[user:password@]host[:port][/db]`
    /// (`rediss://` for TLS; `valkey://` and `valkeys://` are the same), optionally with
    /// `?protocol=resp3`. Our own options are not part of it.
    pub url: String,
    /// TLS files (`rediss://` only): without them the platform's roots are trusted and no
    /// client certificate is sent.
    pub tls: RedisTls,
    /// A Redis Cluster (or Valkey cluster): the seed nodes' URLs, of which [`url`](Self::url)
    /// is the first. `None` for one server (with or without replicas). See the crate docs
    /// for what the store keeps where on a cluster.
    pub cluster: Option<Vec<String>>,
    /// Prefix of every key and of the wake-up channel (default `dmcp`). Letters, digits and
    /// `_ - . :` only; in particular no braces, which would change the hash slots.
    pub prefix: String,
    /// A session, its open streams and their events expire after this long without use
    /// (refreshed by `update_session`, including `Touch`; a stream also by each append).
    /// Default 24 hours.
    pub session_idle_ttl: Duration,
    /// A closed sessionless (modern) stream expires this long after its final event.
    /// Default 1 hour. Closed session streams keep `session_idle_ttl` from their final event.
    pub closed_stream_ttl: Duration,
    /// Keep at most this many events per stream; older ones are trimmed in the appending
    /// script and a resume from them is [`StoreError::Pruned`] (D14). Default: unbounded.
    pub max_events_per_stream: Option<u64>,
    /// Live tails re-read at least this often, so a wake-up lost while the pub/sub
    /// connection reconnects only delays a tail. Default 1 second.
    pub wake_tick: Duration,
    /// Bound on connecting (each attempt, and [`RedisStore::open`](crate::RedisStore::open)
    /// as a whole). Default 2 seconds.
    pub connect_timeout: Duration,
    /// Bound on each command's reply; past it the call is [`StoreError::Unavailable`] (D15:
    /// a request on a hung server gets its 503 within about this long). Default 2 seconds.
    pub response_timeout: Duration,
    /// After each write, wait until this many replicas acknowledged it (`WAIT`), or fail the
    /// write with [`StoreError::Unavailable`] after [`wait_timeout`](Self::wait_timeout):
    /// then a failover to a replica loses no acknowledged write (with Redis'
    /// `min-replicas-to-write` on the primary, a primary cut off from its replicas refuses
    /// writes too). Default 0: replication is asynchronous, and a failover may lose the
    /// writes of its last moments (the replication lag, usually milliseconds).
    pub wait_replicas: u32,
    /// How long a write waits for [`wait_replicas`](Self::wait_replicas). Default 1 second.
    pub wait_timeout: Duration,
    /// Connection attempts the connection manager makes, with exponential backoff, each
    /// time it (re)connects. Default 2.
    pub connect_retries: usize,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("url", &redact(&self.url))
            .field("tls", &self.tls)
            .field(
                "cluster",
                &self
                    .cluster
                    .as_ref()
                    .map(|nodes| nodes.iter().map(|n| redact(n)).collect::<Vec<_>>()),
            )
            .field("prefix", &self.prefix)
            .field("session_idle_ttl", &self.session_idle_ttl)
            .field("closed_stream_ttl", &self.closed_stream_ttl)
            .field("max_events_per_stream", &self.max_events_per_stream)
            .field("wake_tick", &self.wake_tick)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("connect_retries", &self.connect_retries)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .finish()
    }
}

pub(crate) use durable_mcp_store::redact_url as redact;

/// The TLS files of a `rediss://` connection, read when the store opens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// PEM file of the CA certificates to trust instead of the platform's (`tls_ca`).
    pub ca: Option<PathBuf>,
    /// PEM client certificate chain (`tls_cert`), for servers that ask for one; with
    /// [`key`](Self::key).
    pub cert: Option<PathBuf>,
    /// PEM private key of the client certificate (`tls_key`).
    pub key: Option<PathBuf>,
}

impl RedisTls {
    /// The driver's form, files read; `None` when nothing is set.
    pub(crate) fn certificates(&self) -> Result<Option<redis::TlsCertificates>, StoreError> {
        let read = |option: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|e| bad(format!("{option} {}: {e}", path.display())))
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("tls_cert", cert)?,
                client_key: read("tls_key", key)?,
            }),
            (None, None) => None,
            _ => {
                return Err(bad(
                    "tls_cert and tls_key go together: give both or neither".into(),
                ));
            }
        };
        let root_cert = self.ca.as_ref().map(|ca| read("tls_ca", ca)).transpose()?;
        Ok(
            (client_tls.is_some() || root_cert.is_some()).then_some(redis::TlsCertificates {
                client_tls,
                root_cert,
            }),
        )
    }
}

fn bad(message: String) -> StoreError {
    StoreError::Incompatible(message)
}

fn seconds(key: &str, value: &str) -> Result<Duration, StoreError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .ok_or_else(|| bad(format!("bad {key} {value:?}: want whole seconds > 0")))
}

impl RedisOptions {
    /// Defaults for the server at `url` (a plain Redis connection URL, without our options).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            tls: RedisTls::default(),
            cluster: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            session_idle_ttl: Duration::from_secs(24 * 3600),
            closed_stream_ttl: Duration::from_secs(3600),
            max_events_per_stream: None,
            wake_tick: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            connect_retries: 2,
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
        }
    }

    /// Parse `redis://[user:password@]host[:port][/db][?option=value&...]`; `rediss://`
    /// connects over TLS, and `valkey://`, `valkeys://` are the same as `redis://`,
    /// `rediss://`. User and password are percent-decoded (`p%40ss` for `p@ss`).
    ///
    /// A Redis Cluster is `redis+cluster://[user:password@]host:port,host:port,...` (any of
    /// its nodes as seeds; `rediss+cluster://`, `valkey+cluster://`, `valkeys+cluster://`
    /// alike), or any of the single-server forms with `?cluster=true`.
    ///
    /// Options: `prefix` (key prefix), `idle_ttl` and `closed_ttl` (seconds),
    /// `max_events` (events kept per stream), `protocol` (`resp2`/`resp3`, passed to
    /// the Redis client), `cluster` (`true`/`false`), `wait_replicas` and `wait_ms` (see
    /// [`wait_replicas`](Self::wait_replicas)), and with TLS `tls_ca`, `tls_cert`,
    /// `tls_key` (PEM files, see [`RedisTls`]). Unknown options are refused, so a typo does
    /// not go unnoticed.
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        let (tls, mut cluster) = match scheme {
            Some("redis" | "valkey") => (false, false),
            Some("rediss" | "valkeys") => (true, false),
            Some("redis+cluster" | "valkey+cluster") => (false, true),
            Some("rediss+cluster" | "valkeys+cluster") => (true, true),
            _ => {
                return Err(bad(format!(
                    "not a redis://, rediss://, valkey:// or valkeys:// URL (or one of them +cluster): {}",
                    redact(url)
                )));
            }
        };
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut passed = Vec::new();
        let mut options = Self::new(base);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("prefix", v)) => options.prefix = v.to_owned(),
                Some(("idle_ttl", v)) => options.session_idle_ttl = seconds("idle_ttl", v)?,
                Some(("closed_ttl", v)) => options.closed_stream_ttl = seconds("closed_ttl", v)?,
                Some(("max_events", v)) => {
                    let max = v.parse::<u64>().ok().filter(|m| *m > 0);
                    options.max_events_per_stream =
                        Some(max.ok_or_else(|| bad(format!("bad max_events {v:?}")))?);
                }
                Some(("protocol", _)) => passed.push(pair),
                Some(("wait_replicas", v)) => {
                    options.wait_replicas = v
                        .parse()
                        .map_err(|_| bad(format!("bad wait_replicas {v:?}: a number")))?
                }
                Some(("wait_ms", v)) => {
                    let ms = v.parse::<u64>().ok().filter(|ms| *ms > 0);
                    options.wait_timeout = Duration::from_millis(
                        ms.ok_or_else(|| bad(format!("bad wait_ms {v:?}: milliseconds > 0")))?,
                    );
                }
                Some(("cluster", v)) => {
                    cluster = match v {
                        "true" | "1" | "yes" => true,
                        "false" | "0" | "no" => cluster,
                        _ => return Err(bad(format!("bad cluster {v:?}: true or false"))),
                    }
                }
                Some((option @ ("tls_ca" | "tls_cert" | "tls_key"), v)) => {
                    if !tls {
                        return Err(bad(format!("{option} needs a rediss:// or valkeys:// URL")));
                    }
                    let path = Some(PathBuf::from(percent_decode(v)?));
                    match option {
                        "tls_ca" => options.tls.ca = path,
                        "tls_cert" => options.tls.cert = path,
                        _ => options.tls.key = path,
                    }
                }
                _ => return Err(bad(format!("unknown redis URL option {pair:?}"))),
            }
        }
        let query = if passed.is_empty() {
            String::new()
        } else {
            format!("?{}", passed.join("&"))
        };
        options.url = format!("{base}{query}");
        if cluster {
            let nodes = cluster_nodes(base, tls)?;
            options.url = format!("{}{query}", nodes[0]);
            options.cluster = Some(
                nodes
                    .into_iter()
                    .map(|node| format!("{node}{query}"))
                    .collect(),
            );
        }
        options.validate()?;
        Ok(options)
    }

    /// Check the settings that the key layout depends on.
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':');
        if self.prefix.is_empty() || !self.prefix.chars().all(ok) {
            return Err(bad(format!(
                "bad key prefix {:?}: letters, digits and _-.: only",
                self.prefix
            )));
        }
        if self.session_idle_ttl.is_zero()
            || self.closed_stream_ttl.is_zero()
            || self.wake_tick.is_zero()
        {
            return Err(bad(
                "TTLs and the wake tick must be greater than zero".into()
            ));
        }
        if self.max_events_per_stream == Some(0) {
            return Err(bad("max_events_per_stream must be at least 1".into()));
        }
        if self.wait_replicas > 0
            && (self.wait_timeout.is_zero() || self.wait_timeout >= self.response_timeout)
        {
            return Err(bad(format!(
                "wait_ms must be positive and shorter than the response timeout ({:?})",
                self.response_timeout
            )));
        }
        Ok(())
    }
}

/// The seed nodes of a cluster URL's base (`scheme://[userinfo@]h1:p1,h2:p2[/0]`), each as a
/// plain single-node URL with the same credentials.
fn cluster_nodes(base: &str, tls: bool) -> Result<Vec<String>, StoreError> {
    let rest = base.split_once("://").map_or(base, |(_, rest)| rest);
    let (userinfo, hosts_and_path) = match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), rest),
    };
    let (hosts, path) = hosts_and_path
        .split_once('/')
        .unwrap_or((hosts_and_path, ""));
    if !matches!(path, "" | "0") {
        return Err(bad(format!(
            "a Redis Cluster has database 0 only, not /{path}"
        )));
    }
    let scheme = if tls { "rediss" } else { "redis" };
    let nodes: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|host| format!("{scheme}://{userinfo}{host}"))
        .collect();
    if nodes.is_empty() {
        return Err(bad("a Redis Cluster URL names no node".into()));
    }
    Ok(nodes)
}

fn percent_decode(value: &str) -> Result<String, StoreError> {
    percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| bad("a redis URL option is not UTF-8 once percent-decoded".into()))
}

/// Milliseconds of a duration, as Redis' `PEXPIRE` wants them (at least 1).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

//! The children of one worker: one per legacy session, a small pool for 2026-07-28
//! (stateless) requests; started on demand, stopped when idle, restarted with backoff,
//! and at most a configured number at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use durable_mcp_handler::Outbox;
use tokio_util::sync::CancellationToken;

use crate::child::{Child, Command};
use crate::metrics::{Start, Stop};
use crate::reports::{PoolReports, Reports};
use crate::{ProxyConfig, ProxyError};

/// Whose child it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// A legacy session's own child.
    Session(String),
    /// A child of the pool serving stateless requests.
    Pool(usize),
}

/// One key's child.
#[derive(Default)]
struct SlotState {
    child: Option<Arc<Child>>,
    /// When the last child of this key was started.
    started: Option<Instant>,
}

/// One key's child (locked while it starts) and its restart history.
#[derive(Default)]
struct Slot {
    state: tokio::sync::Mutex<SlotState>,
    /// Children of this key that died or failed to start in a row: the next start waits
    /// `backoff(failures)`.
    failures: AtomicU32,
}

/// The first restart waits this long, each further one twice as long, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait before a restart.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a child has to answer `resources/subscribe` or `resources/unsubscribe`.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a key without a child keeps its restart history.
const RECENT: Duration = Duration::from_secs(60);

/// The wait before starting a key's child after `failures` failures in a row.
pub(crate) fn backoff(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => FIRST_BACKOFF
            .saturating_mul(1 << (n - 1).min(16))
            .min(MAX_BACKOFF),
    }
}

pub(crate) struct Supervisor {
    command: Command,
    config: ProxyConfig,
    slots: std::sync::Mutex<HashMap<Key, Arc<Slot>>>,
    /// Live children by key (for limits, idle stops and eviction).
    live: std::sync::Mutex<HashMap<Key, Arc<Child>>>,
    next_pool: AtomicUsize,
    /// The pool's reports and the resources listen streams follow.
    pub(crate) pool: Arc<PoolReports>,
}

impl Supervisor {
    pub(crate) fn new(config: ProxyConfig) -> Self {
        let command = Command {
            program: config.program.clone(),
            args: config.args.clone(),
        };
        let pool = Arc::new(PoolReports::new(config.change_window));
        Self {
            command,
            config,
            slots: Default::default(),
            live: Default::default(),
            next_pool: AtomicUsize::new(0),
            pool,
        }
    }

    /// The pool child a stateless request goes to: the least busy, round robin among equals.
    pub(crate) fn pool_key(&self) -> Key {
        let size = self.config.pool_size.max(1);
        let start = self.next_pool.fetch_add(1, Ordering::Relaxed);
        let live = crate::lock(&self.live);
        let busy = |i: usize| live.get(&Key::Pool(i)).map_or(0, |c| c.in_flight());
        let best = (0..size)
            .map(|k| (start + k) % size)
            .min_by_key(|&i| busy(i))
            .unwrap_or(0);
        Key::Pool(best)
    }

    /// The live child of `key`, started (and initialized with `client`'s `initialize`
    /// params, or the proxy's own for the pool) if it has none. A session's child reports
    /// to `outbox` (the session's) and is subscribed, when it starts, to the resources the
    /// session subscribed to; a pool child to the resources listen streams follow.
    pub(crate) async fn child(
        &self,
        key: &Key,
        client: Option<&Value>,
        outbox: Option<&Outbox>,
    ) -> Result<Arc<Child>, ProxyError> {
        let slot = Arc::clone(crate::lock(&self.slots).entry(key.clone()).or_default());
        let mut state = slot.state.lock().await;
        let mut reason = Start::New;
        if let Some(child) = &state.child {
            if !child.is_gone() {
                return Ok(Arc::clone(child));
            }
            if !child.stopped_by_proxy() {
                reason = Start::Restart;
            }
            crate::lock(&self.live).remove(key);
            state.child = None;
            // Deaths under a request were counted (`record`); an idle stop reset the count.
        }
        let failures = slot.failures.load(Ordering::SeqCst);
        let wait = backoff(failures);
        if !wait.is_zero() {
            tracing::info!(
                ?key,
                failures,
                ?wait,
                "restarting the upstream after a backoff"
            );
            tokio::time::sleep(wait).await;
        }
        self.make_room(key)?;
        let params = initialize_params(client);
        state.started = Some(Instant::now());
        match Child::start(&self.command, params, self.config.init_timeout, reason).await {
            Ok(child) => {
                self.prepare(key, &child, outbox).await;
                crate::lock(&self.live).insert(key.clone(), Arc::clone(&child));
                state.child = Some(Arc::clone(&child));
                Ok(child)
            }
            Err(error) => {
                slot.failures.fetch_add(1, Ordering::SeqCst);
                crate::metrics::failed_start();
                Err(error)
            }
        }
    }

    /// Where a fresh child's reports go, and the subscriptions it takes over.
    async fn prepare(&self, key: &Key, child: &Child, outbox: Option<&Outbox>) {
        let uris = match (key, outbox) {
            (Key::Pool(_), _) => {
                child.set_reports(Reports::Pool {
                    child: child.serial,
                    pool: Arc::clone(&self.pool),
                });
                self.pool.followed()
            }
            (Key::Session(_), Some(outbox)) => {
                child.set_reports(Reports::Session(outbox.clone()));
                match outbox.session_subscriptions().await {
                    Ok(uris) => uris,
                    Err(error) => {
                        tracing::warn!(%error, ?key, "could not read the session's subscriptions: the fresh process is not subscribed");
                        Vec::new()
                    }
                }
            }
            (Key::Session(_), None) => Vec::new(),
        };
        for uri in uris {
            subscribe(child, "resources/subscribe", &uri).await;
        }
    }

    /// Subscribe the live pool children to `uris` (`method` `resources/subscribe`), or
    /// unsubscribe them (`resources/unsubscribe`).
    pub(crate) fn pool_subscriptions(&self, method: &'static str, uris: Vec<String>) {
        if uris.is_empty() {
            return;
        }
        let children: Vec<Arc<Child>> = crate::lock(&self.live)
            .iter()
            .filter(|(k, _)| matches!(k, Key::Pool(_)))
            .map(|(_, c)| Arc::clone(c))
            .collect();
        tokio::spawn(async move {
            for child in children {
                for uri in &uris {
                    subscribe(&child, method, uri).await;
                }
            }
        });
    }

    /// Whether a pool child is running.
    pub(crate) fn pool_running(&self) -> bool {
        crate::lock(&self.live)
            .iter()
            .any(|(k, c)| matches!(k, Key::Pool(_)) && !c.is_gone())
    }

    /// A child of `key` died under a request (`died`), or answered one.
    pub(crate) fn record(&self, key: &Key, died: bool) {
        let Some(slot) = crate::lock(&self.slots).get(key).cloned() else {
            return;
        };
        if died {
            slot.failures.fetch_add(1, Ordering::SeqCst);
        } else if slot.failures.load(Ordering::Relaxed) != 0 {
            slot.failures.store(0, Ordering::SeqCst);
        }
    }

    /// Below the per-worker limit, or made so by stopping the child idle the longest; an
    /// error if every child is busy.
    fn make_room(&self, key: &Key) -> Result<(), ProxyError> {
        let mut live = crate::lock(&self.live);
        live.retain(|_, child| !child.is_gone());
        if live.len() < self.config.max_children.max(1) {
            return Ok(());
        }
        let victim = live
            .iter()
            .filter(|(k, c)| *k != key && c.in_flight() == 0)
            .max_by_key(|(_, c)| c.idle_for())
            .map(|(k, _)| k.clone());
        match victim.and_then(|k| live.remove(&k).map(|c| (k, c))) {
            Some((victim, child)) => {
                tracing::info!(?victim, pid = ?child.pid(), "stopping the longest idle upstream: the worker is at --max-children");
                child.stop(Stop::Limit);
                Ok(())
            }
            None => Err(ProxyError::TooManyChildren(self.config.max_children)),
        }
    }

    /// Stop children idle for longer than the configured time. Their keys start afresh
    /// (no backoff) when next needed.
    pub(crate) fn stop_idle(&self) {
        // Pool children hold the listen streams' resource subscriptions while there are any.
        let keep_pool = !self.pool.followed().is_empty();
        let idle: Vec<(Key, Arc<Child>)> = {
            let mut live = crate::lock(&self.live);
            // A child that died by itself is not stopped: its slot keeps it, so the key's
            // next child is counted as a restart.
            live.retain(|_, c| !c.is_gone());
            live.iter()
                .filter(|(k, c)| {
                    c.in_flight() == 0
                        && c.idle_for() >= self.config.idle_stop
                        && !(keep_pool && matches!(k, Key::Pool(_)))
                })
                .map(|(k, c)| (k.clone(), Arc::clone(c)))
                .collect()
        };
        for (key, child) in idle {
            tracing::info!(?key, pid = ?child.pid(), "stopping an idle upstream");
            crate::lock(&self.live).remove(&key);
            child.stop(Stop::Idle);
            self.record(&key, false);
        }
        // Slots of keys with no child left are dropped (a session's entry must not outlive
        // it), except while in use, keeping a recent restart's backoff, or holding a child
        // that died by itself lately (its next child is a restart).
        let live = crate::lock(&self.live);
        crate::lock(&self.slots).retain(|key, slot| {
            live.contains_key(key)
                || slot.state.try_lock().map_or(true, |s| {
                    let backing_off = slot.failures.load(Ordering::Relaxed) > 0
                        && s.started.is_some_and(|t| t.elapsed() < RECENT);
                    backing_off
                        || s.child
                            .as_ref()
                            .is_some_and(|c| c.died_within(RECENT.max(self.config.idle_stop)))
                })
        });
    }

    /// Live children (for tests and logs).
    pub(crate) fn live(&self) -> usize {
        crate::lock(&self.live)
            .values()
            .filter(|c| !c.is_gone())
            .count()
    }

    /// Stop every child (shutdown).
    pub(crate) fn stop_all(&self) {
        for child in crate::lock(&self.live).drain().map(|(_, c)| c) {
            child.stop(Stop::Shutdown);
        }
    }
}

/// Send `method` (`resources/subscribe` or `resources/unsubscribe`) for `uri` to `child`.
async fn subscribe(child: &Child, method: &str, uri: &str) {
    let params = json!({"uri": uri});
    match tokio::time::timeout(
        SUBSCRIBE_TIMEOUT,
        child.call(method, Some(params), None, &CancellationToken::new()),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::debug!(?error, pid = ?child.pid(), %method, %uri, "the upstream did not take a subscription change")
        }
        Err(_) => {
            tracing::warn!(pid = ?child.pid(), %method, %uri, "the upstream did not answer a subscription change in time")
        }
    }
}

/// The questions a child may ask its client, which the proxy relays: the client
/// capabilities a child declares.
const RELAYED: [&str; 3] = ["elicitation", "sampling", "roots"];

/// The `initialize` params a child is started with: the session's own (its protocol
/// version, client info, and of its capabilities those the proxy relays questions for), or
/// the proxy's own for a pool child, which declares every relayed capability (each
/// 2026-07-28 request says what its client can answer; a question the client cannot
/// answer is refused to the child).
pub(crate) fn initialize_params(client: Option<&Value>) -> Value {
    let version = client
        .and_then(|c| c.get("protocolVersion"))
        .cloned()
        .unwrap_or_else(|| json!("2025-11-25"));
    let info = client
        .and_then(|c| c.get("clientInfo"))
        .cloned()
        .unwrap_or_else(
            || json!({"name": "durable-mcp-proxy", "version": env!("CARGO_PKG_VERSION")}),
        );
    let capabilities: serde_json::Map<String, Value> = match client {
        Some(client) => RELAYED
            .iter()
            .filter_map(|&c| {
                client
                    .pointer(&format!("/capabilities/{c}"))
                    .map(|v| (c.to_owned(), v.clone()))
            })
            .collect(),
        None => RELAYED.iter().map(|&c| (c.to_owned(), json!({}))).collect(),
    };
    json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": info})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_exponentially_up_to_a_bound() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(4), Duration::from_millis(800));
        assert_eq!(backoff(10), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn a_child_starts_with_the_sessions_version_client_info_and_relayed_capabilities() {
        let client = json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}, "experimental": {"x": {}}, "elicitation": {"form": {}}},
            "clientInfo": {"name": "c", "version": "2"}});
        assert_eq!(
            initialize_params(Some(&client)),
            json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}, "elicitation": {"form": {}}}, "clientInfo": {"name": "c", "version": "2"}})
        );
        let pool = initialize_params(None);
        assert_eq!(pool["clientInfo"]["name"], "durable-mcp-proxy");
        assert_eq!(
            pool["capabilities"],
            json!({"elicitation": {}, "sampling": {}, "roots": {}})
        );
    }
}

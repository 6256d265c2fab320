//! What children report outside requests: list changes (`notifications/tools/list_changed`,
//! prompts, resources) and resource updates (`notifications/resources/updated`), and where
//! each goes.
//!
//! - **A session's child** speaks for that session alone: what it reports goes to the
//!   session's standalone stream (the legacy GET stream) through the session's
//!   [`Outbox`], committed before any GET stream sends it; a resource update only if the
//!   session subscribed to the URI. Other sessions, and 2026-07-28 listen streams, are not
//!   told: their own processes speak for them.
//! - **The pool's children** are one upstream seen through several processes: a change
//!   any of them reports is announced once to the `subscriptions/listen` streams of every
//!   worker (each stream gets it if its filter covers the kind, or the URI). Several
//!   children reporting the same change (the same kind, or the same resource URI) within
//!   [`ProxyConfig::change_window`](crate::ProxyConfig::change_window) of the first report
//!   are one change: the first report is announced, the others are dropped. A second
//!   report by a child that already reported in the window is a new change.
//!
//! Resources a listen stream follows are subscribed (`resources/subscribe`) on every live
//! pool child, and on each pool child that starts while they are followed; a session's
//! child that starts (after an idle stop, a crash, on another worker) is subscribed to
//! what the session subscribed to.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use durable_mcp_handler::outbox::change_of;
use durable_mcp_handler::{Outbox, ServerChange};
use serde_json::Value;

/// Where one child's reports go.
#[derive(Clone)]
pub(crate) enum Reports {
    /// A session's child: to the session's standalone stream.
    Session(Outbox),
    /// The pool's child number `child` (unique per process started): announced once.
    Pool {
        child: u64,
        pool: std::sync::Arc<PoolReports>,
    },
}

impl Reports {
    /// Deliver one report of a child.
    pub(crate) async fn deliver(&self, message: Value) {
        match self {
            Reports::Session(outbox) => match outbox.to_session(message).await {
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "a session child's report was not delivered"),
            },
            Reports::Pool { child, pool } => {
                let Some(change) = change_of(&message) else {
                    return;
                };
                if !pool.first_report(*child, &change, Instant::now()) {
                    tracing::debug!(
                        ?change,
                        child,
                        "the same change was reported by another pool child: announced once"
                    );
                    return;
                }
                let Some(outbox) = pool.outbox.get() else {
                    tracing::debug!(
                        ?change,
                        "no request has reached this worker yet: a pool child's report is dropped"
                    );
                    return;
                };
                if let Err(error) = outbox.announce(change).await {
                    tracing::warn!(%error, "could not announce a change the upstream reported");
                }
            }
        }
    }
}

/// The pool's reports: where they are announced, the recent ones (to announce a change
/// once), and the resources the listen streams of this worker follow.
#[derive(Default)]
pub(crate) struct PoolReports {
    /// Any request's outbox (announcing needs no caller): set by the first request.
    pub(crate) outbox: OnceLock<Outbox>,
    window: Duration,
    /// Per change: when it was first reported, and the children that reported it since.
    recent: Mutex<HashMap<ServerChange, (Instant, HashSet<u64>)>>,
    /// Followed resource URIs, with how many listen streams follow each.
    followed: Mutex<BTreeMap<String, usize>>,
}

impl PoolReports {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            ..Self::default()
        }
    }

    /// Whether `child`'s report of `change` at `now` is a new change (to announce), not one
    /// another child reported less than the window ago.
    pub(crate) fn first_report(&self, child: u64, change: &ServerChange, now: Instant) -> bool {
        let mut recent = crate::lock(&self.recent);
        recent.retain(|_, (since, _)| now.saturating_duration_since(*since) < self.window);
        match recent.get_mut(change) {
            Some((_, children)) if !children.contains(&child) => {
                children.insert(child);
                false
            }
            _ => {
                recent.insert(change.clone(), (now, HashSet::from([child])));
                true
            }
        }
    }

    /// Count a listen stream following `uris`; the URIs no stream followed before.
    pub(crate) fn follow(&self, uris: &[String]) -> Vec<String> {
        let mut followed = crate::lock(&self.followed);
        let mut new = Vec::new();
        for uri in uris {
            let count = followed.entry(uri.clone()).or_default();
            if *count == 0 {
                new.push(uri.clone());
            }
            *count += 1;
        }
        new
    }

    /// A listen stream following `uris` ended; the URIs no stream follows any more.
    pub(crate) fn unfollow(&self, uris: &[String]) -> Vec<String> {
        let mut followed = crate::lock(&self.followed);
        let mut gone = Vec::new();
        for uri in uris {
            if let Some(count) = followed.get_mut(uri) {
                *count -= 1;
                if *count == 0 {
                    followed.remove(uri);
                    gone.push(uri.clone());
                }
            }
        }
        gone
    }

    /// The URIs followed now.
    pub(crate) fn followed(&self) -> Vec<String> {
        crate::lock(&self.followed).keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change reported by several pool children within the window is announced once; a
    /// child reporting again, or any report after the window, is a new change.
    #[test]
    fn a_change_reported_by_several_pool_children_is_announced_once() {
        let pool = PoolReports::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let tools = ServerChange::ToolsListChanged;
        let resource = ServerChange::ResourceUpdated("r://a".into());
        assert!(pool.first_report(1, &tools, t0));
        assert!(
            !pool.first_report(2, &tools, t0 + Duration::from_millis(100)),
            "another child, same change"
        );
        assert!(!pool.first_report(3, &tools, t0 + Duration::from_millis(200)));
        assert!(
            pool.first_report(1, &resource, t0 + Duration::from_millis(200)),
            "another kind is another change"
        );
        assert!(
            pool.first_report(1, &tools, t0 + Duration::from_millis(300)),
            "the same child again: a new change"
        );
        assert!(!pool.first_report(2, &tools, t0 + Duration::from_millis(400)));
        assert!(
            pool.first_report(2, &tools, t0 + Duration::from_millis(1_400)),
            "after the window"
        );
    }

    #[test]
    fn followed_resources_are_counted_per_listen_stream() {
        let pool = PoolReports::new(Duration::from_secs(1));
        assert_eq!(pool.follow(&["a".into(), "b".into()]), ["a", "b"]);
        assert_eq!(pool.follow(&["b".into()]), Vec::<String>::new());
        assert_eq!(pool.unfollow(&["a".into(), "b".into()]), ["a"]);
        assert_eq!(pool.followed(), ["b"]);
        assert_eq!(pool.unfollow(&["b".into()]), ["b"]);
        assert!(pool.followed().is_empty());
    }
}

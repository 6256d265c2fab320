//! Server-wide changes for `subscriptions/listen` streams (2026-07-28), on every worker.
//!
//! A handler announces a change with `Durable::announce`. An announcement is the latest
//! value of a [`RecordKind::Change`] record per key (`tools`, `prompts`, `resources`,
//! `resource/<uri>`; the record key is the announcement key bounded by [`key_part`](durable_mcp_store::key_part), a
//! URI being of any length), written with a fresh token. It reaches this worker's listen streams
//! at once (a local broadcast), and every worker with listen streams open re-reads the
//! keys they follow every [`POLL`] and broadcasts the keys whose token changed. Reading a
//! token and recording it happen under one lock (`sequence`), so an old read never
//! overwrites a newer token (which would announce one change twice), and a stream is
//! acknowledged only once what it follows is known (so no change after its
//! acknowledgement is taken for old news).
//! Announcements of one key coalesce: two between two reads give one notification, which
//! is all a list-changed notification says ("read the list again").

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use durable_mcp_handler::ServerChange;
use durable_mcp_protocol::methods;
use durable_mcp_store::{Expect, RecordKind, Store, StoreError, now_ms};
use serde_json::{Value, json};

use crate::EngineError;
use crate::records::key;
use crate::sync::lock;

/// How often a worker with listen streams open reads the announcements they follow.
const POLL: Duration = Duration::from_millis(250);
/// How long a resource's last announcement is kept (lists keep theirs: three records).
const RESOURCE_ANNOUNCEMENT_TTL_MS: u64 = 24 * 3_600_000;
/// The list keys every listen stream may follow.
const LISTS: [&str; 3] = key::LIST_ANNOUNCEMENTS;

/// The announcement key of a change.
pub(crate) fn change_key(change: &ServerChange) -> String {
    match change {
        ServerChange::ToolsListChanged => key::TOOLS_ANNOUNCEMENT.to_owned(),
        ServerChange::PromptsListChanged => key::PROMPTS_ANNOUNCEMENT.to_owned(),
        ServerChange::ResourcesListChanged => key::RESOURCES_ANNOUNCEMENT.to_owned(),
        ServerChange::ResourceUpdated(uri) => key::resource_announcement(uri),
        // A change this engine does not know yet: its own key, which nobody follows.
        other => format!("other/{other:?}"),
    }
}

/// The notification a listen stream sends for an announcement key (`None`: not one a
/// stream can follow).
pub(crate) fn notification(announcement: &str, subscription_meta: &Value) -> Option<Value> {
    let params = match announcement {
        key::TOOLS_ANNOUNCEMENT | key::PROMPTS_ANNOUNCEMENT | key::RESOURCES_ANNOUNCEMENT => {
            json!({"_meta": subscription_meta})
        }
        _ => json!({"uri": key::announced_resource(announcement)?, "_meta": subscription_meta}),
    };
    let method = match announcement {
        key::TOOLS_ANNOUNCEMENT => methods::NOTIFICATION_TOOLS_LIST_CHANGED,
        key::PROMPTS_ANNOUNCEMENT => methods::NOTIFICATION_PROMPTS_LIST_CHANGED,
        key::RESOURCES_ANNOUNCEMENT => methods::NOTIFICATION_RESOURCES_LIST_CHANGED,
        _ => methods::NOTIFICATION_RESOURCES_UPDATED,
    };
    Some(json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// This worker's view of the announcements: commits them, and follows them for its listen
/// streams. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Changes {
    store: Arc<dyn Store>,
    /// `<worker id>@<start>`: with `counter`, makes this worker's tokens unique.
    worker: String,
    state: Arc<State>,
}

/// What the listen streams of this worker follow, and what it last saw of it.
struct State {
    /// Local fan-out of changed keys.
    tx: tokio::sync::broadcast::Sender<String>,
    /// Held while reading tokens and recording them: the poller's pass, a new
    /// follower's first reads, an announcement's own token.
    sequence: tokio::sync::Mutex<()>,
    /// The last token seen per followed key ("" for none, [`UNKNOWN`] when a read failed).
    seen: Mutex<HashMap<String, String>>,
    /// Resource URIs followed by listen streams here, with how many follow each.
    uris: Mutex<HashMap<String, usize>>,
    /// Listen streams following announcements here; the poller reads only while some do.
    listeners: AtomicUsize,
    poller_started: AtomicBool,
    /// Makes this worker's tokens unique.
    counter: AtomicU64,
}

/// A token no announcement has: the next real read of the key counts as a change (at
/// worst one notification too many, never one too few).
const UNKNOWN: &str = "?";

/// A listen stream's following of announcements: its keys' changes arrive on `changes`;
/// dropping it stops the following.
pub(crate) struct Following {
    pub changes: tokio::sync::broadcast::Receiver<String>,
    state: Weak<State>,
    uris: Vec<String>,
}

impl Drop for Following {
    fn drop(&mut self) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        state.listeners.fetch_sub(1, Ordering::SeqCst);
        let mut uris = lock(&state.uris);
        for uri in &self.uris {
            if let Some(count) = uris.get_mut(uri) {
                *count -= 1;
                if *count == 0 {
                    uris.remove(uri);
                    // Nobody here follows it any more: forget it (a new follower learns it
                    // again), so that `seen` holds followed keys only.
                    lock(&state.seen).remove(&key::resource_announcement(uri));
                }
            }
        }
    }
}

impl State {
    /// Record `token` as the latest of a followed `key`; broadcast `key` if that is news.
    /// Call with `sequence` held. Keys nobody here follows are ignored.
    fn saw(&self, key: &str, token: &str) {
        let mut seen = lock(&self.seen);
        let Some(known) = seen.get_mut(key) else {
            return;
        };
        if known == token {
            return;
        }
        *known = token.to_owned();
        drop(seen);
        if !token.is_empty() {
            // No receiver is not an error.
            let _ = self.tx.send(key.to_owned());
        }
    }
}

/// The current token of `key` in `store` ("" for none).
async fn read_token(store: &dyn Store, key: &str) -> Result<String, StoreError> {
    Ok(
        match store
            .get_record(RecordKind::Change, &key::change(key))
            .await?
        {
            Some(record) => serde_json::from_str::<String>(&record.value).unwrap_or(record.value),
            None => String::new(),
        },
    )
}

impl Changes {
    /// The announcements in `store`, as worker `worker_id`, started at `started_at_ms`,
    /// sees them.
    pub(crate) fn new(store: Arc<dyn Store>, worker_id: &str, started_at_ms: u64) -> Self {
        Self {
            store,
            worker: format!("{worker_id}@{started_at_ms}"),
            state: Arc::new(State {
                tx: tokio::sync::broadcast::channel(256).0,
                sequence: tokio::sync::Mutex::new(()),
                seen: Mutex::default(),
                uris: Mutex::default(),
                listeners: AtomicUsize::new(0),
                poller_started: AtomicBool::new(false),
                counter: AtomicU64::new(0),
            }),
        }
    }

    /// How many keys this worker holds a token for, and how many resource URIs it follows.
    #[cfg(test)]
    pub(crate) fn followed(&self) -> (usize, usize) {
        (lock(&self.state.seen).len(), lock(&self.state.uris).len())
    }

    /// Commit an announcement and tell this worker's listen streams at once.
    pub(crate) async fn announce(&self, change: &ServerChange) -> Result<(), EngineError> {
        let key = change_key(change);
        let n = self.state.counter.fetch_add(1, Ordering::SeqCst);
        let token = format!("{}#{n}", self.worker);
        let expiry = matches!(change, ServerChange::ResourceUpdated(_))
            .then(|| now_ms() + RESOURCE_ANNOUNCEMENT_TTL_MS);
        let store = &self.store;
        let record_key = key::change(&key);
        let expect = match store.get_record(RecordKind::Change, &record_key).await? {
            Some(record) => Expect::Version(record.version),
            None => Expect::Absent,
        };
        match store
            .put_record(
                RecordKind::Change,
                &record_key,
                json!(token).to_string(),
                expiry,
                expect,
            )
            .await
        {
            Ok(_) => {
                let _sequence = self.state.sequence.lock().await;
                self.state.saw(&key, &token);
                Ok(())
            }
            // Another announcement of the same key was committed meanwhile: it stands for
            // both, and the listen streams hear of it.
            Err(StoreError::Conflict { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Start following announcements for a listen stream that follows the lists and
    /// `uris`: what is announced after this returns arrives on the returned receiver
    /// (call it before the stream's acknowledgement is committed).
    pub(crate) async fn follow(&self, uris: &[String]) -> Following {
        let state = &self.state;
        let _sequence = state.sequence.lock().await;
        let following = Following {
            changes: state.tx.subscribe(),
            state: Arc::downgrade(state),
            uris: uris.to_vec(),
        };
        let alone = state.listeners.fetch_add(1, Ordering::SeqCst) == 0;
        let mut keys: Vec<String> = if alone {
            LISTS.iter().map(|k| (*k).to_owned()).collect()
        } else {
            Vec::new()
        };
        {
            let mut followed = lock(&state.uris);
            for uri in uris {
                let count = followed.entry(uri.clone()).or_default();
                if *count == 0 {
                    keys.push(key::resource_announcement(uri));
                }
                *count += 1;
            }
        }
        // What is current now is not news. Keys nobody else here follows may be stale
        // (nobody read them while nobody listened): learn them silently. Keys others
        // follow are kept: a change not yet broadcast to those must still reach them.
        for key in keys {
            let token = match read_token(self.store.as_ref(), &key).await {
                Ok(token) => token,
                Err(error) => {
                    tracing::warn!(%error, %key, "could not read an announcement; the next read tells it as a change");
                    UNKNOWN.to_owned()
                }
            };
            lock(&state.seen).insert(key, token);
        }
        if !state.poller_started.swap(true, Ordering::SeqCst) {
            tokio::spawn(poll(self.store.clone(), Arc::downgrade(state)));
        }
        following
    }
}

/// Every [`POLL`], while listen streams are open on this worker, read the announcements
/// they follow and broadcast those that changed. Ends with the engine (its `Changes`).
async fn poll(store: Arc<dyn Store>, state: Weak<State>) {
    let mut failing = false;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        if state.listeners.load(Ordering::SeqCst) == 0 {
            continue;
        }
        let _sequence = state.sequence.lock().await;
        let keys: Vec<String> = lock(&state.seen).keys().cloned().collect();
        let mut failed = None;
        for key in keys {
            match read_token(store.as_ref(), &key).await {
                Ok(token) => state.saw(&key, &token),
                Err(error) => failed = Some(error),
            }
        }
        match (failed, failing) {
            (Some(error), false) => {
                tracing::warn!(%error, "could not read announcements; retrying every {POLL:?}");
                failing = true;
            }
            (None, true) => {
                tracing::info!("reading announcements again");
                failing = false;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use durable_mcp_handler::ServerChange;
    use durable_mcp_store::Store;
    use durable_mcp_store_memory::MemoryStore;

    use super::{Changes, POLL};
    use crate::records::key;

    /// An announcement reaches this worker's listen streams at once and another worker's
    /// within its poll; what was announced before a stream followed is not news to it.
    #[tokio::test]
    async fn an_announcement_reaches_every_workers_followers_and_old_news_does_not() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let (a, b) = (
            Changes::new(store.clone(), "a", 1),
            Changes::new(store, "b", 1),
        );
        a.announce(&ServerChange::ToolsListChanged).await.unwrap();
        let (mut here, mut there) = (a.follow(&[]).await, b.follow(&[]).await);
        assert!(
            here.changes.try_recv().is_err(),
            "announced before: not news"
        );
        a.announce(&ServerChange::PromptsListChanged).await.unwrap();
        assert_eq!(
            here.changes.recv().await.unwrap(),
            key::PROMPTS_ANNOUNCEMENT
        );
        let heard = tokio::time::timeout(POLL * 4, there.changes.recv()).await;
        assert_eq!(
            heard.expect("within the poll").unwrap(),
            key::PROMPTS_ANNOUNCEMENT
        );
        assert!(
            there.changes.try_recv().is_err(),
            "the older announcement stays old"
        );
    }

    /// A resource's announcements reach only the streams that follow its URI, and a URI
    /// nobody follows any more is forgotten.
    #[tokio::test]
    async fn resource_updates_reach_their_followers_only() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let changes = Changes::new(store, "a", 1);
        let mut follows = changes.follow(&["file:///a".to_owned()]).await;
        let mut other = changes.follow(&[]).await;
        let updated = ServerChange::ResourceUpdated("file:///a".into());
        changes.announce(&updated).await.unwrap();
        let key = follows.changes.recv().await.unwrap();
        assert_eq!(key, key::resource_announcement("file:///a"));
        // The broadcast carries every followed key; a stream filters by what it follows.
        assert_eq!(other.changes.recv().await.unwrap(), key);
        drop((follows, other));
        assert_eq!(
            changes.followed(),
            (3, 0),
            "the lists stay known, the URI is forgotten"
        );
    }
}

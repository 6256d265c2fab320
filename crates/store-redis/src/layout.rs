//! The version of the key layout a prefix holds, in `P:layout`, and what it decides: where
//! new streams keep their events.
//!
//! - **Layout 1** (every release before this key existed): a stream's events are a Redis
//!   stream of their own (`P:{tag}:events:<id>`). Redis gives each new one a listpack of
//!   4 KiB up front, so every retained request costs about 5 KB of Redis memory, and an
//!   append is an `XADD` plus a `PEXPIRE` of that key besides the meta hash's writes.
//! - **Layout 2**: a new stream keeps its events in its meta hash, event `n` as field `n`
//!   (the meta fields are not numbers). An append is part of the one `HSET` that saves the
//!   stream; a retained request costs about 1.2 KB.
//!
//! This release reads and appends to both kinds of stream; the layout only decides where a
//! *new* stream's events go. A prefix with no data is set to layout 2 by the first worker
//! that opens it. A prefix that already holds data written by an earlier release is set to
//! layout 1 and stays there, because workers of an earlier release cannot read a layout-2
//! stream: once every worker of the prefix runs this release, the operator moves it on
//! with `SET <prefix>:layout 2`, and running workers pick that up within
//! [`RECHECK_EVERY_MS`] (a move back to 1 too). A prefix without the key but with a
//! subscriber on its wake-up channel also gets 1: a worker of this release sets the key
//! before it subscribes, so the subscriber is an earlier release. A worker refuses to open
//! a prefix whose layout is newer than it knows ([`StoreError::Incompatible`]).
//!
//! Workers of this release also subscribe to a second channel ([`marker_channel`]), which
//! earlier releases do not know: the subscribers of the wake-up channel that are not on it
//! are earlier releases. A prefix whose key is gone while such a worker runs (a Redis
//! without persistence restarted, a `FLUSHALL`) holds only data of this release, so its
//! layout is decided as for an empty prefix; a running worker that finds the key gone puts
//! back the layout it has been writing. On a cluster the prefix's keys are a namespace no
//! earlier release wrote (`{P}:...`), so a prefix without the key gets the current layout.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use durable_mcp_store::{RecordKind, StoreError, now_ms};

use crate::error::from_redis;
use crate::{Shared, scripts};

/// The newest layout this release writes.
pub(crate) const CURRENT: u64 = 2;

/// How often a worker reads the prefix's layout again, to follow an operator's move.
pub(crate) const RECHECK_EVERY_MS: u64 = 30_000;

/// What this worker knows of its prefix's layout.
#[derive(Debug)]
pub(crate) struct Layout {
    inline: AtomicBool,
    next_check_ms: AtomicU64,
}

impl Layout {
    fn new(version: u64) -> Self {
        Self {
            inline: AtomicBool::new(version >= 2),
            next_check_ms: AtomicU64::new(now_ms().saturating_add(RECHECK_EVERY_MS)),
        }
    }

    /// The flag the scripts take for the streams they create: `"1"` when their events go in
    /// their meta hash (layout 2), `"0"` otherwise. The prefix's key is read again every
    /// [`RECHECK_EVERY_MS`], so an operator's move (on, or back to 1 before a downgrade)
    /// reaches running workers; a failed read keeps what was known until the next one.
    pub(crate) async fn inline_arg(shared: &Shared, now: u64) -> &'static str {
        let layout = &shared.layout;
        let due = layout.next_check_ms.load(Ordering::Relaxed);
        if now >= due
            && layout
                .next_check_ms
                .compare_exchange(
                    due,
                    now.saturating_add(RECHECK_EVERY_MS),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            let found: Result<Option<String>, _> = redis::cmd("GET")
                .arg(shared.keys.layout())
                .query_async(&mut shared.conn())
                .await;
            match found.map(|v| v.as_deref().and_then(|v| v.parse::<u64>().ok())) {
                Ok(Some(version)) if (1..=CURRENT).contains(&version) => {
                    let inline = version >= 2;
                    if layout.inline.swap(inline, Ordering::Relaxed) != inline {
                        tracing::info!(prefix = %shared.keys.prefix(), version, "redis key layout changed: new streams follow it");
                    }
                }
                Ok(None) => {
                    // The key is gone (Redis lost its data, or someone deleted it): this
                    // worker's layout is the prefix's, since it wrote what is there since.
                    let known = if layout.inline.load(Ordering::Relaxed) {
                        CURRENT
                    } else {
                        1
                    };
                    let set: Result<Option<String>, _> = redis::cmd("SET")
                        .arg(shared.keys.layout())
                        .arg(known)
                        .arg("NX")
                        .query_async(&mut shared.conn())
                        .await;
                    match set {
                        Ok(_) => {
                            tracing::info!(prefix = %shared.keys.prefix(), version = known, "the redis key layout was gone (the server lost its data?): put back")
                        }
                        Err(error) => {
                            tracing::debug!(%error, "putting the redis key layout back failed; trying again at the next check")
                        }
                    }
                }
                Ok(other) => {
                    tracing::warn!(prefix = %shared.keys.prefix(), ?other, "the redis key layout is unknown; new streams keep the layout this worker had")
                }
                Err(error) => {
                    tracing::debug!(%error, "reading the redis key layout failed; keeping the layout this worker had until the next check")
                }
            }
        }
        if layout.inline.load(Ordering::Relaxed) {
            "1"
        } else {
            "0"
        }
    }

    /// Whether new streams keep their events inline (layout 2), as this worker knows now.
    #[cfg(test)]
    pub(crate) fn inline_now(&self) -> bool {
        self.inline.load(Ordering::Relaxed)
    }

    /// Make the next [`Self::inline_arg`] read the prefix's key again (tests, instead of
    /// waiting [`RECHECK_EVERY_MS`]).
    #[cfg(test)]
    pub(crate) fn check_at_next_use(&self) {
        self.next_check_ms.store(0, Ordering::Relaxed);
    }
}

/// The channel workers of this release (and later ones) subscribe to besides the wake-up
/// channel, so that the wake-up channel's other subscribers are known to be earlier releases.
pub(crate) fn marker_channel(channel: &str) -> String {
    format!("{channel}:layout-2")
}

/// Read the prefix's layout, setting it first if the prefix has none (2 if it holds no
/// data of an earlier release and none listens on its channel, 1 if an earlier release
/// wrote it or runs). Must run before this worker subscribes to the channels.
pub(crate) async fn open(
    conn: &crate::Conn,
    keys: &crate::keys::Keys,
    cluster: bool,
) -> Result<Layout, StoreError> {
    let (earlier, this_release) = if cluster {
        (0, 0)
    } else {
        listeners(conn, keys).await?
    };
    let mut call = scripts::LAYOUT.prepare_invoke();
    call.key(keys.layout());
    if this_release == 0 {
        // Data without the key can only be an earlier release's: count it.
        call.key(keys.sessions()).key(keys.finished());
        for kind in RecordKind::ALL {
            call.key(keys.records_index(kind));
        }
    }
    call.arg(CURRENT).arg(earlier);
    let found: String = call
        .invoke_async(&mut conn.clone())
        .await
        .map_err(from_redis)?;
    let version: u64 = found.parse().map_err(|_| {
        StoreError::Corrupt(format!(
            "{} holds {found:?}, not a layout version",
            keys.layout()
        ))
    })?;
    if version > CURRENT || version == 0 {
        return Err(StoreError::Incompatible(format!(
            "{} is {version}: this release knows key layouts 1 to {CURRENT}; run a release that knows it, or use another prefix",
            keys.layout()
        )));
    }
    if version < CURRENT {
        tracing::warn!(
            prefix = %keys.prefix(),
            version,
            "this redis prefix holds data of an earlier release: new streams keep the old layout (5 KB of Redis memory per retained request); once every worker runs this release, run `SET {} {CURRENT}`",
            keys.layout()
        );
    }
    Ok(Layout::new(version))
}

/// The subscribers of the prefix's wake-up channel: of earlier releases, and of this one
/// (see [`marker_channel`]).
async fn listeners(conn: &crate::Conn, keys: &crate::keys::Keys) -> Result<(u64, u64), StoreError> {
    let channel = keys.channel();
    let numsub: Result<Vec<(String, u64)>, redis::RedisError> = conn
        .on_store_node(
            redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .arg(marker_channel(&channel)),
            &keys.layout(),
        )
        .await;
    match numsub {
        Ok(counts) => {
            let count = |name: &str| {
                counts
                    .iter()
                    .find(|(c, _)| c == name)
                    .map_or(0, |(_, n)| *n)
            };
            let (all, this_release) = (count(&channel), count(&marker_channel(&channel)));
            Ok((all.saturating_sub(this_release), this_release))
        }
        // Forbidden (a managed service's ACL): only the data can tell.
        Err(error) if matches!(error.code(), Some("NOPERM" | "ERR")) => {
            tracing::debug!(%error, "PUBSUB NUMSUB not allowed; the layout is chosen from the data alone");
            Ok((0, 0))
        }
        Err(error) => Err(from_redis(error)),
    }
}

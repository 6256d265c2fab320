//! What the store asks of the disk, counted: the writer's group commits and the `fsync`s
//! of the WAL that make them durable. SQLite keeps no such counts of its own; these are
//! exported as Prometheus counters where a `metrics` recorder is installed (`durable-mcp
//! serve --metrics-listen`), and the benchmark divides them by the calls it made.
//!
//! A group commit is one SQLite transaction, however many writes it holds. Its `fsync`
//! is made by the store itself while it overlaps commits and `fsync`s (`pipeline.rs`: one
//! `fdatasync` may cover several groups), or by SQLite inside `COMMIT` when the writer's
//! connection is `synchronous=FULL` (in WAL mode, one sync of the WAL per commit). With
//! `synchronous=NORMAL` or `OFF` a commit is not synced. SQLite's checkpoints sync the WAL
//! and the database as well; those `fsync`s are not counted here.

use std::sync::atomic::{AtomicU64, Ordering};

/// Write transactions (group commits) the writer committed.
pub const COMMITS: &str = "durable_mcp.store.sqlite.commits";

/// `fsync`s of the WAL made to make commits durable, labelled `by`: `store` (an
/// `fdatasync` the store made: overlapped commits, and the WAL synced on opening and
/// closing) or `sqlite` (a commit with `synchronous=FULL`, synced by SQLite).
pub const SYNCS: &str = "durable_mcp.store.sqlite.syncs";

/// The counts of one store, also kept here (for its tests) besides the recorder's.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    commits: AtomicU64,
    syncs: AtomicU64,
}

impl Counters {
    /// A group was committed; `synced` if SQLite synced it (`synchronous=FULL`).
    pub(crate) fn committed(&self, synced: bool) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(COMMITS).increment(1);
        if synced {
            self.syncs.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(SYNCS, "by" => "sqlite").increment(1);
        }
    }

    /// The store `fdatasync`ed (or `fsync`ed) a file itself.
    pub(crate) fn synced(&self) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(SYNCS, "by" => "store").increment(1);
    }

    /// Commits and syncs so far.
    #[cfg(test)]
    pub(crate) fn read(&self) -> (u64, u64) {
        (
            self.commits.load(Ordering::Relaxed),
            self.syncs.load(Ordering::Relaxed),
        )
    }
}

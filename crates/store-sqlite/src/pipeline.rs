//! Commit and fsync overlapped, for `synchronous=FULL`.
//!
//! With FULL, SQLite's commit returns only after an `fsync` of the WAL, and the writer thread
//! waits through it: on a disk whose `fsync` takes a third of a millisecond, the next group
//! cannot start for that long, and a server at 8 connections leaves its CPU idle a fifth of
//! the time. Here the writer commits with `synchronous=NORMAL` (the frames are written, not
//! yet synced) and hands the group to a syncing thread, which `fdatasync`s the WAL file and
//! only then answers the group's jobs and wakes its tails, while the writer runs the next
//! group. Durability is FULL's: nothing is acknowledged, sent or read before its `fsync`.
//!
//! - **Writes** are answered by the syncing thread, after the `fsync` that covers them (D1).
//! - **Reads in this process** wait, after themselves, until every commit they could have
//!   seen is synced ([`Synced::settle`]): the writer raises a counter before each `COMMIT`.
//!   The writer's own reads between groups are answered by the syncing thread, in order.
//! - **Other processes on the file** would see a commit before its `fsync`, so a writer
//!   overlaps only while it is the file's one user. Every store holds a shared
//!   open-file-description lock on `<db>-durable-mcp.lock` and converts it to exclusive to
//!   overlap (such a conversion is atomic, and a refused one keeps the shared lock, unlike
//!   `flock`'s). It gives the lock back at least every [`HOLD`], busy or idle, after every
//!   commit is synced, so a store opening the file meanwhile (which waits for its shared
//!   lock) gets in; from then on neither overlaps until one of them closes. Programs other
//!   than durable-mcp (the `sqlite3` shell) take no such lock: they may see a commit up to
//!   one `fsync` before it is on disk.
//! - **A failed `fsync`** stops the store: every request fails until the process restarts.
//!   Retrying would be wrong, since the kernel may have dropped the pages it could not write.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use durable_mcp_store::wake::Watchers;
use durable_mcp_store::{StoreError, StreamId};
use rusqlite::Connection;
use tokio::sync::{oneshot, watch};

/// The longest a store keeps the file to itself before giving other stores a chance to
/// open it (a store opening the file waits up to this long).
pub(crate) const HOLD: Duration = Duration::from_millis(250);
/// After giving the lock back, how long before trying to take it again: a store waiting for
/// its shared lock is woken at once, and takes it well within this.
const REJOIN: Duration = Duration::from_millis(20);
/// While another store shares the file, how often to check whether it has gone.
const RETRY: Duration = Duration::from_millis(500);

const BROKEN: &str = "an fsync of the sqlite WAL failed: the store refuses every request until the process restarts";

/// How far commits are visible and synced: shared by the writer, the syncing thread and
/// the readers.
#[derive(Debug)]
pub(crate) struct Synced {
    /// Groups whose `COMMIT` has begun (raised before it, so a reader that sees a group's
    /// data sees its number).
    committed: AtomicU64,
    /// Groups on disk.
    synced: watch::Sender<u64>,
    /// An `fsync` failed.
    broken: AtomicBool,
    /// Whether the last group overlapped its `fsync` (for diagnostics and tests).
    overlapping: AtomicBool,
}

impl Default for Synced {
    fn default() -> Self {
        Self { committed: AtomicU64::new(0), synced: watch::Sender::new(0), broken: AtomicBool::new(false), overlapping: AtomicBool::new(false) }
    }
}

impl Synced {
    /// After a read: wait until every commit it may have seen is on disk.
    pub(crate) async fn settle(&self) -> Result<(), StoreError> {
        let need = self.committed.load(Ordering::SeqCst);
        if *self.synced.borrow() < need {
            let mut synced = self.synced.subscribe();
            // The sender lives in `self`: the wait ends with the count, not with an error.
            let _ = synced.wait_for(|synced| *synced >= need).await;
        }
        self.check()
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.broken.load(Ordering::SeqCst) { Err(StoreError::Unavailable(BROKEN.into())) } else { Ok(()) }
    }

    /// Whether the last group committed overlapped its `fsync`.
    pub(crate) fn overlapping(&self) -> bool {
        self.overlapping.load(Ordering::SeqCst)
    }
}

/// A job's answer: where it goes and what it is.
pub(crate) type Answer<R> = (oneshot::Sender<Result<R, StoreError>>, Result<R, StoreError>);

/// What the writer hands to the syncing thread, in commit order.
pub(crate) enum Item<R> {
    /// A committed group (or one that failed after its number was taken: no answers).
    Group { seq: u64, answers: Vec<Answer<R>>, touched: HashSet<StreamId>, gone: Vec<StreamId> },
    /// A read the writer made between groups: it may have seen groups queued before it.
    Read(Answer<R>),
    /// Answered once everything queued before it is synced.
    Drain(mpsc::SyncSender<()>),
}

/// The writer's side of the overlap: the file lock and the syncing thread.
pub(crate) struct Pipeline<R> {
    lock: lock::Lock,
    /// FULL: this store may overlap. Stores with a weaker `synchronous` never do, but hold
    /// the shared lock all the same, so that no other store overlaps while they read.
    may_overlap: bool,
    exclusive: bool,
    /// When the lock became exclusive; while shared, when to try again.
    at: Instant,
    to_sync: mpsc::Sender<Item<R>>,
    synced: Arc<Synced>,
}

impl<R: Send + 'static> Pipeline<R> {
    /// Join the stores of the database at `db` (its WAL already exists), waiting for the
    /// shared lock; with `may_overlap` (FULL), set up the overlap. `None`, with the reason
    /// logged, where the lock cannot be had: commits then wait for their own `fsync`, as
    /// SQLite does.
    pub(crate) fn open(db: &Path, may_overlap: bool, synced: Arc<Synced>, watchers: Watchers) -> Option<Self> {
        match Self::try_open(db, may_overlap, synced, watchers) {
            Ok(pipeline) => Some(pipeline),
            Err(error) => {
                tracing::warn!(%error, db = %db.display(), "sqlite: commits will wait for their own fsync (no overlap)");
                None
            }
        }
    }

    fn try_open(db: &Path, may_overlap: bool, synced: Arc<Synced>, watchers: Watchers) -> std::io::Result<Self> {
        let lock = lock::Lock::open(&beside(db, "-durable-mcp.lock"))?;
        let (to_sync, queue) = mpsc::channel();
        // Without its syncing thread a store keeps the shared lock (others must not overlap
        // while it reads) and waits for its own fsyncs.
        let may_overlap = may_overlap && {
            let wal = std::fs::File::options().read(true).write(true).open(beside(db, "-wal"));
            let for_thread = Arc::clone(&synced);
            let started = wal.and_then(|wal| {
                std::thread::Builder::new().name("durable-mcp-sqlite-sync".into()).spawn(move || sync_loop(&wal, &queue, &for_thread, &watchers))
            });
            if let Err(error) = &started {
                tracing::warn!(%error, db = %db.display(), "sqlite: commits will wait for their own fsync (no overlap)");
            }
            started.is_ok()
        };
        Ok(Self { lock, may_overlap, exclusive: false, at: Instant::now(), to_sync, synced })
    }

    /// Before a group: take the file to this store or give it back, and set the writer
    /// connection's `synchronous` to match. Whether this group overlaps its `fsync`.
    pub(crate) fn before_group(&mut self, conn: &Connection) -> bool {
        let now = Instant::now();
        if self.exclusive && now.duration_since(self.at) >= HOLD {
            self.give_back(conn);
        } else if self.may_overlap && !self.exclusive && now >= self.at {
            self.at = now + RETRY;
            match self.lock.try_exclusive() {
                Ok(true) => match conn.pragma_update(None, "synchronous", "NORMAL") {
                    Ok(()) => {
                        self.exclusive = true;
                        self.at = now;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "sqlite: could not set synchronous=NORMAL; commits wait for their own fsync");
                        self.share();
                    }
                },
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, "sqlite: could not lock the store's lock file"),
            }
        }
        self.synced.overlapping.store(self.exclusive, Ordering::SeqCst);
        self.exclusive
    }

    /// The writer is idle: how long it may wait for a job before giving the file back.
    pub(crate) fn idle_for(&self) -> Option<Duration> {
        self.exclusive.then(|| HOLD.saturating_sub(self.at.elapsed()))
    }

    /// Give the file back: every commit synced, `synchronous=FULL` again, the lock shared.
    pub(crate) fn give_back(&mut self, conn: &Connection) {
        if !self.exclusive {
            return;
        }
        self.drain();
        if let Err(error) = conn.pragma_update(None, "synchronous", "FULL") {
            // Keep the file: another store reading it must not see unsynced commits.
            tracing::warn!(%error, "sqlite: could not set synchronous=FULL; keeping the file to this store");
            self.at = Instant::now();
            return;
        }
        self.share();
        self.exclusive = false;
        self.at = Instant::now() + REJOIN;
        self.synced.overlapping.store(false, Ordering::SeqCst);
    }

    fn share(&self) {
        // A conversion down never conflicts; if it fails anyway the lock stays as it was.
        if let Err(error) = self.lock.shared() {
            tracing::warn!(%error, "sqlite: could not share the store's lock file");
        }
    }

    /// Number the group about to commit: before its `COMMIT`, so a reader that sees its
    /// data waits for its `fsync`.
    pub(crate) fn begin_commit(&self) -> u64 {
        self.synced.committed.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Whether an `fsync` failed (the store refuses everything since).
    pub(crate) fn broken(&self) -> Result<(), StoreError> {
        self.synced.check()
    }

    /// Queue `item` for the syncing thread.
    pub(crate) fn hand_over(&self, item: Item<R>) {
        if let Err(mpsc::SendError(item)) = self.to_sync.send(item) {
            fail(item, "the sqlite sync thread has stopped");
        }
    }

    /// Wait until every group handed over is synced.
    fn drain(&self) {
        let (done, wait) = mpsc::sync_channel(1);
        self.hand_over(Item::Drain(done));
        let _ = wait.recv();
    }
}

impl<R> Drop for Pipeline<R> {
    fn drop(&mut self) {
        // The lock goes with this value: wait until nothing unsynced is left, so that no
        // other store can read a commit before its fsync.
        let (done, wait) = mpsc::sync_channel(1);
        if self.to_sync.send(Item::Drain(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// `<db><suffix>`: the files SQLite and this store keep beside the database.
fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn fail<R>(item: Item<R>, why: &'static str) {
    match item {
        Item::Group { answers, .. } => {
            for (reply, _) in answers {
                let _ = reply.send(Err(StoreError::Unavailable(why.into())));
            }
        }
        Item::Read((reply, _)) => {
            let _ = reply.send(Err(StoreError::Unavailable(why.into())));
        }
        Item::Drain(done) => {
            let _ = done.send(());
        }
    }
}

/// The syncing thread: one `fdatasync` for everything queued since the last, then the
/// answers and wake-ups, in order.
fn sync_loop<R>(wal: &std::fs::File, queue: &mpsc::Receiver<Item<R>>, synced: &Synced, watchers: &Watchers) {
    let mut items = Vec::new();
    while let Ok(first) = queue.recv() {
        items.push(first);
        items.extend(queue.try_iter());
        let last = items.iter().filter_map(|item| if let Item::Group { seq, .. } = item { Some(*seq) } else { None }).max();
        if last.is_some()
            && !synced.broken.load(Ordering::SeqCst)
            && let Err(error) = wal.sync_data()
        {
            tracing::error!(%error, "fsync of the sqlite WAL failed: the store stops until the process restarts");
            synced.broken.store(true, Ordering::SeqCst);
        }
        let broken = synced.broken.load(Ordering::SeqCst);
        for item in items.drain(..) {
            match item {
                Item::Group { answers, touched, gone, .. } if !broken => {
                    for stream in &touched {
                        watchers.wake(stream);
                    }
                    watchers.forget(&gone);
                    for (reply, result) in answers {
                        let _ = reply.send(result);
                    }
                }
                Item::Read((reply, result)) if !broken => {
                    let _ = reply.send(result);
                }
                item => fail(item, BROKEN),
            }
        }
        if let Some(last) = last {
            // Broken: release every reader waiting (each then reports the failure).
            synced.synced.send_replace(if broken { u64::MAX } else { last });
        }
    }
}

#[cfg(target_os = "linux")]
mod lock {
    use std::fs::File;
    use std::io;
    use std::path::Path;

    use nix::errno::Errno;
    use nix::fcntl::{FcntlArg, fcntl};

    /// An open-file-description lock on a whole file (`F_OFD_SETLK`): owned by this open
    /// file, so two stores in one process exclude each other as two processes do, and
    /// converted between shared and exclusive atomically.
    pub(super) struct Lock(File);

    impl Lock {
        /// Open (creating) `path` and take the shared lock, waiting for a store that holds
        /// it exclusively to give it back.
        pub(super) fn open(path: &Path) -> io::Result<Self> {
            let lock = Self(File::options().read(true).write(true).create(true).truncate(false).open(path)?);
            lock.shared()?;
            Ok(lock)
        }

        pub(super) fn shared(&self) -> io::Result<()> {
            self.set(libc::F_RDLCK, true)
        }

        /// Convert to exclusive if no other store holds the lock; the shared lock stays
        /// otherwise.
        pub(super) fn try_exclusive(&self) -> io::Result<bool> {
            match self.set(libc::F_WRLCK, false) {
                Ok(()) => Ok(true),
                Err(error) if matches!(Errno::from_raw(error.raw_os_error().unwrap_or(0)), Errno::EAGAIN | Errno::EACCES) => Ok(false),
                Err(error) => Err(error),
            }
        }

        fn set(&self, kind: libc::c_int, wait: bool) -> io::Result<()> {
            let request = libc::flock {
                l_type: kind as libc::c_short,
                l_whence: libc::SEEK_SET as libc::c_short,
                l_start: 0,
                // Zero: the whole file, however long.
                l_len: 0,
                // Must be zero for open-file-description locks.
                l_pid: 0,
            };
            loop {
                let arg = if wait { FcntlArg::F_OFD_SETLKW(&request) } else { FcntlArg::F_OFD_SETLK(&request) };
                match fcntl(&self.0, arg) {
                    Ok(_) => return Ok(()),
                    Err(Errno::EINTR) => {}
                    Err(errno) => return Err(io::Error::from(errno)),
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod lock {
    use std::io;
    use std::path::Path;

    /// Without open-file-description locks, stores cannot tell whether they share the file:
    /// no overlap.
    pub(super) struct Lock;

    impl Lock {
        pub(super) fn open(_: &Path) -> io::Result<Self> {
            Err(io::Error::new(io::ErrorKind::Unsupported, "overlapping commit and fsync needs open-file-description locks (Linux)"))
        }

        pub(super) fn shared(&self) -> io::Result<()> {
            Ok(())
        }

        pub(super) fn try_exclusive(&self) -> io::Result<bool> {
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_settles_only_once_every_commit_it_may_have_seen_is_synced() {
        let synced = Arc::new(Synced::default());
        synced.committed.store(3, Ordering::SeqCst);
        synced.synced.send_replace(1);
        let waiting = tokio::spawn({
            let synced = Arc::clone(&synced);
            async move { synced.settle().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "settled before groups 2 and 3 were synced");
        synced.synced.send_replace(2);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "settled before group 3 was synced");
        synced.synced.send_replace(3);
        assert!(waiting.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn after_a_failed_fsync_reads_fail() {
        let synced = Synced::default();
        synced.committed.store(1, Ordering::SeqCst);
        synced.broken.store(true, Ordering::SeqCst);
        synced.synced.send_replace(u64::MAX);
        assert!(matches!(synced.settle().await, Err(StoreError::Unavailable(_))));
    }
}

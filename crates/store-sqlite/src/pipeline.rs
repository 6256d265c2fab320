//! Commit and fsync overlapped, for `synchronous=FULL`.
//!
//! With FULL, SQLite's commit returns only after an `fsync` of the WAL, and the writer thread
//! waits through it: on a disk whose `fsync` takes a third of a millisecond, the next group
//! cannot start for that long, and a server at 8 connections leaves its CPU idle a fifth of
//! the time. Here the writer commits with `synchronous=NORMAL` (the frames are written, not
//! yet synced) and hands the group to a syncing thread, which `fdatasync`s the WAL file and
//! only then answers the group's jobs and wakes its tails, while the writer runs the next
//! group. When there is no next group (no job queued) and every earlier group is synced,
//! the writer `fdatasync`s and answers the group itself: handing it over would overlap
//! nothing and only add two thread switches to its wait. Durability is FULL's: nothing is
//! acknowledged, sent or read before its `fsync`.
//!
//! - **Writes** are answered after the `fsync` that covers them (D1), by whichever thread
//!   made it.
//! - **Reads in this process** wait, after themselves, until every commit they could have
//!   seen is synced ([`Synced::settle`]): the writer raises a counter just before each
//!   `COMMIT`.
//!   The writer's own reads between groups are answered at once when every group is synced,
//!   else by the syncing thread, in order.
//! - **Other processes on the file** would see a commit before its `fsync`, so a writer
//!   overlaps only while it is the file's one user. Every store holds a shared
//!   open-file-description lock on byte 0 of `<db>-durable-mcp.lock` (named from the
//!   database's real path, symlinks resolved) and converts it to exclusive to overlap (such
//!   a conversion is atomic, and a refused one keeps the shared lock, unlike `flock`'s). It
//!   gives the lock back at least every [`HOLD`], busy or idle, after every commit is
//!   synced. A store opening the file first "knocks" (a shared lock on byte 1), then waits
//!   for its shared lock on byte 0; a holder does not take the file again while someone
//!   knocks, so the newcomer gets in; from then on neither overlaps until one of them
//!   closes. A store that cannot take its lock (on Linux) does not open. Programs other
//!   than durable-mcp (the `sqlite3` shell) take no such lock: they may see a commit up to
//!   one `fsync` before it is on disk.
//! - **Opening** the file, a store `fdatasync`s its WAL (and the directory) before serving
//!   anything: a process killed while overlapping may have left commits that were written but
//!   not yet synced, which any reader of the file would otherwise see.
//! - **A failed `fsync`**, or a syncing thread gone, stops the store: every request fails
//!   until the process restarts, and the store keeps the file to itself until then, so that
//!   no other store serves the commits whose `fsync` failed (they are in the page cache, and
//!   may or may not reach the disk: a restart may find them or not). Retrying would be
//!   wrong, since the kernel may have dropped the pages it could not write.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use durable_mcp_store::wake::Watchers;
use durable_mcp_store::{StoreError, StreamId};
use rusqlite::Connection;
use tokio::sync::{oneshot, watch};

use crate::counters::Counters;

/// The longest a store keeps the file to itself before giving other stores a chance to
/// open it (a store opening the file waits up to this long).
pub(crate) const HOLD: Duration = Duration::from_millis(250);
/// The longest a store waits to open a file another store keeps to itself (a holder gives
/// it back within [`HOLD`] unless it is stuck or broken).
const OPEN_WAIT: Duration = Duration::from_secs(30);
/// After giving the lock back, how long before trying to take it again: a store waiting for
/// its shared lock is woken at once, and takes it well within this.
const REJOIN: Duration = Duration::from_millis(20);
/// While another store shares the file, how often to check whether it has gone.
const RETRY: Duration = Duration::from_millis(500);

const BROKEN: &str =
    "an fsync of the sqlite WAL failed: the store refuses every request until the process restarts";

/// How far commits are visible and synced: shared by the writer, the syncing thread and
/// the readers.
#[derive(Debug)]
pub(crate) struct Synced {
    /// Groups numbered for an overlapped commit: raised just before the group's `COMMIT`,
    /// so a reader that sees a group's data sees its number (a group whose `COMMIT` then
    /// fails counts too, and is passed when its turn comes).
    committed: AtomicU64,
    /// Groups on disk.
    synced: watch::Sender<u64>,
    /// An `fsync` failed.
    broken: AtomicBool,
    /// Whether the last group overlapped its `fsync` (for diagnostics and tests).
    overlapping: AtomicBool,
    /// The store's commits and syncs, counted (shared with the writer).
    counters: Arc<Counters>,
}

impl Default for Synced {
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

impl Synced {
    /// Nothing committed yet; syncs counted in `counters`.
    pub(crate) fn new(counters: Arc<Counters>) -> Self {
        Self {
            committed: AtomicU64::new(0),
            synced: watch::Sender::new(0),
            broken: AtomicBool::new(false),
            overlapping: AtomicBool::new(false),
            counters,
        }
    }

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
        if self.broken.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable(BROKEN.into()))
        } else {
            Ok(())
        }
    }

    /// The groups up to `seq` are on disk. Never lowers the count: the writer's own `fsync`
    /// ([`Pipeline::finish`]) may have passed the syncing thread's.
    fn advance(&self, seq: u64) {
        self.synced.send_if_modified(|synced| {
            let raised = seq > *synced;
            *synced = (*synced).max(seq);
            raised
        });
    }

    /// Whether every group before `seq` is on disk, and no later one: `seq` is next. Never
    /// for a broken store (its count is `u64::MAX`).
    fn synced_before(&self, seq: u64) -> bool {
        self.synced.borrow().checked_add(1) == Some(seq)
    }

    /// `fdatasync` the WAL, unless the store has stopped; a failure stops it. Whether the
    /// WAL is synced.
    fn sync(&self, wal: &std::fs::File) -> bool {
        if self.check().is_err() {
            return false;
        }
        let synced = wal.sync_data();
        self.counters.synced();
        match synced {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(%error, "fsync of the sqlite WAL failed: the store stops until the process restarts");
                self.break_down();
                false
            }
        }
    }

    /// Whether every group numbered so far is on disk.
    fn caught_up(&self) -> bool {
        *self.synced.borrow() >= self.committed.load(Ordering::SeqCst)
    }

    /// Stop: every request fails from now on, and every reader waiting is released to say so.
    fn break_down(&self) {
        self.broken.store(true, Ordering::SeqCst);
        self.synced.send_replace(u64::MAX);
    }

    /// Tests: number a commit that is not synced yet, as the writer does before a `COMMIT`.
    #[cfg(test)]
    pub(crate) fn hold_back(&self) -> u64 {
        self.committed.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Tests: the commits up to `seq` are synced.
    #[cfg(test)]
    pub(crate) fn release(&self, seq: u64) {
        self.synced.send_replace(seq);
    }

    /// Tests: the store's counters.
    #[cfg(test)]
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Whether the last group committed overlapped its `fsync`.
    pub(crate) fn overlapping(&self) -> bool {
        self.overlapping.load(Ordering::SeqCst)
    }
}

/// A job's answer: where it goes and what it is.
pub(crate) type Answer<R> = (
    oneshot::Sender<Result<R, StoreError>>,
    Result<R, StoreError>,
);

/// What the writer hands to the syncing thread, in commit order.
pub(crate) enum Item<R> {
    /// A committed group (or one that failed after its number was taken: no answers).
    Group {
        seq: u64,
        answers: Vec<Answer<R>>,
        touched: HashSet<StreamId>,
        gone: Vec<StreamId>,
    },
    /// A read the writer made between groups: it may have seen groups queued before it.
    Read(Answer<R>),
    /// Answered once everything queued before it is synced.
    Drain(mpsc::SyncSender<()>),
}

/// The real path of the database at `path` (symlinks resolved, as SQLite resolves them), so
/// that every store of one file names the same lock and WAL.
pub(crate) fn real_path(path: &Path) -> std::io::Result<PathBuf> {
    match std::fs::canonicalize(path) {
        Ok(real) => Ok(real),
        // Not created yet: its directory's real path, and its name.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let name = path.file_name().ok_or(error)?;
            Ok(std::fs::canonicalize(parent)?.join(name))
        }
        Err(error) => Err(error),
    }
}

/// A store's place among the stores of one file: its shared lock, taken before it opens the
/// database. `None` where there are no such locks (not Linux): no store of the file overlaps.
pub(crate) struct Joined(Option<lock::Lock>);

impl Joined {
    /// Knock, then wait (at most [`OPEN_WAIT`]) for the shared lock of the database whose
    /// real path is `db`.
    pub(crate) fn join(db: &Path) -> Result<Self, StoreError> {
        let path = beside(db, "-durable-mcp.lock");
        match lock::Lock::open(&path, OPEN_WAIT) {
            Ok(lock) => Ok(Self(Some(lock))),
            Err(error) if error.kind() == std::io::ErrorKind::Unsupported => {
                tracing::debug!(%error, "sqlite: commits wait for their own fsync");
                Ok(Self(None))
            }
            Err(error) => Err(StoreError::Unavailable(
                format!("cannot lock {}: {error}", path.display()).into(),
            )),
        }
    }
}

/// The writer's side of the overlap: the file lock and the syncing thread.
pub(crate) struct Pipeline<R> {
    /// Taken only by a broken store's `Drop`, which keeps the lock for the process's life.
    lock: Option<lock::Lock>,
    /// The WAL, for the `fdatasync`s the writer makes itself: of a group nothing waits
    /// behind ([`Self::finish`]), and on closing (a group it never handed over).
    wal: Option<std::fs::File>,
    exclusive: bool,
    /// When the lock became exclusive; while shared, when to try again.
    at: Instant,
    /// The syncing thread: only a FULL store that could start one may overlap. Stores with
    /// a weaker `synchronous` never do, but hold the shared lock all the same, so that no
    /// other store overlaps while they read.
    to_sync: Option<mpsc::Sender<Item<R>>>,
    synced: Arc<Synced>,
}

impl<R: Send + 'static> Pipeline<R> {
    /// Start the pipeline of the database at `db` (its real path; the connection is open, so
    /// its WAL exists): the WAL and the directory are synced first (commits a killed process
    /// left unsynced), then, with `may_overlap` (FULL), the syncing thread starts. `None`
    /// where the store joined no lock.
    pub(crate) fn start(
        joined: Joined,
        db: &Path,
        may_overlap: bool,
        synced: Arc<Synced>,
        watchers: Watchers,
    ) -> Result<Option<Self>, StoreError> {
        let Joined(Some(lock)) = joined else {
            return Ok(None);
        };
        let mut pipeline = Self {
            lock: Some(lock),
            wal: None,
            exclusive: false,
            at: Instant::now(),
            to_sync: None,
            synced,
        };
        let wal = match std::fs::File::options()
            .read(true)
            .write(true)
            .open(beside(db, "-wal"))
        {
            Ok(wal) => wal,
            Err(error) => {
                // No WAL (a journal mode other than WAL: `status` flags it): nothing to
                // overlap, but the store keeps its shared lock.
                tracing::warn!(%error, db = %db.display(), "sqlite: no WAL beside the database; commits wait for their own fsync");
                return Ok(Some(pipeline));
            }
        };
        let counters = Arc::clone(&pipeline.synced.counters);
        counters.synced();
        wal.sync_data().map_err(|e| {
            StoreError::Unavailable(format!("sqlite: cannot sync the WAL: {e}").into())
        })?;
        if let Some(Err(error)) = db.parent().map(|dir| {
            std::fs::File::open(dir).and_then(|dir| {
                counters.synced();
                dir.sync_all()
            })
        }) {
            // As SQLite does with its own directory syncs: noted, not fatal.
            tracing::debug!(%error, "sqlite: could not sync the database's directory");
        }
        if may_overlap {
            let (to_sync, queue) = mpsc::channel();
            let for_thread = Arc::clone(&pipeline.synced);
            let started = wal.try_clone().and_then(|own| {
                pipeline.wal = Some(own);
                std::thread::Builder::new()
                    .name("durable-mcp-sqlite-sync".into())
                    .spawn(move || sync_loop(&wal, &queue, &for_thread, &watchers))
            });
            match started {
                Ok(_) => pipeline.to_sync = Some(to_sync),
                // It keeps the shared lock (others must not overlap while it reads) and waits
                // for its own fsyncs.
                Err(error) => {
                    tracing::warn!(%error, db = %db.display(), "sqlite: commits will wait for their own fsync (no overlap)")
                }
            }
        }
        Ok(Some(pipeline))
    }
}

impl<R> Pipeline<R> {
    /// Before a group: take the file to this store or give it back, and set the writer
    /// connection's `synchronous` to match. Whether this group overlaps its `fsync`.
    pub(crate) fn before_group(&mut self, conn: &Connection) -> bool {
        let now = Instant::now();
        if self.exclusive && now.duration_since(self.at) >= HOLD {
            self.give_back(conn);
        } else if self.to_sync.is_some() && !self.exclusive && now >= self.at {
            self.at = now + RETRY;
            match self
                .lock
                .as_ref()
                .map_or(Ok(false), lock::Lock::try_exclusive)
            {
                Ok(true) => match conn.pragma_update(None, "synchronous", "NORMAL") {
                    Ok(()) => {
                        self.exclusive = true;
                        self.at = now;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "sqlite: could not set synchronous=NORMAL; commits wait for their own fsync");
                        // Nothing was committed with NORMAL; should the conversion down fail,
                        // the store overlaps after all (its commits are synced either way).
                        self.exclusive = !self.share();
                        self.at = now;
                    }
                },
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, "sqlite: could not lock the store's lock file")
                }
            }
        }
        self.synced
            .overlapping
            .store(self.exclusive, Ordering::SeqCst);
        self.exclusive
    }

    /// The writer is idle: how long it may wait for a job before giving the file back.
    pub(crate) fn idle_for(&self) -> Option<Duration> {
        // A broken store keeps the file: nothing to wait for.
        (self.exclusive && self.synced.check().is_ok())
            .then(|| HOLD.saturating_sub(self.at.elapsed()))
    }

    /// Give the file back: every commit synced, `synchronous=FULL` again, the lock shared.
    /// A broken store keeps it: no other store may serve the commits whose fsync failed.
    pub(crate) fn give_back(&mut self, conn: &Connection) {
        if !self.exclusive || self.drain().is_err() {
            self.at = Instant::now();
            return;
        }
        if let Err(error) = conn.pragma_update(None, "synchronous", "FULL") {
            // Keep the file: another store reading it must not see unsynced commits.
            tracing::warn!(%error, "sqlite: could not set synchronous=FULL; keeping the file to this store");
            self.at = Instant::now();
            return;
        }
        if !self.share() {
            // Still exclusive (nothing unsynced is left): try again later.
            self.at = Instant::now();
            return;
        }
        self.exclusive = false;
        self.at = Instant::now() + REJOIN;
        self.synced.overlapping.store(false, Ordering::SeqCst);
    }

    /// Convert the lock down to shared: whether it is (a conversion down never conflicts;
    /// if it fails anyway the lock stays as it was).
    fn share(&self) -> bool {
        match self.lock.as_ref().map(lock::Lock::shared) {
            Some(Err(error)) => {
                tracing::warn!(%error, "sqlite: could not share the store's lock file");
                false
            }
            _ => true,
        }
    }

    /// Number the group about to commit: just before its `COMMIT`, so a reader that sees
    /// its data waits for its `fsync` (and not for the rest of its transaction).
    pub(crate) fn begin_commit(&self) -> u64 {
        self.synced.committed.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Whether an `fsync` failed (the store refuses everything since).
    pub(crate) fn broken(&self) -> Result<(), StoreError> {
        self.synced.check()
    }

    /// Answer a read the writer made between groups: at once if every group it may have
    /// seen is synced, else through the syncing thread, after their `fsync`.
    pub(crate) fn answer_read(&self, answer: Answer<R>) {
        if self.synced.caught_up() && self.synced.check().is_ok() {
            let (reply, result) = answer;
            let _ = reply.send(result);
        } else {
            self.hand_over(Item::Read(answer));
        }
    }

    /// Deliver overlapped group `seq` once its `fsync` is done. When nothing waits behind it
    /// (`idle`: no job is queued) and every group before it is synced, the writer syncs it
    /// itself (the `fdatasync` covers the groups before it too): handing it over would only
    /// add two thread switches (to the syncing thread and back) to its wait, and overlap
    /// nothing. Otherwise the syncing thread does, while the writer goes on.
    pub(crate) fn finish(
        &self,
        seq: u64,
        idle: bool,
        watchers: &Watchers,
        touched: HashSet<StreamId>,
        gone: Vec<StreamId>,
        answers: Vec<Answer<R>>,
    ) {
        let here = self
            .wal
            .as_ref()
            .filter(|_| idle && self.synced.synced_before(seq));
        match here {
            Some(wal) if self.synced.sync(wal) => {
                self.synced.advance(seq);
                deliver(watchers, &touched, &gone, answers);
            }
            Some(_) => fail(
                Item::Group {
                    seq,
                    answers,
                    touched,
                    gone,
                },
                BROKEN,
            ),
            None => self.hand_over(Item::Group {
                seq,
                answers,
                touched,
                gone,
            }),
        }
    }

    /// Queue `item` for the syncing thread; with the thread gone, the store stops.
    pub(crate) fn hand_over(&self, item: Item<R>) {
        let Some(to_sync) = &self.to_sync else {
            // Not reached: only an overlapping store hands over, and it has the thread.
            return fail(item, "the sqlite sync thread has stopped");
        };
        if let Err(mpsc::SendError(item)) = to_sync.send(item) {
            self.synced.break_down();
            fail(item, "the sqlite sync thread has stopped");
        }
    }

    /// Wait until every group handed over is synced; an error if the store has stopped.
    fn drain(&self) -> Result<(), StoreError> {
        let (done, wait) = mpsc::sync_channel(1);
        self.hand_over(Item::Drain(done));
        let _ = wait.recv();
        self.synced.check()
    }
}

impl<R> Drop for Pipeline<R> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The writer is gone but the store's readers are not: stop them too, and keep
            // the file (below), so that no other store overlaps while they could read.
            self.synced.break_down();
        }
        // The lock goes with this value: nothing unsynced may be left for another store to
        // read. The syncing thread syncs what it was handed; the writer's own `fdatasync`
        // covers a group it never handed over (a writer that panicked mid-group).
        if self.exclusive {
            // Broken or not, the checks below decide what happens to the lock.
            let _ = self.drain();
        }
        if self.exclusive
            && let Some(wal) = &self.wal
        {
            let synced = wal.sync_data();
            self.synced.counters.synced();
            match synced {
                Ok(()) if !self.synced.broken.load(Ordering::SeqCst) => {
                    self.synced
                        .advance(self.synced.committed.load(Ordering::SeqCst));
                }
                Ok(()) => {}
                Err(error) => {
                    tracing::error!(%error, "fsync of the sqlite WAL failed on close");
                    self.synced.break_down();
                }
            }
        }
        if self.synced.broken.load(Ordering::SeqCst) {
            // Keep the lock until the process ends: see the module docs.
            if let Some(lock) = self.lock.take() {
                std::mem::forget(lock);
            }
        }
    }
}

/// `<db><suffix>`: the files SQLite and this store keep beside the database.
fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A committed (and, with FULL, synced) group's effects, in order: its tails woken, the
/// streams it removed forgotten, its jobs answered.
pub(crate) fn deliver<R>(
    watchers: &Watchers,
    touched: &HashSet<StreamId>,
    gone: &[StreamId],
    answers: impl IntoIterator<Item = Answer<R>>,
) {
    for stream in touched {
        watchers.wake(stream);
    }
    watchers.forget(gone);
    for (reply, result) in answers {
        let _ = reply.send(result);
    }
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

/// Stops the store if the syncing thread ends while the writer still needs it (a panic).
struct StopOnExit<'a>(&'a Synced);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.break_down();
        }
    }
}

/// The syncing thread: one `fdatasync` for everything queued since the last, then the synced
/// count, then the answers and wake-ups, in order.
fn sync_loop<R>(
    wal: &std::fs::File,
    queue: &mpsc::Receiver<Item<R>>,
    synced: &Synced,
    watchers: &Watchers,
) {
    let _stop = StopOnExit(synced);
    let mut items = Vec::new();
    while let Ok(first) = queue.recv() {
        items.push(first);
        items.extend(queue.try_iter());
        let last = items
            .iter()
            .filter_map(|item| {
                if let Item::Group { seq, .. } = item {
                    Some(*seq)
                } else {
                    None
                }
            })
            .max();
        if last.is_some() {
            synced.sync(wal);
        }
        let broken = synced.broken.load(Ordering::SeqCst);
        if let (Some(last), false) = (last, broken) {
            // First the count, so that a tail woken below reads without waiting again.
            synced.advance(last);
        }
        for item in items.drain(..) {
            match item {
                Item::Group {
                    answers,
                    touched,
                    gone,
                    ..
                } if !broken => deliver(watchers, &touched, &gone, answers),
                Item::Read((reply, result)) if !broken => {
                    let _ = reply.send(result);
                }
                item => fail(item, BROKEN),
            }
        }
    }
}

#[cfg(target_os = "linux")]
mod lock {
    use std::fs::File;
    use std::io;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    use nix::errno::Errno;
    use nix::fcntl::{FcntlArg, fcntl};

    /// The byte every store holds shared (exclusive: the holder overlaps).
    const FILE: i64 = 0;
    /// The byte a store opening the file holds shared while it waits for [`FILE`].
    const KNOCK: i64 = 1;

    /// Open-file-description locks (`F_OFD_SETLK`) on the store's lock file: owned by this
    /// open file, so two stores in one process exclude each other as two processes do, and
    /// converted between shared and exclusive atomically (a refused conversion keeps the
    /// lock as it was).
    pub(super) struct Lock {
        file: File,
        path: PathBuf,
        /// Opened read-only (the file is not writable here): shared only, never exclusive.
        writable: bool,
    }

    impl Lock {
        /// Open (creating) `path`, knock, and take the shared lock, polling until `wait` has
        /// passed (a holder gives the file back within `HOLD` and does not take it again
        /// while someone knocks). Filesystems without open-file-description locks answer
        /// `Unsupported`.
        pub(super) fn open(path: &Path, wait: Duration) -> io::Result<Self> {
            let deadline = Instant::now() + wait;
            let give_up = || {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("another store has kept the file to itself for {wait:?}"),
                )
            };
            loop {
                // Read-only where the file exists but is not writable: a shared lock needs
                // only read access (such a store never overlaps).
                let (file, writable) = match File::options()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                {
                    Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                        (File::open(path)?, false)
                    }
                    opened => (opened?, true),
                };
                let lock = Self {
                    file,
                    path: path.to_owned(),
                    writable,
                };
                let shared = |byte, pause| -> io::Result<()> {
                    while !lock.set_now(libc::F_RDLCK, byte)? {
                        if Instant::now() >= deadline {
                            return Err(give_up());
                        }
                        std::thread::sleep(pause);
                    }
                    Ok(())
                };
                shared(KNOCK, Duration::from_millis(1))?;
                shared(FILE, Duration::from_millis(2))?;
                lock.set(libc::F_UNLCK, KNOCK, true)?;
                // A lock file removed and created again meanwhile would lock nothing: start
                // over on the one the path names now (dropping this one releases its locks).
                if lock.current()? {
                    return Ok(lock);
                }
                if Instant::now() >= deadline {
                    return Err(give_up());
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }

        pub(super) fn shared(&self) -> io::Result<()> {
            self.set(libc::F_RDLCK, FILE, true)
        }

        /// Convert to exclusive if no other store holds or waits for the file and the lock
        /// file is still the one the path names; the shared lock stays otherwise.
        pub(super) fn try_exclusive(&self) -> io::Result<bool> {
            if !self.writable || !self.current()? || !self.set_now(libc::F_WRLCK, KNOCK)? {
                return Ok(false);
            }
            let taken = self.set_now(libc::F_WRLCK, FILE);
            // Whatever came of it, the knock byte is free again (or a newcomer would wait
            // for its whole deadline).
            let freed = self.set(libc::F_UNLCK, KNOCK, true);
            let taken = taken?;
            if let Err(error) = freed {
                if taken {
                    // Not exclusive after all: back to shared, as before.
                    self.shared()?;
                }
                return Err(error);
            }
            Ok(taken)
        }

        /// Whether the path still names this open file.
        fn current(&self) -> io::Result<bool> {
            let (held, named) = (self.file.metadata()?, std::fs::metadata(&self.path));
            Ok(named.is_ok_and(|named| named.dev() == held.dev() && named.ino() == held.ino()))
        }

        /// Take `kind` on `byte` without waiting: whether it was granted.
        fn set_now(&self, kind: libc::c_int, byte: i64) -> io::Result<bool> {
            match self.set(kind, byte, false) {
                Ok(()) => Ok(true),
                Err(error) if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                    Ok(false)
                }
                Err(error) => Err(error),
            }
        }

        fn set(&self, kind: libc::c_int, byte: i64, wait: bool) -> io::Result<()> {
            let request = libc::flock {
                l_type: kind as libc::c_short,
                l_whence: libc::SEEK_SET as libc::c_short,
                l_start: byte,
                l_len: 1,
                // Must be zero for open-file-description locks.
                l_pid: 0,
            };
            loop {
                let arg = if wait {
                    FcntlArg::F_OFD_SETLKW(&request)
                } else {
                    FcntlArg::F_OFD_SETLK(&request)
                };
                match fcntl(&self.file, arg) {
                    Ok(_) => return Ok(()),
                    Err(Errno::EINTR) => {}
                    // A file system (or kernel) without open-file-description locks: the same
                    // for every store of the file, so none overlaps.
                    Err(errno @ (Errno::EINVAL | Errno::ENOLCK | Errno::EOPNOTSUPP)) => {
                        return Err(io::Error::new(
                            io::ErrorKind::Unsupported,
                            format!("no open-file-description locks here: {errno}"),
                        ));
                    }
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
    use std::time::Duration;

    /// Without open-file-description locks, stores cannot tell whether they share the file:
    /// no overlap.
    pub(super) struct Lock;

    impl Lock {
        pub(super) fn open(_: &Path, _: Duration) -> io::Result<Self> {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "overlapping commit and fsync needs open-file-description locks (Linux)",
            ))
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
        assert!(
            !waiting.is_finished(),
            "settled before groups 2 and 3 were synced"
        );
        synced.synced.send_replace(2);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "settled before group 3 was synced");
        synced.synced.send_replace(3);
        assert!(waiting.await.unwrap().is_ok());
    }

    /// The writer syncs a group itself only when it is the next one to sync, and never once
    /// the store broke (whose count is at its maximum: no overflow, no panic).
    #[test]
    fn the_writer_syncs_only_the_next_group_of_a_store_that_is_not_broken() {
        let synced = Synced::default();
        synced.advance(4);
        assert!(synced.synced_before(5));
        assert!(!synced.synced_before(6), "group 5 is not synced yet");
        assert!(!synced.synced_before(4));
        synced.advance(3);
        assert_eq!(*synced.synced.borrow(), 4, "the count never goes back");
        synced.break_down();
        assert!(!synced.synced_before(5));
        assert!(!synced.synced_before(u64::MAX));
        assert!(!synced.synced_before(0));
        synced.advance(9);
        assert_eq!(
            *synced.synced.borrow(),
            u64::MAX,
            "a broken store stays broken"
        );
    }

    #[cfg(target_os = "linux")]
    fn lock_path() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "durable-mcp-lock-{}-{}",
            std::process::id(),
            StreamId::random()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("db-durable-mcp.lock")
    }

    /// A store waiting to open the file knocks; the holder must not take the file again
    /// while it does, or a busy holder could keep it out for ever.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_knock_keeps_the_holder_from_taking_the_file_again() {
        let path = lock_path();
        let holder = lock::Lock::open(&path, Duration::from_secs(1)).unwrap();
        assert!(
            holder.try_exclusive().unwrap(),
            "alone, the holder takes the file"
        );
        let waiting = std::thread::spawn({
            let path = path.clone();
            move || lock::Lock::open(&path, Duration::from_secs(5))
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !waiting.is_finished(),
            "the newcomer got in while the file was kept"
        );
        holder.shared().unwrap();
        assert!(
            !holder.try_exclusive().unwrap(),
            "the holder took the file again from a knocking newcomer"
        );
        let newcomer = waiting.join().unwrap().unwrap();
        assert!(
            !holder.try_exclusive().unwrap(),
            "exclusive while another store has the file open"
        );
        assert!(!newcomer.try_exclusive().unwrap());
        drop(newcomer);
        assert!(
            holder.try_exclusive().unwrap(),
            "alone again, the holder takes the file"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_open_gives_up_when_the_file_is_kept_past_its_wait() {
        let path = lock_path();
        let holder = lock::Lock::open(&path, Duration::from_secs(1)).unwrap();
        assert!(holder.try_exclusive().unwrap());
        let started = Instant::now();
        let refused = lock::Lock::open(&path, Duration::from_millis(200))
            .err()
            .expect("the open gave up");
        assert_eq!(refused.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(2));
        // A lock file replaced under a holder locks nothing: it does not take the new one.
        holder.shared().unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"").unwrap();
        assert!(
            !holder.try_exclusive().unwrap(),
            "exclusive on a lock file the path no longer names"
        );
    }

    #[tokio::test]
    async fn after_a_failed_fsync_reads_fail() {
        let synced = Synced::default();
        synced.committed.store(1, Ordering::SeqCst);
        synced.broken.store(true, Ordering::SeqCst);
        synced.synced.send_replace(u64::MAX);
        assert!(matches!(
            synced.settle().await,
            Err(StoreError::Unavailable(_))
        ));
    }
}

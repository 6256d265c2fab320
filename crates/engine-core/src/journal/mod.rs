//! The journal (D6, D7): journaled requests' records, their leases and heartbeats, and
//! the taking over of runs whose lease ran out, on the [records](crate::records).
//!
//! A journaled request is a [`RecordKind::Run`] record, committed before its handler
//! starts, keyed by the run id (the id of its response stream). The record holds what is
//! needed to run the request again (the request, the caller) and a lease: the worker that
//! runs it and until when. The owner renews the lease while the handler runs
//! ([`Held`]); any worker takes over a run whose lease expired ([`Journal::claim`]), and a
//! worker claims at start-up the runs it owned before it stopped; what a claimed run needs
//! next is the request path's decision (`recovery`). The record is deleted once the
//! outcome is committed to the stream, so the stream's closing event is the single
//! outcome (D7).
//!
//! Step results, answers and "already emitted" marks are [`RecordKind::Step`] records
//! under `<run>/` ([`key::steps`]), written with "first commit wins" (D8).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use durable_mcp_handler::{SealError, StateKeys, StateSealer};
use durable_mcp_protocol::jsonrpc::{Request, RequestId, to_text};
use durable_mcp_store::{
    Expect, Principal, Record, RecordKind, SessionId, StoreError, StreamId, WriteBatch, now_ms,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::EngineError;
use crate::caller::Caller;
use crate::events::Events;
use crate::records::{ActionRecord, AliasRecord, Parked, RunRecord, canonical, key};
use crate::records::{AttemptEnding, ParkReason};
use crate::rerun::AlreadySent;

/// A duration in milliseconds, saturated.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RunRecord {
    /// The journal entry of `caller`'s `request`, answered on `stream`, leased to this
    /// worker.
    /// Its trace context is the current span's (the request's server span, traces on),
    /// else the client's ([`crate::traces`]).
    pub fn new(journal: &Journal, caller: &Caller, request: Request, stream: &StreamId) -> Self {
        let trace = crate::traces::to_store(&request, caller.trace.as_ref());
        let mut record = Self {
            principal: caller.principal.clone(),
            session: caller.session_id().cloned(),
            era: caller.era,
            protocol_version: caller.protocol_version,
            log_level: caller.log_level.clone(),
            request,
            stream: stream.clone(),
            inbox: StreamId::random(),
            owner: journal.worker_id.clone(),
            lease_until_ms: now_ms() + ms(journal.lease),
            attempt: 1,
            task: None,
            task_flavor: None,
            failures: 0,
            reply: None,
            relay: None,
            trace,
            http: caller.http.as_deref().map(crate::records::StoredHead::keep),
            parked: None,
            attempts: Vec::new(),
        };
        record.begin_attempt(&journal.worker_id, now_ms());
        record
    }
}

/// A journaled run held by this worker: its record's current version, renewed by the
/// worker's shared heartbeat ([`Heartbeats`]) until the run ends.
pub struct Held {
    /// The run's id (its record's key).
    pub run_id: String,
    /// The record as this worker last wrote it (the one the heartbeat shares, not a copy).
    pub record: Arc<RunRecord>,
    /// What the heartbeat shares with this run: the record and its version (every write
    /// of the record, lease renewal or becoming a task, holds its lock, so they never
    /// conflict with each other, only with another worker), the tokens and the validity.
    beat: Arc<Beat>,
    /// Fires if another worker took the run over (our lease was lost).
    pub lost: CancellationToken,
    /// Fires when the client cancelled the request (on any worker; a child of `lost`).
    pub cancelled: CancellationToken,
    /// Whether an earlier run or this one may have written step records.
    pub steps_written: Arc<std::sync::atomic::AtomicBool>,
    /// A re-run: the notifications earlier runs already committed to its stream, which it
    /// does not send again (read once when the run is taken over; `None` for a first run).
    pub already_sent: Option<Arc<AlreadySent>>,
    /// The run's entry in the worker's [`Heartbeats`].
    heartbeats: Heartbeats,
    slot: u64,
    /// Set once the run's record went with its outcome ([`Held::commit_outcome`]).
    ended: bool,
    /// The task limit's unit of a task created on this worker, released with the run.
    pub task_permit: Option<crate::limits::Permit>,
}

/// A new run before its journal entry is committed: a handler may run while its request's
/// first commit waits for the handler's first effect or outcome. It has the tokens and the
/// steps flag its [`Held`] will have, so that what starts with the handler (its cancellation,
/// its durable context) is the held run's once the entry is committed.
pub struct Unjournaled {
    /// The run's id (its record's key).
    pub run_id: String,
    /// The record to commit.
    pub record: RunRecord,
    /// Becomes [`Held::lost`].
    pub lost: CancellationToken,
    /// Becomes [`Held::cancelled`] (a child of `lost`).
    pub cancelled: CancellationToken,
    /// Becomes [`Held::steps_written`].
    pub steps_written: Arc<std::sync::atomic::AtomicBool>,
}

impl Unjournaled {
    /// Run `run_id` with `record`, not committed yet.
    pub fn new(run_id: String, record: RunRecord) -> Self {
        let lost = CancellationToken::new();
        let cancelled = lost.child_token();
        let steps_written = Arc::new(std::sync::atomic::AtomicBool::new(
            record.attempt > 1 || record.era == crate::records::Era::Modern,
        ));
        Self {
            run_id,
            record,
            lost,
            cancelled,
            steps_written,
        }
    }

    /// The record to commit now: its lease starts now, not when the run was made (its
    /// handler may have run a while before its first commit).
    pub fn record_now(&mut self, journal: &Journal) -> &RunRecord {
        self.record.lease_until_ms = now_ms() + ms(journal.lease);
        &self.record
    }

    /// Hold the run, whose record this worker committed at `version`: its lease is renewed
    /// by the worker's heartbeat from now on.
    pub fn start(self, journal: &Journal, version: u64) -> Held {
        let Self {
            run_id,
            record,
            lost,
            cancelled,
            steps_written,
        } = self;
        let record = Arc::new(record);
        let beat = Arc::new(Beat {
            run_id: run_id.clone(),
            shared: tokio::sync::Mutex::new((record.clone(), version)),
            lost: lost.clone(),
            cancelled: cancelled.clone(),
            valid_until_ms: std::sync::atomic::AtomicU64::new(record.lease_until_ms),
            stopped: std::sync::atomic::AtomicBool::new(false),
            renewing: std::sync::atomic::AtomicBool::new(false),
        });
        let heartbeats = journal.heartbeats.clone();
        let slot = heartbeats.add(journal, beat.clone());
        Held {
            run_id,
            record,
            beat,
            lost,
            cancelled,
            steps_written,
            already_sent: None,
            heartbeats,
            slot,
            ended: false,
            task_permit: None,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // However the run ends (an early return, an error), its heartbeat ends with it:
        // a lease nobody renews expires and the run is recovered.
        self.stop_heartbeat();
    }
}

impl Held {
    /// Hold run `run_id`, whose `record` this worker wrote at `version`: its lease is
    /// renewed by the worker's heartbeat from now on.
    pub fn start(journal: &Journal, run_id: String, record: RunRecord, version: u64) -> Self {
        Unjournaled::new(run_id, record).start(journal, version)
    }

    /// Whether the lease is still surely ours (fencing: a worker that could not renew it
    /// for a whole lease must not commit an outcome another worker may also commit).
    pub fn lease_valid(&self) -> bool {
        now_ms() < self.beat.valid_until_ms.load(Ordering::SeqCst)
    }

    /// Stop renewing the lease (the run is about to end). A renewal under way when this
    /// is called writes nothing once it holds the record's lock.
    pub fn stop_heartbeat(&self) {
        if !self.beat.stopped.swap(true, Ordering::SeqCst) {
            self.heartbeats.remove(self.slot);
        }
    }

    /// Change the run's record (compare-and-set against the version this worker holds).
    pub async fn update(
        &mut self,
        journal: &Journal,
        change: impl FnOnce(&mut RunRecord),
    ) -> Result<(), EngineError> {
        let mut guard = self.beat.shared.lock().await;
        let mut record = RunRecord::clone(&guard.0);
        change(&mut record);
        let version = put_run(journal, &self.run_id, &record, guard.1).await?;
        let record = Arc::new(record);
        *guard = (record.clone(), version);
        self.record = record;
        Ok(())
    }

    /// The run has its outcome (or was cancelled): forget it. A stateless request's steps
    /// stay until they expire: a sealed `requestState` naming the run may still come back
    /// (a retry after a crash, a replay), and must find its committed steps (D8).
    pub async fn finish(self, journal: &Journal) {
        self.stop_heartbeat();
        if self.ended {
            return;
        }
        let store = journal.store();
        let steps = key::steps(&self.run_id);
        if !self.record.stateless()
            && self.steps_written.load(Ordering::SeqCst)
            && let Err(error) = store.delete_records(RecordKind::Step, &steps).await
        {
            tracing::warn!(%error, run = %self.run_id, "could not delete a finished run's steps; retention will");
        }
        if let Err(error) = store.delete_records(RecordKind::Run, &self.run_id).await {
            tracing::warn!(%error, run = %self.run_id, "could not delete a finished run's journal entry; recovery will");
        }
    }

    /// Commit the run's outcome as the last event of `stream` and end its journal entry,
    /// in one batch: the outcome, the close, the run record's removal at the version this
    /// worker holds, and the steps of a run that wrote some (a stateless request's stay, see
    /// [`Held::finish`]).
    ///
    /// # Durability
    /// All or nothing (D7): either the client's one outcome is committed and the run is no
    /// longer journaled, or neither. The removal is fenced by the version: if another
    /// worker took the run over (or renewed it), nothing is written and the error says so.
    pub async fn commit_outcome(
        &mut self,
        journal: &Journal,
        stream: &StreamId,
        outcome: &Value,
    ) -> Result<(), EngineError> {
        // Held while committing: no heartbeat moves the version in between.
        let guard = self.beat.shared.lock().await;
        let mut batch = WriteBatch::new()
            .append(stream.clone(), to_text(outcome))
            .close(stream.clone())
            .delete_record(RecordKind::Run, self.run_id.clone(), guard.1);
        if !self.record.stateless() && self.steps_written.load(Ordering::SeqCst) {
            batch = batch.delete_records(RecordKind::Step, key::steps(&self.run_id));
        }
        journal.events.commit(batch).await?;
        // Still under the lock: a renewal waiting for it sees the run stopped.
        self.stop_heartbeat();
        drop(guard);
        self.ended = true;
        Ok(())
    }

    /// Give the run back: another worker (or our own recovery loop) picks it up at
    /// `retry_at_ms`.
    pub async fn release(self, journal: &Journal, retry_at_ms: u64, failed: bool) {
        self.stop_heartbeat();
        let guard = self.beat.shared.lock().await;
        let (record, version) = guard.clone();
        let mut record = RunRecord::clone(&record);
        record.lease_until_ms = retry_at_ms;
        record.owner = String::new();
        if failed {
            record.failures += 1;
        }
        let how = if failed {
            AttemptEnding::Failed
        } else {
            AttemptEnding::HandedOver
        };
        record.end_attempt(how, now_ms());
        match put_run(journal, &self.run_id, &record, version).await {
            Ok(_) => tracing::info!(run = %self.run_id, "released a run's lease"),
            Err(EngineError::Store(StoreError::Conflict { .. } | StoreError::NotFound { .. }))
                if self.ended_elsewhere(journal).await =>
            {
                tracing::info!(run = %self.run_id, "the run was ended elsewhere (killed by an operator); its last steps are removed");
            }
            Err(error) => {
                tracing::warn!(%error, run = %self.run_id, "could not release a lease; it expires by itself")
            }
        }
    }

    /// Park the run for an operator ([`Parked`]): its lease is given back, and no worker
    /// takes it again until an operator retries it (`durable-mcp runs retry`) or ends it.
    /// Its stream stays open and its steps stay, so that the retry replays them (D8).
    /// Whether it was parked (else it is left to recovery, which parks it again).
    pub async fn park(self, journal: &Journal, parked: Parked) -> bool {
        self.stop_heartbeat();
        let guard = self.beat.shared.lock().await;
        let (record, version) = guard.clone();
        let mut record = RunRecord::clone(&record);
        record.owner = String::new();
        // No lease runs out: a worker of an earlier version (which does not know parked
        // runs) does not take it either.
        record.lease_until_ms = u64::MAX;
        if parked.reason == ParkReason::TooManyFailures {
            // Parked by the recovery that claimed it, before any handler ran: that claim
            // was no attempt.
            record.unbegin_attempt();
        } else {
            record.end_attempt(AttemptEnding::Parked, now_ms());
        }
        record.parked = Some(parked);
        match put_run(journal, &self.run_id, &record, version).await {
            Ok(_) => {
                let reason = record.parked.as_ref().map_or("", |p| p.reason.as_str());
                tracing::warn!(run = %self.run_id, reason, failures = record.failures, "parked a run for an operator");
                crate::metrics::parked(reason);
                true
            }
            Err(error) => {
                tracing::warn!(%error, run = %self.run_id, "could not park a run; recovery will");
                false
            }
        }
    }

    /// Whether an operator killed the run while it ran here ([`Journal::killed`]): then
    /// the steps this worker's handler committed after the kill, before it heard of it,
    /// are removed, as the kill removed the earlier ones.
    async fn ended_elsewhere(&self, journal: &Journal) -> bool {
        if !matches!(journal.killed(&self.run_id).await, Ok(true)) {
            return false;
        }
        if let Err(error) = journal
            .store()
            .delete_records(RecordKind::Step, &key::steps(&self.run_id))
            .await
        {
            tracing::warn!(%error, run = %self.run_id, "could not remove the steps of a killed run");
        }
        true
    }
}

/// What a held run shares with the heartbeat.
struct Beat {
    run_id: String,
    /// The record as last written and its version.
    shared: tokio::sync::Mutex<(Arc<RunRecord>, u64)>,
    lost: CancellationToken,
    cancelled: CancellationToken,
    /// Until when the lease is surely ours: the last successful renewal plus the lease.
    valid_until_ms: std::sync::atomic::AtomicU64,
    /// Set when the run stops renewing its lease (it ended, or gives the lease back).
    stopped: std::sync::atomic::AtomicBool,
    /// Set while a renewal of this run is under way (a slow store does not stack them).
    renewing: std::sync::atomic::AtomicBool,
}

/// The runs a worker holds, renewed by one heartbeat task for all of them: a run costs an
/// entry in a map, not a task and a timer of its own. The task runs while the worker
/// holds runs: it starts with the first and ends at a tick that finds none.
///
/// # Durability
/// In plain words: the same lease as one heartbeat per run (D7). Stated more precisely:
/// each tick (every third of the lease) renews every held run, each renewal in a task of
/// its own so that a slow store call for one run delays no other; a run registered
/// between two ticks is renewed at the next one, so within a third of the lease of its
/// start, as before. A run whose renewal conflicts (another worker took it over), or that
/// could not be renewed for a whole lease, is fenced: its `lost` token fires, and
/// [`Held::lease_valid`] reads the validity that only a successful renewal extends.
#[derive(Clone, Default)]
pub struct Heartbeats {
    inner: Arc<std::sync::Mutex<Beats>>,
}

#[derive(Default)]
struct Beats {
    next: u64,
    held: foldhash::HashMap<u64, Arc<Beat>>,
    ticking: bool,
}

impl Heartbeats {
    fn lock(&self) -> std::sync::MutexGuard<'_, Beats> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Register a held run; starts the heartbeat task if none runs.
    fn add(&self, journal: &Journal, beat: Arc<Beat>) -> u64 {
        let mut beats = self.lock();
        beats.next += 1;
        let slot = beats.next;
        beats.held.insert(slot, beat);
        if !beats.ticking {
            beats.ticking = true;
            tokio::spawn(tick(journal.clone(), self.clone()));
        }
        slot
    }

    fn remove(&self, slot: u64) {
        self.lock().held.remove(&slot);
    }

    /// The runs to renew now; `None` (and the task is to end) when there are none.
    fn due(&self) -> Option<Vec<Arc<Beat>>> {
        let mut beats = self.lock();
        // A run fenced by its last renewal is renewed no more.
        beats
            .held
            .retain(|_, beat| !beat.stopped.load(Ordering::SeqCst));
        if beats.held.is_empty() {
            beats.ticking = false;
            return None;
        }
        Some(
            beats
                .held
                .values()
                .filter(|beat| !beat.renewing.load(Ordering::SeqCst))
                .cloned()
                .collect(),
        )
    }

    /// Whether the heartbeat task runs (it runs while runs are held).
    pub fn ticking(&self) -> bool {
        self.lock().ticking
    }

    /// How many runs are held.
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }
}

/// The worker's heartbeat: every third of the lease, renew each held run.
async fn tick(journal: Journal, heartbeats: Heartbeats) {
    let lease = journal.lease;
    let mut ticker = tokio::time::interval(lease / 3);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let Some(due) = heartbeats.due() else { return };
        for beat in due {
            beat.renewing.store(true, Ordering::SeqCst);
            let journal = journal.clone();
            tokio::spawn(async move {
                renew(&journal, &beat, lease).await;
                beat.renewing.store(false, Ordering::SeqCst);
            });
        }
    }
}

/// Renew one run's lease; stop the run if another worker took it over, if it could not
/// be renewed for a whole lease, or if a client's cancellation was recorded for it (from
/// any worker).
async fn renew(journal: &Journal, beat: &Beat, lease: Duration) {
    let renewed = {
        let mut guard = beat.shared.lock().await;
        if beat.stopped.load(Ordering::SeqCst) {
            // The run ended (or gave its lease back) while this renewal waited.
            return;
        }
        let mut record = RunRecord::clone(&guard.0);
        record.lease_until_ms = now_ms() + ms(lease);
        let put = put_run(journal, &beat.run_id, &record, guard.1).await;
        if let Ok(version) = put {
            beat.valid_until_ms
                .store(record.lease_until_ms, Ordering::SeqCst);
            *guard = (Arc::new(record), version);
        }
        put
    };
    let run_id = &beat.run_id;
    match renewed {
        Ok(_) => {}
        Err(EngineError::Store(StoreError::Conflict { .. })) => {
            if let Ok(true) = journal.killed(run_id).await {
                tracing::warn!(run = %run_id, "an operator killed this run; stopping it here");
                crate::metrics::lease_lost("killed");
            } else {
                tracing::warn!(run = %run_id, "lease lost: another worker took this run over; stopping it here");
                crate::metrics::lease_lost("taken_over");
            }
            beat.stopped.store(true, Ordering::SeqCst);
            beat.lost.cancel();
            return;
        }
        Err(error) if now_ms() >= beat.valid_until_ms.load(Ordering::SeqCst) => {
            tracing::warn!(%error, run = %run_id, "lease expired without renewal; stopping the run here");
            crate::metrics::lease_lost("expired");
            beat.stopped.store(true, Ordering::SeqCst);
            beat.lost.cancel();
            return;
        }
        Err(error) => tracing::warn!(%error, run = %run_id, "could not renew a lease; retrying"),
    }
    if let Ok(true) = journal.cancelled_elsewhere(run_id).await {
        tracing::debug!(run = %run_id, "cancelled by the client through another worker");
        beat.cancelled.cancel();
    }
}

/// Write run record `record` over `version` (compare-and-set); the new version.
async fn put_run(
    journal: &Journal,
    run_id: &str,
    record: &RunRecord,
    version: u64,
) -> Result<u64, EngineError> {
    Ok(journal
        .store()
        .put_record(
            RecordKind::Run,
            run_id,
            record.encode()?,
            None,
            Expect::Version(version),
        )
        .await?)
}

/// How long the marks about a request outlive it: a session's request id pointing at its run
/// (re-sent requests attach), a cancellation recorded for a run elsewhere.
pub const MARK_TTL_MS: u64 = 24 * 3_600_000;

/// How long a stateless request waiting for input may be continued.
pub const STATE_TTL: Duration = Duration::from_secs(600);

/// What a sealed run state is bound to (D12): the principal, the method and the
/// request's parameters (without the state, the answers and `_meta`).
fn state_binding(principal: &Principal, request: &Request) -> Vec<u8> {
    let method = request.method();
    let mut params = request.params().cloned().unwrap_or_default();
    for key in ["requestState", "inputResponses", "_meta"] {
        params.remove(key);
    }
    format!(
        "durable-mcp/run\n{}\n{method}\n{}",
        principal.as_str(),
        canonical(&Value::Object(params))
    )
    .into_bytes()
}

/// The sealed `requestState` that lets a retry continue run `run_id`.
pub fn seal_run(
    keys: &StateKeys,
    run_id: &str,
    principal: &Principal,
    request: &Request,
) -> String {
    StateSealer::new(keys.clone()).seal(
        &json!({"run": run_id}),
        &state_binding(principal, request),
        STATE_TTL,
    )
}

/// Why a retry's sealed `requestState` does not continue a run (D12): the client's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateRefused {
    /// Tampered, foreign or expired state, or state sealed with a key no longer in use.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// Authentic state that names no run.
    #[error("invalid requestState: no run")]
    NoRun,
}

/// The run a retry's sealed `requestState` continues.
pub fn open_run(
    keys: &StateKeys,
    sealed: &str,
    principal: &Principal,
    request: &Request,
) -> Result<String, StateRefused> {
    let payload =
        StateSealer::new(keys.clone()).open(sealed, &state_binding(principal, request))?;
    payload
        .get("run")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or(StateRefused::NoRun)
}

/// Which runs a claim takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// One whose lease ran out, or this worker's own from before a restart.
    Expired,
    /// Also one given back, or this worker's and not running (a re-sent request found it).
    Resent,
    /// A parked one, whatever its lease.
    Parked,
}

/// The journal: this worker's view of the run records and their leases, and the heartbeat
/// of the runs it holds. Engine-wide state of its own: the worker's id and lease, when the
/// worker started, the held runs; everything else is in the store.
#[derive(Clone)]
pub struct Journal {
    events: Events,
    worker_id: String,
    lease: Duration,
    /// When this worker started: leases it grants end after `started_at_ms + lease`.
    started_at_ms: u64,
    /// The runs this worker holds, renewed by one shared heartbeat.
    heartbeats: Heartbeats,
}

impl Journal {
    /// The journal of worker `worker_id`, whose leases last `lease`, committing through
    /// `events`.
    pub fn new(events: Events, worker_id: String, lease: Duration) -> Self {
        Self {
            events,
            worker_id,
            lease,
            started_at_ms: now_ms(),
            heartbeats: Heartbeats::default(),
        }
    }

    fn store(&self) -> &Arc<dyn durable_mcp_store::Store> {
        self.events.store()
    }

    /// This worker's id, as leases and timelines name it.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// When this worker started (milliseconds since the epoch).
    pub fn started_at_ms(&self) -> u64 {
        self.started_at_ms
    }

    /// The runs this worker holds.
    pub fn heartbeats(&self) -> &Heartbeats {
        &self.heartbeats
    }

    /// The alias of a session's request id, if the id started a run: that run's stream, and
    /// which request started it (a re-send of that request attaches to it, D6; another
    /// request under the id is refused).
    pub async fn existing_run(
        &self,
        session: &SessionId,
        id: &RequestId,
    ) -> Result<Option<AliasRecord>, EngineError> {
        let key = key::alias(session, id);
        let Some(alias) = self.store().get_record(RecordKind::Alias, &key).await? else {
            return Ok(None);
        };
        Ok(Some(AliasRecord::decode(&key, &alias.value)?))
    }

    /// Give every committed step of `run_id` a new expiry (`None`: keep until the run
    /// ends): a stateless request continued by a retry, or turned into a task, keeps all
    /// its earlier steps, not only the ones of its last round.
    pub async fn refresh_steps(
        &self,
        run_id: &str,
        expires_at_ms: Option<u64>,
    ) -> Result<(), EngineError> {
        const MAX_STEPS: usize = 10_000;
        for record in self
            .store()
            .list_records(RecordKind::Step, &key::steps(run_id), MAX_STEPS)
            .await?
        {
            match self
                .store()
                .put_record(
                    RecordKind::Step,
                    &record.key,
                    record.value,
                    expires_at_ms,
                    Expect::Version(record.version),
                )
                .await
            {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }

    /// Record a client's cancellation of a run that does not run here: its worker's next
    /// heartbeat (within a third of the lease) cancels it (D11).
    pub async fn cancel_elsewhere(
        &self,
        session: &SessionId,
        id: &RequestId,
    ) -> Result<(), EngineError> {
        let Some(alias) = self.existing_run(session, id).await? else {
            return Ok(());
        };
        let run_id = key::run(&alias.stream);
        if self
            .store()
            .get_record(RecordKind::Run, &run_id)
            .await?
            .is_none()
        {
            return Ok(());
        }
        self.cancel_elsewhere_by_run(&run_id).await
    }

    /// Mark run `run_id` cancelled (its next recovery closes it instead of running it).
    pub async fn cancel_elsewhere_by_run(&self, run_id: &str) -> Result<(), EngineError> {
        self.put_cancel_mark(run_id, crate::records::MARK.into())
            .await
    }

    /// Write run `run_id`'s cancellation mark with `value`; a mark already there stays.
    async fn put_cancel_mark(&self, run_id: &str, value: String) -> Result<(), EngineError> {
        let expires = now_ms() + MARK_TTL_MS;
        match self
            .store()
            .put_record(
                RecordKind::Step,
                &key::cancel_mark(run_id),
                value,
                Some(expires),
                Expect::Absent,
            )
            .await
        {
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Whether a client's cancellation of run `run_id` was recorded (by any worker).
    pub async fn cancelled_elsewhere(&self, run_id: &str) -> Result<bool, EngineError> {
        Ok(self
            .store()
            .get_record(RecordKind::Step, &key::cancel_mark(run_id))
            .await?
            .is_some())
    }

    /// Commit an operator's `action` on a run, its audit record (kept
    /// [`ACTION_TTL_MS`](crate::records::ACTION_TTL_MS)); the action as committed (its time
    /// moved on by a millisecond if another action on the run has the same one).
    pub async fn record_action(&self, action: ActionRecord) -> Result<ActionRecord, EngineError> {
        let mut action = action;
        for _ in 0..16 {
            let expires = action.at_ms + crate::records::ACTION_TTL_MS;
            match self
                .store()
                .put_record(
                    RecordKind::Step,
                    &key::action(&action.run_id, action.at_ms),
                    action.encode()?,
                    Some(expires),
                    Expect::Absent,
                )
                .await
            {
                Ok(_) => return Ok(action),
                Err(StoreError::Conflict { .. }) => action.at_ms += 1,
                Err(error) => return Err(error.into()),
            }
        }
        Err(EngineError::Store(StoreError::Conflict {
            what: "the time of an operator action",
        }))
    }

    /// The operator actions on run `run_id`, oldest first.
    pub async fn actions(&self, run_id: &str) -> Result<Vec<ActionRecord>, EngineError> {
        const MAX_ACTIONS: usize = 1_000;
        self.store()
            .list_records(RecordKind::Step, &key::actions(run_id), MAX_ACTIONS)
            .await?
            .into_iter()
            .map(|record| Ok(ActionRecord::decode(&record.key, &record.value)?))
            .collect()
    }

    /// Whether an operator killed run `run_id`: its journal entry is gone and a kill of it
    /// is recorded. (An entry also goes when a run finishes, or when a stateless run waits
    /// for its client's answers with its steps kept: those are not kills.)
    pub async fn killed(&self, run_id: &str) -> Result<bool, EngineError> {
        if self
            .store()
            .get_record(RecordKind::Run, run_id)
            .await?
            .is_some()
        {
            return Ok(false);
        }
        Ok(self
            .actions(run_id)
            .await?
            .iter()
            .any(|action| action.action.ends_run()))
    }

    /// Mark run `run_id` cancelled by an operator's `action`: as a client's cancellation
    /// (its worker cancels it at its next heartbeat; recovery closes it instead of running
    /// it), with the action in the mark, so that the client's outcome says who did it.
    /// A run already marked cancelled keeps its mark.
    pub async fn cancel_by_operator(&self, action: &ActionRecord) -> Result<(), EngineError> {
        self.put_cancel_mark(&action.run_id, action.encode()?).await
    }

    /// The operator's action that cancelled run `run_id`, if an operator did (`None`: not
    /// cancelled, or cancelled by its client).
    pub async fn cancelled_by_operator(
        &self,
        run_id: &str,
    ) -> Result<Option<ActionRecord>, EngineError> {
        let key = key::cancel_mark(run_id);
        Ok(self
            .store()
            .get_record(RecordKind::Step, &key)
            .await?
            .and_then(|mark| ActionRecord::decode(&key, &mark.value).ok()))
    }

    /// Every journal entry (running here, elsewhere, or waiting for a worker). Usually one
    /// listing sees every entry; past `BATCH` live entries, run ids being hex, one listing
    /// per first digit keeps each bounded while all are looked at.
    pub async fn entries(&self) -> Result<Vec<Record>, EngineError> {
        const BATCH: usize = 1_000;
        let all = self
            .store()
            .list_records(RecordKind::Run, "", BATCH)
            .await?;
        if all.len() < BATCH {
            return Ok(all);
        }
        let mut entries = Vec::new();
        for prefix in "0123456789abcdef".chars() {
            entries.extend(
                self.store()
                    .list_records(RecordKind::Run, &prefix.to_string(), BATCH)
                    .await?,
            );
        }
        Ok(entries)
    }

    /// Take journal entry `record` over if it may be (D7): it is ours from before this
    /// process started (a lease this process granted or renewed ends after `started +
    /// lease`), or anyone's expired lease. The take-over is a compare-and-set from the
    /// version read, so one worker wins and the previous owner is fenced; `None`: not to
    /// be taken (a live lease, another worker was faster, or an undecodable entry, which is
    /// removed). The caller skips runs that run on this worker.
    pub async fn claim(&self, record: Record) -> Result<Option<Held>, EngineError> {
        self.claim_if(record, Claim::Expired).await
    }

    /// [`Journal::claim`] for a re-sent request that found its run journaled: also a run
    /// no live worker runs, whatever its lease says: one this worker owns and does not run
    /// (its first start failed on the store), or one given back for a later retry. A run
    /// another worker holds is not taken before its lease runs out: this worker cannot
    /// tell a live worker from a dead one before that. The caller skips runs that run here.
    pub async fn adopt(&self, record: Record) -> Result<Option<Held>, EngineError> {
        self.claim_if(record, Claim::Resent).await
    }

    /// [`Journal::claim`] for an entry the caller decoded already (`run`). A parked run is
    /// taken whatever its lease (its client is gone: it cancelled, its task or session
    /// ended, and it is to be cleaned up): parked runs are claimed only so.
    pub async fn claim_decoded(
        &self,
        record: Record,
        run: RunRecord,
    ) -> Result<Option<Held>, EngineError> {
        let how = if run.parked.is_some() {
            Claim::Parked
        } else {
            Claim::Expired
        };
        self.take(record, run, how).await
    }

    async fn claim_if(&self, record: Record, how: Claim) -> Result<Option<Held>, EngineError> {
        match RunRecord::decode(&record.key, &record.value) {
            Ok(run) => self.take(record, run, how).await,
            Err(error) => {
                tracing::error!(%error, run = %record.key, "undecodable journal entry; removing it");
                self.store()
                    .delete_records(RecordKind::Run, &record.key)
                    .await?;
                Ok(None)
            }
        }
    }

    /// Take journal entry `record` (decoded: `run`) over as `how` says.
    async fn take(
        &self,
        record: Record,
        mut run: RunRecord,
        how: Claim,
    ) -> Result<Option<Held>, EngineError> {
        let resent = how == Claim::Resent;
        let me = self.worker_id.clone();
        if run.parked.is_some() != (how == Claim::Parked) {
            return Ok(None); // a parked run is kept for an operator
        }
        let ours_from_before =
            run.owner == me && run.lease_until_ms < self.started_at_ms + ms(self.lease);
        // The caller checked that the run does not run here.
        let unrun = resent && (run.owner.is_empty() || run.owner == me);
        if !ours_from_before && !unrun && how != Claim::Parked && run.lease_until_ms > now_ms() {
            return Ok(None);
        }
        let previous_owner = std::mem::replace(&mut run.owner, me);
        if !previous_owner.is_empty() && !unrun {
            // Its worker died holding it (or was cut off for a whole lease): the attempt
            // ended without an outcome, and counts toward `max_attempts`, or a run that
            // kills every worker that runs it would be run forever.
            run.failures += 1;
            run.end_attempt(AttemptEnding::LeaseLost, now_ms());
        } else {
            run.end_attempt(AttemptEnding::HandedOver, now_ms());
        }
        run.lease_until_ms = now_ms() + ms(self.lease);
        run.attempt += 1;
        run.begin_attempt(&self.worker_id, now_ms());
        let version = match self
            .store()
            .put_record(
                RecordKind::Run,
                &record.key,
                run.encode()?,
                None,
                Expect::Version(record.version),
            )
            .await
        {
            Ok(version) => version,
            Err(StoreError::Conflict { .. }) => return Ok(None), // another worker was faster
            Err(error) => return Err(error.into()),
        };
        tracing::info!(run = %record.key, %previous_owner, attempt = run.attempt, resent, "taking over a run");
        crate::metrics::taken_over(match (ours_from_before, unrun) {
            (true, _) => "own",
            (false, true) => "resent",
            (false, false) => "expired",
        });
        Ok(Some(Held::start(self, record.key, run, version)))
    }

    /// The last JSON message of a stream, if any.
    pub async fn last_message(&self, stream: &StreamId) -> Result<Option<Value>, EngineError> {
        let mut after = 0;
        let mut last = None;
        loop {
            let read = match self.store().read_after(stream, after, 1_000).await {
                Ok(read) => read,
                Err(StoreError::NotFound { .. }) => return Ok(None),
                Err(StoreError::Pruned {
                    oldest_retained, ..
                }) => {
                    after = oldest_retained.saturating_sub(1);
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let Some(end) = read.events.last().map(|e| e.id.seq) else {
                return Ok(last);
            };
            for event in read.events {
                if let Ok(message) = serde_json::from_str::<Value>(&event.data) {
                    last = Some(message);
                }
            }
            after = end;
        }
    }

    /// Whether `stream` is closed (or gone).
    pub async fn stream_closed(&self, stream: &StreamId) -> Result<bool, EngineError> {
        // Read from the start: a closed stream ends with `finished`.
        let mut after = 0;
        loop {
            match self.store().read_after(stream, after, 1_000).await {
                Ok(read) => {
                    if read.finished {
                        return Ok(true);
                    }
                    match read.events.last() {
                        Some(last) => after = last.id.seq,
                        None => return Ok(false),
                    }
                }
                Err(StoreError::NotFound { .. }) => return Ok(true),
                Err(StoreError::Pruned {
                    oldest_retained, ..
                }) => after = oldest_retained.saturating_sub(1),
                Err(error) => return Err(error.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests;

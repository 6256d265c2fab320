//! GET streams of a session's standalone stream: each message on exactly one of them.
//!
//! Streamable HTTP ("Multiple Connections", 2025-03-26 .. 2025-11-25): a client may keep
//! several GET streams open on one session, and the server must send each message on only
//! one of them, never broadcast it. The session's standalone stream is one event log (what
//! `route_notification` writes); GET streams do not each tail it. Instead:
//!
//! - **One holder per session, in the store.** The session record's [`Delivery`] names the
//!   GET stream (of any worker) that delivers, and the sequence up to which events were
//!   handed out. Only the holder reads the log; before it hands an event to its connection
//!   it advances `delivered` with a compare-and-set naming itself as holder, so two GET
//!   streams (on any workers) never both hand out one event.
//! - **The newest GET takes over.** A client opens a new GET when it needs one (its old
//!   one may be dead behind a proxy), so a new GET becomes the holder and continues from
//!   `delivered`: what was committed while no stream held the delivery, or after the old
//!   holder dropped, is handed to it (nothing is lost, D3). The old holder stays open and
//!   idle: on this worker it is told at once; on another worker its next compare-and-set
//!   fails and it goes idle.
//! - **Idle GET streams cost nothing per message**: no tail, no wake-up, no read. They look
//!   at the store once per tick (the SSE keep-alive interval): if the holder released the
//!   delivery, or its worker died and its claim (four ticks, renewed while it holds) ran
//!   out, one of them takes over. On one worker, a holder that closes hands the delivery to
//!   the newest other GET stream of the session at once.
//! - **Resume** (`Last-Event-ID` on the standalone stream) takes over too, and replays the
//!   events after that id that the resumed connection had been given (the holding periods
//!   are kept in the delivery state), never those handed to another GET stream, then goes on
//!   live (D3).
//! - **Bound**: at most `max_per_session` GET streams per session on one worker; opening
//!   one more closes the oldest (never the one the client just opened). The closed stream
//!   holds nothing undelivered (it is idle), and its client may resume it.
//!
//! "Handed out" means given to the connection's response body: an event handed to a
//! connection that breaks is not handed out again to a plain GET, but resuming with the last
//! id the client saw replays it (D3).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_mcp_store::{
    Delivery, EventId, Principal, SessionChange, SessionId, SessionRecord, Store, StoreError,
    StoredEvent, StreamId, now_ms,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::{mpsc, watch};

use durable_mcp_protocol::McpVersion;

use crate::EngineError;
use crate::events::Events;

/// How many events one read fetches.
const BATCH: usize = 256;
/// Lost compare-and-set races a take-over retries (each loss means another GET stream's
/// change committed, so the session as a whole progresses).
const MAX_ATTEMPTS: u32 = 32;
/// The holder's claim lasts this many ticks without renewal.
const LEASE_TICKS: u32 = 4;

/// Settings of one GET stream.
#[derive(Debug, Clone, Copy)]
pub struct GetStreamSettings {
    /// How often the stream checks in with the store when it has nothing to deliver: the
    /// holder renews its claim (which lasts four ticks), an idle stream looks whether the
    /// holder went away.
    pub tick: Duration,
    /// GET streams of one session kept open on this worker (at least 1); opening one more
    /// closes the oldest.
    pub max_per_session: usize,
}

/// One GET stream of a session's standalone stream.
pub struct GetStream {
    /// Its events, in order, each committed before it is yielded (D1) and handed to no
    /// other GET stream. Ends when the stream is closed by the bound, when the session ends,
    /// or after an error item (the store failed).
    pub events: BoxStream<'static, Result<StoredEvent, StoreError>>,
    /// The priming event written for this GET (2025-11-25 sessions, plain GET), if any.
    pub priming: Option<EventId>,
}

impl std::fmt::Debug for GetStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetStream")
            .field("priming", &self.priming)
            .finish_non_exhaustive()
    }
}

/// What this worker tells one of its GET streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    /// Nothing yet.
    Opened,
    /// A newer GET stream of the session took the delivery over: stop reading.
    Idle,
    /// The holder on this worker closed: take the delivery over.
    Take,
    /// Over the bound: close.
    Close,
}

/// A session's GET streams on this worker, oldest first: their ids and signal channels.
type Entries = Vec<(String, watch::Sender<Signal>)>;

/// The GET streams open on this worker, per session.
#[derive(Default)]
struct Local {
    sessions: Mutex<HashMap<SessionId, Entries>>,
}

impl Local {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Entries>> {
        // Every mutation is a push, a removal or a send: a panic cannot leave it half-done.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register a new GET stream: the others go idle, the oldest beyond `max` close.
    fn open(&self, session: &SessionId, conn: &str, max: usize) -> watch::Receiver<Signal> {
        let (tx, rx) = watch::channel(Signal::Opened);
        let mut sessions = self.lock();
        let entries = sessions.entry(session.clone()).or_default();
        for (_, other) in entries.iter() {
            other.send_replace(Signal::Idle);
        }
        let excess = (entries.len() + 1).saturating_sub(max.max(1));
        for (old, signal) in entries.drain(..excess) {
            tracing::debug!(%session, get = %old, "too many GET streams on this session; closing the oldest");
            signal.send_replace(Signal::Close);
        }
        entries.push((conn.to_owned(), tx));
        rx
    }

    /// Forget a GET stream that ended; if it held the delivery, tell the newest other GET
    /// stream of the session here to take it over. Returns whether one was told.
    fn close(&self, session: &SessionId, conn: &str, held: bool) -> bool {
        let mut sessions = self.lock();
        let Some(entries) = sessions.get_mut(session) else {
            return false;
        };
        entries.retain(|(c, _)| c != conn);
        let successor = if held {
            entries
                .last()
                .map(|(_, s)| s.send_replace(Signal::Take))
                .is_some()
        } else {
            false
        };
        if entries.is_empty() {
            sessions.remove(session);
        }
        successor
    }

    /// How many GET streams are open here (all sessions).
    fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    /// How many sessions have an entry here.
    #[cfg(test)]
    fn sessions(&self) -> usize {
        self.lock().len()
    }
}

/// The GET streams of this worker: each hands the events of its session's standalone
/// stream on to its client, one GET stream of the session at a time. Cheap to clone.
#[derive(Clone)]
pub(crate) struct GetStreams {
    events: Events,
    local: Arc<Local>,
}

impl GetStreams {
    /// The GET streams of the store behind `events`.
    pub(crate) fn new(events: Events) -> Self {
        Self {
            events,
            local: Arc::default(),
        }
    }

    /// How many sessions have GET streams here.
    #[cfg(test)]
    pub(crate) fn sessions(&self) -> usize {
        self.local.sessions()
    }

    /// [`Engine::open_get_stream`](crate::Engine::open_get_stream), whose docs say what it
    /// guarantees; the hand-over rules are in the module docs.
    pub(crate) async fn open(
        &self,
        session: &SessionRecord,
        resume_after: Option<u64>,
        settings: GetStreamSettings,
    ) -> Result<GetStream, EngineError> {
        let stream = session.standalone_stream.clone();
        // A session stored before delivery was tracked starts at the end of its stream.
        let untracked_end = match session.delivery {
            Some(_) => 0,
            None => self.last_seq(&stream).await?,
        };
        let primed = session.protocol_version.parse::<McpVersion>()? >= McpVersion::V2025_11_25;
        let priming = match resume_after {
            None if primed => Some(self.events.append(&stream, String::new(), false).await?),
            _ => None,
        };
        let conn = StreamId::random().to_string();
        let signals = self
            .local
            .open(&session.id, &conn, settings.max_per_session);
        let (tx, rx) = mpsc::channel(1);
        let mut feed = Feed {
            streams: self.clone(),
            principal: session.principal.clone(),
            session: session.id.clone(),
            stream,
            conn,
            untracked_end,
            lease: settings.tick * LEASE_TICKS,
            tick: settings.tick,
            known: None,
            pos: 0,
            replay: None,
            priming: priming.clone(),
            buffered: VecDeque::new(),
            tx,
            signals,
        };
        let mode = match feed.take(resume_after).await {
            Ok(true) => Mode::Holding,
            // A newer GET stream of the session opened here meanwhile and holds the delivery.
            Ok(false) => Mode::Idle,
            Err(error) => {
                self.local.close(&feed.session, &feed.conn, false);
                return Err(match error {
                    StoreError::NotFound { .. } => EngineError::SessionNotFound,
                    other => other.into(),
                });
            }
        };
        tokio::spawn(feed.run(mode));
        let events = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(GetStream {
            events: events.boxed(),
            priming,
        })
    }

    /// How many GET streams are open on this worker.
    pub(crate) fn len(&self) -> usize {
        self.local.len()
    }

    /// The sequence of the last committed event of `stream` (0 when empty).
    async fn last_seq(&self, stream: &StreamId) -> Result<u64, StoreError> {
        let mut after = 0;
        loop {
            let read = match self.events.store().read_after(stream, after, 1024).await {
                Ok(read) => read,
                // Retention dropped the oldest events: continue from the oldest kept one.
                Err(StoreError::Pruned {
                    oldest_retained, ..
                }) if oldest_retained > after + 1 => {
                    after = oldest_retained - 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match read.events.last() {
                Some(last) => after = last.id.seq,
                None => return Ok(after),
            }
        }
    }
}

/// Whether the feed delivers, or waits to be handed the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Holding,
    Idle,
}

/// Why a feed ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its connection went away, or it was closed over the bound.
    Closed,
    /// The session or its stream is gone, or the store failed.
    Gone,
}

/// The task behind one GET stream.
struct Feed {
    streams: GetStreams,
    principal: Principal,
    session: SessionId,
    stream: StreamId,
    /// This GET stream's id in the delivery state.
    conn: String,
    /// Where delivery starts for a session stored before delivery was tracked.
    untracked_end: u64,
    lease: Duration,
    tick: Duration,
    /// The delivery state as this feed last wrote or read it (the compare-and-set basis).
    known: Option<Delivery>,
    /// The last sequence read (delivered, replayed or skipped).
    pos: u64,
    /// While resuming: the state before the take-over, and the connection whose events are
    /// replayed (`None`: all of them, the resumed id is older than the remembered epochs).
    replay: Option<(Delivery, Option<String>)>,
    priming: Option<EventId>,
    buffered: VecDeque<StoredEvent>,
    tx: mpsc::Sender<Result<StoredEvent, StoreError>>,
    signals: watch::Receiver<Signal>,
}

impl Feed {
    fn store(&self) -> &Arc<dyn Store> {
        self.streams.events.store()
    }

    async fn load(&self) -> Result<Option<Delivery>, StoreError> {
        Ok(self
            .store()
            .load_session(&self.principal, &self.session)
            .await?
            .delivery)
    }

    /// Write `value` if the delivery state is still `known`.
    async fn compare_and_set(&mut self, value: Delivery) -> Result<bool, StoreError> {
        let change = SessionChange::CompareAndSetDelivery {
            expected: self.known.clone(),
            value: value.clone(),
        };
        match self
            .store()
            .update_session(&self.principal, &self.session, change)
            .await
        {
            Ok(_) => {
                self.known = Some(value);
                Ok(true)
            }
            Err(StoreError::Conflict { .. }) => {
                self.known = self.load().await?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn holds(&self) -> bool {
        self.known.as_ref().and_then(|d| d.holder.as_deref()) == Some(self.conn.as_str())
    }

    /// Whether a newer GET stream of the session on this worker superseded this one since
    /// the feed last looked at its signals (it was told to go idle, or to close).
    fn superseded(&self) -> bool {
        self.signals.has_changed().unwrap_or(true)
            && matches!(*self.signals.borrow(), Signal::Idle | Signal::Close)
    }

    /// Take the delivery over; a resume starts at `resume_after`. `false`: a newer GET
    /// stream of the session opened on this worker meanwhile, and this one leaves the
    /// delivery to it.
    ///
    /// A lost compare-and-set is retried only while nothing newer opened here: otherwise
    /// the retry would take the delivery back from the newer stream, which then goes idle
    /// at its next claim while this one goes idle on its signal, and the session's messages
    /// would wait for an idle stream's tick.
    async fn take(&mut self, resume_after: Option<u64>) -> Result<bool, StoreError> {
        self.known = self.load().await?;
        for _ in 0..MAX_ATTEMPTS {
            if self.superseded() {
                tracing::debug!(session = %self.session, get = %self.conn, "a newer GET stream opened here; leaving the delivery to it");
                return Ok(false);
            }
            let base = self.known.clone().unwrap_or_else(|| Delivery {
                delivered: self.untracked_end,
                ..Delivery::default()
            });
            let lease_until =
                now_ms().saturating_add(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX));
            if self
                .compare_and_set(base.held_by(&self.conn, lease_until))
                .await?
            {
                self.buffered.clear();
                match resume_after {
                    Some(after) => {
                        self.pos = after.min(base.delivered);
                        let by = base.delivered_by(after).map(str::to_owned);
                        self.replay = Some((base, by));
                    }
                    None => {
                        self.pos = base.delivered;
                        self.replay = None;
                    }
                }
                tracing::debug!(session = %self.session, get = %self.conn, from = self.pos, "GET stream took the delivery over");
                return Ok(true);
            }
        }
        Err(StoreError::Conflict {
            what: "session delivery",
        })
    }

    /// Record events up to `seq` as handed out; `false` if another GET stream holds the
    /// delivery now.
    async fn claim(&mut self, seq: u64, lease_until_ms: Option<u64>) -> Result<bool, StoreError> {
        loop {
            let Some(mut value) = self.known.clone().filter(|_| self.holds()) else {
                return Ok(false);
            };
            value.delivered = value.delivered.max(seq);
            if let Some(until) = lease_until_ms {
                value.lease_until_ms = until;
            }
            if self.compare_and_set(value).await? {
                return Ok(true);
            }
        }
    }

    /// Give the delivery back (no other GET stream here takes it).
    async fn release(&mut self) -> Result<(), StoreError> {
        while let Some(mut value) = self.known.clone().filter(|_| self.holds()) {
            value.holder = None;
            value.lease_until_ms = 0;
            if self.compare_and_set(value).await? {
                break;
            }
        }
        Ok(())
    }

    fn lease_until(&self) -> u64 {
        now_ms().saturating_add(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX))
    }

    async fn run(mut self, mut mode: Mode) {
        let end = loop {
            let step = match mode {
                Mode::Holding => self.hold().await,
                Mode::Idle => self.idle().await,
            };
            match step {
                Ok(next) => mode = next,
                Err(end) => break end,
            }
        };
        let held = mode == Mode::Holding && self.holds();
        let handed_on = self.streams.local.close(&self.session, &self.conn, held);
        if held
            && !handed_on
            && end == End::Closed
            && let Err(error) = self.release().await
        {
            tracing::debug!(%error, session = %self.session, "could not release the delivery; it frees up when its claim runs out");
        }
        tracing::debug!(session = %self.session, get = %self.conn, ?end, "GET stream ended");
    }

    /// Handle a signal from this worker: the next mode, or the end.
    async fn on_signal(&mut self, mode: Mode) -> Result<Mode, End> {
        let signal = *self.signals.borrow_and_update();
        match (signal, mode) {
            (Signal::Close, _) => Err(End::Closed),
            (Signal::Idle, _) => {
                self.buffered.clear();
                Ok(Mode::Idle)
            }
            (Signal::Take, Mode::Idle) => match self.take(None).await {
                Ok(true) => Ok(Mode::Holding),
                Ok(false) => Ok(Mode::Idle),
                Err(error) => self.failed(error).await,
            },
            (Signal::Take | Signal::Opened, mode) => Ok(mode),
        }
    }

    /// The store failed (or the session is gone): end the stream, with the error for the
    /// connection unless the session simply ended.
    async fn failed(&mut self, error: StoreError) -> Result<Mode, End> {
        if !matches!(error, StoreError::NotFound { .. }) {
            tracing::warn!(%error, session = %self.session, "GET stream failed");
            let _ = self.tx.send(Err(error)).await;
        }
        Err(End::Gone)
    }

    /// Deliver until the delivery is lost (idle) or the stream ends.
    async fn hold(&mut self) -> Result<Mode, End> {
        let mut wake = match self.store().watch(&self.stream).await {
            Ok(wake) => wake,
            Err(error) => return self.failed(error).await,
        };
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + self.tick, self.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ending = false;
        loop {
            if self.buffered.is_empty() {
                match self.store().read_after(&self.stream, self.pos, BATCH).await {
                    Ok(read) => {
                        if read.events.is_empty() && (read.finished || ending) {
                            return Err(End::Gone);
                        }
                        self.buffered.extend(read.events);
                    }
                    Err(StoreError::Pruned {
                        oldest_retained, ..
                    }) if oldest_retained > self.pos + 1 => {
                        tracing::warn!(session = %self.session, lost = oldest_retained - self.pos - 1, "standalone events pruned by retention before any GET stream received them (D14)");
                        self.pos = oldest_retained - 1;
                        continue;
                    }
                    Err(error) => return self.failed(error).await,
                }
            }
            if let Some(event) = self.buffered.pop_front() {
                if !self.wanted(&event) {
                    self.pos = event.id.seq;
                    continue;
                }
                let permit = tokio::select! {
                    permit = self.tx.clone().reserve_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => return Err(End::Closed),
                    },
                    changed = self.signals.changed() => {
                        self.buffered.push_front(event);
                        if changed.is_err() {
                            return Err(End::Closed);
                        }
                        match self.on_signal(Mode::Holding).await? {
                            Mode::Holding => continue,
                            Mode::Idle => return Ok(Mode::Idle),
                        }
                    }
                };
                let replayed = self
                    .replay
                    .as_ref()
                    .is_some_and(|(base, _)| event.id.seq <= base.delivered);
                if !replayed {
                    match self.claim(event.id.seq, None).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::debug!(session = %self.session, get = %self.conn, "another GET stream took the delivery over");
                            self.buffered.clear();
                            return Ok(Mode::Idle);
                        }
                        Err(error) => return self.failed(error).await,
                    }
                }
                self.pos = event.id.seq;
                permit.send(Ok(event));
                continue;
            }
            tokio::select! {
                next = wake.next() => if next.is_none() {
                    // The stream is gone (its session ended): one last read decides.
                    ending = true;
                },
                () = self.tx.closed() => return Err(End::Closed),
                changed = self.signals.changed() => {
                    if changed.is_err() {
                        return Err(End::Closed);
                    }
                    if self.on_signal(Mode::Holding).await? == Mode::Idle {
                        return Ok(Mode::Idle);
                    }
                }
                _ = ticker.tick() => {
                    let renew = self.known.as_ref().is_some_and(|d| d.lease_until_ms < now_ms().saturating_add(u64::try_from(self.lease.as_millis() / 2).unwrap_or(u64::MAX)));
                    if renew {
                        match self.claim(self.known.as_ref().map_or(0, |d| d.delivered), Some(self.lease_until())).await {
                            Ok(true) => {}
                            Ok(false) => return Ok(Mode::Idle),
                            Err(error) => return self.failed(error).await,
                        }
                    }
                }
            }
        }
    }

    /// Whether `event` goes on this connection: a replayed event only if this connection
    /// had received it; priming events only this GET's own.
    fn wanted(&self, event: &StoredEvent) -> bool {
        if let Some((base, by)) = &self.replay
            && event.id.seq <= base.delivered
        {
            return by.is_none() || base.delivered_by(event.id.seq) == by.as_deref();
        }
        !event.data.is_empty() || self.priming.as_ref() == Some(&event.id)
    }

    /// Wait to be handed the delivery (or to find it free), or for the end.
    async fn idle(&mut self) -> Result<Mode, End> {
        let mut ticker =
            tokio::time::interval_at(tokio::time::Instant::now() + self.tick, self.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.tx.closed() => return Err(End::Closed),
                changed = self.signals.changed() => {
                    if changed.is_err() {
                        return Err(End::Closed);
                    }
                    if self.on_signal(Mode::Idle).await? == Mode::Holding {
                        return Ok(Mode::Holding);
                    }
                }
                _ = ticker.tick() => {
                    // Free: nobody holds it, the holder's claim ran out, or the store still
                    // names this stream (the newer GET that made it idle went away).
                    let free = match self.load().await {
                        Ok(delivery) => delivery.is_none_or(|d| match d.holder.as_deref() {
                            None => true,
                            Some(holder) => holder == self.conn || d.lease_until_ms < now_ms(),
                        }),
                        Err(error) => return self.failed(error).await,
                    };
                    if free {
                        match self.take(None).await {
                            Ok(true) => return Ok(Mode::Holding),
                            Ok(false) => {}
                            Err(error) => return self.failed(error).await,
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "getstream_tests.rs"]
mod tests;

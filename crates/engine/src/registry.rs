//! The runs in flight on this worker: for cancellation, for routing replies to a handler's
//! own requests, for recovery (which skips runs executing here) and for the drain.
//!
//! The registry owns its state; the request path reaches it only through these methods.

use foldhash::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use durable_mcp_protocol::jsonrpc::RequestId;
use durable_mcp_store::SessionId;
use tokio_util::sync::CancellationToken;

use crate::gate::Gate;
use crate::sync::lock;

/// Runs in flight on this worker.
#[derive(Default)]
pub(crate) struct Registry {
    /// Runs of a session's requests (not tasks), by [`run_key`]: what
    /// `notifications/cancelled` and the end of a session cancel.
    runs: Mutex<HashMap<String, SessionRun>>,
    /// Journaled runs executing here, by run id, with the generation of their
    /// registration (a retry may register the same run id before the last one is gone).
    journaled: Mutex<HashMap<String, (u64, CancellationToken)>>,
    /// The last registration generation handed out.
    generation: AtomicU64,
    /// Set by the drain: runs stopped now give their leases back.
    releasing: AtomicBool,
    in_flight: AtomicUsize,
}

/// A session's request running here: what stops it, and, for a new journaled run whose
/// first commit is not done yet, the gate its effects wait on.
#[derive(Clone)]
pub(crate) struct SessionRun {
    pub cancel: CancellationToken,
    pub gate: Option<Gate>,
}

/// The key of a session's request among [`Registry`]'s runs.
fn run_key(session: &SessionId, id: &RequestId) -> String {
    use std::fmt::Write as _;
    let mut key = String::with_capacity(session.as_str().len() + 24);
    key.push_str(session.as_str());
    key.push('/');
    // Writing into a String cannot fail.
    let _ = write!(key, "{id}");
    key
}

impl Registry {
    /// A session's request started here; `run.cancel` stops it.
    pub(crate) fn add_session_run(&self, session: &SessionId, id: &RequestId, run: SessionRun) {
        lock(&self.runs).insert(run_key(session, id), run);
    }

    /// Claim a session's request id for a run starting here, unless a run of that id runs
    /// here already: then that run.
    pub(crate) fn claim_session_run(
        &self,
        session: &SessionId,
        id: &RequestId,
        run: SessionRun,
    ) -> Result<(), SessionRun> {
        match lock(&self.runs).entry(run_key(session, id)) {
            std::collections::hash_map::Entry::Occupied(running) => Err(running.get().clone()),
            std::collections::hash_map::Entry::Vacant(free) => {
                free.insert(run);
                Ok(())
            }
        }
    }

    /// A session's request ended here.
    pub(crate) fn remove_session_run(&self, session: &SessionId, id: &RequestId) {
        lock(&self.runs).remove(&run_key(session, id));
    }

    /// A session's request running here, if it does.
    pub(crate) fn session_run(&self, session: &SessionId, id: &RequestId) -> Option<SessionRun> {
        lock(&self.runs).get(&run_key(session, id)).cloned()
    }

    /// Cancel every run of `session` here (it ended).
    pub(crate) fn cancel_session(&self, session: &SessionId) {
        let prefix = format!("{session}/");
        for (key, run) in lock(&self.runs).iter() {
            if key.starts_with(&prefix) {
                run.cancel.cancel();
            }
        }
    }

    /// Whether no session's request runs here.
    #[cfg(test)]
    pub(crate) fn no_session_runs(&self) -> bool {
        lock(&self.runs).is_empty()
    }

    /// Whether the journaled run `run_id` executes here.
    pub(crate) fn is_running(&self, run_id: &str) -> bool {
        lock(&self.journaled).contains_key(run_id)
    }

    /// Register a journaled run executing here (stopped with `stop` by the drain); returns
    /// the registration's generation.
    pub(crate) fn register_journaled(&self, run_id: &str, stop: CancellationToken) -> u64 {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        lock(&self.journaled).insert(run_id.to_owned(), (generation, stop));
        generation
    }

    /// Forget a registration, unless the run id was registered again since.
    pub(crate) fn unregister_journaled(&self, run_id: &str, generation: u64) {
        let mut journaled = lock(&self.journaled);
        if journaled
            .get(run_id)
            .is_some_and(|(registered, _)| *registered == generation)
        {
            journaled.remove(run_id);
        }
    }

    /// The stop tokens of the journaled runs executing here.
    pub(crate) fn journaled_stops(&self) -> Vec<CancellationToken> {
        lock(&self.journaled)
            .values()
            .map(|(_, stop)| stop.clone())
            .collect()
    }

    /// Whether no journaled run executes here.
    pub(crate) fn no_journaled_runs(&self) -> bool {
        lock(&self.journaled).is_empty()
    }

    /// From now on, runs stopped give their leases back (the drain).
    pub(crate) fn start_releasing(&self) {
        self.releasing.store(true, Ordering::SeqCst);
    }

    /// Whether runs stopped now give their leases back.
    pub(crate) fn releasing(&self) -> bool {
        self.releasing.load(Ordering::SeqCst)
    }

    /// A request started running here.
    pub(crate) fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    /// A request stopped running here.
    pub(crate) fn finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// How many requests run here.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}

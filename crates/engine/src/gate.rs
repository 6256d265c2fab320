//! The gate of a new journaled run: its effects (a durable step, a question, a message to
//! the client) wait until the request's first commit is done, which they ask for (D6,
//! "journaled before its first effect"). The pump holds the keeper; the durable context,
//! the run's outbox and the registry (for a re-sent request id) hold the gate.

use std::sync::Arc;

use crate::EngineError;

/// Where a new run's journal entry stands while its first commit waits for the handler's
/// first effect or outcome (see `Requests::accept_journaled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Not committed yet.
    Pending,
    /// The request's first commit is done (its journal entry, or its outcome): effects may
    /// go on.
    Committed,
    /// Never to be committed (the request id was already taken, or the commit failed).
    Abandoned,
}

/// What a run's effects wait on before they happen: its journal entry, committed (D6).
/// An effect asks for the entry (the pump commits it at once) and waits for it.
#[derive(Clone)]
pub(crate) struct Gate {
    entry: tokio::sync::watch::Receiver<Entry>,
    wanted: Arc<tokio::sync::Notify>,
}

/// The pump's side of a [`Gate`].
pub(crate) struct GateKeeper {
    entry: tokio::sync::watch::Sender<Entry>,
    wanted: Arc<tokio::sync::Notify>,
}

/// A gate, pending, and its keeper.
pub(crate) fn gate() -> (Gate, GateKeeper) {
    let (sender, entry) = tokio::sync::watch::channel(Entry::Pending);
    let wanted = Arc::new(tokio::sync::Notify::new());
    (
        Gate {
            entry,
            wanted: wanted.clone(),
        },
        GateKeeper {
            entry: sender,
            wanted,
        },
    )
}

impl Gate {
    /// Wait until the run's journal entry is committed, asking for it first.
    pub(crate) async fn journaled(&self) -> Result<(), EngineError> {
        let mut entry = self.entry.clone();
        if *entry.borrow() == Entry::Pending {
            self.wanted.notify_one();
        }
        match entry.wait_for(|entry| *entry != Entry::Pending).await {
            Ok(entry) if *entry == Entry::Committed => Ok(()),
            _ => Err(EngineError::RunEnded),
        }
    }
}

impl GateKeeper {
    /// An effect asked for the journal entry.
    pub(crate) async fn wanted(&self) {
        self.wanted.notified().await;
    }

    /// The entry is committed, or will never be.
    pub(crate) fn settle(&self, entry: Entry) {
        self.entry.send_replace(entry);
    }
}

impl Drop for GateKeeper {
    fn drop(&mut self) {
        // A pump that ends with its entry still pending never commits it.
        self.entry.send_if_modified(|entry| {
            let pending = *entry == Entry::Pending;
            if pending {
                *entry = Entry::Abandoned;
            }
            pending
        });
    }
}

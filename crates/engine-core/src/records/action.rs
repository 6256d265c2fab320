//! What an operator did to a run (`durable-mcp runs cancel|kill|retry|purge`): who, when, why. It is
//! committed before the action takes effect, so any worker obeys it and it survives
//! restarts, and it stays as the run's audit trail for [`ACTION_TTL_MS`].

use durable_mcp_store::{Expect, RecordKind, WriteBatch};
use serde::{Deserialize, Serialize};

use super::RecordError;

/// How long an operator's action is kept after it was taken.
pub const ACTION_TTL_MS: u64 = 7 * 24 * 3_600_000;

/// What an operator can do to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// Cooperative: the handler sees cancellation, and the client gets an error outcome
    /// that says an operator cancelled it.
    Cancel,
    /// At once: a terminal error outcome is committed and the run's lease fenced, so the
    /// handler of a live worker commits nothing more.
    Kill,
    /// A parked run is given back to the workers, its committed steps kept.
    Retry,
    /// As a kill, for a run picked by `runs purge` (a parked one, say).
    Purge,
}

impl ActionKind {
    /// Its name, as stored and printed.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Cancel => "cancel",
            ActionKind::Kill => "kill",
            ActionKind::Retry => "retry",
            ActionKind::Purge => "purge",
        }
    }

    /// Whether the action ends the run at once (its journal entry goes with it).
    pub fn ends_run(self) -> bool {
        matches!(self, ActionKind::Kill | ActionKind::Purge)
    }
}

/// One operator action on one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// What was done.
    pub action: ActionKind,
    /// The run it was done to.
    pub run_id: String,
    /// Who did it, as the operator gave it (`--by`, else the user running the command).
    pub by: String,
    /// Why, as the operator gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When (milliseconds since the epoch).
    pub at_ms: u64,
}

impl ActionRecord {
    /// The value the store keeps.
    pub fn encode(&self) -> Result<String, RecordError> {
        super::encode(RecordKind::Step, self)
    }

    /// `batch` with this action written under its run and time (the first write wins: an
    /// action of the same millisecond makes the batch conflict).
    pub fn put_in(&self, batch: WriteBatch) -> Result<WriteBatch, RecordError> {
        Ok(batch.put_record(
            RecordKind::Step,
            super::key::action(&self.run_id, self.at_ms),
            self.encode()?,
            Some(self.at_ms + ACTION_TTL_MS),
            Expect::Absent,
        ))
    }

    /// The action stored under `key`.
    pub fn decode(key: &str, value: &str) -> Result<Self, RecordError> {
        super::decode(RecordKind::Step, key, value)
    }

    /// What the client of the run reads in its error outcome.
    pub fn message(&self) -> String {
        let verb = match self.action {
            ActionKind::Cancel => "cancelled",
            ActionKind::Kill => "killed",
            ActionKind::Retry => "retried",
            ActionKind::Purge => "purged",
        };
        match &self.reason {
            Some(reason) => format!("the request was {verb} by an operator: {reason}"),
            None => format!("the request was {verb} by an operator"),
        }
    }
}

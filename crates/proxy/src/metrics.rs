//! The proxy's metrics (`durable_mcp.proxy.*`), recorded through the [`metrics`] facade into
//! whatever recorder the process installed (the facade crate's Prometheus recorder, for
//! `durable-mcp proxy --metrics-listen ADDR`). Every name, its type, labels and meaning is
//! in `docs/metrics.md`.
//!
//! Off by default, like the engine's (`durable_mcp_engine::metrics`): nothing is recorded
//! until [`enable`] is called, and each recording function checks [`enabled`] first. The
//! flag is this crate's own because the proxy does not depend on the engine; call
//! [`enable`] after installing the recorder and before [`crate::Proxy::start`], so that the
//! first child is counted.

use std::sync::atomic::{AtomicBool, Ordering};

use ::metrics::{Unit, counter, describe_counter, describe_gauge, gauge};

use crate::policy::Resend;

/// Upstream processes running on this worker (gauge).
pub const CHILDREN_LIVE: &str = "durable_mcp.proxy.children.live";
/// Upstream processes started and initialized (counter), by `reason` ([`Start`]).
pub const CHILDREN_STARTED: &str = "durable_mcp.proxy.children.started";
/// Upstream processes that could not be started or did not initialize (counter).
pub const CHILDREN_FAILED_STARTS: &str = "durable_mcp.proxy.children.failed_starts";
/// Upstream processes that ended (counter), by `cause` ([`Stop`]).
pub const CHILDREN_STOPPED: &str = "durable_mcp.proxy.children.stopped";
/// Requests sent again to a fresh process (counter), by `after` ([`Interruption`]) and
/// `policy` (the [`Resend`] that allowed it).
pub const REQUESTS_RESENT: &str = "durable_mcp.proxy.requests.resent";
/// Requests answered with the "interrupted, not retried" error (counter), by `cause`.
pub const REQUESTS_INTERRUPTED: &str = "durable_mcp.proxy.requests.interrupted";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turn the proxy's recording on for the process, and describe its metrics to the recorder
/// installed now.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
    describe_gauge!(
        CHILDREN_LIVE,
        Unit::Count,
        "Upstream processes running on this worker."
    );
    describe_counter!(
        CHILDREN_STARTED,
        Unit::Count,
        "Upstream processes started and initialized, by reason."
    );
    describe_counter!(
        CHILDREN_FAILED_STARTS,
        Unit::Count,
        "Upstream processes that could not be started or did not initialize."
    );
    describe_counter!(
        CHILDREN_STOPPED,
        Unit::Count,
        "Upstream processes that ended, by cause."
    );
    describe_counter!(
        REQUESTS_RESENT,
        Unit::Count,
        "Requests sent again to a fresh upstream process, by what interrupted them and the policy that allowed it."
    );
    describe_counter!(
        REQUESTS_INTERRUPTED,
        Unit::Count,
        "Requests answered with the interrupted-not-retried error (-32030), by cause."
    );
}

/// Whether [`enable`] was called.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Why a child was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Its key had no child: the pool at start, a session's first request on this worker,
    /// or after the proxy stopped the key's child (idle, limit).
    New,
    /// The key's previous child exited or was killed without the proxy asking.
    Restart,
}

/// Why a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The proxy stopped it: idle for `--idle-stop-secs`.
    Idle,
    /// The proxy stopped it to make room (`--max-children`).
    Limit,
    /// The proxy stopped it at shutdown.
    Shutdown,
    /// It exited by itself (or closed its stdout).
    Exited,
    /// A signal the proxy did not send ended it (SIGKILL by an operator, the OOM killer).
    Killed,
}

impl Stop {
    fn as_str(self) -> &'static str {
        match self {
            Stop::Idle => "idle",
            Stop::Limit => "limit",
            Stop::Shutdown => "shutdown",
            Stop::Exited => "exited",
            Stop::Killed => "killed",
        }
    }
}

/// What interrupted a request before its upstream answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interruption {
    /// Its upstream process ended.
    ChildExited,
    /// The worker forwarding it stopped (the engine runs it again on a worker, attempt 2+).
    WorkerStopped,
    /// An HTTP upstream's answer did not come (the connection or its stream broke).
    AnswerLost,
}

impl Interruption {
    fn as_str(self) -> &'static str {
        match self {
            Interruption::ChildExited => "child_exited",
            Interruption::WorkerStopped => "worker_stopped",
            Interruption::AnswerLost => "answer_lost",
        }
    }
}

/// The `policy` label of a re-send.
fn policy_label(resend: Resend) -> &'static str {
    match resend {
        Resend::ReadMethod => "read_method",
        Resend::ReadOnlyTool => "read_only_tool",
        Resend::IdempotentTool => "idempotent_tool",
        Resend::Configured => "configured",
        Resend::Unsafe => "unsafe",
    }
}

/// A child was started and initialized: counted, and held in [`CHILDREN_LIVE`] until the
/// returned guard drops (when it ends, see [`stopped`]).
pub(crate) fn started(reason: Start) -> Option<LiveChild> {
    enabled().then(|| {
        let reason = match reason {
            Start::New => "new",
            Start::Restart => "restart",
        };
        counter!(CHILDREN_STARTED, "reason" => reason).increment(1);
        gauge!(CHILDREN_LIVE).increment(1.0);
        LiveChild(())
    })
}

/// Holds one child in [`CHILDREN_LIVE`] until dropped.
#[derive(Debug)]
pub(crate) struct LiveChild(());

impl Drop for LiveChild {
    fn drop(&mut self) {
        gauge!(CHILDREN_LIVE).decrement(1.0);
    }
}

/// A child counted by [`started`] ended: its guard is released here.
pub(crate) fn stopped(live: LiveChild, cause: Stop) {
    counter!(CHILDREN_STOPPED, "cause" => cause.as_str()).increment(1);
    drop(live);
}

/// A child could not be started, or did not initialize.
pub(crate) fn failed_start() {
    if enabled() {
        counter!(CHILDREN_FAILED_STARTS).increment(1);
    }
}

/// A request is sent again to a fresh child after `after`, as `policy` allows.
pub(crate) fn resent(after: Interruption, policy: Resend) {
    if enabled() {
        counter!(REQUESTS_RESENT, "after" => after.as_str(), "policy" => policy_label(policy))
            .increment(1);
    }
}

/// A request is answered with the interrupted error: after `after`, because it is not safe
/// to send again (`exhausted: false`) or was sent again `--max-resends` times already.
pub(crate) fn interrupted(after: Interruption, exhausted: bool) {
    if enabled() {
        let cause = if exhausted {
            "resends_exhausted"
        } else {
            after.as_str()
        };
        counter!(REQUESTS_INTERRUPTED, "cause" => cause).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off (no test of this crate enables metrics), nothing is counted and no child is
    /// held in the gauge.
    #[test]
    fn with_metrics_off_no_child_is_counted() {
        assert!(!enabled());
        assert!(started(Start::New).is_none());
    }
}

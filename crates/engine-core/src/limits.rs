//! Limits per principal (issue 11 item 4): live sessions, open GET (SSE) streams,
//! requests in flight, running tasks, and a request rate, each counted for one principal
//! at a time so that one caller cannot use up a worker for every other caller.
//!
//! In plain words: every count is kept **in this worker's memory**, and a refusal happens
//! before anything of the refused work is written to the store. With `N` workers behind a
//! load balancer a principal can hold up to `N` times each limit in all; divide by `N` for
//! a deployment-wide figure.
//!
//! Stated more precisely:
//! - *sessions*: the legacy sessions this worker created for the principal and that may
//!   still be live. A session ended here (`DELETE`, idle on use) leaves the count at once;
//!   one ended elsewhere (another worker's `DELETE`, the pruner, a Redis expiry) leaves it
//!   when the limit is reached: the worker then reads its remembered sessions back from the
//!   store (at most once a second per principal) and forgets those that are gone. A global
//!   count would need a read of every live session of the principal per `initialize` (a
//!   scan of all sessions on Redis) or a counter in the store that TTL expiry cannot
//!   decrement; neither is worth a bound meant to keep one principal from filling a worker.
//! - *tasks*: tasks created here by a request (`params.task`, or the 2026-07-28 extension)
//!   whose run has not ended on this worker. A task's run taken over by another worker
//!   after a crash is not counted there.
//! - *in flight*, *SSE streams* and *rate*: per worker by nature (what this worker serves
//!   now; a token bucket refilled at `rate.per_second` up to `rate.burst`).
//!
//! The anonymous principal (authentication off) is exempt unless [`Limits::anonymous`]:
//! without authentication every client is the same principal, and a per-principal limit
//! would be a server-wide one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use durable_mcp_store::{Principal, SessionId};
use tokio::time::Instant;

/// How much one principal may use of a worker. `None` disables that limit.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Limits {
    /// Live legacy sessions created on this worker (default 64).
    pub sessions: Option<u32>,
    /// GET (SSE) streams open on this worker: standalone streams and resumes (default 32).
    pub sse_streams: Option<u32>,
    /// POST requests in flight on this worker, from their arrival to the end of their
    /// response (an SSE response included) (default 64).
    pub in_flight: Option<u32>,
    /// Tasks created on this worker whose run has not ended (default 64).
    pub tasks: Option<u32>,
    /// Requests (POST, GET, DELETE) per second, with bursts (default 50/s, burst 100).
    pub rate: Option<Rate>,
    /// Apply the limits to the anonymous principal too (default `false`).
    pub anonymous: bool,
}

/// A token bucket: `burst` requests at once, refilled at `per_second`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Sustained requests per second (more than 0).
    pub per_second: f64,
    /// The most requests accepted at once after a quiet spell (at least 1).
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            sessions: Some(64),
            sse_streams: Some(32),
            in_flight: Some(64),
            tasks: Some(64),
            rate: Some(Rate {
                per_second: 50.0,
                burst: 100,
            }),
            anonymous: false,
        }
    }
}

impl Limits {
    /// No limit at all.
    pub fn unlimited() -> Self {
        Self {
            sessions: None,
            sse_streams: None,
            in_flight: None,
            tasks: None,
            rate: None,
            anonymous: false,
        }
    }
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// [`Limits::sessions`].
    Sessions,
    /// [`Limits::sse_streams`].
    SseStreams,
    /// [`Limits::in_flight`].
    InFlight,
    /// [`Limits::tasks`].
    Tasks,
    /// [`Limits::rate`].
    Rate,
}

impl Limit {
    /// Its name in errors, logs and the `limit` label of `durable_mcp.limits.refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Sessions => "sessions",
            Limit::SseStreams => "sse_streams",
            Limit::InFlight => "in_flight",
            Limit::Tasks => "tasks",
            Limit::Rate => "rate",
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request refused by a limit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the {limit} limit of this principal is reached (at most {max})")]
pub struct Refused {
    /// The limit.
    pub limit: Limit,
    /// Its value (for the rate: the burst).
    pub max: u32,
    /// When trying again can succeed: the rate's next token, a second for the per-worker
    /// counts of in-flight requests and streams; `None` for sessions and tasks (they free
    /// up when the client ends one).
    pub retry_after: Option<Duration>,
}

/// One unit of a count limit, held until dropped.
#[derive(Debug)]
#[must_use = "the unit is released when the permit drops"]
pub struct Permit {
    limiter: Arc<Limiter>,
    principal: Principal,
    limit: Limit,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.update(&self.principal, |usage| {
            let count = usage.count_mut(self.limit);
            *count = count.saturating_sub(1);
        });
    }
}

/// A reserved session slot: released when dropped, unless [`SessionSlot::created`] was
/// called with the session it was reserved for.
#[derive(Debug)]
#[must_use = "the slot is released when it drops"]
pub struct SessionSlot {
    limiter: Arc<Limiter>,
    principal: Principal,
    /// Set by [`SessionSlot::created`]: the reservation became a session.
    used: bool,
}

impl SessionSlot {
    /// The session was created: it counts until it ends.
    pub fn created(mut self, id: SessionId) {
        self.limiter.update(&self.principal, |usage| {
            usage.pending = usage.pending.saturating_sub(1);
            usage.sessions.insert(id);
        });
        self.used = true;
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if !self.used {
            self.limiter.update(&self.principal, |usage| {
                usage.pending = usage.pending.saturating_sub(1)
            });
        }
    }
}

/// What [`Limiter::reserve_session`] found.
#[derive(Debug)]
pub enum SessionAdmission {
    /// Under the limit (or no limit): `None` when nothing is counted.
    Admitted(Option<SessionSlot>),
    /// At the limit: these remembered sessions may have ended elsewhere; check them and
    /// call [`Limiter::sessions_gone`], then reserve again.
    Check(Vec<SessionId>),
    /// At the limit, and checked less than a second ago.
    Refused(Refused),
}

/// What one principal uses of this worker.
#[derive(Debug)]
struct Usage {
    sessions: HashSet<SessionId>,
    pending: u32,
    sse_streams: u32,
    in_flight: u32,
    tasks: u32,
    tokens: f64,
    refilled: Instant,
    checked: Option<Instant>,
}

impl Usage {
    fn new(limits: &Limits, now: Instant) -> Self {
        let tokens = limits.rate.map_or(0.0, |rate| f64::from(rate.burst.max(1)));
        Self {
            sessions: HashSet::new(),
            pending: 0,
            sse_streams: 0,
            in_flight: 0,
            tasks: 0,
            tokens,
            refilled: now,
            checked: None,
        }
    }

    fn count_mut(&mut self, limit: Limit) -> &mut u32 {
        match limit {
            Limit::SseStreams => &mut self.sse_streams,
            Limit::Tasks => &mut self.tasks,
            // Sessions and the rate are not permits.
            Limit::InFlight | Limit::Sessions | Limit::Rate => &mut self.in_flight,
        }
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        let burst = f64::from(rate.burst.max(1));
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second).min(burst);
        self.refilled = now;
    }

    /// Nothing held and a full bucket: the entry can go.
    fn idle(&self, rate: Option<Rate>, now: Instant) -> bool {
        let full = rate.is_none_or(|rate| {
            let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
            self.tokens + elapsed * rate.per_second >= f64::from(rate.burst.max(1))
        });
        full && self.sessions.is_empty()
            && self.pending == 0
            && self.sse_streams == 0
            && self.in_flight == 0
            && self.tasks == 0
    }
}

/// The limits of one worker and what each principal uses (see the module docs).
#[derive(Debug)]
pub struct Limiter {
    limits: Limits,
    usage: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    principals: HashMap<Principal, Usage>,
    /// Idle entries are swept when the map grows past this.
    sweep_at: usize,
}

/// Entries kept before idle ones are swept.
const SWEEP_AT_LEAST: usize = 1024;
/// How often, per principal, remembered sessions are checked against the store.
const SESSION_CHECK_INTERVAL: Duration = Duration::from_secs(1);

impl Limiter {
    /// A limiter applying `limits`.
    pub fn new(mut limits: Limits) -> Arc<Self> {
        if let Some(rate) = &mut limits.rate
            && !(rate.per_second > 0.0 && rate.per_second.is_finite())
        {
            tracing::warn!(
                per_second = rate.per_second,
                "a request rate must be positive: rate limit off"
            );
            limits.rate = None;
        }
        Arc::new(Self {
            limits,
            usage: Mutex::new(State {
                principals: HashMap::new(),
                sweep_at: SWEEP_AT_LEAST,
            }),
        })
    }

    /// The limits applied.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn exempt(&self, principal: &Principal) -> bool {
        principal.is_anonymous() && !self.limits.anonymous
    }

    fn with<T>(&self, principal: &Principal, f: impl FnOnce(&mut Usage, Instant) -> T) -> T {
        let now = Instant::now();
        let mut state = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        if state.principals.len() >= state.sweep_at {
            let rate = self.limits.rate;
            state.principals.retain(|_, usage| !usage.idle(rate, now));
            state.sweep_at = (state.principals.len() * 2).max(SWEEP_AT_LEAST);
        }
        let usage = state
            .principals
            .entry(principal.clone())
            .or_insert_with(|| Usage::new(&self.limits, now));
        f(usage, now)
    }

    fn update(&self, principal: &Principal, f: impl FnOnce(&mut Usage)) {
        let mut state = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(usage) = state.principals.get_mut(principal) else {
            return;
        };
        f(usage);
        if usage.idle(self.limits.rate, Instant::now()) {
            state.principals.remove(principal);
        }
    }

    /// Take one token of the principal's request rate.
    pub fn rate(&self, principal: &Principal) -> Result<(), Refused> {
        let Some(rate) = self.limits.rate else {
            return Ok(());
        };
        if self.exempt(principal) {
            return Ok(());
        }
        self.with(principal, |usage, now| {
            usage.refill(rate, now);
            if usage.tokens >= 1.0 {
                usage.tokens -= 1.0;
                return Ok(());
            }
            let wait = Duration::from_secs_f64((1.0 - usage.tokens) / rate.per_second);
            Err(refused(Refused {
                limit: Limit::Rate,
                max: rate.burst,
                retry_after: Some(wait),
            }))
        })
    }

    /// One unit of a count limit ([`Limit::InFlight`], [`Limit::SseStreams`] or
    /// [`Limit::Tasks`]); `None` when that limit is off or the principal exempt.
    pub fn acquire(
        self: &Arc<Self>,
        principal: &Principal,
        limit: Limit,
    ) -> Result<Option<Permit>, Refused> {
        let (max, retry_after) = match limit {
            Limit::InFlight => (self.limits.in_flight, Some(Duration::from_secs(1))),
            Limit::SseStreams => (self.limits.sse_streams, Some(Duration::from_secs(1))),
            Limit::Tasks => (self.limits.tasks, None),
            Limit::Sessions | Limit::Rate => return Ok(None),
        };
        let Some(max) = max else { return Ok(None) };
        if self.exempt(principal) {
            return Ok(None);
        }
        self.with(principal, |usage, _| {
            let count = usage.count_mut(limit);
            if *count >= max {
                return Err(refused(Refused {
                    limit,
                    max,
                    retry_after,
                }));
            }
            *count += 1;
            Ok(Some(Permit {
                limiter: self.clone(),
                principal: principal.clone(),
                limit,
            }))
        })
    }

    /// Reserve a session slot before a legacy `initialize` runs (see [`SessionAdmission`]).
    pub fn reserve_session(self: &Arc<Self>, principal: &Principal) -> SessionAdmission {
        let Some(max) = self.limits.sessions else {
            return SessionAdmission::Admitted(None);
        };
        if self.exempt(principal) {
            return SessionAdmission::Admitted(None);
        }
        self.with(principal, |usage, now| {
            let held = u32::try_from(usage.sessions.len())
                .unwrap_or(u32::MAX)
                .saturating_add(usage.pending);
            if held < max {
                usage.pending += 1;
                return SessionAdmission::Admitted(Some(SessionSlot {
                    limiter: self.clone(),
                    principal: principal.clone(),
                    used: false,
                }));
            }
            if usage
                .checked
                .is_some_and(|at| now.saturating_duration_since(at) < SESSION_CHECK_INTERVAL)
                || usage.sessions.is_empty()
            {
                return SessionAdmission::Refused(refused(Refused {
                    limit: Limit::Sessions,
                    max,
                    retry_after: None,
                }));
            }
            usage.checked = Some(now);
            SessionAdmission::Check(usage.sessions.iter().cloned().collect())
        })
    }

    /// These remembered sessions were found ended (or the principal ended them here).
    pub fn sessions_gone(&self, principal: &Principal, gone: &[SessionId]) {
        self.update(principal, |usage| {
            for id in gone {
                usage.sessions.remove(id);
            }
        });
    }
}

/// Log and count a refusal.
fn refused(refused: Refused) -> Refused {
    tracing::debug!(limit = %refused.limit, max = refused.max, "request refused by a limit");
    crate::metrics::limit_refused(refused.limit.as_str());
    refused
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    fn limits() -> Limits {
        Limits {
            sessions: Some(2),
            sse_streams: Some(1),
            in_flight: Some(2),
            tasks: Some(1),
            rate: Some(Rate {
                per_second: 1.0,
                burst: 2,
            }),
            anonymous: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_refuses_past_the_burst_and_refills() {
        let limiter = Limiter::new(limits());
        let a = Principal::new("key:a");
        assert!(limiter.rate(&a).is_ok());
        assert!(limiter.rate(&a).is_ok());
        let refused = limiter.rate(&a).unwrap_err();
        assert_eq!(refused.limit, Limit::Rate);
        assert!(refused.retry_after.unwrap() <= Duration::from_secs(1));
        assert!(
            limiter.rate(&Principal::new("key:b")).is_ok(),
            "another principal has its own bucket"
        );
        tokio::time::advance(Duration::from_millis(1_001)).await;
        assert!(limiter.rate(&a).is_ok(), "a token came back");
    }

    #[tokio::test]
    async fn permits_count_until_dropped_and_idle_entries_go() {
        let limiter = Limiter::new(Limits {
            rate: None,
            ..limits()
        });
        let a = Principal::new("key:a");
        let one = limiter.acquire(&a, Limit::InFlight).unwrap();
        let two = limiter.acquire(&a, Limit::InFlight).unwrap();
        assert!(one.is_some() && two.is_some());
        assert_eq!(
            limiter.acquire(&a, Limit::InFlight).unwrap_err().limit,
            Limit::InFlight
        );
        assert!(
            limiter.acquire(&a, Limit::SseStreams).unwrap().is_some(),
            "each limit counts on its own"
        );
        drop(one);
        let three = limiter.acquire(&a, Limit::InFlight).unwrap();
        drop((two, three));
        assert!(
            limiter.usage.lock().unwrap().principals.is_empty(),
            "nothing held: no entry left"
        );
    }

    #[tokio::test]
    async fn anonymous_is_exempt_unless_asked() {
        let limiter = Limiter::new(limits());
        let anonymous = Principal::anonymous();
        for _ in 0..10 {
            assert!(limiter.rate(&anonymous).is_ok());
            assert!(limiter.acquire(&anonymous, Limit::Tasks).unwrap().is_none());
        }
        let strict = Limiter::new(Limits {
            anonymous: true,
            ..limits()
        });
        let _held = strict.acquire(&anonymous, Limit::Tasks).unwrap();
        assert!(strict.acquire(&anonymous, Limit::Tasks).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_are_reserved_then_checked_against_the_store_at_the_limit() {
        let limiter = Limiter::new(limits());
        let a = Principal::new("key:a");
        let (one, two) = (SessionId::random(), SessionId::random());
        let SessionAdmission::Admitted(Some(slot)) = limiter.reserve_session(&a) else {
            panic!("under the limit")
        };
        slot.created(one.clone());
        let SessionAdmission::Admitted(Some(pending)) = limiter.reserve_session(&a) else {
            panic!("under the limit")
        };
        // A reservation counts while its initialize runs.
        let SessionAdmission::Check(ids) = limiter.reserve_session(&a) else {
            panic!("at the limit")
        };
        assert_eq!(ids, vec![one.clone()]);
        assert!(
            matches!(limiter.reserve_session(&a), SessionAdmission::Refused(_)),
            "checked less than a second ago"
        );
        drop(pending);
        let SessionAdmission::Admitted(Some(slot)) = limiter.reserve_session(&a) else {
            panic!("a failed initialize freed its slot")
        };
        slot.created(two);
        tokio::time::advance(SESSION_CHECK_INTERVAL).await;
        let SessionAdmission::Check(ids) = limiter.reserve_session(&a) else {
            panic!("at the limit")
        };
        assert_eq!(ids.len(), 2);
        limiter.sessions_gone(&a, &[one]);
        assert!(matches!(
            limiter.reserve_session(&a),
            SessionAdmission::Admitted(Some(_))
        ));
    }
}

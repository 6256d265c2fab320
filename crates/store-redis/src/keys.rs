//! Key names. The crate docs describe the layout; the Lua prelude in `scripts.rs` builds
//! the same names (a test checks the two agree).

#[cfg(test)]
use durable_mcp_store::StreamId;
use durable_mcp_store::{RecordKind, SessionId};

/// The key names of one store (one prefix).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The prefix, passed to every script as `ARGV[1]`.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The hash tag of a session's keys (without braces).
    pub(crate) fn session_tag(session: &SessionId) -> String {
        format!("s:{session}")
    }

    #[cfg(test)] // built in Lua by the scripts; tests check the two agree
    /// The hash tag of a sessionless stream's keys (without braces).
    pub(crate) fn stream_tag(stream: &StreamId) -> String {
        format!("t:{stream}")
    }

    /// `P:{s:<session>}:session`: hash `principal`, `record`, `version`.
    pub(crate) fn session(&self, session: &SessionId) -> String {
        format!("{}:{{{}}}:session", self.prefix, Self::session_tag(session))
    }

    #[cfg(test)] // built in Lua by the scripts; tests check the two agree
    /// `P:{<tag>}:stream:<id>`: the stream's meta hash.
    pub(crate) fn stream_meta(&self, tag: &str, stream: &StreamId) -> String {
        format!("{}:{{{tag}}}:stream:{stream}", self.prefix)
    }

    #[cfg(test)] // built in Lua by the scripts; tests check the two agree
    /// `P:{<tag>}:events:<id>`: the stream's events (a Redis stream).
    pub(crate) fn stream_events(&self, tag: &str, stream: &StreamId) -> String {
        format!("{}:{{{tag}}}:events:{stream}", self.prefix)
    }

    #[cfg(test)] // built in Lua by the scripts; tests check the two agree
    /// `P:streamidx:<id>`: the tag of a session stream (sessionless streams have none).
    pub(crate) fn stream_index(&self, stream: &StreamId) -> String {
        format!("{}:streamidx:{stream}", self.prefix)
    }

    /// `P:sessions`: session ids scored by `last_seen_ms`.
    pub(crate) fn sessions(&self) -> String {
        format!("{}:sessions", self.prefix)
    }

    /// `P:finished`: closed stream ids scored by the time of their final event.
    pub(crate) fn finished(&self) -> String {
        format!("{}:finished", self.prefix)
    }

    /// `P:record:<kind>:<key>`: a journal record's hash `version`, `value`, `expires_at`.
    pub(crate) fn record(&self, kind: RecordKind, key: &str) -> String {
        format!("{}:record:{kind}:{key}", self.prefix)
    }

    /// `P:records:<kind>`: every key of a kind at score 0, listed with `ZRANGEBYLEX`.
    pub(crate) fn records_index(&self, kind: RecordKind) -> String {
        format!("{}:records:{kind}", self.prefix)
    }

    #[cfg(test)] // built in Lua by the scripts; tests check the two agree
    /// `P:records:<kind>:expiring`: the keys of a kind that have an expiry, scored by it.
    pub(crate) fn records_expiring(&self, kind: RecordKind) -> String {
        format!("{}:records:{kind}:expiring", self.prefix)
    }

    /// `P:layout`: the version of the key layout the prefix holds (`layout.rs`).
    pub(crate) fn layout(&self) -> String {
        format!("{}:layout", self.prefix)
    }

    /// `P:wake`: the pub/sub channel of wake-ups.
    pub(crate) fn channel(&self) -> String {
        format!("{}:wake", self.prefix)
    }
}

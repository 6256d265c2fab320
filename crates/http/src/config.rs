//! Settings of the HTTP transport.

use std::time::Duration;

/// How the HTTP transport behaves. The defaults are safe for a server on a developer's
/// machine: loopback host names only, cross-origin browser requests refused, connections
/// timed out when silent or idle and capped in number.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpConfig {
    /// The endpoint path (default `/mcp`).
    pub path: String,
    /// Accepted `Host` header values (a name without port matches any port). `None`
    /// disables the check (for example behind a proxy that enforces it).
    pub allowed_hosts: Option<Vec<String>>,
    /// Accepted `Origin` values (exact, or `*`). `None` accepts an origin whose host is
    /// in `allowed_hosts`.
    pub allowed_origins: Option<Vec<String>>,
    /// The largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Answer requests with one JSON object instead of an SSE stream (legacy era; messages
    /// sent before the response are then not delivered).
    pub json_response: bool,
    /// How often an idle SSE stream carries a keep-alive comment.
    pub keep_alive: Duration,
    /// For 2025-11-25 sessions: close a request's SSE connection after this long, so the
    /// client resumes with `GET` + `Last-Event-ID` (SSE polling). `None` keeps it open.
    pub poll_after: Option<Duration>,
    /// While other requests run on the worker, how long the SSE response of a 2025-11-25
    /// request journaled ahead of its handler waits for the handler's first message before
    /// it sends its head and priming event. A quick answer then goes out together with them,
    /// in one write that wakes the client once instead of twice (a priming event written
    /// alone is a write and a wake-up of its own: on a busy worker, CPU taken from every
    /// other request); a slow handler's client gets its priming event this much later. A
    /// worker with no other request running sends the priming event at once. Never longer
    /// than `poll_after`. Zero always sends the priming event at once.
    pub first_event_wait: Duration,
    /// GET streams of one session kept open on this worker (at least 1). Each message of
    /// the session's standalone stream goes on exactly one of them (the newest, unless it
    /// closed); opening one more closes the session's oldest GET stream here, which holds
    /// nothing undelivered and which its client may resume with `Last-Event-ID`.
    pub max_get_streams_per_session: usize,
    /// How long a client may take to send a complete request head: from the moment a new
    /// connection is accepted, or from the first byte of a later request on a keep-alive
    /// connection. A connection that has not sent its head by then is closed.
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may stay open with no request in flight after its
    /// last response ended. A connection streaming a response (an SSE stream, which carries
    /// keep-alive comments) is never idle, however long it lasts. Behind a proxy that keeps
    /// connections to the workers open, make it longer than the proxy's own idle timeout
    /// (nginx's `keepalive_timeout` in an `upstream` block: 60 s by default), so the proxy
    /// never sends a request on a connection the worker is closing.
    pub idle_timeout: Duration,
    /// The most connections served at once. A connection accepted beyond it is answered
    /// `503 Service Unavailable` and closed at once, so that silent clients cannot use up
    /// the process's file descriptors and lock every other client out. Keep it below the
    /// open-file limit (`ulimit -n`) minus what the store needs. At least 1.
    pub max_connections: usize,
    /// How requests are authenticated (default: not at all, every request is anonymous;
    /// see `docs/security.md`). A refused request is answered 401/403 before anything of
    /// it touches the store.
    pub auth: durable_mcp_auth::Authenticator,
    /// Log each request's JSON body at `trace` level (default off: a body may carry
    /// secrets, such as a tool's arguments). Credentials in headers are never logged.
    pub log_bodies: bool,
    /// The scopes prompts and resources need (tools declare theirs with
    /// `required_scopes`). Checked only with authentication on.
    pub scope_rules: durable_mcp_auth::ScopeRules,
}

/// The default of [`HttpConfig::first_event_wait`]: longer than a quick tool takes with any
/// store under load here (a few milliseconds), short enough that no client notices it.
pub const DEFAULT_FIRST_EVENT_WAIT: Duration = Duration::from_millis(10);

/// The default of [`HttpConfig::max_get_streams_per_session`]: real clients keep one or
/// two GET streams per session; a few more leave room for reconnects that overlap.
pub const DEFAULT_MAX_GET_STREAMS_PER_SESSION: usize = 8;

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            path: "/mcp".to_owned(),
            allowed_hosts: Some(vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()]),
            allowed_origins: None,
            max_body_bytes: 4 * 1024 * 1024,
            json_response: false,
            keep_alive: Duration::from_secs(15),
            poll_after: None,
            first_event_wait: DEFAULT_FIRST_EVENT_WAIT,
            max_get_streams_per_session: DEFAULT_MAX_GET_STREAMS_PER_SESSION,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            max_connections: 512,
            auth: durable_mcp_auth::Authenticator::None,
            log_bodies: false,
            scope_rules: durable_mcp_auth::ScopeRules::default(),
        }
    }
}

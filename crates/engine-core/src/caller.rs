//! Who sent a request ([`Caller`]): the principal, the era and, in the legacy era, the
//! session, as every layer of the engine sees it.

use std::sync::Arc;

use durable_mcp_handler::{AuthInfo, PeerContext, SessionState};
use durable_mcp_protocol::McpVersion;
use durable_mcp_store::{Principal, SessionId, SessionRecord, Store, StreamOwner};

use crate::EngineError;
use crate::records::Era;

/// Who sent a request, and in which context.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The authenticated principal (D13).
    pub principal: Principal,
    /// The request's era.
    pub era: Era,
    /// The legacy-era session, shared: a request's caller is cloned into each piece of
    /// its run (journal record, pump, durable context), and the record holds the client's
    /// capabilities and info as JSON.
    pub session: Option<Arc<SessionRecord>>,
    /// The request's protocol version.
    pub protocol_version: McpVersion,
    /// Modern era: the log level the request's `_meta` asked for, if any.
    pub log_level: Option<String>,
    /// What the handler sees of the caller's credentials (scopes, claims); `None`: the
    /// principal alone.
    pub auth: Option<Arc<AuthInfo>>,
    /// The W3C trace context of the transport's request (HTTP `traceparent` and
    /// `tracestate` headers), read by the transport when traces are on: the parent of the
    /// request's server span unless its `params._meta` has one (see [`crate::traces`]).
    pub trace: Option<crate::traces::TraceContext>,
    /// The HTTP request's head, which the handler finds in its request's extensions
    /// (`Extension<http::request::Parts>`, as under rmcp's own HTTP service). `None` on stdio.
    /// A journaled request keeps it without its credentials ([`crate::is_credential`]) for a
    /// re-run after a crash.
    pub http: Option<Arc<http::request::Parts>>,
}

impl Caller {
    /// The caller of a legacy-era request in `session`, at the session's negotiated version.
    pub fn legacy(principal: Principal, session: SessionRecord) -> Result<Self, EngineError> {
        let protocol_version = session.protocol_version.parse()?;
        Ok(Self {
            principal,
            era: Era::Legacy,
            protocol_version,
            session: Some(Arc::new(session)),
            log_level: None,
            auth: None,
            trace: None,
            http: None,
        })
    }

    /// The id of its legacy session, if any.
    pub fn session_id(&self) -> Option<&SessionId> {
        self.session.as_ref().map(|s| &s.id)
    }

    /// Who owns the streams made for this caller (D13): its principal and session.
    pub fn stream_owner(&self) -> StreamOwner {
        StreamOwner {
            principal: self.principal.clone(),
            session: self.session_id().cloned(),
        }
    }

    /// What the handler gets to know of this caller (and its durable session state).
    pub fn peer(&self, store: &Arc<dyn Store>) -> PeerContext {
        PeerContext {
            protocol_version: Some(self.protocol_version.as_str().to_owned()),
            client: self.session.as_ref().map(|s| s.client.clone()),
            session_state: Some(match &self.session {
                Some(session) => crate::state::session_state(
                    store.clone(),
                    self.principal.clone(),
                    session.id.clone(),
                ),
                None => SessionState::without_session(self.protocol_version.as_str()),
            }),
            server_state: Some(crate::state::server_state(store.clone())),
            durable: None,
            state_keys: None,
            auth: Some(match &self.auth {
                Some(auth) => AuthInfo::clone(auth),
                None => AuthInfo::principal_only(self.principal.as_str()),
            }),
            // The request path (layer 4) adds it.
            outbox: None,
            http: self.http.as_deref().cloned(),
            session: self.session_id().map(ToString::to_string),
        }
    }

    /// Whether this request's streams start with a priming event (2025-11-25 and later
    /// legacy sessions).
    pub fn primes_streams(&self) -> bool {
        self.era == Era::Legacy && self.protocol_version >= McpVersion::V2025_11_25
    }
}

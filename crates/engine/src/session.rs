//! Legacy-era sessions: created by `initialize`, served from the store by any worker.

use std::sync::Arc;

use durable_mcp_handler::{McpHandler, Outbound, PeerContext};
use durable_mcp_protocol::McpVersion;
use durable_mcp_protocol::jsonrpc::Request;
use durable_mcp_store::{
    Principal, RecordKind, Retention, SessionChange, SessionId, SessionRecord, Store, StoreError,
    StreamId, now_ms,
};
use serde_json::{Map, Value};

use crate::EngineError;
use crate::limits::Limiter;
use crate::records::key;
use crate::registry::Registry;

/// The sessions of the legacy era, on any worker: `initialize` creates one, a request's
/// `Mcp-Session-Id` finds and touches it, and ending it cancels its runs here (cheap to
/// clone).
#[derive(Clone)]
pub(crate) struct Sessions {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    /// Runs `initialize`, and forgets a session's handler instance when it ends.
    handler: McpHandler,
    /// The runs in flight here, shared with the request path: an ended session's stop.
    runs: Arc<Registry>,
    /// Each principal's sessions, against its limit.
    limiter: Arc<Limiter>,
    /// The session idle TTL.
    retention: Retention,
}

impl Sessions {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        handler: McpHandler,
        runs: Arc<Registry>,
        limiter: Arc<Limiter>,
        retention: Retention,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                handler,
                runs,
                limiter,
                retention,
            }),
        }
    }

    fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    fn handler(&self) -> &McpHandler {
        &self.inner.handler
    }

    fn limiter(&self) -> &Arc<Limiter> {
        &self.inner.limiter
    }

    /// Run `initialize` to its outcome: answered before its session exists, it has no
    /// stream.
    async fn run_to_outcome(
        &self,
        request: Map<String, Value>,
        peer: &PeerContext,
    ) -> Result<Value, EngineError> {
        let mut run = self.handler().start(request, peer)?;
        while let Some(message) = run.next_outbound().await {
            if let Outbound::Outcome(outcome) = message {
                return Ok(outcome);
            }
        }
        Err(EngineError::NoOutcome)
    }

    /// The work of [`crate::Engine::initialize`].
    pub(crate) async fn initialize(
        &self,
        principal: &Principal,
        request: Request,
        http: Option<std::sync::Arc<http::request::Parts>>,
    ) -> Result<(Option<SessionRecord>, Value), EngineError> {
        let slot = self.session_slot(principal).await?;
        let params = request.params_value().cloned().unwrap_or(Value::Null);
        let requested = request.param_str("protocolVersion").map(str::to_owned);
        // Chosen before the handler runs: with a handler factory, the instance that answers
        // `initialize` is the session's (and is dropped if no session comes of it).
        let id = SessionId::random();
        let peer = PeerContext {
            protocol_version: requested,
            client: Some(params.clone()),
            session_state: None,
            server_state: Some(crate::state::server_state(self.store().clone())),
            durable: None,
            state_keys: None,
            auth: Some(durable_mcp_handler::AuthInfo::principal_only(
                principal.as_str(),
            )),
            outbox: None,
            http: http.as_deref().cloned(),
            session: Some(id.to_string()),
        };
        let span = crate::traces::Request {
            request: &request,
            session: None,
            protocol_version: peer.protocol_version.as_deref().unwrap_or_default(),
            header: None,
        };
        let operation = crate::metrics::Operation::start(&span, |_| false);
        let context = operation
            .as_ref()
            .and_then(crate::metrics::Operation::context);
        let result = crate::traces::in_context(
            context,
            self.initialize_in(principal, id.clone(), request, peer, operation, slot),
        )
        .await;
        if !matches!(result, Ok((Some(_), _))) {
            self.handler().end_session(id.as_str());
        }
        result
    }

    async fn initialize_in(
        &self,
        principal: &Principal,
        id: SessionId,
        request: Request,
        peer: PeerContext,
        operation: Option<crate::metrics::Operation>,
        slot: Option<crate::limits::SessionSlot>,
    ) -> Result<(Option<SessionRecord>, Value), EngineError> {
        let params = request.params_value().cloned().unwrap_or(Value::Null);
        let mut response = self.run_to_outcome(request.into_message(), &peer).await?;
        let Some(version) = response
            .pointer("/result/protocolVersion")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            crate::metrics::finish(operation, &response);
            return Ok((None, response));
        };
        // The session serves only a legacy version of the closed set: a version the
        // handler would accept but durable-mcp does not serve (2024-11-05) is answered with
        // the latest one, as the protocol says for an unsupported requested version.
        let version = match version.parse::<McpVersion>() {
            Ok(version) if !version.is_modern() => version,
            _ => {
                if let Some(result) = response.get_mut("result").and_then(Value::as_object_mut) {
                    result.insert(
                        "protocolVersion".into(),
                        Value::from(McpVersion::LATEST_LEGACY.as_str()),
                    );
                }
                McpVersion::LATEST_LEGACY
            }
        };
        if version >= McpVersion::V2025_11_25
            && let Some(capabilities) = response
                .pointer_mut("/result/capabilities")
                .and_then(Value::as_object_mut)
        {
            // 2025-11-25 tasks: durable-mcp runs them (for tools that declare support).
            capabilities.insert(
                "tasks".into(),
                serde_json::json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
            );
        }
        let now = now_ms();
        let record = SessionRecord {
            id,
            principal: principal.clone(),
            protocol_version: version.to_string(),
            client: params,
            log_level: None,
            subscriptions: Default::default(),
            state: Default::default(),
            standalone_stream: StreamId::random(),
            created_at_ms: now,
            last_seen_ms: now,
            // Tracked from the start: the first GET stream gets what was sent before it.
            delivery: Some(durable_mcp_store::Delivery::default()),
        };
        self.store().create_session(record.clone()).await?;
        if let Some(slot) = slot {
            slot.created(record.id.clone());
        }
        crate::metrics::finish(operation, &response);
        crate::metrics::session_opened();
        Ok((Some(record), response))
    }

    /// A session slot of `principal` under its limit: at the limit, the sessions this
    /// worker remembers are read back and those that ended elsewhere are forgotten.
    async fn session_slot(
        &self,
        principal: &Principal,
    ) -> Result<Option<crate::limits::SessionSlot>, EngineError> {
        use crate::limits::SessionAdmission;
        let limiter = self.limiter();
        let remembered = match limiter.reserve_session(principal) {
            SessionAdmission::Admitted(slot) => return Ok(slot),
            SessionAdmission::Refused(refused) => return Err(EngineError::Limited(refused)),
            SessionAdmission::Check(remembered) => remembered,
        };
        let ttl = self.inner.retention.session_idle_ttl_ms;
        let now = now_ms();
        let mut gone = Vec::new();
        for id in remembered {
            match self.store().load_session(principal, &id).await {
                Ok(record)
                    if ttl.is_some_and(|ttl| now.saturating_sub(record.last_seen_ms) > ttl) =>
                {
                    gone.push(id)
                }
                Ok(_) => {}
                Err(StoreError::NotFound { .. }) => gone.push(id),
                Err(e) => return Err(e.into()),
            }
        }
        limiter.sessions_gone(principal, &gone);
        match limiter.reserve_session(principal) {
            SessionAdmission::Admitted(slot) => Ok(slot),
            SessionAdmission::Refused(refused) => Err(EngineError::Limited(refused)),
            // Checked just now: refused until the next check.
            SessionAdmission::Check(_) => Err(EngineError::Limited(crate::limits::Refused {
                limit: crate::limits::Limit::Sessions,
                max: limiter.limits().sessions.unwrap_or(0),
                retry_after: None,
            })),
        }
    }

    /// The work of [`crate::Engine::session`].
    pub(crate) async fn session(
        &self,
        principal: &Principal,
        raw_id: &str,
    ) -> Result<SessionRecord, EngineError> {
        let id: SessionId = raw_id.parse().map_err(|_| EngineError::SessionNotFound)?;
        let record = match self.store().load_session(principal, &id).await {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => return Err(EngineError::SessionNotFound),
            Err(e) => return Err(e.into()),
        };
        self.touch(record).await
    }

    /// The work of [`crate::Engine::touch_session`].
    pub(crate) async fn touch_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> Result<(), EngineError> {
        let record = match self.store().load_session(principal, id).await {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => return Err(EngineError::SessionNotFound),
            Err(e) => return Err(e.into()),
        };
        self.touch(record).await.map(drop)
    }

    async fn touch(&self, record: SessionRecord) -> Result<SessionRecord, EngineError> {
        let Some(ttl) = self.inner.retention.session_idle_ttl_ms else {
            return Ok(record);
        };
        let now = now_ms();
        let idle = now.saturating_sub(record.last_seen_ms);
        if idle > ttl {
            self.end_session(&record.principal, &record.id).await?;
            return Err(EngineError::SessionNotFound);
        }
        if idle > ttl / 10 {
            match self
                .store()
                .update_session(&record.principal, &record.id, SessionChange::Touch)
                .await
            {
                Ok(updated) => return Ok(updated),
                Err(StoreError::NotFound { .. }) => return Err(EngineError::SessionNotFound),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(record)
    }

    /// The work of [`crate::Engine::end_session`].
    pub(crate) async fn end_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> Result<bool, EngineError> {
        self.inner.runs.cancel_session(id);
        self.handler().end_session(id.as_str());
        let created_at_ms = if crate::metrics::enabled() {
            self.store()
                .load_session(principal, id)
                .await
                .ok()
                .map(|record| record.created_at_ms)
        } else {
            None
        };
        let ended = self.store().end_session(principal, id).await?;
        self.limiter()
            .sessions_gone(principal, std::slice::from_ref(id));
        if ended {
            if let Some(created_at_ms) = created_at_ms {
                crate::metrics::session_ended(created_at_ms);
            }
            // No request can come on the session any more, so nothing reads the aliases
            // of its request ids: remove them now rather than leave one per request for
            // retention. A failure only leaves them to expire (the session has ended).
            if let Err(error) = self
                .store()
                .delete_records(RecordKind::Alias, &key::session_aliases(id))
                .await
            {
                tracing::warn!(%error, "the aliases of an ended session were not removed; they expire with retention");
            }
        }
        Ok(ended)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use durable_mcp_handler::McpHandler;
    use durable_mcp_handler::rmcp::ServerHandler;
    use durable_mcp_store::Principal;
    use durable_mcp_store_memory::MemoryStore;
    use serde_json::{Map, Value, json};

    use crate::{Caller, Engine, EngineOptions};

    #[derive(Clone)]
    struct Quiet;

    impl ServerHandler for Quiet {}

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("an object literal"),
        }
    }

    /// An idle session costs this worker nothing: after `initialize` and
    /// `notifications/initialized`, no per-session entry stays (runs, tasks, GET streams,
    /// announcements followed) and no notification's service loop is open, well before
    /// the notify window ends. Virtual time: the clock moves only when every task waits.
    #[tokio::test(start_paused = true)]
    async fn idle_sessions_leave_no_entries_on_the_worker() {
        let engine = Engine::new(
            Arc::new(MemoryStore::new()),
            McpHandler::new(Quiet),
            EngineOptions::default(),
        );
        let principal = Principal::anonymous();
        for id in 0..50 {
            let request = object(
                json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
            );
            let (session, _) = engine
                .initialize(&principal, crate::Request::from_message(request), None)
                .await
                .unwrap();
            let caller = Caller::legacy(principal.clone(), session.expect("a session")).unwrap();
            engine.notify(
                &caller,
                object(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            );
        }
        tokio::time::sleep(durable_mcp_handler::NOTIFY_WINDOW / 2).await;
        assert_eq!(
            engine.handler().notifications_in_flight(),
            0,
            "notification service loops still open"
        );
        assert_eq!(engine.inner.get_streams.sessions(), 0);
        assert!(engine.requests().inner.runs.no_session_runs());
        assert_eq!(engine.requests().changes().followed(), (0, 0));
    }

    /// Ending a session (a client's `DELETE`) removes the aliases of its request ids with
    /// it: no request can come on the session any more, so nothing would read them, and
    /// they would otherwise stay a day (one per request) for retention to remove.
    #[tokio::test]
    async fn ending_a_session_removes_its_request_aliases() {
        use durable_mcp_store::{RecordKind, Store};
        let store = Arc::new(MemoryStore::new());
        let engine = Engine::new(
            store.clone(),
            McpHandler::new(Quiet),
            EngineOptions::default(),
        );
        let principal = Principal::anonymous();
        let request = object(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        );
        let (session, _) = engine
            .initialize(&principal, crate::Request::from_message(request), None)
            .await
            .unwrap();
        let session = session.expect("a session");
        let caller = Caller::legacy(principal.clone(), session.clone()).unwrap();
        for id in 1..=3 {
            let call = object(
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "missing", "arguments": {}}}),
            );
            engine
                .accept(&caller, crate::Request::new(Value::from(id), call))
                .await
                .unwrap();
        }
        for _ in 0..500 {
            if engine.in_flight() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let prefix = format!("{}/", session.id);
        assert_eq!(
            store
                .list_records(RecordKind::Alias, &prefix, 10)
                .await
                .unwrap()
                .len(),
            3,
            "each call left its alias"
        );
        assert!(engine.end_session(&principal, &session.id).await.unwrap());
        assert!(
            store
                .list_records(RecordKind::Alias, &prefix, 10)
                .await
                .unwrap()
                .is_empty(),
            "aliases outlived their session"
        );
    }
}

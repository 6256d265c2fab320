//! The one module that drives rmcp. A user's `rmcp::ServerHandler` is erased into a
//! [`McpHandler`]; each request runs in its own short-lived rmcp service loop (through
//! `serve_directly_with_ct`) over a [`RunTransport`] that hands every message the handler
//! sends back to durable-mcp as JSON, and feeds it the client's answers to its questions.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, GetExtensions, InitializeRequestParams,
    ProtocolVersion, ServerJsonRpcMessage,
};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage, serve_directly_with_ct};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use durable_mcp_protocol::jsonrpc::{Rejection, code};

/// A message a handler sent while running one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// A notification (progress, log message, list changed, ...).
    Notification {
        /// Its method.
        method: String,
        /// The whole message.
        message: Value,
    },
    /// A server-to-client request (sampling, elicitation, roots, ping).
    Request {
        /// The id the handler gave it (unique within this run only).
        id: Value,
        /// Its method.
        method: String,
        /// The whole message.
        message: Value,
    },
    /// The response to the request: the run's outcome. Nothing follows it.
    Outcome(Value),
}

impl Outbound {
    /// What it is, for logs that must not show its content: its method, or `outcome`.
    pub fn kind(&self) -> &str {
        match self {
            Self::Notification { method, .. } | Self::Request { method, .. } => method,
            Self::Outcome(_) => "outcome",
        }
    }
}

/// What the handler knows of the client for one request.
#[derive(Debug, Clone, Default)]
pub struct PeerContext {
    /// The protocol version of this request (negotiated in the session, or per request).
    pub protocol_version: Option<String>,
    /// The client's `initialize` params, for legacy-era sessions.
    pub client: Option<Value>,
    /// The session's durable state, inserted into the request's extensions.
    pub session_state: Option<crate::SessionState>,
    /// The server's durable state, inserted into the request's extensions.
    pub server_state: Option<crate::ServerState>,
    /// The durable context of a journaled request, inserted into the request's extensions.
    pub durable: Option<crate::Durable>,
    /// The server's `requestState` keys, inserted into the request's extensions.
    pub state_keys: Option<crate::StateKeys>,
    /// The authenticated caller, inserted into the request's extensions.
    pub auth: Option<crate::AuthInfo>,
    /// Where the handler sends messages outside the request, inserted into the request's
    /// extensions.
    pub outbox: Option<crate::Outbox>,
    /// The request's legacy-era session: with a handler factory, which instance serves it.
    pub session: Option<String>,
    /// The HTTP request's head (method, URI, headers, the app's extensions), inserted into
    /// the request's extensions as rmcp's own HTTP service does (`Extension<Parts>`).
    pub http: Option<http::request::Parts>,
}

/// A request running in its handler.
pub struct Run {
    /// Messages the handler sends, ending with [`Outbound::Outcome`] (or closing without
    /// one if the run was cancelled).
    pub outbound: mpsc::Receiver<Outbound>,
    /// Deliver the client's response to one of the handler's requests (the whole JSON-RPC
    /// response, with the id the handler used).
    pub replies: mpsc::Sender<Value>,
    /// Cancel the handler.
    pub cancel: CancellationToken,
    /// The request's rmcp service loop: it ends when this run is dropped (after its
    /// outcome, the loop has ended by itself).
    _service: ServiceGuard,
    /// Closes when the task running the handler is gone (it returned, or panicked).
    handled: oneshot::Receiver<()>,
    /// `handled` closed.
    gone: bool,
}

/// How long a run waits for its outcome after its handler's task is gone: rmcp's service
/// loop sends the response it was handed after the task ended.
const HANDLER_GONE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

impl Run {
    /// The handler's next message; `None` once it has no more: after its outcome, or when
    /// the handler ended without one (it panicked: rmcp's loop lives on, and without this
    /// the run would wait for an outcome that never comes).
    pub async fn next_outbound(&mut self) -> Option<Outbound> {
        if !self.gone {
            tokio::select! {
                biased;
                message = self.outbound.recv() => return message,
                _ = &mut self.handled => self.gone = true,
            }
        }
        tokio::time::timeout(HANDLER_GONE_GRACE, self.outbound.recv())
            .await
            .ok()
            .flatten()
    }
}

/// A summary of the server's static information.
#[derive(Debug, Clone)]
pub struct ServerSummary {
    /// The server's name and version (`serverInfo`).
    pub server_info: Value,
    /// Capabilities, as JSON.
    pub capabilities: Value,
    /// Protocol versions the handler supports, oldest first.
    pub supported_versions: Vec<String>,
}

/// A running rmcp service loop of one request: it runs until its request is answered or
/// its token is cancelled, and dropping this guard cancels it (rmcp's own drop guard).
/// Held by the run instead of a task that only waits for the loop to end.
type ServiceGuard = Box<dyn Send>;

trait ErasedHandler: Send + Sync + 'static {
    /// Serve `first` in a service loop of its own; `alive` is dropped when the handler's
    /// future for it is gone ([`Watched`]).
    fn start(
        &self,
        first: ClientJsonRpcMessage,
        peer: Option<InitializeRequestParams>,
        transport: RunTransport,
        ct: CancellationToken,
        alive: oneshot::Sender<()>,
    ) -> ServiceGuard;
    fn summary(&self) -> ServerSummary;
    fn tool_input_schema(&self, name: &str) -> Option<Value>;
    fn tool_task_support(&self, name: &str) -> crate::TaskSupport;
    fn tool_required_scopes(&self, name: &str) -> Vec<String>;
}

impl<H> ErasedHandler for H
where
    H: rmcp::ServerHandler + Clone,
{
    fn start(
        &self,
        first: ClientJsonRpcMessage,
        peer: Option<InitializeRequestParams>,
        mut transport: RunTransport,
        ct: CancellationToken,
        alive: oneshot::Sender<()>,
    ) -> ServiceGuard {
        transport.first = Some(first);
        let watched = Watched {
            inner: self.clone(),
            alive: std::sync::Mutex::new(Some(alive)),
        };
        Box::new(serve_directly_with_ct(watched, transport, peer, ct))
    }

    fn summary(&self) -> ServerSummary {
        let info = self.get_info();
        ServerSummary {
            server_info: serde_json::to_value(&info.server_info).unwrap_or(Value::Null),
            capabilities: serde_json::to_value(&info.capabilities).unwrap_or(Value::Null),
            supported_versions: rmcp::ServerHandler::supported_protocol_versions(self)
                .iter()
                .map(|v| v.as_str().to_owned())
                .collect(),
        }
    }

    fn tool_input_schema(&self, name: &str) -> Option<Value> {
        rmcp::ServerHandler::get_tool(self, name)
            .map(|tool| Value::Object((*tool.input_schema).clone()))
    }

    fn tool_task_support(&self, name: &str) -> crate::TaskSupport {
        rmcp::ServerHandler::get_tool(self, name).map_or(crate::TaskSupport::Forbidden, |tool| {
            crate::tasks::declared(tool.meta.as_ref())
        })
    }

    fn tool_required_scopes(&self, name: &str) -> Vec<String> {
        rmcp::ServerHandler::get_tool(self, name)
            .map(|tool| crate::auth::declared(tool.meta.as_ref()))
            .unwrap_or_default()
    }
}

/// How long, at most, [`McpHandler::notify`] keeps the rmcp service loop of one client
/// notification running for its handler (which rmcp runs in a task of its own). The loop
/// ends sooner, when the handler is done (or sends something): its channels (some ten KiB)
/// are not held for the whole window by a handler that returned at once, as a burst of
/// `notifications/initialized` would otherwise hold them for a burst's worth of sessions.
pub const NOTIFY_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// A user's handler as the service of one request's (or notification's) loop: the future
/// that handles its one message holds `alive`, so that the receiver closes when that
/// future is gone: the handler returned, or panicked (rmcp runs it in a task of its own,
/// and its loop lives on after a panic). Not the message's extensions: rmcp's routers drop
/// those as soon as a tool's arguments are extracted, long before the tool returns.
struct Watched<H> {
    inner: H,
    alive: std::sync::Mutex<Option<oneshot::Sender<()>>>,
}

impl<H> Watched<H> {
    fn take_alive(&self) -> Option<oneshot::Sender<()>> {
        self.alive
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl<H: rmcp::ServerHandler> rmcp::Service<RoleServer> for Watched<H> {
    fn handle_request(
        &self,
        request: rmcp::model::ClientRequest,
        context: rmcp::service::RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<rmcp::model::ServerResult, rmcp::ErrorData>>
    + rmcp::service::MaybeSendFuture
    + '_ {
        let alive = self.take_alive();
        async move {
            let _alive = alive;
            rmcp::Service::handle_request(&self.inner, request, context).await
        }
    }

    fn handle_notification(
        &self,
        notification: rmcp::model::ClientNotification,
        context: rmcp::service::NotificationContext<RoleServer>,
    ) -> impl Future<Output = Result<(), rmcp::ErrorData>> + rmcp::service::MaybeSendFuture + '_
    {
        let alive = self.take_alive();
        async move {
            let _alive = alive;
            rmcp::Service::handle_notification(&self.inner, notification, context).await
        }
    }

    fn get_info(&self) -> <RoleServer as rmcp::service::ServiceRole>::Info {
        rmcp::Service::get_info(&self.inner)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        rmcp::Service::supported_protocol_versions(&self.inner)
    }
}

/// A user's MCP server, type-erased: what the engine runs requests on.
#[derive(Clone)]
pub struct McpHandler {
    instances: Instances,
    /// Client notifications whose service loop is still open ([`McpHandler::notify`]).
    notifying: Arc<AtomicUsize>,
}

/// Which handler instance serves a request.
#[derive(Clone)]
enum Instances {
    /// One instance, cloned for every request ([`McpHandler::new`]).
    Shared(Arc<dyn ErasedHandler>),
    /// Made by a factory ([`McpHandler::from_factory`]).
    Factory(Arc<Factory>),
}

/// A handler factory, and the instances it made for the sessions this worker serves.
struct Factory {
    make: Box<dyn Fn() -> std::io::Result<Arc<dyn ErasedHandler>> + Send + Sync>,
    /// The instance the server's static information (tools, capabilities) is read from.
    prototype: Arc<dyn ErasedHandler>,
    /// Each session's instance on this worker, with when a request last used it.
    sessions: std::sync::Mutex<SessionInstances>,
}

/// Session id → the session's instance and when a request last used it.
type SessionInstances =
    std::collections::HashMap<String, (Arc<dyn ErasedHandler>, std::time::Instant)>;

impl Factory {
    fn sessions(&self) -> std::sync::MutexGuard<'_, SessionInstances> {
        // A panic elsewhere while holding the lock leaves the map whole (every change is
        // one insert or remove).
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for McpHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHandler").finish_non_exhaustive()
    }
}

impl McpHandler {
    /// Wrap an rmcp server handler. It is cloned once per request, as rmcp's own HTTP
    /// service does, so keep shared state behind `Arc`s.
    pub fn new<H>(handler: H) -> Self
    where
        H: rmcp::ServerHandler + Clone,
    {
        Self {
            instances: Instances::Shared(Arc::new(handler)),
            notifying: Arc::default(),
        }
    }

    /// Wrap a factory of rmcp server handlers, as rmcp's `StreamableHttpService::new`
    /// takes one. On each worker, a legacy-era session gets an instance of its own, made
    /// for its `initialize` (or, on a worker that did not see it, for the session's first
    /// request there) and used for every request and notification of the session on that
    /// worker; it is dropped when the session ends or has been idle for the session TTL
    /// ([`McpHandler::forget_idle`]). A request without a session (2026-07-28) gets a new
    /// instance, as under rmcp's stateless mode. The factory is called once here, for the
    /// server's static information; its error is returned.
    ///
    /// An instance lives in one worker's memory: a restarted worker, or another worker of
    /// the same session, starts from a new one. Keep what must survive in `SessionState`.
    pub fn from_factory<H, F>(factory: F) -> std::io::Result<Self>
    where
        H: rmcp::ServerHandler + Clone,
        F: Fn() -> std::io::Result<H> + Send + Sync + 'static,
    {
        let make = move || factory().map(|handler| Arc::new(handler) as Arc<dyn ErasedHandler>);
        let prototype = make()?;
        let factory = Factory {
            make: Box::new(make),
            prototype,
            sessions: Default::default(),
        };
        Ok(Self {
            instances: Instances::Factory(Arc::new(factory)),
            notifying: Arc::default(),
        })
    }

    /// The instance that answers for the server's static information.
    fn prototype(&self) -> &dyn ErasedHandler {
        match &self.instances {
            Instances::Shared(handler) => handler.as_ref(),
            Instances::Factory(factory) => factory.prototype.as_ref(),
        }
    }

    /// The instance that serves a request of `session` (`None`: a request without one).
    fn instance(&self, session: Option<&str>) -> std::io::Result<Arc<dyn ErasedHandler>> {
        let factory = match &self.instances {
            Instances::Shared(handler) => return Ok(Arc::clone(handler)),
            Instances::Factory(factory) => factory,
        };
        let Some(session) = session else {
            return (factory.make)();
        };
        let now = std::time::Instant::now();
        if let Some((instance, used)) = factory.sessions().get_mut(session) {
            *used = now;
            return Ok(Arc::clone(instance));
        }
        // Made outside the lock (the factory is the user's code); a concurrent first
        // request of the same session keeps whichever was inserted first.
        let made = (factory.make)()?;
        let mut sessions = factory.sessions();
        let (instance, _) = sessions.entry(session.to_owned()).or_insert((made, now));
        Ok(Arc::clone(instance))
    }

    /// Drop the instance of `session` on this worker (the session ended).
    pub fn end_session(&self, session: &str) {
        if let Instances::Factory(factory) = &self.instances {
            factory.sessions().remove(session);
        }
    }

    /// Drop the session instances no request used for `idle`; returns how many are left.
    pub fn forget_idle(&self, idle: std::time::Duration) -> usize {
        match &self.instances {
            Instances::Shared(_) => 0,
            Instances::Factory(factory) => {
                let mut sessions = factory.sessions();
                sessions.retain(|_, (_, used)| used.elapsed() < idle);
                sessions.len()
            }
        }
    }

    /// How many client notifications delivered by [`McpHandler::notify`] still have their
    /// rmcp service loop open: those whose handler has not finished yet, within
    /// [`NOTIFY_WINDOW`]. An idle session leaves none.
    pub fn notifications_in_flight(&self) -> usize {
        self.notifying.load(Ordering::SeqCst)
    }

    /// The server's static information.
    pub fn summary(&self) -> ServerSummary {
        self.prototype().summary()
    }

    /// The input schema of tool `name`, if the handler has such a tool.
    pub fn tool_input_schema(&self, name: &str) -> Option<Value> {
        self.prototype().tool_input_schema(name)
    }

    /// The task support tool `name` declares (see [`crate::tasks`]).
    pub fn tool_task_support(&self, name: &str) -> crate::TaskSupport {
        self.prototype().tool_task_support(name)
    }

    /// The scopes tool `name` declares it needs (see [`crate::auth`]); none for an
    /// unknown tool.
    pub fn tool_required_scopes(&self, name: &str) -> Vec<String> {
        self.prototype().tool_required_scopes(name)
    }

    /// Start running one request (a whole JSON-RPC request object). Rejects a request whose
    /// params do not fit its method with `-32602`.
    pub fn start(&self, request: Map<String, Value>, peer: &PeerContext) -> Result<Run, Rejection> {
        self.start_with_cancel(request, peer, CancellationToken::new())
    }

    /// [`McpHandler::start`] with the caller's own cancellation token (cancelling it
    /// cancels the handler; the run's [`Run::cancel`] is this token).
    pub fn start_with_cancel(
        &self,
        request: Map<String, Value>,
        peer: &PeerContext,
        cancel: CancellationToken,
    ) -> Result<Run, Rejection> {
        let id = request.get("id").cloned();
        let handler = self
            .instance(peer.session.as_deref())
            .map_err(|e| Rejection {
                code: code::INTERNAL_ERROR,
                message: format!("the server's handler factory failed: {e}"),
                id: id.clone(),
            })?;
        let mut message = parse_request(request).map_err(|e| Rejection {
            code: code::INVALID_PARAMS,
            message: format!("invalid params: {e}"),
            id,
        })?;
        // `handled` closes once the handler's future is gone, returned or panicked.
        let (alive, handled) = oneshot::channel::<()>();
        if let ClientJsonRpcMessage::Request(request) = &mut message {
            if let Some(state) = &peer.session_state {
                request.request.extensions_mut().insert(state.clone());
            }
            if let Some(state) = &peer.server_state {
                request.request.extensions_mut().insert(state.clone());
            }
            if let Some(durable) = &peer.durable {
                request.request.extensions_mut().insert(durable.clone());
            }
            if let Some(keys) = &peer.state_keys {
                request.request.extensions_mut().insert(keys.clone());
            }
            if let Some(auth) = &peer.auth {
                request.request.extensions_mut().insert(auth.clone());
            }
            if let Some(outbox) = &peer.outbox {
                request.request.extensions_mut().insert(outbox.clone());
            }
            if let Some(parts) = &peer.http {
                request.request.extensions_mut().insert(parts.clone());
            }
        }
        let (out_tx, outbound) = mpsc::channel(64);
        let (replies, in_rx) = mpsc::channel(16);
        // `cancel` is the caller's alone: rmcp gets a child token (it cancels its own token
        // when its loop ends, which must not look like a client's cancellation), and `done`,
        // which ends the loop once the response is sent, is another child.
        let transport = RunTransport {
            first: None,
            incoming: in_rx,
            outbound: out_tx,
            done: cancel.child_token(),
        };
        let service = handler.start(
            message,
            peer_info(peer),
            transport,
            cancel.child_token(),
            alive,
        );
        Ok(Run {
            outbound,
            replies,
            cancel,
            _service: service,
            handled,
            gone: false,
        })
    }

    /// Deliver a client notification (`notifications/initialized`, `roots/list_changed`,
    /// ...) to the handler. Returns at once; the handler runs in the background, its
    /// service loop open until it is done or [`NOTIFY_WINDOW`] has passed. `notifications/cancelled` is the engine's business, not the
    /// handler's, and is not delivered.
    pub fn notify(&self, notification: Map<String, Value>, peer: &PeerContext) {
        let Ok(message) =
            serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(notification))
        else {
            return;
        };
        let handler = match self.instance(peer.session.as_deref()) {
            Ok(handler) => handler,
            Err(error) => {
                tracing::warn!(%error, "the server's handler factory failed; a client notification was not delivered");
                return;
            }
        };
        if matches!(&message, ClientJsonRpcMessage::Notification(n) if matches!(n.notification, ClientNotification::CancelledNotification(_)))
        {
            return;
        }
        // `handled` closes once the handler's future is gone, and then the loop has nothing
        // left to serve.
        let (done_tx, handled) = oneshot::channel::<()>();
        let (out_tx, mut outbound) = mpsc::channel(8);
        let (replies, in_rx) = mpsc::channel(1);
        let cancel = CancellationToken::new();
        let transport = RunTransport {
            first: None,
            incoming: in_rx,
            outbound: out_tx,
            done: cancel.child_token(),
        };
        let service = handler.start(message, peer_info(peer), transport, cancel.clone(), done_tx);
        let notifying = Arc::clone(&self.notifying);
        notifying.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let _keep_open = (replies, service);
            // Whichever comes first: the handler sent something (which the client of a
            // notification never sees), its task ended, or the window is over.
            let _ = tokio::time::timeout(NOTIFY_WINDOW, async {
                tokio::select! {
                    _ = outbound.recv() => {}
                    _ = handled => {}
                }
            })
            .await;
            cancel.cancel();
            notifying.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// A request as rmcp's message type. `tools/call`, the hot path, is read as its own type
/// at once: rmcp's generic parse tries each request type in turn (building an error for
/// each that does not fit) before it reaches it. Anything else, and a `tools/call` that
/// does not fit its type, takes rmcp's generic parse, so what rmcp makes of a message is
/// unchanged.
fn parse_request(request: Map<String, Value>) -> Result<ClientJsonRpcMessage, serde_json::Error> {
    let body = Value::Object(request);
    match call_tool(&body) {
        Some(message) => Ok(message),
        None => serde_json::from_value(body),
    }
}

/// A `tools/call` request read as its own type; `None` if `body` is not one that fits it.
fn call_tool(body: &Value) -> Option<ClientJsonRpcMessage> {
    use rmcp::model::{CallToolRequest, ClientRequest, JsonRpcRequest, RequestId};
    if body.get("method").and_then(Value::as_str) != Some("tools/call")
        || body.get("jsonrpc").and_then(Value::as_str) != Some("2.0")
    {
        return None;
    }
    let id = RequestId::deserialize(body.get("id")?).ok()?;
    let call = CallToolRequest::deserialize(body).ok()?;
    Some(ClientJsonRpcMessage::Request(JsonRpcRequest::new(
        id,
        ClientRequest::CallToolRequest(call),
    )))
}

fn peer_info(peer: &PeerContext) -> Option<InitializeRequestParams> {
    let version: ProtocolVersion = peer
        .protocol_version
        .as_deref()
        .and_then(|v| {
            ProtocolVersion::deserialize(
                serde::de::value::StrDeserializer::<serde_json::Error>::new(v),
            )
            .ok()
        })
        .unwrap_or(ProtocolVersion::V_2025_03_26);
    // Read from the stored value in place (no copy of it).
    let mut params: InitializeRequestParams = peer
        .client
        .as_ref()
        .and_then(|c| InitializeRequestParams::deserialize(c).ok())
        .unwrap_or_else(|| {
            InitializeRequestParams::new(Default::default(), rmcp::model::Implementation::default())
        });
    params.protocol_version = version;
    Some(params)
}

/// The rmcp transport of one run.
struct RunTransport {
    first: Option<ClientJsonRpcMessage>,
    incoming: mpsc::Receiver<Value>,
    outbound: mpsc::Sender<Outbound>,
    done: CancellationToken,
}

/// The run's outbound channel closed: nobody is listening any more.
#[derive(Debug, thiserror::Error)]
#[error("the request's outbound channel is closed")]
pub struct Closed;

impl Transport<RoleServer> for RunTransport {
    type Error = Closed;

    fn name() -> Cow<'static, str> {
        "durable-mcp run".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Closed>> + Send + 'static {
        let sender = self.outbound.clone();
        let done = self.done.clone();
        async move {
            let outbound = to_outbound(item).map_err(|_| Closed)?;
            let terminal = matches!(outbound, Outbound::Outcome(_));
            sender.send(outbound).await.map_err(|_| Closed)?;
            if terminal {
                // The request is answered: end the service loop.
                done.cancel();
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        loop {
            tokio::select! {
                reply = self.incoming.recv() => match reply {
                    Some(value) => match serde_json::from_value(value) {
                        Ok(message) => return Some(message),
                        Err(error) => tracing::debug!(%error, "dropping malformed reply"),
                    },
                    None => {
                        self.done.cancelled().await;
                        return None;
                    }
                },
                () = self.done.cancelled() => return None,
            }
        }
    }

    async fn close(&mut self) -> Result<(), Closed> {
        Ok(())
    }
}

fn to_outbound(item: ServerJsonRpcMessage) -> Result<Outbound, serde_json::Error> {
    let terminal = matches!(
        item,
        ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
    );
    let message = serde_json::to_value(&item)?;
    if terminal {
        return Ok(Outbound::Outcome(message));
    }
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Ok(match message.get("id") {
        Some(id) => Outbound::Request {
            id: id.clone(),
            method,
            message: message.clone(),
        },
        None => Outbound::Notification { method, message },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Quiet;

    impl rmcp::ServerHandler for Quiet {}

    fn initialized() -> Map<String, Value> {
        match serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}) {
            Value::Object(map) => map,
            _ => unreachable!("an object literal"),
        }
    }

    /// Idle sessions must cost the worker nothing: a `notifications/initialized` whose
    /// handler is done at once must not keep its service loop (and its channels) for the
    /// rest of [`NOTIFY_WINDOW`]. Virtual time: the clock moves only when every task waits.
    #[tokio::test(start_paused = true)]
    async fn a_notification_handled_at_once_closes_its_service_loop_within_the_window() {
        let handler = McpHandler::new(Quiet);
        let peer = PeerContext {
            protocol_version: Some("2025-11-25".into()),
            ..PeerContext::default()
        };
        for _ in 0..100 {
            handler.notify(initialized(), &peer);
        }
        assert_eq!(handler.notifications_in_flight(), 100);
        tokio::time::sleep(NOTIFY_WINDOW / 2).await;
        assert_eq!(
            handler.notifications_in_flight(),
            0,
            "service loops of finished notifications still open"
        );
        tokio::time::sleep(NOTIFY_WINDOW).await;
        assert_eq!(handler.notifications_in_flight(), 0);
    }

    /// A tool that outlives its request context (as rmcp's tool router drops it once the
    /// arguments are extracted), or panics.
    #[derive(Clone)]
    struct Lasting;

    impl rmcp::ServerHandler for Lasting {
        async fn call_tool(
            &self,
            request: rmcp::model::CallToolRequestParams,
            context: rmcp::service::RequestContext<RoleServer>,
        ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
            drop(context);
            if request.name == "panics" {
                panic!("a bug in the tool");
            }
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            Ok(rmcp::model::CallToolResult::success(Vec::new()).into())
        }
    }

    fn call(name: &str) -> Map<String, Value> {
        match serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": {}}})
        {
            Value::Object(map) => map,
            _ => unreachable!("an object literal"),
        }
    }

    /// A handler that runs far longer than [`HANDLER_GONE_GRACE`] is not taken for gone
    /// (its run would be re-run while it still runs); one that panics is, after the grace.
    #[tokio::test(start_paused = true)]
    async fn a_long_handler_is_waited_for_and_a_panicked_one_is_not() {
        let handler = McpHandler::new(Lasting);
        let peer = PeerContext {
            protocol_version: Some("2025-11-25".into()),
            ..PeerContext::default()
        };
        let mut run = handler.start(call("lasts"), &peer).unwrap();
        let started = tokio::time::Instant::now();
        match run.next_outbound().await {
            Some(Outbound::Outcome(outcome)) => assert!(outcome.get("result").is_some()),
            other => panic!("no outcome: {other:?}"),
        }
        assert!(started.elapsed() >= std::time::Duration::from_secs(60));

        let mut run = handler.start(call("panics"), &peer).unwrap();
        let started = tokio::time::Instant::now();
        assert!(
            run.next_outbound().await.is_none(),
            "a panicked handler is gone"
        );
        assert!(started.elapsed() <= HANDLER_GONE_GRACE + std::time::Duration::from_secs(1));
    }

    #[test]
    fn a_tools_call_is_read_as_one_directly_and_as_rmcp_reads_it() {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": "p"}}});
        let direct = call_tool(&body).expect("the direct read fits a tools/call");
        let generic: ClientJsonRpcMessage = serde_json::from_value(body).unwrap();
        assert_eq!(
            serde_json::to_value(&direct).unwrap(),
            serde_json::to_value(&generic).unwrap()
        );
        assert!(call_tool(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}})).is_none());
        assert!(
            call_tool(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
                .is_none()
        );
    }
}

//! What durable-mcp gives a handler beyond rmcp's own context, through the request's
//! extensions (rmcp's `Extension<T>` extractor works in `#[tool]` functions).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a session- or server-state operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The session ended (or expired) meanwhile.
    #[error("the session has ended")]
    SessionEnded,
    /// The request has no session: [`SessionState`] of a 2026-07-28 request, which is
    /// stateless.
    #[error(
        "a {protocol_version} request has no session (sessions end with protocol 2025-11-25): keep this state in ServerState under a key the client sends, or in the client's requestState"
    )]
    NoSession {
        /// The request's protocol version.
        protocol_version: String,
    },
    /// The stored value is not of the requested type.
    #[error("state {key:?} does not decode: {source}")]
    Decode {
        /// The key.
        key: String,
        /// The decoding error.
        source: serde_json::Error,
    },
    /// The value could not be encoded.
    #[error("state {key:?} does not encode: {source}")]
    Encode {
        /// The key.
        key: String,
        /// The encoding error.
        source: serde_json::Error,
    },
    /// Too many concurrent writers kept changing the key.
    #[error("state {0:?} kept changing concurrently; gave up")]
    Contended(String),
    /// The store failed.
    #[error("store error: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
}

/// A boxed future, for the object-safe backend trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where durable state lives (implemented by the engine over the store): a session's
/// ([`SessionState`]) or the server's ([`ServerState`]).
pub trait StateBackend: Send + Sync + 'static {
    /// Whose state it is: the session's id, or `"server"`.
    fn scope(&self) -> &str;
    /// The current value of `key`.
    fn load<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>>;
    /// Store `value` under `key` if it still holds `expected`; `Ok(false)` on a conflict.
    fn compare_and_set<'a>(
        &'a self,
        key: &'a str,
        expected: Option<Value>,
        value: Option<Value>,
    ) -> BoxFuture<'a, Result<bool, StateError>>;
}

/// Durable per-session application state, shared by every worker serving the session and
/// deleted with it.
///
/// Every request's extensions hold one, in both eras. Only a legacy-era request (protocol
/// 2025-11-25 and earlier) has a session: in a 2026-07-28 request, which is stateless,
/// [`session_id`](Self::session_id) is `None` and every operation fails with
/// [`StateError::NoSession`], which names the protocol version (and, through `?` in a
/// tool, reaches the client as an internal error saying so).
///
/// # Durability
/// In plain words: what `update` returns has been committed, and no update is lost when
/// several requests (on any workers) update the same key at once. Stated more precisely:
/// `update` is a compare-and-set loop over the store's atomic session update; a concurrent
/// change makes it re-read and re-apply the closure, so the closure may run more than once
/// and must not have side effects.
///
/// A handler finds it in rmcp's request extensions (`ctx.extensions.get::<SessionState>()`,
/// or the `Extension<SessionState>` extractor in a `#[tool]` function):
///
/// ```no_run
/// use durable_mcp_handler::{SessionState, StateError};
///
/// /// Count this session's calls; correct however many workers serve it at once.
/// async fn count(state: &SessionState) -> Result<u64, StateError> {
///     state.update("calls", |n: Option<u64>| n.unwrap_or(0) + 1).await
/// }
/// ```
#[derive(Clone)]
pub struct SessionState {
    core: StateCore,
    /// Whether the request has a session (`false`: the backend is [`NoSession`]).
    has_session: bool,
}

impl std::fmt::Debug for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionState")
            .field("session", &self.session_id())
            .finish()
    }
}

/// The backend of a request without a session: every operation is refused, naming the
/// request's protocol version.
struct NoSession {
    protocol_version: String,
}

impl NoSession {
    fn refused(&self) -> StateError {
        StateError::NoSession {
            protocol_version: self.protocol_version.clone(),
        }
    }
}

impl StateBackend for NoSession {
    fn scope(&self) -> &str {
        ""
    }

    fn load<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<Option<Value>, StateError>> {
        Box::pin(std::future::ready(Err(self.refused())))
    }

    fn compare_and_set<'a>(
        &'a self,
        _key: &'a str,
        _expected: Option<Value>,
        _value: Option<Value>,
    ) -> BoxFuture<'a, Result<bool, StateError>> {
        Box::pin(std::future::ready(Err(self.refused())))
    }
}

/// Durable application state of the whole server, shared by every worker (a switch, a
/// counter, a configuration value): what a handler would otherwise keep in its own memory,
/// where each worker would see its own copy. Present in every request's extensions when
/// the server runs under durable-mcp (`ctx.extensions.get::<ServerState>()`, or the
/// `Extension<ServerState>` extractor), in both protocol eras.
///
/// # Durability
/// As for [`SessionState`]: what `update` returns has been committed, and no concurrent
/// update is lost (a compare-and-set loop over the store's journal records; the closure may
/// run more than once). It is kept until removed.
#[derive(Clone)]
pub struct ServerState {
    core: StateCore,
}

impl std::fmt::Debug for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerState").finish_non_exhaustive()
    }
}

/// What [`SessionState`] and [`ServerState`] share.
#[derive(Clone)]
struct StateCore {
    backend: Arc<dyn StateBackend>,
}

/// How many times `update` retries under contention before giving up.
const MAX_ATTEMPTS: usize = 64;

impl SessionState {
    /// A handle over `backend`.
    pub fn new(backend: Arc<dyn StateBackend>) -> Self {
        Self {
            core: StateCore { backend },
            has_session: true,
        }
    }

    /// The state of a request that has no session (a 2026-07-28 request at
    /// `protocol_version`): every operation fails with [`StateError::NoSession`].
    pub fn without_session(protocol_version: impl Into<String>) -> Self {
        Self {
            core: StateCore {
                backend: Arc::new(NoSession {
                    protocol_version: protocol_version.into(),
                }),
            },
            has_session: false,
        }
    }

    /// The session this state belongs to; `None` in a request without a session.
    pub fn session_id(&self) -> Option<&str> {
        self.has_session.then(|| self.core.backend.scope())
    }
}

impl From<StateError> for rmcp::ErrorData {
    /// An ended session is the client's to fix (`-32600`); anything else is the server's
    /// (`-32603`), with the error's text.
    fn from(error: StateError) -> Self {
        match error {
            StateError::SessionEnded => rmcp::ErrorData::invalid_request(error.to_string(), None),
            other => rmcp::ErrorData::internal_error(other.to_string(), None),
        }
    }
}

impl ServerState {
    /// A handle over `backend`.
    pub fn new(backend: Arc<dyn StateBackend>) -> Self {
        Self {
            core: StateCore { backend },
        }
    }
}

/// The same operations on both kinds of state.
macro_rules! state_operations {
    ($state:ty) => {
        impl $state {
            /// The value stored under `key`, if any.
            pub async fn get<T: DeserializeOwned>(
                &self,
                key: &str,
            ) -> Result<Option<T>, StateError> {
                self.core.get(key).await
            }

            /// Replace the value under `key` with `f(current)` and return the new value,
            /// without losing concurrent updates (see the type's `# Durability`).
            pub async fn update<T, F>(&self, key: &str, f: F) -> Result<T, StateError>
            where
                T: Serialize + DeserializeOwned,
                F: FnMut(Option<T>) -> T,
            {
                self.core.update(key, f).await
            }

            /// Remove `key`.
            pub async fn remove(&self, key: &str) -> Result<(), StateError> {
                self.core.remove(key).await
            }
        }
    };
}

state_operations!(SessionState);
state_operations!(ServerState);

impl StateCore {
    /// The value stored under `key`, if any.
    async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StateError> {
        match self.backend.load(key).await? {
            None => Ok(None),
            Some(value) => {
                serde_json::from_value(value)
                    .map(Some)
                    .map_err(|source| StateError::Decode {
                        key: key.to_owned(),
                        source,
                    })
            }
        }
    }

    /// Replace the value under `key` with `f(current)` and return the new value, without
    /// losing concurrent updates (see the type's `# Durability`).
    async fn update<T, F>(&self, key: &str, mut f: F) -> Result<T, StateError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(Option<T>) -> T,
    {
        for _ in 0..MAX_ATTEMPTS {
            let raw = self.backend.load(key).await?;
            let current = match &raw {
                None => None,
                Some(value) => Some(serde_json::from_value(value.clone()).map_err(|source| {
                    StateError::Decode {
                        key: key.to_owned(),
                        source,
                    }
                })?),
            };
            let next = f(current);
            let encoded = serde_json::to_value(&next).map_err(|source| StateError::Encode {
                key: key.to_owned(),
                source,
            })?;
            if self
                .backend
                .compare_and_set(key, raw, Some(encoded))
                .await?
            {
                return Ok(next);
            }
        }
        Err(StateError::Contended(key.to_owned()))
    }

    /// Remove `key`.
    async fn remove(&self, key: &str) -> Result<(), StateError> {
        for _ in 0..MAX_ATTEMPTS {
            let raw = self.backend.load(key).await?;
            if raw.is_none() || self.backend.compare_and_set(key, raw, None).await? {
                return Ok(());
            }
        }
        Err(StateError::Contended(key.to_owned()))
    }
}

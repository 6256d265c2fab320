//! Who the caller is, as the handler sees it, and which scopes a tool needs.
//!
//! A tool declares the OAuth scopes it needs in its `_meta`, next to it, with
//! [`required_scopes`] in rmcp's `#[tool(meta = ...)]` attribute:
//!
//! ```no_run
//! use durable_mcp_handler::{AuthInfo, required_scopes};
//! use rmcp::handler::server::tool::Extension;
//! use rmcp::model::{CallToolResult, ContentBlock};
//! use rmcp::{ErrorData as McpError, tool, tool_router};
//!
//! #[derive(Clone)]
//! struct Files;
//!
//! #[tool_router]
//! impl Files {
//!     #[tool(description = "Delete a file", meta = required_scopes(&["files:write"]))]
//!     async fn delete(&self, Extension(auth): Extension<AuthInfo>) -> Result<CallToolResult, McpError> {
//!         Ok(CallToolResult::success(vec![ContentBlock::text(format!("deleted for {}", auth.principal))]))
//!     }
//! }
//! ```
//!
//! The HTTP transport checks a `tools/call`'s scopes before the call runs (and before
//! anything of it is written): a caller without them is answered HTTP 403
//! `insufficient_scope` naming the complete set. Handlers read the caller from the
//! request's extensions as [`AuthInfo`]: its principal, scopes and the token's claims
//! (never the token).

use std::sync::Arc;

use rmcp::model::MetaObject;
use serde_json::{Map, Value};

/// The `_meta` key under which a tool declares the scopes it needs.
pub const REQUIRED_SCOPES_META: &str = "io.durable-mcp/requiredScopes";

/// The tool `_meta` declaring `scopes`, for `#[tool(meta = required_scopes(&[...]))]`.
pub fn required_scopes(scopes: &[&str]) -> MetaObject {
    let mut meta = Map::new();
    meta.insert(
        REQUIRED_SCOPES_META.into(),
        Value::Array(
            scopes
                .iter()
                .map(|s| Value::String((*s).to_owned()))
                .collect(),
        ),
    );
    MetaObject(meta)
}

/// `required_scopes` and `task_support` in one `_meta`.
pub fn merge_meta(a: MetaObject, b: MetaObject) -> MetaObject {
    let mut meta = a.0;
    meta.extend(b.0);
    MetaObject(meta)
}

/// The scopes a tool's `_meta` declares.
pub(crate) fn declared(meta: Option<&MetaObject>) -> Vec<String> {
    meta.and_then(|m| m.0.get(REQUIRED_SCOPES_META))
        .and_then(Value::as_array)
        .map(|scopes| {
            scopes
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The authenticated caller of a request, in its extensions.
///
/// A request re-run by another worker after a crash (D7) runs as the principal recorded
/// with it; its scopes and claims are not recorded (the token is never stored), so they
/// are empty then and `recovered` is set.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuthInfo {
    /// The principal (`anonymous` without authentication, `oauth:<issuer>#<subject>`,
    /// `key:<id>`, `proxy:<name>`).
    pub principal: String,
    /// The scopes the caller's credentials grant.
    pub scopes: Vec<String>,
    /// The token's claims (JWT payload or introspection answer), shared.
    pub claims: Arc<Map<String, Value>>,
    /// Whether the request was taken over from another worker: claims and scopes are not
    /// known then.
    pub recovered: bool,
}

impl AuthInfo {
    /// The caller known by its principal alone (a re-run, or `initialize`).
    pub fn principal_only(principal: impl Into<String>) -> Self {
        Self {
            principal: principal.into(),
            ..Self::default()
        }
    }
}

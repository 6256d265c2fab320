//! Limits per principal at the HTTP edge (see [`durable_mcp_engine::limits`]): every
//! authenticated request takes a token of its principal's rate, a POST holds a unit of
//! its requests in flight and a GET one of its SSE streams, until its response body ends.
//! Sessions and tasks are counted by the engine, which refuses them before it writes.

use axum::response::Response;
use durable_mcp_engine::limits::{Limit, Permit};
use durable_mcp_store::Principal;

use crate::{Rejection, Transport};

impl Transport {
    /// Take a token of `principal`'s request rate.
    pub(crate) fn check_rate(&self, principal: &Principal) -> Result<(), Rejection> {
        self.engine
            .limiter()
            .rate(principal)
            .map_err(Rejection::Limited)
    }

    /// A unit of `limit` for `principal`, held by the response it is given to ([`hold`]).
    pub(crate) fn permit(
        &self,
        principal: &Principal,
        limit: Limit,
    ) -> Result<Option<Permit>, Rejection> {
        self.engine
            .limiter()
            .acquire(principal, limit)
            .map_err(Rejection::Limited)
    }
}

/// `response`, holding `permit` until its body is written to the end or dropped.
pub(crate) fn hold(response: Response, permit: Option<Permit>) -> Response {
    match permit {
        None => response,
        Some(permit) => crate::serve::Holding::response(response, permit),
    }
}

//! Limits per principal at the HTTP edge (see [`durable_mcp_engine::limits`]): every
//! authenticated request takes a token of its principal's rate, a POST holds a unit of
//! its requests in flight and a GET one of its SSE streams, until its response body ends.
//! Sessions and tasks are counted by the engine, which refuses them before it writes.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use durable_mcp_engine::limits::{Limit, Permit};
use durable_mcp_store::Principal;

use crate::{Rejection, Transport};

impl Transport {
    /// Take a token of `principal`'s request rate.
    pub(crate) fn check_rate(&self, principal: &Principal) -> Result<(), Rejection> {
        self.engine.limiter().rate(principal).map_err(Rejection::Limited)
    }

    /// A unit of `limit` for `principal`, held by the response it is given to ([`hold`]).
    pub(crate) fn permit(&self, principal: &Principal, limit: Limit) -> Result<Option<Permit>, Rejection> {
        self.engine.limiter().acquire(principal, limit).map_err(Rejection::Limited)
    }
}

/// `response`, holding `permit` until its body is written to the end or dropped.
pub(crate) fn hold(response: Response, permit: Option<Permit>) -> Response {
    match permit {
        None => response,
        Some(permit) => response.map(|body| Body::new(Holding { body, _permit: permit })),
    }
}

/// A response body that keeps a limit's unit until hyper is done with it.
struct Holding {
    body: Body,
    _permit: Permit,
}

impl http_body::Body for Holding {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

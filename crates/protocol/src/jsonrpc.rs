//! JSON-RPC 2.0 framing shared by every transport: classification of inbound messages and
//! the error codes durable-mcp answers with. Independent of rmcp on purpose: a malformed
//! message is rejected here, before any handler sees it.

use serde_json::{Map, Value, json};

/// JSON-RPC and MCP error codes.
pub mod code {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Generic server error used for transport-level rejections (bad session, headers).
    pub const SERVER_ERROR: i64 = -32000;
    /// Resource not found (MCP).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// A header does not match the body (2026-07-28).
    pub const HEADER_MISMATCH: i64 = -32020;
    /// A client capability the request needs was not declared (2026-07-28).
    pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    /// The requested protocol version is not supported (2026-07-28).
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// A forwarded request was interrupted (its upstream process or the worker died before
    /// its outcome) and was not sent again, because sending it again is not known to be
    /// safe (`durable-mcp proxy`).
    pub const UPSTREAM_INTERRUPTED: i64 = -32030;
    /// The upstream could not serve the request: it could not be started or initialized,
    /// or this worker has no room for another upstream process (`durable-mcp proxy`).
    pub const UPSTREAM_UNAVAILABLE: i64 = -32031;
}

/// A JSON-RPC id: a string or a number (null is not an id of a request).
pub type RequestId = Value;

/// One inbound JSON-RPC message, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// A request: expects exactly one response.
    Request {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// The whole message.
        message: Map<String, Value>,
    },
    /// A notification: no response.
    Notification {
        /// Its method.
        method: String,
        /// The whole message.
        message: Map<String, Value>,
    },
    /// A response (result or error) to a request the server sent.
    Response {
        /// The id of the server's request.
        id: RequestId,
        /// The whole message.
        message: Map<String, Value>,
    },
}

/// Why a message was rejected, with the JSON-RPC error to answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct Rejection {
    /// The JSON-RPC error code.
    pub code: i64,
    /// A human-readable reason.
    pub message: String,
    /// The request id, when it could be read.
    pub id: Option<RequestId>,
}

impl Rejection {
    /// A rejection with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            id: None,
        }
    }

    /// The JSON-RPC error response for this rejection.
    pub fn to_response(&self) -> Value {
        error_response(
            self.id.clone().unwrap_or(Value::Null),
            self.code,
            &self.message,
            None,
        )
    }
}

/// `message` as JSON text, the form it is stored and sent in. Written by serde_json straight
/// into the string: `Value`'s `Display` (`to_string()`) goes through the formatting
/// machinery piece by piece, about twice the instructions for a response.
pub fn to_text(message: &Value) -> String {
    // Serializing a `Value` cannot fail (its map keys are strings).
    serde_json::to_string(message).unwrap_or_else(|_| message.to_string())
}

/// A JSON-RPC error response.
pub fn error_response(id: RequestId, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let (Some(data), Some(obj)) = (data, error.as_object_mut()) {
        obj.insert("data".into(), data);
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

fn valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// The id of `value` if it reads as a request (a string `method` and a valid id), for
/// error responses about a message that is refused before (or instead of) being classified.
pub fn request_id(value: &Value) -> Option<RequestId> {
    let message = value.as_object()?;
    message.get("method").filter(|m| m.is_string())?;
    message.get("id").filter(|id| valid_id(id)).cloned()
}

/// Classify one parsed JSON value as a JSON-RPC 2.0 message.
pub fn classify(value: Value) -> Result<Inbound, Rejection> {
    let Value::Object(message) = value else {
        return Err(Rejection::new(
            code::INVALID_REQUEST,
            "a JSON-RPC message must be an object",
        ));
    };
    let id = message.get("id").cloned();
    let reject = |reason: &str| Rejection {
        code: code::INVALID_REQUEST,
        message: reason.to_owned(),
        id: id.clone().filter(valid_id),
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(reject("\"jsonrpc\" must be \"2.0\""));
    }
    if let Some(params) = message.get("params")
        && !params.is_object()
        && !params.is_array()
    {
        return Err(reject("\"params\" must be an object"));
    }
    match (message.get("method"), id.clone()) {
        (Some(Value::String(method)), Some(id)) => {
            if !valid_id(&id) {
                return Err(reject("\"id\" must be a string or an integer"));
            }
            let method = method.clone();
            Ok(Inbound::Request {
                id,
                method,
                message,
            })
        }
        (Some(Value::String(method)), None) => {
            let method = method.clone();
            Ok(Inbound::Notification { method, message })
        }
        (Some(_), _) => Err(reject("\"method\" must be a string")),
        (None, Some(id)) if message.contains_key("result") || message.contains_key("error") => {
            if message.contains_key("result") == message.contains_key("error") {
                return Err(reject(
                    "a response has exactly one of \"result\" and \"error\"",
                ));
            }
            Ok(Inbound::Response { id, message })
        }
        _ => Err(reject("not a request, notification or response")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_shapes_are_invalid_requests() {
        for bad in [
            json!([]),
            json!(1),
            json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}),
            json!({"id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": 5}),
            json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": 3}),
            json!({"jsonrpc": "2.0", "id": 1}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}),
        ] {
            let err = classify(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(err.code, code::INVALID_REQUEST, "{bad}");
        }
    }

    #[test]
    fn messages_are_classified() {
        assert!(matches!(
            classify(json!({"jsonrpc": "2.0", "id": "a", "method": "ping"})),
            Ok(Inbound::Request { .. })
        ));
        assert!(matches!(
            classify(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            Ok(Inbound::Notification { .. })
        ));
        assert!(matches!(
            classify(json!({"jsonrpc": "2.0", "id": 3, "result": {}})),
            Ok(Inbound::Response { .. })
        ));
    }
}

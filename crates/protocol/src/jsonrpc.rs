//! JSON-RPC 2.0 framing shared by every transport: classification of inbound messages and
//! the error codes durable-mcp answers with. Independent of rmcp on purpose: a malformed
//! message is rejected here, before any handler sees it.

use serde_json::{Map, Value, json};

use crate::methods::Method;

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
    /// An operator ended the request (`durable-mcp runs cancel|kill`); the message says
    /// which, and why.
    pub const ENDED_BY_OPERATOR: i64 = -32040;
}

/// A JSON-RPC id: a string or a number (null is not an id of a request).
pub type RequestId = Value;

/// One inbound JSON-RPC message, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// A request: expects exactly one response.
    Request(Request),
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
            let method = Method::parse(method);
            Ok(Inbound::Request(Request {
                id,
                method,
                message,
            }))
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

/// A JSON-RPC request, read once where it comes in: its id, its [`Method`] and the whole
/// message, which the handler gets as it came. The engine reads the parameters it routes on
/// through the accessors here, never by digging in the message.
///
/// Stored (in a run record) as the message alone: the id and the method are read back from
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    id: RequestId,
    method: Method,
    message: Map<String, Value>,
}

impl Request {
    /// The request `message` under `id` (its `id` member is set to `id`); its method is
    /// read from the message (empty if it has none: a request built by the engine itself
    /// always names one).
    pub fn new(id: RequestId, mut message: Map<String, Value>) -> Self {
        message.insert("id".into(), id.clone());
        Self::read(id, message)
    }

    /// The request `message` under `id`, which the message already holds.
    fn read(id: RequestId, message: Map<String, Value>) -> Self {
        let method = Method::parse(Message::from_map(&message).method().unwrap_or(""));
        Self {
            id,
            method,
            message,
        }
    }

    /// A request read back from its message (a stored one).
    pub fn from_message(message: Map<String, Value>) -> Self {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        Self::read(id, message)
    }

    /// Its id.
    pub fn id(&self) -> &RequestId {
        &self.id
    }

    /// Its method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The whole message.
    pub fn message(&self) -> &Map<String, Value> {
        &self.message
    }

    /// The whole message, owned.
    pub fn into_message(self) -> Map<String, Value> {
        self.message
    }

    /// Its `params` as they came: an object, an array or absent (or null, in a request the
    /// engine did not classify).
    pub fn params_value(&self) -> Option<&Value> {
        self.message.get("params")
    }

    /// Its parameters (`params`), if they are an object.
    pub fn params(&self) -> Option<&Map<String, Value>> {
        self.message.get("params").and_then(Value::as_object)
    }

    /// Its parameters, to change, if they are an object.
    pub fn params_mut(&mut self) -> Option<&mut Map<String, Value>> {
        self.message
            .get_mut("params")
            .and_then(Value::as_object_mut)
    }

    /// Parameter `key`.
    pub fn param(&self, key: &str) -> Option<&Value> {
        Message::from_map(&self.message).param(key)
    }

    /// Parameter `key`, if it is a string.
    pub fn param_str(&self, key: &str) -> Option<&str> {
        self.param(key)?.as_str()
    }

    /// `params._meta`.
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.param("_meta")?.as_object()
    }

    /// The name a `tools/call` or `prompts/get` names (`params.name`).
    pub fn name(&self) -> Option<&str> {
        self.param_str("name")
    }
}

impl serde::Serialize for Request {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.message.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Request {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::deserialize(deserializer).map(Self::from_message)
    }
}

/// Any JSON-RPC message read in place: a notification or request a handler sends, or one a
/// client sent that the engine reads without owning it. The engine reads methods and
/// parameters through it, never by digging in the JSON.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Message<'a> {
    message: &'a Map<String, Value>,
}

impl<'a> Message<'a> {
    /// `message` read as a JSON-RPC message; `None`: not an object.
    pub fn of(message: &'a Value) -> Option<Self> {
        message.as_object().map(Self::from_map)
    }

    /// The message `message`.
    pub fn from_map(message: &'a Map<String, Value>) -> Self {
        Self { message }
    }

    /// Its method, if it is a request or a notification.
    pub fn method(&self) -> Option<&'a str> {
        self.message.get("method").and_then(Value::as_str)
    }

    /// Whether it carries an id (a request or a response, not a notification).
    pub fn has_id(&self) -> bool {
        self.message.contains_key("id")
    }

    /// Parameter `key`.
    pub fn param(&self, key: &str) -> Option<&'a Value> {
        self.message.get("params")?.get(key)
    }

    /// Parameter `key`, if it is a string.
    pub fn param_str(&self, key: &str) -> Option<&'a str> {
        self.param(key)?.as_str()
    }

    /// `params._meta`.
    pub fn meta(&self) -> Option<&'a Map<String, Value>> {
        self.param("_meta")?.as_object()
    }
}

/// A response, read as what it means to the engine: the outcome of a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome<'a> {
    /// A result the client reads as success.
    Result(&'a Value),
    /// A tool's own error: a result with `isError: true`.
    ToolError(&'a Value),
    /// A 2026-07-28 `input_required` result: the client answers and retries.
    InputRequired(&'a Value),
    /// The durable context's "waiting for input" error: never sent as it is (the engine
    /// replaces it, see [`crate::meta::SUSPENDED`]).
    Suspended,
    /// A JSON-RPC error.
    Error {
        /// Its code (`None`: the error had no integer code).
        code: Option<i64>,
        /// Its message.
        message: &'a str,
        /// Its data.
        data: Option<&'a Value>,
    },
}

impl<'a> Outcome<'a> {
    /// The outcome `response` carries; `None`: not a response (a request or notification).
    pub fn of(response: &'a Value) -> Option<Self> {
        let response = response.as_object()?;
        if let Some(error) = response.get("error") {
            let data = error.get("data");
            if data
                .and_then(|data| data.get(crate::meta::SUSPENDED))
                .and_then(Value::as_bool)
                == Some(true)
            {
                return Some(Self::Suspended);
            }
            return Some(Self::Error {
                code: error.get("code").and_then(Value::as_i64),
                message: error.get("message").and_then(Value::as_str).unwrap_or(""),
                data,
            });
        }
        let result = response.get("result")?;
        Some(if result.get("isError") == Some(&Value::Bool(true)) {
            Self::ToolError(result)
        } else if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
            Self::InputRequired(result)
        } else {
            Self::Result(result)
        })
    }
}

/// The message of `response`'s error if its handler marked it retryable
/// ([`crate::meta::RETRYABLE`]); `None` for any other message.
pub fn retryable_error(response: &Value) -> Option<&str> {
    let error = response.get("error")?;
    let marked = error
        .get("data")
        .and_then(|data| data.get(crate::meta::RETRYABLE))
        .and_then(Value::as_bool);
    (marked == Some(true)).then(|| error.get("message").and_then(Value::as_str).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_marked_error_is_retryable() {
        let marked = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603,
            "message": "payments down", "data": {"durable-mcp/retryable": true}}});
        assert_eq!(retryable_error(&marked), Some("payments down"));
        for other in [
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}}),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x",
                "data": {"durable-mcp/retryable": "yes"}}}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {"durable-mcp/retryable": true}}),
        ] {
            assert_eq!(retryable_error(&other), None, "{other}");
        }
    }

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
            Ok(Inbound::Request(_))
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

    #[test]
    fn a_request_reads_its_method_and_params_once_and_stores_as_its_message() {
        let Ok(Inbound::Request(request)) = classify(json!({"jsonrpc": "2.0", "id": 4,
            "method": "tools/call", "params": {"name": "add", "_meta": {"k": 1}}}))
        else {
            panic!("a request")
        };
        assert_eq!(request.method(), &Method::ToolsCall);
        assert_eq!((request.id(), request.name()), (&json!(4), Some("add")));
        assert_eq!(request.meta().and_then(|m| m.get("k")), Some(&json!(1)));
        let stored = serde_json::to_value(&request).expect("serializes");
        assert_eq!(stored, Value::Object(request.message().clone()));
        let back: Request = serde_json::from_value(stored).expect("deserializes");
        assert_eq!(back, request);
    }

    #[test]
    fn outcomes_are_read_by_what_they_mean() {
        let of = |v: Value| Outcome::of(&v).map(|o| format!("{o:?}"));
        assert!(
            of(json!({"id": 1, "result": {"content": []}}))
                .unwrap()
                .starts_with("Result")
        );
        assert!(
            of(json!({"id": 1, "result": {"isError": true}}))
                .unwrap()
                .starts_with("ToolError")
        );
        let input = json!({"id": 1, "result": {"resultType": "input_required"}});
        assert!(of(input).unwrap().starts_with("InputRequired"));
        let suspended = json!({"id": 1, "error": {"code": -32603, "message": "m",
            "data": {crate::meta::SUSPENDED: true}}});
        assert_eq!(Outcome::of(&suspended), Some(Outcome::Suspended));
        let error = json!({"id": 1, "error": {"code": -32602, "message": "bad"}});
        assert_eq!(
            Outcome::of(&error),
            Some(Outcome::Error {
                code: Some(-32602),
                message: "bad",
                data: None
            })
        );
        assert_eq!(of(json!({"method": "ping"})), None);
    }
}

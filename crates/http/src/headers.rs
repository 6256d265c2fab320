//! Header checks: DNS-rebinding protection, content negotiation, session and version
//! headers, and the 2026-07-28 standard headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`).

use base64::Engine as _;
use durable_mcp_engine::is_credential;
use durable_mcp_protocol::{McpVersion, methods};
use http::{HeaderMap, HeaderName, header};
use serde_json::{Map, Value};

use crate::Rejection;
use crate::config::HttpConfig;

/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Mcp-Session-Id`.
pub const SESSION_ID: &str = "mcp-session-id";
/// `Last-Event-ID`.
pub const LAST_EVENT_ID: &str = "last-event-id";
/// `Mcp-Method`.
pub const MCP_METHOD: &str = "mcp-method";
/// `Mcp-Name`.
pub const MCP_NAME: &str = "mcp-name";

/// Request headers as they may be logged: the values of credentials (`Authorization`,
/// `Proxy-Authorization`, `Cookie`, values marked sensitive, and any header whose name says
/// key, token, secret, password or auth) are replaced by `<redacted>`.
pub(crate) struct Loggable<'a>(pub(crate) &'a HeaderMap);

impl std::fmt::Debug for Loggable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (name, value) in self.0 {
            if is_credential(name) || value.is_sensitive() {
                map.entry(&name.as_str(), &"<redacted>");
            } else {
                map.entry(&name.as_str(), &value);
            }
        }
        map.finish()
    }
}

/// The value of a header that may appear at most once, as visible ASCII.
pub fn single(headers: &HeaderMap, name: &str) -> Result<Option<String>, Rejection> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Rejection::BadHeader(format!(
            "{name} must be a single value"
        )));
    }
    let text = first
        .to_str()
        .map_err(|_| Rejection::BadHeader(format!("{name} is not visible ASCII")))?;
    Ok(Some(text.trim().to_owned()))
}

/// `MCP-Protocol-Version`, if present, as a version of the closed set; a version this
/// server does not serve (`9999-99-99`, `2026-07-29`) is refused (400), never taken for the
/// nearest known one.
pub fn protocol_version(headers: &HeaderMap) -> Result<Option<McpVersion>, Rejection> {
    let Some(raw) = single(headers, PROTOCOL_VERSION)? else {
        return Ok(None);
    };
    raw.parse()
        .map(Some)
        .map_err(|_| Rejection::UnsupportedVersion {
            requested: raw,
            supported: McpVersion::supported(),
            id: None,
        })
}

/// DNS-rebinding protection: `Host` and `Origin` against the allow-lists.
pub fn check_host_and_origin(headers: &HeaderMap, config: &HttpConfig) -> Result<(), Rejection> {
    if let Some(allowed) = &config.allowed_hosts {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or(Rejection::HostForbidden)?;
        if !allowed.iter().any(|a| host_matches(host, a)) {
            return Err(Rejection::HostForbidden);
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| Rejection::OriginForbidden)?;
        let ok = match (&config.allowed_origins, &config.allowed_hosts) {
            (Some(allowed), _) => allowed
                .iter()
                .any(|a| a == "*" || a.eq_ignore_ascii_case(origin)),
            (None, Some(hosts)) => {
                // `scheme://host[:port]`: its host must be an allowed host.
                let authority = origin.split_once("://").map_or("", |(_, rest)| rest);
                !authority.is_empty() && hosts.iter().any(|a| host_matches(authority, a))
            }
            (None, None) => true,
        };
        if !ok {
            return Err(Rejection::OriginForbidden);
        }
    }
    Ok(())
}

/// `allowed` matches `host` exactly, or matches its name part when `allowed` has no port.
fn host_matches(host: &str, allowed: &str) -> bool {
    if host.eq_ignore_ascii_case(allowed) {
        return true;
    }
    if allowed.contains(':') && !allowed.starts_with('[') {
        return false;
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !name.ends_with(':') => {
            name
        }
        _ => host,
    };
    name.eq_ignore_ascii_case(allowed)
}

fn accepts(headers: &HeaderMap, media: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',').any(|part| {
                let essence = part.split(';').next().unwrap_or_default().trim();
                essence.eq_ignore_ascii_case(media) || essence == "*/*"
            })
        })
}

/// POST needs `Accept` with both `application/json` and `text/event-stream`.
pub fn check_post_accept(headers: &HeaderMap) -> Result<(), Rejection> {
    if accepts(headers, "application/json") && accepts(headers, "text/event-stream") {
        Ok(())
    } else {
        Err(Rejection::NotAcceptable(
            "Accept must include application/json and text/event-stream",
        ))
    }
}

/// GET needs `Accept` with `text/event-stream`.
pub fn check_get_accept(headers: &HeaderMap) -> Result<(), Rejection> {
    if accepts(headers, "text/event-stream") {
        Ok(())
    } else {
        Err(Rejection::NotAcceptable(
            "Accept must include text/event-stream",
        ))
    }
}

/// POST bodies must be `application/json`.
pub fn check_content_type(headers: &HeaderMap) -> Result<(), Rejection> {
    let ok = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case("application/json")
        })
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(Rejection::UnsupportedMediaType)
    }
}

/// Decode a header value that may use the `=?base64?...?=` sentinel.
pub fn decode_sentinel(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(value.to_owned()),
    }
}

fn mismatch(message: String, id: &Value) -> Rejection {
    Rejection::HeaderMismatch {
        message,
        id: Some(id.clone()),
    }
}

/// 2026-07-28: `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*` must match the body.
/// `tool_schema` gives a tool's input schema for the `x-mcp-header` annotations.
pub fn check_standard_headers(
    headers: &HeaderMap,
    id: &Value,
    method: &str,
    params: Option<&Map<String, Value>>,
    tool_schema: impl Fn(&str) -> Option<Value>,
) -> Result<(), Rejection> {
    let header_method = single(headers, MCP_METHOD).map_err(|e| mismatch(e.to_string(), id))?;
    match header_method {
        None => return Err(mismatch("required header Mcp-Method is missing".into(), id)),
        Some(m) if m != method => {
            return Err(mismatch(
                format!("Mcp-Method header value '{m}' does not match body method '{method}'"),
                id,
            ));
        }
        Some(_) => {}
    }
    let name_source = match method {
        methods::TOOLS_CALL | methods::PROMPTS_GET => params.and_then(|p| p.get("name")),
        methods::RESOURCES_READ => params.and_then(|p| p.get("uri")),
        methods::TASKS_GET | methods::TASKS_UPDATE | methods::TASKS_CANCEL => {
            params.and_then(|p| p.get("taskId"))
        }
        _ => None,
    };
    if let Some(expected) = name_source.and_then(Value::as_str) {
        let raw = single(headers, MCP_NAME).map_err(|e| mismatch(e.to_string(), id))?;
        let Some(raw) = raw else {
            return Err(mismatch("required header Mcp-Name is missing".into(), id));
        };
        let decoded = decode_sentinel(&raw)
            .ok_or_else(|| mismatch("Mcp-Name has an invalid base64 value".into(), id))?;
        if decoded != expected {
            return Err(mismatch(
                format!("Mcp-Name header value '{decoded}' does not match body value '{expected}'"),
                id,
            ));
        }
    }
    if method == methods::TOOLS_CALL
        && let Some(tool) = params.and_then(|p| p.get("name")).and_then(Value::as_str)
        && let Some(schema) = tool_schema(tool)
    {
        let arguments = params.and_then(|p| p.get("arguments"));
        let mut annotated = Vec::new();
        collect_header_params(&schema, &mut Vec::new(), &mut annotated);
        for (header_name, path) in annotated {
            let value = path
                .iter()
                .try_fold(arguments, |v, key| Some(v?.get(key)))
                .flatten();
            let full = format!("mcp-param-{}", header_name.to_ascii_lowercase());
            let Ok(full) = HeaderName::try_from(full) else {
                continue;
            };
            let got = single(headers, full.as_str()).map_err(|e| mismatch(e.to_string(), id))?;
            match (value.filter(|v| !v.is_null()), got) {
                (None, _) => {}
                (Some(_), None) => {
                    return Err(mismatch(
                        format!("required header Mcp-Param-{header_name} is missing"),
                        id,
                    ));
                }
                (Some(expected), Some(raw)) => {
                    let decoded = decode_sentinel(&raw).ok_or_else(|| {
                        mismatch(
                            format!("Mcp-Param-{header_name} has an invalid base64 value"),
                            id,
                        )
                    })?;
                    if !param_matches(expected, &decoded) {
                        return Err(mismatch(
                            format!(
                                "Mcp-Param-{header_name} header value '{decoded}' does not match the argument"
                            ),
                            id,
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn param_matches(expected: &Value, header: &str) -> bool {
    match expected {
        Value::String(s) => s == header,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (n.as_f64(), header.parse::<f64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => false,
        },
        _ => false,
    }
}

/// Walk `properties` chains of a JSON schema and collect `x-mcp-header` annotations.
fn collect_header_params(
    schema: &Value,
    path: &mut Vec<String>,
    out: &mut Vec<(String, Vec<String>)>,
) {
    if path.len() > 32 {
        return;
    }
    if let Some(name) = schema.get("x-mcp-header").and_then(Value::as_str) {
        out.push((name.to_owned(), path.clone()));
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (key, sub) in properties {
            path.push(key.clone());
            collect_header_params(sub, path, out);
            path.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(HeaderName::try_from(*k).unwrap(), v.parse().unwrap());
        }
        map
    }

    #[test]
    fn sentinel_decodes() {
        assert_eq!(
            decode_sentinel("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(decode_sentinel("plain").as_deref(), Some("plain"));
        assert_eq!(decode_sentinel("=?base64?***?="), None);
    }

    #[test]
    fn standard_headers_must_match() {
        let id = json!(1);
        let params = json!({"name": "t", "arguments": {"region": "eu", "n": 42}});
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"}}});
        let p = params.as_object();
        let ok = headers(&[
            ("mcp-method", "tools/call"),
            ("mcp-name", "t"),
            ("mcp-param-region", "eu"),
            ("mcp-param-n", "42.0"),
        ]);
        check_standard_headers(&ok, &id, "tools/call", p, |_| Some(schema.clone())).unwrap();
        for bad in [
            headers(&[("mcp-name", "t")]),
            headers(&[("mcp-method", "tools/list"), ("mcp-name", "t")]),
            headers(&[("mcp-method", "tools/call")]),
            headers(&[
                ("mcp-method", "tools/call"),
                ("mcp-name", "u"),
                ("mcp-param-region", "eu"),
                ("mcp-param-n", "42"),
            ]),
            headers(&[
                ("mcp-method", "tools/call"),
                ("mcp-name", "t"),
                ("mcp-param-n", "42"),
            ]),
            headers(&[
                ("mcp-method", "tools/call"),
                ("mcp-name", "t"),
                ("mcp-param-region", "us"),
                ("mcp-param-n", "42"),
            ]),
        ] {
            let err = check_standard_headers(&bad, &id, "tools/call", p, |_| Some(schema.clone()))
                .unwrap_err();
            assert_eq!(err.code(), -32020, "{bad:?}");
        }
    }

    #[test]
    fn host_allow_list_matches_with_and_without_port() {
        assert!(host_matches("localhost:8080", "localhost"));
        assert!(host_matches("127.0.0.1:80", "127.0.0.1"));
        assert!(!host_matches("evil.com:80", "localhost"));
        assert!(!host_matches("localhost:81", "localhost:80"));
    }
}

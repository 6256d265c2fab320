//! HTTP header parsing: `Mcp-Session-Id`, `MCP-Protocol-Version`, `Accept`, `Content-Type`,
//! `Host`/`Origin`, `Last-Event-ID` and the 2026-07-28 standard headers (`Mcp-Method`,
//! `Mcp-Name`, `Mcp-Param-*`, base64 sentinels) checked without a panic, whatever the
//! values (the input: a method line, then `name: value` lines).
#![no_main]

use durable_mcp_http::HttpConfig;
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let method = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
    let mut headers = HeaderMap::new();
    let mut name_value = None;
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            continue;
        };
        if name.as_str() == "mcp-name" {
            name_value = value.to_str().ok().map(str::to_owned);
        }
        headers.append(name, value);
    }
    // A body that names what the headers name (so the checks go past the first mismatch).
    let mut params = Map::new();
    if let Some(name) = name_value {
        params.insert("name".into(), Value::String(name.clone()));
        params.insert("uri".into(), Value::String(name));
    }
    params.insert(
        "arguments".into(),
        json!({"region": "eu", "count": 3, "flag": true}),
    );
    let schema = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "flag": {"type": "boolean", "x-mcp-header": "Flag"},
    }});
    let mut config = HttpConfig::default();
    config.allowed_origins = Some(vec!["https://app.example".into()]);
    let _ = durable_mcp_http::fuzzing::check_headers(
        &headers,
        &config,
        &method,
        Some(&params),
        Some(&schema),
    );
    let _ = durable_mcp_http::fuzzing::check_headers(
        &headers,
        &HttpConfig::default(),
        &method,
        None,
        None,
    );
});

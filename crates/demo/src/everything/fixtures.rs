//! Fixed data the fixtures return: media, JSON schemas and elicitation schemas.

use std::sync::{Arc, LazyLock};

use rmcp::model::{ElicitationSchema, JsonObject};
use serde_json::{Value, json};

/// A 1×1 red RGBA PNG, base64.
pub(super) const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP4z8DwHwAFAAH/VscvDQAAAABJRU5ErkJggg==";

/// A WAV file (8 kHz, mono, 16-bit PCM) holding eight samples of silence, base64.
pub(super) const WAV_BASE64: &str =
    "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YRAAAAAAAAAAAAAAAAAAAAAAAAAA";

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// The inputSchema of `json_schema_2020_12_tool`: the 2020-12 keywords the suite checks
/// are kept verbatim in `tools/list` (SEP-1613, SEP-2106).
pub(super) fn json_schema_2020_12() -> Arc<JsonObject> {
    static SCHEMA: LazyLock<Arc<JsonObject>> = LazyLock::new(|| {
        Arc::new(object(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {
                        "street": { "type": "string" },
                        "city": { "type": "string" }
                    }
                }
            },
            "properties": {
                "name": { "type": "string" },
                "address": { "$ref": "#/$defs/address" },
                "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                "phone": { "type": "string" },
                "email": { "type": "string" }
            },
            "allOf": [
                { "anyOf": [ { "required": ["phone"] }, { "required": ["email"] } ] }
            ],
            "if": {
                "properties": { "contactMethod": { "const": "phone" } },
                "required": ["contactMethod"]
            },
            "then": { "required": ["phone"] },
            "else": { "required": ["email"] },
            "additionalProperties": false
        })))
    });
    SCHEMA.clone()
}

/// The inputSchema of `test_custom_header`: `value` is mirrored into the
/// `Mcp-Param-Value` header (SEP-2243).
pub(super) fn custom_header_schema() -> Arc<JsonObject> {
    static SCHEMA: LazyLock<Arc<JsonObject>> = LazyLock::new(|| {
        Arc::new(object(json!({
            "type": "object",
            "properties": {
                "value": {
                    "type": "string",
                    "description": "Echoed back; also sent as the Mcp-Param-Value header",
                    "x-mcp-header": "Value"
                }
            },
            "required": ["value"]
        })))
    });
    SCHEMA.clone()
}

/// Parses a fixed elicitation schema. The literals below are all valid, so the fallback
/// (an empty object schema) is never used; it keeps the code free of panics.
fn elicitation_schema(value: Value) -> ElicitationSchema {
    serde_json::from_value(value).unwrap_or_else(|error| {
        tracing::error!(%error, "invalid fixture elicitation schema");
        ElicitationSchema::builder().build_unchecked()
    })
}

/// `test_elicitation`: username and email, both required.
pub(super) fn user_info_schema() -> ElicitationSchema {
    elicitation_schema(json!({
        "type": "object",
        "properties": {
            "username": { "type": "string", "description": "User's response" },
            "email": { "type": "string", "description": "User's email address" }
        },
        "required": ["username", "email"]
    }))
}

/// `test_elicitation_sep1034_defaults`: a default for every primitive type (SEP-1034).
pub(super) fn defaults_schema() -> ElicitationSchema {
    elicitation_schema(json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": { "type": "boolean", "description": "Verification status", "default": true }
        }
    }))
}

/// `test_elicitation_sep1330_enums`: the five enum shapes of SEP-1330.
pub(super) fn enums_schema() -> ElicitationSchema {
    elicitation_schema(json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "oneOf": [
                    { "const": "value1", "title": "First Option" },
                    { "const": "value2", "title": "Second Option" },
                    { "const": "value3", "title": "Third Option" }
                ]
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "items": { "type": "string", "enum": ["option1", "option2", "option3"] }
            },
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": [
                        { "const": "value1", "title": "First Choice" },
                        { "const": "value2", "title": "Second Choice" },
                        { "const": "value3", "title": "Third Choice" }
                    ]
                }
            }
        }
    }))
}

/// A one-field elicitation schema: `{ field: type }`, required.
pub(super) fn single_field_schema(field: &str, kind: &str) -> ElicitationSchema {
    elicitation_schema(json!({
        "type": "object",
        "properties": { field: { "type": kind } },
        "required": [field]
    }))
}

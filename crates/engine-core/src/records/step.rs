//! The value of a committed step or answer ([`RecordKind::Step`] records of kinds `s` and
//! `a`): the committed result, with when, by which attempt and worker, and how long its
//! body took, for a run's timeline (`durable-mcp runs show`).
//!
//! Stored as `{"durable-mcp/step": <value>, "at_ms": .., "ms": .., "attempt": .., "worker": ..}`.
//! A record written before the envelope existed holds the bare value: it decodes with no
//! [`StepMeta`].

use durable_mcp_store::RecordKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RecordError;

/// The field holding the committed value (namespaced: no handler's value is an object
/// with exactly the envelope's fields and this one).
const VALUE_FIELD: &str = "durable-mcp/step";

/// When and where a step's result was committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepMeta {
    /// When it was committed (milliseconds since the epoch).
    pub at_ms: u64,
    /// How long its body ran (milliseconds), where known (a step's, not an answer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    /// The attempt of the run that committed it.
    pub attempt: u32,
    /// The worker that committed it.
    pub worker: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    #[serde(rename = "durable-mcp/step")]
    value: Value,
    #[serde(flatten)]
    meta: StepMeta,
}

#[derive(Serialize)]
struct EnvelopeRef<'a> {
    #[serde(rename = "durable-mcp/step")]
    value: &'a Value,
    #[serde(flatten)]
    meta: &'a StepMeta,
}

/// The stored form of `value`, committed with `meta`.
pub fn encode_step(value: &Value, meta: &StepMeta) -> Result<String, RecordError> {
    super::encode(RecordKind::Step, &EnvelopeRef { value, meta })
}

/// The committed value of step record `key`, and its [`StepMeta`] if it was kept.
pub fn decode_step(key: &str, stored: &str) -> Result<(Value, Option<StepMeta>), RecordError> {
    let value: Value = super::decode(RecordKind::Step, key, stored)?;
    let enveloped = value
        .as_object()
        .is_some_and(|o| o.contains_key(VALUE_FIELD));
    if enveloped && let Ok(envelope) = serde_json::from_value::<Envelope>(value.clone()) {
        return Ok((envelope.value, Some(envelope.meta)));
    }
    Ok((value, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta() -> StepMeta {
        StepMeta {
            at_ms: 1_700_000_000_000,
            ms: Some(42),
            attempt: 2,
            worker: "host/127.0.0.1:8123".into(),
        }
    }

    #[test]
    fn the_layout_is_pinned() {
        assert_eq!(
            encode_step(&json!({"paid": true}), &meta()).unwrap(),
            r#"{"durable-mcp/step":{"paid":true},"at_ms":1700000000000,"ms":42,"attempt":2,"worker":"host/127.0.0.1:8123"}"#
        );
    }

    #[test]
    fn a_value_comes_back_with_its_meta() {
        for value in [
            json!(null),
            json!(3),
            json!("x"),
            json!([1]),
            json!({"a": 1}),
        ] {
            let stored = encode_step(&value, &meta()).unwrap();
            assert_eq!(decode_step("k", &stored).unwrap(), (value, Some(meta())));
        }
    }

    #[test]
    fn a_bare_value_from_before_the_envelope_decodes_without_meta() {
        for value in [
            json!(7),
            json!({"durable-mcp/step": 1, "other": 2}),
            json!({"a": 1}),
        ] {
            assert_eq!(decode_step("k", &value.to_string()).unwrap(), (value, None));
        }
        assert!(decode_step("k", "not json").is_err());
    }
}

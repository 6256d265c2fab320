//! Which requests may be sent again to a fresh upstream process after the first was
//! interrupted (its process died, or the worker running it did).

use serde_json::Value;

/// Methods that only read: sending one again cannot repeat an effect.
pub const READ_METHODS: [&str; 8] = [
    "ping",
    "tools/list",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "completion/complete",
];

/// Why a request may, or may not, be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// A method that reads.
    ReadMethod,
    /// A tool the upstream annotates `readOnlyHint: true`.
    ReadOnlyTool,
    /// A tool the upstream annotates `idempotentHint: true`.
    IdempotentTool,
    /// A tool the operator marked retryable (`--retryable-tool`).
    Configured,
    /// Not known to be safe: answered with "interrupted, not retried".
    Unsafe,
}

impl Resend {
    /// Whether the request may be sent again.
    pub fn allowed(self) -> bool {
        self != Self::Unsafe
    }
}

/// Decide for `method` with `params`; `tool` is the upstream's listing of the called tool
/// (for `tools/call`), `retryable` the tools the operator marked retryable.
pub fn resend(
    method: &str,
    params: Option<&Value>,
    tool: Option<&Value>,
    retryable: &[String],
) -> Resend {
    if READ_METHODS.contains(&method) {
        return Resend::ReadMethod;
    }
    if method != "tools/call" {
        return Resend::Unsafe;
    }
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if retryable.iter().any(|r| r == name) {
        return Resend::Configured;
    }
    let hint = |key: &str| {
        tool.and_then(|t| t.pointer(&format!("/annotations/{key}")))
            .and_then(Value::as_bool)
            == Some(true)
    };
    if hint("readOnlyHint") {
        Resend::ReadOnlyTool
    } else if hint("idempotentHint") {
        Resend::IdempotentTool
    } else {
        Resend::Unsafe
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_and_annotated_tools_are_sent_again_and_nothing_else() {
        let call = |name: &str| json!({"name": name, "arguments": {}});
        let read_only = json!({"name": "r", "annotations": {"readOnlyHint": true}});
        let idempotent =
            json!({"name": "i", "annotations": {"readOnlyHint": false, "idempotentHint": true}});
        let effect =
            json!({"name": "e", "annotations": {"readOnlyHint": false, "idempotentHint": false}});
        let plain = json!({"name": "p"});
        assert_eq!(
            resend("resources/read", None, None, &[]),
            Resend::ReadMethod
        );
        assert_eq!(resend("tools/list", None, None, &[]), Resend::ReadMethod);
        assert_eq!(
            resend("tools/call", Some(&call("r")), Some(&read_only), &[]),
            Resend::ReadOnlyTool
        );
        assert_eq!(
            resend("tools/call", Some(&call("i")), Some(&idempotent), &[]),
            Resend::IdempotentTool
        );
        assert_eq!(
            resend("tools/call", Some(&call("e")), Some(&effect), &[]),
            Resend::Unsafe
        );
        assert_eq!(
            resend("tools/call", Some(&call("p")), Some(&plain), &[]),
            Resend::Unsafe
        );
        assert_eq!(
            resend("tools/call", Some(&call("unknown")), None, &[]),
            Resend::Unsafe
        );
        assert_eq!(
            resend("tools/call", Some(&call("e")), Some(&effect), &["e".into()]),
            Resend::Configured
        );
        assert_eq!(
            resend("resources/subscribe", None, None, &[]),
            Resend::Unsafe
        );
        assert!(!Resend::Unsafe.allowed() && Resend::Configured.allowed());
    }
}

//! `requestState` unsealing: a client's `requestState` is opened (or refused) without a
//! panic; a forged one never opens; a sealed one changed anywhere opens to nothing but its
//! own payload (the seal is authenticated), and never under another binding (principal).
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use durable_mcp_handler::{StateKeys, StateSealer};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fn sealer() -> &'static (StateSealer, String) {
    static SEALER: OnceLock<(StateSealer, String)> = OnceLock::new();
    SEALER.get_or_init(|| {
        let keys = StateKeys::fixed(b"fuzzing key: thirty-two bytes at least, not secret")
            .expect("a long enough key");
        let sealer = StateSealer::new(keys);
        let sealed = sealer.seal(
            &json!({"run": "r1", "round": 2}),
            b"alice",
            Duration::from_secs(3600),
        );
        (sealer, sealed)
    })
}

fuzz_target!(|data: &[u8]| {
    let (sealer, sealed) = sealer();
    let text = String::from_utf8_lossy(data);
    // Forged: nothing the fuzzer writes opens (it does not hold the key).
    assert!(
        sealer.open(&text, b"alice").is_err(),
        "a forged requestState opened: {text:?}"
    );
    // Tampered: the input's bytes XORed into the sealed state.
    let mut bytes = sealed.clone().into_bytes();
    for (i, b) in data.iter().enumerate() {
        let n = bytes.len();
        bytes[i % n] ^= b;
    }
    let tampered = String::from_utf8_lossy(&bytes);
    if let Ok(payload) = sealer.open(&tampered, b"alice") {
        assert_eq!(
            payload,
            json!({"run": "r1", "round": 2}),
            "a tampered requestState opened to another payload"
        );
    }
    assert!(
        sealer.open(&tampered, b"bob").is_err(),
        "a requestState opened under another binding"
    );
});

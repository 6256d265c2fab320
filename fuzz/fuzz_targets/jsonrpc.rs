//! JSON-RPC message classification: any body the transport parses as JSON is classified
//! without a panic, and a message classified as a request has the id `request_id` reads
//! (the id error responses echo before classification).
#![no_main]

use durable_mcp_protocol::jsonrpc::{Inbound, classify, request_id};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let early = request_id(&value);
    match classify(value) {
        Ok(Inbound::Request(request)) => {
            assert_eq!(
                early.as_ref(),
                Some(request.id()),
                "request_id and classify disagree on the id"
            );
            assert_eq!(
                request.message().get("method").and_then(Value::as_str),
                Some(request.method().as_str())
            );
            // The message reads back as the same request (how a run record stores it).
            let stored = serde_json::to_value(&request).expect("a request serializes");
            let back: durable_mcp_protocol::jsonrpc::Request =
                serde_json::from_value(stored).expect("and reads back");
            assert_eq!(back, request);
        }
        Ok(Inbound::Notification { message, .. }) => assert!(message.get("id").is_none()),
        Ok(Inbound::Response { message, .. }) => {
            assert!(message.contains_key("result") != message.contains_key("error"));
        }
        Err(rejection) => {
            if let Some(id) = &rejection.id {
                assert!(
                    id.is_string() || id.is_i64() || id.is_u64(),
                    "a refusal echoes only a valid id"
                );
            }
        }
    }
});

//! SSE and `Last-Event-ID`: a client's `Last-Event-ID` parses (or is refused) without a
//! panic, and a parsed id prints back to a value that parses to the same id; any message
//! the engine commits (JSON text) framed as the transport frames it reads back, with an
//! SSE parser written to the WHATWG rules, as exactly one event with its id and data
//! (no message can inject a field or a second event).
#![no_main]

use durable_mcp_store::{EventId, StoredEvent};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The events of an SSE body: (id, data) per dispatched event.
fn parse(body: &str) -> Vec<(Option<String>, String)> {
    let mut events = Vec::new();
    let (mut id, mut data, mut has_data) = (None, String::new(), false);
    // Lines end with CRLF, LF or CR.
    for line in body
        .split("\r\n")
        .flat_map(|l| l.split('\n'))
        .flat_map(|l| l.split('\r'))
    {
        if line.is_empty() {
            if has_data {
                events.push((
                    id.clone(),
                    data.strip_suffix('\n').unwrap_or(&data).to_owned(),
                ));
            }
            data.clear();
            has_data = false;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                data.push_str(value);
                data.push('\n');
                has_data = true;
            }
            "id" if !value.contains('\0') => id = Some(value.to_owned()),
            _ => {}
        }
    }
    events
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(id) = text.parse::<EventId>() {
        let again: EventId = id.to_string().parse().expect("a printed event id parses");
        assert_eq!(again, id);
    }
    // The engine commits serialized JSON: a message parsed from the input, or the input
    // as a JSON string.
    let message =
        serde_json::from_slice::<Value>(data).unwrap_or_else(|_| Value::String(text.into_owned()));
    let json = message.to_string();
    let id: EventId = "00000000000000000000000000000001_7"
        .parse()
        .expect("a valid event id");
    let frame = durable_mcp_http::fuzzing::sse_frame(&StoredEvent {
        id: id.clone(),
        data: json.clone(),
    });
    let frame = std::str::from_utf8(&frame).expect("frames are UTF-8");
    let events = parse(frame);
    assert_eq!(
        events,
        vec![(Some(id.to_string()), json)],
        "one frame, one event: {frame:?}"
    );
});

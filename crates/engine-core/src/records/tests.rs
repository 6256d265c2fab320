//! Keys and record encodings are persistent: these tests pin them as they are written
//! today, so that a change to a layout fails here instead of stranding stored data.

use durable_mcp_protocol::tasks::TaskStatus;
use durable_mcp_store::{Principal, RecordKind, SessionId, StreamId, key_part};
use serde_json::{Value, json};

use super::key::{self, StepKind};
use super::*;

const RUN: &str = "0123456789abcdef0123456789abcdef";
const SESSION: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn stream() -> StreamId {
    RUN.parse().unwrap()
}

fn session() -> SessionId {
    SESSION.parse().unwrap()
}

#[test]
fn run_step_and_mark_keys_keep_their_layout() {
    assert_eq!(key::run(&stream()), RUN);
    assert_eq!(
        key::step(RUN, StepKind::Step, "charge"),
        format!("{RUN}/s/charge")
    );
    assert_eq!(key::answer(RUN, 3), format!("{RUN}/a/3"));
    assert_eq!(key::emitted(RUN, 4), format!("{RUN}/e/4"));
    assert_eq!(key::steps(RUN), format!("{RUN}/"));
    assert_eq!(key::cancel_mark(RUN), format!("{RUN}/cancel"));
    assert!(
        key::cancel_mark(RUN).starts_with(&key::steps(RUN)),
        "deleted with the run's steps"
    );
    // A step name of any length is bounded (digested), the same way every time.
    let long = "n".repeat(5_000);
    assert_eq!(
        key::step(RUN, StepKind::Step, &long),
        format!("{RUN}/s/{}", key_part(&long))
    );
    assert!(key::step(RUN, StepKind::Step, &long).len() < 120);
}

#[test]
fn alias_keys_keep_their_layout() {
    assert_eq!(key::alias(&session(), &json!(7)), format!("{SESSION}/7"));
    assert_eq!(
        key::alias(&session(), &json!("req-1")),
        format!("{SESSION}/\"req-1\"")
    );
    let long = json!("i".repeat(3_000));
    assert_eq!(
        key::alias(&session(), &long),
        format!("{SESSION}/{}", key_part(&long.to_string()))
    );
}

#[test]
fn task_keys_keep_their_layout() {
    let alice = Principal::new("alice");
    assert_eq!(key::task_owner(&alice, None), "alice/");
    assert_eq!(
        key::task_owner(&alice, Some(&session())),
        format!("alice/{SESSION}/")
    );
    assert_eq!(
        key::task(&key::task_owner(&alice, None), RUN),
        format!("alice/{RUN}")
    );
    assert_eq!(key::task_owner(&Principal::anonymous(), None), "anonymous/");
    assert_eq!(key::task_id(&format!("alice/{SESSION}/{RUN}")), RUN);
    let long = Principal::new("p".repeat(5_000));
    assert_eq!(
        key::task_owner(&long, None),
        format!("{}/", key_part(long.as_str()))
    );
}

#[test]
fn other_keys_keep_their_layout() {
    assert_eq!(key::KEY_RING, "request-state");
    assert_eq!(key::subscriptions("ab"), "6162/");
    assert_eq!(
        key::subscription("ab", &session()),
        format!("6162/{SESSION}")
    );
    assert_eq!(key::LIST_ANNOUNCEMENTS, ["tools", "prompts", "resources"]);
    assert_eq!(
        key::resource_announcement("file:///a"),
        "resource/file:///a"
    );
    assert_eq!(
        key::announced_resource("resource/file:///a"),
        Some("file:///a")
    );
    assert_eq!(key::announced_resource("tools"), None);
    assert_eq!(key::change("tools"), "tools");
    assert_eq!(key::change("resource/file:///a"), "resource/file:///a");
    assert_eq!(key::state("counter"), "counter");
    assert_eq!(key::question(2), "q2");
    assert_eq!(key::inbox_request(&stream(), 3), format!("{RUN}-3"));
    assert_eq!(key::inbox_question(&stream(), 4), format!("{RUN}-d4"));
    assert_eq!(key::inbox_of(&format!("{RUN}-3")), Some(stream()));
    assert_eq!(key::inbox_of(&format!("{RUN}-d4")), Some(stream()));
    assert_eq!(key::inbox_of("not-ours"), None);
    assert_eq!(key::inbox_of(RUN), None);
}

/// A run record as today's workers write it.
fn stored_run() -> Value {
    json!({
        "principal": "alice", "session": SESSION, "modern": false, "protocol_version": "2025-11-25",
        "log_level": "info", "request": {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x"}},
        "stream": RUN, "inbox": RUN, "owner": "worker-1", "lease_until_ms": 1_000, "attempt": 2,
        "task": format!("alice/{RUN}"), "task_flavor": "V2025", "failures": 1, "reply": RUN,
        "relay": {"task": format!("alice/{RUN}"), "task_id": RUN, "source": RUN}
    })
}

#[test]
fn run_records_round_trip_in_their_stored_layout() {
    let stored = stored_run().to_string();
    let run = RunRecord::decode(RUN, &stored).unwrap();
    assert_eq!(run.era, Era::Legacy);
    assert_eq!(
        run.protocol_version,
        durable_mcp_protocol::McpVersion::V2025_11_25
    );
    assert_eq!(run.task_flavor, Some(Flavor::V2025));
    assert_eq!(run.relay.as_ref().map(|r| r.task_id.as_str()), Some(RUN));
    assert_eq!(run.id(), json!(5));
    assert!(!run.stateless());
    let encoded: Value = serde_json::from_str(&run.encode().unwrap()).unwrap();
    assert_eq!(encoded, stored_run(), "encoded as it was stored");
    let mut modern = run;
    modern.era = Era::Modern;
    modern.task = None;
    let encoded: Value = serde_json::from_str(&modern.encode().unwrap()).unwrap();
    assert_eq!(
        encoded["modern"],
        json!(true),
        "the era is kept as `modern`"
    );
    assert!(
        RunRecord::decode(RUN, &encoded.to_string())
            .unwrap()
            .stateless()
    );
}

#[test]
fn run_records_of_older_workers_decode_with_defaults() {
    let mut stored = stored_run();
    for field in ["task", "task_flavor", "failures", "reply", "relay"] {
        stored.as_object_mut().unwrap().remove(field);
    }
    let run = RunRecord::decode(RUN, &stored.to_string()).unwrap();
    assert!(
        run.task.is_none()
            && run.task_flavor.is_none()
            && run.reply.is_none()
            && run.relay.is_none()
    );
    assert_eq!(run.failures, 0);
}

#[test]
fn a_run_keeps_its_last_attempts_and_how_each_ended() {
    let mut run = RunRecord::decode(RUN, &stored_run().to_string()).unwrap();
    assert!(
        run.attempts.is_empty(),
        "a record from before attempts were kept"
    );
    run.begin_attempt("a", 10);
    run.end_attempt(AttemptEnding::LeaseLost, 20);
    run.end_attempt(AttemptEnding::Parked, 30); // its end is already known
    assert_eq!(
        run.attempts[0].ended,
        Some(AttemptEnd {
            how: AttemptEnding::LeaseLost,
            at_ms: 20
        })
    );
    for n in 0..ATTEMPTS_KEPT as u32 + 3 {
        run.attempt = n + 2;
        run.begin_attempt("b", 40 + u64::from(n));
        run.end_attempt(AttemptEnding::Failed, 41 + u64::from(n));
    }
    assert_eq!(run.attempts.len(), ATTEMPTS_KEPT);
    assert_eq!(
        run.attempts.last().unwrap().attempt,
        ATTEMPTS_KEPT as u32 + 4
    );
    let stored = run.encode().unwrap();
    assert!(stored.contains(r#""attempts":[{"attempt":"#), "{stored}");

    // A claim that runs nothing (a run parked at once) is taken back.
    let mut claimed = RunRecord::decode(RUN, &stored).unwrap();
    claimed.attempt += 1;
    claimed.begin_attempt("c", 99);
    claimed.unbegin_attempt();
    assert_eq!(claimed.attempt, run.attempt);
    assert_eq!(claimed.attempts.last(), run.attempts.last());
    assert_eq!(
        RunRecord::decode(RUN, &stored).unwrap().attempts,
        run.attempts
    );
}

/// A task record as today's workers write it.
fn stored_task(status: &str) -> Value {
    json!({
        "task_id": RUN, "principal": "alice", "session": null, "flavor": "Extension", "status": status,
        "status_message": "The task waits for input.", "created_at_ms": 1, "updated_at_ms": 2, "ttl_ms": 60_000,
        "stream": RUN, "result": null, "error": null, "input_requests": {"q0": {"method": "elicitation/create"}},
        "input_responses": {}, "notify": null
    })
}

#[test]
fn task_records_round_trip_in_their_stored_layout() {
    for (name, status) in [
        ("working", TaskStatus::Working),
        ("input_required", TaskStatus::InputRequired),
        ("completed", TaskStatus::Completed),
        ("failed", TaskStatus::Failed),
        ("cancelled", TaskStatus::Cancelled),
    ] {
        let task = TaskRecord::decode("k", &stored_task(name).to_string()).unwrap();
        assert_eq!((task.status, task.flavor), (status, Flavor::Extension));
        let encoded: Value = serde_json::from_str(&task.encode().unwrap()).unwrap();
        assert_eq!(encoded, stored_task(name));
    }
    let mut v2025 = stored_task("working");
    v2025["flavor"] = json!("V2025");
    v2025.as_object_mut().unwrap().remove("notify");
    let task = TaskRecord::decode("k", &v2025.to_string()).unwrap();
    assert_eq!((task.flavor, task.notify), (Flavor::V2025, None));
}

#[test]
fn a_record_that_does_not_decode_is_a_typed_error_with_its_source() {
    let error = RunRecord::decode("r1", "{\"principal\": 5}").unwrap_err();
    assert!(
        matches!(&error, RecordError::Decode { kind: RecordKind::Run, key, .. } if key == "r1"),
        "{error:?}"
    );
    assert!(
        std::error::Error::source(&error).is_some(),
        "the decoder's error is kept"
    );
    assert_eq!(error.to_string(), "run record \"r1\" does not decode");
    let mut unknown = stored_task("working");
    unknown["status"] = json!("paused");
    let error = TaskRecord::decode("t1", &unknown.to_string()).unwrap_err();
    assert!(
        matches!(
            error,
            RecordError::Decode {
                kind: RecordKind::Task,
                ..
            }
        ),
        "an unknown status is refused: {error:?}"
    );
}

#[test]
fn canonical_json_sorts_object_keys_at_every_depth() {
    assert_eq!(
        canonical(&json!({"b": 1, "a": [{"d": 2, "c": "x"}]})),
        r#"{"a":[{"c":"x","d":2}],"b":1}"#
    );
    assert_eq!(canonical(&json!([3, null, true])), "[3,null,true]");
}

#[test]
fn subscription_entries_round_trip_in_their_stored_layout() {
    let stored = json!({"principal": "alice", "session": SESSION});
    let entry = SubscriptionEntry::decode("k", &stored.to_string()).unwrap();
    assert_eq!(
        entry,
        SubscriptionEntry {
            principal: "alice".into(),
            session: session()
        }
    );
    assert_eq!(
        serde_json::from_str::<Value>(&entry.encode().unwrap()).unwrap(),
        stored
    );
    let error = SubscriptionEntry::decode(
        "k",
        &json!({"principal": "alice", "session": "nope"}).to_string(),
    )
    .unwrap_err();
    assert!(
        matches!(
            error,
            RecordError::Decode {
                kind: RecordKind::Subscription,
                ..
            }
        ),
        "a malformed session id is refused: {error:?}"
    );
    assert_eq!(MARK, "1");
}

#[test]
fn iso8601_formats_utc() {
    assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(iso8601(1_764_505_800_123), "2025-11-30T12:30:00.123Z");
    assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
}

/// A run record keeps the trace context of its request's first run (re-runs link to it);
/// records without one (older workers, requests without a context) decode with none, and
/// a record without one is stored as it was (no `trace` key).
#[test]
fn run_records_keep_their_trace_context() {
    let mut stored = stored_run();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    stored["trace"] = json!({"traceparent": traceparent, "tracestate": "rojo=1"});
    let run = RunRecord::decode(RUN, &stored.to_string()).unwrap();
    let trace = run.trace.as_ref().unwrap();
    assert_eq!(
        (trace.traceparent.as_str(), trace.tracestate.as_deref()),
        (traceparent, Some("rojo=1"))
    );
    let encoded: Value = serde_json::from_str(&run.encode().unwrap()).unwrap();
    assert_eq!(encoded, stored, "encoded as it was stored");
    let without = RunRecord::decode(RUN, &stored_run().to_string()).unwrap();
    assert!(without.trace.is_none());
    let encoded: Value = serde_json::from_str(&without.encode().unwrap()).unwrap();
    assert!(
        encoded.get("trace").is_none(),
        "no trace key without a context"
    );
}

/// An alias keeps its run's stream and which request started it; an earlier version's
/// alias (the stream id alone) still decodes, with no fingerprint, and matches any request.
#[test]
fn alias_records_round_trip_in_their_stored_layout() {
    let request =
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x"}});
    let fingerprint = RequestFingerprint::of(&crate::Request::from_message(
        request.as_object().unwrap().clone(),
    ));
    let alias = AliasRecord {
        stream: stream(),
        request: Some(fingerprint.clone()),
    };
    let stored = json!({"stream": RUN, "request": "5fbac9b3a8d512988f0b0690b40abc3a"});
    assert_eq!(
        serde_json::from_str::<Value>(&alias.encode().unwrap()).unwrap(),
        stored
    );
    assert_eq!(
        AliasRecord::decode("k", &stored.to_string()).unwrap(),
        alias
    );
    let old = AliasRecord::decode("k", RUN).unwrap();
    assert_eq!(
        old,
        AliasRecord {
            stream: stream(),
            request: None
        }
    );
    assert!(
        old.started_by(&fingerprint),
        "an alias without a fingerprint matches any request"
    );
    let error = AliasRecord::decode("k", "not a stream").unwrap_err();
    assert!(
        matches!(
            error,
            RecordError::Decode {
                kind: RecordKind::Alias,
                ..
            }
        ),
        "{error:?}"
    );
}

/// The fingerprint is stored and compared across workers and versions: its value is
/// pinned. It is the method and the params, in any key order, without `params._meta`.
#[test]
fn request_fingerprints_are_stable_and_ignore_meta_and_key_order() {
    let of = |request: Value| {
        RequestFingerprint::of(&crate::Request::from_message(
            request.as_object().unwrap().clone(),
        ))
    };
    let first = of(
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x", "arguments": {"a": 1, "b": [true, null]}}}),
    );
    assert_eq!(
        first,
        of(
            json!({"id": "other", "method": "tools/call", "params": {"arguments": {"b": [true, null], "a": 1}, "name": "x", "_meta": {"progressToken": 3}}})
        )
    );
    // The first 16 bytes of SHA-256("durable-mcp/request\ntools/call\n{\"arguments\":{\"a\":1,\"b\":[true,null]},\"name\":\"x\"}"),
    // as any SHA-256 implementation computes them.
    assert_eq!(
        serde_json::to_value(&first).unwrap(),
        json!("9deccc26f06287cd6b9c7ac4bbe86586")
    );
    assert_ne!(
        first,
        of(
            json!({"method": "tools/call", "params": {"name": "x", "arguments": {"a": 2, "b": [true, null]}}})
        ),
        "other params"
    );
    assert_ne!(
        first,
        of(
            json!({"method": "prompts/get", "params": {"name": "x", "arguments": {"a": 1, "b": [true, null]}}})
        ),
        "another method"
    );
    assert_ne!(
        first,
        of(
            json!({"method": "tools/call", "params": {"name": "x", "arguments": {"a": 1, "b": [null, true]}}})
        ),
        "array order counts"
    );
    let task = of(
        json!({"method": "tools/call", "params": {"name": "x", "arguments": {"a": 1, "b": [true, null]}, "task": {}}}),
    );
    assert_ne!(first, task, "a task-augmented call is another request");
    let bare = of(json!({"method": "ping"}));
    assert_eq!(bare, of(json!({"method": "ping", "params": null})));
    assert_eq!(
        bare,
        of(json!({"method": "ping", "params": {"_meta": {"progressToken": "p"}}}))
    );
}

/// Credentials are never kept with a journaled request, by any of their usual names; other
/// headers are.
#[test]
fn credential_headers_are_told_by_name() {
    for name in [
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "x-auth-token",
        "x-client-secret",
        "db-password",
        "apikey",
    ] {
        let header = http::HeaderName::from_static(name);
        assert!(super::is_credential(&header), "{name}");
    }
    for name in [
        "accept",
        "x-request-id",
        "traceparent",
        "mcp-session-id",
        "user-agent",
    ] {
        let header = http::HeaderName::from_static(name);
        assert!(!super::is_credential(&header), "{name}");
    }
}

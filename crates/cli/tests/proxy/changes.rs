//! Issue 14 item 6: list changes and resource updates from upstream children reach the
//! clients subscribed to them, once per change: a session's child's on that session's GET
//! stream (committed first, resumable with `Last-Event-ID`), the pool's to every
//! 2026-07-28 `subscriptions/listen` stream whose filter covers them, once however many
//! pool children report the change; a session's resource subscriptions are taken over by
//! its fresh child.

use super::*;

pub(super) const TOOLS_CHANGED: &str = "notifications/tools/list_changed";
const UPDATED: &str = "notifications/resources/updated";
/// Keep-alive comments every this many milliseconds (a stream says it is quiet).
pub(super) const KEEP_ALIVE_MS: &str = "200";
/// A stream that carried nothing for this long has nothing more to carry.
pub(super) const QUIET: Duration = Duration::from_millis(1_500);
/// How long a stream may take to carry what a fresh upstream process reports.
const SLOW: Duration = Duration::from_secs(10);

/// A session's GET stream.
pub(super) fn get_stream(addr: SocketAddr, session: &str) -> Response {
    let stream = request(
        addr,
        "GET",
        &[("accept", "text/event-stream"), ("mcp-session-id", session)],
        None,
    );
    assert_eq!(stream.status, 200);
    stream
}

/// The messages with `method` a stream carries (with their event ids) until it has carried
/// `want`, or nothing for `quiet` (seen at a keep-alive: keep-alives already buffered while
/// the test did something else are read at once and do not count).
pub(super) fn carried(
    stream: &mut Response,
    method: &str,
    want: usize,
    quiet: Duration,
) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    let mut since = Instant::now();
    while seen.len() < want {
        let Some(block) = stream.next_block() else {
            break;
        };
        if block.starts_with(": keep-alive") {
            if since.elapsed() >= quiet {
                break;
            }
            continue;
        }
        let id = block
            .lines()
            .find_map(|l| l.strip_prefix("id: "))
            .unwrap_or_default()
            .to_owned();
        let Some(data) = block
            .lines()
            .find_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .filter(|d| !d.is_empty())
        else {
            continue;
        };
        let message: Value = serde_json::from_str(data).unwrap();
        if message["method"] == method {
            seen.push((id, message));
            since = Instant::now();
        }
    }
    seen
}

/// D1, D3: a list change reported by a session's child goes to that session's GET stream,
/// once, and to no other session; a change committed while the client had no GET stream
/// reaches it when it resumes with the last event id it saw.
#[test]
fn d3_a_session_childs_list_change_reaches_its_get_stream_once_and_a_resumed_one() {
    let Some(python) = python() else { return };
    let server = start_proxy(
        &python,
        "memory:",
        free_port(),
        &["--sse-keep-alive-ms", KEEP_ALIVE_MS],
    );
    let addr = server.addr;
    let (a, b) = (initialize(addr), initialize(addr));
    let (mut on_a, mut on_b) = (get_stream(addr, &a), get_stream(addr, &b));
    assert!(
        !text(&outcome(
            post(addr, Some(&a), &call(1, "change_tools", json!({}))),
            1
        ))
        .is_empty()
    );
    let first = carried(&mut on_a, TOOLS_CHANGED, 2, QUIET);
    assert_eq!(
        first.len(),
        1,
        "once, on the session's GET stream: {first:?}"
    );
    assert_eq!(
        carried(&mut on_b, TOOLS_CHANGED, 1, QUIET).len(),
        0,
        "another session has its own child"
    );

    // The client goes away; a change is committed meanwhile; it resumes.
    drop(on_a);
    let _ = outcome(post(addr, Some(&a), &call(2, "change_tools", json!({}))), 2);
    let mut resumed = resume(addr, &a, &first[0].0);
    assert_eq!(resumed.status, 200);
    let missed = carried(&mut resumed, TOOLS_CHANGED, 2, QUIET);
    assert_eq!(
        missed.len(),
        1,
        "the change it missed, once (and not the one it had): {missed:?}"
    );
    assert_ne!(missed[0].0, first[0].0);
}

/// Open a listen stream and read its acknowledgement.
fn listening(addr: SocketAddr, notifications: Value) -> Response {
    let mut stream = listen(addr, notifications, false);
    assert_eq!(stream.status, 200);
    let ack = next_message(&mut stream);
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    stream
}

/// A change of state shared by every pool child (a file each one watches) is reported by
/// each of them; every listen stream filtered on tool list changes gets it once, one
/// filtered on prompts none; a later change is a new one.
#[test]
fn a_change_seen_by_several_pool_children_reaches_each_listener_once() {
    let Some(python) = python() else { return };
    let dir = temp_dir("proxy-pool-changes");
    let watched = dir.join("state");
    let server = start_proxy(
        &python,
        "memory:",
        free_port(),
        &["--pool-size", "3", "--sse-keep-alive-ms", KEEP_ALIVE_MS],
    );
    let addr = server.addr;
    // Each pool child watches the file.
    let mut pids = std::collections::BTreeSet::new();
    for id in 1..=12 {
        let got = modern(
            addr,
            id,
            "tools/call",
            json!({"name": "watch", "arguments": {"path": watched.to_str().unwrap()}}),
            false,
        );
        pids.insert(text(&got).to_owned());
        if pids.len() == 3 {
            break;
        }
    }
    assert_eq!(pids.len(), 3, "three pool children watch: {pids:?}");
    let mut tools = [
        listening(addr, json!({"toolsListChanged": true})),
        listening(addr, json!({"toolsListChanged": true})),
    ];
    let mut prompts = listening(addr, json!({"promptsListChanged": true}));

    for (round, content) in ["one", "two"].into_iter().enumerate() {
        std::fs::write(&watched, content).unwrap();
        for stream in &mut tools {
            let got = carried(stream, TOOLS_CHANGED, 2, QUIET);
            assert_eq!(
                got.len(),
                1,
                "round {round}: reported by three children, told once: {got:?}"
            );
            assert_eq!(
                got[0].1["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 77,
                "{got:?}"
            );
        }
    }
    assert_eq!(
        carried(&mut prompts, TOOLS_CHANGED, 1, QUIET).len(),
        0,
        "not a kind it listens to"
    );
}

/// server-everything's resources, subscribed: `toggle-subscriber-updates` makes the process
/// report an update of each resource it is subscribed to (at once, then every 5 s).
const RESOURCE: &str = "demo://resource/static/document/architecture.md";

/// D4: a session's `resources/subscribe` outlives its child: the fresh child (after an
/// idle stop) is subscribed from the session's stored subscriptions, and its updates reach
/// the session's GET stream.
#[test]
fn d4_a_sessions_resource_subscription_is_taken_over_by_its_fresh_child() {
    let Some(upstream) = server_everything() else {
        return;
    };
    let server = start_proxy_of(
        &upstream,
        "memory:",
        free_port(),
        &[
            "--idle-stop-secs",
            "1",
            "--sse-keep-alive-ms",
            KEEP_ALIVE_MS,
        ],
    );
    let addr = server.addr;
    let proxy_pid = server.child.id();
    let session = initialize(addr);
    let mut stream = get_stream(addr, &session);
    let subscribe = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/subscribe", "params": {"uri": RESOURCE}});
    assert!(
        outcome(post(addr, Some(&session), &subscribe), 1)
            .get("error")
            .is_none()
    );
    let toggled = outcome(
        post(
            addr,
            Some(&session),
            &call(2, "toggle-subscriber-updates", json!({})),
        ),
        2,
    );
    assert!(text(&toggled).starts_with("Started"), "{toggled}");
    let got = carried(&mut stream, UPDATED, 1, SLOW);
    assert_eq!(
        got.first().map(|(_, m)| m["params"]["uri"].clone()),
        Some(json!(RESOURCE)),
        "{got:?}"
    );

    // Idle: the child is stopped, and its updates with it.
    wait_until("the idle child was not stopped", || {
        children_of(proxy_pid) == 0
    });
    let toggled = outcome(
        post(
            addr,
            Some(&session),
            &call(3, "toggle-subscriber-updates", json!({})),
        ),
        3,
    );
    assert!(
        text(&toggled).starts_with("Started"),
        "a fresh child: {toggled}"
    );
    let got = carried(&mut stream, UPDATED, 1, SLOW);
    assert_eq!(
        got.len(),
        1,
        "the fresh child was subscribed to the session's resource: {got:?}"
    );
}

/// A 2026-07-28 listen stream that follows a resource: the pool's child is subscribed to
/// it, and the updates it reports reach that stream, not one that follows another resource.
#[test]
fn a_listen_streams_resource_is_subscribed_on_the_pool_and_its_updates_arrive() {
    let Some(upstream) = server_everything() else {
        return;
    };
    let server = start_proxy_of(
        &upstream,
        "memory:",
        free_port(),
        &["--pool-size", "1", "--sse-keep-alive-ms", KEEP_ALIVE_MS],
    );
    let addr = server.addr;
    let mut following = listening(addr, json!({"resourceSubscriptions": [RESOURCE]}));
    let mut other = listening(
        addr,
        json!({"resourceSubscriptions": ["demo://resource/static/document/features.md"]}),
    );
    let toggled = modern(
        addr,
        1,
        "tools/call",
        json!({"name": "toggle-subscriber-updates", "arguments": {}}),
        false,
    );
    assert!(text(&toggled).starts_with("Started"), "{toggled}");
    let got = carried(&mut following, UPDATED, 1, SLOW);
    assert_eq!(
        got.first().map(|(_, m)| m["params"]["uri"].clone()),
        Some(json!(RESOURCE)),
        "{got:?}"
    );
    let _ = modern(
        addr,
        2,
        "tools/call",
        json!({"name": "toggle-subscriber-updates", "arguments": {}}),
        false,
    );
    assert!(
        carried(&mut other, UPDATED, 1, QUIET)
            .iter()
            .all(|(_, m)| m["params"]["uri"] != RESOURCE),
        "only what it follows"
    );
}

//! Unit tests of the journal (leases, fencing, recovery) against the memory store.

use std::sync::Arc;
use std::time::Duration;

use durable_mcp_handler::McpHandler;
use durable_mcp_handler::rmcp::{self, ServerHandler};
use durable_mcp_store::testing::CountingStore;
use durable_mcp_store::{
    Expect, Principal, RecordKind, Store, StoreError, StreamId, StreamOwner, now_ms,
};
use durable_mcp_store_memory::MemoryStore;
use serde_json::{Value, json};

use crate::journal::Held;
use crate::records::RunRecord;
use crate::{Engine, EngineOptions};

#[derive(Clone)]
struct Nothing;

impl ServerHandler for Nothing {}

fn engine(store: Arc<dyn Store>, lease: Duration) -> Engine {
    Engine::new(
        store,
        McpHandler::new(Nothing),
        EngineOptions {
            lease,
            ..EngineOptions::default()
        },
    )
}

/// A journaled stateless (2026-07-28) `tools/call` on a fresh open stream, owned by
/// `owner` until `lease_until_ms`; returns its run id and version.
async fn journaled(
    store: &dyn Store,
    owner: &str,
    lease_until_ms: u64,
    failures: u32,
) -> (String, u64, StreamId) {
    let stream = StreamId::random();
    store
        .create_stream(
            &stream,
            &StreamOwner {
                principal: Principal::anonymous(),
                session: None,
            },
        )
        .await
        .unwrap();
    let record: RunRecord = serde_json::from_value(json!({
        "principal": Principal::anonymous().as_str(), "session": null, "modern": true, "protocol_version": "2026-07-28",
        "log_level": null, "request": {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x"}},
        "stream": stream.to_string(), "inbox": StreamId::random().to_string(), "owner": owner,
        "lease_until_ms": lease_until_ms, "attempt": 1, "failures": failures,
    }))
    .unwrap();
    let run_id = stream.to_string();
    let version = store
        .put_record(
            RecordKind::Run,
            &run_id,
            record.encode().unwrap(),
            None,
            Expect::Absent,
        )
        .await
        .unwrap();
    (run_id, version, stream)
}

fn owner_of(record: &durable_mcp_store::Record) -> String {
    serde_json::from_str::<Value>(&record.value).unwrap()["owner"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// D7: a live lease of another worker is left alone: no write, no re-run.
#[tokio::test]
async fn d7_recovery_leaves_another_workers_live_lease_alone() {
    let counting = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
    let store: Arc<dyn Store> = counting.clone();
    let (run_id, version, stream) = journaled(&*store, "other", now_ms() + 60_000, 0).await;
    let engine = engine(store.clone(), Duration::from_secs(5));
    counting.hook().take();
    assert_eq!(engine.recover().await.unwrap(), 0);
    assert_eq!(
        counting.hook().writes(),
        0,
        "recovery wrote nothing: {:?}",
        counting.hook().take()
    );
    let record = store
        .get_record(RecordKind::Run, &run_id)
        .await
        .unwrap()
        .expect("still journaled");
    assert_eq!(
        (record.version, owner_of(&record)),
        (version, "other".to_owned())
    );
    assert!(
        store
            .read_after(&stream, 0, 10)
            .await
            .unwrap()
            .events
            .is_empty()
    );
}

/// D7: an expired lease is taken over by compare-and-set (the old owner is fenced: its next
/// write with the version it holds conflicts), and the run is ended on its stream.
#[tokio::test]
async fn d7_recovery_takes_over_an_expired_lease_and_fences_the_old_owner() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (run_id, version, stream) = journaled(&*store, "dead", now_ms().saturating_sub(1), 0).await;
    let engine = engine(store.clone(), Duration::from_secs(5));
    engine.recover().await.unwrap();
    let stale = store
        .put_record(
            RecordKind::Run,
            &run_id,
            "{}".into(),
            None,
            Expect::Version(version),
        )
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { .. })),
        "the old owner is fenced: {stale:?}"
    );
    // A stateless (2026-07-28) request's client left with its connection: the run ends
    // with an error on its stream, and leaves the journal.
    let read = store.read_after(&stream, 0, 10).await.unwrap();
    assert!(read.finished, "the stream is closed");
    let last: Value = serde_json::from_str(&read.events.last().unwrap().data).unwrap();
    assert_eq!(
        (last["id"].clone(), last["error"].is_object()),
        (json!(5), true),
        "{last}"
    );
    assert!(
        store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .is_none()
    );
}

/// D7: a restarted worker takes over its own runs from before the restart at once, without
/// waiting for their leases to expire.
#[tokio::test]
async fn d7_a_restarted_worker_takes_over_its_own_runs_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine = engine(store.clone(), Duration::from_secs(5));
    let me = engine.options().worker_id.clone();
    // Granted by the previous process: it ends before this one's first lease would.
    let (run_id, _, stream) = journaled(&*store, &me, now_ms() + 1_000, 0).await;
    engine.recover().await.unwrap();
    assert!(
        store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .is_none(),
        "taken over and ended"
    );
    assert!(store.read_after(&stream, 0, 10).await.unwrap().finished);
}

/// D7: the heartbeat renews the lease; once another worker has taken the run over (the
/// version moved on), the heartbeat's compare-and-set fails and the run learns it is lost.
#[tokio::test]
async fn d7_heartbeat_renews_the_lease_and_detects_a_takeover() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let lease = Duration::from_millis(300);
    let engine = engine(store.clone(), lease);
    let me = engine.options().worker_id.clone();
    let first_lease = now_ms() + 300;
    let (run_id, version, _) = journaled(&*store, &me, first_lease, 0).await;
    let record = RunRecord::decode(
        &run_id,
        &store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .unwrap()
            .value,
    )
    .unwrap();
    let held = Held::start(engine.requests().journal(), run_id.clone(), record, version);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let renewed = loop {
        let current = store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .unwrap();
        if current.version > version {
            break current;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the heartbeat never renewed the lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let renewed_until = serde_json::from_str::<Value>(&renewed.value).unwrap()["lease_until_ms"]
        .as_u64()
        .unwrap();
    assert!(
        renewed_until > first_lease,
        "renewed: {renewed_until} > {first_lease}"
    );
    assert!(!held.lost.is_cancelled());
    // Another worker takes over (a compare-and-set from the version it read).
    let mut taken: Value = serde_json::from_str(&renewed.value).unwrap();
    taken["owner"] = json!("thief");
    store
        .put_record(
            RecordKind::Run,
            &run_id,
            taken.to_string(),
            None,
            Expect::Version(renewed.version),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), held.lost.cancelled())
        .await
        .expect("the heartbeat sees the takeover");
    let current = store
        .get_record(RecordKind::Run, &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        owner_of(&current),
        "thief",
        "the fenced heartbeat wrote nothing more"
    );
}

/// D7 with one heartbeat for all held runs: holding many runs adds one task (not one
/// each), renews every run's lease, fences only the run another worker took over, and the
/// task ends once no run is held.
#[tokio::test]
async fn d7_one_shared_heartbeat_renews_every_held_run_and_fences_only_the_lost_one() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let lease = Duration::from_millis(300);
    let engine = engine(store.clone(), lease);
    let me = engine.options().worker_id.clone();
    let tasks_before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let mut held = Vec::new();
    for _ in 0..8 {
        let (run_id, version, _) = journaled(&*store, &me, now_ms() + 300, 0).await;
        let record = RunRecord::decode(
            &run_id,
            &store
                .get_record(RecordKind::Run, &run_id)
                .await
                .unwrap()
                .unwrap()
                .value,
        )
        .unwrap();
        held.push((
            Held::start(engine.requests().journal(), run_id, record, version),
            version,
        ));
    }
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
        - tasks_before;
    assert!(
        tasks <= 1,
        "8 held runs started {tasks} tasks; one heartbeat serves them all"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    for (run, version) in &held {
        while store
            .get_record(RecordKind::Run, &run.run_id)
            .await
            .unwrap()
            .unwrap()
            .version
            <= *version
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "run {} was never renewed",
                run.run_id
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Another worker takes the first run over: only that one is fenced.
    let (first, _) = &held[0];
    let current = store
        .get_record(RecordKind::Run, &first.run_id)
        .await
        .unwrap()
        .unwrap();
    let mut taken: Value = serde_json::from_str(&current.value).unwrap();
    taken["owner"] = json!("thief");
    store
        .put_record(
            RecordKind::Run,
            &first.run_id,
            taken.to_string(),
            None,
            Expect::Version(current.version),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), first.lost.cancelled())
        .await
        .expect("the heartbeat sees the takeover");
    let (second, _) = &held[1];
    let before = store
        .get_record(RecordKind::Run, &second.run_id)
        .await
        .unwrap()
        .unwrap()
        .version;
    while store
        .get_record(RecordKind::Run, &second.run_id)
        .await
        .unwrap()
        .unwrap()
        .version
        <= before
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the other runs are no longer renewed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        held[1..]
            .iter()
            .all(|(run, _)| !run.lost.is_cancelled() && run.lease_valid())
    );
    assert_eq!(
        owner_of(
            &store
                .get_record(RecordKind::Run, &first.run_id)
                .await
                .unwrap()
                .unwrap()
        ),
        "thief"
    );
    drop(held);
    assert_eq!(
        engine.requests().journal().heartbeats().held(),
        0,
        "dropped runs leave the heartbeat"
    );
    while engine.requests().journal().heartbeats().ticking() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the heartbeat task never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The cap on attempts (`max_attempts`, 10 by default): a run that failed that often is not
/// run again. One whose client can read a later outcome (a legacy stream) is parked for an
/// operator, its stream open; a stateless one ends with an error.
#[tokio::test]
async fn d7_a_run_that_failed_max_attempts_times_is_parked_not_rerun() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine = engine(store.clone(), Duration::from_secs(5));
    assert_eq!(engine.options().max_attempts, 10);
    let (run_id, _, stream) = journaled(&*store, "dead", now_ms().saturating_sub(1), 10).await;
    // Make it a legacy run, which would otherwise be re-run on its stream.
    let mut record: Value = serde_json::from_str(
        &store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .unwrap()
            .value,
    )
    .unwrap();
    record["modern"] = json!(false);
    record["protocol_version"] = json!("2025-11-25");
    store
        .put_record(
            RecordKind::Run,
            &run_id,
            record.to_string(),
            None,
            Expect::Version(1),
        )
        .await
        .unwrap();
    assert_eq!(engine.recover().await.unwrap(), 0, "not re-run");
    assert!(!store.read_after(&stream, 0, 10).await.unwrap().finished);
    let parked = RunRecord::decode(
        &run_id,
        &store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .unwrap()
            .value,
    )
    .unwrap();
    assert_eq!(
        parked.parked.map(|parked| parked.reason),
        Some(crate::records::ParkReason::TooManyFailures)
    );
    assert_eq!(engine.recover().await.unwrap(), 0, "still not re-run");

    let (run_id, _, stream) = journaled(&*store, "dead", now_ms().saturating_sub(1), 10).await;
    assert_eq!(engine.recover().await.unwrap(), 0, "not re-run");
    let read = store.read_after(&stream, 0, 10).await.unwrap();
    let last: Value = serde_json::from_str(&read.events.last().unwrap().data).unwrap();
    assert!(read.finished && last["error"].is_object(), "{last}");
    assert!(
        store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .is_none()
    );
}

fn tools_call(arguments: Value) -> crate::Request {
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": arguments}});
    crate::Request::from_message(message.as_object().cloned().unwrap())
}

/// D12: a sealed `requestState` opens only for the principal, method and parameters it was
/// sealed for; tampered or foreign state is refused with an error naming `requestState`.
#[tokio::test]
async fn d12_request_state_is_bound_to_principal_method_and_parameters() {
    let keys = engine(Arc::new(MemoryStore::new()), Duration::from_secs(5))
        .state_keys()
        .await
        .unwrap();
    let alice = Principal::new("alice");
    let request = tools_call(json!({"n": 1}));
    let sealed = crate::journal::seal_run(&keys, "run-1", &alice, &request);
    assert_eq!(
        crate::journal::open_run(&keys, &sealed, &alice, &request).unwrap(),
        "run-1"
    );
    // `requestState`, `inputResponses` and `_meta` are not part of the binding.
    let mut retry = request.clone().into_message();
    retry["params"]["requestState"] = json!(sealed.clone());
    retry["params"]["_meta"] = json!({"x": 1});
    let retry = crate::Request::from_message(retry);
    assert_eq!(
        crate::journal::open_run(&keys, &sealed, &alice, &retry).unwrap(),
        "run-1"
    );
    let refusals = [
        crate::journal::open_run(&keys, &sealed, &Principal::new("bob"), &request),
        crate::journal::open_run(&keys, &sealed, &alice, &tools_call(json!({"n": 2}))),
        crate::journal::open_run(&keys, &sealed, &alice, &{
            let mut other = request.clone().into_message();
            other["method"] = json!("prompts/get");
            crate::Request::from_message(other)
        }),
        crate::journal::open_run(&keys, &format!("{sealed}x"), &alice, &request),
        crate::journal::open_run(&keys, sealed.trim_start_matches("dmcp."), &alice, &request),
    ];
    for (i, refused) in refusals.into_iter().enumerate() {
        let error = refused.expect_err("refused").to_string();
        assert!(
            error.starts_with("invalid requestState"),
            "case {i}: {error}"
        );
    }
    // Another server key (another deployment) cannot open it either.
    let other = engine_with_key(b"another deployment's key of at least 32 bytes")
        .state_keys()
        .await
        .unwrap();
    assert!(crate::journal::open_run(&other, &sealed, &alice, &request).is_err());
}

fn engine_with_key(key: &[u8]) -> Engine {
    let options = EngineOptions {
        state_key: Some(key.to_vec()),
        ..EngineOptions::default()
    };
    Engine::new(
        Arc::new(MemoryStore::new()),
        McpHandler::new(Nothing),
        options,
    )
}

/// D12: sealed state expires: once its time to live has passed it is refused.
#[tokio::test]
async fn d12_request_state_expires() {
    let keys = durable_mcp_handler::StateKeys::fixed(b"a test key that is at least 32 bytes long")
        .unwrap();
    let sealer = durable_mcp_handler::StateSealer::new(keys);
    let sealed = sealer.seal(&json!({"run": "r"}), b"binding", Duration::from_secs(1));
    assert_eq!(
        sealer.open(&sealed, b"binding").unwrap(),
        json!({"run": "r"})
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let error = loop {
        match sealer.open(&sealed, b"binding") {
            Err(error) => break error,
            Ok(_) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "still valid 10 s after a 1 s time to live"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(
        error.to_string().contains("invalid requestState"),
        "{error}"
    );
}

/// D7: two workers claiming the same expired entry from the same read: the first
/// compare-and-set wins, the second gets nothing (and writes nothing).
#[tokio::test]
async fn d7_of_two_claims_of_one_expired_lease_one_wins() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (run_id, _, _) = journaled(&*store, "dead", now_ms().saturating_sub(1), 0).await;
    let read = store
        .get_record(RecordKind::Run, &run_id)
        .await
        .unwrap()
        .unwrap();
    let (first, second) = (
        engine(store.clone(), Duration::from_secs(5)),
        engine(store.clone(), Duration::from_secs(5)),
    );
    let held = first
        .requests()
        .journal()
        .claim(read.clone())
        .await
        .unwrap()
        .expect("the first claim wins");
    assert_eq!(
        (held.record.owner.as_str(), held.record.attempt),
        (first.options().worker_id.as_str(), 2)
    );
    assert!(
        second
            .requests()
            .journal()
            .claim(read)
            .await
            .unwrap()
            .is_none(),
        "the second lost the compare-and-set"
    );
    let current = store
        .get_record(RecordKind::Run, &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(owner_of(&current), first.options().worker_id);
}

/// An entry that does not decode is removed when it is claimed, so that it does not stay in
/// the journal forever; a decodable live one is left alone.
#[tokio::test]
async fn an_undecodable_journal_entry_is_removed_when_claimed() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    store
        .put_record(
            RecordKind::Run,
            "broken",
            "{\"not\": \"a run\"}".into(),
            None,
            Expect::Absent,
        )
        .await
        .unwrap();
    let engine = engine(store.clone(), Duration::from_secs(5));
    let broken = store
        .get_record(RecordKind::Run, "broken")
        .await
        .unwrap()
        .unwrap();
    assert!(
        engine
            .requests()
            .journal()
            .claim(broken)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .get_record(RecordKind::Run, "broken")
            .await
            .unwrap()
            .is_none(),
        "removed"
    );
    let (run_id, version, _) = journaled(&*store, "other", now_ms() + 60_000, 0).await;
    let live = store
        .get_record(RecordKind::Run, &run_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        engine
            .requests()
            .journal()
            .claim(live)
            .await
            .unwrap()
            .is_none(),
        "a live lease is not claimed"
    );
    assert_eq!(
        store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .unwrap()
            .version,
        version
    );
}

/// D7, a re-sent request that finds its run journaled: a run no live worker runs (this
/// worker's, not running here; or given back) is adopted at once, whatever its lease says;
/// another worker's live lease is not (recovery takes it when it runs out).
#[tokio::test]
async fn d7_a_resent_request_adopts_a_run_no_live_worker_runs() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine = engine(store.clone(), Duration::from_secs(5));
    let me = engine.options().worker_id.clone();
    let far = now_ms() + 60_000;
    for (owner, adopted) in [(me.as_str(), true), ("", true), ("other", false)] {
        let (run_id, _, _) = journaled(&*store, owner, far, 0).await;
        let record = store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .unwrap();
        assert!(
            engine
                .requests()
                .journal()
                .claim(record.clone())
                .await
                .unwrap()
                .is_none(),
            "owner {owner:?}: recovery waits for the lease"
        );
        let held = engine.requests().journal().adopt(record).await.unwrap();
        assert_eq!(held.is_some(), adopted, "owner {owner:?}");
        if let Some(held) = held {
            let record = store
                .get_record(RecordKind::Run, &run_id)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(owner_of(&record), me);
            assert_eq!(held.record.attempt, 2, "a re-run counts as an attempt");
            held.finish(engine.requests().journal()).await;
        }
    }
}

/// A handler whose one tool, `count`, answers with how many times it ran (and may run as a
/// 2025-11-25 task).
#[derive(Clone)]
struct Counter(Arc<std::sync::atomic::AtomicUsize>);

impl ServerHandler for Counter {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        let meta = json!({durable_mcp_handler::tasks::TASK_SUPPORT_META: "optional"});
        let mut tool =
            rmcp::model::Tool::new(name.to_owned(), "counts its runs", serde_json::Map::new());
        tool.meta = meta.as_object().cloned().map(rmcp::model::MetaObject);
        (name == "count").then_some(tool)
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        _: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let run = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        Ok(
            rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(format!(
                "{} run {run}",
                request.name
            ))])
            .into(),
        )
    }
}

fn object(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

/// A 2025-11-25 session's caller, on an engine whose handler is a [`Counter`].
async fn counted_session(
    store: Arc<dyn Store>,
) -> (Engine, crate::Caller, Arc<std::sync::atomic::AtomicUsize>) {
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let engine = Engine::new(
        store,
        McpHandler::new(Counter(runs.clone())),
        EngineOptions::default(),
    );
    let principal = Principal::anonymous();
    let request = object(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    );
    let request = crate::Request::from_message(request);
    let (session, _) = engine.initialize(&principal, request, None).await.unwrap();
    let caller = crate::Caller::legacy(principal, session.expect("a session")).unwrap();
    (engine, caller, runs)
}

/// Wait until no request runs on `engine`.
async fn idle(engine: &Engine) {
    for _ in 0..1_000 {
        if engine.in_flight() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("requests still run");
}

/// The refusal of a request under a used id: -32600 naming the id, nothing else.
fn assert_reused(refused: Result<crate::Accepted, crate::EngineError>, id: &str) {
    match refused {
        Err(crate::EngineError::Rejected(rejection)) => {
            assert_eq!(rejection.code, -32600, "{rejection:?}");
            assert_eq!(
                rejection.message,
                format!("request id {id} was already used in this session by another request")
            );
            assert_eq!(rejection.id.map(|id| id.to_string()), Some(id.to_owned()));
        }
        Err(other) => panic!("another error: {other}"),
        Ok(accepted) => panic!("answered on stream {}", accepted.stream),
    }
}

/// D6: a request id sent twice at the same moment, before the first copy is journaled (a
/// new run's first commit waits for its handler): the second copy waits for the first's
/// first commit, then attaches to its run. Both get the one outcome; the handler runs once.
#[tokio::test]
async fn d6_a_request_id_sent_twice_at_once_runs_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (engine, caller, runs) = counted_session(store).await;
    let request = || {
        crate::Request::from_message(object(json!({"jsonrpc": "2.0", "id": 5,
            "method": "tools/call", "params": {"name": "count", "arguments": {}}})))
    };
    let (first, second) = tokio::join!(
        engine.accept(&caller, request()),
        engine.accept(&caller, request())
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.stream, second.stream, "one run answers both");
    idle(&engine).await;
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the handler ran once"
    );
}

/// D6: a session's request id names one request. A re-send of it (its params in another
/// key order, another `_meta`, or none) gets the outcome of its one run; another request
/// under the id (other params, another method) is refused with -32600 naming the id, and
/// writes nothing (its one batch is refused) and runs nothing: the id's first run, its
/// stream and its alias are as they were.
#[tokio::test]
async fn d6_a_reused_id_with_another_request_is_refused() {
    let counting = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
    let store: Arc<dyn Store> = counting.clone();
    let (engine, caller, runs) = counted_session(store.clone()).await;
    let call = |arguments: Value, meta: Option<Value>| {
        let mut params = json!({"name": "count", "arguments": arguments});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        object(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}))
    };
    let first = engine
        .accept(
            &caller,
            crate::Request::new(
                json!(7),
                call(
                    json!({"a": 1, "b": [1, 2]}),
                    Some(json!({"progressToken": "p1"})),
                ),
            ),
        )
        .await
        .unwrap();
    idle(&engine).await;
    let answered = store.read_after(&first.stream, 0, 100).await.unwrap();
    assert!(answered.finished);
    let outcome: Value = serde_json::from_str(&answered.events.last().unwrap().data).unwrap();
    assert_eq!(
        outcome["result"]["content"][0]["text"], "count run 1",
        "{outcome}"
    );

    for resend in [
        call(
            json!({"b": [1, 2], "a": 1}),
            Some(json!({"progressToken": "p2"})),
        ),
        call(json!({"a": 1, "b": [1, 2]}), None),
    ] {
        let again = engine
            .accept(&caller, crate::Request::new(json!(7), resend))
            .await
            .unwrap();
        assert_eq!(
            again.stream, first.stream,
            "a re-send is attached to the id's run"
        );
    }
    idle(&engine).await;
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the handler ran once"
    );

    let alias = store.list_records(RecordKind::Alias, "", 10).await.unwrap();
    counting.hook().take();
    let prompt = object(
        json!({"jsonrpc": "2.0", "id": 7, "method": "prompts/get", "params": {"name": "count", "arguments": {"a": 1, "b": [1, 2]}}}),
    );
    for other in [
        call(json!({"a": 2, "b": [1, 2]}), None),
        call(json!({"a": 1, "b": [2, 1]}), None),
        prompt,
    ] {
        assert_reused(
            engine
                .accept(&caller, crate::Request::new(json!(7), other))
                .await,
            "7",
        );
    }
    let counts = counting.hook().take();
    let writes: Vec<_> = counts
        .iter()
        .filter(|(op, _)| op.is_write())
        .map(|(op, n)| (*op, *n))
        .collect();
    assert_eq!(
        writes,
        vec![(durable_mcp_store::testing::Op::Commit, 3)],
        "the refused batches only: {counts:?}"
    );
    idle(&engine).await;
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "nothing of another request ran"
    );
    assert_eq!(
        store
            .read_after(&first.stream, 0, 100)
            .await
            .unwrap()
            .events,
        answered.events,
        "the first run's stream is untouched"
    );
    assert_eq!(
        store.list_records(RecordKind::Alias, "", 10).await.unwrap(),
        alias,
        "the alias is untouched"
    );
    assert!(
        store
            .list_records(RecordKind::Run, "", 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing journaled"
    );
}

/// D6 for a 2025-11-25 task-augmented call (its alias is written after its stream): a
/// re-send attaches to the task's request stream; the same id without `params.task`, or
/// with other arguments, is another request and is refused, and no second task starts.
#[tokio::test]
async fn d6_a_reused_id_of_a_task_call_with_another_request_is_refused() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (engine, caller, runs) = counted_session(store.clone()).await;
    let call = |arguments: Value, task: bool| {
        let mut params = json!({"name": "count", "arguments": arguments});
        if task {
            params["task"] = json!({});
        }
        object(json!({"jsonrpc": "2.0", "id": "t-1", "method": "tools/call", "params": params}))
    };
    let first = engine
        .accept(
            &caller,
            crate::Request::new(json!("t-1"), call(json!({"a": 1}), true)),
        )
        .await
        .unwrap();
    let created = store.read_after(&first.stream, 0, 100).await.unwrap();
    let created: Value = serde_json::from_str(&created.events.last().unwrap().data).unwrap();
    assert!(created["result"]["task"]["taskId"].is_string(), "{created}");
    let again = engine
        .accept(
            &caller,
            crate::Request::new(json!("t-1"), call(json!({"a": 1}), true)),
        )
        .await
        .unwrap();
    assert_eq!(
        again.stream, first.stream,
        "a re-send is attached to the task's request"
    );
    assert_reused(
        engine
            .accept(
                &caller,
                crate::Request::new(json!("t-1"), call(json!({"a": 1}), false)),
            )
            .await,
        "\"t-1\"",
    );
    assert_reused(
        engine
            .accept(
                &caller,
                crate::Request::new(json!("t-1"), call(json!({"a": 2}), true)),
            )
            .await,
        "\"t-1\"",
    );
    for _ in 0..500 {
        if runs.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    idle(&engine).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one task ran"
    );
    let tasks = store.list_records(RecordKind::Task, "", 10).await.unwrap();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
}

//! Operators' actions on runs (`runs cancel|kill|retry|purge`) and parked runs, against the
//! memory store: the handler stops, the client reads who ended its request, the action is
//! kept, a killed run's handler commits nothing more, and a parked run waits for an
//! operator, then runs again with its steps replayed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use durable_mcp_handler::rmcp::{self, ServerHandler};
use durable_mcp_handler::{Durable, DurableError, McpHandler};
use durable_mcp_protocol::McpVersion;
use durable_mcp_protocol::jsonrpc::code;
use durable_mcp_store::{Principal, RecordKind, Store, StreamId};
use durable_mcp_store_memory::MemoryStore;
use serde_json::Value;

use crate::records::{ActionKind, key};
use crate::{Caller, Engine, EngineError, EngineOptions, Era};

/// `block` commits a step, then waits for cancellation (and says it saw it); `stubborn`
/// ignores cancellation and runs steps of 250 ms one after another, counting those that
/// committed, until a step is refused. `returned` is set when a handler returns.
/// `poisoned` runs step `first` (counted in `firsts`), then fails while `poison` is set: with
/// a retryable error, or by panicking with `poison_panics`; else runs step `second` (counted
/// in `seconds`) and answers.
#[derive(Clone, Default)]
struct Operated {
    saw_cancel: Arc<AtomicBool>,
    committed: Arc<AtomicU32>,
    returned: Arc<AtomicBool>,
    poison: Arc<AtomicBool>,
    poison_panics: bool,
    firsts: Arc<AtomicU32>,
    seconds: Arc<AtomicU32>,
}

/// Sets its flag when dropped: when the handler returns, whichever way.
struct Returned(Arc<AtomicBool>);

impl Drop for Returned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl ServerHandler for Operated {
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let _returned = Returned(self.returned.clone());
        let durable = context
            .extensions
            .get::<Durable>()
            .cloned()
            .expect("a journaled run has a durable context");
        match &*request.name {
            "poisoned" => {
                let counted = |count: Arc<AtomicU32>| async move {
                    count.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(())
                };
                durable
                    .step("first", |_| counted(self.firsts.clone()))
                    .await
                    .map_err(rmcp::ErrorData::from)?
                    .map_err(|e| rmcp::ErrorData::internal_error(e, None))?;
                if self.poison.load(Ordering::SeqCst) {
                    assert!(!self.poison_panics, "poisoned");
                    return Err(DurableError::retryable("payments are down").into());
                }
                durable
                    .step("second", |_| counted(self.seconds.clone()))
                    .await
                    .map_err(rmcp::ErrorData::from)?
                    .map_err(|e| rmcp::ErrorData::internal_error(e, None))?;
                Ok(
                    rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(
                        "paid",
                    )])
                    .into(),
                )
            }
            "block" => {
                durable
                    .step("started", |_| async { Ok::<_, String>(1) })
                    .await
                    .map_err(rmcp::ErrorData::from)?
                    .map_err(|e| rmcp::ErrorData::internal_error(e, None))?;
                context.ct.cancelled().await;
                self.saw_cancel.store(true, Ordering::SeqCst);
                Err(rmcp::ErrorData::internal_error("cancelled", None))
            }
            _ => {
                for index in 0.. {
                    durable
                        .step(&format!("tick-{index}"), |_| async move {
                            tokio::time::sleep(Duration::from_millis(250)).await;
                            Ok::<_, String>(index)
                        })
                        .await
                        .map_err(rmcp::ErrorData::from)?
                        .map_err(|e| rmcp::ErrorData::internal_error(e, None))?;
                    self.committed.fetch_add(1, Ordering::SeqCst);
                }
                unreachable!()
            }
        }
    }
}

/// An engine over `store` whose heartbeat beats every 100 ms.
fn engine(store: Arc<dyn Store>, handler: Operated) -> Engine {
    Engine::new(
        store,
        McpHandler::new(handler),
        EngineOptions {
            lease: Duration::from_millis(300),
            max_attempts: 2,
            ..EngineOptions::default()
        },
    )
}

/// A 2025-11-25 session's caller on `engine`: its runs can be parked (its client resumes
/// its stream for a later outcome).
async fn legacy(engine: &Engine) -> Caller {
    let Value::Object(request) = serde_json::json!({"jsonrpc": "2.0", "id": 0,
        "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    else {
        unreachable!()
    };
    let principal = Principal::anonymous();
    let (session, _) = engine
        .initialize(&principal, crate::Request::from_message(request), None)
        .await
        .unwrap();
    Caller::legacy(principal, session.unwrap()).unwrap()
}

fn modern() -> Caller {
    Caller {
        principal: Principal::anonymous(),
        era: Era::Modern,
        session: None,
        protocol_version: McpVersion::MODERN,
        log_level: None,
        auth: None,
        trace: None,
        http: None,
    }
}

/// Start `tool` and wait until its run is journaled; its run id (its stream's id).
async fn started(engine: &Engine, store: &dyn Store, tool: &str) -> StreamId {
    started_as(engine, store, &modern(), tool).await
}

/// [`started`] as `caller`.
async fn started_as(engine: &Engine, store: &dyn Store, caller: &Caller, tool: &str) -> StreamId {
    let Value::Object(request) = serde_json::json!({"jsonrpc": "2.0", "id": 1,
        "method": "tools/call", "params": {"name": tool, "arguments": {}}})
    else {
        unreachable!()
    };
    let accepted = engine
        .accept(caller, crate::Request::new(Value::from(1), request))
        .await
        .unwrap();
    for _ in 0..200 {
        if store
            .get_record(RecordKind::Run, &key::run(&accepted.stream))
            .await
            .unwrap()
            .is_some()
        {
            return accepted.stream;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the run was never journaled");
}

/// The events of `stream` once it is finished.
async fn outcome(store: &dyn Store, stream: &StreamId) -> Vec<Value> {
    for _ in 0..300 {
        let read = store.read_after(stream, 0, 100).await.unwrap();
        if read.finished {
            return read
                .events
                .iter()
                .filter(|event| !event.data.is_empty())
                .map(|event| serde_json::from_str(&event.data).unwrap())
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the stream never finished");
}

#[tokio::test]
async fn an_operator_cancel_reaches_the_handler_and_the_client_reads_why() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handler = Operated::default();
    let engine = engine(store.clone(), handler.clone());
    let stream = started(&engine, store.as_ref(), "block").await;
    let run_id = key::run(&stream);
    let action = engine
        .cancel_run(&run_id, "alice".into(), Some("stuck on a lock".into()))
        .await
        .unwrap();
    assert_eq!(action.action, ActionKind::Cancel);
    let events = outcome(store.as_ref(), &stream).await;
    let last = events.last().expect("an outcome");
    assert_eq!(last["error"]["code"], code::ENDED_BY_OPERATOR, "{events:?}");
    assert_eq!(
        last["error"]["message"],
        "the request was cancelled by an operator: stuck on a lock"
    );
    assert_eq!(last["error"]["data"]["action"], "cancel");
    assert_eq!(
        events.iter().filter(|e| e.get("id").is_some()).count(),
        1,
        "one outcome: {events:?}"
    );
    for _ in 0..100 {
        if handler.saw_cancel.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        handler.saw_cancel.load(Ordering::SeqCst),
        "the handler saw cancellation"
    );
    assert!(
        store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .is_none()
    );
    let kept = engine.run_actions(&run_id).await.unwrap();
    assert_eq!(kept, vec![action], "the action stays after the run ended");
    // The run has ended: a second action does not apply.
    assert!(matches!(
        engine.kill_run(&run_id, "alice".into(), None).await,
        Err(EngineError::RunNotFound(_))
    ));
}

#[tokio::test]
async fn a_kill_commits_the_outcome_at_once_and_the_live_handler_commits_nothing_more() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handler = Operated::default();
    let engine = engine(store.clone(), handler.clone());
    let stream = started(&engine, store.as_ref(), "stubborn").await;
    let run_id = key::run(&stream);
    // Inside the first step, which ends after the worker's next heartbeat.
    tokio::time::sleep(Duration::from_millis(50)).await;
    engine
        .kill_run(&run_id, "bob".into(), Some("runaway".into()))
        .await
        .unwrap();
    // At once, before any heartbeat: the outcome is committed and the entry gone.
    let read = store.read_after(&stream, 0, 100).await.unwrap();
    assert!(read.finished, "{read:?}");
    let last: Value = serde_json::from_str(&read.events.last().unwrap().data).unwrap();
    assert_eq!(last["error"]["code"], code::ENDED_BY_OPERATOR);
    assert_eq!(
        last["error"]["message"],
        "the request was killed by an operator: runaway"
    );
    assert!(
        store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .is_none()
    );
    // The handler ignores cancellation. Its worker hears of the kill at its next heartbeat
    // (a third of the lease), before the step in flight ends: that step's commit is
    // refused, and the handler returns.
    for _ in 0..200 {
        if handler.returned.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        handler.returned.load(Ordering::SeqCst),
        "the handler returned"
    );
    assert_eq!(
        handler.committed.load(Ordering::SeqCst),
        0,
        "the step in flight at the kill was not committed"
    );
    let steps = store
        .list_records(RecordKind::Step, &key::steps(&run_id), 1_000)
        .await
        .unwrap();
    assert!(
        steps.is_empty(),
        "no step of the killed run is kept: {steps:?}"
    );
    assert_eq!(
        store
            .read_after(&stream, 0, 100)
            .await
            .unwrap()
            .events
            .len(),
        read.events.len(),
        "nothing was written to the stream after the kill"
    );
    let actions = engine.run_actions(&run_id).await.unwrap();
    assert_eq!(actions.len(), 1);
    assert_eq!(
        (actions[0].action, actions[0].by.as_str()),
        (ActionKind::Kill, "bob")
    );
}

#[tokio::test]
async fn actions_on_a_run_that_is_not_in_the_journal_are_refused() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let engine = engine(store.clone(), Operated::default());
    let unknown = key::run(&StreamId::random());
    for result in [
        engine.cancel_run(&unknown, "alice".into(), None).await,
        engine.kill_run(&unknown, "alice".into(), None).await,
    ] {
        assert!(matches!(result, Err(EngineError::RunNotFound(ref id)) if *id == unknown));
    }
    assert!(
        engine.run_actions(&unknown).await.unwrap().is_empty(),
        "nothing was recorded"
    );
}

/// The journal entry of `run_id` once it is parked (recovery passes run meanwhile; a
/// panicked handler's run ends after a grace of 5 s, then waits a second for its retry).
async fn parked(engine: &Engine, store: &dyn Store, run_id: &str) -> crate::records::RunRecord {
    for _ in 0..1_000 {
        if let Some(found) = store.get_record(RecordKind::Run, run_id).await.unwrap() {
            let record = crate::records::RunRecord::decode(run_id, &found.value).unwrap();
            if record.parked.is_some() {
                return record;
            }
        }
        engine.recover().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = store.get_record(RecordKind::Run, run_id).await.unwrap();
    let events = store.read_after(&stream_of(run_id), 0, 100).await;
    panic!("the run was never parked: {left:?} {events:?}");
}

/// The results of `stream` once it is finished (retried meanwhile by recovery passes).
async fn answered(engine: &Engine, store: &dyn Store, stream: &StreamId) -> Vec<Value> {
    for _ in 0..300 {
        if store.read_after(stream, 0, 100).await.unwrap().finished {
            return outcome(store, stream).await;
        }
        engine.recover().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the retried run never answered");
}

#[tokio::test]
async fn a_retryable_error_parks_the_run_and_a_retry_replays_its_steps() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handler = Operated::default();
    handler.poison.store(true, Ordering::SeqCst);
    let engine = engine(store.clone(), handler.clone());
    let caller = legacy(&engine).await;
    let stream = started_as(&engine, store.as_ref(), &caller, "poisoned").await;
    let run_id = key::run(&stream);
    let record = parked(&engine, store.as_ref(), &run_id).await;
    let parked = record.parked.unwrap();
    assert_eq!(parked.reason, crate::records::ParkReason::RetryableError);
    assert_eq!(parked.error, "payments are down");
    assert_eq!(record.owner, "", "no worker holds a parked run");
    // Kept, not answered: no worker runs it again by itself.
    for _ in 0..5 {
        engine.recover().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!store.read_after(&stream, 0, 100).await.unwrap().finished);
    assert_eq!(handler.firsts.load(Ordering::SeqCst), 1);
    let summary = crate::inspect::run(store.as_ref(), &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        summary.state(durable_mcp_store::now_ms()),
        crate::inspect::RunState::Parked
    );

    // After the fix, an operator's retry runs it again: its first step is replayed (D8).
    handler.poison.store(false, Ordering::SeqCst);
    let action = engine
        .retry_run(&run_id, "carol".into(), Some("payments are back".into()))
        .await
        .unwrap();
    assert_eq!(action.action, ActionKind::Retry);
    let events = answered(&engine, store.as_ref(), &stream).await;
    let outcomes: Vec<&Value> = events.iter().filter(|e| e.get("id").is_some()).collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {events:?}");
    assert_eq!(outcomes[0]["result"]["content"][0]["text"], "paid");
    assert_eq!(
        handler.firsts.load(Ordering::SeqCst),
        1,
        "the first step ran once"
    );
    assert_eq!(handler.seconds.load(Ordering::SeqCst), 1);
    assert_eq!(engine.run_actions(&run_id).await.unwrap(), vec![action]);
    assert!(matches!(
        engine.retry_run(&run_id, "carol".into(), None).await,
        Err(EngineError::RunNotFound(_))
    ));
}

#[tokio::test]
async fn a_run_that_fails_too_often_is_parked_then_purged() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handler = Operated {
        poison_panics: true,
        ..Operated::default()
    };
    handler.poison.store(true, Ordering::SeqCst);
    let engine = engine(store.clone(), handler.clone());
    let caller = legacy(&engine).await;
    let stream = started_as(&engine, store.as_ref(), &caller, "poisoned").await;
    let run_id = key::run(&stream);
    // A running run is not parked: it cannot be retried.
    assert!(matches!(
        engine.retry_run(&run_id, "dave".into(), None).await,
        Err(EngineError::RunNotParked(_))
    ));
    // `max_attempts` is 2: the first run and one re-run panic, then it is parked.
    let record = parked(&engine, store.as_ref(), &run_id).await;
    assert_eq!(record.failures, 2);
    assert_eq!(
        record.parked.unwrap().reason,
        crate::records::ParkReason::TooManyFailures
    );
    assert!(!store.read_after(&stream, 0, 100).await.unwrap().finished);

    engine
        .purge_run(&run_id, "dave".into(), Some("a bad release".into()))
        .await
        .unwrap();
    let events = outcome(store.as_ref(), &stream).await;
    let last = events.last().unwrap();
    assert_eq!(last["error"]["code"], code::ENDED_BY_OPERATOR);
    assert_eq!(
        last["error"]["message"],
        "the request was purged by an operator: a bad release"
    );
    assert!(
        store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .is_none()
    );
    let steps = store
        .list_records(RecordKind::Step, &key::steps(&run_id), 100)
        .await
        .unwrap();
    assert!(steps.is_empty(), "{steps:?}");
}

#[tokio::test]
async fn a_parked_run_whose_client_cancels_is_closed() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let handler = Operated::default();
    handler.poison.store(true, Ordering::SeqCst);
    let engine = engine(store.clone(), handler.clone());
    let caller = legacy(&engine).await;
    let stream = started_as(&engine, store.as_ref(), &caller, "poisoned").await;
    let run_id = key::run(&stream);
    parked(&engine, store.as_ref(), &run_id).await;
    engine.cancel(&caller, &Value::from(1)).await.unwrap();
    for _ in 0..100 {
        engine.recover().await.unwrap();
        if store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .is_none()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        store
            .get_record(RecordKind::Run, &run_id)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.read_after(&stream, 0, 100).await.unwrap().finished);
    assert_eq!(
        handler.seconds.load(Ordering::SeqCst),
        0,
        "it never ran again"
    );
}

fn stream_of(run_id: &str) -> StreamId {
    run_id.parse().unwrap()
}

//! Operators' actions on runs (`runs cancel|kill`), against the memory store: the handler
//! stops, the client reads who ended its request, the action is kept, and a killed run's
//! handler commits nothing more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use durable_mcp_handler::rmcp::{self, ServerHandler};
use durable_mcp_handler::{Durable, McpHandler};
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
#[derive(Clone, Default)]
struct Operated {
    saw_cancel: Arc<AtomicBool>,
    committed: Arc<AtomicU32>,
    returned: Arc<AtomicBool>,
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
            ..EngineOptions::default()
        },
    )
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
    let Value::Object(request) = serde_json::json!({"jsonrpc": "2.0", "id": 1,
        "method": "tools/call", "params": {"name": tool, "arguments": {}}})
    else {
        unreachable!()
    };
    let accepted = engine
        .accept(&modern(), crate::Request::new(Value::from(1), request))
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

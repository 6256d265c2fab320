//! `durable_mcp::testing`: a durable server tested in process, in both protocol eras and
//! across a simulated restart.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use durable_mcp::rmcp::handler::server::{tool::Extension, wrapper::Parameters};
use durable_mcp::rmcp::model::{CallToolResult, ContentBlock};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};
use durable_mcp::testing::{Era, TestClient, TestError, TestServer};
use durable_mcp::{
    Durable, DurableMcp, SessionState,
    store::{MemoryStore, SqliteStore, Store},
};
use serde_json::{Value, json};

#[derive(Clone)]
struct Tools;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WorkArgs {
    steps: u32,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct RegionArgs {
    /// Mirrored into the `Mcp-Param-Region` header (2026-07-28).
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WaitArgs {
    millis: u64,
}

/// How many times `wait` started (a run and its re-run after a restart both count).
static WAIT_STARTS: AtomicUsize = AtomicUsize::new(0);

fn text(text: impl Into<String>) -> Result<CallToolResult, McpError> {
    Ok(CallToolResult::success(vec![ContentBlock::text(
        text.into(),
    )]))
}

fn internal(error: impl std::fmt::Display) -> McpError {
    McpError::internal_error(error.to_string(), None)
}

#[tool_router]
impl Tools {
    #[tool(description = "Echo text back")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        args.text
    }

    // ANCHOR: count
    #[tool(description = "Count this session's calls in its durable state")]
    async fn count(
        &self,
        Extension(state): Extension<SessionState>,
    ) -> Result<CallToolResult, McpError> {
        let calls = state
            .update("calls", |n: Option<u64>| n.unwrap_or(0) + 1)
            .await
            .map_err(internal)?;
        text(calls.to_string())
    }
    // ANCHOR_END: count

    #[tool(description = "Report progress and log each step")]
    async fn work(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<WorkArgs>,
    ) -> Result<CallToolResult, McpError> {
        for step in 1..=args.steps {
            durable
                .progress(f64::from(step), Some(f64::from(args.steps)), None)
                .await?;
            #[allow(deprecated)] // rmcp deprecates logging (SEP-2577); durable-mcp still serves it
            durable
                .log(
                    rmcp::model::LoggingLevel::Info,
                    None,
                    json!(format!("step {step}")),
                )
                .await?;
        }
        text("worked")
    }

    #[tool(description = "Answer with the region, also sent as a header")]
    async fn region(&self, Parameters(args): Parameters<RegionArgs>) -> String {
        args.region
    }

    #[tool(description = "Wait on a durable timer")]
    async fn wait(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<WaitArgs>,
    ) -> Result<CallToolResult, McpError> {
        WAIT_STARTS.fetch_add(1, Ordering::SeqCst);
        durable
            .sleep("wait", Duration::from_millis(args.millis))
            .await?;
        text(format!("waited {}", args.millis))
    }
}

#[tool_handler]
impl ServerHandler for Tools {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        #[allow(deprecated)] // logging, as above
        let capabilities = rmcp::model::ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        rmcp::model::ServerConfig::new(capabilities)
    }
}

fn first_text(result: &CallToolResult) -> &str {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.as_str())
        .unwrap_or_default()
}

async fn clients(server: &TestServer) -> [TestClient; 2] {
    [
        server.client_legacy().await.unwrap(),
        server.client_modern(),
    ]
}

#[tokio::test]
async fn a_tool_call_and_the_tool_list_in_both_eras() {
    let server = TestServer::start(DurableMcp::new(Tools)).await.unwrap();
    for client in clients(&server).await {
        let response = client
            .call_tool("echo", json!({"text": "hi"}))
            .await
            .unwrap();
        assert_eq!(
            first_text(&response.result.unwrap()),
            "hi",
            "{:?}",
            client.era()
        );
        let tools = client.list_tools().await.unwrap().result.unwrap();
        assert!(
            tools.tools.iter().any(|t| t.name == "echo"),
            "{:?}",
            client.era()
        );
    }
    let legacy = server.client_legacy().await.unwrap();
    assert_eq!(legacy.era(), Era::Legacy);
    assert!(legacy.session_id().is_some());
    assert_eq!(
        legacy.initialize_result().unwrap()["protocolVersion"],
        "2025-11-25"
    );
    legacy.close().await.unwrap();
}

#[tokio::test]
async fn progress_and_log_messages_are_collected_in_both_eras() {
    let server = TestServer::start(DurableMcp::new(Tools)).await.unwrap();
    for client in clients(&server).await {
        client.set_log_level("info").await.unwrap();
        let response = client.call_tool("work", json!({"steps": 3})).await.unwrap();
        let progress: Vec<f64> = response
            .notifications_of("notifications/progress")
            .map(|p| p["progress"].as_f64().unwrap())
            .collect();
        assert_eq!(
            progress,
            [1.0, 2.0, 3.0],
            "{:?}: {:?}",
            client.era(),
            response.notifications
        );
        let logs: Vec<&Value> = response
            .notifications_of("notifications/message")
            .map(|p| &p["data"])
            .collect();
        assert_eq!(
            logs,
            [&json!("step 1"), &json!("step 2"), &json!("step 3")],
            "{:?}",
            client.era()
        );
        assert_eq!(first_text(&response.result.unwrap()), "worked");
    }
}

#[tokio::test]
async fn errors_come_back_as_json_rpc_errors() {
    let server = TestServer::start(DurableMcp::new(Tools)).await.unwrap();
    for client in clients(&server).await {
        let response = client.request("no/such", json!({})).await.unwrap();
        assert_eq!(
            response.result.unwrap_err().code.0,
            -32601,
            "{:?}",
            client.era()
        );
        assert!(matches!(
            client
                .call_tool("echo", json!(["not", "an", "object"]))
                .await,
            Err(TestError::NotAnObject(_))
        ));
    }
}

/// The modern client sends the `Mcp-Param-*` headers a tool's schema asks for: without
/// them the server refuses the call (-32020).
#[tokio::test]
async fn the_modern_client_mirrors_annotated_arguments_into_headers() {
    let server = TestServer::start(DurableMcp::new(Tools)).await.unwrap();
    let client = server.client_modern();
    let response = client
        .call_tool("region", json!({"region": "eu-west"}))
        .await
        .unwrap();
    assert_eq!(first_text(&response.result.unwrap()), "eu-west");
    let response = client
        .call_tool("region", json!({"region": "Zürich"}))
        .await
        .unwrap();
    assert_eq!(first_text(&response.result.unwrap()), "Zürich");
}

// ANCHOR: restart
#[tokio::test]
async fn session_state_survives_a_restart_on_the_memory_store()
-> Result<(), Box<dyn std::error::Error>> {
    let server = TestServer::start(DurableMcp::new(Tools)).await?; // no store: a memory store
    let client = server.client_legacy().await?;
    assert_eq!(
        first_text(&client.call_tool("count", json!({})).await?.result?),
        "1"
    );
    server.restart().await?; // the same store and worker id: the session lives on
    assert_eq!(
        first_text(&client.call_tool("count", json!({})).await?.result?),
        "2"
    );
    Ok(())
}
// ANCHOR_END: restart

/// A counter kept in `SessionState` survives a restart on SQLite: the new worker serves
/// the same session and reads the same state.
#[tokio::test]
async fn session_state_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("durable-mcp-test-client-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("restart.db");
    let _ = std::fs::remove_file(&path);
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open_url(&format!("sqlite:{}", path.display()))
            .await
            .unwrap(),
    );
    let server = TestServer::start(DurableMcp::new(Tools).store(store))
        .await
        .unwrap();
    let client = server.client_legacy().await.unwrap();
    let count = async || {
        first_text(
            &client
                .call_tool("count", json!({}))
                .await
                .unwrap()
                .result
                .unwrap(),
        )
        .to_owned()
    };
    assert_eq!(count().await, "1");
    assert_eq!(count().await, "2");
    server.restart().await.unwrap();
    assert_eq!(count().await, "3");
    server.restart().await.unwrap();
    assert_eq!(count().await, "4");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A call in flight when the worker restarts is finished by the new worker (same worker
/// id: it resumes its own runs at once), and the legacy client gets its answer by resuming
/// the stream there.
#[tokio::test]
async fn a_call_in_flight_across_a_restart_is_answered_by_the_new_worker() {
    let server = TestServer::start(
        DurableMcp::new(Tools)
            .store(Arc::new(MemoryStore::new()))
            .shutdown_grace(Duration::ZERO),
    )
    .await
    .unwrap();
    let client = server.client_legacy().await.unwrap();
    let before = WAIT_STARTS.load(Ordering::SeqCst);
    let call = client.call_tool("wait", json!({"millis": 1500}));
    let restart = async {
        while WAIT_STARTS.load(Ordering::SeqCst) == before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server.restart().await.unwrap();
    };
    let (response, ()) = tokio::join!(call, restart);
    assert_eq!(
        first_text(&response.unwrap().result.unwrap()),
        "waited 1500"
    );
    assert!(
        WAIT_STARTS.load(Ordering::SeqCst) - before >= 2,
        "the new worker ran the call again"
    );
}

#[tokio::test]
async fn a_stopped_server_fails_its_clients() {
    let server = TestServer::start(DurableMcp::new(Tools)).await.unwrap();
    let client = server.client_legacy().await.unwrap();
    server.stop().await.unwrap();
    assert!(server.router().is_none());
    assert!(matches!(
        client.call_tool("echo", json!({"text": "x"})).await,
        Err(TestError::Stopped)
    ));
    server.restart().await.unwrap();
    assert!(
        client
            .call_tool("echo", json!({"text": "x"}))
            .await
            .unwrap()
            .result
            .is_ok()
    );
}

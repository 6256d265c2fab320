//! Drives [`Everything`] through rmcp's own service loop over an in-memory stream, with
//! raw JSON-RPC lines, in both protocol eras.

use std::time::Duration;

use rmcp::model::{ClientCapabilities, Implementation, InitializeRequestParams, ProtocolVersion};
use rmcp::service::{RoleServer, RunningService, serve_directly};
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

use super::{Everything, fixtures};

const STEP: Duration = Duration::from_secs(5);

/// One rmcp service loop over [`Everything`] and the client side of its stream.
struct Client {
    write: WriteHalf<DuplexStream>,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    /// Notifications and server requests received while waiting for responses.
    seen: Vec<Value>,
    stateless: bool,
    capabilities: Value,
    _service: RunningService<RoleServer, Everything>,
}

fn all_capabilities() -> Value {
    json!({ "sampling": {}, "elicitation": {}, "roots": { "listChanged": true } })
}

impl Client {
    /// A legacy (2025-11-25) session whose client declared sampling, elicitation, roots.
    fn legacy(server: &Everything) -> Self {
        let capabilities: ClientCapabilities =
            serde_json::from_value(all_capabilities()).expect("capabilities");
        let mut params =
            InitializeRequestParams::new(capabilities, Implementation::new("test", "1"));
        params.protocol_version = ProtocolVersion::V_2025_11_25;
        Self::start(server, Some(params), false)
    }

    /// A stateless (2026-07-28) client: every request carries `_meta`.
    fn stateless(server: &Everything) -> Self {
        Self::start(server, None, true)
    }

    fn start(server: &Everything, peer: Option<InitializeRequestParams>, stateless: bool) -> Self {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (server_read, server_write) = tokio::io::split(theirs);
        let service = serve_directly(server.clone(), (server_read, server_write), peer);
        let (read, write) = tokio::io::split(ours);
        Self {
            write,
            lines: BufReader::new(read).lines(),
            seen: Vec::new(),
            stateless,
            capabilities: all_capabilities(),
            _service: service,
        }
    }

    fn with_capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.write.write_all(line.as_bytes()).await.expect("write");
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(STEP, self.lines.next_line())
            .await
            .expect("a message in time")
            .expect("read")
            .expect("an open stream");
        serde_json::from_str(&line).expect("JSON")
    }

    /// Adds the SEP-2575 `_meta` on a stateless client.
    fn params(&self, mut params: Value, extra_meta: Value) -> Value {
        if self.stateless {
            let mut meta = json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": { "name": "test", "version": "1" },
                "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            });
            if let (Some(meta), Some(extra)) = (meta.as_object_mut(), extra_meta.as_object()) {
                meta.extend(extra.clone());
            }
            params["_meta"] = meta;
        } else if extra_meta.as_object().is_some_and(|m| !m.is_empty()) {
            params["_meta"] = extra_meta;
        }
        params
    }

    async fn start_request(&mut self, id: u64, method: &str, params: Value, meta: Value) {
        let params = self.params(params, meta);
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
    }

    /// Waits for the response to `id`; everything else received is kept in `seen`.
    async fn response(&mut self, id: u64) -> Value {
        loop {
            let message = self.next().await;
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                return message;
            }
            self.seen.push(message);
        }
    }

    async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.request_meta(id, method, params, json!({})).await
    }

    async fn request_meta(&mut self, id: u64, method: &str, params: Value, meta: Value) -> Value {
        self.start_request(id, method, params, meta).await;
        self.response(id).await
    }

    async fn call(&mut self, id: u64, tool: &str, extra: Value) -> Value {
        let mut params = json!({ "name": tool, "arguments": {} });
        if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
            params.extend(extra.clone());
        }
        self.request(id, "tools/call", params).await
    }

    fn seen_methods(&self) -> Vec<&str> {
        self.seen
            .iter()
            .filter_map(|message| message.get("method").and_then(Value::as_str))
            .collect()
    }
}

fn result(response: &Value) -> &Value {
    assert!(
        response.get("error").is_none(),
        "unexpected error: {response}"
    );
    &response["result"]
}

fn error_code(response: &Value) -> i64 {
    response["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("expected an error: {response}"))
}

fn first_text(response: &Value) -> String {
    result(response)["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn accept(content: Value) -> Value {
    json!({ "action": "accept", "content": content })
}

#[test]
fn elicitation_schemas_keep_their_shape() {
    let enums = serde_json::to_value(fixtures::enums_schema()).expect("serialize");
    let props = &enums["properties"];
    assert_eq!(
        props["untitledSingle"]["enum"],
        json!(["option1", "option2", "option3"])
    );
    assert!(props["untitledSingle"].get("oneOf").is_none());
    assert_eq!(
        props["titledSingle"]["oneOf"][0],
        json!({ "const": "value1", "title": "First Option" })
    );
    assert_eq!(
        props["legacyEnum"]["enumNames"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(
        props["untitledMulti"]["items"]["enum"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    assert_eq!(
        props["titledMulti"]["items"]["anyOf"][2]["title"],
        "Third Choice"
    );

    let defaults = serde_json::to_value(fixtures::defaults_schema()).expect("serialize");
    let props = &defaults["properties"];
    assert_eq!(props["name"]["default"], "John Doe");
    assert_eq!(props["age"]["default"], 30);
    assert_eq!(props["age"]["type"], "integer");
    assert_eq!(props["score"]["default"], 95.5);
    assert_eq!(props["status"]["default"], "active");
    assert_eq!(props["status"]["enum"].as_array().map(Vec::len), Some(3));
    assert_eq!(props["verified"]["default"], true);

    let user = serde_json::to_value(fixtures::user_info_schema()).expect("serialize");
    assert_eq!(user["required"], json!(["username", "email"]));
}

#[test]
fn short_keys_are_refused() {
    assert!(Everything::new(Some(vec![7; 16])).is_err());
    assert!(Everything::new(Some(vec![7; 32])).is_ok());
    assert!(Everything::new(None).is_ok());
}

#[tokio::test]
async fn legacy_lists_and_reads() {
    let server = Everything::default();
    let mut client = Client::legacy(&server);

    let tools = client.request(1, "tools/list", json!({})).await;
    let names: Vec<&str> = result(&tools)["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    for expected in [
        "test_simple_text",
        "test_image_content",
        "test_audio_content",
        "test_embedded_resource",
        "test_multiple_content_types",
        "test_tool_with_logging",
        "test_tool_with_progress",
        "test_error_handling",
        "test_sampling",
        "test_elicitation",
        "test_elicitation_sep1034_defaults",
        "test_elicitation_sep1330_enums",
        "json_schema_2020_12_tool",
        "test_reconnection",
        "test_missing_capability",
        "test_streaming_elicitation",
        "test_logging_tool",
        "test_trigger_tool_change",
        "test_trigger_prompt_change",
        "test_input_required_result_elicitation",
        "test_input_required_result_sampling",
        "test_input_required_result_list_roots",
        "test_input_required_result_request_state",
        "test_input_required_result_tampered_state",
        "test_input_required_result_multiple_inputs",
        "test_input_required_result_multi_round",
        "test_input_required_result_capabilities",
        "emit_events",
    ] {
        assert!(names.contains(&expected), "missing tool {expected}");
    }
    assert!(!names.contains(&"dynamic_tool"));
    let schema_tool = result(&tools)["tools"]
        .as_array()
        .and_then(|tools| {
            tools
                .iter()
                .find(|t| t["name"] == "json_schema_2020_12_tool")
        })
        .expect("json_schema_2020_12_tool");
    let schema = &schema_tool["inputSchema"];
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["$defs"]["address"]["$anchor"], "addressDef");
    assert_eq!(schema["additionalProperties"], false);
    assert!(schema["if"].is_object() && schema["allOf"].is_array());

    let text = client
        .request(2, "resources/read", json!({ "uri": "test://static-text" }))
        .await;
    assert_eq!(result(&text)["contents"][0]["mimeType"], "text/plain");
    let blob = client
        .request(
            3,
            "resources/read",
            json!({ "uri": "test://static-binary" }),
        )
        .await;
    assert!(result(&blob)["contents"][0]["blob"].is_string());
    let template = client
        .request(
            4,
            "resources/read",
            json!({ "uri": "test://template/123/data" }),
        )
        .await;
    let data: Value = serde_json::from_str(
        result(&template)["contents"][0]["text"]
            .as_str()
            .expect("text"),
    )
    .expect("JSON data");
    assert_eq!(data["id"], "123");
    let missing = client
        .request(5, "resources/read", json!({ "uri": "test://nope" }))
        .await;
    assert_eq!(error_code(&missing), -32002);
    assert_eq!(missing["error"]["data"]["uri"], "test://nope");

    let prompt = client.request(6, "prompts/get", json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "a1", "arg2": "b2" } })).await;
    let rendered = result(&prompt)["messages"].to_string();
    assert!(rendered.contains("a1") && rendered.contains("b2"));
    let embedded = client.request(7, "prompts/get", json!({ "name": "test_prompt_with_embedded_resource", "arguments": { "resourceUri": "test://x" } })).await;
    assert_eq!(
        result(&embedded)["messages"][0]["content"]["type"],
        "resource"
    );

    let completion = client
        .request(
            8,
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": "test_prompt_with_arguments" },
                    "argument": { "name": "arg1", "value": "par" } }),
        )
        .await;
    assert_eq!(
        result(&completion)["completion"]["values"],
        json!(["paris", "park", "party"])
    );

    let level = client
        .request(9, "logging/setLevel", json!({ "level": "debug" }))
        .await;
    assert_eq!(result(&level), &json!({}));
    let subscribe = client
        .request(
            10,
            "resources/subscribe",
            json!({ "uri": "test://watched-resource" }),
        )
        .await;
    assert_eq!(result(&subscribe), &json!({}));
}

#[tokio::test]
async fn legacy_notifications_and_server_requests() {
    let server = Everything::default();
    let mut client = Client::legacy(&server);

    let progress = client
        .request_meta(
            1,
            "tools/call",
            json!({ "name": "test_tool_with_progress", "arguments": {} }),
            json!({ "progressToken": "p1" }),
        )
        .await;
    assert_eq!(first_text(&progress), "Progress test completed");
    let progress: Vec<f64> = client
        .seen
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .filter_map(|m| m["params"]["progress"].as_f64())
        .collect();
    assert_eq!(progress, vec![0.0, 50.0, 100.0]);

    client.seen.clear();
    let logged = client.call(2, "test_tool_with_logging", json!({})).await;
    assert!(result(&logged).is_object());
    assert_eq!(
        client
            .seen_methods()
            .iter()
            .filter(|m| **m == "notifications/message")
            .count(),
        3
    );

    // test_sampling sends sampling/createMessage and waits for our answer.
    client
        .start_request(
            3,
            "tools/call",
            json!({ "name": "test_sampling", "arguments": { "prompt": "hi" } }),
            json!({}),
        )
        .await;
    let ask = client.next().await;
    assert_eq!(ask["method"], "sampling/createMessage");
    assert_eq!(ask["params"]["maxTokens"], 100);
    client
        .send(json!({ "jsonrpc": "2.0", "id": ask["id"], "result": {
            "role": "assistant", "content": { "type": "text", "text": "Paris" }, "model": "m" } }))
        .await;
    let sampled = client.response(3).await;
    assert_eq!(first_text(&sampled), "LLM response: Paris");

    // test_elicitation_sep1330_enums sends the enum schema.
    client
        .start_request(
            4,
            "tools/call",
            json!({ "name": "test_elicitation_sep1330_enums", "arguments": {} }),
            json!({}),
        )
        .await;
    let ask = client.next().await;
    assert_eq!(ask["method"], "elicitation/create");
    assert!(ask["params"]["requestedSchema"]["properties"]["legacyEnum"]["enumNames"].is_array());
    client.send(json!({ "jsonrpc": "2.0", "id": ask["id"], "result": accept(json!({ "untitledSingle": "option1" })) })).await;
    let elicited = client.response(4).await;
    assert!(first_text(&elicited).starts_with("Elicitation completed: action=accept"));

    client.seen.clear();
    let emitted = client
        .request_meta(
            5,
            "tools/call",
            json!({ "name": "emit_events", "arguments": { "count": 4, "interval_ms": 1 } }),
            json!({ "progressToken": 9 }),
        )
        .await;
    assert_eq!(first_text(&emitted), "4");
    let methods = client.seen_methods();
    assert_eq!(
        methods
            .iter()
            .filter(|m| **m == "notifications/progress")
            .count(),
        4
    );
    assert_eq!(
        methods
            .iter()
            .filter(|m| **m == "notifications/message")
            .count(),
        4
    );
}

#[tokio::test]
async fn stateless_mrtr_flows() {
    let server = Everything::new(Some(vec![42; 32])).expect("server");
    let mut client = Client::stateless(&server);

    // Basic elicitation: ask, then complete; extra keys are ignored.
    let first = client
        .call(1, "test_input_required_result_elicitation", json!({}))
        .await;
    let first = result(&first);
    assert_eq!(first["resultType"], "input_required");
    assert_eq!(
        first["inputRequests"]["user_name"]["method"],
        "elicitation/create"
    );
    let done = client
        .call(2, "test_input_required_result_elicitation", json!({ "inputResponses": { "user_name": accept(json!({ "name": "Alice" })), "extra": {} } }))
        .await;
    assert_eq!(first_text(&done), "Hello, Alice!");
    // A wrong key re-requests; a wrong shape is an error.
    let again = client
        .call(
            3,
            "test_input_required_result_elicitation",
            json!({ "inputResponses": { "wrong": accept(json!({})) } }),
        )
        .await;
    assert_eq!(result(&again)["resultType"], "input_required");
    let invalid = client
        .call(
            4,
            "test_input_required_result_elicitation",
            json!({ "inputResponses": { "user_name": 12345 } }),
        )
        .await;
    assert_eq!(error_code(&invalid), -32602);

    // request_state: state-ok on a valid echo; tampered state is -32602.
    let first = client
        .call(5, "test_input_required_result_tampered_state", json!({}))
        .await;
    let state = result(&first)["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    let responses = json!({ "confirm": accept(json!({ "ok": true })) });
    let ok = client
        .call(
            6,
            "test_input_required_result_tampered_state",
            json!({ "inputResponses": responses, "requestState": state }),
        )
        .await;
    assert!(first_text(&ok).contains("state-ok"));
    let tampered = client
        .call(
            7,
            "test_input_required_result_tampered_state",
            json!({ "inputResponses": responses, "requestState": format!("{state}-TAMPERED") }),
        )
        .await;
    assert_eq!(error_code(&tampered), -32602);
    // State sealed for one tool does not open for another.
    let foreign = client
        .call(
            8,
            "test_input_required_result_request_state",
            json!({ "inputResponses": responses, "requestState": state }),
        )
        .await;
    assert_eq!(error_code(&foreign), -32602);

    // multi_round: three rounds, a new state each time.
    let r1 = client
        .call(9, "test_input_required_result_multi_round", json!({}))
        .await;
    let s1 = result(&r1)["requestState"]
        .as_str()
        .expect("state 1")
        .to_owned();
    assert!(result(&r1)["inputRequests"]["step1"].is_object());
    let r2 = client
        .call(10, "test_input_required_result_multi_round", json!({ "inputResponses": { "step1": accept(json!({ "name": "Alice" })) }, "requestState": s1 }))
        .await;
    let s2 = result(&r2)["requestState"]
        .as_str()
        .expect("state 2")
        .to_owned();
    assert_ne!(s1, s2);
    assert!(result(&r2)["inputRequests"]["step2"].is_object());
    let r3 = client
        .call(11, "test_input_required_result_multi_round", json!({ "inputResponses": { "step2": accept(json!({ "color": "blue" })) }, "requestState": s2 }))
        .await;
    assert!(first_text(&r3).contains("Alice's favorite color is blue"));

    // multiple inputs: three kinds at once.
    let first = client
        .call(12, "test_input_required_result_multiple_inputs", json!({}))
        .await;
    let requests = &result(&first)["inputRequests"];
    assert_eq!(requests["greeting"]["method"], "sampling/createMessage");
    assert_eq!(requests["client_roots"]["method"], "roots/list");
    let state = result(&first)["requestState"].clone();
    let done = client
        .call(
            13,
            "test_input_required_result_multiple_inputs",
            json!({ "requestState": state, "inputResponses": {
                "user_name": accept(json!({ "name": "Alice" })),
                "greeting": { "role": "assistant", "content": { "type": "text", "text": "Hi" }, "model": "m" },
                "client_roots": { "roots": [{ "uri": "file:///r", "name": "r" }] } } }),
        )
        .await;
    assert!(first_text(&done).contains("file:///r"));

    // The MRTR prompt.
    let prompt = client
        .request(
            14,
            "prompts/get",
            json!({ "name": "test_input_required_result_prompt" }),
        )
        .await;
    assert_eq!(result(&prompt)["resultType"], "input_required");
    let prompt = client
        .request(
            15,
            "prompts/get",
            json!({ "name": "test_input_required_result_prompt",
                    "inputResponses": { "user_context": accept(json!({ "context": "ctx" })) } }),
        )
        .await;
    assert!(result(&prompt)["messages"].to_string().contains("ctx"));

    // Streaming elicitation never sends a request on the response stream.
    client.seen.clear();
    let streaming = client
        .call(16, "test_streaming_elicitation", json!({}))
        .await;
    assert_eq!(result(&streaming)["resultType"], "input_required");
    assert!(client.seen.iter().all(|m| m.get("id").is_none()));
}

#[tokio::test]
async fn stateless_capabilities_and_logging() {
    let server = Everything::default();
    let mut bare = Client::stateless(&server).with_capabilities(json!({}));
    let missing = bare.call(1, "test_missing_capability", json!({})).await;
    assert_eq!(error_code(&missing), -32021);
    assert!(missing["error"]["data"]["requiredCapabilities"]["sampling"].is_object());

    let mut sampling_only = Client::stateless(&server).with_capabilities(json!({ "sampling": {} }));
    let asked = sampling_only
        .call(2, "test_input_required_result_capabilities", json!({}))
        .await;
    let requests = result(&asked)["inputRequests"]
        .as_object()
        .expect("inputRequests");
    assert!(!requests.is_empty());
    assert!(
        requests
            .values()
            .all(|r| r["method"] == "sampling/createMessage")
    );

    let mut client = Client::stateless(&server);
    let quiet = client.call(3, "test_logging_tool", json!({})).await;
    assert!(result(&quiet).is_object());
    assert!(!client.seen_methods().contains(&"notifications/message"));
    let loud = client
        .request_meta(
            4,
            "tools/call",
            json!({ "name": "test_logging_tool", "arguments": {} }),
            json!({ "io.modelcontextprotocol/logLevel": "info" }),
        )
        .await;
    assert!(result(&loud).is_object());
    assert!(client.seen_methods().contains(&"notifications/message"));

    let set_level = client
        .request(5, "logging/setLevel", json!({ "level": "info" }))
        .await;
    assert_eq!(error_code(&set_level), -32601);
    let missing = client
        .request(
            6,
            "resources/read",
            json!({ "uri": "test://nonexistent-resource-for-conformance-testing" }),
        )
        .await;
    assert_eq!(error_code(&missing), -32602);
    assert_eq!(
        missing["error"]["data"]["uri"],
        "test://nonexistent-resource-for-conformance-testing"
    );
    let tools = client.request(7, "tools/list", json!({})).await;
    assert!(result(&tools)["ttlMs"].is_u64());
}

#[tokio::test]
async fn list_changes_reach_matching_listen_streams() {
    let server = Everything::default();
    let mut tools_listener = Client::stateless(&server);
    let mut prompts_listener = Client::stateless(&server);
    let mut trigger = Client::stateless(&server);

    tools_listener
        .start_request(
            1,
            "subscriptions/listen",
            json!({ "notifications": { "toolsListChanged": true } }),
            json!({}),
        )
        .await;
    let ack = tools_listener.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    prompts_listener
        .start_request(
            1,
            "subscriptions/listen",
            json!({ "notifications": { "promptsListChanged": true } }),
            json!({}),
        )
        .await;
    assert_eq!(
        prompts_listener.next().await["method"],
        "notifications/subscriptions/acknowledged"
    );
    // rmcp acknowledges before it calls `listen`: wait until both handlers hear the broadcast.
    let deadline = tokio::time::Instant::now() + STEP;
    while server.shared.changes.receiver_count() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listen handlers never subscribed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let changed = trigger.call(2, "test_trigger_tool_change", json!({})).await;
    assert!(first_text(&changed).contains("listed"));
    assert!(
        trigger.seen.is_empty(),
        "no list_changed on the call's own stream in 2026"
    );
    let notification = tools_listener.next().await;
    assert_eq!(notification["method"], "notifications/tools/list_changed");
    assert_eq!(
        notification["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(1)
    );
    let tools = trigger.request(3, "tools/list", json!({})).await;
    assert!(result(&tools)["tools"].to_string().contains("dynamic_tool"));

    trigger
        .call(4, "test_trigger_prompt_change", json!({}))
        .await;
    let notification = prompts_listener.next().await;
    assert_eq!(notification["method"], "notifications/prompts/list_changed");
    let prompts = trigger.request(5, "prompts/list", json!({})).await;
    assert!(
        result(&prompts)["prompts"]
            .to_string()
            .contains("dynamic_prompt")
    );
}

/// The task fixtures are ordinary tools that declare their task support (durable-mcp's
/// engine makes the tasks; `crates/cli/tests/tasks.rs` tests them end to end), except
/// `test_tool_with_task`, which asks first and then becomes a task itself.
#[test]
fn task_fixtures_declare_their_task_support() {
    use durable_mcp_handler::{McpHandler, TaskSupport};
    let server = Everything::default();
    let handler = McpHandler::new(server.clone());
    for (name, support) in [
        ("slow_compute", TaskSupport::Optional),
        ("failing_job", TaskSupport::Required),
        ("protocol_error_job", TaskSupport::Optional),
        ("confirm_delete", TaskSupport::Optional),
        ("multi_input", TaskSupport::Optional),
        ("steps", TaskSupport::Optional),
        ("ask", TaskSupport::Optional),
        ("emit_events", TaskSupport::Optional),
        ("greet", TaskSupport::Forbidden),
        ("test_tool_with_task", TaskSupport::Forbidden),
    ] {
        assert_eq!(handler.tool_task_support(name), support, "{name}");
    }
}

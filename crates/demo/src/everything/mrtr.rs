//! SEP-2322 multi-round-trip fixtures (`test_input_required_result_*`).
//!
//! On 2026-07-28 each returns an `InputRequiredResult` until the retry carries the
//! answers (and, where used, the echoed `requestState`). In legacy sessions the same
//! tools ask their questions inline through the peer and complete in one call.

use rmcp::handler::server::tool::{
    InputResponses as InputResponsesPart, RequestState as RequestStatePart,
};
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, InputRequests, InputRequiredResult,
    InputResponses,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use serde::{Deserialize, Serialize};

use super::Everything;
use super::fixtures::single_field_schema;
use super::input::{self, Answers, Gathered, Question};

const REQUEST_STATE: &str = "test_input_required_result_request_state";
const TAMPERED_STATE: &str = "test_input_required_result_tampered_state";
const MULTIPLE_INPUTS: &str = "test_input_required_result_multiple_inputs";
const MULTI_ROUND: &str = "test_input_required_result_multi_round";

fn text(text: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

fn ask_name(key: &'static str, message: &str) -> Question {
    Question::elicit(key, message, single_field_schema("name", "string"))
}

fn ask_confirm() -> Question {
    Question::elicit(
        "confirm",
        "Please confirm",
        single_field_schema("ok", "boolean"),
    )
}

fn answer_field(answers: &Answers, key: &str, field: &str) -> String {
    answers
        .get(key)
        .and_then(|answer| answer.field(field))
        .unwrap_or_else(|| "(not provided)".to_owned())
}

fn answer_text(answers: &Answers, key: &str) -> String {
    answers
        .get(key)
        .map_or_else(|| "(no answer)".to_owned(), input::Answer::describe)
}

/// Progress of a sealed flow.
#[derive(Debug, Serialize, Deserialize)]
struct Round {
    round: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

fn input_required(requests: InputRequests, state: Option<String>) -> CallToolResponse {
    InputRequiredResult::new(Some(requests), state).into()
}

#[tool_router(router = mrtr_router, vis = "pub(super)")]
impl Everything {
    #[tool(description = "SEP-2322: asks for user_name (elicitation), then greets")]
    async fn test_input_required_result_elicitation(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        let questions = vec![ask_name("user_name", "What is your name?")];
        Ok(
            match input::gather(&context, responses.as_ref(), questions).await? {
                Gathered::Complete(answers) => text(format!(
                    "Hello, {}!",
                    answer_field(&answers, "user_name", "name")
                )),
                Gathered::InputRequired(requests) => input_required(requests, None),
            },
        )
    }

    #[tool(description = "SEP-2322: asks for capital_question (sampling), then echoes the answer")]
    async fn test_input_required_result_sampling(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        let questions = vec![Question::sample(
            "capital_question",
            "What is the capital of France?",
            100,
        )];
        Ok(
            match input::gather(&context, responses.as_ref(), questions).await? {
                Gathered::Complete(answers) => text(format!(
                    "Sampling response: {}",
                    answer_text(&answers, "capital_question")
                )),
                Gathered::InputRequired(requests) => input_required(requests, None),
            },
        )
    }

    #[tool(description = "SEP-2322: asks for client_roots (roots/list), then lists them")]
    async fn test_input_required_result_list_roots(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        let questions = vec![Question::roots("client_roots")];
        Ok(
            match input::gather(&context, responses.as_ref(), questions).await? {
                Gathered::Complete(answers) => text(format!(
                    "Client roots: {}",
                    answer_text(&answers, "client_roots")
                )),
                Gathered::InputRequired(requests) => input_required(requests, None),
            },
        )
    }

    #[tool(description = "SEP-2322: asks for confirm with a sealed requestState; answers state-ok")]
    async fn test_input_required_result_request_state(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
        RequestStatePart(state): RequestStatePart,
    ) -> Result<CallToolResponse, McpError> {
        self.confirm_with_state(&context, REQUEST_STATE, responses, state)
            .await
    }

    #[tool(
        description = "SEP-2322: like request_state; a tampered requestState is rejected (-32602)"
    )]
    async fn test_input_required_result_tampered_state(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
        RequestStatePart(state): RequestStatePart,
    ) -> Result<CallToolResponse, McpError> {
        self.confirm_with_state(&context, TAMPERED_STATE, responses, state)
            .await
    }

    #[tool(
        description = "SEP-2322: asks for user_name, greeting (sampling) and client_roots at once"
    )]
    async fn test_input_required_result_multiple_inputs(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
        RequestStatePart(state): RequestStatePart,
    ) -> Result<CallToolResponse, McpError> {
        let questions = || {
            vec![
                ask_name("user_name", "What is your name?"),
                Question::sample("greeting", "Generate a greeting", 50),
                Question::roots("client_roots"),
            ]
        };
        let answers = match self
            .sealed_answers(&context, MULTIPLE_INPUTS, responses, state, questions)
            .await?
        {
            Ok(answers) => answers,
            Err(pending) => return Ok(pending),
        };
        Ok(text(format!(
            "All inputs received: name={}, greeting={}, roots={}",
            answer_field(&answers, "user_name", "name"),
            answer_text(&answers, "greeting"),
            answer_text(&answers, "client_roots"),
        )))
    }

    #[tool(
        description = "SEP-2322: step1 (name), then step2 (colour) with a new requestState, then done"
    )]
    async fn test_input_required_result_multi_round(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
        RequestStatePart(state): RequestStatePart,
    ) -> Result<CallToolResponse, McpError> {
        let step1 = || vec![ask_name("step1", "Step 1: What is your name?")];
        let step2 = || {
            vec![Question::elicit(
                "step2",
                "Step 2: What is your favorite color?",
                single_field_schema("color", "string"),
            )]
        };
        let codec = &self.state_codec(&context);
        let round = match state.as_deref() {
            Some(sealed) => input::open::<Round>(codec, MULTI_ROUND, sealed)?,
            None => Round {
                round: 0,
                name: None,
            },
        };
        let responses = responses.as_ref();
        let stateless = input::is_stateless(&context);
        // Round 0/1: the name.
        let name = match (round.round, round.name) {
            (2, Some(name)) => name,
            _ => {
                // Without a round-1 state, any answers are stale: ask afresh.
                let responses = if round.round == 1 { responses } else { None };
                match input::gather(&context, responses, step1()).await? {
                    Gathered::Complete(answers) => answer_field(&answers, "step1", "name"),
                    Gathered::InputRequired(requests) => {
                        let next = input::seal(
                            codec,
                            MULTI_ROUND,
                            &Round {
                                round: 1,
                                name: None,
                            },
                        )?;
                        return Ok(input_required(requests, Some(next)));
                    }
                }
            }
        };
        // Round 2: the colour (a new state that carries the name).
        let responses = if round.round == 2 || !stateless {
            responses
        } else {
            None
        };
        match input::gather(&context, responses, step2()).await? {
            Gathered::Complete(answers) => Ok(text(format!(
                "Multi-round flow complete: {name}'s favorite color is {}",
                answer_field(&answers, "step2", "color")
            ))),
            Gathered::InputRequired(requests) => {
                let next = input::seal(
                    codec,
                    MULTI_ROUND,
                    &Round {
                        round: 2,
                        name: Some(name),
                    },
                )?;
                Ok(input_required(requests, Some(next)))
            }
        }
    }

    #[tool(description = "SEP-2322: asks only for the inputs whose capability the client declared")]
    async fn test_input_required_result_capabilities(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        let questions: Vec<Question> = [
            ask_name("user_name", "What is your name?"),
            Question::sample("greeting", "Generate a greeting", 50),
            Question::roots("client_roots"),
        ]
        .into_iter()
        .filter(|question| input::client_supports(&context, &question.ask))
        .collect();
        if questions.is_empty() {
            return Ok(text(
                "The client declared none of elicitation, sampling and roots",
            ));
        }
        let keys: Vec<&str> = questions.iter().map(|question| question.key).collect();
        Ok(
            match input::gather(&context, responses.as_ref(), questions).await? {
                Gathered::Complete(answers) => text(format!(
                    "Capability-aware flow complete: {}",
                    keys.iter()
                        .map(|key| format!("{key}={}", answer_text(&answers, key)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Gathered::InputRequired(requests) => input_required(requests, None),
            },
        )
    }
}

impl Everything {
    /// Shared by the `request_state` and `tampered_state` fixtures.
    async fn confirm_with_state(
        &self,
        context: &RequestContext<RoleServer>,
        tool: &str,
        responses: Option<InputResponses>,
        state: Option<String>,
    ) -> Result<CallToolResponse, McpError> {
        let answers = match self
            .sealed_answers(context, tool, responses, state, || vec![ask_confirm()])
            .await?
        {
            Ok(answers) => answers,
            Err(pending) => return Ok(pending),
        };
        Ok(text(format!(
            "Confirmed ({}): state-ok",
            answer_text(&answers, "confirm")
        )))
    }

    /// One sealed round: on 2026-07-28 the answers count only with a valid echoed
    /// `requestState` (a forged or tampered one is -32602); until then the questions go
    /// back with a freshly sealed state. Legacy sessions ask inline.
    async fn sealed_answers(
        &self,
        context: &RequestContext<RoleServer>,
        tool: &str,
        responses: Option<InputResponses>,
        state: Option<String>,
        questions: impl Fn() -> Vec<Question>,
    ) -> Result<Result<Answers, CallToolResponse>, McpError> {
        let codec = self.state_codec(context);
        let verified = match state.as_deref() {
            Some(sealed) => {
                input::open::<Round>(&codec, tool, sealed)?;
                true
            }
            None => false,
        };
        let responses = if verified || !input::is_stateless(context) {
            responses
        } else {
            None
        };
        match input::gather(context, responses.as_ref(), questions()).await? {
            Gathered::Complete(answers) => Ok(Ok(answers)),
            Gathered::InputRequired(requests) => {
                let state = input::seal(
                    &codec,
                    tool,
                    &Round {
                        round: 1,
                        name: None,
                    },
                )?;
                Ok(Err(input_required(requests, Some(state))))
            }
        }
    }
}

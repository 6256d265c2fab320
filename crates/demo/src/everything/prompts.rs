//! Prompts: the suite's four `test_*` prompts (through `#[prompt_router]`),
//! `dynamic_prompt`, and the SEP-2322 prompt `test_input_required_result_prompt`, which
//! needs the request's `inputResponses` and so is served by hand.

use rmcp::handler::server::prompt::PromptContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    ContentBlock, EmbeddedResource, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ImageContent, InputRequiredResult, Prompt, PromptMessage, ResourceContents, Role,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, prompt, prompt_router};
use schemars::JsonSchema;
use serde::Deserialize;

use super::Everything;
use super::fixtures::{self, single_field_schema};
use super::input::{self, Gathered, Question};

/// The prompt `test_trigger_prompt_change` shows and hides.
pub(super) const DYNAMIC_PROMPT: &str = "dynamic_prompt";

/// The SEP-2322 prompt (`input-required-result-non-tool-request`).
pub(super) const MRTR_PROMPT: &str = "test_input_required_result_prompt";

/// Arguments of `test_prompt_with_arguments`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct PromptArgs {
    /// First test argument
    arg1: String,
    /// Second test argument
    arg2: String,
}

/// Arguments of `test_prompt_with_embedded_resource`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct EmbeddedResourceArgs {
    /// URI of the resource to embed
    #[serde(rename = "resourceUri")]
    resource_uri: String,
}

// `#[prompt]` generates undocumented `pub fn *_prompt_attr()` helpers.
#[allow(missing_docs)]
#[prompt_router(vis = "pub(super)")]
impl Everything {
    #[prompt(
        name = "test_simple_prompt",
        description = "A simple prompt with no arguments"
    )]
    async fn simple_prompt(&self) -> GetPromptResult {
        GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            "This is a simple prompt for testing.",
        )])
        .with_description("A simple prompt with no arguments")
    }

    #[prompt(
        name = "test_prompt_with_arguments",
        description = "A prompt that substitutes arg1 and arg2"
    )]
    async fn prompt_with_arguments(
        &self,
        Parameters(args): Parameters<PromptArgs>,
    ) -> GetPromptResult {
        GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                args.arg1, args.arg2
            ),
        )])
        .with_description("A prompt with arguments")
    }

    #[prompt(
        name = "test_prompt_with_embedded_resource",
        description = "A prompt that embeds the resource at resourceUri"
    )]
    async fn prompt_with_embedded_resource(
        &self,
        Parameters(args): Parameters<EmbeddedResourceArgs>,
    ) -> GetPromptResult {
        let resource = ResourceContents::TextResourceContents {
            uri: args.resource_uri,
            mime_type: Some("text/plain".into()),
            text: "Embedded resource content for testing.".into(),
            meta: None,
        };
        GetPromptResult::new(vec![
            PromptMessage::new(
                Role::User,
                ContentBlock::Resource(EmbeddedResource::new(resource)),
            ),
            PromptMessage::new_text(Role::User, "Please process the embedded resource above."),
        ])
        .with_description("A prompt with an embedded resource")
    }

    #[prompt(
        name = "test_prompt_with_image",
        description = "A prompt that includes an image"
    )]
    async fn prompt_with_image(&self) -> GetPromptResult {
        GetPromptResult::new(vec![
            PromptMessage::new(
                Role::User,
                ContentBlock::Image(ImageContent::new(fixtures::PNG_BASE64, "image/png")),
            ),
            PromptMessage::new_text(Role::User, "Please analyze the image above."),
        ])
        .with_description("A prompt with an image")
    }

    #[prompt(
        name = "dynamic_prompt",
        description = "Listed only after test_trigger_prompt_change"
    )]
    async fn dynamic_prompt(&self) -> GetPromptResult {
        GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            "This prompt appears after test_trigger_prompt_change.",
        )])
    }
}

impl Everything {
    /// The prompts `prompts/list` shows now.
    pub(super) async fn prompt_list(&self, context: &RequestContext<RoleServer>) -> Vec<Prompt> {
        let show_dynamic = self.dynamic_prompt_visible(context).await;
        let mut prompts: Vec<Prompt> = self
            .prompt_router
            .list_all()
            .into_iter()
            .filter(|prompt| show_dynamic || prompt.name != DYNAMIC_PROMPT)
            .collect();
        prompts.push(Prompt::new(
            MRTR_PROMPT,
            Some("SEP-2322: asks for user_context (elicitation) before returning the prompt"),
            None,
        ));
        prompts.sort_by(|a, b| a.name.cmp(&b.name));
        prompts
    }

    /// `prompts/get`.
    pub(super) async fn prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name == MRTR_PROMPT {
            return mrtr_prompt(&context, &request).await;
        }
        if request.name == DYNAMIC_PROMPT && !self.dynamic_prompt_visible(&context).await {
            return Err(McpError::invalid_params(
                format!("prompt '{DYNAMIC_PROMPT}' not found"),
                None,
            ));
        }
        let prompt = PromptContext::new(self, request.name, request.arguments, context);
        self.prompt_router.get_prompt(prompt).await
    }
}

async fn mrtr_prompt(
    context: &RequestContext<RoleServer>,
    request: &GetPromptRequestParams,
) -> Result<GetPromptResponse, McpError> {
    let questions = vec![Question::elicit(
        "user_context",
        "What context should the prompt use?",
        single_field_schema("context", "string"),
    )];
    match input::gather(context, request.input_responses.as_ref(), questions).await? {
        Gathered::Complete(answers) => {
            let elicited = answers
                .get("user_context")
                .and_then(|answer| answer.field("context"))
                .unwrap_or_else(|| "(none)".to_owned());
            Ok(GetPromptResult::new(vec![PromptMessage::new_text(
                Role::User,
                format!("Prompt with elicited context: {elicited}"),
            )])
            .with_description("A prompt built from elicited context")
            .into())
        }
        Gathered::InputRequired(requests) => {
            Ok(InputRequiredResult::from_input_requests(requests).into())
        }
    }
}

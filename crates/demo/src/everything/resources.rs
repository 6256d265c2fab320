//! Resources, the resource template, and `completion/complete`.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, ReadResourceResult, Reference, Resource,
    ResourceContents, ResourceTemplate,
};
use serde_json::json;

use super::fixtures;

/// The text resource.
pub(super) const STATIC_TEXT: &str = "test://static-text";
/// The binary (PNG) resource.
pub(super) const STATIC_BINARY: &str = "test://static-binary";
/// The resource clients subscribe to.
pub(super) const WATCHED: &str = "test://watched-resource";
/// The resource template.
pub(super) const TEMPLATE: &str = "test://template/{id}/data";

const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";

/// `resources/list`.
pub(super) fn list() -> Vec<Resource> {
    vec![
        Resource::new(STATIC_TEXT, "Static Text Resource")
            .with_description("A static text resource for testing")
            .with_mime_type("text/plain"),
        Resource::new(STATIC_BINARY, "Static Binary Resource")
            .with_description("A static binary resource (a 1x1 PNG) for testing")
            .with_mime_type("image/png"),
        Resource::new(WATCHED, "Watched Resource")
            .with_description("A resource to subscribe to; see trigger_resource_update")
            .with_mime_type("text/plain"),
    ]
}

/// `resources/templates/list`.
pub(super) fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(TEMPLATE, "Template Resource")
            .with_description("A resource template; {id} is echoed in the data")
            .with_mime_type("application/json"),
    ]
}

/// The `{id}` of a URI matching the template.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri
        .strip_prefix(TEMPLATE_PREFIX)?
        .strip_suffix(TEMPLATE_SUFFIX)?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

fn not_found(uri: &str) -> McpError {
    McpError::resource_not_found("Resource not found", Some(json!({ "uri": uri })))
}

/// Ok for URIs this server serves.
///
/// # Errors
///
/// `Resource not found` (with `data.uri`) for any other URI.
pub(super) fn check_known(uri: &str) -> Result<(), McpError> {
    if [STATIC_TEXT, STATIC_BINARY, WATCHED].contains(&uri) || template_id(uri).is_some() {
        Ok(())
    } else {
        Err(not_found(uri))
    }
}

fn text_contents(uri: &str, mime_type: &str, text: String) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.to_owned(),
        mime_type: Some(mime_type.to_owned()),
        text,
        meta: None,
    }
}

/// `resources/read`.
///
/// # Errors
///
/// `Resource not found` (-32002, which rmcp reports as -32602 on 2026-07-28) with
/// `data.uri` for unknown URIs.
pub(super) fn read(uri: &str) -> Result<ReadResourceResult, McpError> {
    let contents = match uri {
        STATIC_TEXT => text_contents(
            uri,
            "text/plain",
            "This is the content of the static text resource.".to_owned(),
        ),
        STATIC_BINARY => ResourceContents::BlobResourceContents {
            uri: uri.to_owned(),
            mime_type: Some("image/png".to_owned()),
            blob: fixtures::PNG_BASE64.to_owned(),
            meta: None,
        },
        WATCHED => text_contents(uri, "text/plain", "Watched resource content".to_owned()),
        _ => {
            let id = template_id(uri).ok_or_else(|| not_found(uri))?;
            let data = json!({
                "id": id,
                "templateTest": true,
                "data": format!("Data for ID: {id}"),
            });
            text_contents(uri, "application/json", data.to_string())
        }
    };
    Ok(ReadResourceResult::new(vec![contents]))
}

/// Candidate completions for an argument, before prefix filtering.
fn candidates(reference: &Reference, argument: &str) -> &'static [&'static str] {
    match reference {
        Reference::Prompt(prompt) => match (prompt.name.as_str(), argument) {
            ("test_prompt_with_arguments", "arg1" | "arg2") => {
                &["paris", "park", "party", "test", "testValue1", "testValue2"]
            }
            ("test_prompt_with_embedded_resource", "resourceUri") => {
                &[STATIC_TEXT, STATIC_BINARY, WATCHED]
            }
            _ => &[],
        },
        Reference::Resource(resource) if resource.uri == TEMPLATE && argument == "id" => {
            &["1", "2", "3", "123"]
        }
        _ => &[],
    }
}

/// `completion/complete`: the candidates that start with the typed value
/// (case-insensitively).
///
/// # Errors
///
/// Never in practice (the candidate lists are far below the 100-value limit).
pub(super) fn complete(request: &CompleteRequestParams) -> Result<CompleteResult, McpError> {
    let typed = request.argument.value.to_lowercase();
    let values: Vec<String> = candidates(&request.r#ref, &request.argument.name)
        .iter()
        .filter(|candidate| candidate.to_lowercase().starts_with(&typed))
        .map(|candidate| (*candidate).to_owned())
        .collect();
    let total = u32::try_from(values.len()).unwrap_or(u32::MAX);
    let mut info =
        CompletionInfo::new(values).map_err(|error| McpError::internal_error(error, None))?;
    info.total = Some(total);
    info.has_more = Some(false);
    Ok(CompleteResult::new(info))
}

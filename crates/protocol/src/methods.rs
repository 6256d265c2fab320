//! The JSON-RPC method names durable-mcp routes on, one constant each.

/// `initialize` (legacy era: opens a session).
pub const INITIALIZE: &str = "initialize";
/// `server/discover` (modern era).
pub const SERVER_DISCOVER: &str = "server/discover";
/// The prefix of the tasks methods (`tasks/get`, ...).
pub const TASKS_PREFIX: &str = "tasks/";
/// `tools/call`.
pub const TOOLS_CALL: &str = "tools/call";
/// `tools/list`.
pub const TOOLS_LIST: &str = "tools/list";
/// `prompts/get`.
pub const PROMPTS_GET: &str = "prompts/get";
/// `resources/read`.
pub const RESOURCES_READ: &str = "resources/read";
/// `resources/subscribe`.
pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
/// `resources/unsubscribe`.
pub const RESOURCES_UNSUBSCRIBE: &str = "resources/unsubscribe";
/// `completion/complete`.
pub const COMPLETION_COMPLETE: &str = "completion/complete";
/// `logging/setLevel`.
pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";
/// `subscriptions/listen` (2026-07-28).
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
/// `tasks/get`.
pub const TASKS_GET: &str = "tasks/get";
/// `tasks/list` (2025-11-25).
pub const TASKS_LIST: &str = "tasks/list";
/// `tasks/result` (2025-11-25).
pub const TASKS_RESULT: &str = "tasks/result";
/// `tasks/cancel`.
pub const TASKS_CANCEL: &str = "tasks/cancel";
/// `tasks/update` (2026-07-28 Tasks extension).
pub const TASKS_UPDATE: &str = "tasks/update";
/// `notifications/message` (a log line).
pub const NOTIFICATION_MESSAGE: &str = "notifications/message";
/// `notifications/progress`.
pub const NOTIFICATION_PROGRESS: &str = "notifications/progress";
/// `notifications/cancelled`.
pub const NOTIFICATION_CANCELLED: &str = "notifications/cancelled";
/// `notifications/resources/updated`.
pub const NOTIFICATION_RESOURCES_UPDATED: &str = "notifications/resources/updated";
/// `notifications/tools/list_changed`.
pub const NOTIFICATION_TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
/// `notifications/prompts/list_changed`.
pub const NOTIFICATION_PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
/// `notifications/resources/list_changed`.
pub const NOTIFICATION_RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
/// `notifications/tasks/status` (2025-11-25).
pub const NOTIFICATION_TASKS_STATUS: &str = "notifications/tasks/status";
/// `notifications/tasks` (2026-07-28 Tasks extension).
pub const NOTIFICATION_TASKS: &str = "notifications/tasks";
/// `notifications/subscriptions/acknowledged` (2026-07-28), the first message of a
/// `subscriptions/listen` stream.
pub const NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED: &str =
    "notifications/subscriptions/acknowledged";

/// A request's method, parsed once where the request comes in: the methods durable-mcp
/// routes on by name, and every other one as [`Method::Other`] (the handler's to answer).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// `initialize`.
    Initialize,
    /// `server/discover`.
    ServerDiscover,
    /// `tools/call`.
    ToolsCall,
    /// `tools/list`.
    ToolsList,
    /// `prompts/get`.
    PromptsGet,
    /// `resources/read`.
    ResourcesRead,
    /// `resources/subscribe`.
    ResourcesSubscribe,
    /// `resources/unsubscribe`.
    ResourcesUnsubscribe,
    /// `completion/complete`.
    CompletionComplete,
    /// `logging/setLevel`.
    LoggingSetLevel,
    /// `subscriptions/listen`.
    SubscriptionsListen,
    /// `tasks/get`.
    TasksGet,
    /// `tasks/list`.
    TasksList,
    /// `tasks/result`.
    TasksResult,
    /// `tasks/cancel`.
    TasksCancel,
    /// `tasks/update`.
    TasksUpdate,
    /// Any other method, by name.
    Other(String),
}

/// Every named method with its name (the one table both directions read).
const NAMED: [(Method, &str); 16] = [
    (Method::Initialize, INITIALIZE),
    (Method::ServerDiscover, SERVER_DISCOVER),
    (Method::ToolsCall, TOOLS_CALL),
    (Method::ToolsList, TOOLS_LIST),
    (Method::PromptsGet, PROMPTS_GET),
    (Method::ResourcesRead, RESOURCES_READ),
    (Method::ResourcesSubscribe, RESOURCES_SUBSCRIBE),
    (Method::ResourcesUnsubscribe, RESOURCES_UNSUBSCRIBE),
    (Method::CompletionComplete, COMPLETION_COMPLETE),
    (Method::LoggingSetLevel, LOGGING_SET_LEVEL),
    (Method::SubscriptionsListen, SUBSCRIPTIONS_LISTEN),
    (Method::TasksGet, TASKS_GET),
    (Method::TasksList, TASKS_LIST),
    (Method::TasksResult, TASKS_RESULT),
    (Method::TasksCancel, TASKS_CANCEL),
    (Method::TasksUpdate, TASKS_UPDATE),
];

impl Method {
    /// The method named `name`.
    pub fn parse(name: &str) -> Self {
        NAMED.iter().find(|(_, known)| *known == name).map_or_else(
            || Self::Other(name.to_owned()),
            |(method, _)| method.clone(),
        )
    }

    /// Its name on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Other(name) => name,
            named => NAMED
                .iter()
                .find(|(method, _)| method == named)
                .map_or("", |(_, name)| name),
        }
    }

    /// Whether its requests are journaled (D6): those whose handlers may take time or have
    /// effects.
    pub fn is_journaled(&self) -> bool {
        matches!(
            self,
            Self::ToolsCall | Self::PromptsGet | Self::ResourcesRead | Self::CompletionComplete
        )
    }

    /// Whether it is one of the `tasks/*` methods, a known one or not.
    pub fn is_tasks(&self) -> bool {
        self.as_str().starts_with(TASKS_PREFIX)
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_method_reads_back_as_itself_and_others_keep_their_name() {
        for (method, name) in &NAMED {
            assert_eq!(&Method::parse(name), method);
            assert_eq!(method.as_str(), *name);
        }
        assert_eq!(Method::parse("ping"), Method::Other("ping".into()));
        assert_eq!(Method::parse("ping").as_str(), "ping");
        assert!(Method::parse("tasks/unknown").is_tasks());
        assert!(!Method::ToolsList.is_journaled() && Method::ToolsCall.is_journaled());
    }
}

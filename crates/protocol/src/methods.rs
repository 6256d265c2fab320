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

//! Task status notifications, both designs:
//!
//! - 2025-11-25: `notifications/tasks/status` (the task, as `tasks/get` shows it) goes to the
//!   standalone GET stream of the session that created the task, each time the task's
//!   status changes, from whichever worker changed it;
//! - 2026-07-28 Tasks extension: a `subscriptions/listen` request may name task ids in
//!   `notifications.taskIds`. The acknowledgement lists those accepted (the caller's own
//!   extension tasks that still exist); the stream then carries a `notifications/tasks`
//!   with the whole detailed task (what `tasks/get` would answer) for the current state and
//!   for every later change, tagged with the subscription id.
//!
//! The same feed delivers the server's announced changes (list changes, resource updates:
//! see `changes`) that a listen stream's acknowledged filter covers, from every worker.
//!
//! Task notifications are optional in the protocol, and sent at most once: a worker that dies between a
//! task's change and its notification loses that notification (`tasks/get` stays the
//! source of truth). A listen stream learns of changes made on its own worker at once
//! (the engine broadcasts every task write) and of those made on other workers by
//! re-reading its tasks every [`FEED_POLL`].

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use durable_mcp_protocol::jsonrpc::{Request, RequestId, code, error_response};
use durable_mcp_store::{StoreError, StreamId};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use durable_mcp_protocol::meta::SUBSCRIPTION_ID;
use durable_mcp_protocol::methods;

use crate::EngineError;
use crate::caller::Caller;
use crate::changes::{Following, notification};
use crate::records::{Flavor, TaskRecord, key};
use crate::requests::Requests;
use crate::tasks::{TaskOwner, declares_extension, missing_extension};

/// The notification rmcp sends first on a `subscriptions/listen` stream.
pub(crate) const ACKNOWLEDGED_METHOD: &str = methods::NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED;
/// The most task ids one listen request may name (-32602 beyond).
pub(crate) const MAX_SUBSCRIBED_TASKS: usize = 256;
/// How often a listen stream re-reads its tasks for changes made on other workers.
const FEED_POLL: Duration = Duration::from_millis(250);
/// How long a listen stream waits before retrying a notification the store refused.
const FEED_RETRY: Duration = Duration::from_millis(500);

/// What a `subscriptions/listen` request asked to follow beyond what its handler
/// acknowledges: the tasks it named and may follow.
#[derive(Debug, Default)]
pub(crate) struct ListenSubscription {
    /// `(task id, record key)`, in the order requested.
    tasks: Vec<(String, String)>,
    /// Whether the request named tasks (the acknowledgement then lists those accepted).
    named_tasks: bool,
}

/// The announcement keys a listen stream's acknowledged filter covers (see `changes`).
#[derive(Debug, Default)]
pub(crate) struct ListenFilter {
    keys: Vec<String>,
    uris: Vec<String>,
}

impl ListenSubscription {
    /// Whether the stream follows any task.
    pub(crate) fn follows_tasks(&self) -> bool {
        !self.tasks.is_empty()
    }
}

impl ListenFilter {
    /// Whether the stream follows any announcement.
    pub(crate) fn follows_changes(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The resource URIs the stream follows.
    pub(crate) fn uris(&self) -> &[String] {
        &self.uris
    }
}

/// What a listen stream last told of a task: a new notification goes out when this changes.
fn fingerprint(task: &TaskRecord) -> (String, Vec<String>) {
    (
        task.status.as_str().to_owned(),
        task.input_requests.keys().cloned().collect(),
    )
}

impl Requests {
    /// Read a 2026-07-28 `subscriptions/listen` request's `notifications.taskIds`; `Err`
    /// with the refusal to send when it is malformed, names too many, or the client did not
    /// declare the extension (-32021).
    pub(crate) async fn listen_subscription(
        &self,
        caller: &Caller,
        request: &Request,
    ) -> Result<Result<ListenSubscription, Value>, EngineError> {
        let id = request.id();
        let invalid =
            |message: &str| error_response(id.clone(), code::INVALID_PARAMS, message, None);
        let requested = request
            .param("notifications")
            .and_then(|n| n.get("taskIds"));
        let ids: Vec<&str> = match requested {
            None | Some(Value::Null) => return Ok(Ok(ListenSubscription::default())),
            Some(Value::Array(ids)) => {
                match ids.iter().map(Value::as_str).collect::<Option<Vec<&str>>>() {
                    Some(ids) => ids,
                    None => {
                        return Ok(Err(invalid(
                            "notifications.taskIds must be an array of task id strings",
                        )));
                    }
                }
            }
            Some(_) => {
                return Ok(Err(invalid(
                    "notifications.taskIds must be an array of task id strings",
                )));
            }
        };
        if ids.is_empty() {
            return Ok(Ok(ListenSubscription::default()));
        }
        if !declares_extension(request.meta()) {
            return Ok(Err(missing_extension(id.clone())));
        }
        if ids.len() > MAX_SUBSCRIBED_TASKS {
            return Ok(Err(invalid(&format!(
                "notifications.taskIds names more than {MAX_SUBSCRIBED_TASKS} tasks"
            ))));
        }
        let owner = TaskOwner::of(caller, Flavor::Extension);
        let mut seen = HashSet::new();
        let mut tasks = Vec::new();
        for task_id in ids {
            // Not an id this server hands out, or named twice: not acknowledged.
            if task_id.parse::<StreamId>().is_err() || !seen.insert(task_id) {
                continue;
            }
            // Another owner's task is simply not found (D13): not acknowledged.
            let key = owner.key(task_id);
            if let Some((task, _)) = self.tasks().load_task(&key).await?
                && task.flavor == Flavor::Extension
                && owner.owns(&task)
            {
                tasks.push((task_id.to_owned(), key));
            }
        }
        Ok(Ok(ListenSubscription {
            tasks,
            named_tasks: true,
        }))
    }

    /// Read the handler's acknowledgement (the filter it accepted, the subscription id)
    /// and add the accepted task ids to it.
    pub(crate) fn acknowledge(
        subscription: &ListenSubscription,
        request_id: &RequestId,
        message: &mut Value,
    ) -> (Value, ListenFilter) {
        let accepted: Vec<&str> = subscription
            .tasks
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        let mut subscription_id = json!(request_id);
        let mut filter = ListenFilter::default();
        if let Some(params) = message.as_object_mut().and_then(|m| {
            m.entry("params")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        }) {
            if let Some(id) = params.get("_meta").and_then(|m| m.get(SUBSCRIPTION_ID)) {
                subscription_id = id.clone();
            }
            if let Some(notifications) = params
                .entry("notifications")
                .or_insert_with(|| json!({}))
                .as_object_mut()
            {
                for (field, key) in [
                    ("toolsListChanged", key::TOOLS_ANNOUNCEMENT),
                    ("promptsListChanged", key::PROMPTS_ANNOUNCEMENT),
                    ("resourcesListChanged", key::RESOURCES_ANNOUNCEMENT),
                ] {
                    if notifications.get(field) == Some(&Value::Bool(true)) {
                        filter.keys.push(key.to_owned());
                    }
                }
                if let Some(Value::Array(uris)) = notifications.get("resourceSubscriptions") {
                    filter.uris = uris
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect();
                    filter.keys.extend(
                        filter
                            .uris
                            .iter()
                            .map(|uri| key::resource_announcement(uri)),
                    );
                }
                if subscription.named_tasks {
                    notifications.insert("taskIds".into(), json!(accepted));
                }
            }
        }
        (subscription_id, filter)
    }

    /// Feed a listen stream until `stop`: `notifications/tasks` for the subscribed tasks
    /// (the current state first, then every change) and the announced changes its filter
    /// covers. Stopping waits for a commit in progress (the caller awaits the handle), so
    /// the stream's last event stays its outcome. A task notification the store refuses is
    /// retried; the feed ends only with its stream.
    pub(crate) fn feed_listen(
        &self,
        subscription: ListenSubscription,
        subscription_id: Value,
        filter: ListenFilter,
        mut announced: Option<Following>,
        stream: StreamId,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        let mut changes = self.tasks().written();
        tokio::spawn(async move {
            let meta = json!({SUBSCRIPTION_ID: subscription_id});
            let mut told: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
            // Announced changes not yet committed to the stream (the store refused them).
            let mut pending: Vec<String> = Vec::new();
            let mut following: Vec<(String, String)> = subscription.tasks;
            loop {
                let mut gone = Vec::new();
                if !engine.deliver_changes(&stream, &meta, &mut pending).await {
                    return;
                }
                let mut refused = !pending.is_empty();
                for (task_id, key) in &following {
                    if stop.is_cancelled() {
                        return;
                    }
                    let task = match engine.tasks().load_task(key).await {
                        Ok(Some((task, _))) => task,
                        // Expired: nothing more will change.
                        Ok(None) => {
                            gone.push(task_id.clone());
                            continue;
                        }
                        Err(error) => {
                            tracing::warn!(%error, task = %task_id, "could not read a subscribed task; retrying");
                            continue;
                        }
                    };
                    let now = fingerprint(&task);
                    if told.get(task_id) == Some(&now) {
                        continue;
                    }
                    let mut params = task.detailed_map();
                    params.insert("_meta".into(), meta.clone());
                    let message = json!({"jsonrpc": "2.0", "method": methods::NOTIFICATION_TASKS, "params": params});
                    match engine.commit(&stream, &message, false).await {
                        Ok(_) => {}
                        Err(EngineError::Store(
                            StoreError::StreamClosed { .. } | StoreError::NotFound { .. },
                        )) => return,
                        Err(error) => {
                            tracing::warn!(%error, %stream, "could not commit a task notification; retrying");
                            refused = true;
                            continue;
                        }
                    }
                    if task.status.is_terminal() {
                        // Its last notification: a terminal status never changes.
                        gone.push(task_id.clone());
                    }
                    told.insert(task_id.clone(), now);
                }
                following.retain(|(task_id, _)| !gone.contains(task_id));
                let deadline =
                    tokio::time::Instant::now() + if refused { FEED_RETRY } else { FEED_POLL };
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        change = next_announcement(&mut announced) => {
                            let keys = match change {
                                Ok(key) => vec![key],
                                // Missed some: tell of every key followed (a list-changed
                                // notification only asks the client to read again).
                                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => filter.keys.clone(),
                                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                            };
                            for key in keys {
                                if filter.keys.contains(&key) && !pending.contains(&key) {
                                    pending.push(key);
                                }
                            }
                            if !engine.deliver_changes(&stream, &meta, &mut pending).await {
                                return;
                            }
                            if !pending.is_empty() {
                                // Refused by the store: retried on the next pass.
                                break;
                            }
                        }
                        changed = changes.recv() => match changed {
                            Ok(key) if !following.iter().any(|(_, k)| *k == key) => {}
                            // A lagging receiver only missed wake-ups: the next pass re-reads all.
                            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        },
                        () = tokio::time::sleep_until(deadline) => break,
                    }
                }
            }
        })
    }
}

impl Requests {
    /// Commit the notifications of `pending` announced changes to a listen stream; those
    /// the store refuses stay pending. `false`: the stream is gone.
    async fn deliver_changes(
        &self,
        stream: &StreamId,
        meta: &Value,
        pending: &mut Vec<String>,
    ) -> bool {
        let mut refused = Vec::new();
        for key in pending.drain(..) {
            let Some(message) = notification(&key, meta) else {
                continue;
            };
            match self.commit(stream, &message, false).await {
                Ok(_) => {}
                Err(EngineError::Store(
                    StoreError::StreamClosed { .. } | StoreError::NotFound { .. },
                )) => return false,
                Err(error) => {
                    tracing::warn!(%error, %stream, "could not commit an announced change; retrying");
                    refused.push(key);
                }
            }
        }
        *pending = refused;
        true
    }
}

/// The next announced change a listen stream follows (never, if it follows none).
async fn next_announcement(
    following: &mut Option<Following>,
) -> Result<String, tokio::sync::broadcast::error::RecvError> {
    match following {
        Some(following) => following.changes.recv().await,
        None => std::future::pending().await,
    }
}

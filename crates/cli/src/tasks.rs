//! `durable-mcp tasks`: tasks of both designs, listed with filters, shown with their run's
//! timeline, and cancelled by an operator with the semantics of a client's `tasks/cancel`
//! (docs/operations.md, "Acting on tasks").

use std::sync::Arc;

use anyhow::bail;
use durable_mcp::engine::EngineError;
use durable_mcp::engine::inspect::TaskSummary;
use durable_mcp::store::Store;

/// How many task records `tasks list` reads before it filters them.
const SCAN: usize = 100_000;

/// Which tasks `tasks list` prints: every field set must match.
#[derive(Debug, Default)]
pub struct TaskFilter {
    pub status: Option<String>,
    pub principal: Option<String>,
    pub session: Option<String>,
    pub design: Option<String>,
}

impl TaskFilter {
    fn matches(&self, task: &TaskSummary) -> bool {
        let is = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|want| have == Some(want))
        };
        is(&self.status, Some(&task.status))
            && is(&self.principal, Some(&task.principal))
            && is(&self.session, task.session.as_deref())
            && is(&self.design, Some(task.design))
    }
}

/// `tasks list`: the tasks `filter` matches, at most `limit`, oldest first.
pub async fn list(
    store: &dyn Store,
    filter: &TaskFilter,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let mut tasks: Vec<TaskSummary> = durable_mcp::engine::inspect::tasks(store, SCAN)
        .await?
        .into_iter()
        .filter(|task| filter.matches(task))
        .collect();
    tasks.sort_by(|a, b| a.created_at.cmp(&b.created_at));
    tasks.truncate(limit);
    for task in tasks {
        if json {
            println!("{}", serde_json::to_string(&task)?);
        } else {
            println!("{}", line(&task));
        }
    }
    Ok(())
}

/// One task as `tasks list` prints it.
pub fn line(task: &TaskSummary) -> String {
    format!(
        "{}  {}  design={}  questions={}  created={}  updated={}  ttl_ms={}  run={}  principal={}",
        task.task_id,
        task.status,
        task.design,
        task.open_questions,
        task.created_at,
        task.last_updated_at,
        task.ttl_ms,
        task.run_id.as_deref().unwrap_or("-"),
        task.principal
    )
}

/// `tasks show ID`: the task, then its run's timeline (`runs show`).
pub async fn show(store: Arc<dyn Store>, id: &str, json: bool) -> anyhow::Result<()> {
    let engine = crate::ops::operator_engine(store);
    let Some((task, timeline)) = engine.task_timeline(id, SCAN).await? else {
        bail!("no task {id}: it expired, or never existed (`durable-mcp tasks list`)");
    };
    if json {
        println!(
            "{}",
            serde_json::json!({"task": task, "timeline": timeline})
        );
        return Ok(());
    }
    println!("{}", line(&task));
    if let Some(message) = &task.status_message {
        println!("status message: {message}");
    }
    match (&task.run_id, timeline) {
        (Some(run_id), Some(timeline)) => {
            println!("its run {run_id}:");
            crate::runs::print_timeline(&timeline);
        }
        _ => println!("its run: not known (a task from before tasks kept it)"),
    }
    Ok(())
}

/// `tasks cancel ID`.
pub async fn cancel(
    store: Arc<dyn Store>,
    id: &str,
    by: Option<String>,
    reason: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let engine = crate::ops::operator_engine(store);
    let action = engine
        .cancel_task(id, by.unwrap_or_else(crate::runs::operator), reason)
        .await
        .map_err(|error| match error {
            EngineError::TaskNotFound(_) => anyhow::anyhow!(
                "task {id} is not in the store: it expired, or never existed (`durable-mcp tasks list`)"
            ),
            error @ EngineError::TaskTerminal { .. } => anyhow::anyhow!("{error}"),
            error => anyhow::Error::new(error).context(format!("cancel task {id}")),
        })?;
    if json {
        println!("{}", serde_json::to_string(&action)?);
    } else {
        println!(
            "cancelled task {id}: it is `cancelled` now; its run {} stops at its worker's next heartbeat",
            action.run_id
        );
    }
    Ok(())
}

//! `durable-mcp runs`: journaled runs, listed with filters, shown with their steps and the
//! operators' actions on them, cancelled, killed, retried (parked ones) or purged. Works against any store, whether its
//! workers are running or not; an action is committed as a record, and whichever worker
//! runs the run obeys it (docs/operations.md, "Acting on runs").

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use durable_mcp::engine::inspect::{RunFilter, RunSummary, RunTimeline as Timeline};
use durable_mcp::engine::{ActionKind, ActionRecord, EngineError};
use durable_mcp::store::{Store, now_ms};

/// How many journal entries `runs list` reads before it filters them.
const SCAN: usize = 100_000;

/// `runs list`: the runs `filter` matches, at most `limit`, oldest first.
pub async fn list(
    store: &dyn Store,
    filter: &RunFilter,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let now = now_ms();
    let mut runs = picked(store, filter, now).await?;
    runs.truncate(limit);
    print_runs(&runs, now, json)
}

/// The runs `filter` picks at `now`, oldest first.
async fn picked(
    store: &dyn Store,
    filter: &RunFilter,
    now: u64,
) -> anyhow::Result<Vec<RunSummary>> {
    let mut runs: Vec<RunSummary> = durable_mcp::engine::inspect::runs(store, SCAN)
        .await?
        .into_iter()
        .filter(|run| filter.matches(run, now))
        .collect();
    runs.sort_by_key(|run| run.accepted_ms);
    Ok(runs)
}

/// `runs`, a line (or a JSON object) each.
fn print_runs(runs: &[RunSummary], now: u64, json: bool) -> anyhow::Result<()> {
    for run in runs {
        if json {
            println!("{}", serde_json::to_string(run)?);
        } else {
            println!("{}", line(run, now));
        }
    }
    Ok(())
}

/// One run as `runs list` prints it.
fn line(run: &RunSummary, now: u64) -> String {
    let age = run
        .accepted_ms
        .map_or_else(|| "-".to_owned(), |at| age(now.saturating_sub(at)));
    format!(
        "{}  {} {}  id={}  state={}  age={}  lease={}  owner={}  attempt={}  failures={}  task={}  principal={}  session={}",
        run.run_id,
        run.method,
        run.target.as_deref().unwrap_or("-"),
        run.request_id,
        run.state(now).as_str(),
        age,
        run.lease_state(now),
        run.owner.as_deref().unwrap_or("-"),
        run.attempt,
        run.failures,
        run.task_id.as_deref().unwrap_or("-"),
        run.principal,
        run.session.as_deref().unwrap_or("-"),
    )
}

/// Run `id`'s timeline, from whatever the store keeps of it.
pub async fn timeline(store: Arc<dyn Store>, id: &str) -> anyhow::Result<Timeline> {
    crate::ops::operator_engine(store)
        .run_timeline(id, SCAN)
        .await?
        .with_context(|| {
            format!(
                "no run {id}: it is not in the journal (finished, or never existed), has no stream, and no operator acted on it"
            )
        })
}

/// `runs show ID`: the run's timeline: accepted, each attempt (worker, how it ended),
/// each committed step and answer (size, duration), the messages on its stream
/// (notifications, questions, the outcome) and the operators' actions. A finished run
/// shows what retention has kept of it: its stream and the actions.
pub async fn show(store: Arc<dyn Store>, id: &str, json: bool) -> anyhow::Result<()> {
    let timeline = timeline(store, id).await?;
    if json {
        println!("{}", serde_json::to_string(&timeline)?);
    } else {
        print_timeline(&timeline);
    }
    Ok(())
}

/// A run's timeline as `runs show` prints it.
pub fn print_timeline(timeline: &Timeline) {
    use durable_mcp::engine::inspect;

    let Timeline {
        run_id: id,
        run,
        steps,
        stream,
        actions,
        ..
    } = timeline;
    let now = now_ms();
    let at = inspect::iso8601;
    match &run {
        Some(run) => {
            println!("{}", line(run, now));
            if let Some(accepted) = run.accepted_ms {
                println!("accepted {}", at(accepted));
            }
            for attempt in &run.attempts {
                let ended = attempt.ended.as_ref().map_or_else(
                    || "not ended".to_owned(),
                    |end| {
                        format!(
                            "{} {} (after {})",
                            end.how.as_str(),
                            at(end.at_ms),
                            millis(end.at_ms.saturating_sub(attempt.started_ms))
                        )
                    },
                );
                println!(
                    "attempt {}  worker={}  started {}  {ended}",
                    attempt.attempt,
                    attempt.worker,
                    at(attempt.started_ms)
                );
            }
            if let Some(parked) = &run.parked {
                println!(
                    "parked {} ({}): {}",
                    at(parked.at_ms),
                    parked.reason.as_str(),
                    parked.error
                );
            }
        }
        None => println!("{id}  not in the journal (finished, killed, or never existed)"),
    }
    let sent = steps.iter().filter(|step| step.kind == "sent").count();
    println!(
        "steps and answers: {}  (notifications marked sent: {sent})",
        steps.len() - sent
    );
    for step in steps.iter().filter(|step| step.kind != "sent") {
        let committed = step.committed.as_ref().map_or_else(String::new, |c| {
            format!(
                "  {}  attempt {}  worker={}{}",
                at(c.at_ms),
                c.attempt,
                c.worker,
                c.ms.map(|ms| format!("  ran {}", millis(ms)))
                    .unwrap_or_default()
            )
        });
        println!(
            "  {} {}  {} bytes{committed}",
            step.kind, step.name, step.bytes
        );
    }
    println!(
        "stream ({}): {} messages",
        stream.state,
        stream.messages.len()
    );
    for message in &stream.messages {
        let what = match (&message.method, &message.error) {
            (Some(method), _) => method.clone(),
            (None, Some(error)) => format!("error {} {}", error["code"], error["message"]),
            (None, None) => "result".to_owned(),
        };
        println!(
            "  #{} {} {what}  {} bytes",
            message.seq, message.kind, message.bytes
        );
    }
    println!("actions: {}", actions.len());
    for action in actions {
        println!("  {}", describe(action));
    }
}

/// A duration in milliseconds as people read it.
fn millis(ms: u64) -> String {
    if ms < 10_000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// `runs cancel|kill|retry ID`.
pub async fn act(
    store: Arc<dyn Store>,
    id: &str,
    kind: ActionKind,
    by: Option<String>,
    reason: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let engine = crate::ops::operator_engine(store);
    let by = by.unwrap_or_else(operator);
    let done = match kind {
        ActionKind::Cancel => engine.cancel_run(id, by, reason).await,
        ActionKind::Kill => engine.kill_run(id, by, reason).await,
        ActionKind::Retry => engine.retry_run(id, by, reason).await,
        ActionKind::Purge => engine.purge_run(id, by, reason).await,
    };
    let action = done.map_err(|error| refused(error, id, kind))?;
    if json {
        println!("{}", serde_json::to_string(&action)?);
        return Ok(());
    }
    println!(
        "{}",
        match kind {
            ActionKind::Cancel => format!(
                "cancelled run {id}: the worker running it cancels it at its next heartbeat (a third of the lease); a run no worker holds is closed by the next recovery"
            ),
            ActionKind::Kill | ActionKind::Purge => format!(
                "{} run {id}: its error outcome is committed; a worker still running it cancels it at its next heartbeat",
                if kind == ActionKind::Kill {
                    "killed"
                } else {
                    "purged"
                }
            ),
            ActionKind::Retry => format!(
                "retried run {id}: the next recovery pass of any worker runs it again, its committed steps replayed"
            ),
        }
    );
    Ok(())
}

/// What the operator reads when `kind` on run `id` failed with `error`.
fn refused(error: EngineError, id: &str, kind: ActionKind) -> anyhow::Error {
    match error {
        EngineError::RunNotFound(_) => anyhow::anyhow!(
            "run {id} is not in the journal: it has finished, was killed, or never existed (`durable-mcp runs list`)"
        ),
        EngineError::RunNotParked(_) => anyhow::anyhow!(
            "run {id} is not parked: only a parked run can be retried; a running run is being tried already, one that ended has answered its client (`durable-mcp runs list --state parked`)"
        ),
        error => anyhow::Error::new(error).context(format!("{} run {id}", kind.as_str())),
    }
}

/// `runs purge`: end every run `filter` picks (list them only, with `dry_run`). A run that
/// ends by itself between the listing and its purge is reported, not purged.
pub async fn purge(
    store: Arc<dyn Store>,
    filter: &RunFilter,
    dry_run: bool,
    by: Option<String>,
    reason: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let now = now_ms();
    let runs = picked(store.as_ref(), filter, now).await?;
    if dry_run {
        print_runs(&runs, now, json)?;
        if !json {
            println!(
                "would purge {} run(s); nothing changed (--dry-run)",
                runs.len()
            );
        }
        return Ok(());
    }
    let engine = crate::ops::operator_engine(store);
    let by = by.unwrap_or_else(operator);
    let (mut purged, mut gone) = (0, 0);
    for run in &runs {
        match engine
            .purge_run(&run.run_id, by.clone(), reason.clone())
            .await
        {
            Ok(action) => {
                purged += 1;
                if json {
                    println!("{}", serde_json::to_string(&action)?);
                } else {
                    println!("purged {}", line(run, now));
                }
            }
            Err(EngineError::RunNotFound(_)) => {
                gone += 1;
                if !json {
                    println!("ended by itself before its purge: {}", run.run_id);
                }
            }
            Err(error) => {
                return Err(refused(error, &run.run_id, ActionKind::Purge))
                    .with_context(|| format!("after purging {purged} run(s)"));
            }
        }
    }
    if !json {
        println!("purged {purged} run(s); {gone} ended by themselves first");
    }
    Ok(())
}

/// An action as `runs show` prints it.
fn describe(action: &ActionRecord) -> String {
    format!(
        "{}  {} by {}{}",
        durable_mcp::engine::inspect::iso8601(action.at_ms),
        action.action.as_str(),
        action.by,
        action
            .reason
            .as_deref()
            .map(|reason| format!(": {reason}"))
            .unwrap_or_default()
    )
}

/// Who acts, when `--by` is not given: the user running the command.
pub fn operator() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "operator".to_owned())
}

/// A duration as people write it: `90s`, `15m`, `2h`, `7d` (a bare number is seconds).
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, ""), |at| text.split_at(at));
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration such as 90s, 15m, 2h or 7d"))?;
    let seconds = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use s, m, h or d"
            ));
        }
    };
    Ok(Duration::from_secs(number.saturating_mul(seconds)))
}

/// An age as people read it.
fn age(ms: u64) -> String {
    match ms / 1000 {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_their_units() {
        assert_eq!(parse_age("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_age("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(604_800)));
        assert!(parse_age("7w").unwrap_err().contains("unknown unit"));
        assert!(parse_age("soon").unwrap_err().contains("not a duration"));
        assert!(parse_age("").is_err());
    }

    #[test]
    fn ages_print_in_the_largest_fitting_unit() {
        assert_eq!(age(5_000), "5s");
        assert_eq!(age(600_000), "10m");
        assert_eq!(age(3 * 3_600_000), "3h");
        assert_eq!(age(3 * 86_400_000), "3d");
    }
}

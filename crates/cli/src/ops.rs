//! The operator commands that read a store: `sessions`, `stats` and `doctor`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use durable_mcp_store::{
    Expect, Principal, RecordKind, SessionId, SessionRecord, Store, StreamId, StreamInfo, now_ms,
};
use serde::Serialize;
use serde_json::{Value, json};

/// Every stream of `store` (in pages).
pub async fn all_streams(
    store: &dyn Store,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<StreamInfo>> {
    let mut all = Vec::new();
    let mut after: Option<StreamId> = None;
    loop {
        let page = store
            .list_streams(after.as_ref(), 500)
            .await
            .context("listing streams")?;
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        bar.inc_length(page.len() as u64);
        all.extend(page);
    }
    Ok(all)
}

/// The live session `id`, whatever its principal.
pub async fn find_session(store: &dyn Store, id: &str) -> anyhow::Result<SessionRecord> {
    let id: SessionId = id.parse().context("malformed session id")?;
    store
        .list_sessions(None, usize::MAX)
        .await?
        .into_iter()
        .find(|s| s.id == id)
        .with_context(|| format!("no live session {id}"))
}

/// `sessions list`.
pub async fn sessions_list(
    store: &dyn Store,
    principal: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let principal = principal.map(Principal::new);
    for session in store.list_sessions(principal.as_ref(), limit).await? {
        if json {
            println!("{}", serde_json::to_string(&session)?);
        } else {
            println!(
                "{}  principal={}  version={}  created_ms={}  last_seen_ms={}  client={}",
                session.id,
                session.principal,
                session.protocol_version,
                session.created_at_ms,
                session.last_seen_ms,
                session.client["clientInfo"]["name"].as_str().unwrap_or("-")
            );
        }
    }
    Ok(())
}

/// `sessions show ID`: the session and its streams.
pub async fn sessions_show(store: &dyn Store, id: &str, json: bool) -> anyhow::Result<()> {
    let session = find_session(store, id).await?;
    let streams: Vec<StreamInfo> = all_streams(store, &indicatif::ProgressBar::hidden())
        .await?
        .into_iter()
        .filter(|s| s.owner.session.as_ref() == Some(&session.id))
        .collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"session": session, "streams": streams}))?
        );
        return Ok(());
    }
    println!("session {}", session.id);
    println!("  principal         {}", session.principal);
    println!("  protocol version  {}", session.protocol_version);
    println!("  client            {}", session.client["clientInfo"]);
    println!("  created_ms        {}", session.created_at_ms);
    println!("  last_seen_ms      {}", session.last_seen_ms);
    println!(
        "  log level         {}",
        session.log_level.as_deref().unwrap_or("-")
    );
    println!(
        "  subscriptions     {}",
        session
            .subscriptions
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  state keys        {}",
        session.state.keys().cloned().collect::<Vec<_>>().join(", ")
    );
    println!("  standalone stream {}", session.standalone_stream);
    for stream in streams {
        println!(
            "  stream {}  events {}..={}  {}",
            stream.id,
            stream.first_seq,
            stream.last_seq,
            if stream.closed { "closed" } else { "open" }
        );
    }
    Ok(())
}

/// A server handler that serves nothing: the operator's commands need an engine only for
/// its paths (ending a session, acting on a run).
#[derive(Clone)]
struct Operator;

impl durable_mcp::rmcp::ServerHandler for Operator {}

/// An engine for the operator's commands on `store`: it serves no requests.
pub(crate) fn operator_engine(store: Arc<dyn Store>) -> durable_mcp::engine::Engine {
    durable_mcp::engine::Engine::new(
        store,
        durable_mcp::McpHandler::new(Operator),
        durable_mcp::engine::EngineOptions::default(),
    )
}

/// `sessions end ID`: what an HTTP `DELETE` of the session does, through the same engine
/// path (`Engine::end_session`): every worker answers 404 for it from then on, and its
/// streams close.
pub async fn sessions_end(store: Arc<dyn Store>, id: &str, json: bool) -> anyhow::Result<()> {
    let session = find_session(store.as_ref(), id).await?;
    let engine = operator_engine(store);
    let ended = engine
        .end_session(&session.principal, &session.id)
        .await
        .context("ending the session")?;
    if !ended {
        bail!("session {} had already ended", session.id);
    }
    if json {
        println!("{}", json!({"ended": session.id}));
    } else {
        println!("ended session {}", session.id);
    }
    Ok(())
}

/// `sessions end --all-idle --older-than AGE [--dry-run]`: every live session with no
/// request seen for `idle`, oldest first, ended as `sessions end` ends one (or, dry, only
/// listed).
pub async fn sessions_end_idle(
    store: Arc<dyn Store>,
    idle: Duration,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<()> {
    const SCAN: usize = 1_000_000;
    let now = durable_mcp::store::now_ms();
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    let mut idle_sessions: Vec<_> = store
        .list_sessions(None, SCAN)
        .await?
        .into_iter()
        .filter(|session| now.saturating_sub(session.last_seen_ms) >= idle_ms)
        .collect();
    idle_sessions.sort_by_key(|session| session.last_seen_ms);
    let engine = (!dry_run).then(|| operator_engine(store));
    let mut ended = 0;
    for session in &idle_sessions {
        let idle_for = now.saturating_sub(session.last_seen_ms) / 1000;
        let done = match &engine {
            None => "would end",
            // Ended meanwhile (by its client, or another operator): nothing left to do.
            Some(engine) => match engine.end_session(&session.principal, &session.id).await {
                Ok(true) => "ended",
                Ok(false) => "already ended",
                Err(error) => {
                    return Err(error).with_context(|| {
                        format!("ending session {} ({ended} ended before it)", session.id)
                    });
                }
            },
        };
        ended += usize::from(done == "ended");
        if json {
            println!(
                "{}",
                json!({"session": session.id, "principal": session.principal, "idle_secs": idle_for, "result": done.replace(' ', "_")})
            );
        } else {
            println!(
                "{done} session {}  principal={}  idle={idle_for}s",
                session.id, session.principal
            );
        }
    }
    if !json {
        let verb = if dry_run { "would end" } else { "ended" };
        let count = if dry_run { idle_sessions.len() } else { ended };
        println!(
            "{verb} {count} of the sessions idle for {}s or more",
            idle_ms / 1000
        );
    }
    Ok(())
}

/// Milliseconds of `elapsed`.
fn ms(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

/// Latency of a few timed store calls, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    /// What was timed.
    pub operation: &'static str,
    /// Calls.
    pub samples: usize,
    /// Fastest.
    pub min_ms: f64,
    /// Median.
    pub median_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

impl Latency {
    fn of(operation: &'static str, mut samples: Vec<f64>) -> Self {
        samples.sort_by(f64::total_cmp);
        let pick = |i: usize| samples.get(i).copied().unwrap_or(0.0);
        Self {
            operation,
            samples: samples.len(),
            min_ms: pick(0),
            median_ms: pick(samples.len() / 2),
            max_ms: pick(samples.len().saturating_sub(1)),
        }
    }
}

/// Time `n` reads of one record (absent or not: the round trip is what counts).
pub async fn read_latency(store: &dyn Store, n: usize) -> anyhow::Result<Latency> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        store
            .get_record(RecordKind::Key, "durable-mcp-doctor/probe")
            .await
            .context("timing a store read")?;
        samples.push(ms(started.elapsed()));
    }
    Ok(Latency::of("read", samples))
}

/// Time `n` conditional writes, as a lease heartbeat does (on a probe record that expires
/// in a minute and is deleted after).
pub async fn write_latency(store: &dyn Store, n: usize) -> anyhow::Result<Latency> {
    let key = format!("durable-mcp-doctor/{}", StreamId::random());
    let mut samples = Vec::with_capacity(n);
    let mut expect = Expect::Absent;
    for _ in 0..n {
        let started = Instant::now();
        let version = store
            .put_record(
                RecordKind::Alias,
                &key,
                "{}".into(),
                Some(now_ms() + 60_000),
                expect,
            )
            .await
            .context("timing a store write")?;
        samples.push(ms(started.elapsed()));
        expect = Expect::Version(version);
    }
    store
        .delete_records(RecordKind::Alias, &key)
        .await
        .context("deleting the probe record")?;
    Ok(Latency::of("conditional write", samples))
}

#[derive(Debug, Default, Serialize)]
struct KindStats {
    count: u64,
    bytes: u64,
}

#[derive(Debug, Default, Serialize)]
struct PrincipalStats {
    sessions: u64,
    streams: u64,
    events: u64,
}

/// What one stream, or one session's streams together, hold (`stats`).
#[derive(Debug, Default, Clone, Serialize)]
struct Usage {
    streams: u64,
    events: u64,
    bytes: u64,
}

/// `stats`: counts and sizes by kind, the oldest items, per principal, the `top` largest
/// streams and sessions, store latency.
pub async fn stats(store: &dyn Store, top: usize, json: bool) -> anyhow::Result<()> {
    let bar = crate::transfer::progress("reading");
    let sessions = store.list_sessions(None, usize::MAX).await?;
    let mut principals: BTreeMap<String, PrincipalStats> = BTreeMap::new();
    let mut kinds: BTreeMap<&'static str, KindStats> = BTreeMap::new();
    let session_bytes: u64 = sessions
        .iter()
        .map(|s| serde_json::to_string(s).map_or(0, |t| t.len() as u64))
        .sum();
    kinds.insert(
        "session",
        KindStats {
            count: sessions.len() as u64,
            bytes: session_bytes,
        },
    );
    for s in &sessions {
        principals
            .entry(s.principal.to_string())
            .or_default()
            .sessions += 1;
    }
    let oldest_session = sessions.iter().min_by_key(|s| s.created_at_ms);
    let longest_idle = sessions.iter().min_by_key(|s| s.last_seen_ms);
    for kind in RecordKind::ALL {
        let records = store.list_records(kind, "", usize::MAX).await?;
        let bytes = records
            .iter()
            .map(|r| (r.key.len() + r.value.len()) as u64)
            .sum();
        kinds.insert(
            kind.as_str(),
            KindStats {
                count: records.len() as u64,
                bytes,
            },
        );
    }
    let streams = all_streams(store, &bar).await?;
    let (mut events, mut event_bytes, mut open) = (0u64, 0u64, 0u64);
    let mut longest: Option<(&StreamInfo, u64)> = None;
    let mut per_stream: Vec<(&StreamInfo, Usage)> = Vec::with_capacity(streams.len());
    let mut per_session: BTreeMap<String, (String, Usage)> = BTreeMap::new();
    for stream in &streams {
        let mut after = stream.first_seq.saturating_sub(1);
        let mut count = 0;
        let mut bytes = 0;
        while after < stream.last_seq {
            let read = match store.read_after(&stream.id, after, 1000).await {
                Ok(read) => read,
                // Pruned or ended while this ran.
                Err(_) => break,
            };
            let Some(last) = read.events.last() else {
                break;
            };
            after = last.id.seq;
            count += read.events.len() as u64;
            bytes += read.events.iter().map(|e| e.data.len() as u64).sum::<u64>();
        }
        events += count;
        event_bytes += bytes;
        let usage = Usage {
            streams: 1,
            events: count,
            bytes,
        };
        if let Some(session) = &stream.owner.session {
            let (_, total) = per_session
                .entry(session.to_string())
                .or_insert_with(|| (stream.owner.principal.to_string(), Usage::default()));
            total.streams += 1;
            total.events += count;
            total.bytes += bytes;
        }
        per_stream.push((stream, usage));
        open += u64::from(!stream.closed);
        if longest.is_none_or(|(_, n)| count > n) {
            longest = Some((stream, count));
        }
        let entry = principals
            .entry(stream.owner.principal.to_string())
            .or_default();
        entry.streams += 1;
        entry.events += count;
        bar.inc(1);
    }
    bar.finish_and_clear();
    kinds.insert(
        "stream",
        KindStats {
            count: streams.len() as u64,
            bytes: 0,
        },
    );
    kinds.insert(
        "event",
        KindStats {
            count: events,
            bytes: event_bytes,
        },
    );
    let latency = vec![read_latency(store, 5).await?, {
        let mut samples = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            store.status().await?;
            samples.push(ms(started.elapsed()));
        }
        Latency::of("status", samples)
    }];
    per_stream.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(b.1.events.cmp(&a.1.events)));
    per_stream.truncate(top);
    let mut per_session: Vec<(String, (String, Usage))> = per_session.into_iter().collect();
    per_session.sort_by(|a, b| {
        b.1.1
            .bytes
            .cmp(&a.1.1.bytes)
            .then(b.1.1.events.cmp(&a.1.1.events))
    });
    per_session.truncate(top);
    let largest_streams: Vec<Value> = per_stream
        .iter()
        .map(|(s, u)| json!({"id": s.id, "session": s.owner.session, "principal": s.owner.principal, "events": u.events, "bytes": u.bytes, "closed": s.closed}))
        .collect();
    let largest_sessions: Vec<Value> = per_session
        .iter()
        .map(|(id, (principal, u))| json!({"session": id, "principal": principal, "streams": u.streams, "events": u.events, "bytes": u.bytes}))
        .collect();
    let report = json!({
        "backend": store.backend(),
        "largest_streams": largest_streams,
        "largest_sessions": largest_sessions,
        "kinds": kinds,
        "open_streams": open,
        "oldest_session": oldest_session.map(|s| json!({"id": s.id, "created_ms": s.created_at_ms, "principal": s.principal})),
        "longest_idle_session": longest_idle.map(|s| json!({"id": s.id, "last_seen_ms": s.last_seen_ms, "principal": s.principal})),
        "longest_stream": longest.map(|(s, n)| json!({"id": s.id, "events": n, "closed": s.closed})),
        "principals": principals,
        "latency": latency,
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("store: {}", store.backend());
    println!("{:<14} {:>10} {:>14}", "kind", "count", "bytes");
    for (kind, s) in &kinds {
        println!("{kind:<14} {:>10} {:>14}", s.count, s.bytes);
    }
    println!("open streams: {open}");
    if let Some(s) = oldest_session {
        println!(
            "oldest session: {} (created_ms {}, principal {})",
            s.id, s.created_at_ms, s.principal
        );
    }
    if let Some(s) = longest_idle {
        println!(
            "longest idle session: {} (last_seen_ms {})",
            s.id, s.last_seen_ms
        );
    }
    if let Some((s, n)) = longest {
        println!(
            "longest stream: {} ({n} events, {})",
            s.id,
            if s.closed { "closed" } else { "open" }
        );
    }
    println!(
        "{:<24} {:>9} {:>9} {:>9}",
        "principal", "sessions", "streams", "events"
    );
    for (principal, p) in &principals {
        println!(
            "{principal:<24} {:>9} {:>9} {:>9}",
            p.sessions, p.streams, p.events
        );
    }
    println!("largest streams (events' bytes):");
    for (s, u) in &per_stream {
        println!(
            "  {}  {} events  {} bytes  {}  session={}",
            s.id,
            u.events,
            u.bytes,
            if s.closed { "closed" } else { "open" },
            s.owner.session.as_ref().map_or("-", |id| id.as_str())
        );
    }
    println!("largest sessions (their streams' events):");
    for (id, (principal, u)) in &per_session {
        println!(
            "  {id}  {} streams  {} events  {} bytes  principal={principal}",
            u.streams, u.events, u.bytes
        );
    }
    for l in &latency {
        println!(
            "latency {}: min {:.2} ms, median {:.2} ms, max {:.2} ms ({} calls)",
            l.operation, l.min_ms, l.median_ms, l.max_ms, l.samples
        );
    }
    Ok(())
}

/// The outcome of one `doctor` check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked.
    pub check: String,
    /// `ok`, `warn` (weakens durability) or `fail` (does not work).
    pub status: &'static str,
    /// What was found.
    pub detail: String,
    /// How to fix it (for `warn` and `fail`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    fn ok(check: &str, detail: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            status: "ok",
            detail: detail.into(),
            fix: None,
        }
    }
    fn warn(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            status: "warn",
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    fn fail(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            status: "fail",
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// What `doctor` judges besides the store: the settings `serve` would run with.
pub struct ServeSettings {
    /// `--store`, as given (for messages; redacted).
    pub store_url: String,
    /// `--lease-ms`.
    pub lease_ms: u64,
    /// Whether `--state-key` is set.
    pub fixed_state_key: bool,
}

/// Largest clock difference with the store's server before `doctor` warns.
const MAX_SKEW_MS: f64 = 1_000.0;

/// The "clock skew" check: the store's server read its clock (`server`) between this
/// host's `before` and `after` (milliseconds since the epoch). Warns past [`MAX_SKEW_MS`],
/// or a tenth of the lease when that is longer. Returns the check and the skew (store minus
/// host, in ms).
fn clock_skew(before: u64, after: u64, server: u64, lease_ms: u64) -> (Check, f64) {
    let midpoint = (before as f64 + after as f64) / 2.0;
    let skew_ms = server as f64 - midpoint;
    let uncertainty = after.saturating_sub(before) as f64 / 2.0;
    let detail =
        format!("the store's clock is {skew_ms:+.0} ms from this host's (± {uncertainty:.0} ms)");
    let check = if skew_ms.abs() > MAX_SKEW_MS.max(lease_ms as f64 / 10.0) {
        Check::warn(
            "clock skew",
            format!(
                "{detail}: leases are judged by each worker's clock, so a worker with a clock ahead takes requests over early"
            ),
            "run NTP (chrony, systemd-timesyncd) on every worker and on the store's host",
        )
    } else {
        Check::ok("clock skew", detail)
    };
    (check, skew_ms)
}

/// Every check of `doctor`.
pub async fn doctor_checks(settings: &ServeSettings) -> Vec<Check> {
    let mut checks = Vec::new();
    let url = crate::config::redact_url(&settings.store_url);
    let started = Instant::now();
    let store = match tokio::time::timeout(
        Duration::from_secs(10),
        durable_mcp::open_store(&settings.store_url),
    )
    .await
    {
        Ok(Ok(store)) => store,
        Ok(Err(error)) => {
            checks.push(Check::fail(
                "connectivity",
                format!("{url}: {error}"),
                "check the URL, that the service runs and that this host reaches it",
            ));
            return checks;
        }
        Err(_) => {
            checks.push(Check::fail(
                "connectivity",
                format!("{url}: no answer within 10 s"),
                "check that the service runs and that this host reaches it",
            ));
            return checks;
        }
    };
    let before = now_ms();
    let status = match store.status().await {
        Ok(status) => status,
        Err(error) => {
            checks.push(Check::fail(
                "connectivity",
                format!("{url}: opened, but it does not answer: {error}"),
                "check the service's health and logs",
            ));
            return checks;
        }
    };
    let after = now_ms();
    checks.push(Check::ok(
        "connectivity",
        format!(
            "{} store answered in {:.1} ms",
            store.backend(),
            ms(started.elapsed())
        ),
    ));
    match status.schema {
        Some(schema) if schema.is_current() => checks.push(Check::ok(
            "schema",
            format!("version {} (current)", schema.found),
        )),
        Some(schema) if schema.found < schema.expected => checks.push(Check::fail(
            "schema",
            format!(
                "version {}, this durable-mcp writes {}",
                schema.found, schema.expected
            ),
            format!("durable-mcp migrate --store {url}"),
        )),
        Some(schema) => checks.push(Check::fail(
            "schema",
            format!(
                "version {}, newer than this durable-mcp's {}",
                schema.found, schema.expected
            ),
            "upgrade durable-mcp on this host",
        )),
        None => checks.push(Check::ok(
            "schema",
            format!("{} keeps no schema version", store.backend()),
        )),
    }
    let skew_ms = match status.server_time_ms {
        Some(server) => {
            let (check, skew_ms) = clock_skew(before, after, server, settings.lease_ms);
            checks.push(check);
            skew_ms
        }
        None => {
            checks.push(Check::ok(
                "clock skew",
                format!("{} runs in this process: one clock", store.backend()),
            ));
            0.0
        }
    };
    for setting in &status.settings {
        match &setting.weakness {
            Some(weakness) => checks.push(Check::warn(
                &format!("setting {}", setting.name),
                format!("{} = {}: {}", setting.name, setting.value, weakness.risk),
                weakness.fix.clone(),
            )),
            None => checks.push(Check::ok(
                &format!("setting {}", setting.name),
                format!("{} = {}", setting.name, setting.value),
            )),
        }
    }
    checks.push(worker_clocks(store.as_ref(), settings.lease_ms.max(300)).await);
    if settings.fixed_state_key {
        checks.push(Check::ok(
            "requestState key",
            "a fixed key from --state-key: give every worker the same one",
        ));
    } else {
        match durable_mcp::engine::keys::read(store.as_ref()).await {
            Ok(Some((ring, _))) if ring.sealing_key(now_ms()).is_some() => {
                checks.push(Check::ok("requestState key", format!("a shared key ring in the store ({} key(s))", ring.keys().len())));
            }
            Ok(Some(_)) => checks.push(Check::warn(
                "requestState key",
                "the key ring in the store has no key that seals now: workers cannot seal multi-round-trip requestState",
                format!("durable-mcp keys rotate --store {url} --activate-in-secs 0"),
            )),
            Ok(None) => checks.push(Check::warn(
                "requestState key",
                "no shared requestState key in the store: until one exists, a requestState sealed by one worker may not open on another",
                format!("durable-mcp keys rotate --store {url} (or start one worker first), or give every worker the same --state-key"),
            )),
            Err(error) => {
                checks.push(Check::fail("requestState key", format!("the key ring cannot be read: {error}"), "durable-mcp keys list, and check the store"))
            }
        }
    }
    // Heartbeats renew leases every third of the lease (EngineOptions::lease); serve
    // raises a lease below 300 ms to 300 ms.
    let lease_ms = settings.lease_ms.max(300);
    let heartbeat_ms = lease_ms as f64 / 3.0;
    match write_latency(store.as_ref(), 5).await {
        Ok(latency) => {
            let needed = latency.max_ms + skew_ms.abs();
            let detail = format!(
                "lease {lease_ms} ms, heartbeat every {heartbeat_ms:.0} ms; a heartbeat write takes up to {:.1} ms (median {:.1} ms)",
                latency.max_ms, latency.median_ms
            );
            if needed >= heartbeat_ms {
                let suggested = ((needed * 3.0 * 4.0) / 1000.0).ceil() * 1000.0;
                checks.push(Check::warn(
                    "lease",
                    format!("{detail}: the lease is shorter than a heartbeat can renew it, so workers lose requests that are still running to takeovers"),
                    format!("--lease-ms {suggested:.0} or more"),
                ));
            } else {
                checks.push(Check::ok("lease", detail));
            }
        }
        Err(error) => checks.push(Check::fail(
            "lease",
            format!("timing a heartbeat-like write failed: {error:#}"),
            "check that the store accepts writes",
        )),
    }
    checks
}

/// Largest amount by which a held lease may end after `now + lease` before `doctor` says
/// its worker's clock is ahead (or its lease longer).
const MAX_LEASE_AHEAD_MS: u64 = 1_000;

/// Clock skew between workers, read from the leases of the requests they hold: a worker
/// renews its lease to its own clock plus the lease, so a lease that ends later than this
/// host's clock plus the lease comes from a worker whose clock is ahead (or that runs with
/// a longer `--lease-ms`). Leases are judged by each worker's clock: a worker whose clock
/// is ahead takes over requests of live workers before their leases end.
async fn worker_clocks(store: &dyn Store, lease_ms: u64) -> Check {
    let runs = match durable_mcp::engine::inspect::runs(store, 10_000).await {
        Ok(runs) => runs,
        Err(error) => {
            return Check::fail(
                "worker clocks",
                format!("the journal cannot be read: {error}"),
                "durable-mcp inspect runs, and check the store",
            );
        }
    };
    let now = now_ms();
    let mut ahead: BTreeMap<String, u64> = BTreeMap::new();
    let mut held = 0;
    for run in &runs {
        let Some(owner) = &run.owner else { continue };
        held += 1;
        let by = run
            .lease_until_ms
            .saturating_sub(now.saturating_add(lease_ms));
        if by > MAX_LEASE_AHEAD_MS {
            let worst = ahead.entry(owner.clone()).or_default();
            *worst = (*worst).max(by);
        }
    }
    if held == 0 {
        return Check::ok(
            "worker clocks",
            "no request is running: no lease to judge the workers' clocks by",
        );
    }
    if ahead.is_empty() {
        return Check::ok(
            "worker clocks",
            format!(
                "{held} running request(s): every lease ends within {lease_ms} ms (+1 s) of this host's clock"
            ),
        );
    }
    let workers: Vec<String> = ahead
        .iter()
        .map(|(worker, by)| format!("{worker} (+{by} ms)"))
        .collect();
    Check::warn(
        "worker clocks",
        format!(
            "leases end later than this host's clock plus the lease ({lease_ms} ms): {}: their clocks are ahead (or they run with a longer --lease-ms), and a worker whose clock is ahead takes over requests of live workers early",
            workers.join(", ")
        ),
        "run NTP on every worker, and give every worker the same --lease-ms",
    )
}

/// `doctor`: print the checks; an error (exit status 1) if any is not ok.
pub async fn doctor(settings: &ServeSettings, json: bool) -> anyhow::Result<()> {
    let checks = doctor_checks(settings).await;
    let problems = checks.iter().filter(|c| c.status != "ok").count();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"ok": problems == 0, "checks": checks}))?
        );
    } else {
        for c in &checks {
            println!("[{}] {}: {}", c.status, c.check, c.detail);
            if let Some(fix) = &c.fix {
                println!("       fix: {fix}");
            }
        }
    }
    if problems > 0 {
        bail!("{problems} problem(s) found");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn a_store_clock_within_a_second_of_this_host_passes() {
        let (check, skew) = clock_skew(T0, T0 + 4, T0 + 2 + 900, 30_000);
        assert_eq!((check.status, skew), ("ok", 900.0));
        assert!(
            check.detail.contains("+900 ms") && check.detail.contains("± 2 ms"),
            "{}",
            check.detail
        );
    }

    #[test]
    fn a_store_clock_ahead_or_behind_past_the_limit_warns_with_the_fix() {
        for offset in [5_000_i64, -5_000] {
            let server = (T0 as i64 + 1 + offset) as u64;
            let (check, skew) = clock_skew(T0, T0 + 2, server, 30_000);
            assert_eq!((check.status, skew), ("warn", offset as f64), "{offset}");
            assert!(
                check.fix.as_deref().is_some_and(|f| f.contains("NTP")),
                "{check:?}"
            );
        }
    }

    #[test]
    fn a_long_lease_tolerates_a_tenth_of_itself() {
        // A 60 s lease: 5 s of skew is under its tenth (6 s), 7 s is not.
        assert_eq!(clock_skew(T0, T0, T0 + 5_000, 60_000).0.status, "ok");
        assert_eq!(clock_skew(T0, T0, T0 + 7_000, 60_000).0.status, "warn");
    }

    #[test]
    fn a_host_clock_stepping_back_mid_check_does_not_panic() {
        let (check, _) = clock_skew(T0 + 10, T0, T0, 30_000);
        assert_eq!(check.status, "ok");
    }
}

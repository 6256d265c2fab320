//! Store micro-benchmarks through the [`Store`] contract alone, so every backend a URL can
//! name is measured the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durable_mcp_store::{Principal, Store, StreamId, StreamOwner, WriteBatch};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Barrier;

use crate::BenchError;
use crate::load::rate;

/// How many events one replay read asks for: the engine's live tail reads 256 at a time.
pub const REPLAY_BATCH: usize = 256;

/// Events per write batch while a replay stream is filled (not timed).
const FILL_BATCH: usize = 250;

/// Write batches in flight while a replay stream is filled.
const FILL_CONCURRENCY: usize = 4;

/// The principal owning every stream the benchmark creates (all are closed at the end,
/// so retention removes them from a persistent store).
const PRINCIPAL: &str = "durable-mcp-bench";

/// What to measure on one store.
#[derive(Debug, Clone)]
pub struct StoreSpec {
    /// Events each writer appends.
    pub events_per_writer: usize,
    /// Concurrent writers of the "many writers" measurement, each on its own stream.
    pub writers: usize,
    /// Stream lengths whose replay is timed.
    pub replay_sizes: Vec<usize>,
    /// Timed replays per length (the median is reported).
    pub replay_runs: usize,
    /// Stop appending after this long (the result says so).
    pub time_limit: Duration,
}

/// An append-rate measurement.
#[derive(Debug, Clone)]
pub struct AppendResult {
    /// Concurrent writers.
    pub writers: usize,
    /// Events committed in the timed part.
    pub events: usize,
    /// From the first writer's start to the last writer's last commit.
    pub elapsed: Duration,
    /// Whether the time limit cut the measurement short.
    pub truncated: bool,
}

impl AppendResult {
    /// Events committed per second, all writers together.
    pub fn per_second(&self) -> f64 {
        rate(self.events, self.elapsed)
    }
}

/// A replay measurement.
#[derive(Debug, Clone)]
pub struct ReplayResult {
    /// Events in the stream.
    pub events: usize,
    /// Median time to read the whole stream.
    pub median: Duration,
    /// Fastest of the runs.
    pub min: Duration,
    /// How many runs were timed.
    pub runs: usize,
}

/// Everything measured on one store.
#[derive(Debug, Clone)]
pub struct StoreResult {
    /// One writer, one stream.
    pub one_writer: AppendResult,
    /// [`StoreSpec::writers`] writers on distinct streams.
    pub many_writers: AppendResult,
    /// The same writers, each event committed as a one-append [`WriteBatch`] through
    /// [`Store::commit`] (group-committed where the backend does so).
    pub many_writers_batched: AppendResult,
    /// One result per [`StoreSpec::replay_sizes`] entry.
    pub replay: Vec<ReplayResult>,
}

/// A representative event: a progress notification as a tool would send it.
fn payload(seq: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"durable-mcp-bench","progress":{seq},"total":1000000,"message":"step {seq} of a long-running durable-mcp benchmark tool"}}}}"#
    )
}

async fn new_stream(store: &dyn Store) -> Result<StreamId, BenchError> {
    let stream = StreamId::random();
    store
        .create_stream(
            &stream,
            &StreamOwner {
                principal: Principal::new(PRINCIPAL),
                session: None,
            },
        )
        .await?;
    Ok(stream)
}

/// Measure `store`: append rates, then replay times.
///
/// # Errors
/// Any store error fails the measurement.
pub async fn bench_store(
    store: Arc<dyn Store>,
    spec: &StoreSpec,
) -> Result<StoreResult, BenchError> {
    let one_writer = append_rate(store.clone(), 1, spec, Commit::Append).await?;
    let many_writers =
        append_rate(store.clone(), spec.writers.max(1), spec, Commit::Append).await?;
    let many_writers_batched =
        append_rate(store.clone(), spec.writers.max(1), spec, Commit::Batch).await?;
    let mut replay = Vec::with_capacity(spec.replay_sizes.len());
    for &events in &spec.replay_sizes {
        replay.push(
            replay_time(
                store.as_ref(),
                events,
                spec.replay_runs.max(1),
                spec.time_limit,
            )
            .await?,
        );
    }
    Ok(StoreResult {
        one_writer,
        many_writers,
        many_writers_batched,
        replay,
    })
}

/// How the append-rate measurement commits each event.
#[derive(Debug, Clone, Copy)]
enum Commit {
    /// [`Store::append`].
    Append,
    /// [`Store::commit`] of a one-append batch.
    Batch,
}

/// `writers` tasks, each appending to its own stream back to back.
async fn append_rate(
    store: Arc<dyn Store>,
    writers: usize,
    spec: &StoreSpec,
    commit: Commit,
) -> Result<AppendResult, BenchError> {
    let mut streams = Vec::with_capacity(writers);
    for _ in 0..writers {
        streams.push(new_stream(store.as_ref()).await?);
    }
    let barrier = Arc::new(Barrier::new(writers + 1));
    let mut tasks = Vec::with_capacity(writers);
    for stream in streams {
        let (store, barrier) = (store.clone(), barrier.clone());
        let (events, time_limit) = (spec.events_per_writer, spec.time_limit);
        tasks.push(tokio::spawn(async move {
            let template = payload(0);
            barrier.wait().await;
            let started = Instant::now();
            let deadline = started + time_limit;
            let (mut done, mut truncated) = (0, false);
            for _ in 0..events {
                if Instant::now() >= deadline {
                    truncated = true;
                    break;
                }
                match commit {
                    Commit::Append => drop(store.append(&stream, template.clone(), false).await?),
                    Commit::Batch => drop(
                        store
                            .commit(WriteBatch::new().append(stream.clone(), template.clone()))
                            .await?,
                    ),
                }
                done += 1;
            }
            let finished = Instant::now();
            // Close the stream (not timed) so retention can remove it.
            store.append(&stream, String::new(), true).await?;
            Ok::<_, BenchError>((done, started, finished, truncated))
        }));
    }
    barrier.wait().await;
    let (mut events, mut first, mut last, mut truncated) =
        (0, None::<Instant>, None::<Instant>, false);
    for task in tasks {
        let (done, started, finished, cut) =
            task.await.map_err(|e| BenchError::Task(e.to_string()))??;
        events += done;
        first = Some(first.map_or(started, |t| t.min(started)));
        last = Some(last.map_or(finished, |t| t.max(finished)));
        truncated |= cut;
    }
    let elapsed = match (first, last) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    };
    Ok(AppendResult {
        writers,
        events,
        elapsed,
        truncated,
    })
}

/// Fill a closed stream of `events` events (write batches of [`FILL_BATCH`], untimed),
/// then time reading it whole, `runs` times (fewer if they take longer than `time_limit`
/// together, at least one), the way the engine's tail replays a stream to a resuming
/// client.
async fn replay_time(
    store: &dyn Store,
    events: usize,
    runs: usize,
    time_limit: Duration,
) -> Result<ReplayResult, BenchError> {
    let stream = new_stream(store).await?;
    let stream = &stream;
    let batches: Vec<std::ops::Range<usize>> = (1..events)
        .step_by(FILL_BATCH)
        .map(|start| start..(start + FILL_BATCH).min(events))
        .collect();
    futures::stream::iter(batches)
        .map(|range| async move {
            let batch = range.fold(WriteBatch::new(), |batch, seq| {
                batch.append(stream.clone(), payload(seq))
            });
            store.commit(batch).await
        })
        .buffer_unordered(FILL_CONCURRENCY)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    store.append(stream, payload(events), true).await?;

    let mut times = Vec::with_capacity(runs);
    let deadline = Instant::now() + time_limit;
    for _ in 0..runs {
        if !times.is_empty() && Instant::now() >= deadline {
            break;
        }
        let started = Instant::now();
        let (mut after, mut read_count) = (0, 0);
        loop {
            let read = store.read_after(stream, after, REPLAY_BATCH).await?;
            read_count += read.events.len();
            if let Some(last) = read.events.last() {
                after = last.id.seq;
            }
            if read.finished || read.events.is_empty() {
                break;
            }
        }
        times.push(started.elapsed());
        if read_count != events.max(1) {
            return Err(BenchError::Check(format!(
                "replayed {read_count} events of {events}"
            )));
        }
    }
    times.sort_unstable();
    Ok(ReplayResult {
        events,
        median: times[times.len() / 2],
        min: times[0],
        runs: times.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_store_is_measured_end_to_end() {
        let store: Arc<dyn Store> = Arc::new(durable_mcp::store::MemoryStore::new());
        let spec = StoreSpec {
            events_per_writer: 50,
            writers: 4,
            replay_sizes: vec![1, 300],
            replay_runs: 3,
            time_limit: Duration::from_secs(10),
        };
        let result = bench_store(store, &spec).await.expect("bench");
        assert_eq!(result.one_writer.events, 50);
        assert_eq!(result.many_writers.events, 200);
        assert_eq!(result.many_writers_batched.events, 200);
        assert_eq!(result.replay.len(), 2);
        assert_eq!(result.replay[1].events, 300);
    }
}

//! What idle sessions cost a worker: its resident memory (`VmRSS`) with 0, 1,000 and
//! 10,000 sessions that were started with `initialize` and then left alone.

use std::net::SocketAddr;
use std::time::Duration;

use crate::BenchError;
use crate::client::{Era, McpClient};

/// Connections that open the sessions, each one `initialize` after another.
const OPENERS: usize = 8;

/// How long the server is left alone before its memory is read: past the window in which
/// it still serves the last sessions' `notifications/initialized`
/// ([`durable_mcp_handler::NOTIFY_WINDOW`]), so what is read is what idle sessions cost,
/// not the tail of the burst that opened them.
const SETTLE: Duration = Duration::from_millis(1_500);

/// One server's resident memory at each session count.
#[derive(Debug, Clone)]
pub struct GrowthRow {
    /// The server's label.
    pub server: String,
    /// `(idle sessions, VmRSS in KiB)`, in the order measured.
    pub rss_kib: Vec<(usize, u64)>,
}

impl GrowthRow {
    /// KiB per session between the first and the last point (none with a single point).
    pub fn kib_per_session(&self) -> Option<f64> {
        let (&(from_sessions, from_kib), &(to_sessions, to_kib)) =
            (self.rss_kib.first()?, self.rss_kib.last()?);
        let sessions = to_sessions.checked_sub(from_sessions).filter(|n| *n > 0)?;
        Some((to_kib as f64 - from_kib as f64) / sessions as f64)
    }
}

/// Open `count` more legacy sessions on the server at `addr` (`initialize` and
/// `notifications/initialized`, nothing after), over [`OPENERS`] connections.
///
/// # Errors
/// A session could not be started.
pub(crate) async fn open_sessions(
    addr: SocketAddr,
    path: &str,
    count: usize,
) -> Result<(), BenchError> {
    let mut tasks = Vec::with_capacity(OPENERS);
    for opener in 0..OPENERS.min(count) {
        // Spread `count` over the openers: the first `count % OPENERS` get one more.
        let share = count / OPENERS + usize::from(opener < count % OPENERS);
        let path = path.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut client = McpClient::connect(addr, &path, Era::Legacy).await?;
            for _ in 0..share {
                client.initialize().await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    let mut failure = None;
    for task in tasks {
        if let Err(error) = task
            .await
            .map_err(|e| BenchError::Task(e.to_string()))
            .and_then(|outcome| outcome)
        {
            failure.get_or_insert(error);
        }
    }
    failure.map_or(Ok(()), Err)
}

/// Let the server settle before its memory is read.
pub(crate) async fn settle() {
    tokio::time::sleep(SETTLE).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_after_the_last_sessions_notification_window() {
        // Read sooner, the worker still runs the rmcp loops of the last sessions'
        // `notifications/initialized` (some ten KiB each): live memory of a burst, not of
        // idle sessions.
        assert!(
            SETTLE > durable_mcp_handler::NOTIFY_WINDOW,
            "settle {SETTLE:?} is within the notify window"
        );
    }

    #[test]
    fn per_session_cost_is_the_slope_between_the_ends() {
        let row = GrowthRow {
            server: "x".into(),
            rss_kib: vec![(0, 10_000), (1_000, 11_000), (10_000, 30_000)],
        };
        assert_eq!(row.kib_per_session(), Some(2.0));
        assert_eq!(
            GrowthRow {
                server: "x".into(),
                rss_kib: vec![(0, 1)]
            }
            .kib_per_session(),
            None
        );
    }
}

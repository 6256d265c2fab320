//! What a re-run must not send again (D7): the notifications an earlier run of the same
//! request already committed to its stream.
//!
//! A recovered request runs its handler again from the top. The durable context's own
//! progress and log calls are numbered and marked (`<run>/e/<n>`), so a re-run skips them;
//! an ordinary handler's notifications (sent through rmcp's peer) carry no such mark, and
//! the re-run would repeat them on the same stream: progress going backwards (the
//! protocol wants it to increase with each notification), log lines twice.
//!
//! So a re-run reads its stream once, before its handler starts, and learns what is
//! already there ([`AlreadySent::read`]); first runs read nothing and pay nothing. Then,
//! for every notification the re-run sends to that stream, whichever way it is sent:
//!
//! - `notifications/progress` is dropped unless its value is above the highest committed
//!   so far for its progress token (by any run, this one included), so the progress a
//!   client sees for a token strictly increases;
//! - any other notification identical (same method and parameters) to one already
//!   committed is dropped, as many times as it was committed: a log line the earlier run
//!   sent is not sent again, one it never sent is.

use std::collections::HashMap;
use std::sync::Mutex;

use durable_mcp_protocol::jsonrpc::Message;
use durable_mcp_store::{Store, StoreError, StreamId};
use serde_json::Value;

use crate::EngineError;
use crate::records::canonical;

/// The method whose notifications carry a progress value per progress token.
const PROGRESS: &str = durable_mcp_protocol::methods::NOTIFICATION_PROGRESS;

/// The notifications already committed to a re-run's stream by earlier runs.
#[derive(Debug)]
pub struct AlreadySent {
    /// The stream it was read from: messages for another stream (a task's new stream)
    /// are never suppressed.
    stream: StreamId,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// The highest progress committed per progress token (its canonical JSON).
    progress: HashMap<String, f64>,
    /// Every other notification committed before the re-run (canonical JSON), with how
    /// many times it was; each match consumes one.
    others: HashMap<String, usize>,
}

/// A progress notification's token (canonical JSON) and value.
fn progress_of(message: Message<'_>) -> Option<(String, f64)> {
    Some((
        canonical(message.param("progressToken")?),
        message.param("progress")?.as_f64()?,
    ))
}

impl AlreadySent {
    /// What `messages` (a stream's committed messages, in order) already sent.
    pub fn from_messages(stream: StreamId, messages: impl IntoIterator<Item = Value>) -> Self {
        let mut seen = Seen::default();
        for message in messages {
            let Some(read) = Message::of(&message) else {
                continue;
            };
            let Some(method) = read.method() else {
                continue;
            };
            if read.has_id() {
                // A server-to-client request: not a notification.
                continue;
            }
            match (method, progress_of(read)) {
                (PROGRESS, Some((token, value))) => {
                    let highest = seen.progress.entry(token).or_insert(value);
                    *highest = highest.max(value);
                }
                _ => *seen.others.entry(canonical(&message)).or_default() += 1,
            }
        }
        Self {
            stream,
            seen: Mutex::new(seen),
        }
    }

    /// Read `stream` once, from its start (from its oldest retained event, once retention
    /// pruned its start: what a client could still resume).
    pub async fn read(store: &dyn Store, stream: &StreamId) -> Result<Self, EngineError> {
        const PAGE: usize = 1_000;
        let mut after = 0;
        let mut messages = Vec::new();
        loop {
            let read = match store.read_after(stream, after, PAGE).await {
                Ok(read) => read,
                Err(StoreError::NotFound { .. }) => break,
                Err(StoreError::Pruned {
                    oldest_retained, ..
                }) => {
                    after = oldest_retained.saturating_sub(1);
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let Some(end) = read.events.last().map(|e| e.id.seq) else {
                break;
            };
            messages.extend(
                read.events
                    .iter()
                    .filter_map(|event| serde_json::from_str::<Value>(&event.data).ok()),
            );
            after = end;
        }
        let already = Self::from_messages(stream.clone(), messages);
        tracing::debug!(%stream, ?already, "re-run: notifications already on the stream");
        Ok(already)
    }

    /// Whether notification `message` of `method`, about to be committed to `stream`, was
    /// already sent there (and must be dropped). A progress notification that goes on
    /// raises its token's mark.
    pub fn suppress(&self, stream: &StreamId, method: &str, message: &Value) -> bool {
        if *stream != self.stream {
            return false;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if method == PROGRESS
            && let Some((token, value)) = Message::of(message).and_then(progress_of)
        {
            return match seen.progress.get_mut(&token) {
                Some(highest) if value <= *highest => true,
                Some(highest) => {
                    *highest = value;
                    false
                }
                None => {
                    seen.progress.insert(token, value);
                    false
                }
            };
        }
        match seen.others.get_mut(&canonical(message)) {
            Some(count) if *count > 0 => {
                *count -= 1;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn progress(token: Value, value: f64) -> Value {
        json!({"jsonrpc": "2.0", "method": PROGRESS, "params": {"progressToken": token, "progress": value, "total": 40.0}})
    }

    fn log(event: u64) -> Value {
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": {"event": event}}})
    }

    #[test]
    fn progress_up_to_the_committed_mark_is_suppressed_then_goes_on() {
        let stream = StreamId::random();
        let committed = (1..=10).map(|n| progress(json!("p"), f64::from(n)));
        let already = AlreadySent::from_messages(stream.clone(), committed);
        let sent: Vec<u32> = (1..=12)
            .filter(|n| !already.suppress(&stream, PROGRESS, &progress(json!("p"), f64::from(*n))))
            .collect();
        assert_eq!(sent, vec![11, 12]);
        // The mark follows what this run commits too: never backwards.
        assert!(already.suppress(&stream, PROGRESS, &progress(json!("p"), 11.5)));
        // Another token has its own mark.
        assert!(!already.suppress(&stream, PROGRESS, &progress(json!(7), 1.0)));
    }

    #[test]
    fn a_committed_log_line_is_suppressed_once_per_commit() {
        let stream = StreamId::random();
        let already = AlreadySent::from_messages(
            stream.clone(),
            [
                log(1),
                log(2),
                log(2),
                json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
            ],
        );
        let method = "notifications/message";
        assert!(already.suppress(&stream, method, &log(1)));
        assert!(
            !already.suppress(&stream, method, &log(1)),
            "sent once before, so once now"
        );
        assert!(already.suppress(&stream, method, &log(2)));
        assert!(already.suppress(&stream, method, &log(2)));
        assert!(!already.suppress(&stream, method, &log(2)));
        assert!(
            !already.suppress(&stream, method, &log(3)),
            "never sent: sent now"
        );
    }

    #[test]
    fn another_stream_is_never_suppressed() {
        let stream = StreamId::random();
        let already = AlreadySent::from_messages(stream, [log(1), progress(json!("p"), 3.0)]);
        let task_stream = StreamId::random();
        assert!(!already.suppress(&task_stream, "notifications/message", &log(1)));
        assert!(!already.suppress(&task_stream, PROGRESS, &progress(json!("p"), 1.0)));
    }
}

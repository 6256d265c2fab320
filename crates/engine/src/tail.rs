//! Live tails of a stream's log: replay what is committed, then follow new commits, from
//! whichever worker they come.

use std::sync::Arc;

use durable_mcp_store::{Store, StoreError, StoredEvent, StreamId};
use futures::{Stream, StreamExt};

/// How many events one read fetches.
const BATCH: usize = 256;

/// Events of `stream` after sequence `after`, in order, ending when the stream is finished
/// (its final event delivered) or gone. Every item was committed before it is yielded (D1).
pub fn tail(
    store: Arc<dyn Store>,
    stream: StreamId,
    after: u64,
) -> impl Stream<Item = Result<StoredEvent, StoreError>> + Send + 'static {
    enum State {
        Start,
        Reading(durable_mcp_store::WakeUps),
        Done,
    }
    struct Cursor {
        store: Arc<dyn Store>,
        stream: StreamId,
        after: u64,
        buffered: std::collections::VecDeque<StoredEvent>,
        state: State,
    }
    let cursor = Cursor { store, stream, after, buffered: Default::default(), state: State::Start };
    futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(event) = c.buffered.pop_front() {
                c.after = event.id.seq;
                return Some((Ok(event), c));
            }
            let mut wake = match std::mem::replace(&mut c.state, State::Done) {
                State::Done => return None,
                State::Start => match c.store.watch(&c.stream).await {
                    Ok(w) => w,
                    Err(e) => return Some((Err(e), c)),
                },
                State::Reading(w) => w,
            };
            loop {
                match c.store.read_after(&c.stream, c.after, BATCH).await {
                    Ok(read) => {
                        let finished = read.finished;
                        let empty = read.events.is_empty();
                        c.buffered.extend(read.events);
                        if finished {
                            c.state = State::Done;
                            break;
                        }
                        if !empty {
                            c.state = State::Reading(wake);
                            break;
                        }
                    }
                    Err(e) => return Some((Err(e), c)),
                }
                if wake.next().await.is_none() {
                    // The watch ended (stream gone): one last read decides.
                    match c.store.read_after(&c.stream, c.after, BATCH).await {
                        Ok(read) => c.buffered.extend(read.events),
                        Err(StoreError::NotFound { .. }) => {}
                        Err(e) => return Some((Err(e), c)),
                    }
                    c.state = State::Done;
                    break;
                }
            }
        }
    })
}

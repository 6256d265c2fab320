//! Write batches ([`Store::commit`](durable_mcp_store::Store::commit)): one Lua script
//! (`scripts::BATCH`), so Redis runs the whole batch without interleaving any other
//! command.
//!
//! # Durability
//! In plain words: all of the batch or nothing, seen by every reader at once.
//!
//! Stated more precisely: the script first checks every op, in order, against the state the
//! batch's earlier ops would leave, without writing; a refused op ends it before its first
//! write, so nothing is written, and under `maxmemory` Redis refuses only a script's first
//! write, so an out-of-memory batch writes nothing either (D15). Only then does it apply
//! every op. A prefix delete in a batch deletes every matching record in the one script
//! (outside batches, `delete_records` works in slices of 256). Each stream the batch
//! appends to or closes is woken once, by one `PUBLISH` in the script and locally after it.

use durable_mcp_store::{
    BatchOp, BatchOutcome, EventId, OpOutcome, StoreError, StoreResult, WriteBatch, now_ms,
    op_failed,
};

use crate::error::{bad_reply, int};
use crate::records::{lex_range, script_args};
use crate::streams::append_ttls;
use crate::{Shared, scripts};

/// Commit `batch` in one script.
pub(crate) async fn commit(shared: &Shared, batch: WriteBatch) -> StoreResult<BatchOutcome> {
    let now = now_ms();
    let (idle, closed, sweep) = append_ttls(shared, now);
    let mut call = shared.script(&scripts::BATCH);
    let inline = crate::layout::Layout::inline_arg(shared, now).await;
    call.arg(now)
        .arg(idle)
        .arg(closed)
        .arg(shared.options.max_events_per_stream.unwrap_or(0))
        .arg(sweep)
        .arg(inline);
    for op in batch.ops() {
        let fields: [Vec<u8>; 6] = match op {
            BatchOp::CreateStream { id, owner } => fields(
                "c",
                [
                    id.as_str(),
                    owner.principal.as_str(),
                    owner.session.as_ref().map_or("", |s| s.as_str()),
                    "",
                    "",
                ],
            ),
            BatchOp::Append { stream, data } => fields("a", [stream.as_str(), data, "", "", ""]),
            BatchOp::Close { stream } => fields("x", [stream.as_str(), "", "", "", ""]),
            BatchOp::PutRecord {
                kind,
                key,
                value,
                expires_at_ms,
                expect,
            } => {
                let (expires_at, expected) = script_args(*expires_at_ms, *expect);
                fields("p", [kind.as_str(), key, value, &expires_at, &expected])
            }
            BatchOp::DeleteRecord { kind, key, version } => {
                fields("d", [kind.as_str(), key, &version.to_string(), "", ""])
            }
            BatchOp::DeleteRecords { kind, prefix } => {
                let (min, max) = lex_range(prefix);
                let mut out = fields("D", [kind.as_str(), prefix, "", "", ""]);
                out[3] = min;
                out[4] = max;
                out
            }
        };
        for field in fields {
            call.arg(field);
        }
    }
    let reply: redis::Value = shared.write(&call).await?;
    let redis::Value::Array(items) = &reply else {
        return Err(bad_reply("batch", &reply));
    };
    match items.first().and_then(int) {
        Some(0) if items.len() == batch.len() + 1 => {}
        Some(1) => return Err(refusal(&batch, items).unwrap_or_else(|| bad_reply("batch", &reply))),
        _ => return Err(bad_reply("batch", &reply)),
    }
    let mut outcome = BatchOutcome {
        ops: Vec::with_capacity(batch.len()),
    };
    for (op, item) in batch.ops().iter().zip(&items[1..]) {
        let n = int(item)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| bad_reply("batch", &reply))?;
        outcome.ops.push(match op {
            BatchOp::CreateStream { .. } => OpOutcome::Created,
            BatchOp::Append { stream, .. } => OpOutcome::Appended(EventId::new(stream.clone(), n)),
            BatchOp::Close { .. } => OpOutcome::Closed,
            BatchOp::PutRecord { .. } => OpOutcome::Put(n),
            BatchOp::DeleteRecord { .. } | BatchOp::DeleteRecords { .. } => OpOutcome::Deleted(n),
        });
    }
    // Local tails need not wait for the pub/sub round trip.
    for stream in batch.woken_streams() {
        shared.watchers.wake(&stream);
    }
    Ok(outcome)
}

/// An op's code and five arguments, as the script takes them.
fn fields(code: &str, args: [&str; 5]) -> [Vec<u8>; 6] {
    let [a, b, c, d, e] = args.map(|s| s.as_bytes().to_vec());
    [code.as_bytes().to_vec(), a, b, c, d, e]
}

/// The error of a `{1, index, reason}` reply.
fn refusal(batch: &WriteBatch, items: &[redis::Value]) -> Option<StoreError> {
    let index = usize::try_from(items.get(1).and_then(int)?).ok()?;
    let op = batch.ops().get(index)?;
    let reason = crate::error::text(items.get(2)?)?;
    let error = match (reason.as_str(), op) {
        ("stream", _) => StoreError::not_found("stream"),
        ("session", _) => StoreError::not_found("session"),
        ("closed", BatchOp::Append { stream, .. } | BatchOp::Close { stream }) => {
            StoreError::StreamClosed {
                stream: stream.to_string(),
            }
        }
        ("exists", _) => StoreError::Conflict { what: "stream" },
        ("conflict", _) => StoreError::Conflict { what: "record" },
        _ => return None,
    };
    Some(op_failed(index, op, error))
}

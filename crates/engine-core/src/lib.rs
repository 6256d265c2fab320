//! The durable-mcp engine's lower layers, below the request path of
//! [`durable-mcp-engine`](https://docs.rs/durable-mcp-engine): every record and its key, the
//! journal of runs (leases, heartbeats, take-overs), tasks, the `requestState` keys, the
//! door out that commits events and hands them to this worker's tails, and the metrics and
//! traces they report.
//!
//! This crate does not depend on the engine: nothing here can call the request path, and
//! the compiler says so. A module here that names the engine does not build:
//!
//! ```compile_fail,E0432
//! // A layer below the request path reaching up to it: the engine is not a dependency.
//! use durable_mcp_engine::Engine;
//! ```
//!
//! # Layers
//!
//! Inside this crate the layers are checked by the engine's `layers` test; a module uses
//! its own layer and those below it:
//!
//! | layer | modules | what it owns |
//! |---|---|---|
//! | 0 records | `records` (`records::key`), `error`, `metrics`, `traces`, `semconv`, `limits`, `sync` | every record, its key and its encoding; the errors; the metrics, the store latency decorator, spans and trace contexts; the limits per principal |
//! | 1 context | `hub`, `events`, `caller`, `state`, `keys`, `rerun` | the door out ([`events::Events`]) and this worker's hand-off to its tails; who sent a request; durable state handles; the `requestState` key ring ([`keys::Keys`]); what a re-run already sent |
//! | 2 journal | `journal` | [`journal::Journal`]: run records, leases, heartbeats, taking over runs whose lease ran out, cancellation marks, sealed run state |
//! | 3 tasks | `tasks` | [`tasks::Tasks`]: task records, their status changes and notifications, `tasks/*` answers |
//!
//! Each component ([`events::Events`], [`keys::Keys`], [`journal::Journal`],
//! [`tasks::Tasks`]) owns its state and is cheap to clone; the engine composes them.

pub mod caller;
pub mod error;
pub mod events;
pub mod hub;
pub mod journal;
pub mod keys;
pub mod limits;
pub mod metrics;
pub mod records;
pub mod rerun;
pub mod semconv;
pub mod state;
pub mod sync;
pub mod tasks;
pub mod traces;

pub use caller::Caller;
pub use durable_mcp_protocol::jsonrpc::Request;
pub use error::EngineError;
pub use records::{Era, RecordError, is_credential};

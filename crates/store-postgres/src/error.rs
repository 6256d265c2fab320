//! Mapping PostgreSQL errors into the store's classified errors (D15).
//!
//! The rule: anything that may succeed if tried again (the connection broke, the server is
//! starting or shutting down, a serialization failure or deadlock, a timeout, resources
//! exhausted) is [`StoreError::Unavailable`], which callers answer with a 503. Errors that
//! retrying cannot fix are classified as what they are: a schema this build does not know
//! or a rejected login is [`StoreError::Incompatible`], bad stored data is
//! [`StoreError::Corrupt`].

use std::fmt;

use durable_mcp_store::StoreError;
use tokio_postgres::error::SqlState;

/// A PostgreSQL failure, displayed with its whole cause chain (tokio-postgres' own
/// `Display` says only "db error" or "error connecting to server").
#[derive(Debug)]
pub struct PgFailure {
    message: String,
}

impl fmt::Display for PgFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PgFailure {}

/// `error` with every cause appended: `db error: ERROR: relation "x" does not exist`.
pub(crate) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Classify a tokio-postgres error.
pub(crate) fn from_pg(error: tokio_postgres::Error) -> StoreError {
    let message = describe(&error);
    classify_error(&error, message)
}

/// Classify a failure to connect to `target` (`host:port/database`), saying where:
/// "not reachable" when it may heal by itself, "refused the connection" when it will not
/// (a rejected login, a missing database).
pub(crate) fn from_connect(target: &str, error: tokio_postgres::Error) -> StoreError {
    let cause = describe(&error);
    match classify_error(&error, String::new()) {
        StoreError::Unavailable(_) => unavailable(format!("PostgreSQL not reachable at {target}: {cause}")),
        _ => StoreError::Incompatible(format!("PostgreSQL at {target} refused the connection: {cause}")),
    }
}

fn classify_error(error: &tokio_postgres::Error, message: String) -> StoreError {
    let Some(code) = error.code() else {
        // No SQLSTATE: the failure is in the connection (I/O, closed, timeout, TLS,
        // protocol) or in converting a value. Conversions are a decoding problem, a
        // rejected configuration or login will not heal by retrying; every other case may
        // heal by reconnecting.
        let text = error.to_string();
        if text.starts_with("error deserializing column") {
            return StoreError::Corrupt(message);
        }
        if text.starts_with("authentication error") || text.starts_with("invalid configuration") {
            return StoreError::Incompatible(message);
        }
        return unavailable(message);
    };
    classify(code, message)
}

fn classify(code: &SqlState, message: String) -> StoreError {
    let class = code.code().get(..2).unwrap_or("");
    match class {
        // Connection exception, transaction rollback (serialization failure, deadlock),
        // insufficient resources, operator intervention (shutdown, query canceled by a
        // timeout), system I/O error, lock not available, read-only after a failover.
        "08" | "40" | "53" | "57" | "58" => unavailable(message),
        _ if *code == SqlState::LOCK_NOT_AVAILABLE || *code == SqlState::READ_ONLY_SQL_TRANSACTION => unavailable(message),
        // Rejected login, missing database, schema objects this build does not expect.
        "28" | "3D" | "3F" | "42" => StoreError::Incompatible(message),
        // Bad data or broken invariants: integrity violations, data exceptions, internal.
        "22" | "23" | "XX" => StoreError::Corrupt(message),
        _ => unavailable(message),
    }
}

/// A transient failure with `message`.
pub(crate) fn unavailable(message: impl Into<String>) -> StoreError {
    StoreError::Unavailable(Box::new(PgFailure { message: message.into() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_store::StoreErrorKind;

    #[test]
    fn d15_sqlstates_are_classified() {
        let kind = |code: &SqlState| classify(code, String::new()).kind();
        assert_eq!(kind(&SqlState::T_R_SERIALIZATION_FAILURE), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::T_R_DEADLOCK_DETECTED), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::ADMIN_SHUTDOWN), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::CANNOT_CONNECT_NOW), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::QUERY_CANCELED), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::CONNECTION_FAILURE), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::TOO_MANY_CONNECTIONS), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::READ_ONLY_SQL_TRANSACTION), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::UNDEFINED_TABLE), StoreErrorKind::Fatal);
        assert_eq!(kind(&SqlState::INVALID_PASSWORD), StoreErrorKind::Fatal);
        assert_eq!(kind(&SqlState::UNIQUE_VIOLATION), StoreErrorKind::Fatal);
    }
}

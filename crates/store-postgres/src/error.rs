//! Mapping PostgreSQL errors into the store's classified errors (D15).
//!
//! The rule: anything that may succeed if tried again (the connection broke, the server is
//! starting or shutting down, a serialization failure or deadlock, a timeout, resources
//! exhausted) is [`StoreError::Unavailable`], which callers answer with a 503. Errors that
//! retrying cannot fix are classified as what they are: a value the server refuses as given
//! (SQLSTATE classes 22 and 54, such as `54000` for a key too long for its index) is
//! [`StoreError::Refused`], answered with a client error; a schema this build does not know
//! or a rejected login is [`StoreError::Incompatible`], broken invariants are
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
    if let Some(tls) = tls_failure(&error) {
        return match tls.permanent {
            true => {
                StoreError::Incompatible(format!("TLS to PostgreSQL at {target} failed: {tls}"))
            }
            false => unavailable(format!("PostgreSQL not reachable at {target}: {tls}")),
        };
    }
    match classify_error(&error, String::new()) {
        StoreError::Unavailable(_) => {
            unavailable(format!("PostgreSQL not reachable at {target}: {cause}"))
        }
        _ => StoreError::Incompatible(format!(
            "PostgreSQL at {target} refused the connection: {cause}"
        )),
    }
}

/// The TLS failure behind `error`, if a handshake failed.
fn tls_failure(error: &tokio_postgres::Error) -> Option<&crate::tls::TlsFailure> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(tls) = cause.downcast_ref::<crate::tls::TlsFailure>() {
            return Some(tls);
        }
        source = cause.source();
    }
    None
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

/// Classify a failure the server reported as SQLSTATE `code` with `message`, outside a
/// statement's own error (a refusal `dmcp_commit` caught for one job).
pub(crate) fn from_sqlstate(code: &str, message: String) -> StoreError {
    classify(&SqlState::from_code(code), message)
}

fn classify(code: &SqlState, message: String) -> StoreError {
    let class = code.code().get(..2).unwrap_or("");
    match class {
        // Connection exception, transaction rollback (serialization failure, deadlock),
        // insufficient resources, operator intervention (shutdown, query canceled by a
        // timeout), system I/O error, lock not available, read-only after a failover.
        "08" | "40" | "53" | "57" | "58" => unavailable(message),
        _ if *code == SqlState::LOCK_NOT_AVAILABLE
            || *code == SqlState::READ_ONLY_SQL_TRANSACTION =>
        {
            unavailable(message)
        }
        // Rejected login, missing database, schema objects this build does not expect.
        "28" | "3D" | "3F" | "42" => StoreError::Incompatible(message),
        // A value the server refuses as given: data exceptions (out of range, a character
        // text cannot hold) and program limits (an index entry too long, too many
        // arguments). The server is healthy; the same write will never succeed.
        "22" | "54" => refused(message),
        // Broken invariants: integrity violations, internal errors.
        "23" | "XX" => StoreError::Corrupt(message),
        _ => unavailable(message),
    }
}

/// A value the server refused, with `message`.
fn refused(message: String) -> StoreError {
    StoreError::Refused(Box::new(PgFailure { message }))
}

/// How one op of a write, run as a single statement, did not happen.
#[derive(Debug)]
pub(crate) enum StepError {
    /// Refused by what the statement found (a failed condition, a closed or unknown
    /// stream): it wrote nothing, and a transaction it ran in goes on.
    Refused(StoreError),
    /// The statement failed on the server, classified (a refusal such as a missing
    /// session or a value the server refuses, or a failure such as a deadlock): a
    /// transaction it ran in is aborted and can no longer commit.
    Failed(StoreError),
    /// Anything else (the connection broke, an answer did not decode): whether the
    /// statement took effect is not known.
    Broken(StoreError),
}

impl StepError {
    /// A statement's error: [`StepError::Failed`] if the server answered with one (it has
    /// a SQLSTATE), else [`StepError::Broken`].
    pub(crate) fn statement(error: tokio_postgres::Error) -> Self {
        if error.code().is_some() {
            Self::Failed(from_pg(error))
        } else {
            Self::Broken(from_pg(error))
        }
    }

    /// A row of a statement that succeeded did not decode.
    pub(crate) fn decoding(error: tokio_postgres::Error) -> Self {
        Self::Broken(from_pg(error))
    }

    /// The error, whichever way the op did not happen.
    pub(crate) fn into_error(self) -> StoreError {
        match self {
            Self::Refused(error) | Self::Failed(error) | Self::Broken(error) => error,
        }
    }
}

/// A transient failure with `message`.
pub(crate) fn unavailable(message: impl Into<String>) -> StoreError {
    StoreError::Unavailable(Box::new(PgFailure {
        message: message.into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_store::StoreErrorKind;

    #[test]
    fn d15_sqlstates_are_classified() {
        let kind = |code: &SqlState| classify(code, String::new()).kind();
        assert_eq!(
            kind(&SqlState::T_R_SERIALIZATION_FAILURE),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            kind(&SqlState::T_R_DEADLOCK_DETECTED),
            StoreErrorKind::Unavailable
        );
        assert_eq!(kind(&SqlState::ADMIN_SHUTDOWN), StoreErrorKind::Unavailable);
        assert_eq!(
            kind(&SqlState::CANNOT_CONNECT_NOW),
            StoreErrorKind::Unavailable
        );
        assert_eq!(kind(&SqlState::QUERY_CANCELED), StoreErrorKind::Unavailable);
        assert_eq!(
            kind(&SqlState::CONNECTION_FAILURE),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            kind(&SqlState::TOO_MANY_CONNECTIONS),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            kind(&SqlState::READ_ONLY_SQL_TRANSACTION),
            StoreErrorKind::Unavailable
        );
        assert_eq!(kind(&SqlState::UNDEFINED_TABLE), StoreErrorKind::Fatal);
        assert_eq!(kind(&SqlState::INVALID_PASSWORD), StoreErrorKind::Fatal);
        assert_eq!(kind(&SqlState::UNIQUE_VIOLATION), StoreErrorKind::Fatal);
    }

    /// Issue 9: a key too long for the primary-key index (54000) answered 503 "the store
    /// cannot be reached". A value the server refuses is not an outage.
    #[test]
    fn refused_values_are_not_outages() {
        let kind = |code: &SqlState| classify(code, String::new()).kind();
        assert_eq!(
            kind(&SqlState::PROGRAM_LIMIT_EXCEEDED),
            StoreErrorKind::Refused,
            "index row size exceeds btree maximum"
        );
        assert_eq!(
            kind(&SqlState::STATEMENT_TOO_COMPLEX),
            StoreErrorKind::Refused
        );
        assert_eq!(kind(&SqlState::TOO_MANY_ARGUMENTS), StoreErrorKind::Refused);
        assert_eq!(
            kind(&SqlState::CHARACTER_NOT_IN_REPERTOIRE),
            StoreErrorKind::Refused,
            "a NUL in a text value"
        );
        assert_eq!(
            kind(&SqlState::NUMERIC_VALUE_OUT_OF_RANGE),
            StoreErrorKind::Refused
        );
        assert_eq!(
            kind(&SqlState::STRING_DATA_RIGHT_TRUNCATION),
            StoreErrorKind::Refused
        );
        // Outages stay outages.
        assert_eq!(
            kind(&SqlState::CONNECTION_EXCEPTION),
            StoreErrorKind::Unavailable
        );
        assert_eq!(kind(&SqlState::DISK_FULL), StoreErrorKind::Unavailable);
        assert_eq!(kind(&SqlState::OUT_OF_MEMORY), StoreErrorKind::Unavailable);
    }

    /// A connection that cannot be made carries no SQLSTATE: it is an outage (D15).
    #[tokio::test]
    async fn d15_connection_errors_are_unavailable() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let config = format!("host=127.0.0.1 port={port} user=postgres connect_timeout=2");
        let error = tokio_postgres::connect(&config, tokio_postgres::NoTls)
            .await
            .err()
            .expect("nothing listens there");
        assert_eq!(from_pg(error).kind(), StoreErrorKind::Unavailable);
    }
}

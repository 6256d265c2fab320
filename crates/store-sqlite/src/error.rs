//! Mapping SQLite errors into the store's classified errors.

use durable_mcp_store::StoreError;

/// Classify a SQLite error:
///
/// - a value SQLite refuses as given (`SQLITE_TOOBIG`: longer than its length limit;
///   `SQLITE_RANGE`, `SQLITE_MISMATCH`; a Rust value with no SQLite representation, such
///   as an integer beyond `i64`) is [`StoreError::Refused`]: the database is healthy and the
///   same write will never succeed;
/// - corruption is [`StoreError::Corrupt`];
/// - the rest (busy, locked, I/O, a full disk) may heal: [`StoreError::Unavailable`] (D15).
pub fn from_sqlite(error: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    if matches!(error, rusqlite::Error::ToSqlConversionFailure(_)) {
        return StoreError::Refused(Box::new(error));
    }
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            StoreError::Corrupt(error.to_string())
        }
        Some(ErrorCode::TooBig | ErrorCode::ParameterOutOfRange | ErrorCode::TypeMismatch) => {
            StoreError::Refused(Box::new(error))
        }
        _ => StoreError::Unavailable(Box::new(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_store::StoreErrorKind;

    fn failure(code: std::os::raw::c_int) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn refused_values_are_not_outages() {
        assert_eq!(
            from_sqlite(failure(rusqlite::ffi::SQLITE_TOOBIG)).kind(),
            StoreErrorKind::Refused
        );
        assert_eq!(
            from_sqlite(failure(rusqlite::ffi::SQLITE_MISMATCH)).kind(),
            StoreErrorKind::Refused
        );
        let unrepresentable = rusqlite::Error::ToSqlConversionFailure("u64 beyond i64".into());
        assert_eq!(from_sqlite(unrepresentable).kind(), StoreErrorKind::Refused);
        assert_eq!(
            from_sqlite(failure(rusqlite::ffi::SQLITE_BUSY)).kind(),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            from_sqlite(failure(rusqlite::ffi::SQLITE_FULL)).kind(),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            from_sqlite(failure(rusqlite::ffi::SQLITE_CORRUPT)).kind(),
            StoreErrorKind::Fatal
        );
    }
}

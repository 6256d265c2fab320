//! Mapping SQLite errors into the store's classified errors.

use durable_mcp_store::StoreError;

/// Classify a SQLite error: busy/locked/IO are transient (`Unavailable`), corruption and
/// the rest are reported as they are.
pub fn from_sqlite(error: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt(error.to_string()),
        _ => StoreError::Unavailable(Box::new(error)),
    }
}

//! Mapping Redis errors into the store's classified errors.

use durable_mcp_store::StoreError;
use redis::{ErrorKind, RedisError};

/// Classify a Redis error.
///
/// - Replies we cannot decode, and `WRONGTYPE` (a key under our prefix holds something we
///   did not write), are [`StoreError::Corrupt`].
/// - A client configuration the driver refuses (a bad URL), and a TLS handshake that failed
///   on a certificate (the server's is not trusted or not for its name, or the server
///   refused ours), are [`StoreError::Incompatible`]: retrying will not fix them.
/// - A value the server refuses as given (longer than `proto-max-bulk-len`) is
///   [`StoreError::Refused`]: the server is healthy and the same write will never succeed.
/// - Everything else is [`StoreError::Unavailable`] (D15): refused or dropped connections,
///   timeouts, `LOADING`, `READONLY` after a failover, `OOM` (memory may be freed), `BUSY`,
///   authentication. The caller answers 503; the connection manager reconnects by itself.
pub(crate) fn from_redis(error: RedisError) -> StoreError {
    if let Some(tls) = certificate_failure(&error) {
        return StoreError::Incompatible(format!("TLS to Redis failed: {tls}"));
    }
    match error.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => {
            StoreError::Corrupt(error.to_string())
        }
        ErrorKind::InvalidClientConfig => StoreError::Incompatible(error.to_string()),
        _ if error.code() == Some("WRONGTYPE") || error.to_string().contains("WRONGTYPE") => {
            StoreError::Corrupt(error.to_string())
        }
        _ if error.code() == Some("ERR") && error.detail().is_some_and(refuses_value) => {
            StoreError::Refused(Box::new(error))
        }
        _ => StoreError::Unavailable(Box::new(error)),
    }
}

/// What failed in a TLS handshake that will fail again: a certificate refused either way.
fn certificate_failure(error: &RedisError) -> Option<String> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        match as_rustls(cause) {
            Some(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)) => {
                return Some(
                    "the server's certificate is not signed by a trusted CA (check tls_ca)".into(),
                );
            }
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => {
                return Some(
                    "the server's certificate is not valid for the host name in the URL".into(),
                );
            }
            Some(rustls::Error::InvalidCertificate(other)) => {
                return Some(format!("the server's certificate was refused: {other:?}"));
            }
            Some(rustls::Error::AlertReceived(alert))
                if matches!(
                    alert,
                    rustls::AlertDescription::BadCertificate
                        | rustls::AlertDescription::UnsupportedCertificate
                        | rustls::AlertDescription::CertificateRevoked
                        | rustls::AlertDescription::CertificateExpired
                        | rustls::AlertDescription::CertificateUnknown
                        | rustls::AlertDescription::UnknownCA
                        | rustls::AlertDescription::AccessDenied
                        | rustls::AlertDescription::CertificateRequired
                ) =>
            {
                return Some(format!(
                    "the server refused the TLS handshake ({alert:?}; a missing or untrusted client certificate?)"
                ));
            }
            _ => source = cause.source(),
        }
    }
    None
}

/// `cause` as a rustls error, looking through the wrappers that hide it from `source()`:
/// the driver's `Arc` around an `io::Error`, and the `io::Error` around the rustls error.
fn as_rustls<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let inner: &(dyn std::error::Error + 'static) = match cause.downcast_ref::<Shared>() {
        Some(shared) => shared.as_ref(),
        None => cause,
    };
    inner.downcast_ref::<rustls::Error>().or_else(|| {
        inner
            .downcast_ref::<std::io::Error>()?
            .get_ref()?
            .downcast_ref::<rustls::Error>()
    })
}

/// Whether an `ERR` reply's text says the server refused a value for its size.
fn refuses_value(detail: &str) -> bool {
    ["exceeds maximum allowed size", "invalid bulk length"]
        .iter()
        .any(|needle| detail.contains(needle))
}

/// A reply of one of our scripts that does not have the shape the script returns.
pub(crate) fn bad_reply(what: &str, reply: &redis::Value) -> StoreError {
    StoreError::Corrupt(format!("unexpected reply to {what}: {reply:?}"))
}

/// Read an integer out of a script or command reply (integers and numeric strings).
pub(crate) fn int(value: &redis::Value) -> Option<i64> {
    match value {
        redis::Value::Int(n) => Some(*n),
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        redis::Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// Read a string out of a reply (`None` for nil / Lua `false`).
pub(crate) fn text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use durable_mcp_store::StoreErrorKind;
    use redis::ServerErrorKind;

    fn server_error(detail: &str) -> RedisError {
        RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            detail.to_owned(),
        ))
    }

    #[test]
    fn refused_values_are_not_outages() {
        let too_big = server_error("string exceeds maximum allowed size (proto-max-bulk-len)");
        assert_eq!(from_redis(too_big).kind(), StoreErrorKind::Refused);
        assert_eq!(
            from_redis(server_error("Protocol error: invalid bulk length")).kind(),
            StoreErrorKind::Refused
        );
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ));
        assert_eq!(from_redis(io).kind(), StoreErrorKind::Unavailable);
        assert_eq!(
            from_redis(server_error("unknown command")).kind(),
            StoreErrorKind::Unavailable
        );
    }
}

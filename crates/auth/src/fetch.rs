//! A small HTTP/1.1 client for the authorization server's endpoints (JWKS, introspection):
//! one connection per request, a deadline on the whole exchange and a cap on the body.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The largest answer read from an authorization server (a JWKS or an introspection
/// response is a few KiB).
const MAX_BODY: usize = 1024 * 1024;

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL cannot be fetched by this client.
    #[error("unsupported URL {0}: only http:// URLs with a host are fetched")]
    Unsupported(String),
    /// Connecting, sending or reading failed.
    #[error("request to {url} failed: {source}")]
    Io {
        /// The URL.
        url: String,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The exchange took longer than its deadline.
    #[error("request to {0} timed out")]
    Timeout(String),
    /// The server answered with a status other than 2xx.
    #[error("{url} answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: StatusCode,
    },
}

/// Check that `url` can be fetched by [`send`] (at configuration time).
pub(crate) fn check_url(url: &str) -> Result<Uri, FetchError> {
    let uri: Uri = url.parse().map_err(|_| FetchError::Unsupported(url.to_owned()))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(FetchError::Unsupported(url.to_owned()));
    }
    Ok(uri)
}

/// Send one request and read its 2xx answer.
pub(crate) async fn send(method: Method, uri: &Uri, headers: HeaderMap, body: Bytes, deadline: Duration) -> Result<Bytes, FetchError> {
    let url = uri.to_string();
    match tokio::time::timeout(deadline, exchange(method, uri, headers, body)).await {
        Ok(result) => result,
        Err(_) => Err(FetchError::Timeout(url)),
    }
}

async fn exchange(method: Method, uri: &Uri, headers: HeaderMap, body: Bytes) -> Result<Bytes, FetchError> {
    let url = uri.to_string();
    let io = |source: Box<dyn std::error::Error + Send + Sync>| FetchError::Io { url: url.clone(), source };
    let host = uri.host().ok_or_else(|| FetchError::Unsupported(url.clone()))?;
    let port = uri.port_u16().unwrap_or(80);
    let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_else(|| host.to_owned());
    let tcp = TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port)).await.map_err(|e| io(e.into()))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await.map_err(|e| io(e.into()))?;
    let driver = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "authorization server connection ended with an error");
        }
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut request = Request::builder().method(method).uri(path).body(Full::new(body)).map_err(|e| io(e.into()))?;
    *request.headers_mut() = headers;
    request
        .headers_mut()
        .insert(http::header::HOST, authority.parse().map_err(|e: http::header::InvalidHeaderValue| io(e.into()))?);
    let response = sender.send_request(request).await.map_err(|e| io(e.into()))?;
    let status = response.status();
    let collected = Limited::new(response.into_body(), MAX_BODY).collect().await.map_err(io)?;
    driver.abort();
    if !status.is_success() {
        return Err(FetchError::Status { url, status });
    }
    Ok(collected.to_bytes())
}

/// `application/x-www-form-urlencoded` encoding of one value (RFC 6749 appendix B).
pub(crate) fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(char::from(byte)),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(form_encode("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
        assert_eq!(form_encode("Az09-._~"), "Az09-._~");
    }

    #[test]
    fn only_http_urls_are_fetched() {
        assert!(check_url("http://127.0.0.1:9/jwks").is_ok());
        assert!(check_url("file:///etc/passwd").is_err());
        assert!(check_url("/jwks").is_err());
    }
}

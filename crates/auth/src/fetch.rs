//! Requests to the authorization server's endpoints (JWKS, introspection) through the
//! project's one outbound client (`durable-mcp-outbound`: pooled, HTTPS through rustls,
//! `HTTPS_PROXY`/`NO_PROXY`), with a deadline on the whole exchange and a cap on the body.

use std::time::Duration;

use bytes::Bytes;
use durable_mcp_outbound::{Outbound, OutboundError};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::Full;

/// The largest answer read from an authorization server (a JWKS or an introspection
/// response is a few KiB).
const MAX_BODY: usize = 1024 * 1024;

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL cannot be fetched by this client.
    #[error("unsupported URL {0}: only http:// and https:// URLs with a host are fetched")]
    Unsupported(String),
    /// A plain-HTTP URL of a host that is not this machine, not explicitly allowed.
    #[error(
        "{0}: http:// is only accepted for a loopback host; use https://, or allow plain HTTP on a trusted network explicitly (--auth-allow-insecure-http)"
    )]
    Insecure(String),
    /// Extra trust anchors that cannot be used.
    #[error("invalid TLS roots: {0}")]
    Roots(String),
    /// Connecting, sending or reading failed, or no answer came in time.
    #[error(transparent)]
    Outbound(OutboundError),
    /// The server answered with a status other than 2xx.
    #[error("{url} answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: StatusCode,
        /// The answer's body (at most 1 MiB), for the caller to read an error code in it.
        body: Bytes,
    },
}

impl From<OutboundError> for FetchError {
    fn from(error: OutboundError) -> Self {
        match error {
            OutboundError::Roots(roots) => FetchError::Roots(roots),
            other => FetchError::Outbound(other),
        }
    }
}

/// Fetches from the authorization server: HTTPS verified against the Mozilla roots plus
/// any configured extra roots, or plain HTTP where [`Fetcher::check_url`] allows it.
#[derive(Clone)]
pub(crate) struct Fetcher {
    client: Outbound,
}

impl Fetcher {
    /// A fetcher trusting the built-in roots and the certificates of `extra_roots_pem`
    /// (for a private CA).
    pub(crate) fn new(extra_roots_pem: Option<&str>) -> Result<Self, FetchError> {
        Ok(Self {
            client: Outbound::new(extra_roots_pem)?,
        })
    }

    /// Check that `url` can be fetched (at configuration time). A plain `http://` URL is
    /// refused unless its host is a loopback address or `localhost`, or `allow_insecure_http`
    /// says the network between here and there is trusted: keys and token answers fetched
    /// in the clear can be forged by anyone on the path.
    pub(crate) fn check_url(
        &self,
        url: &str,
        allow_insecure_http: bool,
    ) -> Result<Uri, FetchError> {
        let uri: Uri = url
            .parse()
            .map_err(|_| FetchError::Unsupported(url.to_owned()))?;
        let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
        let Some(host) = uri.host().filter(|_| scheme_ok) else {
            return Err(FetchError::Unsupported(url.to_owned()));
        };
        if uri.scheme_str() == Some("http") && !allow_insecure_http && !is_loopback(host) {
            return Err(FetchError::Insecure(url.to_owned()));
        }
        Ok(uri)
    }

    /// Send one request and read its 2xx answer.
    pub(crate) async fn send(
        &self,
        method: Method,
        uri: &Uri,
        headers: HeaderMap,
        body: Bytes,
        deadline: Duration,
    ) -> Result<Bytes, FetchError> {
        let mut request = Request::builder()
            .method(method)
            .uri(uri.clone())
            .body(Full::new(body))
            .map_err(|_| FetchError::Unsupported(uri.to_string()))?;
        *request.headers_mut() = headers;
        let response = self.client.send(request, deadline, MAX_BODY).await?;
        let (parts, body) = response.into_parts();
        if !parts.status.is_success() {
            return Err(FetchError::Status {
                url: uri.to_string(),
                status: parts.status,
                body,
            });
        }
        Ok(body)
    }
}

/// Whether `host` (as a URI writes it) is this machine: `localhost`, 127.0.0.0/8 or `[::1]`.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `application/x-www-form-urlencoded` encoding of one value (RFC 6749 appendix B).
pub(crate) fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(byte))
            }
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
    fn only_http_and_https_urls_are_fetched() {
        let fetcher = Fetcher::new(None).unwrap();
        for loopback in [
            "http://127.0.0.1:9/jwks",
            "http://127.3.0.1/jwks",
            "http://localhost:9/jwks",
            "http://[::1]:9/jwks",
        ] {
            assert!(fetcher.check_url(loopback, false).is_ok(), "{loopback}");
        }
        assert!(
            fetcher
                .check_url("https://auth.example/jwks", false)
                .is_ok()
        );
        assert!(fetcher.check_url("file:///etc/passwd", true).is_err());
        assert!(fetcher.check_url("/jwks", true).is_err());
        for remote in [
            "http://auth.example/jwks",
            "http://10.0.0.5/introspect",
            "http://localhost.evil.example/jwks",
        ] {
            assert!(
                matches!(
                    fetcher.check_url(remote, false),
                    Err(FetchError::Insecure(_))
                ),
                "{remote}"
            );
            assert!(
                fetcher.check_url(remote, true).is_ok(),
                "{remote} when allowed"
            );
        }
        assert!(Fetcher::new(Some("not a pem")).is_err());
    }
}

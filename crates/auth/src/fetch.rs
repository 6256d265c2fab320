//! A small HTTP/1.1 client for the authorization server's endpoints (JWKS, introspection):
//! one connection per request (plain, or TLS with the `https` feature), a deadline on the
//! whole exchange and a cap on the body.

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
    #[error("unsupported URL {0}: only http:// and https:// URLs with a host are fetched (https:// needs the `https` feature)")]
    Unsupported(String),
    /// Extra trust anchors that cannot be used.
    #[error("invalid TLS roots: {0}")]
    Roots(String),
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

/// Fetches from the authorization server: plain HTTP, or HTTPS (with the `https` feature)
/// verified against the Mozilla roots plus any configured extra roots.
#[derive(Clone)]
pub(crate) struct Fetcher {
    #[cfg(feature = "https")]
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Fetcher {
    /// A fetcher trusting the built-in roots and the certificates of `extra_roots_pem`
    /// (for a private CA).
    pub(crate) fn new(extra_roots_pem: Option<&str>) -> Result<Self, FetchError> {
        #[cfg(feature = "https")]
        {
            Ok(Self { tls: Some(tls_connector(extra_roots_pem)?) })
        }
        #[cfg(not(feature = "https"))]
        {
            if extra_roots_pem.is_some() {
                return Err(FetchError::Roots("TLS roots need the `https` feature".into()));
            }
            Ok(Self {})
        }
    }

    /// Check that `url` can be fetched (at configuration time).
    pub(crate) fn check_url(&self, url: &str) -> Result<Uri, FetchError> {
        let uri: Uri = url.parse().map_err(|_| FetchError::Unsupported(url.to_owned()))?;
        let scheme_ok = match uri.scheme_str() {
            Some("http") => true,
            #[cfg(feature = "https")]
            Some("https") => self.tls.is_some(),
            _ => false,
        };
        if !scheme_ok || uri.host().is_none() {
            return Err(FetchError::Unsupported(url.to_owned()));
        }
        Ok(uri)
    }

    /// Send one request and read its 2xx answer.
    pub(crate) async fn send(&self, method: Method, uri: &Uri, headers: HeaderMap, body: Bytes, deadline: Duration) -> Result<Bytes, FetchError> {
        let url = uri.to_string();
        match tokio::time::timeout(deadline, self.exchange(method, uri, headers, body)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout(url)),
        }
    }

    async fn exchange(&self, method: Method, uri: &Uri, headers: HeaderMap, body: Bytes) -> Result<Bytes, FetchError> {
        let url = uri.to_string();
        let io = |source: Box<dyn std::error::Error + Send + Sync>| FetchError::Io { url: url.clone(), source };
        let host = uri.host().ok_or_else(|| FetchError::Unsupported(url.clone()))?;
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = TcpStream::connect((bare_host, port)).await.map_err(|e| io(e.into()))?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_else(|| host.to_owned());
        let mut request = Request::builder().method(method).uri(path).body(Full::new(body)).map_err(|e| io(e.into()))?;
        *request.headers_mut() = headers;
        request.headers_mut().insert(http::header::HOST, authority.parse().map_err(|e: http::header::InvalidHeaderValue| io(e.into()))?);
        if https {
            #[cfg(feature = "https")]
            if let Some(tls) = &self.tls {
                let name = tokio_rustls::rustls::pki_types::ServerName::try_from(bare_host.to_owned()).map_err(|e| io(e.into()))?;
                let stream = tls.connect(name, tcp).await.map_err(|e| io(e.into()))?;
                return round_trip(stream, request, &url).await;
            }
            return Err(FetchError::Unsupported(url));
        }
        round_trip(tcp, request, &url).await
    }
}

/// One request on a fresh connection.
async fn round_trip<S>(stream: S, request: Request<Full<Bytes>>, url: &str) -> Result<Bytes, FetchError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = |source: Box<dyn std::error::Error + Send + Sync>| FetchError::Io { url: url.to_owned(), source };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| io(e.into()))?;
    let driver = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "authorization server connection ended with an error");
        }
    });
    let response = sender.send_request(request).await.map_err(|e| io(e.into()))?;
    let status = response.status();
    let collected = Limited::new(response.into_body(), MAX_BODY).collect().await.map_err(io)?;
    driver.abort();
    if !status.is_success() {
        return Err(FetchError::Status { url: url.to_owned(), status });
    }
    Ok(collected.to_bytes())
}

#[cfg(feature = "https")]
fn tls_connector(extra_roots_pem: Option<&str>) -> Result<tokio_rustls::TlsConnector, FetchError> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(pem) = extra_roots_pem {
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| FetchError::Roots(e.to_string()))?;
            roots.add(cert).map_err(|e| FetchError::Roots(e.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(FetchError::Roots("no certificate in the PEM".into()));
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| FetchError::Roots(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)))
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
    fn only_http_and_https_urls_are_fetched() {
        let fetcher = Fetcher::new(None).unwrap();
        assert!(fetcher.check_url("http://127.0.0.1:9/jwks").is_ok());
        assert_eq!(fetcher.check_url("https://auth.example/jwks").is_ok(), cfg!(feature = "https"));
        assert!(fetcher.check_url("file:///etc/passwd").is_err());
        assert!(fetcher.check_url("/jwks").is_err());
        assert!(Fetcher::new(Some("not a pem")).is_err());
    }
}

//! The one HTTP client for what durable-mcp sends out: the authorization server's JWKS and
//! introspection endpoints, OTLP trace exports, and `durable-mcp proxy --upstream`.
//!
//! - **Pooled**: HTTP/1.1 connections are kept (30 s idle) and reused per host.
//! - **HTTPS through rustls** (ring), verified against the built-in Mozilla roots plus the
//!   PEM certificates given to [`Outbound::new`] (a private CA).
//! - **Proxies from the environment**: `HTTPS_PROXY` for `https://` targets (a `CONNECT`
//!   tunnel), `HTTP_PROXY` for `http://` ones (absolute-form requests), `ALL_PROXY` for both,
//!   `NO_PROXY` for the exceptions, in upper or lower case, as curl reads them. A proxy's
//!   `user:password@` becomes its `Proxy-Authorization`. Loopback targets (`localhost`,
//!   127.0.0.0/8, `::1`) are never sent to the environment's proxies (the proxy's own
//!   loopback is another host), and
//!   only `http://` proxies are used: an `https://` or SOCKS proxy is refused, rather than
//!   sent its credentials in the clear.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::uri::Scheme;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Why an outbound request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboundError {
    /// The extra trust anchors cannot be used.
    #[error("invalid TLS roots: {0}")]
    Roots(String),
    /// The target could not be reached (connect, proxy tunnel or TLS handshake): nothing
    /// of the request was sent.
    #[error("cannot connect to {url}: {reason}")]
    Connect {
        /// The target.
        url: String,
        /// Why, with its causes.
        reason: String,
    },
    /// Sending the request or reading the answer failed.
    #[error("request to {url} failed: {reason}")]
    Io {
        /// The target.
        url: String,
        /// Why, with its causes.
        reason: String,
    },
    /// No answer within the deadline.
    #[error("request to {0} timed out")]
    Timeout(String),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct Outbound {
    client: Client<Connector, Full<Bytes>>,
    proxies: Arc<Proxies>,
}

/// Which proxy a target goes through.
#[derive(Debug)]
struct Proxies {
    matcher: Matcher,
    /// Loopback targets go through the matcher's proxy too (explicit proxies only).
    loopback: bool,
}

impl Proxies {
    /// The proxy `dst` goes through, if any.
    fn for_target(&self, dst: &Uri) -> Option<hyper_util::client::proxy::matcher::Intercept> {
        let host = dst.host()?.trim_start_matches('[').trim_end_matches(']');
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if loopback && !self.loopback {
            None
        } else {
            self.matcher.intercept(dst)
        }
    }
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("proxies", &self.proxies)
            .finish_non_exhaustive()
    }
}

impl Outbound {
    /// A client trusting the built-in Mozilla roots and the certificates of
    /// `extra_roots_pem`, with the proxies of the environment.
    pub fn new(extra_roots_pem: Option<&str>) -> Result<Self, OutboundError> {
        Self::build(
            extra_roots_pem,
            Proxies {
                matcher: Matcher::from_env(),
                loopback: false,
            },
        )
    }

    /// As [`Outbound::new`], with these proxies instead of the environment's, applied as
    /// they say (loopback targets included).
    pub fn with_proxies(
        extra_roots_pem: Option<&str>,
        proxies: Matcher,
    ) -> Result<Self, OutboundError> {
        Self::build(
            extra_roots_pem,
            Proxies {
                matcher: proxies,
                loopback: true,
            },
        )
    }

    fn build(extra_roots_pem: Option<&str>, proxies: Proxies) -> Result<Self, OutboundError> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        if let Some(pem) = extra_roots_pem {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(pem.as_bytes())
                    .collect::<Result<_, _>>()
                    .map_err(|e| OutboundError::Roots(e.to_string()))?;
            if certs.is_empty() {
                return Err(OutboundError::Roots("no PEM certificate found".into()));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| OutboundError::Roots(e.to_string()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| OutboundError::Roots(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let proxies = Arc::new(proxies);
        let connector = Connector {
            http,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            proxies: proxies.clone(),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Self { client, proxies })
    }

    /// Send `request` (its URI absolute: `https://host/path`) and return the answer's head as
    /// soon as it arrives, its body to be read as it comes (an SSE stream, say).
    pub async fn request(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, OutboundError> {
        let url = request.uri().to_string();
        // A plain-HTTP request through a proxy is sent to the proxy: it carries the
        // proxy's credentials (a tunnel carries them in its CONNECT).
        if request.uri().scheme() == Some(&Scheme::HTTP)
            && let Some(auth) = self
                .proxies
                .for_target(request.uri())
                .and_then(|proxy| proxy.basic_auth().cloned())
        {
            request
                .headers_mut()
                .insert(http::header::PROXY_AUTHORIZATION, auth);
        }
        self.client.request(request).await.map_err(|error| {
            let reason = causes(&error);
            if error.is_connect() {
                OutboundError::Connect {
                    url: url.clone(),
                    reason,
                }
            } else {
                OutboundError::Io {
                    url: url.clone(),
                    reason,
                }
            }
        })
    }

    /// Send `request` and read its whole answer (at most `max_body` bytes), all within
    /// `deadline`.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
        deadline: Duration,
        max_body: usize,
    ) -> Result<Response<Bytes>, OutboundError> {
        let url = request.uri().to_string();
        let exchange =
            async {
                let response = self.request(request).await?;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, max_body).collect().await.map_err(|e| {
                    OutboundError::Io {
                        url: url.clone(),
                        reason: causes(&*e),
                    }
                })?;
                Ok(Response::from_parts(parts, body.to_bytes()))
            };
        tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| OutboundError::Timeout(url.clone()))?
    }
}

/// `error` and its causes, `: `-separated (hyper's own messages say little alone).
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

/// Connects to the target, directly or through the proxy the environment names for it,
/// with TLS for `https://`.
#[derive(Clone)]
struct Connector {
    http: HttpConnector,
    tls: tokio_rustls::TlsConnector,
    proxies: Arc<Proxies>,
}

impl tower_service::Service<Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let (mut http, tls) = (self.http.clone(), self.tls.clone());
        let proxy = self.proxies.for_target(&dst);
        Box::pin(async move {
            if let Some(proxy) = &proxy
                && proxy.uri().scheme() != Some(&Scheme::HTTP)
            {
                return Err(format!(
                    "the proxy {} for {dst} is not an http:// proxy: only those are supported",
                    redact_proxy(proxy.uri())
                )
                .into());
            }
            let https = dst.scheme() == Some(&Scheme::HTTPS);
            if !https && dst.scheme() != Some(&Scheme::HTTP) {
                return Err(format!("unsupported URL {dst}: only http:// and https://").into());
            }
            let host = dst
                .host()
                .ok_or_else(|| format!("no host in {dst}"))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let tcp = match (&proxy, https) {
                (Some(proxy), true) => {
                    let mut tunnel = Tunnel::new(proxy.uri().clone(), http);
                    if let Some(auth) = proxy.basic_auth() {
                        tunnel = tunnel.with_auth(auth.clone());
                    }
                    tower_service::Service::call(&mut tunnel, dst.clone())
                        .await?
                        .into_inner()
                }
                (Some(proxy), false) => {
                    let tcp = tower_service::Service::call(&mut http, proxy.uri().clone())
                        .await?
                        .into_inner();
                    return Ok(Conn::Plain {
                        io: TokioIo::new(tcp),
                        proxied: true,
                    });
                }
                (None, _) => tower_service::Service::call(&mut http, dst.clone())
                    .await?
                    .into_inner(),
            };
            if !https {
                return Ok(Conn::Plain {
                    io: TokioIo::new(tcp),
                    proxied: false,
                });
            }
            let name = ServerName::try_from(host.clone())
                .map_err(|_| format!("{host:?} is not a name TLS can check"))?;
            let stream = tls.connect(name, tcp).await?;
            Ok(Conn::Tls {
                io: Box::new(TokioIo::new(stream)),
            })
        })
    }
}

/// A proxy URI for messages: scheme, host and port, never its credentials.
fn redact_proxy(uri: &Uri) -> String {
    format!(
        "{}://{}:{}",
        uri.scheme_str().unwrap_or("?"),
        uri.host().unwrap_or("?"),
        uri.port_u16().map_or(String::new(), |p| p.to_string())
    )
}

/// A connection the pool keeps: plain (to the target, or to an HTTP proxy) or TLS.
enum Conn {
    Plain {
        io: TokioIo<TcpStream>,
        proxied: bool,
    },
    // Boxed: a TLS session is a kilobyte, a plain connection a few words.
    Tls {
        io: Box<TokioIo<TlsStream<TcpStream>>>,
    },
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            // Through an HTTP proxy requests go in absolute form.
            Conn::Plain { proxied, .. } => Connected::new().proxy(*proxied),
            Conn::Tls { .. } => Connected::new(),
        }
    }
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain { io, .. } => Pin::new(io).poll_read(cx, buf),
            Conn::Tls { io } => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain { io, .. } => Pin::new(io).poll_write(cx, buf),
            Conn::Tls { io } => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain { io, .. } => Pin::new(io).poll_flush(cx),
            Conn::Tls { io } => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Conn::Plain { io, .. } => Pin::new(io).poll_shutdown(cx),
            Conn::Tls { io } => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environments_proxies_skip_loopback_targets() {
        let proxy = || {
            Matcher::builder()
                .all("http://proxy.test:3128".to_owned())
                .build()
        };
        let from_env = Proxies {
            matcher: proxy(),
            loopback: false,
        };
        for target in [
            "http://localhost:4318/v1/traces",
            "https://127.0.0.1/jwks",
            "http://[::1]:8080/mcp",
            "http://127.9.9.9/",
        ] {
            assert!(
                from_env.for_target(&target.parse().unwrap()).is_none(),
                "{target}"
            );
        }
        assert!(
            from_env
                .for_target(&"https://auth.example/jwks".parse().unwrap())
                .is_some()
        );
        let explicit = Proxies {
            matcher: proxy(),
            loopback: true,
        };
        assert!(
            explicit
                .for_target(&"http://localhost/".parse().unwrap())
                .is_some()
        );
    }
}

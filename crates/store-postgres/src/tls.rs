//! TLS to PostgreSQL through rustls, with libpq's meanings of `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey` (the table is on [`crate::PgOptions`]).
//!
//! Channel binding (`SCRAM-SHA-256-PLUS`) is not offered: password logins over TLS use
//! `SCRAM-SHA-256`, and `channel_binding=require` fails at login.

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use durable_mcp_store::StoreError;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

/// How the store uses TLS, as libpq's `sslmode` says it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Never encrypt.
    Disable,
    /// Encrypt if the server offers it; go on unencrypted (and log it) if not.
    Prefer,
    /// Always encrypt; check the server's certificate only against a given `sslrootcert`.
    Require,
    /// Always encrypt, and check that a trusted CA signed the server's certificate.
    VerifyCa,
    /// As `VerifyCa`, and check that the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, StoreError> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            "allow" => {
                return Err(bad(
                    "sslmode=allow is not supported: use prefer (TLS when offered) or disable",
                ));
            }
            other => {
                return Err(bad(format!(
                    "bad sslmode {other:?}: use disable, prefer, require, verify-ca or verify-full"
                )));
            }
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// The TLS parameters of a connection string, before any file is read.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsParams {
    pub(crate) sslmode: Option<String>,
    pub(crate) sslrootcert: Option<String>,
    pub(crate) sslcert: Option<String>,
    pub(crate) sslkey: Option<String>,
}

impl TlsParams {
    /// Take `key=value` if it is a TLS parameter; `false` if it is not one.
    pub(crate) fn take(&mut self, key: &str, value: &str) -> bool {
        let slot = match key {
            "sslmode" => &mut self.sslmode,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            "sslkey" => &mut self.sslkey,
            _ => return false,
        };
        *slot = Some(value.to_owned());
        true
    }

    /// Fill what the connection string left out from libpq's environment variables
    /// (`PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`).
    pub(crate) fn with_env(mut self) -> Self {
        for (slot, var) in [
            (&mut self.sslmode, "PGSSLMODE"),
            (&mut self.sslrootcert, "PGSSLROOTCERT"),
            (&mut self.sslcert, "PGSSLCERT"),
            (&mut self.sslkey, "PGSSLKEY"),
        ] {
            if slot.is_none() {
                *slot = std::env::var(var).ok().filter(|v| !v.is_empty());
            }
        }
        self
    }

    /// Read the files these parameters name and build the connector; errors name the
    /// parameter and file at fault.
    pub(crate) fn build(self) -> Result<Tls, StoreError> {
        let explicit_mode = self.sslmode.as_deref().map(SslMode::parse).transpose()?;
        let system = self.sslrootcert.as_deref() == Some("system");
        let mode = match explicit_mode {
            Some(mode) if system && mode != SslMode::VerifyFull => {
                return Err(bad(format!(
                    "sslmode={} may not be used with sslrootcert=system: use verify-full",
                    mode.as_str()
                )));
            }
            Some(mode) => mode,
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if mode == SslMode::Disable {
            return Ok(Tls {
                mode,
                config: None,
                summary: "disable".into(),
                fallback_logged: Arc::default(),
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let default_root = default_root_cert();
        let (roots, roots_from) = match (self.sslrootcert.as_deref(), default_root) {
            (Some("system"), _) => (Some(system_roots()?), "the platform's roots".to_owned()),
            (Some(file), _) => (Some(roots_from_file(Path::new(file))?), file.to_owned()),
            (None, Some(file)) => (Some(roots_from_file(&file)?), file.display().to_string()),
            (None, None) if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) => {
                return Err(bad(format!(
                    "sslmode={} needs the server's CA certificate: set sslrootcert=FILE (a PEM file), or sslrootcert=system for the platform's roots",
                    mode.as_str()
                )));
            }
            (None, None) => (None, String::new()),
        };
        let verifier: Arc<dyn ServerCertVerifier> = match roots {
            None => Arc::new(EncryptOnly {
                algorithms: provider.signature_verification_algorithms,
            }),
            Some(roots) => {
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| bad(format!("sslrootcert {roots_from}: {e}")))?;
                if mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(AnyName { inner: webpki })
                }
            }
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(format!("TLS setup: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (self.sslcert, self.sslkey) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(&cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| bad(format!("sslcert {cert}: {e}")))?;
                if chain.is_empty() {
                    return Err(bad(format!("sslcert {cert}: no PEM certificate in it")));
                }
                let key_der = PrivateKeyDer::from_pem_file(&key)
                    .map_err(|e| bad(format!("sslkey {key}: {e}")))?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| bad(format!("sslcert {cert} with sslkey {key}: {e}")))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(bad("sslcert and sslkey go together: give both or neither")),
        };
        let summary = match roots_from.as_str() {
            "" => mode.as_str().to_owned(),
            from => format!("{}, CA from {from}", mode.as_str()),
        };
        Ok(Tls {
            mode,
            config: Some(Arc::new(config)),
            summary,
            fallback_logged: Arc::default(),
        })
    }
}

/// The TLS side of connecting: the mode and, unless it is `disable`, the rustls setup.
#[derive(Clone)]
pub(crate) struct Tls {
    mode: SslMode,
    config: Option<Arc<ClientConfig>>,
    /// The mode and where the CA came from, for `Debug` and logs.
    summary: String,
    /// `prefer` fell back to an unencrypted connection and said so once.
    fallback_logged: Arc<AtomicBool>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary)
    }
}

impl Tls {
    /// The mode.
    pub(crate) fn mode(&self) -> SslMode {
        self.mode
    }

    /// tokio-postgres' own setting for this mode: it only knows whether TLS is refused,
    /// tried or required; the checks of the stronger modes live in the verifier.
    pub(crate) fn driver_mode(&self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self.mode {
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }

    /// A connector for one connection attempt, and a flag it sets if the handshake ran.
    pub(crate) fn connector(&self) -> (MakeRustls, Arc<AtomicBool>) {
        let used = Arc::new(AtomicBool::new(false));
        (
            MakeRustls {
                config: self.config.clone(),
                used: used.clone(),
            },
            used,
        )
    }

    /// Called after a connection to `target` opened without TLS: under `prefer`, say so
    /// (once per store, then at debug level).
    pub(crate) fn note_plaintext(&self, target: &str) {
        if self.mode != SslMode::Prefer {
            return;
        }
        if self.fallback_logged.swap(true, Ordering::Relaxed) {
            tracing::debug!(
                target_db = target,
                "PostgreSQL connection without TLS (sslmode=prefer)"
            );
        } else {
            tracing::warn!(
                target_db = target,
                "PostgreSQL does not offer TLS: connected without encryption (sslmode=prefer; set sslmode=require or verify-full to refuse this)"
            );
        }
    }
}

/// `~/.postgresql/root.crt`, where libpq looks for the CA when none is given, if it exists.
pub(crate) fn default_root_cert() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(PathBuf::from(home).join(".postgresql").join("root.crt")).filter(|p| p.is_file())
}

fn roots_from_file(path: &Path) -> Result<RootCertStore, StoreError> {
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| bad(format!("sslrootcert {}: {e}", path.display())))?;
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(bad(format!(
            "sslrootcert {}: no usable PEM certificate in it",
            path.display()
        )));
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, StoreError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(bad(format!(
            "sslrootcert=system: no certificate found in the platform's trust store{why}"
        )));
    }
    Ok(roots)
}

fn bad(message: impl Into<String>) -> StoreError {
    StoreError::Incompatible(message.into())
}

/// Checks the chain against the roots but not the host name (`verify-ca`, and `require`
/// or `prefer` with a CA).
#[derive(Debug)]
struct AnyName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            // webpki checks the name last, after the chain: this error means the chain is good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Accepts any certificate (`require` and `prefer` without a CA, as libpq does): the
/// connection is encrypted, and the handshake's signatures are still checked.
#[derive(Debug)]
struct EncryptOnly {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The `MakeTlsConnect` of one connection attempt.
pub(crate) struct MakeRustls {
    config: Option<Arc<ClientConfig>>,
    used: Arc<AtomicBool>,
}

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = TlsFailure;

    /// Called for every connection, TLS or not (`sslmode=disable`, Unix sockets): what
    /// cannot be done is refused only if the handshake is attempted.
    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, TlsFailure> {
        Ok(RustlsConnect {
            config: self.config.clone(),
            domain: domain.to_owned(),
            used: self.used.clone(),
        })
    }
}

/// The handshake of one connection.
pub(crate) struct RustlsConnect {
    config: Option<Arc<ClientConfig>>,
    domain: String,
    used: Arc<AtomicBool>,
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = TlsFailure;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream, TlsFailure>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        self.used.store(true, Ordering::Relaxed);
        Box::pin(async move {
            let Some(config) = self.config else {
                return Err(TlsFailure::permanent(
                    "TLS is disabled (sslmode=disable)".into(),
                ));
            };
            let domain = self.domain;
            let name = ServerName::try_from(domain.clone()).map_err(|_| {
                TlsFailure::permanent(format!("{domain:?} is not a host name TLS can check"))
            })?;
            match tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
            {
                Ok(stream) => Ok(RustlsStream(stream)),
                Err(error) => Err(TlsFailure::from_handshake(&domain, error)),
            }
        })
    }
}

/// Why a TLS handshake failed, and whether trying again can help.
#[derive(Debug)]
pub(crate) struct TlsFailure {
    message: String,
    /// A certificate or setting problem: retrying will not fix it.
    pub(crate) permanent: bool,
}

impl TlsFailure {
    fn permanent(message: String) -> Self {
        Self {
            message,
            permanent: true,
        }
    }

    fn from_handshake(host: &str, error: io::Error) -> Self {
        let Some(tls) = error
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>())
        else {
            return Self {
                message: format!("TLS handshake: {error}"),
                permanent: false,
            };
        };
        let message = match tls {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
                "the server's certificate is not signed by a trusted CA (check sslrootcert)"
                    .to_owned()
            }
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => {
                format!(
                    "the server's certificate is not valid for host {host:?} (sslmode=verify-full checks the name; connect by a name the certificate lists)"
                )
            }
            rustls::Error::InvalidCertificate(other) => {
                format!("the server's certificate was refused: {other:?}")
            }
            rustls::Error::AlertReceived(alert) if refuses_certificate(*alert) => {
                format!(
                    "the server refused the TLS handshake ({alert:?}; a missing or untrusted client certificate?)"
                )
            }
            // Anything else (a reset, an alert of another kind) may heal by reconnecting.
            other => {
                return Self {
                    message: format!("TLS handshake: {other}"),
                    permanent: false,
                };
            }
        };
        Self {
            message,
            permanent: true,
        }
    }
}

/// Whether a TLS alert from the server refuses our certificate (or its absence).
fn refuses_certificate(alert: rustls::AlertDescription) -> bool {
    use rustls::AlertDescription as A;
    matches!(
        alert,
        A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::AccessDenied
            | A::CertificateRequired
    )
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TlsFailure {}

/// An encrypted connection.
pub(crate) struct RustlsStream(tokio_rustls::client::TlsStream<Socket>);

impl tokio_postgres::tls::TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

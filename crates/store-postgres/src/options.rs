//! [`PgOptions`]: where the database is and how the store uses it, parsed from a
//! `postgres://` URL.

use std::str::FromStr;
use std::time::Duration;

use durable_mcp_store::StoreError;

use crate::error::describe;
use crate::tls::{SslMode, Tls, TlsParams};

/// The LISTEN/NOTIFY channel when no schema is configured.
pub const DEFAULT_CHANNEL: &str = "durable_mcp_events";

/// Longest accepted schema name: the channel `durable_mcp_events_<schema>` must fit in
/// PostgreSQL's 63-byte identifiers.
const MAX_SCHEMA_LEN: usize = 63 - DEFAULT_CHANNEL.len() - 1;

/// Settings of the PostgreSQL store.
///
/// Built by [`PgOptions::from_url`] from a URL,
/// `postgres://user[:password]@host[:port]/database[?param=value&...]` (parts
/// percent-encoded: a password `p@ss/w%rd` is written `p%40ss%2Fw%25rd`), or from a libpq
/// `key=value` string, `host=db.example user=app password='...' dbname=app sslmode=verify-full`.
/// Besides the parameters tokio-postgres understands (`connect_timeout`,
/// `application_name`, `options`, `target_session_attrs`, ...), either form may carry the
/// store's own:
///
/// | parameter | field | default |
/// | --- | --- | --- |
/// | `schema` | [`schema`](Self::schema) | none (the server's `search_path`) |
/// | `pool_size` | [`pool_size`](Self::pool_size) | 8 |
/// | `max_events` | [`max_events_per_stream`](Self::max_events_per_stream) | unbounded |
/// | `poll_ms` | [`poll_interval`](Self::poll_interval) | 1000 |
/// | `op_timeout_ms` | [`op_timeout`](Self::op_timeout) | 2000 |
/// | `admin_timeout_ms` | [`admin_timeout`](Self::admin_timeout) | 30000 |
/// | `connect_timeout` (seconds) | [`connect_timeout`](Self::connect_timeout) | 5 |
/// | `check_after_ms` | [`check_after`](Self::check_after) | 1000 |
/// | `check_timeout_ms` | [`check_timeout`](Self::check_timeout) | 1000 |
/// | `acquire_timeout_ms` | [`acquire_timeout`](Self::acquire_timeout) | 5000 |
///
/// and TLS, with libpq's meanings ([`SslMode`]):
///
/// | parameter | meaning | default |
/// | --- | --- | --- |
/// | `sslmode` | `disable`, `prefer` (TLS if offered; a fallback is logged), `require` (always TLS), `verify-ca` (and a trusted CA signed the server's certificate), `verify-full` (and it names the host) | `prefer` |
/// | `sslrootcert` | PEM file of the CA certificates to trust, or `system` (the platform's trust store; implies `verify-full`) | `~/.postgresql/root.crt` if it exists |
/// | `sslcert`, `sslkey` | PEM client certificate chain and key, for `cert` logins | none |
///
/// `require` and `prefer` check the server's certificate only when a CA is given (then as
/// `verify-ca`), as libpq does. A TLS parameter the string leaves out is read from
/// `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT` or `PGSSLKEY`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PgOptions {
    config: tokio_postgres::Config,
    tls: Tls,
    /// Keep every table in this schema (created if missing) instead of the server's default
    /// `search_path`. Several deployments, or tests, can then share one database. Lowercase
    /// ASCII letters, digits and `_`, not starting with a digit, at most 44 bytes.
    pub schema: Option<String>,
    /// Connections kept for store operations (the LISTEN connection is one more).
    pub pool_size: usize,
    /// Keep at most this many events per stream; older ones are pruned as new ones are
    /// appended, and a resume from before them is [`StoreError::Pruned`] (D14).
    pub max_events_per_stream: Option<u64>,
    /// Live tails also wake this often, so a notification lost while the listener
    /// reconnects delays a wake-up by at most this much instead of losing it.
    pub poll_interval: Duration,
    /// Longest one connection attempt may take; an unreachable server fails `open` and
    /// operations within this (D15: fail fast).
    pub connect_timeout: Duration,
    /// Longest one store operation on a request's path may take, waiting for a pooled
    /// connection (and checking or opening it) included, before it fails with
    /// [`StoreError::Unavailable`] (D15: a request on a hung or failing-over server gets its
    /// 503 within about this long). Statements here take milliseconds.
    pub op_timeout: Duration,
    /// The same bound for maintenance operations, which may touch many rows: pruning,
    /// listing sessions, records and streams, importing events, migrating.
    pub admin_timeout: Duration,
    /// A pooled connection idle at least this long is checked (an empty query) before an
    /// operation uses it; zero checks every reuse. A server that stopped answering then
    /// fails the next operation within [`check_timeout`](Self::check_timeout) plus
    /// [`connect_timeout`](Self::connect_timeout), not the whole operation timeout (D15).
    pub check_after: Duration,
    /// Longest the check of a pooled connection may take before the connection is dropped
    /// and a new one opened.
    pub check_timeout: Duration,
    /// Longest an operation waits for a pooled connection when all of them are busy (at
    /// most [`op_timeout`](Self::op_timeout)). The checks above cannot help an operation
    /// queued behind connections whose queries a hung server never answers: it fails
    /// with [`StoreError::Unavailable`] after this instead of the operation timeout (D15).
    pub acquire_timeout: Duration,
}

impl PgOptions {
    /// Parse a connection string: a `postgres://` (or `postgresql://`) URL, or a libpq
    /// `key=value` string (`host=db.example user=app sslmode=verify-full ...`, values
    /// optionally single-quoted). See the table above for the store's own parameters and
    /// [`crate::tls`] for the TLS ones; a TLS parameter the string leaves out is taken from
    /// libpq's environment variable (`PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`).
    /// The certificate files are read here. Malformed strings, unknown parameters and
    /// unreadable certificates are [`StoreError::Incompatible`], with a message that never
    /// contains the password.
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let url = url.trim();
        let dsn = is_key_value(url);
        if !(dsn || url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(StoreError::Incompatible(
                "not a postgres:// URL or a key=value connection string".into(),
            ));
        }
        let (base, pairs) = if dsn {
            ("", key_value_pairs(url)?)
        } else {
            url_pairs(url)?
        };
        let mut schema = None;
        let mut pool_size = 8;
        let mut max_events = None;
        let mut poll_ms = 1_000;
        let mut op_timeout_ms = 2_000;
        let mut admin_timeout_ms = 30_000;
        let mut check_after_ms = 1_000;
        let mut check_timeout_ms = 1_000;
        let mut acquire_timeout_ms = 5_000;
        let mut tls = TlsParams::default();
        let mut passthrough = Vec::new();
        for (key, value, raw) in pairs {
            match key.as_str() {
                "schema" => schema = Some(value),
                "pool_size" => pool_size = number(&key, &value)?,
                "max_events" => max_events = Some(number(&key, &value)?),
                "poll_ms" => poll_ms = number(&key, &value)?,
                "op_timeout_ms" => op_timeout_ms = number(&key, &value)?,
                "admin_timeout_ms" => admin_timeout_ms = number(&key, &value)?,
                "check_after_ms" => check_after_ms = number(&key, &value)?,
                "check_timeout_ms" => check_timeout_ms = number(&key, &value)?,
                "acquire_timeout_ms" => acquire_timeout_ms = number(&key, &value)?,
                _ if tls.take(&key, &value) => {}
                _ => passthrough.push(raw),
            }
        }
        let driver = match (dsn, passthrough.is_empty()) {
            (true, _) => passthrough.join(" "),
            (false, true) => base.to_owned(),
            (false, false) => format!("{base}?{}", passthrough.join("&")),
        };
        // The error's text never contains the string, so no password reaches a log.
        let mut config = tokio_postgres::Config::from_str(&driver).map_err(|e| {
            StoreError::Incompatible(format!("bad postgres connection string: {}", describe(&e)))
        })?;
        let tls = tls.with_env().build()?;
        config.ssl_mode(tls.driver_mode());
        let connect_timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(5));
        if config.get_application_name().is_none() {
            config.application_name("durable-mcp");
        }
        let options = Self {
            config,
            tls,
            schema,
            pool_size: usize::try_from(pool_size).unwrap_or(usize::MAX),
            max_events_per_stream: max_events,
            poll_interval: Duration::from_millis(poll_ms),
            connect_timeout,
            op_timeout: Duration::from_millis(op_timeout_ms),
            admin_timeout: Duration::from_millis(admin_timeout_ms),
            check_after: Duration::from_millis(check_after_ms),
            check_timeout: Duration::from_millis(check_timeout_ms),
            acquire_timeout: Duration::from_millis(acquire_timeout_ms),
        };
        options.validate()?;
        Ok(options)
    }

    /// How connections use TLS (`sslmode`).
    pub fn ssl_mode(&self) -> SslMode {
        self.tls.mode()
    }

    /// These options with every table kept in `schema` (see [`Self::schema`]).
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// Check the settings that [`crate::PgStore::open`] relies on.
    pub fn validate(&self) -> Result<(), StoreError> {
        if let Some(schema) = &self.schema {
            let ok_chars = schema
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            let ok_start = schema.bytes().next().is_some_and(|b| !b.is_ascii_digit());
            if !ok_chars || !ok_start || schema.len() > MAX_SCHEMA_LEN {
                return Err(StoreError::Incompatible(format!(
                    "bad schema name {schema:?}: use at most {MAX_SCHEMA_LEN} lowercase ASCII letters, digits or '_', not starting with a digit"
                )));
            }
        }
        if self.pool_size == 0 {
            return Err(StoreError::Incompatible(
                "pool_size must be at least 1".into(),
            ));
        }
        if self.max_events_per_stream == Some(0) {
            return Err(StoreError::Incompatible(
                "max_events must be at least 1".into(),
            ));
        }
        if self.poll_interval.is_zero()
            || self.op_timeout.is_zero()
            || self.admin_timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.check_timeout.is_zero()
            || self.acquire_timeout.is_zero()
        {
            return Err(StoreError::Incompatible(
                "poll_ms, op_timeout_ms, admin_timeout_ms, connect_timeout, check_timeout_ms and acquire_timeout_ms must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The channel appends NOTIFY and the listener LISTENs on; one per schema, so
    /// deployments sharing a database do not wake each other.
    pub fn channel(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{DEFAULT_CHANNEL}_{schema}"),
            None => DEFAULT_CHANNEL.to_owned(),
        }
    }

    /// Where the store connects, for messages: `host:port/database`, never the password.
    pub fn target(&self) -> String {
        use tokio_postgres::config::Host;
        let host = match self.config.get_hosts().first() {
            Some(Host::Tcp(host)) => host.clone(),
            #[cfg(unix)]
            Some(Host::Unix(path)) => path.display().to_string(),
            None => "localhost".into(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!("{host}:{port}/{}", self.config.get_dbname().unwrap_or(""))
    }

    /// The tokio-postgres configuration with this store's connect timeout applied.
    pub(crate) fn connect_config(&self) -> tokio_postgres::Config {
        let mut config = self.config.clone();
        config.connect_timeout(self.connect_timeout);
        config
    }

    /// The TLS side of connecting.
    pub(crate) fn tls(&self) -> &Tls {
        &self.tls
    }
}

pub use durable_mcp_store::is_key_value;

/// One parameter: its key, its decoded value, and its text as written (to pass on).
type Pair = (String, String, String);

/// The part before `?`, and the query's parameters, percent-decoded.
fn url_pairs(url: &str) -> Result<(&str, Vec<Pair>), StoreError> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut pairs = Vec::new();
    for raw in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = raw.split_once('=').unwrap_or((raw, ""));
        pairs.push((percent_decode(key)?, percent_decode(value)?, raw.to_owned()));
    }
    Ok((base, pairs))
}

fn percent_decode(s: &str) -> Result<String, StoreError> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| {
            StoreError::Incompatible(
                "bad postgres URL: a parameter is not UTF-8 once percent-decoded".into(),
            )
        })
}

/// The parameters of a libpq `key=value` string: whitespace between pairs, optional
/// whitespace around `=`, values bare or single-quoted, `\` escaping the next character.
/// Each is passed on re-quoted, so values with spaces or quotes survive.
fn key_value_pairs(s: &str) -> Result<Vec<Pair>, StoreError> {
    let bad =
        |why: &str| StoreError::Incompatible(format!("bad postgres connection string: {why}"));
    let mut pairs = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_') {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if key.is_empty() || chars.next() != Some('=') {
            return Err(bad("expected keyword=value"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.push(
                        chars
                            .next()
                            .ok_or_else(|| bad("a value ends in a backslash"))?,
                    ),
                    Some(c) => value.push(c),
                    None => return Err(bad(&format!("the value of {key} has no closing quote"))),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(
                        chars
                            .next()
                            .ok_or_else(|| bad("a value ends in a backslash"))?,
                    );
                } else {
                    value.push(c);
                }
            }
        }
        let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
        let raw = format!("{key}='{quoted}'");
        pairs.push((key, value, raw));
    }
}

fn number(key: &str, value: &str) -> Result<u64, StoreError> {
    value.parse().map_err(|_| {
        StoreError::Incompatible(format!(
            "bad {key} {value:?} in postgres URL: expected a number"
        ))
    })
}

/// `name` as a quoted SQL identifier.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_store_and_driver_parameters() {
        let o = PgOptions::from_url(
            "postgres://u:secret@db.example:6543/app?schema=tenant_1&pool_size=3&max_events=10&poll_ms=250&op_timeout_ms=900&admin_timeout_ms=9000&connect_timeout=2&check_after_ms=0&check_timeout_ms=300&acquire_timeout_ms=700&application_name=x",
        )
        .unwrap();
        assert_eq!(o.schema.as_deref(), Some("tenant_1"));
        assert_eq!(o.pool_size, 3);
        assert_eq!(o.max_events_per_stream, Some(10));
        assert_eq!(o.poll_interval, Duration::from_millis(250));
        assert_eq!(
            (o.op_timeout, o.admin_timeout),
            (Duration::from_millis(900), Duration::from_secs(9))
        );
        assert_eq!(o.connect_timeout, Duration::from_secs(2));
        assert_eq!(
            (o.check_after, o.check_timeout),
            (Duration::ZERO, Duration::from_millis(300))
        );
        assert_eq!(o.acquire_timeout, Duration::from_millis(700));
        assert_eq!(o.target(), "db.example:6543/app");
        assert_eq!(o.channel(), "durable_mcp_events_tenant_1");
        assert!(
            !format!("{o:?}").contains("secret"),
            "the password never reaches Debug"
        );
    }

    #[test]
    fn defaults_and_rejections() {
        let o = PgOptions::from_url("postgresql://postgres@127.0.0.1/test").unwrap();
        assert_eq!(
            (o.pool_size, o.connect_timeout, o.channel().as_str()),
            (8, Duration::from_secs(5), DEFAULT_CHANNEL)
        );
        for bad in [
            "mysql://x/y",
            "postgres://h/db?schema=Bad-Name",
            "postgres://h/db?schema=1abc",
            "postgres://h/db?pool_size=0",
            "postgres://h/db?max_events=many",
            "postgres://h/db?bogus_param=1",
        ] {
            let err = PgOptions::from_url(bad).unwrap_err();
            assert!(matches!(err, StoreError::Incompatible(_)), "{bad}: {err}");
        }
        assert!(
            PgOptions::from_url(&format!(
                "postgres://h/db?schema={}",
                "s".repeat(MAX_SCHEMA_LEN)
            ))
            .is_ok()
        );
        assert!(
            PgOptions::from_url(&format!(
                "postgres://h/db?schema={}",
                "s".repeat(MAX_SCHEMA_LEN + 1)
            ))
            .is_err()
        );
    }

    #[test]
    fn key_value_strings_parse_like_urls() {
        let o = PgOptions::from_url("host=db.example port = 6543 dbname=app user=u password='it''s \\' secret' schema=tenant_1 pool_size=3 sslmode=disable")
            .unwrap_err();
        assert!(
            matches!(o, StoreError::Incompatible(_)),
            "an unbalanced quote is refused: {o}"
        );
        let o = PgOptions::from_url(r"host=db.example port = 6543 dbname=app user=u password='it\'s \\ secret' schema=tenant_1 pool_size=3 sslmode=disable")
            .unwrap();
        assert_eq!(
            (o.target().as_str(), o.schema.as_deref(), o.pool_size),
            ("db.example:6543/app", Some("tenant_1"), 3)
        );
        assert_eq!(o.config.get_password(), Some(&b"it's \\ secret"[..]));
        assert_eq!(o.ssl_mode(), SslMode::Disable);
        assert!(
            !format!("{o:?}").contains("secret"),
            "the password never reaches Debug"
        );
        assert!(
            is_key_value(" host=x")
                && is_key_value("dbname = y")
                && !is_key_value("postgres://h/db")
                && !is_key_value("sqlite:./a.db?x=1")
        );
        for bad in ["host=x bogus=1", "host", "host=x =y", "host='x"] {
            assert!(
                matches!(PgOptions::from_url(bad), Err(StoreError::Incompatible(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn url_parts_are_percent_decoded() {
        let o = PgOptions::from_url(
            "postgres://app:p%40ss%2Fw%25rd%3A1@db.example/my%20db?schema=s&sslmode=disable",
        )
        .unwrap();
        assert_eq!(o.config.get_password(), Some(&b"p@ss/w%rd:1"[..]));
        assert_eq!(o.config.get_dbname(), Some("my db"));
    }

    #[test]
    fn ssl_modes_follow_libpq() {
        let mode = |url: &str| PgOptions::from_url(url).map(|o| o.ssl_mode());
        // Whatever the environment says, the URL's own sslmode wins.
        assert_eq!(
            mode("postgres://h/db?sslmode=require").unwrap(),
            SslMode::Require
        );
        assert_eq!(
            mode("postgres://h/db?sslmode=disable").unwrap(),
            SslMode::Disable
        );
        let message = |url: &str| mode(url).unwrap_err().to_string();
        assert!(
            message("postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt")
                .contains("sslrootcert /nonexistent/ca.crt")
        );
        assert!(
            message("postgres://h/db?sslmode=allow").contains("sslmode=allow is not supported")
        );
        assert!(message("postgres://h/db?sslmode=bogus").contains("bad sslmode"));
        assert!(
            message("postgres://h/db?sslmode=require&sslrootcert=system")
                .contains("use verify-full")
        );
        assert!(
            message("postgres://h/db?sslmode=require&sslcert=/a.crt")
                .contains("sslcert and sslkey go together")
        );
        if std::env::var_os("PGSSLROOTCERT").is_none()
            && super::super::tls::default_root_cert().is_none()
        {
            assert!(
                message("postgres://h/db?sslmode=verify-full")
                    .contains("needs the server's CA certificate")
            );
        }
        // A CA file of something else than certificates is refused, naming it.
        let dir = std::env::temp_dir().join(format!("dmcp-pg-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        assert!(
            message(&format!(
                "postgres://h/db?sslmode=verify-ca&sslrootcert={}",
                empty.display()
            ))
            .contains("no usable PEM certificate")
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}

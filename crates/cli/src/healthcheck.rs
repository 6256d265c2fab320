//! `durable-mcp healthcheck`: GET `/healthz` of a running `serve` and exit 0 on 200, 1
//! otherwise, for a container image with no shell or HTTP client in it (the Dockerfile's
//! `HEALTHCHECK`). Plain HTTP/1.1 over a `TcpStream`: the probe is one request on loopback.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Context, bail};

/// How long the probe waits to connect, and then for the answer.
const TIMEOUT: Duration = Duration::from_secs(3);

#[derive(clap::Parser, Debug)]
pub struct HealthcheckArgs {
    /// The address `serve` listens on (its `--listen`, from the same variable): the probe
    /// GETs http://ADDR/healthz, on loopback when ADDR is 0.0.0.0 or [::].
    #[arg(long, env = "DURABLE_MCP_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The URL to GET instead (`http://HOST:PORT/PATH`).
    #[arg(long)]
    url: Option<String>,
}

/// GET the health URL of `args`: Ok on 200, an error naming what came back otherwise.
pub fn healthcheck(args: &HealthcheckArgs) -> anyhow::Result<()> {
    let (authority, path) = match &args.url {
        Some(url) => split_url(url)?,
        None => (loopback(args.listen).to_string(), "/healthz".to_owned()),
    };
    let url = format!("http://{authority}{path}");
    let status = get(&authority, &path).with_context(|| format!("GET {url}"))?;
    if status != 200 {
        bail!("GET {url}: status {status}, not 200");
    }
    println!("{url}: 200");
    Ok(())
}

/// Where to reach a server listening on `listen`: on loopback when it listens on every address.
fn loopback(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

/// `http://HOST:PORT/PATH` as (`HOST:PORT`, `/PATH`); the port defaults to 80.
fn split_url(url: &str) -> anyhow::Result<(String, String)> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("{url}: only http:// URLs are probed")
    };
    let (authority, path) = rest.find('/').map_or((rest, "/"), |at| rest.split_at(at));
    if authority.is_empty() {
        bail!("{url}: no host");
    }
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
        && !authority.ends_with(']');
    let authority = if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, path.to_owned()))
}

/// The status code of `GET path` at `authority`.
fn get(authority: &str, path: &str) -> anyhow::Result<u16> {
    let addr = authority
        .to_socket_addrs()?
        .next()
        .with_context(|| format!("{authority} resolves to no address"))?;
    let mut tcp = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    tcp.set_read_timeout(Some(TIMEOUT))?;
    tcp.set_write_timeout(Some(TIMEOUT))?;
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )?;
    // The status line is all that matters: `HTTP/1.1 200 OK`.
    let mut head = [0; 64];
    let mut read = 0;
    while read < head.len() && !head[..read].contains(&b'\n') {
        match tcp.read(&mut head[read..])? {
            0 => break,
            n => read += n,
        }
    }
    let line = String::from_utf8_lossy(&head[..read]);
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok());
    status.with_context(|| {
        format!(
            "not an HTTP response: {:?}",
            line.lines().next().unwrap_or_default()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::{loopback, split_url};

    #[test]
    fn an_unspecified_listen_address_is_probed_on_loopback() {
        assert_eq!(
            loopback("0.0.0.0:8080".parse().unwrap()).to_string(),
            "127.0.0.1:8080"
        );
        assert_eq!(
            loopback("[::]:9000".parse().unwrap()).to_string(),
            "[::1]:9000"
        );
        assert_eq!(
            loopback("10.0.0.7:8080".parse().unwrap()).to_string(),
            "10.0.0.7:8080"
        );
    }

    #[test]
    fn urls_split_into_authority_and_path() {
        let split = |url| split_url(url).unwrap();
        assert_eq!(
            split("http://127.0.0.1:8080/healthz"),
            ("127.0.0.1:8080".into(), "/healthz".into())
        );
        assert_eq!(
            split("http://localhost/readyz"),
            ("localhost:80".into(), "/readyz".into())
        );
        assert_eq!(split("http://[::1]:81"), ("[::1]:81".into(), "/".into()));
        assert_eq!(split("http://[::1]/x"), ("[::1]:80".into(), "/x".into()));
        assert!(split_url("https://host/healthz").is_err());
        assert!(split_url("http:///healthz").is_err());
    }
}

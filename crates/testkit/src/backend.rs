//! The shared stores the multi-worker tests need, read from `DATABASE_URL` / `REDIS_URL`
//! (defaults on loopback). Outside CI a missing service skips the test with a printed
//! reason; in CI (`durable_mcp_store::in_ci`) it fails.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    /// `DATABASE_URL`
    Postgres,
    /// `REDIS_URL`
    Redis,
    /// `REDIS_CLUSTER_URL` (`redis+cluster://...`, from `scripts/redis-cluster.sh`; no default)
    RedisCluster,
}

impl Backend {
    pub fn base(self) -> String {
        match self {
            Backend::Postgres => std::env::var("DATABASE_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
            Backend::Redis => {
                std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
            }
            Backend::RedisCluster => std::env::var("REDIS_CLUSTER_URL")
                .unwrap_or_else(|_| "redis+cluster://127.0.0.1:7000".into()),
        }
    }

    pub fn addr(self) -> SocketAddr {
        let base = self.base();
        let rest = base.split_once("://").unwrap().1;
        let authority = rest.split(['/', '?']).next().unwrap();
        let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        // A cluster's first seed node.
        let host_port = hosts.split(',').next().unwrap();
        let default = match self {
            Backend::Postgres => 5432,
            Backend::Redis | Backend::RedisCluster => 6379,
        };
        let host_port = if host_port.contains(':') {
            host_port.to_owned()
        } else {
            format!("{host_port}:{default}")
        };
        host_port.to_socket_addrs().unwrap().next().unwrap()
    }

    /// Whether the service is reachable; skips (outside CI) or panics (in CI) if not.
    pub fn available(self) -> bool {
        match TcpStream::connect_timeout(&self.addr(), Duration::from_secs(2)) {
            Ok(_) => true,
            Err(error) if durable_mcp_store::in_ci() => {
                panic!(
                    "{self:?} is required in CI but not reachable at {}: {error}",
                    self.base()
                )
            }
            Err(error) => {
                eprintln!(
                    "skipped: {self:?} not reachable at {}: {error}",
                    self.base()
                );
                false
            }
        }
    }

    /// A store URL isolated for one test (its own schema / key prefix), optionally through
    /// `via` instead of the real address.
    pub fn store_url(self, via: Option<SocketAddr>) -> String {
        let tag = format!(
            "t{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
                % 10u128.pow(15)
        );
        let mut base = self.base();
        if let Some(via) = via {
            base = base.replace(&authority_host_port(&base), &via.to_string());
        }
        let sep = if base.contains('?') { '&' } else { '?' };
        match self {
            Backend::Postgres => format!("{base}{sep}schema=dmcp_{tag}"),
            Backend::Redis | Backend::RedisCluster => format!("{base}{sep}prefix=dmcp-{tag}"),
        }
    }
}

fn authority_host_port(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let authority = rest.split(['/', '?']).next().unwrap();
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .to_owned()
}

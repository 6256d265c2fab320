//! Trusted proxy: an authenticating gateway in front of the workers names the caller in a
//! header. The header is believed only on connections from the configured addresses; from
//! anywhere else a request is refused, whatever it carries.

use std::collections::BTreeSet;
use std::net::IpAddr;

use durable_mcp_store::Principal;
use http::{HeaderMap, HeaderName};
use serde_json::Map;

use crate::{AuthError, AuthMethod, Authenticated, ConfigError};

/// An address range (`10.0.0.0/8`, `::1/128`, or a plain address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let bad = || ConfigError::Invalid(format!("{s} is not an address or CIDR range"));
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix.parse::<u8>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(bad());
        }
        Ok(Self { addr, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let full = usize::from(prefix / 8);
    let rest = prefix % 8;
    if a[..full] != b[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    (a[full] & mask) == (b[full] & mask)
}

/// The trusted-proxy mode's settings.
#[derive(Clone, Debug)]
pub struct TrustedProxy {
    /// The header naming the caller (for example `x-authenticated-user`).
    pub header: HeaderName,
    /// The proxies' addresses: the only peers whose header is believed.
    pub from: Vec<Cidr>,
    /// A header with the caller's scopes, space-separated (optional).
    pub scopes_header: Option<HeaderName>,
    /// Scopes every request needs (the endpoint's).
    pub scopes: Vec<String>,
}

impl TrustedProxy {
    /// Believe `header` from peers in `from`.
    pub fn new(header: &str, from: &[&str]) -> Result<Self, ConfigError> {
        let header = HeaderName::try_from(header)
            .map_err(|_| ConfigError::Invalid(format!("{header} is not a header name")))?;
        let from = from
            .iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<Cidr>, _>>()?;
        if from.is_empty() {
            return Err(ConfigError::Invalid(
                "a trusted proxy needs at least one source address".into(),
            ));
        }
        Ok(Self {
            header,
            from,
            scopes_header: None,
            scopes: Vec::new(),
        })
    }

    /// The caller the proxy names, if `peer` is a proxy.
    pub fn verify(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Result<Authenticated, AuthError> {
        let Some(peer) = peer else {
            return Err(AuthError::Missing);
        };
        if !self.from.iter().any(|net| net.contains(peer)) {
            tracing::debug!(%peer, "a request not from a trusted proxy");
            return Err(AuthError::Missing);
        }
        let mut values = headers.get_all(&self.header).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(AuthError::Missing);
        };
        let name = value
            .to_str()
            .map_err(|_| AuthError::InvalidToken("the proxy's header is not visible ASCII".into()))?
            .trim();
        if name.is_empty() {
            return Err(AuthError::Missing);
        }
        let scopes: BTreeSet<String> = match &self.scopes_header {
            Some(h) => headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default(),
            None => BTreeSet::new(),
        };
        Ok(Authenticated {
            principal: Principal::new(format!("proxy:{name}")),
            scopes,
            claims: Map::new(),
            method: AuthMethod::TrustedProxy,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ranges_contain_their_addresses() {
        let net: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(
            net.contains("::ffff:10.1.0.9".parse().unwrap()),
            "IPv4-mapped"
        );
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(
            one.contains("127.0.0.1".parse().unwrap())
                && !one.contains("127.0.0.2".parse().unwrap())
        );
        let odd: Cidr = "192.168.0.0/23".parse().unwrap();
        assert!(
            odd.contains("192.168.1.255".parse().unwrap())
                && !odd.contains("192.168.2.0".parse().unwrap())
        );
        assert!(
            "fd00::/8"
                .parse::<Cidr>()
                .unwrap()
                .contains("fd12::1".parse().unwrap())
        );
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("nope".parse::<Cidr>().is_err());
    }

    #[test]
    fn the_header_is_believed_only_from_the_proxy() {
        let proxy = TrustedProxy::new("x-user", &["10.0.0.0/8"]).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("x-user", "alice".parse().unwrap());
        let ok = proxy
            .verify(&headers, Some("10.9.9.9".parse().unwrap()))
            .unwrap();
        assert_eq!(ok.principal.as_str(), "proxy:alice");
        assert!(matches!(
            proxy.verify(&headers, Some("192.0.2.1".parse().unwrap())),
            Err(AuthError::Missing)
        ));
        assert!(matches!(
            proxy.verify(&headers, None),
            Err(AuthError::Missing)
        ));
        assert!(matches!(
            proxy.verify(&HeaderMap::new(), Some("10.0.0.1".parse().unwrap())),
            Err(AuthError::Missing)
        ));
        headers.append("x-user", "bob".parse().unwrap());
        assert!(
            proxy
                .verify(&headers, Some("10.0.0.1".parse().unwrap()))
                .is_err(),
            "two names: refused"
        );
    }
}

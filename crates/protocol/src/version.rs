//! The MCP protocol versions durable-mcp serves: a closed set with an order.

use std::fmt;
use std::str::FromStr;

/// A protocol version durable-mcp serves, oldest first (the order is the protocol's
/// chronology, so `version >= McpVersion::V2025_11_25` reads as "2025-11-25 or later").
///
/// The set is closed: a version string outside it (`9999-99-99`, `2026-07-29`, `2024-11-05`)
/// does not parse, and is refused as unsupported instead of being taken for its nearest
/// neighbour.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "&'static str")]
pub enum McpVersion {
    /// 2025-03-26 (legacy era: `initialize` sessions).
    V2025_03_26,
    /// 2025-06-18 (legacy era).
    V2025_06_18,
    /// 2025-11-25 (legacy era; priming events, SSE polling, experimental tasks).
    V2025_11_25,
    /// 2026-07-28 (modern era: stateless requests, no `initialize`).
    V2026_07_28,
}

/// A protocol version string that names no version durable-mcp serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported protocol version {0:?}")]
pub struct UnknownVersion(pub String);

impl McpVersion {
    /// Every version served, oldest first.
    pub const ALL: [McpVersion; 4] = [
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
        Self::V2026_07_28,
    ];
    /// The versions served with `initialize` sessions, oldest first.
    pub const LEGACY: [McpVersion; 3] = [Self::V2025_03_26, Self::V2025_06_18, Self::V2025_11_25];
    /// The newest version with `initialize` sessions.
    pub const LATEST_LEGACY: McpVersion = Self::V2025_11_25;
    /// The stateless version (no `initialize`).
    pub const MODERN: McpVersion = Self::V2026_07_28;

    /// The wire form (`"2025-11-25"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// Whether this version is stateless (2026-07-28 and later).
    pub fn is_modern(self) -> bool {
        self >= Self::MODERN
    }

    /// Every version served, in wire form, oldest first (for "supported" lists).
    pub fn supported() -> Vec<String> {
        Self::ALL.iter().map(|v| v.as_str().to_owned()).collect()
    }
}

impl FromStr for McpVersion {
    type Err = UnknownVersion;

    fn from_str(s: &str) -> Result<Self, UnknownVersion> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnknownVersion(s.to_owned()))
    }
}

impl TryFrom<String> for McpVersion {
    type Error = UnknownVersion;

    fn try_from(s: String) -> Result<Self, UnknownVersion> {
        s.parse()
    }
}

impl From<McpVersion> for &'static str {
    fn from(version: McpVersion) -> Self {
        version.as_str()
    }
}

impl fmt::Display for McpVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_versions_do_not_parse_as_their_neighbours() {
        for unknown in [
            "9999-99-99",
            "2026-07-29",
            "2024-11-05",
            "2025-11-26",
            "",
            "2025-11-25 ",
        ] {
            assert_eq!(
                unknown.parse::<McpVersion>(),
                Err(UnknownVersion(unknown.to_owned())),
                "{unknown}"
            );
        }
    }

    #[test]
    fn versions_round_trip_and_are_ordered_by_date() {
        for v in McpVersion::ALL {
            assert_eq!(v.as_str().parse::<McpVersion>(), Ok(v));
            assert_eq!(
                serde_json::to_value(v).ok(),
                Some(serde_json::Value::from(v.as_str()))
            );
        }
        assert!(
            McpVersion::ALL
                .windows(2)
                .all(|w| w[0] < w[1] && w[0].as_str() < w[1].as_str())
        );
        assert!(McpVersion::MODERN.is_modern() && !McpVersion::LATEST_LEGACY.is_modern());
        assert!(serde_json::from_value::<McpVersion>(serde_json::json!("2026-07-29")).is_err());
    }
}

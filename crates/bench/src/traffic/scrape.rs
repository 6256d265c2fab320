//! Reading a server child's Prometheus `/metrics`: the counters the traffic benchmark
//! reports (journal takeovers, streams removed by retention), as differences between a
//! scrape before a load and one after it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::BenchError;

/// `durable_mcp::metrics`' exposition name of the engine's `JOURNAL_TAKEOVERS`
/// (`durable_mcp.journal.takeovers`, crates/engine/src/metrics/mod.rs; docs/metrics.md): dots
/// become underscores and counters get `_total`. Labelled by `from`.
pub const TAKEOVERS: &str = "durable_mcp_journal_takeovers_total";

/// The exposition name of the engine's `RETENTION_REMOVED`
/// (`durable_mcp.retention.removed`), labelled by `kind` (`streams`, `sessions`, `records`).
pub const RETENTION_REMOVED: &str = "durable_mcp_retention_removed_total";

/// The exposition name of the engine's `STORE_OPERATION_DURATION` count: with
/// `operation="prune"`, the retention passes the worker made (one per interval, however
/// many batches each took).
pub const STORE_OPERATION_COUNT: &str = "durable_mcp_store_operation_duration_seconds_count";

/// A series every durable-mcp server that answered a request has: a scrape without it
/// means the names above no longer match what the server exports (or metrics are off),
/// and a count read from it would be a silent zero.
pub const OPERATION_DURATION_COUNT: &str = "mcp_server_operation_duration_seconds_count";

/// How long a scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// One scrape: every sample line of the exposition.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    samples: Vec<Sample>,
}

#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Scrape {
    /// `GET /metrics` of the server at `addr` (HTTP/1.0: the body ends with the connection).
    ///
    /// # Errors
    /// The request failed, took longer than 10 s, or was not answered 200.
    pub async fn read(addr: SocketAddr) -> Result<Self, BenchError> {
        let fetch = async {
            let mut stream = TcpStream::connect(addr).await?;
            stream
                .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
                .await?;
            let mut bytes = Vec::new();
            stream.read_to_end(&mut bytes).await?;
            Ok::<_, BenchError>(bytes)
        };
        let bytes = tokio::time::timeout(SCRAPE_TIMEOUT, fetch)
            .await
            .map_err(|_| BenchError::Timeout("reading /metrics"))??;
        let text = String::from_utf8_lossy(&bytes);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| BenchError::Http(format!("/metrics of {addr}: no end of the head")))?;
        let status = head.split_ascii_whitespace().nth(1).unwrap_or_default();
        if status != "200" {
            return Err(BenchError::Http(format!(
                "/metrics of {addr} answered {status:?}"
            )));
        }
        Ok(Self::parse(body))
    }

    /// The sample lines of a Prometheus text exposition (comments and lines that do not
    /// parse are left out).
    pub fn parse(text: &str) -> Self {
        Self {
            samples: text.lines().filter_map(parse_line).collect(),
        }
    }

    /// Whether any sample of `name` is there.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }

    /// The sum of `name` over its label sets whose `label` is `value` (every label set
    /// with `None`); 0 when there is none (a counter never incremented is not exported).
    pub fn sum(&self, name: &str, label: Option<(&str, &str)>) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                label
                    .is_none_or(|(key, value)| s.labels.iter().any(|(k, v)| k == key && v == value))
            })
            .map(|s| s.value)
            .sum()
    }

    /// `name` summed by the values of `label`, in label order.
    pub fn by_label(&self, name: &str, label: &str) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = Vec::new();
        for sample in self.samples.iter().filter(|s| s.name == name) {
            let key = sample
                .labels
                .iter()
                .find(|(k, _)| k == label)
                .map_or_else(String::new, |(_, v)| v.clone());
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some((_, total)) => *total += sample.value,
                None => out.push((key, sample.value)),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// The increase of counter `name` by `label` from `before` to `after`, without the
/// values that did not grow.
pub fn increase_by_label(
    before: &Scrape,
    after: &Scrape,
    name: &str,
    label: &str,
) -> Vec<(String, u64)> {
    after
        .by_label(name, label)
        .into_iter()
        .map(|(key, value)| {
            let was = before
                .by_label(name, label)
                .into_iter()
                .find(|(k, _)| *k == key)
                .map_or(0.0, |(_, v)| v);
            (key, (value - was).max(0.0).round() as u64)
        })
        .filter(|(_, grew)| *grew > 0)
        .collect()
}

/// `name{a="x",b="y"} 12` or `name 12` (a timestamp after the value is ignored).
fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}')?;
            (
                &line[..open],
                parse_labels(&line[open + 1..close])?,
                &line[close + 1..],
            )
        }
        None => {
            let (name, rest) = line.split_once(char::is_whitespace)?;
            (name, Vec::new(), rest)
        }
    };
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    Some(Sample {
        name: name.trim().to_owned(),
        labels,
        value,
    })
}

/// `a="x",b="y"` (escaped quotes and backslashes in values are kept escaped: the labels
/// read here have plain values).
fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = Some(i);
                    break;
                }
                _ => escaped = false,
            }
        }
        let end = end?;
        labels.push((
            key.trim().trim_start_matches(',').trim().to_owned(),
            after[..end].to_owned(),
        ));
        rest = after[end + 1..].trim_start_matches(',').trim();
    }
    Some(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = "\
# HELP durable_mcp_journal_takeovers_total Journaled runs this worker claimed.
# TYPE durable_mcp_journal_takeovers_total counter
durable_mcp_journal_takeovers_total{from=\"expired\"} 2
durable_mcp_journal_takeovers_total{from=\"resent\"} 5
durable_mcp_retention_removed_total{kind=\"streams\"} 41234
durable_mcp_retention_removed_total{kind=\"sessions\"} 0
mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\",gen_ai_tool_name=\"test_simple_text\"} 90000
durable_mcp_requests_in_flight 3 1700000000000
";

    #[test]
    fn counters_are_summed_by_label() {
        let scrape = Scrape::parse(EXPOSITION);
        assert_eq!(scrape.sum(TAKEOVERS, None), 7.0);
        assert_eq!(scrape.sum(TAKEOVERS, Some(("from", "resent"))), 5.0);
        assert_eq!(
            scrape.sum(RETENTION_REMOVED, Some(("kind", "streams"))),
            41_234.0
        );
        assert_eq!(scrape.sum("durable_mcp_requests_in_flight", None), 3.0);
        assert!(scrape.has(OPERATION_DURATION_COUNT));
        assert_eq!(scrape.sum("absent_total", None), 0.0);
    }

    #[test]
    fn increases_leave_out_what_did_not_grow() {
        let before = Scrape::parse("durable_mcp_journal_takeovers_total{from=\"expired\"} 2\n");
        let after = Scrape::parse(EXPOSITION);
        assert_eq!(
            increase_by_label(&before, &after, TAKEOVERS, "from"),
            [("resent".to_owned(), 5)]
        );
        assert!(increase_by_label(&after, &after, TAKEOVERS, "from").is_empty());
    }

    #[test]
    fn label_values_may_hold_commas_and_escaped_quotes() {
        let sample = parse_line(r#"x_total{a="1,2",b="say \"hi\""} 4"#).expect("parses");
        assert_eq!(
            sample.labels,
            [
                ("a".to_owned(), "1,2".to_owned()),
                ("b".to_owned(), r#"say \"hi\""#.to_owned())
            ]
        );
        assert_eq!(sample.value, 4.0);
    }
}

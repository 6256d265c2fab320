//! Scraping `/metrics` in tests: the Prometheus text exposition parsed into samples, and
//! lookups by exact labels.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use durable_mcp_testkit::{free_port, request_at};

/// One sample of the exposition: its name, labels and value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parse the Prometheus text exposition (the label values here have no `,`, `"` or `}`).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let inner = rest.strip_suffix('}').unwrap();
                    let labels = inner
                        .split(',')
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (k, v) = pair.split_once('=').unwrap();
                            (k.to_owned(), v.trim_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (series.to_owned(), BTreeMap::new()),
            };
            Sample {
                name,
                labels,
                value: value.parse().unwrap(),
            }
        })
        .collect()
}

pub struct Scrape(pub Vec<Sample>, pub String);

impl Scrape {
    /// The samples named `name` whose labels are exactly `labels`.
    pub fn exact(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.0
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.exact(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in\n{}", self.1))
    }

    /// The `_bucket` samples of histogram `name` with `labels` (besides `le`), by bound.
    pub fn buckets(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(String, f64)> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.0
            .iter()
            .filter(|s| s.name == format!("{name}_bucket"))
            .filter(|s| {
                let mut rest = s.labels.clone();
                rest.remove("le");
                rest == want
            })
            .map(|s| (s.labels["le"].clone(), s.value))
            .collect()
    }

    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|s| s.name.as_str()).collect()
    }
}

pub fn scrape(metrics: SocketAddr) -> Scrape {
    let response = request_at(metrics, "GET", "/metrics", &[], None);
    assert_eq!(response.status, 200);
    assert!(
        response
            .header("content-type")
            .unwrap()
            .starts_with("text/plain"),
        "the text exposition format"
    );
    let text = response.body();
    Scrape(parse(&text), text)
}

/// Scrape until `ok` holds (a gauge that goes down when a connection's task ends).
pub fn scrape_until(metrics: SocketAddr, what: &str, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let scraped = scrape(metrics);
        if ok(&scraped) {
            return scraped;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{}",
            scraped.1
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free address on loopback for `--metrics-listen`.
pub fn metrics_addr() -> SocketAddr {
    format!("127.0.0.1:{}", free_port()).parse().unwrap()
}

/// Wait until the metrics listener at `metrics` accepts connections.
pub fn wait_for_listener(metrics: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(metrics).is_err() {
        assert!(
            Instant::now() < deadline,
            "the metrics listener never came up on {metrics}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

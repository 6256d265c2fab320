//! Calls per second against connections, one line per server, as a self-contained SVG
//! (no fonts, scripts or images from elsewhere): the plots `--plot-dir` writes and the
//! report links to.
//!
//! The x axis is log2 (1, 8, 64, 256 connections are evenly spaced), the y axis log10
//! (stock rmcp's tens of thousands of calls per second and a store's hundreds on one
//! plot), each with a tick at every measured connection count and at 1, 2 and 5 times
//! every power of ten in range.

use std::fmt::Write as _;

use crate::client::Era;
use crate::report::{HttpRow, Report, count};

/// One line: a server's calls per second at each connection count it was measured with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    /// The server's label.
    pub(crate) label: String,
    /// Its colour in [`COLOURS`]: the server's place among all the report's servers, so
    /// that a server has the same colour on every era's plot.
    pub(crate) colour: usize,
    /// (connections, calls per second), by connections.
    pub(crate) points: Vec<(usize, f64)>,
}

/// A plot of [`Series`] against connections.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plot {
    /// Its title.
    pub(crate) title: String,
    /// Its lines, in legend order.
    pub(crate) series: Vec<Series>,
}

/// The file name of `era`'s plot.
pub(crate) fn file_name(era: Era) -> String {
    format!("calls-{era}.svg")
}

/// Colours that stay apart on white and for most colour-blind readers (Okabe and Ito),
/// then a few more.
const COLOURS: [&str; 10] = [
    "#000000", "#e69f00", "#56b4e9", "#009e73", "#d55e00", "#0072b2", "#cc79a7", "#f0e442",
    "#7f7f7f", "#8c564b",
];

/// The plotting area's size, and the margins around it (the legend is right of it).
const PLOT_W: f64 = 480.0;
const PLOT_H: f64 = 350.0;
const LEFT: f64 = 80.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
/// Room for a character of the legend (12 px sans-serif is narrower on average).
const CHAR_W: f64 = 7.0;

impl Plot {
    /// `era`'s plot of `report`: a line per server with at least one measured connection
    /// count in that era; `None` when there is none.
    pub(crate) fn calls(report: &Report, era: Era) -> Option<Self> {
        let mut servers: Vec<&str> = Vec::new();
        for row in &report.http {
            if !servers.contains(&row.server.as_str()) {
                servers.push(&row.server);
            }
        }
        let mut series: Vec<Series> = Vec::new();
        for row in report
            .http
            .iter()
            .filter(|row| row.era == era && !row.runs.is_empty())
        {
            let point = (row.connections, HttpRow::per_second(row));
            match series.iter_mut().find(|s| s.label == row.server) {
                Some(line) => line.points.push(point),
                None => series.push(Series {
                    label: row.server.clone(),
                    colour: servers.iter().position(|s| *s == row.server).unwrap_or(0),
                    points: vec![point],
                }),
            }
        }
        for line in &mut series {
            line.points.sort_by_key(|(connections, _)| *connections);
        }
        (!series.is_empty()).then(|| Self {
            title: format!(
                "tools/call per second against connections, {era} era ({})",
                era.version().as_str()
            ),
            series,
        })
    }

    /// The plot as an SVG document.
    pub(crate) fn to_svg(&self) -> String {
        let points = || self.series.iter().flat_map(|s| s.points.iter());
        let mut xs: Vec<usize> = points().map(|(c, _)| (*c).max(1)).collect();
        xs.sort_unstable();
        xs.dedup();
        let rates = || points().map(|(_, r)| *r).filter(|r| *r > 0.0);
        let (low, high) = (
            rates().fold(f64::INFINITY, f64::min),
            rates().fold(0.0, f64::max),
        );
        // Whole decades around the figures (one decade when there are none).
        let (y_min, y_max) = if high > 0.0 {
            (
                10f64.powf(low.log10().floor()),
                10f64.powf(high.log10().ceil().max(low.log10().floor() + 1.0)),
            )
        } else {
            (1.0, 10.0)
        };
        let (x_min, x_max) = (
            xs.first().map_or(0.0, |&c| (c as f64).log2()),
            xs.last().map_or(1.0, |&c| (c as f64).log2()),
        );
        let (plot_w, plot_h) = (PLOT_W, PLOT_H);
        let longest = self
            .series
            .iter()
            .map(|s| s.label.chars().count())
            .max()
            .unwrap_or(0);
        let legend_x = LEFT + plot_w + 30.0;
        let width = (legend_x + 40.0 + CHAR_W * longest as f64).ceil();
        let height = TOP + plot_h + BOTTOM;
        let x = |connections: usize| {
            let v = (connections.max(1) as f64).log2();
            if x_max > x_min {
                LEFT + (v - x_min) / (x_max - x_min) * plot_w
            } else {
                LEFT + plot_w / 2.0
            }
        };
        let y = |rate: f64| {
            let v = rate.max(y_min).log10();
            TOP + plot_h - (v - y_min.log10()) / (y_max.log10() - y_min.log10()) * plot_h
        };

        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            svg,
            r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="28" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
            LEFT + plot_w / 2.0,
            escape(&self.title)
        );
        // Grid and ticks: y at 1, 2, 5 × 10^k, x at every measured connection count.
        let mut decade = y_min;
        while decade < y_max * 1.001 {
            for step in [1.0, 2.0, 5.0] {
                let rate = decade * step;
                if rate > y_max * 1.001 {
                    break;
                }
                let at = y(rate);
                let major = step == 1.0;
                let _ = writeln!(
                    svg,
                    r##"<line x1="{LEFT}" y1="{at:.1}" x2="{:.1}" y2="{at:.1}" stroke="{}" stroke-width="1"/>"##,
                    LEFT + plot_w,
                    if major { "#c8c8c8" } else { "#ececec" }
                );
                let _ = writeln!(
                    svg,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                    LEFT - 6.0,
                    at + 4.0,
                    count(rate)
                );
            }
            decade *= 10.0;
        }
        for &connections in &xs {
            let at = x(connections);
            let _ = writeln!(
                svg,
                r##"<line x1="{at:.1}" y1="{TOP}" x2="{at:.1}" y2="{:.1}" stroke="#ececec" stroke-width="1"/>"##,
                TOP + plot_h
            );
            let _ = writeln!(
                svg,
                r#"<text x="{at:.1}" y="{:.1}" text-anchor="middle">{connections}</text>"#,
                TOP + plot_h + 18.0
            );
        }
        // Axes and their names.
        let _ = writeln!(
            svg,
            r##"<path d="M{LEFT} {TOP} V{:.1} H{:.1}" fill="none" stroke="#000000" stroke-width="1"/>"##,
            TOP + plot_h,
            LEFT + plot_w
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">concurrent keep-alive connections (log2 scale)</text>"#,
            LEFT + plot_w / 2.0,
            height - 18.0
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">calls per second (log scale)</text>"#,
            TOP + plot_h / 2.0
        );
        // One line per server, its points marked, then the legend.
        for (i, line) in self.series.iter().enumerate() {
            let colour = COLOURS[line.colour % COLOURS.len()];
            let coordinates: Vec<String> = line
                .points
                .iter()
                .map(|&(c, r)| format!("{:.1},{:.1}", x(c), y(r)))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"><title>{}</title></polyline>"#,
                coordinates.join(" "),
                escape(&line.label)
            );
            for &(c, r) in &line.points {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"><title>{}: {} calls/s at {c}</title></circle>"#,
                    x(c),
                    y(r),
                    escape(&line.label),
                    count(r)
                );
            }
            let at = TOP + 10.0 + 22.0 * i as f64;
            let from = legend_x;
            let _ = writeln!(
                svg,
                r#"<line x1="{from}" y1="{at}" x2="{}" y2="{at}" stroke="{colour}" stroke-width="2"/>"#,
                from + 24.0
            );
            let _ = writeln!(
                svg,
                r#"<circle cx="{}" cy="{at}" r="3.5" fill="{colour}"/>"#,
                from + 12.0
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}">{}</text>"#,
                from + 32.0,
                at + 4.0,
                escape(&line.label)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// Text as SVG (XML) character data.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot() -> Plot {
        Plot {
            title: "calls <&> per second".into(),
            series: vec![
                Series {
                    label: "stock rmcp".into(),
                    colour: 0,
                    points: vec![(1, 8_000.0), (8, 28_000.0), (64, 27_000.0), (256, 25_000.0)],
                },
                Series {
                    label: "durable-mcp, sqlite".into(),
                    colour: 2,
                    points: vec![(1, 900.0), (8, 3_100.0), (64, 4_500.0), (256, 4_700.0)],
                },
                Series {
                    label: "Python SDK".into(),
                    colour: 1,
                    points: vec![(1, 300.0), (8, 560.0)],
                },
            ],
        }
    }

    /// The (x, y) pairs of every `<polyline>`, in document order.
    fn polylines(svg: &str) -> Vec<Vec<(f64, f64)>> {
        svg.split("<polyline")
            .skip(1)
            .map(|rest| {
                let points = rest
                    .split_once("points=\"")
                    .and_then(|(_, after)| after.split_once('"'))
                    .map(|(points, _)| points)
                    .unwrap_or_default();
                points
                    .split_whitespace()
                    .map(|pair| {
                        let (x, y) = pair.split_once(',').expect("x,y");
                        (x.parse().expect("x"), y.parse().expect("y"))
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn one_line_per_server_with_its_points_left_to_right() {
        let svg = plot().to_svg();
        let lines = polylines(&svg);
        assert_eq!(lines.len(), 3, "{svg}");
        assert_eq!(lines.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
        for line in &lines {
            assert!(
                line.windows(2).all(|w| w[0].0 < w[1].0),
                "x grows along a line: {line:?}"
            );
        }
        // Log2 x: 1, 8, 64 and 256 connections are 0, 3, 6 and 8 steps from the left.
        let xs: Vec<f64> = lines[0].iter().map(|p| p.0).collect();
        let step = (xs[1] - xs[0]) / 3.0;
        assert!((xs[2] - xs[0] - 6.0 * step).abs() < 0.2, "{xs:?}");
        assert!((xs[3] - xs[0] - 8.0 * step).abs() < 0.2, "{xs:?}");
        // More calls per second is higher up (a smaller y).
        assert!(lines[0][1].1 < lines[0][0].1 && lines[1][0].1 > lines[0][0].1);
    }

    #[test]
    fn the_svg_stands_alone_with_title_axes_ticks_and_legend() {
        let svg = plot().to_svg();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(!svg.contains("href"), "nothing from elsewhere");
        assert!(
            svg.contains("calls &lt;&amp;&gt; per second"),
            "escaped title"
        );
        for tick in [
            ">1<",
            ">8<",
            ">64<",
            ">256<",
            ">100<",
            ">1,000<",
            ">10,000<",
            ">100,000<",
        ] {
            assert!(svg.contains(tick), "tick {tick}: {svg}");
        }
        for legend in ["stock rmcp", "durable-mcp, sqlite", "Python SDK"] {
            assert!(svg.contains(&format!(">{legend}</text>")), "{legend}");
        }
        assert!(svg.contains("concurrent keep-alive connections (log2 scale)"));
    }

    #[test]
    fn each_era_gets_its_own_file() {
        assert_eq!(file_name(Era::Legacy), "calls-legacy.svg");
        assert_eq!(file_name(Era::Modern), "calls-modern.svg");
    }
}

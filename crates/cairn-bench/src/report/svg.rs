//! The charts of a `report` directory: grouped bar charts (`ops.svg`, `latency.svg`,
//! `memory.svg`, [`Chart`]) and line charts of ops/s against time, one line per engine
//! (`throughput-MODE.svg`, [`LineChart`]), written by hand as SVG text.
//!
//! Owns: the charts' data, layout and drawing. Must never touch: files (the caller writes the
//! text).
//!
//! Kept by hand rather than drawn by `plotters` (decided for issue 43): a chart's bytes here
//! depend on the records alone, so a report rendered again from the same records is the same
//! byte for byte and diffs cleanly in review (`tests/committed_reports.rs` renders every
//! committed directory twice and compares); `plotters` lays its text out with the machine's
//! fonts (or a font file the crate would have to ship), so the same records would give other
//! bytes on another machine, and it brings a dependency tree far heavier than this file.

use crate::report::format::{compact, limit_text, ms, thousands, trimmed, MIB};
use crate::report::{Report, Row};

impl Report {
    /// ops/s: one group per mode, one bar per engine.
    pub(super) fn ops_chart(&self) -> String {
        let values = self
            .modes
            .iter()
            .map(|mode| {
                let ops = |engine: &String| self.row(engine, mode).map(|r| r.run.ops_per_sec);
                self.engines.iter().map(ops).collect()
            })
            .collect();
        Chart {
            title: "UTxO benchmark: operations per second",
            y_label: "ops/s",
            groups: self.modes.iter().map(|mode| vec![mode.clone()]).collect(),
            series: self.engines.clone(),
            values,
            log: false,
            limit: None,
            format: thousands,
        }
        .render()
    }

    /// Batch latency percentiles per engine and mode, on a log scale.
    pub(super) fn latency_chart(&self) -> String {
        let values = self
            .rows
            .iter()
            .map(|row| {
                let run = &row.run;
                let all = [
                    run.p50_batch_ms,
                    run.p99_batch_ms,
                    run.p999_batch_ms,
                    run.max_batch_ms,
                ];
                all.into_iter().map(Some).collect()
            })
            .collect();
        Chart {
            title: "Batch latency (ms, log scale)",
            y_label: "batch latency, ms",
            groups: self.row_groups(),
            series: ["p50", "p99", "p99.9", "max"].map(String::from).to_vec(),
            values,
            log: true,
            limit: None,
            format: ms,
        }
        .render()
    }

    /// Peak RSS and cgroup peak per engine and mode, with the memory limit as a line.
    pub(super) fn memory_chart(&self) -> String {
        let with_cgroup = self
            .rows
            .iter()
            .any(|r| r.run.cgroup_peak_bytes().is_some());
        let mut series = vec!["peak RSS".to_string()];
        if with_cgroup {
            series.push("cgroup peak".to_string());
        }
        let mib = |bytes: Option<u64>| bytes.map(|b| b as f64 / MIB);
        let values = self
            .rows
            .iter()
            .map(|row| {
                let mut bars = vec![mib(row.run.peak_rss_bytes)];
                if with_cgroup {
                    bars.push(mib(row.run.cgroup_peak_bytes()));
                }
                bars
            })
            .collect();
        let limit = self.memory_limit().map(|bytes| {
            let label = format!("memory limit {}", limit_text(Some(bytes)));
            (bytes as f64 / MIB, label)
        });
        Chart {
            title: "Memory (MiB)",
            y_label: "MiB",
            groups: self.row_groups(),
            series,
            values,
            log: false,
            limit,
            format: |mib| format!("{mib:.0}"),
        }
        .render()
    }

    /// ops/s against time in `mode`: one line per engine whose run recorded its series, in the
    /// engine's colour of the other charts, each point at its window's middle.
    pub(super) fn throughput_chart(&self, mode: &str) -> String {
        let lines = self
            .runs_over_time(mode)
            .map(|run| {
                let colour = self.engines.iter().position(|e| *e == run.engine);
                Line {
                    name: run.engine.clone(),
                    colour: colour.unwrap_or(0),
                    points: (run.throughput.iter())
                        .map(|p| (p.start_s + p.seconds / 2.0, p.ops_per_sec))
                        .collect(),
                }
            })
            .collect();
        LineChart {
            title: format!("UTxO benchmark, {mode}: ops/s against time"),
            y_label: "ops/s",
            lines,
            format: thousands,
        }
        .render()
    }

    /// Two-line group labels, "engine" over "mode", one per row.
    fn row_groups(&self) -> Vec<Vec<String>> {
        let label = |row: &Row| vec![row.run.engine.clone(), row.run.mode.clone()];
        self.rows.iter().map(label).collect()
    }
}

const WIDTH: f64 = 800.0;
const PLOT_LEFT: f64 = 80.0;
const PLOT_RIGHT: f64 = 780.0;
const PLOT_TOP: f64 = 90.0;
const PLOT_BOTTOM: f64 = 360.0;
const PALETTE: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

/// A grouped bar chart (also drawn by `auth`'s report).
pub(crate) struct Chart {
    /// The title above the chart.
    pub(crate) title: &'static str,
    /// The y axis' label.
    pub(crate) y_label: &'static str,
    /// Label lines of each group of bars.
    pub(crate) groups: Vec<Vec<String>>,
    /// The legend: one bar per series in each group.
    pub(crate) series: Vec<String>,
    /// `values[group][series]`; None draws no bar.
    pub(crate) values: Vec<Vec<Option<f64>>>,
    /// A logarithmic y axis.
    pub(crate) log: bool,
    /// A horizontal line (value, label).
    pub(crate) limit: Option<(f64, String)>,
    /// How values are printed above the bars.
    pub(crate) format: fn(f64) -> String,
}

impl Chart {
    /// The SVG document.
    pub(crate) fn render(&self) -> String {
        let label_lines = self.groups.iter().map(Vec::len).max().unwrap_or(1);
        let mut svg = Svg::new(PLOT_BOTTOM + 24.0 + 15.0 * label_lines as f64);
        svg.text(WIDTH / 2.0, 26.0, TITLE_STYLE, self.title);
        self.legend(&mut svg);
        match Scale::fit(self.all_values(), self.log) {
            None => svg.text(WIDTH / 2.0, 220.0, MIDDLE, "no data recorded"),
            Some(scale) => {
                self.axis(&mut svg, &scale);
                self.bars(&mut svg, &scale);
                self.limit_line(&mut svg, &scale);
            }
        }
        self.group_labels(&mut svg);
        svg.finish()
    }

    /// Every value to fit on the axis, the limit included.
    fn all_values(&self) -> Vec<f64> {
        let bars = self.values.iter().flatten().flatten().copied();
        bars.chain(self.limit.as_ref().map(|(value, _)| *value))
            .filter(|v| v.is_finite())
            .collect()
    }

    /// The legend row(s) under the title.
    fn legend(&self, svg: &mut Svg) {
        let entries = self.series.iter().enumerate();
        legend(svg, entries.map(|(i, name)| (name.as_str(), color(i))));
    }

    /// The y axis with ticks and grid lines, and the x axis.
    fn axis(&self, svg: &mut Svg, scale: &Scale) {
        axes(svg, scale, self.y_label);
    }

    /// The bars, each with its value above it.
    fn bars(&self, svg: &mut Svg, scale: &Scale) {
        let group_width = (PLOT_RIGHT - PLOT_LEFT) / self.groups.len().max(1) as f64;
        let bar_width = group_width * 0.8 / self.series.len().max(1) as f64;
        for (g, values) in self.values.iter().enumerate() {
            let group_left = PLOT_LEFT + group_width * (g as f64 + 0.1);
            for (s, value) in values.iter().enumerate() {
                let Some(value) = value.filter(|v| scale.shows(*v)) else {
                    continue;
                };
                let x = group_left + bar_width * s as f64;
                let top = scale.y(value);
                let width = (bar_width - 2.0).max(1.0);
                let text = (self.format)(value);
                let tip = format!("{} {}: {text}", self.groups[g].join(" "), self.series[s]);
                svg.rect(x + 1.0, top, width, PLOT_BOTTOM - top, color(s), &tip);
                value_label(svg, x + bar_width / 2.0, top, bar_width, &text);
            }
        }
    }

    /// The limit as a dashed red line, labelled at the right end of the legend row (above the
    /// plot, where no bar label can cover it).
    fn limit_line(&self, svg: &mut Svg, scale: &Scale) {
        let Some((value, label)) = &self.limit else {
            return;
        };
        let y = scale.y(*value);
        let dash = "stroke-dasharray=\"6 4\" stroke-width=\"1.5\"";
        svg.line((PLOT_LEFT, y), (PLOT_RIGHT, y), "#d62728", dash);
        let text_width = 6.5 * label.chars().count() as f64;
        let sample_right = PLOT_RIGHT - text_width - 6.0;
        svg.line(
            (sample_right - 24.0, 50.0),
            (sample_right, 50.0),
            "#d62728",
            dash,
        );
        let attrs = "font-size=\"11\" text-anchor=\"end\" fill=\"#d62728\"";
        svg.text(PLOT_RIGHT, 54.0, attrs, label);
    }

    /// The label lines under each group.
    fn group_labels(&self, svg: &mut Svg) {
        let group_width = (PLOT_RIGHT - PLOT_LEFT) / self.groups.len().max(1) as f64;
        let size = if group_width < 70.0 { 10 } else { 12 };
        let attrs = format!("font-size=\"{size}\" text-anchor=\"middle\"");
        for (g, lines) in self.groups.iter().enumerate() {
            let x = PLOT_LEFT + group_width * (g as f64 + 0.5);
            for (i, line) in lines.iter().enumerate() {
                svg.text(x, PLOT_BOTTOM + 18.0 + 15.0 * i as f64, &attrs, line);
            }
        }
    }
}

/// The legend row(s) under the title: a swatch of each entry's colour and its name.
fn legend<'a>(svg: &mut Svg, entries: impl Iterator<Item = (&'a str, &'static str)>) {
    let (mut x, mut y) = (PLOT_LEFT, 44.0);
    for (name, colour) in entries {
        let width = 22.0 + 7.0 * name.chars().count() as f64;
        if x + width > PLOT_RIGHT && x > PLOT_LEFT {
            (x, y) = (PLOT_LEFT, y + 18.0);
        }
        svg.rect(x, y, 12.0, 12.0, colour, name);
        svg.text(x + 16.0, y + 10.5, "font-size=\"12\"", name);
        x += width + 12.0;
    }
}

/// The y axis with ticks, grid lines and its label, and the x axis' line.
fn axes(svg: &mut Svg, scale: &Scale, y_label: &str) {
    for tick in scale.ticks() {
        let y = scale.y(tick);
        svg.line((PLOT_LEFT, y), (PLOT_RIGHT, y), "#e0e0e0", "");
        svg.line((PLOT_LEFT - 5.0, y), (PLOT_LEFT, y), "#333333", "");
        let attrs = "font-size=\"11\" text-anchor=\"end\"";
        svg.text(PLOT_LEFT - 8.0, y + 4.0, attrs, &compact(tick));
    }
    svg.line(
        (PLOT_LEFT, PLOT_TOP),
        (PLOT_LEFT, PLOT_BOTTOM),
        "#333333",
        "",
    );
    svg.line(
        (PLOT_LEFT, PLOT_BOTTOM),
        (PLOT_RIGHT, PLOT_BOTTOM),
        "#333333",
        "",
    );
    let (x, y) = (20.0, (PLOT_TOP + PLOT_BOTTOM) / 2.0);
    let attrs = format!("{MIDDLE} transform=\"rotate(-90 {x} {y})\"");
    svg.text(x, y, &attrs, y_label);
}

/// One line of a [`LineChart`].
pub(crate) struct Line {
    /// Its name in the legend and tooltips.
    pub(crate) name: String,
    /// Its colour: the palette's entry of this index (the series' index in the bar charts).
    pub(crate) colour: usize,
    /// Its points, (x in seconds, y), in order of x.
    pub(crate) points: Vec<(f64, f64)>,
}

/// A line chart of values against time: the y axis linear from 0 as the bar charts', the x
/// axis in seconds from 0, or in minutes from ten minutes on.
pub(crate) struct LineChart {
    /// The title above the chart.
    pub(crate) title: String,
    /// The y axis' label.
    pub(crate) y_label: &'static str,
    /// The lines, drawn in order, each with a dot per point.
    pub(crate) lines: Vec<Line>,
    /// How a point's value is printed in its tooltip.
    pub(crate) format: fn(f64) -> String,
}

/// From this many seconds on, the x axis of a [`LineChart`] counts minutes.
const MINUTES_FROM_S: f64 = 600.0;

impl LineChart {
    /// The SVG document.
    pub(crate) fn render(&self) -> String {
        let mut svg = Svg::new(PLOT_BOTTOM + 50.0);
        svg.text(WIDTH / 2.0, 26.0, TITLE_STYLE, &self.title);
        let names = self
            .lines
            .iter()
            .map(|l| (l.name.as_str(), color(l.colour)));
        legend(&mut svg, names);
        let points = || self.lines.iter().flat_map(|l| l.points.iter());
        let ys = points().map(|p| p.1).filter(|y| y.is_finite()).collect();
        let x_max = points()
            .map(|p| p.0)
            .filter(|x| x.is_finite())
            .fold(0.0, f64::max);
        let Some(scale) = Scale::fit(ys, false) else {
            svg.text(WIDTH / 2.0, 220.0, MIDDLE, "no data recorded");
            return svg.finish();
        };
        axes(&mut svg, &scale, self.y_label);
        let (unit, per_unit) = if x_max >= MINUTES_FROM_S {
            ("min", 60.0)
        } else {
            ("s", 1.0)
        };
        let step = nice_step((x_max / per_unit / 6.0).max(1e-3));
        let top = ((x_max / per_unit / step).ceil() * step).max(step);
        let x = |seconds: f64| PLOT_LEFT + seconds / per_unit / top * (PLOT_RIGHT - PLOT_LEFT);
        let ticks = (top / step).round() as usize;
        for i in 0..=ticks {
            let value = i as f64 * step;
            let at = x(value * per_unit);
            svg.line((at, PLOT_BOTTOM), (at, PLOT_BOTTOM + 5.0), "#333333", "");
            let attrs = "font-size=\"11\" text-anchor=\"middle\"";
            svg.text(at, PLOT_BOTTOM + 18.0, attrs, &trimmed(value, 2));
        }
        let label = format!("time since the first timed batch, {unit}");
        svg.text(WIDTH / 2.0, PLOT_BOTTOM + 38.0, MIDDLE, &label);
        for line in &self.lines {
            let colour = color(line.colour);
            let shown: Vec<(f64, f64)> = line
                .points
                .iter()
                .filter(|(t, v)| t.is_finite() && scale.shows(*v))
                .map(|&(t, v)| (x(t), scale.y(v)))
                .collect();
            svg.polyline(&shown, colour, &line.name);
            for (&(t, v), &(px, py)) in line
                .points
                .iter()
                .filter(|(t, v)| t.is_finite() && scale.shows(*v))
                .zip(&shown)
            {
                let time = trimmed(t / per_unit, 1);
                let tip = format!("{} at {time} {unit}: {}", line.name, (self.format)(v));
                svg.circle(px, py, 2.5, colour, &tip);
            }
        }
        svg.finish()
    }
}

const TITLE_STYLE: &str = "font-size=\"16\" font-weight=\"bold\" text-anchor=\"middle\"";
const MIDDLE: &str = "font-size=\"12\" text-anchor=\"middle\"";

/// A value above its bar: horizontal when it fits the bar's width, else vertical.
fn value_label(svg: &mut Svg, center: f64, top: f64, bar_width: f64, text: &str) {
    let text_width = 6.0 * text.chars().count() as f64;
    if text_width <= bar_width + 4.0 {
        let attrs = "font-size=\"10\" text-anchor=\"middle\"";
        svg.text(center, top - 4.0, attrs, text);
    } else {
        let (x, y) = (center + 3.0, top - 4.0);
        let attrs = format!("font-size=\"9\" transform=\"rotate(-90 {x:.1} {y:.1})\"");
        svg.text(x, y, &attrs, text);
    }
}

/// The colour of series `i`.
fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// The y axis: linear from 0, or logarithmic between two powers of ten.
enum Scale {
    Linear { top: f64, step: f64 },
    Log { low: i32, high: i32 },
}

impl Scale {
    /// A scale that holds `values` with room for labels above the tallest bar; None when
    /// there is nothing to draw.
    fn fit(values: Vec<f64>, log: bool) -> Option<Scale> {
        if log {
            let positive = values.into_iter().filter(|v| *v > 0.0);
            let (min, max) = positive.fold(None, |acc: Option<(f64, f64)>, v| match acc {
                None => Some((v, v)),
                Some((min, max)) => Some((min.min(v), max.max(v))),
            })?;
            let low = min.log10().floor() as i32;
            let high = ((max * 3.0).log10().ceil() as i32).max(low + 1);
            return Some(Scale::Log { low, high });
        }
        let max = values.into_iter().filter(|v| *v >= 0.0).reduce(f64::max)?;
        let wanted = if max > 0.0 { max * 1.15 } else { 1.0 };
        let step = nice_step(wanted / 5.0);
        Some(Scale::Linear {
            top: (wanted / step).ceil() * step,
            step,
        })
    }

    /// Whether a bar of `value` can be drawn.
    fn shows(&self, value: f64) -> bool {
        match self {
            Scale::Linear { .. } => value.is_finite() && value >= 0.0,
            Scale::Log { .. } => value.is_finite() && value > 0.0,
        }
    }

    /// The height of `value` as a fraction of the plot, clamped to 0..=1.
    fn fraction(&self, value: f64) -> f64 {
        let fraction = match self {
            Scale::Linear { top, .. } => value / top,
            Scale::Log { low, high } => (value.log10() - f64::from(*low)) / f64::from(high - low),
        };
        fraction.clamp(0.0, 1.0)
    }

    /// The SVG y coordinate of `value`.
    fn y(&self, value: f64) -> f64 {
        PLOT_BOTTOM - self.fraction(value) * (PLOT_BOTTOM - PLOT_TOP)
    }

    /// The tick values.
    fn ticks(&self) -> Vec<f64> {
        match self {
            Scale::Linear { top, step } => {
                let count = (top / step).round() as usize;
                (0..=count).map(|i| i as f64 * step).collect()
            }
            Scale::Log { low, high } => (*low..=*high).map(|e| 10f64.powi(e)).collect(),
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    let mantissa = raw / magnitude;
    let factor = [1.0, 2.0, 5.0]
        .into_iter()
        .find(|f| mantissa <= *f)
        .unwrap_or(10.0);
    factor * magnitude
}

/// A hand-written SVG document.
struct Svg(String);

impl Svg {
    /// The root element with a white background.
    fn new(height: f64) -> Svg {
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
             viewBox=\"0 0 {WIDTH} {height}\" font-family=\"Helvetica, Arial, sans-serif\">\n"
        );
        out.push_str(&format!(
            "<rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"white\"/>\n"
        ));
        Svg(out)
    }

    /// A filled rectangle with a tooltip.
    fn rect(&mut self, x: f64, y: f64, width: f64, height: f64, fill: &str, tip: &str) {
        self.0.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{height:.1}\" \
             fill=\"{fill}\"><title>{}</title></rect>\n",
            xml_escape(tip)
        ));
    }

    /// A line; `extra` holds more attributes.
    fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str, extra: &str) {
        self.0.push_str(&format!(
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{stroke}\" \
             {extra}/>\n",
            from.0, from.1, to.0, to.1
        ));
    }

    /// An open line through `points` with a tooltip.
    fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, tip: &str) {
        let points: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        self.0.push_str(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"2\">\
             <title>{}</title></polyline>\n",
            points.join(" "),
            xml_escape(tip)
        ));
    }

    /// A filled dot with a tooltip.
    fn circle(&mut self, x: f64, y: f64, radius: f64, fill: &str, tip: &str) {
        self.0.push_str(&format!(
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{radius}\" fill=\"{fill}\"><title>{}</title>\
             </circle>\n",
            xml_escape(tip)
        ));
    }

    /// Text at (x, y); `attrs` holds its size, anchor and so on.
    fn text(&mut self, x: f64, y: f64, attrs: &str, text: &str) {
        self.0.push_str(&format!(
            "<text x=\"{x:.1}\" y=\"{y:.1}\" {attrs}>{}</text>\n",
            xml_escape(text)
        ));
    }

    /// The finished document.
    fn finish(mut self) -> String {
        self.0.push_str("</svg>\n");
        self.0
    }
}

/// `text` with XML's special characters escaped.
fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_steps() {
        assert_eq!(xml_escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(nice_step(23.0), 50.0);
        assert_eq!(nice_step(0.15), 0.2);
    }
}

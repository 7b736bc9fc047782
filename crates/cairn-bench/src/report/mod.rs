//! `cairn-bench report --dir DIR`: turns a directory of UTxO benchmark records into a Markdown
//! report (`DIR/README.md`) and three hand-written SVG charts (`ops.svg`, `latency.svg`,
//! `memory.svg`) next to it.
//!
//! Owns: reading the JSON records (`utxo-suite`, `utxo-setup`, `utxo-run`), choosing one run per
//! (engine, mode), the Markdown text and the SVG drawing.
//! May not: run an engine or measure anything. It only reads `*.json` files in DIR (not its
//! subdirectories) and writes `README.md` and the three SVGs; it touches no other file.
//!
//! - Records are identified by their `benchmark`, `engine` and `mode` fields, never by their
//!   file names. JSON files of other benchmarks, JSON without a `benchmark` field and non-JSON
//!   files are skipped; a file that is not valid JSON, or a record that lacks a required field,
//!   is an error naming the file. A directory without any `utxo-run` record is an error.
//! - When several run records share an (engine, mode) the report shows the one with the median
//!   ops/s (the lower middle one for an even count) and says how many there were.
//! - When several `utxo-suite` records are present, the one with the latest date describes the
//!   setup. Without one, the records are described as coming from separate invocations and each
//!   run's own memory limit and fio baseline are used.
//! - Engines are ordered cairn, rocksdb, lmdb, fjall, then others alphabetically; modes serial,
//!   pipelined, lookup-only, then others alphabetically.

pub mod format;
pub mod terminal;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::failure::{Context, Failure};
use crate::record::{RunRecord, SetupRecord, SuiteRecord, RUN, SETUP, SUITE};
use crate::report::format::{rss_mib, MIB};

/// Options of `report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The directory of JSON records (`suite.json`, `setup-*.json`, `run-*.json`); the report
    /// and charts are written into it.
    #[arg(long)]
    pub dir: PathBuf,
}

/// `cairn-bench report`: writes the report and charts, then prints the path of `README.md`
/// and the Markdown to stdout.
pub fn run(args: &ReportArgs) -> Result<(), Failure> {
    let (path, markdown) = write_files(&args.dir)?;
    println!("{}", path.display());
    print!("{markdown}");
    Ok(())
}

/// Writes `README.md`, `ops.svg`, `latency.svg` and `memory.svg` into `dir` from the records
/// in `dir`; returns the path of `README.md`.
pub fn write_report(dir: &Path) -> Result<PathBuf, Failure> {
    write_files(dir).map(|(path, _)| path)
}

/// Writes every file; returns README.md's path and its text.
fn write_files(dir: &Path) -> Result<(PathBuf, String), Failure> {
    let report = Report::new(load(dir)?);
    write_file(&dir.join("ops.svg"), &report.ops_chart())?;
    write_file(&dir.join("latency.svg"), &report.latency_chart())?;
    write_file(&dir.join("memory.svg"), &report.memory_chart())?;
    let markdown = report.markdown();
    let path = dir.join("README.md");
    write_file(&path, &markdown)?;
    Ok((path, markdown))
}

/// Writes one output file.
fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    fs::write(path, text).context(|| format!("report: cannot write {}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Records
// ---------------------------------------------------------------------------------------------

/// One parsed file.
enum Record {
    Suite(SuiteRecord),
    Setup(SetupRecord),
    Run(RunRecord),
    Other,
}

/// Every record of a directory.
#[derive(Default)]
struct Records {
    suite: Option<SuiteRecord>,
    suites: usize,
    setups: Vec<SetupRecord>,
    runs: Vec<RunRecord>,
}

/// Reads every record in `dir`; fails when there is no run record.
fn load(dir: &Path) -> Result<Records, Failure> {
    let mut records = Records::default();
    for path in json_files(dir)? {
        match read_record(&path)? {
            Record::Suite(suite) => records.add_suite(suite),
            Record::Setup(setup) => records.setups.push(setup),
            Record::Run(run) => records.runs.push(run),
            Record::Other => {}
        }
    }
    if records.runs.is_empty() {
        return Err(Failure(format!(
            "report: no {RUN} records (JSON files with \"benchmark\": \"{RUN}\") in {}",
            dir.display()
        )));
    }
    Ok(records)
}

impl Records {
    /// Keeps the suite with the latest date.
    fn add_suite(&mut self, suite: SuiteRecord) {
        self.suites += 1;
        if self.suite.as_ref().is_none_or(|old| suite.date >= old.date) {
            self.suite = Some(suite);
        }
    }
}

/// The `*.json` files directly in `dir`, sorted by name.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>, Failure> {
    let listing = || format!("report: cannot list {}", dir.display());
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).context(listing)? {
        let path = entry.context(listing)?.path();
        if path.extension().is_some_and(|ext| ext == "json") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Parses one file; records of other benchmarks are [`Record::Other`].
fn read_record(path: &Path) -> Result<Record, Failure> {
    let text =
        fs::read_to_string(path).context(|| format!("report: cannot read {}", path.display()))?;
    let value: Value = serde_json::from_str(&text)
        .context(|| format!("report: {} is not valid JSON", path.display()))?;
    let kind = value.get("benchmark").and_then(Value::as_str).unwrap_or("");
    Ok(match kind {
        SUITE => Record::Suite(parse(path, SUITE, value)?),
        SETUP => Record::Setup(parse(path, SETUP, value)?),
        RUN => Record::Run(parse(path, RUN, value)?),
        _ => Record::Other,
    })
}

/// Deserializes a record of kind `kind`.
fn parse<T: DeserializeOwned>(path: &Path, kind: &str, value: Value) -> Result<T, Failure> {
    T::deserialize(value)
        .context(|| format!("report: {} is not a valid {kind} record", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Ordering and selection
// ---------------------------------------------------------------------------------------------

const ENGINE_ORDER: [&str; 4] = ["cairn", "rocksdb", "lmdb", "fjall"];
const MODE_ORDER: [&str; 3] = ["serial", "pipelined", "lookup-only"];
const CAIRN: &str = "cairn";
const SERIAL: &str = "serial";

/// Sort key: position in `order`, then the name (for names not in `order`).
fn rank(order: &[&str], name: &str) -> (usize, String) {
    let position = order.iter().position(|known| *known == name);
    (position.unwrap_or(order.len()), name.to_string())
}

/// The run shown for one (engine, mode) and how many runs it was chosen from.
struct Row {
    run: RunRecord,
    repeats: usize,
}

/// One row per (engine, mode) in report order: the median ops/s run of each group.
fn median_rows(runs: Vec<RunRecord>) -> Vec<Row> {
    let mut groups: BTreeMap<_, Vec<RunRecord>> = BTreeMap::new();
    for run in runs {
        let key = (
            rank(&ENGINE_ORDER, &run.engine),
            rank(&MODE_ORDER, &run.mode),
        );
        groups.entry(key).or_default().push(run);
    }
    let median = |mut group: Vec<RunRecord>| {
        group.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let repeats = group.len();
        let run = group.swap_remove((repeats - 1) / 2);
        Row { run, repeats }
    };
    groups.into_values().map(median).collect()
}

/// `names` without repeats, sorted by `order`.
fn ordered<'a>(order: &[&str], names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut names: Vec<_> = names.map(|name| rank(order, name)).collect();
    names.sort();
    names.dedup();
    names.into_iter().map(|(_, name)| name).collect()
}

// ---------------------------------------------------------------------------------------------
// The report's data
// ---------------------------------------------------------------------------------------------

/// The records, arranged for the report.
struct Report {
    suite: Option<SuiteRecord>,
    suites: usize,
    setups: Vec<SetupRecord>,
    rows: Vec<Row>,
    engines: Vec<String>,
    modes: Vec<String>,
}

impl Report {
    /// Arranges the records: medians of repeated runs, setups in engine order.
    fn new(records: Records) -> Report {
        let rows = median_rows(records.runs);
        let engines = ordered(&ENGINE_ORDER, rows.iter().map(|r| r.run.engine.as_str()));
        let modes = ordered(&MODE_ORDER, rows.iter().map(|r| r.run.mode.as_str()));
        let mut setups = records.setups;
        setups.sort_by_key(|setup| rank(&ENGINE_ORDER, &setup.engine));
        Report {
            suite: records.suite,
            suites: records.suites,
            setups,
            rows,
            engines,
            modes,
        }
    }

    /// The row of (engine, mode), if it ran.
    fn row(&self, engine: &str, mode: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|row| row.run.engine == engine && row.run.mode == mode)
    }

    /// Cairn's ops/s over this peer's, in the same mode (None for Cairn itself).
    fn cairn_ratio(&self, run: &RunRecord) -> Option<f64> {
        if run.engine == CAIRN || run.ops_per_sec <= 0.0 {
            return None;
        }
        let cairn = self.row(CAIRN, &run.mode)?;
        Some(cairn.run.ops_per_sec / run.ops_per_sec)
    }

    /// The qd32 IOPS a run is compared with: the suite's, else the run's own.
    fn qd32(&self, run: &RunRecord) -> Option<f64> {
        match &self.suite {
            Some(suite) => suite.fio_qd32_iops,
            None => run.fio_qd32_iops,
        }
        .filter(|iops| *iops > 0.0)
    }

    /// The memory limit: the suite's, else the one limit every run that has one shares.
    fn memory_limit(&self) -> Option<u64> {
        if let Some(suite) = &self.suite {
            return suite.memory_limit_bytes;
        }
        let limits = distinct(self.rows.iter().filter_map(|r| r.run.memory_limit_bytes));
        match limits.as_slice() {
            [limit] => Some(*limit),
            _ => None,
        }
    }

    /// The entry counts of the runs, e.g. "10M".
    fn entries_text(&self) -> String {
        if let Some(suite) = &self.suite {
            return short_count(suite.entries);
        }
        let counts = distinct(self.rows.iter().map(|r| r.run.entries));
        let texts: Vec<_> = counts.into_iter().map(short_count).collect();
        texts.join(" / ")
    }
}

/// The distinct values, sorted.
fn distinct<T: Ord>(values: impl Iterator<Item = T>) -> Vec<T> {
    let mut values: Vec<T> = values.collect();
    values.sort();
    values.dedup();
    values
}

// ---------------------------------------------------------------------------------------------
// Markdown
// ---------------------------------------------------------------------------------------------

impl Report {
    /// The whole of README.md.
    fn markdown(&self) -> String {
        let sections = [
            self.title(),
            self.warnings(),
            self.provenance(),
            self.run_table(),
            self.setup_table(),
            charts(),
            self.standing(),
        ];
        let sections: Vec<String> = sections.into_iter().filter(|s| !s.is_empty()).collect();
        sections.join("\n")
    }

    /// The title line.
    fn title(&self) -> String {
        let date = match &self.suite {
            Some(suite) => format!(", {}", suite.date),
            None => String::new(),
        };
        format!("# UTxO benchmark, {} entries{date}\n", self.entries_text())
    }

    /// A warning when a checked run found wrong lookups.
    fn warnings(&self) -> String {
        let bad = self.rows.iter().filter(|r| r.run.mismatches > 0).count();
        if bad == 0 {
            return String::new();
        }
        format!("**Warning:** {bad} of the runs below returned wrong lookup results.\n")
    }

    /// "How it was produced".
    fn provenance(&self) -> String {
        let body = match &self.suite {
            Some(suite) => suite_provenance(suite, self.suites),
            None => self.separate_provenance(),
        };
        format!("## How it was produced\n\n{body}")
    }

    /// Provenance without `suite.json`.
    fn separate_provenance(&self) -> String {
        let runs = || self.rows.iter().map(|r| &r.run);
        let limits = distinct(runs().map(|run| run.memory_limit_bytes));
        let limits: Vec<_> = limits.into_iter().map(limit_text).collect();
        let fio = distinct(runs().map(|run| fio_text(run.fio_qd1_iops, run.fio_qd32_iops)));
        let lines = [
            "These records come from separate invocations (there is no `utxo-suite` record), \
             so there is no single command, commit, machine description or date; each run's own \
             memory limit and fio baseline are used."
                .to_string(),
            String::new(),
            format!("- Memory limit: {}.", limits.join("; ")),
            "- Page cache: not recorded whether it was dropped before each run.".to_string(),
            format!("- fio 4 KiB random reads: {}.", fio.join("; ")),
        ];
        lines.join("\n") + "\n"
    }

    /// The main table: one row per engine and mode.
    fn run_table(&self) -> String {
        let mut lines = vec![
            "## Results\n".to_string(),
            "| engine | mode | ops/s | Cairn / engine | ops / fio qd32 IOPS | p50 ms | p99 ms \
             | p99.9 ms | max ms | peak RSS MiB | cgroup peak MiB | read B/op | written B/op \
             | check |"
                .to_string(),
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|".to_string(),
        ];
        lines.extend(self.rows.iter().map(|row| self.run_line(row)));
        lines.push(String::new());
        lines.push(TABLE_NOTES.to_string());
        lines.join("\n")
    }

    /// One line of the main table.
    fn run_line(&self, row: &Row) -> String {
        let run = &row.run;
        let mode = match row.repeats {
            1 => run.mode.clone(),
            n => format!("{} (median of {n} runs)", run.mode),
        };
        let ops = run.ops_per_sec * run.seconds;
        let cells = [
            md_cell(&run.engine),
            md_cell(&mode),
            thousands(run.ops_per_sec),
            or_dash(self.cairn_ratio(run), |r| format!("{r:.1}x")),
            or_dash(self.qd32(run), |iops| {
                format!("{:.2}", run.ops_per_sec / iops)
            }),
            ms(run.p50_batch_ms),
            ms(run.p99_batch_ms),
            ms(run.p999_batch_ms),
            ms(run.max_batch_ms),
            or_dash(run.peak_rss_bytes, mib_text),
            or_dash(run.cgroup_peak_bytes(), mib_text),
            or_dash(per_op(run.bytes_read, ops), per_op_text),
            or_dash(per_op(run.bytes_written, ops), per_op_text),
            check_text(run),
        ];
        format!("| {} |", cells.join(" | "))
    }

    /// The setup table.
    fn setup_table(&self) -> String {
        if self.setups.is_empty() {
            return format!("## Setup\n\nNo `{SETUP}` records in this directory.\n");
        }
        let mut lines = vec![
            "## Setup\n".to_string(),
            "| engine | settings | entries | setup s | entries/s | peak RSS MiB |".to_string(),
            "|---|---|--:|--:|--:|--:|".to_string(),
        ];
        lines.extend(self.setups.iter().map(setup_line));
        lines.join("\n") + "\n"
    }

    /// "Where Cairn stands", computed from the serial runs.
    fn standing(&self) -> String {
        let text = match self.row(CAIRN, SERIAL) {
            None => "There is no Cairn serial run in this directory to place.".to_string(),
            Some(cairn) => format!(
                "{} {}",
                self.fio_sentence(&cairn.run),
                self.peer_sentence(cairn.run.ops_per_sec)
            ),
        };
        format!("## Where Cairn stands\n\n{text}\n")
    }

    /// Cairn's serial ops/s against the disk and lsm-tree's published ratio.
    fn fio_sentence(&self, cairn: &RunRecord) -> String {
        let ops = thousands(cairn.ops_per_sec);
        let Some(qd32) = self.qd32(cairn) else {
            return format!(
                "Cairn's serial run did {ops} ops/s. No fio baseline was recorded, so it cannot \
                 be set against lsm-tree's published serial ratio of 0.25 to 0.33 of fio IOPS."
            );
        };
        // Judged as printed, to two decimals.
        let ratio = (cairn.ops_per_sec / qd32 * 100.0).round() / 100.0;
        let verdict = if ratio < 0.25 {
            "below"
        } else if ratio <= 0.33 {
            "within"
        } else {
            "above"
        };
        format!(
            "Cairn's serial run did {ops} ops/s, {ratio:.2} of the disk's {} fio qd32 IOPS; \
             lsm-tree publishes a serial ratio of 0.25 to 0.33 of fio IOPS, so Cairn is \
             {verdict} that range.",
            thousands(qd32)
        )
    }

    /// The lowest and highest Cairn / peer ratios in serial mode.
    fn peer_sentence(&self, cairn_ops: f64) -> String {
        let mut ratios: Vec<(f64, &str)> = self
            .rows
            .iter()
            .map(|row| &row.run)
            .filter(|run| run.mode == SERIAL && run.engine != CAIRN && run.ops_per_sec > 0.0)
            .map(|run| (cairn_ops / run.ops_per_sec, run.engine.as_str()))
            .collect();
        ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
        match ratios.as_slice() {
            [] => "No peer engine ran in serial mode.".to_string(),
            [(ratio, engine)] => {
                format!("In serial mode Cairn did {ratio:.1}x the ops/s of {engine}.")
            }
            [(low, low_engine), .., (high, high_engine)] => format!(
                "In serial mode Cairn did between {low:.1}x (against {low_engine}) and \
                 {high:.1}x (against {high_engine}) the ops/s of its peers."
            ),
        }
    }
}

/// What the main table's columns mean.
const TABLE_NOTES: &str = "ops/s counts lookups, inserts and deletes. Cairn / engine is \
Cairn's ops/s over the engine's in the same mode. ops / fio qd32 IOPS divides ops/s by the \
disk's 4 KiB random-read IOPS at queue depth 32. Batch latencies are in milliseconds. B/op is \
the bytes the process read or wrote during the run divided by the operations of the run. \
When an engine and mode ran several times, the run with the median ops/s is shown.\n";

/// Provenance from `suite.json`.
fn suite_provenance(suite: &SuiteRecord, suites: usize) -> String {
    let machine = &suite.machine;
    let fence = if suite.command.contains("```") {
        "~~~~"
    } else {
        "```"
    };
    let known = |text: &Option<String>| md_cell(text.as_deref().unwrap_or("unknown"));
    let memory = or_unknown(machine.mem_total_bytes, |b| {
        format!("{:.1}", b as f64 / GIB)
    });
    let mut lines = vec![
        format!(
            "- Machine: {}, {} cores, {memory} GiB memory, kernel {}.",
            known(&machine.cpu),
            machine.cores,
            known(&machine.kernel)
        ),
        format!("- Commit: `{}`.", known(&suite.commit)),
        format!(
            "- Workload: {} entries, {} batches per run.",
            thousands(suite.entries as f64),
            thousands(suite.batches as f64)
        ),
        format!("- Memory limit: {}.", limit_and_cgroup(suite)),
        format!(
            "- Page cache: {}.",
            page_cache_text(suite.page_cache_dropped)
        ),
        format!(
            "- fio 4 KiB random reads: {}.",
            fio_text(suite.fio_qd1_iops, suite.fio_qd32_iops)
        ),
        String::new(),
        "The command:".to_string(),
        String::new(),
        format!("{fence}sh\n{}\n{fence}", suite.command),
    ];
    if suites > 1 {
        lines.push(String::new());
        lines.push(format!(
            "The directory holds {suites} `{SUITE}` records; this one is the latest ({}).",
            suite.date
        ));
    }
    lines.join("\n") + "\n"
}

/// `f(value)` or "unknown".
fn or_unknown<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "unknown".to_string(), f)
}

/// The memory limit and the cgroup version, in words.
fn limit_and_cgroup(suite: &SuiteRecord) -> String {
    let cgroup = match &suite.cgroup {
        Some(version) => format!("cgroup {version}"),
        None => "no cgroup support on this machine".to_string(),
    };
    format!("{} ({cgroup})", limit_text(suite.memory_limit_bytes))
}

/// A memory limit in words.
fn limit_text(limit: Option<u64>) -> String {
    match limit {
        Some(bytes) => format!("{} MiB", thousands(bytes as f64 / MIB)),
        None => "no memory limit".to_string(),
    }
}

/// Whether the page cache was dropped, in words.
fn page_cache_text(dropped: bool) -> &'static str {
    if dropped {
        "dropped before each run"
    } else {
        "**could not be dropped** before the runs, so they may have read from a warm cache"
    }
}

/// The fio baseline in words.
fn fio_text(qd1: Option<f64>, qd32: Option<f64>) -> String {
    match (qd1, qd32) {
        (None, None) => "not measured".to_string(),
        _ => format!(
            "{} IOPS at queue depth 1, {} IOPS at queue depth 32",
            or_dash(qd1, thousands),
            or_dash(qd32, thousands)
        ),
    }
}

/// One line of the setup table.
fn setup_line(setup: &SetupRecord) -> String {
    let cells = [
        md_cell(&setup.engine),
        md_cell(&setup.settings),
        thousands(setup.entries as f64),
        format!("{:.1}", setup.setup_seconds),
        thousands(setup.setup_entries_per_sec),
        or_dash(setup.peak_rss_bytes, mib_text),
    ];
    format!("| {} |", cells.join(" | "))
}

/// The chart images.
fn charts() -> String {
    "## Charts\n\n![ops/s](ops.svg)\n\n![batch latency](latency.svg)\n\n![memory](memory.svg)\n"
        .to_string()
}

/// The check result of a run.
fn check_text(run: &RunRecord) -> String {
    match (run.checked, run.mismatches) {
        (false, _) => "not checked".to_string(),
        (true, 1) => "1 mismatch".to_string(),
        (true, n) => format!("{n} mismatches"),
    }
}

/// `bytes / ops`, when both are known.
fn per_op(bytes: Option<u64>, ops: f64) -> Option<f64> {
    bytes.filter(|_| ops > 0.0).map(|b| b as f64 / ops)
}

/// Bytes per operation: one decimal below 100.
fn per_op_text(bytes: f64) -> String {
    if bytes >= 100.0 {
        thousands(bytes)
    } else {
        format!("{bytes:.1}")
    }
}

/// A table cell: pipes escaped, no line breaks, no HTML.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|")
        .replace('<', "&lt;")
        .replace(['\n', '\r'], " ")
}

/// `f(value)` or an em dash.
fn or_dash<T>(value: Option<T>, f: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "—".to_string(), f)
}

// ---------------------------------------------------------------------------------------------
// Number formats
// ---------------------------------------------------------------------------------------------

const GIB: f64 = 1024.0 * MIB;

/// Rounded to an integer with thousands separators: 128929.1 → "128,929".
fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// Bytes in MiB, one decimal.
fn mib_text(bytes: u64) -> String {
    rss_mib(Some(bytes))
}

/// Milliseconds with about three significant digits.
fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A count in short form: 10000000 → "10M", 250000 → "250k", 1500000 → "1.5M".
fn short_count(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{}M", trimmed(n as f64 / 1e6, 2))
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}k", n / 1_000)
    } else {
        thousands(n as f64)
    }
}

/// Compact axis numbers: 120000 → "120k", 0.5 → "0.5".
fn compact(value: f64) -> String {
    if value >= 1e6 {
        format!("{}M", trimmed(value / 1e6, 1))
    } else if value >= 1e3 {
        format!("{}k", trimmed(value / 1e3, 1))
    } else {
        trimmed(value, 2)
    }
}

/// `value` with at most `decimals` decimals, trailing zeros removed.
fn trimmed(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

// ---------------------------------------------------------------------------------------------
// Charts
// ---------------------------------------------------------------------------------------------

impl Report {
    /// ops/s: one group per mode, one bar per engine.
    fn ops_chart(&self) -> String {
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
    fn latency_chart(&self) -> String {
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
    fn memory_chart(&self) -> String {
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

/// A grouped bar chart.
struct Chart {
    title: &'static str,
    y_label: &'static str,
    /// Label lines of each group of bars.
    groups: Vec<Vec<String>>,
    /// The legend: one bar per series in each group.
    series: Vec<String>,
    /// `values[group][series]`; None draws no bar.
    values: Vec<Vec<Option<f64>>>,
    log: bool,
    /// A horizontal line (value, label).
    limit: Option<(f64, String)>,
    /// How values are printed above the bars.
    format: fn(f64) -> String,
}

impl Chart {
    /// The SVG document.
    fn render(&self) -> String {
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
        let (mut x, mut y) = (PLOT_LEFT, 44.0);
        for (i, name) in self.series.iter().enumerate() {
            let width = 22.0 + 7.0 * name.chars().count() as f64;
            if x + width > PLOT_RIGHT && x > PLOT_LEFT {
                (x, y) = (PLOT_LEFT, y + 18.0);
            }
            svg.rect(x, y, 12.0, 12.0, color(i), name);
            svg.text(x + 16.0, y + 10.5, "font-size=\"12\"", name);
            x += width + 12.0;
        }
    }

    /// The y axis with ticks and grid lines, and the x axis.
    fn axis(&self, svg: &mut Svg, scale: &Scale) {
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
        svg.text(x, y, &attrs, self.y_label);
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
    use serde_json::json;

    /// Writes `value` as `dir/name`.
    fn put(dir: &Path, name: &str, value: &Value) {
        fs::write(dir.join(name), serde_json::to_string_pretty(value).unwrap()).unwrap();
    }

    fn suite() -> Value {
        json!({
            "benchmark": "utxo-suite", "date": "2026-11-23T03:10:00Z", "commit": "abc1234",
            "command": "cairn-bench utxo suite --db /data --entries 10000000 --batches 10000",
            "machine": {"cpu": "AMD EPYC <test> & co", "cores": 2,
                        "mem_total_bytes": 25_000_000_000u64, "kernel": "6.18.0"},
            "entries": 10_000_000, "batches": 10000, "memory_limit_bytes": 1_073_741_824u64,
            "cgroup": "v1", "page_cache_dropped": true, "fio_qd1_iops": 30261.0,
            "fio_qd32_iops": 400000.0, "engines": ["cairn", "lmdb"], "modes": ["serial"]
        })
    }

    fn setup(engine: &str) -> Value {
        json!({
            "benchmark": "utxo-setup", "engine": engine, "settings": "a | b", "entries": 10_000_000,
            "setup_seconds": 41.48, "setup_entries_per_sec": 241071.6,
            "peak_rss_bytes": 44_601_344, "bytes_read": 6_221_824, "bytes_written": 4_790_452_224u64
        })
    }

    fn run(engine: &str, mode: &str, ops: f64) -> Value {
        json!({
            "benchmark": "utxo-run", "engine": engine, "settings": "s", "mode": mode,
            "entries": 10_000_000, "batches": 10000, "checked": true, "mismatches": 0,
            "ops_per_sec": ops, "seconds": 10.0, "p50_batch_ms": 5.5, "p99_batch_ms": 13.8,
            "p999_batch_ms": 48.0, "max_batch_ms": 591.0, "peak_rss_bytes": 73_400_320,
            "bytes_read": 4_096_000, "bytes_written": null, "memory_limit_bytes": 1_073_741_824u64,
            "fio_qd1_iops": null, "fio_qd32_iops": null, "cgroup_peak_bytes": 1_048_576_000u64
        })
    }

    /// A directory with a suite, two setups and cairn/lmdb runs in two modes.
    fn full_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "suite.json", &suite());
        put(dir.path(), "setup-cairn.json", &setup("cairn"));
        put(dir.path(), "a.json", &setup("lmdb"));
        put(dir.path(), "run-1.json", &run("lmdb", "serial", 30000.0));
        put(dir.path(), "run-2.json", &run("cairn", "serial", 120000.0));
        put(
            dir.path(),
            "run-3.json",
            &run("cairn", "lookup-only", 200000.0),
        );
        put(
            dir.path(),
            "run-4.json",
            &run("lmdb", "lookup-only", 100000.0),
        );
        put(
            dir.path(),
            "other.json",
            &json!({"benchmark": "union", "x": 1}),
        );
        fs::write(dir.path().join("notes.txt"), "not a record").unwrap();
        dir
    }

    /// Checks that `svg` is a well-formed-ish document: one `<svg>` root, balanced tags,
    /// no stray `<` or `&` in text.
    fn check_svg(svg: &str) {
        assert!(svg.starts_with("<svg "), "{svg}");
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            check_text(&rest[..start]);
            let end = rest[start..].find('>').expect("unclosed tag") + start;
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name), "unbalanced </{name}>");
            } else {
                check_attributes(tag);
                if !tag.ends_with('/') {
                    stack.push(tag.split_whitespace().next().unwrap());
                }
            }
            assert!(
                !stack.is_empty() || rest[end + 1..].trim().is_empty(),
                "after root"
            );
            rest = &rest[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    /// Attributes of a start tag: quoted, each name once.
    fn check_attributes(tag: &str) {
        let mut names = Vec::new();
        for (i, part) in tag.split('"').enumerate() {
            if i % 2 == 0 {
                let name = part.split_whitespace().last().unwrap_or("");
                if let Some(name) = name.strip_suffix('=') {
                    assert!(!names.contains(&name), "{name} twice in <{tag}>");
                    names.push(name);
                }
            }
        }
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in <{tag}>"
        );
    }

    /// Text between tags: entities only.
    fn check_text(text: &str) {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..text[i..].find(';').unwrap() + i + 1];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&entity),
                "{entity}"
            );
        }
    }

    fn read(dir: &Path, name: &str) -> String {
        fs::read_to_string(dir.join(name)).unwrap()
    }

    #[test]
    fn writes_rows_ratios_and_charts() {
        let dir = full_dir();
        let path = write_report(dir.path()).unwrap();
        assert_eq!(path, dir.path().join("README.md"));
        let md = read(dir.path(), "README.md");
        assert!(md.starts_with("# UTxO benchmark, 10M entries, 2026-11-23T03:10:00Z\n"));
        let cairn =
            "| cairn | serial | 120,000 | — | 0.30 | 5.50 | 13.8 | 48.0 | 591 | 70.0 | 1000.0 \
                     | 3.4 | — | 0 mismatches |";
        assert!(md.contains(cairn), "{md}");
        assert!(md.contains("| lmdb | serial | 30,000 | 4.0x |"), "{md}");
        assert!(
            md.contains("| lmdb | lookup-only | 100,000 | 2.0x |"),
            "{md}"
        );
        // Order: cairn before lmdb, serial before lookup-only.
        let at = |text: &str| md.find(text).unwrap();
        assert!(at("| cairn | serial") < at("| cairn | lookup-only"));
        assert!(at("| cairn | lookup-only") < at("| lmdb | serial"));
        assert!(md.contains("| cairn | a \\| b | 10,000,000 | 41.5 | 241,072 | 42.5 |"));
        assert!(md.contains("23.3 GiB memory"));
        assert!(md.contains("1,024 MiB (cgroup v1)"));
        assert!(md.contains("dropped before each run"));
        assert!(md.contains("30,261 IOPS at queue depth 1, 400,000 IOPS at queue depth 32"));
        assert!(md.contains("```sh\ncairn-bench utxo suite --db /data"));
        assert!(md.contains("![ops/s](ops.svg)"));
        assert!(md.contains("0.30 of the disk's 400,000 fio qd32 IOPS"));
        assert!(md.contains("so Cairn is within that range"));
        assert!(md.contains("Cairn did 4.0x the ops/s of lmdb"));

        let ops = read(dir.path(), "ops.svg");
        check_svg(&ops);
        for text in [
            "120,000",
            "30,000",
            "200,000",
            "serial",
            "lookup-only",
            ">cairn<",
        ] {
            assert!(ops.contains(text), "{text} in {ops}");
        }
        let latency = read(dir.path(), "latency.svg");
        check_svg(&latency);
        for text in [">5.50<", ">13.8<", ">48.0<", ">591<", ">p99.9<"] {
            assert!(latency.contains(text), "{text} in {latency}");
        }
        let memory = read(dir.path(), "memory.svg");
        check_svg(&memory);
        for text in [">70<", ">1000<", "memory limit 1,024 MiB", ">cgroup peak<"] {
            assert!(memory.contains(text), "{text} in {memory}");
        }
    }

    #[test]
    fn shows_the_median_of_repeated_runs_and_peer_range() {
        let dir = full_dir();
        put(dir.path(), "run-5.json", &run("cairn", "serial", 100000.0));
        put(dir.path(), "run-6.json", &run("cairn", "serial", 150000.0));
        put(dir.path(), "run-7.json", &run("rocksdb", "serial", 60000.0));
        let mut no_cache = suite();
        no_cache["page_cache_dropped"] = json!(false);
        no_cache["cgroup"] = Value::Null;
        no_cache["memory_limit_bytes"] = Value::Null;
        no_cache["commit"] = Value::Null;
        no_cache["machine"] = json!({"cpu": null, "cores": 2, "mem_total_bytes": null});
        put(dir.path(), "suite.json", &no_cache);
        write_report(dir.path()).unwrap();
        let md = read(dir.path(), "README.md");
        assert!(
            md.contains("| cairn | serial (median of 3 runs) | 120,000 |"),
            "{md}"
        );
        assert!(md.contains("| rocksdb | serial | 60,000 | 2.0x |"), "{md}");
        assert!(md.find("| rocksdb | serial") < md.find("| lmdb | serial"));
        assert!(md.contains("between 2.0x (against rocksdb) and 4.0x (against lmdb)"));
        assert!(md.contains("**could not be dropped**"));
        assert!(md.contains("no memory limit (no cgroup support on this machine)"));
        let machine = "- Machine: unknown, 2 cores, unknown GiB memory, kernel unknown.";
        assert!(md.contains(machine), "{md}");
        assert!(md.contains("- Commit: `unknown`."));
        check_svg(&read(dir.path(), "memory.svg"));
    }

    #[test]
    fn separate_invocations_use_each_runs_own_figures() {
        let dir = tempfile::tempdir().unwrap();
        let mut cairn = run("cairn", "serial", 120000.0);
        cairn["fio_qd32_iops"] = json!(600000.0);
        cairn["fio_qd1_iops"] = json!(20000.0);
        put(dir.path(), "x.json", &cairn);
        let mut fjall = run("fjall", "pipelined", 50000.0);
        fjall["checked"] = json!(false);
        fjall.as_object_mut().unwrap().remove("peak_rss_bytes");
        fjall.as_object_mut().unwrap().remove("cgroup_peak_bytes");
        put(dir.path(), "y.json", &fjall);
        write_report(dir.path()).unwrap();
        let md = read(dir.path(), "README.md");
        assert!(md.starts_with("# UTxO benchmark, 10M entries\n"), "{md}");
        assert!(md.contains("separate invocations"));
        assert!(
            md.contains("| cairn | serial | 120,000 | — | 0.20 |"),
            "{md}"
        );
        assert!(
            md.contains("| fjall | pipelined | 50,000 | — | — |"),
            "{md}"
        );
        assert!(md.contains("| — | — | 8.2 | — | not checked |"), "{md}");
        assert!(md.contains("- Memory limit: 1,024 MiB."));
        assert!(md.contains("20,000 IOPS at queue depth 1, 600,000 IOPS at queue depth 32"));
        assert!(md.contains("not measured"));
        assert!(md.contains("No `utxo-setup` records"));
        assert!(md.contains("so Cairn is below that range"));
        assert!(md.contains("No peer engine ran in serial mode."));
        for name in ["ops.svg", "latency.svg", "memory.svg"] {
            check_svg(&read(dir.path(), name));
        }
    }

    #[test]
    fn malformed_json_names_the_file() {
        let dir = full_dir();
        fs::write(dir.path().join("run-bad.json"), "{\"benchmark\": ").unwrap();
        let err = write_report(dir.path()).unwrap_err().0;
        assert!(
            err.contains("run-bad.json") && err.contains("not valid JSON"),
            "{err}"
        );
    }

    #[test]
    fn missing_field_names_the_file_and_field() {
        let dir = full_dir();
        let mut bad = run("cairn", "serial", 1.0);
        bad.as_object_mut().unwrap().remove("ops_per_sec");
        put(dir.path(), "run-missing.json", &bad);
        let err = write_report(dir.path()).unwrap_err().0;
        assert!(
            err.contains("run-missing.json") && err.contains("ops_per_sec"),
            "{err}"
        );
    }

    #[test]
    fn empty_or_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_report(dir.path()).unwrap_err().0;
        assert!(err.contains("no utxo-run records"), "{err}");
        put(dir.path(), "setup-cairn.json", &setup("cairn"));
        assert!(write_report(dir.path()).is_err());
        let err = write_report(&dir.path().join("nope")).unwrap_err().0;
        assert!(err.contains("cannot list") && err.contains("nope"), "{err}");
    }

    #[test]
    fn formats_numbers() {
        assert_eq!(thousands(128929.1), "128,929");
        assert_eq!(thousands(999.6), "1,000");
        assert_eq!(thousands(12.0), "12");
        assert_eq!(short_count(10_000_000), "10M");
        assert_eq!(short_count(1_500_000), "1.5M");
        assert_eq!(short_count(250_000), "250k");
        assert_eq!(short_count(1234), "1,234");
        assert_eq!(compact(120000.0), "120k");
        assert_eq!(compact(0.5), "0.5");
        assert_eq!(xml_escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(nice_step(23.0), 50.0);
        assert_eq!(nice_step(0.15), 0.2);
    }
}

//! Rendering: the results table each command prints ([`terminal`]), and `cairn-bench report
//! --dir DIR`, which turns a directory of UTxO benchmark records into a Markdown report
//! (`DIR/README.md`, [`markdown`], with the throughput over time and the merge work per level
//! in [`over_time`]) and hand-written SVG charts ([`svg`]) next to it: `ops.svg`, `latency.svg`,
//! `memory.svg`, and `throughput-MODE.svg` (ops/s against time, one line per engine) for each
//! mode whose runs recorded their throughput series.
//!
//! Owns: the `report` command, choosing one run per (engine, mode), the order of engines and
//! modes, and the disk's drift ([`Report`]); reading the records is [`load`](mod@load)'s,
//! number formats are [`format`](mod@format)'s. May not: run an engine or measure anything. It
//! only reads `*.json` files in DIR (not its subdirectories) and writes `README.md` and the
//! SVGs named above; it touches no other file.
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
//! - When the suite's fio qd32 IOPS measured after the runs differs from the one measured
//!   before by more than [`DRIFT_FLAGGED`] of the first, the report says so at the top and
//!   gives every ratio to the disk's IOPS against both figures.

pub mod format;
mod load;
mod markdown;
mod over_time;
pub(crate) mod svg;
pub mod table;
pub mod terminal;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::cli::ReportArgs;
use crate::failure::{Context, Failure};
use crate::record::{RunRecord, SetupRecord, SuiteRecord};
use crate::report::format::short_count;
use crate::report::load::{load, Records};

/// `cairn-bench report`: writes the report and charts, then prints the path of `README.md`
/// and the Markdown to stdout.
pub fn run(args: &ReportArgs) -> Result<(), Failure> {
    let (path, markdown) = write_files(&args.dir)?;
    println!("{}", path.display());
    print!("{markdown}");
    Ok(())
}

/// Writes `README.md`, `ops.svg`, `latency.svg`, `memory.svg` and the `throughput-MODE.svg`
/// of each mode with a throughput series into `dir` from the records in `dir`; returns the path
/// of `README.md`.
pub fn write_report(dir: &Path) -> Result<PathBuf, Failure> {
    write_files(dir).map(|(path, _)| path)
}

/// Writes every file; returns README.md's path and its text.
fn write_files(dir: &Path) -> Result<(PathBuf, String), Failure> {
    let report = Report::new(load(dir)?);
    write_file(&dir.join("ops.svg"), &report.ops_chart())?;
    write_file(&dir.join("latency.svg"), &report.latency_chart())?;
    write_file(&dir.join("memory.svg"), &report.memory_chart())?;
    for mode in report.modes_over_time() {
        let chart = report.throughput_chart(&mode);
        write_file(&dir.join(throughput_file(&mode)), &chart)?;
    }
    let markdown = report.markdown();
    let path = dir.join("README.md");
    write_file(&path, &markdown)?;
    Ok((path, markdown))
}

/// Writes one output file.
fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    fs::write(path, text).context(|| format!("report: cannot write {}", path.display()))
}

/// The report's order of engines (others follow, alphabetically).
const ENGINE_ORDER: [&str; 4] = ["cairn", "rocksdb", "lmdb", "fjall"];
/// The report's order of modes (others follow, alphabetically).
const MODE_ORDER: [&str; 3] = ["serial", "pipelined", "lookup-only"];
/// The engine the report is about.
const CAIRN: &str = "cairn";
/// The drift of the disk's fio qd32 IOPS over an invocation (after over before, either way)
/// from which the report flags it: 10%.
pub const DRIFT_FLAGGED: f64 = 0.10;

/// The chart of `mode`'s throughput over time: `throughput-MODE.svg`, the mode's name kept to
/// letters, digits and dashes.
fn throughput_file(mode: &str) -> String {
    let name: String = mode
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("throughput-{name}.svg")
}

/// The disk's fio qd32 IOPS before and after the runs of a suite.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Drift {
    before: f64,
    after: f64,
}

impl Drift {
    /// After over before, minus 1: +0.47 for 73.5k before and 108.1k after.
    fn change(self) -> f64 {
        self.after / self.before - 1.0
    }

    /// Whether the change is large enough to flag ([`DRIFT_FLAGGED`]).
    fn flagged(self) -> bool {
        self.change().abs() > DRIFT_FLAGGED
    }
}
/// The mode "Where Cairn stands" compares.
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

    /// The suite's fio qd32 IOPS before and after its runs, when it measured both.
    fn drift(&self) -> Option<Drift> {
        let suite = self.suite.as_ref()?;
        let before = suite.fio_qd32_iops.filter(|iops| *iops > 0.0)?;
        let after = suite.fio_qd32_iops_end.filter(|iops| *iops > 0.0)?;
        Some(Drift { before, after })
    }

    /// The drift, when it is large enough to flag: every ratio to the disk is then given
    /// against both figures.
    fn flagged_drift(&self) -> Option<Drift> {
        self.drift().filter(|d| d.flagged())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
            "fio_qd32_iops": 400000.0, "fio_qd32_iops_end": 380000.0,
            "engines": ["cairn", "lmdb"], "modes": ["serial"]
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

    /// README.md with the padding of its table cells squeezed to one space (`tabled` pads the
    /// columns to a common width), so rows can be matched cell by cell.
    fn readme(dir: &Path) -> String {
        crate::report::table::squeezed(&read(dir, "README.md"))
    }

    #[test]
    fn says_what_the_processes_held_before_their_engines_opened() {
        let dir = full_dir();
        let md = |dir: &Path| {
            write_report(dir).unwrap();
            readme(dir)
        };
        // Records without the field (older ones): no sentence.
        assert!(!md(dir.path()).contains("before its engine opened"));
        let mut with = run("cairn", "serial", 120000.0);
        with["start_rss_bytes"] = json!(4_194_304);
        put(dir.path(), "run-2.json", &with);
        let mut peer = run("lmdb", "serial", 30000.0);
        peer["start_rss_bytes"] = json!(13_631_488);
        put(dir.path(), "run-1.json", &peer);
        let text = md(dir.path());
        assert!(
            text.contains("resident in 4.0 to 13.0 MiB before its engine opened"),
            "{text}"
        );
    }

    #[test]
    fn writes_rows_ratios_and_charts() {
        let dir = full_dir();
        let path = write_report(dir.path()).unwrap();
        assert_eq!(path, dir.path().join("README.md"));
        let md = readme(dir.path());
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
        assert!(md.contains("After the last run: 380,000 IOPS at queue depth 32"));
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
        no_cache["data_mount"] = json!("ext4 on / (rw,relatime,discard)");
        put(dir.path(), "suite.json", &no_cache);
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
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
        assert!(
            md.contains("- Tables on: ext4 on / (rw,relatime,discard) (online discard:"),
            "{md}"
        );
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
        let md = readme(dir.path());
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
        assert!(
            md.contains("- Timed batches per run: serial 10,000, pipelined 10,000."),
            "{md}"
        );
        assert!(md.contains("so Cairn is below that range"));
        assert!(md.contains("No peer engine ran in serial mode."));
        for name in ["ops.svg", "latency.svg", "memory.svg"] {
            check_svg(&read(dir.path(), name));
        }
    }

    #[test]
    fn says_why_the_runs_had_no_memory_limit() {
        let dir = full_dir();
        let reason = "could not delegate the memory controller to the children of /x | y";
        let mut unlimited = suite();
        unlimited["cgroup"] = Value::Null;
        unlimited["memory_limit_bytes"] = Value::Null;
        unlimited["memory_unlimited_reason"] = json!(reason);
        put(dir.path(), "suite.json", &unlimited);
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        let line = "- Memory limit: no memory limit (could not delegate the memory controller to \
                    the children of /x \\| y).";
        assert!(md.contains(line), "{md}");
        assert!(!read(dir.path(), "memory.svg").contains("memory limit"));

        let dir = tempfile::tempdir().unwrap();
        let mut run = run("cairn", "serial", 1000.0);
        run["memory_limit_bytes"] = Value::Null;
        run["cgroup"] = Value::Null;
        run["cgroup_peak_bytes"] = Value::Null;
        run["memory_unlimited_reason"] = json!("this machine has no memory cgroup controller");
        put(dir.path(), "run.json", &run);
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        let line =
            "- Memory limit: no memory limit (this machine has no memory cgroup controller).";
        assert!(md.contains(line), "{md}");
    }

    #[test]
    fn flags_a_drifting_disk_and_gives_every_ratio_against_both_figures() {
        let dir = full_dir();
        // 5% (the fixture's 400,000 then 380,000): noted, not flagged.
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        assert!(!md.contains("drifted"), "{md}");
        assert!(md.contains("-5.0% from the first"), "{md}");
        assert!(md.contains("| ops / fio qd32 IOPS |"), "{md}");
        // 300,000 after 400,000: -25%, flagged.
        let mut drifted = suite();
        drifted["fio_qd32_iops_end"] = json!(300000.0);
        put(dir.path(), "suite.json", &drifted);
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        let warning = md.find("**Warning: the disk drifted over this invocation.**");
        let results = md.find("## Results").unwrap();
        assert!(warning.is_some_and(|at| at < results), "at the top: {md}");
        assert!(
            md.contains(
                "400,000 before the runs and 300,000 after them (-25.0% from before to after"
            ),
            "{md}"
        );
        assert!(
            md.contains("| ops / fio qd32 IOPS before | ops / fio qd32 IOPS after |"),
            "{md}"
        );
        // Cairn's 120,000 ops/s: 0.30 of the first figure, 0.40 of the second.
        assert!(
            md.contains("| cairn | serial | 120,000 | — | 0.30 | 0.40 | 5.50 |"),
            "{md}"
        );
        assert!(
            md.contains("| lmdb | lookup-only | 100,000 | 2.0x | 0.25 | 0.33 |"),
            "{md}"
        );
        assert!(md.contains("a drift of -25.0%: **more than 10%**"), "{md}");
        assert!(
            md.contains(
                "0.30 of the disk's 400,000 fio qd32 IOPS (measured before the runs; \
                         against the 300,000 measured after them, which drifted -25.0%, it is \
                         0.40)"
            ),
            "{md}"
        );
        // Upwards too, and measured from the first figure: 73.5k then 108.1k is +47%.
        drifted["fio_qd32_iops"] = json!(73500.0);
        drifted["fio_qd32_iops_end"] = json!(108100.0);
        put(dir.path(), "suite.json", &drifted);
        write_report(dir.path()).unwrap();
        assert!(readme(dir.path()).contains("(+47.1% from before to after"));
        // A suite without the second figure (older records) has nothing to flag.
        let mut older = suite();
        older.as_object_mut().unwrap().remove("fio_qd32_iops_end");
        put(dir.path(), "suite.json", &older);
        write_report(dir.path()).unwrap();
        assert!(!readme(dir.path()).contains("drift"));
    }

    /// `run(engine, mode, ops)` with a throughput series of `points` windows of 2 s, ops/s
    /// rising by 1,000 a window from `ops`, and (`work`) two levels of merge work.
    fn run_over_time(engine: &str, mode: &str, ops: f64, points: usize, work: bool) -> Value {
        let mut record = run(engine, mode, ops);
        record["throughput_window_s"] = json!(2.0);
        record["throughput"] = (0..points)
            .map(|i| {
                json!({"start_s": 2.0 * i as f64, "seconds": 2.0,
                            "ops_per_sec": ops + 1000.0 * i as f64})
            })
            .collect();
        if work {
            record["level_work"] = json!({
                "steps_unit": "merge steps (input entries consumed)",
                "levels": [
                    {"level": 2, "started": 40, "finished": 39, "steps": 5_120_000},
                    {"level": 5, "started": 1, "finished": 0, "steps": 2_048_000}
                ],
                "unattributed_steps": 1_024_000
            });
        }
        record
    }

    #[test]
    fn draws_throughput_over_time_and_tables_the_merge_work() {
        let dir = full_dir();
        // Old records: no series, no work, no charts for them.
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        assert!(!md.contains("## Throughput over time") && !md.contains("## Merge work"));
        assert!(!dir.path().join("throughput-serial.svg").exists());

        put(
            dir.path(),
            "run-2.json",
            &run_over_time("cairn", "serial", 120000.0, 20, true),
        );
        put(
            dir.path(),
            "run-1.json",
            &run_over_time("lmdb", "serial", 30000.0, 5, false),
        );
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        assert!(md.contains("## Throughput over time"), "{md}");
        assert!(
            md.contains("windows of 60 s for a run of 10 minutes or more"),
            "{md}"
        );
        assert!(
            md.contains("**serial**, windows: cairn 2 s, lmdb 2 s."),
            "{md}"
        );
        assert!(
            md.contains("![ops/s against time, serial](throughput-serial.svg)"),
            "{md}"
        );
        // Lowest, median, last, last over first.
        assert!(
            md.contains("| cairn | serial | 2 | 20 | 120,000 | 129,500 | 139,000 | 1.16 |"),
            "{md}"
        );
        assert!(
            md.contains("| lmdb | serial | 2 | 5 | 30,000 | 32,000 | 34,000 | 1.13 |"),
            "{md}"
        );
        // Only the modes whose runs have a series get a chart.
        assert!(!md.contains("throughput-lookup-only.svg"), "{md}");
        assert!(!dir.path().join("throughput-lookup-only.svg").exists());
        let chart = read(dir.path(), "throughput-serial.svg");
        check_svg(&chart);
        assert_eq!(chart.matches("<polyline ").count(), 2, "{chart}");
        assert_eq!(chart.matches("<circle ").count(), 25, "{chart}");
        for text in [
            "UTxO benchmark, serial: ops/s against time",
            ">cairn<",
            ">lmdb<",
            "time since the first timed batch, s",
            "cairn at 39 s: 139,000",
            // The engines' colours of the bar charts: cairn first, lmdb second.
            "stroke=\"#4e79a7\"",
            "stroke=\"#f28e2b\"",
        ] {
            assert!(chart.contains(text), "{text} in {chart}");
        }
        // The merge work: a row per level and one for the background thread; 10,000 batches
        // of 512 updates.
        assert!(md.contains("## Merge work per level"), "{md}");
        assert!(
            md.contains("cairn counts merge steps (input entries consumed)"),
            "{md}"
        );
        assert!(
            md.contains("| cairn | serial | 2 | 40 | 39 | 5,120,000 | 1.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| cairn | serial | 5 | 1 | 0 | 2,048,000 | 0.40 |"),
            "{md}"
        );
        assert!(
            md.contains("| cairn | serial | background thread | — | — | 1,024,000 | 0.20 |"),
            "{md}"
        );
        // lmdb counts no merge work.
        let work = &md[md.find("## Merge work per level").unwrap()..];
        assert!(!work.contains("| lmdb |"), "{md}");
    }

    #[test]
    fn a_long_run_is_drawn_in_minutes() {
        let dir = tempfile::tempdir().unwrap();
        let mut long = run("cairn", "pipelined", 100000.0);
        long["throughput_window_s"] = json!(60.0);
        long["throughput"] = (0..61)
            .map(|i| json!({"start_s": 60.0 * i as f64, "seconds": 60.0, "ops_per_sec": 1e5}))
            .collect();
        put(dir.path(), "run.json", &long);
        write_report(dir.path()).unwrap();
        let chart = read(dir.path(), "throughput-pipelined.svg");
        check_svg(&chart);
        assert!(
            chart.contains("time since the first timed batch, min"),
            "{chart}"
        );
        assert!(chart.contains("cairn at 60.5 min: 100,000"), "{chart}");
        assert!(readme(dir.path()).contains("**pipelined**, windows: cairn 60 s."));
    }

    #[test]
    fn states_the_batches_of_each_mode_and_the_protocol() {
        let dir = full_dir();
        let mut preset = suite();
        preset["mode_batches"] =
            json!({"serial": 10000, "pipelined": 100000, "lookup-only": 10000});
        preset["protocol"] = json!("lsm-tree");
        put(dir.path(), "suite.json", &preset);
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        assert!(
            md.contains(
                "- Workload: 10,000,000 entries, timed batches per run: serial 10,000, \
                 pipelined 100,000, lookup-only 10,000 (`--protocol lsm-tree`)."
            ),
            "{md}"
        );
        let mut same = suite();
        same["mode_batches"] = json!({"serial": 3000, "pipelined": 3000});
        put(dir.path(), "suite.json", &same);
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        assert!(
            md.contains("- Workload: 10,000,000 entries, 3,000 batches per run."),
            "{md}"
        );
        // Older records: `batches` alone.
        write_report(dir.path()).unwrap();
        put(dir.path(), "suite.json", &suite());
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        assert!(
            md.contains("- Workload: 10,000,000 entries, 10,000 batches per run."),
            "{md}"
        );
    }

    #[test]
    fn a_run_ended_by_its_time_limit_says_so() {
        let dir = full_dir();
        let mut cut = run("lmdb", "serial", 30000.0);
        cut["batches"] = json!(2500);
        cut["planned_batches"] = json!(10000);
        cut["time_limit_s"] = json!(900);
        put(dir.path(), "run-1.json", &cut);
        write_report(dir.path()).unwrap();
        let md = readme(dir.path());
        assert!(
            md.contains("| lmdb | serial, 2,500 of 10,000 batches (900 s limit) |"),
            "{md}"
        );
        // A run that finished inside its limit reads as before.
        assert!(md.contains("| cairn | serial |"), "{md}");
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
}

//! `cairn-bench auth-report --dir DIR`: the Markdown report (`DIR/README.md`) and three charts
//! (`commit.svg`, `proofs.svg`, `utxo.svg`) of the `auth` records in DIR, one section per key
//! count. `auth --report-dir DIR` writes its records there and calls this.
//!
//! Owns: the reading of `auth` records from DIR (every `*.json` file directly in it holding an
//! array of them; other JSON is skipped, malformed JSON is an error naming its file) and their
//! layout. Must never touch: any file but the four it writes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::AuthRecord;
use crate::failure::{Context, Failure};
use crate::report::format::{compact, limit_text, ms, rss_mib, short_count, thousands};
use crate::report::svg::Chart;
use crate::report::table::{Align, Markdown};

/// The alignments of a table's columns: text left, numbers right.
const L: Align = Align::Left;
/// See [`L`].
const R: Align = Align::Right;

/// The engines' order in tables and charts (others follow, alphabetically).
const ORDER: [&str; 6] = [
    "cairn",
    "cairn-plain",
    "nomt",
    "jmt-memory",
    "jmt-cairn",
    "alloy-trie",
];

/// The records of DIR by key count and hash function, each list in engine order.
type ByKeys = BTreeMap<(u64, String), Vec<AuthRecord>>;

/// Reads DIR's records and writes the report and charts; returns README.md's path.
pub fn write(dir: &Path) -> Result<PathBuf, Failure> {
    let by_keys = load(dir)?;
    let files = [
        ("commit.svg", commit_chart(&by_keys)),
        ("proofs.svg", proofs_chart(&by_keys)),
        ("utxo.svg", utxo_chart(&by_keys)),
        ("README.md", markdown(&by_keys)),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).context(|| format!("writing {}", path.display()))?;
    }
    Ok(dir.join("README.md"))
}

fn rank(engine: &str) -> (usize, String) {
    let position = ORDER.iter().position(|e| *e == engine);
    (position.unwrap_or(ORDER.len()), engine.to_string())
}

/// Every `auth` record of DIR, grouped by key count and hash; the latest record (by date) of
/// an (engine, key count, hash) wins.
fn load(dir: &Path) -> Result<ByKeys, Failure> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .context(|| format!("listing {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json") && p.is_file())
        .collect();
    files.sort();
    let mut latest: BTreeMap<(u64, String, (usize, String)), AuthRecord> = BTreeMap::new();
    for path in files {
        let text =
            std::fs::read_to_string(&path).context(|| format!("reading {}", path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Failure(format!("{}: not JSON: {e}", path.display())))?;
        let Some(items) = value.as_array() else {
            continue;
        };
        if !items.iter().all(|i| i["benchmark"] == "auth") {
            continue;
        }
        let records: Vec<AuthRecord> = serde_json::from_value(value)
            .map_err(|e| Failure(format!("{}: {e}", path.display())))?;
        for record in records {
            let key = (record.keys, record.hash.clone(), rank(&record.engine));
            if latest.get(&key).is_none_or(|old| record.date >= old.date) {
                latest.insert(key, record);
            }
        }
    }
    if latest.is_empty() {
        return Err(Failure(format!("no auth records in {}", dir.display())));
    }
    let mut by_keys = ByKeys::new();
    for ((keys, hash, _), record) in latest {
        by_keys.entry((keys, hash)).or_default().push(record);
    }
    Ok(by_keys)
}

/// "2^20 (1,048,576)" for a power of two, else the count.
fn keys_text(keys: u64) -> String {
    if keys.is_power_of_two() {
        format!("2^{} ({})", keys.trailing_zeros(), thousands(keys as f64))
    } else {
        thousands(keys as f64)
    }
}

/// A chart label: "2^20 sha256".
fn short_keys((keys, hash): &(u64, String)) -> String {
    let keys = if keys.is_power_of_two() {
        format!("2^{}", keys.trailing_zeros())
    } else {
        short_count(*keys)
    };
    format!("{keys} {hash}")
}

/// Every engine of any key count, in report order.
fn engines(by_keys: &ByKeys) -> Vec<String> {
    let mut names: Vec<(usize, String)> = by_keys
        .values()
        .flatten()
        .map(|r| rank(&r.engine))
        .collect();
    names.sort();
    names.dedup();
    names.into_iter().map(|(_, n)| n).collect()
}

fn find<'a>(records: &'a [AuthRecord], engine: &str) -> Option<&'a AuthRecord> {
    records.iter().find(|r| r.engine == engine)
}

/// Warm-up plus commit, µs per key, log scale: a group per (keys, commit size, warm-up).
fn commit_chart(by_keys: &ByKeys) -> String {
    let series = engines(by_keys);
    let (mut groups, mut values) = (Vec::new(), Vec::new());
    for (part, records) in by_keys {
        let mut modes: Vec<(u64, bool)> = records
            .iter()
            .flat_map(|r| r.commits.iter().map(|c| (c.keys, c.warm_up)))
            .collect();
        modes.sort();
        modes.dedup();
        for (k, warm) in modes {
            groups.push(vec![
                short_keys(part),
                format!("{} keys", short_count(k)),
                if warm { "warm-up" } else { "no warm-up" }.to_string(),
            ]);
            values.push(
                series
                    .iter()
                    .map(|e| {
                        find(records, e)?
                            .commits
                            .iter()
                            .find(|c| c.keys == k && c.warm_up == warm)
                            .map(|c| c.total_us_per_key)
                    })
                    .collect(),
            );
        }
    }
    Chart {
        title: "Commit: warm-up + commit, µs per updated key (log scale)",
        y_label: "µs per key",
        groups,
        series,
        values,
        log: true,
        limit: None,
        format: ms,
    }
    .render()
}

/// Mean inclusion and exclusion proof bytes per engine.
fn proofs_chart(by_keys: &ByKeys) -> String {
    let series = engines(by_keys);
    let (mut groups, mut values) = (Vec::new(), Vec::new());
    for (part, records) in by_keys {
        for (kind, inclusion) in [("inclusion", true), ("exclusion", false)] {
            groups.push(vec![short_keys(part), kind.to_string()]);
            values.push(
                series
                    .iter()
                    .map(|e| {
                        let p = find(records, e)?.proofs.as_ref()?;
                        Some(if inclusion {
                            p.inclusion_mean_bytes
                        } else {
                            p.exclusion_mean_bytes
                        })
                    })
                    .collect(),
            );
        }
    }
    Chart {
        title: "Single-key proof size, mean bytes",
        y_label: "bytes",
        groups,
        series,
        values,
        log: false,
        limit: None,
        format: thousands,
    }
    .render()
}

/// UTxO ops/s per engine and key count.
fn utxo_chart(by_keys: &ByKeys) -> String {
    let series = engines(by_keys);
    let groups = by_keys.keys().map(|part| vec![short_keys(part)]).collect();
    let values = by_keys
        .values()
        .map(|records| {
            series
                .iter()
                .map(|e| find(records, e)?.utxo.as_ref().map(|u| u.ops_per_sec))
                .collect()
        })
        .collect();
    Chart {
        title: "UTxO batches with a root after each: ops/s",
        y_label: "ops/s",
        groups,
        series,
        values,
        log: false,
        limit: None,
        format: compact,
    }
    .render()
}

fn markdown(by_keys: &ByKeys) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Authenticated state side by side\n");
    let _ = writeln!(
        md,
        "Records of `cairn-bench auth` (one JSON file per invocation), rendered by \
         `cairn-bench auth-report`. For each key count, the latest record of each engine. Times \
         are medians unless named otherwise; \"x\" columns are the peer's figure over Cairn's \
         for times (above 1: Cairn is faster) and Cairn's over the peer's for rates.\n"
    );
    let _ = writeln!(
        md,
        "![commit](commit.svg)\n\n![proofs](proofs.svg)\n\n![utxo](utxo.svg)\n"
    );
    for ((keys, _), records) in by_keys {
        section(&mut md, *keys, records);
    }
    md
}

fn section(md: &mut String, keys: u64, records: &[AuthRecord]) {
    let first = &records[0];
    let _ = writeln!(md, "## {} keys, {}\n", keys_text(keys), first.hash);
    let _ = writeln!(
        md,
        "Hash {} (alloy-trie: Keccak-256 always); each engine a child process, in a memory \
         cgroup of its own where the last table gives a limit (page cache counted), the page \
         cache dropped before it; {}.\n",
        first.hash,
        match (&first.date, &first.commit) {
            (date, Some(commit)) if !date.is_empty() => format!("run {date} at {commit}"),
            (date, None) if !date.is_empty() => format!("run {date}"),
            _ => "date not recorded".to_string(),
        }
    );
    let mut table = Markdown::new(&[("engine", L), ("settings", L)]);
    for r in records {
        let settings = match (&r.failure, &r.engine_status) {
            (Some(failure), _) => format!("**failed**: {failure}"),
            (None, Some(status)) => format!("{}; at the end: {status}", r.settings),
            (None, None) => r.settings.clone(),
        };
        table.row([r.engine.clone(), settings.replace('|', "/")]);
    }
    md.push_str(&table.render());
    let cairn = find(records, "cairn");

    let _ = writeln!(md, "\n### Commits\n");
    let mut table = Markdown::new(&[
        ("engine", L),
        ("keys", R),
        ("warm-up", L),
        ("p50 ms", R),
        ("p99 ms", R),
        ("max ms", R),
        ("µs/key", R),
        ("warm-up µs/key", R),
        ("total µs/key", R),
        ("vs Cairn", R),
        ("KiB written", R),
        ("KiB read", R),
    ]);
    for r in records {
        for c in &r.commits {
            let ratio = cairn
                .and_then(|cairn| {
                    cairn
                        .commits
                        .iter()
                        .find(|x| x.keys == c.keys && x.warm_up == c.warm_up)
                })
                .filter(|_| r.engine != "cairn")
                .map_or("".to_string(), |x| {
                    format!("{:.2}x", c.total_us_per_key / x.total_us_per_key.max(1e-9))
                });
            table.row([
                r.engine.clone(),
                thousands(c.keys as f64),
                yes_no(c.warm_up).to_string(),
                ms(c.p50_ms),
                ms(c.p99_ms),
                ms(c.max_ms),
                format!("{:.2}", c.us_per_key),
                format!("{:.2}", c.warm_up_us_per_key),
                format!("{:.2}", c.total_us_per_key),
                ratio,
                thousands(c.bytes_written / 1024.0),
                thousands(c.bytes_read / 1024.0),
            ]);
        }
    }
    md.push_str(&table.render());

    let utxo_breakdown = |r: &AuthRecord| r.utxo.as_ref().and_then(|u| u.breakdown);
    if records
        .iter()
        .any(|r| r.commits.iter().any(|c| c.breakdown.is_some()) || utxo_breakdown(r).is_some())
    {
        let _ = writeln!(
            md,
            "\nWhere the commits' time went, by the engine's own account (means per commit, ms; \
             page reads are summed over the threads that read, so they can exceed the reads and \
             rehash they are part of; bytes are those asked of the page log's files, served \
             by the page cache or the device; the log is the write of the commit's updates \
             to the table and its write-ahead log, and the log's fsync, – where a record \
             predates its count; the UTxO row is per batch):\n"
        );
        let mut table = Markdown::new(&[
            ("engine", L),
            ("keys", R),
            ("warm-up", L),
            ("warm-up ms", R),
            ("log (in its fsync)", R),
            ("values", R),
            ("reads and rehash", R),
            ("in page reads", R),
            ("page writes", R),
            ("cleaning", R),
            ("KiB of pages read", R),
            ("KiB cleaning read", R),
        ]);
        for r in records {
            let rows = r
                .commits
                .iter()
                .filter_map(|c| {
                    let keys = thousands(c.keys as f64);
                    Some((keys, yes_no(c.warm_up), c.breakdown?))
                })
                .chain(utxo_breakdown(r).map(|b| ("UTxO batch".to_string(), "yes", b)));
            for (keys, warm_up, b) in rows {
                table.row([
                    r.engine.clone(),
                    keys,
                    warm_up.to_string(),
                    ms(b.warm_up_ms),
                    if b.log_ms > 0.0 {
                        format!("{} ({})", ms(b.log_ms), ms(b.log_sync_ms))
                    } else {
                        "–".to_string()
                    },
                    ms(b.values_ms),
                    ms(b.update_ms),
                    ms(b.page_reads_ms),
                    ms(b.write_ms),
                    ms(b.clean_ms),
                    thousands(b.page_bytes_read / 1024.0),
                    thousands(b.clean_bytes_read / 1024.0),
                ]);
            }
        }
        md.push_str(&table.render());
    }

    let _ = writeln!(md, "\n### Proofs\n");
    let mut table = Markdown::new(&[
        ("engine", L),
        ("inclusion B (mean / max)", R),
        ("exclusion B (mean / max)", R),
        ("made/s", R),
        ("verified/s", R),
        ("multiproof keys", R),
        ("multiproof B (per key)", R),
        ("made ms", R),
        ("verified ms", R),
    ]);
    for r in records {
        if let Some(p) = &r.proofs {
            table.row([
                r.engine.clone(),
                format!(
                    "{} / {}",
                    thousands(p.inclusion_mean_bytes),
                    thousands(p.inclusion_max_bytes)
                ),
                format!(
                    "{} / {}",
                    thousands(p.exclusion_mean_bytes),
                    thousands(p.exclusion_max_bytes)
                ),
                thousands(p.proofs_per_sec),
                thousands(p.verified_per_sec),
                p.multiproof_keys.to_string(),
                format!(
                    "{} ({})",
                    thousands(p.multiproof_bytes),
                    thousands(p.multiproof_bytes / p.multiproof_keys.max(1) as f64)
                ),
                ms(p.multiproof_ms),
                ms(p.multiproof_verify_ms),
            ]);
        }
    }
    md.push_str(&table.render());

    let plain = find(records, "cairn-plain").and_then(|r| r.utxo.as_ref());
    let _ = writeln!(
        md,
        "\n### UTxO batches, a root after each\n\n256 lookups, then a commit of 256 deletes and \
         256 inserts; every lookup checked.\n"
    );
    let mut table = Markdown::new(&[
        ("engine", L),
        ("batches", R),
        ("ops/s", R),
        ("of cairn-plain", R),
        ("p50 ms", R),
        ("p99 ms", R),
        ("p99.9 ms", R),
        ("p99.9/p50", R),
        ("max ms", R),
        ("KiB written", R),
        ("KiB read", R),
    ]);
    for r in records {
        if let Some(u) = &r.utxo {
            table.row([
                r.engine.clone(),
                u.batches.to_string(),
                thousands(u.ops_per_sec),
                plain.map_or("".to_string(), |p| {
                    format!("{:.2}", u.ops_per_sec / p.ops_per_sec.max(1e-9))
                }),
                ms(u.p50_ms),
                ms(u.p99_ms),
                ms(u.p999_ms),
                format!("{:.2}", u.p999_ms / u.p50_ms.max(1e-9)),
                ms(u.max_ms),
                thousands(u.bytes_written / 1024.0),
                thousands(u.bytes_read / 1024.0),
            ]);
        }
    }
    md.push_str(&table.render());

    let _ = writeln!(md, "\n### Load and memory\n");
    let mut table = Markdown::new(&[
        ("engine", L),
        ("load s", R),
        ("load µs/key", R),
        ("keys at the end", R),
        ("on disk MiB", R),
        ("peak RSS MiB", R),
        ("memory limit", R),
        ("cgroup peak MiB", R),
    ]);
    for r in records.iter().filter(|r| r.failure.is_none()) {
        table.row([
            r.engine.clone(),
            format!("{:.1}", r.load_seconds),
            format!("{:.2}", r.load_us_per_key),
            thousands(r.live_keys_at_end as f64),
            rss_mib(Some(r.disk_bytes)),
            rss_mib(r.peak_rss_bytes),
            limit_text(r.memory_limit_bytes),
            rss_mib(r.cgroup_peak_bytes),
        ]);
    }
    md.push_str(&table.render());
    let _ = writeln!(md);
}

/// "yes" or "no".
fn yes_no(yes: bool) -> &'static str {
    if yes {
        "yes"
    } else {
        "no"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{CommitFigures, ProofFigures, UtxoFigures};

    fn record(engine: &str, keys: u64, us: f64) -> AuthRecord {
        AuthRecord {
            benchmark: "auth".to_string(),
            engine: engine.to_string(),
            settings: "s".to_string(),
            hash: "sha256".to_string(),
            date: "2026-11-25T00:00:00Z".to_string(),
            commit: None,
            keys,
            live_keys_at_end: keys,
            load_seconds: 1.0,
            load_us_per_key: 1.0,
            commits: vec![CommitFigures {
                keys: 1000,
                warm_up: true,
                commits: 1,
                total_us_per_key: us,
                ..CommitFigures::default()
            }],
            proofs: (engine != "cairn-plain").then(ProofFigures::default),
            utxo: Some(UtxoFigures {
                ops_per_sec: 1000.0 / us,
                ..UtxoFigures::default()
            }),
            peak_rss_bytes: None,
            disk_bytes: 0,
            engine_status: None,
            memory_limit_bytes: None,
            cgroup_peak_bytes: None,
            failure: None,
        }
    }

    /// Records of two invocations make one section per key count, engines in report order, with
    /// ratios against Cairn and cairn-plain; files of other benchmarks are skipped.
    #[test]
    fn report_of_two_invocations() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, records: &[AuthRecord]| {
            std::fs::write(
                dir.path().join(name),
                serde_json::to_string(records).unwrap(),
            )
            .unwrap()
        };
        write(
            "a.json",
            &[
                record("nomt", 1 << 20, 20.0),
                record("cairn", 1 << 20, 10.0),
            ],
        );
        let failed = AuthRecord {
            failure: Some("killed (SIGKILL)".to_string()),
            ..record("nomt", 1 << 24, 1.0)
        };
        write(
            "b.json",
            &[
                record("cairn", 1 << 24, 40.0),
                record("cairn-plain", 1 << 24, 4.0),
                failed,
            ],
        );
        std::fs::write(dir.path().join("c.json"), r#"{"benchmark": "utxo-run"}"#).unwrap();
        let path = write_report(dir.path());
        // The cells' padding squeezed: `tabled` pads the columns to a common width.
        let md = crate::report::table::squeezed(&std::fs::read_to_string(path).unwrap());
        let a = md.find("## 2^20 (1,048,576) keys, sha256").unwrap();
        let b = md.find("## 2^24").unwrap();
        assert!(a < b);
        assert!(
            md[a..b].find("| cairn | 1,000").unwrap() < md[a..b].find("| nomt | 1,000").unwrap()
        );
        assert!(md[a..b].contains("| 2.00x |"), "{md}");
        assert!(md[b..].contains("| cairn | 0 | 25 | 0.10 |"), "{md}");
        assert!(
            md[b..].contains("| nomt | **failed**: killed (SIGKILL) |"),
            "{md}"
        );
        for chart in ["commit.svg", "proofs.svg", "utxo.svg"] {
            assert!(std::fs::read_to_string(dir.path().join(chart))
                .unwrap()
                .starts_with("<svg"));
        }
    }

    fn write_report(dir: &Path) -> PathBuf {
        write(dir).unwrap()
    }
}

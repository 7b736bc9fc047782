//! The charts and tables of a `ledger` record: `ledger --report-dir DIR` writes the record to
//! `DIR/ledger.json`, then `DIR/figures.md` (every table, and the ratios issue 46 names) and the
//! charts `smallbank.svg`, `sweep.svg`, `range.svg` and `storage.svg`. The report's prose
//! (machine, settings, reading) is written by hand beside them.
//!
//! Owns: reading a `ledger` record (JSON) and its layout. Must never touch: any file but the
//! ones it writes.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use crate::failure::{Context, Failure};
use crate::report::format::{compact, thousands};
use crate::report::svg::Chart;
use crate::report::table::Markdown;

const ENGINES: [&str; 2] = ["immudb", "cairn"];

fn f(v: &Value, path: &[&str]) -> Option<f64> {
    let mut v = v;
    for p in path {
        v = v.get(p)?;
    }
    v.as_f64()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn mode_label(row: &Value) -> String {
    match row.get("deferred_delay_ms").and_then(Value::as_u64) {
        Some(d) => format!("deferred {d} ms"),
        None => s(row, "verify").to_string(),
    }
}

fn rows<'a>(doc: &'a Value, key: &str) -> Vec<&'a Value> {
    doc.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The row of `engine` in the same cell (mode, delay, clients) as `row`.
fn peer_of<'a>(rows: &[&'a Value], row: &Value, engine: &str) -> Option<&'a Value> {
    rows.iter().copied().find(|r| {
        s(r, "engine") == engine
            && s(r, "verify") == s(row, "verify")
            && r.get("deferred_delay_ms") == row.get("deferred_delay_ms")
            && r.get("clients") == row.get("clients")
    })
}

/// Writes `doc` to `dir/ledger.json` and the figures and charts beside it.
pub fn write(dir: &Path, doc: &Value) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).context(|| format!("writing {}", path.display()))
    };
    write(
        "ledger.json",
        serde_json::to_string_pretty(doc).unwrap_or_default(),
    )?;
    write("figures.md", figures(doc))?;
    write(
        "smallbank.svg",
        rate_chart(
            &rows(doc, "rows"),
            "SmallBank: transactions per second (log scale)",
            "transactions/s",
            &["figures", "transactions_per_s"],
        ),
    )?;
    write(
        "sweep.svg",
        rate_chart(
            &rows(doc, "sweep"),
            "Deferred verification, delay sweep: transactions per second (log scale)",
            "transactions/s",
            &["figures", "transactions_per_s"],
        ),
    )?;
    write(
        "range.svg",
        rate_chart(
            &rows(doc, "range"),
            "Range reads of 10 to 20 keys: ranges per second (log scale)",
            "ranges/s",
            &["figures", "ranges_per_s"],
        ),
    )?;
    write("storage.svg", storage_chart(doc))?;
    Ok(())
}

/// A group per cell (mode, clients), a bar per engine.
fn rate_chart(rows: &[&Value], title: &'static str, y: &'static str, path: &[&str]) -> String {
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut values = Vec::new();
    for row in rows {
        let group = vec![
            mode_label(row),
            format!(
                "{} clients",
                row.get("clients").and_then(Value::as_u64).unwrap_or(0)
            ),
        ];
        if groups.contains(&group) {
            continue;
        }
        values.push(
            ENGINES
                .iter()
                .map(|e| peer_of(rows, row, e).and_then(|r| f(r, path)))
                .collect(),
        );
        groups.push(group);
    }
    Chart {
        title,
        y_label: y,
        groups,
        series: ENGINES.iter().map(|e| e.to_string()).collect(),
        values,
        log: true,
        limit: None,
        format: compact,
    }
    .render()
}

/// Bytes per record at each count, a bar per engine and setting.
fn storage_chart(doc: &Value) -> String {
    let growth = rows(doc, "storage");
    let series: Vec<String> = growth
        .iter()
        .map(|g| format!("{} ({})", s(g, "engine"), s(g, "setting")))
        .collect();
    let mut counts: Vec<u64> = growth
        .iter()
        .flat_map(|g| rows(g, "points"))
        .filter_map(|p| p.get("records").and_then(Value::as_u64))
        .collect();
    counts.sort_unstable();
    counts.dedup();
    let values = counts
        .iter()
        .map(|&n| {
            growth
                .iter()
                .map(|g| {
                    rows(g, "points")
                        .into_iter()
                        .find(|p| p.get("records").and_then(Value::as_u64) == Some(n))
                        .and_then(|p| f(p, &["bytes_per_record"]))
                })
                .collect()
        })
        .collect();
    Chart {
        title: "Storage: bytes on disk per record (9-byte key, 100-byte value)",
        y_label: "bytes per record",
        groups: counts
            .iter()
            .map(|n| vec![format!("{n} records")])
            .collect(),
        series,
        values,
        log: false,
        limit: None,
        format: thousands,
    }
    .render()
}

/// Appends a rendered table and a blank line.
fn push_table(md: &mut String, t: Markdown) {
    md.push_str(&t.render());
    md.push('\n');
}

/// Every table of the record, with Cairn/immudb ratios.
pub fn figures(doc: &Value) -> String {
    let mut md = String::new();
    let _ =
        writeln!(
        md,
        "# LedgerBench figures\n\nFrom `ledger.json` ({} to {}; {} accounts; Cairn runs of {} s, \
         immudb runs of {} transactions; Cairn group {}).\n",
        s(doc, "started"),
        s(doc, "finished"),
        doc.get("accounts").and_then(Value::as_u64).unwrap_or(0),
        f(doc, &["cairn_seconds"]).unwrap_or(0.0),
        doc.get("peer_transactions").and_then(Value::as_u64).unwrap_or(0),
        doc.get("cairn_group").and_then(Value::as_u64).unwrap_or(0),
    );
    for (key, title) in [("rows", "SmallBank"), ("sweep", "Delay sweep (deferred)")] {
        let rows = rows(doc, key);
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(md, "## {title}\n");
        let mut t = Markdown::left(&[
            "verify",
            "clients",
            "immudb tx/s",
            "Cairn tx/s",
            "Cairn / immudb",
            "Cairn versions",
            "proof B per verified read, immudb / Cairn",
            "Cairn p99 / immudb p99, per type (min to max)",
            "keys per batch, immudb / Cairn",
            "verify latency p99 ms, immudb / Cairn",
        ]);
        for row in rows.iter().filter(|r| s(r, "engine") == "cairn") {
            let peer = peer_of(&rows, row, "immudb");
            let rate = |r: &Value| f(r, &["figures", "transactions_per_s"]).unwrap_or(0.0);
            let bytes = |r: &Value| f(r, &["figures", "proof_bytes_per_verified_read"]);
            let p99s: Vec<f64> = peer
                .map(|p| {
                    let types = row["figures"]["per_type"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                    types
                        .iter()
                        .filter_map(|(k, q)| {
                            let mine = q.get("p99_ms").or(q.get("p99_us"))?.as_f64()?;
                            let theirs = p["figures"]["per_type"][k]
                                .get("p99_ms")
                                .or(p["figures"]["per_type"][k].get("p99_us"))?
                                .as_f64()?;
                            Some(mine / theirs.max(1e-9))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let range = if p99s.is_empty() {
                String::new()
            } else {
                let lo = p99s.iter().copied().fold(f64::MAX, f64::min);
                let hi = p99s.iter().copied().fold(0.0, f64::max);
                format!("{lo:.2} to {hi:.2}")
            };
            let pair = |a: Option<f64>, b: Option<f64>, d: usize| match (a, b) {
                (None, None) => String::new(),
                (a, b) => format!(
                    "{} / {}",
                    a.map_or("-".into(), |v| format!("{v:.d$}")),
                    b.map_or("-".into(), |v| format!("{v:.d$}"))
                ),
            };
            t.row([
                mode_label(row),
                row["clients"].to_string(),
                peer.map_or(String::new(), |p| format!("{:.0}", rate(p))),
                format!("{:.0}", rate(row)),
                peer.map_or(String::new(), |p| {
                    format!("{:.1}x", rate(row) / rate(p).max(1e-9))
                }),
                row["figures"]["versions"].to_string(),
                pair(peer.and_then(bytes), bytes(row), 0),
                range,
                pair(
                    peer.and_then(|p| f(p, &["figures", "deferred", "keys_per_batch_mean"])),
                    f(row, &["figures", "deferred", "keys_per_batch_mean"]),
                    1,
                ),
                pair(
                    peer.and_then(|p| f(p, &["figures", "deferred", "verify_latency_ms_p99"])),
                    f(row, &["figures", "deferred", "verify_latency_ms_p99"]),
                    1,
                ),
            ]);
        }
        push_table(&mut md, t);
    }
    let audits = rows(doc, "audit");
    if !audits.is_empty() {
        let _ = writeln!(md, "## Audit\n");
        let mut t = Markdown::left(&[
            "engine",
            "tx/s",
            "blocks",
            "tx per block",
            "block check p50 ms",
            "p99 ms",
            "max ms",
            "full audit s",
            "full audit MB read",
        ]);
        for r in &audits {
            let a = &r["figures"]["audit"];
            t.row([
                s(r, "engine").to_string(),
                format!(
                    "{:.0}",
                    f(r, &["figures", "transactions_per_s"]).unwrap_or(0.0)
                ),
                a["blocks"].to_string(),
                format!("{:.0}", f(a, &["transactions_per_block"]).unwrap_or(0.0)),
                format!("{:.2}", f(a, &["verify_ms_p50"]).unwrap_or(0.0)),
                format!("{:.2}", f(a, &["verify_ms_p99"]).unwrap_or(0.0)),
                format!("{:.2}", f(a, &["verify_ms_max"]).unwrap_or(0.0)),
                format!("{:.2}", f(a, &["full_audit_seconds"]).unwrap_or(0.0)),
                f(a, &["full_audit_read_bytes"])
                    .map_or(String::new(), |b| format!("{:.1}", b / 1e6)),
            ]);
        }
        push_table(&mut md, t);
    }
    let ranges = rows(doc, "range");
    if !ranges.is_empty() {
        let _ = writeln!(md, "## Range\n");
        let mut t = Markdown::left(&[
            "verify",
            "clients",
            "immudb ranges/s",
            "Cairn ranges/s",
            "Cairn / immudb",
            "proof B per entry, immudb / Cairn",
            "p99 ms, immudb / Cairn",
        ]);
        for row in ranges.iter().filter(|r| s(r, "engine") == "cairn") {
            let peer = peer_of(&ranges, row, "immudb");
            let rate = |r: &Value| f(r, &["figures", "ranges_per_s"]).unwrap_or(0.0);
            let bytes = |r: &Value| f(r, &["figures", "proof_bytes_per_entry"]).unwrap_or(0.0);
            let p99 = |r: &Value| f(r, &["figures", "latency_us_p99"]).unwrap_or(0.0) / 1e3;
            t.row([
                mode_label(row),
                row["clients"].to_string(),
                peer.map_or(String::new(), |p| format!("{:.0}", rate(p))),
                format!("{:.0}", rate(row)),
                peer.map_or(String::new(), |p| {
                    format!("{:.1}x", rate(row) / rate(p).max(1e-9))
                }),
                peer.map_or(format!("- / {:.0}", bytes(row)), |p| {
                    format!("{:.0} / {:.0}", bytes(p), bytes(row))
                }),
                peer.map_or(format!("- / {:.2}", p99(row)), |p| {
                    format!("{:.2} / {:.2}", p99(p), p99(row))
                }),
            ]);
        }
        push_table(&mut md, t);
    }
    let growth = rows(doc, "storage");
    if !growth.is_empty() {
        let _ = writeln!(md, "## Storage\n");
        let mut t = Markdown::left(&["engine", "setting", "records", "bytes", "bytes per record"]);
        for g in &growth {
            for p in rows(g, "points") {
                t.row([
                    s(g, "engine").to_string(),
                    s(g, "setting").to_string(),
                    p["records"].to_string(),
                    p["disk_bytes"].to_string(),
                    format!("{:.1}", f(p, &["bytes_per_record"]).unwrap_or(0.0)),
                ]);
            }
        }
        push_table(&mut md, t);
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_renders_the_same_twice_with_every_section() {
        let doc = serde_json::json!({
            "started": "s", "finished": "f", "accounts": 10, "cairn_seconds": 1.0,
            "peer_transactions": 10, "cairn_group": 8,
            "rows": [
                {"engine": "immudb", "verify": "immediate", "deferred_delay_ms": null, "clients": 1,
                 "figures": {"transactions_per_s": 10.0, "versions": 10, "proof_bytes_per_verified_read": 1500.0,
                             "per_type": {"Balance": {"p99_us": 1000.0}}}},
                {"engine": "cairn", "verify": "immediate", "deferred_delay_ms": null, "clients": 1,
                 "figures": {"transactions_per_s": 300.0, "versions": 300, "proof_bytes_per_verified_read": 1000.0,
                             "per_type": {"Balance": {"p99_us": 100.0}}}}
            ],
            "sweep": [], "audit": [], "range": [],
            "storage": [{"engine": "cairn", "setting": "window 0 (default)",
                         "points": [{"records": 10, "disk_bytes": 2000, "bytes_per_record": 200.0}]}]
        });
        let a = figures(&doc);
        assert_eq!(a, figures(&doc));
        assert!(a.contains("30.0x"), "{a}");
        assert!(a.contains("0.10 to 0.10"), "{a}");
        assert!(a.contains("## Storage"));
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &doc).unwrap();
        for name in ["ledger.json", "figures.md", "smallbank.svg", "storage.svg"] {
            assert!(dir.path().join(name).is_file(), "{name}");
        }
    }
}

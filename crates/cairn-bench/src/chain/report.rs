//! The Markdown report of `chain` records: every metric per configuration, then the ratios of
//! `cairn-block` to each other configuration, then each configuration's settings.
//!
//! Owns: [`markdown`] and [`write()`] (`chain.md` from the `chain-*.json` records of a
//! directory). Must never touch: measuring.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::record::{ChainRecord, CHAIN};
use crate::failure::{Context, Failure};
use crate::options::ChainConfig;
use crate::report::table::Markdown;

/// The configuration the ratios are of.
const BASE: &str = "cairn-block";

/// Reads every `chain-*.json` record in `dir` and writes `dir/chain.md`; returns its path.
pub fn write(dir: &Path) -> Result<PathBuf, Failure> {
    let mut records: Vec<ChainRecord> = Vec::new();
    let entries = std::fs::read_dir(dir).context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .context(|| format!("listing {}", dir.display()))?
            .path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("chain-") && name.ends_with(".json") {
            let record: ChainRecord = crate::record::read_json(&path)?;
            if record.benchmark == CHAIN {
                records.push(record);
            }
        }
    }
    let order = |r: &ChainRecord| {
        ChainConfig::from_name(&r.config)
            .and_then(|c| ChainConfig::ALL.iter().position(|&a| a == c))
            .unwrap_or(usize::MAX)
    };
    records.sort_by_key(order);
    let path = dir.join("chain.md");
    std::fs::write(&path, markdown(&records)).context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn gb(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / 1e9)
}

fn opt<T>(value: Option<T>, f: impl Fn(T) -> String) -> String {
    value.map_or("n/a".to_string(), f)
}

/// The latency cell of `query`: p50 / p99 / mean in microseconds.
fn latency(record: &ChainRecord, query: &str) -> String {
    record
        .reads
        .iter()
        .find(|r| r.query == query)
        .map_or("n/a".to_string(), |r| {
            format!("{:.0} / {:.0} / {:.0}", r.p50_us, r.p99_us, r.mean_us)
        })
}

fn mean_latency(record: &ChainRecord, query: &str) -> Option<f64> {
    record
        .reads
        .iter()
        .find(|r| r.query == query)
        .map(|r| r.mean_us)
}

/// The shape of every table: `name: runs runs / levels levels`.
fn shapes(record: &ChainRecord) -> String {
    record
        .counters
        .tables
        .iter()
        .map(|t| match t.run_parts {
            Some(parts) if parts != t.runs => {
                format!("{}: {} ({} parts)/{}", t.name, t.runs, parts, t.levels)
            }
            _ => format!("{}: {}/{}", t.name, t.runs, t.levels),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Blocks per second over the load and the settling together: the rate at which the store
/// absorbs the stream with its background work done (RocksDB leaves compactions for after the
/// load; Cairn's merges are paced by its updates).
fn settled_blocks_per_s(record: &ChainRecord) -> f64 {
    record.blocks as f64 / (record.load_seconds + record.settle_seconds).max(1e-9)
}

/// Each Cairn table's write amplification: the run bytes it wrote over its user bytes.
fn table_amplification(record: &ChainRecord) -> String {
    let parts: Vec<String> = record
        .counters
        .tables
        .iter()
        .filter_map(|t| match (t.bytes_written, t.user_bytes) {
            (Some(written), Some(user)) if user > 0 => {
                Some(format!("{} {:.2}", t.name, written as f64 / user as f64))
            }
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        "n/a".into()
    } else {
        parts.join(", ")
    }
}

/// The report of `records`.
pub fn markdown(records: &[ChainRecord]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# cairn-bench chain\n");
    if let Some(r) = records.iter().find(|r| r.failure.is_none()) {
        let _ = writeln!(
            out,
            "Stream: seed {}, {} blocks of {} transactions and {} state writes ({}% updates), \
             bodies ~{} B, receipts ~{} B: {} pairs, {:.2} GB of user data (keys + values). \
             Block prefix groups of {} blocks. Cairn's bodies and receipts {}. Reads checked \
             against the model: {}.\n",
            r.seed,
            r.blocks,
            r.txs_per_block,
            r.state_writes_per_block,
            r.state_update_percent,
            r.body_bytes,
            r.receipts_bytes,
            r.pairs,
            r.user_bytes as f64 / 1e9,
            r.group_blocks,
            if r.blobs { "as blobs" } else { "inline" },
            if r.checked { "yes" } else { "no" },
        );
        let _ = writeln!(
            out,
            "Commit {}, {}; {} cores, {}. Command: `{}`.\n",
            r.commit.as_deref().unwrap_or("unknown"),
            r.date,
            r.machine.as_ref().map_or(0, |m| m.cores),
            r.machine
                .as_ref()
                .and_then(|m| m.cpu.clone())
                .unwrap_or_default(),
            r.command
        );
    }
    let mut table = Markdown::left(&[
        "configuration",
        "blocks/s",
        "blocks/s settled",
        "user MB/s",
        "load s",
        "settle s",
        "written GB",
        "write amp.",
        "write amp. per table",
        "merge steps",
        "merges (parts linked) / compactions",
        "compaction written GB",
        "space GB closed (open)",
        "runs/levels per table",
        "header by number µs p50/p99/mean",
        "tx by hash µs",
        "latest state µs",
        "cgroup peak MiB",
    ]);
    for r in records {
        if let Some(failure) = &r.failure {
            table.row([
                r.config.clone(),
                format!("failed: {}", failure.replace('|', "/")),
            ]);
            continue;
        }
        table.row([
            r.config.clone(),
            format!("{:.0}", r.blocks_per_s),
            format!("{:.0}", settled_blocks_per_s(r)),
            format!("{:.1}", r.user_mb_per_s),
            format!("{:.1}", r.load_seconds),
            format!("{:.1}", r.settle_seconds),
            opt(r.write_bytes_total, gb),
            opt(r.write_amplification, |w| format!("{w:.2}")),
            table_amplification(r),
            opt(r.counters.merge_steps, |m| m.to_string()),
            match (r.counters.merges, r.counters.compactions) {
                (Some(m), _) => format!("{m} ({})", r.counters.parts_linked.unwrap_or(0)),
                (None, c) => opt(c, |c| c.to_string()),
            },
            opt(r.counters.compaction_write_bytes, gb),
            format!("{} ({})", gb(r.space_bytes), gb(r.space_bytes_open)),
            shapes(r),
            latency(r, "header-by-number"),
            latency(r, "tx-by-hash"),
            latency(r, "state-latest"),
            opt(r.cgroup_peak_bytes, |b| (b >> 20).to_string()),
        ]);
    }
    out.push_str(&table.render());
    ratios(&mut out, records);
    let _ = writeln!(out, "\n## Settings\n");
    for r in records.iter().filter(|r| r.failure.is_none()) {
        let _ = writeln!(out, "- **{}**: {}", r.config, r.settings);
        if let Some(why) = &r.unsettled {
            let _ = writeln!(out, "  Not settled: {why}.");
        }
        if let Some(why) = &r.memory_unlimited_reason {
            let _ = writeln!(out, "  Ran without a memory limit: {why}.");
        }
    }
    out
}

/// The ratios of [`BASE`] to every other configuration (higher is better for cairn-block in
/// every column: throughput as base / other, costs as other / base).
fn ratios(out: &mut String, records: &[ChainRecord]) {
    let Some(base) = records
        .iter()
        .find(|r| r.config == BASE && r.failure.is_none())
    else {
        return;
    };
    let _ = writeln!(
        out,
        "\n## {BASE} against each configuration\n\nEach cell is how many times better \
         {BASE} is (blocks/s, of the load and with the settling: {BASE} ÷ other; write amplification, space and mean read \
         latencies: other ÷ {BASE}).\n"
    );
    let mut table = Markdown::left(&[
        "against",
        "blocks/s",
        "blocks/s settled",
        "write amp.",
        "space",
        "header by number",
        "tx by hash",
        "latest state",
    ]);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "n/a".to_string(),
    };
    for other in records
        .iter()
        .filter(|r| r.config != BASE && r.failure.is_none())
    {
        table.row([
            other.config.clone(),
            ratio(Some(base.blocks_per_s), Some(other.blocks_per_s)),
            ratio(
                Some(settled_blocks_per_s(base)),
                Some(settled_blocks_per_s(other)),
            ),
            ratio(other.write_amplification, base.write_amplification),
            ratio(
                Some(other.space_bytes as f64),
                Some(base.space_bytes as f64),
            ),
            ratio(
                mean_latency(other, "header-by-number"),
                mean_latency(base, "header-by-number"),
            ),
            ratio(
                mean_latency(other, "tx-by-hash"),
                mean_latency(base, "tx-by-hash"),
            ),
            ratio(
                mean_latency(other, "state-latest"),
                mean_latency(base, "state-latest"),
            ),
        ]);
    }
    out.push_str(&table.render());
}

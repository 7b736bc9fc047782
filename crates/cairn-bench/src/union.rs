//! `cairn-bench union`: lsm-tree's table-union benchmark (lsm-tree reports about 290k lookups/s
//! on a plain table, about 77k/s on the union of 10 tables of 1M entries with its full debt and
//! 540-655k/s once it is paid off).
//!
//! Owns: [`run`], the tables' overlapping id ranges ([`table_ids`], [`distinct_ids`]), the lookup
//! passes and the debt payment. May call: the Cairn adapter ([`CairnSession`], [`CairnTable`])
//! for the engine, and the UTxO benchmark's keys, loading and checks.
//!
//! 1. **Fill.** One session in a fresh temporary directory; `--tables` tables with the UTxO
//!    benchmark's configuration (compact index, filters per level at FPR 5e-3 on the deepest,
//!    20,000-entry write buffer, no page
//!    cache for runs unless `--disk-cache all`). Table `t` holds ids `t*N/2 .. t*N/2 + N`
//!    (keys and values as in `utxo quick`), so neighbouring tables share half their keys and the
//!    union holds ids `0 .. (tables-1)*N/2 + N`.
//! 2. **Baseline.** `--lookups` lookups on table 0 alone, in batches of 256 ids chosen
//!    uniformly (with replacement) from table 0's ids.
//! 3. **Union with debt.** `Table::incremental_unions` of all tables (timed: it should do no
//!    I/O), `remaining_union_debt`, then the same number of lookups on the union, ids chosen
//!    uniformly from the union's ids.
//! 4. **Payment.** `supply_union_credits(--credit-chunk)` until `remaining_union_debt` is 0,
//!    checking after every call that the debt did not grow.
//! 5. **Paid off.** The union's lookup pass again, with exactly the same ids.
//!
//! Every table stores an id's own value, so whichever table a union takes a key's value from,
//! every lookup must be `Found` with exactly the id's value; any other result is a mismatch and
//! makes the command exit with status 1 after printing the results.

use std::ops::Range;
use std::path::Path;
use std::time::Instant;

use crate::cli::UnionArgs;
use crate::engines::cairn::{CairnSession, CairnTable, TableKind, TableSettings};
use crate::failure::{Context, Failure};
use crate::in_temp_dir;
use crate::keys::{utxo_key, SplitMix64, KEY_BYTES};
use crate::record::{write_json, UnionRecord};
use crate::report::terminal;
use crate::stats::percentiles;
use crate::sys::proc::peak_rss_bytes;
use crate::utxo::driver::{count_mismatches, BATCH_SIZE};
use crate::utxo::progress::Progress;
use crate::utxo::setup::load_chunks;

/// Separates the lookup-choice stream from the key streams, which are seeded with `id ^ seed`.
const LOOKUP_STREAM: u64 = 0x5eed_0010_0000_0003;

/// The ids table `table` (counting from 0) holds when every table holds `entries`: the range
/// starts half a table after the previous one's, so neighbours share about half their ids.
pub fn table_ids(table: u64, entries: u64) -> Range<u64> {
    let start = table * entries / 2;
    start..start + entries
}

/// The number of distinct ids in `ranges` (which may overlap, in any order).
pub fn distinct_ids(ranges: &[Range<u64>]) -> u64 {
    let mut sorted: Vec<Range<u64>> = ranges.iter().filter(|r| !r.is_empty()).cloned().collect();
    sorted.sort_by_key(|r| r.start);
    let mut count = 0;
    let mut covered_to = 0;
    for range in sorted {
        let start = range.start.max(covered_to);
        if range.end > start {
            count += range.end - start;
            covered_to = range.end;
        }
    }
    count
}

/// The smallest range holding every id of `ranges` (empty when there are none).
pub fn spanning_ids(ranges: &[Range<u64>]) -> Range<u64> {
    let start = ranges.iter().map(|r| r.start).min().unwrap_or(0);
    let end = ranges.iter().map(|r| r.end).max().unwrap_or(0);
    start..end.max(start)
}

/// Runs `union` in a temporary directory, prints the table and writes the JSON file.
pub fn run(args: &UnionArgs) -> Result<(), Failure> {
    let report = in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
        bench_in(dir, args)
    })?;
    print!("{}", terminal::union(&report));
    if let Some(path) = &args.common.json {
        write_json(&report, path)?;
    }
    match problems(&report) {
        Some(problems) => Err(Failure(problems)),
        None => Ok(()),
    }
}

/// What went wrong in the run, if anything: wrong lookups or a debt that grew.
fn problems(report: &UnionRecord) -> Option<String> {
    let mut problems = Vec::new();
    if report.lookup_mismatches > 0 {
        problems.push(format!(
            "{} lookups did not return the expected value",
            report.lookup_mismatches
        ));
    }
    if report.union_debt_increases > 0 {
        problems.push(format!(
            "the union debt increased after {} supply calls",
            report.union_debt_increases
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; ") + " (see the lines above)")
}

/// Opens a session in `dir`, runs every phase and collects the report. Every table and the
/// session are closed before this returns, so the directory can be removed.
fn bench_in(dir: &Path, args: &UnionArgs) -> Result<UnionRecord, Failure> {
    let session = CairnSession::open(dir, args.common.io, args.common.seed, false, false)?;
    let mut report = UnionRecord {
        engine: "cairn",
        tables: args.tables,
        entries_per_table: args.entries_per_table,
        lookups: args.lookups,
        seed: args.common.seed,
        io_backend: session.io_backend_name(),
        disk_cache: args.common.disk_cache.name(),
        credit_chunk: args.credit_chunk,
        ..UnionRecord::default()
    };
    let tables = fill_tables(&session, args, &mut report)?;
    let result = measure_union(&tables, args, &mut report);
    for table in tables {
        table.close();
    }
    session.close();
    result?;
    report.peak_rss_bytes = peak_rss_bytes();
    Ok(report)
}

/// Creates the tables and fills table `t` with [`table_ids`]`(t, N)`, recording the fill time,
/// the input runs and the union's distinct key count.
fn fill_tables(
    session: &CairnSession,
    args: &UnionArgs,
    report: &mut UnionRecord,
) -> Result<Vec<CairnTable>, Failure> {
    let settings = TableSettings {
        kind: TableKind::Utxo,
        write_buffer: args.common.write_buffer,
        merge_batch_size: args.common.merge_batch_size,
        disk_cache: args.common.disk_cache,
        filters_for_hits: false,
    };
    let ranges: Vec<Range<u64>> = (0..args.tables)
        .map(|t| table_ids(t, args.entries_per_table))
        .collect();
    report.union_keys = distinct_ids(&ranges);
    let mut tables = Vec::with_capacity(ranges.len());
    for (t, ids) in ranges.into_iter().enumerate() {
        let table = session
            .new_table(&settings)
            .context(|| format!("table {t}"))?;
        let label = format!("fill table {t}");
        let entries = ids.map(|id| (utxo_key(id, args.common.seed), id));
        report.fill_seconds += load_chunks(entries, &label, |chunk| table.inserts(chunk))?;
        report.input_runs += table.shape().context(|| format!("table {t}"))?.runs;
        tables.push(table);
    }
    Ok(tables)
}

/// The baseline pass, the union's start, its lookups with debt, the payment and the lookups
/// once paid off. The union table is closed before this returns.
fn measure_union(
    tables: &[CairnTable],
    args: &UnionArgs,
    report: &mut UnionRecord,
) -> Result<(), Failure> {
    let n = args.entries_per_table;
    let baseline = lookup_pass(&tables[0], table_ids(0, n), args, "baseline lookups")?;
    (
        report.baseline_lookups_per_sec,
        report.baseline_p99_batch_ms,
    ) = baseline.rate(args.lookups);
    let start = Instant::now();
    let union = CairnTable::union(tables)?;
    report.union_start_ms = start.elapsed().as_secs_f64() * 1e3;
    let result = measure_started_union(&union, args, report, baseline.mismatches);
    union.close();
    result
}

/// Everything after the union's start: debt, lookups with debt, payment, lookups paid off.
fn measure_started_union(
    union: &CairnTable,
    args: &UnionArgs,
    report: &mut UnionRecord,
    baseline_mismatches: u64,
) -> Result<(), Failure> {
    let ranges: Vec<Range<u64>> = (0..args.tables)
        .map(|t| table_ids(t, args.entries_per_table))
        .collect();
    let union_ids = spanning_ids(&ranges);
    report.union_debt_start = union.union_debt()?;
    report.union_keys_upper_bound = report.union_debt_start;
    eprintln!(
        "union started in {:.3} ms with debt {} ({} distinct keys)",
        report.union_start_ms, report.union_debt_start, report.union_keys
    );
    let with_debt = lookup_pass(union, union_ids.clone(), args, "union lookups with debt")?;
    (
        report.union_with_debt_lookups_per_sec,
        report.union_with_debt_p99_batch_ms,
    ) = with_debt.rate(args.lookups);
    let payment = pay_debt(union, args.credit_chunk)?;
    payment.record(report);
    let paid = lookup_pass(union, union_ids, args, "union lookups paid off")?;
    (
        report.union_paid_lookups_per_sec,
        report.union_paid_p99_batch_ms,
    ) = paid.rate(args.lookups);
    let shape = union.shape().context(|| "the paid-off union".to_string())?;
    (report.union_paid_runs, report.union_paid_levels) = (shape.runs, shape.levels);
    report.lookup_mismatches = baseline_mismatches + with_debt.mismatches + paid.mismatches;
    Ok(())
}

/// One lookup pass: its wall-clock time, its batches' engine times and its wrong results.
struct LookupPass {
    seconds: f64,
    batch_ms: Vec<f64>,
    mismatches: u64,
}

impl LookupPass {
    /// (`lookups` per second, 99th-percentile batch ms).
    fn rate(&self, lookups: u64) -> (f64, f64) {
        let per_sec = lookups as f64 / self.seconds.max(1e-9);
        (per_sec, percentiles(&self.batch_ms).p99)
    }
}

/// Looks up `args.lookups` ids chosen uniformly from `ids` in `table`, in batches of
/// [`BATCH_SIZE`] (the last one possibly smaller), checking every result. The choices depend
/// only on the seed and `ids`, so two passes over the same range look up the same keys.
fn lookup_pass(
    table: &CairnTable,
    ids: Range<u64>,
    args: &UnionArgs,
    label: &str,
) -> Result<LookupPass, Failure> {
    let mut rng = SplitMix64::new(args.common.seed ^ LOOKUP_STREAM);
    let batches = args.lookups.div_ceil(BATCH_SIZE as u64);
    let mut progress = Progress::new(label, "batches", batches);
    let mut pass = LookupPass {
        seconds: 0.0,
        batch_ms: Vec::with_capacity(batches as usize),
        mismatches: 0,
    };
    let mut batch_ids: Vec<u64> = Vec::with_capacity(BATCH_SIZE);
    let start = Instant::now();
    for batch in 0..batches {
        let size = (args.lookups - batch * BATCH_SIZE as u64).min(BATCH_SIZE as u64);
        batch_ids.clear();
        batch_ids.extend((0..size).map(|_| ids.start + rng.below(ids.end - ids.start)));
        let keys: Vec<[u8; KEY_BYTES]> = batch_ids
            .iter()
            .map(|&id| utxo_key(id, args.common.seed))
            .collect();
        let call = Instant::now();
        let results = table
            .lookups(&keys)
            .context(|| format!("{label}: batch {batch}"))?;
        pass.batch_ms.push(call.elapsed().as_secs_f64() * 1e3);
        count_mismatches(&batch_ids, &results, &mut pass.mismatches);
        progress.update(batch + 1, BATCH_SIZE as u64);
    }
    pass.seconds = start.elapsed().as_secs_f64();
    Ok(pass)
}

/// What paying the union's debt off took.
#[derive(Debug, Default)]
struct Payment {
    seconds: f64,
    credits_spent: u64,
    calls: u64,
    max_call_ms: f64,
    debt_increases: u64,
}

impl Payment {
    /// Copies the payment's numbers into the report.
    fn record(&self, report: &mut UnionRecord) {
        report.union_pay_seconds = self.seconds;
        report.union_credits_spent = self.credits_spent;
        report.union_credits_per_sec = self.credits_spent as f64 / self.seconds.max(1e-9);
        report.union_supply_calls = self.calls;
        report.union_supply_max_ms = self.max_call_ms;
        report.union_debt_increases = self.debt_increases;
    }
}

/// Supplies `chunk` credits at a time until the union's debt is 0, checking after every call
/// that the debt did not grow and that left-over credits come only with a finished union.
/// Fails if the debt is not 0 after two calls more than the starting debt needs.
fn pay_debt(union: &CairnTable, chunk: u64) -> Result<Payment, Failure> {
    let start_debt = union.union_debt()?;
    let max_calls = start_debt / chunk + 2;
    let mut progress = Progress::new("union payment", "debt credits", start_debt);
    let mut payment = Payment::default();
    let mut remaining = start_debt;
    let start = Instant::now();
    while remaining > 0 {
        if payment.calls >= max_calls {
            return Err(Failure(format!(
                "the union debt is still {remaining} after {} calls of {chunk} credits \
                 (it started at {start_debt})",
                payment.calls
            )));
        }
        let call = Instant::now();
        let leftover = union
            .supply_union_credits(chunk)
            .context(|| format!("call {}", payment.calls))?;
        payment.max_call_ms = payment.max_call_ms.max(call.elapsed().as_secs_f64() * 1e3);
        payment.calls += 1;
        payment.credits_spent += chunk.saturating_sub(leftover);
        let next = union.union_debt()?;
        check_debt_step(remaining, next, leftover, &mut payment)?;
        remaining = next;
        progress.update(start_debt - remaining.min(start_debt), 1);
    }
    payment.seconds = start.elapsed().as_secs_f64();
    Ok(payment)
}

/// Checks one payment step: the debt went from `before` to `after` and the call left
/// `leftover` credits. A growing debt is counted (and described); left-over credits with debt
/// still remaining break the engine's contract, so they fail the run.
fn check_debt_step(
    before: u64,
    after: u64,
    leftover: u64,
    payment: &mut Payment,
) -> Result<(), Failure> {
    if after > before {
        payment.debt_increases += 1;
        eprintln!(
            "check: the union debt grew from {before} to {after} (call {})",
            payment.calls
        );
    }
    if leftover > 0 && after > 0 {
        return Err(Failure(format!(
            "supply_union_credits left {leftover} credits over but the debt is still {after}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbouring_tables_share_half_their_ids() {
        let ranges: Vec<Range<u64>> = (0..4).map(|t| table_ids(t, 1000)).collect();
        assert_eq!(ranges, vec![0..1000, 500..1500, 1000..2000, 1500..2500]);
        assert_eq!(distinct_ids(&ranges), 2500);
        assert_eq!(spanning_ids(&ranges), 0..2500);
    }

    #[test]
    fn odd_sizes_still_cover_a_contiguous_range() {
        let ranges: Vec<Range<u64>> = (0..4).map(|t| table_ids(t, 5)).collect();
        assert_eq!(ranges, vec![0..5, 2..7, 5..10, 7..12]);
        assert_eq!(distinct_ids(&ranges), 12);
        assert_eq!(table_ids(0, 1), 0..1);
        assert_eq!(table_ids(1, 1), 0..1, "one-entry tables coincide");
        for tables in 1..10 {
            for n in 1..20 {
                let ranges: Vec<Range<u64>> = (0..tables).map(|t| table_ids(t, n)).collect();
                let span = spanning_ids(&ranges);
                assert_eq!(
                    distinct_ids(&ranges),
                    span.end - span.start,
                    "{tables} x {n}"
                );
            }
        }
    }

    #[test]
    fn distinct_ids_handles_gaps_nesting_and_order() {
        assert_eq!(distinct_ids(&[]), 0);
        assert_eq!(distinct_ids(&[10..20, 0..5]), 15);
        assert_eq!(distinct_ids(&[0..100, 10..20, 50..150]), 150);
        assert_eq!(distinct_ids(&[5..5, 3..4]), 1);
        assert_eq!(spanning_ids(&[]), 0..0);
    }

    #[test]
    fn problems_name_mismatches_and_debt_increases() {
        assert!(problems(&UnionRecord::default()).is_none());
        let report = UnionRecord {
            lookup_mismatches: 3,
            union_debt_increases: 1,
            ..UnionRecord::default()
        };
        let problems = problems(&report).unwrap();
        assert!(problems.contains("3 lookups"), "{problems}");
        assert!(problems.contains("increased after 1"), "{problems}");
    }

    #[test]
    fn debt_steps_are_checked() {
        let mut payment = Payment::default();
        check_debt_step(100, 50, 0, &mut payment).unwrap();
        check_debt_step(50, 0, 7, &mut payment).unwrap();
        assert_eq!(payment.debt_increases, 0);
        check_debt_step(50, 60, 0, &mut payment).unwrap();
        assert_eq!(payment.debt_increases, 1);
        assert!(check_debt_step(50, 10, 5, &mut payment).is_err());
    }
}

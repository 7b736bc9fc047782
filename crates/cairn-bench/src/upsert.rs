//! `cairn-bench upsert`: lsm-tree's upsert benchmark (requirement P2).
//!
//! Owns: the two comparisons, their keys and counters, and their report. May call: the Cairn
//! adapter ([`CairnSession`], [`CairnTable`]) for the engine.
//!
//! lsm-tree's parameters: 64-byte keys and values, 80,000 elements, addition as the resolve
//! function, 250 operations per batch, a 1,000-entry write buffer, 10 upserts per key. A value
//! is a counter: its first 8 bytes are a little-endian `u64`, the other 56 are zero, and the
//! resolve function adds the counters (associative, as upserts require).
//!
//! 1. **Insert vs upsert.** Into an empty table, every element once, in batches: `inserts` in one
//!    table, `upserts` in another. The same data; an upsert must cost what an insert costs
//!    (target: within 5%).
//! 2. **Upserts vs lookup-then-insert.** Every element `upserts_per_key` times, in batches: an
//!    `upserts` call adding 1, against a `lookups` call followed by an `inserts` call of the
//!    incremented values. Target: upserts at least 2x faster.
//!
//! Each measurement runs in a fresh session and table, `--repeat` times, alternating the two
//! sides, and the medians are reported. At the end every key of both tables of comparison 2 is
//! looked up: each counter must equal `upserts_per_key` (any other value fails the command).

use std::path::Path;
use std::time::Instant;

use crate::cli::UpsertArgs;
use crate::engines::cairn::{CairnSession, CairnTable, TableKind, TableSettings};
use crate::failure::{Context, Failure};
use crate::keys::SplitMix64;
use crate::record::{write_json, UpsertRecord, UpsertSamples};
use crate::report::terminal;
use crate::stats::median;
use crate::sys::proc::peak_rss_bytes;

/// Bytes of a key and of a value.
pub const ELEMENT_BYTES: usize = 64;

fn key(i: u64, seed: u64) -> [u8; ELEMENT_BYTES] {
    let mut rng = SplitMix64::new(i ^ seed.rotate_left(17));
    let mut key = [0u8; ELEMENT_BYTES];
    for chunk in key.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    key
}

fn counter(n: u64) -> [u8; ELEMENT_BYTES] {
    let mut value = [0u8; ELEMENT_BYTES];
    value[..8].copy_from_slice(&n.to_le_bytes());
    value
}

fn counter_of(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

/// The resolve function: adds the counters of two values.
fn add_counters(newer: &[u8], older: &[u8]) -> Vec<u8> {
    let sum = counter_of(newer)
        .unwrap_or(0)
        .wrapping_add(counter_of(older).unwrap_or(0));
    counter(sum).to_vec()
}

/// Every table's configuration: Cairn's defaults, `--upsert-write-buffer`, [`add_counters`].
fn settings(args: &UpsertArgs) -> TableSettings {
    TableSettings {
        kind: TableKind::Upsert(add_counters),
        write_buffer: args.upsert_write_buffer,
        merge_batch_size: args.common.merge_batch_size,
        disk_cache: args.common.disk_cache,
        filters_for_hits: false,
    }
}

/// Runs the benchmark, prints the table and writes the JSON file.
pub fn run(args: &UpsertArgs) -> Result<(), Failure> {
    let report = crate::in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
        bench_in(dir, args)
    })?;
    print!("{}", terminal::upsert(&report, ELEMENT_BYTES));
    if let Some(path) = &args.common.json {
        write_json(&report, path)?;
    }
    if report.mismatches > 0 {
        return Err(Failure(format!(
            "{} keys ended with a wrong counter",
            report.mismatches
        )));
    }
    Ok(())
}

fn bench_in(dir: &Path, args: &UpsertArgs) -> Result<UpsertRecord, Failure> {
    let keys: Vec<[u8; ELEMENT_BYTES]> = (0..args.elements)
        .map(|i| key(i, args.common.seed))
        .collect();
    let mut samples = UpsertSamples::default();
    let mut mismatches = 0;
    for round in 0..args.repeat as usize {
        eprintln!("round {} of {}", round + 1, args.repeat);
        // Alternate which side goes first, so neither always meets a colder cache.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let ms = with_table(dir, args, round * 4 + side, |table| {
                let one = counter(1);
                let timer = Instant::now();
                for batch in keys.chunks(args.batch as usize) {
                    let pairs: Vec<(&[u8], &[u8])> =
                        batch.iter().map(|k| (&k[..], &one[..])).collect();
                    if side == 0 {
                        table.inserts(&pairs)?;
                    } else {
                        table.upserts(&pairs)?;
                    }
                }
                Ok(timer.elapsed().as_secs_f64() * 1e3)
            })?;
            if side == 0 {
                samples.insert.push(ms);
            } else {
                samples.upsert.push(ms);
            }
        }
        for side in order {
            let (ms, wrong) = with_table(dir, args, round * 4 + 2 + side, |table| {
                let timer = Instant::now();
                for _ in 0..args.upserts_per_key {
                    for batch in keys.chunks(args.batch as usize) {
                        if side == 0 {
                            repeat_by_upsert(table, batch)?;
                        } else {
                            repeat_by_lookup_then_insert(table, batch)?;
                        }
                    }
                }
                let ms = timer.elapsed().as_secs_f64() * 1e3;
                Ok((ms, check_counters(table, &keys, args.upserts_per_key)?))
            })?;
            mismatches += wrong;
            if side == 0 {
                samples.repeated_upserts.push(ms);
            } else {
                samples.lookup_then_insert.push(ms);
            }
        }
    }
    let insert_ms = median(&samples.insert);
    let upsert_ms = median(&samples.upsert);
    let repeated_upserts_ms = median(&samples.repeated_upserts);
    let lookup_then_insert_ms = median(&samples.lookup_then_insert);
    Ok(UpsertRecord {
        benchmark: "upsert",
        engine: "cairn",
        elements: args.elements,
        batch: args.batch,
        write_buffer: args.upsert_write_buffer,
        upserts_per_key: args.upserts_per_key,
        repeat: args.repeat,
        insert_ms,
        upsert_ms,
        upsert_over_insert: upsert_ms / insert_ms,
        repeated_upserts_ms,
        lookup_then_insert_ms,
        upsert_speedup: lookup_then_insert_ms / repeated_upserts_ms,
        samples_ms: samples,
        mismatches,
        peak_rss_bytes: peak_rss_bytes(),
    })
}

/// Runs `f` on a new table in a new session in `dir/<n>`, then closes both.
fn with_table<T>(
    dir: &Path,
    args: &UpsertArgs,
    n: usize,
    f: impl FnOnce(&CairnTable) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let dir = dir.join(n.to_string());
    std::fs::create_dir(&dir).context(|| format!("creating {}", dir.display()))?;
    let session = CairnSession::open(&dir, args.common.io, args.common.seed, false, false)?;
    let table = session.new_table(&settings(args))?;
    let result = f(&table);
    table.close();
    session.close();
    std::fs::remove_dir_all(&dir).context(|| format!("removing {}", dir.display()))?;
    result
}

fn repeat_by_upsert(table: &CairnTable, batch: &[[u8; ELEMENT_BYTES]]) -> Result<(), Failure> {
    let one = counter(1);
    let pairs: Vec<(&[u8], &[u8])> = batch.iter().map(|k| (&k[..], &one[..])).collect();
    table.upserts(&pairs)
}

fn repeat_by_lookup_then_insert(
    table: &CairnTable,
    batch: &[[u8; ELEMENT_BYTES]],
) -> Result<(), Failure> {
    let values: Vec<[u8; ELEMENT_BYTES]> = table.lookups_with(batch, |value| {
        counter(value.and_then(counter_of).unwrap_or(0) + 1)
    })?;
    let pairs: Vec<(&[u8], &[u8])> = batch
        .iter()
        .zip(&values)
        .map(|(k, v)| (&k[..], &v[..]))
        .collect();
    table.inserts(&pairs)
}

/// Keys whose counter is not `expected`.
fn check_counters(
    table: &CairnTable,
    keys: &[[u8; ELEMENT_BYTES]],
    expected: u64,
) -> Result<u64, Failure> {
    let mut wrong = 0;
    for batch in keys.chunks(1024) {
        let right = table
            .lookups_with(batch, |value| value.and_then(counter_of) == Some(expected))
            .context(|| "checking the counters".to_string())?;
        wrong += right.iter().filter(|&&right| !right).count() as u64;
    }
    Ok(wrong)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add() {
        let sum = add_counters(&counter(3), &counter(4));
        assert_eq!(counter_of(&sum), Some(7));
        assert_eq!(sum.len(), ELEMENT_BYTES);
        assert_ne!(key(1, 7), key(2, 7));
    }
}

//! The UTxO workload: the setup inserts, the serial batches and the lookup-only pass, with every
//! lookup result checked against the [`LiveSet`] model.
//!
//! Owns: [`setup`], [`Driver`] and the progress lines on stderr. May call: the engine's public
//! `Table` API only, as lsm-tree's benchmark does.
//!
//! Sketch of a serial batch on a table of N entries with `runs` runs: 256 lookups hash each key
//! once, probe every run's Bloom filter (FPR 1e-3) and read about one 4 KiB page per key, all
//! submitted together (about 256 random reads, the disk's budget); then 512 updates go to the
//! write buffer, which every 20,000 updates is written out as a run, and pay at most a bounded
//! number of merge steps each (sequential I/O). CPU for keys and checks is about 1 µs per key.

use std::ops::Range;
use std::time::{Duration, Instant};

use cairn::{LookupResult, Table, Update};

use crate::failure::{Context, Failure};
use crate::utxo::keys::{utxo_key, utxo_value, SplitMix64, KEY_BYTES, VALUE_BYTES};
use crate::utxo::live::LiveSet;

/// Lookups, inserts and deletes per batch (each).
pub const BATCH_SIZE: usize = 256;

/// Entries per `Table::inserts` call during setup.
pub const SETUP_CHUNK: usize = 10_000;

/// Mismatching lookups described on stderr; later ones are only counted.
const MISMATCH_REPORT_MAX: u64 = 5;

/// Separates the batch-choice stream from the key streams, which are seeded with `id ^ seed`.
const CHOICE_STREAM: u64 = 0x5eed_c401_ce00_0001;

/// Wall-clock time of one phase and the latency of each of its batches.
#[derive(Clone, Debug, Default)]
pub struct PhaseTiming {
    /// Seconds from the first batch's start to the last batch's end (key generation and checks
    /// included).
    pub seconds: f64,
    /// Time spent in engine calls per batch, in milliseconds.
    pub batch_ms: Vec<f64>,
}

/// Prints a line to stderr each time another tenth of the work is done.
pub struct Progress {
    label: String,
    unit: &'static str,
    total: u64,
    tenths_reported: u64,
    start: Instant,
}

impl Progress {
    /// A reporter for `total` units of work, named `label` in its lines.
    pub fn new(label: impl Into<String>, unit: &'static str, total: u64) -> Progress {
        Progress {
            label: label.into(),
            unit,
            total,
            tenths_reported: 0,
            start: Instant::now(),
        }
    }

    /// Records that `done` units (of `ops_per_unit` operations each) are complete.
    pub fn update(&mut self, done: u64, ops_per_unit: u64) {
        let tenths = done * 10 / self.total.max(1);
        if tenths <= self.tenths_reported {
            return;
        }
        self.tenths_reported = tenths;
        let seconds = self.start.elapsed().as_secs_f64();
        eprintln!(
            "{}: {:>3}% ({done}/{} {}, {:.0} ops/s, {seconds:.1} s)",
            self.label,
            tenths * 10,
            self.total,
            self.unit,
            (done * ops_per_unit) as f64 / seconds.max(1e-9),
        );
    }
}

/// Inserts ids `0..entries` in chunks of [`SETUP_CHUNK`] and returns the seconds it took.
pub fn setup(table: &Table, entries: u64, seed: u64) -> Result<f64, Failure> {
    fill(table, 0..entries, seed, "setup")
}

/// Inserts the ids of `ids` (key and value of each, see [`utxo_key`] and [`utxo_value`]) in
/// chunks of [`SETUP_CHUNK`], with progress lines named `label`, and returns the seconds it took.
pub fn fill(table: &Table, ids: Range<u64>, seed: u64, label: &str) -> Result<f64, Failure> {
    let start = Instant::now();
    let mut progress = Progress::new(label, "entries", ids.end.saturating_sub(ids.start));
    let mut chunk: Vec<([u8; KEY_BYTES], [u8; VALUE_BYTES])> = Vec::with_capacity(SETUP_CHUNK);
    let mut id = ids.start;
    while id < ids.end {
        let end = (id + SETUP_CHUNK as u64).min(ids.end);
        chunk.clear();
        chunk.extend((id..end).map(|i| (utxo_key(i, seed), utxo_value(i))));
        table
            .inserts(&chunk)
            .context(|| format!("{label}: inserting ids {id}..{end}"))?;
        id = end;
        progress.update(id - ids.start, 1);
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Drives the batches against a table after [`setup`], keeping the model of live ids.
pub struct Driver<'t> {
    table: &'t Table,
    seed: u64,
    rng: SplitMix64,
    live: LiveSet,
    mismatches: u64,
}

impl<'t> Driver<'t> {
    /// A driver for `table`, which holds ids `0..entries` generated with `seed`.
    pub fn new(table: &'t Table, entries: u64, seed: u64) -> Driver<'t> {
        Driver {
            table,
            seed,
            rng: SplitMix64::new(seed ^ CHOICE_STREAM),
            live: LiveSet::new(entries),
            mismatches: 0,
        }
    }

    /// Lookups that did not return exactly the expected value so far.
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }

    /// Runs `batches` serial batches: 256 lookups of live keys, then one `updates` call with
    /// 256 inserts of fresh keys and 256 deletes of distinct live keys.
    pub fn run_serial(&mut self, batches: u64) -> Result<PhaseTiming, Failure> {
        self.run_phase("run", batches, true)
    }

    /// Runs `batches` batches of 256 lookups of live keys and nothing else.
    pub fn run_lookup_only(&mut self, batches: u64) -> Result<PhaseTiming, Failure> {
        self.run_phase("lookup-only", batches, false)
    }

    fn run_phase(
        &mut self,
        label: &'static str,
        batches: u64,
        with_updates: bool,
    ) -> Result<PhaseTiming, Failure> {
        let ops_per_batch = if with_updates { 3 } else { 1 } * BATCH_SIZE as u64;
        let mut progress = Progress::new(label, "batches", batches);
        let mut batch_ms = Vec::with_capacity(batches as usize);
        let start = Instant::now();
        for batch in 0..batches {
            let mut engine_time = self
                .lookup_batch()
                .context(|| format!("{label}: lookups of batch {batch}"))?;
            if with_updates {
                engine_time += self
                    .update_batch()
                    .context(|| format!("{label}: updates of batch {batch}"))?;
            }
            batch_ms.push(engine_time.as_secs_f64() * 1e3);
            progress.update(batch + 1, ops_per_batch);
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(PhaseTiming { seconds, batch_ms })
    }

    /// Looks up 256 live ids chosen uniformly, checks every result, and returns the time spent
    /// in the engine.
    fn lookup_batch(&mut self) -> Result<Duration, cairn::Error> {
        let mut ids = Vec::with_capacity(BATCH_SIZE);
        self.live
            .pick_live_many(&mut self.rng, BATCH_SIZE, &mut ids);
        let keys: Vec<[u8; KEY_BYTES]> = ids.iter().map(|&id| utxo_key(id, self.seed)).collect();
        let start = Instant::now();
        let results = self.table.lookups(&keys)?;
        let elapsed = start.elapsed();
        self.check(&ids, &results);
        Ok(elapsed)
    }

    /// Applies 256 inserts of the next fresh ids and 256 deletes of distinct live ids in one
    /// `updates` call, and returns the time spent in the engine.
    fn update_batch(&mut self) -> Result<Duration, cairn::Error> {
        let live_before = self.live.live();
        let mut deleted = Vec::with_capacity(BATCH_SIZE);
        self.live
            .delete_random(&mut self.rng, BATCH_SIZE, &mut deleted);
        let seed = self.seed;
        let inserts: Vec<([u8; KEY_BYTES], [u8; VALUE_BYTES])> = self
            .live
            .insert_fresh(BATCH_SIZE as u64)
            .map(|id| (utxo_key(id, seed), utxo_value(id)))
            .collect();
        debug_assert_eq!(self.live.live(), live_before, "deletes balance inserts");
        let deletes: Vec<[u8; KEY_BYTES]> = deleted.iter().map(|&id| utxo_key(id, seed)).collect();
        let mut batch: Vec<(&[u8], Update<'_>)> = Vec::with_capacity(2 * BATCH_SIZE);
        batch.extend(
            inserts
                .iter()
                .map(|(k, v)| (&k[..], Update::Insert(&v[..]))),
        );
        batch.extend(deletes.iter().map(|k| (&k[..], Update::Delete)));
        let start = Instant::now();
        self.table.updates(&batch)?;
        Ok(start.elapsed())
    }

    /// Counts (and describes the first few) results that are not `Found` with the id's value.
    fn check(&mut self, ids: &[u64], results: &[LookupResult]) {
        count_mismatches(ids, results, &mut self.mismatches);
    }
}

/// Adds to `mismatches` the results that are not `Found` with the value of the id asked for
/// (`results[i]` answers `ids[i]`), describing on stderr those that bring the count to at most
/// [`MISMATCH_REPORT_MAX`]. A result count that differs from the id count counts every id.
pub fn count_mismatches(ids: &[u64], results: &[LookupResult], mismatches: &mut u64) {
    if results.len() != ids.len() {
        eprintln!(
            "check: {} lookups returned {} results",
            ids.len(),
            results.len()
        );
        *mismatches += ids.len() as u64;
        return;
    }
    for (&id, result) in ids.iter().zip(results) {
        let expected = utxo_value(id);
        if matches!(result, LookupResult::Found(v) if v[..] == expected[..]) {
            continue;
        }
        *mismatches += 1;
        if *mismatches <= MISMATCH_REPORT_MAX {
            eprintln!(
                "check: lookup of live id {id} returned {}; expected Found with its value",
                describe(result)
            );
        }
    }
}

/// A short description of a wrong lookup result.
fn describe(result: &LookupResult) -> String {
    match result {
        LookupResult::NotFound => "NotFound".into(),
        LookupResult::Found(v) => match <[u8; 8]>::try_from(v.get(..8).unwrap_or_default()) {
            Ok(word) if v.len() == VALUE_BYTES => {
                format!("Found with the value of id {}", u64::from_le_bytes(word))
            }
            _ => format!("Found with a {}-byte value", v.len()),
        },
        LookupResult::FoundWithBlob(v, _) => format!("FoundWithBlob with a {}-byte value", v.len()),
    }
}

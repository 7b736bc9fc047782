//! The UTxO driver: the batches of the benchmark, run against any [`Engine`], with every lookup
//! result checked against the [`LiveSet`] model. `utxo quick` and `utxo run` both drive their
//! engine through it.
//!
//! Owns: the choice of each batch (which ids are looked up, inserted and deleted), the serial,
//! lookup-only and pipelined phases, their timing and the mismatch count. May call: [`Engine`]
//! and [`Reader`] only, never an engine's own API.
//!
//! A batch looks up [`BATCH_SIZE`] live ids chosen uniformly, then (with updates) applies one
//! update of [`BATCH_SIZE`] inserts of fresh ids and [`BATCH_SIZE`] deletes of distinct live ids
//! chosen uniformly. The choices are made on the model before the engine is called, so they
//! depend only on the seed and the batches before them (which is what lets `utxo run` replay the
//! runs a peer's table has already seen).
//!
//! Sketch of a serial batch on a Cairn table of N entries with `runs` runs: 256 lookups hash each
//! key once, probe every run's Bloom filter (FPR 5e-3 on the deepest filtered level, 4x lower per
//! level above) and read about one 4 KiB page per key, all
//! submitted together (about 256 random reads, the disk's budget); then 512 updates go to the
//! write buffer, which every 20,000 updates is written out as a run, and pay at most a bounded
//! number of merge steps each (sequential I/O). CPU for keys and checks is about 1 µs per key.

use std::sync::mpsc;
use std::time::Instant;

use crate::engines::{Engine, Key, Reader, Value};
use crate::failure::{Context, Failure};
use crate::keys::{utxo_key, utxo_value, SplitMix64};
use crate::utxo::live::LiveSet;
use crate::utxo::progress::Progress;

/// Lookups, inserts and deletes per batch (each).
pub const BATCH_SIZE: usize = 256;

/// Separates the batch-choice stream from the key streams, which are seeded with `id ^ seed`.
const CHOICE_STREAM: u64 = 0x5eed_c401_ce00_0001;

/// Mismatching lookups described on stderr; later ones are only counted.
const MISMATCH_REPORT_MAX: u64 = 5;

/// Wall-clock time of one phase and the latency of each of its batches.
#[derive(Clone, Debug, Default)]
pub struct PhaseTiming {
    /// Seconds from the first batch's start to the last batch's end (choices and checks
    /// included).
    pub seconds: f64,
    /// Engine time of each batch in milliseconds: its lookups and update; in the pipelined phase
    /// the wall time of the overlapped step.
    pub batch_ms: Vec<f64>,
    /// Of each batch, in batch order: when it started and what its parts took.
    pub split_ms: Vec<BatchSplit>,
    /// When the phase started, in seconds since the Unix epoch (to line the batches up with
    /// traces taken outside the process).
    pub started_unix_s: f64,
}

/// Now, in seconds since the Unix epoch.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// When a batch started and what its lookups and update took, in milliseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchSplit {
    /// From the phase's start to the batch's engine calls.
    pub start_ms: f64,
    /// Its lookups (in the pipelined phase, those of the next batch, on their own thread).
    pub lookup_ms: f64,
    /// Its update (in the pipelined phase overlapping the lookups).
    pub update_ms: f64,
}

/// A pipelined batch's lookups, for the lookup thread: the read view and the keys.
type LookupJob<'e> = (Box<dyn Reader + 'e>, Vec<Key>);

/// The lookup thread's answer: the results and the milliseconds they took.
type LookupDone = (Result<Vec<Option<Value>>, Failure>, f64);

/// One batch's choices, made on the model.
struct Batch {
    lookup_ids: Vec<u64>,
    lookup_keys: Vec<Key>,
    /// The ids of `inserts`, for correcting pipelined lookups.
    insert_ids: Vec<u64>,
    inserts: Vec<(Key, Value)>,
    /// The ids of `deletes`.
    delete_ids: Vec<u64>,
    deletes: Vec<Key>,
}

/// Drives the batches against an engine whose table holds ids `0..entries` (and the runs
/// replayed since), keeping the model of live ids.
pub struct Driver<'e> {
    engine: &'e dyn Engine,
    seed: u64,
    rng: SplitMix64,
    live: LiveSet,
    /// Whether lookup results are compared with the model.
    check: bool,
    mismatches: u64,
}

impl<'e> Driver<'e> {
    /// A driver for `engine`, whose table holds ids `0..entries` generated with `seed`; with
    /// `check`, every lookup result is compared with the model.
    pub fn new(engine: &'e dyn Engine, entries: u64, seed: u64, check: bool) -> Driver<'e> {
        Driver {
            engine,
            seed,
            rng: SplitMix64::new(seed ^ CHOICE_STREAM),
            live: LiveSet::new(entries),
            check,
            mismatches: 0,
        }
    }

    /// Lookups that did not return exactly the expected value so far.
    pub fn mismatches(&self) -> u64 {
        self.mismatches
    }

    /// Makes the choices of `batches` batches (with or without updates) on the model only: the
    /// table has already seen them.
    pub fn replay(&mut self, batches: u64, with_updates: bool) {
        for _ in 0..batches {
            self.choose(with_updates);
        }
    }

    /// Runs `batches` batches one after the other: lookups, then (`with_updates`) the update.
    /// Progress lines are named `label`.
    pub fn serial(
        &mut self,
        label: &str,
        batches: u64,
        with_updates: bool,
    ) -> Result<PhaseTiming, Failure> {
        let ops = if with_updates { 3 } else { 1 } * BATCH_SIZE as u64;
        let mut progress = Progress::new(label, "batches", batches);
        let mut batch_ms = Vec::with_capacity(batches as usize);
        let mut split_ms = Vec::with_capacity(batches as usize);
        let started_unix_s = unix_now();
        let start = Instant::now();
        for n in 0..batches {
            let batch = self.choose(with_updates);
            let call = Instant::now();
            let results = self
                .engine
                .lookups(&batch.lookup_keys)
                .context(|| format!("{label}: lookups of batch {n}"))?;
            let looked_up = call.elapsed().as_secs_f64() * 1e3;
            if with_updates {
                self.engine
                    .update(&batch.inserts, &batch.deletes)
                    .context(|| format!("{label}: updates of batch {n}"))?;
            }
            let total = call.elapsed().as_secs_f64() * 1e3;
            batch_ms.push(total);
            split_ms.push(BatchSplit {
                start_ms: (call - start).as_secs_f64() * 1e3,
                lookup_ms: looked_up,
                update_ms: total - looked_up,
            });
            self.check(&batch.lookup_ids, &results);
            progress.update(n + 1, ops);
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(PhaseTiming {
            seconds,
            batch_ms,
            split_ms,
            started_unix_s,
        })
    }

    /// Runs `batches` pipelined batches: the lookups of batch n+1 on a view from before batch n's
    /// update, overlapped with that update, then corrected with it (as in lsm-tree's pipelined
    /// benchmark).
    ///
    /// The lookups run on one worker thread started with the phase, which takes each batch's
    /// view and keys over a channel: a thread spawned per batch started its lookups about 1.2 ms
    /// after the batch began (10M entries, 2 cores, 2026-11-25), a quarter of a batch.
    pub fn pipelined(&mut self, batches: u64) -> Result<PhaseTiming, Failure> {
        let mut progress = Progress::new("pipelined", "batches", batches);
        let mut batch_ms = Vec::with_capacity(batches as usize);
        let mut split_ms = Vec::with_capacity(batches as usize);
        let started_unix_s = unix_now();
        let start = Instant::now();
        if batches == 0 {
            return Ok(PhaseTiming::default());
        }
        // Batch 0's lookups run alone.
        let mut current = self.choose(true);
        let first = self.engine.lookups(&current.lookup_keys)?;
        self.check(&current.lookup_ids, &first);
        let engine = self.engine;
        std::thread::scope(|scope| -> Result<(), Failure> {
            let (jobs, job_rx) = mpsc::sync_channel::<LookupJob<'_>>(1);
            let (result_tx, results) = mpsc::sync_channel::<LookupDone>(1);
            scope.spawn(move || {
                for (view, keys) in job_rx {
                    let started = Instant::now();
                    let looked_up = view.lookups(&keys);
                    // The view is released here, as the spawned thread of each batch did.
                    drop(view);
                    let ms = started.elapsed().as_secs_f64() * 1e3;
                    if result_tx.send((looked_up, ms)).is_err() {
                        return;
                    }
                }
            });
            for n in 0..batches {
                let next = (n + 1 < batches).then(|| self.choose(true));
                let call = Instant::now();
                let view = engine.reader()?;
                let sent = match &next {
                    Some(next) => {
                        jobs.send((view, next.lookup_keys.clone()))
                            .map_err(|_| Failure("the lookup thread stopped".into()))?;
                        true
                    }
                    None => false,
                };
                let started = Instant::now();
                let update = engine.update(&current.inserts, &current.deletes);
                let updated = started.elapsed().as_secs_f64() * 1e3;
                let (lookups, looked_up) = if sent {
                    let (lookups, ms) = results
                        .recv()
                        .map_err(|_| Failure("the lookup thread panicked".into()))?;
                    (Some(lookups), ms)
                } else {
                    (None, 0.0)
                };
                update.context(|| format!("pipelined: updates of batch {n}"))?;
                let lookups = lookups
                    .transpose()
                    .context(|| format!("pipelined: lookups of batch {}", n + 1))?;
                batch_ms.push(call.elapsed().as_secs_f64() * 1e3);
                split_ms.push(BatchSplit {
                    start_ms: (call - start).as_secs_f64() * 1e3,
                    lookup_ms: looked_up,
                    update_ms: updated,
                });
                if let (Some(next), Some(mut results)) = (next.as_ref(), lookups) {
                    correct(&mut results, next, &current);
                    self.check(&next.lookup_ids, &results);
                }
                if let Some(next) = next {
                    current = next;
                }
                progress.update(n + 1, 3 * BATCH_SIZE as u64);
            }
            // Dropping `jobs` ends the worker; the scope joins it.
            Ok(())
        })?;
        let seconds = start.elapsed().as_secs_f64();
        Ok(PhaseTiming {
            seconds,
            batch_ms,
            split_ms,
            started_unix_s,
        })
    }

    /// Picks the lookups of a batch (live ids now) and, `with_updates`, its update, which the
    /// model applies at once.
    fn choose(&mut self, with_updates: bool) -> Batch {
        let mut lookup_ids = Vec::with_capacity(BATCH_SIZE);
        self.live
            .pick_live_many(&mut self.rng, BATCH_SIZE, &mut lookup_ids);
        let seed = self.seed;
        let lookup_keys = lookup_ids.iter().map(|&id| utxo_key(id, seed)).collect();
        let mut batch = Batch {
            lookup_ids,
            lookup_keys,
            insert_ids: Vec::new(),
            inserts: Vec::new(),
            delete_ids: Vec::new(),
            deletes: Vec::new(),
        };
        if with_updates {
            let live_before = self.live.live();
            self.live
                .delete_random(&mut self.rng, BATCH_SIZE, &mut batch.delete_ids);
            batch.insert_ids = self.live.insert_fresh(BATCH_SIZE as u64).collect();
            debug_assert_eq!(self.live.live(), live_before, "deletes balance inserts");
            batch.inserts = batch
                .insert_ids
                .iter()
                .map(|&id| (utxo_key(id, seed), utxo_value(id)))
                .collect();
            batch.deletes = batch
                .delete_ids
                .iter()
                .map(|&id| utxo_key(id, seed))
                .collect();
        }
        batch
    }

    /// With `check`, counts the results that are not the value of their (live) id.
    fn check(&mut self, ids: &[u64], results: &[Option<Value>]) {
        if self.check {
            count_mismatches(ids, results, &mut self.mismatches);
        }
    }
}

/// Corrects lookups made before `applied`'s update: its deletes are absent, its inserts present.
fn correct(results: &mut [Option<Value>], next: &Batch, applied: &Batch) {
    for (id, result) in next.lookup_ids.iter().zip(results.iter_mut()) {
        if applied.delete_ids.contains(id) {
            *result = None;
        } else if let Some(i) = applied.insert_ids.iter().position(|x| x == id) {
            *result = Some(applied.inserts[i].1);
        }
    }
}

/// Adds to `mismatches` the results that are not the value of the id asked for (`results[i]`
/// answers `ids[i]`, every id live), describing on stderr those that bring the count to at most
/// [`MISMATCH_REPORT_MAX`]. A result count that differs from the id count counts every id.
pub fn count_mismatches(ids: &[u64], results: &[Option<Value>], mismatches: &mut u64) {
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
        if result.as_ref() == Some(&utxo_value(id)) {
            continue;
        }
        *mismatches += 1;
        if *mismatches <= MISMATCH_REPORT_MAX {
            eprintln!(
                "check: lookup of live id {id} returned {}; expected its value",
                describe(result)
            );
        }
    }
}

/// A short description of a wrong lookup result.
fn describe(result: &Option<Value>) -> String {
    match result {
        None => "nothing".into(),
        Some(value) => {
            let mut word = [0u8; 8];
            word.copy_from_slice(&value[..8]);
            format!("the value of id {}", u64::from_le_bytes(word))
        }
    }
}

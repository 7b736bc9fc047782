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

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
    /// The ids of `inserts`, in order: fresh ids are consecutive, so an id's insert is found
    /// by subtraction when pipelined lookups are corrected.
    insert_ids: Range<u64>,
    inserts: Vec<(Key, Value)>,
    /// The ids of `deletes`, ascending (binary-searched when pipelined lookups are corrected).
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
    /// A phase ends after the batch during which this much time passed since its start
    /// ([`Driver::set_time_limit`]).
    time_limit: Option<Duration>,
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
            time_limit: None,
        }
    }

    /// Ends each later phase early once `limit` has passed since its start: a serial phase
    /// after the batch during which it passed, a pipelined one once the batches whose lookups
    /// are already in flight are applied and checked (no batch is left half done, so the
    /// phase's batches are exactly those in its [`PhaseTiming`], and replaying that many
    /// batches gives the table's contents). `None` (the default) runs every batch.
    pub fn set_time_limit(&mut self, limit: Option<Duration>) {
        self.time_limit = limit;
    }

    /// Whether the time limit has passed for a phase that started at `start`.
    fn out_of_time(&self, start: Instant) -> bool {
        self.time_limit
            .is_some_and(|limit| start.elapsed() >= limit)
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

    /// Runs `batches` batches one after the other (fewer if the time limit passes first,
    /// [`Driver::set_time_limit`]): lookups, then (`with_updates`) the update.
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
            if self.out_of_time(start) {
                break;
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(PhaseTiming {
            seconds,
            batch_ms,
            split_ms,
            started_unix_s,
        })
    }

    /// Runs `batches` pipelined batches (fewer if the time limit passes first,
    /// [`Driver::set_time_limit`]) with `depth` batches' lookups in flight (at least 1): while
    /// batch n's update is applied, the lookups of batches n+1 to n+depth run on views taken
    /// before it, each on a worker thread of its own, and each batch's results are corrected
    /// with the updates applied after its view was taken (as in lsm-tree's pipelined benchmark,
    /// whose four stages on two cores are depth 3 here: the update and three lookup batches).
    ///
    /// Batch m's lookups go to worker m % depth, started with the phase and fed over a channel:
    /// a thread spawned per batch started its lookups about 1.2 ms after the batch began (10M
    /// entries, 2 cores, 2026-11-25), a quarter of a batch. Depth 1 is the two-stage pipeline
    /// (batch n+1's lookups beside batch n's update).
    pub fn pipelined(&mut self, batches: u64, depth: usize) -> Result<PhaseTiming, Failure> {
        let depth = depth.max(1);
        let mut progress = Progress::new("pipelined", "batches", batches);
        let mut batch_ms = Vec::with_capacity(batches as usize);
        let mut split_ms = Vec::with_capacity(batches as usize);
        let started_unix_s = unix_now();
        let start = Instant::now();
        if batches == 0 {
            return Ok(PhaseTiming::default());
        }
        // Batch 0's lookups run alone.
        let first_batch = self.choose(true);
        let first = self.engine.lookups(&first_batch.lookup_keys)?;
        self.check(&first_batch.lookup_ids, &first);
        let engine = self.engine;
        std::thread::scope(|scope| -> Result<(), Failure> {
            let mut jobs = Vec::with_capacity(depth);
            let mut results = Vec::with_capacity(depth);
            for _ in 0..depth {
                let (job_tx, job_rx) = mpsc::sync_channel::<LookupJob<'_>>(1);
                let (result_tx, result_rx) = mpsc::sync_channel::<LookupDone>(1);
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
                jobs.push(job_tx);
                results.push(result_rx);
            }
            // Batches whose update is not applied yet or whose lookups are not corrected yet,
            // oldest first: `pending[0]` is batch `first_pending`. Each in-flight batch m
            // remembers the first update its view did not see.
            let mut pending: VecDeque<(Batch, u64)> = VecDeque::new();
            pending.push_back((first_batch, 0));
            let mut chosen = 1u64;
            let mut first_pending = 0u64;
            // The phase's batches: all of them, or those chosen when the time limit passed.
            let mut end = batches;
            let mut n = 0u64;
            while n < end {
                if self.out_of_time(start) {
                    end = end.min(chosen);
                }
                let call = Instant::now();
                // Lookups of batches up to n + depth go out on views from before update n.
                while chosen < end && chosen <= n + depth as u64 {
                    let mut batch = self.choose(true);
                    let view = engine.reader()?;
                    // The worker needs the keys; the correction and the check need the ids.
                    let keys = std::mem::take(&mut batch.lookup_keys);
                    jobs[(chosen % depth as u64) as usize]
                        .send((view, keys))
                        .map_err(|_| Failure("a lookup thread stopped".into()))?;
                    pending.push_back((batch, n));
                    chosen += 1;
                }
                let current = &pending[(n - first_pending) as usize].0;
                let started = Instant::now();
                let update = engine.update(&current.inserts, &current.deletes);
                let updated = started.elapsed().as_secs_f64() * 1e3;
                update.context(|| format!("pipelined: updates of batch {n}"))?;
                // Batch n+1's lookups: every update before it is applied now.
                let mut looked_up = 0.0;
                if n + 1 < end {
                    let m = n + 1;
                    let (lookups, ms) = results[(m % depth as u64) as usize]
                        .recv()
                        .map_err(|_| Failure("a lookup thread panicked".into()))?;
                    looked_up = ms;
                    let mut lookups =
                        lookups.context(|| format!("pipelined: lookups of batch {m}"))?;
                    let (next, view_at) = &pending[(m - first_pending) as usize];
                    for j in *view_at..m {
                        correct(&mut lookups, next, &pending[(j - first_pending) as usize].0);
                    }
                    self.check(&next.lookup_ids, &lookups);
                }
                batch_ms.push(call.elapsed().as_secs_f64() * 1e3);
                split_ms.push(BatchSplit {
                    start_ms: (call - start).as_secs_f64() * 1e3,
                    lookup_ms: looked_up,
                    update_ms: updated,
                });
                // Batches n+2 and later are in flight: each needs the updates from its view
                // on. Batches before that (and before n+1, the next update) are done with.
                let keep_from = (pending.iter())
                    .skip((n + 2 - first_pending) as usize)
                    .map(|(_, view_at)| *view_at)
                    .min()
                    .unwrap_or(n + 1)
                    .min(n + 1);
                while first_pending < keep_from {
                    pending.pop_front();
                    first_pending += 1;
                }
                progress.update(n + 1, 3 * BATCH_SIZE as u64);
                n += 1;
            }
            // Dropping the senders ends the workers; the scope joins them.
            drop(jobs);
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
            insert_ids: 0..0,
            inserts: Vec::new(),
            delete_ids: Vec::new(),
            deletes: Vec::new(),
        };
        if with_updates {
            let live_before = self.live.live();
            self.live
                .delete_random(&mut self.rng, BATCH_SIZE, &mut batch.delete_ids);
            batch.delete_ids.sort_unstable();
            batch.insert_ids = self.live.insert_fresh(BATCH_SIZE as u64);
            debug_assert_eq!(self.live.live(), live_before, "deletes balance inserts");
            batch.inserts = batch
                .insert_ids
                .clone()
                .map(|id| (utxo_key(id, seed), utxo_value(id)))
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
/// O(log 256) per lookup: a binary search of the deletes, a subtraction for the inserts.
fn correct(results: &mut [Option<Value>], next: &Batch, applied: &Batch) {
    let inserted = &applied.insert_ids;
    for (id, result) in next.lookup_ids.iter().zip(results.iter_mut()) {
        if applied.delete_ids.binary_search(id).is_ok() {
            *result = None;
        } else if inserted.contains(id) {
            if let Some((_, value)) = applied.inserts.get((id - inserted.start) as usize) {
                *result = Some(*value);
            }
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

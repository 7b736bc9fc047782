//! Batched lookups: hash once, probe every filter, find pages, read them in waves, search in
//! place, and resolve each key newest first.
//!
//! Owns: the lookup path below the write buffer ([`lookup_runs`]), [`LookupResult`] and
//! [`BlobRef`]. May call: `bloom`, `page`, `io`, `run` (its filter and index), `sorted` (the
//! part of a run that can hold a key; its page checksums; blob files), `entry`,
//! `write_buffer` (blobs still in memory). Must never touch: the
//! level structure (it receives the runs to consult, newest first) or any update path.
//!
//! # Cost of a batch of `n` keys over `r` runs
//!
//! - CPU: one xxh3 hash per key (~20 ns for 34 bytes); `r` filter probes per key, each touching one
//!   64-byte cache line, prefetched one key ahead; one index search (a binary search over the
//!   in-memory fence pointers) per filter hit; one in-place binary search (~6 key comparisons)
//!   per page read, done for most pages while the wave's other reads are in flight (about
//!   1 us a page, a quarter of a millisecond a batch that no longer follows the last read).
//! - I/O: one page span per filter hit: about `n * (1 + r * fpr)` reads for present keys,
//!   submitted in waves of up to [`WAVE_PAGES_MAX`] pages (io_uring), so the device works at the
//!   ring's full queue depth (256) for all but the tail of each wave. A batch of 256 keys is one
//!   wave. A run without a filter (the deepest level's, with
//!   [`crate::TableConfig::last_level_bloom`] `= Some(BloomAlloc::None)`) costs a key one read
//!   only when no newer filter claims it, or when the newer page it read did not settle it; that
//!   read is issued the moment the newer page completes, within the same wave.
//! - Memory: pages O(wave), state O(n). One aligned arena of at most [`WAVE_PAGES_MAX`] pages
//!   (16 MiB) at a time, reused by every wave of the call (only a single span larger than that,
//!   a value of more than 16 MiB, makes it larger: exactly that span); 128 bytes of bookkeeping
//!   per read of a wave (request, candidate, slot, what its page said: at most 512 KiB) plus
//!   the values pages searched early found, until the wave is resolved; the caller's `partial` vector of `n`
//!   entries ([`PARTIAL_BYTES_MAX`] bytes each, plus the values found, which are returned) and
//!   4 bytes per key for the next run it consults (a `u32`). No
//!   other allocation grows with `n`. Arenas of up to 4 MiB go back to a pool in the session's
//!   [`BlockIo`], so a typical batch allocates no arena at all.

use std::sync::Arc;

use crate::bloom::key_hash;
use crate::config::Resolve;
use crate::entry::Entry;
use crate::error::Result;
use crate::io::{BlockIo, ReadBatch, ReadConditions, ReadPlan, ReadRequest};
use crate::page::{BlobSpan, Op, PageView, PAGE_BYTES};
use crate::run::BlobFile;
use crate::sorted::SortedRun;
use crate::write_buffer::MemBlob;

/// Where a blob lives.
#[derive(Clone, Debug)]
pub(crate) enum BlobSource {
    /// Still in the write buffer.
    Memory(MemBlob),
    /// In a run's blob file (kept open by the reference, with its chunks' checksums).
    File(BlobFile, BlobSpan),
}

impl BlobSource {
    /// The blob's bytes.
    pub(crate) fn read_bytes(&self) -> Result<Vec<u8>> {
        match self {
            BlobSource::Memory(bytes) => Ok(bytes.to_vec()),
            BlobSource::File(file, span) => file.read(*span),
        }
    }
}

/// A reference to a blob, returned by a lookup and read on request with
/// [`crate::Table::retrieve_blob`]. It is valid until the next update of the table it came from;
/// after that, retrieving it fails with [`crate::Error::BlobRefInvalid`].
#[derive(Clone, Debug)]
pub struct BlobRef {
    pub(crate) source: BlobSource,
    pub(crate) table_id: u64,
    pub(crate) epoch: u64,
}

impl BlobRef {
    /// The blob's size in bytes.
    pub fn len_bytes(&self) -> u64 {
        match &self.source {
            BlobSource::Memory(bytes) => bytes.len() as u64,
            BlobSource::File(_, span) => span.len as u64,
        }
    }

    /// Reads the blob's bytes (the caller has checked the reference is current).
    pub(crate) fn read(&self) -> Result<Vec<u8>> {
        self.source.read_bytes()
    }
}

/// The result of looking up one key.
#[derive(Clone, Debug)]
pub enum LookupResult {
    /// The key is absent.
    NotFound,
    /// The key's value.
    Found(Vec<u8>),
    /// The key's value and a reference to its blob.
    FoundWithBlob(Vec<u8>, BlobRef),
}

impl LookupResult {
    /// The value, if the key was found.
    pub fn value(&self) -> Option<&[u8]> {
        match self {
            LookupResult::NotFound => None,
            LookupResult::Found(v) | LookupResult::FoundWithBlob(v, _) => Some(v),
        }
    }

    /// The value, if the key was found, without copying it.
    pub fn into_value(self) -> Option<Vec<u8>> {
        match self {
            LookupResult::NotFound => None,
            LookupResult::Found(v) | LookupResult::FoundWithBlob(v, _) => Some(v),
        }
    }

    /// The blob reference, if the key was found with a blob.
    pub fn blob(&self) -> Option<&BlobRef> {
        match self {
            LookupResult::FoundWithBlob(_, b) => Some(b),
            _ => None,
        }
    }
}

/// A key's state while the lookup proceeds: what the write buffer and newer runs said so far.
pub(crate) type Partial = Option<Entry<BlobSource>>;

/// Most bytes one entry of the per-key state ([`Partial`]) takes (checked at compile time): the
/// per-key memory of a batch lookup, besides the values found.
pub(crate) const PARTIAL_BYTES_MAX: usize = 64;

const _: () = assert!(std::mem::size_of::<Partial>() <= PARTIAL_BYTES_MAX);

/// Most pages one wave of a batch lookup reads: 4,096 pages, 16 MiB of arena.
///
/// Sketch: the io_uring backend keeps up to 256 reads in flight (`io::QUEUE_DEPTH_MAX`) and tops
/// the ring up as reads complete, so a wave of 4,096 single-page reads runs at full queue depth
/// for 15/16 of its reads; only its tail drains, about one device latency (~0.1 ms on NVMe) in a
/// wave that takes 4-8 ms at 0.5-1M IOPS, a loss of 1-2.5%. A wave of 1,024 pages would save
/// 12 MiB and lose 5-10%. Between waves the CPU resolves the wave and probes filters for the
/// next (about 1 us per key at most). A batch of up to ~4,000 keys (the typical 256 certainly)
/// is a single wave, exactly as before waves existed.
pub(crate) const WAVE_PAGES_MAX: usize = 4096;

/// One page span to read for one key in one run.
struct Candidate {
    key: usize,
    run: u32,
    /// The part of the run the read is in (its blobs are in that part's blob file).
    part: u32,
    /// The read of the wave this one waits for ([`NO_READ`] if none): the key's read in a newer
    /// run, which may settle the key and make this one unnecessary.
    after: u32,
}

/// [`Candidate::after`] of an unconditional read.
const NO_READ: u32 = u32::MAX;

/// Whether `page` holds a final entry (an insert or a delete) for `key`.
fn settles(page: &[u8], key: &[u8]) -> Result<bool> {
    let view = PageView::new(page)?;
    Ok(match view.search(key)? {
        Some(slot) => view.entry(slot)?.op != Op::Upsert,
        None => false,
    })
}

/// What a read's page said about its key, found while the rest of the wave was still in flight
/// ([`ReadPlan::read_done`]).
enum Early {
    /// Not searched yet (or the page is damaged: [`resolve_wave`] searches it again and reports
    /// the damage).
    NotYet,
    /// The page does not hold the key.
    Absent,
    /// The page's entry for the key.
    Found(Op, Vec<u8>, Option<BlobSpan>),
}

/// Most bytes one [`Early`] takes besides its value (checked at compile time).
const EARLY_BYTES_MAX: usize = 56;

const _: () = assert!(std::mem::size_of::<Early>() <= EARLY_BYTES_MAX);

/// The reads of one wave and which key and run each belongs to, in the same order: candidates
/// of one key are consecutive and newest first, and keys are in batch order.
struct Wave {
    candidates: Vec<Candidate>,
    requests: Vec<ReadRequest>,
    /// What each read found, if its page was searched while others were in flight.
    early: Vec<Early>,
    /// Pages of all `requests`.
    pages: usize,
}

impl Wave {
    /// An empty wave with room for `reads` reads (at most [`WAVE_PAGES_MAX`], the most a wave of
    /// single-page reads holds).
    fn with_capacity(reads: usize) -> Wave {
        let reads = reads.min(WAVE_PAGES_MAX);
        Wave {
            candidates: Vec::with_capacity(reads),
            requests: Vec::with_capacity(reads),
            early: Vec::with_capacity(reads),
            pages: 0,
        }
    }

    fn clear(&mut self) {
        self.candidates.clear();
        self.requests.clear();
        self.early.clear();
        self.pages = 0;
    }
}

/// Completes a batch lookup below the write buffer.
///
/// `partial[i]` is what newer sources (the write buffer) hold for `keys[i]`; keys whose entry is
/// already final are not looked up in the runs. `runs` are newest first. Returns each key's
/// entry combined newest first (`None` when no source has the key).
///
/// Reads are issued in waves of at most [`WAVE_PAGES_MAX`] pages, each read into the same arena
/// (from the pool of `io`, returned at the end), so the call's memory beyond `partial` and the
/// values it returns is at most `WAVE_PAGES_MAX * 4 KiB` (16 MiB) of pages, or one span when a
/// single span is larger, plus 128 bytes per read of a wave and the values its pages searched
/// early found: O(wave), whatever `keys.len()`.
/// A key whose entry became final in one wave is not read again in the next.
pub(crate) fn lookup_runs<K: AsRef<[u8]>>(
    io: &BlockIo,
    salt: u64,
    keys: &[K],
    mut partial: Vec<Partial>,
    runs: &[Arc<SortedRun>],
    resolve: &Resolve,
) -> Result<Vec<Partial>> {
    debug_assert_eq!(keys.len(), partial.len());
    if runs.is_empty() {
        return Ok(partial);
    }
    let mut batch = io.take_batch();
    let outcome = read_waves(io, salt, keys, &mut partial, runs, resolve, &mut batch);
    io.recycle_batch(batch);
    outcome?;
    Ok(partial)
}

/// Plans, reads and resolves wave after wave until every key is resolved.
///
/// A sweep plans the pending keys in batch order, each from the run it reached (`next_run`),
/// into waves of at most [`WAVE_PAGES_MAX`] pages. A run whose filter passes every key (the
/// deepest level's, under [`crate::TableConfig::last_level_bloom`] `= Some(BloomAlloc::None)`)
/// is read unconditionally only when no newer run's filter claimed the key. Otherwise its read
/// is conditional ([`crate::io::ReadConditions`]): issued in the same wave the moment the key's
/// newer page completes, and only if that page did not settle the key. So a key found in a
/// newer run costs no read of that run, a key only it holds costs one read, as with a filter,
/// and a filter that lied costs one more read but no extra round trip for the whole batch. Runs
/// older than such a run wait for a later sweep. Every sweep plans at least one read per
/// pending key, so there are at most `runs` sweeps (in practice one).
///
/// A wave is planned while it is read ([`WavePlan`]): [`PLAN_CHUNK_KEYS`] keys at a time, the
/// first chunk's reads submitted before the next chunk is planned, so the filter probes and
/// index searches of a batch (about 1.4 us per key at 100M entries, 14% of a lookup-only batch)
/// overlap the device's work instead of preceding it. Likewise the pages: while reads are in
/// flight and nothing can be planned now, completed pages are searched for their key a few at a
/// time ([`ReadPlan::read_done`], [`Early`]), so that resolving the wave after its last read
/// mostly combines what was found (pages still waiting then are searched by [`resolve_wave`]).
/// A page whose key a newer page of the same wave settles may be searched (and its value
/// copied) for nothing: at most one value per read of the wave.
fn read_waves<K: AsRef<[u8]>>(
    io: &BlockIo,
    salt: u64,
    keys: &[K],
    partial: &mut [Partial],
    runs: &[Arc<SortedRun>],
    resolve: &Resolve,
    batch: &mut ReadBatch,
) -> Result<()> {
    let mut wave = Wave::with_capacity(keys.len());
    // The first run each key has not consulted yet.
    let mut next_run = vec![0u32; keys.len()];
    let runs_len = u32::try_from(runs.len()).unwrap_or(u32::MAX);
    loop {
        let mut from = next_pending(partial, &next_run, runs_len, 0);
        if from.is_none() {
            return Ok(());
        }
        while let Some(key) = from {
            let mut plan = WavePlan {
                salt,
                keys,
                partial,
                runs,
                next_run: &mut next_run,
                wave: &mut wave,
                next: Some(key),
                keys_planned: 0,
            };
            io.read_planned_into(&mut plan, batch)?;
            from = plan.next;
            if wave.requests.is_empty() {
                if from.is_some() {
                    continue; // every key of the part was ruled out by its filters
                }
                break; // every key of the sweep was ruled out by its filters
            }
            debug_assert!(wave.pages <= WAVE_PAGES_MAX || wave.requests.len() == 1);
            resolve_wave(keys, partial, runs, resolve, &mut wave, batch)?;
            wave.clear();
        }
    }
}

/// Keys a wave plans at a time while its earlier reads are in flight: the first part's reads
/// reach the device after about 45 us of planning at 100M entries, and each part is one more
/// `io_uring_enter`.
const PLAN_CHUNK_KEYS: usize = 32;

/// One wave of a sweep, planned part by part while it is read ([`ReadPlan`]): the keys from
/// `next` on, from the run each reached.
struct WavePlan<'a, K> {
    salt: u64,
    keys: &'a [K],
    partial: &'a [Partial],
    runs: &'a [Arc<SortedRun>],
    next_run: &'a mut [u32],
    wave: &'a mut Wave,
    /// The key the plan goes on from; `None` at the end of the sweep.
    next: Option<usize>,
    /// Keys planned into this wave.
    keys_planned: usize,
}

impl<K: AsRef<[u8]>> ReadConditions for WavePlan<'_, K> {
    fn after(&self, i: usize) -> Option<usize> {
        let after = self.wave.candidates.get(i)?.after;
        (after != NO_READ).then_some(after as usize)
    }

    fn wanted(&mut self, i: usize, earlier: &[u8]) -> bool {
        let Some(key) = self
            .wave
            .candidates
            .get(i)
            .and_then(|c| self.keys.get(c.key))
        else {
            return true;
        };
        // An insert or a delete is final; an upsert needs what is older. A damaged page is
        // reported when the wave is resolved, so here it only costs the read.
        !settles(earlier, key.as_ref()).unwrap_or(false)
    }
}

impl<K: AsRef<[u8]>> ReadPlan for WavePlan<'_, K> {
    fn requests(&self) -> &[ReadRequest] {
        &self.wave.requests
    }

    fn plan_more(&mut self, pages_left: usize) -> bool {
        let Some(key) = self.next else {
            return false;
        };
        let pages_max = WAVE_PAGES_MAX.min(self.wave.pages.saturating_add(pages_left));
        let (stop, planned) = plan_wave(
            self.salt,
            self.keys,
            self.partial,
            self.runs,
            self.next_run,
            key,
            self.wave,
            pages_max,
            PLAN_CHUNK_KEYS,
        );
        self.keys_planned += planned;
        match stop {
            Stop::Part(key) => {
                self.next = Some(key);
                true
            }
            Stop::Full(key) => {
                self.next = Some(key);
                false
            }
            Stop::End => {
                self.next = None;
                false
            }
        }
    }

    fn pages_hint(&self) -> usize {
        // The pages per key so far, for every key that may still come, plus a quarter.
        let Some(next) = self.next else {
            return self.wave.pages;
        };
        let per_key = self.wave.pages.max(1) as f64 / self.keys_planned.max(1) as f64;
        let rest = self.keys.len().saturating_sub(next) as f64 * per_key * 1.25;
        (self.wave.pages as f64 + rest).min(WAVE_PAGES_MAX as f64) as usize
    }

    fn read_done(&mut self, i: usize, page: &[u8]) {
        let (Some(candidate), Some(early)) =
            (self.wave.candidates.get(i), self.wave.early.get_mut(i))
        else {
            return;
        };
        let (Some(key), Some(request)) = (self.keys.get(candidate.key), self.wave.requests.get(i))
        else {
            return;
        };
        *early = checked_search(self.runs, candidate, request, page, key.as_ref())
            .unwrap_or(Early::NotYet);
    }
}

/// Checks the span read for `candidate` by `request` against its pages' checksums, then
/// searches it for `key` ([`search_early`]).
fn checked_search(
    runs: &[Arc<SortedRun>],
    candidate: &Candidate,
    request: &ReadRequest,
    page: &[u8],
    key: &[u8],
) -> Result<Early> {
    if let Some(part) = runs
        .get(candidate.run as usize)
        .and_then(|r| r.parts().get(candidate.part as usize))
    {
        part.check_pages(request.offset / PAGE_BYTES as u64, page)?;
    }
    search_early(page, key)
}

/// Searches `page` for `key`, keeping what it finds ([`Early`]).
fn search_early(page: &[u8], key: &[u8]) -> Result<Early> {
    let view = PageView::new(page)?;
    let Some(slot) = view.search(key)? else {
        return Ok(Early::Absent);
    };
    let e = view.entry(slot)?;
    Ok(Early::Found(e.op, e.value.to_vec(), e.blob))
}

/// Where [`plan_wave`] stopped.
enum Stop {
    /// After its part's keys; the wave goes on from this key.
    Part(usize),
    /// Before a read that would take the wave past its pages; the next wave starts at this key.
    Full(usize),
    /// At the end of the sweep.
    End,
}

/// Adds to `wave` the reads of at most `keys_max` pending keys from `from` on, each from
/// `next_run[key]`, which it advances past every run it plans or rules out; it stops before a
/// read that would take the wave past `pages_max` pages (a wave always takes its first read,
/// however large), and before a pass-all run of a key that already has a read in this wave.
/// Returns where it stopped and how many keys it planned.
#[allow(clippy::too_many_arguments)]
fn plan_wave<K: AsRef<[u8]>>(
    salt: u64,
    keys: &[K],
    partial: &[Partial],
    runs: &[Arc<SortedRun>],
    next_run: &mut [u32],
    from: usize,
    wave: &mut Wave,
    pages_max: usize,
    keys_max: usize,
) -> (Stop, usize) {
    let runs_len = u32::try_from(runs.len()).unwrap_or(u32::MAX);
    let hash = |i: usize| key_hash(salt, keys[i].as_ref());
    let Some(mut key) = next_pending(partial, next_run, runs_len, from) else {
        return (Stop::End, 0);
    };
    let mut key_hash = hash(key);
    prefetch(runs, key_hash);
    let mut planned = 0;
    loop {
        let upcoming = next_pending(partial, next_run, runs_len, key + 1).map(|i| (i, hash(i)));
        if let Some((_, h)) = upcoming {
            prefetch(runs, h);
        }
        let bytes = keys[key].as_ref();
        // The wave's last read for this key, if any.
        let mut last: Option<usize> = None;
        while let Some(sorted) = runs.get(next_run[key] as usize) {
            let r = next_run[key];
            // A run of several parts: only the part whose key range holds the key can have it.
            let Some((part, run)) = sorted.part_for(bytes) else {
                next_run[key] += 1;
                continue;
            };
            if !run.filter().contains_hash(key_hash) {
                next_run[key] += 1;
                continue;
            }
            // The newer page may settle the key: read this run only if it does not.
            let after = last.filter(|_| run.filter().passes_all());
            let Some(span) = run.index().search(bytes) else {
                next_run[key] += 1;
                continue;
            };
            let pages = span.pages() as usize;
            if !wave.requests.is_empty() && wave.pages.saturating_add(pages) > pages_max {
                return (Stop::Full(key), planned);
            }
            wave.pages = wave.pages.saturating_add(pages);
            wave.candidates.push(Candidate {
                key,
                run: r,
                part: part as u32,
                after: after.map_or(NO_READ, |a| a as u32),
            });
            wave.early.push(Early::NotYet);
            wave.requests.push(ReadRequest {
                file: run.keyops().clone(),
                offset: span.first * PAGE_BYTES as u64,
                len_bytes: pages * PAGE_BYTES,
            });
            last = Some(wave.requests.len() - 1);
            next_run[key] += 1;
            if after.is_some() {
                break; // older runs: in a later sweep, if this one does not settle the key
            }
        }
        planned += 1;
        let Some(next) = upcoming else {
            return (Stop::End, planned);
        };
        if planned >= keys_max {
            return (Stop::Part(next.0), planned);
        }
        (key, key_hash) = next;
    }
}

/// The first key from `from` on that still has runs to consult and whose entry is not final.
fn next_pending(partial: &[Partial], next_run: &[u32], runs: u32, from: usize) -> Option<usize> {
    let rest = partial.get(from..)?;
    let offset = rest
        .iter()
        .zip(&next_run[from..])
        .position(|(p, &r)| r < runs && p.as_ref().is_none_or(|e| !e.is_final()))?;
    Some(from + offset)
}

/// Combines what every page of the wave holds for its key into `partial`, newest first: the
/// pages searched while the wave was in flight by what they found ([`Early`]), the others by
/// searching them now.
fn resolve_wave<K: AsRef<[u8]>>(
    keys: &[K],
    partial: &mut [Partial],
    runs: &[Arc<SortedRun>],
    resolve: &Resolve,
    wave: &mut Wave,
    pages: &ReadBatch,
) -> Result<()> {
    for (c, (candidate, early)) in wave.candidates.iter().zip(&mut wave.early).enumerate() {
        let i = candidate.key;
        if pages.skipped(c) || partial[i].as_ref().is_some_and(Entry::is_final) {
            continue;
        }
        let (op, value, blob) = match std::mem::replace(early, Early::NotYet) {
            Early::Absent => continue,
            Early::Found(op, value, blob) => (op, value, blob),
            Early::NotYet => match checked_search(
                runs,
                candidate,
                &wave.requests[c],
                pages.get(c),
                keys[i].as_ref(),
            )? {
                Early::Found(op, value, blob) => (op, value, blob),
                Early::Absent | Early::NotYet => continue,
            },
        };
        partial[i] = Some(match partial[i].take() {
            None => match op {
                Op::Insert => {
                    let blob = blob.map(|span| {
                        let part = &runs[candidate.run as usize].parts()[candidate.part as usize];
                        BlobSource::File(part.blobs().clone(), span)
                    });
                    Entry::Insert(value, blob)
                }
                Op::Upsert => Entry::Upsert(value),
                Op::Delete => Entry::Delete,
            },
            Some(newer) => newer.combine_older(op, &value, resolve),
        });
    }
    Ok(())
}

/// Turns resolved entries into lookup results, stamping blob references with the table's id
/// and epoch.
pub(crate) fn results(partial: Vec<Partial>, table_id: u64, epoch: u64) -> Vec<LookupResult> {
    partial
        .into_iter()
        .map(|p| match p {
            None | Some(Entry::Delete) => LookupResult::NotFound,
            Some(Entry::Upsert(v)) | Some(Entry::Insert(v, None)) => LookupResult::Found(v),
            Some(Entry::Insert(v, Some(source))) => LookupResult::FoundWithBlob(
                v,
                BlobRef {
                    source,
                    table_id,
                    epoch,
                },
            ),
        })
        .collect()
}

/// Prefetches the filter lines of `hash` in every run of one part (a run of several finds its
/// part by the key, later).
fn prefetch(runs: &[Arc<SortedRun>], hash: u64) {
    for run in runs {
        if let [only] = run.parts() {
            only.filter().prefetch(hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, MemFs};
    use crate::{Session, SessionOptions, TableConfig};
    use std::path::Path;

    fn session() -> Session {
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/s")).unwrap();
        Session::open_with(fs, "/s", SessionOptions::default()).unwrap()
    }

    /// A lookup never waits for merge work: with the lock of a merge in progress held (as a
    /// merge step holds it), lookups through the table and through a duplicate still finish,
    /// and find every key.
    #[test]
    fn lookups_do_not_wait_for_a_merge_step() {
        let session = session();
        let table = session
            .new_table(TableConfig {
                write_buffer_entries: 64,
                ..TableConfig::default()
            })
            .unwrap();
        // Keys in scrambled order: runs of ascending keys would be linked, not merged.
        let keys: Vec<Vec<u8>> = (0..5_000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec())
            .collect();
        let mut inserted = 0;
        let merge = loop {
            table.insert(&keys[inserted], [1]).unwrap();
            inserted += 1;
            if let Some(merge) = table.lsm().merge_in_progress().filter(|_| inserted > 1_000) {
                break merge;
            }
            assert!(inserted < keys.len(), "no merge in progress");
        };
        let copy = table.duplicate().unwrap();
        let held = merge.lock().unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let probe = keys[..inserted].to_vec();
        let reader = std::thread::spawn(move || {
            let found = [&table, &copy].map(|t| {
                t.lookups(&probe)
                    .unwrap()
                    .iter()
                    .filter(|r| r.value() == Some(&[1u8][..]))
                    .count()
            });
            done.send(found).unwrap();
        });
        let found = finished
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the lookups waited for the merge's lock");
        drop(held);
        reader.join().unwrap();
        assert_eq!(found, [inserted, inserted]);
    }

    /// A batch of several waves whose keys live in every run as chains of upserts resolves like
    /// the model, keys whose reads straddle two waves included.
    #[test]
    fn batches_of_many_waves_resolve_like_the_model() {
        const KEYS: u64 = 3000;
        let session = session();
        let config = TableConfig {
            write_buffer_entries: KEYS as usize,
            resolve: Resolve::AddU64Le,
            ..TableConfig::default()
        };
        let table = session.new_table(config).unwrap();
        let mut model = vec![0u64; KEYS as usize];
        for round in 0..6u64 {
            let pairs: Vec<([u8; 8], [u8; 8])> = (0..KEYS)
                .map(|k| (k.to_be_bytes(), (round + k % 7).to_le_bytes()))
                .collect();
            table.upserts(&pairs).unwrap();
            for (k, sum) in model.iter_mut().enumerate() {
                *sum += round + k as u64 % 7;
            }
        }
        // Every run holds every key and upserts are never final: at least 2 * KEYS reads.
        let runs = table.stats().unwrap().runs;
        assert!(
            runs >= 2 && runs as u64 * KEYS > WAVE_PAGES_MAX as u64,
            "{runs} runs"
        );
        let keys: Vec<[u8; 8]> = (0..2 * KEYS).map(u64::to_be_bytes).collect();
        let results = table.lookups(&keys).unwrap();
        for (k, result) in results.iter().enumerate() {
            let expected = model.get(k).map(|sum| sum.to_le_bytes());
            assert_eq!(result.value(), expected.as_ref().map(|v| &v[..]), "key {k}");
        }
    }

    /// A span larger than a wave is read alone, in a wave of its own.
    #[test]
    fn a_span_larger_than_a_wave_is_read_whole() {
        let session = session();
        let config = TableConfig {
            write_buffer_entries: 100,
            ..TableConfig::default()
        };
        let table = session.new_table(config).unwrap();
        let big: Vec<u8> = (0..WAVE_PAGES_MAX * PAGE_BYTES + 12_345)
            .map(|i| (i % 251) as u8)
            .collect();
        let pairs: Vec<([u8; 8], [u8; 8])> = (0..5000u64)
            .map(|k| (k.to_be_bytes(), k.to_le_bytes()))
            .collect();
        table.inserts(&pairs[..2500]).unwrap();
        table.insert(2500u64.to_be_bytes(), &big).unwrap();
        table.inserts(&pairs[2501..]).unwrap();
        let keys: Vec<[u8; 8]> = (0..6000u64).map(u64::to_be_bytes).collect();
        let results = table.lookups(&keys).unwrap();
        for (k, result) in results.iter().enumerate() {
            let expected = match k {
                2500 => Some(&big[..]),
                k if k < 5000 => Some(&pairs[k].1[..]),
                _ => None,
            };
            assert!(result.value() == expected, "key {k}");
        }
    }
}

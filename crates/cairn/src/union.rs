//! Unions: a table whose oldest contents are the union of other tables, merged incrementally.
//!
//! Owns: [`TableView`] (a frozen view of a table: its write-buffer copy, its runs and its own
//! union level), [`UnionLevel`] (the inputs of a union, the incremental union merge and its debt)
//! and the union lookup path. May call: `cursor` (merged streams of each input), `kmerge`, `entry`,
//! `page`, `fs`, `io` (lookups in the inputs),
//! `lookup`, `run`, `sorted`, `write_buffer`.
//! Must never touch: the live state of the input tables (views hold `Arc`s of immutable runs).
//!
//! Semantics: `union(t1, .., tn)` maps each key to the fold, left to right, of its values in the
//! inputs with the table's resolve function, `resolve(left, right)` (like `Data.Map.unionWith`):
//! with [`crate::Resolve::KeepNewest`] the leftmost table wins.
//!
//! Costs: starting a union takes an O(1) clone of each input's persistent write buffer and `Arc`s
//! of its runs: no copy, O(1) I/O. One union credit produces one output key of the union merge;
//! its work is one comparison per input source and the entries it consumes, one per source
//! holding the key, plus the deleted keys it skips on the way (so a credit is O(inputs * log n)
//! amortised, but one credit can skip a long run of deleted keys). The debt starts at the total
//! number of input entries (an upper bound on the output keys), goes down by one per credit, and
//! is zero once the merge has finished; it never increases. While the union is pending, a lookup
//! consults every input (a batched lookup per input); once it is finished, one run.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::config::{DiskCachePolicy, Resolve, TableConfig};
use crate::cursor::{EntryStream, MergedEntries, Peeked, RawEntry};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::io::BlockIo;
use crate::kmerge::KMerge;
use crate::lookup::{lookup_runs, BlobSource, Partial};
use crate::page::Op;
use crate::run::{RunParams, RunWriter};
use crate::sorted::SortedRun;
use crate::write_buffer::WriteBuffer;

/// A key's value and blob as a lookup in a view found it (`None`: absent).
type Found = Option<(Vec<u8>, Option<BlobSource>)>;

/// A view and the resolve function to stream it with: what a cursor keeps to seek
/// ([`crate::cursor::Restart`]).
#[derive(Debug)]
pub(crate) struct ViewRestart {
    pub(crate) view: TableView,
    pub(crate) resolve: Resolve,
}

impl crate::cursor::Restart for ViewRestart {
    fn stream_from(&self, from: Option<&[u8]>) -> Result<MergedEntries> {
        self.view.stream(from, &self.resolve)
    }

    fn key_before(&self, upper: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        self.view.key_before(upper)
    }
}

/// A frozen view of a table's contents, newest first: write buffer, runs, union level.
#[derive(Debug)]
pub(crate) struct TableView {
    pub(crate) buffer: WriteBuffer,
    pub(crate) runs: Vec<Arc<SortedRun>>,
    pub(crate) union: Option<Arc<UnionLevel>>,
    /// The table's epoch when the view was taken (blob references carry it).
    pub(crate) epoch: u64,
}

impl TableView {
    /// A key `< upper` (`None`: no bound) such that some source of the view (write buffer,
    /// run, union) has an entry in `[key, upper)`: the greatest of the write buffer's greatest
    /// key below `upper` and each run's [`SortedRun::first_key_before`]. `None` when no source
    /// has a key below `upper`. Cost: one span read per run (and per run of a pending union).
    pub(crate) fn key_before(&self, upper: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        let mut best = self.buffer.key_before(upper);
        for run in &self.runs {
            best = best.max(run.first_key_before(upper)?);
        }
        if let Some(union) = &self.union {
            best = best.max(union.key_before(upper)?);
        }
        Ok(best)
    }

    /// An upper bound on the keys the view holds.
    fn entries_max(&self) -> u64 {
        let runs: u64 = self.runs.iter().map(|r| r.entries()).sum();
        let union = self.union.as_ref().map_or(0, |u| u.entries_max());
        self.buffer.len() as u64 + runs + union
    }

    /// The view's resolved entries from the first key `>= from`, deletes dropped.
    pub(crate) fn stream(&self, from: Option<&[u8]>, resolve: &Resolve) -> Result<MergedEntries> {
        let mut runs = self.runs.clone();
        let older = match &self.union {
            Some(union) => union.stream_parts(from, resolve, &mut runs)?,
            None => None,
        };
        MergedEntries::new(self.buffer.clone(), &runs, older, from, resolve.clone())
    }

    /// Looks up `keys` in the view: each key's value (and blob), or `None`.
    fn lookup<K: AsRef<[u8]>>(
        &self,
        io: &BlockIo,
        salt: u64,
        keys: &[K],
        resolve: &Resolve,
    ) -> Result<Vec<Found>> {
        let partial: Vec<Partial> = keys
            .iter()
            .map(|k| {
                Some(match self.buffer.get(k.as_ref())? {
                    Entry::Insert(v, blob) => Entry::Insert(v, blob.map(BlobSource::Memory)),
                    Entry::Upsert(v) => Entry::Upsert(v),
                    Entry::Delete => Entry::Delete,
                })
            })
            .collect();
        let partial = lookup_runs(io, salt, keys, partial, &self.runs, resolve)?;
        let partial = match &self.union {
            Some(union) => union.complete_lookups(io, salt, keys, partial, resolve)?,
            None => partial,
        };
        Ok(partial.into_iter().map(into_value).collect())
    }
}

/// The value a resolved entry gives its key, if any.
fn into_value(entry: Partial) -> Found {
    match entry? {
        Entry::Insert(v, blob) => Some((v, blob)),
        Entry::Upsert(v) => Some((v, None)),
        Entry::Delete => None,
    }
}

/// Merges the resolved streams of several views, combining a key's values left to right.
#[derive(Debug)]
pub(crate) struct UnionStream {
    /// The inputs' streams, left to right (the leftmost plays the newest source).
    merge: KMerge<Peeked<MergedEntries>>,
    resolve: Resolve,
}

impl UnionStream {
    pub(crate) fn new(
        views: &[Arc<TableView>],
        from: Option<&[u8]>,
        resolve: &Resolve,
    ) -> Result<UnionStream> {
        let inputs = views
            .iter()
            .map(|v| Peeked::new(v.stream(from, resolve)?))
            .collect::<Result<Vec<_>>>()?;
        Ok(UnionStream {
            merge: KMerge::new(inputs)?,
            resolve: resolve.clone(),
        })
    }

    /// Whether every input is exhausted (no I/O: each input's next entry is read ahead).
    fn is_exhausted(&self) -> Result<bool> {
        Ok(self.merge.peek_group()?.is_none())
    }
}

impl EntryStream for UnionStream {
    /// The next key of the union, with its values combined left to right (a key held by more
    /// than one input loses its blob, as an upsert drops a blob).
    fn next_raw(&mut self) -> Result<Option<RawEntry>> {
        let Some(group) = self.merge.peek_group()? else {
            return Ok(None);
        };
        let resolve = &self.resolve;
        let (key, combined) = self.merge.fold_group(
            group,
            None,
            |left: Option<(Vec<u8>, Option<BlobSource>)>, _, right| {
                Some(match left {
                    None => (right.value.to_vec(), right.blob),
                    Some((left, _)) => (resolve.apply(&left, right.value), None),
                })
            },
        )?;
        let Some((value, blob)) = combined else {
            return Err(Error::TableBroken(
                "a union was used again after one of its inputs failed".into(),
            ));
        };
        Ok(Some(RawEntry {
            key: key.to_vec(),
            value,
            blob,
        }))
    }
}

#[derive(Debug)]
struct UnionState {
    /// Left to right; released when the merge finishes.
    inputs: Vec<Arc<TableView>>,
    debt_total: u64,
    produced: u64,
    merge: Option<(UnionStream, RunWriter)>,
    /// Set when finished: the union's single run (`None` if it is empty).
    output: Option<Option<Arc<SortedRun>>>,
    failed: bool,
}

/// The union of several tables, as the oldest level of a table; shared by its duplicates.
#[derive(Debug)]
pub(crate) struct UnionLevel {
    fs: Arc<dyn FileSystem>,
    params: RunParams,
    resolve: Resolve,
    /// Whether lookups read the output run through the page cache.
    caching: bool,
    state: Mutex<UnionState>,
}

/// What a union level holds right now.
pub(crate) enum UnionContents {
    /// Still merging: its inputs.
    Pending(Vec<Arc<TableView>>),
    /// Finished: its single run, if it has any entries.
    Done(Option<Arc<SortedRun>>),
}

impl UnionLevel {
    /// A union of `inputs` (left to right). Costs no I/O.
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        params: RunParams,
        resolve: Resolve,
        caching: bool,
        inputs: Vec<Arc<TableView>>,
    ) -> UnionLevel {
        let debt_total = inputs.iter().map(|v| v.entries_max()).sum();
        UnionLevel {
            fs,
            params,
            resolve,
            caching,
            state: Mutex::new(UnionState {
                inputs,
                debt_total,
                produced: 0,
                merge: None,
                output: None,
                failed: false,
            }),
        }
    }

    /// A union of `views` as the oldest level of a table with `config`: its output run is read
    /// through the page cache unless the table caches nothing.
    pub(crate) fn for_table(
        fs: Arc<dyn FileSystem>,
        config: &TableConfig,
        params: &RunParams,
        views: Vec<Arc<TableView>>,
    ) -> UnionLevel {
        let caching = config.disk_cache != DiskCachePolicy::None;
        UnionLevel::new(fs, params.clone(), config.resolve.clone(), caching, views)
    }

    /// The state, for reading. A poisoned lock (a resolve function panicked during union work)
    /// is recovered here: the inputs are immutable, so reading them stays correct; only the
    /// merge's own progress is suspect, and [`UnionLevel::supply_credits`] refuses to go on.
    fn lock(&self) -> MutexGuard<'_, UnionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entries_max(&self) -> u64 {
        let state = self.lock();
        match &state.output {
            Some(Some(run)) => run.entries(),
            Some(None) => 0,
            None => state.debt_total,
        }
    }

    /// The union's inputs while pending, or its run once finished.
    pub(crate) fn contents(&self) -> UnionContents {
        let state = self.lock();
        match &state.output {
            Some(run) => UnionContents::Done(run.clone()),
            None => UnionContents::Pending(state.inputs.clone()),
        }
    }

    /// The union's run once it has finished (`Some(None)` if it is empty), without copying the
    /// inputs: cheap enough for every update to ask.
    pub(crate) fn finished(&self) -> Option<Option<Arc<SortedRun>>> {
        self.lock().output.clone()
    }

    /// The contents and the credits spent so far, read together.
    pub(crate) fn state(&self) -> (UnionContents, u64) {
        let state = self.lock();
        let contents = match &state.output {
            Some(run) => UnionContents::Done(run.clone()),
            None => UnionContents::Pending(state.inputs.clone()),
        };
        (contents, state.produced)
    }

    /// An upper bound on the credits still needed to finish; never increases.
    pub(crate) fn remaining_debt(&self) -> u64 {
        let state = self.lock();
        if state.output.is_some() {
            0
        } else {
            state.debt_total.saturating_sub(state.produced).max(1)
        }
    }

    /// Spends up to `credits` merge steps (one output key each) and returns the credits left
    /// over, which is positive only if the union finished. The credit that produces the last
    /// key also finishes the union, so [`UnionLevel::remaining_debt`] credits always suffice.
    /// `next_run_number` names the output.
    ///
    /// Errors: [`Error::TableBroken`] once a step failed or panicked (the merge is shared by every
    /// duplicate of the table and refuses further work), I/O errors of the merge.
    pub(crate) fn supply_credits(
        &self,
        credits: u64,
        next_run_number: impl FnOnce() -> u64,
    ) -> Result<u64> {
        let mut state = self.state.lock().map_err(|_| {
            Error::TableBroken("a panic interrupted union work shared with this table".into())
        })?;
        if state.output.is_some() {
            return Ok(credits);
        }
        if state.failed {
            return Err(Error::TableBroken(
                "an earlier union merge step failed".into(),
            ));
        }
        let result = self.spend(&mut state, credits, next_run_number);
        state.failed = result.is_err();
        result
    }

    fn spend(
        &self,
        state: &mut UnionState,
        credits: u64,
        next_run_number: impl FnOnce() -> u64,
    ) -> Result<u64> {
        if state.merge.is_none() {
            let stream = UnionStream::new(&state.inputs, None, &self.resolve)?;
            let writer = RunWriter::new(
                self.fs.clone(),
                &self.params,
                next_run_number(),
                state.debt_total,
                self.caching,
            )?;
            state.merge = Some((stream, writer));
        }
        let mut spent = 0;
        loop {
            let Some((stream, writer)) = state.merge.as_mut() else {
                return Ok(credits - spent);
            };
            if stream.is_exhausted()? {
                if let Some((_, writer)) = state.merge.take() {
                    state.output = Some(writer.finish()?.map(SortedRun::single));
                    state.inputs.clear();
                }
                return Ok(credits - spent);
            }
            if spent == credits {
                return Ok(0);
            }
            if let Some(entry) = stream.next_raw()? {
                let blob = match &entry.blob {
                    Some(source) => Some(source.read_bytes()?),
                    None => None,
                };
                writer.push(&entry.key, Op::Insert, &entry.value, blob.as_deref())?;
                state.produced += 1;
                spent += 1;
            }
        }
    }

    /// As [`TableView::key_before`], for the union's contents.
    pub(crate) fn key_before(&self, upper: Option<&[u8]>) -> Result<Option<Vec<u8>>> {
        match self.contents() {
            UnionContents::Pending(views) => {
                let mut best = None;
                for view in &views {
                    best = best.max(view.key_before(upper)?);
                }
                Ok(best)
            }
            UnionContents::Done(Some(run)) => run.first_key_before(upper),
            UnionContents::Done(None) => Ok(None),
        }
    }

    /// The union's contribution to a stream of a table that holds it, as its oldest source:
    /// once finished, its run (pushed onto `runs`); while pending, a stream of its inputs from
    /// the first key `>= from`.
    pub(crate) fn stream_parts(
        &self,
        from: Option<&[u8]>,
        resolve: &Resolve,
        runs: &mut Vec<Arc<SortedRun>>,
    ) -> Result<Option<Box<dyn EntryStream>>> {
        match self.contents() {
            UnionContents::Pending(views) => {
                Ok(Some(Box::new(UnionStream::new(&views, from, resolve)?)))
            }
            UnionContents::Done(Some(run)) => {
                runs.push(run);
                Ok(None)
            }
            UnionContents::Done(None) => Ok(None),
        }
    }

    /// Completes lookups whose newer sources did not settle them (`partial` is not final) with
    /// the union's contents, which are older than everything else in the table.
    pub(crate) fn complete_lookups<K: AsRef<[u8]>>(
        &self,
        io: &BlockIo,
        salt: u64,
        keys: &[K],
        mut partial: Vec<Partial>,
        resolve: &Resolve,
    ) -> Result<Vec<Partial>> {
        let pending: Vec<usize> = (0..keys.len())
            .filter(|&i| partial[i].as_ref().is_none_or(|e| !e.is_final()))
            .collect();
        if pending.is_empty() {
            return Ok(partial);
        }
        let wanted: Vec<&[u8]> = pending.iter().map(|&i| keys[i].as_ref()).collect();
        let values = match self.contents() {
            UnionContents::Done(None) => return Ok(partial),
            UnionContents::Done(Some(run)) => {
                let found =
                    lookup_runs(io, salt, &wanted, vec![None; wanted.len()], &[run], resolve)?;
                found.into_iter().map(into_value).collect()
            }
            UnionContents::Pending(views) => {
                let mut acc: Vec<Found> = vec![None; wanted.len()];
                for view in &views {
                    let found = view.lookup(io, salt, &wanted, resolve)?;
                    for (slot, value) in acc.iter_mut().zip(found) {
                        *slot = match (slot.take(), value) {
                            (None, v) => v,
                            (left, None) => left,
                            (Some((left, _)), Some((right, _))) => {
                                Some((resolve.apply(&left, &right), None))
                            }
                        };
                    }
                }
                acc
            }
        };
        for (&i, value) in pending.iter().zip(values) {
            let Some((value, blob)) = value else { continue };
            partial[i] = Some(match partial[i].take() {
                None => Entry::Insert(value, blob),
                Some(newer) => newer.combine_older(Op::Insert, &value, resolve),
            });
        }
        Ok(partial)
    }
}

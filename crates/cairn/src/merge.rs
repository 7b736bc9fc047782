//! Merges: k-way merges of sorted runs into a new sorted run, performed a bounded number of
//! steps at a time.
//!
//! Owns: [`MergingRun`], [`SharedMerge`] (a merge shared by duplicates and the background
//! merger) and [`MergeKind`]. A merge first groups its inputs' parts into pieces in key order:
//! a part whose key range overlaps no other input's part is *linked* into the output (its files
//! shared, no data read or written, no steps), the others are merged cluster by cluster. One
//! *merge step* consumes one input entry of a merged cluster; a merge whose clusters hold `d`
//! entries in total takes exactly `d` steps (its *debt*), at most the entries of its inputs.
//! Entries for the same key are combined newest first through
//! [`crate::entry::Entry::combine_older`]; a last-level merge drops deletes and turns upserts
//! into inserts in the clusters it merges (a linked part keeps its entries as they are: a
//! delete or upsert with nothing older reads as it would after such a merge).
//!
//! May call: `kmerge` (the k-way merge), `run`, `sorted` (sorted runs, their cursors and
//! writer), `entry`, `page` (operation codes), `fs`, `observe` (a span per batch of steps and
//! per finish; the merge debt, counted per batch). Must never touch: the level structure or the
//! credit accounting (that is `schedule`'s job), tables or sessions.
//!
//! Costs: a step compares the current keys of the k inputs (k <= T + 1 = 5) by their first 8
//! bytes (`kmerge`), so a step is a few integer comparisons plus one entry copied into the output
//! page and one filter insert; reads and writes are sequential in 64 KiB chunks. One call to [`MergingRun::steps`] overshoots the requested count by at most
//! k - 1 steps (the last output key may consume one entry from every input).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, LockResult, Mutex, MutexGuard, RwLock};

use crate::config::Resolve;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::kmerge::{Head, KMerge, MergeSource};
use crate::page::{BlobSpan, Op};
use crate::run::{Run, RunParams};
use crate::sorted::{PartWriter, SortedCursor, SortedRun};

/// What a merge does with deletes and upserts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MergeKind {
    /// Older runs may exist below: keep every operation.
    MidLevel,
    /// Nothing older exists: drop deletes, turn upserts into inserts.
    LastLevel,
}

/// A merge in progress (or finished) of a fixed set of input runs, given newest first.
///
/// Planned when it starts: the inputs' parts are grouped into *pieces* in key order, each a
/// part that overlaps no other input's part (linked into the output whole: no I/O, no steps) or
/// a cluster of parts whose key ranges overlap (merged). The debt is the entries of the merged
/// pieces only.
#[derive(Debug)]
pub(crate) struct MergingRun {
    /// The number of the output's first part (for spans).
    number: u64,
    kind: MergeKind,
    resolve: Resolve,
    inputs: Vec<Arc<SortedRun>>,
    /// The pieces not started yet, in key order (reversed: the next one is last).
    pieces: Vec<Piece>,
    /// The merge of the current merged piece's parts, newest input first (empty when none).
    inputs_merge: KMerge<SortedCursor>,
    writer: Option<PartWriter>,
    debt: u64,
    steps_done: u64,
    /// Parts linked into the output so far.
    parts_linked: u64,
    /// Parts the plan links, and their entries.
    links_planned: u64,
    entries_linked: u64,
    /// Set when finished; `None` inside if every entry was dropped.
    output: Option<Option<Arc<SortedRun>>>,
    /// Set when a step failed half way, with the cause: the merge (shared by duplicates and
    /// perhaps stepped by the background merger) refuses further work.
    failed: Option<String>,
    /// The progress recorded at the last cut ([`MergingRun::progress`]).
    last_cut: Option<MergeProgress>,
    /// For a merge resumed inside a piece: the key its next piece's cursors seek.
    resume_at: Option<Vec<u8>>,
}

/// The fewest steps between two cuts of a merge's output ([`MergingRun::progress`]): a part of
/// at least this many entries has a filter of at least 128 blocks at 8 bits per key, which
/// folds to within twice its entries' need (`bloom::foldable`); smaller merges start again
/// from their inputs after a restore, as they cost little.
pub(crate) const CUT_STEPS_MIN: u64 = 8_192;

/// How far a merge in progress has come, as a snapshot records it: every input entry whose key
/// is below `next_key` has been consumed (`steps_done` steps) into the finished `parts` of the
/// output, none at or above it (`next_key` `None`: every entry consumed).
#[derive(Debug, Clone)]
pub(crate) struct MergeProgress {
    pub(crate) parts: Vec<Arc<Run>>,
    pub(crate) next_key: Option<Vec<u8>>,
    pub(crate) steps_done: u64,
}

/// The first and last keys of `piece` of a merge of `inputs`.
fn piece_bounds<'a>(piece: &'a Piece, inputs: &'a [Arc<SortedRun>]) -> (&'a [u8], &'a [u8]) {
    match piece {
        Piece::Link(part) => (part.first_key(), part.last_key()),
        Piece::Merge { sources, .. } => {
            let parts = || {
                sources
                    .iter()
                    .filter_map(|(i, range)| Some((inputs.get(*i)?, range)))
            };
            let first = parts()
                .filter_map(|(run, r)| run.parts().get(r.start).map(|p| p.first_key()))
                .min()
                .unwrap_or_default();
            let last = parts()
                .filter_map(|(run, r)| run.parts().get(r.end.checked_sub(1)?).map(|p| p.last_key()))
                .max()
                .unwrap_or_default();
            (first, last)
        }
    }
}

/// A piece of a merge's output, in key order.
#[derive(Debug)]
enum Piece {
    /// A part no other input's part overlaps: linked whole.
    Link(Arc<Run>),
    /// Parts whose key ranges overlap: per input (newest first), the input's index and its
    /// consecutive parts in the piece; the entries they hold.
    Merge {
        sources: Vec<(usize, std::ops::Range<usize>)>,
        entries: u64,
    },
}

/// Groups the parts of `inputs` (newest first) into pieces, in key order: parts are taken in
/// order of their first keys, and a part whose first key is at most the largest last key so far
/// joins the current cluster. O(parts · log parts) key comparisons, no I/O.
fn plan_pieces(inputs: &[Arc<SortedRun>]) -> Vec<Piece> {
    let mut all: Vec<(usize, usize)> = inputs
        .iter()
        .enumerate()
        .flat_map(|(i, run)| (0..run.parts().len()).map(move |p| (i, p)))
        .collect();
    let part = |&(i, p): &(usize, usize)| &inputs[i].parts()[p];
    all.sort_by(|a, b| {
        part(a)
            .first_key()
            .cmp(part(b).first_key())
            .then(a.0.cmp(&b.0))
    });
    let mut pieces = Vec::new();
    let mut cluster: Vec<(usize, usize)> = Vec::new();
    let mut cluster_last: &[u8] = &[];
    let close = |cluster: &mut Vec<(usize, usize)>, pieces: &mut Vec<Piece>| {
        match cluster.as_slice() {
            [] => {}
            [only] => pieces.push(Piece::Link(part(only).clone())),
            _ => {
                // An input's parts in a cluster are consecutive: the cluster is an interval of
                // keys and an input's parts are disjoint and in key order.
                let mut sources: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
                let mut members = cluster.clone();
                members.sort();
                for (i, p) in members {
                    match sources.last_mut() {
                        Some((input, range)) if *input == i => range.end = p + 1,
                        _ => sources.push((i, p..p + 1)),
                    }
                }
                let entries = cluster.iter().map(|m| part(m).entries()).sum();
                pieces.push(Piece::Merge { sources, entries });
            }
        }
        cluster.clear();
    };
    for member in all {
        let run = part(&member);
        if !cluster.is_empty() && run.first_key() > cluster_last {
            close(&mut cluster, &mut pieces);
        }
        if cluster.is_empty() || run.last_key() > cluster_last {
            cluster_last = run.last_key();
        }
        cluster.push(member);
    }
    close(&mut cluster, &mut pieces);
    pieces.reverse();
    pieces
}

/// A merge in progress shared by every duplicate of a table and, in a session with background
/// merges, by the background merger. Foreground users (updates, lookups, snapshots) announce
/// themselves before they wait for the lock, and the background merger never takes the lock
/// while one is waiting and gives it up after one chunk of steps, so a foreground wait lasts
/// at most one chunk ([`crate::background::CHUNK_STEPS`] steps).
#[derive(Debug)]
pub(crate) struct SharedMerge {
    merge: Mutex<MergingRun>,
    /// Foreground threads waiting for (or about to wait for) `merge`.
    waiting: AtomicU32,
    /// The merge's debt (fixed).
    debt: u64,
    /// Steps done as last published ([`SharedMerge::publish`]), or `u64::MAX` once finished: a
    /// lower bound of the progress, readable without the lock.
    published: AtomicU64,
    /// The runs a lookup reads for this merge: its inputs until it is published finished, then
    /// its output (none if every entry was dropped). Kept apart from `merge`, which steps hold
    /// a chunk at a time, so that a lookup (a pipelined reader on a duplicate, say) never waits
    /// for merge work; both lists hold the same contents.
    readable: RwLock<Vec<Arc<SortedRun>>>,
}

impl SharedMerge {
    pub(crate) fn new(merge: MergingRun) -> SharedMerge {
        let readable = match merge.output() {
            Some(output) => output.iter().cloned().collect(),
            None => merge.inputs().to_vec(),
        };
        let shared = SharedMerge {
            debt: merge.debt(),
            published: AtomicU64::new(0),
            merge: Mutex::new(merge),
            waiting: AtomicU32::new(0),
            readable: RwLock::new(readable),
        };
        if let Ok(merge) = shared.merge.lock() {
            shared.publish(&merge);
        }
        shared
    }

    /// The merge's debt: the steps it takes in all.
    pub(crate) fn debt(&self) -> u64 {
        self.debt
    }

    /// The steps done as last published, `None` once the merge has finished. Never more than
    /// the truth: whoever steps the merge publishes after.
    pub(crate) fn published_steps(&self) -> Option<u64> {
        match self.published.load(Ordering::Acquire) {
            u64::MAX => None,
            steps => Some(steps),
        }
    }

    /// Publishes `merge`'s progress (call with this merge's guard, after stepping it): once it
    /// has finished, lookups read its output instead of its inputs.
    pub(crate) fn publish(&self, merge: &MergingRun) {
        let value = match merge.output() {
            Some(output) => {
                if self.published.load(Ordering::Acquire) != u64::MAX {
                    let mut readable = self.readable.write().unwrap_or_else(|p| p.into_inner());
                    *readable = output.iter().cloned().collect();
                }
                u64::MAX
            }
            None => merge.steps_done(),
        };
        self.published.store(value, Ordering::Release);
    }

    /// Appends the runs a lookup reads for this merge, newest first (see `readable`). Waits
    /// only for another thread's publication, never for merge work.
    pub(crate) fn readable_runs(&self, out: &mut Vec<Arc<SortedRun>>) {
        let readable = self.readable.read().unwrap_or_else(|p| p.into_inner());
        out.extend(readable.iter().cloned());
    }

    /// Locks the merge for a foreground user, announcing the wait to the background merger.
    pub(crate) fn lock(&self) -> LockResult<MutexGuard<'_, MergingRun>> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let result = self.merge.lock();
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        result
    }

    /// Locks the merge for the background merger: `None` when a foreground user holds it or
    /// waits for it (the background then works elsewhere), or when the lock is poisoned.
    pub(crate) fn try_lock_background(&self) -> Option<MutexGuard<'_, MergingRun>> {
        if self.waiting.load(Ordering::Acquire) > 0 {
            return None;
        }
        // Held or poisoned: either way, no background work on it now.
        self.merge.try_lock().ok()
    }
}

impl MergingRun {
    /// Starts a merge of `inputs` (newest first) into parts numbered from `number` (cut every
    /// `part_entries` entries). Costs no I/O but the creation of the output's first file when
    /// a piece is merged; a merge whose pieces are all linked finishes here (no data I/O).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        params: &RunParams,
        number: u64,
        inputs: Vec<Arc<SortedRun>>,
        kind: MergeKind,
        resolve: Resolve,
        caching: bool,
        part_entries: Option<u64>,
    ) -> Result<MergingRun> {
        let mut merge = MergingRun::planned(
            fs,
            params,
            number,
            inputs,
            kind,
            resolve,
            caching,
            part_entries,
        );
        if merge.debt == 0 {
            merge.complete()?;
        }
        Ok(merge)
    }

    /// A merge of `inputs` as [`MergingRun::new`] plans it, not started (a merge all linked is
    /// not finished yet). No I/O.
    #[allow(clippy::too_many_arguments)]
    fn planned(
        fs: Arc<dyn FileSystem>,
        params: &RunParams,
        number: u64,
        inputs: Vec<Arc<SortedRun>>,
        kind: MergeKind,
        resolve: Resolve,
        caching: bool,
        part_entries: Option<u64>,
    ) -> MergingRun {
        let pieces = plan_pieces(&inputs);
        let debt = pieces
            .iter()
            .map(|p| match p {
                Piece::Merge { entries, .. } => *entries,
                Piece::Link(_) => 0,
            })
            .sum();
        let (links_planned, entries_linked) = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Link(part) => Some(part.entries()),
                Piece::Merge { .. } => None,
            })
            .fold((0, 0), |(n, e), entries| (n + 1, e + entries));
        let writer = PartWriter::new(fs, params, number, debt, part_entries, caching);
        // Paid off as steps are done, or when the merge is dropped unfinished (`Drop`).
        crate::observe::merge_debt_added(debt);
        MergingRun {
            number,
            kind,
            resolve,
            inputs,
            links_planned,
            entries_linked,
            pieces,
            inputs_merge: KMerge::empty(),
            writer: Some(writer),
            debt,
            steps_done: 0,
            parts_linked: 0,
            output: None,
            failed: None,
            last_cut: None,
            resume_at: None,
        }
    }

    /// A merge of `inputs` (as [`MergingRun::new`], which it is for `progress` `None`) resumed
    /// from `progress`, which a snapshot recorded ([`MergingRun::progress`]): its output goes on after the finished parts, from
    /// the input entries at `next_key` (each input's cursor seeks it: one index search per
    /// input), with `steps_done` steps counted as done. Errors: `Corrupt` when the progress does
    /// not fit the inputs (more steps than the debt, a finished part at or above `next_key`,
    /// `next_key` inside a part the plan links whole); a progress that lies about its steps is
    /// found when the merge finishes (its steps then differ from its debt).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resume(
        fs: Arc<dyn FileSystem>,
        params: &RunParams,
        number: u64,
        inputs: Vec<Arc<SortedRun>>,
        kind: MergeKind,
        resolve: Resolve,
        caching: bool,
        part_entries: Option<u64>,
        progress: Option<MergeProgress>,
    ) -> Result<MergingRun> {
        let Some(progress) = progress else {
            return MergingRun::new(
                fs,
                params,
                number,
                inputs,
                kind,
                resolve,
                caching,
                part_entries,
            );
        };
        let bad = |what: &str| {
            Err(Error::corrupt(
                "snapshot metadata",
                format!("merge progress: {what}"),
            ))
        };
        let mut merge = MergingRun::planned(
            fs,
            params,
            number,
            inputs,
            kind,
            resolve,
            caching,
            part_entries,
        );
        if progress.steps_done > merge.debt {
            return bad("more steps than the merge has");
        }
        if let (Some(last), Some(next)) = (progress.parts.last(), &progress.next_key) {
            if last.last_key() >= next.as_slice() {
                return bad("a finished part reaches the next key");
            }
        }
        for pair in progress.parts.windows(2) {
            if pair[0].last_key() >= pair[1].first_key() {
                return bad("finished parts out of key order");
            }
        }
        let left = merge.debt - progress.steps_done;
        let writer = merge.writer.take().map(|mut w| {
            w.expect(left);
            w.after_parts(progress.parts.clone())
        });
        match &progress.next_key {
            None => merge.pieces.clear(),
            Some(next) => {
                while let Some(piece) = merge.pieces.last() {
                    let (first, last) = piece_bounds(piece, &merge.inputs);
                    if last < next.as_slice() {
                        if matches!(piece, Piece::Link(_)) {
                            merge.parts_linked += 1;
                        }
                        merge.pieces.pop();
                        continue;
                    }
                    if first < next.as_slice() {
                        if matches!(piece, Piece::Link(_)) {
                            return bad("the next key inside a linked part");
                        }
                        // Its cursors seek `next` when the merge first steps (an open reads
                        // no data).
                        merge.resume_at = Some(next.clone());
                    }
                    break;
                }
            }
        }
        merge.writer = writer;
        merge.steps_done = progress.steps_done;
        crate::observe::merge_debt_paid(progress.steps_done);
        merge.last_cut = Some(progress);
        Ok(merge)
    }

    /// The merge's progress for a snapshot, or `None` before any work (or once finished, or in a
    /// read-only session). When at least `debt / 32` and `min_steps` steps were done since the
    /// last cut ([`CUT_STEPS_MIN`] but in tests: a smaller part's filter may not fold to its
    /// size), the
    /// output is cut first ([`PartWriter::cut`]: the part being written is finished, its
    /// filter fitted); otherwise the last cut's progress is returned (older, and as valid), so
    /// that a merge is cut at most once per 1/32 of its work, whatever the number of snapshots.
    /// Cost of a cut: writing the part's filter, index and checksums. An error fails the merge
    /// (its writer is gone).
    pub(crate) fn progress(&mut self, min_steps: u64) -> Result<Option<MergeProgress>> {
        if self.is_done() || self.writer.is_none() || self.failed.is_some() {
            return Ok(None);
        }
        let since = self.steps_done - self.last_cut.as_ref().map_or(0, |c| c.steps_done);
        let worth = (self.debt / 32).max(min_steps).max(1);
        if since < worth || (self.steps_done == 0 && self.parts_linked == 0) {
            return Ok(self.last_cut.clone());
        }
        let result = self.cut();
        if let Err(e) = &result {
            self.failed = Some(e.with_causes());
        }
        result.map(Some)
    }

    fn cut(&mut self) -> Result<MergeProgress> {
        let next_key = if !self.inputs_merge.is_exhausted() {
            match self.inputs_merge.peek_group()? {
                Some(group) => self.inputs_merge.sources()[group.first]
                    .head()?
                    .map(|h| h.key.to_vec()),
                None => None,
            }
        } else if let Some(key) = &self.resume_at {
            Some(key.clone())
        } else {
            self.pieces
                .last()
                .map(|p| piece_bounds(p, &self.inputs).0.to_vec())
        };
        let writer = self
            .writer
            .as_mut()
            .expect("an unfinished merge has a writer");
        writer.cut()?;
        let progress = MergeProgress {
            parts: writer.parts().to_vec(),
            next_key,
            steps_done: self.steps_done,
        };
        self.last_cut = Some(progress.clone());
        Ok(progress)
    }

    /// A merge of `inputs` that never runs (in a read-only session): readers see its inputs, and
    /// any step fails with [`Error::ReadOnly`]. No I/O.
    pub(crate) fn paused(
        inputs: Vec<Arc<SortedRun>>,
        kind: MergeKind,
        resolve: Resolve,
    ) -> MergingRun {
        MergingRun {
            number: 0,
            kind,
            resolve,
            debt: inputs.iter().map(|r| r.entries()).sum(),
            inputs,
            pieces: Vec::new(),
            inputs_merge: KMerge::empty(),
            writer: None,
            steps_done: 0,
            parts_linked: 0,
            links_planned: 0,
            entries_linked: 0,
            output: None,
            failed: None,
            last_cut: None,
            resume_at: None,
        }
    }

    /// What the merge does with deletes and upserts.
    pub(crate) fn kind(&self) -> MergeKind {
        self.kind
    }

    /// Total steps this merge takes: the entries of its merged pieces.
    pub(crate) fn debt(&self) -> u64 {
        self.debt
    }

    /// Steps performed so far.
    pub(crate) fn steps_done(&self) -> u64 {
        self.steps_done
    }

    /// Parts linked into the output so far (each saved rewriting its entries).
    #[allow(dead_code)] // tests
    pub(crate) fn parts_linked(&self) -> u64 {
        self.parts_linked
    }

    /// Parts the merge links whole (its plan).
    pub(crate) fn links_planned(&self) -> u64 {
        self.links_planned
    }

    /// Entries in the parts the merge links.
    pub(crate) fn entries_linked(&self) -> u64 {
        self.entries_linked
    }

    /// The inputs, newest first (none once the merge has finished).
    pub(crate) fn inputs(&self) -> &[Arc<SortedRun>] {
        &self.inputs
    }

    /// Whether the merge can take steps: not finished, not failed, not paused.
    pub(crate) fn needs_work(&self) -> bool {
        !self.is_done() && self.failed.is_none() && self.writer.is_some()
    }

    /// Whether the merge has finished.
    pub(crate) fn is_done(&self) -> bool {
        self.output.is_some()
    }

    /// The result, once finished (`Some(None)` when every entry was dropped).
    pub(crate) fn output(&self) -> Option<&Option<Arc<SortedRun>>> {
        self.output.as_ref()
    }

    /// Performs at least `steps` steps unless the merge finishes first, and returns how many were
    /// performed (at most `steps + k - 1` for k inputs). Finishing writes the filter and index.
    pub(crate) fn steps(&mut self, steps: u64) -> Result<u64> {
        if let Some(cause) = &self.failed {
            return Err(Error::TableBroken(format!(
                "a merge shared with this table failed earlier: {cause}"
            )));
        }
        if self.writer.is_none() && self.output.is_none() {
            return Err(Error::ReadOnly("merge work"));
        }
        let span =
            crate::observe::merge_steps(self.number, self.kind == MergeKind::LastLevel, steps);
        let steps_before = self.steps_done;
        let result = self.steps_unchecked(steps);
        let done = self.steps_done - steps_before;
        span.record("steps_done", done);
        crate::observe::merge_steps_done(done);
        if let Err(e) = &result {
            self.failed = Some(e.with_causes());
        }
        result
    }

    fn steps_unchecked(&mut self, steps: u64) -> Result<u64> {
        let mut done = 0;
        loop {
            if self.is_done() {
                return Ok(done);
            }
            if self.inputs_merge.is_exhausted() {
                // The current piece (if any) is merged: link or start the next ones.
                if !self.next_piece()? {
                    self.finish()?;
                    return Ok(done);
                }
                continue;
            }
            if done >= steps {
                return Ok(done);
            }
            done += self.step()?;
        }
    }

    /// Moves to the next piece: links it, or opens the cursors of its parts. `false` when no
    /// piece is left.
    fn next_piece(&mut self) -> Result<bool> {
        let Some(piece) = self.pieces.pop() else {
            return Ok(false);
        };
        let writer = self
            .writer
            .as_mut()
            .expect("an unfinished merge has a writer");
        match piece {
            Piece::Link(part) => {
                writer.link(part)?;
                self.parts_linked += 1;
                self.inputs_merge = KMerge::empty();
            }
            Piece::Merge { sources, entries } => {
                writer.expect(entries);
                // Opened together: each input's first read is asked for before any is waited
                // on, so that the disk serves them side by side.
                let cursors = match self.resume_at.take() {
                    Some(key) => sources
                        .into_iter()
                        .map(|(input, parts)| {
                            SortedCursor::seek_in(self.inputs[input].clone(), parts, &key)
                        })
                        .collect::<Result<Vec<_>>>()?,
                    None => SortedCursor::open_together(
                        sources
                            .into_iter()
                            .map(|(input, parts)| (self.inputs[input].clone(), parts))
                            .collect(),
                    )?,
                };
                self.inputs_merge = KMerge::new(cursors)?;
            }
        }
        Ok(true)
    }

    /// Runs the merge to completion; returns the steps performed.
    pub(crate) fn complete(&mut self) -> Result<u64> {
        self.steps(u64::MAX)
    }

    /// Produces one output key of the current piece; returns the input entries it consumed.
    fn step(&mut self) -> Result<u64> {
        let Some(group) = self.inputs_merge.peek_group()? else {
            return Ok(0);
        };
        let writer = self
            .writer
            .as_mut()
            .expect("an unfinished merge has a writer");
        if group.holders == 1 {
            // The common case: copy the entry straight from the input page.
            let cursor = &self.inputs_merge.sources()[group.first];
            if let Some(e) = cursor.peek()? {
                let keep = match (self.kind, e.op) {
                    (MergeKind::LastLevel, Op::Delete) => None,
                    (MergeKind::LastLevel, Op::Upsert) => Some(Op::Insert),
                    (_, op) => Some(op),
                };
                if let Some(op) = keep {
                    let blob = match (e.blob, cursor.current_part()) {
                        (Some(span), Some(part)) => Some(part.read_blob(span)?),
                        _ => None,
                    };
                    writer.push(e.key, op, e.value, blob.as_deref())?;
                }
            }
            self.inputs_merge.advance(group.first)?;
            self.steps_done += 1;
            return Ok(1);
        }
        // Only the newest entry's blob can survive a fold (an upsert drops the blob of the
        // insert below it), so the blob is in the newest holder's current part.
        let blob_part = self.inputs_merge.sources()[group.first]
            .current_part()
            .cloned();
        // Several inputs hold the key: combine newest first.
        let Some((key, combined, consumed)) = self.inputs_merge.next_combined(&self.resolve)?
        else {
            return Ok(0);
        };
        let combined = match self.kind {
            MergeKind::LastLevel => combined.into_last_level(),
            MergeKind::MidLevel => Some(combined),
        };
        if let Some(entry) = combined {
            let blob = match (&entry, &blob_part) {
                (Entry::Insert(_, Some(span)), Some(part)) => Some(part.read_blob(*span)?),
                _ => None,
            };
            writer.push(key, entry.op(), entry.value(), blob.as_deref())?;
        }
        self.steps_done += consumed;
        Ok(consumed)
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(writer) = self.writer.take() {
            // The debt comes from the inputs' indexes, the steps from their pages: in a
            // damaged (or forged) run they disagree.
            if self.steps_done != self.debt {
                return Err(Error::corrupt(
                    "run",
                    format!(
                        "a merge's inputs hold {} entries, their indexes say {}",
                        self.steps_done, self.debt
                    ),
                ));
            }
            let _span = crate::observe::merge_finish(
                self.number,
                self.inputs.len(),
                self.debt,
                self.parts_linked,
            );
            let output = writer.finish()?;
            crate::observe::merge_finished();
            self.inputs_merge = KMerge::empty();
            self.output = Some(output);
            // The inputs' files go as soon as no reader holds them: a finished merge, which
            // stays in its level until the next run arrives, must not keep them alive.
            self.inputs = Vec::new();
        }
        Ok(())
    }
}

/// An unfinished merge's steps left are owed no longer ([`crate::observe::MERGE_DEBT`]).
#[cfg(feature = "metrics")]
impl Drop for MergingRun {
    fn drop(&mut self) {
        if self.writer.is_some() {
            crate::observe::merge_debt_paid(self.debt.saturating_sub(self.steps_done));
        }
    }
}

/// A sorted run's cursor is a merge source whose blobs are spans of its current part's blob
/// file.
impl MergeSource for SortedCursor {
    type Blob = BlobSpan;

    fn head(&self) -> Result<Option<Head<'_, BlobSpan>>> {
        Ok(self.peek()?.map(|e| Head {
            key: e.key,
            op: e.op,
            value: e.value,
            blob: e.blob,
        }))
    }

    fn advance(&mut self) -> Result<()> {
        SortedCursor::advance(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::index::IndexType;

    fn params() -> RunParams {
        RunParams::for_tests(IndexType::Ordinary)
    }

    fn run(fs: &Arc<dyn FileSystem>, number: u64, keys: &[u32]) -> Arc<SortedRun> {
        let mut w = PartWriter::new(fs.clone(), &params(), number, keys.len() as u64, None, true);
        for k in keys {
            w.push(&k.to_be_bytes(), Op::Insert, b"v", None).unwrap();
        }
        w.finish().unwrap().unwrap()
    }

    fn entries_of(run: &Option<Arc<SortedRun>>) -> Vec<(Vec<u8>, Op, Vec<u8>)> {
        let Some(run) = run else { return Vec::new() };
        let mut cursor = SortedCursor::new(run.clone()).unwrap();
        let mut out = Vec::new();
        while let Some(e) = cursor.peek().unwrap() {
            out.push((e.key.to_vec(), e.op, e.value.to_vec()));
            cursor.advance().unwrap();
        }
        out
    }

    /// A merge cut at any step and resumed from its progress (as a snapshot's restore does)
    /// writes the output an uninterrupted merge writes, for mid- and last-level merges, with
    /// overlapping and linked parts, and its steps add up to the debt.
    #[test]
    fn a_merge_resumed_from_its_progress_writes_the_same_output() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        fs.create_dir_all(&params().dir).unwrap();
        let mut number = 5_000;
        let mut next = || {
            number += 1;
            number
        };
        // Newest first: overlapping inputs, with a delete and a range only one input covers.
        let mk = |fs: &Arc<dyn FileSystem>, n: u64, keys: &[u32], op: Op| {
            let mut w = PartWriter::new(fs.clone(), &params(), n, keys.len() as u64, Some(7), true);
            for k in keys {
                let value = if op == Op::Delete {
                    Vec::new()
                } else {
                    k.to_le_bytes().to_vec()
                };
                w.push(&k.to_be_bytes(), op, &value, None).unwrap();
            }
            w.finish().unwrap().unwrap()
        };
        let a = mk(
            &fs,
            next(),
            &(0..40).map(|i| i * 3).collect::<Vec<_>>(),
            Op::Insert,
        );
        let b = mk(
            &fs,
            next(),
            &(0..30).map(|i| i * 2).collect::<Vec<_>>(),
            Op::Delete,
        );
        let c = mk(&fs, next(), &(500..540).collect::<Vec<_>>(), Op::Insert);
        for kind in [MergeKind::MidLevel, MergeKind::LastLevel] {
            let inputs = vec![a.clone(), b.clone(), c.clone()];
            let new = |n: u64| {
                MergingRun::new(
                    fs.clone(),
                    &params(),
                    n,
                    inputs.clone(),
                    kind,
                    Resolve::KeepNewest,
                    true,
                    Some(7),
                )
                .unwrap()
            };
            let mut whole = new(next());
            whole.complete().unwrap();
            let want = entries_of(whole.output().unwrap());
            let debt = whole.debt();
            for cut_at in 0..=debt {
                let mut merge = new(next());
                merge.steps(cut_at).unwrap();
                let Some(progress) = merge.progress(1).unwrap() else {
                    assert!(cut_at == 0 || merge.is_done());
                    continue;
                };
                let mut resumed = MergingRun::resume(
                    fs.clone(),
                    &params(),
                    next(),
                    inputs.clone(),
                    kind,
                    Resolve::KeepNewest,
                    true,
                    Some(7),
                    Some(progress.clone()),
                )
                .unwrap();
                let steps = resumed.complete().unwrap();
                assert_eq!(
                    progress.steps_done + steps,
                    debt,
                    "{kind:?} cut at {cut_at}"
                );
                assert_eq!(
                    entries_of(resumed.output().unwrap()),
                    want,
                    "{kind:?} cut at {cut_at}"
                );
                // The original goes on too, from its cut.
                merge.complete().unwrap();
                assert_eq!(entries_of(merge.output().unwrap()), want);
            }
        }
    }

    /// Overlapping parts are merged, the others linked; a finished merge keeps no input alive
    /// (a finished merge waits in its level for the next run, and its inputs' files must go).
    #[test]
    fn merges_link_what_overlaps_nothing_and_release_their_inputs() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        fs.create_dir_all(&params().dir).unwrap();
        let newer = run(&fs, 1, &[10, 11, 12, 40, 41]);
        let older = run(&fs, 2, &[1, 2, 3]);
        let oldest = run(&fs, 3, &[12, 20, 30]);
        let inputs = vec![newer.clone(), older.clone(), oldest.clone()];
        let mut merge = MergingRun::new(
            fs.clone(),
            &params(),
            4,
            inputs,
            MergeKind::MidLevel,
            Resolve::KeepNewest,
            true,
            None,
        )
        .unwrap();
        // `older` overlaps nothing: linked; `newer` and `oldest` share key 12: merged.
        assert_eq!(merge.links_planned(), 1);
        assert_eq!(merge.debt(), 8);
        assert_eq!(merge.complete().unwrap(), 8);
        let output = merge.output().cloned().flatten().unwrap();
        assert_eq!(output.parts().len(), 2);
        assert!(Arc::ptr_eq(&output.parts()[0], &older.parts()[0]));
        assert_eq!(output.entries(), 3 + 7);
        for input in [&newer, &older, &oldest] {
            assert_eq!(
                Arc::strong_count(input),
                1,
                "a finished merge holds an input"
            );
        }
        // Disjoint inputs only: the merge is finished when it starts, with no steps.
        let a = run(&fs, 5, &[100, 101]);
        let b = run(&fs, 6, &[200]);
        let merge = MergingRun::new(
            fs.clone(),
            &params(),
            7,
            vec![b, a],
            MergeKind::LastLevel,
            Resolve::KeepNewest,
            true,
            None,
        )
        .unwrap();
        assert!(merge.is_done());
        assert_eq!(
            (merge.debt(), merge.steps_done(), merge.links_planned()),
            (0, 0, 2)
        );
        let output = merge.output().cloned().flatten().unwrap();
        assert_eq!(output.first_key(), 100u32.to_be_bytes());
    }
}

//! Merges: k-way merges of runs into a new run, performed a bounded number of steps at a time.
//!
//! Owns: [`MergingRun`] and [`MergeKind`]. One *merge step* consumes one input entry; a merge of
//! inputs holding `d` entries in total takes exactly `d` steps (its *debt*). Entries for the same
//! key are combined newest first through [`crate::entry::Entry::combine_older`]; a last-level merge
//! drops deletes and turns upserts into inserts.
//!
//! May call: `kmerge` (the k-way merge), `run` (cursors and writers), `entry`, `page` (operation
//! codes), `fs`. Must never touch: the level structure or the
//! credit accounting (that is `schedule`'s job), tables or sessions.
//!
//! Costs: a step compares the current keys of the k inputs (k <= T + 1 = 5), so a step is a few
//! key comparisons plus one entry copied into the output page; reads and writes are sequential in
//! 64 KiB chunks. One call to [`MergingRun::steps`] overshoots the requested count by at most
//! k - 1 steps (the last output key may consume one entry from every input).

use std::sync::Arc;

use crate::config::Resolve;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::kmerge::{Head, KMerge, MergeSource};
use crate::page::{BlobSpan, Op};
use crate::run::{Run, RunCursor, RunParams, RunWriter};

/// What a merge does with deletes and upserts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MergeKind {
    /// Older runs may exist below: keep every operation.
    MidLevel,
    /// Nothing older exists: drop deletes, turn upserts into inserts.
    LastLevel,
}

/// A merge in progress (or finished) of a fixed set of input runs, given newest first.
#[derive(Debug)]
pub(crate) struct MergingRun {
    kind: MergeKind,
    resolve: Resolve,
    inputs: Vec<Arc<Run>>,
    /// The merge of the inputs' cursors, newest first (empty once finished).
    inputs_merge: KMerge<RunCursor>,
    writer: Option<RunWriter>,
    debt: u64,
    steps_done: u64,
    /// Set when finished; `None` inside if every entry was dropped.
    output: Option<Option<Arc<Run>>>,
    /// Set when a step failed half way: the merge (shared by duplicates) refuses further work.
    failed: bool,
}

impl MergingRun {
    /// Starts a merge of `inputs` (newest first) into run `number`. Costs O(1) I/O: it opens the
    /// inputs and creates the output files.
    pub(crate) fn new(
        fs: Arc<dyn FileSystem>,
        params: &RunParams,
        number: u64,
        inputs: Vec<Arc<Run>>,
        kind: MergeKind,
        resolve: Resolve,
        caching: bool,
    ) -> Result<MergingRun> {
        let debt: u64 = inputs.iter().map(|r| r.entries()).sum();
        let cursors = inputs
            .iter()
            .map(|run| RunCursor::new(run.clone()))
            .collect::<Result<Vec<_>>>()?;
        let writer = RunWriter::new(fs, params, number, debt, caching)?;
        Ok(MergingRun {
            kind,
            resolve,
            inputs,
            inputs_merge: KMerge::new(cursors),
            writer: Some(writer),
            debt,
            steps_done: 0,
            output: None,
            failed: false,
        })
    }

    /// A merge of `inputs` that never runs (in a read-only session): readers see its inputs, and
    /// any step fails with [`Error::ReadOnly`]. No I/O.
    pub(crate) fn paused(inputs: Vec<Arc<Run>>, kind: MergeKind, resolve: Resolve) -> MergingRun {
        MergingRun {
            kind,
            resolve,
            debt: inputs.iter().map(|r| r.entries()).sum(),
            inputs,
            inputs_merge: KMerge::new(Vec::new()),
            writer: None,
            steps_done: 0,
            output: None,
            failed: false,
        }
    }

    /// What the merge does with deletes and upserts.
    pub(crate) fn kind(&self) -> MergeKind {
        self.kind
    }

    /// Total steps this merge takes (the sum of its inputs' entries).
    pub(crate) fn debt(&self) -> u64 {
        self.debt
    }

    /// Steps performed so far.
    pub(crate) fn steps_done(&self) -> u64 {
        self.steps_done
    }

    /// The inputs, newest first.
    pub(crate) fn inputs(&self) -> &[Arc<Run>] {
        &self.inputs
    }

    /// Whether the merge has finished.
    pub(crate) fn is_done(&self) -> bool {
        self.output.is_some()
    }

    /// The result, once finished (`Some(None)` when every entry was dropped).
    pub(crate) fn output(&self) -> Option<&Option<Arc<Run>>> {
        self.output.as_ref()
    }

    /// Performs at least `steps` steps unless the merge finishes first, and returns how many were
    /// performed (at most `steps + k - 1` for k inputs). Finishing writes the filter and index.
    pub(crate) fn steps(&mut self, steps: u64) -> Result<u64> {
        if self.failed {
            return Err(Error::TableBroken(
                "a merge shared with this table failed earlier".into(),
            ));
        }
        if self.writer.is_none() && self.output.is_none() {
            return Err(Error::ReadOnly("merge work"));
        }
        let result = self.steps_unchecked(steps);
        self.failed = result.is_err();
        result
    }

    fn steps_unchecked(&mut self, steps: u64) -> Result<u64> {
        let mut done = 0;
        while done < steps && !self.is_done() {
            done += self.step()?;
            if self.inputs_merge.sources().iter().all(RunCursor::is_done) {
                self.finish()?;
            }
        }
        Ok(done)
    }

    /// Runs the merge to completion; returns the steps performed.
    pub(crate) fn complete(&mut self) -> Result<u64> {
        self.steps(u64::MAX)
    }

    /// Produces one output key; returns the input entries it consumed.
    fn step(&mut self) -> Result<u64> {
        let Some(group) = self.inputs_merge.peek_group()? else {
            self.finish()?;
            return Ok(0);
        };
        let writer = self
            .writer
            .as_mut()
            .expect("an unfinished merge has a writer");
        if group.holders == 1 {
            // The common case: copy the entry straight from the input page.
            let cursor = self.inputs_merge.source_mut(group.first);
            if let Some(e) = cursor.peek()? {
                let keep = match (self.kind, e.op) {
                    (MergeKind::LastLevel, Op::Delete) => None,
                    (MergeKind::LastLevel, Op::Upsert) => Some(Op::Insert),
                    (_, op) => Some(op),
                };
                if let Some(op) = keep {
                    let blob = match e.blob {
                        Some(span) => Some(cursor.run().read_blob(span)?),
                        None => None,
                    };
                    writer.push(e.key, op, e.value, blob.as_deref())?;
                }
            }
            cursor.advance()?;
            self.steps_done += 1;
            return Ok(1);
        }
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
            let blob = match &entry {
                // Only the newest entry's blob can survive a fold (an upsert drops the blob of
                // the insert below it), so the blob is in the newest holder's run.
                Entry::Insert(_, Some(span)) => Some(self.inputs[group.first].read_blob(*span)?),
                _ => None,
            };
            writer.push(key, entry.op(), entry.value(), blob.as_deref())?;
        }
        self.steps_done += consumed;
        Ok(consumed)
    }

    fn finish(&mut self) -> Result<()> {
        if let Some(writer) = self.writer.take() {
            let output = writer.finish()?;
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
            self.inputs_merge = KMerge::new(Vec::new());
            self.output = Some(output);
        }
        Ok(())
    }
}

/// A run cursor is a merge source whose blobs are spans of its run's blob file.
impl MergeSource for RunCursor {
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
        RunCursor::advance(self)
    }
}

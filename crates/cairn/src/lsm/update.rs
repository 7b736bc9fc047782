//! The update path of a table: validating a batch, applying it to the write buffer with the
//! merge credits each update pays, and writing full write buffers out as level-1 runs a few
//! entries per update (see [`super::Flushing`]).

use std::sync::Arc;

use super::{validate, Flushing, Lsm, TableState, FLUSH_CHUNK, FLUSH_ENTRIES_PER_UPDATE};
use crate::error::{Error, Result};
use crate::flush::SharedFlush;
use crate::page::Op;
use crate::snapshot::with_merge_context;
use crate::sorted::PartWriter;
use crate::write_buffer::MemBlob;
use crate::Update;

impl Lsm {
    /// Checks every update of `batch` against the table's limits and rules, before anything is
    /// applied or logged.
    pub(crate) fn validate_batch<K: AsRef<[u8]>>(&self, batch: &[(K, Update<'_>)]) -> Result<()> {
        for (key, update) in batch {
            validate(key.as_ref(), update, &self.inner.config.resolve)?;
        }
        Ok(())
    }

    /// Puts off (`true`) or resumes (`false`) merge steps for a log replay
    /// (`schedule::Levels::defer_steps`: credits are still paid, and the steps put off are
    /// spread over the credits to come once resumed). O(levels).
    pub(crate) fn defer_merge_steps(&self, on: bool) -> Result<()> {
        self.lock_write()?.levels.defer_steps(on);
        Ok(())
    }

    /// Applies a validated batch (no logging).
    pub(crate) fn apply_updates<K: AsRef<[u8]>>(&self, batch: &[(K, Update<'_>)]) -> Result<()> {
        if batch.is_empty() {
            // Still report a closed or broken table.
            drop(self.read()?);
            return Ok(());
        }
        self.inner.session.check_writable("an update")?;
        let mut state = self.lock_write()?;
        crate::observe::updates(batch.len());
        for (key, update) in batch {
            let key = key.as_ref();
            if let Err(e) = self.apply_one(&mut state, key, update) {
                // A run or merge failed half way: answers could be wrong from now on, so the
                // table refuses every further operation.
                state.broken = Some(e.with_causes());
                return Err(e);
            }
            if self.inner.auth.is_some() {
                // No hashing and no trie I/O here: the commit rehashes (lazily).
                state.dirty.insert(key.to_vec());
            }
        }
        Ok(())
    }

    fn apply_one(&self, state: &mut TableState, key: &[u8], update: &Update<'_>) -> Result<()> {
        state.epoch += 1;
        let config = &self.inner.config;
        migrate_finished_union(state, config.write_buffer_entries);
        let union_below = state.union.is_some();
        let steps = with_merge_context(
            &self.inner.session,
            config,
            &self.inner.params,
            union_below,
            |ctx| {
                let mut steps = state.levels.supply_credits(ctx, 1)?;
                let (op, value, blob) = match *update {
                    Update::Insert(v) => (Op::Insert, v, None),
                    Update::InsertWithBlob(v, b) => (Op::Insert, v, Some(MemBlob::from(b))),
                    Update::Upsert(v) => (Op::Upsert, v, None),
                    Update::Delete => (Op::Delete, &[][..], None),
                };
                state
                    .write_buffer
                    .apply(key, op, value, blob, &config.resolve);
                steps += self.advance_flush(state, ctx, FLUSH_ENTRIES_PER_UPDATE)?;
                if state.write_buffer.len() >= config.write_buffer_entries {
                    // The previous flush had at least `B` updates to finish in: normally done.
                    steps += self.advance_flush(state, ctx, usize::MAX)?;
                    self.start_flush(state)?;
                }
                Ok(steps)
            },
        )?;
        state.merge_steps_total += steps;
        state.merge_steps_max_per_update = state.merge_steps_max_per_update.max(steps);
        state.merge_steps_last_update = steps;
        Ok(())
    }

    /// Freezes the full write buffer as [`Flushing`] and gives the table a fresh one, handing
    /// the flush to the background thread if the session has one. O(1) memory work; the run's
    /// first file is created with its first entry.
    fn start_flush(&self, state: &mut TableState) -> Result<()> {
        debug_assert!(state.flushing.is_none());
        let buffer = std::mem::take(&mut state.write_buffer);
        let writer = self.flush_writer(buffer.len(), state.levels.level_count());
        let shared = Arc::new(SharedFlush::new(buffer.clone(), writer));
        if let Some(background) = self.inner.session.background() {
            background.register_flush(&shared);
        }
        state.flushing = Some(Flushing {
            buffer,
            shared,
            paid: 0,
        });
        Ok(())
    }

    /// A writer for the run of a frozen buffer of `entries` entries (its first file is created
    /// with its first entry), for level 1 of a table with `levels` levels.
    fn flush_writer(&self, entries: usize, levels: usize) -> PartWriter {
        let session = &self.inner.session;
        PartWriter::new(
            session.fs().clone(),
            &self.inner.params.for_level(1, levels),
            session.next_run_number(),
            entries as u64,
            self.inner.config.part_entries,
            self.inner.config.disk_cache.caches_level(1),
        )
    }

    /// Pays for `entries` more entries of the frozen buffer (if there is one) and writes those
    /// not written yet once a chunk's worth is due (all that remain for `usize::MAX`); once all
    /// are paid for, finishes the run (if nobody has) and adds it to level 1. Returns the merge
    /// steps adding it performed.
    fn advance_flush(
        &self,
        state: &mut TableState,
        ctx: &crate::schedule::MergeContext<'_>,
        entries: usize,
    ) -> Result<u64> {
        let Some(flushing) = state.flushing.as_mut() else {
            return Ok(0);
        };
        let len = flushing.shared.len();
        flushing.paid = flushing.paid.saturating_add(entries).min(len);
        let written = flushing.shared.written();
        if flushing.paid < len && flushing.paid.saturating_sub(written) < FLUSH_CHUNK {
            return Ok(0);
        }
        let output = flushing.shared.write_up_to(flushing.paid)?;
        if flushing.paid < len {
            return Ok(0);
        }
        let Some(run) = output else {
            return Err(Error::TableBroken(
                "a flush wrote every entry but has no run".into(),
            ));
        };
        let Some(flushing) = state.flushing.take() else {
            return Ok(0);
        };
        match self.inner.session.background() {
            // Freeing B entries (an allocation each) is the background thread's work.
            Some(background) => background.free(Box::new(flushing.buffer)),
            None => drop(flushing.buffer),
        }
        match run {
            Some(run) => state.levels.add_flushed_run(ctx, run),
            None => Ok(0),
        }
    }

    /// Finishes a flush in progress (see [`Flushing`]): at most `B` entries written and one run
    /// added to level 1. Returns the merge steps the run's arrival performed. An error breaks
    /// the table, as it would have broken the update.
    pub(super) fn settle_flush(&self, state: &mut TableState) -> Result<u64> {
        if state.flushing.is_none() {
            return Ok(0);
        }
        let union_below = state.union.is_some();
        let outcome = with_merge_context(
            &self.inner.session,
            &self.inner.config,
            &self.inner.params,
            union_below,
            |ctx| self.advance_flush(state, ctx, usize::MAX),
        );
        match outcome {
            Ok(steps) => {
                state.merge_steps_total += steps;
                Ok(steps)
            }
            Err(e) => {
                state.broken = Some(e.with_causes());
                Err(e)
            }
        }
    }

    /// The work of [`crate::Table::settle`] (its doc gives the costs and errors).
    pub(crate) fn settle(&self) -> Result<()> {
        self.with_settled(|_| ())
    }

    /// The work of [`crate::Table::complete_merges`] (its doc gives the costs and errors).
    pub(crate) fn complete_merges(&self) -> Result<u64> {
        self.inner.session.check_writable("completing merges")?;
        let mut state = self.lock_write()?;
        let settled = self.settle_flush(&mut state)?;
        match state.levels.complete_merges() {
            Ok(steps) => {
                state.merge_steps_total += steps;
                Ok(settled + steps)
            }
            Err(e) => {
                state.broken = Some(e.with_causes());
                Err(e)
            }
        }
    }

    /// Runs `f` on the table's state with no flush in progress (settling one first, under the
    /// write lock): for operations that hand the structure elsewhere.
    pub(super) fn with_settled<T>(&self, f: impl FnOnce(&TableState) -> T) -> Result<T> {
        let state = self.read()?;
        if state.flushing.is_none() {
            return Ok(f(&state));
        }
        drop(state);
        let mut state = self.lock_write()?;
        self.settle_flush(&mut state)?;
        Ok(f(&state))
    }
}

/// Once a table's union has finished, its run becomes the table's new last level (and deletes
/// may be dropped again by last-level merges).
pub(super) fn migrate_finished_union(state: &mut TableState, write_buffer_entries: usize) {
    let Some(done) = state.union.as_ref().and_then(|u| u.finished()) else {
        return;
    };
    state.union = None;
    if let Some(run) = done {
        state
            .levels
            .push_last_level(run, write_buffer_entries as u64);
    }
}

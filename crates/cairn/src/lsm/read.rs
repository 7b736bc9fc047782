//! A table's reads: batched lookups (the write buffer first, then the runs and a union below
//! them), blobs, frozen views for unions and streams, and cursors over ranges.

use std::ops::Bound;

use super::{check_key, LookupPlan, Lsm, TableState};
use crate::config::Resolve;
use crate::cursor::{Cursor, KeyRange, StampedEntries};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::lookup::{lookup_runs, results, BlobRef, BlobSource, LookupResult, Partial};
use crate::union::TableView;
use crate::write_buffer::MemBlob;

impl Lsm {
    /// The work of [`crate::Table::lookups`] (its doc gives the costs and errors).
    pub(crate) fn lookups<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<LookupResult>> {
        for key in keys {
            check_key(key.as_ref())?;
        }
        crate::observe::lookups(keys.len());
        let plan = {
            let state = self.read()?;
            Self::plan_lookups(&state, keys, &self.inner.config.resolve)
        };
        self.finish_lookups(keys, plan)
    }

    /// The write buffer's entries for `keys` and the runs to consult: O(keys · log B + runs).
    /// A key's entry in the write buffer combines with an older one in the buffer being
    /// flushed, as entries of runs do (`resolve`).
    pub(super) fn plan_lookups<K: AsRef<[u8]>>(
        state: &TableState,
        keys: &[K],
        resolve: &Resolve,
    ) -> LookupPlan {
        let frozen = state.flushing.as_ref().map(|f| &f.buffer);
        let partial: Vec<Partial> = keys
            .iter()
            .map(|k| {
                let newest = state.write_buffer.get(k.as_ref()).map(to_partial);
                match (newest, frozen) {
                    // A final entry, or nothing older in memory: as it is.
                    (Some(e), _) if e.is_final() => Some(e),
                    (newest, None) => newest,
                    (None, Some(frozen)) => frozen.get(k.as_ref()).map(to_partial),
                    (Some(upsert), Some(frozen)) => match frozen.get(k.as_ref()) {
                        None => Some(upsert),
                        Some(older) => {
                            Some(upsert.combine_older(older.op(), older.value(), resolve))
                        }
                    },
                }
            })
            .collect();
        let mut runs = Vec::new();
        state.levels.runs_newest_first(&mut runs);
        LookupPlan {
            partial,
            runs,
            epoch: state.epoch,
            union: state.union.clone(),
        }
    }

    /// The lookups' I/O, without any lock.
    pub(super) fn finish_lookups<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        plan: LookupPlan,
    ) -> Result<Vec<LookupResult>> {
        let session = &self.inner.session;
        let resolve = &self.inner.config.resolve;
        let mut partial = lookup_runs(
            session.io(),
            session.salt(),
            keys,
            plan.partial,
            &plan.runs,
            resolve,
        )?;
        if let Some(union) = plan.union {
            partial =
                union.complete_lookups(session.io(), session.salt(), keys, partial, resolve)?;
        }
        Ok(results(partial, self.inner.id, plan.epoch))
    }

    /// The work of [`crate::Table::retrieve_blob`] (its doc gives the costs and errors).
    pub(crate) fn retrieve_blob(&self, blob: &BlobRef) -> Result<Vec<u8>> {
        let state = self.read()?;
        if blob.table_id != self.inner.id || blob.epoch != state.epoch {
            return Err(Error::BlobRefInvalid);
        }
        blob.read()
    }

    /// The work of [`crate::Table::blob_ref_is_valid`] (its doc gives the costs and errors).
    pub(crate) fn blob_ref_is_valid(&self, blob: &BlobRef) -> Result<bool> {
        let state = self.read()?;
        Ok(blob.table_id == self.inner.id && blob.epoch == state.epoch)
    }

    /// The table's entries from the first key `>= from` (or the first key) up to `end`, as a
    /// stable view. Cost: O(1) memory for the write buffer (a persistent map, shared).
    fn merged_entries(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Result<StampedEntries> {
        let from = match &start {
            Bound::Included(k) | Bound::Excluded(k) => Some(&k[..]),
            Bound::Unbounded => None,
        };
        if let Some(key) = from {
            check_key(key)?;
        }
        let view = self.view()?;
        let entries = view.stream(from, &self.inner.config.resolve)?;
        let epoch = view.epoch;
        let restart = Box::new(crate::union::ViewRestart {
            view,
            resolve: self.inner.config.resolve.clone(),
        });
        Ok(StampedEntries::new(
            entries,
            self.inner.id,
            epoch,
            (start, end),
            restart,
        ))
    }

    /// A frozen view of the table (for a union or a stream): an O(1) clone of the write buffer
    /// and `Arc`s of the runs; no copy, no disk I/O.
    ///
    /// A write-buffer flush in progress is finished first (at most `B` entries written).
    pub(super) fn view(&self) -> Result<TableView> {
        self.with_settled(|state| {
            let mut runs = Vec::new();
            state.levels.runs_newest_first(&mut runs);
            TableView {
                buffer: state.write_buffer.clone(),
                runs,
                union: state.union.clone(),
                epoch: state.epoch,
            }
        })
    }

    /// A cursor over the whole table (see [`crate::Table::cursor`]).
    pub(crate) fn cursor(&self) -> Result<Cursor> {
        self.range(..)
    }

    /// The work of [`crate::Table::range`] (its doc gives the costs and errors).
    pub(crate) fn range(&self, range: impl KeyRange) -> Result<Cursor> {
        if let Bound::Included(k) | Bound::Excluded(k) = range.end_key() {
            check_key(k)?;
        }
        let start = range.start_key().map(<[u8]>::to_vec);
        let end = range.end_key().map(<[u8]>::to_vec);
        // An excluded start key is skipped by the stream itself (also after a seek to it).
        let entries = self.merged_entries(start, end)?;
        let cursor = Cursor::new(entries, self.inner.session.clone());
        self.inner.session.register_cursor(cursor.member())?;
        Ok(cursor)
    }
}

/// A write buffer's entry as a lookup's partial result.
fn to_partial(entry: Entry<MemBlob>) -> Entry<BlobSource> {
    match entry {
        Entry::Insert(v, blob) => Entry::Insert(v, blob.map(BlobSource::Memory)),
        Entry::Upsert(v) => Entry::Upsert(v),
        Entry::Delete => Entry::Delete,
    }
}

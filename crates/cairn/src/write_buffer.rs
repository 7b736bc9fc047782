//! The write buffer (level 0): the newest updates of a table, in memory, sorted by key.
//!
//! Owns: [`WriteBuffer`]. An update replaces (insert, delete) or combines with (upsert) the entry
//! already buffered for its key, so the buffer holds at most one entry per key. Blobs are held in
//! memory until the buffer is written out as a run. May call: `entry`. Must never touch: files (the run writer turns
//! the buffer into a run) or the levels.
//!
//! Bounds: at most `write_buffer_entries` keys (the table flushes when it is reached); an update is
//! O(log B) comparisons and one allocation for a new key. The map is persistent (`imbl::OrdMap`,
//! a B-tree whose nodes are shared between clones), so [`Clone`] is O(1): a duplicate table or a
//! snapshot shares the buffer, and the first update after a clone copies only the O(log B) nodes
//! on its path.

use std::sync::Arc;

use imbl::OrdMap;

use crate::config::Resolve;
use crate::entry::Entry;

/// A blob held in memory by the write buffer.
pub(crate) type MemBlob = Arc<[u8]>;

/// The in-memory level 0 of a table.
#[derive(Debug, Default, Clone)]
pub(crate) struct WriteBuffer {
    entries: OrdMap<Vec<u8>, Entry<MemBlob>>,
}

impl WriteBuffer {
    /// Number of distinct keys buffered.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Applies one update: inserts and deletes replace the buffered entry, upserts combine with it.
    ///
    /// Cost: one map traversal for a new key (the common case), two when an upsert meets a
    /// buffered entry.
    pub(crate) fn apply(&mut self, key: &[u8], entry: Entry<MemBlob>, resolve: &Resolve) {
        let is_upsert = matches!(entry, Entry::Upsert(_));
        let Some(older) = self.entries.insert(key.to_vec(), entry) else {
            return;
        };
        if is_upsert {
            if let Some(slot) = self.entries.get_mut::<[u8]>(key) {
                let newer = std::mem::replace(slot, Entry::Delete);
                *slot = newer.combine_older(older.op(), older.value(), resolve);
            }
        }
    }

    /// The buffered entry for `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Entry<MemBlob>> {
        self.entries.get::<[u8]>(key)
    }

    /// Iterates the entries in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Entry<MemBlob>)> {
        self.entries.iter()
    }

    /// Copies up to `n` entries in key order, starting at `from`. Cost: O(log B + n).
    pub(crate) fn chunk(
        &self,
        from: std::ops::Bound<&[u8]>,
        n: usize,
    ) -> impl Iterator<Item = (Vec<u8>, Entry<MemBlob>)> + '_ {
        self.entries
            .range::<_, [u8]>((from, std::ops::Bound::Unbounded))
            .take(n)
            .map(|(k, e)| (k.clone(), e.clone()))
    }

    /// Whether the buffer holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes every entry.
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upserts_combine_in_the_buffer() {
        let mut wb = WriteBuffer::default();
        let add = Resolve::AddU64Le;
        wb.apply(b"k", Entry::Upsert(1u64.to_le_bytes().to_vec()), &add);
        wb.apply(b"k", Entry::Upsert(2u64.to_le_bytes().to_vec()), &add);
        assert_eq!(
            wb.get(b"k"),
            Some(&Entry::Upsert(3u64.to_le_bytes().to_vec()))
        );
        wb.apply(b"k", Entry::Delete, &add);
        wb.apply(b"k", Entry::Upsert(4u64.to_le_bytes().to_vec()), &add);
        assert_eq!(
            wb.get(b"k"),
            Some(&Entry::Insert(4u64.to_le_bytes().to_vec(), None))
        );
        assert_eq!(wb.len(), 1);
    }
}

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
//!
//! Keys are held as [`BufKey`]s, which carry their first 8 bytes as an integer: an insert's
//! comparisons (about log2 B of them) are then integer comparisons for keys that differ in their
//! first 8 bytes (hashed keys, say), and a byte comparison only past a shared prefix.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::sync::Arc;

use imbl::OrdMap;

use crate::config::Resolve;
use crate::entry::Entry;

/// A blob held in memory by the write buffer.
pub(crate) type MemBlob = Arc<[u8]>;

/// A buffered key: its bytes, and their first 8 (zero-padded) as a big-endian integer.
///
/// Ordered exactly as its bytes are (lexicographically): two keys whose prefixes differ are
/// ordered by them (the first differing byte lies within the first 8, and a shorter key's
/// padding zero is below any byte the longer one has there only if the shorter is a prefix of
/// it, or ties), and keys with equal prefixes are compared byte by byte. So `Borrow<[u8]>`
/// is consistent with `Ord`, as the map requires of lookups by byte slice.
#[derive(Clone, Debug)]
pub(crate) struct BufKey {
    prefix: u64,
    bytes: Vec<u8>,
}

impl BufKey {
    fn new(key: &[u8]) -> BufKey {
        let mut head = [0u8; 8];
        let n = key.len().min(8);
        head[..n].copy_from_slice(&key[..n]);
        BufKey {
            prefix: u64::from_be_bytes(head),
            bytes: key.to_vec(),
        }
    }

    /// The key's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl PartialEq for BufKey {
    fn eq(&self, other: &Self) -> bool {
        self.prefix == other.prefix && self.bytes == other.bytes
    }
}

impl Eq for BufKey {}

impl PartialOrd for BufKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BufKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.bytes.cmp(&other.bytes))
    }
}

impl Borrow<[u8]> for BufKey {
    fn borrow(&self) -> &[u8] {
        &self.bytes
    }
}

/// The in-memory level 0 of a table.
#[derive(Debug, Default, Clone)]
pub(crate) struct WriteBuffer {
    entries: OrdMap<BufKey, Entry<MemBlob>>,
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
        let Some(older) = self.entries.insert(BufKey::new(key), entry) else {
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
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry<MemBlob>)> {
        self.entries.iter().map(|(k, e)| (k.bytes(), e))
    }

    /// The entries in key order from `from` on, borrowed. Cost: O(log B) to start, O(1)
    /// amortised per entry.
    pub(crate) fn iter_from(
        &self,
        from: std::ops::Bound<&[u8]>,
    ) -> impl Iterator<Item = (&[u8], &Entry<MemBlob>)> {
        self.entries
            .range::<_, [u8]>((from, std::ops::Bound::Unbounded))
            .map(|(k, e)| (k.bytes(), e))
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
            .map(|(k, e)| (k.bytes.clone(), e.clone()))
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
    use proptest::prelude::*;

    proptest! {
        /// `BufKey` orders keys exactly as their bytes, short keys and shared prefixes included.
        #[test]
        fn buf_keys_order_as_bytes(
            a in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..12),
            b in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..12),
        ) {
            let (ka, kb) = (BufKey::new(&a), BufKey::new(&b));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
            let mut b2 = a.clone();
            b2.extend_from_slice(&b);
            prop_assert_eq!(ka.cmp(&BufKey::new(&b2)), a.cmp(&b2));
        }
    }

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

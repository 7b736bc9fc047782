//! The write buffer (level 0): the newest updates of a table, in memory, sorted by key.
//!
//! Owns: [`WriteBuffer`] and its element [`BufEntry`]. An update replaces (insert, delete) or
//! combines with (upsert) the entry already buffered for its key, so the buffer holds at most one
//! entry per key. Blobs are held in memory until the buffer is written out as a run. May call:
//! `entry`, `page` (operation codes). Must never touch: files (the run writer turns the buffer
//! into a run) or the levels.
//!
//! Bounds: at most `write_buffer_entries` keys (the table flushes when it is reached); an update is
//! O(log B) comparisons and one allocation. The set is persistent (`imbl::OrdSet`, a B-tree whose
//! nodes are shared between clones), so [`Clone`] is O(1): a duplicate table or a snapshot
//! shares the buffer, and the first update after a clone copies only the O(log B) nodes on its
//! path.
//!
//! Memory: an entry is one 48-byte slot in a tree node plus one allocation holding its key and
//! value together. (Key and value apart, as a map from key to entry, took a 72-byte slot and two
//! allocations: about 50 bytes more per entry, 1 MB per 20,000-entry buffer of the UTxO
//! benchmark's 34-byte keys and 60-byte values.) An entry carries its key's first 8 bytes as an
//! integer: an insert's comparisons (about log2 B of them) are then integer comparisons for keys
//! that differ in their first 8 bytes (hashed keys, say), and a byte comparison only past a
//! shared prefix.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::sync::Arc;

use imbl::OrdSet;

use crate::config::Resolve;
use crate::entry::Entry;
use crate::page::Op;

/// A blob held in memory by the write buffer.
pub(crate) type MemBlob = Arc<[u8]>;

/// One buffered entry: the key and the value in one allocation, the operation and the blob.
///
/// Ordered exactly as its key's bytes are (lexicographically), by the first 8 (zero-padded) as a
/// big-endian integer and then byte by byte: two keys whose prefixes differ are ordered by them
/// (the first differing byte lies within the first 8, and a shorter key's padding zero is below
/// any byte the longer one has there only if the shorter is a prefix of it, or ties), and keys
/// with equal prefixes are compared byte by byte. So `Borrow<[u8]>` (the key) is consistent with
/// `Ord`, as the set requires of lookups by key.
#[derive(Clone, Debug)]
pub(crate) struct BufEntry {
    prefix: u64,
    /// The key's bytes, then the value's.
    bytes: Box<[u8]>,
    key_len: u32,
    op: Op,
    blob: Option<MemBlob>,
}

impl BufEntry {
    /// The entry for `key`: `op` with `value` (ignored for a delete) and, for an insert,
    /// `blob`. One allocation. Keys are at most `u32::MAX` bytes (the table refuses longer
    /// ones).
    fn new(key: &[u8], op: Op, value: &[u8], blob: Option<MemBlob>) -> BufEntry {
        let mut head = [0u8; 8];
        let n = key.len().min(8);
        head[..n].copy_from_slice(&key[..n]);
        let (value, blob) = match op {
            Op::Insert => (value, blob),
            Op::Upsert => (value, None),
            Op::Delete => (&[][..], None),
        };
        let mut bytes = Vec::with_capacity(key.len() + value.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
        BufEntry {
            prefix: u64::from_be_bytes(head),
            bytes: bytes.into_boxed_slice(),
            key_len: u32::try_from(key.len()).unwrap_or(u32::MAX),
            op,
            blob,
        }
    }

    /// The key's bytes.
    pub(crate) fn key(&self) -> &[u8] {
        self.bytes.get(..self.key_len as usize).unwrap_or_default()
    }

    /// The value's bytes (empty for a delete).
    pub(crate) fn value(&self) -> &[u8] {
        self.bytes.get(self.key_len as usize..).unwrap_or_default()
    }

    /// The operation.
    pub(crate) fn op(&self) -> Op {
        self.op
    }

    /// The blob of an insert that has one.
    pub(crate) fn blob(&self) -> Option<&MemBlob> {
        self.blob.as_ref()
    }

    /// The entry in its owned form (copies the value).
    pub(crate) fn to_entry(&self) -> Entry<MemBlob> {
        match self.op {
            Op::Insert => Entry::Insert(self.value().to_vec(), self.blob.clone()),
            Op::Upsert => Entry::Upsert(self.value().to_vec()),
            Op::Delete => Entry::Delete,
        }
    }
}

impl PartialEq for BufEntry {
    fn eq(&self, other: &Self) -> bool {
        self.prefix == other.prefix && self.key() == other.key()
    }
}

impl Eq for BufEntry {}

impl PartialOrd for BufEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for BufEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.key().cmp(other.key()))
    }
}

impl Borrow<[u8]> for BufEntry {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

/// The in-memory level 0 of a table.
#[derive(Debug, Default, Clone)]
pub(crate) struct WriteBuffer {
    entries: OrdSet<BufEntry>,
}

impl WriteBuffer {
    /// Number of distinct keys buffered.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Applies one update, `op` with `value` (empty for a delete) and, for an insert, `blob`:
    /// inserts and deletes replace the buffered entry, upserts combine with it.
    ///
    /// Cost: one set traversal and one allocation (key and value copied once) for an insert or
    /// delete; for an upsert, one more traversal (the buffered entry is looked up first) and
    /// the resolve function's value when there is an older entry.
    pub(crate) fn apply(
        &mut self,
        key: &[u8],
        op: Op,
        value: &[u8],
        blob: Option<MemBlob>,
        resolve: &Resolve,
    ) {
        let older = match op {
            Op::Upsert => self.entries.get::<[u8]>(key),
            Op::Insert | Op::Delete => None,
        };
        let entry = match older {
            Some(older) => {
                let combined = Entry::<MemBlob>::Upsert(value.to_vec()).combine_older(
                    older.op(),
                    older.value(),
                    resolve,
                );
                let (op, blob) = (combined.op(), None);
                BufEntry::new(key, op, combined.value(), blob)
            }
            None => BufEntry::new(key, op, value, blob),
        };
        self.entries.insert(entry);
    }

    /// The buffered entry for `key`, copied out.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Entry<MemBlob>> {
        self.entries.get::<[u8]>(key).map(BufEntry::to_entry)
    }

    /// Iterates the entries in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &BufEntry> {
        self.entries.iter()
    }

    /// The entries in key order from `from` on, borrowed. Cost: O(log B) to start, O(1)
    /// amortised per entry.
    pub(crate) fn iter_from(
        &self,
        from: std::ops::Bound<&[u8]>,
    ) -> impl Iterator<Item = &BufEntry> {
        self.entries
            .range::<_, [u8]>((from, std::ops::Bound::Unbounded))
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
            .map(|e| (e.key().to_vec(), e.to_entry()))
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
        /// `BufEntry` orders keys exactly as their bytes, short keys and shared prefixes included.
        #[test]
        fn buf_keys_order_as_bytes(
            a in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..12),
            b in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..12),
        ) {
            let k = |key: &[u8]| BufEntry::new(key, Op::Insert, b"v", None);
            let (ka, kb) = (k(&a), k(&b));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka == kb, a == b);
            let mut b2 = a.clone();
            b2.extend_from_slice(&b);
            prop_assert_eq!(ka.cmp(&k(&b2)), a.cmp(&b2));
            prop_assert_eq!(ka.key(), &a[..]);
            prop_assert_eq!(ka.value(), b"v");
        }
    }

    #[test]
    fn upserts_combine_in_the_buffer() {
        let mut wb = WriteBuffer::default();
        let add = Resolve::AddU64Le;
        wb.apply(b"k", Op::Upsert, &1u64.to_le_bytes(), None, &add);
        wb.apply(b"k", Op::Upsert, &2u64.to_le_bytes(), None, &add);
        assert_eq!(
            wb.get(b"k"),
            Some(Entry::Upsert(3u64.to_le_bytes().to_vec()))
        );
        wb.apply(b"k", Op::Delete, &[], None, &add);
        wb.apply(b"k", Op::Upsert, &4u64.to_le_bytes(), None, &add);
        assert_eq!(
            wb.get(b"k"),
            Some(Entry::Insert(4u64.to_le_bytes().to_vec(), None))
        );
        assert_eq!(wb.len(), 1);
    }
}

//! The write buffer (level 0): the newest updates of a table, in memory, sorted by key.
//!
//! Owns: [`WriteBuffer`] and its element [`BufEntry`]. An update replaces (insert, delete) or
//! combines with (upsert) the entry already buffered for its key, so the buffer holds at most one
//! entry per key. Blobs are held in memory until the buffer is written out as a run. May call:
//! `entry`, `page` (operation codes). Must never touch: files (the run writer turns the buffer
//! into a run) or the levels.
//!
//! Bounds: at most `write_buffer_entries` keys (the table flushes when it is reached); an update is
//! O(log B) comparisons and one allocation. The sets are persistent (`imbl::OrdSet`, B-trees
//! whose nodes are shared between clones), so [`Clone`] is O(1): a duplicate table or a
//! snapshot shares the buffer, and updates made while a clone lives go into a second layer
//! rather than copying the shared nodes (see [`WriteBuffer`]).
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
///
/// Two layers, so that a clone held while the table is updated (a pipelined reader's duplicate,
/// say) costs the updates nothing: `base`, shared by the clones taken since its last change,
/// and `recent`, the entries applied while `base` was shared, which override `base`'s. With
/// one layer, every update after a clone copied the nodes on its path, and the updates of a
/// batch with random keys touched nearly every leaf: at 100M entries in the UTxO benchmark's
/// pipelined mode (a duplicate per batch, 512 updates each into a 20,000-entry buffer), each
/// batch copied most of the buffer (an allocation and a copy per entry) and the reader freed
/// it when it dropped its duplicate (`docs/benchmarks/notes/2026-11-27-write-buffer-layers.md`). Now an update goes into `base` in
/// place when no clone shares it (folding `recent` in first) and into `recent` otherwise; a
/// duplicate folds ([`WriteBuffer::fold`]) before it clones, so a reader that drops its clone
/// before the next one is taken leaves the updates in between a `recent` of their own.
///
/// Bounds: as with one layer, a lookup or an update is O(log B) (one or two set traversals);
/// a fold is O(R log B) for the R entries of `recent`, done only where `base` is not shared
/// (no copy); iteration merges the two layers in O(1) amortised per entry.
#[derive(Debug, Default, Clone)]
pub(crate) struct WriteBuffer {
    /// The older layer; changed in place only when no clone shares it.
    base: Arc<OrdSet<BufEntry>>,
    /// Entries applied while `base` was shared: newer than `base`'s for the same key.
    recent: OrdSet<BufEntry>,
    /// Distinct keys across both layers.
    len: usize,
}

impl WriteBuffer {
    /// Number of distinct keys buffered.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Applies one update, `op` with `value` (empty for a delete) and, for an insert, `blob`:
    /// inserts and deletes replace the buffered entry, upserts combine with it.
    ///
    /// Cost: one set traversal and one allocation (key and value copied once) for an insert or
    /// delete, plus one traversal of `base` for a key new to `recent` while `base` is shared;
    /// for an upsert, one more lookup (the buffered entry) and the resolve function's value
    /// when there is an older entry; and, the first time `base` is found unshared again, the
    /// fold of `recent` into it.
    pub(crate) fn apply(
        &mut self,
        key: &[u8],
        op: Op,
        value: &[u8],
        blob: Option<MemBlob>,
        resolve: &Resolve,
    ) {
        let older = match op {
            Op::Upsert => self.entry(key),
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
        self.fold();
        match Arc::get_mut(&mut self.base) {
            Some(base) => {
                if base.insert(entry).is_none() {
                    self.len += 1;
                }
            }
            None => {
                if self.recent.insert(entry).is_none() && !self.base.contains::<[u8]>(key) {
                    self.len += 1;
                }
            }
        }
    }

    /// Moves `recent` into `base` if no clone shares `base` (in place: nothing copied but the
    /// entries moved). O(R log B). Called before every update, and before a clone that will be
    /// held while this buffer is updated further (a duplicate table's), so that the updates
    /// that follow start a `recent` of their own instead of adding to the clone's.
    pub(crate) fn fold(&mut self) {
        if self.recent.is_empty() {
            return;
        }
        if let Some(base) = Arc::get_mut(&mut self.base) {
            for entry in std::mem::take(&mut self.recent) {
                base.insert(entry);
            }
        }
    }

    /// The buffered entry for `key`, in whichever layer holds its newest.
    fn entry(&self, key: &[u8]) -> Option<&BufEntry> {
        self.recent
            .get::<[u8]>(key)
            .or_else(|| self.base.get::<[u8]>(key))
    }

    /// The buffered entry for `key`, copied out.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Entry<MemBlob>> {
        self.entry(key).map(BufEntry::to_entry)
    }

    /// Iterates the entries in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &BufEntry> {
        Layers::new(self.recent.iter(), self.base.iter())
    }

    /// The entries in key order from `from` on, borrowed. Cost: O(log B) to start, O(1)
    /// amortised per entry.
    pub(crate) fn iter_from(
        &self,
        from: std::ops::Bound<&[u8]>,
    ) -> impl Iterator<Item = &BufEntry> {
        let range = (from, std::ops::Bound::Unbounded);
        Layers::new(
            self.recent.range::<_, [u8]>(range),
            self.base.range::<_, [u8]>(range),
        )
    }

    /// The greatest key buffered (a delete included) below `upper` (`None`: no bound).
    /// Cost: O(log B).
    pub(crate) fn key_before(&self, upper: Option<&[u8]>) -> Option<Vec<u8>> {
        let range = (
            std::ops::Bound::Unbounded,
            upper.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
        );
        let recent = self.recent.range::<_, [u8]>(range).next_back();
        let base = self.base.range::<_, [u8]>(range).next_back();
        recent
            .into_iter()
            .chain(base)
            .map(|e| e.key())
            .max()
            .map(<[u8]>::to_vec)
    }

    /// Copies up to `n` entries in key order, starting at `from`. Cost: O(log B + n).
    pub(crate) fn chunk(
        &self,
        from: std::ops::Bound<&[u8]>,
        n: usize,
    ) -> impl Iterator<Item = (Vec<u8>, Entry<MemBlob>)> + '_ {
        self.iter_from(from)
            .take(n)
            .map(|e| (e.key().to_vec(), e.to_entry()))
    }

    /// Whether the buffer holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every entry.
    pub(crate) fn clear(&mut self) {
        *self = WriteBuffer::default();
    }
}

/// The two layers' entries in key order, `recent`'s entry where both hold a key.
struct Layers<'a, R: Iterator<Item = &'a BufEntry>, B: Iterator<Item = &'a BufEntry>> {
    recent: std::iter::Peekable<R>,
    base: std::iter::Peekable<B>,
}

impl<'a, R: Iterator<Item = &'a BufEntry>, B: Iterator<Item = &'a BufEntry>> Layers<'a, R, B> {
    fn new(recent: R, base: B) -> Self {
        Layers {
            recent: recent.peekable(),
            base: base.peekable(),
        }
    }
}

impl<'a, R: Iterator<Item = &'a BufEntry>, B: Iterator<Item = &'a BufEntry>> Iterator
    for Layers<'a, R, B>
{
    type Item = &'a BufEntry;

    fn next(&mut self) -> Option<&'a BufEntry> {
        let order = match (self.recent.peek(), self.base.peek()) {
            (Some(r), Some(b)) => r.cmp(b),
            (Some(_), None) => Ordering::Less,
            (None, _) => return self.base.next(),
        };
        match order {
            Ordering::Less => self.recent.next(),
            Ordering::Greater => self.base.next(),
            Ordering::Equal => {
                self.base.next();
                self.recent.next()
            }
        }
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

    /// A map from key to the entry a buffer should hold.
    type Model = std::collections::BTreeMap<Vec<u8>, Entry<MemBlob>>;

    /// What the buffer should hold: the newest entry per key, upserts combined.
    fn model_apply(model: &mut Model, key: &[u8], op: Op, value: &[u8]) {
        let add = Resolve::AddU64Le;
        let new = match (op, model.get(key)) {
            (Op::Upsert, Some(older)) => {
                let (older_op, older_value) = match older {
                    Entry::Insert(v, _) => (Op::Insert, v.clone()),
                    Entry::Upsert(v) => (Op::Upsert, v.clone()),
                    Entry::Delete => (Op::Delete, Vec::new()),
                };
                Entry::<MemBlob>::Upsert(value.to_vec()).combine_older(older_op, &older_value, &add)
            }
            (Op::Insert, _) => Entry::Insert(value.to_vec(), None),
            (Op::Upsert, None) => Entry::Upsert(value.to_vec()),
            (Op::Delete, _) => Entry::Delete,
        };
        model.insert(key.to_vec(), new);
    }

    proptest! {
        /// With clones taken, held and dropped at any point (and folds before some), the buffer
        /// and every clone hold exactly what a map would have held at the clone's time: the
        /// same entries, the same count, the same order from any starting key.
        #[test]
        fn layers_match_a_map_across_clones(
            steps in prop::collection::vec((0u8..4, 0u8..24, 0u64..1000), 1..300),
        ) {
            let add = Resolve::AddU64Le;
            let mut wb = WriteBuffer::default();
            let mut model = std::collections::BTreeMap::new();
            let mut clones: Vec<(WriteBuffer, Model)> = Vec::new();
            let check = |wb: &WriteBuffer, model: &Model| {
                let got: Vec<(Vec<u8>, Entry<MemBlob>)> =
                    wb.iter().map(|e| (e.key().to_vec(), e.to_entry())).collect();
                let want: Vec<(Vec<u8>, Entry<MemBlob>)> =
                    model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(got, want);
                assert_eq!(wb.len(), model.len());
                assert_eq!(wb.is_empty(), model.is_empty());
                for k in 0u8..24 {
                    let key = [b'k', k];
                    assert_eq!(wb.get(&key), model.get(&key[..]).cloned());
                    let from: Vec<Vec<u8>> =
                        wb.chunk(std::ops::Bound::Excluded(&key[..]), 5).map(|(k, _)| k).collect();
                    let want_from: Vec<Vec<u8>> = model
                        .range::<[u8], _>((std::ops::Bound::Excluded(&key[..]), std::ops::Bound::Unbounded))
                        .take(5)
                        .map(|(k, _)| k.clone())
                        .collect();
                    assert_eq!(from, want_from);
                }
            };
            for (what, k, v) in steps {
                let key = [b'k', k];
                match (what, v % 7) {
                    (0, 0) => {
                        wb.fold();
                        clones.push((wb.clone(), model.clone()));
                    }
                    (0, 1) if !clones.is_empty() => {
                        let (clone, at) = clones.remove(v as usize % clones.len());
                        check(&clone, &at);
                    }
                    (0, 2) => {
                        wb.clear();
                        model.clear();
                    }
                    _ => {
                        let op = [Op::Insert, Op::Upsert, Op::Delete, Op::Upsert][what as usize];
                        let value = v.to_le_bytes();
                        let value: &[u8] = if op == Op::Delete { &[] } else { &value };
                        wb.apply(&key, op, value, None, &add);
                        model_apply(&mut model, &key, op, value);
                    }
                }
            }
            check(&wb, &model);
            for (clone, at) in &clones {
                check(clone, at);
            }
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

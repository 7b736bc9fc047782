//! Entries and how a newer entry for a key combines with an older one.
//!
//! Owns: [`Entry`], the owned form of one key's operation, and [`Entry::combine_older`], the single
//! place where insert/upsert/delete semantics are defined. Write buffer, merges and lookups all
//! resolve entries through it. May call: `page` (operation codes). Must never touch: files or I/O.

use crate::config::Resolve;
use crate::page::Op;

/// One key's operation, owned. `B` is how a blob is held (in memory in the write buffer, a
/// reference into a run's blob file elsewhere).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entry<B> {
    /// The key maps to this value (and maybe a blob).
    Insert(Vec<u8>, Option<B>),
    /// Combine this value with whatever older value the key has.
    Upsert(Vec<u8>),
    /// The key is absent.
    Delete,
}

impl<B> Entry<B> {
    /// True when older entries for the key cannot change the outcome.
    pub(crate) fn is_final(&self) -> bool {
        !matches!(self, Entry::Upsert(_))
    }

    /// Combines this (newer) entry with an older entry given by its op and value. The older
    /// entry's blob never survives: an upsert over an insert drops the blob.
    pub(crate) fn combine_older(
        self,
        older_op: Op,
        older_value: &[u8],
        resolve: &Resolve,
    ) -> Entry<B> {
        match self {
            Entry::Upsert(v) => match older_op {
                Op::Insert => Entry::Insert(resolve.apply(&v, older_value), None),
                Op::Delete => Entry::Insert(v, None),
                Op::Upsert => Entry::Upsert(resolve.apply(&v, older_value)),
            },
            finished => finished,
        }
    }

    /// The entry as it must look on the last level, where nothing older exists: upserts become
    /// inserts, and deletes disappear (`None`).
    pub(crate) fn into_last_level(self) -> Option<Entry<B>> {
        match self {
            Entry::Upsert(v) => Some(Entry::Insert(v, None)),
            Entry::Delete => None,
            insert => Some(insert),
        }
    }

    /// The page operation code of this entry.
    pub(crate) fn op(&self) -> Op {
        match self {
            Entry::Insert(..) => Op::Insert,
            Entry::Upsert(_) => Op::Upsert,
            Entry::Delete => Op::Delete,
        }
    }

    /// The entry's value bytes (empty for a delete).
    pub(crate) fn value(&self) -> &[u8] {
        match self {
            Entry::Insert(v, _) | Entry::Upsert(v) => v,
            Entry::Delete => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type E = Entry<u8>;

    #[test]
    fn combine_semantics() {
        let add = Resolve::AddU64Le;
        let v = |n: u64| n.to_le_bytes().to_vec();
        assert_eq!(
            E::Upsert(v(2)).combine_older(Op::Insert, &v(3), &add),
            E::Insert(v(5), None)
        );
        assert_eq!(
            E::Upsert(v(2)).combine_older(Op::Upsert, &v(3), &add),
            E::Upsert(v(5))
        );
        assert_eq!(
            E::Upsert(v(2)).combine_older(Op::Delete, &[], &add),
            E::Insert(v(2), None)
        );
        assert_eq!(
            E::Insert(v(1), Some(9)).combine_older(Op::Insert, &v(3), &add),
            E::Insert(v(1), Some(9))
        );
        assert_eq!(E::Delete.combine_older(Op::Insert, &v(3), &add), E::Delete);
        assert_eq!(E::Delete.into_last_level(), None);
        assert_eq!(
            E::Upsert(v(1)).into_last_level(),
            Some(E::Insert(v(1), None))
        );
    }
}

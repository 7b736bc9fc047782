//! The durable history tree: the RFC 9162 tree over the ledger's versions, its nodes stored in
//! the ledger's `_history` table with each version (`docs/format/ledger.md`).
//!
//! Owns: [`History`] (the tree's size and its right edge in memory), appends (the nodes an
//! append completes, for the caller to write with the version), and proofs read from the
//! stored nodes. May call: `records` (node keys), `cairn_proof::history` (hashing, the proof
//! algorithms), the engine's table reads. Must never touch: the ledger's data tables, or write
//! anything itself (the ledger writes the nodes atomically with the version's record).
//!
//! Bounds: memory holds the right edge only (one hash per bit set in the size: at most 63).
//! An append hashes one node per subtree it completes (amortised one) and reads nothing. A
//! proof reads at most `2·⌈log₂ n⌉` nodes, in one batched lookup, and a digest of an older
//! size at most `⌈log₂ n⌉`.

use std::collections::HashMap;

use cairn::Table;
use cairn_proof::history::{
    node_hash, prove_consistency_from, prove_inclusion_from, root_from_nodes, EMPTY_ROOT,
};
use cairn_proof::{ConsistencyProof, Digest, Hash, InclusionProof};

use crate::error::{Error, Result};
use crate::records::{decode_hash, node_key};

/// A node of the tree: the root of the `2^level` leaves from `index · 2^level`.
pub(crate) type NodeId = (u32, u64);

/// The history tree as the ledger holds it: its size and the roots of the complete subtrees
/// it decomposes into (its right edge), largest first. Every other node is in `_history`.
#[derive(Clone, Debug, Default)]
pub(crate) struct History {
    size: u64,
    edge: Vec<(NodeId, Hash)>,
}

/// The complete subtrees a tree of `size` leaves decomposes into, largest first: one per bit
/// set in `size`.
fn edge_ids(size: u64) -> Vec<NodeId> {
    let mut ids = Vec::new();
    let mut start = 0u64;
    for level in (0..64u32).rev() {
        if size & (1u64 << level) != 0 {
            ids.push((level, start >> level));
            start += 1u64 << level;
        }
    }
    ids
}

impl History {
    /// The tree of `size` leaves whose nodes `_history` holds: reads its right edge (at most
    /// 63 nodes, one batched lookup).
    pub(crate) fn load(table: &Table, size: u64) -> Result<History> {
        let ids = edge_ids(size);
        let hashes = read_nodes(table, &ids)?;
        Ok(History {
            size,
            edge: ids.into_iter().zip(hashes).collect(),
        })
    }

    /// Leaves in the tree (the ledger's newest version).
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The tree's digest: its size and root, hashed from the right edge (at most 62 node
    /// hashes, no read).
    pub(crate) fn digest(&self) -> Digest {
        let mut root: Option<Hash> = None;
        for (_, hash) in self.edge.iter().rev() {
            root = Some(match root {
                None => *hash,
                Some(right) => node_hash(hash, &right),
            });
        }
        Digest {
            size: self.size,
            root: root.unwrap_or(EMPTY_ROOT),
        }
    }

    /// Appends the leaf whose hash is `leaf`; returns every node to store with it (the leaf
    /// itself, then each subtree it completes). Cost: one node hash per completed subtree.
    pub(crate) fn append(&mut self, leaf: Hash) -> Vec<(NodeId, Hash)> {
        let mut new = vec![((0, self.size), leaf)];
        self.edge.push(((0, self.size), leaf));
        while self.edge.len() >= 2 {
            let n = self.edge.len();
            let ((right_level, right_index), right) = self.edge[n - 1];
            let ((left_level, left_index), left) = self.edge[n - 2];
            if left_level != right_level {
                break;
            }
            debug_assert_eq!(left_index + 1, right_index);
            let node = ((left_level + 1, left_index / 2), node_hash(&left, &right));
            self.edge.truncate(n - 2);
            self.edge.push(node);
            new.push(node);
        }
        self.size += 1;
        new
    }

    /// The digest of the tree as it was at `size` leaves. Errors: a size beyond the tree.
    pub(crate) fn digest_at(&self, table: &Table, size: u64) -> Result<Digest> {
        let root = self.with_nodes(table, |node| root_from_nodes(self.size, size, node))?;
        Ok(Digest { size, root })
    }

    /// The inclusion proof of leaf `index` in the tree of `size` leaves.
    pub(crate) fn prove_inclusion(
        &self,
        table: &Table,
        index: u64,
        size: u64,
    ) -> Result<InclusionProof> {
        self.with_nodes(table, |node| {
            prove_inclusion_from(self.size, index, size, node)
        })
    }

    /// The consistency proof from the tree of `old_size` leaves to that of `new_size`.
    pub(crate) fn prove_consistency(
        &self,
        table: &Table,
        old_size: u64,
        new_size: u64,
    ) -> Result<ConsistencyProof> {
        self.with_nodes(table, |node| {
            prove_consistency_from(self.size, old_size, new_size, node)
        })
    }

    /// Runs `prove` twice: once to learn which nodes it reads (answered with zeros), then,
    /// after one batched lookup of those not on the right edge, with the real nodes.
    fn with_nodes<T>(
        &self,
        table: &Table,
        mut prove: impl FnMut(&mut dyn FnMut(u32, u64) -> Result<Hash>) -> Result<T>,
    ) -> Result<T> {
        let edge: HashMap<NodeId, Hash> = self.edge.iter().copied().collect();
        let mut wanted = Vec::new();
        prove(&mut |level, index| {
            if !edge.contains_key(&(level, index)) {
                wanted.push((level, index));
            }
            Ok([0; 32])
        })?;
        let read = read_nodes(table, &wanted)?;
        let nodes: HashMap<NodeId, Hash> = wanted.into_iter().zip(read).collect();
        prove(&mut |level, index| {
            edge.get(&(level, index))
                .or_else(|| nodes.get(&(level, index)))
                .copied()
                .ok_or_else(|| {
                    Error::corrupted(
                        format!("history node ({level}, {index})"),
                        "a proof asked for a node it did not name before",
                    )
                })
        })
    }
}

/// Reads stored nodes, in one batched lookup. A node missing is corruption: every node a
/// proof reads was written with the version that completed it.
fn read_nodes(table: &Table, ids: &[NodeId]) -> Result<Vec<Hash>> {
    let keys: Vec<[u8; 10]> = ids.iter().map(|&(l, i)| node_key(l, i)).collect();
    let found = table.lookups(&keys)?;
    ids.iter()
        .zip(found)
        .map(|(&(level, index), result)| {
            let what = format!("history node ({level}, {index})");
            match result.value() {
                Some(bytes) => decode_hash(&what, bytes),
                None => Err(Error::corrupted(what, "missing")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proof::history::{completed_by, leaf_hash};
    use cairn_proof::reference::MemHistory;

    #[test]
    fn appends_store_what_completed_by_names_and_the_edge_gives_the_digest() {
        let mut history = History::default();
        let mut reference = MemHistory::new();
        for i in 0..300u64 {
            let leaf = leaf_hash(&i.to_be_bytes());
            let stored = history.append(leaf);
            reference.append(leaf);
            let mut expected = vec![(0, i)];
            expected.extend(completed_by(i));
            let ids: Vec<NodeId> = stored.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, expected);
            assert_eq!(history.digest(), reference.digest());
            let edge: Vec<NodeId> = history.edge.iter().map(|(id, _)| *id).collect();
            assert_eq!(edge, edge_ids(i + 1));
        }
    }
}

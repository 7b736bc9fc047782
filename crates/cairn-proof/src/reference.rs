//! Reference structures in memory: the definitions made into data structures, for tests,
//! fuzzing and small sets (O(n) memory; nothing is paged or persisted).
//!
//! Owns: [`MemTrie`] (the state trie) and [`MemHistory`] (the history tree). The engine's paged
//! trie is checked against the first: same roots, proofs that verify the same way; the ledger's
//! durable history tree against the second: same digests, same proofs, byte for byte.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::error::HistoryProveError;
use crate::hash::{bit, Hash, HashKind, Leaf, ZERO};
use crate::history::{
    node_hash, prove_consistency_from, prove_inclusion_from, root_from_nodes, ConsistencyProof,
    Digest, InclusionProof, EMPTY_ROOT,
};
use crate::proof::{Proof, ProofNode, ProofWriter};
use crate::trie::{sorted_leaves, Root, RootBuilder};
use crate::update::{Change, Update};

/// A whole trie in memory, built from a set of entries.
#[derive(Clone, Debug)]
pub struct MemTrie {
    kind: HashKind,
    root: Node,
    leaves: usize,
}

#[derive(Clone, Debug)]
enum Node {
    Empty,
    Leaf(Leaf, Hash),
    Internal(Box<Node>, Box<Node>, Hash),
}

impl Node {
    fn hash(&self) -> Hash {
        match self {
            Node::Empty => ZERO,
            Node::Leaf(_, h) | Node::Internal(_, _, h) => *h,
        }
    }
}

impl MemTrie {
    /// The trie of `(key, value, blob)` entries; a later entry for a key replaces an earlier one.
    pub fn new<'a, I>(kind: HashKind, entries: I) -> MemTrie
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8], Option<&'a [u8]>)>,
    {
        let leaves = sorted_leaves(kind, entries);
        MemTrie::from_sorted_leaves(kind, &leaves)
    }

    /// The trie of leaves sorted by strictly increasing key path.
    ///
    /// # Panics
    /// If they are not.
    pub fn from_sorted_leaves(kind: HashKind, leaves: &[Leaf]) -> MemTrie {
        assert!(leaves.windows(2).all(|w| w[0].key_path < w[1].key_path));
        MemTrie {
            kind,
            root: build(kind, leaves, 0),
            leaves: leaves.len(),
        }
    }

    /// The state root.
    pub fn root(&self) -> Root {
        Root {
            kind: self.kind,
            hash: self.root.hash(),
        }
    }

    /// Number of leaves.
    pub fn len(&self) -> usize {
        self.leaves
    }

    /// Whether the trie is empty.
    pub fn is_empty(&self) -> bool {
        self.leaves == 0
    }

    /// A multiproof for `keys` (inclusion for those present, exclusion for the others).
    pub fn prove<K: AsRef<[u8]>>(&self, keys: &[K]) -> Proof {
        let mut paths: Vec<Hash> = keys
            .iter()
            .map(|k| self.kind.key_path(k.as_ref()))
            .collect();
        paths.sort_unstable();
        paths.dedup();
        self.prove_paths(&paths)
    }

    /// A multiproof for sorted, distinct key paths.
    pub fn prove_paths(&self, paths: &[Hash]) -> Proof {
        let mut w = ProofWriter::new(self.kind);
        prove(&self.root, 0, paths, &mut w);
        w.finish().expect("a trie's proof is one tree")
    }

    /// A multiproof for the keys of `updates` from which [`Proof::root_after`] can always
    /// compute the root after them: the keys' paths as [`MemTrie::prove`] opens them, and
    /// besides, for each deleted key, the sibling of every node on its path opened one level
    /// (a leaf as itself, an internal node with its two children by hash), so that a subtree
    /// the deletes empty never leaves an opaque sibling whose collapse cannot be told. Cost
    /// over [`MemTrie::prove`]: at most one node and one hash more per level of each deleted
    /// key's path.
    pub fn prove_updates(&self, updates: &[Update<'_>]) -> Proof {
        let path = |u: &Update<'_>| self.kind.key_path(u.key);
        let mut paths: Vec<Hash> = updates.iter().map(path).collect();
        paths.sort_unstable();
        paths.dedup();
        let mut deletes: Vec<Hash> = updates
            .iter()
            .filter(|u| u.change == Change::Delete)
            .map(path)
            .collect();
        deletes.sort_unstable();
        deletes.dedup();
        let mut w = ProofWriter::new(self.kind);
        prove_opening(&self.root, 0, &paths, &deletes, &mut w);
        w.finish().expect("a trie's proof is one tree")
    }

    /// A proof opening every node above depth `levels` and none below: what a verifier keeps
    /// as a [`crate::TopWitness`].
    pub fn top(&self, levels: u8) -> Proof {
        let mut w = ProofWriter::new(self.kind);
        top(&self.root, 0, levels as usize, &mut w);
        w.finish().expect("a trie's top is one tree")
    }
}

fn build(kind: HashKind, leaves: &[Leaf], depth: usize) -> Node {
    match leaves {
        [] => Node::Empty,
        [leaf] => Node::Leaf(*leaf, leaf.hash(kind)),
        _ => {
            let split = leaves.partition_point(|l| !bit(&l.key_path, depth));
            let left = build(kind, &leaves[..split], depth + 1);
            let right = build(kind, &leaves[split..], depth + 1);
            let h = kind.node(&left.hash(), &right.hash());
            Node::Internal(Box::new(left), Box::new(right), h)
        }
    }
}

fn prove(node: &Node, depth: usize, paths: &[Hash], w: &mut ProofWriter) {
    match node {
        Node::Empty => w.push(ProofNode::Empty),
        _ if paths.is_empty() => w.push(ProofNode::Hash(node.hash())),
        Node::Leaf(leaf, _) => w.push(ProofNode::Leaf(*leaf)),
        Node::Internal(left, right, _) => {
            w.push(ProofNode::Internal);
            let split = paths.partition_point(|p| !bit(p, depth));
            prove(left, depth + 1, &paths[..split], w);
            prove(right, depth + 1, &paths[split..], w);
        }
    }
}

/// [`prove`] for `paths`, opening one level of each sibling of a node on one of `deletes`
/// (sorted, distinct, a subset of `paths`).
fn prove_opening(node: &Node, depth: usize, paths: &[Hash], deletes: &[Hash], w: &mut ProofWriter) {
    match node {
        Node::Empty => w.push(ProofNode::Empty),
        _ if paths.is_empty() => w.push(ProofNode::Hash(node.hash())),
        Node::Leaf(leaf, _) => w.push(ProofNode::Leaf(*leaf)),
        Node::Internal(left, right, _) => {
            w.push(ProofNode::Internal);
            let split = paths.partition_point(|p| !bit(p, depth));
            let d = deletes.partition_point(|p| !bit(p, depth));
            let sides = [
                (left, &paths[..split], &deletes[..d], &deletes[d..]),
                (right, &paths[split..], &deletes[d..], &deletes[..d]),
            ];
            for (child, paths, deletes, across) in sides {
                if paths.is_empty() && !across.is_empty() {
                    open_one_level(child, w);
                } else {
                    prove_opening(child, depth + 1, paths, deletes, w);
                }
            }
        }
    }
}

/// A subtree as a leaf, an empty subtree, or an internal node whose children are given by hash.
fn open_one_level(node: &Node, w: &mut ProofWriter) {
    let by_hash = |n: &Node| match n {
        Node::Empty => ProofNode::Empty,
        _ => ProofNode::Hash(n.hash()),
    };
    match node {
        Node::Internal(left, right, _) => {
            w.push(ProofNode::Internal);
            w.push(by_hash(left));
            w.push(by_hash(right));
        }
        Node::Leaf(leaf, _) => w.push(ProofNode::Leaf(*leaf)),
        Node::Empty => w.push(ProofNode::Empty),
    }
}

fn top(node: &Node, depth: usize, levels: usize, w: &mut ProofWriter) {
    match node {
        Node::Empty => w.push(ProofNode::Empty),
        Node::Leaf(leaf, _) => w.push(ProofNode::Leaf(*leaf)),
        Node::Internal(_, _, h) if depth == levels => w.push(ProofNode::Hash(*h)),
        Node::Internal(left, right, _) => {
            w.push(ProofNode::Internal);
            top(left, depth + 1, levels, w);
            top(right, depth + 1, levels, w);
        }
    }
}

/// The root of sorted leaves through [`RootBuilder`], for comparing with [`MemTrie::root`].
///
/// # Panics
/// If the leaves are not sorted by strictly increasing key path (use [`RootBuilder`] directly
/// for input you do not control).
pub fn streamed_root(kind: HashKind, leaves: &[Leaf]) -> Hash {
    let mut b = RootBuilder::new(kind);
    for l in leaves {
        b.push(l).expect("sorted leaves");
    }
    b.finish()
}

/// A history tree in memory (RFC 9162 §2.1): leaves appended one at a time, digests and proofs
/// for any earlier size. It keeps the root of every complete perfect subtree (each aligned run
/// of 2^h leaves), so that any subtree the RFC's recursion names is a few of them combined.
///
/// Costs, for a tree of `n` leaves: memory `2n` hashes (64 bytes a leaf; 64 MiB for a million);
/// [`append`](MemHistory::append) one node hash amortised, at most `log₂ n`;
/// [`digest_at`](MemHistory::digest_at) at most `⌈log₂ n⌉` node hashes;
/// [`prove_inclusion`](MemHistory::prove_inclusion) and
/// [`prove_consistency`](MemHistory::prove_consistency) at most `⌈log₂ n⌉` path entries, each a
/// stored subtree root or at most `⌈log₂ n⌉` node hashes (`O(log² n)` in all, a few hundred
/// hashes at most for a million leaves), recursion at most 64 deep.
///
/// ```
/// use cairn_proof::history::{verify_consistency, verify_inclusion, HistoryLeaf};
/// use cairn_proof::reference::MemHistory;
/// let mut tree = MemHistory::new();
/// let leaves: Vec<HistoryLeaf> = (0..11)
///     .map(|v| HistoryLeaf { version: v, ledger_root: [v as u8; 32], meta: [0; 32] })
///     .collect();
/// for leaf in &leaves {
///     tree.append(leaf.hash());
/// }
/// let old = tree.digest_at(7).unwrap();
/// let new = tree.digest();
/// let inclusion = tree.prove_inclusion(4, 11).unwrap();
/// assert!(verify_inclusion(&leaves[4].hash(), &inclusion, &new).is_ok());
/// let consistency = tree.prove_consistency(7, 11).unwrap();
/// assert!(verify_consistency(&old, &new, &consistency).is_ok());
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemHistory {
    /// `levels[h][i]`: the root of the 2^h leaves from `i · 2^h`, for every such run complete;
    /// `levels[0]` holds the leaf hashes.
    levels: Vec<Vec<Hash>>,
}

impl MemHistory {
    /// The empty tree.
    pub fn new() -> MemHistory {
        MemHistory::default()
    }

    /// The tree of these leaf hashes, in order. Cost: `n - 1` node hashes.
    pub fn from_leaf_hashes<I: IntoIterator<Item = Hash>>(leaf_hashes: I) -> MemHistory {
        let mut tree = MemHistory::new();
        for h in leaf_hashes {
            tree.append(h);
        }
        tree
    }

    /// Appends a leaf by its RFC leaf hash ([`crate::history::HistoryLeaf::hash`] or
    /// [`crate::history::leaf_hash`]) and returns its index. Cost: one node hash per perfect
    /// subtree it completes (the trailing ones of its index): amortised one, at most `log₂ n`.
    pub fn append(&mut self, leaf_hash: Hash) -> u64 {
        let index = self.len();
        let mut hash = leaf_hash;
        let mut level = 0;
        loop {
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            let row = &mut self.levels[level];
            row.push(hash);
            if row.len() % 2 == 1 {
                break;
            }
            hash = node_hash(&row[row.len() - 2], &row[row.len() - 1]);
            level += 1;
        }
        index
    }

    /// Leaves in the tree.
    pub fn len(&self) -> u64 {
        self.levels.first().map_or(0, |l| l.len() as u64)
    }

    /// Whether the tree has no leaf.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The leaf hash at `index`, if the tree holds it.
    pub fn leaf_hash(&self, index: u64) -> Option<Hash> {
        let i = usize::try_from(index).ok()?;
        self.levels.first()?.get(i).copied()
    }

    /// The digest of the whole tree. Cost: as [`digest_at`](MemHistory::digest_at).
    pub fn digest(&self) -> Digest {
        Digest {
            size: self.len(),
            root: self.root_at(self.len()),
        }
    }

    /// The digest of the tree as it was with `size` leaves (`size <= len`). Cost: at most
    /// `⌈log₂ size⌉` node hashes.
    pub fn digest_at(&self, size: u64) -> Result<Digest, HistoryProveError> {
        self.check_size(size)?;
        Ok(Digest {
            size,
            root: self.root_at(size),
        })
    }

    /// The inclusion proof of leaf `index` in the tree of `size` leaves (RFC 9162 §2.1.3.1,
    /// `PATH(m, D[n])`): `index < size <= len`. Cost: see [`MemHistory`].
    pub fn prove_inclusion(
        &self,
        index: u64,
        size: u64,
    ) -> Result<InclusionProof, HistoryProveError> {
        prove_inclusion_from(self.len(), index, size, &mut |l, i| Ok(self.node(l, i)))
    }

    /// The consistency proof between the trees of `old_size` and `new_size` leaves (RFC 9162
    /// §2.1.4.1, `PROOF(m, D[n])`): `0 < old_size <= new_size <= len`; equal sizes give an empty
    /// path. Cost: see [`MemHistory`].
    pub fn prove_consistency(
        &self,
        old_size: u64,
        new_size: u64,
    ) -> Result<ConsistencyProof, HistoryProveError> {
        prove_consistency_from(self.len(), old_size, new_size, &mut |l, i| {
            Ok(self.node(l, i))
        })
    }

    /// The stored root of the complete subtree `(level, i)`.
    fn node(&self, level: u32, i: u64) -> Hash {
        self.levels[level as usize][i as usize]
    }

    fn check_size(&self, size: u64) -> Result<(), HistoryProveError> {
        if size > self.len() {
            return Err(HistoryProveError::SizeBeyondTree {
                size,
                len: self.len(),
            });
        }
        Ok(())
    }

    fn root_at(&self, size: u64) -> Hash {
        root_from_nodes::<HistoryProveError>(self.len(), size, &mut |l, i| Ok(self.node(l, i)))
            .unwrap_or(EMPTY_ROOT)
    }
}

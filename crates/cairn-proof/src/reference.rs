//! A reference trie in memory: the definition made into a data structure, for tests, fuzzing
//! and small sets (O(n) memory; nothing is paged or persisted).
//!
//! Owns: [`MemTrie`]. The engine's paged trie is checked against it: same roots, proofs that
//! verify the same way.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::hash::{bit, Hash, HashKind, Leaf, ZERO};
use crate::proof::{Proof, ProofNode, ProofWriter};
use crate::trie::{sorted_leaves, Root, RootBuilder};

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

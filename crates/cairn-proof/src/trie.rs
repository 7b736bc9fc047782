//! The state root, from its definition (`docs/format/trie.md`, "Definitions").
//!
//! Owns: [`Root`], [`root_of_sorted`] (the definition, recursively), [`RootBuilder`] (the same
//! root streamed from leaves in key-path order) and [`root_of`] (from unsorted entries). The
//! engine's paged trie must agree with these; its tests check that it does.

use alloc::vec::Vec;

use crate::error::{BuildError, VerifyError};
use crate::hash::{bit, common_prefix_bits, Hash, HashKind, Leaf, ZERO};

/// A state root: the hash of a table's contents and the hash function that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Root {
    /// The hash function of the table (and of every proof against this root).
    pub kind: HashKind,
    /// The root hash ([`ZERO`] for an empty table).
    pub hash: Hash,
}

impl Root {
    /// The root of an empty table.
    pub const fn empty(kind: HashKind) -> Root {
        Root { kind, hash: ZERO }
    }

    /// A root received as bytes: exactly 32 of them, or [`VerifyError::RootLength`].
    pub fn from_slice(kind: HashKind, bytes: &[u8]) -> Result<Root, VerifyError> {
        let hash: Hash = bytes
            .try_into()
            .map_err(|_| VerifyError::RootLength { len: bytes.len() })?;
        Ok(Root { kind, hash })
    }
}

/// The root of a set of leaves sorted by key path, with no two equal: the definition, written as
/// a recursion. Cost: one node hash per internal node, recursion depth at most 257.
///
/// # Panics
/// If the leaves are not sorted by strictly increasing key path (this is the reference; use
/// [`RootBuilder`] for input you do not control).
pub fn root_of_sorted(kind: HashKind, leaves: &[Leaf]) -> Hash {
    assert!(
        leaves.windows(2).all(|w| w[0].key_path < w[1].key_path),
        "leaves must be sorted by strictly increasing key path"
    );
    subtree(kind, leaves, 0)
}

/// The hash of the subtree at `depth` (0 to 256) that holds `leaves`: sorted by strictly
/// increasing key path, all sharing their first `depth` bits (the subtree's position). With
/// `depth` 0 it is [`root_of_sorted`]. For computing a root a part of the key space at a time:
/// the root is then the subtrees' hashes combined up the top `depth` levels by the same rule
/// (an empty subtree is [`ZERO`], a subtree of one leaf is that leaf's hash, any other is the
/// node of its two halves). Cost: as [`root_of_sorted`].
///
/// # Panics
/// If the leaves are not sorted by strictly increasing key path, do not share their first
/// `depth` bits, or `depth` exceeds 256.
pub fn subtree_of_sorted(kind: HashKind, leaves: &[Leaf], depth: usize) -> Hash {
    assert!(depth <= 256, "depth {depth} beyond 256");
    assert!(
        leaves.windows(2).all(|w| w[0].key_path < w[1].key_path),
        "leaves must be sorted by strictly increasing key path"
    );
    if let (Some(first), Some(last)) = (leaves.first(), leaves.last()) {
        assert!(
            leaves.len() == 1 || common_prefix_bits(&first.key_path, &last.key_path) >= depth,
            "leaves must share their first {depth} bits"
        );
    }
    subtree(kind, leaves, depth)
}

/// [`subtree_of_sorted`] without its checks, for callers that hold its preconditions.
pub(crate) fn subtree(kind: HashKind, leaves: &[Leaf], depth: usize) -> Hash {
    match leaves {
        [] => ZERO,
        [leaf] => leaf.hash(kind),
        _ => {
            let split = leaves.partition_point(|l| !bit(&l.key_path, depth));
            let left = subtree(kind, &leaves[..split], depth + 1);
            let right = subtree(kind, &leaves[split..], depth + 1);
            kind.node(&left, &right)
        }
    }
}

/// The root of any collection of `(key, value, blob)` entries, sorted in memory by key path.
/// Cost: O(n) memory and O(n log n) comparisons besides the hashes. A later entry for a key
/// replaces an earlier one.
pub fn root_of<'a, I>(kind: HashKind, entries: I) -> Hash
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8], Option<&'a [u8]>)>,
{
    let mut builder = RootBuilder::new(kind);
    for leaf in &sorted_leaves(kind, entries) {
        builder
            .push(leaf)
            .expect("sorted and deduplicated by sorted_leaves");
    }
    builder.finish()
}

/// The leaves of `(key, value, blob)` entries sorted by key path, a later entry for a key
/// replacing an earlier one. O(n) memory, O(n log n) comparisons.
pub(crate) fn sorted_leaves<'a, I>(kind: HashKind, entries: I) -> Vec<Leaf>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8], Option<&'a [u8]>)>,
{
    let mut leaves: Vec<(usize, Leaf)> = entries
        .into_iter()
        .map(|(k, v, b)| Leaf::new(kind, k, v, b))
        .enumerate()
        .collect();
    // Newest (largest index) first within a key path, so that dedup keeps it.
    leaves.sort_unstable_by(|a, b| a.1.key_path.cmp(&b.1.key_path).then(b.0.cmp(&a.0)));
    leaves.dedup_by(|later, kept| later.1.key_path == kept.1.key_path);
    leaves.into_iter().map(|(_, leaf)| leaf).collect()
}

/// Streams leaves in strictly increasing key-path order and returns the root: the audit path
/// for a dump sorted by key path.
///
/// Bounds: memory O(256) (a stack of at most 257 subtrees plus one leaf held back); CPU one
/// hash per leaf and one per internal node, the same as the definition.
#[derive(Clone, Debug)]
pub struct RootBuilder {
    kind: HashKind,
    /// Subtrees whose place is settled, by increasing depth (the top two may be equal).
    stack: Vec<Pending>,
    /// The last leaf pushed: its depth depends on the next one.
    held: Option<(Leaf, usize)>,
    leaves: u64,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    depth: usize,
    hash: Hash,
    /// Any key path below the subtree: its first `depth` bits are the subtree's position.
    path: Hash,
}

impl RootBuilder {
    /// A builder for an empty set.
    pub fn new(kind: HashKind) -> RootBuilder {
        RootBuilder {
            kind,
            stack: Vec::new(),
            held: None,
            leaves: 0,
        }
    }

    /// Leaves pushed so far.
    pub fn leaves(&self) -> u64 {
        self.leaves
    }

    /// Adds the next leaf. Its key path must be greater than the previous one's, else
    /// [`BuildError::OutOfOrder`] (and the builder is unchanged).
    pub fn push(&mut self, leaf: &Leaf) -> Result<(), BuildError> {
        let shared_with_next = match &self.held {
            None => None,
            Some((prev, _)) => {
                if leaf.key_path <= prev.key_path {
                    return Err(BuildError::OutOfOrder { index: self.leaves });
                }
                Some(common_prefix_bits(&prev.key_path, &leaf.key_path))
            }
        };
        if let Some(shared) = shared_with_next {
            self.settle_held(Some(shared));
        }
        let shared_with_prev = shared_with_next.map_or(0, |s| s + 1);
        self.held = Some((*leaf, shared_with_prev));
        self.leaves += 1;
        Ok(())
    }

    /// The root of every leaf pushed.
    pub fn finish(mut self) -> Hash {
        if self.held.is_none() {
            return ZERO;
        }
        self.settle_held(None);
        debug_assert_eq!(self.stack.len(), 1);
        debug_assert_eq!(self.stack[0].depth, 0);
        self.stack[0].hash
    }

    /// Places the held leaf now that the next leaf's shared prefix is known (`None`: no next
    /// leaf), then folds every subtree deeper than where the next leaf branches off.
    fn settle_held(&mut self, shared_with_next: Option<usize>) {
        let (leaf, min_depth) = self.held.take().expect("a held leaf");
        // A leaf sits one below the longest prefix it shares with a neighbour.
        let depth = min_depth.max(shared_with_next.map_or(0, |s| s + 1));
        self.stack.push(Pending {
            depth,
            hash: leaf.hash(self.kind),
            path: leaf.key_path,
        });
        let floor = shared_with_next.map_or(0, |s| s + 1);
        while let Some(top) = self.stack.last().copied() {
            if top.depth <= floor {
                break;
            }
            self.stack.pop();
            let parent_depth = top.depth - 1;
            let merged = match self.stack.last() {
                Some(below) if below.depth == top.depth => {
                    let below = self.stack.pop().expect("just seen");
                    Pending {
                        depth: parent_depth,
                        hash: self.kind.node(&below.hash, &top.hash),
                        path: below.path,
                    }
                }
                // Nothing else lives below the parent: an internal node with one empty child.
                _ => {
                    let hash = if bit(&top.path, parent_depth) {
                        self.kind.node(&ZERO, &top.hash)
                    } else {
                        self.kind.node(&top.hash, &ZERO)
                    };
                    Pending {
                        depth: parent_depth,
                        hash,
                        path: top.path,
                    }
                }
            };
            self.stack.push(merged);
        }
    }
}

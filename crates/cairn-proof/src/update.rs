//! The root after a batch of updates, from a multiproof of the version before: what a stateless
//! client needs to check a block's new root (`docs/format/proof.md`, "The root after updates").
//!
//! Owns: [`Update`] and [`Change`], [`Proof::root_after`] and [`root_after`]. The rules are the
//! engine's commit (`crates/cairn/src/trie/commit_work.rs`: `update`, `join`, `build`) applied
//! to the part of the trie a proof opens: a leaf or an empty subtree that updates reach is
//! rebuilt from the leaves it holds afterwards (the definition's shape: one leaf is that leaf,
//! more split by their bits, with an empty sibling along any prefix they share); an internal
//! node is joined from its new children, and collapses to a leaf when one child is a leaf and
//! the other empty. A subtree the proof gives only by its hash stays opaque: an update reaching
//! one, or a delete leaving one alone next to an empty subtree, is refused with a typed error.
//!
//! Bounds: see [`Proof::root_after`]. No I/O, no `unsafe`, no panic on any input.

use alloc::vec::Vec;

use crate::error::RootAfterError;
use crate::hash::{bit, common_prefix_bits, Hash, HashKind, Leaf, ZERO};
use crate::proof::{Cursor, Proof, ProofNode};
use crate::trie::{subtree, Root};

/// One key's change in a batch, for [`Proof::root_after`]: what the key holds afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Update<'a> {
    /// The key (not its path: the function hashes it).
    pub key: &'a [u8],
    /// What the key holds after the batch.
    pub change: Change<'a>,
}

/// What an [`Update`] leaves a key holding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change<'a> {
    /// The key is removed (nothing changes if it was absent).
    Delete,
    /// The key holds this value, and this blob (by its hash) or none, whether it was present
    /// before (its leaf is replaced) or not (a leaf is inserted).
    Put {
        /// The value.
        value: &'a [u8],
        /// The blob's hash (`HashKind::blob_hash`), or `None` for a key without a blob. As in
        /// a leaf, `Some(ZERO)` is the same as `None`.
        blob_hash: Option<Hash>,
    },
}

impl<'a> Update<'a> {
    /// The key now holds `value` and no blob.
    pub fn put(key: &'a [u8], value: &'a [u8]) -> Update<'a> {
        Update {
            key,
            change: Change::Put {
                value,
                blob_hash: None,
            },
        }
    }

    /// The key now holds `value` and a blob whose hash is `blob_hash` (`ZERO`: no blob).
    pub fn put_with_blob(key: &'a [u8], value: &'a [u8], blob_hash: Hash) -> Update<'a> {
        Update {
            key,
            change: Change::Put {
                value,
                blob_hash: Some(blob_hash),
            },
        }
    }

    /// The key is deleted.
    pub fn delete(key: &'a [u8]) -> Update<'a> {
        Update {
            key,
            change: Change::Delete,
        }
    }

    /// A write as a block records it: `Some(value)` puts the value (no blob), `None` deletes.
    pub fn write(key: &'a [u8], value: Option<&'a [u8]>) -> Update<'a> {
        match value {
            Some(value) => Update::put(key, value),
            None => Update::delete(key),
        }
    }

    /// The key's leaf after the update (`None`: absent). Cost: two hashes for a put.
    fn leaf(&self, kind: HashKind) -> Option<Leaf> {
        match self.change {
            Change::Delete => None,
            Change::Put { value, blob_hash } => Some(Leaf {
                key_path: kind.key_path(self.key),
                value_hash: kind.value_hash(value),
                blob_hash: blob_hash.unwrap_or(ZERO),
            }),
        }
    }
}

impl Proof {
    /// The root the trie has after `updates`, computed from this proof of the trie before
    /// them, whose root is `old`: bit for bit the root the engine commits after the same
    /// changes (and [`crate::root_of`] of the new contents).
    ///
    /// The proof must cover every updated key: open its leaf, or show it absent (an empty
    /// subtree or another key's leaf where its path ends), as [`Proof::verify`] needs for a
    /// claim about it. Then a put replaces the key's leaf or inserts one (into the empty
    /// subtree, or next to the other leaf, split down to the first bit where their paths
    /// differ); a delete removes the leaf, and a subtree left with one leaf collapses to it, up
    /// as far as it goes. Deleting an absent key, and putting the value (and blob) a key
    /// already holds, change nothing. Several updates of one key: the last one counts (as in
    /// [`crate::root_of`]); updates of distinct keys give the same root in any order.
    ///
    /// Errors, all before any root is given: [`RootAfterError::HashKindMismatch`];
    /// [`RootAfterError::RootMismatch`] if the proof does not hash to `old` (checked first, so
    /// that a tampered proof is reported as such); [`RootAfterError::MisplacedLeaf`];
    /// [`RootAfterError::NotCovered`] for an update whose path ends at an opaque (`Hash`)
    /// subtree (a proof of the key's presence or absence never ends so); and
    /// [`RootAfterError::SiblingNotOpened`] when deletes empty a subtree whose sibling the
    /// proof gives only by its hash, since whether that sibling is one leaf (which moves up) or
    /// more cannot be told. [`crate::reference::MemTrie::prove_updates`] shows what a prover
    /// opens so that deletes never meet that; the engine's `Table::prove` opens only the keys'
    /// paths (every other non-empty subtree by its hash), so a proof from it serves puts and
    /// deletes of absent keys, but a delete of a present key only where another updated key's
    /// path happens to open the sibling.
    ///
    /// Cost: at most `2·N + 259·U` hashes for a proof of `N` nodes and `U` updates (the old
    /// hash of every node, the new hash of every node an update reaches, a key path, a value
    /// hash and a leaf hash per update, and at most 256 internal nodes a put can add below a
    /// leaf or an empty subtree), plus sorting the updates; memory O(U) besides the proof;
    /// recursion at most 257 deep. It never panics, whatever the proof and updates; and short
    /// of a hash collision, a proof that hashes to `old` is a part of the trie `old` commits
    /// to, so a root it gives is the true one.
    ///
    /// ```
    /// use cairn_proof::{reference::MemTrie, root_of, HashKind, RootAfterError, Update};
    /// let kind = HashKind::Sha256;
    /// let before = MemTrie::new(kind, [(&b"alice"[..], &b"10"[..], None), (b"bob", b"20", None)]);
    /// let updates = [
    ///     Update::put(b"alice", b"11"),
    ///     Update::put(b"carol", b"5"),
    ///     Update::delete(b"bob"),
    /// ];
    /// let proof = before.prove_updates(&updates);
    /// let after = proof.root_after(&before.root(), &updates).unwrap();
    /// let expected = root_of(kind, [(&b"alice"[..], &b"11"[..], None), (b"carol", b"5", None)]);
    /// assert_eq!(after.hash, expected);
    /// // A proof of the keys alone gives `alice` by its hash when `bob` goes: refused.
    /// let keys_only = before.prove(&[b"bob"]);
    /// let deleted = keys_only.root_after(&before.root(), &[Update::delete(b"bob")]);
    /// assert!(matches!(deleted, Err(RootAfterError::SiblingNotOpened { update: 0, .. })));
    /// ```
    pub fn root_after(&self, old: &Root, updates: &[Update<'_>]) -> Result<Root, RootAfterError> {
        if old.kind != self.kind() {
            return Err(RootAfterError::HashKindMismatch {
                root: old.kind,
                proof: self.kind(),
            });
        }
        let pending = pending(self.kind(), updates);
        let mut walk = After {
            kind: self.kind(),
            nodes: self.cursor(),
            error: None,
        };
        let (old_hash, shape) = walk.subtree(0, &ZERO, &pending)?;
        if old_hash != old.hash {
            return Err(RootAfterError::RootMismatch);
        }
        if let Some(e) = walk.error {
            return Err(e);
        }
        Ok(Root {
            kind: self.kind(),
            hash: shape.hash(),
        })
    }
}

/// Decodes `proof` (full form) and gives the root after `updates`; see [`Proof::root_after`].
/// Total: any bytes give a root or an error.
pub fn root_after(
    old: &Root,
    proof: &[u8],
    updates: &[Update<'_>],
) -> Result<Root, RootAfterError> {
    Proof::decode(proof)?.root_after(old, updates)
}

/// An update by key path, with the index of the caller's update it comes from.
struct Pending {
    path: Hash,
    leaf: Option<Leaf>,
    index: usize,
}

/// The updates by strictly increasing key path, the last one of each key kept.
fn pending(kind: HashKind, updates: &[Update<'_>]) -> Vec<Pending> {
    let mut out: Vec<Pending> = updates
        .iter()
        .enumerate()
        .map(|(index, u)| {
            let leaf = u.leaf(kind);
            let path = match &leaf {
                Some(l) => l.key_path,
                None => kind.key_path(u.key),
            };
            Pending { path, leaf, index }
        })
        .collect();
    // The latest (largest index) first within a path, so that dedup keeps it.
    out.sort_unstable_by(|a, b| a.path.cmp(&b.path).then(b.index.cmp(&a.index)));
    out.dedup_by(|later, kept| later.path == kept.path);
    out
}

/// A subtree after the updates, as much as the proof tells of it.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Empty,
    /// One leaf, by its hash (it does not depend on where the leaf sits).
    Leaf(Hash),
    /// At least two leaves: an internal node, by its hash.
    Internal(Hash),
    /// A non-empty subtree given by its hash: one leaf or more, the proof does not say.
    Opaque(Hash),
}

impl Shape {
    fn hash(&self) -> Hash {
        match self {
            Shape::Empty => ZERO,
            Shape::Leaf(h) | Shape::Internal(h) | Shape::Opaque(h) => *h,
        }
    }
}

/// Recomputes the old hashes and the new shapes over a pre-order node stream.
struct After<'a> {
    kind: HashKind,
    nodes: Cursor<'a>,
    /// The first update found that the proof cannot apply; reported only if the proof hashes
    /// to the old root.
    error: Option<RootAfterError>,
}

impl After<'_> {
    fn fail(&mut self, error: RootAfterError) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    /// The old hash of the subtree at the next node, at `depth` under `prefix`, and its shape
    /// after `ups` (sorted by path, distinct, all with `prefix`'s first `depth` bits).
    fn subtree(
        &mut self,
        depth: usize,
        prefix: &Hash,
        ups: &[Pending],
    ) -> Result<(Hash, Shape), RootAfterError> {
        match self.nodes.next_node() {
            ProofNode::Empty => {
                let shape = match ups.is_empty() {
                    true => Shape::Empty,
                    false => self.build(depth, ups, None),
                };
                Ok((ZERO, shape))
            }
            ProofNode::Hash(h) => {
                if let Some(update) = ups.iter().map(|u| u.index).min() {
                    self.fail(RootAfterError::NotCovered { update });
                }
                // Only the empty subtree hashes to ZERO.
                let shape = if h == ZERO {
                    Shape::Empty
                } else {
                    Shape::Opaque(h)
                };
                Ok((h, shape))
            }
            ProofNode::Leaf(leaf) => {
                if common_prefix_bits(&leaf.key_path, prefix) < depth {
                    return Err(RootAfterError::MisplacedLeaf);
                }
                let old = leaf.hash(self.kind);
                let shape = match ups.is_empty() {
                    true => Shape::Leaf(old),
                    false => self.build(depth, ups, Some((leaf, old))),
                };
                Ok((old, shape))
            }
            ProofNode::Internal => {
                // A proof (built or decoded) has no internal node at depth 256 or more.
                debug_assert!(depth < crate::hash::KEY_PATH_BITS);
                let split = ups.partition_point(|u| !bit(&u.path, depth));
                let (old_left, left) = self.subtree(depth + 1, prefix, &ups[..split])?;
                let mut right_prefix = *prefix;
                right_prefix[depth / 8] |= 0x80 >> (depth % 8);
                let (old_right, right) = self.subtree(depth + 1, &right_prefix, &ups[split..])?;
                let old = self.kind.node(&old_left, &old_right);
                // Children that hash as before leave the node as it was: an internal node of
                // the old trie, so at least two leaves.
                let shape = if left.hash() == old_left && right.hash() == old_right {
                    Shape::Internal(old)
                } else {
                    self.join(depth, left, right, &ups[..split], &ups[split..])
                };
                Ok((old, shape))
            }
        }
    }

    /// The node at `depth` over two new children (at least one changed), as the engine's
    /// `join`: nothing over two empty ones, the leaf over a leaf and an empty one.
    fn join(
        &mut self,
        depth: usize,
        left: Shape,
        right: Shape,
        left_ups: &[Pending],
        right_ups: &[Pending],
    ) -> Shape {
        match (left, right) {
            (Shape::Empty, Shape::Empty) => Shape::Empty,
            (leaf @ Shape::Leaf(..), Shape::Empty) | (Shape::Empty, leaf @ Shape::Leaf(..)) => leaf,
            (Shape::Opaque(h), Shape::Empty) => {
                self.sibling_not_opened(depth + 1, right_ups);
                Shape::Opaque(h)
            }
            (Shape::Empty, Shape::Opaque(h)) => {
                self.sibling_not_opened(depth + 1, left_ups);
                Shape::Opaque(h)
            }
            _ => Shape::Internal(self.kind.node(&left.hash(), &right.hash())),
        }
    }

    /// Notes that the subtree of `emptied` (the updates below it) became empty next to an
    /// opaque sibling at `depth`, naming the first delete among them.
    fn sibling_not_opened(&mut self, depth: usize, emptied: &[Pending]) {
        let deletes = emptied.iter().filter(|u| u.leaf.is_none());
        let update = match deletes.map(|u| u.index).min() {
            Some(i) => i,
            // The subtree was not empty before, so an update below it deletes; the fallback
            // keeps this total.
            None => emptied.iter().map(|u| u.index).min().unwrap_or(0),
        };
        self.fail(RootAfterError::SiblingNotOpened { update, depth });
    }

    /// The shape at `depth` of a subtree that held `old` (a leaf, with its hash) or nothing,
    /// after `ups`: the engine's `build` over the leaves it holds now (the puts, and `old`
    /// unless an update names its key).
    fn build(&mut self, depth: usize, ups: &[Pending], old: Option<(Leaf, Hash)>) -> Shape {
        let mut leaves: Vec<Leaf> = ups.iter().filter_map(|u| u.leaf).collect();
        if let Some((leaf, _)) = old {
            if ups.iter().all(|u| u.path != leaf.key_path) {
                let at = leaves.partition_point(|l| l.key_path < leaf.key_path);
                leaves.insert(at, leaf);
            }
        }
        match leaves.as_slice() {
            [] => Shape::Empty,
            [leaf] => match old {
                Some((o, hash)) if o == *leaf => Shape::Leaf(hash),
                _ => Shape::Leaf(leaf.hash(self.kind)),
            },
            // Sorted, distinct (one per path) and all with the position's first `depth` bits
            // (the updates came down to it by those bits; `old` was checked to sit on its
            // path): the definition's subtree, which then splits before bit 256.
            _ => Shape::Internal(subtree(self.kind, &leaves, depth)),
        }
    }
}

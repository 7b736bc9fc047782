//! Sharding the state trie by key path (`docs/format/trie.md`, "Shards").
//!
//! With `S = 2^bits` shards, shard `i` holds the keys whose key paths start with the `bits`-bit
//! number `i`. Its contents are then exactly the trie's subtree at depth `bits` and position
//! `i`, and a table holding only them has as its root that subtree under a chain of `bits`
//! internal nodes whose other child is empty (or the subtree itself when it is empty or one
//! leaf, which collapses). The **global root** combines the `S` subtrees up the top `bits`
//! levels by the trie's own rule, so it equals, bit for bit, the root of one table holding every
//! shard's contents; and a proof from a shard's table, lifted onto the top levels, is the proof
//! that one table would give.
//!
//! Owns: [`ShardMap`] (which shard a key belongs to, what a shard's table's root is),
//! [`Subtree`] (a shard's subtree, read from its table's top witness), [`ShardedRoot`] (the
//! global root from the shards' subtrees, its top witness, proofs lifted onto it). May call:
//! `hash`, `proof`, `trie`. No I/O.
//!
//! Bounds: a [`ShardedRoot`] holds `2^(bits+1) − 1` subtrees (about 100 bytes each; at most
//! [`SHARD_BITS_MAX`] bits) and builds them with one node hash per internal one; lifting
//! proofs costs one hash per node of each proof (each is checked against its shard) plus
//! O(nodes) copying; nothing recurses deeper than 257.

use alloc::vec::Vec;
use core::ops::Range;

use crate::error::ShardError;
use crate::hash::{bit, Hash, HashKind, Leaf, ZERO};
use crate::proof::{Proof, ProofNode, ProofWriter};
use crate::trie::Root;

/// The most shard bits: 65,536 shards.
pub const SHARD_BITS_MAX: u8 = 16;

/// Which shard a key belongs to: the first `bits` bits of its key path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShardMap {
    kind: HashKind,
    bits: u8,
}

/// A shard's subtree at depth `bits`: what the top levels need of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subtree {
    /// The shard holds nothing.
    Empty,
    /// The shard holds one key: its leaf (which collapses upwards while its neighbours are
    /// empty).
    Leaf(Leaf),
    /// The shard holds two keys or more: the hash of its subtree's internal root.
    Internal(Hash),
}

impl Subtree {
    /// The subtree's hash: [`ZERO`], the leaf's hash, or the internal node's.
    pub fn hash(&self, kind: HashKind) -> Hash {
        match self {
            Subtree::Empty => ZERO,
            Subtree::Leaf(leaf) => leaf.hash(kind),
            Subtree::Internal(h) => *h,
        }
    }

    /// Two sibling subtrees as one, by the trie's rule: two empty ones are empty, an empty one
    /// beside a leaf is that leaf (a subtree of one leaf collapses), anything else is the node
    /// over both.
    fn join(kind: HashKind, left: &Subtree, right: &Subtree) -> Subtree {
        match (left, right) {
            (Subtree::Empty, Subtree::Empty) => Subtree::Empty,
            (Subtree::Empty, Subtree::Leaf(leaf)) | (Subtree::Leaf(leaf), Subtree::Empty) => {
                Subtree::Leaf(*leaf)
            }
            _ => Subtree::Internal(kind.node(&left.hash(kind), &right.hash(kind))),
        }
    }
}

/// Where a shard's position ends in a proof of its table.
enum Found {
    /// An empty subtree at or above depth `bits`.
    Empty,
    /// A leaf at or above depth `bits`.
    Leaf(Leaf),
    /// A node the proof does not open, above depth `bits`.
    Hash,
    /// The node at depth `bits`: the range of the proof's nodes that make its subtree (one
    /// [`ProofNode::Hash`] where the proof does not open it; in a top witness cut at `bits`,
    /// that is an internal node's hash).
    Opened(Range<usize>),
}

impl ShardMap {
    /// `2^bits` shards of tries hashed with `kind`.
    ///
    /// Errors: [`ShardError::Bits`] above [`SHARD_BITS_MAX`].
    pub fn new(kind: HashKind, bits: u8) -> Result<ShardMap, ShardError> {
        if bits > SHARD_BITS_MAX {
            return Err(ShardError::Bits(bits));
        }
        Ok(ShardMap { kind, bits })
    }

    /// The hash function of the tries.
    pub fn kind(&self) -> HashKind {
        self.kind
    }

    /// log₂ of the number of shards.
    pub fn bits(&self) -> u8 {
        self.bits
    }

    /// The number of shards, `2^bits`.
    pub fn shards(&self) -> u32 {
        1 << self.bits
    }

    /// The shard `key` belongs to. Cost: one key-path hash.
    pub fn shard_of(&self, key: &[u8]) -> u32 {
        self.shard_of_path(&self.kind.key_path(key))
    }

    /// The shard a key path belongs to: its first `bits` bits.
    pub fn shard_of_path(&self, path: &Hash) -> u32 {
        if self.bits == 0 {
            return 0;
        }
        let head = u32::from_be_bytes([path[0], path[1], path[2], path[3]]);
        head >> (32 - u32::from(self.bits))
    }

    /// The key path whose first `bits` bits are `shard` and whose other bits are zero.
    fn shard_path(&self, shard: u32) -> Hash {
        let mut path = ZERO;
        if self.bits > 0 {
            let head = shard << (32 - u32::from(self.bits));
            path[..4].copy_from_slice(&head.to_be_bytes());
        }
        path
    }

    fn check_shard(&self, shard: u32) -> Result<(), ShardError> {
        if shard >= self.shards() {
            return Err(ShardError::Shard {
                shard,
                shards: self.shards(),
            });
        }
        Ok(())
    }

    fn check_kind(&self, kind: HashKind) -> Result<(), ShardError> {
        if kind != self.kind {
            return Err(ShardError::HashKindMismatch {
                expected: self.kind,
                got: kind,
            });
        }
        Ok(())
    }

    /// The root of a table holding only shard `shard`'s contents, whose subtree is `subtree`:
    /// an internal subtree under a chain of `bits` nodes whose other child is empty; an empty
    /// or one-leaf subtree as it is. Cost: `bits` node hashes at most.
    pub fn table_root(&self, shard: u32, subtree: &Subtree) -> Hash {
        let Subtree::Internal(mut h) = *subtree else {
            return subtree.hash(self.kind);
        };
        let path = self.shard_path(shard);
        for depth in (0..usize::from(self.bits)).rev() {
            h = if bit(&path, depth) {
                self.kind.node(&ZERO, &h)
            } else {
                self.kind.node(&h, &ZERO)
            };
        }
        h
    }

    /// Shard `shard`'s subtree, read from its table's root and a top witness of it (the table
    /// holding only that shard's keys; the witness from the engine's `Table::top_witness` with
    /// at least `max(bits, 1)` levels, which opens every node above its cut and gives every
    /// internal node at the cut as a hash).
    ///
    /// Errors: [`ShardError::Shard`], [`ShardError::HashKindMismatch`]; [`ShardError::Witness`]
    /// when the witness does not hash to `root`; [`ShardError::WitnessShape`] when it does not
    /// open the shard's path down to depth `bits`; [`ShardError::ForeignKey`] when the table
    /// holds a key of another shard.
    pub fn subtree(&self, shard: u32, root: &Root, top: &Proof) -> Result<Subtree, ShardError> {
        self.check_shard(shard)?;
        self.check_kind(root.kind)?;
        self.check_kind(top.kind())?;
        top.verify(root, &[]).map_err(ShardError::Witness)?;
        let nodes: Vec<ProofNode> = top.nodes().collect();
        Ok(match self.find(&nodes, shard)? {
            Found::Empty => Subtree::Empty,
            Found::Leaf(leaf) => Subtree::Leaf(leaf),
            // A cut above `bits` leaves the shard's subtree unknown.
            Found::Hash => return Err(ShardError::WitnessShape { shard }),
            Found::Opened(range) => {
                let subtree = &nodes[range];
                let hash = hash_of(self.kind, subtree, &mut 0);
                match subtree.first() {
                    Some(ProofNode::Internal | ProofNode::Hash(_)) => Subtree::Internal(hash),
                    _ => return Err(ShardError::WitnessShape { shard }),
                }
            }
        })
    }

    /// The root shard `shard`'s own table has, as `proof`, a proof against the global root (a
    /// lifted one, [`ShardedRoot::lift`], or the one table's), shows it: the subtree at the
    /// shard's position, wrapped as [`Self::table_root`] wraps it. What ties a lifted proof to
    /// the shard's receipt, whose table root this must equal. Checks nothing against a root:
    /// verify `proof` against the global root first. Cost: one node hash per node of the
    /// shard's subtree in `proof`, plus `bits`.
    ///
    /// Errors: [`ShardError::Shard`], [`ShardError::HashKindMismatch`];
    /// [`ShardError::WitnessShape`] when the proof gives the shard's subtree only as a hash,
    /// or inside one (a proof of none of the shard's keys; a proof of some opens it).
    pub fn table_root_in(&self, shard: u32, proof: &Proof) -> Result<Hash, ShardError> {
        self.check_shard(shard)?;
        self.check_kind(proof.kind())?;
        let nodes: Vec<ProofNode> = proof.nodes().collect();
        let path = self.shard_path(shard);
        let bits = usize::from(self.bits);
        let (mut at, mut depth) = (0, 0);
        let subtree = loop {
            match nodes.get(at) {
                None => return Err(ShardError::WitnessShape { shard }),
                Some(ProofNode::Empty) => break Subtree::Empty,
                // A leaf above the shard's depth stands for the one key below it: the shard's
                // own when its path leads there, and then the shard's subtree is that leaf.
                Some(ProofNode::Leaf(leaf)) if depth < bits => {
                    if self.shard_of_path(&leaf.key_path) == shard {
                        break Subtree::Leaf(*leaf);
                    }
                    break Subtree::Empty;
                }
                Some(ProofNode::Leaf(leaf)) => break Subtree::Leaf(*leaf),
                // Above the shard, a hash hides it; at its depth, a hash may stand for a leaf
                // (one beside a non-empty sibling sits at that depth) as well as for a node.
                Some(ProofNode::Hash(_)) => return Err(ShardError::WitnessShape { shard }),
                Some(ProofNode::Internal) if depth == bits => {
                    break Subtree::Internal(hash_of(self.kind, &nodes, &mut at));
                }
                Some(ProofNode::Internal) => {
                    let left = at + 1;
                    at = if bit(&path, depth) {
                        subtree_end(&nodes, left)
                    } else {
                        left
                    };
                    depth += 1;
                }
            }
        };
        Ok(self.table_root(shard, &subtree))
    }

    /// Follows shard `shard`'s path down a proof of its table (pre-order `nodes`) to depth
    /// `bits`, checking that every node it passes has an empty other child (the table holds
    /// nothing outside the shard).
    fn find(&self, nodes: &[ProofNode], shard: u32) -> Result<Found, ShardError> {
        let path = self.shard_path(shard);
        let bits = usize::from(self.bits);
        let mut at = 0;
        let mut depth = 0;
        loop {
            match nodes.get(at) {
                None => return Err(ShardError::WitnessShape { shard }),
                Some(ProofNode::Empty) => return Ok(Found::Empty),
                Some(ProofNode::Leaf(leaf)) => {
                    if self.shard_of_path(&leaf.key_path) != shard {
                        return Err(ShardError::ForeignKey { shard });
                    }
                    return Ok(Found::Leaf(*leaf));
                }
                Some(ProofNode::Hash(_)) if depth < bits => return Ok(Found::Hash),
                Some(ProofNode::Hash(_)) => return Ok(Found::Opened(at..at + 1)),
                Some(ProofNode::Internal) if depth == bits => {
                    return Ok(Found::Opened(at..subtree_end(nodes, at)))
                }
                Some(ProofNode::Internal) => {
                    let left = at + 1;
                    let right = subtree_end(nodes, left);
                    let (on, off) = if bit(&path, depth) {
                        (right, left)
                    } else {
                        (left, right)
                    };
                    if nodes.get(off) != Some(&ProofNode::Empty) {
                        return Err(ShardError::ForeignKey { shard });
                    }
                    at = on;
                    depth += 1;
                }
            }
        }
    }
}

/// The index just after the subtree of pre-order `nodes` that starts at `start` (or the
/// slice's end, for a slice that is not one tree).
fn subtree_end(nodes: &[ProofNode], start: usize) -> usize {
    let mut pending = 1usize;
    let mut at = start;
    while pending > 0 && at < nodes.len() {
        pending -= 1;
        if nodes[at] == ProofNode::Internal {
            pending += 2;
        }
        at += 1;
    }
    at
}

/// The hash of the subtree starting at `nodes[*at]`, advancing `at` past it. Recursion depth:
/// the subtree's height, at most 257 in a proof (its shape is checked when it is built or
/// decoded).
fn hash_of(kind: HashKind, nodes: &[ProofNode], at: &mut usize) -> Hash {
    let Some(node) = nodes.get(*at) else {
        return ZERO;
    };
    *at += 1;
    match node {
        ProofNode::Empty => ZERO,
        ProofNode::Hash(h) => *h,
        ProofNode::Leaf(leaf) => leaf.hash(kind),
        ProofNode::Internal => {
            let left = hash_of(kind, nodes, at);
            let right = hash_of(kind, nodes, at);
            kind.node(&left, &right)
        }
    }
}

/// The global root over `2^bits` shards: their subtrees combined up the top `bits` levels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardedRoot {
    map: ShardMap,
    /// `levels[d]` holds the `2^d` subtrees at depth `d`; `levels[bits]` are the shards'.
    levels: Vec<Vec<Subtree>>,
}

/// One shard's proof, checked and located, for [`ShardedRoot::lift`].
struct Part {
    shard: u32,
    nodes: Vec<ProofNode>,
    found: Found,
}

impl ShardedRoot {
    /// The global root over `shards`, shard `i`'s subtree at index `i`. Cost: `2^bits − 1`
    /// joins (a node hash each where both sides are not trivial).
    ///
    /// Errors: [`ShardError::ShardCount`] unless there are exactly `map.shards()` subtrees;
    /// [`ShardError::ForeignKey`] for a leaf outside its shard.
    pub fn new(map: ShardMap, shards: Vec<Subtree>) -> Result<ShardedRoot, ShardError> {
        if shards.len() != map.shards() as usize {
            return Err(ShardError::ShardCount {
                expected: map.shards(),
                got: shards.len(),
            });
        }
        for (i, s) in shards.iter().enumerate() {
            if let Subtree::Leaf(leaf) = s {
                if map.shard_of_path(&leaf.key_path) != i as u32 {
                    return Err(ShardError::ForeignKey { shard: i as u32 });
                }
            }
        }
        let mut levels = alloc::vec![shards];
        while levels[0].len() > 1 {
            let above = levels[0]
                .chunks(2)
                .map(|pair| Subtree::join(map.kind, &pair[0], &pair[1]))
                .collect();
            levels.insert(0, above);
        }
        Ok(ShardedRoot { map, levels })
    }

    /// How keys map to shards.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// The global root: equal to the root of one table holding every shard's contents.
    pub fn root(&self) -> Root {
        Root {
            kind: self.map.kind,
            hash: self.levels[0][0].hash(self.map.kind),
        }
    }

    /// Shard `shard`'s subtree, if there is such a shard.
    pub fn shard(&self, shard: u32) -> Option<&Subtree> {
        self.levels[usize::from(self.map.bits)].get(shard as usize)
    }

    /// A proof opening every node of the global trie above depth `bits` and giving each
    /// internal node at depth `bits` as its hash: for `bits ≥ 1`, what the one table would give
    /// as its top witness of `bits` levels, so that a verifier holding it as a
    /// [`crate::TopWitness`] checks a shard's own [`crate::CompactProof`] (compacted by `bits`
    /// levels) against the global root. Cost: O(2^bits) nodes.
    ///
    /// Errors: none in practice; [`ShardError::Build`] would mean a bug in this module.
    pub fn top_witness(&self) -> Result<Proof, ShardError> {
        let mut w = ProofWriter::new(self.map.kind);
        self.emit_top(0, 0, &mut w);
        w.finish().map_err(ShardError::Build)
    }

    fn emit_top(&self, depth: usize, position: usize, w: &mut ProofWriter) {
        match &self.levels[depth][position] {
            Subtree::Empty => w.push(ProofNode::Empty),
            Subtree::Leaf(leaf) => w.push(ProofNode::Leaf(*leaf)),
            Subtree::Internal(h) if depth == usize::from(self.map.bits) => {
                w.push(ProofNode::Hash(*h))
            }
            Subtree::Internal(_) => {
                w.push(ProofNode::Internal);
                self.emit_top(depth + 1, 2 * position, w);
                self.emit_top(depth + 1, 2 * position + 1, w);
            }
        }
    }

    /// One proof against the global root from proofs made by the shards' own tables (at most
    /// one per shard, each against the version of that shard this root holds): each shard's
    /// part of the trie with the top levels above it, every subtree no proof reaches given by
    /// its hash. It is bit for bit the proof that one table holding every shard's contents
    /// gives for the same keys, and verifies with [`crate::verify`] against [`Self::root`].
    ///
    /// Errors: [`ShardError::Shard`], [`ShardError::DuplicateShard`],
    /// [`ShardError::HashKindMismatch`]; [`ShardError::StaleProof`] when a proof does not hash
    /// to the root of the shard's contents this global root holds (another version, another
    /// shard, a tampered proof); [`ShardError::ForeignKey`] for a proof that shows a key of
    /// another shard.
    pub fn lift(&self, proofs: &[(u32, &Proof)]) -> Result<Proof, ShardError> {
        let mut parts: Vec<Part> = Vec::with_capacity(proofs.len());
        for &(shard, proof) in proofs {
            self.map.check_shard(shard)?;
            self.map.check_kind(proof.kind())?;
            let subtree = &self.levels[usize::from(self.map.bits)][shard as usize];
            let expected = self.map.table_root(shard, subtree);
            match proof.root() {
                Ok(root) if root.hash == expected => {}
                _ => return Err(ShardError::StaleProof { shard }),
            }
            let nodes: Vec<ProofNode> = proof.nodes().collect();
            let found = self.map.find(&nodes, shard)?;
            parts.push(Part {
                shard,
                nodes,
                found,
            });
        }
        parts.sort_unstable_by_key(|p| p.shard);
        if let Some(pair) = parts.windows(2).find(|w| w[0].shard == w[1].shard) {
            return Err(ShardError::DuplicateShard {
                shard: pair[0].shard,
            });
        }
        let mut w = ProofWriter::new(self.map.kind);
        self.emit_lift(0, 0, &parts, &mut w);
        w.finish().map_err(ShardError::Build)
    }

    /// Emits the node at `depth` and `position` of the global trie; `parts` are the proofs of
    /// the shards below it, sorted by shard.
    fn emit_lift(&self, depth: usize, position: u32, parts: &[Part], w: &mut ProofWriter) {
        let kind = self.map.kind;
        let bits = usize::from(self.map.bits);
        let here = &self.levels[depth][position as usize];
        if parts.is_empty() {
            // No claim leads here: as a table's proof gives an untouched subtree.
            w.push(match here {
                Subtree::Empty => ProofNode::Empty,
                other => ProofNode::Hash(other.hash(kind)),
            });
            return;
        }
        match here {
            Subtree::Empty => w.push(ProofNode::Empty),
            Subtree::Leaf(leaf) => w.push(ProofNode::Leaf(*leaf)),
            Subtree::Internal(h) if depth == bits => match &parts[0].found {
                Found::Opened(range) => {
                    for node in &parts[0].nodes[range.clone()] {
                        w.push(*node);
                    }
                }
                // The proof stops above the shard's subtree; its claims will not be covered.
                _ => w.push(ProofNode::Hash(*h)),
            },
            Subtree::Internal(_) => {
                w.push(ProofNode::Internal);
                // Shards below the right child start at this one.
                let right = (2 * position + 1) << (bits - depth - 1);
                let split = parts.partition_point(|p| p.shard < right);
                self.emit_lift(depth + 1, 2 * position, &parts[..split], w);
                self.emit_lift(depth + 1, 2 * position + 1, &parts[split..], w);
            }
        }
    }
}

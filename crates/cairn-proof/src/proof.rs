//! Proofs: their types, their encoding (`docs/format/proof.md`) and their verification.
//!
//! Owns: [`Proof`] and [`ProofWriter`] (a multiproof: the part of the trie the claimed keys'
//! paths pass through, every shared node once), [`CompactProof`] and [`TopWitness`] (a proof
//! without the top levels a verifier already holds), [`Claim`], and [`verify`]. No I/O, no
//! `unsafe`: a light client links only this.
//!
//! Bounds: decoding is O(len) time and allocates at most about `5 × len` bytes (one byte per
//! node, whose tag takes 2 bits of input, plus the hashes and leaves copied out); verification
//! computes one hash per node of the proof plus one per claimed value, and recurses at most 257
//! deep (a key path has 256 bits).

use alloc::vec;
use alloc::vec::Vec;

use crate::error::{BuildError, DecodeError, VerifyError};
use crate::hash::{bit, common_prefix_bits, Hash, HashKind, Leaf, KEY_PATH_BITS, ZERO};
use crate::trie::Root;

/// The first bytes of every encoded proof.
pub const MAGIC: [u8; 4] = *b"CRNP";
/// The proof format version this build writes and reads.
pub const PROOF_VERSION: u8 = 1;
/// The most levels a compact proof may omit.
pub const COMPACT_LEVELS_MAX: u8 = 32;

const FORM_FULL: u8 = 0;
const TAG_INTERNAL: u8 = 2;
const FORM_COMPACT: u8 = 1;
const HEADER_BYTES: usize = 8;

/// One node of a proof, in pre-order (a node, then its left subtree, then its right).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProofNode {
    /// An empty subtree.
    Empty,
    /// A subtree the proof does not open, given by its hash.
    Hash(Hash),
    /// An internal node; its two children follow.
    Internal,
    /// A leaf, opened: its key path, value hash and blob hash.
    Leaf(Leaf),
}

impl ProofNode {
    fn tag(&self) -> u8 {
        match self {
            ProofNode::Empty => 0,
            ProofNode::Hash(_) => 1,
            ProofNode::Internal => 2,
            ProofNode::Leaf(_) => 3,
        }
    }

    fn payload_bytes(tag: u8) -> usize {
        match tag {
            1 => 32,
            3 => 96,
            _ => 0,
        }
    }
}

/// Nodes in pre-order, stored compactly: a tag byte per node, and the hashes and leaves apart
/// (a `ProofNode` is 97 bytes; most nodes of a proof carry no payload).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Tree {
    tags: Vec<u8>,
    hashes: Vec<Hash>,
    leaves: Vec<Leaf>,
}

impl Tree {
    fn push(&mut self, node: ProofNode) {
        self.tags.push(node.tag());
        match node {
            ProofNode::Hash(h) => self.hashes.push(h),
            ProofNode::Leaf(l) => self.leaves.push(l),
            ProofNode::Empty | ProofNode::Internal => {}
        }
    }

    fn len(&self) -> usize {
        self.tags.len()
    }

    fn cursor(&self) -> Cursor<'_> {
        Cursor {
            tree: self,
            tag: 0,
            hash: 0,
            leaf: 0,
        }
    }

    fn iter(&self) -> impl Iterator<Item = ProofNode> + '_ {
        let mut c = self.cursor();
        (0..self.len()).map(move |_| c.next_node())
    }
}

/// Reads a [`Tree`] front to back.
#[derive(Clone, Copy)]
pub(crate) struct Cursor<'a> {
    tree: &'a Tree,
    tag: usize,
    hash: usize,
    leaf: usize,
}

impl Cursor<'_> {
    /// The next node. The tree's shape was checked when it was built or decoded, so callers
    /// that follow the shape never read past the end.
    pub(crate) fn next_node(&mut self) -> ProofNode {
        let tag = self.tree.tags[self.tag];
        self.tag += 1;
        match tag {
            0 => ProofNode::Empty,
            1 => {
                self.hash += 1;
                ProofNode::Hash(self.tree.hashes[self.hash - 1])
            }
            2 => ProofNode::Internal,
            _ => {
                self.leaf += 1;
                ProofNode::Leaf(self.tree.leaves[self.leaf - 1])
            }
        }
    }

    /// Skips the two subtrees of the internal node just read, copying them into `out` if given.
    fn skip_children(&mut self, mut out: Option<&mut Tree>) {
        let mut pending = 2usize;
        while pending > 0 {
            pending -= 1;
            let node = self.next_node();
            if node == ProofNode::Internal {
                pending += 2;
            }
            if let Some(out) = out.as_deref_mut() {
                out.push(node);
            }
        }
    }
}

/// What a caller asserts about a key, to be checked against a proof and a root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim<'a> {
    /// The key (not its path: the verifier hashes it).
    pub key: &'a [u8],
    /// Present with this value (and blob), or absent.
    pub expect: Expect<'a>,
}

/// The state a [`Claim`] asserts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect<'a> {
    /// The key is not in the table.
    Absent,
    /// The key holds this value, and this blob (by its hash) or none.
    Present {
        /// The value.
        value: &'a [u8],
        /// The blob's hash (`HashKind::blob_hash`), or `None` for a key without a blob.
        blob_hash: Option<Hash>,
    },
}

impl<'a> Claim<'a> {
    /// The key is absent.
    pub fn absent(key: &'a [u8]) -> Claim<'a> {
        Claim {
            key,
            expect: Expect::Absent,
        }
    }

    /// The claim a client makes of an answer it was given: the key holds `value` and no blob,
    /// or, for `None`, the key is absent.
    pub fn answer(key: &'a [u8], value: Option<&'a [u8]>) -> Claim<'a> {
        match value {
            Some(value) => Claim::present(key, value),
            None => Claim::absent(key),
        }
    }

    /// The key holds `value` and no blob.
    pub fn present(key: &'a [u8], value: &'a [u8]) -> Claim<'a> {
        Claim {
            key,
            expect: Expect::Present {
                value,
                blob_hash: None,
            },
        }
    }

    /// The key holds `value` and a blob whose hash is `blob_hash`. (A leaf records "no blob" as
    /// [`ZERO`], so `blob_hash == ZERO` claims no blob.)
    pub fn present_with_blob(key: &'a [u8], value: &'a [u8], blob_hash: Hash) -> Claim<'a> {
        Claim {
            key,
            expect: Expect::Present {
                value,
                blob_hash: Some(blob_hash),
            },
        }
    }
}

/// A multiproof against one root: every node on the paths of the keys it covers, each once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proof {
    kind: HashKind,
    nodes: Tree,
}

/// Builds a [`Proof`] node by node, in pre-order.
#[derive(Clone, Debug)]
pub struct ProofWriter {
    kind: HashKind,
    nodes: Tree,
}

impl ProofWriter {
    /// An empty writer for a trie hashed with `kind`.
    pub fn new(kind: HashKind) -> ProofWriter {
        ProofWriter {
            kind,
            nodes: Tree::default(),
        }
    }

    /// Appends the next node in pre-order.
    pub fn push(&mut self, node: ProofNode) {
        self.nodes.push(node);
    }

    /// The proof, if the nodes form exactly one tree no deeper than a key path.
    pub fn finish(self) -> Result<Proof, BuildError> {
        check_tree(self.nodes.tags.iter().copied(), 0)?;
        Ok(Proof {
            kind: self.kind,
            nodes: self.nodes,
        })
    }
}

impl Proof {
    /// The hash function of the trie the proof is about.
    pub fn kind(&self) -> HashKind {
        self.kind
    }

    /// The nodes, in pre-order.
    pub fn nodes(&self) -> impl Iterator<Item = ProofNode> + '_ {
        self.nodes.iter()
    }

    /// A reader of the nodes in pre-order, for walks that follow the tree's shape.
    pub(crate) fn cursor(&self) -> Cursor<'_> {
        self.nodes.cursor()
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The leaves the proof opens.
    pub fn leaves(&self) -> impl Iterator<Item = &Leaf> {
        self.nodes.leaves.iter()
    }

    /// The root the proof hashes to, or [`VerifyError::MisplacedLeaf`] if a leaf sits off its
    /// key path (no trie has such a proof). Cost: one hash per node.
    pub fn root(&self) -> Result<Root, VerifyError> {
        let mut walk = Walk::new(self.kind, &self.nodes);
        let hash = walk.subtree(0, &ZERO, &[], &[])?;
        Ok(Root {
            kind: self.kind,
            hash,
        })
    }

    /// Checks the claims against `root`: `Ok` only if the proof hashes to the root and shows
    /// every claim true. A tampered proof is [`VerifyError::RootMismatch`] (or
    /// [`VerifyError::MisplacedLeaf`]); a true proof of a false claim names the claim.
    pub fn verify(&self, root: &Root, claims: &[Claim<'_>]) -> Result<(), VerifyError> {
        if root.kind != self.kind {
            return Err(VerifyError::HashKindMismatch {
                root: root.kind,
                proof: self.kind,
            });
        }
        let paths = sorted_paths(self.kind, claims);
        let mut walk = Walk::new(self.kind, &self.nodes);
        let hash = walk.subtree(0, &ZERO, &paths, claims)?;
        if hash != root.hash {
            return Err(VerifyError::RootMismatch);
        }
        walk.claim_error.map_or(Ok(()), Err)
    }

    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES + tree_encoded_len(&self.nodes)
    }

    /// The proof's bytes (`docs/format/proof.md`, full form).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        put_header(&mut out, self.kind, FORM_FULL);
        put_tree(&mut out, &self.nodes);
        out
    }

    /// Decodes a full-form proof. Total: any bytes give a proof or an error.
    pub fn decode(bytes: &[u8]) -> Result<Proof, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let kind = get_header(&mut r, FORM_FULL)?;
        let nodes = get_tree(&mut r, 0)?;
        r.finish()?;
        Ok(Proof { kind, nodes })
    }

    /// The same proof without its top `levels` levels, for a verifier holding a
    /// [`TopWitness`] of those levels: only the subtrees below depth `levels` that the proof
    /// opens remain. `levels` is clamped to 1..=[`COMPACT_LEVELS_MAX`].
    pub fn compact(&self, levels: u8) -> CompactProof {
        let levels = levels.clamp(1, COMPACT_LEVELS_MAX);
        let mut grafts = Vec::new();
        collect_grafts(&mut self.nodes.cursor(), 0, 0, levels, &mut grafts);
        CompactProof {
            kind: self.kind,
            levels,
            grafts,
        }
    }
}

/// Decodes `proof` (full form) and checks `claims` against `root`; see [`Proof::verify`].
pub fn verify(root: &Root, proof: &[u8], claims: &[Claim<'_>]) -> Result<(), VerifyError> {
    Proof::decode(proof)?.verify(root, claims)
}

fn sorted_paths(kind: HashKind, claims: &[Claim<'_>]) -> Vec<(Hash, usize)> {
    let mut paths: Vec<(Hash, usize)> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| (kind.key_path(c.key), i))
        .collect();
    paths.sort_unstable();
    paths
}

/// Recomputes hashes over a pre-order node stream while checking claims on the way.
struct Walk<'a> {
    kind: HashKind,
    nodes: Cursor<'a>,
    /// The first claim found false; reported only if the proof hashes to the root.
    claim_error: Option<VerifyError>,
}

impl<'a> Walk<'a> {
    fn new(kind: HashKind, nodes: &'a Tree) -> Walk<'a> {
        Walk {
            kind,
            nodes: nodes.cursor(),
            claim_error: None,
        }
    }

    fn fail_claim(&mut self, error: VerifyError) {
        if self.claim_error.is_none() {
            self.claim_error = Some(error);
        }
    }

    /// The hash of the subtree starting at the next node, at `depth` under `prefix`, checking
    /// the claims (sorted by path) whose paths lead into it.
    fn subtree(
        &mut self,
        depth: usize,
        prefix: &Hash,
        paths: &[(Hash, usize)],
        claims: &[Claim<'_>],
    ) -> Result<Hash, VerifyError> {
        let node = self.nodes.next_node();
        match node {
            ProofNode::Empty => {
                for &(_, i) in paths {
                    if matches!(claims[i].expect, Expect::Present { .. }) {
                        self.fail_claim(VerifyError::Absent { claim: i });
                    }
                }
                Ok(ZERO)
            }
            ProofNode::Hash(h) => {
                if let Some(&(_, i)) = paths.iter().min_by_key(|p| p.1) {
                    self.fail_claim(VerifyError::NotCovered { claim: i });
                }
                Ok(h)
            }
            ProofNode::Leaf(leaf) => {
                if common_prefix_bits(&leaf.key_path, prefix) < depth {
                    return Err(VerifyError::MisplacedLeaf);
                }
                for &(path, i) in paths {
                    self.check_leaf_claim(&leaf, path, i, &claims[i]);
                }
                Ok(leaf.hash(self.kind))
            }
            ProofNode::Internal => {
                debug_assert!(depth < KEY_PATH_BITS);
                let split = paths.partition_point(|(p, _)| !bit(p, depth));
                let left = self.subtree(depth + 1, prefix, &paths[..split], claims)?;
                let mut right_prefix = *prefix;
                right_prefix[depth / 8] |= 0x80 >> (depth % 8);
                let right = self.subtree(depth + 1, &right_prefix, &paths[split..], claims)?;
                Ok(self.kind.node(&left, &right))
            }
        }
    }

    fn check_leaf_claim(&mut self, leaf: &Leaf, path: Hash, i: usize, claim: &Claim<'_>) {
        match claim.expect {
            Expect::Absent if path == leaf.key_path => {
                self.fail_claim(VerifyError::Present { claim: i })
            }
            Expect::Absent => {}
            Expect::Present { .. } if path != leaf.key_path => {
                self.fail_claim(VerifyError::Absent { claim: i })
            }
            Expect::Present { value, blob_hash } => {
                let same = self.kind.value_hash(value) == leaf.value_hash
                    && blob_hash.unwrap_or(ZERO) == leaf.blob_hash;
                if !same {
                    self.fail_claim(VerifyError::ValueMismatch { claim: i });
                }
            }
        }
    }
}

/// A verifier's copy of a trie's top levels, checked once against the root, so that
/// [`CompactProof`]s need not repeat them.
#[derive(Clone, Debug)]
pub struct TopWitness {
    root: Root,
    levels: u8,
    /// The top as a tree; index 0 is the root.
    nodes: Vec<TopNode>,
}

#[derive(Clone, Copy, Debug)]
enum TopNode {
    Empty,
    Leaf(Leaf),
    Internal {
        left: u32,
        right: u32,
    },
    /// A node at depth `levels` whose subtree a compact proof may open.
    Frontier(Hash),
}

impl TopWitness {
    /// Checks that `top` (a full proof opening every node above depth `levels` and none below)
    /// hashes to `root`, and keeps it. Memory: about 40 bytes per node, at most `2^(levels+1)`.
    pub fn new(root: &Root, top: &Proof, levels: u8) -> Result<TopWitness, VerifyError> {
        if levels == 0 || levels > COMPACT_LEVELS_MAX {
            return Err(VerifyError::WitnessShape(levels));
        }
        let mut nodes = Vec::with_capacity(top.nodes.len());
        build_top(&mut top.nodes.cursor(), 0, levels as usize, &mut nodes)?;
        top.verify(root, &[])?;
        Ok(TopWitness {
            root: *root,
            levels,
            nodes,
        })
    }

    /// The root the witness was checked against.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The levels it holds.
    pub fn levels(&self) -> u8 {
        self.levels
    }

    /// Follows `path` down the top: the node where it leaves the witness (a leaf, an empty
    /// subtree or a frontier node) and its depth.
    fn descend(&self, path: &Hash) -> (TopNode, usize) {
        let mut at = 0usize;
        let mut depth = 0usize;
        loop {
            match self.nodes[at] {
                TopNode::Internal { left, right } => {
                    at = if bit(path, depth) { right } else { left } as usize;
                    depth += 1;
                }
                end => return (end, depth),
            }
        }
    }

    /// Checks claims against a compact proof and this witness's root; the same guarantees as
    /// [`Proof::verify`].
    pub fn verify(&self, proof: &CompactProof, claims: &[Claim<'_>]) -> Result<(), VerifyError> {
        if proof.kind != self.root.kind {
            return Err(VerifyError::HashKindMismatch {
                root: self.root.kind,
                proof: proof.kind,
            });
        }
        if proof.levels != self.levels {
            return Err(VerifyError::WitnessLevels {
                witness: self.levels,
                proof: proof.levels,
            });
        }
        let levels = self.levels as usize;
        let paths = sorted_paths(self.root.kind, claims);
        let mut first_claim_error: Option<VerifyError> = None;
        let mut note = |e: VerifyError| {
            if first_claim_error.is_none() {
                first_claim_error = Some(e);
            }
        };
        let mut below = 0; // paths[..below] are settled
        for (position, nodes) in &proof.grafts {
            let prefix = position_prefix(*position, self.levels);
            let (TopNode::Frontier(expected), _) = self.descend(&prefix) else {
                return Err(VerifyError::Graft {
                    position: *position,
                });
            };
            // Claims before this graft's position end in the top or are not covered.
            let start =
                below + paths[below..].partition_point(|(p, _)| prefix_of(p, levels) < *position);
            self.settle_in_top(&paths[below..start], claims, &mut note);
            let end =
                start + paths[start..].partition_point(|(p, _)| prefix_of(p, levels) == *position);
            let mut walk = Walk::new(self.root.kind, nodes);
            let hash = walk.subtree(levels, &prefix, &paths[start..end], claims)?;
            if hash != expected {
                return Err(VerifyError::Graft {
                    position: *position,
                });
            }
            if let Some(e) = walk.claim_error {
                note(e);
            }
            below = end;
        }
        self.settle_in_top(&paths[below..], claims, &mut note);
        first_claim_error.map_or(Ok(()), Err)
    }

    /// Checks claims whose paths no graft covers: they must end in the top itself.
    fn settle_in_top(
        &self,
        paths: &[(Hash, usize)],
        claims: &[Claim<'_>],
        note: &mut impl FnMut(VerifyError),
    ) {
        for &(path, i) in paths {
            match self.descend(&path) {
                (TopNode::Empty, _) => {
                    if matches!(claims[i].expect, Expect::Present { .. }) {
                        note(VerifyError::Absent { claim: i });
                    }
                }
                (TopNode::Leaf(leaf), _) => {
                    let empty = Tree::default();
                    let mut walk = Walk::new(self.root.kind, &empty);
                    walk.check_leaf_claim(&leaf, path, i, &claims[i]);
                    if let Some(e) = walk.claim_error {
                        note(e);
                    }
                }
                _ => note(VerifyError::NotCovered { claim: i }),
            }
        }
    }
}

fn build_top(
    proof: &mut Cursor<'_>,
    depth: usize,
    levels: usize,
    out: &mut Vec<TopNode>,
) -> Result<u32, VerifyError> {
    let node = proof.next_node();
    let index = out.len() as u32;
    match node {
        ProofNode::Internal if depth < levels => {
            out.push(TopNode::Empty); // replaced below, once the children's indices are known
            let left = build_top(proof, depth + 1, levels, out)?;
            let right = build_top(proof, depth + 1, levels, out)?;
            out[index as usize] = TopNode::Internal { left, right };
        }
        ProofNode::Hash(h) if depth == levels => out.push(TopNode::Frontier(h)),
        ProofNode::Empty => out.push(TopNode::Empty),
        ProofNode::Leaf(l) => out.push(TopNode::Leaf(l)),
        _ => return Err(VerifyError::WitnessShape(levels as u8)),
    }
    Ok(index)
}

/// The first `levels` bits of `path` as an integer.
fn prefix_of(path: &Hash, levels: usize) -> u32 {
    let head = u64::from_be_bytes(path[..8].try_into().expect("8 bytes"));
    (head >> (64 - levels)) as u32
}

/// A key path whose first `levels` bits are `position` and the rest zero.
fn position_prefix(position: u32, levels: u8) -> Hash {
    let mut out = ZERO;
    let head = (position as u64) << (64 - levels as u32);
    out[..8].copy_from_slice(&head.to_be_bytes());
    out
}

/// A proof without its top levels: the subtrees at depth `levels` it opens, by position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactProof {
    kind: HashKind,
    levels: u8,
    grafts: Vec<(u32, Tree)>,
}

impl CompactProof {
    /// The hash function of the trie.
    pub fn kind(&self) -> HashKind {
        self.kind
    }

    /// The levels omitted.
    pub fn levels(&self) -> u8 {
        self.levels
    }

    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        let grafts: usize = self
            .grafts
            .iter()
            .map(|(_, nodes)| 4 + tree_encoded_len(nodes))
            .sum();
        HEADER_BYTES + 1 + 4 + grafts
    }

    /// The proof's bytes (`docs/format/proof.md`, compact form).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        put_header(&mut out, self.kind, FORM_COMPACT);
        out.push(self.levels);
        out.extend_from_slice(&(self.grafts.len() as u32).to_le_bytes());
        for (position, nodes) in &self.grafts {
            out.extend_from_slice(&position.to_le_bytes());
            put_tree(&mut out, nodes);
        }
        out
    }

    /// Decodes a compact proof. Total.
    pub fn decode(bytes: &[u8]) -> Result<CompactProof, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let kind = get_header(&mut r, FORM_COMPACT)?;
        let levels = r.take(1, "levels")?[0];
        if levels == 0 || levels > COMPACT_LEVELS_MAX {
            return Err(DecodeError::Compact("levels out of range"));
        }
        let count = r.u32("graft count")? as usize;
        // Each graft takes at least 4 + 4 + 1 bytes: a bound before allocating.
        if count > r.remaining() / 9 {
            return Err(DecodeError::Truncated {
                what: "grafts",
                needed: count.saturating_mul(9).saturating_sub(r.remaining()),
            });
        }
        let mut grafts: Vec<(u32, Tree)> = Vec::with_capacity(count);
        for _ in 0..count {
            let position = r.u32("graft position")?;
            if levels < 32 && position >> levels != 0 {
                return Err(DecodeError::Compact("graft position beyond its level"));
            }
            if grafts.last().is_some_and(|(p, _)| *p >= position) {
                return Err(DecodeError::Compact("graft positions not increasing"));
            }
            let nodes = get_tree(&mut r, levels as usize)?;
            grafts.push((position, nodes));
        }
        r.finish()?;
        Ok(CompactProof {
            kind,
            levels,
            grafts,
        })
    }
}

fn collect_grafts(
    nodes: &mut Cursor<'_>,
    depth: usize,
    position: u32,
    levels: u8,
    out: &mut Vec<(u32, Tree)>,
) {
    let node = nodes.next_node();
    if depth == levels as usize {
        if node == ProofNode::Internal {
            let mut graft = Tree::default();
            graft.push(node);
            nodes.skip_children(Some(&mut graft));
            out.push((position, graft));
        }
        return;
    }
    if node == ProofNode::Internal {
        collect_grafts(nodes, depth + 1, position << 1, levels, out);
        collect_grafts(nodes, depth + 1, (position << 1) | 1, levels, out);
    }
}

/// Checks that tags (one per node) form exactly one tree rooted at `depth`, with no internal
/// node at a depth a key path cannot branch at. Needs only the tags, so a decoder runs it
/// before copying any payload.
fn check_tree(tags: impl IntoIterator<Item = u8>, depth: usize) -> Result<(), DecodeError> {
    let mut pending = vec![depth];
    for tag in tags {
        let Some(depth) = pending.pop() else {
            return Err(DecodeError::Tree("nodes after the tree ends"));
        };
        if tag == TAG_INTERNAL {
            if depth >= KEY_PATH_BITS {
                return Err(DecodeError::TooDeep);
            }
            pending.push(depth + 1);
            pending.push(depth + 1);
        }
    }
    if !pending.is_empty() {
        return Err(DecodeError::Tree("the tree ends early"));
    }
    Ok(())
}

fn tree_encoded_len(nodes: &Tree) -> usize {
    4 + nodes.len().div_ceil(4) + nodes.hashes.len() * 32 + nodes.leaves.len() * 96
}

fn put_header(out: &mut Vec<u8>, kind: HashKind, form: u8) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[PROOF_VERSION, kind.code(), form, 0]);
}

fn put_tree(out: &mut Vec<u8>, nodes: &Tree) {
    out.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
    for chunk in nodes.tags.chunks(4) {
        let mut byte = 0u8;
        for (i, tag) in chunk.iter().enumerate() {
            byte |= tag << (2 * i);
        }
        out.push(byte);
    }
    for n in nodes.iter() {
        match n {
            ProofNode::Hash(h) => out.extend_from_slice(&h),
            ProofNode::Leaf(l) => {
                out.extend_from_slice(&l.key_path);
                out.extend_from_slice(&l.value_hash);
                out.extend_from_slice(&l.blob_hash);
            }
            ProofNode::Empty | ProofNode::Internal => {}
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                what,
                needed: n - self.remaining(),
            });
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn hash(&mut self, what: &'static str) -> Result<Hash, DecodeError> {
        let b = self.take(32, what)?;
        let mut h = ZERO;
        h.copy_from_slice(b);
        Ok(h)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}

fn get_header(r: &mut Reader<'_>, form: u8) -> Result<HashKind, DecodeError> {
    if r.take(4, "magic")? != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let h = r.take(4, "header")?;
    if h[0] != PROOF_VERSION {
        return Err(DecodeError::UnsupportedVersion(h[0]));
    }
    let kind = HashKind::from_code(h[1]).ok_or(DecodeError::UnknownHashKind(h[1]))?;
    if h[2] != form {
        return Err(DecodeError::Form(h[2]));
    }
    if h[3] != 0 {
        return Err(DecodeError::Reserved("header byte 7"));
    }
    Ok(kind)
}

fn get_tree(r: &mut Reader<'_>, depth: usize) -> Result<Tree, DecodeError> {
    let count = r.u32("node count")? as usize;
    let packed = r.take(count.div_ceil(4), "node tags")?;
    if !count.is_multiple_of(4) && packed[count / 4] >> (2 * (count % 4)) != 0 {
        return Err(DecodeError::Reserved("tag padding"));
    }
    let tag = |i: usize| (packed[i / 4] >> (2 * (i % 4))) & 3;
    // The shape and the payload size first, from the tags alone: nothing is allocated for a
    // stream that is not one tree or whose payloads are missing.
    check_tree((0..count).map(tag), depth)?;
    let payload: usize = (0..count).map(|i| ProofNode::payload_bytes(tag(i))).sum();
    if payload > r.remaining() {
        return Err(DecodeError::Truncated {
            what: "node payloads",
            needed: payload - r.remaining(),
        });
    }
    let mut tree = Tree {
        tags: Vec::with_capacity(count),
        ..Tree::default()
    };
    for i in 0..count {
        let node = match tag(i) {
            0 => ProofNode::Empty,
            1 => ProofNode::Hash(r.hash("hash node")?),
            2 => ProofNode::Internal,
            _ => ProofNode::Leaf(Leaf {
                key_path: r.hash("leaf key path")?,
                value_hash: r.hash("leaf value hash")?,
                blob_hash: r.hash("leaf blob hash")?,
            }),
        };
        tree.push(node);
    }
    Ok(tree)
}

//! The paged Merkle trie of an authenticated table: its pages, their format, and the work of a
//! commit (rehash the dirty paths once, bottom up) and of a proof.
//!
//! Owns: [`PageId`], [`Page`] and its encoding (`docs/format/trie.md`, "Pages"), [`TrieState`]
//! (one version of a table's trie: root, retained top pages, the segments of the page log it
//! reaches), and [`commit`], [`load_paths`], [`prove`], [`top_witness`], [`save_retained`].
//! May call: `pagelog` (page pointers, the segments a version reaches, appending records;
//! `cairn_proof` computes every hash). Must never touch: files, runs or tables; pages are
//! read through a [`PageStore`] (the authentication module's, over the session's page log).
//!
//! Where pages are: each page below the retained levels is a record of the page log, found
//! through the pointer its parent page keeps for each internal node of its bottom row. A
//! commit appends every page it changed, deepest first, so that each parent is written with
//! its children's new pointers; the records of the old versions become dead bytes in their
//! segments (`pagelog`).
//!
//! Layout: a page holds the nodes at depths `6L+1 ..= 6L+6` below one node at depth `6L` (page
//! level `L`, NOMT's depth-6 rootless subtree): 126 slots, `2^r − 2 + bits` for relative depth
//! `r` in 1..=6. A page exists only if its parent node is internal; a missing page below an
//! internal node is corruption. The root node (depth 0) lives in the [`TrieState`].
//!
//! Bounds, for a commit of `k` changed keys into a trie of `n` leaves (random key paths): about
//! `k·(log₂ n − log₂ k + 2)` node hashes; pages read: those on the changed paths below the
//! retained levels not already loaded, in one round of batched reads per page level (about
//! `⌈(log₂ n + 1.3)/6⌉ − retained` rounds, two at 10⁸ keys with three retained levels; each
//! round in batches of at most 4 MiB, `PageLog::read_each`); memory: the pages touched (at
//! most `k` per page level) plus the retained levels.
//!
//! Threads: a commit of at least [`PARALLEL_MIN`] changes with some in each half of the key
//! space (by the first bit), on a machine with two cores, does its work below the retained
//! levels (reading and checking the pages, rehashing the subtrees) on two threads, one half
//! each, with no shared page ([`below_in_halves`]); a warm-up of as many paths reads on two
//! threads too. The retained levels, the appends and the cleaning stay on the caller's
//! thread, and the result is the same either way.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_proof::hash::{bit, common_prefix_bits};
use cairn_proof::{Hash, HashKind, Leaf, ProofNode, ProofWriter, ZERO};

use crate::error::{Error, Result};
use crate::pagelog::{self, Appender, PageLoc, Segments, Stream, VisitRecord, LOC_BYTES};

/// Trie levels per page.
pub(crate) const PAGE_DEPTH: usize = 6;
/// Node slots per page: 2 + 4 + … + 64.
pub(crate) const PAGE_SLOTS: usize = 126;
/// Page levels in a trie of 256-bit key paths (the last one partly used).
pub(crate) const PAGE_LEVELS: usize = 43;
/// The version byte of an encoded page (`docs/format/trie.md`, "Pages"): 3 stores a leaf
/// without its hash, and without its blob hash when it has no blob.
const PAGE_FORMAT: u8 = 3;
/// The previous page format, still read: every leaf with its hash and blob hash (128 bytes).
const PAGE_FORMAT_V2: u8 = 2;
/// Bytes of an encoded page's slot kinds (2 bits per slot).
const KIND_BYTES: usize = 32;

/// A page's place: its level and the key-path bits above it (the first `6 × level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PageId {
    level: u8,
    prefix: Hash,
}

impl PageId {
    /// The page at `level` on `path`.
    pub(crate) fn on_path(path: &Hash, level: usize) -> PageId {
        debug_assert!(level < PAGE_LEVELS);
        PageId {
            level: level as u8,
            prefix: mask(path, level * PAGE_DEPTH),
        }
    }

    pub(crate) fn level(&self) -> usize {
        self.level as usize
    }

    /// The page above this one (at level `level − 1`) and the index in its bottom row of
    /// the node this page hangs below. `None` for the top page.
    fn parent(&self) -> Option<(PageId, usize)> {
        let level = self.level().checked_sub(1)?;
        let mut index = 0usize;
        for i in level * PAGE_DEPTH..self.level() * PAGE_DEPTH {
            index = (index << 1) | bit(&self.prefix, i) as usize;
        }
        Some((PageId::on_path(&self.prefix, level), index))
    }

    /// The page's key in the page store: the level, then its prefix bits packed big-endian
    /// (trailing bits zero). Keys sort by level first, so the retained levels are one range.
    pub(crate) fn key(&self) -> Vec<u8> {
        let bytes = (self.level() * PAGE_DEPTH).div_ceil(8);
        let mut key = Vec::with_capacity(1 + bytes);
        key.push(self.level);
        key.extend_from_slice(&self.prefix[..bytes]);
        key
    }

    /// Whether `key` is this page's store key ([`PageId::key`]), without building it.
    fn key_is(&self, key: &[u8]) -> bool {
        let bytes = (self.level() * PAGE_DEPTH).div_ceil(8);
        key.len() == 1 + bytes && key[0] == self.level && key[1..] == self.prefix[..bytes]
    }

    /// The page a store key names, if it is one (total).
    pub(crate) fn from_key(key: &[u8]) -> Option<PageId> {
        let (&level, rest) = key.split_first()?;
        let bits = level as usize * PAGE_DEPTH;
        if level as usize >= PAGE_LEVELS || rest.len() != bits.div_ceil(8) {
            return None;
        }
        let mut prefix = ZERO;
        prefix[..rest.len()].copy_from_slice(rest);
        (mask(&prefix, bits) == prefix).then_some(PageId { level, prefix })
    }
}

/// Hashes page ids for the maps of pages: their prefixes are key-path bits, already uniformly
/// random, so folding them with one multiply per 8 bytes is enough (SipHash cost 6% of a commit).
#[derive(Default, Clone, Copy)]
pub(crate) struct PageIdHasher(u64);

impl Hasher for PageIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }
}

/// The hasher of every map keyed by [`PageId`].
pub(crate) type PageIdHash = BuildHasherDefault<PageIdHasher>;

/// `path` with every bit from `bits` on cleared.
fn mask(path: &Hash, bits: usize) -> Hash {
    let mut out = ZERO;
    let whole = bits.min(256) / 8;
    out[..whole].copy_from_slice(&path[..whole]);
    if whole < 32 && !bits.is_multiple_of(8) {
        out[whole] = path[whole] & (0xFF << (8 - bits % 8));
    }
    out
}

/// `path` with bit `i` set to `value`.
fn with_bit(path: &Hash, i: usize, value: bool) -> Hash {
    let mut out = *path;
    if value {
        out[i / 8] |= 0x80 >> (i % 8);
    } else {
        out[i / 8] &= !(0x80 >> (i % 8));
    }
    out
}

/// The slot of the node at `depth` (at least 1) on `path`, inside its page.
fn slot(depth: usize, path: &Hash) -> usize {
    let level = (depth - 1) / PAGE_DEPTH;
    let rel = depth - level * PAGE_DEPTH;
    let mut bits = 0usize;
    for i in level * PAGE_DEPTH..depth {
        bits = (bits << 1) | bit(path, i) as usize;
    }
    (1 << rel) - 2 + bits
}

/// A node of the trie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Empty,
    Internal(Hash),
    /// A leaf and its hash.
    Leaf(Leaf, Hash),
}

/// The hash of an encoded root node (as a snapshot records it): the state root.
pub(crate) fn root_hash_of_node(kind: HashKind, bytes: &[u8]) -> Result<Hash> {
    Ok(Node::decode(kind, bytes)?.hash())
}

impl Node {
    pub(crate) fn hash(&self) -> Hash {
        match self {
            Node::Empty => ZERO,
            Node::Internal(h) | Node::Leaf(_, h) => *h,
        }
    }

    fn leaf(kind: HashKind, leaf: Leaf) -> Node {
        Node::Leaf(leaf, leaf.hash(kind))
    }
}

impl Node {
    /// The node's bytes in snapshot metadata: a kind byte (0 empty, 1 internal, 2 leaf), then
    /// the hash of an internal node or a leaf, then a leaf's key path, value hash and blob
    /// hash. At most 129 bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Node::Empty => vec![0],
            Node::Internal(h) => [&[1][..], h].concat(),
            Node::Leaf(l, h) => [&[2][..], h, &l.key_path, &l.value_hash, &l.blob_hash].concat(),
        }
    }

    /// Decodes [`Node::encode`]'s bytes, checking a leaf's hash (total).
    pub(crate) fn decode(kind: HashKind, bytes: &[u8]) -> Result<Node> {
        let bad = |detail: &str| Error::corrupt("trie root", detail.to_string());
        let hash = |at: usize| -> Hash { bytes[at..at + 32].try_into().expect("32 bytes") };
        match (bytes.first(), bytes.len()) {
            (Some(0), 1) => Ok(Node::Empty),
            (Some(1), 33) => Ok(Node::Internal(hash(1))),
            (Some(2), 129) => {
                let leaf = Leaf {
                    key_path: hash(33),
                    value_hash: hash(65),
                    blob_hash: hash(97),
                };
                if leaf.hash(kind) != hash(1) {
                    return Err(bad("the leaf does not hash to its recorded hash"));
                }
                Ok(Node::Leaf(leaf, hash(1)))
            }
            _ => Err(bad("bad kind or length")),
        }
    }
}

/// The 126 nodes below one node at a depth divisible by 6. In memory: 126 kinds and hashes
/// (about 4.2 KB) plus the leaves' contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Page {
    kinds: [u8; PAGE_SLOTS],
    hashes: Box<[Hash; PAGE_SLOTS]>,
    /// The leaves, by slot.
    leaves: Vec<(u8, Leaf)>,
    /// Where the page below each internal node of the bottom row is, by bottom-row index
    /// (0..64), sorted. Kept in step by commits; every internal bottom-row node has one once
    /// its page is written.
    children: Vec<(u8, PageLoc)>,
}

const KIND_EMPTY: u8 = 0;
const KIND_INTERNAL: u8 = 1;
const KIND_LEAF: u8 = 2;
/// On disk only (page format 3): a leaf with a blob, which stores its blob hash. In memory
/// every leaf is [`KIND_LEAF`].
const KIND_LEAF_BLOB: u8 = 3;

impl Page {
    pub(crate) fn empty() -> Page {
        Page {
            kinds: [KIND_EMPTY; PAGE_SLOTS],
            hashes: Box::new([ZERO; PAGE_SLOTS]),
            leaves: Vec::new(),
            children: Vec::new(),
        }
    }

    /// The pointer to the page below bottom-row node `index`.
    fn child(&self, index: usize) -> Option<PageLoc> {
        self.children
            .binary_search_by_key(&(index as u8), |(i, _)| *i)
            .ok()
            .map(|at| self.children[at].1)
    }

    /// Sets (or with `None` clears) the pointer to the page below bottom-row node `index`.
    fn set_child(&mut self, index: usize, loc: Option<PageLoc>) {
        match (
            self.children
                .binary_search_by_key(&(index as u8), |(i, _)| *i),
            loc,
        ) {
            (Ok(at), Some(loc)) => self.children[at].1 = loc,
            (Ok(at), None) => {
                self.children.remove(at);
            }
            (Err(at), Some(loc)) => self.children.insert(at, (index as u8, loc)),
            (Err(_), None) => {}
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.kinds.iter().all(|&k| k == KIND_EMPTY)
    }

    fn node(&self, slot: usize) -> Node {
        match self.kinds[slot] {
            KIND_INTERNAL => Node::Internal(self.hashes[slot]),
            KIND_LEAF => Node::Leaf(self.leaf(slot), self.hashes[slot]),
            _ => Node::Empty,
        }
    }

    /// The leaf in leaf slot `slot` (the leaves are sorted by slot).
    fn leaf(&self, slot: usize) -> Leaf {
        let at = self.leaves.partition_point(|(s, _)| (*s as usize) < slot);
        match self.leaves.get(at) {
            Some((s, leaf)) if *s as usize == slot => *leaf,
            _ => unreachable!("a leaf slot has its leaf"),
        }
    }

    /// Sets a slot; returns whether it changed.
    fn set(&mut self, slot: usize, node: Node) -> bool {
        let old = self.kinds[slot];
        match node {
            Node::Empty if old == KIND_EMPTY => return false,
            Node::Internal(h) if old == KIND_INTERNAL && self.hashes[slot] == h => return false,
            Node::Leaf(..) if old == KIND_LEAF && self.node(slot) == node => return false,
            _ => {}
        }
        if old == KIND_LEAF {
            let at = self.leaves.partition_point(|(s, _)| (*s as usize) < slot);
            self.leaves.remove(at);
        }
        let (kind, hash) = match node {
            Node::Empty => (KIND_EMPTY, ZERO),
            Node::Internal(h) => (KIND_INTERNAL, h),
            Node::Leaf(leaf, h) => {
                let at = self.leaves.partition_point(|(s, _)| (*s as usize) < slot);
                self.leaves.insert(at, (slot as u8, leaf));
                (KIND_LEAF, h)
            }
        };
        self.kinds[slot] = kind;
        self.hashes[slot] = hash;
        true
    }

    /// Bytes of memory the page holds, for the retention budget.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Page>()
            + PAGE_SLOTS * 32
            + self.leaves.len() * 97
            + self.children.len() * std::mem::size_of::<(u8, PageLoc)>()
    }

    /// The page's bytes in the page log (format 3): a version byte, 2 bits of kind per slot
    /// (empty, internal, leaf, leaf with a blob), then each non-empty slot in order: an
    /// internal node's hash (32 bytes), or a leaf's key path and value hash (64 bytes), and a
    /// leaf with a blob's blob hash too (96 bytes); then, for each internal node of the bottom
    /// row in order, the pointer to the page below it (14 bytes). A leaf's hash is not stored:
    /// decoding computes it. Errors if a bottom-row node has no pointer (a commit that lost
    /// track of a page: the table is then broken, never written wrong). Commits encode into
    /// one reused buffer ([`Page::encode_into`]).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        self.encode_with(|index| self.child(index))
    }

    /// The page's encoding (see `Page::encode`) with the pointers `child(index)` gives
    /// instead of the page's own.
    fn encode_with(&self, child: impl Fn(usize) -> Option<PageLoc>) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(1 + KIND_BYTES + PAGE_SLOTS * 32);
        self.encode_into(&mut out, child)?;
        Ok(out)
    }

    /// [`Page::encode_with`] into `out` (cleared first), so that one buffer serves many pages.
    fn encode_into(
        &self,
        out: &mut Vec<u8>,
        child: impl Fn(usize) -> Option<PageLoc>,
    ) -> Result<()> {
        out.clear();
        out.push(PAGE_FORMAT);
        // The kinds are written once the slots are (a leaf's kind says whether it has a blob).
        out.extend_from_slice(&[0u8; KIND_BYTES]);
        let mut kinds = [0u8; KIND_BYTES];
        let mut leaves = self.leaves.iter();
        for (i, &k) in self.kinds.iter().enumerate() {
            let code = match k {
                KIND_INTERNAL => {
                    out.extend_from_slice(&self.hashes[i]);
                    KIND_INTERNAL
                }
                KIND_LEAF => {
                    let (_, leaf) = leaves.next().expect("a leaf per leaf slot");
                    out.extend_from_slice(&leaf.key_path);
                    out.extend_from_slice(&leaf.value_hash);
                    if leaf.blob_hash == ZERO {
                        KIND_LEAF
                    } else {
                        out.extend_from_slice(&leaf.blob_hash);
                        KIND_LEAF_BLOB
                    }
                }
                _ => KIND_EMPTY,
            };
            kinds[i / 4] |= code << (2 * (i % 4));
        }
        out[1..1 + KIND_BYTES].copy_from_slice(&kinds);
        for index in 0..64 {
            if self.kinds[PAGE_SLOTS - 64 + index] == KIND_INTERNAL {
                let loc = child(index).ok_or_else(|| {
                    Error::corrupt(
                        "trie",
                        "an internal node of a bottom row has no page pointer",
                    )
                })?;
                loc.encode_into(out);
            }
        }
        Ok(())
    }

    /// Decodes page `id` from the page log, in format 3 (`Page::encode`) or 2 (every leaf
    /// with its hash and its blob hash, 128 bytes), computing each leaf's hash with `kind`
    /// (one hash per leaf; in format 2 it must equal the stored one). Total: refuses a wrong
    /// version, a bad kind, a node under a slot that is not internal, a leaf off its key path,
    /// a format-3 leaf with a blob whose blob hash is zero (its encoding would not be the
    /// only one), a bad pointer, a short or long buffer. Internal hashes are not checked here
    /// (the record's checksum covers the bytes, and the page's top is checked against its
    /// parent when it is read).
    pub(crate) fn decode(kind: HashKind, id: &PageId, bytes: &[u8]) -> Result<Page> {
        let bad = |detail: &str| Error::corrupt("trie page", detail.to_string());
        if bytes.len() < 1 + KIND_BYTES {
            return Err(bad("shorter than its header"));
        }
        let v2 = match bytes[0] {
            PAGE_FORMAT => false,
            PAGE_FORMAT_V2 => true,
            _ => return Err(bad("unknown page format version")),
        };
        let mut page = Page::empty();
        let mut at = 1 + KIND_BYTES;
        let take = |at: &mut usize| -> Result<Hash> {
            let h: Hash = bytes
                .get(*at..*at + 32)
                .ok_or_else(|| bad("truncated"))?
                .try_into()
                .expect("32 bytes");
            *at += 32;
            Ok(h)
        };
        for i in 0..PAGE_SLOTS {
            let code = (bytes[1 + i / 4] >> (2 * (i % 4))) & 3;
            if code != KIND_EMPTY && i >= 2 && page.kinds[(i - 2) / 2] != KIND_INTERNAL {
                return Err(bad("a node below a slot that is not internal"));
            }
            match code {
                KIND_EMPTY => {}
                KIND_INTERNAL => {
                    page.kinds[i] = KIND_INTERNAL;
                    page.hashes[i] = take(&mut at)?;
                }
                _ => {
                    if v2 && code == KIND_LEAF_BLOB {
                        return Err(bad("unknown slot kind"));
                    }
                    let stored = if v2 { Some(take(&mut at)?) } else { None };
                    let key_path = take(&mut at)?;
                    let value_hash = take(&mut at)?;
                    let blob_hash = if v2 || code == KIND_LEAF_BLOB {
                        take(&mut at)?
                    } else {
                        ZERO
                    };
                    if !v2 && code == KIND_LEAF_BLOB && blob_hash == ZERO {
                        return Err(bad("a leaf with a blob whose blob hash is zero"));
                    }
                    let leaf = Leaf {
                        key_path,
                        value_hash,
                        blob_hash,
                    };
                    let (depth, position) = slot_position(id, i);
                    if common_prefix_bits(&leaf.key_path, &position) < depth {
                        return Err(bad("a leaf off its key path"));
                    }
                    let hash = leaf.hash(kind);
                    if stored.is_some_and(|h| h != hash) {
                        return Err(bad("a leaf that does not hash to its stored hash"));
                    }
                    page.kinds[i] = KIND_LEAF;
                    page.hashes[i] = hash;
                    page.leaves.push((i as u8, leaf));
                }
            }
        }
        if (bytes[KIND_BYTES] >> 4) != 0 {
            return Err(bad("padding bits set"));
        }
        for index in 0..64 {
            if page.kinds[PAGE_SLOTS - 64 + index] == KIND_INTERNAL {
                let loc = bytes
                    .get(at..at + LOC_BYTES)
                    .ok_or_else(|| bad("truncated"))?;
                page.children.push((index as u8, PageLoc::decode(loc)?));
                at += LOC_BYTES;
            }
        }
        if at != bytes.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(page)
    }
}

/// The depth and a path (its first `depth` bits) of slot `i` of page `id`.
fn slot_position(id: &PageId, i: usize) -> (usize, Hash) {
    let rel = (usize::BITS - (i + 2).leading_zeros() - 1) as usize; // floor(log2(i + 2))
    let bits = i + 2 - (1 << rel);
    let base = id.level() * PAGE_DEPTH;
    let mut path = id.prefix;
    for j in 0..rel {
        path = with_bit(&path, base + j, (bits >> (rel - 1 - j)) & 1 == 1);
    }
    (base + rel, path)
}

/// The pages below page `id`: one per internal node of its bottom row, with that node's hash
/// and the pointer to the page (`None` where the page keeps none: a commit not written yet).
fn child_pages<'a>(
    id: &'a PageId,
    page: &'a Page,
) -> impl Iterator<Item = (PageId, Hash, Option<PageLoc>)> + 'a {
    (0..64).filter_map(move |index| match page.node(PAGE_SLOTS - 64 + index) {
        Node::Internal(h) => {
            let (_, path) = slot_position(id, PAGE_SLOTS - 64 + index);
            Some((PageId::on_path(&path, id.level() + 1), h, page.child(index)))
        }
        _ => None,
    })
}

/// One version of a table's trie: cheap to clone (the retained pages and the segment list are
/// shared until either side changes them).
#[derive(Clone, Debug)]
pub(crate) struct TrieState {
    pub(crate) kind: HashKind,
    pub(crate) root: Node,
    /// Commits that changed the trie's contents, counting from the table's creation.
    pub(crate) version: u64,
    /// Page levels kept in memory: `0..retained_levels`.
    pub(crate) retained_levels: usize,
    pub(crate) retained:
        imbl::GenericHashMap<PageId, Arc<Page>, PageIdHash, imbl::shared_ptr::DefaultSharedPtr>,
    /// The segments of the page log this version's records are in, with its bytes in each.
    pub(crate) segments: Segments,
}

impl TrieState {
    pub(crate) fn new(kind: HashKind, retained_levels: usize) -> TrieState {
        TrieState {
            kind,
            root: Node::Empty,
            version: 0,
            retained_levels: retained_levels.clamp(1, PAGE_LEVELS),
            retained: Default::default(),
            segments: Segments::default(),
        }
    }

    /// A trie version read back from a snapshot: its root node, the pointer to its top page
    /// (`None` when the root is not internal) and the segments it reaches. Reads the retained
    /// levels, one round of batched reads per level, and checks that each page hangs below an
    /// internal node that hashes its top (one hash per page): a lost, stale or stray page is
    /// corruption.
    /// The segment holding the top page (the snapshot's own, which [`save_retained`] wrote)
    /// is let go once read: the version holds those pages in memory.
    pub(crate) fn restore(
        kind: HashKind,
        retained_levels: usize,
        version: u64,
        root: Node,
        top: Option<PageLoc>,
        segments: Segments,
        store: &dyn PageStore,
    ) -> Result<TrieState> {
        let mut state = TrieState::new(kind, retained_levels);
        state.version = version;
        state.root = root;
        state.segments = segments;
        let mut level: Vec<(PageId, Hash, PageLoc)> = match (root, top) {
            (Node::Internal(h), Some(loc)) => vec![(PageId::on_path(&ZERO, 0), h, loc)],
            (Node::Internal(_), None) => return Err(missing_retained(&PageId::on_path(&ZERO, 0))),
            (_, Some(_)) => {
                return Err(Error::corrupt(
                    "trie",
                    "a top page below a root that is not internal",
                ))
            }
            (_, None) => Vec::new(),
        };
        while !level.is_empty() {
            let pages = read_checked(kind, &state.segments, store, &level)?;
            let mut next = Vec::new();
            for ((id, _, _), page) in level.iter().zip(pages) {
                if id.level() + 1 < state.retained_levels {
                    for (child, h, child_loc) in child_pages(id, &page) {
                        next.push((child, h, child_loc.ok_or_else(|| missing_retained(&child))?));
                    }
                }
                state.retained.insert(*id, Arc::new(page));
            }
            level = next;
        }
        if let Some(top) = top {
            state.segments.forget(top.segment);
        }
        Ok(state)
    }

    pub(crate) fn root_hash(&self) -> Hash {
        self.root.hash()
    }

    /// Memory the retained pages hold.
    pub(crate) fn retained_bytes(&self) -> usize {
        self.retained.values().map(|p| p.memory_bytes()).sum()
    }

    /// The page `id` of this version held in memory (retained) or in `loaded`.
    fn page<'a>(&'a self, loaded: &'a Loaded, id: &PageId) -> Option<&'a Page> {
        if id.level() < self.retained_levels {
            self.retained.get(id).map(|p| &**p)
        } else {
            loaded.pages.get(id)
        }
    }
}

/// Where pages below the retained levels are read from and written to.
pub(crate) trait PageStore {
    /// Reads the records at `locs`, in batches of at most 4 MiB, from the segments of
    /// `segments` (a pointer into any other segment is corruption): each record's key and page
    /// bytes.
    /// `visit` is called with each record's index in `locs`, key and page bytes, in order.
    fn read(
        &self,
        segments: &Segments,
        locs: &[PageLoc],
        visit: &mut VisitRecord<'_>,
    ) -> Result<()>;
    /// Starts the appends of one commit (or snapshot).
    fn appender(&self) -> Appender<'_>;
}

/// A key's new state in a commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) key_path: Hash,
    /// The new leaf, or `None` for a key now absent.
    pub(crate) leaf: Option<Leaf>,
}

/// Pages loaded for one operation (a commit, a proof, a prefetch), over one trie version.
pub(crate) struct Loaded {
    pages: HashMap<PageId, Page, PageIdHash>,
    /// Where each loaded page was read from.
    locs: HashMap<PageId, PageLoc, PageIdHash>,
    /// Pages read from the store (not the retained ones), for tests and reports.
    pub(crate) reads: u64,
    /// Hashes computed: node and leaf hashes of commits, and one per page read to check it.
    pub(crate) hashes: u64,
    /// Bytes of the records appended to each stream of the page log.
    pub(crate) appended: [u64; 2],
    /// Bytes of the blocks those reads asked for.
    pub(crate) read_bytes: u64,
    /// Time spent in those reads, each page's check included (summed over threads where two
    /// read at once).
    pub(crate) read_time: Duration,
    /// Time spent encoding and appending a commit's pages.
    pub(crate) write_time: Duration,
}

impl Loaded {
    pub(crate) fn new() -> Loaded {
        Loaded {
            pages: HashMap::default(),
            locs: HashMap::default(),
            reads: 0,
            hashes: 0,
            appended: [0; 2],
            read_bytes: 0,
            read_time: Duration::ZERO,
            write_time: Duration::ZERO,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    /// Moves the pages out into two sets, one per half of the key space (by the first bit of
    /// their prefix; a page below the retained levels is never the top page, so each lies in
    /// one half), for work on two threads. The counters stay here.
    fn split_halves(&mut self) -> [Loaded; 2] {
        let mut halves = [Loaded::new(), Loaded::new()];
        for (id, page) in self.pages.drain() {
            halves[bit(&id.prefix, 0) as usize].pages.insert(id, page);
        }
        for (id, loc) in self.locs.drain() {
            halves[bit(&id.prefix, 0) as usize].locs.insert(id, loc);
        }
        halves
    }

    /// Takes back the pages and counters of [`Loaded::split_halves`]'s halves.
    fn merge(&mut self, halves: [Loaded; 2]) {
        for half in halves {
            self.pages.extend(half.pages);
            self.locs.extend(half.locs);
            self.reads += half.reads;
            self.hashes += half.hashes;
            self.read_bytes += half.read_bytes;
            self.read_time += half.read_time;
            self.write_time += half.write_time;
            for s in 0..2 {
                self.appended[s] += half.appended[s];
            }
        }
    }
}

/// Loads every page the given key paths pass through into `loaded`: one round of batched store
/// reads per page level, each page checked against its parent node's hash (one hash per page). Each
/// path's walk resumes where the previous round stopped it (at the page just read).
pub(crate) fn load_paths(
    state: &TrieState,
    loaded: &mut Loaded,
    store: &dyn PageStore,
    paths: &[Hash],
) -> Result<()> {
    let mut walks: Vec<(&Hash, Node, usize)> = paths.iter().map(|p| (p, state.root, 0)).collect();
    loop {
        let mut missing: Vec<(PageId, Hash, PageLoc)> = Vec::new();
        let mut seen: HashSet<PageId, PageIdHash> = HashSet::default();
        let mut next = Vec::with_capacity(walks.len());
        for (path, mut node, mut depth) in walks {
            if let Some((id, parent)) =
                walk_to_missing(state, loaded, path, PAGE_LEVELS, &mut node, &mut depth)?
            {
                if seen.insert(id) {
                    missing.push((id, parent, child_loc(state, loaded, &id)?));
                }
                next.push((path, node, depth));
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort_by_key(|a| a.2);
        read_missing(state, loaded, store, missing)?;
        walks = next;
    }
}

/// [`load_paths`], the two halves of the key space on two threads when there are enough paths
/// (see [`PARALLEL_MIN`]): for warm-ups.
pub(crate) fn load_paths_in_halves(
    state: &TrieState,
    loaded: &mut Loaded,
    store: &(dyn PageStore + Sync),
    paths: &[Hash],
) -> Result<()> {
    if paths.len() < PARALLEL_MIN || cores() < 2 {
        return load_paths(state, loaded, store, paths);
    }
    let (first, second): (Vec<Hash>, Vec<Hash>) = paths.iter().partition(|p| !bit(p, 0));
    if first.is_empty() || second.is_empty() {
        return load_paths(state, loaded, store, paths);
    }
    let mut halves = loaded.split_halves();
    let [a, b] = &mut halves;
    let (here, there) = std::thread::scope(|scope| {
        let helper = scope.spawn(move || load_paths(state, b, store, &second));
        let here = load_paths(state, a, store, &first);
        let there = helper
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (here, there)
    });
    loaded.merge(halves);
    here.and(there)
}

/// The pointer the parent of page `id` (retained or loaded) keeps to it.
fn child_loc(state: &TrieState, loaded: &Loaded, id: &PageId) -> Result<PageLoc> {
    let (parent, index) = id.parent().ok_or_else(|| missing_retained(id))?;
    state
        .page(loaded, &parent)
        .and_then(|p| p.child(index))
        .ok_or_else(|| {
            Error::corrupt(
                "trie",
                format!("page {:?} below an internal node has no pointer", id.key()),
            )
        })
}

/// Reads pages by pointer (in batches of at most 4 MiB) and checks each: the record names the
/// page, and the page's top hashes to its parent node (one hash per page).
fn read_checked(
    kind: HashKind,
    segments: &Segments,
    store: &dyn PageStore,
    wanted: &[(PageId, Hash, PageLoc)],
) -> Result<Vec<Page>> {
    let locs: Vec<PageLoc> = wanted.iter().map(|w| w.2).collect();
    let mut pages = Vec::with_capacity(wanted.len());
    store.read(segments, &locs, &mut |i, key, bytes| {
        let (id, parent, _) = &wanted[i];
        if !id.key_is(key) {
            return Err(Error::corrupt(
                "trie",
                format!(
                    "the pointer to page {:?} leads to a record of {:?}",
                    id.key(),
                    key
                ),
            ));
        }
        let page = Page::decode(kind, id, bytes)?;
        check_top(kind, id, &page, parent)?;
        pages.push(page);
        Ok(())
    })?;
    Ok(pages)
}

/// Reads pages (with their parent nodes' hashes and pointers) in batches, checks each
/// against its parent and keeps it.
fn read_missing(
    state: &TrieState,
    loaded: &mut Loaded,
    store: &dyn PageStore,
    missing: Vec<(PageId, Hash, PageLoc)>,
) -> Result<()> {
    let started = Instant::now();
    let pages = read_checked(state.kind, &state.segments, store, &missing)?;
    loaded.read_time += started.elapsed();
    loaded.reads += missing.len() as u64;
    loaded.hashes += missing.len() as u64;
    loaded.read_bytes += missing
        .iter()
        .map(|(_, _, loc)| pagelog::read_bytes(loc))
        .sum::<u64>();
    for ((id, _, loc), page) in missing.into_iter().zip(pages) {
        loaded.pages.insert(id, page);
        loaded.locs.insert(id, loc);
    }
    Ok(())
}

/// Loads every page holding a node above depth `levels`: one round of batched reads per page
/// level.
/// Cost: O(2^levels) nodes visited; for witnesses of a few levels.
pub(crate) fn load_top(
    state: &TrieState,
    loaded: &mut Loaded,
    store: &dyn PageStore,
    levels: usize,
) -> Result<()> {
    for level in 0..levels.div_ceil(PAGE_DEPTH) {
        let mut frontier = Vec::new();
        internal_nodes_at(
            state,
            loaded,
            0,
            &ZERO,
            state.root,
            level * PAGE_DEPTH,
            &mut frontier,
        )?;
        let mut missing = Vec::new();
        for (path, h) in frontier {
            let id = PageId::on_path(&path, level);
            if id.level() >= state.retained_levels && !loaded.pages.contains_key(&id) {
                missing.push((id, h, child_loc(state, loaded, &id)?));
            }
        }
        if !missing.is_empty() {
            read_missing(state, loaded, store, missing)?;
        }
    }
    Ok(())
}

/// The internal nodes at exactly `target` depth, with a path to each.
fn internal_nodes_at(
    state: &TrieState,
    loaded: &Loaded,
    depth: usize,
    path: &Hash,
    here: Node,
    target: usize,
    out: &mut Vec<(Hash, Hash)>,
) -> Result<()> {
    let Node::Internal(h) = here else {
        return Ok(());
    };
    if depth == target {
        out.push((*path, h));
        return Ok(());
    }
    let read = Reader { state, loaded };
    for side in [false, true] {
        let child_path = with_bit(path, depth, side);
        let child = read.node(depth + 1, &child_path)?;
        internal_nodes_at(state, loaded, depth + 1, &child_path, child, target, out)?;
    }
    Ok(())
}

/// Every page of the version below the retained levels with its pointer, read level by level
/// and each checked against its parent (for checks and tests). Cost: every page once.
#[cfg(test)]
pub(crate) fn stored_pages(
    state: &TrieState,
    store: &dyn PageStore,
) -> Result<Vec<(PageId, PageLoc)>> {
    let mut out = Vec::new();
    let mut frontier: Vec<(PageId, Hash, PageLoc)> = Vec::new();
    for (id, page) in state.retained.iter() {
        if id.level() + 1 == state.retained_levels {
            for (child, h, loc) in child_pages(id, page) {
                frontier.push((child, h, loc.ok_or_else(|| missing_retained(&child))?));
            }
        }
    }
    while !frontier.is_empty() {
        let pages = read_checked(state.kind, &state.segments, store, &frontier)?;
        let mut next = Vec::new();
        for ((id, _, loc), page) in frontier.iter().zip(&pages) {
            out.push((*id, *loc));
            for (child, h, child_loc) in child_pages(id, page) {
                next.push((child, h, child_loc.ok_or_else(|| missing_retained(&child))?));
            }
        }
        frontier = next;
    }
    Ok(out)
}

/// The first page on `path` above page level `stop` that is neither retained nor loaded, with
/// its parent node's hash; `None` when the path ends (at a leaf or an empty node, or at level
/// `stop`) in pages already at hand.
fn first_missing(
    state: &TrieState,
    loaded: &Loaded,
    path: &Hash,
    stop: usize,
) -> Result<Option<(PageId, Hash)>> {
    let (mut node, mut depth) = (state.root, 0);
    walk_to_missing(state, loaded, path, stop, &mut node, &mut depth)
}

/// [`first_missing`] from the node `node` at `depth` on `path` (the root at 0, or where an
/// earlier walk stopped: a page boundary); leaves `node` and `depth` where it stopped, at the
/// missing page's parent node.
fn walk_to_missing(
    state: &TrieState,
    loaded: &Loaded,
    path: &Hash,
    stop: usize,
    node: &mut Node,
    depth: &mut usize,
) -> Result<Option<(PageId, Hash)>> {
    while let Node::Internal(h) = *node {
        if *depth / PAGE_DEPTH >= stop {
            return Ok(None);
        }
        let id = PageId::on_path(path, *depth / PAGE_DEPTH);
        let page = match loaded.pages.get(&id) {
            Some(p) => p,
            None if id.level() < state.retained_levels => match state.retained.get(&id) {
                Some(p) => &**p,
                None => return Err(missing_retained(&id)),
            },
            None => return Ok(Some((id, h))),
        };
        // Follow the path to the page's bottom row or to where it ends (only the walk reads
        // `node` afterwards: a leaf or an empty node both end it).
        let mut bits = 0usize;
        loop {
            bits = (bits << 1) | bit(path, *depth) as usize;
            *depth += 1;
            let rel = *depth - id.level() * PAGE_DEPTH;
            let slot = (1 << rel) - 2 + bits;
            if page.kinds[slot] != KIND_INTERNAL {
                *node = Node::Empty;
                break;
            }
            *node = Node::Internal(page.hashes[slot]);
            if rel == PAGE_DEPTH {
                break;
            }
        }
    }
    Ok(None)
}

fn missing_retained(id: &PageId) -> Error {
    Error::corrupt(
        "trie",
        format!(
            "retained page {:?} below an internal node is missing",
            id.key()
        ),
    )
}

/// A page's two top nodes must hash to its parent node: a page from another place or version
/// is caught here, for one hash.
fn check_top(kind: HashKind, id: &PageId, page: &Page, parent: &Hash) -> Result<()> {
    if kind.node(&page.node(0).hash(), &page.node(1).hash()) != *parent {
        return Err(Error::corrupt(
            "trie",
            format!("page {:?} does not hash to its parent node", id.key()),
        ));
    }
    Ok(())
}

/// Applies `changes` (sorted by key path, distinct) to the trie: rehashes every changed path
/// once, bottom up, appends every changed page below the retained levels to the page log
/// (deepest first, each parent pointing at its children's new records) and returns how many
/// pages it wrote or removed. Retained pages are updated in `state`. The pages on the changed paths
/// are read first ([`load_paths`]) unless `loaded` already holds them.
pub(crate) fn commit(
    state: &mut TrieState,
    loaded: &mut Loaded,
    store: &(dyn PageStore + Sync),
    changes: &[Change],
) -> Result<u64> {
    debug_assert!(changes.windows(2).all(|w| w[0].key_path < w[1].key_path));
    if changes.is_empty() {
        return Ok(0);
    }
    // Below the retained levels, each half of the key space (by the first bit) is read and
    // rehashed on a thread of its own; the retained levels then take the halves' results.
    let cut = state.retained_levels * PAGE_DEPTH;
    let below = match parallel_halves(changes) {
        Some(split) => Some(below_in_halves(state, loaded, store, changes, split, cut)?),
        None => {
            let paths: Vec<Hash> = changes.iter().map(|c| c.key_path).collect();
            load_paths(state, loaded, store, &paths)?;
            None
        }
    };
    let (precomputed, dirty) = below.unwrap_or_default();
    // The retained pages are changed in place (copied first only where a duplicate or a
    // snapshot still shares them): on an error below, the caller breaks the table.
    let mut work = Work {
        kind: state.kind,
        state,
        loaded,
        dirty,
        held: Vec::new(),
        cut,
        precomputed,
        writes_retained: true,
    };
    let root = work.state.root;
    let new_root = work.update(0, &ZERO, root, changes)?;
    let dirty = std::mem::take(&mut work.dirty);
    state.root = new_root;
    state.version += 1;
    let mut dirty: Vec<PageId> = dirty.into_iter().collect();
    dirty.sort_by(deepest_first);
    let stored: Vec<PageId> = dirty
        .iter()
        .filter(|id| id.level() >= state.retained_levels)
        .copied()
        .collect();
    let started = Instant::now();
    write_pages(state, loaded, store, &stored)?;
    loaded.write_time += started.elapsed();
    for id in dirty {
        if id.level() < state.retained_levels
            && state.retained.get(&id).is_some_and(|p| p.is_empty())
        {
            state.retained.remove(&id);
        }
    }
    Ok(stored.len() as u64)
}

/// Changes (or paths) at least this many are split between two threads, where the machine has
/// two cores (two in the unit tests, so that both ways are tested).
#[cfg(not(test))]
const PARALLEL_MIN: usize = 128;
#[cfg(test)]
const PARALLEL_MIN: usize = 2;

/// Where sorted `changes` split into the two halves of the key space (by the first bit of
/// their paths), if they are worth two threads: enough of them, some in each half, and a
/// second core.
fn parallel_halves(changes: &[Change]) -> Option<usize> {
    if changes.len() < PARALLEL_MIN || cores() < 2 {
        return None;
    }
    let split = changes.partition_point(|c| !bit(&c.key_path, 0));
    (split > 0 && split < changes.len()).then_some(split)
}

/// The cores this process may use (asked once).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Results of the work below the retained levels: the new node at depth `cut` on each path
/// that had changes there, and the pages that work changed.
type Below = (HashMap<Hash, Node, PageIdHash>, HashSet<PageId, PageIdHash>);

/// The part of a commit below the retained levels (depth `cut`), one half of the key space
/// per thread: each reads the pages its changes pass through ([`load_paths`], pages
/// `loaded` already holds are handed to the half they belong to) and rehashes its subtrees
/// below depth `cut`, writing only pages below the retained levels. The halves' pages are
/// then merged back into `loaded`. Retained pages are only read: `state` is unchanged.
fn below_in_halves(
    state: &TrieState,
    loaded: &mut Loaded,
    store: &(dyn PageStore + Sync),
    changes: &[Change],
    split: usize,
    cut: usize,
) -> Result<Below> {
    let mut halves = loaded.split_halves();
    let [first, second] = &mut halves;
    let (a, b) = std::thread::scope(|scope| {
        let helper = scope.spawn(move || below_cut(state, second, store, &changes[split..], cut));
        let here = below_cut(state, first, store, &changes[..split], cut);
        let there = helper
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (here, there)
    });
    let (mut precomputed, mut dirty) = a?;
    let (precomputed_b, dirty_b) = b?;
    precomputed.extend(precomputed_b);
    dirty.extend(dirty_b);
    loaded.merge(halves);
    Ok((precomputed, dirty))
}

/// One half's work for [`below_in_halves`]: its pages read into `loaded`, then each node at
/// depth `cut` with changes below it rehashed (the nodes above are the caller's).
fn below_cut(
    state: &TrieState,
    loaded: &mut Loaded,
    store: &(dyn PageStore + Sync),
    changes: &[Change],
    cut: usize,
) -> Result<Below> {
    let paths: Vec<Hash> = changes.iter().map(|c| c.key_path).collect();
    load_paths(state, loaded, store, &paths)?;
    let jobs = collect_cut(state, changes, cut)?;
    // The work writes no retained page (every job is below them), so a copy of the version
    // (O(1): its maps are shared) serves as its `state`.
    let mut view = state.clone();
    let mut work = Work {
        kind: state.kind,
        state: &mut view,
        loaded,
        dirty: HashSet::default(),
        held: Vec::new(),
        cut,
        precomputed: HashMap::default(),
        writes_retained: false,
    };
    let mut precomputed = HashMap::default();
    for (path, here, range) in jobs {
        let node = work.update(cut, &path, here, &changes[range])?;
        precomputed.insert(path, node);
    }
    Ok((precomputed, work.dirty))
}

/// The nodes at depth `cut` that `changes` (sorted) reach from the root through internal
/// nodes only, with the range of the changes below each: where a path meets a leaf or an
/// empty node above `cut`, the caller's rehash builds the subtree.
fn collect_cut(
    state: &TrieState,
    changes: &[Change],
    cut: usize,
) -> Result<Vec<(Hash, Node, std::ops::Range<usize>)>> {
    struct Walk<'a> {
        state: &'a TrieState,
        cut: usize,
        out: Vec<(Hash, Node, std::ops::Range<usize>)>,
    }
    impl Walk<'_> {
        /// Below (`depth`, `path`), whose node is `here`: `changes`, the first at index `at`.
        fn walk(
            &mut self,
            depth: usize,
            path: &Hash,
            here: Node,
            changes: &[Change],
            at: usize,
        ) -> Result<()> {
            if depth == self.cut {
                self.out.push((*path, here, at..at + changes.len()));
                return Ok(());
            }
            if !matches!(here, Node::Internal(_)) {
                return Ok(());
            }
            let split = changes.partition_point(|c| !bit(&c.key_path, depth));
            for (side, part, start) in [
                (false, &changes[..split], at),
                (true, &changes[split..], at + split),
            ] {
                if part.is_empty() {
                    continue;
                }
                let child_path = with_bit(path, depth, side);
                let id = PageId::on_path(&child_path, depth / PAGE_DEPTH);
                let page = self
                    .state
                    .retained
                    .get(&id)
                    .ok_or_else(|| missing_retained(&id))?;
                let child = page.node(slot(depth + 1, &child_path));
                self.walk(depth + 1, &child_path, child, part, start)?;
            }
            Ok(())
        }
    }
    let mut walk = Walk {
        state,
        cut,
        out: Vec::new(),
    };
    walk.walk(0, &ZERO, state.root, changes, 0)?;
    Ok(walk.out)
}

/// Moves this version's pages out of some records of a segment (`records`, as
/// [`crate::pagelog::PageLog::scan_range`] gives them, less any the caller knows are dead):
/// each record the version still reaches (its parent's pointer names it) is appended again,
/// with every page above it below the retained levels (their pointers change), deepest first.
/// Afterwards the version has no bytes left in those records. Returns the pages appended.
///
/// Cost: the ancestors of the live records not retained (at most one read per page level and
/// record, shared between records below one page: none for pages one level below the
/// retained ones), one append per live record and per ancestor, no hashing but one check per
/// page read. Returns the pages appended and the bytes of the ancestors' reads.
pub(crate) fn relocate(
    state: &mut TrieState,
    store: &dyn PageStore,
    records: Vec<pagelog::Scanned>,
) -> Result<(u64, u64)> {
    let mut loaded = Loaded::new();
    let mut candidates = Vec::new();
    for (loc, key, bytes) in records {
        let id = PageId::from_key(&key)
            .ok_or_else(|| Error::corrupt("page log record", "a key that names no page"))?;
        if id.level() >= state.retained_levels {
            candidates.push((id, loc, bytes));
        }
    }
    // Every ancestor below the retained levels, one round of batched reads per page level.
    loop {
        let mut missing: Vec<(PageId, Hash, PageLoc)> = Vec::new();
        let mut seen: HashSet<PageId, PageIdHash> = HashSet::default();
        for (id, _, _) in &candidates {
            if let Some((parent, h)) = first_missing(state, &loaded, &id.prefix, id.level())? {
                if seen.insert(parent) {
                    missing.push((parent, h, child_loc(state, &loaded, &parent)?));
                }
            }
        }
        if missing.is_empty() {
            break;
        }
        missing.sort_by_key(|a| a.2);
        read_missing(state, &mut loaded, store, missing)?;
    }
    let mut dirty: HashSet<PageId, PageIdHash> = HashSet::default();
    for (id, loc, bytes) in candidates {
        let (parent, index) = id.parent().expect("a page below the retained levels");
        let Some(parent_page) = state.page(&loaded, &parent) else {
            continue; // the path ends above it: an old version's page
        };
        if parent_page.child(index) != Some(loc) {
            continue;
        }
        let hash = match parent_page.node(PAGE_SLOTS - 64 + index) {
            Node::Internal(h) => h,
            _ => {
                return Err(Error::corrupt(
                    "trie",
                    "a page pointer below a node that is not internal",
                ))
            }
        };
        if let std::collections::hash_map::Entry::Vacant(slot) = loaded.pages.entry(id) {
            let page = Page::decode(state.kind, &id, &bytes)?;
            check_top(state.kind, &id, &page, &hash)?;
            slot.insert(page);
            loaded.locs.insert(id, loc);
        }
        let mut up = Some(id);
        while let Some(page) = up.filter(|p| p.level() >= state.retained_levels) {
            if !dirty.insert(page) {
                break; // its ancestors are in already
            }
            up = page.parent().map(|(p, _)| p);
        }
    }
    let mut dirty: Vec<PageId> = dirty.into_iter().collect();
    dirty.sort_by(deepest_first);
    write_pages(state, &mut loaded, store, &dirty)?;
    Ok((dirty.len() as u64, loaded.read_bytes))
}

/// Orders pages deepest level first (then by id), the order they are written in.
fn deepest_first(a: &PageId, b: &PageId) -> std::cmp::Ordering {
    b.level().cmp(&a.level()).then(a.cmp(b))
}

/// Appends a record (a page's key and bytes) somewhere and says where.
pub(crate) type PushRecord<'a> = dyn FnMut(&[u8], &[u8]) -> Result<PageLoc> + 'a;

/// Writes every retained page with `push` (a snapshot's own segment), deepest first, each
/// pointing at its retained children's records there and at its other children's records in
/// the page log, and returns the pointer to the top page (`None` for a trie with no internal
/// root). The version itself is unchanged. Cost: one encoding per retained page (at most
/// 4,161 with the default budget).
pub(crate) fn save_retained(
    state: &TrieState,
    push: &mut PushRecord<'_>,
) -> Result<Option<PageLoc>> {
    let mut ids: Vec<PageId> = state.retained.keys().copied().collect();
    ids.sort_by(deepest_first);
    let mut written: HashMap<PageId, PageLoc, PageIdHash> = HashMap::default();
    for id in &ids {
        let page = &state.retained[id];
        let retained_children = id.level() + 1 < state.retained_levels;
        let bytes = page.encode_with(|index| {
            if retained_children {
                let (_, path) = slot_position(id, PAGE_SLOTS - 64 + index);
                written
                    .get(&PageId::on_path(&path, id.level() + 1))
                    .copied()
            } else {
                page.child(index)
            }
        })?;
        written.insert(*id, push(&id.key(), &bytes)?);
    }
    Ok(written.get(&PageId::on_path(&ZERO, 0)).copied())
}

/// Appends pages `ids` (deepest first, below the retained levels, from `loaded`; an empty or
/// absent page is removed), pointing each parent at its page's new record, and moves the
/// version's accounting from the old records to the new ones.
fn write_pages(
    state: &mut TrieState,
    loaded: &mut Loaded,
    store: &dyn PageStore,
    ids: &[PageId],
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let retained_levels = state.retained_levels;
    let mut appender = store.appender();
    let mut added = Vec::with_capacity(ids.len());
    let mut released = Vec::with_capacity(ids.len());
    let mut bytes = Vec::with_capacity(2 * pagelog::HEADER_BYTES as usize);
    for id in ids {
        debug_assert!(id.level() >= retained_levels);
        let new = match loaded.pages.get(id) {
            Some(page) if !page.is_empty() => {
                let stream = match id.level() == retained_levels {
                    true => Stream::Near,
                    false => Stream::Deep,
                };
                page.encode_into(&mut bytes, |index| page.child(index))?;
                let loc = appender.push(stream, &id.key(), &bytes)?;
                loaded.appended[stream as usize] += pagelog::record_bytes(&loc);
                Some(loc)
            }
            _ => None,
        };
        released.extend(loaded.locs.get(id).copied());
        added.extend(new);
        match new {
            Some(loc) => loaded.locs.insert(*id, loc),
            None => loaded.locs.remove(id),
        };
        if let Some((parent, index)) = id.parent() {
            let page = if parent.level() < retained_levels {
                state.retained.get_mut(&parent).map(Arc::make_mut)
            } else {
                loaded.pages.get_mut(&parent)
            };
            if let Some(page) = page {
                page.set_child(index, new);
            }
        }
    }
    let written = appender.finish()?;
    for loc in &added {
        let (segment, _) = written
            .iter()
            .find(|(s, _)| s.id() == loc.segment)
            .expect("a record just appended is in a segment written to");
        state.segments.add(segment, loc);
    }
    for loc in &released {
        state.segments.release(loc)?;
    }
    Ok(())
}

/// The rehash of one commit. The pages of the internal nodes the recursion is inside are held
/// out of their maps, innermost last, so that reading and writing their nodes (most of the
/// work) costs no map lookup; any other page is found through the maps.
struct Work<'a> {
    kind: HashKind,
    state: &'a mut TrieState,
    loaded: &'a mut Loaded,
    dirty: HashSet<PageId, PageIdHash>,
    /// The pages held out of their maps, with whether the commit changed each.
    held: Vec<(PageId, Held, bool)>,
    /// The depth where the retained levels end, and the new nodes there that threads
    /// computed below it ([`below_in_halves`]): the recursion takes those instead of going on.
    cut: usize,
    precomputed: HashMap<Hash, Node, PageIdHash>,
    /// Whether this work may write retained pages (not below the cut, where `state` is a copy).
    writes_retained: bool,
}

/// A page held by a [`Work`]: a retained one (shared with duplicates and snapshots until it
/// changes) or a loaded one.
enum Held {
    Retained(Arc<Page>),
    Loaded(Page),
}

impl Held {
    fn page(&self) -> &Page {
        match self {
            Held::Retained(p) => p,
            Held::Loaded(p) => p,
        }
    }

    fn page_mut(&mut self) -> &mut Page {
        match self {
            Held::Retained(p) => Arc::make_mut(p),
            Held::Loaded(p) => p,
        }
    }
}

impl Work<'_> {
    /// The innermost held page, if it is page `level` on `path`.
    fn held_on(&self, path: &Hash, level: usize) -> Option<usize> {
        let at = self.held.len().checked_sub(1)?;
        let id = &self.held[at].0;
        (id.level() == level && id.prefix == mask(path, level * PAGE_DEPTH)).then_some(at)
    }

    /// Takes page `id` out of its map to hold it while the recursion is below its top;
    /// `false` if there is no such page (the maps then serve every access, as for pages a
    /// commit creates).
    fn hold(&mut self, id: PageId) -> bool {
        let held = if id.level() < self.state.retained_levels {
            self.state.retained.remove(&id).map(Held::Retained)
        } else {
            self.loaded.pages.remove(&id).map(Held::Loaded)
        };
        match held {
            Some(held) => {
                self.held.push((id, held, false));
                true
            }
            None => false,
        }
    }

    /// Puts the innermost held page back into its map.
    fn release(&mut self) {
        let (id, held, changed) = self.held.pop().expect("a held page");
        match held {
            Held::Retained(p) => {
                self.state.retained.insert(id, p);
            }
            Held::Loaded(p) => {
                self.loaded.pages.insert(id, p);
            }
        }
        if changed {
            self.dirty.insert(id);
        }
    }

    /// The node at `depth` (at least 1) on `path`: from a retained page, a loaded one, or
    /// empty where no page is at hand (only where none can exist: the caller knows the parent
    /// node is not internal, or has loaded the page).
    fn node(&self, depth: usize, path: &Hash) -> Node {
        let level = (depth - 1) / PAGE_DEPTH;
        if let Some(at) = self.held_on(path, level) {
            return self.held[at].1.page().node(slot(depth, path));
        }
        let id = PageId::on_path(path, level);
        let page = if id.level() < self.state.retained_levels {
            self.state.retained.get(&id).map(|p| &**p)
        } else {
            self.loaded.pages.get(&id)
        };
        page.map_or(Node::Empty, |p| p.node(slot(depth, path)))
    }

    /// Writes a node, creating its page if needed (a retained page is copied first if shared).
    fn set(&mut self, depth: usize, path: &Hash, node: Node) {
        let level = (depth - 1) / PAGE_DEPTH;
        if let Some(at) = self.held_on(path, level) {
            let slot = slot(depth, path);
            let (_, held, changed) = &mut self.held[at];
            if held.page().node(slot) != node {
                held.page_mut().set(slot, node);
                *changed = true;
            }
            return;
        }
        if self.node(depth, path) == node {
            return;
        }
        let id = PageId::on_path(path, level);
        let page = if id.level() < self.state.retained_levels {
            debug_assert!(
                self.writes_retained,
                "work below the cut writes no retained page"
            );
            if !self.state.retained.contains_key(&id) {
                self.state.retained.insert(id, Arc::new(Page::empty()));
            }
            Arc::make_mut(self.state.retained.get_mut(&id).expect("just inserted"))
        } else {
            self.loaded.pages.entry(id).or_insert_with(Page::empty)
        };
        page.set(slot(depth, path), node);
        self.dirty.insert(id);
    }

    /// The new node at (`depth`, `path`), whose current node is `here`, after `changes` (all
    /// below it, at least one). Writes every node below it; the caller writes this one.
    fn update(
        &mut self,
        depth: usize,
        path: &Hash,
        here: Node,
        changes: &[Change],
    ) -> Result<Node> {
        if depth == self.cut {
            if let Some(node) = self.precomputed.get(path) {
                return Ok(*node);
            }
        }
        match here {
            Node::Internal(_) => {
                if depth >= 256 {
                    return Err(Error::corrupt("trie", "an internal node at depth 256"));
                }
                // At a page's top, the page below is held until its nodes are written.
                let held = depth.is_multiple_of(PAGE_DEPTH)
                    && self.hold(PageId::on_path(path, depth / PAGE_DEPTH));
                let result = self.update_children(depth, path, changes);
                if held {
                    self.release();
                }
                result
            }
            Node::Empty | Node::Leaf(..) => {
                let mut leaves: Vec<Leaf> = changes.iter().filter_map(|c| c.leaf).collect();
                if let Node::Leaf(old, _) = here {
                    if changes.iter().all(|c| c.key_path != old.key_path) {
                        let at = leaves.partition_point(|l| l.key_path < old.key_path);
                        leaves.insert(at, old);
                    }
                }
                Ok(self.build(depth, path, &leaves))
            }
        }
    }

    /// [`Work::update`] below an internal node: both children, then the node over them.
    fn update_children(&mut self, depth: usize, path: &Hash, changes: &[Change]) -> Result<Node> {
        let split = changes.partition_point(|c| !bit(&c.key_path, depth));
        let (lp, rp) = (with_bit(path, depth, false), with_bit(path, depth, true));
        let mut left = self.node(depth + 1, &lp);
        let mut right = self.node(depth + 1, &rp);
        if split > 0 {
            left = self.update(depth + 1, &lp, left, &changes[..split])?;
        }
        if split < changes.len() {
            right = self.update(depth + 1, &rp, right, &changes[split..])?;
        }
        Ok(self.join(depth, &lp, &rp, left, right))
    }

    /// The node over two children at `depth + 1`, writing them (or clearing them when the
    /// subtree collapses to a leaf or to nothing).
    fn join(&mut self, depth: usize, lp: &Hash, rp: &Hash, left: Node, right: Node) -> Node {
        let joined = match (left, right) {
            (Node::Empty, Node::Empty) => Node::Empty,
            (leaf @ Node::Leaf(..), Node::Empty) | (Node::Empty, leaf @ Node::Leaf(..)) => leaf,
            _ => {
                self.set(depth + 1, lp, left);
                self.set(depth + 1, rp, right);
                self.loaded.hashes += 1;
                return Node::Internal(self.kind.node(&left.hash(), &right.hash()));
            }
        };
        self.set(depth + 1, lp, Node::Empty);
        self.set(depth + 1, rp, Node::Empty);
        joined
    }

    /// A fresh subtree at (`depth`, `path`) holding `leaves` (sorted), where nothing was below.
    fn build(&mut self, depth: usize, path: &Hash, leaves: &[Leaf]) -> Node {
        match leaves {
            [] => Node::Empty,
            [leaf] => {
                self.loaded.hashes += 1;
                Node::leaf(self.kind, *leaf)
            }
            _ => {
                let split = leaves.partition_point(|l| !bit(&l.key_path, depth));
                let (lp, rp) = (with_bit(path, depth, false), with_bit(path, depth, true));
                let left = self.build(depth + 1, &lp, &leaves[..split]);
                let right = self.build(depth + 1, &rp, &leaves[split..]);
                self.set(depth + 1, &lp, left);
                self.set(depth + 1, &rp, right);
                self.loaded.hashes += 1;
                Node::Internal(self.kind.node(&left.hash(), &right.hash()))
            }
        }
    }
}

/// A multiproof for sorted, distinct key paths, from pages loaded with [`load_paths`].
pub(crate) fn prove(
    state: &TrieState,
    loaded: &Loaded,
    paths: &[Hash],
) -> Result<cairn_proof::Proof> {
    let mut w = ProofWriter::new(state.kind);
    let read = Reader { state, loaded };
    read.prove(0, &ZERO, state.root, paths, &mut w)?;
    w.finish()
        .map_err(|e| Error::corrupt("trie", format!("proof is not one tree: {e}")))
}

/// A proof opening every node above depth `levels` (for a verifier's `TopWitness`), from
/// pages loaded down to that depth (the retained levels, or [`load_paths`] over them).
pub(crate) fn top_witness(
    state: &TrieState,
    loaded: &Loaded,
    levels: usize,
) -> Result<cairn_proof::Proof> {
    let mut w = ProofWriter::new(state.kind);
    let read = Reader { state, loaded };
    read.top(0, &ZERO, state.root, levels, &mut w)?;
    w.finish()
        .map_err(|e| Error::corrupt("trie", format!("witness is not one tree: {e}")))
}

struct Reader<'a> {
    state: &'a TrieState,
    loaded: &'a Loaded,
}

impl Reader<'_> {
    fn node(&self, depth: usize, path: &Hash) -> Result<Node> {
        let id = PageId::on_path(path, (depth - 1) / PAGE_DEPTH);
        let page = match self.loaded.pages.get(&id) {
            Some(p) => p,
            None => match self.state.retained.get(&id) {
                Some(p) => &**p,
                None => {
                    return Err(Error::corrupt(
                        "trie",
                        format!("page {:?} was not loaded", id.key()),
                    ))
                }
            },
        };
        Ok(page.node(slot(depth, path)))
    }

    fn prove(
        &self,
        depth: usize,
        path: &Hash,
        here: Node,
        paths: &[Hash],
        w: &mut ProofWriter,
    ) -> Result<()> {
        match here {
            Node::Empty => w.push(ProofNode::Empty),
            _ if paths.is_empty() => w.push(ProofNode::Hash(here.hash())),
            Node::Leaf(leaf, _) => w.push(ProofNode::Leaf(leaf)),
            Node::Internal(_) => {
                w.push(ProofNode::Internal);
                let split = paths.partition_point(|p| !bit(p, depth));
                for (side, part) in [(false, &paths[..split]), (true, &paths[split..])] {
                    let child_path = with_bit(path, depth, side);
                    let child = self.node(depth + 1, &child_path)?;
                    self.prove(depth + 1, &child_path, child, part, w)?;
                }
            }
        }
        Ok(())
    }

    fn top(
        &self,
        depth: usize,
        path: &Hash,
        here: Node,
        levels: usize,
        w: &mut ProofWriter,
    ) -> Result<()> {
        match here {
            Node::Empty => w.push(ProofNode::Empty),
            Node::Leaf(leaf, _) => w.push(ProofNode::Leaf(leaf)),
            Node::Internal(h) if depth == levels => w.push(ProofNode::Hash(h)),
            Node::Internal(_) => {
                w.push(ProofNode::Internal);
                for side in [false, true] {
                    let child_path = with_bit(path, depth, side);
                    let child = self.node(depth + 1, &child_path)?;
                    self.top(depth + 1, &child_path, child, levels, w)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_proof::reference::MemTrie;
    use cairn_proof::Claim;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use crate::fs::sim::MemFs;
    use crate::fs::{DeferredRemovals, FileSystem};
    use crate::io::{BlockIo, IoBackendKind};
    use crate::pagelog::PageLog;

    /// Pages in a page log on a simulated file system.
    struct TestStore {
        fs: Arc<MemFs>,
        log: PageLog,
        io: BlockIo,
    }

    impl TestStore {
        fn new() -> TestStore {
            let fs = Arc::new(MemFs::new());
            fs.create_dir_all(Path::new("/t")).unwrap();
            TestStore {
                fs: fs.clone(),
                log: PageLog::new(
                    fs,
                    PathBuf::from("/t"),
                    Arc::new(DeferredRemovals::default()),
                ),
                io: BlockIo::new(IoBackendKind::Pread).unwrap(),
            }
        }
    }

    impl PageStore for TestStore {
        fn read(
            &self,
            segments: &Segments,
            locs: &[PageLoc],
            visit: &mut VisitRecord<'_>,
        ) -> Result<()> {
            PageLog::read_each(&self.io, segments, locs, visit)
        }

        fn appender(&self) -> Appender<'_> {
            self.log.appender()
        }
    }

    fn change(kind: HashKind, key: &[u8], value: Option<&[u8]>) -> Change {
        Change {
            key_path: kind.key_path(key),
            leaf: value.map(|v| Leaf::new(kind, key, v, None)),
        }
    }

    /// Applies batches of (key, Some(value) | None) and compares the root with the reference
    /// after each; returns the final state.
    fn run(
        kind: HashKind,
        retained: usize,
        batches: &[Vec<(u16, Option<u8>)>],
    ) -> (TrieState, TestStore) {
        let store = TestStore::new();
        let mut state = TrieState::new(kind, retained);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for batch in batches {
            let mut changes: BTreeMap<Hash, Change> = BTreeMap::new();
            for &(k, v) in batch {
                let key = k.to_be_bytes().to_vec();
                let value = v.map(|v| vec![v; 3]);
                match &value {
                    Some(v) => model.insert(key.clone(), v.clone()),
                    None => model.remove(&key),
                };
                let c = change(kind, &key, value.as_deref());
                changes.insert(c.key_path, c);
            }
            let changes: Vec<Change> = changes.into_values().collect();
            let mut loaded = Loaded::new();
            commit(&mut state, &mut loaded, &store, &changes).unwrap();
            // The version's accounting is exactly its records below the retained levels.
            let stored = stored_pages(&state, &store).unwrap();
            let bytes: u64 = stored.iter().map(|(_, l)| pagelog::record_bytes(l)).sum();
            assert_eq!(state.segments.live_bytes(), bytes);
            let reference = MemTrie::new(kind, model.iter().map(|(k, v)| (&k[..], &v[..], None)));
            assert_eq!(state.root_hash(), reference.root().hash);
        }
        (state, store)
    }

    #[test]
    fn page_ids_and_slots() {
        let mut path = ZERO;
        path[0] = 0b1011_0110;
        path[1] = 0b0100_0000;
        assert_eq!(slot(1, &path), 1); // depth 1, bit 1
        assert_eq!(slot(2, &path), 2 + 2); // bits 10
        assert_eq!(slot(6, &path), 62 + 0b101101);
        assert_eq!(slot(7, &path), 1); // page level 1, relative depth 1, bit 6 = 1
        let id = PageId::on_path(&path, 1);
        assert_eq!(id.key(), vec![1, 0b1011_0100]);
        assert_eq!(PageId::from_key(&id.key()), Some(id));
        assert_eq!(PageId::from_key(&[1, 0b1011_0101]), None); // bits past the prefix
        assert_eq!(PageId::from_key(&[43]), None);
        for i in 0..PAGE_SLOTS {
            let (depth, p) = slot_position(&id, i);
            assert_eq!(slot(depth, &p), i);
        }
    }

    #[test]
    fn commits_match_the_reference() {
        for kind in [HashKind::Sha256, HashKind::Blake3] {
            let batches: Vec<Vec<(u16, Option<u8>)>> = vec![
                (0..200).map(|k| (k, Some(1))).collect(),
                (0..200).step_by(3).map(|k| (k, None)).collect(),
                (100..400).map(|k| (k, Some(2))).collect(),
                vec![(7, None), (7, Some(9)), (500, None)],
                (0..400).map(|k| (k, None)).collect(),
                vec![(1, Some(1))],
                vec![(1, None)],
            ];
            for retained in [1, 2] {
                let (state, _store) = run(kind, retained, &batches);
                assert_eq!(state.root, Node::Empty);
                assert!(state.retained.is_empty());
                assert_eq!(state.segments.len(), 0, "every record released");
            }
        }
    }

    #[test]
    fn proofs_from_pages_verify() {
        let kind = HashKind::Sha256;
        let batch: Vec<(u16, Option<u8>)> = (0..3000).map(|k| (k, Some((k % 7) as u8))).collect();
        let (state, store) = run(kind, 1, &[batch]);
        let root = cairn_proof::Root {
            kind,
            hash: state.root_hash(),
        };
        let keys: Vec<Vec<u8>> = [5u16, 77, 2999, 3000, 60000]
            .iter()
            .map(|k| k.to_be_bytes().to_vec())
            .collect();
        let mut paths: Vec<Hash> = keys.iter().map(|k| kind.key_path(k)).collect();
        paths.sort();
        let mut loaded = Loaded::new();
        load_paths(&state, &mut loaded, &store, &paths).unwrap();
        assert!(loaded.reads > 0);
        let proof = prove(&state, &loaded, &paths).unwrap();
        let values: Vec<Vec<u8>> = [5u16, 77, 2999]
            .iter()
            .map(|k| vec![(k % 7) as u8; 3])
            .collect();
        let claims = [
            Claim::present(&keys[0], &values[0]),
            Claim::present(&keys[1], &values[1]),
            Claim::present(&keys[2], &values[2]),
            Claim::absent(&keys[3]),
            Claim::absent(&keys[4]),
        ];
        assert_eq!(proof.verify(&root, &claims), Ok(()));
        // The same proof as the reference trie gives.
        let model: Vec<(Vec<u8>, Vec<u8>)> = (0..3000u16)
            .map(|k| (k.to_be_bytes().to_vec(), vec![(k % 7) as u8; 3]))
            .collect();
        let reference = MemTrie::new(kind, model.iter().map(|(k, v)| (&k[..], &v[..], None)));
        assert_eq!(proof, reference.prove_paths(&paths));
        // A witness of the top 8 levels.
        let mut loaded = Loaded::new();
        let everything: Vec<Hash> = model.iter().map(|(k, _)| kind.key_path(k)).collect();
        load_paths(&state, &mut loaded, &store, &everything).unwrap();
        assert_eq!(top_witness(&state, &loaded, 8).unwrap(), reference.top(8));
    }

    /// A snapshot's own segment of a small trie (every page retained, so every pointer leads
    /// into it): pins the segment header, the record format and the page format.
    #[test]
    fn a_retained_segment_is_pinned() {
        let kind = HashKind::Sha256;
        let batch: Vec<(u16, Option<u8>)> = (0..24).map(|k| (k, Some((k % 5) as u8))).collect();
        let (state, _store) = run(kind, 2, &[batch]);
        assert_eq!(state.segments.len(), 0, "every page is retained");
        let mut own = crate::pagelog::SegmentBuilder::with_id(0x0123_4567_89ab_cdef);
        let top = save_retained(&state, &mut |k, p| own.push(k, p)).unwrap();
        assert!(top.is_some());
        let (bytes, _) = own.finish();
        crate::golden::check_golden("trie-segment-v1-pages-v3.bin", &bytes);
    }

    /// Pages of format 2 (every leaf with its hash and blob hash), as segments written before
    /// format 3 hold them, still read: the golden segment of the same trie as
    /// [`a_retained_segment_is_pinned`], from before format 3, decodes to the same pages
    /// (pointers aside: the records sit elsewhere), and a format-2 leaf whose stored hash is
    /// wrong is refused.
    #[test]
    fn pages_of_format_2_still_read() {
        let kind = HashKind::Sha256;
        let batch: Vec<(u16, Option<u8>)> = (0..24).map(|k| (k, Some((k % 5) as u8))).collect();
        let (state, _store) = run(kind, 2, &[batch]);
        let golden = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/golden/trie-segment-v1-pages-v2.bin"
        ))
        .unwrap();
        let records = crate::pagelog::scan_bytes(&golden, 0x0123_4567_89ab_cdef).unwrap();
        assert_eq!(records.len(), state.retained.len());
        let mut leaves = 0;
        for (_, key, bytes) in &records {
            assert_eq!(bytes[0], PAGE_FORMAT_V2);
            let id = PageId::from_key(key).unwrap();
            let page = Page::decode(kind, &id, bytes).unwrap();
            let retained = state.retained.get(&id).unwrap();
            assert_eq!(page.kinds, retained.kinds);
            assert_eq!(page.hashes, retained.hashes);
            assert_eq!(page.leaves, retained.leaves);
            leaves += page.leaves.len();
            // Format 3 holds the same page in fewer bytes, and reads back the same.
            let again = page.encode().unwrap();
            assert_eq!(again[0], PAGE_FORMAT);
            assert!(again.len() < bytes.len() || page.leaves.is_empty());
            assert_eq!(Page::decode(kind, &id, &again).unwrap(), page);
            // A wrong stored leaf hash: the first leaf's hash follows the kinds and the
            // internal hashes of the slots before it.
            if let Some(&(slot, _)) = page.leaves.first() {
                let before = (0..slot as usize)
                    .filter(|&i| page.kinds[i] == KIND_INTERNAL)
                    .count();
                let mut damaged = bytes.clone();
                damaged[1 + KIND_BYTES + 32 * before] ^= 1;
                assert!(Page::decode(kind, &id, &damaged).is_err());
            }
        }
        assert_eq!(leaves, 24);
    }

    /// Format 3 stores a leaf's blob hash only when it has a blob, and refuses a "leaf with a
    /// blob" whose blob hash is zero (two encodings of one page).
    #[test]
    fn leaves_with_and_without_blobs_encode_once() {
        let kind = HashKind::Sha256;
        let id = PageId::on_path(&ZERO, 1);
        // Slots 0 and 1 (bit 6 of the path 0 and 1; bits 0 to 5 zero, the page's prefix): two
        // leaves under the page's parent, the second with a blob.
        let leaf = |b: u8, blob: Hash| Leaf {
            key_path: [b; 32],
            value_hash: [b; 32],
            blob_hash: blob,
        };
        let (a, b) = (leaf(0x01, ZERO), leaf(0x03, [9; 32]));
        let mut page = Page::empty();
        assert!(page.set(0, Node::leaf(kind, a)));
        assert!(page.set(1, Node::leaf(kind, b)));
        let bytes = page.encode().unwrap();
        assert_eq!(bytes.len(), 1 + KIND_BYTES + 64 + 96);
        assert_eq!(bytes[1] & 0b1111, KIND_LEAF | (KIND_LEAF_BLOB << 2));
        let decoded = Page::decode(kind, &id, &bytes).unwrap();
        assert_eq!(decoded, page);
        assert_eq!(decoded.hashes[0], a.hash(kind));
        assert_eq!(decoded.hashes[1], b.hash(kind));
        // Slot 1's blob hash set to zero, its kind still "with a blob": refused.
        let mut zeroed = bytes.clone();
        let at = 1 + KIND_BYTES + 64 + 64;
        zeroed[at..at + 32].copy_from_slice(&ZERO);
        assert!(Page::decode(kind, &id, &zeroed).is_err());
    }

    #[test]
    fn pages_roundtrip_and_refuse_junk() {
        let kind = HashKind::Sha256;
        let batch: Vec<(u16, Option<u8>)> = (0..500).map(|k| (k, Some(1))).collect();
        let (state, store) = run(kind, 1, &[batch]);
        // The retained pages in a segment of their own, as a snapshot writes them.
        let mut own = crate::pagelog::SegmentBuilder::new(Path::new("/t")).unwrap();
        let top = save_retained(&state, &mut |k, p| own.push(k, p)).unwrap();
        assert!(top.is_some());
        let id = own.id();
        let (bytes, records) = own.finish();
        let path = PathBuf::from(format!("/t/{}", crate::pagelog::segment_file_name(id)));
        let mut file = store.fs.create(&path).unwrap();
        file.append(&bytes).unwrap();
        let mut with_own = state.segments.clone();
        with_own.add_bytes(&store.log.adopt(id, id, &path, false).unwrap(), records);
        let stored = stored_pages(&state, &store).unwrap();
        assert!(!stored.is_empty());
        let locs: Vec<PageLoc> = stored.iter().map(|(_, l)| *l).collect();
        let records = PageLog::read(&store.io, &state.segments, &locs).unwrap();
        for ((id, _), (key, bytes)) in stored.iter().zip(&records) {
            assert_eq!(&id.key(), key);
            let page = Page::decode(kind, id, bytes).unwrap();
            assert_eq!(&page.encode().unwrap(), bytes);
            for cut in [0, 1, 32, bytes.len() - 1] {
                assert!(Page::decode(kind, id, &bytes[..cut]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Page::decode(kind, id, &longer).is_err());
        }
        // The version reads back whole from its top page.
        let restored =
            TrieState::restore(kind, 1, state.version, state.root, top, with_own, &store).unwrap();
        assert_eq!(restored.retained.len(), state.retained.len());
        assert_eq!(restored.segments.live_bytes(), state.segments.live_bytes());
        assert_eq!(stored_pages(&restored, &store).unwrap(), stored);
    }
}

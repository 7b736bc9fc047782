//! The paged Merkle trie of an authenticated table: its pages, their format, and the work of a
//! commit (rehash the dirty paths once, bottom up) and of a proof.
//!
//! Owns: [`PageId`], [`Page`] and its encoding (`docs/format/trie.md`, "Pages"), [`TrieState`]
//! (one version of a table's trie: root, retained top pages), and [`commit`], [`load_paths`],
//! [`prove`], [`top_witness`]. May call: nothing in the engine but the foundation (`cairn_proof`
//! computes every hash). Must never
//! touch: files, runs or tables; pages come from and go to a [`PageStore`] (the authentication
//! module keeps them in a hidden table).
//!
//! Layout: a page holds the nodes at depths `6L+1 ..= 6L+6` below one node at depth `6L` (page
//! level `L`, NOMT's depth-6 rootless subtree): 126 slots, `2^r − 2 + bits` for relative depth
//! `r` in 1..=6. A page exists only if its parent node is internal; a missing page below an
//! internal node is corruption. The root node (depth 0) lives in the [`TrieState`].
//!
//! Bounds, for a commit of `k` changed keys into a trie of `n` leaves (random key paths): about
//! `k·(log₂ n − log₂ k + 2)` node hashes; pages read: those on the changed paths below the
//! retained levels not already loaded, in one batched read per page level (about
//! `⌈(log₂ n + 1.3)/6⌉ − retained` rounds, two at 10⁸ keys with three retained levels); memory:
//! the pages touched (at most `k` per page level) plus the retained levels.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use cairn_proof::hash::{bit, common_prefix_bits};
use cairn_proof::{Hash, HashKind, Leaf, ProofNode, ProofWriter, ZERO};

use crate::error::{Error, Result};

/// Trie levels per page.
pub(crate) const PAGE_DEPTH: usize = 6;
/// Node slots per page: 2 + 4 + … + 64.
pub(crate) const PAGE_SLOTS: usize = 126;
/// Page levels in a trie of 256-bit key paths (the last one partly used).
pub(crate) const PAGE_LEVELS: usize = 43;
/// The version byte of an encoded page.
const PAGE_FORMAT: u8 = 1;
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

    /// The page's key in the page store: the level, then its prefix bits packed big-endian
    /// (trailing bits zero). Keys sort by level first, so the retained levels are one range.
    pub(crate) fn key(&self) -> Vec<u8> {
        let bytes = (self.level() * PAGE_DEPTH).div_ceil(8);
        let mut key = Vec::with_capacity(1 + bytes);
        key.push(self.level);
        key.extend_from_slice(&self.prefix[..bytes]);
        key
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
    let mut out = *path;
    for (i, byte) in out.iter_mut().enumerate() {
        let start = i * 8;
        if start >= bits {
            *byte = 0;
        } else if start + 8 > bits {
            *byte &= 0xFF << (start + 8 - bits);
        }
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
}

const KIND_EMPTY: u8 = 0;
const KIND_INTERNAL: u8 = 1;
const KIND_LEAF: u8 = 2;

impl Page {
    pub(crate) fn empty() -> Page {
        Page {
            kinds: [KIND_EMPTY; PAGE_SLOTS],
            hashes: Box::new([ZERO; PAGE_SLOTS]),
            leaves: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.kinds.iter().all(|&k| k == KIND_EMPTY)
    }

    fn node(&self, slot: usize) -> Node {
        match self.kinds[slot] {
            KIND_INTERNAL => Node::Internal(self.hashes[slot]),
            KIND_LEAF => {
                let leaf = self
                    .leaves
                    .iter()
                    .find(|(s, _)| *s as usize == slot)
                    .map(|(_, l)| *l)
                    .expect("a leaf slot has its leaf");
                Node::Leaf(leaf, self.hashes[slot])
            }
            _ => Node::Empty,
        }
    }

    /// Sets a slot; returns whether it changed.
    fn set(&mut self, slot: usize, node: Node) -> bool {
        if self.node(slot) == node {
            return false;
        }
        self.leaves.retain(|(s, _)| *s as usize != slot);
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
        std::mem::size_of::<Page>() + PAGE_SLOTS * 32 + self.leaves.len() * 97
    }

    /// The page's bytes in the page store: a version byte, 2 bits of kind per slot, then each
    /// non-empty slot in order: an internal node's hash (32 bytes), or a leaf's hash, key path,
    /// value hash and blob hash (128 bytes).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + KIND_BYTES + PAGE_SLOTS * 32);
        out.push(PAGE_FORMAT);
        let mut kinds = [0u8; KIND_BYTES];
        for (i, &k) in self.kinds.iter().enumerate() {
            kinds[i / 4] |= k << (2 * (i % 4));
        }
        out.extend_from_slice(&kinds);
        let mut leaves = self.leaves.iter();
        for (i, &k) in self.kinds.iter().enumerate() {
            match k {
                KIND_INTERNAL => out.extend_from_slice(&self.hashes[i]),
                KIND_LEAF => {
                    let (_, leaf) = leaves.next().expect("a leaf per leaf slot");
                    out.extend_from_slice(&self.hashes[i]);
                    out.extend_from_slice(&leaf.key_path);
                    out.extend_from_slice(&leaf.value_hash);
                    out.extend_from_slice(&leaf.blob_hash);
                }
                _ => {}
            }
        }
        out
    }

    /// Decodes page `id` from the store. Total: refuses a wrong version, a bad kind, a node
    /// under a slot that is not internal, a leaf off its key path, a short or long buffer.
    /// Leaf hashes are not recomputed here (the run's checksums cover the bytes).
    pub(crate) fn decode(id: &PageId, bytes: &[u8]) -> Result<Page> {
        let bad = |detail: &str| Error::corrupt("trie page", detail.to_string());
        if bytes.len() < 1 + KIND_BYTES {
            return Err(bad("shorter than its header"));
        }
        if bytes[0] != PAGE_FORMAT {
            return Err(bad("unknown page format version"));
        }
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
            let kind = (bytes[1 + i / 4] >> (2 * (i % 4))) & 3;
            if kind != KIND_EMPTY && i >= 2 && page.kinds[(i - 2) / 2] != KIND_INTERNAL {
                return Err(bad("a node below a slot that is not internal"));
            }
            match kind {
                KIND_EMPTY => {}
                KIND_INTERNAL => {
                    page.kinds[i] = KIND_INTERNAL;
                    page.hashes[i] = take(&mut at)?;
                }
                KIND_LEAF => {
                    page.kinds[i] = KIND_LEAF;
                    page.hashes[i] = take(&mut at)?;
                    let leaf = Leaf {
                        key_path: take(&mut at)?,
                        value_hash: take(&mut at)?,
                        blob_hash: take(&mut at)?,
                    };
                    let (depth, position) = slot_position(id, i);
                    if common_prefix_bits(&leaf.key_path, &position) < depth {
                        return Err(bad("a leaf off its key path"));
                    }
                    page.leaves.push((i as u8, leaf));
                }
                _ => return Err(bad("unknown slot kind")),
            }
        }
        if (bytes[KIND_BYTES] >> 4) != 0 {
            return Err(bad("padding bits set"));
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

/// The pages below page `id`: one per internal node of its bottom row, with that node's hash.
fn child_pages<'a>(id: &'a PageId, page: &'a Page) -> impl Iterator<Item = (PageId, Hash)> + 'a {
    (PAGE_SLOTS - 64..PAGE_SLOTS).filter_map(move |slot| match page.node(slot) {
        Node::Internal(h) => {
            let (_, path) = slot_position(id, slot);
            Some((PageId::on_path(&path, id.level() + 1), h))
        }
        _ => None,
    })
}

/// One version of a table's trie: cheap to clone (the retained pages are shared).
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
    /// Retained pages changed (or removed) since they were last written to the page store.
    pub(crate) unsaved:
        imbl::GenericHashSet<PageId, PageIdHash, imbl::shared_ptr::DefaultSharedPtr>,
}

impl TrieState {
    pub(crate) fn new(kind: HashKind, retained_levels: usize) -> TrieState {
        TrieState {
            kind,
            root: Node::Empty,
            version: 0,
            retained_levels: retained_levels.clamp(1, PAGE_LEVELS),
            retained: Default::default(),
            unsaved: Default::default(),
        }
    }

    /// A trie version read back from a snapshot: its root node and its retained pages (every
    /// page of the page store at a retained level). Checks that each page hangs below an
    /// internal node that hashes its top (one hash per page) and that every internal node at
    /// a retained page boundary has its page: a lost, stale or stray page is corruption.
    pub(crate) fn restore(
        kind: HashKind,
        retained_levels: usize,
        version: u64,
        root: Node,
        pages: Vec<(PageId, Page)>,
    ) -> Result<TrieState> {
        let mut state = TrieState::new(kind, retained_levels);
        state.version = version;
        state.root = root;
        for (id, page) in pages {
            if id.level() >= state.retained_levels {
                return Err(Error::corrupt(
                    "trie",
                    "a page below the retained levels was given",
                ));
            }
            state.retained.insert(id, Arc::new(page));
        }
        let mut expected = 0usize;
        // The root's page, then each page's children at the next retained level.
        if let Node::Internal(h) = state.root {
            let id = PageId::on_path(&ZERO, 0);
            let page = state
                .retained
                .get(&id)
                .ok_or_else(|| missing_retained(&id))?;
            check_top(kind, &id, page, &h)?;
            expected += 1;
        }
        for (id, page) in state.retained.iter() {
            if id.level() + 1 >= state.retained_levels {
                continue;
            }
            for (child, h) in child_pages(id, page) {
                let child_page = state
                    .retained
                    .get(&child)
                    .ok_or_else(|| missing_retained(&child))?;
                check_top(kind, &child, child_page, &h)?;
                expected += 1;
            }
        }
        if expected != state.retained.len() {
            return Err(Error::corrupt(
                "trie",
                format!(
                    "{} retained pages hang below no internal node",
                    state.retained.len() - expected
                ),
            ));
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

    /// The page writes that bring the store up to date with the retained pages (for a
    /// snapshot), and forgets that they were unsaved.
    pub(crate) fn take_unsaved(&mut self) -> Vec<(PageId, Option<Arc<Page>>)> {
        let unsaved = std::mem::take(&mut self.unsaved);
        let mut out: Vec<_> = unsaved
            .into_iter()
            .map(|id| (id, self.retained.get(&id).cloned()))
            .collect();
        out.sort_by_key(|a| a.0);
        out
    }
}

/// Where pages below the retained levels live.
pub(crate) trait PageStore {
    /// Reads pages, in one batch; `None` for a page the store does not hold. Errors are the
    /// store's (I/O, corruption).
    fn read_pages(&self, ids: &[PageId]) -> Result<Vec<Option<Page>>>;
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
    /// Pages read from the store (not the retained ones), for tests and reports.
    pub(crate) reads: u64,
    /// Hashes computed: node and leaf hashes of commits, and one per page read to check it.
    pub(crate) hashes: u64,
}

impl Loaded {
    pub(crate) fn new() -> Loaded {
        Loaded {
            pages: HashMap::default(),
            reads: 0,
            hashes: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }
}

/// Loads every page the given key paths pass through into `loaded`: one batched store read per
/// page level, each page checked against its parent node's hash (one hash per page).
pub(crate) fn load_paths(
    state: &TrieState,
    loaded: &mut Loaded,
    store: &dyn PageStore,
    paths: &[Hash],
) -> Result<()> {
    loop {
        let mut missing: Vec<(PageId, Hash)> = Vec::new();
        let mut seen: HashSet<PageId, PageIdHash> = HashSet::default();
        for path in paths {
            if let Some((id, parent)) = first_missing(state, loaded, path)? {
                if seen.insert(id) {
                    missing.push((id, parent));
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort_by_key(|a| a.0);
        read_missing(state.kind, loaded, store, missing)?;
    }
}

/// Reads pages (with their parent nodes' hashes) in one batch, checks each against its parent
/// and keeps it.
fn read_missing(
    kind: HashKind,
    loaded: &mut Loaded,
    store: &dyn PageStore,
    missing: Vec<(PageId, Hash)>,
) -> Result<()> {
    let ids: Vec<PageId> = missing.iter().map(|(id, _)| *id).collect();
    let pages = store.read_pages(&ids)?;
    loaded.reads += ids.len() as u64;
    loaded.hashes += ids.len() as u64;
    for ((id, parent), page) in missing.into_iter().zip(pages) {
        let page = page.ok_or_else(|| {
            Error::corrupt(
                "trie",
                format!("page {:?} below an internal node is missing", id.key()),
            )
        })?;
        check_top(kind, &id, &page, &parent)?;
        loaded.pages.insert(id, page);
    }
    Ok(())
}

/// Loads every page holding a node above depth `levels`: one batched read per page level.
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
        let missing: Vec<(PageId, Hash)> = frontier
            .into_iter()
            .map(|(path, h)| (PageId::on_path(&path, level), h))
            .filter(|(id, _)| !loaded.pages.contains_key(id))
            .filter(|(id, _)| id.level() >= state.retained_levels)
            .collect();
        if !missing.is_empty() {
            read_missing(state.kind, loaded, store, missing)?;
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

/// Every page reachable from the root (for the reclamation test): retained pages from memory,
/// the others read level by level. Cost: every page once.
#[cfg(test)]
pub(crate) fn reachable_pages(
    state: &TrieState,
    store: &dyn PageStore,
) -> Result<std::collections::BTreeSet<PageId>> {
    let mut out = std::collections::BTreeSet::new();
    let mut frontier: Vec<PageId> = match state.root {
        Node::Internal(_) => vec![PageId::on_path(&ZERO, 0)],
        _ => Vec::new(),
    };
    while !frontier.is_empty() {
        let pages: Vec<Page> = if frontier[0].level() < state.retained_levels {
            frontier
                .iter()
                .map(|id| {
                    state
                        .retained
                        .get(id)
                        .map(|p| (**p).clone())
                        .ok_or_else(|| missing_retained(id))
                })
                .collect::<Result<_>>()?
        } else {
            store
                .read_pages(&frontier)?
                .into_iter()
                .map(|p| p.ok_or_else(|| Error::corrupt("trie", "a reachable page is missing")))
                .collect::<Result<_>>()?
        };
        let mut next = Vec::new();
        for (id, page) in frontier.iter().zip(&pages) {
            out.insert(*id);
            next.extend(child_pages(id, page).map(|(child, _)| child));
        }
        frontier = next;
    }
    Ok(out)
}

/// The first page on `path` that is neither retained nor loaded, with its parent node's hash;
/// `None` when the path ends (at a leaf or an empty node) in pages already at hand.
fn first_missing(
    state: &TrieState,
    loaded: &Loaded,
    path: &Hash,
) -> Result<Option<(PageId, Hash)>> {
    let mut node = state.root;
    let mut depth = 0;
    while let Node::Internal(h) = node {
        let id = PageId::on_path(path, depth / PAGE_DEPTH);
        let page = match loaded.pages.get(&id) {
            Some(p) => p,
            None if id.level() < state.retained_levels => match state.retained.get(&id) {
                Some(p) => &**p,
                None => return Err(missing_retained(&id)),
            },
            None => return Ok(Some((id, h))),
        };
        // Follow the path to the page's bottom row or to where it ends.
        loop {
            depth += 1;
            node = page.node(slot(depth, path));
            if !matches!(node, Node::Internal(_)) || depth % PAGE_DEPTH == 0 {
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
/// once, bottom up, and returns the page writes for the store (`None`: remove the page).
/// Retained pages are updated in `state` and marked unsaved. The pages on the changed paths
/// are read first ([`load_paths`]) unless `loaded` already holds them.
pub(crate) fn commit(
    state: &mut TrieState,
    loaded: &mut Loaded,
    store: &dyn PageStore,
    changes: &[Change],
) -> Result<Vec<(PageId, Option<Page>)>> {
    debug_assert!(changes.windows(2).all(|w| w[0].key_path < w[1].key_path));
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let paths: Vec<Hash> = changes.iter().map(|c| c.key_path).collect();
    load_paths(state, loaded, store, &paths)?;
    // The retained pages are changed in place (copied first only where a duplicate or a
    // snapshot still shares them): on an error below, the caller breaks the table.
    let mut work = Work {
        kind: state.kind,
        state,
        loaded,
        dirty: HashSet::default(),
    };
    let root = work.state.root;
    let new_root = work.update(0, &ZERO, root, changes)?;
    let dirty = std::mem::take(&mut work.dirty);
    state.root = new_root;
    state.version += 1;
    let mut writes = Vec::new();
    let mut dirty: Vec<PageId> = dirty.into_iter().collect();
    dirty.sort();
    for id in dirty {
        if id.level() < state.retained_levels {
            if state.retained.get(&id).is_some_and(|p| p.is_empty()) {
                state.retained.remove(&id);
            }
            state.unsaved.insert(id);
        } else {
            let page = loaded.pages.get(&id).expect("a dirty page is loaded");
            writes.push((id, (!page.is_empty()).then(|| page.clone())));
        }
    }
    Ok(writes)
}

struct Work<'a> {
    kind: HashKind,
    state: &'a mut TrieState,
    loaded: &'a mut Loaded,
    dirty: HashSet<PageId, PageIdHash>,
}

impl Work<'_> {
    /// The node at `depth` (at least 1) on `path`: from a retained page, a loaded one, or
    /// empty where no page is at hand (only where none can exist: the caller knows the parent
    /// node is not internal, or has loaded the page).
    fn node(&self, depth: usize, path: &Hash) -> Node {
        let id = PageId::on_path(path, (depth - 1) / PAGE_DEPTH);
        let page = if id.level() < self.state.retained_levels {
            self.state.retained.get(&id).map(|p| &**p)
        } else {
            self.loaded.pages.get(&id)
        };
        page.map_or(Node::Empty, |p| p.node(slot(depth, path)))
    }

    /// Writes a node, creating its page if needed (a retained page is copied first if shared).
    fn set(&mut self, depth: usize, path: &Hash, node: Node) {
        if self.node(depth, path) == node {
            return;
        }
        let id = PageId::on_path(path, (depth - 1) / PAGE_DEPTH);
        let page = if id.level() < self.state.retained_levels {
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
        match here {
            Node::Internal(_) => {
                if depth >= 256 {
                    return Err(Error::corrupt("trie", "an internal node at depth 256"));
                }
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
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    /// Pages in a map, counting reads.
    #[derive(Default)]
    struct MapStore {
        pages: RefCell<BTreeMap<PageId, Vec<u8>>>,
    }

    impl PageStore for MapStore {
        fn read_pages(&self, ids: &[PageId]) -> Result<Vec<Option<Page>>> {
            let pages = self.pages.borrow();
            ids.iter()
                .map(|id| pages.get(id).map(|b| Page::decode(id, b)).transpose())
                .collect()
        }
    }

    impl MapStore {
        fn apply(&self, writes: Vec<(PageId, Option<Page>)>) {
            let mut pages = self.pages.borrow_mut();
            for (id, page) in writes {
                match page {
                    Some(p) => pages.insert(id, p.encode()),
                    None => pages.remove(&id),
                };
            }
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
    ) -> (TrieState, MapStore) {
        let store = MapStore::default();
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
            let writes = commit(&mut state, &mut loaded, &store, &changes).unwrap();
            store.apply(writes);
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
                let (state, store) = run(kind, retained, &batches);
                assert_eq!(state.root, Node::Empty);
                assert!(state.retained.is_empty());
                assert!(store.pages.borrow().is_empty(), "every page removed");
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

    #[test]
    fn pages_roundtrip_and_refuse_junk() {
        let kind = HashKind::Sha256;
        let batch: Vec<(u16, Option<u8>)> = (0..500).map(|k| (k, Some(1))).collect();
        let (_, store) = run(kind, 1, &[batch]);
        for (id, bytes) in store.pages.borrow().iter() {
            let page = Page::decode(id, bytes).unwrap();
            assert_eq!(&page.encode(), bytes);
            for cut in [0, 1, 32, bytes.len() - 1] {
                assert!(Page::decode(id, &bytes[..cut]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Page::decode(id, &longer).is_err());
        }
    }
}

//! The trie's pages: a page's place ([`PageId`]) and its key in the page log, the nodes it holds,
//! and its encoding (`docs/format/trie.md`, "Pages"), with the slot arithmetic that places a node
//! in its page.

use std::hash::{BuildHasherDefault, Hasher};

use cairn_proof::hash::{bit, common_prefix_bits};
use cairn_proof::{Hash, HashKind, Leaf, ZERO};

use crate::error::{Error, Result};
use crate::pagelog::{PageLoc, LOC_BYTES};

/// Trie levels per page (but the top page, which may hold fewer: [`Geometry`]).
pub(crate) const PAGE_DEPTH: usize = 6;
/// Node slots per page: 2 + 4 + … + 64.
pub(crate) const PAGE_SLOTS: usize = 126;
/// The version byte of an encoded page (`docs/format/trie.md`, "Pages"): 3 stores a leaf
/// without its hash, and without its blob hash when it has no blob.
const PAGE_FORMAT: u8 = 3;
/// The previous page format, still read: every leaf with its hash and blob hash (128 bytes).
const PAGE_FORMAT_V2: u8 = 2;
/// Bytes of an encoded page's slot kinds (2 bits per slot).
const KIND_BYTES: usize = 32;

/// Where a trie's page levels begin (`docs/format/trie.md`, "Pages"): the top page (level 0)
/// holds the nodes at depths `1 ..= top` (`top` in 1..=6), every page of level `L ≥ 1` the six
/// trie levels below one node at depth `top + 6·(L − 1)`. A table's geometry is fixed when it
/// is created ([`crate::AuthConfig::top_page_depth`]); the default, 6, is every table's from
/// before the choice existed. A smaller top page moves every boundary up, so that the pages
/// below the retained levels start where their subtrees hold few enough keys to fit a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Geometry {
    top: u8,
}

impl Geometry {
    /// The geometry of every table before the choice existed: pages at depths divisible by 6.
    pub(crate) const DEFAULT: Geometry = Geometry {
        top: PAGE_DEPTH as u8,
    };

    /// The geometry whose top page holds `top` trie levels, if `top` is in 1..=6.
    pub(crate) fn new(top: u8) -> Option<Geometry> {
        (1..=PAGE_DEPTH as u8)
            .contains(&top)
            .then_some(Geometry { top })
    }

    /// Trie levels in the top page.
    pub(crate) fn top(self) -> usize {
        self.top as usize
    }

    /// The depth of the node that the pages of `level` hang below.
    pub(crate) fn base(self, level: usize) -> usize {
        match level {
            0 => 0,
            _ => self.top() + PAGE_DEPTH * (level - 1),
        }
    }

    /// Trie levels in a page of `level`.
    pub(crate) fn rows(self, level: usize) -> usize {
        match level {
            0 => self.top(),
            _ => PAGE_DEPTH,
        }
    }

    /// The page level holding the nodes at `depth` (at least 1).
    pub(crate) fn level_of(self, depth: usize) -> usize {
        debug_assert!(depth >= 1);
        match depth <= self.top() {
            true => 0,
            false => 1 + (depth - self.top() - 1) / PAGE_DEPTH,
        }
    }

    /// Whether pages hang below the nodes at `depth` (it is some level's base).
    pub(crate) fn is_base(self, depth: usize) -> bool {
        depth == 0 || (depth >= self.top() && (depth - self.top()).is_multiple_of(PAGE_DEPTH))
    }

    /// Page levels a trie of 256-bit key paths may use (the last one partly).
    pub(crate) fn levels(self) -> usize {
        1 + (256 - self.top()).div_ceil(PAGE_DEPTH)
    }
}

/// The first slot of the bottom row of a page of `rows` trie levels, whose node `index` (in
/// `0 .. 2^rows`) is at slot `bottom(rows) + index`.
pub(super) fn bottom(rows: usize) -> usize {
    (1 << rows) - 2
}

/// A page's place: its level, the trie's geometry, and the key-path bits above it (the first
/// `geometry.base(level)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PageId {
    level: u8,
    geometry: Geometry,
    pub(super) prefix: Hash,
}

impl PageId {
    /// The page at `level` on `path`.
    pub(crate) fn on_path(geometry: Geometry, path: &Hash, level: usize) -> PageId {
        debug_assert!(level < geometry.levels());
        PageId {
            level: level as u8,
            geometry,
            prefix: mask(path, geometry.base(level)),
        }
    }

    /// The top page of a trie of `geometry`.
    pub(crate) fn top(geometry: Geometry) -> PageId {
        PageId::on_path(geometry, &ZERO, 0)
    }

    pub(crate) fn level(&self) -> usize {
        self.level as usize
    }

    /// Trie levels in this page.
    pub(crate) fn rows(&self) -> usize {
        self.geometry.rows(self.level())
    }

    /// The depth of the node this page hangs below.
    pub(crate) fn base(&self) -> usize {
        self.geometry.base(self.level())
    }

    /// The slot of this page's bottom-row node `index`.
    pub(super) fn bottom_slot(&self, index: usize) -> usize {
        bottom(self.rows()) + index
    }

    /// Nodes in this page's bottom row.
    pub(super) fn bottom_width(&self) -> usize {
        1 << self.rows()
    }

    /// The page of level `level` on this page's path in the same trie.
    pub(super) fn at_level(&self, path: &Hash, level: usize) -> PageId {
        PageId::on_path(self.geometry, path, level)
    }

    /// The page above this one (at level `level − 1`) and the index in its bottom row of
    /// the node this page hangs below. `None` for the top page.
    pub(super) fn parent(&self) -> Option<(PageId, usize)> {
        let level = self.level().checked_sub(1)?;
        let mut index = 0usize;
        for i in self.geometry.base(level)..self.base() {
            index = (index << 1) | bit(&self.prefix, i) as usize;
        }
        Some((PageId::on_path(self.geometry, &self.prefix, level), index))
    }

    /// The page's key in the page store: the level, then its prefix bits packed big-endian
    /// (trailing bits zero). Keys sort by level first, so the retained levels are one range.
    pub(crate) fn key(&self) -> Vec<u8> {
        let bytes = self.base().div_ceil(8);
        let mut key = Vec::with_capacity(1 + bytes);
        key.push(self.level);
        key.extend_from_slice(&self.prefix[..bytes]);
        key
    }

    /// Whether `key` is this page's store key ([`PageId::key`]), without building it.
    pub(super) fn key_is(&self, key: &[u8]) -> bool {
        let bytes = self.base().div_ceil(8);
        key.len() == 1 + bytes && key[0] == self.level && key[1..] == self.prefix[..bytes]
    }

    /// The page a store key names in a trie of `geometry`, if it is one (total).
    pub(crate) fn from_key(geometry: Geometry, key: &[u8]) -> Option<PageId> {
        let (&level, rest) = key.split_first()?;
        if level as usize >= geometry.levels() {
            return None;
        }
        let bits = geometry.base(level as usize);
        if rest.len() != bits.div_ceil(8) {
            return None;
        }
        let mut prefix = ZERO;
        prefix[..rest.len()].copy_from_slice(rest);
        (mask(&prefix, bits) == prefix).then_some(PageId {
            level,
            geometry,
            prefix,
        })
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
pub(super) fn mask(path: &Hash, bits: usize) -> Hash {
    let mut out = ZERO;
    let whole = bits.min(256) / 8;
    out[..whole].copy_from_slice(&path[..whole]);
    if whole < 32 && !bits.is_multiple_of(8) {
        out[whole] = path[whole] & (0xFF << (8 - bits % 8));
    }
    out
}

/// `path` with bit `i` set to `value`.
pub(super) fn with_bit(path: &Hash, i: usize, value: bool) -> Hash {
    let mut out = *path;
    if value {
        out[i / 8] |= 0x80 >> (i % 8);
    } else {
        out[i / 8] &= !(0x80 >> (i % 8));
    }
    out
}

/// The slot of the node at `depth` (at least 1) on `path`, inside its page of `geometry`.
pub(super) fn slot(geometry: Geometry, depth: usize, path: &Hash) -> usize {
    let base = geometry.base(geometry.level_of(depth));
    let rel = depth - base;
    let mut bits = 0usize;
    for i in base..depth {
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

    pub(super) fn leaf(kind: HashKind, leaf: Leaf) -> Node {
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
    pub(super) kinds: [u8; PAGE_SLOTS],
    pub(super) hashes: Box<[Hash; PAGE_SLOTS]>,
    /// The leaves, by slot.
    leaves: Vec<(u8, Leaf)>,
    /// Where the page below each internal node of the bottom row is, by bottom-row index
    /// (0..64), sorted. Kept in step by commits; every internal bottom-row node has one once
    /// its page is written.
    children: Vec<(u8, PageLoc)>,
}

const KIND_EMPTY: u8 = 0;
pub(super) const KIND_INTERNAL: u8 = 1;
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
    pub(super) fn child(&self, index: usize) -> Option<PageLoc> {
        self.children
            .binary_search_by_key(&(index as u8), |(i, _)| *i)
            .ok()
            .map(|at| self.children[at].1)
    }

    /// Every pointer the page keeps, by bottom-row index (increasing).
    pub(super) fn children(&self) -> &[(u8, PageLoc)] {
        &self.children
    }

    /// Sets (or with `None` clears) the pointer to the page below bottom-row node `index`.
    pub(super) fn set_child(&mut self, index: usize, loc: Option<PageLoc>) {
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

    pub(super) fn node(&self, slot: usize) -> Node {
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
    pub(super) fn set(&mut self, slot: usize, node: Node) -> bool {
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
    pub(crate) fn encode(&self, id: &PageId) -> Result<Vec<u8>> {
        self.encode_with(id, |index| self.child(index))
    }

    /// The encoding of this page as page `id` (see `Page::encode`) with the pointers
    /// `child(index)` gives instead of the page's own.
    pub(super) fn encode_with(
        &self,
        id: &PageId,
        child: impl Fn(usize) -> Option<PageLoc>,
    ) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(1 + KIND_BYTES + PAGE_SLOTS * 32);
        self.encode_into(id, &mut out, child)?;
        Ok(out)
    }

    /// [`Page::encode_with`] into `out` (cleared first), so that one buffer serves many pages.
    pub(super) fn encode_into(
        &self,
        id: &PageId,
        out: &mut Vec<u8>,
        child: impl Fn(usize) -> Option<PageLoc>,
    ) -> Result<()> {
        debug_assert!(
            self.kinds[bottom(id.rows() + 1).min(PAGE_SLOTS)..]
                .iter()
                .all(|&k| k == KIND_EMPTY),
            "no node below the page's bottom row"
        );
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
        for index in 0..id.bottom_width() {
            if self.kinds[id.bottom_slot(index)] == KIND_INTERNAL {
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
        // The slots of the page's rows (all 126 but in a top page of fewer trie levels).
        let used = bottom(id.rows() + 1).min(PAGE_SLOTS);
        for i in 0..PAGE_SLOTS {
            let code = (bytes[1 + i / 4] >> (2 * (i % 4))) & 3;
            if code != KIND_EMPTY && i >= used {
                return Err(bad("a node below the page's bottom row"));
            }
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
        for index in 0..id.bottom_width() {
            if page.kinds[id.bottom_slot(index)] == KIND_INTERNAL {
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
pub(super) fn slot_position(id: &PageId, i: usize) -> (usize, Hash) {
    let rel = (usize::BITS - (i + 2).leading_zeros() - 1) as usize; // floor(log2(i + 2))
    let bits = i + 2 - (1 << rel);
    let base = id.base();
    let mut path = id.prefix;
    for j in 0..rel {
        path = with_bit(&path, base + j, (bits >> (rel - 1 - j)) & 1 == 1);
    }
    (base + rel, path)
}

/// The pages below page `id`: one per internal node of its bottom row, with that node's hash
/// and the pointer to the page (`None` where the page keeps none: a commit not written yet).
pub(super) fn child_pages<'a>(
    id: &'a PageId,
    page: &'a Page,
) -> impl Iterator<Item = (PageId, Hash, Option<PageLoc>)> + 'a {
    (0..id.bottom_width()).filter_map(move |index| match page.node(id.bottom_slot(index)) {
        Node::Internal(h) => {
            let (_, path) = slot_position(id, id.bottom_slot(index));
            Some((id.at_level(&path, id.level() + 1), h, page.child(index)))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::run;
    use super::*;

    #[test]
    fn page_ids_and_slots() {
        let g = Geometry::DEFAULT;
        let mut path = ZERO;
        path[0] = 0b1011_0110;
        path[1] = 0b0100_0000;
        assert_eq!(slot(g, 1, &path), 1); // depth 1, bit 1
        assert_eq!(slot(g, 2, &path), 2 + 2); // bits 10
        assert_eq!(slot(g, 6, &path), 62 + 0b101101);
        assert_eq!(slot(g, 7, &path), 1); // page level 1, relative depth 1, bit 6 = 1
        let id = PageId::on_path(g, &path, 1);
        assert_eq!(id.key(), vec![1, 0b1011_0100]);
        assert_eq!(PageId::from_key(g, &id.key()), Some(id));
        assert_eq!(PageId::from_key(g, &[1, 0b1011_0101]), None); // bits past the prefix
        assert_eq!(PageId::from_key(g, &[43]), None);
        for i in 0..PAGE_SLOTS {
            let (depth, p) = slot_position(&id, i);
            assert_eq!(slot(g, depth, &p), i);
        }
    }

    /// With a top page of `t` trie levels, page levels begin at depths 0, t, t + 6, …: every
    /// depth's node has one page and slot, and a page's bottom row, parent and key agree.
    #[test]
    fn geometries_place_every_depth_once() {
        assert_eq!(Geometry::new(0), None);
        assert_eq!(Geometry::new(7), None);
        assert_eq!(Geometry::DEFAULT.levels(), 43);
        let mut path = ZERO;
        for (i, b) in path.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37) ^ 0xA5;
        }
        for top in 1..=6u8 {
            let g = Geometry::new(top).unwrap();
            assert_eq!(g.levels(), 1 + (256 - top as usize).div_ceil(6));
            assert!(g.base(g.levels() - 1) < 256 && g.base(g.levels() - 1) + 6 >= 256);
            for depth in 1..=256 {
                let level = g.level_of(depth);
                let id = PageId::on_path(g, &path, level);
                let rel = depth - id.base();
                assert!((1..=id.rows()).contains(&rel), "top {top}, depth {depth}");
                assert_eq!(g.is_base(depth), rel == id.rows());
                let at = slot(g, depth, &path);
                assert_eq!(slot_position(&id, at), (depth, mask(&path, depth)));
                if rel == id.rows() {
                    assert!(at >= id.bottom_slot(0) && at < id.bottom_slot(id.bottom_width()));
                }
                assert_eq!(PageId::from_key(g, &id.key()), Some(id));
                if let Some((parent, index)) = id.parent() {
                    assert_eq!(parent.level() + 1, level);
                    let (d, p) = slot_position(&parent, parent.bottom_slot(index));
                    assert_eq!(d, id.base());
                    assert_eq!(parent.at_level(&p, level), id);
                }
            }
        }
    }

    /// Pages of format 2 (every leaf with its hash and blob hash), as segments written before
    /// format 3 hold them, still read: the golden segment of the same trie as
    /// [`a_retained_segment_is_pinned`], from before format 3, decodes to the same pages
    /// (pointers aside: the records sit elsewhere), and a format-2 leaf whose stored hash is
    /// wrong is refused.
    ///
    /// [`a_retained_segment_is_pinned`]: super::super::tests::a_retained_segment_is_pinned
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
            let id = PageId::from_key(Geometry::DEFAULT, key).unwrap();
            let page = Page::decode(kind, &id, bytes).unwrap();
            let retained = state.retained.get(&id).unwrap();
            assert_eq!(page.kinds, retained.kinds);
            assert_eq!(page.hashes, retained.hashes);
            assert_eq!(page.leaves, retained.leaves);
            leaves += page.leaves.len();
            // Format 3 holds the same page in fewer bytes, and reads back the same.
            let again = page.encode(&id).unwrap();
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
        let id = PageId::on_path(Geometry::DEFAULT, &ZERO, 1);
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
        let bytes = page.encode(&id).unwrap();
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
}

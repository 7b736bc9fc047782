//! Reading a version's pages through the page log: the pages an operation loads ([`Loaded`]),
//! along key paths or down to a depth, one round of batched reads per page level, each page
//! checked against its parent node.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use cairn_proof::hash::bit;
use cairn_proof::{Hash, HashKind, ZERO};

use crate::error::{Error, Result};
use crate::pagelog::{self, PageLoc, Segments};

#[cfg(test)]
use super::page::child_pages;
use super::page::{with_bit, Node, Page, PageId, PageIdHash, KIND_INTERNAL};
use super::proof::Reader;
use super::{cores, PageStore, TrieState, PARALLEL_MIN};

/// Pages loaded for one operation (a commit, a proof, a prefetch), over one trie version.
pub(crate) struct Loaded {
    pub(super) pages: HashMap<PageId, Page, PageIdHash>,
    /// Where each loaded page was read from.
    pub(super) locs: HashMap<PageId, PageLoc, PageIdHash>,
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
    pub(super) fn split_halves(&mut self) -> [Loaded; 2] {
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
    pub(super) fn merge(&mut self, halves: [Loaded; 2]) {
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
                walk_to_missing(state, loaded, path, usize::MAX, &mut node, &mut depth)?
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
pub(super) fn child_loc(state: &TrieState, loaded: &Loaded, id: &PageId) -> Result<PageLoc> {
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
pub(super) fn read_checked(
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
pub(super) fn read_missing(
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
    let geometry = state.geometry;
    let last = match levels {
        0 => return Ok(()),
        _ => geometry.level_of(levels),
    };
    for level in 0..=last {
        let mut frontier = Vec::new();
        internal_nodes_at(
            state,
            loaded,
            0,
            &ZERO,
            state.root,
            geometry.base(level),
            &mut frontier,
        )?;
        let mut missing = Vec::new();
        for (path, h) in frontier {
            let id = PageId::on_path(geometry, &path, level);
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
pub(super) fn first_missing(
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
    let geometry = state.geometry;
    while let Node::Internal(h) = *node {
        let level = geometry.level_of(*depth + 1);
        if level >= stop {
            return Ok(None);
        }
        let id = PageId::on_path(geometry, path, level);
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
        let (base, rows) = (id.base(), id.rows());
        let mut bits = 0usize;
        loop {
            bits = (bits << 1) | bit(path, *depth) as usize;
            *depth += 1;
            let rel = *depth - base;
            let slot = (1 << rel) - 2 + bits;
            if page.kinds[slot] != KIND_INTERNAL {
                *node = Node::Empty;
                break;
            }
            *node = Node::Internal(page.hashes[slot]);
            if rel == rows {
                break;
            }
        }
    }
    Ok(None)
}

pub(super) fn missing_retained(id: &PageId) -> Error {
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
pub(super) fn check_top(kind: HashKind, id: &PageId, page: &Page, parent: &Hash) -> Result<()> {
    if kind.node(&page.node(0).hash(), &page.node(1).hash()) != *parent {
        return Err(Error::corrupt(
            "trie",
            format!("page {:?} does not hash to its parent node", id.key()),
        ));
    }
    Ok(())
}

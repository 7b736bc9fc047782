//! A commit's work: applying sorted changes to a version, rehashing every changed path once,
//! bottom up (below the retained levels on two threads where worth it), and appending the
//! changed pages to the page log, deepest first.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use cairn_proof::hash::bit;
use cairn_proof::{Hash, HashKind, Leaf, ZERO};

use crate::error::{Error, Result};
use crate::pagelog::{self, Stream};

use super::load::{load_paths, missing_retained, Loaded};
use super::page::{mask, slot, with_bit, Geometry, Node, Page, PageId, PageIdHash};
use super::{cores, Change, PageStore, TrieState, PARALLEL_MIN};

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
    let cut = state.geometry.base(state.retained_levels);
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
        geometry: state.geometry,
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
    write_pages(state, loaded, store, &stored, &HashMap::default())?;
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

/// Results of the work below the retained levels: the new node at depth `cut` on each path
/// that had changes there, and the pages that work changed.
type Below = (HashMap<Hash, Node, PageIdHash>, HashSet<PageId, PageIdHash>);

/// The part of a commit below the retained levels (depth `cut`), one half of the key space
/// per thread: each reads the pages its changes pass through ([`load_paths`], pages
/// `loaded` already holds are handed to the half they belong to) and rehashes its subtrees
/// below depth `cut`, writing only pages below the retained levels. The halves' pages are
/// then merged back into `loaded`. Retained pages are only read: `state` is unchanged.
pub(super) fn below_in_halves(
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
        geometry: state.geometry,
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
                let geometry = self.state.geometry;
                let id = PageId::on_path(geometry, &child_path, geometry.level_of(depth + 1));
                let page = self
                    .state
                    .retained
                    .get(&id)
                    .ok_or_else(|| missing_retained(&id))?;
                let child = page.node(slot(geometry, depth + 1, &child_path));
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

/// Orders pages deepest level first (then by id), the order they are written in.
pub(super) fn deepest_first(a: &PageId, b: &PageId) -> std::cmp::Ordering {
    b.level().cmp(&a.level()).then(a.cmp(b))
}

/// Appends pages `ids` (deepest first, below the retained levels: each page's bytes from
/// `unchanged` as they are, or encoded from `loaded`; an empty or absent page is removed),
/// pointing each parent at its page's new record, and moves the version's accounting from the
/// old records to the new ones.
pub(super) fn write_pages(
    state: &mut TrieState,
    loaded: &mut Loaded,
    store: &dyn PageStore,
    ids: &[PageId],
    unchanged: &HashMap<PageId, Vec<u8>, PageIdHash>,
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
        let stream = match id.level() == retained_levels {
            true => Stream::Near,
            false => Stream::Deep,
        };
        let encoded = match (unchanged.get(id), loaded.pages.get(id)) {
            (Some(record), _) => Some(&record[..]),
            (None, Some(page)) if !page.is_empty() => {
                page.encode_into(id, &mut bytes, |index| page.child(index))?;
                Some(&bytes[..])
            }
            _ => None,
        };
        let new = match encoded {
            Some(page) => {
                let loc = appender.push(stream, &id.key(), page)?;
                loaded.appended[stream as usize] += pagelog::record_bytes(&loc);
                Some(loc)
            }
            None => None,
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
    geometry: Geometry,
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
        (id.level() == level && id.prefix == mask(path, id.base())).then_some(at)
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
        let level = self.geometry.level_of(depth);
        if let Some(at) = self.held_on(path, level) {
            return self.held[at]
                .1
                .page()
                .node(slot(self.geometry, depth, path));
        }
        let id = PageId::on_path(self.geometry, path, level);
        let page = if id.level() < self.state.retained_levels {
            self.state.retained.get(&id).map(|p| &**p)
        } else {
            self.loaded.pages.get(&id)
        };
        page.map_or(Node::Empty, |p| p.node(slot(self.geometry, depth, path)))
    }

    /// Writes a node, creating its page if needed (a retained page is copied first if shared).
    fn set(&mut self, depth: usize, path: &Hash, node: Node) {
        let level = self.geometry.level_of(depth);
        if let Some(at) = self.held_on(path, level) {
            let slot = slot(self.geometry, depth, path);
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
        let id = PageId::on_path(self.geometry, path, level);
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
        page.set(slot(self.geometry, depth, path), node);
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
                let geometry = self.geometry;
                let held = geometry.is_base(depth)
                    && self.hold(PageId::on_path(
                        geometry,
                        path,
                        geometry.level_of(depth + 1),
                    ));
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

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
//! Layout: a page holds the nodes at depths `b+1 ..= b+6` below one node at depth `b` (NOMT's
//! depth-6 rootless subtree): 126 slots, `2^r − 2 + bits` for relative depth `r` in 1..=6. Page
//! level `L` begins at `b = 6L` in the default [`Geometry`]; a table may have a top page of
//! fewer trie levels `t`, which moves every other level's `b` to `t + 6(L − 1)`. A page exists
//! only if its parent node is internal; a missing page below an internal node is corruption.
//! The root node (depth 0) lives in the [`TrieState`].
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
//!
//! Files: this one holds a version ([`TrieState`], with the save and restore of its retained
//! levels), what its pages are read through ([`PageStore`]) and a change ([`Change`]);
//! `page.rs` the page format, `load.rs` reading pages, `commit_work.rs` a commit,
//! `relocation.rs` moving pages out of a segment being cleaned, `proof.rs` proofs.
//!
//! [`below_in_halves`]: commit_work::below_in_halves

mod commit_work;
mod load;
mod page;
mod proof;
mod relocation;

pub(crate) use commit_work::commit;
#[cfg(test)]
pub(crate) use load::stored_pages;
pub(crate) use load::{load_paths, load_paths_in_halves, load_top, Loaded};
pub(crate) use page::{root_hash_of_node, Geometry, Node, Page, PageId};
pub(crate) use proof::{prove, top_witness};
pub(crate) use relocation::{near_records, relocate, relocate_near, NearRecord};

use std::collections::HashMap;
use std::sync::Arc;

use cairn_proof::{Hash, HashKind, Leaf};

use crate::error::{Error, Result};
use crate::pagelog::{Appender, PageLoc, Segments, VisitRecord};

use commit_work::deepest_first;
use load::{missing_retained, read_checked};
use page::{child_pages, slot_position, PageIdHash};

/// One version of a table's trie: cheap to clone (the retained pages and the segment list are
/// shared until either side changes them).
#[derive(Clone, Debug)]
pub(crate) struct TrieState {
    pub(crate) kind: HashKind,
    pub(crate) root: Node,
    /// Commits that changed the trie's contents, counting from the table's creation.
    pub(crate) version: u64,
    /// Where the page levels begin (fixed when the table is created).
    pub(crate) geometry: Geometry,
    /// Page levels kept in memory: `0..retained_levels`.
    pub(crate) retained_levels: usize,
    pub(crate) retained:
        imbl::GenericHashMap<PageId, Arc<Page>, PageIdHash, imbl::shared_ptr::DefaultSharedPtr>,
    /// The segments of the page log this version's records are in, with its bytes in each.
    pub(crate) segments: Segments,
}

impl TrieState {
    pub(crate) fn new(kind: HashKind, geometry: Geometry, retained_levels: usize) -> TrieState {
        TrieState {
            kind,
            root: Node::Empty,
            version: 0,
            geometry,
            retained_levels: retained_levels.clamp(1, geometry.levels()),
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
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn restore(
        kind: HashKind,
        geometry: Geometry,
        retained_levels: usize,
        version: u64,
        root: Node,
        top: Option<PageLoc>,
        segments: Segments,
        store: &dyn PageStore,
    ) -> Result<TrieState> {
        let mut state = TrieState::new(kind, geometry, retained_levels);
        let top_id = PageId::top(geometry);
        state.version = version;
        state.root = root;
        state.segments = segments;
        let mut level: Vec<(PageId, Hash, PageLoc)> = match (root, top) {
            (Node::Internal(h), Some(loc)) => vec![(top_id, h, loc)],
            (Node::Internal(_), None) => return Err(missing_retained(&top_id)),
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

/// Changes (or paths) at least this many are split between two threads, where the machine has
/// two cores (two in the unit tests, so that both ways are tested).
#[cfg(not(test))]
const PARALLEL_MIN: usize = 128;
#[cfg(test)]
const PARALLEL_MIN: usize = 2;

/// The cores this process may use (asked once).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
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
        let bytes = page.encode_with(id, |index| {
            if retained_children {
                let (_, path) = slot_position(id, id.bottom_slot(index));
                written.get(&id.at_level(&path, id.level() + 1)).copied()
            } else {
                page.child(index)
            }
        })?;
        written.insert(*id, push(&id.key(), &bytes)?);
    }
    Ok(written.get(&PageId::top(state.geometry)).copied())
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
    use crate::pagelog::{self, PageLog};

    /// Pages in a page log on a simulated file system.
    pub(super) struct TestStore {
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
    pub(super) fn run(
        kind: HashKind,
        retained: usize,
        batches: &[Vec<(u16, Option<u8>)>],
    ) -> (TrieState, TestStore) {
        run_in(kind, Geometry::DEFAULT, retained, batches)
    }

    /// [`run`] with the page geometry `geometry`.
    pub(super) fn run_in(
        kind: HashKind,
        geometry: Geometry,
        retained: usize,
        batches: &[Vec<(u16, Option<u8>)>],
    ) -> (TrieState, TestStore) {
        let store = TestStore::new();
        let mut state = TrieState::new(kind, geometry, retained);
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
            for top in 1..=6 {
                let geometry = Geometry::new(top).unwrap();
                for retained in [1, 2, 3] {
                    let (state, _store) = run_in(kind, geometry, retained, &batches);
                    assert_eq!(state.root, Node::Empty);
                    assert!(state.retained.is_empty());
                    assert_eq!(state.segments.len(), 0, "every record released");
                }
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

    #[test]
    fn pages_roundtrip_and_refuse_junk() {
        for (top, retained) in [(6, 1), (3, 1), (3, 2), (1, 2), (2, 2)] {
            pages_roundtrip_in(Geometry::new(top).unwrap(), retained);
        }
    }

    fn pages_roundtrip_in(geometry: Geometry, retained: usize) {
        let kind = HashKind::Sha256;
        let batch: Vec<(u16, Option<u8>)> = (0..500).map(|k| (k, Some(1))).collect();
        let (state, store) = run_in(kind, geometry, retained, &[batch]);
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
            assert_eq!(&page.encode(id).unwrap(), bytes);
            for cut in [0, 1, 32, bytes.len() - 1] {
                assert!(Page::decode(kind, id, &bytes[..cut]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Page::decode(kind, id, &longer).is_err());
        }
        // The version reads back whole from its top page.
        let restored = TrieState::restore(
            kind,
            geometry,
            retained,
            state.version,
            state.root,
            top,
            with_own,
            &store,
        )
        .unwrap();
        assert_eq!(restored.retained.len(), state.retained.len());
        assert_eq!(restored.segments.live_bytes(), state.segments.live_bytes());
        assert_eq!(stored_pages(&restored, &store).unwrap(), stored);
    }
}

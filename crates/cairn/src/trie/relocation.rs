//! Moving a version's pages out of records of a segment the page log cleans: each live record
//! is appended again, with the pages above it whose pointers change. The records come either
//! from a scan of the segment ([`relocate`]) or, where the retained pages point at every live
//! record of the segment, from those pointers ([`near_records`], [`relocate_near`]): then only
//! the live records are read, not the dead bytes between them.

use std::collections::{HashMap, HashSet};

use cairn_proof::Hash;

use crate::error::{Error, Result};
use crate::pagelog::{self, PageLoc};

use super::commit_work::{deepest_first, write_pages};
use super::load::{check_top, child_loc, first_missing, read_missing, Loaded};
use super::page::{Node, Page, PageId, PageIdHash};
use super::{PageStore, TrieState};

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
        let id = PageId::from_key(state.geometry, &key)
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
    // The live records, with the hash of the node each hangs below.
    let mut live: Vec<(PageId, Hash, Vec<u8>)> = Vec::new();
    for (id, loc, bytes) in candidates {
        let (parent, index) = id.parent().expect("a page below the retained levels");
        let Some(parent_page) = state.page(&loaded, &parent) else {
            continue; // the path ends above it: an old version's page
        };
        if parent_page.child(index) != Some(loc) {
            continue;
        }
        let hash = match parent_page.node(parent.bottom_slot(index)) {
            Node::Internal(h) => h,
            _ => {
                return Err(Error::corrupt(
                    "trie",
                    "a page pointer below a node that is not internal",
                ))
            }
        };
        if loaded.locs.insert(id, loc).is_none() {
            live.push((id, hash, bytes));
        }
        let mut up = Some(id);
        while let Some(page) = up.filter(|p| p.level() >= state.retained_levels) {
            if !dirty.insert(page) {
                break; // its ancestors are in already
            }
            up = page.parent().map(|(p, _)| p);
        }
    }
    // A live page whose pointers do not change (no other page moved hangs below it) moves as
    // the bytes it was read as: its record's checksum, key and place (its parent names it)
    // are checked already, and decoding it would only hash its leaves again. Any other is
    // decoded, checked against its parent and encoded with its children's new pointers.
    let parents: HashSet<PageId, PageIdHash> = dirty
        .iter()
        .filter_map(|id| id.parent().map(|(parent, _)| parent))
        .collect();
    let mut unchanged: HashMap<PageId, Vec<u8>, PageIdHash> = HashMap::default();
    for (id, hash, bytes) in live {
        if parents.contains(&id) {
            let page = Page::decode(state.kind, &id, &bytes)?;
            check_top(state.kind, &id, &page, &hash)?;
            loaded.pages.insert(id, page);
        } else {
            unchanged.insert(id, bytes);
        }
    }
    let mut dirty: Vec<PageId> = dirty.into_iter().collect();
    dirty.sort_by(deepest_first);
    write_pages(state, &mut loaded, store, &dirty, &unchanged)?;
    Ok((dirty.len() as u64, loaded.read_bytes))
}

/// A record a retained page points at: a page one level below the retained ones (of the near
/// stream, `pagelog::Stream::Near`), found by its parent's pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NearRecord {
    /// The retained page holding the pointer.
    parent: PageId,
    /// The bottom-row node of `parent` the page hangs below.
    index: u8,
    /// Where the record is.
    pub(crate) loc: PageLoc,
}

/// The records of segment `segment` that this version's retained pages point at, by increasing
/// offset, and their record bytes in all: every record of the version there when that sum is
/// its bytes in the segment (`Segments::live_in`), as it is where the segment holds only pages
/// one level below the retained ones. Cost: one pass over the pointers of the lowest retained
/// level's pages (at most 64 per page: 2^21 at 2^25 keys with four page levels retained, a
/// few milliseconds), no I/O; memory: one entry per record found.
pub(crate) fn near_records(state: &TrieState, segment: u64) -> (Vec<NearRecord>, u64) {
    let mut out = Vec::new();
    let mut bytes = 0;
    let Some(lowest) = state.retained_levels.checked_sub(1) else {
        return (out, 0);
    };
    for (id, page) in state.retained.iter() {
        if id.level() != lowest {
            continue;
        }
        for &(index, loc) in page.children() {
            if loc.segment == segment {
                bytes += pagelog::record_bytes(&loc);
                out.push(NearRecord {
                    parent: *id,
                    index,
                    loc,
                });
            }
        }
    }
    out.sort_unstable_by_key(|r| r.loc.offset);
    (out, bytes)
}

/// Reads the records of `records` the version still reaches (the retained parent still points
/// at each: a commit since [`near_records`] may have rewritten some) and moves them as
/// [`relocate`] does. Returns the pages appended and the bytes read (the records' blocks, and
/// no parents: they are retained). Cost: one batched read of those records (at most 4 MiB per
/// batch, `PageLog::read_each`), then [`relocate`]'s appends.
pub(crate) fn relocate_near(
    state: &mut TrieState,
    store: &dyn PageStore,
    records: &[NearRecord],
) -> Result<(u64, u64)> {
    let locs: Vec<PageLoc> = records
        .iter()
        .filter(|r| {
            state
                .retained
                .get(&r.parent)
                .and_then(|p| p.child(r.index as usize))
                == Some(r.loc)
        })
        .map(|r| r.loc)
        .collect();
    if locs.is_empty() {
        return Ok((0, 0));
    }
    let mut scanned: Vec<pagelog::Scanned> = Vec::with_capacity(locs.len());
    store.read(&state.segments, &locs, &mut |i, key, bytes| {
        scanned.push((locs[i], key.to_vec(), bytes.to_vec()));
        Ok(())
    })?;
    let read: u64 = locs.iter().map(pagelog::read_bytes).sum();
    let (moved, parents_read) = relocate(state, store, scanned)?;
    Ok((moved, read + parents_read))
}

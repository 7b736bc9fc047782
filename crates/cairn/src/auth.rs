//! Authenticated tables: a table's Merkle trie version, the hidden table that stores its pages,
//! and the commit, prefetch and proof operations over them.
//!
//! Owns: [`Auth`], [`Commit`], [`AuthStats`], and the page table's configuration. May call:
//! `trie` (pages, commits, proofs), `table` (the page table, through its public API: lookups,
//! updates, ranges, duplicate, close), `snapshot` (the trie's record in snapshot metadata). Must
//! never touch: the data table's state (`table` hands over the
//! changed keys' new leaves) or files.
//!
//! Where the pages live: in a Cairn table of their own, created beside the data table in the
//! same session, keyed by page id ([`crate::trie::PageId::key`]), one page per value. A
//! duplicate duplicates it (O(1) I/O), and its runs are reference-counted like any table's, so a
//! page version lives exactly as long as some table version can reach it. The top page levels
//! (`AuthConfig::retained_levels`) are kept in memory and written to the page table only when
//! a snapshot needs them (`docs/design.md`, "Authenticated tables").

use cairn_proof::{Hash, Proof, Root};

use crate::config::{AuthConfig, BloomAlloc, IndexType, MergeSchedule, Resolve, TableConfig};
use crate::error::{Error, Result};
use crate::snapshot::AuthMeta;
use crate::table::{Table, Update};
use crate::trie::{self, Change, Loaded, Node, Page, PageId, PageStore, TrieState};

/// The result of a commit: the version it made and its state root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    /// Commits that changed the table's contents since it was created (0 for a new table; a
    /// duplicate keeps its source's version and counts on from there).
    pub version: u64,
    /// The state root of the table's contents at this version.
    pub root: Root,
}

/// Counters of an authenticated table's trie.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthStats {
    /// The current version (see [`Commit::version`]).
    pub version: u64,
    /// Trie pages read from the page table by this handle's commits, prefetches and proofs.
    pub pages_read: u64,
    /// Trie pages written (or removed) in the page table.
    pub pages_written: u64,
    /// Keys rehashed by commits (each costs a key, a value, a leaf and about
    /// `log₂ n − log₂ k` node hashes).
    pub keys_committed: u64,
    /// Hashes this handle computed for the trie: each committed key's key path, value and blob
    /// hashes, leaf and node hashes, and one per page read (its check against its parent).
    /// Updates compute none.
    pub hashes: u64,
    /// Trie pages kept in memory (the retained levels).
    pub retained_pages: usize,
    /// Memory those pages hold, in bytes.
    pub retained_bytes: usize,
    /// Pages loaded by [`crate::Table::prefetch`] and not yet used by a commit.
    pub prefetched_pages: usize,
}

/// A table's trie: its current version, the pages' table, pages prefetched for the next commit.
pub(crate) struct Auth {
    pub(crate) trie: TrieState,
    pub(crate) pages: Table,
    prefetched: Loaded,
    stats: AuthStats,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("version", &self.trie.version)
            .field("root", &self.trie.root_hash())
            .finish_non_exhaustive()
    }
}

/// The page table's configuration: pages are values of up to about 10 KB (4 KB for a page of
/// internal nodes), so its write buffer holds 1,024 of them (a few MiB); page ids are not
/// uniformly distributed bytes (the level comes first), so the ordinary index.
pub(crate) fn page_table_config(data: &TableConfig) -> TableConfig {
    TableConfig {
        write_buffer_entries: 1024,
        merge_schedule: MergeSchedule::Incremental,
        bloom: BloomAlloc::TargetFpr(1e-2),
        last_level_bloom: None,
        index: IndexType::Ordinary,
        disk_cache: data.disk_cache,
        merge_batch_size: data.merge_batch_size,
        resolve: Resolve::KeepNewest,
        auth: None,
    }
}

impl PageStore for Table {
    fn read_pages(&self, ids: &[PageId]) -> Result<Vec<Option<Page>>> {
        let keys: Vec<Vec<u8>> = ids.iter().map(PageId::key).collect();
        let found = self.lookups(&keys)?;
        ids.iter()
            .zip(found)
            .map(|(id, r)| r.value().map(|bytes| Page::decode(id, bytes)).transpose())
            .collect()
    }
}

impl Auth {
    /// A new, empty trie and its page table (created through `new_table`).
    pub(crate) fn new(pages: Table, config: &AuthConfig) -> Auth {
        Auth {
            trie: TrieState::new(config.hash, config.retained_levels()),
            pages,
            prefetched: Loaded::new(),
            stats: AuthStats::default(),
        }
    }

    /// The trie of a table opened from a snapshot: `pages` is its restored page table, whose
    /// retained levels (one key range: page keys start with their level) are read back and
    /// checked ([`TrieState::restore`]). Cost: one range read of the retained pages (at most
    /// 4,161 with the default budget), one hash per page.
    pub(crate) fn restore(pages: Table, config: &AuthConfig, meta: &AuthMeta) -> Result<Auth> {
        let root = Node::decode(config.hash, &meta.root)?;
        let levels = config.retained_levels();
        let mut retained = Vec::new();
        for entry in pages.range(vec![0u8]..vec![levels as u8])? {
            let entry = entry?;
            let id = PageId::from_key(&entry.key)
                .ok_or_else(|| Error::corrupt("trie", "a page key that names no page"))?;
            retained.push((id, Page::decode(&id, &entry.value)?));
        }
        Ok(Auth {
            trie: TrieState::restore(config.hash, levels, meta.version, root, retained)?,
            pages,
            prefetched: Loaded::new(),
            stats: AuthStats {
                version: meta.version,
                ..AuthStats::default()
            },
        })
    }

    /// What a snapshot records of the trie, after writing the retained pages changed since the
    /// last snapshot into the page table (so that it holds every page).
    pub(crate) fn snapshot_meta(&mut self) -> Result<AuthMeta> {
        let unsaved = self.trie.take_unsaved();
        self.write_pages(
            unsaved
                .into_iter()
                .map(|(id, page)| (id, page.map(|p| p.encode()))),
        )?;
        Ok(AuthMeta {
            version: self.trie.version,
            root: self.trie.root.encode(),
        })
    }

    /// An independent copy: the same trie version, a duplicate of the page table (O(1) I/O),
    /// the retained pages shared until either side changes them.
    pub(crate) fn duplicate(&self) -> Result<Auth> {
        Ok(Auth {
            trie: self.trie.clone(),
            pages: self.pages.duplicate()?,
            prefetched: Loaded::new(),
            stats: AuthStats {
                version: self.trie.version,
                ..AuthStats::default()
            },
        })
    }

    /// Counts hashes computed outside this module (the leaves a table hashes for a commit).
    pub(crate) fn count_hashes(&mut self, n: u64) {
        self.stats.hashes += n;
    }

    /// The latest commit.
    pub(crate) fn current(&self) -> Commit {
        Commit {
            version: self.trie.version,
            root: Root {
                kind: self.trie.kind,
                hash: self.trie.root_hash(),
            },
        }
    }

    pub(crate) fn stats(&self) -> AuthStats {
        AuthStats {
            version: self.trie.version,
            retained_pages: self.trie.retained.len(),
            retained_bytes: self.trie.retained_bytes(),
            prefetched_pages: self.prefetched.len(),
            ..self.stats
        }
    }

    /// Applies changes (sorted by key path, distinct) as one new version, in place. On an
    /// error the trie may be half changed: the caller breaks the table (a commit's error always
    /// does).
    ///
    /// Cost: see [`trie::commit`]; the page writes are one batch of updates to the page table
    /// (its merges paid like any table's).
    pub(crate) fn commit(&mut self, changes: &[Change]) -> Result<Commit> {
        if changes.is_empty() {
            return Ok(self.current());
        }
        let mut loaded = std::mem::replace(&mut self.prefetched, Loaded::new());
        let (reads_before, hashes_before) = (loaded.reads, loaded.hashes);
        let writes = trie::commit(&mut self.trie, &mut loaded, &self.pages, changes)?;
        self.stats.pages_read += loaded.reads - reads_before;
        self.stats.hashes += loaded.hashes - hashes_before;
        self.write_pages(
            writes
                .into_iter()
                .map(|(id, p)| (id, p.map(|p| p.encode()))),
        )?;
        self.stats.keys_committed += changes.len() as u64;
        Ok(self.current())
    }

    fn write_pages(
        &mut self,
        writes: impl Iterator<Item = (PageId, Option<Vec<u8>>)>,
    ) -> Result<()> {
        let writes: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            writes.map(|(id, bytes)| (id.key(), bytes)).collect();
        let batch: Vec<(&[u8], Update<'_>)> = writes
            .iter()
            .map(|(k, v)| {
                let update = match v {
                    Some(bytes) => Update::Insert(bytes),
                    None => Update::Delete,
                };
                (&k[..], update)
            })
            .collect();
        self.pages.updates(&batch)?;
        self.stats.pages_written += batch.len() as u64;
        Ok(())
    }

    /// Loads the pages the key paths pass through, for the next commit (or proof).
    pub(crate) fn prefetch(&mut self, paths: &[Hash]) -> Result<()> {
        let (reads, hashes) = (self.prefetched.reads, self.prefetched.hashes);
        trie::load_paths(&self.trie, &mut self.prefetched, &self.pages, paths)?;
        self.stats.pages_read += self.prefetched.reads - reads;
        self.stats.hashes += self.prefetched.hashes - hashes;
        Ok(())
    }

    /// A multiproof for sorted, distinct key paths against the latest commit.
    pub(crate) fn prove(&mut self, paths: &[Hash]) -> Result<Proof> {
        let mut loaded = Loaded::new();
        trie::load_paths(&self.trie, &mut loaded, &self.pages, paths)?;
        self.stats.pages_read += loaded.reads;
        self.stats.hashes += loaded.hashes;
        trie::prove(&self.trie, &loaded, paths)
    }

    /// A proof opening every node above depth `levels` (at most 32).
    pub(crate) fn top_witness(&mut self, levels: usize) -> Result<Proof> {
        if levels == 0 || levels > cairn_proof::COMPACT_LEVELS_MAX as usize {
            return Err(Error::InvalidUpdate(format!(
                "a witness holds 1 to {} levels, not {levels}",
                cairn_proof::COMPACT_LEVELS_MAX
            )));
        }
        let mut loaded = Loaded::new();
        // Every page above depth `levels`: load along every path that reaches it, page level by
        // page level (the retained levels need no reads).
        trie::load_top(&self.trie, &mut loaded, &self.pages, levels)?;
        self.stats.pages_read += loaded.reads;
        self.stats.hashes += loaded.hashes;
        trie::top_witness(&self.trie, &loaded, levels)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;
    use std::sync::Arc;

    use crate::fs::sim::MemFs;
    use crate::fs::FileSystem;
    use crate::{Session, SessionOptions, TableConfig};

    use super::*;

    /// The pages a table's trie version stores: the page table's keys below the retained
    /// levels, and the retained pages in memory.
    fn stored_pages(table: &Table) -> BTreeSet<PageId> {
        let auth = table.auth_for_tests();
        let mut out: BTreeSet<PageId> = auth.trie.retained.keys().copied().collect();
        let from = vec![auth.trie.retained_levels as u8];
        for entry in auth.pages.range(from..).unwrap() {
            out.insert(PageId::from_key(&entry.unwrap().key).unwrap());
        }
        out
    }

    fn reachable(table: &Table) -> BTreeSet<PageId> {
        let auth = table.auth_for_tests();
        trie::reachable_pages(&auth.trie, &auth.pages).unwrap()
    }

    /// After random commits, duplicates, snapshots, snapshot deletes and closes, every live
    /// table version stores exactly the pages reachable from its root, and once everything is
    /// closed and deleted no run file is left.
    #[test]
    fn live_pages_are_exactly_the_reachable_ones() {
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/s")).unwrap();
        let session = Session::open_with(fs.clone(), "/s", SessionOptions::default()).unwrap();
        let config = TableConfig {
            write_buffer_entries: 8,
            merge_batch_size: 1,
            auth: Some(AuthConfig {
                retained_bytes: 0, // one retained level: most pages live in the page table
                ..AuthConfig::default()
            }),
            ..TableConfig::default()
        };
        let mut tables = vec![session.new_table(config).unwrap()];
        let mut snapshots: Vec<String> = Vec::new();
        let mut rng = 0x1234_5678u64;
        let mut next = |n: u64| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        for step in 0..400u64 {
            let t = next(tables.len() as u64) as usize;
            match next(10) {
                0..=5 => {
                    for _ in 0..next(40) + 1 {
                        let k = next(600).to_be_bytes();
                        if next(4) == 0 {
                            tables[t].delete(k).unwrap();
                        } else {
                            tables[t].insert(k, step.to_le_bytes()).unwrap();
                        }
                    }
                    tables[t].commit().unwrap();
                }
                6 if tables.len() < 6 => tables.push(tables[t].duplicate().unwrap()),
                7 => {
                    let name = format!("s{step}");
                    tables[t].save_snapshot(&name, "").unwrap();
                    snapshots.push(name);
                }
                8 if !snapshots.is_empty() => {
                    let name = snapshots.remove(next(snapshots.len() as u64) as usize);
                    if next(2) == 0 && tables.len() < 6 {
                        tables.push(
                            session
                                .open_snapshot(&name, "", Default::default())
                                .unwrap(),
                        );
                    }
                    session.delete_snapshot(&name).unwrap();
                }
                9 if tables.len() > 1 => tables.remove(t).close(),
                _ => {}
            }
            for table in &tables {
                table.commit().unwrap();
                assert_eq!(stored_pages(table), reachable(table), "step {step}");
            }
        }
        for name in snapshots {
            session.delete_snapshot(&name).unwrap();
        }
        for table in tables {
            table.close();
        }
        let left: Vec<String> = fs.list_dir(Path::new("/s/active")).unwrap();
        assert!(left.iter().all(|f| !f.ends_with(".keyops")), "{left:?}");
    }
}

//! Authenticated tables: a table's Merkle trie version, where its pages are read from and
//! written to, and the commit, prefetch and proof operations over them.
//!
//! Owns: [`Auth`], [`Commit`], [`AuthStats`]. May call: `trie` (pages, commits,
//! proofs), `pagelog` (the session's page log: reads, appends, segments), `session` (its page
//! log and block I/O), `io` (the block I/O engine's type), `snapshot` (the trie's record in snapshot metadata). Must never touch:
//! the data table's state (`table` hands over the changed keys' new leaves) or files.
//!
//! Where the pages live: in the session's page log (`pagelog`), each page below the retained
//! levels found through its parent's pointer. A duplicate shares the version's segments (O(1)),
//! and a segment's file is removed when no table version reaches a record in it. The top page
//! levels (`AuthConfig::retained_levels`) are kept in memory and written to the log only when a
//! snapshot needs them (`docs/design.md`, "Authenticated tables").

use std::sync::Arc;

use cairn_proof::{Hash, Proof, Root};

use crate::config::AuthConfig;
use crate::error::{Error, Result};
use crate::io::BlockIo;
use crate::pagelog::{
    Appender, Manifest, ManifestSegment, PageLoc, PageLog, SegmentBuilder, Segments, TrieFiles,
};
use crate::session::SessionInner;
use crate::snapshot::AuthMeta;
use crate::trie::{self, Change, Loaded, Node, PageStore, TrieState};

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
    /// Trie pages read from the page log by this handle's commits, prefetches and proofs.
    pub pages_read: u64,
    /// Trie pages appended to (or removed from) the page log.
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
    /// Segment files of the session's page log that this version has records in.
    pub segments: usize,
    /// Bytes of this version's records in them (the rest of those files is padding and
    /// records of other or older versions).
    pub live_bytes: u64,
    /// Bytes of those files.
    pub file_bytes: u64,
    /// Segments this handle's commits emptied of the version's pages (appending the pages
    /// still live there again) to bound the space its files take.
    pub segments_cleaned: u64,
}

/// Dead bytes a version's segments may hold beyond its live bytes before a commit cleans one
/// (so a small table never cleans).
pub(crate) const CLEAN_SLACK_BYTES: u64 = 2 * crate::pagelog::SEGMENT_BYTES_TARGET;

/// A table's trie: its current version, the session it reads pages from, pages prefetched
/// for the next commit.
pub(crate) struct Auth {
    pub(crate) trie: TrieState,
    session: Arc<SessionInner>,
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

/// The page store of a session: reads through its block I/O, appends to its page log.
struct Store<'a> {
    io: &'a BlockIo,
    log: &'a PageLog,
}

impl PageStore for Store<'_> {
    fn read(&self, segments: &Segments, locs: &[PageLoc]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        PageLog::read(self.io, segments, locs)
    }

    fn appender(&self) -> Appender<'_> {
        self.log.appender()
    }
}

fn store(session: &SessionInner) -> Store<'_> {
    Store {
        io: session.io(),
        log: session.page_log(),
    }
}

impl Auth {
    /// A new, empty trie whose pages go to `session`'s page log.
    pub(crate) fn new(session: Arc<SessionInner>, config: &AuthConfig) -> Auth {
        Auth {
            trie: TrieState::new(config.hash, config.retained_levels()),
            session,
            prefetched: Loaded::new(),
            stats: AuthStats::default(),
        }
    }

    /// The trie of a table opened from a snapshot: its segments (adopted by the session's
    /// page log from the snapshot's `trie/`), its manifest and metadata. Reads the retained
    /// levels back ([`TrieState::restore`]). Cost: one batched read per retained level (at
    /// most 4,161 pages with the default budget), one hash per page.
    pub(crate) fn restore(
        session: Arc<SessionInner>,
        config: &AuthConfig,
        meta: &AuthMeta,
        manifest: &Manifest,
        segments: Segments,
    ) -> Result<Auth> {
        let root = Node::decode(config.hash, &meta.root)?;
        let trie = TrieState::restore(
            config.hash,
            config.retained_levels(),
            meta.version,
            root,
            manifest.top,
            segments,
            &store(&session),
        )?;
        Ok(Auth {
            trie,
            session,
            prefetched: Loaded::new(),
            stats: AuthStats {
                version: meta.version,
                ..AuthStats::default()
            },
        })
    }

    /// What a snapshot records of the trie: the segments of the page log the version reaches
    /// (the one being written is ended first, so that every segment a snapshot links is
    /// immutable), and a segment of the snapshot's own holding every retained page (built in
    /// memory: at most the retention budget). The snapshot's own writes never go to a file
    /// the live table reads. Cost: one encoding per retained page.
    pub(crate) fn snapshot_meta(&mut self) -> Result<(AuthMeta, TrieFiles)> {
        self.session.page_log().roll();
        let mut own = match self.trie.retained.is_empty() {
            true => None,
            false => Some(SegmentBuilder::new(self.session.active_dir())?),
        };
        let top = match &mut own {
            Some(builder) => {
                trie::save_retained(&self.trie, &mut |key, page| builder.push(key, page))?
            }
            None => None,
        };
        let mut manifest = Manifest {
            top,
            segments: self
                .trie
                .segments
                .iter()
                .map(|(s, live)| ManifestSegment {
                    id: s.id(),
                    file_id: s.file_id(),
                    bytes: live,
                })
                .collect(),
        };
        let own = own.map(|builder| {
            let id = builder.id();
            let (bytes, records) = builder.finish();
            manifest.segments.push(ManifestSegment {
                id,
                file_id: id,
                bytes: records,
            });
            (id, bytes)
        });
        manifest.segments.sort_by_key(|s| s.id);
        let files = TrieFiles {
            segments: self.trie.segments.iter().map(|(s, _)| s.clone()).collect(),
            own,
            manifest,
        };
        Ok((
            AuthMeta {
                version: self.trie.version,
                root: self.trie.root.encode(),
            },
            files,
        ))
    }

    /// An independent copy: the same trie version, its retained pages and segments shared
    /// until either side changes them. O(1).
    pub(crate) fn duplicate(&self) -> Auth {
        Auth {
            trie: self.trie.clone(),
            session: self.session.clone(),
            prefetched: Loaded::new(),
            stats: AuthStats {
                version: self.trie.version,
                ..AuthStats::default()
            },
        }
    }

    /// Lets go of everything the trie holds: its segments (removed once no other version
    /// reaches them), retained and prefetched pages.
    pub(crate) fn close(&mut self) {
        let kind = self.trie.kind;
        self.trie = TrieState::new(kind, self.trie.retained_levels);
        self.prefetched = Loaded::new();
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
            segments: self.trie.segments.len(),
            live_bytes: self.trie.segments.live_bytes(),
            file_bytes: self.trie.segments.file_bytes(),
            ..self.stats
        }
    }

    /// Applies changes (sorted by key path, distinct) as one new version, in place. On an
    /// error the trie may be half changed: the caller breaks the table (a commit's error always
    /// does).
    ///
    /// Cost: see [`trie::commit`]; the page writes are appends to the page log (one write of
    /// the commit's records, two when a segment fills).
    pub(crate) fn commit(&mut self, changes: &[Change]) -> Result<Commit> {
        if changes.is_empty() {
            return Ok(self.current());
        }
        let mut loaded = std::mem::replace(&mut self.prefetched, Loaded::new());
        let (reads_before, hashes_before) = (loaded.reads, loaded.hashes);
        let written = trie::commit(&mut self.trie, &mut loaded, &store(&self.session), changes)?;
        self.stats.pages_read += loaded.reads - reads_before;
        self.stats.hashes += loaded.hashes - hashes_before;
        self.stats.pages_written += written;
        self.stats.keys_committed += changes.len() as u64;
        self.clean()?;
        Ok(self.current())
    }

    /// Empties one segment of the page log of this version's records when the version's
    /// segments hold more than twice its bytes (and more than [`CLEAN_SLACK_BYTES`] beyond
    /// them): the segment where it has the fewest, read whole, its live pages appended again
    /// ([`trie::relocate`]). A commit pays for at most one segment: one read of at most
    /// [`crate::pagelog::SEGMENT_BYTES_TARGET`] and the appends of the pages still live there
    /// with the pages above them. (One per commit keeps files near twice the live bytes at
    /// 2^22 keys, not at 2^24: see `docs/design.md`.)
    fn clean(&mut self) -> Result<()> {
        let (files, live) = (
            self.trie.segments.file_bytes(),
            self.trie.segments.live_bytes(),
        );
        if files <= live.saturating_mul(2).saturating_add(CLEAN_SLACK_BYTES) {
            return Ok(());
        }
        let current = self.session.page_log().current_id();
        let Some(segment) = self.trie.segments.emptiest(current) else {
            return Ok(());
        };
        let records = PageLog::scan(&segment)?;
        let moved = trie::relocate(&mut self.trie, &store(&self.session), records)?;
        self.stats.pages_written += moved;
        self.stats.segments_cleaned += 1;
        if self.trie.segments.get(segment.id()).is_some() {
            return Err(Error::corrupt(
                "page log accounting",
                format!(
                    "the version still counts bytes in segment {:016x} after moving every page it reaches there",
                    segment.id()
                ),
            ));
        }
        Ok(())
    }

    /// Loads the pages the key paths pass through, for the next commit (or proof).
    pub(crate) fn prefetch(&mut self, paths: &[Hash]) -> Result<()> {
        let (reads, hashes) = (self.prefetched.reads, self.prefetched.hashes);
        trie::load_paths(
            &self.trie,
            &mut self.prefetched,
            &store(&self.session),
            paths,
        )?;
        self.stats.pages_read += self.prefetched.reads - reads;
        self.stats.hashes += self.prefetched.hashes - hashes;
        Ok(())
    }

    /// A multiproof for sorted, distinct key paths against the latest commit.
    pub(crate) fn prove(&mut self, paths: &[Hash]) -> Result<Proof> {
        let mut loaded = Loaded::new();
        trie::load_paths(&self.trie, &mut loaded, &store(&self.session), paths)?;
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
        trie::load_top(&self.trie, &mut loaded, &store(&self.session), levels)?;
        self.stats.pages_read += loaded.reads;
        self.stats.hashes += loaded.hashes;
        trie::top_witness(&self.trie, &loaded, levels)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use crate::fs::sim::MemFs;
    use crate::fs::FileSystem;
    use crate::pagelog;
    use crate::table::Table;
    use crate::{Session, SessionOptions, TableConfig};

    use super::*;

    /// Whether a table version's accounting is exact: its bytes in its segments are the
    /// records of the pages below the retained levels that it reaches.
    fn accounting_is_exact(table: &Table) -> bool {
        let auth = table.auth_for_tests();
        let stored = trie::stored_pages(&auth.trie, &store(&auth.session)).unwrap();
        let below: u64 = stored.iter().map(|(_, l)| pagelog::record_bytes(l)).sum();
        auth.trie.segments.live_bytes() == below
    }

    /// After random commits, duplicates, snapshots, snapshot deletes and closes, every live
    /// table version accounts exactly for the records it reaches, and once everything is
    /// closed and deleted no run file and no segment is left.
    #[test]
    fn live_pages_are_exactly_the_reachable_ones() {
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/s")).unwrap();
        let session = Session::open_with(fs.clone(), "/s", SessionOptions::default()).unwrap();
        let config = TableConfig {
            write_buffer_entries: 8,
            merge_batch_size: 1,
            auth: Some(AuthConfig {
                retained_bytes: 0, // one retained level: most pages live in the page log
                ..AuthConfig::default()
            }),
            ..TableConfig::default()
        };
        let mut tables = vec![session.new_table(config).unwrap()];
        let mut snapshots: Vec<String> = Vec::new();
        let mut cleaned = 0u64;
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
                assert!(accounting_is_exact(table), "step {step}");
                let stats = table.auth_stats().unwrap();
                assert!(
                    stats.file_bytes
                        <= 2 * stats.live_bytes
                            + CLEAN_SLACK_BYTES
                            + 4 * crate::pagelog::SEGMENT_BYTES_TARGET,
                    "step {step}: {stats:?}"
                );
                cleaned = cleaned.max(stats.segments_cleaned);
            }
        }
        assert!(cleaned > 0, "no segment was ever cleaned");
        for name in snapshots {
            session.delete_snapshot(&name).unwrap();
        }
        for table in tables {
            table.close();
        }
        let left: Vec<String> = fs.list_dir(Path::new("/s/active")).unwrap();
        assert!(
            left.iter()
                .all(|f| !f.ends_with(".keyops") && !f.ends_with(".pages")),
            "{left:?}"
        );
    }
}

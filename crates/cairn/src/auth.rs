//! Authenticated tables: a table's Merkle trie version, where its pages are read from and
//! written to, and the commit, prefetch and proof operations over them.
//!
//! Owns: [`Auth`], [`Commit`], [`AuthStats`], [`CommitTime`]. May call: `trie` (pages, commits,
//! proofs), `pagelog` (the session's page log: reads, appends, segments), `session_core` (its page
//! log and block I/O), `io` (the block I/O engine's type), `snapshot` (the trie's record in snapshot metadata). Must never touch:
//! the data table's state (`table` hands over the changed keys' new leaves) or files.
//!
//! Where the pages live: in the session's page log (`pagelog`), each page below the retained
//! levels found through its parent's pointer. A duplicate shares the version's segments (O(1)),
//! and a segment's file is removed when no table version reaches a record in it. The top page
//! levels (`AuthConfig::retained_levels`) are kept in memory and written to the log only when a
//! snapshot needs them (`docs/design.md`, "Authenticated tables").

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_proof::{Hash, Proof, Root};

use crate::config::AuthConfig;
use crate::error::{Error, Result};
use crate::io::BlockIo;
use crate::pagelog::{
    self, Appender, Manifest, ManifestSegment, PageLoc, PageLog, Segment, SegmentBuilder, Segments,
    Stream, TrieFiles, VisitRecord,
};
use crate::session_core::SessionCore;
use crate::snapshot::AuthMeta;
use crate::trie::{self, Change, Geometry, Loaded, NearRecord, Node, PageStore, TrieState};

/// The result of a commit: the version it made and its state root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Commit {
    /// Commits that changed the table's contents since it was created (0 for a new table; a
    /// duplicate keeps its source's version and counts on from there).
    pub version: u64,
    /// The state root of the table's contents at this version.
    pub root: Root,
}

/// A multiproof and the version it proves ([`crate::Table::prove`]): verify `proof` against
/// `root`, the state root of the table's contents at `version`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct VersionedProof {
    /// The version proved (see [`Commit::version`]).
    pub version: u64,
    /// The state root at that version: what the proof verifies against.
    pub root: Root,
    /// The proof.
    pub proof: Proof,
}

/// Counters of an authenticated table's trie.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Of `segments_cleaned`: segments of the deep stream.
    pub deep_segments_cleaned: u64,
    /// Of `segments_cleaned`: those whose records were found through the retained pages'
    /// pointers and read alone, without the dead bytes between them (see `clean_bytes_read`).
    pub segments_cleaned_by_pointer: u64,
    /// Pages this handle's commits appended again to empty segments (counted in
    /// `pages_written` too).
    pub pages_moved: u64,
    /// Of `file_bytes` and `live_bytes`: those of the deep stream's segments (pages whose
    /// parent is stored, not retained).
    pub deep_file_bytes: u64,
    /// See `deep_file_bytes`.
    pub deep_live_bytes: u64,
    /// Bytes this handle's commits, prefetches and proofs asked of the page log's files (the
    /// whole blocks each page's record lies in, whether the page cache or the device served
    /// them; cleaning's reads are apart).
    pub page_bytes_read: u64,
    /// Bytes of page-log segments cleaning asked for: its scans, and the stored parents of the
    /// live deep pages it moved.
    pub clean_bytes_read: u64,
    /// Where this handle's commits and prefetches spent their time.
    pub time: CommitTime,
}

/// Where an authenticated table's commits spend their time, summed over a handle's commits:
/// wall-clock time on the committing thread, but for `page_reads`. For reports and profiles:
/// it costs two clock reads per phase and commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitTime {
    /// Looking up the committed keys' values (the batched lookup [`crate::Table::commit`]
    /// plans) and hashing their key paths, values and blobs.
    pub values: Duration,
    /// Reading the pages the changed paths pass through that no prefetch loaded, and rehashing
    /// the paths, up to the new root.
    pub update: Duration,
    /// Of `update`: time in the page reads and their checks, summed over the threads that read
    /// (a large commit reads on two at once, so this can exceed the part of `update` it is).
    pub page_reads: Duration,
    /// Encoding the changed pages below the retained levels and appending them to the page
    /// log.
    pub write: Duration,
    /// Emptying old segments of the page log: scans, relocated pages' appends, and the reads
    /// of their parents.
    pub clean: Duration,
    /// [`crate::Table::prefetch`]es: reading and checking pages ahead of the commits.
    pub prefetch: Duration,
}

/// Dead bytes a version's segments of one stream may hold beyond the bound on their files
/// before commits clean one (so that a small table never cleans).
pub(crate) const CLEAN_SLACK_BYTES: u64 = 2 * crate::pagelog::SEGMENT_BYTES_TARGET;
/// The near stream's files may take this many times the version's bytes there: cleaning them
/// costs only the appends of the live pages. (Twice, at first, made commits at 2^24 keys read
/// twice and append again once the bytes they wrote; three times, 1.5 and 0.5 times.)
pub(crate) const NEAR_FILES_PER_LIVE: u64 = 3;
/// The deep stream's files may take this many times the version's bytes there: cleaning
/// them costs a read and an append of each live page's parent, so it waits for emptier
/// segments (a quarter live at most, against a third).
pub(crate) const DEEP_FILES_PER_LIVE: u64 = 4;
/// Bytes of a segment being cleaned that a commit scans, per byte it appended to the stream:
/// enough to free what it wrote where the segments cleaned are up to half live.
const CLEAN_SCAN_PER_APPENDED: u64 = 2;
/// Most bytes of a segment read at once while cleaning (the memory a scan takes; 32 KiB in
/// the unit tests).
#[cfg(not(test))]
const CLEAN_PIECE_BYTES: u64 = 8 << 20;
#[cfg(test)]
const CLEAN_PIECE_BYTES: u64 = 32 << 10;
/// Bytes of a segment being cleaned that a commit scans at least (1 MiB; 16 KiB in the unit
/// tests, so that a segment takes several commits).
#[cfg(not(test))]
const CLEAN_SCAN_MIN_BYTES: u64 = 1 << 20;
#[cfg(test)]
const CLEAN_SCAN_MIN_BYTES: u64 = 16 << 10;

/// A table's trie: its current version, the session it reads pages from, pages prefetched
/// for the next commit (and a warm-up still loading more on a thread of its own).
pub(crate) struct Auth {
    pub(crate) trie: TrieState,
    session: Arc<SessionCore>,
    prefetched: Loaded,
    warming: Option<Warming>,
    stats: AuthStats,
    /// Per stream: the segment being emptied of the version's pages, and where in it the next
    /// commit goes on.
    cleaning: [Option<Cleaning>; 2],
    /// The buffer cleaning reads segments into, kept between commits (at most one piece, a
    /// record and two partial blocks: a fresh one each time cost a tenth of a commit in zeroing
    /// and page faults).
    scan_buf: crate::io::AlignedBuf,
}

impl Drop for Auth {
    /// A warm-up still reading is waited for (its reads are bounded), so that no thread of the
    /// table outlives it.
    fn drop(&mut self) {
        if let Some(warming) = self.warming.take() {
            let _ = warming.handle.join();
        }
    }
}

/// A segment being emptied of a version's pages, a piece per commit ([`Auth::clean`]).
struct Cleaning {
    segment: Arc<Segment>,
    /// Where the next piece starts: the end of a record or of the padding after it (the
    /// header's end at first).
    from: u64,
    /// Every record of the version in the segment when it was picked, by offset, where its
    /// retained pages point at all of them (`trie::near_records`): then a piece reads only
    /// those of its records the version still reaches. `None`: a piece scans the segment.
    near: Option<std::collections::VecDeque<NearRecord>>,
}

/// A warm-up loading pages on a thread of its own ([`Auth::warm_up`]): the pages prefetched
/// before it, and what it read, come back when it is joined ([`Auth::settle_warm_up`]).
struct Warming {
    /// The version whose pages it reads.
    version: u64,
    /// The prefetched pages' counters when it started (its own reads are the difference).
    before: (u64, u64, u64),
    handle: std::thread::JoinHandle<(Loaded, Result<()>, Duration)>,
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
    fn read(
        &self,
        segments: &Segments,
        locs: &[PageLoc],
        visit: &mut VisitRecord<'_>,
    ) -> Result<()> {
        PageLog::read_each(self.io, segments, locs, visit)
    }

    fn appender(&self) -> Appender<'_> {
        self.log.appender()
    }
}

/// The page geometry `config` asks for (validated with the table's config; the default
/// otherwise).
fn geometry(config: &AuthConfig) -> Geometry {
    Geometry::new(config.top_page_depth).unwrap_or(Geometry::DEFAULT)
}

fn store(session: &SessionCore) -> Store<'_> {
    Store {
        io: session.io(),
        log: session.page_log(),
    }
}

impl Auth {
    /// A new, empty trie whose pages go to `session`'s page log.
    pub(crate) fn new(session: Arc<SessionCore>, config: &AuthConfig) -> Auth {
        Auth {
            trie: TrieState::new(config.hash, geometry(config), config.retained_levels()),
            session,
            prefetched: Loaded::new(),
            warming: None,
            stats: AuthStats::default(),
            cleaning: [None, None],
            scan_buf: crate::io::AlignedBuf::zeroed(0),
        }
    }

    /// The trie of a table opened from a snapshot: its segments (adopted by the session's
    /// page log from the snapshot's `trie/`), its manifest and metadata. Reads the retained
    /// levels back ([`TrieState::restore`]). Cost: one round of batched reads per retained
    /// level (at most 4,161 pages with the default budget), one hash per page.
    pub(crate) fn restore(
        session: Arc<SessionCore>,
        config: &AuthConfig,
        meta: &AuthMeta,
        manifest: &Manifest,
        segments: Segments,
    ) -> Result<Auth> {
        let root = Node::decode(config.hash, &meta.root)?;
        let trie = TrieState::restore(
            config.hash,
            geometry(config),
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
            warming: None,
            cleaning: [None, None],
            scan_buf: crate::io::AlignedBuf::zeroed(0),
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
            warming: None,
            cleaning: [None, None],
            scan_buf: crate::io::AlignedBuf::zeroed(0),
            stats: AuthStats {
                version: self.trie.version,
                ..AuthStats::default()
            },
        }
    }

    /// Lets go of everything the trie holds: its segments (removed once no other version
    /// reaches them), retained and prefetched pages.
    pub(crate) fn close(&mut self) {
        self.settle_warm_up();
        let kind = self.trie.kind;
        self.trie = TrieState::new(kind, self.trie.geometry, self.trie.retained_levels);
        self.prefetched = Loaded::new();
        self.cleaning = [None, None];
        self.scan_buf = crate::io::AlignedBuf::zeroed(0);
    }

    /// Adds the time a commit spent on its keys' values ([`CommitTime::values`]).
    pub(crate) fn count_values_time(&mut self, time: Duration) {
        self.stats.time.values += time;
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

    /// The page-log segment files this version reaches.
    pub(crate) fn segment_files(&self) -> Vec<std::path::PathBuf> {
        (self.trie.segments.iter())
            .map(|(segment, _)| segment.path().to_path_buf())
            .collect()
    }

    pub(crate) fn stats(&self) -> AuthStats {
        let deep = self.trie.segments.usage(true);
        AuthStats {
            version: self.trie.version,
            retained_pages: self.trie.retained.len(),
            retained_bytes: self.trie.retained_bytes(),
            prefetched_pages: self.prefetched.len(),
            segments: self.trie.segments.len(),
            live_bytes: self.trie.segments.live_bytes(),
            file_bytes: self.trie.segments.file_bytes(),
            deep_file_bytes: deep.0,
            deep_live_bytes: deep.1,
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
        // Waiting for a warm-up is waiting for page reads.
        let waited = Instant::now();
        self.settle_warm_up();
        self.stats.time.page_reads += waited.elapsed();
        let mut loaded = std::mem::replace(&mut self.prefetched, Loaded::new());
        // What a prefetch already counted of `loaded` is not this commit's.
        let (reads, hashes, read_bytes, read_time) = (
            loaded.reads,
            loaded.hashes,
            loaded.read_bytes,
            loaded.read_time,
        );
        let started = Instant::now();
        let written = trie::commit(&mut self.trie, &mut loaded, &store(&self.session), changes)?;
        let elapsed = started.elapsed();
        self.stats.pages_read += loaded.reads - reads;
        self.stats.hashes += loaded.hashes - hashes;
        self.stats.page_bytes_read += loaded.read_bytes - read_bytes;
        self.stats.time.page_reads += loaded.read_time - read_time;
        self.stats.time.write += loaded.write_time;
        self.stats.time.update += elapsed.saturating_sub(loaded.write_time);
        self.stats.pages_written += written;
        self.stats.keys_committed += changes.len() as u64;
        let started = Instant::now();
        self.clean(loaded.appended)?;
        self.stats.time.clean += started.elapsed();
        Ok(self.current())
    }

    /// Moves this version's pages out of old segments of the page log, a piece per commit,
    /// while its segments of a stream hold more than [`NEAR_FILES_PER_LIVE`] (near stream) or
    /// [`DEEP_FILES_PER_LIVE`] (deep stream) times its bytes there, plus
    /// [`CLEAN_SLACK_BYTES`]. Each stream has at most one segment being emptied, the one
    /// where the version had the fewest bytes when it was picked; a commit goes through the
    /// next [`CLEAN_SCAN_PER_APPENDED`] times the bytes it appended to the stream (at least
    /// [`CLEAN_SCAN_MIN_BYTES`]) of such segments, in pieces of at most [`CLEAN_PIECE_BYTES`],
    /// and appends again the pages there the version still reaches ([`trie::relocate`]).
    /// `appended` is what the commit appended, per stream.
    ///
    /// Which bytes a piece reads: where the retained pages point at every record the version
    /// has in the segment (a segment of the near stream, found by one pass over their pointers
    /// when it is picked, [`trie::near_records`]), only the records of the piece they still
    /// point at, in batched reads of their blocks; otherwise the whole piece, sequentially.
    ///
    /// Cost per commit and stream: the reads above (memory: one piece, in a buffer kept
    /// between commits, or the live records' blocks); the appends of the live pages. For the
    /// near stream nothing more (their parents are retained); for the deep stream, each live
    /// page's stored parent read and appended again with the pages above it: that is why the
    /// deep stream may hold more dead bytes before it is cleaned.
    fn clean(&mut self, appended: [u64; 2]) -> Result<()> {
        for stream in Stream::ALL {
            let s = stream as usize;
            let deep = stream == Stream::Deep;
            let mut budget = appended[s]
                .saturating_mul(CLEAN_SCAN_PER_APPENDED)
                .max(CLEAN_SCAN_MIN_BYTES);
            while budget > 0 {
                if self.cleaning[s].is_none() {
                    let (files, live) = self.trie.segments.usage(deep);
                    let factor = if deep {
                        DEEP_FILES_PER_LIVE
                    } else {
                        NEAR_FILES_PER_LIVE
                    };
                    if files
                        <= live
                            .saturating_mul(factor)
                            .saturating_add(CLEAN_SLACK_BYTES)
                    {
                        break;
                    }
                    // Read at each pick: a piece's appends may have begun a new segment,
                    // which must not be picked (its own pages would be appended to it).
                    let current = self.session.page_log().current_ids();
                    // A segment more than three quarters live is not worth emptying: it
                    // would free less than a third of what it moves (the bound is then out of
                    // reach, as padding or a snapshot's shared segments can make it).
                    self.cleaning[s] = self
                        .trie
                        .segments
                        .emptiest(deep, &current)
                        .filter(|segment| {
                            let live = self.trie.segments.live_in(segment.id());
                            live.saturating_mul(4) <= segment.file_bytes().saturating_mul(3)
                        })
                        .map(|segment| {
                            let (records, bytes) = trie::near_records(&self.trie, segment.id());
                            let near = (bytes == self.trie.segments.live_in(segment.id()))
                                .then(|| records.into());
                            Cleaning {
                                segment,
                                from: pagelog::HEADER_BYTES,
                                near,
                            }
                        });
                }
                let Some(mut cleaning) = self.cleaning[s].take() else {
                    break;
                };
                let id = cleaning.segment.id();
                if self.trie.segments.get(id).is_none() {
                    continue; // commits let go of every page the version had there
                }
                let from = cleaning.from;
                let file_bytes = cleaning.segment.file_bytes();
                let until = from.saturating_add(budget.min(CLEAN_PIECE_BYTES));
                let (moved, read, next) = match &mut cleaning.near {
                    Some(near) => {
                        let end = near.partition_point(|r| (r.loc.offset as u64) < until);
                        let piece: Vec<NearRecord> = near.drain(..end).collect();
                        // Past the last record, the segment is done.
                        let next = if near.is_empty() {
                            file_bytes
                        } else {
                            until.min(file_bytes)
                        };
                        let (moved, read) =
                            trie::relocate_near(&mut self.trie, &store(&self.session), &piece)?;
                        (moved, read, next)
                    }
                    None => {
                        let segments = &self.trie.segments;
                        let (records, next) = PageLog::scan_range(
                            &cleaning.segment,
                            from,
                            until,
                            &mut self.scan_buf,
                            &mut |loc| segments.maybe_live(loc),
                        )?;
                        let (moved, parents_read) =
                            trie::relocate(&mut self.trie, &store(&self.session), records)?;
                        (moved, (next - from) + parents_read, next)
                    }
                };
                budget = budget.saturating_sub(next - from);
                self.stats.clean_bytes_read += read;
                self.stats.pages_written += moved;
                self.stats.pages_moved += moved;
                if next < file_bytes {
                    cleaning.from = next;
                    self.cleaning[s] = Some(cleaning);
                    continue;
                }
                self.stats.segments_cleaned += 1;
                self.stats.deep_segments_cleaned += deep as u64;
                self.stats.segments_cleaned_by_pointer += cleaning.near.is_some() as u64;
                if self.trie.segments.get(id).is_some() {
                    return Err(Error::corrupt(
                        "page log accounting",
                        format!(
                            "the version still counts bytes in segment {id:016x} after moving every page it reaches there"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Starts loading the pages the key paths pass through, for the next commit, on a thread
    /// of its own, and returns at once: the next commit (or prefetch, or close) waits for it
    /// ([`Auth::settle_warm_up`]). A warm-up still running is waited for first. Its errors are
    /// not reported: a page it could not read is read again by the commit, which reports its
    /// own; so is a thread that could not be started (no warm-up then). Cost here: one thread
    /// started (it reads as [`Auth::prefetch`] does).
    pub(crate) fn warm_up(&mut self, paths: Vec<Hash>) {
        self.settle_warm_up();
        let mut loaded = std::mem::replace(&mut self.prefetched, Loaded::new());
        let before = (loaded.reads, loaded.hashes, loaded.read_bytes);
        let trie = self.trie.clone(); // O(1): its maps are shared
        let session = self.session.clone();
        let spawned = std::thread::Builder::new()
            .name("cairn-warm-up".into())
            .spawn(move || {
                let started = Instant::now();
                let result =
                    trie::load_paths_in_halves(&trie, &mut loaded, &store(&session), &paths);
                (loaded, result, started.elapsed())
            });
        match spawned {
            Ok(handle) => {
                self.warming = Some(Warming {
                    version: self.trie.version,
                    before,
                    handle,
                })
            }
            // No thread to be had: no warm-up (the pages prefetched before it went with the
            // closure; the commit reads whatever it needs).
            Err(e) => log::debug!("a warm-up could not start a thread: {e}"),
        }
    }

    /// Waits for a warm-up started by [`Auth::warm_up`], if one is, and keeps what it loaded
    /// for the next commit (if the version is still the one it read; every page it holds was
    /// checked against its parent, even if a later read failed).
    fn settle_warm_up(&mut self) {
        let Some(warming) = self.warming.take() else {
            return;
        };
        let (loaded, result, elapsed) = warming
            .handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        if let Err(e) = result {
            log::debug!("a warm-up's reads failed (the commit reads again): {e}");
        }
        if warming.version != self.trie.version {
            return;
        }
        let (reads, hashes, bytes) = warming.before;
        self.stats.time.prefetch += elapsed;
        self.stats.pages_read += loaded.reads - reads;
        self.stats.hashes += loaded.hashes - hashes;
        self.stats.page_bytes_read += loaded.read_bytes - bytes;
        self.prefetched = loaded;
    }

    /// Loads the pages the key paths pass through, for the next commit (or proof).
    pub(crate) fn prefetch(&mut self, paths: &[Hash]) -> Result<()> {
        self.settle_warm_up();
        let (reads, hashes, bytes) = (
            self.prefetched.reads,
            self.prefetched.hashes,
            self.prefetched.read_bytes,
        );
        let started = Instant::now();
        trie::load_paths_in_halves(
            &self.trie,
            &mut self.prefetched,
            &store(&self.session),
            paths,
        )?;
        self.stats.time.prefetch += started.elapsed();
        self.stats.pages_read += self.prefetched.reads - reads;
        self.stats.hashes += self.prefetched.hashes - hashes;
        self.stats.page_bytes_read += self.prefetched.read_bytes - bytes;
        Ok(())
    }

    /// A multiproof for sorted, distinct key paths against the latest commit.
    pub(crate) fn prove(&mut self, paths: &[Hash]) -> Result<Proof> {
        let mut loaded = Loaded::new();
        trie::load_paths(&self.trie, &mut loaded, &store(&self.session), paths)?;
        self.stats.pages_read += loaded.reads;
        self.stats.hashes += loaded.hashes;
        self.stats.page_bytes_read += loaded.read_bytes;
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
        self.stats.page_bytes_read += loaded.read_bytes;
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
        let auth = table.lsm().auth_for_tests();
        let stored = trie::stored_pages(&auth.trie, &store(&auth.session)).unwrap();
        let below: u64 = stored.iter().map(|(_, l)| pagelog::record_bytes(l)).sum();
        auth.trie.segments.live_bytes() == below
    }

    /// Whether a version's segment files of each stream are within the bound cleaning keeps,
    /// with room for what a commit appends before its cleaning (here up to five 64 KiB
    /// segments in the near stream) and the segments being cleaned and written.
    fn files_are_bounded(stats: &AuthStats) -> bool {
        let room = CLEAN_SLACK_BYTES + 8 * crate::pagelog::SEGMENT_BYTES_TARGET;
        let near = (
            stats.file_bytes - stats.deep_file_bytes,
            stats.live_bytes - stats.deep_live_bytes,
        );
        near.0 <= NEAR_FILES_PER_LIVE * near.1 + room
            && stats.deep_file_bytes <= DEEP_FILES_PER_LIVE * stats.deep_live_bytes + room
    }

    /// Many commits rewriting the same keys, with one retained level: both streams fill
    /// with dead pages, and cleaning keeps each stream's files within its bound, a piece of
    /// a segment per commit, while every page stays reachable and accounted for.
    #[test]
    fn cleaning_bounds_both_streams() {
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/s")).unwrap();
        let session = Session::open_with(fs.clone(), "/s", SessionOptions::default()).unwrap();
        let table = session
            .new_table(TableConfig {
                auth: Some(AuthConfig {
                    retained_bytes: 0,
                    ..AuthConfig::default()
                }),
                ..TableConfig::default()
            })
            .unwrap();
        let mut rng = 0x9e37_79b9u64;
        let mut model = std::collections::BTreeMap::new();
        for round in 0..300u64 {
            for _ in 0..100 {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let k = ((rng >> 33) % 4000).to_be_bytes();
                table.insert(k, round.to_le_bytes()).unwrap();
                model.insert(k, round.to_le_bytes());
            }
            table.commit().unwrap();
            let stats = table.auth_stats().unwrap();
            assert!(files_are_bounded(&stats), "round {round}: {stats:?}");
            if round % 50 == 49 {
                assert!(accounting_is_exact(&table), "round {round}");
            }
        }
        let stats = table.auth_stats().unwrap();
        assert!(stats.deep_segments_cleaned > 0, "{stats:?}");
        // The accounts of bytes and time: every page read asks for at least its block, and
        // each phase of these commits took some time.
        assert!(stats.pages_read > 0, "{stats:?}");
        assert!(
            stats.page_bytes_read >= stats.pages_read * 4096,
            "{stats:?}"
        );
        assert!(stats.clean_bytes_read > 0, "{stats:?}");
        let t = stats.time;
        for (phase, time) in [
            ("values", t.values),
            ("update", t.update),
            ("page reads", t.page_reads),
            ("write", t.write),
            ("clean", t.clean),
        ] {
            assert!(time > Duration::ZERO, "{phase}: {stats:?}");
        }
        assert_eq!(t.prefetch, Duration::ZERO, "no prefetch was made");
        assert!(
            stats.segments_cleaned > stats.deep_segments_cleaned,
            "{stats:?}"
        );
        // Every near segment (its pages' parent is the retained top page) was emptied by
        // reading only the records the top page points at.
        assert_eq!(
            stats.segments_cleaned_by_pointer,
            stats.segments_cleaned - stats.deep_segments_cleaned,
            "{stats:?}"
        );
        assert!(proves_its_contents(
            &table,
            &table.root().unwrap().root,
            &model
        ));
    }

    /// Whether one multiproof of every key of `model` from `table` verifies against `root`
    /// with the model's values.
    fn proves_its_contents(
        table: &Table,
        root: &Root,
        model: &std::collections::BTreeMap<[u8; 8], [u8; 8]>,
    ) -> bool {
        let keys: Vec<[u8; 8]> = model.keys().copied().collect();
        let claims: Vec<cairn_proof::Claim<'_>> = keys
            .iter()
            .map(|k| cairn_proof::Claim::present(k, &model[k]))
            .collect();
        let proof = table.prove(&keys).unwrap().proof;
        proof.verify(root, &claims) == Ok(())
    }

    /// A table whose commits rewrite 100 of 4,000 keys each (round `round`'s keys from a seeded
    /// generator), with one retained level, so that cleaning reads near segments by pointer;
    /// its trie pages read with `O_DIRECT` if `direct`.
    fn rewriting_table(fs: &Arc<MemFs>, direct: bool) -> (Session, Table) {
        let options = SessionOptions::default().direct_page_reads(direct);
        let session = Session::open_with(fs.clone(), "/s", options).unwrap();
        let config = TableConfig {
            auth: Some(AuthConfig {
                retained_bytes: 0,
                ..AuthConfig::default()
            }),
            ..TableConfig::default()
        };
        let table = session.new_table(config).unwrap();
        (session, table)
    }

    /// Round `round` of [`rewriting_table`]'s commits, applied to `model` too.
    fn rewrite_round(
        table: &Table,
        model: &mut std::collections::BTreeMap<[u8; 8], [u8; 8]>,
        round: u64,
    ) -> Result<Commit> {
        let mut rng = crate::fs::sim::SplitMix64::new(round);
        for _ in 0..100 {
            let k = (rng.next_u64() % 4000).to_be_bytes();
            table.insert(k, round.to_le_bytes())?;
            model.insert(k, round.to_le_bytes());
        }
        table.commit()
    }

    /// A near segment cleaning could pick now (not being written) whose live records the
    /// retained pages all point at, if any: its file id and those records.
    fn near_segment_by_pointer(table: &Table) -> Option<(u64, Vec<NearRecord>)> {
        let auth = table.lsm().auth_for_tests();
        let current = auth.session.page_log().current_ids();
        let segment = auth.trie.segments.emptiest(false, &current)?;
        let (records, bytes) = trie::near_records(&auth.trie, segment.id());
        let live = auth.trie.segments.live_in(segment.id());
        (bytes == live && !records.is_empty()).then(|| (segment.file_id(), records))
    }

    /// A record that cleaning finds by pointer is checked as any page read is: with its bytes
    /// altered on disk, moving it reports the corruption (it is not appended again), and so
    /// does the table's next commit that reaches it, by cleaning or by its own reads. Pages
    /// read through the page cache and with `O_DIRECT`.
    #[test]
    fn a_corrupt_record_found_by_pointer_is_reported_not_moved() {
        for direct in [false, true] {
            a_corrupt_record_found_by_pointer_is_reported_not_moved_with(direct);
        }
    }

    fn a_corrupt_record_found_by_pointer_is_reported_not_moved_with(direct: bool) {
        let fs = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/s")).unwrap();
        let (_session, table) = rewriting_table(&fs, direct);
        let mut model = std::collections::BTreeMap::new();
        let mut round = 0;
        let (file_id, records) = loop {
            rewrite_round(&table, &mut model, round).unwrap();
            round += 1;
            if let Some(found) = near_segment_by_pointer(&table) {
                break found;
            }
            assert!(round < 300, "no near segment to clean by pointer");
        };
        let name = pagelog::segment_file_name(file_id);
        let path = fs
            .file_paths()
            .into_iter()
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_str() == Some(name.as_str()))
            })
            .expect("the segment's file");
        let mut bytes = fs.file_bytes(&path).unwrap();
        for record in &records {
            // A byte of each record's page, past its header.
            bytes[record.loc.offset as usize + pagelog::RECORD_HEADER_BYTES + 2] ^= 0x40;
        }
        assert!(fs.set_file_bytes(&path, bytes));
        {
            let mut auth = table.lsm().auth_for_tests();
            let auth = &mut *auth;
            let before = (auth.trie.segments.live_bytes(), auth.stats.pages_moved);
            let moved = trie::relocate_near(&mut auth.trie, &store(&auth.session), &records);
            assert!(matches!(moved, Err(Error::Corrupt { .. })), "{moved:?}");
            let after = (auth.trie.segments.live_bytes(), auth.stats.pages_moved);
            assert_eq!(after, before);
        }
        let failed = (round..round + 50)
            .map(|r| rewrite_round(&table, &mut model, r))
            .find_map(|r| r.err())
            .expect("a commit reaching the altered records");
        assert!(
            matches!(failed, Error::Corrupt { .. } | Error::TableBroken(_)),
            "{failed:?}"
        );
    }

    /// A power loss at any point of a commit that cleans a near segment by pointer (reads of
    /// its live records, their appends elsewhere, the emptied segment's removal) leaves the
    /// snapshot saved before it whole: it reopens with its root and contents, proves them, and
    /// its own commits go on cleaning with exact accounting. Every other crash point with trie
    /// pages read with `O_DIRECT`, before the power loss and after it.
    #[test]
    fn power_loss_while_cleaning_by_pointer_keeps_the_snapshot() {
        const SAVED_AT: u64 = 10;
        // Builds the table up to the commit of round `last` (not made), with the snapshot
        // saved after round `SAVED_AT`: its contents and root come back too.
        let build = |last: u64, direct: bool| {
            let fs = Arc::new(MemFs::new());
            fs.create_dir_all(Path::new("/s")).unwrap();
            fs.sync_dir(Path::new("/")).unwrap();
            let (session, table) = rewriting_table(&fs, direct);
            let mut model = std::collections::BTreeMap::new();
            let mut saved = None;
            for round in 0..last {
                let root = rewrite_round(&table, &mut model, round).unwrap().root;
                if round == SAVED_AT {
                    table.save_snapshot("s", "").unwrap();
                    saved = Some((model.clone(), root));
                }
            }
            (fs, session, table, model, saved)
        };
        // The first round after the save whose commit cleans by pointer, and its primitives.
        let (fs, _session, table, mut model, _) = build(SAVED_AT + 1, false);
        let mut round = SAVED_AT + 1;
        let ops = loop {
            let before = table.auth_stats().unwrap();
            let ops = fs.op_count();
            rewrite_round(&table, &mut model, round).unwrap();
            let after = table.auth_stats().unwrap();
            if after.clean_bytes_read > before.clean_bytes_read
                && after.segments_cleaned_by_pointer > before.segments_cleaned_by_pointer
            {
                break fs.op_count() - ops;
            }
            round += 1;
            assert!(round < 300, "no commit cleaned by pointer: {after:?}");
        };
        drop(table);
        assert!(ops > 4, "{ops}");
        for (i, crash_at) in (0..ops).step_by((ops as usize / 24).max(1)).enumerate() {
            let direct = i % 2 == 1;
            let (fs, session, table, mut model, saved) = build(round, direct);
            let (mut saved_model, saved_root) = saved.unwrap();
            fs.crash_after(crash_at);
            let _ = rewrite_round(&table, &mut model, round);
            fs.cut_power();
            drop(table);
            drop(session);
            fs.recover(crash_at);
            let options = SessionOptions::default().direct_page_reads(direct);
            let session = Session::open_with(fs.clone(), "/s", options).unwrap();
            let table = session
                .open_snapshot("s", "", Default::default())
                .unwrap_or_else(|e| panic!("crash at {crash_at}: {e}"));
            assert_eq!(
                table.root().unwrap().root,
                saved_root,
                "crash at {crash_at}"
            );
            assert!(
                proves_its_contents(&table, &saved_root, &saved_model),
                "crash at {crash_at}"
            );
            for r in SAVED_AT + 1..SAVED_AT + 31 {
                rewrite_round(&table, &mut saved_model, r).unwrap();
            }
            assert!(accounting_is_exact(&table), "crash at {crash_at}");
        }
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
                // A version a snapshot restored counts all its segments as deep until its
                // commits clean them: the bound here is on both streams together.
                let stats = table.auth_stats().unwrap();
                let room = CLEAN_SLACK_BYTES + 8 * crate::pagelog::SEGMENT_BYTES_TARGET;
                assert!(
                    stats.file_bytes
                        <= NEAR_FILES_PER_LIVE * (stats.live_bytes - stats.deep_live_bytes)
                            + DEEP_FILES_PER_LIVE * stats.deep_live_bytes
                            + 2 * room,
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

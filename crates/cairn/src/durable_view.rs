//! A read-only view of a session's durable tables as their owner sees them: each table's newest
//! checkpoint, opened in place, with the log records after it replayed into memory instead of
//! into the table, so that nothing is written and no lock is needed (`cairn get --table`).
//!
//! Owns: [`DurableView`], [`LiveTable`], [`LiveEntry`], [`LiveCursor`]. May call: `durable`
//! (the catalog, record payloads, a checkpoint's resolve function), `wal` (reading records),
//! `snapshot` (checkpoint names), `lsm` (opening a checkpoint as a table), `cursor` and `lookup`
//! (reading it), `entry` (combining updates), `session_core` (the session's directory and file
//! system). Must never touch: the log's or the checkpoints' files for writing.
//!
//! Consistency: the view is the tables as of the last record read (the owner's writes after
//! it are not seen), each key resolved as the owner would: the replayed updates combined by the
//! table's resolve function, over the checkpoint's value. An owner's checkpoint that removes
//! the checkpoint or the segments being read makes the view fail to open; it is tried again
//! (three times in all).
//!
//! Bounds: opening reads each checkpoint (as `Session::open_snapshot`) and the log after the
//! oldest one once; memory: every key the log changed since the checkpoints, with its newest
//! value (at most what the owner replays at its next open, bounded by its automatic
//! checkpoints). A lookup is a map lookup plus at most one lookup in the checkpoint; a cursor
//! merges the map's range with the checkpoint's cursor.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::config::Resolve;
use crate::cursor::Cursor;
use crate::durable::{self, decode_payload, Payload};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::lookup::LookupResult;
use crate::lsm::Lsm;
use crate::session_core::SessionCore;
use crate::snapshot;
use crate::wal::{self, RecoveryMode};

/// Opening attempts, against an owner that checkpoints meanwhile.
const OPEN_ATTEMPTS: usize = 3;

/// The durable tables of a session as of the last record of its log read
/// ([`crate::Session::durable_view`]).
pub struct DurableView {
    tables: BTreeMap<String, LiveTable>,
    last_seq: u64,
}

/// One durable table in a [`DurableView`]: its checkpoint and the updates logged after it.
pub struct LiveTable {
    base: Lsm,
    resolve: Resolve,
    /// The newest update of every key the log changed after the checkpoint, combined.
    changed: BTreeMap<Vec<u8>, Entry<Vec<u8>>>,
    replayed: u64,
}

/// A key's value and blob in a [`LiveTable`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LiveEntry {
    /// The key.
    pub key: Vec<u8>,
    /// Its value.
    pub value: Vec<u8>,
    /// Its blob, read when the cursor or lookup was asked for blobs; otherwise `None` even for
    /// a key that has one (see [`LiveEntry::has_blob`]).
    pub blob: Option<Vec<u8>>,
    /// Whether the key has a blob.
    pub has_blob: bool,
}

impl DurableView {
    /// Names of the durable tables, sorted.
    pub fn tables(&self) -> Vec<String> {
        self.tables.keys().cloned().collect()
    }

    /// The durable table `name`, if the session has it.
    pub fn table(&self, name: &str) -> Option<&LiveTable> {
        self.tables.get(name)
    }

    /// The sequence number of the last log record the view holds (0 for none).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }
}

impl LiveTable {
    /// Log records replayed into the view for this table (batch parts that named it).
    pub fn replayed(&self) -> u64 {
        self.replayed
    }

    /// Keys the log changed after the checkpoint.
    pub fn changed_keys(&self) -> usize {
        self.changed.len()
    }

    /// Looks up `key`, with its blob's bytes when `blobs`.
    ///
    /// Errors: as [`crate::Table::lookup`], and [`crate::Table::retrieve_blob`]'s with
    /// `blobs`.
    pub fn get(&self, key: &[u8], blobs: bool) -> Result<Option<LiveEntry>> {
        match self.changed.get(key) {
            Some(Entry::Insert(value, blob)) => Ok(Some(live(key, value.clone(), blob, blobs))),
            Some(Entry::Delete) => Ok(None),
            Some(Entry::Upsert(newer)) => {
                let value = match lookup(&self.base, key)? {
                    LookupResult::NotFound => newer.clone(),
                    found => self.resolve.apply(newer, found.value().unwrap_or_default()),
                };
                Ok(Some(live(key, value, &None, blobs)))
            }
            None => match lookup(&self.base, key)? {
                LookupResult::NotFound => Ok(None),
                LookupResult::Found(value) => Ok(Some(live(key, value, &None, blobs))),
                LookupResult::FoundWithBlob(value, blob) => Ok(Some(LiveEntry {
                    key: key.to_vec(),
                    value,
                    blob: blobs.then(|| self.base.retrieve_blob(&blob)).transpose()?,
                    has_blob: true,
                })),
            },
        }
    }

    /// Every key in `range`, in key order, with blobs' bytes when `blobs`. The checkpoint's
    /// cursor is a stable view (see [`crate::Table::cursor`]).
    ///
    /// Errors: as [`crate::Table::range`].
    pub fn range(
        &self,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
        blobs: bool,
    ) -> Result<LiveCursor<'_>> {
        let base = self.base.range(range.clone())?;
        // `BTreeMap::range` panics on an inverted range: an empty one stands in for it.
        let changed = match is_empty(&range) {
            true => self.changed.range::<Vec<u8>, _>(..).take(0),
            false => self.changed.range(range).take(usize::MAX),
        };
        Ok(LiveCursor {
            table: self,
            base,
            base_next: None,
            changed,
            changed_next: None,
            blobs,
            started: false,
        })
    }
}

/// Whether `range` holds no key (its start after its end, or at it with either excluded).
fn is_empty(range: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> bool {
    let start = match &range.0 {
        Bound::Included(k) | Bound::Excluded(k) => k,
        Bound::Unbounded => return false,
    };
    let end = match &range.1 {
        Bound::Included(k) | Bound::Excluded(k) => k,
        Bound::Unbounded => return false,
    };
    match (&range.0, &range.1) {
        (Bound::Included(_), Bound::Included(_)) => start > end,
        _ => start >= end,
    }
}

/// One key's lookup in a checkpoint.
fn lookup(table: &Lsm, key: &[u8]) -> Result<LookupResult> {
    Ok(table
        .lookups(&[key])?
        .pop()
        .unwrap_or(LookupResult::NotFound))
}

fn live(key: &[u8], value: Vec<u8>, blob: &Option<Vec<u8>>, blobs: bool) -> LiveEntry {
    LiveEntry {
        key: key.to_vec(),
        value,
        blob: blob.as_ref().filter(|_| blobs).cloned(),
        has_blob: blob.is_some(),
    }
}

/// A cursor over a [`LiveTable`]: its checkpoint's entries merged with the log's.
pub struct LiveCursor<'a> {
    table: &'a LiveTable,
    base: Cursor,
    base_next: Option<crate::cursor::CursorEntry>,
    changed: std::iter::Take<std::collections::btree_map::Range<'a, Vec<u8>, Entry<Vec<u8>>>>,
    changed_next: Option<(&'a Vec<u8>, &'a Entry<Vec<u8>>)>,
    blobs: bool,
    started: bool,
}

impl LiveCursor<'_> {
    fn base_entry(&self, e: crate::cursor::CursorEntry) -> Result<LiveEntry> {
        let blob = match (&e.blob, self.blobs) {
            (Some(b), true) => Some(self.table.base.retrieve_blob(b)?),
            _ => None,
        };
        Ok(LiveEntry {
            has_blob: e.blob.is_some(),
            key: e.key,
            value: e.value,
            blob,
        })
    }

    fn step(&mut self) -> Result<Option<LiveEntry>> {
        if !self.started {
            self.started = true;
            self.base_next = self.base.next().transpose()?;
            self.changed_next = self.changed.next();
        }
        loop {
            let order = match (&self.base_next, &self.changed_next) {
                (None, None) => return Ok(None),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(b), Some((k, _))) => b.key.as_slice().cmp(k.as_slice()),
            };
            if order == std::cmp::Ordering::Less {
                let e = self.base_next.take().expect("present");
                self.base_next = self.base.next().transpose()?;
                return self.base_entry(e).map(Some);
            }
            let (key, entry) = self.changed_next.take().expect("present");
            self.changed_next = self.changed.next();
            let older = match order {
                std::cmp::Ordering::Equal => {
                    let older = self.base_next.take();
                    self.base_next = self.base.next().transpose()?;
                    older
                }
                _ => None,
            };
            match entry {
                Entry::Insert(value, blob) => {
                    return Ok(Some(live(key, value.clone(), blob, self.blobs)))
                }
                Entry::Delete => continue,
                Entry::Upsert(newer) => {
                    let value = match older {
                        Some(o) => self.table.resolve.apply(newer, &o.value),
                        None => newer.clone(),
                    };
                    return Ok(Some(live(key, value, &None, self.blobs)));
                }
            }
        }
    }
}

impl Iterator for LiveCursor<'_> {
    type Item = Result<LiveEntry>;

    fn next(&mut self) -> Option<Result<LiveEntry>> {
        self.step().transpose()
    }
}

/// Opens the view of `session`'s durable tables (the module's header), trying again when the
/// owner's checkpoint removed a file being read.
///
/// Errors: [`Error::NotDurable`] for a session without a log, [`Error::LogCorrupted`] (as a
/// recovery would refuse the log), [`Error::InvalidConfig`] for a table with a custom resolve
/// function, and the errors of opening a snapshot.
pub(crate) fn open(session: &Arc<SessionCore>) -> Result<DurableView> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match open_once(session) {
            Err(e) if attempt < OPEN_ATTEMPTS && is_gone(&e) => continue,
            other => return other,
        }
    }
}

/// Whether `e` is a file removed under the reader (by a checkpoint of the owner).
fn is_gone(e: &Error) -> bool {
    match e {
        Error::SnapshotMissing(_) => true,
        Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    }
}

fn open_once(session: &Arc<SessionCore>) -> Result<DurableView> {
    let fs = session.fs().clone();
    let dir = session.dir().join("log");
    let catalog = durable::session_catalog(&*fs, session.dir())?;
    let mut by_id: BTreeMap<u32, (String, u64)> = BTreeMap::new();
    let mut tables = BTreeMap::new();
    for entry in &catalog.tables {
        let name = snapshot::checkpoint_name(entry.id, entry.checkpoint);
        // No custom resolve function is known here: a table with one is refused.
        durable::checkpoint_resolve(session, &name, &entry.name, &[])?;
        let overrides = crate::SnapshotOverrides::default();
        let lsm = Lsm::open_snapshot(session.clone(), &name, durable::CHECKPOINT_LABEL, overrides)?;
        let resolve = lsm.config().resolve.clone();
        by_id.insert(entry.id, (entry.name.clone(), entry.seq));
        tables.insert(
            entry.name.clone(),
            LiveTable {
                base: lsm,
                resolve,
                changed: BTreeMap::new(),
                replayed: 0,
            },
        );
    }
    let first_seq = catalog.replay_from().unwrap_or(u64::MAX);
    let mut apply = |record: &wal::Record| -> Result<()> {
        let parts = match decode_payload(&record.payload)? {
            Payload::Batch(parts) => parts,
            // Commits and dirty keys concern an authenticated table's root, not its contents.
            Payload::Commit(_) | Payload::Dirty(..) => return Ok(()),
        };
        for (id, updates) in parts {
            let (name, covered) = by_id.get(&id).ok_or_else(|| {
                Error::corrupt(
                    "log record",
                    format!(
                        "record {} names durable table {id}, which does not exist",
                        record.seq
                    ),
                )
            })?;
            if record.seq <= *covered {
                continue;
            }
            let table = tables.get_mut(name).expect("every catalog table is open");
            table.replayed += 1;
            for (key, update) in updates {
                let newer = match update {
                    durable::OwnedUpdate::Insert(v) => Entry::Insert(v, None),
                    durable::OwnedUpdate::InsertWithBlob(v, b) => Entry::Insert(v, Some(b)),
                    durable::OwnedUpdate::Upsert(v) => Entry::Upsert(v),
                    durable::OwnedUpdate::Delete => Entry::Delete,
                };
                let combined = match (&newer, table.changed.get(&key)) {
                    (Entry::Upsert(_), Some(older)) => {
                        newer.combine_older(older.op(), older.value(), &table.resolve)
                    }
                    _ => newer,
                };
                table.changed.insert(key, combined);
            }
        }
        Ok(())
    };
    let recovered = wal::recover(
        &*fs,
        &dir,
        catalog.log_id,
        first_seq,
        RecoveryMode::TolerateTornTail,
        &mut apply,
    )?;
    Ok(DurableView {
        tables,
        last_seq: recovered.last_seq(),
    })
}

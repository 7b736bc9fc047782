//! A read-only look at a session's write-ahead log, for tools (`cairn wal`): the catalog's
//! durable tables, the segments, and every record the log holds, decoded, with the chain of
//! segments and records checked as recovery checks it.
//!
//! Owns: [`LogView`], [`LogTableEntry`], [`LogSegment`], [`LogRecord`], [`LogRecordKind`],
//! [`read_log`] and [`log_tables`]. May call: `wal` (segment headers, recovery's reading of the records),
//! `durable` (the catalog, record payloads), `fs`. Must never touch: tables, or anything that
//! writes: it is safe beside the log's owner (whose tail being written reads as a torn tail).
//!
//! Bounds: reads every segment once (as recovery does: one segment in memory at a time) and the
//! catalog; memory besides that is one record and the segment list.

use std::ops::ControlFlow;
use std::path::Path;

use crate::durable::{decode_payload, session_catalog, Catalog, Payload};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::wal::{self, RecoveryMode, SegmentHeader, SEGMENT_HEADER_BYTES};

/// What a session's write-ahead log holds ([`crate::Session::read_log`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct LogView {
    /// The log's id (in the catalog and every segment's header).
    pub log_id: u64,
    /// The durable tables the catalog lists.
    pub tables: Vec<LogTableEntry>,
    /// The segments, oldest first.
    pub segments: Vec<LogSegment>,
    /// Records read (handed to the caller), from the oldest segment's first on.
    pub records: u64,
    /// The first record a recovery replays (the oldest one a checkpoint lacks); `None` when
    /// the catalog lists no table.
    pub replay_from: Option<u64>,
    /// The last good record's sequence number (0 for none); when the reading stopped early or
    /// met damage, the last record read.
    pub last_seq: u64,
    /// Damage that recovery would refuse ([`Error::LogCorrupted`]: a damaged record before
    /// good ones, a missing or stale segment, records the checkpoints need gone); records
    /// after it were not read. A torn tail (a write never reported durable, or the owner's
    /// write in progress) is not damage.
    pub damage: Option<Error>,
}

/// A durable table as the log's catalog lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogTableEntry {
    /// Its number in log records.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// The number of its newest checkpoint.
    pub checkpoint: u64,
    /// Every record up to this one is in that checkpoint.
    pub covered_to: u64,
}

/// One segment file of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogSegment {
    /// Its number (the file `log/<number>.seg`).
    pub number: u64,
    /// The sequence number its header says its first record has.
    pub first_seq: u64,
    /// Its file's size (segments are preallocated: more than its records).
    pub file_bytes: u64,
    /// Records read from it.
    pub records: u64,
}

/// One record of the log, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogRecord {
    /// Its sequence number.
    pub seq: u64,
    /// The segment holding it.
    pub segment: u64,
    /// Bytes of its payload.
    pub payload_bytes: usize,
    /// What it holds.
    pub kind: LogRecordKind,
}

/// What a log record holds.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogRecordKind {
    /// A batch of updates: per table part, the table's id and its number of updates.
    Batch {
        /// `(table id, updates)` per part, in order.
        parts: Vec<(u32, u64)>,
    },
    /// A logged commit of an authenticated table.
    Commit {
        /// The table's id.
        table: u32,
    },
    /// The keys a checkpoint of an authenticated table had not yet committed.
    Dirty {
        /// The table's id.
        table: u32,
        /// How many keys.
        keys: u64,
    },
    /// A record whose checksum holds but whose payload does not decode (recovery would fail
    /// on it).
    Undecodable {
        /// Why.
        reason: String,
    },
}

/// The durable tables the catalog of the session in `session_dir` lists (the catalog alone is
/// read). Errors: as [`read_log`]'s.
pub(crate) fn log_tables(fs: &dyn FileSystem, session_dir: &Path) -> Result<Vec<LogTableEntry>> {
    Ok(table_entries(&session_catalog(fs, session_dir)?))
}

fn table_entries(catalog: &Catalog) -> Vec<LogTableEntry> {
    (catalog.tables.iter())
        .map(|t| LogTableEntry {
            id: t.id,
            name: t.name.clone(),
            checkpoint: t.checkpoint,
            covered_to: t.seq,
        })
        .collect()
}

/// Reads the log of the session in `session_dir`: the catalog, every segment's header, and
/// every record in order, each handed to `on_record` (which may stop the reading with
/// [`ControlFlow::Break`]; the view then counts the records read so far).
///
/// Errors: [`Error::NotDurable`] when the session has no log (no `log/catalog`), the decoders'
/// errors for a damaged catalog, [`Error::Io`]. Damage in the segments is not an error: it is
/// [`LogView::damage`].
pub(crate) fn read_log(
    fs: &dyn FileSystem,
    session_dir: &Path,
    on_record: &mut dyn FnMut(&LogRecord) -> ControlFlow<()>,
) -> Result<LogView> {
    let dir = session_dir.join("log");
    let catalog = session_catalog(fs, session_dir)?;
    let tables = table_entries(&catalog);
    let replay_from = catalog.replay_from();
    let mut numbers: Vec<u64> = (fs.list_dir(&dir)?.iter())
        .filter_map(|n| wal::segment_number(n))
        .collect();
    numbers.sort_unstable();
    let mut segments = Vec::with_capacity(numbers.len());
    for &number in &numbers {
        let path = wal::segment_path(&dir, number);
        let file = fs.open(&path, crate::fs::ReadOptions::default())?;
        let file_bytes = file.len_bytes()?;
        let mut header = [0u8; SEGMENT_HEADER_BYTES];
        // A segment whose header does not read is shown with first record 0; the chain's
        // check below reports it.
        let first_seq = match file.read_exact_at(&mut header, 0) {
            Ok(()) => SegmentHeader::decode(&header).map_or(0, |h| h.first_seq),
            Err(_) => 0,
        };
        segments.push(LogSegment {
            number,
            first_seq,
            file_bytes,
            records: 0,
        });
    }
    // Every record the segments hold, from the oldest one's first (recovery hands only those
    // the checkpoints lack; with the oldest segment starting later than those, it reports
    // the records missing).
    let oldest = segments.first().map_or(u64::MAX, |s| s.first_seq.max(1));
    let first_seq = replay_from.map_or(oldest, |r| r.min(oldest));
    let mut records = 0u64;
    let mut last_read = 0u64;
    let mut stopped = false;
    let mut handle = |record: &wal::Record| -> Result<()> {
        let segment = match segments.iter().rposition(|s| s.first_seq <= record.seq) {
            Some(i) => {
                segments[i].records += 1;
                segments[i].number
            }
            None => 0,
        };
        let kind = match decode_payload(&record.payload) {
            Ok(Payload::Batch(parts)) => LogRecordKind::Batch {
                parts: (parts.iter())
                    .map(|(id, updates)| (*id, updates.len() as u64))
                    .collect(),
            },
            Ok(Payload::Commit(c)) => LogRecordKind::Commit { table: c.id },
            Ok(Payload::Dirty(table, keys)) => LogRecordKind::Dirty {
                table,
                keys: keys.len() as u64,
            },
            Err(e) => LogRecordKind::Undecodable {
                reason: e.to_string(),
            },
        };
        records += 1;
        last_read = record.seq;
        let record = LogRecord {
            seq: record.seq,
            segment,
            payload_bytes: record.payload.len(),
            kind,
        };
        match on_record(&record) {
            ControlFlow::Continue(()) => Ok(()),
            ControlFlow::Break(()) => {
                stopped = true;
                Err(Error::NotDurable("stopped by the reader".into()))
            }
        }
    };
    let recovered = wal::recover(
        fs,
        &dir,
        catalog.log_id,
        first_seq,
        RecoveryMode::TolerateTornTail,
        &mut handle,
    );
    let (last_seq, damage) = match recovered {
        Ok(r) => (r.last_seq(), None),
        Err(_) if stopped => (last_read, None),
        Err(e @ Error::LogCorrupted { .. }) => (last_read, Some(e)),
        Err(e) => return Err(e),
    };
    Ok(LogView {
        log_id: catalog.log_id,
        tables,
        segments,
        records,
        replay_from,
        last_seq,
        damage,
    })
}

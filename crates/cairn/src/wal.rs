//! The write-ahead log: segment files of checksummed records chained to each other, written by
//! one syncer thread with group commit, with durability notices for each record's position.
//!
//! Owns: the segment and record formats (`docs/format/log.md`), [`LogOptions`], [`SyncPolicy`],
//! [`RecoveryMode`], [`Durability`], the syncer thread, and recovery (reading the log back,
//! cutting a torn tail, finding corruption). May call: `fs`, `observe` (bytes written and fsync
//! times, once per group). Must never touch: tables (the `durable` module turns records into
//! updates).
//!
//! Writers append a record to an in-memory buffer under the state lock (no I/O) and get its
//! sequence number at once. The syncer thread takes the whole buffer (every record that queued
//! while the previous group was written: one group), writes it to the current segment with one
//! `write` and fsyncs it once, then notifies every writer of the group. Lock order: `writer`
//! (the segment being written) before `state`; appenders take only `state`, so they never wait
//! for the disk unless the buffer is full.
//!
//! Bounds: a write waits only when the buffer holds [`LogOptions::buffer_bytes_max`] bytes (for
//! the group being written to finish); the buffer never exceeds that plus one record. A
//! notice comes one group after the write at most: with [`SyncPolicy::Group`], after at most
//! `window` plus the time of the group ahead of it; with [`SyncPolicy::Immediate`], after the
//! group in flight and its own (led by whoever waits first; a writer that waits leads a group
//! on its own thread, so a single writer pays one write and one fsync and no thread switch).
//!
//! A failed write or fsync *poisons* the log (the "fsyncgate" lesson: the page cache may have
//! dropped the data, and a later fsync could succeed without writing it): every pending and
//! later notice is an error, every later write is refused, and nothing is retried until the
//! session is opened again and the log recovered from disk.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fs::{FileSystem, WritableFile};

/// Segment header magic.
const SEGMENT_MAGIC: &[u8; 8] = b"CRNLOGSG";
/// The segment and record format version.
pub(crate) const LOG_VERSION: u32 = 1;
/// Bytes of a segment header.
pub(crate) const SEGMENT_HEADER_BYTES: usize = 64;
/// Bytes of a record header: CRC32C, payload length, sequence number, previous record's CRC.
pub(crate) const RECORD_HEADER_BYTES: usize = 20;
/// Largest record payload.
pub const LOG_RECORD_BYTES_MAX: usize = 1 << 30;

/// When the log's buffer is written and fsynced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyncPolicy {
    /// Every group is written and fsynced at once: by the writer that waits for it
    /// ([`Durability::wait`] leads the group itself, with no thread switch), or by the syncer as
    /// soon as anyone polls, awaits or gives a callback for a record, or drops its handle. The
    /// lowest latency; writers that arrive while an fsync runs share the next one.
    Immediate,
    /// A group waits until it holds `bytes` bytes or its first record is `window` old, then is
    /// written and fsynced: fewer fsyncs, more latency.
    Group {
        /// Longest a record waits before its group is written.
        window: Duration,
        /// A group this large is written at once.
        bytes: usize,
    },
    /// Groups are written (to the operating system) but never fsynced by the log on its own:
    /// records survive a crash of the process, not of the machine. A record becomes durable
    /// when someone asks for it: [`crate::Session::sync_log`], a checkpoint, or a question
    /// about that record's [`Durability`] ([`Durability::wait`], `.await`,
    /// [`Durability::on_durable`], [`Durability::is_durable`]), each of which syncs the log up
    /// to the record, so that none of them waits for ever.
    Never,
}

/// What recovery does with damage in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// The default: a torn or junk tail after the last good record of the last segment is cut
    /// off (it can only be a write never reported durable); damage anywhere before it (a bad
    /// record followed by good ones, a gap or a stale segment) is [`Error::LogCorrupted`].
    TolerateTornTail,
    /// Recover every record before the first damage, wherever it is, and drop the rest of the
    /// log (point-in-time recovery): the tables come back as of that record.
    ///
    /// In either mode, a log that is not the catalog's is refused with
    /// [`Error::LogCorrupted`], never recovered as an empty log: a missing catalog beside
    /// segments or checkpoints, or an oldest segment carrying another log's id.
    PointInTime,
}

/// How a session's write-ahead log works ([`crate::SessionOptions::log`]).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct LogOptions {
    /// When groups are fsynced.
    pub sync: SyncPolicy,
    /// A segment is closed and a new one started once it holds this many bytes (at least 512;
    /// the space is reserved when the segment is created).
    pub segment_bytes: u64,
    /// Most bytes of records waiting in memory; a write beyond it waits for the group being
    /// written.
    pub buffer_bytes_max: usize,
    /// What recovery does with damage.
    pub recovery: RecoveryMode,
    /// An automatic checkpoint ([`crate::Session::checkpoint`]) is taken once this many bytes of
    /// records were logged since the last one, so that the log, and the replay after a crash,
    /// stay bounded without the application's help. It runs on the writer whose write
    /// crossed the bound, after that write is applied (that write returns when the checkpoint
    /// is done; other writers wait meanwhile, as for any checkpoint). `u64::MAX`: never by
    /// size. Default 32 MiB: the most a crash leaves to replay (measured with
    /// `cairn-bench restart`, `docs/benchmarks/`; a checkpoint costs about the write of one
    /// write buffer and O(log n) file operations per table, so taking one per 32 MiB of log is
    /// cheap).
    pub checkpoint_bytes: u64,
    /// An automatic checkpoint is also taken by the first write this long after the last
    /// checkpoint (or the open), so that a slowly written log is folded in too. `None`: never
    /// by time. Default 5 minutes. An idle session takes none (nothing grows).
    pub checkpoint_interval: Option<Duration>,
}

setters!(LogOptions {
    sync: SyncPolicy,
    segment_bytes: u64,
    buffer_bytes_max: usize,
    recovery: RecoveryMode,
    checkpoint_bytes: u64,
    checkpoint_interval: Option<Duration>,
});

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            sync: SyncPolicy::Group {
                window: Duration::from_micros(200),
                bytes: 1 << 20,
            },
            segment_bytes: 64 << 20,
            buffer_bytes_max: 16 << 20,
            recovery: RecoveryMode::TolerateTornTail,
            checkpoint_bytes: 32 << 20,
            checkpoint_interval: Some(Duration::from_secs(300)),
        }
    }
}

/// Counters of a session's log since it was opened ([`crate::Session::log_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogStats {
    /// Records appended (one per write).
    pub records: u64,
    /// Groups written (one `write` each).
    pub groups: u64,
    /// Fsyncs of segments (at most one per group, plus one per segment closed or created).
    pub fsyncs: u64,
    /// Bytes written to segments (headers included).
    pub bytes: u64,
    /// The last record known durable.
    pub durable: u64,
}

/// A segment's header, as written at its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub(crate) log_id: u64,
    pub(crate) number: u64,
    /// Sequence number of the segment's first record.
    pub(crate) first_seq: u64,
    /// Bytes of the previous segment that hold its records (its valid end).
    pub(crate) prev_end: u64,
    /// CRC32C of the last record before this segment (0 for none).
    pub(crate) prev_crc: u32,
}

impl SegmentHeader {
    pub(crate) fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut out = [0u8; SEGMENT_HEADER_BYTES];
        out[0..8].copy_from_slice(SEGMENT_MAGIC);
        out[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.log_id.to_le_bytes());
        out[24..32].copy_from_slice(&self.number.to_le_bytes());
        out[32..40].copy_from_slice(&self.first_seq.to_le_bytes());
        out[40..48].copy_from_slice(&self.prev_end.to_le_bytes());
        out[48..52].copy_from_slice(&self.prev_crc.to_le_bytes());
        let crc = crc32c::crc32c(&out[..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Total decoder.
    pub(crate) fn decode(bytes: &[u8]) -> Result<SegmentHeader> {
        let bad = |d: &str| Error::corrupt("log segment header", d.to_string());
        if bytes.len() < SEGMENT_HEADER_BYTES {
            return Err(bad("shorter than a header"));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        if &bytes[0..8] != SEGMENT_MAGIC {
            return Err(bad("bad magic"));
        }
        if u32_at(60) != crc32c::crc32c(&bytes[..60]) {
            return Err(bad("checksum mismatch"));
        }
        if u32_at(8) != LOG_VERSION {
            return Err(Error::UnsupportedVersion {
                what: "log segment",
                found: u32_at(8),
                supported: LOG_VERSION,
            });
        }
        if u32_at(12) != 0 || u32_at(52) != 0 || u32_at(56) != 0 {
            return Err(bad("reserved bytes are not zero"));
        }
        Ok(SegmentHeader {
            log_id: u64_at(16),
            number: u64_at(24),
            first_seq: u64_at(32),
            prev_end: u64_at(40),
            prev_crc: u32_at(48),
        })
    }
}

/// Appends a record to `out`; returns its CRC32C (the next record's `prev`).
pub(crate) fn encode_record(out: &mut Vec<u8>, seq: u64, prev_crc: u32, payload: &[u8]) -> u32 {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&prev_crc.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// A record read back: its sequence number, CRC and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) seq: u64,
    pub(crate) crc: u32,
    pub(crate) payload: Vec<u8>,
}

/// Decodes the record at the start of `bytes` that must follow the record with `prev_crc` and
/// carry `seq`. `None` if the bytes there are not that record (torn, junk or another record).
pub(crate) fn decode_record(bytes: &[u8], seq: u64, prev_crc: u32) -> Option<(Record, usize)> {
    let header = bytes.get(..RECORD_HEADER_BYTES)?;
    let crc = u32::from_le_bytes(header[0..4].try_into().ok()?);
    let len = u32::from_le_bytes(header[4..8].try_into().ok()?) as usize;
    if len > LOG_RECORD_BYTES_MAX {
        return None;
    }
    let total = RECORD_HEADER_BYTES.checked_add(len)?;
    let body = bytes.get(4..total)?;
    if crc32c::crc32c(body) != crc {
        return None;
    }
    let found_seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let found_prev = u32::from_le_bytes(header[16..20].try_into().ok()?);
    if found_seq != seq || found_prev != prev_crc {
        return None;
    }
    Some((
        Record {
            seq,
            crc,
            payload: bytes[RECORD_HEADER_BYTES..total].to_vec(),
        },
        total,
    ))
}

/// Whether any valid record (any sequence number above `after`, any chain) starts at or after
/// `from` in `bytes`: damage followed by good records is corruption, not a torn tail.
fn valid_record_after(bytes: &[u8], from: usize, after: u64) -> Option<usize> {
    // The usual case: the zeros of a preallocated segment's unwritten end (a record has a
    // non-zero sequence number), checked at memory speed rather than position by position.
    if bytes
        .get(from..)
        .is_none_or(|rest| rest.iter().all(|&b| b == 0))
    {
        return None;
    }
    (from..bytes.len().saturating_sub(RECORD_HEADER_BYTES - 1)).find(|&at| {
        let b = &bytes[at..];
        let crc = u32::from_le_bytes(b[0..4].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")) as usize;
        let seq = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
        seq > after
            && len <= LOG_RECORD_BYTES_MAX
            && b.len() >= RECORD_HEADER_BYTES + len
            && crc32c::crc32c(&b[4..RECORD_HEADER_BYTES + len]) == crc
    })
}

/// Bytes a segment is read in.
const SEGMENT_READ_CHUNK: usize = 1 << 20;

/// The bytes of the segment at `path` up to the end of its last 1 MiB chunk holding a non-zero
/// byte (its first chunk always): the zeros of a preallocated segment's unwritten end are read
/// but not kept. Recovery reads a segment the same either way: the records end where the
/// zeros start, and a zero tail is no damage. Cost: one sequential read of the file; memory:
/// what is kept plus one chunk.
fn read_segment(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>> {
    let file = fs.open(path, crate::fs::ReadOptions::default())?;
    let len = file.len_bytes()?;
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; SEGMENT_READ_CHUNK];
    let mut offset = 0u64;
    // Zero chunks read since the last kept one: kept only if a non-zero chunk follows.
    let mut zeros = 0usize;
    while offset < len {
        let n = (len - offset).min(SEGMENT_READ_CHUNK as u64) as usize;
        file.read_exact_at(&mut chunk[..n], offset)?;
        if offset > 0 && chunk[..n].iter().all(|&b| b == 0) {
            zeros += n;
        } else {
            kept.resize(kept.len() + zeros, 0);
            zeros = 0;
            kept.extend_from_slice(&chunk[..n]);
        }
        offset += n as u64;
    }
    Ok(kept)
}

/// Reads and decodes the header of the segment at `path` (64 bytes, not the whole file).
fn read_header(fs: &dyn FileSystem, path: &Path) -> Result<SegmentHeader> {
    let file = fs.open(path, crate::fs::ReadOptions::default())?;
    let mut bytes = [0u8; SEGMENT_HEADER_BYTES];
    file.read_exact_at(&mut bytes, 0)?;
    SegmentHeader::decode(&bytes).map_err(|e| e.in_file(path))
}

/// The path of segment `number` in `dir`.
pub(crate) fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:016}.seg"))
}

/// The segment number a file name names, if it is a segment's.
pub(crate) fn segment_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".seg")?;
    (digits.len() == 16 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// What recovery found: the last good record, and where the next segment starts.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// The last good record's sequence number and CRC (0 and 0 for none).
    pub(crate) last: (u64, u32),
    /// The last segment kept and its valid end (none for an empty log directory).
    pub(crate) last_segment: Option<(u64, u64)>,
    /// The last segment kept holds records the checkpoints lack (from `first_seq` on): the
    /// open copies it before building on it ([`Log::open`]).
    pub(crate) last_uncovered: bool,
    /// Segments to remove (after a point-in-time recovery stopped before them).
    pub(crate) dropped: Vec<u64>,
}

impl Recovered {
    pub(crate) fn last_seq(&self) -> u64 {
        self.last.0
    }
    pub(crate) fn last_crc(&self) -> u32 {
        self.last.1
    }
}

/// Reads every segment of the log in `dir` (whose id is `log_id`) and hands each good record
/// from sequence number `first_seq` on to `on_record`, in order (earlier segments may have been
/// removed by a checkpoint; the first segment kept must start at or before it). Damage is
/// handled as `mode` says; with [`RecoveryMode::TolerateTornTail`], damage before the tail is an
/// error after the records before it were handed over (the caller discards what it built).
/// Cost: reads the whole log once; memory: one segment.
pub(crate) fn recover(
    fs: &dyn FileSystem,
    dir: &Path,
    log_id: u64,
    first_seq: u64,
    mode: RecoveryMode,
    on_record: &mut dyn FnMut(&Record) -> Result<()>,
) -> Result<Recovered> {
    let mut numbers: Vec<u64> = fs
        .list_dir(dir)?
        .iter()
        .filter_map(|n| segment_number(n))
        .collect();
    numbers.sort_unstable();
    let mut out = Recovered {
        last: (0, 0),
        last_segment: None,
        last_uncovered: false,
        dropped: Vec::new(),
    };
    // A segment whose creation a crash interrupted (its header is written and fsynced before
    // anything else) holds nothing: it is not the last segment.
    // Its bytes are kept for the loop below (a segment is preallocated: read once, not twice).
    let mut last_bytes = None;
    if let Some(&last) = numbers.last() {
        let bytes = read_segment(fs, &segment_path(dir, last))?;
        if bytes.len() <= SEGMENT_HEADER_BYTES && SegmentHeader::decode(&bytes).is_err() {
            out.dropped.push(last);
            numbers.pop();
        } else {
            last_bytes = Some(bytes);
        }
    }
    // The chain as it stands after the records read so far.
    let mut expect: Option<(u64, u32)> = None; // (next seq, prev crc)
    let mut prev: Option<(u64, u64, u64)> = None; // (number, bytes parsed, file size)
    for (i, &number) in numbers.iter().enumerate() {
        let path = segment_path(dir, number);
        let is_last = i + 1 == numbers.len();
        let bytes = match last_bytes.take().filter(|_| is_last) {
            Some(bytes) => bytes,
            None => read_segment(fs, &path)?,
        };
        let corrupted = |offset: u64, detail: String| Error::LogCorrupted {
            path: path.clone(),
            offset,
            detail,
        };
        let header = match SegmentHeader::decode(&bytes) {
            Ok(h) => h,
            Err(e) => {
                let e = corrupted(0, e.to_string());
                if mode == RecoveryMode::PointInTime {
                    out.dropped.extend(&numbers[i..]);
                    break;
                }
                return Err(e);
            }
        };
        if header.log_id != log_id && prev.is_none() {
            // The oldest segment is another log's: the catalog (or every segment) is foreign.
            // Not damage to cut at: refused in every mode, as recovering none of the records
            // would lose them silently.
            return Err(corrupted(
                0,
                format!(
                    "the segment belongs to log {:016x}, the catalog to log {log_id:016x}",
                    header.log_id
                ),
            ));
        }
        let mut problem = None;
        if header.log_id != log_id {
            problem = Some("the segment belongs to another log".to_string());
        } else if header.number != number {
            problem = Some(format!("the header names segment {}", header.number));
        } else if let Some((p_number, p_parsed, _)) = prev {
            let (next_seq, prev_crc) = expect.unwrap_or((1, 0));
            if p_number + 1 != number {
                problem = Some(format!(
                    "segments {} to {} are missing",
                    p_number + 1,
                    number - 1
                ));
            } else if header.first_seq != next_seq || header.prev_crc != prev_crc {
                problem = Some(format!(
                    "starts at record {} after a record with CRC {:08x}; the log has record {} \
                     next, after {:08x} (a stale or reordered segment)",
                    header.first_seq, header.prev_crc, next_seq, prev_crc
                ));
            } else if header.prev_end != p_parsed {
                problem = Some(format!(
                    "says segment {p_number} ends at byte {}, but its records end at {p_parsed}",
                    header.prev_end
                ));
            }
        } else if header.first_seq > first_seq {
            // Records the checkpoints need are gone: under `PointInTime` the damage is at the
            // very start, so no record is recovered.
            problem = Some(format!(
                "the oldest segment starts at record {}, the checkpoints need {first_seq}",
                header.first_seq
            ));
        }
        if let Some(detail) = problem {
            // A problem with the previous segment's end is that segment's damage.
            if mode == RecoveryMode::PointInTime {
                out.dropped.extend(&numbers[i..]);
                break;
            }
            return Err(corrupted(0, detail));
        }
        let (mut seq, mut prev_crc) = (header.first_seq, header.prev_crc);
        // The chain goes on from the header even if the segment holds no record (the one
        // before it may be gone, removed by a checkpoint).
        out.last = (header.first_seq.saturating_sub(1), header.prev_crc);
        let mut at = SEGMENT_HEADER_BYTES;
        out.last_uncovered = false;
        while at < bytes.len() {
            match decode_record(&bytes[at..], seq, prev_crc) {
                Some((record, len)) => {
                    at += len;
                    seq += 1;
                    prev_crc = record.crc;
                    if record.seq >= first_seq {
                        out.last_uncovered = true;
                        on_record(&record)?;
                    }
                    out.last = (record.seq, record.crc);
                }
                None => break,
            }
        }
        if at < bytes.len() {
            // Damage at `at`: a torn tail only if it is the last segment and no good record
            // follows.
            let damaged_mid = !is_last || valid_record_after(&bytes, at + 1, seq - 1).is_some();
            if damaged_mid {
                if mode == RecoveryMode::PointInTime {
                    out.last_segment = Some((number, at as u64));
                    out.dropped.extend(&numbers[i + 1..]);
                    break;
                }
                if !is_last {
                    // The next segment's header says where this one's records end.
                    let next = segment_path(dir, numbers[i + 1]);
                    let end = read_header(fs, &next).ok().map(|h| h.prev_end);
                    if end == Some(at as u64) {
                        // Junk past the end the next segment recorded: the torn tail of an
                        // earlier incarnation, cut off then.
                        expect = Some((seq, prev_crc));
                        prev = Some((number, at as u64, bytes.len() as u64));
                        out.last_segment = Some((number, at as u64));
                        continue;
                    }
                }
                return Err(corrupted(
                    at as u64,
                    format!("record {seq} is damaged and good records follow it"),
                ));
            }
        }
        expect = Some((seq, prev_crc));
        prev = Some((number, at as u64, bytes.len() as u64));
        out.last_segment = Some((number, at as u64));
    }
    Ok(out)
}

/// The state every writer and the syncer share.
struct State {
    /// Encoded records waiting for the syncer.
    buffer: Vec<u8>,
    /// When the oldest record in `buffer` was appended.
    buffer_since: Option<Instant>,
    /// Sequence number of the next record.
    next_seq: u64,
    /// CRC32C of the last record appended.
    last_crc: u32,
    /// Every record up to this one is durable.
    durable_seq: u64,
    /// Every record up to this one has been written to the segment (not necessarily synced).
    written_seq: u64,
    /// A sync was asked for every record up to this one (by `sync_log` or a checkpoint).
    sync_requested: u64,
    /// Why the log refuses everything (a failed write or fsync), once it does.
    failed: Option<String>,
    /// The session is closing: the syncer finishes what is buffered and stops.
    closing: bool,
    /// The syncer has stopped: no record after `durable_seq` will become durable.
    stopped: bool,
    /// Under [`SyncPolicy::Immediate`]: a record nobody leads was asked about; the syncer
    /// writes the buffer.
    flush_requested: bool,
    wakers: Vec<(u64, Waker)>,
    callbacks: Vec<(u64, Callback)>,
    stats: LogStats,
}

type Callback = Box<dyn FnOnce(Result<()>) + Send>;

/// The segment being written; held by whoever writes a group (the syncer, or a flush).
struct Writer {
    file: Box<dyn WritableFile>,
    number: u64,
    bytes: u64,
    /// The last record written to it (sequence number, CRC).
    last: (u64, u32),
}

pub(crate) struct Shared {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    log_id: u64,
    options: LogOptions,
    state: Mutex<State>,
    /// Signalled for waiting writers and waiters: a group finished (the buffer has room, notices
    /// may be due), or the log closed or failed.
    changed: Condvar,
    /// Signalled for the syncer thread alone: records appended (under the policies whose syncer
    /// writes them), a flush, sync or close asked for. Kept apart from `changed` so that a
    /// group led by a writer does not wake the syncer for nothing (two thread switches per
    /// group on a one-writer workload).
    work: Condvar,
    writer: Mutex<Writer>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("dir", &self.dir).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An open log: appends, durability notices, the syncer thread.
#[derive(Debug)]
pub(crate) struct Log {
    shared: Arc<Shared>,
    syncer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Log {
    /// Opens the log in `dir` after recovery: removes segments recovery dropped, replaces the
    /// last one kept by a durable copy when it holds records the checkpoints lack
    /// ([`copy_segment`]), starts a new segment after it (its header records where that one's
    /// good records end), or in its place when it holds no record, and starts the syncer.
    pub(crate) fn open(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        log_id: u64,
        options: LogOptions,
        recovered: &Recovered,
        next_seq_min: u64,
    ) -> Result<Log> {
        for &number in &recovered.dropped {
            fs.remove_file(&segment_path(dir, number))?;
        }
        // A copy an earlier open did not finish.
        for name in fs.list_dir(dir)? {
            if name
                .strip_suffix(COPY_SUFFIX)
                .is_some_and(|n| segment_number(&format!("{n}.seg")).is_some())
            {
                fs.remove_file(&dir.join(name))?;
            }
        }
        if let Some((n, end)) = recovered.last_segment {
            if recovered.last_uncovered && end > SEGMENT_HEADER_BYTES as u64 {
                copy_segment(&*fs, dir, n, end)?;
            }
        }
        let (number, prev_end) = match recovered.last_segment {
            // A last segment that holds no record is started again in its place, never built
            // on: its header may not be on disk even though it reads back whole (the open or
            // roll that created it failed at its fsync, and once an fsync failed a later one
            // proves nothing), and a segment chained after it would leave, if the power then
            // failed, a log whose middle segment has no header. Its own header says where the
            // segment before it ends.
            Some((n, end)) if end == SEGMENT_HEADER_BYTES as u64 => {
                (n, read_header(&*fs, &segment_path(dir, n))?.prev_end)
            }
            Some((n, end)) => (n + 1, end),
            None => (recovered.dropped.first().copied().unwrap_or(1), 0),
        };
        // After a point-in-time recovery lost records, numbering still goes on after every
        // checkpoint (a replay skips records numbered up to a table's checkpoint).
        let last_seq = recovered.last_seq().max(next_seq_min.saturating_sub(1));
        let last_crc = recovered.last_crc();
        let header = SegmentHeader {
            log_id,
            number,
            first_seq: last_seq + 1,
            prev_end,
            prev_crc: last_crc,
        };
        let writer = start_segment(&*fs, dir, header, options.segment_bytes)?;
        let shared = Arc::new(Shared {
            fs,
            dir: dir.to_path_buf(),
            log_id,
            options,
            state: Mutex::new(State {
                buffer: Vec::new(),
                buffer_since: None,
                next_seq: last_seq + 1,
                last_crc,
                durable_seq: last_seq,
                written_seq: last_seq,
                sync_requested: 0,
                failed: None,
                closing: false,
                stopped: false,
                flush_requested: false,
                wakers: Vec::new(),
                callbacks: Vec::new(),
                stats: LogStats::default(),
            }),
            changed: Condvar::new(),
            work: Condvar::new(),
            writer: Mutex::new(Writer {
                file: writer,
                number,
                bytes: SEGMENT_HEADER_BYTES as u64,
                last: (last_seq, last_crc),
            }),
        });
        let for_thread = shared.clone();
        let syncer = std::thread::Builder::new()
            .name("cairn-log-syncer".into())
            .spawn(move || for_thread.run_syncer())
            .map_err(|e| Error::io("spawn", dir, e))?;
        Ok(Log {
            shared,
            syncer: Mutex::new(Some(syncer)),
        })
    }

    /// Appends a record holding `payload`; returns its sequence number. No I/O: waits only
    /// while the buffer is full. Errors: [`Error::LogFailed`] once the log failed or closed.
    pub(crate) fn append(&self, payload: &[u8]) -> Result<u64> {
        if payload.len() > LOG_RECORD_BYTES_MAX {
            return Err(Error::InvalidUpdate(format!(
                "a batch of {} bytes exceeds the log's record limit of {LOG_RECORD_BYTES_MAX}",
                payload.len()
            )));
        }
        let s = &self.shared;
        let mut state = lock(&s.state);
        loop {
            if let Some(why) = &state.failed {
                return Err(Error::LogFailed(why.clone()));
            }
            if state.closing {
                return Err(Error::LogFailed("the session is closed".into()));
            }
            if state.buffer.is_empty() || state.buffer.len() < s.options.buffer_bytes_max {
                break;
            }
            // The buffer is full: wait for the group being written. Under `Immediate` no group
            // may be (only a waiter or a question starts one), so this writer asks the syncer
            // for one; without it, writers that never wait for their records would block here
            // for ever once they filled the buffer.
            if s.options.sync == SyncPolicy::Immediate {
                state.flush_requested = true;
                s.work.notify_one();
            }
            state = s.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        let seq = state.next_seq;
        let prev = state.last_crc;
        state.last_crc = encode_record(&mut state.buffer, seq, prev, payload);
        state.next_seq += 1;
        state.stats.records += 1;
        state.buffer_since.get_or_insert_with(Instant::now);
        drop(state);
        // Under `Immediate`, the syncer is woken only by a record someone asks about without
        // leading it (`Durability::request_flush`): a writer that waits leads its own group,
        // with no thread switch.
        if s.options.sync != SyncPolicy::Immediate {
            s.work.notify_one();
        }
        Ok(seq)
    }

    /// A handle on the durability of record `seq`.
    pub(crate) fn durability(&self, seq: u64) -> Durability {
        Durability {
            seq,
            shared: self.shared.clone(),
            released: false,
        }
    }

    /// The log's counters.
    pub(crate) fn stats(&self) -> LogStats {
        let state = lock(&self.shared.state);
        LogStats {
            durable: state.durable_seq,
            ..state.stats
        }
    }

    /// The sequence number of the last record appended.
    pub(crate) fn last_seq(&self) -> u64 {
        lock(&self.shared.state).next_seq - 1
    }

    /// Asks the syncer to write and fsync every record appended so far (whatever the policy),
    /// and waits for it. Errors: [`Error::LogFailed`].
    pub(crate) fn sync(&self) -> Result<()> {
        let s = &self.shared;
        let target = {
            let mut state = lock(&s.state);
            let target = state.next_seq - 1;
            state.sync_requested = state.sync_requested.max(target);
            target
        };
        s.work.notify_one();
        self.durability(target).wait()
    }

    /// Removes, oldest first, every segment whose records all have sequence numbers up to
    /// `covered` (the checkpoints hold them). The one being written goes too when all its
    /// records are covered: a new segment is started first (one fsync, one file created).
    /// Errors: I/O.
    pub(crate) fn remove_covered(&self, covered: u64) -> Result<()> {
        let s = &self.shared;
        let current = {
            let mut writer = lock(&s.writer);
            // Every record of the current segment is covered (a checkpoint with no write
            // after it, as at a clean close): the next records go to a new segment, so that
            // this one can go too and the next open reads no covered record.
            if writer.last.0 <= covered && writer.bytes > SEGMENT_HEADER_BYTES as u64 {
                s.roll_segment(&mut writer)?;
            }
            writer.number
        };
        // A waiter that found the writer busy just now waits for a notice.
        s.changed.notify_all();
        let mut numbers: Vec<u64> =
            s.fs.list_dir(&s.dir)?
                .iter()
                .filter_map(|n| segment_number(n))
                .filter(|&n| n < current)
                .collect();
        numbers.sort_unstable();
        numbers.push(current);
        let mut removed = false;
        for pair in numbers.windows(2) {
            // Segment pair[0] ends where pair[1] starts.
            let next = read_header(&*s.fs, &segment_path(&s.dir, pair[1]))?;
            if next.first_seq > covered.saturating_add(1) {
                break;
            }
            s.fs.remove_file(&segment_path(&s.dir, pair[0]))?;
            removed = true;
        }
        if removed {
            s.fs.sync_dir(&s.dir)?;
        }
        Ok(())
    }

    /// Stops the syncer after it wrote what is buffered (fsynced, unless the policy is
    /// `Never`), and cuts the current segment's preallocated space after its records; later
    /// appends fail. Idempotent.
    pub(crate) fn close(&self) {
        {
            let mut state = lock(&self.shared.state);
            state.closing = true;
        }
        self.shared.work.notify_one();
        self.shared.changed.notify_all();
        if let Some(handle) = lock(&self.syncer).take() {
            let _ = handle.join();
            // The segment being written keeps only its records: otherwise the next open reads
            // its preallocated zeros (64 MiB by default, about 150 ms of a 100M-entry table's
            // clean restart, measured) to find where the records end. Cutting them changes no
            // record; if the cut is lost, or fails (ignored: the close cannot fail), the zeros
            // are read as before.
            if lock(&self.shared.state).failed.is_none() {
                let _ = lock(&self.shared.writer).file.end_at_written();
            }
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.close();
    }
}

/// The suffix of a segment's copy while it is written ([`copy_segment`]).
const COPY_SUFFIX: &str = ".copy";

/// Replaces segment `number` in `dir` by a durable copy of its first `end` bytes (its header
/// and records), in a new file renamed over it.
///
/// Why: records of the last segment that a replay reads back may not be on disk. The session
/// that wrote them may have been killed before their fsync (they are in the page cache only),
/// or their fsync failed, and then, as on Linux, the dirty pages may have been dropped from the
/// write-back queue while still reading back whole, so that an fsync of the same file now would
/// report success without writing them. A session that chained new records after them (and the
/// open's own checkpoint logs some) would leave, if the power then failed, a log with a hole
/// before durable records: corrupted, or cut before acknowledged writes. A new file's pages are
/// written by its own fsync whatever happened to the old one's. Cost: one sequential read
/// (from the page cache: recovery just read it) and one write of at most a segment, and two
/// fsyncs (`fs::copy_prefix`); taken only when the segment holds records the checkpoints lack, so after a crash,
/// never after a clean close. Memory: one chunk.
fn copy_segment(fs: &dyn FileSystem, dir: &Path, number: u64, end: u64) -> Result<()> {
    let path = segment_path(dir, number);
    let copy = dir.join(format!("{number:016}{COPY_SUFFIX}"));
    crate::fs::copy_prefix(fs, &path, &copy, Some(end), true)?;
    fs.rename(&copy, &path)?;
    fs.sync_dir(dir)
}

/// Creates segment `number` and writes and fsyncs its header, then fsyncs the directory.
fn start_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    header: SegmentHeader,
    segment_bytes: u64,
) -> Result<Box<dyn WritableFile>> {
    let path = segment_path(dir, header.number);
    if fs.exists(&path)? {
        fs.remove_file(&path)?;
    }
    let mut file = fs.create(&path)?;
    file.append(&header.encode())?;
    // Zero-filled space for the segment's records, so that their fsyncs need not change the
    // file's size (fdatasync then writes only data). Zeros are never a record.
    file.preallocate(segment_bytes)?;
    file.sync()?;
    fs.sync_dir(dir)?;
    Ok(file)
}

impl Shared {
    /// The syncer thread: waits for a group to be ready, writes and fsyncs it, notifies. When
    /// it stops (closed or failed), every notice still pending gets an error.
    fn run_syncer(&self) {
        self.sync_groups();
        let (wakers, callbacks) = {
            let mut state = lock(&self.state);
            state.stopped = true;
            let wakers: Vec<Waker> = std::mem::take(&mut state.wakers)
                .into_iter()
                .map(|w| w.1)
                .collect();
            let callbacks: Vec<Callback> = std::mem::take(&mut state.callbacks)
                .into_iter()
                .map(|c| c.1)
                .collect();
            (wakers, callbacks)
        };
        self.changed.notify_all();
        wakers.into_iter().for_each(Waker::wake);
        for callback in callbacks {
            callback(Err(Error::LogFailed(
                "the log closed before the write was durable".into(),
            )));
        }
    }

    fn sync_groups(&self) {
        loop {
            let sync = {
                let mut state = lock(&self.state);
                loop {
                    if state.failed.is_some() {
                        return;
                    }
                    let pending =
                        state.next_seq - 1 > state.written_seq || !state.buffer.is_empty();
                    let unsynced = state.durable_seq < state.written_seq;
                    let asked = state.sync_requested > state.durable_seq;
                    if state.closing && !pending {
                        if unsynced && self.options.sync != SyncPolicy::Never {
                            break true;
                        }
                        return;
                    }
                    if asked && (pending || unsynced) {
                        break true;
                    }
                    if pending {
                        match self.options.sync {
                            // A writer that waits leads its group itself; the syncer writes the
                            // groups of records someone else asked about (a future, a callback,
                            // a poll, a dropped handle).
                            SyncPolicy::Immediate if state.flush_requested || state.closing => {
                                break true
                            }
                            SyncPolicy::Immediate => {}
                            SyncPolicy::Never => break false,
                            SyncPolicy::Group { window, bytes } => {
                                let age = state.buffer_since.map_or(window, |t| t.elapsed());
                                if state.closing || state.buffer.len() >= bytes || age >= window {
                                    break true;
                                }
                                let wait = window - age;
                                state = self
                                    .work
                                    .wait_timeout(state, wait)
                                    .unwrap_or_else(|p| p.into_inner())
                                    .0;
                                continue;
                            }
                        }
                    }
                    if !pending {
                        // A flush asked for a record the group just written held (its handle
                        // was dropped or polled while the group was being written): done. Left
                        // set, the flag would hide the next request, whose asker sets it only
                        // when it is clear, and the syncer would sleep with records pending.
                        state.flush_requested = false;
                    }
                    state = self.work.wait(state).unwrap_or_else(|p| p.into_inner());
                }
            };
            if self.write_group(sync).is_err() {
                return;
            }
        }
    }

    /// Writes every buffered record to the segment with one write (rolling to a new segment
    /// first if this one is full), fsyncs it if `sync`, and notifies. Returns the last record
    /// written. A failure poisons the log.
    fn write_group(&self, sync: bool) -> Result<u64> {
        let mut writer = lock(&self.writer);
        let (group, last_seq, last_crc, sync) = {
            let mut state = lock(&self.state);
            if let Some(why) = &state.failed {
                return Err(Error::LogFailed(why.clone()));
            }
            let group = std::mem::take(&mut state.buffer);
            state.buffer_since = None;
            state.flush_requested = false;
            let last_seq = state.next_seq - 1;
            // Another leader may have made everything durable meanwhile: no empty fsync.
            let sync = sync && last_seq > state.durable_seq;
            (group, last_seq, state.last_crc, sync)
        };
        // Writers blocked on a full buffer may go on.
        self.changed.notify_all();
        let mut io = (0u64, 0u64); // (fsyncs, bytes)
        let result = self.write_locked(&mut writer, &group, sync, last_seq, last_crc, &mut io);
        let mut state = lock(&self.state);
        state.stats.fsyncs += io.0;
        state.stats.bytes += io.1;
        crate::observe::bytes_written(io.1);
        state.stats.groups += u64::from(!group.is_empty());
        let ready = match &result {
            Ok(()) => {
                state.written_seq = state.written_seq.max(last_seq);
                if sync {
                    state.durable_seq = state.durable_seq.max(last_seq);
                }
                let durable = state.durable_seq;
                let wakers: Vec<Waker> = take_ready(&mut state.wakers, durable);
                let callbacks: Vec<Callback> = take_ready(&mut state.callbacks, durable);
                (wakers, callbacks, None)
            }
            Err(e) => {
                let why = format!("writing or syncing the log failed: {}", e.with_causes());
                state.failed = Some(why.clone());
                let wakers = std::mem::take(&mut state.wakers)
                    .into_iter()
                    .map(|w| w.1)
                    .collect();
                let callbacks = std::mem::take(&mut state.callbacks)
                    .into_iter()
                    .map(|c| c.1)
                    .collect();
                (wakers, callbacks, Some(why))
            }
        };
        drop(state);
        drop(writer);
        self.changed.notify_all();
        let (wakers, callbacks, failure) = ready;
        if failure.is_some() {
            // The syncer stops on a failed log.
            self.work.notify_one();
        }
        wakers.into_iter().for_each(Waker::wake);
        for callback in callbacks {
            callback(match &failure {
                Some(why) => Err(Error::LogFailed(why.clone())),
                None => Ok(()),
            });
        }
        result.map(|()| last_seq)
    }

    /// Ends the segment `writer` writes (made durable first, since the next one's header names
    /// its end) and starts the next one. Cost: two fsyncs and a file created.
    fn roll_segment(&self, writer: &mut Writer) -> Result<()> {
        writer.file.sync()?;
        let number = writer.number + 1;
        let header = SegmentHeader {
            log_id: self.log_id,
            number,
            first_seq: writer.last.0 + 1,
            prev_end: writer.bytes,
            prev_crc: writer.last.1,
        };
        let file = start_segment(&*self.fs, &self.dir, header, self.options.segment_bytes)?;
        *writer = Writer {
            file,
            number,
            bytes: SEGMENT_HEADER_BYTES as u64,
            last: writer.last,
        };
        Ok(())
    }

    fn write_locked(
        &self,
        writer: &mut Writer,
        group: &[u8],
        sync: bool,
        last_seq: u64,
        last_crc: u32,
        io: &mut (u64, u64),
    ) -> Result<()> {
        if !group.is_empty() {
            if writer.bytes >= self.options.segment_bytes {
                io.0 += 2; // this one, and the new segment's header
                io.1 += SEGMENT_HEADER_BYTES as u64;
                self.roll_segment(writer)?;
            }
            writer.file.append(group)?;
            io.1 += group.len() as u64;
            writer.bytes += group.len() as u64;
            writer.last = (last_seq, last_crc);
        }
        if sync {
            let timer = crate::observe::Timer::start();
            writer.file.sync()?;
            crate::observe::log_fsync(timer);
            io.0 += 1;
        }
        Ok(())
    }
}

fn take_ready<T>(list: &mut Vec<(u64, T)>, durable: u64) -> Vec<T> {
    let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(list)
        .into_iter()
        .partition(|(seq, _)| *seq <= durable);
    *list = waiting;
    ready.into_iter().map(|(_, t)| t).collect()
}

/// The durability of one write: its position in the log, and ways to learn when it is on disk.
///
/// Wait for it ([`Durability::wait`]), poll it ([`Durability::is_durable`]), `.await` it (it is
/// a [`Future`]; no runtime needed), or give it a callback ([`Durability::on_durable`]). Each
/// reports [`Error::LogFailed`] if the log failed before the write was durable: a write is
/// never reported durable after a failed fsync.
#[derive(Clone)]
pub struct Durability {
    seq: u64,
    shared: Arc<Shared>,
    /// Set by [`Durability::release`]: dropping the handle asks nothing of the log.
    released: bool,
}

impl std::fmt::Debug for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durability")
            .field("position", &self.seq)
            .finish()
    }
}

impl Durability {
    /// The write's position in the log (its record's sequence number; later writes have larger
    /// ones, and each batch is one record).
    pub fn position(&self) -> u64 {
        self.seq
    }

    /// Lets go of the handle without asking the log to write its record: for a record that a
    /// later write's handle covers (the log is in order, so the later write durable means this
    /// one is), when the caller waits on, or drops, that one instead. Under
    /// [`SyncPolicy::Immediate`] dropping a handle asks the syncer to write the buffer at once;
    /// a layer that logs several records for one operation (the verifiable ledger) would
    /// otherwise start an fsync for each. Under the other policies it is the same as dropping.
    pub fn release(mut self) {
        self.released = true;
    }

    /// Whether the write is durable now. Errors: [`Error::LogFailed`].
    pub fn is_durable(&self) -> Result<bool> {
        let mut state = lock(&self.shared.state);
        if state.durable_seq >= self.seq {
            return Ok(true);
        }
        match &state.failed {
            Some(why) => Err(Error::LogFailed(why.clone())),
            None => {
                self.request_flush(&mut state);
                Ok(false)
            }
        }
    }

    /// Under [`SyncPolicy::Immediate`], asks the syncer to write the buffer (this record is not
    /// being led by a waiter); under [`SyncPolicy::Never`], asks it to write and fsync the log
    /// up to this record (nothing else ever would). Called with the state locked; no-op under
    /// `Group`, whose syncer needs no asking.
    fn request_flush(&self, state: &mut State) {
        if state.durable_seq >= self.seq {
            return;
        }
        match self.shared.options.sync {
            SyncPolicy::Immediate if !state.flush_requested => {
                state.flush_requested = true;
                self.shared.work.notify_one();
            }
            SyncPolicy::Never if state.sync_requested < self.seq => {
                state.sync_requested = self.seq;
                self.shared.work.notify_one();
            }
            _ => {}
        }
    }

    /// Blocks until the write is durable (under [`SyncPolicy::Never`], syncs the log up to it
    /// first). Errors: [`Error::LogFailed`] (also when the session closes first).
    ///
    /// With [`SyncPolicy::Immediate`], a waiter that finds no group being written writes and
    /// fsyncs the buffer itself (every record in it, its own included: still one group), which
    /// saves the two thread switches of handing the work to the syncer.
    pub fn wait(&self) -> Result<()> {
        let shared = &self.shared;
        let mut state = lock(&shared.state);
        loop {
            if state.durable_seq >= self.seq {
                return Ok(());
            }
            if let Some(why) = &state.failed {
                return Err(Error::LogFailed(why.clone()));
            }
            if state.stopped {
                return Err(Error::LogFailed(
                    "the log closed before the write was durable".into(),
                ));
            }
            if shared.options.sync == SyncPolicy::Immediate {
                // Lead a group if none is being written (try_lock: the writer lock comes
                // before the state lock, so this must not block while holding it).
                if let Ok(writer) = shared.writer.try_lock() {
                    drop(writer);
                    drop(state);
                    let _ = shared.write_group(true);
                    state = lock(&shared.state);
                    continue;
                }
                // A group is being written; its leader notifies once it let go of the writer.
            }
            if shared.options.sync == SyncPolicy::Never {
                self.request_flush(&mut state);
            }
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Calls `f` once the write is durable (with `Ok`), or the log failed (with the error): at
    /// once, on this thread, if that is already known; otherwise on the log's syncer thread,
    /// which `f` must not block for long.
    pub fn on_durable(&self, f: impl FnOnce(Result<()>) + Send + 'static) {
        let mut state = lock(&self.shared.state);
        let known = if state.durable_seq >= self.seq {
            Some(Ok(()))
        } else if let Some(why) = &state.failed {
            Some(Err(Error::LogFailed(why.clone())))
        } else if state.stopped {
            Some(Err(Error::LogFailed(
                "the log closed before the write was durable".into(),
            )))
        } else {
            None
        };
        match known {
            Some(result) => {
                drop(state);
                f(result);
            }
            None => {
                state.callbacks.push((self.seq, Box::new(f)));
                self.request_flush(&mut state);
            }
        }
    }
}

impl Drop for Durability {
    /// A handle dropped before its write was durable (nobody will lead it): the syncer writes
    /// it, as it would have without being asked under the other policies. Not for a handle
    /// let go of by [`Durability::release`].
    fn drop(&mut self) {
        if self.shared.options.sync == SyncPolicy::Immediate && !self.released {
            let mut state = lock(&self.shared.state);
            if state.failed.is_none() && !state.stopped {
                self.request_flush(&mut state);
            }
        }
    }
}

impl Future for Durability {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let mut state = lock(&self.shared.state);
        if state.durable_seq >= self.seq {
            return Poll::Ready(Ok(()));
        }
        if let Some(why) = &state.failed {
            return Poll::Ready(Err(Error::LogFailed(why.clone())));
        }
        if state.stopped {
            return Poll::Ready(Err(Error::LogFailed(
                "the log closed before the write was durable".into(),
            )));
        }
        state.wakers.push((self.seq, cx.waker().clone()));
        self.request_flush(&mut state);
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_chain_and_decode() {
        let mut out = Vec::new();
        let a = encode_record(&mut out, 1, 0, b"first");
        let len_a = out.len();
        let b = encode_record(&mut out, 2, a, b"second");
        let (r, n) = decode_record(&out, 1, 0).unwrap();
        assert_eq!(
            (r.seq, r.crc, &r.payload[..], n),
            (1, a, &b"first"[..], len_a)
        );
        let (r, _) = decode_record(&out[len_a..], 2, a).unwrap();
        assert_eq!((r.crc, &r.payload[..]), (b, &b"second"[..]));
        // Out of order or off the chain: not that record.
        assert!(decode_record(&out[len_a..], 2, 0).is_none());
        assert!(decode_record(&out[len_a..], 3, a).is_none());
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 1;
            let first = decode_record(&bad, 1, 0);
            let second = first.and_then(|(_, n)| decode_record(&bad[n..], 2, a));
            assert!(second.is_none(), "a flipped bit at {i} went unnoticed");
        }
    }

    /// A segment as the log writes it: its header and two chained batch records.
    #[test]
    fn golden_segment() {
        let header = SegmentHeader {
            log_id: 0x0123_4567_89ab_cdef,
            number: 2,
            first_seq: 41,
            prev_end: 8192,
            prev_crc: 0x1234_5678,
        };
        let mut bytes = header.encode().to_vec();
        let a: &[(&[u8], crate::Update<'_>)] = &[
            (b"utxo#1", crate::Update::Insert(b"addr1")),
            (b"utxo#0", crate::Update::Delete),
        ];
        let b: &[(&[u8], crate::Update<'_>)] = &[
            (b"addr1", crate::Update::Upsert(&[5, 0, 0, 0, 0, 0, 0, 0])),
            (b"big", crate::Update::InsertWithBlob(b"v", b"blob")),
        ];
        let first = crate::durable::encode_batch(&[(0, a), (1, b)]);
        let crc = encode_record(&mut bytes, 41, 0x1234_5678, &first);
        let second = crate::durable::encode_batch(&[(1, &b[..1])]);
        encode_record(&mut bytes, 42, crc, &second);
        let golden = crate::golden::check_golden("log-segment-v1.bin", &bytes);
        assert_eq!(SegmentHeader::decode(&golden).unwrap(), header);
        let (r, n) = decode_record(&golden[SEGMENT_HEADER_BYTES..], 41, 0x1234_5678).unwrap();
        assert_eq!(r.payload, first);
        let (r, _) = decode_record(&golden[SEGMENT_HEADER_BYTES + n..], 42, crc).unwrap();
        assert_eq!(r.payload, second);
    }

    #[test]
    fn segment_headers_round_trip_and_reject_damage() {
        let h = SegmentHeader {
            log_id: 7,
            number: 3,
            first_seq: 100,
            prev_end: 4096,
            prev_crc: 0xdead_beef,
        };
        let bytes = h.encode();
        assert_eq!(SegmentHeader::decode(&bytes).unwrap(), h);
        for i in 0..bytes.len() {
            let mut bad = bytes;
            bad[i] ^= 0x20;
            assert!(SegmentHeader::decode(&bad).is_err(), "byte {i}");
        }
        assert!(SegmentHeader::decode(&bytes[..63]).is_err());
    }
}

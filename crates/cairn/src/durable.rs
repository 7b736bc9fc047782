//! Durable tables: named tables whose state survives a crash, as their newest checkpoint plus
//! the write-ahead log replayed on top; atomic batches across them; checkpoints.
//!
//! Owns: the log catalog (`docs/format/log.md`: which durable tables exist, their numbers and
//! their checkpoints), the record payloads (batches, commits, dirty keys), [`DurableTables`]
//! (the session's registry), writes, logged commits, transactions' views and validated commits,
//! recovery and checkpoints (explicit, automatic, at open). May call: `wal`, `fs`, `lsm`
//! (applying updates, saving and opening checkpoints), `snapshot` (checkpoint names),
//! `session_core` (the session's parts; it closes the log with the session), `lookup`
//! (what a validation sees), `observe` (the spans of recovery and checkpoints, their counts).
//! Must never touch: run contents, or the public handles above it
//! (the session front wraps what it returns).
//!
//! Layout: `<session>/log/catalog` and `<session>/log/<number>.seg`; each durable table's
//! checkpoint is a snapshot named `ckpt.<table>.<checkpoint>` (not a valid user snapshot name:
//! users never see it).
//!
//! Ordering: a write validates its batch, then, under the `order` lock, appends one record to
//! the log and applies the batch to each table in turn, so that the log's order is the order
//! in which every table saw the updates (what a replay repeats). The fsync happens later, in
//! the log's syncer, outside every table lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::config::{Resolve, TableConfig};
use crate::error::{Error, Result};
use crate::fs::{read_all, write_atomic, FileSystem};
use crate::lookup::LookupResult;
use crate::lsm::{Lsm, Update};
use crate::session_core::SessionCore;
use crate::snapshot;
use crate::wal::{self, Durability, Log, LogOptions};

const CATALOG_MAGIC: &[u8; 8] = b"CRNLOGCT";
const CATALOG_VERSION: u32 = 1;
/// The label of every checkpoint snapshot.
pub(crate) const CHECKPOINT_LABEL: &str = "durable";
/// Longest durable table name (the rules of snapshot names).
const NAME_BYTES_MAX: usize = 64;

/// One durable table in the catalog.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CatalogEntry {
    pub(crate) id: u32,
    pub(crate) name: String,
    /// The checkpoint snapshot holding the table as of record `seq`.
    pub(crate) checkpoint: u64,
    /// Every record up to this one is in the checkpoint.
    pub(crate) seq: u64,
}

/// The log catalog: the log's id and the durable tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Catalog {
    pub(crate) log_id: u64,
    pub(crate) next_id: u32,
    pub(crate) tables: Vec<CatalogEntry>,
}

impl Catalog {
    /// The first record a recovery replays: the oldest one some table's checkpoint lacks
    /// (`None` for a catalog without tables).
    pub(crate) fn replay_from(&self) -> Option<u64> {
        self.tables.iter().map(|t| t.seq + 1).min()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(CATALOG_MAGIC);
        out.extend_from_slice(&CATALOG_VERSION.to_le_bytes());
        out.extend_from_slice(&self.log_id.to_le_bytes());
        out.extend_from_slice(&self.next_id.to_le_bytes());
        out.extend_from_slice(&(self.tables.len() as u32).to_le_bytes());
        for t in &self.tables {
            out.extend_from_slice(&t.id.to_le_bytes());
            out.extend_from_slice(&(t.name.len() as u16).to_le_bytes());
            out.extend_from_slice(t.name.as_bytes());
            out.extend_from_slice(&t.checkpoint.to_le_bytes());
            out.extend_from_slice(&t.seq.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Total decoder.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Catalog> {
        let bad = |d: &str| Error::corrupt("log catalog", d.to_string());
        if bytes.len() < 28 || &bytes[..8] != CATALOG_MAGIC {
            return Err(bad("bad magic"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(bad("checksum mismatch"));
        }
        let mut r = Reader { bytes: body, at: 8 };
        let version = r.u32()?;
        if version != CATALOG_VERSION {
            return Err(Error::UnsupportedVersion {
                what: "log catalog",
                found: version,
                supported: CATALOG_VERSION,
            });
        }
        let log_id = r.u64()?;
        let next_id = r.u32()?;
        let count = r.u32()? as usize;
        if count > body.len() / 22 {
            return Err(bad("more tables than bytes"));
        }
        let mut tables: Vec<CatalogEntry> = Vec::with_capacity(count);
        for _ in 0..count {
            let id = r.u32()?;
            let len = r.u16()? as usize;
            let name = std::str::from_utf8(r.take(len)?)
                .map_err(|_| bad("a name is not UTF-8"))?
                .to_string();
            validate_name(&name).map_err(|_| bad("a table name breaks the naming rules"))?;
            let checkpoint = r.u64()?;
            let seq = r.u64()?;
            if id >= next_id || tables.iter().any(|t| t.id == id || t.name == name) {
                return Err(bad("a table id or name is repeated or out of range"));
            }
            tables.push(CatalogEntry {
                id,
                name,
                checkpoint,
                seq,
            });
        }
        if r.at != body.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(Catalog {
            log_id,
            next_id,
            tables,
        })
    }
}

/// A cursor over bytes for the decoders here; every read is checked.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| Error::corrupt("log record", "truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Checks a durable table's name: the rules of snapshot names.
fn validate_name(name: &str) -> Result<()> {
    snapshot::validate_name(name).map_err(|_| {
        Error::InvalidConfig(format!(
            "durable table name {name:?}: 1 to {NAME_BYTES_MAX} characters from a-z, 0-9, '_' \
             and '-'"
        ))
    })
}

/// One table's part of a batch record, decoded.
pub(crate) type Part = (u32, Vec<(Vec<u8>, OwnedUpdate)>);

/// An update read back from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OwnedUpdate {
    Insert(Vec<u8>),
    InsertWithBlob(Vec<u8>, Vec<u8>),
    Upsert(Vec<u8>),
    Delete,
}

impl OwnedUpdate {
    pub(crate) fn as_update(&self) -> Update<'_> {
        match self {
            OwnedUpdate::Insert(v) => Update::Insert(v),
            OwnedUpdate::InsertWithBlob(v, b) => Update::InsertWithBlob(v, b),
            OwnedUpdate::Upsert(v) => Update::Upsert(v),
            OwnedUpdate::Delete => Update::Delete,
        }
    }
}

/// Record payload kind: a batch.
const KIND_BATCH: u8 = 1;

/// Encodes a batch record's payload: kind, parts, and per part the table and its updates.
pub(crate) fn encode_batch<K: AsRef<[u8]>>(parts: &[(u32, &[(K, Update<'_>)])]) -> Vec<u8> {
    let mut out = vec![KIND_BATCH];
    out.extend_from_slice(&(parts.len() as u32).to_le_bytes());
    let bytes = |out: &mut Vec<u8>, b: &[u8]| {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    };
    for (id, batch) in parts {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(batch.len() as u32).to_le_bytes());
        for (key, update) in batch.iter() {
            let op = match update {
                Update::Insert(_) => 0u8,
                Update::InsertWithBlob(..) => 1,
                Update::Upsert(_) => 2,
                Update::Delete => 3,
            };
            out.push(op);
            bytes(&mut out, key.as_ref());
            match update {
                Update::Insert(v) | Update::Upsert(v) => bytes(&mut out, v),
                Update::InsertWithBlob(v, b) => {
                    bytes(&mut out, v);
                    bytes(&mut out, b);
                }
                Update::Delete => {}
            }
        }
    }
    out
}

/// Record payload kind: an authenticated table's commit.
const KIND_COMMIT: u8 = 2;
/// Bytes of a commit record's payload: kind, table id, version, root hash.
const COMMIT_PAYLOAD_BYTES: usize = 1 + 4 + 8 + 32;

/// A commit record: authenticated table `id` committed its updates logged before this record,
/// reaching `version` with root hash `root`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CommitRecord {
    pub(crate) id: u32,
    pub(crate) version: u64,
    pub(crate) root: cairn_proof::Hash,
}

impl CommitRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(COMMIT_PAYLOAD_BYTES);
        out.push(KIND_COMMIT);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.root);
        out
    }

    /// Total decoder of a commit record's payload.
    pub(crate) fn decode(payload: &[u8]) -> Result<CommitRecord> {
        let bad = |d: &str| Error::corrupt("log record", d.to_string());
        if payload.first() != Some(&KIND_COMMIT) {
            return Err(bad("not a commit record"));
        }
        if payload.len() != COMMIT_PAYLOAD_BYTES {
            return Err(bad("a commit record of the wrong size"));
        }
        let mut root = [0u8; 32];
        root.copy_from_slice(&payload[13..45]);
        Ok(CommitRecord {
            id: u32::from_le_bytes(payload[1..5].try_into().expect("4 bytes")),
            version: u64::from_le_bytes(payload[5..13].try_into().expect("8 bytes")),
            root,
        })
    }
}

/// Record payload kind: an authenticated table's keys updated since its last commit, as its
/// checkpoint holds them.
const KIND_DIRTY: u8 = 3;

/// Encodes a dirty-keys record: kind, table id, key count, and each key with its length.
pub(crate) fn encode_dirty(id: u32, keys: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![KIND_DIRTY];
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for key in keys {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key);
    }
    out
}

/// Total decoder of a dirty-keys record.
pub(crate) fn decode_dirty(payload: &[u8]) -> Result<(u32, Vec<Vec<u8>>)> {
    let bad = |d: &str| Error::corrupt("log record", d.to_string());
    let mut r = Reader {
        bytes: payload,
        at: 0,
    };
    if r.u8()? != KIND_DIRTY {
        return Err(bad("not a dirty-keys record"));
    }
    let id = r.u32()?;
    let count = r.u32()? as usize;
    if count > payload.len() / 4 {
        return Err(bad("more keys than bytes"));
    }
    let mut keys = Vec::with_capacity(count);
    for _ in 0..count {
        let len = r.u32()? as usize;
        keys.push(r.take(len)?.to_vec());
    }
    if r.at != payload.len() {
        return Err(bad("trailing bytes"));
    }
    Ok((id, keys))
}

/// What a log record holds.
#[derive(Debug)]
pub(crate) enum Payload {
    Batch(Vec<Part>),
    Commit(CommitRecord),
    Dirty(u32, Vec<Vec<u8>>),
}

/// Total decoder of a record's payload, by its kind.
pub(crate) fn decode_payload(payload: &[u8]) -> Result<Payload> {
    match payload.first() {
        Some(&KIND_COMMIT) => CommitRecord::decode(payload).map(Payload::Commit),
        Some(&KIND_DIRTY) => decode_dirty(payload).map(|(id, keys)| Payload::Dirty(id, keys)),
        _ => decode_batch(payload).map(Payload::Batch),
    }
}

/// Total decoder of a batch record's payload.
pub(crate) fn decode_batch(payload: &[u8]) -> Result<Vec<Part>> {
    let bad = |d: &str| Error::corrupt("log record", d.to_string());
    let mut r = Reader {
        bytes: payload,
        at: 0,
    };
    if r.u8()? != KIND_BATCH {
        return Err(bad("unknown record kind"));
    }
    let count = r.u32()? as usize;
    if count > payload.len() / 8 {
        return Err(bad("more parts than bytes"));
    }
    let mut parts = Vec::with_capacity(count);
    for _ in 0..count {
        let id = r.u32()?;
        let n = r.u32()? as usize;
        if n > payload.len() / 5 {
            return Err(bad("more updates than bytes"));
        }
        let mut updates = Vec::with_capacity(n);
        for _ in 0..n {
            let op = r.u8()?;
            let mut field = || -> Result<Vec<u8>> {
                let len = r.u32()? as usize;
                Ok(r.take(len)?.to_vec())
            };
            let key = field()?;
            let update = match op {
                0 => OwnedUpdate::Insert(field()?),
                1 => {
                    let value = field()?;
                    OwnedUpdate::InsertWithBlob(value, field()?)
                }
                2 => OwnedUpdate::Upsert(field()?),
                3 => OwnedUpdate::Delete,
                _ => return Err(bad("unknown update kind")),
            };
            updates.push((key, update));
        }
        parts.push((id, updates));
    }
    if r.at != payload.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(parts)
}

/// The durable tables of a session and its log.
#[derive(Debug)]
pub(crate) struct Durable {
    /// Shared with the session core, which closes it when the session closes.
    pub(crate) log: Arc<Log>,
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    /// Serialises appending a record with applying it, and checkpoints with writes.
    order: Mutex<()>,
    catalog: Mutex<Catalog>,
    options: LogOptions,
    /// The custom resolve functions registered with the session.
    resolve_functions: Vec<Resolve>,
    /// The durable tables by name (shared with the session front).
    pub(crate) tables: Arc<DurableTables>,
    /// When the next automatic checkpoint is due.
    auto: Mutex<AutoCheckpoint>,
    /// Set while a writer runs an automatic checkpoint (the others go on).
    checkpointing: std::sync::atomic::AtomicBool,
}

/// What the automatic checkpoint policy tracks ([`LogOptions::checkpoint_bytes`],
/// [`LogOptions::checkpoint_interval`]).
#[derive(Debug)]
struct AutoCheckpoint {
    /// Payload bytes logged since the last checkpoint.
    bytes: u64,
    /// When the last checkpoint was taken (or the log opened).
    at: std::time::Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The registry of a session's durable tables, by name: recovered when the session opens, kept
/// alive by the session's handles (not by its tables: a table refers to its session).
#[derive(Debug, Default)]
pub(crate) struct DurableTables {
    tables: Mutex<BTreeMap<String, Lsm>>,
}

impl DurableTables {
    pub(crate) fn get(&self, name: &str) -> Option<Lsm> {
        lock(&self.tables).get(name).cloned()
    }
    pub(crate) fn names(&self) -> Vec<String> {
        lock(&self.tables).keys().cloned().collect()
    }
    fn all(&self) -> Vec<Lsm> {
        lock(&self.tables).values().cloned().collect()
    }
    fn entries(&self) -> Vec<(String, Lsm)> {
        lock(&self.tables)
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect()
    }
    fn insert(&self, name: String, table: Lsm) {
        lock(&self.tables).insert(name, table);
    }
}

/// Opens the log of the session in `dir` (creating it for a session that has none): reads the
/// catalog, recovers the log, opens every durable table's checkpoint and replays the records
/// after it, then starts the log in a new segment and, when records were replayed, takes a
/// checkpoint (so the log left behind is one segment whatever the number of reopens). Cost:
/// reads each checkpoint (as `open_snapshot`) and the log once, plus that checkpoint; memory:
/// one record at a time besides the tables.
pub(crate) fn open(
    session: &Arc<SessionCore>,
    options: LogOptions,
    resolve_functions: Vec<Resolve>,
) -> Result<Durable> {
    if options.segment_bytes < 512 {
        return Err(Error::InvalidConfig(format!(
            "LogOptions::segment_bytes is {}, below the minimum of 512",
            options.segment_bytes
        )));
    }
    // No removal step while the open replays the log and takes its checkpoint (an earlier
    // session's leftovers can be gigabytes): they resume with the first operation after it.
    // Nor background merge work: the open's tables' merges wait for the open to end.
    struct Resume<'a>(&'a SessionCore);
    impl Drop for Resume<'_> {
        fn drop(&mut self) {
            self.0.removals().resume();
            if let Some(background) = self.0.background() {
                background.resume();
            }
        }
    }
    session.removals().pause();
    if let Some(background) = session.background() {
        background.pause();
    }
    let _resume = Resume(session);
    let fs = session.fs().clone();
    let dir = session.dir().join("log");
    let catalog_path = dir.join("catalog");
    if !fs.is_dir(&dir)? {
        fs.create_dir_all(&dir)?;
        fs.sync_dir(session.dir())?;
    }
    let catalog = if fs.exists(&catalog_path)? {
        read_catalog(&*fs, &catalog_path)?
    } else {
        // No catalog: a new log, unless segments or checkpoints say there was one. Recovering
        // those as "no durable tables" would lose every table silently, whatever the recovery
        // mode; the catalog is written before any of them exists.
        let segments = fs
            .list_dir(&dir)?
            .iter()
            .filter(|n| wal::segment_number(n).is_some())
            .count();
        let checkpoints = snapshot::checkpoints(session)?.len();
        if segments > 0 || checkpoints > 0 {
            return Err(Error::LogCorrupted {
                path: catalog_path,
                offset: 0,
                detail: format!(
                    "the catalog is missing, but {segments} log segments and {checkpoints} \
                     checkpoints exist: the durable tables cannot be recovered without it"
                ),
            });
        }
        let catalog = Catalog {
            log_id: getrandom::u64().unwrap_or_else(|_| session.salt() ^ 0x9e37_79b9_7f4a_7c15),
            next_id: 0,
            tables: Vec::new(),
        };
        write_atomic(&*fs, &catalog_path, &catalog.encode())?;
        catalog
    };
    let span = crate::observe::log_recover(session.dir(), catalog.tables.len());
    let registry = Arc::new(DurableTables::default());
    let mut by_id: BTreeMap<u32, (Lsm, u64)> = BTreeMap::new();
    for entry in &catalog.tables {
        let name = snapshot::checkpoint_name(entry.id, entry.checkpoint);
        let overrides = crate::SnapshotOverrides {
            resolve: checkpoint_resolve(session, &name, &entry.name, &resolve_functions)?,
            ..crate::SnapshotOverrides::default()
        };
        let table = Lsm::open_snapshot(session.clone(), &name, CHECKPOINT_LABEL, overrides)?;
        table.set_durable_id(entry.id);
        by_id.insert(entry.id, (table.clone(), entry.seq));
        registry.insert(entry.name.clone(), table);
    }
    let first_seq = catalog.replay_from().unwrap_or(u64::MAX);
    let mut replayed = 0u64;
    // The table record `seq` names, with the sequence number its checkpoint holds.
    let table_of = |id: u32, seq: u64| {
        by_id.get(&id).ok_or_else(|| {
            Error::corrupt(
                "log record",
                format!("record {seq} names durable table {id}, which does not exist"),
            )
        })
    };
    let mut apply = |record: &wal::Record| -> Result<()> {
        let parts = match decode_payload(&record.payload)? {
            Payload::Batch(parts) => parts,
            Payload::Commit(commit) => {
                let (table, seq) = table_of(commit.id, record.seq)?;
                if record.seq > *seq {
                    replayed += 1;
                    replay_commit(table, &commit, record.seq)?;
                }
                return Ok(());
            }
            Payload::Dirty(id, keys) => {
                let (table, seq) = table_of(id, record.seq)?;
                // Only the checkpoint just before it needs it: a replay from an older one
                // finds the same keys dirty from the updates it replays.
                if record.seq > *seq {
                    // Counted: the checkpoint the open takes logs them again, in the new
                    // segment, so that the old ones can go.
                    replayed += 1;
                    table.mark_dirty(keys)?;
                }
                return Ok(());
            }
        };
        for (id, updates) in parts {
            let (table, seq) = table_of(id, record.seq)?;
            if record.seq > *seq {
                replayed += 1;
                let batch: Vec<(&[u8], Update<'_>)> = updates
                    .iter()
                    .map(|(k, u)| (&k[..], u.as_update()))
                    .collect();
                table.validate_batch(&batch)?;
                table.apply_updates(&batch)?;
            }
        }
        Ok(())
    };
    // The replay pays the merge credits of the updates it repeats, but puts off the steps of
    // merges it does not finish: those are spread over the updates after the open (or done by
    // the background thread), so that the open does not redo the deep levels' merge work.
    for (table, _) in by_id.values() {
        table.defer_merge_steps(true)?;
    }
    let recovered = wal::recover(
        &*fs,
        &dir,
        catalog.log_id,
        first_seq,
        options.recovery,
        &mut apply,
    )?;
    for (table, _) in by_id.values() {
        table.defer_merge_steps(false)?;
    }
    span.record("records_replayed", replayed);
    drop(span);
    let next_seq_min = catalog.tables.iter().map(|t| t.seq + 1).max().unwrap_or(1);
    let log = Arc::new(Log::open(
        fs.clone(),
        &dir,
        catalog.log_id,
        options,
        &recovered,
        next_seq_min,
    )?);
    session.set_log(log.clone())?;
    let covered = catalog.tables.iter().map(|t| t.seq).min();
    let durable = Durable {
        log,
        fs,
        dir,
        resolve_functions,
        order: Mutex::new(()),
        catalog: Mutex::new(catalog),
        tables: registry,
        auto: Mutex::new(AutoCheckpoint {
            bytes: 0,
            at: std::time::Instant::now(),
        }),
        checkpointing: std::sync::atomic::AtomicBool::new(false),
        options,
    };
    // Every open starts a new segment. So that a session reopened often does not pile up
    // segments (and replay them all at each open), the log before it is folded into new
    // checkpoints when it held records the checkpoints lack, as RocksDB flushes what it
    // recovered; otherwise the checkpoints cover it already and its segments go.
    if replayed > 0 {
        durable.checkpoint(session)?;
    } else {
        durable.log.remove_covered(covered.unwrap_or(u64::MAX))?;
    }
    Ok(durable)
}

/// The log catalog at `path`, decoded (errors name the file).
pub(crate) fn read_catalog(fs: &dyn FileSystem, path: &Path) -> Result<Catalog> {
    Catalog::decode(&read_all(fs, path)?).map_err(|e| e.in_file(path))
}

/// The catalog of the log of the session in `session_dir`, for the read-only views of it.
///
/// Errors: [`Error::NotDurable`] when the session has no log (no `log/catalog`), and as
/// [`read_catalog`].
pub(crate) fn session_catalog(fs: &dyn FileSystem, session_dir: &Path) -> Result<Catalog> {
    let path = session_dir.join("log").join("catalog");
    if !fs.exists(&path)? {
        return Err(Error::NotDurable(format!(
            "{} has no write-ahead log (no {})",
            session_dir.display(),
            path.display()
        )));
    }
    read_catalog(fs, &path)
}

/// The custom resolve function checkpoint `name` of durable table `table` needs, from the
/// session's registered ones (`None` for a built-in function). Errors:
/// [`Error::InvalidConfig`] when it is not registered.
pub(crate) fn checkpoint_resolve(
    session: &SessionCore,
    name: &str,
    table: &str,
    registered: &[Resolve],
) -> Result<Option<Resolve>> {
    let dir = snapshot::snapshot_dir(session.snapshots_dir(), name);
    let meta = snapshot::read_meta(&**session.fs(), &dir)?;
    match meta.resolve {
        snapshot::ResolveTag::Custom(wanted) => registered
            .iter()
            .find(|r| matches!(r, Resolve::Custom(c) if Some(c.name()) == wanted.as_deref()))
            .cloned()
            .map(Some)
            .ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "durable table {table:?} uses the custom resolve function {wanted:?}: \
                     register it in SessionOptions::resolve_functions"
                ))
            }),
        _ => Ok(None),
    }
}

/// The durable id of `table`. Errors: [`Error::NotDurable`] for a table that is not durable
/// (an ephemeral table, or a duplicate).
pub(crate) fn durable_id(table: &Lsm) -> Result<u32> {
    table.durable_id().ok_or_else(|| {
        Error::NotDurable("the table is not durable (open it with Session::table)".into())
    })
}

/// Repeats a logged commit: the table commits what was replayed before it, and must reach the
/// logged version and root (the root depends only on the contents, the version only on the
/// commits, so a difference is damage the record checksums missed, or a bug).
fn replay_commit(table: &Lsm, commit: &CommitRecord, seq: u64) -> Result<()> {
    let got = table.commit()?;
    if got.version != commit.version || got.root.hash != commit.root {
        return Err(Error::corrupt(
            "log record",
            format!(
                "record {seq} says durable table {} committed version {} with root {}; the \
                 replay reached version {} with root {}",
                commit.id,
                commit.version,
                hex::encode(commit.root),
                got.version,
                hex::encode(got.root.hash)
            ),
        ));
    }
    Ok(())
}

impl Durable {
    fn catalog_path(&self) -> PathBuf {
        self.dir.join("catalog")
    }

    /// Durable table `name`, created with `config` if it does not exist (see
    /// [`crate::Session::table`]); an existing one must agree with `config` on what decides its
    /// contents (resolve function, authentication and its hash).
    pub(crate) fn open_or_create(
        &self,
        session: &Arc<SessionCore>,
        name: &str,
        config: TableConfig,
    ) -> Result<Lsm> {
        validate_name(name)?;
        // The order lock makes "exists, or create" one step for concurrent callers.
        let _order = lock(&self.order);
        if let Some(table) = self.tables.get(name) {
            let have = table.config();
            let hash = |c: &TableConfig| c.auth.map(|a| a.hash);
            if have.resolve != config.resolve || hash(have) != hash(&config) {
                return Err(Error::InvalidConfig(format!(
                    "table {name:?} exists with resolve {:?} and authentication {:?}; \
                     asked for {:?} and {:?}",
                    have.resolve,
                    hash(have),
                    config.resolve,
                    hash(&config)
                )));
            }
            return Ok(table);
        }
        self.create_locked(session, name, config)
    }

    /// Creates durable table `name` (see [`crate::Session::create_durable_table`]).
    pub(crate) fn create(
        &self,
        session: &Arc<SessionCore>,
        name: &str,
        config: TableConfig,
    ) -> Result<Lsm> {
        validate_name(name)?;
        let _order = lock(&self.order);
        self.create_locked(session, name, config)
    }

    /// Creates durable table `name`, with the order lock held.
    fn create_locked(
        &self,
        session: &Arc<SessionCore>,
        name: &str,
        config: TableConfig,
    ) -> Result<Lsm> {
        if let Resolve::Custom(custom) = &config.resolve {
            if !self.resolve_functions.contains(&config.resolve) {
                return Err(Error::InvalidConfig(format!(
                    "a durable table's custom resolve function must be registered in \
                     SessionOptions::resolve_functions (recovery replays upserts with it); \
                     {:?} is not",
                    custom.name()
                )));
            }
        }
        let mut catalog = lock(&self.catalog).clone();
        if catalog.tables.iter().any(|t| t.name == name) {
            return Err(Error::InvalidConfig(format!(
                "durable table {name:?} exists already"
            )));
        }
        let table = Lsm::new(session.clone(), config)?;
        let id = catalog.next_id;
        let checkpoint = catalog
            .tables
            .iter()
            .map(|t| t.checkpoint)
            .max()
            .unwrap_or(0);
        // The empty table's checkpoint: it holds every record so far (none is about it).
        save_checkpoint(session, &table, &snapshot::checkpoint_name(id, checkpoint))?;
        catalog.next_id += 1;
        catalog.tables.push(CatalogEntry {
            id,
            name: name.to_string(),
            checkpoint,
            seq: self.log.last_seq(),
        });
        write_atomic(&*self.fs, &self.catalog_path(), &catalog.encode())?;
        *lock(&self.catalog) = catalog;
        table.set_durable_id(id);
        self.tables.insert(name.to_string(), table.clone());
        Ok(table)
    }

    /// Saves every durable table as a new checkpoint, records them in the catalog, then removes
    /// the old checkpoints and the log segments nobody needs (see
    /// [`crate::Session::checkpoint`]).
    pub(crate) fn checkpoint(&self, session: &SessionCore) -> Result<()> {
        let _order = lock(&self.order);
        // The log up to here is made durable first: its notices fire as usual.
        self.log.sync()?;
        let seq = self.log.last_seq();
        let old = lock(&self.catalog).clone();
        let number = old.tables.iter().map(|t| t.checkpoint).max().unwrap_or(0) + 1;
        let _span = crate::observe::checkpoint(session.dir(), number, old.tables.len());
        let mut new = old.clone();
        let tables = self.tables.all();
        for entry in &mut new.tables {
            let Some(table) = tables.iter().find(|t| t.durable_id() == Some(entry.id)) else {
                continue;
            };
            if table.check_usable().is_err() {
                // Closed, or broken by a failed update: its old checkpoint and the log after it
                // stay the source of its recovery.
                continue;
            }
            // An authenticated table is saved uncommitted (a checkpoint makes no version); the
            // keys it has yet to commit are logged right after the checkpoint's position.
            let dirty =
                save_checkpoint(session, table, &snapshot::checkpoint_name(entry.id, number))?;
            if !dirty.is_empty() {
                self.log.append(&encode_dirty(entry.id, &dirty))?;
            }
            entry.checkpoint = number;
            entry.seq = seq;
        }
        // The dirty-keys records are durable before the catalog names checkpoints that need
        // them.
        if self.log.last_seq() > seq {
            self.log.sync()?;
        }
        // The switch: before it, the old checkpoints and the whole log; after, the new ones.
        write_atomic(&*self.fs, &self.catalog_path(), &new.encode())?;
        *lock(&self.catalog) = new.clone();
        for (before, after) in old.tables.iter().zip(&new.tables) {
            if before.checkpoint != after.checkpoint {
                let name = snapshot::checkpoint_name(before.id, before.checkpoint);
                if snapshot::exists(session, &name)? {
                    snapshot::delete(session, &name)?;
                }
            }
        }
        // Records logged from now on count towards the next automatic checkpoint (the order
        // lock keeps writers out until then).
        *lock(&self.auto) = AutoCheckpoint {
            bytes: 0,
            at: std::time::Instant::now(),
        };
        let covered = new.tables.iter().map(|t| t.seq).min().unwrap_or(seq);
        self.log.remove_covered(covered)?;
        crate::observe::checkpoint_done();
        Ok(())
    }

    /// The checkpoint of a clean close ([`crate::Session::close`]): taken when anything was
    /// logged since the last one, so that the next open replays nothing. Cannot fail the
    /// close: an error is logged (`log::warn!`) and the log, intact, is replayed by the next
    /// open instead.
    pub(crate) fn checkpoint_at_close(&self, session: &SessionCore) {
        if lock(&self.auto).bytes == 0 || !session.is_open() {
            return;
        }
        if let Err(e) = self.checkpoint(session) {
            log::warn!("the checkpoint of a clean close failed (the log will be replayed): {e}");
        }
    }

    /// Commits durable authenticated table `table` (see [`crate::Table::commit`]) and logs the
    /// commit when it made a new version, under the write order, so that the record stands
    /// exactly after the updates it covers. Returns the commit and, for a new version, the
    /// durability of its record.
    pub(crate) fn commit(&self, table: &Lsm) -> Result<(crate::Commit, Option<Durability>)> {
        let id = durable_id(table)?;
        let _order = lock(&self.order);
        self.commit_locked(table, id)
    }

    /// Saves durable authenticated table `table` as snapshot `name`: its commit logged first
    /// (as [`Durable::commit`]), and no write in between.
    pub(crate) fn save_snapshot(&self, table: &Lsm, name: &str, label: &str) -> Result<()> {
        let id = durable_id(table)?;
        let _order = lock(&self.order);
        self.commit_locked(table, id)?;
        table.save_snapshot_as(name, label)
    }

    fn commit_locked(&self, table: &Lsm, id: u32) -> Result<(crate::Commit, Option<Durability>)> {
        // O(1): `auth_stats` would sum every retained page first (two thirds of a one-key
        // commit's CPU time at 1M keys, `docs/benchmarks/2026-11-29-ledger-receipts`).
        let before = table.last_commit()?.version;
        let commit = table.commit()?;
        if commit.version == before {
            return Ok((commit, None));
        }
        let record = CommitRecord {
            id,
            version: commit.version,
            root: commit.root.hash,
        };
        // Should the append fail (a failed log), the commit stands in memory only: the log
        // refuses every later write, and recovery repeats the commit from the updates logged.
        let seq = self.log.append(&record.encode())?;
        Ok((commit, Some(self.log.durability(seq))))
    }

    /// Whether an automatic checkpoint is due after `payload` more bytes were logged.
    fn count_and_check(&self, payload: u64) -> bool {
        let mut auto = lock(&self.auto);
        auto.bytes += payload;
        auto.bytes >= self.options.checkpoint_bytes
            || self
                .options
                .checkpoint_interval
                .is_some_and(|every| auto.at.elapsed() >= every)
    }

    /// Runs an automatic checkpoint on the writer that found it due, unless another writer is
    /// running one already. Its failure is not the write's (that write is logged and applied):
    /// it is logged, and the next write past the policy tries again.
    fn auto_checkpoint(&self, session: &SessionCore) {
        use std::sync::atomic::Ordering;
        if self
            .checkpointing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        if let Err(e) = self.checkpoint(session) {
            log::warn!(
                "cairn: the automatic checkpoint of {} failed: {}",
                self.dir.display(),
                e.with_causes()
            );
        }
        self.checkpointing.store(false, Ordering::Release);
    }
}

/// Saves `table` as checkpoint `name`, replacing what a crashed checkpoint or creation left under
/// that name (no catalog names it).
/// Returns the keys an authenticated table has yet to commit (see [`Lsm::save_checkpoint_as`]).
fn save_checkpoint(session: &SessionCore, table: &Lsm, name: &str) -> Result<Vec<Vec<u8>>> {
    if snapshot::exists(session, name)? {
        snapshot::delete(session, name)?;
    }
    table.save_checkpoint_as(name, CHECKPOINT_LABEL)
}

/// What a transaction saw of a key: its value and blob, or absence.
pub(crate) type Seen = Option<(Vec<u8>, Option<Vec<u8>>)>;

/// One table's part of a write: the table and its updates, in order.
pub(crate) type TablePart<'a> = (&'a Lsm, &'a [(&'a [u8], Update<'a>)]);

/// One table's part of a transaction's read set: the live table, its name, and each key read
/// with what was seen.
pub(crate) type TableReads<'a> = (&'a Lsm, &'a str, Vec<(&'a [u8], &'a Seen)>);

/// What a lookup result shows of a key: its value and blob bytes.
pub(crate) fn seen(result: LookupResult) -> Result<Seen> {
    Ok(match result {
        LookupResult::NotFound => None,
        LookupResult::Found(v) => Some((v, None)),
        LookupResult::FoundWithBlob(v, blob) => Some((v, Some(blob.read()?))),
    })
}

/// One durable table in a transaction's view: the live table and its duplicate as of the
/// transaction's start.
#[derive(Debug)]
pub(crate) struct ViewTable {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) live: Lsm,
    pub(crate) view: Lsm,
}

impl Durable {
    /// A duplicate of every usable durable table, all as of one instant (under the write
    /// order, so no batch is half applied): a transaction's view. Cost: one
    /// [`Lsm::duplicate`] per table (O(levels + runs) reference counts, no I/O).
    pub(crate) fn view(&self) -> Result<Vec<ViewTable>> {
        let _order = lock(&self.order);
        let mut out = Vec::new();
        for (name, live) in self.tables.entries() {
            let Some(id) = live.durable_id() else {
                continue;
            };
            if live.check_usable().is_err() {
                continue;
            }
            let view = live.duplicate()?;
            out.push(ViewTable {
                id,
                name,
                live,
                view,
            });
        }
        Ok(out)
    }

    /// Commits a transaction (see the `transaction` module): under the write order, every key
    /// of `reads` is looked up in its live table and compared with what the transaction saw;
    /// then `parts` is logged and applied as [`Durable::write`] does.
    pub(crate) fn commit_transaction(
        &self,
        session: &Arc<SessionCore>,
        reads: &[TableReads<'_>],
        ranges: &dyn Fn() -> Result<()>,
        parts: &[TablePart<'_>],
    ) -> Result<Durability> {
        let payload = self.check_and_encode(session, parts)?;
        let seq = {
            let _order = lock(&self.order);
            ranges()?;
            for (table, name, keys) in reads {
                let lookup: Vec<&[u8]> = keys.iter().map(|(k, _)| *k).collect();
                let now = table.lookups(&lookup)?;
                for ((key, then), now) in keys.iter().zip(now) {
                    if seen(now)? != **then {
                        return Err(Error::TransactionConflict {
                            table: name.to_string(),
                            key: key.to_vec(),
                        });
                    }
                }
            }
            self.append_and_apply(&payload, parts)?
        };
        self.after_write(session, payload.len());
        Ok(self.log.durability(seq))
    }

    /// Writes a batch across durable tables as one log record (see [`crate::Session::write`]).
    pub(crate) fn write<K: AsRef<[u8]>>(
        &self,
        session: &Arc<SessionCore>,
        parts: &[(&Lsm, &[(K, Update<'_>)])],
    ) -> Result<Durability> {
        let payload = self.check_and_encode(session, parts)?;
        let seq = {
            let _order = lock(&self.order);
            self.append_and_apply(&payload, parts)?
        };
        self.after_write(session, payload.len());
        Ok(self.log.durability(seq))
    }

    /// Appends `payload` and applies `parts`, with the write order held.
    fn append_and_apply<K: AsRef<[u8]>>(
        &self,
        payload: &[u8],
        parts: &[(&Lsm, &[(K, Update<'_>)])],
    ) -> Result<u64> {
        let seq = self.log.append(payload)?;
        for (table, batch) in parts {
            // A failure here breaks that table; the record is logged, and recovery applies it.
            table.apply_updates(batch)?;
        }
        Ok(seq)
    }

    /// After a write of `payload_bytes`: an automatic checkpoint if one is due.
    fn after_write(&self, session: &SessionCore, payload_bytes: usize) {
        if self.count_and_check(payload_bytes as u64) {
            self.auto_checkpoint(session);
        }
    }

    /// Checks a batch before anything is logged (every table this session's, durable, usable;
    /// every update valid) and encodes its record.
    fn check_and_encode<K: AsRef<[u8]>>(
        &self,
        session: &Arc<SessionCore>,
        parts: &[(&Lsm, &[(K, Update<'_>)])],
    ) -> Result<Vec<u8>> {
        let mut ids = Vec::with_capacity(parts.len());
        for (table, batch) in parts {
            if !table.in_session(session) {
                return Err(Error::InvalidConfig(
                    "every table of a batch must belong to the session it is written through"
                        .into(),
                ));
            }
            let id = durable_id(table)?;
            table.validate_batch(batch)?;
            // A closed or broken table refuses before anything is logged.
            table.check_usable()?;
            ids.push(id);
        }
        let encoded: Vec<(u32, &[(K, Update<'_>)])> = ids
            .iter()
            .zip(parts)
            .map(|(id, (_, b))| (*id, *b))
            .collect();
        Ok(encode_batch(&encoded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_decoding_is_total() {
        let a: &[(&[u8], Update<'_>)] = &[
            (b"k1", Update::Insert(b"v1")),
            (b"k2", Update::InsertWithBlob(b"v2", b"blob")),
            (b"k3", Update::Upsert(b"12345678")),
            (b"k4", Update::Delete),
        ];
        let b: &[(&[u8], Update<'_>)] = &[(b"x", Update::Delete)];
        let payload = encode_batch(&[(3, a), (9, b)]);
        let parts = decode_batch(&payload).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].0, 3);
        assert_eq!(
            parts[0].1[1].1,
            OwnedUpdate::InsertWithBlob(b"v2".to_vec(), b"blob".to_vec())
        );
        assert_eq!(parts[1], (9, vec![(b"x".to_vec(), OwnedUpdate::Delete)]));
        for cut in 0..payload.len() {
            assert!(decode_batch(&payload[..cut]).is_err());
        }
        for i in 0..payload.len() {
            let mut bad = payload.clone();
            bad[i] ^= 0xff;
            let _ = decode_batch(&bad);
        }
    }

    #[test]
    fn commit_and_dirty_records_round_trip_and_decoding_is_total() {
        let commit = CommitRecord {
            id: 7,
            version: 42,
            root: [0xab; 32],
        };
        let bytes = commit.encode();
        let golden = crate::golden::check_golden("log-commit-record-v1.bin", &bytes);
        assert_eq!(CommitRecord::decode(&golden).unwrap(), commit);
        assert!(matches!(decode_payload(&bytes), Ok(Payload::Commit(c)) if c == commit));
        let keys = vec![b"a".to_vec(), Vec::new(), b"longer key".to_vec()];
        let dirty = encode_dirty(3, &keys);
        let golden = crate::golden::check_golden("log-dirty-record-v1.bin", &dirty);
        assert_eq!(decode_dirty(&golden).unwrap(), (3, keys));
        for payload in [&bytes, &dirty] {
            for cut in 0..payload.len() {
                assert!(decode_payload(&payload[..cut]).is_err());
            }
            for i in 0..payload.len() {
                let mut bad = payload.clone();
                bad[i] ^= 0xff;
                let _ = decode_payload(&bad);
            }
        }
    }

    #[test]
    fn catalogs_round_trip_and_reject_damage() {
        let c = Catalog {
            log_id: 42,
            next_id: 3,
            tables: vec![
                CatalogEntry {
                    id: 0,
                    name: "utxo".into(),
                    checkpoint: 4,
                    seq: 100,
                },
                CatalogEntry {
                    id: 2,
                    name: "stake".into(),
                    checkpoint: 4,
                    seq: 100,
                },
            ],
        };
        let bytes = c.encode();
        let golden = crate::golden::check_golden("log-catalog-v1.bin", &bytes);
        assert_eq!(Catalog::decode(&golden).unwrap(), c);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 4;
            assert!(Catalog::decode(&bad).is_err(), "byte {i}");
        }
    }
}

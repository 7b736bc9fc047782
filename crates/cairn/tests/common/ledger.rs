//! A small model of a session for the fault tests: random operations over every public call,
//! a `BTreeMap` per live table, and the saved snapshots with their contents.
//!
//! Values are 8-byte little-endian counters and the resolve function is addition, so upserts,
//! unions and blobs are all checked exactly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::cairn_proof::root_of;
use cairn::fs::{FileSystem, MemFs};
use cairn::{
    AuthConfig, BloomAlloc, Error, IndexType, LookupResult, MergeSchedule, Resolve, Session,
    SessionOptions, SnapshotOverrides, Table, TableConfig, Update,
};
use proptest::prelude::*;

pub const SESSION_DIR: &str = "/s";
pub const LABEL: &str = "l";
const KEYS: u8 = 48;
const TABLES_MAX: usize = 4;

/// Key `k` of the model's small key space.
pub fn key(k: u8) -> Vec<u8> {
    format!("key-{k:03}").into_bytes()
}

fn blob_bytes(k: u8, len: u8) -> Vec<u8> {
    (0..len).map(|i| i.wrapping_mul(31) ^ k).collect()
}

/// key -> (counter, blob)
pub type Model = BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>;

#[derive(Clone, Debug)]
pub enum Upd {
    Insert(u64),
    InsertWithBlob(u64, u8),
    Upsert(u64),
    Delete,
}

/// One public operation (several calls for the composite ones).
#[derive(Clone, Debug)]
pub enum Op {
    Insert(u8, u64),
    InsertWithBlob(u8, u64, u8),
    Delete(u8),
    Upsert(u8, u64),
    Inserts(Vec<(u8, u64)>),
    Deletes(Vec<u8>),
    Upserts(Vec<(u8, u64)>),
    Updates(Vec<(u8, Upd)>),
    Lookup(u8),
    Lookups(Vec<u8>),
    Member(u8),
    Members(Vec<u8>),
    /// Lookups of these keys, then `retrieve_blobs` of every blob they returned.
    RetrieveBlobs(Vec<u8>),
    RangeLookup(u8, u8),
    /// Open a cursor (at a key or the start), take some entries, close it.
    Cursor(Option<u8>, u8),
    Duplicate,
    NewTable,
    /// Incremental union of the current table with the oldest live one.
    Union,
    /// Pay 1/n of the current table's union debt.
    SupplyUnion(u8),
    /// Finish every merge in progress of the current table.
    CompleteMerges,
    Stats,
    /// Make another live table the current one.
    Select(u8),
    /// Close the oldest live table.
    CloseOldest,
    Save(u8),
    OpenSnapshot(u8),
    DeleteSnapshot(u8),
    SnapshotExists(u8),
    ListSnapshots,
    /// Export snapshot a and import it as b.
    ExportImport(u8, u8),
    /// Close the session and open it again.
    Restart,
}

fn upd_strategy() -> impl Strategy<Value = (u8, Upd)> {
    (
        0..KEYS,
        prop_oneof![
            4 => any::<u64>().prop_map(Upd::Insert),
            1 => (any::<u64>(), 0u8..40).prop_map(|(v, b)| Upd::InsertWithBlob(v, b)),
            3 => any::<u64>().prop_map(Upd::Upsert),
            2 => Just(Upd::Delete),
        ],
    )
}

pub fn op_strategy() -> impl Strategy<Value = Op> {
    let k = 0..KEYS;
    let ks = prop::collection::vec(0..KEYS, 0..12);
    let kvs = prop::collection::vec((0..KEYS, any::<u64>()), 0..12);
    let snap = 0u8..3;
    prop_oneof![
        6 => (k.clone(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (k.clone(), any::<u64>(), 0u8..40).prop_map(|(k, v, b)| Op::InsertWithBlob(k, v, b)),
        3 => k.clone().prop_map(Op::Delete),
        4 => (k.clone(), any::<u64>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        1 => kvs.clone().prop_map(Op::Inserts),
        1 => ks.clone().prop_map(Op::Deletes),
        1 => kvs.prop_map(Op::Upserts),
        2 => prop::collection::vec(upd_strategy(), 0..30).prop_map(Op::Updates),
        3 => k.clone().prop_map(Op::Lookup),
        3 => ks.clone().prop_map(Op::Lookups),
        1 => k.clone().prop_map(Op::Member),
        1 => ks.clone().prop_map(Op::Members),
        2 => ks.prop_map(Op::RetrieveBlobs),
        2 => (k.clone(), k.clone()).prop_map(|(a, b)| Op::RangeLookup(a, b)),
        2 => (prop::option::of(k), 0u8..20).prop_map(|(k, n)| Op::Cursor(k, n)),
        1 => Just(Op::Duplicate),
        1 => Just(Op::NewTable),
        1 => Just(Op::Union),
        2 => (1u8..4).prop_map(Op::SupplyUnion),
        1 => Just(Op::CompleteMerges),
        1 => Just(Op::Stats),
        1 => any::<u8>().prop_map(Op::Select),
        2 => Just(Op::CloseOldest),
        3 => snap.clone().prop_map(Op::Save),
        2 => snap.clone().prop_map(Op::OpenSnapshot),
        1 => snap.clone().prop_map(Op::DeleteSnapshot),
        1 => snap.clone().prop_map(Op::SnapshotExists),
        1 => Just(Op::ListSnapshots),
        1 => (snap.clone(), snap).prop_map(|(a, b)| Op::ExportImport(a, b)),
        1 => Just(Op::Restart),
    ]
}

/// The table settings of a case: tiny write buffers so flushes and merges happen every few
/// operations.
pub fn config_strategy() -> impl Strategy<Value = TableConfig> {
    (
        1usize..=8,
        prop_oneof![Just(IndexType::Compact), Just(IndexType::Ordinary)],
        prop_oneof![
            3 => Just(MergeSchedule::Incremental),
            1 => Just(MergeSchedule::OneShot)
        ],
        1usize..=4,
        // A third of the cases authenticated, with one or three page levels in memory.
        prop_oneof![
            2 => Just(None),
            1 => prop_oneof![Just(0usize), Just(20 << 20)]
                .prop_map(|retained| Some(AuthConfig::default().retained_bytes(retained))),
        ],
        // A quarter of the cases cut runs into parts of a few entries (snapshots of several
        // parts per run, merges that link some parts and rewrite others).
        prop_oneof![3 => Just(None), 1 => (1u64..=3).prop_map(Some)],
    )
        .prop_map(
            |(
                write_buffer_entries,
                index,
                merge_schedule,
                merge_batch_size,
                auth,
                part_entries,
            )| {
                TableConfig::default()
                    .write_buffer_entries(write_buffer_entries)
                    .index(index)
                    .merge_schedule(merge_schedule)
                    .merge_batch_size(merge_batch_size)
                    .auth(auth)
                    .part_entries(part_entries)
                    .resolve(Resolve::AddU64Le)
                    // A fixed allocation: sizing for a target FPR costs milliseconds per table.
                    .bloom(BloomAlloc::BitsPerEntry(10.0))
            },
        )
}

fn snapshot_name(s: u8) -> String {
    format!("snap-{s}")
}

/// A snapshot operation that failed: its effect may or may not be on disk.
#[derive(Clone, Debug)]
pub enum Uncertain {
    /// The snapshot may exist, with these contents.
    MaybeSaved(String, Model),
    /// The snapshot may be gone.
    MaybeDeleted(String),
}

/// The system under test and its model.
pub struct World {
    pub fs: MemFs,
    pub config: TableConfig,
    pub session: Option<Session>,
    /// Live tables and their models; the current one is last.
    pub tables: Vec<(Table, Model)>,
    /// Saved snapshots and their contents.
    pub snapshots: BTreeMap<String, Model>,
    /// The effect of the last failed snapshot operation, settled by `restore_and_verify`.
    pub uncertain: Option<Uncertain>,
    exports: u32,
}

/// What the caller should know about a finished step.
pub type StepResult = Result<Result<(), Error>, TestCaseError>;

fn apply(model: &mut Model, k: u8, u: &Upd) {
    let key = key(k);
    match u {
        Upd::Insert(v) => {
            model.insert(key, (*v, None));
        }
        Upd::InsertWithBlob(v, b) => {
            model.insert(key, (*v, Some(blob_bytes(k, *b))));
        }
        Upd::Upsert(v) => {
            let old = model.get(&key).map_or(0, |(old, _)| *old);
            model.insert(key, (v.wrapping_add(old), None));
        }
        Upd::Delete => {
            model.remove(&key);
        }
    }
}

fn check_lookup(model: &Model, key: &[u8], got: &LookupResult) -> Result<(), TestCaseError> {
    let value = |v: &u64| v.to_le_bytes().to_vec();
    match (model.get(key), got) {
        (None, LookupResult::NotFound) => Ok(()),
        (Some((v, None)), LookupResult::Found(got)) => {
            prop_assert_eq!(&value(v), got, "value of {:?}", key);
            Ok(())
        }
        (Some((v, Some(_))), LookupResult::FoundWithBlob(got, _)) => {
            prop_assert_eq!(&value(v), got, "value of {:?}", key);
            Ok(())
        }
        (want, got) => Err(TestCaseError::fail(format!(
            "key {key:?}: model has {want:?}, table returned {got:?}"
        ))),
    }
}

/// Reads a whole table and compares it with `model`, blobs included.
pub fn check_table(table: &Table, model: &Model) -> Result<Result<(), Error>, TestCaseError> {
    let entries = match table.range_lookup(..) {
        Ok(entries) => entries,
        Err(e) => return Ok(Err(e)),
    };
    let got: Vec<(Vec<u8>, Vec<u8>, bool)> = entries
        .iter()
        .map(|e| (e.key.clone(), e.value.clone(), e.blob.is_some()))
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>, bool)> = model
        .iter()
        .map(|(k, (v, b))| (k.clone(), v.to_le_bytes().to_vec(), b.is_some()))
        .collect();
    prop_assert_eq!(got, want);
    let refs: Vec<_> = entries.iter().filter_map(|e| e.blob.clone()).collect();
    let blobs = match table.retrieve_blobs(&refs) {
        Ok(blobs) => blobs,
        Err(e) => return Ok(Err(e)),
    };
    let want: Vec<Vec<u8>> = model.values().filter_map(|(_, b)| b.clone()).collect();
    prop_assert_eq!(blobs, want);
    if let Some(auth) = table.config().auth {
        // The state root is the definition's root of exactly these contents.
        let root = match table.root() {
            Ok(root) => root,
            Err(e) => return Ok(Err(e)),
        };
        let values: BTreeMap<&[u8], [u8; 8]> = model
            .iter()
            .map(|(k, (v, _))| (&k[..], v.to_le_bytes()))
            .collect();
        let want = root_of(
            auth.hash,
            model
                .iter()
                .map(|(k, (_, b))| (&k[..], &values[&k[..]][..], b.as_deref())),
        );
        prop_assert_eq!(root.root.hash, want, "state root");
    }
    Ok(Ok(()))
}

macro_rules! io {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        }
    };
}

impl World {
    /// A new session in `/s` on `fs` with one empty table.
    pub fn new(fs: MemFs, config: TableConfig) -> World {
        fs.create_dir_all(Path::new(SESSION_DIR)).unwrap();
        // The session directory is the caller's: it makes it durable.
        fs.sync_dir(Path::new("/")).unwrap();
        let mut world = World {
            fs,
            config,
            session: None,
            tables: Vec::new(),
            snapshots: BTreeMap::new(),
            uncertain: None,
            exports: 0,
        };
        world.session = Some(world.open_session().expect("the first session opens"));
        let table = world.session().new_table(world.config.clone()).unwrap();
        world.tables.push((table, Model::new()));
        world
    }

    pub fn open_session(&self) -> Result<Session, Error> {
        Session::open_with(
            Arc::new(self.fs.clone()) as Arc<dyn FileSystem>,
            SESSION_DIR,
            SessionOptions::default().salt(Some(7)),
        )
    }

    pub fn session(&self) -> &Session {
        self.session.as_ref().expect("a session is open")
    }

    /// Drops every handle and closes the session.
    pub fn close_all(&mut self) {
        self.tables.clear();
        if let Some(session) = self.session.take() {
            session.close();
        }
    }

    /// Finishes the live table's write-buffer flush in progress (see `Table::settle`), if there
    /// is a live table.
    #[allow(dead_code)]
    pub fn settle(&mut self) -> Result<(), TestCaseError> {
        match self.tables.last() {
            Some((table, _)) => {
                table
                    .settle()
                    .map_err(|e| TestCaseError::fail(format!("settle: {e}")))?;
                // An authenticated table's commit writes the trie's pages to the session's
                // page log: the table's own writes, done before a snapshot's.
                if table.config().auth.is_some() {
                    table
                        .commit()
                        .map_err(|e| TestCaseError::fail(format!("commit: {e}")))?;
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn current(&mut self) -> Result<&mut (Table, Model), TestCaseError> {
        self.tables
            .last_mut()
            .ok_or_else(|| TestCaseError::fail("no live table"))
    }

    /// Whether another table may be opened (closing one inside an operation would do I/O that
    /// the operation cannot report).
    fn room(&self) -> bool {
        self.tables.len() < TABLES_MAX
    }

    /// Closes the current table (one that reported `TableBroken`); keeps one table live.
    /// Returns whether one was closed.
    pub fn close_current(&mut self) -> Result<bool, Error> {
        let Some((table, _)) = self.tables.pop() else {
            return Ok(false);
        };
        table.close();
        if self.tables.is_empty() {
            // Fails only if the disk does (a power loss in the middle, say).
            let table = self.session().new_table(self.config.clone())?;
            self.tables.push((table, Model::new()));
        }
        Ok(true)
    }

    /// After an error, without restarting: every live table must either answer exactly as its
    /// model says (a failed operation changed nothing) or refuse with `TableBroken` (a failed
    /// update or merge); broken tables are closed. Returns how many were broken.
    pub fn check_after_error(&mut self) -> Result<usize, TestCaseError> {
        let mut broken = 0;
        let mut kept = Vec::new();
        for (table, model) in std::mem::take(&mut self.tables) {
            match check_table(&table, &model)? {
                Ok(()) => kept.push((table, model)),
                Err(Error::TableBroken(_)) => {
                    broken += 1;
                    table.close();
                }
                Err(e) => {
                    return Err(TestCaseError::fail(format!(
                        "after an error a table neither works nor says it is broken: {e}"
                    )))
                }
            }
        }
        self.tables = kept;
        if self.tables.is_empty() {
            let table = self
                .session()
                .new_table(self.config.clone())
                .map_err(|e| TestCaseError::fail(format!("new_table after an error: {e}")))?;
            self.tables.push((table, Model::new()));
        }
        Ok(broken)
    }

    /// After an error or a power loss: drops every handle, opens the session again (without
    /// faults), and checks every snapshot. Each snapshot the model holds must be listed (unless
    /// the failed operation may have deleted it); each listed one must be known to the model (or
    /// possibly saved by the failed operation) and open with exactly the contents it was saved
    /// with. Then starts over with one empty table.
    pub fn restore_and_verify(&mut self) -> Result<usize, TestCaseError> {
        self.close_all();
        let session = self
            .open_session()
            .map_err(|e| TestCaseError::fail(format!("the session does not reopen: {e}")))?;
        let listed = session
            .list_snapshots()
            .map_err(|e| TestCaseError::fail(format!("list_snapshots: {e}")))?;
        self.session = Some(session);
        let mut certain = self.snapshots.clone();
        let mut possible = BTreeMap::new();
        match self.uncertain.clone() {
            Some(Uncertain::MaybeSaved(name, model)) => {
                possible.insert(name, model);
            }
            Some(Uncertain::MaybeDeleted(name)) => {
                if let Some(model) = certain.remove(&name) {
                    possible.insert(name, model);
                }
            }
            None => {}
        }
        for name in certain.keys() {
            prop_assert!(listed.contains(name), "snapshot {} was lost", name);
        }
        let mut snapshots = BTreeMap::new();
        for name in listed {
            let Some(model) = certain.get(&name).or_else(|| possible.get(&name)) else {
                return Err(TestCaseError::fail(format!("unexpected snapshot {name}")));
            };
            let table = self
                .session()
                .open_snapshot(&name, LABEL, SnapshotOverrides::default())
                .map_err(|e| TestCaseError::fail(format!("snapshot {name} does not open: {e}")))?;
            check_table(&table, model)?
                .map_err(|e| TestCaseError::fail(format!("snapshot {name} unreadable: {e}")))?;
            table.close();
            snapshots.insert(name, model.clone());
        }
        self.snapshots = snapshots;
        self.uncertain = None;
        let table = self
            .session()
            .new_table(self.config.clone())
            .map_err(|e| TestCaseError::fail(format!("new_table after restore: {e}")))?;
        self.tables.push((table, Model::new()));
        Ok(self.snapshots.len())
    }

    fn updates(&mut self, batch: &[(u8, Upd)]) -> StepResult {
        let keys: Vec<Vec<u8>> = batch.iter().map(|(k, _)| key(*k)).collect();
        let blobs: Vec<Vec<u8>> = batch
            .iter()
            .map(|(k, u)| match u {
                Upd::InsertWithBlob(_, b) => blob_bytes(*k, *b),
                _ => Vec::new(),
            })
            .collect();
        let values: Vec<[u8; 8]> = batch
            .iter()
            .map(|(_, u)| match u {
                Upd::Insert(v) | Upd::InsertWithBlob(v, _) | Upd::Upsert(v) => v.to_le_bytes(),
                Upd::Delete => [0; 8],
            })
            .collect();
        let ups: Vec<(&[u8], Update<'_>)> = batch
            .iter()
            .enumerate()
            .map(|(i, (_, u))| {
                let u = match u {
                    Upd::Insert(_) => Update::Insert(&values[i]),
                    Upd::InsertWithBlob(..) => Update::InsertWithBlob(&values[i], &blobs[i]),
                    Upd::Upsert(_) => Update::Upsert(&values[i]),
                    Upd::Delete => Update::Delete,
                };
                (keys[i].as_slice(), u)
            })
            .collect();
        let (table, model) = self.current()?;
        let result = match batch {
            [(k, Upd::Insert(v))] => table.insert(key(*k), v.to_le_bytes()),
            [(k, Upd::InsertWithBlob(v, b))] => {
                table.insert_with_blob(key(*k), v.to_le_bytes(), blob_bytes(*k, *b))
            }
            [(k, Upd::Upsert(v))] => table.upsert(key(*k), v.to_le_bytes()),
            [(k, Upd::Delete)] => table.delete(key(*k)),
            _ => table.updates(&ups),
        };
        io!(result);
        for (k, u) in batch {
            apply(model, *k, u);
        }
        Ok(Ok(()))
    }

    /// `inserts` (or, with `upsert`, `upserts`) of key-value pairs.
    fn pairs(&mut self, kvs: &[(u8, u64)], upsert: bool) -> StepResult {
        let pairs: Vec<(Vec<u8>, [u8; 8])> = kvs
            .iter()
            .map(|(k, v)| (key(*k), v.to_le_bytes()))
            .collect();
        let (table, model) = self.current()?;
        io!(if upsert {
            table.upserts(&pairs)
        } else {
            table.inserts(&pairs)
        });
        for (k, v) in kvs {
            let update = if upsert {
                Upd::Upsert(*v)
            } else {
                Upd::Insert(*v)
            };
            apply(model, *k, &update);
        }
        Ok(Ok(()))
    }

    /// Runs one operation against the engine and the model. `Ok(Err(e))`: the engine returned
    /// `e` (the model is unchanged); `Err`: the engine gave a wrong answer.
    pub fn step(&mut self, op: &Op) -> StepResult {
        match op {
            Op::Insert(k, v) => self.updates(&[(*k, Upd::Insert(*v))]),
            Op::InsertWithBlob(k, v, b) => self.updates(&[(*k, Upd::InsertWithBlob(*v, *b))]),
            Op::Delete(k) => self.updates(&[(*k, Upd::Delete)]),
            Op::Upsert(k, v) => self.updates(&[(*k, Upd::Upsert(*v))]),
            Op::Updates(batch) => self.updates(batch),
            Op::Inserts(kvs) => self.pairs(kvs, false),
            Op::Upserts(kvs) => self.pairs(kvs, true),
            Op::Deletes(ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                let (table, model) = self.current()?;
                io!(table.deletes(&keys));
                for k in ks {
                    apply(model, *k, &Upd::Delete);
                }
                Ok(Ok(()))
            }
            Op::Lookup(k) => {
                let (table, model) = self.current()?;
                let got = io!(table.lookup(key(*k)));
                check_lookup(model, &key(*k), &got)?;
                Ok(Ok(()))
            }
            Op::Lookups(ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                let (table, model) = self.current()?;
                let got = io!(table.lookups(&keys));
                prop_assert_eq!(got.len(), keys.len());
                for (k, r) in keys.iter().zip(&got) {
                    check_lookup(model, k, r)?;
                }
                Ok(Ok(()))
            }
            Op::Member(k) => {
                let (table, model) = self.current()?;
                let got = io!(table.member(key(*k)));
                prop_assert_eq!(got, model.contains_key(&key(*k)));
                Ok(Ok(()))
            }
            Op::Members(ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                let (table, model) = self.current()?;
                let got = io!(table.members(&keys));
                let want: Vec<bool> = keys.iter().map(|k| model.contains_key(k)).collect();
                prop_assert_eq!(got, want);
                Ok(Ok(()))
            }
            Op::RetrieveBlobs(ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                let (table, model) = self.current()?;
                let got = io!(table.lookups(&keys));
                let refs: Vec<_> = got.iter().filter_map(|r| r.blob().cloned()).collect();
                let want: Vec<Vec<u8>> = keys
                    .iter()
                    .filter_map(|k| model.get(k).and_then(|(_, b)| b.clone()))
                    .collect();
                let blobs = io!(match refs.as_slice() {
                    [one] => table.retrieve_blob(one).map(|b| vec![b]),
                    _ => table.retrieve_blobs(&refs),
                });
                prop_assert_eq!(blobs, want);
                Ok(Ok(()))
            }
            Op::RangeLookup(a, b) => {
                let (lo, hi) = (key(*a.min(b)), key(*a.max(b)));
                let (table, model) = self.current()?;
                let got = io!(table.range_lookup(lo.as_slice()..hi.as_slice()));
                let got: Vec<(Vec<u8>, Vec<u8>)> =
                    got.into_iter().map(|e| (e.key, e.value)).collect();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(lo.clone()..hi.clone())
                    .map(|(k, (v, _))| (k.clone(), v.to_le_bytes().to_vec()))
                    .collect();
                prop_assert_eq!(got, want);
                Ok(Ok(()))
            }
            Op::Cursor(start, n) => {
                let (table, model) = self.current()?;
                let mut cursor = io!(match start {
                    Some(k) => table.cursor_at(key(*k)),
                    None => table.cursor(),
                });
                let from = start.map(key).unwrap_or_default();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(from..)
                    .take(*n as usize)
                    .map(|(k, (v, _))| (k.clone(), v.to_le_bytes().to_vec()))
                    .collect();
                let got = io!(cursor
                    .by_ref()
                    .take(*n as usize)
                    .collect::<cairn::Result<Vec<_>>>());
                cursor.close();
                let got: Vec<(Vec<u8>, Vec<u8>)> =
                    got.into_iter().map(|e| (e.key, e.value)).collect();
                prop_assert_eq!(got, want);
                Ok(Ok(()))
            }
            Op::Duplicate => {
                if !self.room() {
                    return Ok(Ok(()));
                }
                let (table, model) = self.current()?;
                let copy = io!(table.duplicate());
                let model = model.clone();
                self.tables.push((copy, model));
                Ok(Ok(()))
            }
            Op::NewTable => {
                if !self.room() {
                    return Ok(Ok(()));
                }
                let table = io!(self.session().new_table(self.config.clone()));
                self.tables.push((table, Model::new()));
                Ok(Ok(()))
            }
            Op::Union => {
                if self.tables.len() < 2 || !self.room() {
                    return Ok(Ok(()));
                }
                let (left, left_model) = self.tables.last().expect("two tables");
                let (right, right_model) = &self.tables[0];
                let union = io!(left.incremental_union(right));
                let mut model = left_model.clone();
                for (k, (v, blob)) in right_model {
                    let entry = match model.remove(k) {
                        None => (*v, blob.clone()),
                        Some((newer, _)) => (newer.wrapping_add(*v), None),
                    };
                    model.insert(k.clone(), entry);
                }
                self.tables.push((union, model));
                Ok(Ok(()))
            }
            Op::SupplyUnion(n) => {
                let (table, _) = self.current()?;
                let debt = io!(table.remaining_union_debt());
                let credits = debt / *n as u64 + 1;
                let leftover = io!(table.supply_union_credits(credits));
                let after = io!(table.remaining_union_debt());
                prop_assert!(after <= debt, "debt grew from {} to {}", debt, after);
                prop_assert!(leftover <= credits);
                prop_assert!(
                    leftover == 0 || after == 0,
                    "credits left over while in debt"
                );
                Ok(Ok(()))
            }
            Op::CompleteMerges => {
                let (table, _) = self.current()?;
                io!(table.complete_merges());
                let stats = io!(table.stats());
                prop_assert_eq!(stats.merges_in_progress, 0);
                Ok(Ok(()))
            }
            Op::Stats => {
                let (table, _) = self.current()?;
                io!(table.stats());
                Ok(Ok(()))
            }
            Op::Select(i) => {
                if !self.tables.is_empty() {
                    let i = *i as usize % self.tables.len();
                    let t = self.tables.remove(i);
                    self.tables.push(t);
                }
                Ok(Ok(()))
            }
            Op::CloseOldest => {
                if self.tables.len() > 1 {
                    let (table, _) = self.tables.remove(0);
                    table.close();
                }
                Ok(Ok(()))
            }
            Op::Save(s) => {
                let name = snapshot_name(*s);
                if self.snapshots.contains_key(&name) {
                    return Ok(Ok(()));
                }
                let (table, model) = self.current()?;
                let model = model.clone();
                if let Err(e) = table.save_snapshot(&name, LABEL) {
                    self.uncertain = Some(Uncertain::MaybeSaved(name, model));
                    return Ok(Err(e));
                }
                self.snapshots.insert(name, model);
                Ok(Ok(()))
            }
            Op::OpenSnapshot(s) => {
                let name = snapshot_name(*s);
                let Some(model) = self.snapshots.get(&name).cloned() else {
                    return Ok(Ok(()));
                };
                if !self.room() {
                    return Ok(Ok(()));
                }
                let table =
                    io!(self
                        .session()
                        .open_snapshot(&name, LABEL, SnapshotOverrides::default()));
                io!(check_table(&table, &model)?);
                self.tables.push((table, model));
                Ok(Ok(()))
            }
            Op::DeleteSnapshot(s) => {
                let name = snapshot_name(*s);
                if !self.snapshots.contains_key(&name) {
                    return Ok(Ok(()));
                }
                if let Err(e) = self.session().delete_snapshot(&name) {
                    self.uncertain = Some(Uncertain::MaybeDeleted(name));
                    return Ok(Err(e));
                }
                self.snapshots.remove(&name);
                Ok(Ok(()))
            }
            Op::SnapshotExists(s) => {
                let name = snapshot_name(*s);
                let got = io!(self.session().snapshot_exists(&name));
                prop_assert_eq!(got, self.snapshots.contains_key(&name));
                Ok(Ok(()))
            }
            Op::ListSnapshots => {
                let got = io!(self.session().list_snapshots());
                let want: Vec<String> = self.snapshots.keys().cloned().collect();
                prop_assert_eq!(got, want);
                Ok(Ok(()))
            }
            Op::ExportImport(a, b) => {
                let (from, to) = (snapshot_name(*a), snapshot_name(*b));
                let Some(model) = self.snapshots.get(&from).cloned() else {
                    return Ok(Ok(()));
                };
                if self.snapshots.contains_key(&to) {
                    return Ok(Ok(()));
                }
                self.exports += 1;
                let target = PathBuf::from(format!("/exports/e{}", self.exports));
                io!(self.fs.create_dir_all(Path::new("/exports")));
                io!(self.session().export_snapshot(&from, &target));
                if let Err(e) = self.session().import_snapshot(&to, &target) {
                    self.uncertain = Some(Uncertain::MaybeSaved(to, model));
                    return Ok(Err(e));
                }
                self.snapshots.insert(to, model);
                Ok(Ok(()))
            }
            Op::Restart => {
                self.close_all();
                let session = io!(self.open_session());
                self.session = Some(session);
                let table = io!(self.session().new_table(self.config.clone()));
                self.tables.push((table, Model::new()));
                Ok(Ok(()))
            }
        }
    }
}

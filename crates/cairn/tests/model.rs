//! Drives the public API through random sequences of every table operation and compares each
//! answer with a `BTreeMap` model.
//!
//! Write buffers of 1 to 64 entries make flushes and merges happen every few operations; both
//! index types, both merge schedules and three resolve functions are covered. Most cases run on
//! the in-memory file system; some run on the real one (io_uring or pread, sometimes `O_DIRECT`).
//!
//! Cases: `CAIRN_MODEL_CASES` (default 2000).

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs, RealFs};
use std::ops::Bound;

use cairn::{
    BloomAlloc, DiskCachePolicy, Error, IndexType, IoBackendKind, LookupResult, MergeSchedule,
    Resolve, Session, SessionOptions, TableConfig, Update,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, Vec<u8>),
    InsertWithBlob(u16, Vec<u8>, Vec<u8>),
    Delete(u16),
    Upsert(u16, Vec<u8>),
    Updates(Vec<(u16, UpdateOp)>),
    Lookup(u16),
    Lookups(Vec<u16>),
    Member(u16),
    Members(Vec<u16>),
    RetrieveBlobs,
    RangeLookup(u16, u16, u8),
    OpenCursor(Option<u16>),
    ReadCursor(usize, usize),
    CloseCursor(usize),
    /// Make another live table the current one.
    Select(usize),
    /// Duplicate the current table (the copy joins the other live tables).
    Duplicate,
    /// Close another live table.
    CloseOther(usize),
    SaveSnapshot(u8),
    /// Open a snapshot as another live table.
    OpenSnapshot(u8),
    DeleteSnapshot(u8),
    /// Export a snapshot and import it under another name.
    ExportImport(u8, u8),
    /// Close every handle and the session, reopen it, and start from a new empty table.
    Restart,
    /// Start an incremental union of the current table and some others (left to right); the
    /// union joins the other live tables.
    Union(Vec<usize>),
    /// Pay 1/n of the current table's union debt.
    SupplyUnion(u8),
    /// Finish every merge in progress of the current table (`Table::complete_merges`).
    CompleteMerges,
    /// Insert this many fresh keys above every key so far, in one batch (block-ordered data:
    /// runs that overlap nothing older, which merges link instead of rewriting).
    Append(u8, Vec<u8>),
    /// Move an open cursor to the first key `>=` this one (`Cursor::seek`).
    SeekCursor(usize, u16),
    /// Read up to this many entries from the back of an open cursor (`next_back`).
    ReadCursorBack(usize, usize),
    /// A range read backwards (`Table::range(..).rev()`), as `RangeLookup`'s bounds.
    RangeBack(u16, u16, u8),
    /// A cursor over the keys starting with the first `n` bytes of this key (`Table::prefix`).
    Prefix(u16, u8),
}

#[derive(Clone, Debug)]
enum UpdateOp {
    Insert(Vec<u8>),
    InsertWithBlob(Vec<u8>, Vec<u8>),
    Upsert(Vec<u8>),
    Delete,
}

#[derive(Clone, Copy, Debug)]
enum ResolveKind {
    KeepNewest,
    AddU64,
    Concat,
}

#[derive(Clone, Debug)]
struct Setup {
    write_buffer: usize,
    index: IndexType,
    schedule: MergeSchedule,
    resolve: ResolveKind,
    merge_batch: usize,
    real_fs: bool,
    direct: bool,
    long_keys: bool,
    /// An authenticated table: its state root is checked against the definition after every
    /// operation that changes it, and for every table and snapshot at the end.
    auth: bool,
    /// The session runs merges on its background thread too
    /// (`SessionOptions::background_merges`), racing the operations.
    background: bool,
    /// The session keeps released run files to write new runs over
    /// (`SessionOptions::recycle_bytes` at its default; else 0): a reused file must never
    /// show its old bytes to a reader.
    recycle: bool,
    /// `TableConfig::last_level_bloom`: the deepest level's runs without a filter, or with a
    /// tiny one, must answer exactly as filtered runs do.
    last_level_bloom: Option<BloomAlloc>,
    /// `TableConfig::part_entries`: runs cut into parts of a few entries.
    part_entries: Option<u64>,
}

/// Key ids from here on are appended keys ([`Op::Append`]): above every other key.
const APPEND_BASE: u32 = 1 << 20;

fn key_bytes(k: u16, long: bool) -> Vec<u8> {
    key_id_bytes(u32::from(k), long)
}

fn key_id_bytes(k: u32, long: bool) -> Vec<u8> {
    if let Some(n) = k.checked_sub(APPEND_BASE) {
        // Above every short key and almost every long one.
        let mut key = vec![0xff, 0xff];
        key.extend_from_slice(&n.to_be_bytes());
        return key;
    }
    if long {
        // Uniform-looking 34-byte keys (like UTxO keys), derived from the small id.
        let mut key = Vec::with_capacity(34);
        let mut x = (k as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        while key.len() < 34 {
            x ^= x >> 29;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            key.extend_from_slice(&x.to_be_bytes());
        }
        key.truncate(34);
        key
    } else {
        // Short keys with shared prefixes: they clash in the compact index.
        format!("k{k}").into_bytes()
    }
}

fn value_strategy(resolve: ResolveKind) -> BoxedStrategy<Vec<u8>> {
    match resolve {
        ResolveKind::AddU64 => any::<u64>().prop_map(|v| v.to_le_bytes().to_vec()).boxed(),
        _ => prop_oneof![
            8 => prop::collection::vec(any::<u8>(), 0..12),
            1 => prop::collection::vec(any::<u8>(), 3000..9000),
        ]
        .boxed(),
    }
}

fn update_strategy(resolve: ResolveKind, keys: u16) -> impl Strategy<Value = (u16, UpdateOp)> {
    let v = value_strategy(resolve);
    (
        0..keys,
        prop_oneof![
            4 => v.clone().prop_map(UpdateOp::Insert),
            1 => (v.clone(), prop::collection::vec(any::<u8>(), 0..40))
                .prop_map(|(v, b)| UpdateOp::InsertWithBlob(v, b)),
            3 => v.prop_map(UpdateOp::Upsert),
            2 => Just(UpdateOp::Delete),
        ],
    )
}

fn op_strategy(resolve: ResolveKind, keys: u16) -> impl Strategy<Value = Op> {
    let v = value_strategy(resolve);
    prop_oneof![
        6 => (0..keys, v.clone()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (0..keys, v.clone(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(k, v, b)| Op::InsertWithBlob(k, v, b)),
        3 => (0..keys).prop_map(Op::Delete),
        4 => (0..keys, v).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => prop::collection::vec(update_strategy(resolve, keys), 0..80).prop_map(Op::Updates),
        3 => (0..keys).prop_map(Op::Lookup),
        3 => prop::collection::vec(0..keys, 0..40).prop_map(Op::Lookups),
        1 => (0..keys).prop_map(Op::Member),
        1 => prop::collection::vec(0..keys, 0..20).prop_map(Op::Members),
        2 => Just(Op::RetrieveBlobs),
        2 => (0..keys, 0..keys, 0u8..4).prop_map(|(a, b, kind)| Op::RangeLookup(a, b, kind)),
        1 => prop::option::of(0..keys).prop_map(Op::OpenCursor),
        3 => (0usize..5, 0usize..40).prop_map(|(c, n)| Op::ReadCursor(c, n)),
        1 => (0usize..5).prop_map(Op::CloseCursor),
        2 => (0usize..4).prop_map(Op::Select),
        1 => Just(Op::Duplicate),
        1 => (0usize..4).prop_map(Op::CloseOther),
        1 => (0u8..3).prop_map(Op::SaveSnapshot),
        1 => (0u8..3).prop_map(Op::OpenSnapshot),
        1 => (0u8..3).prop_map(Op::DeleteSnapshot),
        1 => (0u8..3, 0u8..3).prop_map(|(a, b)| Op::ExportImport(a, b)),
        1 => Just(Op::Restart),
        1 => prop::collection::vec(0usize..4, 1..4).prop_map(Op::Union),
        2 => (1u8..4).prop_map(Op::SupplyUnion),
        1 => Just(Op::CompleteMerges),
        3 => (1u8..24, prop::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(n, v)| Op::Append(n, v)),
        2 => (0usize..5, 0..keys).prop_map(|(c, k)| Op::SeekCursor(c, k)),
        2 => (0usize..5, 0usize..40).prop_map(|(c, n)| Op::ReadCursorBack(c, n)),
        1 => (0..keys, 0..keys, 0u8..4).prop_map(|(a, b, kind)| Op::RangeBack(a, b, kind)),
        2 => (0..keys, 0u8..6).prop_map(|(k, n)| Op::Prefix(k, n)),
    ]
}

fn setup_strategy() -> impl Strategy<Value = Setup> {
    (
        1usize..=64,
        prop_oneof![Just(IndexType::Compact), Just(IndexType::Ordinary)],
        prop_oneof![
            4 => Just(MergeSchedule::Incremental),
            1 => Just(MergeSchedule::OneShot)
        ],
        prop_oneof![
            Just(ResolveKind::KeepNewest),
            Just(ResolveKind::AddU64),
            Just(ResolveKind::Concat)
        ],
        prop_oneof![Just(1usize), 1usize..=16, Just(1000)],
        prop::bool::weighted(0.1),
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.5),
        (prop::bool::weighted(0.3), prop::bool::weighted(0.8)),
        prop_oneof![
            2 => Just(None),
            1 => Just(Some(BloomAlloc::None)),
            1 => Just(Some(BloomAlloc::BitsPerEntry(1.0)))
        ],
        prop_oneof![2 => Just(None), 1 => (1u64..=8).prop_map(Some)],
    )
        .prop_map(
            |(
                write_buffer,
                index,
                schedule,
                resolve,
                merge_batch,
                real_fs,
                direct,
                long_keys,
                auth,
                (background, recycle),
                last_level_bloom,
                part_entries,
            )| {
                Setup {
                    part_entries,
                    auth,
                    background,
                    recycle,
                    last_level_bloom,
                    write_buffer,
                    index,
                    schedule,
                    resolve,
                    merge_batch,
                    real_fs,
                    direct,
                    long_keys,
                }
            },
        )
}

fn case_strategy() -> impl Strategy<Value = (Setup, Vec<Op>)> {
    setup_strategy().prop_flat_map(|setup| {
        let keys = if setup.write_buffer > 16 { 300 } else { 60 };
        let ops = prop::collection::vec(op_strategy(setup.resolve, keys), 1..120);
        (Just(setup), ops)
    })
}

fn resolve_of(kind: ResolveKind) -> Resolve {
    match kind {
        ResolveKind::KeepNewest => Resolve::KeepNewest,
        ResolveKind::AddU64 => Resolve::AddU64Le,
        // Concatenation is associative; cap the length so values stay within limits.
        ResolveKind::Concat => Resolve::custom("concat", |newer, older| {
            let mut out = [newer, older].concat();
            out.truncate(20_000);
            out
        }),
    }
}

/// What a cursor must still return: (key, value) pairs in order.
type Expected = std::collections::VecDeque<(Vec<u8>, Vec<u8>)>;

/// The model: key -> (value, blob).
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

fn model_apply(model: &mut Model, resolve: &Resolve, key: Vec<u8>, op: &UpdateOp) {
    match op {
        UpdateOp::Insert(v) => {
            model.insert(key, (v.clone(), None));
        }
        UpdateOp::InsertWithBlob(v, b) => {
            model.insert(key, (v.clone(), Some(b.clone())));
        }
        UpdateOp::Upsert(v) => {
            let new = match model.get(&key) {
                Some((old, _)) => resolve.apply(v, old),
                None => v.clone(),
            };
            model.insert(key, (new, None));
        }
        UpdateOp::Delete => {
            model.remove(&key);
        }
    }
}

/// An authenticated table's root is the definition's root of its model (plain tables: nothing).
fn check_root(table: &cairn::Table, model: &Model) -> Result<(), TestCaseError> {
    let Some(auth) = table.config().auth else {
        return Ok(());
    };
    let want = cairn::cairn_proof::root_of(
        auth.hash,
        model
            .iter()
            .map(|(k, (v, b))| (&k[..], &v[..], b.as_deref())),
    );
    prop_assert_eq!(table.root().unwrap().root.hash, want, "state root");
    Ok(())
}

fn check_result(model: &Model, key: &[u8], got: &LookupResult) -> Result<(), TestCaseError> {
    match (model.get(key), got) {
        (None, LookupResult::NotFound) => Ok(()),
        (Some((v, None)), LookupResult::Found(got)) => {
            prop_assert_eq!(v, got, "value of {:?}", key);
            Ok(())
        }
        (Some((v, Some(_))), LookupResult::FoundWithBlob(got, _)) => {
            prop_assert_eq!(v, got, "value of {:?}", key);
            Ok(())
        }
        (want, got) => Err(TestCaseError::fail(format!(
            "key {key:?}: model has {want:?}, table returned {got:?}"
        ))),
    }
}

fn run_case(setup: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().unwrap();
    let (fs, dir): (Arc<dyn FileSystem>, std::path::PathBuf) = if setup.real_fs {
        (Arc::new(RealFs), tmp.path().to_path_buf())
    } else {
        let fs = MemFs::new();
        fs.create_dir_all(std::path::Path::new("/s")).unwrap();
        (Arc::new(fs), "/s".into())
    };
    let open_session = || {
        Session::open_with(
            fs.clone(),
            &dir,
            SessionOptions::default()
                .io_backend(IoBackendKind::Auto)
                .salt(Some(7))
                .read_only(false)
                .log(None)
                .background_merges(setup.background)
                .recycle_bytes(if setup.recycle {
                    SessionOptions::RECYCLE_BYTES_DEFAULT
                } else {
                    0
                }),
        )
        .unwrap()
    };
    let mut session = open_session();
    let resolve = resolve_of(setup.resolve);
    let config = TableConfig::default()
        .write_buffer_entries(setup.write_buffer)
        .merge_schedule(setup.schedule)
        .bloom(BloomAlloc::BitsPerEntry(4.0))
        .last_level_bloom(setup.last_level_bloom)
        .index(setup.index)
        .disk_cache(if setup.real_fs && setup.direct {
            DiskCachePolicy::None
        } else {
            DiskCachePolicy::LevelsUpTo(2)
        })
        .merge_batch_size(setup.merge_batch)
        .resolve(resolve.clone())
        .auth(setup.auth.then(|| {
            cairn::AuthConfig::default().retained_bytes(if setup.write_buffer.is_multiple_of(2) {
                0
            } else {
                20 << 20
            })
        }))
        .part_entries(setup.part_entries);
    let mut table = session.new_table(config.clone()).unwrap();
    // Appended keys so far (ids APPEND_BASE..APPEND_BASE + appended).
    let mut appended = 0u32;
    let mut model = Model::new();
    let mut updates = 0u64;
    // The other live tables (duplicates, opened snapshots): table, model, update count.
    let mut others: Vec<(cairn::Table, Model, u64)> = Vec::new();
    // Saved snapshots: name -> model and remaining union debt at the time of saving.
    let mut snapshots: BTreeMap<String, (Model, u64)> = BTreeMap::new();
    let snapshot_name = |s: u8| format!("snap-{s}");
    let mut exports = 0u32;
    let overrides = || cairn::SnapshotOverrides::default().resolve(Some(resolve.clone()));
    // Blob references from lookups: (reference, expected bytes, update count at the lookup).
    let mut blob_refs = Vec::new();
    // Open cursors: the cursor and the model's entries it must still return, in order.
    // With each, the whole view it was opened on (from its start key), for seeks.
    let mut cursors: Vec<(cairn::Cursor, Expected)> = Vec::new();
    let mut cursor_views: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::new();
    // Per cursor: the smallest key read from its back (its front stops before it).
    let mut cursor_backs: Vec<Option<Vec<u8>>> = Vec::new();
    let key = |k: u16| key_bytes(k, setup.long_keys);
    let remember = |blob_refs: &mut Vec<_>, model: &Model, k: &[u8], r: &LookupResult, at: u64| {
        if let (Some(blob), Some((_, Some(bytes)))) = (r.blob(), model.get(k)) {
            blob_refs.push((blob.clone(), bytes.clone(), at));
        }
    };
    let trace = std::env::var_os("CAIRN_MODEL_TRACE").is_some();
    for (step, op) in ops.iter().enumerate() {
        if setup.auth && step % 4 == 3 {
            check_root(&table, &model)?;
        }
        if trace {
            let mut text = format!("{op:?}");
            text.truncate(80);
            eprintln!("step {step}: {text} (others {})", others.len());
        }
        match op {
            Op::Append(n, v) => {
                let keys: Vec<Vec<u8>> = (0..u32::from(*n))
                    .map(|i| key_id_bytes(APPEND_BASE + appended + i, setup.long_keys))
                    .collect();
                appended += u32::from(*n);
                let batch: Vec<(&[u8], Update<'_>)> = keys
                    .iter()
                    .map(|k| (k.as_slice(), Update::Insert(v)))
                    .collect();
                table.updates(&batch).unwrap();
                for k in keys {
                    model_apply(&mut model, &resolve, k, &UpdateOp::Insert(v.clone()));
                }
                updates += u64::from(*n);
            }
            Op::Insert(k, v) => {
                table.insert(key(*k), v).unwrap();
                model_apply(&mut model, &resolve, key(*k), &UpdateOp::Insert(v.clone()));
                updates += 1;
            }
            Op::InsertWithBlob(k, v, b) => {
                table.insert_with_blob(key(*k), v, b).unwrap();
                let op = UpdateOp::InsertWithBlob(v.clone(), b.clone());
                model_apply(&mut model, &resolve, key(*k), &op);
                updates += 1;
            }
            Op::Delete(k) => {
                table.delete(key(*k)).unwrap();
                model_apply(&mut model, &resolve, key(*k), &UpdateOp::Delete);
                updates += 1;
            }
            Op::Upsert(k, v) => {
                table.upsert(key(*k), v).unwrap();
                model_apply(&mut model, &resolve, key(*k), &UpdateOp::Upsert(v.clone()));
                updates += 1;
            }
            Op::Updates(batch) => {
                let keys: Vec<Vec<u8>> = batch.iter().map(|(k, _)| key(*k)).collect();
                let ups: Vec<(&[u8], Update<'_>)> = batch
                    .iter()
                    .zip(&keys)
                    .map(|((_, u), k)| {
                        let u = match u {
                            UpdateOp::Insert(v) => Update::Insert(v),
                            UpdateOp::InsertWithBlob(v, b) => Update::InsertWithBlob(v, b),
                            UpdateOp::Upsert(v) => Update::Upsert(v),
                            UpdateOp::Delete => Update::Delete,
                        };
                        (k.as_slice(), u)
                    })
                    .collect();
                table.updates(&ups).unwrap();
                for ((_, u), k) in batch.iter().zip(keys) {
                    model_apply(&mut model, &resolve, k, u);
                }
                updates += batch.len() as u64;
            }
            Op::Lookup(k) => {
                let k = key(*k);
                let r = table.lookup(&k).unwrap();
                check_result(&model, &k, &r)?;
                remember(&mut blob_refs, &model, &k, &r, updates);
            }
            Op::Lookups(ks) => {
                let ks: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                let rs = table.lookups(&ks).unwrap();
                prop_assert_eq!(rs.len(), ks.len());
                for (k, r) in ks.iter().zip(&rs) {
                    check_result(&model, k, r)?;
                    remember(&mut blob_refs, &model, k, r, updates);
                }
            }
            Op::Member(k) => {
                let k = key(*k);
                prop_assert_eq!(table.member(&k).unwrap(), model.contains_key(&k));
            }
            Op::Members(ks) => {
                let ks: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
                let got = table.members(&ks).unwrap();
                let want: Vec<bool> = ks.iter().map(|k| model.contains_key(k)).collect();
                prop_assert_eq!(got, want);
            }
            Op::RangeLookup(a, b, kind) => {
                let (a, b) = (key(*a), key(*b));
                let lo = if kind & 1 == 0 {
                    Bound::Included(a.as_slice())
                } else {
                    Bound::Excluded(a.as_slice())
                };
                let hi = if kind & 2 == 0 {
                    Bound::Included(b.as_slice())
                } else {
                    Bound::Excluded(b.as_slice())
                };
                let valid = match (lo, hi) {
                    (Bound::Included(x), Bound::Included(y)) => x <= y,
                    (Bound::Included(x), Bound::Excluded(y))
                    | (Bound::Excluded(x), Bound::Included(y)) => x < y,
                    (Bound::Excluded(x), Bound::Excluded(y)) => x < y,
                    _ => true,
                };
                let got = table.range_lookup((lo, hi)).unwrap();
                let got: Vec<(Vec<u8>, Vec<u8>)> =
                    got.into_iter().map(|e| (e.key, e.value)).collect();
                let want: Vec<(Vec<u8>, Vec<u8>)> = if valid {
                    model
                        .range::<[u8], _>((lo, hi))
                        .map(|(k, (v, _))| (k.clone(), v.clone()))
                        .collect()
                } else {
                    Vec::new()
                };
                prop_assert_eq!(got, want);
            }
            Op::OpenCursor(from) => {
                if cursors.len() < 5 {
                    let (cursor, expected): (cairn::Cursor, Expected) = match from {
                        Some(k) => {
                            let k = key(*k);
                            let expected = model
                                .range(k.clone()..)
                                .map(|(k, (v, _))| (k.clone(), v.clone()))
                                .collect();
                            (table.cursor_at(&k).unwrap(), expected)
                        }
                        None => (
                            table.cursor().unwrap(),
                            model
                                .iter()
                                .map(|(k, (v, _))| (k.clone(), v.clone()))
                                .collect(),
                        ),
                    };
                    cursor_views.push(expected.iter().cloned().collect());
                    cursor_backs.push(None);
                    cursors.push((cursor, expected));
                }
            }
            Op::ReadCursor(c, n) => {
                if let Some((cursor, expected)) = cursors.get_mut(*c) {
                    let got = cursor
                        .by_ref()
                        .take(*n)
                        .collect::<cairn::Result<Vec<_>>>()
                        .unwrap();
                    for entry in got.iter() {
                        let want = expected.pop_front();
                        prop_assert_eq!(Some((entry.key.clone(), entry.value.clone())), want);
                    }
                    if got.len() < *n {
                        prop_assert!(expected.is_empty(), "cursor ended early");
                    }
                }
            }
            Op::SeekCursor(c, k) => {
                if let Some((cursor, expected)) = cursors.get_mut(*c) {
                    let k = key(*k);
                    cursor.seek(&k).unwrap();
                    let back = &cursor_backs[*c];
                    *expected = cursor_views[*c]
                        .iter()
                        .filter(|(key, _)| *key >= k && back.as_ref().is_none_or(|b| key < b))
                        .cloned()
                        .collect();
                }
            }
            Op::ReadCursorBack(c, n) => {
                if let Some((cursor, expected)) = cursors.get_mut(*c) {
                    let got = cursor
                        .by_ref()
                        .rev()
                        .take(*n)
                        .collect::<cairn::Result<Vec<_>>>()
                        .unwrap();
                    for entry in got.iter() {
                        let want = expected.pop_back();
                        prop_assert_eq!(Some((entry.key.clone(), entry.value.clone())), want);
                        cursor_backs[*c] = Some(entry.key.clone());
                    }
                    if got.len() < *n {
                        prop_assert!(expected.is_empty(), "cursor ended early from the back");
                    }
                }
            }
            Op::RangeBack(a, b, kind) => {
                let (a, b) = (key(*a), key(*b));
                let (lo, hi) = match kind {
                    0 => (Bound::Included(a), Bound::Excluded(b)),
                    1 => (Bound::Included(a), Bound::Included(b)),
                    2 => (Bound::Excluded(a), Bound::Unbounded),
                    _ => (Bound::Unbounded, Bound::Excluded(b)),
                };
                let valid = match (&lo, &hi) {
                    (Bound::Included(x), Bound::Included(y)) => x <= y,
                    (Bound::Included(x), Bound::Excluded(y))
                    | (Bound::Excluded(x), Bound::Included(y)) => x < y,
                    (Bound::Excluded(x), Bound::Excluded(y)) => x < y,
                    _ => true,
                };
                let got: Vec<(Vec<u8>, Vec<u8>)> = table
                    .range((lo.clone(), hi.clone()))
                    .unwrap()
                    .rev()
                    .map(|e| e.map(|e| (e.key, e.value)))
                    .collect::<cairn::Result<_>>()
                    .unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = if valid {
                    model
                        .range::<Vec<u8>, _>((lo, hi))
                        .rev()
                        .map(|(k, (v, _))| (k.clone(), v.clone()))
                        .collect()
                } else {
                    Vec::new()
                };
                prop_assert_eq!(got, want);
            }
            Op::Prefix(k, n) => {
                let k = key(*k);
                let prefix = &k[..usize::from(*n).min(k.len())];
                let got: Vec<(Vec<u8>, Vec<u8>)> = table
                    .prefix(prefix)
                    .unwrap()
                    .map(|e| e.map(|e| (e.key, e.value)))
                    .collect::<cairn::Result<_>>()
                    .unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .iter()
                    .filter(|(key, _)| key.starts_with(prefix))
                    .map(|(k, (v, _))| (k.clone(), v.clone()))
                    .collect();
                prop_assert_eq!(got, want);
            }
            Op::CloseCursor(c) => {
                if *c < cursors.len() {
                    let (mut cursor, _) = cursors.remove(*c);
                    cursor_views.remove(*c);
                    cursor_backs.remove(*c);
                    cursor.close();
                    prop_assert!(matches!(cursor.next(), Some(Err(Error::CursorClosed))));
                }
            }
            Op::Select(t) => {
                if let Some(other) = others.get_mut(*t) {
                    std::mem::swap(&mut table, &mut other.0);
                    std::mem::swap(&mut model, &mut other.1);
                    std::mem::swap(&mut updates, &mut other.2);
                    blob_refs.clear();
                }
            }
            Op::Duplicate => {
                if others.len() < 4 {
                    others.push((table.duplicate().unwrap(), model.clone(), 0));
                }
            }
            Op::CloseOther(t) => {
                if *t < others.len() {
                    let (other, _, _) = others.remove(*t);
                    other.close();
                    prop_assert!(matches!(other.lookup(b"k"), Err(Error::TableClosed)));
                }
            }
            Op::SaveSnapshot(s) => {
                let name = snapshot_name(*s);
                let debt = table.remaining_union_debt().unwrap();
                match table.save_snapshot(&name, "model") {
                    Ok(()) => {
                        prop_assert!(!snapshots.contains_key(&name), "saved over {}", name);
                        snapshots.insert(name, (model.clone(), debt));
                    }
                    Err(Error::SnapshotExists(_)) => prop_assert!(snapshots.contains_key(&name)),
                    Err(e) => return Err(TestCaseError::fail(format!("save: {e}"))),
                }
                let listed = session.list_snapshots().unwrap();
                prop_assert_eq!(listed, snapshots.keys().cloned().collect::<Vec<_>>());
            }
            Op::OpenSnapshot(s) => {
                let name = snapshot_name(*s);
                match session.open_snapshot(&name, "model", overrides()) {
                    Ok(t) => {
                        let Some((saved, debt)) = snapshots.get(&name) else {
                            return Err(TestCaseError::fail("opened a snapshot never saved"));
                        };
                        // A union in progress is restored with at most the debt it had (a nested
                        // union that has finished since is recorded as its run: a tighter bound).
                        let restored = t.remaining_union_debt().unwrap();
                        prop_assert!(restored <= *debt, "debt grew from {} to {}", debt, restored);
                        if others.len() < 4 {
                            others.push((t, saved.clone(), 0));
                        }
                    }
                    Err(Error::SnapshotMissing(_)) => prop_assert!(!snapshots.contains_key(&name)),
                    Err(e) => return Err(TestCaseError::fail(format!("open: {e}"))),
                }
            }
            Op::DeleteSnapshot(s) => {
                let name = snapshot_name(*s);
                let existed = snapshots.remove(&name).is_some();
                match session.delete_snapshot(&name) {
                    Ok(()) => prop_assert!(existed),
                    Err(Error::SnapshotMissing(_)) => prop_assert!(!existed),
                    Err(e) => return Err(TestCaseError::fail(format!("delete: {e}"))),
                }
            }
            Op::ExportImport(a, b) => {
                let (from, to) = (snapshot_name(*a), snapshot_name(*b));
                exports += 1;
                let export_dir = dir.join(format!("export-{exports}"));
                if snapshots.contains_key(&from) && !snapshots.contains_key(&to) {
                    session.export_snapshot(&from, &export_dir).unwrap();
                    session.import_snapshot(&to, &export_dir).unwrap();
                    let copied = snapshots[&from].clone();
                    snapshots.insert(to, copied);
                }
            }
            Op::Union(picks) => {
                if others.len() < 4 {
                    let mut tables = vec![&table];
                    let mut models = vec![&model];
                    for &p in picks {
                        if let Some((t, m, _)) = others.get(p) {
                            tables.push(t);
                            models.push(m);
                        }
                    }
                    let union = cairn::Table::incremental_unions(&tables).unwrap();
                    let mut union_model = Model::new();
                    for m in models {
                        for (k, (v, blob)) in m {
                            let entry = match union_model.remove(k) {
                                None => (v.clone(), blob.clone()),
                                Some((left, _)) => (resolve.apply(&left, v), None),
                            };
                            union_model.insert(k.clone(), entry);
                        }
                    }
                    others.push((union, union_model, 0));
                }
            }
            Op::SupplyUnion(n) => {
                let debt = table.remaining_union_debt().unwrap();
                let leftover = table.supply_union_credits(debt / (*n as u64)).unwrap();
                let after = table.remaining_union_debt().unwrap();
                prop_assert!(after <= debt, "union debt grew from {} to {}", debt, after);
                if leftover > 0 {
                    prop_assert_eq!(after, 0);
                }
            }
            Op::CompleteMerges => {
                table.complete_merges().unwrap();
                let stats = table.stats().unwrap();
                prop_assert_eq!(stats.merges_in_progress, 0);
            }
            Op::Restart => {
                for (other, _, _) in others.drain(..) {
                    other.close();
                }
                table.close();
                session.close();
                // Closing the session closed its cursors.
                for (mut cursor, _) in cursors.drain(..) {
                    prop_assert!(matches!(cursor.next(), Some(Err(Error::CursorClosed))));
                }
                cursor_views.clear();
                cursor_backs.clear();
                session = open_session();
                table = session.new_table(config.clone()).unwrap();
                model = Model::new();
                updates = 0;
                blob_refs.clear();
                prop_assert!(fs.list_dir(&dir.join("active")).unwrap().is_empty());
            }
            Op::RetrieveBlobs => {
                for (blob, bytes, at) in &blob_refs {
                    match table.retrieve_blob(blob) {
                        Ok(got) => {
                            prop_assert_eq!(*at, updates, "a stale reference was accepted");
                            prop_assert_eq!(&got, bytes);
                        }
                        Err(Error::BlobRefInvalid) => {
                            prop_assert!(*at != updates, "a current reference was rejected")
                        }
                        Err(e) => return Err(TestCaseError::fail(format!("retrieve: {e}"))),
                    }
                }
            }
        }
    }
    // Finally every key must agree, and every state root.
    let all: Vec<Vec<u8>> = (0..300)
        .map(|k| key_id_bytes(k, setup.long_keys))
        .chain((0..appended).map(|i| key_id_bytes(APPEND_BASE + i, setup.long_keys)))
        .collect();
    for (k, r) in all.iter().zip(table.lookups(&all).unwrap()) {
        check_result(&model, k, &r)?;
    }
    check_root(&table, &model)?;
    for (other, other_model, _) in &others {
        check_root(other, other_model)?;
    }
    // Every other live table matches its model, and every saved snapshot its own.
    for (i, (other, other_model, _)) in others.iter().enumerate() {
        if trace {
            eprintln!("final check of other table {i}");
        }
        for (k, r) in all.iter().zip(other.lookups(&all).unwrap()) {
            check_result(other_model, k, &r)?;
        }
    }
    for (name, (saved, _)) in &snapshots {
        if trace {
            eprintln!("final check of snapshot {name}");
        }
        let t = session.open_snapshot(name, "model", overrides()).unwrap();
        for (k, r) in all.iter().zip(t.lookups(&all).unwrap()) {
            check_result(saved, k, &r)?;
        }
        check_root(&t, saved)?;
        t.close();
    }
    for (other, _, _) in others.drain(..) {
        other.close();
    }
    // Every open cursor still sees exactly the table as it was when it opened.
    for (mut cursor, expected) in cursors.drain(..) {
        let got: Vec<(Vec<u8>, Vec<u8>)> = cursor
            .by_ref()
            .take(usize::MAX)
            .collect::<cairn::Result<Vec<_>>>()
            .unwrap()
            .into_iter()
            .map(|e| (e.key, e.value))
            .collect();
        prop_assert_eq!(got, Vec::from(expected));
    }
    // Closing the table releases every run: no file may be left behind.
    drop(blob_refs);
    table.close();
    let leftovers = fs.list_dir(&dir.join("active")).unwrap();
    prop_assert!(
        leftovers.is_empty(),
        "files left after close: {:?}",
        leftovers
    );
    Ok(())
}

fn cases() -> u32 {
    std::env::var("CAIRN_MODEL_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn table_matches_model((setup, ops) in case_strategy()) {
        run_case(&setup, &ops)?;
    }
}

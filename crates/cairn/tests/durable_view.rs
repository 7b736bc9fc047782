//! `Session::durable_view`: a read-only session's view of another session's durable tables
//! agrees with a model of every update, for lookups and ranges, while the owner is alive (its
//! log synced, checkpoints taken now and then) and after it stopped without a checkpoint; it
//! writes nothing.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use cairn::{LogOptions, Resolve, Session, SessionOptions, TableConfig, Update};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u8),
    InsertBlob(u8, u8),
    Upsert(u8, u8),
    Delete(u8),
    Checkpoint,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..40, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
        1 => (0u8..40, any::<u8>()).prop_map(|(k, v)| Op::InsertBlob(k, v)),
        3 => (0u8..40, any::<u8>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => (0u8..40).prop_map(Op::Delete),
        1 => Just(Op::Checkpoint),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

/// Value and blob.
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

fn read_only(dir: &Path) -> Session {
    Session::open_with_options(dir, SessionOptions::default().read_only(true)).unwrap()
}

/// Every file under `dir` and its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tree(&path));
        } else if path.file_name().is_some_and(|n| n != "lock") {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

fn check(dir: &Path, model: &Model, bounds: (u8, u8)) {
    let before = tree(dir);
    let session = read_only(dir);
    let view = session.durable_view().unwrap();
    assert_eq!(view.tables(), ["coins"]);
    let table = view.table("coins").unwrap();
    for k in 0..40 {
        let got = table.get(&key(k), true).unwrap();
        let want = model.get(&key(k));
        assert_eq!(
            got.as_ref().map(|e| (&e.value, &e.blob)),
            want.map(|(v, b)| (v, b)),
            "key {k}"
        );
    }
    let all: Vec<_> = (table
        .range((Bound::Unbounded, Bound::Unbounded), true)
        .unwrap())
    .map(|e| e.map(|e| (e.key, (e.value, e.blob))))
    .collect::<cairn::Result<_>>()
    .unwrap();
    let want: Vec<_> = model.clone().into_iter().collect();
    assert_eq!(all, want);
    let (lo, hi) = (key(bounds.0), key(bounds.1));
    let range = (Bound::Included(lo.clone()), Bound::Excluded(hi.clone()));
    let some: Vec<Vec<u8>> = (table.range(range, false).unwrap())
        .map(|e| e.map(|e| e.key))
        .collect::<cairn::Result<_>>()
        .unwrap();
    let want: Vec<Vec<u8>> = (model.keys())
        .filter(|k| **k >= lo && **k < hi)
        .cloned()
        .collect();
    assert_eq!(some, want, "range {bounds:?}");
    drop(view);
    session.close();
    assert_eq!(tree(dir), before, "the view wrote nothing");
}

fn run(ops: &[Op], bounds: (u8, u8), crash: bool) {
    let dir = tempfile::tempdir().unwrap();
    let options = SessionOptions::default().log(Some(LogOptions::default().segment_bytes(4096)));
    let owner = Session::open_with_options(dir.path(), options).unwrap();
    let config = TableConfig::default()
        .write_buffer_entries(8)
        .merge_batch_size(2)
        .resolve(Resolve::AddU64Le);
    let coins = owner.table("coins", config).unwrap();
    let mut model = Model::new();
    for op in ops {
        match *op {
            Op::Insert(k, v) => {
                let value = u64::from(v).to_le_bytes();
                coins.insert(key(k), value).unwrap();
                model.insert(key(k), (value.to_vec(), None));
            }
            Op::InsertBlob(k, v) => {
                let value = u64::from(v).to_le_bytes();
                let blob = vec![v; 100];
                coins
                    .updates(&[(key(k), Update::InsertWithBlob(&value, &blob))])
                    .unwrap();
                model.insert(key(k), (value.to_vec(), Some(blob)));
            }
            Op::Upsert(k, v) => {
                let value = u64::from(v).to_le_bytes();
                coins.upsert(key(k), value).unwrap();
                let now = match model.get(&key(k)) {
                    Some((old, _)) => (u64::from_le_bytes(old[..].try_into().unwrap())
                        + u64::from(v))
                    .to_le_bytes(),
                    None => value,
                };
                model.insert(key(k), (now.to_vec(), None));
            }
            Op::Delete(k) => {
                coins.delete(key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Checkpoint => owner.checkpoint().unwrap(),
        }
    }
    owner.sync_log().unwrap();
    if crash {
        // Stopped without the checkpoint a close takes: the log holds what came after the
        // last one.
        drop(coins);
        drop(owner);
        check(dir.path(), &model, bounds);
    } else {
        // The owner is alive and holds the lock.
        check(dir.path(), &model, bounds);
        drop(coins);
        owner.close();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_view_agrees_with_the_model(
        ops in prop::collection::vec(op(), 1..120),
        bounds in (0u8..40, 0u8..40),
        crash in any::<bool>(),
    ) {
        run(&ops, bounds, crash);
    }
}

#[test]
fn a_session_without_a_log_has_no_view() {
    let dir = tempfile::tempdir().unwrap();
    Session::open_with_options(dir.path(), SessionOptions::default().log(None))
        .unwrap()
        .close();
    let session = read_only(dir.path());
    assert!(matches!(
        session.durable_view(),
        Err(cairn::Error::NotDurable(_))
    ));
}

#[test]
fn the_view_replays_the_log_after_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Session::open(dir.path()).unwrap();
    let table = owner.table("coins", TableConfig::default()).unwrap();
    table.insert("a", "1").unwrap();
    owner.checkpoint().unwrap();
    table.insert("b", "2").unwrap();
    table.delete("a").unwrap();
    owner.sync_log().unwrap();
    let reader = read_only(dir.path());
    let view = reader.durable_view().unwrap();
    let live = view.table("coins").unwrap();
    assert_eq!(live.replayed(), 2);
    assert_eq!(live.changed_keys(), 2);
    assert!(live.get(b"a", false).unwrap().is_none());
    assert_eq!(live.get(b"b", false).unwrap().unwrap().value, b"2");
    assert!(view.last_seq() >= 2);
}

#[test]
fn an_authenticated_durable_table_has_a_view_too() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Session::open(dir.path()).unwrap();
    let config = TableConfig::default()
        .write_buffer_entries(16)
        .auth(Some(cairn::AuthConfig::default()));
    let table = owner.table("accounts", config).unwrap();
    for i in 0..100u32 {
        table.insert(format!("a{i:03}"), i.to_le_bytes()).unwrap();
    }
    table.commit().unwrap();
    owner.checkpoint().unwrap();
    table.insert("a000", "changed").unwrap();
    table.commit().unwrap();
    owner.sync_log().unwrap();
    let reader = read_only(dir.path());
    let view = reader.durable_view().unwrap();
    let live = view.table("accounts").unwrap();
    assert_eq!(live.get(b"a000", false).unwrap().unwrap().value, b"changed");
    assert_eq!(
        live.get(b"a099", false).unwrap().unwrap().value,
        99u32.to_le_bytes()
    );
    let n = (live
        .range((Bound::Unbounded, Bound::Unbounded), false)
        .unwrap())
    .count();
    assert_eq!(n, 100);
}

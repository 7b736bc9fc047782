//! `Table::duplicate`: independently writable copies that share runs and merges in progress.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod common;

use cairn::fs::{FileSystem, MemFs};
use cairn::{IndexType, MergeSchedule, Resolve, Session, SessionOptions, Table, TableConfig};
use common::TestFs;
use proptest::prelude::*;

fn session(fs: Arc<dyn FileSystem>) -> Session {
    fs.create_dir_all(Path::new("/s")).unwrap();
    Session::open_with(fs, "/s", SessionOptions::default()).unwrap()
}

fn key(k: u16) -> Vec<u8> {
    (k as u64 + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .to_be_bytes()
        .to_vec()
}

#[test]
fn duplicate_writes_no_data() {
    let fs = Arc::new(TestFs::default());
    let session = session(fs.clone());
    let table = session
        .new_table(
            TableConfig::default()
                .write_buffer_entries(16)
                .merge_batch_size(4)
                .index(IndexType::Compact),
        )
        .unwrap();
    // 313 write buffers and one entry: the last full buffer is frozen, its flush (spread over
    // the next updates) in progress with nothing written yet.
    for i in 0..5_009u16 {
        table.insert(key(i), i.to_le_bytes()).unwrap();
    }
    let stats = table.stats().unwrap();
    assert!(
        stats.levels >= 3 && stats.merges_in_progress > 0,
        "{stats:?}"
    );
    let (files, bytes) = (
        fs.files_created.load(Ordering::Relaxed),
        fs.bytes_written.load(Ordering::Relaxed),
    );
    let copy = table.duplicate().unwrap();
    assert_eq!(fs.files_created.load(Ordering::Relaxed), files);
    assert_eq!(fs.bytes_written.load(Ordering::Relaxed), bytes);
    assert_eq!(copy.stats().unwrap().runs, stats.runs);
    // The copy answers like the original, the frozen buffer's entries included.
    let keys: Vec<_> = (0..5_009u16).map(key).collect();
    for (i, r) in copy.lookups(&keys).unwrap().iter().enumerate() {
        assert_eq!(r.value(), Some(&(i as u16).to_le_bytes()[..]));
    }
    // Updated apart, each finishes its flush and answers for its own updates only.
    for i in 0..100u16 {
        table.insert(key(i), [1]).unwrap();
        copy.insert(key(i), [2]).unwrap();
    }
    for (handle, mark) in [(&table, 1u8), (&copy, 2)] {
        for (i, r) in handle.lookups(&keys).unwrap().iter().enumerate() {
            let want = if i < 100 {
                vec![mark]
            } else {
                (i as u16).to_le_bytes().to_vec()
            };
            assert_eq!(r.value(), Some(&want[..]));
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(usize, u16, u64),
    Upsert(usize, u16, u64),
    Delete(usize, u16),
    Duplicate(usize),
    Close(usize),
    Check(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let h = 0usize..4;
    let k = 0u16..200;
    prop_oneof![
        6 => (h.clone(), k.clone(), any::<u64>()).prop_map(|(h, k, v)| Op::Insert(h, k, v)),
        4 => (h.clone(), k.clone(), 0u64..100).prop_map(|(h, k, v)| Op::Upsert(h, k, v)),
        3 => (h.clone(), k).prop_map(|(h, k)| Op::Delete(h, k)),
        1 => h.clone().prop_map(Op::Duplicate),
        1 => h.clone().prop_map(Op::Close),
        1 => h.prop_map(Op::Check),
    ]
}

type Model = BTreeMap<Vec<u8>, u64>;

fn check(table: &Table, model: &Model) -> Result<(), TestCaseError> {
    let keys: Vec<_> = (0..200u16).map(key).collect();
    for (k, r) in keys.iter().zip(table.lookups(&keys).unwrap()) {
        let want = model.get(k).map(|v| v.to_le_bytes().to_vec());
        prop_assert_eq!(r.value().map(<[u8]>::to_vec), want);
    }
    let scanned: Vec<(Vec<u8>, u64)> = table
        .cursor()
        .unwrap()
        .by_ref()
        .take(usize::MAX)
        .collect::<cairn::Result<Vec<_>>>()
        .unwrap()
        .into_iter()
        .map(|e| (e.key, u64::from_le_bytes(e.value.try_into().unwrap())))
        .collect();
    let want: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    prop_assert_eq!(scanned, want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Duplicates are written independently and each matches its own model; closing every
    /// handle leaves no run file behind.
    #[test]
    fn duplicates_are_independent(
        write_buffer in 1usize..16,
        merge_batch in 1usize..8,
        one_shot in prop::bool::weighted(0.2),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        let session = session(fs.clone());
        let schedule = if one_shot {
            MergeSchedule::OneShot
        } else {
            MergeSchedule::Incremental
        };
        let config = TableConfig::default()
            .write_buffer_entries(write_buffer)
            .merge_batch_size(merge_batch)
            .merge_schedule(schedule)
            .resolve(Resolve::AddU64Le);
        let mut handles: Vec<(Table, Model)> = vec![(session.new_table(config).unwrap(), Model::new())];
        for op in ops {
            match op {
                Op::Insert(h, k, v) => if let Some((t, m)) = handles.get_mut(h) {
                    t.insert(key(k), v.to_le_bytes()).unwrap();
                    m.insert(key(k), v);
                },
                Op::Upsert(h, k, v) => if let Some((t, m)) = handles.get_mut(h) {
                    t.upsert(key(k), v.to_le_bytes()).unwrap();
                    let e = m.entry(key(k)).or_insert(0);
                    *e = e.wrapping_add(v);
                },
                Op::Delete(h, k) => if let Some((t, m)) = handles.get_mut(h) {
                    t.delete(key(k)).unwrap();
                    m.remove(&key(k));
                },
                Op::Duplicate(h) => if handles.len() < 5 {
                    if let Some((t, m)) = handles.get(h) {
                        let copy = (t.duplicate().unwrap(), m.clone());
                        handles.push(copy);
                    }
                },
                Op::Close(h) => if h < handles.len() && handles.len() > 1 {
                    let (t, _) = handles.remove(h);
                    t.close();
                },
                Op::Check(h) => if let Some((t, m)) = handles.get(h) {
                    check(t, m)?;
                },
            }
        }
        for (t, m) in &handles {
            check(t, m)?;
        }
        for (t, _) in handles {
            t.close();
        }
        let leftovers = fs.list_dir(Path::new("/s/active")).unwrap();
        prop_assert!(leftovers.is_empty(), "files left: {:?}", leftovers);
    }
}

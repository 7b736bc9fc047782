//! Unions of unions, paid through duplicates, saved and reopened mid-way: every step is checked
//! against a model (a deterministic companion to the model test).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{Resolve, Session, SessionOptions, SnapshotOverrides, Table, TableConfig};

fn concat() -> Resolve {
    Resolve::custom("concat", |n, o| {
        let mut v = [n, o].concat();
        v.truncate(20_000);
        v
    })
}

fn check(t: &Table, m: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    for k in 0..300u32 {
        let key = k.to_be_bytes().to_vec();
        let got = t.lookup(&key).unwrap().value().map(|v| v.to_vec());
        assert_eq!(
            got.as_ref().map(|v| v.len()),
            m.get(&key).map(|v| v.len()),
            "{what}: key {k}"
        );
        assert_eq!(got.as_ref(), m.get(&key), "{what}: key {k}");
    }
}

#[test]
fn nested_unions_survive_snapshots_at_every_stage() {
    for wb in [1usize, 3, 8, 63] {
        let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
        fs.create_dir_all(Path::new("/s")).unwrap();
        let s = Session::open_with(fs, "/s", SessionOptions::default()).unwrap();
        let cfg = TableConfig::default()
            .write_buffer_entries(wb)
            .merge_batch_size(3)
            .resolve(concat());
        let t0 = s.new_table(cfg).unwrap();
        let mut m0: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for i in 0..200u32 {
            let k = (i % 150).to_be_bytes().to_vec();
            let v = vec![(i % 251) as u8; if i % 37 == 0 { 5000 } else { 5 }];
            if i % 3 == 0 {
                t0.upsert(&k, &v).unwrap();
                let nv = match m0.get(&k) {
                    Some(old) => concat().apply(&v, old),
                    None => v.clone(),
                };
                m0.insert(k, nv);
            } else {
                t0.insert(&k, &v).unwrap();
                m0.insert(k, v);
            }
        }
        let u1 = Table::incremental_unions(&[&t0]).unwrap();
        check(&u1, &m0, "u1 fresh");
        let d1 = u1.duplicate().unwrap();
        t0.close();
        let debt = u1.remaining_union_debt().unwrap();
        u1.supply_union_credits(debt / 2).unwrap();
        check(&u1, &m0, "u1 half");
        check(&d1, &m0, "d1 half");
        let u2 = Table::incremental_unions(&[&u1, &d1]).unwrap();
        let mut m2: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for m in [&m0, &m0] {
            for (k, v) in m {
                let e = match m2.remove(k) {
                    None => v.clone(),
                    Some(left) => concat().apply(&left, v),
                };
                m2.insert(k.clone(), e);
            }
        }
        check(&u2, &m2, "u2 fresh");
        let debt = u1.remaining_union_debt().unwrap();
        u1.supply_union_credits(debt / 2).unwrap();
        check(&u2, &m2, "u2 after u1 paid more");
        u2.save_snapshot("x", "l").unwrap();
        let o = s
            .open_snapshot(
                "x",
                "l",
                SnapshotOverrides::default().resolve(Some(concat())),
            )
            .unwrap();
        check(&o, &m2, "opened");
        let debt = o.remaining_union_debt().unwrap();
        o.supply_union_credits(debt / 2).unwrap();
        check(&o, &m2, "opened half");
        o.supply_union_credits(u64::MAX).unwrap();
        check(&o, &m2, "opened paid");
    }
}

#[test]
fn unions_need_one_resolve_function() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    fs.create_dir_all(Path::new("/s")).unwrap();
    let s = Session::open_with(fs, "/s", SessionOptions::default()).unwrap();
    let a = s.new_table(TableConfig::default()).unwrap();
    let b = s
        .new_table(TableConfig::default().resolve(Resolve::AddU64Le))
        .unwrap();
    assert!(matches!(
        Table::incremental_unions(&[&a, &b]),
        Err(cairn::Error::InvalidConfig(_))
    ));
    assert!(matches!(
        Table::incremental_unions(&[]),
        Err(cairn::Error::InvalidConfig(_))
    ));
}

/// A finished union migrates to the level its size calls for, so the merges that later take it
/// in stay within the per-update bound.
#[test]
fn a_migrated_union_keeps_the_merge_bound() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    fs.create_dir_all(Path::new("/s")).unwrap();
    let s = Session::open_with(fs, "/s", SessionOptions::default()).unwrap();
    let cfg = TableConfig::default()
        .write_buffer_entries(16)
        .merge_batch_size(1);
    let input = s.new_table(cfg.clone()).unwrap();
    for i in 0..20_000u32 {
        input.insert(i.to_be_bytes(), b"v").unwrap();
    }
    let union = Table::unions(&[&input]).unwrap();
    for i in 20_000..40_000u32 {
        union.insert(i.to_be_bytes(), b"w").unwrap();
        let stats = union.stats().unwrap();
        assert!(
            stats.merge_steps_last_update <= stats.merge_steps_bound_per_update,
            "{stats:?}"
        );
    }
    assert_eq!(
        union.lookup(5u32.to_be_bytes()).unwrap().value(),
        Some(&b"v"[..])
    );
    assert_eq!(
        union.lookup(25_000u32.to_be_bytes()).unwrap().value(),
        Some(&b"w"[..])
    );
}

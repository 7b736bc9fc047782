//! The public API driven by a byte stream of operations, compared with a `BTreeMap` model:
//! inserts, deletes, upserts (concatenation), lookups, range lookups, cursors, duplicates,
//! snapshots and unions on the in-memory file system with a tiny write buffer.
#![no_main]
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{
    IndexType, MergeSchedule, Resolve, Session, SessionOptions, SnapshotOverrides, Table,
    TableConfig,
};
use libfuzzer_sys::fuzz_target;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn concat() -> Resolve {
    Resolve::custom("concat", |newer, older| {
        let mut v = [newer, older].concat();
        v.truncate(64);
        v
    })
}

fn check(table: &Table, model: &Model) {
    let keys: Vec<Vec<u8>> = (0..=255u8).map(|k| vec![k]).collect();
    for (k, r) in keys.iter().zip(table.lookups(&keys).unwrap()) {
        assert_eq!(r.value(), model.get(k).map(Vec::as_slice), "key {k:?}");
    }
    let scanned: Vec<(Vec<u8>, Vec<u8>)> = table
        .cursor()
        .unwrap()
        .by_ref()
        .take(usize::MAX)
        .collect::<cairn::Result<Vec<_>>>()
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scanned, want);
}

fuzz_target!(|data: &[u8]| {
    let [a, b, rest @ ..] = data else { return };
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/s")).unwrap();
    // Ephemeral tables: no log (nor its syncer thread) per input.
    let options = SessionOptions::default().log(None);
    let session = Session::open_with(Arc::new(fs), "/s", options).unwrap();
    let index = if a & 0x80 == 0 {
        IndexType::Compact
    } else {
        IndexType::Ordinary
    };
    let schedule = if b & 0x80 == 0 {
        MergeSchedule::Incremental
    } else {
        MergeSchedule::OneShot
    };
    let config = TableConfig::default()
        .write_buffer_entries(1 + (*a as usize % 8))
        .merge_batch_size(1 + (*b as usize % 4))
        .index(index)
        .merge_schedule(schedule)
        .resolve(concat());
    let mut tables = vec![(session.new_table(config).unwrap(), Model::new())];
    let mut snapshots: BTreeMap<String, Model> = BTreeMap::new();
    let mut bytes = rest.iter().copied();
    while let (Some(op), Some(arg)) = (bytes.next(), bytes.next()) {
        let t = (op as usize >> 4) % tables.len();
        let key = vec![arg];
        let value: Vec<u8> = bytes
            .next()
            .map(|n| vec![n; (n % 9) as usize])
            .unwrap_or_default();
        match op % 10 {
            7 if tables.len() < 4 => {
                let copy = (tables[t].0.duplicate().unwrap(), tables[t].1.clone());
                tables.push(copy);
                continue;
            }
            9 if tables.len() < 4 => {
                let other = arg as usize % tables.len();
                let union = Table::incremental_unions(&[&tables[t].0, &tables[other].0]).unwrap();
                let mut union_model = tables[t].1.clone();
                for (k, v) in &tables[other].1 {
                    let combined = match union_model.get(k) {
                        Some(left) => concat().apply(left, v),
                        None => v.clone(),
                    };
                    union_model.insert(k.clone(), combined);
                }
                union.supply_union_credits(value.len() as u64).unwrap();
                tables.push((union, union_model));
                continue;
            }
            _ => {}
        }
        let (table, model) = &mut tables[t];
        match op % 10 {
            0..=2 => {
                table.insert(&key, &value).unwrap();
                model.insert(key, value);
            }
            3 => {
                table.delete(&key).unwrap();
                model.remove(&key);
            }
            4 | 5 => {
                table.upsert(&key, &value).unwrap();
                let new = match model.get(&key) {
                    Some(old) => concat().apply(&value, old),
                    None => value,
                };
                model.insert(key, new);
            }
            6 => {
                let hi = [arg.saturating_add(value.len() as u8 * 8)];
                let got: Vec<Vec<u8>> = table
                    .range_lookup(&key[..]..&hi[..])
                    .unwrap()
                    .into_iter()
                    .map(|e| e.key)
                    .collect();
                let want: Vec<Vec<u8>> = model
                    .range(key.clone()..hi.to_vec())
                    .map(|(k, _)| k.clone())
                    .collect();
                assert_eq!(got, want);
            }
            8 => {
                let name = format!("s{}", arg % 3);
                if table.save_snapshot(&name, "f").is_ok() {
                    snapshots.insert(name.clone(), model.clone());
                }
                let overrides = SnapshotOverrides::default().resolve(Some(concat()));
                if let Some(saved) = snapshots.get(&name) {
                    let opened = session.open_snapshot(&name, "f", overrides).unwrap();
                    check(&opened, saved);
                }
            }
            _ => check(table, model),
        }
    }
    for (table, model) in &tables {
        check(table, model);
    }
});

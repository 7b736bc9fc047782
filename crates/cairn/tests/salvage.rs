//! Salvaging damaged snapshots (`Session::salvage_snapshot`): a sound snapshot of any shape
//! (merges and unions in progress, runs of several parts, upserts, deletes, blobs, an
//! authenticated table) is salvaged whole, to exactly the table's contents and state root; a
//! damaged one (every file of it: a flipped bit, a truncation, a missing file) keeps every key
//! outside the losses it reports with exactly its value, and the salvaged snapshot is sound.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cairn::inspect::{SalvageReport, VerifyOptions};
use cairn::{AuthConfig, Error, Resolve, Session, SnapshotOverrides, Table, TableConfig, Update};
use common::copy_tree;
use proptest::prelude::*;

/// Key, value and blob of every key of `table`, in key order.
type Contents = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

fn contents(table: &Table) -> Contents {
    let mut out = Contents::new();
    for entry in table.cursor().unwrap() {
        let entry = entry.unwrap();
        let blob = entry.blob.map(|b| table.retrieve_blob(&b).unwrap());
        out.insert(entry.key, (entry.value, blob));
    }
    out
}

fn salvage(session: &Session, from: &str, to: &str) -> cairn::Result<SalvageReport> {
    session.salvage_snapshot(from, Some(to), SnapshotOverrides::default(), &mut |_| {})
}

fn open(session: &Session, name: &str) -> Table {
    session
        .open_snapshot(name, "ledger", SnapshotOverrides::default())
        .unwrap()
}

/// One update of a generated history.
#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u64),
    Upsert(u16, u64),
    Delete(u16),
    Blob(u16, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..400u16, any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (0..400u16, 0..1000u64).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => (0..400u16).prop_map(Op::Delete),
        1 => (0..400u16, any::<u8>()).prop_map(|(k, b)| Op::Blob(k, b)),
    ]
}

fn key(k: u16) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

fn apply(table: &Table, ops: &[Op]) {
    for op in ops {
        match *op {
            Op::Insert(k, v) => table.insert(key(k), v.to_le_bytes()).unwrap(),
            Op::Upsert(k, v) => table.upsert(key(k), v.to_le_bytes()).unwrap(),
            Op::Delete(k) => table.delete(key(k)).unwrap(),
            Op::Blob(k, b) => {
                let blob = vec![b; 100 + usize::from(b) * 37];
                table
                    .updates(&[(key(k), Update::InsertWithBlob(&[b; 8], &blob))])
                    .unwrap()
            }
        }
    }
}

fn config(parts: bool, auth: bool) -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(16)
        .merge_batch_size(4)
        .resolve(Resolve::AddU64Le)
        .part_entries(parts.then_some(24))
        .auth(auth.then(AuthConfig::default))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Whatever the shape, a sound snapshot salvages to exactly the table's contents.
    #[test]
    fn a_sound_snapshot_is_salvaged_whole(
        left in prop::collection::vec(op(), 0..600),
        right in prop::collection::vec(op(), 0..300),
        newer in prop::collection::vec(op(), 0..100),
        union in any::<bool>(),
        credits in 0..200u64,
        parts in any::<bool>(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let session = Session::open(tmp.path()).unwrap();
        let config = config(parts, false);
        let mut table = session.new_table(config.clone()).unwrap();
        apply(&table, &left);
        if union {
            let other = session.new_table(config).unwrap();
            apply(&other, &right);
            table = table.incremental_union(&other).unwrap();
            table.supply_union_credits(credits).unwrap();
        }
        apply(&table, &newer);
        let expected = contents(&table);
        table.save_snapshot("s", "ledger").unwrap();
        let report = salvage(&session, "s", "t").unwrap();
        prop_assert!(report.is_complete(), "{report:#?}");
        prop_assert_eq!(report.keys_written, expected.len() as u64);
        prop_assert_eq!(contents(&open(&session, "t")), expected);
    }
}

#[test]
fn an_authenticated_table_keeps_its_root() {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let table = session.new_table(config(false, true)).unwrap();
    let ops: Vec<Op> = (0..900u16)
        .map(|i| match i % 5 {
            0 => Op::Delete(i * 7 % 400),
            1 => Op::Upsert(i * 3 % 400, u64::from(i)),
            2 => Op::Blob(i % 400, i as u8),
            _ => Op::Insert(i * 11 % 400, u64::from(i)),
        })
        .collect();
    apply(&table, &ops);
    let root = table.commit().unwrap().root;
    table.save_snapshot("s", "ledger").unwrap();
    let report = salvage(&session, "s", "t").unwrap();
    assert!(report.is_complete(), "{report:#?}");
    assert_eq!(report.root, Some(root));
    let salvaged = open(&session, "t");
    assert_eq!(salvaged.root().unwrap().root, root);
    assert_eq!(contents(&salvaged), contents(&table));
}

#[test]
fn names_and_metadata_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let table = session.new_table(config(false, false)).unwrap();
    apply(&table, &[Op::Insert(1, 1), Op::Insert(2, 2)]);
    table.save_snapshot("s", "ledger").unwrap();
    table.save_snapshot("u", "ledger").unwrap();
    assert!(matches!(
        salvage(&session, "nope", "t"),
        Err(Error::SnapshotMissing(_))
    ));
    assert!(matches!(
        salvage(&session, "s", "u"),
        Err(Error::SnapshotExists(_))
    ));
    assert!(matches!(
        salvage(&session, "s", "Bad!"),
        Err(Error::InvalidSnapshotName(_))
    ));
    let custom = Resolve::custom("max", |a: &[u8], b: &[u8]| a.max(b).to_vec());
    let given = SnapshotOverrides::default().resolve(Some(custom));
    assert!(matches!(
        session.salvage_snapshot("s", Some("t"), given, &mut |_| {}),
        Err(Error::InvalidConfig(_))
    ));
    let metadata = tmp.path().join("snapshots/s/metadata");
    let mut bytes = std::fs::read(&metadata).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&metadata, bytes).unwrap();
    assert!(matches!(
        salvage(&session, "s", "t"),
        Err(Error::SnapshotCorrupted { .. })
    ));
    assert!(!session.snapshot_exists("t").unwrap());
    drop(session);
    let read_only =
        Session::open_with_options(tmp.path(), cairn::SessionOptions::default().read_only(true))
            .unwrap();
    assert!(matches!(
        salvage(&read_only, "u", "t"),
        Err(Error::ReadOnly(_))
    ));
    // Reading only works in a read-only session, and writes nothing.
    let report = read_only
        .salvage_snapshot("u", None, SnapshotOverrides::default(), &mut |_| {})
        .unwrap();
    assert!(report.is_complete() && report.keys_written == 2 && report.root.is_none());
    assert!(!read_only.snapshot_exists("t").unwrap());
}

/// A damage done to a file, by its path.
type Damage = Box<dyn Fn(&Path)>;

#[test]
fn damage_loses_only_the_keys_it_reports() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    std::fs::create_dir(&pristine).unwrap();
    let expected = {
        let session = Session::open(&pristine).unwrap();
        let table = session.new_table(config(true, false)).unwrap();
        let ops: Vec<Op> = (0..1500u32)
            .map(|i| {
                let k = (i * 7919 % 500) as u16;
                match i % 7 {
                    0 => Op::Delete(k),
                    1 | 2 => Op::Upsert(k, u64::from(i)),
                    3 => Op::Blob(k, i as u8),
                    _ => Op::Insert(k, u64::from(i)),
                }
            })
            .collect();
        apply(&table, &ops);
        table.save_snapshot("s", "ledger").unwrap();
        contents(&table)
    };
    let dir = |root: &Path| root.join("snapshots").join("s");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir(&pristine))
        .unwrap()
        .map(|e| e.unwrap().file_name().into())
        .filter(|name: &PathBuf| name != Path::new("metadata"))
        .collect();
    files.sort();
    assert!(files.len() >= 25, "{files:?}");
    // Every file of four runs (the first, the last and two between), the write buffer's
    // among them.
    let runs = files.len() / 5;
    let chosen = [0, runs / 3, 2 * runs / 3, runs - 1].map(|i| format!("{i}."));
    files.retain(|f| {
        chosen
            .iter()
            .any(|c| f.to_str().unwrap().starts_with(c.as_str()))
    });
    assert_eq!(files.len(), 20, "{files:?}");
    let mut lossy = 0;
    let mut case = 0;
    for file in &files {
        let len = std::fs::metadata(dir(&pristine).join(file)).unwrap().len();
        let mut damages: Vec<(String, Damage)> = Vec::new();
        for at in [0, len / 2, len.saturating_sub(1)] {
            if len > 0 {
                damages.push((
                    format!("a flipped bit at {at}"),
                    Box::new(move |p: &Path| {
                        let mut bytes = std::fs::read(p).unwrap();
                        bytes[at as usize] ^= 0x10;
                        std::fs::write(p, bytes).unwrap();
                    }),
                ));
            }
        }
        if len > 0 {
            damages.push((
                "a truncation".into(),
                Box::new(|p: &Path| {
                    let bytes = std::fs::read(p).unwrap();
                    std::fs::write(p, &bytes[..bytes.len() - 1]).unwrap();
                }),
            ));
        }
        damages.push((
            "a missing file".into(),
            Box::new(|p: &Path| std::fs::remove_file(p).unwrap()),
        ));
        for (what, damage) in &damages {
            case += 1;
            let root = tmp.path().join(format!("case{case}"));
            copy_tree(&pristine, &root);
            damage(&dir(&root).join(file));
            let session = Session::open(&root).unwrap();
            let report = salvage(&session, "s", "t")
                .unwrap_or_else(|e| panic!("{what} in {}: {e}", file.display()));
            let salvaged = contents(&open(&session, "t"));
            for (k, v) in &expected {
                if !report.may_have_lost(k) {
                    assert_eq!(
                        salvaged.get(k),
                        Some(v),
                        "{what} in {}: {report:#?}",
                        file.display()
                    );
                }
            }
            for k in salvaged.keys() {
                assert!(
                    expected.contains_key(k) || report.may_have_lost(k),
                    "{what} in {}",
                    file.display()
                );
            }
            let data = matches!(
                file.extension().and_then(|e| e.to_str()),
                Some("keyops" | "blobs")
            );
            let checksums = file.extension().is_some_and(|e| e == "checksums");
            // Every damage of a key/ops or blob file with bytes in it is found; damage to a
            // filter or an index loses nothing (salvage reads neither).
            if data && (len > 0 || what == "a missing file") {
                assert!(!report.losses.is_empty(), "{what} in {}", file.display());
            }
            if !data && !checksums {
                assert!(
                    report.is_complete(),
                    "{what} in {}: {report:#?}",
                    file.display()
                );
            }
            if checksums {
                assert!(report.losses.is_empty() && !report.unchecked.is_empty());
            }
            lossy += u32::from(!report.losses.is_empty());
            let verified = session
                .verify_snapshot("t", VerifyOptions::default(), &mut |_| {})
                .unwrap();
            assert!(
                verified.is_sound(),
                "{what} in {}: {verified:#?}",
                file.display()
            );
            drop(session);
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
    assert!(lossy >= 20, "{lossy} damages lost something");
}

/// Without checksums files, damage is found only where pages stop decoding or keys stop
/// increasing: whatever bytes are flipped, a salvage neither panics nor fails, reports the
/// runs it could not check, and saves a sound snapshot.
#[test]
fn unchecked_damage_is_survived() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = tmp.path().join("pristine");
    std::fs::create_dir(&pristine).unwrap();
    {
        let session = Session::open(&pristine).unwrap();
        let table = session.new_table(config(false, false)).unwrap();
        let ops: Vec<Op> = (0..800u32)
            .map(|i| match i % 4 {
                0 => Op::Blob((i * 13 % 300) as u16, i as u8),
                1 => Op::Upsert((i * 17 % 300) as u16, u64::from(i)),
                _ => Op::Insert((i * 7 % 300) as u16, u64::from(i)),
            })
            .collect();
        apply(&table, &ops);
        table.save_snapshot("s", "ledger").unwrap();
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..12 {
        let root = tmp.path().join(format!("round{round}"));
        copy_tree(&pristine, &root);
        let dir = root.join("snapshots/s");
        let mut files: Vec<PathBuf> = (std::fs::read_dir(&dir).unwrap())
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for file in &files {
            if file.extension().is_some_and(|e| e == "checksums") {
                std::fs::remove_file(file).unwrap();
            } else if file
                .extension()
                .is_some_and(|e| e == "keyops" || e == "blobs")
            {
                let mut bytes = std::fs::read(file).unwrap();
                for _ in 0..bytes.len() / 512 {
                    let at = (next() % bytes.len() as u64) as usize;
                    bytes[at] = next() as u8;
                }
                std::fs::write(file, bytes).unwrap();
            }
        }
        let session = Session::open(&root).unwrap();
        let report = salvage(&session, "s", "t").unwrap();
        assert!(!report.unchecked.is_empty() && !report.is_complete());
        let verified = session
            .verify_snapshot("t", VerifyOptions::default(), &mut |_| {})
            .unwrap();
        assert!(verified.is_sound(), "round {round}: {verified:#?}");
    }
}

//! Snapshots through the public API: round trips (with merges in progress, upserts, deletes and
//! blobs, also across a session restart), errors, list/delete/export/import, corruption of every
//! kind of file, the number of files a snapshot takes, and no leaked run files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{
    Error, IndexType, Resolve, Session, SessionOptions, SnapshotOverrides, Table, TableConfig,
};
use proptest::prelude::*;

fn open_session(fs: &MemFs) -> Session {
    open_session_with(fs, SessionOptions::default())
}

fn open_session_with(fs: &MemFs, options: SessionOptions) -> Session {
    let fs: Arc<dyn FileSystem> = Arc::new(fs.clone());
    if !fs.exists(Path::new("/s")).unwrap() {
        fs.create_dir_all(Path::new("/s")).unwrap();
    }
    Session::open_with(fs, "/s", options).unwrap()
}

/// A session that reads and checks every byte of a snapshot as it opens it
/// (`SessionOptions::verify_on_open`): what the damage tests below open with, so that any
/// damage is found by the open.
fn verifying_session(fs: &MemFs) -> Session {
    open_session_with(fs, SessionOptions::default().verify_on_open(true))
}

/// Reads everything a table holds (every entry through a cursor, every blob): with lazy
/// opens, how damage in a data page is found.
fn read_everything(table: &cairn::Table) -> cairn::Result<()> {
    for entry in table.cursor()? {
        if let Some(blob) = entry?.blob {
            table.retrieve_blob(&blob)?;
        }
    }
    Ok(())
}

fn key(i: u32) -> Vec<u8> {
    (i as u64 + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .to_be_bytes()
        .to_vec()
}

fn config() -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(32)
        .merge_batch_size(4)
        .index(IndexType::Compact)
        .resolve(Resolve::AddU64Le)
}

/// Fills a table through inserts, upserts, deletes and blobs; returns the model of values and
/// blobs.
fn fill(table: &Table, n: u32) -> BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> {
    let mut model = BTreeMap::new();
    for i in 0..n {
        let k = key(i % (n / 2 + 1));
        match i % 5 {
            0 => {
                let blob = format!("blob-{i}").into_bytes();
                table
                    .insert_with_blob(&k, (i as u64).to_le_bytes(), &blob)
                    .unwrap();
                model.insert(k, (i as u64, Some(blob)));
            }
            1 | 2 => {
                table.upsert(&k, 3u64.to_le_bytes()).unwrap();
                let e = model.entry(k).or_insert((0, None));
                e.0 = e.0.wrapping_add(3);
                e.1 = None;
            }
            3 => {
                table.delete(&k).unwrap();
                model.remove(&k);
            }
            _ => {
                table.insert(&k, (i as u64).to_le_bytes()).unwrap();
                model.insert(k, (i as u64, None));
            }
        }
    }
    model
}

fn check(table: &Table, model: &BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>, n: u32) {
    let keys: Vec<_> = (0..n).map(key).collect();
    for (k, r) in keys.iter().zip(table.lookups(&keys).unwrap()) {
        match model.get(k) {
            None => assert!(r.value().is_none()),
            Some((v, blob)) => {
                assert_eq!(r.value(), Some(&v.to_le_bytes()[..]));
                match blob {
                    Some(b) => assert_eq!(&table.retrieve_blob(r.blob().unwrap()).unwrap(), b),
                    None => assert!(r.blob().is_none()),
                }
            }
        }
    }
    let scanned: Vec<Vec<u8>> = table
        .cursor()
        .unwrap()
        .by_ref()
        .take(usize::MAX)
        .collect::<cairn::Result<Vec<_>>>()
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(scanned, model.keys().cloned().collect::<Vec<_>>());
}

fn active_files(fs: &MemFs) -> Vec<PathBuf> {
    fs.file_paths()
        .into_iter()
        .filter(|p| p.starts_with("/s/active"))
        .collect()
}

#[test]
fn round_trip_with_merges_in_progress_and_after_restart() {
    let fs = MemFs::new();
    let session = open_session(&fs);
    let table = session.new_table(config()).unwrap();
    let model = fill(&table, 3000);
    let stats = table.stats().unwrap();
    assert!(
        stats.merges_in_progress > 0 && stats.write_buffer_entries > 0,
        "{stats:?}"
    );
    table.save_snapshot("snap-1", "utxo").unwrap();
    // Later changes do not reach the snapshot.
    table.insert(key(1), 7u64.to_le_bytes()).unwrap();
    let restored = session
        .open_snapshot("snap-1", "utxo", SnapshotOverrides::default())
        .unwrap();
    check(&restored, &model, 3000);
    // The restored table is writable and independent.
    restored.delete(key(2)).unwrap();
    drop((table, restored));
    session.close();
    drop(session);
    assert!(active_files(&fs).is_empty());

    let session = open_session(&fs);
    assert_eq!(
        session.list_snapshots().unwrap(),
        vec!["snap-1".to_string()]
    );
    let restored = session
        .open_snapshot("snap-1", "utxo", SnapshotOverrides::default())
        .unwrap();
    check(&restored, &model, 3000);
    restored.close();
    assert!(active_files(&fs).is_empty());
}

/// `complete_merges` finishes the merges a load left in progress (and the flush in progress)
/// without changing what the table holds, and a snapshot saved afterwards opens with none in
/// progress.
#[test]
fn completed_merges_are_saved_finished() {
    let fs = MemFs::new();
    let session = open_session(&fs);
    let table = session.new_table(config()).unwrap();
    let mut model = fill(&table, 3000);
    // A duplicate shares the merges in progress (making it settles the flush in progress).
    let duplicate = table.duplicate().unwrap();
    let shared = duplicate.stats().unwrap().merges_in_progress;
    assert!(shared > 0);
    // End with a full write buffer still being written out, a few entries per update.
    for i in 0.. {
        if table.stats().unwrap().write_buffer_entries > 32 {
            break;
        }
        assert!(i < 100, "the write buffer never filled");
        let k = key(10_000 + i);
        table.insert(&k, 1u64.to_le_bytes()).unwrap();
        model.insert(k, (1, None));
    }
    let before = table.stats().unwrap();
    assert!(before.merges_in_progress > 0, "{before:?}");
    let steps = table.complete_merges().unwrap();
    assert!(steps > 0);
    let after = table.stats().unwrap();
    assert_eq!(after.merges_in_progress, 0, "{after:?}");
    // The flush was settled: only the new write buffer's entries remain in memory.
    assert!(after.write_buffer_entries < 32, "{after:?}");
    // Lookups read each finished merge's output, not its inputs (at least two each), beside
    // the settled flush's new run.
    assert!(
        after.runs + before.merges_in_progress <= before.runs + 1,
        "{before:?} {after:?}"
    );
    assert_eq!(after.merge_steps_total, before.merge_steps_total + steps);
    // Nothing left to do: a second call performs no step.
    assert_eq!(table.complete_merges().unwrap(), 0);
    check(&table, &model, 3000);
    // The merges are shared: the duplicate sees its own finished too.
    assert_eq!(duplicate.stats().unwrap().merges_in_progress, 0);
    table.save_snapshot("done", "utxo").unwrap();
    let restored = session
        .open_snapshot("done", "utxo", SnapshotOverrides::default())
        .unwrap();
    assert_eq!(restored.stats().unwrap().merges_in_progress, 0);
    check(&restored, &model, 3000);
    // Updates go on as before.
    restored.delete(key(2)).unwrap();
    assert!(restored.lookup(key(2)).unwrap().value().is_none());
}

#[test]
fn snapshot_errors_are_typed() {
    let fs = MemFs::new();
    let session = open_session(&fs);
    let table = session.new_table(config()).unwrap();
    fill(&table, 100);
    for bad in ["", "Snap", "a.b", "con", &"x".repeat(65)] {
        assert!(matches!(
            table.save_snapshot(bad, "l"),
            Err(Error::InvalidSnapshotName(_))
        ));
        assert!(matches!(
            session.open_snapshot(bad, "l", SnapshotOverrides::default()),
            Err(Error::InvalidSnapshotName(_))
        ));
    }
    table.save_snapshot("s", "label").unwrap();
    assert!(matches!(
        table.save_snapshot("s", "label"),
        Err(Error::SnapshotExists(_))
    ));
    assert!(matches!(
        session.open_snapshot("s", "other", SnapshotOverrides::default()),
        Err(Error::SnapshotLabelMismatch { .. })
    ));
    assert!(matches!(
        session.open_snapshot("t", "label", SnapshotOverrides::default()),
        Err(Error::SnapshotMissing(_))
    ));
    assert!(matches!(
        session.delete_snapshot("t"),
        Err(Error::SnapshotMissing(_))
    ));
    // A snapshot saved with a custom resolve function needs it back.
    let custom = session
        .new_table(config().resolve(Resolve::custom("keep-newer", |n, _| n.to_vec())))
        .unwrap();
    custom.insert(b"k", b"v").unwrap();
    custom.save_snapshot("custom", "l").unwrap();
    assert!(matches!(
        session.open_snapshot("custom", "l", SnapshotOverrides::default()),
        Err(Error::InvalidConfig(_))
    ));
    // The snapshot records the function's name: another name, or a built-in, is refused.
    for wrong in [
        Resolve::custom("keep-older", |_, o| o.to_vec()),
        Resolve::KeepNewest,
    ] {
        let overrides = SnapshotOverrides::default().resolve(Some(wrong));
        assert!(matches!(
            session.open_snapshot("custom", "l", overrides),
            Err(Error::InvalidConfig(_))
        ));
    }
    let overrides = SnapshotOverrides::default()
        .resolve(Some(Resolve::custom("keep-newer", |n, _| n.to_vec())));
    let t = session.open_snapshot("custom", "l", overrides).unwrap();
    // A table reopened with the function unions with one made with it anew.
    t.union(&custom).unwrap();
    assert_eq!(t.lookup(b"k").unwrap().value(), Some(&b"v"[..]));
    session.delete_snapshot("s").unwrap();
    assert_eq!(
        session.list_snapshots().unwrap(),
        vec!["custom".to_string()]
    );
}

#[test]
fn export_and_import() {
    let fs = MemFs::new();
    let session = open_session(&fs);
    let table = session.new_table(config()).unwrap();
    let model = fill(&table, 1000);
    table.save_snapshot("a", "l").unwrap();
    session.export_snapshot("a", "/exported").unwrap();
    assert!(matches!(
        session.export_snapshot("a", "/exported"),
        Err(Error::SnapshotDirectory { .. })
    ));
    session.import_snapshot("b", "/exported").unwrap();
    assert!(matches!(
        session.import_snapshot("b", "/exported"),
        Err(Error::SnapshotExists(_))
    ));
    assert!(matches!(
        session.import_snapshot("c", "/nowhere"),
        Err(Error::SnapshotDirectory { .. })
    ));
    let restored = session
        .open_snapshot("b", "l", SnapshotOverrides::default())
        .unwrap();
    check(&restored, &model, 1000);
}

#[test]
fn real_file_system_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let model = {
        let session = Session::open(tmp.path()).unwrap();
        let table = session.new_table(config()).unwrap();
        let model = fill(&table, 2000);
        table.save_snapshot("disk", "l").unwrap();
        model
    };
    let session = Session::open(tmp.path()).unwrap();
    let restored = session
        .open_snapshot("disk", "l", SnapshotOverrides::default())
        .unwrap();
    check(&restored, &model, 2000);
    restored.close();
    assert_eq!(
        std::fs::read_dir(tmp.path().join("active"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn a_snapshot_takes_a_number_of_files_bounded_by_its_runs() {
    let fs = MemFs::new();
    let session = open_session(&fs);
    let table = session.new_table(config()).unwrap();
    let mut i = 0u32;
    for target in [1_000u32, 10_000, 50_000] {
        while i < target {
            table.insert(key(i), 1u64.to_le_bytes()).unwrap();
            i += 1;
        }
        let name = format!("n{target}");
        table.save_snapshot(&name, "l").unwrap();
        let runs = table.stats().unwrap().runs;
        let files = fs
            .file_paths()
            .iter()
            .filter(|p| p.starts_with(format!("/s/snapshots/{name}")))
            .count();
        // Five files per run, five for the write buffer, one metadata file.
        assert!(files <= 5 * (runs + 1) + 1, "{files} files for {runs} runs");
        // Runs grow logarithmically: T - 1 residents plus an incoming run (or merge inputs) per level.
        let levels = table.stats().unwrap().levels;
        assert!(runs <= 5 * levels + 5, "{runs} runs on {levels} levels");
    }
}

/// One saved snapshot whose files the corruption test flips bits in.
fn saved_snapshot() -> (MemFs, Vec<PathBuf>) {
    saved_snapshot_of(config())
}

/// An authenticated table's snapshot: its page table's files under `trie/` too.
fn saved_authenticated_snapshot() -> (MemFs, Vec<PathBuf>) {
    let (fs, files) =
        saved_snapshot_of(config().auth(Some(cairn::AuthConfig::default().retained_bytes(0))));
    assert!(files
        .iter()
        .any(|p| p.starts_with("/s/snapshots/victim/trie")));
    (fs, files)
}

fn saved_snapshot_of(config: TableConfig) -> (MemFs, Vec<PathBuf>) {
    let fs = MemFs::new();
    let session = open_session(&fs);
    let table = session.new_table(config).unwrap();
    fill(&table, 600);
    // Every kind of file must be there to be corrupted: a write buffer and blobs.
    assert!(table.stats().unwrap().write_buffer_entries > 0);
    table.save_snapshot("victim", "l").unwrap();
    drop(table);
    session.close();
    let files: Vec<PathBuf> = fs
        .file_paths()
        .into_iter()
        .filter(|p| p.starts_with("/s/snapshots/victim"))
        .filter(|p| !fs.file_bytes(p).unwrap().is_empty())
        .collect();
    for ext in [
        "keyops",
        "blobs",
        "filter",
        "index",
        "checksums",
        "metadata",
    ] {
        assert!(
            files.iter().any(|p| p.to_string_lossy().ends_with(ext)),
            "{ext}"
        );
    }
    (fs, files)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Flipping any bit of any non-empty file of a snapshot (an authenticated table's trie
    /// pages included) makes opening it with full verification fail with a corruption error
    /// naming that file; nothing is returned and nothing leaks. Opened lazily (the default),
    /// either the open fails the same way or reading everything the table holds fails with a
    /// corruption error: damage is never data.
    #[test]
    fn any_bit_flip_in_any_file_is_detected(file in any::<prop::sample::Index>(), bit in any::<prop::sample::Index>(), auth in any::<bool>()) {
        let (fs, files) = if auth { saved_authenticated_snapshot() } else { saved_snapshot() };
        let path = file.get(&files).clone();
        let mut bytes = fs.file_bytes(&path).unwrap();
        let bit = bit.index(bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        fs.set_file_bytes(&path, bytes);
        {
            let session = open_session(&fs);
            match session.open_snapshot("victim", "l", SnapshotOverrides::default()) {
                Err(Error::SnapshotCorrupted { path: named, .. }) => {
                    prop_assert_eq!(named, path.clone(), "the error must name the flipped file");
                }
                Err(e) => return Err(TestCaseError::fail(format!("wrong error: {e}"))),
                Ok(table) => match read_everything(&table) {
                    Err(Error::CorruptFile { what: "run data", .. }) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("wrong error: {e}"))),
                    Ok(()) => return Err(TestCaseError::fail(format!("corrupt {} was read", path.display()))),
                },
            }
        }
        let session = verifying_session(&fs);
        match session.open_snapshot("victim", "l", SnapshotOverrides::default()) {
            Err(Error::SnapshotCorrupted { path: named, .. }) => {
                prop_assert_eq!(named, path, "the error must name the flipped file");
            }
            Err(e) => return Err(TestCaseError::fail(format!("wrong error: {e}"))),
            Ok(_) => return Err(TestCaseError::fail(format!("corrupt {} was opened", path.display()))),
        }
        prop_assert!(active_files(&fs).is_empty(), "a failed open leaked files");
    }
}

/// Opens "victim" and asserts a corruption error naming `blame` (any file of the snapshot when
/// `None`), with nothing left behind in `active/`.
fn assert_corruption_reported(fs: &MemFs, blame: Option<&Path>, what: &str) {
    let session = verifying_session(fs);
    match session.open_snapshot("victim", "l", SnapshotOverrides::default()) {
        Err(Error::SnapshotCorrupted { path, .. }) => {
            assert!(path.starts_with("/s/snapshots/victim"), "{what}: {path:?}");
            if let Some(blame) = blame {
                assert_eq!(path, blame, "{what}: the error must name the damaged file");
            }
        }
        Err(e) => panic!("{what}: wrong error {e}"),
        Ok(_) => panic!("{what}: the damaged snapshot was opened"),
    }
    assert!(
        active_files(fs).is_empty(),
        "{what}: a failed open leaked files"
    );
}

/// A snapshot with at least two runs and a write buffer, plus an older snapshot "old" of the same
/// table (its runs are different files with the same names).
fn saved_snapshot_with_history() -> (MemFs, Vec<PathBuf>) {
    let fs = MemFs::new();
    let session = open_session(&fs);
    let table = session.new_table(config()).unwrap();
    fill(&table, 300);
    table.save_snapshot("old", "l").unwrap();
    fill(&table, 600);
    table.save_snapshot("victim", "l").unwrap();
    drop(table);
    session.close();
    let files: Vec<PathBuf> = fs
        .file_paths()
        .into_iter()
        .filter(|p| p.starts_with("/s/snapshots/victim"))
        .collect();
    assert!(files.iter().any(|p| p.ends_with("1.keyops")), "{files:?}");
    (fs, files)
}

#[test]
fn truncated_files_are_reported() {
    let (_, files) = saved_snapshot_with_history();
    for path in files {
        let (fs, _) = saved_snapshot_with_history();
        let bytes = fs.file_bytes(&path).unwrap();
        if bytes.is_empty() {
            continue;
        }
        for keep in [0, bytes.len() / 2, bytes.len() - 1] {
            let (fs, _) = saved_snapshot_with_history();
            fs.set_file_bytes(&path, bytes[..keep].to_vec());
            let what = format!("{} cut to {keep} bytes", path.display());
            assert_corruption_reported(&fs, Some(&path), &what);
        }
    }
}

#[test]
fn missing_files_are_reported() {
    let (_, files) = saved_snapshot_with_history();
    for path in files {
        let (fs, _) = saved_snapshot_with_history();
        fs.remove_file(&path).unwrap();
        assert_corruption_reported(&fs, Some(&path), &format!("{} removed", path.display()));
    }
}

#[test]
fn files_swapped_between_runs_are_reported() {
    let (_, files) = saved_snapshot_with_history();
    let runs: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_name()?.to_str()?.strip_suffix(".checksums"))
        .map(str::to_string)
        .collect();
    assert!(runs.len() >= 2, "{runs:?}");
    let dir = Path::new("/s/snapshots/victim");
    for ext in ["keyops", "blobs", "filter", "index", "checksums"] {
        // One kind of file swapped between runs 0 and 1, then all five (a whole run swapped).
        for all in [false, true] {
            let (fs, _) = saved_snapshot_with_history();
            let exts: Vec<&str> = if all {
                vec!["keyops", "blobs", "filter", "index", "checksums"]
            } else {
                vec![ext]
            };
            let mut changed = false;
            for ext in exts {
                let a = dir.join(format!("{}.{ext}", runs[0]));
                let b = dir.join(format!("{}.{ext}", runs[1]));
                let (bytes_a, bytes_b) = (fs.file_bytes(&a).unwrap(), fs.file_bytes(&b).unwrap());
                changed |= bytes_a != bytes_b;
                fs.set_file_bytes(&a, bytes_b);
                fs.set_file_bytes(&b, bytes_a);
            }
            if changed {
                let what = format!(
                    "runs 0 and 1 swapped ({})",
                    if all { "all files" } else { ext }
                );
                assert_corruption_reported(&fs, None, &what);
            }
        }
    }
}

/// A checksums file (or a whole run) from an older snapshot of the same table: each file is
/// self-consistent, but not what this snapshot saved.
#[test]
fn stale_checksums_files_and_stale_runs_are_reported() {
    let (_, files) = saved_snapshot_with_history();
    let mut tested = 0;
    for path in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "checksums"))
    {
        let name = path.file_name().unwrap();
        let old = Path::new("/s/snapshots/old").join(name);
        for whole_run in [false, true] {
            let (fs, _) = saved_snapshot_with_history();
            let Some(stale) = fs.file_bytes(&old) else {
                continue;
            };
            if stale == fs.file_bytes(path).unwrap() {
                continue; // a run both snapshots share
            }
            if whole_run {
                let stem = path.file_stem().unwrap().to_str().unwrap();
                for ext in ["keyops", "blobs", "filter", "index", "checksums"] {
                    let file = format!("{stem}.{ext}");
                    let bytes = fs.file_bytes(&Path::new("/s/snapshots/old").join(&file));
                    fs.set_file_bytes(&path.with_file_name(&file), bytes.unwrap());
                }
                assert_corruption_reported(&fs, Some(path), &format!("stale run {stem}"));
            } else {
                fs.set_file_bytes(path, stale);
                assert_corruption_reported(&fs, None, &format!("stale {}", path.display()));
            }
            tested += 1;
        }
    }
    assert!(tested >= 2, "no stale run was tried");
}

/// A snapshot records how far each merge in progress has come (its output cut into finished
/// parts) once it has come at least 8,192 steps (and 1/32 of its work) since its last cut: the
/// table opened from it finishes those merges from there, doing no more steps than the table
/// that saved it still had to do, but for at most 8,192 per merge, and holds the same entries,
/// before and after.
#[test]
fn merges_in_progress_resume_where_the_snapshot_left_them() {
    let fs = MemFs::new();
    let session = open_session(&fs);
    let config = TableConfig::default()
        .write_buffer_entries(2_000)
        .merge_batch_size(64);
    let table = session.new_table(config).unwrap();
    let key = |i: u32| i.wrapping_mul(2_654_435_761).to_be_bytes();
    let mut model = BTreeMap::new();
    let mut saved = 0;
    // Saves whose restored table did exactly the steps the saver had left.
    let mut exact = 0;
    for i in 0..120_000u32 {
        table.insert(key(i), i.to_le_bytes()).unwrap();
        model.insert(key(i).to_vec(), i.to_le_bytes().to_vec());
        if i % 20_000 == 19_999 {
            let name = format!("s{saved}");
            table.save_snapshot(&name, "t").unwrap();
            let restored = session
                .open_snapshot(&name, "t", SnapshotOverrides::default())
                .unwrap();
            let merges = restored.stats().unwrap().merges_in_progress as u64;
            assert!(merges > 0);
            let contents = |t: &Table| -> BTreeMap<Vec<u8>, Vec<u8>> {
                t.range_lookup(..)
                    .unwrap()
                    .into_iter()
                    .map(|e| (e.key, e.value))
                    .collect()
            };
            assert!(contents(&restored) == model, "{name} as saved");
            // The saver's duplicate and the restored table finish the same merges.
            let saver = table.duplicate().unwrap();
            let left = saver.complete_merges().unwrap();
            let redone = restored.complete_merges().unwrap();
            assert!(
                redone <= left + merges * 8_192,
                "{name}: the restored table did {redone} steps, the saver had {left} left"
            );
            assert!(contents(&restored) == model, "{name} after its merges");
            exact += u32::from(redone == left);
            saved += 1;
        }
    }
    assert_eq!(saved, 6);
    assert!(
        exact >= 1,
        "no save resumed its merges exactly where the saver was"
    );
}

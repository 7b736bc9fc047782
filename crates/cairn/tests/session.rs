//! Sessions and table handles through the public API: locking, restore, closed handles, typed
//! errors on bad input, both I/O backends, and concurrent use from several threads.

use std::path::Path;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs, RealFs};
use cairn::{
    BlobRef, DiskCachePolicy, Error, IndexType, IoBackendKind, LookupResult, Session,
    SessionOptions, Table, TableConfig, Update, KEY_SIZE_MAX,
};

fn small_config() -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(4)
        .merge_batch_size(1)
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Session>();
    check::<Table>();
    check::<BlobRef>();
    check::<LookupResult>();
    check::<Error>();
}

#[test]
fn missing_directory_is_created_or_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let no_create = cairn::SessionOptions::default().create_if_missing(false);
    assert!(matches!(
        Session::open_with_options(&missing, no_create),
        Err(Error::SessionDirMissing(p)) if p == missing
    ));
    drop(Session::open(&missing).unwrap());
    assert!(missing.is_dir());
}

#[test]
fn second_open_fails_until_the_first_is_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let first = Session::open(tmp.path()).unwrap();
    let salt = first.salt();
    assert!(matches!(
        Session::open(tmp.path()),
        Err(Error::SessionLocked(_))
    ));
    first.close();
    assert!(Session::open(tmp.path()).is_ok());
    // The salt is kept in the metadata and restored.
    let again = Session::open(tmp.path()).unwrap();
    assert_eq!(again.salt(), salt);
}

#[test]
fn dropping_a_session_releases_its_lock() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/s")).unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(fs);
    let options = SessionOptions::default().salt(Some(99));
    let s = Session::open_with(fs.clone(), "/s", options.clone()).unwrap();
    assert!(matches!(
        Session::open_with(fs.clone(), "/s", options.clone()),
        Err(Error::SessionLocked(_))
    ));
    drop(s);
    let s = Session::open_with(fs, "/s", SessionOptions::default()).unwrap();
    assert_eq!(
        s.salt(),
        99,
        "the stored salt wins over the options on restore"
    );
}

#[test]
fn a_foreign_directory_is_not_a_session() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("something"), b"else").unwrap();
    assert!(matches!(
        Session::open(tmp.path()),
        Err(Error::SessionCorrupted { .. })
    ));
    let tmp = tempfile::tempdir().unwrap();
    drop(Session::open(tmp.path()).unwrap());
    std::fs::write(tmp.path().join("metadata"), b"garbage").unwrap();
    assert!(matches!(
        Session::open(tmp.path()),
        Err(Error::SessionCorrupted { .. })
    ));
}

/// What an earlier session left in `active/` is set aside at the open (no file freed while it
/// waits) and removed in the steps later operations take, or at the close at the latest; a
/// crash before that leaves it for the next open, which queues it again.
#[test]
fn an_open_sets_leftovers_aside_and_they_go_later() {
    let tmp = tempfile::tempdir().unwrap();
    drop(Session::open(tmp.path()).unwrap());
    let active = tmp.path().join("active");
    let aside = active.join(".leftover");
    let stray = active.join("17.keyops");
    let leave = || std::fs::write(&stray, vec![7u8; 1 << 20]).unwrap();
    let files = |dir: &std::path::Path| std::fs::read_dir(dir).map_or(0, |d| d.count());
    leave();
    let s = Session::open(tmp.path()).unwrap();
    assert!(!stray.exists());
    assert_eq!(files(&aside), 1, "set aside, not removed");
    drop(s);
    assert_eq!(files(&aside), 0, "a close removes them");
    // A crash before they went (one left in `.leftover`, as an open set it aside) and another
    // leftover of the same name: both wait side by side.
    std::fs::create_dir(&aside).unwrap();
    std::fs::write(aside.join("0123456789abcdef-17.keyops"), vec![7u8; 1 << 20]).unwrap();
    leave();
    let s = Session::open(tmp.path()).unwrap();
    assert_eq!(files(&aside), 2);
    // Operations free them in steps (4 MiB each at least).
    let table = s.new_table(small_config()).unwrap();
    table.insert(b"a", b"1").unwrap();
    assert_eq!(files(&aside), 0);
    table.insert(b"b", b"2").unwrap();
    s.close();
    assert!(!aside.exists());
}

#[test]
fn closed_handles_give_typed_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let table = session.new_table(small_config()).unwrap();
    table.insert(b"a", b"1").unwrap();
    table.close();
    table.close(); // idempotent
    assert!(matches!(table.insert(b"a", b"1"), Err(Error::TableClosed)));
    assert!(matches!(table.lookup(b"a"), Err(Error::TableClosed)));
    assert!(matches!(table.members(&[b"a"]), Err(Error::TableClosed)));
    assert!(matches!(table.stats(), Err(Error::TableClosed)));

    let other = session.new_table(small_config()).unwrap();
    for i in 0..50u32 {
        other.insert(i.to_be_bytes(), b"v").unwrap();
    }
    session.close();
    session.close(); // idempotent
    assert!(matches!(other.lookup(b"a"), Err(Error::TableClosed)));
    assert!(matches!(
        session.new_table(small_config()),
        Err(Error::SessionClosed)
    ));
    // Closing released every run file.
    assert_eq!(
        std::fs::read_dir(tmp.path().join("active"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn bad_input_is_rejected_before_anything_is_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    assert!(matches!(
        session.new_table(TableConfig::default().write_buffer_entries(0)),
        Err(Error::InvalidConfig(_))
    ));
    let table = session.new_table(small_config()).unwrap();
    let big_key = vec![1u8; KEY_SIZE_MAX + 1];
    assert!(matches!(
        table.insert(&big_key, b"v"),
        Err(Error::KeyTooLarge { .. })
    ));
    assert!(matches!(
        table.lookup(&big_key),
        Err(Error::KeyTooLarge { .. })
    ));
    let batch = [
        (&b"fine"[..], Update::Insert(b"v")),
        (&big_key[..], Update::Delete),
    ];
    assert!(table.updates(&batch).is_err());
    assert!(matches!(
        table.lookup(b"fine").unwrap(),
        LookupResult::NotFound
    ));
    // The largest key works, including through a flush and a lookup from a run.
    let max_key = vec![7u8; KEY_SIZE_MAX];
    table.insert(&max_key, b"max").unwrap();
    for i in 0..20u32 {
        table.insert(i.to_be_bytes(), b"x").unwrap();
    }
    assert_eq!(table.lookup(&max_key).unwrap().value(), Some(&b"max"[..]));
}

#[test]
fn blob_references_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let table = session.new_table(small_config()).unwrap();
    let other = session.new_table(small_config()).unwrap();
    table.insert_with_blob(b"k", b"v", b"the blob").unwrap();
    let r = table.lookup(b"k").unwrap();
    let blob = r.blob().unwrap().clone();
    assert_eq!(blob.len_bytes(), 8);
    assert_eq!(table.retrieve_blob(&blob).unwrap(), b"the blob");
    assert!(matches!(
        other.retrieve_blob(&blob),
        Err(Error::BlobRefInvalid)
    ));
    // Push the blob into a run, then invalidate the reference by an update.
    for i in 0..10u32 {
        table.insert(i.to_be_bytes(), b"x").unwrap();
    }
    let r = table.lookup(b"k").unwrap();
    let blob = r.blob().unwrap().clone();
    assert_eq!(
        table.retrieve_blobs(std::slice::from_ref(&blob)).unwrap(),
        vec![b"the blob".to_vec()]
    );
    table.insert(b"unrelated", b"x").unwrap();
    assert!(matches!(
        table.retrieve_blob(&blob),
        Err(Error::BlobRefInvalid)
    ));
}

/// Fills a table and checks it with every I/O backend and caching policy.
fn backend_round_trip(io_backend: IoBackendKind, disk_cache: DiskCachePolicy, index: IndexType) {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open_with(
        Arc::new(RealFs),
        tmp.path(),
        SessionOptions::default().io_backend(io_backend),
    )
    .unwrap();
    let table = session
        .new_table(
            TableConfig::default()
                .write_buffer_entries(100)
                .merge_batch_size(10)
                .disk_cache(disk_cache)
                .index(index),
        )
        .unwrap();
    let key = |i: u32| xxh(i).to_vec();
    let pairs: Vec<_> = (0..5000u32).map(|i| (key(i), i.to_le_bytes())).collect();
    table.inserts(&pairs).unwrap();
    let keys: Vec<_> = (0..6000u32).map(key).collect();
    let results = table.lookups(&keys).unwrap();
    for (i, r) in results.iter().enumerate() {
        if i < 5000 {
            assert_eq!(r.value(), Some(&(i as u32).to_le_bytes()[..]), "key {i}");
        } else {
            assert!(r.value().is_none());
        }
    }
    assert!(table.stats().unwrap().runs > 1);
}

fn xxh(i: u32) -> [u8; 16] {
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut out = [0u8; 16];
    for chunk in out.chunks_mut(8) {
        x ^= x >> 31;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        chunk.copy_from_slice(&x.to_be_bytes());
    }
    out
}

#[test]
fn both_io_backends_and_cache_policies_agree() {
    for backend in [IoBackendKind::Auto, IoBackendKind::Pread] {
        for cache in [DiskCachePolicy::All, DiskCachePolicy::None] {
            for index in [IndexType::Compact, IndexType::Ordinary] {
                backend_round_trip(backend, cache, index);
            }
        }
    }
}

#[test]
fn lookups_run_concurrently_with_updates() {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let table = Arc::new(
        session
            .new_table(
                TableConfig::default()
                    .write_buffer_entries(64)
                    .merge_batch_size(8)
                    .index(IndexType::Compact),
            )
            .unwrap(),
    );
    let stable: Vec<_> = (0..2000u32)
        .map(|i| (xxh(i).to_vec(), b"stable".to_vec()))
        .collect();
    table.inserts(&stable).unwrap();
    std::thread::scope(|scope| {
        for reader in 0..2 {
            let table = table.clone();
            let stable = &stable;
            scope.spawn(move || {
                for round in 0..50 {
                    let keys: Vec<_> = stable
                        .iter()
                        .skip((round * 37 + reader) % 100)
                        .step_by(7)
                        .map(|(k, _)| k.clone())
                        .collect();
                    for r in table.lookups(&keys).unwrap() {
                        assert_eq!(r.value(), Some(&b"stable"[..]));
                    }
                }
            });
        }
        let table = table.clone();
        scope.spawn(move || {
            for i in 10_000..30_000u32 {
                table.upsert(xxh(i), b"fresh").unwrap();
            }
        });
    });
    assert_eq!(
        table.lookup(xxh(29_999)).unwrap().value(),
        Some(&b"fresh"[..])
    );
}

#[test]
fn range_lookups_take_ordinary_range_syntax() {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let table = session.new_table(small_config()).unwrap();
    for k in [b"a", b"b", b"c", b"d"] {
        table.insert(k, b"v").unwrap();
    }
    let keys = |r: Vec<cairn::CursorEntry>| r.into_iter().map(|e| e.key).collect::<Vec<_>>();
    let (b, d): (&[u8], &[u8]) = (b"b", b"d");
    assert_eq!(
        keys(table.range_lookup(b..d).unwrap()),
        vec![b"b".to_vec(), b"c".to_vec()]
    );
    assert_eq!(keys(table.range_lookup(b..=d).unwrap()).len(), 3);
    assert_eq!(keys(table.range_lookup(b..).unwrap()).len(), 3);
    assert_eq!(keys(table.range_lookup(..d).unwrap()).len(), 3);
    assert_eq!(keys(table.range_lookup(..).unwrap()).len(), 4);
    let excluded = (std::ops::Bound::Excluded(b), std::ops::Bound::Unbounded);
    assert_eq!(keys(table.range_lookup(excluded).unwrap()).len(), 2);
}

/// Every file under `dir` with its contents, to show that a read-only session changes nothing.
fn tree_of(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.push((path.clone(), Vec::new()));
                stack.push(path);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn pairs(t: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
    let entries = t.range_lookup(..).unwrap();
    entries.into_iter().map(|e| (e.key, e.value)).collect()
}

#[test]
fn read_only_sessions_read_everything_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    // The owner stays open (holding the lock) while the read-only session reads.
    let owner = Session::open(tmp.path()).unwrap();
    let config = TableConfig::default()
        .write_buffer_entries(4)
        .merge_batch_size(1)
        .auth(Some(cairn::AuthConfig::default()));
    let a = owner.new_table(config.clone()).unwrap();
    let b = owner.new_table(config).unwrap();
    for i in 0..203u32 {
        a.insert(format!("a{i:05}"), i.to_le_bytes()).unwrap();
        if i % 3 == 0 {
            b.insert(format!("a{i:05}"), b"b").unwrap();
            b.delete(format!("a{:05}", i / 2)).unwrap();
        }
    }
    // Merges in progress in `a`, and a union in progress on top of `a` and `b`.
    a.save_snapshot("plain", "ledger").unwrap();
    let union = Table::incremental_unions(&[&a, &b]).unwrap();
    union.insert("zz", "top").unwrap();
    assert!(union.remaining_union_debt().unwrap() > 0);
    union.supply_union_credits(5).unwrap();
    union.save_snapshot("union", "ledger").unwrap();
    let expected: Vec<_> = [&a, &union]
        .iter()
        .map(|t| (pairs(t), t.root().unwrap().root))
        .collect();
    let before = tree_of(tmp.path());

    let options = SessionOptions::default().read_only(true);
    let reader = Session::open_with_options(tmp.path(), options.clone()).unwrap();
    assert!(reader.is_read_only());
    assert_eq!(reader.salt(), owner.salt());
    assert_eq!(reader.list_snapshots().unwrap(), ["plain", "union"]);
    for (name, (entries, root)) in ["plain", "union"].iter().zip(&expected) {
        let t = reader
            .open_snapshot(name, "ledger", Default::default())
            .unwrap();
        assert_eq!(&pairs(&t), entries, "{name}");
        assert_eq!(&t.root().unwrap().root, root, "{name}");
        assert_eq!(t.commit().unwrap().root, *root);
        let keys: Vec<_> = entries.iter().map(|e| e.0.clone()).collect();
        assert!(t
            .lookups(&keys)
            .unwrap()
            .iter()
            .all(|r| r.value().is_some()));
        let proof = t.prove(&keys[..3]).unwrap().proof;
        assert!(proof.root().is_ok());
        let dup = t.duplicate().unwrap();
        for refused in [
            t.insert("k", "v"),
            dup.delete("k"),
            t.save_snapshot("again", "ledger"),
            t.supply_union_credits(1).map(drop),
            t.complete_merges().map(drop),
            Table::incremental_unions(&[&t, &dup]).map(drop),
            reader.new_table(TableConfig::default()).map(drop),
            reader.delete_snapshot(name),
            reader.import_snapshot("copy", tmp.path().join("snapshots").join(name)),
            reader.export_snapshot(name, tmp.path().join("out")),
        ] {
            assert!(matches!(refused, Err(Error::ReadOnly(_))), "{refused:?}");
        }
        // Refusals break nothing.
        assert_eq!(&pairs(&t), entries);
    }
    drop(reader);
    assert_eq!(
        tree_of(tmp.path()),
        before,
        "a read-only session changed the directory"
    );

    // Only a session directory opens read-only, and an empty one is not created.
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        Session::open_with_options(empty.path(), options.clone()),
        Err(Error::SessionCorrupted { .. })
    ));
    assert!(std::fs::read_dir(empty.path()).unwrap().next().is_none());
}

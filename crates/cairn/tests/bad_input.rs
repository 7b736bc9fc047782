//! Bad input through the public API: every operation given an input it must refuse returns the
//! typed [`Error`] variant meant for it, never panics, and leaves the table, the session and the
//! snapshots as they were.
//!
//! Covered: oversized keys for every key-taking operation (and the empty key, which is an
//! ordinary key), invalid snapshot names for every snapshot operation, snapshot state errors
//! (label mismatch, missing, existing, export target in the way, import source missing), every
//! `TableConfig` rule at its boundaries (and the snapshot overrides), operations on closed
//! tables, sessions and cursors, bad unions, `AddU64Le` upserts of the wrong length, stale or
//! foreign blob references, bad session directories, damaged snapshots and snapshots of a session
//! with another salt. Finally, one injected I/O fault at every file-system primitive of a script
//! checks the rules of `docs/errors.md`: the error reaches the caller, a failed update breaks the
//! table, and completely saved snapshots survive closing and reopening the session.
//!
//! Not covered: values longer than `VALUE_SIZE_MAX` and blobs longer than `BLOB_SIZE_MAX`; both
//! limits are about 4 GiB, so a test would have to allocate 4 GiB.

mod common;

use common::{key, session_in, small};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::fs::{FileSystem, FsOp, MemFs};
use cairn::WRITE_BUFFER_ENTRIES_MAX;
use cairn::{
    BlobRef, BloomAlloc, DiskCachePolicy, Error, IndexType, IoBackendKind, LookupResult, Resolve,
    Session, SessionOptions, SnapshotOverrides, Table, TableConfig, Update, KEY_SIZE_MAX,
};

/// Asserts that `$e` is `Err` matching the pattern (and guard), printing what it got otherwise
/// (only the error: the `Debug` of a table or a blob reference can be huge).
macro_rules! assert_err {
    ($e:expr, $pat:pat $(if $guard:expr)?) => {{
        let result = $e;
        assert!(
            matches!(&result, Err($pat) $(if $guard)?),
            "{}: expected Err({}), got {}",
            stringify!($e),
            stringify!($pat),
            match &result {
                Ok(_) => "Ok(..)".to_string(),
                Err(e) => format!("Err({e:?})"),
            }
        );
    }};
}

/// A fresh in-memory file system with a session open in `/s`.
fn session() -> (MemFs, Session) {
    let fs = MemFs::new();
    let session = session_in(&fs);
    (fs, session)
}

/// A table with `n` keys spread over runs and the write buffer; key 0 has a blob.
fn filled(session: &Session, config: TableConfig, n: u32) -> Table {
    let table = session.new_table(config).unwrap();
    table.insert_with_blob(key(0), b"v0", b"blob-0").unwrap();
    for i in 1..n {
        table.insert(key(i), format!("v{i}").as_bytes()).unwrap();
    }
    table
}

/// Every (key, value) of a table, in order.
fn contents(table: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
    table
        .range_lookup(..)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect()
}

/// Every file of the simulated file system with its bytes, except the run files of open tables
/// (`/s/active`), which released runs remove lazily.
fn files(fs: &MemFs) -> Vec<(PathBuf, Vec<u8>)> {
    fs.file_paths()
        .into_iter()
        .filter(|p| !p.starts_with("/s/active"))
        .map(|p| {
            let bytes = fs.file_bytes(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// A blob reference to key 0 of `table`.
fn blob_ref(table: &Table) -> BlobRef {
    match table.lookup(key(0)).unwrap() {
        LookupResult::FoundWithBlob(_, blob) => blob,
        other => panic!("key 0 has no blob: {other:?}"),
    }
}

/// Calls every operation of `table` that takes a key, with `key`, and returns each result.
fn key_ops(table: &Table, key: &[u8]) -> Vec<(&'static str, cairn::Result<()>)> {
    let v: &[u8] = b"value";
    let eight: &[u8] = &1u64.to_le_bytes();
    vec![
        ("insert", table.insert(key, v)),
        ("insert_with_blob", table.insert_with_blob(key, v, b"blob")),
        ("delete", table.delete(key)),
        ("upsert", table.upsert(key, eight)),
        ("inserts", table.inserts(&[(key, v)])),
        ("deletes", table.deletes(&[key])),
        ("upserts", table.upserts(&[(key, eight)])),
        ("updates Insert", table.updates(&[(key, Update::Insert(v))])),
        (
            "updates InsertWithBlob",
            table.updates(&[(key, Update::InsertWithBlob(v, b"blob"))]),
        ),
        (
            "updates Upsert",
            table.updates(&[(key, Update::Upsert(eight))]),
        ),
        ("updates Delete", table.updates(&[(key, Update::Delete)])),
        ("lookup", table.lookup(key).map(drop)),
        ("lookups", table.lookups(&[key]).map(drop)),
        ("member", table.member(key).map(drop)),
        ("members", table.members(&[key]).map(drop)),
        ("cursor_at", table.cursor_at(key).map(drop)),
        ("range_lookup key..", table.range_lookup(key..).map(drop)),
        (
            "range_lookup (Excluded(key), Unbounded)",
            table
                .range_lookup((Bound::Excluded(key), Bound::Unbounded))
                .map(drop),
        ),
        (
            "range_lookup key..=key",
            table.range_lookup(key..=key).map(drop),
        ),
    ]
}

// ------------------------------------------------------------------------------------------------
// Keys

#[test]
fn oversized_keys_are_rejected_by_every_key_taking_operation() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 30);
    let before = contents(&table);
    let updates_before = table.stats().unwrap().updates;
    let blob = blob_ref(&table);
    for len in [KEY_SIZE_MAX + 1, KEY_SIZE_MAX + 4096, 1 << 20] {
        let big = vec![b'k'; len];
        for (op, result) in key_ops(&table, &big) {
            assert!(
                matches!(result, Err(Error::KeyTooLarge { len: l, max }) if l == len && max == KEY_SIZE_MAX),
                "{op} with a key of {len} bytes: {result:?}"
            );
        }
        // A batch mixes many keys: one oversized key anywhere rejects it.
        let keys = [key(1), big.clone()];
        assert_err!(table.lookups(&keys), Error::KeyTooLarge { .. });
        assert_err!(table.members(&keys), Error::KeyTooLarge { .. });
    }
    // Nothing was applied, and a blob reference taken before is still current.
    assert_eq!(contents(&table), before);
    assert_eq!(table.stats().unwrap().updates, updates_before);
    assert_eq!(table.retrieve_blob(&blob).unwrap(), b"blob-0");
}

#[test]
fn a_batch_with_one_oversized_key_applies_nothing() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 10);
    let before = contents(&table);
    let big = vec![0u8; KEY_SIZE_MAX + 1];
    let ok = key(1);
    let v: &[u8] = b"new";
    assert_err!(
        table.inserts(&[(&ok[..], v), (&big[..], v)]),
        Error::KeyTooLarge { .. }
    );
    assert_err!(
        table.deletes(&[&ok[..], &big[..]]),
        Error::KeyTooLarge { .. }
    );
    assert_err!(
        table.upserts(&[(&ok[..], v), (&big[..], v)]),
        Error::KeyTooLarge { .. }
    );
    assert_err!(
        table.updates(&[
            (&ok[..], Update::Delete),
            (&key(2)[..], Update::Insert(v)),
            (&big[..], Update::Delete),
        ]),
        Error::KeyTooLarge { .. }
    );
    assert_eq!(contents(&table), before);
    // The table is still usable.
    table.insert(&ok, v).unwrap();
    assert_eq!(table.lookup(&ok).unwrap().value(), Some(v));
}

#[test]
fn keys_of_exactly_key_size_max_are_accepted_everywhere() {
    for index in [IndexType::Ordinary, IndexType::Compact] {
        let (_fs, session) = session();
        let table = session
            .new_table(small().index(index).resolve(Resolve::AddU64Le))
            .unwrap();
        let max = |c: u8| vec![c; KEY_SIZE_MAX];
        for (op, result) in key_ops(&table, &max(b'm')) {
            result.unwrap_or_else(|e| panic!("{index:?} {op}: {e}"));
        }
        // Enough maximal keys to fill several runs and merge them.
        for c in 0..40u8 {
            table.insert_with_blob(max(c), [c], [c; 3]).unwrap();
        }
        for c in 0..40u8 {
            let found = table.lookup(max(c)).unwrap();
            assert_eq!(found.value(), Some(&[c][..]), "{index:?} key {c}");
            assert_eq!(table.retrieve_blob(found.blob().unwrap()).unwrap(), [c; 3]);
        }
        let all = table.range_lookup(&max(0)[..]..=&max(39)[..]).unwrap();
        assert_eq!(all.len(), 40);
        table.save_snapshot("max-keys", "").unwrap();
        let reopened = session
            .open_snapshot("max-keys", "", SnapshotOverrides::default())
            .unwrap();
        assert_eq!(contents(&reopened), contents(&table));
    }
}

#[test]
fn range_lookup_rejects_an_oversized_start_bound() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 10);
    let big = vec![b'z'; KEY_SIZE_MAX + 1];
    let small_key: &[u8] = b"a";
    assert_err!(table.range_lookup(&big[..]..), Error::KeyTooLarge { .. });
    assert_err!(
        table.range_lookup(&big[..]..small_key),
        Error::KeyTooLarge { .. }
    );
    assert_err!(
        table.range_lookup((Bound::Excluded(&big[..]), Bound::Included(small_key))),
        Error::KeyTooLarge { .. }
    );
}

#[test]
fn range_lookup_rejects_an_oversized_end_bound() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 10);
    let big = vec![b'z'; KEY_SIZE_MAX + 1];
    let a: &[u8] = b"a";
    assert_err!(table.range_lookup(a..&big[..]), Error::KeyTooLarge { .. });
    assert_err!(table.range_lookup(a..=&big[..]), Error::KeyTooLarge { .. });
    assert_err!(table.range_lookup(..&big[..]), Error::KeyTooLarge { .. });
    assert_err!(
        table.range_lookup((Bound::Unbounded, Bound::Excluded(&big[..]))),
        Error::KeyTooLarge { .. }
    );
}

#[test]
fn inverted_and_empty_ranges_give_nothing() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 10);
    let (lo, hi) = (key(2), key(7));
    let (lo, hi) = (&lo[..], &hi[..]);
    assert!(table.range_lookup(hi..lo).unwrap().is_empty());
    assert!(table.range_lookup(hi..=lo).unwrap().is_empty());
    assert!(table.range_lookup(lo..lo).unwrap().is_empty());
    assert!(table
        .range_lookup((Bound::Excluded(lo), Bound::Excluded(lo)))
        .unwrap()
        .is_empty());
    assert!(table
        .range_lookup((Bound::Excluded(lo), Bound::Included(lo)))
        .unwrap()
        .is_empty());
    assert_eq!(table.range_lookup(lo..=lo).unwrap().len(), 1);
    // Empty batches are fine.
    assert!(table.lookups::<&[u8]>(&[]).unwrap().is_empty());
    assert!(table.members::<&[u8]>(&[]).unwrap().is_empty());
    table.inserts::<&[u8], &[u8]>(&[]).unwrap();
    table.deletes::<&[u8]>(&[]).unwrap();
    table.upserts::<&[u8], &[u8]>(&[]).unwrap();
    table.updates::<&[u8]>(&[]).unwrap();
    assert!(table.retrieve_blobs(&[]).unwrap().is_empty());
    assert!(table
        .cursor()
        .unwrap()
        .by_ref()
        .take(0)
        .collect::<cairn::Result<Vec<_>>>()
        .unwrap()
        .is_empty());
}

/// The engine accepts the empty key (`check_key` has no lower bound): it is the smallest key and
/// behaves like any other, in the write buffer, in runs of both index kinds, in merges, in
/// snapshots and in unions.
#[test]
fn the_empty_key_is_an_ordinary_key() {
    for index in [IndexType::Ordinary, IndexType::Compact] {
        let (_fs, session) = session();
        let config = small().index(index);
        let table = session.new_table(config.clone()).unwrap();
        let empty: &[u8] = b"";
        table
            .insert_with_blob(empty, b"first", b"empty-blob")
            .unwrap();
        // Still in the write buffer.
        assert_eq!(table.lookup(empty).unwrap().value(), Some(&b"first"[..]));
        for i in 0..30 {
            table.insert(key(i), b"v").unwrap();
        }
        // Now in a run, merged.
        assert!(table.stats().unwrap().runs > 0);
        let found = table.lookup(empty).unwrap();
        assert_eq!(found.value(), Some(&b"first"[..]), "{index:?}");
        assert_eq!(
            table.retrieve_blob(found.blob().unwrap()).unwrap(),
            b"empty-blob"
        );
        assert!(table.member(empty).unwrap());
        assert_eq!(
            table.members(&[empty, &b"absent"[..]]).unwrap(),
            [true, false]
        );
        let first = table.cursor().unwrap().next().unwrap().unwrap();
        assert_eq!(
            (first.key.as_slice(), first.value.as_slice()),
            (empty, &b"first"[..])
        );
        assert_eq!(
            table.cursor_at(empty).unwrap().next().unwrap().unwrap().key,
            empty
        );
        assert_eq!(table.range_lookup(empty..=empty).unwrap().len(), 1);
        assert!(table.range_lookup(empty..empty).unwrap().is_empty());
        assert_eq!(table.range_lookup(..=empty).unwrap().len(), 1);
        assert_eq!(
            table
                .range_lookup((Bound::Excluded(empty), Bound::Unbounded))
                .unwrap()
                .first()
                .unwrap()
                .key,
            key(0)
        );
        table.upsert(empty, b"second").unwrap();
        assert_eq!(table.lookup(empty).unwrap().value(), Some(&b"second"[..]));

        table.save_snapshot("empty-key", "").unwrap();
        let reopened = session
            .open_snapshot("empty-key", "", SnapshotOverrides::default())
            .unwrap();
        assert_eq!(
            reopened.lookup(empty).unwrap().value(),
            Some(&b"second"[..])
        );

        let other = session.new_table(config).unwrap();
        other.insert(empty, b"other").unwrap();
        let union = table.union(&other).unwrap();
        assert_eq!(union.lookup(empty).unwrap().value(), Some(&b"second"[..]));

        table.delete(empty).unwrap();
        for i in 30..60 {
            table.insert(key(i), b"v").unwrap();
        }
        assert!(!table.member(empty).unwrap());
        assert_eq!(table.cursor().unwrap().next().unwrap().unwrap().key, key(0));
    }
}

// ------------------------------------------------------------------------------------------------
// Values and blobs (oversized ones need ~4 GiB and are not tested)

#[test]
fn empty_and_large_values_and_blobs_are_accepted() {
    let (_fs, session) = session();
    let table = session.new_table(small()).unwrap();
    let large = vec![0xa5u8; 200_000];
    table.insert(b"empty-value", b"").unwrap();
    table.insert(b"large-value", &large).unwrap();
    table.insert_with_blob(b"empty-blob", b"v", b"").unwrap();
    table.insert_with_blob(b"large-blob", b"", &large).unwrap();
    for i in 0..20 {
        table.insert(key(i), b"v").unwrap();
    }
    assert_eq!(
        table.lookup(b"empty-value").unwrap().value(),
        Some(&b""[..])
    );
    assert_eq!(
        table.lookup(b"large-value").unwrap().value(),
        Some(&large[..])
    );
    let empty_blob = table.lookup(b"empty-blob").unwrap();
    let empty_blob = empty_blob.blob().unwrap();
    assert_eq!(empty_blob.len_bytes(), 0);
    assert!(table.retrieve_blob(empty_blob).unwrap().is_empty());
    let large_blob = table.lookup(b"large-blob").unwrap();
    assert_eq!(
        table.retrieve_blob(large_blob.blob().unwrap()).unwrap(),
        large
    );
}

// ------------------------------------------------------------------------------------------------
// Snapshot names

/// Names every snapshot operation must refuse.
fn bad_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "", "A", "Snap", "snaP", "a/b", "/", "/etc", "..", ".", "../x", "a\\b", ".tmp-x",
        ".hidden", "a b", " a", "a.b", "a\0b", "é", "snäp", "a:b", "con", "prn", "aux", "nul",
        "com0", "com1", "com9", "lpt1", "lpt9",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("a".repeat(65));
    names.push("a".repeat(1000));
    names
}

/// Names right at the edge of the rules, which must be accepted.
fn edge_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "a", "0", "-", "_", "--", "a-b_c9", "com", "lpt", "com10", "lpt10", "comx", "con1", "conx",
        "nul-", "aux_", "prn0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("z".repeat(64));
    names
}

#[test]
fn invalid_snapshot_names_are_rejected_by_every_snapshot_operation() {
    let (fs, session) = session();
    let table = filled(&session, small(), 20);
    table.save_snapshot("good", "label").unwrap();
    fs.create_dir_all(Path::new("/exports")).unwrap();
    session.export_snapshot("good", "/exports/good").unwrap();
    let files_before = files(&fs);
    for name in bad_names() {
        let invalid = |e: &Error| matches!(e, Error::InvalidSnapshotName(_));
        let results: Vec<(&str, cairn::Result<()>)> = vec![
            ("save_snapshot", table.save_snapshot(&name, "label")),
            (
                "open_snapshot",
                session
                    .open_snapshot(&name, "label", SnapshotOverrides::default())
                    .map(drop),
            ),
            ("delete_snapshot", session.delete_snapshot(&name)),
            ("snapshot_exists", session.snapshot_exists(&name).map(drop)),
            (
                "export_snapshot",
                session.export_snapshot(&name, "/exports/new"),
            ),
            (
                "import_snapshot",
                session.import_snapshot(&name, "/exports/good"),
            ),
        ];
        for (op, result) in results {
            assert!(
                result.as_ref().is_err_and(invalid),
                "{op}({name:?}): {result:?}"
            );
        }
    }
    // Nothing was written, renamed or removed anywhere.
    assert_eq!(files(&fs), files_before);
    assert!(!fs.exists(Path::new("/exports/new")).unwrap());
    assert_eq!(session.list_snapshots().unwrap(), ["good"]);
    assert_eq!(fs.list_dir(Path::new("/s/snapshots")).unwrap(), ["good"]);
}

#[test]
fn snapshot_names_at_the_edge_of_the_rules_are_accepted() {
    let (fs, session) = session();
    let table = filled(&session, small(), 20);
    let expected = contents(&table);
    fs.create_dir_all(Path::new("/exports")).unwrap();
    for name in edge_names() {
        table.save_snapshot(&name, "l").unwrap();
        assert!(session.snapshot_exists(&name).unwrap(), "{name}");
        let reopened = session
            .open_snapshot(&name, "l", SnapshotOverrides::default())
            .unwrap();
        assert_eq!(contents(&reopened), expected, "{name}");
        let exported = format!("/exports/{name}");
        session.export_snapshot(&name, &exported).unwrap();
        session.delete_snapshot(&name).unwrap();
        assert!(!session.snapshot_exists(&name).unwrap());
        session.import_snapshot(&name, &exported).unwrap();
        let imported = session
            .open_snapshot(&name, "l", SnapshotOverrides::default())
            .unwrap();
        assert_eq!(contents(&imported), expected, "{name}");
    }
    let mut names = edge_names();
    names.sort();
    assert_eq!(session.list_snapshots().unwrap(), names);
}

// ------------------------------------------------------------------------------------------------
// Snapshot state errors

#[test]
fn a_snapshot_opened_with_the_wrong_label_is_refused() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 20);
    table.save_snapshot("s", "ledger-v1").unwrap();
    table.save_snapshot("unlabelled", "").unwrap();
    for wrong in ["ledger-v2", "", "LEDGER-V1", "ledger-v1 ", "ledger"] {
        assert_err!(
            session.open_snapshot("s", wrong, SnapshotOverrides::default()),
            Error::SnapshotLabelMismatch { expected, found }
                if expected == wrong && found == "ledger-v1"
        );
    }
    assert_err!(
        session.open_snapshot("unlabelled", "x", SnapshotOverrides::default()),
        Error::SnapshotLabelMismatch { expected, found } if expected == "x" && found.is_empty()
    );
    // The snapshot is intact.
    let reopened = session
        .open_snapshot("s", "ledger-v1", SnapshotOverrides::default())
        .unwrap();
    assert_eq!(contents(&reopened), contents(&table));
}

#[test]
fn snapshot_labels_longer_than_4_kib_are_refused_and_leave_nothing_behind() {
    let (fs, session) = session();
    let table = filled(&session, small(), 20);
    let files_before = files(&fs);
    assert_err!(
        table.save_snapshot("long", &"l".repeat(4097)),
        Error::InvalidConfig(_)
    );
    assert!(!session.snapshot_exists("long").unwrap());
    assert!(fs.list_dir(Path::new("/s/snapshots")).unwrap().is_empty());
    assert_eq!(files(&fs), files_before);
    // The limit itself is accepted.
    let label = "l".repeat(4096);
    table.save_snapshot("long", &label).unwrap();
    session
        .open_snapshot("long", &label, SnapshotOverrides::default())
        .unwrap();
}

#[test]
fn operations_on_a_missing_snapshot_fail_with_snapshot_missing() {
    let (fs, session) = session();
    fs.create_dir_all(Path::new("/exports")).unwrap();
    let missing = |e: &Error| matches!(e, Error::SnapshotMissing(n) if n == "nope");
    assert!(session
        .open_snapshot("nope", "", SnapshotOverrides::default())
        .as_ref()
        .is_err_and(missing));
    assert!(session.delete_snapshot("nope").as_ref().is_err_and(missing));
    assert!(session
        .export_snapshot("nope", "/exports/nope")
        .as_ref()
        .is_err_and(missing));
    assert!(!session.snapshot_exists("nope").unwrap());
    assert!(!fs.exists(Path::new("/exports/nope")).unwrap());
    // Deleted snapshots are missing too.
    let table = filled(&session, small(), 5);
    table.save_snapshot("gone", "").unwrap();
    session.delete_snapshot("gone").unwrap();
    assert_err!(
        session.open_snapshot("gone", "", SnapshotOverrides::default()),
        Error::SnapshotMissing(_)
    );
    assert_err!(session.delete_snapshot("gone"), Error::SnapshotMissing(_));
    assert!(session.list_snapshots().unwrap().is_empty());
}

#[test]
fn saving_or_importing_over_an_existing_snapshot_fails_with_snapshot_exists() {
    let (fs, session) = session();
    let table = filled(&session, small(), 20);
    let expected = contents(&table);
    table.save_snapshot("s", "one").unwrap();
    fs.create_dir_all(Path::new("/exports")).unwrap();
    session.export_snapshot("s", "/exports/s").unwrap();
    table.insert(b"later", b"change").unwrap();
    let files_before = files(&fs);
    assert_err!(
        table.save_snapshot("s", "two"),
        Error::SnapshotExists(n) if n == "s"
    );
    assert_err!(
        session.import_snapshot("s", "/exports/s"),
        Error::SnapshotExists(n) if n == "s"
    );
    assert_eq!(files(&fs), files_before);
    assert!(!fs
        .list_dir(Path::new("/s/snapshots"))
        .unwrap()
        .iter()
        .any(|n| n.starts_with('.')));
    // The first snapshot is untouched.
    let reopened = session
        .open_snapshot("s", "one", SnapshotOverrides::default())
        .unwrap();
    assert_eq!(contents(&reopened), expected);
}

#[test]
fn exporting_onto_an_existing_path_fails_with_snapshot_directory() {
    let (fs, session) = session();
    let table = filled(&session, small(), 20);
    table.save_snapshot("s", "").unwrap();
    fs.create_dir_all(Path::new("/exports/dir")).unwrap();
    session.export_snapshot("s", "/exports/done").unwrap();
    // An existing file in the way.
    fs.create(Path::new("/exports/file"))
        .unwrap()
        .append(b"keep me")
        .unwrap();
    let files_before = files(&fs);
    for target in [
        "/exports/dir",
        "/exports/file",
        "/exports/done",
        "/s",
        "/s/snapshots/s",
    ] {
        assert_err!(
            session.export_snapshot("s", target),
            Error::SnapshotDirectory { path, .. } if path == Path::new(target)
        );
    }
    assert_eq!(files(&fs), files_before);
    assert!(fs.list_dir(Path::new("/exports/dir")).unwrap().is_empty());
    assert_eq!(
        fs.list_dir(Path::new("/exports")).unwrap(),
        ["dir", "done", "file"]
    );
}

#[test]
fn importing_from_a_missing_source_fails_with_snapshot_directory() {
    let (fs, session) = session();
    fs.create(Path::new("/not-a-dir")).unwrap();
    for source in ["/missing", "/missing/deeper", "/not-a-dir"] {
        assert_err!(
            session.import_snapshot("s", source),
            Error::SnapshotDirectory { path, .. } if path == Path::new(source)
        );
    }
    assert!(!session.snapshot_exists("s").unwrap());
    assert!(fs.list_dir(Path::new("/s/snapshots")).unwrap().is_empty());
}

#[test]
fn importing_a_directory_that_is_not_a_snapshot_fails_when_it_is_opened() {
    let (fs, session) = session();
    fs.create_dir_all(Path::new("/junk")).unwrap();
    fs.create(Path::new("/junk/metadata"))
        .unwrap()
        .append(b"not snapshot metadata")
        .unwrap();
    fs.create_dir_all(Path::new("/empty")).unwrap();
    // Import only copies; the contents are checked by open_snapshot.
    session.import_snapshot("junk", "/junk").unwrap();
    session.import_snapshot("empty", "/empty").unwrap();
    for name in ["junk", "empty"] {
        assert_err!(
            session.open_snapshot(name, "", SnapshotOverrides::default()),
            Error::SnapshotCorrupted { name: n, .. } if n == name
        );
        session.delete_snapshot(name).unwrap();
    }
    // The session is unaffected.
    let table = filled(&session, small(), 10);
    table.save_snapshot("fine", "").unwrap();
    session
        .open_snapshot("fine", "", SnapshotOverrides::default())
        .unwrap();
}

#[test]
fn a_snapshot_with_a_custom_resolve_function_needs_it_when_opened() {
    let (_fs, session) = session();
    let table = session
        .new_table(small().resolve(Resolve::custom("concat", |n, o| [n, o].concat())))
        .unwrap();
    table.upsert(b"k", b"a").unwrap();
    table.upsert(b"k", b"b").unwrap();
    table.save_snapshot("custom", "").unwrap();
    assert_err!(
        session.open_snapshot("custom", "", SnapshotOverrides::default()),
        Error::InvalidConfig(_)
    );
    let reopened = session
        .open_snapshot(
            "custom",
            "",
            SnapshotOverrides::default()
                .resolve(Some(Resolve::custom("concat", |n, o| [n, o].concat()))),
        )
        .unwrap();
    assert_eq!(reopened.lookup(b"k").unwrap().value(), Some(&b"ba"[..]));
}

#[test]
fn snapshot_overrides_are_validated_like_a_config() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 20);
    table.save_snapshot("s", "").unwrap();
    let open = |overrides: SnapshotOverrides| session.open_snapshot("s", "", overrides);
    for batch in [0, (1 << 24) + 1, usize::MAX] {
        assert_err!(
            open(SnapshotOverrides::default().merge_batch_size(Some(batch))),
            Error::InvalidConfig(_)
        );
    }
    assert_err!(
        open(SnapshotOverrides::default().disk_cache(Some(DiskCachePolicy::LevelsUpTo(0)))),
        Error::InvalidConfig(_)
    );
    for batch in [1, 1 << 24] {
        let t = open(
            SnapshotOverrides::default()
                .merge_batch_size(Some(batch))
                .disk_cache(Some(DiskCachePolicy::LevelsUpTo(1))),
        )
        .unwrap();
        assert_eq!(contents(&t), contents(&table));
    }
}

// ------------------------------------------------------------------------------------------------
// Table configs

#[test]
fn every_config_rule_rejects_just_outside_and_accepts_just_inside() {
    let (_fs, session) = session();
    let with = |f: &dyn Fn(&mut TableConfig)| {
        let mut c = TableConfig::default();
        f(&mut c);
        c
    };
    let rejected = [
        with(&|c| c.write_buffer_entries = 0),
        with(&|c| c.write_buffer_entries = WRITE_BUFFER_ENTRIES_MAX + 1),
        with(&|c| c.write_buffer_entries = usize::MAX),
        with(&|c| c.merge_batch_size = 0),
        with(&|c| c.merge_batch_size = (1 << 24) + 1),
        with(&|c| c.merge_batch_size = usize::MAX),
        with(&|c| c.disk_cache = DiskCachePolicy::LevelsUpTo(0)),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(1.0f64.next_down())),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(64.0f64.next_up())),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(0.0)),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(-1.0)),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(f64::NAN)),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(f64::INFINITY)),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(f64::NEG_INFINITY)),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(1e-6f64.next_down())),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(0.5f64.next_up())),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(0.0)),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(-0.1)),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(1.0)),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(f64::NAN)),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(f64::INFINITY)),
        with(&|c| c.bloom = BloomAlloc::LevelScaledFpr(1e-6f64.next_down())),
        with(&|c| c.bloom = BloomAlloc::LevelScaledFpr(0.5f64.next_up())),
        with(&|c| c.bloom = BloomAlloc::LevelScaledFpr(f64::NAN)),
        with(&|c| c.last_level_bloom = Some(BloomAlloc::LevelScaledFpr(0.01))),
    ];
    for config in rejected {
        assert_err!(session.new_table(config.clone()), Error::InvalidConfig(_));
        assert!(
            matches!(config.validate(), Err(Error::InvalidConfig(_))),
            "{config:?}"
        );
    }
    let accepted = [
        with(&|c| c.write_buffer_entries = 1),
        with(&|c| c.write_buffer_entries = WRITE_BUFFER_ENTRIES_MAX),
        with(&|c| c.merge_batch_size = 1),
        with(&|c| c.merge_batch_size = 1 << 24),
        with(&|c| c.disk_cache = DiskCachePolicy::LevelsUpTo(1)),
        with(&|c| c.disk_cache = DiskCachePolicy::LevelsUpTo(u32::MAX)),
        with(&|c| c.disk_cache = DiskCachePolicy::None),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(1.0)),
        with(&|c| c.bloom = BloomAlloc::BitsPerEntry(64.0)),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(1e-6)),
        with(&|c| c.bloom = BloomAlloc::TargetFpr(0.5)),
        // Rates scaled down below 1e-6 stay at 1e-6.
        with(&|c| c.bloom = BloomAlloc::LevelScaledFpr(1e-6)),
        with(&|c| c.bloom = BloomAlloc::LevelScaledFpr(0.5)),
        with(&|c| {
            c.bloom = BloomAlloc::LevelScaledFpr(0.01);
            c.last_level_bloom = Some(BloomAlloc::None);
        }),
    ];
    for config in accepted {
        let small_buffer = config
            .clone()
            .write_buffer_entries(config.write_buffer_entries.min(3));
        for config in [config, small_buffer] {
            let table = session
                .new_table(config.clone())
                .unwrap_or_else(|e| panic!("{config:?}: {e}"));
            // The table works, through a flush and a merge or two.
            for i in 0..20 {
                table.insert(key(i), b"v").unwrap();
            }
            for i in 0..20 {
                assert!(table.member(key(i)).unwrap(), "{config:?}");
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Closed handles

/// Calls every fallible operation of `table` (with valid arguments) and returns each result.
fn table_ops(
    table: &Table,
    open: &Table,
    blob: &BlobRef,
) -> Vec<(&'static str, cairn::Result<()>)> {
    let mut results = key_ops(table, &key(1));
    results.extend([
        ("retrieve_blob", table.retrieve_blob(blob).map(drop)),
        (
            "retrieve_blobs",
            table.retrieve_blobs(std::slice::from_ref(blob)).map(drop),
        ),
        ("cursor", table.cursor().map(drop)),
        ("range_lookup ..", table.range_lookup(..).map(drop)),
        ("duplicate", table.duplicate().map(drop)),
        ("save_snapshot", table.save_snapshot("from-closed", "")),
        ("stats", table.stats().map(drop)),
        (
            "remaining_union_debt",
            table.remaining_union_debt().map(drop),
        ),
        (
            "supply_union_credits",
            table.supply_union_credits(10).map(drop),
        ),
        ("incremental_union", table.incremental_union(open).map(drop)),
        ("union", table.union(open).map(drop)),
        (
            "open.incremental_union",
            open.incremental_union(table).map(drop),
        ),
        ("open.union", open.union(table).map(drop)),
        (
            "incremental_unions",
            Table::incremental_unions(&[open, table]).map(drop),
        ),
        ("unions", Table::unions(&[open, table]).map(drop)),
    ]);
    results
}

#[test]
fn every_operation_on_a_closed_table_fails_with_table_closed() {
    let (fs, session) = session();
    let table = filled(&session, small(), 30);
    let open = filled(&session, small(), 10);
    let blob = blob_ref(&table);
    table.close();
    table.close(); // idempotent
    let files_before = files(&fs);
    for (op, result) in table_ops(&table, &open, &blob) {
        assert!(
            matches!(result, Err(Error::TableClosed)),
            "{op} on a closed table: {result:?}"
        );
    }
    assert!(!session.snapshot_exists("from-closed").unwrap());
    assert!(fs.list_dir(Path::new("/s/snapshots")).unwrap().is_empty());
    assert_eq!(files(&fs), files_before);
    // The config is still readable, the session and the other table are unaffected.
    assert_eq!(table.config().write_buffer_entries, 4);
    assert!(session.is_open());
    assert_eq!(contents(&open).len(), 10);
    session.new_table(small()).unwrap();
}

/// Input errors are found before the table is looked at: a closed table given an oversized key
/// or an invalid snapshot name reports the input error (documented in docs/errors.md).
#[test]
fn input_errors_are_reported_before_table_closed() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 10);
    table.save_snapshot("exists", "").unwrap();
    table.close();
    let big = vec![0u8; KEY_SIZE_MAX + 1];
    for (op, result) in key_ops(&table, &big) {
        assert!(
            matches!(result, Err(Error::KeyTooLarge { .. })),
            "{op}: {result:?}"
        );
    }
    assert_err!(
        table.save_snapshot("BAD", ""),
        Error::InvalidSnapshotName(_)
    );
    // A valid name on a closed table: the table is checked before the snapshot directory.
    assert_err!(table.save_snapshot("exists", ""), Error::TableClosed);
}

#[test]
fn closing_a_table_leaves_its_duplicates_and_cursors_alone() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 30);
    let expected = contents(&table);
    let duplicate = table.duplicate().unwrap();
    let mut cursor = table.cursor().unwrap();
    let blob = blob_ref(&table);
    table.close();
    // The duplicate is an independent table.
    assert_eq!(contents(&duplicate), expected);
    duplicate.insert(b"more", b"x").unwrap();
    // The cursor is a stable view: closing its table does not close it.
    let read: Vec<_> = cursor
        .by_ref()
        .take(usize::MAX)
        .collect::<cairn::Result<Vec<_>>>()
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    assert_eq!(read, expected);
    // A blob reference of the closed table is refused by its duplicate (another table).
    assert_err!(duplicate.retrieve_blob(&blob), Error::BlobRefInvalid);
    // Dropping a table closes it; its duplicate goes on.
    let dup2 = duplicate.duplicate().unwrap();
    drop(duplicate);
    assert_eq!(dup2.lookup(b"more").unwrap().value(), Some(&b"x"[..]));
}

#[test]
fn every_operation_on_a_closed_session_fails_with_session_closed() {
    let (fs, session) = session();
    let table = filled(&session, small(), 20);
    table.save_snapshot("s", "").unwrap();
    fs.create_dir_all(Path::new("/exports")).unwrap();
    session.export_snapshot("s", "/exports/s").unwrap();
    session.close();
    session.close(); // idempotent
    assert!(!session.is_open());
    let files_before = files(&fs);
    let results: Vec<(&str, cairn::Result<()>)> = vec![
        ("new_table", session.new_table(small()).map(drop)),
        (
            "open_snapshot",
            session
                .open_snapshot("s", "", SnapshotOverrides::default())
                .map(drop),
        ),
        ("list_snapshots", session.list_snapshots().map(drop)),
        ("snapshot_exists", session.snapshot_exists("s").map(drop)),
        ("delete_snapshot", session.delete_snapshot("s")),
        (
            "export_snapshot",
            session.export_snapshot("s", "/exports/t"),
        ),
        (
            "import_snapshot",
            session.import_snapshot("t", "/exports/s"),
        ),
        // Even with inputs that would be refused on an open session.
        (
            "snapshot_exists BAD",
            session.snapshot_exists("BAD").map(drop),
        ),
        (
            "open_snapshot missing",
            session
                .open_snapshot("nope", "", SnapshotOverrides::default())
                .map(drop),
        ),
        ("delete_snapshot missing", session.delete_snapshot("nope")),
    ];
    for (op, result) in results {
        assert!(
            matches!(result, Err(Error::SessionClosed)),
            "{op} on a closed session: {result:?}"
        );
    }
    assert_eq!(files(&fs), files_before);
    // The snapshot survives and the directory can be opened again.
    let reopened = session_in(&fs);
    assert_eq!(reopened.list_snapshots().unwrap(), ["s"]);
    reopened
        .open_snapshot("s", "", SnapshotOverrides::default())
        .unwrap();
}

#[test]
fn tables_and_cursors_of_a_closed_session_are_closed() {
    let (fs, session) = session();
    let table = filled(&session, small(), 30);
    let open_other = filled(&session, small(), 10);
    let mut cursor = table.cursor().unwrap();
    cursor.next().unwrap().unwrap();
    let blob = blob_ref(&table);
    session.close();
    for (op, result) in table_ops(&table, &open_other, &blob) {
        assert!(
            matches!(result, Err(Error::TableClosed)),
            "{op} on a table of a closed session: {result:?}"
        );
    }
    assert_err!(cursor.next().unwrap(), Error::CursorClosed);
    // After its error the cursor is finished.
    assert!(cursor.next().is_none());
    assert!(matches!(cursor.peek(), Ok(None)));
    // A new session in the same directory is not disturbed by the old handles.
    let next = session_in(&fs);
    let fresh = filled(&next, small(), 10);
    assert_err!(table.save_snapshot("x", ""), Error::TableClosed);
    assert_err!(table.insert(b"k", b"v"), Error::TableClosed);
    assert!(!next.snapshot_exists("x").unwrap());
    assert!(next.list_snapshots().unwrap().is_empty());
    assert_err!(fresh.retrieve_blob(&blob), Error::BlobRefInvalid);
    drop(table);
    drop(cursor);
    assert_eq!(contents(&fresh).len(), 10);
}

#[test]
fn a_closed_cursor_fails_with_cursor_closed() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 30);
    let mut cursor = table.cursor_at(key(5)).unwrap();
    assert_eq!(cursor.next().unwrap().unwrap().key, key(5));
    cursor.close();
    cursor.close(); // idempotent
    assert_err!(cursor.next().unwrap(), Error::CursorClosed);
    assert!(
        cursor.next().is_none(),
        "a cursor is finished after its error"
    );
    let mut peeked = table.cursor_at(key(5)).unwrap();
    assert_eq!(peeked.peek().unwrap().unwrap().key, key(5));
    peeked.close();
    // Even an entry already peeked at is not handed out once the cursor is closed.
    assert_err!(peeked.next().unwrap(), Error::CursorClosed);
    assert!(matches!(peeked.peek(), Ok(None)));
    // A cursor at its end is not closed.
    let mut done = table.cursor_at(key(29)).unwrap();
    assert_eq!(
        done.by_ref()
            .take(5)
            .collect::<cairn::Result<Vec<_>>>()
            .unwrap()
            .len(),
        1
    );
    assert!(done.next().is_none());
    assert!(done
        .by_ref()
        .take(5)
        .collect::<cairn::Result<Vec<_>>>()
        .unwrap()
        .is_empty());
    // The table is unaffected.
    assert_eq!(contents(&table).len(), 30);
}

// ------------------------------------------------------------------------------------------------
// Unions

#[test]
fn unions_of_tables_of_different_sessions_are_rejected() {
    let (_fs1, s1) = session();
    let (_fs2, s2) = session();
    let a = filled(&s1, small(), 10);
    let b = filled(&s2, small(), 10);
    let a2 = filled(&s1, small(), 5);
    assert_err!(a.union(&b), Error::InvalidConfig(_));
    assert_err!(a.incremental_union(&b), Error::InvalidConfig(_));
    assert_err!(Table::unions(&[&a, &a2, &b]), Error::InvalidConfig(_));
    assert_err!(
        Table::incremental_unions(&[&b, &a]),
        Error::InvalidConfig(_)
    );
    // Nothing changed; a union within one session works.
    assert_eq!(contents(&a.union(&a2).unwrap()).len(), 10);
}

#[test]
fn unions_of_tables_with_different_resolve_functions_are_rejected() {
    let (_fs, session) = session();
    let concat = |n: &[u8], o: &[u8]| [n, o].concat();
    let shared = Resolve::custom("concat", concat);
    let make = |resolve: Resolve| session.new_table(small().resolve(resolve)).unwrap();
    let keep = make(Resolve::KeepNewest);
    let add = make(Resolve::AddU64Le);
    let custom_a = make(shared.clone());
    let custom_a2 = make(shared);
    // Another name is another function, whatever the closure.
    let custom_b = make(Resolve::custom("concat-v2", concat));
    // The same name wrapped twice is the same function.
    let custom_a3 = make(Resolve::custom("concat", concat));
    let pairs: [(&Table, &Table); 7] = [
        (&keep, &add),
        (&add, &keep),
        (&keep, &custom_a),
        (&custom_a, &keep),
        (&add, &custom_a),
        (&custom_a, &custom_b),
        (&custom_b, &custom_a),
    ];
    for (x, y) in pairs {
        assert_err!(x.union(y), Error::InvalidConfig(_));
        assert_err!(x.incremental_union(y), Error::InvalidConfig(_));
        assert_err!(Table::unions(&[x, x, y]), Error::InvalidConfig(_));
    }
    // The same name is the same function.
    custom_a.union(&custom_a2).unwrap();
    custom_a.union(&custom_a3).unwrap();
    keep.union(&make(Resolve::KeepNewest)).unwrap();
    add.union(&make(Resolve::AddU64Le)).unwrap();
}

#[test]
fn a_union_of_no_tables_is_rejected() {
    assert_err!(Table::unions(&[]), Error::InvalidConfig(_));
    assert_err!(Table::incremental_unions(&[]), Error::InvalidConfig(_));
}

#[test]
fn union_credits_on_a_table_without_a_union_are_all_returned() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 20);
    let before = contents(&table);
    let stats_before = table.stats().unwrap();
    for credits in [0, 1, 1000, u64::MAX] {
        assert_eq!(table.supply_union_credits(credits).unwrap(), credits);
    }
    assert_eq!(table.remaining_union_debt().unwrap(), 0);
    assert_eq!(contents(&table), before);
    assert_eq!(table.stats().unwrap(), stats_before);
}

#[test]
fn union_credits_in_any_amount_are_safe() {
    let (_fs, session) = session();
    let a = filled(&session, small(), 30);
    let b = session.new_table(small()).unwrap();
    for i in 20..50 {
        b.insert(key(i), b"b").unwrap();
    }
    let expected = contents(&a.union(&b).unwrap());
    // Zero credits do nothing; a huge supply finishes the union without overflowing.
    let u = a.incremental_union(&b).unwrap();
    let debt = u.remaining_union_debt().unwrap();
    assert!(debt > 0);
    assert_eq!(u.supply_union_credits(0).unwrap(), 0);
    assert_eq!(u.remaining_union_debt().unwrap(), debt);
    let leftover = u.supply_union_credits(u64::MAX).unwrap();
    assert!(leftover > 0);
    assert_eq!(u.remaining_union_debt().unwrap(), 0);
    assert_eq!(u.supply_union_credits(u64::MAX).unwrap(), u64::MAX);
    assert_eq!(contents(&u), expected);
    // A union with itself, and a union of empty tables.
    let twice = a.union(&a).unwrap();
    assert_eq!(contents(&twice), contents(&a));
    let e1 = session.new_table(small()).unwrap();
    let e2 = session.new_table(small()).unwrap();
    let empty = e1.incremental_union(&e2).unwrap();
    assert_eq!(empty.supply_union_credits(5).unwrap(), 5);
    assert!(contents(&empty).is_empty());
}

#[test]
fn add_u64_upserts_must_carry_exactly_eight_bytes() {
    let (_fs, session) = session();
    let table = session
        .new_table(small().resolve(Resolve::AddU64Le))
        .unwrap();
    table.upsert(b"k", 5u64.to_le_bytes()).unwrap();
    let good = 1u64.to_le_bytes();
    for len in [0usize, 1, 7, 9, 16, 4096] {
        let bad = vec![1u8; len];
        let invalid = |e: &Error| matches!(e, Error::InvalidUpdate(_));
        let results = [
            table.upsert(b"k", &bad),
            table.upserts(&[(&b"k"[..], &bad[..])]),
            table.upserts(&[(&b"k"[..], &good[..]), (&b"k"[..], &bad[..])]),
            table.updates(&[(&b"k"[..], Update::Upsert(&bad))]),
            table.updates(&[
                (&b"k"[..], Update::Upsert(&good)),
                (&b"j"[..], Update::Insert(b"x")),
                (&b"k"[..], Update::Upsert(&bad)),
            ]),
        ];
        for result in results {
            assert!(result.as_ref().is_err_and(invalid), "{len}: {result:?}");
        }
    }
    // Nothing of the refused batches was applied.
    assert_eq!(
        table.lookup(b"k").unwrap().value(),
        Some(&5u64.to_le_bytes()[..])
    );
    assert!(!table.member(b"j").unwrap());
    // Inserts of any length are allowed; a later upsert replaces a non-8-byte value.
    table.insert(b"odd", b"abc").unwrap();
    table.upsert(b"odd", good).unwrap();
    assert_eq!(table.lookup(b"odd").unwrap().value(), Some(&good[..]));
    table.upsert(b"k", good).unwrap();
    assert_eq!(
        table.lookup(b"k").unwrap().value(),
        Some(&6u64.to_le_bytes()[..])
    );
    // On other tables, upserts of any length are fine.
    let keep = session.new_table(small()).unwrap();
    keep.upsert(b"k", b"").unwrap();
    keep.upsert(b"k", b"abc").unwrap();
}

// ------------------------------------------------------------------------------------------------
// Blob references

#[test]
fn blob_references_from_another_table_are_refused() {
    let (_fs, session) = session();
    let a = filled(&session, small(), 10);
    let b = filled(&session, small(), 10);
    let from_a = blob_ref(&a);
    let from_b = blob_ref(&b);
    assert_err!(b.retrieve_blob(&from_a), Error::BlobRefInvalid);
    assert_err!(a.retrieve_blob(&from_b), Error::BlobRefInvalid);
    assert_err!(
        a.retrieve_blobs(&[from_a.clone(), from_b.clone()]),
        Error::BlobRefInvalid
    );
    // A duplicate, a snapshot reopened and a union are other tables too.
    let duplicate = a.duplicate().unwrap();
    assert_err!(duplicate.retrieve_blob(&from_a), Error::BlobRefInvalid);
    assert_err!(
        a.retrieve_blob(&blob_ref(&duplicate)),
        Error::BlobRefInvalid
    );
    a.save_snapshot("a", "").unwrap();
    let reopened = session
        .open_snapshot("a", "", SnapshotOverrides::default())
        .unwrap();
    assert_err!(reopened.retrieve_blob(&from_a), Error::BlobRefInvalid);
    let union = a.incremental_union(&b).unwrap();
    assert_err!(union.retrieve_blob(&from_a), Error::BlobRefInvalid);
    // Each table still reads its own.
    assert_eq!(a.retrieve_blob(&from_a).unwrap(), b"blob-0");
    assert_eq!(b.retrieve_blob(&from_b).unwrap(), b"blob-0");
}

#[test]
fn blob_references_go_stale_when_the_table_changes() {
    let (_fs, session) = session();
    let table = filled(&session, small(), 10);
    type Change = Box<dyn Fn(&Table)>;
    let changes: Vec<(&str, Change)> = vec![
        (
            "insert of another key",
            Box::new(|t: &Table| t.insert(b"x", b"y").unwrap()),
        ),
        (
            "delete of the key",
            Box::new(|t: &Table| t.delete(key(0)).unwrap()),
        ),
        (
            "delete of an absent key",
            Box::new(|t: &Table| t.delete(b"absent").unwrap()),
        ),
        (
            "upsert",
            Box::new(|t: &Table| t.upsert(b"x", b"z").unwrap()),
        ),
        (
            "insert of the same blob",
            Box::new(|t: &Table| t.insert_with_blob(key(0), b"v0", b"blob-0").unwrap()),
        ),
        (
            "a batch",
            Box::new(|t: &Table| t.updates(&[(&b"a"[..], Update::Delete)]).unwrap()),
        ),
    ];
    for (what, change) in changes {
        table.insert_with_blob(key(0), b"v0", b"blob-0").unwrap();
        let found = table.lookup(key(0)).unwrap();
        let blob = found.blob().unwrap().clone();
        let from_cursor = table
            .cursor()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .blob
            .unwrap();
        let from_range = table.range_lookup(&key(0)[..]..=&key(0)[..]).unwrap()[0]
            .blob
            .clone()
            .unwrap();
        for b in [&blob, &from_cursor, &from_range] {
            assert_eq!(table.retrieve_blob(b).unwrap(), b"blob-0");
        }
        change(&table);
        for b in [&blob, &from_cursor, &from_range] {
            let result = table.retrieve_blob(b);
            assert!(
                matches!(result, Err(Error::BlobRefInvalid)),
                "after {what}: {result:?}"
            );
        }
        assert_err!(
            table.retrieve_blobs(&[blob_ref_or(&table, &blob), blob.clone()]),
            Error::BlobRefInvalid
        );
    }
}

/// A current reference to key 0's blob, or `fallback` when key 0 has none now.
fn blob_ref_or(table: &Table, fallback: &BlobRef) -> BlobRef {
    match table.lookup(key(0)).unwrap() {
        LookupResult::FoundWithBlob(_, blob) => blob,
        _ => fallback.clone(),
    }
}

#[test]
fn blob_references_survive_refused_updates_and_reads() {
    let (_fs, session) = session();
    let table = session
        .new_table(small().resolve(Resolve::AddU64Le))
        .unwrap();
    table.insert_with_blob(key(0), b"v0", b"blob-0").unwrap();
    for i in 1..10 {
        table.insert(key(i), b"v").unwrap();
    }
    let blob = blob_ref(&table);
    // Refused updates change nothing, so the reference stays current.
    let big = vec![0u8; KEY_SIZE_MAX + 1];
    assert_err!(table.insert(&big, b"v"), Error::KeyTooLarge { .. });
    assert_err!(table.upsert(b"k", b"short"), Error::InvalidUpdate(_));
    // So do reads, snapshots, duplicates and unions made from the table.
    table.lookups(&[key(1), key(2)]).unwrap();
    table
        .cursor()
        .unwrap()
        .by_ref()
        .take(100)
        .collect::<cairn::Result<Vec<_>>>()
        .unwrap();
    table.save_snapshot("s", "").unwrap();
    let _duplicate = table.duplicate().unwrap();
    let _union = table.union(&table).unwrap();
    table.stats().unwrap();
    assert_eq!(table.retrieve_blob(&blob).unwrap(), b"blob-0");
}

#[test]
fn blob_references_of_a_union_survive_union_credits() {
    let (_fs, session) = session();
    let a = filled(&session, small(), 30);
    let b = session.new_table(small()).unwrap();
    for i in 10..40 {
        b.insert(key(i), b"b").unwrap();
    }
    let union = a.incremental_union(&b).unwrap();
    let blob = blob_ref(&union);
    assert_eq!(union.retrieve_blob(&blob).unwrap(), b"blob-0");
    union.supply_union_credits(3).unwrap();
    assert_eq!(union.retrieve_blob(&blob).unwrap(), b"blob-0");
    union.supply_union_credits(u64::MAX).unwrap();
    assert_eq!(union.remaining_union_debt().unwrap(), 0);
    // Union work does not change the table's contents, so the reference is still current.
    assert_eq!(union.retrieve_blob(&blob).unwrap(), b"blob-0");
    assert_eq!(union.retrieve_blob(&blob_ref(&union)).unwrap(), b"blob-0");
    union.insert(b"x", b"y").unwrap();
    assert_err!(union.retrieve_blob(&blob), Error::BlobRefInvalid);
}

#[test]
fn blob_references_of_a_closed_table() {
    let (_fs, session) = session();
    let a = filled(&session, small(), 10);
    let b = filled(&session, small(), 10);
    let blob = blob_ref(&a);
    a.close();
    assert_err!(a.retrieve_blob(&blob), Error::TableClosed);
    assert_err!(b.retrieve_blob(&blob), Error::BlobRefInvalid);
    // The reference itself still knows its size and can be dropped safely.
    assert_eq!(blob.len_bytes(), 6);
    drop(blob);
}

// ------------------------------------------------------------------------------------------------
// Session directories

#[test]
fn bad_session_directories_are_refused() {
    let fs = MemFs::new();
    let open = |dir: &str| Session::open_with(Arc::new(fs.clone()), dir, SessionOptions::default());
    let no_create = SessionOptions::default().create_if_missing(false);
    assert_err!(
        Session::open_with(Arc::new(fs.clone()), "/missing", no_create),
        Error::SessionDirMissing(p) if p == Path::new("/missing")
    );
    fs.create(Path::new("/file")).unwrap();
    assert_err!(open("/file"), Error::SessionDirMissing(_));
    // By default a missing directory is created.
    drop(open("/created/here").unwrap());
    assert!(fs.is_dir(Path::new("/created/here")).unwrap());

    fs.create_dir_all(Path::new("/s")).unwrap();
    let first = open("/s").unwrap();
    assert_err!(open("/s"), Error::SessionLocked(p) if p == Path::new("/s"));
    first.close();
    let again = open("/s").unwrap();
    drop(again);

    // A directory with something in it that is not a session.
    fs.create_dir_all(Path::new("/other/stuff")).unwrap();
    assert_err!(open("/other"), Error::SessionCorrupted { .. });
    // A session whose metadata is damaged, or from a future version.
    let metadata = Path::new("/s/metadata");
    let good = fs.file_bytes(metadata).unwrap();
    let mut flipped = good.clone();
    flipped[14] ^= 1;
    let mut future = good.clone();
    future[8] = 2;
    for bytes in [Vec::new(), b"garbage".to_vec(), flipped, future] {
        fs.set_file_bytes(metadata, bytes);
        assert_err!(
            open("/s"),
            Error::SessionCorrupted { path, .. } if path == Path::new("/s")
        );
    }
    // A newer format, whole (valid checksum), or of another length: not damage.
    let mut newer = good.clone();
    newer[8] = 2;
    let crc = crc32c(&newer[..20]);
    newer[20..].copy_from_slice(&crc.to_le_bytes());
    let mut longer = good.clone();
    longer[8] = 2;
    longer.extend_from_slice(&[0; 16]);
    for bytes in [newer, longer] {
        fs.set_file_bytes(metadata, bytes);
        assert_err!(
            open("/s"),
            Error::UnsupportedVersion {
                what: "session metadata",
                found: 2,
                supported: 1
            }
        );
    }
    // A refused open does not keep the lock.
    fs.set_file_bytes(metadata, good);
    open("/s").unwrap();
}

// ------------------------------------------------------------------------------------------------
// Snapshots that are not what they claim to be

/// CRC32C (Castagnoli), bit by bit: enough to forge a metadata file with a valid checksum.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn damaged_snapshots_are_refused_with_snapshot_corrupted() {
    let (fs, session) = session();
    // Snapshot run files are hard links to the table's: each damaged snapshot gets its own
    // table, so that damaging one does not damage the others.
    let fresh = || filled(&session, small(), 30);
    let corrupted_by = |name: &str, check: &dyn Fn(&Path, &Error) -> bool| match session
        .open_snapshot(name, "", SnapshotOverrides::default())
    {
        Err(Error::SnapshotCorrupted {
            name: n,
            path,
            source,
        }) => {
            assert_eq!(n, name);
            assert!(check(&path, &source), "{name}: {path:?} {source:?}");
        }
        Err(e) => panic!("{name}: expected SnapshotCorrupted, got {e:?}"),
        Ok(_) => panic!("{name}: expected SnapshotCorrupted, got Ok(..)"),
    };

    // A flipped byte in a run file: its checksum does not match.
    fresh().save_snapshot("flipped", "").unwrap();
    let keyops = Path::new("/s/snapshots/flipped/0.keyops");
    let mut bytes = fs.file_bytes(keyops).unwrap();
    bytes[100] ^= 0x40;
    fs.set_file_bytes(keyops, bytes);
    // (Page 0 holds the run's first key, read as the run opens, so the open finds it.)
    corrupted_by("flipped", &|path, source| {
        path == keyops
            && matches!(source, Error::CorruptFile { what: "run data", detail, .. }
                if detail.starts_with("page 0 "))
    });

    // A truncated metadata file.
    fresh().save_snapshot("truncated", "").unwrap();
    let metadata = Path::new("/s/snapshots/truncated/metadata");
    let bytes = fs.file_bytes(metadata).unwrap();
    fs.set_file_bytes(metadata, bytes[..bytes.len() / 2].to_vec());
    corrupted_by("truncated", &|path, source| {
        path == metadata
            && matches!(
                source,
                Error::CorruptFile {
                    what: "snapshot metadata",
                    ..
                }
            )
    });

    // Metadata of a later format version (with a valid checksum): the cause is in `source`.
    fresh().save_snapshot("future", "").unwrap();
    let metadata = Path::new("/s/snapshots/future/metadata");
    let mut bytes = fs.file_bytes(metadata).unwrap();
    bytes[8..12].copy_from_slice(&4u32.to_le_bytes());
    let body = bytes.len() - 4;
    let crc = crc32c(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    fs.set_file_bytes(metadata, bytes);
    corrupted_by("future", &|path, source| {
        path == metadata
            && matches!(
                source,
                Error::UnsupportedVersion {
                    what: "snapshot metadata",
                    found: 4,
                    supported: 3
                }
            )
    });

    // A missing run file.
    fresh().save_snapshot("missing-file", "").unwrap();
    let filter = Path::new("/s/snapshots/missing-file/1.filter");
    fs.remove_file(filter).unwrap();
    corrupted_by("missing-file", &|path, source| {
        path == filter && source.is_io()
    });

    // Undamaged snapshots are fine; damaged ones can be deleted.
    let table = fresh();
    table.save_snapshot("fine", "").unwrap();
    let reopened = session
        .open_snapshot("fine", "", SnapshotOverrides::default())
        .unwrap();
    assert_eq!(contents(&reopened), contents(&table));
    for name in ["flipped", "truncated", "future", "missing-file"] {
        session.delete_snapshot(name).unwrap();
    }
    assert_eq!(session.list_snapshots().unwrap(), ["fine"]);
}

#[test]
fn snapshots_of_a_session_with_another_salt_are_refused_when_opened() {
    let fs = MemFs::new();
    let open = |dir: &str, salt: u64| {
        fs.create_dir_all(Path::new(dir)).unwrap();
        let options = SessionOptions::default().salt(Some(salt));
        Session::open_with(Arc::new(fs.clone()), dir, options).unwrap()
    };
    let a = open("/a", 1);
    let table = filled(&a, small(), 30);
    table.save_snapshot("s", "").unwrap();
    a.export_snapshot("s", "/exported").unwrap();
    // The Bloom filters were built with salt 1: another salt would give wrong answers.
    let b = open("/b", 2);
    b.import_snapshot("s", "/exported").unwrap();
    assert_err!(
        b.open_snapshot("s", "", SnapshotOverrides::default()),
        Error::SnapshotCorrupted { source, .. }
            if matches!(source.as_ref(), Error::CorruptFile { what: "bloom filter", .. })
    );
    // A session with the same salt opens it.
    let c = open("/c", 1);
    c.import_snapshot("s", "/exported").unwrap();
    let reopened = c
        .open_snapshot("s", "", SnapshotOverrides::default())
        .unwrap();
    assert_eq!(contents(&reopened), contents(&table));
}

// ------------------------------------------------------------------------------------------------
// The rules after an I/O error (docs/errors.md)

fn try_contents(table: &Table) -> cairn::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    Ok(table
        .range_lookup(..)?
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect())
}

/// Updates, reads, snapshots and a union, stopping at the first error (with the step's name).
fn script(
    session: &Session,
    table: &Table,
    base: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), (&'static str, Error)> {
    let step = |name: &'static str| move |e: Error| (name, e);
    for i in 100..120 {
        table.insert(key(i), b"new").map_err(step("insert"))?;
    }
    let keys: Vec<_> = (0..120).map(key).collect();
    table.lookups(&keys).map_err(step("lookups"))?;
    table
        .cursor()
        .and_then(|c| c.collect::<cairn::Result<Vec<_>>>())
        .map_err(step("cursor"))?;
    table
        .save_snapshot("next", "")
        .map_err(step("save_snapshot"))?;
    let reopened = session
        .open_snapshot("base", "", SnapshotOverrides::default())
        .map_err(step("open_snapshot"))?;
    assert_eq!(
        try_contents(&reopened).map_err(step("read reopened"))?,
        base
    );
    session
        .export_snapshot("base", "/exports/base")
        .map_err(step("export_snapshot"))?;
    session
        .import_snapshot("copy", "/exports/base")
        .map_err(step("import_snapshot"))?;
    session
        .delete_snapshot("next")
        .map_err(step("delete_snapshot"))?;
    let union = table.incremental_union(&reopened).map_err(step("union"))?;
    union
        .supply_union_credits(u64::MAX)
        .map_err(step("union credits"))?;
    Ok(())
}

/// A small write buffer and a fixed Bloom filter size (no search for the bits per entry that
/// give a target false-positive rate, which costs milliseconds per table).
fn cheap() -> TableConfig {
    small().bloom(BloomAlloc::BitsPerEntry(10.0))
}

/// A session in `/s` reading with pread (cheaper to open than probing io_uring every time).
fn pread_session(fs: &MemFs) -> Session {
    fs.create_dir_all(Path::new("/s")).unwrap();
    let options = SessionOptions::default().io_backend(IoBackendKind::Pread);
    Session::open_with(Arc::new(fs.clone()), "/s", options).unwrap()
}

/// One injected I/O failure at every primitive in turn: the error reaches the caller, typed as
/// an I/O error (or a SnapshotCorrupted whose source is one); a table whose update failed is
/// broken (or, if only the removal of released files failed, still usable); and after closing
/// and reopening the session every snapshot that was completely saved opens with its contents.
#[test]
fn an_io_fault_at_any_step_reaches_the_caller_and_spares_saved_snapshots() {
    let mut faults = 0;
    for n in 0.. {
        assert!(n < 50_000, "the script never ran out of primitives");
        let fs = MemFs::new();
        let session = pread_session(&fs);
        let table = filled(&session, cheap(), 30);
        table.save_snapshot("base", "").unwrap();
        let base = contents(&table);
        let mut after = base.clone();
        after.extend((100..120).map(|i| (key(i), b"new".to_vec())));
        fs.create_dir_all(Path::new("/exports")).unwrap();

        fs.fail_after(n);
        let result = script(&session, &table, &base);
        let injected = fs.take_injected();
        if injected.is_empty() {
            // The fault would come after the script's last primitive: every step was tried.
            result.unwrap_or_else(|(step, e)| panic!("{step} failed without a fault: {e}"));
            break;
        }
        faults += 1;
        let (step, err) = match result {
            Err(failure) => failure,
            Ok(()) => {
                // Only the removal of a released run's files (its `stat`, cut or removal, or
                // the rename that keeps it for reuse), from a `Drop` or a table's close (which
                // cannot report it), may fail without an error: the file stays queued for the
                // next operation, which retries it (and reports a failure again), and a new
                // session empties `active/` anyway.
                let removal = [FsOp::Stat, FsOp::Truncate, FsOp::RemoveFile, FsOp::Rename];
                assert!(
                    injected
                        .iter()
                        .all(|f| removal.contains(&f.op) && f.path.starts_with("/s/active")),
                    "fault {n} was injected but no operation reported it: {injected:?}"
                );
                session.list_snapshots().unwrap();
                assert!(!fs.file_paths().contains(&injected[0].path));
                continue;
            }
        };
        let typed = err.is_io()
            || matches!(&err, Error::SnapshotCorrupted { source, .. } if source.is_io());
        assert!(typed, "fault {n} in {step}: {err:?}");
        if step == "insert" {
            let next = table.lookup(key(0));
            assert!(
                matches!(next, Ok(_) | Err(Error::TableBroken(_))),
                "fault {n}: after a failed insert: {:?}",
                next.err()
            );
        }

        session.close();
        drop(table);
        let session = pread_session(&fs);
        let open = |name: &str| {
            session
                .open_snapshot(name, "", SnapshotOverrides::default())
                .unwrap_or_else(|e| panic!("fault {n} in {step}: snapshot {name}: {e}"))
        };
        assert_eq!(contents(&open("base")), base, "fault {n} in {step}");
        if session.snapshot_exists("next").unwrap() {
            assert_eq!(contents(&open("next")), after, "fault {n} in {step}");
        }
        if session.snapshot_exists("copy").unwrap() {
            assert_eq!(contents(&open("copy")), base, "fault {n} in {step}");
        }
        for name in session.list_snapshots().unwrap() {
            assert!(
                ["base", "next", "copy"].contains(&name.as_str()),
                "fault {n} in {step}: stray snapshot {name}"
            );
        }
    }
    assert!(faults > 100, "only {faults} faults were injected");
}

#[test]
fn a_union_outlives_the_tables_it_was_made_from() {
    let (_fs, session) = session();
    let a = filled(&session, small(), 30);
    let b = session.new_table(small()).unwrap();
    for i in 20..50 {
        b.insert(key(i), b"b").unwrap();
    }
    let expected = contents(&a.union(&b).unwrap());
    let union = a.incremental_union(&b).unwrap();
    let blob = blob_ref(&union);
    union.supply_union_credits(5).unwrap();
    a.close();
    drop(b);
    // The union holds what it needs: closing or dropping its inputs changes nothing.
    assert_eq!(contents(&union), expected);
    assert_eq!(union.retrieve_blob(&blob).unwrap(), b"blob-0");
    union.supply_union_credits(u64::MAX).unwrap();
    assert_eq!(contents(&union), expected);
    assert_err!(a.incremental_union(&union), Error::TableClosed);
    assert_err!(union.incremental_union(&a), Error::TableClosed);
}

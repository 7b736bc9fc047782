//! Restart in seconds, and still never damaged data: an open reads metadata, filters and
//! indexes, each data page is checked against its CRC32C when it is read, and scrubs,
//! `verify_on_open` and `verify_snapshot` find damage that no read has touched yet.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::fs::{FileSystem, MemFs};
use cairn::{Error, Session, SessionOptions, SnapshotOverrides, TableConfig};

const KEYS: u32 = 20_000;

fn value(i: u32) -> Vec<u8> {
    format!("value-{i:05}-{}", "x".repeat(60)).into_bytes()
}

fn open(fs: &MemFs, options: SessionOptions) -> Session {
    fs.create_dir_all(Path::new("/s")).unwrap();
    Session::open_with(Arc::new(fs.clone()), "/s", options.log(None)).unwrap()
}

/// A session directory holding snapshot `s` of a table of [`KEYS`] keys; returns the path of
/// the largest key/ops file of the snapshot and its size.
fn saved(fs: &MemFs) -> (PathBuf, usize) {
    let session = open(fs, SessionOptions::default());
    let table = session
        .new_table(TableConfig::default().write_buffer_entries(1000))
        .unwrap();
    // Scrambled order, so that runs are merged rather than linked.
    for i in 0..KEYS {
        let k = (i * 7919) % KEYS;
        table.insert(common::key(k), value(k)).unwrap();
    }
    table.save_snapshot("s", "").unwrap();
    session.close();
    fs.file_paths()
        .into_iter()
        .filter(|p| p.starts_with("/s/snapshots/s") && p.extension().is_some_and(|e| e == "keyops"))
        .map(|p| {
            let len = fs.file_bytes(&p).unwrap().len();
            (p, len)
        })
        .max_by_key(|(_, len)| *len)
        .unwrap()
}

#[test]
fn an_open_reads_no_data_pages() {
    let fs = MemFs::new();
    let (_, _) = saved(&fs);
    let keyops: Vec<PathBuf> = fs
        .file_paths()
        .into_iter()
        .filter(|p| p.starts_with("/s/snapshots/s") && p.extension().is_some_and(|e| e == "keyops"))
        .collect();
    let stored: u64 = keyops
        .iter()
        .map(|p| fs.file_bytes(p).unwrap().len() as u64)
        .sum();
    let runs = keyops.len() as u64;
    let session = open(&fs, SessionOptions::default());
    let before = fs.bytes_read("keyops");
    let table = session
        .open_snapshot("s", "", SnapshotOverrides::default())
        .unwrap();
    let lazy = fs.bytes_read("keyops") - before;
    // Two pages per run: the ones holding its first and last key.
    assert!(
        lazy <= runs * 2 * 4096,
        "{lazy} bytes of {stored} for {runs} runs"
    );
    assert!(lazy * 10 < stored, "{lazy} bytes of {stored}");
    assert_eq!(table.get(common::key(17)).unwrap(), Some(value(17)));
    drop(table);
    session.close();

    let session = open(&fs, SessionOptions::default().verify_on_open(true));
    let before = fs.bytes_read("keyops");
    let table = session
        .open_snapshot("s", "", SnapshotOverrides::default())
        .unwrap();
    let full = fs.bytes_read("keyops") - before;
    assert!(full >= stored, "{full} of {stored}");
    drop(table);
}

#[test]
fn a_damaged_page_is_never_data_and_every_check_finds_it() {
    let fs = MemFs::new();
    let (keyops, len) = saved(&fs);
    let pages = len / 4096;
    assert!(pages >= 8, "{pages} pages");
    let mut bytes = fs.file_bytes(&keyops).unwrap();
    bytes[(pages / 2) * 4096 + 2000] ^= 0x20;
    fs.set_file_bytes(&keyops, bytes);

    // The open does not read the page, so it succeeds...
    let session = open(&fs, SessionOptions::default());
    let table = session
        .open_snapshot("s", "", SnapshotOverrides::default())
        .unwrap();
    // ...and every read of it fails, naming the page; every other key reads right.
    let mut damaged = 0;
    for i in 0..KEYS {
        match table.get(common::key(i)) {
            Ok(found) => assert_eq!(found, Some(value(i)), "key {i}"),
            Err(Error::CorruptFile {
                what: "run data",
                detail,
                ..
            }) => {
                assert!(detail.contains(&format!("page {} ", pages / 2)), "{detail}");
                damaged += 1;
            }
            Err(e) => panic!("key {i}: {e:?}"),
        }
    }
    assert!(
        damaged > 0 && damaged < 100,
        "{damaged} keys on the damaged page"
    );
    assert!(matches!(
        table.cursor().unwrap().collect::<cairn::Result<Vec<_>>>(),
        Err(Error::CorruptFile {
            what: "run data",
            ..
        })
    ));
    // A scrub finds it with no read having asked.
    let report = session.scrub().unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(report.runs >= 1 && report.bytes > 0, "{report:?}");
    assert!(report.problems[0]
        .detail
        .contains(&format!("page {} ", pages / 2)));
    drop(table);
    session.close();

    // So does a full open...
    let session = open(&fs, SessionOptions::default().verify_on_open(true));
    assert!(matches!(
        session.open_snapshot("s", "", SnapshotOverrides::default()),
        Err(Error::SnapshotCorrupted { .. })
    ));
    // ...and verification of the snapshot on disk.
    let report = session
        .verify_snapshot("s", Default::default(), &mut |_| {})
        .unwrap();
    assert!(!report.is_sound());
    assert!(
        format!("{report:?}").contains(&format!("page {} ", pages / 2)),
        "{report:?}"
    );
    session.close();

    // And a background scrub, which logs it and keeps its report.
    let session = open(
        &fs,
        SessionOptions::default()
            .scrub_interval(Some(Duration::from_millis(20)))
            .scrub_bytes_per_second(0),
    );
    let table = session
        .open_snapshot("s", "", SnapshotOverrides::default())
        .unwrap();
    let start = Instant::now();
    let report = loop {
        if let Some(report) = session.last_scrub() {
            break report;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no scrub ran");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(report.problems.len(), 1, "{report:?}");
    drop(table);
    session.close();
}

/// A scrub of sound tables finds nothing, and reads a run two tables share once.
#[test]
fn a_scrub_of_sound_tables_is_clean() {
    let fs = MemFs::new();
    saved(&fs);
    let session = open(&fs, SessionOptions::default());
    let table = session
        .open_snapshot("s", "", SnapshotOverrides::default())
        .unwrap();
    let copy = table.duplicate().unwrap();
    let report = session.scrub().unwrap();
    assert!(report.is_clean(), "{report:?}");
    // Runs shared by the duplicate are read once.
    assert_eq!(
        report.runs,
        table.stats().unwrap().runs as u64,
        "{report:?}"
    );
    drop((table, copy));
}

/// A background scrub does not keep a session whose handles are all gone open (and its
/// directory locked) until it finishes: a slow scrub stops within a chunk.
#[test]
fn a_slow_background_scrub_lets_a_dropped_session_go() {
    let fs = MemFs::new();
    saved(&fs);
    let options = SessionOptions::default()
        .scrub_interval(Some(Duration::from_millis(10)))
        .scrub_bytes_per_second(1024);
    let session = open(&fs, options);
    let table = session
        .open_snapshot("s", "", SnapshotOverrides::default())
        .unwrap();
    // The scrub is under way (its pace would take half an hour for this table).
    std::thread::sleep(Duration::from_millis(300));
    assert!(session.last_scrub().is_none());
    drop(table);
    drop(session);
    let start = Instant::now();
    loop {
        fs.create_dir_all(Path::new("/s")).unwrap();
        match Session::open_with(
            Arc::new(fs.clone()),
            "/s",
            SessionOptions::default().log(None),
        ) {
            Ok(_) => break,
            Err(Error::SessionLocked(_)) => {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "the scrub kept the lock"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

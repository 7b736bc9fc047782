//! What happens after things go wrong: an I/O error in the middle of an update, handles that
//! outlive their session, and inputs that would break a resolve function's associativity.

use std::path::Path;
use std::sync::Arc;

mod common;

use cairn::fs::{FileSystem, MemFs};
use cairn::{Error, Resolve, Session, SessionOptions, TableConfig};
use common::TestFs;

fn session_on(fs: Arc<dyn FileSystem>) -> Session {
    if !fs.exists(Path::new("/s")).unwrap() {
        fs.create_dir_all(Path::new("/s")).unwrap();
    }
    Session::open_with(fs, "/s", SessionOptions::default()).unwrap()
}

fn config(write_buffer_entries: usize) -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(write_buffer_entries)
        .merge_batch_size(1)
}

#[test]
fn a_failed_flush_breaks_the_table_instead_of_losing_data_silently() {
    for suffix in [".filter", ".keyops", ".index", ".checksums"] {
        let fs = Arc::new(TestFs::default());
        let session = session_on(fs.clone());
        let table = session.new_table(config(4)).unwrap();
        for k in 0..19u8 {
            table.insert([k], b"v").unwrap();
        }
        *fs.fail_create.lock().unwrap() = Some(suffix.to_string());
        // Keep updating until the injected fault hits a flush or a merge.
        let mut k = 19u8;
        let err = loop {
            match table.insert([k], b"v") {
                Ok(()) => k += 1,
                Err(e) => break e,
            }
            assert!(k < 200, "the fault was never hit");
        };
        assert!(err.is_io(), "{suffix}: {err}");
        // The table refuses to answer rather than answer wrongly.
        assert!(matches!(table.lookup([0]), Err(Error::TableBroken(_))));
        assert!(matches!(
            table.insert([0], b"v"),
            Err(Error::TableBroken(_))
        ));
        assert!(matches!(table.cursor(), Err(Error::TableBroken(_))));
        // The session goes on: a new table works.
        let fresh = session.new_table(config(4)).unwrap();
        for k in 0..30u8 {
            fresh.insert([k], b"w").unwrap();
        }
        assert_eq!(fresh.lookup([3]).unwrap().value(), Some(&b"w"[..]));
    }
}

#[test]
fn runs_kept_alive_past_their_session_do_not_touch_the_next_one() {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let a = session_on(fs.clone());
    let ta = a.new_table(config(4)).unwrap();
    for k in 0..4u8 {
        ta.insert([k], b"a").unwrap();
    }
    let mut cursor = ta.cursor().unwrap();
    drop(ta);
    // The cursor keeps the session (and its directory lock) alive...
    assert!(matches!(
        Session::open_with(fs.clone(), "/s", SessionOptions::default()),
        Err(Error::SessionLocked(_))
    ));
    a.close(); // ...until the session is closed, which closes its cursors.
    drop(a);

    let b = session_on(fs.clone());
    let tb = b.new_table(config(4)).unwrap();
    for k in 10..14u8 {
        tb.insert([k], b"b").unwrap();
    }
    assert!(matches!(cursor.next(), Some(Err(Error::CursorClosed))));
    // Releasing it touches none of the new session's files.
    drop(cursor);
    for k in 14..40u8 {
        tb.insert([k], b"b").unwrap();
    }
    assert_eq!(tb.lookup([10]).unwrap().value(), Some(&b"b"[..]));
}

#[test]
fn blob_references_do_not_cross_sessions() {
    let s1 = session_on(Arc::new(MemFs::new()));
    let s2 = session_on(Arc::new(MemFs::new()));
    let t1 = s1.new_table(config(4)).unwrap();
    let t2 = s2.new_table(config(4)).unwrap();
    t1.insert_with_blob(b"k", b"v", b"secret").unwrap();
    t2.insert_with_blob(b"k", b"v", b"other").unwrap();
    let r1 = t1.lookup(b"k").unwrap();
    let blob = r1.blob().unwrap();
    assert_eq!(t1.retrieve_blob(blob).unwrap(), b"secret");
    assert!(matches!(t2.retrieve_blob(blob), Err(Error::BlobRefInvalid)));
}

#[test]
fn add_u64_upserts_must_be_eight_bytes() {
    let session = session_on(Arc::new(MemFs::new()));
    let table = session
        .new_table(config(2).resolve(Resolve::AddU64Le))
        .unwrap();
    table.insert(b"k", 5u64.to_le_bytes()).unwrap();
    assert!(matches!(
        table.upsert(b"k", b"xy"),
        Err(Error::InvalidUpdate(_))
    ));
    table.upsert(b"k", 7u64.to_le_bytes()).unwrap();
    assert_eq!(
        table.lookup(b"k").unwrap().value(),
        Some(&12u64.to_le_bytes()[..])
    );
    // A short inserted value is replaced by the next upsert.
    table.insert(b"s", b"xy").unwrap();
    table.upsert(b"s", 1u64.to_le_bytes()).unwrap();
    assert_eq!(
        table.lookup(b"s").unwrap().value(),
        Some(&1u64.to_le_bytes()[..])
    );
}

//! Snapshots: save a table, reopen the session (as after a restart), open the snapshot, and go
//! on from there; export a snapshot to another directory and import it elsewhere.
//!
//! Run with `cargo run -p cairn --example snapshots`.

use cairn::{Session, SnapshotOverrides, TableConfig};

fn main() -> cairn::Result<()> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    {
        let session = Session::open(dir.path())?;
        let table = session.new_table(TableConfig::default())?;
        for i in 0..1000u32 {
            table.insert(format!("key{i:04}"), i.to_le_bytes())?;
        }
        // Durable when it returns: a crash leaves the whole snapshot or none of it.
        table.save_snapshot("height-1000", "my-ledger-v1")?;
        table.insert("key9999", b"after the snapshot")?; // not in the snapshot
    } // the session closes when its last handle is dropped

    let session = Session::open(dir.path())?;
    println!("snapshots: {:?}", session.list_snapshots()?);
    // The label must match: it guards against opening another application's snapshot.
    let table =
        session.open_snapshot("height-1000", "my-ledger-v1", SnapshotOverrides::default())?;
    assert!(table.lookup("key9999")?.value().is_none());
    assert_eq!(
        table.lookup("key0042")?.value(),
        Some(&42u32.to_le_bytes()[..])
    );

    let elsewhere = tempfile::tempdir().expect("a temporary directory");
    let exported = elsewhere.path().join("height-1000");
    session.export_snapshot("height-1000", &exported)?;
    let other = tempfile::tempdir().expect("a temporary directory");
    // An import needs a session with the same Bloom-filter salt.
    let other_session = Session::open_with_options(
        other.path(),
        cairn::SessionOptions::default().salt(Some(session.salt())),
    )?;
    other_session.import_snapshot("copy", &exported)?;
    let copy = other_session.open_snapshot("copy", "my-ledger-v1", SnapshotOverrides::default())?;
    println!("imported copy holds {} keys", copy.range(..)?.count());
    session.delete_snapshot("height-1000")?;
    Ok(())
}

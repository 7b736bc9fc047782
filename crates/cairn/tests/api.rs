//! The public API's contracts from issue 10: handles that keep what they need alive, panicking
//! resolve functions that leave every table unchanged or broken, limits a snapshot save enforces
//! before writing, union debt that is a true bound, and paths and directories handled as
//! documented.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cairn::fs::{FileSystem, MemFs};
use cairn::{
    Error, Resolve, Session, SessionOptions, SnapshotOverrides, Table, TableConfig, Update,
};
use proptest::prelude::*;

mod common;

use common::{key, session_in as memfs_session, small};

fn contents(table: &Table) -> Vec<(Vec<u8>, Vec<u8>)> {
    table
        .range_lookup(..)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect()
}

// ------------------------------------------------------------------------------------------------
// Handles

/// Opens a session, creates a table, and returns only the table: the session handle is dropped.
fn make_table(dir: &Path) -> Table {
    let session = Session::open(dir).unwrap();
    let table = session.new_table(small()).unwrap();
    table.insert("a", "1").unwrap();
    table
}

#[test]
fn a_table_outlives_its_session_handle() {
    let dir = tempfile::tempdir().unwrap();
    let table = make_table(dir.path());
    for i in 0..100 {
        table.insert(key(i), b"v").unwrap();
    }
    assert_eq!(table.lookup("a").unwrap().value(), Some(&b"1"[..]));
    assert_eq!(contents(&table).len(), 101);
    // The table holds the session's directory lock.
    assert!(matches!(
        Session::open(dir.path()),
        Err(Error::SessionLocked(_))
    ));
    // A clone is the same table; the lock goes with the last handle.
    let clone = table.clone();
    drop(table);
    clone.insert("b", "2").unwrap();
    let mut cursor = clone.cursor().unwrap();
    drop(clone);
    assert_eq!(cursor.next().unwrap().unwrap().key, b"a");
    assert!(matches!(
        Session::open(dir.path()),
        Err(Error::SessionLocked(_))
    ));
    assert_eq!(cursor.count(), 101);
    // The cursor was the last handle: the directory is free again.
    let session = Session::open(dir.path()).unwrap();
    assert!(session.list_snapshots().unwrap().is_empty());
}

#[test]
fn clones_share_a_table_and_duplicates_do_not() {
    let fs = MemFs::new();
    let session = memfs_session(&fs);
    let table = session.new_table(small()).unwrap();
    let clone = table.clone();
    let duplicate = table.duplicate().unwrap();
    clone.insert("k", "v").unwrap();
    assert_eq!(table.lookup("k").unwrap().value(), Some(&b"v"[..]));
    assert!(duplicate.lookup("k").unwrap().value().is_none());
    // Closing is explicit and reaches every clone.
    clone.close();
    assert!(matches!(table.lookup("k"), Err(Error::TableClosed)));
    assert!(duplicate.lookup("k").is_ok());
}

#[test]
fn an_explicit_session_close_still_closes_everything() {
    let fs = MemFs::new();
    let session = memfs_session(&fs);
    let table = session.new_table(small()).unwrap();
    table.insert("k", "v").unwrap();
    let mut cursor = table.cursor().unwrap();
    session.clone().close();
    assert!(!session.is_open());
    assert!(matches!(table.lookup("k"), Err(Error::TableClosed)));
    assert!(matches!(cursor.next(), Some(Err(Error::CursorClosed))));
    assert!(matches!(
        session.new_table(small()),
        Err(Error::SessionClosed)
    ));
    // The lock was released although handles remain.
    Session::open_with(Arc::new(fs.clone()), "/s", SessionOptions::default()).unwrap();
}

#[test]
fn keys_and_ranges_take_any_byte_strings() {
    let dir = tempfile::tempdir().unwrap();
    let session = Session::open(dir.path()).unwrap();
    let table = session.new_table(TableConfig::default()).unwrap();
    table
        .updates(&[
            ("alice", Update::Insert(b"10")),
            ("bob", Update::Insert(b"20")),
            ("carol", Update::Insert(b"30")),
        ])
        .unwrap();
    table
        .updates(&[(b"dave".to_vec(), Update::Insert(b"40"))])
        .unwrap();
    let keys = |r: cairn::Result<Vec<cairn::CursorEntry>>| -> Vec<String> {
        r.unwrap()
            .into_iter()
            .map(|e| String::from_utf8(e.key).unwrap())
            .collect()
    };
    assert_eq!(
        keys(table.range_lookup("b".."d")),
        ["bob", "carol"].map(String::from)
    );
    assert_eq!(
        keys(table.range_lookup("bob"..="carol")),
        ["bob", "carol"].map(String::from)
    );
    assert_eq!(
        keys(table.range_lookup(..)),
        ["alice", "bob", "carol", "dave"].map(String::from)
    );
    assert_eq!(
        keys(table.range_lookup((Bound::Excluded("bob"), Bound::Unbounded))),
        ["carol", "dave"].map(String::from)
    );
    // A cursor stops at its range's end and can be peeked at.
    let mut range = table.range("b"..).unwrap();
    assert_eq!(range.peek().unwrap().unwrap().key, b"bob");
    let upto_c: Vec<_> = range
        .by_ref()
        .take_while(|e| e.as_ref().is_ok_and(|e| e.key < b"c".to_vec()))
        .collect();
    assert_eq!(upto_c.len(), 1);
    // `take_while` consumed "carol"; `peek` lets a caller stop before an entry instead.
    assert_eq!(range.next().unwrap().unwrap().key, b"dave");
    assert!(range.next().is_none());
}

#[test]
fn blob_refs_tell_whether_they_are_still_valid() {
    let fs = MemFs::new();
    let session = memfs_session(&fs);
    let table = session.new_table(small()).unwrap();
    table.insert_with_blob("k", "v", "blob").unwrap();
    let blob = table.lookup("k").unwrap().blob().cloned().unwrap();
    assert!(table.blob_ref_is_valid(&blob).unwrap());
    // An empty batch is no update.
    table.updates::<&[u8]>(&[]).unwrap();
    assert!(table.blob_ref_is_valid(&blob).unwrap());
    assert_eq!(table.retrieve_blob(&blob).unwrap(), b"blob");
    table.insert("other", "x").unwrap();
    assert!(!table.blob_ref_is_valid(&blob).unwrap());
    let other = table.duplicate().unwrap();
    assert!(!other.blob_ref_is_valid(&blob).unwrap());
}

// ------------------------------------------------------------------------------------------------
// A panicking resolve function

/// Upserts carrying this value make the resolve function panic.
const POISON: [u8; 8] = *b"poison!!";

fn panicking_resolve(armed: Arc<AtomicBool>) -> Resolve {
    Resolve::custom("keep-newer-or-panic", move |newer, older| {
        if armed.load(Ordering::Relaxed) && (newer == POISON || older == POISON) {
            panic!("resolve function panics on purpose");
        }
        let mut out = newer.to_vec();
        out.truncate(8);
        out
    })
}

/// The model of a `KeepNewest`-like table whose resolve keeps the newer value.
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Either the table answers exactly as `model` (unchanged) or every call fails with
/// `TableBroken`.
fn unchanged_or_broken(table: &Table, model: &Model, what: &str) -> bool {
    match table.range_lookup(..) {
        Ok(entries) => {
            let got: Model = entries.into_iter().map(|e| (e.key, e.value)).collect();
            assert_eq!(&got, model, "{what}: a table that still answers lost keys");
            let keys: Vec<_> = model.keys().cloned().collect();
            let found = table.lookups(&keys).unwrap();
            for (k, r) in keys.iter().zip(found) {
                assert_eq!(r.value(), model.get(k).map(Vec::as_slice), "{what}: lookup");
            }
            false
        }
        Err(Error::TableBroken(_)) => {
            assert!(matches!(table.lookup("x"), Err(Error::TableBroken(_))));
            assert!(matches!(table.insert("x", "y"), Err(Error::TableBroken(_))));
            true
        }
        Err(e) => panic!("{what}: unexpected error {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random updates with tiny buffers (so merges run inside updates), then a poisoned upsert
    /// that panics somewhere: in the write buffer, in a merge step, or through a duplicate that
    /// shares the merge. Every table is then either exactly as before or broken, and a table
    /// whose update panicked is broken or unchanged as a whole.
    #[test]
    fn a_panicking_resolve_leaves_tables_unchanged_or_broken(
        ops in prop::collection::vec((0u32..40, any::<bool>()), 20..200),
        poison_at in 0u32..40,
        through_duplicate in any::<bool>(),
        extra in 0usize..30,
    ) {
        let armed = Arc::new(AtomicBool::new(false));
        let fs = MemFs::new();
        let session = memfs_session(&fs);
        let config = TableConfig::default()
            .write_buffer_entries(3)
            .merge_batch_size(1)
            .resolve(panicking_resolve(armed.clone()));
        let table = session.new_table(config).unwrap();
        let mut model = Model::new();
        for (k, upsert) in &ops {
            let value = k.to_le_bytes().repeat(2);
            if *upsert {
                table.upsert(key(*k), &value).unwrap();
            } else {
                table.insert(key(*k), &value).unwrap();
            }
            model.insert(key(*k), value);
        }
        // The poison goes into the table as an insert (no resolve yet), deep in the levels.
        table.insert(key(poison_at), POISON).unwrap();
        model.insert(key(poison_at), POISON.to_vec());
        for i in 0..extra as u32 {
            table.insert(key(100 + i), b"filler..").unwrap();
            model.insert(key(100 + i), b"filler..".to_vec());
        }
        let duplicate = table.duplicate().unwrap();
        armed.store(true, Ordering::Relaxed);
        // Upserts over the poisoned key, then more updates so that merges reach it.
        let victim = if through_duplicate { &duplicate } else { &table };
        let mut panicked = false;
        let mut victim_model = model.clone();
        for i in 0..200u32 {
            let k = if i % 7 == 0 { key(poison_at) } else { key(200 + i) };
            let result = catch_unwind(AssertUnwindSafe(|| victim.upsert(&k, b"upserted")));
            match result {
                Err(_) => {
                    panicked = true;
                    break;
                }
                Ok(Ok(())) => {
                    // Not applied yet as far as the model knows; a panic before the batch ends
                    // leaves the whole table broken, so the model tracks applied updates only.
                    victim_model.insert(k, b"upserted".to_vec());
                }
                Ok(Err(Error::TableBroken(_))) => {
                    panicked = true;
                    break;
                }
                Ok(Err(e)) => panic!("unexpected error {e}"),
            }
        }
        armed.store(false, Ordering::Relaxed);
        let (other, other_model) = if through_duplicate {
            (&table, &model)
        } else {
            (&duplicate, &model)
        };
        if panicked {
            // The victim is broken (its update stopped half way) or, if the panic struck before
            // it changed anything, unchanged.
            unchanged_or_broken(victim, &victim_model, "victim");
        } else {
            unchanged_or_broken(victim, &victim_model, "victim without a panic");
        }
        // The other handle never had its own update interrupted: unchanged, or broken when it
        // shares a merge that the panic interrupted and its own work reaches it.
        unchanged_or_broken(other, other_model, "sibling");
        for i in 0..50u32 {
            match other.insert(key(300 + i), b"after...") {
                Ok(()) | Err(Error::TableBroken(_)) => {}
                Err(e) => panic!("sibling update: {e}"),
            }
        }
    }
}

#[test]
fn a_panic_inside_a_merge_step_breaks_the_table() {
    let armed = Arc::new(AtomicBool::new(false));
    let fs = MemFs::new();
    let session = memfs_session(&fs);
    let config = TableConfig::default()
        .write_buffer_entries(2)
        .merge_batch_size(1)
        .resolve(panicking_resolve(armed.clone()));
    let table = session.new_table(config).unwrap();
    // Every run holds an upsert of the largest key, so every merge combines it last (merges go
    // in key order): a merge in progress has not reached it yet.
    let last = b"zzz".to_vec();
    let mut i = 0;
    loop {
        table.upsert(&last, POISON).unwrap();
        table.insert(key(i), b"v").unwrap();
        i += 1;
        if i > 8 && table.stats().unwrap().merges_in_progress > 0 {
            break;
        }
        assert!(i < 10_000, "no merge ever in progress");
    }
    // The duplicate shares the merges in progress.
    let duplicate = table.duplicate().unwrap();
    armed.store(true, Ordering::Relaxed);
    let mut broke = false;
    for i in 20_000..30_000 {
        let result = catch_unwind(AssertUnwindSafe(|| table.insert(key(i), b"v")));
        match result {
            Err(_) => {
                broke = true;
                break;
            }
            Ok(r) => r.unwrap(),
        }
    }
    assert!(broke, "no merge combined the poisoned key");
    assert!(matches!(table.lookup(key(1)), Err(Error::TableBroken(_))));
    assert!(matches!(table.cursor(), Err(Error::TableBroken(_))));
    assert!(matches!(table.duplicate(), Err(Error::TableBroken(_))));
    // The duplicate shares the interrupted merge: its reads are right (the merge's inputs are
    // intact), and its work on the merge is refused rather than done on a half-done merge.
    armed.store(false, Ordering::Relaxed);
    assert_eq!(duplicate.lookup(key(1)).unwrap().value(), Some(&b"v"[..]));
    let mut refused = false;
    for i in 500..2_000 {
        match duplicate.insert(key(i), b"w") {
            Ok(()) => {}
            Err(Error::TableBroken(_)) => {
                refused = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        refused,
        "the duplicate went on with a merge a panic interrupted"
    );
}

// ------------------------------------------------------------------------------------------------
// Limits a snapshot save enforces before writing anything

/// A table whose union nesting is `depth` deep: each level is the union of the previous one
/// and a small table.
fn nested_union(session: &Session, depth: usize) -> Table {
    let mut table = session.new_table(small()).unwrap();
    table.insert("base", "0").unwrap();
    for d in 0..depth {
        let other = session.new_table(small()).unwrap();
        other.insert(format!("k{d}"), "v").unwrap();
        table = table.incremental_union(&other).unwrap();
    }
    table
}

#[test]
fn the_deepest_union_a_snapshot_holds_saves_and_reopens_and_one_more_is_refused() {
    let fs = MemFs::new();
    let session = memfs_session(&fs);
    let deepest = nested_union(&session, 16);
    deepest.save_snapshot("deep", "").unwrap();
    let reopened = session
        .open_snapshot("deep", "", SnapshotOverrides::default())
        .unwrap();
    assert_eq!(contents(&reopened), contents(&deepest));
    assert_eq!(contents(&reopened).len(), 17);

    let too_deep = nested_union(&session, 17);
    let before = fs.list_dir(Path::new("/s/snapshots")).unwrap();
    assert!(matches!(
        too_deep.save_snapshot("deeper", ""),
        Err(Error::TableTooLarge(_))
    ));
    assert_eq!(fs.list_dir(Path::new("/s/snapshots")).unwrap(), before);
    // Once its union is paid off, the same table saves.
    while too_deep.remaining_union_debt().unwrap() > 0 {
        too_deep
            .supply_union_credits(too_deep.remaining_union_debt().unwrap())
            .unwrap();
    }
    too_deep.save_snapshot("deeper", "").unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// `remaining_union_debt()` credits always finish a union: the bound is true.
    #[test]
    fn supplying_the_remaining_debt_finishes_a_union(
        tables in prop::collection::vec(
            prop::collection::vec((0u32..50, any::<bool>()), 0..40), 1..5),
        partial in 0u64..20,
    ) {
        let fs = MemFs::new();
        let session = memfs_session(&fs);
        let inputs: Vec<Table> = tables
            .iter()
            .map(|ops| {
                let t = session.new_table(small()).unwrap();
                for (k, delete) in ops {
                    if *delete {
                        t.delete(key(*k)).unwrap();
                    } else {
                        t.insert(key(*k), b"v").unwrap();
                    }
                }
                t
            })
            .collect();
        let refs: Vec<&Table> = inputs.iter().collect();
        let union = Table::incremental_unions(&refs).unwrap();
        let debt = union.remaining_union_debt().unwrap();
        union.supply_union_credits(partial.min(debt)).unwrap();
        let debt = union.remaining_union_debt().unwrap();
        union.supply_union_credits(debt).unwrap();
        prop_assert_eq!(union.remaining_union_debt().unwrap(), 0);
    }
}

// ------------------------------------------------------------------------------------------------
// Paths and directories

#[test]
fn export_to_a_relative_path_works() {
    let dir = tempfile::tempdir().unwrap();
    let session_dir = dir.path().join("session");
    std::fs::create_dir(&session_dir).unwrap();
    let session = Session::open(&session_dir).unwrap();
    let table = session.new_table(small()).unwrap();
    table.insert("k", "v").unwrap();
    table.save_snapshot("s", "").unwrap();
    // A relative path of one component: its parent is the current directory.
    let cwd = std::env::current_dir().unwrap();
    let name = format!("cairn-export-test-{}", std::process::id());
    let result = session.export_snapshot("s", &name);
    let exported = cwd.join(&name);
    let ok = result.is_ok() && exported.is_dir();
    let _ = std::fs::remove_dir_all(&exported);
    result.unwrap();
    assert!(ok);
}

#[test]
fn list_snapshots_lists_only_names_open_snapshot_accepts() {
    let fs = MemFs::new();
    let session = memfs_session(&fs);
    let table = session.new_table(small()).unwrap();
    table.save_snapshot("good", "").unwrap();
    for name in ["Bad Name", "UPPER", "con"] {
        fs.create_dir_all(&Path::new("/s/snapshots").join(name))
            .unwrap();
    }
    let names = session.list_snapshots().unwrap();
    assert_eq!(names, ["good"]);
    for name in names {
        session
            .open_snapshot(&name, "", SnapshotOverrides::default())
            .unwrap();
    }
}

#[test]
fn a_regular_file_in_place_of_a_session_subdirectory_is_corruption() {
    for sub in ["active", "snapshots"] {
        let fs = MemFs::new();
        drop(memfs_session(&fs));
        let path = Path::new("/s").join(sub);
        fs.remove_dir_all(&path).unwrap();
        let mut file = fs.create(&path).unwrap();
        file.append(b"not a directory").unwrap();
        drop(file);
        let result = Session::open_with(Arc::new(fs.clone()), "/s", SessionOptions::default());
        assert!(
            matches!(result, Err(Error::SessionCorrupted { .. })),
            "{sub}: {result:?}"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Found in review

/// The file names in `dir`, sorted.
/// The files in `dir`, but for the directory where an open sets aside an earlier session's
/// leftovers (`.leftover`).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != ".leftover")
        .collect();
    v.sort();
    v
}

/// A session closed explicitly, whose runs an operation still in flight drops afterwards, must
/// not remove files by name when its last handle drops: by then another session (another
/// process, whose run numbers restart at 0) may own the directory and those names.
#[test]
fn a_late_drop_of_a_closed_session_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s1 = Session::open(dir.path()).unwrap();
    let slot: Arc<Mutex<Option<Session>>> = Arc::new(Mutex::new(None));
    let in_resolve = slot.clone();
    let resolve = Resolve::custom("close-while-looking-up", move |newer, _older| {
        if let Some(s) = in_resolve.lock().unwrap().take() {
            s.close(); // stands in for another thread closing the session mid-lookup
        }
        newer.to_vec()
    });
    let config = TableConfig::default()
        .write_buffer_entries(1)
        .resolve(resolve);
    let table = s1.new_table(config).unwrap();
    table.upsert("k", "1").unwrap();
    table.upsert("k", "2").unwrap();
    let active = dir.path().join("active");
    let before = names(&active);
    assert!(!before.is_empty());
    *slot.lock().unwrap() = Some(s1.clone());
    let _ = table.lookup("k"); // resolve runs while the lookup holds the runs
    assert!(!s1.is_open());
    // The directory is free: another session takes it ...
    let s2 = Session::open(dir.path()).unwrap();
    // ... and has files under the names the first session's runs had.
    for name in &before {
        std::fs::write(active.join(name), b"belongs to s2").unwrap();
    }
    drop(table);
    drop(s1);
    assert_eq!(
        names(&active),
        before,
        "dropping the closed session removed files of the session that now owns the directory"
    );
    drop(s2);
}

#[test]
fn peek_after_close_is_cursor_closed_even_with_an_entry_peeked_at() {
    let fs = MemFs::new();
    let session = memfs_session(&fs);
    let table = session.new_table(TableConfig::default()).unwrap();
    table.insert("a", "1").unwrap();
    let mut cursor = table.cursor().unwrap();
    assert!(cursor.peek().unwrap().is_some());
    cursor.close();
    assert!(matches!(cursor.peek(), Err(Error::CursorClosed)));
    assert!(cursor.next().is_none(), "finished after its error");
}

#[test]
fn a_snapshot_saved_with_a_built_in_resolve_refuses_another() {
    let fs = MemFs::new();
    let session = memfs_session(&fs);
    let table = session
        .new_table(small().resolve(Resolve::AddU64Le))
        .unwrap();
    table.upsert("k", 1u64.to_le_bytes()).unwrap();
    table.save_snapshot("add", "").unwrap();
    for other in [
        Resolve::KeepNewest,
        Resolve::custom("add", |n, _| n.to_vec()),
    ] {
        let overrides = SnapshotOverrides::default().resolve(Some(other));
        assert!(matches!(
            session.open_snapshot("add", "", overrides),
            Err(Error::InvalidConfig(_))
        ));
    }
    let same = SnapshotOverrides::default().resolve(Some(Resolve::AddU64Le));
    session.open_snapshot("add", "", same).unwrap();
}

/// Ranges over a write buffer read in chunks give every entry once, whatever the bounds.
#[test]
fn write_buffer_chunks_give_every_entry_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = Session::open(dir.path()).unwrap();
    let t = s
        .new_table(TableConfig::default().write_buffer_entries(10_000))
        .unwrap();
    let mut model = BTreeMap::new();
    for i in 0..1000u32 {
        let k = (i * 7919 % 1000).to_be_bytes().to_vec();
        if i % 5 == 0 {
            t.delete(&k).unwrap();
            model.remove(&k);
        } else {
            t.insert(&k, i.to_le_bytes()).unwrap();
            model.insert(k, i.to_le_bytes().to_vec());
        }
    }
    for start in [0u32, 1, 63, 64, 65, 127, 128, 500, 998, 999, 1000] {
        let sk = start.to_be_bytes().to_vec();
        for (lo, hi) in [
            (Bound::Included(sk.clone()), Bound::Unbounded),
            (Bound::Excluded(sk.clone()), Bound::Unbounded),
            (Bound::Unbounded, Bound::Excluded(sk.clone())),
            (Bound::Unbounded, Bound::Included(sk.clone())),
        ] {
            let got: Vec<(Vec<u8>, Vec<u8>)> = t
                .range((lo.clone(), hi.clone()))
                .unwrap()
                .map(|e| e.map(|e| (e.key, e.value)))
                .collect::<cairn::Result<_>>()
                .unwrap();
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .range::<Vec<u8>, _>((lo.clone(), hi.clone()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want, "{lo:?} {hi:?}");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Filters of the deepest level

/// `TableConfig::last_level_bloom = Some(BloomAlloc::None)`: the runs merges write into the
/// deepest level get a one-block filter, so the table holds much less filter memory than the
/// same table with filters everywhere, answers every lookup (present and absent keys) the same,
/// and keeps the setting through a snapshot.
#[test]
fn the_deepest_level_can_go_without_filters() {
    let fs = MemFs::new();
    deepest_level_without_filters(&memfs_session(&fs));
}

/// The same on a real directory, so that lookups read through io_uring (where it works), with
/// the deepest level's reads conditional on the newer pages.
#[test]
fn the_deepest_level_can_go_without_filters_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    deepest_level_without_filters(&Session::open(dir.path()).unwrap());
}

fn deepest_level_without_filters(session: &Session) {
    use cairn::BloomAlloc;
    const KEYS: u32 = 20_000;
    let base = TableConfig::default()
        .write_buffer_entries(500)
        .merge_batch_size(100);
    let filtered = session.new_table(base.clone()).unwrap();
    let unfiltered = session
        .new_table(base.last_level_bloom(Some(BloomAlloc::None)))
        .unwrap();
    // Keys in scrambled order (7919 is prime to KEYS): ascending runs would be linked into the
    // deepest level with the filters they were written with, not merged there.
    let order: Vec<u32> = (0..KEYS).map(|i| i * 7919 % KEYS).collect();
    for table in [&filtered, &unfiltered] {
        for chunk in order.chunks(1000) {
            let pairs: Vec<_> = chunk.iter().map(|&i| (key(i), i.to_le_bytes())).collect();
            table.inserts(&pairs).unwrap();
        }
        // Delete every tenth key: the deepest level drops the deletes it merges.
        let gone: Vec<_> = (0..KEYS).step_by(10).map(key).collect();
        table.deletes(&gone).unwrap();
    }
    let (with, without) = (filtered.stats().unwrap(), unfiltered.stats().unwrap());
    assert_eq!(with.levels, without.levels);
    assert!(with.levels >= 3, "{with:?}");
    // The deepest level holds about half the keys at this size (most in a large table).
    assert!(
        without.filter_and_index_bytes * 3 < with.filter_and_index_bytes * 2,
        "{} bytes without the deepest level's filters, {} with",
        without.filter_and_index_bytes,
        with.filter_and_index_bytes
    );
    let probe: Vec<Vec<u8>> = (0..KEYS + 2_000).map(key).collect();
    let want = filtered.lookups(&probe).unwrap();
    let got = unfiltered.lookups(&probe).unwrap();
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let expected =
            (!(i as u32).is_multiple_of(10) && (i as u32) < KEYS).then(|| (i as u32).to_le_bytes());
        assert_eq!(w.value(), expected.as_ref().map(|v| &v[..]), "key {i}");
        assert_eq!(g.value(), w.value(), "key {i}");
    }
    unfiltered.save_snapshot("s", "l").unwrap();
    let reopened = session
        .open_snapshot("s", "l", SnapshotOverrides::default())
        .unwrap();
    assert_eq!(reopened.config().last_level_bloom, Some(BloomAlloc::None));
    // (The snapshot wrote the write buffer as a run of its own, with a filter.)
    assert!(reopened.stats().unwrap().filter_and_index_bytes * 3 < with.filter_and_index_bytes * 2);
    let again = reopened.lookups(&probe).unwrap();
    assert!(again.iter().zip(&want).all(|(a, w)| a.value() == w.value()));
}

#[test]
fn cursors_seek_within_their_view_and_range() {
    use std::ops::Bound;
    let dir = tempfile::tempdir().unwrap();
    let session = cairn::Session::open(dir.path()).unwrap();
    let table = session
        .new_table(
            cairn::TableConfig::default()
                .write_buffer_entries(4)
                .merge_batch_size(2),
        )
        .unwrap();
    let keys: Vec<String> = (0..40).map(|i| format!("k{i:02}")).collect();
    for k in &keys {
        table.insert(k, k).unwrap();
    }
    let keys_of = |c: &mut cairn::Cursor, n: usize| -> Vec<Vec<u8>> {
        c.by_ref().take(n).map(|e| e.unwrap().key).collect()
    };
    let mut c = table
        .range((Bound::Excluded("k10"), Bound::Included("k30")))
        .unwrap();
    // Updates after the cursor opened are not seen, whatever the seeks.
    table.insert("k15", "changed").unwrap();
    table.delete("k20").unwrap();
    assert_eq!(keys_of(&mut c, 2), [b"k11".to_vec(), b"k12".to_vec()]);
    c.seek("k20").unwrap(); // forwards
    assert_eq!(keys_of(&mut c, 1), [b"k20".to_vec()]);
    c.seek("k05").unwrap(); // before the range: its start, excluded
    assert_eq!(keys_of(&mut c, 1), [b"k11".to_vec()]);
    c.seek("k10").unwrap(); // the excluded start itself
    assert_eq!(keys_of(&mut c, 1), [b"k11".to_vec()]);
    c.seek("k15").unwrap();
    let e = c.next().unwrap().unwrap();
    assert_eq!((e.key, e.value), (b"k15".to_vec(), b"k15".to_vec()));
    c.seek("k295").unwrap(); // between keys, near the end
    assert_eq!(keys_of(&mut c, 5), [b"k30".to_vec()]);
    c.seek("k99").unwrap(); // past the end
    assert!(c.next().is_none());
    c.seek("k29").unwrap(); // and back after the end
    assert_eq!(keys_of(&mut c, 5), [b"k29".to_vec(), b"k30".to_vec()]);
    c.close();
    assert!(matches!(c.seek("k20"), Err(cairn::Error::CursorClosed)));
}

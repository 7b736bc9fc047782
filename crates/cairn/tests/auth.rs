//! Authenticated tables against the reference: after random sequences of updates, upserts,
//! deletes, blobs, duplicates and commits, the table's root is the root the definition gives
//! for the model's contents, and its proofs verify every true claim.

mod common;

use std::collections::BTreeMap;

use cairn::cairn_proof::{root_of, Claim};
use cairn::fs::{FaultPlan, FsOp, MemFs};
use cairn::{
    AuthConfig, Error, HashKind, MergeSchedule, Resolve, SessionOptions, Table, TableConfig, Update,
};
use common::{session_in, session_with};
use proptest::prelude::*;

/// Key -> (value, blob).
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

fn reference_root(kind: HashKind, m: &Model) -> [u8; 32] {
    root_of(
        kind,
        m.iter().map(|(k, (v, b))| (&k[..], &v[..], b.as_deref())),
    )
}

fn config(
    kind: HashKind,
    write_buffer: usize,
    schedule: MergeSchedule,
    retained: usize,
) -> TableConfig {
    config_top(kind, write_buffer, schedule, retained, 6)
}

/// [`config`] with a top page of `top` trie levels.
fn config_top(
    kind: HashKind,
    write_buffer: usize,
    schedule: MergeSchedule,
    retained: usize,
    top: u8,
) -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(write_buffer)
        .merge_batch_size(1)
        .merge_schedule(schedule)
        .resolve(Resolve::AddU64Le)
        .auth(Some(
            AuthConfig::default()
                .hash(kind)
                .retained_bytes(retained)
                .top_page_depth(top),
        ))
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u64),
    InsertBlob(u16, u64, u8),
    Upsert(u16, u64),
    Delete(u16),
    Commit,
    Duplicate,
    Prove(Vec<u16>),
    Prefetch(Vec<u16>),
    /// A warm-up on a thread of its own; the updates after it race its reads.
    WarmUp(Vec<u16>),
    /// Save a snapshot, open it, and go on with the opened table.
    Snapshot,
    /// An incremental union of the current table with the oldest kept one, paid in a random
    /// portion; go on with the union.
    Union(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..300;
    prop_oneof![
        6 => (k.clone(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        1 => (k.clone(), any::<u64>(), any::<u8>()).prop_map(|(k, v, b)| Op::InsertBlob(k, v, b)),
        3 => (k.clone(), 0u64..1000).prop_map(|(k, v)| Op::Upsert(k, v)),
        3 => k.clone().prop_map(Op::Delete),
        1 => Just(Op::Commit),
        1 => Just(Op::Duplicate),
        1 => prop::collection::vec(0u16..320, 1..12).prop_map(Op::Prove),
        1 => prop::collection::vec(0u16..320, 1..12).prop_map(Op::Prefetch),
        1 => prop::collection::vec(0u16..320, 1..12).prop_map(Op::WarmUp),
        1 => Just(Op::Snapshot),
        1 => (1u8..4).prop_map(Op::Union),
    ]
}

fn key(k: u16) -> Vec<u8> {
    format!("utxo-{k}").into_bytes()
}

fn apply(table: &Table, m: &mut Model, op: &Op) {
    match op {
        Op::Insert(k, v) => {
            table.insert(key(*k), v.to_le_bytes()).unwrap();
            m.insert(key(*k), (v.to_le_bytes().to_vec(), None));
        }
        Op::InsertBlob(k, v, b) => {
            let blob = vec![*b; *b as usize % 50];
            table
                .updates(&[(key(*k), Update::InsertWithBlob(&v.to_le_bytes(), &blob))])
                .unwrap();
            m.insert(key(*k), (v.to_le_bytes().to_vec(), Some(blob)));
        }
        Op::Upsert(k, v) => {
            table.upsert(key(*k), v.to_le_bytes()).unwrap();
            let entry = m
                .entry(key(*k))
                .or_insert((0u64.to_le_bytes().to_vec(), None));
            let old = match <[u8; 8]>::try_from(&entry.0[..]) {
                Ok(bytes) => u64::from_le_bytes(bytes),
                Err(_) => 0,
            };
            *entry = (old.wrapping_add(*v).to_le_bytes().to_vec(), None);
        }
        Op::Delete(k) => {
            table.delete(key(*k)).unwrap();
            m.remove(&key(*k));
        }
        _ => unreachable!(),
    }
}

fn check_proof(table: &Table, kind: HashKind, m: &Model, keys: &[u16]) {
    let keys: Vec<Vec<u8>> = keys.iter().map(|&k| key(k)).collect();
    let root = table.root().unwrap().root;
    let proof = table.prove(&keys).unwrap().proof;
    let blob_hashes: Vec<Option<[u8; 32]>> = keys
        .iter()
        .map(|k| {
            m.get(k)
                .and_then(|(_, b)| b.as_ref().map(|b| kind.blob_hash(b)))
        })
        .collect();
    let claims: Vec<Claim<'_>> = keys
        .iter()
        .zip(&blob_hashes)
        .map(|(k, bh)| match m.get(k) {
            None => Claim::absent(k),
            Some((v, _)) => match bh {
                Some(h) => Claim::present_with_blob(k, v, *h),
                None => Claim::present(k, v),
            },
        })
        .collect();
    assert_eq!(proof.verify(&root, &claims), Ok(()));
    // The encoded proof too.
    assert_eq!(
        cairn::cairn_proof::verify(&root, &proof.encode(), &claims),
        Ok(())
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn roots_and_proofs_match_the_reference(
        ops in prop::collection::vec(op(), 1..400),
        write_buffer in 1usize..64,
        one_shot in any::<bool>(),
        blake in any::<bool>(),
        retained in prop_oneof![Just(0usize), Just(300_000), Just(20 << 20)],
        // The default geometry half the time, a smaller top page (1 to 5 levels) otherwise.
        top in prop_oneof![Just(6u8), 1u8..=5],
        // Trie pages read with O_DIRECT half the time (the simulated disk refuses any read
        // that is not of whole aligned blocks into aligned memory, as Linux does).
        direct in any::<bool>(),
    ) {
        let kind = if blake { HashKind::Blake3 } else { HashKind::Sha256 };
        let schedule = if one_shot { MergeSchedule::OneShot } else { MergeSchedule::Incremental };
        let fs = MemFs::new();
        let session = session_with(&fs, SessionOptions::default().direct_page_reads(direct));
        let mut table =
            session.new_table(config_top(kind, write_buffer, schedule, retained, top)).unwrap();
        let mut model = Model::new();
        // Earlier versions, kept to check that a duplicate keeps its own root.
        let mut kept: Vec<(Table, [u8; 32])> = Vec::new();
        let mut snapshots = 0;
        // The model of each kept table when it was kept (for unions with it).
        let mut kept_models: Vec<Model> = Vec::new();
        for op in &ops {
            match op {
                Op::Commit => {
                    let commit = table.commit().unwrap();
                    prop_assert_eq!(commit.root.hash, reference_root(kind, &model));
                    prop_assert_eq!(table.commit().unwrap(), commit, "a second commit changes nothing");
                }
                Op::Duplicate => {
                    let root = table.root().unwrap().root.hash;
                    let copy = table.duplicate().unwrap();
                    kept.push((table, root));
                    kept_models.push(model.clone());
                    table = copy;
                }
                Op::Prove(keys) => check_proof(&table, kind, &model, keys),
                Op::Union(portion) => {
                    let Some((other, _)) = kept.first() else { continue };
                    let other_model = kept_models[0].clone();
                    let before = model.clone();
                    let union = table.incremental_union(other).unwrap();
                    let debt = union.remaining_union_debt().unwrap();
                    union.supply_union_credits(debt / *portion as u64).unwrap();
                    // Left-biased: a key in both combines (AddU64Le) and loses its blob.
                    for (k, (v, b)) in other_model {
                        match model.remove(&k) {
                            None => { model.insert(k, (v, b)); }
                            Some((newer, _)) => {
                                let sum = u64::from_le_bytes(newer[..8].try_into().unwrap())
                                    .wrapping_add(u64::from_le_bytes(v[..8].try_into().unwrap()));
                                model.insert(k, (sum.to_le_bytes().to_vec(), None));
                            }
                        }
                    }
                    prop_assert_eq!(union.root().unwrap().root.hash, reference_root(kind, &model));
                    let root = table.root().unwrap().root.hash;
                    kept.push((table, root));
                    kept_models.push(before);
                    table = union;
                }
                Op::Snapshot => {
                    let name = format!("s{}", kept.len() + snapshots);
                    snapshots += 1;
                    if let Err(Error::TableTooLarge(_)) = table.save_snapshot(&name, "auth") {
                        // Unions nested too deep for a snapshot: finish paying them first.
                        let debt = table.remaining_union_debt().unwrap();
                        table.supply_union_credits(debt).unwrap();
                        table.save_snapshot(&name, "auth").unwrap();
                    }
                    let root = table.root().unwrap().root;
                    let opened = session.open_snapshot(&name, "auth", Default::default()).unwrap();
                    prop_assert_eq!(opened.root().unwrap().root, root);
                    prop_assert_eq!(opened.commit().unwrap().version, table.commit().unwrap().version);
                    kept.push((table, root.hash));
                    kept_models.push(model.clone());
                    table = opened;
                }
                Op::Prefetch(keys) => {
                    let keys: Vec<Vec<u8>> = keys.iter().map(|&k| key(k)).collect();
                    table.prefetch(&keys).unwrap();
                }
                Op::WarmUp(keys) => {
                    let keys: Vec<Vec<u8>> = keys.iter().map(|&k| key(k)).collect();
                    table.warm_up(&keys).unwrap();
                }
                update => apply(&table, &mut model, update),
            }
        }
        prop_assert_eq!(table.root().unwrap().root.hash, reference_root(kind, &model));
        for (old, root) in &kept {
            prop_assert_eq!(old.root().unwrap().root.hash, *root);
        }
    }
}

#[test]
fn updates_alone_read_no_page_and_a_prefetched_commit_reads_nothing() {
    let fs = MemFs::new();
    let session = session_in(&fs);
    // One retained page level, so that pages below it come from the page table.
    let table = session
        .new_table(config(
            HashKind::Sha256,
            20_000,
            MergeSchedule::Incremental,
            0,
        ))
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..5_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
    table.inserts(&pairs).unwrap();
    let first = table.commit().unwrap();
    assert_eq!(first.version, 1);
    let before = table.auth_stats().unwrap();
    // Updates: no page read, no key committed (no hashing), the version unchanged.
    let changed: Vec<(&[u8], &[u8])> = keys[..500].iter().map(|k| (&k[..], &b"w"[..])).collect();
    table.inserts(&changed).unwrap();
    table.deletes(&keys[500..600]).unwrap();
    let after_updates = table.auth_stats().unwrap();
    assert_eq!(after_updates.pages_read, before.pages_read);
    assert_eq!(after_updates.hashes, before.hashes, "updates hash nothing");
    assert_eq!(after_updates.keys_committed, before.keys_committed);
    assert_eq!(after_updates.version, 1);
    // A prefetch of exactly those keys reads their pages; the commit then reads none.
    table.prefetch(&keys[..600]).unwrap();
    let prefetched = table.auth_stats().unwrap();
    assert!(prefetched.pages_read > before.pages_read);
    assert!(prefetched.prefetched_pages > 0);
    let second = table.commit().unwrap();
    let after = table.auth_stats().unwrap();
    assert_eq!(
        after.pages_read, prefetched.pages_read,
        "the commit read no page"
    );
    // The prefetch hashed only to check the pages it read; the commit hashed each key's key
    // path and value (the key path alone for a deleted key), its leaf, and the nodes above.
    assert_eq!(
        prefetched.hashes - before.hashes,
        prefetched.pages_read - before.pages_read
    );
    assert!(after.hashes - prefetched.hashes >= 500 * 3 + 100);
    assert_eq!(after.keys_committed, before.keys_committed + 600);
    assert_eq!(second.version, 2);
    assert_ne!(second.root, first.root);
}

/// A session on `fs` with two authenticated tables of the same 5,000 committed keys (no
/// retained levels: every page is read from the page log), and the keys.
fn two_loaded_tables(fs: &MemFs) -> (cairn::Session, Vec<Vec<u8>>, Table, Table) {
    two_loaded_tables_with(fs, SessionOptions::default())
}

/// [`two_loaded_tables`] in a session opened with `options`.
fn two_loaded_tables_with(
    fs: &MemFs,
    options: SessionOptions,
) -> (cairn::Session, Vec<Vec<u8>>, Table, Table) {
    let session = session_with(fs, options);
    let config = config(HashKind::Sha256, 20_000, MergeSchedule::Incremental, 0);
    let keys: Vec<Vec<u8>> = (0..5_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
    let a = session.new_table(config.clone()).unwrap();
    let b = session.new_table(config).unwrap();
    for table in [&a, &b] {
        table.inserts(&pairs).unwrap();
        table.commit().unwrap();
    }
    (session, keys, a, b)
}

/// `Table::warm_up` loads on a thread of its own what `Table::prefetch` loads: the same
/// pages read, the same root, and a commit that reads nothing more; warm-ups in a row, a
/// prefetch after one, and a table dropped while one runs all wait for it.
#[test]
fn a_warm_up_in_the_background_loads_what_a_prefetch_does() {
    let fs = MemFs::new();
    let (session, keys, warmed, prefetched) = two_loaded_tables(&fs);
    let changed: Vec<(&[u8], &[u8])> = keys[..700].iter().map(|k| (&k[..], &b"w"[..])).collect();
    let (w0, p0) = (
        warmed.auth_stats().unwrap(),
        prefetched.auth_stats().unwrap(),
    );
    // Warm-ups in a row: the second waits for the first; each key's pages are read once.
    warmed.warm_up(&keys[..300]).unwrap();
    warmed.warm_up(&keys[300..700]).unwrap();
    prefetched.prefetch(&keys[..700]).unwrap();
    for table in [&warmed, &prefetched] {
        table.inserts(&changed).unwrap();
    }
    let (a, b) = (warmed.commit().unwrap(), prefetched.commit().unwrap());
    assert_eq!(a, b, "the same version and root");
    let (w1, p1) = (
        warmed.auth_stats().unwrap(),
        prefetched.auth_stats().unwrap(),
    );
    assert!(p1.pages_read > p0.pages_read);
    assert_eq!(
        w1.pages_read - w0.pages_read,
        p1.pages_read - p0.pages_read,
        "a warmed-up commit reads no page the warm-up did not"
    );
    assert_eq!(w1.hashes - w0.hashes, p1.hashes - p0.hashes);
    // A prefetch after a warm-up waits for it, and a table dropped or closed while a warm-up
    // runs waits too.
    warmed.warm_up(&keys[1000..2000]).unwrap();
    warmed.prefetch(&keys[2000..2100]).unwrap();
    warmed.warm_up(&keys[3000..4000]).unwrap();
    let copy = warmed.duplicate().unwrap();
    copy.warm_up(&keys[..4000]).unwrap();
    drop(copy);
    warmed.close();
    // Errors are the caller's: a key too long, a plain table.
    assert!(prefetched.warm_up(&[vec![0u8; 5000]]).is_err());
    let plain = session.new_table(TableConfig::default()).unwrap();
    assert!(plain.warm_up(&keys[..3]).is_err());
}

/// A warm-up (its two halves of the key space on two threads) loads what a prefetch loads,
/// whatever the geometry (the pages below the retained levels from depth 1, 2 or 6 on) and
/// whether pages are read through the page cache or with O_DIRECT.
#[test]
fn a_warm_up_loads_what_a_prefetch_does_at_every_geometry() {
    let keys: Vec<Vec<u8>> = (0..3_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
    let changed: Vec<(&[u8], &[u8])> = keys[..900].iter().map(|k| (&k[..], &b"w"[..])).collect();
    for (top, retained, direct) in [
        (1u8, 0, false),
        (1, 0, true),
        (2, 0, true),
        (1, 4 << 20, false),
        (6, 0, true),
    ] {
        let fs = MemFs::new();
        let session = session_with(&fs, SessionOptions::default().direct_page_reads(direct));
        let config = config_top(
            HashKind::Sha256,
            20_000,
            MergeSchedule::Incremental,
            retained,
            top,
        );
        let (warmed, prefetched) = (
            session.new_table(config.clone()).unwrap(),
            session.new_table(config).unwrap(),
        );
        for table in [&warmed, &prefetched] {
            table.inserts(&pairs).unwrap();
            table.commit().unwrap();
        }
        let (w0, p0) = (
            warmed.auth_stats().unwrap(),
            prefetched.auth_stats().unwrap(),
        );
        warmed.warm_up(&keys[..900]).unwrap();
        prefetched.prefetch(&keys[..900]).unwrap();
        for table in [&warmed, &prefetched] {
            table.inserts(&changed).unwrap();
        }
        let case = format!("top {top}, retained {retained}, direct {direct}");
        assert_eq!(
            warmed.commit().unwrap(),
            prefetched.commit().unwrap(),
            "{case}"
        );
        let (w1, p1) = (
            warmed.auth_stats().unwrap(),
            prefetched.auth_stats().unwrap(),
        );
        assert!(p1.pages_read > p0.pages_read, "{case}");
        assert_eq!(
            w1.pages_read - w0.pages_read,
            p1.pages_read - p0.pages_read,
            "{case}"
        );
        assert_eq!(w1.hashes - w0.hashes, p1.hashes - p0.hashes, "{case}");
    }
}

/// A warm-up whose page reads fail (injected by the simulated file system) reports nothing and
/// changes nothing: the commit after it reads what the warm-up could not and gives the root a
/// table without warm-up gives. A commit whose own reads fail after such a warm-up reports it,
/// as a typed error. Both with trie pages read through the page cache and with `O_DIRECT`.
#[test]
fn a_warm_up_whose_reads_fail_leaves_the_commit_exact() {
    for direct in [false, true] {
        a_warm_up_whose_reads_fail_leaves_the_commit_exact_with(direct);
    }
}

fn a_warm_up_whose_reads_fail_leaves_the_commit_exact_with(direct: bool) {
    let fs = MemFs::new();
    let (_session, keys, warmed, cold) =
        two_loaded_tables_with(&fs, SessionOptions::default().direct_page_reads(direct));
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
    let reads_fail = || {
        let mut plan = FaultPlan::noisy(7, 1.0);
        plan.ops = vec![FsOp::Read];
        fs.set_fault_plan(Some(plan));
    };
    let before = warmed.auth_stats().unwrap();
    reads_fail();
    warmed.warm_up(&keys[..700]).unwrap();
    warmed.prefetch::<&[u8]>(&[]).unwrap(); // waits for the warm-up, reads nothing
    fs.set_fault_plan(None);
    let changed: Vec<(&[u8], &[u8])> = keys[..700].iter().map(|k| (&k[..], &b"w"[..])).collect();
    for table in [&warmed, &cold] {
        table.inserts(&changed).unwrap();
    }
    assert_eq!(warmed.commit().unwrap(), cold.commit().unwrap());
    assert!(warmed.auth_stats().unwrap().pages_read > before.pages_read);
    // The reads fail for the warm-up and the commit alike: the commit says so.
    reads_fail();
    warmed.warm_up(&keys[1000..1700]).unwrap();
    warmed.inserts(&pairs[1000..1700]).unwrap();
    let failed = warmed.commit();
    fs.set_fault_plan(None);
    assert!(
        matches!(failed, Err(Error::Io { .. }) | Err(Error::TableBroken(_))),
        "{failed:?}"
    );
}

#[test]
fn plain_tables_refuse_trie_operations() {
    let fs = MemFs::new();
    let session = session_in(&fs);
    let table = session.new_table(TableConfig::default()).unwrap();
    assert!(matches!(table.root(), Err(Error::NotAuthenticated)));
    assert!(matches!(table.commit(), Err(Error::NotAuthenticated)));
    assert!(matches!(table.prove(&[b"k"]), Err(Error::NotAuthenticated)));
    assert!(matches!(
        table.prefetch(&[b"k"]),
        Err(Error::NotAuthenticated)
    ));
    assert!(matches!(table.auth_stats(), Err(Error::NotAuthenticated)));
    assert!(matches!(table.top_witness(4), Err(Error::NotAuthenticated)));
}

#[test]
fn compact_proofs_against_a_witness_of_the_table() {
    let fs = MemFs::new();
    let session = session_in(&fs);
    let table = session
        .new_table(config(HashKind::Sha256, 64, MergeSchedule::Incremental, 0))
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..3_000u32)
        .map(|i| format!("k{i}").into_bytes())
        .collect();
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &k[..])).collect();
    table.inserts(&pairs).unwrap();
    let root = table.root().unwrap().root;
    let levels = 8;
    let witness =
        cairn::cairn_proof::TopWitness::new(&root, &table.top_witness(levels).unwrap(), levels)
            .unwrap();
    let asked = [&keys[7][..], &keys[2999][..], b"absent"];
    let proof = table.prove(&asked).unwrap().proof;
    let compact = proof.compact(levels);
    assert!(compact.encoded_len() < proof.encoded_len());
    let claims = [
        Claim::present(&keys[7], &keys[7]),
        Claim::present(&keys[2999], &keys[2999]),
        Claim::absent(b"absent"),
    ];
    assert_eq!(witness.verify(&compact, &claims), Ok(()));
    assert!(matches!(table.top_witness(0), Err(Error::InvalidUpdate(_))));
    assert!(matches!(
        table.top_witness(33),
        Err(Error::InvalidUpdate(_))
    ));
}

#[test]
fn snapshots_keep_their_root_across_sessions_exports_and_imports() {
    let fs = MemFs::new();
    let kind = HashKind::Sha256;
    let mut model = Model::new();
    let root = {
        let session = session_in(&fs);
        let table = session
            .new_table(config(kind, 16, MergeSchedule::Incremental, 300_000))
            .unwrap();
        for i in 0..2_000u16 {
            apply(&table, &mut model, &Op::Insert(i, i as u64));
        }
        for i in (0..2_000u16).step_by(7) {
            apply(&table, &mut model, &Op::Delete(i));
        }
        // Uncommitted updates are committed by the save: the snapshot's root is its contents'.
        table.save_snapshot("a", "ledger").unwrap();
        let root = table.root().unwrap().root;
        assert_eq!(root.hash, reference_root(kind, &model));
        session.export_snapshot("a", "/exported").unwrap();
        root
    };
    // A new session: the snapshot opens with its root, and so does an imported copy.
    let session = session_in(&fs);
    let opened = session
        .open_snapshot("a", "ledger", Default::default())
        .unwrap();
    assert_eq!(opened.root().unwrap().root, root);
    check_proof(&opened, kind, &model, &[0, 1, 7, 1999, 2500]);
    session.import_snapshot("b", "/exported").unwrap();
    let imported = session
        .open_snapshot("b", "ledger", Default::default())
        .unwrap();
    assert_eq!(imported.root().unwrap().root, root);
    // Both go on independently and agree with the reference.
    apply(&opened, &mut model, &Op::Insert(5000, 1));
    assert_eq!(
        opened.root().unwrap().root.hash,
        reference_root(kind, &model)
    );
    assert_eq!(imported.root().unwrap().root, root);
    // Deleting the snapshots leaves the open tables whole.
    session.delete_snapshot("a").unwrap();
    session.delete_snapshot("b").unwrap();
    check_proof(
        &imported,
        kind,
        &{
            let mut m = model.clone();
            m.remove(&key(5000));
            m
        },
        &[1, 2, 3],
    );
}

//! Durable tables through the write-ahead log: atomic batches across tables, durability notices
//! (wait, poll, future, callback) under each sync policy, checkpoints, recovery after a clean
//! close and after power loss (the prefix rule: the recovered tables are the model after some
//! prefix of the batches, and every batch reported durable is in it), and each recovery mode
//! against damage placed before the tail.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn::fs::{FileSystem, MemFs};
use cairn::{
    Error, LogOptions, RecoveryMode, Resolve, Session, SessionOptions, SyncPolicy, Table,
    TableConfig, Update,
};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
/// A key and its new value (`None`: deleted).
type KeyAndValue = (Vec<u8>, Option<Vec<u8>>);

fn options(sync: SyncPolicy) -> SessionOptions {
    SessionOptions::default()
        .salt(Some(5))
        .log(Some(LogOptions::default().sync(sync).segment_bytes(4096)))
}

fn small() -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(8)
        .merge_batch_size(2)
}

fn contents(t: &Table) -> Model {
    t.range_lookup(..)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect()
}

fn open(fs: &MemFs, sync: SyncPolicy) -> Session {
    Session::open_with(Arc::new(fs.clone()), "/s", options(sync)).unwrap()
}

fn new_fs() -> MemFs {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/s")).unwrap();
    fs.sync_dir(Path::new("/")).unwrap();
    fs
}

/// Blocks on a future without a runtime.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Thread(std::thread::Thread);
    impl std::task::Wake for Thread {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Thread(std::thread::current())).into();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => return out,
            std::task::Poll::Pending => std::thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

#[test]
fn batches_across_tables_survive_a_restart_with_every_kind_of_notice() {
    for sync in [
        SyncPolicy::Immediate,
        SyncPolicy::Group {
            window: Duration::from_millis(2),
            bytes: 512,
        },
        SyncPolicy::Never,
    ] {
        let fs = new_fs();
        let (mut utxo, mut balances) = (Model::new(), Model::new());
        {
            let session = open(&fs, sync);
            let u = session.create_durable_table("utxo", small()).unwrap();
            let b = session
                .create_durable_table("balances", small().resolve(Resolve::AddU64Le))
                .unwrap();
            let called = Arc::new(AtomicUsize::new(0));
            let mut last = None;
            for i in 0..60u64 {
                let key = format!("tx{i:03}");
                let spent = format!("tx{:03}", i / 2);
                let owner = format!("addr{}", i % 4);
                let block_u: Vec<(&str, Update<'_>)> = vec![
                    (key.as_str(), Update::Insert(owner.as_bytes())),
                    (spent.as_str(), Update::Delete),
                ];
                let amount = i.to_le_bytes();
                let block_b = [(owner.as_str(), Update::Upsert(&amount))];
                // Two tables, one record; the key types differ, so two parts of `&[u8]`.
                let bu: Vec<(&[u8], Update<'_>)> =
                    block_u.iter().map(|(k, u)| (k.as_bytes(), *u)).collect();
                let bb: Vec<(&[u8], Update<'_>)> =
                    block_b.iter().map(|(k, u)| (k.as_bytes(), *u)).collect();
                let durability = session.write(&[(&u, &bu[..]), (&b, &bb[..])]).unwrap();
                utxo.insert(key.clone().into_bytes(), owner.clone().into_bytes());
                utxo.remove(spent.as_bytes());
                let e = balances.entry(owner.into_bytes()).or_insert(vec![0; 8]);
                let sum = u64::from_le_bytes(e[..].try_into().unwrap()) + i;
                *e = sum.to_le_bytes().to_vec();
                if sync == SyncPolicy::Never {
                    last = Some(durability);
                    continue;
                }
                match i % 4 {
                    0 => durability.wait().unwrap(),
                    1 => block_on(durability).unwrap(),
                    2 => {
                        let called = called.clone();
                        durability.on_durable(move |r| {
                            r.unwrap();
                            called.fetch_add(1, Ordering::SeqCst);
                        });
                    }
                    _ => {
                        while !durability.is_durable().unwrap() {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                    }
                }
            }
            if let Some(d) = last {
                assert!(!d.is_durable().unwrap(), "never synced yet");
                session.sync_log().unwrap();
                assert!(d.is_durable().unwrap());
            } else {
                session.sync_log().unwrap();
                assert_eq!(called.load(Ordering::SeqCst), 15, "{sync:?}");
            }
            assert_eq!(contents(&u), utxo);
            assert_eq!(contents(&b), balances);
        }
        let session = open(&fs, sync);
        assert_eq!(session.durable_tables(), ["balances", "utxo"]);
        assert_eq!(
            contents(&session.durable_table("utxo").unwrap()),
            utxo,
            "{sync:?}"
        );
        assert_eq!(
            contents(&session.durable_table("balances").unwrap()),
            balances
        );
    }
}

#[test]
fn checkpoints_bound_the_log_and_recover_with_it() {
    let fs = new_fs();
    let mut model = Model::new();
    let segments = |fs: &MemFs| {
        fs.list_dir(Path::new("/s/log"))
            .unwrap()
            .iter()
            .filter(|n| n.ends_with(".seg"))
            .count()
    };
    {
        let session = open(&fs, SyncPolicy::Immediate);
        let t = session.create_durable_table("t", small()).unwrap();
        for round in 0..5u32 {
            for i in 0..200u32 {
                let key = format!("k{:04}", (i * 31 + round) % 500);
                let value = format!("v{round}-{i}-{}", "x".repeat(40));
                t.write(&[(key.as_bytes(), Update::Insert(value.as_bytes()))])
                    .unwrap();
                model.insert(key.into_bytes(), value.into_bytes());
            }
            session.checkpoint().unwrap();
            // Everything before the checkpoint is covered: at most the current segment and
            // the one it follows remain.
            assert!(segments(&fs) <= 2, "{} segments", segments(&fs));
        }
        for i in 0..50u32 {
            let key = format!("late{i}");
            t.insert(&key, "v").unwrap();
            model.insert(key.into_bytes(), b"v".to_vec());
        }
        session.sync_log().unwrap();
        // Checkpoints are not user snapshots.
        assert!(session.list_snapshots().unwrap().is_empty());
    }
    let session = open(&fs, SyncPolicy::Immediate);
    assert_eq!(contents(&session.durable_table("t").unwrap()), model);
}

#[test]
fn bad_input_is_refused_before_anything_is_logged() {
    let fs = new_fs();
    let session = open(&fs, SyncPolicy::Immediate);
    let t = session.create_durable_table("t", small()).unwrap();
    let plain = session.new_table(small()).unwrap();
    let none: &[(&[u8], Update<'_>)] = &[(b"k", Update::Insert(b"v"))];
    assert!(matches!(plain.write(none), Err(Error::NotDurable(_))));
    assert!(matches!(
        session.write(&[(&t, none), (&plain, none)]),
        Err(Error::NotDurable(_))
    ));
    let huge = vec![0u8; cairn::KEY_SIZE_MAX + 1];
    let bad: &[(&[u8], Update<'_>)] = &[(b"ok", Update::Insert(b"v")), (&huge, Update::Delete)];
    assert!(matches!(t.write(bad), Err(Error::KeyTooLarge { .. })));
    assert!(matches!(
        session.create_durable_table("t", small()),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        session.create_durable_table("Bad Name", small()),
        Err(Error::InvalidConfig(_))
    ));
    let other =
        Session::open_with(Arc::new(new_fs()), "/s", options(SyncPolicy::Immediate)).unwrap();
    let foreign = other.create_durable_table("f", small()).unwrap();
    assert!(matches!(
        session.write(&[(&foreign, none)]),
        Err(Error::InvalidConfig(_))
    ));
    t.close();
    assert!(matches!(t.write(none), Err(Error::TableClosed)));
    let no_log = Session::open_with(
        Arc::new(new_fs()),
        "/s",
        SessionOptions::default().log(None),
    )
    .unwrap();
    assert!(matches!(
        no_log.create_durable_table("t", small()),
        Err(Error::NotDurable(_))
    ));
    assert!(matches!(no_log.checkpoint(), Err(Error::NotDurable(_))));
    drop((t, plain, session));
    // Nothing refused was logged.
    let session = open(&fs, SyncPolicy::Immediate);
    assert!(contents(&session.durable_table("t").unwrap()).is_empty());
}

/// The options of `open` with recovery mode `mode`.
fn with_mode(mode: RecoveryMode) -> SessionOptions {
    options(SyncPolicy::Immediate).log(Some(
        LogOptions::default().recovery(mode).segment_bytes(4096),
    ))
}

/// The segment files of the log, oldest first.
fn segment_paths(fs: &MemFs) -> Vec<std::path::PathBuf> {
    let mut names: Vec<String> = fs
        .list_dir(Path::new("/s/log"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .collect();
    names.sort();
    names.iter().map(|n| Path::new("/s/log").join(n)).collect()
}

/// A log of several segments holding keys `k000..k{n}`, closed cleanly.
fn several_segments(n: u32) -> MemFs {
    let fs = new_fs();
    let session = open(&fs, SyncPolicy::Immediate);
    let t = session.create_durable_table("t", small()).unwrap();
    for i in 0..n {
        let value = "v".repeat(100);
        t.write(&[(
            format!("k{i:03}").as_bytes(),
            Update::Insert(value.as_bytes()),
        )])
        .unwrap()
        .wait()
        .unwrap();
    }
    drop(t);
    drop(session);
    assert!(segment_paths(&fs).len() >= 4);
    fs
}

#[test]
fn recovery_modes_against_damage_before_the_tail() {
    // Junk after the last record of the last segment is a torn tail: cut off, silently.
    let fs = several_segments(120);
    let last = segment_paths(&fs).last().unwrap().clone();
    let mut bytes = fs.file_bytes(&last).unwrap();
    bytes.extend_from_slice(&[0xab; 37]);
    fs.set_file_bytes(&last, bytes);
    let s = Session::open_with(
        Arc::new(fs.clone()),
        "/s",
        with_mode(RecoveryMode::TolerateTornTail),
    )
    .unwrap();
    assert_eq!(contents(&s.durable_table("t").unwrap()).len(), 120);
    drop(s);
    // ...and the log opened after it keeps working and recovers again.
    let s = open(&fs, SyncPolicy::Immediate);
    s.durable_table("t").unwrap().insert("after", "x").unwrap();
    s.sync_log().unwrap();
    drop(s);
    assert_eq!(
        contents(&open(&fs, SyncPolicy::Immediate).durable_table("t").unwrap()).len(),
        121
    );

    // A damaged record in an early segment: an error naming the segment and offset by default,
    // the records before it with point-in-time recovery.
    let fs = several_segments(120);
    let second = segment_paths(&fs)[1].clone();
    let mut bytes = fs.file_bytes(&second).unwrap();
    let at = 64 + 20 + 5; // inside the segment's first record
    bytes[at] ^= 0x40;
    fs.set_file_bytes(&second, bytes);
    let err = Session::open_with(
        Arc::new(fs.clone()),
        "/s",
        with_mode(RecoveryMode::TolerateTornTail),
    )
    .unwrap_err();
    match &err {
        Error::LogCorrupted { path, offset, .. } => {
            assert_eq!(path, &second);
            assert_eq!(*offset, 64);
        }
        other => panic!("{other:?}"),
    }
    let s = Session::open_with(
        Arc::new(fs.clone()),
        "/s",
        with_mode(RecoveryMode::PointInTime),
    )
    .unwrap();
    let recovered = contents(&s.durable_table("t").unwrap());
    assert!(
        !recovered.is_empty() && recovered.len() < 120,
        "{}",
        recovered.len()
    );
    // A prefix: k000 .. k{n-1}.
    let n = recovered.len();
    assert!(recovered
        .keys()
        .enumerate()
        .all(|(i, k)| *k == format!("k{i:03}").into_bytes()));
    // Writes go on after the point in time, and survive.
    s.durable_table("t").unwrap().insert("after", "x").unwrap();
    s.sync_log().unwrap();
    drop(s);
    let s = open(&fs, SyncPolicy::Immediate);
    assert_eq!(contents(&s.durable_table("t").unwrap()).len(), n + 1);
    drop(s);

    // A segment missing from the middle, or a stale one: corruption, not a tail.
    let fs = several_segments(120);
    fs.remove_file(&segment_paths(&fs)[2]).unwrap();
    assert!(matches!(
        Session::open_with(
            Arc::new(fs.clone()),
            "/s",
            with_mode(RecoveryMode::TolerateTornTail)
        ),
        Err(Error::LogCorrupted { .. })
    ));
    let fs = several_segments(120);
    let paths = segment_paths(&fs);
    let (a, b) = (
        fs.file_bytes(&paths[1]).unwrap(),
        fs.file_bytes(&paths[2]).unwrap(),
    );
    fs.set_file_bytes(&paths[1], b);
    fs.set_file_bytes(&paths[2], a);
    assert!(matches!(
        Session::open_with(
            Arc::new(fs.clone()),
            "/s",
            with_mode(RecoveryMode::TolerateTornTail)
        ),
        Err(Error::LogCorrupted { .. })
    ));
}

/// One step of the power-loss property.
#[derive(Clone, Debug)]
enum Step {
    /// A batch across both tables: (table, key, value or delete) updates.
    Batch(Vec<(bool, u8, Option<u8>)>),
    Checkpoint,
    Sync,
    /// A commit of table `b`, which is authenticated.
    Commit,
}

/// Table `b` of the power-loss property: authenticated, small.
fn small_auth() -> TableConfig {
    small().auth(Some(cairn::AuthConfig::default().retained_bytes(0)))
}

/// The state root of `model`, from a fresh ephemeral authenticated table.
fn root_of(model: &Model) -> cairn::Root {
    let tmp = MemFs::new();
    tmp.create_dir_all(Path::new("/r")).unwrap();
    let s = Session::open_with(Arc::new(tmp), "/r", SessionOptions::default().log(None)).unwrap();
    let t = s.new_table(small_auth()).unwrap();
    let pairs: Vec<_> = model.iter().collect();
    t.inserts(&pairs).unwrap();
    t.commit().unwrap().root
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => proptest::collection::vec((any::<bool>(), 0u8..40, proptest::option::of(any::<u8>())), 1..6)
            .prop_map(Step::Batch),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::Sync),
        2 => Just(Step::Commit),
    ]
}

fn apply(models: &mut [Model; 2], batch: &[(bool, u8, Option<u8>)]) {
    for &(which, key, value) in batch {
        let m = &mut models[usize::from(which)];
        let key = format!("key{key:02}").into_bytes();
        match value {
            Some(v) => {
                m.insert(key, vec![v; 1 + v as usize % 50]);
            }
            None => {
                m.remove(&key);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if std::env::var("CI").is_ok() { 500 } else { 200 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Power is cut after a random number of file-system primitives; unsynced tails are lost,
    /// kept or torn. The tables recovered are the model after a prefix of the batches that
    /// includes every batch reported durable, each batch all or nothing. Table `b` is
    /// authenticated: its recovered version is one it had, at least that of every commit
    /// followed by a batch reported durable, every commit replayed reached its logged version
    /// and root (recovery checks), and its root is the root of its recovered contents.
    #[test]
    fn power_loss_keeps_a_prefix_with_every_durable_batch(
        steps in proptest::collection::vec(step(), 1..40),
        cut in 0u64..400,
        seed in any::<u64>(),
        group in any::<bool>(),
    ) {
        let sync = if group {
            SyncPolicy::Group { window: Duration::from_micros(300), bytes: 256 }
        } else {
            SyncPolicy::Immediate
        };
        let fs = new_fs();
        let batches: Vec<Vec<(bool, u8, Option<u8>)>> = steps
            .iter()
            .filter_map(|s| match s { Step::Batch(b) => Some(b.clone()), _ => None })
            .collect();
        let mut durable_seen = 0usize; // batches [0, durable_seen) were reported durable
        // Table b's commits: (version, batches written before it); the highest version it had;
        // the highest version known durable.
        let mut commits: Vec<(u64, usize)> = Vec::new();
        let mut versions_max = 0u64;
        let mut versions_durable = 0u64;
        {
            let session = open(&fs, sync);
            let tables = [
                session.create_durable_table("a", small()).unwrap(),
                session.create_durable_table("b", small_auth()).unwrap(),
            ];
            fs.crash_after(cut);
            let mut handles = Vec::new();
            for s in &steps {
                let result = match s {
                    Step::Batch(b) => write_pair(&session, &tables, b).map(|d| handles.push(d)),
                    Step::Checkpoint => session.checkpoint(),
                    Step::Sync => session.sync_log().map(|()| {
                        versions_durable = tables[1].auth_stats().map_or(0, |a| a.version);
                    }),
                    Step::Commit => tables[1].commit().map(|c| {
                        // Durable once a later batch is.
                        commits.push((c.version, handles.len()));
                        versions_max = versions_max.max(c.version);
                    }),
                };
                if result.is_err() {
                    break;
                }
                versions_max = versions_max.max(tables[1].auth_stats().map_or(0, |a| a.version));
            }
            // Give the syncer a moment, then see which notices fired before the power went.
            std::thread::sleep(Duration::from_millis(1));
            fs.cut_power();
            for (i, d) in handles.iter().enumerate() {
                if matches!(d.is_durable(), Ok(true)) {
                    durable_seen = durable_seen.max(i + 1);
                }
            }
            for &(version, batches_before) in &commits {
                if durable_seen > batches_before {
                    versions_durable = versions_durable.max(version);
                }
            }
            drop(tables);
            drop(session);
        }
        fs.recover(seed);
        let session = open(&fs, sync);
        let found = [
            session.durable_table("a").map(|t| contents(&t)),
            session.durable_table("b").map(|t| contents(&t)),
        ];
        // The tables exist unless the power went before their creation was durable, which
        // `crash_after` placed after it.
        let found = [found[0].clone().unwrap(), found[1].clone().unwrap()];
        let mut models = [Model::new(), Model::new()];
        let mut prefixes = Vec::new();
        for (i, b) in batches.iter().enumerate() {
            if i >= durable_seen && models[0] == found[0] && models[1] == found[1] {
                prefixes.push(i);
            }
            apply(&mut models, b);
        }
        if models[0] == found[0] && models[1] == found[1] {
            prefixes.push(batches.len());
        }
        if std::env::var("DURABLE_STATS").is_ok() {
            eprintln!("STAT durable {durable_seen} of {} prefixes {:?}", batches.len(), prefixes);
        }
        prop_assert!(
            !prefixes.is_empty(),
            "recovered state is no prefix of at least {durable_seen} of {} batches",
            batches.len()
        );
        let b = session.durable_table("b").unwrap();
        let version = b.auth_stats().unwrap().version;
        prop_assert!(
            versions_durable <= version && version <= versions_max,
            "version {version} recovered; {versions_durable} was durable, {versions_max} the last"
        );
        prop_assert_eq!(b.root().unwrap().root, root_of(&found[1]));
    }
}

/// A crash at every primitive of a checkpoint (and of the session's close after it) leaves the
/// old checkpoint with the whole log, or the new one with the log after it: the tables always
/// come back whole.
#[test]
fn a_crash_at_every_primitive_of_a_checkpoint_loses_nothing() {
    let mut n = 0;
    loop {
        let fs = new_fs();
        let mut model = Model::new();
        let session = open(&fs, SyncPolicy::Immediate);
        let t = session.create_durable_table("t", small()).unwrap();
        for round in 0..2 {
            for i in 0..30u32 {
                let key = format!("k{:03}", (i * 7 + round) % 40);
                t.insert(&key, format!("v{round}{i}")).unwrap();
                model.insert(key.into_bytes(), format!("v{round}{i}").into_bytes());
            }
            if round == 0 {
                session.checkpoint().unwrap();
            }
        }
        session.sync_log().unwrap();
        fs.crash_after(n);
        let finished = session.checkpoint().is_ok() && !fs.is_crashed();
        drop(t);
        drop(session);
        fs.recover(n);
        let reopened = open(&fs, SyncPolicy::Immediate);
        assert_eq!(
            contents(&reopened.durable_table("t").unwrap()),
            model,
            "crash after {n} primitives of the checkpoint"
        );
        drop(reopened);
        if finished {
            break;
        }
        n += 1;
    }
    assert!(n > 10, "the checkpoint took only {n} primitives");
}

/// One step of the fault property: an operation and, maybe, noisy faults (seed, percent)
/// injected while it runs (and while the log's syncer works meanwhile).
type FaultStep = (Step, Option<(u64, u8)>);

fn fault_step() -> impl Strategy<Value = FaultStep> {
    (
        step(),
        prop_oneof![3 => Just(None), 1 => (any::<u64>(), 1u8..=25).prop_map(Some)],
    )
}

/// Writes batch `b` through `session` to tables `a` and `b`.
fn write_pair(
    session: &Session,
    tables: &[Table; 2],
    b: &[(bool, u8, Option<u8>)],
) -> cairn::Result<cairn::Durability> {
    let parts: [Vec<KeyAndValue>; 2] = [false, true].map(|w| {
        b.iter()
            .filter(|u| u.0 == w)
            .map(|&(_, k, v)| {
                (
                    format!("key{k:02}").into_bytes(),
                    v.map(|v| vec![v; 1 + v as usize % 50]),
                )
            })
            .collect()
    });
    let updates: Vec<Vec<(&[u8], Update<'_>)>> = parts
        .iter()
        .map(|p| {
            p.iter()
                .map(|(k, v)| (&k[..], v.as_deref().map_or(Update::Delete, Update::Insert)))
                .collect()
        })
        .collect();
    session.write(&[(&tables[0], &updates[0][..]), (&tables[1], &updates[1][..])])
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if std::env::var("CI").is_ok() { 300 } else { 100 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Noisy faults (errors and torn writes on any primitive, the syncer's included) during
    /// writes, checkpoints and syncs: a checkpoint or sync that saw a fault fails, no operation
    /// fails without one, a failed log refuses what follows, and after every failure the session
    /// is reopened and recovers a prefix of the batches holding every batch reported durable.
    #[test]
    fn noisy_faults_in_the_log_are_never_swallowed(
        steps in proptest::collection::vec(fault_step(), 1..30),
        group in any::<bool>(),
    ) {
        let sync = if group {
            SyncPolicy::Group { window: Duration::from_micros(200), bytes: 256 }
        } else {
            SyncPolicy::Immediate
        };
        let fs = new_fs();
        let mut session = open(&fs, sync);
        let mut tables = [
            session.create_durable_table("a", small()).unwrap(),
            session.create_durable_table("b", small_auth()).unwrap(),
        ];
        // The batches since the recovered state `base`, their notices, and every state after
        // them.
        let mut base = [Model::new(), Model::new()];
        let mut batches: Vec<Vec<(bool, u8, Option<u8>)>> = Vec::new();
        let mut handles: Vec<cairn::Durability> = Vec::new();
        let mut faulted = false;
        let mut restarts = 0;
        for (s, faults) in &steps {
            fs.set_fault_plan(faults.map(|(seed, p)| cairn::fs::FaultPlan::noisy(seed, f64::from(p) / 100.0)));
            let result = match s {
                Step::Batch(b) => {
                    // A write that fails after its record was logged (applying it to a table
                    // failed) is recovered whole: the last batch may or may not be there.
                    batches.push(b.clone());
                    write_pair(&session, &tables, b).map(|d| handles.push(d))
                }
                Step::Checkpoint => session.checkpoint(),
                Step::Sync => session.sync_log(),
                Step::Commit => tables[1].commit().map(drop),
            };
            // Let the syncer finish what this step started, under the same faults.
            std::thread::sleep(Duration::from_micros(300));
            fs.set_fault_plan(None);
            let injected = !fs.take_injected().is_empty();
            faulted |= injected;
            if injected && matches!(s, Step::Checkpoint | Step::Sync) {
                prop_assert!(result.is_err(), "{s:?} saw a fault and succeeded");
            }
            if result.is_err() {
                prop_assert!(faulted, "{s:?} failed with no fault injected: {result:?}");
                // Restart: the notices that fired must be recovered.
                let durable_seen = handles
                    .iter()
                    .rposition(|d| matches!(d.is_durable(), Ok(true)))
                    .map_or(0, |i| i + 1);
                drop(tables);
                drop(session);
                session = open(&fs, sync);
                tables = [
                    session.durable_table("a").unwrap(),
                    session.durable_table("b").unwrap(),
                ];
                let found = [contents(&tables[0]), contents(&tables[1])];
                let mut models = base.clone();
                let mut recovered = None;
                // `batches` ends with a failed write's batch, if that was the failure: it may
                // or may not have been logged.
                for k in 0..=batches.len() {
                    if k >= durable_seen && models == found {
                        recovered = Some(k);
                        break;
                    }
                    if k < batches.len() {
                        apply(&mut models, &batches[k]);
                    }
                }
                prop_assert!(
                    recovered.is_some(),
                    "after restart {restarts}: no prefix of at least {durable_seen} of {} batches",
                    batches.len()
                );
                base = found;
                batches.clear();
                handles.clear();
                faulted = false;
                restarts += 1;
            }
        }
    }
}

/// The fuzz target's helpers on fixed inputs: recovery of a log with patched files keeps every
/// batch whole, and the decoders are total.
#[test]
fn patched_logs_recover_whole_batches_or_fail_cleanly() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for case in 0..60u8 {
        let mut input = vec![case, case >> 1];
        for _ in 0..(case % 5) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            input.extend_from_slice(&rng.to_le_bytes()[..4]);
        }
        cairn::fuzzing::log_recovery(&input);
        cairn::fuzzing::log_decoders(&input);
    }
}

/// A closed durable table keeps its old checkpoint: the next checkpoint skips it, and reopening
/// the session recovers it from that checkpoint and the log.
#[test]
fn a_closed_durable_table_is_recovered_from_its_old_checkpoint() {
    let fs = new_fs();
    let (mut a_model, mut b_model) = (Model::new(), Model::new());
    {
        let session = open(&fs, SyncPolicy::Immediate);
        let a = session.create_durable_table("a", small()).unwrap();
        let b = session.create_durable_table("b", small()).unwrap();
        for i in 0..40u32 {
            let k = format!("k{i:02}");
            a.insert(&k, "a").unwrap();
            b.insert(&k, "b").unwrap();
            a_model.insert(k.clone().into_bytes(), b"a".to_vec());
            b_model.insert(k.into_bytes(), b"b".to_vec());
        }
        a.close();
        b.insert("late", "b").unwrap();
        b_model.insert(b"late".to_vec(), b"b".to_vec());
        session.checkpoint().unwrap();
        session.sync_log().unwrap();
    }
    let session = open(&fs, SyncPolicy::Immediate);
    assert_eq!(contents(&session.durable_table("a").unwrap()), a_model);
    assert_eq!(contents(&session.durable_table("b").unwrap()), b_model);
    let small_segments =
        SessionOptions::default().log(Some(LogOptions::default().segment_bytes(100)));
    drop(session);
    assert!(matches!(
        Session::open_with(Arc::new(fs.clone()), "/s", small_segments),
        Err(Error::InvalidConfig(_))
    ));
}

/// `create_durable_table` under noisy faults: an error only after a fault; after a restart the
/// table exists if creation returned `Ok` (and may if it failed at its very end), and whenever
/// it exists it opens, empty.
#[test]
fn creating_durable_tables_under_faults() {
    let mut failures = 0;
    for seed in 0..200u64 {
        let fs = new_fs();
        let session = open(&fs, SyncPolicy::Immediate);
        let plan = cairn::fs::FaultPlan::noisy(seed, 0.15);
        fs.set_fault_plan(Some(plan));
        let created = session.create_durable_table("t", small());
        fs.set_fault_plan(None);
        let injected = !fs.take_injected().is_empty();
        assert!(
            created.is_ok() || injected,
            "seed {seed}: {created:?} with no fault"
        );
        failures += usize::from(created.is_err());
        let ok = created.is_ok();
        drop(created);
        drop(session);
        let session = open(&fs, SyncPolicy::Immediate);
        match session.durable_table("t") {
            Some(t) => assert!(contents(&t).is_empty()),
            None => assert!(!ok, "seed {seed}: a table created without error is gone"),
        }
    }
    assert!(failures > 20, "only {failures} creations failed");
}

/// Many writers waiting on their own writes, under each policy, with checkpoints running
/// meanwhile, on the real file system: every wait returns (no lost wake-up when a waiter finds
/// another leading), and everything is recovered.
#[test]
fn concurrent_writers_all_get_their_notices() {
    for sync in [
        SyncPolicy::Immediate,
        SyncPolicy::Group {
            window: Duration::from_micros(100),
            bytes: 4096,
        },
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let opts = SessionOptions::default()
            .log(Some(LogOptions::default().sync(sync).segment_bytes(8192)));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let dir = tmp.path().to_path_buf();
        let worker_opts = opts.clone();
        let worker = std::thread::spawn(move || {
            let session = Session::open_with_options(&dir, worker_opts).unwrap();
            let t = session.create_durable_table("t", small()).unwrap();
            std::thread::scope(|s| {
                for w in 0..8u32 {
                    let t = t.clone();
                    s.spawn(move || {
                        for i in 0..150u32 {
                            let key = format!("w{w}-{i:03}");
                            t.write(&[(key.as_bytes(), Update::Insert(b"v"))])
                                .unwrap()
                                .wait()
                                .unwrap();
                        }
                    });
                }
                s.spawn(|| {
                    for _ in 0..5 {
                        session.checkpoint().unwrap();
                        std::thread::sleep(Duration::from_millis(5));
                    }
                });
            });
            done_tx.send(()).unwrap();
        });
        done_rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("writers hung under {sync:?}"));
        worker.join().unwrap();
        let session = Session::open_with_options(tmp.path(), opts).unwrap();
        assert_eq!(
            contents(&session.durable_table("t").unwrap()).len(),
            8 * 150
        );
    }
}

/// Opening a session with a log (recovery: checkpoints, replay, a new segment) under noisy
/// faults: it fails only after a fault, and whenever it opens, every table holds exactly what
/// was written (everything was durable before); a failed open leaves the log recoverable.
#[test]
fn recovery_under_faults_fails_cleanly_or_recovers_everything() {
    let fs = new_fs();
    let mut model = Model::new();
    {
        let session = open(&fs, SyncPolicy::Immediate);
        let t = session.create_durable_table("t", small()).unwrap();
        for i in 0..120u32 {
            let key = format!("k{:03}", i * 13 % 90);
            t.insert(&key, format!("v{i}")).unwrap();
            model.insert(key.into_bytes(), format!("v{i}").into_bytes());
            if i == 60 {
                session.checkpoint().unwrap();
            }
        }
        session.sync_log().unwrap();
    }
    let (mut opened, mut failed) = (0, 0);
    for seed in 0..150u64 {
        let p = 0.001 * (1 + seed % 10) as f64;
        fs.set_fault_plan(Some(cairn::fs::FaultPlan::noisy(seed, p)));
        let result = Session::open_with(Arc::new(fs.clone()), "/s", options(SyncPolicy::Immediate));
        fs.set_fault_plan(None);
        let injected = !fs.take_injected().is_empty();
        match result {
            Ok(session) => {
                opened += 1;
                let t = session.durable_table("t").unwrap();
                assert_eq!(contents(&t), model, "seed {seed}");
            }
            Err(e) => {
                failed += 1;
                assert!(injected, "seed {seed}: {e} with no fault injected");
            }
        }
    }
    assert!(
        opened > 10 && failed > 10,
        "{opened} opened, {failed} failed"
    );
    let session = open(&fs, SyncPolicy::Immediate);
    assert_eq!(contents(&session.durable_table("t").unwrap()), model);
}

/// The log's traps an outside check found: a missing or foreign catalog is refused in every
/// recovery mode (never recovered as "no durable tables"), a lone `wait()` under
/// `SyncPolicy::Never` returns, and reopening does not pile up segments.
#[test]
fn a_missing_or_foreign_catalog_is_refused_in_every_recovery_mode() {
    let modes = [RecoveryMode::TolerateTornTail, RecoveryMode::PointInTime];
    let refused = |fs: &MemFs, what: &str| {
        for mode in modes {
            match Session::open_with(Arc::new(fs.clone()), "/s", with_mode(mode)) {
                Err(Error::LogCorrupted { .. }) => {}
                other => panic!("{what}, {mode:?}: {other:?}"),
            }
        }
    };
    // The catalog deleted, segments and checkpoints intact.
    let fs = several_segments(120);
    fs.remove_file(Path::new("/s/log/catalog")).unwrap();
    refused(&fs, "no catalog");
    // ... and with the segments gone too: the checkpoints alone say there was a log.
    for path in segment_paths(&fs) {
        fs.remove_file(&path).unwrap();
    }
    refused(&fs, "no catalog, no segments");

    // Another session's catalog beside this session's segments.
    let fs = several_segments(120);
    let other = several_segments(120);
    let foreign = other.file_bytes(Path::new("/s/log/catalog")).unwrap();
    fs.set_file_bytes(Path::new("/s/log/catalog"), foreign);
    refused(&fs, "a foreign catalog");

    // A catalog whose checkpoints need records the log no longer has (the oldest segments
    // removed): an error by default; under point-in-time recovery, no record after the
    // checkpoint is applied (the damage is at the start), rather than the records after a gap.
    let fs = several_segments(120);
    let paths = segment_paths(&fs);
    fs.remove_file(&paths[0]).unwrap();
    assert!(matches!(
        Session::open_with(
            Arc::new(fs.clone()),
            "/s",
            with_mode(RecoveryMode::TolerateTornTail)
        ),
        Err(Error::LogCorrupted { .. })
    ));
    let s = Session::open_with(
        Arc::new(fs.clone()),
        "/s",
        with_mode(RecoveryMode::PointInTime),
    )
    .unwrap();
    assert!(contents(&s.durable_table("t").unwrap()).is_empty());
}

#[test]
fn every_question_about_a_record_under_sync_never_gets_an_answer() {
    let fs = new_fs();
    let session = open(&fs, SyncPolicy::Never);
    let t = session.create_durable_table("t", small()).unwrap();
    // A lone wait: syncs the log up to its record.
    let d = t.write(&[(b"a", Update::Insert(b"1"))]).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = d.clone();
    std::thread::spawn(move || tx.send(waiter.wait()).unwrap());
    rx.recv_timeout(Duration::from_secs(20))
        .expect("wait() under SyncPolicy::Never blocked")
        .unwrap();
    assert!(d.is_durable().unwrap());
    // A future, a callback, and polling is_durable.
    let d = t.write(&[(b"b", Update::Insert(b"2"))]).unwrap();
    block_on(d).unwrap();
    let d = t.write(&[(b"c", Update::Insert(b"3"))]).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    d.on_durable(move |r| tx.send(r).unwrap());
    rx.recv_timeout(Duration::from_secs(20)).unwrap().unwrap();
    let d = t.write(&[(b"d", Update::Insert(b"4"))]).unwrap();
    let start = std::time::Instant::now();
    while !d.is_durable().unwrap() {
        assert!(start.elapsed() < Duration::from_secs(20), "never durable");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Each synced what it asked for; a write nobody asks about is not fsynced by the log.
    let fsyncs = session.log_stats().unwrap().fsyncs;
    t.write(&[(b"e", Update::Insert(b"5"))]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(session.log_stats().unwrap().fsyncs, fsyncs);
    // After a power loss, every record reported durable is there.
    fs.cut_power();
    drop(t);
    drop(session);
    fs.recover(1);
    let s = open(&fs, SyncPolicy::Never);
    let recovered = contents(&s.durable_table("t").unwrap());
    for key in ["a", "b", "c", "d"] {
        assert!(recovered.contains_key(key.as_bytes()), "{key} lost");
    }
}

#[test]
fn reopening_often_does_not_grow_the_log() {
    let fs = new_fs();
    let session = open(&fs, SyncPolicy::Immediate);
    session.create_durable_table("t", small()).unwrap();
    drop(session);
    for i in 0..150u32 {
        let session = open(&fs, SyncPolicy::Immediate);
        let t = session.durable_table("t").unwrap();
        t.write(&[(format!("k{i:03}").as_bytes(), Update::Insert(b"v"))])
            .unwrap()
            .wait()
            .unwrap();
        assert!(
            segment_paths(&fs).len() <= 2,
            "reopen {i}: {:?}",
            segment_paths(&fs)
        );
    }
    let session = open(&fs, SyncPolicy::Immediate);
    assert_eq!(contents(&session.durable_table("t").unwrap()).len(), 150);
    assert_eq!(segment_paths(&fs).len(), 1);
}

#[test]
fn named_tables_are_opened_or_created_and_survive_restarts_by_default() {
    let tmp = tempfile::tempdir().unwrap();
    // A missing directory (and its parent) is created.
    let path = tmp.path().join("a").join("db");
    {
        let session = Session::open(&path).unwrap();
        let accounts = session.table("accounts", TableConfig::default()).unwrap();
        assert!(accounts.is_durable());
        accounts.insert("alice", "100").unwrap();
        assert_eq!(accounts.get("alice").unwrap(), Some(b"100".to_vec()));
        assert_eq!(accounts.get("bob").unwrap(), None);
        assert!(accounts.contains_key("alice").unwrap());
        assert!(!accounts.contains_key("bob").unwrap());
        // The same name again is the same table.
        let again = session.table("accounts", TableConfig::default()).unwrap();
        assert_eq!(again.get("alice").unwrap(), Some(b"100".to_vec()));
        // A config that disagrees on the contents' rules is refused.
        let adds = TableConfig::default().resolve(Resolve::AddU64Le);
        assert!(matches!(
            session.table("accounts", adds),
            Err(Error::InvalidConfig(_))
        ));
        // Ephemeral tables stay available, and anonymous.
        let scratch = session.new_table(TableConfig::default()).unwrap();
        assert!(!scratch.is_durable());
        scratch.insert("x", "y").unwrap();
    }
    let session = Session::open(&path).unwrap();
    assert_eq!(session.durable_tables(), ["accounts"]);
    let accounts = session.table("accounts", TableConfig::default()).unwrap();
    assert_eq!(accounts.get("alice").unwrap(), Some(b"100".to_vec()));
    drop(session);
    drop(accounts);
    // Without creation, a missing directory is an error; so is a file.
    let no_create = SessionOptions::default().create_if_missing(false);
    let missing = tmp.path().join("missing");
    assert!(matches!(
        Session::open_with_options(&missing, no_create),
        Err(Error::SessionDirMissing(_))
    ));
    std::fs::write(tmp.path().join("file"), b"x").unwrap();
    assert!(matches!(
        Session::open(tmp.path().join("file")),
        Err(Error::SessionDirMissing(_))
    ));
    // A session without a log has no named tables.
    let no_log = SessionOptions::default().log(None);
    let s = Session::open_with_options(tmp.path().join("plain"), no_log).unwrap();
    assert!(matches!(
        s.table("t", TableConfig::default()),
        Err(Error::NotDurable(_))
    ));
}

#[test]
fn a_write_batch_spans_tables_with_keys_of_their_own_types() {
    let fs = new_fs();
    let mut model = [Model::new(), Model::new()];
    {
        let session = open(&fs, SyncPolicy::Immediate);
        let balances = session.table("balances", small()).unwrap();
        let utxo = session.table("utxo", small()).unwrap();
        for round in 0..40u8 {
            let mut batch = cairn::WriteBatch::new();
            // &str keys in one table, [u8; 34] keys in the other, interleaved.
            let name = format!("acct{}", round % 7);
            batch.insert(&balances, &name, [round; 8]);
            batch.insert(&utxo, [round; 34], b"out");
            batch.delete(&utxo, [round.wrapping_sub(3); 34]);
            batch.update(&balances, "total", Update::Insert(&[round]));
            assert_eq!(batch.len(), 4);
            session.write_batch(&batch).unwrap().wait().unwrap();
            model[0].insert(name.into_bytes(), vec![round; 8]);
            model[1].insert(vec![round; 34], b"out".to_vec());
            model[1].remove(&vec![round.wrapping_sub(3); 34]);
            model[0].insert(b"total".to_vec(), vec![round]);
        }
        // A bad update anywhere refuses the whole batch before anything is logged.
        let mut bad = cairn::WriteBatch::new();
        bad.insert(&balances, "fine", "v");
        bad.insert(&utxo, vec![0u8; cairn::KEY_SIZE_MAX + 1], "v");
        assert!(matches!(
            session.write_batch(&bad),
            Err(Error::KeyTooLarge { .. })
        ));
        assert_eq!(contents(&balances), model[0]);
        assert_eq!(contents(&utxo), model[1]);
        // A table of another session is refused.
        let other_fs = new_fs();
        let other = open(&other_fs, SyncPolicy::Immediate);
        let foreign = other.table("x", small()).unwrap();
        let mut batch = cairn::WriteBatch::new();
        batch.insert(&foreign, "k", "v");
        assert!(session.write_batch(&batch).is_err());
        batch.clear();
        assert!(batch.is_empty());
    }
    let session = open(&fs, SyncPolicy::Immediate);
    assert_eq!(
        contents(&session.durable_table("balances").unwrap()),
        model[0]
    );
    assert_eq!(contents(&session.durable_table("utxo").unwrap()), model[1]);
}

#[test]
fn automatic_checkpoints_bound_the_log_without_the_application() {
    let fs = new_fs();
    let by_size = options(SyncPolicy::Immediate).log(Some(
        LogOptions::default()
            .segment_bytes(4096)
            .checkpoint_bytes(16 << 10)
            .checkpoint_interval(None),
    ));
    let mut model = Model::new();
    {
        let session = Session::open_with(Arc::new(fs.clone()), "/s", by_size).unwrap();
        let t = session.table("t", small()).unwrap();
        let mut most = 0;
        for i in 0..3_000u32 {
            let key = format!("k{:05}", i % 700);
            let value = format!("v{i}-{}", "x".repeat(60));
            t.insert(&key, &value).unwrap();
            model.insert(key.into_bytes(), value.into_bytes());
            most = most.max(segment_paths(&fs).len());
        }
        // 3,000 records of about 100 bytes make about 70 segments of 4 KiB; the checkpoints
        // every 16 KiB keep about five.
        assert!(most <= 8, "{most} segments at most");
        session.sync_log().unwrap();
    }
    let session = open(&fs, SyncPolicy::Immediate);
    assert_eq!(contents(&session.durable_table("t").unwrap()), model);
    drop(session);

    // By time: the first write after the interval checkpoints.
    let fs = new_fs();
    let by_time = options(SyncPolicy::Immediate).log(Some(
        LogOptions::default()
            .segment_bytes(4096)
            .checkpoint_bytes(u64::MAX)
            .checkpoint_interval(Some(Duration::from_millis(1))),
    ));
    let session = Session::open_with(Arc::new(fs.clone()), "/s", by_time).unwrap();
    let t = session.table("t", small()).unwrap();
    for i in 0..500u32 {
        t.insert(format!("k{i}"), "x".repeat(100)).unwrap();
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    assert!(segment_paths(&fs).len() <= 4, "{:?}", segment_paths(&fs));
}

/// A durable authenticated table recovers its exact version and root: commits are logged,
/// checkpoints (explicit, automatic, or the one a reopen takes) make no version of their own,
/// and keys updated after the last commit are still committed by the next commit.
#[test]
fn durable_authenticated_tables_recover_their_exact_version_and_root() {
    let fs = new_fs();
    let mut model = Model::new();
    let (version, root) = {
        let session = open(&fs, SyncPolicy::Immediate);
        let t = session.table("state", small_auth()).unwrap();
        for round in 0..6u8 {
            for i in 0..30u8 {
                let key = vec![i, round % 3];
                t.insert(&key, [round, i]).unwrap();
                model.insert(key, vec![round, i]);
            }
            let c = t.commit().unwrap();
            assert_eq!(c.version, u64::from(round) + 1);
            if round % 2 == 1 {
                session.checkpoint().unwrap();
                assert_eq!(
                    t.auth_stats().unwrap().version,
                    c.version,
                    "a checkpoint committed"
                );
            }
        }
        // Updates after the last commit, then a checkpoint: saved uncommitted.
        t.insert("late", "x").unwrap();
        model.insert(b"late".to_vec(), b"x".to_vec());
        session.checkpoint().unwrap();
        t.insert("later", "y").unwrap();
        model.insert(b"later".to_vec(), b"y".to_vec());
        session.sync_log().unwrap();
        let stats = t.auth_stats().unwrap();
        assert_eq!(stats.version, 6);
        fs.cut_power();
        (stats.version, root_of(&model))
    };
    fs.recover(3);
    for _reopen in 0..3 {
        let session = open(&fs, SyncPolicy::Immediate);
        let t = session.table("state", small_auth()).unwrap();
        assert_eq!(t.auth_stats().unwrap().version, version);
        assert_eq!(contents(&t), model);
    }
    let session = open(&fs, SyncPolicy::Immediate);
    let t = session.table("state", small_auth()).unwrap();
    // The next commit covers the keys updated before and after the checkpoint.
    let c = t.commit().unwrap();
    assert_eq!(c.version, version + 1);
    assert_eq!(c.root, root);
}

/// A durable table may use a custom resolve function registered with the session: recovery
/// replays its upserts with it, and a session that does not register it refuses to open.
#[test]
fn durable_tables_use_registered_custom_resolve_functions() {
    let max = Resolve::custom("max-v1", |newer, older| newer.max(older).to_vec());
    let with_max = options(SyncPolicy::Immediate).resolve_functions(vec![max.clone()]);
    let config = small().resolve(max.clone());
    let fs = new_fs();
    {
        // Not registered: refused.
        let session = open(&fs, SyncPolicy::Immediate);
        assert!(matches!(
            session.table("m", config.clone()),
            Err(Error::InvalidConfig(_))
        ));
    }
    {
        let session = Session::open_with(Arc::new(fs.clone()), "/s", with_max.clone()).unwrap();
        let t = session.table("m", config.clone()).unwrap();
        for v in [3u8, 9, 4, 1] {
            t.upsert("k", [v]).unwrap();
        }
        session.checkpoint().unwrap();
        for v in [5u8, 12, 2] {
            t.upsert("k", [v]).unwrap();
        }
        session.sync_log().unwrap();
        assert_eq!(t.get("k").unwrap(), Some(vec![12]));
    }
    // Recovery: the checkpoint opened with the function, the upserts after it replayed.
    let session = Session::open_with(Arc::new(fs.clone()), "/s", with_max).unwrap();
    assert_eq!(
        session.table("m", config).unwrap().get("k").unwrap(),
        Some(vec![12])
    );
    drop(session);
    // Without it the session does not open (its table could not be recovered).
    assert!(matches!(
        Session::open_with(Arc::new(fs.clone()), "/s", options(SyncPolicy::Immediate)),
        Err(Error::InvalidConfig(_))
    ));
}

/// Writers that never wait for their records fill the log's buffer; under every policy the
/// buffer is then written (under `Immediate` the full buffer asks the syncer for a group), and
/// no writer blocks for ever. Found by `cairn-bench txn --no-wait`, which hung: a handle
/// dropped while its record's group was being written left the syncer's flush flag set with
/// nothing pending, and the next requests, seeing it set, did not wake the syncer.
#[test]
fn writers_that_never_wait_do_not_block_on_a_full_buffer() {
    for sync in [
        SyncPolicy::Immediate,
        SyncPolicy::Group {
            window: Duration::from_millis(1),
            bytes: 1 << 20,
        },
        SyncPolicy::Never,
    ] {
        let fs = new_fs();
        let small_buffer = options(sync).log(Some(
            LogOptions::default()
                .sync(sync)
                .buffer_bytes_max(4096)
                .segment_bytes(64 << 10),
        ));
        let session = Session::open_with(Arc::new(fs.clone()), "/s", small_buffer).unwrap();
        let t = session.table("t", small()).unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for i in 0..2_000u32 {
                t.write(&[(format!("k{i:05}").as_bytes(), Update::Insert(&[7u8; 100]))])
                    .unwrap();
            }
            done_tx.send(()).unwrap();
        });
        done_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("a writer blocked on a full buffer under {sync:?}"));
    }
}

/// A replay after a crash does the merge work of the levels whose merges finish within the
/// updates it repeats, and puts off the rest (spread over the updates after the open): it
/// performs well under half the merge steps those updates performed the first time, and the
/// table is right before and after the merges it put off have run.
#[test]
fn a_replay_puts_off_the_deep_levels_merge_steps() {
    let fs = new_fs();
    let opts = || {
        SessionOptions::default().salt(Some(5)).log(Some(
            LogOptions::default()
                .sync(SyncPolicy::Immediate)
                .checkpoint_bytes(u64::MAX),
        ))
    };
    let config = TableConfig::default()
        .write_buffer_entries(8)
        .merge_batch_size(1);
    let key = |i: u32| (i.wrapping_mul(2_654_435_761)).to_be_bytes().to_vec();
    let value = |i: u32| format!("value {i}").into_bytes();
    let mut model = Model::new();
    let replayed_first_time;
    {
        let session = Session::open_with(Arc::new(fs.clone()), "/s", opts()).unwrap();
        let table = session.create_durable_table("t", config.clone()).unwrap();
        for chunk in (0..12_000u32).collect::<Vec<_>>().chunks(100) {
            let batch: Vec<_> = chunk.iter().map(|&i| (key(i), value(i))).collect();
            table.inserts(&batch).unwrap();
            model.extend(batch);
        }
        session.checkpoint().unwrap();
        let before = table.stats().unwrap().merge_steps_total;
        // 160 updates after the checkpoint (five level-2 merges' worth): new keys, overwrites
        // and deletes.
        for i in 0..160u32 {
            let k = key(i * 29 % 13_000);
            if i % 5 == 4 {
                table.delete(&k).unwrap();
                model.remove(&k);
            } else {
                table.insert(&k, value(i + 50_000)).unwrap();
                model.insert(k, value(i + 50_000));
            }
        }
        replayed_first_time = table.stats().unwrap().merge_steps_total - before;
        assert!(table.stats().unwrap().levels >= 5);
        // An update returns once logged; it is durable once synced.
        session.sync_log().unwrap();
        fs.cut_power();
        drop(table);
        drop(session);
    }
    fs.recover(1);
    let session = Session::open_with(Arc::new(fs.clone()), "/s", opts()).unwrap();
    let table = session.durable_table("t").unwrap();
    let replay = table.stats().unwrap().merge_steps_total;
    assert!(
        replay * 2 < replayed_first_time,
        "the replay did {replay} merge steps; the same updates did {replayed_first_time}"
    );
    same(&contents(&table), &model);
    // The steps put off are done by the updates that follow, and every merge still finishes.
    for i in 0..20_000u32 {
        let k = key(100_000 + i);
        table.insert(&k, value(i)).unwrap();
        model.insert(k, value(i));
    }
    table.complete_merges().unwrap();
    same(&contents(&table), &model);
    drop(table);
    session.close();
    let session = Session::open_with(Arc::new(fs.clone()), "/s", opts()).unwrap();
    same(&contents(&session.durable_table("t").unwrap()), &model);
}

/// Asserts `found == want`, naming the first few differences rather than printing both.
fn same(found: &Model, want: &Model) {
    let keys: std::collections::BTreeSet<_> = found.keys().chain(want.keys()).collect();
    let diff: Vec<_> = keys
        .into_iter()
        .filter(|k| found.get(*k) != want.get(*k))
        .map(|k| {
            let show = |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(v).into_owned());
            format!(
                "{k:?}: found {:?}, want {:?}",
                show(found.get(k)),
                show(want.get(k))
            )
        })
        .collect();
    assert!(
        diff.is_empty(),
        "{} keys differ ({} found, {} wanted), first: {:?}",
        diff.len(),
        found.len(),
        want.len(),
        &diff[..diff.len().min(5)]
    );
}

/// An open whose fsync of its new segment's header fails leaves that segment behind, whole in
/// the page cache but not on disk (a later fsync proves nothing: the kernel may have dropped the
/// dirty pages). The next open must not chain its own segment onto it: should the power fail
/// before the old segments are removed, the log would have a middle segment with no header
/// and not recover (found by `power_loss_keeps_snapshots_whole` in tests/faults.rs). Checked at
/// every primitive of that next open.
/// Records whose fsync failed read back whole but may not be on disk (once an fsync of a file
/// failed, a later one proves nothing). The open that replays them must make them durable before
/// it builds on them: a power loss at any point of that open, or after a write the reopened
/// session acknowledged, leaves a log that opens, in a state that existed (the acknowledged
/// write was made on top of the replayed one, so it comes back only with it).
#[test]
fn records_whose_fsync_failed_are_made_durable_before_they_are_built_on() {
    let reopen =
        |fs: &MemFs| Session::open_with(Arc::new(fs.clone()), "/s", options(SyncPolicy::Never));
    // A log with a durable record, then one whose fsync fails at primitive `n`, if that
    // primitive is the fsync of a segment.
    let failed_write = |n: u64| -> Option<MemFs> {
        let fs = new_fs();
        let session = open(&fs, SyncPolicy::Never);
        let t = session.create_durable_table("t", small()).unwrap();
        t.insert("a", "1").unwrap();
        session.sync_log().unwrap();
        fs.fail_after(n);
        let failed = t
            .insert("b", "2")
            .and_then(|()| session.sync_log())
            .is_err();
        fs.fail_after(u64::MAX);
        drop(t);
        session.close();
        let injected = fs.take_injected();
        let segment_sync = injected.iter().any(|f| {
            f.op == cairn::fs::FsOp::SyncFile && f.path.extension().is_some_and(|e| e == "seg")
        });
        (failed && segment_sync && injected.len() == 1).then_some(fs)
    };
    let failed = || {
        (0..50)
            .find_map(failed_write)
            .expect("no primitive of the write is the fsync of its segment")
    };
    // Reads back whole before any power loss.
    let dry = failed();
    let start = dry.op_count();
    {
        let session = reopen(&dry).unwrap();
        let t = session.durable_table("t").unwrap();
        assert_eq!(t.get("b").unwrap().as_deref(), Some(&b"2"[..]));
        t.insert("c", "3").unwrap();
        session.sync_log().unwrap();
        drop(t);
        session.close();
    }
    let reopen_ops = dry.op_count() - start;
    assert!(reopen_ops > 4);
    for crash_at in 0..=reopen_ops {
        for seed in 0..4 {
            let fs = failed();
            fs.crash_after(crash_at);
            let acknowledged = reopen(&fs).is_ok_and(|session| {
                let written = session
                    .durable_table("t")
                    .is_some_and(|t| t.insert("c", "3").and_then(|()| session.sync_log()).is_ok());
                session.close();
                written
            });
            fs.cut_power();
            fs.recover(seed);
            let session =
                reopen(&fs).unwrap_or_else(|e| panic!("crash at {crash_at}, seed {seed}: {e}"));
            let t = session.durable_table("t").unwrap();
            let get = |k: &str| t.get(k).unwrap();
            assert_eq!(
                get("a").as_deref(),
                Some(&b"1"[..]),
                "crash at {crash_at}, seed {seed}"
            );
            if acknowledged {
                assert_eq!(
                    get("c").as_deref(),
                    Some(&b"3"[..]),
                    "crash at {crash_at}, seed {seed}"
                );
            }
            if get("c").is_some() {
                assert_eq!(
                    get("b").as_deref(),
                    Some(&b"2"[..]),
                    "crash at {crash_at}, seed {seed}"
                );
            }
        }
    }
}

#[test]
fn a_new_segment_whose_fsync_failed_is_not_built_on() {
    let reopen =
        |fs: &MemFs| Session::open_with(Arc::new(fs.clone()), "/s", options(SyncPolicy::Immediate));
    // A log with a durable record, then an open that fails at primitive `n`.
    let failed_open = |n: u64| -> (MemFs, Vec<cairn::fs::InjectedFault>) {
        let fs = new_fs();
        let session = open(&fs, SyncPolicy::Immediate);
        let t = session.create_durable_table("t", small()).unwrap();
        t.insert("k", "v").unwrap();
        session.sync_log().unwrap();
        drop(t);
        session.close();
        fs.fail_after(n);
        let _ = reopen(&fs).map(|s| s.close());
        fs.fail_after(u64::MAX);
        (fs.clone(), fs.take_injected())
    };
    // The primitive of that open that is the fsync of its new segment.
    let n = (0..200)
        .find(|&n| {
            failed_open(n).1.iter().any(|f| {
                f.op == cairn::fs::FsOp::SyncFile && f.path.extension().is_some_and(|e| e == "seg")
            })
        })
        .expect("no primitive of the open is the fsync of its new segment");
    let dry = failed_open(n).0;
    let start = dry.op_count();
    reopen(&dry).unwrap().close();
    let reopen_ops = dry.op_count() - start;
    assert!(reopen_ops > 4);
    for crash_at in 0..reopen_ops {
        for seed in 0..4 {
            let fs = failed_open(n).0;
            fs.crash_after(crash_at);
            let _ = reopen(&fs).map(|s| s.close());
            fs.cut_power();
            fs.recover(seed);
            let session =
                reopen(&fs).unwrap_or_else(|e| panic!("crash at {crash_at}, seed {seed}: {e}"));
            let t = session.durable_table("t").unwrap();
            assert_eq!(t.lookup("k").unwrap().value(), Some(&b"v"[..]));
        }
    }
}

/// `Durability::release` lets go of a handle without the fsync that dropping it starts under
/// `SyncPolicy::Immediate`; a later write's wait makes both durable with one fsync. The log
/// stays in order, so a released record is durable exactly when a later one is.
#[test]
fn a_released_handle_starts_no_fsync_and_a_later_wait_covers_it() {
    let fs = new_fs();
    let session = open(&fs, SyncPolicy::Immediate);
    let t = session.create_durable_table("t", small()).unwrap();
    let before = session.log_stats().unwrap().fsyncs;
    let first = t.write(&[("a", Update::Insert(b"1"))]).unwrap();
    // A clone kept to look at the record later (asking `is_durable` would request the fsync).
    let watch = first.clone();
    first.release();
    // A dropped handle would have had the syncer write and fsync the record by now.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(session.log_stats().unwrap().fsyncs, before);
    let second = t.write(&[("b", Update::Insert(b"2"))]).unwrap();
    second.wait().unwrap();
    assert_eq!(session.log_stats().unwrap().fsyncs, before + 1);
    assert!(watch.is_durable().unwrap());
    // Dropping a handle, by contrast, asks for the fsync.
    let third = t.write(&[("c", Update::Insert(b"3"))]).unwrap();
    let watch = third.clone();
    drop(third);
    let start = std::time::Instant::now();
    while !watch.is_durable().unwrap() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the dropped write never synced"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

//! Transactions: read-your-writes, a view consistent across tables, conflicts detected by
//! value, and a history checker under concurrency: every committed transaction's reads (keys
//! and prefix ranges, so phantoms too) and writes are consistent with the serial order of their
//! log positions, aborted transactions leave no trace, a restart recovers the same state, and a
//! power loss at any point (a property test) recovers a prefix of that order holding every
//! transaction reported durable.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cairn::fs::{FileSystem, MemFs};
use cairn::{
    Durability, Error, LogOptions, Resolve, Session, SessionOptions, SyncPolicy, Table, TableConfig,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn small() -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(8)
        .merge_batch_size(2)
}

fn options() -> SessionOptions {
    SessionOptions::default().salt(Some(9)).log(Some(
        LogOptions::default()
            .sync(SyncPolicy::Immediate)
            .segment_bytes(8192)
            .checkpoint_bytes(64 << 10),
    ))
}

fn new_fs() -> MemFs {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/s")).unwrap();
    fs.sync_dir(Path::new("/")).unwrap();
    fs
}

fn open(fs: &MemFs) -> Session {
    Session::open_with(Arc::new(fs.clone()), "/s", options()).unwrap()
}

fn contents(t: &Table) -> Model {
    t.range_lookup(..)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect()
}

fn u64_of(v: Option<Vec<u8>>) -> u64 {
    v.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
}

#[test]
fn a_transaction_reads_its_own_writes_over_a_view_of_its_start() {
    let fs = new_fs();
    let session = open(&fs);
    let plain = session.table("plain", small()).unwrap();
    let counts = session
        .table("counts", small().resolve(Resolve::AddU64Le))
        .unwrap();
    plain.insert("a", "1").unwrap();
    counts.insert("n", 5u64.to_le_bytes()).unwrap();

    let mut tx = session.transaction().unwrap();
    // Writes made after the start are not seen, in either table.
    plain.insert("a", "2").unwrap();
    counts.insert("m", 1u64.to_le_bytes()).unwrap();
    assert_eq!(tx.get(&plain, "a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(tx.get(&counts, "m").unwrap(), None);
    // Its own writes are.
    tx.insert(&plain, "b", "x").unwrap();
    assert_eq!(tx.get(&plain, "b").unwrap(), Some(b"x".to_vec()));
    tx.delete(&plain, "b").unwrap();
    assert!(!tx.contains_key(&plain, "b").unwrap());
    // Upserts resolve against the view.
    tx.upsert(&counts, "n", 2u64.to_le_bytes()).unwrap();
    tx.upsert(&counts, "n", 3u64.to_le_bytes()).unwrap();
    assert_eq!(u64_of(tx.get(&counts, "n").unwrap()), 10);
    assert_eq!(tx.reads(), 3);
    assert_eq!(tx.writes(), 4);
    // It read `a`, which changed: a conflict, and nothing written.
    match tx.commit() {
        Err(e @ Error::TransactionConflict { .. }) => assert!(e.is_retryable()),
        other => panic!("{other:?}"),
    }
    assert_eq!(u64_of(counts.get("n").unwrap()), 5);
    assert_eq!(plain.get("b").unwrap(), None);

    // Blind writes and upserts never conflict; a read-only transaction writes nothing.
    let mut tx = session.transaction().unwrap();
    tx.upsert(&counts, "n", 1u64.to_le_bytes()).unwrap();
    counts.upsert("n", 1u64.to_le_bytes()).unwrap();
    assert!(tx.commit().unwrap().is_some());
    assert_eq!(u64_of(counts.get("n").unwrap()), 7);
    let mut tx = session.transaction().unwrap();
    tx.get(&plain, "a").unwrap();
    plain.insert("a", "3").unwrap();
    assert!(tx.commit().unwrap().is_none());

    // Tables the transaction does not know are refused.
    let mut tx = session.transaction().unwrap();
    let later = session.table("later", small()).unwrap();
    assert!(matches!(tx.get(&later, "k"), Err(Error::InvalidConfig(_))));
    let scratch = session.new_table(small()).unwrap();
    assert!(matches!(
        tx.insert(&scratch, "k", "v"),
        Err(Error::NotDurable(_))
    ));
    // Bad input is refused at commit, nothing written.
    tx.insert(&plain, vec![0u8; cairn::KEY_SIZE_MAX + 1], "v")
        .unwrap();
    tx.insert(&plain, "fine", "v").unwrap();
    assert!(matches!(tx.commit(), Err(Error::KeyTooLarge { .. })));
    assert_eq!(plain.get("fine").unwrap(), None);
}

/// One committed transfer, as its thread saw it.
#[derive(Debug)]
struct Committed {
    position: u64,
    /// (table, key, value read).
    reads: Vec<(usize, Vec<u8>, Option<Vec<u8>>)>,
    /// (table, key, value written; `None`: deleted).
    writes: Vec<(usize, Vec<u8>, Option<Vec<u8>>)>,
    /// (table, prefix, every entry the prefix read saw).
    ranges: Vec<RangeSeen>,
}

/// (table, prefix, every entry a prefix read saw).
type RangeSeen = (usize, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);

/// Why a client stopped: an error other than a conflict, and the transaction whose commit
/// failed with it, if it was one (its record may have been logged).
#[derive(Debug)]
#[allow(dead_code)] // `error` is for the panic message
struct Stopped {
    error: Box<Error>,
    uncertain: Option<Box<Committed>>,
}

impl From<Error> for Stopped {
    fn from(error: Error) -> Stopped {
        Stopped {
            error: Box::new(error),
            uncertain: None,
        }
    }
}

/// A client: `rounds` transactions drawn from `seed` (transfers between accounts of the two
/// tables, closings and openings of accounts, audits reading every account of a table by
/// prefix), each committed one recorded in `history` with its durability notice. Returns the
/// first error other than a conflict (after a simulated crash, say).
fn client(
    session: &Session,
    tables: &[Table; 2],
    thread: u64,
    seed: u64,
    rounds: usize,
    history: &Mutex<Vec<(Committed, Durability)>>,
) -> Result<(), Stopped> {
    let mut rng = seed.wrapping_mul(1000).wrapping_add(thread + 1) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..rounds {
        let kind = next() % 8;
        let mut tx = session.transaction()?;
        let mut reads = Vec::new();
        let mut ranges = Vec::new();
        let mut writes = Vec::new();
        if kind == 0 {
            // Audit: a prefix read of one table's accounts (so every account
            // opened, closed or changed meanwhile is a conflict), its total
            // written to a key outside the prefix.
            let t = (next() % 2) as usize;
            let seen = tx.prefix(&tables[t], b"acct")?;
            let total: u64 = seen.iter().map(|(_, v)| u64_of(Some(v.clone()))).sum();
            let key = format!("audit{thread}").into_bytes();
            ranges.push((t, b"acct".to_vec(), seen));
            writes.push((t, key, Some(total.to_le_bytes().to_vec())));
        } else if kind == 1 {
            // Close an account: its whole balance moves to another table's
            // account of the same name, and the key is deleted; or open it
            // again (a phantom for audits), at 0.
            let from = (next() % 2) as usize;
            let a = format!("acct{:02}", next() % ACCOUNTS).into_bytes();
            let have = tx.get(&tables[from], &a)?;
            reads.push((from, a.clone(), have.clone()));
            match have {
                Some(have) => {
                    let to = 1 - from;
                    let there = tx.get(&tables[to], &a)?;
                    reads.push((to, a.clone(), there.clone()));
                    let sum = u64_of(Some(have)) + u64_of(there);
                    writes.push((from, a.clone(), None));
                    writes.push((to, a.clone(), Some(sum.to_le_bytes().to_vec())));
                }
                None => writes.push((from, a, Some(0u64.to_le_bytes().to_vec()))),
            }
        } else {
            let from = (next() % 2) as usize;
            let to = (next() % 2) as usize;
            let a = format!("acct{:02}", next() % ACCOUNTS).into_bytes();
            let b = format!("acct{:02}", next() % ACCOUNTS).into_bytes();
            let amount = next() % 300;
            let have = tx.get(&tables[from], &a)?;
            reads.push((from, a.clone(), have.clone()));
            if have.is_none() || u64_of(have.clone()) < amount || (from, &a) == (to, &b) {
                continue; // dropped: no trace
            }
            let have = u64_of(have);
            let there = tx.get(&tables[to], &b)?;
            reads.push((to, b.clone(), there.clone()));
            let there = u64_of(there);
            writes.push((
                from,
                a.clone(),
                Some((have - amount).to_le_bytes().to_vec()),
            ));
            writes.push((to, b.clone(), Some((there + amount).to_le_bytes().to_vec())));
        }
        for (t, k, v) in &writes {
            match v {
                Some(v) => tx.insert(&tables[*t], k, v)?,
                None => tx.delete(&tables[*t], k)?,
            }
        }
        match tx.commit() {
            Ok(Some(d)) => history.lock().unwrap().push((
                Committed {
                    position: d.position(),
                    reads,
                    writes,
                    ranges,
                },
                d,
            )),
            Ok(None) => unreachable!("it wrote"),
            Err(Error::TransactionConflict { .. }) => {}
            // Logged perhaps (an I/O error applying it breaks a table after the record was
            // appended): its outcome is unknown.
            Err(error) => {
                return Err(Stopped {
                    error: Box::new(error),
                    uncertain: Some(Box::new(Committed {
                        position: u64::MAX,
                        reads,
                        writes,
                        ranges,
                    })),
                })
            }
        }
    }
    Ok(())
}

const ACCOUNTS: u64 = 12;

/// The two tables of the bank (`checking`, `savings`), every account at `START` in both, and
/// their model.
fn bank(session: &Session) -> ([Table; 2], [Model; 2]) {
    let tables = [
        session.table("checking", small()).unwrap(),
        session.table("savings", small()).unwrap(),
    ];
    let mut initial = [Model::new(), Model::new()];
    for (t, model) in tables.iter().zip(&mut initial) {
        for a in 0..ACCOUNTS {
            let key = format!("acct{a:02}").into_bytes();
            t.insert(&key, START.to_le_bytes()).unwrap();
            model.insert(key, START.to_le_bytes().to_vec());
        }
    }
    (tables, initial)
}
const START: u64 = 1_000;

/// Threads move money between accounts of two tables (checking and savings, SmallBank's)
/// in transactions; every committed transaction's reads must equal the state left by the
/// committed transactions before it in log order, and the final tables the state after all of
/// them (so an aborted one wrote nothing). Money is conserved. Then a restart and a power loss
/// recover the same tables.
#[test]
fn concurrent_transactions_are_serializable_in_log_order() {
    for seed in 0..6u64 {
        let fs = new_fs();
        let session = open(&fs);
        let (tables, initial) = bank(&session);
        let history = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let (session, tables, history) = (&session, &tables, &history);
                scope.spawn(move || {
                    client(session, tables, thread, seed, 150, history).unwrap();
                });
            }
        });
        let mut history: Vec<Committed> = history
            .into_inner()
            .unwrap()
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        history.sort_by_key(|c| c.position);
        let mut model = initial.clone();
        for c in &history {
            for (t, key, value) in &c.reads {
                assert_eq!(
                    model[*t].get(key),
                    value.as_ref(),
                    "seed {seed}: the transaction at {} read a value no serial order gives",
                    c.position
                );
            }
            for (t, prefix, seen) in &c.ranges {
                let want: Vec<(Vec<u8>, Vec<u8>)> = model[*t]
                    .iter()
                    .filter(|(k, _)| k.starts_with(prefix))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(
                    seen, &want,
                    "seed {seed}: the transaction at {} read a range no serial order gives",
                    c.position
                );
            }
            for (t, key, value) in &c.writes {
                match value {
                    Some(value) => model[*t].insert(key.clone(), value.clone()),
                    None => model[*t].remove(key),
                };
            }
        }
        let audits = history.iter().filter(|c| !c.ranges.is_empty()).count();
        let closes = history
            .iter()
            .filter(|c| c.writes.iter().any(|(_, _, v)| v.is_none()))
            .count();
        assert!(
            audits > 5 && closes > 5,
            "seed {seed}: {audits} audits and {closes} closings committed"
        );
        let found = [contents(&tables[0]), contents(&tables[1])];
        assert_eq!(found, model, "seed {seed}");
        let total: u64 = model
            .iter()
            .flat_map(|m| m.iter())
            .filter(|(k, _)| k.starts_with(b"acct"))
            .map(|(_, v)| u64_of(Some(v.clone())))
            .sum();
        assert_eq!(total, 2 * ACCOUNTS * START, "money conserved");
        assert!(
            history.len() > 100,
            "seed {seed}: {} committed",
            history.len()
        );
        drop(tables);
        session.sync_log().unwrap();
        fs.cut_power();
        drop(session);
        fs.recover(seed);
        let session = open(&fs);
        let recovered = [
            contents(&session.table("checking", small()).unwrap()),
            contents(&session.table("savings", small()).unwrap()),
        ];
        assert_eq!(recovered, model, "seed {seed}: after a power loss");
    }
}

#[test]
fn transact_retries_conflicts_until_it_commits() {
    let fs = new_fs();
    let session = open(&fs);
    let counter = session.table("counter", small()).unwrap();
    counter.insert("n", 0u64.to_le_bytes()).unwrap();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            let (session, counter) = (&session, &counter);
            scope.spawn(move || {
                for _ in 0..100 {
                    session
                        .transact(|tx| {
                            let n = u64_of(tx.get(counter, "n")?);
                            tx.insert(counter, "n", (n + 1).to_le_bytes())
                        })
                        .unwrap();
                }
            });
        }
    });
    // Every increment read the value the one before it wrote: none lost.
    assert_eq!(u64_of(counter.get("n").unwrap()), 400);
}

/// A range read sees the view with the transaction's own writes laid over it, and joins the
/// read set: a key inserted into the range since (a phantom), deleted from it or changed in it
/// fails the commit; a change outside it does not.
#[test]
fn range_reads_see_own_writes_and_catch_phantoms() {
    let fs = new_fs();
    let session = open(&fs);
    let t = session
        .table("t", small().resolve(Resolve::AddU64Le))
        .unwrap();
    for k in [b"a1", b"a3", b"b1"] {
        t.insert(k, 10u64.to_le_bytes()).unwrap();
    }
    let key = |s: &str| s.as_bytes().to_vec();
    let v = |n: u64| n.to_le_bytes().to_vec();

    // Own writes: an insert, a delete and an upsert inside the range, one write outside.
    let mut tx = session.transaction().unwrap();
    tx.insert(&t, "a2", 5u64.to_le_bytes()).unwrap();
    tx.delete(&t, "a1").unwrap();
    tx.upsert(&t, "a3", 1u64.to_le_bytes()).unwrap();
    tx.insert(&t, "c", 7u64.to_le_bytes()).unwrap();
    assert_eq!(
        tx.prefix(&t, "a").unwrap(),
        vec![(key("a2"), v(5)), (key("a3"), v(11))]
    );
    assert_eq!(tx.range(&t, "b".."a").unwrap(), vec![]); // inverted: empty
    tx.commit().unwrap();

    // Each kind of change inside the range read fails the commit; outside, it commits.
    type Change = fn(&Table);
    let changes: [(&str, Change, bool); 4] = [
        ("phantom", |t| t.insert("a0", [1]).unwrap(), true),
        ("deleted", |t| t.delete("a2").unwrap(), true),
        ("changed", |t| t.insert("a3", [9]).unwrap(), true),
        ("outside", |t| t.insert("b2", [1]).unwrap(), false),
    ];
    for (what, change, conflicts) in changes {
        let before = contents(&t);
        let mut tx = session.transaction().unwrap();
        let seen = tx.prefix(&t, "a").unwrap();
        tx.insert(&t, "count", (seen.len() as u64).to_le_bytes())
            .unwrap();
        change(&t);
        let changed = contents(&t);
        match tx.commit() {
            Err(Error::TransactionConflict { table, .. }) => {
                assert!(conflicts, "{what}: a change outside the range conflicted");
                assert_eq!(table, "t");
                assert_eq!(contents(&t), changed, "{what}: the aborted commit wrote");
            }
            Ok(_) => {
                assert!(!conflicts, "{what}: the change was not caught");
                assert_ne!(contents(&t), before);
            }
            Err(e) => panic!("{what}: {e:?}"),
        }
        // Restore the range for the next case.
        for (k, value) in before.iter().filter(|(k, _)| k.starts_with(b"a")) {
            t.insert(k, value).unwrap();
        }
        for k in changed
            .keys()
            .filter(|k| k.starts_with(b"a") && !before.contains_key(*k))
        {
            t.delete(k).unwrap();
        }
    }
}

/// Whether every read of `c` (keys and prefix ranges) gives what `models` hold.
fn reads_hold(models: &[Model; 2], c: &Committed) -> bool {
    c.reads
        .iter()
        .all(|(t, key, value)| models[*t].get(key) == value.as_ref())
        && c.ranges.iter().all(|(t, prefix, seen)| {
            let want: Vec<(Vec<u8>, Vec<u8>)> = models[*t]
                .iter()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            *seen == want
        })
}

/// Applies the writes of `c` to `models`.
fn apply_writes(models: &mut [Model; 2], c: &Committed) {
    for (t, key, value) in &c.writes {
        match value {
            Some(value) => models[*t].insert(key.clone(), value.clone()),
            None => models[*t].remove(key),
        };
    }
}

fn options_with(sync: SyncPolicy) -> SessionOptions {
    SessionOptions::default().salt(Some(9)).log(Some(
        LogOptions::default()
            .sync(sync)
            .segment_bytes(8192)
            .checkpoint_bytes(64 << 10),
    ))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// The power goes at any point while clients run transactions concurrently. The recovered
    /// tables are the model after a prefix of the committed transactions in log order (so no
    /// transaction is partial and no aborted one left a trace), the prefix holds every
    /// transaction reported durable before the power went (none acknowledged is lost), and
    /// every committed transaction read what the ones before it in that order left.
    #[test]
    fn a_power_loss_among_concurrent_transactions_keeps_a_prefix_with_every_durable_one(
        seed in proptest::prelude::any::<u64>(),
        cut in 0u64..2_500,
        group in proptest::prelude::any::<bool>(),
    ) {
        let sync = if group {
            SyncPolicy::Group { window: std::time::Duration::from_micros(300), bytes: 512 }
        } else {
            SyncPolicy::Immediate
        };
        let fs = new_fs();
        let session = Session::open_with(Arc::new(fs.clone()), "/s", options_with(sync)).unwrap();
        let (tables, initial) = bank(&session);
        session.sync_log().unwrap();
        let start = fs.op_count();
        fs.crash_after(start + cut);
        let history = Mutex::new(Vec::new());
        let uncertain: Vec<Committed> = std::thread::scope(|scope| {
            let clients: Vec<_> = (0..3u64)
                .map(|thread| {
                    let (session, tables, history) = (&session, &tables, &history);
                    // An error is the crash: the client stops.
                    scope.spawn(move || client(session, tables, thread, seed, 60, history))
                })
                .collect();
            clients
                .into_iter()
                .filter_map(|c| c.join().unwrap().err().and_then(|s| s.uncertain).map(|u| *u))
                .collect()
        });
        std::thread::sleep(std::time::Duration::from_millis(1));
        fs.cut_power();
        let mut history = history.into_inner().unwrap();
        history.sort_by_key(|(c, _)| c.position);
        let durable = history
            .iter()
            .rposition(|(_, d)| matches!(d.is_durable(), Ok(true)))
            .map_or(0, |i| i + 1);
        drop(tables);
        drop(session);
        fs.recover(seed);
        let session = Session::open_with(Arc::new(fs.clone()), "/s", options_with(sync)).unwrap();
        let found = [
            contents(&session.table("checking", small()).unwrap()),
            contents(&session.table("savings", small()).unwrap()),
        ];
        // Every serial order of the committed transactions in log order, with each uncertain one
        // (whose commit failed after its record may have been logged) left out or put anywhere:
        // the states (models and the uncertain ones applied) consistent with every read so far.
        let mut states: Vec<([Model; 2], u32)> = vec![(initial, 0)];
        let mut matched = Vec::new();
        for i in 0..=history.len() {
            // The uncertain ones, each at most once, at this point.
            let mut k = 0;
            while k < states.len() {
                for (u, txn) in uncertain.iter().enumerate() {
                    let (models, mask) = &states[k];
                    if mask & (1 << u) == 0 && reads_hold(models, txn) {
                        let mut models = models.clone();
                        apply_writes(&mut models, txn);
                        let next = (models, mask | (1 << u));
                        if !states.contains(&next) {
                            states.push(next);
                        }
                    }
                }
                k += 1;
            }
            if i >= durable && states.iter().any(|(m, _)| *m == found) {
                matched.push(i);
            }
            let Some((c, _)) = history.get(i) else { break };
            states.retain(|(models, _)| reads_hold(models, c));
            proptest::prop_assert!(
                !states.is_empty(),
                "the transaction at {} read what no serial order gives",
                c.position
            );
            for (models, _) in &mut states {
                apply_writes(models, c);
            }
        }
        proptest::prop_assert!(
            !matched.is_empty(),
            "the recovered tables are no prefix of the {} committed transactions holding the {} \
             durable ({} uncertain)",
            history.len(),
            durable,
            uncertain.len()
        );
        let prefixes = matched;
        if std::env::var_os("CAIRN_TXN_STATS").is_some() {
            eprintln!("STAT committed {} durable {durable} prefixes {prefixes:?} ops {}", history.len(), fs.op_count() - start);
        }
    }
}

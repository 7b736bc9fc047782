//! Complete range proofs over an ordered table, against a model: after random inserts,
//! deletes, transactions and reopenings, every range answer is exactly the model's range and
//! its proof verifies; an answer with a key left out, a key added, a value changed or the keys
//! around the range moved is refused; point reads of the ordered table verify through their
//! links; the audit finds the chain whole.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{LogOptions, SessionOptions, SyncPolicy, TableConfig};
use cairn_ledger::{AuditOptions, Ledger, LedgerBatch, LedgerConfig};
use cairn_proof::{verify_range, verify_receipt, Claim, Link, RangeAnswer, TableClaims};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn cases(default: u32, ci: u32) -> u32 {
    if std::env::var("CI").is_ok() {
        ci
    } else {
        default
    }
}

fn open(fs: &MemFs) -> Ledger {
    Ledger::open_with(
        Arc::new(fs.clone()),
        "/l",
        LedgerConfig::new(["ordered", "plain"])
            .ordered(["ordered"])
            .table(
                TableConfig::default()
                    .write_buffer_entries(4)
                    .merge_batch_size(2),
            ),
        SessionOptions::default()
            .salt(Some(4))
            .log(Some(LogOptions::default().sync(SyncPolicy::Immediate))),
    )
    .unwrap()
}

fn key(k: u8) -> Vec<u8> {
    vec![b'k', b'0' + k / 10, b'0' + k % 10]
}

#[derive(Clone, Debug)]
enum Step {
    Batch(Vec<(u8, Option<u8>)>),
    /// Move the value of one key to another (delete the first), in a transaction.
    Move(u8, u8),
    Reopen,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => proptest::collection::vec((0..30u8, proptest::option::of(any::<u8>())), 1..8)
            .prop_map(Step::Batch),
        2 => (0..30u8, 0..30u8).prop_map(|(a, b)| Step::Move(a, b)),
        1 => Just(Step::Reopen),
    ]
}

/// Every way of changing an honest answer that a client must refuse.
fn forgeries(answer: &RangeAnswer, model: &Model) -> Vec<(&'static str, RangeAnswer)> {
    let mut out = Vec::new();
    if !answer.entries.is_empty() {
        for i in 0..answer.entries.len() {
            let mut a = answer.clone();
            a.entries.remove(i);
            out.push(("an entry left out", a));
            let mut a = answer.clone();
            a.entries[i].1.push(b'!');
            out.push(("a value changed", a));
        }
        let mut a = answer.clone();
        a.entries.clear();
        a.after = answer
            .entries
            .last()
            .map(|_| answer.after.clone())
            .unwrap_or(None);
        out.push(("every entry left out", a));
    }
    // A key of the range the table does not hold, added.
    for k in 0..32u8 {
        let k = key(k);
        if k >= answer.lo && k <= answer.hi && !model.contains_key(&k) {
            let mut a = answer.clone();
            let at = a.entries.partition_point(|(e, _)| *e < k);
            a.entries.insert(at, (k, b"made up".to_vec()));
            out.push(("an entry added", a));
            break;
        }
    }
    // The first entry shown as the key before the range (its link is genuine): every key of the
    // range before it would then be left out.
    if !answer.entries.is_empty() {
        let mut a = answer.clone();
        let (k, v) = a.entries.remove(0);
        a.before = k;
        a.before_value = Some(v);
        out.push(("the key before moved into the range", a));
    }
    // A true answer for a narrower range.
    if answer.lo < answer.hi {
        let mut a = answer.clone();
        a.hi = answer.lo.clone();
        a.entries.retain(|(k, _)| *k <= a.hi);
        out.push(("an answer for a narrower range", a));
    }
    // The key after the range claimed absent, or the key before the range moved.
    if answer.after.is_some() {
        let mut a = answer.clone();
        a.after = None;
        out.push(("the key after dropped", a));
    }
    if !answer.before.is_empty() {
        let mut a = answer.clone();
        a.before = Vec::new();
        a.before_value = None;
        out.push(("the head claimed before the range", a));
    }
    out
}

fn check_range(ledger: &Ledger, model: &Model, lo: u8, hi: u8) {
    let (lo, hi) = (key(lo), key(hi));
    let read = ledger.read_range("ordered", &lo, &hi).unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .range(lo.clone()..=hi.clone())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(read.answer.entries, want, "[{lo:?}, {hi:?}]");
    verify_range(
        &read.receipt,
        "ordered",
        &lo,
        &hi,
        &read.answer,
        &read.digest,
    )
    .unwrap_or_else(|e| panic!("[{lo:?}, {hi:?}]: {e}: {:?}", read.answer));
    let encoded = read.answer.encode();
    assert_eq!(RangeAnswer::decode(&encoded).unwrap(), read.answer);
    for (what, forged) in forgeries(&read.answer, model) {
        assert!(
            verify_range(&read.receipt, "ordered", &lo, &hi, &forged, &read.digest).is_err(),
            "{what} was accepted: {forged:?}"
        );
    }
}

fn check_points(ledger: &Ledger, model: &Model, keys: &[Vec<u8>]) {
    let read = ledger.read(&[("ordered", keys)]).unwrap();
    let claims: Vec<Claim<'_>> = keys
        .iter()
        .zip(&read.proven[0])
        .map(|(k, stored)| match stored {
            Some(bytes) => Claim::present(k, bytes),
            None => Claim::absent(k),
        })
        .collect();
    verify_receipt(
        &read.receipt,
        &[TableClaims {
            table: "ordered",
            claims: &claims,
        }],
        &read.digest,
    )
    .unwrap();
    for ((k, value), stored) in keys.iter().zip(&read.values[0]).zip(&read.proven[0]) {
        assert_eq!(value.as_ref(), model.get(k));
        if let Some(bytes) = stored {
            match Link::decode(bytes).unwrap() {
                Link::Entry { value: v, next } => {
                    assert_eq!(Some(&v), value.as_ref());
                    let expected = model
                        .range((
                            std::ops::Bound::Excluded(k.clone()),
                            std::ops::Bound::Unbounded,
                        ))
                        .next()
                        .map(|(n, _)| n.clone());
                    assert_eq!(next, expected);
                }
                Link::Head { .. } => panic!("a user key holds the head"),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(48, 500),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn range_answers_are_complete_and_forgeries_refused(
        steps in proptest::collection::vec(step(), 1..16),
        ranges in proptest::collection::vec((0..32u8, 0..32u8), 4),
    ) {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/l")).unwrap();
        let mut ledger = open(&fs);
        let mut model = Model::new();
        for step in &steps {
            match step {
                Step::Batch(writes) => {
                    let mut batch = LedgerBatch::new();
                    for &(k, v) in writes {
                        match v {
                            Some(v) => {
                                batch.insert("ordered", key(k), [v]);
                                model.insert(key(k), vec![v]);
                            }
                            None => {
                                batch.delete("ordered", key(k));
                                model.remove(&key(k));
                            }
                        }
                    }
                    batch.insert("plain", "touched", "yes");
                    ledger.write(&batch).unwrap();
                }
                Step::Move(a, b) => {
                    let (a, b) = (key(*a), key(*b));
                    ledger.transact(b"move", |tx| {
                        if let Some(v) = tx.get("ordered", &a)? {
                            tx.delete("ordered", &a)?;
                            tx.insert("ordered", &b, v)?;
                        }
                        Ok(())
                    }).unwrap();
                    if a != b {
                        if let Some(v) = model.remove(&a) {
                            model.insert(b, v);
                        }
                    }
                }
                Step::Reopen => {
                    ledger.close();
                    drop(ledger);
                    ledger = open(&fs);
                }
            }
            if ledger.version() == 0 {
                continue;
            }
            for &(lo, hi) in &ranges {
                if lo <= hi {
                    check_range(&ledger, &model, lo, hi);
                }
            }
            let keys: Vec<Vec<u8>> = ranges.iter().map(|&(k, _)| key(k)).collect();
            check_points(&ledger, &model, &keys);
        }
        let report = ledger.audit(&AuditOptions::default(), &mut |_| {}).unwrap();
        prop_assert!(report.is_clean(), "{:?}", report.problems);
    }
}

/// Keys of an ordered table are never empty, and a plain table has no range proofs.
#[test]
fn ordered_tables_refuse_the_empty_key_and_plain_tables_ranges() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/l")).unwrap();
    let ledger = open(&fs);
    assert!(ledger
        .write(LedgerBatch::new().insert("ordered", "", "x"))
        .is_err());
    ledger
        .write(LedgerBatch::new().insert("ordered", "a", "x"))
        .unwrap();
    assert!(ledger.read_range("plain", "a", "b").is_err());
    assert!(ledger.read_range("ordered", "b", "a").is_err());
    // An ordered table emptied again has no head, and an answer shows it empty.
    ledger
        .write(LedgerBatch::new().delete("ordered", "a"))
        .unwrap();
    let read = ledger.read_range("ordered", "a", "z").unwrap();
    assert!(read.answer.entries.is_empty() && read.answer.after.is_none());
    verify_range(
        &read.receipt,
        "ordered",
        b"a",
        b"z",
        &read.answer,
        &read.digest,
    )
    .unwrap();
}

/// Deferred range reads: `range_values` promises the entries at a version, a later
/// `read_range_at` proves that version's range against the newest digest (after the range
/// changed), and the stale answer is refused as a fresh one; a promise with an entry left out
/// does not match the proved answer.
#[test]
fn a_promised_range_is_proved_at_its_version_later() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(
        dir.path(),
        LedgerConfig::new(["ordered"])
            .ordered(["ordered"])
            .history(4),
    )
    .unwrap();
    let mut batch = LedgerBatch::new();
    for k in [b"b", b"d", b"f", b"h"] {
        batch.insert("ordered", k, k);
    }
    ledger.write(&batch).unwrap();
    let (version, promised) = ledger.range_values("ordered", b"c", b"g").unwrap();
    assert_eq!(version, 1);
    assert_eq!(
        promised.entries,
        [
            (b"d".to_vec(), b"d".to_vec()),
            (b"f".to_vec(), b"f".to_vec())
        ]
    );
    // The range changes after the promise.
    ledger
        .write(LedgerBatch::new().insert("ordered", b"e", b"e"))
        .unwrap();
    let proved = ledger
        .read_range_at(version, "ordered", b"c", b"g")
        .unwrap();
    assert_eq!(proved.answer, promised);
    let digest = ledger.digest();
    assert_eq!(digest.size, 2);
    cairn_proof::verify_range_at(&proved.receipt, "ordered", b"c", b"g", &promised, &digest)
        .unwrap();
    assert!(verify_range(&proved.receipt, "ordered", b"c", b"g", &promised, &digest).is_err());
    let mut short = promised.clone();
    short.entries.pop();
    assert!(
        cairn_proof::verify_range_at(&proved.receipt, "ordered", b"c", b"g", &short, &digest)
            .is_err()
    );
    // Newest, through both calls.
    let now = ledger.read_range_at(2, "ordered", b"c", b"g").unwrap();
    assert_eq!(now.answer.entries.len(), 3);
    verify_range(&now.receipt, "ordered", b"c", b"g", &now.answer, &digest).unwrap();
    assert!(ledger.read_range_at(3, "ordered", b"c", b"g").is_err());
    assert!(ledger.range_values("nope", b"c", b"g").is_err());
}

#[test]
fn range_max_bounds_what_a_range_read_answers() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(
        dir.path(),
        LedgerConfig::new(["ordered"])
            .ordered(["ordered"])
            .range_max(3),
    )
    .unwrap();
    let mut batch = LedgerBatch::new();
    for k in 1..=5u8 {
        batch.insert("ordered", key(k), [k]);
    }
    ledger.write(&batch).unwrap();
    // Three entries: answered and proved; four: refused, by every kind of range read.
    let read = ledger.read_range("ordered", key(1), key(3)).unwrap();
    assert_eq!(read.answer.entries.len(), 3);
    verify_range(
        &read.receipt,
        "ordered",
        &key(1),
        &key(3),
        &read.answer,
        &read.digest,
    )
    .unwrap();
    let too_many = |r: cairn_ledger::Result<()>| {
        assert!(
            matches!(r, Err(cairn_ledger::Error::RangeTooLarge { max: 3 })),
            "{r:?}"
        )
    };
    too_many(ledger.read_range("ordered", key(1), key(4)).map(drop));
    too_many(ledger.read_range_at(1, "ordered", key(0), key(9)).map(drop));
    too_many(ledger.range_values("ordered", key(2), key(5)).map(drop));
}

//! The ledger under injected I/O errors (the simulated file system's noisy faults: failed and
//! torn writes, failed reads, syncs and renames): every operation either succeeds or returns an
//! error; a read that succeeds verifies; after a power cut and recovery, the ledger opens at a
//! version between the newest reported durable and the newest attempted, with that version's
//! contents, the digests it had, and a clean audit.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cairn::fs::{FaultPlan, FileSystem, MemFs};
use cairn::{LogOptions, SessionOptions, SyncPolicy, TableConfig};
use cairn_ledger::{AuditOptions, Ledger, LedgerBatch, LedgerConfig};
use cairn_proof::{verify_range, verify_receipt, Claim, Digest, TableClaims};
use proptest::prelude::*;

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn open(fs: &MemFs) -> cairn_ledger::Result<Ledger> {
    Ledger::open_with(
        Arc::new(fs.clone()),
        "/l",
        LedgerConfig::new(["plain", "sorted"])
            .ordered(["sorted"])
            .history(2)
            .table(
                TableConfig::default()
                    .write_buffer_entries(4)
                    .merge_batch_size(2),
            ),
        SessionOptions::default().salt(Some(6)).log(Some(
            LogOptions::default()
                .sync(SyncPolicy::Group {
                    window: Duration::from_micros(100),
                    bytes: 256,
                })
                .segment_bytes(4096),
        )),
    )
}

/// Keys are `(table, key)`: table 0 plain, 1 ordered.
fn name(t: u8) -> &'static str {
    ["plain", "sorted"][usize::from(t)]
}

fn model_key(t: u8, k: u8) -> Vec<u8> {
    vec![t, k]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if std::env::var("CI").is_ok() { 500 } else { 48 },
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn faults_leave_a_verifiable_prefix(
        batches in proptest::collection::vec(
            proptest::collection::vec((0..2u8, 0..10u8, proptest::option::of(any::<u8>())), 1..5),
            1..14,
        ),
        seed in any::<u64>(),
        percent in 1..12u32,
        recover_seed in any::<u64>(),
    ) {
        run(&batches, seed, percent, recover_seed)?;
    }
}

type Batch = Vec<(u8, u8, Option<u8>)>;

fn run(batches: &[Batch], seed: u64, percent: u32, recover_seed: u64) -> Result<(), TestCaseError> {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/l")).unwrap();
    // The ledger's directory entry is the caller's to make durable.
    fs.sync_dir(Path::new("/")).unwrap();
    let ledger = open(&fs).unwrap();
    // versions[v]: the contents after version v (keys `model_key`).
    let mut versions: Vec<State> = vec![State::new()];
    let mut digests: Vec<Digest> = vec![Digest::EMPTY];
    let mut notices = Vec::new();
    // The contents of a version attempted when an error broke the ledger.
    let mut attempted: Option<State> = None;
    fs.set_fault_plan(Some(FaultPlan::noisy(seed, f64::from(percent) / 100.0)));
    for updates in batches {
        let mut next = versions.last().unwrap().clone();
        let mut batch = LedgerBatch::new();
        for &(t, k, v) in updates {
            match v {
                Some(v) => {
                    batch.insert(name(t), [b'k', k], [v]);
                    next.insert(model_key(t, k), vec![v]);
                }
                None => {
                    batch.delete(name(t), [b'k', k]);
                    next.remove(&model_key(t, k));
                }
            }
        }
        match ledger.write(&batch) {
            Ok(Some(c)) => {
                // An error that left the ledger unbroken logged nothing: the version
                // numbers go on from the last success.
                attempted = None;
                prop_assert_eq!(c.version, versions.len() as u64);
                versions.push(next);
                digests.push(c.digest);
                notices.push(c.durability);
            }
            Ok(None) => unreachable!("batches are not empty"),
            Err(cairn_ledger::Error::Broken(_)) => {}
            Err(_) => {
                // Nothing happened, or (if it broke the ledger: every later write is then
                // `Broken`) this version did, and recovery finishes it. An earlier error
                // that did not break the ledger did nothing.
                attempted = Some(next);
            }
        }
        // A read that succeeds proves what the ledger holds.
        if let Ok(read) = ledger.read(&[("plain", &[b"k\x01".to_vec()][..])]) {
            let value = read.values[0][0].clone();
            let claim = match &value {
                Some(v) => Claim::present(b"k\x01", v),
                None => Claim::absent(b"k\x01"),
            };
            let claims = [claim];
            verify_receipt(
                &read.receipt,
                &[TableClaims {
                    table: "plain",
                    claims: &claims,
                }],
                &read.digest,
            )
            .unwrap();
        }
        if let Ok(read) = ledger.read_range("sorted", [b'k', 2], [b'k', 7]) {
            verify_range(
                &read.receipt,
                "sorted",
                &[b'k', 2],
                &[b'k', 7],
                &read.answer,
                &read.digest,
            )
            .unwrap();
        }
    }
    fs.set_fault_plan(None);
    std::thread::sleep(Duration::from_millis(1));
    fs.cut_power();
    let durable = notices
        .iter()
        .enumerate()
        .filter(|(_, d)| matches!(d.is_durable(), Ok(true)))
        .map(|(i, _)| i as u64 + 1)
        .max()
        .unwrap_or(0);
    drop(ledger);
    fs.recover(recover_seed);
    let ledger = open(&fs).unwrap();
    let r = ledger.version();
    let newest_attempted = versions.len() as u64 - 1 + u64::from(attempted.is_some());
    prop_assert!(
        durable <= r && r <= newest_attempted,
        "recovered {} outside [{}, {}]",
        r,
        durable,
        newest_attempted
    );
    let expected = if r < versions.len() as u64 {
        versions[r as usize].clone()
    } else {
        attempted.clone().unwrap()
    };
    let mut found = State::new();
    for t in 0..2u8 {
        for k in 0..10u8 {
            if let Some(v) = ledger.get(name(t), [b'k', k]).unwrap() {
                found.insert(model_key(t, k), v);
            }
        }
    }
    prop_assert_eq!(found, expected);
    for (v, digest) in digests.iter().enumerate().take(r as usize + 1) {
        prop_assert_eq!(ledger.digest_at(v as u64).unwrap(), *digest);
    }
    let report = ledger
        .audit(
            &AuditOptions::default()
                .digests(digests[..=r.min(digests.len() as u64 - 1) as usize].to_vec()),
            &mut |_| {},
        )
        .unwrap();
    prop_assert!(report.is_clean(), "{:?}", report.problems);
    // And it commits on.
    let c = ledger
        .write(LedgerBatch::new().insert("plain", "after", "yes"))
        .unwrap()
        .unwrap();
    prop_assert_eq!(c.version, r + 1);
    Ok(())
}

/// Found by the property above: a write failed without breaking the ledger (it logged
/// nothing), the next one broke it after logging; recovery finishes the second.
#[test]
fn a_failed_write_that_left_the_ledger_unbroken_did_nothing() {
    let b = |v: &[(u8, u8, Option<u8>)]| v.to_vec();
    let batches = vec![
        b(&[(1, 0, Some(69)), (1, 4, Some(31))]),
        b(&[(0, 0, None), (0, 9, Some(117))]),
        b(&[(0, 8, Some(175)), (0, 1, None)]),
        b(&[
            (0, 9, Some(107)),
            (1, 7, Some(81)),
            (0, 8, Some(119)),
            (1, 7, Some(43)),
        ]),
        b(&[(0, 8, Some(235)), (0, 8, None), (0, 8, None)]),
        b(&[(0, 7, Some(98)), (0, 9, None)]),
        b(&[(1, 6, Some(57)), (0, 6, None), (0, 8, None), (0, 2, None)]),
        b(&[(0, 5, None)]),
        b(&[(0, 2, Some(252)), (1, 2, None), (0, 0, Some(55))]),
        b(&[(1, 5, Some(166)), (0, 2, None)]),
        b(&[
            (0, 8, Some(57)),
            (0, 5, Some(251)),
            (1, 1, None),
            (0, 7, Some(147)),
        ]),
        b(&[(0, 5, Some(248)), (0, 5, Some(132))]),
    ];
    run(&batches, 5024222938599370309, 9, 13944109095712215533).unwrap();
}

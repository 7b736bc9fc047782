//! `Ledger::transact_proved`: transfers between accounts run by concurrent clients, each
//! checking every answer as a LedgerBench client in immediate mode does (consistency from the
//! digest it trusts, the reads as of the version before, the writes as of the version), against
//! what its transaction saw and wrote; and forged answers refused.

use std::collections::BTreeMap;
use std::sync::Mutex;

use cairn_ledger::{Ledger, LedgerBatch, LedgerConfig, ProvedCommit, ProvedKeys};
use cairn_proof::{
    verify_consistency, verify_receipt, verify_receipt_at, Claim, Digest, TableClaims,
};

const ACCOUNTS: u64 = 16;

fn key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

fn amount(bytes: Option<&[u8]>) -> i64 {
    bytes.map_or(0, |b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
}

/// The claims that `keys` hold `values`, per table, as the verifier takes them.
fn claims<'a>(keys: &'a ProvedKeys, values: &'a [Vec<Option<Vec<u8>>>]) -> Vec<Vec<Claim<'a>>> {
    keys.keys
        .iter()
        .zip(values)
        .map(|((_, keys), values)| {
            keys.iter()
                .zip(values)
                .map(|(k, v)| Claim::answer(k, v.as_deref()))
                .collect()
        })
        .collect()
}

fn tables<'a>(keys: &'a ProvedKeys, claims: &'a [Vec<Claim<'a>>]) -> Vec<TableClaims<'a>> {
    keys.keys
        .iter()
        .zip(claims)
        .map(|((table, _), claims)| TableClaims { table, claims })
        .collect()
}

/// Everything a client checks of a proved commit: the new digest extends `trusted`; the reads
/// prove `seen` (the values the transaction's body read) as of the version before; the writes
/// prove `wrote` as of the version, fresh. Adopts the new digest.
fn check(
    ledger: &Ledger,
    trusted: &mut Digest,
    made: &ProvedCommit,
    seen: &BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>,
    wrote: &BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>,
) {
    let digest = made.committed.digest;
    let proof = ledger.prove_consistency(trusted.size, digest.size).unwrap();
    verify_consistency(trusted, &digest, &proof).unwrap();
    *trusted = digest;
    let expect = |keys: &ProvedKeys, model: &BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>| {
        let values: Vec<Vec<Option<Vec<u8>>>> = keys
            .keys
            .iter()
            .map(|(t, keys)| {
                keys.iter()
                    .map(|k| model[&(t.clone(), k.clone())].clone())
                    .collect()
            })
            .collect();
        assert_eq!(
            keys.keys.iter().map(|(_, k)| k.len()).sum::<usize>(),
            model.len()
        );
        assert_eq!(keys.read.values, values, "the values proved are those seen");
        values
    };
    if let Some(reads) = &made.reads {
        assert_eq!(reads.read.version, made.committed.version - 1);
        assert_eq!(reads.read.digest, digest);
        let values = expect(reads, seen);
        let claims = claims(reads, &values);
        verify_receipt_at(&reads.read.receipt, &tables(reads, &claims), &digest).unwrap();
        // As of its own version the receipt is stale: the reads are of the version before.
        assert!(verify_receipt(&reads.read.receipt, &tables(reads, &claims), &digest).is_err());
    } else {
        assert!(seen.is_empty() || made.committed.version == 1);
    }
    let writes = &made.writes;
    assert_eq!(writes.read.version, made.committed.version);
    let values = expect(writes, wrote);
    let claims = claims(writes, &values);
    verify_receipt(&writes.read.receipt, &tables(writes, &claims), &digest).unwrap();
}

fn open(dir: &std::path::Path) -> Ledger {
    Ledger::open(dir, LedgerConfig::new(["checking", "savings"])).unwrap()
}

/// What one transfer read and wrote (table, key) -> value, with the version it made.
type Seen = BTreeMap<(String, Vec<u8>), Option<Vec<u8>>>;

/// `clients` threads running `per_client` transfers each through `transact_proved` (with
/// `meta`), every answer checked; returns each commit's version and writes.
fn run_transfers(
    ledger: &Ledger,
    first: Digest,
    clients: u64,
    per_client: u64,
    meta: &[u8],
) -> Vec<(u64, Seen)> {
    let commits = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for client in 0..clients {
            let (ledger, commits) = (ledger, &commits);
            let mut trusted = first;
            s.spawn(move || {
                let mut rng = client.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..per_client {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let (a, b) = (rng % ACCOUNTS, (rng >> 20) % ACCOUNTS);
                    let move_funds = (rng >> 40) % 3 != 0;
                    let ((seen, wrote), made) = ledger
                        .transact_proved(meta, |tx| {
                            let mut seen = BTreeMap::new();
                            let mut wrote = BTreeMap::new();
                            let from = tx.get("checking", key(a))?;
                            seen.insert(("checking".to_string(), key(a).to_vec()), from.clone());
                            if !move_funds {
                                // Interest on savings: read and written.
                                let s = tx.get("savings", key(b))?;
                                seen.insert(("savings".to_string(), key(b).to_vec()), s.clone());
                                let v = (amount(s.as_deref()) + 1).to_be_bytes().to_vec();
                                tx.insert("savings", key(b), &v)?;
                                wrote.insert(("savings".to_string(), key(b).to_vec()), Some(v));
                                return Ok((seen, wrote));
                            }
                            let from_v = amount(from.as_deref()) - 5;
                            tx.insert("checking", key(a), from_v.to_be_bytes())?;
                            wrote.insert(
                                ("checking".to_string(), key(a).to_vec()),
                                Some(from_v.to_be_bytes().to_vec()),
                            );
                            // Reading b after writing a: when a == b it reads its own write,
                            // which is not a read of the tables.
                            let to = tx.get("checking", key(b))?;
                            if a != b {
                                seen.insert(("checking".to_string(), key(b).to_vec()), to.clone());
                            }
                            let to_v = amount(to.as_deref()) + 5;
                            tx.insert("checking", key(b), to_v.to_be_bytes())?;
                            wrote.insert(
                                ("checking".to_string(), key(b).to_vec()),
                                Some(to_v.to_be_bytes().to_vec()),
                            );
                            Ok((seen, wrote))
                        })
                        .unwrap();
                    let made = made.expect("every transaction writes");
                    check(ledger, &mut trusted, &made, &seen, &wrote);
                    // The keys read (not written) ride along as writes of nothing: the
                    // model skips them (see `model_at`); `commutes` checks them.
                    let mut touched = wrote;
                    for (k, v) in seen {
                        touched.entry(k).or_insert(Some(READ_ONLY.to_vec()));
                        let _ = v;
                    }
                    commits
                        .lock()
                        .unwrap()
                        .push((made.committed.version, touched));
                }
            });
        }
    });
    commits.into_inner().unwrap()
}

fn load(ledger: &Ledger) -> Digest {
    let mut batch = LedgerBatch::new();
    for id in 0..ACCOUNTS {
        batch.insert("checking", key(id), 100i64.to_be_bytes());
        batch.insert("savings", key(id), 1000i64.to_be_bytes());
    }
    ledger.write(&batch).unwrap().unwrap().digest
}

/// Marks a key a transaction read but did not write, in what `run_transfers` returns.
const READ_ONLY: &[u8] = b"read";

/// Whether the transactions of each version commute: none writes a key another touches.
fn commutes(commits: &[(u64, Seen)]) -> bool {
    let mut by_version: BTreeMap<u64, Vec<&Seen>> = BTreeMap::new();
    for (v, touched) in commits {
        by_version.entry(*v).or_default().push(touched);
    }
    by_version.values().all(|members| {
        members.iter().enumerate().all(|(i, a)| {
            members[i + 1..].iter().all(|b| {
                a.iter().all(|(k, va)| {
                    b.get(k).is_none_or(|vb| {
                        va.as_deref() == Some(READ_ONLY) && vb.as_deref() == Some(READ_ONLY)
                    })
                })
            })
        })
    })
}

/// Every account's balances, as the ledger holds them now.
fn all_balances(ledger: &Ledger, version: Option<u64>) -> Vec<Vec<Option<Vec<u8>>>> {
    let keys: Vec<[u8; 8]> = (0..ACCOUNTS).map(key).collect();
    let reads = [("checking", &keys[..]), ("savings", &keys[..])];
    match version {
        None => ledger.read(&reads).unwrap().values,
        Some(v) => ledger.read_at(v, &reads).unwrap().values,
    }
}

/// The model's balances after every version up to `version`, from the commits' writes.
fn model_at(commits: &[(u64, Seen)], version: u64) -> Vec<Vec<Option<Vec<u8>>>> {
    let mut state: BTreeMap<(String, Vec<u8>), Option<Vec<u8>>> = BTreeMap::new();
    for id in 0..ACCOUNTS {
        state.insert(
            ("checking".into(), key(id).to_vec()),
            Some(100i64.to_be_bytes().to_vec()),
        );
        state.insert(
            ("savings".into(), key(id).to_vec()),
            Some(1000i64.to_be_bytes().to_vec()),
        );
    }
    // In version order; transactions sharing a version commute: any order among them gives
    // the same state.
    let mut commits: Vec<&(u64, Seen)> = commits.iter().filter(|(v, _)| *v <= version).collect();
    commits.sort_by_key(|(v, _)| *v);
    for (_, wrote) in commits {
        state.extend(
            (wrote.iter())
                .filter(|(_, v)| v.as_deref() != Some(READ_ONLY))
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    ["checking", "savings"]
        .iter()
        .map(|t| {
            (0..ACCOUNTS)
                .map(|id| state[&(t.to_string(), key(id).to_vec())].clone())
                .collect()
        })
        .collect()
}

#[test]
fn concurrent_transfers_are_proved_as_seen() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let first = load(&ledger);
    let commits = run_transfers(&ledger, first, 4, 60, b"transfer");
    assert_eq!(commits.len(), 240);
    assert_eq!(ledger.version(), 241, "one version per transaction");
    // The money moved between checking accounts is conserved.
    let total: i64 = all_balances(&ledger, None)[0]
        .iter()
        .map(|v| amount(v.as_deref()))
        .sum();
    assert_eq!(total, 100 * ACCOUNTS as i64);
}

/// Group commit: transactions of concurrent clients share versions; every receipt still proves
/// what its transaction saw (as of the version before) and wrote (as of its version); the
/// transactions of one version commute, so replaying every version's writes gives each kept
/// version exactly, before and after a reopen (which rebuilds the window from the grouped
/// versions' undo records). Transactions with metadata keep a version of their own.
#[test]
fn grouped_transactions_share_versions_and_are_proved_as_seen() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        LedgerConfig::new(["checking", "savings"])
            .group(64)
            .history(u64::MAX)
    };
    let ledger = Ledger::open(dir.path(), config()).unwrap();
    let first = load(&ledger);
    let mut commits = run_transfers(&ledger, first, 8, 50, b"");
    assert_eq!(commits.len(), 400);
    let newest = ledger.version();
    assert!(
        commutes(&commits),
        "a version's transactions touch each other's writes"
    );
    assert!(
        newest < 401,
        "8 clients on 2 cores share some versions: {newest} versions for 400 transactions"
    );
    // With metadata, one version each.
    let before = ledger.version();
    commits.extend(run_transfers(&ledger, ledger.digest(), 4, 10, b"m"));
    assert_eq!(ledger.version(), before + 40);
    let newest = ledger.version();
    let check_all = |ledger: &Ledger| {
        for v in 1..=newest {
            assert_eq!(
                all_balances(ledger, Some(v)),
                model_at(&commits, v),
                "version {v}"
            );
        }
        assert_eq!(all_balances(ledger, None), model_at(&commits, newest));
    };
    check_all(&ledger);
    ledger.close();
    drop(ledger);
    let ledger = Ledger::open(dir.path(), config()).unwrap();
    assert_eq!(ledger.version(), newest);
    check_all(&ledger);
}

/// Claims about `checking` and `savings`.
fn both<'a>(checking: &'a [Claim<'a>], savings: &'a [Claim<'a>]) -> [TableClaims<'a>; 2] {
    [
        TableClaims {
            table: "checking",
            claims: checking,
        },
        TableClaims {
            table: "savings",
            claims: savings,
        },
    ]
}

#[test]
fn forged_answers_of_a_proved_commit_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    let mut batch = LedgerBatch::new();
    batch.insert("checking", key(1), 10i64.to_be_bytes());
    let first = ledger.write(&batch).unwrap().unwrap();
    let (_, made) = ledger
        .transact_proved(b"", |tx| {
            let v = amount(tx.get("checking", key(1))?.as_deref());
            tx.insert("checking", key(1), (v + 1).to_be_bytes())?;
            // Absent before and after: proved absent.
            tx.get("savings", key(2))?;
            Ok(())
        })
        .unwrap();
    let made = made.unwrap();
    let digest = made.committed.digest;
    let proof = ledger
        .prove_consistency(first.digest.size, digest.size)
        .unwrap();
    verify_consistency(&first.digest, &digest, &proof).unwrap();
    let reads = made.reads.as_ref().unwrap();
    assert_eq!(reads.keys.len(), 2, "both tables read");
    let honest = [Some(10i64.to_be_bytes().to_vec())];
    let absent = [None];
    for (checking, savings, ok) in [
        (&honest[0], &absent[0], true),
        // The server claims the transaction saw 11 (the value after it), or 9.
        (&Some(11i64.to_be_bytes().to_vec()), &absent[0], false),
        (&Some(9i64.to_be_bytes().to_vec()), &absent[0], false),
        // ...or that savings[2] held something.
        (&honest[0], &Some(vec![0]), false),
    ] {
        let c = [Claim::answer(&reads.keys[0].1[0], checking.as_deref())];
        let s = [Claim::answer(&reads.keys[1].1[0], savings.as_deref())];
        let claims = both(&c, &s);
        assert_eq!(
            verify_receipt_at(&reads.read.receipt, &claims, &digest).is_ok(),
            ok,
            "{checking:?} {savings:?}"
        );
    }
    // The writes: 11 now; the old value, claimed fresh, is refused.
    let writes = &made.writes;
    for (value, ok) in [(11i64, true), (10, false)] {
        let bytes = value.to_be_bytes();
        let c = [Claim::present(&writes.keys[0].1[0], &bytes)];
        let claims = [TableClaims {
            table: "checking",
            claims: &c,
        }];
        assert_eq!(
            verify_receipt(&writes.read.receipt, &claims, &digest).is_ok(),
            ok
        );
    }
    // A receipt of the reads presented as a receipt of the present: stale.
    let c = [Claim::present(
        &reads.keys[0].1[0],
        honest[0].as_deref().unwrap(),
    )];
    let s = [Claim::absent(&reads.keys[1].1[0])];
    let claims = both(&c, &s);
    assert!(verify_receipt(&reads.read.receipt, &claims, &digest).is_err());
}

#[test]
fn the_first_version_and_blind_writes_prove_no_reads() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = open(dir.path());
    // Version 1: a read of the empty ledger has no version before it to prove.
    let (_, made) = ledger
        .transact_proved(b"", |tx| {
            assert_eq!(tx.get("checking", key(1))?, None);
            tx.insert("checking", key(1), 1i64.to_be_bytes())
        })
        .unwrap();
    let made = made.unwrap();
    assert_eq!(made.committed.version, 1);
    assert!(made.reads.is_none());
    assert_eq!(
        made.writes.keys,
        vec![("checking".to_string(), vec![key(1).to_vec()])]
    );
    // A blind write, and a delete: no reads; the delete proved absent.
    let (_, made) = ledger
        .transact_proved(b"", |tx| {
            tx.insert("savings", key(3), 3i64.to_be_bytes())?;
            tx.delete("checking", key(1))
        })
        .unwrap();
    let made = made.unwrap();
    assert!(made.reads.is_none());
    assert_eq!(
        made.writes.read.values,
        vec![vec![None], vec![Some(3i64.to_be_bytes().to_vec())]]
    );
    // A transaction that writes nothing makes no version.
    let (_, made) = ledger
        .transact_proved(b"", |tx| tx.get("savings", key(3)).map(|_| ()))
        .unwrap();
    assert!(made.is_none());
}

/// `read_values`: the values and the version a later `prove_promises` proves, for plain and
/// ordered tables; refused for an unknown table or an ordered table's empty key.
#[test]
fn values_read_without_a_receipt_are_proved_later_as_promised() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(
        dir.path(),
        LedgerConfig::new(["checking", "names"])
            .ordered(["names"])
            .history(8),
    )
    .unwrap();
    let mut batch = LedgerBatch::new();
    batch.insert("checking", key(1), 5i64.to_be_bytes());
    batch.insert("names", "bob", "b");
    ledger.write(&batch).unwrap();
    let (version, values) = ledger
        .read_values(&[("checking", &[key(1), key(2)][..])])
        .unwrap();
    let (_, names) = ledger
        .read_values(&[("names", &["bob", "zed"][..])])
        .unwrap();
    assert_eq!(version, 1);
    assert_eq!(values, [vec![Some(5i64.to_be_bytes().to_vec()), None]]);
    assert_eq!(names, [vec![Some(b"b".to_vec()), None]]);
    // A later version does not change what version 1 proves.
    ledger
        .write(LedgerBatch::new().insert("checking", key(1), 6i64.to_be_bytes()))
        .unwrap();
    let proved = ledger
        .prove_promises(&[cairn_ledger::Promise {
            version,
            table: "checking".into(),
            keys: vec![key(1).to_vec(), key(2).to_vec()],
        }])
        .unwrap();
    assert_eq!(proved[0].read.values, values);
    let keys = [key(1), key(2)];
    let claims: Vec<Claim<'_>> = keys
        .iter()
        .zip(&values[0])
        .map(|(k, v)| Claim::answer(k, v.as_deref()))
        .collect();
    let tables = [TableClaims {
        table: "checking",
        claims: &claims,
    }];
    verify_receipt_at(&proved[0].read.receipt, &tables, &ledger.digest()).unwrap();
    assert!(ledger.read_values(&[("nope", &[key(1)][..])]).is_err());
    assert!(ledger.read_values(&[("names", &[""][..])]).is_err());
}

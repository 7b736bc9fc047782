//! How many receipts one thread verifies per second, with the verifier alone: a reference trie
//! of 1,000,000 keys (34-byte keys, 60-byte values, as `cairn-bench ledger-receipts` writes)
//! and a second table, in a ledger whose history is a reference tree of a chosen size, so that
//! the receipt's history path may be as long as it is at any size (19 hashes at 524,288
//! versions, the longest below 2^20) without making half a million commits. Each receipt is
//! one present key of the large table, checked with `verify_receipt` against the digest.
//!
//! Ignored by default (about 20 s of building and 6 s of measuring per hash function, in the
//! release profile):
//! `cargo test --release -p cairn-proof --test receipt_rate -- --ignored --nocapture`.
//! `CAIRN_RATE_KEYS` (default 1,000,000), `CAIRN_RATE_SIZES` (history sizes, comma-separated;
//! default 1000,524288) and `CAIRN_RATE_SECONDS` (per figure, default 3) change the set-up.
//! CPU time is the thread's (`/proc/thread-self/schedstat`; 0 where there is none).

use std::time::Instant;

use cairn_proof::history::{leaf_hash, HistoryLeaf};
use cairn_proof::ledger::{ledger_path, ledger_root};
use cairn_proof::reference::{MemHistory, MemTrie};
use cairn_proof::{verify_receipt, Claim, HashKind, Receipt, ReceiptTable, TableClaims};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Seconds this thread has run on a CPU.
fn thread_cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 * 1e-9)
}

fn key(i: u64) -> [u8; 34] {
    let mut k = [0u8; 34];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    k[8..16].copy_from_slice(&i.to_le_bytes());
    k
}

fn value(i: u64) -> [u8; 60] {
    let mut v = [0x5a; 60];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

#[test]
#[ignore]
fn receipt_verify_rate() {
    let n: u64 = env("CAIRN_RATE_KEYS", 1_000_000);
    let sizes: Vec<u64> = std::env::var("CAIRN_RATE_SIZES")
        .unwrap_or_else(|_| "1000,524288".into())
        .split(',')
        .map(|s| s.trim().parse().expect("CAIRN_RATE_SIZES: numbers"))
        .collect();
    let seconds: f64 = env("CAIRN_RATE_SECONDS", 3.0);
    let receipts = 10_000u64.min(n);
    let keys: Vec<[u8; 34]> = (0..n).map(key).collect();
    let values: Vec<[u8; 60]> = (0..n).map(value).collect();
    for kind in [HashKind::Sha256, HashKind::Blake3] {
        let started = Instant::now();
        let accounts = MemTrie::new(
            kind,
            keys.iter()
                .zip(&values)
                .map(|(k, v)| (&k[..], &v[..], None)),
        );
        let event_keys: Vec<[u8; 34]> = (0..1000).map(|i| key(i + (1 << 40))).collect();
        let events = MemTrie::new(kind, event_keys.iter().map(|k| (&k[..], &k[..], None)));
        println!(
            "{kind:?}: tries of {n} and 1,000 keys built in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        let tables = [
            (&b"accounts"[..], accounts.root()),
            (&b"events"[..], events.root()),
        ];
        let root = ledger_root(&tables).unwrap();
        let path = ledger_path(&tables, 0).unwrap();
        let meta = [9u8; 32];
        for &size in &sizes {
            let leaf = HistoryLeaf {
                version: size,
                ledger_root: root,
                meta,
            };
            let history = MemHistory::from_leaf_hashes((0..size).map(|i| {
                if i + 1 == size {
                    leaf.hash()
                } else {
                    leaf_hash(&i.to_be_bytes())
                }
            }));
            let inclusion = history.prove_inclusion(size - 1, size).unwrap();
            let digest = history.digest();
            let made: Vec<(usize, Receipt)> = (0..receipts)
                .map(|i| {
                    let id = ((i * 7919 + 13) % n) as usize;
                    let receipt = Receipt {
                        version: size,
                        meta,
                        table_count: 2,
                        tables: vec![ReceiptTable {
                            name: "accounts".into(),
                            root: accounts.root(),
                            index: 0,
                            path: path.clone(),
                            proof: accounts.prove(&[&keys[id]]),
                        }],
                        history_size: size,
                        history_path: inclusion.path.clone(),
                    };
                    (id, receipt)
                })
                .collect();
            let nodes = made
                .iter()
                .map(|(_, r)| r.tables[0].proof.node_count())
                .sum::<usize>() as f64
                / made.len() as f64;
            let verifies = |(id, r): &(usize, Receipt)| {
                let claims = [Claim::present(&keys[*id], &values[*id])];
                let reads = [TableClaims {
                    table: "accounts",
                    claims: &claims,
                }];
                verify_receipt(r, &reads, &digest).is_ok()
            };
            for round in 1..=3 {
                let (clock, cpu) = (Instant::now(), thread_cpu_s());
                let mut done = 0u64;
                while clock.elapsed().as_secs_f64() < seconds {
                    for m in &made {
                        assert!(verifies(m), "an honest receipt did not verify");
                    }
                    done += made.len() as u64;
                }
                let (wall, cpu) = (clock.elapsed().as_secs_f64(), thread_cpu_s() - cpu);
                println!(
                    "{kind:?} tries, {n} keys, {size} versions ({} history hashes), {nodes:.1} \
                     proof nodes on average, round {round}: {:.0} per s, {:.0} per CPU s \
                     ({:.2} µs of CPU each)",
                    inclusion.path.len(),
                    done as f64 / wall,
                    done as f64 / cpu.max(1e-9),
                    cpu / done as f64 * 1e6,
                );
            }
        }
    }
}

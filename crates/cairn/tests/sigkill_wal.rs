//! Crash safety of durable tables with real processes: a child writes batches across three
//! durable tables through the write-ahead log (group commit), prints each durability notice it
//! receives, checkpoints every 40 batches, and is killed with SIGKILL at a random moment; the
//! parent then opens the session (recovering checkpoints plus log) and checks the prefix rule:
//! the tables hold exactly batches 1..=m for some m (each batch all or nothing, every table at
//! the same m), and m is at least every batch whose notice was printed.
//!
//! Ignored by default:
//!
//! ```sh
//! cargo test --release -p cairn --test sigkill_wal -- --ignored --nocapture
//! ```
//!
//! `CAIRN_KILLS` sets the number of kills (default 1000).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn::{LogOptions, Resolve, Session, SessionOptions, Table, TableConfig, Update};

const CHILD_DIR: &str = "CAIRN_SIGKILL_WAL_CHILD_DIR";
const KEYS: u64 = 3000;
const BATCH: u64 = 40;
const CHECKPOINT_EVERY: u64 = 40;

/// The contents of the three tables after some batches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    utxo: BTreeMap<Vec<u8>, Vec<u8>>,
    balances: BTreeMap<Vec<u8>, u64>,
    n: u64,
}

fn mix(x: u64) -> u64 {
    cairn::fs::SplitMix64::new(x).next_u64()
}

/// Batch `n`: UTxO inserts and deletes, balance upserts, and the batch number.
#[allow(clippy::type_complexity)]
fn batch(n: u64) -> (Vec<(Vec<u8>, Option<Vec<u8>>)>, Vec<(Vec<u8>, u64)>) {
    let mut utxo = Vec::new();
    let mut balances = Vec::new();
    for i in 0..BATCH {
        let r = mix(n * 1_000_003 + i);
        let key = format!("k{:05}", r % KEYS).into_bytes();
        if (r >> 32).is_multiple_of(4) {
            utxo.push((key, None));
        } else {
            utxo.push((key, Some(format!("v{n}.{i}").into_bytes())));
        }
        if i % 8 == 0 {
            balances.push((format!("addr{}", (r >> 40) % 50).into_bytes(), n + i));
        }
    }
    (utxo, balances)
}

impl Model {
    fn apply(&mut self, n: u64) {
        let (utxo, balances) = batch(n);
        for (k, v) in utxo {
            match v {
                Some(v) => {
                    self.utxo.insert(k, v);
                }
                None => {
                    self.utxo.remove(&k);
                }
            }
        }
        for (k, amount) in balances {
            *self.balances.entry(k).or_insert(0) += amount;
        }
        self.n = n;
    }
}

fn options() -> SessionOptions {
    SessionOptions::default().log(Some(LogOptions::default().segment_bytes(256 << 10)))
}

fn config(resolve: Resolve) -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(256)
        .merge_batch_size(16)
        .resolve(resolve)
}

/// The three tables, created if the session has none yet.
fn tables(session: &Session) -> [Table; 3] {
    ["utxo", "balances", "meta"].map(|name| match session.durable_table(name) {
        Some(t) => t,
        None => {
            let resolve = if name == "balances" {
                Resolve::AddU64Le
            } else {
                Resolve::KeepNewest
            };
            session.create_durable_table(name, config(resolve)).unwrap()
        }
    })
}

/// The model the tables hold, read from them.
fn read(tables: &[Table; 3]) -> Model {
    let utxo = tables[0]
        .range_lookup(..)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    let balances = tables[1]
        .range_lookup(..)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, u64::from_le_bytes(e.value.try_into().unwrap())))
        .collect();
    let n = tables[2]
        .lookup("n")
        .unwrap()
        .value()
        .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
    Model { utxo, balances, n }
}

#[test]
#[ignore = "run by sigkill_loses_no_durable_batch in a child process"]
fn child_process_for_sigkill_wal_test() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let session = Session::open_with_options(&dir, options()).expect("child: open");
    let tables = tables(&session);
    let mut n = read(&tables).n;
    println!("ready {n}");
    loop {
        n += 1;
        let (utxo, balances) = batch(n);
        let u: Vec<(&[u8], Update<'_>)> = utxo
            .iter()
            .map(|(k, v)| (&k[..], v.as_deref().map_or(Update::Delete, Update::Insert)))
            .collect();
        let amounts: Vec<[u8; 8]> = balances.iter().map(|b| b.1.to_le_bytes()).collect();
        let b: Vec<(&[u8], Update<'_>)> = balances
            .iter()
            .zip(&amounts)
            .map(|((k, _), a)| (&k[..], Update::Upsert(a)))
            .collect();
        let counter = n.to_le_bytes();
        let m: Vec<(&[u8], Update<'_>)> = vec![(b"n", Update::Insert(&counter))];
        let durability = session
            .write(&[
                (&tables[0], &u[..]),
                (&tables[1], &b[..]),
                (&tables[2], &m[..]),
            ])
            .expect("write");
        durability.on_durable(move |result| {
            if result.is_ok() {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "durable {n}");
            }
        });
        if n.is_multiple_of(CHECKPOINT_EVERY) {
            session.checkpoint().expect("checkpoint");
            println!("checkpoint {n}");
        }
    }
}

#[test]
#[ignore = "kills child processes for several minutes; run with --ignored"]
fn sigkill_loses_no_durable_batch() {
    let kills: u64 = std::env::var("CAIRN_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut model = Model::default();
    let (mut durable, mut checkpoints, mut lost_unreported, mut mid) = (0u64, 0u64, 0u64, 0u64);
    for kill in 0..kills {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "child_process_for_sigkill_wal_test",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut last, mut checkpoints) = (None, 0u64);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("durable ") {
                    last = last.max(n.parse::<u64>().ok());
                } else if line.starts_with("checkpoint ") {
                    checkpoints += 1;
                }
            }
            (last, checkpoints)
        });
        let delay = 10 + mix(kill ^ 0xD0_D0) % 300;
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                status.signal(),
                Some(9),
                "the child died of something else: {status}"
            );
        }
        let (last, cps) = reader.join().unwrap();
        checkpoints += cps;
        if let Some(n) = last {
            durable = durable.max(n);
            mid += 1;
        }
        let session = Session::open_with_options(dir, options())
            .unwrap_or_else(|e| panic!("kill {kill}: the session does not recover: {e}"));
        let found = read(&tables(&session));
        assert!(
            found.n >= durable,
            "kill {kill}: batch {durable} was reported durable, the tables hold 1..={}",
            found.n
        );
        // The model catches up to the batch the tables hold (they never go back: what was
        // recovered once is in the log or a checkpoint).
        assert!(
            found.n >= model.n,
            "kill {kill}: recovered {} after {}",
            found.n,
            model.n
        );
        while model.n < found.n {
            let next = model.n + 1;
            model.apply(next);
        }
        assert!(
            found == model,
            "kill {kill}: the tables are not batches 1..={}",
            found.n
        );
        lost_unreported += u64::from(found.n > durable);
    }
    assert!(
        mid > kills / 2,
        "few children got a notice out before being killed"
    );
    eprintln!(
        "{kills} kills in {:.1} s: {mid} after at least one durability notice; newest batch \
         reported durable {durable}, recovered {}; {checkpoints} checkpoints completed; \
         {lost_unreported} recoveries held batches beyond the last notice",
        started.elapsed().as_secs_f64(),
        model.n
    );
}

//! `cairn-bench txn`: read-modify-write transactions on Cairn's named durable tables, the
//! SmallBank mix (the workload of LedgerBench's section 3 and of the deterministic-database
//! literature): two tables, `checking` and `savings`, one account per key, and its six
//! transactions drawn uniformly.
//!
//! Owns: the workload, its check and its record. Must never touch: the engine's internals
//! (it uses `Session::transaction` as a user would).
//!
//! The transactions (amounts are u64 little-endian; `a`, `b` accounts drawn uniformly, or
//! with `--zipf`, from a Zipfian law of exponent 0.99):
//!
//! - **Balance**: reads `a`'s checking and savings (read-only: no commit record).
//! - **DepositChecking**: `checking[a] += 1.30` (in cents: 130).
//! - **TransactSavings**: `savings[a] += 20.20` if the result stays non-negative (it does here).
//! - **Amalgamate**: moves all of `a`'s money to `b`'s checking.
//! - **WriteCheck**: `checking[a] -= 5`, or 6 with a penalty if checking + savings < 5.
//! - **SendPayment**: moves 5 from `a`'s checking to `b`'s, if `a` has it.
//!
//! For each writer count (`--threads`, default 1 and 2: one core, two): a fresh session, the
//! accounts loaded in batches and checkpointed, the disk settled, then `--seconds` of threads
//! each running transactions back to back (a conflict is counted and the transaction run again)
//! and waiting for each one's durability (`--no-wait`: not). Reported: committed
//! transactions per second, conflicts (retries) per committed transaction, latency from the
//! start of a transaction to its durability (p50, p99, max, an HDR histogram per thread), and
//! with `--check` (on by default) the money at the end against the model the threads kept of
//! the deposits and checks they committed (conserved except for those).
//!
//! Settings: `SyncPolicy::Immediate` (a committer that waits leads its group; concurrent
//! committers share fsyncs), tables of the default config, merges on the session's background
//! thread.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::cli::TxnArgs;
use crate::failure::{Context, Failure};
use crate::report::table::Markdown;

/// Money each account starts with in each table, in cents.
const START: i64 = 10_000;

fn account(a: u64) -> [u8; 8] {
    a.to_be_bytes()
}

fn amount(v: Option<Vec<u8>>) -> i64 {
    v.map_or(0, |v| i64::from_le_bytes(v.try_into().unwrap_or([0; 8])))
}

/// The two tables of a session.
struct Bank {
    session: cairn::Session,
    checking: cairn::Table,
    savings: cairn::Table,
}

impl Bank {
    fn open(dir: &Path, accounts: u64) -> Result<Bank, Failure> {
        let options = cairn::SessionOptions::default()
            .log(Some(
                cairn::LogOptions::default().sync(cairn::SyncPolicy::Immediate),
            ))
            .background_merges(true);
        let session = cairn::Session::open_with_options(dir, options)
            .context(|| "opening a Cairn session".to_string())?;
        let checking = session
            .table("checking", cairn::TableConfig::default())
            .context(|| "opening table checking".to_string())?;
        let savings = session
            .table("savings", cairn::TableConfig::default())
            .context(|| "opening table savings".to_string())?;
        let mut a = 0;
        while a < accounts {
            let mut batch = cairn::WriteBatch::new();
            for i in a..(a + 10_000).min(accounts) {
                batch.insert(&checking, account(i), START.to_le_bytes());
                batch.insert(&savings, account(i), START.to_le_bytes());
            }
            session
                .write_batch(&batch)
                .context(|| "loading the accounts".to_string())?;
            a += 10_000;
        }
        session
            .checkpoint()
            .context(|| "checkpointing the loaded accounts".to_string())?;
        Ok(Bank {
            session,
            checking,
            savings,
        })
    }

    /// One attempt at SmallBank transaction `kind` on accounts `a` and `b`; returns the money
    /// it created (deposits) or destroyed (checks), and its durability. A conflict is the
    /// caller's to count and retry.
    fn attempt(
        &self,
        kind: u64,
        a: u64,
        b: u64,
    ) -> cairn::Result<(i64, Option<cairn::Durability>)> {
        let mut tx = self.session.transaction()?;
        let money = self.body(&mut tx, kind, a, b)?;
        Ok((money, tx.commit()?))
    }

    fn body(&self, tx: &mut cairn::Transaction, kind: u64, a: u64, b: u64) -> cairn::Result<i64> {
        let (c, s) = (&self.checking, &self.savings);
        let (ka, kb) = (account(a), account(b));
        {
            Ok(match kind {
                0 => {
                    // Balance
                    let _ = amount(tx.get(c, ka)?) + amount(tx.get(s, ka)?);
                    0
                }
                1 => {
                    // DepositChecking
                    let v = amount(tx.get(c, ka)?);
                    tx.insert(c, ka, (v + 130).to_le_bytes())?;
                    130
                }
                2 => {
                    // TransactSavings
                    let v = amount(tx.get(s, ka)?);
                    if v + 2020 < 0 {
                        return Ok(0);
                    }
                    tx.insert(s, ka, (v + 2020).to_le_bytes())?;
                    2020
                }
                3 => {
                    // Amalgamate
                    if a == b {
                        return Ok(0);
                    }
                    let total = amount(tx.get(c, ka)?) + amount(tx.get(s, ka)?);
                    let to = amount(tx.get(c, kb)?);
                    tx.insert(c, ka, 0i64.to_le_bytes())?;
                    tx.insert(s, ka, 0i64.to_le_bytes())?;
                    tx.insert(c, kb, (to + total).to_le_bytes())?;
                    0
                }
                4 => {
                    // WriteCheck
                    let checking = amount(tx.get(c, ka)?);
                    let total = checking + amount(tx.get(s, ka)?);
                    let debit = if total < 500 { 600 } else { 500 };
                    tx.insert(c, ka, (checking - debit).to_le_bytes())?;
                    -debit
                }
                _ => {
                    // SendPayment
                    if a == b {
                        return Ok(0);
                    }
                    let from = amount(tx.get(c, ka)?);
                    if from < 500 {
                        return Ok(0);
                    }
                    let to = amount(tx.get(c, kb)?);
                    tx.insert(c, ka, (from - 500).to_le_bytes())?;
                    tx.insert(c, kb, (to + 500).to_le_bytes())?;
                    0
                }
            })
        }
    }

    /// Every account's money, summed over both tables.
    fn total(&self) -> Result<i64, Failure> {
        let mut sum = 0;
        for t in [&self.checking, &self.savings] {
            for e in t.cursor().context(|| "a cursor".to_string())? {
                sum += amount(Some(e.context(|| "reading".to_string())?.value));
            }
        }
        Ok(sum)
    }
}

/// A Zipfian draw over `0..n` (exponent `theta`), by the rejection-inversion method of Hörmann
/// and Derflinger: O(1) per draw, no table.
pub(crate) struct Zipf {
    n: f64,
    theta: f64,
    h_x1: f64,
    h_n: f64,
    s: f64,
}

impl Zipf {
    pub(crate) fn new(n: u64, theta: f64) -> Zipf {
        let n = n as f64;
        let mut z = Zipf {
            n,
            theta,
            h_x1: 0.0,
            h_n: 0.0,
            s: 0.0,
        };
        z.h_x1 = z.h(1.5) - 1.0;
        z.h_n = z.h(n + 0.5);
        z.s = 2.0 - z.h_inv(z.h(2.5) - 2f64.powf(-theta));
        z
    }
    fn h(&self, x: f64) -> f64 {
        ((1.0 - self.theta) * x.ln()).exp_m1() / (1.0 - self.theta)
    }
    fn h_inv(&self, x: f64) -> f64 {
        ((x * (1.0 - self.theta)).ln_1p() / (1.0 - self.theta)).exp()
    }
    pub(crate) fn draw(&self, uniform: f64) -> u64 {
        let mut u = uniform;
        loop {
            let x = self.h_n + u * (self.h_x1 - self.h_n);
            let k = (self.h_inv(x) + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || x >= self.h(k + 0.5) - (-self.theta * k.ln()).exp() {
                return k as u64 - 1;
            }
            // Rare: draw again from the next uniform in a fixed sequence.
            u = (u * 7919.0).fract();
        }
    }
}

struct Measured {
    committed: u64,
    conflicts: u64,
    seconds: f64,
    latencies_us: Histogram<u64>,
    created: i64,
}

fn measure(bank: &Bank, args: &TxnArgs, threads: u64) -> Result<Measured, Failure> {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads as usize + 1);
    let created = AtomicI64::new(0);
    let conflicts = AtomicU64::new(0);
    let zipf = args.zipf.then(|| Zipf::new(args.accounts, 0.99));
    let (results, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, barrier, created, conflicts, zipf) =
                    (&stop, &barrier, &created, &conflicts, &zipf);
                s.spawn(move || -> Result<Histogram<u64>, Failure> {
                    let mut rng = crate::keys::SplitMix64::new(args.common.seed ^ (t << 32));
                    let mut latencies = Histogram::<u64>::new(3)
                        .map_err(|e| Failure(format!("a histogram: {e:?}")))?;
                    let pick = |rng: &mut crate::keys::SplitMix64| match zipf {
                        Some(z) => z.draw((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64),
                        None => rng.next_u64() % args.accounts,
                    };
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let kind = rng.next_u64() % 6;
                        let (a, b) = (pick(&mut rng), pick(&mut rng));
                        let start = Instant::now();
                        let (money, durability) = loop {
                            match bank.attempt(kind, a, b) {
                                Ok(done) => break done,
                                Err(e) if e.is_retryable() => {
                                    conflicts.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => return Err(Failure(e.with_causes())),
                            }
                        };
                        if let (Some(d), false) = (durability, args.no_wait) {
                            d.wait().map_err(|e| Failure(e.with_causes()))?;
                        }
                        created.fetch_add(money, Ordering::Relaxed);
                        latencies
                            .record(start.elapsed().as_micros() as u64)
                            .map_err(|e| Failure(format!("recording a latency: {e:?}")))?;
                    }
                    Ok(latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(args.seconds));
        stop.store(true, Ordering::Relaxed);
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        (results, start.elapsed().as_secs_f64())
    });
    let mut latencies_us =
        Histogram::<u64>::new(3).map_err(|e| Failure(format!("a histogram: {e:?}")))?;
    for r in results {
        let h = r.map_err(|_| Failure("a transaction thread panicked".into()))??;
        latencies_us
            .add(&h)
            .map_err(|e| Failure(format!("merging latencies: {e:?}")))?;
    }
    Ok(Measured {
        committed: latencies_us.len(),
        conflicts: conflicts.load(Ordering::Relaxed),
        seconds: elapsed,
        latencies_us,
        created: created.load(Ordering::Relaxed),
    })
}

/// `cairn-bench txn`.
pub fn run(args: &TxnArgs) -> Result<(), Failure> {
    let threads: Vec<u64> = args
        .threads
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Failure(format!("--threads: {p:?} is not a positive number")))
        })
        .collect::<Result<_, _>>()?;
    if args.accounts == 0 {
        return Err(Failure("--accounts must be positive".into()));
    }
    crate::in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
        let mut rows = Vec::new();
        for &t in &threads {
            let sub = dir.join(format!("smallbank-{t}"));
            std::fs::create_dir_all(&sub).context(|| "creating a directory".into())?;
            let loading = Instant::now();
            let bank = Bank::open(&sub, args.accounts)?;
            eprintln!(
                "threads {t}: {} accounts loaded in {:.1} s; running for {} s",
                args.accounts,
                loading.elapsed().as_secs_f64(),
                args.seconds
            );
            crate::sys::proc::settle_disk(Duration::from_millis(500));
            let m = measure(&bank, args, t)?;
            if args.check {
                let total = bank.total()?;
                let expected = 2 * START * args.accounts as i64 + m.created;
                if total != expected {
                    return Err(Failure(format!(
                        "threads {t}: the accounts hold {total}, the committed transactions \
                         leave {expected}"
                    )));
                }
            }
            let log = bank.session.log_stats().ok();
            drop(bank);
            std::fs::remove_dir_all(&sub).context(|| "removing a directory".into())?;
            let ms = |q: f64| m.latencies_us.value_at_quantile(q) as f64 / 1e3;
            let rate = m.committed as f64 / m.seconds;
            eprintln!(
                "threads {t}: {rate:.0} transactions/s, p50 {:.3} ms, p99 {:.3} ms, {:.4} \
                 conflicts per transaction",
                ms(0.5),
                ms(0.99),
                m.conflicts as f64 / m.committed.max(1) as f64
            );
            rows.push(serde_json::json!({
                "threads": t,
                "transactions": m.committed,
                "seconds": m.seconds,
                "transactions_per_s": rate,
                "conflicts_per_transaction": m.conflicts as f64 / m.committed.max(1) as f64,
                "latency_ms": { "p50": ms(0.5), "p99": ms(0.99), "max": m.latencies_us.max() as f64 / 1e3 },
                "fsyncs_per_s": log.map(|l| l.fsyncs as f64 / m.seconds),
                "checked": args.check,
            }));
        }
        let mut table = Markdown::left(&[
            "threads",
            "transactions/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "conflicts/txn",
            "fsyncs/s",
        ]);
        for row in &rows {
            let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
            table.row([
                row["threads"].to_string(),
                format!("{:.0}", f(&row["transactions_per_s"])),
                format!("{:.3}", f(&row["latency_ms"]["p50"])),
                format!("{:.3}", f(&row["latency_ms"]["p99"])),
                format!("{:.3}", f(&row["latency_ms"]["max"])),
                format!("{:.4}", f(&row["conflicts_per_transaction"])),
                format!("{:.0}", f(&row["fsyncs_per_s"])),
            ]);
        }
        println!(
            "SmallBank on Cairn: {} accounts, {} draw, {}",
            args.accounts,
            if args.zipf { "Zipfian 0.99" } else { "uniform" },
            if args.no_wait {
                "commits not waited for"
            } else {
                "every commit waited until durable"
            }
        );
        print!("{}", table.render());
        if let Some(path) = &args.common.json {
            let doc = serde_json::json!({
                "benchmark": "txn",
                "workload": "smallbank",
                "accounts": args.accounts,
                "zipf": args.zipf,
                "wait_durable": !args.no_wait,
                "seconds": args.seconds,
                "cairn_sync_policy": "Immediate",
                "rows": rows,
            });
            std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
                .context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_draws_stay_in_range_and_favour_small_ranks() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = crate::keys::SplitMix64::new(5);
        let mut first = 0;
        for _ in 0..100_000 {
            let k = z.draw((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64);
            assert!(k < 1000);
            first += u64::from(k == 0);
        }
        // Rank 1 of 1000 under exponent 0.99 draws about 13% of the time.
        assert!((10_000..16_000).contains(&first), "{first}");
    }
}

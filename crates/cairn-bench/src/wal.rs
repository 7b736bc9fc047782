//! `cairn-bench wal`: durable writes side by side, in one invocation: Cairn's durable tables
//! (write-ahead log with group commit), fjall's journal (`PersistMode::SyncAll` per batch) and,
//! with the `rocksdb` feature, RocksDB's WAL (`WriteOptions::set_sync(true)`, which groups
//! concurrent writers' fsyncs), and the disk's own fsync rate as the ceiling.
//!
//! Owns: the workload and its record. Must never touch: the engines' internals.
//!
//! Latencies go into an `hdrhistogram` per writer thread, merged at the end: up to 64 threads
//! write for `--seconds` each, far more samples than a run of batches, and a histogram keeps
//! them in a fixed, small memory (no growing vector of every write in the timed loop) at three
//! significant digits, finer than the microseconds reported.
//!
//! For every engine, writer count (`--threads`, default 1, 4, 16, 64) and batch size
//! (`--batch`, default 1 and 256 updates of a 34-byte key and a 60-byte value): a fresh
//! directory and engine, then `--seconds` of writers each writing a batch and waiting until it
//! is durable, over and over. Each configuration starts with the next engine in turn (`--engines`
//! gives the list), and before each measured run the disk is settled (`sync`, then a pause of
//! 0.5 s), so that no engine runs while another's writes are still being written back. Reported:
//! durable batches per second, latency from the write call to its durability (p50, p99, max),
//! fsyncs per second where the engine counts them (Cairn's `Session::log_stats`), and bytes the
//! process wrote to storage per update (`/proc/self/io`, everything included: log, flushes,
//! compactions). The disk's fsync rate is measured first in the same directory: one thread
//! appending 128 bytes and calling `fdatasync`, for `--seconds`.
//!
//! Settings: Cairn `SyncPolicy::Immediate` (a group starts as soon as the syncer is free; the
//! writers arriving meanwhile form the next one), a durable table with the default config, and
//! merges on the session's background thread (`--background-merges false`: updates do them).
//! fjall 3.1: `WriteBatch::durability(Some(PersistMode::SyncAll))`, its documented way to make
//! a batch "definitely durable". RocksDB: `WriteOptions::set_sync(true)`, defaults otherwise.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::cli::WalArgs;
use crate::failure::{Context, Failure};
use crate::report::table::Markdown;
use crate::stats::Percentiles;
use crate::sys::proc::IoCounters;

const KEY_BYTES: usize = 34;
const VALUE_BYTES: usize = 60;

/// An engine's durable write: returns once the batch is durable.
trait DurableWrites: Send + Sync {
    fn write(&self, batch: &[([u8; KEY_BYTES], [u8; VALUE_BYTES])]) -> Result<(), Failure>;
    /// Fsyncs so far, if the engine counts them.
    fn fsyncs(&self) -> Option<u64>;
}

struct Cairn {
    session: cairn::Session,
    table: cairn::Table,
}

impl Cairn {
    fn open(dir: &Path, background_merges: bool) -> Result<Cairn, Failure> {
        let options = cairn::SessionOptions::default()
            .log(Some(
                cairn::LogOptions::default().sync(cairn::SyncPolicy::Immediate),
            ))
            .background_merges(background_merges);
        let session = cairn::Session::open_with_options(dir, options)
            .context(|| "opening a Cairn session with a log".to_string())?;
        let table = session
            .create_durable_table("t", cairn::TableConfig::default())
            .context(|| "creating a durable table".to_string())?;
        Ok(Cairn { session, table })
    }
}

impl DurableWrites for Cairn {
    fn write(&self, batch: &[([u8; KEY_BYTES], [u8; VALUE_BYTES])]) -> Result<(), Failure> {
        let updates: Vec<(&[u8], cairn::Update<'_>)> = batch
            .iter()
            .map(|(k, v)| (&k[..], cairn::Update::Insert(&v[..])))
            .collect();
        let durability = self
            .table
            .write(&updates)
            .context(|| "writing".to_string())?;
        durability
            .wait()
            .context(|| "waiting for durability".to_string())
    }

    fn fsyncs(&self) -> Option<u64> {
        self.session.log_stats().ok().map(|s| s.fsyncs)
    }
}

#[cfg(feature = "fjall")]
struct Fjall {
    keyspace: fjall::Keyspace,
    db: fjall::Database,
}

#[cfg(feature = "fjall")]
impl Fjall {
    fn open(dir: &Path) -> Result<Fjall, Failure> {
        let db = fjall::Database::builder(dir)
            .open()
            .context(|| "opening fjall".to_string())?;
        let keyspace = db
            .keyspace("t", fjall::KeyspaceCreateOptions::default)
            .context(|| "opening a fjall keyspace".to_string())?;
        Ok(Fjall { keyspace, db })
    }
}

#[cfg(feature = "fjall")]
impl DurableWrites for Fjall {
    fn write(&self, batch: &[([u8; KEY_BYTES], [u8; VALUE_BYTES])]) -> Result<(), Failure> {
        let mut b = self
            .db
            .batch()
            .durability(Some(fjall::PersistMode::SyncAll));
        for (k, v) in batch {
            b.insert(&self.keyspace, &k[..], &v[..]);
        }
        b.commit()
            .context(|| "committing a fjall batch".to_string())
    }

    fn fsyncs(&self) -> Option<u64> {
        None
    }
}

#[cfg(feature = "rocksdb")]
struct Rocks {
    db: rocksdb::DB,
}

#[cfg(feature = "rocksdb")]
impl DurableWrites for Rocks {
    fn write(&self, batch: &[([u8; KEY_BYTES], [u8; VALUE_BYTES])]) -> Result<(), Failure> {
        let mut b = rocksdb::WriteBatch::default();
        for (k, v) in batch {
            b.put(k, v);
        }
        let mut options = rocksdb::WriteOptions::default();
        options.set_sync(true);
        self.db
            .write_opt(b, &options)
            .context(|| "writing a RocksDB batch".to_string())
    }

    fn fsyncs(&self) -> Option<u64> {
        None
    }
}

fn open_engine(name: &str, dir: &Path, args: &WalArgs) -> Result<Box<dyn DurableWrites>, Failure> {
    match name {
        "cairn" => Ok(Box::new(Cairn::open(dir, args.background_merges)?)),
        #[cfg(feature = "fjall")]
        "fjall" => Ok(Box::new(Fjall::open(dir)?)),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            let mut options = rocksdb::Options::default();
            options.create_if_missing(true);
            let db = rocksdb::DB::open(&options, dir).context(|| "opening RocksDB".to_string())?;
            Ok(Box::new(Rocks { db }))
        }
        other => Err(Failure(format!(
            "engine {other:?} is not built into this binary (features: fjall, rocksdb)"
        ))),
    }
}

/// The engines built into this binary, in the order they run.
fn engines() -> Vec<&'static str> {
    let mut out = vec![];
    if cfg!(feature = "fjall") {
        out.push("fjall");
    }
    if cfg!(feature = "rocksdb") {
        out.push("rocksdb");
    }
    out.push("cairn");
    out
}

/// The disk's fsync rate: 128-byte writes each followed by `fdatasync`, for `seconds`, into a
/// file that grows with them (`preallocated` false) or into one made 64 MiB long first (what
/// fjall's journal and Cairn's segments do, so that fdatasync writes no size change).
fn fsync_rate(dir: &Path, seconds: f64, preallocated: bool) -> Result<f64, Failure> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).context(|| "creating the fsync probe".into())?;
    if preallocated {
        file.set_len(64 << 20)
            .context(|| "sizing the fsync probe".into())?;
        file.sync_all()
            .context(|| "sizing the fsync probe".into())?;
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        file.write_all(&[7u8; 128])
            .and_then(|()| file.sync_data())
            .context(|| "fsync probe".to_string())?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(rate)
}

/// Brings the disk to the same state before every measured run: everything written so far (the
/// previous engine's files, their removal) is written back, then a pause.
fn settle() {
    crate::sys::proc::settle_disk(Duration::from_millis(500));
}

/// One measured configuration.
struct Measured {
    batches: u64,
    seconds: f64,
    /// Write-to-durability latency of every batch, in microseconds.
    latencies_us: Histogram<u64>,
    fsyncs: Option<u64>,
    write_bytes: Option<u64>,
}

fn key(thread: u64, i: u64, seed: u64) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    let mut x = seed ^ (thread << 40) ^ i;
    for chunk in k.chunks_mut(8) {
        x = crate::keys::SplitMix64::new(x).next_u64();
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    k
}

fn measure(
    engine: &dyn DurableWrites,
    threads: u64,
    batch: u64,
    seconds: f64,
    seed: u64,
) -> Result<Measured, Failure> {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads as usize + 1);
    let fsyncs_before = engine.fsyncs();
    let io_before = IoCounters::now();
    let (results, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, barrier) = (&stop, &barrier);
                s.spawn(move || -> Result<Histogram<u64>, Failure> {
                    let value = [t as u8; VALUE_BYTES];
                    let mut latencies = latency_histogram()?;
                    let mut i = 0u64;
                    barrier.wait();
                    while !stop.load(Ordering::Relaxed) {
                        let b: Vec<([u8; KEY_BYTES], [u8; VALUE_BYTES])> =
                            (0..batch).map(|j| (key(t, i + j, seed), value)).collect();
                        i += batch;
                        let start = Instant::now();
                        engine.write(&b)?;
                        let us = start.elapsed().as_micros() as u64;
                        latencies
                            .record(us)
                            .map_err(|e| Failure(format!("recording a latency: {e:?}")))?;
                    }
                    Ok(latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        (results, start.elapsed().as_secs_f64())
    });
    let mut latencies_us = latency_histogram()?;
    for r in results {
        let thread = r.map_err(|_| Failure("a writer thread panicked".into()))??;
        latencies_us
            .add(&thread)
            .map_err(|e| Failure(format!("merging the latencies: {e:?}")))?;
    }
    let fsyncs = match (engine.fsyncs(), fsyncs_before) {
        (Some(a), Some(b)) => Some(a - b),
        _ => None,
    };
    Ok(Measured {
        batches: latencies_us.len(),
        seconds: elapsed,
        latencies_us,
        fsyncs,
        write_bytes: IoCounters::since(IoCounters::now(), io_before).map(|c| c.write_bytes),
    })
}

/// An empty latency histogram: three significant digits, growing to whatever range it records
/// (`record`, not `saturating_record`, which would clamp to the range it has).
fn latency_histogram() -> Result<Histogram<u64>, Failure> {
    Histogram::new(3).map_err(|e| Failure(format!("a latency histogram: {e:?}")))
}

/// Latency percentiles of a histogram of microseconds, in milliseconds (all zero when empty).
fn latency_ms(us: &Histogram<u64>) -> Percentiles {
    let ms = |value: u64| value as f64 / 1e3;
    if us.is_empty() {
        return Percentiles::default();
    }
    Percentiles {
        p50: ms(us.value_at_quantile(0.50)),
        p99: ms(us.value_at_quantile(0.99)),
        p999: ms(us.value_at_quantile(0.999)),
        max: ms(us.max()),
    }
}

fn parse_list(text: &str, what: &str) -> Result<Vec<u64>, Failure> {
    text.split(',')
        .map(|p| {
            p.trim()
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Failure(format!("--{what}: {p:?} is not a positive number")))
        })
        .collect()
}

/// `cairn-bench wal`: every configuration on every engine, then the table and the record.
pub fn run(args: &WalArgs) -> Result<(), Failure> {
    let threads = parse_list(&args.threads, "threads")?;
    let batches = parse_list(&args.batch, "batch")?;
    let order: Vec<String> = match &args.engines {
        Some(list) => list.split(',').map(|e| e.trim().to_string()).collect(),
        None => engines().into_iter().map(String::from).collect(),
    };
    crate::in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
        let growing = fsync_rate(dir, args.seconds, false)?;
        let disk = fsync_rate(dir, args.seconds, true)?;
        eprintln!(
            "disk: {disk:.0} fsyncs/s into a preallocated file, {growing:.0} into a growing one \
             (128-byte writes, fdatasync, one thread)"
        );
        let mut rows = Vec::new();
        let mut configuration = 0;
        for &batch in &batches {
            for &t in &threads {
                // Each configuration starts with the next engine: none is always first (or last,
                // after the others' files were written and removed).
                let mut this_order = order.clone();
                this_order.rotate_left(configuration % order.len().max(1));
                configuration += 1;
                for name in &this_order {
                    let name = name.as_str();
                    let sub = dir.join(format!("{name}-{t}-{batch}"));
                    std::fs::create_dir_all(&sub).context(|| "creating a directory".into())?;
                    let engine = open_engine(name, &sub, args)?;
                    settle();
                    let m = measure(&*engine, t, batch, args.seconds, args.common.seed)?;
                    drop(engine);
                    // With --keep, every engine's directory stays, as the option says.
                    if !args.common.keep {
                        std::fs::remove_dir_all(&sub).context(|| "removing a directory".into())?;
                    }
                    let p = latency_ms(&m.latencies_us);
                    let rate = m.batches as f64 / m.seconds;
                    let updates = m.batches * batch;
                    let row = serde_json::json!({
                        "engine": name,
                        "threads": t,
                        "batch": batch,
                        "durable_batches_per_s": rate,
                        "updates_per_s": updates as f64 / m.seconds,
                        "latency_ms": { "p50": p.p50, "p99": p.p99, "max": p.max },
                        "fsyncs_per_s": m.fsyncs.map(|f| f as f64 / m.seconds),
                        "batches_per_fsync": m.fsyncs.map(|f| m.batches as f64 / f.max(1) as f64),
                        "bytes_written_per_update": m.write_bytes.map(|b| b as f64 / updates.max(1) as f64),
                        "ratio_to_disk_fsyncs": rate / disk,
                    });
                    eprintln!(
                        "{name:>8} threads {t:>3} batch {batch:>3}: {rate:>9.0} durable batches/s, \
                         p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms{}",
                        p.p50,
                        p.p99,
                        p.max,
                        m.fsyncs
                            .map(|f| format!(", {:.0} fsyncs/s", f as f64 / m.seconds))
                            .unwrap_or_default()
                    );
                    rows.push(row);
                }
            }
        }
        print_table(disk, growing, &rows);
        if let Some(path) = &args.common.json {
            let doc = serde_json::json!({
                "benchmark": "wal",
                "seconds": args.seconds,
                "disk_fsyncs_per_s": disk,
                "disk_fsyncs_per_s_growing_file": growing,
                "cairn_sync_policy": "Immediate",
                "engine_order": order,
                "cairn_background_merges": args.background_merges,
                "rows": rows,
            });
            std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
                .context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    })
}

fn print_table(disk: f64, growing: f64, rows: &[serde_json::Value]) {
    println!(
        "disk fsyncs/s (fdatasync of 128-byte writes, 1 thread): {disk:.0} into a preallocated \
         file (the ratios' base), {growing:.0} into a growing one"
    );
    println!();
    // Every column left-aligned, as this printout has always had them.
    let mut table = Markdown::left(&[
        "engine",
        "threads",
        "batch",
        "durable batches/s",
        "x disk fsync",
        "p50 ms",
        "p99 ms",
        "max ms",
        "fsyncs/s",
        "batches/fsync",
        "bytes/update",
    ]);
    let num = |v: &serde_json::Value, f: &str| {
        v.as_f64()
            .map_or("n/a".to_string(), |x| format!("{x:.*}", f.len()))
    };
    for row in rows {
        let float = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
        table.row([
            row["engine"].as_str().unwrap_or("").to_string(),
            row["threads"].to_string(),
            row["batch"].to_string(),
            format!("{:.0}", float(&row["durable_batches_per_s"])),
            format!("{:.2}", float(&row["ratio_to_disk_fsyncs"])),
            format!("{:.3}", float(&row["latency_ms"]["p50"])),
            format!("{:.3}", float(&row["latency_ms"]["p99"])),
            format!("{:.3}", float(&row["latency_ms"]["max"])),
            num(&row["fsyncs_per_s"], ""),
            num(&row["batches_per_fsync"], "0"),
            num(&row["bytes_written_per_update"], "0"),
        ]);
    }
    print!("{}", table.render());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The histogram gives the nearest-rank percentiles of its samples, to its three significant
    /// digits.
    #[test]
    fn histogram_percentiles_are_nearest_rank_to_three_digits() {
        let samples_us: Vec<u64> = (1..=2_000u64)
            .map(|i| i * i % 7_919 + 2)
            .chain([250_000, 1_900_000])
            .collect();
        let mut histogram = latency_histogram().unwrap();
        for &us in &samples_us {
            histogram.record(us).unwrap();
        }
        let ms: Vec<f64> = samples_us.iter().map(|&us| us as f64 / 1e3).collect();
        let exact = crate::stats::percentiles(&ms);
        let got = latency_ms(&histogram);
        for (got, exact) in [
            (got.p50, exact.p50),
            (got.p99, exact.p99),
            (got.p999, exact.p999),
            (got.max, exact.max),
        ] {
            assert!((got - exact).abs() <= exact * 1e-3, "{got} vs {exact}");
        }
        assert_eq!(
            latency_ms(&latency_histogram().unwrap()),
            Percentiles::default()
        );
    }
}

//! `cairn-bench ledger-transfer`: what moving a verifiable ledger costs. A Raft snapshot
//! between nodes (issue 48) is the ledger's export stream (`docs/format/ledger-export.md`),
//! written by the leader and imported, proved, by the node that receives it; this measures both
//! ends on one machine.
//!
//! Owns: the workload and its record. Must never touch: the ledger's or the engine's internals
//! (it uses `Ledger` as a user would, and reads the directories' files only to measure them).
//!
//! Method, in a fresh directory:
//!
//! 1. **Load** `--keys` UTxO keys (34 bytes) and values (60 bytes) into table `accounts`, one version per
//!    `--load-batch`, then a checkpoint.
//! 2. **Export**: `Ledger::export_view` and `LedgerExport::write_to` into a file through a
//!    1 MiB buffer, then an fsync of the file. Timed by the clock and by the process's CPU time.
//! 3. **Import**: `Ledger::import_with` of that file (in the page cache, as a node's
//!    received snapshot is) into an empty directory, with every check it makes (checksum, each
//!    table's root, the whole audit, the header's digest) and the source's digest trusted as a
//!    prefix; then a sync of the new ledger. Timed alike. The imported ledger's digest must be
//!    the source's.

use std::io::{BufReader, BufWriter, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use cairn_ledger::{ImportChecks, Ledger, LedgerBatch, LedgerConfig};

use crate::cli::LedgerTransferArgs;
use crate::failure::{Context, Failure};
use crate::keys::{utxo_key, utxo_value};
use crate::ledger_receipts::{cpu_s, in_bench_dir, machine_load, usage};

const ACCOUNTS: &str = "accounts";

/// One end's figures: wall and CPU seconds.
struct Timed {
    wall_s: f64,
    cpu_s: f64,
}

fn timed<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<(T, Timed), Failure> {
    let (start, cpu) = (Instant::now(), cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID));
    let value = f()?;
    let t = Timed {
        wall_s: start.elapsed().as_secs_f64(),
        cpu_s: cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID) - cpu,
    };
    Ok((value, t))
}

/// Runs the benchmark (see the module doc).
pub fn run(args: &LedgerTransferArgs) -> Result<(), Failure> {
    in_bench_dir(args.dir.as_deref(), args.keep, |dir| {
        let started = (crate::sys::now_rfc3339(), machine_load());
        let source_dir = dir.join("source");
        let (source, load) = timed(|| load(args, &source_dir))?;
        eprintln!("loaded {} keys in {:.1} s", args.keys, load.wall_s);
        let source_bytes: u64 = usage(&source_dir)?.values().sum();

        let stream_path = dir.join("ledger.export");
        let (exported, export) = timed(|| {
            let file = std::fs::File::create(&stream_path)
                .context(|| format!("creating {}", stream_path.display()))?;
            let mut out = BufWriter::with_capacity(1 << 20, file);
            let view = source.export_view().context(|| "export view".into())?;
            let summary = view.write_to(&mut out).context(|| "export".into())?;
            let file = out
                .into_inner()
                .map_err(|e| Failure(format!("export: {e}")))?;
            file.sync_all().context(|| "fsync of the export".into())?;
            Ok(summary)
        })?;
        eprintln!(
            "exported {} entries, {} bytes, in {:.2} s",
            exported.entries, exported.bytes, export.wall_s
        );

        let target_dir = dir.join("imported");
        let ((imported, summary), import) = timed(|| {
            let file = std::fs::File::open(&stream_path)
                .context(|| format!("opening {}", stream_path.display()))?;
            let mut input = BufReader::with_capacity(1 << 20, file);
            let checks = ImportChecks::trusting([exported.digest]);
            let fs: Arc<dyn cairn::fs::FileSystem> = Arc::new(cairn::fs::RealFs);
            let got = Ledger::import_with(
                fs,
                &target_dir,
                config(),
                cairn::SessionOptions::default(),
                &mut input,
                &checks,
            )
            .context(|| "import".into())?;
            got.0.sync().context(|| "sync of the import".into())?;
            Ok(got)
        })?;
        if imported.digest() != source.digest() || summary.entries != exported.entries {
            return Err(Failure(format!(
                "the import is not the source: {} entries of {}, digests {:?} and {:?}",
                summary.entries,
                exported.entries,
                imported.digest(),
                source.digest()
            )));
        }
        imported.close();
        let imported_bytes: u64 = usage(&target_dir)?.values().sum();
        source.close();

        let mb = exported.bytes as f64 / 1e6;
        let per_s = |t: &Timed| exported.entries as f64 / t.wall_s;
        println!(
            "ledger-transfer: {} keys, {} stored entries, stream {:.1} MB ({:.1} bytes per entry)",
            args.keys,
            exported.entries,
            mb,
            exported.bytes as f64 / exported.entries as f64
        );
        for (name, t) in [("export", &export), ("import", &import)] {
            println!(
                "  {name}: {:.2} s ({:.2} s CPU), {:.1} MB/s, {:.0} entries/s",
                t.wall_s,
                t.cpu_s,
                mb / t.wall_s,
                per_s(t)
            );
        }
        println!(
            "  directories: source {:.1} MB, imported {:.1} MB; digests equal",
            source_bytes as f64 / 1e6,
            imported_bytes as f64 / 1e6
        );
        if let Some(path) = &args.json {
            let end = |t: &Timed| {
                serde_json::json!({
                    "wall_s": t.wall_s, "cpu_s": t.cpu_s,
                    "mb_per_s": mb / t.wall_s, "entries_per_s": per_s(t),
                })
            };
            let doc = serde_json::json!({
                "benchmark": "ledger-transfer",
                "started": started.0,
                "load_at_start": started.1,
                "load_at_end": machine_load(),
                "args": {"keys": args.keys, "load_batch": args.load_batch, "seed": args.seed},
                "load_s": load.wall_s,
                "entries": exported.entries,
                "stream_bytes": exported.bytes,
                "export": end(&export),
                "import": end(&import),
                "source_dir_bytes": source_bytes,
                "imported_dir_bytes": imported_bytes,
            });
            std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
                .context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    })
}

fn config() -> LedgerConfig {
    LedgerConfig::new([ACCOUNTS])
}

/// A ledger in `dir` holding `args.keys` keys, checkpointed.
fn load(args: &LedgerTransferArgs, dir: &Path) -> Result<Ledger, Failure> {
    let ledger =
        Ledger::open(dir, config()).context(|| format!("opening a ledger in {}", dir.display()))?;
    let mut first = 0;
    while first < args.keys {
        let last = (first + args.load_batch).min(args.keys);
        let mut batch = LedgerBatch::new();
        for id in first..last {
            batch.insert(ACCOUNTS, utxo_key(id, args.seed), utxo_value(id));
        }
        ledger
            .write(&batch)
            .context(|| format!("loading keys {first} to {last}"))?;
        first = last;
        eprint!("\rloading: {first} of {} keys", args.keys);
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    ledger.checkpoint().context(|| "checkpoint".into())?;
    Ok(ledger)
}

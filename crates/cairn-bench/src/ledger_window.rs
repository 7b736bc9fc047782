//! `cairn-bench ledger-window`: what the window of versions kept provable
//! (`LedgerConfig::history`, issue 45) costs: space per kept version, on disk and in undo
//! records, the commit time it adds, and the time an open spends rebuilding it.
//!
//! Owns: the workload and its record. Must never touch: the ledger's or the engine's internals
//! (it uses `Ledger` as a user would, and reads the directory's files only to measure them).
//!
//! Method: two sides, each a ledger in a fresh directory with one table `accounts`, run one
//! after the other with the same seed (the same keys, values and choices): side **W** with
//! `--window` versions kept, side **0** with none. On each side:
//!
//! 1. **Load** `--keys` keys, one version per `--load-batch`, then a checkpoint; the
//!    directory's allocated bytes (hard links once) are the baseline.
//! 2. **Commits**: `--commits` versions of `--keys-per-commit` random present keys each (new
//!    values), then one sync. Timed by the clock and by the process's CPU time.
//! 3. **Space**: allocated bytes after the commits, and after a checkpoint; the window's own
//!    figures (`Ledger::window`: undo records and their bytes, the trie segment files the kept
//!    versions reach, and those files' bytes).
//! 4. **Reopen**: the ledger closed and opened again, timed (side W rebuilds its window from
//!    the undo records, side 0 has nothing to rebuild); the window after it; allocated bytes
//!    again. With `--check`, every key read at the oldest kept version and at the newest,
//!    with receipts verified against the digest, values compared with the model.
//!
//! The window's cost per kept version is the difference between the sides divided by the
//! versions the window keeps (`min(--window, --commits)`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use cairn_ledger::{Ledger, LedgerBatch, LedgerConfig};
use cairn_proof::{verify_receipt_at, Claim, TableClaims};

use crate::cli::LedgerWindowArgs;
use crate::failure::{Context, Failure};
use crate::keys::{utxo_key, SplitMix64, KEY_BYTES, VALUE_BYTES};
use crate::ledger_receipts::{cpu_s, in_bench_dir, machine_load, usage};

const ACCOUNTS: &str = "accounts";

/// A value naming its key and the version that wrote it.
fn value(id: u64, version: u64) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    v[..8].copy_from_slice(&id.to_be_bytes());
    v[8..16].copy_from_slice(&version.to_be_bytes());
    v
}

/// What one side measured.
struct Side {
    window: u64,
    load_s: f64,
    baseline: BTreeMap<String, u64>,
    commits_s: f64,
    commits_cpu_s: f64,
    after: BTreeMap<String, u64>,
    checkpointed: BTreeMap<String, u64>,
    info: cairn_ledger::WindowInfo,
    trie_file_bytes: u64,
    reopen_s: f64,
    reopened_info: cairn_ledger::WindowInfo,
    reopened: BTreeMap<String, u64>,
    checked_reads: u64,
}

/// One of a side's allocation figures.
type Usage = fn(&Side) -> &BTreeMap<String, u64>;

fn total(m: &BTreeMap<String, u64>) -> u64 {
    m.values().sum()
}

/// Runs the benchmark (see the module doc).
pub fn run(args: &LedgerWindowArgs) -> Result<(), Failure> {
    if args.keys_per_commit == 0 || args.keys_per_commit > args.keys {
        return Err(Failure("--keys-per-commit must be 1 to --keys".into()));
    }
    in_bench_dir(args.dir.as_deref(), args.keep, |dir| {
        let started = (crate::sys::now_rfc3339(), machine_load());
        let kept = side(args, &dir.join("window"), args.window)?;
        let none = side(args, &dir.join("none"), 0)?;
        print(args, &kept, &none);
        if let Some(path) = &args.json {
            let doc = serde_json::json!({
                "benchmark": "ledger-window",
                "started": started.0,
                "load_at_start": started.1,
                "load_at_end": machine_load(),
                "args": {
                    "keys": args.keys, "load_batch": args.load_batch, "window": args.window,
                    "commits": args.commits, "keys_per_commit": args.keys_per_commit,
                    "seed": args.seed, "check": args.check,
                },
                "sides": [side_json(&kept), side_json(&none)],
                "per_kept_version": per_version(args, &kept, &none),
            });
            std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
                .context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    })
}

fn side(args: &LedgerWindowArgs, dir: &Path, window: u64) -> Result<Side, Failure> {
    let config = || LedgerConfig::new([ACCOUNTS]).history(window);
    let ledger =
        Ledger::open(dir, config()).context(|| format!("opening a ledger in {}", dir.display()))?;
    let mut model: Vec<u64> = vec![0; args.keys as usize];
    let start = Instant::now();
    let mut first = 0;
    while first < args.keys {
        let last = (first + args.load_batch).min(args.keys);
        let mut batch = LedgerBatch::new();
        for id in first..last {
            batch.insert(ACCOUNTS, utxo_key(id, args.seed), value(id, 0));
        }
        ledger
            .write(&batch)
            .context(|| format!("loading keys {first} to {last}"))?;
        first = last;
    }
    ledger.checkpoint().context(|| "checkpoint".into())?;
    let load_s = start.elapsed().as_secs_f64();
    let baseline = usage(dir)?;
    eprintln!(
        "window {window}: loaded {} keys in {load_s:.1} s",
        args.keys
    );

    let mut rng = SplitMix64::new(args.seed ^ 0x77696e646f77);
    let (start, cpu) = (Instant::now(), cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID));
    for c in 0..args.commits {
        let version = ledger.version() + 1;
        let mut batch = LedgerBatch::new();
        for _ in 0..args.keys_per_commit {
            let id = rng.below(args.keys);
            batch.insert(ACCOUNTS, utxo_key(id, args.seed), value(id, version));
            model[id as usize] = version;
        }
        ledger
            .write(&batch)
            .context(|| format!("commit {c}"))?
            .ok_or_else(|| Failure("a commit made no version".into()))?;
        if (c + 1) % 10_000 == 0 {
            eprintln!("window {window}: {} commits", c + 1);
        }
    }
    ledger.sync().context(|| "sync".into())?;
    let commits_s = start.elapsed().as_secs_f64();
    let commits_cpu_s = cpu_s(libc::CLOCK_PROCESS_CPUTIME_ID) - cpu;
    let after = usage(dir)?;
    ledger.checkpoint().context(|| "checkpoint".into())?;
    ledger
        .remove_released_files()
        .context(|| "removing released files".into())?;
    let checkpointed = usage(dir)?;
    let info = ledger.window().context(|| "window".into())?;
    let trie_file_bytes = file_bytes(&info.trie_files)?;
    ledger.close();
    drop(ledger);

    let start = Instant::now();
    let ledger = Ledger::open(dir, config()).context(|| "reopening".into())?;
    let reopen_s = start.elapsed().as_secs_f64();
    let reopened_info = ledger.window().context(|| "window".into())?;
    let reopened = usage(dir)?;
    let mut checked_reads = 0;
    if args.check {
        checked_reads = check(args, &ledger, &reopened_info, &model)?;
    }
    ledger.close();
    eprintln!(
        "window {window}: {} commits in {commits_s:.1} s, reopened in {reopen_s:.2} s",
        args.commits
    );
    Ok(Side {
        window,
        load_s,
        baseline,
        commits_s,
        commits_cpu_s,
        after,
        checkpointed,
        info,
        trie_file_bytes,
        reopen_s,
        reopened_info,
        reopened,
        checked_reads,
    })
}

fn file_bytes(files: &[std::path::PathBuf]) -> Result<u64, Failure> {
    let mut bytes = 0;
    for f in files {
        use std::os::unix::fs::MetadataExt;
        bytes += std::fs::metadata(f)
            .context(|| format!("measuring {}", f.display()))?
            .blocks()
            * 512;
    }
    Ok(bytes)
}

/// Reads every key at the oldest kept version and at the newest, checks the values against
/// the model (the version that last wrote each key, at or before the version read) and every
/// receipt against the digest.
fn check(
    args: &LedgerWindowArgs,
    ledger: &Ledger,
    info: &cairn_ledger::WindowInfo,
    model: &[u64],
) -> Result<u64, Failure> {
    // The model knows each key's last writer only: at the oldest kept version, a key written
    // after it is checked for having been written at or before it (its value names a version).
    let digest = ledger.digest();
    let mut reads = 0;
    for version in [info.oldest, info.newest] {
        let ids: Vec<u64> = (0..args.keys).collect();
        for chunk in ids.chunks(1000) {
            let keys: Vec<[u8; KEY_BYTES]> =
                chunk.iter().map(|&id| utxo_key(id, args.seed)).collect();
            let read = ledger
                .read_at(version, &[(ACCOUNTS, &keys[..])])
                .context(|| format!("reading at version {version}"))?;
            let values = &read.values[0];
            let claims: Vec<Claim<'_>> = keys
                .iter()
                .zip(values)
                .map(|(k, v)| Claim::answer(k, v.as_deref()))
                .collect();
            verify_receipt_at(
                &read.receipt,
                &[TableClaims {
                    table: ACCOUNTS,
                    claims: &claims,
                }],
                &digest,
            )
            .map_err(|e| Failure(format!("a receipt at version {version} fails: {e}")))?;
            for (&id, v) in chunk.iter().zip(values) {
                let v = v
                    .as_deref()
                    .ok_or_else(|| Failure(format!("key {id} absent at {version}")))?;
                let wrote = u64::from_be_bytes(v[8..16].try_into().expect("8 bytes"));
                let last = model[id as usize];
                let ok = if version == info.newest {
                    wrote == last
                } else {
                    wrote <= version && (last <= version) == (wrote == last)
                };
                if !ok {
                    return Err(Failure(format!(
                        "key {id} at version {version} was written at {wrote}, its last write \
                         is {last}"
                    )));
                }
                reads += 1;
            }
        }
    }
    Ok(reads)
}

fn side_json(s: &Side) -> serde_json::Value {
    let info = |i: &cairn_ledger::WindowInfo| {
        serde_json::json!({
            "oldest": i.oldest, "newest": i.newest, "undo_versions": i.undo_versions,
            "undo_records": i.undo_records, "undo_bytes": i.undo_bytes,
            "trie_files": i.trie_files.len(),
        })
    };
    serde_json::json!({
        "window": s.window,
        "load_s": s.load_s,
        "allocated_baseline": s.baseline,
        "commits_s": s.commits_s,
        "commits_cpu_s": s.commits_cpu_s,
        "allocated_after_commits": s.after,
        "allocated_after_checkpoint": s.checkpointed,
        "window_info": info(&s.info),
        "trie_file_bytes": s.trie_file_bytes,
        "reopen_s": s.reopen_s,
        "window_info_reopened": info(&s.reopened_info),
        "allocated_reopened": s.reopened,
        "checked_reads": s.checked_reads,
    })
}

fn per_version(args: &LedgerWindowArgs, w: &Side, z: &Side) -> serde_json::Value {
    let kept = args.window.min(args.commits).max(1) as f64;
    let diff = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| {
        (total(a) as f64 - total(b) as f64) / kept
    };
    serde_json::json!({
        "versions_kept": kept,
        "allocated_after_commits": diff(&w.after, &z.after),
        "allocated_after_checkpoint": diff(&w.checkpointed, &z.checkpointed),
        "allocated_after_reopen": diff(&w.reopened, &z.reopened),
        "undo_bytes": w.info.undo_bytes as f64 / kept,
        "trie_file_bytes": (w.trie_file_bytes as f64 - z.trie_file_bytes as f64) / kept,
        "commit_ms_w": w.commits_s * 1e3 / args.commits as f64,
        "commit_ms_0": z.commits_s * 1e3 / args.commits as f64,
        "commit_cpu_ratio": w.commits_cpu_s / z.commits_cpu_s.max(1e-9),
        "reopen_s_w": w.reopen_s,
        "reopen_s_0": z.reopen_s,
        "reopen_ms_per_rebuilt_version":
            (w.reopen_s - z.reopen_s) * 1e3 / (w.reopened_info.newest - w.reopened_info.oldest).max(1) as f64,
    })
}

fn print(args: &LedgerWindowArgs, w: &Side, z: &Side) {
    let p = per_version(args, w, z);
    println!(
        "ledger-window: {} keys, {} commits of {} key(s), window {}",
        args.keys, args.commits, args.keys_per_commit, args.window
    );
    println!("| figure | window {} | window 0 |", w.window);
    println!("|---|--:|--:|");
    let mib = |m: &BTreeMap<String, u64>| total(m) as f64 / (1 << 20) as f64;
    let rows: [(&str, Usage); 4] = [
        ("after load", |s| &s.baseline),
        ("after commits", |s| &s.after),
        ("after checkpoint", |s| &s.checkpointed),
        ("after reopen", |s| &s.reopened),
    ];
    for (when, of) in rows {
        println!(
            "| allocated MiB {when} | {:.1} | {:.1} |",
            mib(of(w)),
            mib(of(z))
        );
    }
    println!(
        "| undo records (bytes) | {} ({}) | {} ({}) |",
        w.info.undo_records, w.info.undo_bytes, z.info.undo_records, z.info.undo_bytes
    );
    println!(
        "| trie files reached (MiB) | {} ({:.1}) | {} ({:.1}) |",
        w.info.trie_files.len(),
        w.trie_file_bytes as f64 / (1 << 20) as f64,
        z.info.trie_files.len(),
        z.trie_file_bytes as f64 / (1 << 20) as f64
    );
    println!(
        "| commits: s (CPU s) | {:.2} ({:.2}) | {:.2} ({:.2}) |",
        w.commits_s, w.commits_cpu_s, z.commits_s, z.commits_cpu_s
    );
    println!("| reopen s | {:.3} | {:.3} |", w.reopen_s, z.reopen_s);
    println!(
        "| window after reopen | {}..={} | {}..={} |",
        w.reopened_info.oldest,
        w.reopened_info.newest,
        z.reopened_info.oldest,
        z.reopened_info.newest
    );
    println!("per kept version: {p}");
}

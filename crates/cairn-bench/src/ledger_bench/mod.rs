//! `cairn-bench ledger`: LedgerBench's workloads on Cairn's verifiable ledger and on immudb
//! v1.11.1 side by side (issue 46), chosen with `--workloads`:
//!
//! - **smallbank** (workload 1): two tables, `savings` and `checking`, the six transactions
//!   drawn uniformly (or Zipfian), concurrent clients, every commit durable before it is
//!   acknowledged on both engines; every answer verified before the client's next transaction
//!   (immediate), kept as a promise and verified in batches by a verifier every `--delays` ms
//!   (deferred), or not at all (none); with `--check` every balance compared with a model that
//!   replays the committed transactions in each engine's commit order;
//! - **sweep** (workload 3): deferred verification at each of `--sweep-delays`;
//! - **range** (workload 2, `range`): ranges of 10 to 20 keys of an ordered table, verified
//!   with complete range proofs (Cairn) or each entry's inclusion (immudb);
//! - **audit** (workload 4, `audit`): SmallBank with an auditor checking each block of about
//!   `--audit-block` transactions, and the full audit at the end;
//! - **storage** (workload 5, `storage`): bytes on disk as records grow.
//!
//! Owns: the command's options, its order of runs, the check, the printed tables and the JSON
//! record. May call: `smallbank` (the workload and its model), `cairn_side`, `range`, `audit`,
//! `storage` (Cairn's runs), `immudb` (the Go peer's runs). Must never touch: the engines'
//! internals.
//!
//! The protocol: for each cell (mode and client count), immudb then Cairn, each in a fresh
//! directory: load, settle the disk (sync, pause), run. Both receive the same streams: client
//! `c`'s operations come from one generator seeded with `(seed, c)`. Cairn runs each cell for
//! `--seconds`; immudb (about a hundred transactions per second here, its group commit waits
//! 20 ms) runs each client's first `--peer-transactions / clients` operations. Both fsync
//! before a transaction is acknowledged: immudb `Synced` with its default 20 ms group commit,
//! Cairn `SyncPolicy::Immediate` (concurrent waiters share fsyncs) with group commit
//! (`--group`: concurrent transactions that commute share a version).

mod audit;
mod cairn_side;
pub(crate) mod immudb;
mod range;
mod report;
pub mod smallbank;
mod storage;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::cli::{AuthHashArg, LedgerArgs};
use crate::failure::{Context, Failure};
use crate::report::table::Markdown;
use smallbank::{Kind, Model, Op};

/// How clients verify answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// Every answer checked before the client's next transaction.
    Immediate,
    /// Answers kept as promises, verified in batches by a verifier that wakes every `delay_ms`
    /// (LedgerBench's deferred verification).
    Deferred {
        /// The verifier's period, ms.
        delay_ms: u64,
    },
    /// No verification (the cost of verification, by difference).
    None,
}

impl Verify {
    /// The modes `s` names: `deferred` stands for one mode per delay of `delays`.
    fn parse_all(s: &str, delays: &[u64]) -> Result<Vec<Verify>, Failure> {
        match s.trim() {
            "immediate" => Ok(vec![Verify::Immediate]),
            "none" => Ok(vec![Verify::None]),
            "deferred" => Ok(delays
                .iter()
                .map(|&delay_ms| Verify::Deferred { delay_ms })
                .collect()),
            other => Err(Failure(format!(
                "--verify: {other:?} is not immediate, deferred or none"
            ))),
        }
    }

    /// The mode's name in the peer's protocol and the records.
    pub fn name(self) -> &'static str {
        match self {
            Verify::Immediate => "immediate",
            Verify::Deferred { .. } => "deferred",
            Verify::None => "none",
        }
    }

    /// The deferred verifier's period (ms), for deferred verification.
    pub fn delay_ms(self) -> Option<u64> {
        match self {
            Verify::Deferred { delay_ms } => Some(delay_ms),
            _ => None,
        }
    }

    /// The mode as printed: `deferred 20 ms` for a deferred mode.
    pub fn label(self) -> String {
        match self {
            Verify::Deferred { delay_ms } => format!("deferred {delay_ms} ms"),
            other => other.name().to_string(),
        }
    }
}

/// Latency quantiles of one transaction type, in µs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quantiles {
    count: u64,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

/// What a deferred verifier measured.
#[derive(Clone, Debug, Default)]
pub struct DeferredFigures {
    /// Non-empty batches verified.
    pub batches: u64,
    /// Promises (one key each) verified.
    pub promises: u64,
    /// Versions proved (one receipt each; immudb: transactions proved).
    pub versions_proved: u64,
    /// Latency from a promise's making to the end of the batch that verified it, ms.
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    /// Seconds the verifier spent verifying (proving included).
    pub busy_seconds: f64,
    /// Bytes of the receipts and consistency proofs checked.
    pub proof_bytes: u64,
    /// Promises of values read, and of values written.
    pub reads: u64,
    pub writes: u64,
}

impl DeferredFigures {
    /// Promises per batch.
    pub fn keys_per_batch(&self) -> f64 {
        self.promises as f64 / self.batches.max(1) as f64
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "batches": self.batches,
            "promises": self.promises,
            "keys_per_batch_mean": self.keys_per_batch(),
            "versions_proved": self.versions_proved,
            "verify_latency_ms_p50": self.latency_ms_p50,
            "verify_latency_ms_p99": self.latency_ms_p99,
            "verify_latency_ms_max": self.latency_ms_max,
            "busy_seconds": self.busy_seconds,
            "proof_bytes": self.proof_bytes,
            "proof_bytes_per_key": self.proof_bytes as f64 / self.promises.max(1) as f64,
        })
    }
}

/// What one run measured, on either engine.
pub struct Figures {
    /// Seconds of the run.
    pub seconds: f64,
    /// Transactions done (committed, read-only and aborted).
    pub transactions: u64,
    /// Of which aborted by their own rules (no write).
    pub aborted: u64,
    /// Attempts run again after a conflict (immudb; Cairn retries inside `transact`).
    pub conflicts: u64,
    /// Values read whose proofs the client verified.
    pub verified_reads: u64,
    /// Values written whose proofs the client verified.
    pub verified_writes: u64,
    /// Bytes of every proof the clients checked.
    pub proof_bytes: u64,
    /// Bytes of the proofs that verified reads.
    pub read_proof_bytes: u64,
    /// Bytes on disk after the run (the engine's directory).
    pub disk_bytes: Option<u64>,
    /// Versions (Cairn) or transactions (immudb) the engine committed during the run: with
    /// group commit, fewer than the writing transactions.
    pub versions: u64,
    /// Writing transactions committed across shards through a router (`serve` with shards):
    /// their reads verified, their writes proved only by later reads.
    pub across_shards: u64,
    /// The deferred verifier's figures (deferred runs only).
    pub deferred: Option<DeferredFigures>,
    /// The block auditor's figures (the audit workload only).
    pub audit: Option<audit::AuditFigures>,
    hist: BTreeMap<Kind, Histogram<u64>>,
    quantiles: BTreeMap<Kind, Quantiles>,
}

impl Figures {
    /// Nothing counted yet, over a run of `seconds`.
    pub fn new(seconds: f64) -> Figures {
        Figures {
            seconds,
            transactions: 0,
            aborted: 0,
            conflicts: 0,
            verified_reads: 0,
            verified_writes: 0,
            proof_bytes: 0,
            read_proof_bytes: 0,
            disk_bytes: None,
            versions: 0,
            across_shards: 0,
            deferred: None,
            audit: None,
            hist: BTreeMap::new(),
            quantiles: BTreeMap::new(),
        }
    }

    /// Merges a client's latencies of `kind` (µs).
    pub fn add_latencies(&mut self, kind: Kind, h: &Histogram<u64>) -> Result<(), Failure> {
        match self.hist.get_mut(&kind) {
            Some(mine) => mine
                .add(h)
                .map_err(|e| Failure(format!("merging histograms: {e}"))),
            None => {
                self.hist.insert(kind, h.clone());
                Ok(())
            }
        }
    }

    /// Sets `kind`'s quantiles as the peer reported them (µs).
    pub fn add_quantiles(
        &mut self,
        kind: Kind,
        count: u64,
        p50: f64,
        p99: f64,
        p999: f64,
        max: f64,
    ) {
        self.quantiles.insert(
            kind,
            Quantiles {
                count,
                p50,
                p99,
                p999,
                max,
            },
        );
    }

    /// Every type's quantiles (from the merged histograms where there are some).
    fn per_kind(&self) -> BTreeMap<Kind, Quantiles> {
        let mut out = self.quantiles.clone();
        for (kind, h) in &self.hist {
            let q = |q: f64| h.value_at_quantile(q) as f64;
            out.insert(
                *kind,
                Quantiles {
                    count: h.len(),
                    p50: q(0.5),
                    p99: q(0.99),
                    p999: q(0.999),
                    max: h.max() as f64,
                },
            );
        }
        out
    }

    pub(crate) fn rate(&self) -> f64 {
        self.transactions as f64 / self.seconds.max(1e-9)
    }

    fn bytes_per_read(&self) -> f64 {
        self.read_proof_bytes as f64 / self.verified_reads.max(1) as f64
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        let per_kind: serde_json::Map<String, serde_json::Value> = self
            .per_kind()
            .iter()
            .map(|(k, q)| {
                (
                    k.name().to_string(),
                    serde_json::json!({
                        "count": q.count, "p50_us": q.p50, "p99_us": q.p99,
                        "p999_us": q.p999, "max_us": q.max,
                    }),
                )
            })
            .collect();
        serde_json::json!({
            "seconds": self.seconds,
            "transactions": self.transactions,
            "transactions_per_s": self.rate(),
            "aborted": self.aborted,
            "conflict_retries": self.conflicts,
            "verified_reads": self.verified_reads,
            "verified_writes": self.verified_writes,
            "proof_bytes": self.proof_bytes,
            "proof_bytes_per_verified_read": self.bytes_per_read(),
            "disk_bytes": self.disk_bytes,
            "versions": self.versions,
            "across_shards": self.across_shards,
            "deferred": self.deferred.as_ref().map(DeferredFigures::json),
            "audit": self.audit.as_ref().map(audit::AuditFigures::json),
            "per_type": per_kind,
        })
    }
}

/// Replays `log` (committed writing transactions in commit order) on a model and compares
/// every balance with `balances`; returns the model's money.
pub(crate) fn check_balances(
    engine: &str,
    accounts: u64,
    log: &[Op],
    balances: &[(i64, i64)],
) -> Result<i64, Failure> {
    let mut model = Model::new(accounts);
    for op in log {
        if !model.apply(op) {
            return Err(Failure(format!(
                "{engine}: {op:?} committed, but in commit order the model aborts it or it \
                 writes nothing"
            )));
        }
    }
    let mut mismatches = 0;
    for (a, &(s, c)) in balances.iter().enumerate() {
        let a = a as u64;
        let want = (
            model.get(smallbank::Key::Savings(a)),
            model.get(smallbank::Key::Checking(a)),
        );
        if (s, c) != want {
            if mismatches < 5 {
                eprintln!(
                    "{engine}: account {a} holds {:?}, the model {want:?}",
                    (s, c)
                );
            }
            mismatches += 1;
        }
    }
    if mismatches > 0 {
        return Err(Failure(format!(
            "{engine}: {mismatches} accounts differ from the model"
        )));
    }
    Ok(model.total())
}

fn list<T>(
    s: &str,
    what: &str,
    parse: impl Fn(&str) -> Result<T, Failure>,
) -> Result<Vec<T>, Failure> {
    let out: Vec<T> = s.split(',').map(parse).collect::<Result<_, _>>()?;
    if out.is_empty() {
        return Err(Failure(format!("{what}: empty")));
    }
    Ok(out)
}

/// One row of the results.
struct Row {
    engine: &'static str,
    verify: Verify,
    clients: u64,
    load_seconds: f64,
    figures: Figures,
    /// The money at the end (checked against the model when `--check`).
    money: Option<i64>,
}

/// The workloads `--workloads` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    SmallBank,
    Sweep,
    Range,
    Audit,
    Storage,
}

fn parse_workload(s: &str) -> Result<Workload, Failure> {
    match s.trim() {
        "smallbank" => Ok(Workload::SmallBank),
        "sweep" => Ok(Workload::Sweep),
        "range" => Ok(Workload::Range),
        "audit" => Ok(Workload::Audit),
        "storage" => Ok(Workload::Storage),
        other => Err(Failure(format!(
            "--workloads: {other:?} is not smallbank, sweep, range, audit or storage"
        ))),
    }
}

fn parse_delay(d: &str) -> Result<u64, Failure> {
    d.trim()
        .parse::<u64>()
        .ok()
        .filter(|&n| (1..=60_000).contains(&n))
        .ok_or_else(|| Failure(format!("a delay: {d:?} is not in 1..=60000 ms")))
}

pub fn run(args: &LedgerArgs) -> Result<(), Failure> {
    let workloads = list(&args.workloads, "--workloads", parse_workload)?;
    let clients = list(&args.clients, "--clients", |p| {
        p.trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| (1..=4096).contains(&n))
            .ok_or_else(|| Failure(format!("--clients: {p:?} is not in 1..=4096")))
    })?;
    let delays = list(&args.delays, "--delays", parse_delay)?;
    let sweep_delays = list(&args.sweep_delays, "--sweep-delays", parse_delay)?;
    let modes: Vec<Verify> = list(&args.verify, "--verify", |m| Verify::parse_all(m, &delays))?
        .into_iter()
        .flatten()
        .collect();
    let engines = list(&args.engines, "--engines", |e| match e.trim() {
        "cairn" => Ok("cairn"),
        "immudb" => Ok("immudb"),
        other => Err(Failure(format!(
            "--engines: {other:?} is not cairn or immudb"
        ))),
    })?;
    let storage_records = list(&args.storage_records, "--storage-records", |r| {
        r.trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| Failure(format!("--storage-records: {r:?} is not a positive count")))
    })?;
    if storage_records.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Failure("--storage-records must increase".into()));
    }
    if args.accounts == 0 {
        return Err(Failure("--accounts must be positive".into()));
    }
    if !(1..=4096).contains(&args.sweep_clients) {
        return Err(Failure("--sweep-clients must be in 1..=4096".into()));
    }
    let peer = if engines.contains(&"immudb") {
        Some(immudb::peer_binary(args.peer.as_deref())?)
    } else {
        None
    };
    let started = crate::sys::now_rfc3339();
    let seed = args.common.seed;
    let has = |w: Workload| workloads.contains(&w);
    let (rows, sweep, audits, range_rows, growth) =
        crate::in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
            let mut cells: Vec<(Verify, u64)> = Vec::new();
            if has(Workload::SmallBank) {
                for &verify in &modes {
                    cells.extend(clients.iter().map(|&c| (verify, c)));
                }
            }
            let sweep_from = cells.len();
            if has(Workload::Sweep) {
                cells.extend(
                    sweep_delays
                        .iter()
                        .map(|&delay_ms| (Verify::Deferred { delay_ms }, args.sweep_clients)),
                );
            }
            let audit_from = cells.len();
            if has(Workload::Audit) {
                cells.push((Verify::None, args.sweep_clients));
            }
            let mut rows = Vec::new();
            for (i, &(verify, c)) in cells.iter().enumerate() {
                for &engine in ["immudb", "cairn"].iter().filter(|e| engines.contains(e)) {
                    let sub = dir.join(format!(
                        "{engine}-{}-{}-{c}",
                        verify.name(),
                        verify.delay_ms().unwrap_or(0)
                    ));
                    std::fs::create_dir_all(&sub).context(|| "creating a directory".into())?;
                    let audit_block = if i >= audit_from { args.audit_block } else { 0 };
                    let row = match (engine, &peer) {
                        ("immudb", Some(binary)) => {
                            run_immudb(args, binary, &sub, verify, c, seed, audit_block)?
                        }
                        _ => run_cairn(args, &sub, verify, c, seed, audit_block)?,
                    };
                    if let Some(a) = &row.figures.audit {
                        eprintln!(
                            "audit: {engine}: {} blocks of {:.0} transactions, check p50 {:.2} \
                             ms, p99 {:.2} ms; full audit {:.2} s",
                            a.blocks,
                            a.transactions as f64 / a.blocks.max(1) as f64,
                            a.verify_ms_p50,
                            a.verify_ms_p99,
                            a.full_seconds
                        );
                    }
                    eprintln!(
                        "{}{engine}, {} verification, {c} clients: {:.0} transactions/s over \
                     {:.1} s, {} versions, {} aborted, {:.0} proof bytes per verified read{}",
                        if i >= sweep_from { "sweep: " } else { "" },
                        verify.label(),
                        row.figures.rate(),
                        row.figures.seconds,
                        row.figures.versions,
                        row.figures.aborted,
                        row.figures.bytes_per_read(),
                        if args.check {
                            ", every balance checked"
                        } else {
                            ""
                        }
                    );
                    std::fs::remove_dir_all(&sub).context(|| "removing a directory".into())?;
                    let kind = if i >= audit_from {
                        2
                    } else {
                        u8::from(i >= sweep_from)
                    };
                    rows.push((kind, row));
                }
            }
            let range_rows = if has(Workload::Range) {
                run_ranges(args, dir, &engines, peer.as_deref(), &modes, &clients, seed)?
            } else {
                Vec::new()
            };
            let growth = if has(Workload::Storage) {
                run_storage(args, dir, &engines, peer.as_deref(), &storage_records)?
            } else {
                Vec::new()
            };
            let (audits, rows): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(k, _)| *k == 2);
            let (sweep, rows): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(k, _)| *k == 1);
            Ok((
                rows.into_iter().map(|(_, r)| r).collect::<Vec<Row>>(),
                sweep.into_iter().map(|(_, r)| r).collect::<Vec<Row>>(),
                audits.into_iter().map(|(_, r)| r).collect::<Vec<Row>>(),
                range_rows,
                growth,
            ))
        })?;
    if !rows.is_empty() {
        print_table(args, &rows);
    }
    if !sweep.is_empty() {
        println!();
        println!(
            "Delay sweep: deferred verification, {} clients",
            args.sweep_clients
        );
        print_table(args, &sweep);
    }
    if !audits.is_empty() {
        println!();
        print_audits(args, &audits);
    }
    if !range_rows.is_empty() {
        println!();
        print_ranges(args, &range_rows);
    }
    if !growth.is_empty() {
        println!();
        print_growth(&growth);
    }
    {
        let row_json = |r: &Row| {
            serde_json::json!({
                "engine": r.engine,
                "verify": r.verify.name(),
                "deferred_delay_ms": r.verify.delay_ms(),
                "clients": r.clients,
                "load_seconds": r.load_seconds,
                "money": r.money,
                "figures": r.figures.json(),
            })
        };
        let doc = serde_json::json!({
            "benchmark": "ledger",
            "workloads": workloads.iter().map(|w| format!("{w:?}").to_lowercase()).collect::<Vec<_>>(),
            "started": started,
            "finished": crate::sys::now_rfc3339(),
            "accounts": args.accounts,
            "zipf": args.zipf,
            "seed": seed,
            "cairn_seconds": args.seconds,
            "cairn_group": args.group,
            "cairn_window_deferred": args.window,
            "peer_transactions": args.peer_transactions,
            "checked": args.check,
            "cairn_trie_hash": format!("{:?}", args.hash),
            "durability": "every transaction fsynced before it is acknowledged: Cairn SyncPolicy::Immediate, immudb Synced with its 20 ms group commit",
            "rows": rows.iter().map(row_json).collect::<Vec<_>>(),
            "sweep": sweep.iter().map(row_json).collect::<Vec<_>>(),
            "audit": audits.iter().map(row_json).collect::<Vec<_>>(),
            "range": range_rows.iter().map(|r| serde_json::json!({
                "engine": r.engine,
                "verify": r.verify.name(),
                "deferred_delay_ms": r.verify.delay_ms(),
                "clients": r.clients,
                "keys": args.range_keys,
                "load_seconds": r.load_seconds,
                "figures": r.figures.json(),
            })).collect::<Vec<_>>(),
            "storage": growth.iter().map(|(engine, setting, points)| serde_json::json!({
                "engine": engine,
                "setting": setting,
                "batch": args.storage_batch,
                "points": points.iter().map(|p| serde_json::json!({
                    "records": p.records,
                    "disk_bytes": p.disk_bytes,
                    "file_bytes": p.file_bytes,
                    "bytes_per_record": p.disk_bytes as f64 / p.records.max(1) as f64,
                    "split": p.split,
                    "seconds": p.seconds,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        if let Some(path) = &args.common.json {
            std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
                .context(|| format!("writing {}", path.display()))?;
        }
        if let Some(dir) = &args.report_dir {
            report::write(dir, &doc)?;
        }
    }
    Ok(())
}

/// `ledger-report`: renders `dir/ledger.json`; returns the figures' path.
pub fn report_dir(dir: &Path) -> Result<std::path::PathBuf, Failure> {
    let path = dir.join("ledger.json");
    let text = std::fs::read_to_string(&path).context(|| format!("reading {}", path.display()))?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure(format!("{}: not a ledger record: {e}", path.display())))?;
    report::write(dir, &doc)?;
    Ok(dir.join("figures.md"))
}

/// One run of the range workload.
struct RangeRow {
    engine: &'static str,
    verify: Verify,
    clients: u64,
    load_seconds: f64,
    figures: range::RangeFigures,
}

/// The range workload: on Cairn one load, then every mode at every client count on it (the
/// workload only reads); on immudb one peer per cell (each loads its keys), running each
/// client's first `--peer-transactions / clients` ranges of the same streams.
fn run_ranges(
    args: &LedgerArgs,
    dir: &Path,
    engines: &[&str],
    peer: Option<&Path>,
    modes: &[Verify],
    clients: &[u64],
    seed: u64,
) -> Result<Vec<RangeRow>, Failure> {
    let mut rows = Vec::new();
    if let Some(binary) = peer.filter(|_| engines.contains(&"immudb")) {
        for &verify in modes {
            for &c in clients {
                let per_client = (args.peer_transactions / c).max(1);
                let ranges: Vec<(u64, u64, u64)> = (0..c)
                    .flat_map(|client| {
                        range::ranges(seed, client, args.range_keys)
                            .take(per_client as usize)
                            .map(move |(lo, count)| (client, lo, count))
                    })
                    .collect();
                let sub = dir.join(format!("immudb-range-{}-{c}", verify.label()));
                std::fs::create_dir_all(&sub).context(|| "creating a directory".into())?;
                crate::sys::proc::settle_disk(Duration::from_millis(500));
                let r = immudb::run_range(
                    binary,
                    &sub,
                    args.range_keys,
                    &ranges,
                    c,
                    verify.name(),
                    verify.delay_ms().unwrap_or(0),
                )?;
                std::fs::remove_dir_all(&sub).context(|| "removing a directory".into())?;
                let figures = range::RangeFigures {
                    seconds: r.figures.seconds,
                    ranges: r.latency.count,
                    entries: r.entries_read,
                    verified_entries: r.figures.verified_reads,
                    proof_bytes: r.figures.proof_bytes,
                    latency_us_p50: r.latency.p50_us,
                    latency_us_p99: r.latency.p99_us,
                    latency_us_max: r.latency.max_us,
                    batches: r.deferred.as_ref().map_or(0, |d| d.batches),
                    verify_latency_ms_p50: r
                        .deferred
                        .as_ref()
                        .map_or(0.0, |d| d.verify_latency_ms_p50),
                    verify_latency_ms_p99: r
                        .deferred
                        .as_ref()
                        .map_or(0.0, |d| d.verify_latency_ms_p99),
                };
                eprintln!(
                    "range: immudb, {} verification, {c} clients: {:.0} ranges/s, {} entries, \
                     {:.0} proof bytes per verified entry",
                    verify.label(),
                    figures.rate(),
                    figures.entries,
                    figures.bytes_per_entry()
                );
                rows.push(RangeRow {
                    engine: "immudb",
                    verify,
                    clients: c,
                    load_seconds: r.load_seconds,
                    figures,
                });
            }
        }
    }
    if !engines.contains(&"cairn") {
        return Ok(rows);
    }
    let sub = dir.join("cairn-range");
    let (ledger, load_seconds) = range::load_cairn(&sub, args.range_keys)?;
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    for &verify in modes {
        for &c in clients {
            let figures =
                range::run_cairn(&ledger, args.range_keys, c, args.seconds, verify, seed)?;
            eprintln!(
                "range: cairn, {} verification, {c} clients: {:.0} ranges/s, {} entries, {:.0} \
                 proof bytes per verified entry",
                verify.label(),
                figures.rate(),
                figures.entries,
                figures.bytes_per_entry()
            );
            rows.push(RangeRow {
                engine: "cairn",
                verify,
                clients: c,
                load_seconds,
                figures,
            });
        }
    }
    ledger.close();
    drop(ledger);
    std::fs::remove_dir_all(&sub).context(|| "removing a directory".into())?;
    Ok(rows)
}

fn print_audits(args: &LedgerArgs, rows: &[Row]) {
    let mut table = Markdown::left(&[
        "engine",
        "transactions/s",
        "blocks",
        "transactions per block",
        "block check p50 ms",
        "p99 ms",
        "max ms",
        "full audit s",
        "versions (immudb: txs) audited in full",
    ]);
    for r in rows {
        let Some(a) = &r.figures.audit else {
            continue;
        };
        table.row([
            r.engine.to_string(),
            format!("{:.0}", r.figures.rate()),
            a.blocks.to_string(),
            format!("{:.0}", a.transactions as f64 / a.blocks.max(1) as f64),
            format!("{:.2}", a.verify_ms_p50),
            format!("{:.2}", a.verify_ms_p99),
            format!("{:.2}", a.verify_ms_max),
            format!("{:.2}", a.full_seconds),
            a.full_versions.to_string(),
        ]);
    }
    println!(
        "Audit: SmallBank ({} clients, no client verification) with an auditor checking each \
         block of about {} transactions",
        args.sweep_clients, args.audit_block
    );
    print!("{}", table.render());
}

fn print_ranges(args: &LedgerArgs, rows: &[RangeRow]) {
    let mut table = Markdown::left(&[
        "verify",
        "clients",
        "engine",
        "ranges/s",
        "p99 ms",
        "proof B per entry",
    ]);
    for r in rows {
        table.row([
            r.verify.label(),
            r.clients.to_string(),
            r.engine.to_string(),
            format!("{:.0}", r.figures.rate()),
            format!("{:.2}", r.figures.latency_us_p99 / 1e3),
            format!("{:.0}", r.figures.bytes_per_entry()),
        ]);
    }
    println!(
        "Range: {} keys, ranges of {}..={} keys placed uniformly",
        args.range_keys,
        range::RANGE_MIN,
        range::RANGE_MAX
    );
    print!("{}", table.render());
}

/// Bytes on disk as records grow, per engine and setting.
type Growth = (&'static str, String, Vec<storage::StoragePoint>);

/// The storage workload: immudb (synced, its index flushed before each measure), then Cairn
/// with the window off and as an archive.
fn run_storage(
    args: &LedgerArgs,
    dir: &Path,
    engines: &[&str],
    peer: Option<&Path>,
    records: &[u64],
) -> Result<Vec<Growth>, Failure> {
    let mut growth = Vec::new();
    if let Some(binary) = peer.filter(|_| engines.contains(&"immudb")) {
        let sub = dir.join("immudb-storage");
        std::fs::create_dir_all(&sub).context(|| "creating a directory".into())?;
        let points =
            immudb::run_storage(binary, &sub, records, args.storage_batch.min(1000), true)?;
        // The peer measures lengths; its files are written, never sparse: check that the
        // file system allocated about as much (at the end, the store closed).
        let (lengths, allocated) = (
            storage::file_bytes(&sub)?,
            crate::ledger_receipts::usage(&sub)?.values().sum::<u64>(),
        );
        let gap = allocated.abs_diff(lengths) as f64 / lengths.max(1) as f64;
        eprintln!(
            "immudb storage at the end, closed: {lengths} bytes of files, {allocated} \
             allocated ({:.1}% apart)",
            gap * 100.0
        );
        if gap > 0.05 {
            eprintln!("WARNING: immudb's allocation and its files' lengths differ by over 5%");
        }
        std::fs::remove_dir_all(&sub).context(|| "removing a directory".into())?;
        let points: Vec<storage::StoragePoint> = points
            .into_iter()
            .map(|p| storage::StoragePoint {
                records: p.records,
                disk_bytes: p.disk_bytes,
                file_bytes: Some(p.disk_bytes),
                split: p.split,
                seconds: p.seconds,
            })
            .collect();
        for p in &points {
            eprintln!(
                "immudb storage: {} records, {} bytes on disk ({:.1} per record)",
                p.records,
                p.disk_bytes,
                p.disk_bytes as f64 / p.records.max(1) as f64
            );
        }
        growth.push(("immudb", "synced, index flushed".to_string(), points));
    }
    if !engines.contains(&"cairn") {
        return Ok(growth);
    }
    for window in [0, u64::MAX] {
        let sub = dir.join(format!("cairn-storage-{}", storage::window_name(window)));
        let points = storage::grow_cairn(&sub, records, args.storage_batch, window)?;
        if !args.common.keep {
            std::fs::remove_dir_all(&sub).context(|| "removing a directory".into())?;
        }
        growth.push(("cairn", storage::window_name(window), points));
    }
    Ok(growth)
}

/// The storage workload's table: bytes per record at each count, per engine and setting.
fn print_growth(growth: &[Growth]) {
    let mut table = Markdown::left(&[
        "engine",
        "setting",
        "records",
        "bytes on disk",
        "bytes per record",
    ]);
    for (engine, setting, points) in growth {
        for p in points {
            table.row([
                engine.to_string(),
                setting.clone(),
                p.records.to_string(),
                p.disk_bytes.to_string(),
                format!("{:.1}", p.disk_bytes as f64 / p.records.max(1) as f64),
            ]);
        }
    }
    println!("Storage: records of a 9-byte key and a 100-byte value, bytes on disk at rest");
    print!("{}", table.render());
}

fn run_cairn(
    args: &LedgerArgs,
    dir: &Path,
    verify: Verify,
    clients: u64,
    seed: u64,
    audit_block: u64,
) -> Result<Row, Failure> {
    let hash = match args.hash {
        AuthHashArg::Sha256 => cairn_proof::HashKind::Sha256,
        AuthHashArg::Blake3 => cairn_proof::HashKind::Blake3,
    };
    let (ledger, load_seconds) = cairn_side::load(
        dir,
        args.accounts,
        hash,
        args.group,
        if verify.delay_ms().is_some() || audit_block > 0 {
            args.window
        } else {
            0
        },
    )?;
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    let (mut figures, log) = cairn_side::run(
        &ledger,
        &cairn_side::Setup {
            accounts: args.accounts,
            clients,
            seconds: args.seconds,
            verify,
            seed,
            zipf: args.zipf,
            audit_block,
        },
    )?;
    if let Some(a) = &mut figures.audit {
        let (seconds, read, versions) = audit::full_audit(&ledger)?;
        a.full_seconds = seconds;
        a.full_read_bytes = read;
        a.full_versions = versions;
    }
    let money = if args.check {
        let balances = cairn_side::balances(&ledger, args.accounts)?;
        Some(check_balances("cairn", args.accounts, &log, &balances)?)
    } else {
        None
    };
    ledger.close();
    figures.disk_bytes = Some(crate::ledger_receipts::usage(dir)?.values().sum());
    Ok(Row {
        engine: "cairn",
        verify,
        clients,
        load_seconds,
        figures,
        money,
    })
}

fn run_immudb(
    args: &LedgerArgs,
    binary: &Path,
    dir: &Path,
    verify: Verify,
    clients: u64,
    seed: u64,
    audit_block: u64,
) -> Result<Row, Failure> {
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    let per_client = (args.peer_transactions / clients).max(1);
    let r = immudb::run_with(&immudb::PeerOptions {
        binary: binary.to_path_buf(),
        dir: dir.to_path_buf(),
        accounts: args.accounts,
        clients,
        per_client,
        verify: verify.name().to_string(),
        deferred_delay_ms: verify.delay_ms().unwrap_or(0),
        seed,
        zipf: args.zipf,
        audit_block,
        server: None,
    })?;
    let mut figures = r.figures;
    figures.deferred = r.deferred.as_ref().map(|d| DeferredFigures {
        batches: d.batches,
        promises: (d.keys_per_batch_mean * d.batches as f64).round() as u64,
        versions_proved: d.tx_proofs,
        latency_ms_p50: d.verify_latency_ms_p50,
        latency_ms_p99: d.verify_latency_ms_p99,
        latency_ms_max: d.verify_latency_ms_max,
        busy_seconds: 0.0,
        proof_bytes: figures.proof_bytes,
        reads: figures.verified_reads,
        writes: figures.verified_writes,
    });
    if let Some(d) = &r.deferred {
        if Some(d.delay_ms) != verify.delay_ms() {
            return Err(Failure(format!(
                "the immudb peer verified every {} ms, not every {:?} ms",
                d.delay_ms,
                verify.delay_ms()
            )));
        }
    }
    if let (Some(a), Some(full)) = (&r.audit, &r.full_audit) {
        if full.txs < a.last_audited || full.entries < a.entries {
            return Err(Failure(
                "immudb's full audit covered less than its block audits".into(),
            ));
        }
    }
    figures.audit = r.audit.as_ref().map(|a| audit::AuditFigures {
        block: a.block,
        blocks: a.blocks,
        versions: a.txs,
        transactions: a.txs,
        changes: a.entries,
        verify_ms_p50: a.latency_ms_p50,
        verify_ms_p99: a.latency_ms_p99,
        verify_ms_max: a.latency_ms_max,
        verify_ms_mean: a.latency_ms_mean,
        make_ms_p50: 0.0,
        make_ms_p99: 0.0,
        full_seconds: r.full_audit.as_ref().map_or(0.0, |f| f.seconds),
        full_read_bytes: None,
        full_versions: r.full_audit.as_ref().map_or(0, |f| f.txs),
    });
    let money = if args.check {
        Some(check_balances(
            "immudb",
            args.accounts,
            &r.log,
            &r.balances,
        )?)
    } else {
        None
    };
    Ok(Row {
        engine: "immudb",
        verify,
        clients,
        load_seconds: r.load_seconds,
        figures,
        money,
    })
}

fn print_table(args: &LedgerArgs, rows: &[Row]) {
    let mut table = Markdown::left(&[
        "verify",
        "clients",
        "engine",
        "transactions/s",
        "Cairn / immudb",
        "worst p99 of a type, ms",
        "proof B per verified read",
        "aborted",
        "transactions",
    ]);
    for row in rows {
        let peer = rows
            .iter()
            .find(|r| r.engine == "immudb" && r.verify == row.verify && r.clients == row.clients);
        let ratio = match (row.engine, peer) {
            ("cairn", Some(p)) => {
                format!("{:.1}x", row.figures.rate() / p.figures.rate().max(1e-9))
            }
            _ => String::new(),
        };
        let worst = row
            .figures
            .per_kind()
            .values()
            .map(|q| q.p99)
            .fold(0.0, f64::max);
        table.row([
            row.verify.label(),
            row.clients.to_string(),
            row.engine.to_string(),
            format!("{:.0}", row.figures.rate()),
            ratio,
            format!("{:.2}", worst / 1e3),
            format!("{:.0}", row.figures.bytes_per_read()),
            row.figures.aborted.to_string(),
            row.figures.transactions.to_string(),
        ]);
    }
    println!(
        "SmallBank with verification: {} accounts, {} draw, every transaction durable before \
         it is acknowledged{}",
        args.accounts,
        if args.zipf { "Zipfian 0.99" } else { "uniform" },
        if args.check {
            ", every balance checked against the model"
        } else {
            ""
        }
    );
    print!("{}", table.render());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(engines: &str, verify: &str) -> LedgerArgs {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "cairn-bench",
            "ledger",
            "--accounts",
            "200",
            "--clients",
            "1,4",
            "--seconds",
            "0.5",
            "--peer-transactions",
            "80",
            "--engines",
            engines,
            "--verify",
            verify,
        ])
        .expect("options parse");
        match cli.command {
            crate::cli::Command::Ledger(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_tiny_smallbank_on_cairn_checks_out() {
        run(&args("cairn", "immediate,none")).unwrap();
    }

    /// The other workloads on Cairn, tiny: an auditor checking blocks of 20 transactions and
    /// the full audit, ranges in every mode, storage growth with the window off and archived;
    /// and the report rendered from the record.
    #[test]
    fn tiny_audit_range_and_storage_workloads_on_cairn_check_out() {
        let mut a = args("cairn", "immediate,deferred");
        a.workloads = "audit,range,storage".into();
        a.delays = "5".into();
        a.sweep_clients = 4;
        a.audit_block = 20;
        a.range_keys = 500;
        a.storage_records = "500,1000".into();
        a.storage_batch = 100;
        let dir = tempfile::tempdir().unwrap();
        a.report_dir = Some(dir.path().to_path_buf());
        run(&a).unwrap();
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("ledger.json")).unwrap())
                .unwrap();
        assert!(
            doc["audit"][0]["figures"]["audit"]["blocks"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert_eq!(doc["range"].as_array().unwrap().len(), 4);
        assert_eq!(doc["storage"].as_array().unwrap().len(), 2);
        assert!(dir.path().join("figures.md").is_file());
    }

    /// Deferred verification: every promise proved and checked by the verifier, in batches.
    #[test]
    fn a_tiny_deferred_smallbank_on_cairn_checks_out() {
        let mut a = args("cairn", "deferred");
        a.delays = "5,50".into();
        run(&a).unwrap();
    }

    /// The immudb peer, when Go is here to build it (CI builds it first); without Go the test
    /// says it skipped. With Go, a peer that does not build fails the test.
    #[test]
    fn a_tiny_smallbank_on_immudb_checks_out() {
        let go = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .chain([std::path::PathBuf::from("/usr/local/go/bin")])
            .any(|d| d.join("go").is_file());
        if let Err(e) = immudb::peer_binary(None) {
            assert!(
                !go,
                "Go is installed but the immudb peer is not available: {e}"
            );
            eprintln!("SKIPPED: no Go toolchain, so no immudb peer: {e}");
            return;
        }
        run(&args("immudb,cairn", "immediate")).unwrap();
    }
}

//! `cairn-bench ledger`: LedgerBench's workloads on Cairn's verifiable ledger and on immudb
//! v1.11.1 side by side (issue 46). Built so far: **SmallBank with verification** (workload 1):
//! two tables, `savings` and `checking`, the six transactions drawn uniformly (or Zipfian),
//! concurrent clients, every answer verified before the client's next transaction (immediate)
//! or not at all (none), every commit durable before it is acknowledged on both engines, and
//! with `--check` every balance compared with a model that replays the committed transactions
//! in each engine's commit order.
//!
//! Owns: the command's options, its order of runs, the check, the printed table and the JSON
//! record. May call: `smallbank` (the workload and its model), `cairn_side` (Cairn's runs),
//! `immudb` (the Go peer's runs). Must never touch: the engines' internals.
//!
//! The protocol: for each verification mode, for each client count, immudb then Cairn, each in
//! a fresh directory: load the accounts, settle the disk (sync, pause), run. Both receive the
//! same streams: client `c`'s operations come from one generator seeded with `(seed, c)`.
//! Cairn runs each cell for `--seconds`; immudb (about a hundred transactions per second here,
//! its group commit waits 20 ms) runs each client's first `--peer-transactions / clients`
//! operations. Both fsync before a transaction is acknowledged: immudb `Synced` with its
//! default 20 ms group commit, Cairn `SyncPolicy::Immediate` (concurrent waiters share fsyncs).

mod cairn_side;
mod immudb;
pub mod smallbank;

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
    /// No verification (the cost of verification, by difference).
    None,
}

impl Verify {
    fn parse(s: &str) -> Result<Verify, Failure> {
        match s.trim() {
            "immediate" => Ok(Verify::Immediate),
            "none" => Ok(Verify::None),
            "deferred" => Err(Failure(
                "--verify deferred: not built yet (issue 46 workload 3)".into(),
            )),
            other => Err(Failure(format!(
                "--verify: {other:?} is not immediate or none"
            ))),
        }
    }

    /// The name the peer's protocol and the records use.
    pub fn name(self) -> &'static str {
        match self {
            Verify::Immediate => "immediate",
            Verify::None => "none",
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

    fn rate(&self) -> f64 {
        self.transactions as f64 / self.seconds.max(1e-9)
    }

    fn bytes_per_read(&self) -> f64 {
        self.read_proof_bytes as f64 / self.verified_reads.max(1) as f64
    }

    fn json(&self) -> serde_json::Value {
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
            "per_type": per_kind,
        })
    }
}

/// Replays `log` (committed writing transactions in commit order) on a model and compares
/// every balance with `balances`; returns the model's money.
fn check(engine: &str, accounts: u64, log: &[Op], balances: &[(i64, i64)]) -> Result<i64, Failure> {
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

pub fn run(args: &LedgerArgs) -> Result<(), Failure> {
    let clients = list(&args.clients, "--clients", |p| {
        p.trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| (1..=4096).contains(&n))
            .ok_or_else(|| Failure(format!("--clients: {p:?} is not in 1..=4096")))
    })?;
    let modes = list(&args.verify, "--verify", Verify::parse)?;
    let engines = list(&args.engines, "--engines", |e| match e.trim() {
        "cairn" => Ok("cairn"),
        "immudb" => Ok("immudb"),
        other => Err(Failure(format!(
            "--engines: {other:?} is not cairn or immudb"
        ))),
    })?;
    if args.accounts == 0 {
        return Err(Failure("--accounts must be positive".into()));
    }
    let peer = if engines.contains(&"immudb") {
        Some(immudb::peer_binary(args.peer.as_deref())?)
    } else {
        None
    };
    let started = crate::sys::now_rfc3339();
    let seed = args.common.seed;
    let rows = crate::in_temp_dir(args.common.dir.as_deref(), args.common.keep, |dir| {
        let mut rows = Vec::new();
        for &verify in &modes {
            for &c in &clients {
                for &engine in ["immudb", "cairn"].iter().filter(|e| engines.contains(e)) {
                    let sub = dir.join(format!("{engine}-{}-{c}", verify.name()));
                    std::fs::create_dir_all(&sub).context(|| "creating a directory".into())?;
                    let row = match (engine, &peer) {
                        ("immudb", Some(binary)) => {
                            run_immudb(args, binary, &sub, verify, c, seed)?
                        }
                        _ => run_cairn(args, &sub, verify, c, seed)?,
                    };
                    eprintln!(
                        "{engine}, {} verification, {c} clients: {:.0} transactions/s over \
                         {:.1} s, {} versions, {} aborted, {:.0} proof bytes per verified read{}",
                        verify.name(),
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
                    rows.push(row);
                }
            }
        }
        Ok(rows)
    })?;
    print_table(args, &rows);
    if let Some(path) = &args.common.json {
        let doc = serde_json::json!({
            "benchmark": "ledger",
            "workload": "smallbank",
            "started": started,
            "finished": crate::sys::now_rfc3339(),
            "accounts": args.accounts,
            "zipf": args.zipf,
            "seed": seed,
            "cairn_seconds": args.seconds,
            "peer_transactions": args.peer_transactions,
            "checked": args.check,
            "cairn_trie_hash": format!("{:?}", args.hash),
            "durability": "every transaction fsynced before it is acknowledged: Cairn SyncPolicy::Immediate, immudb Synced with its 20 ms group commit",
            "rows": rows.iter().map(|r| serde_json::json!({
                "engine": r.engine,
                "verify": r.verify.name(),
                "clients": r.clients,
                "load_seconds": r.load_seconds,
                "money": r.money,
                "figures": r.figures.json(),
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
            .context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn run_cairn(
    args: &LedgerArgs,
    dir: &Path,
    verify: Verify,
    clients: u64,
    seed: u64,
) -> Result<Row, Failure> {
    let hash = match args.hash {
        AuthHashArg::Sha256 => cairn_proof::HashKind::Sha256,
        AuthHashArg::Blake3 => cairn_proof::HashKind::Blake3,
    };
    let (ledger, load_seconds) = cairn_side::load(dir, args.accounts, hash, args.group)?;
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    let (mut figures, log) = cairn_side::run(
        &ledger,
        args.accounts,
        clients,
        args.seconds,
        verify,
        seed,
        args.zipf,
    )?;
    let money = if args.check {
        let balances = cairn_side::balances(&ledger, args.accounts)?;
        Some(check("cairn", args.accounts, &log, &balances)?)
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
) -> Result<Row, Failure> {
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    let per_client = (args.peer_transactions / clients).max(1);
    let r = immudb::run(
        binary,
        dir,
        args.accounts,
        clients,
        per_client,
        verify,
        seed,
        args.zipf,
    )?;
    let money = if args.check {
        Some(check("immudb", args.accounts, &r.log, &r.balances)?)
    } else {
        None
    };
    if !r.sync.contains("synced") {
        return Err(Failure(format!(
            "the immudb peer ran {:?}, not synced",
            r.sync
        )));
    }
    Ok(Row {
        engine: "immudb",
        verify,
        clients,
        load_seconds: r.load_seconds,
        figures: r.figures,
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
            row.verify.name().to_string(),
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

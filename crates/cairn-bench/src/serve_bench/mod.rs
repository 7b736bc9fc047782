//! `serve`: SmallBank with verification over loopback, against `cairn-server` (HTTP, its
//! verifying client `cairn-client`) and against immudb v1.11.1's own server (gRPC, its Go
//! client's `VerifiedGet` and verified `VerifiableSet`), at each client count; then the raw
//! HTTP rate of Cairn's read endpoint under `wrk` (issue 47, item 5).
//!
//! Fairness: every cell starts each server fresh, loads the same accounts through it, lets the
//! disk settle, then runs the same operation streams (each client's stream from the seed;
//! Cairn's clients for `--seconds`, immudb's for its share of `--peer-transactions`); both
//! servers acknowledge a write only once it is fsynced (Cairn: the log's group fsync; immudb:
//! its default synced mode); both on plain loopback connections with a login (Cairn a bearer
//! token, immudb a session); every client its own connection(s) and its own trusted state.
//! Cairn first, then immudb, in every cell. With `--check` every balance at the end is
//! compared with a model replaying the committed transactions in the server's commit order.
//!
//! Owns: the command, its cells, its record (`--report-dir`: `serve.json`, `figures.md`,
//! `smallbank.svg`). May call: `cairn_http`, `immudb_server`, `ledger_bench` (the streams, the
//! figures, the model check, the immudb peer). Must never touch: the engine in-process.

mod cairn_http;
mod immudb_server;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cli::ServeArgs;
use crate::failure::{Context, Failure};
use crate::ledger_bench::smallbank::Kind;
use crate::ledger_bench::{check_balances, immudb, Figures};
use crate::report::format::compact;
use crate::report::svg::Chart;
use crate::report::table::Markdown;

/// The `cairn-server` binary: `given`, or the one beside this benchmark's binary, or else built
/// (`cargo build --release -p cairn-server` in the workspace).
fn server_binary(given: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(Failure(format!(
                "--server {}: no such file",
                path.display()
            )))
        };
    }
    if let Some(beside) = built_server() {
        return Ok(beside);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    eprintln!(
        "cairn-server is not built beside this binary: cargo build --release -p cairn-server"
    );
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "-p", "cairn-server"])
        .current_dir(&workspace)
        .status()
        .context(|| "running cargo".into())?;
    let built = workspace.join("target/release/cairn-server");
    if !status.success() || !built.is_file() {
        return Err(Failure(format!(
            "cairn-server did not build ({status}); give its path with --server"
        )));
    }
    Ok(built)
}

/// `cairn-server` beside this binary, or one directory up (a test's binary lives in
/// `target/<profile>/deps`, the server in `target/<profile>`).
fn built_server() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("cairn-server"))
        .find(|p| p.is_file())
}

/// One cell's result.
struct Row {
    engine: &'static str,
    clients: u64,
    load_seconds: f64,
    figures: Figures,
    money: Option<i64>,
    /// CPU seconds each of the server's processes used during the timed run (nodes in order,
    /// then the router).
    server_cpu: Option<Vec<f64>>,
}

impl Row {
    fn json(&self) -> Value {
        json!({
            "engine": self.engine,
            "clients": self.clients,
            "load_seconds": self.load_seconds,
            "money": self.money,
            "server_cpu_seconds_per_process": self.server_cpu,
            "server_cpu_ms_per_transaction": self.server_cpu.as_ref().and_then(|cpu| {
                (self.figures.transactions > 0)
                    .then(|| 1e3 * cpu.iter().sum::<f64>() / self.figures.transactions as f64)
            }),
            "busiest_process_cpu_ms_per_transaction": self.server_cpu.as_ref().and_then(|cpu| {
                (self.figures.transactions > 0).then(|| {
                    1e3 * cpu.iter().copied().fold(0.0, f64::max) / self.figures.transactions as f64
                })
            }),
            "figures": self.figures.json(),
        })
    }
}

fn parse_clients(s: &str) -> Result<Vec<u64>, Failure> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<u64>()
                .ok()
                .filter(|&n| (1..=4096).contains(&n))
                .ok_or_else(|| Failure(format!("{p:?} is not a client count in 1..=4096")))
        })
        .collect()
}

/// `cairn-bench serve`.
pub fn run(args: &ServeArgs) -> Result<(), Failure> {
    let clients = parse_clients(&args.clients)?;
    let wrk_connections = if args.wrk_seconds > 0.0 {
        parse_clients(&args.wrk_connections)?
    } else {
        Vec::new()
    };
    let mut engines = Vec::new();
    for e in args.engines.split(',') {
        match e.trim() {
            "cairn" => engines.push("cairn"),
            "cairn-raft1" => engines.push("cairn-raft1"),
            "cairn-raft3" => engines.push("cairn-raft3"),
            "cairn-shard2x3" => engines.push("cairn-shard2x3"),
            "cairn-shard4x3" => engines.push("cairn-shard4x3"),
            "immudb" => engines.push("immudb"),
            other => {
                return Err(Failure(format!(
                    "--engines: {other:?} is not cairn, cairn-raft1, cairn-raft3, \
                     cairn-shard2x3, cairn-shard4x3 or immudb"
                )))
            }
        }
    }
    if args.check && engines.iter().any(|e| e.starts_with("cairn-shard")) {
        println!(
            "serve: the balances of cairn-shard cells are not checked (--check replays \
             commits in one version order, which shards do not have)"
        );
    }
    if args.accounts == 0 {
        return Err(Failure("--accounts must be positive".into()));
    }
    let cairn_bin = server_binary(args.server.as_deref())?;
    let (immudb_bin, peer_bin) = if engines.contains(&"immudb") {
        (
            Some(immudb_server::server_binary(args.immudb.as_deref())?),
            Some(immudb::peer_binary(args.peer.as_deref())?),
        )
    } else {
        (None, None)
    };
    let base = tempfile::Builder::new()
        .prefix("cairn-serve-")
        .tempdir_in(args.dir.clone().unwrap_or_else(std::env::temp_dir))
        .context(|| "creating the benchmark's directory".into())?;
    let started = crate::sys::now_rfc3339();
    let setup = cairn_http::ServerSetup {
        binary: cairn_bin.clone(),
        group: args.group,
    };
    let threads = args.client_threads.max(1);
    let rt = cairn_http::runtime(threads)?;
    println!(
        "serve: {} accounts, clients {:?}, engines {:?}; Cairn {} s per cell, immudb {} \
         transactions per cell; every balance checked: {}",
        args.accounts, clients, engines, args.seconds, args.peer_transactions, args.check
    );
    let mut rows = Vec::new();
    for &c in &clients {
        for &engine in &engines {
            let dir = base.path().join(format!("{engine}-{c}"));
            std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
            let row = match engine {
                "cairn" => run_cairn(args, &setup, &rt, &dir, c, 0)?,
                "cairn-raft1" => run_cairn(args, &setup, &rt, &dir, c, 1)?,
                "cairn-raft3" => run_cairn(args, &setup, &rt, &dir, c, 3)?,
                "cairn-shard2x3" => run_sharded(args, &setup, &rt, &dir, c, 2)?,
                "cairn-shard4x3" => run_sharded(args, &setup, &rt, &dir, c, 4)?,
                _ => run_immudb(
                    args,
                    immudb_bin.as_deref().unwrap_or(Path::new("immudb")),
                    peer_bin.as_deref().unwrap_or(Path::new("peer")),
                    &dir,
                    c,
                )?,
            };
            println!(
                "  {engine:6} {c:4} clients: {:>9} tx/s ({} transactions in {:.1} s, {} \
                 aborted, {} conflict retries, {} reads and {} writes verified, {} across \
                 shards)",
                compact(row.figures.rate()),
                row.figures.transactions,
                row.figures.seconds,
                row.figures.aborted,
                row.figures.conflicts,
                row.figures.verified_reads,
                row.figures.verified_writes,
                row.figures.across_shards
            );
            rows.push(row);
            if !args.keep {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    let raw = if wrk_connections.is_empty() {
        Value::Null
    } else {
        raw_rate(args, &setup, &rt, base.path(), &wrk_connections)?
    };
    let doc = json!({
        "benchmark": "serve",
        "started": started,
        "finished": crate::sys::now_rfc3339(),
        "accounts": args.accounts,
        "zipf": args.zipf,
        "seed": args.seed,
        "cairn_seconds": args.seconds,
        "cairn_group": args.group,
        "client_threads": threads,
        "peer_transactions": args.peer_transactions,
        "checked": args.check,
        "cairn_server": "plain HTTP/1.1 on 127.0.0.1, bearer token, protobuf bodies, SyncPolicy::Immediate (a write answered once its version is fsynced; concurrent commits share a version and its fsync)",
        "immudb_server": format!("immudb v1.11.1 server, plain gRPC on 127.0.0.1, session login, defaults (synced), --max-sessions={}", immudb_server::MAX_SESSIONS),
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        "raw_http": raw,
    });
    print!("{}", figures_md(&doc));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap_or_default())
            .context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = &args.report_dir {
        write_report(dir, &doc)?;
    }
    if args.keep {
        let kept = base.keep();
        println!("kept {}", kept.display());
    }
    Ok(())
}

fn run_cairn(
    args: &ServeArgs,
    setup: &cairn_http::ServerSetup,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    clients: u64,
    nodes: usize,
) -> Result<Row, Failure> {
    let server = cairn_http::Server::start(setup, dir, nodes)?;
    let loader = server.client()?;
    let load_seconds = rt.block_on(cairn_http::load(&server.conn()?, args.accounts))?;
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    let cpu_before = server.cpu_seconds();
    let (mut figures, log) = rt.block_on(cairn_http::run(
        &server,
        &cairn_http::Setup {
            accounts: args.accounts,
            clients,
            seconds: args.seconds,
            seed: args.seed,
            zipf: args.zipf,
        },
    ))?;
    let server_cpu = Some(used_cpu(&cpu_before, &server.cpu_seconds()));
    let money = if args.check {
        let balances = rt.block_on(cairn_http::balances(&loader, args.accounts))?;
        Some(check_balances("cairn", args.accounts, &log, &balances)?)
    } else {
        None
    };
    let ledger_dir = server.ledger_dir.clone();
    server.stop()?;
    figures.disk_bytes = Some(crate::ledger_receipts::usage(&ledger_dir)?.values().sum());
    Ok(Row {
        engine: match nodes {
            0 => "cairn",
            1 => "cairn-raft1",
            _ => "cairn-raft3",
        },
        clients,
        load_seconds,
        figures,
        money,
        server_cpu,
    })
}

/// CPU seconds each process used between two readings.
fn used_cpu(before: &[f64], after: &[f64]) -> Vec<f64> {
    after
        .iter()
        .zip(before)
        .map(|(a, b)| (a - b).max(0.0))
        .collect()
}

/// A cell of `shards` shards of three nodes each behind a router: the same load and streams
/// as [`run_cairn`]; no balance check (a commit order across shards is not one version order:
/// `--check` skips these cells, saying so).
fn run_sharded(
    args: &ServeArgs,
    setup: &cairn_http::ServerSetup,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    clients: u64,
    shards: u32,
) -> Result<Row, Failure> {
    let server = cairn_http::Server::start_sharded(setup, dir, shards, 3)?;
    let load_seconds = rt.block_on(cairn_http::load(&server.conn()?, args.accounts))?;
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    let cpu_before = server.cpu_seconds();
    let (mut figures, _) = rt.block_on(cairn_http::run(
        &server,
        &cairn_http::Setup {
            accounts: args.accounts,
            clients,
            seconds: args.seconds,
            seed: args.seed,
            zipf: args.zipf,
        },
    ))?;
    let server_cpu = Some(used_cpu(&cpu_before, &server.cpu_seconds()));
    let ledger_dir = server.ledger_dir.clone();
    server.stop()?;
    figures.disk_bytes = Some(crate::ledger_receipts::usage(&ledger_dir)?.values().sum());
    Ok(Row {
        engine: if shards == 2 {
            "cairn-shard2x3"
        } else {
            "cairn-shard4x3"
        },
        clients,
        load_seconds,
        figures,
        money: None,
        server_cpu,
    })
}

fn run_immudb(
    args: &ServeArgs,
    server_bin: &Path,
    peer_bin: &Path,
    dir: &Path,
    clients: u64,
) -> Result<Row, Failure> {
    let server = immudb_server::ImmudbServer::start(server_bin, dir)?;
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    let per_client = (args.peer_transactions / clients).max(1);
    let r = immudb::run_with(&immudb::PeerOptions {
        binary: peer_bin.to_path_buf(),
        dir: dir.to_path_buf(),
        accounts: args.accounts,
        clients,
        per_client,
        verify: "immediate".into(),
        deferred_delay_ms: 0,
        seed: args.seed,
        zipf: args.zipf,
        audit_block: 0,
        server: Some(server.address.clone()),
    });
    let data = server.data.clone();
    server.stop()?;
    let r = r?;
    let mut figures = r.figures;
    figures.disk_bytes = Some(crate::ledger_receipts::usage(&data)?.values().sum());
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
        clients,
        load_seconds: r.load_seconds,
        figures,
        money,
        server_cpu: None,
    })
}

/// The raw HTTP rate of Cairn's read endpoint: `wrk` posting a one-account `get` (JSON, no
/// verification: the server's side of a read alone) with each connection count.
fn raw_rate(
    args: &ServeArgs,
    setup: &cairn_http::ServerSetup,
    rt: &tokio::runtime::Runtime,
    base: &Path,
    connections: &[u64],
) -> Result<Value, Failure> {
    let wrk = match Command::new("wrk").arg("--version").output() {
        Ok(_) => "wrk",
        Err(_) => {
            println!("wrk is not installed (apt-get install wrk): the raw HTTP rate is skipped");
            return Ok(json!({"skipped": "wrk is not installed"}));
        }
    };
    let dir = base.join("wrk");
    std::fs::create_dir_all(&dir).context(|| format!("creating {}", dir.display()))?;
    let server = cairn_http::Server::start(setup, &dir, 0)?;
    rt.block_on(cairn_http::load(&server.conn()?, args.accounts))?;
    crate::sys::proc::settle_disk(Duration::from_millis(500));
    let script = dir.join("get.lua");
    std::fs::write(
        &script,
        format!(
            "-- One random account's savings and checking, JSON, no receipt checked.\n\
             math.randomseed({seed})\n\
             wrk.method = \"POST\"\n\
             wrk.headers[\"Content-Type\"] = \"application/json\"\n\
             wrk.headers[\"Authorization\"] = \"Bearer {token}\"\n\
             request = function()\n\
             \x20 local a = string.format(\"%016x\", math.random(0, {last}))\n\
             \x20 local body = '{{\"tables\":[{{\"table\":\"savings\",\"keys\":[\"' .. a .. '\"]}},' ..\n\
             \x20   '{{\"table\":\"checking\",\"keys\":[\"' .. a .. '\"]}}]}}'\n\
             \x20 return wrk.format(nil, \"/v1/ledgers/{ledger}/get\", nil, body)\n\
             end\n\
             response = function(status, headers, body)\n\
             \x20 if status ~= 200 then wrk.thread:stop() end\n\
             end\n",
            seed = args.seed,
            token = server.token,
            last = args.accounts - 1,
            ledger = cairn_http::LEDGER,
        ),
    )
    .context(|| format!("writing {}", script.display()))?;
    let mut out = Vec::new();
    for &c in connections {
        let threads = c.min(2);
        let output = Command::new(wrk)
            .args([
                "-t",
                &threads.to_string(),
                "-c",
                &c.to_string(),
                "-d",
                &format!("{}s", args.wrk_seconds),
                "--latency",
                "-s",
            ])
            .arg(&script)
            .arg(&server.url)
            .output()
            .context(|| "running wrk".into())?;
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        let rate = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
            .and_then(|v| v.trim().parse::<f64>().ok());
        let non2xx = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Non-2xx or 3xx responses:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let quantile = |q: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(q))
                .map(|v| v.trim().to_string())
        };
        if !output.status.success() || rate.is_none() || non2xx > 0 {
            return Err(Failure(format!(
                "wrk with {c} connections failed ({}; {non2xx} answers not 200): {text}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        println!(
            "  wrk {c:4} connections: {} requests/s (p50 {}, p99 {})",
            compact(rate.unwrap_or(0.0)),
            quantile("50%").unwrap_or_default(),
            quantile("99%").unwrap_or_default()
        );
        out.push(json!({
            "connections": c,
            "threads": threads,
            "seconds": args.wrk_seconds,
            "requests_per_s": rate,
            "p50": quantile("50%"),
            "p90": quantile("90%"),
            "p99": quantile("99%"),
            "output": text,
        }));
    }
    server.stop()?;
    Ok(json!({"endpoint": "POST /v1/ledgers/bank/get (one account, JSON)", "runs": out}))
}

fn f(v: &Value, path: &[&str]) -> Option<f64> {
    let mut v = v;
    for p in path {
        v = v.get(p)?;
    }
    v.as_f64()
}

/// The row of `engine` with `clients` clients.
fn row_of<'a>(doc: &'a Value, engine: &str, clients: u64) -> Option<&'a Value> {
    doc.get("rows")?.as_array()?.iter().find(|r| {
        r.get("engine").and_then(Value::as_str) == Some(engine)
            && r.get("clients").and_then(Value::as_u64) == Some(clients)
    })
}

fn client_counts(doc: &Value) -> Vec<u64> {
    let mut counts: Vec<u64> = doc
        .get("rows")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|r| r["clients"].as_u64()).collect())
        .unwrap_or_default();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// The replicated and sharded cells, when the run had any: each one's rate and its ratio to
/// the single server's of the same client count, how many of its transactions crossed shards,
/// and its p50 and p99 of `SendPayment` (the type that crosses shards most).
fn cluster_md(doc: &Value) -> String {
    const CELLS: [&str; 4] = [
        "cairn-raft1",
        "cairn-raft3",
        "cairn-shard2x3",
        "cairn-shard4x3",
    ];
    let any = CELLS.iter().any(|e| {
        client_counts(doc)
            .iter()
            .any(|c| row_of(doc, e, *c).is_some())
    });
    if !any {
        return String::new();
    }
    let mut md = String::from(
        "\n### Replicated and sharded: verified SmallBank, transactions per second\n\n",
    );
    let mut t = Markdown::left(&[
        "clients",
        "cell",
        "tx/s",
        "/ one server",
        "across shards",
        "server CPU ms/tx",
        "busiest process ms/tx",
        "SendPayment p50 ms",
        "SendPayment p99 ms",
    ]);
    for c in client_counts(doc) {
        let one = row_of(doc, "cairn", c).and_then(|r| f(r, &["figures", "transactions_per_s"]));
        for e in std::iter::once("cairn").chain(CELLS) {
            let Some(r) = row_of(doc, e, c) else { continue };
            let rate = f(r, &["figures", "transactions_per_s"]);
            let q = |k: &str| {
                f(r, &["figures", "per_type", "SendPayment", k])
                    .map_or("-".into(), |v| format!("{:.1}", v / 1e3))
            };
            t.row([
                c.to_string(),
                e.to_string(),
                rate.map_or("-".into(), compact),
                match (rate, one) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
                    _ => "-".into(),
                },
                f(r, &["figures", "across_shards"]).map_or("-".into(), |v| format!("{v:.0}")),
                f(r, &["server_cpu_ms_per_transaction"]).map_or("-".into(), |v| format!("{v:.2}")),
                f(r, &["busiest_process_cpu_ms_per_transaction"])
                    .map_or("-".into(), |v| format!("{v:.2}")),
                q("p50_us"),
                q("p99_us"),
            ]);
        }
    }
    md.push_str(&t.render());
    md
}

/// The record's tables: throughput and ratios per client count, latency per type.
fn figures_md(doc: &Value) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n### Verified SmallBank over loopback: transactions per second\n"
    );
    let mut t = Markdown::left(&[
        "clients",
        "Cairn tx/s",
        "immudb tx/s",
        "Cairn / immudb",
        "Cairn writes verified/s",
        "immudb writes verified/s",
        "Cairn conflict retries",
        "immudb conflict retries",
    ]);
    for c in client_counts(doc) {
        let cairn = row_of(doc, "cairn", c);
        let immudb = row_of(doc, "immudb", c);
        let rate = |r: Option<&Value>| r.and_then(|r| f(r, &["figures", "transactions_per_s"]));
        let writes = |r: Option<&Value>| {
            r.and_then(|r| {
                Some(f(r, &["figures", "verified_writes"])? / f(r, &["figures", "seconds"])?)
            })
        };
        let opt = |v: Option<f64>| v.map_or("-".into(), compact);
        t.row([
            c.to_string(),
            opt(rate(cairn)),
            opt(rate(immudb)),
            match (rate(cairn), rate(immudb)) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.1}x", a / b),
                _ => "-".into(),
            },
            opt(writes(cairn)),
            opt(writes(immudb)),
            opt(cairn.and_then(|r| f(r, &["figures", "conflict_retries"]))),
            opt(immudb.and_then(|r| f(r, &["figures", "conflict_retries"]))),
        ]);
    }
    md.push_str(&t.render());
    let _ = writeln!(
        md,
        "\n### p99 latency per transaction type, ms (Cairn / immudb, and their ratio)\n"
    );
    let mut columns = vec!["clients".to_string()];
    columns.extend(Kind::ALL.iter().map(|k| k.name().to_string()));
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut t = Markdown::left(&columns);
    for c in client_counts(doc) {
        let mut cells = vec![c.to_string()];
        for k in Kind::ALL {
            let p99 = |e: &str| {
                row_of(doc, e, c).and_then(|r| f(r, &["figures", "per_type", k.name(), "p99_us"]))
            };
            cells.push(match (p99("cairn"), p99("immudb")) {
                (Some(a), Some(b)) if b > 0.0 => {
                    format!("{:.1} / {:.1} ({:.2})", a / 1e3, b / 1e3, a / b)
                }
                (a, b) => format!(
                    "{} / {}",
                    a.map_or("-".into(), |v| format!("{:.1}", v / 1e3)),
                    b.map_or("-".into(), |v| format!("{:.1}", v / 1e3))
                ),
            });
        }
        t.row(cells);
    }
    md.push_str(&t.render());
    md.push_str(&cluster_md(doc));
    if let Some(runs) = doc["raw_http"].get("runs").and_then(Value::as_array) {
        let _ = writeln!(
            md,
            "\n### Raw HTTP rate of Cairn's read endpoint (`wrk`, {})\n",
            doc["raw_http"]["endpoint"].as_str().unwrap_or("")
        );
        let mut t = Markdown::left(&["connections", "requests/s", "p50", "p90", "p99"]);
        for r in runs {
            let s = |k: &str| r[k].as_str().unwrap_or("-").to_string();
            t.row([
                r["connections"].to_string(),
                r["requests_per_s"].as_f64().map_or("-".into(), compact),
                s("p50"),
                s("p90"),
                s("p99"),
            ]);
        }
        md.push_str(&t.render());
    }
    md
}

/// Writes `doc` to `dir/serve.json`, `dir/figures.md` and the chart `dir/smallbank.svg`.
fn write_report(dir: &Path, doc: &Value) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).context(|| format!("writing {}", path.display()))
    };
    write(
        "serve.json",
        serde_json::to_string_pretty(doc).unwrap_or_default(),
    )?;
    write("figures.md", figures_md(doc))?;
    let counts = client_counts(doc);
    let engines = ["immudb", "cairn"];
    let chart = Chart {
        title: "Verified SmallBank over loopback: transactions per second (log scale)",
        y_label: "transactions/s",
        groups: counts
            .iter()
            .map(|c| vec![format!("{c} clients")])
            .collect(),
        series: engines.iter().map(|e| e.to_string()).collect(),
        values: counts
            .iter()
            .map(|&c| {
                engines
                    .iter()
                    .map(|e| {
                        row_of(doc, e, c).and_then(|r| f(r, &["figures", "transactions_per_s"]))
                    })
                    .collect()
            })
            .collect(),
        log: true,
        limit: None,
        format: compact,
    };
    write("smallbank.svg", chart.render())
}

/// `serve-report`: renders `dir/serve.json` again.
pub fn report_dir(dir: &Path) -> Result<PathBuf, Failure> {
    let doc: Value = crate::record::read_json(&dir.join("serve.json"))?;
    write_report(dir, &doc)?;
    Ok(dir.join("figures.md"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(engines: &str) -> ServeArgs {
        ServeArgs {
            accounts: 300,
            clients: "1,3".into(),
            engines: engines.into(),
            seconds: 1.0,
            peer_transactions: 30,
            group: 64,
            client_threads: 2,
            zipf: false,
            seed: 47,
            check: true,
            wrk_seconds: 0.0,
            wrk_connections: "2".into(),
            server: built_server(),
            immudb: None,
            peer: None,
            dir: None,
            keep: false,
            json: None,
            report_dir: None,
        }
    }

    /// A tiny run on two shards of three `cairn-server --raft` nodes behind a router: its
    /// transactions verified (reads from each shard's client, single-shard writes with their
    /// receipts), its row in the report.
    #[test]
    fn a_tiny_serve_on_two_shards_runs() {
        let mut a = args("cairn,cairn-shard2x3");
        if a.server.is_none() {
            eprintln!(
                "SKIPPED: cairn-server is not built beside the tests (cargo build -p cairn-server)"
            );
            return;
        }
        a.clients = "3".into();
        let out = tempfile::tempdir().unwrap();
        a.report_dir = Some(out.path().to_path_buf());
        run(&a).unwrap();
        let doc: Value = crate::record::read_json(&out.path().join("serve.json")).unwrap();
        let sharded = row_of(&doc, "cairn-shard2x3", 3).unwrap();
        assert!(
            sharded["figures"]["transactions"].as_u64().unwrap() > 0,
            "{sharded}"
        );
        assert!(
            sharded["figures"]["verified_reads"].as_u64().unwrap() > 0,
            "{sharded}"
        );
        assert!(sharded["money"].is_null(), "{sharded}");
        assert!(std::fs::read_to_string(out.path().join("figures.md"))
            .unwrap()
            .contains("cairn-shard2x3"));
    }

    /// A tiny run against the real `cairn-server` (built beside the tests by `cargo test
    /// --workspace`), every balance checked against the model, and its report rendered.
    #[test]
    fn a_tiny_serve_on_cairn_checks_out() {
        let mut a = args("cairn");
        if a.server.is_none() {
            eprintln!(
                "SKIPPED: cairn-server is not built beside the tests (cargo build -p cairn-server)"
            );
            return;
        }
        let out = tempfile::tempdir().unwrap();
        a.report_dir = Some(out.path().to_path_buf());
        run(&a).unwrap();
        let doc: Value = crate::record::read_json(&out.path().join("serve.json")).unwrap();
        let rows = doc["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        for r in rows {
            assert!(r["figures"]["transactions"].as_u64().unwrap() > 0, "{r}");
            assert!(r["money"].as_i64().is_some(), "{r}");
        }
        assert!(std::fs::read_to_string(out.path().join("figures.md"))
            .unwrap()
            .contains("Cairn / immudb"));
        assert!(out.path().join("smallbank.svg").is_file());
    }

    /// The same against immudb's own server, when Go can build it and the peer.
    #[test]
    fn a_tiny_serve_on_immudb_checks_out() {
        let a = args("immudb");
        if a.server.is_none() {
            eprintln!(
                "SKIPPED: cairn-server is not built beside the tests (cargo build -p cairn-server)"
            );
            return;
        }
        let go = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .chain([PathBuf::from("/usr/local/go/bin")])
            .any(|d| d.join("go").is_file());
        if !go {
            eprintln!("SKIPPED: no Go toolchain, so no immudb server or peer");
            return;
        }
        run(&a).unwrap();
    }
}

//! LedgerBench's workloads on immudb v1.11.1, embedded in the Go peer `cairn-immudb-peer`
//! (`crates/cairn-bench/peers/immudb/`, its protocol in its README): the peer is started in the
//! run's directory and driven over a pipe.
//!
//! * SmallBank ([`run_with`]): the peer loads the accounts, receives the same operation
//!   streams as Cairn (each client's first `per_client` operations, interleaved), dumps every
//!   balance and reports; with an audit block it also audits its history as it grows and in full
//!   at the end.
//! * Storage growth ([`run_storage`]): records of 100 incompressible bytes (`storage::record_value`),
//!   the bytes on disk at each checkpoint.
//! * Range reads ([`run_range`]): keys `range::range_key` with their ids as values, each range
//!   read in one snapshot and verified immediately, deferred or not at all.
//!
//! Owns: finding or building the peer, the runs on it. May call: `smallbank` (the streams),
//! `storage` and `range` (the workloads' keys and values). Must never touch: Cairn.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Deserialize;
use serde_json::Value;

use super::smallbank::{Kind, Op, Stream};
use super::Figures;
use crate::failure::{Context, Failure};

/// The peer's directory in the workspace.
fn peer_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/immudb")
}

/// The newest modification time of the peer's sources (`*.go`, `go.mod`, `go.sum`).
fn sources_modified() -> Option<SystemTime> {
    std::fs::read_dir(peer_source())
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.ends_with(".go") || name == "go.mod" || name == "go.sum"
        })
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .max()
}

/// The peer binary: `given`, or the workspace's `target/immudb-peer/cairn-immudb-peer`, built by
/// the peer's `build.sh` when missing or older than the peer's sources (Go needed: the error says
/// so). Builds are serialized within the process.
pub fn peer_binary(given: Option<&Path>) -> Result<PathBuf, Failure> {
    static BUILDING: Mutex<()> = Mutex::new(());
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(Failure(format!("--peer {}: no such file", path.display())))
        };
    }
    let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/immudb-peer");
    let binary = out.join("cairn-immudb-peer");
    let built = std::fs::metadata(&binary).and_then(|m| m.modified()).ok();
    let stale = match (built, sources_modified()) {
        (None, _) => true,
        (Some(built), Some(sources)) => sources > built,
        (Some(_), None) => false,
    };
    if !stale {
        return Ok(binary);
    }
    eprintln!(
        "the immudb peer is {}: building it (Go; about 90 s the first time)",
        if built.is_none() {
            "not built"
        } else {
            "older than its sources"
        }
    );
    run_build_script(&peer_source().join("build.sh"), &out, &binary)?;
    Ok(binary)
}

/// Runs one of the peer's build scripts (`build.sh`, `build-server.sh`) with `out` as its
/// output directory and checks that it produced `binary`. The script's output is kept, not
/// shown, and on failure its last 40 lines are in the error, so that a log holding only the
/// error (a test's panic message, say) still says why the build failed.
pub(crate) fn run_build_script(script: &Path, out: &Path, binary: &Path) -> Result<(), Failure> {
    const TAIL_LINES: usize = 40;
    let output = Command::new("bash")
        .arg(script)
        .arg(out)
        .output()
        .context(|| format!("running {}", script.display()))?;
    if output.status.success() && binary.is_file() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    Err(Failure(format!(
        "{} did not build {} ({}; it needs Go >= 1.25, see {}); the script's last lines:\n{tail}",
        script.display(),
        binary.display(),
        output.status,
        peer_source().join("README.md").display()
    )))
}

/// The peer's process: its stdin, its replies, its log (`dir/peer.log`).
struct Peer {
    child: Child,
    input: Option<BufWriter<ChildStdin>>,
    output: Lines<BufReader<ChildStdout>>,
    log: PathBuf,
}

impl Peer {
    /// Starts `binary` with its stderr in `dir/peer.log` and sends the config line.
    fn start(binary: &Path, dir: &Path, config: &Value) -> Result<Peer, Failure> {
        let log = dir.join("peer.log");
        let stderr = std::fs::File::create(&log).context(|| "creating the peer's log".into())?;
        let mut child = Command::new(binary)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .context(|| format!("starting {}", binary.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Failure("the peer's pipes".into()));
        };
        let mut peer = Peer {
            child,
            input: Some(BufWriter::new(stdin)),
            output: BufReader::new(stdout).lines(),
            log,
        };
        match peer.send(&config.to_string()) {
            Ok(()) => Ok(peer),
            Err(e) => peer.finish(Err(e)),
        }
    }

    /// Writes one line to the peer and flushes it.
    fn send(&mut self, line: &str) -> Result<(), Failure> {
        let input = self
            .input
            .as_mut()
            .ok_or_else(|| Failure("the peer's input is closed".into()))?;
        writeln!(input, "{line}").context(|| "writing to the peer".into())?;
        input.flush().context(|| "writing to the peer".into())
    }

    /// The peer's next reply, which must be the event `want`.
    fn reply(&mut self, want: &str) -> Result<Value, Failure> {
        let line = self
            .output
            .next()
            .ok_or_else(|| Failure(format!("the peer ended before its {want:?} reply")))?
            .context(|| "reading the peer".into())?;
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| Failure(format!("the peer's reply {line:?}: {e}")))?;
        if v["event"] != want {
            return Err(Failure(format!(
                "the immudb peer answered {line} (waiting for {want})"
            )));
        }
        Ok(v)
    }

    /// Closes the peer's input and waits for it to exit.
    fn wait(mut self) -> Result<(ExitStatus, PathBuf), Failure> {
        drop(self.input.take());
        let status = self
            .child
            .wait()
            .context(|| "waiting for the peer".into())?;
        Ok((status, self.log))
    }

    /// Ends a run: `outcome` (the replies read) must be Ok and the peer must exit with 0; an
    /// error names the exit status and the peer's log.
    fn finish<T>(self, outcome: Result<T, Failure>) -> Result<T, Failure> {
        let (status, log) = self.wait()?;
        let value = outcome.map_err(|e| {
            Failure(format!(
                "{e}; the peer exited with {status} (its log: {})",
                log.display()
            ))
        })?;
        if !status.success() {
            return Err(Failure(format!(
                "the immudb peer exited with {status} (its log: {})",
                log.display()
            )));
        }
        Ok(value)
    }
}

/// The verification modes the peer knows.
const VERIFY_MODES: [&str; 3] = ["immediate", "deferred", "none"];

/// Checks a verification mode and its deferred period.
fn check_verify(verify: &str, deferred_delay_ms: u64) -> Result<(), Failure> {
    if !VERIFY_MODES.contains(&verify) {
        return Err(Failure(format!(
            "immudb peer: verify {verify:?} is not immediate, deferred or none"
        )));
    }
    if verify == "deferred" && deferred_delay_ms == 0 {
        return Err(Failure(
            "immudb peer: deferred verification needs deferred_delay_ms >= 1".into(),
        ));
    }
    Ok(())
}

/// Deferred verification's figures (the result's `deferred`).
#[derive(Clone, Debug, Deserialize)]
pub struct Deferred {
    /// Non-empty batches.
    pub batches: u64,
    /// Promises per batch.
    pub keys_per_batch_mean: f64,
    /// From a promise to the end of the batch that verified it, ms.
    pub verify_latency_ms_p50: f64,
    pub verify_latency_ms_p99: f64,
    pub verify_latency_ms_max: f64,
    /// The batch period.
    pub delay_ms: u64,
    /// Dual proofs from a promised transaction to the fresh state.
    pub tx_proofs: u64,
}

/// The block auditor's figures (the result's `audit`).
#[derive(Clone, Debug, Deserialize)]
pub struct Audit {
    /// The configured block: at least this many transactions per audit.
    pub block: u64,
    /// Blocks audited while the clients ran.
    pub blocks: u64,
    /// Transactions and entries they covered.
    pub txs: u64,
    pub entries: u64,
    /// Time to audit one block, ms.
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    pub latency_ms_mean: f64,
    /// The last transaction audited.
    pub last_audited: u64,
}

/// The full audit at the end (the result's `full_audit`).
#[derive(Clone, Debug, Deserialize)]
pub struct FullAudit {
    /// Every transaction of the store, and their entries.
    pub txs: u64,
    pub entries: u64,
    pub seconds: f64,
}

/// A field of the result that is an object or null.
fn optional<T: for<'de> Deserialize<'de>>(r: &Value, key: &str) -> Result<Option<T>, Failure> {
    match &r[key] {
        Value::Null => Ok(None),
        v => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| Failure(format!("the peer's result: {key}: {e}"))),
    }
}

/// What the peer reported, beside the figures: its load and the balances it dumped.
pub struct PeerRun {
    pub figures: Figures,
    pub load_seconds: f64,
    /// The committed writing transactions in immudb's commit order.
    pub log: Vec<Op>,
    /// (savings, checking) by account.
    pub balances: Vec<(i64, i64)>,
    /// Deferred verification's figures (verify "deferred" only).
    pub deferred: Option<Deferred>,
    /// The block audits (`audit_block` > 0 only).
    pub audit: Option<Audit>,
    /// The full audit at the end (`audit_block` > 0 only).
    pub full_audit: Option<FullAudit>,
}

/// Everything a SmallBank run on the peer takes.
#[derive(Clone, Debug)]
pub struct PeerOptions {
    pub binary: PathBuf,
    /// The run's directory: the store goes in `immudb/`, the dump and the peer's log beside it.
    pub dir: PathBuf,
    pub accounts: u64,
    pub clients: u64,
    /// Operations each client runs: the first `per_client` of its stream.
    pub per_client: u64,
    /// "immediate", "deferred" or "none".
    pub verify: String,
    /// The deferred verifier's batch period, ms (>= 1 with "deferred"; ignored otherwise).
    pub deferred_delay_ms: u64,
    pub seed: u64,
    pub zipf: bool,
    /// Audit every block of at least this many immudb transactions while the clients run, and
    /// the whole store at the end; 0: no audit.
    pub audit_block: u64,
    /// immudb's own server to run against (`127.0.0.1:PORT`, the peer's server mode), or
    /// `None` for the store embedded in the peer.
    pub server: Option<String>,
}

/// Runs SmallBank on the peer as `o` says (synced: every commit durable before it is
/// acknowledged).
pub fn run_with(o: &PeerOptions) -> Result<PeerRun, Failure> {
    check_verify(&o.verify, o.deferred_delay_ms)?;
    let (dir, accounts, clients, per_client) = (&o.dir, o.accounts, o.clients, o.per_client);
    let store = dir.join("immudb");
    let dump = dir.join("balances.txt");
    let config = serde_json::json!({
        "dir": store,
        "accounts": accounts,
        "clients": clients,
        "verify": o.verify,
        "deferred_delay_ms": o.deferred_delay_ms,
        "synced": true,
        "audit_block": o.audit_block,
    });
    let mut config = config;
    if let Some(server) = &o.server {
        config["server"] = Value::from(server.clone());
        // A database of its own: `defaultdb`'s pools (128 log readers, 30 commits) cannot
        // be raised and refuse 256 clients; the peer creates this one with both raised to
        // the clients' count, every other setting immudb's default.
        config["server_database"] = Value::from("cairnbench");
        config["dir"] = Value::from(dir.join("client-state").to_string_lossy().into_owned());
    }
    let mut peer = Peer::start(&o.binary, dir, &config)?;
    let loaded = peer.send("LOAD").and_then(|()| peer.reply("loaded"));
    let loaded = match loaded {
        Ok(v) => v,
        Err(e) => return peer.finish(Err(e)),
    };
    // Each client's operations, kept to map the peer's log back to them.
    let ops: Arc<Vec<Vec<Op>>> = Arc::new(
        (0..clients)
            .map(|c| {
                Stream::new(o.seed, c, accounts, o.zipf)
                    .take(per_client as usize)
                    .collect()
            })
            .collect(),
    );
    // The streams, interleaved, from a thread: the peer's queues push back.
    let mut input = peer
        .input
        .take()
        .ok_or_else(|| Failure("the peer's input is closed".into()))?;
    let feeder = std::thread::spawn({
        let (dump, ops) = (dump.clone(), Arc::clone(&ops));
        move || -> Result<(), Failure> {
            for i in 0..per_client as usize {
                for client in ops.iter() {
                    writeln!(input, "{}", client[i].line())
                        .context(|| "feeding the peer".into())?;
                }
            }
            writeln!(input, "DUMP {}", dump.display()).context(|| "feeding the peer".into())?;
            writeln!(input, "END").context(|| "feeding the peer".into())?;
            input.flush().context(|| "feeding the peer".into())?;
            Ok(())
        }
    });
    let result = peer.reply("dumped").and_then(|_| peer.reply("result"));
    let fed = feeder
        .join()
        .unwrap_or_else(|_| Err(Failure("the feeder panicked".into())));
    let result = peer.finish(result)?;
    fed?;
    let sync = result["sync"].as_str().unwrap_or("").to_string();
    // Every run is configured synced; a peer that says otherwise measured something else.
    if !sync.starts_with("synced") {
        return Err(Failure(format!("the immudb peer ran {sync:?}, not synced")));
    }
    let figures = figures(&result)?;
    // The commit order: (client, seq, tx id) sorted by tx id.
    let mut entries: Vec<(u64, u64, u64)> = result["log"]
        .as_array()
        .ok_or_else(|| Failure("the peer's result has no log".into()))?
        .iter()
        .map(|e| {
            let n = |i: usize| e[i].as_u64().ok_or_else(|| Failure("a log entry".into()));
            Ok((n(2)?, n(0)?, n(1)?))
        })
        .collect::<Result<_, Failure>>()?;
    entries.sort_unstable();
    let mut log = Vec::with_capacity(entries.len());
    for (_, client, seq) in entries {
        let op = ops
            .get(client as usize)
            .and_then(|o| o.get(seq as usize))
            .ok_or_else(|| Failure(format!("the peer logged client {client} seq {seq}")))?;
        log.push(*op);
    }
    Ok(PeerRun {
        figures,
        load_seconds: loaded["seconds"].as_f64().unwrap_or(0.0),
        log,
        balances: read_dump(&dump, accounts)?,
        deferred: optional(&result, "deferred")?,
        audit: optional(&result, "audit")?,
        full_audit: optional(&result, "full_audit")?,
    })
}

/// Bytes of a storage record's value (the workload's records are defined once, beside Cairn's
/// side: `storage::record_key`, `storage::record_value`, `range::range_key`).
#[cfg(test)]
const RECORD_VALUE_BYTES: usize = super::storage::VALUE_BYTES;
#[cfg(test)]
use super::range::range_key;
#[cfg(test)]
use super::storage::{record_key, record_value};

/// The range workload's value of `id`: the id as an 8-byte big-endian integer.
#[cfg(test)]
fn range_value(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// The store's size after the first `records` records of the storage workload.
#[derive(Clone, Debug)]
pub struct StoragePoint {
    pub records: u64,
    /// Every regular file under the store's directory: with the store open (index flushed) when
    /// synced, else closed (see the peer's README).
    pub disk_bytes: u64,
    /// Seconds to write this checkpoint's records and index them (not the flush or the
    /// measurement).
    pub seconds: f64,
    /// The bytes by directory of the store (`val_0` value log, `tx` transaction log, `commit`
    /// commit log, `aht/*` the Alh tree, `index/*` the B-tree index).
    pub split: BTreeMap<String, u64>,
}

/// The storage workload on the peer in `dir`: records 0.. written `batch` per transaction
/// (1..=1000), the bytes on disk measured when `checkpoints[i]` records (strictly increasing)
/// are stored. `synced`: every commit fsynced (immudb's 20 ms group commit).
pub fn run_storage(
    binary: &Path,
    dir: &Path,
    checkpoints: &[u64],
    batch: u64,
    synced: bool,
) -> Result<Vec<StoragePoint>, Failure> {
    if !(1..=1000).contains(&batch) {
        return Err(Failure(format!(
            "immudb storage: batch {batch} is not in 1..=1000"
        )));
    }
    if checkpoints.is_empty() || checkpoints[0] == 0 || checkpoints.windows(2).any(|w| w[0] >= w[1])
    {
        return Err(Failure(format!(
            "immudb storage: checkpoints {checkpoints:?} are not positive and increasing"
        )));
    }
    let config = serde_json::json!({
        "dir": dir.join("immudb"),
        "accounts": 0,
        "clients": 1,
        "verify": "none",
        "synced": synced,
    });
    let mut peer = Peer::start(binary, dir, &config)?;
    let mut points = Vec::with_capacity(checkpoints.len());
    let mut outcome = Ok(());
    let mut stored = 0;
    for &records in checkpoints {
        let reply = peer
            .send(&format!("STORE {} {batch}", records - stored))
            .and_then(|()| peer.reply("stored"))
            .and_then(|r| storage_point(&r, records));
        match reply {
            Ok(point) => points.push(point),
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
        stored = records;
    }
    let outcome = outcome
        .and_then(|()| peer.send("END"))
        .and_then(|()| peer.reply("result"));
    peer.finish(outcome)?;
    Ok(points)
}

/// A `stored` reply, which must say `records`.
fn storage_point(r: &Value, records: u64) -> Result<StoragePoint, Failure> {
    let n = |k: &str| {
        r[k].as_u64()
            .ok_or_else(|| Failure(format!("the peer's stored reply has no {k}: {r}")))
    };
    if n("records")? != records {
        return Err(Failure(format!(
            "the peer stored {} records, not {records}",
            n("records")?
        )));
    }
    let split = r["disk_split"]
        .as_object()
        .ok_or_else(|| Failure(format!("the peer's stored reply has no disk_split: {r}")))?
        .iter()
        .map(|(k, v)| {
            v.as_u64()
                .map(|b| (k.clone(), b))
                .ok_or_else(|| Failure(format!("disk_split {k}: {v}")))
        })
        .collect::<Result<_, Failure>>()?;
    Ok(StoragePoint {
        records,
        disk_bytes: n("disk_bytes")?,
        seconds: r["seconds"].as_f64().unwrap_or(0.0),
        split,
    })
}

/// Latency quantiles of one operation type as the peer reported them, µs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// What a range run reported.
pub struct RangeRun {
    /// `transactions`: ranges read; `verified_reads`: entries verified; no per-type latencies
    /// (see `latency`).
    pub figures: Figures,
    /// Entries the ranges returned.
    pub entries_read: u64,
    /// Seconds to write the keys (RLOAD).
    pub load_seconds: f64,
    /// Each range's latency, from its start to verified (immediate) or read.
    pub latency: Latency,
    /// Deferred verification's figures (verify "deferred" only).
    pub deferred: Option<Deferred>,
}

/// The range workload on the peer in `dir`: keys 0..`keys` written, then `ranges` as
/// (client, lo, count), each client reading ids lo..lo+count-1 in one snapshot, `clients`
/// clients concurrently, verified as `verify` says ("immediate", "deferred" with batches every
/// `delay_ms`, or "none"). Synced.
pub fn run_range(
    binary: &Path,
    dir: &Path,
    keys: u64,
    ranges: &[(u64, u64, u64)],
    clients: u64,
    verify: &str,
    delay_ms: u64,
) -> Result<RangeRun, Failure> {
    check_verify(verify, delay_ms)?;
    let config = serde_json::json!({
        "dir": dir.join("immudb"),
        "accounts": 0,
        "clients": clients,
        "verify": verify,
        "deferred_delay_ms": delay_ms,
        "synced": true,
    });
    let mut peer = Peer::start(binary, dir, &config)?;
    let loaded = match peer
        .send(&format!("RLOAD {keys}"))
        .and_then(|()| peer.reply("rloaded"))
    {
        Ok(v) => v,
        Err(e) => return peer.finish(Err(e)),
    };
    let mut input = peer
        .input
        .take()
        .ok_or_else(|| Failure("the peer's input is closed".into()))?;
    let lines: Vec<String> = ranges
        .iter()
        .enumerate()
        .map(|(i, (client, lo, count))| format!("R {client} {i} {lo} {count}"))
        .collect();
    let feeder = std::thread::spawn(move || -> Result<(), Failure> {
        for line in lines {
            writeln!(input, "{line}").context(|| "feeding the peer".into())?;
        }
        writeln!(input, "END").context(|| "feeding the peer".into())?;
        input.flush().context(|| "feeding the peer".into())
    });
    let result = peer.reply("result");
    let fed = feeder
        .join()
        .unwrap_or_else(|_| Err(Failure("the feeder panicked".into())));
    let result = peer.finish(result)?;
    fed?;
    let t = &result["per_type"]["Range"];
    let q = |k: &str| t[k].as_f64().unwrap_or(0.0);
    let timed = t["count"].as_u64().unwrap_or(0);
    if timed != ranges.len() as u64 {
        return Err(Failure(format!(
            "the immudb peer timed {timed} ranges of the {} sent",
            ranges.len()
        )));
    }
    Ok(RangeRun {
        figures: figures(&result)?,
        entries_read: result["entries_read"]
            .as_u64()
            .ok_or_else(|| Failure("the peer's result has no entries_read".into()))?,
        load_seconds: loaded["seconds"].as_f64().unwrap_or(0.0),
        latency: Latency {
            count: timed,
            p50_us: q("p50_us"),
            p99_us: q("p99_us"),
            max_us: q("max_us"),
        },
        deferred: optional(&result, "deferred")?,
    })
}

/// The figures of the peer's result line.
fn figures(r: &Value) -> Result<Figures, Failure> {
    let n = |k: &str| {
        r[k].as_u64()
            .ok_or_else(|| Failure(format!("the peer's result has no {k}")))
    };
    let mut f = Figures::new(r["seconds"].as_f64().unwrap_or(0.0));
    f.transactions = n("transactions")?;
    f.aborted = n("aborted")?;
    f.conflicts = n("conflict_retries")?;
    f.verified_reads = n("verified_reads")?;
    f.verified_writes = n("verified_writes")?;
    f.proof_bytes = n("proof_bytes")?;
    f.read_proof_bytes = (r["proof_bytes_per_verified_read"].as_f64().unwrap_or(0.0)
        * f.verified_reads as f64) as u64;
    f.disk_bytes = r["disk_bytes"].as_u64();
    for kind in Kind::ALL {
        let t = &r["per_type"][kind.name()];
        if let Some(count) = t["count"].as_u64() {
            let q = |k: &str| t[k].as_f64().unwrap_or(0.0);
            f.add_quantiles(
                kind,
                count,
                q("p50_us"),
                q("p99_us"),
                q("p999_us"),
                q("max_us"),
            );
        }
    }
    Ok(f)
}

fn read_dump(path: &Path, accounts: u64) -> Result<Vec<(i64, i64)>, Failure> {
    let text = std::fs::read_to_string(path).context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::with_capacity(accounts as usize);
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let parse = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| Failure(format!("{} line {}: {line:?}", path.display(), i + 1)))
        };
        if f.len() != 3 || parse(f[0])? != i as i64 {
            return Err(Failure(format!(
                "{} line {}: {line:?}",
                path.display(),
                i + 1
            )));
        }
        out.push((parse(f[1])?, parse(f[2])?));
    }
    if out.len() as u64 != accounts {
        return Err(Failure(format!(
            "{} holds {} accounts, not {accounts}",
            path.display(),
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peer, or None (the test then says it skipped) when there is no Go to build it. With
    /// Go, a peer that does not build fails the test.
    fn peer_or_skip() -> Option<PathBuf> {
        let go = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .chain([PathBuf::from("/usr/local/go/bin")])
            .any(|d| d.join("go").is_file());
        match peer_binary(None) {
            Ok(binary) => Some(binary),
            Err(e) => {
                assert!(
                    !go,
                    "Go is installed but the immudb peer is not available: {e}"
                );
                eprintln!("SKIPPED: no Go toolchain, so no immudb peer: {e}");
                None
            }
        }
    }

    /// The same bytes as the peer's own test (`TestRecordValue`), from an independent
    /// SplitMix64: both sides write the same records.
    #[test]
    fn immudb_record_values_match_the_peer() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        for (id, head, tail) in [
            (0, "afcd1d7b39a820e2f465b9a16a9e786e", "7bdbbbe0"),
            (1, "c15c0289ec2d0a9167ec8e65a18debbe", "c05daa4b"),
            (1234567, "85fc08fb17d09e59a50f545884f0732c", "ebbf1990"),
        ] {
            let v = record_value(id);
            assert_eq!(
                (hex(&v[..16]).as_str(), hex(&v[96..]).as_str()),
                (head, tail)
            );
        }
        assert_eq!(record_key(258), *b"r\0\0\0\0\0\0\x01\x02");
        assert_eq!(range_key(1), *b"k\0\0\0\0\0\0\0\x01");
        assert_eq!(range_value(3), [0, 0, 0, 0, 0, 0, 0, 3]);
    }

    #[test]
    fn immudb_storage_grows_by_checkpoint() {
        let Some(binary) = peer_or_skip() else { return };
        let dir = tempfile::tempdir().unwrap();
        let points = run_storage(&binary, dir.path(), &[300, 600, 1000], 100, true).unwrap();
        assert_eq!(
            points.iter().map(|p| p.records).collect::<Vec<_>>(),
            [300, 600, 1000]
        );
        for (i, p) in points.iter().enumerate() {
            assert_eq!(p.split.values().sum::<u64>(), p.disk_bytes, "{p:?}");
            assert!(
                p.split["val_0"] >= p.records * RECORD_VALUE_BYTES as u64,
                "{p:?}"
            );
            assert!(
                i == 0 || p.disk_bytes > points[i - 1].disk_bytes,
                "{points:?}"
            );
        }
        // Bad arguments are refused before the peer starts.
        assert!(run_storage(&binary, dir.path(), &[10, 10], 100, true).is_err());
        assert!(run_storage(&binary, dir.path(), &[10], 1001, true).is_err());
    }

    #[test]
    fn immudb_ranges_in_each_verify_mode() {
        let Some(binary) = peer_or_skip() else { return };
        let ranges = [(0, 0, 1), (1, 990, 30), (0, 100, 1500), (1, 2499, 1)];
        let entries: u64 = ranges.iter().map(|r| r.2).sum();
        for verify in VERIFY_MODES {
            let dir = tempfile::tempdir().unwrap();
            let r = run_range(&binary, dir.path(), 2500, &ranges, 2, verify, 5).unwrap();
            assert_eq!(r.figures.transactions, ranges.len() as u64, "{verify}");
            assert_eq!(r.entries_read, entries, "{verify}");
            assert_eq!(r.latency.count, ranges.len() as u64, "{verify}");
            let verified = if verify == "none" { 0 } else { entries };
            assert_eq!(r.figures.verified_reads, verified, "{verify}");
            assert_eq!(r.deferred.is_some(), verify == "deferred", "{verify}");
        }
        let dir = tempfile::tempdir().unwrap();
        // A range past the last key: the peer refuses the line (exit 2).
        let e = run_range(&binary, dir.path(), 10, &[(0, 5, 6)], 1, "none", 0)
            .err()
            .expect("a range past the keys");
        assert!(e.0.contains("exit status: 2"), "{e}");
        assert!(run_range(&binary, dir.path(), 10, &[], 1, "sometimes", 0).is_err());
        assert!(run_range(&binary, dir.path(), 10, &[], 1, "deferred", 0).is_err());
    }

    #[test]
    fn immudb_smallbank_with_an_audit() {
        let Some(binary) = peer_or_skip() else { return };
        let dir = tempfile::tempdir().unwrap();
        let r = run_with(&PeerOptions {
            binary,
            dir: dir.path().to_path_buf(),
            accounts: 100,
            clients: 2,
            per_client: 50,
            verify: "deferred".into(),
            deferred_delay_ms: 10,
            seed: 46,
            zipf: false,
            audit_block: 20,
            server: None,
        })
        .unwrap();
        assert_eq!(r.figures.transactions, 100);
        assert_eq!(r.balances.len(), 100);
        let deferred = r.deferred.expect("deferred figures");
        assert!(
            deferred.batches > 0 && deferred.delay_ms == 10,
            "{deferred:?}"
        );
        let audit = r.audit.expect("audit figures");
        let full = r.full_audit.expect("full audit figures");
        assert!(
            audit.block == 20 && audit.blocks > 0 && audit.txs >= 20 * audit.blocks,
            "{audit:?}"
        );
        // Every writing transaction, and LOAD's one, is in the full audit.
        assert_eq!(full.txs, r.log.len() as u64 + 1, "{full:?}");
        assert!(full.txs >= audit.last_audited && full.entries > audit.entries);
    }
}

//! SmallBank on immudb v1.11.1, embedded in the Go peer `cairn-immudb-peer`
//! (`crates/cairn-bench/peers/immudb/`, its protocol in its README): the peer is started in the
//! run's directory, loads the accounts, receives the same operation streams as Cairn (each
//! client's first `per_client` operations, interleaved), dumps every balance and reports.
//!
//! Owns: finding or building the peer, one run on it ([`run`]). May call: `smallbank` (the
//! streams). Must never touch: Cairn.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::Value;

use super::smallbank::{Kind, Op, Stream};
use super::{Figures, Verify};
use crate::failure::{Context, Failure};

/// The peer's directory in the workspace.
fn peer_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/immudb")
}

/// The peer binary: `given`, or the workspace's `target/immudb-peer/cairn-immudb-peer`,
/// built by the peer's `build.sh` when missing (Go needed: the error says so).
pub fn peer_binary(given: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(Failure(format!("--peer {}: no such file", path.display())))
        };
    }
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/immudb-peer");
    let binary = out.join("cairn-immudb-peer");
    if binary.is_file() {
        return Ok(binary);
    }
    eprintln!("the immudb peer is not built: building it (Go; about 90 s the first time)");
    let status = Command::new("bash")
        .arg(peer_source().join("build.sh"))
        .arg(&out)
        .status()
        .context(|| "running the immudb peer's build.sh".into())?;
    if !status.success() || !binary.is_file() {
        return Err(Failure(format!(
            "the immudb peer did not build ({status}); it needs Go >= 1.25 (see {})",
            peer_source().join("README.md").display()
        )));
    }
    Ok(binary)
}

/// What the peer reported, beside the figures: its load and the balances it dumped.
pub struct PeerRun {
    pub figures: Figures,
    pub load_seconds: f64,
    /// The committed writing transactions in immudb's commit order.
    pub log: Vec<Op>,
    /// (savings, checking) by account.
    pub balances: Vec<(i64, i64)>,
    /// The sync setting the peer reported.
    pub sync: String,
}

/// Runs the peer in `dir`: `accounts` accounts, `clients` clients each running the first
/// `per_client` operations of its stream.
#[allow(clippy::too_many_arguments)]
pub fn run(
    binary: &Path,
    dir: &Path,
    accounts: u64,
    clients: u64,
    per_client: u64,
    verify: Verify,
    seed: u64,
    zipf: bool,
) -> Result<PeerRun, Failure> {
    let store = dir.join("immudb");
    let dump = dir.join("balances.txt");
    let stderr =
        std::fs::File::create(dir.join("peer.log")).context(|| "creating the peer's log".into())?;
    let mut child = Command::new(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .context(|| format!("starting {}", binary.display()))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Failure("the peer's pipes".into()));
    };
    let mut input = BufWriter::new(stdin);
    let mut output = BufReader::new(stdout).lines();
    let mut reply = |want: &str| -> Result<Value, Failure> {
        let line = output
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
    };
    let config = serde_json::json!({
        "dir": store,
        "accounts": accounts,
        "clients": clients,
        "verify": verify.name(),
        "synced": true,
    });
    let send = |input: &mut BufWriter<_>, line: &str| -> Result<(), Failure> {
        writeln!(input, "{line}").context(|| "writing to the peer".into())?;
        Ok(())
    };
    send(&mut input, &config.to_string())?;
    send(&mut input, "LOAD")?;
    input.flush().context(|| "writing to the peer".into())?;
    let loaded = reply("loaded")?;
    // Each client's operations, kept to map the peer's log back to them.
    let ops: Arc<Vec<Vec<Op>>> = Arc::new(
        (0..clients)
            .map(|c| {
                Stream::new(seed, c, accounts, zipf)
                    .take(per_client as usize)
                    .collect()
            })
            .collect(),
    );
    // The streams, interleaved, from a thread: the peer's queues push back.
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
    let dumped = reply("dumped");
    let result = dumped.and_then(|_| reply("result"));
    let fed = feeder
        .join()
        .unwrap_or_else(|_| Err(Failure("the feeder panicked".into())));
    let status = child.wait().context(|| "waiting for the peer".into())?;
    let result = result.map_err(|e| {
        Failure(format!(
            "{e}; the peer exited with {status} (its log: {})",
            dir.join("peer.log").display()
        ))
    })?;
    fed?;
    if !status.success() {
        return Err(Failure(format!("the immudb peer exited with {status}")));
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
        sync: result["sync"].as_str().unwrap_or("").to_string(),
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

//! LedgerBench's audit workload (issue 46, workload 4) on Cairn: while SmallBank runs, an
//! auditor takes each new block of about `block` transactions (the versions committed since
//! its last block) with `Ledger::block` and checks it with `cairn_proof::block::verify_block`
//! from the digest and roots it holds; at the end, the full `Ledger::audit` of the ledger.
//!
//! Owns: the auditor thread ([`auditor`]), the full audit's measure ([`full_audit`]) and their
//! figures. May call: `cairn_ledger`, `cairn_proof`, `sys::proc` (bytes read). Must never
//! touch: the engine's internals.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn_ledger::{AuditOptions, Ledger};
use cairn_proof::block::verify_block;
use hdrhistogram::Histogram;

use crate::failure::{Context, Failure};
use crate::sys::proc::IoCounters;

/// What the block auditor measured.
#[derive(Clone, Debug, Default)]
pub struct AuditFigures {
    /// Transactions per block asked.
    pub block: u64,
    pub blocks: u64,
    pub versions: u64,
    pub transactions: u64,
    /// Keys changed, summed over the blocks' versions.
    pub changes: u64,
    /// The auditor's check of a block (`verify_block`), ms.
    pub verify_ms_p50: f64,
    pub verify_ms_p99: f64,
    pub verify_ms_max: f64,
    pub verify_ms_mean: f64,
    /// The ledger's making of a block (`Ledger::block`), ms.
    pub make_ms_p50: f64,
    pub make_ms_p99: f64,
    /// The full audit at the end.
    pub full_seconds: f64,
    pub full_read_bytes: Option<u64>,
    pub full_versions: u64,
}

impl AuditFigures {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "block": self.block,
            "blocks": self.blocks,
            "versions": self.versions,
            "transactions": self.transactions,
            "transactions_per_block": self.transactions as f64 / self.blocks.max(1) as f64,
            "changes": self.changes,
            "verify_ms_p50": self.verify_ms_p50,
            "verify_ms_p99": self.verify_ms_p99,
            "verify_ms_max": self.verify_ms_max,
            "verify_ms_mean": self.verify_ms_mean,
            "make_ms_p50": self.make_ms_p50,
            "make_ms_p99": self.make_ms_p99,
            "full_audit_seconds": self.full_seconds,
            "full_audit_read_bytes": self.full_read_bytes,
            "full_audit_versions": self.full_versions,
        })
    }
}

/// The block auditor: from the version the run starts at, whenever `block` more transactions
/// have committed (`committed` counts them), it audits the versions made since its last block;
/// after `stop`, one last block. A block that does not verify fails the run.
pub fn auditor(
    ledger: &Ledger,
    committed: &AtomicU64,
    stop: &AtomicBool,
    block: u64,
) -> Result<AuditFigures, Failure> {
    let names: Vec<Vec<u8>> = ledger
        .tables()
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
    let names: Vec<&[u8]> = names.iter().map(|n| &n[..]).collect();
    let mut state = ledger
        .audit_state(ledger.version())
        .context(|| "the auditor's first state".into())?;
    let new_histogram = || {
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
            .map_err(|e| Failure(format!("a histogram: {e}")))
    };
    let (mut verify, mut make) = (new_histogram()?, new_histogram()?);
    let mut figures = AuditFigures {
        block,
        ..AuditFigures::default()
    };
    let mut seen = committed.load(Ordering::Acquire);
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let now = committed.load(Ordering::Acquire);
        if now - seen < block && !stopping {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let to = ledger.version();
        if to > state.digest.size {
            let t = Instant::now();
            let b = ledger
                .block(state.digest.size, to)
                .context(|| format!("making the block {}..={to}", state.digest.size + 1))?;
            let made = t.elapsed();
            let t = Instant::now();
            state = verify_block(&names, &state, &b)
                .map_err(|e| Failure(format!("the auditor refused a block: {e}")))?;
            let checked = t.elapsed();
            make.saturating_record(made.as_micros().max(1) as u64);
            verify.saturating_record(checked.as_micros().max(1) as u64);
            figures.blocks += 1;
            figures.versions += b.versions.len() as u64;
            figures.transactions += now - seen;
            figures.changes += b
                .versions
                .iter()
                .flat_map(|v| &v.changes)
                .map(|c| c.writes.len() as u64)
                .sum::<u64>();
            seen = now;
        }
        if stopping {
            break;
        }
    }
    figures.verify_ms_p50 = verify.value_at_quantile(0.5) as f64 / 1e3;
    figures.verify_ms_p99 = verify.value_at_quantile(0.99) as f64 / 1e3;
    figures.verify_ms_max = verify.max() as f64 / 1e3;
    figures.verify_ms_mean = verify.mean() / 1e3;
    figures.make_ms_p50 = make.value_at_quantile(0.5) as f64 / 1e3;
    figures.make_ms_p99 = make.value_at_quantile(0.99) as f64 / 1e3;
    Ok(figures)
}

/// The full audit of `ledger` (every table against its root, every kept version rebuilt, every
/// version record and history node): seconds, bytes read from storage, versions. A problem
/// fails the run.
pub fn full_audit(ledger: &Ledger) -> Result<(f64, Option<u64>, u64), Failure> {
    let before = IoCounters::now();
    let t = Instant::now();
    let report = ledger
        .audit(&AuditOptions::default(), &mut |_| {})
        .context(|| "the full audit".into())?;
    let seconds = t.elapsed().as_secs_f64();
    if !report.is_clean() {
        return Err(Failure(format!(
            "the full audit found problems: {:?}",
            report.problems
        )));
    }
    let read = IoCounters::since(IoCounters::now(), before).map(|io| io.read_bytes);
    Ok((seconds, read, report.versions))
}

//! LedgerBench's range workload (issue 46, workload 2) on Cairn: an ordered table of `keys`
//! keys, clients reading ranges of 10 to 20 consecutive keys placed uniformly, each answer
//! verified with its complete range proof (no key left out, none added): at once (immediate),
//! later from a promise (deferred: `Ledger::range_values`, then `Ledger::read_range_at` in the
//! verifier's batches), or not at all.
//!
//! Owns: the range keys and streams ([`range_key`], [`ranges`]), one run on Cairn
//! ([`run_cairn`]) and its figures ([`RangeFigures`]). May call: `cairn_ledger` and
//! `cairn_proof` as a client does. Must never touch: the engine's internals.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_ledger::{Ledger, LedgerBatch, LedgerConfig};
use cairn_proof::{verify_consistency, verify_range, verify_range_at, Digest, RangeAnswer};
use hdrhistogram::Histogram;

use super::Verify;
use crate::failure::{Context, Failure};
use crate::keys::SplitMix64;

/// The ordered table of the range workload.
const TABLE: &str = "keys";
/// Keys per load version.
const LOAD_BATCH: u64 = 10_000;
/// The shortest and longest ranges.
pub const RANGE_MIN: u64 = 10;
pub const RANGE_MAX: u64 = 20;

/// Key `id` of the range workload (`k` and the id, big-endian: key order is id order).
pub fn range_key(id: u64) -> [u8; 9] {
    super::storage::lettered_key(b'k', id)
}

/// Client `client`'s ranges: `(first id, count)`, the count uniform in 10..=20 and the range
/// placed uniformly among `keys` keys, from a generator seeded with `(seed, client)`.
pub fn ranges(seed: u64, client: u64, keys: u64) -> impl Iterator<Item = (u64, u64)> {
    let mut rng = SplitMix64::new(seed ^ client.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x52);
    std::iter::repeat_with(move || {
        let count = RANGE_MIN + rng.below(RANGE_MAX - RANGE_MIN + 1);
        let lo = rng.below(keys.saturating_sub(count) + 1);
        (lo, count.min(keys))
    })
}

/// What a range run measured.
#[derive(Clone, Debug, Default)]
pub struct RangeFigures {
    pub seconds: f64,
    pub ranges: u64,
    pub entries: u64,
    /// Entries whose proof the client (or its verifier) checked.
    pub verified_entries: u64,
    pub proof_bytes: u64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    pub latency_us_max: f64,
    /// Deferred: batches, and latency from a promise to its batch's end.
    pub batches: u64,
    pub verify_latency_ms_p50: f64,
    pub verify_latency_ms_p99: f64,
}

impl RangeFigures {
    pub fn rate(&self) -> f64 {
        self.ranges as f64 / self.seconds.max(1e-9)
    }

    pub fn bytes_per_entry(&self) -> f64 {
        self.proof_bytes as f64 / self.verified_entries.max(1) as f64
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "seconds": self.seconds,
            "ranges": self.ranges,
            "ranges_per_s": self.rate(),
            "entries": self.entries,
            "verified_entries": self.verified_entries,
            "proof_bytes": self.proof_bytes,
            "proof_bytes_per_entry": self.bytes_per_entry(),
            "latency_us_p50": self.latency_us_p50,
            "latency_us_p99": self.latency_us_p99,
            "latency_us_max": self.latency_us_max,
            "batches": self.batches,
            "verify_latency_ms_p50": self.verify_latency_ms_p50,
            "verify_latency_ms_p99": self.verify_latency_ms_p99,
        })
    }
}

/// Opens a ledger in `dir` with the ordered table and loads `keys` keys (value: the id,
/// big-endian); returns it and the seconds.
pub fn load_cairn(dir: &Path, keys: u64) -> Result<(Ledger, f64), Failure> {
    let ledger = super::cairn_side::open_ledger(dir, LedgerConfig::new([TABLE]).ordered([TABLE]))?;
    let start = Instant::now();
    let mut first = 0;
    while first < keys {
        let mut batch = LedgerBatch::new();
        for id in first..(first + LOAD_BATCH).min(keys) {
            batch.insert(TABLE, range_key(id), id.to_be_bytes());
        }
        ledger.write(&batch).context(|| "loading keys".into())?;
        first += LOAD_BATCH;
    }
    ledger.sync().context(|| "syncing the load".into())?;
    ledger
        .checkpoint()
        .context(|| "checkpointing the load".into())?;
    Ok((ledger, start.elapsed().as_secs_f64()))
}

/// Checks that `answer` holds exactly ids `lo..lo + count` with their values.
fn check_entries(answer: &RangeAnswer, lo: u64, count: u64) -> Result<(), String> {
    if answer.entries.len() as u64 != count {
        return Err(format!(
            "{} entries for a range of {count}",
            answer.entries.len()
        ));
    }
    for (i, (k, v)) in answer.entries.iter().enumerate() {
        let id = lo + i as u64;
        if k[..] != range_key(id) || v[..] != id.to_be_bytes() {
            return Err(format!("entry {i} is not key {id} with its value"));
        }
    }
    Ok(())
}

/// A range a client was answered, to be proved later.
struct Promised {
    version: u64,
    lo: u64,
    count: u64,
    answer: RangeAnswer,
    at: Instant,
}

/// Runs `clients` clients for `seconds`, each reading its stream of ranges and verifying as
/// `verify` says.
pub fn run_cairn(
    ledger: &Ledger,
    keys: u64,
    clients: u64,
    seconds: f64,
    verify: Verify,
    seed: u64,
) -> Result<RangeFigures, Failure> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let digest = ledger.digest();
    let promises: Mutex<(Vec<Promised>, bool)> = Mutex::new((Vec::new(), false));
    type ClientOut = (Histogram<u64>, u64, u64, u64, u64);
    let (outs, deferred) = std::thread::scope(|s| {
        let promises = &promises;
        let verifier = verify
            .delay_ms()
            .map(|delay| s.spawn(move || verifier(ledger, promises, delay, digest)));
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || -> Result<ClientOut, Failure> {
                    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
                        .map_err(|e| Failure(format!("a histogram: {e}")))?;
                    let (mut done, mut entries, mut verified, mut bytes) = (0, 0, 0, 0);
                    let mut trusted = digest;
                    for (lo, count) in ranges(seed, c, keys) {
                        if Instant::now() >= deadline {
                            break;
                        }
                        let t = Instant::now();
                        let (first, last) = (range_key(lo), range_key(lo + count - 1));
                        let context = || format!("range {lo}+{count} of client {c}");
                        if verify == Verify::Immediate {
                            let read = ledger.read_range(TABLE, first, last).context(context)?;
                            check_entries(&read.answer, lo, count)
                                .map_err(|e| Failure(format!("{}: {e}", context())))?;
                            if read.digest != trusted {
                                let proof = ledger
                                    .prove_consistency(trusted.size, read.digest.size)
                                    .context(context)?;
                                verify_consistency(&trusted, &read.digest, &proof).map_err(
                                    |e| Failure(format!("{}: consistency: {e:?}", context())),
                                )?;
                                bytes += proof.encoded_len() as u64;
                                trusted = read.digest;
                            }
                            verify_range(
                                &read.receipt,
                                TABLE,
                                &first,
                                &last,
                                &read.answer,
                                &trusted,
                            )
                            .map_err(|e| Failure(format!("{}: refused: {e:?}", context())))?;
                            bytes += read.receipt.encoded_len() as u64;
                            verified += count;
                        } else {
                            let (version, answer) =
                                ledger.range_values(TABLE, first, last).context(context)?;
                            check_entries(&answer, lo, count)
                                .map_err(|e| Failure(format!("{}: {e}", context())))?;
                            if verify != Verify::None {
                                let mut p = promises.lock().unwrap_or_else(|p| p.into_inner());
                                p.0.push(Promised {
                                    version,
                                    lo,
                                    count,
                                    answer,
                                    at: Instant::now(),
                                });
                            }
                        }
                        h.saturating_record(t.elapsed().as_micros().max(1) as u64);
                        done += 1;
                        entries += count;
                    }
                    Ok((h, done, entries, verified, bytes))
                })
            })
            .collect();
        let outs: Vec<Result<ClientOut, Failure>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Failure("a client thread panicked".into())))
            })
            .collect();
        promises.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        let deferred = verifier.map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Failure("the verifier thread panicked".into())))
        });
        (outs, deferred)
    });
    let mut figures = RangeFigures {
        seconds: start.elapsed().as_secs_f64(),
        ..RangeFigures::default()
    };
    let mut all = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .map_err(|e| Failure(format!("a histogram: {e}")))?;
    for out in outs {
        let (h, done, entries, verified, bytes) = out?;
        all.add(&h)
            .map_err(|e| Failure(format!("merging histograms: {e}")))?;
        figures.ranges += done;
        figures.entries += entries;
        figures.verified_entries += verified;
        figures.proof_bytes += bytes;
    }
    if let Some(deferred) = deferred {
        let (batches, verified, bytes, latency) = deferred?;
        figures.batches = batches;
        figures.verified_entries += verified;
        figures.proof_bytes += bytes;
        figures.verify_latency_ms_p50 = latency.value_at_quantile(0.5) as f64 / 1e3;
        figures.verify_latency_ms_p99 = latency.value_at_quantile(0.99) as f64 / 1e3;
    }
    figures.latency_us_p50 = all.value_at_quantile(0.5) as f64;
    figures.latency_us_p99 = all.value_at_quantile(0.99) as f64;
    figures.latency_us_max = all.max() as f64;
    Ok(figures)
}

/// The deferred verifier of ranges: every `delay_ms`, each range promised since its last batch
/// is proved at its version (`read_range_at`, against the newest digest, checked consistent
/// with the last it trusted) and its promised answer checked with `verify_range_at`. Returns
/// the batches, entries verified, proof bytes and the latency histogram (µs).
fn verifier(
    ledger: &Ledger,
    promises: &Mutex<(Vec<Promised>, bool)>,
    delay_ms: u64,
    mut trusted: Digest,
) -> Result<(u64, u64, u64, Histogram<u64>), Failure> {
    let mut latency = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .map_err(|e| Failure(format!("a histogram: {e}")))?;
    let (mut batches, mut verified, mut bytes) = (0, 0, 0);
    let period = Duration::from_millis(delay_ms);
    let mut next = Instant::now() + period;
    loop {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next += period;
        let (batch, done) = {
            let mut p = promises.lock().unwrap_or_else(|p| p.into_inner());
            (std::mem::take(&mut p.0), p.1)
        };
        if batch.is_empty() {
            if done {
                break;
            }
            continue;
        }
        let fresh = ledger.digest();
        if fresh != trusted {
            let proof = ledger
                .prove_consistency(trusted.size, fresh.size)
                .context(|| "the range verifier's consistency proof".into())?;
            verify_consistency(&trusted, &fresh, &proof)
                .map_err(|e| Failure(format!("the range verifier's consistency: {e:?}")))?;
            bytes += proof.encoded_len() as u64;
            trusted = fresh;
        }
        // Ranges promised at the same version are proved one by one: a range proof is for one
        // range.
        let mut by_version: BTreeMap<u64, Vec<&Promised>> = BTreeMap::new();
        for p in &batch {
            by_version.entry(p.version).or_default().push(p);
        }
        for (version, promised) in by_version {
            for p in promised {
                let (first, last) = (range_key(p.lo), range_key(p.lo + p.count - 1));
                let read = ledger
                    .read_range_at(version, TABLE, first, last)
                    .context(|| format!("proving range {}+{} at {version}", p.lo, p.count))?;
                if read.digest != trusted {
                    return Err(Failure(
                        "the ledger moved during a read-only range run".into(),
                    ));
                }
                verify_range_at(&read.receipt, TABLE, &first, &last, &p.answer, &trusted).map_err(
                    |e| {
                        Failure(format!(
                            "the promise of range {}+{} at {version} refused: {e:?}",
                            p.lo, p.count
                        ))
                    },
                )?;
                bytes += read.receipt.encoded_len() as u64;
                verified += p.count;
            }
        }
        let end = Instant::now();
        for p in &batch {
            latency.saturating_record((end - p.at).as_micros().max(1) as u64);
        }
        batches += 1;
        next = next.max(end);
    }
    Ok((batches, verified, bytes, latency))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_stay_inside_the_keys_and_are_10_to_20_long() {
        for (lo, count) in ranges(7, 3, 1_000).take(10_000) {
            assert!((RANGE_MIN..=RANGE_MAX).contains(&count));
            assert!(lo + count <= 1_000);
        }
        let a: Vec<_> = ranges(7, 3, 1_000).take(5).collect();
        let b: Vec<_> = ranges(7, 3, 1_000).take(5).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn a_tiny_range_run_verifies_in_every_mode() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, _) = load_cairn(dir.path(), 500).unwrap();
        for verify in [
            Verify::Immediate,
            Verify::Deferred { delay_ms: 5 },
            Verify::None,
        ] {
            let f = run_cairn(&ledger, 500, 2, 0.3, verify, 1).unwrap();
            assert!(f.ranges > 0);
            if verify != Verify::None {
                assert_eq!(f.verified_entries, f.entries, "{verify:?}");
            }
        }
    }
}

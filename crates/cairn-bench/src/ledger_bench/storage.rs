//! LedgerBench's storage workload (issue 46, workload 5) on Cairn: records written in blocks
//! (one version each), the bytes on disk measured at each checkpoint count, with the history
//! window off (the default: the newest version provable) and as an archive (every version
//! provable, so no file a version reaches is ever removed).
//!
//! Owns: the records (`record_key`, `record_value`), one growth run on Cairn
//! ([`grow_cairn`]). May call: `cairn_ledger` as a user does, `ledger_receipts::usage` (bytes
//! by kind of file). Must never touch: the engine's internals.
//!
//! A record is a new key `r` + its id (8 bytes, big-endian) with a 100-byte value derived from
//! the id (SplitMix64 words: incompressible). The same records go to immudb (its peer's
//! `STORE`). Bytes are measured with the ledger open, after its log is synced and a checkpoint
//! has written the tables and dropped the log before it: the ledger at rest, as immudb's are
//! measured after its index is flushed.

use std::path::Path;
use std::time::Instant;

use cairn_ledger::{LedgerBatch, LedgerConfig};

use crate::failure::{Context, Failure};
use crate::keys::SplitMix64;

/// The ledger table holding the records.
const RECORDS: &str = "records";
/// Bytes of a record's value.
pub const VALUE_BYTES: usize = 100;

/// Record `id`'s key.
pub fn record_key(id: u64) -> [u8; 9] {
    lettered_key(b'r', id)
}

/// A letter and an id's 8 big-endian bytes (so that key order is id order).
pub fn lettered_key(letter: u8, id: u64) -> [u8; 9] {
    let mut key = [letter; 9];
    key[1..].copy_from_slice(&id.to_be_bytes());
    key
}

/// Record `id`'s value: SplitMix64 words seeded with the id.
pub fn record_value(id: u64) -> [u8; VALUE_BYTES] {
    let mut rng = SplitMix64::new(id);
    let mut value = [0u8; VALUE_BYTES];
    for chunk in value.chunks_mut(8) {
        let word = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    value
}

/// The bytes on disk after some records.
#[derive(Clone, Debug)]
pub struct StoragePoint {
    /// Records written so far.
    pub records: u64,
    /// Bytes on disk: what the file system allocated for every file under the directory
    /// (Cairn's log segment and page files are sparse until written: their lengths would
    /// count space never used). immudb's peer measures its files' lengths, which for its files
    /// (written, never sparse) are their allocation: `run_storage` checks that at the end.
    pub disk_bytes: u64,
    /// The files' lengths (`None`: not measured).
    pub file_bytes: Option<u64>,
    /// Bytes by kind of file.
    pub split: std::collections::BTreeMap<String, u64>,
    /// Seconds writing the records since the previous point (measuring excluded).
    pub seconds: f64,
}

/// Writes records into a new ledger in `dir`, `batch` per version, and measures the bytes on
/// disk when `checkpoints` (increasing) records are written. `window`: the ledger's
/// `history` (0: the newest only; `u64::MAX`: an archive).
pub fn grow_cairn(
    dir: &Path,
    checkpoints: &[u64],
    batch: u64,
    window: u64,
) -> Result<Vec<StoragePoint>, Failure> {
    let ledger = super::cairn_side::open_ledger(dir, LedgerConfig::new([RECORDS]).history(window))?;
    let mut points = Vec::with_capacity(checkpoints.len());
    let mut next = 0u64;
    for &target in checkpoints {
        let start = Instant::now();
        let mut last = None;
        while next < target {
            let end = (next + batch.max(1)).min(target);
            let mut b = LedgerBatch::new();
            for id in next..end {
                b.insert(RECORDS, record_key(id), record_value(id));
            }
            // Durable before the next, as the peer's synced transactions are.
            last = ledger
                .write(&b)
                .context(|| format!("writing records {next}..{end}"))?;
            next = end;
        }
        if let Some(last) = last {
            last.durability.wait().context(|| "syncing".into())?;
        }
        let seconds = start.elapsed().as_secs_f64();
        ledger.sync().context(|| "syncing the log".into())?;
        ledger.checkpoint().context(|| "checkpointing".into())?;
        ledger
            .remove_released_files()
            .context(|| "removing released files".into())?;
        let split = crate::ledger_receipts::usage(dir)?;
        points.push(StoragePoint {
            records: next,
            disk_bytes: split.values().sum(),
            file_bytes: Some(file_bytes(dir)?),
            split,
            seconds,
        });
        eprintln!(
            "cairn storage ({}): {next} records, {} bytes on disk ({:.1} per record)",
            window_name(window),
            points.last().map_or(0, |p| p.disk_bytes),
            points
                .last()
                .map_or(0.0, |p| p.disk_bytes as f64 / next.max(1) as f64),
        );
    }
    ledger.close();
    Ok(points)
}

/// The lengths of every regular file under `dir`.
pub fn file_bytes(dir: &Path) -> Result<u64, Failure> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).context(|| format!("listing {}", path.display()))? {
            let entry = entry.context(|| format!("listing {}", path.display()))?;
            let meta = entry
                .metadata()
                .context(|| format!("measuring {}", entry.path().display()))?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Ok(total)
}

/// How a window setting is named in records and reports.
pub fn window_name(window: u64) -> String {
    match window {
        0 => "window 0 (default)".into(),
        u64::MAX => "archive".into(),
        n => format!("window {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_grow_with_the_records_and_the_archive_keeps_more() {
        let dir = tempfile::tempdir().unwrap();
        let plain = grow_cairn(&dir.path().join("plain"), &[500, 1_000, 2_000], 100, 0).unwrap();
        assert_eq!(
            plain.iter().map(|p| p.records).collect::<Vec<_>>(),
            [500, 1_000, 2_000]
        );
        assert!(plain[2].disk_bytes > plain[0].disk_bytes);
        // At least the values themselves.
        assert!(plain[2].disk_bytes >= 2_000 * VALUE_BYTES as u64);
        let archive = grow_cairn(
            &dir.path().join("archive"),
            &[500, 1_000, 2_000],
            100,
            u64::MAX,
        )
        .unwrap();
        assert!(archive[2].disk_bytes >= plain[2].disk_bytes);
    }

    #[test]
    fn records_are_distinct_and_fixed() {
        assert_ne!(record_value(1), record_value(2));
        assert_eq!(record_key(258), *b"r\0\0\0\0\0\0\x01\x02");
    }
}

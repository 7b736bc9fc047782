//! `utxo quick --snapshot`: the table built by setup is saved as a snapshot, its files are
//! counted, it is opened again, keys are checked through the reopened table, and the snapshot is
//! deleted.
//!
//! Owns: [`measure`]. May call: the Cairn adapter's snapshot calls
//! ([`CairnEngine`]), and `std::fs` to read (never change) the snapshot's directory.
//!
//! The engine saves a snapshot with hard links to the runs' files (O(runs) file operations, one
//! fsync per run) and opens one by reading every file to verify its checksum, so the save time
//! should grow like the number of runs and the open time like the table's size.

use std::path::Path;
use std::time::Instant;

use crate::engines::cairn::{CairnEngine, CairnTable};
use crate::failure::{Context, Failure};
use crate::keys::{utxo_key, SplitMix64, KEY_BYTES};
use crate::record::SnapshotStats;
use crate::utxo::driver::count_mismatches;

/// The snapshot's name: its files are in `<session dir>/snapshots/bench/`.
pub const SNAPSHOT_NAME: &str = "bench";

/// The label the snapshot is saved and opened with.
const SNAPSHOT_LABEL: &str = "cairn-bench utxo quick";

/// Keys looked up (in one `lookups` call) through the reopened table.
pub const CHECK_KEYS: usize = 512;

/// Separates the stream choosing the checked ids from the key and batch-choice streams.
const CHECK_STREAM: u64 = 0x5eed_5a90_0000_0002;

/// Saves the table of `engine` (which holds ids `0..entries` made with `seed`) as snapshot
/// [`SNAPSHOT_NAME`] of its session; counts the snapshot's files and bytes; opens it again and
/// checks [`CHECK_KEYS`] random ids through the reopened table; closes that table and deletes
/// the snapshot, unless `keep` (with `--keep`, for the `cairn` command to look at).
pub fn measure(
    engine: &CairnEngine,
    entries: u64,
    seed: u64,
    keep: bool,
) -> Result<SnapshotStats, Failure> {
    let (table, session) = (engine.table(), engine.session());
    let shape = table
        .shape()
        .context(|| "before the snapshot".to_string())?;
    let start = Instant::now();
    table.save_snapshot(SNAPSHOT_NAME, SNAPSHOT_LABEL)?;
    let snapshot_save_ms = start.elapsed().as_secs_f64() * 1e3;
    let (snapshot_files, snapshot_bytes) = dir_usage(&session.snapshot_dir(SNAPSHOT_NAME))?;
    let start = Instant::now();
    let reopened = session.open_snapshot(SNAPSHOT_NAME, SNAPSHOT_LABEL, None)?;
    let snapshot_open_ms = start.elapsed().as_secs_f64() * 1e3;
    let checked = check_keys(&reopened, entries, seed);
    reopened.close();
    let snapshot_mismatches = checked?;
    if !keep {
        session.delete_snapshot(SNAPSHOT_NAME)?;
    }
    let stats = SnapshotStats {
        snapshot_save_ms,
        snapshot_files,
        snapshot_bytes,
        snapshot_open_ms,
        runs_at_snapshot: shape.runs,
        levels_at_snapshot: shape.levels,
        snapshot_mismatches,
    };
    eprintln!(
        "snapshot: {} runs in {} levels; saved in {snapshot_save_ms:.1} ms as {snapshot_files} \
         files of {snapshot_bytes} bytes; opened in {snapshot_open_ms:.1} ms; \
         {snapshot_mismatches} of {CHECK_KEYS} checked keys wrong",
        shape.runs, shape.levels
    );
    Ok(stats)
}

/// Looks up [`CHECK_KEYS`] ids of `0..entries` chosen uniformly (repeats allowed) through
/// `table` and returns how many results were not the id's value.
fn check_keys(table: &CairnTable, entries: u64, seed: u64) -> Result<u64, Failure> {
    let mut rng = SplitMix64::new(seed ^ CHECK_STREAM);
    let ids: Vec<u64> = (0..CHECK_KEYS).map(|_| rng.below(entries)).collect();
    let keys: Vec<[u8; KEY_BYTES]> = ids.iter().map(|&id| utxo_key(id, seed)).collect();
    let results = table
        .lookups(&keys)
        .context(|| "looking up keys through the reopened snapshot".to_string())?;
    let mut mismatches = 0;
    count_mismatches(&ids, &results, &mut mismatches);
    Ok(mismatches)
}

/// The number of files under `dir` (recursively, symbolic links not followed) and the sum of
/// their lengths in bytes.
fn dir_usage(dir: &Path) -> Result<(u64, u64), Failure> {
    let (mut files, mut bytes) = (0, 0);
    let listing = std::fs::read_dir(dir).context(|| format!("listing {}", dir.display()))?;
    for entry in listing {
        let entry = entry.context(|| format!("listing {}", dir.display()))?;
        let path = entry.path();
        let meta = entry
            .metadata()
            .context(|| format!("reading the metadata of {}", path.display()))?;
        if meta.is_dir() {
            let (f, b) = dir_usage(&path)?;
            files += f;
            bytes += b;
        } else {
            files += 1;
            bytes += meta.len();
        }
    }
    Ok((files, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_usage_counts_files_recursively() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), [0u8; 10]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub").join("b"), [0u8; 5]).unwrap();
        assert_eq!(dir_usage(dir.path()).unwrap(), (2, 15));
        assert!(dir_usage(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn measure_saves_checks_and_deletes_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let options = crate::engines::EngineOptions {
            direct_io: false,
            seed: 7,
            write_buffer: 1_000,
            merge_batch_size: 1_000,
            io: crate::options::IoArg::Auto,
            wal: false,
            background_merges: false,
            filters_for_hits: true,
            read_budget: 0,
        };
        let engine = CairnEngine::open(dir.path(), true, &options).unwrap();
        crate::utxo::setup::load(&engine, 0..5_000, 7, "setup").unwrap();
        let stats = measure(&engine, 5_000, 7, false).unwrap();
        assert_eq!(stats.snapshot_mismatches, 0);
        assert!(stats.runs_at_snapshot > 0 && stats.levels_at_snapshot > 0);
        assert!(stats.snapshot_files > stats.runs_at_snapshot as u64);
        assert!(stats.snapshot_bytes > 5_000 * 60, "{stats:?}");
        assert!(!engine.session().snapshot_exists(SNAPSHOT_NAME).unwrap());
        engine.close();
    }
}

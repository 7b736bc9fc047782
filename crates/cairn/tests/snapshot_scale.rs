//! A snapshot of a table with n entries takes a number of files bounded by its number of runs
//! and of merges in progress (whose outputs so far it holds), both of which grow like log n: checked for n from 10^4 to 10^7 with a small write buffer.
//!
//! The largest size is set by `CAIRN_SNAPSHOT_SCALE_MAX` (default 10,000,000).

use std::time::Instant;

use cairn::{IndexType, Session, TableConfig};

fn max_entries() -> u64 {
    std::env::var("CAIRN_SNAPSHOT_SCALE_MAX")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000)
}

#[test]
fn snapshot_files_grow_logarithmically() {
    let tmp = tempfile::tempdir().unwrap();
    let session = Session::open(tmp.path()).unwrap();
    let write_buffer = 1_000u64;
    let table = session
        .new_table(
            TableConfig::default()
                .write_buffer_entries(write_buffer as usize)
                .merge_batch_size(1_000)
                .index(IndexType::Compact),
        )
        .unwrap();
    let mut next = 0u64;
    let mut n = 10_000u64;
    while n <= max_entries() {
        while next < n {
            let end = n.min(next + 100_000);
            let batch: Vec<([u8; 8], [u8; 0])> = (next..end)
                .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes(), []))
                .collect();
            table.inserts(&batch).unwrap();
            next = end;
        }
        let stats = table.stats().unwrap();
        let started = Instant::now();
        table.save_snapshot("scale", "l").unwrap();
        let elapsed = started.elapsed();
        let files = std::fs::read_dir(tmp.path().join("snapshots/scale"))
            .unwrap()
            .count();
        eprintln!(
            "n = {n:>10}: {} levels, {} runs, {files} snapshot files, saved in {elapsed:?}",
            stats.levels, stats.runs
        );
        // Five files per run (plus the write buffer's run) and the metadata, and per merge in
        // progress the finished parts of its output so far (it is cut at most once per 1/32
        // of its work: 33 parts at most, linked parts being its inputs' already).
        let parts_max = stats.runs + 1 + 33 * stats.merges_in_progress;
        assert!(
            files <= 5 * parts_max + 1,
            "{files} files, {} runs, {} merges in progress",
            stats.runs,
            stats.merges_in_progress
        );
        // log_T(n / B) levels, each with at most T - 1 residents plus an incoming run or the
        // T + 1 inputs of its merge.
        let levels_max = ((n / write_buffer) as f64).log(4.0).ceil() as usize + 2;
        assert!(
            stats.levels <= levels_max,
            "{} levels for n = {n}",
            stats.levels
        );
        assert!(
            stats.runs <= 8 * stats.levels,
            "{} runs on {} levels",
            stats.runs,
            stats.levels
        );
        session.delete_snapshot("scale").unwrap();
        n *= 10;
    }
}

//! Counts merge work: across 1M updates with a small write buffer, no single update performs
//! more merge steps than the documented bound (`cairn::schedule::merge_steps_per_update_max`).
//!
//! The workload mixes inserts of fresh keys, deletes and upserts of present keys and overwrites,
//! so merges cancel entries, hold back underfull runs and promote the last level.
//! Updates: `CAIRN_MERGE_BOUND_UPDATES` (default 1,000,000).

use std::path::Path;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{
    BloomAlloc, IndexType, MergeSchedule, Resolve, Session, SessionOptions, TableConfig, Update,
};

fn updates_total() -> u64 {
    std::env::var("CAIRN_MERGE_BOUND_UPDATES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}

/// A small deterministic generator.
type Rng = cairn::fs::SplitMix64;

fn key(id: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&id.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k[8..].copy_from_slice(&id.to_be_bytes());
    k
}

/// Runs the workload; with `complete_every`, the table's merges are completed
/// (`Table::complete_merges`) every that many updates.
fn run(
    write_buffer: usize,
    merge_batch: usize,
    background_merges: bool,
    complete_every: Option<u64>,
) {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/s")).unwrap();
    let options = SessionOptions::default().background_merges(background_merges);
    let session = Session::open_with(Arc::new(fs), "/s", options).unwrap();
    let table = session
        .new_table(
            TableConfig::default()
                .write_buffer_entries(write_buffer)
                .merge_schedule(MergeSchedule::Incremental)
                .bloom(BloomAlloc::BitsPerEntry(2.0))
                .index(IndexType::Compact)
                .merge_batch_size(merge_batch)
                .resolve(Resolve::AddU64Le),
        )
        .unwrap();
    let mut rng = Rng::new(42);
    let mut next_id = 0u64;
    let total = updates_total();
    let mut worst_ratio = 0.0f64;
    let mut completed = 0u64;
    for i in 0..total {
        if complete_every.is_some_and(|n| i % n == n - 1) {
            completed += table.complete_merges().unwrap();
            let stats = table.stats().unwrap();
            assert_eq!(
                stats.merges_in_progress, 0,
                "after complete_merges: {stats:?}"
            );
        }
        let r = rng.next_u64();
        let id = match r % 8 {
            // Fresh inserts make the table grow...
            0..=3 => {
                next_id += 1;
                next_id
            }
            // ...the rest hit existing keys: deletes, upserts and overwrites.
            _ => (rng.next_u64() % next_id.max(1)) + 1,
        };
        let k = key(id);
        let v = 1u64.to_le_bytes();
        let update = match r % 8 {
            0..=3 | 7 => Update::Insert(&v),
            4 | 5 => Update::Delete,
            _ => Update::Upsert(&v),
        };
        table.updates(&[(&k, update)]).unwrap();
        let stats = table.stats().unwrap();
        assert!(
            stats.merge_steps_last_update <= stats.merge_steps_bound_per_update,
            "update {} performed {} merge steps, above the bound {} for {} levels",
            stats.updates,
            stats.merge_steps_last_update,
            stats.merge_steps_bound_per_update,
            stats.levels
        );
        if stats.merge_steps_bound_per_update > 0 {
            worst_ratio = worst_ratio.max(
                stats.merge_steps_last_update as f64 / stats.merge_steps_bound_per_update as f64,
            );
        }
    }
    let stats = table.stats().unwrap();
    let background = session.background_merge_steps();
    eprintln!(
        "write buffer {write_buffer}, batch {merge_batch}, background {background_merges}: \
         {} updates, {} levels, {} runs, {} merge steps ({background} in the background, \
         {completed} by complete_merges), at \
         most {} per update (bound {}, worst use {:.0}%)",
        stats.updates,
        stats.levels,
        stats.runs,
        stats.merge_steps_total + background,
        stats.merge_steps_max_per_update,
        stats.merge_steps_bound_per_update,
        worst_ratio * 100.0
    );
    assert!(stats.levels >= 5, "the workload must build a deep table");
    assert!(
        stats.merge_steps_total + background > total,
        "merges must have happened"
    );
    if !background_merges {
        assert_eq!(background, 0);
    }
    if complete_every.is_some() {
        assert!(
            completed > 0,
            "complete_merges must have found merges to finish"
        );
    }
}

#[test]
fn merge_steps_per_update_stay_within_the_bound() {
    run(8, 1, false, None);
}

#[test]
fn merge_steps_per_update_stay_within_the_bound_with_batches() {
    run(32, 64, false, None);
}

/// With a background merge thread racing the updates, the work each update performs itself
/// keeps the same bound.
#[test]
fn merge_steps_per_update_stay_within_the_bound_with_background_merges() {
    run(32, 64, true, None);
}

/// Completing every merge in progress now and then (as after a bulk load) leaves the levels in
/// a shape from which no single update performs more than the bound either.
#[test]
fn merge_steps_per_update_stay_within_the_bound_after_completing_merges() {
    run(32, 64, false, Some(99_991));
}

/// The same with the background thread racing both the updates and the completions.
#[test]
fn merge_steps_per_update_stay_within_the_bound_after_completing_merges_in_background() {
    run(32, 64, true, Some(99_991));
}

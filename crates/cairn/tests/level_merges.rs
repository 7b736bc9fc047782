//! `TableStats::level_merges`: the merge work of each level agrees with the table's totals
//! (`merges_started`, `merge_steps_total`) after every update, finished merges are counted once,
//! and a duplicate or a table opened from a snapshot counts from 0.

use std::path::Path;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{IndexType, MergeSchedule, Session, SessionOptions, Table, TableConfig, TableStats};

fn session(background_merges: bool) -> Session {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/s")).unwrap();
    let options = SessionOptions::default().background_merges(background_merges);
    Session::open_with(Arc::new(fs), "/s", options).unwrap()
}

fn config(schedule: MergeSchedule) -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(16)
        .merge_batch_size(4)
        .merge_schedule(schedule)
        .index(IndexType::Compact)
}

fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()
}

/// The per-level figures summed: (started, finished, steps).
fn sums(stats: &TableStats) -> (u64, u64, u64) {
    stats.level_merges.iter().fold((0, 0, 0), |(s, f, n), l| {
        (
            s + l.merges_started,
            f + l.merges_finished,
            n + l.merge_steps,
        )
    })
}

/// Checks the per-level figures against the totals; `exact_finish`: no background thread or
/// duplicate can finish a merge, so every level's started merges are finished but the one in
/// progress.
fn check(stats: &TableStats, exact_finish: bool) {
    assert_eq!(stats.level_merges.len(), stats.levels, "{stats:?}");
    let (started, finished, steps) = sums(stats);
    assert_eq!(started, stats.merges_started, "{stats:?}");
    assert_eq!(steps, stats.merge_steps_total, "{stats:?}");
    // Level 1 takes flushed runs one at a time and never merges.
    if let Some(first) = stats.level_merges.first() {
        assert_eq!(first.merges_started, 0, "{stats:?}");
    }
    if exact_finish {
        assert!(finished <= started, "{stats:?}");
        for level in &stats.level_merges {
            let open = level.merges_started - level.merges_finished;
            assert!(open <= 1, "{stats:?}");
        }
        assert_eq!(
            (started - finished) as usize,
            stats.merges_in_progress,
            "{stats:?}"
        );
    }
}

/// Inserts `count` fresh keys from `from` and deletes every fourth older one, one update each,
/// checking the figures after every update.
fn fill(table: &Table, from: u64, count: u64, exact_finish: bool) {
    for i in from..from + count {
        table.insert(key(i), i.to_le_bytes()).unwrap();
        if i % 4 == 3 {
            table.delete(key(i - 3)).unwrap();
        }
        check(&table.stats().unwrap(), exact_finish);
    }
}

#[test]
fn every_level_adds_up_to_the_totals_after_every_update() {
    let session = session(false);
    let table = session
        .new_table(config(MergeSchedule::Incremental))
        .unwrap();
    fill(&table, 0, 12_000, true);
    let stats = table.stats().unwrap();
    assert!(stats.levels >= 4, "{stats:?}");
    let deep = &stats.level_merges[stats.levels - 1];
    assert!(deep.merges_started > 0 && deep.merge_steps > 0, "{stats:?}");
    // Every level between the first and the deepest has finished merges.
    for level in &stats.level_merges[1..stats.levels - 1] {
        assert!(level.merges_finished > 0, "{stats:?}");
    }
    // Completing the merges finishes every one of them, and their steps count on their level.
    let before = sums(&stats).2;
    let steps = table.complete_merges().unwrap();
    let after = table.stats().unwrap();
    check(&after, true);
    assert_eq!(sums(&after).2, before + steps);
    for level in &after.level_merges {
        assert_eq!(level.merges_started, level.merges_finished, "{after:?}");
    }
}

#[test]
fn one_shot_merges_finish_as_they_start() {
    let session = session(false);
    let table = session.new_table(config(MergeSchedule::OneShot)).unwrap();
    fill(&table, 0, 4_000, true);
    let stats = table.stats().unwrap();
    assert!(stats.merges_started > 0, "{stats:?}");
    for level in &stats.level_merges {
        assert_eq!(level.merges_started, level.merges_finished, "{stats:?}");
    }
}

#[test]
fn background_merges_are_counted_as_finished_once_found() {
    let session = session(true);
    let table = session
        .new_table(config(MergeSchedule::Incremental))
        .unwrap();
    fill(&table, 0, 8_000, false);
    table.complete_merges().unwrap();
    let stats = table.stats().unwrap();
    check(&stats, true);
    for level in &stats.level_merges {
        assert_eq!(level.merges_started, level.merges_finished, "{stats:?}");
    }
    // The steps on the background thread are the session's, not any level's.
    assert!(session.background_merge_steps() > 0);
}

#[test]
fn duplicates_and_snapshots_count_from_zero() {
    let session = session(false);
    let table = session
        .new_table(config(MergeSchedule::Incremental))
        .unwrap();
    fill(&table, 0, 5_000, true);
    let copy = table.duplicate().unwrap();
    let fresh = copy.stats().unwrap();
    assert_eq!(fresh.merges_started, 0, "{fresh:?}");
    assert_eq!(sums(&fresh), (0, 0, 0), "{fresh:?}");
    assert_eq!(fresh.level_merges.len(), fresh.levels);
    // The copy counts its own work from here; the merges it shares may finish on either side,
    // so only the totals are exact.
    fill(&copy, 100_000, 3_000, false);
    check(&copy.stats().unwrap(), false);
    table.save_snapshot("s", "t").unwrap();
    let opened = session.open_snapshot("s", "t", Default::default()).unwrap();
    let stats = opened.stats().unwrap();
    assert_eq!(sums(&stats), (0, 0, 0), "{stats:?}");
    fill(&opened, 200_000, 3_000, false);
    check(&opened.stats().unwrap(), false);
}

//! Merges of inputs whose key ranges do not overlap link the inputs' parts instead of rewriting
//! them (issue 15, B1): with keys written in ascending order (block-ordered data), the only data
//! pages ever written are the write buffers' own, however many merges run, while lookups and
//! cursors over the linked runs answer as a `BTreeMap` model does.
//!
//! Counted on the simulated file system: every byte appended to a `.keyops` (data pages) or
//! `.blobs` file, against the bytes of those files alive at the end. A merge that rewrote any
//! entry would append bytes that no live file holds (its inputs' files are removed).
//!
//! Cases: `CAIRN_LINKING_CASES` (default 300).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cairn::fs::{FileSystem, MemFs};
use cairn::{BlockKeys, LookupResult, MergeSchedule, Session, SessionOptions, TableConfig, Update};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// A block of entries (suffix bytes, value length, blob?), written as one batch in key order.
    Block(Vec<(u16, u8, bool)>),
    /// Look up these many keys (present ones, by position, and absent ones).
    Lookups(Vec<u16>),
    /// A cursor from the key at this position, read to the end.
    Cursor(u16),
    /// Finish the flush in progress.
    Settle,
}

#[derive(Clone, Debug)]
struct Setup {
    write_buffer: usize,
    part_entries: Option<u64>,
    schedule: MergeSchedule,
    merge_batch: usize,
    background: bool,
}

fn setup_strategy() -> impl Strategy<Value = Setup> {
    (
        1usize..=48,
        prop_oneof![2 => Just(None), 1 => (1u64..=12).prop_map(Some)],
        prop_oneof![3 => Just(MergeSchedule::Incremental), 1 => Just(MergeSchedule::OneShot)],
        prop_oneof![Just(1usize), 1usize..=16, Just(1000)],
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(write_buffer, part_entries, schedule, merge_batch, background)| Setup {
                write_buffer,
                part_entries,
                schedule,
                merge_batch,
                background,
            },
        )
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => prop::collection::vec((any::<u16>(), 0u8..40, prop::bool::weighted(0.2)), 1..30)
            .prop_map(Op::Block),
        2 => prop::collection::vec(any::<u16>(), 1..40).prop_map(Op::Lookups),
        1 => any::<u16>().prop_map(Op::Cursor),
        1 => Just(Op::Settle),
    ]
}

type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

/// Bytes of the live files in `dir` whose names end in `.{extension}`.
fn live_bytes(fs: &MemFs, dir: &Path, extension: &str) -> u64 {
    fs.file_paths()
        .into_iter()
        .filter(|p| p.starts_with(dir) && p.extension().is_some_and(|e| e == extension))
        .map(|p| fs.file_bytes(&p).map_or(0, |b| b.len() as u64))
        .sum()
}

fn run_case(setup: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/s")).unwrap();
    let shared: Arc<dyn FileSystem> = Arc::new(fs.clone());
    let session = Session::open_with(
        shared,
        "/s",
        SessionOptions::default().background_merges(setup.background),
    )
    .unwrap();
    let table = session
        .new_table(
            TableConfig::default()
                .write_buffer_entries(setup.write_buffer)
                .merge_schedule(setup.schedule)
                .merge_batch_size(setup.merge_batch)
                .part_entries(setup.part_entries),
        )
        .unwrap();
    let keys = BlockKeys::new(1).unwrap();
    let mut model = Model::new();
    let mut block = 0u64;
    for op in ops {
        match op {
            Op::Block(entries) => {
                // One block's entries, deduplicated and in key order: every key above every
                // key of earlier blocks.
                let mut batch = Model::new();
                for &(suffix, len, blob) in entries {
                    let key = keys.key(block, &suffix.to_be_bytes());
                    let value = vec![len; usize::from(len)];
                    let blob = blob.then(|| vec![len ^ 0x5a; usize::from(len) * 3]);
                    batch.insert(key, (value, blob));
                }
                let updates: Vec<(&[u8], Update<'_>)> = batch
                    .iter()
                    .map(|(k, (v, b))| {
                        let update = match b {
                            Some(b) => Update::InsertWithBlob(v, b),
                            None => Update::Insert(v),
                        };
                        (k.as_slice(), update)
                    })
                    .collect();
                table.updates(&updates).unwrap();
                model.extend(batch);
                block += 1;
            }
            Op::Lookups(picks) => {
                let present: Vec<&Vec<u8>> = model.keys().collect();
                let probe: Vec<Vec<u8>> = picks
                    .iter()
                    .map(|&p| {
                        if p % 4 == 3 || present.is_empty() {
                            // Absent: between or after the blocks' keys.
                            keys.key(u64::from(p) % (block + 2), &[0xff, 0xff, 0xff])
                        } else {
                            present[usize::from(p) % present.len()].clone()
                        }
                    })
                    .collect();
                for (key, got) in probe.iter().zip(table.lookups(&probe).unwrap()) {
                    match (model.get(key), &got) {
                        (None, LookupResult::NotFound) => {}
                        (Some((v, blob)), LookupResult::Found(got)) if blob.is_none() => {
                            prop_assert_eq!(got, v)
                        }
                        (Some((v, Some(blob))), LookupResult::FoundWithBlob(got, r)) => {
                            prop_assert_eq!(got, v);
                            prop_assert_eq!(&table.retrieve_blob(r).unwrap(), blob);
                        }
                        (want, got) => {
                            return Err(TestCaseError::fail(format!(
                                "key {key:?}: model {want:?}, table {got:?}"
                            )))
                        }
                    }
                }
            }
            Op::Cursor(from) => {
                let start = model
                    .keys()
                    .nth(usize::from(*from) % model.len().max(1))
                    .cloned()
                    .unwrap_or_default();
                let got: Vec<(Vec<u8>, Vec<u8>)> = table
                    .cursor_at(&start)
                    .unwrap()
                    .map(|e| e.map(|e| (e.key, e.value)))
                    .collect::<cairn::Result<_>>()
                    .unwrap();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(start..)
                    .map(|(k, (v, _))| (k.clone(), v.clone()))
                    .collect();
                prop_assert_eq!(got, want);
            }
            Op::Settle => table.settle().unwrap(),
        }
    }
    // Every entry was written once, by a flush: no merge rewrote a data page or a blob.
    table.settle().unwrap();
    let active = Path::new("/s/active");
    for extension in ["keyops", "blobs"] {
        prop_assert_eq!(
            fs.bytes_appended(extension),
            live_bytes(&fs, active, extension),
            "bytes appended to .{} files vs. bytes of the live ones",
            extension
        );
    }
    let stats = table.stats().unwrap();
    prop_assert_eq!(stats.merge_steps_total, 0, "{:?}", stats);
    if stats.merges_started > 0 {
        prop_assert!(stats.parts_linked >= 2, "{:?}", stats);
    }
    prop_assert!(stats.run_parts >= stats.runs);
    let all: Vec<(Vec<u8>, Vec<u8>)> = table
        .cursor()
        .unwrap()
        .map(|e| e.map(|e| (e.key, e.value)))
        .collect::<cairn::Result<_>>()
        .unwrap();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .iter()
        .map(|(k, (v, _))| (k.clone(), v.clone()))
        .collect();
    prop_assert_eq!(all, want);
    // The linked runs survive a snapshot round trip (version 3 metadata when a run has
    // several parts).
    table.save_snapshot("linked", "l").unwrap();
    let reopened = session
        .open_snapshot("linked", "l", cairn::SnapshotOverrides::default())
        .unwrap();
    let probe: Vec<Vec<u8>> = model.keys().cloned().collect();
    for (key, got) in probe.iter().zip(reopened.lookups(&probe).unwrap()) {
        prop_assert_eq!(got.value(), model.get(key).map(|(v, _)| v.as_slice()));
    }
    prop_assert_eq!(reopened.stats().unwrap().run_parts >= stats.run_parts, true);
    Ok(())
}

fn cases() -> u32 {
    std::env::var("CAIRN_LINKING_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn merges_of_disjoint_runs_write_no_data_pages(
        setup in setup_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..80),
    ) {
        run_case(&setup, &ops)?;
    }
}

/// The same with random keys: every merge rewrites (nothing to link beyond single keys), and
/// the counts say so. A guard that the test above measures something.
#[test]
fn random_keys_are_merged_not_linked() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("/s")).unwrap();
    let session =
        Session::open_with(Arc::new(fs.clone()), "/s", SessionOptions::default()).unwrap();
    let table = session
        .new_table(TableConfig::default().write_buffer_entries(64))
        .unwrap();
    for i in 0..5_000u64 {
        let key = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
        table.insert(key, [1u8; 20]).unwrap();
    }
    table.settle().unwrap();
    let stats = table.stats().unwrap();
    assert!(stats.merge_steps_total > 5_000, "{stats:?}");
    assert_eq!(stats.run_parts, stats.runs, "{stats:?}");
    let active = Path::new("/s/active");
    assert!(fs.bytes_appended("keyops") > 2 * live_bytes(&fs, active, "keyops"));
}

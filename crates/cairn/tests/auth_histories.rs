//! One root for one set of contents, whatever history made it (acceptance 2 of issue 11):
//! insertion orders, write buffers of 1 to 64, both merge schedules, stale values overwritten,
//! keys deleted and inserted again, via a snapshot reopened, an exported and imported copy, a
//! duplicate, a union of two parts; and the streaming builder over a sorted dump.

mod common;

use cairn::cairn_proof::{Leaf, RootBuilder};
use cairn::fs::MemFs;
use cairn::{AuthConfig, HashKind, MergeSchedule, Table, TableConfig};
use common::session_in;
use proptest::prelude::*;

fn config(write_buffer: usize, schedule: MergeSchedule) -> TableConfig {
    config_top(write_buffer, schedule, 6)
}

/// [`config`] with a top page of `top` trie levels (the root does not depend on it).
fn config_top(write_buffer: usize, schedule: MergeSchedule, top: u8) -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(write_buffer)
        .merge_batch_size(1)
        .merge_schedule(schedule)
        .auth(Some(
            AuthConfig::default()
                .hash(HashKind::Sha256)
                .retained_bytes(0)
                .top_page_depth(top),
        ))
}

fn schedule(one_shot: bool) -> MergeSchedule {
    if one_shot {
        MergeSchedule::OneShot
    } else {
        MergeSchedule::Incremental
    }
}

fn insert_all<'a>(table: &Table, entries: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>) {
    for (k, v) in entries {
        table.insert(k, v).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_history_gives_one_root(
        contents in prop::collection::btree_map(
            prop::collection::vec(any::<u8>(), 1..6),
            prop::collection::vec(any::<u8>(), 0..10),
            0..120,
        ),
        buffers in (1usize..=64, 1usize..=64, 1usize..=64),
        one_shot in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let fs = MemFs::new();
        let session = session_in(&fs);
        let entries: Vec<(Vec<u8>, Vec<u8>)> = contents.clone().into_iter().collect();

        // 1. In key order.
        let sorted = session.new_table(config(buffers.0, schedule(one_shot))).unwrap();
        insert_all(&sorted, entries.iter().map(|(k, v)| (k, v)));
        let root = sorted.root().unwrap().root;

        // 2. Shuffled, the other schedule, stale values first, extra keys deleted again, a
        //    third of the keys deleted and inserted again, committing now and then.
        let mut shuffled = entries.clone();
        let mut rng = seed;
        for i in (1..shuffled.len()).rev() {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (rng >> 33) as usize % (i + 1));
        }
        let other = session.new_table(config(buffers.1, schedule(!one_shot))).unwrap();
        for (i, (k, _)) in shuffled.iter().enumerate() {
            other.insert(k, b"stale").unwrap();
            other.insert([&b"extra-"[..], k].concat(), b"x").unwrap();
            if i % 7 == 0 {
                other.commit().unwrap();
            }
        }
        for (i, (k, v)) in shuffled.iter().enumerate() {
            other.insert(k, v).unwrap();
            other.delete([&b"extra-"[..], k].concat()).unwrap();
            if i % 3 == 0 {
                other.delete(k).unwrap();
                other.commit().unwrap();
                other.insert(k, v).unwrap();
            }
        }
        prop_assert_eq!(other.root().unwrap().root, root);

        // 3. A snapshot reopened, and an exported copy imported.
        other.save_snapshot("h", "").unwrap();
        session.export_snapshot("h", "/out").unwrap();
        session.import_snapshot("i", "/out").unwrap();
        prop_assert_eq!(session.open_snapshot("h", "", Default::default()).unwrap().root().unwrap().root, root);
        prop_assert_eq!(session.open_snapshot("i", "", Default::default()).unwrap().root().unwrap().root, root);

        // 4. A duplicate that changes a key and changes it back.
        let copy = sorted.duplicate().unwrap();
        if let Some((k, v)) = entries.first() {
            copy.insert(k, b"changed").unwrap();
            prop_assert_ne!(copy.root().unwrap().root, root);
            copy.insert(k, v).unwrap();
        }
        prop_assert_eq!(copy.root().unwrap().root, root);

        // 5. A union of two disjoint halves, built with a third write buffer.
        let (left, right) = entries.split_at(entries.len() / 2);
        let a = session.new_table(config(buffers.2, MergeSchedule::Incremental)).unwrap();
        let b = session.new_table(config(buffers.2, MergeSchedule::Incremental)).unwrap();
        insert_all(&a, left.iter().map(|(k, v)| (k, v)));
        insert_all(&b, right.iter().map(|(k, v)| (k, v)));
        let union = a.incremental_union(&b).unwrap();
        prop_assert_eq!(union.root().unwrap().root, root);
        let debt = union.remaining_union_debt().unwrap();
        union.supply_union_credits(debt / 2).unwrap();
        prop_assert_eq!(union.root().unwrap().root, root);

        // 6. The streaming builder over a dump, sorted by key path.
        let mut leaves: Vec<Leaf> = sorted
            .range_lookup(..)
            .unwrap()
            .iter()
            .map(|e| Leaf::new(HashKind::Sha256, &e.key, &e.value, None))
            .collect();
        leaves.sort_by_key(|l| l.key_path);
        let mut builder = RootBuilder::new(HashKind::Sha256);
        for leaf in &leaves {
            builder.push(leaf).unwrap();
        }
        prop_assert_eq!(builder.finish(), root.hash);

        // 7. Another page geometry (a top page of 1 to 5 trie levels), committing now and
        //    then, through a snapshot reopened, and in a union with a table of the default.
        let top = 1 + (seed % 5) as u8;
        let shaped = session.new_table(config_top(buffers.0, schedule(one_shot), top)).unwrap();
        for (i, (k, v)) in shuffled.iter().enumerate() {
            shaped.insert(k, v).unwrap();
            if i % 11 == 0 {
                shaped.commit().unwrap();
            }
        }
        prop_assert_eq!(shaped.root().unwrap().root, root);
        shaped.save_snapshot("g", "").unwrap();
        let reopened = session.open_snapshot("g", "", Default::default()).unwrap();
        prop_assert_eq!(reopened.config().auth.unwrap().top_page_depth, top);
        prop_assert_eq!(reopened.root().unwrap().root, root);
        let c = session.new_table(config_top(buffers.2, MergeSchedule::Incremental, top)).unwrap();
        let d = session.new_table(config(buffers.2, MergeSchedule::Incremental)).unwrap();
        insert_all(&c, left.iter().map(|(k, v)| (k, v)));
        insert_all(&d, right.iter().map(|(k, v)| (k, v)));
        prop_assert_eq!(c.incremental_union(&d).unwrap().root().unwrap().root, root);
    }
}

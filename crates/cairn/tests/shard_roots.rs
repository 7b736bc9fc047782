//! Sharded roots on real tables (issue 48's sharded-root equality): one authenticated table and,
//! for S = 1, 2, 4 and 8, S tables each holding the keys of one shard (the first log₂ S bits of
//! the key path) take the same random updates. At every commit the global root built from the
//! shard tables' roots and top witnesses equals the one table's root bit for bit, its top
//! witness is the one table's, and proofs made by the shard tables and lifted onto the global
//! root are the one table's proofs, bit for bit. Tiny write buffers and page budgets, so that
//! merges run and trie pages live in the page log.

mod common;

use std::collections::BTreeMap;

use cairn::cairn_proof::{Claim, Proof, ShardMap, ShardedRoot};
use cairn::fs::MemFs;
use cairn::{AuthConfig, HashKind, MergeSchedule, Resolve, Table, TableConfig};
use common::session_in;
use proptest::prelude::*;

/// Shard bits tried in every case: 1, 2, 4 and 8 shards.
const BITS: [u8; 4] = [0, 1, 2, 3];

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u32),
    Upsert(u16, u32),
    Delete(u16),
    /// Commit everywhere and compare roots, witnesses and proofs of these keys.
    Check(Vec<u16>),
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..200;
    prop_oneof![
        6 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (k.clone(), 0u32..1000).prop_map(|(k, v)| Op::Upsert(k, v)),
        3 => k.clone().prop_map(Op::Delete),
        1 => prop::collection::vec(0u16..220, 1..10).prop_map(Op::Check),
    ]
}

fn key(k: u16) -> Vec<u8> {
    format!("acct-{k}").into_bytes()
}

fn config(kind: HashKind, write_buffer: usize, retained: usize) -> TableConfig {
    TableConfig::default()
        .write_buffer_entries(write_buffer)
        .merge_batch_size(1)
        .merge_schedule(MergeSchedule::Incremental)
        .resolve(Resolve::AddU64Le)
        .auth(Some(
            AuthConfig::default().hash(kind).retained_bytes(retained),
        ))
}

/// One sharding of the table: its map and a table per shard.
struct Sharded {
    map: ShardMap,
    tables: Vec<Table>,
}

impl Sharded {
    fn table_of(&self, key: &[u8]) -> &Table {
        &self.tables[self.map.shard_of(key) as usize]
    }

    /// The global root over the shard tables' current contents.
    fn global(&self) -> ShardedRoot {
        let levels = self.map.bits().max(1);
        let subtrees = self
            .tables
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let root = t.root().unwrap().root;
                let top = t.top_witness(levels).unwrap();
                self.map.subtree(i as u32, &root, &top).unwrap()
            })
            .collect();
        ShardedRoot::new(self.map, subtrees).unwrap()
    }
}

fn check(whole: &Table, shardings: &[Sharded], model: &BTreeMap<Vec<u8>, Vec<u8>>, keys: &[u16]) {
    let root = whole.root().unwrap().root;
    let mut keys: Vec<Vec<u8>> = keys.iter().map(|&k| key(k)).collect();
    keys.sort();
    keys.dedup();
    let whole_proof = whole.prove(&keys).unwrap().proof;
    let claims: Vec<Claim<'_>> = keys
        .iter()
        .map(|k| Claim::answer(k, model.get(k).map(|v| &v[..])))
        .collect();
    assert_eq!(whole_proof.verify(&root, &claims), Ok(()));
    for s in shardings {
        let global = s.global();
        assert_eq!(global.root(), root, "{} shards", s.map.shards());
        if s.map.bits() > 0 {
            assert_eq!(
                global.top_witness().unwrap(),
                whole.top_witness(s.map.bits()).unwrap()
            );
        }
        let mut by_shard: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
        for k in &keys {
            by_shard
                .entry(s.map.shard_of(k))
                .or_default()
                .push(k.clone());
        }
        let proofs: Vec<(u32, Proof)> = by_shard
            .iter()
            .map(|(i, ks)| (*i, s.tables[*i as usize].prove(ks).unwrap().proof))
            .collect();
        let refs: Vec<(u32, &Proof)> = proofs.iter().map(|(i, p)| (*i, p)).collect();
        let lifted = global.lift(&refs).unwrap();
        assert_eq!(lifted, whole_proof, "{} shards", s.map.shards());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn sharded_roots_equal_the_one_tables(
        ops in prop::collection::vec(op(), 1..300),
        write_buffer in 1usize..32,
        blake in any::<bool>(),
        retained in prop_oneof![Just(0usize), Just(20 << 20)],
    ) {
        let kind = if blake { HashKind::Blake3 } else { HashKind::Sha256 };
        let fs = MemFs::new();
        let session = session_in(&fs);
        let cfg = config(kind, write_buffer, retained);
        let whole = session.new_table(cfg.clone()).unwrap();
        let shardings: Vec<Sharded> = BITS
            .iter()
            .map(|&bits| {
                let map = ShardMap::new(kind, bits).unwrap();
                let tables = (0..map.shards())
                    .map(|_| session.new_table(cfg.clone()).unwrap())
                    .collect();
                Sharded { map, tables }
            })
            .collect();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for op in ops.iter().chain([&Op::Check((0..220).step_by(7).collect())]) {
            match op {
                Op::Insert(k, v) => {
                    let value = u64::from(*v).to_le_bytes();
                    whole.insert(key(*k), value).unwrap();
                    for s in &shardings {
                        s.table_of(&key(*k)).insert(key(*k), value).unwrap();
                    }
                    model.insert(key(*k), value.to_vec());
                }
                Op::Upsert(k, v) => {
                    let value = u64::from(*v).to_le_bytes();
                    whole.upsert(key(*k), value).unwrap();
                    for s in &shardings {
                        s.table_of(&key(*k)).upsert(key(*k), value).unwrap();
                    }
                    let old = model
                        .get(&key(*k))
                        .map_or(0, |b| u64::from_le_bytes(b[..8].try_into().unwrap()));
                    model.insert(key(*k), old.wrapping_add(u64::from(*v)).to_le_bytes().to_vec());
                }
                Op::Delete(k) => {
                    whole.delete(key(*k)).unwrap();
                    for s in &shardings {
                        s.table_of(&key(*k)).delete(key(*k)).unwrap();
                    }
                    model.remove(&key(*k));
                }
                Op::Check(keys) => check(&whole, &shardings, &model, keys),
            }
        }
    }
}

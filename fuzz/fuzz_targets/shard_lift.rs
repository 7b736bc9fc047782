//! Sharded roots (`cairn_proof::shard`): a proof decoded from the input, offered as a shard's
//! top witness (`ShardMap::subtree`), as a shard's proof to lift onto the global root
//! (`ShardedRoot::lift`) and as a proof against the global root (`ShardMap::table_root_in`),
//! over 40 known keys split into 1 to 16 shards (SHA-256 and BLAKE3). Typed errors only. A
//! subtree accepted from a witness must be the shard's true one; a lifted proof must verify
//! against the global root, never for a false claim about a key of the shard (a wrong value, or
//! absent when present), and show the shard's true root or none; a proof that hashes to the global
//! root shows no false shard root.
//!
//! | Bytes | Meaning |
//! |---|---|
//! | 1 | the shard bits (`b % 5`) and the hash (`b & 8`: BLAKE3) |
//! | 1 | the shard (modulo the shard count) |
//! | the rest | the proof (full form, `docs/format/proof.md`) |
//!
//! Seeds: for every setup and shard, the shard table's honest proof of its keys and its top
//! witness.
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use cairn_proof::reference::MemTrie;
use cairn_proof::{verify, Claim, HashKind, Proof, ShardError, ShardMap, ShardedRoot, Subtree};
use libfuzzer_sys::fuzz_target;

const KEYS: u32 = 40;

struct Setup {
    map: ShardMap,
    global: ShardedRoot,
    /// Each shard's keys and values.
    shards: Vec<BTreeMap<Vec<u8>, Vec<u8>>>,
    tries: Vec<MemTrie>,
}

fn setups() -> &'static Vec<Setup> {
    static SETUPS: OnceLock<Vec<Setup>> = OnceLock::new();
    SETUPS.get_or_init(|| {
        let mut out = Vec::new();
        for kind in [HashKind::Sha256, HashKind::Blake3] {
            for bits in 0..=4u8 {
                let map = ShardMap::new(kind, bits).unwrap();
                let mut shards = vec![BTreeMap::new(); map.shards() as usize];
                for i in 0..KEYS {
                    let key = format!("key-{i}").into_bytes();
                    shards[map.shard_of(&key) as usize].insert(key, format!("v{i}").into_bytes());
                }
                let tries: Vec<MemTrie> = shards
                    .iter()
                    .map(|s| MemTrie::new(kind, s.iter().map(|(k, v)| (&k[..], &v[..], None))))
                    .collect();
                let subtrees: Vec<Subtree> = tries
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        map.subtree(i as u32, &t.root(), &t.top(bits.max(1)))
                            .unwrap()
                    })
                    .collect();
                let global = ShardedRoot::new(map, subtrees).unwrap();
                out.push(Setup {
                    map,
                    global,
                    shards,
                    tries,
                });
            }
        }
        out
    })
}

fn honest() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, setup) in setups().iter().enumerate() {
        let mode = (i / 5) as u8 * 8 + (i % 5) as u8;
        for shard in 0..setup.map.shards() {
            let trie = &setup.tries[shard as usize];
            let keys: Vec<&Vec<u8>> = setup.shards[shard as usize].keys().collect();
            for (what, proof) in [
                ("proof", trie.prove(&keys)),
                ("top", trie.top(setup.map.bits().max(1))),
            ] {
                let mut input = vec![mode, shard as u8];
                input.extend(proof.encode());
                out.push((format!("{what}-{mode}-{shard}"), input));
            }
        }
    }
    out
}

fuzz_target!(
    init: seeds::write_if_asked(honest),
    |data: &[u8]| {
    let [mode, shard, rest @ ..] = data else {
        return;
    };
    let setup = &setups()[usize::from(mode & 8 != 0) * 5 + usize::from(mode % 5)];
    let shard = u32::from(*shard) % setup.map.shards();
    let Ok(proof) = Proof::decode(rest) else {
        return;
    };
    let trie = &setup.tries[shard as usize];
    if let Ok(subtree) = setup.map.subtree(shard, &trie.root(), &proof) {
        assert_eq!(Some(&subtree), setup.global.shard(shard), "a witness gave a false subtree");
    }
    let root = setup.global.root();
    // Offered as a proof against the global root: whatever shard subtree it shows is the true one.
    if proof.verify(&root, &[]).is_ok() {
        if let Ok(shown) = setup.map.table_root_in(shard, &proof) {
            assert_eq!(shown, trie.root().hash, "a global proof showed a false shard root");
        }
    }
    let Ok(lifted) = setup.global.lift(&[(shard, &proof)]) else {
        return;
    };
    // A proof that opens the shard's subtree shows its true root; one that gives it only as a
    // hash (a proof of no key) shows none.
    match setup.map.table_root_in(shard, &lifted) {
        Ok(shown) => assert_eq!(shown, trie.root().hash, "a lifted proof shows a false root"),
        Err(ShardError::WitnessShape { .. }) => {}
        Err(e) => panic!("a lifted proof's shard root: {e}"),
    }
    for (key, value) in &setup.shards[shard as usize] {
        let wrong = [value.as_slice(), b"!"].concat();
        for claim in [Claim::present(key, &wrong), Claim::absent(key)] {
            assert!(
                verify(&root, &lifted.encode(), &[claim]).is_err(),
                "a lifted proof showed a false claim"
            );
        }
    }
}
);

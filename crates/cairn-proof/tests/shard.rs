//! Sharding by key path against the reference trie: for 1 to 16 shards, the global root over
//! the shards' subtrees equals the root of one trie holding everything, its top witness is that
//! trie's, proofs lifted from the shards are that trie's proofs bit for bit, a shard's compact
//! proof checks against the global top witness; and forged inputs (another shard's proof, a
//! stale one, a tampered one, a shard holding a foreign key, a tampered witness) are refused.

use std::collections::BTreeMap;

use cairn_proof::reference::MemTrie;
use cairn_proof::shard::SHARD_BITS_MAX;
use cairn_proof::{
    verify, Claim, HashKind, Proof, ProofNode, ProofWriter, ShardError, ShardMap, ShardedRoot,
    Subtree, TopWitness,
};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn trie(kind: HashKind, m: &Model) -> MemTrie {
    MemTrie::new(kind, m.iter().map(|(k, v)| (&k[..], &v[..], None)))
}

/// `m` split by shard: one model per shard.
fn split(map: &ShardMap, m: &Model) -> Vec<Model> {
    let mut shards = vec![Model::new(); map.shards() as usize];
    for (k, v) in m {
        shards[map.shard_of(k) as usize].insert(k.clone(), v.clone());
    }
    shards
}

/// The global root over the shards of `m`, each subtree read from its trie's top witness.
fn sharded(map: &ShardMap, m: &Model) -> (ShardedRoot, Vec<MemTrie>) {
    let tries: Vec<MemTrie> = split(map, m).iter().map(|s| trie(map.kind(), s)).collect();
    let levels = map.bits().max(1);
    let subtrees = tries
        .iter()
        .enumerate()
        .map(|(i, t)| map.subtree(i as u32, &t.root(), &t.top(levels)).unwrap())
        .collect();
    (ShardedRoot::new(*map, subtrees).unwrap(), tries)
}

fn model_strategy() -> impl Strategy<Value = Model> {
    // Small key spaces too, so that shards are often empty or hold one key (which collapses).
    prop_oneof![
        prop::collection::btree_map(
            prop::collection::vec(any::<u8>(), 0..6),
            prop::collection::vec(any::<u8>(), 0..4),
            0..4
        ),
        prop::collection::btree_map(
            prop::collection::vec(any::<u8>(), 0..6),
            prop::collection::vec(any::<u8>(), 0..4),
            0..80
        ),
    ]
}

fn kinds() -> impl Strategy<Value = HashKind> {
    prop_oneof![Just(HashKind::Sha256), Just(HashKind::Blake3)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The global root, the top witness and lifted proofs are the one trie's.
    #[test]
    fn shards_make_the_one_tries_root_and_proofs(
        kind in kinds(),
        bits in 0u8..=4,
        m in model_strategy(),
        probes in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), 1..8),
    ) {
        let map = ShardMap::new(kind, bits).unwrap();
        let whole = trie(kind, &m);
        let (global, tries) = sharded(&map, &m);
        prop_assert_eq!(global.root(), whole.root());
        if bits > 0 {
            prop_assert_eq!(global.top_witness().unwrap(), whole.top(bits));
        }
        for (i, t) in tries.iter().enumerate() {
            let s = *global.shard(i as u32).unwrap();
            prop_assert_eq!(map.table_root(i as u32, &s), t.root().hash);
        }

        // Keys present and absent, proved by their shards and lifted.
        let mut keys: Vec<Vec<u8>> = m.keys().take(5).cloned().collect();
        keys.extend(probes);
        keys.sort();
        keys.dedup();
        let mut by_shard: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
        for k in &keys {
            by_shard.entry(map.shard_of(k)).or_default().push(k.clone());
        }
        let proofs: Vec<(u32, Proof)> = by_shard
            .iter()
            .map(|(s, ks)| (*s, tries[*s as usize].prove(ks)))
            .collect();
        let refs: Vec<(u32, &Proof)> = proofs.iter().map(|(s, p)| (*s, p)).collect();
        let lifted = global.lift(&refs).unwrap();
        prop_assert_eq!(&lifted, &whole.prove(&keys));
        let claims: Vec<Claim<'_>> = keys
            .iter()
            .map(|k| Claim::answer(k, m.get(k).map(|v| &v[..])))
            .collect();
        prop_assert_eq!(verify(&global.root(), &lifted.encode(), &claims), Ok(()));
        // The lifted proof shows each proved shard's table root: what binds it to that shard's
        // receipt.
        for (s, _) in &proofs {
            prop_assert_eq!(map.table_root_in(*s, &lifted), Ok(tries[*s as usize].root().hash));
        }
        // And a proof of another trie (a shard's contents changed) shows another root.
        for (s, _) in &proofs {
            let mut other = split(&map, &m)[*s as usize].clone();
            let key = by_shard[s][0].clone();
            let changed = match other.get(&key) {
                Some(v) if v.is_empty() => None,
                Some(_) => Some(Vec::new()),
                None => Some(b"forged".to_vec()),
            };
            match changed {
                Some(v) => other.insert(key, v),
                None => other.remove(&key),
            };
            let mut forged_model = m.clone();
            forged_model.retain(|k, _| map.shard_of(k) != *s);
            forged_model.extend(other.clone());
            let forged = trie(kind, &forged_model).prove(&keys);
            prop_assert_ne!(
                map.table_root_in(*s, &forged),
                Ok(tries[*s as usize].root().hash)
            );
        }

        // A shard's own compact proof checks against the global top witness.
        if bits > 0 {
            let witness = TopWitness::new(&global.root(), &global.top_witness().unwrap(), bits)
                .unwrap();
            for (s, p) in &proofs {
                let shard_claims: Vec<Claim<'_>> = by_shard[s]
                    .iter()
                    .map(|k| Claim::answer(k, m.get(k).map(|v| &v[..])))
                    .collect();
                prop_assert_eq!(witness.verify(&p.compact(bits), &shard_claims), Ok(()));
            }
        }
    }

    /// A proof of another version of a shard is refused, and so is a tampered one; one offered
    /// as another shard's proves nothing false.
    #[test]
    fn stale_swapped_and_tampered_shard_proofs_are_refused(
        kind in kinds(),
        bits in 1u8..=3,
        m in model_strategy(),
        extra in prop::collection::vec(any::<u8>(), 0..6),
    ) {
        let map = ShardMap::new(kind, bits).unwrap();
        let (global, tries) = sharded(&map, &m);
        let shard = map.shard_of(&extra);
        let proof = tries[shard as usize].prove(&[&extra]);

        // Another version of the shard: the key added (or changed).
        let mut newer = m.clone();
        let old = newer.insert(extra.clone(), b"new".to_vec());
        prop_assume!(old.as_deref() != Some(&b"new"[..]));
        let (_, newer_tries) = sharded(&map, &newer);
        let stale = newer_tries[shard as usize].prove(&[&extra]);
        prop_assert_eq!(
            global.lift(&[(shard, &stale)]),
            Err(ShardError::StaleProof { shard })
        );

        // Offered as another shard's: refused, or (where both shards' proofs look alike, as
        // two empty shards' do) lifted into a proof that shows nothing false about the key.
        let other = (shard + 1) % map.shards();
        let forged_value = match m.get(&extra) {
            Some(v) => [&v[..], b"forged"].concat(),
            None => b"forged".to_vec(),
        };
        let false_claim = [Claim::present(&extra, &forged_value)];
        if let Ok(swapped) = global.lift(&[(other, &proof)]) {
            prop_assert!(verify(&global.root(), &swapped.encode(), &false_claim).is_err());
        }
        let lifted = global.lift(&[(shard, &proof)]).unwrap();
        prop_assert!(verify(&global.root(), &lifted.encode(), &false_claim).is_err());

        // Two proofs for one shard.
        prop_assert_eq!(
            global.lift(&[(shard, &proof), (shard, &proof)]),
            Err(ShardError::DuplicateShard { shard })
        );

        // Any node's hash flipped.
        let nodes: Vec<ProofNode> = proof.nodes().collect();
        for i in 0..nodes.len() {
            let mut forged = nodes.clone();
            match &mut forged[i] {
                ProofNode::Hash(h) => h[7] ^= 1,
                ProofNode::Leaf(l) => l.value_hash[0] ^= 0x80,
                _ => continue,
            }
            let mut w = ProofWriter::new(kind);
            for n in forged {
                w.push(n);
            }
            let forged = w.finish().unwrap();
            prop_assert_eq!(
                global.lift(&[(shard, &forged)]),
                Err(ShardError::StaleProof { shard })
            );
        }
    }
}

/// A shard holding a key that belongs to another shard is refused, from its witness and as a
/// subtree; so is a witness that does not hash to its root.
#[test]
fn foreign_keys_and_bad_witnesses_are_refused() {
    let kind = HashKind::Sha256;
    let map = ShardMap::new(kind, 2).unwrap();
    let mut by_shard: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 4];
    for i in 0u32.. {
        let key = i.to_be_bytes().to_vec();
        by_shard[map.shard_of(&key) as usize].push(key);
        if by_shard.iter().all(|s| s.len() >= 3) {
            break;
        }
    }
    // Shard 0's table with one key of shard 1 in it.
    let mut m: Model = by_shard[0]
        .iter()
        .map(|k| (k.clone(), b"v".to_vec()))
        .collect();
    m.insert(by_shard[1][0].clone(), b"v".to_vec());
    let t = trie(kind, &m);
    assert_eq!(
        map.subtree(0, &t.root(), &t.top(2)),
        Err(ShardError::ForeignKey { shard: 0 })
    );
    // The same key alone, as shard 0's leaf.
    let foreign = *trie(kind, &[(by_shard[1][0].clone(), b"v".to_vec())].into())
        .prove(&[&by_shard[1][0]])
        .leaves()
        .next()
        .unwrap();
    assert_eq!(
        ShardedRoot::new(
            map,
            vec![
                Subtree::Leaf(foreign),
                Subtree::Empty,
                Subtree::Empty,
                Subtree::Empty
            ]
        ),
        Err(ShardError::ForeignKey { shard: 0 })
    );
    // A witness of another table.
    let own: Model = by_shard[0]
        .iter()
        .map(|k| (k.clone(), b"v".to_vec()))
        .collect();
    let other: Model = by_shard[0]
        .iter()
        .map(|k| (k.clone(), b"w".to_vec()))
        .collect();
    assert!(matches!(
        map.subtree(0, &trie(kind, &own).root(), &trie(kind, &other).top(2)),
        Err(ShardError::Witness(_))
    ));
    // A witness cut above the shard's depth.
    let t = trie(kind, &own);
    assert_eq!(
        map.subtree(0, &t.root(), &t.top(1)),
        Err(ShardError::WitnessShape { shard: 0 })
    );
    // Counts, ranges and bits.
    assert_eq!(
        ShardedRoot::new(map, vec![Subtree::Empty; 3]),
        Err(ShardError::ShardCount {
            expected: 4,
            got: 3
        })
    );
    assert_eq!(
        ShardMap::new(kind, SHARD_BITS_MAX + 1),
        Err(ShardError::Bits(SHARD_BITS_MAX + 1))
    );
    let global = ShardedRoot::new(map, vec![Subtree::Empty; 4]).unwrap();
    let p = t.prove(&[&by_shard[0][0]]);
    assert_eq!(
        global.lift(&[(4, &p)]),
        Err(ShardError::Shard {
            shard: 4,
            shards: 4
        })
    );
}

/// The most shards a map allows still build a root equal to the one trie's.
#[test]
fn many_shards_agree_with_one_trie() {
    let kind = HashKind::Blake3;
    let m: Model = (0u32..3_000)
        .map(|i| (i.to_le_bytes().to_vec(), i.to_be_bytes().to_vec()))
        .collect();
    for bits in [8, 12] {
        let map = ShardMap::new(kind, bits).unwrap();
        let (global, _) = sharded(&map, &m);
        assert_eq!(global.root(), trie(kind, &m).root(), "bits {bits}");
    }
}

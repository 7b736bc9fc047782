//! The root's three implementations agree: the recursive definition, the streaming builder and
//! the reference trie; and the root depends on the set only.

use cairn_proof::reference::{streamed_root, MemTrie};
use cairn_proof::{root_of, root_of_sorted, BuildError, HashKind, Leaf, RootBuilder, ZERO};
use proptest::prelude::*;

const KINDS: [HashKind; 2] = [HashKind::Sha256, HashKind::Blake3];

/// Leaves with chosen key paths: `head` picks the first bits, `shared` how many of the
/// following bits all leaves share (long shared prefixes make long chains of one-child nodes).
fn leaves_from(heads: &[(u16, u8)], shared: usize) -> Vec<Leaf> {
    let mut leaves: Vec<Leaf> = heads
        .iter()
        .map(|&(head, v)| {
            let mut key_path = [0u8; 32];
            // Bits 0..shared are zero for all; the 16 bits after them come from `head`.
            let start = shared.min(240);
            for i in 0..16 {
                if head & (1 << (15 - i)) != 0 {
                    let b = start + i;
                    key_path[b / 8] |= 0x80 >> (b % 8);
                }
            }
            key_path[31] ^= v; // the last bits differ too, sometimes
            Leaf {
                key_path,
                value_hash: [v; 32],
                blob_hash: if v % 3 == 0 { [1; 32] } else { ZERO },
            }
        })
        .collect();
    leaves.sort();
    leaves.dedup_by(|a, b| a.key_path == b.key_path);
    leaves
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn definition_builder_and_trie_agree(
        heads in prop::collection::vec((any::<u16>(), any::<u8>()), 0..80),
        shared in 0usize..256,
    ) {
        let leaves = leaves_from(&heads, shared);
        for kind in KINDS {
            let defined = root_of_sorted(kind, &leaves);
            prop_assert_eq!(streamed_root(kind, &leaves), defined);
            prop_assert_eq!(MemTrie::from_sorted_leaves(kind, &leaves).root().hash, defined);
        }
    }

    #[test]
    fn root_depends_on_the_set_only(
        entries in prop::collection::btree_map(prop::collection::vec(any::<u8>(), 0..6), prop::collection::vec(any::<u8>(), 0..4), 0..60),
        seed in any::<u64>(),
    ) {
        let mut list: Vec<(Vec<u8>, Vec<u8>)> = entries.into_iter().collect();
        let sorted_root = root_of(HashKind::Sha256, list.iter().map(|(k, v)| (&k[..], &v[..], None)));
        // Another order, with a stale value for some keys written first.
        let mut rng = seed;
        let mut shuffled = list.clone();
        for i in (1..shuffled.len()).rev() {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (rng >> 33) as usize % (i + 1));
        }
        let stale: Vec<(Vec<u8>, Vec<u8>)> = list.iter().take(5).map(|(k, _)| (k.clone(), b"old".to_vec())).collect();
        let history: Vec<&(Vec<u8>, Vec<u8>)> = stale.iter().chain(shuffled.iter()).collect();
        let shuffled_root = root_of(HashKind::Sha256, history.iter().map(|(k, v)| (&k[..], &v[..], None)));
        prop_assert_eq!(sorted_root, shuffled_root);
        // Changing one value changes the root.
        if let Some(first) = list.first_mut() {
            first.1.push(0);
            let changed = root_of(HashKind::Sha256, list.iter().map(|(k, v)| (&k[..], &v[..], None)));
            prop_assert_ne!(changed, sorted_root);
        }
    }
}

#[test]
fn small_cases() {
    for kind in KINDS {
        assert_eq!(root_of_sorted(kind, &[]), ZERO);
        let one = Leaf::new(kind, b"k", b"v", None);
        assert_eq!(root_of_sorted(kind, &[one]), one.hash(kind));
        assert_eq!(streamed_root(kind, &[one]), one.hash(kind));
        // Two leaves differing in the first bit: one node over both.
        let mut a = one;
        a.key_path = [0; 32];
        let mut b = one;
        b.key_path = [0x80; 32];
        assert_eq!(
            root_of_sorted(kind, &[a, b]),
            kind.node(&a.hash(kind), &b.hash(kind))
        );
        // Two leaves differing only in the second bit: a chain node with an empty right child.
        b.key_path = [0; 32];
        b.key_path[0] = 0x40;
        let inner = kind.node(&a.hash(kind), &b.hash(kind));
        assert_eq!(root_of_sorted(kind, &[a, b]), kind.node(&inner, &ZERO));
        assert_eq!(streamed_root(kind, &[a, b]), kind.node(&inner, &ZERO));
    }
    // A blob changes the leaf; the blob's absence is ZERO.
    let with = Leaf::new(HashKind::Sha256, b"k", b"v", Some(b"blob"));
    let without = Leaf::new(HashKind::Sha256, b"k", b"v", None);
    assert!(with.has_blob() && !without.has_blob());
    assert_ne!(with.hash(HashKind::Sha256), without.hash(HashKind::Sha256));
    // The kinds differ.
    assert_ne!(
        without.hash(HashKind::Sha256),
        Leaf::new(HashKind::Blake3, b"k", b"v", None).hash(HashKind::Blake3)
    );
}

#[test]
fn builder_refuses_disorder() {
    let kind = HashKind::Sha256;
    let mut a = Leaf::new(kind, b"a", b"", None);
    let mut b = a;
    a.key_path = [2; 32];
    b.key_path = [1; 32];
    let mut builder = RootBuilder::new(kind);
    builder.push(&a).unwrap();
    assert_eq!(builder.push(&b), Err(BuildError::OutOfOrder { index: 1 }));
    assert_eq!(builder.push(&a), Err(BuildError::OutOfOrder { index: 1 }));
    assert_eq!(builder.leaves(), 1);
    assert_eq!(builder.finish(), a.hash(kind));
}

/// The root computed a part of the key space at a time, as `cairn verify` does: the subtrees at
/// depth `d` combined up the top `d` levels.
fn root_by_parts(kind: HashKind, leaves: &[Leaf], d: usize) -> [u8; 32] {
    // (hash, leaves) of each subtree at depth `d`, in key-path order.
    let mut level: Vec<([u8; 32], usize)> = (0..1usize << d)
        .map(|p| {
            let part: Vec<Leaf> = leaves
                .iter()
                .filter(|l| {
                    (0..d).all(|i| {
                        cairn_proof::hash::bit(&l.key_path, i) == (p >> (d - 1 - i) & 1 == 1)
                    })
                })
                .cloned()
                .collect();
            (cairn_proof::subtree_of_sorted(kind, &part, d), part.len())
        })
        .collect();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| {
                let (l, r) = (pair[0], pair[1]);
                match (l.1, r.1) {
                    (0, 0) => (ZERO, 0),
                    (1, 0) => l,
                    (0, 1) => r,
                    _ => (kind.node(&l.0, &r.0), l.1 + r.1),
                }
            })
            .collect();
    }
    level[0].0
}

proptest! {
    #[test]
    fn subtrees_combine_to_the_root(
        heads in proptest::collection::btree_map(any::<u16>(), any::<u8>(), 0..40),
        shared in 0usize..6,
        d in 0usize..5,
    ) {
        let heads: Vec<(u16, u8)> = heads.into_iter().collect();
        let leaves = leaves_from(&heads, shared);
        for kind in KINDS {
            prop_assert_eq!(root_by_parts(kind, &leaves, d), root_of_sorted(kind, &leaves));
        }
    }
}

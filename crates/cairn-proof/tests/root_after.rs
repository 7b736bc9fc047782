//! The root after updates, from a proof of the version before (`Proof::root_after`): for random
//! sets and batches of inserts, value updates and deletes, a proof from the reference trie
//! (`MemTrie::prove_updates`) gives exactly the reference root of the updated set, in any
//! order of the batch; a proof of the keys alone (what the engine's prover makes) gives that
//! root or `SiblingNotOpened`, never another; tampered proofs, a wrong old root, keys the proof
//! does not cover and opaque nodes where a leaf is needed are refused. The reference trie is the
//! definition the engine's commits are checked against (`crates/cairn/src/trie/mod.rs`,
//! `commits_match_the_reference`).

use std::collections::BTreeMap;

use cairn_proof::hash::{bit, common_prefix_bits};
use cairn_proof::reference::MemTrie;
use cairn_proof::{
    root_after, Change, Claim, Hash, HashKind, Leaf, Proof, ProofNode, ProofWriter, Root,
    RootAfterError, Update, VerifyError, ZERO,
};
use proptest::prelude::*;

/// Key → (value, blob).
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

/// A write: the key and its new value and blob, or `None` for a delete.
type Op = (Vec<u8>, Option<(Vec<u8>, Option<Vec<u8>>)>);

fn model(n: usize, salt: u8) -> Model {
    (0..n)
        .map(|i| {
            let key = format!("key-{i}-{salt}").into_bytes();
            let value = format!("value-{i}").into_bytes();
            let blob = (i % 4 == 0).then(|| vec![salt; i % 9]);
            (key, (value, blob))
        })
        .collect()
}

fn trie(kind: HashKind, m: &Model) -> MemTrie {
    MemTrie::new(
        kind,
        m.iter().map(|(k, (v, b))| (&k[..], &v[..], b.as_deref())),
    )
}

fn apply(m: &Model, ops: &[Op]) -> Model {
    let mut out = m.clone();
    for (k, v) in ops {
        match v {
            Some(v) => out.insert(k.clone(), v.clone()),
            None => out.remove(k),
        };
    }
    out
}

fn updates(kind: HashKind, ops: &[Op]) -> Vec<Update<'_>> {
    ops.iter()
        .map(|(k, v)| match v {
            None => Update::delete(k),
            Some((v, None)) => Update::put(k, v),
            Some((v, Some(b))) => Update::put_with_blob(k, v, kind.blob_hash(b)),
        })
        .collect()
}

/// The last write of each key, in the order of those last writes.
fn last_per_key(ops: &[Op]) -> Vec<Op> {
    let mut out: Vec<Op> = Vec::new();
    for op in ops.iter().rev() {
        if out.iter().all(|o| o.0 != op.0) {
            out.push(op.clone());
        }
    }
    out.reverse();
    out
}

/// Writes from the generator's picks: `sel & 1` a key of the set (else a new one, among 48 so
/// that they repeat), `(sel >> 1) % 6` the write (a delete, twice as likely; a fresh value; the
/// value the key holds; a value and a blob; a value and no blob where a blob was).
fn ops_for(m: &Model, picks: &[(u8, u16, u8)]) -> Vec<Op> {
    let keys: Vec<&Vec<u8>> = m.keys().collect();
    picks
        .iter()
        .map(|&(sel, i, v)| {
            let key = if sel & 1 == 0 && !keys.is_empty() {
                keys[i as usize % keys.len()].clone()
            } else {
                format!("new-{}", i % 48).into_bytes()
            };
            let fresh = format!("fresh-{v}").into_bytes();
            let write = match (sel >> 1) % 6 {
                0 | 1 => None,
                2 => Some((fresh, None)),
                3 => Some(m.get(&key).cloned().unwrap_or((fresh, None))),
                4 => Some((fresh, Some(vec![v; v as usize % 5]))),
                _ => Some((m.get(&key).map_or(fresh, |e| e.0.clone()), None)),
            };
            (key, write)
        })
        .collect()
}

fn kind_of(blake: bool) -> HashKind {
    if blake {
        HashKind::Blake3
    } else {
        HashKind::Sha256
    }
}

/// The proof with node `i` replaced by `node` (the same shape: `i` is not internal, nor `node`).
fn with_node(proof: &Proof, i: usize, node: ProofNode) -> Proof {
    let mut w = ProofWriter::new(proof.kind());
    for (j, n) in proof.nodes().enumerate() {
        w.push(if j == i { node } else { n });
    }
    w.finish().expect("the same shape")
}

/// Where `path` ends in `proof`: the node and its depth.
fn ends_at(proof: &Proof, path: &Hash) -> (ProofNode, usize) {
    fn walk(
        nodes: &mut impl Iterator<Item = ProofNode>,
        depth: usize,
        path: &Hash,
        on_path: bool,
        out: &mut Option<(ProofNode, usize)>,
    ) {
        let node = nodes.next().expect("one tree");
        if node == ProofNode::Internal {
            walk(nodes, depth + 1, path, on_path && !bit(path, depth), out);
            walk(nodes, depth + 1, path, on_path && bit(path, depth), out);
        } else if on_path {
            *out = Some((node, depth));
        }
    }
    let mut out = None;
    walk(&mut proof.nodes(), 0, path, true, &mut out);
    out.expect("every path ends somewhere")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_root_after_is_the_reference_root(
        n in 0usize..120,
        salt in any::<u8>(),
        picks in prop::collection::vec((any::<u8>(), any::<u16>(), any::<u8>()), 0..48),
        blake in any::<bool>(),
    ) {
        let kind = kind_of(blake);
        let m0 = model(n, salt);
        let t0 = trie(kind, &m0);
        let old = t0.root();
        let ops = ops_for(&m0, &picks);
        let want = trie(kind, &apply(&m0, &ops)).root();
        let ups = updates(kind, &ops);

        let proof = t0.prove_updates(&ups);
        prop_assert_eq!(proof.root(), Ok(old));
        prop_assert_eq!(proof.root_after(&old, &ups), Ok(want));
        prop_assert_eq!(root_after(&old, &proof.encode(), &ups), Ok(want));

        // The batch as final writes, in reverse and rotated: the same root.
        let mut last = last_per_key(&ops);
        last.reverse();
        prop_assert_eq!(proof.root_after(&old, &updates(kind, &last)), Ok(want));
        if !last.is_empty() {
            let by = picks.len() % last.len();
            last.rotate_left(by);
            prop_assert_eq!(proof.root_after(&old, &updates(kind, &last)), Ok(want));
        }

        // A proof of the keys alone, as the engine makes: the true root, or a refusal naming a
        // delete; always the root when no present key is deleted.
        let keys: Vec<&[u8]> = ops.iter().map(|o| &o.0[..]).collect();
        let plain = t0.prove(&keys);
        let deletes_present = last_per_key(&ops)
            .iter()
            .any(|(k, v)| v.is_none() && m0.contains_key(k));
        match plain.root_after(&old, &ups) {
            Ok(root) => prop_assert_eq!(root, want),
            Err(RootAfterError::SiblingNotOpened { update, depth }) => {
                prop_assert!(deletes_present);
                prop_assert_eq!(ups[update].change, Change::Delete);
                prop_assert!((1..=256).contains(&depth));
            }
            Err(e) => prop_assert!(false, "unexpected {e:?}"),
        }
        if !deletes_present {
            prop_assert_eq!(plain.root_after(&old, &ups), Ok(want));
        }
    }

    #[test]
    fn forged_inputs_are_refused(
        n in 1usize..80,
        salt in any::<u8>(),
        picks in prop::collection::vec((any::<u8>(), any::<u16>(), any::<u8>()), 1..24),
        at in any::<u16>(),
        flip in 0usize..256,
        blake in any::<bool>(),
    ) {
        let kind = kind_of(blake);
        let m0 = model(n, salt);
        let t0 = trie(kind, &m0);
        let old = t0.root();
        let ops = ops_for(&m0, &picks);
        let want = trie(kind, &apply(&m0, &ops)).root();
        let ups = updates(kind, &ops);
        let proof = t0.prove_updates(&ups);
        let paths: Vec<Hash> = ops.iter().map(|o| kind.key_path(&o.0)).collect();

        // The new root (or any other) given as the old one.
        if want != old {
            prop_assert_eq!(proof.root_after(&want, &ups), Err(RootAfterError::RootMismatch));
        }
        let other = Root { kind, hash: kind.node(&old.hash, &ZERO) };
        prop_assert_eq!(proof.root_after(&other, &ups), Err(RootAfterError::RootMismatch));
        let other_kind = kind_of(!blake);
        prop_assert_eq!(
            proof.root_after(&Root { kind: other_kind, hash: old.hash }, &ups),
            Err(RootAfterError::HashKindMismatch { root: other_kind, proof: kind })
        );

        // One node tampered with: refused, whatever the node.
        let nodes: Vec<ProofNode> = proof.nodes().collect();
        let i = at as usize % nodes.len();
        let byte_flip = |mut h: Hash| { h[flip / 8] ^= 0x80 >> (flip % 8); h };
        let tampered = match nodes[i] {
            ProofNode::Internal => None,
            ProofNode::Empty => Some(ProofNode::Hash(byte_flip(ZERO))),
            ProofNode::Hash(h) => Some(ProofNode::Hash(byte_flip(h))),
            ProofNode::Leaf(l) if flip % 2 == 0 => {
                Some(ProofNode::Leaf(Leaf { value_hash: byte_flip(l.value_hash), ..l }))
            }
            ProofNode::Leaf(l) => Some(ProofNode::Leaf(Leaf { key_path: byte_flip(l.key_path), ..l })),
        };
        if let Some(node) = tampered {
            let got = with_node(&proof, i, node).root_after(&old, &ups);
            prop_assert!(
                matches!(got, Err(RootAfterError::RootMismatch | RootAfterError::MisplacedLeaf)),
                "node {i} tampered into {node:?}: {got:?}"
            );
        }

        // An opened leaf given by its hash instead (the proof still hashes to the root): refused
        // if an update names its key; otherwise never a wrong root.
        for (i, node) in nodes.iter().enumerate() {
            let ProofNode::Leaf(l) = node else { continue };
            let got = with_node(&proof, i, ProofNode::Hash(l.hash(kind))).root_after(&old, &ups);
            if paths.contains(&l.key_path) {
                prop_assert!(matches!(got, Err(RootAfterError::NotCovered { .. })), "{got:?}");
            } else {
                prop_assert!(
                    matches!(
                        got,
                        Ok(r) if r == want
                    ) || matches!(
                        got,
                        Err(RootAfterError::NotCovered { .. } | RootAfterError::SiblingNotOpened { .. })
                    ),
                    "{got:?}"
                );
            }
        }

        // An empty subtree given as the hash ZERO: the same subtree, but opaque to updates.
        for (i, node) in nodes.iter().enumerate() {
            if *node != ProofNode::Empty {
                continue;
            }
            let got = with_node(&proof, i, ProofNode::Hash(ZERO)).root_after(&old, &ups);
            prop_assert!(
                got == Ok(want) || matches!(got, Err(RootAfterError::NotCovered { .. })),
                "{got:?}"
            );
        }

        // An update of a key the proof does not cover.
        let outside = (0..256)
            .map(|j| format!("outside-{j}").into_bytes())
            .find(|k| {
                proof.verify(&old, &[Claim::absent(k)]) == Err(VerifyError::NotCovered { claim: 0 })
            });
        if let Some(k) = outside {
            let mut more = ups.clone();
            more.push(Update::put(&k, b"v"));
            prop_assert_eq!(
                proof.root_after(&old, &more),
                Err(RootAfterError::NotCovered { update: ups.len() })
            );
            more.pop();
            more.push(Update::delete(&k));
            prop_assert_eq!(
                proof.root_after(&old, &more),
                Err(RootAfterError::NotCovered { update: ups.len() })
            );
        }
    }
}

#[test]
fn an_empty_trie_takes_inserts() {
    for kind in [HashKind::Sha256, HashKind::Blake3] {
        let t = trie(kind, &Model::new());
        let old = t.root();
        assert_eq!(old, Root::empty(kind));
        let proof = t.prove(&[b"a"]);
        assert_eq!(proof.nodes().collect::<Vec<_>>(), [ProofNode::Empty]);
        assert_eq!(proof.root_after(&old, &[]), Ok(old));
        assert_eq!(proof.root_after(&old, &[Update::delete(b"a")]), Ok(old));
        let m = model(9, 1);
        let ops: Vec<Op> = m
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        assert_eq!(
            proof.root_after(&old, &updates(kind, &ops)),
            Ok(trie(kind, &m).root())
        );
    }
}

#[test]
fn a_value_update_replaces_the_leaf_and_the_same_value_changes_nothing() {
    let kind = HashKind::Sha256;
    let m = model(20, 3);
    let t = trie(kind, &m);
    let old = t.root();
    let key = m.keys().nth(5).unwrap().clone();
    let proof = t.prove(&[&key]);
    let ops: Vec<Op> = vec![(key.clone(), Some((b"new".to_vec(), None)))];
    let want = trie(kind, &apply(&m, &ops)).root();
    assert_ne!(want, old);
    assert_eq!(proof.root_after(&old, &updates(kind, &ops)), Ok(want));
    // The value and blob it holds: no change. A blob hash of ZERO is no blob.
    let (v, b) = m[&key].clone();
    let same = match &b {
        Some(b) => Update::put_with_blob(&key, &v, kind.blob_hash(b)),
        None => Update::put_with_blob(&key, &v, ZERO),
    };
    assert_eq!(proof.root_after(&old, &[same]), Ok(old));
    // A blob added: another root.
    let with_blob = Update::put_with_blob(&key, &v, kind.blob_hash(b"blob"));
    let got = proof.root_after(&old, &[with_blob]).unwrap();
    let mut m2 = m.clone();
    m2.insert(key.clone(), (v.clone(), Some(b"blob".to_vec())));
    assert_eq!(got, trie(kind, &m2).root());
}

#[test]
fn an_insert_into_an_empty_subtree() {
    let kind = HashKind::Sha256;
    let m = model(6, 0);
    let t = trie(kind, &m);
    let old = t.root();
    let key = (0..1000)
        .map(|i| format!("fresh-{i}").into_bytes())
        .find(|k| ends_at(&t.prove(&[k]), &kind.key_path(k)).0 == ProofNode::Empty)
        .expect("some key's path ends at an empty subtree");
    let proof = t.prove(&[&key]);
    let ops: Vec<Op> = vec![(key.clone(), Some((b"v".to_vec(), None)))];
    let want = trie(kind, &apply(&m, &ops)).root();
    assert_eq!(proof.root_after(&old, &updates(kind, &ops)), Ok(want));
    // Deleting it again (absent in the old version): no change.
    assert_eq!(proof.root_after(&old, &[Update::delete(&key)]), Ok(old));
}

#[test]
fn an_insert_next_to_a_leaf_splits_down_to_the_first_differing_bit() {
    for kind in [HashKind::Sha256, HashKind::Blake3] {
        let a = b"a".to_vec();
        let pa = kind.key_path(&a);
        // A key whose path shares at least 12 bits with `a`'s.
        let b = (0..100_000)
            .map(|i| format!("b-{i}").into_bytes())
            .find(|b| common_prefix_bits(&pa, &kind.key_path(b)) >= 12)
            .expect("one in 4096");
        let pb = kind.key_path(&b);
        let shared = common_prefix_bits(&pa, &pb);
        let m: Model = [(a.clone(), (b"1".to_vec(), None))].into();
        let t = trie(kind, &m);
        let old = t.root();
        let proof = t.prove(&[&b]);
        let la = Leaf::new(kind, &a, b"1", None);
        assert_eq!(proof.nodes().collect::<Vec<_>>(), [ProofNode::Leaf(la)]);
        let got = proof.root_after(&old, &[Update::put(&b, b"2")]).unwrap();

        // By hand: the two leaves under a node at depth `shared`, then an empty sibling at
        // every level of the shared prefix.
        let lb = Leaf::new(kind, &b, b"2", None);
        let mut h = match bit(&pa, shared) {
            false => kind.node(&la.hash(kind), &lb.hash(kind)),
            true => kind.node(&lb.hash(kind), &la.hash(kind)),
        };
        for depth in (0..shared).rev() {
            h = match bit(&pa, depth) {
                false => kind.node(&h, &ZERO),
                true => kind.node(&ZERO, &h),
            };
        }
        assert_eq!(got, Root { kind, hash: h });
        let m2 = apply(&m, &[(b.clone(), Some((b"2".to_vec(), None)))]);
        let t2 = trie(kind, &m2);
        assert_eq!(got, t2.root());

        // And back: deleting `b` collapses the chain to `a`'s leaf, if the proof opens `a`.
        let del = [Update::delete(&b)];
        let opened = t2.prove_updates(&del);
        assert_eq!(opened.root_after(&t2.root(), &del), Ok(old));
        assert_eq!(old.hash, la.hash(kind));
        // The engine's kind of proof gives `a` by its hash: its collapse cannot be told.
        let plain = t2.prove(&[&b]);
        assert_eq!(
            plain.root_after(&t2.root(), &del),
            Err(RootAfterError::SiblingNotOpened {
                update: 0,
                depth: shared + 1
            })
        );
    }
}

#[test]
fn an_update_reaching_an_opaque_subtree_is_refused() {
    let kind = HashKind::Sha256;
    let m = model(10, 7);
    let t = trie(kind, &m);
    let old = t.root();
    let none: [&[u8]; 0] = [];
    let proof = t.prove(&none);
    assert_eq!(
        proof.nodes().collect::<Vec<_>>(),
        [ProofNode::Hash(old.hash)]
    );
    assert_eq!(proof.root_after(&old, &[]), Ok(old));
    for u in [
        Update::put(b"x", b"1"),
        Update::delete(b"x"),
        Update::delete(m.keys().next().unwrap()),
    ] {
        assert_eq!(
            proof.root_after(&old, &[u]),
            Err(RootAfterError::NotCovered { update: 0 })
        );
    }
    // The first such update by index is named.
    let key = m.keys().next().unwrap();
    let proof = t.prove(&[key]);
    let outside = (0..256)
        .map(|j| format!("outside-{j}").into_bytes())
        .filter(|k| {
            proof.verify(&old, &[Claim::absent(k)]) == Err(VerifyError::NotCovered { claim: 0 })
        })
        .take(2)
        .collect::<Vec<_>>();
    let ups = [
        Update::put(key, b"1"),
        Update::put(&outside[1], b"1"),
        Update::delete(&outside[0]),
    ];
    let got = proof.root_after(&old, &ups);
    assert!(
        matches!(got, Err(RootAfterError::NotCovered { update: 1 | 2 })),
        "{got:?}"
    );
}

#[test]
fn a_delete_next_to_an_internal_sibling() {
    let kind = HashKind::Sha256;
    // A key whose leaf's sibling is an internal node.
    for salt in 0..=255u8 {
        let m = model(12, salt);
        let t = trie(kind, &m);
        let old = t.root();
        for key in m.keys() {
            let del = [Update::delete(key)];
            let proof = t.prove_updates(&del);
            let (_, depth) = ends_at(&proof, &kind.key_path(key));
            // The sibling: the node at `depth` on the path with its last bit flipped.
            let mut sibling_path = kind.key_path(key);
            sibling_path[(depth - 1) / 8] ^= 0x80 >> ((depth - 1) % 8);
            let (sibling, sibling_depth) = ends_at(&proof, &sibling_path);
            if sibling_depth == depth {
                continue; // a leaf (or empty): not this test's case
            }
            let want = trie(kind, &apply(&m, &[(key.clone(), None)])).root();
            assert_eq!(proof.root_after(&old, &del), Ok(want));
            // Opened one level: an internal node whose children are given by hash (or empty).
            assert_eq!(sibling_depth, depth + 1);
            assert!(
                matches!(sibling, ProofNode::Hash(_) | ProofNode::Empty),
                "{sibling:?}"
            );
            assert_eq!(
                t.prove(&[key]).root_after(&old, &del),
                Err(RootAfterError::SiblingNotOpened { update: 0, depth })
            );
            return;
        }
    }
    panic!("no leaf with an internal sibling");
}

#[test]
fn deleting_every_key_empties_the_trie() {
    let kind = HashKind::Blake3;
    let m = model(40, 9);
    let t = trie(kind, &m);
    let ops: Vec<Op> = m.keys().map(|k| (k.clone(), None)).collect();
    let ups = updates(kind, &ops);
    let proof = t.prove_updates(&ups);
    assert_eq!(proof.root_after(&t.root(), &ups), Ok(Root::empty(kind)));
    // All but one: that leaf alone is the root.
    let proof = t.prove_updates(&ups[1..]);
    let (k, (v, b)) = m.iter().next().unwrap();
    let leaf = Leaf::new(kind, k, v, b.as_deref());
    assert_eq!(
        proof.root_after(&t.root(), &ups[1..]),
        Ok(Root {
            kind,
            hash: leaf.hash(kind)
        })
    );
}

#[test]
fn the_last_update_of_a_key_counts_and_distinct_keys_commute() {
    let kind = HashKind::Sha256;
    let m = model(30, 2);
    let t = trie(kind, &m);
    let old = t.root();
    let k: Vec<Vec<u8>> = m.keys().take(3).cloned().collect();
    let ops: Vec<Op> = vec![
        (k[0].clone(), Some((b"x".to_vec(), None))),
        (b"new".to_vec(), Some((b"y".to_vec(), None))),
        (k[1].clone(), None),
        (k[2].clone(), Some((b"z".to_vec(), Some(b"blob".to_vec())))),
    ];
    let ups = updates(kind, &ops);
    let proof = t.prove_updates(&ups);
    let want = trie(kind, &apply(&m, &ops)).root();
    // Every order of the four.
    let mut order = [0usize, 1, 2, 3];
    for _ in 0..24 {
        let permuted: Vec<Update<'_>> = order.iter().map(|&i| ups[i]).collect();
        assert_eq!(proof.root_after(&old, &permuted), Ok(want));
        next_permutation(&mut order);
    }
    // A later write of a key replaces an earlier one.
    let twice = [
        Update::put(&k[0], b"first"),
        Update::delete(&k[0]),
        Update::put(&k[0], b"x"),
    ];
    let want = trie(kind, &apply(&m, &ops[..1])).root();
    assert_eq!(t.prove_updates(&twice).root_after(&old, &twice), Ok(want));
    let undone = [Update::put(b"new", b"y"), Update::delete(b"new")];
    assert_eq!(t.prove_updates(&undone).root_after(&old, &undone), Ok(old));
}

/// The next permutation in lexicographic order (wrapping to the first).
fn next_permutation(a: &mut [usize]) {
    let Some(i) = (1..a.len()).rev().find(|&i| a[i - 1] < a[i]) else {
        a.reverse();
        return;
    };
    let j = (i..a.len()).rev().find(|&j| a[j] > a[i - 1]).unwrap();
    a.swap(i - 1, j);
    a[i..].reverse();
}

#[test]
fn bytes_that_are_not_a_proof_are_a_decode_error() {
    let old = Root::empty(HashKind::Sha256);
    assert!(matches!(
        root_after(&old, b"not a proof", &[Update::put(b"k", b"v")]),
        Err(RootAfterError::Decode(_))
    ));
}

//! Proofs verify what is true and nothing else: every inclusion and exclusion proof and
//! multiproofs of 1 to 256 keys verify; a flipped bit, a changed value, a false presence or
//! absence claim are rejected; compact proofs against a witness likewise.

use std::collections::BTreeMap;

use cairn_proof::reference::MemTrie;
use cairn_proof::{
    verify, Claim, CompactProof, DecodeError, HashKind, Proof, Root, TopWitness, VerifyError,
};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

fn model(n: usize, salt: u8) -> Model {
    (0..n)
        .map(|i| {
            let key = format!("key-{i}-{salt}").into_bytes();
            let value = format!("value-{}", i * 7 + salt as usize).into_bytes();
            let blob = (i % 5 == 0).then(|| vec![salt; i % 17]);
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

/// The true claim about `key` in `m`.
fn truth<'a>(
    kind: HashKind,
    m: &'a Model,
    key: &'a [u8],
    blob_hashes: &'a mut Vec<[u8; 32]>,
) -> Claim<'a> {
    match m.get(key) {
        None => Claim::absent(key),
        Some((v, None)) => Claim::present(key, v),
        Some((v, Some(b))) => {
            blob_hashes.push(kind.blob_hash(b));
            Claim::present_with_blob(key, v, *blob_hashes.last().unwrap())
        }
    }
}

fn keys_for(m: &Model, picks: &[(bool, u16)]) -> Vec<Vec<u8>> {
    let present: Vec<&Vec<u8>> = m.keys().collect();
    picks
        .iter()
        .map(|&(absent, i)| {
            if absent || present.is_empty() {
                format!("absent-{i}").into_bytes()
            } else {
                present[i as usize % present.len()].clone()
            }
        })
        .collect()
}

fn claims_for<'a>(kind: HashKind, m: &'a Model, keys: &'a [Vec<u8>]) -> Vec<Claim<'a>> {
    keys.iter()
        .map(|k| match m.get(k) {
            None => Claim::absent(k),
            Some((v, None)) => Claim::present(k, v),
            Some((v, Some(b))) => Claim::present_with_blob(k, v, kind.blob_hash(b)),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn true_claims_verify_and_false_ones_do_not(
        n in 0usize..300,
        salt in any::<u8>(),
        picks in prop::collection::vec((any::<bool>(), any::<u16>()), 1..=256),
        blake in any::<bool>(),
    ) {
        let kind = if blake { HashKind::Blake3 } else { HashKind::Sha256 };
        let m = model(n, salt);
        let t = trie(kind, &m);
        let root = t.root();
        let keys = keys_for(&m, &picks);
        let claims = claims_for(kind, &m, &keys);
        let proof = t.prove(&keys);
        let bytes = proof.encode();
        prop_assert_eq!(bytes.len(), proof.encoded_len());
        prop_assert_eq!(Proof::decode(&bytes), Ok(proof.clone()));
        prop_assert_eq!(verify(&root, &bytes, &claims), Ok(()));
        prop_assert_eq!(proof.root().unwrap(), root);

        // Each claim falsified in turn is caught, naming that claim.
        let wrong_value = b"not the value".to_vec();
        for (i, key) in keys.iter().enumerate() {
            let mut bad = claims.clone();
            let expected = match m.get(key) {
                Some(_) => {
                    bad[i] = Claim::absent(key);
                    VerifyError::Present { claim: i }
                }
                None => {
                    bad[i] = Claim::present(key, b"x");
                    VerifyError::Absent { claim: i }
                }
            };
            let got = proof.verify(&root, &bad).unwrap_err();
            // An earlier duplicate of the same key may be reported instead.
            prop_assert_eq!(got, expected);
            if m.contains_key(key) {
                bad[i] = Claim::present(key, &wrong_value);
                prop_assert_eq!(proof.verify(&root, &bad), Err(VerifyError::ValueMismatch { claim: i }));
            }
        }

        // A key the proof does not cover (when the proof does not open the whole trie).
        let outsider = b"never-asked-about".to_vec();
        let r = proof.verify(&root, &[claims_for(kind, &m, std::slice::from_ref(&outsider))[0]]);
        prop_assert!(matches!(r, Ok(()) | Err(VerifyError::NotCovered { claim: 0 })), "{:?}", r);

        // The wrong root, the wrong kind.
        let mut other = root;
        other.hash[0] ^= 1;
        prop_assert_eq!(proof.verify(&other, &claims), Err(VerifyError::RootMismatch));
        let other_kind = Root { kind: if blake { HashKind::Sha256 } else { HashKind::Blake3 }, hash: root.hash };
        prop_assert!(matches!(proof.verify(&other_kind, &claims), Err(VerifyError::HashKindMismatch { .. })), "kind");
    }

    #[test]
    fn every_flipped_bit_is_rejected(
        n in 1usize..40,
        salt in any::<u8>(),
        picks in prop::collection::vec((any::<bool>(), any::<u16>()), 1..4),
    ) {
        let kind = HashKind::Sha256;
        let m = model(n, salt);
        let t = trie(kind, &m);
        let root = t.root();
        let keys = keys_for(&m, &picks);
        let claims = claims_for(kind, &m, &keys);
        let bytes = t.prove(&keys).encode();
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(verify(&root, &flipped, &claims).is_err(), "bit {} accepted", bit);
        }
        for len in 0..bytes.len() {
            prop_assert!(verify(&root, &bytes[..len], &claims).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert_eq!(verify(&root, &longer, &claims), Err(VerifyError::Decode(DecodeError::TrailingBytes(1))));
    }

    #[test]
    fn compact_proofs_against_a_witness(
        n in 0usize..400,
        salt in any::<u8>(),
        picks in prop::collection::vec((any::<bool>(), any::<u16>()), 1..64),
        levels in 1u8..10,
    ) {
        let kind = HashKind::Sha256;
        let m = model(n, salt);
        let t = trie(kind, &m);
        let root = t.root();
        let witness = TopWitness::new(&root, &t.top(levels), levels).unwrap();
        let keys = keys_for(&m, &picks);
        let claims = claims_for(kind, &m, &keys);
        let full = t.prove(&keys);
        let compact = full.compact(levels);
        let bytes = compact.encode();
        prop_assert_eq!(bytes.len(), compact.encoded_len());
        let decoded = CompactProof::decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &compact);
        prop_assert_eq!(witness.verify(&decoded, &claims), Ok(()));
        // False claims fail.
        for (i, key) in keys.iter().enumerate() {
            let mut bad = claims.clone();
            bad[i] = if m.contains_key(key) { Claim::absent(key) } else { Claim::present(key, b"x") };
            prop_assert!(witness.verify(&decoded, &bad).is_err());
        }
        // Flipped bits fail (a few hundred of them, spread over the proof).
        let step = (bytes.len() * 8 / 300).max(1);
        for bit in (0..bytes.len() * 8).step_by(step) {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let accepted = CompactProof::decode(&flipped).is_ok_and(|p| witness.verify(&p, &claims).is_ok());
            prop_assert!(!accepted, "bit {} accepted", bit);
        }
        // A witness of other levels refuses.
        let other = TopWitness::new(&root, &t.top(levels + 1), levels + 1).unwrap();
        prop_assert!(matches!(other.verify(&decoded, &claims), Err(VerifyError::WitnessLevels { .. })), "levels");
    }
}

#[test]
fn inclusion_and_exclusion_sizes_are_about_a_kilobyte_per_key() {
    // 100,000 keys: a path of about 17 + 2 levels; 32 bytes a level plus the leaf.
    let m = model(100_000, 1);
    let t = trie(HashKind::Sha256, &m);
    let key = m.keys().next().unwrap().clone();
    let inclusion = t.prove(&[&key]).encoded_len();
    let exclusion = t.prove(&[b"absent"]).encoded_len();
    assert!(inclusion < 32 * 24 + 200, "{inclusion}");
    assert!(exclusion < 32 * 24 + 200, "{exclusion}");
    // Without the top 10 levels, about 10 sibling hashes fewer.
    let compact = t.prove(&[&key]).compact(10).encoded_len();
    assert!(compact + 9 * 32 < inclusion, "{compact} vs {inclusion}");
}

#[test]
fn empty_and_single_tables() {
    let kind = HashKind::Sha256;
    let empty = trie(kind, &Model::new());
    let proof = empty.prove(&[b"k"]);
    assert_eq!(proof.verify(&empty.root(), &[Claim::absent(b"k")]), Ok(()));
    assert_eq!(
        proof.verify(&empty.root(), &[Claim::present(b"k", b"v")]),
        Err(VerifyError::Absent { claim: 0 })
    );
    let mut one = Model::new();
    one.insert(b"k".to_vec(), (b"v".to_vec(), None));
    let t = trie(kind, &one);
    let proof = t.prove(&[&b"k"[..], b"other"]);
    let claims = [Claim::present(b"k", b"v"), Claim::absent(b"other")];
    assert_eq!(proof.verify(&t.root(), &claims), Ok(()));
    assert_eq!(
        Root::from_slice(kind, &[0; 31]),
        Err(VerifyError::RootLength { len: 31 })
    );
    let _ = truth; // (kept for symmetry with the engine's tests)
}

#[test]
fn junk_is_refused() {
    let root = Root::empty(HashKind::Sha256);
    for junk in [
        &b""[..],
        b"CRNP",
        b"CRNP\x01\x01\x00\x00",
        b"XXXX\x01\x01\x00\x00\x01\x00\x00\x00\x00",
    ] {
        assert!(matches!(
            verify(&root, junk, &[]),
            Err(VerifyError::Decode(_))
        ));
    }
    // A node count far beyond the input is refused before allocating.
    let huge = b"CRNP\x01\x01\x00\x00\xff\xff\xff\xff";
    assert!(matches!(
        Proof::decode(huge),
        Err(DecodeError::Truncated { .. })
    ));
    // A megabyte of empty tags is refused from the tags alone (it is not one tree), before any
    // node is copied out.
    let mut many = b"CRNP\x01\x01\x00\x00".to_vec();
    many.extend_from_slice(&(4u32 << 20).to_le_bytes());
    many.extend(std::iter::repeat_n(0u8, 1 << 20));
    assert!(matches!(Proof::decode(&many), Err(DecodeError::Tree(_))));
    // A tree whose payloads are missing is refused before they are read.
    let mut short = b"CRNP\x01\x01\x00\x00".to_vec();
    short.extend_from_slice(&1u32.to_le_bytes());
    short.push(1); // one opaque node, 32 bytes of hash missing
    assert!(matches!(
        Proof::decode(&short),
        Err(DecodeError::Truncated { needed: 32, .. })
    ));
    // An unknown version, kind, form.
    assert_eq!(
        Proof::decode(b"CRNP\x02\x01\x00\x00"),
        Err(DecodeError::UnsupportedVersion(2))
    );
    assert_eq!(
        Proof::decode(b"CRNP\x01\x09\x00\x00"),
        Err(DecodeError::UnknownHashKind(9))
    );
    assert_eq!(
        Proof::decode(b"CRNP\x01\x01\x01\x00"),
        Err(DecodeError::Form(1))
    );
    // A chain of 257 internal nodes is deeper than any key path.
    let mut w = cairn_proof::ProofWriter::new(HashKind::Sha256);
    for _ in 0..257 {
        w.push(cairn_proof::ProofNode::Internal);
        w.push(cairn_proof::ProofNode::Empty);
    }
    w.push(cairn_proof::ProofNode::Empty);
    assert!(w.finish().is_err());
}

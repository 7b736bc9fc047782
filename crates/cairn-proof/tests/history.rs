//! The history tree (`cairn_proof::history`, `docs/format/history.md`): RFC 9162 §2.1 hashing
//! checked against roots computed by hand and against the RFC 6962 test vectors; the encodings
//! pinned by golden files; honest proofs verify for every position of trees up to 300 leaves;
//! and forged ones do not: flipped bits, truncations, changed indices, sizes, leaves and roots,
//! swapped, added or dropped hashes, digests of the same size with other roots, and forks.
//!
//! Cases: `CAIRN_HISTORY_CASES` (default 1,000) for the main property, a quarter of it for the
//! forgery properties. `CAIRN_UPDATE_GOLDEN=1` rewrites the golden files.

mod common;

use cairn_proof::history::{
    completed_by, consistency_path_len, inclusion_path_len, leaf_hash, node_hash,
    prove_consistency_from, prove_inclusion_from, root_from_inclusion, root_from_nodes, root_of,
    DIGEST_BYTES, EMPTY_ROOT, HISTORY_LEAF_BYTES, PATH_HASHES_MAX, SIZE_MAX,
};
use cairn_proof::reference::MemHistory;
use cairn_proof::{
    verify_consistency, verify_inclusion, ConsistencyProof, Digest, Hash, HistoryDecodeError,
    HistoryLeaf, HistoryProveError, HistoryVerifyError, InclusionProof,
};
use proptest::prelude::*;

use common::{check_golden, hex, sha};

fn cases() -> u32 {
    std::env::var("CAIRN_HISTORY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn h(s: &str) -> Hash {
    unhex(s).try_into().unwrap()
}

/// Leaf `i` of the tree named by `salt`: distinct for every `i` (its version is `i`).
fn leaf(i: u64, salt: u8) -> Hash {
    HistoryLeaf {
        version: i,
        ledger_root: [salt; 32],
        meta: [(i % 251) as u8; 32],
    }
    .hash()
}

fn make_tree(n: u64, salt: u8) -> (MemHistory, Vec<Hash>) {
    let leaves: Vec<Hash> = (0..n).map(|i| leaf(i, salt)).collect();
    (MemHistory::from_leaf_hashes(leaves.iter().copied()), leaves)
}

/// `PATH(m, D[n])` and `SUBPROOF(m, D[n], b)` of RFC 9162 §2.1.3.1 and §2.1.4.1, written
/// directly over slices with [`root_of`] (O(n) per proof): the definition the reference tree's
/// cached subtrees must agree with.
fn naive_path(m: usize, leaves: &[Hash]) -> Vec<Hash> {
    let n = leaves.len();
    if n <= 1 {
        return Vec::new();
    }
    let k = largest_power_of_two_below(n);
    let mut out;
    if m < k {
        out = naive_path(m, &leaves[..k]);
        out.push(root_of(&leaves[k..]));
    } else {
        out = naive_path(m - k, &leaves[k..]);
        out.push(root_of(&leaves[..k]));
    }
    out
}

fn largest_power_of_two_below(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

fn naive_subproof(m: usize, leaves: &[Hash], whole: bool) -> Vec<Hash> {
    let n = leaves.len();
    if m == n {
        return if whole {
            Vec::new()
        } else {
            vec![root_of(leaves)]
        };
    }
    let k = largest_power_of_two_below(n);
    let mut out;
    if m <= k {
        out = naive_subproof(m, &leaves[..k], whole);
        out.push(root_of(&leaves[k..]));
    } else {
        out = naive_subproof(m - k, &leaves[k..], false);
        out.push(root_of(&leaves[..k]));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Known answers.

#[test]
fn roots_computed_by_hand() {
    let data: [&[u8]; 5] = [b"a", b"b", b"", b"\x00\x01", b"commit 5"];
    let l: Vec<Hash> = data.iter().map(|d| sha(&[&[0], d])).collect();
    let n = |a: Hash, b: Hash| sha(&[&[1], &a, &b]);
    let expected = [
        (0, sha(&[])),
        (1, l[0]),
        (2, n(l[0], l[1])),
        (3, n(n(l[0], l[1]), l[2])),
        (5, n(n(n(l[0], l[1]), n(l[2], l[3])), l[4])),
    ];
    assert_eq!(
        hex(&expected[0].1),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(EMPTY_ROOT, expected[0].1);
    let leaves: Vec<Hash> = data.iter().map(|d| leaf_hash(d)).collect();
    assert_eq!(leaves, l);
    let tree = MemHistory::from_leaf_hashes(leaves.iter().copied());
    for (size, root) in expected {
        assert_eq!(root_of(&leaves[..size]), root, "root_of, {size} leaves");
        assert_eq!(
            tree.digest_at(size as u64),
            Ok(Digest {
                size: size as u64,
                root
            }),
            "MemHistory, {size} leaves"
        );
    }
    assert_eq!(MemHistory::new().digest(), Digest::EMPTY);
    // A leaf's data is the 73-byte encoding, hashed with the leaf prefix.
    let commit = HistoryLeaf {
        version: 5,
        ledger_root: [0xaa; 32],
        meta: [0xbb; 32],
    };
    let mut data = vec![1u8, 0, 0, 0, 0, 0, 0, 0, 5];
    data.extend_from_slice(&[0xaa; 32]);
    data.extend_from_slice(&[0xbb; 32]);
    assert_eq!(commit.encode().to_vec(), data);
    assert_eq!(commit.hash(), sha(&[&[0], &data]));
}

/// The RFC 6962 test vectors (certificate-transparency's reference data, also in
/// transparency-dev/merkle `testonly/constants.go`): eight leaves, the roots of their prefixes,
/// and some inclusion and consistency paths. Only the data is taken; the proofs are made and
/// verified here by this crate.
#[test]
fn rfc6962_test_vectors() {
    let data: Vec<Vec<u8>> = [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
    .iter()
    .map(|s| unhex(s))
    .collect();
    let roots = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];
    let leaves: Vec<Hash> = data.iter().map(|d| leaf_hash(d)).collect();
    let tree = MemHistory::from_leaf_hashes(leaves.iter().copied());
    for (i, root) in roots.iter().enumerate() {
        let size = i as u64 + 1;
        assert_eq!(hex(&root_of(&leaves[..=i])), *root, "size {size}");
        assert_eq!(tree.digest_at(size).unwrap().root, h(root), "size {size}");
    }
    let inclusion: [(u64, u64, &[&str]); 7] = [
        (0, 1, &[]),
        (
            0,
            2,
            &["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"],
        ),
        (
            1,
            2,
            &["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"],
        ),
        (
            2,
            3,
            &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
        ),
        (
            1,
            5,
            &[
                "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
        (
            0,
            8,
            &[
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            5,
            8,
            &[
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
    ];
    for (index, size, path) in inclusion {
        let path: Vec<Hash> = path.iter().map(|s| h(s)).collect();
        let proof = tree.prove_inclusion(index, size).unwrap();
        assert_eq!(proof.path, path, "inclusion ({index}, {size})");
        let digest = tree.digest_at(size).unwrap();
        assert_eq!(
            verify_inclusion(&leaves[index as usize], &proof, &digest),
            Ok(())
        );
    }
    let consistency: [(u64, u64, &[&str]); 4] = [
        (1, 1, &[]),
        (
            1,
            8,
            &[
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            6,
            8,
            &[
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
        (
            2,
            5,
            &[
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
    ];
    for (old, new, path) in consistency {
        let path: Vec<Hash> = path.iter().map(|s| h(s)).collect();
        let proof = tree.prove_consistency(old, new).unwrap();
        assert_eq!(proof.path, path, "consistency ({old}, {new})");
        let (a, b) = (tree.digest_at(old).unwrap(), tree.digest_at(new).unwrap());
        assert_eq!(verify_consistency(&a, &b, &proof), Ok(()));
    }
}

// ---------------------------------------------------------------------------------------------
// Golden files.

/// The golden tree: 11 commits, versions 1 to 11, each committing to `SHA-256("ledger root i")`
/// and `SHA-256("meta i")`.
fn golden_leaves() -> Vec<HistoryLeaf> {
    (1..=11u64)
        .map(|v| HistoryLeaf {
            version: v,
            ledger_root: sha(&[format!("ledger root {v}").as_bytes()]),
            meta: sha(&[format!("meta {v}").as_bytes()]),
        })
        .collect()
}

/// `history-v1-leaf.bin` (leaf 6's data), `history-v1-digest.bin` (the 11-leaf tree),
/// `history-v1-inclusion.bin` (leaf index 6 in it) and `history-v1-consistency.bin` (from its
/// first 7 leaves to all 11).
#[test]
fn history_v1_golden() {
    let leaves = golden_leaves();
    let tree = MemHistory::from_leaf_hashes(leaves.iter().map(HistoryLeaf::hash));
    let digest = tree.digest();
    let old = tree.digest_at(7).unwrap();

    let golden = check_golden("history-v1-leaf.bin", &leaves[6].encode());
    assert_eq!(HistoryLeaf::decode(&golden), Ok(leaves[6]));

    let golden = check_golden("history-v1-digest.bin", &digest.encode());
    assert_eq!(golden.len(), DIGEST_BYTES);
    assert_eq!(Digest::decode(&golden), Ok(digest));
    let hashes: Vec<Hash> = leaves.iter().map(HistoryLeaf::hash).collect();
    assert_eq!(digest.root, root_of(&hashes));

    let inclusion = tree.prove_inclusion(6, 11).unwrap();
    let golden = check_golden("history-v1-inclusion.bin", &inclusion.encode());
    let decoded = InclusionProof::decode(&golden).unwrap();
    assert_eq!(decoded, inclusion);
    assert_eq!(golden.len(), 25 + 32 * 4);
    assert_eq!(
        verify_inclusion(&leaves[6].hash(), &decoded, &digest),
        Ok(())
    );
    assert!(verify_inclusion(&leaves[5].hash(), &decoded, &digest).is_err());

    let consistency = tree.prove_consistency(7, 11).unwrap();
    let golden = check_golden("history-v1-consistency.bin", &consistency.encode());
    let decoded = ConsistencyProof::decode(&golden).unwrap();
    assert_eq!(decoded, consistency);
    assert_eq!(golden.len(), 25 + 32 * consistency_path_len(7, 11));
    assert_eq!(verify_consistency(&old, &digest, &decoded), Ok(()));
    assert!(verify_consistency(&tree.digest_at(6).unwrap(), &digest, &decoded).is_err());
}

// ---------------------------------------------------------------------------------------------
// Honest proofs.

/// Every tree up to 128 leaves, exhaustively: the reference tree's digests and proofs are the
/// definition's (computed over slices), byte for byte, and they verify.
/// A tree stored as a durable one stores it (each leaf hash with the nodes its append
/// completes, `completed_by`) proves exactly what the reference proves, reading only nodes it
/// stored, and a read error ends a proof with that error.
#[test]
fn proofs_from_stored_nodes_match_the_reference() {
    use std::collections::HashMap;
    let (tree, leaves) = make_tree(100, 3);
    let mut stored: HashMap<(u32, u64), Hash> = HashMap::new();
    for (index, leaf) in leaves.iter().enumerate() {
        stored.insert((0, index as u64), *leaf);
        for (level, i) in completed_by(index as u64) {
            let left = stored[&(level - 1, 2 * i)];
            let right = stored[&(level - 1, 2 * i + 1)];
            assert!(stored
                .insert((level, i), node_hash(&left, &right))
                .is_none());
        }
    }
    assert_eq!(stored.len(), 2 * 100 - 100u64.count_ones() as usize);
    let len = leaves.len() as u64;
    let mut node = |level: u32, i: u64| -> Result<Hash, HistoryProveError> {
        Ok(*stored
            .get(&(level, i))
            .expect("a proof read a node never stored"))
    };
    for size in 0..=len {
        assert_eq!(
            root_from_nodes(len, size, &mut node).unwrap(),
            tree.digest_at(size).unwrap().root
        );
        for index in 0..size {
            let proof = prove_inclusion_from(len, index, size, &mut node).unwrap();
            assert_eq!(proof, tree.prove_inclusion(index, size).unwrap());
            let root = root_from_inclusion(&leaves[index as usize], index, size, &proof.path);
            assert_eq!(root, Ok(tree.digest_at(size).unwrap().root));
        }
        for old in 1..=size {
            let proof = prove_consistency_from(len, old, size, &mut node).unwrap();
            assert_eq!(proof, tree.prove_consistency(old, size).unwrap());
        }
    }
    assert_eq!(
        prove_inclusion_from(len, 0, len + 1, &mut node),
        Err(HistoryProveError::SizeBeyondTree { size: len + 1, len })
    );
    #[derive(Debug, PartialEq)]
    enum ReadError {
        Tree(HistoryProveError),
        Disk,
    }
    impl From<HistoryProveError> for ReadError {
        fn from(e: HistoryProveError) -> Self {
            ReadError::Tree(e)
        }
    }
    let mut failing = |_: u32, _: u64| -> Result<Hash, ReadError> { Err(ReadError::Disk) };
    assert_eq!(
        prove_inclusion_from(len, 5, len, &mut failing),
        Err(ReadError::Disk)
    );
    assert_eq!(
        prove_consistency_from(len, 0, len, &mut failing),
        Err(ReadError::Tree(HistoryProveError::EmptyOld))
    );
}

#[test]
fn every_proof_of_every_small_tree() {
    let (tree, leaves) = make_tree(128, 7);
    for size in 1..=128usize {
        let digest = tree.digest_at(size as u64).unwrap();
        assert_eq!(digest.root, root_of(&leaves[..size]));
        for index in 0..size {
            let proof = tree.prove_inclusion(index as u64, size as u64).unwrap();
            assert_eq!(
                proof.path,
                naive_path(index, &leaves[..size]),
                "{index}/{size}"
            );
            assert_eq!(
                proof.path.len(),
                inclusion_path_len(index as u64, size as u64)
            );
            assert_eq!(verify_inclusion(&leaves[index], &proof, &digest), Ok(()));
        }
        for old in 1..=size {
            let proof = tree.prove_consistency(old as u64, size as u64).unwrap();
            assert_eq!(
                proof.path,
                naive_subproof(old, &leaves[..size], true),
                "{old}/{size}"
            );
            let old_digest = tree.digest_at(old as u64).unwrap();
            assert_eq!(verify_consistency(&old_digest, &digest, &proof), Ok(()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The main property: in a tree of up to 300 leaves, every leaf's inclusion proof against
    /// the whole tree, and proofs for random earlier sizes and random pairs of sizes, verify,
    /// round-trip through their encodings, and stay within the RFC's length bounds.
    #[test]
    fn honest_proofs_verify(
        n in 1u64..=300,
        salt in any::<u8>(),
        pairs in prop::collection::vec((any::<u64>(), any::<u64>()), 16),
    ) {
        let (tree, leaves) = make_tree(n, salt);
        let digest = tree.digest();
        prop_assert_eq!(digest.root, root_of(&leaves));
        let bound = |size: u64| 64 - (size - 1).leading_zeros() as usize; // ⌈log₂ size⌉
        for index in 0..n {
            let proof = tree.prove_inclusion(index, n).unwrap();
            prop_assert!(proof.path.len() <= bound(n));
            let bytes = proof.encode();
            prop_assert_eq!(bytes.len(), proof.encoded_len());
            let decoded = InclusionProof::decode(&bytes).unwrap();
            prop_assert_eq!(&decoded, &proof);
            prop_assert_eq!(verify_inclusion(&leaves[index as usize], &decoded, &digest), Ok(()));
        }
        for old in 1..=n {
            let proof = tree.prove_consistency(old, n).unwrap();
            prop_assert!(proof.path.len() <= bound(n) + 1);
            let bytes = proof.encode();
            prop_assert_eq!(bytes.len(), proof.encoded_len());
            let decoded = ConsistencyProof::decode(&bytes).unwrap();
            prop_assert_eq!(&decoded, &proof);
            let old_digest = tree.digest_at(old).unwrap();
            prop_assert_eq!(verify_consistency(&old_digest, &digest, &decoded), Ok(()));
        }
        for (a, b) in pairs {
            // An inclusion proof in an earlier tree, and a consistency proof between two.
            let size = 1 + a % n;
            let index = b % size;
            let d = tree.digest_at(size).unwrap();
            prop_assert_eq!(d.root, root_of(&leaves[..size as usize]));
            prop_assert_eq!(Digest::decode(&d.encode()), Ok(d));
            let proof = tree.prove_inclusion(index, size).unwrap();
            prop_assert_eq!(verify_inclusion(&leaves[index as usize], &proof, &d), Ok(()));
            let old = 1 + b % size;
            let proof = tree.prove_consistency(old, size).unwrap();
            let old_digest = tree.digest_at(old).unwrap();
            prop_assert_eq!(verify_consistency(&old_digest, &d, &proof), Ok(()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Forgeries.

/// Whether decoding `bytes` as an inclusion proof and verifying it accepts.
fn inclusion_accepts(bytes: &[u8], leaf: &Hash, digest: &Digest) -> bool {
    InclusionProof::decode(bytes).is_ok_and(|p| verify_inclusion(leaf, &p, digest).is_ok())
}

fn consistency_accepts(bytes: &[u8], old: &Digest, new: &Digest) -> bool {
    ConsistencyProof::decode(bytes).is_ok_and(|p| verify_consistency(old, new, &p).is_ok())
}

/// The path edits a forger might try: each pair of entries swapped, a hash added at either
/// end, the first or last dropped, one entry replaced by another entry or by the root.
fn edited_paths(path: &[Hash], root: &Hash) -> Vec<Vec<Hash>> {
    let mut out = Vec::new();
    for i in 0..path.len() {
        for j in i + 1..path.len() {
            if path[i] != path[j] {
                let mut p = path.to_vec();
                p.swap(i, j);
                out.push(p);
            }
        }
        let mut p = path.to_vec();
        p[i] = *root;
        out.push(p);
        let mut p = path.to_vec();
        p[i] = path[(i + 1) % path.len()];
        if p != path {
            out.push(p);
        }
    }
    for extra in [*root, [0; 32], path.first().copied().unwrap_or([1; 32])] {
        let mut p = path.to_vec();
        p.push(extra);
        out.push(p);
        let mut p = vec![extra];
        p.extend_from_slice(path);
        out.push(p);
    }
    if !path.is_empty() {
        out.push(path[1..].to_vec());
        out.push(path[..path.len() - 1].to_vec());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 4, ..ProptestConfig::default() })]

    /// A forged inclusion proof is refused: every flipped bit and truncation of the encoding,
    /// every other index and leaf, other sizes, another root, edited paths.
    #[test]
    fn forged_inclusion_proofs_are_refused(
        n in 1u64..=300,
        salt in any::<u8>(),
        a in any::<u64>(),
        b in any::<u64>(),
    ) {
        let (tree, leaves) = make_tree(n, salt);
        let size = 1 + a % n;
        let index = b % size;
        let digest = tree.digest_at(size).unwrap();
        let leaf = leaves[index as usize];
        let proof = tree.prove_inclusion(index, size).unwrap();
        let bytes = proof.encode();
        prop_assert!(inclusion_accepts(&bytes, &leaf, &digest));
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(!inclusion_accepts(&flipped, &leaf, &digest), "bit {} accepted", bit);
        }
        for len in 0..bytes.len() {
            prop_assert!(InclusionProof::decode(&bytes[..len]).is_err(), "truncated to {}", len);
        }
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert_eq!(InclusionProof::decode(&longer), Err(HistoryDecodeError::TrailingBytes(1)));
        // Every other index, every other leaf (all leaves are distinct).
        for other in 0..size {
            if other != index {
                let moved = InclusionProof { index: other, ..proof.clone() };
                prop_assert!(verify_inclusion(&leaf, &moved, &digest).is_err());
                prop_assert!(verify_inclusion(&leaves[other as usize], &proof, &digest).is_err());
            }
        }
        prop_assert!(verify_inclusion(&leaf_hash(b"not a leaf"), &proof, &digest).is_err());
        // The same path claimed for other sizes, against the honest digests of those sizes. (Not
        // against this digest relabelled with another size: a digest is trusted as a whole, and
        // the same path can fit two sizes, see `edge_rules`.)
        for other in [size.wrapping_sub(1), size + 1, size * 2, size / 2, index + 1] {
            if other == size || other == 0 || other > n {
                continue;
            }
            let resized = InclusionProof { size: other, ..proof.clone() };
            let d = tree.digest_at(other).unwrap();
            prop_assert!(verify_inclusion(&leaf, &resized, &d).is_err(), "size {}", other);
            prop_assert!(
                matches!(verify_inclusion(&leaf, &proof, &d), Err(HistoryVerifyError::SizeMismatch { .. })),
                "size mismatch"
            );
        }
        // Another root: a flipped bit, the empty root, another tree's.
        for root in [{ let mut r = digest.root; r[31] ^= 1; r }, EMPTY_ROOT, make_tree(size, salt ^ 1).0.digest().root] {
            let d = Digest { size, root };
            prop_assert_eq!(verify_inclusion(&leaf, &proof, &d), Err(HistoryVerifyError::RootMismatch));
        }
        for path in edited_paths(&proof.path, &digest.root) {
            let edited = InclusionProof { path, ..proof.clone() };
            prop_assert!(verify_inclusion(&leaf, &edited, &digest).is_err(), "{:?}", edited);
        }
    }

    /// A forged consistency proof is refused: every flipped bit and truncation of the encoding,
    /// other sizes, other old or new roots, edited paths.
    #[test]
    fn forged_consistency_proofs_are_refused(
        n in 1u64..=300,
        salt in any::<u8>(),
        a in any::<u64>(),
        b in any::<u64>(),
    ) {
        let (tree, _) = make_tree(n, salt);
        let new_size = 1 + a % n;
        let old_size = 1 + b % new_size;
        let old = tree.digest_at(old_size).unwrap();
        let new = tree.digest_at(new_size).unwrap();
        let proof = tree.prove_consistency(old_size, new_size).unwrap();
        let bytes = proof.encode();
        prop_assert!(consistency_accepts(&bytes, &old, &new));
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(!consistency_accepts(&flipped, &old, &new), "bit {} accepted", bit);
        }
        for len in 0..bytes.len() {
            prop_assert!(ConsistencyProof::decode(&bytes[..len]).is_err(), "truncated to {}", len);
        }
        // Other sizes with the honest digests of those sizes: the path is the wrong one.
        for (o, w) in [
            (old_size + 1, new_size), (old_size.wrapping_sub(1), new_size),
            (old_size, new_size + 1), (old_size, new_size.wrapping_sub(1)), (old_size * 2, new_size),
        ] {
            if (o, w) == (old_size, new_size) || o == 0 || w == 0 || o > w || w > n {
                continue;
            }
            let (od, nd) = (tree.digest_at(o).unwrap(), tree.digest_at(w).unwrap());
            let resized = ConsistencyProof { old_size: o, new_size: w, ..proof.clone() };
            if resized.path != tree.prove_consistency(o, w).unwrap().path {
                prop_assert!(verify_consistency(&od, &nd, &resized).is_err(), "({}, {})", o, w);
            }
            prop_assert!(verify_consistency(&od, &nd, &proof).is_err());
        }
        // Other roots: flipped bits, the empty root, the roots of another tree.
        let other = make_tree(new_size, salt ^ 1).0;
        let flip = |mut r: Hash| { r[0] ^= 0x80; r };
        for root in [flip(old.root), EMPTY_ROOT, other.digest_at(old_size).unwrap().root] {
            let forged = Digest { size: old_size, root };
            prop_assert!(verify_consistency(&forged, &new, &proof).is_err());
        }
        for root in [flip(new.root), EMPTY_ROOT, other.digest().root] {
            let forged = Digest { size: new_size, root };
            prop_assert!(verify_consistency(&old, &forged, &proof).is_err());
        }
        for path in edited_paths(&proof.path, &new.root) {
            let edited = ConsistencyProof { path, ..proof.clone() };
            prop_assert!(verify_consistency(&old, &new, &edited).is_err(), "{:?}", edited);
        }
    }

    /// A fork: a tree that differs from another in one leaf `j`. A digest of one and a digest
    /// of the other are shown consistent exactly when the old one ends before the fork
    /// (`m <= j`, so that both trees share those `m` leaves); two digests of the same size with
    /// different roots never are, whatever the proof.
    #[test]
    fn forks_are_never_consistent(
        n in 2u64..=300,
        salt in any::<u8>(),
        j in any::<u64>(),
    ) {
        let (a, mut leaves) = make_tree(n, salt);
        let j = j % n;
        leaves[j as usize] = leaf_hash(b"the forked leaf");
        let b = MemHistory::from_leaf_hashes(leaves.iter().copied());
        for m in 1..=n {
            let (am, bm) = (a.digest_at(m).unwrap(), b.digest_at(m).unwrap());
            let (an, bn) = (a.digest(), b.digest());
            let (pa, pb) = (a.prove_consistency(m, n).unwrap(), b.prove_consistency(m, n).unwrap());
            let shared = m <= j;
            prop_assert_eq!(verify_consistency(&am, &bn, &pb).is_ok(), shared, "m {}", m);
            prop_assert_eq!(verify_consistency(&bm, &an, &pa).is_ok(), shared, "m {}", m);
            prop_assert!(verify_consistency(&am, &bn, &pa).is_err(), "m {}", m);
            prop_assert!(verify_consistency(&bm, &an, &pb).is_err(), "m {}", m);
            if !shared {
                // Same size, different roots: refused with any of the proofs at hand.
                prop_assert_ne!(am.root, bm.root);
                for p in [&pa, &pb, &a.prove_consistency(m, m).unwrap()] {
                    let p = ConsistencyProof { old_size: m, new_size: m, ..p.clone() };
                    prop_assert!(verify_consistency(&am, &bm, &p).is_err());
                    prop_assert!(verify_consistency(&bm, &am, &p).is_err());
                }
            }
        }
    }

    /// The decoders are total and canonical: arbitrary bytes, and valid encodings with a few
    /// bytes changed, give a value that re-encodes to the same bytes or a typed error.
    #[test]
    fn decoders_are_total_and_canonical(
        junk in prop::collection::vec(any::<u8>(), 0..400),
        edits in prop::collection::vec((any::<u16>(), any::<u8>()), 0..4),
        n in 1u64..40,
        pick in any::<u8>(),
    ) {
        let (tree, _) = make_tree(n, pick);
        let valid = [
            tree.digest().encode().to_vec(),
            tree.prove_inclusion(pick as u64 % n, n).unwrap().encode(),
            tree.prove_consistency(1 + pick as u64 % n, n).unwrap().encode(),
        ];
        let mut inputs = vec![junk];
        for v in valid {
            let mut e = v.clone();
            for &(at, byte) in &edits {
                let i = at as usize % e.len();
                e[i] = byte;
            }
            inputs.push(e);
            inputs.push(v);
        }
        for bytes in &inputs {
            if let Ok(d) = Digest::decode(bytes) {
                prop_assert_eq!(&d.encode()[..], &bytes[..]);
            }
            if let Ok(p) = InclusionProof::decode(bytes) {
                prop_assert!(p.path.len() <= PATH_HASHES_MAX && p.size <= SIZE_MAX);
                prop_assert_eq!(&p.encode(), bytes);
            }
            if let Ok(p) = ConsistencyProof::decode(bytes) {
                prop_assert!(p.path.len() <= PATH_HASHES_MAX && p.new_size <= SIZE_MAX);
                prop_assert_eq!(&p.encode(), bytes);
            }
            if let Ok(l) = HistoryLeaf::decode(bytes) {
                prop_assert_eq!(&l.encode()[..], &bytes[..]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Edge rules and typed errors.

#[test]
fn edge_rules() {
    let (tree, leaves) = make_tree(6, 1);
    let digest = tree.digest();
    let empty_path = |index, size| InclusionProof {
        index,
        size,
        path: vec![],
    };
    // Inclusion: the index must be below the size; the empty tree holds nothing.
    assert_eq!(
        verify_inclusion(&leaves[0], &empty_path(0, 0), &Digest::EMPTY),
        Err(HistoryVerifyError::IndexBeyondSize { index: 0, size: 0 })
    );
    let mut p = tree.prove_inclusion(5, 6).unwrap();
    p.index = 6;
    assert_eq!(
        verify_inclusion(&leaves[5], &p, &digest),
        Err(HistoryVerifyError::IndexBeyondSize { index: 6, size: 6 })
    );
    // One leaf: the empty path, and the root is the leaf hash.
    let one = tree.digest_at(1).unwrap();
    assert_eq!(one.root, leaves[0]);
    assert_eq!(
        verify_inclusion(&leaves[0], &empty_path(0, 1), &one),
        Ok(())
    );
    assert_eq!(
        verify_inclusion(&leaves[1], &empty_path(0, 1), &one),
        Err(HistoryVerifyError::RootMismatch)
    );
    // An exact length, named in the error.
    let mut p = tree.prove_inclusion(2, 6).unwrap();
    p.path.push([0; 32]);
    assert_eq!(
        verify_inclusion(&leaves[2], &p, &digest),
        Err(HistoryVerifyError::PathLength {
            expected: 3,
            actual: 4
        })
    );

    // Consistency: not from the empty tree, not backwards, equal sizes only with equal roots.
    let c = |old_size, new_size, path: Vec<Hash>| ConsistencyProof {
        old_size,
        new_size,
        path,
    };
    assert_eq!(
        verify_consistency(&Digest::EMPTY, &digest, &c(0, 6, vec![])),
        Err(HistoryVerifyError::EmptyOld)
    );
    assert_eq!(
        verify_consistency(&Digest::EMPTY, &Digest::EMPTY, &c(0, 0, vec![])),
        Err(HistoryVerifyError::EmptyOld)
    );
    let three = tree.digest_at(3).unwrap();
    assert_eq!(
        verify_consistency(&digest, &three, &c(6, 3, vec![])),
        Err(HistoryVerifyError::OldAfterNew {
            old_size: 6,
            new_size: 3
        })
    );
    assert_eq!(
        verify_consistency(&digest, &digest, &c(6, 6, vec![])),
        Ok(())
    );
    assert_eq!(
        verify_consistency(&digest, &digest, &c(6, 6, vec![digest.root])),
        Err(HistoryVerifyError::PathLength {
            expected: 0,
            actual: 1
        })
    );
    let other = Digest {
        size: 6,
        root: three.root,
    };
    assert_eq!(
        verify_consistency(&digest, &other, &c(6, 6, vec![])),
        Err(HistoryVerifyError::RootMismatch)
    );
    // An empty path between different sizes (the RFC's step 1).
    assert_eq!(
        verify_consistency(&three, &digest, &c(3, 6, vec![])),
        Err(HistoryVerifyError::PathLength {
            expected: 4,
            actual: 0
        })
    );
    // Sizes must match the digests'.
    let p = tree.prove_consistency(3, 6).unwrap();
    assert!(matches!(
        verify_consistency(&tree.digest_at(2).unwrap(), &digest, &p),
        Err(HistoryVerifyError::SizeMismatch {
            what: "old tree",
            ..
        })
    ));
    assert_eq!(verify_consistency(&three, &digest, &p), Ok(()));
    // Sizes beyond 2^63.
    let huge = Digest {
        size: SIZE_MAX + 1,
        root: digest.root,
    };
    assert_eq!(
        verify_inclusion(&leaves[0], &empty_path(0, SIZE_MAX + 1), &huge),
        Err(HistoryVerifyError::SizeTooLarge { size: SIZE_MAX + 1 })
    );

    // Why a digest's size must be authenticated with its root: leaf 0's path in a tree of 16
    // leaves (four right siblings) also fits a tree of 15, so it verifies against a made-up
    // digest `(15, root of 16)`. No honest tree of 15 leaves has that root; a client that takes
    // sizes from a signed or verified digest is never shown it (docs/format/history.md).
    let (sixteen, leaves16) = make_tree(16, 2);
    let p = sixteen.prove_inclusion(0, 16).unwrap();
    let made_up = Digest {
        size: 15,
        root: sixteen.digest().root,
    };
    let resized = InclusionProof { size: 15, ..p };
    assert_eq!(verify_inclusion(&leaves16[0], &resized, &made_up), Ok(()));
    assert!(verify_inclusion(&leaves16[0], &resized, &sixteen.digest_at(15).unwrap()).is_err());

    // The reference tree refuses what it cannot prove.
    assert_eq!(
        tree.prove_inclusion(6, 6),
        Err(HistoryProveError::IndexBeyondSize { index: 6, size: 6 })
    );
    assert_eq!(
        tree.prove_inclusion(0, 7),
        Err(HistoryProveError::SizeBeyondTree { size: 7, len: 6 })
    );
    assert_eq!(
        tree.prove_consistency(0, 6),
        Err(HistoryProveError::EmptyOld)
    );
    assert_eq!(
        tree.prove_consistency(4, 3),
        Err(HistoryProveError::OldAfterNew {
            old_size: 4,
            new_size: 3
        })
    );
    assert_eq!(
        tree.prove_consistency(4, 4).unwrap().path,
        Vec::<Hash>::new()
    );
    assert_eq!(tree.leaf_hash(5), Some(leaves[5]));
    assert_eq!(tree.leaf_hash(6), None);
}

#[test]
fn junk_is_refused_with_typed_errors() {
    let (tree, _) = make_tree(11, 3);
    let inclusion = tree.prove_inclusion(3, 11).unwrap().encode();
    let digest = tree.digest().encode();
    assert!(matches!(
        InclusionProof::decode(b""),
        Err(HistoryDecodeError::Truncated { what: "magic", .. })
    ));
    assert_eq!(
        InclusionProof::decode(b"CRNP\x01\x01\x02\x00"),
        Err(HistoryDecodeError::BadMagic)
    );
    let with = |at: usize, byte: u8| {
        let mut b = inclusion.clone();
        b[at] = byte;
        InclusionProof::decode(&b)
    };
    assert_eq!(with(4, 2), Err(HistoryDecodeError::UnsupportedVersion(2)));
    assert_eq!(with(5, 2), Err(HistoryDecodeError::UnknownHashKind(2)));
    assert_eq!(with(7, 1), Err(HistoryDecodeError::Reserved));
    assert_eq!(
        with(6, 3),
        Err(HistoryDecodeError::WrongType {
            expected: "inclusion proof",
            found: 3
        })
    );
    assert!(matches!(
        InclusionProof::decode(&digest),
        Err(HistoryDecodeError::WrongType { found: 1, .. })
    ));
    assert!(matches!(
        ConsistencyProof::decode(&inclusion),
        Err(HistoryDecodeError::WrongType { found: 2, .. })
    ));
    // A size above 2^63, in a proof and in a digest.
    assert_eq!(
        with(16, 0x80),
        Err(HistoryDecodeError::SizeTooLarge {
            what: "tree size",
            size: (1 << 63) | 11
        })
    );
    let mut d = digest;
    d[8] = 0xff;
    assert!(matches!(
        Digest::decode(&d),
        Err(HistoryDecodeError::SizeTooLarge { .. })
    ));
    // A path of 65 hashes or more is refused before it is read; a count beyond the bytes too.
    let mut long = inclusion[..24].to_vec();
    long.push(65);
    long.extend(std::iter::repeat_n(0u8, 65 * 32));
    assert_eq!(
        InclusionProof::decode(&long),
        Err(HistoryDecodeError::PathTooLong(65))
    );
    let mut b = inclusion[..24].to_vec();
    b.push(64);
    assert!(matches!(
        InclusionProof::decode(&b),
        Err(HistoryDecodeError::Truncated {
            what: "path hashes",
            needed: 2048
        })
    ));
    // A proof whose path is too long to decode encodes with a count the decoder refuses.
    let too_long = InclusionProof {
        index: 0,
        size: 1,
        path: vec![[0; 32]; 300],
    };
    assert_eq!(
        InclusionProof::decode(&too_long.encode()),
        Err(HistoryDecodeError::PathTooLong(255))
    );
    assert_eq!(
        HistoryLeaf::decode(&[1; HISTORY_LEAF_BYTES])
            .unwrap()
            .version,
        0x0101_0101_0101_0101
    );
}

// ---------------------------------------------------------------------------------------------
// Sizes and speed.

/// Encoded sizes at a million leaves, from the path lengths the verifier demands: an inclusion
/// proof is 25 bytes plus 32 per hash, at most 20 hashes (665 bytes); a consistency proof at
/// most 21 (697 bytes), 20 or fewer when the old size is a power of two.
#[test]
fn proof_sizes_at_a_million_leaves() {
    let n = 1_000_000u64;
    let inclusion: Vec<usize> = (0..n).map(|i| inclusion_path_len(i, n)).collect();
    let (min, max) = (
        *inclusion.iter().min().unwrap(),
        *inclusion.iter().max().unwrap(),
    );
    let mean = inclusion.iter().sum::<usize>() as f64 / n as f64;
    let consistency: Vec<usize> = (1..n).map(|m| consistency_path_len(m, n)).collect();
    let c_max = *consistency.iter().max().unwrap();
    let c_mean = consistency.iter().sum::<usize>() as f64 / (n - 1) as f64;
    println!(
        "1M leaves: inclusion {min}..={max} hashes (mean {mean:.2}), {}..={} bytes; \
         consistency up to {c_max} hashes (mean {c_mean:.2}), up to {} bytes",
        25 + 32 * min,
        25 + 32 * max,
        25 + 32 * c_max
    );
    assert_eq!(max, 20);
    assert!(c_max <= 21);
    let proof = InclusionProof {
        index: 0,
        size: n,
        path: vec![[0; 32]; max],
    };
    assert_eq!(proof.encoded_len(), 665);
    assert_eq!(proof.encode().len(), 665);
}

/// A rough rate of `verify_inclusion` over a million leaves on one core (not a benchmark):
/// `cargo test --release -p cairn-proof --test history -- --ignored --nocapture`.
#[test]
#[ignore]
fn verify_inclusion_rate_at_a_million_leaves() {
    let n = 1_000_000u64;
    let started = std::time::Instant::now();
    let (tree, leaves) = make_tree(n, 9);
    let digest = tree.digest();
    println!("built 1M leaves in {:?}", started.elapsed());
    let proofs: Vec<InclusionProof> = (0..1000u64)
        .map(|i| tree.prove_inclusion(i * 997 % n, n).unwrap())
        .collect();
    let started = std::time::Instant::now();
    let mut verified = 0u64;
    while started.elapsed() < std::time::Duration::from_secs(2) {
        for p in &proofs {
            assert!(verify_inclusion(&leaves[p.index as usize], p, &digest).is_ok());
            verified += 1;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let hashes_started = std::time::Instant::now();
    let mut h = digest.root;
    for _ in 0..1_000_000 {
        h = cairn_proof::history::node_hash(&h, &digest.root);
    }
    println!(
        "node_hash: {:.3} µs each ({})",
        hashes_started.elapsed().as_secs_f64(),
        h[0]
    );
    println!(
        "verify_inclusion at 1M leaves: {verified} in {secs:.2} s = {:.0} per second ({:.2} µs each)",
        verified as f64 / secs,
        secs * 1e6 / verified as f64
    );
}

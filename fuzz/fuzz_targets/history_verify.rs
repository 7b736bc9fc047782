//! History-tree verification (`cairn_proof::history`): a proof the verifiers accept never
//! establishes a false claim, and the decoders are total and canonical.
//!
//! Honest trees are built from the input's first byte (`salt`): 256 leaves whose data depend on
//! it, and a fork of them that differs in the one leaf `salt · 37 mod 256`. Each is built once,
//! when first used. An input is:
//!
//! | Bytes | Meaning |
//! |---|---|
//! | 1 | `salt`: the tree and its fork |
//! | 1 | mode: its low two bits pick inclusion (0), consistency (1) or digest (2, 3); bit 2: the old digest (consistency) comes from the fork; bit 3: the new digest (consistency) or the digest (inclusion) comes from the fork; bit 4: the claimed leaf (inclusion) comes from the fork |
//! | 1 | `sel`: the index of the claimed leaf (inclusion), or of the leaf proved against the decoded digest (digest) |
//! | the rest | an encoded inclusion proof, consistency proof or digest, by the mode |
//!
//! - Inclusion: the proof is checked against the honest digest of its size (a size beyond 256 is
//!   checked against nothing). If accepted, the claimed leaf must really sit at the proof's index
//!   in that tree, and the proof must be the tree's own (a path is unique).
//! - Consistency: the proof is checked against the honest digests of its two sizes. If accepted,
//!   `0 < old <= new` and the two trees must share their first `old` leaves, and the proof must be
//!   the new tree's own.
//! - Digest: the decoded digest is checked as the old side of the tree's honest consistency proof
//!   to all 256 leaves, and against the tree's honest inclusion proof of leaf `sel`; if either
//!   accepts, the digest must be the tree's own at its size.
//!
//! The whole input and the rest also go to all four decoders (digest, both proofs, leaf): nothing
//! may panic, and whatever decodes re-encodes to the same bytes.
//!
//! Seeds: with `CAIRN_FUZZ_SEEDS=<dir>` in the environment, the target first writes inputs with
//! true proofs and digests there (`fuzz/run-all.sh` does so for the corpus), checking that each
//! is accepted.
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use std::sync::OnceLock;

use cairn_proof::history::HistoryLeaf;
use cairn_proof::reference::MemHistory;
use cairn_proof::{
    verify_consistency, verify_inclusion, ConsistencyProof, Digest, Hash, InclusionProof,
};
use libfuzzer_sys::fuzz_target;

const LEAVES: u64 = 256;

/// A tree and its fork.
struct Pair {
    tree: MemHistory,
    fork: MemHistory,
    /// The index of the one leaf where they differ.
    forked_at: u64,
}

fn leaf(salt: u8, i: u64, forked: bool) -> Hash {
    HistoryLeaf {
        version: i,
        ledger_root: [salt; 32],
        meta: [u8::from(forked); 32],
    }
    .hash()
}

fn pair(salt: u8) -> &'static Pair {
    static PAIRS: [OnceLock<Pair>; 256] = [const { OnceLock::new() }; 256];
    PAIRS[salt as usize].get_or_init(|| {
        let forked_at = (salt as u64 * 37) % LEAVES;
        let tree = MemHistory::from_leaf_hashes((0..LEAVES).map(|i| leaf(salt, i, false)));
        let fork = MemHistory::from_leaf_hashes((0..LEAVES).map(|i| leaf(salt, i, i == forked_at)));
        Pair {
            tree,
            fork,
            forked_at,
        }
    })
}

impl Pair {
    fn pick(&self, fork: bool) -> &MemHistory {
        if fork {
            &self.fork
        } else {
            &self.tree
        }
    }

    /// Whether the trees `a` and `b` (each the tree or the fork) share their first `n` leaves.
    fn share_prefix(&self, a: bool, b: bool, n: u64) -> bool {
        a == b || n <= self.forked_at
    }
}

/// Every decoder on `bytes`: no panic, and whatever decodes re-encodes to the same bytes.
fn decoders(bytes: &[u8]) {
    if let Ok(d) = Digest::decode(bytes) {
        assert_eq!(&d.encode()[..], bytes, "a digest re-encodes to other bytes");
    }
    if let Ok(p) = InclusionProof::decode(bytes) {
        assert_eq!(
            p.encode(),
            bytes,
            "an inclusion proof re-encodes to other bytes"
        );
        assert_eq!(p.encoded_len(), bytes.len());
    }
    if let Ok(p) = ConsistencyProof::decode(bytes) {
        assert_eq!(
            p.encode(),
            bytes,
            "a consistency proof re-encodes to other bytes"
        );
        assert_eq!(p.encoded_len(), bytes.len());
    }
    if let Ok(l) = HistoryLeaf::decode(bytes) {
        assert_eq!(&l.encode()[..], bytes, "a leaf re-encodes to other bytes");
    }
}

/// Runs one input; returns whether a verifier accepted it (its claim then checked true).
fn run(data: &[u8]) -> bool {
    decoders(data);
    let [salt, mode, sel, rest @ ..] = data else {
        return false;
    };
    decoders(rest);
    let p = pair(*salt);
    match mode & 3 {
        0 => inclusion(p, *mode, *sel, rest),
        1 => consistency(p, *mode, rest),
        _ => digest(p, *sel, rest),
    }
}

fn inclusion(p: &Pair, mode: u8, sel: u8, bytes: &[u8]) -> bool {
    let Ok(proof) = InclusionProof::decode(bytes) else {
        return false;
    };
    let (digest_fork, leaf_fork) = (mode & 8 != 0, mode & 16 != 0);
    let tree = p.pick(digest_fork);
    let Ok(digest) = tree.digest_at(proof.size) else {
        return false;
    };
    let claimed = p.pick(leaf_fork).leaf_hash(sel as u64).expect("256 leaves");
    if verify_inclusion(&claimed, &proof, &digest).is_err() {
        return false;
    }
    assert!(
        proof.index < proof.size,
        "accepted an index beyond the size"
    );
    assert_eq!(
        tree.leaf_hash(proof.index),
        Some(claimed),
        "accepted a leaf at an index that holds another"
    );
    assert_eq!(
        tree.prove_inclusion(proof.index, proof.size).as_ref(),
        Ok(&proof),
        "accepted a path other than the tree's own"
    );
    true
}

fn consistency(p: &Pair, mode: u8, bytes: &[u8]) -> bool {
    let Ok(proof) = ConsistencyProof::decode(bytes) else {
        return false;
    };
    let (old_fork, new_fork) = (mode & 4 != 0, mode & 8 != 0);
    let (Ok(old), Ok(new)) = (
        p.pick(old_fork).digest_at(proof.old_size),
        p.pick(new_fork).digest_at(proof.new_size),
    ) else {
        return false;
    };
    if verify_consistency(&old, &new, &proof).is_err() {
        return false;
    }
    assert!(
        0 < old.size && old.size <= new.size,
        "accepted sizes {} and {}",
        old.size,
        new.size
    );
    assert!(
        p.share_prefix(old_fork, new_fork, old.size),
        "accepted a fork as consistent: old size {}, new size {}, fork at {}",
        old.size,
        new.size,
        p.forked_at
    );
    assert_eq!(
        p.pick(new_fork)
            .prove_consistency(old.size, new.size)
            .as_ref(),
        Ok(&proof),
        "accepted a path other than the tree's own"
    );
    true
}

fn digest(p: &Pair, sel: u8, bytes: &[u8]) -> bool {
    let Ok(d) = Digest::decode(bytes) else {
        return false;
    };
    let Ok(honest) = p.tree.digest_at(d.size) else {
        return false;
    };
    let mut accepted = false;
    if let Ok(proof) = p.tree.prove_consistency(d.size, LEAVES) {
        if verify_consistency(&d, &p.tree.digest(), &proof).is_ok() {
            assert_eq!(d, honest, "a made-up old digest was shown consistent");
            accepted = true;
        }
    }
    if d.size > 0 {
        let index = sel as u64 % d.size;
        let proof = p.tree.prove_inclusion(index, d.size).expect("index < size");
        let leaf = p.tree.leaf_hash(index).expect("256 leaves");
        if verify_inclusion(&leaf, &proof, &d).is_ok() {
            assert_eq!(
                d, honest,
                "an inclusion proof verified against a made-up digest"
            );
            accepted = true;
        }
    }
    accepted
}

/// A small deterministic generator (SplitMix64) for the seeds.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Inputs with true proofs and digests for a few salts, each checked to be accepted.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng(0x6361_6972_6e2d_6869);
    let mut out = Vec::new();
    for salt in [0u8, 1, 7, 42, 255] {
        let p = pair(salt);
        for k in 0..8 {
            // Inclusion: a leaf of the tree or of the fork, against the same one.
            let fork = k % 2 == 1;
            let size = 1 + rng.below(LEAVES);
            let index = rng.below(size);
            let mode = if fork { 8 | 16 } else { 0 };
            let mut input = vec![salt, mode, index as u8];
            input.extend(p.pick(fork).prove_inclusion(index, size).unwrap().encode());
            out.push((format!("seed-{salt}-inclusion-{k}"), input));

            // Consistency: within one tree, or from the fork's prefix before the forked leaf.
            let new_size = 1 + rng.below(LEAVES);
            let (old_fork, new_fork, old_size) = if k % 2 == 0 || p.forked_at == 0 {
                (fork, fork, 1 + rng.below(new_size))
            } else {
                (true, false, 1 + rng.below(new_size.min(p.forked_at)))
            };
            let mode = 1 | if old_fork { 4 } else { 0 } | if new_fork { 8 } else { 0 };
            let mut input = vec![salt, mode, 0];
            input.extend(
                p.pick(new_fork)
                    .prove_consistency(old_size, new_size)
                    .unwrap()
                    .encode(),
            );
            out.push((format!("seed-{salt}-consistency-{k}"), input));

            // Digest: the tree's own at some size.
            let size = 1 + rng.below(LEAVES);
            let mut input = vec![salt, 2, rng.below(256) as u8];
            input.extend(p.tree.digest_at(size).unwrap().encode());
            out.push((format!("seed-{salt}-digest-{k}"), input));
        }
    }
    for (name, input) in &out {
        assert!(run(input), "seed {name} is refused");
    }
    out
}

fuzz_target!(
    init: seeds::write_if_asked(seeds),
    |data: &[u8]| {
        run(data);
    }
);

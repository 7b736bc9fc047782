//! Proof verification (`cairn-proof`): a proof the verifier accepts never establishes a false
//! claim, and the proof decoders are total and canonical.
//!
//! Known sets (0, 1, 2, 7 and 64 keys, SHA-256 and BLAKE3) are built once, with their roots,
//! reference tries and top-level witnesses. An input is:
//!
//! | Bytes | Meaning |
//! |---|---|
//! | 1 | the set (`b & 7`, modulo 5), the kind (`b & 8`: BLAKE3) and the form (`b & 16`: compact) |
//! | 1, compact form only | the witness's levels, `1 + b % 6` |
//! | 1 | the number of claims, `b % 9` |
//! | 2 per claim | the key (an index among the set's keys and four absent keys); what is claimed (`b % 4`: absent, present with the true value and blob, present with a wrong value, present with the true value and a wrong blob hash) |
//! | the rest | the proof, in the chosen form |
//!
//! If `verify` accepts, every claim must be true of the set; anything else is a panic. The
//! whole input and the proof bytes also go to both decoders: whatever decodes re-encodes to the
//! same bytes, and an accepted full proof hashes to the set's root and its compact form verifies
//! too. A full proof accepted as a witness of the set's top must never let a false claim pass.
//!
//! Seeds: with `CAIRN_FUZZ_SEEDS=<dir>` in the environment, the target first writes true
//! proofs of random key subsets of every set there (`fuzz/run-all.sh` does so for the corpus),
//! checking that each is accepted.
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use std::sync::OnceLock;

use cairn_proof::reference::MemTrie;
use cairn_proof::{
    verify, Claim, CompactProof, Expect, Hash, HashKind, Proof, Root, TopWitness, ZERO,
};
use libfuzzer_sys::fuzz_target;

const SIZES: [usize; 5] = [0, 1, 2, 7, 64];
const KINDS: [HashKind; 2] = [HashKind::Sha256, HashKind::Blake3];
const ABSENT: usize = 4;
const LEVELS_MAX: u8 = 6;
const CLAIMS_MAX: usize = 8;

/// A key, its value and its blob.
type Entry = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

struct Set {
    kind: HashKind,
    /// The set's keys, then [`ABSENT`] keys it does not hold.
    keys: Vec<Vec<u8>>,
    /// For each key of the set: its value and blob hash.
    values: Vec<(Vec<u8>, Option<Hash>)>,
    root: Root,
    trie: MemTrie,
    /// Witnesses of the top 1..=[`LEVELS_MAX`] levels.
    witnesses: Vec<TopWitness>,
}

impl Set {
    fn new(size: usize, kind: HashKind) -> Set {
        let mut keys: Vec<Vec<u8>> = (0..size).map(|i| format!("key-{i}").into_bytes()).collect();
        let entries: Vec<Entry> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                // Some values empty, some keys with a blob (one of them empty).
                let value = if i % 5 == 3 {
                    Vec::new()
                } else {
                    format!("value-{i}").into_bytes()
                };
                let blob = (i % 3 == 0).then(|| format!("blob-{i}").into_bytes()[..i % 7].to_vec());
                (k.clone(), value, blob)
            })
            .collect();
        let trie = MemTrie::new(
            kind,
            entries
                .iter()
                .map(|(k, v, b)| (&k[..], &v[..], b.as_deref())),
        );
        let root = trie.root();
        let witnesses = (1..=LEVELS_MAX)
            .map(|l| TopWitness::new(&root, &trie.top(l), l).expect("the trie's top is a witness"))
            .collect();
        let values = entries
            .into_iter()
            .map(|(_, v, b)| (v, b.map(|b| kind.blob_hash(&b))))
            .collect();
        keys.extend((0..ABSENT).map(|i| format!("absent-{i}").into_bytes()));
        Set {
            kind,
            keys,
            values,
            root,
            trie,
            witnesses,
        }
    }

    /// Whether `claim` is true of the set.
    fn holds(&self, claim: &Claim<'_>) -> bool {
        let entry = self.keys[..self.values.len()]
            .iter()
            .position(|k| k == claim.key)
            .map(|i| &self.values[i]);
        match (entry, claim.expect) {
            (None, Expect::Absent) => true,
            (Some(_), Expect::Absent) | (None, Expect::Present { .. }) => false,
            (Some((v, b)), Expect::Present { value, blob_hash }) => {
                // A claimed blob hash of ZERO is the same as no blob (docs/format/trie.md).
                value == &v[..] && blob_hash.unwrap_or(ZERO) == b.unwrap_or(ZERO)
            }
        }
    }
}

fn sets() -> &'static [Set] {
    static SETS: OnceLock<Vec<Set>> = OnceLock::new();
    SETS.get_or_init(|| {
        KINDS
            .iter()
            .flat_map(|&kind| SIZES.iter().map(move |&n| Set::new(n, kind)))
            .collect()
    })
}

/// What a claim in the input asserts, before it borrows its key and value.
struct OwnedClaim {
    key: usize,
    absent: bool,
    value: Vec<u8>,
    blob_hash: Option<Hash>,
}

/// The claim of `mode` (`% 4`) about key `key` of `set`.
fn owned_claim(set: &Set, key: usize, mode: u8) -> OwnedClaim {
    let (value, blob) = set
        .values
        .get(key)
        .cloned()
        .unwrap_or((b"v".to_vec(), None));
    let mut claim = OwnedClaim {
        key,
        absent: false,
        value,
        blob_hash: blob,
    };
    match mode % 4 {
        0 => claim.absent = true,
        1 => {}
        2 => claim.value.push(b'!'),
        _ => {
            claim.blob_hash = match blob {
                Some(mut h) if mode & 4 == 0 => {
                    h[31] ^= 1;
                    Some(h)
                }
                Some(_) => None,
                None => Some(set.kind.blob_hash(b"not the blob")),
            }
        }
    }
    claim
}

fn claims_of<'a>(set: &'a Set, owned: &'a [OwnedClaim]) -> Vec<Claim<'a>> {
    owned
        .iter()
        .map(|c| Claim {
            key: &set.keys[c.key],
            expect: if c.absent {
                Expect::Absent
            } else {
                Expect::Present {
                    value: &c.value,
                    blob_hash: c.blob_hash,
                }
            },
        })
        .collect()
}

/// Decodes `bytes` both ways; whatever decodes must re-encode to the same bytes.
fn decoders(bytes: &[u8]) -> Option<Proof> {
    if let Ok(p) = CompactProof::decode(bytes) {
        assert_eq!(
            p.encode(),
            bytes,
            "a compact proof re-encodes to other bytes"
        );
        assert_eq!(p.encoded_len(), bytes.len());
    }
    let p = Proof::decode(bytes).ok()?;
    assert_eq!(p.encode(), bytes, "a full proof re-encodes to other bytes");
    assert_eq!(p.encoded_len(), bytes.len());
    let _ = p.root();
    let c = p.compact(1 + bytes.len() as u8 % 40);
    assert_eq!(
        CompactProof::decode(&c.encode()),
        Ok(c),
        "a compacted proof does not round-trip"
    );
    Some(p)
}

/// Runs one input; returns whether `verify` accepted it (with its claims, all true).
fn run(data: &[u8]) -> bool {
    decoders(data);
    let [head, rest @ ..] = data else {
        return false;
    };
    let set = &sets()[(*head as usize & 8) / 8 * SIZES.len() + (*head as usize & 7) % SIZES.len()];
    let compact = head & 16 != 0;
    let (levels, rest) = match (compact, rest) {
        (false, _) => (0, rest),
        (true, [l, rest @ ..]) => (1 + l % LEVELS_MAX, rest),
        (true, []) => return false,
    };
    let [count, claim_bytes @ ..] = rest else {
        return false;
    };
    let mut rest: &[u8] = claim_bytes;
    let mut owned = Vec::new();
    for _ in 0..*count as usize % (CLAIMS_MAX + 1) {
        let [key, mode, tail @ ..] = rest else {
            return false;
        };
        owned.push(owned_claim(set, *key as usize % set.keys.len(), *mode));
        rest = tail;
    }
    let claims = claims_of(set, &owned);
    let proof = rest;
    let full = decoders(proof);

    let accepted = if compact {
        let witness = &set.witnesses[levels as usize - 1];
        CompactProof::decode(proof).is_ok_and(|p| witness.verify(&p, &claims).is_ok())
    } else {
        let accepted = verify(&set.root, proof, &claims).is_ok();
        if accepted {
            let p = full.as_ref().expect("an accepted proof decodes");
            assert_eq!(
                p.root(),
                Ok(set.root),
                "an accepted proof hashes to another root"
            );
            for (l, witness) in (1..).zip(&set.witnesses) {
                assert_eq!(
                    witness.verify(&p.compact(l), &claims),
                    Ok(()),
                    "the compact form (levels {l}) of an accepted proof is refused"
                );
            }
        }
        accepted
    };
    if accepted {
        for (i, claim) in claims.iter().enumerate() {
            assert!(set.holds(claim), "accepted a false claim {i}: {claim:?}");
        }
    }

    // The proof bytes as a witness of the top: if the verifier takes it, the claims' true
    // compact proof must still be refused when a claim is false.
    if let Some(top) = &full {
        for l in 1..=LEVELS_MAX {
            let Ok(witness) = TopWitness::new(&set.root, top, l) else {
                continue;
            };
            let keys: Vec<&[u8]> = claims.iter().map(|c| c.key).collect();
            let p = set.trie.prove(&keys).compact(l);
            if witness.verify(&p, &claims).is_ok() {
                for (i, claim) in claims.iter().enumerate() {
                    assert!(
                        set.holds(claim),
                        "a fuzzed witness accepted a false claim {i}: {claim:?}"
                    );
                }
            }
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

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Inputs with true proofs of random subsets of each set's keys (and the sets' tops as full
/// proofs with no claims), each checked to be accepted.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng(0x6361_6972_6e2d_7072);
    let mut out = Vec::new();
    for (s, set) in sets().iter().enumerate() {
        let head = (s / SIZES.len() * 8 + s % SIZES.len()) as u8;
        for variant in 0..(2 + LEVELS_MAX as usize) {
            let compact = variant >= 2;
            let levels = if compact { variant as u8 - 1 } else { 0 };
            let count = 1 + rng.below(CLAIMS_MAX);
            let keys: Vec<usize> = (0..count).map(|_| rng.below(set.keys.len())).collect();
            let mut input = vec![head | if compact { 16 } else { 0 }];
            if compact {
                input.push(levels - 1);
            }
            input.push(count as u8);
            for &k in &keys {
                let present = k < set.values.len();
                input.extend_from_slice(&[k as u8, if present { 1 } else { 0 }]);
            }
            let key_bytes: Vec<&[u8]> = keys.iter().map(|&k| &set.keys[k][..]).collect();
            let proof = set.trie.prove(&key_bytes);
            input.extend(if compact {
                proof.compact(levels).encode()
            } else {
                proof.encode()
            });
            out.push((format!("seed-{s}-{variant}"), input));
        }
        for levels in 1..=LEVELS_MAX {
            let mut input = vec![head, 0];
            input.extend(set.trie.top(levels).encode());
            out.push((format!("seed-{s}-top-{levels}"), input));
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

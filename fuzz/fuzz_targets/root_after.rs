//! The root after updates (`cairn-proof`'s `root_after`): never a panic, and a root it gives
//! from a proof of a known root is always the true root after the updates.
//!
//! Known sets (0, 1, 2, 7 and 64 keys, SHA-256 and BLAKE3) are built once, with their roots.
//! An input is:
//!
//! | Bytes | Meaning |
//! |---|---|
//! | 1 | the set (`b & 7`, modulo 5) and the kind (`b & 8`: BLAKE3) |
//! | 1 | the number of updates, `b % 17` |
//! | 3 per update | the key (an index among the set's keys and eight absent keys); the write (`b % 5`: delete, put a new value, put the value the key holds, put a value and a blob, put a value with a blob hash of `ZERO`); a byte of the new value |
//! | the rest | the proof, full form |
//!
//! `root_after` runs against the set's root: if it gives a root, that root must be the one the
//! reference trie has after the updates (the last write of a key counting); anything else is a
//! panic. A proof that decodes also runs against its own root (`Proof::root`), which any
//! well-shaped proof passes, so that arbitrary trees reach the update logic: any result but a
//! panic is fine there.
//!
//! Seeds: with `CAIRN_FUZZ_SEEDS=<dir>` in the environment, the target first writes inputs
//! with random updates and true proofs of their keys (`MemTrie::prove_updates`, which every
//! batch can use, and `MemTrie::prove`, which deletes may not) into it, checking that the first
//! kind gives the true root.
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use cairn_proof::reference::MemTrie;
use cairn_proof::{root_after, HashKind, Proof, Root, Update, ZERO};
use libfuzzer_sys::fuzz_target;

const SIZES: [usize; 5] = [0, 1, 2, 7, 64];
const KINDS: [HashKind; 2] = [HashKind::Sha256, HashKind::Blake3];
const ABSENT: usize = 8;
const UPDATES_MAX: usize = 16;

/// Key → (value, blob).
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

struct Set {
    kind: HashKind,
    /// The set's keys, then [`ABSENT`] keys it does not hold.
    keys: Vec<Vec<u8>>,
    model: Model,
    trie: MemTrie,
    root: Root,
}

impl Set {
    fn new(size: usize, kind: HashKind) -> Set {
        let mut keys: Vec<Vec<u8>> = (0..size).map(|i| format!("key-{i}").into_bytes()).collect();
        let model: Model = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let blob = (i % 3 == 0).then(|| vec![i as u8; i % 5]);
                (k.clone(), (format!("value-{i}").into_bytes(), blob))
            })
            .collect();
        let trie = trie(kind, &model);
        let root = trie.root();
        keys.extend((0..ABSENT).map(|i| format!("absent-{i}").into_bytes()));
        Set {
            kind,
            keys,
            model,
            trie,
            root,
        }
    }
}

fn trie(kind: HashKind, m: &Model) -> MemTrie {
    MemTrie::new(
        kind,
        m.iter().map(|(k, (v, b))| (&k[..], &v[..], b.as_deref())),
    )
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

/// A write before it borrows its key and value.
#[derive(Debug)]
struct Write {
    /// The key's index in the set's keys.
    key: usize,
    /// The new value and blob, or `None` for a delete.
    entry: Option<(Vec<u8>, Option<Vec<u8>>)>,
    /// No blob, given as the blob hash `ZERO` rather than as `None`.
    zero_blob_hash: bool,
}

fn write_of(set: &Set, key: usize, mode: u8, byte: u8) -> Write {
    let held = set.model.get(&set.keys[key]).cloned();
    let fresh = vec![b'n', byte];
    let entry = match mode % 5 {
        0 => None,
        1 | 4 => Some((fresh, None)),
        2 => Some(held.unwrap_or((fresh, None))),
        _ => Some((fresh, Some(vec![byte; byte as usize % 4]))),
    };
    Write {
        key,
        entry,
        zero_blob_hash: mode % 5 == 4,
    }
}

fn updates<'a>(set: &'a Set, writes: &'a [Write]) -> Vec<Update<'a>> {
    writes
        .iter()
        .map(|w| {
            let key = &set.keys[w.key][..];
            match &w.entry {
                None => Update::delete(key),
                Some((v, None)) if w.zero_blob_hash => Update::put_with_blob(key, v, ZERO),
                Some((v, None)) => Update::put(key, v),
                Some((v, Some(b))) => Update::put_with_blob(key, v, set.kind.blob_hash(b)),
            }
        })
        .collect()
}

/// The true root after the writes.
fn true_root(set: &Set, writes: &[Write]) -> Root {
    let mut m = set.model.clone();
    for w in writes {
        let key = set.keys[w.key].clone();
        match &w.entry {
            None => m.remove(&key),
            Some(e) => m.insert(key, e.clone()),
        };
    }
    trie(set.kind, &m).root()
}

/// Runs one input; returns whether `root_after` gave a root against the set's root.
fn run(data: &[u8]) -> bool {
    let [head, count, rest @ ..] = data else {
        return false;
    };
    let set = &sets()[(*head as usize & 8) / 8 * SIZES.len() + (*head as usize & 7) % SIZES.len()];
    let mut rest: &[u8] = rest;
    let mut writes = Vec::new();
    for _ in 0..*count as usize % (UPDATES_MAX + 1) {
        let [key, mode, byte, tail @ ..] = rest else {
            return false;
        };
        writes.push(write_of(set, *key as usize % set.keys.len(), *mode, *byte));
        rest = tail;
    }
    let ups = updates(set, &writes);
    let proof = rest;

    if let Ok(p) = Proof::decode(proof) {
        if let Ok(own) = p.root() {
            let _ = p.root_after(&own, &ups);
        }
    }
    match root_after(&set.root, proof, &ups) {
        Ok(root) => {
            assert_eq!(
                root,
                true_root(set, &writes),
                "a proof of the set's root gave a wrong root after {writes:?}"
            );
            true
        }
        Err(_) => false,
    }
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

/// Inputs with random writes and true proofs of their keys, both kinds of proof.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng(0x726f_6f74_2d61_6674);
    let mut out = Vec::new();
    for (s, set) in sets().iter().enumerate() {
        let head = (s / SIZES.len() * 8 + s % SIZES.len()) as u8;
        for variant in 0..8 {
            let count = 1 + rng.below(UPDATES_MAX);
            let mut input = vec![head, count as u8];
            let mut writes = Vec::new();
            for _ in 0..count {
                let (key, mode, byte) = (rng.below(set.keys.len()), rng.below(5), rng.next());
                input.extend_from_slice(&[key as u8, mode as u8, byte as u8]);
                writes.push(write_of(set, key, mode as u8, byte as u8));
            }
            let ups = updates(set, &writes);
            let opened = variant % 2 == 0;
            let proof = match opened {
                true => set.trie.prove_updates(&ups),
                false => set
                    .trie
                    .prove(&ups.iter().map(|u| u.key).collect::<Vec<_>>()),
            };
            input.extend(proof.encode());
            let accepted = run(&input);
            assert!(!opened || accepted, "seed {s}-{variant} is refused");
            out.push((format!("seed-{s}-{variant}"), input));
        }
    }
    out
}

fuzz_target!(
    init: seeds::write_if_asked(seeds),
    |data: &[u8]| {
        run(data);
    }
);

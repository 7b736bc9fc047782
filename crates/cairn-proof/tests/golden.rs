//! Golden files: the trie's roots and the proof format are pinned by files under
//! `testdata/golden/` (`docs/format/trie.md`, `docs/format/proof.md`), so that a change to
//! either is deliberate: a new version, never an edit of this one.
//!
//! `CAIRN_UPDATE_GOLDEN=1` rewrites the files instead of comparing (the engine's convention,
//! `crates/cairn/src/golden.rs`).

mod common;

use cairn_proof::hash::common_prefix_bits;
use cairn_proof::reference::{streamed_root, MemTrie};
use cairn_proof::{root_of, verify, Claim, CompactProof, HashKind, Leaf, Proof, Root, TopWitness};
use common::{check_golden, hex};

const KINDS: [(HashKind, &str); 2] = [(HashKind::Sha256, "sha256"), (HashKind::Blake3, "blake3")];

type Entry = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

fn entry(key: &str, value: &str, blob: Option<&[u8]>) -> Entry {
    (key.into(), value.into(), blob.map(<[u8]>::to_vec))
}

/// The sets of `roots-v1.txt`, by name. The `shared-prefix-*` sets hold two keys whose key paths
/// share their first 32 bits or more under the kind they are named after (found by search), so
/// that the trie holds a long chain of internal nodes with one empty child.
fn root_sets() -> Vec<(&'static str, Vec<Entry>)> {
    vec![
        ("empty", vec![]),
        ("one", vec![entry("alice", "10", None)]),
        (
            "two",
            vec![entry("alice", "10", None), entry("bob", "20", None)],
        ),
        (
            "ten",
            (0..10)
                .map(|i| entry(&format!("key-{i}"), &format!("value-{i}"), None))
                .collect(),
        ),
        (
            "blob",
            vec![
                entry("alice", "10", None),
                entry(
                    "photo",
                    "image/jpeg",
                    Some(b"\xff\xd8\xff\xe0 not really a jpeg"),
                ),
            ],
        ),
        (
            "empty-value",
            vec![entry("alice", "10", None), entry("nothing", "", None)],
        ),
        ("empty-blob", vec![entry("k", "v", Some(b""))]),
        (
            "shared-prefix-sha256",
            vec![
                entry("alice", "10", None),
                entry("shared-40232", "a", None),
                entry("shared-99824", "b", None),
            ],
        ),
        (
            "shared-prefix-blake3",
            vec![
                entry("alice", "10", None),
                entry("shared-13126", "a", None),
                entry("shared-62046", "b", None),
            ],
        ),
    ]
}

fn as_refs(entries: &[Entry]) -> impl Iterator<Item = (&[u8], &[u8], Option<&[u8]>)> {
    entries
        .iter()
        .map(|(k, v, b)| (&k[..], &v[..], b.as_deref()))
}

fn quoted(bytes: &[u8]) -> String {
    format!("\"{}\"", bytes.escape_ascii())
}

/// `roots-v1.txt` as it should be, from `root_of`, after checking that the streaming builder
/// and the reference trie give the same roots.
fn roots_file() -> String {
    let mut out = String::from(
        "# Cairn trie v1: golden state roots (docs/format/trie.md).\n\
         # Written by crates/cairn-proof/tests/golden.rs (CAIRN_UPDATE_GOLDEN=1 rewrites it).\n\
         # Lines `<kind> <set> <root>`: kind `sha256` or `blake3`, the root in lowercase hex.\n\
         # The sets: `key=value` or `key=value+blob`, bytes quoted with Rust's escape_ascii.\n",
    );
    let sets = root_sets();
    for (name, entries) in &sets {
        let listed: Vec<String> = entries
            .iter()
            .map(|(k, v, b)| {
                let blob = b
                    .as_ref()
                    .map_or(String::new(), |b| format!("+{}", quoted(b)));
                format!(" {}={}{blob}", quoted(k), quoted(v))
            })
            .collect();
        out.push_str(&format!("#   {name}:{}\n", listed.concat()));
    }
    for (kind, kind_name) in KINDS {
        for (name, entries) in &sets {
            let root = root_of(kind, as_refs(entries));
            let mut leaves: Vec<Leaf> = as_refs(entries)
                .map(|(k, v, b)| Leaf::new(kind, k, v, b))
                .collect();
            leaves.sort();
            assert_eq!(
                streamed_root(kind, &leaves),
                root,
                "{kind_name} {name}: RootBuilder"
            );
            let trie = MemTrie::new(kind, as_refs(entries));
            assert_eq!(trie.root().hash, root, "{kind_name} {name}: MemTrie");
            out.push_str(&format!("{kind_name} {name} {}\n", hex(&root)));
        }
    }
    out
}

#[test]
fn roots_v1() {
    let expected = roots_file();
    // Line by line first, for a message naming the set that changed.
    let path = format!(
        "{}/testdata/golden/roots-v1.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    if std::env::var_os("CAIRN_UPDATE_GOLDEN").is_none_or(|v| v != "1") {
        let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let lines = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_owned)
                .collect()
        };
        let (want, have) = (lines(&expected), lines(&golden));
        for (w, h) in want.iter().zip(&have) {
            assert_eq!(
                w, h,
                "a root differs from {path}: the trie's definition changed"
            );
        }
        assert_eq!(want.len(), have.len(), "{path}: another list of sets");
    }
    check_golden("roots-v1.txt", expected.as_bytes());
}

#[test]
fn shared_prefix_sets_share_long_prefixes() {
    for (kind, a, b) in [
        (HashKind::Sha256, "shared-40232", "shared-99824"),
        (HashKind::Blake3, "shared-13126", "shared-62046"),
    ] {
        let shared = common_prefix_bits(&kind.key_path(a.as_bytes()), &kind.key_path(b.as_bytes()));
        assert!(shared >= 32, "{kind:?}: {shared} bits");
    }
}

/// The set of the golden proofs: 20 keys, a few with a blob, one with an empty value.
fn proof_set() -> Vec<Entry> {
    (0..20)
        .map(|i| {
            let value = if i == 7 {
                String::new()
            } else {
                format!("value-{i}")
            };
            let blob = (i % 6 == 0).then(|| format!("blob of key {i}").into_bytes());
            (format!("key-{i}").into_bytes(), value.into_bytes(), blob)
        })
        .collect()
}

/// The keys the golden proofs cover: present ones (one with a blob, one with an empty value)
/// and absent ones.
const PROVED: [&str; 6] = ["key-3", "key-6", "key-7", "key-15", "absent-1", "absent-2"];

/// The true claims about [`PROVED`] in the proof set.
fn true_claims(kind: HashKind, set: &[Entry]) -> Vec<Claim<'_>> {
    PROVED
        .iter()
        .map(
            |key| match set.iter().find(|(k, _, _)| k == key.as_bytes()) {
                None => Claim::absent(key.as_bytes()),
                Some((k, v, None)) => Claim::present(k, v),
                Some((k, v, Some(b))) => Claim::present_with_blob(k, v, kind.blob_hash(b)),
            },
        )
        .collect()
}

const COMPACT_LEVELS: u8 = 2;

#[test]
fn proofs_v1() {
    let set = proof_set();
    for (kind, file) in [
        (HashKind::Sha256, "proof-v1-full.bin"),
        (HashKind::Blake3, "proof-v1-blake3.bin"),
    ] {
        let root = Root {
            kind,
            hash: root_of(kind, as_refs(&set)),
        };
        let trie = MemTrie::new(kind, as_refs(&set));
        assert_eq!(trie.root(), root);
        let proof = trie.prove(&PROVED);
        let golden = check_golden(file, &proof.encode());
        let claims = true_claims(kind, &set);
        assert_eq!(Proof::decode(&golden), Ok(proof.clone()), "{file}");
        assert_eq!(verify(&root, &golden, &claims), Ok(()), "{file}");
        // A false claim about a covered key is still refused.
        let mut false_claims = claims.clone();
        false_claims[0] = Claim::absent(PROVED[0].as_bytes());
        assert!(verify(&root, &golden, &false_claims).is_err(), "{file}");

        if kind == HashKind::Sha256 {
            let file = "proof-v1-compact.bin";
            let compact = proof.compact(COMPACT_LEVELS);
            let golden = check_golden(file, &compact.encode());
            let decoded = CompactProof::decode(&golden).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(decoded, compact, "{file}");
            let witness = TopWitness::new(&root, &trie.top(COMPACT_LEVELS), COMPACT_LEVELS)
                .expect("the trie's top is a witness");
            assert_eq!(witness.verify(&decoded, &claims), Ok(()), "{file}");
            assert!(witness.verify(&decoded, &false_claims).is_err(), "{file}");
        }
    }
}

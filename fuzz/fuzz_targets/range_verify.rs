//! Range answers over ordered tables (`cairn_proof::range`): an answer the verifiers accept is
//! always the honest answer for the range it names, and the link and answer decoders are total
//! and canonical.
//!
//! The honest ledger is built once, when first used: three ordered tables through four
//! versions, `accounts` (SHA-256: key `k<k>`, `k` 0 to 9, present at version `v` when
//! `(k + v) % 3 != 0`, holding `<k>.<v>` for even `k` and `<k>` for odd), `empty` (SHA-256, no
//! key ever) and `orders` (BLAKE3: `k<k>` present when `(k + v)` is even, holding `o<k>`). Each
//! key stores its link, the empty key the head, as `cairn-ledger` stores them. Version `v`'s leaf
//! commits to its ledger root and a hash of `commit v`; the client trusts the digest of all four
//! versions. The range asked for is `[k2, k6]`. An input is:
//!
//! | Bytes | Meaning |
//! |---|---|
//! | 1 | the table the answer is checked against: `b % 4`, `accounts`, `empty`, `orders`, or `nonesuch` (no such table) |
//! | 1 | the receipt: `b % 3`, the honest receipt for `[k2, k6]` of that table (of `accounts` for `nonesuch`), a *wide* receipt proving every key `k0` to `k9`, the head and some absent keys (`a`, `k`, `k2a`, `k6~`, `l`) in every table, or the wide receipt without the checked table's section; bit 7: of version 2 rather than 4 |
//! | the rest | an encoded range answer |
//!
//! The answer is decoded and checked with `verify_range_at` and `verify_range`. If the first
//! accepts, the table must be one of the ledger's and the answer must be exactly what an honest
//! server answers for its `[lo, hi]` at the receipt's version: for `[k2, k6]` the honest answer
//! itself. (The verifier does not know the range asked for; a client compares `lo` and `hi` with
//! its request.) If the second accepts, the first must too, with the receipt of version 4.
//! Anything else is a panic. The wide receipts let an answer name any key the fuzzer picks
//! among those proved, so that a wrong answer fails on its links, not on a proof that does not
//! cover them.
//!
//! The whole input and the rest also go to both decoders (`Link`, `RangeAnswer`): nothing may
//! panic, and whatever decodes re-encodes to the same bytes.
//!
//! Seeds: with `CAIRN_FUZZ_SEEDS=<dir>` in the environment, the target first writes honest
//! answers there (`fuzz/run-all.sh` does so for the corpus), for the asked range with its honest
//! receipt and for other ranges with the wide one, checking that each is accepted.
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::OnceLock;

use cairn_proof::history::{leaf_hash, HistoryLeaf};
use cairn_proof::ledger::{ledger_path, ledger_root};
use cairn_proof::range::HEAD_KEY;
use cairn_proof::reference::{MemHistory, MemTrie};
use cairn_proof::{
    verify_range, verify_range_at, Digest, HashKind, Link, RangeAnswer, Receipt, ReceiptTable, Root,
};
use libfuzzer_sys::fuzz_target;

const VERSIONS: u64 = 4;
/// The version of the older receipts.
const OLD_VERSION: u64 = 2;
const TABLES: [(&str, HashKind); 3] = [
    ("accounts", HashKind::Sha256),
    ("empty", HashKind::Sha256),
    ("orders", HashKind::Blake3),
];
/// A table name the ledger does not have.
const NO_TABLE: &str = "nonesuch";
const KEYS: u8 = 10;
/// The range asked for.
const LO: &[u8] = b"k2";
const HI: &[u8] = b"k6";
/// Keys no table holds, proved absent by the wide receipts.
const ABSENT: [&[u8]; 5] = [b"a", b"k", b"k2a", b"k6~", b"l"];

/// An ordered table's contents: key → value.
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Receipt kinds, in input order.
const HONEST: usize = 0;
const WIDE: usize = 1;
const WIDE_WITHOUT: usize = 2;

struct Version {
    /// Each table's contents and trie of links, in name order.
    tables: Vec<(Model, MemTrie)>,
    leaf: HistoryLeaf,
}

struct Honest {
    /// Versions 1 to [`VERSIONS`], at index `v - 1`.
    versions: Vec<Version>,
    history: MemHistory,
    /// `receipts[table][kind][old]`: table 3 is [`NO_TABLE`].
    receipts: Vec<[[Receipt; 2]; 3]>,
}

fn key(k: u8) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

/// What table `t` holds at version `v`.
fn contents(v: u64, t: usize) -> Model {
    (0..KEYS)
        .filter_map(|k| {
            let value = match t {
                0 if (u64::from(k) + v) % 3 != 0 => {
                    if k % 2 == 0 {
                        format!("{k}.{v}")
                    } else {
                        format!("{k}")
                    }
                }
                2 if (u64::from(k) + v) % 2 == 0 => format!("o{k}"),
                _ => return None,
            };
            Some((key(k), value.into_bytes()))
        })
        .collect()
}

/// The links an ordered table over `model` stores: the head (if it holds a key), then each
/// key's, as `cairn-ledger` writes them.
fn links(model: &Model) -> Vec<(Vec<u8>, Link)> {
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let head = keys.first().map(|first| {
        let next = Some((*first).clone());
        (HEAD_KEY.to_vec(), Link::Head { next })
    });
    let entries = model.iter().enumerate().map(|(i, (k, v))| {
        let next = keys.get(i + 1).map(|n| (*n).clone());
        let value = v.clone();
        (k.clone(), Link::Entry { value, next })
    });
    head.into_iter().chain(entries).collect()
}

fn trie(kind: HashKind, model: &Model) -> MemTrie {
    let stored: Vec<(Vec<u8>, Vec<u8>)> = links(model)
        .into_iter()
        .map(|(k, link)| (k, link.encode()))
        .collect();
    MemTrie::new(kind, stored.iter().map(|(k, v)| (&k[..], &v[..], None)))
}

/// What an honest server answers for `[lo, hi]` (`lo <= hi`) of a table holding `model`.
fn answer_of(model: &Model, lo: &[u8], hi: &[u8]) -> RangeAnswer {
    let before = model
        .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(lo)))
        .next_back();
    let entries = model
        .range::<[u8], _>((Bound::Included(lo), Bound::Included(hi)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let after = model
        .range::<[u8], _>((Bound::Excluded(hi), Bound::Unbounded))
        .next()
        .map(|(k, _)| k.clone());
    RangeAnswer {
        lo: lo.to_vec(),
        hi: hi.to_vec(),
        before: before.map_or_else(Vec::new, |(k, _)| k.clone()),
        before_value: before.map(|(_, v)| v.clone()),
        entries,
        after,
    }
}

/// Every key a wide receipt proves.
fn wide_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
    keys.push(HEAD_KEY.to_vec());
    keys.extend(ABSENT.iter().map(|k| k.to_vec()));
    keys
}

fn pairs(tables: &[(Model, MemTrie)]) -> Vec<(&'static [u8], Root)> {
    TABLES
        .iter()
        .zip(tables)
        .map(|((name, _), (_, trie))| (name.as_bytes(), trie.root()))
        .collect()
}

/// The receipt of version `v` against the digest of all versions, proving `keys` in each
/// table of `sections` (increasing).
fn receipt(
    versions: &[Version],
    history: &MemHistory,
    v: u64,
    sections: &[(usize, Vec<Vec<u8>>)],
) -> Receipt {
    let version = &versions[v as usize - 1];
    let pairs = pairs(&version.tables);
    let inclusion = history
        .prove_inclusion(v - 1, VERSIONS)
        .expect("a version of the history");
    Receipt {
        version: v,
        meta: version.leaf.meta,
        table_count: TABLES.len() as u32,
        tables: sections
            .iter()
            .map(|(t, keys)| ReceiptTable {
                name: TABLES[*t].0.into(),
                root: version.tables[*t].1.root(),
                index: *t as u32,
                path: ledger_path(&pairs, *t).expect("a table of the ledger"),
                proof: version.tables[*t].1.prove(keys),
            })
            .collect(),
        history_size: inclusion.size,
        history_path: inclusion.path,
    }
}

fn honest() -> &'static Honest {
    static LEDGER: OnceLock<Honest> = OnceLock::new();
    LEDGER.get_or_init(|| {
        let versions: Vec<Version> = (1..=VERSIONS)
            .map(|v| {
                let tables: Vec<(Model, MemTrie)> = TABLES
                    .iter()
                    .enumerate()
                    .map(|(t, (_, kind))| {
                        let model = contents(v, t);
                        let trie = trie(*kind, &model);
                        (model, trie)
                    })
                    .collect();
                let leaf = HistoryLeaf {
                    version: v,
                    ledger_root: ledger_root(&pairs(&tables)).expect("three named tables"),
                    meta: leaf_hash(format!("commit {v}").as_bytes()),
                };
                Version { tables, leaf }
            })
            .collect();
        let history = MemHistory::from_leaf_hashes(versions.iter().map(|v| v.leaf.hash()));
        let receipts = (0..=TABLES.len())
            .map(|t| {
                let kinds = [HONEST, WIDE, WIDE_WITHOUT].map(|kind| {
                    [VERSIONS, OLD_VERSION].map(|v| {
                        let sections: Vec<(usize, Vec<Vec<u8>>)> = match kind {
                            HONEST => {
                                let t = if t < TABLES.len() { t } else { 0 };
                                let model = &versions[v as usize - 1].tables[t].0;
                                vec![(t, answer_of(model, LO, HI).proved_keys())]
                            }
                            _ => (0..TABLES.len())
                                .filter(|&u| kind == WIDE || u != t)
                                .map(|u| (u, wide_keys()))
                                .collect(),
                        };
                        receipt(&versions, &history, v, &sections)
                    })
                });
                kinds
            })
            .collect();
        Honest {
            versions,
            history,
            receipts,
        }
    })
}

/// Both decoders on `bytes`: no panic, and whatever decodes re-encodes to the same bytes.
fn decoders(bytes: &[u8]) -> Option<RangeAnswer> {
    if let Ok(link) = Link::decode(bytes) {
        assert_eq!(link.encode(), bytes, "a link re-encodes to other bytes");
    }
    let answer = RangeAnswer::decode(bytes).ok()?;
    assert_eq!(
        answer.encode(),
        bytes,
        "an answer re-encodes to other bytes"
    );
    Some(answer)
}

/// Runs one input; returns whether `verify_range_at` accepted it (its answer then checked
/// honest).
fn run(data: &[u8]) -> bool {
    decoders(data);
    let [table, kind, rest @ ..] = data else {
        return false;
    };
    let Some(answer) = decoders(rest) else {
        return false;
    };
    let t = usize::from(table % 4);
    let name = TABLES.get(t).map_or(NO_TABLE, |(name, _)| name);
    let old = usize::from(kind >> 7);
    let h = honest();
    let receipt = &h.receipts[t][usize::from(kind & 0x7f) % 3][old];
    let digest: Digest = h.history.digest();
    let fresh = verify_range(receipt, name, &answer.lo, &answer.hi, &answer, &digest).is_ok();
    if verify_range_at(receipt, name, &answer.lo, &answer.hi, &answer, &digest).is_err() {
        assert!(
            !fresh,
            "an answer accepted fresh that is refused at its version"
        );
        return false;
    }
    assert!(
        t < TABLES.len(),
        "an answer accepted for a table the ledger does not have"
    );
    let version = receipt.version;
    let model = &h.versions[version as usize - 1].tables[t].0;
    assert!(
        answer.lo <= answer.hi,
        "accepted an answer for an empty range"
    );
    let truth = answer_of(model, &answer.lo, &answer.hi);
    assert_eq!(
        answer, truth,
        "accepted a wrong answer for {name} at version {version}"
    );
    if fresh {
        assert_eq!(version, VERSIONS, "a stale answer accepted as fresh");
    }
    true
}

/// Honest answers: `[k2, k6]` of every table with its honest receipt, and other ranges (their
/// bounds keys proved by the wide receipts, and others) with the wide one, at both versions.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let h = honest();
    let bounds: [&[u8]; 8] = [b"", b"a", b"k0", b"k2", b"k35", b"k6", b"k9", b"z"];
    let mut out = Vec::new();
    for t in 0..TABLES.len() {
        for (old, v) in [VERSIONS, OLD_VERSION].into_iter().enumerate() {
            let model = &h.versions[v as usize - 1].tables[t].0;
            let mut input = vec![t as u8, (HONEST as u8) | ((old as u8) << 7)];
            input.extend(answer_of(model, LO, HI).encode());
            out.push((format!("seed-{}-honest-v{v}", TABLES[t].0), input));
            for (i, lo) in bounds.iter().enumerate() {
                for hi in &bounds[i..] {
                    let mut input = vec![t as u8, (WIDE as u8) | ((old as u8) << 7)];
                    input.extend(answer_of(model, lo, hi).encode());
                    let name = format!(
                        "seed-{}-wide-v{v}-{}-{}",
                        TABLES[t].0,
                        String::from_utf8_lossy(lo),
                        String::from_utf8_lossy(hi)
                    );
                    out.push((name, input));
                }
            }
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

//! Ledger receipts (`cairn_proof::ledger`): a receipt the verifiers accept never establishes a
//! false claim, and the receipt decoder is total and canonical.
//!
//! The honest ledger is built once, when first used: three tables (`checking` and `savings`
//! SHA-256, `loans` BLAKE3) through eight versions. Version `v` writes key `k` (`key0` to
//! `key7`) of table `t` (0 to 2, in name order) when `(v + k + t) % 3 == 0`: a delete when
//! `(v + k) % 5 == 0`, otherwise the value `k@v`, with the blob `blob v` for `key3`. Its leaf
//! commits to the version's ledger root and to a hash of `commit v`. An input is:
//!
//! | Bytes | Meaning |
//! |---|---|
//! | 1 | `size`: the client trusts the honest digest of the first `1 + size % 8` versions |
//! | 1 | the number of claims, `b % 8` |
//! | 3 per claim | the table (`b % 4`; 3 names a table the ledger does not have); the key (`key<b % 10>`: `key8` and `key9` are never written); what is claimed: `0` absent, otherwise present with the value `k@w` (`w` the low four bits) and, by bits 4 and 5, no blob, the blob `blob w`, the zero hash (no blob, said otherwise) or another blob |
//! | the rest | an encoded receipt |
//!
//! The receipt is decoded and checked with `verify_receipt_at` and `verify_receipt`. If the first
//! accepts, every claim must be true at the receipt's version, and the receipt must be the honest
//! one's in every field the client relies on: its version in the digest, the version's leaf, the
//! table count, each section's table, index and root. If the second accepts, the first must too,
//! with the digest's newest version. Anything else is a panic.
//!
//! The whole input and the rest also go to the decoder: nothing may panic, and whatever decodes
//! re-encodes to the same bytes.
//!
//! Seeds: with `CAIRN_FUZZ_SEEDS=<dir>` in the environment, the target first writes honest
//! receipts there (`fuzz/run-all.sh` does so for the corpus), with their true claims and some
//! stale ones, checking that each is accepted.
#![no_main]
#[path = "common/seeds.rs"]
mod seeds;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use cairn_proof::history::{leaf_hash, HistoryLeaf};
use cairn_proof::ledger::{ledger_path, ledger_root};
use cairn_proof::reference::{MemHistory, MemTrie};
use cairn_proof::{
    verify_receipt, verify_receipt_at, Claim, Digest, Hash, HashKind, Receipt, ReceiptTable, Root,
    TableClaims, ZERO,
};
use libfuzzer_sys::fuzz_target;

const VERSIONS: u64 = 8;
const TABLES: [(&str, HashKind); 3] = [
    ("checking", HashKind::Sha256),
    ("loans", HashKind::Blake3),
    ("savings", HashKind::Sha256),
];
/// A table name the ledger does not have.
const NO_TABLE: &str = "nonesuch";
/// Keys written; claims name two more, never written.
const KEYS: u8 = 8;
const CLAIM_KEYS: u8 = 10;
const CLAIMS_MAX: u8 = 8;

/// A table's contents: key → (value, blob).
type Entries = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

/// One version of the honest ledger.
struct Version {
    /// Each table's contents and trie, in name order.
    tables: Vec<(Entries, MemTrie)>,
    leaf: HistoryLeaf,
}

struct Honest {
    /// Versions 1 to [`VERSIONS`], at index `v - 1`.
    versions: Vec<Version>,
    history: MemHistory,
}

fn key(k: u8) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

/// What key `k` of table `t` holds at version `v`.
fn entry(v: u64, t: usize, k: u8) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    if k >= KEYS {
        return None;
    }
    let w = (1..=v)
        .rev()
        .find(|w| (w + u64::from(k) + t as u64) % 3 == 0)?;
    if (w + u64::from(k)) % 5 == 0 {
        return None;
    }
    let blob = (k == 3).then(|| format!("blob {w}").into_bytes());
    Some((format!("{k}@{w}").into_bytes(), blob))
}

fn honest() -> &'static Honest {
    static HONEST: OnceLock<Honest> = OnceLock::new();
    HONEST.get_or_init(|| {
        let versions: Vec<Version> = (1..=VERSIONS)
            .map(|v| {
                let tables: Vec<(Entries, MemTrie)> = TABLES
                    .iter()
                    .enumerate()
                    .map(|(t, (_, kind))| {
                        let entries: Entries = (0..KEYS)
                            .filter_map(|k| entry(v, t, k).map(|e| (key(k), e)))
                            .collect();
                        let trie = MemTrie::new(
                            *kind,
                            entries
                                .iter()
                                .map(|(k, (v, b))| (&k[..], &v[..], b.as_deref())),
                        );
                        (entries, trie)
                    })
                    .collect();
                let pairs = pairs(&tables);
                let leaf = HistoryLeaf {
                    version: v,
                    ledger_root: ledger_root(&pairs).expect("three named tables"),
                    meta: leaf_hash(format!("commit {v}").as_bytes()),
                };
                Version { tables, leaf }
            })
            .collect();
        let history = MemHistory::from_leaf_hashes(versions.iter().map(|v| v.leaf.hash()));
        Honest { versions, history }
    })
}

fn pairs(tables: &[(Entries, MemTrie)]) -> Vec<(&'static [u8], Root)> {
    TABLES
        .iter()
        .zip(tables)
        .map(|((name, _), (_, trie))| (name.as_bytes(), trie.root()))
        .collect()
}

/// A claim of the input, owning its bytes.
struct OwnedClaim {
    /// 0 to 2, or 3: [`NO_TABLE`].
    table: usize,
    key: Vec<u8>,
    /// Present with this value and blob hash, or absent.
    value: Option<(Vec<u8>, Option<Hash>)>,
}

impl OwnedClaim {
    fn parse(b: [u8; 3]) -> OwnedClaim {
        let (table, k, what) = (usize::from(b[0] % 4), b[1] % CLAIM_KEYS, b[2]);
        let value = (what != 0).then(|| {
            let w = what & 0x0f;
            let kind = TABLES.get(table).map_or(HashKind::Sha256, |t| t.1);
            let blob = match (what >> 4) & 3 {
                0 => None,
                1 => Some(kind.blob_hash(format!("blob {w}").as_bytes())),
                2 => Some(ZERO),
                _ => Some(kind.blob_hash(b"another blob")),
            };
            (format!("{k}@{w}").into_bytes(), blob)
        });
        OwnedClaim {
            table,
            key: key(k),
            value,
        }
    }

    fn as_claim(&self) -> Claim<'_> {
        match &self.value {
            None => Claim::absent(&self.key),
            Some((v, None)) => Claim::present(&self.key, v),
            Some((v, Some(b))) => Claim::present_with_blob(&self.key, v, *b),
        }
    }

    fn table_name(&self) -> &'static str {
        TABLES.get(self.table).map_or(NO_TABLE, |t| t.0)
    }

    /// Whether the claim is true at `version` (`None` and the zero hash both claim no blob).
    fn holds_at(&self, version: &Version) -> bool {
        let Some((entries, trie)) = version.tables.get(self.table) else {
            return false;
        };
        let truth = entries.get(&self.key);
        match (&self.value, truth) {
            (None, None) => true,
            (Some((v, b)), Some((tv, tb))) => {
                let kind = trie.root().kind;
                let true_blob = tb.as_ref().map_or(ZERO, |b| kind.blob_hash(b));
                v == tv && b.unwrap_or(ZERO) == true_blob
            }
            _ => false,
        }
    }
}

/// The decoder on `bytes`: no panic, and whatever decodes re-encodes to the same bytes.
fn decoder(bytes: &[u8]) -> Option<Receipt> {
    let receipt = Receipt::decode(bytes).ok()?;
    assert_eq!(
        receipt.encode(),
        bytes,
        "a receipt re-encodes to other bytes"
    );
    assert_eq!(receipt.encoded_len(), bytes.len());
    Some(receipt)
}

/// Runs one input; returns whether `verify_receipt_at` accepted it (its claims then checked
/// true).
fn run(data: &[u8]) -> bool {
    decoder(data);
    let [size, count, rest @ ..] = data else {
        return false;
    };
    let count = usize::from(count % CLAIMS_MAX);
    if rest.len() < 3 * count {
        return false;
    }
    let (claim_bytes, receipt_bytes) = rest.split_at(3 * count);
    let Some(receipt) = decoder(receipt_bytes) else {
        return false;
    };
    let claims: Vec<OwnedClaim> = claim_bytes
        .chunks_exact(3)
        .map(|c| OwnedClaim::parse([c[0], c[1], c[2]]))
        .collect();
    let h = honest();
    let digest = h
        .history
        .digest_at(1 + u64::from(*size) % VERSIONS)
        .expect("a size within the history");
    let borrowed: Vec<Vec<Claim<'_>>> = claims.iter().map(|c| vec![c.as_claim()]).collect();
    let reads: Vec<TableClaims<'_>> = claims
        .iter()
        .zip(&borrowed)
        .map(|(c, b)| TableClaims {
            table: c.table_name(),
            claims: b,
        })
        .collect();
    let fresh = verify_receipt(&receipt, &reads, &digest).is_ok();
    if verify_receipt_at(&receipt, &reads, &digest).is_err() {
        assert!(
            !fresh,
            "a fresh receipt accepted that is refused at its version"
        );
        return false;
    }
    check_accepted(h, &receipt, &claims, &digest);
    if fresh {
        assert_eq!(
            receipt.version, digest.size,
            "a stale receipt accepted as fresh"
        );
    }
    true
}

/// Everything an accepted receipt proves must be true of the honest ledger.
fn check_accepted(h: &Honest, receipt: &Receipt, claims: &[OwnedClaim], digest: &Digest) {
    assert!(
        1 <= receipt.version && receipt.version <= digest.size,
        "accepted version {} against a digest of {} versions",
        receipt.version,
        digest.size
    );
    assert_eq!(receipt.history_size, digest.size);
    let version = &h.versions[receipt.version as usize - 1];
    assert_eq!(
        receipt.leaf().ok(),
        Some(version.leaf),
        "accepted another leaf"
    );
    assert_eq!(receipt.table_count, 3, "accepted another table count");
    for section in &receipt.tables {
        let t = TABLES
            .iter()
            .position(|(name, _)| *name == section.name)
            .unwrap_or_else(|| panic!("accepted a section for table {:?}", section.name));
        assert_eq!(section.index as usize, t, "accepted another index");
        assert_eq!(
            section.root,
            version.tables[t].1.root(),
            "accepted another root"
        );
    }
    for c in claims {
        assert!(
            c.holds_at(version),
            "accepted a false claim at version {}: table {}, key {:?}, value {:?}",
            receipt.version,
            c.table_name(),
            String::from_utf8_lossy(&c.key),
            c.value
        );
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

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The honest receipt of version `v` against the digest of `size` versions, reading `keys` in
/// each table of `tables` (increasing).
fn receipt(h: &Honest, v: u64, size: u64, tables: &[usize], keys: &[Vec<u8>]) -> Receipt {
    let version = &h.versions[v as usize - 1];
    let pairs = pairs(&version.tables);
    let inclusion = h.history.prove_inclusion(v - 1, size).expect("v <= size");
    Receipt {
        version: v,
        meta: version.leaf.meta,
        table_count: 3,
        tables: tables
            .iter()
            .map(|&t| ReceiptTable {
                name: TABLES[t].0.into(),
                root: version.tables[t].1.root(),
                index: t as u32,
                path: ledger_path(&pairs, t).expect("a table of the ledger"),
                proof: version.tables[t].1.prove(keys),
            })
            .collect(),
        history_size: inclusion.size,
        history_path: inclusion.path,
    }
}

/// The input bytes of a true claim about key `k` of table `t` at version `v`.
fn true_claim(v: u64, t: usize, k: u8) -> [u8; 3] {
    let what = match entry(v, t, k) {
        None => 0,
        Some((value, blob)) => {
            let w: u8 = std::str::from_utf8(&value).unwrap()[2..].parse().unwrap();
            w | if blob.is_some() { 0x10 } else { 0 }
        }
    };
    [t as u8, k, what]
}

/// Honest receipts with true claims for every digest size, of its newest version and of an
/// older one, each checked to be accepted.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let h = honest();
    let mut rng = Rng(0x6361_6972_6e2d_6c65);
    let mut out = Vec::new();
    for size in 1..=VERSIONS {
        for n in 0..4 {
            let v = if n < 2 { size } else { 1 + rng.below(size) };
            let mut tables: Vec<usize> = (0..3).filter(|_| rng.below(2) == 0).collect();
            if tables.is_empty() {
                tables.push(rng.below(3) as usize);
            }
            let ks: Vec<u8> = (0..1 + rng.below(3))
                .map(|_| rng.below(u64::from(CLAIM_KEYS)) as u8)
                .collect();
            let keys: Vec<Vec<u8>> = ks.iter().map(|&k| key(k)).collect();
            let mut claims = Vec::new();
            for &t in &tables {
                for &k in &ks {
                    claims.push(true_claim(v, t, k));
                }
            }
            claims.truncate(usize::from(CLAIMS_MAX) - 1);
            let mut input = vec![(size - 1) as u8, claims.len() as u8];
            input.extend(claims.concat());
            input.extend(receipt(h, v, size, &tables, &keys).encode());
            out.push((format!("seed-{size}-{n}-v{v}"), input));
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

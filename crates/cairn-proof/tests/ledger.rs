//! The ledger root and receipts (`cairn_proof::ledger`, `docs/format/ledger.md`): table entries
//! and ledger roots checked against the test's own encoding and hashing; the encodings pinned by
//! golden files (a receipt over two tables at the fifth of five versions, its ledger root and a
//! table entry); receipts built from reference tries and a reference history tree verify with
//! their true claims and round-trip canonically; and forged ones do not: every flipped bit, every
//! truncation, every false claim, a stale version, digests of other sizes, forks and other roots,
//! sections with another table's root, name, index, path or count, claims about tables the
//! receipt does not cover.
//!
//! Cases: 256 per property, 1,000 with `CI` set. `CAIRN_UPDATE_GOLDEN=1` rewrites the golden
//! files.

mod common;

use std::collections::BTreeMap;

use cairn_proof::history::{leaf_hash, node_hash, HistoryLeaf};
use cairn_proof::ledger::{
    ledger_path, ledger_root, table_entry_hash, LEDGER_TABLES_MAX, RECEIPT_TABLES_MAX,
    TABLE_NAME_BYTES_MAX,
};
use cairn_proof::reference::{MemHistory, MemTrie};
use cairn_proof::{
    verify_receipt, verify_receipt_at, Claim, Digest, Hash, HashKind, HistoryVerifyError,
    LedgerError, Receipt, ReceiptDecodeError, ReceiptTable, ReceiptVerifyError, Root, TableClaims,
    VerifyError, ZERO,
};
use proptest::prelude::*;

use common::{check_golden, hex, sha};

fn cases() -> u32 {
    if std::env::var_os("CI").is_some() {
        1000
    } else {
        256
    }
}

/// A table's contents: key → (value, blob).
type Entries = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

/// A claim that owns its bytes, so that tests can make false ones.
#[derive(Clone, Debug, PartialEq, Eq)]
struct OwnedClaim {
    key: Vec<u8>,
    /// Present with this value and blob hash (`None`: no blob), or absent.
    value: Option<(Vec<u8>, Option<Hash>)>,
}

impl OwnedClaim {
    fn as_claim(&self) -> Claim<'_> {
        match &self.value {
            None => Claim::absent(&self.key),
            Some((v, None)) => Claim::present(&self.key, v),
            Some((v, Some(b))) => Claim::present_with_blob(&self.key, v, *b),
        }
    }
}

/// A table of a test ledger: its name, contents and reference trie.
struct Table {
    name: String,
    entries: Entries,
    trie: MemTrie,
}

impl Table {
    fn new(kind: HashKind, name: &str, entries: Entries) -> Table {
        let trie = MemTrie::new(
            kind,
            entries
                .iter()
                .map(|(k, (v, b))| (&k[..], &v[..], b.as_deref())),
        );
        Table {
            name: name.into(),
            entries,
            trie,
        }
    }

    fn kind(&self) -> HashKind {
        self.trie.root().kind
    }

    /// The true claim about `key`.
    fn truth(&self, key: &[u8]) -> OwnedClaim {
        let value = self.entries.get(key).map(|(v, b)| {
            let blob = b.as_ref().map(|b| self.kind().blob_hash(b));
            (v.clone(), blob)
        });
        OwnedClaim {
            key: key.to_vec(),
            value,
        }
    }

    /// Whether `claim` is true of the table (`None` and `ZERO` both claim no blob).
    fn holds(&self, claim: &OwnedClaim) -> bool {
        let truth = self.truth(&claim.key);
        match (&claim.value, &truth.value) {
            (None, None) => true,
            (Some((v, b)), Some((tv, tb))) => v == tv && b.unwrap_or(ZERO) == tb.unwrap_or(ZERO),
            _ => false,
        }
    }

    /// Claims that differ from the true claim about `key` and are false: the value changed,
    /// present made absent and absent present, another blob, and the same statement about every
    /// other key of `keys` it is false of.
    fn false_claims(&self, key: &[u8], keys: &[Vec<u8>]) -> Vec<OwnedClaim> {
        let truth = self.truth(key);
        let mut out = vec![OwnedClaim {
            key: key.to_vec(),
            value: match &truth.value {
                None => Some((b"x".to_vec(), None)),
                Some(_) => None,
            },
        }];
        if let Some((v, b)) = &truth.value {
            let mut longer = v.clone();
            longer.push(0);
            let other_blob = match b {
                None => Some([1; 32]),
                Some(_) => None,
            };
            out.push(OwnedClaim {
                key: key.to_vec(),
                value: Some((longer, *b)),
            });
            out.push(OwnedClaim {
                key: key.to_vec(),
                value: Some((v.clone(), other_blob)),
            });
        }
        for other in keys {
            out.push(OwnedClaim {
                key: other.clone(),
                value: truth.value.clone(),
            });
        }
        out.retain(|c| !self.holds(c));
        out
    }
}

/// A ledger at version `version`, whose leaf sits among `size` leaves in `history` (the other
/// leaves made up from `salt`).
struct Ledger {
    tables: Vec<Table>,
    version: u64,
    meta: Hash,
    history: MemHistory,
}

/// The reads of a receipt: table positions (increasing) and the keys read in each.
type Reads = Vec<(usize, Vec<Vec<u8>>)>;

/// The claims of a read: table position and claims.
type ReadClaims = Vec<(usize, Vec<OwnedClaim>)>;

impl Ledger {
    fn new(tables: Vec<Table>, version: u64, size: u64, salt: u8) -> Ledger {
        let mut ledger = Ledger {
            tables,
            version,
            meta: sha(&[b"meta", &version.to_be_bytes()]),
            history: MemHistory::new(),
        };
        ledger.history = ledger.history_with(size, salt, None);
        ledger
    }

    /// The history of `size` leaves with this ledger's leaf at `version - 1` and made-up
    /// others; leaf `fork` (if any) made up differently.
    fn history_with(&self, size: u64, salt: u8, fork: Option<u64>) -> MemHistory {
        let own = self.leaf();
        MemHistory::from_leaf_hashes((0..size).map(|i| {
            if i + 1 == self.version && fork != Some(i) {
                return own.hash();
            }
            let forked = u8::from(fork == Some(i));
            HistoryLeaf {
                version: i + 1,
                ledger_root: sha(&[b"other", &[salt, forked], &i.to_be_bytes()]),
                meta: sha(&[b"meta", &(i + 1).to_be_bytes()]),
            }
            .hash()
        }))
    }

    fn pairs(&self) -> Vec<(&[u8], Root)> {
        self.tables
            .iter()
            .map(|t| (t.name.as_bytes(), t.trie.root()))
            .collect()
    }

    fn root(&self) -> Hash {
        ledger_root(&self.pairs()).unwrap()
    }

    fn leaf(&self) -> HistoryLeaf {
        HistoryLeaf {
            version: self.version,
            ledger_root: self.root(),
            meta: self.meta,
        }
    }

    fn digest(&self) -> Digest {
        self.history.digest()
    }

    /// The honest receipt for `reads`, against the whole history.
    fn receipt(&self, reads: &Reads) -> Receipt {
        let pairs = self.pairs();
        let inclusion = self
            .history
            .prove_inclusion(self.version - 1, self.history.len())
            .unwrap();
        Receipt {
            version: self.version,
            meta: self.meta,
            table_count: self.tables.len() as u32,
            tables: reads
                .iter()
                .map(|(t, keys)| self.section(&pairs, *t, keys))
                .collect(),
            history_size: inclusion.size,
            history_path: inclusion.path,
        }
    }

    fn section(&self, pairs: &[(&[u8], Root)], t: usize, keys: &[Vec<u8>]) -> ReceiptTable {
        let table = &self.tables[t];
        ReceiptTable {
            name: table.name.clone(),
            root: table.trie.root(),
            index: t as u32,
            path: ledger_path(pairs, t).unwrap(),
            proof: table.trie.prove(keys),
        }
    }

    /// The true claims about every key read.
    fn claims(&self, reads: &Reads) -> ReadClaims {
        reads
            .iter()
            .map(|(t, keys)| (*t, keys.iter().map(|k| self.tables[*t].truth(k)).collect()))
            .collect()
    }
}

/// Borrowed claims, per table, for the verifiers.
fn borrowed(claims: &[(usize, Vec<OwnedClaim>)]) -> Vec<Vec<Claim<'_>>> {
    claims
        .iter()
        .map(|(_, c)| c.iter().map(OwnedClaim::as_claim).collect())
        .collect()
}

fn table_claims<'a>(
    ledger: &'a Ledger,
    claims: &[(usize, Vec<OwnedClaim>)],
    borrowed: &'a [Vec<Claim<'a>>],
) -> Vec<TableClaims<'a>> {
    claims
        .iter()
        .zip(borrowed)
        .map(|((t, _), c)| TableClaims {
            table: &ledger.tables[*t].name,
            claims: c,
        })
        .collect()
}

/// Whether `receipt` verifies with `claims` against `digest` (for the version it names).
fn accepts(ledger: &Ledger, receipt: &Receipt, claims: &ReadClaims, digest: &Digest) -> bool {
    check(ledger, receipt, claims, digest).is_ok()
}

fn check(
    ledger: &Ledger,
    receipt: &Receipt,
    claims: &ReadClaims,
    digest: &Digest,
) -> Result<(), ReceiptVerifyError> {
    let b = borrowed(claims);
    verify_receipt_at(receipt, &table_claims(ledger, claims, &b), digest)
}

// ---------------------------------------------------------------------------------------------
// Random ledgers.

/// Table names to draw from, sorted: one byte, 64 bytes, UTF-8 beyond ASCII, prefixes of
/// each other.
fn name_pool() -> Vec<String> {
    let mut names: Vec<String> = [
        "a",
        "accounts",
        "b",
        "checking",
        "checking2",
        "savings",
        "z",
        "Ω",
        "ab".repeat(32).as_str(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.extend((0..23).map(|i| format!("t{i:02}")));
    names.sort();
    names
}

const KEY_IDS: u8 = 12;
/// Keys `0..KEYS_STORED` may be stored; the others are always absent.
const KEYS_STORED: u8 = 10;

fn key(id: u8) -> Vec<u8> {
    format!("key-{id}").into_bytes()
}

fn all_keys() -> Vec<Vec<u8>> {
    (0..KEY_IDS).map(key).collect()
}

/// One table of a [`Spec`]: BLAKE3 or SHA-256, its entries by key id, whether it is read and
/// which key ids.
type TableSpec = (
    bool,
    BTreeMap<u8, (Vec<u8>, Option<Vec<u8>>)>,
    bool,
    Vec<u8>,
);

/// A random ledger and read: the pool's names it has (1 to `tables_max`, in name order), each
/// table's [`TableSpec`] (the first `names.len()` are used), the history's size and the version
/// proved (1 to `size`), and the salt of the other versions' leaves.
#[derive(Clone, Debug)]
struct Spec {
    names: Vec<usize>,
    tables: Vec<TableSpec>,
    size: u64,
    version: u64,
    salt: u8,
}

/// Ledgers of up to `tables_max` tables of up to `entries_max` entries, reads of up to
/// `reads_max` keys per table, histories of up to `size_max` versions.
fn spec(
    tables_max: usize,
    entries_max: usize,
    reads_max: usize,
    size_max: u64,
) -> impl Strategy<Value = Spec> {
    let pool = name_pool().len();
    let table = (
        prop::bool::weighted(0.25),
        prop::collection::btree_map(
            0..KEYS_STORED,
            (
                prop::collection::vec(any::<u8>(), 0..6),
                prop::option::weighted(0.25, prop::collection::vec(any::<u8>(), 0..8)),
            ),
            0..=entries_max,
        ),
        prop::bool::weighted(0.4),
        prop::collection::vec(0..KEY_IDS, 0..=reads_max),
    );
    (
        prop::sample::subsequence((0..pool).collect::<Vec<_>>(), 1..=tables_max.min(pool)),
        prop::collection::vec(table, tables_max),
        1..=size_max,
        any::<u64>(),
        any::<u8>(),
    )
        .prop_map(|(names, tables, size, version, salt)| Spec {
            names,
            tables,
            size,
            version: 1 + version % size,
            salt,
        })
}

impl Spec {
    fn build(&self) -> (Ledger, Reads) {
        let pool = name_pool();
        let tables = self
            .names
            .iter()
            .zip(&self.tables)
            .map(|(&n, (blake3, entries, _, _))| {
                let kind = if *blake3 {
                    HashKind::Blake3
                } else {
                    HashKind::Sha256
                };
                let entries = entries
                    .iter()
                    .map(|(id, (v, b))| (key(*id), (v.clone(), b.clone())))
                    .collect();
                Table::new(kind, &pool[n], entries)
            })
            .collect();
        let mut reads: Reads = self
            .tables
            .iter()
            .take(self.names.len())
            .enumerate()
            .filter(|(_, (_, _, read, _))| *read)
            .map(|(t, (_, _, _, ids))| (t, ids.iter().map(|&id| key(id)).collect()))
            .collect();
        if reads.is_empty() {
            reads.push((0, self.tables[0].3.iter().map(|&id| key(id)).collect()));
        }
        (
            Ledger::new(tables, self.version, self.size, self.salt),
            reads,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Known answers and golden files.

/// A table entry's data as `docs/format/ledger.md` gives it, written out by the test.
fn entry_bytes(table_count: u32, name: &str, root: &Root) -> Vec<u8> {
    let mut out = vec![0x02];
    out.extend_from_slice(&table_count.to_be_bytes());
    out.push(root.kind.code());
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&root.hash);
    out
}

#[test]
fn entries_and_roots_computed_by_hand() {
    let roots = [
        Root::empty(HashKind::Sha256),
        Root {
            kind: HashKind::Blake3,
            hash: [7; 32],
        },
        Root {
            kind: HashKind::Sha256,
            hash: [9; 32],
        },
    ];
    let names = ["a", "bb", "c"];
    for count in 1..=3usize {
        let e: Vec<Hash> = (0..count)
            .map(|i| sha(&[&[0], &entry_bytes(count as u32, names[i], &roots[i])]))
            .collect();
        for (i, h) in e.iter().enumerate() {
            assert_eq!(
                table_entry_hash(count as u32, names[i].as_bytes(), &roots[i]),
                *h
            );
        }
        let n = |a: &Hash, b: &Hash| sha(&[&[1], a, b]);
        let expected = match count {
            1 => e[0],
            2 => n(&e[0], &e[1]),
            _ => n(&n(&e[0], &e[1]), &e[2]),
        };
        let tables: Vec<(&[u8], Root)> = (0..count)
            .map(|i| (names[i].as_bytes(), roots[i]))
            .collect();
        assert_eq!(ledger_root(&tables), Ok(expected), "{count} tables");
        let paths: Vec<Vec<Hash>> = (0..count)
            .map(|i| ledger_path(&tables, i).unwrap())
            .collect();
        match count {
            1 => assert_eq!(paths, [Vec::<Hash>::new()]),
            2 => assert_eq!(paths, [vec![e[1]], vec![e[0]]]),
            _ => assert_eq!(
                paths,
                [vec![e[1], e[2]], vec![e[0], e[2]], vec![n(&e[0], &e[1])]]
            ),
        }
    }
    // The same table in ledgers of different sizes has different entries.
    assert_ne!(
        table_entry_hash(1, b"a", &roots[0]),
        table_entry_hash(2, b"a", &roots[0])
    );
    // A history leaf's hash and a node's are not entries: a different first byte.
    assert_eq!(node_hash(&[0; 32], &[0; 32]), sha(&[&[1], &[0; 64]]));
    assert_eq!(
        leaf_hash(&entry_bytes(1, "a", &roots[0])),
        table_entry_hash(1, b"a", &roots[0])
    );
}

/// The golden ledger: two tables, "checking" and "savings" (SHA-256), through five commits,
/// each with metadata `commit v` (its SHA-256 the leaf's `meta`, as `cairn-ledger` hashes it).
fn golden_states() -> Vec<[Entries; 2]> {
    let set = |e: &mut Entries, k: &str, v: &str| {
        e.insert(k.as_bytes().to_vec(), (v.as_bytes().to_vec(), None));
    };
    let mut states = Vec::new();
    let (mut checking, mut savings) = (Entries::new(), Entries::new());
    for v in 1..=5 {
        match v {
            1 => set(&mut checking, "alice", "100"),
            2 => set(&mut checking, "bob", "250"),
            3 => set(&mut savings, "alice", "5000"),
            4 => set(&mut savings, "carol", "75"),
            _ => set(&mut checking, "alice", "90"),
        }
        states.push([checking.clone(), savings.clone()]);
    }
    states
}

/// The golden ledger at `version` (1 to 5), in the history of all five versions.
fn golden_ledger(version: u64) -> Ledger {
    let states = golden_states();
    let ledger_at = |v: u64| {
        let [checking, savings] = states[v as usize - 1].clone();
        let tables = vec![
            Table::new(HashKind::Sha256, "checking", checking),
            Table::new(HashKind::Sha256, "savings", savings),
        ];
        Ledger {
            tables,
            version: v,
            meta: sha(&[format!("commit {v}").as_bytes()]),
            history: MemHistory::new(),
        }
    };
    let mut ledger = ledger_at(version);
    ledger.history = MemHistory::from_leaf_hashes((1..=5).map(|v| ledger_at(v).leaf().hash()));
    ledger
}

/// The golden reads: "alice" and "dave" (absent) in checking, "carol" in savings.
fn golden_reads() -> Reads {
    vec![
        (0, vec![b"alice".to_vec(), b"dave".to_vec()]),
        (1, vec![b"carol".to_vec()]),
    ]
}

/// The ledger root and the history digest of the golden ledger at version 5, as
/// `docs/format/ledger.md` prints them.
const GOLDEN_LEDGER_ROOT: &str = "fbeaf49a006e6e71b8caf54cbb3b2b511bfe653734677534763924ed1328699c";
const GOLDEN_DIGEST_ROOT: &str = "b94d0d11148f4007f6ba261f798529071ffe3f016c8d30b46770eba10f4ab561";

/// `ledger-v1-entry.bin` (the entry of "checking" at version 5), `ledger-v1-root.bin` (the
/// ledger root at version 5) and `ledger-v1-receipt.bin` (the receipt of the golden reads at
/// version 5 in the history of five versions).
#[test]
fn ledger_v1_golden() {
    let ledger = golden_ledger(5);
    let checking = ledger.tables[0].trie.root();
    let entry = entry_bytes(2, "checking", &checking);
    let golden = check_golden("ledger-v1-entry.bin", &entry);
    assert_eq!(golden.len(), 7 + 8 + 32);
    assert_eq!(
        leaf_hash(&golden),
        table_entry_hash(2, b"checking", &checking)
    );

    let root = ledger.root();
    check_golden("ledger-v1-root.bin", &root);
    println!(
        "ledger root {}, digest {}",
        hex(&root),
        hex(&ledger.digest().root)
    );
    assert_eq!(hex(&root), GOLDEN_LEDGER_ROOT);
    assert_eq!(ledger.digest().size, 5);
    assert_eq!(hex(&ledger.digest().root), GOLDEN_DIGEST_ROOT);

    let reads = golden_reads();
    let receipt = ledger.receipt(&reads);
    let golden = check_golden("ledger-v1-receipt.bin", &receipt.encode());
    let decoded = Receipt::decode(&golden).unwrap();
    assert_eq!(decoded, receipt);
    assert_eq!(golden.len(), receipt.encoded_len());
    let claims = ledger.claims(&reads);
    assert_eq!(
        claims[0].1[0].value,
        Some((b"90".to_vec(), None)),
        "alice holds 90 in checking"
    );
    assert_eq!(claims[0].1[1].value, None, "dave is absent");
    assert_eq!(claims[1].1[0].value, Some((b"75".to_vec(), None)));
    let b = borrowed(&claims);
    let tc = table_claims(&ledger, &claims, &b);
    assert_eq!(verify_receipt(&decoded, &tc, &ledger.digest()), Ok(()));
    // Alice's older balance is refused.
    let old = [Claim::present(b"alice", b"100")];
    let stale_claims = [TableClaims {
        table: "checking",
        claims: &old,
    }];
    assert!(matches!(
        verify_receipt(&decoded, &stale_claims, &ledger.digest()),
        Err(ReceiptVerifyError::Trie {
            source: VerifyError::ValueMismatch { claim: 0 },
            ..
        })
    ));
    // The receipt of version 1 shows it, but only as the past.
    let past = golden_ledger(1);
    let receipt = past.receipt(&vec![(0, vec![b"alice".to_vec()])]);
    assert_eq!(
        verify_receipt(&receipt, &stale_claims, &ledger.digest()),
        Err(ReceiptVerifyError::Stale {
            version: 1,
            size: 5
        })
    );
    assert_eq!(
        verify_receipt_at(&receipt, &stale_claims, &ledger.digest()),
        Ok(())
    );
}

// ---------------------------------------------------------------------------------------------
// Honest receipts.

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The main property: over 1 to 32 tables (SHA-256 and BLAKE3, up to 10 keys each, with
    /// blobs), a receipt for any version of a history of up to 40 reading any tables and keys
    /// (present and absent) verifies with its true claims, and encodes canonically; against the
    /// newest version it is fresh, against an older one stale but valid for that version. Every
    /// claim changed into a false one (another value or blob, present made absent or absent
    /// present, another key) is refused, naming the table.
    #[test]
    fn honest_receipts_verify(spec in spec(32, 10, 5, 40)) {
        let (ledger, reads) = spec.build();
        let receipt = ledger.receipt(&reads);
        let bytes = receipt.encode();
        prop_assert_eq!(bytes.len(), receipt.encoded_len());
        let decoded = Receipt::decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &receipt);
        prop_assert_eq!(decoded.encode(), bytes);
        prop_assert_eq!(decoded.ledger_root(), Ok(ledger.root()));
        prop_assert_eq!(decoded.leaf(), Ok(ledger.leaf()));

        let digest = ledger.digest();
        let claims = ledger.claims(&reads);
        let b = borrowed(&claims);
        let tc = table_claims(&ledger, &claims, &b);
        prop_assert_eq!(verify_receipt_at(&decoded, &tc, &digest), Ok(()));
        prop_assert_eq!(verify_receipt_at(&decoded, &[], &digest), Ok(()));
        let fresh = verify_receipt(&decoded, &tc, &digest);
        if spec.version == spec.size {
            prop_assert_eq!(fresh, Ok(()));
        } else {
            prop_assert_eq!(
                fresh,
                Err(ReceiptVerifyError::Stale { version: spec.version, size: spec.size })
            );
        }

        let keys = all_keys();
        for (r, (t, table_claims)) in claims.iter().enumerate() {
            let table = &ledger.tables[*t];
            for (i, claim) in table_claims.iter().enumerate() {
                for false_claim in table.false_claims(&claim.key, &keys) {
                    let mut changed = claims.clone();
                    changed[r].1[i] = false_claim.clone();
                    let result = check(&ledger, &decoded, &changed, &digest);
                    prop_assert!(
                        matches!(&result, Err(ReceiptVerifyError::Trie { table: name, .. }) if *name == table.name),
                        "{:?} accepted or refused wrongly: {:?}", false_claim, result
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Forgeries.

/// Every flipped bit of an honest receipt's encoding fails to decode or fails to verify with
/// the same (true) claims; whatever decodes re-encodes to the same bytes.
fn assert_bit_flips_refused(ledger: &Ledger, bytes: &[u8], claims: &ReadClaims) {
    let digest = ledger.digest();
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.to_vec();
        flipped[bit / 8] ^= 1 << (bit % 8);
        if let Ok(r) = Receipt::decode(&flipped) {
            assert_eq!(r.encode(), flipped, "bit {bit}: not canonical");
            assert!(!accepts(ledger, &r, claims, &digest), "bit {bit} accepted");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// A forged receipt is refused: every flipped bit, every truncation and an added byte of the
    /// encoding; the receipt against digests of other sizes (also relabelled to their size),
    /// against a fork of the history (same size, one other leaf), against another root; with
    /// another version.
    #[test]
    fn forged_receipts_are_refused(spec in spec(6, 6, 3, 20), fork in any::<u64>()) {
        let (ledger, mut reads) = spec.build();
        reads.truncate(2);
        let receipt = ledger.receipt(&reads);
        let claims = ledger.claims(&reads);
        let digest = ledger.digest();
        let bytes = receipt.encode();
        prop_assert!(accepts(&ledger, &receipt, &claims, &digest));
        assert_bit_flips_refused(&ledger, &bytes, &claims);
        for len in 0..bytes.len() {
            prop_assert!(
                matches!(Receipt::decode(&bytes[..len]), Err(ReceiptDecodeError::Truncated { .. })),
                "truncated to {}", len
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert_eq!(Receipt::decode(&longer), Err(ReceiptDecodeError::TrailingBytes(1)));

        // Digests of other sizes in a longer history; the receipt relabelled to their size.
        let (n, version) = (spec.size, spec.version);
        let longer_history = ledger.history_with(n + 3, spec.salt, None);
        for m in 1..=n + 3 {
            if m == n {
                continue;
            }
            let other = longer_history.digest_at(m).unwrap();
            prop_assert_eq!(
                check(&ledger, &receipt, &claims, &other),
                Err(ReceiptVerifyError::SizeMismatch { receipt: n, digest: m })
            );
            let relabelled = Receipt { history_size: m, ..receipt.clone() };
            prop_assert!(!accepts(&ledger, &relabelled, &claims, &other), "size {}", m);
        }
        // A fork: the same size, one leaf other (perhaps the version's own).
        let forked = ledger.history_with(n, spec.salt, Some(fork % n)).digest();
        prop_assert_eq!(forked.size, n);
        prop_assert_eq!(
            check(&ledger, &receipt, &claims, &forked),
            Err(ReceiptVerifyError::History(HistoryVerifyError::RootMismatch))
        );
        let mut root = digest.root;
        root[fork as usize % 32] ^= 1 << (fork % 8);
        prop_assert_eq!(
            check(&ledger, &receipt, &claims, &Digest { size: n, root }),
            Err(ReceiptVerifyError::History(HistoryVerifyError::RootMismatch))
        );
        // Another version, in range or not.
        for v in [0, version - 1, version + 1, n, n + 1, u64::MAX] {
            if v == version {
                continue;
            }
            let moved = Receipt { version: v, ..receipt.clone() };
            let result = check(&ledger, &moved, &claims, &digest);
            prop_assert!(result.is_err(), "version {} accepted", v);
            if v == 0 || v > n {
                prop_assert_eq!(result, Err(ReceiptVerifyError::VersionOutOfRange { version: v, size: n }));
            }
        }
    }

    /// Sections moved about are refused with the typed errors: a section with another table's
    /// root (and proof), another table's name, another index or table count (every other one
    /// up to twice the count), two sections' indexes or paths swapped; a claim about a table
    /// the receipt has no section for, in the ledger or not; a section whose proof is another
    /// table's.
    #[test]
    fn moved_sections_are_refused(spec in spec(12, 6, 3, 12)) {
        let (ledger, reads) = spec.build();
        let receipt = ledger.receipt(&reads);
        let claims = ledger.claims(&reads);
        let digest = ledger.digest();
        prop_assert!(accepts(&ledger, &receipt, &claims, &digest));
        let count = ledger.tables.len();
        let sections = receipt.tables.len();
        let path_error = |r: &Result<(), ReceiptVerifyError>| matches!(
            r,
            Err(ReceiptVerifyError::TablePath { .. }
                | ReceiptVerifyError::TablesDisagree
                | ReceiptVerifyError::History(HistoryVerifyError::RootMismatch))
        );
        // What a changed entry gives: the other sections' root differs, or the leaf does.
        let changed_entry = if sections > 1 {
            Err(ReceiptVerifyError::TablesDisagree)
        } else {
            Err(ReceiptVerifyError::History(HistoryVerifyError::RootMismatch))
        };
        let pairs = ledger.pairs();
        for (s, (t, keys)) in reads.iter().enumerate() {
            for u in 0..count {
                if u == *t {
                    continue;
                }
                let other = ledger.section(&pairs, u, keys);
                let mut forged = receipt.clone();
                forged.tables[s].name = other.name.clone();
                prop_assert_eq!(check(&ledger, &forged, &claims, &digest), changed_entry.clone());
                if other.root != receipt.tables[s].root {
                    let mut forged = receipt.clone();
                    forged.tables[s].root = other.root;
                    forged.tables[s].proof = other.proof.clone();
                    prop_assert_eq!(check(&ledger, &forged, &claims, &digest), changed_entry.clone());
                    // The right root with another table's proof: the claims are refused.
                    let mut forged = receipt.clone();
                    forged.tables[s].proof = other.proof;
                    let result = check(&ledger, &forged, &claims, &digest);
                    prop_assert!(matches!(
                        result,
                        Err(ReceiptVerifyError::Trie {
                            source: VerifyError::RootMismatch | VerifyError::HashKindMismatch { .. },
                            ..
                        })
                    ), "{:?}", result);
                }
                let mut forged = receipt.clone();
                forged.tables[s].index = u as u32;
                let result = check(&ledger, &forged, &claims, &digest);
                prop_assert!(path_error(&result), "index {}: {:?}", u, result);
            }
            for c in 1..=2 * count as u32 + 1 {
                if c as usize == count {
                    continue;
                }
                let forged = Receipt { table_count: c, ..receipt.clone() };
                let result = check(&ledger, &forged, &claims, &digest);
                prop_assert!(path_error(&result), "count {}: {:?}", c, result);
            }
            for s2 in s + 1..sections {
                let mut forged = receipt.clone();
                let (i, j) = (forged.tables[s].index, forged.tables[s2].index);
                forged.tables[s].index = j;
                forged.tables[s2].index = i;
                let result = check(&ledger, &forged, &claims, &digest);
                prop_assert!(path_error(&result), "indexes swapped: {:?}", result);
                let mut forged = receipt.clone();
                let path = forged.tables[s].path.clone();
                forged.tables[s].path = forged.tables[s2].path.clone();
                forged.tables[s2].path = path;
                let result = check(&ledger, &forged, &claims, &digest);
                prop_assert!(path_error(&result), "paths swapped: {:?}", result);
            }
        }
        // Claims about tables without a section.
        let read: Vec<usize> = reads.iter().map(|(t, _)| *t).collect();
        let absent = [Claim::absent(b"key-0")];
        for t in (0..count).filter(|t| !read.contains(t)) {
            let name = &ledger.tables[t].name;
            let tc = [TableClaims { table: name, claims: &absent }];
            prop_assert_eq!(
                verify_receipt_at(&receipt, &tc, &digest),
                Err(ReceiptVerifyError::NoSuchTable(name.clone()))
            );
        }
        let tc = [TableClaims { table: "nonesuch", claims: &absent }];
        prop_assert_eq!(
            verify_receipt_at(&receipt, &tc, &digest),
            Err(ReceiptVerifyError::NoSuchTable("nonesuch".into()))
        );
    }

    /// The decoder is total and canonical: arbitrary bytes, and an honest receipt with a few
    /// bytes changed, give a receipt that re-encodes to the same bytes, or a typed error.
    #[test]
    fn decoder_is_total_and_canonical(
        junk in prop::collection::vec(any::<u8>(), 0..600),
        edits in prop::collection::vec((any::<u16>(), any::<u8>()), 1..4),
        spec in spec(4, 4, 2, 8),
    ) {
        let (ledger, reads) = spec.build();
        let honest = ledger.receipt(&reads).encode();
        let mut edited = honest.clone();
        for &(at, byte) in &edits {
            let i = at as usize % edited.len();
            edited[i] = byte;
        }
        let mut prefixed = b"CRNL\x01\x01\x00\x00".to_vec();
        prefixed.extend_from_slice(&junk);
        for bytes in [junk, prefixed, edited] {
            if let Ok(r) = Receipt::decode(&bytes) {
                prop_assert_eq!(r.encode(), bytes);
                prop_assert!(r.tables.len() <= RECEIPT_TABLES_MAX);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Refusals with typed errors.

#[test]
fn ledger_root_refuses_what_is_not_a_ledger() {
    let root = Root::empty(HashKind::Sha256);
    let refused = |names: &[&[u8]]| {
        let tables: Vec<(&[u8], Root)> = names.iter().map(|n| (*n, root)).collect();
        let r = ledger_root(&tables);
        for i in 0..names.len() {
            assert_eq!(ledger_path(&tables, i).err(), r.clone().err());
        }
        r
    };
    assert_eq!(refused(&[]), Err(LedgerError::NoTables));
    assert_eq!(ledger_path(&[], 0), Err(LedgerError::NoTables));
    assert_eq!(
        refused(&[b"b", b"a"]),
        Err(LedgerError::OutOfOrder { index: 1 })
    );
    assert_eq!(
        refused(&[b"a", b"b", b"b"]),
        Err(LedgerError::OutOfOrder { index: 2 })
    );
    assert_eq!(
        refused(&[b"a", b"a"]),
        Err(LedgerError::OutOfOrder { index: 1 })
    );
    assert_eq!(
        refused(&[b"ab", b"a"]),
        Err(LedgerError::OutOfOrder { index: 1 })
    );
    assert_eq!(refused(&[b"a", b""]), Err(LedgerError::NameLength(0)));
    assert_eq!(refused(&[b""]), Err(LedgerError::NameLength(0)));
    let long = [b'n'; TABLE_NAME_BYTES_MAX + 1];
    assert_eq!(refused(&[b"a", &long]), Err(LedgerError::NameLength(65)));
    assert_eq!(refused(&[&long[..64], b"z"]).map(|_| ()), Ok(()));
    // Name order is byte order: "Z" < "a" < "ab" < "b" < "Ω" (0xce 0xa9).
    assert_eq!(
        refused(&[b"Z", b"a", b"ab", b"b", "Ω".as_bytes()]).map(|_| ()),
        Ok(())
    );
    // A path beyond the tables.
    let tables = [(&b"a"[..], root), (&b"b"[..], root)];
    assert_eq!(
        ledger_path(&tables, 2),
        Err(LedgerError::OutOfOrder { index: 2 })
    );
    // More tables than a ledger holds, refused before anything is hashed.
    let names: Vec<[u8; 3]> = (0..=LEDGER_TABLES_MAX as u32)
        .map(|i| [(i >> 16) as u8, (i >> 8) as u8, i as u8])
        .collect();
    let tables: Vec<(&[u8], Root)> = names.iter().map(|n| (&n[..], root)).collect();
    assert_eq!(
        ledger_root(&tables),
        Err(LedgerError::TooManyTables(LEDGER_TABLES_MAX + 1))
    );
}

/// The golden receipt's bytes with `edit` applied, decoded.
fn decode_edited(edit: impl FnOnce(&mut Vec<u8>)) -> Result<Receipt, ReceiptDecodeError> {
    let mut bytes = golden_ledger(5).receipt(&golden_reads()).encode();
    edit(&mut bytes);
    Receipt::decode(&bytes)
}

/// Every rule of the decoder, on the golden receipt (offsets as in `docs/format/ledger.md`'s
/// worked example: a history path of one hash, the table count at 89, the first section's name
/// at 94).
#[test]
fn receipt_decoder_refuses_with_typed_errors() {
    let ledger = golden_ledger(5);
    let receipt = ledger.receipt(&golden_reads());
    assert_eq!(receipt.history_path.len(), 1);
    let field = |what| move |r: Result<Receipt, ReceiptDecodeError>| matches!(r, Err(ReceiptDecodeError::Field { what: w, .. }) if w == what);
    let set = |at: usize, byte: u8| move |b: &mut Vec<u8>| b[at] = byte;
    let put = |at: usize, bytes: Vec<u8>| {
        move |b: &mut Vec<u8>| b[at..at + bytes.len()].copy_from_slice(&bytes)
    };
    assert!(matches!(
        Receipt::decode(b""),
        Err(ReceiptDecodeError::Truncated { what: "magic", .. })
    ));
    assert_eq!(
        decode_edited(set(3, b'H')),
        Err(ReceiptDecodeError::BadMagic)
    );
    assert_eq!(
        decode_edited(set(4, 2)),
        Err(ReceiptDecodeError::UnsupportedVersion(2))
    );
    assert_eq!(
        decode_edited(set(5, 2)),
        Err(ReceiptDecodeError::WrongType {
            expected: "receipt",
            found: 2
        })
    );
    assert_eq!(decode_edited(set(7, 1)), Err(ReceiptDecodeError::Reserved));
    // Version 0, a version beyond the history, a history beyond 2^63.
    assert!(field("version")(decode_edited(put(8, vec![0; 8]))));
    assert!(field("version")(decode_edited(put(
        8,
        6u64.to_be_bytes().to_vec()
    ))));
    assert!(field("history size")(decode_edited(put(
        48,
        ((1u64 << 63) + 1).to_be_bytes().to_vec()
    ))));
    // A history path longer than 64 hashes; a table count of 0 or above 2^16.
    assert!(field("history path")(decode_edited(set(56, 65))));
    let count_at = 57 + 32;
    assert!(field("table count")(decode_edited(put(
        count_at,
        vec![0; 4]
    ))));
    assert!(field("table count")(decode_edited(put(
        count_at,
        (LEDGER_TABLES_MAX as u32 + 1).to_be_bytes().to_vec()
    ))));
    // No sections; a name of 0 or 65 bytes, not UTF-8, or not after the previous one.
    assert!(field("table sections")(decode_edited(set(count_at + 4, 0))));
    let name_at = count_at + 5;
    assert!(field("table name")(decode_edited(set(name_at, 0))));
    assert!(field("table name")(decode_edited(set(name_at, 65))));
    assert!(field("table name")(decode_edited(set(name_at + 1, 0xff))));
    let savings = receipt.encode()[name_at..]
        .windows(8)
        .position(|w| w == b"\x07savings")
        .unwrap()
        + name_at;
    assert!(field("table name")(decode_edited(put(
        savings,
        b"\x07checkin".to_vec()
    ))));
    assert!(field("table name")(decode_edited(put(
        savings,
        b"\x07abcdefg".to_vec()
    ))));
    // An unknown hash kind; an index not below the count; a table path longer than 16.
    let kind_at = name_at + 1 + 8;
    assert!(field("hash kind")(decode_edited(set(kind_at, 3))));
    assert!(field("table index")(decode_edited(put(
        kind_at + 33,
        vec![0, 0, 0, 2]
    ))));
    assert!(field("table path")(decode_edited(set(kind_at + 37, 17))));
    // A trie proof that does not decode, or hashes with another kind than its root.
    let proof_at = kind_at + 38 + 32 + 4;
    assert!(matches!(
        decode_edited(set(proof_at, b'X')),
        Err(ReceiptDecodeError::Proof { section: 0, .. })
    ));
    assert!(field("trie proof")(decode_edited(set(kind_at, 2))));
    // A receipt out of the format's bounds encodes, but does not decode.
    let mut long_name = receipt.clone();
    long_name.tables[0].name = "n".repeat(300);
    assert!(field("table name")(Receipt::decode(&long_name.encode())));
    let mut many = receipt.clone();
    many.tables = (0..300)
        .map(|i| ReceiptTable {
            name: format!("t{i:03}"),
            ..receipt.tables[0].clone()
        })
        .collect();
    assert!(Receipt::decode(&many.encode()).is_err());
}

/// A receipt's claims are checked only for the tables read; a read may name a table twice,
/// and a receipt with no claims checks its sections and history alone. A claim about a table
/// is checked against that table's root, never another's.
#[test]
fn reads_name_tables_by_section() {
    let ledger = golden_ledger(5);
    let receipt = ledger.receipt(&golden_reads());
    let digest = ledger.digest();
    let alice = [Claim::present(b"alice", b"90")];
    let dave = [Claim::absent(b"dave")];
    let twice = [
        TableClaims {
            table: "checking",
            claims: &alice,
        },
        TableClaims {
            table: "checking",
            claims: &dave,
        },
    ];
    assert_eq!(verify_receipt(&receipt, &twice, &digest), Ok(()));
    assert_eq!(verify_receipt(&receipt, &[], &digest), Ok(()));
    // Carol's savings claimed in checking, alice's checking in savings.
    let carol = [Claim::present(b"carol", b"75")];
    for (table, claims) in [("checking", &carol), ("savings", &alice)] {
        let read = [TableClaims { table, claims }];
        assert!(matches!(
            verify_receipt(&receipt, &read, &digest),
            Err(ReceiptVerifyError::Trie { table: t, .. }) if t == table
        ));
    }
}

//! The ledger root and receipts (`cairn_proof::ledger`, `docs/format/ledger.md`).

use std::collections::BTreeMap;

use cairn_proof::history::HistoryLeaf;
use cairn_proof::ledger::{ledger_path, ledger_root};
use cairn_proof::reference::{MemHistory, MemTrie};
use cairn_proof::{
    verify_receipt_at, Claim, Digest, Hash, HashKind, Receipt, ReceiptTable, Root, TableClaims,
};
use sha2::{Digest as _, Sha256};

fn sha(parts: &[&[u8]]) -> Hash {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

type Entries = BTreeMap<Vec<u8>, (Vec<u8>, Option<Vec<u8>>)>;

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

    fn claim<'a>(&'a self, key: &'a [u8]) -> Claim<'a> {
        match self.entries.get(key) {
            None => Claim::absent(key),
            Some((v, None)) => Claim::present(key, v),
            Some((v, Some(b))) => {
                Claim::present_with_blob(key, v, self.trie.root().kind.blob_hash(b))
            }
        }
    }
}

struct Ledger {
    tables: Vec<Table>,
    version: u64,
    meta: Hash,
    history: MemHistory,
}

impl Ledger {
    fn new(tables: Vec<Table>, version: u64, size: u64, salt: u8) -> Ledger {
        let mut l = Ledger {
            tables,
            version,
            meta: sha(&[b"meta", &version.to_be_bytes()]),
            history: MemHistory::new(),
        };
        let own = l.leaf();
        for i in 0..size {
            let leaf = if i + 1 == version {
                own
            } else {
                HistoryLeaf {
                    version: i + 1,
                    ledger_root: sha(&[b"other", &[salt], &i.to_be_bytes()]),
                    meta: sha(&[b"meta", &(i + 1).to_be_bytes()]),
                }
            };
            l.history.append(leaf.hash());
        }
        l
    }

    fn pairs(&self) -> Vec<(&[u8], Root)> {
        self.tables
            .iter()
            .map(|t| (t.name.as_bytes(), t.trie.root()))
            .collect()
    }

    fn leaf(&self) -> HistoryLeaf {
        HistoryLeaf {
            version: self.version,
            ledger_root: ledger_root(&self.pairs()).unwrap(),
            meta: self.meta,
        }
    }

    fn receipt(&self, reads: &[(usize, Vec<Vec<u8>>)]) -> Receipt {
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
                .map(|(t, keys)| ReceiptTable {
                    name: self.tables[*t].name.clone(),
                    root: self.tables[*t].trie.root(),
                    index: *t as u32,
                    path: ledger_path(&pairs, *t).unwrap(),
                    proof: self.tables[*t].trie.prove(keys),
                })
                .collect(),
            history_size: inclusion.size,
            history_path: inclusion.path,
        }
    }

    fn digest(&self) -> Digest {
        self.history.digest()
    }
}

/// A receipt's table count and a section's index are proved, not taken on trust: a path alone
/// fits several tree sizes (the last of 2 tables walks as the last of 3, 5 or 9), so before
/// every entry stated the table count, a receipt over 2 tables verified with a count of 3 and
/// the index 2. Now no other (index, count) than the true one verifies, for ledgers of 1 to 12
/// tables.
#[test]
fn table_count_is_authenticated() {
    let kind = HashKind::Sha256;
    for count in 1..=12usize {
        let tables: Vec<Table> = (0..count)
            .map(|i| {
                let mut e = Entries::new();
                e.insert(b"k".to_vec(), (vec![i as u8], None));
                Table::new(kind, &format!("t{i:02}"), e)
            })
            .collect();
        let ledger = Ledger::new(tables, 3, 4, 0);
        for t in 0..count {
            let key = vec![b"k".to_vec()];
            let receipt = ledger.receipt(&[(t, key.clone())]);
            let claims = [ledger.tables[t].claim(b"k")];
            let reads = [TableClaims {
                table: &ledger.tables[t].name,
                claims: &claims,
            }];
            assert_eq!(
                verify_receipt_at(&receipt, &reads, &ledger.digest()),
                Ok(())
            );
            for other in 1..=2 * count as u32 + 2 {
                for index in 0..other {
                    if (other, index) == (count as u32, t as u32) {
                        continue;
                    }
                    let forged = Receipt {
                        table_count: other,
                        tables: vec![ReceiptTable {
                            index,
                            ..receipt.tables[0].clone()
                        }],
                        ..receipt.clone()
                    };
                    assert!(
                        verify_receipt_at(&forged, &reads, &ledger.digest()).is_err(),
                        "table {t} of {count} accepted as {index} of {other}"
                    );
                }
            }
        }
    }
}

//! What a caller gives the client and gets back: a [`Batch`] of writes (with, for a
//! transaction, the values it read), and the verified answers [`Read`], [`Promised`],
//! [`Commit`] and [`Range`].
//!
//! Owns: these types and their conversion to the wire's messages and to the values a receipt
//! must prove. May call: `error`, `cairn_wire`. Must never
//! touch: the network.

use std::collections::BTreeMap;

use cairn_proof::Digest;
use cairn_wire as wire;

use crate::error::Error;

/// Values read, per table (in the order asked) then key (in the order asked): `None` for an
/// absent key.
pub type Values = Vec<Vec<Option<Vec<u8>>>>;

/// Values per table and key: what the client wrote, saw or was promised (`None`: absent).
pub(crate) type Expected = BTreeMap<String, BTreeMap<Vec<u8>, Option<Vec<u8>>>>;

/// One (table, key, value or absence).
type Entry = (String, Vec<u8>, Option<Vec<u8>>);

/// The writes of one version, and, for [`crate::Client::transact`], what the transaction read:
/// the version is made only if every key expected still holds the value seen.
///
/// ```
/// let mut batch = cairn_client::Batch::new();
/// batch
///     .expect("checking", "alice", "70")
///     .insert("checking", "alice", "20")
///     .insert("savings", "alice", "1050")
///     .meta("transfer 50");
/// assert_eq!(batch.len(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    writes: Vec<Entry>,
    expects: Vec<Entry>,
    meta: Vec<u8>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Sets `key` of `table` to `value` (a later write of the same key wins).
    pub fn insert(
        &mut self,
        table: &str,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Batch {
        self.writes.push((
            table.to_string(),
            key.as_ref().to_vec(),
            Some(value.as_ref().to_vec()),
        ));
        self
    }

    /// Deletes `key` of `table`.
    pub fn delete(&mut self, table: &str, key: impl AsRef<[u8]>) -> &mut Batch {
        self.writes
            .push((table.to_string(), key.as_ref().to_vec(), None));
        self
    }

    /// The transaction read `key` of `table` holding `value` (transactions only).
    pub fn expect(
        &mut self,
        table: &str,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> &mut Batch {
        self.expects.push((
            table.to_string(),
            key.as_ref().to_vec(),
            Some(value.as_ref().to_vec()),
        ));
        self
    }

    /// The transaction read `key` of `table` absent (transactions only).
    pub fn expect_absent(&mut self, table: &str, key: impl AsRef<[u8]>) -> &mut Batch {
        self.expects
            .push((table.to_string(), key.as_ref().to_vec(), None));
        self
    }

    /// The version's metadata (hashed into its history leaf; the server takes at most 4 KiB).
    pub fn meta(&mut self, meta: impl AsRef<[u8]>) -> &mut Batch {
        self.meta = meta.as_ref().to_vec();
        self
    }

    /// Writes in the batch.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Whether the batch writes nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Whether the batch names values read (so only [`crate::Client::transact`] takes it).
    pub fn has_expectations(&self) -> bool {
        !self.expects.is_empty()
    }

    pub(crate) fn meta_bytes(&self) -> &[u8] {
        &self.meta
    }

    /// What the keys written must hold after the commit (the last write of each wins).
    pub(crate) fn expected_writes(&self) -> Expected {
        let mut out = Expected::new();
        for (table, key, value) in &self.writes {
            out.entry(table.clone())
                .or_default()
                .insert(key.clone(), value.clone());
        }
        out
    }

    /// What the keys read held before the commit. Errors: a key expected with two values.
    pub(crate) fn expected_reads(&self) -> Result<Expected, Error> {
        let mut out = Expected::new();
        for (table, key, value) in &self.expects {
            let seen = out.entry(table.clone()).or_default();
            match seen.get(key) {
                Some(v) if v != value => {
                    return Err(Error::Invalid(format!(
                        "key {} of table {table:?} is expected with two values",
                        hex::encode(key)
                    )))
                }
                _ => {
                    seen.insert(key.clone(), value.clone());
                }
            }
        }
        Ok(out)
    }

    /// The writes as the wire carries them: per table, in the order of each table's first
    /// write, each table's writes in order.
    pub(crate) fn wire_writes(&self) -> Vec<wire::TableWrites> {
        group(&self.writes)
            .into_iter()
            .map(|(table, entries)| wire::TableWrites {
                table,
                writes: entries
                    .into_iter()
                    .map(|(key, value)| wire::Write { key, value })
                    .collect(),
            })
            .collect()
    }

    /// The expectations as the wire carries them.
    pub(crate) fn wire_expects(&self) -> Vec<wire::TableExpects> {
        group(&self.expects)
            .into_iter()
            .map(|(table, entries)| wire::TableExpects {
                table,
                expects: entries
                    .into_iter()
                    .map(|(key, value)| wire::Expect { key, value })
                    .collect(),
            })
            .collect()
    }
}

type Grouped = Vec<(String, Vec<(Vec<u8>, Option<Vec<u8>>)>)>;

/// Entries grouped by table, tables in the order of their first entry.
fn group(entries: &[Entry]) -> Grouped {
    let mut out: Grouped = Vec::new();
    let mut at: BTreeMap<&str, usize> = BTreeMap::new();
    for (table, key, value) in entries {
        let i = *at.entry(table).or_insert_with(|| {
            out.push((table.clone(), Vec::new()));
            out.len() - 1
        });
        out[i].1.push((key.clone(), value.clone()));
    }
    out
}

/// A verified read: the values of the keys asked, as of `version`, proved against `digest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The version read (for a fresh read, the newest the server had).
    pub version: u64,
    /// The digest the receipt was checked against (trusted, or a prefix of the trusted one).
    pub digest: Digest,
    /// The values, per table then key, in the order asked.
    pub values: Values,
}

/// A verified read through a router over shards ([`crate::Client::get_across`]): the values,
/// each shard's part with the digest its receipt was checked against, and each table's global
/// root the values were proved against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadAcross {
    /// The values, per table then key, in the order asked.
    pub values: Values,
    /// Each shard the read touched, in shard order.
    pub shards: Vec<crate::ShardPart>,
    /// Each table's global root, in the order asked.
    pub global: Vec<crate::GlobalRoot>,
}

/// Values the server promised as of `version`, not yet proved: use them now, prove them later
/// (in a batch) with [`crate::Client::verify_promises`]. Keep every field as it is: the proof
/// is checked against exactly these values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promised {
    /// The version the server says it read (the newest it had).
    pub version: u64,
    /// The tables and keys asked, in order.
    pub tables: Vec<(String, Vec<Vec<u8>>)>,
    /// Their values, per table then key.
    pub values: Values,
}

/// A verified commit: the version made, and the receipts of the keys written (and read) checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Commit {
    /// The version made.
    pub version: u64,
    /// Its digest (now trusted).
    pub digest: Digest,
    /// Its ledger root (every table's root under its name, `docs/format/ledger.md`).
    pub ledger_root: [u8; 32],
}

/// A verified range of an ordered table: every key in the range, none left out or added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// The version read.
    pub version: u64,
    /// The digest its receipt was checked against.
    pub digest: Digest,
    /// The entries (key, value) in key order.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_group_by_table_and_the_last_write_wins() {
        let mut b = Batch::new();
        b.insert("b", "k", "1")
            .insert("a", "x", "2")
            .delete("b", "k")
            .expect("a", "x", "0")
            .expect("a", "x", "0");
        let w = b.wire_writes();
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].table.as_str(), w[0].writes.len()), ("b", 2));
        let e = b.expected_writes();
        assert_eq!(e["b"][&b"k".to_vec()], None);
        assert_eq!(e["a"][&b"x".to_vec()], Some(b"2".to_vec()));
        assert_eq!(b.expected_reads().unwrap()["a"].len(), 1);
        b.expect_absent("a", "x");
        assert!(matches!(b.expected_reads(), Err(Error::Invalid(_))));
    }
}

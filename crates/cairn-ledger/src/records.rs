//! The ledger's own records, stored in its internal durable table `_history`
//! (`docs/format/ledger.md`, "Stored records"): their keys, encodings and total decoders.
//!
//! Owns: the key layout of `_history` and [`LedgerMeta`], [`Pending`], [`VersionRecord`],
//! [`Undo`].
//! May call: `cairn_proof` (leaves, roots, hash kinds), the crate's errors. Must never touch:
//! tables or files (the ledger reads and writes these records through the engine).
//!
//! Every record starts with a format version byte (1); a decoder refuses other versions, short
//! input and bytes left over. The engine checksums every page they are stored in.

use cairn_proof::history::{HistoryLeaf, HISTORY_LEAF_BYTES};
use cairn_proof::{Hash, HashKind, Root};

use crate::error::{Error, Result};

/// The format version of every record below.
pub(crate) const RECORD_VERSION: u8 = 1;

/// Key of the ledger's configuration record.
pub(crate) const KEY_META: &[u8] = b"c";
/// Key of the newest finished version (u64 big-endian).
pub(crate) const KEY_HEAD: &[u8] = b"h";
/// Key of the commit in progress, written atomically with its updates.
pub(crate) const KEY_PENDING: &[u8] = b"p";
/// Prefix of a history node's key: `n`, level (one byte), index (u64 big-endian).
const NODE_PREFIX: u8 = b'n';
/// Prefix of a version record's key: `v`, version (u64 big-endian).
const VERSION_PREFIX: u8 = b'v';
/// Prefix of an undo record's key: `u`, version (u64 big-endian).
pub(crate) const UNDO_PREFIX: u8 = b'u';

/// The key of history node `(level, index)`: the root of the `2^level` leaves from
/// `index · 2^level` (level 0: a leaf hash).
pub(crate) fn node_key(level: u32, index: u64) -> [u8; 10] {
    let mut key = [0u8; 10];
    key[0] = NODE_PREFIX;
    key[1] = level as u8;
    key[2..].copy_from_slice(&index.to_be_bytes());
    key
}

/// The key of version `version`'s record.
pub(crate) fn version_key(version: u64) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[0] = VERSION_PREFIX;
    key[1..].copy_from_slice(&version.to_be_bytes());
    key
}

/// The key of version `version`'s undo record.
pub(crate) fn undo_key(version: u64) -> [u8; 9] {
    let mut key = [0u8; 9];
    key[0] = UNDO_PREFIX;
    key[1..].copy_from_slice(&version.to_be_bytes());
    key
}

/// The ledger's configuration, fixed when it is created: its tables (sorted, unique) and
/// their hash function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LedgerMeta {
    pub(crate) hash: HashKind,
    pub(crate) tables: Vec<String>,
    /// For each table, whether it is ordered (its keys linked in key order).
    pub(crate) ordered: Vec<bool>,
}

/// A table's flag in the configuration record: ordered.
const FLAG_ORDERED: u8 = 1;
/// The configuration record's format version: 2 adds a flags byte after each table name (a
/// version-1 record, written before ordered tables existed, has none: every table plain).
const META_VERSION: u8 = 2;

impl LedgerMeta {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![META_VERSION, self.hash.code()];
        out.extend_from_slice(&(self.tables.len() as u16).to_be_bytes());
        for (name, &ordered) in self.tables.iter().zip(&self.ordered) {
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
            out.push(if ordered { FLAG_ORDERED } else { 0 });
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<LedgerMeta> {
        let mut r = Reader::new("configuration", bytes);
        let version = r.u8()?;
        if version != RECORD_VERSION && version != META_VERSION {
            return Err(r.bad(&format!(
                "format version {version}; this build reads 1 and 2"
            )));
        }
        let code = r.u8()?;
        let hash = HashKind::from_code(code).ok_or_else(|| r.bad("unknown hash kind"))?;
        let count = r.u16()? as usize;
        if count == 0 {
            return Err(r.bad("no tables"));
        }
        let mut tables: Vec<String> = Vec::with_capacity(count.min(bytes.len()));
        let mut ordered = Vec::with_capacity(count.min(bytes.len()));
        for _ in 0..count {
            let len = r.u8()? as usize;
            let name = std::str::from_utf8(r.take(len)?)
                .map_err(|_| r.bad("a table name is not UTF-8"))?
                .to_string();
            if tables.last().is_some_and(|p| *p >= name) {
                return Err(r.bad("table names out of order"));
            }
            tables.push(name);
            let flags = if version == RECORD_VERSION {
                0
            } else {
                r.u8()?
            };
            ordered.push(match flags {
                0 => false,
                FLAG_ORDERED => true,
                _ => return Err(r.bad("unknown table flags")),
            });
        }
        r.finish()?;
        Ok(LedgerMeta {
            hash,
            tables,
            ordered,
        })
    }
}

/// The commit in progress: its version and metadata, logged atomically with its updates so
/// that recovery finishes it exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) version: u64,
    pub(crate) meta: Vec<u8>,
}

impl Pending {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(13 + self.meta.len());
        out.push(RECORD_VERSION);
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&(self.meta.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.meta);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Pending> {
        let mut r = Reader::new("pending commit", bytes);
        r.version()?;
        let version = r.u64()?;
        let len = r.u32()? as usize;
        let meta = r.take(len)?.to_vec();
        r.finish()?;
        Ok(Pending { version, meta })
    }
}

/// What the ledger keeps of each version: its history leaf, every table's root (in the
/// configuration's table order) and the commit's metadata (whose hash is in the leaf).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VersionRecord {
    pub(crate) leaf: HistoryLeaf,
    pub(crate) roots: Vec<Root>,
    pub(crate) meta: Vec<u8>,
}

impl VersionRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + HISTORY_LEAF_BYTES + 2 + 33 * self.roots.len() + 4);
        out.push(RECORD_VERSION);
        out.extend_from_slice(&self.leaf.encode());
        out.extend_from_slice(&(self.roots.len() as u16).to_be_bytes());
        for root in &self.roots {
            out.push(root.kind.code());
            out.extend_from_slice(&root.hash);
        }
        out.extend_from_slice(&(self.meta.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.meta);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<VersionRecord> {
        let mut r = Reader::new("version record", bytes);
        r.version()?;
        let leaf = HistoryLeaf::decode(r.take(HISTORY_LEAF_BYTES)?)
            .map_err(|e| r.bad(&format!("its history leaf: {e}")))?;
        let count = r.u16()? as usize;
        let mut roots = Vec::with_capacity(count.min(bytes.len() / 33));
        for _ in 0..count {
            let code = r.u8()?;
            let kind = HashKind::from_code(code).ok_or_else(|| r.bad("unknown hash kind"))?;
            roots.push(Root {
                kind,
                hash: r.hash()?,
            });
        }
        let len = r.u32()? as usize;
        let meta = r.take(len)?.to_vec();
        r.finish()?;
        Ok(VersionRecord { leaf, roots, meta })
    }
}

/// What a version overwrote: for every stored key it wrote (table index, key), the value the
/// key held before (`None`: absent), sorted by table, then key, each once. Applied to the
/// tables as of version `v`, it gives them as of `v − 1`: the ledger keeps one per version in
/// its window so that the window survives a restart (`docs/ledger.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Undo {
    pub(crate) entries: Vec<(u16, Vec<u8>, Option<Vec<u8>>)>,
}

impl Undo {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let bytes: usize = (self.entries.iter())
            .map(|(_, k, v)| 11 + k.len() + v.as_ref().map_or(0, |v| 4 + v.len()))
            .sum();
        let mut out = Vec::with_capacity(5 + bytes);
        out.push(RECORD_VERSION);
        out.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for (table, key, value) in &self.entries {
            out.extend_from_slice(&table.to_be_bytes());
            out.extend_from_slice(&(key.len() as u32).to_be_bytes());
            out.extend_from_slice(key);
            match value {
                None => out.push(0),
                Some(value) => {
                    out.push(1);
                    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
                    out.extend_from_slice(value);
                }
            }
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Undo> {
        let mut r = Reader::new("undo record", bytes);
        r.version()?;
        let count = r.u32()? as usize;
        // Every entry takes at least 7 bytes: no count claims more than the bytes hold.
        let mut entries: Vec<(u16, Vec<u8>, Option<Vec<u8>>)> =
            Vec::with_capacity(count.min(bytes.len() / 7));
        for _ in 0..count {
            let table = r.u16()?;
            let len = r.u32()? as usize;
            let key = r.take(len)?.to_vec();
            let value = match r.u8()? {
                0 => None,
                1 => {
                    let len = r.u32()? as usize;
                    Some(r.take(len)?.to_vec())
                }
                _ => return Err(r.bad("unknown value flag")),
            };
            if entries
                .last()
                .is_some_and(|(t, k, _)| (*t, &k[..]) >= (table, &key[..]))
            {
                return Err(r.bad("entries out of order"));
            }
            entries.push((table, key, value));
        }
        r.finish()?;
        Ok(Undo { entries })
    }
}

/// A stored u64 (the head record).
pub(crate) fn decode_u64(what: &str, bytes: &[u8]) -> Result<u64> {
    let b: [u8; 8] = bytes
        .try_into()
        .map_err(|_| Error::corrupted(what, format!("{} bytes, not 8", bytes.len())))?;
    Ok(u64::from_be_bytes(b))
}

/// A stored hash (a history node).
pub(crate) fn decode_hash(what: &str, bytes: &[u8]) -> Result<Hash> {
    bytes
        .try_into()
        .map_err(|_| Error::corrupted(what, format!("{} bytes, not 32", bytes.len())))
}

/// One valid value of each record with fields (for tests and the fuzz target's seeds).
pub(crate) struct Samples {
    pub(crate) meta: LedgerMeta,
    pub(crate) pending: Pending,
    pub(crate) record: VersionRecord,
    pub(crate) undo: Undo,
}

/// See [`Samples`]: a configuration of one plain and one ordered table, version 7's pending
/// commit and record, and an undo record over both tables (a value, an absence, an empty
/// value).
pub(crate) fn samples() -> Samples {
    Samples {
        meta: LedgerMeta {
            hash: HashKind::Blake3,
            tables: vec!["checking".into(), "savings".into()],
            ordered: vec![false, true],
        },
        pending: Pending {
            version: 7,
            meta: b"block 7".to_vec(),
        },
        record: VersionRecord {
            leaf: HistoryLeaf {
                version: 7,
                ledger_root: [3; 32],
                meta: [4; 32],
            },
            roots: vec![
                Root::empty(HashKind::Sha256),
                Root {
                    kind: HashKind::Blake3,
                    hash: [9; 32],
                },
            ],
            meta: b"block 7".to_vec(),
        },
        undo: Undo {
            entries: vec![
                (0, b"alice".to_vec(), Some(b"50".to_vec())),
                (0, b"bob".to_vec(), None),
                (1, b"alice".to_vec(), Some(Vec::new())),
            ],
        },
    }
}

struct Reader<'a> {
    what: &'static str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(what: &'static str, bytes: &'a [u8]) -> Reader<'a> {
        Reader { what, bytes, at: 0 }
    }

    fn bad(&self, detail: &str) -> Error {
        Error::corrupted(self.what, detail)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.bytes.len() - self.at {
            return Err(self.bad("truncated"));
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn version(&mut self) -> Result<()> {
        let v = self.u8()?;
        if v != RECORD_VERSION {
            return Err(self.bad(&format!("format version {v}; this build reads 1")));
        }
        Ok(())
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn hash(&mut self) -> Result<Hash> {
        Ok(self.take(32)?.try_into().expect("32 bytes"))
    }

    fn finish(&self) -> Result<()> {
        if self.at != self.bytes.len() {
            return Err(self.bad(&format!(
                "{} bytes after its end",
                self.bytes.len() - self.at
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_every_truncation() {
        let Samples {
            meta,
            pending,
            record,
            undo,
        } = samples();
        assert_eq!(LedgerMeta::decode(&meta.encode()).unwrap(), meta);
        assert_eq!(Pending::decode(&pending.encode()).unwrap(), pending);
        assert_eq!(VersionRecord::decode(&record.encode()).unwrap(), record);
        assert_eq!(Undo::decode(&undo.encode()).unwrap(), undo);
        let mut swapped = undo.clone();
        swapped.entries.swap(0, 1);
        assert!(Undo::decode(&swapped.encode()).is_err(), "out of order");
        for bytes in [meta.encode(), pending.encode(), record.encode()] {
            for cut in 0..bytes.len() {
                let short = &bytes[..cut];
                assert!(LedgerMeta::decode(short).is_err() || cut == bytes.len());
                assert!(Pending::decode(short).is_err());
                assert!(VersionRecord::decode(short).is_err());
            }
            let mut long = bytes.clone();
            long.push(0);
            assert!(LedgerMeta::decode(&long).is_err());
            assert!(Pending::decode(&long).is_err());
            assert!(VersionRecord::decode(&long).is_err());
        }
        // (A short prefix of another record can be an empty undo record: each decoder is
        // total on its own record's truncations.)
        let bytes = undo.encode();
        for cut in 0..bytes.len() {
            assert!(Undo::decode(&bytes[..cut]).is_err());
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(Undo::decode(&long).is_err());
    }

    /// A configuration record of format version 1 (no flags byte) is still read: every table
    /// plain.
    #[test]
    fn a_version_1_configuration_is_read() {
        let mut v1 = vec![1u8, HashKind::Sha256.code(), 0, 2];
        for name in ["checking", "savings"] {
            v1.push(name.len() as u8);
            v1.extend_from_slice(name.as_bytes());
        }
        let meta = LedgerMeta::decode(&v1).unwrap();
        assert_eq!(meta.tables, ["checking", "savings"]);
        assert_eq!(meta.ordered, [false, false]);
        assert_eq!(meta.encode()[0], 2, "written as version 2");
        assert_eq!(LedgerMeta::decode(&meta.encode()).unwrap(), meta);
    }

    #[test]
    fn keys_sort_by_level_then_index_and_by_version() {
        assert!(node_key(0, 1) < node_key(0, 2));
        assert!(node_key(0, u64::MAX) < node_key(1, 0));
        assert!(version_key(255) < version_key(256));
    }
}

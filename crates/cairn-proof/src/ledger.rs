//! The ledger's structures (`docs/format/ledger.md`): the *ledger root*, which commits to every
//! table of a ledger under its name, and the *receipt*, which proves what keys held at a version
//! of the ledger to a client that trusts only a [`Digest`] of the ledger's history.
//!
//! Owns: table entries ([`table_entry_hash`]), the ledger root ([`ledger_root`],
//! [`ledger_path`]), [`Receipt`] and its encoding, and the client's check
//! ([`verify_receipt`], [`verify_receipt_at`]). May call: `history` (the RFC 9162 hashing, the
//! tree's proofs and their checks), `proof` (the state trie's multiproofs), `hash` (hash kinds).
//!
//! **The ledger root** is the RFC 9162 Merkle Tree Hash over the ledger's tables in name order,
//! each table's leaf data being its *entry*: the byte `0x02`, the number of tables (u32
//! big-endian), the table's hash-kind code, its name's length (one byte) and its name, and its
//! state root (32 bytes). A history leaf's data starts with `0x01`, so no entry is ever a history
//! leaf. A table's path to the ledger root is an RFC inclusion proof among the entries.
//!
//! Every entry states the number of tables because an RFC path alone does not fix the tree's
//! size: the path of the last of 2 tables also fits the last of 3, 5 or 9. With the count in the
//! entry, a path that leads to the ledger root proves the count, and with it the table's
//! position (one tree shape, one leaf per walk).
//!
//! **A receipt** for version `v` holds, for each table read, its state root, its path to the
//! ledger root and a multiproof of the keys read against that state root; then the version's
//! metadata hash, and the inclusion proof of leaf `v - 1` (the [`HistoryLeaf`] of `v`, its
//! ledger root and metadata hash) in the history tree of `n` leaves. A client holding the digest
//! of size `n` recomputes the ledger root from every section (they must agree), the leaf, the
//! history root (it must be the digest's), and checks the claims against each table's root.
//!
//! **Freshness.** [`verify_receipt`] accepts only a receipt for the digest's newest version
//! (`v = n`): it proves what the keys hold *now* (as of the newest commit the client has
//! accepted), not merely that they held it once, so a server cannot answer with an older value
//! and the older proof that was valid for it. [`verify_receipt_at`] accepts any version in the
//! digest: a read of the past, said to be one.

use alloc::string::String;
use alloc::vec::Vec;

use crate::error::{HistoryVerifyError, LedgerError, ReceiptDecodeError, ReceiptVerifyError};
use crate::hash::{Hash, HashKind};
use crate::history::{
    root_from_inclusion, root_of, Digest, HistoryLeaf, LEAF_PREFIX, PATH_HASHES_MAX, SIZE_MAX,
};
use crate::proof::{Claim, Proof};
use crate::reference::MemHistory;
use crate::sha256;
use crate::trie::Root;

/// The first bytes of every encoded ledger structure.
pub const LEDGER_MAGIC: [u8; 4] = *b"CRNL";
/// The format version of ledger structures this build writes and reads.
pub const LEDGER_FORMAT_VERSION: u8 = 1;
/// The first byte of a table entry's data (a [`HistoryLeaf`]'s is `0x01`).
pub const TABLE_ENTRY_TAG: u8 = 0x02;
/// The longest table name, in bytes.
pub const TABLE_NAME_BYTES_MAX: usize = 64;
/// The most tables a ledger holds: 2^16, so a table's path has at most 16 hashes.
pub const LEDGER_TABLES_MAX: usize = 1 << 16;
/// The most table sections in one receipt.
pub const RECEIPT_TABLES_MAX: usize = 255;

const TYPE_RECEIPT: u8 = 1;
const HEADER_BYTES: usize = 8;
/// Longest path of a table among [`LEDGER_TABLES_MAX`] tables.
const TABLE_PATH_MAX: usize = 16;

/// The leaf hash of a table's entry in the ledger root of `table_count` tables:
/// `SHA-256(0x00 ‖ 0x02 ‖ table_count ‖ kind ‖ len ‖ name ‖ root)`, the count a u32
/// big-endian. Cost: one SHA-256 of at most 104 bytes (two compression blocks).
///
/// The name must be 1 to [`TABLE_NAME_BYTES_MAX`] bytes (longer names are cut to 255 bytes'
/// length byte; [`ledger_root`] refuses them first).
pub fn table_entry_hash(table_count: u32, name: &[u8], root: &Root) -> Hash {
    let count = table_count.to_be_bytes();
    let head = [
        TABLE_ENTRY_TAG,
        count[0],
        count[1],
        count[2],
        count[3],
        root.kind.code(),
        u8::try_from(name.len()).unwrap_or(u8::MAX),
    ];
    sha256::digest_prefixed(LEAF_PREFIX, &[&head, name, &root.hash])
}

/// The number of `tables`, if they may form a ledger (see [`ledger_root`]).
fn check_tables(tables: &[(&[u8], Root)]) -> Result<u32, LedgerError> {
    if tables.is_empty() {
        return Err(LedgerError::NoTables);
    }
    if tables.len() > LEDGER_TABLES_MAX {
        return Err(LedgerError::TooManyTables(tables.len()));
    }
    for (i, (name, _)) in tables.iter().enumerate() {
        if name.is_empty() || name.len() > TABLE_NAME_BYTES_MAX {
            return Err(LedgerError::NameLength(name.len()));
        }
        if i > 0 && tables[i - 1].0 >= *name {
            return Err(LedgerError::OutOfOrder { index: i });
        }
    }
    // At most LEDGER_TABLES_MAX = 2^16.
    Ok(tables.len() as u32)
}

/// The ledger root of `tables`: (name, state root) in strictly increasing name order (bytes
/// compared), 1 to [`LEDGER_TABLES_MAX`] of them, names of 1 to [`TABLE_NAME_BYTES_MAX`] bytes.
/// Cost: one entry hash per table and one node hash per table less one.
///
/// ```
/// use cairn_proof::ledger::{ledger_path, ledger_root, table_entry_hash};
/// use cairn_proof::history::root_from_inclusion;
/// use cairn_proof::{HashKind, Root};
/// let empty = Root::empty(HashKind::Sha256);
/// let tables = [(&b"checking"[..], empty), (&b"savings"[..], empty)];
/// let root = ledger_root(&tables).unwrap();
/// let path = ledger_path(&tables, 1).unwrap();
/// let entry = table_entry_hash(2, b"savings", &empty);
/// assert_eq!(root_from_inclusion(&entry, 1, 2, &path), Ok(root));
/// ```
pub fn ledger_root(tables: &[(&[u8], Root)]) -> Result<Hash, LedgerError> {
    let count = check_tables(tables)?;
    let entries: Vec<Hash> = tables
        .iter()
        .map(|(name, root)| table_entry_hash(count, name, root))
        .collect();
    Ok(root_of(&entries))
}

/// The path of table `index` of `tables` to their ledger root (an RFC 9162 inclusion path
/// among the entries: at most 16 hashes). `tables` as [`ledger_root`] wants them; an index out
/// of range is [`LedgerError::OutOfOrder`] naming it. Cost: as [`ledger_root`].
pub fn ledger_path(tables: &[(&[u8], Root)], index: usize) -> Result<Vec<Hash>, LedgerError> {
    let count = check_tables(tables)?;
    if index >= tables.len() {
        return Err(LedgerError::OutOfOrder { index });
    }
    let tree = MemHistory::from_leaf_hashes(
        tables
            .iter()
            .map(|(name, root)| table_entry_hash(count, name, root)),
    );
    let proof = tree
        .prove_inclusion(index as u64, tables.len() as u64)
        .map_err(|_| LedgerError::OutOfOrder { index })?;
    Ok(proof.path)
}

/// One table of a [`Receipt`]: its root at the receipt's version, where it sits among the
/// ledger's tables, and a multiproof of the keys read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiptTable {
    /// The table's name (1 to [`TABLE_NAME_BYTES_MAX`] bytes of UTF-8).
    pub name: String,
    /// The table's state root at the receipt's version.
    pub root: Root,
    /// The table's position among the ledger's tables, in name order.
    pub index: u32,
    /// The entry's path to the ledger root ([`ledger_path`]).
    pub path: Vec<Hash>,
    /// A multiproof of the keys read against `root`.
    pub proof: Proof,
}

/// Proof of what keys of a ledger's tables held at one version (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The version proved (from 1; its history leaf is number `version - 1`).
    pub version: u64,
    /// The hash of the version's commit metadata.
    pub meta: Hash,
    /// Tables in the ledger at that version (1 to [`LEDGER_TABLES_MAX`]); every table's entry
    /// states it, so a receipt that verifies proves it.
    pub table_count: u32,
    /// The tables read, in strictly increasing name order (1 to [`RECEIPT_TABLES_MAX`]).
    pub tables: Vec<ReceiptTable>,
    /// The size of the history tree the version's leaf is proved in (the digest's size).
    pub history_size: u64,
    /// The leaf's inclusion path in that tree.
    pub history_path: Vec<Hash>,
}

/// The keys a client claims for one table of a receipt.
#[derive(Clone, Copy, Debug)]
pub struct TableClaims<'a> {
    /// The table's name.
    pub table: &'a str,
    /// What the keys hold (or that they are absent).
    pub claims: &'a [Claim<'a>],
}

impl Receipt {
    /// The ledger root every table section leads to, or why they do not agree. Cost: one entry
    /// hash and at most 16 node hashes per section.
    pub fn ledger_root(&self) -> Result<Hash, ReceiptVerifyError> {
        let mut agreed = None;
        for (section, t) in self.tables.iter().enumerate() {
            let entry = table_entry_hash(self.table_count, t.name.as_bytes(), &t.root);
            let root = root_from_inclusion(
                &entry,
                u64::from(t.index),
                u64::from(self.table_count),
                &t.path,
            )
            .map_err(|source| ReceiptVerifyError::TablePath { section, source })?;
            match agreed {
                None => agreed = Some(root),
                Some(r) if r == root => {}
                Some(_) => return Err(ReceiptVerifyError::TablesDisagree),
            }
        }
        agreed.ok_or(ReceiptVerifyError::TablesDisagree)
    }

    /// The version's history leaf as the receipt shows it.
    pub fn leaf(&self) -> Result<HistoryLeaf, ReceiptVerifyError> {
        Ok(HistoryLeaf {
            version: self.version,
            ledger_root: self.ledger_root()?,
            meta: self.meta,
        })
    }

    /// Bytes of the encoding.
    pub fn encoded_len(&self) -> usize {
        HEADER_BYTES
            + 8
            + 32
            + 8
            + 1
            + 32 * self.history_path.len()
            + 4
            + 1
            + self
                .tables
                .iter()
                .map(|t| {
                    1 + t.name.len()
                        + 1
                        + 32
                        + 4
                        + 1
                        + 32 * t.path.len()
                        + 4
                        + t.proof.encoded_len()
                })
                .sum::<usize>()
    }

    /// The encoding (`docs/format/ledger.md`). A receipt that breaks the format's bounds (say,
    /// a name too long) encodes, but does not decode.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&LEDGER_MAGIC);
        out.extend_from_slice(&[LEDGER_FORMAT_VERSION, TYPE_RECEIPT, 0, 0]);
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.meta);
        out.extend_from_slice(&self.history_size.to_be_bytes());
        push_path(&mut out, &self.history_path);
        out.extend_from_slice(&self.table_count.to_be_bytes());
        out.push(u8::try_from(self.tables.len()).unwrap_or(u8::MAX));
        for t in &self.tables {
            out.push(u8::try_from(t.name.len()).unwrap_or(u8::MAX));
            out.extend_from_slice(t.name.as_bytes());
            out.push(t.root.kind.code());
            out.extend_from_slice(&t.root.hash);
            out.extend_from_slice(&t.index.to_be_bytes());
            push_path(&mut out, &t.path);
            let proof = t.proof.encode();
            out.extend_from_slice(&u32::try_from(proof.len()).unwrap_or(u32::MAX).to_be_bytes());
            out.extend_from_slice(&proof);
        }
        out
    }

    /// A receipt from its encoding. Total and canonical: any bytes give a receipt or an error,
    /// and a receipt re-encodes to the bytes it came from. It checks the form (bounds, name
    /// order, each trie proof's encoding and its hash kind against its root's); the proofs are
    /// checked by [`verify_receipt`].
    pub fn decode(bytes: &[u8]) -> Result<Receipt, ReceiptDecodeError> {
        let mut r = Reader { bytes, at: 0 };
        let magic = r.take(4, "magic")?;
        if magic != LEDGER_MAGIC {
            return Err(ReceiptDecodeError::BadMagic);
        }
        let format = r.u8("format version")?;
        if format != LEDGER_FORMAT_VERSION {
            return Err(ReceiptDecodeError::UnsupportedVersion(format));
        }
        let ty = r.u8("structure type")?;
        if ty != TYPE_RECEIPT {
            return Err(ReceiptDecodeError::WrongType {
                expected: "receipt",
                found: ty,
            });
        }
        if r.take(2, "reserved")? != [0, 0] {
            return Err(ReceiptDecodeError::Reserved);
        }
        let version = r.u64("version")?;
        let meta = r.hash("meta")?;
        let history_size = r.u64("history size")?;
        if history_size > SIZE_MAX {
            return Err(field("history size", "above 2^63"));
        }
        if version == 0 || version > history_size {
            return Err(field("version", "0 or above the history size"));
        }
        let history_path = r.path("history path", PATH_HASHES_MAX)?;
        let table_count = r.u32("table count")?;
        if table_count == 0 || table_count as usize > LEDGER_TABLES_MAX {
            return Err(field("table count", "0 or above 65,536"));
        }
        let sections = usize::from(r.u8("table sections")?);
        if sections == 0 {
            return Err(field("table sections", "none"));
        }
        let mut tables: Vec<ReceiptTable> = Vec::with_capacity(sections);
        for section in 0..sections {
            let len = usize::from(r.u8("table name length")?);
            if len == 0 || len > TABLE_NAME_BYTES_MAX {
                return Err(field("table name", "0 or more than 64 bytes"));
            }
            let name = core::str::from_utf8(r.take(len, "table name")?)
                .map_err(|_| field("table name", "not UTF-8"))?;
            if tables.last().is_some_and(|p| p.name.as_str() >= name) {
                return Err(field("table name", "not after the previous section's"));
            }
            let code = r.u8("hash kind")?;
            let kind =
                HashKind::from_code(code).ok_or(field("hash kind", "names no hash function"))?;
            let root = Root {
                kind,
                hash: r.hash("table root")?,
            };
            let index = r.u32("table index")?;
            if index >= table_count {
                return Err(field("table index", "not below the table count"));
            }
            let path = r.path("table path", TABLE_PATH_MAX)?;
            let proof_len = r.u32("proof length")? as usize;
            let proof_bytes = r.take(proof_len, "trie proof")?;
            let proof = Proof::decode(proof_bytes)
                .map_err(|source| ReceiptDecodeError::Proof { section, source })?;
            if proof.kind() != kind {
                return Err(field(
                    "trie proof",
                    "hashes with another kind than its root",
                ));
            }
            tables.push(ReceiptTable {
                name: String::from(name),
                root,
                index,
                path,
                proof,
            });
        }
        if r.at != bytes.len() {
            return Err(ReceiptDecodeError::TrailingBytes(bytes.len() - r.at));
        }
        Ok(Receipt {
            version,
            meta,
            table_count,
            tables,
            history_size,
            history_path,
        })
    }
}

/// Checks `receipt` against `digest`, a digest the client trusts, for a read of the present:
/// the receipt must prove the digest's newest version (`receipt.version == digest.size`), then
/// as [`verify_receipt_at`]. A receipt for an older version is [`ReceiptVerifyError::Stale`]
/// even though it may be valid for that version: this is what makes a Cairn read fresh.
///
/// Cost: one entry hash and at most 16 node hashes per table section, at most 64 node hashes
/// for the history path, and each trie proof's check (about `log₂ n` node hashes per key).
pub fn verify_receipt(
    receipt: &Receipt,
    reads: &[TableClaims<'_>],
    digest: &Digest,
) -> Result<(), ReceiptVerifyError> {
    if receipt.version != digest.size {
        return Err(ReceiptVerifyError::Stale {
            version: receipt.version,
            size: digest.size,
        });
    }
    verify_receipt_at(receipt, reads, digest)
}

/// Checks `receipt` against `digest` for a read of version `receipt.version`, which may be
/// older than the digest's newest: every table section leads to one ledger root; the version's
/// leaf (version, that root, the metadata hash) sits at `version - 1` in the tree `digest`
/// describes; every claim verifies against the root of the table it names (a table the receipt
/// has no section for is [`ReceiptVerifyError::NoSuchTable`]). Cost: as [`verify_receipt`].
pub fn verify_receipt_at(
    receipt: &Receipt,
    reads: &[TableClaims<'_>],
    digest: &Digest,
) -> Result<(), ReceiptVerifyError> {
    if receipt.history_size != digest.size {
        return Err(ReceiptVerifyError::SizeMismatch {
            receipt: receipt.history_size,
            digest: digest.size,
        });
    }
    if receipt.version == 0 || receipt.version > digest.size {
        return Err(ReceiptVerifyError::VersionOutOfRange {
            version: receipt.version,
            size: digest.size,
        });
    }
    let leaf = receipt.leaf()?;
    let root = root_from_inclusion(
        &leaf.hash(),
        receipt.version - 1,
        digest.size,
        &receipt.history_path,
    )
    .map_err(ReceiptVerifyError::History)?;
    if root != digest.root {
        return Err(ReceiptVerifyError::History(
            HistoryVerifyError::RootMismatch,
        ));
    }
    for read in reads {
        let section = receipt
            .tables
            .iter()
            .find(|t| t.name == read.table)
            .ok_or_else(|| ReceiptVerifyError::NoSuchTable(String::from(read.table)))?;
        section
            .proof
            .verify(&section.root, read.claims)
            .map_err(|source| ReceiptVerifyError::Trie {
                table: section.name.clone(),
                source,
            })?;
    }
    Ok(())
}

fn field(what: &'static str, rule: &'static str) -> ReceiptDecodeError {
    ReceiptDecodeError::Field { what, rule }
}

fn push_path(out: &mut Vec<u8>, path: &[Hash]) {
    // A path too long to decode keeps a count the decoder refuses.
    out.push(u8::try_from(path.len()).unwrap_or(u8::MAX));
    for h in path {
        out.extend_from_slice(h);
    }
}

/// Reads an encoding front to back; every read checks the length first.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ReceiptDecodeError> {
        let remaining = self.bytes.len() - self.at;
        if n > remaining {
            return Err(ReceiptDecodeError::Truncated {
                what,
                needed: n - remaining,
            });
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, ReceiptDecodeError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, ReceiptDecodeError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_be_bytes(b))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, ReceiptDecodeError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_be_bytes(b))
    }

    fn hash(&mut self, what: &'static str) -> Result<Hash, ReceiptDecodeError> {
        let mut h = [0u8; 32];
        h.copy_from_slice(self.take(32, what)?);
        Ok(h)
    }

    fn path(&mut self, what: &'static str, max: usize) -> Result<Vec<Hash>, ReceiptDecodeError> {
        let count = usize::from(self.u8(what)?);
        if count > max {
            return Err(field(what, "more hashes than any tree needs"));
        }
        let mut path = Vec::with_capacity(count);
        for _ in 0..count {
            path.push(self.hash(what)?);
        }
        Ok(path)
    }
}

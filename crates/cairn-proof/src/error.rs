//! The crate's errors: what a decoder, a builder or a verifier refuses, and why (the state
//! trie's proofs, then the history tree's).

use crate::hash::HashKind;

/// Why bytes are not a proof (`docs/format/proof.md`). Decoding never panics and never
/// allocates more than about five times the input's length.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes end before the structure they describe does.
    #[error("proof truncated: {what} needs {needed} more bytes")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes missing.
        needed: usize,
    },
    /// The first four bytes are not `CRNP`.
    #[error("not a Cairn proof (bad magic)")]
    BadMagic,
    /// A format version this build does not know.
    #[error("proof format version {0} is not supported (this build reads version 1)")]
    UnsupportedVersion(u8),
    /// A hash-kind code that names no hash function.
    #[error("unknown hash kind code {0}")]
    UnknownHashKind(u8),
    /// A form code other than full (0) or compact (1), or the wrong form for the caller.
    #[error("proof form {0} is not the one expected")]
    Form(u8),
    /// A reserved byte or padding bit that is not zero.
    #[error("reserved bits are not zero ({0})")]
    Reserved(&'static str),
    /// The node stream is not exactly one complete tree.
    #[error("malformed node tree: {0}")]
    Tree(&'static str),
    /// An internal node at depth 256 or more (a key path has 256 bits).
    #[error("node tree deeper than a key path")]
    TooDeep,
    /// Bytes left over after the proof.
    #[error("{0} bytes after the end of the proof")]
    TrailingBytes(usize),
    /// A compact proof's levels or graft positions are out of range or out of order.
    #[error("compact proof: {0}")]
    Compact(&'static str),
}

/// Why a proof does not establish the claims against a root.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The proof's bytes do not decode.
    #[error("proof does not decode: {0}")]
    Decode(#[from] DecodeError),
    /// A root given as bytes is not 32 bytes long.
    #[error("a root is 32 bytes, not {len}")]
    RootLength {
        /// The length received.
        len: usize,
    },
    /// The proof was made with another hash function than the root.
    #[error("proof hashes with {proof:?}, the root with {root:?}")]
    HashKindMismatch {
        /// The root's kind.
        root: HashKind,
        /// The proof's kind.
        proof: HashKind,
    },
    /// The proof does not hash to the root: it was tampered with, or proves another state.
    #[error("the proof does not hash to the root")]
    RootMismatch,
    /// A leaf sits where its key path cannot lead.
    #[error("a leaf in the proof sits off its key path")]
    MisplacedLeaf,
    /// The proof stops (at an opaque hash) before reaching claim `claim`'s key.
    #[error("the proof does not cover claim {claim}")]
    NotCovered {
        /// Index of the claim in the caller's slice.
        claim: usize,
    },
    /// Claim `claim` says the key is present, but the proof shows it absent.
    #[error("claim {claim}: the key is absent")]
    Absent {
        /// Index of the claim.
        claim: usize,
    },
    /// Claim `claim` says the key is absent, but the proof shows it present.
    #[error("claim {claim}: the key is present")]
    Present {
        /// Index of the claim.
        claim: usize,
    },
    /// Claim `claim` names another value or blob than the proof holds for the key.
    #[error("claim {claim}: the key holds another value or blob")]
    ValueMismatch {
        /// Index of the claim.
        claim: usize,
    },
    /// A compact proof's levels differ from the witness's.
    #[error("compact proof omits {proof} levels, the witness holds {witness}")]
    WitnessLevels {
        /// Levels the witness holds.
        witness: u8,
        /// Levels the proof omits.
        proof: u8,
    },
    /// A witness of the top levels whose shape does not stop at its level.
    #[error("the witness is not cut at depth {0}")]
    WitnessShape(u8),
    /// A graft of a compact proof at a position the witness has no opaque node for, or whose
    /// hash differs from the witness's node there.
    #[error("compact proof graft at position {position} does not fit the witness")]
    Graft {
        /// The graft's position (its prefix as an integer).
        position: u32,
    },
}

/// Why a [`crate::RootBuilder`] or [`crate::ProofWriter`] refused its input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Leaf `index` (counting from 0) does not come after the previous one in key-path order.
    #[error("leaf {index} is not after the previous leaf in key-path order")]
    OutOfOrder {
        /// Its position in the input.
        index: u64,
    },
    /// The nodes written do not form one complete tree.
    #[error("proof nodes do not form one tree: {0}")]
    Tree(#[from] DecodeError),
}

/// Why [`crate::Proof::root_after`] cannot give the root after a set of updates: the proof is
/// not one of the old root, or it does not hold enough of the trie to know the new one. Every
/// variant is a refusal; none comes with a root.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RootAfterError {
    /// The proof's bytes do not decode ([`crate::root_after`] only).
    #[error("proof does not decode: {0}")]
    Decode(#[from] DecodeError),
    /// The proof was made with another hash function than the old root.
    #[error("proof hashes with {proof:?}, the root with {root:?}")]
    HashKindMismatch {
        /// The old root's kind.
        root: HashKind,
        /// The proof's kind.
        proof: HashKind,
    },
    /// The proof does not hash to the old root: it was tampered with, or proves another state.
    /// Reported before any other finding about the updates, as [`VerifyError::RootMismatch`] is.
    #[error("the proof does not hash to the old root")]
    RootMismatch,
    /// A leaf sits where its key path cannot lead (no trie has such a proof).
    #[error("a leaf in the proof sits off its key path")]
    MisplacedLeaf,
    /// Update `update`'s key path ends at an opaque subtree (a `Hash` node): the proof neither
    /// opens the key's leaf nor shows the key absent, so what the update changes is unknown. A
    /// proof of the key's presence or absence ([`crate::Proof::verify`] would accept a claim
    /// about it) never ends so.
    #[error("the proof does not cover update {update}")]
    NotCovered {
        /// Index of the update in the caller's slice.
        update: usize,
    },
    /// Deletes empty a subtree whose sibling the proof gives only by its hash: if that sibling
    /// holds a single leaf, the leaf moves up (a subtree of one leaf collapses to it) and the
    /// root is one hash; if it holds more, the sibling stays where it is and the root is
    /// another. The proof cannot tell which. A prover that wants deletes verifiable opens the
    /// sibling of every node on a deleted key's path (a leaf, or an internal node with its two
    /// children given by hash): [`crate::reference::MemTrie::prove_updates`] does.
    #[error("update {update} empties a subtree whose sibling at depth {depth} is not opened")]
    SiblingNotOpened {
        /// Index of a delete (in the caller's slice) below the emptied subtree.
        update: usize,
        /// Depth of the opaque sibling: its position is the first `depth` bits of that
        /// delete's key path with the last one flipped.
        depth: usize,
    },
}

/// Why bytes are not a history-tree digest, proof or leaf (`docs/format/history.md`). Decoding
/// never panics and never allocates more than [`crate::history::PATH_HASHES_MAX`] hashes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryDecodeError {
    /// The bytes end before the structure they describe does.
    #[error("history structure truncated: {what} needs {needed} more bytes")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes missing.
        needed: usize,
    },
    /// The first four bytes are not `CRNH`.
    #[error("not a Cairn history digest or proof (bad magic)")]
    BadMagic,
    /// A format version (of the structure, or of a leaf) this build does not know.
    #[error("history format version {0} is not supported (this build reads version 1)")]
    UnsupportedVersion(u8),
    /// A hash-kind code other than SHA-256's (1), the only one the history tree uses.
    #[error("history hash kind {0} is not supported (only SHA-256, code 1)")]
    UnknownHashKind(u8),
    /// The bytes hold another structure (a digest where a proof was expected, or the reverse).
    #[error("expected a history {expected}, found structure type {found}")]
    WrongType {
        /// The structure the caller asked for.
        expected: &'static str,
        /// The type code found.
        found: u8,
    },
    /// The reserved header byte is not zero.
    #[error("reserved header byte is not zero")]
    Reserved,
    /// A tree size above [`crate::history::SIZE_MAX`].
    #[error("{what} {size} is above the largest tree size (2^63)")]
    SizeTooLarge {
        /// The field.
        what: &'static str,
        /// The size read.
        size: u64,
    },
    /// A path count above [`crate::history::PATH_HASHES_MAX`].
    #[error("proof path of {0} hashes is longer than 64")]
    PathTooLong(usize),
    /// Bytes left over after the structure.
    #[error("{0} bytes after the end of the history structure")]
    TrailingBytes(usize),
}

/// Why a history-tree proof does not establish its claim against the digests (RFC 9162
/// §2.1.3.2 and §2.1.4.2, with the edge rules of `docs/format/history.md`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryVerifyError {
    /// A digest claims a tree above [`crate::history::SIZE_MAX`] leaves.
    #[error("tree size {size} is above the largest tree size (2^63)")]
    SizeTooLarge {
        /// The size claimed.
        size: u64,
    },
    /// The proof is about a tree of another size than the digest's.
    #[error("the proof is for a {what} of {proof} leaves, the digest has {digest}")]
    SizeMismatch {
        /// Which tree: `tree`, `old tree` or `new tree`.
        what: &'static str,
        /// The proof's size.
        proof: u64,
        /// The digest's size.
        digest: u64,
    },
    /// The leaf index is not inside the tree.
    #[error("leaf index {index} is not below the tree size {size}")]
    IndexBeyondSize {
        /// The proof's index.
        index: u64,
        /// The tree's size.
        size: u64,
    },
    /// A consistency proof from the empty tree: meaningless, so refused.
    #[error("no consistency proof from the empty tree")]
    EmptyOld,
    /// The old tree is larger than the new one.
    #[error("old size {old_size} is above the new size {new_size}")]
    OldAfterNew {
        /// The old digest's size.
        old_size: u64,
        /// The new digest's size.
        new_size: u64,
    },
    /// The path holds more or fewer hashes than the sizes (and index) need.
    #[error("the proof path holds {actual} hashes, the sizes need exactly {expected}")]
    PathLength {
        /// Hashes the sizes need.
        expected: usize,
        /// Hashes the proof holds.
        actual: usize,
    },
    /// An inclusion proof does not hash to the digest's root, or two digests of the same size
    /// have different roots.
    #[error("the proof does not hash to the root")]
    RootMismatch,
    /// A consistency proof does not hash to the old digest's root.
    #[error("the consistency proof does not hash to the old root")]
    OldRootMismatch,
    /// A consistency proof does not hash to the new digest's root.
    #[error("the consistency proof does not hash to the new root")]
    NewRootMismatch,
}

/// Why a history tree cannot make the proof or digest asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryProveError {
    /// A size beyond the leaves the tree holds.
    #[error("size {size} is beyond the tree's {len} leaves")]
    SizeBeyondTree {
        /// The size asked for.
        size: u64,
        /// The leaves the tree holds.
        len: u64,
    },
    /// A leaf index not below the size.
    #[error("leaf index {index} is not below the size {size}")]
    IndexBeyondSize {
        /// The index asked for.
        index: u64,
        /// The size asked for.
        size: u64,
    },
    /// A consistency proof from the empty tree (there is none).
    #[error("no consistency proof from the empty tree")]
    EmptyOld,
    /// A consistency proof from a larger tree to a smaller one.
    #[error("old size {old_size} is above the new size {new_size}")]
    OldAfterNew {
        /// The old size asked for.
        old_size: u64,
        /// The new size asked for.
        new_size: u64,
    },
}

/// Why a set of tables has no ledger root ([`crate::ledger::ledger_root`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// A ledger holds at least one table.
    #[error("a ledger holds at least one table")]
    NoTables,
    /// More tables than [`crate::ledger::LEDGER_TABLES_MAX`].
    #[error("{0} tables is more than a ledger holds (65,536)")]
    TooManyTables(usize),
    /// A table name of 0 or more than [`crate::ledger::TABLE_NAME_BYTES_MAX`] bytes.
    #[error("a table name of {0} bytes (1 to 64 allowed)")]
    NameLength(usize),
    /// Table `index` (from 0) does not come after the previous one in name order (or repeats
    /// its name).
    #[error("table {index} is not after the previous table in name order")]
    OutOfOrder {
        /// Its position in the input.
        index: usize,
    },
}

/// Why bytes are not a ledger receipt (`docs/format/ledger.md`). Decoding never panics and
/// allocates at most about the input's length.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptDecodeError {
    /// The bytes end before the structure they describe does.
    #[error("receipt truncated: {what} needs {needed} more bytes")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes missing.
        needed: usize,
    },
    /// The first four bytes are not `CRNL`.
    #[error("not a Cairn ledger receipt (bad magic)")]
    BadMagic,
    /// A format version this build does not know.
    #[error("ledger format version {0} is not supported (this build reads version 1)")]
    UnsupportedVersion(u8),
    /// Another structure type than the one asked for.
    #[error("expected a ledger {expected}, found structure type {found}")]
    WrongType {
        /// The structure the caller asked for.
        expected: &'static str,
        /// The type code found.
        found: u8,
    },
    /// A reserved header byte is not zero.
    #[error("reserved header byte is not zero")]
    Reserved,
    /// A field breaks the format's rules (`docs/format/ledger.md`): named, with the rule.
    #[error("receipt field {what}: {rule}")]
    Field {
        /// The field.
        what: &'static str,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A table section's trie proof does not decode.
    #[error("the trie proof of table section {section} does not decode: {source}")]
    Proof {
        /// The section (from 0).
        section: usize,
        /// Why.
        source: DecodeError,
    },
    /// Bytes left over after the receipt.
    #[error("{0} bytes after the end of the receipt")]
    TrailingBytes(usize),
}

/// Why a receipt does not establish its claims against a digest
/// ([`crate::ledger::verify_receipt`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptVerifyError {
    /// The receipt proves a version older than the digest's newest: it shows what a key held
    /// then, not what it holds now (a stale answer).
    #[error("the receipt proves version {version}, the digest's newest is {size}: stale")]
    Stale {
        /// The receipt's version.
        version: u64,
        /// The digest's size (its newest version).
        size: u64,
    },
    /// The receipt's history proof is against another tree size than the digest's.
    #[error("the receipt's history proof is for {receipt} versions, the digest has {digest}")]
    SizeMismatch {
        /// The receipt's tree size.
        receipt: u64,
        /// The digest's size.
        digest: u64,
    },
    /// A version of 0 or above the tree size (version `v` is leaf `v - 1`).
    #[error("version {version} is not in a history of {size} versions")]
    VersionOutOfRange {
        /// The receipt's version.
        version: u64,
        /// The receipt's tree size.
        size: u64,
    },
    /// A table section's path to the ledger root does not check.
    #[error("table section {section}: its path to the ledger root: {source}")]
    TablePath {
        /// The section (from 0).
        section: usize,
        /// Why.
        source: HistoryVerifyError,
    },
    /// Two table sections lead to different ledger roots.
    #[error("table sections lead to different ledger roots")]
    TablesDisagree,
    /// The commit's leaf is not in the digest's tree.
    #[error("the version's leaf is not in the digest's tree: {0}")]
    History(HistoryVerifyError),
    /// A claim names a table the receipt has no section for.
    #[error("the receipt proves nothing about table {0:?}")]
    NoSuchTable(alloc::string::String),
    /// A table's claims do not verify against its root.
    #[error("table {table:?}: {source}")]
    Trie {
        /// The table.
        table: alloc::string::String,
        /// Why.
        source: VerifyError,
    },
}

/// Why bytes are not a link or a range answer (`docs/format/ledger.md`). Decoding never panics
/// and allocates at most about the input's length.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeDecodeError {
    /// The bytes end before the structure they describe does.
    #[error("range structure truncated: {what} needs {needed} more bytes")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes missing.
        needed: usize,
    },
    /// The first four bytes are not `CRNL`.
    #[error("not a Cairn range answer (bad magic)")]
    BadMagic,
    /// A format version this build does not know.
    #[error("ledger format version {0} is not supported (this build reads version 1)")]
    UnsupportedVersion(u8),
    /// Another structure type than a range answer (2).
    #[error("expected a range answer (type 2), found structure type {0}")]
    WrongType(u8),
    /// A field breaks the format's rules: named, with the rule.
    #[error("range field {0}: {1}")]
    Field(&'static str, &'static str),
    /// Bytes left over after the structure.
    #[error("{0} bytes after the end of the range structure")]
    TrailingBytes(usize),
}

/// Why a range answer is not shown complete and correct by its receipt
/// ([`crate::range::verify_range`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeVerifyError {
    /// The answer's shape breaks a rule that needs no proof (bounds, order, the keys around
    /// the range).
    #[error("range answer: {0}")]
    Shape(&'static str),
    /// The receipt does not prove the answer's links.
    #[error("range answer: {0}")]
    Receipt(ReceiptVerifyError),
}

/// Why shards' subtrees or proofs do not make a global root or a proof against it
/// ([`crate::shard`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// More shard bits than [`crate::shard::SHARD_BITS_MAX`].
    #[error("{0} shard bits is more than {max}", max = crate::shard::SHARD_BITS_MAX)]
    Bits(u8),
    /// A shard number beyond the shard count.
    #[error("shard {shard} does not exist (there are {shards})")]
    Shard {
        /// The shard named.
        shard: u32,
        /// The number of shards.
        shards: u32,
    },
    /// Not one subtree per shard.
    #[error("{got} shard subtrees for {expected} shards")]
    ShardCount {
        /// The number of shards.
        expected: u32,
        /// The subtrees given.
        got: usize,
    },
    /// A root or proof made with another hash function than the shards'.
    #[error("hashed with {got:?}, the shards with {expected:?}")]
    HashKindMismatch {
        /// The shards' hash function.
        expected: HashKind,
        /// The one given.
        got: HashKind,
    },
    /// A top witness that does not hash to the shard table's root.
    #[error("the witness does not check against its root: {0}")]
    Witness(VerifyError),
    /// A top witness that does not open the shard's path down to its subtree.
    #[error("the witness does not reach shard {shard}'s subtree")]
    WitnessShape {
        /// The shard.
        shard: u32,
    },
    /// A shard's table or subtree holds a key that belongs to another shard.
    #[error("shard {shard} holds a key of another shard")]
    ForeignKey {
        /// The shard.
        shard: u32,
    },
    /// A proof that does not hash to the root of the contents the global root holds for its
    /// shard: another version, another shard's proof, or a tampered one.
    #[error("the proof for shard {shard} is not of the shard's contents under this root")]
    StaleProof {
        /// The shard.
        shard: u32,
    },
    /// Two proofs for one shard.
    #[error("two proofs for shard {shard}")]
    DuplicateShard {
        /// The shard.
        shard: u32,
    },
    /// The proof built does not form one tree (a bug in this crate, never the input's fault).
    #[error("the lifted proof is not one tree: {0}")]
    Build(BuildError),
}

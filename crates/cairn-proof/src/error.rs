//! The crate's errors: what a decoder, a builder or the verifier refuses, and why.

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

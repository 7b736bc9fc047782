//! The bytes a replicated ledger stores for Raft (`docs/format/raft.md`): a version byte, then
//! JSON of openraft's types. Total decoders: any input gives a value or a typed error, never a
//! panic; the fuzz target `raft_records` runs them.
//!
//! Owns: [`FORMAT_VERSION`], [`FormatError`], the encoders and decoders of entries, votes, log
//! ids, the applied state, snapshots' metadata and the records of transactions across shards ([`PreparedTx`],
//! [`Decision`], the list of prepared ones). May call: openraft's types, `serde_json`. Must never touch:
//! storage (callers read and write the bytes).

use openraft::alias::{EntryOf, LogIdOf, SnapshotMetaOf, StoredMembershipOf, VoteOf};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::command::Write;
use crate::TypeConfig;

/// The version byte in front of every value; this build writes and reads version 1.
pub const FORMAT_VERSION: u8 = 1;

/// Why stored bytes are not what they should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// No bytes at all.
    #[error("{what} is empty")]
    Empty {
        /// What was being read.
        what: &'static str,
    },
    /// A version byte this build does not read.
    #[error("{what} has format version {found}; this build reads {FORMAT_VERSION}")]
    Version {
        /// What was being read.
        what: &'static str,
        /// The version byte found.
        found: u8,
    },
    /// The JSON does not decode as the type expected.
    #[error("{what} does not decode: {detail}")]
    Json {
        /// What was being read.
        what: &'static str,
        /// The decoder's message.
        detail: String,
    },
}

impl From<FormatError> for std::io::Error {
    fn from(e: FormatError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION];
    // Serializing these types to a Vec cannot fail: every map key is a string or a number.
    serde_json::to_writer(&mut out, value).expect("openraft's types serialize to JSON");
    out
}

fn decode<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, FormatError> {
    match bytes.split_first() {
        Some((&FORMAT_VERSION, body)) => {
            serde_json::from_slice(body).map_err(|e| FormatError::Json {
                what,
                detail: e.to_string(),
            })
        }
        Some((&found, _)) => Err(FormatError::Version { what, found }),
        None => Err(FormatError::Empty { what }),
    }
}

/// The stored form of a log entry.
pub fn encode_entry(entry: &EntryOf<TypeConfig>) -> Vec<u8> {
    encode(entry)
}

/// A log entry from its stored form.
pub fn decode_entry(bytes: &[u8]) -> Result<EntryOf<TypeConfig>, FormatError> {
    decode(bytes, "a raft log entry")
}

/// The stored form of a vote.
pub fn encode_vote(vote: &VoteOf<TypeConfig>) -> Vec<u8> {
    encode(vote)
}

/// A vote from its stored form.
pub fn decode_vote(bytes: &[u8]) -> Result<VoteOf<TypeConfig>, FormatError> {
    decode(bytes, "a raft vote")
}

/// The stored form of a log id (the committed and purged ids).
pub fn encode_log_id(id: &LogIdOf<TypeConfig>) -> Vec<u8> {
    encode(id)
}

/// A log id from its stored form.
pub fn decode_log_id(bytes: &[u8]) -> Result<LogIdOf<TypeConfig>, FormatError> {
    decode(bytes, "a raft log id")
}

/// What applying stores in a ledger version: the entry's log id and the membership in force.
pub type Applied = (LogIdOf<TypeConfig>, StoredMembershipOf<TypeConfig>);

/// The stored form of the applied state.
pub fn encode_applied(applied: &Applied) -> Vec<u8> {
    encode(applied)
}

/// The applied state from its stored form.
pub fn decode_applied(bytes: &[u8]) -> Result<Applied, FormatError> {
    decode(bytes, "the raft applied state")
}

/// The stored form of a snapshot's metadata (in a snapshot file, `crate::SnapshotData`).
pub fn encode_snapshot_meta(meta: &SnapshotMetaOf<TypeConfig>) -> Vec<u8> {
    encode(meta)
}

/// A snapshot's metadata from its stored form.
pub fn decode_snapshot_meta(bytes: &[u8]) -> Result<SnapshotMetaOf<TypeConfig>, FormatError> {
    decode(bytes, "a snapshot's metadata")
}

/// A transaction prepared on a shard and not yet decided there (`tx/p/<id>` in the raft table):
/// what its commit will write and which keys it holds until then.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedTx {
    /// The shard whose decision is the transaction's.
    pub primary: u32,
    /// Every shard the transaction touches.
    pub shards: Vec<u32>,
    /// The keys it holds here, as `(table, key)`: those it expected and those it writes.
    pub held: Vec<(String, Vec<u8>)>,
    /// Its writes here, made by its commit.
    pub writes: Vec<Write>,
    /// The metadata of the version its commit makes.
    pub meta: Vec<u8>,
}

/// How a shard decided a transaction (`tx/d/<id>` in the raft table): kept, so that a
/// repeated or late command about it answers the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Decision {
    /// Its writes were made.
    Commit,
    /// Its writes were dropped.
    Abort,
}

/// The stored form of a prepared transaction.
pub fn encode_prepared(tx: &PreparedTx) -> Vec<u8> {
    encode(tx)
}

/// A prepared transaction from its stored form.
pub fn decode_prepared(bytes: &[u8]) -> Result<PreparedTx, FormatError> {
    decode(bytes, "a prepared transaction")
}

/// The stored form of a decision.
pub fn encode_decision(d: Decision) -> Vec<u8> {
    encode(&d)
}

/// A decision from its stored form.
pub fn decode_decision(bytes: &[u8]) -> Result<Decision, FormatError> {
    decode(bytes, "a transaction's decision")
}

/// The stored form of the ids of the transactions prepared and not decided (`tx/open`).
pub fn encode_open(ids: &[String]) -> Vec<u8> {
    encode(&ids)
}

/// The ids of the prepared transactions from their stored form.
pub fn decode_open(bytes: &[u8]) -> Result<Vec<String>, FormatError> {
    decode(bytes, "the list of prepared transactions")
}

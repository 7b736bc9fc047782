//! The messages of the server's API: one Rust definition per message that is both a protobuf
//! message (through `prost`'s derive: `application/x-protobuf` bodies) and a JSON object
//! (through `serde`: `application/json` bodies), so that the two encodings cannot drift.
//!
//! Owns: every request and response body, and how bytes appear in JSON (lowercase hex strings;
//! an absent value is `null`). May call: `prost`, `serde`, `hex`, `cairn-proof`'s digest type.
//! Must never touch: the ledger, HTTP. A crate of its own so that clients (`cairn-client`, the
//! benchmarks) share the server's messages without linking the server.
//!
//! Why protobuf: a schema'd, compact, length-delimited binary encoding with decoders in every
//! language the ledger's users write (Go, Python, Java, C++), readable by `protoc --decode`,
//! and what gRPC carries, should the server grow a tonic front. The proofs inside (receipts,
//! digests, consistency proofs, range answers) stay in their own documented encodings
//! (`docs/format/ledger.md`, `docs/format/history.md`) as `bytes` fields: a client verifies
//! the bytes the ledger made, not a re-encoding of them. The schema, as a `.proto` file for
//! other languages, is in `docs/server.md`; `crates/cairn-server/tests/wire.rs` checks it against these messages.
//!
//! Decoding is total: any bytes give a message or an error (prost and serde_json both are),
//! and `fuzz/fuzz_targets/server_requests.rs` feeds arbitrary bytes to every request message.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// Serde helpers: bytes as lowercase hex strings in JSON.
mod hexes {
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    /// One byte string.
    pub(crate) mod one {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(&hex::encode(bytes))
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
            let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
            hex::decode(text.as_bytes()).map_err(D::Error::custom)
        }
    }

    /// A list of byte strings.
    pub(crate) mod list {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(list: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(list.iter().map(hex::encode))
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Vec<Vec<u8>>, D::Error> {
            let texts = <Vec<std::borrow::Cow<'de, str>>>::deserialize(d)?;
            texts
                .iter()
                .map(|t| hex::decode(t.as_bytes()).map_err(D::Error::custom))
                .collect()
        }
    }

    /// A byte string or nothing (`null`, or the field left out).
    pub(crate) mod maybe {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(
            bytes: &Option<Vec<u8>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match bytes {
                Some(b) => s.serialize_some(&hex::encode(b)),
                None => s.serialize_none(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<Vec<u8>>, D::Error> {
            let text = <Option<std::borrow::Cow<'de, str>>>::deserialize(d)?;
            text.map(|t| hex::decode(t.as_bytes()).map_err(D::Error::custom))
                .transpose()
        }
    }
}

/// A ledger's digest: the size of its history (the newest version) and the root of its
/// history tree. What a client keeps and checks everything against.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct Digest {
    /// Versions in the history.
    #[prost(uint64, tag = "1")]
    pub size: u64,
    /// The history tree's root (32 bytes).
    #[prost(bytes = "vec", tag = "2")]
    #[serde(with = "hexes::one")]
    pub root: Vec<u8>,
}

impl From<cairn_proof::Digest> for Digest {
    fn from(d: cairn_proof::Digest) -> Digest {
        Digest {
            size: d.size,
            root: d.root.to_vec(),
        }
    }
}

impl Digest {
    /// The verifier's digest, if the root is 32 bytes.
    pub fn to_proof(&self) -> Option<cairn_proof::Digest> {
        Some(cairn_proof::Digest {
            size: self.size,
            root: self.root.as_slice().try_into().ok()?,
        })
    }
}

/// Keys of one table.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct TableKeys {
    /// The table's name.
    #[prost(string, tag = "1")]
    pub table: String,
    /// The keys.
    #[prost(bytes = "vec", repeated, tag = "2")]
    #[serde(with = "hexes::list")]
    pub keys: Vec<Vec<u8>>,
}

/// A value, or its absence.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Value {
    /// The value; `None`: the key is absent.
    #[prost(bytes = "vec", optional, tag = "1")]
    #[serde(with = "hexes::maybe")]
    pub value: Option<Vec<u8>>,
}

/// The values of one table's keys, in the order asked.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct TableValues {
    /// The table's name.
    #[prost(string, tag = "1")]
    pub table: String,
    /// Each key's value or absence, in the order of the request's keys.
    #[prost(message, repeated, tag = "2")]
    pub values: Vec<Value>,
    /// For an ordered table, what the receipt proves for each key: its stored link (the value
    /// and the next key, `docs/format/ledger.md`, "Link"), which the client claims. Empty for
    /// a plain table, whose `values` are what the receipt proves.
    #[prost(message, repeated, tag = "3")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proven: Vec<Value>,
}

/// `POST /v1/ledgers/{ledger}/get`: LedgerBench's `Get(keys)`.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct GetRequest {
    /// The keys to read, each table at most once.
    #[prost(message, repeated, tag = "1")]
    pub tables: Vec<TableKeys>,
    /// Read as of this version (within the ledger's window) instead of the newest; 0: newest.
    #[prost(uint64, tag = "2")]
    #[serde(default)]
    pub version: u64,
    /// Answer with the values and their version only (a promise, proved later through
    /// `verify`), without a receipt.
    #[prost(bool, tag = "3")]
    #[serde(default)]
    pub promise: bool,
    /// To a router over shards: also answer, per table, one proof of the keys read against the
    /// table's global root (`global` in the answer). Ignored by a server.
    #[prost(bool, tag = "4")]
    #[serde(default)]
    pub lift: bool,
}

/// The answer to a `get`: values at one version, with the receipt proving them (unless a
/// promise was asked).
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct ReadResponse {
    /// The version read.
    #[prost(uint64, tag = "1")]
    pub version: u64,
    /// The digest the receipt verifies against (the newest when read); absent for a promise.
    #[prost(message, optional, tag = "2")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
    /// The values, per table in the order asked.
    #[prost(message, repeated, tag = "3")]
    pub tables: Vec<TableValues>,
    /// The receipt (`docs/format/ledger.md`, "Receipt"); empty for a promise.
    #[prost(bytes = "vec", tag = "4")]
    #[serde(with = "hexes::one", default, skip_serializing_if = "Vec::is_empty")]
    pub receipt: Vec<u8>,
    /// From a router over shards: each shard's own answer for its keys, with its version,
    /// digest and receipt (then `version` is 0 and `digest` and `receipt` are empty: each
    /// shard's receipt verifies against that shard's digest).
    #[prost(message, repeated, tag = "5")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardRead>,
    /// From a router asked to `lift`: per table read, in the order asked, the keys' proof
    /// against the table's global root (each shard's proof with the top levels above it).
    #[prost(message, repeated, tag = "6")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub global: Vec<GlobalProof>,
}

/// One table's lifted proof within a router's `get`: what one unsharded table holding every
/// shard's contents would prove for the keys read.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct GlobalProof {
    /// The table's name.
    #[prost(string, tag = "1")]
    pub table: String,
    /// The global root (32 bytes) the proof verifies against: the root of the trie whose
    /// subtrees at depth log2(S) are the shards' own, shard `s` at `versions[s]`.
    #[prost(bytes = "vec", tag = "2")]
    #[serde(with = "hexes::one")]
    pub root: Vec<u8>,
    /// Each shard's version the root was built from, shard 0 first: a shard the read touched
    /// at the version of its answer in `shards`, any other at its newest.
    #[prost(uint64, repeated, tag = "3")]
    pub versions: Vec<u64>,
    /// A full-form trie proof (`docs/format/proof.md`) of the table's keys read, against `root`.
    #[prost(bytes = "vec", tag = "4")]
    #[serde(with = "hexes::one")]
    pub proof: Vec<u8>,
}

/// One shard's answer within a router's `get`.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct ShardRead {
    /// The shard's number.
    #[prost(uint32, tag = "1")]
    pub shard: u32,
    /// The shard's answer for the keys it holds.
    #[prost(message, optional, tag = "2")]
    pub read: Option<ReadResponse>,
}

/// One shard's version within a router's answer to a write.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct ShardVersion {
    /// The shard's number.
    #[prost(uint32, tag = "1")]
    pub shard: u32,
    /// The version the write made there.
    #[prost(uint64, tag = "2")]
    pub version: u64,
}

/// One write: a value for a key, or its deletion.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct Write {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    #[serde(with = "hexes::one")]
    pub key: Vec<u8>,
    /// The new value; `None`: delete the key.
    #[prost(bytes = "vec", optional, tag = "2")]
    #[serde(with = "hexes::maybe", default)]
    pub value: Option<Vec<u8>>,
}

/// The writes to one table.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct TableWrites {
    /// The table's name.
    #[prost(string, tag = "1")]
    pub table: String,
    /// Its writes, applied in order (a later write of a key wins).
    #[prost(message, repeated, tag = "2")]
    pub writes: Vec<Write>,
}

/// `POST /v1/ledgers/{ledger}/put`: LedgerBench's `Put(keys, values)`, as one version.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct PutRequest {
    /// The writes.
    #[prost(message, repeated, tag = "1")]
    pub tables: Vec<TableWrites>,
    /// The version's metadata (hashed into its history leaf; at most 4 KiB).
    #[prost(bytes = "vec", tag = "2")]
    #[serde(with = "hexes::one", default, skip_serializing_if = "Vec::is_empty")]
    pub meta: Vec<u8>,
    /// Answer with a receipt for the keys written, as of the version made.
    #[prost(bool, tag = "3")]
    #[serde(default)]
    pub prove: bool,
}

/// A key the client read, with the value it saw: a transaction commits only if every such key
/// still holds that value (compare-and-set over many keys).
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct Expect {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    #[serde(with = "hexes::one")]
    pub key: Vec<u8>,
    /// The value seen; `None`: seen absent.
    #[prost(bytes = "vec", optional, tag = "2")]
    #[serde(with = "hexes::maybe", default)]
    pub value: Option<Vec<u8>>,
}

/// The expectations on one table.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct TableExpects {
    /// The table's name.
    #[prost(string, tag = "1")]
    pub table: String,
    /// Its keys and the values seen.
    #[prost(message, repeated, tag = "2")]
    pub expects: Vec<Expect>,
}

/// `POST /v1/ledgers/{ledger}/transact`: an optimistic read-modify-write over the network.
/// The client read some keys (with `get`), decided its writes, and sends both: the server
/// commits the writes as one version if every key read still holds what the client saw, and
/// proves both sides; otherwise it answers 409 with nothing written.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct TransactRequest {
    /// What the client read.
    #[prost(message, repeated, tag = "1")]
    #[serde(default)]
    pub expects: Vec<TableExpects>,
    /// What it writes.
    #[prost(message, repeated, tag = "2")]
    pub tables: Vec<TableWrites>,
    /// The version's metadata.
    #[prost(bytes = "vec", tag = "3")]
    #[serde(with = "hexes::one", default, skip_serializing_if = "Vec::is_empty")]
    pub meta: Vec<u8>,
    /// Answer with receipts (the keys read as of the version before, the keys written as of
    /// the version made).
    #[prost(bool, tag = "4")]
    #[serde(default)]
    pub prove: bool,
}

/// Keys with their values at one version, and the receipt proving them.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct ProvedKeys {
    /// The keys of each table, in table-name order, each table's sorted.
    #[prost(message, repeated, tag = "1")]
    pub keys: Vec<TableKeys>,
    /// Their values (and, for ordered tables, links) and the receipt.
    #[prost(message, optional, tag = "2")]
    pub read: Option<ReadResponse>,
}

/// The answer to a `put` or a `transact`: the version made.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct CommitResponse {
    /// The version made; 0 when nothing was written (no version).
    #[prost(uint64, tag = "1")]
    pub version: u64,
    /// The version's ledger root (32 bytes).
    #[prost(bytes = "vec", tag = "2")]
    #[serde(with = "hexes::one")]
    pub ledger_root: Vec<u8>,
    /// The digest with it.
    #[prost(message, optional, tag = "3")]
    pub digest: Option<Digest>,
    /// With `prove`: the keys read, as of the version before (absent when none were read).
    #[prost(message, optional, tag = "4")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<ProvedKeys>,
    /// With `prove`: the keys written, as of the version made.
    #[prost(message, optional, tag = "5")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<ProvedKeys>,
    /// From a router over shards: the version each shard touched made (then `version` is 0
    /// and `ledger_root` and `digest` are empty).
    #[prost(message, repeated, tag = "6")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardVersion>,
}

/// A promise to verify: keys of a table read or written at a version.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct Promise {
    /// The version the promise was made at.
    #[prost(uint64, tag = "1")]
    pub version: u64,
    /// The table.
    #[prost(string, tag = "2")]
    pub table: String,
    /// The keys.
    #[prost(bytes = "vec", repeated, tag = "3")]
    #[serde(with = "hexes::list")]
    pub keys: Vec<Vec<u8>>,
}

/// `POST /v1/ledgers/{ledger}/verify`: LedgerBench's `Verify(keys, versions)`, deferred
/// verification of a batch of promises.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct VerifyRequest {
    /// The promises.
    #[prost(message, repeated, tag = "1")]
    pub promises: Vec<Promise>,
}

/// The answer to a `verify`: one read per version named, in increasing version order, each
/// with its receipt against the newest digest (`verify_receipt_at`).
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct VerifyResponse {
    /// The reads, one per version.
    #[prost(message, repeated, tag = "1")]
    pub reads: Vec<ProvedKeys>,
}

/// A claim on one key, for `verify-receipt`.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct Claim {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    #[serde(with = "hexes::one")]
    pub key: Vec<u8>,
    /// The value claimed; `None`: claimed absent.
    #[prost(bytes = "vec", optional, tag = "2")]
    #[serde(with = "hexes::maybe", default)]
    pub value: Option<Vec<u8>>,
}

/// The claims on one table.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct TableClaims {
    /// The table's name.
    #[prost(string, tag = "1")]
    pub table: String,
    /// The claims.
    #[prost(message, repeated, tag = "2")]
    pub claims: Vec<Claim>,
}

/// `POST /v1/ledgers/{ledger}/verify-receipt`: LedgerBench's `Verify(proof)`: the server runs
/// the verifier on a receipt and claims, against a digest the caller names (for callers that
/// cannot link the verifier; a client that can should verify itself: this endpoint tells what
/// the server's verifier says, which a lying server could misstate).
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct VerifyReceiptRequest {
    /// The receipt's bytes.
    #[prost(bytes = "vec", tag = "1")]
    #[serde(with = "hexes::one")]
    pub receipt: Vec<u8>,
    /// The claims.
    #[prost(message, repeated, tag = "2")]
    pub tables: Vec<TableClaims>,
    /// The digest to verify against.
    #[prost(message, optional, tag = "3")]
    pub digest: Option<Digest>,
    /// Allow a receipt of a version older than the digest's (`verify_receipt_at`).
    #[prost(bool, tag = "4")]
    #[serde(default)]
    pub at: bool,
}

/// The verifier's verdict.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct VerifyReceiptResponse {
    /// Whether the receipt proves every claim against the digest.
    #[prost(bool, tag = "1")]
    pub valid: bool,
    /// Why not.
    #[prost(string, tag = "2")]
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// `GET /v1/ledgers/{ledger}/consistency?from=A&to=B`: the proof that the history of `A`
/// versions is a prefix of that of `B` (RFC 9162), and the digest at `B`.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct ConsistencyResponse {
    /// The digest at `from`.
    #[prost(message, optional, tag = "1")]
    pub from: Option<Digest>,
    /// The digest at `to`.
    #[prost(message, optional, tag = "2")]
    pub to: Option<Digest>,
    /// The proof (`docs/format/history.md`, "Consistency proof").
    #[prost(bytes = "vec", tag = "3")]
    #[serde(with = "hexes::one")]
    pub proof: Vec<u8>,
}

/// `POST /v1/ledgers/{ledger}/range`: the keys of an ordered table in `[lo, hi]`, with a proof
/// that none was left out or added.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct RangeRequest {
    /// The ordered table.
    #[prost(string, tag = "1")]
    pub table: String,
    /// The first key (included).
    #[prost(bytes = "vec", tag = "2")]
    #[serde(with = "hexes::one")]
    pub lo: Vec<u8>,
    /// The last key (included).
    #[prost(bytes = "vec", tag = "3")]
    #[serde(with = "hexes::one")]
    pub hi: Vec<u8>,
    /// As of this version (within the window); 0: the newest.
    #[prost(uint64, tag = "4")]
    #[serde(default)]
    pub version: u64,
    /// Without a proof (a promise, proved later by asking again with `version`).
    #[prost(bool, tag = "5")]
    #[serde(default)]
    pub promise: bool,
}

/// The answer to a `range`.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct RangeResponse {
    /// The version read.
    #[prost(uint64, tag = "1")]
    pub version: u64,
    /// The digest the receipt verifies against; absent for a promise.
    #[prost(message, optional, tag = "2")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<Digest>,
    /// The entries (key, value), in key order.
    #[prost(message, repeated, tag = "3")]
    pub entries: Vec<Write>,
    /// The range answer with its neighbours, as the verifier takes it
    /// (`docs/format/ledger.md`, "Range answer").
    #[prost(bytes = "vec", tag = "4")]
    #[serde(with = "hexes::one")]
    pub answer: Vec<u8>,
    /// The receipt; empty for a promise.
    #[prost(bytes = "vec", tag = "5")]
    #[serde(with = "hexes::one", default, skip_serializing_if = "Vec::is_empty")]
    pub receipt: Vec<u8>,
}

/// One version as the export streams it for auditors: its number, history leaf, every table's
/// root and its metadata.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct VersionRecord {
    /// The version.
    #[prost(uint64, tag = "1")]
    pub version: u64,
    /// Its history leaf (`docs/format/history.md`, "Leaf").
    #[prost(bytes = "vec", tag = "2")]
    #[serde(with = "hexes::one")]
    pub leaf: Vec<u8>,
    /// Each table's state root at the version, in table-name order.
    #[prost(message, repeated, tag = "3")]
    pub roots: Vec<TableRoot>,
    /// The version's metadata.
    #[prost(bytes = "vec", tag = "4")]
    #[serde(with = "hexes::one", default, skip_serializing_if = "Vec::is_empty")]
    pub meta: Vec<u8>,
}

/// A table's state root.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct TableRoot {
    /// The table's name.
    #[prost(string, tag = "1")]
    pub table: String,
    /// Its root (the trie's root node encoding, `docs/format/trie.md`).
    #[prost(bytes = "vec", tag = "2")]
    #[serde(with = "hexes::one")]
    pub root: Vec<u8>,
}

/// The body of every error answer.
#[derive(Clone, PartialEq, Eq, prost::Message, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable, machine-readable code (`docs/server.md`, "Errors").
    #[prost(string, tag = "1")]
    pub code: String,
    /// What went wrong, for people.
    #[prost(string, tag = "2")]
    pub message: String,
}

//! What the Raft log carries and what applying it answers: a [`Command`] is a ledger write as
//! data (the keys it expects to hold values, the writes, the version's metadata), so that every
//! node applies it alike; a [`Response`] is what applying it did.
//!
//! Owns: [`Command`], [`Write`], [`Expectation`], [`Response`], [`TX_ID_BYTES_MAX`], and the
//! command's check against a ledger's tables and limits. May call: `cairn_ledger` (its limits). Must never
//! touch: Raft, storage.
//!
//! A transaction whose body reads keys and then writes (SmallBank's, say) is replicated as the
//! values it read (its expectations) and the writes it decided: applying it checks the
//! expectations against the replicated state and writes only if all hold. The body itself
//! never crosses the network, so nothing nondeterministic is replayed.

use serde::{Deserialize, Serialize};

use cairn_ledger::{Ledger, META_BYTES_MAX};

/// One entry of a ledger's Raft log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Writes `writes` as one ledger version if every expectation holds.
    Write {
        /// Keys that must hold these values (or be absent) in the state the command is
        /// applied to; an empty list makes a blind write.
        expects: Vec<Expectation>,
        /// The writes, in order (a later write of a key replaces an earlier one).
        writes: Vec<Write>,
        /// The version's metadata (at most [`META_BYTES_MAX`] bytes).
        meta: Vec<u8>,
        /// Answer with receipts ([`WriteReceipts`]) on the node where the client waits. Left
        /// out of the stored bytes when false, so entries written before it existed read the
        /// same.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        prove: bool,
    },
    /// Phase one of transaction `tx` across shards (`crate::twopc`): if no key it touches is
    /// held by another prepared transaction and every expectation holds, stores the writes as
    /// prepared (not yet visible) and holds every key it touches until `tx` is decided here.
    Prepare {
        /// The transaction's id (at most [`TX_ID_BYTES_MAX`] bytes, unique per transaction).
        tx: String,
        /// The shard whose decision is the transaction's: the first to decide it.
        primary: u32,
        /// Every shard the transaction touches, this one among them.
        shards: Vec<u32>,
        /// This shard's expectations.
        expects: Vec<Expectation>,
        /// This shard's writes.
        writes: Vec<Write>,
        /// The metadata of the version the commit makes here.
        meta: Vec<u8>,
    },
    /// Phase two: decides `tx` committed here, unless this shard decided it aborted: its
    /// prepared writes become one version and its keys are released.
    Commit {
        /// The transaction's id.
        tx: String,
    },
    /// Phase two: decides `tx` aborted here, unless this shard decided it committed: its
    /// prepared writes are dropped and its keys released; a later `Prepare` of it is refused.
    Abort {
        /// The transaction's id.
        tx: String,
    },
}

/// The longest transaction id a [`Command::Prepare`] may carry: 64 bytes.
pub const TX_ID_BYTES_MAX: usize = 64;

/// The receipts of a write made with `prove`, as the ledger's `transact_proved` gives them:
/// made by the node where the client waits, while applying the entry (so against the digest of
/// the version it made), and kept in memory only: never stored, never sent between nodes.
#[derive(Clone, Debug, Default)]
pub struct WriteReceipts {
    /// The keys the command expected, as of the version before (`None`: it expected none, or
    /// made version 1).
    pub reads: Option<cairn_ledger::ProvedKeys>,
    /// The keys it wrote (set or deleted), as of the version made.
    pub writes: Option<cairn_ledger::ProvedKeys>,
    /// Why the receipts could not be made (a read of the ledger failed), if they could not:
    /// the write was made all the same.
    pub failed: Option<String>,
}

/// What two [`WriteReceipts`] are compared by: the keys, the version and the receipt's bytes.
type Proven<'a> = (&'a [(String, Vec<Vec<u8>>)], u64, Vec<u8>);

impl PartialEq for WriteReceipts {
    /// Equal when they prove the same keys at the same versions with the same receipt bytes.
    fn eq(&self, other: &Self) -> bool {
        fn proven(p: &Option<cairn_ledger::ProvedKeys>) -> Option<Proven<'_>> {
            p.as_ref()
                .map(|p| (&p.keys[..], p.read.version, p.read.receipt.encode()))
        }
        proven(&self.reads) == proven(&other.reads)
            && proven(&self.writes) == proven(&other.writes)
            && self.failed == other.failed
    }
}

impl Eq for WriteReceipts {}

/// A key set to a value or deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// The ledger table.
    pub table: String,
    /// The key.
    pub key: Vec<u8>,
    /// The new value; `None` deletes the key.
    pub value: Option<Vec<u8>>,
}

/// A key and the value it must hold (`None`: it must be absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expectation {
    /// The ledger table.
    pub table: String,
    /// The key.
    pub key: Vec<u8>,
    /// The value it must hold; `None`: absent.
    pub value: Option<Vec<u8>>,
}

/// What applying a [`Command`] did. The same on every node for the same log entry: the
/// divergence check compares them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The writes made a new version.
    Committed {
        /// The version's number.
        version: u64,
        /// Its ledger root.
        ledger_root: [u8; 32],
        /// The root of the ledger's history tree with it (digest of size `version`).
        digest_root: [u8; 32],
        /// With `prove`, on the node where the client waited: the receipts (in memory only).
        #[serde(skip)]
        receipts: Option<Box<WriteReceipts>>,
    },
    /// Every expectation held and there was nothing to write: no version.
    Unchanged {
        /// The newest version, unchanged.
        version: u64,
    },
    /// Expectation `index` did not hold: nothing was written.
    Conflict {
        /// The index of the first expectation that failed.
        index: usize,
    },
    /// The command can never apply (a table the ledger lacks, a key or metadata too long):
    /// nothing was written.
    Refused {
        /// Why.
        reason: String,
    },
    /// An entry that is not a command (a blank or a membership change).
    Empty,
    /// A key the command touches is held by prepared transaction `tx`: nothing was written
    /// (retry once it is decided).
    Locked {
        /// The transaction holding the key.
        tx: String,
    },
    /// The [`Command::Prepare`] holds: its writes are prepared and its keys held.
    Prepared {
        /// The version that stored the prepared writes (they are not in the tables yet).
        version: u64,
    },
    /// The transaction was already decided here (a repeated `Prepare`, `Commit` or `Abort`,
    /// or the other decision coming second): nothing was written.
    Decided {
        /// Whether it was decided committed.
        commit: bool,
    },
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Write {
                expects, writes, ..
            } => write!(
                f,
                "write({} expectations, {} writes)",
                expects.len(),
                writes.len()
            ),
            Command::Prepare {
                tx,
                expects,
                writes,
                ..
            } => write!(
                f,
                "prepare({tx}: {} expectations, {} writes)",
                expects.len(),
                writes.len()
            ),
            Command::Commit { tx } => write!(f, "commit({tx})"),
            Command::Abort { tx } => write!(f, "abort({tx})"),
        }
    }
}

impl Command {
    /// Why this command can never apply to `ledger`, if it cannot: a write to
    /// [`crate::RAFT_TABLE`], a table the ledger lacks, a
    /// key longer than [`cairn::KEY_SIZE_MAX`], metadata longer than [`META_BYTES_MAX`]. It
    /// depends only on the command and the ledger's (fixed) tables, so every node answers
    /// alike; a leader checks before proposing, and applying checks again.
    pub fn refusal(&self, ledger: &Ledger) -> Option<String> {
        let (expects, writes, meta) = match self {
            Command::Write {
                expects,
                writes,
                meta,
                ..
            } => (expects, writes, meta),
            Command::Prepare {
                tx,
                primary,
                shards,
                expects,
                writes,
                meta,
            } => {
                if let Some(reason) = tx_refusal(tx) {
                    return Some(reason);
                }
                if !shards.contains(primary) {
                    return Some(format!("primary shard {primary} is not among the shards"));
                }
                (expects, writes, meta)
            }
            Command::Commit { tx } | Command::Abort { tx } => return tx_refusal(tx),
        };
        if meta.len() > META_BYTES_MAX {
            return Some(format!(
                "metadata of {} bytes is longer than {META_BYTES_MAX}",
                meta.len()
            ));
        }
        if let Some(w) = writes.iter().find(|w| w.table == crate::RAFT_TABLE) {
            return Some(format!(
                "table {:?} is written only by the cluster",
                w.table
            ));
        }
        let keys = expects
            .iter()
            .map(|e| (&e.table, &e.key))
            .chain(writes.iter().map(|w| (&w.table, &w.key)));
        for (table, key) in keys {
            if !ledger.tables().iter().any(|t| t == table) {
                return Some(format!("the ledger has no table {table:?}"));
            }
            if key.len() > cairn::KEY_SIZE_MAX {
                return Some(format!(
                    "a key of {} bytes is longer than {}",
                    key.len(),
                    cairn::KEY_SIZE_MAX
                ));
            }
        }
        None
    }
}

/// Why `tx` cannot name a transaction, if it cannot: empty or longer than
/// [`TX_ID_BYTES_MAX`].
fn tx_refusal(tx: &str) -> Option<String> {
    if tx.is_empty() || tx.len() > TX_ID_BYTES_MAX {
        return Some(format!(
            "a transaction id has 1 to {TX_ID_BYTES_MAX} bytes, not {}",
            tx.len()
        ));
    }
    None
}

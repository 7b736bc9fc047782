//! Replication of Cairn's verifiable ledger with [openraft] (pinned at `=0.10.0-alpha.37`;
//! why that version: `docs/cluster-plan.md`, section 1): a ledger's writes travel as
//! [`Command`]s through a Raft log, and every node applies them, in log order, to its own copy
//! of the ledger, so that every node makes the same versions with the same roots.
//!
//! What is built: the commands and their deterministic application ([`LedgerMachine`], which
//! stores the applied log id in each version it makes, so a node restarts where its ledger
//! is), a node ([`Node`]: writes through the leader, linearizable reads by read index, a
//! documented stale read), the Raft log in a Cairn session ([`DurableLog`]: appends through
//! Cairn's write-ahead log, openraft told of them by its durability notice) or in memory
//! ([`MemLog`]), transports in process ([`LocalNetwork`]) and over HTTP ([`HttpNetwork`],
//! [`peer_router`]) whose links a test can cut ([`Faults`]), and a linearizability checker
//! ([`lincheck`]). `cairn-server --raft` runs a node as a process. Shards are Raft groups of
//! their own: a [`Coordinator`] routes writes by key path and commits those across shards by
//! two-phase commit in the shards' logs ([`twopc`]); their global root and lifted proofs are in
//! [`cairn_proof::shard`]. Snapshots ([`Node::start_with`], [`LedgerHome`]) are the ledger's
//! export stream, sent to a node the log no longer reaches and installed once proved; the log is
//! purged behind them. Formats: `docs/format/raft.md`. What is not built yet (issue 48;
//! `docs/cluster-plan.md` gives the order): the log as engine log streams.
//!
//! Modules, each owning one concept: `command` (what the log carries), `machine` (applying
//! it, building and installing snapshots), `snapshot` (snapshot files, a node's ledger slot and
//! home, the proved swap of a ledger), `twopc` (applying the steps of transactions across
//! shards), `coordinator` (driving them), `format` (the bytes stored), `durable_log` and
//! `mem_log` (log storage), `local` (the in-process transport), `node` (a node's API), `faults`
//! (links a test cuts), `http` (the transport between processes), `lincheck` (a linearizability
//! checker for the tests of all of it). Each module's header says what it may call.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod command;
pub mod coordinator;
mod durable_log;
mod faults;
pub mod format;
mod http;
pub mod lincheck;
mod local;
mod machine;
mod mem_log;
mod node;
mod snapshot;
pub mod twopc;

pub use command::{Command, Expectation, Response, Write, WriteReceipts, TX_ID_BYTES_MAX};
pub use coordinator::{Coordinator, Outcome, ShardWriter};
pub use durable_log::DurableLog;
pub use faults::Faults;
pub use http::{
    client_tls, peer_router, peer_router_with, peer_router_with_faults, roots_from_pem,
    ClusterSecret, HttpConnection, HttpNetwork, PEER_BODY_BYTES_MAX, SNAPSHOT_BYTES_MAX,
    SNAPSHOT_SEND_TIME_MAX,
};
pub use local::{LocalConnection, LocalFactory, LocalNetwork};
pub use machine::{ledger_config, LedgerMachine, SnapshotBuilder, RAFT_TABLE};
pub use mem_log::MemLog;
pub use node::{cluster_config, Consistency, Error, Node, NodeOptions, Transport};
pub use snapshot::{LedgerHome, LedgerSlot, SnapshotData, SNAPSHOT_MAGIC, SNAPSHOT_META_BYTES_MAX};

#[doc(no_inline)]
pub use openraft;

/// A node's number in its cluster.
pub type NodeId = u64;

/// Where a member of a cluster is reached, as its membership records it (and the Raft log
/// stores it: `docs/format/raft.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// Its peer listener, `host:port`, where the other nodes send Raft's messages.
    pub addr: String,
    /// The base URL of its client API (`https://host:port`), which a node that does not lead
    /// names to clients that must go to the leader; empty when not known. Left out of the
    /// stored bytes when empty, so that records written before it existed read the same.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api: String,
}

impl Member {
    /// A member reached at peer address `addr`, its client API at `api` (may be empty).
    pub fn new(addr: impl Into<String>, api: impl Into<String>) -> Self {
        Member {
            addr: addr.into(),
            api: api.into(),
        }
    }
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.addr)?;
        if !self.api.is_empty() {
            write!(f, " (api {})", self.api)?;
        }
        Ok(())
    }
}

openraft::declare_raft_types!(
    /// openraft's types for a ledger: [`Command`]s in, [`Response`]s out, `u64` node ids,
    /// [`Member`]s' addresses.
    pub TypeConfig:
        D = Command,
        R = Response,
        Node = Member,
);

/// A ledger's Raft handle.
pub type LedgerRaft = openraft::Raft<TypeConfig, LedgerMachine>;

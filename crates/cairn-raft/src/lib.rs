//! Replication of Cairn's verifiable ledger with [openraft] (pinned at `=0.10.0-alpha.37`;
//! why that version: `docs/cluster-plan.md`, section 1): a ledger's writes travel as
//! [`Command`]s through a Raft log, and every node applies them, in log order, to its own copy
//! of the ledger, so that every node makes the same versions with the same roots.
//!
//! What is built: the commands and their deterministic application ([`LedgerMachine`]), a
//! node ([`Node`]: writes through the leader, linearizable reads by read index, a documented
//! stale read), a log in memory ([`MemLog`]) and an in-process transport with partitions
//! ([`LocalNetwork`]), with tests of a three-node cluster through leader crashes and
//! partitions. What is not built yet (issue 48; `docs/cluster-plan.md` gives the order): Cairn's
//! write-ahead log as the Raft log (so that nodes survive restarts), snapshots between nodes,
//! the HTTP transport and `cairn-server --raft`, shards as Raft groups (their global root and
//! proofs are in [`cairn_proof::shard`]), cross-shard transactions.
//!
//! Modules, each owning one concept: `command` (what the log carries), `machine` (applying
//! it), `mem_log` (log storage in memory), `local` (the in-process transport), `node` (a
//! node's API), `lincheck` (a linearizability checker for tests of all of it). None calls a
//! module above it in this list except through the types declared here.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod command;
mod local;
mod machine;
mod mem_log;
mod node;

pub use command::{Command, Expectation, Response, Write};
pub use local::{LocalConnection, LocalFactory, LocalNetwork};
pub use machine::{LedgerMachine, NoSnapshots, SnapshotData};
pub use mem_log::MemLog;
pub use node::{cluster_config, Consistency, Error, Node};

/// A node's number in its cluster.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// openraft's types for a ledger: [`Command`]s in, [`Response`]s out, `u64` node ids.
    pub TypeConfig:
        D = Command,
        R = Response,
);

/// A ledger's Raft handle.
pub type LedgerRaft = openraft::Raft<TypeConfig, LedgerMachine>;

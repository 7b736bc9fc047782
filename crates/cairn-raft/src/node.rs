//! One node of a replicated ledger: its Raft handle and its copy of the ledger, with writes
//! proposed through the leader and reads made linearizable by a read index.
//!
//! Owns: [`Node`], [`NodeOptions`], [`Consistency`], [`Error`], [`cluster_config`]. May call:
//! `machine`, `snapshot` (a node's home and ledger slot), `command`, openraft, `cairn_ledger`.
//! Must never touch: a transport's internals.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::storage::RaftLogStorage;
use openraft::{Config, RaftNetworkFactory, ReadPolicy, SnapshotPolicy};

use cairn_ledger::{Ledger, VerifiedRead};

use crate::command::{Command, Response};
use crate::machine::LedgerMachine;
use crate::snapshot::{LedgerHome, LedgerSlot};
use crate::twopc::Locks;
use crate::{LedgerRaft, Member, NodeId, TypeConfig};

/// Why a node could not serve a call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// This node is not the leader: send writes (and linearizable reads) to `leader`, when
    /// known.
    #[error("this node is not the leader (the leader is {leader:?})")]
    NotLeader {
        /// The leader, when this node knows it.
        leader: Option<NodeId>,
        /// Where the leader is reached, when this node knows it.
        member: Option<Member>,
    },
    /// The write's outcome is unknown: the leader lost its leadership or the cluster its
    /// quorum while the write was in flight (it may still commit).
    #[error("the write's outcome is unknown: {0}")]
    Unknown(String),
    /// Raft refused or failed otherwise (no quorum for a read, the node shut down...).
    #[error("raft: {0}")]
    Raft(String),
    /// The ledger's own error (reading after the read index).
    #[error(transparent)]
    Ledger(#[from] cairn_ledger::Error),
    /// A key read is held by transaction `tx`, prepared across shards and not decided here
    /// yet: reading it now could show the transaction's writes on one shard and not on
    /// another. Retry once it is decided (a coordinator decides it within its round trips;
    /// [`crate::Coordinator::resolve`] decides one whose coordinator is gone).
    #[error("a key read is held by transaction {tx:?}, not decided yet")]
    Locked {
        /// The transaction.
        tx: String,
    },
}

/// How fresh a read must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Consistency {
    /// Linearizable (the default): the node confirms with a quorum that it leads, waits until
    /// it has applied every entry committed before the read began (openraft's read index,
    /// `ReadPolicy::ReadIndex`), then reads. Only the leader serves it. Cost: one heartbeat
    /// round trip to a quorum.
    #[default]
    Linearizable,
    /// Whatever this node has applied, without asking anyone: any node serves it at once, but
    /// it may miss writes already acknowledged (a follower behind, a leader deposed without
    /// knowing). Its receipt still proves the values at the version it names.
    Stale,
}

/// What a node's Raft runs with besides its timing: when it snapshots and how much log it
/// keeps behind a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeOptions {
    /// Build a snapshot once this many entries were applied since the last one (0: never,
    /// and the log is never purged). Needs a [`LedgerHome`] ([`Node::start_with`]). Default
    /// 100,000 (etcd's default too): a snapshot costs one pass over the ledger's stored
    /// entries, and the log entries it lets go of are a few hundred bytes each.
    pub snapshot_every: u64,
    /// Entries kept in the log behind the newest snapshot, so that a follower slightly behind
    /// catches up from the log rather than by a snapshot. Default 5,000 (etcd's catch-up
    /// entries).
    pub log_kept: u64,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            snapshot_every: 100_000,
            log_kept: 5_000,
        }
    }
}

impl NodeOptions {
    /// Options that never snapshot (and never purge the log).
    pub fn no_snapshots() -> NodeOptions {
        NodeOptions {
            snapshot_every: 0,
            log_kept: 0,
        }
    }

    /// Snapshot every `entries` applied (0: never).
    pub fn snapshot_every(mut self, entries: u64) -> NodeOptions {
        self.snapshot_every = entries;
        self
    }

    /// Keep `entries` of log behind the newest snapshot.
    pub fn log_kept(mut self, entries: u64) -> NodeOptions {
        self.log_kept = entries;
        self
    }
}

/// The configuration a cluster runs with: heartbeats every 50 ms, elections after 150 to 300 ms
/// of silence, snapshots and the log kept behind them as `options` say, and up to 10 minutes
/// to send a snapshot.
pub fn cluster_config(options: NodeOptions) -> Arc<Config> {
    let config = Config {
        cluster_name: "cairn".into(),
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_policy: match options.snapshot_every {
            0 => SnapshotPolicy::Never,
            n => SnapshotPolicy::LogsSinceLast(n),
        },
        max_in_snapshot_log_to_keep: options.log_kept,
        install_snapshot_timeout: 600_000,
        ..Config::default()
    };
    Arc::new(config.validate().expect("the cluster's timing is valid"))
}

/// What a node needs of its transport: an openraft network whose connections send this
/// crate's snapshots ([`crate::HttpNetwork`], [`crate::LocalFactory`]; any such network is one).
pub trait Transport:
    RaftNetworkFactory<
    TypeConfig,
    Network: openraft::network::NetSnapshot<
        TypeConfig,
        SnapshotData = crate::snapshot::SnapshotData,
    >,
>
{
}

impl<N> Transport for N
where
    N: RaftNetworkFactory<TypeConfig>,
    N::Network:
        openraft::network::NetSnapshot<TypeConfig, SnapshotData = crate::snapshot::SnapshotData>,
{
}

/// One node: its Raft handle and its ledger.
#[derive(Clone)]
pub struct Node {
    /// The node's number.
    pub id: NodeId,
    /// Its Raft handle (membership, metrics, shutdown).
    pub raft: LedgerRaft,
    /// Its copy of the ledger (written only by applying the log; replaced by a snapshot).
    slot: LedgerSlot,
    locks: Locks,
}

impl Node {
    /// Starts node `id` over `ledger` (made with [`crate::ledger_config`]; fresh, or this
    /// node's from an earlier run, with `log` its Raft log from that run) with `log` as its
    /// Raft log and `network` to reach the others, without snapshots
    /// ([`NodeOptions::no_snapshots`]: the log is never purged).
    ///
    /// Errors: [`Error::Raft`] when the ledger is not a replicated one or openraft refuses to
    /// start (its storage failed).
    pub async fn start<L, N>(
        id: NodeId,
        ledger: Arc<Ledger>,
        log: L,
        network: N,
    ) -> Result<Node, Error>
    where
        L: RaftLogStorage<TypeConfig>,
        N: Transport,
    {
        let machine = LedgerMachine::open(ledger).map_err(|e| Error::Raft(e.to_string()))?;
        Node::run(id, machine, log, network, NodeOptions::no_snapshots()).await
    }

    /// Starts node `id` over the ledger in `home` (opened here, after recovering a snapshot's
    /// swap a crash cut), with snapshots as `options` say: built in `home.snapshots`, sent to
    /// followers the log no longer reaches, installed by a proved import.
    ///
    /// Errors: [`Error::Raft`] when the ledger does not open, is not a replicated one, or
    /// openraft refuses to start.
    pub async fn start_with<L, N>(
        id: NodeId,
        home: LedgerHome,
        log: L,
        network: N,
        options: NodeOptions,
    ) -> Result<Node, Error>
    where
        L: RaftLogStorage<TypeConfig>,
        N: Transport,
    {
        let machine = tokio::task::spawn_blocking(move || {
            let ledger = Arc::new(home.open()?);
            LedgerMachine::with_home(LedgerSlot::new(ledger), home)
        })
        .await
        .map_err(|e| Error::Raft(e.to_string()))?
        .map_err(|e| Error::Raft(e.to_string()))?;
        Node::run(id, machine, log, network, options).await
    }

    async fn run<L, N>(
        id: NodeId,
        machine: LedgerMachine,
        log: L,
        network: N,
        options: NodeOptions,
    ) -> Result<Node, Error>
    where
        L: RaftLogStorage<TypeConfig>,
        N: Transport,
    {
        let locks = machine.locks();
        let slot = machine.slot();
        let raft = LedgerRaft::new(id, cluster_config(options), network, log, machine)
            .await
            .map_err(|e| Error::Raft(e.to_string()))?;
        Ok(Node {
            id,
            raft,
            slot,
            locks,
        })
    }

    /// The node's current ledger (written only by applying the log). An installed snapshot
    /// replaces it: hold it for one call, not across them.
    pub fn ledger(&self) -> Arc<Ledger> {
        self.slot.get()
    }

    /// The slot holding the node's ledger, for a server that reads it on every request.
    pub fn slot(&self) -> LedgerSlot {
        self.slot.clone()
    }

    /// Proposes `command` and waits until it is committed by a quorum and applied here: its
    /// [`Response`] (a conflict or a refusal is a response, not an error).
    ///
    /// Errors: [`Error::NotLeader`] (nothing was proposed); [`Error::Unknown`] when leadership
    /// was lost with the write in flight; [`Error::Raft`] otherwise.
    pub async fn write(&self, command: Command) -> Result<Response, Error> {
        if let Some(reason) = command.refusal(&self.ledger()) {
            return Ok(Response::Refused { reason });
        }
        match self.raft.client_write(command).await {
            Ok(r) => Ok(r.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(Error::NotLeader {
                    leader: f.leader_id,
                    member: f.leader_node,
                })
            }
            Err(e) => Err(Error::Unknown(e.to_string())),
        }
    }

    /// Reads `keys` of each table named, with the receipt proving them at the version read
    /// ([`Ledger::read`]), as fresh as `consistency` asks.
    ///
    /// Errors: [`Error::NotLeader`] for a linearizable read on a node that does not lead;
    /// [`Error::Raft`] when the leader cannot confirm its leadership (no quorum);
    /// [`Error::Locked`] when a prepared transaction holds a key read; the ledger's errors.
    pub async fn read(
        &self,
        reads: &[(&str, &[Vec<u8>])],
        consistency: Consistency,
    ) -> Result<VerifiedRead, Error> {
        self.read_barrier(consistency).await?;
        self.check_unlocked(reads)?;
        let ledger = self.ledger();
        let owned: Vec<(String, Vec<Vec<u8>>)> = reads
            .iter()
            .map(|(t, keys)| (t.to_string(), keys.to_vec()))
            .collect();
        tokio::task::spawn_blocking(move || {
            let reads: Vec<(&str, &[Vec<u8>])> = owned
                .iter()
                .map(|(t, keys)| (t.as_str(), &keys[..]))
                .collect();
            ledger.read(&reads)
        })
        .await
        .map_err(|e| Error::Raft(e.to_string()))?
        .map_err(Error::from)
    }

    /// [`Error::Locked`] if a transaction prepared here and not decided holds one of the keys
    /// of `reads`. Call after [`Node::read_barrier`], before reading the ledger: a transaction
    /// decided in between shows its writes, which is as fresh as the read may be.
    pub fn check_unlocked(&self, reads: &[(&str, &[Vec<u8>])]) -> Result<(), Error> {
        let keys = reads
            .iter()
            .flat_map(|(t, keys)| keys.iter().map(move |k| (*t, k.as_slice())));
        match self.locks.holder(keys) {
            Some(tx) => Err(Error::Locked { tx }),
            None => Ok(()),
        }
    }

    /// The keys held here by transactions prepared and not decided.
    pub fn locks(&self) -> &Locks {
        &self.locks
    }

    /// Makes what this node reads next as fresh as `consistency` asks: for a linearizable read,
    /// confirms with a quorum that this node leads and waits until it has applied every entry
    /// committed before the call (the read index), so that a read of the local ledger after it
    /// sees every write acknowledged before the call began; for a stale read, nothing.
    ///
    /// Errors: [`Error::NotLeader`] for a linearizable read on a node that does not lead;
    /// [`Error::Raft`] when the leader cannot confirm its leadership (no quorum).
    pub async fn read_barrier(&self, consistency: Consistency) -> Result<(), Error> {
        if consistency == Consistency::Stale {
            return Ok(());
        }
        self.raft
            .ensure_linearizable(ReadPolicy::ReadIndex)
            .await
            .map(|_| ())
            .map_err(|e| match e {
                RaftError::APIError(openraft::error::LinearizableReadError::ForwardToLeader(f)) => {
                    Error::NotLeader {
                        leader: f.leader_id,
                        member: f.leader_node,
                    }
                }
                other => Error::Raft(other.to_string()),
            })
    }

    /// The members of the cluster as this node knows them: each one's number, where it is
    /// reached and whether it votes (learners do not).
    pub fn members(&self) -> Vec<(NodeId, Member, bool)> {
        use openraft::async_runtime::WatchReceiver;
        let metrics = self.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, member)| (*id, member.clone(), voters.contains(id)))
            .collect()
    }

    /// Adds node `id`, reached at `member`, as a learner: it receives the log but does not
    /// vote; waits until it has caught up. Call on the leader.
    ///
    /// Errors: [`Error::NotLeader`]; [`Error::Raft`] otherwise.
    pub async fn add_learner(&self, id: NodeId, member: Member) -> Result<(), Error> {
        self.raft
            .add_learner(id, member, true)
            .await
            .map(|_| ())
            .map_err(membership_error)
    }

    /// Makes `voters` the voting members (learners among them are promoted; voters left out
    /// are removed, or kept as learners when `retain`). Call on the leader.
    ///
    /// Errors: [`Error::NotLeader`]; [`Error::Raft`] (a voter that is not a member yet: add it
    /// as a learner first).
    pub async fn change_voters(
        &self,
        voters: std::collections::BTreeSet<NodeId>,
        retain: bool,
    ) -> Result<(), Error> {
        self.raft
            .change_membership(voters, retain)
            .await
            .map(|_| ())
            .map_err(membership_error)
    }

    /// Waits until this node has applied every entry up to `index`, or `timeout` passes.
    ///
    /// Errors: [`Error::Raft`] on timeout or shutdown.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), Error> {
        self.raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "applied")
            .await
            .map(|_| ())
            .map_err(|e| Error::Raft(e.to_string()))
    }

    /// The index of the last entry this node has applied (0 before any).
    pub fn applied_index(&self) -> u64 {
        use openraft::async_runtime::WatchReceiver;
        self.raft
            .metrics()
            .borrow_watched()
            .last_applied
            .map_or(0, |l| l.index)
    }

    /// The index of the last entry this node's newest snapshot covers, and of the last entry
    /// purged from its log (`None`: none yet).
    pub fn snapshot_and_purged(&self) -> (Option<u64>, Option<u64>) {
        use openraft::async_runtime::WatchReceiver;
        let m = self.raft.metrics().borrow_watched().clone();
        (m.snapshot.map(|s| s.index), m.purged.map(|p| p.index))
    }

    /// The leader this node knows of.
    pub async fn leader(&self) -> Option<NodeId> {
        self.raft.current_leader().await
    }
}

fn membership_error(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> Error {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => Error::NotLeader {
            leader: f.leader_id,
            member: f.leader_node,
        },
        other => Error::Raft(other.to_string()),
    }
}

//! An in-process transport: each Raft RPC is a direct call on the target node's handle, through
//! a switchboard that can cut links (a partition) and drop nodes (a crash). For tests of the
//! replication layer in one process (the HTTP transport is `http`). A snapshot travels as its
//! open file, checked as a receiver over the network checks it.
//!
//! Owns: [`LocalNetwork`] (the switchboard), [`LocalFactory`] and [`LocalConnection`]
//! (openraft's network traits over it). May call: openraft, `snapshot` (a snapshot's check). Must never touch: the ledger.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::alias::{SnapshotOf, VoteOf};
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::OptionalSend;

use crate::snapshot::SnapshotData;
use crate::{LedgerRaft, NodeId, TypeConfig};

/// The switchboard: the nodes reachable in this process and the links cut between them.
#[derive(Clone, Default)]
pub struct LocalNetwork {
    inner: Arc<Mutex<Switchboard>>,
}

#[derive(Default)]
struct Switchboard {
    nodes: BTreeMap<NodeId, LedgerRaft>,
    /// Directed links `(from, to)` that drop every message.
    cut: BTreeSet<(NodeId, NodeId)>,
}

impl LocalNetwork {
    /// An empty switchboard.
    pub fn new() -> LocalNetwork {
        LocalNetwork::default()
    }

    fn lock(&self) -> MutexGuard<'_, Switchboard> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `raft` reachable as node `id` (replacing any earlier one).
    pub fn add(&self, id: NodeId, raft: LedgerRaft) {
        self.lock().nodes.insert(id, raft);
    }

    /// Makes node `id` unreachable (a crashed node), returning its handle.
    pub fn remove(&self, id: NodeId) -> Option<LedgerRaft> {
        self.lock().nodes.remove(&id)
    }

    /// Splits the nodes into `groups`: every link between two groups is cut (both ways);
    /// links inside a group, and those of nodes in no group, are left as they are.
    pub fn partition(&self, groups: &[&[NodeId]]) {
        let mut board = self.lock();
        for (i, a) in groups.iter().enumerate() {
            for (j, b) in groups.iter().enumerate() {
                if i != j {
                    for &x in *a {
                        for &y in *b {
                            board.cut.insert((x, y));
                        }
                    }
                }
            }
        }
    }

    /// Restores every cut link.
    pub fn heal(&self) {
        self.lock().cut.clear();
    }

    /// A factory for node `from`'s outgoing connections.
    pub fn factory(&self, from: NodeId) -> LocalFactory {
        LocalFactory {
            from,
            network: self.clone(),
        }
    }

    fn route(&self, from: NodeId, to: NodeId) -> Result<LedgerRaft, Unreachable<TypeConfig>> {
        let board = self.lock();
        if board.cut.contains(&(from, to)) {
            return Err(Unreachable::from_string(format!(
                "link {from} -> {to} is cut"
            )));
        }
        board
            .nodes
            .get(&to)
            .cloned()
            .ok_or_else(|| Unreachable::from_string(format!("node {to} is down")))
    }
}

/// Node `from`'s outgoing connections over a [`LocalNetwork`].
pub struct LocalFactory {
    from: NodeId,
    network: LocalNetwork,
}

impl RaftNetworkFactory<TypeConfig> for LocalFactory {
    type Network = LocalConnection;

    async fn new_client(&mut self, target: NodeId, _node: &crate::Member) -> LocalConnection {
        LocalConnection {
            from: self.from,
            to: target,
            network: self.network.clone(),
        }
    }
}

/// One directed link.
pub struct LocalConnection {
    from: NodeId,
    to: NodeId,
    network: LocalNetwork,
}

impl LocalConnection {
    /// The target, if the link is up both ways (a reply crosses it back).
    fn target(&self) -> Result<LedgerRaft, Unreachable<TypeConfig>> {
        self.network.route(self.to, self.from)?;
        self.network.route(self.from, self.to)
    }
}

impl RaftNetworkV2<TypeConfig> for LocalConnection {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let raft = self.target()?;
        let reply = raft
            .append_entries(rpc)
            .await
            .map_err(|e| Unreachable::new(&e))?;
        // A link cut while the call ran loses the reply.
        self.target()?;
        Ok(reply)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let raft = self.target()?;
        let reply = raft.vote(rpc).await.map_err(|e| Unreachable::new(&e))?;
        self.target()?;
        Ok(reply)
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let raft = self.target()?;
        // What a receiver over the network checks before Raft sees the snapshot.
        let data = snapshot.snapshot.clone();
        tokio::task::spawn_blocking(move || data.check())
            .await
            .map_err(|e| Unreachable::new(&e))?
            .map_err(|e| Unreachable::new(&e))?;
        let reply = raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| Unreachable::new(&e))?;
        self.target()?;
        Ok(reply)
    }
}

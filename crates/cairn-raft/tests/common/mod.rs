//! Helpers the cluster tests share: finding the leader the nodes agree on, writing through it,
//! and a blind write's command.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use cairn_raft::{Command, DurableLog, Error, LocalNetwork, Node, NodeId, Response, Write};

/// How long a helper waits for a leader or a write before failing the test.
pub const WAIT: Duration = Duration::from_secs(20);

/// The leader some node of `nodes` names, once that leader is among them and confirms its
/// leadership with a quorum (a read index); panics after [`WAIT`].
pub async fn leader(nodes: &[&Node]) -> NodeId {
    let deadline = Instant::now() + WAIT;
    loop {
        for node in nodes {
            if let Some(l) = node.leader().await {
                if let Some(leader) = nodes.iter().find(|n| n.id == l) {
                    if leader
                        .raft
                        .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
                        .await
                        .is_ok()
                    {
                        return l;
                    }
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader among the nodes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes `command` through whichever node leads, again while leadership moves; panics on any
/// other error or after [`WAIT`].
pub async fn write(nodes: &[&Node], command: Command) -> Response {
    let deadline = Instant::now() + WAIT;
    loop {
        let l = leader(nodes).await;
        let node = nodes
            .iter()
            .find(|n| n.id == l)
            .expect("the leader is among the nodes");
        match node.write(command.clone()).await {
            Ok(r) => return r,
            Err(Error::NotLeader { .. }) => {}
            Err(e) => panic!("write: {e}"),
        }
        assert!(Instant::now() < deadline, "no write went through");
    }
}

/// A blind write of `value` to `key` of `table`.
pub fn put(table: &str, key: &str, value: &str) -> Command {
    Command::Write {
        expects: vec![],
        writes: vec![Write {
            table: table.into(),
            key: key.into(),
            value: Some(value.into()),
        }],
        meta: vec![],
        prove: false,
    }
}

/// Waits until every node of `nodes` has applied what the leader has.
pub async fn settle(nodes: &[&Node]) {
    let l = leader(nodes).await;
    let applied = nodes.iter().find(|n| n.id == l).unwrap().applied_index();
    for node in nodes {
        node.wait_applied(applied, WAIT).await.unwrap();
    }
}

/// Moves the leadership from `from` (which leads) to node `to` of `nodes`, and waits until the
/// nodes agree that `to` leads; panics after [`WAIT`].
pub async fn move_leadership(nodes: &[&Node], from: &Node, to: NodeId) {
    from.raft.trigger().transfer_leader(to).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while leader(nodes).await != to {
        assert!(
            Instant::now() < deadline,
            "the leadership did not move to {to}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A node in process with its Raft log in Cairn.
pub struct Running {
    pub node: Node,
    pub log: DurableLog,
}

/// Stops a node as a crash would leave it for its next start: unreachable, Raft shut down,
/// its ledger and log closed.
pub async fn stop_node(network: &LocalNetwork, r: Running) {
    network.remove(r.node.id);
    r.node.raft.shutdown().await.unwrap();
    r.node.ledger().close();
    r.log.close();
}

/// The nodes of `running`.
pub fn view(running: &std::collections::BTreeMap<NodeId, Running>) -> Vec<&Node> {
    running.values().map(|r| &r.node).collect()
}

//! Helpers the cluster tests share: finding the leader the nodes agree on, writing through it,
//! and a blind write's command.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use cairn_raft::{Command, Error, Node, NodeId, Response, Write};

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

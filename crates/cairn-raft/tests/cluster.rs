//! Three nodes in one process (in-memory logs, the in-process transport): every node applies the
//! same commands to the same versions and roots; expectations, refusals and stale reads behave
//! as documented; and through a partition of the leader and then its crash, no acknowledged
//! write is lost and linearizable reads see every write acknowledged before they began.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_ledger::Ledger;
use cairn_raft::Member;
use cairn_raft::{
    Command, Consistency, Error, Expectation, LocalNetwork, MemLog, Node, NodeId, Response, Write,
};

const TABLE: &str = "accounts";
const WAIT: Duration = Duration::from_secs(20);

struct Cluster {
    network: LocalNetwork,
    nodes: BTreeMap<NodeId, Node>,
    _dir: tempfile::TempDir,
}

async fn start(n: u64) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let network = LocalNetwork::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=n {
        let ledger = Ledger::open(
            dir.path().join(id.to_string()),
            cairn_raft::ledger_config([TABLE]),
        )
        .map(Arc::new)
        .unwrap();
        let node = Node::start(id, ledger, MemLog::new(), network.factory(id))
            .await
            .unwrap();
        network.add(id, node.raft.clone());
        nodes.insert(id, node);
    }
    let members: BTreeMap<NodeId, Member> = (1..=n).map(|id| (id, Member::default())).collect();
    nodes[&1].raft.initialize(members).await.unwrap();
    let cluster = Cluster {
        network,
        nodes,
        _dir: dir,
    };
    cluster.leader(&[]).await;
    cluster
}

impl Cluster {
    /// The leader all nodes not in `except` agree on, once there is one.
    async fn leader(&self, except: &[NodeId]) -> NodeId {
        let deadline = Instant::now() + WAIT;
        loop {
            let mut seen = Vec::new();
            for (id, node) in &self.nodes {
                if !except.contains(id) {
                    seen.push(node.leader().await);
                }
            }
            if let Some(Some(l)) = seen.first() {
                if !except.contains(l) && seen.iter().all(|s| *s == Some(*l)) {
                    // A leader that has applied its first entry of the term serves reads.
                    if self.nodes[l]
                        .raft
                        .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
                        .await
                        .is_ok()
                    {
                        return *l;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no leader agreed on: {seen:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Writes through whichever node leads, retrying while leadership moves; `None` when the
    /// outcome is unknown.
    async fn write(&self, command: Command, except: &[NodeId]) -> Option<Response> {
        let deadline = Instant::now() + WAIT;
        loop {
            let leader = self.leader(except).await;
            match self.nodes[&leader].write(command.clone()).await {
                Ok(r) => return Some(r),
                Err(Error::NotLeader { .. }) => {}
                Err(Error::Unknown(_)) => return None,
                Err(e) => panic!("write: {e}"),
            }
            assert!(Instant::now() < deadline, "no write went through");
        }
    }

    /// Waits until every node not in `except` has applied what `leader` has.
    async fn settle(&self, leader: NodeId, except: &[NodeId]) {
        let applied = self.nodes[&leader].applied_index();
        for (id, node) in &self.nodes {
            if !except.contains(id) {
                node.wait_applied(applied, WAIT).await.unwrap();
            }
        }
    }
}

fn put(key: &str, value: &str) -> Command {
    Command::Write {
        expects: vec![],
        writes: vec![Write {
            table: TABLE.into(),
            key: key.into(),
            value: Some(value.into()),
        }],
        meta: vec![],
        prove: false,
    }
}

fn key(k: &str) -> Vec<u8> {
    k.as_bytes().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_make_the_same_versions() {
    let c = start(3).await;
    let mut versions = Vec::new();
    for i in 0..40 {
        match c
            .write(put(&format!("k{}", i % 7), &i.to_string()), &[])
            .await
        {
            Some(Response::Committed { version, .. }) => versions.push(version),
            other => panic!("write {i}: {other:?}"),
        }
    }
    assert_eq!(versions, (1..=40).collect::<Vec<u64>>());

    // A transfer whose expectation holds commits; one whose expectation is stale conflicts.
    let transfer = |from_expect: &str| Command::Write {
        expects: vec![Expectation {
            table: TABLE.into(),
            key: key("k0"),
            value: Some(from_expect.into()),
        }],
        writes: vec![
            Write {
                table: TABLE.into(),
                key: key("k0"),
                value: Some(b"0".to_vec()),
            },
            Write {
                table: TABLE.into(),
                key: key("k1"),
                value: None,
            },
        ],
        meta: b"transfer".to_vec(),
        prove: false,
    };
    assert!(matches!(
        c.write(transfer("35"), &[]).await,
        Some(Response::Committed { version: 41, .. })
    ));
    assert_eq!(
        c.write(transfer("35"), &[]).await,
        Some(Response::Conflict { index: 0 })
    );
    // A table the ledger lacks is refused, on the leader before proposing.
    let mut bad = put("k", "v");
    let Command::Write { writes, .. } = &mut bad else {
        unreachable!("put makes a write")
    };
    writes[0].table = "nope".into();
    assert!(matches!(
        c.write(bad, &[]).await,
        Some(Response::Refused { .. })
    ));

    let leader = c.leader(&[]).await;
    c.settle(leader, &[]).await;
    let digests: Vec<_> = c.nodes.values().map(|n| n.ledger().digest()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    assert_eq!(digests[0].size, 41);
    // Every node reads the same values with the same receipt, stale or not.
    let keys = [key("k0"), key("k1"), key("k6")];
    for node in c.nodes.values() {
        let read = node
            .read(&[(TABLE, &keys[..])], Consistency::Stale)
            .await
            .unwrap();
        assert_eq!(read.digest, digests[0]);
        assert_eq!(
            read.values[0],
            vec![Some(b"0".to_vec()), None, Some(b"34".to_vec())]
        );
    }
    // A follower refuses a linearizable read and names the leader.
    let follower = *c.nodes.keys().find(|&&id| id != leader).unwrap();
    match c.nodes[&follower]
        .read(&[(TABLE, &keys[..])], Consistency::Linearizable)
        .await
    {
        Err(Error::NotLeader {
            leader: Some(l), ..
        }) => assert_eq!(l, leader),
        other => panic!("{other:?}"),
    }
    for node in c.nodes.values() {
        node.raft.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_write_is_lost_through_a_partition_and_a_crash() {
    let c = Arc::new(start(3).await);
    let mut acknowledged: Vec<String> = Vec::new();
    let mut unknown = 0;
    let mut down: Vec<NodeId> = Vec::new();
    for i in 0..120 {
        match i {
            // Cut the leader off from the others: they elect a new one; the old one cannot
            // commit anything alone.
            30 => {
                let old = c.leader(&down).await;
                let others: Vec<NodeId> = c.nodes.keys().copied().filter(|&id| id != old).collect();
                c.network.partition(&[&[old], &others]);
                let new = c.leader(&[old]).await;
                assert_ne!(new, old);
                down.push(old);
            }
            // Heal: the old leader rejoins as a follower and catches up.
            60 => {
                c.network.heal();
                down.clear();
            }
            // Crash the leader: the two others go on.
            90 => {
                let old = c.leader(&down).await;
                c.network.remove(old);
                c.nodes[&old].raft.shutdown().await.unwrap();
                down.push(old);
            }
            _ => {}
        }
        let k = format!("w{i}");
        match c.write(put(&k, &i.to_string()), &down).await {
            Some(Response::Committed { .. }) => {
                // A linearizable read from the leader sees it at once.
                let leader = c.leader(&down).await;
                let read = c.nodes[&leader]
                    .read(&[(TABLE, &[key(&k)][..])], Consistency::Linearizable)
                    .await
                    .unwrap();
                assert_eq!(read.values[0][0].as_deref(), Some(i.to_string().as_bytes()));
                acknowledged.push(k);
            }
            None => unknown += 1,
            Some(other) => panic!("{other:?}"),
        }
    }
    let leader = c.leader(&down).await;
    c.settle(leader, &down).await;
    let keys: Vec<Vec<u8>> = acknowledged.iter().map(|k| key(k)).collect();
    let mut digests = Vec::new();
    for (id, node) in &c.nodes {
        if down.contains(id) {
            continue;
        }
        let read = node
            .read(&[(TABLE, &keys[..])], Consistency::Stale)
            .await
            .unwrap();
        for (k, v) in acknowledged.iter().zip(&read.values[0]) {
            assert_eq!(v.as_deref(), Some(&k.as_bytes()[1..]), "node {id} lost {k}");
        }
        digests.push(node.ledger().digest());
    }
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    assert!(acknowledged.len() + unknown == 120);
    assert!(
        acknowledged.len() >= 110,
        "{} acknowledged",
        acknowledged.len()
    );
    for (id, node) in &c.nodes {
        if !down.contains(id) {
            node.raft.shutdown().await.unwrap();
        }
    }
}

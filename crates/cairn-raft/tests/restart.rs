//! Nodes that keep their Raft log in Cairn ([`DurableLog`]) and their ledger on disk survive a
//! stop: a follower stopped while the others write catches up when it comes back, without
//! applying any entry twice (its ledger makes exactly the versions the others made); a whole
//! cluster stopped and started again keeps every acknowledged write and goes on; and the Raft
//! log's entries, vote and bounds read back after reopening.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_ledger::Ledger;
use cairn_raft::Member;
use cairn_raft::{ledger_config, Consistency, DurableLog, LocalNetwork, Node, NodeId, Response};

mod common;
use common::{stop_node, view, Running};

const TABLE: &str = "accounts";

async fn start_node(network: &LocalNetwork, root: &Path, id: NodeId) -> Running {
    let dir: PathBuf = root.join(id.to_string());
    let ledger = Arc::new(Ledger::open(dir.join("ledger"), ledger_config([TABLE])).unwrap());
    let log = DurableLog::open(dir.join("raft")).unwrap();
    let node = Node::start(id, ledger, log.clone(), network.factory(id))
        .await
        .unwrap();
    network.add(id, node.raft.clone());
    Running { node, log }
}

async fn leader(nodes: &BTreeMap<NodeId, Running>) -> NodeId {
    common::leader(&view(nodes)).await
}

async fn write(nodes: &BTreeMap<NodeId, Running>, k: &str, v: &str) -> Response {
    common::write(&view(nodes), common::put(TABLE, k, v)).await
}

async fn settle(nodes: &BTreeMap<NodeId, Running>) {
    common::settle(&view(nodes)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_follower_and_a_stopped_cluster_come_back_whole() {
    let root = tempfile::tempdir().unwrap();
    let network = LocalNetwork::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(&network, root.path(), id).await);
    }
    let members: BTreeMap<NodeId, Member> = (1..=3).map(|id| (id, Member::default())).collect();
    nodes[&1].node.raft.initialize(members).await.unwrap();

    for i in 0..30 {
        assert!(matches!(
            write(&nodes, &format!("k{i}"), "a").await,
            Response::Committed { .. }
        ));
    }
    // Stop a follower; the two others go on.
    let l = leader(&nodes).await;
    let follower = *nodes.keys().find(|&&id| id != l).unwrap();
    let r = nodes.remove(&follower).unwrap();
    stop_node(&network, r).await;
    for i in 30..60 {
        assert!(matches!(
            write(&nodes, &format!("k{i}"), "b").await,
            Response::Committed { .. }
        ));
    }
    // It comes back from its own directories and catches up: the same 60 versions, no more.
    nodes.insert(follower, start_node(&network, root.path(), follower).await);
    settle(&nodes).await;
    let digests: Vec<_> = nodes.values().map(|r| r.node.ledger().digest()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    assert_eq!(digests[0].size, 60);

    // The whole cluster stops and starts again.
    for (_, r) in std::mem::take(&mut nodes) {
        stop_node(&network, r).await;
    }
    for id in 1..=3 {
        nodes.insert(id, start_node(&network, root.path(), id).await);
    }
    assert!(matches!(
        write(&nodes, "after", "c").await,
        Response::Committed { version: 61, .. }
    ));
    settle(&nodes).await;
    let keys: Vec<Vec<u8>> = (0..60).map(|i| format!("k{i}").into_bytes()).collect();
    for r in nodes.values() {
        let read = r
            .node
            .read(&[(TABLE, &keys[..])], Consistency::Stale)
            .await
            .unwrap();
        assert_eq!(read.version, 61);
        for (i, v) in read.values[0].iter().enumerate() {
            let want: &[u8] = if i < 30 { b"a" } else { b"b" };
            assert_eq!(v.as_deref(), Some(want), "node {} key k{i}", r.node.id);
        }
    }
    for (_, r) in std::mem::take(&mut nodes) {
        stop_node(&network, r).await;
    }
}

/// The log itself: entries, truncation, purge and the vote read back after reopening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_log_reads_back_what_it_was_told() {
    use openraft::entry::RaftEntry;
    use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
    use openraft::vote::RaftLeaderId;
    use openraft::{EntryPayload, Vote};

    type Entry = openraft::alias::EntryOf<cairn_raft::TypeConfig>;
    type LogId = openraft::alias::LogIdOf<cairn_raft::TypeConfig>;
    let log_id = |term: u64, index: u64| {
        LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(term, 1),
            index,
        )
    };
    let entry =
        |term: u64, index: u64| -> Entry { Entry::new(log_id(term, index), EntryPayload::Blank) };
    let dir = tempfile::tempdir().unwrap();
    {
        let mut log = DurableLog::open(dir.path()).unwrap();
        log.append((1..=10).map(|i| entry(1, i)), IOFlushed::Noop)
            .await
            .unwrap();
        log.truncate_after(Some(log_id(1, 7))).await.unwrap();
        log.append((8..=9).map(|i| entry(2, i)), IOFlushed::Noop)
            .await
            .unwrap();
        log.purge(log_id(1, 3)).await.unwrap();
        log.save_vote(&Vote::new(2, 1)).await.unwrap();
        log.save_committed(Some(log_id(2, 8))).await.unwrap();
        log.close();
    }
    let mut log = DurableLog::open(dir.path()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 3)));
    assert_eq!(state.last_log_id, Some(log_id(2, 9)));
    let ids: Vec<LogId> = log
        .try_get_log_entries(0..100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.log_id())
        .collect();
    let mut want: Vec<LogId> = (4..=7).map(|i| log_id(1, i)).collect();
    want.extend((8..=9).map(|i| log_id(2, i)));
    assert_eq!(ids, want);
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(2, 8)));
    log.close();
}

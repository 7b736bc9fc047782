//! Snapshots between nodes: nodes that snapshot often purge their Raft logs; a follower stopped
//! while the others wrote past what their logs keep comes back, receives a snapshot, proves and
//! installs it, and ends with the same versions and digest as the others; and a swap of ledger
//! directories cut by a crash is finished or undone when the node opens its ledger.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cairn_raft::openraft::async_runtime::WatchReceiver;
use cairn_raft::{
    ledger_config, Consistency, DurableLog, LedgerHome, LocalNetwork, Member, Node, NodeId,
    NodeOptions, Response,
};

mod common;
use common::{stop_node, view, Running};

const TABLE: &str = "accounts";

fn home(root: &Path, id: NodeId) -> LedgerHome {
    let dir: PathBuf = root.join(id.to_string());
    LedgerHome::new(
        dir.join("ledger"),
        dir.join("snapshots"),
        ledger_config([TABLE]).history(1),
    )
}

async fn start_node(network: &LocalNetwork, root: &Path, id: NodeId) -> Running {
    let log = DurableLog::open(root.join(id.to_string()).join("raft")).unwrap();
    let options = NodeOptions::default().snapshot_every(20).log_kept(5);
    let node = Node::start_with(
        id,
        home(root, id),
        log.clone(),
        network.factory(id),
        options,
    )
    .await
    .unwrap();
    network.add(id, node.raft.clone());
    Running { node, log }
}

async fn write(nodes: &BTreeMap<NodeId, Running>, k: &str, v: &str) {
    let r = common::write(&view(nodes), common::put(TABLE, k, v)).await;
    assert!(matches!(r, Response::Committed { .. }), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_purged_log_catches_up_by_a_snapshot() {
    let root = tempfile::tempdir().unwrap();
    let network = LocalNetwork::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start_node(&network, root.path(), id).await);
    }
    let members: BTreeMap<NodeId, Member> = (1..=3).map(|id| (id, Member::default())).collect();
    nodes[&1].node.raft.initialize(members).await.unwrap();
    for i in 0..30 {
        write(&nodes, &format!("k{i}"), "a").await;
    }
    let l = common::leader(&view(&nodes)).await;
    let follower = *nodes.keys().find(|&&id| id != l).unwrap();
    let r = nodes.remove(&follower).unwrap();
    stop_node(&network, r).await;

    // The two others write on and snapshot. The leader keeps the log the stopped follower
    // still needs (openraft purges nothing a replication stream may send); the other purges
    // past it, and leads next.
    for i in 30..150 {
        write(&nodes, &format!("k{i}"), "b").await;
    }
    common::settle(&view(&nodes)).await;
    let other = *nodes.keys().find(|&&id| id != l).unwrap();
    let m = nodes[&other].node.raft.metrics().borrow_watched().clone();
    let purged = m.purged.map_or(0, |p| p.index);
    assert!(purged > 40, "node {other} purged its log to {purged} only");
    assert!(m.snapshot.is_some(), "node {other} has no snapshot");
    common::move_leadership(&view(&nodes), &nodes[&l].node, other).await;

    // It comes back: the log that it needs is gone, so it gets a snapshot.
    nodes.insert(follower, start_node(&network, root.path(), follower).await);
    common::settle(&view(&nodes)).await;
    let back = &nodes[&follower].node;
    let m = back.raft.metrics().borrow_watched().clone();
    assert!(
        m.snapshot.is_some_and(|s| s.index > 40),
        "the follower installed no snapshot: {:?}",
        m.snapshot
    );
    let digests: Vec<_> = nodes.values().map(|r| r.node.ledger().digest()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    assert_eq!(digests[0].size, 150);
    let dir = root.path().join(follower.to_string());
    assert!(dir.join("snapshots/current.snap").exists());
    assert!(!dir.join("ledger.old").exists() && !dir.join("ledger.incoming").exists());

    // It serves the installed ledger and goes on with the others.
    for i in 150..170 {
        write(&nodes, &format!("k{i}"), "c").await;
    }
    common::settle(&view(&nodes)).await;
    let keys: Vec<Vec<u8>> = (0..170).map(|i| format!("k{i}").into_bytes()).collect();
    let read = back
        .read(&[(TABLE, &keys[..])], Consistency::Stale)
        .await
        .unwrap();
    assert_eq!(read.version, 170);
    for (i, v) in read.values[0].iter().enumerate() {
        let want: &[u8] = match i {
            0..30 => b"a",
            30..150 => b"b",
            _ => b"c",
        };
        assert_eq!(v.as_deref(), Some(want), "key k{i}");
    }
    let digests: Vec<_> = nodes.values().map(|r| r.node.ledger().digest()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");

    // And restarts from its swapped directory.
    let r = nodes.remove(&follower).unwrap();
    stop_node(&network, r).await;
    nodes.insert(follower, start_node(&network, root.path(), follower).await);
    write(&nodes, "after", "d").await;

    // A new node joins as a learner: the log's start is gone everywhere, so a snapshot it is.
    let fresh = start_node(&network, root.path(), 4).await;
    let l = common::leader(&view(&nodes)).await;
    nodes[&l]
        .node
        .add_learner(4, Member::default())
        .await
        .unwrap();
    nodes.insert(4, fresh);
    common::settle(&view(&nodes)).await;
    let m = nodes[&4].node.raft.metrics().borrow_watched().clone();
    assert!(m.snapshot.is_some(), "the learner installed no snapshot");
    let digests: Vec<_> = nodes.values().map(|r| r.node.ledger().digest()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    assert_eq!(digests[0].size, 171);
    for (_, r) in std::mem::take(&mut nodes) {
        stop_node(&network, r).await;
    }
}

/// A ledger with one version in `home`'s directory, closed; its digest.
fn ledger_with(home: &LedgerHome, value: &str) -> cairn_proof::Digest {
    let ledger = home.open().unwrap();
    let mut batch = cairn_ledger::LedgerBatch::new();
    batch.insert(TABLE, "k", value);
    let c = ledger.write(&batch).unwrap().unwrap();
    c.durability.wait().unwrap();
    ledger.close();
    c.digest
}

#[test]
fn a_swap_cut_by_a_crash_is_finished_or_undone_at_open() {
    let root = tempfile::tempdir().unwrap();
    let h = home(root.path(), 1);
    let dir = h.dir.clone();
    let sibling = |suffix: &str| PathBuf::from(format!("{}{suffix}", dir.display()));

    // Cut after the old ledger moved aside, before the proved import moved in: finished.
    let old = ledger_with(&h, "old");
    let new_home = LedgerHome::new(
        sibling(".incoming"),
        root.path().join("s"),
        h.config.clone(),
    );
    let new = ledger_with(&new_home, "new");
    assert_ne!(old, new);
    std::fs::rename(&dir, sibling(".old")).unwrap();
    let ledger = h.open().unwrap();
    assert_eq!(ledger.digest(), new);
    ledger.close();
    assert!(!sibling(".old").exists() && !sibling(".incoming").exists());

    // Cut before the import was proved (only the staging directory beside the ledger): undone.
    let staged = LedgerHome::new(
        sibling(".incoming"),
        root.path().join("s"),
        h.config.clone(),
    );
    ledger_with(&staged, "unproved");
    let ledger = h.open().unwrap();
    assert_eq!(ledger.digest(), new);
    ledger.close();
    assert!(!sibling(".incoming").exists());

    // Cut with the old ledger aside and no import: put back.
    std::fs::rename(&dir, sibling(".old")).unwrap();
    let ledger = h.open().unwrap();
    assert_eq!(ledger.digest(), new);
    ledger.close();

    // Cut after the swap, before the old ledger was removed: removed.
    let leftover = LedgerHome::new(sibling(".old"), root.path().join("s"), h.config.clone());
    ledger_with(&leftover, "leftover");
    let ledger = h.open().unwrap();
    assert_eq!(ledger.digest(), new);
    ledger.close();
    assert!(!sibling(".old").exists());
}

//! Three nodes talking over loopback HTTP (the peer listener and `HttpNetwork`), each with its
//! Raft log in Cairn: they replicate; a request without the cluster secret, or with another
//! one, is refused; the leader's crash (its listener gone) elects another; and the crashed node,
//! restarted on the same address from its own directories, catches up to the same versions; a
//! follower left behind the log the others kept catches up by a snapshot sent over HTTP; and
//! the snapshot endpoint refuses a request without the secret or with a damaged snapshot.

use cairn_raft::openraft::async_runtime::WatchReceiver;
use cairn_raft::{
    ledger_config, peer_router_with, ClusterSecret, DurableLog, Faults, HttpNetwork, LedgerHome,
    Member, Node, NodeId, NodeOptions, Response,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

mod common;
use common::WAIT;

const TABLE: &str = "accounts";
const SECRET: &str = "a-cluster-secret-for-tests";

struct Running {
    node: Node,
    log: DurableLog,
    server: tokio::task::JoinHandle<()>,
}

async fn start(root: &Path, id: NodeId, addr: SocketAddr) -> Running {
    let dir = root.join(id.to_string());
    let home = LedgerHome::new(
        dir.join("ledger"),
        dir.join("snapshots"),
        ledger_config([TABLE]),
    );
    let log = DurableLog::open(dir.join("raft")).unwrap();
    let secret = ClusterSecret::new(SECRET).unwrap();
    let network = HttpNetwork::new(secret.clone()).unwrap();
    let options = NodeOptions::default().snapshot_every(10).log_kept(3);
    let node = Node::start_with(id, home, log.clone(), network, options)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let inbox = Some(dir.join("snapshots"));
    let router = peer_router_with(node.raft.clone(), secret, Faults::new(), inbox);
    let server = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    Running { node, log, server }
}

async fn stop(r: Running) {
    r.server.abort();
    let _ = r.server.await;
    r.node.raft.shutdown().await.unwrap();
    r.node.ledger().close();
    r.log.close();
}

fn view(nodes: &BTreeMap<NodeId, Running>) -> Vec<&Node> {
    nodes.values().map(|r| &r.node).collect()
}

async fn leader(nodes: &BTreeMap<NodeId, Running>) -> NodeId {
    common::leader(&view(nodes)).await
}

async fn write(nodes: &BTreeMap<NodeId, Running>, k: &str, v: &str) -> Response {
    common::write(&view(nodes), common::put(TABLE, k, v)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_over_http_replicate_elect_and_catch_up() {
    let root = tempfile::tempdir().unwrap();
    // Addresses first: the membership names them.
    let mut addrs = BTreeMap::new();
    for id in 1..=3u64 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        addrs.insert(id, l.local_addr().unwrap());
    }
    let mut nodes = BTreeMap::new();
    for (&id, &addr) in &addrs {
        nodes.insert(id, start(root.path(), id, addr).await);
    }
    let members: BTreeMap<NodeId, Member> = addrs
        .iter()
        .map(|(&id, addr)| (id, Member::new(addr.to_string(), "")))
        .collect();
    nodes[&1].node.raft.initialize(members).await.unwrap();
    for i in 0..20 {
        assert!(matches!(
            write(&nodes, &format!("a{i}"), "a").await,
            Response::Committed { .. }
        ));
    }

    // The peer listener refuses a request without the secret, or with another one.
    // A plain-HTTP client; reqwest is built with rustls, which wants a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let url = format!("http://{}/raft/v1/vote", addrs[&1]);
    let no_secret = client.post(&url).body("{}").send().await.unwrap();
    assert_eq!(no_secret.status(), 401);
    let wrong = client
        .post(&url)
        .bearer_auth("another-secret-of-some-length")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let junk = client
        .post(&url)
        .bearer_auth(SECRET)
        .body("not json")
        .send()
        .await
        .unwrap();
    assert_eq!(junk.status(), 400);

    // The leader crashes; the others elect one and go on.
    let crashed = leader(&nodes).await;
    stop(nodes.remove(&crashed).unwrap()).await;
    for i in 0..20 {
        assert!(matches!(
            write(&nodes, &format!("b{i}"), "b").await,
            Response::Committed { .. }
        ));
    }
    // It comes back on its address, from its directories, and catches up.
    nodes.insert(crashed, start(root.path(), crashed, addrs[&crashed]).await);
    let l = leader(&nodes).await;
    let applied = nodes[&l].node.applied_index();
    for r in nodes.values() {
        r.node.wait_applied(applied, WAIT).await.unwrap();
    }
    let digests: Vec<_> = nodes.values().map(|r| r.node.ledger().digest()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    assert_eq!(digests[0].size, 40);

    // The snapshot endpoint: the secret first, then a snapshot that checks.
    let url = format!("http://{}/raft/v1/snapshot", addrs[&1]);
    let no_secret = client.post(&url).body("x").send().await.unwrap();
    assert_eq!(no_secret.status(), 401);
    let vote = nodes[&1].node.raft.metrics().borrow_watched().vote;
    let vote: String = cairn_raft::format::encode_vote(&vote)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let damaged = client
        .post(&url)
        .bearer_auth(SECRET)
        .header("cairn-vote", vote)
        .body(b"CRNRSNP\x01 not a snapshot".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(damaged.status(), 400);

    // A follower stops; the others write past what their logs keep; leadership moves to the
    // one that purged (the leader keeps what a stream to the stopped node may need); the
    // follower comes back and gets a snapshot over HTTP.
    let l = leader(&nodes).await;
    let behind = *nodes.keys().find(|&&id| id != l).unwrap();
    stop(nodes.remove(&behind).unwrap()).await;
    for i in 0..40 {
        assert!(matches!(
            write(&nodes, &format!("c{i}"), "c").await,
            Response::Committed { .. }
        ));
    }
    let other = *nodes.keys().find(|&&id| id != l).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let m = nodes[&other].node.raft.metrics().borrow_watched().clone();
        if m.purged.is_some_and(|p| p.index > 50) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no purge: {:?}",
            m.purged
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    common::move_leadership(&view(&nodes), &nodes[&l].node, other).await;
    nodes.insert(behind, start(root.path(), behind, addrs[&behind]).await);
    let applied = nodes[&other].node.applied_index();
    for r in nodes.values() {
        r.node.wait_applied(applied, WAIT).await.unwrap();
    }
    let m = nodes[&behind].node.raft.metrics().borrow_watched().clone();
    assert!(m.snapshot.is_some_and(|s| s.index > 50), "{:?}", m.snapshot);
    let digests: Vec<_> = nodes.values().map(|r| r.node.ledger().digest()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    assert_eq!(digests[0].size, 80);
    for (_, r) in std::mem::take(&mut nodes) {
        stop(r).await;
    }
}

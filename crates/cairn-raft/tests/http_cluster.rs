//! Three nodes talking over loopback HTTP (the peer listener and `HttpNetwork`), each with its
//! Raft log in Cairn: they replicate; a request without the cluster secret, or with another
//! one, is refused; the leader's crash (its listener gone) elects another; and the crashed node,
//! restarted on the same address from its own directories, catches up to the same versions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use cairn_ledger::Ledger;
use cairn_raft::Member;
use cairn_raft::{
    ledger_config, peer_router, ClusterSecret, DurableLog, HttpNetwork, Node, NodeId, Response,
};

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
    let ledger = Arc::new(Ledger::open(dir.join("ledger"), ledger_config([TABLE])).unwrap());
    let log = DurableLog::open(dir.join("raft")).unwrap();
    let secret = ClusterSecret::new(SECRET).unwrap();
    let network = HttpNetwork::new(secret.clone()).unwrap();
    let node = Node::start(id, ledger, log.clone(), network).await.unwrap();
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let router = peer_router(node.raft.clone(), secret);
    let server = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    Running { node, log, server }
}

async fn stop(r: Running) {
    r.server.abort();
    let _ = r.server.await;
    r.node.raft.shutdown().await.unwrap();
    r.node.ledger.close();
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
    let digests: Vec<_> = nodes.values().map(|r| r.node.ledger.digest()).collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    assert_eq!(digests[0].size, 40);
    for (_, r) in std::mem::take(&mut nodes) {
        stop(r).await;
    }
}

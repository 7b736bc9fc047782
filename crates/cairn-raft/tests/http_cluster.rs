//! Three nodes talking over loopback HTTP (the peer listener and `HttpNetwork`), each with its
//! Raft log in Cairn: they replicate; a request without the cluster secret, or with another
//! one, is refused; the leader's crash (its listener gone) elects another; and the crashed node,
//! restarted on the same address from its own directories, catches up to the same versions.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_ledger::Ledger;
use cairn_raft::{
    ledger_config, peer_router, ClusterSecret, Command, DurableLog, Error, HttpNetwork, Node,
    NodeId, Response, Write,
};
use openraft::BasicNode;

const TABLE: &str = "accounts";
const SECRET: &str = "a-cluster-secret-for-tests";
const WAIT: Duration = Duration::from_secs(20);

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

async fn leader(nodes: &BTreeMap<NodeId, Running>) -> NodeId {
    let deadline = Instant::now() + WAIT;
    loop {
        for r in nodes.values() {
            if let Some(l) = r.node.leader().await {
                if let Some(lr) = nodes.get(&l) {
                    if lr
                        .node
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
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn write(nodes: &BTreeMap<NodeId, Running>, k: &str) -> Response {
    let command = Command::Write {
        expects: vec![],
        writes: vec![Write {
            table: TABLE.into(),
            key: k.into(),
            value: Some(k.into()),
        }],
        meta: vec![],
    };
    let deadline = Instant::now() + WAIT;
    loop {
        let l = leader(nodes).await;
        match nodes[&l].node.write(command.clone()).await {
            Ok(r) => return r,
            Err(Error::NotLeader { .. }) => {}
            Err(e) => panic!("write {k}: {e}"),
        }
        assert!(Instant::now() < deadline);
    }
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
    let members: BTreeMap<NodeId, BasicNode> = addrs
        .iter()
        .map(|(&id, addr)| (id, BasicNode::new(addr.to_string())))
        .collect();
    nodes[&1].node.raft.initialize(members).await.unwrap();
    for i in 0..20 {
        assert!(matches!(
            write(&nodes, &format!("a{i}")).await,
            Response::Committed { .. }
        ));
    }

    // The peer listener refuses a request without the secret, or with another one.
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
            write(&nodes, &format!("b{i}")).await,
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

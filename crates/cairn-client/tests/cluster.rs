//! The verifying client against a cluster: three `cairn-server` nodes (in this process, each
//! with its Raft log and peer listener on loopback), every client call made on the leader and
//! every answer verified as against a single server (receipts of writes made by the leader while
//! it applies them), and a follower's refusal (421 naming the leader) seen as the server's error.

use std::time::{Duration, Instant};

use cairn_client::{Batch, Client, Error};
use cairn_server::config::{ClusterConfig, MemberConfig};
use cairn_server::{Config, Running};

mod common;
use common::exercise::exercise;

const SECRET: &str = "a-cluster-secret-for-the-client-tests";

/// A free loopback port below the kernel's ephemeral range, found by binding it.
fn free_port(n: u64) -> u16 {
    let seed = u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for attempt in 0..1_000u64 {
        let z = seed ^ (n * 1_000 + attempt).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let port = 10_000 + ((z ^ (z >> 31)) % 20_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port");
}

/// The leader's API URL, once the nodes agree there is one.
async fn leader(http: &reqwest::Client, apis: &[String]) -> String {
    let started = Instant::now();
    loop {
        for api in apis {
            let Ok(r) = http.get(format!("{api}/v1/cluster")).send().await else {
                continue;
            };
            let Ok(text) = r.text().await else { continue };
            let Ok(status) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            if let Some(id) = status["leader"].as_u64() {
                return apis[id as usize - 1].clone();
            }
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_verifies_on_a_clusters_leader() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ports: Vec<(u16, u16)> = (0..3)
        .map(|i| (free_port(2 * i), free_port(2 * i + 1)))
        .collect();
    let apis: Vec<String> = (ports.iter())
        .map(|(api, _)| format!("http://127.0.0.1:{api}"))
        .collect();
    let members: Vec<MemberConfig> = (ports.iter().enumerate())
        .map(|(i, (api, peer))| MemberConfig {
            id: i as u64 + 1,
            addr: format!("127.0.0.1:{peer}").parse().unwrap(),
            api: format!("http://127.0.0.1:{api}"),
        })
        .collect();
    let mut nodes: Vec<Running> = Vec::new();
    for (i, (api, peer)) in ports.iter().enumerate() {
        let id = i as u64 + 1;
        let node_dir = dir.path().join(format!("node{id}"));
        let config = Config {
            listen: format!("127.0.0.1:{api}").parse().unwrap(),
            insecure_loopback: true,
            ledgers: vec![common::ledger(&node_dir, "bank")],
            cluster: Some(ClusterConfig {
                id,
                listen: format!("127.0.0.1:{peer}").parse().unwrap(),
                secret_file: secret.clone(),
                dir: node_dir.join("raft"),
                api: String::new(),
                init: if id == 1 { members.clone() } else { Vec::new() },
                fault_injection: false,
                peer_ca: None,
                snapshots_dir: None,
                snapshot_every: 100_000,
                log_kept: 5_000,
            }),
            ..Config::default()
        };
        nodes.push(
            cairn_server::start(config, std::future::pending())
                .await
                .unwrap(),
        );
    }
    let http = common::http(Duration::from_secs(5));
    let leader = leader(&http, &apis).await;
    let client = Client::builder(&leader, "bank").build().unwrap();
    exercise(&client).await;

    // A follower refuses the write, naming the leader; nothing is written.
    let follower = apis.iter().find(|a| **a != leader).unwrap();
    let elsewhere = Client::builder(follower, "bank").build().unwrap();
    let mut b = Batch::new();
    b.insert("checking", "zed", "1");
    let e = elsewhere.put(&b).await.unwrap_err();
    assert!(
        matches!(e, Error::Server { status: 421, ref code, ref message } if code == "not_leader" && message.contains(&leader)),
        "{e}"
    );
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

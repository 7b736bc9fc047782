//! Peer TLS: three nodes in this process, configured as for production (TLS and tokens, no
//! `insecure_loopback`), each with a certificate its cluster's CA signed for 127.0.0.1 and
//! `[cluster] peer_ca` naming that CA; and a router reaching them over `https://` with
//! `[router] ca`. Writes replicate and read back on every node and through the router; the
//! peer listener refuses plain HTTP and a client that trusts another CA; and a node whose
//! certificate another CA signed never catches up (its peers refuse it). Every listener is on
//! 127.0.0.1; every wait is bounded.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_server::auth::{new_token, token_hash, Right};
use cairn_server::config::{
    ClusterConfig, GrantConfig, LedgerConfig, MemberConfig, RouterConfig, TlsConfig, TokenConfig,
};
use cairn_server::{Config, Running};
use common::{call, converge, free_port, get, leader_api, put, WAIT};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::json;

/// A CA, and certificates it signs for 127.0.0.1.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for 127.0.0.1 and localhost, and its key, written as `name.pem` and
    /// `name.key` in `dir`: their paths.
    fn issue(&self, dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}

/// An HTTPS client trusting `ca_pem` only, presenting `token`.
fn https(ca_pem: &str, token: &str) -> reqwest::Client {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .default_headers(headers)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

struct Node {
    id: u64,
    api: u16,
    peer: u16,
}

impl Node {
    fn api_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.api)
    }

    fn member(&self) -> MemberConfig {
        MemberConfig {
            id: self.id,
            addr: format!("127.0.0.1:{}", self.peer).parse().unwrap(),
            api: self.api_url(),
        }
    }
}

/// Starts `node` with its certificate from `ca` and peers trusting `peer_ca` (a file).
async fn start(
    dir: &Path,
    node: &Node,
    ca: &Ca,
    peer_ca: &Path,
    token: &str,
    init: Vec<MemberConfig>,
) -> Running {
    let home = dir.join(format!("node{}", node.id));
    std::fs::create_dir_all(&home).unwrap();
    common::write_secret(&home);
    let (cert, key) = ca.issue(&home, "node");
    let config = Config {
        listen: format!("127.0.0.1:{}", node.api).parse().unwrap(),
        tls: Some(TlsConfig {
            cert: Some(cert),
            key: Some(key),
            self_signed: Vec::new(),
        }),
        ledgers: vec![LedgerConfig {
            name: "bank".into(),
            dir: home.join("ledger"),
            tables: vec!["checking".into()],
            ordered: Vec::new(),
            history: 64,
            group: 8,
        }],
        tokens: vec![TokenConfig {
            name: "operator".into(),
            sha256: token_hash(token),
            grants: vec![GrantConfig {
                ledger: "bank".into(),
                tables: vec!["*".into()],
                rights: vec![Right::Read, Right::Write, Right::Admin],
            }],
        }],
        cluster: Some(ClusterConfig {
            id: node.id,
            listen: format!("127.0.0.1:{}", node.peer).parse().unwrap(),
            peer_ca: Some(peer_ca.to_path_buf()),
            secret_file: home.join("secret"),
            dir: home.join("raft"),
            api: String::new(),
            init,
            fault_injection: false,
            snapshots_dir: None,
            snapshot_every: 100_000,
            log_kept: 5_000,
        }),
        ..Config::default()
    };
    cairn_server::start(config, std::future::pending())
        .await
        .unwrap()
}

/// Starts node `id` with a certificate of `ca`, trusting `peer_ca`, and asks `leader` to add
/// it as a learner: the node, its server, and the answer.
async fn learner(
    http: &reqwest::Client,
    leader: &str,
    dir: &Path,
    id: u64,
    ca: &Ca,
    peer_ca: &Path,
    token: &str,
) -> (Node, Running, common::Answer) {
    let node = Node {
        id,
        api: free_port(),
        peer: free_port(),
    };
    let running = start(dir, &node, ca, peer_ca, token, Vec::new()).await;
    let add = json!({"id": id, "addr": format!("127.0.0.1:{}", node.peer), "api": node.api_url()});
    let url = format!("{leader}/v1/cluster/learners");
    let answer = call(http, "POST", &url, Some(add)).await;
    (node, running, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_and_the_router_speak_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let token = new_token().unwrap();
    let http = https(&ca.pem(), &token);

    let nodes: Vec<Node> = (1..=3)
        .map(|id| Node {
            id,
            api: free_port(),
            peer: free_port(),
        })
        .collect();
    let members: Vec<MemberConfig> = nodes.iter().map(Node::member).collect();
    let mut running = Vec::new();
    for n in &nodes {
        let init = if n.id == 1 {
            members.clone()
        } else {
            Vec::new()
        };
        running.push(start(dir.path(), n, &ca, &ca_file, &token, init).await);
    }
    let apis: Vec<String> = nodes.iter().map(Node::api_url).collect();
    leader_api(&http, &apis).await;
    for i in 0..5 {
        put(&http, &apis, &format!("k{i}"), &format!("v{i}")).await;
    }
    let digest = converge(&http, &apis, 5).await;
    for api in &apis {
        let (status, value) = get(&http, api, "k4", "stale").await;
        assert_eq!((status, value), (200, json!(common::h(b"v4"))), "{api}");
    }

    // The peer listener speaks TLS only, to clients that trust the cluster's CA.
    let peer_url = format!("127.0.0.1:{}/raft/v1/vote", nodes[0].peer);
    let plain = common::client(Duration::from_secs(5));
    let a = plain
        .post(format!("http://{peer_url}"))
        .body("{}")
        .send()
        .await;
    assert!(a.is_err(), "plain HTTP to a TLS peer listener: {a:?}");
    let other = Ca::new();
    let stranger = https(&other.pem(), &token);
    let a = stranger
        .post(format!("https://{peer_url}"))
        .body("{}")
        .send()
        .await;
    assert!(a.is_err(), "a client trusting another CA: {a:?}");
    // One that trusts it but has no secret is refused by the listener.
    let a = call(
        &http,
        "POST",
        &format!("https://{peer_url}"),
        Some(json!({})),
    )
    .await;
    assert_eq!(a.status, 401, "{}", a.body);

    // A router over one shard of these nodes, over https with its CA.
    let token_file = dir.path().join("router.token");
    std::fs::write(&token_file, &token).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let router_home = dir.path().join("router");
    std::fs::create_dir_all(&router_home).unwrap();
    let (cert, key) = ca.issue(&router_home, "router");
    let router_config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(TlsConfig {
            cert: Some(cert),
            key: Some(key),
            self_signed: Vec::new(),
        }),
        tokens: vec![TokenConfig {
            name: "client".into(),
            sha256: token_hash(&token),
            grants: vec![GrantConfig {
                ledger: "bank".into(),
                tables: vec!["*".into()],
                rights: vec![Right::Read, Right::Write],
            }],
        }],
        router: Some(RouterConfig {
            ledger: "bank".into(),
            tables: vec!["checking".into()],
            shards: vec![apis.clone()],
            ca: Some(ca_file.clone()),
            token_file: Some(token_file),
            name: Some("tls".into()),
            resolve_after_ms: 300,
        }),
        ..Config::default()
    };
    let router = cairn_server::start(router_config, std::future::pending())
        .await
        .unwrap();
    let router_url = format!("https://127.0.0.1:{}", router.addr.port());
    let body = common::put_body(b"routed", b"1");
    let a = call(
        &http,
        "POST",
        &format!("{router_url}/v1/ledgers/bank/put"),
        Some(body),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let body =
        json!({"tables": [{"table": "checking", "keys": [common::h(b"routed")]}], "lift": true});
    let a = call(
        &http,
        "POST",
        &format!("{router_url}/v1/ledgers/bank/get"),
        Some(body),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["tables"][0]["values"][0], json!(common::h(b"1")));
    assert_eq!(a.body["global"][0]["versions"].as_array().unwrap().len(), 1);

    // A fourth node whose certificate another CA signed joins as a learner but never
    // receives the log: the leader does not trust it, nor it the leader.
    let rogue_ca = dir.path().join("rogue-ca.pem");
    std::fs::write(&rogue_ca, format!("{}{}", other.pem(), ca.pem())).unwrap();
    let leader = leader_api(&http, &apis).await;
    let (rogue, rogue_running, a) =
        learner(&http, &leader, dir.path(), 4, &other, &rogue_ca, &token).await;
    // Added, then waiting for a catch-up that never comes: the call's own time limit ends it.
    assert!(matches!(a.status, 0 | 200 | 503), "{} {}", a.status, a.body);
    let rogue_http = https(&other.pem(), &token);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let (status, _) = get(&rogue_http, &rogue.api_url(), "k4", "stale").await;
        assert_ne!(status, 200, "the rogue node received the log");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(digest["size"].as_u64().unwrap() >= 5);

    // The control: a fifth node with a certificate of the cluster's CA catches up at once.
    let (good, good_running, a) =
        learner(&http, &leader, dir.path(), 5, &ca, &ca_file, &token).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let until = Instant::now() + WAIT;
    loop {
        let (status, value) = get(&http, &good.api_url(), "k4", "stale").await;
        if status == 200 && value == json!(common::h(b"v4")) {
            break;
        }
        assert!(
            Instant::now() < until,
            "the learner never caught up: {status} {value}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    good_running.shutdown().await.unwrap();

    router.shutdown().await.unwrap();
    rogue_running.shutdown().await.unwrap();
    for r in running {
        r.shutdown().await.unwrap();
    }
}

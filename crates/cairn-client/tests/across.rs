//! Reads across shards with lifted proofs: two shards (each a one-node Raft cluster in this
//! process) behind a router, and a proxy on 127.0.0.1 between the client and the router that,
//! per mode, alters the router's answer. Honest answers verify, against a global root equal to
//! the router's own `root` answer; every altered one is refused with the documented lie.
//! Every listener is on loopback; every wait is bounded.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::response::Response;
use cairn_client::{Batch, Client, Error, Lie};
use cairn_proof::ShardMap;
use cairn_server::config::{ClusterConfig, MemberConfig, RouterConfig};
use cairn_server::{wire, Config, Running};
use prost::Message as _;

const SECRET: &str = "a-cluster-secret-for-the-across-tests";

/// What the proxy does to a router's `get` answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Honest,
    /// Flips a bit of the first table's global root.
    AlterRoot,
    /// Answers with the global proofs of the last honest answer (another version of a shard).
    ReplayGlobal,
    /// As `ReplayGlobal`, with the versions of this answer: only what binds the proof to the
    /// shards' receipts tells.
    ReplayGlobalAsNew,
    /// Says the global root holds shard 0 at another version.
    BumpVersion,
    /// Drops the last shard's answer.
    DropShard,
    /// Alters a value in the first shard's answer.
    AlterShardValue,
    /// Swaps the first table's lifted proof for another table's.
    SwapProof,
}

struct Proxy {
    upstream: String,
    mode: Mutex<Mode>,
    last: Mutex<Option<wire::ReadResponse>>,
    http: reqwest::Client,
}

async fn relay(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let mode = *proxy.mode.lock().unwrap();
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await.unwrap();
    let path = parts.uri.path_and_query().unwrap().as_str().to_string();
    let mut forward = (proxy.http)
        .request(parts.method.clone(), format!("{}{path}", proxy.upstream))
        .body(body);
    for name in [CONTENT_TYPE, ACCEPT] {
        if let Some(value) = parts.headers.get(&name) {
            forward = forward.header(name, value);
        }
    }
    let answer = forward.send().await.unwrap();
    let status = answer.status();
    let media = answer.headers().get(CONTENT_TYPE).cloned();
    let mut bytes = answer.bytes().await.unwrap();
    if status.is_success() && path.ends_with("/get") {
        let mut read = wire::ReadResponse::decode(&bytes[..]).unwrap();
        match mode {
            Mode::Honest => *proxy.last.lock().unwrap() = Some(read.clone()),
            Mode::AlterRoot => read.global[0].root[7] ^= 1,
            Mode::ReplayGlobal => read.global = proxy.last.lock().unwrap().clone().unwrap().global,
            Mode::ReplayGlobalAsNew => {
                let mut old = proxy.last.lock().unwrap().clone().unwrap().global;
                for (o, g) in old.iter_mut().zip(&read.global) {
                    o.versions = g.versions.clone();
                }
                read.global = old;
            }
            Mode::BumpVersion => read.global[0].versions[0] += 1,
            Mode::DropShard => {
                read.shards.pop();
            }
            Mode::AlterShardValue => {
                let shard = read.shards[0].read.as_mut().unwrap();
                shard.tables[0].values[0].value.as_mut().unwrap().push(b'!');
            }
            Mode::SwapProof => {
                let other = read.global[1].proof.clone();
                read.global[0].proof = other;
            }
        }
        bytes = Bytes::from(read.encode_to_vec());
    }
    let mut r = Response::builder().status(status);
    if let Some(m) = media {
        r = r.header(CONTENT_TYPE, m);
    }
    r.body(Body::from(bytes)).unwrap()
}

async fn proxy(upstream: String) -> (String, Arc<Proxy>) {
    let state = Arc::new(Proxy {
        upstream,
        mode: Mutex::new(Mode::Honest),
        last: Mutex::new(None),
        http: common::http(Duration::from_secs(10)),
    });
    let app = axum::Router::new()
        .fallback(relay)
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, state)
}

/// A free loopback port, found by binding it (distinct from every one handed out before).
fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A one-node Raft cluster serving ledger `bank` in `dir`, and its API's URL once it leads.
async fn shard_node(dir: &std::path::Path) -> (Running, String) {
    use std::os::unix::fs::PermissionsExt as _;
    let secret = dir.join("secret");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&secret, SECRET).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (api, peer) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{api}");
    let config = Config {
        listen: format!("127.0.0.1:{api}").parse().unwrap(),
        insecure_loopback: true,
        ledgers: vec![common::ledger(dir, "bank")],
        cluster: Some(ClusterConfig {
            id: 1,
            listen: format!("127.0.0.1:{peer}").parse().unwrap(),
            secret_file: secret,
            dir: dir.join("raft"),
            api: String::new(),
            init: vec![MemberConfig {
                id: 1,
                addr: format!("127.0.0.1:{peer}").parse().unwrap(),
                api: url.clone(),
            }],
            fault_injection: false,
            peer_ca: None,
            snapshots_dir: None,
            snapshot_every: 100_000,
            log_kept: 5_000,
        }),
        ..Config::default()
    };
    let running = cairn_server::start(config, std::future::pending())
        .await
        .unwrap();
    let http = common::http(Duration::from_secs(10));
    let started = Instant::now();
    loop {
        let status: Option<serde_json::Value> =
            match http.get(format!("{url}/v1/cluster")).send().await {
                Ok(r) => serde_json::from_slice(&r.bytes().await.unwrap_or_default()).ok(),
                Err(_) => None,
            };
        if status.is_some_and(|s| s["leader"].as_u64() == Some(1)) {
            return (running, url);
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[track_caller]
fn assert_lie<T: std::fmt::Debug>(result: Result<T, Error>, expected: fn(&Lie) -> bool) {
    match result {
        Err(Error::Lie(lie)) if expected(&lie) => eprintln!("refused: {lie}"),
        other => panic!("expected another lie, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_across_shards_prove_values_against_the_global_root() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    let mut apis = Vec::new();
    for s in 0..2 {
        let (node, api) = shard_node(&dir.path().join(format!("shard{s}"))).await;
        nodes.push(node);
        apis.push(vec![api]);
    }
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        insecure_loopback: true,
        router: Some(RouterConfig {
            ledger: "bank".into(),
            tables: vec!["checking".into(), "savings".into(), common::ORDERED.into()],
            shards: apis,
            token_file: None,
            name: Some("across".into()),
            resolve_after_ms: 300,
            ca: None,
        }),
        ..Config::default()
    };
    let router = cairn_server::start(config, std::future::pending())
        .await
        .unwrap();
    let router_url = format!("http://{}", router.addr);
    let (url, proxy) = proxy(router_url.clone()).await;
    let client = Client::builder(&url, "bank")
        .ordered_tables([common::ORDERED])
        .build()
        .unwrap();

    // Keys on both shards, in plain and ordered tables, written across shards at once.
    let map = ShardMap::new(cairn_proof::HashKind::Sha256, 1).unwrap();
    let keys: Vec<String> = (0..12).map(|i| format!("acct-{i:02}")).collect();
    let on = |s: u32| keys.iter().filter(move |k| map.shard_of(k.as_bytes()) == s);
    assert!(on(0).count() > 0 && on(1).count() > 0);
    let mut b = Batch::new();
    for (i, k) in keys.iter().enumerate() {
        b.insert("checking", k, format!("{i}"));
        b.insert(common::ORDERED, k, format!("name {i}"));
    }
    b.insert("savings", &keys[0], "saved");
    let versions = client.transact_across(&b).await.unwrap();
    assert_eq!(versions.len(), 2, "{versions:?}");

    // Both shards, keys absent.
    let mut asked: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    asked.push(b"absent");
    let read = client
        .get_across(&[("checking", &asked[..]), ("savings", &asked[..])])
        .await
        .unwrap();
    for (i, v) in read.values[0].iter().take(keys.len()).enumerate() {
        assert_eq!(v.as_deref(), Some(format!("{i}").as_bytes()));
    }
    assert_eq!(read.values[0][keys.len()], None);
    assert_eq!(read.values[1][0].as_deref(), Some(&b"saved"[..]));
    assert_eq!(read.values[1][1], None);
    assert_eq!(read.shards.len(), 2);
    // The same root as the router's own, while nothing is written.
    let http = common::http(Duration::from_secs(10));
    let root = (http.get(format!("{router_url}/v1/ledgers/bank/root?table=checking")))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let root: serde_json::Value = serde_json::from_slice(&root).unwrap();
    assert_eq!(
        root["root"],
        serde_json::json!(hex::encode(read.global[0].root.hash))
    );

    // An ordered table has no global root: each shard keeps its own chain of links.
    let names: Vec<&[u8]> = vec![keys[1].as_bytes()];
    let e = client.get_across(&[(common::ORDERED, &names[..])]).await;
    assert!(matches!(e, Err(Error::Invalid(_))), "{e:?}");
    let undeclared = Client::builder(&url, "bank").build().unwrap();
    let e = undeclared
        .get_across(&[(common::ORDERED, &names[..])])
        .await;
    assert!(matches!(e, Err(Error::Server { status: 400, .. })), "{e:?}");

    // Keys of one shard only: the other enters the global root by its witness.
    let one: Vec<&[u8]> = on(1).map(|k| k.as_bytes()).collect();
    let alone = client.get_across(&[("checking", &one[..])]).await.unwrap();
    assert_eq!(alone.shards.len(), 1);
    assert_eq!(alone.global[0].root, read.global[0].root);

    // Lies. ReplayGlobal needs another version of a shard the read touches: a write to a key
    // not read.
    let pair: Vec<&[u8]> = vec![
        on(0).next().unwrap().as_bytes(),
        on(1).next().unwrap().as_bytes(),
    ];
    let reads = [("checking", &pair[..]), ("savings", &pair[..])];
    client.get_across(&reads).await.unwrap();
    let mut b = Batch::new();
    assert!(on(0).count() >= 2, "a key of shard 0 not read");
    b.insert("checking", on(0).next_back().unwrap(), "moved");
    client.transact_across(&b).await.unwrap();
    let bad = |l: &Lie| matches!(l, Lie::BadProof(_));
    for mode in [
        Mode::AlterRoot,
        Mode::ReplayGlobal,
        Mode::ReplayGlobalAsNew,
        Mode::BumpVersion,
        Mode::DropShard,
        Mode::SwapProof,
    ] {
        *proxy.mode.lock().unwrap() = mode;
        assert_lie(client.get_across(&reads).await, bad);
    }
    *proxy.mode.lock().unwrap() = Mode::AlterShardValue;
    assert_lie(client.get_across(&reads).await, |l| {
        matches!(l, Lie::AlteredValue { .. })
    });
    *proxy.mode.lock().unwrap() = Mode::Honest;
    client.get_across(&reads).await.unwrap();

    router.shutdown().await.unwrap();
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

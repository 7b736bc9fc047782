//! Three `cairn-server --raft` processes on loopback: a write through the leader is
//! acknowledged and read back linearizably; a node that does not lead answers 421 naming the
//! leader; a stale read is served anywhere; the leader's SIGKILL elects another and no
//! acknowledged write is lost; the killed node, restarted from its directories, catches up to
//! the same digest; a learner joins through the admin endpoints and is promoted. Every
//! listener is on 127.0.0.1; every wait is bounded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long any one wait may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);
const SECRET: &str = "a-cluster-secret-shared-by-the-test-nodes";

fn h(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// Free loopback ports (bound, read and released: another process could take one in between,
/// which would fail the test loudly, not wrongly).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

struct Member {
    id: u64,
    api_port: u16,
    peer_port: u16,
}

impl Member {
    fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.api_port)
    }
}

/// A node's process, its configuration and its log file.
struct Proc {
    id: u64,
    api: String,
    config: PathBuf,
    stderr: PathBuf,
    child: Option<Child>,
}

impl Proc {
    fn spawn(&mut self) {
        let log = std::fs::File::create(&self.stderr).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cairn-server"))
            .arg("--raft")
            .arg("--config")
            .arg(&self.config)
            .env("CAIRN_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// SIGKILL: no shutdown, no sync.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes node `m`'s configuration under `root`: insecure loopback (no tokens), one ledger,
/// the cluster section; `init` lists the first members (for one node only).
fn write_config(root: &Path, m: &Member, init: &[&Member]) -> PathBuf {
    let dir = root.join(format!("node{}", m.id));
    std::fs::create_dir_all(&dir).unwrap();
    let init: Vec<String> = init
        .iter()
        .map(|o| {
            format!(
                "{{ id = {}, addr = \"127.0.0.1:{}\", api = \"{}\" }}",
                o.id,
                o.peer_port,
                o.api()
            )
        })
        .collect();
    let text = format!(
        "listen = \"127.0.0.1:{api}\"\ninsecure_loopback = true\nshutdown_timeout_ms = 2000\n\n\
         [[ledgers]]\nname = \"bank\"\ndir = {ledger:?}\ntables = [\"checking\"]\nhistory = 16\n\n\
         [cluster]\nid = {id}\nlisten = \"127.0.0.1:{peer}\"\nsecret_file = {secret:?}\n\
         dir = {raft:?}\napi = \"{api_url}\"\ninit = [{init}]\n",
        api = m.api_port,
        ledger = dir.join("ledger"),
        id = m.id,
        peer = m.peer_port,
        secret = root.join("secret"),
        raft = dir.join("raft"),
        api_url = m.api(),
        init = init.join(", "),
    );
    let path = dir.join("server.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn write_secret(root: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let path = root.join("secret");
    std::fs::write(&path, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn client() -> reqwest::Client {
    // Plain HTTP; reqwest is built with rustls in this workspace, which wants a provider.
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// An answer: status, the `cairn-leader` header, the JSON body (Null when none).
struct Answer {
    status: u16,
    leader: Option<String>,
    body: Value,
}

async fn call(http: &reqwest::Client, method: &str, url: &str, body: Option<Value>) -> Answer {
    let request = match method {
        "GET" => http.get(url),
        _ => http
            .post(url)
            .header("content-type", "application/json")
            .body(body.unwrap_or(Value::Null).to_string()),
    };
    match request.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let leader = (r.headers().get("cairn-leader"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let text = r.text().await.unwrap_or_default();
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            Answer {
                status,
                leader,
                body,
            }
        }
        // Refused or reset: a node that is down.
        Err(_) => Answer {
            status: 0,
            leader: None,
            body: Value::Null,
        },
    }
}

/// The leader's API URL as the live nodes see it, once one is elected and known.
async fn leader_api(http: &reqwest::Client, apis: &[String]) -> String {
    let start = Instant::now();
    loop {
        for api in apis {
            let a = call(http, "GET", &format!("{api}/v1/cluster"), None).await;
            if a.status != 200 {
                continue;
            }
            if let Some(id) = a.body["leader"].as_u64() {
                let members = a.body["members"].as_array().cloned().unwrap_or_default();
                if let Some(m) = members.iter().find(|m| m["id"] == id) {
                    let api = m["api"].as_str().unwrap_or_default().to_string();
                    if apis.contains(&api) {
                        return api;
                    }
                }
            }
        }
        assert!(start.elapsed() < WAIT, "no leader among {apis:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Puts `key = value` through whichever node leads, following 421s, until acknowledged: the
/// version made.
async fn put(http: &reqwest::Client, apis: &[String], key: &str, value: &str) -> u64 {
    let body = json!({"tables": [{"table": "checking",
        "writes": [{"key": h(key.as_bytes()), "value": h(value.as_bytes())}]}]});
    let start = Instant::now();
    let mut target = apis[0].clone();
    loop {
        let a = call(
            http,
            "POST",
            &format!("{target}/v1/ledgers/bank/put"),
            Some(body.clone()),
        )
        .await;
        match a.status {
            200 => return a.body["version"].as_u64().unwrap(),
            421 => {
                target = match a.leader.filter(|l| apis.contains(l)) {
                    Some(leader) => leader,
                    None => leader_api(http, apis).await,
                };
            }
            // Down, or the outcome unknown (a put is idempotent: retrying is safe).
            0 | 503 => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                target = leader_api(http, apis).await;
            }
            other => panic!("put {key}: {other} {}", a.body),
        }
        assert!(start.elapsed() < WAIT, "put {key} was never acknowledged");
    }
}

/// Reads `key` on `api` with `consistency`: the status and the value (hex, or Null).
async fn get(http: &reqwest::Client, api: &str, key: &str, consistency: &str) -> (u16, Value) {
    let body = json!({"tables": [{"table": "checking", "keys": [h(key.as_bytes())]}]});
    let url = format!("{api}/v1/ledgers/bank/get?consistency={consistency}");
    let a = call(http, "POST", &url, Some(body)).await;
    (a.status, a.body["tables"][0]["values"][0].clone())
}

async fn digest(http: &reqwest::Client, api: &str) -> Option<Value> {
    let url = format!("{api}/v1/ledgers/bank/digest?consistency=stale");
    let a = call(http, "GET", &url, None).await;
    (a.status == 200).then_some(a.body)
}

/// Waits until every node in `apis` answers the same digest, of at least `size` versions.
async fn converge(http: &reqwest::Client, apis: &[String], size: u64) -> Value {
    let start = Instant::now();
    loop {
        let mut seen = Vec::new();
        for api in apis {
            seen.push(digest(http, api).await);
        }
        let first = seen[0].clone();
        let same = seen.iter().all(|d| d.is_some() && *d == first);
        if let Some(d) = first.filter(|d| same && d["size"].as_u64() >= Some(size)) {
            return d;
        }
        assert!(start.elapsed() < WAIT, "no convergence: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_up(http: &reqwest::Client, proc: &Proc) {
    let start = Instant::now();
    while call(http, "GET", &format!("{}/health", proc.api), None)
        .await
        .status
        != 200
    {
        assert!(
            start.elapsed() < WAIT,
            "node {} never came up:\n{}",
            proc.id,
            proc.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_replicate_survive_a_leader_kill_and_take_a_learner() {
    let root = tempfile::tempdir().unwrap();
    write_secret(root.path());
    let members: Vec<Member> = (1..=4)
        .map(|id| Member {
            id,
            api_port: free_port(),
            peer_port: free_port(),
        })
        .collect();
    let first: Vec<&Member> = members[..3].iter().collect();
    let mut procs: BTreeMap<u64, Proc> = BTreeMap::new();
    for m in &members {
        let init: &[&Member] = if m.id == 1 { &first } else { &[] };
        let config = write_config(root.path(), m, init);
        procs.insert(
            m.id,
            Proc {
                id: m.id,
                api: m.api(),
                stderr: config.with_file_name("stderr.log"),
                config,
                child: None,
            },
        );
    }
    let http = client();
    for id in 1..=3 {
        procs.get_mut(&id).unwrap().spawn();
    }
    for id in 1..=3 {
        wait_up(&http, &procs[&id]).await;
    }
    let mut apis: Vec<String> = (1..=3).map(|id| procs[&id].api.clone()).collect();

    // Writes through the leader; reads back, linearizably, through it.
    let mut acknowledged: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..10 {
        let (k, v) = (format!("a{i}"), format!("{i}"));
        put(&http, &apis, &k, &v).await;
        acknowledged.insert(k, v);
    }
    let leader = leader_api(&http, &apis).await;
    let (status, value) = get(&http, &leader, "a3", "linearizable").await;
    assert_eq!((status, value), (200, json!(h(b"3"))));

    // A node that does not lead sends writes and linearizable reads to the leader (421, the
    // leader's API named, once it has heard from the leader), and serves stale reads itself.
    converge(&http, &apis, 10).await;
    let follower = apis.iter().find(|a| **a != leader).unwrap().clone();
    let body =
        json!({"tables": [{"table": "checking", "writes": [{"key": h(b"z"), "value": h(b"z")}]}]});
    let a = call(
        &http,
        "POST",
        &format!("{follower}/v1/ledgers/bank/put"),
        Some(body),
    )
    .await;
    assert_eq!(a.status, 421, "{}", a.body);
    assert_eq!(a.body["code"], "not_leader");
    assert_eq!(a.leader.as_deref(), Some(leader.as_str()));
    let (status, _) = get(&http, &follower, "a3", "linearizable").await;
    assert_eq!(status, 421);
    let (status, value) = get(&http, &follower, "a3", "stale").await;
    assert_eq!((status, value), (200, json!(h(b"3"))));
    let (status, _) = get(&http, &follower, "a3", "sometimes").await;
    assert_eq!(status, 400);

    // SIGKILL the leader: the others elect one and go on; nothing acknowledged is lost.
    let killed = procs
        .values()
        .find(|p| p.api == leader)
        .map(|p| p.id)
        .unwrap();
    procs.get_mut(&killed).unwrap().kill();
    let live: Vec<String> = apis.iter().filter(|a| **a != leader).cloned().collect();
    for i in 0..10 {
        let (k, v) = (format!("b{i}"), format!("{i}"));
        put(&http, &live, &k, &v).await;
        acknowledged.insert(k, v);
    }
    let new_leader = leader_api(&http, &live).await;
    assert_ne!(new_leader, leader);
    for (k, v) in &acknowledged {
        let (status, value) = get(&http, &new_leader, k, "linearizable").await;
        assert_eq!((status, value), (200, json!(h(v.as_bytes()))), "{k}");
    }

    // The killed node restarts from its directories and catches up to the same digest.
    procs.get_mut(&killed).unwrap().spawn();
    wait_up(&http, &procs[&killed]).await;
    let d = converge(&http, &apis, 20).await;
    assert_eq!(d["size"], 20, "{d}");

    // A fourth node joins as a learner, catches up, and is promoted; the cluster then has
    // four voters and still writes.
    procs.get_mut(&4).unwrap().spawn();
    wait_up(&http, &procs[&4]).await;
    let leader = leader_api(&http, &apis).await;
    let learner = json!({"id": 4, "addr": format!("127.0.0.1:{}", members[3].peer_port),
        "api": members[3].api()});
    let a = call(
        &http,
        "POST",
        &format!("{leader}/v1/cluster/learners"),
        Some(learner),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = call(
        &http,
        "POST",
        &format!("{leader}/v1/cluster/voters"),
        Some(json!({"voters": [1, 2, 3, 4]})),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    apis.push(procs[&4].api.clone());
    // The leader's view: the newcomer may not have applied the change yet.
    let status = call(&http, "GET", &format!("{leader}/v1/cluster"), None).await;
    let voters = status.body["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["voter"] == true)
        .count();
    assert_eq!(voters, 4, "{}", status.body);
    put(&http, &apis, "c0", "0").await;
    converge(&http, &apis, 21).await;

    // A stranger without the secret is refused by a peer listener.
    let url = format!("http://127.0.0.1:{}/raft/v1/vote", members[0].peer_port);
    let a = call(&http, "POST", &url, Some(json!({}))).await;
    assert_eq!(a.status, 401);
}

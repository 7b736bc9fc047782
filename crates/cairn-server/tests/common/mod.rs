//! What the cluster tests share: nodes as `cairn-server --raft` processes on loopback, their
//! configurations, and a small JSON client. Every wait is bounded by [`WAIT`].
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long any one wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);
pub const SECRET: &str = "a-cluster-secret-shared-by-the-test-nodes";

pub fn h(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// A free loopback port below the kernel's ephemeral range (so that no outgoing connection or
/// port-0 listener of any process is given it between now and the node's start), found by
/// binding it, and never handed out twice by this process; another process choosing the same
/// port the same way could still take it, which fails the test loudly, not wrongly.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Ports handed out before: one picked for a node that has not bound it yet is free, and
    // must not be picked again (a campaign draws thousands: a repeat inside one schedule was
    // a test's failure, "address already in use").
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32_768);
    let low = 10_000u64.min(ephemeral_low / 2);
    let span = ephemeral_low.saturating_sub(low).max(1);
    let seed = u64::from(std::process::id()).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for _ in 0..1_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut z = seed.wrapping_add(n.wrapping_mul(0xbf58_476d_1ce4_e5b9));
        z ^= z >> 31;
        let port = (low + z % span) as u16;
        let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port below {ephemeral_low}");
}

/// A node's number and ports.
pub struct Member {
    pub id: u64,
    pub api_port: u16,
    pub peer_port: u16,
}

impl Member {
    pub fn new(id: u64) -> Member {
        Member {
            id,
            api_port: free_port(),
            peer_port: free_port(),
        }
    }

    pub fn api(&self) -> String {
        format!("http://127.0.0.1:{}", self.api_port)
    }
}

/// A node's process, its configuration and its log file.
pub struct Proc {
    pub id: u64,
    pub api: String,
    pub config: PathBuf,
    pub stderr: PathBuf,
    pub child: Option<Child>,
    /// Started with `--raft` (a cluster node), or not (a router).
    pub raft: bool,
}

impl Proc {
    /// A node of `m` under `root` (not started), its configuration written: insecure loopback
    /// (no tokens), one ledger `bank` with table `checking`, `init` the first members (for one
    /// node only), `faults` allowing fault injection.
    pub fn new(root: &Path, m: &Member, init: &[&Member], faults: bool) -> Proc {
        let config = write_config(root, m, init, faults);
        Proc {
            id: m.id,
            api: m.api(),
            stderr: config.with_file_name("stderr.log"),
            config,
            child: None,
            raft: true,
        }
    }

    /// A router (not started) in `dir`, listening on loopback `port`, over `shards` (each
    /// shard's nodes' API URLs), its resolver deciding transactions left prepared for
    /// `resolve_ms`: insecure loopback, ledger `bank` with table `checking`.
    pub fn router(dir: &Path, port: u16, shards: &[Vec<String>], resolve_ms: u64) -> Proc {
        std::fs::create_dir_all(dir).unwrap();
        let groups: Vec<String> = shards.iter().map(|apis| format!("{apis:?}")).collect();
        let text = format!(
            "listen = \"127.0.0.1:{port}\"\ninsecure_loopback = true\nshutdown_timeout_ms = 2000\n\n\
             [router]\nledger = \"bank\"\ntables = [\"checking\"]\nshards = [{}]\n\
             resolve_after_ms = {resolve_ms}\n",
            groups.join(", ")
        );
        let config = dir.join("router.toml");
        std::fs::write(&config, text).unwrap();
        Proc {
            id: 0,
            api: format!("http://127.0.0.1:{port}"),
            stderr: dir.join("stderr.log"),
            config,
            child: None,
            raft: false,
        }
    }

    pub fn spawn(&mut self) {
        use std::io::Write as _;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr)
            .unwrap();
        writeln!(log, "---- started").unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_cairn-server"));
        if self.raft {
            command.arg("--raft");
        }
        let child = command
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
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGSTOP (`stop`) or SIGCONT.
    pub fn pause(&self, stop: bool) {
        let Some(child) = &self.child else { return };
        let signal = if stop { "-STOP" } else { "-CONT" };
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {}", child.id());
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // A paused process would not die of SIGKILL's wait otherwise... it does, but resume it
        // first so that its exit is prompt.
        self.pause(false);
        self.kill();
    }
}

fn write_config(root: &Path, m: &Member, init: &[&Member], faults: bool) -> PathBuf {
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
         dir = {raft:?}\napi = \"{api_url}\"\ninit = [{init}]\nfault_injection = {faults}\n\
         snapshot_every = 50\nlog_kept = 10\n",
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

/// The cluster secret every node reads, mode 600.
pub fn write_secret(root: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let path = root.join("secret");
    std::fs::write(&path, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A plain-HTTP client with a per-request `timeout`.
pub fn client(timeout: Duration) -> reqwest::Client {
    // reqwest is built with rustls in this workspace, which wants a provider.
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .build()
        .unwrap()
}

/// How a call ended.
pub enum Delivery {
    /// Never reached the server (connection refused): certainly not done.
    Refused,
    /// Sent, but no answer (timeout, reset): it may have been done.
    Lost,
    /// An answer: status, the `cairn-leader` header, the JSON body (a string when not JSON).
    Answer {
        status: u16,
        leader: Option<String>,
        body: Value,
    },
}

pub async fn send(
    http: &reqwest::Client,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> Delivery {
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
            match r.text().await {
                Ok(text) => {
                    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                    Delivery::Answer {
                        status,
                        leader,
                        body,
                    }
                }
                Err(_) => Delivery::Lost,
            }
        }
        Err(e) if e.is_connect() => Delivery::Refused,
        Err(_) => Delivery::Lost,
    }
}

/// An answer, or status 0 and Null when there was none.
pub struct Answer {
    pub status: u16,
    pub leader: Option<String>,
    pub body: Value,
}

pub async fn call(http: &reqwest::Client, method: &str, url: &str, body: Option<Value>) -> Answer {
    match send(http, method, url, body).await {
        Delivery::Answer {
            status,
            leader,
            body,
        } => Answer {
            status,
            leader,
            body,
        },
        Delivery::Refused | Delivery::Lost => Answer {
            status: 0,
            leader: None,
            body: Value::Null,
        },
    }
}

/// The leader's API URL as the nodes in `apis` see it, once one is elected and known.
pub async fn leader_api(http: &reqwest::Client, apis: &[String]) -> String {
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

/// The body of a put of `key = value` in table `checking`.
pub fn put_body(key: &[u8], value: &[u8]) -> Value {
    json!({"tables": [{"table": "checking", "writes": [{"key": h(key), "value": h(value)}]}]})
}

/// Puts `key = value` through whichever node leads, following 421s, until acknowledged: the
/// version made. Retries after an unknown outcome too (a put is idempotent).
pub async fn put(http: &reqwest::Client, apis: &[String], key: &str, value: &str) -> u64 {
    let body = put_body(key.as_bytes(), value.as_bytes());
    let start = Instant::now();
    let mut target = apis[0].clone();
    loop {
        let url = format!("{target}/v1/ledgers/bank/put");
        let a = call(http, "POST", &url, Some(body.clone())).await;
        match a.status {
            200 => return a.body["version"].as_u64().unwrap(),
            421 => {
                target = match a.leader.filter(|l| apis.contains(l)) {
                    Some(leader) => leader,
                    None => leader_api(http, apis).await,
                };
            }
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
pub async fn get(http: &reqwest::Client, api: &str, key: &str, consistency: &str) -> (u16, Value) {
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
pub async fn converge(http: &reqwest::Client, apis: &[String], size: u64) -> Value {
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

/// Waits until `proc` answers `/health`.
pub async fn wait_up(http: &reqwest::Client, proc: &Proc) {
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

/// Waits until a node of `procs` not in `out` names a leader not in `out`: how long since
/// `since` that took (a fault that took the leader out, to a new leader known).
pub async fn await_new_leader(
    http: &reqwest::Client,
    procs: &[&Proc],
    out: &[u64],
    since: Instant,
) -> Duration {
    loop {
        for p in procs
            .iter()
            .filter(|p| !out.contains(&p.id) && p.child.is_some())
        {
            let a = call(http, "GET", &format!("{}/v1/cluster", p.api), None).await;
            if let Some(leader) = a.body["leader"].as_u64() {
                if !out.contains(&leader) && a.status == 200 {
                    return since.elapsed();
                }
            }
        }
        assert!(since.elapsed() < WAIT, "no new leader outside {out:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The index node `api` has applied through, if it answers.
pub async fn applied(http: &reqwest::Client, api: &str) -> Option<u64> {
    let a = call(http, "GET", &format!("{api}/v1/cluster"), None).await;
    a.body["applied_index"].as_u64()
}

/// Restarts `proc` (killed) and waits until it has applied what the leader among `live` had
/// applied when it restarted: how long from the restart that took.
pub async fn restart_and_catch_up(
    http: &reqwest::Client,
    proc: &mut Proc,
    live: &[String],
) -> Duration {
    let leader = leader_api(http, live).await;
    let target = applied(http, &leader).await.unwrap_or(0);
    let since = Instant::now();
    proc.spawn();
    wait_up(http, proc).await;
    while applied(http, &proc.api).await.unwrap_or(0) < target {
        assert!(
            since.elapsed() < WAIT,
            "node {} never caught up to {target}",
            proc.id
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    since.elapsed()
}

/// The `q` quantile of `durations` (nearest rank), in ms; 0 for none.
pub fn quantile_ms(durations: &[Duration], q: f64) -> f64 {
    if durations.is_empty() {
        return 0.0;
    }
    let mut sorted = durations.to_vec();
    sorted.sort();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

/// `"N elections: p50 .. ms, p99 .. ms, max .. ms; M catch-ups: ..."`: a campaign's timings.
pub fn timings(elections: &[Duration], catch_ups: &[Duration]) -> String {
    let line = |what: &str, d: &[Duration]| {
        format!(
            "{} {what}: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
            d.len(),
            quantile_ms(d, 0.5),
            quantile_ms(d, 0.99),
            quantile_ms(d, 1.0)
        )
    };
    format!(
        "{}; {}",
        line("elections", elections),
        line("catch-ups", catch_ups)
    )
}

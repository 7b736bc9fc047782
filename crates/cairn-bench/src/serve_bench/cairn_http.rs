//! SmallBank over HTTP on `cairn-server`: the server started as its own process on a loopback
//! port, the accounts loaded through it, then `clients` verifying clients (`cairn-client`, one
//! each, with its own connection pool and its own trusted digest, as separate users would
//! have) each running its stream of transactions for a fixed time.
//!
//! One transaction: a verified read of the keys it needs (one `get`, its receipt checked fresh
//! against a digest shown to extend the client's), the transaction's rules run on the values
//! read, then (when it writes) one `transact` that expects every key read to hold the value
//! seen, with both receipts checked (the keys read as of the version before, the keys written
//! as of the version made). A 409 (a key changed since it was read) reruns the whole
//! transaction; a business abort writes nothing. Balance is the read alone.
//!
//! Owns: the server's process in a run ([`Server`]), the load, the clients and their figures.
//! May call: `ledger_bench::smallbank` (streams, rules), `cairn_client` as a user would. Must
//! never touch: the engine or the ledger in-process.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_client::{Batch, Client};
use hdrhistogram::Histogram;
use sha2::{Digest as _, Sha256};

use crate::failure::{Context, Failure};
use crate::ledger_bench::smallbank::{execute, Key, Kind, Op, Stream};
use crate::ledger_bench::Figures;

/// The ledger's name in URLs.
pub const LEDGER: &str = "bank";
const CHECKING: &str = "checking";
const SAVINGS: &str = "savings";
/// Accounts per load request (two keys each: the server takes 10,000 keys a request).
const LOAD_ACCOUNTS: u64 = 5_000;
/// Accounts per request of the final read of every balance.
const DUMP_ACCOUNTS: u64 = 5_000;

fn table_key(key: Key) -> (&'static str, [u8; 8]) {
    match key {
        Key::Savings(a) => (SAVINGS, a.to_be_bytes()),
        Key::Checking(a) => (CHECKING, a.to_be_bytes()),
    }
}

fn money(value: Option<&Vec<u8>>) -> Result<i64, Failure> {
    let bytes = value.ok_or_else(|| Failure("an account is missing".into()))?;
    let bytes: [u8; 8] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| Failure("a balance is not 8 bytes".into()))?;
    Ok(i64::from_be_bytes(bytes))
}

/// A free loopback port (bound, read, released: another process could take it in between,
/// which would fail the run's start, never its figures).
pub fn free_port() -> Result<u16, Failure> {
    let listener = TcpListener::bind("127.0.0.1:0").context(|| "finding a free port".into())?;
    Ok(listener
        .local_addr()
        .context(|| "finding a free port".into())?
        .port())
}

/// Waits until `addr` answers `GET path` with 200 (at most `limit`).
pub fn wait_http_ok(addr: SocketAddr, path: &str, limit: Duration) -> Result<(), Failure> {
    let started = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            if s.write_all(request.as_bytes()).is_ok()
                && s.read_to_string(&mut answer).is_ok()
                && answer.starts_with("HTTP/1.1 200")
            {
                return Ok(());
            }
        }
        if started.elapsed() > limit {
            return Err(Failure(format!(
                "{addr}{path} did not answer 200 within {limit:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends SIGTERM to `child` and waits for it (at most `limit`, then SIGKILL).
pub fn terminate(child: &mut Child, limit: Duration) -> Result<std::process::ExitStatus, Failure> {
    // SAFETY: `kill` with a pid we spawned and still own (not yet waited for) and a valid
    // signal number; it touches no memory.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().context(|| "waiting for a server".into())? {
            return Ok(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            return child
                .wait()
                .context(|| "waiting for a killed server".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The settings of the server under load.
#[derive(Clone, Debug)]
pub struct ServerSetup {
    /// The `cairn-server` binary.
    pub binary: PathBuf,
    /// Most concurrent transactions sharing a version (`group` of the ledger).
    pub group: usize,
}

/// `cairn-server` running in its own process on a loopback port, or a cluster of them (then
/// the clients talk to the leader).
pub struct Server {
    children: Vec<Child>,
    /// Each child's log (stderr), in the order of `children`.
    logs: Vec<PathBuf>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The bearer token the clients present.
    pub token: String,
    /// The server's log (stderr).
    pub log: PathBuf,
    /// The ledger's directory (the leader's, for a cluster; the first shard's leader's, for
    /// shards).
    pub ledger_dir: PathBuf,
    /// Every node's client API, for a cluster.
    apis: Vec<String>,
    /// Shards behind a router (`url` is the router's), or 0 for one ledger.
    pub shards: u32,
}

impl Server {
    /// Starts the server with one ledger `bank` (tables `checking`, `savings`) in `dir/ledger`,
    /// plain HTTP on loopback with a bearer token (read and write on that ledger), its limits
    /// raised so that 4,096 clients are never refused (429) or kept waiting for a connection.
    /// With `nodes` above zero, a cluster of that many `cairn-server --raft` processes instead
    /// (each in `dir/nodeN`, the token an admin too, to find the leader), served by its leader.
    pub fn start(setup: &ServerSetup, dir: &Path, nodes: usize) -> Result<Server, Failure> {
        if nodes > 0 {
            return Server::start_cluster(setup, dir, nodes);
        }
        let port = free_port()?;
        let token = format!("bench-{}", hex::encode(random_bytes()?));
        let hash = hex::encode(Sha256::digest(token.as_bytes()));
        let ledger_dir = dir.join("ledger");
        let config = config_text(port, &ledger_dir, setup.group, &hash, "");
        let (child, log) = spawn(setup, dir, &config, false)?;
        let server = Server {
            children: vec![child],
            logs: vec![log.clone()],
            url: format!("http://127.0.0.1:{port}"),
            token,
            log,
            ledger_dir,
            apis: Vec::new(),
            shards: 0,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if let Err(e) = wait_http_ok(addr, "/ready", Duration::from_secs(60)) {
            return Err(Failure(format!(
                "{e}: cairn-server did not start (its log: {})",
                server.log.display()
            )));
        }
        Ok(server)
    }

    /// [`Server::start`] of a cluster of `nodes` processes: node 1 initializes it; the
    /// server's URL, log and ledger are the leader's once one is elected.
    fn start_cluster(setup: &ServerSetup, dir: &Path, nodes: usize) -> Result<Server, Failure> {
        let token = format!("bench-{}", hex::encode(random_bytes()?));
        Server::start_cluster_with(setup, dir, nodes, token)
    }

    /// `shards` clusters of `nodes` processes each (in `dir/shardS`), every one serving ledger
    /// `bank`, behind a router (`cairn-server` with `[router]`, in `dir/router`) that the
    /// clients talk to: its per-shard endpoints for reads and single-shard transactions, its
    /// own `transact` for those across shards.
    pub fn start_sharded(
        setup: &ServerSetup,
        dir: &Path,
        shards: u32,
        nodes: usize,
    ) -> Result<Server, Failure> {
        use std::os::unix::fs::PermissionsExt as _;
        let token = format!("bench-{}", hex::encode(random_bytes()?));
        let hash = hex::encode(Sha256::digest(token.as_bytes()));
        let mut groups = Vec::new();
        let mut children = Vec::new();
        let mut logs = Vec::new();
        let mut first_ledger = PathBuf::new();
        for s in 0..shards {
            let shard_dir = dir.join(format!("shard{s}"));
            std::fs::create_dir_all(&shard_dir)
                .context(|| format!("creating {}", shard_dir.display()))?;
            let mut cluster = Server::start_cluster_with(setup, &shard_dir, nodes, token.clone())?;
            groups.push(std::mem::take(&mut cluster.apis));
            children.append(&mut cluster.children);
            logs.append(&mut cluster.logs);
            if s == 0 {
                first_ledger = cluster.ledger_dir.clone();
            }
        }
        let router_dir = dir.join("router");
        std::fs::create_dir_all(&router_dir)
            .context(|| format!("creating {}", router_dir.display()))?;
        let token_file = router_dir.join("shards.token");
        std::fs::write(&token_file, &token)
            .and_then(|()| {
                std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))
            })
            .context(|| format!("writing {}", token_file.display()))?;
        let port = free_port()?;
        let shards_toml: Vec<String> = (groups.iter())
            .map(|apis| {
                let quoted: Vec<String> = apis.iter().map(|a| format!("{a:?}")).collect();
                format!("[{}]", quoted.join(", "))
            })
            .collect();
        let config = format!(
            "listen = \"127.0.0.1:{port}\"\n\
             insecure_loopback = true\n\
             \n\
             [limits]\n\
             concurrent_requests = 8192\n\
             connections = 8192\n\
             \n\
             [[tokens]]\n\
             name = \"bench\"\n\
             sha256 = \"{hash}\"\n\
             grants = [{{ ledger = \"{LEDGER}\", rights = [\"read\", \"write\"] }}]\n\
             \n\
             [router]\n\
             ledger = \"{LEDGER}\"\n\
             tables = [\"{CHECKING}\", \"{SAVINGS}\"]\n\
             shards = [{}]\n\
             token_file = {token_file:?}\n",
            shards_toml.join(", ")
        );
        let (child, log) = spawn(setup, &router_dir, &config, false)?;
        children.push(child);
        logs.push(log.clone());
        let server = Server {
            children,
            logs,
            url: format!("http://127.0.0.1:{port}"),
            token,
            log,
            ledger_dir: first_ledger,
            apis: Vec::new(),
            shards,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if let Err(e) = wait_http_ok(addr, "/ready", Duration::from_secs(60)) {
            return Err(Failure(format!(
                "{e}: the router did not start (its log: {})",
                server.log.display()
            )));
        }
        Ok(server)
    }

    fn start_cluster_with(
        setup: &ServerSetup,
        dir: &Path,
        nodes: usize,
        token: String,
    ) -> Result<Server, Failure> {
        use std::os::unix::fs::PermissionsExt as _;
        let hash = hex::encode(Sha256::digest(token.as_bytes()));
        let secret = dir.join("cluster.secret");
        std::fs::write(&secret, hex::encode(random_bytes()?))
            .and_then(|()| {
                std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600))
            })
            .context(|| format!("writing {}", secret.display()))?;
        let ports: Vec<(u16, u16)> = (0..nodes)
            .map(|_| Ok((free_port()?, free_port()?)))
            .collect::<Result<_, Failure>>()?;
        let init: Vec<String> = (ports.iter().enumerate())
            .map(|(i, (api, peer))| {
                format!(
                    "{{ id = {}, addr = \"127.0.0.1:{peer}\", api = \"http://127.0.0.1:{api}\" }}",
                    i + 1
                )
            })
            .collect();
        let mut server = Server {
            children: Vec::new(),
            logs: Vec::new(),
            url: String::new(),
            token,
            log: PathBuf::new(),
            ledger_dir: PathBuf::new(),
            apis: (ports.iter())
                .map(|(api, _)| format!("http://127.0.0.1:{api}"))
                .collect(),
            shards: 0,
        };
        for (i, (api, peer)) in ports.iter().enumerate() {
            let node_dir = dir.join(format!("node{}", i + 1));
            std::fs::create_dir_all(&node_dir)
                .context(|| format!("creating {}", node_dir.display()))?;
            let cluster =
                format!(
                "\n[cluster]\nid = {id}\nlisten = \"127.0.0.1:{peer}\"\nsecret_file = {secret:?}\n\
                 dir = {raft:?}\ninit = [{init}]\n",
                id = i + 1,
                raft = node_dir.join("raft"),
                init = if i == 0 { init.join(", ") } else { String::new() },
            );
            let config = config_text(*api, &node_dir.join("ledger"), setup.group, &hash, &cluster);
            let (child, log) = spawn(setup, &node_dir, &config, true)?;
            server.children.push(child);
            server.logs.push(log.clone());
            server.log = log;
        }
        for (api, _) in &ports {
            let addr = SocketAddr::from(([127, 0, 0, 1], *api));
            wait_http_ok(addr, "/ready", Duration::from_secs(60)).map_err(|e| {
                Failure(format!(
                    "{e}: a cluster node did not start (logs in {})",
                    dir.display()
                ))
            })?;
        }
        let started = Instant::now();
        let leader = loop {
            let addr = SocketAddr::from(([127, 0, 0, 1], ports[0].0));
            let status = http_get_json(addr, "/v1/cluster", &server.token);
            if let Some(id) = status.as_ref().and_then(|s| s["leader"].as_u64()) {
                break id as usize;
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(Failure(format!(
                    "the cluster elected no leader within 60 s (logs in {})",
                    dir.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (api, _) = ports[leader - 1];
        server.url = format!("http://127.0.0.1:{api}");
        let leader_dir = dir.join(format!("node{leader}"));
        server.log = leader_dir.join("server.log");
        server.ledger_dir = leader_dir.join("ledger");
        Ok(server)
    }

    /// A new verifying client of the ledger (its own pool, its own trusted digest).
    pub fn client(&self) -> Result<Client, Failure> {
        self.client_of(None)
    }

    fn client_of(&self, shard: Option<u32>) -> Result<Client, Failure> {
        let mut builder = Client::builder(&self.url, LEDGER)
            .token(&self.token)
            .timeout(Duration::from_secs(120));
        if let Some(s) = shard {
            builder = builder.shard(s);
        }
        builder
            .build()
            .map_err(|e| Failure(format!("building a client: {e}")))
    }

    /// CPU seconds each process of the server (nodes, then the router) has used so far (0 for
    /// one whose counters cannot be read).
    pub fn cpu_seconds(&self) -> Vec<f64> {
        (self.children.iter())
            .map(|c| crate::sys::proc::cpu_seconds_of_pid(c.id()).unwrap_or(0.0))
            .collect()
    }

    /// A user's connection: one verifying client, or (behind a router) one per shard plus the
    /// router's own for writes across shards.
    pub fn conn(&self) -> Result<Conn, Failure> {
        if self.shards == 0 {
            return Ok(Conn::One(self.client()?));
        }
        let map = cairn_proof::ShardMap::new(
            cairn_ledger::LedgerConfig::default().hash,
            self.shards.trailing_zeros() as u8,
        )
        .map_err(|e| Failure(format!("the shard map: {e}")))?;
        let shards = (0..self.shards)
            .map(|s| self.client_of(Some(s)))
            .collect::<Result<_, _>>()?;
        Ok(Conn::Sharded(Box::new(Sharded {
            router: self.client()?,
            shards,
            map,
        })))
    }

    /// Stops the server gracefully (SIGTERM: in-flight requests finished, the log synced, a
    /// checkpoint taken) and checks it exited with 0.
    pub fn stop(mut self) -> Result<(), Failure> {
        for (i, child) in self.children.iter_mut().enumerate() {
            let status = terminate(child, Duration::from_secs(60))?;
            if !status.success() {
                let log = self.logs.get(i).unwrap_or(&self.log);
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(8).collect();
                return Err(Failure(format!(
                    "cairn-server exited with {status} (its log: {}, ending:\n{})",
                    log.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for child in &mut self.children {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Writes `config` to `dir/server.toml` and starts the server on it (`--raft` for a cluster
/// node), its stderr in `dir/server.log`: the process and that log's path.
fn spawn(
    setup: &ServerSetup,
    dir: &Path,
    config: &str,
    raft: bool,
) -> Result<(Child, PathBuf), Failure> {
    let config_path = dir.join("server.toml");
    std::fs::write(&config_path, config)
        .context(|| format!("writing {}", config_path.display()))?;
    let log = dir.join("server.log");
    let stderr = std::fs::File::create(&log).context(|| format!("creating {}", log.display()))?;
    let mut command = Command::new(&setup.binary);
    if raft {
        command.arg("--raft");
    }
    let child = command
        .arg("--config")
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context(|| format!("starting {}", setup.binary.display()))?;
    Ok((child, log))
}

/// A server's configuration: plain HTTP on loopback `port`, limits raised so that 4,096
/// clients are never refused or kept waiting, ledger `bank` in `ledger_dir`, the bench's token
/// (by its SHA-256 `hash`) with read and write on it (and admin, for a cluster node: `cluster`,
/// its `[cluster]` section, not empty).
fn config_text(port: u16, ledger_dir: &Path, group: usize, hash: &str, cluster: &str) -> String {
    let admin = if cluster.is_empty() {
        ""
    } else {
        ", \"admin\""
    };
    format!(
        "listen = \"127.0.0.1:{port}\"\n\
         insecure_loopback = true\n\
         \n\
         [limits]\n\
         concurrent_requests = 8192\n\
         connections = 8192\n\
         \n\
         [[ledgers]]\n\
         name = \"{LEDGER}\"\n\
         dir = {ledger_dir:?}\n\
         tables = [\"{CHECKING}\", \"{SAVINGS}\"]\n\
         group = {group}\n\
         \n\
         [[tokens]]\n\
         name = \"bench\"\n\
         sha256 = \"{hash}\"\n\
         grants = [{{ ledger = \"{LEDGER}\", rights = [\"read\", \"write\"{admin}] }}]\n\
         {cluster}"
    )
}

/// `GET path` on `addr` with a bearer token, its body as JSON when it answers 200.
fn http_get_json(addr: SocketAddr, path: &str, token: &str) -> Option<serde_json::Value> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    if !answer.starts_with("HTTP/1.1 200") {
        return None;
    }
    let body = answer.split_once("\r\n\r\n")?.1;
    serde_json::from_str(body).ok()
}

/// 16 bytes from the OS's random source (the run's token).
fn random_bytes() -> Result<[u8; 16], Failure> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context(|| "reading /dev/urandom for the token".into())?;
    Ok(bytes)
}

/// A user's connection to the ledger.
pub enum Conn {
    /// One server or cluster: one verifying client.
    One(Client),
    /// Shards behind a router.
    Sharded(Box<Sharded>),
}

/// A user's clients of a ledger behind a router: the router's own (writes across shards) and
/// one per shard (`bank/shards/S`: reads and single-shard transactions, each verified against
/// that shard's digest).
pub struct Sharded {
    router: Client,
    shards: Vec<Client>,
    map: cairn_proof::ShardMap,
}

impl Sharded {
    fn shard_of(&self, key: Key) -> u32 {
        self.map.shard_of(&table_key(key).1)
    }
}

/// Whether `e` is a retry: a key changed since it was read, a key held by a transaction
/// across shards, or such a transaction aborted.
fn is_retry(e: &cairn_client::Error) -> bool {
    e.is_expectation_failed()
        || matches!(e, cairn_client::Error::Server { status: 409 | 503, code, .. }
            if code == "locked" || code == "aborted")
}

/// A multi-threaded runtime of `threads` workers for the clients.
pub fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .context(|| "starting the clients' runtime".into())
}

/// Loads `accounts` accounts through `client` (verified puts of 5,000 accounts): returns the
/// seconds it took.
pub async fn load(conn: &Conn, accounts: u64) -> Result<f64, Failure> {
    let started = Instant::now();
    if let Conn::Sharded(sharded) = conn {
        // Each shard's accounts through that shard's client (verified puts).
        for (s, client) in sharded.shards.iter().enumerate() {
            let mine: Vec<u64> = (0..accounts)
                .filter(|a| sharded.shard_of(Key::Checking(*a)) == s as u32)
                .collect();
            for chunk in mine.chunks(LOAD_ACCOUNTS as usize) {
                let mut batch = Batch::new();
                for a in chunk {
                    batch.insert(
                        SAVINGS,
                        a.to_be_bytes(),
                        crate::ledger_bench::smallbank::SAVINGS_START.to_be_bytes(),
                    );
                    batch.insert(
                        CHECKING,
                        a.to_be_bytes(),
                        crate::ledger_bench::smallbank::CHECKING_START.to_be_bytes(),
                    );
                }
                client
                    .put(&batch)
                    .await
                    .map_err(|e| Failure(format!("loading shard {s}'s accounts: {e}")))?;
            }
        }
        return Ok(started.elapsed().as_secs_f64());
    }
    let Conn::One(client) = conn else {
        unreachable!("a connection is one client or sharded")
    };
    let mut first = 0;
    while first < accounts {
        let last = (first + LOAD_ACCOUNTS).min(accounts);
        let mut batch = Batch::new();
        for a in first..last {
            batch.insert(
                SAVINGS,
                a.to_be_bytes(),
                crate::ledger_bench::smallbank::SAVINGS_START.to_be_bytes(),
            );
            batch.insert(
                CHECKING,
                a.to_be_bytes(),
                crate::ledger_bench::smallbank::CHECKING_START.to_be_bytes(),
            );
        }
        client
            .put(&batch)
            .await
            .map_err(|e| Failure(format!("loading accounts {first}..{last}: {e}")))?;
        first = last;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Every account's (savings, checking), read through `client` (verified).
pub async fn balances(client: &Client, accounts: u64) -> Result<Vec<(i64, i64)>, Failure> {
    let mut out = Vec::with_capacity(accounts as usize);
    let mut first = 0;
    while first < accounts {
        let last = (first + DUMP_ACCOUNTS).min(accounts);
        let keys: Vec<[u8; 8]> = (first..last).map(u64::to_be_bytes).collect();
        let read = client
            .get(&[(SAVINGS, &keys[..]), (CHECKING, &keys[..])])
            .await
            .map_err(|e| Failure(format!("reading accounts {first}..{last}: {e}")))?;
        let [savings, checking] = &read.values[..] else {
            return Err(Failure("a read of two tables answered otherwise".into()));
        };
        for (s, c) in savings.iter().zip(checking) {
            out.push((money(s.as_ref())?, money(c.as_ref())?));
        }
        first = last;
    }
    Ok(out)
}

/// What one client measured.
#[derive(Default)]
struct Counts {
    per_kind: std::collections::BTreeMap<Kind, Histogram<u64>>,
    done: u64,
    aborted: u64,
    conflicts: u64,
    verified_reads: u64,
    verified_writes: u64,
    /// Committed transactions across shards (their writes proved by later reads only).
    across: u64,
    /// Committed writing transactions: (version, op).
    log: Vec<(u64, Op)>,
}

/// The keys `op` reads (each once), in `execute`'s order.
fn keys_of(op: &Op) -> Vec<Key> {
    let (a, b) = (op.a, op.b);
    let mut keys = match op.kind {
        Kind::Balance | Kind::WriteCheck => vec![Key::Savings(a), Key::Checking(a)],
        Kind::DepositChecking => vec![Key::Checking(a)],
        Kind::TransactSavings => vec![Key::Savings(a)],
        Kind::Amalgamate => vec![Key::Savings(a), Key::Checking(a), Key::Checking(b)],
        Kind::SendPayment => vec![Key::Checking(a), Key::Checking(b)],
    };
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// A verified read of `keys` (each once, in `Key`'s order: savings first) through `client`:
/// each key with its balance, or the client's error (a retry when [`is_retry`]).
async fn read_keys(
    client: &Client,
    keys: &[Key],
) -> Result<Result<Vec<(Key, i64)>, cairn_client::Error>, Failure> {
    let of = |savings: bool| -> Vec<[u8; 8]> {
        (keys.iter())
            .filter(|k| matches!(k, Key::Savings(_)) == savings)
            .map(|k| table_key(*k).1)
            .collect()
    };
    let (savings, checking) = (of(true), of(false));
    let mut tables: Vec<(&str, &[[u8; 8]])> = Vec::with_capacity(2);
    if !savings.is_empty() {
        tables.push((SAVINGS, &savings));
    }
    if !checking.is_empty() {
        tables.push((CHECKING, &checking));
    }
    let read = match client.get(&tables).await {
        Ok(read) => read,
        Err(e) => return Ok(Err(e)),
    };
    // The values come per table in the order asked: savings, then checking.
    let mut values = read.values.iter().flatten();
    let ordered = (keys.iter().filter(|k| matches!(k, Key::Savings(_))))
        .chain(keys.iter().filter(|k| matches!(k, Key::Checking(_))));
    let mut seen = Vec::with_capacity(keys.len());
    for k in ordered {
        seen.push((*k, money(values.next().and_then(Option::as_ref))?));
    }
    Ok(Ok(seen))
}

/// Runs `op`'s rules on the balances `seen`: its writes, `None` for a business abort.
fn decide(op: &Op, seen: &[(Key, i64)]) -> Result<Option<Vec<(Key, i64)>>, Failure> {
    execute(op, |k| {
        seen.iter()
            .find(|(s, _)| *s == k)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("{k:?} was not read"))
    })
    .map_err(|e| {
        Failure(format!(
            "transaction {} of client {}: {e}",
            op.seq, op.client
        ))
    })
}

/// The batch that writes `writes` if every key of `seen` still holds its balance.
fn batch_of(seen: &[(Key, i64)], writes: &[(Key, i64)]) -> Batch {
    let mut batch = Batch::new();
    for (k, v) in seen {
        let (table, key) = table_key(*k);
        batch.expect(table, key, v.to_be_bytes());
    }
    for (k, v) in writes {
        let (table, key) = table_key(*k);
        batch.insert(table, key, v.to_be_bytes());
    }
    batch
}

/// One transaction, rerun on a conflict, every answer verified by the client.
async fn transaction(client: &Client, op: &Op, counts: &mut Counts) -> Result<(), Failure> {
    let keys = keys_of(op);
    let context = || format!("transaction {} of client {}", op.seq, op.client);
    loop {
        let seen = match read_keys(client, &keys).await? {
            Ok(seen) => seen,
            // A key held by a transaction across shards: read again once it is decided.
            Err(e) if is_retry(&e) => {
                counts.conflicts += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            Err(e) => return Err(Failure(format!("{}: read: {e}", context()))),
        };
        counts.verified_reads += keys.len() as u64;
        let Some(writes) = decide(op, &seen)? else {
            counts.aborted += 1;
            return Ok(());
        };
        if writes.is_empty() {
            return Ok(());
        }
        match client.transact(&batch_of(&seen, &writes)).await {
            Ok(commit) => {
                counts.verified_writes += writes.len() as u64;
                counts.log.push((commit.version, *op));
                return Ok(());
            }
            Err(e) if is_retry(&e) => counts.conflicts += 1,
            Err(e) => return Err(Failure(format!("{}: commit: {e}", context()))),
        }
    }
}

/// One transaction over shards behind a router: on one shard, [`transaction`] through that
/// shard's client (receipts checked); across shards, a verified read from each shard's client,
/// then the router's two-phase commit, rerun on a conflict, a held key or an abort.
async fn transaction_sharded(s: &Sharded, op: &Op, counts: &mut Counts) -> Result<(), Failure> {
    let keys = keys_of(op);
    let mut on: Vec<u32> = keys.iter().map(|k| s.shard_of(*k)).collect();
    on.sort_unstable();
    on.dedup();
    if let [only] = on[..] {
        return transaction(&s.shards[only as usize], op, counts).await;
    }
    let context = || format!("transaction {} of client {}", op.seq, op.client);
    'attempt: loop {
        let mut seen: Vec<(Key, i64)> = Vec::with_capacity(keys.len());
        for &shard in &on {
            let mine: Vec<Key> = (keys.iter())
                .filter(|k| s.shard_of(**k) == shard)
                .copied()
                .collect();
            match read_keys(&s.shards[shard as usize], &mine).await? {
                Ok(part) => seen.extend(part),
                Err(e) if is_retry(&e) => {
                    counts.conflicts += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue 'attempt;
                }
                Err(e) => return Err(Failure(format!("{}: read: {e}", context()))),
            }
            counts.verified_reads += mine.len() as u64;
        }
        let Some(writes) = decide(op, &seen)? else {
            counts.aborted += 1;
            return Ok(());
        };
        if writes.is_empty() {
            return Ok(());
        }
        match s.router.transact_across(&batch_of(&seen, &writes)).await {
            Ok(_) => {
                counts.across += 1;
                return Ok(());
            }
            Err(e) if is_retry(&e) => counts.conflicts += 1,
            Err(e) => return Err(Failure(format!("{}: commit across shards: {e}", context()))),
        }
    }
}

/// One client: its stream's transactions until `deadline`.
async fn run_client(conn: Conn, mut stream: Stream, deadline: Instant) -> Result<Counts, Failure> {
    let mut counts = Counts::default();
    while Instant::now() < deadline {
        let op = stream
            .next()
            .ok_or_else(|| Failure("a stream ended".into()))?;
        let started = Instant::now();
        match &conn {
            Conn::One(client) => transaction(client, &op, &mut counts).await?,
            Conn::Sharded(s) => transaction_sharded(s, &op, &mut counts).await?,
        }
        let us = started.elapsed().as_micros().max(1) as u64;
        let h = match counts.per_kind.entry(op.kind) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(
                Histogram::new_with_bounds(1, 3_600_000_000, 3)
                    .map_err(|e| Failure(format!("a histogram: {e}")))?,
            ),
        };
        h.saturating_record(us);
        counts.done += 1;
    }
    Ok(counts)
}

/// One SmallBank run's settings.
pub struct Setup {
    /// Accounts loaded.
    pub accounts: u64,
    /// Concurrent clients, each its own `cairn-client`.
    pub clients: u64,
    /// How long the clients run.
    pub seconds: f64,
    /// Seed of the operation streams.
    pub seed: u64,
    /// Accounts drawn from a Zipfian law instead of uniformly.
    pub zipf: bool,
}

/// Runs `clients` verifying clients for `seconds` against `server` (loaded): the figures and
/// the committed writing transactions in version order.
pub async fn run(server: &Server, setup: &Setup) -> Result<(Figures, Vec<Op>), Failure> {
    let mut clients = Vec::with_capacity(setup.clients as usize);
    for c in 0..setup.clients {
        let conn = server.conn()?;
        // Each client starts from the digest it is shown (trusted on first use, as immudb's
        // client does with no state), before its clock starts: behind a router, each shard's.
        let first: Vec<&Client> = match &conn {
            Conn::One(client) => vec![client],
            Conn::Sharded(s) => s.shards.iter().collect(),
        };
        for client in first {
            client
                .digest()
                .await
                .map_err(|e| Failure(format!("client {c}: the first digest: {e}")))?;
        }
        clients.push(conn);
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(setup.seconds);
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| {
            let stream = Stream::new(setup.seed, c as u64, setup.accounts, setup.zipf);
            tokio::spawn(run_client(client, stream, deadline))
        })
        .collect();
    let mut all = Vec::with_capacity(tasks.len());
    for t in tasks {
        all.push(
            t.await
                .map_err(|e| Failure(format!("a client task: {e}")))??,
        );
    }
    let mut figures = Figures::new(started.elapsed().as_secs_f64());
    let mut log = Vec::new();
    for c in all {
        for (kind, h) in &c.per_kind {
            figures.add_latencies(*kind, h)?;
        }
        figures.transactions += c.done;
        figures.aborted += c.aborted;
        figures.conflicts += c.conflicts;
        figures.verified_reads += c.verified_reads;
        figures.verified_writes += c.verified_writes;
        figures.across_shards += c.across;
        log.extend(c.log);
    }
    // Transactions sharing a version commute (the ledger never groups two of which one writes
    // a key the other touches), so version order replays to the same balances.
    log.sort_by_key(|(version, _)| *version);
    figures.versions = log.chunk_by(|a, b| a.0 == b.0).count() as u64;
    Ok((figures, log.into_iter().map(|(_, op)| op).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cover_what_the_rules_read() {
        for kind in Kind::ALL {
            for (a, b) in [(1, 2), (3, 3)] {
                let op = Op {
                    client: 0,
                    seq: 0,
                    kind,
                    a,
                    b,
                    amount: 5,
                };
                let keys = keys_of(&op);
                let mut read = Vec::new();
                execute(&op, |k| {
                    read.push(k);
                    Ok(100)
                })
                .unwrap();
                for k in read {
                    assert!(keys.contains(&k), "{op:?} reads {k:?}");
                }
            }
        }
    }
}

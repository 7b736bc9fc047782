//! A router over the shards of a ledger (`cairn-server` with a `[router]` section): each shard
//! is a cluster of `cairn-server --raft` nodes; the router sends each key to its shard's
//! leader, runs two-phase commit for writes across shards (`cairn_raft::Coordinator`), and
//! resolves transactions left prepared by a coordinator that was lost.
//!
//! Owns: [`ShardRouter`], [`HttpShards`] (how the router reaches a shard: its nodes' client
//! APIs, following 421s to the leader). May call: `config`, `cairn_raft` (the coordinator,
//! commands, records), `cairn_proof` (the shard map, the global root). Must never
//! touch: the client API's routes (`router_api` serves them).
//!
//! Bounds: every call to a shard ends within `retry_for` (5 s) of attempts, each within the
//! HTTP client's timeout; the resolver reads each shard's prepared list every
//! `resolve_after_ms` and decides only transactions seen prepared in two passes running.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use cairn_proof::{ShardMap, ShardedRoot};
use cairn_raft::format::PreparedTx;
use cairn_raft::{Command, Coordinator, Error, Response, ShardWriter};

use crate::config::RouterConfig;

/// How long one call to a shard keeps trying (following the leader, waiting out an election).
pub const RETRY_FOR: Duration = Duration::from_secs(5);

/// One shard's nodes, and which of them the router last found leading.
struct Group {
    apis: Vec<String>,
    leader: Mutex<usize>,
}

/// The shards as the router reaches them: over HTTP, to each shard's leader.
pub struct HttpShards {
    http: reqwest::Client,
    token: Option<String>,
    groups: Vec<Group>,
}

/// What a shard answered: its status and body.
struct Answer {
    status: StatusCode,
    body: bytes::Bytes,
}

impl HttpShards {
    /// Sends `body` to `path` on shard `shard`'s leader, following 421s, trying the next node
    /// when one cannot be reached or has no leader, until [`RETRY_FOR`] has passed.
    ///
    /// Errors: [`Error::Unknown`] when a request was sent and its answer lost (it may have
    /// been done); [`Error::Raft`] when no node answered in time.
    async fn send(
        &self,
        shard: u32,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, Error> {
        // Sent again on a retry: shared, not copied.
        let body = body.map(bytes::Bytes::from);
        let group = &self.groups[shard as usize];
        let deadline = Instant::now() + RETRY_FOR;
        let mut last = String::new();
        while Instant::now() < deadline {
            let at = *group.leader.lock().unwrap_or_else(|p| p.into_inner());
            let url = format!("{}{path}", group.apis[at]);
            let mut request = self.http.request(method.clone(), &url);
            if let Some(token) = &self.token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = &body {
                request = request
                    .header("content-type", "application/json")
                    .body(body.clone());
            }
            let next = |hint: Option<usize>| {
                let mut leader = group.leader.lock().unwrap_or_else(|p| p.into_inner());
                *leader = hint.unwrap_or((at + 1) % group.apis.len());
            };
            match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let leader = (response.headers().get("cairn-leader"))
                        .and_then(|v| v.to_str().ok())
                        .and_then(|l| group.apis.iter().position(|a| a == l));
                    let body = response
                        .bytes()
                        .await
                        .map_err(|e| Error::Unknown(format!("shard {shard}: {e}")))?;
                    // Only a 503's body is read here (a 200's may be a large answer).
                    let code = (status == StatusCode::SERVICE_UNAVAILABLE)
                        .then(|| error_code(&body))
                        .flatten();
                    match (status, code.as_deref()) {
                        (StatusCode::MISDIRECTED_REQUEST, _) => {
                            last = format!("{url}: not the leader");
                            next(leader);
                            if leader.is_none() {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                        // Nothing was done: no quorum for a read, or shutting down.
                        (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable")) => {
                            last = format!("{url}: unavailable");
                            next(None);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        _ => return Ok(Answer { status, body }),
                    }
                }
                // Never sent: safe to send elsewhere.
                Err(e) if e.is_connect() => {
                    last = format!("{url}: {e}");
                    next(None);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(Error::Unknown(format!("shard {shard} ({url}): {e}"))),
            }
        }
        Err(Error::Raft(format!(
            "shard {shard}: no leader answered within {RETRY_FOR:?} ({last})"
        )))
    }

    /// Sends `body` (JSON) to `path` on shard `shard`'s leader: its status and body. For the
    /// router's per-shard endpoints, which pass a client's request through.
    ///
    /// Errors: [`Error::Unknown`] when a request was sent and its answer lost; [`Error::Raft`]
    /// when no node answered in time.
    pub async fn forward(
        &self,
        shard: u32,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, bytes::Bytes), Error> {
        let a = self.send(shard, method, path, body).await?;
        Ok((a.status, a.body))
    }

    /// Table `table`'s version, root and top `levels` levels on shard `shard`, read
    /// linearizably.
    ///
    /// Errors: [`Error::Unknown`] or [`Error::Raft`] when no node answered; an answer that
    /// does not decode.
    pub async fn witness(
        &self,
        shard: u32,
        table: &str,
        levels: u8,
    ) -> Result<(u64, cairn_proof::Root, cairn_proof::Proof), Error> {
        let path = format!("/v1/cluster/witness?table={table}&levels={levels}");
        let a = self.send(shard, Method::GET, &path, None).await?;
        if a.status != StatusCode::OK {
            return Err(refused(shard, a.status, &a.body));
        }
        let bad = |what: &str| Error::Raft(format!("shard {shard}'s witness: {what}"));
        let v: serde_json::Value =
            serde_json::from_slice(&a.body).map_err(|e| bad(&e.to_string()))?;
        let version = v["version"].as_u64().ok_or_else(|| bad("no version"))?;
        let root: [u8; 32] = (v["root"].as_str())
            .and_then(|h| hex::decode(h).ok())
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| bad("no root"))?;
        let top = (v["top"].as_str())
            .and_then(|h| hex::decode(h).ok())
            .ok_or_else(|| bad("no top"))?;
        let top = cairn_proof::Proof::decode(&top).map_err(|e| bad(&e.to_string()))?;
        let kind = cairn_ledger::LedgerConfig::default().hash;
        Ok((version, cairn_proof::Root { kind, hash: root }, top))
    }
}

/// The `code` of an error body, if the body is one.
fn error_code(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v["code"].as_str().map(str::to_string)
}

fn refused(shard: u32, status: StatusCode, body: &[u8]) -> Error {
    Error::Raft(format!(
        "shard {shard} answered {status}: {}",
        String::from_utf8_lossy(&body[..body.len().min(300)])
    ))
}

impl ShardWriter for HttpShards {
    async fn propose(&self, shard: u32, command: Command) -> Result<Response, Error> {
        let body = serde_json::to_vec(&command).map_err(|e| Error::Raft(e.to_string()))?;
        let a = self
            .send(shard, Method::POST, "/v1/cluster/command", Some(body))
            .await?;
        match a.status {
            StatusCode::OK => serde_json::from_slice(&a.body)
                .map_err(|e| Error::Unknown(format!("shard {shard}'s answer: {e}"))),
            StatusCode::BAD_REQUEST => Ok(Response::Refused {
                reason: String::from_utf8_lossy(&a.body).into_owned(),
            }),
            StatusCode::SERVICE_UNAVAILABLE => Err(Error::Unknown(format!(
                "shard {shard}: {}",
                String::from_utf8_lossy(&a.body)
            ))),
            status => Err(refused(shard, status, &a.body)),
        }
    }

    async fn prepared(&self, shard: u32) -> Result<Vec<(String, PreparedTx)>, Error> {
        let a = self
            .send(shard, Method::GET, "/v1/cluster/prepared", None)
            .await?;
        if a.status != StatusCode::OK {
            return Err(refused(shard, a.status, &a.body));
        }
        #[derive(serde::Deserialize)]
        struct Found {
            tx: String,
            record: PreparedTx,
        }
        let found: Vec<Found> = serde_json::from_slice(&a.body)
            .map_err(|e| Error::Raft(format!("shard {shard}'s prepared list: {e}")))?;
        Ok(found.into_iter().map(|f| (f.tx, f.record)).collect())
    }
}

/// A running router: its coordinator over the shards and its resolver.
pub struct ShardRouter {
    /// The ledger's name.
    pub ledger: String,
    /// Its tables.
    pub tables: Vec<String>,
    /// The coordinator, over the shards.
    pub coordinator: Arc<Coordinator<HttpShards>>,
    resolver: tokio::task::JoinHandle<()>,
}

impl ShardRouter {
    /// A router as `config` describes it; its resolver starts at once.
    ///
    /// Errors: the token file unreadable or readable by others; the CA file unreadable or
    /// without a certificate; the HTTP client.
    pub fn start(config: &RouterConfig) -> Result<ShardRouter, String> {
        let token = match &config.token_file {
            Some(path) => Some(crate::cluster::read_private(path, "router token")?),
            None => None,
        };
        // The shards' certificates are checked against `ca` only (no platform roots).
        let roots = match &config.ca {
            Some(ca) => std::fs::read(ca)
                .map_err(|e| e.to_string())
                .and_then(|pem| cairn_raft::roots_from_pem(&pem))
                .map_err(|e| format!("[router] ca {}: {e}", ca.display()))?,
            None => rustls::RootCertStore::empty(),
        };
        let tls = cairn_raft::client_tls(roots)?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(32)
            .build()
            .map_err(|e| format!("the router's HTTP client: {e}"))?;
        let shards = HttpShards {
            http,
            token,
            groups: (config.shards.iter())
                .map(|apis| Group {
                    apis: apis
                        .iter()
                        .map(|a| a.trim_end_matches('/').to_string())
                        .collect(),
                    leader: Mutex::new(0),
                })
                .collect(),
        };
        let bits = config.shards.len().trailing_zeros() as u8;
        let map = ShardMap::new(cairn_ledger::LedgerConfig::default().hash, bits)
            .map_err(|e| format!("[router] shards: {e}"))?;
        let name = match &config.name {
            Some(n) => n.clone(),
            None => {
                let token = crate::auth::new_token().map_err(|e| format!("random: {e}"))?;
                format!("r{}", &token[token.len() - 12..])
            }
        };
        let coordinator = Arc::new(Coordinator::new(map, shards, name));
        let every = Duration::from_millis(config.resolve_after_ms);
        let resolver = tokio::spawn(resolve_forever(Arc::clone(&coordinator), every));
        Ok(ShardRouter {
            ledger: config.ledger.clone(),
            tables: config.tables.clone(),
            coordinator,
            resolver,
        })
    }

    /// The shards' map.
    pub fn map(&self) -> &ShardMap {
        self.coordinator.map()
    }

    /// The shards.
    pub fn shards(&self) -> &HttpShards {
        self.coordinator.writer()
    }

    /// The global root of table `table`: every shard's witness read linearizably, one after
    /// another, combined. Returns it with each shard's version.
    ///
    /// Errors: a shard that does not answer; a witness that does not fit its shard.
    pub async fn global_root(&self, table: &str) -> Result<(cairn_proof::Root, Vec<u64>), Error> {
        let map = *self.map();
        let levels = map.bits().max(1);
        let reads = (0..map.shards()).map(|s| self.shards().witness(s, table, levels));
        let mut subtrees = Vec::new();
        let mut versions = Vec::new();
        for (s, w) in futures_util::future::join_all(reads)
            .await
            .into_iter()
            .enumerate()
        {
            let (version, root, top) = w?;
            let subtree = (map.subtree(s as u32, &root, &top)).map_err(|e| match e {
                cairn_proof::ShardError::ForeignKey { .. } => Error::Raft(format!(
                    "shard {s}'s table {table:?} holds keys of other shards: an ordered table \
                     (whose head every shard keeps) has no global root"
                )),
                e => Error::Raft(format!("shard {s}'s witness: {e}")),
            })?;
            subtrees.push(subtree);
            versions.push(version);
        }
        let global = ShardedRoot::new(map, subtrees).map_err(|e| Error::Raft(e.to_string()))?;
        Ok((global.root(), versions))
    }

    /// The proof of `table`'s keys read against its global root: `proved` holds, per shard the
    /// read touched (at most once each), its version, its table's root there and its proof of
    /// the keys it holds (from its receipt); every other shard's subtree comes from its
    /// witness at its newest version, read at once. Returns the global root, each shard's
    /// version it was built from, and the lifted proof (the one a single table holding every
    /// shard's contents would give).
    ///
    /// Errors: a shard that does not answer; a witness or proof that does not fit its shard.
    pub async fn lift(
        &self,
        table: &str,
        proved: &[(u32, u64, cairn_proof::Root, &cairn_proof::Proof)],
    ) -> Result<(cairn_proof::Root, Vec<u64>, cairn_proof::Proof), Error> {
        let map = *self.map();
        let levels = map.bits().max(1);
        let others: Vec<u32> = (0..map.shards())
            .filter(|s| proved.iter().all(|p| p.0 != *s))
            .collect();
        let reads = others
            .iter()
            .map(|s| self.shards().witness(*s, table, levels));
        let witnesses = futures_util::future::join_all(reads).await;
        let mut subtrees = vec![cairn_proof::Subtree::Empty; map.shards() as usize];
        let mut versions = vec![0; map.shards() as usize];
        let bad = |s: u32, e: cairn_proof::ShardError| Error::Raft(format!("shard {s}: {e}"));
        for (s, w) in others.iter().zip(witnesses) {
            let (version, root, top) = w?;
            subtrees[*s as usize] = map.subtree(*s, &root, &top).map_err(|e| bad(*s, e))?;
            versions[*s as usize] = version;
        }
        for (s, version, root, proof) in proved {
            subtrees[*s as usize] = map.subtree(*s, root, proof).map_err(|e| bad(*s, e))?;
            versions[*s as usize] = *version;
        }
        let global = ShardedRoot::new(map, subtrees).map_err(|e| Error::Raft(e.to_string()))?;
        let parts: Vec<(u32, &cairn_proof::Proof)> =
            proved.iter().map(|(s, _, _, p)| (*s, *p)).collect();
        let lifted = global
            .lift(&parts)
            .map_err(|e| Error::Raft(e.to_string()))?;
        Ok((global.root(), versions, lifted))
    }

    /// Stops the resolver.
    pub fn stop(&self) {
        self.resolver.abort();
    }
}

/// Every `every`, reads each shard's prepared transactions and resolves those already seen
/// prepared in the pass before (so at least `every` old).
async fn resolve_forever(coordinator: Arc<Coordinator<HttpShards>>, every: Duration) {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    loop {
        tokio::time::sleep(every).await;
        let mut now = BTreeSet::new();
        for shard in 0..coordinator.map().shards() {
            let Ok(prepared) = coordinator.prepared(shard).await else {
                continue;
            };
            for (tx, record) in prepared {
                if seen.contains(&tx) {
                    match coordinator.resolve(&tx, &record).await {
                        Ok(commit) => {
                            tracing::warn!(%tx, commit, "resolved a transaction left prepared")
                        }
                        Err(e) => tracing::warn!(%tx, error = %e, "resolving a transaction"),
                    }
                } else {
                    now.insert(tx);
                }
            }
        }
        seen = now;
    }
}

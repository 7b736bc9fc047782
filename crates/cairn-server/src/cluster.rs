//! A server that is one node of a replicated cluster (`cairn-server --raft`): its ledger is
//! written only by applying a Raft log (openraft, through `cairn-raft`), writes go through the
//! leader, and reads are linearizable unless the client asks for a stale one.
//!
//! Owns: [`Cluster`] (the node, its Raft log, its peer listener), the reading of the cluster
//! secret, how the API's writes become [`Command`]s and their answers wire answers, and how a
//! request names the [`Consistency`] it wants. May call: `config`, `disk`, `error`, `wire`,
//! `cairn_raft`, `cairn_ledger`. Must never touch: the client API's routes (`service` calls
//! this module, not the other way round).
//!
//! - **Writes** (`put`, `transact`) become one [`Command::Write`] each, proposed by the
//!   leader and answered once a quorum has it durably in its log and the leader has applied
//!   it (so the acknowledged version is durable on a majority: it survives the loss of a
//!   minority of nodes). A node that does not lead answers 421 `not_leader` naming the
//!   leader's API in the `cairn-leader` header and the message; a write whose leader lost
//!   its office with the write in flight answers 503 `outcome_unknown` (it may still commit:
//!   read before retrying).
//! - **Reads** are linearizable by default: the node confirms with a quorum that it leads and
//!   waits until it has applied every entry committed before the read (openraft's read
//!   index), then reads its ledger; on a node that does not lead that is a 421 too.
//!   `?consistency=stale` reads whatever the node has applied, on any node, at once.
//! - **Bounds.** A write costs one log append and fsync on each of a quorum, one round trip
//!   from the leader to a quorum, and the ledger commit; a linearizable read one heartbeat
//!   round trip to a quorum before the ledger read. Both end within the request timeout.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, Uri};
use cairn_raft::openraft::error::{InitializeError, RaftError};
use cairn_raft::{
    peer_router_with, ClusterSecret, Command, Consistency, DurableLog, Faults, HttpNetwork,
    LedgerHome, Member, Node, NodeId, NodeOptions, Response, WriteReceipts,
};

use crate::config::ClusterConfig;
use crate::disk::{DiskFaults, FaultyFs};
use crate::error::ApiError;
use crate::wire;

/// A running cluster node.
pub struct Cluster {
    /// The node: its Raft handle and its ledger.
    pub node: Node,
    /// Where its peer listener listens.
    pub peer_addr: SocketAddr,
    /// The links a test may cut (`[cluster] fault_injection`), if allowed.
    pub faults: Option<Faults>,
    /// The disk a test may fill or slow (`[cluster] fault_injection`), if allowed.
    pub disk: Option<DiskFaults>,
    /// Whether peers talk TLS (`[cluster] peer_ca`); without, peer addresses are loopback only.
    pub peer_tls: bool,
    log: DurableLog,
    peer: tokio::task::JoinHandle<()>,
}

impl Cluster {
    /// Starts node `config.id` over the ledger in `home` (configured with
    /// [`cairn_raft::ledger_config`]; the node opens it): opens its Raft log, binds its peer
    /// listener (which receives snapshots into `home.snapshots`; over TLS with `tls`'s identity
    /// and handshake time limit when `config.peer_ca` is set), and, with `config.init`,
    /// initializes a cluster that has no membership yet (this node's API named `api` there
    /// unless the entry names one).
    ///
    /// Errors: the secret file unreadable, readable by others or not a valid secret; the peers'
    /// CA file unreadable or without a certificate; the log
    /// directory that does not open; the peer address taken; openraft refusing to start or
    /// to initialize (other than because the cluster already has a membership).
    pub async fn start(
        config: &ClusterConfig,
        api: &str,
        home: LedgerHome,
        disk: Option<DiskFaults>,
        tls: Option<(crate::net::Tls, Duration)>,
    ) -> Result<Cluster, String> {
        let secret = read_secret(&config.secret_file)?;
        // Peer TLS: this node's identity (with the handshake's time limit) and the peers' CA.
        let peer_tls = match (&config.peer_ca, tls) {
            (Some(ca), Some(tls)) => {
                let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
                Some((tls, pem))
            }
            (Some(_), None) => return Err("[cluster] peer_ca needs [tls]".into()),
            (None, _) => None,
        };
        let dir = config.dir.clone();
        let fs: Arc<dyn cairn::fs::FileSystem> = match &disk {
            Some(disk) => Arc::new(FaultyFs::new(disk.clone())),
            None => Arc::new(cairn::fs::RealFs),
        };
        let log = tokio::task::spawn_blocking(move || DurableLog::open_with(fs, &dir))
            .await
            .map_err(|e| format!("opening the Raft log: {e}"))?
            .map_err(|e| format!("opening the Raft log in {}: {e}", config.dir.display()))?;
        let faults = Faults::new();
        let network = match &peer_tls {
            Some((_, ca)) => HttpNetwork::with_tls(secret.clone(), ca).map_err(|e| {
                format!(
                    "{e} ({})",
                    config.peer_ca.as_deref().unwrap_or(Path::new("")).display()
                )
            })?,
            None => HttpNetwork::new(secret.clone())?,
        }
        .with_faults(faults.clone());
        let inbox = home.snapshots.clone();
        let options = NodeOptions::default()
            .snapshot_every(config.snapshot_every)
            .log_kept(config.log_kept);
        let node = Node::start_with(config.id, home, log.clone(), network, options)
            .await
            .map_err(|e| format!("starting Raft node {}: {e}", config.id))?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| format!("peer listener on {}: {e}", config.listen))?;
        let peer_addr = listener
            .local_addr()
            .map_err(|e| format!("the peer listener's address: {e}"))?;
        let router = peer_router_with(node.raft.clone(), secret, faults.clone(), Some(inbox));
        let tls_on = peer_tls.is_some();
        let peer = match peer_tls {
            Some(((tls, idle), _)) => {
                let listener = crate::net::TlsListener::new(listener, tls, idle)
                    .map_err(|e| format!("the peer listener: {e}"))?;
                tokio::spawn(async move {
                    if let Err(e) = axum::serve(listener, router).await {
                        tracing::error!(error = %e, "the peer listener failed");
                    }
                })
            }
            None => tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, router).await {
                    tracing::error!(error = %e, "the peer listener failed");
                }
            }),
        };
        if !config.init.is_empty() {
            let members: BTreeMap<NodeId, Member> = config
                .init
                .iter()
                .map(|m| {
                    let api = match m.api.is_empty() && m.id == config.id {
                        true => api.to_string(),
                        false => m.api.clone(),
                    };
                    (m.id, Member::new(m.addr.to_string(), api))
                })
                .collect();
            match node.raft.initialize(members).await {
                Ok(()) => tracing::info!(node = config.id, "cluster initialized"),
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                    tracing::info!(node = config.id, "cluster already initialized");
                }
                Err(e) => return Err(format!("initializing the cluster: {e}")),
            }
        }
        tracing::info!(node = config.id, peers = %peer_addr, "cluster node started");
        Ok(Cluster {
            node,
            peer_addr,
            faults: config.fault_injection.then_some(faults),
            disk,
            peer_tls: tls_on,
            log,
            peer,
        })
    }

    /// Makes the next read of the local ledger as fresh as `consistency` asks (see the
    /// module's header). Errors: 421 on a node that does not lead; 503 without a quorum.
    pub async fn read_barrier(&self, consistency: Consistency) -> Result<(), ApiError> {
        self.node
            .read_barrier(consistency)
            .await
            .map_err(node_error)
    }

    /// Proposes `command` and answers it as the API answers a write: the version made (none
    /// when there was nothing to write) with the receipts a `prove` command asked for, 409
    /// when an expectation failed (its key named by `expectation`, given its index), 400 when
    /// it can never apply, 421 on a node that does not lead, 503 when its outcome is unknown.
    pub async fn write(
        &self,
        command: Command,
        expectation: impl FnOnce(usize) -> String,
    ) -> Result<(wire::CommitResponse, Option<Box<WriteReceipts>>), ApiError> {
        let started = std::time::Instant::now();
        let response = self.node.write(command).await.map_err(node_error)?;
        metrics::histogram!("cairn_raft_write_seconds").record(started.elapsed().as_secs_f64());
        match response {
            Response::Committed {
                version,
                ledger_root,
                digest_root,
                receipts,
            } => {
                let response = wire::CommitResponse {
                    version,
                    ledger_root: ledger_root.to_vec(),
                    digest: Some(wire::Digest {
                        size: version,
                        root: digest_root.to_vec(),
                    }),
                    reads: None,
                    writes: None,
                    shards: Vec::new(),
                };
                Ok((response, receipts))
            }
            Response::Unchanged { .. } => Ok((wire::CommitResponse::default(), None)),
            Response::Conflict { index } => Err(ApiError::new(
                StatusCode::CONFLICT,
                "expectation_failed",
                format!(
                    "{} no longer holds the value read; nothing was written",
                    expectation(index)
                ),
            )),
            Response::Refused { reason } => Err(ApiError::bad_request(reason)),
            Response::Locked { tx } => Err(locked(&tx)),
            Response::Empty | Response::Prepared { .. } | Response::Decided { .. } => {
                tracing::error!(?response, "a write was answered as no write is");
                Err(ApiError::internal())
            }
        }
    }

    /// Stops the node: its Raft (no more votes or appends), its peer listener, its log (after
    /// a sync). The ledger is the caller's to close.
    pub async fn stop(&self) {
        if let Err(e) = self.node.raft.shutdown().await {
            tracing::error!(error = %e, "stopping Raft");
        }
        self.peer.abort();
        let log = self.log.clone();
        let _ = tokio::task::spawn_blocking(move || log.close()).await;
    }
}

/// The consistency a read asks for in its query: `consistency=stale`, or linearizable (the
/// default, also `consistency=linearizable`). Errors: 400 for another value.
pub fn consistency_of(uri: &Uri) -> Result<Consistency, ApiError> {
    let query = uri.query().unwrap_or("");
    for pair in query.split('&') {
        if let Some(value) = pair.strip_prefix("consistency=") {
            return match value {
                "stale" => Ok(Consistency::Stale),
                "linearizable" => Ok(Consistency::Linearizable),
                other => Err(ApiError::bad_request(format!(
                    "consistency={other:?}: linearizable (the default) or stale"
                ))),
            };
        }
    }
    Ok(Consistency::Linearizable)
}

/// A node's refusal as an API error: 421 `not_leader` (naming the leader), 503
/// `outcome_unknown` or `unavailable`, or the ledger's own.
pub fn node_error(e: cairn_raft::Error) -> ApiError {
    match e {
        cairn_raft::Error::NotLeader { leader, member } => {
            let api = member.map(|m| m.api).filter(|api| !api.is_empty());
            let message = match (leader, &api) {
                (Some(id), Some(api)) => {
                    format!("this node does not lead; node {id} does, at {api}")
                }
                (Some(id), None) => format!("this node does not lead; node {id} does"),
                (None, _) => "this node does not lead, and knows no leader yet; retry".into(),
            };
            let mut error = ApiError::new(StatusCode::MISDIRECTED_REQUEST, "not_leader", message);
            error.leader = api;
            error
        }
        cairn_raft::Error::Unknown(detail) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "outcome_unknown",
            format!(
                "leadership changed with the write in flight: it may or may not commit; \
                 read before retrying ({detail})"
            ),
        ),
        cairn_raft::Error::Ledger(e) => ApiError::from(e),
        cairn_raft::Error::Locked { tx } => locked(&tx),
        other => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the cluster cannot serve this now: {other}"),
        ),
    }
}

/// The cluster secret in `path`: refused when the file can be read by others than its owner.
fn read_secret(path: &Path) -> Result<ClusterSecret, String> {
    let text = read_private(path, "cluster secret")?;
    let shown = path.display();
    ClusterSecret::new(&text).map_err(|e| format!("cluster secret {shown}: {e}"))
}

/// The text of `path` (`what` names it in errors), trimmed: refused when the file can be read
/// by others than its owner, or holds more than 256 characters.
pub(crate) fn read_private(path: &Path, what: &str) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("{what} {shown}: {e}"))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{what} {shown} can be read by others than its owner (chmod 600 it)"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{what} {shown}: {e}"))?;
    let text = text.trim();
    if text.len() > 256 {
        return Err(format!("{what} {shown}: at most 256 characters"));
    }
    Ok(text.to_string())
}

/// 409 `locked`: a key is held by transaction `tx`, prepared across shards and not decided.
fn locked(tx: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "locked",
        format!(
            "a key is held by transaction {tx:?}, prepared across shards and not decided yet; \
             nothing was done: retry"
        ),
    )
}

//! `cairn-server`: Cairn's verifiable ledger over HTTP/1.1 and HTTP/2, secure by default.
//!
//! The API (`docs/server.md`) is LedgerBench's database adapter as batch endpoints (`get`,
//! `put`, `verify` of promises, `verify-receipt`), an optimistic `transact`, the digest,
//! consistency proofs, ranges with proofs of completeness, and a streaming export for
//! auditors; bodies are JSON or protobuf by content negotiation. TLS and bearer tokens with
//! per-ledger, per-table grants are required unless the server is told to serve plain HTTP on
//! loopback only; every request is held to limits (body size, keys, concurrency, time).
//!
//! Modules, each owning one concept (a module calls only those listed before it, and `wire`
//! and `error`):
//! - `wire` (the `cairn-wire` crate): the messages (protobuf and JSON from one definition);
//! - `codec`: content negotiation; `error`: error answers;
//! - `config`: the TOML configuration and its checks; `auth`: tokens and grants; `disk`: the
//!   file system a fault test can fill or slow;
//! - `cluster`: a node of a replicated cluster (`--raft`): writes through Raft, reads by read
//!   index, the peer listener;
//! - `service`: the endpoints and the layers that limit them; `net`: connections, TLS,
//!   graceful shutdown;
//! - this file: [`start`], which opens the ledgers and runs the whole.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
pub mod cluster;
pub mod codec;
pub mod config;
pub mod disk;
pub mod error;
pub mod net;
pub mod router;
mod router_api;
pub mod service;
mod shard_node;
pub use cairn_wire as wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cairn_ledger::Ledger;
use cairn_raft::LedgerSlot;
use metrics_exporter_prometheus::PrometheusHandle;

pub use config::Config;

/// The process's Prometheus recorder (a process has one global recorder; every server started
/// in it shares this one).
fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok().map(|()| handle)
        })
        .clone()
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The SHA-256 fingerprint of its TLS certificate (`None`: plain HTTP).
    pub fingerprint: Option<String>,
    /// The self-signed certificate, PEM, when it made one (for a client to trust).
    pub self_signed_pem: Option<String>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<Result<(), String>>,
}

impl Running {
    /// Starts the graceful shutdown (as SIGTERM does) and waits for it: no new connection,
    /// the requests in flight finished (within the configured bound), then every ledger's log
    /// synced and a checkpoint written. Errors: a ledger that failed to sync or checkpoint.
    pub async fn shutdown(mut self) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.wait().await
    }

    /// Waits until the server has stopped (after a shutdown started elsewhere).
    pub async fn wait(&mut self) -> Result<(), String> {
        (&mut self.done)
            .await
            .map_err(|e| format!("the server task failed: {e}"))?
    }
}

/// Opens the configured ledgers, binds the listener and serves until `stop` completes or
/// [`Running::shutdown`] is called; then shuts down gracefully. Errors: the configuration's
/// check ([`Config::check`]), a ledger that does not open, the address taken, TLS files that
/// do not load.
pub async fn start(
    config: Config,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Running, String> {
    config.check()?;
    let grants = auth::Grants::new(&config.tokens)?;
    let open_access = config.insecure_loopback && grants.is_empty();
    let mut self_signed_pem = None;
    let tls = match (&config.tls, config.insecure_loopback) {
        (Some(tls), _) if !tls.self_signed.is_empty() => {
            let made = net::self_signed(&tls.self_signed)?;
            let t = net::Tls::from_pem(made.cert_pem.as_bytes(), made.key_pem.as_bytes())?;
            tracing::warn!(
                fingerprint = %t.fingerprint,
                "serving a self-signed certificate (development only): pin this SHA-256 fingerprint"
            );
            self_signed_pem = Some(made.cert_pem);
            Some(t)
        }
        (Some(tls), _) => match (&tls.cert, &tls.key) {
            (Some(cert), Some(key)) => Some(net::Tls::from_files(cert, key)?),
            _ => return Err("[tls] takes either cert and key, or self_signed".into()),
        },
        (None, true) => None,
        (None, false) => return Err("no TLS configured".into()),
    };
    let entries = config.ledgers.clone();
    let limits_keys = config.limits.keys_per_request;
    let replicated = config.cluster.is_some();
    let disk = (config.cluster.as_ref())
        .filter(|c| c.fault_injection)
        .map(|_| disk::DiskFaults::new());
    let ledger_disk = disk.clone();
    // Each ledger opened, or for a cluster node its home (the node opens it).
    let (mut ledgers, home) = tokio::task::spawn_blocking(move || {
        let mut ledgers = HashMap::new();
        let mut home = None;
        for l in entries {
            let c = if replicated {
                // Its tables and the one where each version records its Raft entry.
                cairn_raft::ledger_config(l.tables.clone())
            } else {
                cairn_ledger::LedgerConfig::new(l.tables.clone())
            };
            let c = c
                .ordered(l.ordered.clone())
                // A cluster proves a write's reads as of the version before it, once made.
                .history(if replicated { l.history.max(1) } else { l.history })
                .group(l.group.max(1))
                .range_max(limits_keys);
            let fs: Arc<dyn cairn::fs::FileSystem> = match &ledger_disk {
                Some(d) => Arc::new(disk::FaultyFs::new(d.clone())),
                None => Arc::new(cairn::fs::RealFs),
            };
            if replicated {
                home = Some((l.name, l.dir, fs, c));
                continue;
            }
            let ledger = Ledger::open_with(fs, &l.dir, c, cairn::SessionOptions::default())
                .map_err(|e| format!("opening ledger {:?} in {}: {e}", l.name, l.dir.display()))?;
            tracing::info!(ledger = %l.name, dir = %l.dir.display(), version = ledger.version(), "ledger open");
            ledgers.insert(l.name, LedgerSlot::new(Arc::new(ledger)));
        }
        Ok::<_, String>((ledgers, home))
    })
    .await
    .map_err(|e| format!("opening the ledgers: {e}"))??;
    let cluster = match (&config.cluster, home) {
        (Some(c), Some((name, dir, fs, ledger_config))) => {
            // `check` made sure there is exactly one ledger.
            let mut home = cairn_raft::LedgerHome::new(&dir, c.snapshots(), ledger_config);
            home.fs = fs;
            let api = config.cluster_api();
            let peer_tls = tls.clone().map(|t| (t, config.limits.idle_timeout()));
            let cluster = cluster::Cluster::start(c, &api, home, disk, peer_tls)
                .await
                .map_err(|e| format!("ledger {name:?} in {}: {e}", dir.display()))?;
            let ledger = cluster.node.ledger();
            tracing::info!(ledger = %name, dir = %dir.display(), version = ledger.version(), "ledger open");
            ledgers.insert(name, cluster.node.slot());
            Some(Arc::new(cluster))
        }
        _ => None,
    };
    let router = match &config.router {
        Some(r) => Some(Arc::new(router::ShardRouter::start(r)?)),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("listening on {}: {e}", config.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("the listener's address: {e}"))?;
    let state = Arc::new(service::AppState {
        ledgers,
        grants,
        open_access,
        limits: config.limits.clone(),
        metrics: metrics_handle(),
        ready: AtomicBool::new(true),
        cluster,
        router,
    });
    let service = service::limited(service::router(state.clone()), &config.limits);
    let fingerprint = tls.as_ref().map(|t| t.fingerprint.clone());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let grace = Duration::from_millis(config.shutdown_timeout_ms);
    let limits = config.limits.clone();
    tracing::info!(%addr, tls = tls.is_some(), open_access, "serving");
    let serving_state = state.clone();
    let done = tokio::spawn(async move {
        let stopping = async move {
            tokio::select! {
                () = stop => {},
                _ = stop_rx => {},
            }
            serving_state.ready.store(false, Ordering::Release);
            tracing::info!("shutdown started");
        };
        net::serve(listener, tls, service, limits, grace, stopping).await;
        // The node stops before its ledger closes: nothing applies to a closed ledger.
        if let Some(cluster) = &state.cluster {
            cluster.stop().await;
        }
        if let Some(router) = &state.router {
            router.stop();
        }
        let ledgers: Vec<(String, Arc<Ledger>)> = state
            .ledgers
            .iter()
            .map(|(n, l)| (n.clone(), l.get()))
            .collect();
        tokio::task::spawn_blocking(move || {
            let mut failed = Vec::new();
            for (name, ledger) in ledgers {
                let result = ledger.sync().and_then(|()| ledger.checkpoint());
                match result {
                    Ok(()) => tracing::info!(ledger = %name, "synced and checkpointed"),
                    Err(e) => {
                        tracing::error!(ledger = %name, error = %e, "sync or checkpoint failed");
                        failed.push(format!("{name}: {e}"));
                    }
                }
                ledger.close();
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(failed.join("; "))
            }
        })
        .await
        .map_err(|e| format!("closing the ledgers: {e}"))?
    });
    Ok(Running {
        addr,
        fingerprint,
        self_signed_pem,
        stop: Some(stop_tx),
        done,
    })
}

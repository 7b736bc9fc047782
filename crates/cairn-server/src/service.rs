//! The API's endpoints: each request authenticated, its grants checked, its size held to the
//! limits, then served by the ledger on a blocking thread.
//!
//! Owns: [`AppState`], the [`router`] (every route, and the layers that answer 429 and 408),
//! each handler, and the conversions between the ledger's answers and the wire's. May call:
//! `auth`, `cluster`, `codec`, `config`, `error`, `wire`, `cairn_ledger`, `cairn_proof`. Must
//! never touch: sockets or TLS (`net` serves the router).
//!
//! On a cluster node (`cluster`), writes become Raft commands and reads first pass the node's
//! read barrier (linearizable unless `?consistency=stale`); the cluster's own endpoints
//! (`/v1/cluster`) need the admin right.
//!
//! Every ledger call runs in `spawn_blocking` (they read files and wait for the log's fsync);
//! a write is answered only once it is durable, so an acknowledged write survives a crash.
//! Bounds per request: at most `keys_per_request` keys (413 beyond), so a request's work is
//! bounded by the ledger's cost for that many keys.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::error_handling::HandleErrorLayer;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{BoxError, Router};
use cairn_ledger::{Ledger, LedgerBatch, VerifiedRead};
use cairn_raft::LedgerSlot;
use tower::ServiceBuilder;

use crate::auth::{Grants, Principal, Right};
use crate::cluster::{self, Cluster};
use crate::codec::{Format, Reply, Wire};
use crate::config::Limits;
use crate::error::ApiError;
use crate::wire;

/// What every handler shares.
pub struct AppState {
    /// The ledgers, by name (a cluster node's is replaced whole when it installs a snapshot:
    /// each request takes the current one).
    pub ledgers: HashMap<String, LedgerSlot>,
    /// The tokens and their grants.
    pub grants: Grants,
    /// No token needed (insecure loopback without tokens): every caller has every right.
    pub open_access: bool,
    /// The limits.
    pub limits: Limits,
    /// The Prometheus exporter's handle, rendering `/metrics`.
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// Cleared when a shutdown starts: `/ready` then answers 503.
    pub ready: AtomicBool,
    /// The cluster this server is a node of (`--raft`), if any.
    pub cluster: Option<Arc<Cluster>>,
    /// The shards this server routes to (`[router]`), if it is a router.
    pub router: Option<Arc<crate::router::ShardRouter>>,
}

pub(crate) type Shared = Arc<AppState>;

/// The service a connection serves: the [`router`] inside the server-wide limits, the
/// concurrency limit (429 at once when full: one semaphore for every connection) and the
/// request timeout (408), with a handler's panic answered 500.
pub fn limited(router: Router, limits: &Limits) -> Limited {
    let service = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(overload_or_timeout))
        .load_shed()
        .concurrency_limit(limits.concurrent_requests)
        .timeout(limits.request_timeout())
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked))
        .service(router);
    tower::util::BoxCloneService::new(service)
}

/// What [`limited`] makes: a clonable service of hyper's requests that never fails (every
/// error is an answer).
pub type Limited = tower::util::BoxCloneService<
    axum::http::Request<hyper::body::Incoming>,
    Response,
    std::convert::Infallible,
>;

/// The router: every endpoint, with the body limit around them (see [`limited`] for the
/// rest).
pub fn router(state: Shared) -> Router {
    let limits = state.limits.clone();
    if state.router.is_some() {
        return Router::new()
            .route("/health", get(|| async { "ok\n" }))
            .route("/ready", get(ready))
            .route("/metrics", get(metrics_text))
            .merge(crate::router_api::routes())
            .fallback(|headers: HeaderMap| async move {
                ApiError::not_found("no such endpoint on a router (see docs/server.md)")
                    .in_format(Format::of_answer(&headers))
            })
            .layer(axum::middleware::from_fn(track))
            .layer(DefaultBodyLimit::max(limits.body_bytes))
            .with_state(state);
    }
    let ledger_routes = Router::new()
        .route("/get", post(get_values))
        .route("/put", post(put))
        .route("/transact", post(transact))
        .route("/verify", post(verify))
        .route("/verify-receipt", post(verify_receipt))
        .route("/range", post(range))
        .route("/digest", get(digest))
        .route("/consistency", get(consistency))
        .route("/export", get(export));
    Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics_text))
        .route("/v1/cluster", get(cluster_status))
        .route("/v1/cluster/learners", post(add_learner))
        .route("/v1/cluster/voters", post(change_voters))
        .route("/v1/cluster/faults", post(set_faults))
        .route("/v1/cluster/command", post(crate::shard_node::command))
        .route("/v1/cluster/prepared", get(crate::shard_node::prepared))
        .route("/v1/cluster/witness", get(crate::shard_node::witness))
        .nest("/v1/ledgers/{ledger}", ledger_routes)
        .fallback(|headers: HeaderMap| async move {
            ApiError::not_found("no such endpoint (see docs/server.md)")
                .in_format(Format::of_answer(&headers))
        })
        .layer(axum::middleware::from_fn(track))
        .layer(DefaultBodyLimit::max(limits.body_bytes))
        .with_state(state)
}

/// A handler that panicked (a bug): 500, and the connection and server serve on.
fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::internal().into_response()
}

/// 429 when the concurrency limit is full, 408 when a request outlived its timeout.
async fn overload_or_timeout(headers: HeaderMap, error: BoxError) -> ApiError {
    overload_error(error).in_format(Format::of_answer(&headers))
}

fn overload_error(error: BoxError) -> ApiError {
    if error.is::<tower::load_shed::error::Overloaded>() {
        metrics::counter!("cairn_requests_shed_total").increment(1);
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            "the server is serving as many requests as it may; retry later",
        )
    } else if error.is::<tower::timeout::error::Elapsed>() {
        metrics::counter!("cairn_requests_timed_out_total").increment(1);
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request took longer than the server's request timeout",
        )
    } else {
        tracing::error!(%error, "request failed in a layer");
        ApiError::internal()
    }
}

/// Counts and times every request by endpoint and status, and logs it (method, path, status,
/// time; never a header, so never a token).
async fn track(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let started = Instant::now();
    let endpoint = endpoint_of(request.uri().path());
    let method = request.method().clone();
    let response = next.run(request).await;
    let seconds = started.elapsed().as_secs_f64();
    let status = response.status().as_u16().to_string();
    metrics::counter!("cairn_requests_total", "endpoint" => endpoint, "status" => status)
        .increment(1);
    metrics::histogram!("cairn_request_seconds", "endpoint" => endpoint).record(seconds);
    tracing::info!(
        %method,
        endpoint,
        status = response.status().as_u16(),
        ms = seconds * 1e3,
        "request"
    );
    response
}

/// The endpoint's name for metrics: the last path segment of a ledger route (a bounded set).
fn endpoint_of(path: &str) -> &'static str {
    const KNOWN: [&str; 12] = [
        "get",
        "put",
        "transact",
        "verify",
        "verify-receipt",
        "range",
        "digest",
        "consistency",
        "export",
        "health",
        "ready",
        "metrics",
    ];
    let last = path.rsplit('/').next().unwrap_or("");
    KNOWN
        .iter()
        .find(|k| **k == last)
        .copied()
        .unwrap_or("other")
}

async fn ready(State(state): State<Shared>) -> Response {
    if state.ready.load(Ordering::Acquire) {
        "ready\n".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    }
}

async fn metrics_text(State(state): State<Shared>, caller: Caller) -> Result<Response, ApiError> {
    if !any_admin(&state, &caller.0) {
        return Err(ApiError::forbidden("/metrics needs the admin right"));
    }
    for (name, slot) in &state.ledgers {
        let ledger = slot.get();
        let ledger_label = name.clone();
        metrics::gauge!("cairn_ledger_version", "ledger" => ledger_label.clone())
            .set(ledger.version() as f64);
        if let Ok(log) = ledger.log_stats() {
            metrics::gauge!("cairn_log_fsyncs", "ledger" => ledger_label.clone())
                .set(log.fsyncs as f64);
            metrics::gauge!("cairn_log_bytes", "ledger" => ledger_label.clone())
                .set(log.bytes as f64);
        }
        for table in ledger.tables() {
            if let Ok(t) = ledger.table_stats(table) {
                let labels = [("ledger", ledger_label.clone()), ("table", table.clone())];
                metrics::gauge!("cairn_table_merges_in_progress", &labels)
                    .set(t.merges_in_progress as f64);
                metrics::gauge!("cairn_table_write_buffer_entries", &labels)
                    .set(t.write_buffer_entries as f64);
                metrics::gauge!("cairn_table_runs", &labels).set(t.runs as f64);
            }
        }
    }
    let text = state
        .metrics
        .as_ref()
        .map(|h| h.render())
        .unwrap_or_default();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

fn any_admin(state: &AppState, p: &Principal) -> bool {
    state
        .ledgers
        .keys()
        .any(|l| p.allows(l, None, Right::Admin))
}

/// The caller, authenticated by its bearer token.
pub struct Caller(pub Principal);

impl FromRequestParts<Shared> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, ApiError> {
        let format = Format::of_answer(&parts.headers);
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match token {
            Some(t) => match state.grants.principal(t) {
                Some(p) => Ok(Caller(p.clone())),
                None => Err(ApiError::unauthenticated().in_format(format)),
            },
            None if state.open_access => Ok(Caller(Principal::anonymous_admin())),
            None => Err(ApiError::unauthenticated().in_format(format)),
        }
    }
}

/// The ledger named in the path, once the caller may use it with `right` on `tables`
/// (`None`: on the ledger as a whole). An unknown ledger and one the caller has no grant on
/// answer alike (404), so that names do not leak.
fn ledger_for(
    state: &AppState,
    caller: &Caller,
    name: &str,
    tables: Option<&mut dyn Iterator<Item = &str>>,
    right: Right,
    format: Format,
) -> Result<Arc<Ledger>, ApiError> {
    let ledger = state
        .ledgers
        .get(name)
        .map(LedgerSlot::get)
        .filter(|_| any_grant(&caller.0, name))
        .ok_or_else(|| ApiError::not_found(format!("no ledger {name:?}")).in_format(format))?;
    match tables {
        None => {
            if !caller.0.allows(name, None, right) {
                return Err(forbidden(right, name, None).in_format(format));
            }
        }
        Some(tables) => {
            for t in tables {
                if !caller.0.allows(name, Some(t), right) {
                    return Err(forbidden(right, name, Some(t)).in_format(format));
                }
            }
        }
    }
    Ok(ledger)
}

pub(crate) fn any_grant(p: &Principal, ledger: &str) -> bool {
    [Right::Read, Right::Write, Right::Admin]
        .iter()
        .any(|&r| p.allows(ledger, None, r))
}

pub(crate) fn forbidden(right: Right, ledger: &str, table: Option<&str>) -> ApiError {
    let what = match table {
        Some(t) => format!("table {t:?} of ledger {ledger:?}"),
        None => format!("ledger {ledger:?}"),
    };
    ApiError::forbidden(format!("the token has no {right:?} right on {what}").to_lowercase())
}

/// Refuses a request with more than the limit's keys (413).
pub(crate) fn check_keys(limits: &Limits, keys: usize, format: Format) -> Result<(), ApiError> {
    if keys > limits.keys_per_request {
        return Err(ApiError::too_large(format!(
            "{keys} keys in one request; the server takes at most {}",
            limits.keys_per_request
        ))
        .in_format(format));
    }
    Ok(())
}

/// Runs a ledger call on a blocking thread; its error in `format`.
async fn blocking<T: Send + 'static>(
    format: Format,
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| e.in_format(format)),
        Err(e) => {
            tracing::error!(error = %e, "a ledger call panicked or was cancelled");
            Err(ApiError::internal().in_format(format))
        }
    }
}

fn values_of(values: Vec<Option<Vec<u8>>>) -> Vec<wire::Value> {
    values
        .into_iter()
        .map(|value| wire::Value { value })
        .collect()
}

/// A verified read on the wire: `tables` names the tables in the read's order.
fn read_response(read: VerifiedRead, tables: &[String]) -> wire::ReadResponse {
    let mut proven = read.proven.into_iter();
    wire::ReadResponse {
        version: read.version,
        digest: Some(read.digest.into()),
        tables: tables
            .iter()
            .zip(read.values)
            .map(|(table, values)| wire::TableValues {
                table: table.clone(),
                values: values_of(values),
                proven: values_of(proven.next().unwrap_or_default()),
            })
            .collect(),
        receipt: read.receipt.encode(),
        shards: Vec::new(),
        global: Vec::new(),
    }
}

fn proved_keys(keys: cairn_ledger::ProvedKeys) -> wire::ProvedKeys {
    let tables: Vec<String> = keys.keys.iter().map(|(t, _)| t.clone()).collect();
    wire::ProvedKeys {
        read: Some(read_response(keys.read, &tables)),
        keys: keys
            .keys
            .into_iter()
            .map(|(table, keys)| wire::TableKeys { table, keys })
            .collect(),
    }
}

fn committed(c: &cairn_ledger::Committed) -> wire::CommitResponse {
    wire::CommitResponse {
        version: c.version,
        ledger_root: c.ledger_root.to_vec(),
        digest: Some(c.digest.into()),
        reads: None,
        writes: None,
        shards: Vec::new(),
    }
}

/// Waits until a commit is durable: a write is acknowledged only then. The wait (the log's
/// group fsync, as a write sees it) is recorded in `cairn_durable_wait_seconds`.
fn durable(c: &cairn_ledger::Committed) -> Result<(), ApiError> {
    let started = Instant::now();
    let waited = c.durability.wait();
    metrics::histogram!("cairn_durable_wait_seconds").record(started.elapsed().as_secs_f64());
    waited.map_err(|e| ApiError::from(cairn_ledger::Error::from(e)))
}

async fn get_values(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    uri: Uri,
    Wire {
        message: req,
        answer,
    }: Wire<wire::GetRequest>,
) -> Result<Reply<wire::ReadResponse>, ApiError> {
    let keys = req.tables.iter().map(|t| t.keys.len()).sum();
    let tables = req.tables.iter().map(|t| t.table.as_str());
    let ledger = admit(&state, &caller, &name, keys, tables, Right::Read, answer)?;
    if req.promise && req.version != 0 {
        return Err(ApiError::bad_request(
            "a promise is made at the newest version: leave version out",
        )
        .in_format(answer));
    }
    barrier(&state, &uri, answer).await?;
    if let Some(cluster) = &state.cluster {
        // A key held by a transaction across shards is not read until it is decided.
        let reads: Vec<(&str, &[Vec<u8>])> = (req.tables.iter())
            .map(|t| (t.table.as_str(), &t.keys[..]))
            .collect();
        (cluster.node.check_unlocked(&reads))
            .map_err(|e| cluster::node_error(e).in_format(answer))?;
    }
    let response = blocking(answer, move || {
        let names: Vec<String> = req.tables.iter().map(|t| t.table.clone()).collect();
        let reads: Vec<(&str, &[Vec<u8>])> = req
            .tables
            .iter()
            .map(|t| (t.table.as_str(), &t.keys[..]))
            .collect();
        if req.promise {
            let (version, values) = ledger.read_values(&reads)?;
            return Ok(wire::ReadResponse {
                version,
                digest: None,
                tables: names
                    .into_iter()
                    .zip(values)
                    .map(|(table, values)| wire::TableValues {
                        table,
                        values: values_of(values),
                        proven: Vec::new(),
                    })
                    .collect(),
                receipt: Vec::new(),
                shards: Vec::new(),
                global: Vec::new(),
            });
        }
        let read = if req.version == 0 {
            ledger.read(&reads)?
        } else {
            ledger.read_at(req.version, &reads)?
        };
        Ok(read_response(read, &names))
    })
    .await?;
    Ok(Reply(response, answer))
}

/// The writes of a request as `(table, key, value or delete)`.
fn writes_of(tables: &[wire::TableWrites]) -> impl Iterator<Item = (&str, &wire::Write)> {
    tables
        .iter()
        .flat_map(|t| t.writes.iter().map(move |w| (t.table.as_str(), w)))
}

/// The ledger named in the path for a request of `keys` keys on `tables` with `right`
/// (413 over the key limit; see [`ledger_for`]).
fn admit<'t>(
    state: &AppState,
    caller: &Caller,
    name: &str,
    keys: usize,
    tables: impl IntoIterator<Item = &'t str>,
    right: Right,
    format: Format,
) -> Result<Arc<Ledger>, ApiError> {
    check_keys(&state.limits, keys, format)?;
    let mut tables = tables.into_iter();
    ledger_for(state, caller, name, Some(&mut tables), right, format)
}

async fn put(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    Wire {
        message: req,
        answer,
    }: Wire<wire::PutRequest>,
) -> Result<Reply<wire::CommitResponse>, ApiError> {
    let keys = req.tables.iter().map(|t| t.writes.len()).sum();
    let tables = req.tables.iter().map(|t| t.table.as_str());
    let ledger = admit(&state, &caller, &name, keys, tables, Right::Write, answer)?;
    metrics::histogram!("cairn_commit_keys").record(keys as f64);
    if let Some(cluster) = &state.cluster {
        let command = replicated(&[], &req.tables, &req.meta, req.prove);
        let response = cluster_write(cluster, command, &[], answer).await?;
        return Ok(Reply(response, answer));
    }
    let response = blocking(answer, move || {
        if req.prove {
            // With receipts: a transaction that reads nothing.
            return run_transaction(&ledger, &req.meta, &[], &req.tables, true);
        }
        let mut batch = LedgerBatch::new();
        batch.meta(&req.meta);
        for (table, w) in writes_of(&req.tables) {
            match &w.value {
                Some(v) => batch.insert(table, &w.key, v),
                None => batch.delete(table, &w.key),
            };
        }
        Ok(match ledger.write(&batch)? {
            None => wire::CommitResponse::default(),
            Some(c) => {
                durable(&c)?;
                committed(&c)
            }
        })
    })
    .await?;
    Ok(Reply(response, answer))
}

/// Why a transaction's expectation failed: the key.
struct Mismatch {
    table: String,
    key: Vec<u8>,
}

/// Runs a ledger transaction that checks `expects` and applies `tables`' writes, waits until
/// its version is durable, and answers it (with receipts when `prove`). Errors: 409
/// `expectation_failed` (nothing written) when a key no longer holds what the client saw.
fn run_transaction(
    ledger: &Ledger,
    meta: &[u8],
    expects: &[wire::TableExpects],
    tables: &[wire::TableWrites],
    prove: bool,
) -> Result<wire::CommitResponse, ApiError> {
    let body = |tx: &mut cairn_ledger::LedgerTx<'_>| {
        for t in expects {
            for e in &t.expects {
                if tx.get(&t.table, &e.key)? != e.value {
                    return Ok(Err(Mismatch {
                        table: t.table.clone(),
                        key: e.key.clone(),
                    }));
                }
            }
        }
        for (table, w) in writes_of(tables) {
            match &w.value {
                Some(v) => tx.insert(table, &w.key, v)?,
                None => tx.delete(table, &w.key)?,
            }
        }
        Ok(Ok(()))
    };
    let (outcome, out) = if prove {
        let (outcome, made) = ledger.transact_proved(meta, body)?;
        let out = match made {
            None => wire::CommitResponse::default(),
            Some(proved) => {
                durable(&proved.committed)?;
                let mut out = committed(&proved.committed);
                out.reads = proved.reads.map(proved_keys);
                out.writes = Some(proved_keys(proved.writes));
                out
            }
        };
        (outcome, out)
    } else {
        let (outcome, made) = ledger.transact(meta, body)?;
        let out = match made {
            None => wire::CommitResponse::default(),
            Some(c) => {
                durable(&c)?;
                committed(&c)
            }
        };
        (outcome, out)
    };
    match outcome {
        Ok(()) => Ok(out),
        Err(m) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "expectation_failed",
            format!(
                "key {} of table {:?} no longer holds the value read; nothing was written",
                hex::encode(&m.key),
                m.table
            ),
        )),
    }
}

async fn transact(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    Wire {
        message: req,
        answer,
    }: Wire<wire::TransactRequest>,
) -> Result<Reply<wire::CommitResponse>, ApiError> {
    let keys = req.tables.iter().map(|t| t.writes.len()).sum::<usize>()
        + req.expects.iter().map(|t| t.expects.len()).sum::<usize>();
    let read_tables = req.expects.iter().map(|t| t.table.as_str());
    admit(
        &state,
        &caller,
        &name,
        keys,
        read_tables,
        Right::Read,
        answer,
    )?;
    let tables = req.tables.iter().map(|t| t.table.as_str());
    let ledger = admit(&state, &caller, &name, keys, tables, Right::Write, answer)?;
    metrics::histogram!("cairn_commit_keys").record(keys as f64);
    if let Some(cluster) = &state.cluster {
        let command = replicated(&req.expects, &req.tables, &req.meta, req.prove);
        let response = cluster_write(cluster, command, &req.expects, answer).await?;
        return Ok(Reply(response, answer));
    }
    let response = blocking(answer, move || {
        run_transaction(&ledger, &req.meta, &req.expects, &req.tables, req.prove)
    })
    .await?;
    Ok(Reply(response, answer))
}

async fn verify(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    uri: Uri,
    Wire {
        message: req,
        answer,
    }: Wire<wire::VerifyRequest>,
) -> Result<Reply<wire::VerifyResponse>, ApiError> {
    let keys = req.promises.iter().map(|p| p.keys.len()).sum();
    let tables = req.promises.iter().map(|p| p.table.as_str());
    let ledger = admit(&state, &caller, &name, keys, tables, Right::Read, answer)?;
    barrier(&state, &uri, answer).await?;
    let response = blocking(answer, move || {
        let promises: Vec<cairn_ledger::Promise> = req
            .promises
            .iter()
            .map(|p| cairn_ledger::Promise {
                version: p.version,
                table: p.table.clone(),
                keys: p.keys.clone(),
            })
            .collect();
        let reads = (ledger.prove_promises(&promises)?.into_iter())
            .map(proved_keys)
            .collect();
        Ok(wire::VerifyResponse { reads })
    })
    .await?;
    Ok(Reply(response, answer))
}

async fn verify_receipt(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    Wire {
        message: req,
        answer,
    }: Wire<wire::VerifyReceiptRequest>,
) -> Result<Reply<wire::VerifyReceiptResponse>, ApiError> {
    let keys = req.tables.iter().map(|t| t.claims.len()).sum();
    let tables = req.tables.iter().map(|t| t.table.as_str());
    admit(&state, &caller, &name, keys, tables, Right::Read, answer)?;
    let bad = |m: String| ApiError::bad_request(m).in_format(answer);
    let receipt = cairn_proof::Receipt::decode(&req.receipt)
        .map_err(|e| bad(format!("the receipt does not decode: {e}")))?;
    let digest = req
        .digest
        .as_ref()
        .and_then(wire::Digest::to_proof)
        .ok_or_else(|| bad("a digest with a 32-byte root is required".into()))?;
    let claims: Vec<Vec<cairn_proof::Claim<'_>>> = req
        .tables
        .iter()
        .map(|t| {
            t.claims
                .iter()
                .map(|c| match &c.value {
                    Some(v) => cairn_proof::Claim::present(&c.key, v),
                    None => cairn_proof::Claim::absent(&c.key),
                })
                .collect()
        })
        .collect();
    let reads: Vec<cairn_proof::TableClaims<'_>> = req
        .tables
        .iter()
        .zip(&claims)
        .map(|(t, claims)| cairn_proof::TableClaims {
            table: &t.table,
            claims,
        })
        .collect();
    let verdict = if req.at {
        cairn_proof::verify_receipt_at(&receipt, &reads, &digest)
    } else {
        cairn_proof::verify_receipt(&receipt, &reads, &digest)
    };
    let response = match verdict {
        Ok(()) => wire::VerifyReceiptResponse {
            valid: true,
            error: String::new(),
        },
        Err(e) => wire::VerifyReceiptResponse {
            valid: false,
            error: e.to_string(),
        },
    };
    Ok(Reply(response, answer))
}

/// The query of `digest`: a size (0 or absent: the newest).
#[derive(serde::Deserialize)]
struct SizeQuery {
    #[serde(default)]
    size: u64,
}

async fn digest(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<SizeQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Reply<wire::Digest>, ApiError> {
    let answer = Format::of_answer(&headers);
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()).in_format(answer))?;
    let ledger = ledger_for(&state, &caller, &name, None, Right::Read, answer)?.clone();
    barrier(&state, &uri, answer).await?;
    let d = blocking(answer, move || {
        Ok(if q.size == 0 {
            ledger.digest()
        } else {
            ledger.digest_at(q.size)?
        })
    })
    .await?;
    Ok(Reply(d.into(), answer))
}

/// The query of `consistency`.
#[derive(serde::Deserialize)]
struct ConsistencyQuery {
    from: u64,
    /// 0 or absent: the newest.
    #[serde(default)]
    to: u64,
}

async fn consistency(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<ConsistencyQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Reply<wire::ConsistencyResponse>, ApiError> {
    let answer = Format::of_answer(&headers);
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()).in_format(answer))?;
    let ledger = ledger_for(&state, &caller, &name, None, Right::Read, answer)?.clone();
    barrier(&state, &uri, answer).await?;
    let response = blocking(answer, move || {
        let to = if q.to == 0 { ledger.version() } else { q.to };
        let proof = ledger.prove_consistency(q.from, to)?;
        Ok(wire::ConsistencyResponse {
            from: Some(ledger.digest_at(q.from)?.into()),
            to: Some(ledger.digest_at(to)?.into()),
            proof: proof.encode(),
        })
    })
    .await?;
    Ok(Reply(response, answer))
}

async fn range(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    uri: Uri,
    Wire {
        message: req,
        answer,
    }: Wire<wire::RangeRequest>,
) -> Result<Reply<wire::RangeResponse>, ApiError> {
    let tables = std::iter::once(req.table.as_str());
    let ledger = admit(&state, &caller, &name, 0, tables, Right::Read, answer)?;
    if req.promise && req.version != 0 {
        return Err(ApiError::bad_request(
            "a promise is made at the newest version: leave version out",
        )
        .in_format(answer));
    }
    barrier(&state, &uri, answer).await?;
    // The ledger stops reading at `keys_per_request + 1` entries (`LedgerConfig::range_max`).
    let response = blocking(answer, move || {
        let (version, digest, range_answer, receipt) = if req.promise {
            let (version, a) = ledger.range_values(&req.table, &req.lo, &req.hi)?;
            (version, None, a, Vec::new())
        } else {
            let r = if req.version == 0 {
                ledger.read_range(&req.table, &req.lo, &req.hi)?
            } else {
                ledger.read_range_at(req.version, &req.table, &req.lo, &req.hi)?
            };
            (
                r.version,
                Some(r.digest.into()),
                r.answer,
                r.receipt.encode(),
            )
        };
        Ok(wire::RangeResponse {
            version,
            digest,
            entries: (range_answer.entries.iter())
                .map(|(key, value)| wire::Write {
                    key: key.clone(),
                    value: Some(value.clone()),
                })
                .collect(),
            answer: range_answer.encode(),
            receipt,
        })
    })
    .await?;
    Ok(Reply(response, answer))
}

/// The query of `export`.
#[derive(serde::Deserialize)]
struct ExportQuery {
    /// First version (default 1).
    #[serde(default)]
    from: u64,
    /// Last version (0 or absent: the newest when the export starts).
    #[serde(default)]
    to: u64,
}

/// Versions the export reads per blocking step.
const EXPORT_CHUNK: u64 = 256;

/// Streams every version in `[from, to]` (leaf, roots, metadata) for an auditor: protobuf
/// messages each preceded by its length as a varint, or JSON objects one per line. The stream
/// is read a chunk of versions at a time, so memory stays bounded whatever the range.
async fn export(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    headers: HeaderMap,
    query: Result<Query<ExportQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let answer = Format::of_answer(&headers);
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()).in_format(answer))?;
    let ledger = ledger_for(&state, &caller, &name, None, Right::Admin, answer)?.clone();
    let newest = ledger.version();
    let from = q.from.max(1);
    let to = if q.to == 0 { newest } else { q.to };
    if to > newest || from > to.max(1) {
        return Err(ApiError::bad_request(format!(
            "versions {from} to {to}: the ledger holds 1 to {newest}"
        ))
        .in_format(answer));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        let mut next = from;
        while next <= to && to > 0 {
            let last = (next + EXPORT_CHUNK - 1).min(to);
            let ledger = ledger.clone();
            let chunk = tokio::task::spawn_blocking(move || {
                let mut out = Vec::new();
                for v in next..=last {
                    let info = ledger.version_info(v)?;
                    let record = wire::VersionRecord {
                        version: v,
                        leaf: info.leaf.encode().to_vec(),
                        roots: info
                            .roots
                            .into_iter()
                            .map(|(table, root)| wire::TableRoot {
                                table,
                                root: root.hash.to_vec(),
                            })
                            .collect(),
                        meta: info.meta,
                    };
                    match answer {
                        Format::Protobuf => {
                            out.extend(prost::Message::encode_length_delimited_to_vec(&record))
                        }
                        Format::Json => {
                            out.extend(answer.encode(&record));
                            out.push(b'\n');
                        }
                    }
                }
                Ok::<_, cairn_ledger::Error>(out)
            })
            .await;
            let item = match chunk {
                Ok(Ok(bytes)) => Ok(axum::body::Bytes::from(bytes)),
                Ok(Err(e)) => Err(std::io::Error::other(e.to_string())),
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
            next = last + 1;
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let media = match answer {
        Format::Protobuf => "application/x-protobuf; delimited=true",
        Format::Json => "application/x-ndjson",
    };
    Ok((
        [(header::CONTENT_TYPE, media)],
        axum::body::Body::from_stream(stream),
    )
        .into_response())
}

// ---------------------------------------------------------------------------------------------
// A cluster node

/// On a cluster node, waits until a read of the local ledger is as fresh as the request's
/// `consistency` asks (421 on a node that does not lead, for a linearizable read); elsewhere
/// nothing.
async fn barrier(state: &AppState, uri: &Uri, format: Format) -> Result<(), ApiError> {
    let Some(cluster) = &state.cluster else {
        return Ok(());
    };
    let consistency = cluster::consistency_of(uri).map_err(|e| e.in_format(format))?;
    (cluster.read_barrier(consistency).await).map_err(|e| e.in_format(format))
}

/// Proposes a write through the cluster and answers it, with its receipts when it asked for
/// them (as `run_transaction` answers on a single server).
async fn cluster_write(
    cluster: &Cluster,
    command: cairn_raft::Command,
    expects: &[wire::TableExpects],
    format: Format,
) -> Result<wire::CommitResponse, ApiError> {
    // The failed expectation named from the request, in the command's order (no copy made of
    // the expectations for the common case where none fails).
    let expectation = |index: usize| {
        let mut flat =
            (expects.iter()).flat_map(|t| t.expects.iter().map(move |e| (&t.table, &e.key)));
        match flat.nth(index) {
            Some((table, key)) => format!("key {} of table {table:?}", hex::encode(key)),
            None => format!("expectation {index}"),
        }
    };
    let (mut response, receipts) =
        (cluster.write(command, expectation).await).map_err(|e| e.in_format(format))?;
    if let Some(receipts) = receipts {
        let receipts = *receipts;
        if let Some(failed) = receipts.failed {
            tracing::error!(error = %failed, "a cluster write's receipts");
            let e = ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "receipts_failed", failed);
            return Err(e.in_format(format));
        }
        response.reads = receipts.reads.map(proved_keys);
        response.writes = receipts.writes.map(proved_keys);
    }
    Ok(response)
}

/// A write request as the command a cluster replicates.
pub(crate) fn replicated(
    expects: &[wire::TableExpects],
    tables: &[wire::TableWrites],
    meta: &[u8],
    prove: bool,
) -> cairn_raft::Command {
    let expects = (expects.iter())
        .flat_map(|t| {
            t.expects.iter().map(move |e| cairn_raft::Expectation {
                table: t.table.clone(),
                key: e.key.clone(),
                value: e.value.clone(),
            })
        })
        .collect();
    let writes = writes_of(tables)
        .map(|(table, w)| cairn_raft::Write {
            table: table.to_string(),
            key: w.key.clone(),
            value: w.value.clone(),
        })
        .collect();
    cairn_raft::Command::Write {
        expects,
        writes,
        meta: meta.to_vec(),
        prove,
    }
}

/// The cluster this server is a node of, for a caller with the admin right on some ledger.
pub(crate) fn cluster_for_admin<'a>(
    state: &'a AppState,
    caller: &Caller,
) -> Result<&'a Cluster, ApiError> {
    let cluster = (state.cluster.as_deref())
        .ok_or_else(|| ApiError::not_found("this server is not a cluster node (--raft)"))?;
    if !any_admin(state, &caller.0) {
        return Err(ApiError::forbidden("/v1/cluster needs the admin right"));
    }
    Ok(cluster)
}

pub(crate) fn json_response(value: serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

pub(crate) fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body does not decode: {e}")))
}

/// `GET /v1/cluster`: this node, the leader it knows, how far it has applied, its newest
/// snapshot and purged log, the members.
async fn cluster_status(State(state): State<Shared>, caller: Caller) -> Result<Response, ApiError> {
    let cluster = cluster_for_admin(&state, &caller)?;
    let node = &cluster.node;
    let members: Vec<serde_json::Value> = (node.members().into_iter())
        .map(|(id, member, voter)| {
            serde_json::json!({ "id": id, "addr": member.addr, "api": member.api, "voter": voter })
        })
        .collect();
    let (snapshot, purged) = node.snapshot_and_purged();
    Ok(json_response(serde_json::json!({
        "id": node.id,
        "leader": node.leader().await,
        "applied_index": node.applied_index(),
        "snapshot_index": snapshot,
        "purged_index": purged,
        "version": node.ledger().version(),
        "members": members,
    })))
}

/// The body of `POST /v1/cluster/learners`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LearnerRequest {
    id: u64,
    addr: std::net::SocketAddr,
    #[serde(default)]
    api: String,
}

/// `POST /v1/cluster/learners`: adds a node as a learner (on the leader); answers once it has
/// caught up.
async fn add_learner(
    State(state): State<Shared>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let cluster = cluster_for_admin(&state, &caller)?;
    let req: LearnerRequest = json_body(&body)?;
    if !cluster.peer_tls && !req.addr.ip().is_loopback() {
        return Err(ApiError::bad_request(
            "peer addresses are loopback only without peer TLS ([cluster] peer_ca)",
        ));
    }
    let member = cairn_raft::Member::new(req.addr.to_string(), req.api);
    (cluster.node.add_learner(req.id, member).await).map_err(cluster::node_error)?;
    Ok(json_response(serde_json::json!({ "learner": req.id })))
}

/// The body of `POST /v1/cluster/voters`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VotersRequest {
    voters: std::collections::BTreeSet<u64>,
    #[serde(default)]
    retain: bool,
}

/// `POST /v1/cluster/voters`: makes these nodes the voters (promoting learners, removing the
/// voters left out, or keeping them as learners with `retain`).
async fn change_voters(
    State(state): State<Shared>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let cluster = cluster_for_admin(&state, &caller)?;
    let req: VotersRequest = json_body(&body)?;
    if req.voters.is_empty() {
        return Err(ApiError::bad_request("a cluster needs at least one voter"));
    }
    (cluster
        .node
        .change_voters(req.voters.clone(), req.retain)
        .await)
        .map_err(cluster::node_error)?;
    Ok(json_response(serde_json::json!({ "voters": req.voters })))
}

/// The body of `POST /v1/cluster/faults`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultsRequest {
    /// The peers to be cut from, exactly (empty: every link healed); absent: unchanged.
    #[serde(default)]
    blocked: Option<std::collections::BTreeSet<u64>>,
    /// Whether the disk is full; absent: unchanged.
    #[serde(default)]
    disk_full: Option<bool>,
    /// The delay before each fsync, ms; absent: unchanged.
    #[serde(default)]
    disk_delay_ms: Option<u64>,
}

/// `POST /v1/cluster/faults`: cuts this node's links with exactly the peers `blocked` names
/// (an empty list heals them), fills its disk or frees it (`disk_full`), slows its fsyncs
/// (`disk_delay_ms`), when `[cluster] fault_injection` allows it (404 otherwise). Answers the
/// faults now in force.
async fn set_faults(
    State(state): State<Shared>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let cluster = cluster_for_admin(&state, &caller)?;
    let faults = (cluster.faults.as_ref())
        .ok_or_else(|| ApiError::not_found("fault injection is off ([cluster] fault_injection)"))?;
    let disk = (cluster.disk.as_ref())
        .ok_or_else(|| ApiError::not_found("fault injection is off ([cluster] fault_injection)"))?;
    let req: FaultsRequest = json_body(&body)?;
    if let Some(blocked) = req.blocked {
        tracing::warn!(?blocked, "fault injection: links cut");
        faults.set_blocked(blocked);
    }
    if let Some(full) = req.disk_full {
        tracing::warn!(full, "fault injection: disk full");
        disk.set_full(full);
    }
    if let Some(ms) = req.disk_delay_ms {
        tracing::warn!(ms, "fault injection: fsync delay");
        disk.set_delay(std::time::Duration::from_millis(ms));
    }
    Ok(json_response(serde_json::json!({
        "blocked": faults.blocked(),
        "disk_full": disk.is_full(),
        "disk_delay_ms": disk.delay().as_millis() as u64,
    })))
}

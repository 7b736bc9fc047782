//! The client API of a router (`docs/server.md`, "Router"): `put`, `transact` and `get` of a
//! ledger split over shards, in the same request formats as a server's, and the table's
//! global root.
//!
//! Owns: the router's routes and handlers. May call: `router` (the coordinator and the
//! shards), `service` (the caller's rights, limits, the JSON helpers), `codec`, `error`,
//! `wire`, `cairn_raft`. Must never touch: a ledger (a router has none).
//!
//! - **Writes** (`put`, `transact`) go through the coordinator: one Raft write on the one
//!   shard a write touches, two-phase commit across shards otherwise. The answer names each
//!   shard's version in `shards` (`version` is 0). Receipts (`prove`) are not given through a
//!   router: a write asking for them is a 400 (read it back with `lift`).
//! - **Reads** (`get`) split the keys by shard and read each shard's part linearizably from its
//!   leader, at once; the answer merges the values in the order asked and carries each shard's
//!   own answer (its version, digest and receipt) in `shards`. A key held by a transaction
//!   across shards is read once it is decided (the router waits, within its retry bound).
//!   Linearizable per key; not a snapshot across shards. With `lift`, each table's keys are
//!   also proved by one proof against the table's global root, lifted from the shards'
//!   receipts (`ShardRouter::lift`); an ordered table, which has no global root, is a 400.
//! - **One shard's ledger**, `/v1/ledgers/{ledger}/shards/{s}/` + `digest`, `consistency`,
//!   `get`, `put`, `transact`: passed through to shard `s`'s leader as they are (a write with
//!   `prove` answered with that shard's receipts), once every key named is checked to belong to
//!   shard `s`: what a verifying client uses to follow each shard's digest and to make
//!   single-shard transactions with receipts (`cairn-client` with the ledger named
//!   `bank/shards/0`).
//! - **`GET /v1/ledgers/{ledger}/root?table=T`**: the table's global root over the shards'
//!   roots, bit for bit the root one unsharded table holding the same data would have, with
//!   the shard versions it was built from.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::auth::Right;
use crate::codec::{Format, Reply, Wire};
use crate::error::ApiError;
use crate::router::ShardRouter;
use crate::service::{self, json_response, AppState, Caller, Shared};
use crate::wire;
use cairn_raft::{Command, Outcome};

/// The router's routes (the health, readiness and metrics endpoints are the server's).
pub(crate) fn routes() -> Router<Shared> {
    let ledger_routes = Router::new()
        .route("/get", post(get_values))
        .route("/put", post(put))
        .route("/transact", post(transact))
        .route("/root", get(root))
        .route("/shards/{shard}/digest", get(shard_digest))
        .route("/shards/{shard}/consistency", get(shard_consistency))
        .route("/shards/{shard}/get", post(shard_get))
        .route("/shards/{shard}/put", post(shard_put))
        .route("/shards/{shard}/transact", post(shard_transact));
    Router::new().nest("/v1/ledgers/{ledger}", ledger_routes)
}

/// The router, once the caller may use `right` on every table of `tables` of ledger `name`
/// and the request's keys are within the limit.
fn admit<'a, 't>(
    state: &'a AppState,
    caller: &Caller,
    name: &str,
    keys: usize,
    tables: impl IntoIterator<Item = &'t str>,
    right: Right,
    format: Format,
) -> Result<&'a ShardRouter, ApiError> {
    service::check_keys(&state.limits, keys, format)?;
    let router = (state.router.as_deref())
        .filter(|r| r.ledger == name && service::any_grant(&caller.0, name))
        .ok_or_else(|| ApiError::not_found(format!("no ledger {name:?}")).in_format(format))?;
    for t in tables {
        if !caller.0.allows(name, Some(t), right) {
            return Err(service::forbidden(right, name, Some(t)).in_format(format));
        }
    }
    Ok(router)
}

fn no_receipts(format: Format) -> ApiError {
    ApiError::bad_request(
        "a router gives no receipts for writes: write without prove, and read the keys back \
         with get and lift (each shard's receipt, and one proof against the global root)",
    )
    .in_format(format)
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
    let router = admit(&state, &caller, &name, keys, tables, Right::Write, answer)?;
    if req.prove {
        return Err(no_receipts(answer));
    }
    let command = service::replicated(&[], &req.tables, &req.meta, false);
    write(router, command, answer).await
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
    let read = req.expects.iter().map(|t| t.table.as_str());
    admit(&state, &caller, &name, keys, read, Right::Read, answer)?;
    let tables = req.tables.iter().map(|t| t.table.as_str());
    let router = admit(&state, &caller, &name, keys, tables, Right::Write, answer)?;
    if req.prove {
        return Err(no_receipts(answer));
    }
    let command = service::replicated(&req.expects, &req.tables, &req.meta, false);
    write(router, command, answer).await
}

/// Writes `command`'s expectations and writes through the coordinator and answers as a write.
async fn write(
    router: &ShardRouter,
    command: Command,
    format: Format,
) -> Result<Reply<wire::CommitResponse>, ApiError> {
    let Command::Write {
        expects,
        writes,
        meta,
        ..
    } = command
    else {
        return Err(ApiError::internal().in_format(format));
    };
    let named: Vec<(String, Vec<u8>)> = (expects.iter())
        .map(|e| (e.table.clone(), e.key.clone()))
        .collect();
    let started = std::time::Instant::now();
    let outcome = router.coordinator.transact(expects, writes, meta).await;
    metrics::histogram!("cairn_router_write_seconds").record(started.elapsed().as_secs_f64());
    let error =
        |status, code, message: String| Err(ApiError::new(status, code, message).in_format(format));
    match outcome {
        Ok(Outcome::Committed { versions, tx }) => {
            if tx.is_some() {
                metrics::counter!("cairn_router_cross_shard_commits").increment(1);
            }
            let shards = (versions.into_iter())
                .map(|(shard, version)| wire::ShardVersion { shard, version })
                .collect();
            Ok(Reply(
                wire::CommitResponse {
                    shards,
                    ..Default::default()
                },
                format,
            ))
        }
        Ok(Outcome::Unchanged) => Ok(Reply(wire::CommitResponse::default(), format)),
        Ok(Outcome::Conflict { index }) => {
            let (table, key) = named.get(index).cloned().unwrap_or_default();
            error(
                StatusCode::CONFLICT,
                "expectation_failed",
                format!(
                    "key {} of table {table:?} no longer holds the value read; nothing was written",
                    hex::encode(key)
                ),
            )
        }
        Ok(Outcome::Locked { tx }) => error(
            StatusCode::CONFLICT,
            "locked",
            format!(
                "a key is held by transaction {tx:?}, prepared across shards and not decided \
                 yet; nothing was written: retry"
            ),
        ),
        Ok(Outcome::Refused { reason }) => Err(ApiError::bad_request(reason).in_format(format)),
        Ok(Outcome::Aborted { reason }) => {
            metrics::counter!("cairn_router_aborts").increment(1);
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "aborted",
                format!("the transaction across shards was aborted, nothing was written ({reason}): retry"),
            )
        }
        Err(cairn_raft::Error::Unknown(detail)) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "outcome_unknown",
            format!("the write's outcome is unknown: read before retrying ({detail})"),
        ),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the shards cannot serve this now: {e}"),
        ),
    }
}

async fn get_values(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    Wire {
        message: req,
        answer,
    }: Wire<wire::GetRequest>,
) -> Result<Reply<wire::ReadResponse>, ApiError> {
    let keys = req.tables.iter().map(|t| t.keys.len()).sum();
    let tables = req.tables.iter().map(|t| t.table.as_str());
    let router = admit(&state, &caller, &name, keys, tables, Right::Read, answer)?;
    if req.promise || req.version != 0 {
        return Err(ApiError::bad_request(
            "a router reads the newest version with receipts: leave promise and version out",
        )
        .in_format(answer));
    }
    // Each shard's part: per table of the request, its keys on that shard.
    let map = *router.map();
    let mut parts: BTreeMap<u32, wire::GetRequest> = BTreeMap::new();
    for t in &req.tables {
        for key in &t.keys {
            let part = parts.entry(map.shard_of(key)).or_default();
            match part.tables.iter_mut().find(|p| p.table == t.table) {
                Some(p) => p.keys.push(key.clone()),
                None => part.tables.push(wire::TableKeys {
                    table: t.table.clone(),
                    keys: vec![key.clone()],
                }),
            }
        }
    }
    let reads = parts
        .iter()
        .map(|(shard, part)| read_part(router, &name, *shard, part, answer));
    let answers = futures_util::future::join_all(reads).await;
    let mut shards = Vec::with_capacity(answers.len());
    for ((shard, _), read) in parts.iter().zip(answers) {
        shards.push(wire::ShardRead {
            shard: *shard,
            read: Some(read?),
        });
    }
    // The values in the order asked: each key's from its shard's answer, in the order the
    // part asked them.
    let mut next: BTreeMap<(u32, &str), usize> = BTreeMap::new();
    let mut tables = Vec::with_capacity(req.tables.len());
    for t in &req.tables {
        let mut values = Vec::with_capacity(t.keys.len());
        for key in &t.keys {
            let shard = map.shard_of(key);
            let i = next.entry((shard, t.table.as_str())).or_default();
            let value = (shards.iter().find(|s| s.shard == shard))
                .and_then(|s| s.read.as_ref())
                .and_then(|r| r.tables.iter().find(|v| v.table == t.table))
                .and_then(|v| v.values.get(*i))
                .cloned()
                .ok_or_else(|| ApiError::internal().in_format(answer))?;
            *i += 1;
            values.push(value);
        }
        tables.push(wire::TableValues {
            table: t.table.clone(),
            values,
            proven: Vec::new(),
        });
    }
    let global = if req.lift {
        lift_all(router, &req, &shards, answer).await?
    } else {
        Vec::new()
    };
    Ok(Reply(
        wire::ReadResponse {
            tables,
            shards,
            global,
            ..Default::default()
        },
        answer,
    ))
}

/// Per table of `req`, in its order: the keys' proof against the table's global root, lifted
/// from the proofs in the receipts of the shards' answers `shards` (`docs/server.md`, "Lifted
/// proofs").
async fn lift_all(
    router: &ShardRouter,
    req: &wire::GetRequest,
    shards: &[wire::ShardRead],
    format: Format,
) -> Result<Vec<wire::GlobalProof>, ApiError> {
    let internal = |shard: u32, what: String| {
        tracing::error!(shard, what, "a shard's receipt cannot be lifted");
        ApiError::internal().in_format(format)
    };
    // An ordered table's shards each keep their own chain of links, its head included (under
    // the empty key, on every shard): no one trie holds them all.
    let ordered = (shards.iter().filter_map(|s| s.read.as_ref()))
        .flat_map(|r| &r.tables)
        .find(|t| !t.proven.is_empty());
    if let Some(t) = ordered {
        return Err(ApiError::bad_request(format!(
            "table {:?} is ordered: each shard keeps its own chain of links, so it has no \
             global root to lift proofs to; read it without lift",
            t.table
        ))
        .in_format(format));
    }
    let mut receipts = Vec::with_capacity(shards.len());
    for s in shards {
        let bytes = s.read.as_ref().map_or(&[][..], |r| &r.receipt[..]);
        let receipt =
            cairn_proof::Receipt::decode(bytes).map_err(|e| internal(s.shard, e.to_string()))?;
        let version = s.read.as_ref().map_or(0, |r| r.version);
        receipts.push((s.shard, version, receipt));
    }
    let lifts = req.tables.iter().map(|t| {
        let proved: Vec<_> = (receipts.iter())
            .filter_map(|(shard, version, receipt)| {
                let section = receipt.tables.iter().find(|s| s.name == t.table)?;
                Some((*shard, *version, section.root, &section.proof))
            })
            .collect();
        async move { router.lift(&t.table, &proved).await }
    });
    let mut global = Vec::with_capacity(req.tables.len());
    for (t, lifted) in req
        .tables
        .iter()
        .zip(futures_util::future::join_all(lifts).await)
    {
        let (root, versions, proof) = lifted.map_err(|e| read_error(e).in_format(format))?;
        global.push(wire::GlobalProof {
            table: t.table.clone(),
            root: root.hash.to_vec(),
            versions,
            proof: proof.encode(),
        });
    }
    Ok(global)
}

/// Shard `shard`'s answer to `part` (keys of its own), read linearizably from its leader,
/// again while a key is held by a transaction (until [`crate::router::RETRY_FOR`]); its
/// error, passed on as it answered it (say 404 `no_such_version` for a shard that has no
/// version yet), otherwise.
async fn read_part(
    router: &ShardRouter,
    ledger: &str,
    shard: u32,
    part: &wire::GetRequest,
    format: Format,
) -> Result<wire::ReadResponse, ApiError> {
    let path = format!("/v1/ledgers/{ledger}/get");
    let body = json_of(part, format)?;
    let deadline = std::time::Instant::now() + crate::router::RETRY_FOR;
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        let sent = router
            .shards()
            .forward(shard, axum::http::Method::POST, &path, Some(body.clone()))
            .await;
        let (status, bytes) = sent.map_err(|e| read_error(e).in_format(format))?;
        let locked = status == StatusCode::CONFLICT
            && serde_json::from_slice::<serde_json::Value>(&bytes)
                .is_ok_and(|v| v["code"] == "locked");
        if locked && std::time::Instant::now() < deadline {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(200));
            continue;
        }
        if status != StatusCode::OK {
            return Err(passed_error(shard, status, &bytes, format));
        }
        return serde_json::from_slice(&bytes).map_err(|e| {
            tracing::error!(shard, error = %e, "a shard's answer does not decode");
            ApiError::internal().in_format(format)
        });
    }
}

fn read_error(e: cairn_raft::Error) -> ApiError {
    match e {
        cairn_raft::Error::Locked { tx } => ApiError::new(
            StatusCode::CONFLICT,
            "locked",
            format!("a key is held by {tx}, not decided yet: retry"),
        ),
        other => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the shards cannot serve this now: {other}"),
        ),
    }
}

/// `GET /v1/ledgers/{ledger}/root?table=T`: `{"table", "root": hex, "versions": [...]}`.
async fn root(
    State(state): State<Shared>,
    Path(name): Path<String>,
    caller: Caller,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let format = Format::of_answer(&headers);
    let table = (uri.query().unwrap_or("").split('&'))
        .find_map(|p| p.strip_prefix("table="))
        .map(str::to_string)
        .ok_or_else(|| ApiError::bad_request("the query names table=T").in_format(format))?;
    let router = admit(
        &state,
        &caller,
        &name,
        0,
        [table.as_str()],
        Right::Read,
        format,
    )?;
    if !router.tables.contains(&table) {
        return Err(ApiError::not_found(format!("no table {table:?}")).in_format(format));
    }
    let (root, versions) =
        (router.global_root(&table).await).map_err(|e| read_error(e).in_format(format))?;
    Ok(json_response(serde_json::json!({
        "table": table,
        "root": hex::encode(root.hash),
        "versions": versions,
    })))
}

// ---------------------------------------------------------------------------------------------
// One shard's ledger, passed through

/// The router for a per-shard request, once the caller may use `right` on every table of
/// the ledger (the body is passed through, so every table it could name is checked) and
/// `shard` exists.
fn admit_shard<'a>(
    state: &'a AppState,
    caller: &Caller,
    name: &str,
    shard: u32,
    keys: usize,
    right: Right,
    format: Format,
) -> Result<&'a ShardRouter, ApiError> {
    let tables = (state.router.as_deref()).map_or_else(Vec::new, |r| r.tables.clone());
    let router = admit(
        state,
        caller,
        name,
        keys,
        tables.iter().map(String::as_str),
        right,
        format,
    )?;
    if shard >= router.map().shards() {
        return Err(ApiError::not_found(format!("no shard {shard}")).in_format(format));
    }
    Ok(router)
}

/// 400 unless every key of `keys` belongs to shard `shard`.
fn on_shard<'k>(
    router: &ShardRouter,
    shard: u32,
    keys: impl IntoIterator<Item = &'k Vec<u8>>,
    format: Format,
) -> Result<(), ApiError> {
    for key in keys {
        let owner = router.map().shard_of(key);
        if owner != shard {
            return Err(ApiError::bad_request(format!(
                "key {} belongs to shard {owner}, not {shard}",
                hex::encode(key)
            ))
            .in_format(format));
        }
    }
    Ok(())
}

/// The stable codes a shard's error may carry, as the router passes them on.
const CODES: &[&str] = &[
    "bad_request",
    "not_found",
    "forbidden",
    "unauthorized",
    "expectation_failed",
    "conflict",
    "locked",
    "too_many_keys",
    "payload_too_large",
    "outcome_unknown",
    "unavailable",
    "no_such_version",
    "version_pruned",
    "receipts_failed",
    "not_leader",
];

/// Sends `body` to `path` on shard `shard` and answers its 200 as a `T` in `format`, or its
/// error as the same error.
async fn forward<T: serde::de::DeserializeOwned + prost::Message + serde::Serialize>(
    router: &ShardRouter,
    shard: u32,
    method: axum::http::Method,
    path: &str,
    body: Option<Vec<u8>>,
    format: Format,
) -> Result<Reply<T>, ApiError> {
    let (status, bytes) = (router.shards().forward(shard, method, path, body).await)
        .map_err(|e| read_error(e).in_format(format))?;
    if status == StatusCode::OK {
        let message = serde_json::from_slice(&bytes).map_err(|e| {
            tracing::error!(shard, error = %e, "a shard's answer does not decode");
            ApiError::internal().in_format(format)
        })?;
        return Ok(Reply(message, format));
    }
    Err(passed_error(shard, status, &bytes, format))
}

/// Shard `shard`'s error answer (`status`, its body `bytes`) as the router passes it on.
fn passed_error(shard: u32, status: StatusCode, bytes: &[u8], format: Format) -> ApiError {
    let v: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
    let code = (v["code"].as_str())
        .and_then(|c| CODES.iter().find(|k| **k == c).copied())
        .unwrap_or("shard_error");
    let message = v["message"].as_str().unwrap_or("").to_string();
    ApiError::new(status, code, format!("shard {shard}: {message}")).in_format(format)
}

fn json_of<T: serde::Serialize>(message: &T, format: Format) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(message).map_err(|_| ApiError::internal().in_format(format))
}

async fn shard_digest(
    State(state): State<Shared>,
    Path((name, shard)): Path<(String, u32)>,
    caller: Caller,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Reply<wire::Digest>, ApiError> {
    let format = Format::of_answer(&headers);
    let router = admit_shard(&state, &caller, &name, shard, 0, Right::Read, format)?;
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let path = format!("/v1/ledgers/{name}/digest{query}");
    forward(router, shard, axum::http::Method::GET, &path, None, format).await
}

async fn shard_consistency(
    State(state): State<Shared>,
    Path((name, shard)): Path<(String, u32)>,
    caller: Caller,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Reply<wire::ConsistencyResponse>, ApiError> {
    let format = Format::of_answer(&headers);
    let router = admit_shard(&state, &caller, &name, shard, 0, Right::Read, format)?;
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let path = format!("/v1/ledgers/{name}/consistency{query}");
    forward(router, shard, axum::http::Method::GET, &path, None, format).await
}

async fn shard_get(
    State(state): State<Shared>,
    Path((name, shard)): Path<(String, u32)>,
    caller: Caller,
    Wire {
        message: req,
        answer,
    }: Wire<wire::GetRequest>,
) -> Result<Reply<wire::ReadResponse>, ApiError> {
    let keys = req.tables.iter().map(|t| t.keys.len()).sum();
    let router = admit_shard(&state, &caller, &name, shard, keys, Right::Read, answer)?;
    on_shard(
        router,
        shard,
        req.tables.iter().flat_map(|t| &t.keys),
        answer,
    )?;
    let path = format!("/v1/ledgers/{name}/get");
    let body = json_of(&req, answer)?;
    forward(
        router,
        shard,
        axum::http::Method::POST,
        &path,
        Some(body),
        answer,
    )
    .await
}

async fn shard_put(
    State(state): State<Shared>,
    Path((name, shard)): Path<(String, u32)>,
    caller: Caller,
    Wire {
        message: req,
        answer,
    }: Wire<wire::PutRequest>,
) -> Result<Reply<wire::CommitResponse>, ApiError> {
    let keys = req.tables.iter().map(|t| t.writes.len()).sum();
    let router = admit_shard(&state, &caller, &name, shard, keys, Right::Write, answer)?;
    let written = req
        .tables
        .iter()
        .flat_map(|t| t.writes.iter().map(|w| &w.key));
    on_shard(router, shard, written, answer)?;
    let path = format!("/v1/ledgers/{name}/put");
    let body = json_of(&req, answer)?;
    forward(
        router,
        shard,
        axum::http::Method::POST,
        &path,
        Some(body),
        answer,
    )
    .await
}

async fn shard_transact(
    State(state): State<Shared>,
    Path((name, shard)): Path<(String, u32)>,
    caller: Caller,
    Wire {
        message: req,
        answer,
    }: Wire<wire::TransactRequest>,
) -> Result<Reply<wire::CommitResponse>, ApiError> {
    let keys = req.tables.iter().map(|t| t.writes.len()).sum::<usize>()
        + req.expects.iter().map(|t| t.expects.len()).sum::<usize>();
    let router = admit_shard(&state, &caller, &name, shard, keys, Right::Read, answer)?;
    admit_shard(&state, &caller, &name, shard, keys, Right::Write, answer)?;
    let written = req
        .tables
        .iter()
        .flat_map(|t| t.writes.iter().map(|w| &w.key));
    let read = req
        .expects
        .iter()
        .flat_map(|t| t.expects.iter().map(|e| &e.key));
    on_shard(router, shard, written.chain(read), answer)?;
    let path = format!("/v1/ledgers/{name}/transact");
    let body = json_of(&req, answer)?;
    forward(
        router,
        shard,
        axum::http::Method::POST,
        &path,
        Some(body),
        answer,
    )
    .await
}

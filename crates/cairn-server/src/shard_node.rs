//! What a router asks of a shard's node (`docs/server.md`, "Shards"): the steps of
//! transactions across shards as Raft commands, the transactions left prepared, and the
//! witness of a table's top levels from which the router builds the global root.
//!
//! Owns: the handlers of `POST /v1/cluster/command`, `GET /v1/cluster/prepared` and
//! `GET /v1/cluster/witness`. May call: `service` (its state, the caller's rights, JSON
//! bodies), `cluster`, `error`, `cairn_raft`, `cairn_ledger`. Must never touch: the routes of
//! the client API.
//!
//! All three need the admin right (the router's token): a command skips the client API's
//! per-table grants. Each answers 421 `not_leader` on a node that does not lead (with the
//! leader in the `cairn-leader` header), like a write.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use cairn_raft::{twopc, Command, Consistency};

use crate::cluster;
use crate::error::ApiError;
use crate::service::{cluster_for_admin, json_body, json_response, Caller, Shared};

/// `POST /v1/cluster/command`: proposes a Raft command (JSON, as the log stores it:
/// `docs/format/raft.md`) and answers what applying it did (JSON of `cairn_raft::Response`).
/// Bound: one Raft commit, within the request timeout.
pub(crate) async fn command(
    State(state): State<Shared>,
    caller: Caller,
    body: Bytes,
) -> Result<Response, ApiError> {
    let cluster = cluster_for_admin(&state, &caller)?;
    let command: Command = json_body(&body)?;
    let response = (cluster.node.write(command).await).map_err(cluster::node_error)?;
    let value = serde_json::to_value(&response).map_err(|_| ApiError::internal())?;
    Ok(json_response(value))
}

/// `GET /v1/cluster/prepared`: the transactions prepared on this shard and not decided, read
/// linearizably: `[{"tx": id, "record": PreparedTx}, ...]`. Bound: one read index, then one
/// lookup per transaction listed.
pub(crate) async fn prepared(
    State(state): State<Shared>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let cluster = cluster_for_admin(&state, &caller)?;
    cluster.read_barrier(Consistency::Linearizable).await?;
    let ledger = cluster.node.ledger();
    let found = tokio::task::spawn_blocking(move || {
        let mut found = Vec::new();
        for tx in twopc::prepared(&ledger)? {
            if let Some(record) = twopc::prepared_record(&ledger, &tx)? {
                found.push(serde_json::json!({ "tx": tx, "record": record }));
            }
        }
        Ok::<_, std::io::Error>(found)
    })
    .await
    .map_err(|_| ApiError::internal())?
    .map_err(|e| {
        tracing::error!(error = %e, "reading the prepared transactions");
        ApiError::internal()
    })?;
    Ok(json_response(serde_json::Value::Array(found)))
}

/// The table and levels the query of `GET /v1/cluster/witness` names (table names are plain:
/// letters, digits, `_`, `-`, so no percent-decoding).
fn witness_query(uri: &Uri) -> Result<(String, u8), ApiError> {
    let (mut table, mut levels) = (None, None);
    for pair in uri.query().unwrap_or("").split('&') {
        if let Some(t) = pair.strip_prefix("table=") {
            table = Some(t.to_string());
        } else if let Some(l) = pair.strip_prefix("levels=") {
            levels = l.parse::<u8>().ok();
        }
    }
    match (table, levels) {
        (Some(t), Some(l)) => Ok((t, l)),
        _ => Err(ApiError::bad_request(
            "the query names table=T and levels=K (1 to 16)",
        )),
    }
}

/// `GET /v1/cluster/witness?table=T&levels=K`: table `T`'s root and its trie's top `K`
/// levels at the newest version, after the read barrier (`consistency=stale` allowed):
/// `{"version": n, "root": hex, "top": hex of the proof's bytes}`. Bound: one read index and
/// at most `2^(K+1)` trie nodes.
pub(crate) async fn witness(
    State(state): State<Shared>,
    caller: Caller,
    uri: Uri,
) -> Result<Response, ApiError> {
    let cluster = cluster_for_admin(&state, &caller)?;
    let (table, levels) = witness_query(&uri)?;
    cluster.read_barrier(cluster::consistency_of(&uri)?).await?;
    let ledger = cluster.node.ledger();
    let w = tokio::task::spawn_blocking(move || ledger.table_witness(&table, levels))
        .await
        .map_err(|_| ApiError::internal())??;
    Ok(json_response(serde_json::json!({
        "version": w.version,
        "root": hex::encode(w.root.hash),
        "top": hex::encode(w.top.encode()),
    })))
}

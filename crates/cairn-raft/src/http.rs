//! The transport between nodes over HTTP/1.1: each Raft RPC is a `POST` of its request as JSON
//! to the target's peer listener, answered with openraft's result as JSON; every request
//! carries the cluster's shared secret, and the listener refuses one without it.
//!
//! Owns: [`ClusterSecret`], [`peer_router`] (the receiving side, an axum router),
//! [`HttpNetwork`] and [`HttpConnection`] (the sending side, openraft's network traits over a
//! `reqwest` client). May call: openraft, axum, reqwest. Must never touch: the ledger.
//!
//! Endpoints (`docs/cluster.md`): `POST /raft/v1/append` (an `AppendEntriesRequest`) and
//! `POST /raft/v1/vote` (a `VoteRequest`), each answered `200` with `{"Ok": response}` or
//! `{"Err": raft error}`; `401` without the secret (`authorization: Bearer <secret>`), `413`
//! above [`PEER_BODY_BYTES_MAX`], `400` for a body that does not decode. Snapshots are not
//! sent yet (issue 48).
//!
//! Security: peers authenticate with the secret (compared in constant time); the links are
//! plain HTTP, so a cluster runs on loopback or a private network until peer TLS is built (a
//! documented gap). A peer RPC lasts at most openraft's time limit for it (`RPCOption`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::error::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::vote::RaftLeaderId;
use openraft::OptionalSend;
use serde::de::DeserializeOwned;
use serde::Serialize;
use subtle::ConstantTimeEq;

use crate::faults::Faults;
use crate::machine::SnapshotData;
use crate::{LedgerRaft, NodeId, TypeConfig};

/// The largest request body a peer listener accepts: 64 MiB (openraft sends entries in batches
/// far below this).
pub const PEER_BODY_BYTES_MAX: usize = 64 << 20;

/// The secret every node of a cluster shares (at least 16 bytes): what a peer listener asks of
/// each request.
#[derive(Clone)]
pub struct ClusterSecret(Arc<str>);

impl ClusterSecret {
    /// A secret from its text. Errors: shorter than 16 bytes, or holding characters a header
    /// cannot carry (only visible ASCII).
    pub fn new(text: &str) -> Result<ClusterSecret, String> {
        if text.len() < 16 {
            return Err("a cluster secret has at least 16 characters".into());
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a cluster secret is visible ASCII only".into());
        }
        Ok(ClusterSecret(text.into()))
    }

    fn matches(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else {
            return false;
        };
        given.ct_eq(self.0.as_bytes()).into()
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str("ClusterSecret(..)")
    }
}

struct PeerState {
    raft: LedgerRaft,
    secret: ClusterSecret,
    faults: Faults,
}

/// The receiving side: routes for the Raft RPCs addressed to `raft`, refusing requests without
/// `secret`. Serve it on the node's peer address (`axum::serve`).
pub fn peer_router(raft: LedgerRaft, secret: ClusterSecret) -> Router {
    peer_router_with_faults(raft, secret, Faults::new())
}

/// [`peer_router`], answering 503 to the peers `faults` blocks (for fault tests).
pub fn peer_router_with_faults(raft: LedgerRaft, secret: ClusterSecret, faults: Faults) -> Router {
    let state = Arc::new(PeerState {
        raft,
        secret,
        faults,
    });
    Router::new()
        .route("/raft/v1/append", post(append))
        .route("/raft/v1/vote", post(vote))
        .layer(DefaultBodyLimit::max(PEER_BODY_BYTES_MAX))
        .with_state(state)
}

fn decode_body<T: DeserializeOwned>(
    state: &PeerState,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, (StatusCode, String)> {
    if !state.secret.matches(headers) {
        return Err((
            StatusCode::UNAUTHORIZED,
            "a cluster secret is needed\n".into(),
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("the request does not decode: {e}\n"),
        )
    })
}

/// 503 for a message from a peer the node is cut from.
fn cut_from(state: &PeerState, sender: NodeId) -> Option<Response> {
    state.faults.blocks(sender).then(|| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "this node is cut from the sender (fault injection)\n",
        )
            .into_response()
    })
}

fn json<T: Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn append(State(state): State<Arc<PeerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let rpc: AppendEntriesRequest<TypeConfig> = match decode_body(&state, &headers, &body) {
        Ok(rpc) => rpc,
        Err(refusal) => return refusal.into_response(),
    };
    if let Some(cut) = cut_from(&state, *rpc.vote.leader_id().node_id()) {
        return cut;
    }
    json(&state.raft.append_entries(rpc).await)
}

async fn vote(State(state): State<Arc<PeerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let rpc: VoteRequest<TypeConfig> = match decode_body(&state, &headers, &body) {
        Ok(rpc) => rpc,
        Err(refusal) => return refusal.into_response(),
    };
    if let Some(cut) = cut_from(&state, *rpc.vote.leader_id().node_id()) {
        return cut;
    }
    json(&state.raft.vote(rpc).await)
}

/// The sending side: connections to the other nodes at the addresses their [`crate::Member`]s give
/// (`host:port` of their peer listeners).
#[derive(Clone)]
pub struct HttpNetwork {
    client: reqwest::Client,
    secret: ClusterSecret,
    faults: Faults,
}

impl HttpNetwork {
    /// Connections that present `secret`.
    ///
    /// Errors: the HTTP client cannot be built (no usable system resources).
    pub fn new(secret: ClusterSecret) -> Result<HttpNetwork, String> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(4)
            .tls_backend_preconfigured(unused_tls()?)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(HttpNetwork {
            client,
            secret,
            faults: Faults::new(),
        })
    }

    /// The same connections, failing every message to a peer `faults` blocks as unreachable
    /// (for fault tests).
    pub fn with_faults(mut self, faults: Faults) -> HttpNetwork {
        self.faults = faults;
        self
    }
}

/// A TLS configuration (rustls with the `ring` provider, no roots) that plain-HTTP peer links
/// never use: reqwest built with rustls wants one, and without it would look for a process-wide
/// provider.
fn unused_tls() -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth())
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = HttpConnection;

    async fn new_client(&mut self, target: NodeId, node: &crate::Member) -> HttpConnection {
        HttpConnection {
            target,
            base: format!("http://{}/raft/v1", node.addr),
            network: self.clone(),
        }
    }
}

/// One node's connection to another.
pub struct HttpConnection {
    target: NodeId,
    base: String,
    network: HttpNetwork,
}

impl HttpConnection {
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<TypeConfig>> {
        if self.network.faults.blocks(self.target) {
            let cut = format!("cut from node {} (fault injection)", self.target);
            return Err(Unreachable::from_string(cut).into());
        }
        let body = serde_json::to_vec(request).map_err(|e| NetworkError::new(&e))?;
        let reply = self
            .network
            .client
            .post(format!("{}/{path}", self.base))
            .bearer_auth(&*self.network.secret.0)
            .header(header::CONTENT_TYPE, "application/json")
            .timeout(option.hard_ttl())
            .body(body)
            .send()
            .await
            .map_err(|e| Unreachable::new(&e))?;
        let status = reply.status();
        let bytes = reply.bytes().await.map_err(|e| Unreachable::new(&e))?;
        // A peer that refuses (a secret it does not share, a body it cannot take) or answers
        // what does not decode will do so again: unreachable, so that openraft backs off
        // rather than retrying at once in a tight loop.
        if !status.is_success() {
            return Err(Unreachable::from_string(format!(
                "node {} answered {status}: {}",
                self.target,
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ))
            .into());
        }
        let result: Result<Resp, RaftError<TypeConfig>> =
            serde_json::from_slice(&bytes).map_err(|e| Unreachable::new(&e))?;
        // The only error a Raft RPC returns is the remote node's fatal one (it is stopping):
        // as unreachable as a node that is down.
        result.map_err(|e| Unreachable::new(&e).into())
    }
}

impl RaftNetworkV2<TypeConfig> for HttpConnection {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call("append", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call("vote", &rpc, &option).await
    }

    async fn full_snapshot(
        &mut self,
        _vote: VoteOf<TypeConfig>,
        _snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        _cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(StreamingError::Unreachable(Unreachable::from_string(
            "snapshots are not sent yet (issue 48)",
        )))
    }
}

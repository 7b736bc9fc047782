//! The transport between nodes over HTTP/1.1: each Raft RPC is a `POST` of its request as JSON
//! to the target's peer listener, answered with openraft's result as JSON; every request
//! carries the cluster's shared secret, and the listener refuses one without it.
//!
//! Owns: [`ClusterSecret`], [`peer_router`] (the receiving side, an axum router),
//! [`HttpNetwork`] and [`HttpConnection`] (the sending side, openraft's network traits over a
//! `reqwest` client). May call: openraft, axum, reqwest, `format` (votes), `snapshot` (snapshot
//! files). Must never touch: the ledger.
//!
//! Endpoints (`docs/server.md`, "Cluster"): `POST /raft/v1/append` (an `AppendEntriesRequest`)
//! and `POST /raft/v1/vote` (a `VoteRequest`), each answered `200` with `{"Ok": response}` or
//! `{"Err": raft error}`; `401` without the secret (`authorization: Bearer <secret>`), `413`
//! above [`PEER_BODY_BYTES_MAX`], `400` for a body that does not decode. `POST
//! /raft/v1/snapshot` carries a snapshot file as its body (streamed, up to
//! [`SNAPSHOT_BYTES_MAX`]) and the leader's vote, hex, in the `cairn-vote` header: the receiver
//! writes it to its snapshot directory, checks its framing and checksum
//! ([`SnapshotData::check`]; `400` if they fail, so that a snapshot damaged on the way never
//! reaches Raft), then hands it to Raft, which installs it by a proved import (`snapshot`);
//! `503` from a node that keeps no snapshots.
//!
//! Security: peers authenticate with the secret (compared in constant time). The links are
//! plain HTTP ([`HttpNetwork::new`], loopback only) or TLS ([`HttpNetwork::with_tls`], each
//! peer's certificate checked against the roots given and its address; the receiving side is
//! served over TLS by its caller, as `cairn-server` does). A peer RPC lasts at most openraft's time limit for it (`RPCOption`).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
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
use openraft::storage::Snapshot;
use openraft::vote::RaftLeaderId;
use openraft::OptionalSend;
use serde::de::DeserializeOwned;
use serde::Serialize;
use subtle::ConstantTimeEq;

use crate::faults::Faults;
use crate::format;
use crate::snapshot::SnapshotData;
use crate::{LedgerRaft, NodeId, TypeConfig};

/// The largest request body a peer listener accepts: 64 MiB (openraft sends entries in batches
/// far below this). Snapshots have their own bound, [`SNAPSHOT_BYTES_MAX`].
pub const PEER_BODY_BYTES_MAX: usize = 64 << 20;
/// The largest snapshot a peer listener receives: 1 TiB (a snapshot is a copy of the ledger's
/// stored entries, written to disk as it arrives, never held in memory).
pub const SNAPSHOT_BYTES_MAX: u64 = 1 << 40;
/// How long sending one snapshot may take before the leader gives up and tries again.
pub const SNAPSHOT_SEND_TIME_MAX: Duration = Duration::from_secs(600);
/// The header carrying the sender's vote with a snapshot (hex of its stored form).
const VOTE_HEADER: &str = "cairn-vote";
/// Bytes read from a snapshot file per piece sent.
const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

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
    /// Where received snapshots are written (`None`: refused).
    inbox: Option<PathBuf>,
}

/// The receiving side: routes for the Raft RPCs addressed to `raft`, refusing requests without
/// `secret`. Serve it on the node's peer address (`axum::serve`).
pub fn peer_router(raft: LedgerRaft, secret: ClusterSecret) -> Router {
    peer_router_with_faults(raft, secret, Faults::new())
}

/// [`peer_router`], answering 503 to the peers `faults` blocks (for fault tests).
pub fn peer_router_with_faults(raft: LedgerRaft, secret: ClusterSecret, faults: Faults) -> Router {
    peer_router_with(raft, secret, faults, None)
}

/// [`peer_router_with_faults`], receiving snapshots into `inbox` (the node's snapshot directory,
/// [`crate::LedgerHome::snapshots`]) when given.
pub fn peer_router_with(
    raft: LedgerRaft,
    secret: ClusterSecret,
    faults: Faults,
    inbox: Option<PathBuf>,
) -> Router {
    let state = Arc::new(PeerState {
        raft,
        secret,
        faults,
        inbox,
    });
    Router::new()
        .route("/raft/v1/append", post(append))
        .route("/raft/v1/vote", post(vote))
        .layer(DefaultBodyLimit::max(PEER_BODY_BYTES_MAX))
        .route(
            "/raft/v1/snapshot",
            post(snapshot).layer(DefaultBodyLimit::disable()),
        )
        .with_state(state)
}

fn authenticate(state: &PeerState, headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
    match state.secret.matches(headers) {
        true => Ok(()),
        false => Err((
            StatusCode::UNAUTHORIZED,
            "a cluster secret is needed\n".into(),
        )),
    }
}

fn decode_body<T: DeserializeOwned>(
    state: &PeerState,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, (StatusCode, String)> {
    authenticate(state, headers)?;
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

async fn snapshot(State(state): State<Arc<PeerState>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(refusal) = authenticate(&state, &headers) {
        return refusal.into_response();
    }
    let Some(inbox) = state.inbox.clone() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "this node keeps no snapshots\n",
        )
            .into_response();
    };
    let vote = headers
        .get(VOTE_HEADER)
        .and_then(|v| unhex(v.as_bytes()))
        .and_then(|bytes| format::decode_vote(&bytes).ok());
    let Some(vote) = vote else {
        let refusal = (
            StatusCode::BAD_REQUEST,
            "no vote (cairn-vote) that decodes\n",
        );
        return refusal.into_response();
    };
    if let Some(cut) = cut_from(&state, *vote.leader_id().node_id()) {
        return cut;
    }
    let path = crate::snapshot::incoming_path(&inbox);
    let received = receive(&path, body).await;
    let checked = match received {
        Ok(()) => {
            let p = path.clone();
            tokio::task::spawn_blocking(move || {
                let (meta, data) = SnapshotData::open(&p)?;
                data.check()?;
                Ok::<_, io::Error>((meta, data))
            })
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)))
        }
        Err(e) => Err(e),
    };
    let answer = match checked {
        Ok((meta, data)) => {
            let result = state
                .raft
                .install_full_snapshot(
                    vote,
                    Snapshot {
                        meta,
                        snapshot: data,
                    },
                )
                .await
                .map_err(RaftError::<TypeConfig>::Fatal);
            json(&result)
        }
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => {
            (StatusCode::PAYLOAD_TOO_LARGE, format!("{e}\n")).into_response()
        }
        Err(e) => (
            StatusCode::BAD_REQUEST,
            format!("the snapshot was refused: {e}\n"),
        )
            .into_response(),
    };
    // Installed, it was moved into place; otherwise it is not kept.
    let _ = tokio::fs::remove_file(&path).await;
    answer
}

/// Writes a snapshot's body to `path`, durably, within [`SNAPSHOT_BYTES_MAX`].
async fn receive(path: &std::path::Path, body: Body) -> io::Result<()> {
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    let mut file = tokio::fs::File::create(path).await?;
    let mut stream = body.into_data_stream();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(io::Error::other)?;
        total += chunk.len() as u64;
        if total > SNAPSHOT_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("a snapshot over {SNAPSHOT_BYTES_MAX} bytes"),
            ));
        }
        file.write_all(&chunk).await?;
    }
    file.sync_all().await
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    text.chunks(2)
        .map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8))
        .collect()
}

/// The sending side: connections to the other nodes at the addresses their [`crate::Member`]s give
/// (`host:port` of their peer listeners).
#[derive(Clone)]
pub struct HttpNetwork {
    client: reqwest::Client,
    secret: ClusterSecret,
    faults: Faults,
    /// `http` or `https`.
    scheme: &'static str,
}

impl HttpNetwork {
    /// Connections that present `secret`.
    ///
    /// Errors: the HTTP client cannot be built (no usable system resources).
    pub fn new(secret: ClusterSecret) -> Result<HttpNetwork, String> {
        Ok(HttpNetwork {
            client: peer_client(unused_tls()?, false)?,
            secret,
            faults: Faults::new(),
            scheme: "http",
        })
    }

    /// Connections over TLS that present `secret` and trust only the certificates in
    /// `roots_pem` (PEM, one or more: the CA that signed every node's certificate, or every
    /// node's own), each peer's certificate checked against its address in its
    /// [`crate::Member`] (an IP address or a DNS name in the certificate's names).
    ///
    /// Errors: `roots_pem` holds no certificate or one that does not parse; the HTTP client
    /// cannot be built.
    pub fn with_tls(secret: ClusterSecret, roots_pem: &[u8]) -> Result<HttpNetwork, String> {
        let tls = client_tls(roots_from_pem(roots_pem)?)?;
        Ok(HttpNetwork {
            client: peer_client(tls, true)?,
            secret,
            faults: Faults::new(),
            scheme: "https",
        })
    }

    /// The same connections, failing every message to a peer `faults` blocks as unreachable
    /// (for fault tests).
    pub fn with_faults(mut self, faults: Faults) -> HttpNetwork {
        self.faults = faults;
        self
    }
}

/// The certificates in `pem` (one or more) as trust roots. Errors: none there, or one that
/// does not parse.
pub fn roots_from_pem(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| format!("a certificate: {e}"))?;
        roots.add(cert).map_err(|e| format!("a certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("no certificate".into());
    }
    Ok(roots)
}

/// The HTTP client of peer links, with `tls` (`https_only` for TLS links).
fn peer_client(tls: rustls::ClientConfig, https_only: bool) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(4)
        .tls_backend_preconfigured(tls)
        .https_only(https_only)
        .build()
        .map_err(|e| e.to_string())
}

/// A TLS configuration (rustls with the `ring` provider, no roots) that plain-HTTP peer links
/// never use: reqwest built with rustls wants one, and without it would look for a process-wide
/// provider.
fn unused_tls() -> Result<rustls::ClientConfig, String> {
    client_tls(rustls::RootCertStore::empty())
}

/// A client TLS configuration (rustls with the `ring` provider, its safe default protocol
/// versions, no client certificate) trusting only `roots`. Errors: the provider refusing its
/// defaults (never in practice).
pub fn client_tls(roots: rustls::RootCertStore) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = HttpConnection;

    async fn new_client(&mut self, target: NodeId, node: &crate::Member) -> HttpConnection {
        HttpConnection {
            target,
            base: format!("{}://{}/raft/v1", self.scheme, node.addr),
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
    fn cut(&self) -> Option<Unreachable<TypeConfig>> {
        self.network.faults.blocks(self.target).then(|| {
            Unreachable::from_string(format!("cut from node {} (fault injection)", self.target))
        })
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        path: &str,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<TypeConfig>> {
        if let Some(cut) = self.cut() {
            return Err(cut.into());
        }
        let body = serde_json::to_vec(request).map_err(|e| NetworkError::new(&e))?;
        let request = self
            .network
            .client
            .post(format!("{}/{path}", self.base))
            .bearer_auth(&*self.network.secret.0)
            .header(header::CONTENT_TYPE, "application/json")
            .timeout(option.hard_ttl())
            .body(body);
        Ok(self.exchange(request).await?)
    }

    /// Sends `request` and decodes its answer, `{"Ok": ...}` or `{"Err": raft error}`.
    async fn exchange<Resp: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Resp, Unreachable<TypeConfig>> {
        let reply = request.send().await.map_err(|e| Unreachable::new(&e))?;
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
            )));
        }
        let result: Result<Resp, RaftError<TypeConfig>> =
            serde_json::from_slice(&bytes).map_err(|e| Unreachable::new(&e))?;
        // The only error a Raft RPC returns is the remote node's fatal one (it is stopping):
        // as unreachable as a node that is down.
        result.map_err(|e| Unreachable::new(&e))
    }
}

/// A snapshot file as a stream of pieces, each read on a blocking thread.
fn file_stream(
    data: SnapshotData,
) -> impl futures_util::Stream<Item = io::Result<Vec<u8>>> + Send + 'static {
    futures_util::stream::try_unfold(0u64, move |at| {
        let data = data.clone();
        async move {
            if at >= data.len() {
                return Ok(None);
            }
            let piece = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; SNAPSHOT_CHUNK_BYTES];
                let n = data.read_chunk(at, &mut buf)?;
                buf.truncate(n);
                Ok::<_, io::Error>(buf)
            })
            .await
            .map_err(io::Error::other)??;
            if piece.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the snapshot file is shorter than it was",
                ));
            }
            let next = at + piece.len() as u64;
            Ok(Some((piece, next)))
        }
    })
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
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, SnapshotData>,
        cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        if let Some(cut) = self.cut() {
            return Err(cut.into());
        }
        let data = snapshot.snapshot;
        let request = self
            .network
            .client
            .post(format!("{}/snapshot", self.base))
            .bearer_auth(&*self.network.secret.0)
            .header(VOTE_HEADER, hex(&format::encode_vote(&vote)))
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(header::CONTENT_LENGTH, data.len())
            .timeout(SNAPSHOT_SEND_TIME_MAX)
            .body(reqwest::Body::wrap_stream(file_stream(data)));
        tokio::select! {
            reply = self.exchange(request) => Ok(reply?),
            closed = cancel => Err(StreamingError::Closed(closed)),
        }
    }
}

//! A lying server: a proxy on 127.0.0.1 port 0 between the client and the real server that,
//! per mode, alters answers (or the questions, to get valid proofs of the wrong thing). The
//! client must refuse each lie with the documented [`Lie`] variant, keep its trusted digest,
//! and go on working once the proxy is honest again. Every loop is bounded; loopback only.

mod common;

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use axum::response::Response;
use cairn_client::{Batch, Client, Error, Lie};
use cairn_proof::RangeAnswer;
use cairn_server::wire;
use common::{plain_server, v, ORDERED, PLAIN};
use prost::Message as _;

/// What the proxy does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Relays as it is.
    Honest,
    /// Alters a value in a `get` answer.
    AlterValue,
    /// Asks the server for version 1 instead of the newest (a valid receipt of an older
    /// version, against the newest digest) and says it is the newest.
    StaleValue,
    /// Answers a `get` with the last honest answer seen (an older version, its digest).
    ReplayRead,
    /// Drops a key from a `range` answer (both the list and the proved answer).
    DropRangeKey,
    /// Answers `digest` and `consistency` from the other ledger (another history).
    ForkDigest,
    /// Answers everything from the other ledger.
    ForkAll,
    /// Answers `digest` with version 1's digest.
    RollbackDigest,
    /// Alters a value in the receipt of a commit's writes.
    AlterWrite,
    /// Alters a value in a promise.
    AlterPromise,
    /// Alters the metadata hash inside a `get` receipt.
    CorruptReceipt,
    /// Answers 200 with bytes that are no message.
    Garbage,
}

struct Proxy {
    upstream: String,
    mode: Mutex<Mode>,
    last_read: Mutex<Option<Bytes>>,
    http: reqwest::Client,
}

/// The largest body the proxy reads.
const BODY_BYTES_MAX: usize = 16 << 20;

async fn relay(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let mode = *proxy.mode.lock().unwrap();
    let (parts, body) = request.into_parts();
    let mut body = axum::body::to_bytes(body, BODY_BYTES_MAX).await.unwrap();
    let mut path = parts.uri.path_and_query().unwrap().as_str().to_string();
    let endpoint = parts.uri.path().rsplit('/').next().unwrap().to_string();
    let mut promise = false;
    if endpoint == "get" {
        let mut get = wire::GetRequest::decode(&body[..]).unwrap();
        promise = get.promise;
        if mode == Mode::StaleValue && !promise {
            get.version = 1;
            body = get.encode_to_vec().into();
        }
    }
    let fork = match mode {
        Mode::ForkAll => true,
        Mode::ForkDigest => endpoint == "digest" || endpoint == "consistency",
        _ => false,
    };
    if fork {
        path = path.replace("/ledgers/bank/", "/ledgers/evil/");
    }
    if mode == Mode::RollbackDigest && endpoint == "digest" {
        path.push_str("?size=1");
    }
    if mode == Mode::ReplayRead && endpoint == "get" && !promise {
        let old = proxy
            .last_read
            .lock()
            .unwrap()
            .clone()
            .expect("an honest read first");
        return protobuf(old);
    }
    let mut forward = proxy
        .http
        .request(parts.method.clone(), format!("{}{path}", proxy.upstream))
        .body(body);
    for name in [CONTENT_TYPE, ACCEPT, AUTHORIZATION] {
        if let Some(value) = parts.headers.get(&name) {
            forward = forward.header(name, value);
        }
    }
    let answer = forward.send().await.unwrap();
    let status = answer.status();
    let media = answer.headers().get(CONTENT_TYPE).cloned();
    let bytes = answer.bytes().await.unwrap();
    if !status.is_success() {
        let mut r = Response::builder().status(status);
        if let Some(m) = media {
            r = r.header(CONTENT_TYPE, m);
        }
        return r.body(Body::from(bytes)).unwrap();
    }
    if endpoint == "get" && !promise && mode == Mode::Honest {
        *proxy.last_read.lock().unwrap() = Some(bytes.clone());
    }
    protobuf(alter(mode, &endpoint, promise, bytes))
}

fn protobuf(bytes: Bytes) -> Response {
    Response::builder()
        .header(CONTENT_TYPE, "application/x-protobuf")
        .body(Body::from(bytes))
        .unwrap()
}

/// The answer as `mode` alters it.
fn alter(mode: Mode, endpoint: &str, promise: bool, bytes: Bytes) -> Bytes {
    match (mode, endpoint) {
        (Mode::Garbage, _) => Bytes::from_static(b"\xff\xff\xff not a message"),
        (Mode::AlterValue, "get") if !promise => {
            let mut read = wire::ReadResponse::decode(&bytes[..]).unwrap();
            alter_first_value(&mut read);
            read.encode_to_vec().into()
        }
        (Mode::AlterPromise, "get") if promise => {
            let mut read = wire::ReadResponse::decode(&bytes[..]).unwrap();
            alter_first_value(&mut read);
            read.encode_to_vec().into()
        }
        (Mode::StaleValue, "get") => {
            let mut read = wire::ReadResponse::decode(&bytes[..]).unwrap();
            read.version = read.digest.as_ref().unwrap().size;
            read.encode_to_vec().into()
        }
        (Mode::CorruptReceipt, "get") => {
            let mut read = wire::ReadResponse::decode(&bytes[..]).unwrap();
            // The metadata hash: bytes 16 to 48 of a receipt (`docs/format/ledger.md`).
            read.receipt[20] ^= 1;
            read.encode_to_vec().into()
        }
        (Mode::AlterWrite, "put" | "transact") => {
            let mut commit = wire::CommitResponse::decode(&bytes[..]).unwrap();
            let read = commit.writes.as_mut().unwrap().read.as_mut().unwrap();
            alter_first_value(read);
            commit.encode_to_vec().into()
        }
        (Mode::DropRangeKey, "range") => {
            let mut range = wire::RangeResponse::decode(&bytes[..]).unwrap();
            assert!(range.entries.len() >= 3, "a range of three keys at least");
            range.entries.remove(1);
            let mut answer = RangeAnswer::decode(&range.answer).unwrap();
            answer.entries.remove(1);
            range.answer = answer.encode();
            range.encode_to_vec().into()
        }
        _ => bytes,
    }
}

fn alter_first_value(read: &mut wire::ReadResponse) {
    let value = read.tables[0].values[0]
        .value
        .as_mut()
        .expect("a present value");
    value.push(b'!');
}

/// A proxy to `upstream` on 127.0.0.1 port 0: its URL and its handle.
async fn proxy(upstream: String) -> (String, Arc<Proxy>) {
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let state = Arc::new(Proxy {
        upstream,
        mode: Mutex::new(Mode::Honest),
        last_read: Mutex::new(None),
        http: reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
            .unwrap(),
    });
    let app = axum::Router::new()
        .fallback(relay)
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, state)
}

fn set(proxy: &Proxy, mode: Mode) {
    *proxy.mode.lock().unwrap() = mode;
}

/// Asserts `result` is the lie `expected` names (by variant).
#[track_caller]
fn assert_lie<T: std::fmt::Debug>(result: Result<T, Error>, expected: fn(&Lie) -> bool) {
    match result {
        Err(Error::Lie(lie)) if expected(&lie) => {}
        other => panic!("expected another lie, got {other:?}"),
    }
}

/// `n` versions in ledger `ledger` through an honest client of the server.
async fn commit_versions(url: &str, ledger: &str, n: usize, tag: &str) {
    let c = Client::builder(url, ledger).build().unwrap();
    for i in 0..n {
        let mut b = Batch::new();
        b.insert("savings", format!("{tag}{i}"), "1");
        c.put(&b).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lie_is_caught_with_its_variant() {
    let dir = tempfile::tempdir().unwrap();
    let running = plain_server(dir.path(), &["bank", "evil"]).await;
    let server = format!("http://{}", running.addr);
    let (url, proxy) = proxy(server.clone()).await;
    let client = Client::builder(&url, "bank")
        .plain_tables(PLAIN)
        .ordered_tables([ORDERED])
        .digest_file(dir.path().join("bank.digest"))
        .build()
        .unwrap();

    // Honest history: version 1 (alice 50, three names), version 2 (alice 70).
    let mut b = Batch::new();
    b.insert("checking", "alice", "50")
        .insert(ORDERED, "alice", "Alice")
        .insert(ORDERED, "bob", "Bob")
        .insert(ORDERED, "carol", "Carol");
    client.put(&b).await.unwrap();
    let mut b = Batch::new();
    b.insert("checking", "alice", "70");
    client.put(&b).await.unwrap();
    let alice: &[(&str, &[&str])] = &[("checking", &["alice"])];
    assert_eq!(client.get(alice).await.unwrap().values, vec![vec![v("70")]]);
    let trusted = client.trusted().unwrap();
    assert_eq!(trusted.size, 2);

    // An altered value.
    set(&proxy, Mode::AlterValue);
    assert_lie(
        client.get(alice).await,
        |l| matches!(l, Lie::AlteredValue { table, key, .. } if table == "checking" && key == b"alice"),
    );
    // The older value with its older, valid receipt, offered as the newest.
    set(&proxy, Mode::StaleValue);
    assert_lie(client.get(alice).await, |l| {
        matches!(
            l,
            Lie::StaleValue {
                version: 1,
                expected: 2
            }
        )
    });
    // A receipt whose bytes were tampered with.
    set(&proxy, Mode::CorruptReceipt);
    assert_lie(client.get(alice).await, |l| matches!(l, Lie::BadProof(_)));
    // A key dropped from a range.
    set(&proxy, Mode::DropRangeKey);
    assert_lie(
        client.range(ORDERED, "a", "z").await,
        |l| matches!(l, Lie::IncompleteRange { table, .. } if table == ORDERED),
    );
    // An altered value in the receipt of a write.
    set(&proxy, Mode::AlterWrite);
    let mut w = Batch::new();
    w.insert("checking", "bob", "1");
    assert_lie(
        client.put(&w).await,
        |l| matches!(l, Lie::AlteredValue { key, .. } if key == b"bob"),
    );
    // The lies left the trust alone, but for the write, which was made and proved consistent
    // (its digest extends the trusted one) though its receipt was altered: it is not adopted.
    assert_eq!(client.trusted(), Some(trusted));

    // An altered promise, caught when the promises are proved.
    set(&proxy, Mode::AlterPromise);
    let promised = client.get_promise(alice).await.unwrap();
    assert_eq!(promised.values, vec![vec![v("70!")]]);
    set(&proxy, Mode::Honest);
    assert_lie(
        client.verify_promises(&[promised]).await,
        |l| matches!(l, Lie::AlteredValue { key, .. } if key == b"alice"),
    );

    // Honest again: the client goes on (and adopts version 3, bob's write above).
    assert_eq!(client.get(alice).await.unwrap().values, vec![vec![v("70")]]);
    let trusted = client.trusted().unwrap();
    assert_eq!(trusted.size, 3);

    // A replayed older answer (version 3's) once version 4 is trusted: rolled back.
    let mut b = Batch::new();
    b.insert("checking", "alice", "90");
    client.put(&b).await.unwrap();
    set(&proxy, Mode::ReplayRead);
    assert_lie(client.get(alice).await, |l| {
        matches!(
            l,
            Lie::RolledBack {
                trusted: 4,
                offered: 3
            }
        )
    });
    // An older digest: rolled back.
    set(&proxy, Mode::RollbackDigest);
    assert_lie(client.digest().await, |l| {
        matches!(
            l,
            Lie::RolledBack {
                trusted: 4,
                offered: 1
            }
        )
    });
    let trusted = client.trusted().unwrap();
    assert_eq!(trusted.size, 4);

    // A forked history: the other ledger, of the same size...
    commit_versions(&server, "evil", 4, "e").await;
    set(&proxy, Mode::ForkDigest);
    assert_lie(
        client.digest().await,
        |l| matches!(l, Lie::ForkedHistory { offered, .. } if offered.size == 4),
    );
    // ...and longer (its consistency proof is for its own history).
    commit_versions(&server, "evil", 2, "f").await;
    assert_lie(
        client.digest().await,
        |l| matches!(l, Lie::ForkedHistory { offered, .. } if offered.size == 6),
    );
    // Every answer from the other ledger: a read with a receipt valid for that history.
    set(&proxy, Mode::ForkAll);
    assert_lie(client.get(alice).await, |l| {
        matches!(l, Lie::ForkedHistory { .. })
    });
    assert_eq!(client.trusted(), Some(trusted));

    // Bytes that are no message: a decode error, not a panic.
    set(&proxy, Mode::Garbage);
    assert!(matches!(client.get(alice).await, Err(Error::Decode(_))));
    assert!(matches!(client.digest().await, Err(Error::Decode(_))));

    // Honest again, and the trusted digest was kept through it all (and in the file).
    set(&proxy, Mode::Honest);
    assert_eq!(client.get(alice).await.unwrap().values, vec![vec![v("90")]]);
    assert_eq!(client.trusted(), Some(trusted));
    let reloaded = Client::builder(&url, "bank")
        .digest_file(dir.path().join("bank.digest"))
        .build()
        .unwrap();
    assert_eq!(reloaded.trusted(), Some(trusted));
    running.shutdown().await.unwrap();
}

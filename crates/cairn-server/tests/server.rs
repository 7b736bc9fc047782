//! End-to-end tests of `cairn-server` on loopback: every endpoint in JSON and protobuf, TLS,
//! grants, limits (413, 429, 408), malformed bodies, and a graceful shutdown under load that
//! loses no acknowledged write. Every server listens on 127.0.0.1 port 0; every loop is
//! bounded.

use std::sync::Arc;
use std::time::Duration;

use cairn_server::auth::{new_token, token_hash, Right};
use cairn_server::config::{GrantConfig, LedgerConfig, Limits, TlsConfig, TokenConfig};
use cairn_server::wire;
use cairn_server::{Config, Running};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PROTOBUF: &str = "application/x-protobuf";

/// A server on loopback with one ledger `bank` (tables `checking`, `savings`, and the
/// ordered `log`), an admin token and a token that may only read `checking`.
struct Fixture {
    running: Option<Running>,
    dir: tempfile::TempDir,
    base: String,
    admin: String,
    reader: String,
    http: reqwest::Client,
}

fn ledger_config(dir: &std::path::Path) -> LedgerConfig {
    LedgerConfig {
        name: "bank".into(),
        dir: dir.join("bank"),
        tables: vec!["checking".into(), "savings".into(), "log".into()],
        ordered: vec!["log".into()],
        history: 64,
        group: 8,
    }
}

fn tokens(admin: &str, reader: &str) -> Vec<TokenConfig> {
    vec![
        TokenConfig {
            name: "admin".into(),
            sha256: token_hash(admin),
            grants: vec![GrantConfig {
                ledger: "bank".into(),
                tables: vec!["*".into()],
                rights: vec![Right::Admin],
            }],
        },
        TokenConfig {
            name: "reader".into(),
            sha256: token_hash(reader),
            grants: vec![GrantConfig {
                ledger: "bank".into(),
                tables: vec!["checking".into()],
                rights: vec![Right::Read],
            }],
        },
    ]
}

fn rustls_client(root_pem: Option<&str>) -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    if let Some(pem) = root_pem {
        use rustls_pki_types::pem::PemObject as _;
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .unwrap()
}

async fn start(limits: Limits, tls: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let admin = new_token().unwrap();
    let reader = new_token().unwrap();
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        tls: tls.then(|| TlsConfig {
            cert: None,
            key: None,
            self_signed: vec!["localhost".into()],
        }),
        insecure_loopback: !tls,
        limits,
        ledgers: vec![ledger_config(dir.path())],
        tokens: tokens(&admin, &reader),
        shutdown_timeout_ms: 5_000,
        log_json: false,
        cluster: None,
        router: None,
    };
    let running = cairn_server::start(config, std::future::pending())
        .await
        .unwrap();
    let base = if tls {
        format!("https://localhost:{}", running.addr.port())
    } else {
        format!("http://{}", running.addr)
    };
    let http = rustls_client(running.self_signed_pem.as_deref());
    Fixture {
        running: Some(running),
        dir,
        base,
        admin,
        reader,
        http,
    }
}

impl Fixture {
    fn url(&self, path: &str) -> String {
        format!("{}/v1/ledgers/bank/{path}", self.base)
    }

    /// POSTs a JSON body with a token; the status and the parsed body.
    async fn json(
        &self,
        path: &str,
        token: Option<&str>,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let mut req = self.http.post(self.url(path)).body(body.to_string());
        req = req.header("content-type", "application/json");
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        (status, value)
    }

    /// POSTs a protobuf message with the admin token; the status and the body's bytes.
    async fn proto<M: prost::Message>(&self, path: &str, message: &M) -> (u16, Vec<u8>) {
        let resp = self
            .http
            .post(self.url(path))
            .bearer_auth(&self.admin)
            .header("content-type", PROTOBUF)
            .body(message.encode_to_vec())
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.bytes().await.unwrap().to_vec())
    }
}

fn h(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_in_json_and_protobuf() {
    let f = start(Limits::default(), false).await;
    let admin = Some(f.admin.as_str());

    // put, JSON, with a receipt of the writes.
    let (status, put) = f
        .json(
            "put",
            admin,
            serde_json::json!({
                "tables": [
                    {"table": "checking", "writes": [{"key": h(b"alice"), "value": h(b"50")}]},
                    {"table": "log", "writes": [{"key": h(b"k1"), "value": h(b"a")},
                                                {"key": h(b"k2"), "value": h(b"b")}]}
                ],
                "prove": true
            }),
        )
        .await;
    assert_eq!(status, 200, "{put}");
    assert_eq!(put["version"], 1);
    let digest1 = cairn_proof::Digest {
        size: 1,
        root: hex::decode(put["digest"]["root"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap(),
    };

    // get, JSON: the receipt proves the value against the digest it came with.
    let (status, read) = f
        .json(
            "get",
            admin,
            serde_json::json!({"tables": [{"table": "checking", "keys": [h(b"alice"), h(b"bob")]}]}),
        )
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["tables"][0]["values"][0], h(b"50"));
    assert!(read["tables"][0]["values"][1].is_null());
    let receipt =
        cairn_proof::Receipt::decode(&hex::decode(read["receipt"].as_str().unwrap()).unwrap())
            .unwrap();
    let claims = [
        cairn_proof::Claim::present(b"alice", b"50"),
        cairn_proof::Claim::absent(b"bob"),
    ];
    let tables = [cairn_proof::TableClaims {
        table: "checking",
        claims: &claims,
    }];
    cairn_proof::verify_receipt(&receipt, &tables, &digest1).unwrap();

    // verify-receipt: the server's verifier agrees, and refuses a wrong claim.
    let claim = |v: &[u8]| {
        serde_json::json!({
            "receipt": read["receipt"], "digest": read["digest"],
            "tables": [{"table": "checking", "claims": [
                {"key": h(b"alice"), "value": h(v)}, {"key": h(b"bob")}]}]
        })
    };
    let (status, verdict) = f.json("verify-receipt", admin, claim(b"50")).await;
    assert_eq!(
        (status, verdict["valid"].as_bool()),
        (200, Some(true)),
        "{verdict}"
    );
    let (_, verdict) = f.json("verify-receipt", admin, claim(b"51")).await;
    assert_eq!(verdict["valid"], false, "{verdict}");

    // transact, protobuf: the expectation holds, then the same expectation fails (409).
    let tx = |seen: &[u8], new: &[u8]| transact_alice(seen, "savings", new, b"block 2");
    let (status, body) = f.proto("transact", &tx(b"50", b"1000")).await;
    assert_eq!(status, 200);
    let made = wire::CommitResponse::decode(&body[..]).unwrap();
    assert_eq!(made.version, 2);
    let reads = made.reads.expect("the read is proved");
    assert_eq!(reads.keys[0].keys, vec![b"alice".to_vec()]);
    let writes = made.writes.expect("the write is proved");
    let wread = writes.read.unwrap();
    assert_eq!(
        wread.tables[0].values[0].value.as_deref(),
        Some(&b"1000"[..])
    );
    let (status, body) = f.proto("transact", &tx(b"49", b"0")).await;
    assert_eq!(status, 409);
    let e = wire::ErrorBody::decode(&body[..]).unwrap();
    assert_eq!(e.code, "expectation_failed");

    // get as a promise, then verify it (deferred), protobuf.
    let (status, body) = f
        .proto(
            "get",
            &wire::GetRequest {
                tables: vec![wire::TableKeys {
                    table: "savings".into(),
                    keys: vec![b"alice".to_vec()],
                }],
                version: 0,
                promise: true,
                lift: false,
            },
        )
        .await;
    assert_eq!(status, 200);
    let promised = wire::ReadResponse::decode(&body[..]).unwrap();
    assert!(promised.receipt.is_empty() && promised.digest.is_none());
    let (status, body) = f
        .proto(
            "verify",
            &wire::VerifyRequest {
                promises: vec![wire::Promise {
                    version: promised.version,
                    table: "savings".into(),
                    keys: vec![b"alice".to_vec()],
                }],
            },
        )
        .await;
    assert_eq!(status, 200);
    let proved = wire::VerifyResponse::decode(&body[..]).unwrap();
    let read = proved.reads[0].read.clone().unwrap();
    let receipt = cairn_proof::Receipt::decode(&read.receipt).unwrap();
    let digest = read.digest.unwrap().to_proof().unwrap();
    let claims = [cairn_proof::Claim::present(b"alice", b"1000")];
    let tables = [cairn_proof::TableClaims {
        table: "savings",
        claims: &claims,
    }];
    cairn_proof::verify_receipt_at(&receipt, &tables, &digest).unwrap();

    // digest and consistency, both encodings.
    let text = f
        .http
        .get(f.url("digest"))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let d: wire::Digest = serde_json::from_str(&text).unwrap();
    assert_eq!(d.size, 2);
    let resp = f
        .http
        .get(f.url("consistency?from=1&to=2"))
        .bearer_auth(&f.admin)
        .header("accept", PROTOBUF)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let c = wire::ConsistencyResponse::decode(&resp.bytes().await.unwrap()[..]).unwrap();
    let proof = cairn_proof::ConsistencyProof::decode(&c.proof).unwrap();
    cairn_proof::verify_consistency(&digest1, &d.to_proof().unwrap(), &proof).unwrap();

    // range over the ordered table, proved complete.
    let (status, body) = f
        .proto(
            "range",
            &wire::RangeRequest {
                table: "log".into(),
                lo: b"k0".to_vec(),
                hi: b"k9".to_vec(),
                version: 0,
                promise: false,
            },
        )
        .await;
    assert_eq!(status, 200);
    let r = wire::RangeResponse::decode(&body[..]).unwrap();
    let answer = cairn_proof::RangeAnswer::decode(&r.answer).unwrap();
    assert_eq!(answer.entries.len(), 2);
    let receipt = cairn_proof::Receipt::decode(&r.receipt).unwrap();
    cairn_proof::verify_range(
        &receipt,
        "log",
        b"k0",
        b"k9",
        &answer,
        &r.digest.unwrap().to_proof().unwrap(),
    )
    .unwrap();

    // export: two versions, as NDJSON and as delimited protobuf.
    let text = f
        .http
        .get(f.url("export"))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    let bytes = f
        .http
        .get(f.url("export?from=1&to=2"))
        .bearer_auth(&f.admin)
        .header("accept", PROTOBUF)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut rest = &bytes[..];
    let mut versions = Vec::new();
    while !rest.is_empty() {
        let record = wire::VersionRecord::decode_length_delimited(&mut rest).unwrap();
        let leaf = cairn_proof::HistoryLeaf::decode(&record.leaf).unwrap();
        assert_eq!(leaf.version, record.version);
        versions.push(record.version);
    }
    assert_eq!(versions, [1, 2]);

    // operations.
    for path in ["/health", "/ready"] {
        let resp = f
            .http
            .get(format!("{}{path}", f.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
    let metrics = f
        .http
        .get(format!("{}/metrics", f.base))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status().as_u16(), 200);
    let text = metrics.text().await.unwrap();
    for metric in [
        "cairn_requests_total",
        "cairn_durable_wait_seconds",
        "cairn_log_fsyncs",
        "cairn_table_merges_in_progress",
    ] {
        assert!(text.contains(metric), "{metric} missing from {text}");
    }
    let denied = f
        .http
        .get(format!("{}/metrics", f.base))
        .bearer_auth(&f.reader)
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status().as_u16(), 403);
    f.running.unwrap().shutdown().await.unwrap();
}

impl Fixture {
    /// Sends `message` to `path` (POST, or GET with a query when `message` is `None`) with the
    /// admin token, as JSON or as protobuf (body and `Accept`); asserts a 200 in that encoding
    /// and decodes the answer from it.
    async fn answer<Q, A>(&self, path: &str, protobuf: bool, message: Option<&Q>) -> A
    where
        Q: prost::Message + serde::Serialize,
        A: prost::Message + Default + serde::de::DeserializeOwned,
    {
        let media = if protobuf {
            PROTOBUF
        } else {
            "application/json"
        };
        let mut req = match message {
            Some(m) => {
                let body = if protobuf {
                    m.encode_to_vec()
                } else {
                    serde_json::to_vec(m).unwrap()
                };
                (self.http.post(self.url(path)))
                    .header("content-type", media)
                    .body(body)
            }
            None => self.http.get(self.url(path)),
        };
        req = req.bearer_auth(&self.admin).header("accept", media);
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let answered = resp.headers()["content-type"].to_str().unwrap().to_string();
        let bytes = resp.bytes().await.unwrap();
        assert_eq!(
            status,
            200,
            "{path} {media}: {}",
            String::from_utf8_lossy(&bytes)
        );
        assert!(
            answered.starts_with(media),
            "{path}: {answered} for {media}"
        );
        if protobuf {
            A::decode(&bytes[..]).unwrap()
        } else {
            serde_json::from_slice(&bytes).unwrap()
        }
    }
}

/// Every ledger endpoint in both encodings: the writes (`put`, `transact`) each once as JSON
/// and once as protobuf, and each read the same question in both, which must get the same
/// answer (`export`, in both, is in the test above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_alike_in_json_and_protobuf() {
    let f = start(Limits::default(), false).await;
    let none: Option<&wire::GetRequest> = None;
    let put = |key: &[u8]| wire::PutRequest {
        tables: vec![
            table_writes("checking", b"alice", b"50"),
            table_writes("log", key, b"a"),
        ],
        meta: Vec::new(),
        prove: true,
    };
    let mut commits = Vec::new();
    for (protobuf, key) in [(false, b"k1"), (true, b"k2")] {
        let c: wire::CommitResponse = f.answer("put", protobuf, Some(&put(key))).await;
        assert!(c.writes.is_some());
        commits.push(c.version);
    }
    let tx = |seen: &[u8], new: &[u8]| transact_alice(seen, "checking", new, b"");
    for (protobuf, seen, new) in [(false, b"50", b"60"), (true, b"60", b"70")] {
        let c: wire::CommitResponse = f.answer("transact", protobuf, Some(&tx(seen, new))).await;
        assert!(c.reads.is_some() && c.writes.is_some());
        commits.push(c.version);
    }
    assert_eq!(commits, [1, 2, 3, 4]);

    // The reads: the same question, the same answer in both encodings.
    macro_rules! alike {
        ($answer:ty, $path:expr, $message:expr) => {{
            let json: $answer = f.answer($path, false, $message).await;
            let proto: $answer = f.answer($path, true, $message).await;
            assert_eq!(json, proto, "{}", $path);
            json
        }};
    }
    let keys = wire::TableKeys {
        table: "checking".into(),
        keys: vec![b"alice".to_vec(), b"bob".to_vec()],
    };
    let get = |version: u64, promise: bool| wire::GetRequest {
        tables: vec![keys.clone()],
        version,
        promise,
        lift: false,
    };
    let read = alike!(wire::ReadResponse, "get", Some(&get(0, false)));
    assert_eq!(read.tables[0].values[0].value.as_deref(), Some(&b"70"[..]));
    alike!(wire::ReadResponse, "get", Some(&get(2, false)));
    let promised = alike!(wire::ReadResponse, "get", Some(&get(0, true)));
    assert!(promised.receipt.is_empty() && promised.version == 4);
    let verify = wire::VerifyRequest {
        promises: vec![wire::Promise {
            version: promised.version,
            table: "checking".into(),
            keys: keys.keys.clone(),
        }],
    };
    let proved = alike!(wire::VerifyResponse, "verify", Some(&verify));
    assert_eq!(proved.reads.len(), 1);
    let claims = |value: &[u8]| wire::VerifyReceiptRequest {
        receipt: read.receipt.clone(),
        tables: vec![wire::TableClaims {
            table: "checking".into(),
            claims: vec![
                wire::Claim {
                    key: b"alice".to_vec(),
                    value: Some(value.to_vec()),
                },
                wire::Claim {
                    key: b"bob".to_vec(),
                    value: None,
                },
            ],
        }],
        digest: read.digest.clone(),
        at: false,
    };
    let verdict = alike!(
        wire::VerifyReceiptResponse,
        "verify-receipt",
        Some(&claims(b"70"))
    );
    assert!(verdict.valid, "{}", verdict.error);
    let verdict = alike!(
        wire::VerifyReceiptResponse,
        "verify-receipt",
        Some(&claims(b"71"))
    );
    assert!(!verdict.valid);
    let range = wire::RangeRequest {
        table: "log".into(),
        lo: b"k0".to_vec(),
        hi: b"k9".to_vec(),
        version: 0,
        promise: false,
    };
    let r = alike!(wire::RangeResponse, "range", Some(&range));
    assert_eq!(r.entries.len(), 2);
    let d = alike!(wire::Digest, "digest", none);
    assert_eq!(d.size, 4);
    let old = alike!(wire::Digest, "digest?size=2", none);
    assert_eq!(old.size, 2);
    let c = alike!(wire::ConsistencyResponse, "consistency?from=2&to=4", none);
    assert_eq!((c.from, c.to), (Some(old.clone()), Some(d.clone())));
    let proof = cairn_proof::ConsistencyProof::decode(&c.proof).unwrap();
    cairn_proof::verify_consistency(&old.to_proof().unwrap(), &d.to_proof().unwrap(), &proof)
        .unwrap();
    f.running.unwrap().shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_self_signed_certificate_serves_http2() {
    let f = start(Limits::default(), true).await;
    let resp = f
        .http
        .get(format!("{}/health", f.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    let (status, _) = f
        .json(
            "put",
            Some(&f.admin),
            serde_json::json!({"tables": [{"table": "checking",
                "writes": [{"key": h(b"a"), "value": h(b"1")}]}]}),
        )
        .await;
    assert_eq!(status, 200);
    // A client that does not trust the certificate cannot connect.
    let stranger = rustls_client(None);
    assert!(stranger
        .get(format!("{}/health", f.base))
        .send()
        .await
        .is_err());
    // Plain HTTP to the TLS port gets no answer.
    assert!(rustls_client(None)
        .get(format!(
            "http://127.0.0.1:{}/health",
            f.running.as_ref().unwrap().addr.port()
        ))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_or(true, |r| !r.status().is_success()));
    f.running.unwrap().shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_decide_401_403_and_200() {
    let f = start(Limits::default(), false).await;
    let body = || serde_json::json!({"tables": [{"table": "checking", "keys": [h(b"x")]}]});
    let savings = || serde_json::json!({"tables": [{"table": "savings", "keys": [h(b"x")]}]});
    // Nothing written yet: a read before the first version is a 404 once authorized.
    f.json(
        "put",
        Some(&f.admin),
        serde_json::json!({"tables": [{"table": "checking",
            "writes": [{"key": h(b"x"), "value": h(b"1")}]}]}),
    )
    .await;
    let (status, e) = f.json("get", None, body()).await;
    assert_eq!((status, e["code"].as_str()), (401, Some("unauthenticated")));
    let resp = f.http.get(f.url("digest")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    let (status, _) = f.json("get", Some("cairn_not_a_token"), body()).await;
    assert_eq!(status, 401);
    let (status, e) = f.json("get", Some(&f.reader), savings()).await;
    assert_eq!(
        (status, e["code"].as_str()),
        (403, Some("forbidden")),
        "{e}"
    );
    let (status, e) = f
        .json(
            "put",
            Some(&f.reader),
            serde_json::json!({"tables": [{"table": "checking",
                "writes": [{"key": h(b"x"), "value": h(b"2")}]}]}),
        )
        .await;
    assert_eq!(status, 403, "{e}");
    let (status, read) = f.json("get", Some(&f.reader), body()).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["tables"][0]["values"][0], h(b"1"));
    // The export needs admin.
    let resp = f
        .http
        .get(f.url("export"))
        .bearer_auth(&f.reader)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    // An unknown ledger is a 404.
    let resp = f
        .http
        .get(format!("{}/v1/ledgers/nope/digest", f.base))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    f.running.unwrap().shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_answer_413_429_and_408() {
    let limits = Limits {
        body_bytes: 4096,
        keys_per_request: 8,
        concurrent_requests: 1,
        request_timeout_ms: 1_500,
        ..Limits::default()
    };
    let f = start(limits, false).await;
    // 413: a body over the limit, and too many keys.
    let big = "x".repeat(5000);
    let (status, e) = f
        .json("get", Some(&f.admin), serde_json::json!({"pad": big}))
        .await;
    assert_eq!(
        (status, e["code"].as_str()),
        (413, Some("too_large")),
        "{e}"
    );
    let keys: Vec<String> = (0..9u8).map(|i| h(&[i])).collect();
    let (status, e) = f
        .json(
            "get",
            Some(&f.admin),
            serde_json::json!({"tables": [{"table": "checking", "keys": keys}]}),
        )
        .await;
    assert_eq!(
        (status, e["code"].as_str()),
        (413, Some("too_large")),
        "{e}"
    );

    // 408: a client that sends its body one byte a second.
    let addr = f.running.as_ref().unwrap().addr;
    let head = format!(
        "POST /v1/ledgers/bank/get HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n",
        f.admin
    );
    let slow = tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        for _ in 0..20 {
            if s.write_all(b" ").await.is_err() {
                break;
            }
            let mut buf = [0u8; 512];
            match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => {
                    answer.extend_from_slice(&buf[..n]);
                    break;
                }
                Err(_) => {}
            }
        }
        String::from_utf8_lossy(&answer).into_owned()
    });
    // 429: while the slow request holds the one slot, another request is shed at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, e) = f
        .json("get", Some(&f.admin), serde_json::json!({"tables": []}))
        .await;
    assert_eq!(
        (status, e["code"].as_str()),
        (429, Some("too_many_requests")),
        "{e}"
    );
    let answer = slow.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // A range over more entries than keys_per_request is 413, read no further than the limit.
    let writes: Vec<serde_json::Value> = (0..12u8)
        .map(|i| serde_json::json!({"key": h(&[b'k', i]), "value": h(b"v")}))
        .collect();
    let (status, _) = f
        .json(
            "put",
            Some(&f.admin),
            serde_json::json!({"tables": [{"table": "log", "writes": writes[..8]}]}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = f
        .json(
            "put",
            Some(&f.admin),
            serde_json::json!({"tables": [{"table": "log", "writes": writes[8..]}]}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, e) = f
        .json(
            "range",
            Some(&f.admin),
            serde_json::json!({"table": "log", "lo": h(b"k"), "hi": h(b"l")}),
        )
        .await;
    assert_eq!(
        (status, e["code"].as_str()),
        (413, Some("too_large")),
        "{e}"
    );
    let (status, r) = f
        .json(
            "range",
            Some(&f.admin),
            serde_json::json!({"table": "log", "lo": h(&[b'k', 0]), "hi": h(&[b'k', 7])}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["entries"].as_array().unwrap().len(), 8);
    // The slot is free again.
    let (status, _) = f
        .json(
            "put",
            Some(&f.admin),
            serde_json::json!({"tables": [{"table": "checking",
                "writes": [{"key": h(b"x"), "value": h(b"1")}]}]}),
        )
        .await;
    assert_eq!(status, 200);
    f.running.unwrap().shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_400_and_the_server_serves_on() {
    let f = start(Limits::default(), false).await;
    let send = |ct: &'static str, body: Vec<u8>| {
        f.http
            .post(f.url("get"))
            .bearer_auth(&f.admin)
            .header("content-type", ct)
            .body(body)
            .send()
    };
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("application/json", b"{not json".to_vec(), 400),
        (
            "application/json",
            br#"{"tables": [{"table": "checking", "keys": ["zz"]}]}"#.to_vec(),
            400,
        ),
        ("application/json", br#"{"tables": 7}"#.to_vec(), 400),
        (PROTOBUF, vec![0xff, 0xff, 0xff, 0xff, 0xff, 0xff], 400),
        (PROTOBUF, vec![0x0a, 0x05, 0x0a], 400),
        ("text/plain", b"hello".to_vec(), 415),
    ];
    for (ct, body, want) in cases {
        let resp = send(ct, body.clone()).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        assert_eq!(status, want, "{ct} {body:?}: {bytes:?}");
        // The error comes in the request's encoding.
        let e = if ct == PROTOBUF {
            wire::ErrorBody::decode(&bytes[..]).unwrap()
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        assert!(!e.code.is_empty() && !e.message.is_empty(), "{e:?}");
    }
    // Reading a table that does not exist, or a version that does not: typed 404s.
    let (status, e) = f
        .json(
            "get",
            Some(&f.admin),
            serde_json::json!({"tables": [{"table": "nope", "keys": []}]}),
        )
        .await;
    assert_eq!(status, 404, "{e}");
    let (status, _) = f
        .json(
            "put",
            Some(&f.admin),
            serde_json::json!({"tables": [{"table": "checking",
                "writes": [{"key": h(b"x"), "value": h(b"1")}]}]}),
        )
        .await;
    assert_eq!(status, 200);
    let resp = f
        .http
        .get(f.url("consistency?from=5&to=9"))
        .bearer_auth(&f.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    f.running.unwrap().shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_under_load_loses_no_acknowledged_write() {
    let mut f = start(Limits::default(), false).await;
    let acked = Arc::new(std::sync::Mutex::new(Vec::<Vec<u8>>::new()));
    let mut writers = Vec::new();
    for w in 0..8u32 {
        let http = f.http.clone();
        let url = f.url("put");
        let token = f.admin.clone();
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..10_000u32 {
                let key = format!("w{w}-{i}").into_bytes();
                let body = serde_json::json!({"tables": [{"table": "checking",
                    "writes": [{"key": h(&key), "value": h(b"v")}]}]});
                let resp = http
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await;
                match resp {
                    Ok(r) if r.status().is_success() => acked.lock().unwrap().push(key),
                    _ => break,
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    f.running.take().unwrap().shutdown().await.unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 8,
        "the writers got {} writes in",
        acked.len()
    );
    let l = ledger_config(f.dir.path());
    let ledger = cairn_ledger::Ledger::open(
        &l.dir,
        cairn_ledger::LedgerConfig::new(l.tables).ordered(l.ordered),
    )
    .unwrap();
    for key in &acked {
        assert_eq!(
            ledger.get("checking", key).unwrap().as_deref(),
            Some(&b"v"[..]),
            "acknowledged write {} lost",
            String::from_utf8_lossy(key)
        );
    }
    drop(ledger);

    // And through a server restarted on the same directory.
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        insecure_loopback: true,
        ledgers: vec![ledger_config(f.dir.path())],
        ..Config::default()
    };
    let again = cairn_server::start(config, std::future::pending())
        .await
        .unwrap();
    let url = format!("http://{}/v1/ledgers/bank/get", again.addr);
    for chunk in acked.chunks(1_000) {
        let keys: Vec<String> = chunk.iter().map(|k| h(k)).collect();
        let body = serde_json::json!({"tables": [{"table": "checking", "keys": keys}]});
        let resp = f
            .http
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let read: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        let values = read["tables"][0]["values"].as_array().unwrap();
        assert_eq!(values.len(), chunk.len());
        for (key, value) in chunk.iter().zip(values) {
            assert_eq!(
                value.as_str(),
                Some(h(b"v").as_str()),
                "acknowledged write {} lost after the restart",
                String::from_utf8_lossy(key)
            );
        }
    }
    again.shutdown().await.unwrap();
}

/// One write of `value` to `key` of `table`.
fn table_writes(table: &str, key: &[u8], value: &[u8]) -> wire::TableWrites {
    wire::TableWrites {
        table: table.into(),
        writes: vec![wire::Write {
            key: key.to_vec(),
            value: Some(value.to_vec()),
        }],
    }
}

/// A transaction expecting `checking`'s `alice` to hold `seen` and writing `new` to `table`'s
/// `alice`, with receipts.
fn transact_alice(seen: &[u8], table: &str, new: &[u8], meta: &[u8]) -> wire::TransactRequest {
    wire::TransactRequest {
        expects: vec![wire::TableExpects {
            table: "checking".into(),
            expects: vec![wire::Expect {
                key: b"alice".to_vec(),
                value: Some(seen.to_vec()),
            }],
        }],
        tables: vec![table_writes(table, b"alice", new)],
        meta: meta.to_vec(),
        prove: true,
    }
}

//! What the client's tests share: real servers started in-process on 127.0.0.1 port 0, with
//! ledgers in a temporary directory.
#![allow(dead_code)]

use std::path::Path;

pub mod exercise;

use cairn_server::auth::{new_token, token_hash, Right};
use cairn_server::config::{GrantConfig, LedgerConfig, TlsConfig, TokenConfig};
use cairn_server::{Config, Running};

/// The plain tables of every test ledger.
pub const PLAIN: [&str; 2] = ["checking", "savings"];
/// The ordered table of every test ledger.
pub const ORDERED: &str = "names";

/// A ledger `name` in `dir`: tables `checking`, `savings` and the ordered `names`, with a
/// window of 64 versions kept provable.
pub fn ledger(dir: &Path, name: &str) -> LedgerConfig {
    LedgerConfig {
        name: name.into(),
        dir: dir.join(name),
        tables: vec![PLAIN[0].into(), PLAIN[1].into(), ORDERED.into()],
        ordered: vec![ORDERED.into()],
        history: 64,
        group: 8,
    }
}

/// A server of plain HTTP on loopback, without tokens, serving `names`' ledgers.
pub async fn plain_server(dir: &Path, names: &[&str]) -> Running {
    let config = Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        insecure_loopback: true,
        ledgers: names.iter().map(|n| ledger(dir, n)).collect(),
        ..Config::default()
    };
    cairn_server::start(config, std::future::pending())
        .await
        .expect("the server starts")
}

/// A server of TLS with a self-signed certificate for `localhost`, serving ledger `name` to
/// the token it returns (read and write on every table).
pub async fn tls_server(dir: &Path, name: &str) -> (Running, String) {
    let token = new_token().expect("a token");
    let config = Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        tls: Some(TlsConfig {
            cert: None,
            key: None,
            self_signed: vec!["localhost".into()],
        }),
        ledgers: vec![ledger(dir, name)],
        tokens: vec![TokenConfig {
            name: "tester".into(),
            sha256: token_hash(&token),
            grants: vec![GrantConfig {
                ledger: name.into(),
                tables: vec!["*".into()],
                rights: vec![Right::Read, Right::Write],
            }],
        }],
        ..Config::default()
    };
    let running = cairn_server::start(config, std::future::pending())
        .await
        .expect("the server starts");
    (running, token)
}

/// A value as bytes.
pub fn v(text: &str) -> Option<Vec<u8>> {
    Some(text.as_bytes().to_vec())
}

/// A key-value entry as bytes.
pub fn kv(key: &str, value: &str) -> (Vec<u8>, Vec<u8>) {
    (key.as_bytes().to_vec(), value.as_bytes().to_vec())
}

/// An HTTP client for plain HTTP on loopback (reqwest is built with rustls here, which wants a
/// provider even for `http://`), each request ending within `timeout`.
pub fn http(timeout: std::time::Duration) -> reqwest::Client {
    let tls = unused_tls();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .build()
        .expect("an HTTP client")
}

fn unused_tls() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS defaults")
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth()
}

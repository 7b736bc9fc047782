//! The server's configuration: a TOML file, overridden by command-line flags, checked before
//! anything listens.
//!
//! Owns: [`Config`] and its parts, their defaults, [`Config::load`] and [`Config::check`] (what
//! `cairn-server --check-config` runs). May call: `auth` (the rights a grant names), `toml`.
//! Must never touch: sockets, the ledgers' files.
//!
//! Precedence, as usual: a flag beats the file, the file beats the default. Unknown keys are
//! refused (a misspelt limit must not silently fall back to its default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::auth::Right;

/// The whole configuration (`docs/server.md`, "Configuration").
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where to listen (default `127.0.0.1:7443`).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// TLS: a certificate and key from PEM files, or a self-signed certificate made at start
    /// (development only). Required unless `insecure_loopback`.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// Serve plain HTTP on 127.0.0.1 only, and without tokens if none are configured (every
    /// client then has every right). For development and tests; never on a shared host.
    #[serde(default)]
    pub insecure_loopback: bool,
    /// The limits every request and connection is held to.
    #[serde(default)]
    pub limits: Limits,
    /// The ledgers served, by name.
    #[serde(default)]
    pub ledgers: Vec<LedgerConfig>,
    /// The tokens clients present, with their grants.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// Longest a graceful shutdown waits for requests in flight before it closes their
    /// connections, ms (default 10,000). The ledgers are synced and checkpointed after.
    #[serde(default = "default_shutdown_ms")]
    pub shutdown_timeout_ms: u64,
    /// Log lines as JSON objects instead of text.
    #[serde(default)]
    pub log_json: bool,
    /// Serve the ledger as one node of a replicated cluster (`cairn-server --raft`).
    #[serde(default)]
    pub cluster: Option<ClusterConfig>,
    /// Serve a ledger split over shards, each a cluster of its own, by routing each key to its
    /// shard (`docs/server.md`, "Router").
    #[serde(default)]
    pub router: Option<RouterConfig>,
}

/// A router over the shards of a ledger: each shard a cluster of `cairn-server --raft` nodes
/// serving the same ledger name and tables; a key belongs to the shard named by the first
/// log₂(shards) bits of its key path.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    /// The ledger's name, as clients name it and as every shard serves it.
    pub ledger: String,
    /// Its tables (the shards' ledgers have them all).
    pub tables: Vec<String>,
    /// For each shard in order, the client-API base URLs of its nodes: `https://host:port`
    /// (checked against `ca`), or `http://` to a loopback address. A power of two of shards,
    /// 1 to 65,536.
    pub shards: Vec<Vec<String>>,
    /// A PEM file of the certificates the router trusts for `https://` shard URLs (the CA that
    /// signed the nodes' certificates, or each node's own). Required for `https://` shards.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// A file holding the bearer token the router presents to the shards' nodes (one with the
    /// admin right on the ledger), readable by its owner only; none for nodes that need no
    /// token (insecure loopback).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The prefix of the transaction ids this router makes, unique among the routers of the
    /// ledger ever (default: random at each start).
    #[serde(default)]
    pub name: Option<String>,
    /// How long a transaction may stay prepared before the router's resolver decides it, ms
    /// (default 2,000): longer than any coordinator's round trips, so that only transactions
    /// whose coordinator was lost are resolved.
    #[serde(default = "default_resolve_after_ms")]
    pub resolve_after_ms: u64,
}

fn default_resolve_after_ms() -> u64 {
    2_000
}

/// One node of a replicated cluster (`docs/server.md`, "Cluster"): the ledger's writes go
/// through Raft (openraft, in `cairn-raft`), and every node applies them to its own copy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's number in the cluster (above zero).
    pub id: u64,
    /// Where this node's peer listener listens for the other nodes' Raft messages. Loopback
    /// only without `peer_ca` (plain HTTP: the cluster secret travels in its headers).
    pub listen: SocketAddr,
    /// Peer TLS: a PEM file of the certificates that sign the nodes' (a CA's, or every node's
    /// own). With it, the peer listener serves TLS with the `[tls]` certificate and key (which
    /// must name this node's peer address, as an IP address or DNS name), and this node
    /// reaches its peers over TLS, trusting only these certificates; peer addresses may then
    /// be any. Without it, peers talk plain HTTP on loopback only.
    #[serde(default)]
    pub peer_ca: Option<PathBuf>,
    /// A file holding the secret every node of the cluster shares (16 to 256 visible ASCII
    /// characters; surrounding white space is ignored). Readable by its owner only.
    pub secret_file: PathBuf,
    /// This node's Raft log: a directory of its own (a Cairn session).
    pub dir: PathBuf,
    /// The base URL this node's client API is reached at, which nodes that do not lead name
    /// to clients they send to the leader (default: `http://` or `https://` and `listen`).
    #[serde(default)]
    pub api: String,
    /// The first members, with this node among them: set on one node only, for the cluster's
    /// first start, which it then initializes with them (once the cluster has a membership
    /// this is ignored; members join later through `POST /v1/cluster/learners`).
    #[serde(default)]
    pub init: Vec<MemberConfig>,
    /// Let an admin cut this node's links to chosen peers (`POST /v1/cluster/faults`), for
    /// fault tests; refused unless `insecure_loopback`.
    #[serde(default)]
    pub fault_injection: bool,
    /// Where this node keeps its Raft snapshots (default: `dir` with `-snapshots` appended; not
    /// inside `dir`, which is a Cairn session's).
    #[serde(default)]
    pub snapshots_dir: Option<PathBuf>,
    /// Build a snapshot once this many log entries were applied since the last one, then
    /// purge the log behind it (default 100,000; 0: never, and the log is never purged).
    #[serde(default = "default_snapshot_every")]
    pub snapshot_every: u64,
    /// Log entries kept behind the newest snapshot (default 5,000).
    #[serde(default = "default_log_kept")]
    pub log_kept: u64,
}

fn default_snapshot_every() -> u64 {
    cairn_raft::NodeOptions::default().snapshot_every
}

fn default_log_kept() -> u64 {
    cairn_raft::NodeOptions::default().log_kept
}

impl ClusterConfig {
    /// Where this node keeps its snapshots: `snapshots_dir`, or `dir` with `-snapshots`.
    pub fn snapshots(&self) -> PathBuf {
        match &self.snapshots_dir {
            Some(d) => d.clone(),
            None => {
                let mut name = self.dir.as_os_str().to_os_string();
                name.push("-snapshots");
                PathBuf::from(name)
            }
        }
    }
}

/// A member of a cluster's first membership.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    /// Its number.
    pub id: u64,
    /// Its peer listener's address.
    pub addr: SocketAddr,
    /// Its client API's base URL.
    #[serde(default)]
    pub api: String,
}

/// TLS settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, PEM.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// Make a self-signed certificate at start for these names (its SHA-256 fingerprint is
    /// printed, for a client to pin). Development only.
    #[serde(default)]
    pub self_signed: Vec<String>,
}

/// The limits (`docs/server.md`, "Limits").
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body, bytes (413 beyond).
    pub body_bytes: usize,
    /// Most keys (and writes) in one request (413 beyond).
    pub keys_per_request: usize,
    /// Most requests served at once; more are answered 429 at once, not queued.
    pub concurrent_requests: usize,
    /// Longest a request may take, its body's arrival included, ms (408 beyond).
    pub request_timeout_ms: u64,
    /// Longest a connection may wait for a request's headers, or sit idle between requests,
    /// ms (then it is closed).
    pub idle_timeout_ms: u64,
    /// Most connections open at once; more wait in the listen queue.
    pub connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            body_bytes: 4 << 20,
            keys_per_request: 10_000,
            concurrent_requests: 256,
            request_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            connections: 1_024,
        }
    }
}

impl Limits {
    /// The request timeout.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// The idle timeout.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }
}

/// One ledger served.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerConfig {
    /// Its name in URLs (`/v1/ledgers/{name}/...`): 1 to 64 of `[A-Za-z0-9_-]`.
    pub name: String,
    /// Its directory (created with the ledger when missing).
    pub dir: PathBuf,
    /// Its tables (for a new ledger; an existing one keeps its own).
    pub tables: Vec<String>,
    /// Which of them are ordered (range proofs).
    #[serde(default)]
    pub ordered: Vec<String>,
    /// Versions kept provable besides the newest (`LedgerConfig::history`; default 0).
    #[serde(default)]
    pub history: u64,
    /// Most concurrent transactions sharing a version (`LedgerConfig::group`; default 64).
    #[serde(default = "default_group")]
    pub group: usize,
}

/// A token's hash and grants.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Who holds it (what logs show).
    pub name: String,
    /// SHA-256 of the token's text, 64 hex digits (`cairn-server token` prints both).
    pub sha256: String,
    /// What it may do.
    #[serde(default)]
    pub grants: Vec<GrantConfig>,
}

/// One grant.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantConfig {
    /// The ledger, or `*`.
    pub ledger: String,
    /// The tables, or `["*"]` (default).
    #[serde(default = "every_table")]
    pub tables: Vec<String>,
    /// The rights.
    pub rights: Vec<Right>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7443))
}

fn default_shutdown_ms() -> u64 {
    10_000
}

fn default_group() -> usize {
    64
}

fn every_table() -> Vec<String> {
    vec!["*".into()]
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: default_listen(),
            tls: None,
            insecure_loopback: false,
            limits: Limits::default(),
            ledgers: Vec::new(),
            tokens: Vec::new(),
            shutdown_timeout_ms: default_shutdown_ms(),
            log_json: false,
            cluster: None,
            router: None,
        }
    }
}

impl Config {
    /// The configuration in a TOML file. Errors: the file unreadable, or not a valid
    /// configuration (with the line).
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        Config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The configuration in TOML text.
    pub fn parse(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Checks everything that can be checked before listening: each ledger named once with a
    /// valid name and at least one table; grants naming known ledgers; the token hashes
    /// (through [`crate::auth::Grants::new`]); security: without `insecure_loopback`, TLS and at
    /// least one token are required; with it, the address must be a loopback one; limits
    /// above zero.
    pub fn check(&self) -> Result<(), String> {
        if let Some(r) = &self.router {
            self.check_router(r)?;
        } else if self.ledgers.is_empty() {
            return Err("no ledger configured ([[ledgers]])".into());
        }
        let mut names = std::collections::BTreeSet::new();
        if let Some(r) = &self.router {
            names.insert(r.ledger.as_str());
        }
        for l in &self.ledgers {
            let valid = !l.name.is_empty()
                && l.name.len() <= 64
                && l.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(format!(
                    "ledger name {:?}: 1 to 64 of letters, digits, '_' and '-'",
                    l.name
                ));
            }
            if !names.insert(l.name.as_str()) {
                return Err(format!("ledger {:?} is configured twice", l.name));
            }
            if l.tables.is_empty() {
                return Err(format!("ledger {:?} has no tables", l.name));
            }
            if let Some(o) = l.ordered.iter().find(|o| !l.tables.contains(o)) {
                return Err(format!(
                    "ledger {:?}: ordered table {o:?} is not one of its tables",
                    l.name
                ));
            }
        }
        for t in &self.tokens {
            for g in &t.grants {
                if g.ledger != "*" && !names.contains(g.ledger.as_str()) {
                    return Err(format!(
                        "token {:?} is granted rights on ledger {:?}, which is not configured",
                        t.name, g.ledger
                    ));
                }
            }
        }
        crate::auth::Grants::new(&self.tokens)?;
        if let Some(cluster) = &self.cluster {
            self.check_cluster(cluster)?;
        }
        let l = &self.limits;
        if l.body_bytes == 0
            || l.keys_per_request == 0
            || l.concurrent_requests == 0
            || l.request_timeout_ms == 0
            || l.idle_timeout_ms == 0
            || l.connections == 0
        {
            return Err("every limit must be above zero".into());
        }
        if self.insecure_loopback {
            if !self.listen.ip().is_loopback() {
                return Err(format!(
                    "--insecure-loopback serves plain HTTP on a loopback address only, not {}",
                    self.listen
                ));
            }
        } else {
            if self.tokens.is_empty() {
                return Err(
                    "no tokens configured: the server refuses to serve without authentication \
                     (add [[tokens]], see `cairn-server token`; or, for development on this \
                     host only, --insecure-loopback)"
                        .into(),
                );
            }
            match &self.tls {
                None => {
                    return Err(
                        "no TLS configured: the server refuses to serve tokens in the \
                         clear ([tls] with cert and key, or self_signed for development; or \
                         --insecure-loopback)"
                            .into(),
                    )
                }
                Some(tls) => {
                    let files = tls.cert.is_some() && tls.key.is_some();
                    let partial = tls.cert.is_some() != tls.key.is_some();
                    let self_signed = !tls.self_signed.is_empty();
                    // Exactly one of the two ways.
                    if partial || files == self_signed {
                        return Err("[tls] takes either cert and key, or self_signed".into());
                    }
                }
            }
        }
        Ok(())
    }

    fn check_router(&self, r: &RouterConfig) -> Result<(), String> {
        if !self.ledgers.is_empty() || self.cluster.is_some() {
            return Err(
                "a router ([router]) serves no ledger of its own: no [[ledgers]], no [cluster]"
                    .into(),
            );
        }
        if r.tables.is_empty() {
            return Err("[router] tables: the ledger's tables".into());
        }
        let count = r.shards.len();
        if !count.is_power_of_two() || count > 1 << cairn_proof::shard::SHARD_BITS_MAX {
            return Err(format!(
                "[router] shards: a power of two of shards, 1 to 65,536, not {count}"
            ));
        }
        for (i, nodes) in r.shards.iter().enumerate() {
            if nodes.is_empty() {
                return Err(format!("[router] shards: shard {i} names no node"));
            }
            for url in nodes {
                let loopback = ["http://127.0.0.1:", "http://[::1]:", "http://localhost:"]
                    .iter()
                    .any(|p| url.starts_with(p));
                let tls = url.starts_with("https://");
                if !loopback && !tls {
                    return Err(format!(
                        "[router] shards: {url:?}: https://, or http:// on a loopback address"
                    ));
                }
                if tls && r.ca.is_none() {
                    return Err(format!(
                        "[router] shards: {url:?}: an https:// shard needs [router] ca, the \
                         certificates to trust"
                    ));
                }
            }
        }
        if r.name
            .as_ref()
            .is_some_and(|n| n.is_empty() || n.len() > 40)
        {
            return Err("[router] name: 1 to 40 characters".into());
        }
        if r.resolve_after_ms == 0 {
            return Err("[router] resolve_after_ms must be above zero".into());
        }
        Ok(())
    }

    fn check_cluster(&self, c: &ClusterConfig) -> Result<(), String> {
        if self.ledgers.len() != 1 {
            return Err(format!(
                "a cluster node serves exactly one ledger, not {}",
                self.ledgers.len()
            ));
        }
        if c.id == 0 {
            return Err("[cluster] id must be above zero".into());
        }
        let plain_peers = "loopback addresses only without [cluster] peer_ca (peer TLS): \
                           the cluster secret travels in the peers' requests";
        if c.peer_ca.is_some() {
            let files = self.tls.as_ref().is_some_and(|t| t.cert.is_some());
            if !files {
                return Err(
                    "[cluster] peer_ca: peer TLS serves the [tls] cert and key, \
                            which must be set (a self-signed certificate made at start could \
                            not be in the peers' CA file)"
                        .into(),
                );
            }
        }
        let plain = c.peer_ca.is_none();
        if plain && !c.listen.ip().is_loopback() {
            return Err(format!("[cluster] listen {}: {plain_peers}", c.listen));
        }
        let mut ids = std::collections::BTreeSet::new();
        for m in &c.init {
            if m.id == 0 || !ids.insert(m.id) {
                return Err(format!(
                    "[cluster] init: member {} is zero or named twice",
                    m.id
                ));
            }
            if plain && !m.addr.ip().is_loopback() {
                return Err(format!(
                    "[cluster] init: member {} at {}: {plain_peers}",
                    m.id, m.addr
                ));
            }
        }
        if c.fault_injection && !self.insecure_loopback {
            return Err(
                "[cluster] fault_injection is for tests: only with insecure_loopback".into(),
            );
        }
        if !c.init.is_empty() && !ids.contains(&c.id) {
            return Err(format!(
                "[cluster] init names the first members, and this node ({}) must be one",
                c.id
            ));
        }
        Ok(())
    }

    /// The base URL of this node's client API as the cluster names it: `[cluster] api`, or
    /// made from `listen` and whether TLS is on.
    pub fn cluster_api(&self) -> String {
        match &self.cluster {
            Some(c) if !c.api.is_empty() => c.api.clone(),
            _ => {
                let scheme = if self.tls.is_some() { "https" } else { "http" };
                format!("{scheme}://{}", self.listen)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
listen = "0.0.0.0:7443"
[tls]
self_signed = ["localhost"]
[limits]
body_bytes = 1000
[[ledgers]]
name = "bank"
dir = "/tmp/bank"
tables = ["checking", "savings"]
[[tokens]]
name = "teller"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
grants = [{ ledger = "bank", rights = ["read", "write"] }]
"#;

    #[test]
    fn a_good_config_parses_with_defaults_and_checks() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.limits.body_bytes, 1000);
        assert_eq!(
            c.limits.keys_per_request,
            Limits::default().keys_per_request
        );
        assert_eq!(c.ledgers[0].group, 64);
        c.check().unwrap();
    }

    #[test]
    fn a_router_is_checked() {
        let router = r#"
listen = "127.0.0.1:7443"
insecure_loopback = true
[router]
ledger = "bank"
tables = ["checking"]
shards = [["http://127.0.0.1:7001", "http://127.0.0.1:7002"], ["http://127.0.0.1:7011"]]
"#;
        let c = Config::parse(router).unwrap();
        c.check().unwrap();
        assert_eq!(c.router.as_ref().unwrap().resolve_after_ms, 2_000);
        let three = router.replace(
            r#"["http://127.0.0.1:7011"]]"#,
            r#"["http://127.0.0.1:7011"], ["http://127.0.0.1:7021"]]"#,
        );
        let e = Config::parse(&three).unwrap().check().unwrap_err();
        assert!(e.contains("power of two"), "{e}");
        let remote = router.replace("http://127.0.0.1:7011", "http://10.0.0.1:7011");
        let e = Config::parse(&remote).unwrap().check().unwrap_err();
        assert!(e.contains("loopback"), "{e}");
        let tls = router.replace("http://127.0.0.1:7011", "https://10.0.0.1:7011");
        let e = Config::parse(&tls).unwrap().check().unwrap_err();
        assert!(e.contains("[router] ca"), "{e}");
        let with_ca = tls.replace("[router]\n", "[router]\nca = \"/tmp/ca.pem\"\n");
        Config::parse(&with_ca).unwrap().check().unwrap();
        let empty = router.replace(r#"["http://127.0.0.1:7011"]"#, "[]");
        let e = Config::parse(&empty).unwrap().check().unwrap_err();
        assert!(e.contains("names no node"), "{e}");
        let with_ledger =
            format!("{router}[[ledgers]]\nname = \"x\"\ndir = \"/tmp/x\"\ntables = [\"t\"]\n");
        let e = Config::parse(&with_ledger).unwrap().check().unwrap_err();
        assert!(e.contains("no ledger of its own"), "{e}");
    }

    #[test]
    fn insecure_setups_are_refused() {
        let no_tokens = GOOD.split("[[tokens]]").next().unwrap();
        let e = Config::parse(no_tokens).unwrap().check().unwrap_err();
        assert!(e.contains("without authentication"), "{e}");
        let no_tls = GOOD.replace("[tls]\nself_signed = [\"localhost\"]\n", "");
        let e = Config::parse(&no_tls).unwrap().check().unwrap_err();
        assert!(e.contains("no TLS"), "{e}");
        let mut c = Config::parse(GOOD).unwrap();
        c.insecure_loopback = true;
        let e = c.check().unwrap_err();
        assert!(e.contains("loopback"), "{e}");
        c.listen = "127.0.0.1:0".parse().unwrap();
        c.check().unwrap();
    }

    #[test]
    fn cluster_settings_are_checked() {
        let cluster = "[cluster]\nid = 1\nlisten = \"127.0.0.1:7001\"\n\
                       secret_file = \"/tmp/s\"\ndir = \"/tmp/raft\"\n\
                       init = [{ id = 1, addr = \"127.0.0.1:7001\" }, \
                       { id = 2, addr = \"127.0.0.1:7002\" }]\n";
        let c = Config::parse(&format!("{GOOD}{cluster}")).unwrap();
        c.check().unwrap();
        assert_eq!(c.cluster_api(), "https://0.0.0.0:7443");
        let wide = cluster.replace("listen = \"127.0.0.1:7001\"", "listen = \"0.0.0.0:7001\"");
        let e = Config::parse(&format!("{GOOD}{wide}"))
            .unwrap()
            .check()
            .unwrap_err();
        assert!(e.contains("loopback addresses only"), "{e}");
        // With peer TLS, any address; but only with a certificate from files.
        let peer_tls = wide.replace("id = 1\n", "id = 1\npeer_ca = \"/tmp/ca.pem\"\n");
        let e = Config::parse(&format!("{GOOD}{peer_tls}"))
            .unwrap()
            .check()
            .unwrap_err();
        assert!(e.contains("[tls] cert and key"), "{e}");
        let files = GOOD.replace(
            "self_signed = [\"localhost\"]",
            "cert = \"/tmp/c.pem\"\nkey = \"/tmp/k.pem\"",
        );
        let remote = peer_tls.replace("127.0.0.1:7002", "10.0.0.2:7002");
        Config::parse(&format!("{files}{remote}"))
            .unwrap()
            .check()
            .unwrap();
        let stranger = cluster.replace("id = 1\n", "id = 3\n");
        let e = Config::parse(&format!("{GOOD}{stranger}"))
            .unwrap()
            .check()
            .unwrap_err();
        assert!(e.contains("must be one"), "{e}");
        let two = GOOD.replace(
            "[[tokens]]",
            "[[ledgers]]\nname = \"b\"\ndir = \"/tmp/b\"\ntables = [\"t\"]\n[[tokens]]",
        );
        let e = Config::parse(&format!("{two}{cluster}"))
            .unwrap()
            .check()
            .unwrap_err();
        assert!(e.contains("exactly one ledger"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_grants_are_refused() {
        let typo = GOOD.replace("body_bytes", "body_byte");
        assert!(Config::parse(&typo).is_err());
        let bad = GOOD.replace("ledger = \"bank\"", "ledger = \"nope\"");
        let e = Config::parse(&bad).unwrap().check().unwrap_err();
        assert!(e.contains("not configured"), "{e}");
        let right = GOOD.replace("\"write\"", "\"delete\"");
        assert!(Config::parse(&right).is_err());
    }
}

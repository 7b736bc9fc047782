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
        if self.ledgers.is_empty() {
            return Err("no ledger configured ([[ledgers]])".into());
        }
        let mut names = std::collections::BTreeSet::new();
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

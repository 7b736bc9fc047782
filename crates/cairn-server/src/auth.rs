//! Who may do what: bearer tokens, stored only as their SHA-256, and the grants each holds
//! (read, write, admin) per ledger and per table.
//!
//! Owns: token generation ([`new_token`]) and hashing ([`token_hash`]), [`Grants`], [`Right`], [`Principal`] and the check
//! [`Principal::allows`]. May call: `config` (the grants as written), `sha2`, `getrandom`.
//! Must never touch: the ledger, HTTP (the router takes the `Authorization` header and asks).
//!
//! A token is 32 random bytes written as `cairn_` and 64 hex digits. The server keeps the
//! SHA-256 of each (in its config file, so a leaked config gives no token), hashes what a
//! request presents, and looks the hash up: an attacker who can time the lookup learns bits
//! of a hash, not of a token. Tokens and their hashes are never logged; a principal is logged
//! by its name.

use std::collections::HashMap;

use sha2::{Digest as _, Sha256};

use crate::config::TokenConfig;

/// The prefix of every token (so a scanner can recognise a leaked one).
pub const TOKEN_PREFIX: &str = "cairn_";

/// What a grant allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Right {
    /// Reads with receipts, promises and their verification, digests, consistency proofs,
    /// ranges.
    Read,
    /// Writes (`put`, `transact`).
    Write,
    /// Everything, plus the export for auditors and `/metrics`.
    Admin,
}

/// A new random token. Errors: the system's random source failing.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{TOKEN_PREFIX}{}", hex::encode(bytes)))
}

/// The hash the server keeps of `token`: SHA-256 of its text, 64 hex digits.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// One grant: rights on some tables of one ledger (`*` for every ledger or table).
#[derive(Clone, Debug)]
struct Grant {
    ledger: String,
    tables: Vec<String>,
    rights: Vec<Right>,
}

impl Grant {
    fn covers_ledger(&self, ledger: &str) -> bool {
        self.ledger == "*" || self.ledger == ledger
    }

    fn covers_table(&self, table: &str) -> bool {
        self.tables.iter().any(|t| t == "*" || t == table)
    }

    fn gives(&self, right: Right) -> bool {
        self.rights.iter().any(|&r| r == right || r == Right::Admin)
    }
}

/// A client the server knows: its name and grants.
#[derive(Clone, Debug)]
pub struct Principal {
    /// The name the config gives it (what logs show).
    pub name: String,
    grants: Vec<Grant>,
}

impl Principal {
    /// Whether the principal has `right` on `table` of `ledger` (`table: None`: on the ledger
    /// as a whole, which any grant of the right on one of its tables gives: digests and
    /// consistency proofs say nothing of a table's contents).
    pub fn allows(&self, ledger: &str, table: Option<&str>, right: Right) -> bool {
        self.grants.iter().any(|g| {
            g.covers_ledger(ledger) && g.gives(right) && table.is_none_or(|t| g.covers_table(t))
        })
    }

    /// A principal with every right: what `--insecure-loopback` without tokens serves.
    pub fn anonymous_admin() -> Principal {
        Principal {
            name: "anonymous (insecure loopback)".into(),
            grants: vec![Grant {
                ledger: "*".into(),
                tables: vec!["*".into()],
                rights: vec![Right::Admin],
            }],
        }
    }
}

/// Every token the server knows, by the SHA-256 of its text.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    by_hash: HashMap<[u8; 32], Principal>,
}

impl Grants {
    /// The grants of a config's tokens. Errors: a hash that is not 64 hex digits, or named
    /// twice.
    pub fn new(tokens: &[TokenConfig]) -> Result<Grants, String> {
        let mut by_hash = HashMap::new();
        for t in tokens {
            let bytes = hex::decode(&t.sha256)
                .map_err(|_| format!("token {:?}: sha256 must be 64 hex digits", t.name))?;
            let hash: [u8; 32] = bytes
                .try_into()
                .map_err(|_| format!("token {:?}: sha256 must be 64 hex digits", t.name))?;
            let principal = Principal {
                name: t.name.clone(),
                grants: t
                    .grants
                    .iter()
                    .map(|g| Grant {
                        ledger: g.ledger.clone(),
                        tables: g.tables.clone(),
                        rights: g.rights.clone(),
                    })
                    .collect(),
            };
            if by_hash.insert(hash, principal).is_some() {
                return Err(format!("token {:?}: its hash is listed twice", t.name));
            }
        }
        Ok(Grants { by_hash })
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The principal a presented token names, if any.
    pub fn principal(&self, token: &str) -> Option<&Principal> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.by_hash.get(&hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GrantConfig;

    fn grants() -> (String, Grants) {
        let token = new_token().unwrap();
        let config = TokenConfig {
            name: "teller".into(),
            sha256: token_hash(&token),
            grants: vec![GrantConfig {
                ledger: "bank".into(),
                tables: vec!["checking".into()],
                rights: vec![Right::Read],
            }],
        };
        (token, Grants::new(&[config]).unwrap())
    }

    #[test]
    fn tokens_are_found_by_hash_and_grants_are_exact() {
        let (token, grants) = grants();
        assert!(token.starts_with(TOKEN_PREFIX) && token.len() == TOKEN_PREFIX.len() + 64);
        let p = grants.principal(&token).expect("known");
        assert!(p.allows("bank", Some("checking"), Right::Read));
        assert!(p.allows("bank", None, Right::Read));
        assert!(!p.allows("bank", Some("savings"), Right::Read));
        assert!(!p.allows("bank", Some("checking"), Right::Write));
        assert!(!p.allows("other", Some("checking"), Right::Read));
        assert!(grants.principal("cairn_wrong").is_none());
        // A token differing in one character is unknown.
        let mut near = token.clone();
        near.pop();
        near.push('x');
        assert!(grants.principal(&near).is_none());
    }

    #[test]
    fn bad_hashes_are_refused() {
        let bad = TokenConfig {
            name: "x".into(),
            sha256: "abcd".into(),
            grants: vec![],
        };
        assert!(Grants::new(&[bad]).is_err());
    }
}

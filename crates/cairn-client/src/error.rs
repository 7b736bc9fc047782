//! The client's errors: what went wrong on the way (transport, the server's refusal, an answer
//! that does not decode) and, apart, what a verification caught ([`Lie`]).
//!
//! Owns: [`Error`], [`Lie`], and how the verifier's errors map to lies. May call:
//! `cairn_proof` (its error types). Must never touch: the network, files.
//!
//! A [`Lie`] is never a transient failure: the server (or whatever stands between it and the
//! client) answered something its own proofs refute. Retrying will not help; report it.

use std::path::PathBuf;

use cairn_proof::{Digest, ReceiptVerifyError, VerifyError};

/// Everything a client call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The client's own configuration is unusable (a bad URL, ledger name or certificate).
    #[error("client configuration: {0}")]
    Config(String),
    /// The call's input is unusable (an empty batch, a key expected with two values).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The request did not reach the server or its answer did not come back (connection,
    /// TLS, timeout).
    #[error("transport: {}", chain(.0))]
    Transport(#[source] reqwest::Error),
    /// The server refused the request: its HTTP status and its error body's stable code and
    /// message (`docs/server.md`, "Errors"); `expectation_failed` (409) is a transaction whose
    /// expectations no longer hold.
    #[error("the server answered {status} {code}: {message}")]
    Server {
        /// The HTTP status.
        status: u16,
        /// The stable, machine-readable code (empty when the body had none).
        code: String,
        /// What went wrong, as the server says.
        message: String,
    },
    /// An answer that is not the message it should be (not protobuf, truncated, too large).
    #[error("the answer does not decode: {0}")]
    Decode(String),
    /// The answer is refuted by its proofs: see [`Lie`].
    #[error("the server's answer is refuted: {0}")]
    Lie(#[from] Lie),
    /// The trusted-digest file could not be read or written.
    #[error("the trusted digest file {}: {source}", path.display())]
    Persist {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether this is a transaction refused because a key no longer holds the value expected
    /// (409 `expectation_failed`): read again and retry.
    pub fn is_expectation_failed(&self) -> bool {
        matches!(self, Error::Server { status: 409, code, .. } if code == "expectation_failed")
    }

    /// The lie, if the error is one.
    pub fn lie(&self) -> Option<&Lie> {
        match self {
            Error::Lie(l) => Some(l),
            _ => None,
        }
    }
}

/// What a verification caught: an answer that the proofs shipped with it (or the digest the
/// client trusts) refute.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Lie {
    /// The receipt does not prove the value answered for a key (or, for a write, the value
    /// written): the value was altered.
    #[error("table {table:?}, key {}: {detail}", hex::encode(key))]
    AlteredValue {
        /// The table.
        table: String,
        /// The key.
        key: Vec<u8>,
        /// What disagrees.
        detail: String,
    },
    /// A receipt of an older version offered as the newest (or as the version asked): the
    /// value may once have been true, but is not the one asked for.
    #[error("a receipt of version {version} offered for version {expected}")]
    StaleValue {
        /// The version the receipt proves.
        version: u64,
        /// The version the answer claimed (the digest's newest for a fresh read).
        expected: u64,
    },
    /// A digest whose history does not extend the trusted one (same size, another root; or
    /// a consistency proof that fails): the server shows another history than before.
    #[error(
        "forked history: trusted {}, offered {}: {detail}",
        show(trusted),
        show(offered)
    )]
    ForkedHistory {
        /// The digest the client trusts.
        trusted: Digest,
        /// The digest offered.
        offered: Digest,
        /// What failed.
        detail: String,
    },
    /// A fresh answer at a version older than one the client already trusted before asking:
    /// the server's history went back.
    #[error("rolled-back history: offered {offered} versions, {trusted} were trusted already")]
    RolledBack {
        /// The size the client trusted when it asked.
        trusted: u64,
        /// The size offered.
        offered: u64,
    },
    /// A range answer that its proof does not show complete: a key left out or added, or a
    /// value or link altered.
    #[error("range of table {table:?}: {detail}")]
    IncompleteRange {
        /// The table.
        table: String,
        /// What failed.
        detail: String,
    },
    /// A proof that does not decode or does not check, or an answer whose shape does not fit
    /// the question (other tables, other keys, a missing receipt).
    #[error("bad proof: {0}")]
    BadProof(String),
}

/// A digest for people: its size and root.
pub(crate) fn show(d: &Digest) -> String {
    format!("(size {}, root {})", d.size, hex::encode(d.root))
}

/// An error with its causes, so that none is hidden.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    // Bounded: error chains are short; stop at 8 in any case.
    for _ in 0..8 {
        let Some(c) = cause else { break };
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// The lie a receipt's failed check shows: `table_keys` gives, per table name, the keys
/// claimed (to name the key of a failed claim).
pub(crate) fn receipt_lie(e: ReceiptVerifyError, keys_of: impl Fn(&str) -> Vec<Vec<u8>>) -> Lie {
    match e {
        ReceiptVerifyError::Stale { version, size } => Lie::StaleValue {
            version,
            expected: size,
        },
        ReceiptVerifyError::Trie { table, source } => match claim_of(&source) {
            Some(claim) => Lie::AlteredValue {
                key: keys_of(&table).get(claim).cloned().unwrap_or_default(),
                table,
                detail: format!("the receipt refutes it: {source}"),
            },
            None => Lie::BadProof(format!("table {table:?}: {source}")),
        },
        other => Lie::BadProof(other.to_string()),
    }
}

/// The claim a trie check refuted on its value (not on the proof's shape).
fn claim_of(e: &VerifyError) -> Option<usize> {
    match e {
        VerifyError::ValueMismatch { claim }
        | VerifyError::Absent { claim }
        | VerifyError::Present { claim } => Some(*claim),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_errors_map_to_lies() {
        let stale = receipt_lie(
            ReceiptVerifyError::Stale {
                version: 3,
                size: 5,
            },
            |_| vec![],
        );
        assert_eq!(
            stale,
            Lie::StaleValue {
                version: 3,
                expected: 5
            }
        );
        let altered = receipt_lie(
            ReceiptVerifyError::Trie {
                table: "t".into(),
                source: VerifyError::ValueMismatch { claim: 1 },
            },
            |_| vec![b"a".to_vec(), b"b".to_vec()],
        );
        assert!(matches!(altered, Lie::AlteredValue { ref key, .. } if key == b"b"));
        let bad = receipt_lie(
            ReceiptVerifyError::Trie {
                table: "t".into(),
                source: VerifyError::RootMismatch,
            },
            |_| vec![],
        );
        assert!(matches!(bad, Lie::BadProof(_)));
    }
}

//! A verifiable ledger on Cairn: named authenticated durable tables committed together as
//! numbered versions, an append-only history tree over the versions (RFC 9162) whose digest a
//! client keeps, and reads that come with a receipt the client checks against that digest.
//!
//! ```
//! use cairn_ledger::{Ledger, LedgerBatch, LedgerConfig};
//! use cairn_proof::{verify_consistency, verify_receipt, Claim, TableClaims};
//! # let dir = tempfile::tempdir().unwrap();
//! let ledger = Ledger::open(dir.path(), LedgerConfig::new(["checking", "savings"]))?;
//! let mut batch = LedgerBatch::new();
//! batch.insert("checking", "alice", "50").insert("savings", "alice", "1000");
//! let first = ledger.write(&batch)?.expect("a version");
//! first.durability.wait()?;
//! // A client trusts this digest (say, it was published and signed).
//! let trusted = first.digest;
//!
//! ledger.write(LedgerBatch::new().insert("checking", "alice", "70"))?;
//! // A read with its receipt: the value is the current one, or the receipt fails.
//! let read = ledger.read(&[("checking", &["alice", "bob"][..])])?;
//! assert_eq!(read.values[0][0].as_deref(), Some(&b"70"[..]));
//! // The client checks that the new digest extends the one it trusts...
//! let proof = ledger.prove_consistency(trusted.size, read.digest.size)?;
//! verify_consistency(&trusted, &read.digest, &proof).unwrap();
//! // ...then the answers against it.
//! let claims = [Claim::present(b"alice", b"70"), Claim::absent(b"bob")];
//! let reads = [TableClaims { table: "checking", claims: &claims }];
//! verify_receipt(&read.receipt, &reads, &read.digest).unwrap();
//! // A stale answer (the older value with its older, valid proof) is refused.
//! let old = [Claim::present(b"alice", b"50")];
//! assert!(verify_receipt(&read.receipt, &[TableClaims { table: "checking", claims: &old }],
//!     &read.digest).is_err());
//! # Ok::<(), cairn_ledger::Error>(())
//! ```
//!
//! The design, the commit protocol and the threat model are in `docs/ledger.md`; the formats
//! in `docs/format/ledger.md` and `docs/format/history.md`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod audit;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod history;
mod ledger;
mod links;
mod records;

pub use audit::{AuditOptions, AuditProblem, AuditProgress, AuditReport};
pub use error::{Error, Result};
pub use ledger::{
    check_export, meta_hash, Committed, ExportSummary, ImportChecks, Ledger, LedgerBatch,
    LedgerConfig, LedgerExport, LedgerTx, Promise, ProvedCommit, ProvedKeys, RangeRead,
    TableWitness, Values, VerifiedRead, VersionInfo, WindowInfo, EXPORT_MAGIC, FRAME_BYTES_MAX,
    FRAME_BYTES_TARGET, HISTORY_TABLE, META_BYTES_MAX, TRANSACT_ATTEMPTS_MAX,
};

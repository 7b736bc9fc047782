//! `cairn-client`: the verifying client of Cairn's ledger server (`cairn-server`).
//!
//! The server answers with proofs; this client checks every one of them against a digest of
//! the ledger's history that it trusts, so a server that lies (or anything between it and
//! the client) is caught, not believed:
//!
//! | call | what is checked |
//! | --- | --- |
//! | [`Client::get`] | the receipt proves each value (or absence) at the newest version |
//! | [`Client::get_at`] | the receipt proves the values at the version asked |
//! | [`Client::get_promise`], [`Client::verify_promises`] | later, in a batch: each version's receipt proves the values promised |
//! | [`Client::put`], [`Client::transact`] | the receipts prove the keys written hold the new values at the version made, and the keys read held the values seen just before it |
//! | [`Client::range`], [`Client::range_at`] | the range proof shows no key of the range left out or added |
//! | [`Client::digest`] and every answer's digest | its history extends the trusted one (RFC 9162 consistency proof) before it is adopted |
//!
//! A refuted answer is an [`Error::Lie`], whose [`Lie`] says which lie: an altered value, a
//! stale value (an older version's valid receipt offered as fresh), a forked or rolled-back
//! history, an incomplete range, or a bad proof.
//!
//! **Trust.** The client starts from the digest in its digest file
//! ([`ClientBuilder::digest_file`]), else one the caller gives ([`ClientBuilder::trust`]),
//! else the first it is shown (*trust on first use*: that first digest is only as good as
//! the server was honest at that moment). From there, a newer digest is adopted only with a
//! consistency proof, and persisted (atomically) before it is trusted.
//!
//! **Transport.** HTTP/1.1 or HTTP/2 through `reqwest`, with rustls on `ring`; protobuf
//! bodies (`cairn_wire`); `Authorization: Bearer`; `https://`, or `http://` to a
//! loopback host only.
//!
//! ```no_run
//! use cairn_client::{Batch, Client, Lie, Error};
//! # async fn demo() -> Result<(), Error> {
//! let pem = std::fs::read("cert.pem").unwrap();
//! let client = Client::builder("https://localhost:7443", "bank")
//!     .token("cairn_...")
//!     .root_certificate_pem(pem)
//!     .digest_file("bank.digest")
//!     .build()?;
//! let mut batch = Batch::new();
//! batch.insert("checking", "alice", "70");
//! let made = client.put(&batch).await?;
//! let read = client.get(&[("checking", &["alice", "bob"][..])]).await?;
//! assert_eq!(read.values[0][0].as_deref(), Some(&b"70"[..]));
//! assert!(read.version >= made.version);
//! match client.get(&[("checking", &["alice"][..])]).await {
//!     Err(Error::Lie(Lie::StaleValue { .. })) => eprintln!("the server served an old value"),
//!     other => { other?; }
//! }
//! # Ok(()) }
//! ```
//!
//! The same calls block with [`ClientBuilder::build_blocking`] ([`blocking::Client`]). The
//! `cairn-client` command (`src/main.rs`) wraps it: `get`, `put` and `digest`.
//!
//! Modules, each owning one concept (a module calls only those listed before it): `error`
//! (the errors and lies); `types` (batches and answers); `trust` (the trusted digest and its
//! file); `http` (the transport); `verify` (the checks of answers, pure); `client` (the
//! calls and the digest's life cycle); [`blocking`].
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod across;
pub mod blocking;
mod client;
mod error;
mod http;
mod trust;
mod types;
mod verify;

pub use across::{GlobalRoot, ShardPart};
pub use cairn_proof::Digest;
pub use client::{
    Client, ClientBuilder, CONNECT_TIMEOUT_DEFAULT, RESPONSE_BYTES_MAX_DEFAULT, TIMEOUT_DEFAULT,
};
pub use error::{Error, Lie};
pub use types::{Batch, Commit, Promised, Range, Read, ReadAcross, Values};

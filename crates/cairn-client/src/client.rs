//! The verifying client: every call's answer checked against the digest it trusts, and a
//! newer digest adopted only once its history is shown to extend the trusted one.
//!
//! Owns: [`ClientBuilder`], [`Client`] and its calls, and the digest's life cycle (trust on
//! first use or as given, consistency before adoption, fork and rollback detection). May
//! call: `http` (requests), `verify` (the checks of answers), `trust` (the digest kept),
//! `types`, `error`. Must never touch: sockets or TLS directly, the proofs' encodings (the
//! verifier's own code reads them).
//!
//! **A call** reads the trusted size first (its *floor*), asks, then, holding the trust's
//! lock: checks the digest of the answer against the trusted one (same size: same root, else
//! a fork; larger: a consistency proof fetched and checked, else a fork; smaller than the
//! floor: a rollback; between the floor and the trusted size, which a concurrent call raised:
//! a consistency proof to the trusted one), checks the answer's proofs against it, and only
//! then adopts it (persisting it first when a file is named). So an answer that fails leaves
//! the trust as it was, and adoptions happen one at a time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn_proof::{verify_consistency, ConsistencyProof, Digest};
use cairn_wire as wire;

use crate::error::{Error, Lie};
use crate::http::{Http, HttpOptions};
use crate::trust::Trust;
use crate::types::{Batch, Commit, Expected, Promised, Range, Read, ReadAcross};
use crate::verify::{self, Freshness, Kinds};

/// How long a request may take by default, its answer included.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// How long a connection may take to open by default.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// The largest answer read by default, in bytes (a server's 10,000-key answer with its
/// receipt is a few MiB).
pub const RESPONSE_BYTES_MAX_DEFAULT: usize = 64 << 20;

/// How a [`Client`] reaches its ledger and what it trusts. Start with [`Client::builder`].
#[derive(Clone)]
pub struct ClientBuilder {
    url: String,
    ledger: String,
    token: Option<String>,
    ca_pem: Option<Vec<u8>>,
    digest_file: Option<PathBuf>,
    trusted: Option<Digest>,
    kinds: Kinds,
    timeout: Duration,
    connect_timeout: Duration,
    max_response_bytes: usize,
    shard: Option<u32>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("ClientBuilder")
            .field("url", &self.url)
            .field("ledger", &self.ledger)
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("digest_file", &self.digest_file)
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// A client of ledger `ledger` at the server `url` (`https://host:port`, or `http://` to a
    /// loopback host; a path prefix is kept).
    pub fn new(url: impl Into<String>, ledger: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            ledger: ledger.into(),
            token: None,
            ca_pem: None,
            digest_file: None,
            trusted: None,
            kinds: Kinds::new(),
            timeout: TIMEOUT_DEFAULT,
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            max_response_bytes: RESPONSE_BYTES_MAX_DEFAULT,
            shard: None,
        }
    }

    /// Through a router over shards (`docs/server.md`, "Router"): a client of shard `shard`'s
    /// ledger alone (the router's `<ledger>/shards/<shard>/` endpoints), with that shard's
    /// digest as its trusted state. Every key it reads or writes must belong to the shard.
    pub fn shard(mut self, shard: u32) -> ClientBuilder {
        self.shard = Some(shard);
        self
    }

    /// The bearer token to present (`Authorization: Bearer <token>`).
    pub fn token(mut self, token: impl Into<String>) -> ClientBuilder {
        self.token = Some(token.into());
        self
    }

    /// Trust only these root certificates (PEM, one or more), say the server's self-signed
    /// one. Without, the platform's verifier and roots.
    pub fn root_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> ClientBuilder {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Keep the trusted digest in this file: loaded at [`ClientBuilder::build`] when it
    /// exists (it then wins over [`ClientBuilder::trust`]), replaced atomically at each
    /// adoption.
    pub fn digest_file(mut self, path: impl Into<PathBuf>) -> ClientBuilder {
        self.digest_file = Some(path.into());
        self
    }

    /// Start by trusting `digest` (say, one published and signed), unless the digest file
    /// holds one. Without either, the client trusts the first digest it is shown (trust on
    /// first use), which only the server's honesty at that moment vouches for.
    pub fn trust(mut self, digest: Digest) -> ClientBuilder {
        self.trusted = Some(digest);
        self
    }

    /// Declares these tables ordered (the ledger's `ordered`): their answers must come with
    /// proved links (see the module doc of `verify`, and [`Client::range`]).
    pub fn ordered_tables<S: Into<String>>(mut self, tables: impl IntoIterator<Item = S>) -> Self {
        self.kinds
            .extend(tables.into_iter().map(|t| (t.into(), true)));
        self
    }

    /// Declares these tables plain (not ordered): their answers must come without links.
    pub fn plain_tables<S: Into<String>>(mut self, tables: impl IntoIterator<Item = S>) -> Self {
        self.kinds
            .extend(tables.into_iter().map(|t| (t.into(), false)));
        self
    }

    /// The longest a request may take, its answer included (default [`TIMEOUT_DEFAULT`]).
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// The longest a connection may take to open (default [`CONNECT_TIMEOUT_DEFAULT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// The largest answer read, in bytes (default [`RESPONSE_BYTES_MAX_DEFAULT`]).
    pub fn max_response_bytes(mut self, bytes: usize) -> ClientBuilder {
        self.max_response_bytes = bytes;
        self
    }

    /// The client. Errors: [`Error::Config`] (the URL, the ledger's name, the certificate),
    /// [`Error::Persist`] (a digest file that cannot be read or holds no digest).
    pub fn build(self) -> Result<Client, Error> {
        let http = Http::new(HttpOptions {
            url: &self.url,
            ledger: &self.ledger,
            token: self.token,
            ca_pem: self.ca_pem.as_deref(),
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            max_response_bytes: self.max_response_bytes,
            shard: self.shard,
        })?;
        let trust = Trust::open(self.digest_file, self.trusted)?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                trust,
                kinds: self.kinds,
            }),
        })
    }

    /// The blocking client (with its own single-threaded runtime). Errors: as
    /// [`ClientBuilder::build`], and [`Error::Config`] when called inside an async runtime.
    pub fn build_blocking(self) -> Result<crate::blocking::Client, Error> {
        crate::blocking::Client::new(self)
    }
}

/// The verifying client of one ledger: cheap to clone (clones share the connection pool and
/// the trusted digest) and safe to use from many tasks at once.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: Http,
    trust: Trust,
    kinds: Kinds,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("trusted", &self.trusted())
            .finish_non_exhaustive()
    }
}

/// The tables and keys of a read, owned, in the order asked.
type Asked = Vec<(String, Vec<Vec<u8>>)>;

impl Client {
    /// A builder for a client of `ledger` at `url`.
    pub fn builder(url: impl Into<String>, ledger: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url, ledger)
    }

    /// The digest trusted now (`None` before the first, with no file and none given).
    pub fn trusted(&self) -> Option<Digest> {
        self.inner.trust.current()
    }

    /// The server's newest digest, checked against the trusted one and adopted: returns the
    /// digest trusted after. Errors: [`Lie::ForkedHistory`], [`Lie::RolledBack`], and the
    /// transport's.
    pub async fn digest(&self) -> Result<Digest, Error> {
        let floor = self.inner.trust.floor();
        let answer: wire::Digest = self.inner.http.get("digest", &[]).await?;
        let offered = verify::digest_of(Some(&answer), "the digest")?;
        self.with_digest(offered, floor, false, |_| Ok(())).await?;
        Ok(self.trusted().unwrap_or(offered))
    }

    /// Reads `keys` of each table named (each table once), as of the newest version, and
    /// checks the receipt proves every value (or absence) fresh: as of the newest version of
    /// a digest that extends the trusted one. Errors: [`Lie::AlteredValue`],
    /// [`Lie::StaleValue`], [`Lie::ForkedHistory`], [`Lie::RolledBack`], [`Lie::BadProof`],
    /// the server's (404 `no_such_version` on an empty ledger).
    pub async fn get<K: AsRef<[u8]>>(&self, reads: &[(&str, &[K])]) -> Result<Read, Error> {
        self.read(reads, Freshness::Fresh).await
    }

    /// Reads as of `version` (within the server's window), checked against the newest digest
    /// with [`cairn_proof::verify_receipt_at`]: the values the keys held then. Errors: as
    /// [`Client::get`]; the server's 410 `version_pruned` for a version out of its window.
    pub async fn get_at<K: AsRef<[u8]>>(
        &self,
        version: u64,
        reads: &[(&str, &[K])],
    ) -> Result<Read, Error> {
        if version == 0 {
            return Err(Error::Invalid("versions start at 1".into()));
        }
        self.read(reads, Freshness::At(version)).await
    }

    async fn read<K: AsRef<[u8]>>(
        &self,
        reads: &[(&str, &[K])],
        freshness: Freshness,
    ) -> Result<Read, Error> {
        let asked = asked_of(reads)?;
        let floor = self.inner.trust.floor();
        let request = wire::GetRequest {
            tables: wire_keys(&asked),
            version: match freshness {
                Freshness::Fresh => 0,
                Freshness::At(v) => v,
            },
            promise: false,
            lift: false,
        };
        let answer: wire::ReadResponse = self.inner.http.post("get", &request).await?;
        let offered = verify::digest_of(answer.digest.as_ref(), "the read")?;
        let kinds = &self.inner.kinds;
        let values = self
            .with_digest(offered, floor, false, |d| {
                verify::check_read(&asked, &answer, d, freshness, kinds)
            })
            .await?;
        Ok(Read {
            version: answer.version,
            digest: offered,
            values,
        })
    }

    /// Reads `keys` without a receipt: a promise of the values as of the version the server
    /// names, to prove later with [`Client::verify_promises`]. Checked now: the shape, and that
    /// the version is not older than the trusted one ([`Lie::RolledBack`]).
    pub async fn get_promise<K: AsRef<[u8]>>(
        &self,
        reads: &[(&str, &[K])],
    ) -> Result<Promised, Error> {
        let asked = asked_of(reads)?;
        let floor = self.inner.trust.floor();
        let request = wire::GetRequest {
            tables: wire_keys(&asked),
            version: 0,
            promise: true,
            lift: false,
        };
        let answer: wire::ReadResponse = self.inner.http.post("get", &request).await?;
        if answer.version < floor {
            return Err(Lie::RolledBack {
                trusted: floor,
                offered: answer.version,
            }
            .into());
        }
        let values = verify::check_promise(&asked, &answer)?;
        Ok(Promised {
            version: answer.version,
            tables: asked,
            values,
        })
    }

    /// Proves a batch of promises in one request (the `verify` endpoint): one receipt per
    /// version, each checked against the server's newest digest (once shown to extend the
    /// trusted one) with [`cairn_proof::verify_receipt_at`], claiming exactly the values
    /// promised. Errors: [`Lie::AlteredValue`] (a value promised that the version did not
    /// hold), [`Lie::StaleValue`], [`Lie::ForkedHistory`], [`Lie::RolledBack`],
    /// [`Lie::BadProof`]; the server's 410 for a version out of its window;
    /// [`Error::Invalid`] for a promise whose values do not fit its keys.
    pub async fn verify_promises(&self, promises: &[Promised]) -> Result<(), Error> {
        let mut groups = group_promises(promises)?;
        if let Some(empty) = groups.remove(&0) {
            check_empty_version(&empty)?;
        }
        if groups.is_empty() {
            return Ok(());
        }
        let request = wire::VerifyRequest {
            promises: groups
                .iter()
                .flat_map(|(&version, tables)| {
                    tables.iter().map(move |(table, keys)| wire::Promise {
                        version,
                        table: table.clone(),
                        keys: keys.keys().cloned().collect(),
                    })
                })
                .collect(),
        };
        let floor = self.inner.trust.floor();
        let answer: wire::VerifyResponse = self.inner.http.post("verify", &request).await?;
        if answer.reads.len() != groups.len() {
            return Err(Lie::BadProof(format!(
                "{} versions promised, {} proved",
                groups.len(),
                answer.reads.len()
            ))
            .into());
        }
        let first = answer.reads.first().and_then(|p| p.read.as_ref());
        let offered = verify::digest_of(first.and_then(|r| r.digest.as_ref()), "the proofs")?;
        let kinds = &self.inner.kinds;
        self.with_digest(offered, floor, false, |d| {
            for ((&version, expected), proved) in groups.iter().zip(&answer.reads) {
                verify::check_proved(proved, expected, d, Freshness::At(version), kinds)?;
            }
            Ok(())
        })
        .await
    }

    /// Writes `batch` as one version (no expectations: see [`Client::transact`]) and checks
    /// the receipt proves every key written holds its new value at that version, which
    /// extends the trusted history. Errors: [`Lie::AlteredValue`], [`Lie::RolledBack`] (a
    /// version the client already knew), [`Lie::ForkedHistory`], [`Lie::BadProof`];
    /// [`Error::Invalid`] for an empty batch or one with expectations.
    pub async fn put(&self, batch: &Batch) -> Result<Commit, Error> {
        if batch.has_expectations() {
            return Err(Error::Invalid(
                "put takes no expectations: use transact".into(),
            ));
        }
        if batch.is_empty() {
            return Err(Error::Invalid("a batch writes at least one key".into()));
        }
        let floor = self.inner.trust.floor();
        let request = wire::PutRequest {
            tables: batch.wire_writes(),
            meta: batch.meta_bytes().to_vec(),
            prove: true,
        };
        let answer: wire::CommitResponse = self.inner.http.post("put", &request).await?;
        self.check_commit(&answer, &batch.expected_writes(), &Expected::new(), floor)
            .await
    }

    /// Commits `batch` if every key it expects still holds the value seen (else the server's
    /// 409, [`Error::is_expectation_failed`]: nothing was written), and checks both receipts:
    /// the keys read held those values as of the version before, the keys written hold their
    /// new values as of the version made. Errors: as [`Client::put`].
    pub async fn transact(&self, batch: &Batch) -> Result<Commit, Error> {
        if batch.is_empty() {
            return Err(Error::Invalid("a batch writes at least one key".into()));
        }
        let reads = batch.expected_reads()?;
        let floor = self.inner.trust.floor();
        let request = wire::TransactRequest {
            expects: batch.wire_expects(),
            tables: batch.wire_writes(),
            meta: batch.meta_bytes().to_vec(),
            prove: true,
        };
        let answer: wire::CommitResponse = self.inner.http.post("transact", &request).await?;
        self.check_commit(&answer, &batch.expected_writes(), &reads, floor)
            .await
    }

    /// Through a router over shards (`docs/server.md`, "Router"), with this client's ledger
    /// the router's: commits `batch` across the shards its keys belong to, atomically (two-phase
    /// commit), if every key it expects still holds the value seen. Answers the version each
    /// shard touched made, as `(shard, version)`. No receipt comes back: a router gives none
    /// for a write across shards, so what it wrote is proved by reading it back
    /// ([`Client::get_across`]). Errors: the server's 409 (an
    /// expectation failed, or a key is held by another transaction: retry), 503 `aborted`
    /// (nothing written: retry) or `outcome_unknown`; transport errors.
    pub async fn transact_across(&self, batch: &Batch) -> Result<Vec<(u32, u64)>, Error> {
        if batch.is_empty() {
            return Err(Error::Invalid("a batch writes at least one key".into()));
        }
        let request = wire::TransactRequest {
            expects: batch.wire_expects(),
            tables: batch.wire_writes(),
            meta: batch.meta_bytes().to_vec(),
            prove: false,
        };
        let answer: wire::CommitResponse = self.inner.http.post("transact", &request).await?;
        Ok(answer.shards.iter().map(|s| (s.shard, s.version)).collect())
    }

    /// Through a router over shards (`docs/server.md`, "Lifted proofs"), with this client's
    /// ledger the router's: reads `reads` from the shards they belong to, each shard's answer
    /// proved against that shard's digest, and each table's values proved once more by one
    /// proof against the table's global root (the root one unsharded table holding the same
    /// data has), bound to the shards' receipts. Plain tables only: an ordered table's shards
    /// each keep their own chain of links, so it has no global root. Not a snapshot across shards: each shard is
    /// read at its newest version. The shards' digests are not compared with trusted ones
    /// here: compare [`ReadAcross::shards`] with digests followed through each shard's own
    /// client (`<ledger>/shards/<s>`). Errors: [`Lie::BadProof`] for an answer that does not
    /// prove what it says, and every lie [`Client::get`] finds in a shard's answer; the
    /// router's errors.
    pub async fn get_across<K: AsRef<[u8]>>(
        &self,
        reads: &[(&str, &[K])],
    ) -> Result<ReadAcross, Error> {
        let asked = asked_of(reads)?;
        if let Some((table, _)) = asked
            .iter()
            .find(|(t, _)| self.inner.kinds.get(t) == Some(&true))
        {
            return Err(Error::Invalid(format!(
                "table {table:?} is ordered: its shards keep their own chains, with no global root"
            )));
        }
        let request = wire::GetRequest {
            tables: wire_keys(&asked),
            version: 0,
            promise: false,
            lift: true,
        };
        let answer: wire::ReadResponse = self.inner.http.post("get", &request).await?;
        let checked = crate::across::check_across(&asked, &answer, &self.inner.kinds)?;
        Ok(ReadAcross {
            values: checked.values,
            shards: checked.shards,
            global: checked.global,
        })
    }

    async fn check_commit(
        &self,
        answer: &wire::CommitResponse,
        writes: &Expected,
        reads: &Expected,
        floor: u64,
    ) -> Result<Commit, Error> {
        let version = answer.version;
        if version == 0 {
            return Err(Lie::BadProof("writes answered with no version made".into()).into());
        }
        let offered = verify::digest_of(answer.digest.as_ref(), "the commit")?;
        if offered.size != version {
            return Err(Lie::BadProof(format!(
                "version {version} made, with a digest of size {}",
                offered.size
            ))
            .into());
        }
        let ledger_root: [u8; 32] = answer
            .ledger_root
            .as_slice()
            .try_into()
            .map_err(|_| Lie::BadProof("a ledger root is not 32 bytes".into()))?;
        let kinds = &self.inner.kinds;
        self.with_digest(offered, floor, true, |d| {
            let written = answer
                .writes
                .as_ref()
                .ok_or_else(|| Lie::BadProof("no receipt for the keys written".into()))?;
            let receipt = verify::check_proved(written, writes, d, Freshness::Fresh, kinds)?;
            let root = receipt
                .ledger_root()
                .map_err(|e| Lie::BadProof(e.to_string()))?;
            if root != ledger_root {
                return Err(Lie::BadProof(
                    "the commit's ledger root is not the one its receipt proves".into(),
                ));
            }
            verify::check_commit_reads(answer.reads.as_ref(), reads, d, version, kinds)
        })
        .await?;
        Ok(Commit {
            version,
            digest: offered,
            ledger_root,
        })
    }

    /// Every key of ordered table `table` in `[lo, hi]` as of the newest version, with the
    /// proof that none was left out or added ([`cairn_proof::verify_range`]). Errors:
    /// [`Lie::IncompleteRange`], [`Lie::StaleValue`], [`Lie::ForkedHistory`],
    /// [`Lie::RolledBack`], [`Lie::BadProof`]; the server's 413 for a range of more keys than
    /// it answers at once.
    pub async fn range(
        &self,
        table: &str,
        lo: impl AsRef<[u8]>,
        hi: impl AsRef<[u8]>,
    ) -> Result<Range, Error> {
        self.range_in(table, lo.as_ref(), hi.as_ref(), Freshness::Fresh)
            .await
    }

    /// [`Client::range`] as of `version` (within the server's window), against the newest
    /// digest ([`cairn_proof::verify_range_at`]).
    pub async fn range_at(
        &self,
        version: u64,
        table: &str,
        lo: impl AsRef<[u8]>,
        hi: impl AsRef<[u8]>,
    ) -> Result<Range, Error> {
        if version == 0 {
            return Err(Error::Invalid("versions start at 1".into()));
        }
        self.range_in(table, lo.as_ref(), hi.as_ref(), Freshness::At(version))
            .await
    }

    async fn range_in(
        &self,
        table: &str,
        lo: &[u8],
        hi: &[u8],
        freshness: Freshness,
    ) -> Result<Range, Error> {
        if lo > hi {
            return Err(Error::Invalid("lo is above hi".into()));
        }
        let floor = self.inner.trust.floor();
        let request = wire::RangeRequest {
            table: table.to_string(),
            lo: lo.to_vec(),
            hi: hi.to_vec(),
            version: match freshness {
                Freshness::Fresh => 0,
                Freshness::At(v) => v,
            },
            promise: false,
        };
        let answer: wire::RangeResponse = self.inner.http.post("range", &request).await?;
        let offered = verify::digest_of(answer.digest.as_ref(), "the range")?;
        let kinds = &self.inner.kinds;
        let (version, entries) = self
            .with_digest(offered, floor, false, |d| {
                verify::check_range(table, (lo, hi), &answer, d, freshness, kinds)
            })
            .await?;
        Ok(Range {
            version,
            digest: offered,
            entries,
        })
    }

    /// Runs `check` on an answer against `offered`, once `offered` is shown to belong to the
    /// trusted history (see the module doc), and adopts `offered` if it is newer and the check
    /// passed. `floor`: the size trusted when the request was sent; `write`: the answer is of
    /// a version just made, which must be newer than the floor.
    async fn with_digest<T>(
        &self,
        offered: Digest,
        floor: u64,
        write: bool,
        check: impl FnOnce(&Digest) -> Result<T, Lie>,
    ) -> Result<T, Error> {
        if offered.size < floor || (write && offered.size <= floor) {
            return Err(Lie::RolledBack {
                trusted: floor,
                offered: offered.size,
            }
            .into());
        }
        let trust = &self.inner.trust;
        let _adopting = trust.lock().await;
        let adopt = match trust.current() {
            None => {
                if offered.size == 0 && offered.root != Digest::EMPTY.root {
                    return Err(Lie::BadProof("an empty history with another root".into()).into());
                }
                true
            }
            Some(t) if offered.size == t.size => {
                if offered.root != t.root {
                    return Err(Lie::ForkedHistory {
                        trusted: t,
                        offered,
                        detail: "the same size with another root".into(),
                    }
                    .into());
                }
                false
            }
            Some(t) if offered.size > t.size => {
                self.check_extends((&t, &offered), (&t, &offered)).await?;
                true
            }
            Some(t) => {
                // A concurrent call raised the trust since this one asked.
                self.check_extends((&offered, &t), (&t, &offered)).await?;
                false
            }
        };
        let out = check(&offered)?;
        if adopt {
            trust.adopt(offered).await?;
        }
        Ok(out)
    }

    /// Checks the history of `old` is a prefix of that of `new` with the server's consistency
    /// proof; a failure is a fork between `trusted` and `offered`.
    async fn check_extends(
        &self,
        (old, new): (&Digest, &Digest),
        (trusted, offered): (&Digest, &Digest),
    ) -> Result<(), Error> {
        let forked = |detail: String| {
            Error::Lie(Lie::ForkedHistory {
                trusted: *trusted,
                offered: *offered,
                detail,
            })
        };
        if old.size == 0 {
            // The empty history is a prefix of every history.
            return if old.root == Digest::EMPTY.root {
                Ok(())
            } else {
                Err(forked("an empty history with another root".into()))
            };
        }
        let answer: wire::ConsistencyResponse = self
            .inner
            .http
            .get("consistency", &[("from", old.size), ("to", new.size)])
            .await?;
        let from = verify::digest_of(answer.from.as_ref(), "the consistency proof")?;
        let to = verify::digest_of(answer.to.as_ref(), "the consistency proof")?;
        if from != *old || to != *new {
            return Err(forked(format!(
                "the server's digests at sizes {} and {} are not the ones in hand",
                old.size, new.size
            )));
        }
        let proof = ConsistencyProof::decode(&answer.proof)
            .map_err(|e| Lie::BadProof(format!("the consistency proof does not decode: {e}")))?;
        verify_consistency(old, new, &proof)
            .map_err(|e| forked(format!("the consistency proof fails: {e}")))
    }
}

/// The reads, owned, once checked: at least one table, each once, each with a key.
fn asked_of<K: AsRef<[u8]>>(reads: &[(&str, &[K])]) -> Result<Asked, Error> {
    if reads.is_empty() {
        return Err(Error::Invalid("a read names at least one table".into()));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(reads.len());
    for (table, keys) in reads {
        if !seen.insert(*table) {
            return Err(Error::Invalid(format!("table {table:?} is named twice")));
        }
        if keys.is_empty() {
            return Err(Error::Invalid(format!("no key of table {table:?}")));
        }
        out.push((
            table.to_string(),
            keys.iter().map(|k| k.as_ref().to_vec()).collect(),
        ));
    }
    Ok(out)
}

fn wire_keys(asked: &Asked) -> Vec<wire::TableKeys> {
    asked
        .iter()
        .map(|(table, keys)| wire::TableKeys {
            table: table.clone(),
            keys: keys.clone(),
        })
        .collect()
}

/// The promises by version, then table, then key. Errors: [`Error::Invalid`] for a promise
/// whose values do not fit its keys; [`Lie::AlteredValue`] for one key promised at one version
/// with two values (one answer lied).
fn group_promises(promises: &[Promised]) -> Result<BTreeMap<u64, Expected>, Error> {
    let mut groups: BTreeMap<u64, Expected> = BTreeMap::new();
    for p in promises {
        if p.tables.len() != p.values.len() {
            return Err(Error::Invalid(
                "a promise's values do not fit its tables".into(),
            ));
        }
        for ((table, keys), values) in p.tables.iter().zip(&p.values) {
            if keys.len() != values.len() {
                return Err(Error::Invalid(format!(
                    "a promise's values do not fit its keys of table {table:?}"
                )));
            }
            let slot = groups
                .entry(p.version)
                .or_default()
                .entry(table.clone())
                .or_default();
            for (key, value) in keys.iter().zip(values) {
                match slot.get(key) {
                    Some(v) if v != value => {
                        return Err(Lie::AlteredValue {
                            table: table.clone(),
                            key: key.clone(),
                            detail: format!(
                                "two promises of version {} give it different values",
                                p.version
                            ),
                        }
                        .into())
                    }
                    _ => {
                        slot.insert(key.clone(), value.clone());
                    }
                }
            }
        }
    }
    Ok(groups)
}

/// Promises at version 0 (an empty ledger) hold every key absent.
fn check_empty_version(tables: &Expected) -> Result<(), Error> {
    for (table, keys) in tables {
        if let Some((key, _)) = keys.iter().find(|(_, v)| v.is_some()) {
            return Err(Lie::AlteredValue {
                table: table.clone(),
                key: key.clone(),
                detail: "promised at version 0, the empty ledger, with a value".into(),
            }
            .into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn promise(version: u64, value: Option<&str>) -> Promised {
        Promised {
            version,
            tables: vec![("t".into(), vec![b"k".to_vec()])],
            values: vec![vec![value.map(|v| v.as_bytes().to_vec())]],
        }
    }

    #[test]
    fn promises_group_by_version_and_contradictions_are_lies() {
        let groups = group_promises(&[promise(2, Some("a")), promise(3, Some("b"))]).unwrap();
        assert_eq!(groups.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
        // The same promise twice is one.
        let groups = group_promises(&[promise(2, Some("a")), promise(2, Some("a"))]).unwrap();
        assert_eq!(groups[&2]["t"].len(), 1);
        let e = group_promises(&[promise(2, Some("a")), promise(2, Some("b"))]).unwrap_err();
        assert!(matches!(e, Error::Lie(Lie::AlteredValue { .. })), "{e}");
        let mut bad = promise(2, None);
        bad.values.push(vec![]);
        assert!(matches!(group_promises(&[bad]), Err(Error::Invalid(_))));
        let empty = group_promises(&[promise(0, None)]).unwrap();
        assert!(check_empty_version(&empty[&0]).is_ok());
        let full = group_promises(&[promise(0, Some("a"))]).unwrap();
        assert!(check_empty_version(&full[&0]).is_err());
    }

    #[test]
    fn reads_are_checked_before_asking() {
        assert!(asked_of::<&str>(&[]).is_err());
        assert!(asked_of(&[("t", &["a"][..]), ("t", &["b"][..])]).is_err());
        assert!(asked_of::<&str>(&[("t", &[][..])]).is_err());
        assert_eq!(
            asked_of(&[("t", &["a"][..])]).unwrap(),
            vec![("t".to_string(), vec![b"a".to_vec()])]
        );
    }
}

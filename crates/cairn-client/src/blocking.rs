//! The blocking client: [`crate::Client`] driven by a runtime of its own, for programs that
//! are not async (the CLI, scripts, tests).
//!
//! Owns: [`Client`] (the async client and a current-thread tokio runtime). May call: `client`.
//! Must never touch: anything else (every check is the async client's).
//!
//! Each call runs the async one to completion on the calling thread. A blocking client cannot
//! be used (or dropped) inside an async runtime: building one there is refused, and a call
//! there is [`Error::Config`], never a panic.

use std::future::Future;

use cairn_proof::Digest;

use crate::error::Error;
use crate::types::{Batch, Commit, Promised, Range, Read, ReadAcross};
use crate::ClientBuilder;

/// The blocking client: the same calls as [`crate::Client`], each waiting for its answer.
/// Build it with [`ClientBuilder::build_blocking`].
pub struct Client {
    runtime: tokio::runtime::Runtime,
    inner: crate::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Client")
            .field("trusted", &self.trusted())
            .finish_non_exhaustive()
    }
}

impl Client {
    pub(crate) fn new(builder: ClientBuilder) -> Result<Client, Error> {
        refuse_inside_runtime()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("the blocking client's runtime: {e}")))?;
        let inner = runtime.block_on(async { builder.build() })?;
        Ok(Client { runtime, inner })
    }

    fn block<T>(&self, call: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        refuse_inside_runtime()?;
        self.runtime.block_on(call)
    }

    /// The async client this one drives (share it with async code run elsewhere).
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// [`crate::Client::trusted`].
    pub fn trusted(&self) -> Option<Digest> {
        self.inner.trusted()
    }

    /// [`crate::Client::digest`].
    pub fn digest(&self) -> Result<Digest, Error> {
        self.block(self.inner.digest())
    }

    /// [`crate::Client::get`].
    pub fn get<K: AsRef<[u8]>>(&self, reads: &[(&str, &[K])]) -> Result<Read, Error> {
        self.block(self.inner.get(reads))
    }

    /// [`crate::Client::get_across`].
    pub fn get_across<K: AsRef<[u8]>>(&self, reads: &[(&str, &[K])]) -> Result<ReadAcross, Error> {
        self.block(self.inner.get_across(reads))
    }

    /// [`crate::Client::get_at`].
    pub fn get_at<K: AsRef<[u8]>>(
        &self,
        version: u64,
        reads: &[(&str, &[K])],
    ) -> Result<Read, Error> {
        self.block(self.inner.get_at(version, reads))
    }

    /// [`crate::Client::get_promise`].
    pub fn get_promise<K: AsRef<[u8]>>(&self, reads: &[(&str, &[K])]) -> Result<Promised, Error> {
        self.block(self.inner.get_promise(reads))
    }

    /// [`crate::Client::verify_promises`].
    pub fn verify_promises(&self, promises: &[Promised]) -> Result<(), Error> {
        self.block(self.inner.verify_promises(promises))
    }

    /// [`crate::Client::put`].
    pub fn put(&self, batch: &Batch) -> Result<Commit, Error> {
        self.block(self.inner.put(batch))
    }

    /// [`crate::Client::transact`].
    pub fn transact(&self, batch: &Batch) -> Result<Commit, Error> {
        self.block(self.inner.transact(batch))
    }

    /// [`crate::Client::range`].
    pub fn range(
        &self,
        table: &str,
        lo: impl AsRef<[u8]>,
        hi: impl AsRef<[u8]>,
    ) -> Result<Range, Error> {
        self.block(self.inner.range(table, lo, hi))
    }

    /// [`crate::Client::range_at`].
    pub fn range_at(
        &self,
        version: u64,
        table: &str,
        lo: impl AsRef<[u8]>,
        hi: impl AsRef<[u8]>,
    ) -> Result<Range, Error> {
        self.block(self.inner.range_at(version, table, lo, hi))
    }
}

fn refuse_inside_runtime() -> Result<(), Error> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::Config(
            "the blocking client cannot run inside an async runtime: use cairn_client::Client"
                .into(),
        ));
    }
    Ok(())
}

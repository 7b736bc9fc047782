//! `cairn.Session`: a session directory opened from Python, a context manager.
//!
//! Owns: [`Session`] (open, close, durable tables, checkpoints, snapshots).
//!
//! May call: `cairn` (the session API), `table` (the handles it returns), `errors` (mapping
//! and panic guard). Must never touch: table contents (the table module's).

use std::path::PathBuf;

use cairn::{AuthConfig, SessionOptions, SnapshotOverrides, TableConfig};
use pyo3::prelude::*;

use crate::errors::guard;
use crate::table::Table;

/// A session: the owner of one directory and of the tables in it.
///
/// `Session(path, read_only=False)` opens (or creates) the session in `path`; use it as a
/// context manager, `with cairn.Session(path) as s: ...`, which closes it on exit. Closing
/// checkpoints the durable tables and releases the directory's lock; tables and iterators of
/// a closed session raise `ClosedError`.
#[pyclass(module = "cairn", name = "Session", frozen)]
pub struct Session {
    inner: cairn::Session,
}

#[pymethods]
impl Session {
    /// Opens the session in `path` (a `str` or path-like), creating the directory and an empty
    /// session when it is missing or empty, recovering it (write-ahead log replayed) otherwise.
    /// With `read_only=True` the directory must already be a session; nothing in it is
    /// written or locked, and durable tables cannot be opened (use snapshots).
    ///
    /// Raises `LockedError` when another live session holds the directory, `CorruptError` for
    /// a directory that is not a session, `NotFoundError` for a missing one when read-only.
    #[new]
    #[pyo3(signature = (path, read_only = false))]
    fn new(py: Python<'_>, path: PathBuf, read_only: bool) -> PyResult<Session> {
        let options = SessionOptions::default().read_only(read_only);
        let inner = py.detach(|| guard(|| cairn::Session::open_with_options(&path, options)))?;
        Ok(Session { inner })
    }

    /// Returns the session itself, for `with cairn.Session(path) as s:`.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the session; exceptions propagate.
    #[pyo3(signature = (_exc_type = None, _exc = None, _traceback = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }

    /// The durable table `name` (1 to 64 of `a-z0-9_-`), created empty if it does not exist:
    /// its updates are logged and survive a restart. `authenticated=True` keeps a Merkle trie
    /// over it (SHA-256), for `Table.root` and `Table.prove`; a table must be opened with the
    /// authentication it was created with (`InvalidArgumentError` otherwise).
    #[pyo3(signature = (name, authenticated = false))]
    fn table(&self, py: Python<'_>, name: &str, authenticated: bool) -> PyResult<Table> {
        let config = TableConfig::default().auth(authenticated.then(AuthConfig::default));
        let session = &self.inner;
        let table = py.detach(|| guard(|| session.table(name, config)))?;
        Ok(Table::new(table, Some(name.to_string())))
    }

    /// Opens snapshot `name` (saved with `Table.save_snapshot`) as a new table, not durable:
    /// `label` must be the label it was saved with. Every file is checked first.
    fn open_snapshot(&self, py: Python<'_>, name: &str, label: &str) -> PyResult<Table> {
        let session = &self.inner;
        let table = py.detach(|| {
            guard(|| session.open_snapshot(name, label, SnapshotOverrides::default()))
        })?;
        Ok(Table::new(table, None))
    }

    /// The names of the saved snapshots, sorted.
    fn snapshots(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let session = &self.inner;
        py.detach(|| guard(|| session.list_snapshots()))
    }

    /// Saves every durable table as a new checkpoint and drops the log before it, so that the
    /// next open replays nothing.
    fn checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        let session = &self.inner;
        py.detach(|| guard(|| session.checkpoint()))
    }

    /// Closes the session now (checkpointing the durable tables if anything was logged since
    /// the last checkpoint) and releases its lock. Idempotent.
    fn close(&self, py: Python<'_>) {
        let session = &self.inner;
        // `close` reports nothing: a failed checkpoint is logged and the next open replays.
        let _ = py.detach(|| {
            guard(|| {
                session.close();
                Ok(())
            })
        });
    }

    /// Whether the session is closed.
    #[getter]
    fn closed(&self) -> bool {
        !self.inner.is_open()
    }

    /// Whether the session was opened with `read_only=True`.
    #[getter]
    fn read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    /// The session directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.dir().to_path_buf()
    }

    /// `<cairn.Session "path" open>` or `... closed>`.
    fn __repr__(&self) -> String {
        let state = if self.inner.is_open() {
            "open"
        } else {
            "closed"
        };
        format!("<cairn.Session {:?} {state}>", self.inner.dir())
    }
}

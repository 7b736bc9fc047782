//! `cairn.Table`: one table as a Python mapping of `bytes` to `bytes`, with batched lookups and
//! updates that release the GIL, and its iterators.
//!
//! Owns: [`Table`] (mapping methods, batches, proofs, snapshots) and [`Entries`] (a cursor
//! wrapped as a Python iterator).
//!
//! May call: `cairn` (the table and cursor API), `bytes` (keys and values from Python),
//! `errors` (mapping and panic guard). Must never touch: the session's life cycle (its module's).

use std::collections::VecDeque;
use std::ops::Bound as KeyBound;
use std::sync::Mutex;

use cairn::Update;
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::bytes::{to_vec, Packed};
use crate::errors::guard;

/// Entries an iterator reads from its cursor per call into the engine, with the GIL released:
/// enough to make the release's cost (about a microsecond) small per entry, while the buffered
/// entries stay small (at most 256 keys and values).
const ENTRIES_PER_FILL: usize = 256;

/// A table: a sorted map from `bytes` keys to `bytes` values.
///
/// `t[key] = value`, `t[key]` (`KeyError` if absent), `del t[key]`, `key in t`, `t.get(key)`,
/// `for key in t`, `t.items()`; for many keys at once, `get_many`, `update_many` and
/// `delete_many`, each one call into the engine with the GIL released.
#[pyclass(module = "cairn", name = "Table", frozen)]
pub struct Table {
    inner: cairn::Table,
    name: Option<String>,
}

impl Table {
    /// A Python handle over `inner`, named for a durable table.
    pub(crate) fn new(inner: cairn::Table, name: Option<String>) -> Table {
        Table { inner, name }
    }

    /// The value of `key`, or `None`, looked up with the GIL released.
    fn lookup(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
        let key = to_vec(key)?;
        let table = &self.inner;
        py.detach(|| guard(|| table.get(&key)))
    }

    /// A cursor over `start..end` or the keys with `prefix`, as an iterator yielding `what`.
    fn entries(
        &self,
        py: Python<'_>,
        what: Yield,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Entries> {
        let table = &self.inner;
        let cursor = match prefix {
            Some(prefix) => {
                if start.is_some() || end.is_some() {
                    return Err(PyValueError::new_err(
                        "give a prefix or start/end, not both",
                    ));
                }
                let prefix = to_vec(prefix)?;
                py.detach(|| guard(|| table.prefix(&prefix)))?
            }
            None => {
                let bound = |b: Option<&Bound<'_, PyAny>>, inclusive: bool| -> PyResult<_> {
                    Ok(match b {
                        None => KeyBound::Unbounded,
                        Some(k) if inclusive => KeyBound::Included(to_vec(k)?),
                        Some(k) => KeyBound::Excluded(to_vec(k)?),
                    })
                };
                let range = (bound(start, true)?, bound(end, false)?);
                py.detach(|| guard(|| table.range(range)))?
            }
        };
        Ok(Entries {
            what,
            state: Mutex::new(EntriesState {
                cursor: Some(cursor),
                buffered: VecDeque::new(),
            }),
        })
    }
}

#[pymethods]
impl Table {
    /// The value of `key` (`bytes`); `KeyError` if it is absent.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        match self.lookup(py, key)? {
            Some(value) => Ok(PyBytes::new(py, &value)),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    /// Sets `key` to `value` (a durable table logs it).
    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (key, value) = (to_vec(key)?, to_vec(value)?);
        let table = &self.inner;
        py.detach(|| guard(|| table.insert(&key, &value)))
    }

    /// Removes `key`; `KeyError` if it is absent (as `dict`; `delete_many` does not check).
    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key_bytes = to_vec(key)?;
        let table = &self.inner;
        let present = py.detach(|| {
            guard(|| {
                let present = table.contains_key(&key_bytes)?;
                if present {
                    table.delete(&key_bytes)?;
                }
                Ok(present)
            })
        })?;
        if present {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.clone().unbind()))
        }
    }

    /// Whether `key` is present.
    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.lookup(py, key)?.is_some())
    }

    /// The keys in order (as `keys()`).
    fn __iter__(&self, py: Python<'_>) -> PyResult<Entries> {
        self.entries(py, Yield::Keys, None, None, None)
    }

    /// The value of `key`, or `default` if it is absent.
    #[pyo3(signature = (key, default = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.lookup(py, key)? {
            Some(value) => PyBytes::new(py, &value).into_any(),
            None => default.unwrap_or_else(|| py.None().into_bound(py)),
        })
    }

    /// The values of `keys` (any iterable of bytes-like keys), in order: `bytes`, or `None`
    /// for an absent key. One batched lookup in the engine (filters probed for every key, page
    /// reads submitted together) with the GIL released; the keys are copied into one buffer
    /// first and the result list is built once.
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let packed = Packed::from_iterable(keys)?;
        let table = &self.inner;
        let results = py.detach(|| guard(|| table.lookups(&packed.slices())))?;
        PyList::new(
            py,
            results
                .iter()
                .map(|r| r.value().map(|v| PyBytes::new(py, v))),
        )
    }

    /// Applies many updates in order as one batch (one log record for a durable table), with
    /// the GIL released: `pairs` is a mapping or an iterable of `(key, value)` pairs, where a
    /// value of `None` deletes the key. An oversized key or value refuses the whole batch
    /// before anything is applied.
    fn update_many(&self, py: Python<'_>, pairs: &Bound<'_, PyAny>) -> PyResult<()> {
        let items = if pairs.hasattr("items")? {
            pairs.call_method0("items")?
        } else {
            pairs.clone()
        };
        let (mut keys, mut values) = (Packed::default(), Packed::default());
        let mut deletes = Vec::new();
        for item in items.try_iter()? {
            let item = item?;
            let pair = item
                .cast::<PyTuple>()
                .map_err(|_| PyTypeError::new_err("update_many takes (key, value) pairs"))?;
            if pair.len() != 2 {
                return Err(PyTypeError::new_err("update_many takes (key, value) pairs"));
            }
            keys.push(&pair.get_item(0)?)?;
            let value = pair.get_item(1)?;
            deletes.push(value.is_none());
            if value.is_none() {
                values.push(&PyBytes::new(py, b""))?;
            } else {
                values.push(&value)?;
            }
        }
        let table = &self.inner;
        py.detach(|| {
            let (keys, values) = (keys.slices(), values.slices());
            let batch: Vec<(&[u8], Update<'_>)> = keys
                .iter()
                .zip(values.iter().zip(&deletes))
                .map(|(k, (v, &delete))| {
                    (
                        *k,
                        if delete {
                            Update::Delete
                        } else {
                            Update::Insert(v)
                        },
                    )
                })
                .collect();
            guard(|| table.updates(&batch))
        })
    }

    /// Deletes every key of `keys` (an iterable), as one batch with the GIL released. Absent
    /// keys are not an error.
    fn delete_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let packed = Packed::from_iterable(keys)?;
        let table = &self.inner;
        py.detach(|| guard(|| table.deletes(&packed.slices())))
    }

    /// `(key, value)` pairs in key order: every key `>= start` and `< end`, or every key that
    /// starts with `prefix` (not both). A stable view: updates made later are not seen.
    #[pyo3(signature = (start = None, end = None, prefix = None))]
    fn items(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Entries> {
        self.entries(py, Yield::Items, start, end, prefix)
    }

    /// The keys in order, with the bounds of `items`.
    #[pyo3(signature = (start = None, end = None, prefix = None))]
    fn keys(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Entries> {
        self.entries(py, Yield::Keys, start, end, prefix)
    }

    /// The values in key order, with the bounds of `items`.
    #[pyo3(signature = (start = None, end = None, prefix = None))]
    fn values(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Entries> {
        self.entries(py, Yield::Values, start, end, prefix)
    }

    /// The state root (32 bytes) of the table's current contents, committing what changed
    /// since the last commit. Authenticated tables only (`InvalidArgumentError` otherwise).
    fn root<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let table = &self.inner;
        let commit = py.detach(|| guard(|| table.root()))?;
        Ok(PyBytes::new(py, &commit.root.hash))
    }

    /// The version of the table's current contents (commits that changed them), committing
    /// as `root()` does. Authenticated tables only.
    fn version(&self, py: Python<'_>) -> PyResult<u64> {
        let table = &self.inner;
        Ok(py.detach(|| guard(|| table.root()))?.version)
    }

    /// A multiproof (bytes) of the presence or absence of each of `keys` in the current
    /// contents, whose root is `root()` taken with no update in between. Check it with
    /// `cairn.verify(root, proof, claims)`. Authenticated tables only.
    fn prove<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let packed = Packed::from_iterable(keys)?;
        let table = &self.inner;
        let proved = py.detach(|| guard(|| table.prove(&packed.slices())))?;
        Ok(PyBytes::new(py, &proved.proof.encode()))
    }

    /// Saves the table as snapshot `name` (1 to 64 of `a-z0-9_-`) with `label`, which
    /// `Session.open_snapshot` must be given back. Durable and atomic when it returns.
    fn save_snapshot(&self, py: Python<'_>, name: &str, label: &str) -> PyResult<()> {
        let table = &self.inner;
        py.detach(|| guard(|| table.save_snapshot(name, label)))
    }

    /// For the benchmark (`bench/get_many.py`): the seconds `rounds` batched lookups of `keys`
    /// take from Rust, with no Python object made or read in the timed part, the baseline
    /// `get_many` is compared with. Returns the seconds and the keys found per round.
    fn _rust_lookup_seconds(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        rounds: u32,
    ) -> PyResult<(f64, usize)> {
        let packed = Packed::from_iterable(keys)?;
        let table = &self.inner;
        py.detach(|| {
            let slices = packed.slices();
            let start = std::time::Instant::now();
            let mut found = 0;
            for _ in 0..rounds {
                let results = guard(|| table.lookups(&slices))?;
                found = results.iter().filter(|r| r.value().is_some()).count();
            }
            Ok((start.elapsed().as_secs_f64(), found))
        })
    }

    /// Closes the table (later calls raise `ClosedError`). Idempotent.
    fn close(&self) {
        self.inner.close();
    }

    /// The table's name (`None` for a table opened from a snapshot).
    #[getter]
    fn name(&self) -> Option<String> {
        self.name.clone()
    }

    /// Whether the table is durable (its updates are logged).
    #[getter]
    fn durable(&self) -> bool {
        self.inner.is_durable()
    }

    /// Whether the table is authenticated (has a state root and proofs).
    #[getter]
    fn authenticated(&self) -> bool {
        self.inner.config().auth.is_some()
    }

    /// `<cairn.Table "name">`, or `<cairn.Table (snapshot)>`.
    fn __repr__(&self) -> String {
        match &self.name {
            Some(name) => format!("<cairn.Table {name:?}>"),
            None => "<cairn.Table (snapshot)>".to_string(),
        }
    }
}

/// What an [`Entries`] iterator yields.
#[derive(Clone, Copy)]
enum Yield {
    Items,
    Keys,
    Values,
}

/// A cursor and the entries read from it ahead of Python.
struct EntriesState {
    /// `None` once the cursor is finished (or failed: its error was raised once).
    cursor: Option<cairn::Cursor>,
    /// Entries read but not yet yielded: at most [`ENTRIES_PER_FILL`].
    buffered: VecDeque<(Vec<u8>, Vec<u8>)>,
}

/// An iterator over a table's entries in key order (from `Table.items`, `keys`, `values` or
/// `iter(table)`): a cursor read [`ENTRIES_PER_FILL`] entries at a time with the GIL released.
#[pyclass(module = "cairn", name = "Entries", frozen)]
pub struct Entries {
    what: Yield,
    state: Mutex<EntriesState>,
}

#[pymethods]
impl Entries {
    /// Returns the iterator itself.
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next entry (a `(key, value)` pair, a key or a value); `StopIteration` at the end,
    /// `ClosedError` once the session is closed.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        // Never wait for the lock while holding the GIL: its holder may be waiting for the GIL.
        let Ok(mut state) = self.state.try_lock() else {
            return Err(PyRuntimeError::new_err(
                "the iterator is in use by another thread",
            ));
        };
        if state.buffered.is_empty() {
            let state = &mut *state;
            let Some(cursor) = state.cursor.as_mut() else {
                return Ok(None);
            };
            let buffered = &mut state.buffered;
            let read = py.detach(|| {
                guard(|| {
                    for entry in cursor.by_ref().take(ENTRIES_PER_FILL) {
                        let entry = entry?;
                        buffered.push_back((entry.key, entry.value));
                    }
                    Ok(())
                })
            });
            if read.is_err() || state.buffered.len() < ENTRIES_PER_FILL {
                state.cursor = None;
            }
            if read.is_err() {
                // The cursor is finished: the error is raised once, then the iteration ends.
                state.buffered.clear();
            }
            read?;
        }
        let Some((key, value)) = state.buffered.pop_front() else {
            return Ok(None);
        };
        Ok(Some(match self.what {
            Yield::Items => (PyBytes::new(py, &key), PyBytes::new(py, &value))
                .into_pyobject(py)?
                .into_any(),
            Yield::Keys => PyBytes::new(py, &key).into_any(),
            Yield::Values => PyBytes::new(py, &value).into_any(),
        }))
    }

    /// Closes the cursor early, releasing what it holds. Idempotent.
    fn close(&self) -> PyResult<()> {
        let Ok(mut state) = self.state.try_lock() else {
            return Err(PyRuntimeError::new_err(
                "the iterator is in use by another thread",
            ));
        };
        state.cursor = None;
        state.buffered.clear();
        Ok(())
    }
}

//! The Python package `cairn`: the engine's sessions and tables as Python objects (PyO3).
//!
//! The native module is `cairn._cairn`; the package `cairn` (`python/cairn/__init__.py`)
//! re-exports it with type stubs. Keys and values are `bytes`; batched calls (`get_many`,
//! `update_many`, `delete_many`) are one call into the engine each, with the GIL released.
//!
//! Owns: the module's registration and `cairn.verify` (a proof checked on its own, with no
//! session). May call: `session`, `table`, `errors`, `bytes`, and `cairn`'s proof verifier.
//! Must never touch: the engine's internals (only its public API is used).

mod bytes;
mod errors;
mod session;
mod table;

use cairn::cairn_proof::{Claim, Proof, Root};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bytes::to_vec;
use crate::errors::VerifyError;

/// Checks `proof` (bytes from `Table.prove`) against `root` (32 bytes from `Table.root`) for
/// `claims`: a mapping, or an iterable of `(key, value)` pairs, where `value` is the `bytes`
/// the key holds or `None` for a key claimed absent. Returns `None`; raises `VerifyError` if
/// the proof does not decode, or does not prove every claim against the root.
#[pyfunction]
fn verify(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    proof: &Bound<'_, PyAny>,
    claims: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let (root, proof) = (to_vec(root)?, to_vec(proof)?);
    let items = if claims.hasattr("items")? {
        claims.call_method0("items")?
    } else {
        claims.clone()
    };
    let mut owned: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for item in items.try_iter()? {
        let item = item?;
        let pair = item
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("claims are (key, value or None) pairs"))?;
        if pair.len() != 2 {
            return Err(PyTypeError::new_err(
                "claims are (key, value or None) pairs",
            ));
        }
        let value = pair.get_item(1)?;
        let value = if value.is_none() {
            None
        } else {
            Some(to_vec(&value)?)
        };
        owned.push((to_vec(&pair.get_item(0)?)?, value));
    }
    py.detach(|| {
        let proof = Proof::decode(&proof).map_err(|e| VerifyError::new_err(e.to_string()))?;
        let root = Root::from_slice(proof.kind(), &root)
            .map_err(|e| VerifyError::new_err(e.to_string()))?;
        let claims: Vec<Claim<'_>> = owned
            .iter()
            .map(|(k, v)| Claim::answer(k, v.as_deref()))
            .collect();
        proof
            .verify(&root, &claims)
            .map_err(|e| VerifyError::new_err(e.to_string()))
    })
}

/// The native module `cairn._cairn`.
#[pymodule]
fn _cairn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<session::Session>()?;
    m.add_class::<table::Table>()?;
    m.add_class::<table::Entries>()?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    errors::register(m)?;
    Ok(())
}

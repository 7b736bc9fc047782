//! Bytes from Python: keys and values taken from `bytes`, `bytearray` or `memoryview` objects
//! and packed into one buffer, so that a batch crosses into the engine (with the GIL released)
//! as plain Rust data.
//!
//! Owns: [`Packed`] (many byte strings in one `Vec<u8>` with their ends) and [`bytes_of`].
//!
//! May call: nothing of the engine. Must never touch: sessions and tables.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};

/// Appends the bytes of `obj` (`bytes`, `bytearray` or `memoryview`) to `out`. Anything else,
/// `str` and `int` included, is a `TypeError` (an `int` would otherwise read as a length).
pub(crate) fn bytes_of(obj: &Bound<'_, PyAny>, out: &mut Vec<u8>) -> PyResult<()> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        out.extend_from_slice(b.as_bytes());
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        out.extend_from_slice(&b.to_vec());
    } else if obj.cast::<PyMemoryView>().is_ok() {
        // The limited API (abi3) before 3.11 has no buffer access: one copy through `bytes`.
        let copied = obj.call_method0("tobytes")?;
        out.extend_from_slice(copied.cast::<PyBytes>()?.as_bytes());
    } else {
        return Err(PyTypeError::new_err(format!(
            "keys and values are bytes, bytearray or memoryview, not {}",
            obj.get_type().name()?
        )));
    }
    Ok(())
}

/// One byte string from `obj` (see [`bytes_of`]).
pub(crate) fn to_vec(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    let mut out = Vec::new();
    bytes_of(obj, &mut out)?;
    Ok(out)
}

/// Many byte strings in one buffer: string `i` is `data[ends[i - 1]..ends[i]]`. Memory: the
/// bytes plus 8 per string, in two allocations whatever the count.
#[derive(Default)]
pub(crate) struct Packed {
    data: Vec<u8>,
    ends: Vec<usize>,
}

impl Packed {
    /// Appends the bytes of `obj` as the next string.
    pub(crate) fn push(&mut self, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        bytes_of(obj, &mut self.data)?;
        self.ends.push(self.data.len());
        Ok(())
    }

    /// Every string of `iterable` (any Python iterable of bytes-like objects), in order.
    pub(crate) fn from_iterable(iterable: &Bound<'_, PyAny>) -> PyResult<Packed> {
        let mut packed = Packed::default();
        if let Ok(n) = iterable.len() {
            packed.ends.reserve(n);
        }
        for item in iterable.try_iter()? {
            packed.push(&item?)?;
        }
        Ok(packed)
    }

    /// The strings, as slices of the buffer.
    pub(crate) fn slices(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let s = &self.data[start..end];
                start = end;
                s
            })
            .collect()
    }
}

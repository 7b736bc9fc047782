//! Cairn: an LSM-tree storage engine for ledger state.
#![warn(missing_docs)]

pub mod error;
pub mod fs;

pub use error::{Error, Result};

//! The benchmark's error type: a message for the user, printed once by `main` before it exits
//! with a non-zero status.
//!
//! Owns: [`Failure`] and the [`Context`] helper that turns any displayable error (an engine
//! error, an I/O error) into a failure that says what the benchmark was doing.

use std::fmt;

/// A failed benchmark: what went wrong, in words.
#[derive(Debug)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Adds what the benchmark was doing to an error.
pub trait Context<T> {
    /// Wraps the error as "`what()`: error".
    fn context(self, what: impl FnOnce() -> String) -> Result<T, Failure>;
}

impl<T, E: fmt::Display> Context<T> for Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, Failure> {
        self.map_err(|e| Failure(format!("{}: {e}", what())))
    }
}

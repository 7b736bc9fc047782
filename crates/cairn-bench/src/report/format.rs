//! Number formats shared by the terminal tables and the Markdown report.
//!
//! Owns: how a count, a size or a missing value is written. Must never touch: files.

/// Bytes in a MiB.
pub const MIB: f64 = 1024.0 * 1024.0;

/// A peak RSS in MiB with one decimal, or "n/a".
pub fn rss_mib(bytes: Option<u64>) -> String {
    bytes.map_or("n/a".into(), |b| format!("{:.1}", b as f64 / MIB))
}

/// A value, or "-".
pub fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

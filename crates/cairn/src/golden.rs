//! Golden files (tests only): every on-disk format is pinned by a file under `testdata/golden/`.
//!
//! `CAIRN_UPDATE_GOLDEN=1` rewrites the files instead of comparing, for a deliberate format change.

/// Compares `bytes` with `testdata/golden/<name>` (or rewrites it) and returns the golden bytes.
pub(crate) fn check_golden(name: &str, bytes: &[u8]) -> Vec<u8> {
    let path = format!("{}/testdata/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("CAIRN_UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    let golden = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        golden == bytes,
        "the encoding differs from the golden file {path}: a format change must bump the version"
    );
    golden
}

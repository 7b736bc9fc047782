//! What the crate's test files share: the golden-file check, the tests' own SHA-256 and hex.
// Each test file uses a part of it.
#![allow(dead_code)]

use cairn_proof::Hash;
use sha2::{Digest as _, Sha256};

/// SHA-256 of the parts, concatenated: the test's own hashing, not the crate's.
pub fn sha(parts: &[&[u8]]) -> Hash {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares `bytes` with `testdata/golden/<name>` (or rewrites it) and returns the golden bytes.
pub fn check_golden(name: &str, bytes: &[u8]) -> Vec<u8> {
    let dir = format!("{}/testdata/golden", env!("CARGO_MANIFEST_DIR"));
    let path = format!("{dir}/{name}");
    if std::env::var_os("CAIRN_UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    let golden = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(
        golden == bytes,
        "the encoding differs from the golden file {path}: a format change must bump the version"
    );
    golden
}

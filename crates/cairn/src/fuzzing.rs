//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not a stable API).
//!
//! Each function runs one decoder on arbitrary bytes and, when it accepts them, exercises the
//! decoded value; it must never panic. Returns whether the bytes were accepted.

/// The run checksums file decoder.
pub fn run_checksums(bytes: &[u8]) -> bool {
    match crate::run::RunChecksums::decode(bytes) {
        Ok(sums) => {
            assert_eq!(sums.encode(), bytes, "accepted bytes must be canonical");
            true
        }
        Err(_) => false,
    }
}

/// The session metadata decoder.
pub fn session_metadata(bytes: &[u8]) -> bool {
    crate::session::decode_metadata(bytes).is_ok()
}

/// The snapshot metadata decoder, on `bytes` as they are and on `bytes` framed as a metadata
/// body (magic, version and a valid checksum added), so the fuzzer reaches the body parser.
pub fn snapshot_metadata(bytes: &[u8]) -> bool {
    use crate::snapshot::{MAGIC, VERSION};
    let mut framed = MAGIC.to_vec();
    framed.extend_from_slice(&VERSION.to_le_bytes());
    framed.extend_from_slice(bytes);
    let crc = crc32c::crc32c(&framed);
    framed.extend_from_slice(&crc.to_le_bytes());
    snapshot_metadata_exact(bytes) | snapshot_metadata_exact(&framed)
}

fn snapshot_metadata_exact(bytes: &[u8]) -> bool {
    match crate::snapshot::SnapshotMeta::decode(bytes) {
        Ok(meta) => {
            let _ = meta.run_levels();
            assert_eq!(
                meta.encode(),
                bytes,
                "accepted bytes must re-encode identically"
            );
            true
        }
        Err(_) => false,
    }
}

//! A run's checksums file: the size and CRC32C of each of its files and, from run format
//! version 2, the CRC32C of every page of its key/ops file and 4 KiB chunk of its blob file
//! (`docs/format/run.md`); and the checks of data read against them.
//!
//! Part of the `run` module (its header says what the module may call).

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::page::PAGE_BYTES;

use super::RunFile;

/// Size and CRC32C of each data file of a run, as recorded in its checksums file, and (from run
/// format version 2) the CRC32C of every page of its key/ops file and of every 4 KiB chunk of
/// its blob file, checked when the page or blob is read.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct RunChecksums {
    /// `(size_bytes, crc32c)` for keyops, blobs, filter, index, in that order.
    pub(crate) files: [(u64, u32); 4],
    /// The per-page checksums (version 2); `None` for a run written in version 1, whose data
    /// files can be checked only whole.
    pub(crate) pages: Option<PageSums>,
}

/// The CRC32C of each 4 KiB page of a run's key/ops file and of each 4 KiB chunk of its blob
/// file (the last chunk may be shorter), in file order. Shared (`Arc`) with the blob references
/// lookups hand out.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct PageSums {
    pub(crate) keyops: Arc<[u32]>,
    pub(crate) blobs: Arc<[u32]>,
}

/// The text header of a version 1 checksums file.
const CHECKSUMS_HEADER: &str = "cairn-run-checksums 1";
/// The magic of a version 2 (binary) checksums file.
const CHECKSUMS_MAGIC: &[u8; 8] = b"CRNRSUMS";
/// The version a run writes.
pub(crate) const CHECKSUMS_VERSION: u32 = 2;
/// Bytes of a version 2 checksums file besides its per-page checksums: magic, version, four
/// (size, CRC) pairs and the closing CRC.
const CHECKSUMS_V2_FIXED: usize = 8 + 4 + 4 * 12 + 4;

/// The CRC32C of each `PAGE_BYTES` chunk of `bytes` (the last may be shorter).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn chunk_sums(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks(PAGE_BYTES).map(crc32c::crc32c).collect()
}

impl RunChecksums {
    /// The checksums of a run whose files hold these bytes (version 2). For tests and tools that
    /// rewrite a run; a run being written computes the same while it writes.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn of_files(keyops: &[u8], blobs: &[u8], filter: &[u8], index: &[u8]) -> Self {
        let whole = |b: &[u8]| (b.len() as u64, crc32c::crc32c(b));
        RunChecksums {
            files: [whole(keyops), whole(blobs), whole(filter), whole(index)],
            pages: Some(PageSums {
                keyops: chunk_sums(keyops).into(),
                blobs: chunk_sums(blobs).into(),
            }),
        }
    }

    /// Encodes the checksums file: version 1, a text file whose last line checksums the rest;
    /// version 2, a binary file whose last 4 bytes checksum the rest.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let Some(pages) = &self.pages else {
            let mut text = format!("{CHECKSUMS_HEADER}\n");
            for (file, (size, crc)) in RunFile::CHECKSUMMED.iter().zip(self.files) {
                text.push_str(&format!("{} {size} {crc:08x}\n", file.extension()));
            }
            let crc = crc32c::crc32c(text.as_bytes());
            text.push_str(&format!("end {crc:08x}\n"));
            return text.into_bytes();
        };
        let sums = pages.keyops.len() + pages.blobs.len();
        let mut out = Vec::with_capacity(CHECKSUMS_V2_FIXED + 4 * sums);
        out.extend_from_slice(CHECKSUMS_MAGIC);
        out.extend_from_slice(&CHECKSUMS_VERSION.to_le_bytes());
        for (size, crc) in self.files {
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&crc.to_le_bytes());
        }
        for crc in pages.keyops.iter().chain(pages.blobs.iter()) {
            out.extend_from_slice(&crc.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// What a snapshot's metadata records of a checksums file whose canonical encoding is
    /// `encoded`, to pin the run: its CRC32C, except for version 2, whose last 4 bytes are the
    /// CRC32C of the rest, the CRC32C of the bytes before them. (The CRC32C of a message
    /// followed by its own CRC32C is the same constant for every message: it would pin nothing.)
    pub(crate) fn pin(encoded: &[u8]) -> u32 {
        match encoded.strip_prefix(CHECKSUMS_MAGIC) {
            Some(_) if encoded.len() >= 4 => crc32c::crc32c(&encoded[..encoded.len() - 4]),
            _ => crc32c::crc32c(encoded),
        }
    }

    /// Total decoder of the checksums file, either version.
    pub(crate) fn decode(bytes: &[u8]) -> Result<RunChecksums> {
        if bytes.starts_with(CHECKSUMS_MAGIC) {
            RunChecksums::decode_v2(bytes)
        } else {
            RunChecksums::decode_v1(bytes)
        }
    }

    /// Version 2 (binary): see `docs/format/run.md`.
    fn decode_v2(bytes: &[u8]) -> Result<RunChecksums> {
        let bad = |detail: String| Error::corrupt("run checksums file", detail);
        if bytes.len() < CHECKSUMS_V2_FIXED {
            return Err(bad(format!("{} bytes is too short", bytes.len())));
        }
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| u64::from(u32_at(at)) | (u64::from(u32_at(at + 4)) << 32);
        let (body, end) = bytes.split_at(bytes.len() - 4);
        let recorded = u32::from_le_bytes([end[0], end[1], end[2], end[3]]);
        let computed = crc32c::crc32c(body);
        if recorded != computed {
            return Err(bad(format!(
                "self-checksum mismatch: recorded {recorded:08x}, computed {computed:08x}"
            )));
        }
        let version = u32_at(8);
        if version != CHECKSUMS_VERSION {
            return Err(Error::UnsupportedVersion {
                what: "run checksums file",
                found: version,
                supported: CHECKSUMS_VERSION,
            });
        }
        let mut files = [(0u64, 0u32); 4];
        for (i, slot) in files.iter_mut().enumerate() {
            *slot = (u64_at(12 + 12 * i), u32_at(20 + 12 * i));
        }
        let (keyops_size, blobs_size) = (files[0].0, files[1].0);
        if keyops_size % PAGE_BYTES as u64 != 0 {
            return Err(bad(format!(
                "a key/ops file of {keyops_size} bytes is not whole pages"
            )));
        }
        let page = PAGE_BYTES as u64;
        let (pages, chunks) = (keyops_size / page, blobs_size.div_ceil(page));
        // Sizes are checked against the length before anything is allocated from them.
        let expected = pages
            .checked_add(chunks)
            .and_then(|n| n.checked_mul(4))
            .and_then(|n| n.checked_add(CHECKSUMS_V2_FIXED as u64));
        if expected != Some(bytes.len() as u64) {
            return Err(bad(format!(
                "{} bytes, but {pages} pages and {chunks} blob chunks need {}",
                bytes.len(),
                expected.map_or("more".to_string(), |n| n.to_string())
            )));
        }
        let first = CHECKSUMS_V2_FIXED - 4;
        let sums = |from: usize, n: u64| -> Arc<[u32]> {
            (0..n as usize).map(|i| u32_at(from + 4 * i)).collect()
        };
        let keyops = sums(first, pages);
        let blobs = sums(first + 4 * pages as usize, chunks);
        Ok(RunChecksums {
            files,
            pages: Some(PageSums { keyops, blobs }),
        })
    }

    /// Version 1 (text): see `docs/format/run.md`.
    fn decode_v1(bytes: &[u8]) -> Result<RunChecksums> {
        let bad = |detail: &str| Error::corrupt("run checksums file", detail.to_string());
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or_else(|| bad("too short"))?;
        let (body, last) = text.split_at(body_end);
        let expected = last
            .strip_prefix("end ")
            .and_then(|s| s.strip_suffix('\n'))
            .and_then(|s| u32::from_str_radix(s, 16).ok())
            .ok_or_else(|| bad("missing end line"))?;
        let actual = crc32c::crc32c(body.as_bytes());
        if expected != actual {
            return Err(bad(&format!(
                "self-checksum mismatch: recorded {expected:08x}, computed {actual:08x}"
            )));
        }
        let mut lines = body.lines();
        match lines.next() {
            Some(CHECKSUMS_HEADER) => {}
            Some(other) if other.starts_with("cairn-run-checksums ") => {
                let found = other["cairn-run-checksums ".len()..]
                    .parse()
                    .unwrap_or(u32::MAX);
                return Err(Error::UnsupportedVersion {
                    what: "run checksums file",
                    found,
                    supported: CHECKSUMS_VERSION,
                });
            }
            _ => return Err(bad("missing header")),
        }
        let mut out = RunChecksums::default();
        for (slot, file) in out.files.iter_mut().zip(RunFile::CHECKSUMMED) {
            let line = lines.next().ok_or_else(|| bad("missing line"))?;
            let mut parts = line.split(' ');
            let (name, size, crc) = (parts.next(), parts.next(), parts.next());
            if name != Some(file.extension()) || parts.next().is_some() {
                return Err(bad(&format!("bad line {line:?}")));
            }
            let size = size.and_then(|s| s.parse::<u64>().ok());
            let crc = crc.and_then(|s| u32::from_str_radix(s, 16).ok());
            match (size, crc) {
                (Some(size), Some(crc)) => *slot = (size, crc),
                _ => return Err(bad(&format!("bad line {line:?}"))),
            }
        }
        if lines.next().is_some() {
            return Err(bad("trailing lines"));
        }
        // Only the canonical spelling is accepted (e.g. no upper-case hex, no leading zeros).
        if out.encode() != bytes {
            return Err(bad("not in canonical form"));
        }
        Ok(out)
    }
}

/// The error for a page (or blob chunk) `n` of `path` whose CRC32C is not the one recorded.
fn page_damage(path: &Path, what: &str, n: u64, recorded: Option<u32>, actual: u32) -> Error {
    let start = n * PAGE_BYTES as u64;
    Error::CorruptFile {
        path: path.to_path_buf(),
        what: "run data",
        detail: match recorded {
            Some(recorded) => format!(
                "{what} {n} (bytes {start}..{}): CRC32C {actual:08x}, recorded {recorded:08x}",
                start + PAGE_BYTES as u64
            ),
            None => format!("{what} {n} lies past the end the checksums file records"),
        },
    }
}

/// Checks `bytes`, read from `path` at 4 KiB chunk `first`, against the recorded CRC32C of each
/// of its chunks (the last may be shorter): a key/ops file's pages or a blob file's chunks.
pub(crate) fn check_chunks(path: &Path, first: u64, bytes: &[u8], sums: &[u32]) -> Result<()> {
    let what = if path
        .extension()
        .is_some_and(|e| e == RunFile::Blobs.extension())
    {
        "blob chunk"
    } else {
        "page"
    };
    for (i, chunk) in bytes.chunks(PAGE_BYTES).enumerate() {
        let n = first + i as u64;
        let recorded = sums.get(n as usize).copied();
        let actual = crc32c::crc32c(chunk);
        if recorded != Some(actual) {
            return Err(page_damage(path, what, n, recorded, actual));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_file_round_trip_and_totality() {
        let v1 = RunChecksums {
            files: [(4096, 1), (0, 0), (100, 0xdead_beef), (7, 9)],
            pages: None,
        };
        let v2 = RunChecksums {
            files: [(8192, 1), (4097, 5), (100, 0xdead_beef), (7, 9)],
            pages: Some(PageSums {
                keyops: vec![11, 12].into(),
                blobs: vec![21, 22].into(),
            }),
        };
        for sums in [v1, v2] {
            let bytes = sums.encode();
            assert_eq!(RunChecksums::decode(&bytes).unwrap(), sums);
            for len in 0..bytes.len() {
                assert!(RunChecksums::decode(&bytes[..len]).is_err());
            }
            for bit in 0..bytes.len() * 8 {
                let mut b = bytes.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                assert!(RunChecksums::decode(&b).is_err(), "bit {bit}");
            }
        }
    }

    /// A version 2 checksums file whose sizes promise more page checksums than it holds (behind
    /// a valid CRC) is refused before anything is allocated from them.
    #[test]
    fn checksums_v2_sizes_must_match_the_sums_it_holds() {
        for (keyops, blobs) in [(4096 * 3, 0), (4096, 1), (4095, 0), (u64::MAX - 4095, 0)] {
            let mut bytes = RunChecksums {
                files: [(4096, 1), (0, 0), (1, 2), (3, 4)],
                pages: Some(PageSums {
                    keyops: vec![7].into(),
                    blobs: vec![].into(),
                }),
            }
            .encode();
            bytes[12..20].copy_from_slice(&u64::to_le_bytes(keyops));
            bytes[24..32].copy_from_slice(&u64::to_le_bytes(blobs));
            let at = bytes.len() - 4;
            let crc = crc32c::crc32c(&bytes[..at]);
            bytes[at..].copy_from_slice(&crc.to_le_bytes());
            assert!(
                matches!(RunChecksums::decode(&bytes), Err(Error::Corrupt { .. })),
                "{keyops} {blobs}"
            );
        }
    }

    #[test]
    fn checksums_golden_files() {
        let v1 = RunChecksums {
            files: [
                (8192, 0x1234_abcd),
                (0, 0),
                (168, 0xdead_beef),
                (248, 0x0102_0304),
            ],
            pages: None,
        };
        let golden = crate::golden::check_golden("run-checksums-v1.txt", &v1.encode());
        assert_eq!(RunChecksums::decode(&golden).unwrap(), v1);
        let v2 = RunChecksums {
            files: [
                (8192, 0x1234_abcd),
                (5000, 0x5555_0001),
                (168, 0xdead_beef),
                (248, 0x0102_0304),
            ],
            pages: Some(PageSums {
                keyops: vec![0xaaaa_0001, 0xaaaa_0002].into(),
                blobs: vec![0xbbbb_0001, 0xbbbb_0002].into(),
            }),
        };
        let golden = crate::golden::check_golden("run-checksums-v2.bin", &v2.encode());
        assert_eq!(RunChecksums::decode(&golden).unwrap(), v2);
    }

    proptest::proptest! {
        #[test]
        fn checksums_decoder_is_total(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = RunChecksums::decode(&bytes);
        }
    }
}

//! The results of a batch: [`ReadBatch`], one aligned arena holding every read in request order,
//! and the slots that lay each request out in it.

use super::aligned::{round_up, AlignedBuf};
use super::plan::ReadRequest;
use super::ALIGN_BYTES;
use crate::error::{Error, Result};

/// Where one request's bytes live in the arena.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    /// Byte offset in the arena (a multiple of `ALIGN_BYTES`).
    pub(super) start: usize,
    /// Number of bytes requested.
    pub(super) len: usize,
    /// Set when the request was conditional and not wanted
    /// ([`ReadConditions`](super::ReadConditions)): its bytes are stale.
    pub(super) skipped: bool,
}

/// The results of a batch: one aligned arena holding every read, in request order.
///
/// A batch can be refilled with [`BlockIo::read_batch_into`](super::BlockIo::read_batch_into),
/// which reuses its arena when it is large enough: a caller that reads in waves allocates once.
#[derive(Debug)]
pub struct ReadBatch {
    pub(super) arena: AlignedBuf,
    pub(super) slots: Vec<Slot>,
}

impl Default for ReadBatch {
    fn default() -> ReadBatch {
        ReadBatch {
            arena: AlignedBuf::zeroed(0),
            slots: Vec::new(),
        }
    }
}

impl ReadBatch {
    /// Bytes of the arena (at least the sum of the last batch's reads, each rounded up to
    /// [`ALIGN_BYTES`]).
    #[cfg(test)]
    pub fn arena_bytes(&self) -> usize {
        self.arena.len()
    }

    /// Number of reads in the batch (equals the number of requests).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when the batch had no requests.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The bytes of read `i` (exactly `requests[i].len_bytes` bytes, starting at an
    /// [`ALIGN_BYTES`]-aligned address). Panics if `i >= self.len()`, like slice indexing; see
    /// [`ReadBatch::try_get`].
    pub fn get(&self, i: usize) -> &[u8] {
        match self.try_get(i) {
            Some(bytes) => bytes,
            None => panic!("read {i} out of range: the batch has {} reads", self.len()),
        }
    }

    /// Whether read `i` was conditional and not wanted
    /// ([`ReadConditions`](super::ReadConditions)); its bytes (from [`ReadBatch::get`]) are then
    /// stale. False for `i >= self.len()`.
    pub(crate) fn skipped(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|slot| slot.skipped)
    }

    /// The bytes of read `i`, or `None` if `i >= self.len()`.
    pub fn try_get(&self, i: usize) -> Option<&[u8]> {
        let slot = self.slots.get(i)?;
        self.arena
            .get(slot.start..slot.start.checked_add(slot.len)?)
    }
}

/// Checks a request before any I/O: the byte range must be representable as a file offset.
fn validate(request: &ReadRequest) -> Result<()> {
    debug_assert!(
        request.offset & (ALIGN_BYTES as u64 - 1) == 0
            && request.len_bytes & (ALIGN_BYTES - 1) == 0,
        "misaligned read of {} bytes at offset {} of {}",
        request.len_bytes,
        request.offset,
        request.file.path().display()
    );
    let end = request.offset.checked_add(request.len_bytes as u64);
    match end {
        Some(end) if end <= i64::MAX as u64 => Ok(()),
        _ => Err(Error::io(
            "read",
            request.file.path(),
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "read of {} bytes at offset {} is beyond the largest file offset",
                    request.len_bytes, request.offset
                ),
            ),
        )),
    }
}

/// Lays out one aligned slot for each request from `slots.len()` on, after the `total` bytes of
/// arena the slots before it take, and returns the arena size all of them need.
pub(super) fn layout_slots(
    requests: &[ReadRequest],
    slots: &mut Vec<Slot>,
    total: usize,
) -> Result<usize> {
    let mut total = total;
    let from = slots.len();
    slots.reserve(requests.len().saturating_sub(from));
    for request in requests.get(from..).unwrap_or_default() {
        validate(request)?;
        let too_large = || {
            Error::io(
                "read",
                request.file.path(),
                std::io::Error::new(
                    std::io::ErrorKind::OutOfMemory,
                    "the batch's total size overflows the address space",
                ),
            )
        };
        let padded = round_up(request.len_bytes).ok_or_else(too_large)?;
        slots.push(Slot {
            start: total,
            len: request.len_bytes,
            skipped: false,
        });
        total = total.checked_add(padded).ok_or_else(too_large)?;
    }
    Ok(total)
}

/// Makes `arena` at least `total` bytes long: a large enough arena is kept as it is (its stale
/// bytes are overwritten by the reads), a smaller one is replaced by a zeroed one of exactly
/// `total` bytes.
pub(super) fn ensure_arena(
    arena: &mut AlignedBuf,
    total: usize,
    requests: &[ReadRequest],
) -> Result<()> {
    if arena.len() >= total {
        return Ok(());
    }
    // Free the old arena first, so that growing never holds both.
    *arena = AlignedBuf::zeroed(0);
    *arena = AlignedBuf::try_zeroed(total).ok_or_else(|| {
        let path = requests
            .first()
            .map(|r| r.file.path().to_path_buf())
            .unwrap_or_default();
        Error::io(
            "read",
            path,
            std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("cannot allocate a {total}-byte read arena"),
            ),
        )
    })?;
    Ok(())
}

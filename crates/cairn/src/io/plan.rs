//! What a batch reads: [`ReadRequest`], the reads that wait for an earlier one of the same batch
//! ([`ReadConditions`]), and plans that find their reads while the batch is read ([`ReadPlan`]).

use std::sync::Arc;

use crate::fs::ReadableFile;

/// One read: `len_bytes` bytes at `offset` of `file`.
///
/// Both `offset` and `len_bytes` must be multiples of [`ALIGN_BYTES`](super::ALIGN_BYTES). A
/// misaligned request is a caller bug: it trips a `debug_assert` in debug builds; in release
/// builds it is still handled safely (every request gets an aligned slot in the arena; a
/// misaligned read of an `O_DIRECT` file fails with an `Error::Io` carrying `EINVAL`).
#[derive(Clone, Debug)]
pub struct ReadRequest {
    /// The file to read.
    pub file: Arc<dyn ReadableFile>,
    /// Byte offset in the file.
    pub offset: u64,
    /// Number of bytes to read.
    pub len_bytes: usize,
}

/// Reads of a batch that depend on an earlier read of the same batch.
///
/// A batched lookup reads a key's page in a run that has no filter only if the page it read
/// first, in a newer run, did not settle the key. Said as a condition, that read is submitted the
/// moment the newer page completes, while the rest of the batch is still in flight, instead of in
/// a second batch one device round trip later.
pub(crate) trait ReadConditions {
    /// The earlier read (an index below `i`) that read `i` waits for, if any. An index not below
    /// `i` is ignored (the read is unconditional).
    fn after(&self, i: usize) -> Option<usize>;

    /// Whether read `i` is still wanted, given the bytes of the read it waits for. Called at most
    /// once per read, after that read has completed; a read not wanted (or one that waits for a
    /// read that was skipped) is skipped: [`ReadBatch::skipped`](super::ReadBatch::skipped).
    fn wanted(&mut self, i: usize, earlier: &[u8]) -> bool;
}

/// Every read unconditional.
pub(crate) struct Unconditional;

impl ReadConditions for Unconditional {
    fn after(&self, _: usize) -> Option<usize> {
        None
    }

    fn wanted(&mut self, _: usize, _: &[u8]) -> bool {
        true
    }
}

/// The condition of read `i`, if it has a valid one (an earlier read).
pub(super) fn condition(conditions: &dyn ReadConditions, i: usize) -> Option<usize> {
    conditions.after(i).filter(|&j| j < i)
}

/// The reads of a batch, planned while the batch is read
/// ([`BlockIo::read_planned_into`](super::BlockIo::read_planned_into)): the backend asks for more
/// whenever every read planned so far is submitted, so the caller's work of finding the reads
/// (filter probes, index searches) overlaps the device's work on the first ones instead of
/// preceding all of them.
pub(crate) trait ReadPlan: ReadConditions {
    /// The reads planned so far. Planning only appends.
    fn requests(&self) -> &[ReadRequest];

    /// Plans some more reads, at most `pages_left` pages of [`ALIGN_BYTES`](super::ALIGN_BYTES)
    /// in all (except that a plan with no read yet may take one read of any size). Returns
    /// whether it may plan more; once it returns false it is not called again. The backend may
    /// also stop asking earlier (out of room, or a file it must read serially): the caller then
    /// reads what is left of its plan in another batch.
    fn plan_more(&mut self, pages_left: usize) -> bool;

    /// The pages the whole plan will probably need, to size the arena once (a plan that finds
    /// less room than it needs stops early; the caller reads the rest in another batch).
    fn pages_hint(&self) -> usize;

    /// Read `i` has completed with these bytes (neither skipped nor empty). The backend calls
    /// it for some completed reads while others are still in flight and it has nothing else to
    /// do, at most once per read, so that work on the pages (a lookup's search) overlaps the
    /// device instead of following the whole batch. An optimisation only: a backend may call
    /// it for no read at all (the pread backend never does), and the bytes stay in the batch.
    fn read_done(&mut self, _i: usize, _bytes: &[u8]) {}
}

/// A plan whose reads are all known:
/// [`BlockIo::read_batch_into_with`](super::BlockIo::read_batch_into_with).
pub(super) struct FixedPlan<'a> {
    pub(super) requests: &'a [ReadRequest],
    pub(super) conditions: &'a mut dyn ReadConditions,
}

impl ReadConditions for FixedPlan<'_> {
    fn after(&self, i: usize) -> Option<usize> {
        self.conditions.after(i)
    }

    fn wanted(&mut self, i: usize, earlier: &[u8]) -> bool {
        self.conditions.wanted(i, earlier)
    }
}

impl ReadPlan for FixedPlan<'_> {
    fn requests(&self) -> &[ReadRequest] {
        self.requests
    }

    fn plan_more(&mut self, _: usize) -> bool {
        false
    }

    fn pages_hint(&self) -> usize {
        0
    }
}

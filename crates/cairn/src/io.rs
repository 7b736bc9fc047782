//! Block I/O: reads a batch of page spans from run files, all at once.
//!
//! Owns: [`BlockIo`] (the per-session read engine, with an io_uring backend on Linux and a serial
//! `pread` fallback), [`AlignedBuf`] (heap memory aligned for `O_DIRECT`), [`ReadRequest`],
//! [`ReadBatch`] (one aligned arena holding every read of a batch, in request order, reusable
//! from batch to batch) and [`IoReport`] (which backend is in use, every fallback taken and why).
//!
//! May call: `fs` ([`crate::fs::ReadableFile`]: `read_exact_at`, `is_direct`, `raw_fd`), `libc::pread`,
//! the `io-uring` crate, `log` (fallbacks only, never per read), and `std`. Must never touch: engine structures (runs, pages, caches) or
//! file-system metadata; it neither opens nor closes files (the caller's `Arc`s keep the
//! descriptors open for the whole call).
//!
//! # Cost (hot path: a batched lookup)
//!
//! A 256-key lookup batch touches about 256 pages of 4 KiB, 1 MiB in all. With io_uring that is
//! one arena taken from the engine's pool (no allocation once a batch of that size has run:
//! arenas of up to 4 MiB are kept, at most one per concurrent caller), 256 SQEs of 64 B written
//! to a shared ring, one `io_uring_enter` per planned part of 32 keys ([`BlockIo::read_planned_into`]:
//! the reads of a part are in flight while the next is planned), plus one more
//! per wakeup while completions trickle in (with `O_DIRECT` on an NVMe drive the 256 reads are
//! serviced in parallel: about one device latency, ~80-100 us, instead of 256 of them). The `pread`
//! backend makes 256 syscalls and waits for each read in turn (256 device latencies when the pages
//! are not cached). Batches larger than [`QUEUE_DEPTH_MAX`] keep at most that many reads in flight
//! and top the ring up as completions arrive.
//!
//! # Fallbacks
//!
//! Each is logged once at `warn` and recorded in [`IoReport`]: `Auto` without a working io_uring
//! uses pread (at session open); a batch for which no further ring can be created is read with
//! pread (counted); files opened for direct reads on a file system that refuses `O_DIRECT` are
//! read through the page cache (found by [`crate::fs::FileSystem::probe_direct_io`] when the
//! session opens, recorded with `BlockIo::with_direct_io`).
//!
//! # Concurrency
//!
//! [`BlockIo`] is `Send + Sync`. Each `read_batch` call takes a ring from a small pool
//! (`Mutex<Vec<IoUring>>`, held only to pop or push) or creates one when the pool is empty, and
//! returns it when done: concurrent lookups never share a ring and never wait for another
//! thread's batch. A ring is created only when every existing ring is in use, so the number of
//! rings is at most the largest number of `read_batch` calls that ever ran at the same time (and
//! at least one, made by the probe). A ring costs about 24 KiB of kernel-shared memory
//! (256 SQEs of 64 B + 512 CQEs of 16 B + index arrays) and one file descriptor.
//!
//! # Safety of in-flight reads
//!
//! The kernel writes into the arena asynchronously, so `read_batch` never returns while a read it
//! submitted is still in flight: on every error path it stops submitting and drains all
//! outstanding completions first. The arena is held in a `ManuallyDrop` during submission, so even
//! an unexpected unwind leaks it instead of freeing memory the kernel may still write; if the
//! kernel itself stops answering (`io_uring_enter` fails persistently), the arena and the ring are
//! leaked the same way and the error is returned.

use std::collections::VecDeque;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
pub use crate::fs::DirectIo;
use crate::fs::ReadableFile;

// The alignment of `O_DIRECT` buffers, offsets and lengths is the file system's rule
// (`crate::fs::ALIGN_BYTES`); every buffer and read here follows it.
pub(crate) use crate::fs::ALIGN_BYTES;

/// Most reads in flight at once in the io_uring backend (ring size); larger batches are submitted
/// in waves (the ring is topped up as reads complete, so at most this many are outstanding).
///
/// 256 holds a whole typical lookup batch (256 keys, ~256 pages) in one wave, which is one
/// `io_uring_enter`. It is well beyond the queue depth at which one NVMe drive saturates
/// (32-128), so deeper rings would only queue in the kernel, and it keeps a ring small
/// (~24 KiB with the default completion queue of twice the size, which can never overflow
/// because at most 256 reads are outstanding).
pub const QUEUE_DEPTH_MAX: usize = 256;

/// Longest single read submitted to the kernel. Longer requests are split into consecutive reads
/// (handled like short reads). It keeps lengths within `u32` (io_uring) and below Linux's
/// per-call limit of `0x7fff_f000` bytes, and is a multiple of [`ALIGN_BYTES`].
const READ_CHUNK_MAX: usize = 1 << 30;

/// How often one read may fail with `EINTR`/`EAGAIN` before the error is reported.
const TRANSIENT_RETRY_MAX: u32 = 64;

/// How often in a row `io_uring_enter` may fail transiently (`EINTR`, `EAGAIN`, `EBUSY`) before the
/// ring is given up as broken.
const ENTER_RETRY_MAX: u32 = 1000;

// ------------------------------------------------------------------------------------------------
// Aligned buffers.

/// The alignment unit as a type, so that an empty buffer can point at a dangling but aligned
/// address without any allocation.
#[repr(C, align(4096))]
struct AlignUnit([u8; ALIGN_BYTES]);

/// A heap buffer aligned to [`ALIGN_BYTES`], zero-initialised, whose length is a multiple of
/// [`ALIGN_BYTES`].
///
/// An empty buffer allocates nothing. Dereferences to `[u8]`.
pub struct AlignedBuf {
    /// Start of the allocation (dangling but aligned when `len == 0`).
    ptr: NonNull<u8>,
    /// Length in bytes, a multiple of `ALIGN_BYTES`.
    len: usize,
}

// SAFETY: an AlignedBuf uniquely owns its allocation, exactly like a `Box<[u8]>`; shared access
// only hands out `&[u8]`, and mutation needs `&mut self`.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` permits only reads of plain bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zero-filled buffer of at least `len_bytes` bytes: the length is rounded up to a multiple
    /// of [`ALIGN_BYTES`].
    ///
    /// Panics when the size overflows `isize` (like `Vec` capacity overflow) and aborts when the
    /// allocator fails (like `Vec`); use [`AlignedBuf::try_zeroed`] to get `None` instead.
    pub fn zeroed(len_bytes: usize) -> AlignedBuf {
        let Some(len) = round_up(len_bytes) else {
            panic!("AlignedBuf of {len_bytes} bytes overflows");
        };
        let Ok(layout) = std::alloc::Layout::from_size_align(len, ALIGN_BYTES) else {
            panic!("AlignedBuf of {len_bytes} bytes overflows");
        };
        match AlignedBuf::try_zeroed(len) {
            Some(buf) => buf,
            None => std::alloc::handle_alloc_error(layout),
        }
    }

    /// Like [`AlignedBuf::zeroed`], but returns `None` when the size overflows or the allocator
    /// fails.
    pub fn try_zeroed(len_bytes: usize) -> Option<AlignedBuf> {
        let len = round_up(len_bytes)?;
        if len == 0 {
            return Some(AlignedBuf {
                ptr: NonNull::<AlignUnit>::dangling().cast::<u8>(),
                len: 0,
            });
        }
        let layout = std::alloc::Layout::from_size_align(len, ALIGN_BYTES).ok()?;
        // SAFETY: `layout` has a non-zero size (checked above) and a valid power-of-two alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(AlignedBuf {
            ptr: NonNull::new(ptr)?,
            len,
        })
    }

    /// Length in bytes (a multiple of [`ALIGN_BYTES`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw pointer to the start, for handing regions to the kernel. No reference to the contents
    /// is created.
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

/// `len` rounded up to a multiple of [`ALIGN_BYTES`], `None` on overflow.
fn round_up(len: usize) -> Option<usize> {
    len.checked_next_multiple_of(ALIGN_BYTES)
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: the same size and alignment were accepted by `Layout::from_size_align` when the
        // buffer was allocated.
        let layout =
            unsafe { std::alloc::Layout::from_size_align_unchecked(self.len, ALIGN_BYTES) };
        // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is non-null, aligned, and valid for `len` initialised (zeroed or written)
        // bytes that this buffer owns; for `len == 0` a dangling aligned pointer is allowed.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

// ------------------------------------------------------------------------------------------------
// Requests and results.

/// One read: `len_bytes` bytes at `offset` of `file`.
///
/// Both `offset` and `len_bytes` must be multiples of [`ALIGN_BYTES`]. A misaligned request is a
/// caller bug: it trips a `debug_assert` in debug builds; in release builds it is still handled
/// safely (every request gets an aligned slot in the arena; a misaligned read of an `O_DIRECT`
/// file fails with an `Error::Io` carrying `EINVAL`).
#[derive(Clone, Debug)]
pub struct ReadRequest {
    /// The file to read.
    pub file: Arc<dyn ReadableFile>,
    /// Byte offset in the file.
    pub offset: u64,
    /// Number of bytes to read.
    pub len_bytes: usize,
}

/// Where one request's bytes live in the arena.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Byte offset in the arena (a multiple of `ALIGN_BYTES`).
    start: usize,
    /// Number of bytes requested.
    len: usize,
    /// Set when the request was conditional and not wanted ([`ReadConditions`]): its bytes are
    /// stale.
    skipped: bool,
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
    /// read that was skipped) is skipped: [`ReadBatch::skipped`].
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
fn condition(conditions: &dyn ReadConditions, i: usize) -> Option<usize> {
    conditions.after(i).filter(|&j| j < i)
}

/// The reads of a batch, planned while the batch is read ([`BlockIo::read_planned_into`]): the
/// backend asks for more whenever every read planned so far is submitted, so the caller's work
/// of finding the reads (filter probes, index searches) overlaps the device's work on the first
/// ones instead of preceding all of them.
pub(crate) trait ReadPlan: ReadConditions {
    /// The reads planned so far. Planning only appends.
    fn requests(&self) -> &[ReadRequest];

    /// Plans some more reads, at most `pages_left` pages of [`ALIGN_BYTES`] in all (except that
    /// a plan with no read yet may take one read of any size). Returns whether it may plan more;
    /// once it returns false it is not called again. The backend may also stop asking earlier
    /// (out of room, or a file it must read serially): the caller then reads what is left of
    /// its plan in another batch.
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

/// A plan whose reads are all known: [`BlockIo::read_batch_into_with`].
struct FixedPlan<'a> {
    requests: &'a [ReadRequest],
    conditions: &'a mut dyn ReadConditions,
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

/// The results of a batch: one aligned arena holding every read, in request order.
///
/// A batch can be refilled with [`BlockIo::read_batch_into`], which reuses its arena when it is
/// large enough: a caller that reads in waves allocates once.
#[derive(Debug)]
pub struct ReadBatch {
    arena: AlignedBuf,
    slots: Vec<Slot>,
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

    /// Whether read `i` was conditional and not wanted ([`ReadConditions`]); its bytes (from
    /// [`ReadBatch::get`]) are then stale. False for `i >= self.len()`.
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

// ------------------------------------------------------------------------------------------------
// Read progress, shared by both backends.

/// Progress of one request: how many bytes are known good, and how many transient errors it saw.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// Bytes at the start of the request that have been read.
    done: usize,
    /// Start (within the request) of the read currently issued.
    issued_start: usize,
    /// `EINTR`/`EAGAIN` failures so far.
    transient: u32,
}

/// What to do after a read of a request completed.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// The request is complete.
    Done,
    /// Issue another read starting at this byte of the request.
    ReadFrom(usize),
}

impl Progress {
    /// Accounts for a read that started at byte `start` of a `len`-byte request and returned `n`
    /// bytes. A short read continues from where it stopped; for `O_DIRECT` files the next read
    /// starts at the aligned position below (re-reading a few bytes) because the kernel rejects
    /// misaligned offsets. A read that returns nothing new means end of file.
    fn on_read(
        &mut self,
        start: usize,
        n: usize,
        len: usize,
        direct: bool,
    ) -> std::result::Result<Next, std::io::Error> {
        let end = start.saturating_add(n).min(len);
        if n == 0 || end <= self.done {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("end of file after {} of {} bytes", self.done, len),
            ));
        }
        self.done = end;
        if self.done >= len {
            return Ok(Next::Done);
        }
        let from = if direct {
            self.done - self.done % ALIGN_BYTES
        } else {
            self.done
        };
        Ok(Next::ReadFrom(from))
    }

    /// Accounts for an `EINTR`/`EAGAIN` failure; true if the read may be retried.
    fn on_transient(&mut self) -> bool {
        self.transient += 1;
        self.transient <= TRANSIENT_RETRY_MAX
    }
}

/// Whether an errno means "try again".
fn is_transient(errno: i32) -> bool {
    errno == libc::EINTR || errno == libc::EAGAIN
}

/// Length of the read issued from byte `start` of a `len`-byte request.
fn chunk_len(start: usize, len: usize) -> usize {
    len.saturating_sub(start).min(READ_CHUNK_MAX)
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
fn layout_slots(requests: &[ReadRequest], slots: &mut Vec<Slot>, total: usize) -> Result<usize> {
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
fn ensure_arena(arena: &mut AlignedBuf, total: usize, requests: &[ReadRequest]) -> Result<()> {
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

// ------------------------------------------------------------------------------------------------
// The pread backend (also used for files without a descriptor).

/// Reads `buf.len()` bytes at `offset` of `file`, retrying short reads and `EINTR`.
fn read_serial(file: &dyn ReadableFile, buf: &mut [u8], offset: u64) -> Result<()> {
    #[cfg(unix)]
    if let Some(fd) = file.raw_fd() {
        return pread_full(fd, buf, offset, file.is_direct())
            .map_err(|e| Error::io("read", file.path(), e));
    }
    file.read_exact_at(buf, offset)
}

/// `pread` until `buf` is full; end of file is `UnexpectedEof`.
#[cfg(unix)]
fn pread_full(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    offset: u64,
    direct: bool,
) -> std::io::Result<()> {
    let len = buf.len();
    let mut progress = Progress::default();
    let mut start = 0usize;
    while progress.done < len {
        let Some(region) = buf.get_mut(start..) else {
            break; // unreachable: `start <= done < len`
        };
        let count = chunk_len(start, len);
        let pos = offset
            .checked_add(start as u64)
            .and_then(|pos| libc::off_t::try_from(pos).ok())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `region` is a live, exclusively borrowed buffer of at least `count` bytes
        // (`count <= len - start`); `fd` is kept open by the caller's `Arc<dyn ReadableFile>`.
        let rc = unsafe { libc::pread(fd, region.as_mut_ptr().cast(), count, pos) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error().is_some_and(is_transient) && progress.on_transient() {
                continue;
            }
            return Err(err);
        }
        match progress.on_read(start, rc as usize, len, direct)? {
            Next::Done => break,
            Next::ReadFrom(from) => start = from,
        }
    }
    Ok(())
}

/// Reads the planned requests from `from` on one after the other (those before it are read); a
/// conditional one right after deciding whether it is wanted (the read it waits for comes
/// earlier, so it is done by then).
fn read_all_serial(
    plan: &mut dyn ReadPlan,
    from: usize,
    slots: &mut [Slot],
    arena: &mut AlignedBuf,
) -> Result<()> {
    for i in from..plan.requests().len() {
        let Some(&slot) = slots.get(i) else {
            break; // unreachable: one slot per request
        };
        if let Some(j) = condition(plan, i) {
            let wanted = match slots.get(j) {
                Some(earlier) if !earlier.skipped => arena
                    .get(earlier.start..earlier.start + earlier.len)
                    .is_some_and(|bytes| plan.wanted(i, bytes)),
                _ => false,
            };
            if !wanted {
                if let Some(slot) = slots.get_mut(i) {
                    slot.skipped = true;
                }
                continue;
            }
        }
        if slot.len == 0 {
            continue;
        }
        let (Some(buf), Some(request)) = (
            arena.get_mut(slot.start..slot.start + slot.len),
            plan.requests().get(i),
        ) else {
            continue; // unreachable: slots are laid out inside the arena, one per request
        };
        read_serial(request.file.as_ref(), buf, request.offset)?;
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// The io_uring backend.

#[cfg(target_os = "linux")]
mod uring {
    use super::*;
    use io_uring::{opcode, types, IoUring};

    /// How a batch on a ring ended.
    pub(super) enum Outcome {
        /// Every read completed; the ring is idle.
        Ok,
        /// A read failed; every other read was drained, the ring is idle and reusable.
        Failed(Error),
        /// The ring stopped working with reads possibly still in flight: the arena and the ring
        /// must be leaked.
        Broken(Error),
    }

    /// Creates a ring and checks it works: the kernel supports `IORING_OP_READ` and answers a NOP.
    pub(super) fn probe() -> std::io::Result<IoUring> {
        let mut ring = IoUring::new(QUEUE_DEPTH_MAX as u32)?;
        let mut probe = io_uring::Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::Read::CODE) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the kernel's io_uring lacks IORING_OP_READ",
            ));
        }
        let nop = opcode::Nop::new().build().user_data(u64::MAX);
        // SAFETY: a NOP references no memory.
        unsafe { ring.submission().push(&nop) }
            .map_err(|_| std::io::Error::other("fresh io_uring has a full submission queue"))?;
        let mut attempts = 0;
        loop {
            match ring.submit_and_wait(1) {
                Ok(_) => break,
                Err(e) if e.raw_os_error().is_some_and(is_transient) && attempts < 100 => {
                    attempts += 1;
                }
                Err(e) => return Err(e),
            }
        }
        // The ring is dropped on any error below, so a stray completion can never leak into a
        // later batch.
        let result = ring.completion().next().map(|cqe| cqe.result());
        match result {
            Some(result) if result >= 0 => Ok(ring),
            Some(result) => Err(std::io::Error::from_raw_os_error(-result)),
            None => Err(std::io::Error::other("io_uring NOP did not complete")),
        }
    }

    /// Creates a ring for the pool.
    pub(super) fn new_ring() -> std::io::Result<IoUring> {
        IoUring::new(QUEUE_DEPTH_MAX as u32)
    }

    /// What [`read`] keeps of the reads it has issued and those waiting to be.
    struct Flight {
        /// Each planned request's progress.
        progress: Vec<Progress>,
        /// Reads completed, skipped or settled without bytes: a condition planned later on one
        /// of them is decided when it is planned.
        finished: Vec<bool>,
        /// Reads to issue before new ones: retries of short or interrupted reads, and
        /// conditional reads found wanted.
        queued: VecDeque<(usize, usize)>,
        /// (earlier, later) for every conditional read, by earlier read (no allocation without).
        dependents: Vec<(usize, usize)>,
        in_flight: usize,
        /// The first failure; nothing new is issued after it.
        failure: Option<Error>,
        /// Requests from `limit` on are not issued here (see [`Planning::serial_from`]).
        limit: usize,
        /// Reads completed with bytes, not yet offered to [`ReadPlan::read_done`].
        ready: Vec<usize>,
    }

    /// Completed reads handed to [`ReadPlan::read_done`] between two looks at the completion
    /// queue (about 1 us each for a lookup's page of small values; a lookup copies the value it
    /// finds, so longer for large ones), so that a read released by a completion waits at most
    /// that long to be submitted.
    const READY_PER_TURN: usize = 8;

    /// Where planning stands during [`read`]: whether the plan may have more, the arena bytes
    /// its reads take so far, and the first read (planned in a later part) whose file has no
    /// descriptor, from which the caller reads serially.
    pub(super) struct Planning {
        pub(super) more: bool,
        pub(super) total: usize,
        pub(super) serial_from: Option<usize>,
    }

    /// Reads the planned requests through `ring` (all with a descriptor when called), asking
    /// `plan` for more whenever every planned read is submitted: the submitted reads go to the
    /// kernel first, then completions already there are taken, then the plan runs while the
    /// device works. A conditional request is submitted, ahead of new ones, as soon as the read
    /// it waits for completes and the plan wants it; otherwise it is marked skipped. A later
    /// part with a file that has no descriptor stops planning: the reads from it on are left to
    /// the caller (`state.serial_from`). Never returns with a read in flight unless it returns
    /// [`Outcome::Broken`].
    pub(super) fn read(
        ring: &mut IoUring,
        plan: &mut dyn ReadPlan,
        slots: &mut Vec<Slot>,
        arena: &mut AlignedBuf,
        state: &mut Planning,
    ) -> Outcome {
        let depth = QUEUE_DEPTH_MAX
            .min(ring.params().sq_entries() as usize)
            .max(1);
        // One base pointer for the whole loop: no reference to the arena's contents exists while
        // the kernel writes into it, and the arena is never replaced while reads are in flight.
        let base = arena.as_mut_ptr();
        let capacity = arena.len();
        let planned = plan.requests().len();
        let mut f = Flight {
            progress: vec![Progress::default(); planned],
            finished: vec![false; planned],
            queued: VecDeque::new(),
            dependents: Vec::new(),
            in_flight: 0,
            failure: None,
            limit: planned,
            ready: Vec::new(),
        };
        add_dependents(&*plan, 0, &mut f.dependents);
        f.settle_empty(plan, 0, slots, base);
        let mut next_new = 0usize;
        let mut enter_failures = 0u32;

        loop {
            if f.failure.is_none() {
                let requests = plan.requests();
                let mut sq = ring.submission();
                while f.in_flight < depth {
                    let job = match f.queued.pop_front() {
                        Some(job) => Some(job),
                        None => next_fd_request(requests, &*plan, slots, &mut next_new, f.limit)
                            .map(|i| (i, 0)),
                    };
                    let Some((i, start)) = job else { break };
                    let (Some(request), Some(&slot)) = (requests.get(i), slots.get(i)) else {
                        continue; // unreachable: jobs index the requests
                    };
                    let Some(fd) = request.file.raw_fd() else {
                        continue; // unreachable: only requests with a descriptor are queued
                    };
                    let count = chunk_len(start, slot.len);
                    // `start < slot.len`, so the region lies inside the request's slot.
                    let buf = base.wrapping_add(slot.start + start);
                    let entry = opcode::Read::new(types::Fd(fd), buf, count as u32)
                        .offset(request.offset + start as u64)
                        .build()
                        .user_data(i as u64);
                    // SAFETY: the kernel writes at most `count` bytes at `buf`, which lie inside
                    // the arena (slots are laid out within its `capacity`). The arena is not
                    // freed, replaced or referenced before this read completes (this function
                    // drains every completion before returning, and the caller leaks the arena
                    // on `Outcome::Broken` or an unwind). The descriptor stays open because the
                    // plan's requests hold its `Arc` for the whole call (planning only appends).
                    if unsafe { sq.push(&entry) }.is_err() {
                        f.queued.push_front((i, start));
                        break; // unreachable: at most `depth` entries are ever outstanding
                    }
                    if let Some(p) = f.progress.get_mut(i) {
                        p.issued_start = start;
                    }
                    f.in_flight += 1;
                }
            }
            let planning = state.more
                && f.failure.is_none()
                && f.queued.is_empty()
                && next_new >= f.limit
                && f.in_flight < depth;
            if planning {
                // Let the device start on what is submitted, take what has completed, then plan
                // the next part while the reads are in flight.
                if f.in_flight > 0 {
                    if let Err(e) = submit_queued(ring, plan.requests()) {
                        return Outcome::Broken(e);
                    }
                    complete(ring, plan, slots, base, &mut f);
                }
                let from = plan.requests().len();
                state.more = plan.plan_more(capacity.saturating_sub(state.total) / ALIGN_BYTES);
                let laid_out = layout_slots(plan.requests(), slots, state.total).and_then(|t| {
                    if t <= capacity {
                        Ok(t)
                    } else {
                        // Only a plan that ignores the room it was given gets here.
                        Err(Error::io(
                            "read",
                            plan.requests()
                                .get(from)
                                .map(|r| r.file.path().to_path_buf())
                                .unwrap_or_default(),
                            std::io::Error::new(
                                std::io::ErrorKind::InvalidInput,
                                "a read plan outgrew the arena it was given",
                            ),
                        ))
                    }
                });
                match laid_out {
                    Ok(total) => state.total = total,
                    Err(e) => {
                        // Nothing of this part is issued; the reads in flight are drained.
                        slots.truncate(from);
                        f.failure = Some(e);
                        state.more = false;
                        continue;
                    }
                }
                let planned = plan.requests().len();
                f.progress.resize(planned, Progress::default());
                f.finished.resize(planned, false);
                add_dependents(&*plan, from, &mut f.dependents);
                f.limit = planned;
                let requests = plan.requests();
                let no_fd = requests
                    .get(from..)
                    .unwrap_or_default()
                    .iter()
                    .zip(slots.get(from..).unwrap_or_default());
                if let Some(k) = no_fd
                    .enumerate()
                    .find(|(_, (r, s))| s.len > 0 && r.file.raw_fd().is_none())
                    .map(|(k, _)| from + k)
                {
                    f.limit = k;
                    state.serial_from = Some(k);
                    state.more = false;
                }
                // Conditions on reads of earlier parts that have already finished: decide now
                // (their completions released only the reads planned by then).
                if f.failure.is_none() {
                    let late: Vec<(usize, usize)> = (from..planned)
                        .filter_map(|i| condition(&*plan, i).map(|j| (j, i)))
                        .filter(|&(j, i)| {
                            j < from && i < f.limit && f.finished.get(j).copied().unwrap_or(false)
                        })
                        .collect();
                    f.settle_empty(plan, from, slots, base);
                    for (j, i) in late {
                        let skipped = slots.get(j).is_some_and(|slot| slot.skipped);
                        if let Some(next) = decide(j, skipped, i, plan, slots, base, &mut f.queued)
                        {
                            f.release(vec![next], plan, slots, base);
                        }
                    }
                }
                continue;
            }
            if f.in_flight == 0 {
                break;
            }
            if f.failure.is_none() && !f.ready.is_empty() {
                // Nothing can be planned now (the plan is done or the ring is full) and reads
                // are in flight: hand a few completed pages to the plan instead of waiting,
                // sending any released reads to the device first and taking the completions
                // that came meanwhile after.
                if !ring.submission().is_empty() {
                    if let Err(e) = submit_queued(ring, plan.requests()) {
                        return Outcome::Broken(e);
                    }
                }
                let from = f.ready.len().saturating_sub(READY_PER_TURN);
                for i in f.ready.drain(from..) {
                    if let Some(slot) = slots.get(i) {
                        // SAFETY: read `i` has completed and nothing is or will be in flight
                        // into its slot (slots are disjoint, and a completed read is not issued
                        // again), so these bytes of the arena are not written while the slice
                        // lives; they lie inside the arena (laid out by `layout_slots`).
                        let bytes = unsafe {
                            std::slice::from_raw_parts(base.wrapping_add(slot.start), slot.len)
                        };
                        plan.read_done(i, bytes);
                    }
                }
                complete(ring, plan, slots, base, &mut f);
                continue;
            }
            match ring.submit_and_wait(1) {
                Ok(_) => enter_failures = 0,
                Err(e)
                    if e.raw_os_error()
                        .is_some_and(|errno| is_transient(errno) || errno == libc::EBUSY) =>
                {
                    enter_failures += 1;
                    if enter_failures > ENTER_RETRY_MAX {
                        return Outcome::Broken(enter_error(plan.requests(), e));
                    }
                    std::thread::yield_now();
                }
                Err(e) => return Outcome::Broken(enter_error(plan.requests(), e)),
            }
            complete(ring, plan, slots, base, &mut f);
        }
        match f.failure {
            None => Outcome::Ok,
            Some(e) => Outcome::Failed(e),
        }
    }

    /// Sends the entries pushed so far to the kernel without waiting. A transient refusal
    /// (`EAGAIN`, `EINTR`, `EBUSY`) leaves them queued for the next `io_uring_enter`; any other
    /// failure is returned.
    fn submit_queued(ring: &mut IoUring, requests: &[ReadRequest]) -> Result<()> {
        match ring.submit() {
            Err(e)
                if !e
                    .raw_os_error()
                    .is_some_and(|errno| is_transient(errno) || errno == libc::EBUSY) =>
            {
                Err(enter_error(requests, e))
            }
            _ => Ok(()),
        }
    }

    /// Appends to `dependents` the (earlier, later) pair of every conditional request from
    /// `from` on, keeping it sorted by earlier read.
    fn add_dependents(plan: &dyn ReadPlan, from: usize, dependents: &mut Vec<(usize, usize)>) {
        let before = dependents.len();
        dependents.extend(
            (from..plan.requests().len()).filter_map(|i| condition(plan, i).map(|j| (j, i))),
        );
        let appended = dependents
            .get(before.saturating_sub(1)..)
            .unwrap_or_default();
        if appended.windows(2).any(|w| w[0] > w[1]) {
            dependents.sort_unstable();
        }
    }

    /// Takes every completion the ring holds: a read done releases the reads that wait for it,
    /// a short one is queued for its rest, a transient failure for a retry, and the first other
    /// failure is recorded (no new reads are issued after it).
    fn complete(
        ring: &mut IoUring,
        plan: &mut dyn ReadPlan,
        slots: &mut [Slot],
        base: *mut u8,
        f: &mut Flight,
    ) {
        for cqe in ring.completion() {
            f.in_flight = f.in_flight.saturating_sub(1);
            let i = cqe.user_data() as usize;
            let (Some(request), Some(&slot), Some(p)) =
                (plan.requests().get(i), slots.get(i), f.progress.get_mut(i))
            else {
                continue; // unreachable: every entry carries its request index
            };
            let result = cqe.result();
            if result < 0 {
                let errno = -result;
                if is_transient(errno) && p.on_transient() {
                    f.queued.push_back((i, p.issued_start));
                } else if f.failure.is_none() {
                    f.failure = Some(Error::io(
                        "read",
                        request.file.path(),
                        std::io::Error::from_raw_os_error(errno),
                    ));
                }
                continue;
            }
            let direct = request.file.is_direct();
            match p.on_read(p.issued_start, result as usize, slot.len, direct) {
                Ok(Next::Done) => {
                    if f.failure.is_none() {
                        f.release(vec![(i, false)], plan, slots, base);
                    }
                }
                Ok(Next::ReadFrom(from)) => f.queued.push_back((i, from)),
                Err(e) => {
                    if f.failure.is_none() {
                        f.failure = Some(Error::io("read", request.file.path(), e));
                    }
                }
            }
        }
    }

    /// The next unconditional request (from `*next`, below `limit`) that has a descriptor and
    /// bytes to read.
    fn next_fd_request(
        requests: &[ReadRequest],
        conditions: &dyn ReadConditions,
        slots: &[Slot],
        next: &mut usize,
        limit: usize,
    ) -> Option<usize> {
        while *next < limit {
            let (Some(request), Some(slot)) = (requests.get(*next), slots.get(*next)) else {
                break;
            };
            let i = *next;
            *next += 1;
            if slot.len > 0 && request.file.raw_fd().is_some() && condition(conditions, i).is_none()
            {
                return Some(i);
            }
        }
        None
    }

    impl Flight {
        /// The reads in `settled` are finished (`(read, skipped)`: completed, or skipped, or of
        /// no bytes): marks them so and decides each read waiting for them, queueing the wanted
        /// ones and marking the others skipped, along with every read that waits (directly or
        /// not) for a skipped one. A wanted read of no bytes counts as finished at once. Reads
        /// from `limit` on are left to the caller.
        fn release(
            &mut self,
            mut settled: Vec<(usize, bool)>,
            conditions: &mut dyn ReadConditions,
            slots: &mut [Slot],
            base: *mut u8,
        ) {
            while let Some((earlier, earlier_skipped)) = settled.pop() {
                if let Some(f) = self.finished.get_mut(earlier) {
                    *f = true;
                }
                if !earlier_skipped && slots.get(earlier).is_some_and(|slot| slot.len > 0) {
                    self.ready.push(earlier);
                }
                let from = self.dependents.partition_point(|&(e, _)| e < earlier);
                for &(_, later) in self.dependents[from..]
                    .iter()
                    .take_while(|&&(e, _)| e == earlier)
                    .filter(|&&(_, later)| later < self.limit)
                {
                    let queued = &mut self.queued;
                    if let Some(next) = decide(
                        earlier,
                        earlier_skipped,
                        later,
                        conditions,
                        slots,
                        base,
                        queued,
                    ) {
                        settled.push(next);
                    }
                }
            }
        }

        /// Unconditional requests of no bytes in `from..limit` are finished as soon as they are
        /// planned: releases the reads that wait for them.
        fn settle_empty(
            &mut self,
            plan: &mut dyn ReadPlan,
            from: usize,
            slots: &mut [Slot],
            base: *mut u8,
        ) {
            let empty: Vec<(usize, bool)> = (from..self.limit)
                .filter(|&i| {
                    slots.get(i).is_some_and(|slot| slot.len == 0) && condition(&*plan, i).is_none()
                })
                .map(|i| (i, false))
                .collect();
            if !empty.is_empty() {
                self.release(empty, plan, slots, base);
            }
        }
    }

    /// Decides read `later`, which waits for the finished read `earlier`: queues it if wanted,
    /// else marks it skipped. Returns it as finished (`(later, skipped)`) unless it was queued.
    fn decide(
        earlier: usize,
        earlier_skipped: bool,
        later: usize,
        conditions: &mut dyn ReadConditions,
        slots: &mut [Slot],
        base: *mut u8,
        queued: &mut VecDeque<(usize, usize)>,
    ) -> Option<(usize, bool)> {
        let wanted = !earlier_skipped
            && slots.get(earlier).is_some_and(|slot| {
                // SAFETY: read `earlier` has completed and nothing is or will be in flight into
                // its slot (slots are disjoint, and a completed read is not issued again), so
                // these bytes of the arena are not written while the slice lives; they lie
                // inside the arena (laid out by `layout_slots`).
                let bytes =
                    unsafe { std::slice::from_raw_parts(base.wrapping_add(slot.start), slot.len) };
                conditions.wanted(later, bytes)
            });
        let slot = slots.get_mut(later)?;
        if !wanted {
            slot.skipped = true;
            Some((later, true))
        } else if slot.len == 0 {
            Some((later, false))
        } else {
            queued.push_back((later, 0));
            None
        }
    }

    fn enter_error(requests: &[ReadRequest], e: std::io::Error) -> Error {
        let path = requests
            .first()
            .map(|r| r.file.path().to_path_buf())
            .unwrap_or_default();
        Error::io("io_uring_enter", path, e)
    }
}

// ------------------------------------------------------------------------------------------------
// The engine.

/// Which block I/O backend a session's batched lookups use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoBackendKind {
    /// io_uring if it works, else pread.
    Auto,
    /// io_uring (Linux only); every read of a batch is submitted together.
    Uring,
    /// One `pread` per read, one after the other.
    Pread,
}

impl IoBackendKind {
    /// A short name: `"auto"`, `"io_uring"` or `"pread"`.
    pub fn name(self) -> &'static str {
        match self {
            IoBackendKind::Auto => "auto",
            IoBackendKind::Uring => "io_uring",
            IoBackendKind::Pread => "pread",
        }
    }
}

/// How a session's block I/O really works, including every fallback it took and why:
/// see [`crate::Session::io_report`].
///
/// Its `Display` is one line, e.g. `io_uring; direct I/O available in /data/s/active`, or
/// `pread (io_uring unavailable: io_uring_setup failed: Operation not permitted (os error 1));
/// direct I/O refused in /dev/shm/s/active (...): reads go through the page cache`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct IoReport {
    /// The backend in use: `Uring` or `Pread`, never `Auto`.
    pub backend: IoBackendKind,
    /// Why io_uring is not in use (`None` when it is): why the ring failed to start, or that
    /// pread was asked for.
    pub uring_unavailable: Option<String>,
    /// Batches read with pread although the backend is io_uring, because no further ring could
    /// be created for them (out of file descriptors or locked memory, say). Normally 0.
    pub pread_fallback_batches: u64,
    /// Whether reads that ask for `O_DIRECT` (tables whose [`crate::DiskCachePolicy`] keeps
    /// some level out of the page cache) bypass the page cache.
    pub direct_io: DirectIo,
}

impl fmt::Display for IoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.backend.name())?;
        if let Some(reason) = &self.uring_unavailable {
            write!(f, " (io_uring unavailable: {reason})")?;
        }
        if self.pread_fallback_batches > 0 {
            write!(
                f,
                " ({} batches read with pread: no ring could be created)",
                self.pread_fallback_batches
            )?;
        }
        write!(f, "; {}", self.direct_io)
    }
}

/// Largest arena a [`BlockIo`] keeps in its pool for a later batch: 4 MiB (1,024 pages).
///
/// A typical lookup batch (256 keys, about 256 pages, 1 MiB) then reuses a pooled arena instead
/// of allocating and zeroing a new one on every call. Larger arenas (up to a lookup wave of
/// 16 MiB, see `lookup`) serve their whole call and are freed when it ends, so the pool holds at
/// most this much per caller that ever ran concurrently with others.
pub(crate) const POOLED_ARENA_BYTES_MAX: usize = 4 << 20;

/// The block I/O engine of a session. Send + Sync; many threads may call `read_batch`
/// concurrently.
pub struct BlockIo {
    /// `Uring` or `Pread`, never `Auto`.
    kind: IoBackendKind,
    /// Idle rings (io_uring backend only).
    #[cfg(target_os = "linux")]
    rings: Mutex<Vec<io_uring::IoUring>>,
    #[cfg(not(target_os = "linux"))]
    rings: Mutex<Vec<()>>,
    /// Idle batches for [`BlockIo::take_batch`]: at most one per concurrent caller, each with an
    /// arena of at most [`POOLED_ARENA_BYTES_MAX`].
    batches: Mutex<Vec<ReadBatch>>,
    /// Why io_uring is not in use (`None` when it is).
    uring_unavailable: Option<String>,
    /// Batches that fell back to pread because no ring could be created for them.
    pread_fallback_batches: AtomicU64,
    /// What the session found out about `O_DIRECT` ([`BlockIo::with_direct_io`]).
    direct_io: DirectIo,
}

impl fmt::Debug for BlockIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockIo")
            .field("kind", &self.kind)
            .field("idle_rings", &self.idle_rings())
            .field("uring_unavailable", &self.uring_unavailable)
            .field("direct_io", &self.direct_io)
            .finish()
    }
}

/// The path named by errors about io_uring itself (no file is involved).
const URING_PATH: &str = "io_uring";

impl BlockIo {
    /// Creates the engine. `Auto` probes io_uring (creating a ring can fail with ENOSYS/EPERM
    /// under seccomp or when /proc/sys/kernel/io_uring_disabled is set; the kernel must also
    /// support `IORING_OP_READ`, Linux 5.6+) and falls back to `Pread`, logging the reason at
    /// `warn` and recording it in [`BlockIo::report`]. `Uring` fails with a typed `Error::Io`
    /// (op `"io_uring_setup"`, path `"io_uring"`) if io_uring is unavailable.
    pub fn new(kind: IoBackendKind) -> Result<BlockIo> {
        match kind {
            IoBackendKind::Pread => Ok(BlockIo::pread("pread was asked for".into())),
            IoBackendKind::Uring => {
                Self::with_uring().map_err(|e| Error::io("io_uring_setup", URING_PATH, e))
            }
            IoBackendKind::Auto => Ok(Self::with_uring().unwrap_or_else(|e| {
                let reason = format!("io_uring_setup failed: {e}");
                log::warn!("io_uring unavailable ({reason}): batched lookups use pread");
                BlockIo::pread(reason)
            })),
        }
    }

    /// Records what a probe found about `O_DIRECT` (see [`crate::fs::FileSystem::probe_direct_io`])
    /// for [`BlockIo::report`]. Until then the report says it is unknown.
    pub(crate) fn with_direct_io(self, direct_io: DirectIo) -> BlockIo {
        BlockIo { direct_io, ..self }
    }

    fn pread(uring_unavailable: String) -> BlockIo {
        BlockIo {
            kind: IoBackendKind::Pread,
            rings: Mutex::new(Vec::new()),
            batches: Mutex::new(Vec::new()),
            uring_unavailable: Some(uring_unavailable),
            pread_fallback_batches: AtomicU64::new(0),
            direct_io: DirectIo::not_probed(),
        }
    }

    #[cfg(target_os = "linux")]
    fn with_uring() -> std::io::Result<BlockIo> {
        let ring = uring::probe()?;
        Ok(BlockIo {
            kind: IoBackendKind::Uring,
            rings: Mutex::new(vec![ring]),
            batches: Mutex::new(Vec::new()),
            uring_unavailable: None,
            pread_fallback_batches: AtomicU64::new(0),
            direct_io: DirectIo::not_probed(),
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn with_uring() -> std::io::Result<BlockIo> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "io_uring exists on Linux only",
        ))
    }

    /// The backend actually in use (Uring or Pread, never Auto).
    pub fn kind(&self) -> IoBackendKind {
        self.kind
    }

    /// The backend in use, why io_uring is not (if it is not), how many batches fell back to
    /// pread, and whether direct I/O is in effect.
    pub fn report(&self) -> IoReport {
        IoReport {
            backend: self.kind,
            uring_unavailable: self.uring_unavailable.clone(),
            pread_fallback_batches: self.pread_fallback_batches.load(Ordering::Relaxed),
            direct_io: self.direct_io.clone(),
        }
    }

    /// Number of idle rings in the pool (0 for the pread backend).
    pub(crate) fn idle_rings(&self) -> usize {
        self.rings.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// A batch to read into with [`BlockIo::read_batch_into`]: an idle one from the pool (its
    /// arena reused), or a new empty one. Give it back with [`BlockIo::recycle_batch`].
    pub(crate) fn take_batch(&self) -> ReadBatch {
        let pooled = self.batches.lock().unwrap_or_else(|p| p.into_inner()).pop();
        pooled.unwrap_or_default()
    }

    /// Returns a batch to the pool, unless its arena exceeds [`POOLED_ARENA_BYTES_MAX`] (then
    /// it is freed).
    pub(crate) fn recycle_batch(&self, mut batch: ReadBatch) {
        if batch.arena.len() > POOLED_ARENA_BYTES_MAX {
            return;
        }
        batch.slots.clear();
        self.batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(batch);
    }

    /// Reads every request into one aligned arena (allocated once per batch), returning them in
    /// request order. All reads of the batch are submitted together (in waves of at most
    /// QUEUE_DEPTH_MAX); files without a raw fd (the in-memory file system) are read with
    /// read_exact_at. A short read is retried for the remainder; EOF before the requested length
    /// is an Error::Io (UnexpectedEof) naming the file; any other failure is an Error::Io naming
    /// the file. Never panics, never leaves a read in flight when it returns (also on error
    /// paths: all completions are drained before an error is returned).
    ///
    /// If a new ring cannot be created for this call (e.g. out of file descriptors), the batch is
    /// read with `pread` instead (logged once, counted in [`IoReport::pread_fallback_batches`]).
    #[cfg(test)]
    pub fn read_batch(&self, requests: &[ReadRequest]) -> Result<ReadBatch> {
        let mut batch = ReadBatch::default();
        self.read_batch_into(requests, &mut batch)?;
        Ok(batch)
    }

    /// Like [`BlockIo::read_batch`], but reads into `batch`, whose arena is reused when it is
    /// large enough (and replaced by a larger one otherwise). On error the batch is left empty
    /// (no reads) but reusable.
    #[cfg(test)]
    pub fn read_batch_into(&self, requests: &[ReadRequest], batch: &mut ReadBatch) -> Result<()> {
        self.read_batch_into_with(requests, &mut Unconditional, batch)
    }

    /// Reads every request into `batch`, whose arena is reused when it is large enough (and
    /// replaced by a larger one otherwise), with some reads conditional on earlier ones
    /// ([`ReadConditions`]): a conditional read is issued as soon as the read it waits for has
    /// completed, if `conditions` still wants it, and is marked [`ReadBatch::skipped`] if not.
    /// Its slot in the arena is laid out either way, so the arena's size does not depend on the
    /// decisions. On error the batch is left empty (no reads) but reusable.
    #[cfg(test)]
    pub(crate) fn read_batch_into_with(
        &self,
        requests: &[ReadRequest],
        conditions: &mut dyn ReadConditions,
        batch: &mut ReadBatch,
    ) -> Result<()> {
        self.read_planned_into(
            &mut FixedPlan {
                requests,
                conditions,
            },
            batch,
        )
    }

    /// Reads every request into `batch` (its arena reused when large enough): for callers
    /// that know all their reads up front (the page log). On error the batch is left empty.
    pub(crate) fn read_fixed_into(
        &self,
        requests: &[ReadRequest],
        batch: &mut ReadBatch,
    ) -> Result<()> {
        self.read_planned_into(
            &mut FixedPlan {
                requests,
                conditions: &mut Unconditional,
            },
            batch,
        )
    }

    /// Reads a batch that `plan` plans while it is read ([`ReadPlan`]): with io_uring, the
    /// first reads planned are submitted before the rest are planned, and each further part as
    /// soon as it is planned, with its conditions ([`ReadConditions`]) as in
    /// [`BlockIo::read_batch_into_with`]. The arena is sized once, from the first part and
    /// [`ReadPlan::pages_hint`], and the plan is told how many pages are left, so no read in
    /// flight ever sees its buffer move. The pread backend plans everything first. On error the
    /// batch is left empty (no reads) but reusable.
    pub(crate) fn read_planned_into(
        &self,
        plan: &mut dyn ReadPlan,
        batch: &mut ReadBatch,
    ) -> Result<()> {
        batch.slots.clear();
        let result = self.fill(plan, batch);
        if result.is_err() {
            batch.slots.clear();
        }
        result
    }

    fn fill(&self, plan: &mut dyn ReadPlan, batch: &mut ReadBatch) -> Result<()> {
        // Until the plan has a read, it may take one of any size: the arena is sized after it.
        let mut more = plan.plan_more(usize::MAX);
        while more && plan.requests().is_empty() {
            more = plan.plan_more(usize::MAX);
        }
        let uring = self.kind == IoBackendKind::Uring;
        if !uring {
            while more {
                more = plan.plan_more(usize::MAX);
            }
        }
        let total = layout_slots(plan.requests(), &mut batch.slots, 0)?;
        let reserve = if more {
            total.max(plan.pages_hint().saturating_mul(ALIGN_BYTES))
        } else {
            total
        };
        ensure_arena(&mut batch.arena, reserve, plan.requests())?;
        if uring {
            self.read_uring(plan, more, total, &mut batch.slots, &mut batch.arena)
        } else {
            read_all_serial(plan, 0, &mut batch.slots, &mut batch.arena)
        }
    }

    /// Plans the rest of `plan` within the arena's room and lays it out (for a serial finish).
    fn plan_rest(
        plan: &mut dyn ReadPlan,
        mut more: bool,
        mut total: usize,
        slots: &mut Vec<Slot>,
        arena: &AlignedBuf,
    ) -> Result<()> {
        while more {
            more = plan.plan_more(arena.len().saturating_sub(total) / ALIGN_BYTES);
            total = layout_slots(plan.requests(), slots, total)?;
        }
        Ok(())
    }

    #[cfg(target_os = "linux")]
    fn read_uring(
        &self,
        plan: &mut dyn ReadPlan,
        more: bool,
        total: usize,
        slots: &mut Vec<Slot>,
        arena: &mut AlignedBuf,
    ) -> Result<()> {
        // Files without a descriptor (the in-memory file system, in tests) are read one request
        // after the other, which keeps every condition's order simple.
        let without_fd = |(r, s): (&ReadRequest, &Slot)| s.len > 0 && r.file.raw_fd().is_none();
        if plan.requests().iter().zip(slots.iter()).any(without_fd) {
            Self::plan_rest(plan, more, total, slots, arena)?;
            return read_all_serial(plan, 0, slots, arena);
        }
        let pooled = self.rings.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut ring = match pooled {
            Some(ring) => ring,
            None => match uring::new_ring() {
                Ok(ring) => ring,
                Err(e) => {
                    if self.pread_fallback_batches.fetch_add(1, Ordering::Relaxed) == 0 {
                        log::warn!(
                            "cannot create another io_uring ({e}): batches that meet this are \
                             read with pread (counted in the session's I/O report)"
                        );
                    }
                    Self::plan_rest(plan, more, total, slots, arena)?;
                    return read_all_serial(plan, 0, slots, arena);
                }
            },
        };
        // While the kernel may write into the arena, own it through `ManuallyDrop`: an unwind
        // out of `uring::read` leaks it rather than freeing memory under a read in flight.
        let mut held = std::mem::ManuallyDrop::new(std::mem::replace(arena, AlignedBuf::zeroed(0)));
        let mut state = uring::Planning {
            more,
            total,
            serial_from: None,
        };
        let outcome = uring::read(&mut ring, plan, slots, &mut held, &mut state);
        match outcome {
            uring::Outcome::Broken(e) => {
                // Reads may still be in flight into `held`: leak it. The ring is closed (the
                // kernel keeps its own references to in-flight requests).
                drop(ring);
                Err(e)
            }
            outcome => {
                *arena = std::mem::ManuallyDrop::into_inner(held);
                self.rings
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(ring);
                match outcome {
                    uring::Outcome::Failed(e) => Err(e),
                    // A part planned later had a file without a descriptor: that part is read
                    // one request after the other, and the plan's rest waits for its next batch.
                    _ => match state.serial_from {
                        Some(from) => read_all_serial(plan, from, slots, arena),
                        None => Ok(()),
                    },
                }
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn read_uring(
        &self,
        plan: &mut dyn ReadPlan,
        more: bool,
        total: usize,
        slots: &mut Vec<Slot>,
        arena: &mut AlignedBuf,
    ) -> Result<()> {
        Self::plan_rest(plan, more, total, slots, arena)?;
        read_all_serial(plan, 0, slots, arena)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileSystem, MemFs, ReadOptions, RealFs};
    use std::path::Path;

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn bytes(&mut self, len: usize) -> Vec<u8> {
            (0..len).map(|_| self.next() as u8).collect()
        }
    }

    const FILE_BYTES: usize = 1 << 20;
    const FILE_PAGES: u64 = (FILE_BYTES / ALIGN_BYTES) as u64;

    /// Both backends, or only pread when io_uring is unavailable.
    fn engines() -> Vec<BlockIo> {
        let mut engines = vec![BlockIo::new(IoBackendKind::Pread).unwrap()];
        match BlockIo::new(IoBackendKind::Uring) {
            Ok(io) => engines.push(io),
            Err(e) => eprintln!("io_uring unavailable, testing pread only: {e}"),
        }
        engines
    }

    fn write_file(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) {
        let mut file = fs.create(path).unwrap();
        file.append(bytes).unwrap();
        file.sync().unwrap();
    }

    /// `count` random spans of 1..=3 pages over the given files.
    fn random_requests(
        rng: &mut Rng,
        files: &[(Arc<dyn ReadableFile>, &[u8])],
        count: usize,
    ) -> Vec<ReadRequest> {
        (0..count)
            .map(|_| {
                let (file, _) = &files[rng.below(files.len() as u64) as usize];
                let pages = 1 + rng.below(3);
                let first = rng.below(FILE_PAGES - pages + 1);
                ReadRequest {
                    file: file.clone(),
                    offset: first * ALIGN_BYTES as u64,
                    len_bytes: (pages as usize) * ALIGN_BYTES,
                }
            })
            .collect()
    }

    fn check_batch(
        batch: &ReadBatch,
        requests: &[ReadRequest],
        files: &[(Arc<dyn ReadableFile>, &[u8])],
    ) {
        assert_eq!(batch.len(), requests.len());
        for (i, request) in requests.iter().enumerate() {
            let (_, contents) = files
                .iter()
                .find(|(f, _)| Arc::ptr_eq(f, &request.file))
                .unwrap();
            let start = request.offset as usize;
            let got = batch.get(i);
            assert_eq!(got.len(), request.len_bytes);
            assert_eq!(
                got.as_ptr() as usize % ALIGN_BYTES,
                0,
                "read {i} is misaligned"
            );
            assert!(
                got == &contents[start..start + request.len_bytes],
                "read {i} differs"
            );
        }
    }

    #[test]
    fn aligned_buf_is_aligned_and_zeroed() {
        for len in [
            1,
            100,
            ALIGN_BYTES,
            ALIGN_BYTES + 1,
            3 * ALIGN_BYTES,
            1 << 20,
        ] {
            let mut buf = AlignedBuf::zeroed(len);
            assert_eq!(buf.len() % ALIGN_BYTES, 0);
            assert!(buf.len() >= len && buf.len() < len + ALIGN_BYTES);
            assert_eq!(buf.as_ptr() as usize % ALIGN_BYTES, 0);
            assert!(buf.iter().all(|&b| b == 0));
            assert!(!buf.is_empty());
            buf[len - 1] = 7;
            assert_eq!(buf[len - 1], 7);
        }
        let empty = AlignedBuf::zeroed(0);
        assert_eq!(empty.len(), 0);
        assert!(empty.is_empty());
        assert_eq!(&*empty, &[] as &[u8]);
        assert_eq!(empty.as_ptr() as usize % ALIGN_BYTES, 0);
        assert!(AlignedBuf::try_zeroed(usize::MAX).is_none());
        assert!(AlignedBuf::try_zeroed(isize::MAX as usize).is_none());
        fn send_sync<T: Send + Sync>() {}
        send_sync::<AlignedBuf>();
        send_sync::<ReadBatch>();
    }

    #[test]
    fn progress_handles_short_reads_and_eof() {
        let page = ALIGN_BYTES;
        let mut p = Progress::default();
        assert_eq!(p.on_read(0, 3 * page, 3 * page, true).unwrap(), Next::Done);
        // Buffered short read: continue exactly where it stopped.
        let mut p = Progress::default();
        assert_eq!(
            p.on_read(0, 100, 2 * page, false).unwrap(),
            Next::ReadFrom(100)
        );
        assert_eq!(
            p.on_read(100, 2 * page - 100, 2 * page, false).unwrap(),
            Next::Done
        );
        // Direct short read: continue from the aligned position below; no progress is EOF.
        let mut p = Progress::default();
        assert_eq!(
            p.on_read(0, page + 100, 2 * page, true).unwrap(),
            Next::ReadFrom(page)
        );
        let eof = p.on_read(page, 100, 2 * page, true).unwrap_err();
        assert_eq!(eof.kind(), std::io::ErrorKind::UnexpectedEof);
        let mut p = Progress::default();
        assert_eq!(
            p.on_read(0, 0, page, false).unwrap_err().kind(),
            std::io::ErrorKind::UnexpectedEof
        );
        // A chunked read of an oversized request carries on.
        let mut p = Progress::default();
        assert_eq!(chunk_len(0, usize::MAX), READ_CHUNK_MAX);
        assert_eq!(
            p.on_read(0, READ_CHUNK_MAX, usize::MAX, true).unwrap(),
            Next::ReadFrom(READ_CHUNK_MAX)
        );
    }

    fn real_files_roundtrip(direct: bool) {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ direct as u64);
        let a_bytes = rng.bytes(FILE_BYTES);
        let b_bytes = rng.bytes(FILE_BYTES);
        let fs = RealFs::new();
        write_file(&fs, &dir.path().join("a"), &a_bytes);
        write_file(&fs, &dir.path().join("b"), &b_bytes);
        let options = ReadOptions {
            direct,
            random: true,
        };
        let a = fs.open(&dir.path().join("a"), options).unwrap();
        let b = fs.open(&dir.path().join("b"), options).unwrap();
        if direct && !a.is_direct() {
            eprintln!("O_DIRECT unsupported in {}, skipping", dir.path().display());
            return;
        }
        let files: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![(a, &a_bytes), (b, &b_bytes)];
        for io in engines() {
            let requests = random_requests(&mut rng, &files, 600);
            assert!(requests.len() > QUEUE_DEPTH_MAX);
            let batch = io.read_batch(&requests).unwrap();
            check_batch(&batch, &requests, &files);
            // The whole file in one request, the last page, and an empty request.
            let requests = vec![
                ReadRequest {
                    file: files[0].0.clone(),
                    offset: 0,
                    len_bytes: FILE_BYTES,
                },
                ReadRequest {
                    file: files[1].0.clone(),
                    offset: (FILE_BYTES - ALIGN_BYTES) as u64,
                    len_bytes: ALIGN_BYTES,
                },
                ReadRequest {
                    file: files[1].0.clone(),
                    offset: 0,
                    len_bytes: 0,
                },
            ];
            let batch = io.read_batch(&requests).unwrap();
            check_batch(&batch, &requests, &files);
            assert!(io.read_batch(&[]).unwrap().is_empty());
        }
    }

    /// Conditions that make about a third of the reads wait for a random earlier one (chains
    /// included, and one invalid condition, which is ignored), check that each decision sees
    /// the earlier read's bytes, and want a read by a rule of those bytes.
    struct Decide<'a> {
        after: Vec<Option<usize>>,
        requests: &'a [ReadRequest],
        files: &'a [(Arc<dyn ReadableFile>, &'a [u8])],
        calls: Vec<u32>,
    }

    fn contents<'a>(
        files: &[(Arc<dyn ReadableFile>, &'a [u8])],
        request: &ReadRequest,
    ) -> &'a [u8] {
        let (_, bytes) = files
            .iter()
            .find(|(f, _)| Arc::ptr_eq(f, &request.file))
            .unwrap();
        let start = request.offset as usize;
        &bytes[start..start + request.len_bytes]
    }

    fn rule(i: usize, earlier: &[u8]) -> bool {
        !(i * 7 + earlier.first().copied().unwrap_or(0) as usize).is_multiple_of(3)
    }

    impl ReadConditions for Decide<'_> {
        fn after(&self, i: usize) -> Option<usize> {
            self.after[i]
        }

        fn wanted(&mut self, i: usize, earlier: &[u8]) -> bool {
            let j = self.after[i].unwrap();
            assert!(j < i, "read {i} decided on a read that is not earlier");
            assert!(
                earlier == contents(self.files, &self.requests[j]),
                "read {i} decided on stale bytes of read {j}"
            );
            self.calls[i] += 1;
            rule(i, earlier)
        }
    }

    fn conditional_reads(files: &[(Arc<dyn ReadableFile>, &[u8])], rng: &mut Rng) {
        for io in engines() {
            let requests = random_requests(rng, files, 600);
            let mut after: Vec<Option<usize>> = (0..requests.len())
                .map(|i| (i > 0 && rng.below(3) == 0).then(|| rng.below(i as u64) as usize))
                .collect();
            after[5] = Some(5); // not earlier: ignored
            let mut decide = Decide {
                after: after.clone(),
                requests: &requests,
                files,
                calls: vec![0; requests.len()],
            };
            let mut batch = ReadBatch::default();
            io.read_batch_into_with(&requests, &mut decide, &mut batch)
                .unwrap();
            let mut skipped = vec![false; requests.len()];
            for i in 0..requests.len() {
                let Some(j) = after[i].filter(|&j| j < i) else {
                    continue;
                };
                let decided = !skipped[j];
                assert_eq!(decide.calls[i], decided as u32, "decisions of read {i}");
                skipped[i] = !decided || !rule(i, contents(files, &requests[j]));
            }
            assert!(skipped.iter().any(|&s| s) && skipped.iter().any(|&s| !s));
            for (i, request) in requests.iter().enumerate() {
                assert_eq!(batch.skipped(i), skipped[i], "read {i} skipped");
                if !skipped[i] {
                    assert!(batch.get(i) == contents(files, request), "read {i} differs");
                }
            }
        }
    }

    /// A plan that hands out the requests of `all` in parts of the given sizes, within the
    /// room it is given, with the conditions of [`Decide`] (a condition may point into an
    /// earlier part).
    struct Parts<'a> {
        decide: Decide<'a>,
        planned: Vec<ReadRequest>,
        parts: Vec<usize>,
        part: usize,
        hint: usize,
        /// Pages of room each call was given.
        room: Vec<usize>,
        /// Calls of [`ReadPlan::read_done`] per read.
        done: Vec<u32>,
    }

    impl ReadConditions for Parts<'_> {
        fn after(&self, i: usize) -> Option<usize> {
            assert!(
                i < self.planned.len(),
                "asked about read {i}, not planned yet"
            );
            self.decide.after(i)
        }

        fn wanted(&mut self, i: usize, earlier: &[u8]) -> bool {
            self.decide.wanted(i, earlier)
        }
    }

    impl ReadPlan for Parts<'_> {
        fn requests(&self) -> &[ReadRequest] {
            &self.planned
        }

        fn plan_more(&mut self, pages_left: usize) -> bool {
            self.room.push(pages_left);
            let mut left = pages_left;
            let take = self.parts.get(self.part).copied().unwrap_or(usize::MAX);
            self.part += 1;
            for _ in 0..take {
                let Some(request) = self.decide.requests.get(self.planned.len()) else {
                    return false;
                };
                let pages = request.len_bytes.div_ceil(ALIGN_BYTES);
                if !self.planned.is_empty() && pages > left {
                    return false;
                }
                left = left.saturating_sub(pages);
                self.planned.push(request.clone());
            }
            self.planned.len() < self.decide.requests.len()
        }

        fn pages_hint(&self) -> usize {
            self.hint
        }

        fn read_done(&mut self, i: usize, bytes: &[u8]) {
            let request = &self.planned[i];
            assert!(request.len_bytes > 0, "read {i} of no bytes handed over");
            assert!(
                bytes == contents(self.decide.files, request),
                "read {i} handed over with bytes that are not its own"
            );
            if self.done.len() <= i {
                self.done.resize(i + 1, 0);
            }
            self.done[i] += 1;
        }
    }

    /// Reads planned in parts while earlier parts are in flight give exactly what the same
    /// requests read at once give (contents, conditions decided once, skipped reads), on both
    /// backends; a plan given too little room (a small hint) is cut, and what it planned is
    /// read; parts whose files have no descriptor are read serially. Completed reads handed to
    /// the plan while others are in flight ([`ReadPlan::read_done`]) are handed over at most
    /// once, with their own bytes, never skipped ones; io_uring hands some over.
    #[test]
    fn planned_reads_equal_reads_planned_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(0x9a27_5eed_0b1e_c7e5);
        let a_bytes = rng.bytes(FILE_BYTES);
        let b_bytes = rng.bytes(FILE_BYTES);
        write_file(&RealFs, &dir.path().join("a"), &a_bytes);
        write_file(&RealFs, &dir.path().join("b"), &b_bytes);
        let mem = MemFs::new();
        write_file(&mem, Path::new("/m"), &b_bytes);
        let direct = ReadOptions {
            direct: true,
            random: true,
        };
        let a = RealFs.open(&dir.path().join("a"), direct).unwrap();
        let b = RealFs.open(&dir.path().join("b"), direct).unwrap();
        let m = mem.open(Path::new("/m"), ReadOptions::default()).unwrap();
        let real: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![(a.clone(), &a_bytes), (b, &b_bytes)];
        let mixed: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![(a, &a_bytes), (m, &b_bytes)];
        // Reads handed to the plan early: [pread, io_uring].
        let mut handed_over = [0usize; 2];
        // (files, hint, whether every read must fit: not when the hint is small, nor when a
        // part with an in-memory file cuts the plan short)
        for (files, hint, all) in [
            (&real, usize::MAX / 8192, true),
            (&real, 40, false),
            (&mixed, 10_000, false),
        ] {
            for io in engines() {
                for round in 0..20 {
                    let count = 1 + rng.below(400) as usize;
                    let mut requests = random_requests(&mut rng, files, count);
                    for request in requests.iter_mut() {
                        match rng.below(30) {
                            0 | 1 => request.len_bytes = 0, // finished as soon as planned
                            2 => {
                                // Larger than a small plan's room.
                                request.offset = 0;
                                request.len_bytes = 100 * ALIGN_BYTES;
                            }
                            _ => {}
                        }
                    }
                    let after: Vec<Option<usize>> = (0..requests.len())
                        .map(|i| (i > 0 && rng.below(3) == 0).then(|| rng.below(i as u64) as usize))
                        .collect();
                    let mut parts: Vec<usize> = (0..requests.len())
                        .map(|_| rng.below(40) as usize)
                        .collect();
                    if round % 2 == 0 {
                        // The first part plans nothing, the next one starts with a large read.
                        parts[0] = 0;
                        requests[0].offset = 0;
                        requests[0].len_bytes = 100 * ALIGN_BYTES;
                    }
                    let mut plan = Parts {
                        decide: Decide {
                            after: after.clone(),
                            requests: &requests,
                            files,
                            calls: vec![0; requests.len()],
                        },
                        planned: Vec::new(),
                        parts,
                        part: 0,
                        hint: hint.min(WAVE_TEST_PAGES),
                        room: Vec::new(),
                        done: Vec::new(),
                    };
                    let mut batch = ReadBatch::default();
                    io.read_planned_into(&mut plan, &mut batch).unwrap();
                    let n = plan.planned.len();
                    assert!(n >= 1, "round {round}: the first read is always planned");
                    if all {
                        assert_eq!(n, requests.len(), "round {round}: room for everything");
                    }
                    assert_eq!(batch.len(), n);
                    let mut skipped = vec![false; n];
                    for i in 0..n {
                        let Some(j) = after[i].filter(|&j| j < i) else {
                            continue;
                        };
                        let decided = !skipped[j];
                        assert_eq!(
                            plan.decide.calls[i], decided as u32,
                            "decisions of read {i}"
                        );
                        skipped[i] = !decided || !rule(i, contents(files, &requests[j]));
                    }
                    for (i, request) in requests[..n].iter().enumerate() {
                        assert_eq!(batch.skipped(i), skipped[i], "round {round}: read {i}");
                        if !skipped[i] {
                            assert!(batch.get(i) == contents(files, request), "read {i} differs");
                        }
                        let done = plan.done.get(i).copied().unwrap_or(0);
                        assert!(
                            done <= 1,
                            "round {round}: read {i} handed over {done} times"
                        );
                        assert!(done == 0 || !skipped[i], "round {round}: skipped read {i}");
                    }
                    handed_over[usize::from(io.kind() == IoBackendKind::Uring)] +=
                        plan.done.iter().map(|&d| d as usize).sum::<usize>();
                }
            }
        }
        assert_eq!(handed_over[0], 0, "the pread backend hands no read over");
        if engines().iter().any(|io| io.kind() == IoBackendKind::Uring) {
            assert!(handed_over[1] > 0, "io_uring handed no read over");
        }
    }

    /// The most pages the planned-reads test lets a plan hint (its arena stays small).
    const WAVE_TEST_PAGES: usize = 4096;

    /// Conditional reads are issued exactly when wanted, after the read they wait for, on both
    /// backends, for real files (through io_uring) and in-memory ones (read in order).
    #[test]
    fn conditional_reads_are_read_when_wanted() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(0x51_7cc1_b727_220a);
        let a_bytes = rng.bytes(FILE_BYTES);
        let b_bytes = rng.bytes(FILE_BYTES);
        let fs = RealFs::new();
        write_file(&fs, &dir.path().join("a"), &a_bytes);
        write_file(&fs, &dir.path().join("b"), &b_bytes);
        for direct in [false, true] {
            let options = ReadOptions {
                direct,
                random: true,
            };
            let a = fs.open(&dir.path().join("a"), options).unwrap();
            let b = fs.open(&dir.path().join("b"), options).unwrap();
            let files: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![(a, &a_bytes), (b, &b_bytes)];
            conditional_reads(&files, &mut rng);
        }
        let mem = MemFs::new();
        write_file(&mem, Path::new("/m"), &a_bytes);
        let m = mem.open(Path::new("/m"), ReadOptions::default()).unwrap();
        let real = fs
            .open(&dir.path().join("b"), ReadOptions::default())
            .unwrap();
        let files: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![(m, &a_bytes), (real, &b_bytes)];
        conditional_reads(&files, &mut rng);
    }

    #[test]
    fn real_files_buffered_both_backends() {
        real_files_roundtrip(false);
    }

    #[test]
    fn real_files_direct_both_backends() {
        real_files_roundtrip(true);
    }

    #[test]
    fn mem_fs_files_both_backends() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/d")).unwrap();
        let mut rng = Rng(42);
        let bytes = rng.bytes(FILE_BYTES);
        write_file(&fs, Path::new("/d/f"), &bytes);
        let file = fs
            .open(
                Path::new("/d/f"),
                ReadOptions {
                    direct: true,
                    random: true,
                },
            )
            .unwrap();
        let files: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![(file, &bytes)];
        for io in engines() {
            let requests = random_requests(&mut rng, &files, 300);
            let batch = io.read_batch(&requests).unwrap();
            check_batch(&batch, &requests, &files);
        }
    }

    #[test]
    fn mixed_mem_and_real_files_in_one_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(7);
        let real_bytes = rng.bytes(FILE_BYTES);
        let mem_bytes = rng.bytes(FILE_BYTES);
        write_file(&RealFs, &dir.path().join("r"), &real_bytes);
        let mem = MemFs::new();
        write_file(&mem, Path::new("/m"), &mem_bytes);
        let files: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![
            (
                RealFs
                    .open(&dir.path().join("r"), ReadOptions::default())
                    .unwrap(),
                &real_bytes,
            ),
            (
                mem.open(Path::new("/m"), ReadOptions::default()).unwrap(),
                &mem_bytes,
            ),
        ];
        for io in engines() {
            let requests = random_requests(&mut rng, &files, 400);
            let batch = io.read_batch(&requests).unwrap();
            check_batch(&batch, &requests, &files);
        }
    }

    /// Errors are typed, name the file, leave no read in flight, and the engine keeps working.
    #[test]
    fn read_past_eof_is_an_error_and_engine_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(3);
        // Not a whole number of pages: the last page is short.
        let len = 10 * ALIGN_BYTES + 100;
        let bytes = rng.bytes(len);
        let path = dir.path().join("short");
        write_file(&RealFs, &path, &bytes);
        let mem = MemFs::new();
        write_file(&mem, Path::new("/short"), &bytes);
        for direct in [false, true] {
            let options = ReadOptions {
                direct,
                random: false,
            };
            let real = RealFs.open(&path, options).unwrap();
            let in_mem = mem.open(Path::new("/short"), options).unwrap();
            for file in [real, in_mem] {
                for io in engines() {
                    let good = |i: u64| ReadRequest {
                        file: file.clone(),
                        offset: (i % 10) * ALIGN_BYTES as u64,
                        len_bytes: ALIGN_BYTES,
                    };
                    for (offset, pages) in [(10, 1), (9, 2), (11, 1), (1000, 1), (0, 12)] {
                        let mut requests: Vec<ReadRequest> = (0..300).map(good).collect();
                        requests.insert(
                            150,
                            ReadRequest {
                                file: file.clone(),
                                offset: offset * ALIGN_BYTES as u64,
                                len_bytes: pages * ALIGN_BYTES,
                            },
                        );
                        match io.read_batch(&requests) {
                            Err(Error::Io {
                                path: p, source, ..
                            }) => {
                                assert_eq!(p, file.path());
                                assert_eq!(
                                    source.kind(),
                                    std::io::ErrorKind::UnexpectedEof,
                                    "{:?} direct={direct} at page {offset}: {source}",
                                    io.kind()
                                );
                            }
                            other => panic!("expected an I/O error, got {other:?}"),
                        }
                        // The engine (and its ring) still works.
                        let requests: Vec<ReadRequest> = (0..300).map(good).collect();
                        let batch = io.read_batch(&requests).unwrap();
                        for (i, request) in requests.iter().enumerate() {
                            let start = request.offset as usize;
                            assert!(batch.get(i) == &bytes[start..start + ALIGN_BYTES]);
                        }
                    }
                    // The ring went back to the pool after every failed batch.
                    assert!(io.idle_rings() <= 1);
                }
            }
        }
    }

    #[test]
    fn offsets_beyond_the_file_offset_range_are_rejected() {
        let mem = MemFs::new();
        write_file(&mem, Path::new("/f"), &[0u8; ALIGN_BYTES]);
        let file = mem.open(Path::new("/f"), ReadOptions::default()).unwrap();
        for io in engines() {
            let requests = [ReadRequest {
                file: file.clone(),
                offset: u64::MAX - (ALIGN_BYTES as u64 - 1),
                len_bytes: ALIGN_BYTES,
            }];
            let err = io.read_batch(&requests).unwrap_err();
            assert!(err.is_io(), "{err}");
        }
    }

    #[test]
    fn concurrent_batches_on_one_engine() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<BlockIo>();
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(99);
        let bytes = rng.bytes(FILE_BYTES);
        write_file(&RealFs, &dir.path().join("f"), &bytes);
        let file = RealFs
            .open(
                &dir.path().join("f"),
                ReadOptions {
                    direct: true,
                    random: true,
                },
            )
            .unwrap();
        for io in engines() {
            let io = Arc::new(io);
            let threads: Vec<_> = (0..4u64)
                .map(|t| {
                    let io = io.clone();
                    let file = file.clone();
                    let bytes = bytes.clone();
                    std::thread::spawn(move || {
                        let mut rng = Rng(1000 + t);
                        let files: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![(file, &bytes)];
                        for _ in 0..20 {
                            let requests = random_requests(&mut rng, &files, 300);
                            let batch = io.read_batch(&requests).unwrap();
                            check_batch(&batch, &requests, &files);
                        }
                    })
                })
                .collect();
            for thread in threads {
                thread.join().unwrap();
            }
            // At most one ring per concurrent caller was ever created.
            assert!(io.idle_rings() <= 4, "{} rings", io.idle_rings());
        }
    }

    /// The report names the backend, why io_uring is not used, and the direct-I/O state.
    #[test]
    fn report_names_every_fallback() {
        let auto = BlockIo::new(IoBackendKind::Auto).unwrap();
        let report = auto.report();
        assert_eq!(report.backend, auto.kind());
        assert_eq!(
            report.uring_unavailable.is_none(),
            auto.kind() == IoBackendKind::Uring
        );
        assert_eq!(report.direct_io, DirectIo::not_probed());
        let refused = DirectIo::Refused {
            dir: "/d/active".into(),
            reason: "the file system refuses O_DIRECT: EINVAL".into(),
        };
        let pread = BlockIo::new(IoBackendKind::Pread)
            .unwrap()
            .with_direct_io(refused.clone());
        let report = pread.report();
        assert_eq!(report.direct_io, refused);
        assert_eq!(
            report.to_string(),
            "pread (io_uring unavailable: pread was asked for); direct I/O refused in /d/active \
             (the file system refuses O_DIRECT: EINVAL): reads go through the page cache"
        );
    }

    /// Batches reuse pooled arenas of up to `POOLED_ARENA_BYTES_MAX`; larger ones are freed.
    #[test]
    fn batches_are_pooled_up_to_the_limit() {
        let mem = MemFs::new();
        write_file(&mem, Path::new("/f"), &[7u8; FILE_BYTES]);
        let file = mem.open(Path::new("/f"), ReadOptions::default()).unwrap();
        let request = |pages: usize| ReadRequest {
            file: file.clone(),
            offset: 0,
            len_bytes: pages * ALIGN_BYTES,
        };
        for io in engines() {
            let mut batch = io.take_batch();
            io.read_batch_into(&[request(4), request(2)], &mut batch)
                .unwrap();
            assert_eq!((batch.len(), batch.arena_bytes()), (2, 6 * ALIGN_BYTES));
            // A smaller batch reuses the arena; its reads are exactly the new ones.
            io.read_batch_into(&[request(1)], &mut batch).unwrap();
            assert_eq!((batch.len(), batch.arena_bytes()), (1, 6 * ALIGN_BYTES));
            assert!(batch.get(0) == &[7u8; ALIGN_BYTES][..]);
            io.recycle_batch(batch);
            let batch = io.take_batch();
            assert_eq!((batch.len(), batch.arena_bytes()), (0, 6 * ALIGN_BYTES));
            // An arena over the limit is not kept.
            let mut large = batch;
            large.arena = AlignedBuf::zeroed(POOLED_ARENA_BYTES_MAX + ALIGN_BYTES);
            io.recycle_batch(large);
            assert_eq!(io.take_batch().arena_bytes(), 0);
            // A failed read leaves the batch empty and reusable.
            let mut batch = io.take_batch();
            let past_end = ReadRequest {
                file: file.clone(),
                offset: FILE_BYTES as u64,
                len_bytes: ALIGN_BYTES,
            };
            assert!(io.read_batch_into(&[past_end], &mut batch).is_err());
            assert!(batch.is_empty());
            io.read_batch_into(&[request(1)], &mut batch).unwrap();
            assert_eq!(batch.len(), 1);
        }
    }

    #[test]
    fn auto_picks_a_concrete_backend() {
        let io = BlockIo::new(IoBackendKind::Auto).unwrap();
        assert_ne!(io.kind(), IoBackendKind::Auto);
        if BlockIo::new(IoBackendKind::Uring).is_ok() {
            assert_eq!(io.kind(), IoBackendKind::Uring);
        }
        assert_eq!(
            BlockIo::new(IoBackendKind::Pread).unwrap().kind(),
            IoBackendKind::Pread
        );
        eprintln!("io_uring available: {}", io.kind() == IoBackendKind::Uring);
    }
}

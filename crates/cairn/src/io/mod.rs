//! Block I/O: reads a batch of page spans from run files, all at once.
//!
//! Owns: [`BlockIo`] (the per-session read engine, with an io_uring backend on Linux and a serial
//! `pread` fallback, and the read budget its concurrent batches may share, oldest first:
//! `gate`), [`AlignedBuf`] (heap memory aligned for `O_DIRECT`), [`ReadRequest`],
//! [`ReadBatch`] (one aligned arena holding every read of a batch, in request order, reusable
//! from batch to batch) and [`IoReport`] (which backend is in use, every fallback taken and why).
//!
//! May call: `fs` ([`crate::fs::ReadableFile`]: `read_exact_at`, `is_direct`, `raw_fd`), `libc::pread`,
//! the `io-uring` crate, `log` (fallbacks only, never per read), `observe` (the bytes of each
//! batch, counted once), and `std`. Must never touch: engine structures (runs, pages, caches) or
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
//! thread's batch (unless the session shares a read budget among them,
//! `SessionOptions::read_budget`: then a batch other than the oldest submits only while the
//! session's reads in flight are below the budget). A ring is created only when every existing
//! ring is in use, so the number of rings is at most the largest number of `read_batch` calls
//! that ever ran at the same time (and at least one, made by the probe). A ring costs about
//! 24 KiB of kernel-shared memory (256 SQEs of 64 B + 512 CQEs of 16 B + index arrays) and one
//! file descriptor.
//!
//! # Safety of in-flight reads
//!
//! The kernel writes into the arena asynchronously, so `read_batch` never returns while a read it
//! submitted is still in flight: on every error path it stops submitting and drains all
//! outstanding completions first. The arena is held in a `ManuallyDrop` during submission, so even
//! an unexpected unwind leaks it instead of freeing memory the kernel may still write; if the
//! kernel itself stops answering (`io_uring_enter` fails persistently), the arena and the ring are
//! leaked the same way and the error is returned.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

mod aligned;
mod batch;
mod gate;
mod plan;
mod pread;
mod progress;
#[cfg(target_os = "linux")]
mod uring;

pub use aligned::AlignedBuf;
pub use batch::ReadBatch;
use batch::{ensure_arena, layout_slots, Slot};
pub use plan::ReadRequest;
use plan::{FixedPlan, Unconditional};
pub(crate) use plan::{ReadConditions, ReadPlan};
use pread::read_all_serial;

use crate::error::{Error, Result};
pub use crate::fs::DirectIo;
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
    /// The read budget shared by concurrent batches ([`BlockIo::with_read_budget`]); `None`:
    /// every batch keeps up to [`QUEUE_DEPTH_MAX`] reads in flight whatever the others do.
    gate: Option<gate::ReadGate>,
}

impl fmt::Debug for BlockIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockIo")
            .field("kind", &self.kind)
            .field("idle_rings", &self.idle_rings())
            .field("uring_unavailable", &self.uring_unavailable)
            .field("direct_io", &self.direct_io)
            .field("read_budget", &self.gate.as_ref().map(|g| g.budget()))
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

    /// Shares a budget of `reads` in flight among concurrent io_uring batches (0: none, every
    /// batch keeps up to [`QUEUE_DEPTH_MAX`] in flight): a batch that is not the oldest one
    /// reading submits only while fewer reads than that are in flight across the session, so
    /// the oldest batch's reads wait behind at most about `reads` others (see
    /// `crate::SessionOptions::read_budget`).
    pub(crate) fn with_read_budget(self, reads: usize) -> BlockIo {
        let gate =
            (reads > 0 && self.kind == IoBackendKind::Uring).then(|| gate::ReadGate::new(reads));
        BlockIo { gate, ..self }
    }

    fn pread(uring_unavailable: String) -> BlockIo {
        BlockIo {
            kind: IoBackendKind::Pread,
            rings: Mutex::new(Vec::new()),
            batches: Mutex::new(Vec::new()),
            uring_unavailable: Some(uring_unavailable),
            pread_fallback_batches: AtomicU64::new(0),
            direct_io: DirectIo::not_probed(),
            gate: None,
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
            gate: None,
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
        } else if crate::observe::METRICS_ON {
            let bytes: usize = batch
                .slots
                .iter()
                .filter(|s| !s.skipped)
                .map(|s| s.len)
                .sum();
            crate::observe::bytes_read(bytes as u64);
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
        let ticket = self.gate.as_ref().map(gate::ReadGate::enter);
        let outcome = uring::read(
            &mut ring,
            plan,
            slots,
            &mut held,
            &mut state,
            ticket.as_ref(),
        );
        drop(ticket);
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
    use crate::fs::{FileSystem, MemFs, ReadOptions, ReadableFile, RealFs};
    use std::path::Path;
    use std::sync::Arc;

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
            conditional_reads_on(&io, files, rng);
        }
    }

    /// Reads 600 random requests through `io`, a third of them conditional on an earlier one,
    /// and checks every decision, skip and byte.
    fn conditional_reads_on(io: &BlockIo, files: &[(Arc<dyn ReadableFile>, &[u8])], rng: &mut Rng) {
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
    /// backends, for real files (through io_uring) and in-memory ones (read in order), and
    /// through io_uring with a read budget that holds the batch back.
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
            if direct {
                conditional_reads_through_a_held_budget(&files, &mut rng);
            }
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

    /// Conditional reads stay exact when the session's read budget holds the batch back: a
    /// younger batch beside an older one that holds half the budget reads one read at a time;
    /// beside one that holds all of it, it sleeps until that one leaves, then reads.
    fn conditional_reads_through_a_held_budget(
        files: &[(Arc<dyn ReadableFile>, &[u8])],
        rng: &mut Rng,
    ) {
        let Ok(io) = BlockIo::new(IoBackendKind::Uring) else {
            return; // no io_uring here: the budget applies to nothing
        };
        let io = io.with_read_budget(2);
        let gate = io.gate.as_ref().expect("a budget on io_uring makes a gate");
        let older = gate.enter();
        assert!(older.take_one());
        conditional_reads_on(&io, files, rng);
        assert!(older.take_one());
        std::thread::scope(|scope| {
            scope.spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                older.completed(2);
                drop(older);
            });
            conditional_reads_on(&io, files, rng);
        });
        assert_eq!(gate.in_flight(), 0);
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

    /// Four threads read 20 batches each through `io` (the `round`th of `count(round)` random
    /// requests) from one file opened for direct reads, and check every byte.
    fn read_from_threads(io: &Arc<BlockIo>, seed: u64, count: fn(usize) -> usize) {
        let dir = tempfile::tempdir().unwrap();
        let mut rng = Rng(seed);
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
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let io = io.clone();
                let file = file.clone();
                let bytes = bytes.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(seed * 1000 + t);
                    let files: Vec<(Arc<dyn ReadableFile>, &[u8])> = vec![(file, &bytes)];
                    for round in 0..20 {
                        let requests = random_requests(&mut rng, &files, count(round));
                        let batch = io.read_batch(&requests).unwrap();
                        check_batch(&batch, &requests, &files);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
    }

    #[test]
    fn concurrent_batches_on_one_engine() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<BlockIo>();
        for io in engines() {
            let io = Arc::new(io);
            read_from_threads(&io, 99, |_| 300);
            // At most one ring per concurrent caller was ever created.
            assert!(io.idle_rings() <= 4, "{} rings", io.idle_rings());
        }
    }

    /// Concurrent batches sharing a small read budget all complete with the right bytes, and
    /// leave nothing counted in flight.
    #[test]
    fn concurrent_batches_share_a_read_budget() {
        let Ok(io) = BlockIo::new(IoBackendKind::Uring) else {
            return; // no io_uring here: the budget applies to nothing
        };
        let io = Arc::new(io.with_read_budget(8));
        read_from_threads(&io, 7, |round| 50 + 40 * round);
        let gate = io.gate.as_ref().expect("a budget on io_uring makes a gate");
        assert_eq!(gate.in_flight(), 0);
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

//! The `pread` backend: each read of a batch in turn, one `pread` after another (also used for
//! files without a descriptor, read with `read_exact_at`).

use super::aligned::AlignedBuf;
use super::batch::Slot;
use super::plan::{condition, ReadPlan};
#[cfg(unix)]
use super::progress::{chunk_len, is_transient, Next, Progress};
#[cfg(unix)]
use crate::error::Error;
use crate::error::Result;
use crate::fs::ReadableFile;

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
pub(super) fn read_all_serial(
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

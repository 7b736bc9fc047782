//! Read progress, shared by both backends: how much of a request is read, where its next read
//! starts after a short one, and when a transient failure (`EINTR`, `EAGAIN`) may be retried.

use super::ALIGN_BYTES;

/// Longest single read submitted to the kernel. Longer requests are split into consecutive reads
/// (handled like short reads). It keeps lengths within `u32` (io_uring) and below Linux's
/// per-call limit of `0x7fff_f000` bytes, and is a multiple of [`ALIGN_BYTES`].
const READ_CHUNK_MAX: usize = 1 << 30;

/// How often one read may fail with `EINTR`/`EAGAIN` before the error is reported.
const TRANSIENT_RETRY_MAX: u32 = 64;

/// Progress of one request: how many bytes are known good, and how many transient errors it saw.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Progress {
    /// Bytes at the start of the request that have been read.
    pub(super) done: usize,
    /// Start (within the request) of the read currently issued.
    pub(super) issued_start: usize,
    /// `EINTR`/`EAGAIN` failures so far.
    transient: u32,
}

/// What to do after a read of a request completed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
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
    pub(super) fn on_read(
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
    pub(super) fn on_transient(&mut self) -> bool {
        self.transient += 1;
        self.transient <= TRANSIENT_RETRY_MAX
    }
}

/// Whether an errno means "try again".
pub(super) fn is_transient(errno: i32) -> bool {
    errno == libc::EINTR || errno == libc::EAGAIN
}

/// Length of the read issued from byte `start` of a `len`-byte request.
pub(super) fn chunk_len(start: usize, len: usize) -> usize {
    len.saturating_sub(start).min(READ_CHUNK_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

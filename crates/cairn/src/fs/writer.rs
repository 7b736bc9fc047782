//! The file writer: [`FileWriter`], the buffered append-only writer that computes a file's CRC32C
//! while writing, starts writeback along the way and may write over a recycled file.

use std::path::Path;
use std::sync::Arc;

use super::{DeferredRemovals, FileSystem, WritableFile};
use crate::error::Result;

/// A buffered, append-only writer that computes the CRC32C of everything written.
///
/// Memory: one buffer of `buffer_bytes` (64 KiB by default). Each flush is one `append` call.
#[derive(Debug)]
pub(crate) struct FileWriter {
    file: Box<dyn WritableFile>,
    buffer: Vec<u8>,
    buffer_bytes: usize,
    crc: u32,
    written_bytes: u64,
    /// `written_bytes` when writeback was last started.
    writeback_from: u64,
    /// The removal queue that each flushed buffer earns budget in (see [`FileWriter::credit`]).
    credit: Option<Arc<DeferredRemovals>>,
    /// The file was an old one written over ([`FileWriter::create_reusing`]): finishing cuts it.
    reused: bool,
}

impl FileWriter {
    /// Default size of the write buffer.
    pub const BUFFER_BYTES_DEFAULT: usize = 64 * 1024;

    /// Bytes appended between two [`WritableFile::start_writeback`] calls (1 MiB, RocksDB's
    /// recommended `bytes_per_sync`).
    pub const WRITEBACK_BYTES: u64 = 1 << 20;

    /// Creates `path` and wraps it.
    pub fn create(fs: &dyn FileSystem, path: &Path) -> Result<FileWriter> {
        Ok(Self::wrap(fs.create(path)?, false))
    }

    /// Creates `path` from a file `removals` kept for reuse, the one best suited to about
    /// `hint` bytes ([`DeferredRemovals::take_recycled`], [`FileSystem::reuse`]), or as a new
    /// file when none is. If reusing fails, the old file goes back to the removal queue.
    pub(crate) fn create_reusing(
        fs: &dyn FileSystem,
        path: &Path,
        removals: &DeferredRemovals,
        hint: u64,
    ) -> Result<FileWriter> {
        let Some(old) = removals.take_recycled(hint) else {
            return Self::create(fs, path);
        };
        match fs.reuse(&old, path) {
            Ok(file) => Ok(Self::wrap(file, true)),
            Err(e) => {
                removals.defer([old]);
                Err(e)
            }
        }
    }

    fn wrap(file: Box<dyn WritableFile>, reused: bool) -> FileWriter {
        FileWriter {
            file,
            buffer: Vec::with_capacity(Self::BUFFER_BYTES_DEFAULT),
            buffer_bytes: Self::BUFFER_BYTES_DEFAULT,
            crc: 0,
            written_bytes: 0,
            writeback_from: 0,
            credit: None,
            reused,
        }
    }

    /// Counts every byte this writer appends towards the removal budget of `removals` (see
    /// [`DeferredRemovals`]): writers of run files do, so that a bulk load frees space as fast
    /// as it writes.
    pub fn credit(mut self, removals: &Arc<DeferredRemovals>) -> FileWriter {
        self.credit = Some(removals.clone());
        self
    }

    /// Appends `bytes` (buffered).
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.written_bytes += bytes.len() as u64;
        if self.buffer.len() + bytes.len() > self.buffer_bytes {
            self.flush_buffer()?;
        }
        if bytes.len() >= self.buffer_bytes {
            self.file.append(bytes)?;
            if let Some(removals) = &self.credit {
                removals.note_written(bytes.len() as u64);
            }
            Ok(())
        } else {
            self.buffer.extend_from_slice(bytes);
            Ok(())
        }
    }

    /// Bytes written so far (including buffered ones).
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes
    }

    fn flush_buffer(&mut self) -> Result<()> {
        if !self.buffer.is_empty() {
            self.file.append(&self.buffer)?;
            if let Some(removals) = &self.credit {
                removals.note_written(self.buffer.len() as u64);
            }
            self.buffer.clear();
        }
        let appended = self.written_bytes - self.buffer.len() as u64;
        if appended - self.writeback_from >= Self::WRITEBACK_BYTES {
            self.file.start_writeback()?;
            self.writeback_from = appended;
        }
        Ok(())
    }

    /// Flushes the buffer, optionally fsyncs, and returns `(size_bytes, crc32c)`.
    pub fn finish(mut self, sync: bool) -> Result<(u64, u32)> {
        self.flush_buffer()?;
        if self.reused {
            self.file.end_at_written()?;
        }
        if sync {
            self.file.sync()?;
        }
        Ok((self.written_bytes, self.crc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::RealFs;

    /// A writer of several MiB starts writeback along the way (`sync_file_range` on Linux)
    /// and still writes every byte, with the right checksum.
    #[test]
    fn long_writes_start_writeback_and_keep_every_byte() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("long");
        let mut w = FileWriter::create(&RealFs, &path).unwrap();
        let chunk: Vec<u8> = (0..10_007u32).map(|i| (i % 251) as u8).collect();
        let mut want = Vec::new();
        while want.len() < 3 * FileWriter::WRITEBACK_BYTES as usize + 12_345 {
            w.write(&chunk).unwrap();
            want.extend_from_slice(&chunk);
        }
        // Started at least twice: every time a MiB more had been appended.
        assert!(w.writeback_from >= 2 * FileWriter::WRITEBACK_BYTES);
        let (len, crc) = w.finish(false).unwrap();
        assert_eq!(len, want.len() as u64);
        assert_eq!(crc, crc32c::crc32c(&want));
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }
}

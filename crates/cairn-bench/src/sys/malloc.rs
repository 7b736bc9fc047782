//! The C allocator's settings, fixed once at start-up for every engine alike.
//!
//! Owns: [`fix_mmap_threshold`]. Must never touch: an engine.
//!
//! glibc's `malloc` serves requests of at least `M_MMAP_THRESHOLD` bytes (128 KiB by default)
//! with a mapping of their own, returned to the kernel when freed. But by default the threshold
//! is *dynamic*: freeing such a block raises the threshold to its size (up to 32 MiB), so after
//! the first few megabyte-sized buffers (Bloom filters of merged runs, say) are freed, blocks of
//! that size come from the heap instead, where freed space is kept and the heap fragments. On
//! the UTxO benchmark at 10M entries that kept about 3.5 MiB more resident (peak RSS 38.1 MiB
//! against 34.6 with the threshold fixed, 2026-11-25). Setting the threshold explicitly turns
//! the adjustment off (mallopt(3)); this process does so at its start, before any engine is
//! opened, so every engine (each run is a process of this binary) gets the same allocator.

/// The threshold set: glibc's documented default, made fixed.
pub const MMAP_THRESHOLD_BYTES: i32 = 128 * 1024;

/// Fixes glibc's `malloc` mmap threshold at [`MMAP_THRESHOLD_BYTES`]; returns whether it was set
/// (false on other C libraries, where it is a no-op, or if glibc refused it).
pub fn fix_mmap_threshold() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt(3) takes two integers and only changes the allocator's parameters; it
        // is called at start-up from the main thread, with a value inside its documented range
        // (at most HEAP_MAX_SIZE / 2, 32 MiB on 64-bit).
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

//! Everything the benchmark reads from (or writes to) `/proc`: the process's peak resident set
//! and I/O counters, its cgroups, the machine's CPU, memory and kernel, and the page cache drop.
//!
//! Owns: reading `/proc`, each file in one function below. Every reader returns `None` where the
//! file or the field is missing (not Linux, a restricted container), so callers record an unknown
//! rather than fail. Must never touch: anything outside `/proc`.
//!
//! The files are read and parsed by the `procfs` crate, which knows their formats (the command
//! name in `stat` that may hold spaces and parentheses, the `kB` fields of `status`) so this
//! module does not have to. Two readers stay by hand, each for a reason: [`mount_of`], because
//! `procfs` keeps a mount's options in a hash map (their order, which the record writes, is lost)
//! and leaves a space in a mount point escaped as `\040`; and [`kernel_release`], because
//! `procfs` parses the release into major.minor.patch and drops the suffix the record keeps
//! (`-49-generic`). Writing dirty pages back is `libc::sync` (see [`sync`]).

use procfs::process::{Io, Process, Stat, Status};
use procfs::{CpuInfo, Current, Meminfo, ProcessCGroups};

/// The process's peak resident set size (`VmHWM` in `/proc/self/status`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    peak_of(&own_status()?)
}

/// The process's resident set size now (`VmRSS` in `/proc/self/status`), in bytes.
pub fn rss_bytes() -> Option<u64> {
    own_status()?.vmrss.map(|kib| kib * 1024)
}

/// `/proc/self/status`.
fn own_status() -> Option<Status> {
    Process::myself().ok()?.status().ok()
}

/// The peak resident set size of a `status`, in bytes.
fn peak_of(status: &Status) -> Option<u64> {
    status.vmhwm.map(|kib| kib * 1024)
}

/// The machine's memory (`MemTotal` in `/proc/meminfo`), in bytes.
pub fn mem_total_bytes() -> Option<u64> {
    Meminfo::current().ok().map(|m| m.mem_total)
}

/// The `model name` of the first CPU in `/proc/cpuinfo`.
pub fn cpu_model() -> Option<String> {
    Some(CpuInfo::current().ok()?.model_name(0)?.to_string())
}

/// The kernel release (`/proc/sys/kernel/osrelease`), whole (see the module doc).
pub fn kernel_release() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(text.trim().to_string())
}

/// `/proc/self/cgroup`: the process's cgroup in each hierarchy.
pub fn self_cgroups() -> Option<ProcessCGroups> {
    Process::myself().ok()?.cgroups().ok()
}

/// Bytes the process has read from and written to storage (`/proc/self/io`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoCounters {
    /// `read_bytes`.
    pub read_bytes: u64,
    /// `write_bytes`.
    pub write_bytes: u64,
}

impl From<&Io> for IoCounters {
    fn from(io: &Io) -> IoCounters {
        IoCounters {
            read_bytes: io.read_bytes,
            write_bytes: io.write_bytes,
        }
    }
}

impl IoCounters {
    /// The counters now.
    pub fn now() -> Option<IoCounters> {
        Some(IoCounters::from(&Process::myself().ok()?.io().ok()?))
    }

    /// The bytes moved since `before`, when both readings exist.
    pub fn since(now: Option<IoCounters>, before: Option<IoCounters>) -> Option<IoCounters> {
        let (now, before) = (now?, before?);
        Some(IoCounters {
            read_bytes: now.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: now.write_bytes.saturating_sub(before.write_bytes),
        })
    }
}

/// CPU seconds the process has used so far, user and system, over all its threads (`utime` and
/// `stime` of `/proc/self/stat`, in clock ticks of usually 10 ms).
pub fn cpu_seconds() -> Option<f64> {
    let stat = Process::myself().ok()?.stat().ok()?;
    Some(cpu_seconds_of(&stat, procfs::ticks_per_second() as f64))
}

/// CPU seconds process `pid` has used so far, user and system (`/proc/<pid>/stat`); `None`
/// when it is gone or unreadable.
pub fn cpu_seconds_of_pid(pid: u32) -> Option<f64> {
    let stat = Process::new(pid as i32).ok()?.stat().ok()?;
    Some(cpu_seconds_of(&stat, procfs::ticks_per_second() as f64))
}

/// `utime + stime` of a process's `stat`, in seconds.
fn cpu_seconds_of(stat: &Stat, ticks_per_second: f64) -> f64 {
    (stat.utime + stat.stime) as f64 / ticks_per_second.max(1.0)
}

/// The file system that holds `path`: its type, mount point and options, from the
/// `/proc/self/mounts` entry with the longest mount point that is a prefix of `path`
/// (canonicalised), e.g. `ext4 on / (rw,relatime,discard)`. Options such as `discard` change
/// what removing a file costs the device, so a benchmark records them.
pub fn mount_of(path: &std::path::Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    mount_for(&std::fs::read_to_string("/proc/self/mounts").ok()?, &path)
}

/// See [`mount_of`]; `mounts` is the text of `/proc/self/mounts`.
fn mount_for(mounts: &str, path: &std::path::Path) -> Option<String> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_device, point, kind, options) = (
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            );
            // Spaces and other bytes in mount points are escaped as octal (`\040`).
            let point = point.replace("\\040", " ");
            path.starts_with(&point)
                .then(|| (point.len(), format!("{kind} on {point} ({options})")))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, text)| text)
}

/// Writes every file system's dirty pages back: sync(2), called directly rather than through the
/// `sync` program (no process to start, and no way to fail).
pub fn sync() {
    // SAFETY: sync(2) takes no arguments, touches no memory of this process and cannot fail.
    unsafe { libc::sync() };
}

/// Writes dirty pages back ([`sync`]), then waits `pause`: the disk left to finish what earlier
/// writes and removals gave it, before a measured run.
pub fn settle_disk(pause: std::time::Duration) {
    sync();
    std::thread::sleep(pause);
}

/// Writes dirty pages back and drops the page cache (`/proc/sys/vm/drop_caches`; needs root).
/// Returns whether it worked.
pub fn drop_page_cache() -> bool {
    sync();
    procfs::sys::vm::drop_caches(procfs::sys::vm::DropCache::All).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mount_of_a_path_is_the_longest_prefix() {
        let mounts = "/dev/vda / ext4 rw,relatime,discard 0 0\n\
                      tmpfs /dev/shm tmpfs rw,nosuid 0 0\n\
                      /dev/vdb /work/data xfs rw,noatime 0 0\n";
        let at = |p: &str| mount_for(mounts, std::path::Path::new(p));
        assert_eq!(
            at("/work/bench/100m").as_deref(),
            Some("ext4 on / (rw,relatime,discard)")
        );
        assert_eq!(
            at("/work/data/t").as_deref(),
            Some("xfs on /work/data (rw,noatime)")
        );
        // A mount point that is a prefix of the name but not of the path's components.
        assert_eq!(
            at("/work/database").as_deref(),
            Some("ext4 on / (rw,relatime,discard)")
        );
        assert_eq!(mount_for("", std::path::Path::new("/x")), None);
        assert!(mount_of(std::path::Path::new("/")).is_some());
    }

    #[test]
    fn cpu_seconds_are_utime_plus_stime_after_the_name() {
        use procfs::FromRead;
        let stat = "4242 (cb (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 130 0 0 20 0 3 0 \
                    100 1000 10 1000 0 0 0 0 0 0 0 0 0 0 0 0";
        let stat = Stat::from_read(stat.as_bytes()).unwrap();
        assert_eq!(cpu_seconds_of(&stat, 100.0), 3.8);
        assert!(Stat::from_read("4242 (cb) S 1".as_bytes()).is_err());
        assert!(cpu_seconds().is_some_and(|s| s >= 0.0));
    }

    /// A `/proc/self/status` with every field `procfs` requires, and `hwm` as its `VmHWM` line.
    fn status(hwm: &str) -> String {
        format!(
            "Name:\tcairn-bench\nState:\tR (running)\nTgid:\t4242\nPid:\t4242\nPPid:\t1\n\
             TracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t0\n\
             VmPeak:\t  9000 kB\n{hwm}Threads:\t1\nSigQ:\t0/95000\nSigPnd:\t0\nShdPnd:\t0\n\
             SigBlk:\t0\nSigIgn:\t0\nSigCgt:\t0\nCapInh:\t0\nCapPrm:\t0\nCapEff:\t0\n\
             voluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t0\n"
        )
    }

    #[test]
    fn parses_kib_fields_and_io_counters() {
        use procfs::FromRead;
        let parsed = |text: String| Status::from_read(text.as_bytes());
        let with_hwm = parsed(status("VmHWM:\t    1234 kB\n")).unwrap();
        assert_eq!(peak_of(&with_hwm), Some(1234 * 1024));
        assert_eq!(with_hwm.vmrss, None);
        assert!(parsed(status("VmHWM:\t12 MB\n")).is_err());
        let io = "rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\n\
                  cancelled_write_bytes: 0\n";
        let counters = IoCounters::from(&Io::from_read(io.as_bytes()).unwrap());
        assert_eq!((counters.read_bytes, counters.write_bytes), (4096, 8192));
        assert!(Io::from_read("read_bytes: 1\n".as_bytes()).is_err());
        let later = IoCounters {
            read_bytes: 5000,
            write_bytes: 8192,
        };
        let moved = IoCounters::since(Some(later), Some(counters)).unwrap();
        assert_eq!((moved.read_bytes, moved.write_bytes), (904, 0));
        assert_eq!(IoCounters::since(None, Some(counters)), None);
    }

    #[test]
    fn reads_this_process_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_bytes().unwrap() > 0);
            assert!(mem_total_bytes().unwrap() > 0);
            assert!(self_cgroups().is_some());
            assert!(cpu_model().is_some() || cfg!(not(target_arch = "x86_64")));
            assert!(rss_bytes().unwrap() > 0);
        }
    }
}

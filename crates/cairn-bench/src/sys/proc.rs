//! Everything the benchmark reads from (or writes to) `/proc`: the process's peak resident set
//! and I/O counters, its cgroups, the machine's CPU, memory and kernel, and the page cache drop.
//!
//! Owns: the parsing of `/proc` files, each read in one function below. Every reader returns
//! `None` where the file or the field is missing (not Linux, a restricted container), so callers
//! record an unknown rather than fail. Must never touch: anything outside `/proc`.

use std::process::Command;

/// The process's peak resident set size (`VmHWM` in `/proc/self/status`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    kib_field(&read("/proc/self/status")?, "VmHWM:")
}

/// The process's resident set size now (`VmRSS` in `/proc/self/status`), in bytes.
pub fn rss_bytes() -> Option<u64> {
    kib_field(&read("/proc/self/status")?, "VmRSS:")
}

/// The machine's memory (`MemTotal` in `/proc/meminfo`), in bytes.
pub fn mem_total_bytes() -> Option<u64> {
    kib_field(&read("/proc/meminfo")?, "MemTotal:")
}

/// The `model name` of the first CPU in `/proc/cpuinfo`.
pub fn cpu_model() -> Option<String> {
    let cpuinfo = read("/proc/cpuinfo")?;
    cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map(|(_, name)| name.trim().to_string())
}

/// The kernel release (`/proc/sys/kernel/osrelease`).
pub fn kernel_release() -> Option<String> {
    Some(read("/proc/sys/kernel/osrelease")?.trim().to_string())
}

/// The text of `/proc/self/cgroup`: one `id:controllers:path` line per hierarchy.
pub fn self_cgroup() -> Option<String> {
    read("/proc/self/cgroup")
}

/// Bytes the process has read from and written to storage (`/proc/self/io`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoCounters {
    /// `read_bytes`.
    pub read_bytes: u64,
    /// `write_bytes`.
    pub write_bytes: u64,
}

impl IoCounters {
    /// The counters now.
    pub fn now() -> Option<IoCounters> {
        parse_io(&read("/proc/self/io")?)
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
    parse_cpu_seconds(&read("/proc/self/stat")?, clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: `sysconf` only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// `utime + stime` of a `/proc/PID/stat` line, in seconds. The command name (field 2) may hold
/// spaces and parentheses, so the fields are counted from its closing parenthesis.
fn parse_cpu_seconds(stat: &str, ticks_per_second: f64) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state (3), ppid (4), ... utime (14), stime (15).
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_second)
}

/// The file system that holds `path`: its type, mount point and options, from the
/// `/proc/self/mounts` entry with the longest mount point that is a prefix of `path`
/// (canonicalised), e.g. `ext4 on / (rw,relatime,discard)`. Options such as `discard` change
/// what removing a file costs the device, so a benchmark records them.
pub fn mount_of(path: &std::path::Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    mount_for(&read("/proc/self/mounts")?, &path)
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

/// Writes every file system's dirty pages back (`sync`); returns whether it worked.
pub fn sync() -> bool {
    Command::new("sync").status().is_ok_and(|s| s.success())
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
    sync() && std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The value of a `Name:   123 kB` line, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The `read_bytes:` and `write_bytes:` lines of `/proc/self/io`.
fn parse_io(text: &str) -> Option<IoCounters> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
    };
    Some(IoCounters {
        read_bytes: field("read_bytes:")?,
        write_bytes: field("write_bytes:")?,
    })
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
        let stat = "4242 (cb (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 130 0 0 20 0 3 0";
        assert_eq!(parse_cpu_seconds(stat, 100.0), Some(3.8));
        assert_eq!(parse_cpu_seconds("4242 (cb) S 1", 100.0), None);
        assert!(cpu_seconds().is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn parses_kib_fields_and_io_counters() {
        let status = "Name:\tcairn-bench\nVmPeak:\t  9000 kB\nVmHWM:\t    1234 kB\n";
        assert_eq!(kib_field(status, "VmHWM:"), Some(1234 * 1024));
        assert_eq!(kib_field(status, "VmRSS:"), None);
        assert_eq!(kib_field("MemTotal: 12 MB\n", "MemTotal:"), None);
        let io = "rchar: 1\nwchar: 2\nread_bytes: 4096\nwrite_bytes: 8192\n";
        let counters = parse_io(io).unwrap();
        assert_eq!((counters.read_bytes, counters.write_bytes), (4096, 8192));
        assert_eq!(parse_io("read_bytes: 1\n"), None);
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
            assert!(self_cgroup().is_some());
        }
    }
}

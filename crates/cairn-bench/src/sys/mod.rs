//! The system around the benchmark, probed and recorded: the machine, the clock, the checkout,
//! `/proc`, memory cgroups and the disk's fio baseline.
//!
//! Owns: [`machine`], [`git_commit`] and [`now_rfc3339`] (the date through `jiff`, which knows
//! the calendar, rather than a days-to-civil conversion of our own); `/proc` is read only in
//! [`proc`], cgroups are handled only in [`cgroup`], the fio script is run only by [`fio`], the
//! C allocator is set only by [`malloc`]. Must never touch: an engine.

pub mod cgroup;
pub mod fio;
pub mod malloc;
pub mod proc;

use std::process::Command;

use crate::record::Machine;

/// The machine this process runs on.
pub fn machine() -> Machine {
    Machine {
        cpu: proc::cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        mem_total_bytes: proc::mem_total_bytes(),
        kernel: proc::kernel_release(),
    }
}

/// `git describe --always --dirty` of the working directory, if it is a checkout.
pub fn git_commit() -> Option<String> {
    let output = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=10"])
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The current time as `YYYY-MM-DDTHH:MM:SSZ`, in whole seconds.
pub fn now_rfc3339() -> String {
    rfc3339(jiff::Timestamp::now().as_second())
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ`: `jiff`'s RFC 3339 form of a
/// timestamp in UTC, which leaves out the fraction of a whole second (out of range: the epoch).
fn rfc3339(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_400_000), "2026-11-23T02:13:20Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}

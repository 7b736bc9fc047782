//! The system around the benchmark, probed and recorded: the machine, the clock, the checkout,
//! `/proc`, memory cgroups and the disk's fio baseline.
//!
//! Owns: [`machine`], [`git_commit`] and [`now_rfc3339`]; `/proc` is read only in [`proc`],
//! cgroups are handled only in [`cgroup`], the fio script is run only by [`fio`], the C
//! allocator is set only by [`malloc`]. Must never
//! touch: an engine.

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

/// The current time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Formats seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian).
fn rfc3339(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil algorithm, shifted so March is the first month.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
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

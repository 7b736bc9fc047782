//! Fair memory: runs a benchmark child process in a memory cgroup of its own, whose limit counts
//! the page cache as well as the resident set, so an engine that reads through the page cache
//! (LMDB, fjall) is held to the same budget as one that reads with `O_DIRECT` (Cairn, RocksDB).
//!
//! Owns: creating and removing the cgroup (a child of this process's own memory cgroup, cgroup v1
//! or v2), moving a child process into it ([`join_from_env`], called first thing by `main`), and
//! its peak usage. Must never touch: any engine.
//!
//! The child joins its cgroup itself: the parent passes the cgroup's directory in the
//! [`CGROUP_ENV`] variable, and the child writes its pid to `cgroup.procs` before it does any
//! work. Memory the child touched before joining (a few pages of process start-up) stays charged
//! to the parent's cgroup.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::failure::{Context, Failure};

/// The variable naming the cgroup directory a child process must join.
pub const CGROUP_ENV: &str = "CAIRN_BENCH_CGROUP";

/// The cgroup hierarchy in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// cgroup v1: the `memory` controller's own hierarchy.
    V1,
    /// cgroup v2: the unified hierarchy.
    V2,
}

impl Version {
    /// "v1" or "v2", for reports.
    pub fn name(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// A memory cgroup created for one child process, removed on drop.
#[derive(Debug)]
pub struct MemCgroup {
    dir: PathBuf,
    version: Version,
    limit: u64,
}

/// Where this process's memory cgroup lives, if the machine has a memory controller.
fn own_memory_cgroup() -> Option<(PathBuf, Version)> {
    let cgroups = super::proc::self_cgroup()?;
    let relative = |want: &dyn Fn(&str, &str) -> bool| {
        cgroups.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            want(id, controllers).then(|| path.trim_start_matches('/').to_string())
        })
    };
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if v1.join("cgroup.procs").exists() {
        let rel = relative(&|_, c| c.split(',').any(|c| c == "memory"))?;
        return Some((v1.join(rel), Version::V1));
    }
    let v2 = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).ok()?;
    if controllers.split_whitespace().any(|c| c == "memory") {
        let rel = relative(&|id, _| id == "0")?;
        return Some((v2.join(rel), Version::V2));
    }
    None
}

/// The memory limit of this process's own cgroup, if one is set (v1 `memory.limit_in_bytes`,
/// v2 `memory.max`; "max" or a v1 value near `u64::MAX` means none).
pub fn own_limit() -> Option<u64> {
    let (dir, version) = own_memory_cgroup()?;
    let text = std::fs::read_to_string(dir.join(limit_file(version))).ok()?;
    text.trim().parse::<u64>().ok().filter(|&v| v < 1 << 60)
}

/// The file holding a cgroup's memory limit.
fn limit_file(version: Version) -> &'static str {
    match version {
        Version::V1 => "memory.limit_in_bytes",
        Version::V2 => "memory.max",
    }
}

impl MemCgroup {
    /// Creates a fresh cgroup named `name` under this process's memory cgroup, limited to
    /// `limit` bytes (page cache included). `Ok(None)` when the machine has no memory cgroup
    /// controller; an error when it has one but the cgroup cannot be made (no permission).
    pub fn create(name: &str, limit: u64) -> Result<Option<MemCgroup>, Failure> {
        let Some((parent, version)) = own_memory_cgroup() else {
            return Ok(None);
        };
        let dir = parent.join(name);
        if dir.exists() {
            // Left by a killed run: empty, so it can be removed.
            std::fs::remove_dir(&dir).context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir(&dir).context(|| format!("creating the cgroup {}", dir.display()))?;
        let cgroup = MemCgroup {
            dir,
            version,
            limit,
        };
        let path = cgroup.dir.join(limit_file(version));
        std::fs::write(&path, limit.to_string())
            .context(|| format!("setting {}", path.display()))?;
        if version == Version::V2 {
            // Without swap limited too, a v2 cgroup could push pages to swap instead of
            // holding the engine to its budget (ignored where there is no swap controller).
            let _ = std::fs::write(cgroup.dir.join("memory.swap.max"), "0");
        }
        Ok(Some(cgroup))
    }

    /// The cgroup's directory (what the child writes its pid into).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The hierarchy.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The most memory the cgroup held at once (resident set plus page cache), where the
    /// kernel reports it (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`).
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // The child has exited, so the cgroup is empty; a failure leaves an empty directory
        // behind, which `create` removes next time.
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cairn-bench: could not remove {}: {e}", self.dir.display());
        }
    }
}

/// If this process was started in a cgroup ([`CGROUP_ENV`]), moves it there. Called by `main`
/// before anything else.
pub fn join_from_env() -> Result<(), Failure> {
    let Some(dir) = std::env::var_os(CGROUP_ENV) else {
        return Ok(());
    };
    let procs = Path::new(&dir).join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string())
        .context(|| format!("joining the cgroup {}", procs.display()))
}

/// Whether this process was started by [`run_child`] in a cgroup of its own.
pub fn in_child() -> bool {
    std::env::var_os(CGROUP_ENV).is_some()
}

/// What [`run_child`] saw.
#[derive(Clone, Copy, Debug)]
pub struct ChildMemory {
    /// The limit applied, or `None` when the machine has no memory cgroup support.
    pub limit_bytes: Option<u64>,
    /// The cgroup's peak usage (resident set plus page cache).
    pub peak_bytes: Option<u64>,
    /// The hierarchy used.
    pub version: Option<Version>,
}

/// Runs this binary again with `args` in a fresh memory cgroup limited to `limit` bytes and
/// waits for it. Without cgroup support the child runs unlimited and a line says so. A child
/// that fails is an error.
pub fn run_child(args: &[String], limit: u64) -> Result<ChildMemory, Failure> {
    let name = format!("cairn-bench-{}", std::process::id());
    let cgroup = MemCgroup::create(&name, limit)?;
    if cgroup.is_none() {
        eprintln!(
            "cairn-bench: this machine has no memory cgroup controller: running WITHOUT the \
             memory limit of {limit} bytes"
        );
    }
    run_self(args, cgroup.as_ref())?;
    Ok(ChildMemory {
        limit_bytes: cgroup.as_ref().map(MemCgroup::limit),
        peak_bytes: cgroup.as_ref().and_then(MemCgroup::peak_bytes),
        version: cgroup.as_ref().map(MemCgroup::version),
    })
}

/// Runs this binary again with `args` (in `cgroup`, if given) and waits; a child that fails is
/// an error.
pub fn run_self(args: &[String], cgroup: Option<&MemCgroup>) -> Result<(), Failure> {
    let exe = std::env::current_exe().context(|| "finding this binary".to_string())?;
    let mut command = Command::new(exe);
    command.args(args);
    if let Some(cgroup) = cgroup {
        command.env(CGROUP_ENV, cgroup.dir());
    }
    let status = command
        .status()
        .context(|| format!("starting cairn-bench {}", args.join(" ")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Failure(format!(
            "cairn-bench {} failed ({status})",
            args.join(" ")
        )))
    }
}

/// Parses a size such as `1G`, `512M`, `1GiB` or `1073741824` (binary units).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 1G, 512M or 1073741824"))?;
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("`{text}` is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}

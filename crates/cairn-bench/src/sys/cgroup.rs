//! Fair memory: runs a benchmark child process in a memory cgroup of its own, whose limit counts
//! the page cache as well as the resident set, so an engine that reads through the page cache
//! (LMDB, fjall) is held to the same budget as one that reads with `O_DIRECT` (Cairn, RocksDB).
//!
//! Owns: finding this process's memory cgroup ([`Hierarchy`], cgroup v1 or v2), delegating the
//! memory controller to its children on v2, creating and removing a child's cgroup, moving a
//! child process into it ([`join_from_env`], called first thing by `main`), and its peak usage.
//! Must never touch: any engine.
//!
//! The child joins its cgroup itself: the parent passes the cgroup's directory in the
//! [`CGROUP_ENV`] variable, and the child writes its pid to `cgroup.procs` before it does any
//! work. Memory the child touched before joining (a few pages of process start-up) stays charged
//! to the parent's cgroup.
//!
//! On cgroup v2 (the unified hierarchy systemd manages), a child cgroup has a `memory.max` only
//! when its parent lists `memory` in `cgroup.subtree_control`. [`Hierarchy::create`] writes
//! `+memory` there when it is missing; when the parent does not have the controller itself (not
//! in its `cgroup.controllers`: the cgroup above it does not delegate it) or the write is
//! refused (no permission, or `EBUSY`: cgroup v2 lets a cgroup that holds processes, this one
//! included, hand controllers to its children only if it is the root), the child runs without a
//! limit and every report says so and why ([`Placement::Unlimited`]), rather than claim a limit
//! the kernel does not enforce.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

use procfs::ProcessCGroup;

use crate::failure::{Context, Failure};
use crate::sys::proc;

/// The variable naming the cgroup directory a child process must join.
pub const CGROUP_ENV: &str = "CAIRN_BENCH_CGROUP";

/// Where the cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The controller the limit needs.
const MEMORY: &str = "memory";

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

    /// The file holding a cgroup's memory limit.
    fn limit_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        }
    }

    /// The file holding a cgroup's peak memory usage.
    fn peak_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        }
    }
}

/// The cgroup file systems as one process sees them: where they are mounted and which cgroups
/// the process belongs to. Tests point it at a fake tree in a temporary directory.
#[derive(Clone, Debug)]
pub struct Hierarchy {
    /// The mount point of the cgroup file systems (`/sys/fs/cgroup`).
    root: PathBuf,
    /// The process's cgroup in each hierarchy (`/proc/self/cgroup`, parsed by `procfs`).
    membership: Vec<ProcessCGroup>,
}

/// Where a child process runs.
#[derive(Debug)]
pub enum Placement {
    /// In a memory cgroup of its own, with the limit in force.
    Limited(MemCgroup),
    /// Without a limit, for the reason given.
    Unlimited(String),
}

impl Hierarchy {
    /// The hierarchy of this process, mounted at `/sys/fs/cgroup`.
    pub fn of_this_process() -> Hierarchy {
        Hierarchy {
            root: CGROUP_ROOT.into(),
            membership: proc::self_cgroups().map_or_else(Vec::new, |groups| groups.0),
        }
    }

    /// The hierarchy mounted at `root` of a process whose `/proc/self/cgroup` reads
    /// `membership` (a text `procfs` cannot parse: a process in no cgroup).
    #[cfg(test)]
    pub fn new(root: impl Into<PathBuf>, membership: &str) -> Hierarchy {
        use procfs::FromRead;
        let parsed = procfs::ProcessCGroups::from_read(membership.as_bytes());
        Hierarchy {
            root: root.into(),
            membership: parsed.map_or_else(|_| Vec::new(), |groups| groups.0),
        }
    }

    /// The process's memory cgroup and its hierarchy; `Err` says why there is none.
    fn own_memory_cgroup(&self) -> Result<(PathBuf, Version), String> {
        let relative = |want: &dyn Fn(&ProcessCGroup) -> bool| {
            let group = self.membership.iter().find(|group| want(group))?;
            Some(group.pathname.trim_start_matches('/').to_string())
        };
        let v1 = self.root.join(MEMORY);
        if v1.join("cgroup.procs").exists() {
            let rel = relative(&|group| group.controllers.iter().any(|c| c == MEMORY))
                .ok_or("this process is in no cgroup of the v1 memory hierarchy")?;
            return Ok((v1.join(rel), Version::V1));
        }
        if !lists(&self.root.join("cgroup.controllers"), MEMORY) {
            return Err("this machine has no memory cgroup controller".to_string());
        }
        let rel = relative(&|group| group.hierarchy == 0)
            .ok_or("this process is in no cgroup of the v2 hierarchy")?;
        Ok((self.root.join(rel), Version::V2))
    }

    /// The memory limit of the process's own cgroup, if one is set (v1 `memory.limit_in_bytes`,
    /// v2 `memory.max`; "max" or a v1 value near `u64::MAX` means none).
    pub fn own_limit(&self) -> Option<u64> {
        let (dir, version) = self.own_memory_cgroup().ok()?;
        let text = std::fs::read_to_string(dir.join(version.limit_file())).ok()?;
        text.trim().parse::<u64>().ok().filter(|&v| v < 1 << 60)
    }

    /// The process's memory cgroup, ready to limit the memory of children made under it: on v2
    /// its `cgroup.controllers` must list `memory`, and its `cgroup.subtree_control` must list
    /// it too (this writes `+memory` there when it does not). `Err` says why it cannot.
    fn parent_for_children(&self) -> Result<(PathBuf, Version), String> {
        let (parent, version) = self.own_memory_cgroup()?;
        if version == Version::V1 {
            return Ok((parent, version));
        }
        let controllers = parent.join("cgroup.controllers");
        if !lists(&controllers, MEMORY) {
            return Err(format!(
                "the memory controller is not available in {} (not listed in {}): the cgroup \
                 above it does not delegate it",
                parent.display(),
                controllers.display()
            ));
        }
        let subtree = parent.join("cgroup.subtree_control");
        if !lists(&subtree, MEMORY) {
            std::fs::write(&subtree, format!("+{MEMORY}")).map_err(|e| {
                let why = match e.kind() {
                    ErrorKind::ResourceBusy => {
                        "; cgroup v2 lets a cgroup that holds processes (this one holds \
                         cairn-bench) delegate a controller only if it is the root cgroup"
                    }
                    ErrorKind::PermissionDenied => "; the cgroup is not delegated to this user",
                    _ => "",
                };
                format!(
                    "could not delegate the memory controller to the children of {} (writing \
                     +{MEMORY} to {}: {e}){why}",
                    parent.display(),
                    subtree.display()
                )
            })?;
        }
        Ok((parent, version))
    }

    /// Creates a fresh cgroup named `name` under the process's memory cgroup, limited to `limit`
    /// bytes (page cache included), delegating the memory controller first where needed; or
    /// says why a child must run unlimited (no controller, not delegated, the cgroup cannot be
    /// made). A cgroup that was made but refuses its limit is an error.
    pub fn create(&self, name: &str, limit: u64) -> Result<Placement, Failure> {
        let (parent, version) = match self.parent_for_children() {
            Ok(found) => found,
            Err(reason) => return Ok(Placement::Unlimited(reason)),
        };
        let dir = parent.join(name);
        if dir.exists() {
            // Left by a killed run: empty, so it can be removed.
            std::fs::remove_dir(&dir).context(|| format!("removing {}", dir.display()))?;
        }
        if let Err(e) = std::fs::create_dir(&dir) {
            let reason = format!("could not create the cgroup {}: {e}", dir.display());
            return Ok(Placement::Unlimited(reason));
        }
        let cgroup = MemCgroup {
            dir,
            version,
            limit,
        };
        let path = cgroup.dir.join(version.limit_file());
        std::fs::write(&path, limit.to_string())
            .context(|| format!("setting {}", path.display()))?;
        if version == Version::V2 {
            // Without swap limited too, a v2 cgroup could push pages to swap instead of
            // holding the engine to its budget (ignored where there is no swap controller).
            let _ = std::fs::write(cgroup.dir.join("memory.swap.max"), "0");
        }
        Ok(Placement::Limited(cgroup))
    }
}

/// Whether the whitespace-separated list in the file at `path` names `controller` (a missing
/// file lists nothing).
fn lists(path: &Path, controller: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| text.split_whitespace().any(|c| c == controller))
}

/// A memory cgroup created for one child process, removed on drop.
#[derive(Debug)]
pub struct MemCgroup {
    dir: PathBuf,
    version: Version,
    limit: u64,
}

impl MemCgroup {
    /// The cgroup's directory (what the child writes its pid into).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The most memory the cgroup held at once (resident set plus page cache), where the
    /// kernel reports it (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`).
    pub fn peak_bytes(&self) -> Option<u64> {
        std::fs::read_to_string(self.dir.join(self.version.peak_file()))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// How many times the kernel's OOM killer killed a process of the cgroup at its limit (v2
    /// `memory.events`, v1 `memory.oom_control`: their `oom_kill` line), where it says.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = std::fs::read_to_string(self.dir.join(file)).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
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
#[derive(Clone, Debug)]
pub struct ChildMemory {
    /// The limit applied, or `None` when the child ran unlimited.
    pub limit_bytes: Option<u64>,
    /// The cgroup's peak usage (resident set plus page cache).
    pub peak_bytes: Option<u64>,
    /// The hierarchy used.
    pub version: Option<Version>,
    /// Why the child ran without a limit, when it did.
    pub unlimited_reason: Option<String>,
}

/// Runs this command again as the child that does one part of it: its own arguments followed
/// by `{flag} {name} --child-json {json} --child-dir {dir}`, in a fresh memory cgroup limited to
/// `limit` bytes ([`run_child`]), the page cache written back and dropped first (a line on
/// stderr when that is not allowed).
pub fn rerun_as_child(
    flag: &str,
    name: &str,
    json: &std::path::Path,
    dir: &std::path::Path,
    limit: u64,
) -> Result<ChildMemory, Failure> {
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    argv.extend([
        flag.to_string(),
        name.to_string(),
        "--child-json".to_string(),
        json.display().to_string(),
        "--child-dir".to_string(),
        dir.display().to_string(),
    ]);
    if !super::proc::drop_page_cache() {
        eprintln!("cairn-bench: could not drop the page cache (needs root)");
    }
    run_child(&argv, limit)
}

/// Runs this binary again with `args` in a fresh memory cgroup limited to `limit` bytes and
/// waits for it. When no limit can be set the child runs unlimited, and a line on stderr and
/// the result say why. A child that fails is an error.
pub fn run_child(args: &[String], limit: u64) -> Result<ChildMemory, Failure> {
    let name = format!("cairn-bench-{}", std::process::id());
    match Hierarchy::of_this_process().create(&name, limit)? {
        Placement::Limited(cgroup) => {
            if let Err(e) = run_self(args, Some(&cgroup)) {
                return Err(match cgroup.oom_kills() {
                    Some(kills) if kills > 0 => Failure(format!(
                        "{} (killed at its memory limit of {} MiB: the cgroup's OOM killer ran)",
                        e.0,
                        cgroup.limit >> 20
                    )),
                    _ => e,
                });
            }
            Ok(ChildMemory {
                limit_bytes: Some(cgroup.limit),
                peak_bytes: cgroup.peak_bytes(),
                version: Some(cgroup.version),
                unlimited_reason: None,
            })
        }
        Placement::Unlimited(reason) => {
            eprintln!("cairn-bench: running WITHOUT the memory limit of {limit} bytes: {reason}");
            run_self(args, None)?;
            Ok(ChildMemory {
                limit_bytes: None,
                peak_bytes: None,
                version: None,
                unlimited_reason: Some(reason),
            })
        }
    }
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

    /// The OOM-kill count comes from `memory.events` (v2) or `memory.oom_control` (v1).
    #[test]
    fn oom_kills_are_read_from_either_version() {
        let dir = tempfile::tempdir().unwrap();
        let v2 = MemCgroup {
            dir: dir.path().to_path_buf(),
            version: Version::V2,
            limit: 1 << 30,
        };
        assert_eq!(v2.oom_kills(), None);
        std::fs::write(
            dir.path().join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(v2.oom_kills(), Some(1));
        std::fs::write(
            dir.path().join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .unwrap();
        let v1 = MemCgroup {
            dir: dir.path().to_path_buf(),
            version: Version::V1,
            limit: 1 << 30,
        };
        assert_eq!(v1.oom_kills(), Some(3));
        // Neither cgroup is real: their drops must not remove the directory.
        std::mem::forget(v1);
        std::mem::forget(v2);
    }

    /// A fake cgroup v2 mount: the root lists `root_controllers`, and this process sits in
    /// `user.slice/bench`, whose files hold `controllers` and `subtree_control`.
    fn fake_v2(
        root_controllers: &str,
        controllers: &str,
        subtree_control: &str,
    ) -> (tempfile::TempDir, Hierarchy, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), root_controllers).unwrap();
        let own = root.path().join("user.slice").join("bench");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("cgroup.controllers"), controllers).unwrap();
        std::fs::write(own.join("cgroup.subtree_control"), subtree_control).unwrap();
        std::fs::write(own.join("memory.max"), "max\n").unwrap();
        let hierarchy = Hierarchy::new(root.path(), "0::/user.slice/bench\n");
        (root, hierarchy, own)
    }

    /// The cgroup of a limited placement.
    fn limited(placement: Placement) -> MemCgroup {
        let Placement::Limited(cgroup) = placement else {
            panic!("expected a limit, got {placement:?}");
        };
        cgroup
    }

    /// Removes the (fake) files of `cgroup`, so that dropping it removes its directory as the
    /// kernel would.
    fn empty(cgroup: &MemCgroup) {
        for entry in std::fs::read_dir(cgroup.dir()).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }

    /// The reason of an unlimited placement.
    fn unlimited(placement: Placement) -> String {
        match placement {
            Placement::Unlimited(reason) => reason,
            Placement::Limited(cgroup) => {
                empty(&cgroup);
                panic!("expected no limit, got {cgroup:?}")
            }
        }
    }

    #[test]
    fn v2_delegates_the_memory_controller_then_limits_the_child() {
        let (_root, hierarchy, own) = fake_v2("cpu io memory pids", "cpu memory pids", "pids");
        let cgroup = limited(hierarchy.create("child", 1 << 30).unwrap());
        assert_eq!(
            std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(),
            "+memory",
            "the parent delegates memory to its children"
        );
        assert_eq!(cgroup.dir(), own.join("child"));
        assert_eq!(cgroup.version, Version::V2);
        let max = std::fs::read_to_string(own.join("child").join("memory.max")).unwrap();
        assert_eq!(max, (1u64 << 30).to_string());
        let swap = std::fs::read_to_string(own.join("child").join("memory.swap.max")).unwrap();
        assert_eq!(swap, "0");
        std::fs::write(own.join("child").join("memory.peak"), "12345\n").unwrap();
        assert_eq!(cgroup.peak_bytes(), Some(12345));
        empty(&cgroup);
        drop(cgroup);
        assert!(!own.join("child").exists(), "removed on drop");
        assert_eq!(hierarchy.own_limit(), None, "\"max\" is no limit");
    }

    #[test]
    fn v2_leaves_a_delegated_controller_alone() {
        let (_root, hierarchy, own) = fake_v2("memory", "memory", "cpu memory\n");
        let cgroup = limited(hierarchy.create("child", 4096).unwrap());
        let subtree = std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap();
        assert_eq!(subtree, "cpu memory\n", "nothing written");
        empty(&cgroup);
    }

    #[test]
    fn v2_without_the_controller_in_the_parent_runs_unlimited() {
        let (_root, hierarchy, own) = fake_v2("cpu memory pids", "cpu pids", "");
        let reason = unlimited(hierarchy.create("child", 4096).unwrap());
        assert!(reason.contains("not available"), "{reason}");
        assert!(reason.contains("cgroup.controllers"), "{reason}");
        assert!(!own.join("child").exists(), "no cgroup made");
        let subtree = std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap();
        assert_eq!(subtree, "", "nothing written");
    }

    #[test]
    fn v2_that_refuses_the_delegation_runs_unlimited() {
        let (_root, hierarchy, own) = fake_v2("memory", "memory", "");
        // A write to a directory fails, as the kernel's refusal would.
        let subtree = own.join("cgroup.subtree_control");
        std::fs::remove_file(&subtree).unwrap();
        std::fs::create_dir(&subtree).unwrap();
        let reason = unlimited(hierarchy.create("child", 4096).unwrap());
        assert!(reason.contains("could not delegate"), "{reason}");
        assert!(reason.contains("cgroup.subtree_control"), "{reason}");
        assert!(!own.join("child").exists(), "no cgroup made");
    }

    #[test]
    fn no_memory_controller_runs_unlimited() {
        let (root, hierarchy, _own) = fake_v2("cpu pids", "cpu pids", "");
        let reason = unlimited(hierarchy.create("child", 4096).unwrap());
        assert!(reason.contains("no memory cgroup controller"), "{reason}");
        let elsewhere = Hierarchy::new(root.path(), "");
        let reason = unlimited(elsewhere.create("child", 4096).unwrap());
        assert!(reason.contains("no memory cgroup controller"), "{reason}");
    }

    #[test]
    fn v1_limits_a_child_of_the_memory_hierarchy() {
        let root = tempfile::tempdir().unwrap();
        let own = root.path().join("memory").join("box");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(root.path().join("memory").join("cgroup.procs"), "1\n").unwrap();
        std::fs::write(own.join("memory.limit_in_bytes"), "104857600\n").unwrap();
        let membership = "5:devices:/\n4:memory:/box\n0::/\n";
        let hierarchy = Hierarchy::new(root.path(), membership);
        assert_eq!(hierarchy.own_limit(), Some(100 << 20));
        let cgroup = limited(hierarchy.create("child", 8192).unwrap());
        assert_eq!(cgroup.version, Version::V1);
        let limit = std::fs::read_to_string(own.join("child").join("memory.limit_in_bytes"));
        assert_eq!(limit.unwrap(), "8192");
        empty(&cgroup);
    }
}

//! The simulated file system: [`MemFs`], an in-memory [`FileSystem`] that models what survives a
//! power loss and injects faults from a seeded [`FaultPlan`].
//!
//! Owns: the in-memory tree of directories and files, the durability model, the fault plan and
//! the log of injected faults. May call: `fs` (the traits) and the standard library. Must never
//! touch: engine structures.
//!
//! # Durability model
//!
//! Files are inodes; a directory maps names to inodes, so hard links share contents and a file
//! removed while open stays readable through its handles, as on POSIX. Only `fsync` makes anything
//! durable, and only what it names:
//!
//! - a file's contents up to its length when it was last synced ([`WritableFile::sync`] or
//!   [`FileSystem::sync_file`]), unless an fsync of it ever failed: then, as on Linux, whatever
//!   was dirty may have been dropped, and later fsyncs report success without making anything
//!   more durable;
//! - a directory's entries (names and the inodes they point to) as they were when the directory
//!   was last synced ([`FileSystem::sync_dir`]).
//!
//! [`MemFs::recover`] simulates a power loss followed by a reboot: each directory independently
//! either keeps its current entries (the system wrote them back on its own) or reverts to its
//! durable ones, and each file's unsynced tail is dropped, kept, kept in part, or replaced by junk
//! (a torn write). Anything not fsynced may or may not be there, in any combination across
//! directories; within one directory the unsynced changes survive together or not at all (as a
//! journaling file system keeps a rename atomic). `remove_dir_all` removes one entry at a time,
//! each a primitive of its own, so a fault or a power loss can stop it half way.
//!
//! # Faults
//!
//! Every primitive (see [`FsOp`]) first asks the fault plan. A *noisy* fault makes it fail with
//! an I/O error and do nothing, or, for an append, write a prefix of the buffer and then fail (a
//! torn write). A *silent* fault makes an append report success after writing only a prefix or
//! junk: the disk lied, and only checksums can tell. [`MemFs::crash_after`] cuts the power after
//! a number of primitives: that one and every later one fail until [`MemFs::recover`]. Every
//! decision comes from the plan's seed, so a failing case replays exactly when the same operations
//! are issued in the same order.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::{FileLock, FileSpace, FileSystem, ReadOptions, ReadableFile, WritableFile};
use crate::error::{Error, Result};

/// A primitive operation of the file system, as fault plans and the fault log name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FsOp {
    /// [`FileSystem::create_dir_all`].
    CreateDir,
    /// [`FileSystem::list_dir`].
    ListDir,
    /// [`FileSystem::exists`], [`FileSystem::is_dir`], [`FileSystem::file_space`] and
    /// [`ReadableFile::len_bytes`].
    Stat,
    /// [`FileSystem::remove_file`].
    RemoveFile,
    /// [`FileSystem::remove_dir_all`].
    RemoveDir,
    /// [`FileSystem::rename`], and the rename of [`FileSystem::reuse`].
    Rename,
    /// [`FileSystem::hard_link`].
    HardLink,
    /// [`FileSystem::truncate`] and [`WritableFile::end_at_written`].
    Truncate,
    /// [`FileSystem::sync_dir`].
    SyncDir,
    /// [`FileSystem::sync_file`] and [`WritableFile::sync`].
    SyncFile,
    /// [`FileSystem::create`].
    Create,
    /// [`FileSystem::open`], and the opening of [`FileSystem::reuse`].
    Open,
    /// [`ReadableFile::read_exact_at`].
    Read,
    /// [`WritableFile::append`].
    Append,
    /// [`FileSystem::try_lock`].
    Lock,
}

impl FsOp {
    /// Every primitive.
    pub const ALL: [FsOp; 15] = [
        FsOp::CreateDir,
        FsOp::ListDir,
        FsOp::Stat,
        FsOp::RemoveFile,
        FsOp::RemoveDir,
        FsOp::Rename,
        FsOp::HardLink,
        FsOp::Truncate,
        FsOp::SyncDir,
        FsOp::SyncFile,
        FsOp::Create,
        FsOp::Open,
        FsOp::Read,
        FsOp::Append,
        FsOp::Lock,
    ];
}

/// What an injected fault did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Noisy: the primitive failed with an I/O error and did nothing.
    Error,
    /// Noisy: an append wrote a prefix of its buffer, then failed with an I/O error.
    TornWrite,
    /// Silent: an append wrote only a prefix of its buffer and reported success.
    ShortWrite,
    /// Silent: an append wrote junk of the right length and reported success.
    JunkWrite,
}

impl FaultKind {
    /// Whether the fault was reported to the caller as an error.
    pub fn is_noisy(self) -> bool {
        matches!(self, FaultKind::Error | FaultKind::TornWrite)
    }
}

/// One fault the file system injected, for the test to compare with what the engine reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectedFault {
    /// The primitive that was hit.
    pub op: FsOp,
    /// The path it concerned.
    pub path: PathBuf,
    /// What the fault did.
    pub kind: FaultKind,
}

/// Which faults to inject, decided per primitive by a generator seeded with `seed`.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    /// The seed of the decisions.
    pub seed: u64,
    /// Probability (0 to 1) that an eligible primitive fails noisily (half of the noisy faults of
    /// appends are torn writes).
    pub noisy: f64,
    /// Probability (0 to 1) that an eligible append silently writes a prefix or junk.
    pub silent_write: f64,
    /// The eligible primitives; empty means all.
    pub ops: Vec<FsOp>,
    /// Only primitives on paths under this directory are eligible; `None` means all paths.
    pub under: Option<PathBuf>,
}

impl FaultPlan {
    /// Noisy faults with probability `p` on every primitive.
    pub fn noisy(seed: u64, p: f64) -> FaultPlan {
        FaultPlan {
            seed,
            noisy: p,
            silent_write: 0.0,
            ops: Vec::new(),
            under: None,
        }
    }

    /// Silent write faults (short or junk appends) with probability `p`.
    pub fn silent(seed: u64, p: f64) -> FaultPlan {
        FaultPlan {
            seed,
            noisy: 0.0,
            silent_write: p,
            ops: Vec::new(),
            under: None,
        }
    }

    fn applies(&self, op: FsOp, path: &Path) -> bool {
        (self.ops.is_empty() || self.ops.contains(&op))
            && self.under.as_ref().is_none_or(|dir| path.starts_with(dir))
    }
}

/// What [`MemFs::recover`] did to the unsynced state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Directories whose unsynced entries were lost.
    pub dirs_reverted: usize,
    /// Files whose unsynced tail was dropped, shortened or replaced by junk.
    pub files_torn: usize,
}

/// SplitMix64: a small, well-mixed generator; the simulation (and the tests built on it) need
/// reproducibility, not statistical quality.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64) < p * (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[derive(Debug, Default)]
struct Contents {
    data: Vec<u8>,
    /// Bytes of `data` that are durable.
    synced: usize,
    /// An fsync of this file failed: as on Linux, the dirty data may have been dropped from the
    /// write-back queue, so later fsyncs report success without making it durable.
    sync_lost: bool,
}

impl Contents {
    /// What an fsync that succeeds does.
    fn sync(&mut self) {
        if !self.sync_lost {
            self.synced = self.data.len();
        }
    }
}

type Inode = Arc<RwLock<Contents>>;

fn read_contents(inode: &Inode) -> std::sync::RwLockReadGuard<'_, Contents> {
    inode.read().unwrap_or_else(|p| p.into_inner())
}

fn write_contents(inode: &Inode) -> std::sync::RwLockWriteGuard<'_, Contents> {
    inode.write().unwrap_or_else(|p| p.into_inner())
}

type DirId = u64;

#[derive(Clone, Debug)]
enum Node {
    File(Inode),
    Dir(DirId),
}

#[derive(Debug, Default)]
struct Dir {
    entries: BTreeMap<String, Node>,
    durable: BTreeMap<String, Node>,
}

const ROOT: DirId = 0;

/// How an append proceeds, as the fault plan decided.
enum WriteMode {
    Whole,
    /// Write this many bytes, then fail.
    Torn(usize),
    /// Write this many bytes, report success.
    Short(usize),
    Junk,
}

#[derive(Debug)]
struct State {
    dirs: HashMap<DirId, Dir>,
    next_dir: DirId,
    locks: BTreeSet<PathBuf>,
    plan: Option<(FaultPlan, SplitMix64)>,
    fail_after: Option<u64>,
    crash_after: Option<u64>,
    crashed: bool,
    ops: u64,
    injected: Vec<InjectedFault>,
    /// Bytes appended to files, by file name extension (`""` for none).
    appended: HashMap<String, u64>,
    /// Bytes read from files, by file name extension (`""` for none).
    read: HashMap<String, u64>,
}

impl Default for State {
    fn default() -> State {
        let mut dirs = HashMap::new();
        dirs.insert(ROOT, Dir::default());
        State {
            dirs,
            next_dir: ROOT + 1,
            locks: BTreeSet::new(),
            plan: None,
            fail_after: None,
            crash_after: None,
            crashed: false,
            ops: 0,
            injected: Vec::new(),
            appended: HashMap::new(),
            read: HashMap::new(),
        }
    }
}

fn io_error(op: &'static str, path: &Path, kind: std::io::ErrorKind) -> Error {
    Error::io(op, path, kind.into())
}

fn op_name(op: FsOp) -> &'static str {
    match op {
        FsOp::CreateDir => "create_dir_all",
        FsOp::ListDir => "read_dir",
        FsOp::Stat => "stat",
        FsOp::RemoveFile => "remove_file",
        FsOp::RemoveDir => "remove_dir_all",
        FsOp::Rename => "rename",
        FsOp::HardLink => "hard_link",
        FsOp::Truncate => "truncate",
        FsOp::SyncDir => "fsync_dir",
        FsOp::SyncFile => "fsync",
        FsOp::Create => "create",
        FsOp::Open => "open",
        FsOp::Read => "read",
        FsOp::Append => "write",
        FsOp::Lock => "lock",
    }
}

/// The names along `path` (absolute or relative to the root); `.` is skipped, `..` refused.
fn names(path: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => out.push(name.to_string_lossy().into_owned()),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(io_error("resolve", path, std::io::ErrorKind::InvalidInput))
            }
        }
    }
    Ok(out)
}

impl State {
    /// Counts a primitive and asks the power switch and the fault plan about it.
    fn begin(&mut self, op: FsOp, path: &Path, len: usize) -> Result<WriteMode> {
        self.ops += 1;
        let power_lost = || Error::io(op_name(op), path, std::io::Error::other("power lost"));
        if self.crashed {
            return Err(power_lost());
        }
        if let Some(n) = self.crash_after.as_mut() {
            if *n == 0 {
                self.crashed = true;
                self.crash_after = None;
                return Err(power_lost());
            }
            *n -= 1;
        }
        let mut fault = None;
        if let Some(n) = self.fail_after.as_mut() {
            if *n == 0 {
                self.fail_after = None;
                fault = Some(FaultKind::Error);
            } else {
                *n -= 1;
            }
        }
        if fault.is_none() {
            if let Some((plan, rng)) = self.plan.as_mut() {
                if plan.applies(op, path) {
                    if rng.chance(plan.noisy) {
                        fault = Some(if op == FsOp::Append && len > 0 && rng.chance(0.5) {
                            FaultKind::TornWrite
                        } else {
                            FaultKind::Error
                        });
                    } else if op == FsOp::Append && len > 0 && rng.chance(plan.silent_write) {
                        fault = Some(if rng.chance(0.5) {
                            FaultKind::ShortWrite
                        } else {
                            FaultKind::JunkWrite
                        });
                    }
                }
            }
        }
        let Some(kind) = fault else {
            return Ok(WriteMode::Whole);
        };
        self.injected.push(InjectedFault {
            op,
            path: path.to_path_buf(),
            kind,
        });
        let prefix = |rng: &mut SplitMix64| rng.below(len.max(1) as u64) as usize;
        let rng = &mut self
            .plan
            .get_or_insert_with(|| (FaultPlan::noisy(0, 0.0), SplitMix64(0)))
            .1;
        match kind {
            FaultKind::Error => Err(Error::io(
                op_name(op),
                path,
                std::io::Error::other("injected fault"),
            )),
            FaultKind::TornWrite => Ok(WriteMode::Torn(prefix(rng))),
            FaultKind::ShortWrite => Ok(WriteMode::Short(prefix(rng))),
            FaultKind::JunkWrite => Ok(WriteMode::Junk),
        }
    }

    fn dir(&self, id: DirId) -> &Dir {
        &self.dirs[&id]
    }

    fn dir_mut(&mut self, id: DirId) -> &mut Dir {
        self.dirs
            .get_mut(&id)
            .expect("directory ids in entries are live")
    }

    /// The node at `path`, if any.
    fn node(&self, path: &Path) -> Result<Option<Node>> {
        let mut node = Node::Dir(ROOT);
        for name in names(path)? {
            let Node::Dir(id) = node else {
                return Ok(None);
            };
            match self.dir(id).entries.get(&name) {
                Some(next) => node = next.clone(),
                None => return Ok(None),
            }
        }
        Ok(Some(node))
    }

    fn dir_at(&self, op: &'static str, path: &Path) -> Result<DirId> {
        match self.node(path)? {
            Some(Node::Dir(id)) => Ok(id),
            _ => Err(io_error(op, path, std::io::ErrorKind::NotFound)),
        }
    }

    /// The directory holding `path` and the last name of `path`.
    fn parent(&self, op: &'static str, path: &Path) -> Result<(DirId, String)> {
        let mut all = names(path)?;
        let Some(name) = all.pop() else {
            return Err(io_error(op, path, std::io::ErrorKind::InvalidInput));
        };
        let parent: PathBuf = all.iter().collect();
        let id = match self.node(&Path::new("/").join(parent))? {
            Some(Node::Dir(id)) => id,
            _ => return Err(io_error(op, path, std::io::ErrorKind::NotFound)),
        };
        Ok((id, name))
    }

    fn new_dir(&mut self) -> DirId {
        let id = self.next_dir;
        self.next_dir += 1;
        self.dirs.insert(id, Dir::default());
        id
    }

    /// Drops directories no longer reachable from the root, now or after a power loss.
    fn collect_dirs(&mut self) {
        let mut reachable = BTreeSet::from([ROOT]);
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            let dir = self.dir(id);
            for node in dir.entries.values().chain(dir.durable.values()) {
                if let Node::Dir(child) = node {
                    if reachable.insert(*child) {
                        stack.push(*child);
                    }
                }
            }
        }
        self.dirs.retain(|id, _| reachable.contains(id));
    }

    /// Every file reachable through current entries, with its path.
    fn files(&self) -> Vec<(PathBuf, Inode)> {
        let mut out = Vec::new();
        let mut stack = vec![(PathBuf::from("/"), ROOT)];
        while let Some((path, id)) = stack.pop() {
            for (name, node) in &self.dir(id).entries {
                match node {
                    Node::File(inode) => out.push((path.join(name), inode.clone())),
                    Node::Dir(child) => stack.push((path.join(name), *child)),
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// The simulated file system (see the module doc). Clones share the same state.
#[derive(Debug, Default, Clone)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
}

impl MemFs {
    /// An empty simulated file system (only the root directory, which is durable), without
    /// faults.
    pub fn new() -> MemFs {
        MemFs::default()
    }

    /// A simulated file system that injects faults from `plan`.
    pub fn with_faults(plan: FaultPlan) -> MemFs {
        let fs = MemFs::new();
        fs.set_fault_plan(Some(plan));
        fs
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked mid-operation; the maps stay valid.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the fault plan (its generator restarts from its seed); `None` stops injecting.
    pub fn set_fault_plan(&self, plan: Option<FaultPlan>) {
        self.lock_state().plan = plan.map(|plan| {
            let rng = SplitMix64(plan.seed);
            (plan, rng)
        });
    }

    /// Makes the primitive after the next `n` ones fail with a noisy fault (once).
    pub fn fail_after(&self, n: u64) {
        self.lock_state().fail_after = Some(n);
    }

    /// Cuts the power after the next `n` primitives: that one and every later one fail until
    /// [`MemFs::recover`].
    pub fn crash_after(&self, n: u64) {
        self.lock_state().crash_after = Some(n);
    }

    /// Cuts the power now: every primitive fails until [`MemFs::recover`].
    pub fn cut_power(&self) {
        self.lock_state().crashed = true;
    }

    /// Whether the power is off.
    pub fn is_crashed(&self) -> bool {
        self.lock_state().crashed
    }

    /// Bytes appended so far to files whose name ends in `.{extension}` (`""`: files without an
    /// extension), including bytes of torn and short writes.
    pub fn bytes_appended(&self, extension: &str) -> u64 {
        self.lock_state()
            .appended
            .get(extension)
            .copied()
            .unwrap_or(0)
    }

    /// Bytes read so far (successful reads) from files whose name ends in `.{extension}`.
    pub fn bytes_read(&self, extension: &str) -> u64 {
        self.lock_state().read.get(extension).copied().unwrap_or(0)
    }

    /// Primitives issued so far (including failed ones).
    pub fn op_count(&self) -> u64 {
        self.lock_state().ops
    }

    /// The faults injected since the last call, oldest first.
    pub fn take_injected(&self) -> Vec<InjectedFault> {
        std::mem::take(&mut self.lock_state().injected)
    }

    /// Simulates a power loss and reboot: unsynced directory entries and file tails are lost,
    /// kept, or torn, as decided by `seed` (see the module doc). Afterwards everything is durable,
    /// no lock is held, no fault is planned and the power is on. Handles opened before must not
    /// be used again.
    pub fn recover(&self, seed: u64) -> CrashReport {
        let mut state = self.lock_state();
        let mut rng = SplitMix64(seed ^ 0x5EED_C4A5);
        let mut report = CrashReport::default();
        let mut ids: Vec<DirId> = state.dirs.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let dir = state.dir_mut(id);
            if !entries_equal(&dir.entries, &dir.durable) && rng.chance(0.5) {
                dir.entries = dir.durable.clone();
                report.dirs_reverted += 1;
            }
        }
        for (_, inode) in state.files() {
            let mut contents = write_contents(&inode);
            let synced = contents.synced.min(contents.data.len());
            let tail = contents.data.len() - synced;
            if tail > 0 {
                match rng.below(4) {
                    0 => contents.data.truncate(synced),
                    1 => {}
                    2 => contents
                        .data
                        .truncate(synced + rng.below(tail as u64) as usize),
                    _ => {
                        let keep = synced + 1 + rng.below(tail as u64) as usize;
                        contents.data.truncate(keep);
                        for byte in &mut contents.data[synced..keep] {
                            *byte = rng.next_u64() as u8;
                        }
                    }
                }
                report.files_torn += 1;
            }
            contents.synced = contents.data.len();
            contents.sync_lost = false;
        }
        for dir in state.dirs.values_mut() {
            dir.durable = dir.entries.clone();
        }
        state.collect_dirs();
        state.locks.clear();
        state.plan = None;
        state.fail_after = None;
        state.crash_after = None;
        state.crashed = false;
        report
    }

    /// The current contents of a file (for tests that corrupt or inspect files).
    pub fn file_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        match self.lock_state().node(path) {
            Ok(Some(Node::File(inode))) => Some(read_contents(&inode).data.clone()),
            _ => None,
        }
    }

    /// Replaces the contents of a file, durably (for tests that corrupt files).
    pub fn set_file_bytes(&self, path: &Path, bytes: Vec<u8>) -> bool {
        match self.lock_state().node(path) {
            Ok(Some(Node::File(inode))) => {
                let mut contents = write_contents(&inode);
                contents.synced = bytes.len();
                contents.sync_lost = false;
                contents.data = bytes;
                true
            }
            _ => false,
        }
    }

    /// Every file path, sorted.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.lock_state()
            .files()
            .into_iter()
            .map(|(path, _)| path)
            .collect()
    }
}

fn entries_equal(a: &BTreeMap<String, Node>, b: &BTreeMap<String, Node>) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((na, a), (nb, b))| {
            na == nb
                && match (a, b) {
                    (Node::File(a), Node::File(b)) => Arc::ptr_eq(a, b),
                    (Node::Dir(a), Node::Dir(b)) => a == b,
                    _ => false,
                }
        })
}

#[derive(Debug)]
struct MemWritable {
    state: Arc<Mutex<State>>,
    inode: Inode,
    path: PathBuf,
    /// Where the next append writes: the end for a created file, over the old bytes of a
    /// reused one.
    pos: usize,
}

#[derive(Debug)]
struct MemReadable {
    state: Arc<Mutex<State>>,
    inode: Inode,
    path: PathBuf,
    direct: bool,
}

#[derive(Debug)]
struct MemLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.locks.remove(&self.path);
    }
}

impl FileLock for MemLock {}

fn begin(state: &Mutex<State>, op: FsOp, path: &Path, len: usize) -> Result<WriteMode> {
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .begin(op, path, len)
}

impl FileSystem for MemFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut state = self.lock_state();
        state.begin(FsOp::CreateDir, path, 0)?;
        let mut id = ROOT;
        for name in names(path)? {
            id = match state.dir(id).entries.get(&name) {
                Some(Node::Dir(child)) => *child,
                Some(Node::File(_)) => {
                    return Err(io_error(
                        "create_dir_all",
                        path,
                        std::io::ErrorKind::AlreadyExists,
                    ))
                }
                None => {
                    let child = state.new_dir();
                    state.dir_mut(id).entries.insert(name, Node::Dir(child));
                    child
                }
            };
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let mut state = self.lock_state();
        state.begin(FsOp::ListDir, path, 0)?;
        let id = state.dir_at("read_dir", path)?;
        Ok(state.dir(id).entries.keys().cloned().collect())
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        let mut state = self.lock_state();
        state.begin(FsOp::Stat, path, 0)?;
        Ok(state.node(path)?.is_some())
    }

    fn is_dir(&self, path: &Path) -> Result<bool> {
        let mut state = self.lock_state();
        state.begin(FsOp::Stat, path, 0)?;
        Ok(matches!(state.node(path)?, Some(Node::Dir(_))))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let mut state = self.lock_state();
        state.begin(FsOp::RemoveFile, path, 0)?;
        let (id, name) = state.parent("remove_file", path)?;
        let entries = &mut state.dir_mut(id).entries;
        match entries.get(&name) {
            Some(Node::File(_)) => {
                entries.remove(&name);
                Ok(())
            }
            Some(Node::Dir(_)) => Err(io_error(
                "remove_file",
                path,
                std::io::ErrorKind::IsADirectory,
            )),
            None => Err(io_error("remove_file", path, std::io::ErrorKind::NotFound)),
        }
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        let mut state = self.lock_state();
        let (id, name) = state.parent("remove_dir_all", path)?;
        let Some(Node::Dir(target)) = state.dir(id).entries.get(&name).cloned() else {
            state.begin(FsOp::RemoveDir, path, 0)?;
            return Err(io_error(
                "remove_dir_all",
                path,
                std::io::ErrorKind::NotFound,
            ));
        };
        // One entry at a time, each a primitive, as the real call does.
        let result = state.empty_dir(target, path).and_then(|()| {
            state.begin(FsOp::RemoveDir, path, 0)?;
            state.dir_mut(id).entries.remove(&name);
            Ok(())
        });
        state.collect_dirs();
        result
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut state = self.lock_state();
        state.begin(FsOp::Rename, from, 0)?;
        let (from_dir, from_name) = state.parent("rename", from)?;
        let (to_dir, to_name) = state.parent("rename", to)?;
        let Some(node) = state.dir(from_dir).entries.get(&from_name).cloned() else {
            return Err(io_error("rename", from, std::io::ErrorKind::NotFound));
        };
        match (&node, state.dir(to_dir).entries.get(&to_name)) {
            (_, Some(Node::Dir(_))) | (Node::Dir(_), Some(Node::File(_))) => {
                return Err(io_error("rename", to, std::io::ErrorKind::AlreadyExists));
            }
            _ => {}
        }
        if let Node::Dir(moved) = node {
            // A directory may not move into itself.
            let mut id = to_dir;
            let parents = state.clone_parent_map();
            loop {
                if id == moved {
                    return Err(io_error("rename", to, std::io::ErrorKind::InvalidInput));
                }
                match parents.get(&id) {
                    Some(parent) => id = *parent,
                    None => break,
                }
            }
        }
        state.dir_mut(from_dir).entries.remove(&from_name);
        state.dir_mut(to_dir).entries.insert(to_name, node);
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> Result<()> {
        let mut state = self.lock_state();
        state.begin(FsOp::HardLink, from, 0)?;
        let inode = match state.node(from)? {
            Some(Node::File(inode)) => inode,
            _ => return Err(io_error("hard_link", from, std::io::ErrorKind::NotFound)),
        };
        let (id, name) = state.parent("hard_link", to)?;
        let entries = &mut state.dir_mut(id).entries;
        if entries.contains_key(&name) {
            return Err(io_error("hard_link", to, std::io::ErrorKind::AlreadyExists));
        }
        entries.insert(name, Node::File(inode));
        Ok(())
    }

    fn file_space(&self, path: &Path) -> Result<FileSpace> {
        let mut state = self.lock_state();
        state.begin(FsOp::Stat, path, 0)?;
        match state.node(path)? {
            Some(Node::File(inode)) => {
                let links = state
                    .dirs
                    .values()
                    .flat_map(|dir| dir.entries.values())
                    .filter(|node| matches!(node, Node::File(other) if Arc::ptr_eq(other, &inode)))
                    .count() as u64;
                let len = read_contents(&inode).data.len() as u64;
                Ok(FileSpace { len, links })
            }
            Some(Node::Dir(_)) => Err(io_error("stat", path, std::io::ErrorKind::IsADirectory)),
            None => Err(io_error("stat", path, std::io::ErrorKind::NotFound)),
        }
    }

    fn truncate(&self, path: &Path, len: u64) -> Result<()> {
        let mut state = self.lock_state();
        state.begin(FsOp::Truncate, path, 0)?;
        match state.node(path)? {
            Some(Node::File(inode)) => {
                let mut contents = write_contents(&inode);
                if len > contents.data.len() as u64 {
                    return Err(io_error("truncate", path, std::io::ErrorKind::InvalidInput));
                }
                contents.data.truncate(len as usize);
                contents.synced = contents.synced.min(len as usize);
                Ok(())
            }
            Some(Node::Dir(_)) => Err(io_error("truncate", path, std::io::ErrorKind::IsADirectory)),
            None => Err(io_error("truncate", path, std::io::ErrorKind::NotFound)),
        }
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let mut state = self.lock_state();
        state.begin(FsOp::SyncDir, path, 0)?;
        let id = state.dir_at("fsync_dir", path)?;
        let dir = state.dir_mut(id);
        dir.durable = dir.entries.clone();
        state.collect_dirs();
        Ok(())
    }

    fn sync_file(&self, path: &Path) -> Result<()> {
        let mut state = self.lock_state();
        let node = state.node(path)?;
        if let Err(e) = state.begin(FsOp::SyncFile, path, 0) {
            if let Some(Node::File(inode)) = node {
                write_contents(&inode).sync_lost = true;
            }
            return Err(e);
        }
        match node {
            Some(Node::File(inode)) => {
                write_contents(&inode).sync();
                Ok(())
            }
            _ => Err(io_error("fsync", path, std::io::ErrorKind::NotFound)),
        }
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut state = self.lock_state();
        state.begin(FsOp::Create, path, 0)?;
        let (id, name) = state.parent("create", path)?;
        let entries = &mut state.dir_mut(id).entries;
        if entries.contains_key(&name) {
            return Err(io_error("create", path, std::io::ErrorKind::AlreadyExists));
        }
        let inode = Inode::default();
        entries.insert(name, Node::File(inode.clone()));
        Ok(Box::new(MemWritable {
            state: self.state.clone(),
            inode,
            path: path.to_path_buf(),
            pos: 0,
        }))
    }

    fn reuse(&self, old: &Path, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut state = self.lock_state();
        state.begin(FsOp::Open, old, 0)?;
        let inode = match state.node(old)? {
            Some(Node::File(inode)) => inode,
            _ => return Err(io_error("open", old, std::io::ErrorKind::NotFound)),
        };
        state.begin(FsOp::Rename, old, 0)?;
        let (old_dir, old_name) = state.parent("rename", old)?;
        let (id, name) = state.parent("rename", path)?;
        if state.dir(id).entries.contains_key(&name) {
            return Err(io_error("reuse", path, std::io::ErrorKind::AlreadyExists));
        }
        state.dir_mut(old_dir).entries.remove(&old_name);
        state
            .dir_mut(id)
            .entries
            .insert(name, Node::File(inode.clone()));
        // Written over from here: nothing of it counts as durable until it is synced again.
        write_contents(&inode).synced = 0;
        Ok(Box::new(MemWritable {
            state: self.state.clone(),
            inode,
            path: path.to_path_buf(),
            pos: 0,
        }))
    }

    fn open(&self, path: &Path, options: ReadOptions) -> Result<Arc<dyn ReadableFile>> {
        let mut state = self.lock_state();
        state.begin(FsOp::Open, path, 0)?;
        match state.node(path)? {
            Some(Node::File(inode)) => Ok(Arc::new(MemReadable {
                state: self.state.clone(),
                inode,
                path: path.to_path_buf(),
                direct: options.direct,
            })),
            Some(Node::Dir(_)) => Err(io_error("open", path, std::io::ErrorKind::IsADirectory)),
            None => Err(io_error("open", path, std::io::ErrorKind::NotFound)),
        }
    }

    fn try_lock(&self, path: &Path) -> Result<Option<Box<dyn FileLock>>> {
        let mut state = self.lock_state();
        state.begin(FsOp::Lock, path, 0)?;
        let (id, name) = state.parent("open_lock", path)?;
        match state.dir(id).entries.get(&name) {
            Some(Node::File(_)) => {}
            Some(Node::Dir(_)) => {
                return Err(io_error(
                    "open_lock",
                    path,
                    std::io::ErrorKind::IsADirectory,
                ))
            }
            None => {
                let inode = Inode::default();
                state.dir_mut(id).entries.insert(name, Node::File(inode));
            }
        }
        if !state.locks.insert(path.to_path_buf()) {
            return Ok(None);
        }
        Ok(Some(Box::new(MemLock {
            state: self.state.clone(),
            path: path.to_path_buf(),
        })))
    }
}

impl State {
    /// Removes everything below directory `id` (at `path`), files first, depth first.
    fn empty_dir(&mut self, id: DirId, path: &Path) -> Result<()> {
        let entries: Vec<(String, Node)> = self.dir(id).entries.clone().into_iter().collect();
        for (name, node) in entries {
            let child = path.join(&name);
            match node {
                Node::File(_) => self.begin(FsOp::RemoveFile, &child, 0)?,
                Node::Dir(sub) => {
                    self.empty_dir(sub, &child)?;
                    self.begin(FsOp::RemoveDir, &child, 0)?
                }
            };
            self.dir_mut(id).entries.remove(&name);
        }
        Ok(())
    }

    /// Each directory's parent, through current entries.
    fn clone_parent_map(&self) -> HashMap<DirId, DirId> {
        let mut parents = HashMap::new();
        for (id, dir) in &self.dirs {
            for node in dir.entries.values() {
                if let Node::Dir(child) = node {
                    parents.insert(*child, *id);
                }
            }
        }
        parents
    }
}

impl WritableFile for MemWritable {
    fn append(&mut self, bytes: &[u8]) -> Result<()> {
        let mode = begin(&self.state, FsOp::Append, &self.path, bytes.len())?;
        {
            let extension = self.path.extension().and_then(|e| e.to_str()).unwrap_or("");
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            *state.appended.entry(extension.to_string()).or_insert(0) += bytes.len() as u64;
        }
        let mut contents = write_contents(&self.inode);
        let pos = &mut self.pos;
        match mode {
            WriteMode::Whole => put(&mut contents.data, pos, bytes),
            WriteMode::Short(n) => put(&mut contents.data, pos, &bytes[..n.min(bytes.len())]),
            WriteMode::Junk => {
                let junk: Vec<u8> = bytes
                    .iter()
                    .enumerate()
                    .map(|(i, b)| !b ^ (i as u8))
                    .collect();
                put(&mut contents.data, pos, &junk)
            }
            WriteMode::Torn(n) => {
                put(&mut contents.data, pos, &bytes[..n.min(bytes.len())]);
                return Err(Error::io(
                    "write",
                    &self.path,
                    std::io::Error::other("injected fault (torn write)"),
                ));
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        if let Err(e) = begin(&self.state, FsOp::SyncFile, &self.path, 0) {
            write_contents(&self.inode).sync_lost = true;
            return Err(e);
        }
        write_contents(&self.inode).sync();
        Ok(())
    }

    fn end_at_written(&mut self) -> Result<()> {
        begin(&self.state, FsOp::Truncate, &self.path, 0)?;
        let mut contents = write_contents(&self.inode);
        contents.data.truncate(self.pos);
        contents.synced = contents.synced.min(self.pos);
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes `bytes` into `data` at `*pos` (over what is there, then past its end), and moves
/// `*pos` past them.
fn put(data: &mut Vec<u8>, pos: &mut usize, bytes: &[u8]) {
    if *pos > data.len() {
        // Cut under the writer by another name: the gap reads as zeros, as on Linux.
        data.resize(*pos, 0);
    }
    let over = data.len().saturating_sub(*pos).min(bytes.len());
    data[*pos..*pos + over].copy_from_slice(&bytes[..over]);
    data.extend_from_slice(&bytes[over..]);
    *pos += bytes.len();
}

impl ReadableFile for MemReadable {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        begin(&self.state, FsOp::Read, &self.path, buf.len())?;
        // As Linux does for `O_DIRECT`: buffer, offset and length must be block aligned.
        let align = super::ALIGN_BYTES;
        if self.direct
            && !(offset.is_multiple_of(align as u64)
                && buf.len().is_multiple_of(align)
                && (buf.as_ptr() as usize).is_multiple_of(align))
        {
            return Err(io_error(
                "read",
                &self.path,
                std::io::ErrorKind::InvalidInput,
            ));
        }
        let contents = read_contents(&self.inode);
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        match start.checked_add(buf.len()) {
            Some(end) if end <= contents.data.len() => {
                buf.copy_from_slice(&contents.data[start..end]);
                drop(contents);
                let extension = self.path.extension().and_then(|e| e.to_str()).unwrap_or("");
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                *state.read.entry(extension.to_string()).or_insert(0) += buf.len() as u64;
                Ok(())
            }
            _ => Err(io_error(
                "read",
                &self.path,
                std::io::ErrorKind::UnexpectedEof,
            )),
        }
    }

    fn len_bytes(&self) -> Result<u64> {
        begin(&self.state, FsOp::Stat, &self.path, 0)?;
        Ok(read_contents(&self.inode).data.len() as u64)
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn is_direct(&self) -> bool {
        self.direct
    }

    #[cfg(unix)]
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{read_all, write_atomic};

    fn write(fs: &MemFs, path: &str, bytes: &[u8], sync: bool) {
        let mut file = fs.create(Path::new(path)).unwrap();
        file.append(bytes).unwrap();
        if sync {
            file.sync().unwrap();
        }
    }

    #[test]
    fn only_synced_state_survives_a_crash_for_sure() {
        for seed in 0..200 {
            let fs = MemFs::new();
            fs.create_dir_all(Path::new("/d")).unwrap();
            fs.sync_dir(Path::new("/")).unwrap();
            write(&fs, "/d/durable", b"kept", true);
            fs.sync_dir(Path::new("/d")).unwrap();
            write(&fs, "/d/unsynced-file", b"maybe", false);
            fs.create_dir_all(Path::new("/e")).unwrap();
            write_atomic(&fs, Path::new("/d/atomic"), b"whole").unwrap();
            fs.recover(seed);
            assert_eq!(fs.file_bytes(Path::new("/d/durable")).unwrap(), b"kept");
            assert_eq!(fs.file_bytes(Path::new("/d/atomic")).unwrap(), b"whole");
            if let Some(bytes) = fs.file_bytes(Path::new("/d/unsynced-file")) {
                assert!(bytes.len() <= 5);
            }
            // After recovery everything is durable.
            let before = fs.file_paths();
            fs.recover(seed + 1);
            assert_eq!(fs.file_paths(), before);
        }
    }

    #[test]
    fn crashes_lose_unsynced_entries_sometimes_and_tear_tails() {
        let (mut lost, mut torn) = (0, 0);
        for seed in 0..100 {
            let fs = MemFs::new();
            write(&fs, "/a", b"0123456789", true);
            fs.recover(seed);
            if fs.file_bytes(Path::new("/a")).is_none() {
                lost += 1;
            }
            let fs = MemFs::new();
            let mut file = fs.create(Path::new("/b")).unwrap();
            file.append(b"01234").unwrap();
            file.sync().unwrap();
            fs.sync_dir(Path::new("/")).unwrap();
            file.append(b"56789").unwrap();
            drop(file);
            fs.recover(seed);
            let b = fs.file_bytes(Path::new("/b")).unwrap();
            assert_eq!(&b[..5], b"01234");
            if b != b"0123456789" {
                torn += 1;
            }
        }
        assert!(lost > 10 && lost < 90, "{lost}");
        assert!(torn > 10, "{torn}");
    }

    #[test]
    fn renamed_directories_keep_their_contents_and_removed_open_files_stay_readable() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("/s/tmp")).unwrap();
        write(&fs, "/s/tmp/f", b"abc", true);
        let open = fs
            .open(Path::new("/s/tmp/f"), ReadOptions::default())
            .unwrap();
        fs.rename(Path::new("/s/tmp"), Path::new("/s/snap"))
            .unwrap();
        assert_eq!(read_all(&fs, Path::new("/s/snap/f")).unwrap(), b"abc");
        assert!(fs.rename(Path::new("/s"), Path::new("/s/snap/x")).is_err());
        fs.remove_dir_all(Path::new("/s/snap")).unwrap();
        let mut buf = [0u8; 3];
        open.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"abc");
        assert!(!fs.exists(Path::new("/s/snap")).unwrap());
    }

    #[test]
    fn fault_plans_are_reproducible_and_logged() {
        let run = |seed| {
            let fs = MemFs::with_faults(FaultPlan::noisy(seed, 0.3));
            let mut outcomes = Vec::new();
            for i in 0..50 {
                outcomes.push(fs.create_dir_all(&PathBuf::from(format!("/d{i}"))).is_ok());
            }
            let injected = fs.take_injected();
            assert_eq!(
                injected.len(),
                outcomes.iter().filter(|ok| !**ok).count(),
                "every failure is logged"
            );
            assert!(fs.take_injected().is_empty());
            outcomes
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn silent_write_faults_report_success_but_change_the_bytes() {
        let fs = MemFs::with_faults(FaultPlan::silent(3, 1.0));
        let mut file = fs.create(Path::new("/f")).unwrap();
        file.append(b"0123456789").unwrap();
        let injected = fs.take_injected();
        assert_eq!(injected.len(), 1);
        assert!(!injected[0].kind.is_noisy());
        assert_ne!(fs.file_bytes(Path::new("/f")).unwrap(), b"0123456789");
    }

    #[test]
    fn power_loss_fails_every_later_primitive_until_recovery() {
        let fs = MemFs::new();
        fs.crash_after(2);
        fs.create_dir_all(Path::new("/a")).unwrap();
        fs.create_dir_all(Path::new("/b")).unwrap();
        assert!(fs.create_dir_all(Path::new("/c")).is_err());
        assert!(fs.is_crashed());
        assert!(fs.exists(Path::new("/a")).is_err());
        fs.recover(1);
        assert!(!fs.exists(Path::new("/c")).unwrap());
        let lock = fs.try_lock(Path::new("/lock")).unwrap();
        assert!(lock.is_some());
        fs.crash_after(0);
        let _ = fs.exists(Path::new("/"));
        fs.recover(2);
        assert!(
            fs.try_lock(Path::new("/lock")).unwrap().is_some(),
            "locks do not survive a reboot"
        );
    }
}

//! A snapshot install cut by a crash at each of its steps leaves a node that starts again and
//! catches up. The steps that move directories (creating the staging directory, the two renames
//! of the swap, the parent's sync, removing the replaced ledger, reopening) are cut one at a
//! time by a file system that fails that step and everything after it, as a killed process
//! does nothing more; the node is then stopped and started on the real file system.
//!
//! What this pins: a node's ledger is never newer than its current snapshot file. A ledger
//! swapped in before `current.snap` was replaced, cut there, made openraft purge the restarted
//! node's log beyond its snapshot and panic at every start (found by `cluster_faults`,
//! `docs/cluster-plan.md`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::fs::FileLock;
use cairn::fs::{FileSpace, FileSystem, ReadOptions, ReadableFile, RealFs, WritableFile};
use cairn_raft::openraft::async_runtime::WatchReceiver;
use cairn_raft::{
    ledger_config, DurableLog, LedgerHome, LocalNetwork, Member, Node, NodeId, NodeOptions,
    Response,
};

mod common;
use common::{view, Running};

const TABLE: &str = "accounts";

/// The real file system, which fails the `cut_at`-th step that moves one of `watched`'s
/// directories (counted from 0 once armed), and every mutation after it.
#[derive(Debug)]
struct CutFs {
    watched: Vec<PathBuf>,
    cut_at: usize,
    armed: AtomicBool,
    seen: AtomicUsize,
    dead: AtomicBool,
}

impl CutFs {
    fn new(ledger: &Path, cut_at: usize) -> CutFs {
        let sibling = |suffix: &str| PathBuf::from(format!("{}{suffix}", ledger.display()));
        CutFs {
            watched: vec![
                ledger.to_path_buf(),
                sibling(".incoming"),
                sibling(".old"),
                ledger.parent().unwrap().to_path_buf(),
            ],
            cut_at,
            armed: AtomicBool::new(false),
            seen: AtomicUsize::new(0),
            dead: AtomicBool::new(false),
        }
    }

    /// Fails a step on `path` if it is the one to cut or comes after it.
    fn step(&self, path: &Path) -> cairn::Result<()> {
        if self.armed.load(Ordering::SeqCst)
            && self.watched.iter().any(|w| w == path)
            && self.seen.fetch_add(1, Ordering::SeqCst) == self.cut_at
        {
            self.dead.store(true, Ordering::SeqCst);
        }
        self.alive(path)
    }

    fn alive(&self, path: &Path) -> cairn::Result<()> {
        match self.dead.load(Ordering::SeqCst) {
            false => Ok(()),
            true => Err(cairn::Error::Io {
                op: "a step after the cut",
                path: path.to_path_buf(),
                source: std::io::Error::other("the process was killed here"),
            }),
        }
    }

    /// Counts steps from now on (after the node started).
    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    fn is_cut(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }
}

impl FileSystem for CutFs {
    fn create_dir_all(&self, path: &Path) -> cairn::Result<()> {
        self.step(path)?;
        RealFs.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> cairn::Result<Vec<String>> {
        RealFs.list_dir(path)
    }
    fn exists(&self, path: &Path) -> cairn::Result<bool> {
        RealFs.exists(path)
    }
    fn is_dir(&self, path: &Path) -> cairn::Result<bool> {
        RealFs.is_dir(path)
    }
    fn remove_file(&self, path: &Path) -> cairn::Result<()> {
        self.alive(path)?;
        RealFs.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> cairn::Result<()> {
        self.step(path)?;
        RealFs.remove_dir_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> cairn::Result<()> {
        self.step(from)?;
        RealFs.rename(from, to)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> cairn::Result<()> {
        self.alive(to)?;
        RealFs.hard_link(from, to)
    }
    fn file_space(&self, path: &Path) -> cairn::Result<FileSpace> {
        RealFs.file_space(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> cairn::Result<()> {
        self.alive(path)?;
        RealFs.truncate(path, len)
    }
    fn sync_dir(&self, path: &Path) -> cairn::Result<()> {
        self.step(path)?;
        RealFs.sync_dir(path)
    }
    fn sync_file(&self, path: &Path) -> cairn::Result<()> {
        self.alive(path)?;
        RealFs.sync_file(path)
    }
    fn create(&self, path: &Path) -> cairn::Result<Box<dyn WritableFile>> {
        self.alive(path)?;
        RealFs.create(path)
    }
    fn open(&self, path: &Path, options: ReadOptions) -> cairn::Result<Arc<dyn ReadableFile>> {
        RealFs.open(path, options)
    }
    fn try_lock(&self, path: &Path) -> cairn::Result<Option<Box<dyn FileLock>>> {
        RealFs.try_lock(path)
    }
}

fn home(root: &Path, id: NodeId, fs: Arc<dyn FileSystem>) -> LedgerHome {
    let dir: PathBuf = root.join(id.to_string());
    let mut home = LedgerHome::new(
        dir.join("ledger"),
        dir.join("snapshots"),
        ledger_config([TABLE]).history(1),
    );
    home.fs = fs;
    home
}

async fn start_node(
    network: &LocalNetwork,
    root: &Path,
    id: NodeId,
    fs: Arc<dyn FileSystem>,
) -> Running {
    let log = DurableLog::open(root.join(id.to_string()).join("raft")).unwrap();
    let options = NodeOptions::default().snapshot_every(20).log_kept(5);
    let node = Node::start_with(
        id,
        home(root, id, fs),
        log.clone(),
        network.factory(id),
        options,
    )
    .await
    .unwrap();
    network.add(id, node.raft.clone());
    Running { node, log }
}

/// Stops a node that may have stopped itself on a storage error (a cut install).
async fn kill(network: &LocalNetwork, r: Running) {
    network.remove(r.node.id);
    let _ = r.node.raft.shutdown().await;
    r.node.ledger().close();
    r.log.close();
}

async fn write(nodes: &BTreeMap<NodeId, Running>, k: &str, v: &str) {
    let r = common::write(&view(nodes), common::put(TABLE, k, v)).await;
    assert!(matches!(r, Response::Committed { .. }), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_cut_at_any_step_leaves_a_node_that_starts_and_catches_up() {
    let root = tempfile::tempdir().unwrap();
    let network = LocalNetwork::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(
            id,
            start_node(&network, root.path(), id, Arc::new(RealFs)).await,
        );
    }
    let members: BTreeMap<NodeId, Member> = (1..=3).map(|id| (id, Member::default())).collect();
    nodes[&1].node.raft.initialize(members).await.unwrap();
    let mut written = 0;

    // Each round, a new learner: the voters have purged their logs' start, so it gets a
    // snapshot, and its install is cut at step `cut`. Past the last step, nothing is cut.
    let mut cut = 0;
    loop {
        for _ in 0..60 {
            write(&nodes, &format!("k{written}"), "v").await;
            written += 1;
        }
        common::settle(&view(&nodes)).await;
        let m = nodes[&1].node.raft.metrics().borrow_watched().clone();
        assert!(m.purged.is_some(), "node 1 purged nothing");

        let id = 10 + cut as NodeId;
        let l = common::leader(&view(&nodes)).await;
        // It joins whole first, so that it has a current snapshot (the voters' logs' start is
        // gone); then it leaves, and the others write on past the end of its log.
        let learner = start_node(&network, root.path(), id, Arc::new(RealFs)).await;
        join(&nodes[&l].node, id).await;
        let target = nodes[&l].node.applied_index();
        learner
            .node
            .wait_applied(target, common::WAIT)
            .await
            .unwrap();
        let m = learner.node.raft.metrics().borrow_watched().clone();
        assert!(
            m.snapshot.is_some(),
            "round {cut}: it joined without a snapshot"
        );
        kill(&network, learner).await;
        leave(&nodes[&l].node, id).await;
        for _ in 0..60 {
            write(&nodes, &format!("k{written}"), "w").await;
            written += 1;
        }
        common::settle(&view(&nodes)).await;

        // It comes back, gets a newer snapshot, and its install is cut.
        let ledger_dir = root.path().join(id.to_string()).join("ledger");
        let cutter = Arc::new(CutFs::new(&ledger_dir, cut));
        let learner = start_node(&network, root.path(), id, cutter.clone()).await;
        cutter.arm();
        join(&nodes[&l].node, id).await;
        let deadline = Instant::now() + common::WAIT;
        let target = nodes[&l].node.applied_index();
        let installed = loop {
            if cutter.is_cut() {
                break false;
            }
            if learner.node.applied_index() >= target {
                break true;
            }
            assert!(
                Instant::now() < deadline,
                "round {cut}: neither cut nor caught up"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        kill(&network, learner).await;

        // Started again on the real file system: it comes up and catches up.
        let learner = start_node(&network, root.path(), id, Arc::new(RealFs)).await;
        let target = nodes[&l].node.applied_index();
        learner
            .node
            .wait_applied(target, common::WAIT)
            .await
            .unwrap();
        assert_eq!(
            learner.node.ledger().digest(),
            nodes[&l].node.ledger().digest(),
            "round {cut}"
        );
        kill(&network, learner).await;
        leave(&nodes[&l].node, id).await;
        if installed {
            // Every step has been cut once; the last round went through.
            assert!(cut >= 3, "an install has at least four steps, saw {cut}");
            break;
        }
        cut += 1;
    }
    for (_, r) in std::mem::take(&mut nodes) {
        kill(&network, r).await;
    }
}

/// Adds learner `id` through `leader`, without waiting for it.
async fn join(leader: &Node, id: NodeId) {
    leader
        .raft
        .add_learner(id, Member::default(), false)
        .await
        .unwrap();
}

/// Removes learner `id` through `leader`.
async fn leave(leader: &Node, id: NodeId) {
    let remove = cairn_raft::openraft::ChangeMembers::RemoveNodes([id].into_iter().collect());
    leader.raft.change_membership(remove, false).await.unwrap();
}

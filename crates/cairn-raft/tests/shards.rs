//! Shards as Raft groups in one process: S = 2 and 4 shards of 3 nodes each (in-memory logs,
//! the in-process transport), writes routed by key path through a [`Coordinator`], transfers
//! across shards by two-phase commit.
//!
//! - Concurrent transfers between accounts on different shards, with a shard's leader killed
//!   midway: every node's copy of every shard agrees, the total balance never changes, no key
//!   stays held, and the global root over the shards' tables equals, bit for bit, the root of
//!   one unsharded ledger holding the same balances.
//! - A coordinator lost between the phases: the keys stay held (reads and writes of them are
//!   refused as locked) until a resolver decides the transaction at its primary; lost before
//!   the primary's decision it is aborted everywhere, lost after it it is committed everywhere.
//!   A late `Prepare` after an abort is refused and holds nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_ledger::{Ledger, LedgerBatch};
use cairn_proof::{ShardMap, ShardedRoot};
use cairn_raft::format::PreparedTx;
use cairn_raft::{
    twopc, Command, Consistency, Coordinator, Error, Expectation, LocalNetwork, MemLog, Member,
    Node, NodeId, Outcome, Response, ShardWriter, Write,
};

const TABLE: &str = "accounts";
const WAIT: Duration = Duration::from_secs(20);
const ACCOUNTS: u32 = 24;
const BALANCE: u64 = 100;

/// Shards of three nodes each; a node may be stopped (`None`).
struct Shards {
    groups: Vec<Group>,
    _dir: tempfile::TempDir,
}

struct Group {
    network: LocalNetwork,
    nodes: std::sync::Mutex<BTreeMap<NodeId, Node>>,
}

impl Group {
    fn nodes(&self) -> Vec<Node> {
        self.nodes.lock().unwrap().values().cloned().collect()
    }

    /// The node that leads, once one confirms it with a quorum; `None` after [`WAIT`].
    async fn leader(&self) -> Option<Node> {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            for node in self.nodes() {
                if node.leader().await == Some(node.id)
                    && node.read_barrier(Consistency::Linearizable).await.is_ok()
                {
                    return Some(node);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Stops node `id`: it leaves the network and its Raft shuts down.
    async fn kill(&self, id: NodeId) {
        let node = self.nodes.lock().unwrap().remove(&id).unwrap();
        self.network.remove(id);
        node.raft.shutdown().await.unwrap();
    }
}

async fn start(shards: u32) -> Arc<Shards> {
    let dir = tempfile::tempdir().unwrap();
    let mut groups = Vec::new();
    for s in 0..shards {
        let network = LocalNetwork::new();
        let mut nodes = BTreeMap::new();
        for id in 1..=3 {
            let ledger = Ledger::open(
                dir.path().join(format!("{s}-{id}")),
                cairn_raft::ledger_config([TABLE]),
            )
            .map(Arc::new)
            .unwrap();
            let node = Node::start(id, ledger, MemLog::new(), network.factory(id))
                .await
                .unwrap();
            network.add(id, node.raft.clone());
            nodes.insert(id, node);
        }
        let members: BTreeMap<NodeId, Member> = (1..=3).map(|id| (id, Member::default())).collect();
        nodes[&1].raft.initialize(members).await.unwrap();
        groups.push(Group {
            network,
            nodes: std::sync::Mutex::new(nodes),
        });
    }
    Arc::new(Shards { groups, _dir: dir })
}

/// The in-process [`ShardWriter`]: each call goes to the shard's leader, found again while
/// leadership moves.
#[derive(Clone)]
struct Writer(Arc<Shards>);

impl ShardWriter for Writer {
    async fn propose(&self, shard: u32, command: Command) -> Result<Response, Error> {
        let group = &self.0.groups[shard as usize];
        let deadline = Instant::now() + WAIT;
        loop {
            let leader = group
                .leader()
                .await
                .ok_or(Error::Raft("no leader".into()))?;
            match leader.write(command.clone()).await {
                Err(Error::NotLeader { .. }) if Instant::now() < deadline => {}
                other => return other,
            }
        }
    }

    async fn prepared(&self, shard: u32) -> Result<Vec<(String, PreparedTx)>, Error> {
        let group = &self.0.groups[shard as usize];
        let leader = group
            .leader()
            .await
            .ok_or(Error::Raft("no leader".into()))?;
        let ledger = &leader.ledger();
        let mut out = Vec::new();
        for tx in twopc::prepared(ledger).map_err(|e| Error::Raft(e.to_string()))? {
            if let Some(r) =
                twopc::prepared_record(ledger, &tx).map_err(|e| Error::Raft(e.to_string()))?
            {
                out.push((tx, r));
            }
        }
        Ok(out)
    }
}

fn account(i: u32) -> Vec<u8> {
    format!("account-{i:03}").into_bytes()
}

fn encode(balance: u64) -> Vec<u8> {
    balance.to_be_bytes().to_vec()
}

fn decode(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().unwrap())
}

fn write(key: &[u8], value: Vec<u8>) -> Write {
    Write {
        table: TABLE.into(),
        key: key.to_vec(),
        value: Some(value),
    }
}

/// Reads `key` linearizably from its shard's leader, again while a transaction holds it.
async fn read(shards: &Shards, map: &ShardMap, key: &[u8]) -> Option<Vec<u8>> {
    let group = &shards.groups[map.shard_of(key) as usize];
    let deadline = Instant::now() + WAIT;
    loop {
        let leader = group.leader().await.expect("a leader");
        match leader
            .read(&[(TABLE, &[key.to_vec()])], Consistency::Linearizable)
            .await
        {
            Ok(read) => return read.values[0][0].clone(),
            Err(Error::Locked { .. } | Error::NotLeader { .. } | Error::Raft(_)) => {
                assert!(Instant::now() < deadline, "key stayed unreadable");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Two accounts on different shards.
fn pair(map: &ShardMap, seed: u64) -> (u32, u32) {
    let a = (seed % ACCOUNTS as u64) as u32;
    let mut b = ((seed / 7 + 1) % ACCOUNTS as u64) as u32;
    while map.shard_of(&account(b)) == map.shard_of(&account(a)) {
        b = (b + 1) % ACCOUNTS;
    }
    (a, b)
}

/// Waits until every node of every shard has applied what its leader has; then checks the
/// copies agree, no key is held, and returns the balances.
async fn settle(shards: &Shards, map: &ShardMap) -> BTreeMap<Vec<u8>, u64> {
    let mut balances = BTreeMap::new();
    for (s, group) in shards.groups.iter().enumerate() {
        let leader = group.leader().await.expect("a leader");
        let applied = leader.applied_index();
        let mut roots = Vec::new();
        for node in group.nodes() {
            node.wait_applied(applied, WAIT).await.unwrap();
            assert!(
                node.locks().is_empty(),
                "shard {s} node {} holds keys",
                node.id
            );
            roots.push(
                node.ledger()
                    .table_witness(TABLE, map.bits().max(1))
                    .unwrap()
                    .root,
            );
        }
        assert!(
            roots.windows(2).all(|w| w[0] == w[1]),
            "shard {s}'s copies differ"
        );
        assert!(twopc::prepared(&leader.ledger()).unwrap().is_empty());
        for i in 0..ACCOUNTS {
            let key = account(i);
            if map.shard_of(&key) as usize == s {
                if let Some(v) = leader.ledger().get(TABLE, &key).unwrap() {
                    balances.insert(key, decode(&v));
                }
            }
        }
    }
    balances
}

/// The global root of the table over the shards' leaders, and the root of one unsharded
/// ledger holding `balances`.
async fn roots(
    shards: &Shards,
    map: &ShardMap,
    balances: &BTreeMap<Vec<u8>, u64>,
) -> ([u8; 32], [u8; 32]) {
    let levels = map.bits().max(1);
    let mut subtrees = Vec::new();
    for (s, group) in shards.groups.iter().enumerate() {
        let leader = group.leader().await.unwrap();
        let w = leader.ledger().table_witness(TABLE, levels).unwrap();
        subtrees.push(map.subtree(s as u32, &w.root, &w.top).unwrap());
    }
    let global = ShardedRoot::new(*map, subtrees).unwrap().root();
    let dir = tempfile::tempdir().unwrap();
    let one = Ledger::open(dir.path(), cairn_raft::ledger_config([TABLE])).unwrap();
    let mut batch = LedgerBatch::new();
    for (k, v) in balances {
        batch.insert(TABLE, k, encode(*v));
    }
    one.write(&batch).unwrap();
    let whole = one.table_witness(TABLE, levels).unwrap().root;
    (global.hash, whole.hash)
}

async fn transfers(shard_count: u32) {
    let shards = start(shard_count).await;
    let map = ShardMap::new(
        shards.groups[0].nodes()[0].ledger().hash_kind(),
        shard_count.trailing_zeros() as u8,
    )
    .unwrap();
    let coordinator = Arc::new(Coordinator::new(map, Writer(Arc::clone(&shards)), "c1"));
    // Open every account with one write across all shards.
    let opened = coordinator
        .transact(
            vec![],
            (0..ACCOUNTS)
                .map(|i| write(&account(i), encode(BALANCE)))
                .collect(),
            vec![],
        )
        .await
        .unwrap();
    assert!(matches!(opened, Outcome::Committed { .. }), "{opened:?}");

    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let shards = Arc::clone(&shards);
        let coordinator = Arc::clone(&coordinator);
        tasks.push(tokio::spawn(async move {
            let mut counts = BTreeMap::<&'static str, u32>::new();
            for n in 0..25u64 {
                let (a, b) = pair(&map, t * 1000 + n * 13 + 5);
                let (ka, kb) = (account(a), account(b));
                let va = read(&shards, &map, &ka).await.unwrap();
                let vb = read(&shards, &map, &kb).await.unwrap();
                let amount = 1 + (n % 5);
                let (ba, bb) = (decode(&va), decode(&vb));
                if ba < amount {
                    continue;
                }
                let outcome = coordinator
                    .transact(
                        vec![
                            Expectation {
                                table: TABLE.into(),
                                key: ka.clone(),
                                value: Some(va),
                            },
                            Expectation {
                                table: TABLE.into(),
                                key: kb.clone(),
                                value: Some(vb),
                            },
                        ],
                        vec![
                            write(&ka, encode(ba - amount)),
                            write(&kb, encode(bb + amount)),
                        ],
                        format!("transfer {t}/{n}").into_bytes(),
                    )
                    .await;
                let kind = match outcome {
                    Ok(Outcome::Committed { tx, .. }) => {
                        assert!(
                            tx.is_some(),
                            "a transfer across shards has a transaction id"
                        );
                        "committed"
                    }
                    Ok(Outcome::Conflict { .. }) => "conflict",
                    Ok(Outcome::Locked { .. }) => "locked",
                    Ok(Outcome::Aborted { .. }) => "aborted",
                    Ok(other) => panic!("transfer: {other:?}"),
                    Err(_) => "unknown",
                };
                *counts.entry(kind).or_default() += 1;
            }
            counts
        }));
    }
    // Midway, the leader of the last shard dies.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let victim = &shards.groups[shard_count as usize - 1];
    let leader = victim.leader().await.unwrap();
    victim.kill(leader.id).await;

    let mut counts = BTreeMap::<&'static str, u32>::new();
    for task in tasks {
        for (k, v) in task.await.unwrap() {
            *counts.entry(k).or_default() += v;
        }
    }
    // A transaction left undecided (its outcome unknown) is resolved; then nothing is held.
    for s in 0..shard_count {
        for (tx, record) in coordinator.prepared(s).await.unwrap() {
            coordinator.resolve(&tx, &record).await.unwrap();
        }
    }
    let balances = settle(&shards, &map).await;
    assert_eq!(balances.len(), ACCOUNTS as usize);
    assert_eq!(
        balances.values().sum::<u64>(),
        BALANCE * ACCOUNTS as u64,
        "{counts:?}"
    );
    assert!(
        counts.get("committed").copied().unwrap_or(0) >= 20,
        "{counts:?}"
    );
    let (global, whole) = roots(&shards, &map, &balances).await;
    assert_eq!(global, whole, "the global root over {shard_count} shards");
    eprintln!("{shard_count} shards: {counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_across_two_shards_are_atomic() {
    transfers(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_across_four_shards_are_atomic() {
    transfers(4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_coordinator_lost_between_phases_is_resolved() {
    let shards = start(2).await;
    let writer = Writer(Arc::clone(&shards));
    let map = ShardMap::new(shards.groups[0].nodes()[0].ledger().hash_kind(), 1).unwrap();
    let coordinator = Coordinator::new(map, writer.clone(), "resolver");
    let (a, b) = pair(&map, 3);
    let (ka, kb) = (account(a), account(b));
    let (sa, sb) = (map.shard_of(&ka), map.shard_of(&kb));
    let primary = sa.min(sb);
    let prepare = |tx: &str, key: &[u8], value: u64| Command::Prepare {
        tx: tx.into(),
        primary,
        shards: vec![sa.min(sb), sa.max(sb)],
        expects: vec![],
        writes: vec![write(key, encode(value))],
        meta: vec![],
    };

    // Lost after phase one: both shards prepared, nothing decided.
    for (key, v) in [(&ka, 1), (&kb, 2)] {
        let r = writer
            .propose(map.shard_of(key), prepare("t1", key, v))
            .await
            .unwrap();
        assert!(matches!(r, Response::Prepared { .. }), "{r:?}");
    }
    let leader = shards.groups[sa as usize].leader().await.unwrap();
    let refused = leader
        .read(
            &[(TABLE, std::slice::from_ref(&ka))],
            Consistency::Linearizable,
        )
        .await;
    assert!(
        matches!(refused, Err(Error::Locked { ref tx }) if tx == "t1"),
        "{refused:?}"
    );
    let blind = Command::Write {
        expects: vec![],
        writes: vec![write(&ka, encode(9))],
        meta: vec![],
        prove: false,
    };
    assert_eq!(
        writer.propose(sa, blind.clone()).await.unwrap(),
        Response::Locked { tx: "t1".into() }
    );
    let found = coordinator.prepared(sb).await.unwrap();
    assert_eq!(found.len(), 1);
    assert!(
        !coordinator.resolve(&found[0].0, &found[0].1).await.unwrap(),
        "aborted"
    );
    assert_eq!(read(&shards, &map, &ka).await, None);
    assert_eq!(read(&shards, &map, &kb).await, None);
    // A late prepare of the aborted transaction is refused and holds nothing.
    let late = writer.propose(sa, prepare("t1", &ka, 1)).await.unwrap();
    assert_eq!(late, Response::Decided { commit: false });
    assert!(matches!(
        writer.propose(sa, blind).await.unwrap(),
        Response::Committed { .. }
    ));

    // Lost after the primary committed: the resolver commits the other shard too.
    for (key, v) in [(&ka, 5), (&kb, 6)] {
        let r = writer
            .propose(map.shard_of(key), prepare("t2", key, v))
            .await
            .unwrap();
        assert!(matches!(r, Response::Prepared { .. }), "{r:?}");
    }
    let decided = writer
        .propose(primary, Command::Commit { tx: "t2".into() })
        .await
        .unwrap();
    assert!(matches!(decided, Response::Committed { .. }), "{decided:?}");
    // A resolver's abort at the primary comes second and answers the commit.
    assert_eq!(
        writer
            .propose(primary, Command::Abort { tx: "t2".into() })
            .await
            .unwrap(),
        Response::Decided { commit: true }
    );
    let other = if primary == sa { sb } else { sa };
    let found = coordinator.prepared(other).await.unwrap();
    assert_eq!(found.len(), 1);
    assert!(
        coordinator.resolve(&found[0].0, &found[0].1).await.unwrap(),
        "committed"
    );
    assert_eq!(read(&shards, &map, &ka).await, Some(encode(5)));
    assert_eq!(read(&shards, &map, &kb).await, Some(encode(6)));
    let balances = settle(&shards, &map).await;
    let (global, whole) = roots(&shards, &map, &balances).await;
    assert_eq!(global, whole);
}

/// A node reopened holds again the keys of the transactions prepared in its ledger, and
/// releases them when the decision comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_keys_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let open = || Arc::new(Ledger::open(dir.path(), cairn_raft::ledger_config([TABLE])).unwrap());
    let ledger = open();
    let network = LocalNetwork::new();
    let node = Node::start(1, Arc::clone(&ledger), MemLog::new(), network.factory(1))
        .await
        .unwrap();
    network.add(1, node.raft.clone());
    node.raft
        .initialize(BTreeMap::from([(1, Member::default())]))
        .await
        .unwrap();
    let group = Group {
        network,
        nodes: std::sync::Mutex::new(BTreeMap::from([(1, node.clone())])),
    };
    let leader = group.leader().await.unwrap();
    let prepare = Command::Prepare {
        tx: "t9".into(),
        primary: 0,
        shards: vec![0, 1],
        expects: vec![Expectation {
            table: TABLE.into(),
            key: account(1),
            value: None,
        }],
        writes: vec![write(&account(2), encode(7))],
        meta: b"m".to_vec(),
    };
    assert!(matches!(
        leader.write(prepare).await.unwrap(),
        Response::Prepared { .. }
    ));
    assert_eq!(leader.locks().len(), 2);
    node.raft.shutdown().await.unwrap();
    drop((leader, node, group));
    ledger.close();
    drop(ledger);

    let ledger = open();
    let machine = cairn_raft::LedgerMachine::open(Arc::clone(&ledger)).unwrap();
    let locks = machine.locks();
    assert_eq!(locks.len(), 2);
    assert_eq!(
        locks.holder([(TABLE, account(1).as_slice())]),
        Some("t9".to_string())
    );
    let record = twopc::prepared_record(&ledger, "t9").unwrap().unwrap();
    assert_eq!(record.writes, vec![write(&account(2), encode(7))]);
    assert_eq!(twopc::prepared(&ledger).unwrap(), vec!["t9".to_string()]);
}

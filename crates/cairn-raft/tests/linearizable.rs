//! A linearizability check of a three-node cluster's history (issue 48, acceptance 1, in one
//! process for now): four clients read (read index), write and compare-and-set five keys
//! through whichever node leads while the leader is cut off by a partition, the partition
//! heals, and then the leader crashes. Every operation's invocation and response is recorded
//! (an operation whose outcome the client cannot know counts as such), and the history must be
//! linearizable; every acknowledged write survives on the nodes left.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_ledger::Ledger;
use cairn_raft::lincheck::{check, Op, Outcome, Recorder, Ret};
use cairn_raft::Member;
use cairn_raft::{
    ledger_config, Command, Consistency, Error, Expectation, LocalNetwork, MemLog, Node, NodeId,
    Response, Write,
};
use tokio::sync::Mutex;

const TABLE: &str = "registers";
const KEYS: u64 = 5;
const CLIENTS: u64 = 4;
/// Each client stops after this long or this many operations, whichever comes first.
const RUN: Duration = Duration::from_secs(3);
const OPS_PER_CLIENT: u64 = 5_000;

struct Cluster {
    network: LocalNetwork,
    nodes: BTreeMap<NodeId, Node>,
    /// Nodes cut off or crashed: clients do not send to them.
    away: Mutex<Vec<NodeId>>,
}

impl Cluster {
    /// The node the others not away take for leader, if they agree.
    async fn leader(&self) -> Option<NodeId> {
        let away = self.away.lock().await.clone();
        let mut seen = None;
        for (id, node) in &self.nodes {
            if away.contains(id) {
                continue;
            }
            let l = node.leader().await?;
            if away.contains(&l) || seen.is_some_and(|s| s != l) {
                return None;
            }
            seen = Some(l);
        }
        seen
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("x{k}").into_bytes()
}

/// A small deterministic generator per client (no shared randomness).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

async fn client(c: Arc<Cluster>, recorder: Recorder, id: u64, deadline: Instant) -> (u64, u64) {
    let mut rng = Lcg(id * 7919 + 1);
    let (mut done, mut unknown) = (0, 0);
    for seq in 0..OPS_PER_CLIENT {
        if Instant::now() > deadline {
            break;
        }
        let Some(leader) = c.leader().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let node = &c.nodes[&leader];
        let k = key(rng.next(KEYS));
        let value = format!("c{id}-{seq}").into_bytes();
        match rng.next(3) {
            0 => {
                let op = recorder.invoke(id, Op::Get { key: k.clone() });
                match node
                    .read(&[(TABLE, &[k.clone()][..])], Consistency::Linearizable)
                    .await
                {
                    Ok(read) => {
                        recorder
                            .complete(op, Ret::Get(read.values[0][0].clone()))
                            .unwrap();
                        done += 1;
                    }
                    Err(_) => {
                        recorder.fail_unknown(op).unwrap();
                        unknown += 1;
                    }
                }
            }
            1 => {
                let op = recorder.invoke(
                    id,
                    Op::Put {
                        key: k.clone(),
                        value: Some(value.clone()),
                    },
                );
                let command = Command::Write {
                    expects: vec![],
                    writes: vec![Write {
                        table: TABLE.into(),
                        key: k,
                        value: Some(value),
                    }],
                    meta: vec![],
                    prove: false,
                };
                match tokio::time::timeout(Duration::from_secs(2), node.write(command)).await {
                    Ok(Ok(Response::Committed { .. })) => {
                        recorder.complete(op, Ret::Put).unwrap();
                        done += 1;
                    }
                    Ok(Ok(other)) => panic!("a blind write answered {other:?}"),
                    Ok(Err(Error::NotLeader { .. }) | Err(_)) | Err(_) => {
                        recorder.fail_unknown(op).unwrap();
                        unknown += 1;
                    }
                }
            }
            _ => {
                // Compare-and-set from what a read just saw, or from absent.
                let expect = if rng.next(2) == 0 {
                    None
                } else {
                    Some(format!("c{}-{}", rng.next(CLIENTS), rng.next(seq + 1)).into_bytes())
                };
                let op = recorder.invoke(
                    id,
                    Op::Cas {
                        key: k.clone(),
                        expect: expect.clone(),
                        value: Some(value.clone()),
                    },
                );
                let command = Command::Write {
                    expects: vec![Expectation {
                        table: TABLE.into(),
                        key: k.clone(),
                        value: expect,
                    }],
                    writes: vec![Write {
                        table: TABLE.into(),
                        key: k,
                        value: Some(value),
                    }],
                    meta: vec![],
                    prove: false,
                };
                match tokio::time::timeout(Duration::from_secs(2), node.write(command)).await {
                    Ok(Ok(Response::Committed { .. })) => {
                        recorder.complete(op, Ret::Cas(true)).unwrap();
                        done += 1;
                    }
                    Ok(Ok(Response::Conflict { .. })) => {
                        recorder.complete(op, Ret::Cas(false)).unwrap();
                        done += 1;
                    }
                    Ok(Ok(other)) => panic!("a compare-and-set answered {other:?}"),
                    Ok(Err(_)) | Err(_) => {
                        recorder.fail_unknown(op).unwrap();
                        unknown += 1;
                    }
                }
            }
        }
    }
    (done, unknown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_through_a_partition_and_a_leader_crash_is_linearizable() {
    let dir = tempfile::tempdir().unwrap();
    let network = LocalNetwork::new();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let ledger = Ledger::open(dir.path().join(id.to_string()), ledger_config([TABLE]))
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
    let c = Arc::new(Cluster {
        network,
        nodes,
        away: Mutex::new(Vec::new()),
    });
    while c.leader().await.is_none() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let recorder = Recorder::new();
    let deadline = Instant::now() + RUN;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(client(c.clone(), recorder.clone(), id, deadline)))
        .collect();

    // The faults, while the clients run.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let first = c.leader().await.expect("a leader");
    let others: Vec<NodeId> = c.nodes.keys().copied().filter(|&id| id != first).collect();
    c.network.partition(&[&[first], &others]);
    c.away.lock().await.push(first);
    tokio::time::sleep(Duration::from_millis(800)).await;
    c.network.heal();
    c.away.lock().await.clear();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let crashed = loop {
        if let Some(l) = c.leader().await {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    c.away.lock().await.push(crashed);
    c.network.remove(crashed);
    c.nodes[&crashed].raft.shutdown().await.unwrap();

    let (mut done, mut unknown) = (0, 0);
    for t in clients {
        let (d, u) = t.await.unwrap();
        done += d;
        unknown += u;
    }
    let history = recorder.history();
    let started = Instant::now();
    let outcome = check(&history);
    println!(
        "{} operations ({done} answered, {unknown} of unknown outcome); partitioned {first}, \
         crashed {crashed}; checked in {:?}: {outcome}",
        history.len(),
        started.elapsed()
    );
    assert!(
        matches!(outcome, Outcome::Linearizable),
        "{}",
        match &outcome {
            Outcome::NotLinearizable(v) => v.explain(&history),
            other => other.to_string(),
        }
    );
    assert!(done >= 100, "only {done} operations answered");

    // The survivors agree.
    let leader = loop {
        if let Some(l) = c.leader().await {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let applied = c.nodes[&leader].applied_index();
    let mut digests = Vec::new();
    for (id, node) in &c.nodes {
        if *id != crashed {
            node.wait_applied(applied, Duration::from_secs(20))
                .await
                .unwrap();
            digests.push(node.ledger().digest());
        }
    }
    assert_eq!(digests[0], digests[1]);
    for (id, node) in &c.nodes {
        if *id != crashed {
            node.raft.shutdown().await.unwrap();
        }
    }
}

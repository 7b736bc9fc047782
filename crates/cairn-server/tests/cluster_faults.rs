//! Faults on a cluster of three `cairn-server --raft` processes on loopback, with clients
//! recording every operation: a partition of the leader (links cut both ways through the
//! nodes' fault-injecting transport), the leader's SIGKILL and restart, a follower paused
//! (SIGSTOP) then resumed, a follower's SIGKILL and restart, and the leader's SIGKILL again.
//! After the faults every link is healed, each key is read once more, and the whole history
//! must be linearizable (`cairn_raft::lincheck`): no acknowledged write lost, no read of a
//! value not there, nothing applied twice. Every loop is bounded in time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_raft::lincheck::{check_with, Op, Options, Outcome, Recorder, Ret};
use serde_json::{json, Value};

mod common;
use common::{call, converge, h, leader_api, send, wait_up, Delivery, Member, Proc};

/// Keys the clients share (few, so that they contend).
const KEYS: u64 = 6;
/// Concurrent clients.
const CLIENTS: u64 = 4;
/// Longest one request may take before its outcome counts as unknown.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest one operation may keep retrying (after 421s, refused connections) before it is
/// given up as unknown.
const OPERATION_MAX: Duration = Duration::from_secs(4);

/// A tiny deterministic generator (xorshift64*), seeded per client.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// What the clients share: the nodes' APIs, the leader they last heard of, the recorder.
struct Shared {
    apis: Vec<String>,
    leader: Mutex<String>,
    recorder: Recorder,
    http: reqwest::Client,
}

impl Shared {
    fn target(&self) -> String {
        self.leader.lock().unwrap().clone()
    }

    /// After a refusal or silence from `from`: the leader it named, or the next node.
    fn redirect(&self, from: &str, named: Option<String>) {
        let next = match named.filter(|l| self.apis.contains(l)) {
            Some(leader) => leader,
            None => {
                let at = self.apis.iter().position(|a| a == from).unwrap_or(0);
                self.apis[(at + 1) % self.apis.len()].clone()
            }
        };
        *self.leader.lock().unwrap() = next;
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

fn value_of(json: &Value) -> Option<Vec<u8>> {
    json.as_str().map(|s| hex::decode(s).unwrap())
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    acknowledged_writes: u64,
    failed_cas: u64,
    reads: u64,
    unknown: u64,
}

/// One operation, retried across nodes until it has an answer that settles it, its outcome
/// becomes unknown, or [`OPERATION_MAX`] passes.
async fn run(shared: &Shared, client: u64, op: Op, counts: &mut Counts) {
    let id = shared.recorder.invoke(client, op.clone());
    let (path, body, is_write) = match &op {
        Op::Get { key } => (
            "get?consistency=linearizable",
            json!({"tables": [{"table": "checking", "keys": [h(key)]}]}),
            false,
        ),
        Op::Put { key, value } => (
            "put",
            common::put_body(key, value.as_deref().unwrap()),
            true,
        ),
        Op::Cas { key, expect, value } => (
            "transact",
            json!({
                "expects": [{"table": "checking", "expects": [{"key": h(key), "value": expect.as_deref().map(h)}]}],
                "tables": [{"table": "checking", "writes": [{"key": h(key), "value": value.as_deref().map(h)}]}],
            }),
            true,
        ),
        Op::Txn { .. } => unreachable!("the clients send no multi-key transactions"),
    };
    let started = Instant::now();
    loop {
        let target = shared.target();
        let url = format!("{target}/v1/ledgers/bank/{path}");
        match send(&shared.http, "POST", &url, Some(body.clone())).await {
            Delivery::Answer {
                status: 200, body, ..
            } => {
                let ret = match &op {
                    Op::Get { .. } => {
                        counts.reads += 1;
                        Ret::Get(value_of(&body["tables"][0]["values"][0]))
                    }
                    Op::Put { .. } => {
                        counts.acknowledged_writes += 1;
                        Ret::Put
                    }
                    _ => {
                        counts.acknowledged_writes += 1;
                        Ret::Cas(true)
                    }
                };
                shared.recorder.complete(id, ret).unwrap();
                return;
            }
            Delivery::Answer {
                status: 409, body, ..
            } if matches!(op, Op::Cas { .. }) => {
                assert_eq!(body["code"], "expectation_failed", "{body}");
                counts.failed_cas += 1;
                shared.recorder.complete(id, Ret::Cas(false)).unwrap();
                return;
            }
            // Not the leader: nothing was done; go where it points.
            Delivery::Answer {
                status: 421,
                leader,
                ..
            } => shared.redirect(&target, leader),
            // A write that may have been done: its outcome is unknown.
            Delivery::Answer { status: 503, .. } | Delivery::Lost if is_write => break,
            // A read that failed did nothing; a refused connection sent nothing.
            Delivery::Answer { status: 503, .. } | Delivery::Lost | Delivery::Refused => {
                shared.redirect(&target, None);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Delivery::Answer { status, body, .. } => panic!("{op:?} on {target}: {status} {body}"),
        }
        if started.elapsed() > OPERATION_MAX {
            break;
        }
    }
    counts.unknown += 1;
    shared.recorder.fail_unknown(id).unwrap();
}

/// A client: operations on random keys until `stop`; puts and compare-and-sets of values
/// unique to it, and linearizable reads.
async fn client(shared: Arc<Shared>, client: u64, stop: Arc<AtomicBool>) -> Counts {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (client + 1).wrapping_mul(0xff51_afd7_ed55_8ccd));
    let mut counts = Counts::default();
    let mut seen: BTreeMap<u64, Option<Vec<u8>>> = BTreeMap::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let k = rng.below(KEYS);
        let value = format!("c{client}-{n}").into_bytes();
        let op = match rng.below(10) {
            0..=3 => Op::Put {
                key: key(k),
                value: Some(value),
            },
            4 | 5 => Op::Cas {
                key: key(k),
                expect: seen.get(&k).cloned().flatten(),
                value: Some(value),
            },
            _ => Op::Get { key: key(k) },
        };
        run(&shared, client, op.clone(), &mut counts).await;
        if let Op::Get { .. } = op {
            // Remember the last value read, for the next compare-and-set of the key.
            let history = shared.recorder.history();
            if let Some(Some(response)) = history.operations().last().map(|o| o.response.clone()) {
                if let Ret::Get(v) = response.ret {
                    seen.insert(k, v);
                }
            }
        }
    }
    counts
}

async fn cut(http: &reqwest::Client, api: &str, blocked: &[u64]) {
    let url = format!("{api}/v1/cluster/faults");
    let a = call(http, "POST", &url, Some(json!({ "blocked": blocked }))).await;
    assert_eq!(a.status, 200, "{url}: {}", a.body);
}

fn id_of(procs: &BTreeMap<u64, Proc>, api: &str) -> u64 {
    procs.values().find(|p| p.api == api).unwrap().id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_processes_stays_linearizable_through_kills_pauses_and_a_partition() {
    let root = tempfile::tempdir().unwrap();
    common::write_secret(root.path());
    let members: Vec<Member> = (1..=3).map(Member::new).collect();
    let all: Vec<&Member> = members.iter().collect();
    let mut procs: BTreeMap<u64, Proc> = BTreeMap::new();
    for m in &members {
        let init: &[&Member] = if m.id == 1 { &all } else { &[] };
        procs.insert(m.id, Proc::new(root.path(), m, init, true));
    }
    let http = common::client(REQUEST_TIMEOUT);
    for p in procs.values_mut() {
        p.spawn();
    }
    for p in procs.values() {
        wait_up(&http, p).await;
    }
    let apis: Vec<String> = procs.values().map(|p| p.api.clone()).collect();
    // Every key written once before the clients start (the checker's initial state): a read
    // of a ledger without any version is a 404 `no_such_version`, not a read of absence.
    let mut initial = BTreeMap::new();
    for k in 0..KEYS {
        common::put(&http, &apis, &format!("k{k}"), "initial").await;
        initial.insert(key(k), b"initial".to_vec());
    }
    let leader = leader_api(&http, &apis).await;
    let shared = Arc::new(Shared {
        apis: apis.clone(),
        leader: Mutex::new(leader),
        recorder: Recorder::new(),
        http: http.clone(),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| tokio::spawn(client(shared.clone(), c, stop.clone())))
        .collect();
    let pause = |ms: u64| tokio::time::sleep(Duration::from_millis(ms));
    let mut faults = Vec::new();
    pause(800).await;

    // 1. The leader is cut from the others, both ways, then healed.
    let l = leader_api(&http, &apis).await;
    let lid = id_of(&procs, &l);
    let others: Vec<u64> = procs.keys().copied().filter(|&id| id != lid).collect();
    cut(&http, &l, &others).await;
    for api in apis.iter().filter(|a| **a != l) {
        cut(&http, api, &[lid]).await;
    }
    faults.push(format!("partition of leader {lid}"));
    pause(2_000).await;
    for api in &apis {
        cut(&http, api, &[]).await;
    }
    pause(800).await;

    // 2. The leader is killed, then restarted from its directories.
    let l = leader_api(&http, &apis).await;
    let lid = id_of(&procs, &l);
    procs.get_mut(&lid).unwrap().kill();
    faults.push(format!("SIGKILL of leader {lid}"));
    pause(1_200).await;
    procs.get_mut(&lid).unwrap().spawn();
    wait_up(&http, &procs[&lid]).await;
    pause(800).await;

    // 3. A follower is paused, then resumed.
    let l = leader_api(&http, &apis).await;
    let fid = *procs.keys().find(|&&id| id != id_of(&procs, &l)).unwrap();
    procs[&fid].pause(true);
    faults.push(format!("SIGSTOP of follower {fid}"));
    pause(1_200).await;
    procs[&fid].pause(false);
    pause(800).await;

    // 4. A follower is killed and restarted; then the leader is killed again and restarted.
    let l = leader_api(&http, &apis).await;
    let fid = *procs.keys().find(|&&id| id != id_of(&procs, &l)).unwrap();
    procs.get_mut(&fid).unwrap().kill();
    faults.push(format!("SIGKILL of follower {fid}"));
    pause(800).await;
    procs.get_mut(&fid).unwrap().spawn();
    wait_up(&http, &procs[&fid]).await;
    pause(500).await;
    let l = leader_api(&http, &apis).await;
    let lid = id_of(&procs, &l);
    procs.get_mut(&lid).unwrap().kill();
    faults.push(format!("SIGKILL of leader {lid}"));
    pause(1_000).await;
    procs.get_mut(&lid).unwrap().spawn();
    wait_up(&http, &procs[&lid]).await;
    pause(800).await;

    stop.store(true, Ordering::Relaxed);
    let mut total = Counts::default();
    for c in clients {
        let c = c.await.unwrap();
        total.acknowledged_writes += c.acknowledged_writes;
        total.failed_cas += c.failed_cas;
        total.reads += c.reads;
        total.unknown += c.unknown;
    }

    // Healed and quiet: every key read once more, every node on one digest.
    let mut finals = Counts::default();
    for k in 0..KEYS {
        run(&shared, 99, Op::Get { key: key(k) }, &mut finals).await;
    }
    assert_eq!(finals.reads, KEYS, "the final reads were not all answered");
    let l = leader_api(&http, &apis).await;
    let size = call(&http, "GET", &format!("{l}/v1/ledgers/bank/digest"), None)
        .await
        .body["size"]
        .as_u64()
        .unwrap();
    converge(&http, &apis, size).await;

    let history = shared.recorder.history();
    let started = Instant::now();
    let options = Options {
        initial,
        ..Options::default()
    };
    let outcome = check_with(&history, &options);
    println!(
        "faults: {}; {} operations: {} writes acknowledged, {} compare-and-sets refused, {} \
         reads, {} unknown; {} versions; checked in {:?}: {}",
        faults.join(", "),
        history.len(),
        total.acknowledged_writes,
        total.failed_cas,
        total.reads + finals.reads,
        total.unknown,
        size,
        started.elapsed(),
        outcome
    );
    match outcome {
        Outcome::Linearizable => {}
        Outcome::NotLinearizable(v) => panic!("{}", v.explain(&history)),
        Outcome::Unknown(e) => panic!("the check ran out of budget: {e}"),
    }
    assert!(
        total.acknowledged_writes >= 20,
        "too few writes went through to mean much: {total:?}"
    );
}

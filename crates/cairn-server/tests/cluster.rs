//! Three `cairn-server --raft` processes on loopback: a write through the leader is
//! acknowledged and read back linearizably; a node that does not lead answers 421 naming the
//! leader; a stale read is served anywhere; the leader's SIGKILL elects another and no
//! acknowledged write is lost; the killed node, restarted from its directories, catches up to
//! the same digest; the nodes snapshot and purge their logs; a learner joins through the admin
//! endpoints, catches up by a snapshot sent between the processes, and is promoted. Every
//! listener is on 127.0.0.1; every wait is bounded.

use std::collections::BTreeMap;

use serde_json::json;

mod common;
use common::{call, converge, get, h, leader_api, put, wait_up, Member, Proc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_replicate_survive_a_leader_kill_and_take_a_learner() {
    let root = tempfile::tempdir().unwrap();
    common::write_secret(root.path());
    let members: Vec<Member> = (1..=4).map(Member::new).collect();
    let first: Vec<&Member> = members[..3].iter().collect();
    let mut procs: BTreeMap<u64, Proc> = BTreeMap::new();
    for m in &members {
        let init: &[&Member] = if m.id == 1 { &first } else { &[] };
        procs.insert(m.id, Proc::new(root.path(), m, init, false));
    }
    let http = common::client(std::time::Duration::from_secs(10));
    for id in 1..=3 {
        procs.get_mut(&id).unwrap().spawn();
    }
    for id in 1..=3 {
        wait_up(&http, &procs[&id]).await;
    }
    let mut apis: Vec<String> = (1..=3).map(|id| procs[&id].api.clone()).collect();

    // Writes through the leader; reads back, linearizably, through it.
    let mut acknowledged: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..10 {
        let (k, v) = (format!("a{i}"), format!("{i}"));
        put(&http, &apis, &k, &v).await;
        acknowledged.insert(k, v);
    }
    let leader = leader_api(&http, &apis).await;
    let (status, value) = get(&http, &leader, "a3", "linearizable").await;
    assert_eq!((status, value), (200, json!(h(b"3"))));

    // A node that does not lead sends writes and linearizable reads to the leader (421, the
    // leader's API named, once it has heard from the leader), and serves stale reads itself.
    converge(&http, &apis, 10).await;
    let follower = apis.iter().find(|a| **a != leader).unwrap().clone();
    let body =
        json!({"tables": [{"table": "checking", "writes": [{"key": h(b"z"), "value": h(b"z")}]}]});
    let a = call(
        &http,
        "POST",
        &format!("{follower}/v1/ledgers/bank/put"),
        Some(body),
    )
    .await;
    assert_eq!(a.status, 421, "{}", a.body);
    assert_eq!(a.body["code"], "not_leader");
    assert_eq!(a.leader.as_deref(), Some(leader.as_str()));
    let (status, _) = get(&http, &follower, "a3", "linearizable").await;
    assert_eq!(status, 421);
    let (status, value) = get(&http, &follower, "a3", "stale").await;
    assert_eq!((status, value), (200, json!(h(b"3"))));
    let (status, _) = get(&http, &follower, "a3", "sometimes").await;
    assert_eq!(status, 400);

    // SIGKILL the leader: the others elect one and go on; nothing acknowledged is lost.
    let killed = procs
        .values()
        .find(|p| p.api == leader)
        .map(|p| p.id)
        .unwrap();
    procs.get_mut(&killed).unwrap().kill();
    let live: Vec<String> = apis.iter().filter(|a| **a != leader).cloned().collect();
    for i in 0..10 {
        let (k, v) = (format!("b{i}"), format!("{i}"));
        put(&http, &live, &k, &v).await;
        acknowledged.insert(k, v);
    }
    let new_leader = leader_api(&http, &live).await;
    assert_ne!(new_leader, leader);
    for (k, v) in &acknowledged {
        let (status, value) = get(&http, &new_leader, k, "linearizable").await;
        assert_eq!((status, value), (200, json!(h(v.as_bytes()))), "{k}");
    }

    // The killed node restarts from its directories and catches up to the same digest.
    procs.get_mut(&killed).unwrap().spawn();
    wait_up(&http, &procs[&killed]).await;
    let d = converge(&http, &apis, 20).await;
    assert_eq!(d["size"], 20, "{d}");

    // Enough writes for every node to snapshot (every 50 entries) and purge its log.
    for i in 0..70 {
        put(&http, &apis, &format!("s{i}"), "s").await;
    }
    converge(&http, &apis, 90).await;
    let leader = leader_api(&http, &apis).await;
    let status = call(&http, "GET", &format!("{leader}/v1/cluster"), None).await;
    assert!(
        status.body["purged_index"].as_u64() > Some(10),
        "{}",
        status.body
    );

    // A fourth node joins as a learner, catches up (by a snapshot: the log's start is gone),
    // and is promoted; the cluster then has four voters and still writes.
    procs.get_mut(&4).unwrap().spawn();
    wait_up(&http, &procs[&4]).await;
    let leader = leader_api(&http, &apis).await;
    let learner = json!({"id": 4, "addr": format!("127.0.0.1:{}", members[3].peer_port),
        "api": members[3].api()});
    let a = call(
        &http,
        "POST",
        &format!("{leader}/v1/cluster/learners"),
        Some(learner),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = call(
        &http,
        "POST",
        &format!("{leader}/v1/cluster/voters"),
        Some(json!({"voters": [1, 2, 3, 4]})),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    apis.push(procs[&4].api.clone());
    // The leader's view: the newcomer may not have applied the change yet.
    let status = call(&http, "GET", &format!("{leader}/v1/cluster"), None).await;
    let voters = status.body["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["voter"] == true)
        .count();
    assert_eq!(voters, 4, "{}", status.body);
    put(&http, &apis, "c0", "0").await;
    converge(&http, &apis, 91).await;
    let status = call(&http, "GET", &format!("{}/v1/cluster", procs[&4].api), None).await;
    assert!(
        status.body["snapshot_index"].as_u64() > Some(10),
        "{}",
        status.body
    );

    // A stranger without the secret is refused by a peer listener.
    let url = format!("http://127.0.0.1:{}/raft/v1/vote", members[0].peer_port);
    let a = call(&http, "POST", &url, Some(json!({}))).await;
    assert_eq!(a.status, 401);
}

/// What a router asks of a shard's node, on a one-node cluster: a prepared transaction holds
/// its key (reads and writes of it answer 409 `locked`) and is listed; its commit makes the
/// write and releases the key; a later abort answers the commit; the table witness names the
/// newest version and root; a command that does not decode is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_node_serves_the_steps_of_a_transaction() {
    let root = tempfile::tempdir().unwrap();
    common::write_secret(root.path());
    let m = Member::new(1);
    let mut proc = Proc::new(root.path(), &m, &[&m], false);
    proc.spawn();
    let http = common::client(std::time::Duration::from_secs(10));
    wait_up(&http, &proc).await;
    let api = leader_api(&http, std::slice::from_ref(&proc.api)).await;
    let command = |body: serde_json::Value| {
        let (http, url) = (http.clone(), format!("{api}/v1/cluster/command"));
        async move { call(&http, "POST", &url, Some(body)).await }
    };

    let prepare = json!({"Prepare": {"tx": "t1", "primary": 0, "shards": [0, 1], "expects": [],
        "writes": [{"table": "checking", "key": b"k".to_vec(), "value": b"1".to_vec()}],
        "meta": []}});
    let a = command(prepare.clone()).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body["Prepared"]["version"].is_u64(), "{}", a.body);
    let (status, _) = get(&http, &api, "k", "linearizable").await;
    assert_eq!(status, 409);
    let url = format!("{api}/v1/ledgers/bank/put");
    let a = call(&http, "POST", &url, Some(common::put_body(b"k", b"2"))).await;
    assert_eq!(
        (a.status, a.body["code"].clone()),
        (409, json!("locked")),
        "{}",
        a.body
    );
    let listed = call(&http, "GET", &format!("{api}/v1/cluster/prepared"), None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body[0]["tx"], "t1", "{}", listed.body);
    assert_eq!(listed.body[0]["record"]["shards"], json!([0, 1]));

    let a = command(json!({"Commit": {"tx": "t1"}})).await;
    assert!(a.body["Committed"]["version"].is_u64(), "{}", a.body);
    let (status, value) = get(&http, &api, "k", "linearizable").await;
    assert_eq!((status, value), (200, json!(h(b"1"))));
    let a = command(json!({"Abort": {"tx": "t1"}})).await;
    assert_eq!(a.body, json!({"Decided": {"commit": true}}));
    let a = command(prepare).await;
    assert_eq!(a.body, json!({"Decided": {"commit": true}}));
    let listed = call(&http, "GET", &format!("{api}/v1/cluster/prepared"), None).await;
    assert_eq!(listed.body, json!([]));

    let url = format!("{api}/v1/cluster/witness?table=checking&levels=2");
    let w = call(&http, "GET", &url, None).await;
    assert_eq!(w.status, 200, "{}", w.body);
    assert_eq!(w.body["root"].as_str().unwrap().len(), 64);
    let url = format!("{api}/v1/cluster/witness?table=checking");
    assert_eq!(call(&http, "GET", &url, None).await.status, 400);
    assert_eq!(command(json!({"Launch": {}})).await.status, 400);
}

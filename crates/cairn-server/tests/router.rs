//! A router over two shards, each a cluster of three `cairn-server --raft` processes on
//! loopback: accounts opened by one put across both shards; concurrent transfers between
//! accounts on different shards (two-phase commit through the router) while the leader of a
//! shard is SIGKILLed and restarted; then the total balance is unchanged, every shard's answer
//! carries its receipt, and the table's global root equals, bit for bit, the root of one
//! unsharded ledger holding the same balances. A transaction prepared on both shards whose
//! coordinator is lost is aborted by the router's resolver, and the key it held reads again.
//! Every listener is on 127.0.0.1; every wait is bounded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_proof::ShardMap;
use serde_json::{json, Value};

mod common;
use common::{call, h, leader_api, wait_up, Member, Proc, WAIT};

const ACCOUNTS: u32 = 16;
const BALANCE: u64 = 100;

fn account(i: u32) -> Vec<u8> {
    format!("acct-{i:02}").into_bytes()
}

fn balance(v: &Value) -> u64 {
    let bytes = hex::decode(v.as_str().expect("a value")).unwrap();
    u64::from_be_bytes(bytes.try_into().unwrap())
}

/// Reads the balances of `keys` through the router (each key's shard's leader), retrying
/// while a shard is unavailable or a key held.
async fn read(http: &reqwest::Client, router: &str, keys: &[Vec<u8>]) -> (Vec<Value>, Value) {
    let hexes: Vec<String> = keys.iter().map(|k| h(k)).collect();
    let body = json!({"tables": [{"table": "checking", "keys": hexes}]});
    let start = Instant::now();
    loop {
        let a = call(
            http,
            "POST",
            &format!("{router}/v1/ledgers/bank/get"),
            Some(body.clone()),
        )
        .await;
        if a.status == 200 {
            let values = a.body["tables"][0]["values"].as_array().unwrap().clone();
            return (values, a.body);
        }
        assert!(start.elapsed() < WAIT, "get: {} {}", a.status, a.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_over_two_shards_of_three_processes() {
    let root = tempfile::tempdir().unwrap();
    let http = common::client(Duration::from_secs(10));
    let mut shards: Vec<Vec<Proc>> = Vec::new();
    for s in 0..2 {
        let dir = root.path().join(format!("shard{s}"));
        std::fs::create_dir_all(&dir).unwrap();
        common::write_secret(&dir);
        let members: Vec<Member> = (1..=3).map(Member::new).collect();
        let first: Vec<&Member> = members.iter().collect();
        let mut procs = Vec::new();
        for m in &members {
            let init: &[&Member] = if m.id == 1 { &first } else { &[] };
            let mut p = Proc::new(&dir, m, init, false);
            p.spawn();
            procs.push(p);
        }
        shards.push(procs);
    }
    let mut apis: Vec<Vec<String>> = Vec::new();
    for procs in &shards {
        for p in procs {
            wait_up(&http, p).await;
        }
        let group: Vec<String> = procs.iter().map(|p| p.api.clone()).collect();
        leader_api(&http, &group).await;
        apis.push(group);
    }

    let mut config = cairn_server::Config {
        insecure_loopback: true,
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], common::free_port())),
        ..cairn_server::Config::default()
    };
    config.router = Some(cairn_server::config::RouterConfig {
        ledger: "bank".into(),
        tables: vec!["checking".into()],
        shards: apis.clone(),
        token_file: None,
        name: Some("test".into()),
        resolve_after_ms: 300,
        ca: None,
    });
    let running = cairn_server::start(config, std::future::pending())
        .await
        .unwrap();
    let router = format!("http://{}", running.addr);

    // Every account opened by one put across both shards.
    let writes: Vec<Value> = (0..ACCOUNTS)
        .map(|i| json!({"key": h(&account(i)), "value": h(&BALANCE.to_be_bytes())}))
        .collect();
    let a = call(
        &http,
        "POST",
        &format!("{router}/v1/ledgers/bank/put"),
        Some(json!({"tables": [{"table": "checking", "writes": writes}]})),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body["shards"].as_array().unwrap().len(), 2, "{}", a.body);

    // Transfers between accounts on different shards, three clients at once; midway the
    // leader of shard 1 is killed, and later restarted.
    let map = ShardMap::new(cairn_ledger::LedgerConfig::default().hash, 1).unwrap();
    let on: Vec<Vec<u32>> = (0..2)
        .map(|s| {
            (0..ACCOUNTS)
                .filter(|i| map.shard_of(&account(*i)) == s)
                .collect()
        })
        .collect();
    assert!(on.iter().all(|accounts| !accounts.is_empty()));
    let on = Arc::new(on);
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..3usize {
        let (http, router, on) = (http.clone(), router.clone(), Arc::clone(&on));
        let done = Arc::clone(&done);
        tasks.push(tokio::spawn(async move {
            let mut counts = std::collections::BTreeMap::<u16, u32>::new();
            for n in 0..20usize {
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let a = account(on[0][(t * 5 + n) % on[0].len()]);
                let b = account(on[1][(t * 3 + n * 7) % on[1].len()]);
                let (values, _) = read(&http, &router, &[a.clone(), b.clone()]).await;
                let (va, vb) = (balance(&values[0]), balance(&values[1]));
                let amount = 1 + (n as u64 % 4);
                let (from, to, vf, vt) = if n % 2 == 0 {
                    (&a, &b, va, vb)
                } else {
                    (&b, &a, vb, va)
                };
                if vf < amount {
                    continue;
                }
                let body = json!({
                    "expects": [{"table": "checking", "expects": [
                        {"key": h(from), "value": h(&vf.to_be_bytes())},
                        {"key": h(to), "value": h(&vt.to_be_bytes())}]}],
                    "tables": [{"table": "checking", "writes": [
                        {"key": h(from), "value": h(&(vf - amount).to_be_bytes())},
                        {"key": h(to), "value": h(&(vt + amount).to_be_bytes())}]}],
                });
                let a = call(
                    &http,
                    "POST",
                    &format!("{router}/v1/ledgers/bank/transact"),
                    Some(body),
                )
                .await;
                assert!(
                    matches!(a.status, 200 | 409 | 503),
                    "transact: {} {}",
                    a.status,
                    a.body
                );
                *counts.entry(a.status).or_default() += 1;
            }
            counts
        }));
    }
    let start = Instant::now();
    while done.load(std::sync::atomic::Ordering::Relaxed) < 12 {
        assert!(start.elapsed() < WAIT, "the transfers did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let leader = leader_api(&http, &apis[1]).await;
    let victim = shards[1].iter().position(|p| p.api == leader).unwrap();
    shards[1][victim].kill();
    let killed_at = done.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        killed_at < 50,
        "the leader died after the transfers ({killed_at} begun)"
    );
    let mut counts = std::collections::BTreeMap::<u16, u32>::new();
    for task in tasks {
        for (status, n) in task.await.unwrap() {
            *counts.entry(status).or_default() += n;
        }
    }
    shards[1][victim].spawn();
    wait_up(&http, &shards[1][victim]).await;
    assert!(counts.get(&200).copied().unwrap_or(0) >= 10, "{counts:?}");

    // Nothing lost or made: the total is what was opened. Each shard's answer has its receipt.
    let keys: Vec<Vec<u8>> = (0..ACCOUNTS).map(account).collect();
    let (values, body) = read(&http, &router, &keys).await;
    let balances: Vec<u64> = values.iter().map(balance).collect();
    assert_eq!(
        balances.iter().sum::<u64>(),
        BALANCE * ACCOUNTS as u64,
        "{counts:?}"
    );
    for s in body["shards"].as_array().unwrap() {
        assert!(s["read"]["version"].as_u64().unwrap() > 0, "{s}");
        assert!(!s["read"]["receipt"].as_str().unwrap().is_empty(), "{s}");
    }

    // Each shard's own ledger through the router: its digest, and a read of its keys only.
    let d = call(
        &http,
        "GET",
        &format!("{router}/v1/ledgers/bank/shards/1/digest"),
        None,
    )
    .await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert!(d.body["size"].as_u64().unwrap() > 0, "{}", d.body);
    let get = |s: u32, key: &[u8]| {
        let body = json!({"tables": [{"table": "checking", "keys": [h(key)]}]});
        let (http, url) = (
            http.clone(),
            format!("{router}/v1/ledgers/bank/shards/{s}/get"),
        );
        async move { call(&http, "POST", &url, Some(body)).await }
    };
    let own = get(0, &account(on[0][0])).await;
    assert_eq!(own.status, 200, "{}", own.body);
    assert!(!own.body["receipt"].as_str().unwrap().is_empty());
    let foreign = get(0, &account(on[1][0])).await;
    assert_eq!(foreign.status, 400, "{}", foreign.body);
    assert_eq!(get(7, &account(0)).await.status, 404);

    // The global root is one unsharded ledger's root over the same balances.
    let a = call(
        &http,
        "GET",
        &format!("{router}/v1/ledgers/bank/root?table=checking"),
        None,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let dir = tempfile::tempdir().unwrap();
    let one = cairn_ledger::Ledger::open(dir.path(), cairn_ledger::LedgerConfig::new(["checking"]))
        .unwrap();
    let mut batch = cairn_ledger::LedgerBatch::new();
    for (k, v) in keys.iter().zip(&balances) {
        batch.insert("checking", k, v.to_be_bytes());
    }
    one.write(&batch).unwrap();
    let whole = one.table_witness("checking", 1).unwrap().root;
    assert_eq!(a.body["root"], json!(hex::encode(whole.hash)), "{}", a.body);
    // A read with lift: one proof of every key against that same root.
    let hexes: Vec<String> = keys.iter().map(|k| h(k)).collect();
    let body = json!({"tables": [{"table": "checking", "keys": hexes}], "lift": true});
    let a = call(
        &http,
        "POST",
        &format!("{router}/v1/ledgers/bank/get"),
        Some(body),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let global = &a.body["global"][0];
    assert_eq!(global["root"], json!(hex::encode(whole.hash)), "{}", a.body);
    let proof = hex::decode(global["proof"].as_str().unwrap()).unwrap();
    let stored: Vec<Vec<u8>> = (values.iter())
        .map(|v| hex::decode(v.as_str().unwrap()).unwrap())
        .collect();
    let claims: Vec<cairn_proof::Claim<'_>> = (keys.iter().zip(&stored))
        .map(|(k, v)| cairn_proof::Claim::answer(k, Some(v)))
        .collect();
    assert_eq!(cairn_proof::verify(&whole, &proof, &claims), Ok(()));

    // A coordinator lost after preparing on both shards: the resolver aborts its transaction
    // and the keys it held read again, unchanged.
    let (ka, kb) = (account(on[0][0]), account(on[1][0]));
    for (s, key) in [(0usize, &ka), (1usize, &kb)] {
        let leader = leader_api(&http, &apis[s]).await;
        let prepare = json!({"Prepare": {"tx": "lost-1", "primary": 0, "shards": [0, 1],
            "expects": [], "writes": [{"table": "checking", "key": key, "value": [1]}],
            "meta": []}});
        let a = call(
            &http,
            "POST",
            &format!("{leader}/v1/cluster/command"),
            Some(prepare),
        )
        .await;
        assert!(a.body["Prepared"].is_object(), "{}", a.body);
    }
    let (values, _) = read(&http, &router, &[ka.clone(), kb.clone()]).await;
    assert_eq!(balance(&values[0]), balances[on[0][0] as usize]);
    assert_eq!(balance(&values[1]), balances[on[1][0] as usize]);
    let leader = leader_api(&http, &apis[0]).await;
    let listed = call(&http, "GET", &format!("{leader}/v1/cluster/prepared"), None).await;
    assert_eq!(listed.body, json!([]), "resolved");

    running.shutdown().await.unwrap();
    eprintln!("transfers: {counts:?}, the leader killed after {killed_at} had begun");
}

//! SmallBank on Cairn's verifiable ledger (`cairn_ledger`): the accounts loaded, then `clients`
//! threads each running its stream of transactions for a fixed time, every commit waited until
//! durable, each answer verified as the mode says.
//!
//! Owns: one run on Cairn ([`run`]) and its figures. May call: `smallbank` (the transactions and
//! the model), `cairn_ledger` and `cairn_proof` as a user and a client would. Must never touch:
//! the engine's internals.
//!
//! Verification modes:
//! - **immediate**: a transaction runs through `Ledger::transact_proved`; before its client's
//!   next transaction it checks consistency from the digest it trusts to the version's digest,
//!   the receipt of the keys read (as of the version before) against the values the transaction
//!   saw, and the receipt of the keys written (as of the version, fresh) against the values it
//!   wrote. A Balance (read-only) is a `Ledger::read` with its receipt, checked fresh. An aborted
//!   transaction (no version) proves nothing: its reads are counted unverified.
//! - **none**: `Ledger::transact`, no receipt.
//!
//! Settings: `SyncPolicy::Immediate` (a committer that waits leads its group; concurrent waiters
//! share fsyncs), the ledger's default table config with the trie hash `--hash`, no window
//! (`history` 0): immediate verification needs none, as `transact_proved` proves the version
//! before under the commit lock.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_ledger::{Ledger, LedgerBatch, LedgerConfig, ProvedKeys};
use cairn_proof::{
    verify_consistency, verify_receipt, verify_receipt_at, Claim, Digest, TableClaims,
};
use hdrhistogram::Histogram;

use super::smallbank::{execute, Key, Kind, Op, Stream, CHECKING_START, SAVINGS_START};
use super::{Figures, Verify};
use crate::failure::{Context, Failure};

const CHECKING: &str = "checking";
const SAVINGS: &str = "savings";
/// Accounts per load version.
const LOAD_BATCH: u64 = 10_000;

fn table_key(key: Key) -> (&'static str, [u8; 8]) {
    match key {
        Key::Savings(a) => (SAVINGS, a.to_be_bytes()),
        Key::Checking(a) => (CHECKING, a.to_be_bytes()),
    }
}

fn decode(bytes: Option<&[u8]>) -> Result<i64, String> {
    let bytes = bytes.ok_or("an account is missing")?;
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| "a balance is not 8 bytes")?;
    Ok(i64::from_be_bytes(bytes))
}

/// Opens (or creates) the ledger in `dir` with `config`, every commit fsynced before it is
/// acknowledged (`SyncPolicy::Immediate`): how every workload opens Cairn.
pub fn open_ledger(dir: &Path, config: LedgerConfig) -> Result<Ledger, Failure> {
    let options = cairn::SessionOptions::default().log(Some(
        cairn::LogOptions::default().sync(cairn::SyncPolicy::Immediate),
    ));
    Ledger::open_with(Arc::new(cairn::fs::RealFs), dir, config, options)
        .context(|| format!("opening a ledger in {}", dir.display()))
}

/// Opens a ledger in `dir` and loads `accounts` accounts; returns it and the seconds.
pub fn load(
    dir: &Path,
    accounts: u64,
    hash: cairn_proof::HashKind,
    group: usize,
    window: u64,
) -> Result<(Ledger, f64), Failure> {
    let ledger = open_ledger(
        dir,
        LedgerConfig::new([CHECKING, SAVINGS])
            .hash(hash)
            .group(group)
            .history(window),
    )?;
    let start = Instant::now();
    let mut first = 0;
    while first < accounts {
        let mut batch = LedgerBatch::new();
        for a in first..(first + LOAD_BATCH).min(accounts) {
            batch.insert(SAVINGS, a.to_be_bytes(), SAVINGS_START.to_be_bytes());
            batch.insert(CHECKING, a.to_be_bytes(), CHECKING_START.to_be_bytes());
        }
        ledger.write(&batch).context(|| "loading accounts".into())?;
        first += LOAD_BATCH;
    }
    ledger.sync().context(|| "syncing the load".into())?;
    ledger
        .checkpoint()
        .context(|| "checkpointing the load".into())?;
    Ok((ledger, start.elapsed().as_secs_f64()))
}

/// What one client measured.
struct Client {
    per_kind: BTreeMap<Kind, Histogram<u64>>,
    aborted: u64,
    /// Committed writing transactions: (version, op), for the model.
    log: Vec<(u64, Op)>,
    done: u64,
    verified_reads: u64,
    verified_writes: u64,
    read_proof_bytes: u64,
    proof_bytes: u64,
}

/// One SmallBank run's settings.
pub struct Setup {
    /// Accounts loaded.
    pub accounts: u64,
    pub clients: u64,
    pub seconds: f64,
    pub verify: Verify,
    pub seed: u64,
    pub zipf: bool,
    /// Transactions per audited block (0: no auditor).
    pub audit_block: u64,
}

/// Runs `clients` clients for `seconds` on `ledger` (loaded with `accounts`), verifying as
/// `verify` says, with an auditor when `audit_block` is set. Returns the figures and the log
/// of committed writing transactions in version order.
pub fn run(ledger: &Ledger, setup: &Setup) -> Result<(Figures, Vec<Op>), Failure> {
    let &Setup {
        accounts,
        clients,
        seconds,
        verify,
        seed,
        zipf,
        audit_block,
    } = setup;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let loaded = ledger.digest();
    let first = ledger.version();
    let promises = Promises::default();
    let stop = AtomicBool::new(false);
    let (results, deferred, audit): (Vec<Result<Client, Failure>>, _, _) =
        std::thread::scope(|s| {
            let promises = &promises;
            let (committed, stop) = (&promises.committed, &stop);
            let auditor = (audit_block > 0).then(|| {
                s.spawn(move || super::audit::auditor(ledger, committed, stop, audit_block))
            });
            let verifier = verify
                .delay_ms()
                .map(|delay| s.spawn(move || verifier(ledger, promises, delay, loaded)));
            let handles: Vec<_> = (0..clients)
                .map(|c| {
                    s.spawn(move || {
                        let stream = Stream::new(seed, c, accounts, zipf);
                        client(ledger, stream, deadline, verify, loaded, promises)
                    })
                })
                .collect();
            let results = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Failure("a client thread panicked".into())))
                })
                .collect();
            promises.finish();
            stop.store(true, Ordering::Release);
            let deferred = verifier.map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Failure("the verifier thread panicked".into())))
            });
            let audit = auditor.map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Failure("the auditor thread panicked".into())))
            });
            (results, deferred, audit)
        });
    // Deferred: up to the end of the last batch, as immudb's peer counts.
    let seconds = start.elapsed().as_secs_f64();
    let mut figures = Figures::new(seconds);
    figures.deferred = deferred.transpose()?;
    figures.audit = audit.transpose()?;
    if let Some(d) = &figures.deferred {
        // Verified by the verifier: the batch's proofs shared equally among its promises, as
        // immudb's peer counts them.
        figures.verified_reads = d.reads;
        figures.verified_writes = d.writes;
        figures.proof_bytes = d.proof_bytes;
        figures.read_proof_bytes =
            (d.proof_bytes as f64 * d.reads as f64 / d.promises.max(1) as f64).round() as u64;
    }
    figures.versions = ledger.version() - first;
    let mut log = Vec::new();
    for r in results {
        let c = r?;
        for (kind, h) in &c.per_kind {
            figures.add_latencies(*kind, h)?;
        }
        figures.transactions += c.done;
        figures.aborted += c.aborted;
        figures.verified_reads += c.verified_reads;
        figures.verified_writes += c.verified_writes;
        figures.read_proof_bytes += c.read_proof_bytes;
        figures.proof_bytes += c.proof_bytes;
        log.extend(c.log);
    }
    // Transactions that share a version (group commit) commute: the ledger never groups two
    // of which one writes a key the other touches, so any order within a version replays to
    // the same balances (and `--check` would catch a group that broke this).
    log.sort_by_key(|(version, _)| *version);
    Ok((figures, log.into_iter().map(|(_, op)| op).collect()))
}

fn client(
    ledger: &Ledger,
    stream: Stream,
    deadline: Instant,
    verify: Verify,
    mut trusted: Digest,
    promises: &Promises,
) -> Result<Client, Failure> {
    let mut me = Client {
        per_kind: BTreeMap::new(),
        aborted: 0,
        log: Vec::new(),
        done: 0,
        verified_reads: 0,
        verified_writes: 0,
        read_proof_bytes: 0,
        proof_bytes: 0,
    };
    for op in stream {
        if Instant::now() >= deadline {
            break;
        }
        let t = Instant::now();
        match verify {
            Verify::Immediate if op.kind == Kind::Balance => {
                balance_verified(ledger, &op, &mut trusted, &mut me)?
            }
            Verify::Deferred { .. } if op.kind == Kind::Balance => {
                balance_promised(ledger, &op, promises)?
            }
            _ => transaction(ledger, &op, verify, &mut trusted, &mut me, promises)?,
        }
        let us = t.elapsed().as_micros().max(1) as u64;
        let h = match me.per_kind.entry(op.kind) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(
                Histogram::new_with_bounds(1, 3_600_000_000, 3)
                    .map_err(|e| Failure(format!("a histogram: {e}")))?,
            ),
        };
        h.saturating_record(us);
        me.done += 1;
    }
    Ok(me)
}

/// One transaction through `transact` or (immediate) `transact_proved`, waited until durable,
/// its answer checked.
fn transaction(
    ledger: &Ledger,
    op: &Op,
    verify: Verify,
    trusted: &mut Digest,
    me: &mut Client,
    promises: &Promises,
) -> Result<(), Failure> {
    // What the body saw and wrote on its last attempt.
    type Seen = BTreeMap<Key, i64>;
    let body = |tx: &mut cairn_ledger::LedgerTx<'_>| {
        let mut seen = Seen::new();
        let mut failed = None;
        let writes = execute(op, |key| {
            if let Some(&v) = seen.get(&key) {
                return Ok(v);
            }
            let (table, k) = table_key(key);
            let v = match tx.get(table, k) {
                Ok(bytes) => decode(bytes.as_deref())?,
                Err(e) => {
                    let message = e.to_string();
                    failed = Some(e);
                    return Err(message);
                }
            };
            seen.insert(key, v);
            Ok(v)
        });
        if let Some(e) = failed {
            return Err(e);
        }
        // The only error `execute` makes itself: a balance that does not decode.
        let writes = writes.map_err(|detail| cairn_ledger::Error::Corrupted {
            what: format!("an account read by transaction {}", op.seq),
            detail,
        })?;
        let mut wrote = Seen::new();
        for &(key, v) in writes.iter().flatten() {
            let (table, k) = table_key(key);
            tx.insert(table, k, v.to_be_bytes())?;
            wrote.insert(key, v);
        }
        Ok((seen, writes.is_none(), wrote))
    };
    let context = || format!("transaction {} of client {}", op.seq, op.client);
    if verify != Verify::Immediate {
        let ((seen, aborted, wrote), made) = ledger.transact(b"", body).context(context)?;
        if aborted {
            me.aborted += 1;
        }
        if let Some(made) = made {
            made.durability.wait().context(context)?;
            promises.committed.fetch_add(1, Ordering::AcqRel);
            me.log.push((made.version, *op));
            if verify != Verify::None {
                // Deferred: the reads as of the version before, the writes as of the version.
                let at = Instant::now();
                let mut batch = Vec::with_capacity(seen.len() + wrote.len());
                batch.extend(seen.iter().map(|(&key, &value)| Promised {
                    version: made.version - 1,
                    key,
                    value,
                    at,
                    read: true,
                }));
                batch.extend(wrote.iter().map(|(&key, &value)| Promised {
                    version: made.version,
                    key,
                    value,
                    at,
                    read: false,
                }));
                promises.add(batch);
            }
        }
        return Ok(());
    }
    let ((seen, aborted, wrote), made) = ledger.transact_proved(b"", body).context(context)?;
    if aborted {
        me.aborted += 1;
    }
    let Some(made) = made else {
        return Ok(());
    };
    made.committed.durability.wait().context(context)?;
    promises.committed.fetch_add(1, Ordering::AcqRel);
    me.log.push((made.committed.version, *op));
    // The client's checks: the digest extends the one it trusts...
    let digest = made.committed.digest;
    let consistency = ledger
        .prove_consistency(trusted.size, digest.size)
        .context(context)?;
    verify_consistency(trusted, &digest, &consistency)
        .map_err(|e| Failure(format!("{}: consistency refused: {e:?}", context())))?;
    *trusted = digest;
    let consistency_bytes = consistency.encoded_len() as u64;
    me.proof_bytes += consistency_bytes;
    // ...the reads were those values as of the version before...
    match &made.reads {
        Some(reads) => {
            check_keys(reads, &seen, &digest, false)
                .map_err(|e| Failure(format!("{}: the receipt of its reads: {e}", context())))?;
            let bytes = reads.read.receipt.encoded_len() as u64;
            me.verified_reads += seen.len() as u64;
            me.read_proof_bytes += bytes + consistency_bytes;
            me.proof_bytes += bytes;
        }
        None if !seen.is_empty() => {
            return Err(Failure(format!(
                "{}: no receipt for its reads at version {}",
                context(),
                made.committed.version
            )))
        }
        None => {}
    }
    // ...and the writes are the values now.
    check_keys(&made.writes, &wrote, &digest, true)
        .map_err(|e| Failure(format!("{}: the receipt of its writes: {e}", context())))?;
    me.verified_writes += wrote.len() as u64;
    me.proof_bytes += made.writes.read.receipt.encoded_len() as u64;
    Ok(())
}

/// A Balance in immediate mode: a read with a receipt, checked fresh.
fn balance_verified(
    ledger: &Ledger,
    op: &Op,
    trusted: &mut Digest,
    me: &mut Client,
) -> Result<(), Failure> {
    let context = || format!("Balance {} of client {}", op.seq, op.client);
    let key = op.a.to_be_bytes();
    let read = ledger
        .read(&[(CHECKING, &[key][..]), (SAVINGS, &[key][..])])
        .context(context)?;
    let consistency = ledger
        .prove_consistency(trusted.size, read.digest.size)
        .context(context)?;
    verify_consistency(trusted, &read.digest, &consistency)
        .map_err(|e| Failure(format!("{}: consistency refused: {e:?}", context())))?;
    *trusted = read.digest;
    let checking = [Claim::answer(&key, read.values[0][0].as_deref())];
    let savings = [Claim::answer(&key, read.values[1][0].as_deref())];
    let claims = [
        TableClaims {
            table: CHECKING,
            claims: &checking,
        },
        TableClaims {
            table: SAVINGS,
            claims: &savings,
        },
    ];
    verify_receipt(&read.receipt, &claims, &read.digest)
        .map_err(|e| Failure(format!("{}: receipt refused: {e:?}", context())))?;
    for v in read.values.iter().flatten() {
        decode(v.as_deref()).map_err(|e| Failure(format!("{}: {e}", context())))?;
    }
    let bytes = (read.receipt.encoded_len() + consistency.encoded_len()) as u64;
    me.verified_reads += 2;
    me.read_proof_bytes += bytes;
    me.proof_bytes += bytes;
    Ok(())
}

/// A Balance in deferred mode: the two values as of the newest version, kept as promises.
fn balance_promised(ledger: &Ledger, op: &Op, promises: &Promises) -> Result<(), Failure> {
    let context = || format!("Balance {} of client {}", op.seq, op.client);
    let key = op.a.to_be_bytes();
    let (version, values) = ledger
        .read_values(&[(CHECKING, &[key][..]), (SAVINGS, &[key][..])])
        .context(context)?;
    let at = Instant::now();
    let mut batch = Vec::with_capacity(2);
    for (k, v) in [Key::Checking(op.a), Key::Savings(op.a)]
        .into_iter()
        .zip(&values)
    {
        let value = decode(v[0].as_deref()).map_err(|e| Failure(format!("{}: {e}", context())))?;
        batch.push(Promised {
            version,
            key: k,
            value,
            at,
            read: true,
        });
    }
    promises.add(batch);
    Ok(())
}

/// A value a client was answered and will have verified later: `key` held `value` as of
/// `version`.
struct Promised {
    version: u64,
    key: Key,
    value: i64,
    /// When the client got the answer.
    at: Instant,
    /// A value read (else one written).
    read: bool,
}

/// The promises waiting for the deferred verifier, and the writing transactions committed
/// (for the auditor).
#[derive(Default)]
struct Promises {
    inner: std::sync::Mutex<(Vec<Promised>, bool)>,
    committed: AtomicU64,
}

impl Promises {
    fn add(&self, batch: Vec<Promised>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.0.extend(batch);
    }

    /// Every promise made since the last take, and whether the clients are done.
    fn take(&self) -> (Vec<Promised>, bool) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        (std::mem::take(&mut inner.0), inner.1)
    }

    /// The clients are done: the verifier runs a last batch and stops.
    fn finish(&self) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
    }
}

/// The deferred verifier: every `delay_ms`, the promises made since its last batch are proved
/// (`Ledger::prove_promises`: one receipt per version, against one fresh digest) and checked:
/// the fresh digest consistent with the last it trusted, then each receipt against the values
/// promised (`verify_receipt_at`). A last batch runs when the clients are done.
fn verifier(
    ledger: &Ledger,
    promises: &Promises,
    delay_ms: u64,
    mut trusted: Digest,
) -> Result<super::DeferredFigures, Failure> {
    let mut figures = super::DeferredFigures::default();
    let mut latency = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .map_err(|e| Failure(format!("a histogram: {e}")))?;
    let period = Duration::from_millis(delay_ms);
    let mut next = Instant::now() + period;
    let mut proof_bytes = 0u64;
    let mut reads = 0u64;
    let mut writes = 0u64;
    loop {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next += period;
        let (batch, done) = promises.take();
        if !batch.is_empty() {
            let started = Instant::now();
            proof_bytes += verify_batch(ledger, &batch, &mut trusted, &mut figures)?;
            let end = Instant::now();
            figures.busy_seconds += (end - started).as_secs_f64();
            figures.batches += 1;
            figures.promises += batch.len() as u64;
            for p in &batch {
                latency.saturating_record((end - p.at).as_micros().max(1) as u64);
                if p.read {
                    reads += 1;
                } else {
                    writes += 1;
                }
            }
            // A batch longer than the period starts the next one at once.
            next = next.max(end);
        }
        if done && batch.is_empty() {
            break;
        }
    }
    figures.latency_ms_p50 = latency.value_at_quantile(0.5) as f64 / 1e3;
    figures.latency_ms_p99 = latency.value_at_quantile(0.99) as f64 / 1e3;
    figures.latency_ms_max = latency.max() as f64 / 1e3;
    figures.proof_bytes = proof_bytes;
    figures.reads = reads;
    figures.writes = writes;
    Ok(figures)
}

/// Proves and checks one batch of promises; returns the bytes of its proofs (the receipts and
/// the consistency proof).
fn verify_batch(
    ledger: &Ledger,
    batch: &[Promised],
    trusted: &mut Digest,
    figures: &mut super::DeferredFigures,
) -> Result<u64, Failure> {
    // By version, then table (in name order, as the receipts list them), each key once.
    let mut by_version: BTreeMap<u64, BTreeMap<&'static str, BTreeMap<[u8; 8], i64>>> =
        BTreeMap::new();
    for p in batch {
        let (table, k) = table_key(p.key);
        let keys = by_version
            .entry(p.version)
            .or_default()
            .entry(table)
            .or_default();
        if let Some(&other) = keys.get(&k) {
            if other != p.value {
                return Err(Failure(format!(
                    "two promises of {:?} at version {}: {other} and {}",
                    p.key, p.version, p.value
                )));
            }
        }
        keys.insert(k, p.value);
    }
    let asked: Vec<cairn_ledger::Promise> = by_version
        .iter()
        .flat_map(|(&version, tables)| {
            tables
                .iter()
                .map(move |(table, keys)| cairn_ledger::Promise {
                    version,
                    table: table.to_string(),
                    keys: keys.keys().map(|k| k.to_vec()).collect(),
                })
        })
        .collect();
    let proved = ledger.prove_promises(&asked).map_err(|e| {
        Failure(format!(
            "proving a batch of promises: {e} (a pruned version needs a larger --window)"
        ))
    })?;
    let Some(fresh) = proved.first().map(|r| r.read.digest) else {
        return Ok(0);
    };
    let consistency = ledger
        .prove_consistency(trusted.size, fresh.size)
        .context(|| "the verifier's consistency proof".into())?;
    verify_consistency(trusted, &fresh, &consistency)
        .map_err(|e| Failure(format!("the verifier's consistency proof refused: {e:?}")))?;
    *trusted = fresh;
    let mut bytes = consistency.encoded_len() as u64;
    if proved.len() != by_version.len() {
        return Err(Failure(format!(
            "{} receipts for {} versions",
            proved.len(),
            by_version.len()
        )));
    }
    for (read, (version, tables)) in proved.iter().map(|p| &p.read).zip(&by_version) {
        if read.version != *version || read.digest != fresh {
            return Err(Failure(format!(
                "a receipt of version {} against size {}, asked {version} against {}",
                read.version, read.digest.size, fresh.size
            )));
        }
        let values: Vec<Vec<[u8; 8]>> = tables
            .values()
            .map(|keys| keys.values().map(|v| v.to_be_bytes()).collect())
            .collect();
        let claims: Vec<Vec<Claim<'_>>> = tables
            .values()
            .zip(&values)
            .map(|(keys, values)| {
                keys.keys()
                    .zip(values)
                    .map(|(k, v)| Claim::present(k, v))
                    .collect()
            })
            .collect();
        let table_claims: Vec<TableClaims<'_>> = tables
            .keys()
            .zip(&claims)
            .map(|(table, claims)| TableClaims { table, claims })
            .collect();
        verify_receipt_at(&read.receipt, &table_claims, &fresh).map_err(|e| {
            Failure(format!(
                "the receipt of version {version}'s promises refused: {e:?}"
            ))
        })?;
        bytes += read.receipt.encoded_len() as u64;
        figures.versions_proved += 1;
    }
    Ok(bytes)
}

/// Checks that `keys`' receipt proves exactly `expected` (the values the transaction saw or
/// wrote) against `digest`: as of the version before (`fresh` false) or fresh.
fn check_keys(
    keys: &ProvedKeys,
    expected: &BTreeMap<Key, i64>,
    digest: &Digest,
    fresh: bool,
) -> Result<(), String> {
    let mut bytes: Vec<Vec<(Vec<u8>, [u8; 8])>> = Vec::new();
    let mut count = 0;
    for (table, keys) in &keys.keys {
        let mut claims = Vec::new();
        for k in keys {
            let id = u64::from_be_bytes(k[..].try_into().map_err(|_| "a key is not 8 bytes")?);
            let key = match table.as_str() {
                CHECKING => Key::Checking(id),
                SAVINGS => Key::Savings(id),
                other => return Err(format!("the receipt names table {other:?}")),
            };
            let v = expected
                .get(&key)
                .ok_or_else(|| format!("the receipt names {key:?}, which was not touched"))?;
            claims.push((k.clone(), v.to_be_bytes()));
            count += 1;
        }
        bytes.push(claims);
    }
    if count != expected.len() {
        return Err(format!(
            "the receipt covers {count} keys, the transaction touched {}",
            expected.len()
        ));
    }
    let claims: Vec<Vec<Claim<'_>>> = bytes
        .iter()
        .map(|c| c.iter().map(|(k, v)| Claim::present(k, v)).collect())
        .collect();
    let tables: Vec<TableClaims<'_>> = keys
        .keys
        .iter()
        .zip(&claims)
        .map(|((table, _), claims)| TableClaims { table, claims })
        .collect();
    let result = if fresh {
        verify_receipt(&keys.read.receipt, &tables, digest)
    } else {
        verify_receipt_at(&keys.read.receipt, &tables, digest)
    };
    result.map_err(|e| format!("refused: {e:?}"))
}

/// Every account's balances, read in batches: (savings, checking) by account.
pub fn balances(ledger: &Ledger, accounts: u64) -> Result<Vec<(i64, i64)>, Failure> {
    let mut out = Vec::with_capacity(accounts as usize);
    let mut first = 0;
    while first < accounts {
        let keys: Vec<[u8; 8]> = (first..(first + LOAD_BATCH).min(accounts))
            .map(u64::to_be_bytes)
            .collect();
        let read = ledger
            .read(&[(SAVINGS, &keys[..]), (CHECKING, &keys[..])])
            .context(|| "reading the balances".into())?;
        for (s, c) in read.values[0].iter().zip(&read.values[1]) {
            let s = decode(s.as_deref()).map_err(Failure)?;
            let c = decode(c.as_deref()).map_err(Failure)?;
            out.push((s, c));
        }
        first += LOAD_BATCH;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The deferred verifier refuses a promise the ledger does not back: a wrong value, or a
    /// right value at the wrong version.
    #[test]
    fn the_verifier_refuses_forged_promises() {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, _) = load(dir.path(), 10, cairn_proof::HashKind::Sha256, 1, 16).unwrap();
        let loaded = ledger.digest();
        let (_, made) = ledger
            .transact(b"", |tx| {
                tx.insert(CHECKING, 3u64.to_be_bytes(), 7i64.to_be_bytes())
            })
            .unwrap();
        let v = made.unwrap().version;
        let promise = |version, value| Promised {
            version,
            key: Key::Checking(3),
            value,
            at: Instant::now(),
            read: true,
        };
        let mut figures = crate::ledger_bench::DeferredFigures::default();
        let mut trusted = loaded;
        verify_batch(&ledger, &[promise(v, 7)], &mut trusted, &mut figures).unwrap();
        verify_batch(
            &ledger,
            &[promise(v - 1, CHECKING_START)],
            &mut trusted,
            &mut figures,
        )
        .unwrap();
        for forged in [promise(v, 8), promise(v - 1, 7), promise(v, CHECKING_START)] {
            let mut trusted = loaded;
            assert!(verify_batch(&ledger, &[forged], &mut trusted, &mut figures).is_err());
        }
    }
}

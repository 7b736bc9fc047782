//! Tests of the linearizability checker through its public API: hand-written histories with
//! known verdicts, histories made by running a sequential model concurrently (linearizable by
//! construction) and their mutations (not), differential runs against `todc-utils`'s WGL
//! checker and against a brute-force search, the recorder, the budgets, and a timing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cairn_raft::lincheck::{
    check, check_with, Budget, History, HistoryError, Op, Operation, Options, Outcome, RecordError,
    Recorder, Ret,
};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Helpers

fn bytes(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn val(s: &str) -> Option<Vec<u8>> {
    Some(bytes(s))
}

fn get(k: &str) -> Op {
    Op::Get { key: bytes(k) }
}

fn put(k: &str, v: Option<&str>) -> Op {
    Op::Put {
        key: bytes(k),
        value: v.map(bytes),
    }
}

fn cas(k: &str, expect: Option<&str>, value: Option<&str>) -> Op {
    Op::Cas {
        key: bytes(k),
        expect: expect.map(bytes),
        value: value.map(bytes),
    }
}

fn txn(expects: &[(&str, Option<&str>)], writes: &[(&str, Option<&str>)]) -> Op {
    let pairs = |list: &[(&str, Option<&str>)]| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        list.iter().map(|(k, v)| (bytes(k), v.map(bytes))).collect()
    };
    Op::Txn {
        expects: pairs(expects),
        writes: pairs(writes),
    }
}

fn done(client: u64, invoke_ns: u64, response_ns: u64, op: Op, ret: Ret) -> Operation {
    Operation::completed(client, invoke_ns, response_ns, op, ret)
}

fn history(operations: Vec<Operation>) -> History {
    History::new(operations).expect("a well-formed history")
}

fn assert_linearizable(operations: Vec<Operation>) {
    let history = history(operations);
    let outcome = check(&history);
    assert!(
        outcome.is_linearizable(),
        "expected linearizable, got: {outcome}"
    );
}

/// Asserts the history is not linearizable and returns the stuck operation and the prefix.
fn assert_not_linearizable(operations: Vec<Operation>) -> (usize, Vec<usize>) {
    let history = history(operations);
    match check(&history) {
        Outcome::NotLinearizable(violation) => {
            let page = violation.explain(&history);
            assert!(page.contains("<- stuck"), "{page}");
            (violation.stuck_op, violation.longest_prefix)
        }
        other => panic!("expected not linearizable, got: {other}"),
    }
}

/// The specification, written apart from the checker's: a sorted map.
fn apply_model(state: &mut BTreeMap<Vec<u8>, Vec<u8>>, op: &Op) -> Ret {
    fn set(state: &mut BTreeMap<Vec<u8>, Vec<u8>>, key: &[u8], value: &Option<Vec<u8>>) {
        match value {
            Some(value) => state.insert(key.to_vec(), value.clone()),
            None => state.remove(key),
        };
    }
    match op {
        Op::Get { key } => Ret::Get(state.get(key).cloned()),
        Op::Put { key, value } => {
            set(state, key, value);
            Ret::Put
        }
        Op::Cas { key, expect, value } => {
            let holds = state.get(key) == expect.as_ref();
            if holds {
                set(state, key, value);
            }
            Ret::Cas(holds)
        }
        Op::Txn { expects, writes } => {
            let holds = expects.iter().all(|(k, v)| state.get(k) == v.as_ref());
            if holds {
                for (k, v) in writes {
                    set(state, k, v);
                }
            }
            Ret::Txn(holds)
        }
    }
}

/// A small deterministic generator (SplitMix64), so that a failing case prints its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What a generated history may contain.
#[derive(Clone, Copy, Debug)]
struct Mix {
    clients: usize,
    keys: usize,
    values: usize,
    operations: usize,
    /// Percent of operations whose client dies or times out (unknown outcome).
    unknown_percent: u64,
    /// Whether operations other than Get and Put appear.
    cas_and_txn: bool,
    /// Whether transactions may touch several keys.
    multi_key_txn: bool,
}

fn random_value(rng: &mut Rng, mix: &Mix) -> Option<Vec<u8>> {
    let pick = rng.below(mix.values as u64 + 1);
    (pick > 0).then(|| format!("v{pick}").into_bytes())
}

fn random_key(rng: &mut Rng, mix: &Mix) -> Vec<u8> {
    format!("k{}", rng.below(mix.keys as u64)).into_bytes()
}

fn random_op(rng: &mut Rng, mix: &Mix, state: &BTreeMap<Vec<u8>, Vec<u8>>) -> Op {
    let kinds = if mix.cas_and_txn { 4 } else { 2 };
    let key = random_key(rng, mix);
    // Expectations often match, so that Cas and Txn succeed about half the time.
    let expect_for = |rng: &mut Rng, key: &Vec<u8>| {
        if rng.chance(50) {
            state.get(key).cloned()
        } else {
            random_value(rng, mix)
        }
    };
    match rng.below(kinds) {
        0 => Op::Get { key },
        1 => Op::Put {
            key,
            value: random_value(rng, mix),
        },
        2 => {
            let expect = expect_for(rng, &key);
            Op::Cas {
                key,
                expect,
                value: random_value(rng, mix),
            }
        }
        _ => {
            let other = if mix.multi_key_txn {
                random_key(rng, mix)
            } else {
                key.clone()
            };
            let mut expects = vec![(key.clone(), expect_for(rng, &key))];
            if rng.chance(50) {
                expects.push((other.clone(), expect_for(rng, &other)));
            }
            let writes = vec![
                (other, random_value(rng, mix)),
                (key, random_value(rng, mix)),
            ];
            Op::Txn { expects, writes }
        }
    }
}

/// Where a simulated client is.
enum Client {
    Idle,
    /// Invoked operation `index`, not yet applied.
    Invoked(usize),
    /// Operation `index` was applied (its linearization point) and answered `ret`.
    Applied(usize, Ret),
}

/// Runs `mix.operations` operations of `mix.clients` concurrent clients against a sequential
/// model: each takes effect at one instant between its invocation and its response, so the
/// history is linearizable by construction. Some clients die (unknown outcome), before or
/// after their operation took effect. Times advance by 0 to 3 ns an event, so ties occur.
fn simulate(seed: u64, mix: &Mix) -> History {
    let mut rng = Rng(seed);
    let mut state = BTreeMap::new();
    let mut clients: Vec<Client> = (0..mix.clients).map(|_| Client::Idle).collect();
    let mut operations: Vec<Operation> = Vec::new();
    let mut clock_ns = 0u64;
    let mut busy = 0usize;
    while operations.len() < mix.operations || busy > 0 {
        clock_ns += rng.below(4);
        let c = rng.below(mix.clients as u64) as usize;
        let client = std::mem::replace(&mut clients[c], Client::Idle);
        clients[c] = match client {
            Client::Idle if operations.len() < mix.operations => {
                let op = random_op(&mut rng, mix, &state);
                operations.push(Operation::unknown(c as u64, clock_ns, op));
                busy += 1;
                Client::Invoked(operations.len() - 1)
            }
            Client::Idle => Client::Idle,
            Client::Invoked(_) if rng.chance(mix.unknown_percent / 2) => {
                // Dies before its operation takes effect: it never does.
                busy -= 1;
                Client::Idle
            }
            Client::Invoked(index) => {
                let ret = apply_model(&mut state, &operations[index].op);
                Client::Applied(index, ret)
            }
            Client::Applied(_, _) if rng.chance(mix.unknown_percent / 2) => {
                // Took effect, but the answer was lost.
                busy -= 1;
                Client::Idle
            }
            Client::Applied(index, ret) => {
                operations[index] = Operation::completed(
                    c as u64,
                    operations[index].invoke_ns,
                    clock_ns,
                    operations[index].op.clone(),
                    ret,
                );
                busy -= 1;
                Client::Idle
            }
        };
    }
    history(operations)
}

/// Sets a completed Get's answer to a value never written; returns its place, if there is one.
fn corrupt_a_read(history: &History, pick: usize) -> Option<(History, usize)> {
    let mut operations = history.operations().to_vec();
    let reads: Vec<usize> = operations
        .iter()
        .enumerate()
        .filter(|(_, op)| op.response.is_some() && matches!(op.op, Op::Get { .. }))
        .map(|(i, _)| i)
        .collect();
    if reads.is_empty() {
        return None;
    }
    let index = reads[pick % reads.len()];
    if let Some(response) = &mut operations[index].response {
        response.ret = Ret::Get(val("never written"));
    }
    Some((History::new(operations).ok()?, index))
}

// ---------------------------------------------------------------------------------------------
// Hand-written histories

#[test]
fn empty_history_is_linearizable() {
    assert_linearizable(vec![]);
}

#[test]
fn stale_read_after_completed_write_is_rejected() {
    // c1 |--put x=1--|
    // c2                |--get x -> absent--|
    let (stuck, prefix) = assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 20, 30, get("x"), Ret::Get(None)),
    ]);
    assert_eq!(stuck, 1);
    assert_eq!(prefix, vec![0]);
}

#[test]
fn stale_read_of_an_overwritten_value_is_rejected() {
    // c1 |-put x=1-|  |-put x=2-|
    // c2                           |-get x -> 1-|
    assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(1, 20, 30, put("x", Some("2")), Ret::Put),
        done(2, 40, 50, get("x"), Ret::Get(val("1"))),
    ]);
}

#[test]
fn concurrent_read_of_either_old_or_new_value_is_accepted() {
    // c1 |-put x=1-|  |---------put x=2---------|
    // c2                 |-get x -> ?-|
    for seen in [val("1"), val("2")] {
        assert_linearizable(vec![
            done(1, 0, 10, put("x", Some("1")), Ret::Put),
            done(1, 20, 60, put("x", Some("2")), Ret::Put),
            done(2, 30, 40, get("x"), Ret::Get(seen)),
        ]);
    }
}

#[test]
fn reads_must_not_go_back_once_a_concurrent_write_was_seen() {
    // c1 |---------------put x=1---------------|
    // c2   |-get x -> 1-|
    // c3                  |-get x -> absent-|
    assert_not_linearizable(vec![
        done(1, 0, 100, put("x", Some("1")), Ret::Put),
        done(2, 10, 20, get("x"), Ret::Get(val("1"))),
        done(3, 30, 40, get("x"), Ret::Get(None)),
    ]);
}

#[test]
fn concurrent_writes_may_take_effect_in_reverse_order() {
    // Three overlapping puts, then reads that see them in the reverse of their invocations.
    assert_linearizable(vec![
        done(1, 0, 100, put("x", Some("1")), Ret::Put),
        done(2, 1, 100, put("x", Some("2")), Ret::Put),
        done(3, 2, 100, put("x", Some("3")), Ret::Put),
        done(4, 10, 20, get("x"), Ret::Get(val("3"))),
        done(4, 30, 40, get("x"), Ret::Get(val("2"))),
        done(4, 50, 60, get("x"), Ret::Get(val("1"))),
    ]);
}

#[test]
fn lost_acknowledged_write_is_rejected() {
    // An acknowledged put that later reads never see.
    assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 20, 30, get("x"), Ret::Get(None)),
        done(3, 40, 50, get("x"), Ret::Get(None)),
    ]);
    // An acknowledged Cas rolled back (say by a leader that lost it): the old value returns.
    assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 20, 30, cas("x", Some("1"), Some("2")), Ret::Cas(true)),
        done(3, 40, 50, get("x"), Ret::Get(val("1"))),
    ]);
}

#[test]
fn deletes_are_writes_of_absence() {
    assert_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(1, 20, 30, put("x", None), Ret::Put),
        done(2, 40, 50, get("x"), Ret::Get(None)),
    ]);
    assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(1, 20, 30, put("x", None), Ret::Put),
        done(2, 40, 50, get("x"), Ret::Get(val("1"))),
    ]);
}

#[test]
fn unknown_outcome_put_whose_value_is_later_read_is_accepted() {
    // c1 |-put x=1 ... (timed out)
    // c2                             |-get x -> 1-|
    assert_linearizable(vec![
        Operation::unknown(1, 0, put("x", Some("1"))),
        done(2, 1_000, 1_010, get("x"), Ret::Get(val("1"))),
    ]);
}

#[test]
fn unknown_outcome_put_never_read_is_accepted() {
    assert_linearizable(vec![
        Operation::unknown(1, 0, put("x", Some("1"))),
        done(2, 1_000, 1_010, get("x"), Ret::Get(None)),
        done(2, 2_000, 2_010, get("x"), Ret::Get(None)),
    ]);
}

#[test]
fn unknown_outcome_put_takes_effect_at_most_once() {
    // Seen, then unseen, then seen again: no single point explains it.
    assert_not_linearizable(vec![
        Operation::unknown(1, 0, put("x", Some("1"))),
        done(2, 10, 20, get("x"), Ret::Get(val("1"))),
        done(3, 30, 40, get("x"), Ret::Get(None)),
    ]);
    // Nor can it take effect before it was invoked.
    assert_not_linearizable(vec![
        done(2, 10, 20, get("x"), Ret::Get(val("1"))),
        Operation::unknown(1, 30, put("x", Some("1"))),
    ]);
}

#[test]
fn unknown_outcome_put_may_take_effect_late() {
    // Unseen by a read after its invocation, seen by a later one.
    assert_linearizable(vec![
        Operation::unknown(1, 0, put("x", Some("1"))),
        done(2, 10, 20, get("x"), Ret::Get(None)),
        done(3, 30, 40, get("x"), Ret::Get(val("1"))),
    ]);
}

#[test]
fn unknown_outcome_get_constrains_nothing() {
    assert_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        Operation::unknown(2, 20, get("x")),
        done(3, 30, 40, get("x"), Ret::Get(val("1"))),
    ]);
}

#[test]
fn failed_cas_later_observed_as_applied_is_rejected() {
    // The Cas said "conflict", yet its value shows up and nobody else wrote it.
    let (stuck, _) = assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 20, 30, cas("x", Some("1"), Some("2")), Ret::Cas(false)),
        done(3, 40, 50, get("x"), Ret::Get(val("2"))),
    ]);
    assert!(stuck == 1 || stuck == 2, "stuck at {stuck}");
}

#[test]
fn failed_cas_against_a_concurrent_change_is_accepted() {
    // c1 |-put x=1-|  |--------put x=3--------|
    // c2                |-cas x 1->2: false-|
    // c3                                         |-get x -> 3-|
    assert_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(1, 20, 60, put("x", Some("3")), Ret::Put),
        done(2, 25, 50, cas("x", Some("1"), Some("2")), Ret::Cas(false)),
        done(3, 70, 80, get("x"), Ret::Get(val("3"))),
    ]);
}

#[test]
fn successful_cas_that_could_not_match_is_rejected() {
    assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 20, 30, cas("x", Some("7"), Some("2")), Ret::Cas(true)),
    ]);
}

#[test]
fn unknown_outcome_cas_observed_as_applied_is_accepted() {
    assert_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        Operation::unknown(2, 20, cas("x", Some("1"), Some("2"))),
        done(3, 100, 110, get("x"), Ret::Get(val("2"))),
    ]);
    // But it cannot apply when its expectation never held.
    assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        Operation::unknown(2, 20, cas("x", Some("9"), Some("2"))),
        done(3, 100, 110, get("x"), Ret::Get(val("2"))),
    ]);
}

#[test]
fn touching_intervals_count_as_overlapping() {
    // The read answers at 10, the put is invoked at 10: either order is allowed.
    assert_linearizable(vec![
        done(1, 0, 10, get("x"), Ret::Get(val("1"))),
        done(2, 10, 20, put("x", Some("1")), Ret::Put),
    ]);
    // One nanosecond apart they are ordered.
    assert_not_linearizable(vec![
        done(1, 0, 9, get("x"), Ret::Get(val("1"))),
        done(2, 10, 20, put("x", Some("1")), Ret::Put),
    ]);
}

#[test]
fn initial_contents_are_honoured() {
    let history = history(vec![done(1, 0, 10, get("x"), Ret::Get(val("0")))]);
    assert!(matches!(check(&history), Outcome::NotLinearizable(_)));
    let options = Options {
        initial: BTreeMap::from([(bytes("x"), bytes("0"))]),
        ..Options::default()
    };
    assert_eq!(check_with(&history, &options), Outcome::Linearizable);
}

#[test]
fn keys_are_independent() {
    // Each key on its own is fine, whatever the interleaving of keys.
    assert_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 0, 10, put("y", Some("1")), Ret::Put),
        done(3, 20, 30, get("y"), Ret::Get(val("1"))),
        done(3, 40, 50, get("x"), Ret::Get(val("1"))),
    ]);
    // A stale read on one key is reported with that key alone.
    let history = history(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 0, 10, put("y", Some("1")), Ret::Put),
        done(3, 20, 30, get("y"), Ret::Get(None)),
        done(3, 40, 50, get("x"), Ret::Get(val("1"))),
    ]);
    match check(&history) {
        Outcome::NotLinearizable(violation) => {
            assert_eq!(violation.keys, vec![bytes("y")]);
            assert_eq!(violation.operations, vec![1, 2]);
            assert_eq!(violation.stuck_op, 2);
        }
        other => panic!("expected not linearizable, got: {other}"),
    }
}

#[test]
fn transactions_apply_atomically_across_keys() {
    // The transaction writes x and y at once. c2 sees its x, then c2 sees y still absent:
    // each key alone has an order, both together do not.
    let operations = vec![
        done(
            1,
            0,
            100,
            txn(&[], &[("x", Some("1")), ("y", Some("1"))]),
            Ret::Txn(true),
        ),
        done(2, 10, 20, get("x"), Ret::Get(val("1"))),
        done(2, 30, 40, get("y"), Ret::Get(None)),
    ];
    let history = history(operations);
    match check(&history) {
        Outcome::NotLinearizable(violation) => {
            assert_eq!(violation.keys, vec![bytes("x"), bytes("y")]);
            assert_eq!(violation.operations, vec![0, 1, 2]);
        }
        other => panic!("expected not linearizable, got: {other}"),
    }
    // Seeing both, or neither, is fine.
    assert_linearizable(vec![
        done(
            1,
            0,
            100,
            txn(&[], &[("x", Some("1")), ("y", Some("1"))]),
            Ret::Txn(true),
        ),
        done(2, 10, 20, get("x"), Ret::Get(None)),
        done(2, 30, 40, get("y"), Ret::Get(val("1"))),
    ]);
}

#[test]
fn transactions_check_their_expectations() {
    // A money transfer: expects both balances, writes both; a second one that expected the
    // old balances must fail.
    let transfer = || {
        txn(
            &[("a", Some("10")), ("b", Some("0"))],
            &[("a", Some("5")), ("b", Some("5"))],
        )
    };
    let setup = || txn(&[], &[("a", Some("10")), ("b", Some("0"))]);
    assert_linearizable(vec![
        done(1, 0, 10, setup(), Ret::Txn(true)),
        done(2, 20, 30, transfer(), Ret::Txn(true)),
        done(3, 25, 35, transfer(), Ret::Txn(false)),
        done(4, 40, 50, get("a"), Ret::Get(val("5"))),
    ]);
    // Both succeeding is a double spend.
    assert_not_linearizable(vec![
        done(1, 0, 10, setup(), Ret::Txn(true)),
        done(2, 20, 30, transfer(), Ret::Txn(true)),
        done(3, 25, 35, transfer(), Ret::Txn(true)),
    ]);
    // A transaction touching no key always succeeds.
    assert_linearizable(vec![done(1, 0, 10, txn(&[], &[]), Ret::Txn(true))]);
    assert_not_linearizable(vec![done(1, 0, 10, txn(&[], &[]), Ret::Txn(false))]);
}

#[test]
fn malformed_histories_are_refused() {
    let backwards = vec![done(1, 10, 5, get("x"), Ret::Get(None))];
    assert_eq!(
        History::new(backwards),
        Err(HistoryError::ResponseBeforeInvoke {
            index: 0,
            invoke_ns: 10,
            response_ns: 5
        })
    );
    let mismatch = vec![
        done(1, 0, 5, get("x"), Ret::Get(None)),
        done(1, 6, 7, get("x"), Ret::Put),
    ];
    assert_eq!(
        History::new(mismatch),
        Err(HistoryError::RetMismatch { index: 1 })
    );
}

/// Twelve overlapping writes of `key`, then two reads one after the other that see the first
/// and the second value written: not linearizable, and only found so after the search has
/// tried every set of the other ten writes placed first.
fn hard_for_the_search(key: &str) -> Vec<Operation> {
    let mut operations: Vec<Operation> = (0..12)
        .map(|c| done(c, 0, 1_000, put(key, Some(&format!("{c}"))), Ret::Put))
        .collect();
    operations.push(done(98, 2_000, 2_010, get(key), Ret::Get(val("0"))));
    operations.push(done(99, 2_020, 2_030, get(key), Ret::Get(val("1"))));
    operations
}

#[test]
fn a_value_nobody_writes_is_refused_without_a_search() {
    // The history that took the search every order of the twelve writes before the check
    // counted who may still write each value a read needs: one step is enough now.
    let mut operations: Vec<Operation> = (0..12)
        .map(|c| done(c, 0, 1_000, put("x", Some(&format!("{c}"))), Ret::Put))
        .collect();
    operations.push(done(99, 2_000, 2_010, get("x"), Ret::Get(val("nobody"))));
    let one_step = Options {
        steps_max: 1,
        ..Options::default()
    };
    match check_with(&history(operations), &one_step) {
        Outcome::NotLinearizable(violation) => {
            assert_eq!(violation.stuck_op, 12);
            assert!(violation.longest_prefix.is_empty());
        }
        other => panic!("expected not linearizable, got: {other}"),
    }
}

#[test]
fn a_value_overwritten_for_good_ends_the_branch() {
    // c1 |-put x=1-|
    // c2 |-put x=2-|
    // c3             |-get x -> 1-| |-get x -> 2-| |-get x -> 1-|
    // Two reads need 1 and nobody writes it after put x=1: placing put x=2 after it loses 1
    // for good, so that branch ends at once (not after every order of what follows), and the
    // other order loses 2, which the second read needs. The longest prefix tried is the
    // first, with the read of 1 that cannot follow it.
    let (stuck, prefix) = assert_not_linearizable(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 0, 10, put("x", Some("2")), Ret::Put),
        done(3, 20, 30, get("x"), Ret::Get(val("1"))),
        done(3, 40, 50, get("x"), Ret::Get(val("2"))),
        done(3, 60, 70, get("x"), Ret::Get(val("1"))),
    ]);
    assert_eq!(stuck, 2);
    assert_eq!(prefix, vec![0, 1]);
}

#[test]
fn budgets_end_the_search_with_unknown() {
    // Many overlapping writes of distinct values, then two reads one after the other that see
    // two of them: the search must try the orders of the other writes before giving up (the
    // two seen are never both last).
    let history = history(hard_for_the_search("x"));
    let few_steps = Options {
        steps_max: 100,
        ..Options::default()
    };
    match check_with(&history, &few_steps) {
        Outcome::Unknown(exhausted) => {
            assert_eq!(exhausted.budget, Budget::Steps);
            assert_eq!(exhausted.steps, 100);
            assert_eq!(exhausted.keys, vec![bytes("x")]);
        }
        other => panic!("expected unknown, got: {other}"),
    }
    let little_memo = Options {
        memo_bytes_max: 1_000,
        ..Options::default()
    };
    match check_with(&history, &little_memo) {
        Outcome::Unknown(exhausted) => assert_eq!(exhausted.budget, Budget::MemoBytes),
        other => panic!("expected unknown, got: {other}"),
    }
    // With the default budgets the memo makes short work of it.
    assert!(matches!(check(&history), Outcome::NotLinearizable(_)));
}

#[test]
fn a_violation_elsewhere_outranks_an_exhausted_partition() {
    let mut operations = hard_for_the_search("x");
    operations.push(done(1, 0, 10, put("y", Some("1")), Ret::Put));
    operations.push(done(2, 20, 30, get("y"), Ret::Get(None)));
    let options = Options {
        steps_max: 50,
        ..Options::default()
    };
    match check_with(&history(operations), &options) {
        Outcome::NotLinearizable(violation) => assert_eq!(violation.keys, vec![bytes("y")]),
        other => panic!("expected not linearizable, got: {other}"),
    }
}

#[test]
fn violation_explains_itself() {
    let history = history(vec![
        done(1, 0, 10, put("x", Some("1")), Ret::Put),
        done(2, 20, 30, get("x"), Ret::Get(None)),
        Operation::unknown(3, 25, put("x", Some("\u{1}binary"))),
    ]);
    let Outcome::NotLinearizable(violation) = check(&history) else {
        panic!("expected not linearizable");
    };
    let page = violation.explain(&history);
    assert!(page.contains("prefix #1"), "{page}");
    assert!(page.contains("<- stuck"), "{page}");
    assert!(page.contains("Get \"x\" -> absent"), "{page}");
    assert!(page.contains("\\x01binary"), "{page}");
    assert!(page.contains("-> unknown"), "{page}");
    println!("{page}");
}

// ---------------------------------------------------------------------------------------------
// The recorder

#[test]
fn recorder_records_a_linearizable_store_from_many_threads() {
    // A store that is linearizable by construction: one lock around a map.
    let store = Arc::new(Mutex::new(BTreeMap::new()));
    let recorder = Recorder::new();
    let threads: Vec<_> = (0..4u64)
        .map(|client| {
            let (store, recorder) = (Arc::clone(&store), recorder.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(client);
                let mix = Mix {
                    clients: 4,
                    keys: 3,
                    values: 3,
                    operations: 0,
                    unknown_percent: 0,
                    cas_and_txn: true,
                    multi_key_txn: true,
                };
                for i in 0..300 {
                    let op = random_op(&mut rng, &mix, &store.lock().expect("lock").clone());
                    let id = recorder.invoke(client, op.clone());
                    let ret = apply_model(&mut store.lock().expect("lock"), &op);
                    if i % 50 == 49 {
                        // A client that times out.
                        recorder.fail_unknown(id).expect("open");
                    } else {
                        recorder
                            .complete(id, ret)
                            .expect("open and of the right kind");
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("client thread");
    }
    let history = recorder.history();
    assert_eq!(history.len(), 1_200);
    let outcome = check(&history);
    assert!(outcome.is_linearizable(), "{outcome}");
}

#[test]
fn recorder_catches_a_store_that_loses_writes() {
    // A "replica" that acknowledges a put without applying it.
    let recorder = Recorder::new();
    let id = recorder.invoke(1, put("x", Some("1")));
    recorder.complete(id, Ret::Put).expect("open");
    let id = recorder.invoke(2, get("x"));
    recorder.complete(id, Ret::Get(None)).expect("open");
    assert!(matches!(
        check(&recorder.history()),
        Outcome::NotLinearizable(_)
    ));
}

#[test]
fn recorder_refuses_bad_answers() {
    let recorder = Recorder::new();
    let other = Recorder::new();
    let id = recorder.invoke(1, get("x"));
    assert_eq!(
        recorder.complete(id, Ret::Put),
        Err(RecordError::RetMismatch(id))
    );
    assert_eq!(
        other.complete(id, Ret::Get(None)),
        Err(RecordError::ForeignId(id))
    );
    assert_eq!(recorder.complete(id, Ret::Get(None)), Ok(()));
    assert_eq!(
        recorder.complete(id, Ret::Get(None)),
        Err(RecordError::AlreadyClosed(id))
    );
    assert_eq!(
        recorder.fail_unknown(id),
        Err(RecordError::AlreadyClosed(id))
    );
    // An operation still waiting counts as of unknown outcome.
    let pending = recorder.invoke(2, put("x", Some("1")));
    let history = recorder.history();
    assert_eq!(pending.index(), 1);
    assert_eq!(history.operations()[1].response, None);
    let first = &history.operations()[0];
    let response = first.response.as_ref().expect("completed");
    assert!(response.response_ns >= first.invoke_ns);
    assert!(check(&history).is_linearizable());
}

// ---------------------------------------------------------------------------------------------
// Generated histories

fn small_mix(clients: usize, keys: usize, operations: usize, unknown_percent: u64) -> Mix {
    Mix {
        clients,
        keys,
        values: 3,
        operations,
        unknown_percent,
        cas_and_txn: true,
        multi_key_txn: true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sequential_histories_from_the_model_are_linearizable(
        seed in any::<u64>(),
        keys in 1usize..4,
        count in 0usize..60,
    ) {
        // One client at a time: each operation answered before the next is invoked.
        let mix = small_mix(1, keys, count, 0);
        let history = simulate(seed, &mix);
        let outcome = check(&history);
        prop_assert!(outcome.is_linearizable(), "seed {}: {}", seed, outcome);
    }

    #[test]
    fn concurrent_histories_from_the_model_are_linearizable(
        seed in any::<u64>(),
        clients in 1usize..7,
        keys in 1usize..4,
        count in 0usize..80,
        unknown_percent in prop_oneof![Just(0u64), 1u64..30],
    ) {
        let history = simulate(seed, &small_mix(clients, keys, count, unknown_percent));
        let outcome = check(&history);
        prop_assert!(outcome.is_linearizable(), "seed {}: {}", seed, outcome);
    }

    #[test]
    fn a_read_of_a_value_never_written_is_not_linearizable(
        seed in any::<u64>(),
        clients in 1usize..7,
        keys in 1usize..4,
        count in 1usize..80,
        unknown_percent in prop_oneof![Just(0u64), 1u64..30],
        pick in any::<usize>(),
    ) {
        let history = simulate(seed, &small_mix(clients, keys, count, unknown_percent));
        let Some((mutated, index)) = corrupt_a_read(&history, pick) else {
            return Ok(());
        };
        match check(&mutated) {
            Outcome::NotLinearizable(violation) => {
                prop_assert!(violation.operations.contains(&index));
            }
            other => prop_assert!(false, "seed {}: read {} mutated, got {}", seed, index, other),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Differential checks

mod todc_oracle {
    use todc_utils::linearizability::history::{Action, History as TodcHistory};
    use todc_utils::linearizability::WGLChecker;
    use todc_utils::specifications::Specification;

    use super::*;

    /// A register whose value may be absent: todc's view of one key.
    pub struct Register;

    #[derive(Clone, Debug)]
    pub enum RegisterOp {
        Read(Option<Vec<u8>>),
        Write(Option<Vec<u8>>),
    }

    impl Specification for Register {
        type State = Option<Vec<u8>>;
        type Operation = RegisterOp;

        fn init() -> Self::State {
            None
        }

        fn apply(op: &RegisterOp, state: &Self::State) -> (bool, Self::State) {
            match op {
                RegisterOp::Read(value) => (value == state, state.clone()),
                RegisterOp::Write(value) => (true, value.clone()),
            }
        }
    }

    /// todc's verdict on a history of completed Gets and Puts of one key: its events sorted by
    /// time, invocations before responses at equal times (as the checker under test orders
    /// them). Each client's operations are sequential, which todc's pairing needs.
    pub fn is_linearizable(history: &History) -> bool {
        let mut events: Vec<(u64, u8, usize)> = Vec::new();
        for (i, operation) in history.operations().iter().enumerate() {
            let response = operation.response.as_ref().expect("completed");
            events.push((operation.invoke_ns, 0, i));
            events.push((response.response_ns, 1, i));
        }
        events.sort();
        let actions = events
            .into_iter()
            .map(|(_, kind, i)| {
                let operation = &history.operations()[i];
                let response = operation.response.as_ref().expect("completed");
                let op = match (&operation.op, &response.ret) {
                    (Op::Get { .. }, Ret::Get(value)) => RegisterOp::Read(value.clone()),
                    (Op::Put { value, .. }, Ret::Put) => RegisterOp::Write(value.clone()),
                    other => panic!("not a register operation: {other:?}"),
                };
                let process = operation.client as usize;
                (
                    process,
                    if kind == 0 {
                        Action::Call(op)
                    } else {
                        Action::Response(op)
                    },
                )
            })
            .collect();
        WGLChecker::<Register>::is_linearizable(TodcHistory::from_actions(actions))
    }
}

/// Compares the checker with todc's on generated one-key histories of Gets and Puts, all
/// completed, of up to `operations_max` operations and `clients_max` clients, half with up to
/// two reads changed; returns the count of each verdict.
fn compare_with_todc(
    seeds: std::ops::Range<u64>,
    operations_max: u64,
    clients_max: u64,
) -> (u64, u64) {
    let (mut linearizable, mut not) = (0, 0);
    for seed in seeds {
        let mut rng = Rng(seed ^ 0x5eed);
        let mix = Mix {
            clients: 1 + rng.below(clients_max) as usize,
            keys: 1,
            values: 3,
            operations: 1 + rng.below(operations_max) as usize,
            unknown_percent: 0,
            cas_and_txn: false,
            multi_key_txn: false,
        };
        let mut operations = simulate(seed, &mix).into_operations();
        if rng.chance(50) {
            for _ in 0..1 + rng.below(2) {
                let i = rng.below(operations.len() as u64) as usize;
                let operation = &mut operations[i];
                if let (Op::Get { .. }, Some(response)) = (&operation.op, &mut operation.response) {
                    response.ret = Ret::Get(random_value(&mut rng, &mix));
                }
            }
        }
        let history = History::new(operations).expect("well-formed");
        let ours = check(&history);
        let theirs = todc_oracle::is_linearizable(&history);
        assert_eq!(
            ours.is_linearizable(),
            theirs,
            "seed {seed}: {ours}\n{history:#?}"
        );
        assert!(!matches!(ours, Outcome::Unknown(_)));
        if theirs {
            linearizable += 1;
        } else {
            not += 1;
        }
    }
    (linearizable, not)
}

#[test]
fn agrees_with_todc_on_single_register_histories() {
    let (small_lin, small_not) = compare_with_todc(0..3_000, 10, 4);
    let (large_lin, large_not) = compare_with_todc(10_000..11_000, 30, 9);
    println!(
        "todc agreement: up to 10 operations: {small_lin} linearizable, {small_not} not; \
         up to 30: {large_lin} linearizable, {large_not} not; all agreed"
    );
    assert!(
        small_lin > 300 && small_not > 300,
        "{small_lin} / {small_not}: too one-sided"
    );
    assert!(
        large_lin > 100 && large_not > 100,
        "{large_lin} / {large_not}: too one-sided"
    );
}

/// Whether some order of `history`'s operations explains it, by trying every order (completed
/// operations must all be placed; those of unknown outcome may be placed or left out).
fn brute_force(history: &History) -> bool {
    fn search(
        ops: &[Operation],
        placed: &mut Vec<bool>,
        state: &BTreeMap<Vec<u8>, Vec<u8>>,
    ) -> bool {
        let all_completed_placed = ops
            .iter()
            .zip(placed.iter())
            .all(|(op, placed)| *placed || op.response.is_none());
        if all_completed_placed {
            return true;
        }
        for i in 0..ops.len() {
            if placed[i] {
                continue;
            }
            // Every unplaced operation that answered before `i` was invoked must come first.
            let blocked = (0..ops.len()).any(|j| {
                !placed[j]
                    && ops[j]
                        .response
                        .as_ref()
                        .is_some_and(|r| r.response_ns < ops[i].invoke_ns)
            });
            if blocked {
                continue;
            }
            let mut next = state.clone();
            let ret = apply_model(&mut next, &ops[i].op);
            if ops[i].response.as_ref().is_some_and(|r| r.ret != ret) {
                continue;
            }
            placed[i] = true;
            let found = search(ops, placed, &next);
            placed[i] = false;
            if found {
                return true;
            }
        }
        false
    }
    let ops = history.operations();
    search(ops, &mut vec![false; ops.len()], &BTreeMap::new())
}

/// Compares the checker with [`brute_force`] on generated histories of up to `operations_max`
/// operations, two in three with one answer changed; returns the count of each verdict.
fn compare_with_brute_force(seeds: std::ops::Range<u64>, operations_max: u64) -> (u64, u64) {
    let (mut linearizable, mut not) = (0, 0);
    for seed in seeds {
        let mut rng = Rng(seed ^ 0xb417);
        let mix = Mix {
            clients: 1 + rng.below(4) as usize,
            keys: 1 + rng.below(3) as usize,
            values: 2,
            operations: 1 + rng.below(operations_max) as usize,
            unknown_percent: rng.below(40),
            cas_and_txn: true,
            multi_key_txn: true,
        };
        let history = simulate(seed, &mix);
        let mut operations = history.into_operations();
        if rng.below(3) > 0 {
            let i = rng.below(operations.len() as u64) as usize;
            let op = operations[i].op.clone();
            if let Some(response) = &mut operations[i].response {
                response.ret = match op {
                    Op::Get { .. } => Ret::Get(random_value(&mut rng, &mix)),
                    Op::Put { .. } => Ret::Put,
                    Op::Cas { .. } => Ret::Cas(rng.chance(50)),
                    Op::Txn { .. } => Ret::Txn(rng.chance(50)),
                };
            }
        }
        let history = History::new(operations).expect("well-formed");
        let ours = check(&history);
        let theirs = brute_force(&history);
        assert_eq!(
            ours.is_linearizable(),
            theirs,
            "seed {seed}: {ours}\n{history:#?}"
        );
        assert!(!matches!(ours, Outcome::Unknown(_)));
        if theirs {
            linearizable += 1;
        } else {
            not += 1;
        }
    }
    (linearizable, not)
}

#[test]
fn agrees_with_brute_force_on_small_transactional_histories() {
    let (linearizable, not) = compare_with_brute_force(0..3_000, 7);
    println!("brute-force agreement: {linearizable} linearizable, {not} not, all agreed");
    assert!(
        linearizable > 300 && not > 300,
        "{linearizable} / {not}: too one-sided"
    );
}

/// Compares the checker with [`brute_force`] on histories of up to 8 operations with random
/// intervals and random answers (mostly not linearizable), a third of unknown outcome.
fn compare_random_intervals_with_brute_force(seeds: std::ops::Range<u64>) -> (u64, u64) {
    let (mut linearizable, mut not) = (0, 0);
    for seed in seeds {
        let mut rng = Rng(seed);
        let mix = Mix {
            clients: 1,
            keys: 1 + rng.below(2) as usize,
            values: 2,
            operations: 0,
            unknown_percent: 0,
            cas_and_txn: true,
            multi_key_txn: true,
        };
        let mut operations = Vec::new();
        for client in 0..1 + rng.below(8) {
            let op = random_op(&mut rng, &mix, &BTreeMap::new());
            let invoke_ns = rng.below(20);
            if rng.chance(35) {
                operations.push(Operation::unknown(client, invoke_ns, op));
                continue;
            }
            let response_ns = invoke_ns + rng.below(12);
            let ret = match op {
                Op::Get { .. } => Ret::Get(random_value(&mut rng, &mix)),
                Op::Put { .. } => Ret::Put,
                Op::Cas { .. } => Ret::Cas(rng.chance(50)),
                Op::Txn { .. } => Ret::Txn(rng.chance(50)),
            };
            operations.push(done(client, invoke_ns, response_ns, op, ret));
        }
        let history = history(operations);
        let ours = check(&history);
        let theirs = brute_force(&history);
        assert_eq!(
            ours.is_linearizable(),
            theirs,
            "seed {seed}: {ours}\n{history:#?}"
        );
        if theirs {
            linearizable += 1;
        } else {
            not += 1;
        }
    }
    (linearizable, not)
}

#[test]
fn agrees_with_brute_force_on_random_interval_histories() {
    let (linearizable, not) = compare_random_intervals_with_brute_force(0..20_000);
    println!("brute-force agreement, random intervals: {linearizable} linearizable, {not} not");
    assert!(
        linearizable > 2_000 && not > 2_000,
        "{linearizable} / {not}: too one-sided"
    );
}

/// All the differential checks, longer: `cargo test --release --test lincheck -- --ignored`.
#[test]
#[ignore]
fn differential_soak() {
    let (linearizable, not) = compare_with_brute_force(1_000_000..1_100_000, 9);
    println!("brute force, generated: {linearizable} linearizable, {not} not");
    let (linearizable, not) = compare_random_intervals_with_brute_force(1_000_000..1_200_000);
    println!("brute force, random intervals: {linearizable} linearizable, {not} not");
    let (linearizable, not) = compare_with_todc(1_000_000..1_020_000, 30, 9);
    println!("todc: {linearizable} linearizable, {not} not");
}

// ---------------------------------------------------------------------------------------------
// Timing

/// Checks `history`, prints how long it took, and returns the verdict.
fn timed_check(label: &str, history: &History) -> Outcome {
    let start = Instant::now();
    let outcome = check(history);
    let elapsed = start.elapsed();
    let unknown = history
        .operations()
        .iter()
        .filter(|op| op.response.is_none())
        .count();
    println!(
        "lincheck timing: {label}: {} operations ({unknown} of unknown outcome) checked in \
         {:.1} ms: {}",
        history.len(),
        elapsed.as_secs_f64() * 1e3,
        if outcome.is_linearizable() {
            "linearizable"
        } else {
            "not linearizable"
        }
    );
    outcome
}

#[test]
fn timing_10_000_operations_over_100_keys_and_16_clients() {
    let mix = Mix {
        clients: 16,
        keys: 100,
        values: 5,
        operations: 10_000,
        unknown_percent: 2,
        cas_and_txn: true,
        multi_key_txn: false,
    };
    let history = simulate(42, &mix);
    let outcome = timed_check("100 keys, 16 clients", &history);
    assert!(outcome.is_linearizable(), "{outcome}");
    // The same with one read changed to a value never written.
    let (mutated, index) = corrupt_a_read(&history, 5_000).expect("a completed read");
    let outcome = timed_check("100 keys, 16 clients, one read corrupted", &mutated);
    match outcome {
        Outcome::NotLinearizable(violation) => assert!(violation.operations.contains(&index)),
        other => panic!("expected not linearizable, got: {other}"),
    }
    // All on one key: one partition of 10,000 operations.
    let history = simulate(42, &Mix { keys: 1, ..mix });
    let outcome = timed_check("1 key, 16 clients", &history);
    assert!(outcome.is_linearizable(), "{outcome}");
}

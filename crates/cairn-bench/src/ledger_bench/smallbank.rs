//! SmallBank as LedgerBench runs it (issue 46): the six transactions, the operation stream every
//! engine receives, and the model that checks the balances an engine ends with.
//!
//! Owns: [`Kind`], [`Op`], [`Stream`] (one client's operations, drawn from the seed), [`Model`].
//! May call: `keys` (the generator), `txn` (the Zipfian draw). Must never touch: an engine.
//!
//! Money is integer (i64): every account starts with [`SAVINGS_START`] in savings and
//! [`CHECKING_START`] in checking (issue 46). The transactions, as BenchBase defines them, with
//! the amounts this benchmark draws ([`DEPOSIT`] and the others):
//!
//! - **Balance(a)**: reads savings\[a\] and checking\[a\]; writes nothing.
//! - **DepositChecking(a, v)**: checking\[a\] += v.
//! - **TransactSavings(a, v)**: savings\[a\] += v, aborted (no write) if that is negative.
//! - **Amalgamate(a, b)**: t = savings\[a\] + checking\[a\]; both set to 0; checking\[b\] += t.
//! - **WriteCheck(a, v)**: t = savings\[a\] + checking\[a\]; checking\[a\] −= v, or v + 1 if
//!   t < v (a penalty).
//! - **SendPayment(a, b, v)**: checking\[a\] −= v and checking\[b\] += v, aborted if
//!   checking\[a\] < v.
//!
//! With a = b each reads a key once and applies the steps in that order (the immudb peer does the
//! same: `crates/cairn-bench/peers/immudb/smallbank.go`).

use crate::keys::SplitMix64;
use crate::txn::Zipf;

/// Savings of an account after the load.
pub const SAVINGS_START: i64 = 1000;
/// Checking of an account after the load.
pub const CHECKING_START: i64 = 50;
/// DepositChecking's amount.
pub const DEPOSIT: i64 = 1;
/// TransactSavings' amount.
pub const TRANSACT: i64 = 20;
/// WriteCheck's amount.
pub const CHECK: i64 = 5;
/// SendPayment's amount.
pub const PAYMENT: i64 = 5;

/// The six transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Balance,
    DepositChecking,
    TransactSavings,
    Amalgamate,
    WriteCheck,
    SendPayment,
}

impl Kind {
    /// Every kind, in the order above (a draw's index).
    pub const ALL: [Kind; 6] = [
        Kind::Balance,
        Kind::DepositChecking,
        Kind::TransactSavings,
        Kind::Amalgamate,
        Kind::WriteCheck,
        Kind::SendPayment,
    ];

    /// The name the immudb peer's protocol and the records use.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Balance => "Balance",
            Kind::DepositChecking => "DepositChecking",
            Kind::TransactSavings => "TransactSavings",
            Kind::Amalgamate => "Amalgamate",
            Kind::WriteCheck => "WriteCheck",
            Kind::SendPayment => "SendPayment",
        }
    }
}

/// One transaction of one client's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// Its client (0-based).
    pub client: u64,
    /// Its place in the client's stream (0-based).
    pub seq: u64,
    /// Which of the six transactions.
    pub kind: Kind,
    /// The account it works on.
    pub a: u64,
    /// The second account (Amalgamate, SendPayment; 0 otherwise).
    pub b: u64,
    /// The amount (0 for Balance and Amalgamate).
    pub amount: i64,
}

impl Op {
    /// The line the immudb peer reads (`T <client> <seq> <type> <a> <b> <amount>`).
    pub fn line(&self) -> String {
        format!(
            "T {} {} {} {} {} {}",
            self.client,
            self.seq,
            self.kind.name(),
            self.a,
            self.b,
            self.amount
        )
    }
}

/// One client's operations: a generator seeded from the run's seed and the client, so that
/// every engine receives the same stream (each engine runs a prefix of it).
pub struct Stream {
    client: u64,
    seq: u64,
    accounts: u64,
    rng: SplitMix64,
    zipf: Option<Zipf>,
}

impl Stream {
    /// Client `client`'s stream over `accounts` accounts, drawn uniformly or (`zipf`) from a
    /// Zipfian law of exponent 0.99.
    pub fn new(seed: u64, client: u64, accounts: u64, zipf: bool) -> Stream {
        Stream {
            client,
            seq: 0,
            accounts,
            rng: SplitMix64::new(seed ^ client.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            zipf: zipf.then(|| Zipf::new(accounts, 0.99)),
        }
    }

    fn account(&mut self) -> u64 {
        match &self.zipf {
            Some(z) => z.draw((self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64),
            None => self.rng.below(self.accounts),
        }
    }
}

impl Iterator for Stream {
    type Item = Op;

    fn next(&mut self) -> Option<Op> {
        let kind = Kind::ALL[self.rng.below(6) as usize];
        let a = self.account();
        let b = match kind {
            Kind::Amalgamate | Kind::SendPayment => self.account(),
            _ => 0,
        };
        let amount = match kind {
            Kind::Balance | Kind::Amalgamate => 0,
            Kind::DepositChecking => DEPOSIT,
            Kind::TransactSavings => TRANSACT,
            Kind::WriteCheck => CHECK,
            Kind::SendPayment => PAYMENT,
        };
        let op = Op {
            client: self.client,
            seq: self.seq,
            kind,
            a,
            b,
            amount,
        };
        self.seq += 1;
        Some(op)
    }
}

/// The two keys of an account a transaction touches: savings and checking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Savings(u64),
    Checking(u64),
}

/// What a transaction does, given a way to read the balances it needs: the writes it makes
/// (`None`: aborted, nothing written). Both the engines' adapters and the model run this one
/// function, so that they cannot disagree on the rules.
pub fn execute(
    op: &Op,
    mut read: impl FnMut(Key) -> Result<i64, String>,
) -> Result<Option<Vec<(Key, i64)>>, String> {
    let (a, b, v) = (op.a, op.b, op.amount);
    Ok(match op.kind {
        Kind::Balance => {
            read(Key::Savings(a))?;
            read(Key::Checking(a))?;
            Some(Vec::new())
        }
        Kind::DepositChecking => Some(vec![(Key::Checking(a), read(Key::Checking(a))? + v)]),
        Kind::TransactSavings => {
            let s = read(Key::Savings(a))? + v;
            (s >= 0).then(|| vec![(Key::Savings(a), s)])
        }
        Kind::Amalgamate => {
            let total = read(Key::Savings(a))? + read(Key::Checking(a))?;
            if a == b {
                // Savings emptied into the same account's checking.
                Some(vec![(Key::Savings(a), 0), (Key::Checking(a), total)])
            } else {
                let to = read(Key::Checking(b))? + total;
                Some(vec![
                    (Key::Savings(a), 0),
                    (Key::Checking(a), 0),
                    (Key::Checking(b), to),
                ])
            }
        }
        Kind::WriteCheck => {
            let s = read(Key::Savings(a))?;
            let c = read(Key::Checking(a))?;
            let debit = if s + c < v { v + 1 } else { v };
            Some(vec![(Key::Checking(a), c - debit)])
        }
        Kind::SendPayment => {
            let from = read(Key::Checking(a))?;
            if from < v {
                None
            } else if a == b {
                Some(vec![(Key::Checking(a), from)])
            } else {
                let to = read(Key::Checking(b))?;
                Some(vec![
                    (Key::Checking(a), from - v),
                    (Key::Checking(b), to + v),
                ])
            }
        }
    })
}

/// The balances every account should hold, the transactions applied in commit order.
pub struct Model {
    savings: Vec<i64>,
    checking: Vec<i64>,
}

impl Model {
    /// Every account as the load leaves it.
    pub fn new(accounts: u64) -> Model {
        Model {
            savings: vec![SAVINGS_START; accounts as usize],
            checking: vec![CHECKING_START; accounts as usize],
        }
    }

    /// Applies `op`; returns whether it committed a write (false: aborted or read-only).
    pub fn apply(&mut self, op: &Op) -> bool {
        let writes = execute(op, |k| Ok(self.get(k))).expect("the model reads every key");
        match writes {
            Some(w) if !w.is_empty() => {
                for (k, v) in w {
                    match k {
                        Key::Savings(a) => self.savings[a as usize] = v,
                        Key::Checking(a) => self.checking[a as usize] = v,
                    }
                }
                true
            }
            _ => false,
        }
    }

    /// The balance of `key`.
    pub fn get(&self, key: Key) -> i64 {
        match key {
            Key::Savings(a) => self.savings[a as usize],
            Key::Checking(a) => self.checking[a as usize],
        }
    }

    /// The money in every account.
    pub fn total(&self) -> i64 {
        self.savings.iter().chain(&self.checking).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_cover_every_kind() {
        let a: Vec<Op> = Stream::new(7, 3, 100, false).take(600).collect();
        let b: Vec<Op> = Stream::new(7, 3, 100, false).take(600).collect();
        assert_eq!(a, b);
        let other: Vec<Op> = Stream::new(7, 4, 100, false).take(600).collect();
        assert_ne!(a, other);
        for kind in Kind::ALL {
            assert!(a.iter().any(|op| op.kind == kind), "{kind:?}");
        }
        assert!(a
            .iter()
            .all(|op| op.a < 100 && op.b < 100 && op.client == 3));
        assert_eq!(a[5].seq, 5);
        assert_eq!(a[0].line().split(' ').count(), 7);
    }

    #[test]
    fn money_changes_only_by_deposits_savings_and_checks() {
        let mut model = Model::new(10);
        let start = model.total();
        let mut change = 0;
        for op in Stream::new(1, 0, 10, false).take(5_000) {
            let before = model.total();
            let debit = if op.kind == Kind::WriteCheck
                && model.get(Key::Savings(op.a)) + model.get(Key::Checking(op.a)) < op.amount
            {
                op.amount + 1
            } else {
                op.amount
            };
            let wrote = model.apply(&op);
            let expected = match op.kind {
                Kind::DepositChecking | Kind::TransactSavings if wrote => op.amount,
                Kind::WriteCheck => -debit,
                _ => 0,
            };
            assert_eq!(model.total() - before, expected, "{op:?}");
            change += expected;
        }
        assert_eq!(model.total(), start + change);
    }

    #[test]
    fn the_rules_of_each_transaction() {
        let mut m = Model::new(3);
        let op = |kind, a, b, amount| Op {
            client: 0,
            seq: 0,
            kind,
            a,
            b,
            amount,
        };
        assert!(!m.apply(&op(Kind::Balance, 0, 0, 0)));
        assert!(m.apply(&op(Kind::Amalgamate, 0, 1, 0)));
        assert_eq!((m.get(Key::Savings(0)), m.get(Key::Checking(0))), (0, 0));
        assert_eq!(m.get(Key::Checking(1)), 50 + 1050);
        // Account 0 is empty: a payment aborts, a check costs the penalty.
        assert!(!m.apply(&op(Kind::SendPayment, 0, 2, 5)));
        assert!(m.apply(&op(Kind::WriteCheck, 0, 0, 5)));
        assert_eq!(m.get(Key::Checking(0)), -6);
        assert!(!m.apply(&op(Kind::TransactSavings, 0, 0, -1)));
        // Amalgamate into itself moves savings to checking.
        assert!(m.apply(&op(Kind::Amalgamate, 2, 2, 0)));
        assert_eq!((m.get(Key::Savings(2)), m.get(Key::Checking(2))), (0, 1050));
    }
}

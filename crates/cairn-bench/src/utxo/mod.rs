//! lsm-tree's UTxO benchmark: its model of the live set ([`live`]), the one driver of its batches
//! ([`driver`]), the loading of an initial table ([`setup::load`]), an engine's directory between
//! `setup` and `run` ([`table`]), and the
//! commands that run it: `utxo quick` ([`quick`], with [`snapshot`]), `utxo setup` ([`setup`]),
//! `utxo run` ([`run`], with its throughput over time: [`throughput`]), `utxo suite` ([`suite`])
//! and `utxo scale` ([`scale`]).
//!
//! Its keys and values are [`crate::keys`]'s, below this module and the engines alike.
//!
//! Owns: the workload, its timing and its checks. May call: an engine only through
//! [`crate::engines::Engine`], except `quick`, which asks the Cairn adapter for the table's shape
//! and snapshots.

pub mod driver;
pub mod live;
pub mod progress;
pub mod quick;
pub mod run;
pub mod scale;
pub mod setup;
pub mod snapshot;
pub mod suite;
pub mod table;
pub mod throughput;

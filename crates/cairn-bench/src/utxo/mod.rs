//! lsm-tree's UTxO benchmark: its keys ([`keys`]), its model of the live set ([`live`]), the one
//! driver of its batches ([`driver`]), the loading of an initial table ([`setup::load`]), and the
//! commands that run it: `utxo quick` ([`quick`], with [`snapshot`]), `utxo setup` ([`setup`]),
//! `utxo run` ([`run`]), `utxo suite` ([`suite`]) and `utxo scale` ([`scale`]).
//!
//! Owns: the workload, its timing and its checks. May call: an engine only through
//! [`crate::engines::Engine`], except `quick`, which asks the Cairn adapter for the table's shape
//! and snapshots.

pub mod driver;
pub mod keys;
pub mod live;
pub mod progress;
pub mod quick;
pub mod run;
pub mod scale;
pub mod setup;
pub mod snapshot;
pub mod suite;

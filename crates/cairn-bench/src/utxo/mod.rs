//! lsm-tree's UTxO benchmark: its keys, its model of the live set, the driver of its batches and
//! the commands that run it (`utxo quick`, `utxo setup`, `utxo run`, `utxo suite`).

pub mod driver;
pub mod keys;
pub mod live;
pub mod progress;
pub mod quick;
pub mod run;
pub mod setup;
pub mod snapshot;
pub mod suite;

//! An engine's directory as `utxo setup` leaves it and `utxo run` finds it: the layout
//! (`<db>/<engine>/table/` for the engine, `setup.json` recording the entries and seed for
//! `run`, `setup-report.json` for `utxo suite --reuse-setup`, `run-state.json` listing the runs
//! applied in place to a peer's table), and the options both open the engine with.
//!
//! Owns: [`SetupState`], [`RunState`] and the paths and options above. Below both [`super::setup`]
//! and [`super::run`], which record and read these, so neither imports the other. Must never
//! touch: an engine.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cli::EngineArgs;
use crate::engines::EngineOptions;
use crate::failure::Failure;
use crate::options::IoArg;
use crate::record::{read_json, write_json};

/// The setup's report, kept beside the table so `utxo suite --reuse-setup` can show it.
pub const SETUP_REPORT: &str = "setup-report.json";

/// What `setup` records for `run`, beside the table.
pub const SETUP_STATE: &str = "setup.json";

/// `setup.json`: what `setup` recorded for `run`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SetupState {
    /// The engine.
    pub engine: String,
    /// Ids `0..entries` were loaded.
    pub entries: u64,
    /// The key seed.
    pub seed: u64,
    /// Seconds of the load (including `finish_load`).
    pub seconds: f64,
}

/// The directory of `engine` under `--db`.
pub fn engine_dir(db: &Path, engine: &str) -> PathBuf {
    db.join(engine)
}

/// The engine's own directory inside its engine directory.
pub fn table_dir(engine_dir: &Path) -> PathBuf {
    engine_dir.join("table")
}

/// How `setup` and `run` open an engine.
pub fn engine_options(args: &EngineArgs, seed: u64) -> EngineOptions {
    EngineOptions {
        direct_io: !args.cached,
        seed,
        write_buffer: args.write_buffer,
        merge_batch_size: args.merge_batch_size,
        io: IoArg::Auto,
        wal: false,
        background_merges: args.background_merges,
        filters_for_hits: args.filters_for_hits,
        read_budget: args.read_budget,
    }
}

/// The setup recorded in the engine directory `dir`.
pub fn read_state(dir: &Path) -> Result<SetupState, Failure> {
    read_json(&dir.join(SETUP_STATE)).map_err(|f| Failure(format!("{f} (run `utxo setup` first)")))
}

/// Whether the engine directory `dir` holds a finished setup of `entries` entries from `seed`
/// that no unfinished run has left in an unknown state (so `utxo suite --reuse-setup` may use
/// it). Any unreadable record means no.
pub fn reusable_setup(dir: &Path, entries: u64, seed: u64) -> bool {
    let same = read_state(dir).is_ok_and(|s| s.entries == entries && s.seed == seed);
    let finished = RunState::load(dir).is_ok_and(|state| !state.in_progress);
    same && finished
}

/// The runs applied in place to a peer's table since its setup (see the module doc).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunState {
    /// A run started and did not record its end: the table's contents are unknown.
    pub in_progress: bool,
    /// The runs applied, in order.
    pub history: Vec<Applied>,
}

/// One run applied to a table.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Applied {
    /// Whether its batches updated the table (serial, pipelined) or only looked up.
    pub with_updates: bool,
    /// Batches run.
    pub batches: u64,
}

/// The file of [`RunState`] in an engine directory.
const RUN_STATE: &str = "run-state.json";

impl RunState {
    /// The state of the engine directory `dir` (no runs when it has no state file).
    pub fn load(dir: &Path) -> Result<RunState, Failure> {
        let path = dir.join(RUN_STATE);
        if path.exists() {
            read_json(&path)
        } else {
            Ok(RunState::default())
        }
    }

    /// Writes the state into the engine directory `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), Failure> {
        write_json(self, &dir.join(RUN_STATE))
    }
}

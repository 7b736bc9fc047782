//! `cairn-bench utxo setup`: builds an engine's initial UTxO table once, for every `utxo run`;
//! and the loading of initial tables, which `utxo quick` and `union` share.
//!
//! Owns: building the table and [`load`]; the directory it builds in and what it records there
//! are [`super::table`]'s. May call: [`Engine`] only (never an engine's own API).
//!
//! `setup` removes and recreates `<db>/<engine>/`, loads ids `0..entries` in chunks of
//! [`SETUP_CHUNK`] (keys and values as in [`crate::keys`]; in key order for an engine that
//! asks for it, [`Engine::wants_sorted_load`]), makes the table durable
//! ([`Engine::finish_load`]) and records the entry count and seed. Its own throughput (load and
//! `finish_load`), peak RSS and bytes read and written are reported.

use std::ops::Range;
use std::time::Instant;

use crate::cli::SetupArgs;
use crate::engines::{Engine, Key, Value};
use crate::failure::{Context, Failure};
use crate::keys::{utxo_key, utxo_value};
use crate::record::{write_json, SetupRecord, SETUP};
use crate::report::terminal;
use crate::sys::proc::{peak_rss_bytes, IoCounters};
use crate::utxo::progress::Progress;
use crate::utxo::table::{
    engine_dir, engine_options, table_dir, SetupState, SETUP_REPORT, SETUP_STATE,
};

/// Entries per load call.
pub const SETUP_CHUNK: usize = 10_000;

/// `utxo setup`.
pub fn setup(args: &SetupArgs) -> Result<(), Failure> {
    let dir = engine_dir(&args.db, args.engine.name());
    if dir.exists() {
        std::fs::remove_dir_all(&dir).context(|| format!("removing {}", dir.display()))?;
    }
    let table_dir = table_dir(&dir);
    std::fs::create_dir_all(&table_dir).context(|| format!("creating {}", table_dir.display()))?;
    let options = engine_options(&args.engine_args, args.seed);
    let io_before = IoCounters::now();
    let engine = args.engine.open(&table_dir, true, &options)?;
    let start = Instant::now();
    let label = format!("setup {}", engine.name());
    load(&*engine, 0..args.entries, args.seed, &label)?;
    engine.finish_load()?;
    let seconds = start.elapsed().as_secs_f64();
    let settings = engine.settings();
    drop(engine);
    let state = SetupState {
        engine: args.engine.name().to_string(),
        entries: args.entries,
        seed: args.seed,
        seconds,
    };
    write_json(&state, &dir.join(SETUP_STATE))?;
    let io = IoCounters::since(IoCounters::now(), io_before);
    let report = SetupRecord {
        benchmark: SETUP.to_string(),
        engine: state.engine.clone(),
        settings,
        entries: args.entries,
        setup_seconds: seconds,
        setup_entries_per_sec: args.entries as f64 / seconds.max(1e-9),
        peak_rss_bytes: peak_rss_bytes(),
        bytes_read: io.map(|io| io.read_bytes),
        bytes_written: io.map(|io| io.write_bytes),
    };
    print!("{}", terminal::setup(&report));
    write_json(&report, &dir.join(SETUP_REPORT))?;
    if let Some(path) = &args.json {
        write_json(&report, path)?;
    }
    Ok(())
}

/// Loads the ids of `ids` into `engine` in chunks of [`SETUP_CHUNK`], in key order when the
/// engine asks for it (all keys generated and sorted first: 48 bytes of memory per entry), with
/// progress lines named `label`; returns the seconds it took.
pub fn load(engine: &dyn Engine, ids: Range<u64>, seed: u64, label: &str) -> Result<f64, Failure> {
    let keyed = ids.map(|id| (utxo_key(id, seed), id));
    if !engine.wants_sorted_load() {
        return load_chunks(keyed, label, |chunk| engine.load(chunk));
    }
    let start = Instant::now();
    let mut sorted: Vec<(Key, u64)> = keyed.collect();
    sorted.sort_unstable_by_key(|&(key, _)| key);
    load_chunks(sorted.into_iter(), label, |chunk| engine.load_sorted(chunk))?;
    Ok(start.elapsed().as_secs_f64())
}

/// Hands `entries` (each key with the id its value is made from) to `put` in chunks of
/// [`SETUP_CHUNK`], in their order, with progress lines named `label` (out of the iterator's size
/// hint, exact for a range or a vector); returns the seconds it took.
pub fn load_chunks(
    entries: impl Iterator<Item = (Key, u64)>,
    label: &str,
    mut put: impl FnMut(&[(Key, Value)]) -> Result<(), Failure>,
) -> Result<f64, Failure> {
    let start = Instant::now();
    let mut progress = Progress::new(label, "entries", entries.size_hint().0 as u64);
    let mut chunk: Vec<(Key, Value)> = Vec::with_capacity(SETUP_CHUNK);
    let mut done = 0;
    let mut entries = entries.peekable();
    while entries.peek().is_some() {
        chunk.clear();
        let next = entries.by_ref().take(SETUP_CHUNK);
        chunk.extend(next.map(|(key, id)| (key, utxo_value(id))));
        let end = done + chunk.len() as u64;
        put(&chunk).context(|| format!("{label}: loading entries {done}..{end}"))?;
        done = end;
        progress.update(done, 1);
    }
    Ok(start.elapsed().as_secs_f64())
}

//! `cairn-bench`: benchmarks for the Cairn storage engine, and for its peers behind the same
//! interface.
//!
//! The commands, and the modules that run them:
//!
//! - `utxo quick`: lsm-tree's UTxO benchmark on a Cairn table in a temporary directory
//!   ([`utxo::quick`]).
//! - `utxo setup`, `utxo run`, `utxo suite`: the same workload on any engine behind
//!   [`engines::Engine`] (Cairn, and with their cargo features RocksDB, LMDB and fjall), the
//!   table built once and used by every run, each run of a suite in a memory cgroup of its own
//!   ([`utxo::setup`], [`utxo::run`], [`utxo::suite`], [`sys::cgroup`]).
//! - `report`: the JSON records of those runs rendered as Markdown with SVG charts ([`report`]).
//! - `upsert`: lsm-tree's upsert benchmark ([`upsert`]).
//! - `union`: lsm-tree's table-union benchmark ([`union`]).
//! - `trie`: an authenticated table's proof sizes and commit costs ([`trie`]).
//! - `chain`, `chain-report`: a synthetic Ethereum sync with hashed and block-ordered keys, on
//!   Cairn and RocksDB ([`chain`]).
//! - `wal`: durable writes through each engine's log ([`wal`]).
//! - `txn`: SmallBank read-modify-write transactions on Cairn's named tables ([`txn`]).
//! - `restart`: a named durable table's time to open and serve its first lookups, cold, after
//!   a clean shutdown and after a kill ([`restart`]).
//! - `history`: the verifiable ledger's history tree: proof sizes and verification rates
//!   ([`history`]).
//! - `ledger-receipts`: the verifiable ledger on a real directory: receipt sizes, receipts
//!   verified per second, the ledger's cost on a commit, the space of a version
//!   ([`ledger_receipts`]).
//! - `ledger-transfer`: a verifiable ledger's export and proved import, what a Raft snapshot
//!   between nodes costs ([`ledger_transfer`]).
//! - `ledger`: LedgerBench's SmallBank with verification on Cairn's ledger and on immudb
//!   v1.11.1 (a Go peer, `peers/immudb/`), side by side ([`ledger_bench`]).
//! - `serve`: the same SmallBank over loopback against `cairn-server` and immudb's own server
//!   ([`serve_bench`]).
//!
//! The parts, each a directory or a file:
//!
//! - [`engines`]: the [`engines::Engine`] trait and one adapter per engine. The Cairn adapter
//!   ([`engines::cairn`]) is the only module that uses the `cairn` crate.
//! - [`utxo`]: the UTxO workload (the live-set model, the one [`utxo::driver`] that `quick` and
//!   `run` share, the loading of initial tables) and its commands.
//! - [`keys`]: the UTxO keys and values and the benchmark's random generator, below the engines
//!   and every workload.
//! - [`options`]: the value enums the command line offers and the modules below it act on
//!   (engine, `chain` configuration, I/O backend, page cache), so that [`cli`] imports no
//!   module that imports it.
//! - [`record`]: every JSON record, one struct each, written by the commands and read by
//!   `report`.
//! - [`report`]: rendering: the results tables on stdout, the Markdown report and its charts.
//! - [`sys`]: the system around the benchmark: `/proc`, memory cgroups, the fio baseline, the
//!   machine, the date and the commit.
//! - [`cli`] (the command line), [`failure`] (the error type), [`stats`] (percentiles and
//!   medians).
//!
//! Generic work is done by well-kept crates, each chosen in the module that uses it: `tabled`
//! for the terminal and Markdown tables ([`report::table`]), `procfs` for `/proc` and
//! `libc::sync` for writing dirty pages back ([`sys::proc`]), `jiff` for dates ([`sys`]),
//! `rand_xoshiro` for the random generator ([`keys`]), `hdrhistogram` for `wal`'s latencies
//! ([`wal`]), `indicatif` for progress bars ([`utxo::progress`]) and `hex`. Kept by hand, each
//! module saying why: the percentiles of kept samples ([`stats`]), the SVG charts
//! ([`report::svg`]), the mount and kernel release readers ([`sys::proc`]) and the generator's
//! `below` ([`keys`]).
//!
//! Imports point one way: no import circle among these modules, nor among a directory module's
//! submodules (`tests/module_graph.rs` checks it).

mod auth;
mod chain;
mod cli;
mod engines;
mod failure;
mod history;
mod keys;
mod ledger_bench;
mod ledger_receipts;
mod ledger_transfer;
mod ledger_window;
mod options;
mod record;
mod report;
mod restart;
mod serve_bench;
mod stats;
mod sys;
mod trie;
mod txn;
mod union;
mod upsert;
mod utxo;
mod wal;

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, UtxoCommand};
use crate::failure::{Context, Failure};
use crate::sys::cgroup;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any engine allocates: every engine's process gets the same allocator settings.
    sys::malloc::fix_mmap_threshold();
    if let Err(failure) = cgroup::join_from_env() {
        eprintln!("cairn-bench: error: {failure}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Utxo(UtxoCommand::Quick(args)) => utxo::quick::run(&args),
        Command::Utxo(UtxoCommand::Setup(args)) => utxo::setup::setup(&args),
        Command::Utxo(UtxoCommand::Run(args)) => utxo::run::run(&args),
        Command::Utxo(UtxoCommand::Suite(args)) => utxo::suite::run(&args),
        Command::Utxo(UtxoCommand::Scale(args)) => utxo::scale::run(&args),
        Command::Union(args) => union::run(&args),
        Command::Upsert(args) => upsert::run(&args),
        Command::Trie(args) => trie::run(&args),
        Command::Auth(args) => auth::run(&args),
        Command::AuthReport(args) => auth::report::write(&args.dir).map(|path| {
            println!("{}", path.display());
        }),
        Command::Wal(args) => wal::run(&args),
        Command::Txn(args) => txn::run(&args),
        Command::History(args) => history::run(&args),
        Command::LedgerReceipts(args) => ledger_receipts::run(&args),
        Command::LedgerWindow(args) => ledger_window::run(&args),
        Command::LedgerTransfer(args) => ledger_transfer::run(&args),
        Command::Ledger(args) => ledger_bench::run(&args),
        Command::LedgerReport(args) => ledger_bench::report_dir(&args.dir).map(|path| {
            println!("{}", path.display());
        }),
        Command::Serve(args) => serve_bench::run(&args),
        Command::ServeReport(args) => serve_bench::report_dir(&args.dir).map(|path| {
            println!("{}", path.display());
        }),
        Command::Restart(args) => restart::run(&args),
        Command::RestartChild(args) => restart::child(&args),
        Command::Report(args) => report::run(&args),
        Command::Chain(args) => chain::run(&args),
        Command::ChainReport(args) => chain::report::write(&args.dir).map(|path| {
            println!("{}", path.display());
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("cairn-bench: error: {failure}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `f` in a fresh temporary directory under `parent` (default: the system's temporary
/// directory), then removes the directory unless `keep`.
pub fn in_temp_dir<T>(
    parent: Option<&Path>,
    keep: bool,
    f: impl FnOnce(&Path) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let dir = match parent {
        Some(parent) => tempfile::tempdir_in(parent)
            .context(|| format!("creating a benchmark directory in {}", parent.display()))?,
        None => tempfile::tempdir().context(|| "creating a benchmark directory".to_string())?,
    };
    eprintln!("benchmark directory: {}", dir.path().display());
    let result = f(dir.path());
    if keep {
        let kept = dir.keep();
        eprintln!("kept the benchmark directory {}", kept.display());
    } else {
        let path = dir.path().to_path_buf();
        dir.close()
            .context(|| format!("removing the benchmark directory {}", path.display()))?;
    }
    result
}

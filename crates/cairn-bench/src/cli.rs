//! The command line: `cairn-bench utxo quick|setup|run|suite`, `union`, `upsert`, `chain` and
//! `report`.
//!
//! Owns: the clap definitions. Must never touch: an engine (the Cairn adapter turns `--io` and
//! `--disk-cache` into Cairn's settings).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::options::{ChainConfig, DiskCacheArg, EngineKind, IoArg};

/// Benchmarks for the Cairn storage engine.
#[derive(Debug, Parser)]
#[command(name = "cairn-bench", version, about)]
pub struct Cli {
    /// The benchmark to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The benchmark families.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// lsm-tree's UTxO benchmark: 34-byte keys, 60-byte values, batches of 256 lookups, 256
    /// inserts and 256 deletes.
    #[command(subcommand)]
    Utxo(UtxoCommand),
    /// lsm-tree's table-union benchmark: lookups on one table, then on the incremental union of
    /// several partly overlapping tables with its full debt, then once the debt is paid off.
    Union(UnionArgs),
    /// lsm-tree's upsert benchmark: insert vs upsert of the same data, and repeated upserts vs
    /// lookup-then-insert of the same keys.
    Upsert(UpsertArgs),
    /// An authenticated table: proof sizes and commit time per key, with and without prefetch.
    Trie(TrieArgs),
    /// Authenticated state side by side: Cairn's authenticated table against the
    /// authenticated-state peers built in (`--features nomt,jmt,alloy-trie`): commit time per
    /// key, proof sizes, proofs made and verified per second, UTxO batches with a root after
    /// each, on the same key and update streams.
    Auth(AuthArgs),
    /// Turn a directory of `auth` records into a Markdown report with SVG charts.
    AuthReport(ReportArgs),
    /// Render `DIR/ledger.json` (a `ledger` record) as `DIR/figures.md` and SVG charts.
    LedgerReport(ReportArgs),
    /// Durable writes through each engine's write-ahead log: durable batches per second and
    /// write-to-durability latency at several writer counts and batch sizes, against the
    /// disk's own fsync rate.
    Wal(WalArgs),
    /// Read-modify-write transactions on Cairn's named durable tables: the SmallBank mix,
    /// committed transactions per second and latency to durability, on one thread and two.
    Txn(TxnArgs),
    /// How long a named durable table of the UTxO shape takes to open and serve its first
    /// batch of lookups, page cache dropped, after a clean shutdown and after a SIGKILL (needs
    /// root to drop the page cache).
    Restart(RestartArgs),
    /// One phase of `restart`, in a child process of its own.
    #[command(hide = true)]
    RestartChild(RestartChildArgs),
    /// The verifiable ledger's history tree (RFC 9162): encoded sizes of inclusion and
    /// consistency proofs at a tree size, and how many of each one core decodes and verifies
    /// per second.
    History(HistoryArgs),
    /// The verifiable ledger on a real directory: receipt sizes
    /// of reads, receipts verified per second on one core, the cost the ledger adds to a
    /// 1,000-key commit against a bare authenticated table, and the space a version takes.
    LedgerReceipts(LedgerReceiptsArgs),
    /// What the verifiable ledger's window of versions kept provable costs: space
    /// per kept version (undo records, trie files), commit time, and the open that rebuilds
    /// it, against the same work with no window.
    LedgerWindow(LedgerWindowArgs),
    /// What moving a verifiable ledger costs (a Raft snapshot is this stream): the
    /// export of a loaded ledger to a file and its proved import into an empty directory
    /// (checksum, roots, the whole audit), timed, with the stream's and the directories' bytes.
    LedgerTransfer(LedgerTransferArgs),
    /// LedgerBench's workloads on Cairn's verifiable ledger and on immudb v1.11.1 side by side:
    /// SmallBank with immediate, deferred or no verification at concurrent clients
    /// (every transaction durable before it is acknowledged, every balance checked), the
    /// deferred delay sweep, verified ranges, block audits beside SmallBank, and storage growth.
    Ledger(LedgerArgs),
    /// Verified SmallBank over loopback against `cairn-server` (HTTP, `cairn-client`) and
    /// immudb v1.11.1's own server (gRPC, its Go client), each server in its own process, at
    /// each client count; then the raw HTTP rate of Cairn's read endpoint under `wrk`.
    Serve(ServeArgs),
    /// Render `DIR/serve.json` (a `serve` record) as `DIR/figures.md` and `DIR/smallbank.svg`.
    ServeReport(ReportArgs),
    /// Turn a directory of JSON records (from `utxo suite` or single runs) into a Markdown
    /// report with SVG charts.
    Report(ReportArgs),
    /// A synthetic Ethereum sync (Geth's key layout) written block by block into Cairn and
    /// RocksDB, with hashed and with block-ordered keys: blocks/s, write amplification,
    /// merges or compactions, space, then read latencies.
    Chain(ChainArgs),
    /// Turn a directory of `chain` records (`chain-*.json`) into `chain.md`.
    ChainReport(ReportArgs),
}

/// Options of `report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The directory of JSON records (`suite.json`, `setup-*.json`, `run-*.json`); the report
    /// and charts are written into it.
    #[arg(long)]
    pub dir: PathBuf,
}

/// The variants of the UTxO benchmark.
#[derive(Debug, Subcommand)]
pub enum UtxoCommand {
    /// Build a table in a temporary directory, then run the batches against it.
    Quick(QuickArgs),
    /// Build the initial table of an engine in `<db>/<engine>` and make it durable (Cairn: a
    /// snapshot), for `utxo run`.
    Setup(SetupArgs),
    /// Open the table `utxo setup` built and run the batches against it.
    Run(RunArgs),
    /// Set up and run every engine in every mode, each run in a memory cgroup of its own with
    /// the page cache dropped before it, then write the report.
    Suite(SuiteArgs),
    /// Cairn alone at several table sizes (a `suite` per size, each table removed after its
    /// runs), then one table of how every cost grows with the table.
    Scale(ScaleArgs),
}

/// Options of `utxo scale`.
#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Parent of the per-size table directories (each removed once its runs are done).
    #[arg(long)]
    pub db: PathBuf,
    /// Directory for the records: one suite directory per size (named by its entries) and
    /// `scale.md` / `scale.json`.
    #[arg(long)]
    pub out: PathBuf,
    /// Table sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000_000u64, 10_000_000, 100_000_000])]
    pub entries: Vec<u64>,
    /// Batches of each run.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batches: u64,
    /// Untimed batches before each measured run.
    #[arg(long, default_value_t = 500)]
    pub warmup_batches: u64,
    /// Seconds to wait after each size's setup before its first run (as `utxo suite
    /// --settle-after-setup-s`).
    #[arg(long, default_value_t = 180)]
    pub settle_after_setup_s: u64,
    #[command(flatten)]
    pub runs: RunsArgs,
    #[command(flatten)]
    pub engine_args: EngineArgs,
}

/// How `utxo suite` and `utxo scale` run each engine's measured runs.
#[derive(Clone, Debug, Args)]
pub struct RunsArgs {
    /// Modes, in order (default: serial, pipelined, lookup-only).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub modes: Vec<RunMode>,
    /// Memory limit of each run's own cgroup (page cache included).
    #[arg(long, default_value = "1G", value_parser = crate::sys::cgroup::parse_size)]
    pub memory_limit: u64,
    /// The fio script (see `utxo run --fio-baseline`), run once per suite on its `--db`, before
    /// its runs.
    #[arg(long, value_name = "PATH")]
    pub fio_baseline: Option<PathBuf>,
    /// Compare every lookup with the model.
    #[arg(long)]
    pub check: bool,
    /// Pipelined runs: batches whose lookups are in flight at once (`utxo run
    /// --pipeline-depth`), the same for every engine.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=8))]
    pub pipeline_depth: u64,
    /// Seed of the key generator.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Ends any run whose timed batches take longer than this many seconds (`utxo run
    /// --max-run-seconds`), the same limit for every engine and mode; each record says which
    /// runs it cut short and how many batches they ran.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_run_seconds: Option<u64>,
}

/// Options of `utxo setup`.
#[derive(Debug, Args)]
pub struct SetupArgs {
    /// The engine.
    #[arg(long, value_enum, default_value_t = EngineKind::Cairn)]
    pub engine: EngineKind,
    /// Directory holding one subdirectory per engine (created if missing).
    #[arg(long)]
    pub db: PathBuf,
    /// Entries of the initial table.
    #[arg(long, default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(256..))]
    pub entries: u64,
    /// Seed of the key generator (recorded for `run`).
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    #[command(flatten)]
    pub engine_args: EngineArgs,
    /// Write the results as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// How `utxo setup` and `utxo run` open an engine.
#[derive(Clone, Debug, Args)]
pub struct EngineArgs {
    /// Read through the page cache instead of with O_DIRECT (where the engine supports it).
    #[arg(long)]
    pub cached: bool,
    /// Cairn: entries of the write buffer.
    #[arg(long, default_value_t = 20_000)]
    pub write_buffer: usize,
    /// Cairn: merge steps done at once.
    #[arg(long, default_value_t = 1_000)]
    pub merge_batch_size: usize,
    /// Cairn: run merge work on the session's background thread
    /// (`SessionOptions::background_merges`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub background_merges: bool,
    /// Build no Bloom filters for the deepest level, where lookups of keys the table holds end
    /// anyway (every UTxO lookup is such a hit): Cairn `TableConfig::last_level_bloom =
    /// Some(BloomAlloc::None)`, RocksDB `optimize_filters_for_hits`, fjall
    /// `expect_point_read_hits`; LMDB has no filters. Applies when the table is set up.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub filters_for_hits: bool,
    /// Cairn: reads in flight that concurrent lookups share, the oldest batch first
    /// (`SessionOptions::read_budget`; 0: none, each batch keeps up to 256 in flight). Only
    /// pipelined runs have concurrent lookups; 128 took the p99.9 batch latency at 100M from
    /// 13.6 to 11.5 ms (medians of 3 and 4 runs, 2026-12-01) at the same throughput.
    #[arg(long, default_value_t = 128)]
    pub read_budget: usize,
}

/// Options of `utxo run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The engine.
    #[arg(long, value_enum, default_value_t = EngineKind::Cairn)]
    pub engine: EngineKind,
    /// The directory given to `utxo setup`.
    #[arg(long)]
    pub db: PathBuf,
    /// Batches to run.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batches: u64,
    /// Untimed batches of the same kind (with updates, or lookups only for `lookup-only`) run
    /// first, so that every engine's measured run starts warmed up the same way.
    #[arg(long, default_value_t = 0)]
    pub warmup_batches: u64,
    /// serial, pipelined (lookups of the next --pipeline-depth batches overlapped with each
    /// batch's update, then corrected) or lookup-only.
    #[arg(long, value_enum, default_value_t = RunMode::Serial)]
    pub mode: RunMode,
    /// Compare every lookup result with an in-memory model.
    #[arg(long)]
    pub check: bool,
    /// Pipelined mode: batches whose lookups are in flight while a batch's update is applied,
    /// each on a worker thread of its own (1: the next batch's only, the two-stage pipeline of
    /// records before 2026-11-30; 3: lsm-tree's four stages on two cores).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=8))]
    pub pipeline_depth: u64,
    #[command(flatten)]
    pub engine_args: EngineArgs,
    /// A script run as `PATH DIR 8` that prints {"qd1_iops":..,"qd32_iops":..} for DIR, run
    /// before the batches on the engine's directory.
    #[arg(long, value_name = "PATH")]
    pub fio_baseline: Option<PathBuf>,
    /// Run in a memory cgroup of its own with this limit (e.g. 1G), page cache included, so
    /// every engine gets the same memory; without cgroup support the run says so and goes on
    /// unlimited.
    #[arg(long, value_parser = crate::sys::cgroup::parse_size)]
    pub memory_limit: Option<u64>,
    /// Write the results as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write each timed batch's milliseconds to this file as CSV (`batch,start_unix_s,lookup_ms,
    /// update_ms,batch_ms`; the start in seconds since the Unix epoch, to line batches up with an
    /// outside trace; in pipelined mode lookups and update overlap, each timed on its own
    /// thread), to find what a slow batch waited for.
    #[arg(long, value_name = "PATH")]
    pub batch_log: Option<PathBuf>,
    /// End the timed batches once this many seconds have passed, after the batch during which
    /// they passed (pipelined: once the batches already in flight are applied and checked);
    /// the record gives the batches that ran and the ones asked for. For a protocol whose
    /// slowest engine would otherwise outlast the machine's time; no limit by default.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_run_seconds: Option<u64>,
}

/// Options of `utxo suite`.
#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// Directory holding one subdirectory per engine (as for `utxo setup`).
    #[arg(long)]
    pub db: PathBuf,
    /// Directory for the JSON records and the report (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Entries of each engine's initial table.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(256..))]
    pub entries: u64,
    /// Timed batches of each serial run, and of the other modes' runs unless given their own
    /// [default: 10000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batches: Option<u64>,
    /// Timed batches of each pipelined run [default: `--batches`].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub pipelined_batches: Option<u64>,
    /// Timed batches of each lookup-only run [default: `--batches`].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub lookup_only_batches: Option<u64>,
    /// The timed batches of every mode from a published protocol: `lsm-tree`, its report's
    /// primary benchmark (section 4.5: 10,000 serial batches, 100,000 pipelined, and 10,000
    /// lookup-only as for serial). It fixes every mode's count, so `--batches`,
    /// `--pipelined-batches` and `--lookup-only-batches` are refused beside it (give them
    /// alone for other counts); `suite.json` records the preset.
    #[arg(
        long,
        value_enum,
        conflicts_with_all = ["batches", "pipelined_batches", "lookup_only_batches"]
    )]
    pub protocol: Option<Protocol>,
    /// Untimed batches before each measured run, the same for every engine (`utxo run
    /// --warmup-batches`): no engine's run is measured cold while another's is warm.
    #[arg(long, default_value_t = 1_000)]
    pub warmup_batches: u64,
    /// Engines, in order (default: every engine this binary was built with).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub engines: Vec<EngineKind>,
    #[command(flatten)]
    pub runs: RunsArgs,
    /// Keep an engine's existing setup when it has the same entries and seed and no failed run.
    #[arg(long)]
    pub reuse_setup: bool,
    /// Leave the page cache alone between runs (by default it is written back and dropped
    /// before every run, so no engine starts with its table cached).
    #[arg(long)]
    pub keep_page_cache: bool,
    /// Remove each engine's directory once its runs are done (for tables too large to keep
    /// side by side).
    #[arg(long)]
    pub remove_after: bool,
    /// Seconds to wait after an engine's setup, its writes flushed (`sync`), before its first
    /// run, the same for every engine. A 100M setup writes about 70 GB and removes most of it
    /// again; on the benchmark machine's virtual disk, reads in the minute after such a setup
    /// stalled for 16-23 ms now and then (in 3 of 5 runs started within a minute of a setup,
    /// in none of 21 started later: `docs/benchmarks/2026-11-27-serial-tail/`), which only
    /// the first run of each engine would pay. Not waited when the setup is reused.
    #[arg(long, default_value_t = 180)]
    pub settle_after_setup_s: u64,
    /// Cairn: the modes whose runs put merges on the session's background thread, comma-
    /// separated (say `serial`, the mode that leaves the second core free; pipelined runs
    /// already use both). Overrides `--background-merges` for the runs; the setup follows
    /// `--background-merges`. Each run's settings name its choice.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub background_merges_modes: Option<Vec<RunMode>>,
    #[command(flatten)]
    pub engine_args: EngineArgs,
}

/// `utxo suite --protocol`: a published protocol's timed batches per mode
/// ([`crate::utxo::suite::mode_batches`] gives them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Protocol {
    /// lsm-tree's report, section 4.5: 10,000 serial and 100,000 pipelined batches (its
    /// lookup-only runs as many as serial).
    LsmTree,
}

impl Protocol {
    /// The name recorded in `suite.json` (the value of the flag).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::LsmTree => "lsm-tree",
        }
    }
}

/// `utxo run --mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RunMode {
    /// Lookups then updates, batch after batch.
    Serial,
    /// Lookups of batch n+1 overlapped with the updates of batch n, then corrected.
    Pipelined,
    /// Only lookups.
    LookupOnly,
}

impl RunMode {
    /// The name used in the report.
    pub fn name(self) -> &'static str {
        match self {
            RunMode::Serial => "serial",
            RunMode::Pipelined => "pipelined",
            RunMode::LookupOnly => "lookup-only",
        }
    }
}

/// Options of `utxo quick`.
#[derive(Debug, Args)]
pub struct QuickArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Entries inserted by the (timed) setup step; at least 256, so a batch can delete 256.
    #[arg(long, value_parser = clap::value_parser!(u64).range(256..))]
    pub entries: u64,
    /// Batches in the run phase, and again in the lookup-only pass.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batches: u64,
    /// serial: lookups then updates in every batch, then a lookup-only pass; lookup-only: only
    /// the lookup-only pass.
    #[arg(long, value_enum, default_value_t = Mode::Serial)]
    pub mode: Mode,
    /// A script run as `PATH DIR 8` that prints {"qd1_iops":..,"qd32_iops":..} for DIR; the
    /// results are then also reported as ratios to its queue-depth-32 random-read IOPS.
    #[arg(long, value_name = "PATH")]
    pub fio_baseline: Option<PathBuf>,
    /// After setup, save the table as snapshot "bench", measure its files, open it again, check
    /// keys through the reopened table and delete the snapshot (kept with `--keep`).
    #[arg(long)]
    pub snapshot: bool,
    /// Run everything twice in this invocation: first as usual, then with the table durable
    /// (a write-ahead log with the default group window logs every update), and report the
    /// ratio of the serial ops/s.
    #[arg(long)]
    pub wal: bool,
    /// Cairn runs merge work on its session's background thread
    /// (`SessionOptions::background_merges`).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub background_merges: bool,
}

/// Options of `union`.
#[derive(Debug, Args)]
pub struct UnionArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Tables in the union; table t holds ids t*N/2 .. t*N/2 + N, so neighbours share half.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub tables: u64,
    /// Entries (N) inserted into each table.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub entries_per_table: u64,
    /// Lookups in each of the three lookup passes (in batches of 256).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub lookups: u64,
    /// Union credits per `supply_union_credits` call while paying the debt off.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub credit_chunk: u64,
}

/// Options of `upsert` (defaults: lsm-tree's parameters).
#[derive(Debug, Args)]
pub struct UpsertArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Distinct keys (64 bytes each, with 64-byte values).
    #[arg(long, default_value_t = 80_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub elements: u64,
    /// Operations per batch.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub batch: u64,
    /// Write-buffer entries of every table (lsm-tree's: 1,000; `--write-buffer` is ignored).
    #[arg(long, default_value_t = 1_000)]
    pub upsert_write_buffer: usize,
    /// How often each key is upserted (or looked up and inserted) in the second comparison.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub upserts_per_key: u64,
    /// Repetitions of every measurement; medians are reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub repeat: u64,
}

/// Options of `history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Leaves of the tree (commits).
    #[arg(long, default_value_t = 1_000_000)]
    pub leaves: u64,
    /// Proofs of each kind made, measured and verified.
    #[arg(long, default_value_t = 1_000)]
    pub samples: usize,
    /// Seconds of verification per kind.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Seed of the leaves and of the indices and sizes proved.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Write the results as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Options of `ledger-receipts`.
#[derive(Debug, Args)]
pub struct LedgerReceiptsArgs {
    /// Parent of the benchmark directory (a fresh temporary directory inside it; default
    /// `target/` of the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the benchmark directory instead of removing it at exit.
    #[arg(long)]
    pub keep: bool,
    /// Keys of the ledger's table `accounts` (and of the bare table it is compared with).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Keys of the ledger's second table `events` (read by the two-table receipts).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub events: u64,
    /// Versions the ledger reaches: the load's versions, then commits of one key each.
    #[arg(long, default_value_t = 1_000_000)]
    pub versions: u64,
    /// Keys per version while loading.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub load_batch: u64,
    /// Reads of each kind whose receipts are measured at the last version.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub samples: u64,
    /// Reads measured at each power-of-two version on the way (receipt size against versions).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub samples_on_the_way: u64,
    /// Receipts of distinct random keys made for the verification rate.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub verify_receipts: u64,
    /// Seconds of verification per figure (one thread).
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Keys of each commit of the commit-cost comparison.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub commit_keys: u64,
    /// Pairs (ledger, bare table) of the commit-cost comparison, per mode; medians reported.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub repetitions: u64,
    /// Commits of one key each, after a checkpoint, whose space is measured (on each side).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub space_commits: u64,
    /// Commits of one key each waited for one by one (the durable commit rate).
    #[arg(long, default_value_t = 2_000)]
    pub waited_commits: u64,
    /// Stop the commits of one key after this many seconds, short of `--versions` if need be
    /// (the record says which version was reached).
    #[arg(long)]
    pub commit_seconds: Option<f64>,
    /// The hash function of the ledger's tables' tries and their proofs (`LedgerConfig::hash`),
    /// and of the bare table's. The history tree and the ledger root are SHA-256 whatever it
    /// says.
    #[arg(long, value_enum, default_value_t = AuthHashArg::Sha256)]
    pub hash: AuthHashArg,
    /// The page cache at the start of each commit-cost comparison: `cold` (dropped: both
    /// tables alike; needs root) or `as-is`.
    #[arg(long, value_enum, default_value_t = CommitCache::Cold)]
    pub commit_cache: CommitCache,
    /// Seed of the keys and of every choice.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Check every value read against a model of the writes, and every receipt measured
    /// against its digest (the verification-rate receipts are always checked).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub check: bool,
    /// Write the results as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The page cache at the start of `ledger-receipts`' commit-cost comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CommitCache {
    /// Dropped (needs root): both tables start from the disk.
    Cold,
    /// As the load left it.
    AsIs,
}

/// Options of `ledger`.
#[derive(Debug, Args)]
pub struct LedgerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// SmallBank accounts (each a key in `savings` and one in `checking`).
    #[arg(long, default_value_t = 100_000)]
    pub accounts: u64,
    /// Concurrent client counts, comma-separated.
    #[arg(long, default_value = "1,4,16,64")]
    pub clients: String,
    /// Verification modes, comma-separated: immediate (every answer checked before the
    /// client's next transaction), deferred (answers kept as promises and verified in batches,
    /// one run per delay of `--delays`), none.
    #[arg(long, default_value = "immediate,deferred,none")]
    pub verify: String,
    /// The deferred verifier's periods, ms, comma-separated: one deferred run each (the
    /// delay sweep: 10,20,40,80,160,320,640,1280).
    #[arg(long, default_value = "20")]
    pub delays: String,
    /// Versions Cairn keeps provable in deferred runs (`LedgerConfig::history`): enough for
    /// every promise of a batch to be proved at its version (a pruned one fails the run).
    #[arg(long, default_value_t = 4096)]
    pub window: u64,
    /// Engines, comma-separated: cairn, immudb.
    #[arg(long, default_value = "cairn,immudb")]
    pub engines: String,
    /// Seconds each Cairn run lasts.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Transactions of each immudb run (split among its clients: each runs the first
    /// `N / clients` of its stream).
    #[arg(long, default_value_t = 2_000)]
    pub peer_transactions: u64,
    /// The immudb peer binary (default: `target/immudb-peer/cairn-immudb-peer`, built by
    /// `crates/cairn-bench/peers/immudb/build.sh` when missing).
    #[arg(long)]
    pub peer: Option<PathBuf>,
    /// Draw accounts from a Zipfian law (exponent 0.99) instead of uniformly.
    #[arg(long)]
    pub zipf: bool,
    /// The hash of Cairn's table tries (the history tree and the ledger root are SHA-256
    /// either way).
    #[arg(long, value_enum, default_value_t = AuthHashArg::Sha256)]
    pub hash: AuthHashArg,
    /// Compare every balance at the end with a model replaying the committed transactions in
    /// the engine's commit order.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub check: bool,
    /// Most transactions one Cairn version holds (the ledger's group commit; 1: a version
    /// per transaction).
    #[arg(long, default_value_t = 1024)]
    pub group: usize,
    /// Workloads, comma-separated: smallbank (every `--verify` mode at every `--clients`),
    /// sweep (deferred verification at every `--sweep-delays` with `--sweep-clients`), range,
    /// audit, storage.
    #[arg(long, default_value = "smallbank")]
    pub workloads: String,
    /// The delay sweep's verifier periods, ms, comma-separated.
    #[arg(long, default_value = "10,20,40,80,160,320,640,1280")]
    pub sweep_delays: String,
    /// Clients of the delay sweep.
    #[arg(long, default_value_t = 16)]
    pub sweep_clients: u64,
    /// Record counts at which the storage workload measures the bytes on disk, comma-separated.
    #[arg(long, default_value = "10000,20000,40000,80000,160000,1000000")]
    pub storage_records: String,
    /// Records per version (Cairn) and per transaction (immudb) of the storage workload.
    #[arg(long, default_value_t = 1000)]
    pub storage_batch: u64,
    /// Keys of the range workload's table.
    #[arg(long, default_value_t = 100_000)]
    pub range_keys: u64,
    /// Also write the record to `DIR/ledger.json` and render it there (`ledger-report`).
    #[arg(long)]
    pub report_dir: Option<PathBuf>,
    /// Transactions per block of the audit workload (its auditor checks a block whenever this
    /// many more have committed).
    #[arg(long, default_value_t = 700)]
    pub audit_block: u64,
}

/// Options of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// SmallBank accounts (each a key in `savings` and one in `checking`).
    #[arg(long, default_value_t = 100_000)]
    pub accounts: u64,
    /// Concurrent client counts, comma-separated.
    #[arg(long, default_value = "1,16,64,256")]
    pub clients: String,
    /// Servers, comma-separated: cairn, immudb, Cairn clusters cairn-raft1 (one
    /// `cairn-server --raft` node) and cairn-raft3 (three, served by the leader), and sharded
    /// ledgers cairn-shard2x3 and cairn-shard4x3 (2 or 4 shards of three nodes behind a
    /// router), in each cell in this order.
    #[arg(long, default_value = "cairn,immudb")]
    pub engines: String,
    /// Seconds each Cairn cell's clients run.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Transactions of each immudb cell (split among its clients: each runs the first
    /// `N / clients` of its stream).
    #[arg(long, default_value_t = 4_000)]
    pub peer_transactions: u64,
    /// Most concurrent transactions sharing a Cairn version (the ledger's `group`).
    #[arg(long, default_value_t = 64)]
    pub group: usize,
    /// Threads of the Cairn clients' runtime (the immudb peer's Go runtime uses every core).
    #[arg(long, default_value_t = 2)]
    pub client_threads: usize,
    /// Draw accounts from a Zipfian law (exponent 0.99) instead of uniformly.
    #[arg(long)]
    pub zipf: bool,
    /// Seed of the operation streams.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Compare every balance at the end with a model replaying the committed transactions in
    /// the server's commit order.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub check: bool,
    /// Seconds of each `wrk` run on Cairn's read endpoint (0: none).
    #[arg(long, default_value_t = 10.0)]
    pub wrk_seconds: f64,
    /// `wrk`'s connection counts, comma-separated.
    #[arg(long, default_value = "16,256")]
    pub wrk_connections: String,
    /// The `cairn-server` binary (default: beside this one, else built with cargo).
    #[arg(long)]
    pub server: Option<PathBuf>,
    /// The `immudb` server binary (default: `target/immudb-peer/immudb`, built by
    /// `crates/cairn-bench/peers/immudb/build-server.sh` when missing).
    #[arg(long)]
    pub immudb: Option<PathBuf>,
    /// The immudb peer binary (default: `target/immudb-peer/cairn-immudb-peer`, built when
    /// missing or stale).
    #[arg(long)]
    pub peer: Option<PathBuf>,
    /// Parent of the temporary benchmark directory (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the benchmark directory.
    #[arg(long)]
    pub keep: bool,
    /// Write the record as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the record to `DIR/serve.json` and render it there (`serve-report`).
    #[arg(long)]
    pub report_dir: Option<PathBuf>,
}

/// Options of `ledger-window`.
#[derive(Debug, Args)]
pub struct LedgerWindowArgs {
    /// Parent of the benchmark directory (a fresh temporary directory inside it; default
    /// `target/` of the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the benchmark directory instead of removing it at exit.
    #[arg(long)]
    pub keep: bool,
    /// Keys of the ledger's table `accounts`.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Keys per version while loading.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub load_batch: u64,
    /// Versions before the newest kept provable on the measured side
    /// (`LedgerConfig::history`).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub window: u64,
    /// Commits after the load, on each side.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub commits: u64,
    /// Random present keys updated by each commit.
    #[arg(long, default_value_t = 1)]
    pub keys_per_commit: u64,
    /// Seed of the keys and of every choice.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// After the reopening, read every key at the oldest kept version and at the newest,
    /// verify the receipts and compare the values with a model.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub check: bool,
    /// Write the results as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Options of `ledger-transfer`.
#[derive(Debug, Args)]
pub struct LedgerTransferArgs {
    /// Parent of the benchmark directory (a fresh temporary directory inside it; default
    /// `target/` of the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the benchmark directory instead of removing it at exit.
    #[arg(long)]
    pub keep: bool,
    /// Keys of the ledger's table `accounts`.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Keys per version while loading.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub load_batch: u64,
    /// Seed of the keys.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Write the results as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Options of `txn`.
#[derive(Debug, Args)]
pub struct TxnArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Accounts (each a key in both tables).
    #[arg(long, default_value_t = 100_000)]
    pub accounts: u64,
    /// Seconds each thread count runs.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Transaction thread counts, comma-separated.
    #[arg(long, default_value = "1,2")]
    pub threads: String,
    /// Draw accounts from a Zipfian law (exponent 0.99) instead of uniformly.
    #[arg(long)]
    pub zipf: bool,
    /// Do not wait for each commit's durability (group commit still fsyncs).
    #[arg(long)]
    pub no_wait: bool,
    /// Check the money at the end against the committed deposits and checks.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub check: bool,
}

/// Options of `wal`.
#[derive(Debug, Args)]
pub struct WalArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Seconds each configuration runs (and the disk's fsync probe).
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Writer thread counts, comma-separated.
    #[arg(long, default_value = "1,4,16,64")]
    pub threads: String,
    /// Updates per batch, comma-separated.
    #[arg(long, default_value = "1,256")]
    pub batch: String,
    /// Engines to run, comma-separated, in this order for every configuration (default: every
    /// engine built in: fjall, rocksdb, cairn).
    #[arg(long)]
    pub engines: Option<String>,
    /// Cairn runs merges on its session's background thread
    /// (`SessionOptions::background_merges`), as RocksDB and fjall compact in the background.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub background_merges: bool,
}

/// Options of `chain`.
#[derive(Clone, Debug, Args)]
pub struct ChainArgs {
    /// Configurations, comma-separated, run one after the other: cairn-hashed, cairn-block,
    /// cairn-block-onetable; rocksdb-hashed, rocksdb-block (`--features rocksdb`). Default:
    /// every one built in.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub configs: Vec<ChainConfig>,
    /// Parent of the temporary benchmark directory (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Directory for the records (`chain-<config>.json`) and the report (`chain.md`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Keep the benchmark directory instead of removing it at exit.
    #[arg(long)]
    pub keep: bool,
    /// Seed of the stream and of the queries.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Blocks in the stream.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..1 << 32))]
    pub blocks: u64,
    /// Transactions per block (one tx lookup entry each).
    #[arg(long, default_value_t = 100)]
    pub txs_per_block: u64,
    /// State writes per block (accounts and storage slots, random 32-byte hashed keys).
    #[arg(long, default_value_t = 200)]
    pub state_writes_per_block: u64,
    /// Percent of the state writes that update a key written earlier (0..99).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..100))]
    pub state_update_percent: u64,
    /// Mean bytes of a block body (each body ±50 %).
    #[arg(long, default_value_t = 40_000)]
    pub body_bytes: usize,
    /// Mean bytes of a block's receipts (±50 %).
    #[arg(long, default_value_t = 30_000)]
    pub receipts_bytes: usize,
    /// Blocks per group of the block prefix (`cairn::BlockKeys::new`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub group_blocks: u64,
    /// Cairn: store bodies and receipts as blobs (`Update::InsertWithBlob`) rather than inline
    /// in overflow pages.
    #[arg(long)]
    pub blobs: bool,
    /// Cairn: the most bytes a table's write buffer holds, e.g. 32M (turned into entries by the
    /// mean size of the table's entries plus 64 bytes of bookkeeping each; a table never gets
    /// more than the default 20,000 entries).
    #[arg(long, default_value = "32M", value_parser = crate::sys::cgroup::parse_size)]
    pub cairn_write_buffer: u64,
    /// RocksDB: Geth's database cache, e.g. 256M: a block cache of this size, memtables of an
    /// eighth of it each, flushed beyond half of it.
    #[arg(long, default_value = "256M", value_parser = crate::sys::cgroup::parse_size)]
    pub rocksdb_cache: u64,
    /// RocksDB: write the WAL (not synced, as Geth does); false leaves it off, to compare the
    /// trees alone (Cairn writes no log).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub rocksdb_wal: bool,
    /// Cairn: how long the settling after the load waits for the background merges.
    #[arg(long, default_value_t = 120)]
    pub settle_timeout_s: u64,
    /// Queries of each kind after the load.
    #[arg(long, default_value_t = 5_000)]
    pub queries: u64,
    /// Compare every read with the value recomputed from the seed.
    #[arg(long)]
    pub check: bool,
    /// Memory limit of each configuration's cgroup (page cache included).
    #[arg(long, default_value = "1G", value_parser = crate::sys::cgroup::parse_size)]
    pub memory_limit: u64,
    /// Run every configuration in this process, one after the other (no child processes, no
    /// cgroups; the write counters are then deltas of this process's).
    #[arg(long)]
    pub in_process: bool,
    /// (Internal) the one configuration a child process runs.
    #[arg(long, hide = true)]
    pub child_config: Option<String>,
    /// (Internal) where a child process writes its record.
    #[arg(long, hide = true)]
    pub child_json: Option<PathBuf>,
    /// (Internal) the directory a child process works in.
    #[arg(long, hide = true)]
    pub child_dir: Option<PathBuf>,
}

/// Options of `trie`.
#[derive(Debug, Args)]
pub struct TrieArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Keys loaded (32 bytes each, with 60-byte values).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Keys per committed batch while loading.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub load_batch: u64,
    /// Single-key proofs sampled, of present and of absent keys each.
    #[arg(long, default_value_t = 1_000)]
    pub samples: u64,
    /// Measured commits (every other one after a prefetch).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..))]
    pub commits: u64,
    /// Updated keys per measured commit.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(4..))]
    pub commit_keys: u64,
}

/// Options of `auth`.
#[derive(Debug, Args)]
pub struct AuthArgs {
    /// Parent of the temporary benchmark directory (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the benchmark directory instead of removing it at exit.
    #[arg(long)]
    pub keep: bool,
    /// Write the results to this file as a JSON array, one record per engine.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the records to `DIR/auth-<keys>.json` and (re)write the report of every
    /// `auth` record in DIR (`auth-report`).
    #[arg(long)]
    pub report_dir: Option<PathBuf>,
    /// Seed of the key paths and of the update streams.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Engines, comma-separated, run one after the other on the same streams: `cairn`,
    /// `cairn-plain`; `nomt`
    /// (`--features nomt`); `jmt-memory`, `jmt-cairn` (`--features jmt`); `alloy-trie`
    /// (`--features alloy-trie`). Default: every engine built in.
    #[arg(long, value_delimiter = ',')]
    pub engines: Vec<AuthEngineKind>,
    /// The hash function of every engine's trie.
    #[arg(long, value_enum, default_value_t = AuthHashArg::Sha256)]
    pub hash: AuthHashArg,
    /// Keys loaded before the measurements (32-byte key paths, 60-byte values).
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Keys per commit while loading.
    #[arg(long, default_value_t = 1 << 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub load_batch: u64,
    /// Updated keys per measured commit, comma-separated: each size is measured in turn.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000u64, 10_000])]
    pub commit_keys: Vec<u64>,
    /// Measured commits per size and warm-up mode (without, then with a warm-up, alternately).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub commits: u64,
    /// Single-key proofs sampled, of present and of absent keys each.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub samples: u64,
    /// Keys of the multiproof.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub multiproof_keys: u64,
    /// UTxO batches after the proofs (lsm-tree's: 256 lookups, then a commit of 256 deletes and
    /// 256 inserts, with its root), on every engine but the rebuild; 0: none.
    #[arg(long, default_value_t = 2_000)]
    pub utxo_batches: u64,
    /// NOMT: hash-table buckets of 4 KiB (fixed at creation; 0: one per 4 keys, about 1.5 times
    /// the pages the keys fill).
    #[arg(long, default_value_t = 0)]
    pub nomt_buckets: u32,
    /// NOMT: its page cache, MiB (its default 256).
    #[arg(long, default_value_t = 256)]
    pub nomt_page_cache_mib: usize,
    /// NOMT: its leaf cache, MiB (its default 256).
    #[arg(long, default_value_t = 256)]
    pub nomt_leaf_cache_mib: usize,
    /// Cairn: memory for the trie's retained page levels, MiB (`AuthConfig::retained_bytes`;
    /// its default 20).
    #[arg(long, default_value_t = 20)]
    pub cairn_retained_mib: usize,
    /// Cairn: trie levels in the top page, 1 to 6 (`AuthConfig::top_page_depth`; its default
    /// 6). With `--cairn-retained-mib`, where the pages below the retained levels begin.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u8).range(1..=6))]
    pub cairn_top_page_depth: u8,
    /// Cairn: warm up with `Table::prefetch`, which returns once the pages are loaded, instead
    /// of `Table::warm_up`, which loads them on a thread of its own while the commit's updates
    /// are written (NOMT's warm-up is of the second kind).
    #[arg(long)]
    pub cairn_inline_warm_up: bool,
    /// Cairn: read the trie's pages with `O_DIRECT`, bypassing the page cache
    /// (`SessionOptions::direct_page_reads`; off by default).
    #[arg(long)]
    pub cairn_direct_page_reads: bool,
    /// Run each engine as a child process in a memory cgroup of its own with this limit (e.g.
    /// 1G), page cache included, after dropping the page cache; without cgroup support each
    /// child says so and goes on unlimited.
    #[arg(long, value_parser = crate::sys::cgroup::parse_size)]
    pub memory_limit: Option<u64>,
    /// (Internal) the one engine a child process runs.
    #[arg(long, hide = true)]
    pub child_engine: Option<AuthEngineKind>,
    /// (Internal) where a child process writes its record.
    #[arg(long, hide = true)]
    pub child_json: Option<PathBuf>,
    /// (Internal) the directory a child process works in, made and removed by its parent (so
    /// that a child killed at the memory limit leaves nothing behind).
    #[arg(long, hide = true)]
    pub child_dir: Option<PathBuf>,
}

/// `auth --engines`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuthEngineKind {
    /// Cairn's authenticated table, durable: each commit's updates logged and fsynced.
    Cairn,
    /// The same table without authentication (no root, no proofs): the baseline of the UTxO
    /// phase.
    CairnPlain,
    /// NOMT 1.0 (`--features nomt`).
    Nomt,
    /// JMT 0.12 over a store in memory (`--features jmt`).
    JmtMemory,
    /// JMT 0.12 over a plain durable Cairn table (`--features jmt`).
    JmtCairn,
    /// The Ethereum trie rebuilt from every leaf at each commit by alloy-trie 0.9
    /// (`--features alloy-trie`).
    AlloyTrie,
}

impl AuthEngineKind {
    /// Every engine, in the order they run by default.
    pub const ALL: [AuthEngineKind; 6] = [
        AuthEngineKind::Cairn,
        AuthEngineKind::CairnPlain,
        AuthEngineKind::Nomt,
        AuthEngineKind::JmtMemory,
        AuthEngineKind::JmtCairn,
        AuthEngineKind::AlloyTrie,
    ];

    /// The engine's name in records.
    pub fn name(self) -> &'static str {
        match self {
            AuthEngineKind::Cairn => "cairn",
            AuthEngineKind::CairnPlain => "cairn-plain",
            AuthEngineKind::Nomt => "nomt",
            AuthEngineKind::JmtMemory => "jmt-memory",
            AuthEngineKind::JmtCairn => "jmt-cairn",
            AuthEngineKind::AlloyTrie => "alloy-trie",
        }
    }

    /// The cargo feature that builds the engine in (`cairn`: none needed).
    pub fn feature(self) -> &'static str {
        match self {
            AuthEngineKind::Cairn | AuthEngineKind::CairnPlain => "cairn",
            AuthEngineKind::Nomt => "nomt",
            AuthEngineKind::JmtMemory | AuthEngineKind::JmtCairn => "jmt",
            AuthEngineKind::AlloyTrie => "alloy-trie",
        }
    }

    /// Whether this build has the engine.
    pub fn available(self) -> bool {
        match self {
            AuthEngineKind::Cairn | AuthEngineKind::CairnPlain => true,
            AuthEngineKind::Nomt => cfg!(feature = "nomt"),
            AuthEngineKind::JmtMemory | AuthEngineKind::JmtCairn => cfg!(feature = "jmt"),
            AuthEngineKind::AlloyTrie => cfg!(feature = "alloy-trie"),
        }
    }
}

/// `auth --hash` and `ledger-receipts --hash`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuthHashArg {
    /// SHA-256.
    Sha256,
    /// BLAKE3.
    Blake3,
}

/// Options every benchmark command takes.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Parent of the temporary benchmark directory (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Write the results as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Seed of the key generator, the lookup choices and the Bloom-filter salt.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Block I/O backend of batched lookups.
    #[arg(long, value_enum, default_value_t = IoArg::Auto)]
    pub io: IoArg,
    /// Which runs are read through the page cache (none: O_DIRECT lookups).
    #[arg(long, value_enum, default_value_t = DiskCacheArg::None)]
    pub disk_cache: DiskCacheArg,
    /// Keep the benchmark directory instead of removing it at exit.
    #[arg(long)]
    pub keep: bool,
    /// Entries of each table's write buffer.
    #[arg(long, default_value_t = 20_000)]
    pub write_buffer: usize,
    /// Merge steps done at once (smaller: smoother latency; larger: less overhead).
    #[arg(long, default_value_t = 1_000)]
    pub merge_batch_size: usize,
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Batches of lookups then updates, one after the other; then a lookup-only pass.
    Serial,
    /// Only the lookup-only pass.
    LookupOnly,
}

impl Mode {
    /// The name used in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Serial => "serial",
            Mode::LookupOnly => "lookup-only",
        }
    }
}

/// Options of `restart`.
#[derive(Debug, Args)]
pub struct RestartArgs {
    /// The session directory (built there, and reused with `--reuse`).
    #[arg(long)]
    pub dir: PathBuf,
    /// Entries of the table.
    #[arg(long, default_value_t = 10_000_000)]
    pub entries: u64,
    /// Measured restarts of each kind.
    #[arg(long, default_value_t = 3)]
    pub runs: u64,
    /// UTxO batches run after the load, before the clean shutdown.
    #[arg(long, default_value_t = 2_000)]
    pub churn_batches: u64,
    /// Log size (MiB) at which the kill phase kills itself.
    #[arg(long, default_value_t = 120)]
    pub kill_log_mib: u64,
    /// Reuse the table in `--dir` if one is there.
    #[arg(long)]
    pub reuse: bool,
    /// Open with `SessionOptions::verify_on_open` (every byte read and checked).
    #[arg(long)]
    pub verify_on_open: bool,
    /// Seed of the keys and the Bloom-filter salt.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Write the results as one JSON object to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The phases of `restart-child`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RestartPhase {
    /// Build the table and close it cleanly.
    Build,
    /// Open it and serve one batch of lookups.
    Open,
    /// Open it, run batches until the log is large, and SIGKILL itself.
    Kill,
}

/// Options of `restart-child`.
#[derive(Debug, Args)]
pub struct RestartChildArgs {
    /// The phase.
    #[arg(value_enum)]
    pub phase: RestartPhase,
    /// The session directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// Entries of the table.
    #[arg(long)]
    pub entries: u64,
    /// Seed of the keys and the Bloom-filter salt.
    #[arg(long)]
    pub seed: u64,
    /// UTxO batches after the load (build).
    #[arg(long, default_value_t = 0)]
    pub churn_batches: u64,
    /// First id the kill phase inserts.
    #[arg(long, default_value_t = 0)]
    pub first_id: u64,
    /// Log size (MiB) at which the kill phase kills itself.
    #[arg(long, default_value_t = 120)]
    pub kill_log_mib: u64,
    /// Open with `SessionOptions::verify_on_open`.
    #[arg(long)]
    pub verify_on_open: bool,
}

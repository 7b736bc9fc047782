//! `cairn`: look inside a Cairn database, verify it, dump it and manage its snapshots without
//! writing code (as RocksDB's `ldb` and `sst_dump`, or LMDB's `mdb_stat` and `mdb_dump`).
//!
//! `info`, `verify`, `dump` (`scan`), `get`, `root`, `prove`, `diff`, `wal` and `stats` open the
//! session read-only: they take no lock and write nothing, so they are safe while the process
//! that owns the database runs (a snapshot it deletes meanwhile gives a missing-file error).
//! `export`,
//! `import`, `delete`, `load`, `checkpoint`, `compact`, `repair` and `audit` (of a verifiable
//! ledger) take
//! the session's lock, and refuse (exit code 4) while another process holds it.
//!
//! Exit codes: 0 success; 1 damage found (`verify` found a problem, `info` or `stats` could
//! not read a snapshot, a proof did not verify); 2 a usage error; 3 failure (not a session
//! directory, no such snapshot, an I/O error); 4 the session is locked by another process; 5
//! a key `get` looked up is absent.
//!
//! Output is for people by default; `--json` prints one JSON document (for `dump`, one JSON
//! object per line) for scripts. Errors are one line on stderr. Output to a pipe its reader
//! closed (`cairn info DIR | head -1`) ends the command quietly, with exit code 0.

mod commands;
mod maintain;
mod output;
mod read;
mod wal;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Look inside a Cairn database, verify it, dump it, and manage its snapshots.
///
/// DIR is a session directory (the one passed to `Session::open`). info, verify, dump (scan),
/// get, root, prove, diff, wal and stats open it read-only: no lock, nothing written, safe beside a
/// running owner. export, import, delete, load, checkpoint, compact, repair and audit take its
/// lock.
///
/// Exit codes: 0 success, 1 damage found, 2 usage error, 3 failure (not a session, no such
/// snapshot, I/O error), 4 session locked by another process, 5 a key `get` looked up is
/// absent.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, max_term_width = 100)]
struct Cli {
    /// Print JSON for scripts instead of text for people.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// The session and its snapshots: label, size, files, entries, levels, runs, state root.
    Info {
        /// The session directory.
        dir: PathBuf,
        /// Also show the session's Bloom-filter salt.
        #[arg(long)]
        salt: bool,
        /// Also count each snapshot's live entries (the keys a lookup finds), by reading it
        /// whole: the stored entries count deletes and the older versions merges have not
        /// dropped yet.
        #[arg(long)]
        live: bool,
    },
    /// Check every file of one snapshot, or of every snapshot, and report each problem with
    /// its file and offset; exit code 1 if any.
    ///
    /// Checks each file's size and CRC32C, then what a checksum cannot vouch for: every page
    /// decoded, keys in order across each run, blob references inside their file, the index
    /// and the Bloom filter finding every key, entry counts, the metadata's runs and levels,
    /// no file missing and none unexpected; then reads the table whole and recomputes an
    /// authenticated table's state root. Never modifies the directory, takes no lock.
    Verify {
        /// The session directory.
        dir: PathBuf,
        /// The snapshot to check (every snapshot when left out).
        snapshot: Option<String>,
        /// Memory for recomputing a state root, in MiB (less memory, more passes).
        #[arg(long, default_value_t = 256, value_name = "MIB")]
        root_memory: usize,
    },
    /// Print a snapshot's key/value pairs in key order (`scan` is the same command), streamed
    /// (constant memory; with --reverse, memory for --limit pairs).
    ///
    /// KEY is a UTF-8 string, or hex bytes after `hex:` (e.g. `hex:00ff`).
    #[command(visible_alias = "scan")]
    Dump {
        /// The session directory.
        dir: PathBuf,
        /// The snapshot.
        snapshot: String,
        /// First key to print (inclusive).
        #[arg(long, value_name = "KEY")]
        from: Option<String>,
        /// Key to stop before (exclusive).
        #[arg(long, value_name = "KEY")]
        to: Option<String>,
        /// `hex`: a line `KEY VALUE [BLOB]` in hex per pair; `text`: the same with printable
        /// ASCII shown as itself (space, `\` and other bytes as `\xNN`); `json`: one object
        /// per line (hex strings); `raw`: binary records, each `u32` little-endian length then
        /// bytes, for the key, the value and (with --blobs) the blob (length 0xffffffff for
        /// none).
        #[arg(long, value_enum, default_value_t = DumpFormat::Hex)]
        format: DumpFormat,
        /// Include blobs (read from the blob files).
        #[arg(long)]
        blobs: bool,
        /// Only keys starting with this prefix (with --from/--to: within both).
        #[arg(long, value_name = "KEY")]
        prefix: Option<String>,
        /// Newest key first: the range is read forward and the last --limit pairs kept (all of
        /// them without --limit), then printed in descending key order.
        #[arg(long)]
        reverse: bool,
        /// Stop after this many pairs.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// SNAPSHOT names a durable table of the session, read as its owner sees it (its
        /// checkpoint and the log after it, replayed in memory: `Session::durable_view`).
        #[arg(long)]
        table: bool,
    },
    /// Look up keys in a snapshot (or, with --table, a durable table): each key with its value, or absent. Exit code 5 when a key
    /// is absent.
    ///
    /// KEY is a UTF-8 string, or hex bytes after `hex:` (e.g. `hex:00ff`).
    Get {
        /// The session directory.
        dir: PathBuf,
        /// The snapshot.
        snapshot: String,
        /// The keys.
        #[arg(required = true)]
        keys: Vec<String>,
        /// Print keys and values as `hex` or as `text` (printable ASCII as itself).
        #[arg(long, value_enum, default_value_t = KeyFormat::Text)]
        format: KeyFormat,
        /// SNAPSHOT names a durable table of the session, read as its owner sees it (its
        /// checkpoint and the log after it, replayed in memory: `Session::durable_view`).
        #[arg(long)]
        table: bool,
    },
    /// An authenticated snapshot's version and state root.
    Root {
        /// The session directory.
        dir: PathBuf,
        /// The snapshot.
        snapshot: String,
    },
    /// Prove keys of an authenticated snapshot: a multiproof of each key's presence (with its
    /// value) or absence, verified against the snapshot's state root before it is printed.
    /// Exit code 1 if the proof does not verify.
    Prove {
        /// The session directory.
        dir: PathBuf,
        /// The snapshot.
        snapshot: String,
        /// The keys (UTF-8, or hex after `hex:`).
        #[arg(required = true)]
        keys: Vec<String>,
        /// Also print the proof's encoding, in hex (`docs/format/proof.md`).
        #[arg(long)]
        encoded: bool,
    },
    /// The differences between two versions of a table, in key order: `-` a pair only in the
    /// first, `+` only in the second, `~` a key whose value (or blob) differs; then a summary.
    /// Each version is a snapshot, or `@TABLE` for a durable table as it is now (`cairn diff
    /// DIR yesterday @balances`: what changed since snapshot `yesterday`). Streamed (constant
    /// memory).
    Diff {
        /// The session directory.
        dir: PathBuf,
        /// The first snapshot, or `@TABLE`: durable table TABLE as it is now (its checkpoint
        /// and the log after it, read-only).
        first: String,
        /// The second snapshot, or `@TABLE`.
        second: String,
        /// Print keys and values as `hex` or as `text` (printable ASCII as itself).
        #[arg(long, value_enum, default_value_t = KeyFormat::Text)]
        format: KeyFormat,
        /// Stop after this many differences (the summary then counts only those).
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// Load pairs in `dump`'s format (hex, json or raw, from FILE or standard input) into a new
    /// snapshot: the inverse of `dump`. The table made keeps the newest value of a key (its
    /// resolve function), with default settings. Takes the session's lock.
    Load {
        /// The session directory (an existing session).
        dir: PathBuf,
        /// The snapshot to create (refused if it exists).
        snapshot: String,
        /// The pairs (standard input when left out).
        file: Option<PathBuf>,
        /// The input's format: as `dump` prints it (`text` cannot be read back: use hex).
        #[arg(long, value_enum, default_value_t = DumpFormat::Hex)]
        format: DumpFormat,
        /// The label to save the snapshot with.
        #[arg(long, default_value = "loaded")]
        label: String,
        /// Make it an authenticated table (a state root over its contents) with this hash.
        #[arg(long, value_enum, value_name = "HASH")]
        auth: Option<AuthHash>,
    },
    /// The session's write-ahead log, read without replaying it: the durable tables its
    /// catalog lists, its segments, and whether the chain of segments and records holds (exit
    /// code 1 if not); with --records, every record (with --json, one object per line before
    /// the summary). Takes no lock: a record the owner is writing reads as a torn tail.
    Wal {
        /// The session directory.
        dir: PathBuf,
        /// Print every record: its sequence number, segment, size, and the tables and updates
        /// it holds.
        #[arg(long)]
        records: bool,
        /// Stop after this many records.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// Rebuild a lost or damaged session metadata file: its one field, the Bloom-filter salt,
    /// is taken from the headers of the snapshots' run filters, which must all agree (a
    /// session without runs gets a new salt). Does nothing to a sound one. Takes the session's
    /// lock.
    ///
    /// With --salvage NAME --into NEW, then save what is intact of damaged snapshot NAME as a
    /// new snapshot NEW: every page and blob that fails its checksum or does not decode, and
    /// every missing file, is dropped and reported with the keys it may have held (those are
    /// missing from NEW or have an older value; every other key has its value). Exit code 1 if
    /// anything was lost. NAME's metadata file must be intact. With --dry-run, only report.
    Repair {
        /// The session directory.
        dir: PathBuf,
        /// Say what would be done, and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// A damaged snapshot to salvage.
        #[arg(long, value_name = "NAME")]
        salvage: Option<String>,
        /// The new snapshot to save what is intact into (required with --salvage, but with
        /// --dry-run).
        #[arg(long, value_name = "NEW", requires = "salvage")]
        into: Option<String>,
    },
    /// Checkpoint every durable table of the session: their state written as new checkpoints
    /// and the log before them removed (what a restart then replays is nothing). Takes the
    /// session's lock; the session is recovered first, as its owner would.
    Checkpoint {
        /// The session directory.
        dir: PathBuf,
    },
    /// Complete every merge in progress of the session's durable tables (or of TABLE...), then
    /// checkpoint them: lookups then read one run per level. Takes the session's lock.
    Compact {
        /// The session directory.
        dir: PathBuf,
        /// The durable tables (all when left out).
        tables: Vec<String>,
    },
    /// Per level and run: entries, pages, bytes, overflow pages, blob bytes, Bloom bits per
    /// key and the false-positive rate measured on a sample, index kind and size.
    Stats {
        /// The session directory.
        dir: PathBuf,
        /// The snapshot.
        snapshot: String,
        /// Keys (not in the run) probed per run to measure the filter's false-positive rate.
        #[arg(long, default_value_t = 100_000, value_name = "N")]
        sample: u64,
    },
    /// Copy a snapshot out of the session into TARGET (a new directory), for a backup or for
    /// importing into a session with the same salt. Takes the session's lock.
    Export {
        /// The session directory.
        dir: PathBuf,
        /// The snapshot.
        snapshot: String,
        /// The directory to create.
        target: PathBuf,
    },
    /// Copy an exported snapshot from SOURCE into the session as SNAPSHOT, then verify it
    /// (and remove it again if it is damaged). Takes the session's lock.
    Import {
        /// The session directory (an existing session).
        dir: PathBuf,
        /// The name to give the snapshot.
        snapshot: String,
        /// The exported snapshot's directory.
        source: PathBuf,
        /// Skip the verification after copying.
        #[arg(long)]
        no_verify: bool,
    },
    /// Audit a verifiable ledger (a directory made by `cairn_ledger::Ledger`): every table's
    /// contents against the newest version's recorded root (naming the keys that differ), every
    /// version record and history node against a history tree rebuilt from the records, and
    /// the digests a client published; exit code 1 if anything disagrees.
    ///
    /// Opens the ledger (recovery runs, the lock is taken): stop its owner first, or audit a
    /// copy.
    Audit {
        /// The ledger's directory.
        dir: PathBuf,
        /// Published digests to check: one per line, `SIZE ROOT` (the root as 64 hex digits);
        /// blank lines and lines starting with `#` are skipped.
        #[arg(long, value_name = "FILE")]
        digests: Option<PathBuf>,
        /// Memory for recomputing a table's state root, in MiB (less memory, more passes).
        #[arg(long, default_value_t = 256, value_name = "MIB")]
        root_memory: usize,
    },
    /// Delete a snapshot. Takes the session's lock.
    Delete {
        /// The session directory.
        dir: PathBuf,
        /// The snapshot.
        snapshot: String,
    },
}

/// How `dump` prints pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DumpFormat {
    Hex,
    Text,
    Json,
    Raw,
}

/// How `get` and `diff` print keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum KeyFormat {
    Hex,
    Text,
}

/// The hash of a table `load` makes authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AuthHash {
    Blake3,
    Sha256,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match commands::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("cairn: {}", failure.message);
            }
            ExitCode::from(failure.code)
        }
    }
}

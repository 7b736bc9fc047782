//! Scrubbing: reading every run the session's open tables hold and checking every byte of it
//! against its recorded checksums, so that damage at rest is found before a lookup, a merge or
//! the next open trips over it.
//!
//! Owns: [`ScrubReport`], [`ScrubProblem`], the scrub of a set of runs ([`scrub_runs`]) and the
//! background scrub thread ([`BackgroundScrub`]), which sees its session through
//! [`ScrubSource`]. May call: `run` (each run's files and checksums). Must never touch: a
//! table's state (it reads the runs a table holds, through their `Arc`s, which keep their files
//! in place while they are read).
//!
//! Why: since run format version 2 an open reads only metadata, filters and indexes, and each
//! data page is checked when it is read (`docs/format/run.md`). A page no one reads for months
//! is then not checked for months; a scrub checks them all, at a pace the caller chooses.
//!
//! Cost: one sequential read of every run file of every open table (the table's size on disk),
//! in 1 MiB reads through the page cache, one CRC32C per 4 KiB; memory: one 1 MiB buffer and
//! the list of runs. Under a pace of `b` bytes per second it sleeps so that it never reads
//! faster than that, measured from its start.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::run::Run;

/// What a background scrub scrubs: its session, as far as a scrub needs it.
pub(crate) trait ScrubSource: Send + Sync {
    /// The runs every open table reads.
    fn open_runs(&self) -> Vec<Arc<Run>>;
    /// Whether the session is still open.
    fn is_open(&self) -> bool;
}

/// One damaged run file found by a scrub.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScrubProblem {
    /// The damaged file.
    pub path: PathBuf,
    /// What is wrong (the error reading or checking it gave, with the page or chunk).
    pub detail: String,
}

/// What a scrub read and found ([`crate::Session::scrub`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScrubReport {
    /// Runs read (each run once, however many tables share it).
    pub runs: u64,
    /// Bytes read and checked.
    pub bytes: u64,
    /// Damage found: one entry per damaged file (a file stops being read at its first bad
    /// page). Empty when everything read matched its checksums.
    pub problems: Vec<ScrubProblem>,
    /// Whether the scrub stopped early because the session closed.
    pub interrupted: bool,
    /// How long it took.
    pub elapsed: Duration,
}

impl ScrubReport {
    /// Whether nothing damaged was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Reads and checks every file of `runs` (duplicates, by file, read once), at most
/// `bytes_per_second` when set, stopping early (within 1 MiB) once `keep_going` says no. An
/// I/O error of one file is reported as a problem of that file, like a checksum mismatch; the
/// scrub goes on with the next.
pub(crate) fn scrub_runs(
    runs: &[Arc<Run>],
    bytes_per_second: Option<u64>,
    keep_going: &dyn Fn() -> bool,
) -> ScrubReport {
    let start = Instant::now();
    let mut report = ScrubReport::default();
    let mut seen = std::collections::HashSet::new();
    for run in runs {
        if !seen.insert(run.file_path(crate::run::RunFile::Checksums)) {
            continue;
        }
        if !keep_going() {
            report.interrupted = true;
            break;
        }
        let mut stopped = false;
        let mut pace = |bytes: u64| {
            report.bytes += bytes;
            let due = bytes_per_second
                .filter(|&r| r > 0)
                .map(|rate| Duration::from_secs_f64(report.bytes as f64 / rate as f64));
            loop {
                if !keep_going() {
                    stopped = true;
                    return Err(Error::SessionClosed);
                }
                // The pace is kept in naps of at most `POLL`, each followed by a look at
                // whether to go on.
                match due.and_then(|due| due.checked_sub(start.elapsed())) {
                    Some(wait) if !wait.is_zero() => std::thread::sleep(wait.min(POLL)),
                    _ => return Ok(()),
                }
            }
        };
        let checked = run.verify_files(&mut pace);
        if stopped {
            report.interrupted = true;
            break;
        }
        if let Err(e) = checked {
            let path = e
                .path()
                .map(PathBuf::from)
                .unwrap_or_else(|| run.file_path(crate::run::RunFile::KeyOps));
            report.problems.push(ScrubProblem {
                path,
                detail: e.to_string(),
            });
        }
        report.runs += 1;
    }
    report.elapsed = start.elapsed();
    report
}

/// How often a [`BackgroundScrub`] looks whether its session closed while it waits.
const POLL: Duration = Duration::from_millis(100);

/// The background scrub of a session ([`crate::SessionOptions::scrub_interval`]): a thread
/// that scrubs every open table's runs once per interval, at the configured pace, logs every
/// problem it finds (`log::error!`) and keeps the last report ([`crate::Session::last_scrub`]).
/// It holds the session weakly and ends when the session closes.
#[derive(Debug)]
pub(crate) struct BackgroundScrub {
    last: Arc<Mutex<Option<ScrubReport>>>,
}

impl BackgroundScrub {
    /// Starts the thread.
    pub(crate) fn start(
        session: Weak<dyn ScrubSource>,
        interval: Duration,
        bytes_per_second: Option<u64>,
    ) -> Result<BackgroundScrub> {
        let last = Arc::new(Mutex::new(None));
        let out = last.clone();
        std::thread::Builder::new()
            .name("cairn-scrub".into())
            .spawn(move || loop {
                let mut waited = Duration::ZERO;
                while waited < interval {
                    std::thread::sleep(POLL.min(interval - waited));
                    waited += POLL;
                    if !session.upgrade().is_some_and(|s| s.is_open()) {
                        return;
                    }
                }
                let Some(core) = session.upgrade() else {
                    return;
                };
                let runs = core.open_runs();
                // A session whose every handle is gone is not kept open (and locked) by its
                // scrub: the scrub stops within 1 MiB.
                let keep_going = || core.is_open() && Arc::strong_count(&core) > 1;
                let report = scrub_runs(&runs, bytes_per_second, &keep_going);
                drop(runs);
                for p in &report.problems {
                    log::error!("scrub: {}: {}", p.path.display(), p.detail);
                }
                *out.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
                drop(core);
            })
            .map_err(|e| Error::io("spawn the scrub thread", "", e))?;
        Ok(BackgroundScrub { last })
    }

    /// The report of the last finished scrub, if any.
    pub(crate) fn last(&self) -> Option<ScrubReport> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

//! Observability: the names of the engine's `tracing` spans and `metrics` metrics, and the calls
//! that emit them, each compiled to nothing when its cargo feature (`tracing`, `metrics`) is off.
//!
//! Owns: every span and metric name (the `SPAN_*` and metric constants below, public so that an
//! exporter can refer to them, and `docs/observability.md` lists the same), the crate-private
//! `Span` guard and `Timer`, and the helpers the engine calls to count. May call: no engine
//! module (only the `tracing` and `metrics` crates). Must never touch: engine state; it is told
//! numbers and names and passes them on.
//!
//! Cost: with a feature off, every helper is an empty `#[inline]` function over plain arguments
//! (a `Span` or `Timer` is then a zero-sized value): nothing is computed, not even a clock read.
//! With `metrics` on, each count is one look-up in the installed recorder (a hash of the name)
//! and an atomic add, so callers count once per batch, never per key. With `tracing` on, a span
//! whose level no subscriber wants costs one atomic load.
//!
//! ```
//! // The names are there whatever the features, for exporters and dashboards.
//! assert_eq!(cairn::observe::LOOKUPS_TOTAL, "cairn_lookups_total");
//! assert_eq!(cairn::observe::SPAN_CHECKPOINT, "cairn.checkpoint");
//! ```

#[cfg(feature = "metrics")]
use std::time::Instant;

/// Whether spans are emitted (the `tracing` feature): guards the work of computing a field.
pub(crate) const TRACING_ON: bool = cfg!(feature = "tracing");
/// Whether metrics are emitted (the `metrics` feature): guards the work of computing a count.
pub(crate) const METRICS_ON: bool = cfg!(feature = "metrics");

/// The `tracing` target of every span of the engine.
pub const TARGET: &str = "cairn";

/// Span (info): opening a session: its directory, whether read-only, and the durable tables
/// recovered (`dir`, `read_only`, `durable_tables`).
pub const SPAN_SESSION_OPEN: &str = "cairn.session.open";
/// Span (info): recovering the durable tables at open: reading each checkpoint and replaying
/// the log after it (`dir`, `tables`, `records_replayed`).
pub const SPAN_LOG_RECOVER: &str = "cairn.log.recover";
/// Span (info): a checkpoint of the durable tables, explicit, automatic, at open or at close
/// (`dir`, `checkpoint`, `tables`).
pub const SPAN_CHECKPOINT: &str = "cairn.checkpoint";
/// Span (debug): one batch of merge steps (`run`, `level_last`, `steps_requested`,
/// `steps_done`).
pub const SPAN_MERGE_STEPS: &str = "cairn.merge.steps";
/// Span (info): a merge finishing: its output's filter, index and checksums written (`run`,
/// `inputs`, `entries`, `parts_linked`).
pub const SPAN_MERGE_FINISH: &str = "cairn.merge.finish";
/// Span (info): a commit of an authenticated table that changed keys (`table`, `keys`,
/// `version`).
pub const SPAN_AUTH_COMMIT: &str = "cairn.auth.commit";
/// Span (info): saving a table as a snapshot or a checkpoint (`snapshot`, `label`,
/// `authenticated`).
pub const SPAN_SNAPSHOT_SAVE: &str = "cairn.snapshot.save";
/// Span (info): opening a snapshot or a checkpoint as a table (`snapshot`, `label`).
pub const SPAN_SNAPSHOT_OPEN: &str = "cairn.snapshot.open";

/// Every span name, for documentation and tests.
pub const SPANS: [&str; 8] = [
    SPAN_SESSION_OPEN,
    SPAN_LOG_RECOVER,
    SPAN_CHECKPOINT,
    SPAN_MERGE_STEPS,
    SPAN_MERGE_FINISH,
    SPAN_AUTH_COMMIT,
    SPAN_SNAPSHOT_SAVE,
    SPAN_SNAPSHOT_OPEN,
];

/// Counter: keys looked up by batched lookups (`Table::lookups`, `lookup`, `get`), counted
/// once per batch.
pub const LOOKUPS_TOTAL: &str = "cairn_lookups_total";
/// Counter: updates applied to tables (inserts, upserts, deletes; those replayed from the log
/// at open included), counted once per batch.
pub const UPDATES_TOTAL: &str = "cairn_updates_total";
/// Counter, bytes: bytes read by batched page reads (lookups, the authenticated tables' page
/// log) and by the chunked reads of run cursors (merges, scans).
pub const BYTES_READ_TOTAL: &str = "cairn_bytes_read_total";
/// Counter, bytes: bytes of run files written (flushes, merges, snapshots' write buffers) and
/// of log groups written (records and segment headers).
pub const BYTES_WRITTEN_TOTAL: &str = "cairn_bytes_written_total";
/// Gauge, entries: the merge steps still owed by the merges in progress in this process (input
/// entries not yet consumed).
pub const MERGE_DEBT: &str = "cairn_merge_debt";
/// Counter: merge steps performed (input entries consumed by merges).
pub const MERGE_STEPS_TOTAL: &str = "cairn_merge_steps_total";
/// Counter: merges finished.
pub const MERGES_TOTAL: &str = "cairn_merges_total";
/// Histogram, seconds: the time of each fsync of the write-ahead log's current segment.
pub const LOG_FSYNC_SECONDS: &str = "cairn_log_fsync_seconds";
/// Counter: checkpoints of the durable tables completed.
pub const CHECKPOINTS_TOTAL: &str = "cairn_checkpoints_total";
/// Counter: commits of authenticated tables that changed keys (a commit with nothing to do is
/// not counted).
pub const AUTH_COMMITS_TOTAL: &str = "cairn_auth_commits_total";
/// Histogram, seconds: the time of each counted authenticated commit.
pub const AUTH_COMMIT_SECONDS: &str = "cairn_auth_commit_seconds";

/// Every metric name, for documentation and tests.
pub const METRICS: [&str; 11] = [
    LOOKUPS_TOTAL,
    UPDATES_TOTAL,
    BYTES_READ_TOTAL,
    BYTES_WRITTEN_TOTAL,
    MERGE_DEBT,
    MERGE_STEPS_TOTAL,
    MERGES_TOTAL,
    LOG_FSYNC_SECONDS,
    CHECKPOINTS_TOTAL,
    AUTH_COMMITS_TOTAL,
    AUTH_COMMIT_SECONDS,
];

/// Describes every metric (its unit and meaning) to the installed `metrics` recorder, for
/// exporters that print help texts. Call it once, after installing the recorder.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        LOOKUPS_TOTAL,
        Unit::Count,
        "Keys looked up by batched lookups"
    );
    describe_counter!(UPDATES_TOTAL, Unit::Count, "Updates applied to tables");
    describe_counter!(
        BYTES_READ_TOTAL,
        Unit::Bytes,
        "Bytes read from run and page-log files"
    );
    describe_counter!(
        BYTES_WRITTEN_TOTAL,
        Unit::Bytes,
        "Bytes of run files and log written"
    );
    describe_gauge!(
        MERGE_DEBT,
        Unit::Count,
        "Merge steps owed by merges in progress"
    );
    describe_counter!(MERGE_STEPS_TOTAL, Unit::Count, "Merge steps performed");
    describe_counter!(MERGES_TOTAL, Unit::Count, "Merges finished");
    describe_histogram!(
        LOG_FSYNC_SECONDS,
        Unit::Seconds,
        "Write-ahead log fsync latency"
    );
    describe_counter!(
        CHECKPOINTS_TOTAL,
        Unit::Count,
        "Checkpoints of durable tables"
    );
    describe_counter!(
        AUTH_COMMITS_TOTAL,
        Unit::Count,
        "Authenticated table commits"
    );
    describe_histogram!(
        AUTH_COMMIT_SECONDS,
        Unit::Seconds,
        "Authenticated commit latency"
    );
}

/// An entered span, exited when dropped; nothing without the `tracing` feature. Not `Send`:
/// it lives on the stack of the call it covers.
#[must_use = "the span ends when this is dropped"]
pub(crate) struct Span {
    #[cfg(feature = "tracing")]
    span: tracing::span::EnteredSpan,
}

impl Span {
    /// Records `value` in the span's field `field` (declared empty when the span was made).
    #[inline]
    pub(crate) fn record(&self, field: &'static str, value: u64) {
        #[cfg(feature = "tracing")]
        self.span.record(field, value);
        #[cfg(not(feature = "tracing"))]
        let _ = (field, value);
    }
}

/// Makes an info-level span named `$name` with `$fields`, entered, or nothing without the
/// `tracing` feature (then the field expressions are not evaluated: arguments only).
macro_rules! span {
    ($level:ident, $name:expr, $($fields:tt)*) => {{
        #[cfg(feature = "tracing")]
        let span = Span {
            span: tracing::span!(target: TARGET, tracing::Level::$level, $name, $($fields)*)
                .entered(),
        };
        #[cfg(not(feature = "tracing"))]
        let span = Span {};
        span
    }};
}

/// The span of [`SPAN_SESSION_OPEN`].
#[inline]
pub(crate) fn session_open(dir: &std::path::Path, read_only: bool) -> Span {
    let _ = (dir, read_only);
    span!(INFO, SPAN_SESSION_OPEN, dir = %dir.display(), read_only,
        durable_tables = tracing::field::Empty)
}

/// The span of [`SPAN_LOG_RECOVER`]; record `records_replayed` when done.
#[inline]
pub(crate) fn log_recover(dir: &std::path::Path, tables: usize) -> Span {
    let _ = (dir, tables);
    span!(INFO, SPAN_LOG_RECOVER, dir = %dir.display(), tables,
        records_replayed = tracing::field::Empty)
}

/// The span of [`SPAN_CHECKPOINT`].
#[inline]
pub(crate) fn checkpoint(dir: &std::path::Path, checkpoint: u64, tables: usize) -> Span {
    let _ = (dir, checkpoint, tables);
    span!(INFO, SPAN_CHECKPOINT, dir = %dir.display(), checkpoint, tables)
}

/// The span of [`SPAN_MERGE_STEPS`]; record `steps_done` when done.
#[inline]
pub(crate) fn merge_steps(run: u64, level_last: bool, steps_requested: u64) -> Span {
    let _ = (run, level_last, steps_requested);
    span!(
        DEBUG,
        SPAN_MERGE_STEPS,
        run,
        level_last,
        steps_requested,
        steps_done = tracing::field::Empty
    )
}

/// The span of [`SPAN_MERGE_FINISH`].
#[inline]
pub(crate) fn merge_finish(run: u64, inputs: usize, entries: u64, parts_linked: u64) -> Span {
    let _ = (run, inputs, entries, parts_linked);
    span!(INFO, SPAN_MERGE_FINISH, run, inputs, entries, parts_linked)
}

/// The span of [`SPAN_AUTH_COMMIT`]; record `version` when done.
#[inline]
pub(crate) fn auth_commit(table: u64, keys: usize) -> Span {
    let _ = (table, keys);
    span!(
        INFO,
        SPAN_AUTH_COMMIT,
        table,
        keys,
        version = tracing::field::Empty
    )
}

/// The span of [`SPAN_SNAPSHOT_SAVE`].
#[inline]
pub(crate) fn snapshot_save(snapshot: &str, label: &str, authenticated: bool) -> Span {
    let _ = (snapshot, label, authenticated);
    span!(INFO, SPAN_SNAPSHOT_SAVE, snapshot, label, authenticated)
}

/// The span of [`SPAN_SNAPSHOT_OPEN`].
#[inline]
pub(crate) fn snapshot_open(snapshot: &str, label: &str) -> Span {
    let _ = (snapshot, label);
    span!(INFO, SPAN_SNAPSHOT_OPEN, snapshot, label)
}

/// A start time for a histogram; nothing (no clock read) without the `metrics` feature.
pub(crate) struct Timer {
    #[cfg(feature = "metrics")]
    started: Instant,
}

impl Timer {
    /// Now.
    #[inline]
    pub(crate) fn start() -> Timer {
        Timer {
            #[cfg(feature = "metrics")]
            started: Instant::now(),
        }
    }
}

/// Adds `n` to counter `name`.
#[inline]
fn count(name: &'static str, n: u64) {
    #[cfg(feature = "metrics")]
    metrics::counter!(name).increment(n);
    #[cfg(not(feature = "metrics"))]
    let _ = (name, n);
}

/// Records the time since `timer` in histogram `name`.
#[inline]
fn time(name: &'static str, timer: Timer) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(name).record(timer.started.elapsed().as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (name, timer);
}

/// A batch of `keys` lookups ([`LOOKUPS_TOTAL`]).
#[inline]
pub(crate) fn lookups(keys: usize) {
    count(LOOKUPS_TOTAL, keys as u64);
}

/// A batch of `n` updates applied ([`UPDATES_TOTAL`]).
#[inline]
pub(crate) fn updates(n: usize) {
    count(UPDATES_TOTAL, n as u64);
}

/// `bytes` read ([`BYTES_READ_TOTAL`]).
#[inline]
pub(crate) fn bytes_read(bytes: u64) {
    count(BYTES_READ_TOTAL, bytes);
}

/// `bytes` written ([`BYTES_WRITTEN_TOTAL`]).
#[inline]
pub(crate) fn bytes_written(bytes: u64) {
    count(BYTES_WRITTEN_TOTAL, bytes);
}

/// A merge owing `steps` more steps started ([`MERGE_DEBT`] up).
#[inline]
pub(crate) fn merge_debt_added(steps: u64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(MERGE_DEBT).increment(steps as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = steps;
}

/// `steps` merge steps paid off: performed, or dropped with their merge ([`MERGE_DEBT`] down).
#[inline]
pub(crate) fn merge_debt_paid(steps: u64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(MERGE_DEBT).decrement(steps as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = steps;
}

/// `steps` merge steps performed in one batch ([`MERGE_STEPS_TOTAL`], [`MERGE_DEBT`] down).
#[inline]
pub(crate) fn merge_steps_done(steps: u64) {
    if steps > 0 {
        count(MERGE_STEPS_TOTAL, steps);
        merge_debt_paid(steps);
    }
}

/// A merge finished ([`MERGES_TOTAL`]).
#[inline]
pub(crate) fn merge_finished() {
    count(MERGES_TOTAL, 1);
}

/// An fsync of the log started at `timer` ended ([`LOG_FSYNC_SECONDS`]).
#[inline]
pub(crate) fn log_fsync(timer: Timer) {
    time(LOG_FSYNC_SECONDS, timer);
}

/// A checkpoint completed ([`CHECKPOINTS_TOTAL`]).
#[inline]
pub(crate) fn checkpoint_done() {
    count(CHECKPOINTS_TOTAL, 1);
}

/// An authenticated commit started at `timer` ended ([`AUTH_COMMITS_TOTAL`],
/// [`AUTH_COMMIT_SECONDS`]).
#[inline]
pub(crate) fn auth_commit_done(timer: Timer) {
    count(AUTH_COMMITS_TOTAL, 1);
    time(AUTH_COMMIT_SECONDS, timer);
}

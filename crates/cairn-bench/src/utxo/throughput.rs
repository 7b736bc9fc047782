//! The throughput of a `utxo run` over time: the operations per second of its timed batches in
//! consecutive windows, so that a long run shows whether it reached a steady state (the merges
//! into the deepest levels of a large table start only after many batches).
//!
//! Owns: the window's length ([`window_s`]) and the series ([`series`], [`of_phase`]). May call:
//! the driver's [`PhaseTiming`] only; the record's [`ThroughputPoint`] is the series' point.
//!
//! A batch counts in the window in which its engine calls ended (its `start_ms` plus its
//! `batch_ms`), and a window's ops/s is the operations of its batches over its length: the
//! window's throughput as a caller finishing batches sees it. Windows start at the first timed
//! batch and cover the whole phase (`PhaseTiming::seconds`); the last one is cut where the
//! phase ends, and a last window shorter than half a window is joined to the one before it, so
//! no point stands for a sliver of time.

use crate::record::ThroughputPoint;
use crate::utxo::driver::PhaseTiming;

/// Runs at least this long (in seconds) get [`LONG_WINDOW_S`] windows: per-minute throughput.
pub const LONG_RUN_S: f64 = 600.0;
/// The window of a long run, in seconds.
pub const LONG_WINDOW_S: f64 = 60.0;
/// A shorter run is cut into about this many windows...
pub const SHORT_RUN_POINTS: f64 = 20.0;
/// ...of at least this many seconds.
pub const MIN_WINDOW_S: f64 = 1.0;

/// A run's throughput over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// The window's length in seconds.
    pub window_s: f64,
    /// One point per window, in order.
    pub points: Vec<ThroughputPoint>,
}

/// The window for a run of `seconds`: [`LONG_WINDOW_S`] from [`LONG_RUN_S`] on, otherwise the
/// run's twentieth ([`SHORT_RUN_POINTS`]), at least [`MIN_WINDOW_S`].
pub fn window_s(seconds: f64) -> f64 {
    if seconds >= LONG_RUN_S {
        LONG_WINDOW_S
    } else {
        (seconds / SHORT_RUN_POINTS).max(MIN_WINDOW_S)
    }
}

/// The series of a timed phase whose batches each did `ops_per_batch` operations.
pub fn of_phase(timing: &PhaseTiming, ops_per_batch: f64) -> Series {
    let ends: Vec<f64> = timing
        .split_ms
        .iter()
        .zip(&timing.batch_ms)
        .map(|(split, ms)| (split.start_ms + ms) / 1e3)
        .collect();
    series(&ends, timing.seconds, ops_per_batch)
}

/// The series of a phase of `seconds` whose batches ended at `ends_s` (seconds from the phase's
/// start), each with `ops_per_batch` operations. Empty when there are no batches or no time.
pub fn series(ends_s: &[f64], seconds: f64, ops_per_batch: f64) -> Series {
    // A batch cannot end after its phase; should the clocks disagree, the phase ends with it.
    let last_end = ends_s.iter().copied().fold(0.0, f64::max);
    let seconds = seconds.max(last_end);
    if ends_s.is_empty() || !seconds.is_finite() || seconds <= 0.0 {
        return Series::default();
    }
    let window = window_s(seconds);
    // Whole windows, and one cut short where the phase ends (not one of a rounding error).
    let mut windows = ((seconds / window) - 1e-9).ceil().max(1.0) as usize;
    let last_length = seconds - (windows - 1) as f64 * window;
    if windows > 1 && last_length < window / 2.0 {
        windows -= 1;
    }
    let mut batches = vec![0u64; windows];
    for &end in ends_s {
        let index = (end.max(0.0) / window).floor() as usize;
        batches[index.min(windows - 1)] += 1;
    }
    let points = batches
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            let start_s = i as f64 * window;
            let end_s = if i + 1 == windows {
                seconds
            } else {
                start_s + window
            };
            let length = end_s - start_s;
            ThroughputPoint {
                start_s,
                seconds: length,
                ops_per_sec: count as f64 * ops_per_batch / length,
            }
        })
        .collect();
    Series {
        window_s: window,
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::utxo::driver::BatchSplit;

    #[test]
    fn windows_are_a_minute_from_ten_minutes_on_else_a_twentieth() {
        assert_eq!(window_s(600.0), 60.0);
        assert_eq!(window_s(3_600.0), 60.0);
        assert_eq!(window_s(599.0), 29.95);
        assert_eq!(window_s(100.0), 5.0);
        assert_eq!(window_s(19.0), 1.0);
        assert_eq!(window_s(0.2), 1.0);
    }

    #[test]
    fn counts_each_batch_where_it_ended() {
        // 40 s: windows of 2 s. One batch ends every 0.1 s (768 operations each) in the first
        // half, every 0.2 s in the second: 7,680 then 3,840 ops/s.
        let mut ends: Vec<f64> = (1..=200).map(|i| i as f64 * 0.1 - 0.05).collect();
        ends.extend((1..=100).map(|i| 20.0 + i as f64 * 0.2 - 0.1));
        let s = series(&ends, 40.0, 768.0);
        assert_eq!(s.window_s, 2.0);
        assert_eq!(s.points.len(), 20);
        for (i, point) in s.points.iter().enumerate() {
            assert!((point.start_s - 2.0 * i as f64).abs() < 1e-9, "{point:?}");
            assert!((point.seconds - 2.0).abs() < 1e-9, "{point:?}");
            let expected = if i < 10 { 7_680.0 } else { 3_840.0 };
            assert!(
                (point.ops_per_sec - expected).abs() < 1e-6,
                "{i}: {point:?}"
            );
        }
        // Every operation is in some window.
        let ops: f64 = s.points.iter().map(|p| p.ops_per_sec * p.seconds).sum();
        assert!((ops - 300.0 * 768.0).abs() < 1e-6);
    }

    #[test]
    fn a_long_run_has_minutes_and_a_short_last_window_joins_the_one_before() {
        // 630 s, one lookup-only batch (256 ops) per second: ten whole minutes, then 30 s, a
        // half window, which stays a point of its own.
        let ends: Vec<f64> = (0..630).map(|i| i as f64 + 0.5).collect();
        let s = series(&ends, 630.0, 256.0);
        assert_eq!(s.window_s, 60.0);
        assert_eq!(s.points.len(), 11);
        assert_eq!(s.points[10].seconds, 30.0);
        assert!(s
            .points
            .iter()
            .all(|p| (p.ops_per_sec - 256.0).abs() < 1e-9));
        // 620 s: the last 20 s are joined to the tenth minute, an 80 s window.
        let s = series(&ends[..620], 620.0, 256.0);
        assert_eq!(s.points.len(), 10);
        assert_eq!(s.points[9].seconds, 80.0);
        assert!((s.points[9].ops_per_sec - 256.0).abs() < 1e-9);
    }

    #[test]
    fn a_phase_gives_its_batches_ends() {
        // Three batches of 768 operations in 3 s, each 0.5 s long, starting at 0, 1 and 2 s.
        let timing = PhaseTiming {
            seconds: 3.0,
            batch_ms: vec![500.0; 3],
            split_ms: (0..3)
                .map(|i| BatchSplit {
                    start_ms: 1_000.0 * i as f64,
                    ..BatchSplit::default()
                })
                .collect(),
            started_unix_s: 0.0,
        };
        let s = of_phase(&timing, 768.0);
        assert_eq!(s.window_s, 1.0);
        let ops: Vec<f64> = s.points.iter().map(|p| p.ops_per_sec).collect();
        assert_eq!(ops, [768.0, 768.0, 768.0]);
        assert_eq!(series(&[], 3.0, 768.0), Series::default());
        assert_eq!(series(&[0.1], 0.0, 768.0).points.len(), 1);
    }
}

//! Summaries of measured samples: nearest-rank percentiles of batch latencies, and medians of
//! repeated measurements.
//!
//! Owns: [`Percentiles`], [`percentiles`] and [`median`]. Must never touch: anything but its
//! arguments.
//!
//! Kept by hand rather than through `hdrhistogram`: these summarise samples a benchmark keeps
//! anyway (every UTxO batch's time also goes to `--batch-log`, every commit's to its medians),
//! at most tens of thousands of them, and the exact nearest rank is a sort and an index, where
//! a histogram would round every recorded percentile to its precision and change the figures
//! the records hold. Where samples are many and come from many threads at once, `wal` records
//! them in an `hdrhistogram` and reports the same [`Percentiles`].

/// Latency summary of one phase, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

/// Nearest-rank percentiles of `samples` (all zero when empty).
pub fn percentiles(samples: &[f64]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank =
        |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    Percentiles {
        p50: rank(0.50),
        p99: rank(0.99),
        p999: rank(0.999),
        max: sorted[sorted.len() - 1],
    }
}

/// The median of `samples`: the middle one, or the mean of the two middle ones (NaN when
/// empty).
pub fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = percentiles(&samples);
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        assert_eq!(percentiles(&[]), Percentiles::default());
        assert_eq!(percentiles(&[3.0]).p99, 3.0);
        let thousand: Vec<f64> = (1..=1000).map(f64::from).collect();
        let p = percentiles(&thousand);
        assert_eq!((p.p50, p.p99, p.p999, p.max), (500.0, 990.0, 999.0, 1000.0));
    }

    #[test]
    fn medians_are_medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}

//! Latency summaries: HDR histograms in, the figures weft prints out.

use hdrhistogram::Histogram;
use serde::Serialize;

/// A latency distribution summary, in microseconds.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest sample.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

/// A histogram of nanosecond samples from 1 ns to 100 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
}

/// Summarize a histogram of nanoseconds.
pub fn summarize(h: &Histogram<u64>) -> Summary {
    let us = |ns: u64| ns as f64 / 1e3;
    Summary {
        count: h.len(),
        p50_us: us(h.value_at_quantile(0.5)),
        p90_us: us(h.value_at_quantile(0.9)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        max_us: us(h.max()),
        mean_us: h.mean() / 1e3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap(); // 1..=1000 µs
        }
        let s = summarize(&h);
        assert_eq!(s.count, 1000);
        assert!((s.p50_us - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99_us - 990.0).abs() < 2.0, "{s:?}");
        assert!((s.mean_us - 500.5).abs() < 1.0, "{s:?}");
    }
}

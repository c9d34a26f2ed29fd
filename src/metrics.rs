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

/// A median with a distribution-free confidence interval (the sign test's): the order
/// statistics that bracket the true median with at least 95% probability whatever the
/// distribution, or the extremes, with the lower confidence they give, when there are too few
/// values for 95% (fewer than 6).
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct MedianInterval {
    /// The sample median.
    pub median: f64,
    /// Lower end of the interval.
    pub lo: f64,
    /// Upper end of the interval.
    pub hi: f64,
    /// Probability that the interval holds the true median.
    pub confidence: f64,
    /// Values.
    pub n: usize,
}

/// [`MedianInterval`] of `values` (`None` if there are none).
///
/// With `X ~ Binomial(n, 1/2)` the count of values below the true median, the interval from
/// the `k`-th smallest to the `k`-th largest misses it with probability `2 P(X < k)`; `k` is
/// the largest that keeps this at most 5%.
pub fn median_interval(values: &[f64]) -> Option<MedianInterval> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    // miss[k] = 2 P(X < k), built from the binomial terms in log space (2^-n underflows).
    let (mut ln_choose, mut below, mut k, mut miss) = (0.0f64, 0.0f64, 1, 1.0);
    for i in 0..n / 2 {
        below += (ln_choose - n as f64 * std::f64::consts::LN_2).exp();
        let m = (2.0 * below).min(1.0);
        if i == 0 || m <= 0.05 {
            (k, miss) = (i + 1, m);
        }
        if m > 0.05 {
            break;
        }
        ln_choose += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    Some(MedianInterval {
        median,
        lo: v[k - 1],
        hi: v[n - k],
        confidence: 1.0 - miss,
        n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_interval_uses_the_sign_test_order_statistics() {
        // n = 10: P(X <= 1) = 11/1024, P(X <= 2) = 56/1024, so the 2nd and the 9th values.
        let ten: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let m = median_interval(&ten).unwrap();
        assert_eq!((m.median, m.lo, m.hi, m.n), (5.5, 2.0, 9.0, 10));
        assert!(
            (m.confidence - (1.0 - 22.0 / 1024.0)).abs() < 1e-12,
            "{m:?}"
        );
        // n = 20: the 6th and the 15th (P(X <= 5) = 0.0207).
        let twenty: Vec<f64> = (1..=20).map(f64::from).collect();
        let m = median_interval(&twenty).unwrap();
        assert_eq!((m.lo, m.hi), (6.0, 15.0));
        assert!((m.confidence - 0.9586).abs() < 1e-4, "{m:?}");
        // Too few for 95%: the extremes, with what they give (1 - 2/2^5).
        let m = median_interval(&[3.0, 1.0, 2.0, 5.0, 4.0]).unwrap();
        assert_eq!((m.median, m.lo, m.hi), (3.0, 1.0, 5.0));
        assert!((m.confidence - 0.9375).abs() < 1e-12, "{m:?}");
        assert_eq!(median_interval(&[]), None);
        // Thousands of values: no underflow, and the interval narrows around the median.
        let many: Vec<f64> = (0..5001).map(f64::from).collect();
        let m = median_interval(&many).unwrap();
        assert_eq!(m.median, 2500.0);
        assert!(
            m.lo > 2400.0 && m.hi < 2600.0 && m.confidence >= 0.95,
            "{m:?}"
        );
    }

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

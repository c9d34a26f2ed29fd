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

/// Summarize samples in microseconds exactly (nearest-rank percentiles, the exact mean): for the
/// tens or thousands of trials a benchmark runs, where a histogram's 3 significant digits would
/// make one trial's p50 differ from its mean.
pub fn summarize_exact(samples_us: &[f64]) -> Summary {
    let mut v = samples_us.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = |q: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    };
    Summary {
        count: v.len() as u64,
        p50_us: rank(0.5),
        p90_us: rank(0.9),
        p99_us: rank(0.99),
        p999_us: rank(0.999),
        max_us: v.last().copied().unwrap_or(0.0),
        mean_us: v.iter().sum::<f64>() / v.len().max(1) as f64,
    }
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

/// The middle of `v` once sorted (the upper one of an even count), 0 for none: what a
/// benchmark sets beside its peer from a handful of noisy repeats. Sorts `v`.
pub fn middle(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
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
    fn the_middle_is_the_upper_middle_of_the_sorted_values() {
        assert_eq!(middle(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(middle(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(middle(&mut []), 0.0);
    }

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

// Confidence intervals of a mean, as the paper's figures draw them (99%).
/// Two-sided 99% quantiles of Student's t for 1..=30 degrees of freedom.
const T99: [f64; 30] = [
    63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012,
    2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779,
    2.771, 2.763, 2.756, 2.750,
];

/// Mean and the half-width of its 99% confidence interval (Student's t; the normal 2.576
/// beyond 30 degrees of freedom, where the two differ by under 7%). `None` for fewer than two
/// samples, where no interval exists.
pub fn mean_ci99(samples: &[f64]) -> Option<(f64, f64)> {
    let n = samples.len();
    if n < 2 {
        return None;
    }
    let mean = samples.iter().sum::<f64>() / n as f64;
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let t = T99.get(n - 2).copied().unwrap_or(2.576);
    Some((mean, t * (var / n as f64).sqrt()))
}

#[cfg(test)]
mod ci_tests {
    use super::*;

    #[test]
    fn interval_of_known_samples() {
        // 1..=10: mean 5.5, s = 3.0277, t(9) = 3.250 -> 3.250 * 3.0277 / sqrt(10) = 3.1118.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let (m, h) = mean_ci99(&v).unwrap();
        assert!((m - 5.5).abs() < 1e-12);
        assert!((h - 3.1118).abs() < 1e-3, "{h}");
        assert_eq!(mean_ci99(&[1.0]), None);
        // Equal samples: no spread.
        assert_eq!(mean_ci99(&[2.0, 2.0, 2.0]), Some((2.0, 0.0)));
    }
}

//! Confidence intervals of a mean, as the paper's figures draw them (99%).

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
mod tests {
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

//! Argument checks every command makes before it runs anything: a number that cannot be a
//! duration, a size list with nonsense in it, an output file that cannot be written. Each error
//! names the flag. A long run must not find out at its end that its plot has nowhere to go.

use anyhow::{ensure, Context};
use std::path::Path;
use std::time::Duration;

/// The longest duration any flag takes: a day. Longer is a typo, and times are added to
/// clocks in nanoseconds (u64: 584 years) with room to spare.
pub const MAX_FLAG_DURATION: Duration = Duration::from_secs(86_400);

/// `value` (in `unit_s` seconds, e.g. 1e-6 for µs) as a duration: finite, not negative, at most
/// [`MAX_FLAG_DURATION`].
pub fn duration(flag: &str, value: f64, unit_s: f64) -> anyhow::Result<Duration> {
    ensure!(
        value.is_finite() && value >= 0.0,
        "{flag} {value}: must be a number >= 0"
    );
    let d = Duration::try_from_secs_f64(value * unit_s)
        .ok()
        .filter(|d| *d <= MAX_FLAG_DURATION)
        .with_context(|| {
            format!(
                "{flag} {value}: more than {} s",
                MAX_FLAG_DURATION.as_secs()
            )
        })?;
    Ok(d)
}

/// As [`duration`], and more than zero.
pub fn positive_duration(flag: &str, value: f64, unit_s: f64) -> anyhow::Result<Duration> {
    let d = duration(flag, value, unit_s)?;
    ensure!(!d.is_zero(), "{flag} {value}: must be more than 0");
    Ok(d)
}

/// A whole number of microseconds as a duration, at most [`MAX_FLAG_DURATION`].
pub fn micros(flag: &str, us: u64) -> anyhow::Result<Duration> {
    let d = Duration::from_micros(us);
    ensure!(
        d <= MAX_FLAG_DURATION,
        "{flag} {us}: more than {} s",
        MAX_FLAG_DURATION.as_secs()
    );
    Ok(d)
}

/// A number within `range`, or an error naming the flag, the value and the range.
pub fn within<T: PartialOrd + std::fmt::Display>(
    flag: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> anyhow::Result<()> {
    ensure!(
        range.contains(&value),
        "{flag} {value}: must be {} to {}",
        range.start(),
        range.end()
    );
    Ok(())
}

/// A radix the membership tree can have: a power of two, at least 2.
pub fn radix(r: u32) -> anyhow::Result<()> {
    ensure!(
        r >= 2 && r.is_power_of_two(),
        "--radix {r}: must be a power of two >= 2 (2, 4, 8, ...)"
    );
    Ok(())
}

/// A list of sizes (`--nodes-list`, `--sizes`) with no value twice.
pub fn distinct<T: PartialEq + std::fmt::Display>(flag: &str, v: &[T]) -> anyhow::Result<()> {
    for (i, x) in v.iter().enumerate() {
        ensure!(!v[..i].contains(x), "{flag}: {x} is listed twice");
    }
    Ok(())
}

/// An output file: created now (empty), so a path that cannot be written is an error before
/// the run, not after it.
pub fn writable(flag: &str, path: &Path) -> anyhow::Result<()> {
    std::fs::File::create(path)
        .map(drop)
        .with_context(|| format!("{flag} {}: cannot write there", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_out_of_range_are_errors_not_panics() {
        assert_eq!(
            duration("--x", 4.6, 1e-6).unwrap(),
            Duration::from_nanos(4600)
        );
        for bad in [1e30, 1e20, f64::INFINITY, f64::NAN, -1.0] {
            assert!(duration("--x", bad, 1e-6).is_err(), "{bad}");
            assert!(duration("--x", bad, 1.0).is_err(), "{bad} s");
        }
        assert!(positive_duration("--x", 0.0, 1.0).is_err());
        assert!(micros("--x", 18_446_744_073_709_551).is_err());
        assert!(micros("--x", 20_000).is_ok());
        assert!(radix(3).is_err() && radix(0).is_err() && radix(1).is_err());
        assert!(radix(16).is_ok());
        assert!(distinct("--sizes", &[8, 8]).is_err());
        assert!(within("--n", 5u32, 1..=5).is_ok());
        assert_eq!(
            within("--n", 6u32, 1..=5).unwrap_err().to_string(),
            "--n 6: must be 1 to 5"
        );
        assert!(writable("--plot", Path::new("/nonexistent/x.svg")).is_err());
    }
}

//! A test that cannot run here says so where it counts. Under `CI=true` (`.ci/run` as root,
//! which installs every prerequisite) a missing one fails the test: a skip there would hide a
//! broken CI behind a pass. Elsewhere the test prints SKIPPED and adds a line to
//! `skips.txt` in Cargo's test scratch directory, which `.ci/run` counts and prints after the
//! test run (libtest shows no output of a passing test).

use std::io::Write;

/// Skip the calling test for `why`, or fail it under CI.
pub fn skip(why: &str) {
    assert!(
        std::env::var("CI").is_err(),
        "cannot run under CI, where it must: {why}"
    );
    eprintln!("SKIPPED: {why}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("skips.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let _ = writeln!(f, "{test}: {why}");
    }
}

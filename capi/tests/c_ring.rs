//! The C example as a runtime author runs it (`examples/c/run.sh`): weft's C library built
//! and installed with its header and pkg-config file, the program built with plain `cc`
//! against them, started by real `mpirun` and `mpiexec.hydra` with a rank SIGKILLed, and
//! under valgrind with no error. The script exits 0 only when every survivor agreed on the
//! value and on who failed.

#[path = "../../tests/common/skip.rs"]
mod skip;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// One job at a time: two cores, and heartbeats that must not starve.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Run `run.sh mode ranks`; its output, or why it cannot run here.
fn run(mode: &str, ranks: &str, needs: &[&str]) -> Option<String> {
    for tool in needs.iter().chain(&["cc", "pkg-config"]) {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            skip::skip(&format!("{tool} not installed"));
            return None;
        }
    }
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-prefix-{mode}"));
    let out = Command::new(root.join("examples/c/run.sh"))
        .args([mode, ranks])
        .env("PREFIX", &prefix)
        .env_remove("WEFT_JOB_KEY")
        .output()
        .expect("run examples/c/run.sh");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "run.sh {mode} {ranks} failed:\n{text}"
    );
    Some(text)
}

/// The survivors' verdict lines: each agreed on the OR of the survivors' bits and on `failed`.
fn agreed(text: &str, survivors: usize, failed: &str) {
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(": agreed ")).collect();
    assert_eq!(lines.len(), survivors, "{text}");
    for l in lines {
        assert!(
            l.contains(&format!("failed [{failed}],")) && l.ends_with("-> ok"),
            "{l}\n{text}"
        );
    }
}

#[test]
fn the_c_ring_survives_a_sigkill_under_mpirun() {
    if let Some(text) = run("mpirun", "4", &["mpirun"]) {
        agreed(&text, 3, "2");
        assert!(!text.contains("rank 2: agreed"), "{text}");
    }
}

#[test]
fn the_c_ring_survives_a_sigkill_under_mpiexec_hydra() {
    if let Some(text) = run("hydra", "4", &["mpiexec.hydra"]) {
        agreed(&text, 3, "2");
    }
}

#[test]
fn the_c_ring_runs_clean_under_valgrind() {
    if let Some(text) = run("valgrind", "3", &["mpirun", "valgrind"]) {
        agreed(&text, 3, "");
        assert_eq!(text.matches("ERROR SUMMARY: 0 errors").count(), 3, "{text}");
    }
}

//! Membership across real OS processes: every node is a `weft node` process on loopback, the
//! victim is killed with SIGKILL, and every survivor must install the same view, exactly the
//! survivors, with the root reporting the stabilization (`transport::launch`).

use std::process::Command;
use std::time::Duration;
use weft::engine::{Backend, WaitMode};
use weft::proto::membership::TreeMode;
use weft::sim::stabilize::Fail;
use weft::transport::stabilize::{job_options, run, BenchConfig};

#[test]
fn killed_processes_are_excluded_by_every_survivor() {
    for backend in [Backend::Poll, Backend::Uring] {
        for fail in [Fail::Inner, Fail::Root] {
            let opts = job_options(WaitMode::Block, Some(backend));
            let cfg = BenchConfig {
                timeout: Duration::from_secs(20),
                procs: Some(env!("CARGO_BIN_EXE_weft").into()),
                ..BenchConfig::new(8, 4, TreeMode::Patch, fail, 11, opts)
            };
            let mut trials = 0;
            let r = run(&cfg, 2, |_, t| {
                assert!(t.views_agree, "{backend} {fail}: {t:?}");
                assert_eq!(t.victims.len(), 1);
                trials += 1;
            })
            .unwrap_or_else(|e| panic!("{backend} {fail}: {e}"));
            assert_eq!(trials, 2);
            assert!(r.views_agree && r.ts_p50_us > 0.0, "{r:?}");
            // What the processes said they ran on (their `started` reports).
            assert_eq!(r.backend, backend.to_string(), "{r:?}");
        }
    }
}

#[test]
fn a_node_without_a_key_refuses_to_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["node", "--id", "0", "--nodes", "2", "--peers", ""])
        .env_remove("WEFT_JOB_KEY")
        .output()
        .expect("run weft");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("WEFT_JOB_KEY"));
}

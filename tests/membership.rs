//! Radix-tree membership on real loopback nodes: nodes are killed for real (reactor stopped,
//! sockets closed), the engine's lost connections are the failure detector, and every survivor
//! must install the same view, exactly the survivors, with the root holding every ack.

use std::time::Duration;
use weft::engine::{Backend, WaitMode};
use weft::proto::membership::TreeMode;
use weft::sim::stabilize::Fail;
use weft::transport::stabilize::{trial, BenchConfig};
use weft::transport::NodeOptions;

fn config(nodes: u32, fail: Fail, mode: TreeMode, backend: Backend) -> BenchConfig {
    BenchConfig {
        nodes,
        radix: 4,
        mode,
        fail,
        seed: 7,
        opts: NodeOptions {
            wait: WaitMode::Block,
            backend: Some(backend),
            ..NodeOptions::default()
        },
        timeout: Duration::from_secs(20),
    }
}

#[test]
fn every_failure_kind_ends_in_one_view_on_both_backends() {
    for backend in [Backend::Poll, Backend::Uring] {
        for fail in [
            Fail::Leaf,
            Fail::Inner,
            Fail::Root,
            Fail::Multi(2),
            Fail::RootPlus(1),
        ] {
            for mode in [TreeMode::Patch, TreeMode::Rebalance] {
                let cfg = config(21, fail, mode, backend);
                let t = trial(&cfg, 0).unwrap_or_else(|e| panic!("{backend} {fail} {mode:?}: {e}"));
                let expected = match fail {
                    Fail::Multi(k) => k,
                    Fail::RootPlus(k) => k + 1,
                    _ => 1,
                };
                assert_eq!(t.victims.len(), expected, "{fail}");
                assert!(
                    t.views_agree,
                    "{backend} {fail} {mode:?}: survivors disagree ({t:?})"
                );
                assert!(t.epochs >= 1, "{t:?}");
            }
        }
    }
}

#[test]
fn the_benchmark_summarizes_repeated_trials() {
    let cfg = config(16, Fail::Inner, TreeMode::Patch, Backend::Poll);
    let mut seen = 0;
    let r = weft::transport::stabilize::run(&cfg, 3, |_, t| {
        assert!(t.views_agree);
        seen += 1;
    })
    .unwrap();
    assert_eq!((seen, r.repeat, r.nodes, r.radix), (3, 3, 16, 4));
    assert!(r.views_agree);
    assert!(r.ts_p50_us > 0.0 && r.ts_p50_us <= r.ts_p99_us && r.ts_p99_us <= r.ts_max_us);
    assert!(r.ci99_us >= 0.0 && r.ts_mean_us > 0.0);
    assert_eq!(r.backend, "poll");
}

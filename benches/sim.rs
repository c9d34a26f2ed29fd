//! Simulator throughput: one sync and one async BMG construction, to catch regressions in the
//! scheduler's hot loop. The peer is the same run with refresh enabled (the extra cost of the
//! self-stabilization safety net).

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use weft::sim::bmg::{run, BmgSimConfig, Refresh};
use weft::sim::tree::TreeKind;
use weft::sim::Scheduler;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim_bmg");
    g.sample_size(10);
    for (name, tree, depth, scheduler, refresh) in [
        (
            "binary_d14_sync",
            TreeKind::Binary,
            14,
            Scheduler::Sync,
            Refresh::Never,
        ),
        (
            "binary_d14_sync_refresh_auto",
            TreeKind::Binary,
            14,
            Scheduler::Sync,
            Refresh::Auto,
        ),
        (
            "binomial_d12_async",
            TreeKind::Binomial,
            12,
            Scheduler::Async,
            Refresh::Never,
        ),
    ] {
        let cfg = BmgSimConfig {
            tree,
            depth,
            scheduler,
            refresh,
            ..BmgSimConfig::default()
        };
        g.bench_function(name, |b| b.iter(|| black_box(run(&cfg).expect("tree"))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

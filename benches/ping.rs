//! Loopback ping-pong round trips: weft's engine (both backends, busy wait) beside a std
//! busy-poll loop and tokio, same sizes, same pinning (cores 0 and 1), in one run.
//! Each sample is one round trip; criterion's time per iteration is the RTT.
//!
//! `cargo bench --bench ping`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::{Duration, Instant};
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::proto::Event;
use weft::transport::{Cluster, NodeOptions};

const SIZES: [usize; 3] = [32, 4096, 1 << 20];

fn pin(core: usize) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

/// `iters` weft round trips of `size`, timed from inside the protocol (startup excluded).
fn weft_rtts(backend: Backend, size: usize, iters: u64) -> Duration {
    let opts = NodeOptions {
        backend: Some(backend),
        reactor: weft::engine::ReactorOptions {
            wait: WaitMode::Busy,
            ..Default::default()
        },
        ..NodeOptions::default()
    };
    let c = Cluster::start(2, opts, move |i, ids| {
        if i == 0 {
            // 20 untimed round trips first: connection setup is not a round trip.
            PingPong::pinger(ids[1], vec![size], iters, 20)
        } else {
            PingPong::ponger()
        }
    })
    .expect("cluster");
    while let Ok((_, e)) = c.events.recv_timeout(Duration::from_secs(60)) {
        if e == NodeEvent::Protocol(Event::Done) {
            break;
        }
    }
    let pinger = c
        .stop_all()
        .expect("stop")
        .into_iter()
        .next()
        .expect("node 0");
    Duration::from_nanos(pinger.samples().iter().map(|&(_, rtt)| rtt).sum())
}

/// The peers' sockets get the engine's congestion control, so that engines are compared (with
/// this host's default, BBR, a 1 MiB message took 3x longer for pacing alone).
fn same_congestion(s: &impl std::os::fd::AsFd) {
    let cc = weft::transport::NodeOptions::default().reactor.congestion;
    weft::engine::congestion::apply(s, cc.as_deref());
}

fn tokio_rtts(size: usize, iters: u64) -> Duration {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = std_listener.local_addr().expect("addr");
    std_listener.set_nonblocking(true).expect("nonblocking");
    let server = std::thread::spawn(move || {
        pin(1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("rt");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(std_listener).expect("listener");
            let (mut s, _) = l.accept().await.expect("accept");
            s.set_nodelay(true).expect("nodelay");
            same_congestion(&s);
            let mut buf = weft::bench::ping::page_buffer(size, 0);
            while s.read_exact(&mut buf).await.is_ok() {
                if s.write_all(&buf).await.is_err() {
                    break;
                }
            }
        });
    });
    pin(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("rt");
    let total = rt.block_on(async move {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.set_nodelay(true).expect("nodelay");
        same_congestion(&s);
        let msg = weft::bench::ping::page_buffer(size, 0x5a);
        let mut back = weft::bench::ping::page_buffer(size, 0);
        let start = Instant::now();
        for _ in 0..iters {
            s.write_all(&msg).await.expect("write");
            s.read_exact(&mut back).await.expect("read");
        }
        start.elapsed()
    });
    server.join().expect("server");
    total
}

fn std_rtts(size: usize, iters: u64) -> Duration {
    // The same congestion control as the engine's nodes (see `same_congestion`).
    let cc = weft::transport::NodeOptions::default().reactor.congestion;
    let rtts =
        weft::bench::ping::std_busy_poll_rtts(&[size], iters, cc.as_deref()).expect("std ping");
    Duration::from_nanos(rtts.get(&size).map_or(0, |v| v.iter().sum()))
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("ping_rtt");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for size in SIZES {
        g.throughput(Throughput::Bytes(2 * size as u64));
        for backend in [Backend::Uring, Backend::Poll] {
            g.bench_function(BenchmarkId::new(format!("weft-{backend}"), size), |b| {
                b.iter_custom(|iters| weft_rtts(backend, size, iters.max(1)))
            });
        }
        g.bench_function(BenchmarkId::new("std-busy", size), |b| {
            b.iter_custom(|iters| std_rtts(size, iters.max(1)))
        });
        g.bench_function(BenchmarkId::new("tokio", size), |b| {
            b.iter_custom(|iters| tokio_rtts(size, iters.max(1)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

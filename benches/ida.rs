//! Erasure-coding throughput of weft's IDA beside its peers in the same run:
//! reed-solomon-erasure (SIMD C kernels on), reed-solomon-simd, and with `--features isal` Intel
//! ISA-L. Same configurations, same bytes; encode computes the n - m parity shards of a
//! systematic code, decode rebuilds the maximum number of lost data shards.
//!
//! `cargo bench --bench ida [--features isal]`; compare the "thrpt" lines of one run.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use weft::ida::{Dispersal, Mode};

const CONFIGS: [(usize, usize); 4] = [(8, 16), (10, 14), (4, 6), (16, 32)];

fn shards(m: usize, bytes: usize) -> Vec<Vec<u8>> {
    let l = bytes / m / 64 * 64; // reed-solomon-simd wants even sizes; keep all peers equal
    (0..m)
        .map(|j| (0..l).map(|i| (i * 31 + j * 7) as u8).collect())
        .collect()
}

fn encode(c: &mut Criterion) {
    for bytes in [1usize << 20, 16 << 20] {
        let mut g = c.benchmark_group(format!("encode_{}MiB", bytes >> 20));
        g.sample_size(10)
            .measurement_time(Duration::from_secs(2))
            .warm_up_time(Duration::from_millis(300));
        for (m, n) in CONFIGS {
            let data = shards(m, bytes);
            let l = data[0].len();
            g.throughput(Throughput::Bytes((l * m) as u64));
            let id = format!("{m}of{n}");
            let d = Dispersal::new(n, m, Mode::Systematic).expect("params");
            let ins: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
            let mut parity = vec![vec![0u8; l]; n - m];
            g.bench_function(BenchmarkId::new("weft", &id), |b| {
                b.iter(|| {
                    let mut outs: Vec<&mut [u8]> =
                        parity.iter_mut().map(|v| v.as_mut_slice()).collect();
                    d.encode_rows(black_box(&ins), &mut outs);
                })
            });
            let rse = reed_solomon_erasure::galois_8::ReedSolomon::new(m, n - m).expect("rse");
            let mut all: Vec<Vec<u8>> = data
                .iter()
                .cloned()
                .chain((0..n - m).map(|_| vec![0u8; l]))
                .collect();
            g.bench_function(BenchmarkId::new("reed-solomon-erasure", &id), |b| {
                b.iter(|| rse.encode(black_box(&mut all)).expect("encode"))
            });
            g.bench_function(BenchmarkId::new("reed-solomon-simd", &id), |b| {
                b.iter(|| black_box(reed_solomon_simd::encode(m, n - m, &data).expect("encode")))
            });
            #[cfg(feature = "isal")]
            {
                use weft::ida::isal::{IsalDot, Variant};
                let rows = d.matrix().select_rows(&(m..n).collect::<Vec<_>>());
                let isal = IsalDot::new(&rows);
                g.bench_function(BenchmarkId::new("isal", &id), |b| {
                    b.iter(|| {
                        let mut outs: Vec<&mut [u8]> =
                            parity.iter_mut().map(|v| v.as_mut_slice()).collect();
                        isal.apply(Variant::Auto, black_box(&ins), &mut outs);
                    })
                });
            }
        }
        g.finish();
    }
}

fn decode(c: &mut Criterion) {
    let bytes = 16 << 20;
    let mut g = c.benchmark_group("decode_16MiB");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300));
    for (m, n) in CONFIGS {
        let data = shards(m, bytes);
        let l = data[0].len();
        g.throughput(Throughput::Bytes((l * m) as u64));
        let id = format!("{m}of{n}");
        let lost = (n - m).min(m);
        let d = Dispersal::new(n, m, Mode::Systematic).expect("params");
        let mut file: Vec<u8> = data.concat();
        file.truncate(l * m);
        let pieces = d.encode(&file);
        let given: Vec<(u8, &[u8])> = (lost..n)
            .take(m)
            .map(|i| (i as u8, pieces[i].as_slice()))
            .collect();
        let mut rebuilt = vec![vec![0u8; l]; m];
        g.bench_function(BenchmarkId::new("weft", &id), |b| {
            b.iter(|| {
                d.decode_rows(black_box(&given), &mut rebuilt)
                    .expect("decode")
            })
        });
        let rse = reed_solomon_erasure::galois_8::ReedSolomon::new(m, n - m).expect("rse");
        let mut full: Vec<Vec<u8>> = data
            .iter()
            .cloned()
            .chain((0..n - m).map(|_| vec![0u8; l]))
            .collect();
        rse.encode(&mut full).expect("encode");
        // (shard, present) pairs: the lost shards are rebuilt in place, no allocation.
        let mut tuples: Vec<(Vec<u8>, bool)> = full.into_iter().map(|s| (s, true)).collect();
        g.bench_function(BenchmarkId::new("reed-solomon-erasure", &id), |b| {
            b.iter(|| {
                for (i, t) in tuples.iter_mut().enumerate() {
                    t.1 = i >= lost;
                }
                rse.reconstruct_data(black_box(&mut tuples))
                    .expect("reconstruct");
            })
        });
        let recovery = reed_solomon_simd::encode(m, n - m, &data).expect("encode");
        g.bench_function(BenchmarkId::new("reed-solomon-simd", &id), |b| {
            b.iter(|| {
                let originals = (lost..m).map(|i| (i, &data[i]));
                let rec = recovery.iter().enumerate().take(lost);
                black_box(reed_solomon_simd::decode(m, n - m, originals, rec).expect("decode"))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, encode, decode);
criterion_main!(benches);

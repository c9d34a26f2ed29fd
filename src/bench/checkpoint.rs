//! `weft bench checkpoint`: every in-process node protects a state, checkpoints it, `fail` of
//! them are killed, and survivors rebuild the lost states; once with weft's LOCALSTORAGE (IDA
//! over neighborhoods) and, in the same run, with the schemes users know from SCR (partner
//! copy, XOR sets of 8), all over the same engine and the same storage protocol.
//!
//! The timed checkpoint is the second of each trial: the first one opens the connections, as
//! a job's first checkpoint would, and is not what a runtime pays per checkpoint. A trial's
//! rebuilds are byte-compared with the states that were protected.

use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::ida::{Dispersal, Mode};
use crate::rng::SimRng;
use crate::storage::placement::{n_0, Placement};
use crate::storage::StorageEvent;
use crate::storage::{Request, Scheme, Storage, StorageConfig};
use crate::transport::{Cluster, NodeOptions};
use crate::NodeId;
use bytes::Bytes;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// Processes.
    pub nodes: usize,
    /// Bytes of each process's state.
    pub state_bytes: usize,
    /// Processes killed after the checkpoint.
    pub fail: usize,
    /// The schemes, each run in every trial.
    pub schemes: Vec<Scheme>,
    /// Trials; schemes alternate within each.
    pub repeat: usize,
    /// Seeds the states and the victims.
    pub seed: u64,
    /// How nodes run.
    pub opts: NodeOptions,
    /// Longest wait for a checkpoint or a rebuild.
    pub timeout: Duration,
}

/// One scheme's figures over the trials (medians). Schemes run in turn within each trial, on
/// the same states and victims, each on a fresh cluster.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckpointRow {
    /// `ida`, `partner`, `xor`.
    pub scheme: &'static str,
    /// Processes.
    pub nodes: usize,
    /// MiB per process.
    pub state_mib: f64,
    /// Processes killed.
    pub fail: usize,
    /// Losses each group tolerates: `⌊N_u / 2⌋` (IDA), 1 (partner, XOR).
    pub tolerates_per_group: usize,
    /// State bytes per second through the scheme's coding alone on one core (IDA parity
    /// rows; XOR folding); `None` for partner copy, which codes nothing.
    pub encode_gb_s: Option<f64>,
    /// The checkpoint: the request to the last process's confirmation, median.
    pub checkpoint_ms: f64,
    /// Every lost state rebuilt on a survivor, median over the trials that rebuilt them all.
    pub recover_ms: Option<f64>,
    /// Whether the placement tolerates the victims in every trial.
    pub tolerated: bool,
    /// Whether every rebuild matched the protected bytes, in every trial (`false` when a
    /// state was unrecoverable).
    pub recovered_exact: bool,
    /// Trials.
    pub trials: usize,
    /// Trials whose victims the placement tolerates.
    pub tolerated_trials: usize,
    /// Trials whose lost states all came back byte-exact.
    pub exact_trials: usize,
    /// Rebuilds that returned bytes other than the protected ones, over all trials: must be 0
    /// (beyond what a scheme tolerates, a rebuild is an error).
    pub wrong: usize,
    /// The victims' seed.
    pub seed: u64,
}

/// Run every scheme `repeat` times.
pub fn run(cfg: &CheckpointConfig) -> Result<Vec<CheckpointRow>, EngineError> {
    if cfg.nodes < 2 || cfg.fail >= cfg.nodes {
        return Err(EngineError::Config(format!(
            "need 2 or more nodes and fewer failures than nodes, got {} nodes, {} failures",
            cfg.nodes, cfg.fail
        )));
    }
    let mut rng = SimRng::new(cfg.seed);
    let states: Vec<Bytes> = (0..cfg.nodes)
        .map(|_| {
            let mut v = vec![0u8; cfg.state_bytes];
            for c in v.chunks_mut(8) {
                let x = rng.next_u64().to_le_bytes();
                c.copy_from_slice(&x[..c.len()]);
            }
            Bytes::from(v)
        })
        .collect();
    let mut results: Vec<Vec<Trial>> = vec![Vec::new(); cfg.schemes.len()];
    for t in 0..cfg.repeat {
        let victims = draw_victims(cfg.nodes, cfg.fail, cfg.seed.wrapping_add(t as u64));
        // The order turns each trial, so that no scheme always runs first.
        let k = cfg.schemes.len();
        for s in (0..k).map(|j| (j + t) % k) {
            results[s].push(trial(cfg, cfg.schemes[s], &states, &victims)?);
        }
    }
    let view: Vec<NodeId> = (0..cfg.nodes as u64).map(NodeId).collect();
    Ok(cfg
        .schemes
        .iter()
        .zip(results)
        .map(|(&scheme, trials)| CheckpointRow {
            scheme: scheme.name(),
            nodes: cfg.nodes,
            state_mib: cfg.state_bytes as f64 / (1 << 20) as f64,
            fail: cfg.fail,
            tolerates_per_group: match scheme {
                Scheme::Ida => Placement::new(scheme, &view, cfg.seed, 0)
                    .groups()
                    .iter()
                    .map(|g| g.len() / 2)
                    .min()
                    .unwrap_or(0),
                _ => 1,
            },
            encode_gb_s: encode_rate(scheme, cfg.nodes, &states[0]),
            checkpoint_ms: median(trials.iter().map(|t| t.checkpoint)),
            recover_ms: Some(median(trials.iter().filter(|t| t.exact).map(|t| t.recover)))
                .filter(|_| trials.iter().any(|t| t.exact)),
            tolerated: trials.iter().all(|t| t.tolerated),
            recovered_exact: trials.iter().all(|t| t.exact),
            trials: trials.len(),
            tolerated_trials: trials.iter().filter(|t| t.tolerated).count(),
            exact_trials: trials.iter().filter(|t| t.exact).count(),
            wrong: trials.iter().map(|t| t.wrong).sum(),
            seed: cfg.seed,
        })
        .collect())
}

#[derive(Clone)]
struct Trial {
    checkpoint: Duration,
    recover: Duration,
    tolerated: bool,
    exact: bool,
    wrong: usize,
}

fn median(d: impl Iterator<Item = Duration>) -> f64 {
    let mut v: Vec<f64> = d.map(|d| d.as_secs_f64() * 1e3).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// `fail` distinct processes, drawn with `seed`.
pub fn draw_victims(n: usize, fail: usize, seed: u64) -> Vec<NodeId> {
    let mut rng = SimRng::new(seed ^ 0xc0ffee);
    let mut all: Vec<u64> = (0..n as u64).collect();
    for i in 0..fail.min(n) {
        let j = i + rng.below((n - i) as u64) as usize;
        all.swap(i, j);
    }
    all[..fail.min(n)].iter().map(|&x| NodeId(x)).collect()
}

fn trial(
    cfg: &CheckpointConfig,
    scheme: Scheme,
    states: &[Bytes],
    victims: &[NodeId],
) -> Result<Trial, EngineError> {
    let n = cfg.nodes;
    let storage = StorageConfig {
        scheme,
        seed: cfg.seed,
        ..StorageConfig::default()
    };
    let cluster = Cluster::start(n, cfg.opts.clone(), move |i, ids| {
        Storage::new(ids[i], ids, storage.clone())
    })?;
    let ask = |i: usize, r: Request| cluster.nodes[i].request(r);
    for (i, data) in states.iter().enumerate() {
        ask(
            i,
            Request::Protect {
                vid: i as u64,
                data: data.clone(),
            },
        );
    }
    let mut checkpoint = Duration::ZERO;
    for version in [1, 2, 3] {
        let t0 = Instant::now();
        (0..n).for_each(|i| ask(i, Request::Checkpoint { version }));
        wait(
            &cluster,
            n,
            cfg.timeout,
            |e| matches!(e, StorageEvent::Checkpointed { version: v, .. } if *v == version),
        )?;
        checkpoint = t0.elapsed();
    }
    let view: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
    let placement = Placement::new(scheme, &view, cfg.seed, 0);
    let tolerated = victims.iter().all(|v| placement.tolerates(v.0, victims));
    let mut cluster = cluster;
    for v in victims {
        cluster.nodes[v.0 as usize].kill();
    }
    let t0 = Instant::now();
    for v in victims {
        let at = (1..n)
            .map(|k| (v.0 as usize + k) % n)
            .find(|x| !victims.contains(&NodeId(*x as u64)))
            .unwrap_or(0);
        cluster.nodes[at].request(Request::Recover {
            vid: v.0,
            version: Some(3),
        });
    }
    let answers = wait(&cluster, victims.len(), cfg.timeout, |e| {
        matches!(
            e,
            StorageEvent::Recovered { .. } | StorageEvent::Unrecoverable { .. }
        )
    })?;
    let recover = t0.elapsed();
    let exact = answers.iter().all(|e| match e {
        StorageEvent::Recovered { vid, data, .. } => states.get(*vid as usize) == Some(data),
        _ => false,
    });
    let wrong = answers
        .iter()
        .filter(|e| match e {
            StorageEvent::Recovered { vid, data, .. } => states.get(*vid as usize) != Some(data),
            _ => false,
        })
        .count();
    cluster.shutdown()?;
    Ok(Trial {
        checkpoint,
        recover,
        tolerated,
        exact,
        wrong,
    })
}

/// Wait for `count` storage events that `want` accepts; a rejected request is an error.
fn wait<P: crate::proto::Protocol<Event = StorageEvent>>(
    cluster: &Cluster<P>,
    count: usize,
    timeout: Duration,
    want: impl Fn(&StorageEvent) -> bool,
) -> Result<Vec<StorageEvent>, EngineError> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::with_capacity(count);
    while got.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        let (_, ev) = cluster.events.recv_timeout(left).map_err(|_| {
            EngineError::Config(format!(
                "storage: {} of {count} answers within {timeout:?}",
                got.len()
            ))
        })?;
        match ev {
            NodeEvent::Protocol(StorageEvent::Rejected { why }) => {
                return Err(EngineError::Config(format!(
                    "storage refused a request: {why}"
                )))
            }
            NodeEvent::Protocol(e) if want(&e) => got.push(e),
            _ => {}
        }
    }
    Ok(got)
}

/// State bytes per second through `scheme`'s coding of one state on one core, stripe by
/// stripe as the protocol codes it (`None` for partner copy, which codes nothing, and for an
/// empty state).
fn encode_rate(scheme: Scheme, nodes: usize, state: &Bytes) -> Option<f64> {
    if state.is_empty() {
        return None;
    }
    let reps = (256usize << 20).div_ceil(state.len()).max(1);
    let t0 = Instant::now();
    let mut coded = 0;
    for _ in 0..reps {
        coded += code_state(scheme, nodes, state)?;
    }
    Some(coded as f64 / t0.elapsed().as_secs_f64() / 1e9)
}

/// Run `state` through `scheme`'s coding once, stripe by stripe; the state bytes it coded.
fn code_state(scheme: Scheme, nodes: usize, state: &[u8]) -> Option<usize> {
    let stripe = StorageConfig::default().stripe;
    let mut coded = 0;
    match scheme {
        Scheme::Partner => return None,
        Scheme::Ida => {
            let n = n_0(nodes).min(nodes);
            let m = n.div_ceil(2);
            let codec = Dispersal::new(n, m, Mode::Systematic).ok()?;
            let mut spill = Vec::new();
            let mut parity: Vec<Vec<u8>> = vec![Vec::new(); n - m];
            for s in state.chunks(stripe) {
                let l = codec.piece_len(s.len());
                // A short stripe is padded to m whole chunks, as the protocol pads it.
                let rows: Vec<&[u8]> = if s.len() == m * l {
                    s.chunks(l).collect()
                } else {
                    spill.clear();
                    spill.extend_from_slice(s);
                    spill.resize(m * l, 0);
                    spill.chunks(l).collect()
                };
                parity.iter_mut().for_each(|p| p.resize(l, 0));
                let mut outs: Vec<&mut [u8]> =
                    parity.iter_mut().map(|p| p.as_mut_slice()).collect();
                codec.encode_rows(&rows, &mut outs);
                coded += s.len();
            }
            std::hint::black_box(&parity);
        }
        Scheme::Xor { set } => {
            let seg = stripe.div_ceil(set.max(2) - 1);
            let mut parity = vec![0u8; seg];
            for s in state.chunks(seg) {
                crate::storage::xor_into(&mut parity[..s.len()], s);
                coded += s.len();
            }
            std::hint::black_box(&parity);
        }
    }
    Some(coded)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coding rate counts only bytes it coded, and it codes every byte: short stripes
    /// too (it once skipped any stripe that did not fill `m` chunks, and reported hundreds of
    /// GB/s for small states).
    #[test]
    fn the_coding_rate_codes_every_byte_of_the_state() {
        for nodes in [2, 4, 16, 64] {
            for len in [1usize, 1000, 1 << 20, (3 << 20) + 5] {
                let state = vec![7u8; len];
                for scheme in [Scheme::Ida, Scheme::Xor { set: 8 }] {
                    assert_eq!(
                        code_state(scheme, nodes, &state),
                        Some(len),
                        "{scheme:?} {nodes} {len}"
                    );
                }
                assert_eq!(code_state(Scheme::Partner, nodes, &state), None);
            }
        }
    }
}

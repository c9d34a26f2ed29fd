//! `weft bench agree`: the endpoint's uniform agreement on in-process engine nodes, with
//! nodes killed during the call, beside the membership's own stabilization in the same trial.
//!
//! A trial starts a fresh job of `nodes` endpoint services, runs one agreement to warm the
//! connections to the root, then times a second: every node is handed its call at once and,
//! right after, the victims are killed. The agreement's time is from the calls to the last
//! survivor's decision; the membership's Ts from the kills to the last survivor's view
//! without the victims. Every survivor must decide once and alike, on the failed set the
//! trial reports.

use super::stabilize::BenchError;
use crate::engine::reactor::NodeEvent;
use crate::metrics::{summarize_exact, Summary};
use crate::proto::endpoint::{EndpointEvent, EndpointRequest, Service, ServiceConfig};
use crate::proto::uniform::AgreeOp;
use crate::rng::SimRng;
use crate::transport::{Cluster, NodeOptions};
use crate::{NodeId, Rank};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which nodes die during the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victims {
    /// The root (the agreement's coordinator) and the next in line after it.
    Root,
    /// Members other than the root, drawn from the seed.
    Members,
}

/// One benchmark's settings.
#[derive(Clone, Debug)]
pub struct AgreeConfig {
    /// Nodes.
    pub nodes: u32,
    /// Nodes killed during the call.
    pub fail_during: u32,
    /// Which.
    pub victims: Victims,
    /// Trials.
    pub repeat: usize,
    /// Seed of the victims (trial `t` uses `seed + t`).
    pub seed: u64,
    /// Engine settings.
    pub opts: NodeOptions,
    /// Longest wait for anything.
    pub timeout: Duration,
}

/// What the benchmark measured.
#[derive(Clone, Debug, Serialize)]
pub struct AgreeRow {
    /// Nodes.
    pub nodes: u32,
    /// Nodes killed during each call.
    pub fail_during: u32,
    /// `root` or `members`.
    pub victims: &'static str,
    /// Trials.
    pub trials: usize,
    /// Every trial ended with every survivor deciding once, alike, on the operation over
    /// exactly the ranks outside the failed set.
    pub agreed: bool,
    /// From the calls to the last survivor's decision.
    pub agree: Summary,
    /// The membership's Ts in the same trials: from the kills to the last survivor's view
    /// without the victims (`None` without kills).
    pub ts: Option<Summary>,
    /// Trials whose decision named the victims failed (the rest decided before they died).
    pub failed_named: usize,
    /// The backend the nodes ran on.
    pub backend: String,
}

/// Run the trials.
pub fn run(cfg: &AgreeConfig) -> Result<AgreeRow, BenchError> {
    if cfg.fail_during >= cfg.nodes {
        return Err(BenchError::Config(format!(
            "--fail-during {}: fewer than --nodes ({})",
            cfg.fail_during, cfg.nodes
        )));
    }
    let (mut agree, mut ts) = (Vec::new(), Vec::new());
    let (mut agreed, mut failed_named) = (true, 0);
    let mut backend = String::new();
    for t in 0..cfg.repeat {
        let trial = trial(cfg, cfg.seed.wrapping_add(t as u64))?;
        agree.push(trial.agree_us);
        ts.extend(trial.ts_us);
        agreed &= trial.agreed;
        failed_named += usize::from(trial.failed_named);
        backend = trial.backend;
    }
    Ok(AgreeRow {
        nodes: cfg.nodes,
        fail_during: cfg.fail_during,
        victims: match cfg.victims {
            Victims::Root => "root",
            Victims::Members => "members",
        },
        trials: cfg.repeat,
        agreed,
        agree: summarize_exact(&agree),
        ts: (!ts.is_empty()).then(|| summarize_exact(&ts)),
        failed_named,
        backend,
    })
}

/// Each rank's decision: when it was read, its value, its failed set.
type Decisions = HashMap<u32, (Instant, u64, Vec<Rank>)>;

struct Trial {
    agree_us: f64,
    ts_us: Option<f64>,
    agreed: bool,
    failed_named: bool,
    backend: String,
}

fn victims_of(cfg: &AgreeConfig, seed: u64) -> BTreeSet<u32> {
    match cfg.victims {
        Victims::Root => (0..cfg.fail_during).collect(),
        Victims::Members => {
            let mut rng = SimRng::new(seed);
            let mut v = BTreeSet::new();
            while v.len() < cfg.fail_during as usize {
                v.insert(1 + rng.below(u64::from(cfg.nodes) - 1) as u32);
            }
            v
        }
    }
}

fn trial(cfg: &AgreeConfig, seed: u64) -> Result<Trial, BenchError> {
    let n = cfg.nodes;
    let ring: Arc<[NodeId]> = (0..u64::from(n)).map(NodeId).collect();
    let service = ServiceConfig::default();
    let opts = NodeOptions {
        params: service.membership.params(n as usize),
        ..cfg.opts.clone()
    };
    let mut cluster = Cluster::start(n as usize, opts, move |i, _| {
        Service::new(Rank(i as u32), ring.clone(), service, Duration::ZERO)
    })?;
    let backend = cluster.backend_name();
    let wait = |cluster: &Cluster<Service>,
                want: &BTreeSet<u32>,
                k: u64,
                views: &mut HashMap<u32, Instant>,
                dead: &BTreeSet<u32>|
     -> Result<Decisions, BenchError> {
        let deadline = Instant::now() + cfg.timeout;
        let mut got = HashMap::new();
        while got.len() < want.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let (id, e) = cluster.events.recv_timeout(left).map_err(|_| {
                BenchError::Timeout(
                    cfg.timeout,
                    format!("agreement {k}: {} of {} decided", got.len(), want.len()),
                )
            })?;
            let r = id.0 as u32;
            match e {
                NodeEvent::Protocol(EndpointEvent::Agreed {
                    k: got_k,
                    value,
                    failed,
                }) if got_k == k && want.contains(&r) => {
                    let twice = got.insert(r, (Instant::now(), value, failed)).is_some();
                    if twice {
                        return Err(BenchError::Config(format!("rank {r} decided {k} twice")));
                    }
                }
                NodeEvent::Protocol(EndpointEvent::ViewInstalled { members, .. })
                    if !dead.is_empty() && members.iter().all(|m| !dead.contains(&m.0)) =>
                {
                    views.entry(r).or_insert_with(Instant::now);
                }
                _ => {}
            }
        }
        Ok(got)
    };
    let everyone: BTreeSet<u32> = (0..n).collect();
    let call = |cluster: &Cluster<Service>, ranks: &BTreeSet<u32>| {
        for &r in ranks {
            cluster.nodes[r as usize].request(EndpointRequest::Agree {
                value: 1 << (r % 64),
                op: AgreeOp::Or,
            });
        }
    };
    // Warm: the connections to the root exist before the timed call.
    call(&cluster, &everyone);
    wait(
        &cluster,
        &everyone,
        0,
        &mut HashMap::new(),
        &BTreeSet::new(),
    )?;
    let dead = victims_of(cfg, seed);
    let live: BTreeSet<u32> = everyone.difference(&dead).copied().collect();
    let start = Instant::now();
    call(&cluster, &everyone);
    let killed = Instant::now();
    for &v in &dead {
        cluster.nodes[v as usize].kill();
    }
    let mut views = HashMap::new();
    let got = wait(&cluster, &live, 1, &mut views, &dead)?;
    // Ts: every survivor's view without the victims (some may come after the decision).
    if !dead.is_empty() {
        let deadline = Instant::now() + cfg.timeout;
        while views.len() < live.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            let (id, e) = cluster.events.recv_timeout(left).map_err(|_| {
                BenchError::Timeout(cfg.timeout, "the view without the victims".into())
            })?;
            if let NodeEvent::Protocol(EndpointEvent::ViewInstalled { members, .. }) = e {
                if members.iter().all(|m| !dead.contains(&m.0)) {
                    views.entry(id.0 as u32).or_insert_with(Instant::now);
                }
            }
        }
    }
    let _ = cluster.shutdown();
    let last = got.values().map(|g| g.0).max().unwrap_or(start);
    let first = &got[live.iter().next().expect("a survivor")];
    let alike = got.values().all(|g| g.1 == first.1 && g.2 == first.2);
    let expected = everyone
        .iter()
        .filter(|&&r| !first.2.contains(&Rank(r)))
        .fold(0u64, |acc, &r| acc | 1 << (r % 64));
    let named = !first.2.is_empty();
    let failed_ok = first.2.iter().all(|r| dead.contains(&r.0));
    Ok(Trial {
        agree_us: last.duration_since(start).as_secs_f64() * 1e6,
        ts_us: views
            .values()
            .max()
            .map(|&t| t.duration_since(killed).as_secs_f64() * 1e6),
        agreed: alike && first.1 == expected && failed_ok,
        failed_named: named,
        backend,
    })
}

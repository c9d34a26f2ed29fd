//! `weft bench bmg --procs`: the BMG construction with one OS process per node, for the
//! launcher's view of a job: every process a separate address space, scheduled by the kernel
//! like the ranks of an MPI job. (In-process jobs whose connections do not fit in one
//! descriptor table, 1024 nodes need about 20 500, give each reactor a table of its own:
//! `ReactorOptions::own_descriptors`.)
//!
//! Both halves are here. The node process (`weft bench bmg-node`, started only by the
//! launcher) builds its own copy of the launch tree from the same arguments, binds, says where
//! (`{"listening": ADDR}`), reads the peer list, brings its engine up with the overlay held
//! ([`Held`]) and says `ready`; then a `go T` line starts the overlay at `T`
//! (`CLOCK_MONOTONIC`, one clock for every process of the host), and the node reports
//! `started`, `quiet` and `woke` on that clock. The run is timed from `T`: the processes'
//! own start-up (seconds for a thousand of them on two cores, most of a construction's time
//! when a `go` started each engine) is not the construction's. How late the last overlay
//! started is the row's `start_ms`.
//!
//! The end: a few hundred processes on two cores wait hundreds of ms to be scheduled, so a
//! silence in the reports proves nothing (a 50 ms one stopped 256 processes half-built). Once
//! all are quiet the launcher asks every process for its message counters (`count`, answered
//! by the overlay's `Event::Counters`) until two rounds agree, with as many messages received
//! as sent and all quiet: Mattern's four-counter test, no message in flight. Then `stop`: each
//! stops and reports its final neighbors ([`Fingers`]) and its message count.

use super::bmg::{tree_of, RealRun, Sent, Settling};
use super::procs::{self, Job, ENDED};
use super::stabilize::BenchError;
use crate::bootstrap::stdio;
use crate::engine::monotonic_ns;
use crate::engine::reactor::NodeEvent;
use crate::proto::held::Held;
use crate::proto::spontaneous::SpontaneousConfig;
use crate::proto::stamped::Stamped;
use crate::proto::Event;
use crate::sim::bmg::{overlay_of, Fingers};
use crate::sim::tree::{Tree, TreeKind};
use crate::transport::JobKey;
use crate::transport::{bind, spawn, NodeOptions, NodeSpec};
use crate::NodeId;
use serde_json::json;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

/// Resident memory of one node process, with margin: 7.1 MiB measured for a `weft` node
/// process with its reactor (VmRSS, 2026-11-28, AMD guest).
const PROCESS_BYTES: u64 = 10 << 20;

/// Refuse a job of `n` node processes that the available memory would not hold (1024 take
/// about 7 GiB): past it the kernel kills processes halfway through the run.
pub fn fits_memory(n: u32) -> Result<(), BenchError> {
    fits_memory_in(n, super::available_memory())
}

fn fits_memory_in(n: u32, available: Option<u64>) -> Result<(), BenchError> {
    let need = u64::from(n) * PROCESS_BYTES;
    match available {
        Some(have) if need > have => Err(BenchError::Config(format!(
            "{n} node processes need about {} MiB; {} MiB is available: run fewer",
            need >> 20,
            have >> 20
        ))),
        _ => Ok(()),
    }
}

/// The line, with a start time, that starts every node's overlay once all are ready.
const GO: &str = "go";
/// The line that asks a node for its message counters.
const COUNT: &str = "count";
/// The line that stops a node and has it report its final neighbors.
const STOP: &str = "stop";

/// One node process of a BMG job.
#[derive(Clone, Debug)]
pub struct BmgNode {
    /// Its process in the launch tree.
    pub id: u32,
    /// Processes in the job.
    pub nodes: u32,
    /// Launch tree shape, largest degree and seed (a random tree): the launcher's, so every
    /// process builds the same tree.
    pub tree: (TreeKind, u32, u64),
    /// Firing period of the spontaneous rules (no refresh, as in `weft bench bmg`).
    pub period: Duration,
    /// Doublings of the period while a process waits ([`SpontaneousConfig::backoff`]).
    pub backoff: u8,
    /// Engine settings.
    pub opts: NodeOptions,
}

fn failed(what: impl std::fmt::Display) -> BenchError {
    BenchError::Config(format!("BMG node process: {what}"))
}

/// What a node process's main loop waits for: its node's events, and the launcher's `count`
/// and `stop` lines (after the peer list and `go`, read before the node starts).
enum Input {
    Event(NodeEvent),
    Count,
    Stop,
}

/// Run one node process: `input` and `out` are its stdin and stdout.
pub fn node(
    cfg: &BmgNode,
    key: JobKey,
    mut input: impl BufRead + Send + 'static,
    out: &mut impl Write,
) -> Result<(), BenchError> {
    let (kind, degree, seed) = cfg.tree;
    let tree = tree_of(kind, cfg.nodes, degree, seed)?;
    if cfg.id >= cfg.nodes {
        return Err(failed(format!(
            "--id {} is not in 0..{}",
            cfg.id, cfg.nodes
        )));
    }
    let me = NodeId(u64::from(cfg.id));
    let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let addr = listener.local_addr().map_err(failed)?;
    stdio::announce(out, addr).map_err(failed)?;
    let peers = stdio::read_peers(&mut input).map_err(failed)?;
    let members: Vec<NodeId> = (0..u64::from(cfg.nodes)).map(NodeId).collect();
    peers
        .check_covers(&members, me, "the peer list on stdin")
        .map_err(failed)?;
    let spont = SpontaneousConfig {
        period: cfg.period,
        refresh: None,
        backoff: cfg.backoff,
    };
    let (tx, rx) = channel();
    let (etx, erx) = channel();
    let spec = NodeSpec {
        id: me,
        listener,
        peers: peers.without(me),
        key,
        core: None,
    };
    // The node's clock starts now: its events' times are read on the launcher's clock as
    // `epoch_ns` plus theirs (CLOCK_MONOTONIC, one for every process of the host).
    let epoch = Instant::now();
    let epoch_ns = monotonic_ns();
    let opts = NodeOptions {
        epoch: Some(epoch),
        ..cfg.opts.clone()
    };
    // The engine comes up now; the overlay starts at the launcher's `go`.
    let held = Held::new(Stamped::new(overlay_of(&tree, cfg.id, spont)));
    let mut handle = spawn(spec, &opts, held, etx)?;
    let say = |out: &mut dyn Write, v: serde_json::Value| -> Result<(), BenchError> {
        writeln!(out, "{v}")
            .and_then(|()| out.flush())
            .map_err(failed)
    };
    say(
        out,
        json!({"node": me.0, "kind": "ready", "backend": handle.backend.to_string()}),
    )?;
    let mut line = String::new();
    input.read_line(&mut line).map_err(failed)?;
    let at = match line.trim().split_once(' ') {
        Some((GO, at)) => at.parse::<u64>().ok(),
        _ => None,
    }
    .ok_or_else(|| {
        failed(format!(
            "expected {GO:?} and a start time (CLOCK_MONOTONIC ns) after the peer list, \
             got {line:?}"
        ))
    })?;
    std::thread::sleep(Duration::from_nanos(at.saturating_sub(monotonic_ns())));
    handle.wake();
    say(
        out,
        json!({"node": me.0, "kind": "started", "mono_ns": monotonic_ns(),
               "cpu_ns": cpu_ns()}),
    )?;
    let events = tx.clone();
    std::thread::spawn(move || {
        while let Ok((_, e)) = erx.recv() {
            if events.send(Input::Event(e)).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        let mut line = String::new();
        // A closed stdin (the launcher gone) stops the node too.
        while input.read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() != STOP {
            if line.trim() == COUNT && tx.send(Input::Count).is_err() {
                return;
            }
            line.clear();
        }
        let _ = tx.send(Input::Stop);
    });
    while let Ok(i) = rx.recv() {
        let kind = match i {
            Input::Stop => break,
            Input::Count => {
                // The overlay answers with `Event::Counters`.
                handle.wake();
                continue;
            }
            Input::Event(NodeEvent::Protocol(Event::Counters {
                sent,
                received,
                quiet,
            })) => {
                say(
                    out,
                    json!({"node": me.0, "kind": "counters", "sent": sent,
                           "received": received, "quiet": quiet, "mono_ns": monotonic_ns(),
                           "cpu_ns": cpu_ns()}),
                )?;
                continue;
            }
            Input::Event(NodeEvent::Protocol(Event::Quiet { at })) => {
                // When it went quiet, not when this thread got to it.
                say(
                    out,
                    json!({"node": me.0, "kind": "quiet",
                           "mono_ns": epoch_ns + at.0}),
                )?;
                continue;
            }
            Input::Event(NodeEvent::Protocol(Event::Woke)) => "woke",
            Input::Event(NodeEvent::Suspect(p)) => {
                say(
                    out,
                    json!({"node": me.0, "kind": "suspect", "peer": p.0,
                           "mono_ns": monotonic_ns()}),
                )?;
                continue;
            }
            Input::Event(NodeEvent::Refused(why)) => {
                say(
                    out,
                    json!({"node": me.0, "kind": "refused", "why": why.to_string(),
                           "mono_ns": monotonic_ns()}),
                )?;
                continue;
            }
            Input::Event(_) => continue,
        };
        say(
            out,
            json!({"node": me.0, "kind": kind, "mono_ns": monotonic_ns()}),
        )?;
    }
    let stamped = handle.stop()?.into_inner();
    // When its state last changed, on the shared clock (the BMG is built at the latest).
    let changed_ns = stamped.changed().map(|t| epoch_ns + t.0);
    let last = stamped.into_inner();
    say(
        out,
        json!({"node": me.0, "kind": "final", "sent": last.sent(), "ring_sent": last.ring_sent(),
               "leaf_fired": last.ring.is_leaf().then(|| last.fired()),
               "fingers": Fingers::of(&last), "changed_ns": changed_ns,
               "mono_ns": monotonic_ns()}),
    )
}

/// The launcher's side: build the BMG over `tree` with one process of `exe` per node, timed
/// from `go`.
pub(crate) fn real(
    exe: &Path,
    tree: &Tree,
    (kind, degree, seed): (TreeKind, u32, u64),
    spont: SpontaneousConfig,
    settle: Duration,
    opts: &NodeOptions,
    timeout: Duration,
) -> Result<RealRun, BenchError> {
    let n = tree.len() as u32;
    let forced = crate::engine::forced_backend(opts.backend)?.map(|b| b.to_string());
    let wait = opts.reactor.wait.to_string();
    let mut job = procs::spawn(exe, n, |id, cmd| {
        cmd.args(["bench", "bmg-node", "--id", &id.to_string()])
            .args(["--nodes", &n.to_string(), "--tree", &kind.to_string()])
            .args(["--degree", &degree.to_string(), "--seed", &seed.to_string()])
            .args(["--period-us", &spont.period.as_micros().to_string()])
            .args(["--backoff", &spont.backoff.to_string()])
            .args(["--wait", &wait])
            .args(forced.iter().flat_map(|b| ["--backend", b.as_str()]));
    })?;
    job.hand_out_peers()?;
    let deadline = Instant::now() + timeout;
    let backends = ready(&mut job, n, deadline, timeout)?;
    // Every overlay starts at one moment, far enough ahead for the `go` lines to reach
    // processes that only wait for them; `started` says how late the last one was.
    let start = monotonic_ns() + GO_LEAD_NS + GO_LEAD_PER_NODE_NS * u64::from(n);
    job.tell_all(&format!("{GO} {start}"))?;
    let since = |r: &serde_json::Value| {
        Duration::from_nanos(r["mono_ns"].as_u64().unwrap_or(start).saturating_sub(start))
    };
    let mut settling = Settling::new(n as usize);
    let mut started = Duration::ZERO;
    let mut wave: Option<Wave> = None;
    let mut last_wave: Option<(u64, u64)> = None;
    // Each process's CPU when its overlay started and at its first counters (asked once all
    // were quiet for the settling time, idle in it): the construction's CPU.
    let mut cpu = vec![(0u64, 0u64); n as usize];
    let cpu_of = |r: &serde_json::Value| r["cpu_ns"].as_u64().unwrap_or(0);
    loop {
        let wait = if settling.all_quiet() && wave.is_none() {
            settle
        } else {
            deadline.saturating_duration_since(Instant::now())
        };
        match job.reports.recv_timeout(wait) {
            Ok((id, r)) => match r["kind"].as_str() {
                Some("started") => {
                    started = started.max(since(&r));
                    cpu[id as usize].0 = cpu_of(&r);
                }
                Some("quiet") => settling.quiet(id as usize, since(&r)),
                Some("woke") => settling.woke(id as usize),
                Some("counters") => {
                    let Some(w) = wave.as_mut() else { continue };
                    w.add(&r);
                    let at = &mut cpu[id as usize].1;
                    if *at == 0 {
                        *at = cpu_of(&r);
                    }
                    if w.left > 0 {
                        continue;
                    }
                    let counts = (w.sent, w.received);
                    let idle = w.all_quiet && w.sent == w.received;
                    wave = None;
                    // Mattern's four counters: what all had received by one wave is what
                    // all had sent by the next, and everyone quiet: nothing in flight.
                    if idle && last_wave == Some(counts) {
                        break;
                    }
                    last_wave = idle.then_some(counts);
                    if idle {
                        job.tell_all(COUNT)?;
                        wave = Some(Wave::new(n));
                    }
                }
                Some("suspect") => {
                    return Err(BenchError::Config(format!(
                        "process {id} lost {} while building the BMG",
                        r["peer"]
                    )))
                }
                Some(ENDED) => return Err(ended_early(&mut job, id, "the BMG was built")),
                _ => {}
            },
            // Quiet for a while: ask everyone for their counters.
            Err(_) if settling.all_quiet() && wave.is_none() => {
                job.tell_all(COUNT)?;
                wave = Some(Wave::new(n));
            }
            Err(_) => return Err(settling.timed_out(timeout)),
        }
    }
    let (msgs, finals, changed_ns) = finals(&mut job, n, timeout)?;
    let backend = backends.into_iter().collect::<Vec<_>>().join("+");
    Ok(RealRun {
        last: settling.last,
        built: Duration::from_nanos(changed_ns.saturating_sub(start)),
        started,
        msgs,
        fingers: finals,
        backend,
        cpu: Duration::from_nanos(cpu.iter().map(|&(a, b)| b.saturating_sub(a)).sum()),
        connections: None,
    })
}

/// This process's CPU so far (all its threads), ns.
fn cpu_ns() -> u64 {
    crate::engine::process_cpu().as_nanos() as u64
}

/// How far ahead of its `go` lines the launcher sets the start: a fixed lead and a write per
/// process (a pipe write and the wake of a process that only waits for it, some µs each on
/// this host; 30 ms in all at 1024 processes).
const GO_LEAD_NS: u64 = 10_000_000;
const GO_LEAD_PER_NODE_NS: u64 = 20_000;

/// Wait until every process's engine is up (`ready`); the backends they run on.
fn ready(
    job: &mut Job,
    n: u32,
    deadline: Instant,
    timeout: Duration,
) -> Result<std::collections::BTreeSet<String>, BenchError> {
    let mut backends = std::collections::BTreeSet::new();
    let mut left = n;
    while left > 0 {
        let Some((id, r)) = job.report_by(deadline) else {
            return Err(BenchError::Timeout(
                timeout,
                format!("{left} of {n} processes did not bring their engine up"),
            ));
        };
        match r["kind"].as_str() {
            Some("ready") => {
                backends.extend(r["backend"].as_str().map(str::to_owned));
                left -= 1;
            }
            Some(ENDED) => return Err(ended_early(job, id, "its engine came up")),
            _ => {}
        }
    }
    Ok(backends)
}

/// One round of asking every process for its counters.
struct Wave {
    left: u32,
    sent: u64,
    received: u64,
    all_quiet: bool,
}

impl Wave {
    fn new(n: u32) -> Self {
        Self {
            left: n,
            sent: 0,
            received: 0,
            all_quiet: true,
        }
    }

    fn add(&mut self, r: &serde_json::Value) {
        self.left = self.left.saturating_sub(1);
        self.sent += r["sent"].as_u64().unwrap_or(0);
        self.received += r["received"].as_u64().unwrap_or(0);
        self.all_quiet &= r["quiet"].as_bool().unwrap_or(false);
    }
}

/// Process `id` ended before `what`: an error naming it, and how it ended.
fn ended_early(job: &mut Job, id: u64, what: &str) -> BenchError {
    failed(format!(
        "process {id} ended before {what}{}",
        job.how_ended(id)
    ))
}

/// Stop every process and read its final neighbors and message count; and the last change
/// of any process's state (`CLOCK_MONOTONIC` ns).
fn finals(
    job: &mut Job,
    n: u32,
    timeout: Duration,
) -> Result<(Sent, Vec<Fingers>, u64), BenchError> {
    job.tell_all(STOP)?;
    let mut finals: Vec<Option<Fingers>> = vec![None; n as usize];
    let (mut msgs, mut left, mut changed) = (Sent::default(), n, 0);
    let deadline = Instant::now() + timeout;
    while left > 0 {
        let Some((id, r)) = job.report_by(deadline) else {
            return Err(BenchError::Timeout(
                timeout,
                format!("{left} of {n} processes did not report their final neighbors"),
            ));
        };
        let slot = &mut finals[id as usize];
        if r["kind"] == ENDED && slot.is_none() {
            return Err(ended_early(job, id, "it reported its final neighbors"));
        }
        if r["kind"] != "final" {
            continue;
        }
        if slot.is_none() {
            let f = serde_json::from_value(r["fingers"].clone())
                .map_err(|e| failed(format!("process {id}'s final neighbors: {e}")))?;
            *slot = Some(f);
            let count = |k: &str| r[k].as_u64().unwrap_or(0);
            msgs = msgs.add(count("sent"), count("ring_sent"), r["leaf_fired"].as_u64());
            changed = changed.max(count("changed_ns"));
            left -= 1;
        }
    }
    Ok((
        msgs,
        finals.into_iter().map(Option::unwrap_or_default).collect(),
        changed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that ends after taking the peer list, before its engine is up, fails the
    /// wait for `ready` at once, naming it and how it ended, instead of when the wait runs
    /// out; the others, still running, are not blamed.
    #[test]
    fn a_process_that_ends_before_ready_is_named_at_once() {
        let mut job = procs::spawn(Path::new("/bin/sh"), 2, |id, cmd| {
            let after = if id == 1 { "exit 3" } else { "read -r go" };
            cmd.args([
                "-c",
                &format!(
                    "echo '{{\"listening\": \"127.0.0.1:{}\"}}'; read -r peers; {after}",
                    9000 + id
                ),
            ]);
        })
        .unwrap();
        job.hand_out_peers().unwrap();
        let wait = Duration::from_secs(60);
        let started = Instant::now();
        let e = ready(&mut job, 2, Instant::now() + wait, wait)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("process 1 ended before its engine came up") && e.contains("exit status: 3"),
            "{e}"
        );
        assert!(started.elapsed() < wait, "named before the wait ran out");
    }

    /// A job is refused when its processes would not fit, naming both sizes; where the kernel
    /// does not say, it runs.
    #[test]
    fn a_job_that_would_not_fit_in_memory_is_refused() {
        let gib = 1u64 << 30;
        assert!(fits_memory_in(1024, Some(24 * gib)).is_ok());
        let e = fits_memory_in(4096, Some(24 * gib))
            .unwrap_err()
            .to_string();
        assert!(e.contains("40960 MiB") && e.contains("24576 MiB"), "{e}");
        assert!(fits_memory_in(4096, None).is_ok());
    }
}

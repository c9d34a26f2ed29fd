//! The floor of a stabilization on this machine, the peer of `weft bench stabilize --compare`:
//! one stabilization wave (a message from the root down every edge of the radix tree, an
//! acknowledgment back up every edge once a subtree has answered) over plain TCP sockets on
//! loopback, with no framing checks, no handshake, no protocol and no engine.
//!
//! It is laid out like the engine's job: the survivors' tree (a balanced radix tree over N − 1
//! processes), spread over one pinned thread per core by the same placement, each thread
//! waiting in epoll as a reactor does (block, busy or adaptive), one connection per tree edge,
//! and every message a single 64-byte write (the size of weft's membership frames). It leaves
//! out what weft's Ts also holds: the report of the failure to the root, the recalculations and
//! the events, so it is a lower bound for any implementation over loopback TCP, and weft's Ts
//! reads as a ratio to it.

use crate::engine::{online_cpus, process_cpu, WaitMode, SPIN};
use crate::topology::radix::RadixTree;
use crate::Rank;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{ErrorKind, Read};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of every message: a membership frame of weft's (`FailedNode`, `FailureAck`).
pub const MSG: usize = 64;
const WAKER: Token = Token(usize::MAX);

/// One floor measurement's settings.
#[derive(Clone, Debug)]
pub struct WaveConfig {
    /// Processes in the tree (a job of N after one failure: N − 1).
    pub processes: u32,
    /// Children per process.
    pub radix: u32,
    /// Thread of each position, as [`RadixTree::preorder_blocks`] (or `None`: position `i` on
    /// thread `i mod threads`).
    pub placement: Option<Vec<u32>>,
    /// Threads, one per core.
    pub threads: usize,
    /// How the threads wait.
    pub wait: WaitMode,
    /// Waves to time.
    pub waves: u32,
    /// Quiet time before each wave (the engine's trials also start on an idle job).
    pub gap: Duration,
}

/// What the waves took.
#[derive(Clone, Debug)]
pub struct WaveRun {
    /// Each wave: the root's first send to its last acknowledgment.
    pub times: Vec<Duration>,
    /// Each wave: CPU of the whole process from its trigger to its end.
    pub cpu: Vec<Duration>,
    /// Messages per wave.
    pub messages: u64,
}

/// The floor's figures (a JSON line of `weft bench stabilize --compare --json`, beside weft's
/// own line for the same job size; shared fields have the same names).
#[derive(Clone, Debug, serde::Serialize)]
pub struct WaveReport {
    /// Nodes of the job (the wave runs over `nodes − 1`).
    pub nodes: u32,
    /// Radix.
    pub radix: u32,
    /// `bare-tcp`.
    pub backend: String,
    /// How the threads waited.
    pub wait: String,
    /// Waves timed.
    pub repeat: u32,
    /// Height of the survivors' tree.
    pub height: u32,
    /// Messages per wave.
    pub messages: u64,
    /// The wave's time, median, µs.
    pub ts_p50_us: f64,
    /// 90th percentile, µs.
    pub ts_p90_us: f64,
    /// 99th percentile, µs.
    pub ts_p99_us: f64,
    /// Longest, µs.
    pub ts_max_us: f64,
    /// Mean, µs.
    pub ts_mean_us: f64,
    /// Half-width of the 99% confidence interval of the mean, µs.
    pub ci99_us: Option<f64>,
    /// CPU of the process per wave, mean, µs.
    pub cpu_mean_us: f64,
    /// CPU time the hypervisor took during the waves, % of all CPUs' time.
    pub steal_pct: Option<f64>,
}

impl WaveReport {
    /// Summarize `run`, made with `cfg` for a job of `nodes`.
    pub fn of(nodes: u32, cfg: &WaveConfig, run: &WaveRun, steal_pct: Option<f64>) -> Self {
        let mut h = crate::metrics::histogram();
        for t in &run.times {
            let _ = h.record((t.as_nanos() as u64).max(1));
        }
        let s = crate::metrics::summarize(&h);
        let samples: Vec<f64> = run.times.iter().map(|t| t.as_secs_f64() * 1e6).collect();
        let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
        let ci = crate::metrics::mean_ci99(&samples).map(|(_, h)| h);
        let cpu = run.cpu.iter().sum::<Duration>().as_secs_f64() * 1e6;
        Self {
            nodes,
            radix: cfg.radix,
            backend: "bare-tcp".into(),
            wait: cfg.wait.to_string(),
            repeat: run.times.len() as u32,
            height: RadixTree::new(cfg.processes, cfg.radix).map_or(0, |t| t.height()),
            messages: run.messages,
            ts_p50_us: s.p50_us,
            ts_p90_us: s.p90_us,
            ts_p99_us: s.p99_us,
            ts_max_us: s.max_us,
            ts_mean_us: mean,
            ci99_us: ci,
            cpu_mean_us: cpu / run.cpu.len().max(1) as f64,
            steal_pct,
        }
    }
}

/// One process of the tree, as its thread holds it.
struct Proc {
    /// Socket index of the connection to the parent (`None` at the root).
    up: Option<usize>,
    /// Socket indices of the connections to the children.
    down: Vec<usize>,
    /// Children that have not acknowledged this wave yet.
    waiting: usize,
}

/// A socket of a thread: whose end it is, which way it points, and a partial message.
struct End {
    stream: TcpStream,
    proc: usize,
    from_parent: bool,
    partial: usize,
}

/// What one thread owns.
struct Part {
    procs: Vec<Proc>,
    ends: Vec<End>,
    /// Index in `procs` of the root, on the root's thread.
    root: Option<usize>,
}

/// One message on each of `targets` (indices into `ends`).
fn send_to(ends: &mut [End], targets: &[usize]) -> std::io::Result<()> {
    for &t in targets {
        super::ping::spin_write(&mut ends[t].stream, &[0x5au8; MSG])?;
    }
    Ok(())
}

/// Build the tree's connections and hand each thread its part.
fn build(cfg: &WaveConfig) -> std::io::Result<Vec<Part>> {
    let n = cfg.processes as usize;
    let tree = RadixTree::new(cfg.processes, cfg.radix)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let threads = cfg.threads.max(1);
    let thread_of = |r: usize| match &cfg.placement {
        Some(p) if r < p.len() => p[r] as usize % threads,
        _ => r % threads,
    };
    let mut parts: Vec<Part> = (0..threads)
        .map(|_| Part {
            procs: Vec::new(),
            ends: Vec::new(),
            root: None,
        })
        .collect();
    let mut local = vec![0usize; n];
    for (r, slot) in local.iter_mut().enumerate() {
        let part = &mut parts[thread_of(r)];
        *slot = part.procs.len();
        if r == 0 {
            part.root = Some(part.procs.len());
        }
        part.procs.push(Proc {
            up: None,
            down: Vec::new(),
            waiting: 0,
        });
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    for c in 1..n {
        let p = tree.parent(Rank(c as u32)).map_or(0, |p| p.0 as usize);
        let dialed = std::net::TcpStream::connect(addr)?;
        let (accepted, _) = listener.accept()?;
        for (r, s, from_parent) in [(p, dialed, false), (c, accepted, true)] {
            s.set_nodelay(true)?;
            s.set_nonblocking(true)?;
            let part = &mut parts[thread_of(r)];
            let i = part.ends.len();
            let proc = &mut part.procs[local[r]];
            if from_parent {
                proc.up = Some(i);
            } else {
                proc.down.push(i);
            }
            part.ends.push(End {
                stream: TcpStream::from_std(s),
                proc: local[r],
                from_parent,
                partial: 0,
            });
        }
    }
    Ok(parts)
}

/// One thread's loop: answer messages until `stop`. The root's thread starts a wave when its
/// waker fires with `go` set, and sends the wave's time on `done`. Returns the waves it began.
///
/// The waker also fires to stop the threads, so only `go` may start a wave: a wave begun on
/// the stopping wake would send into threads that are closing their sockets, and a socket
/// closed with a message unread answers with a reset, which fails whoever reads it next.
fn serve(
    mut part: Part,
    mut poll: Poll,
    wait: WaitMode,
    signals: Signals,
    done: Sender<Duration>,
) -> std::io::Result<u32> {
    for (i, end) in part.ends.iter_mut().enumerate() {
        poll.registry()
            .register(&mut end.stream, Token(i), Interest::READABLE)?;
    }
    let mut events = Events::with_capacity(256);
    let mut buf = [0u8; 4096];
    let mut started: Option<Instant> = None;
    let mut last = Instant::now();
    let mut ready: Vec<usize> = Vec::new();
    let mut begun = 0;
    while !signals.stop.load(Ordering::Acquire) {
        let spinning = match wait {
            WaitMode::Busy => true,
            WaitMode::Adaptive => last.elapsed() < SPIN,
            WaitMode::Block => false,
        };
        poll.poll(&mut events, spinning.then_some(Duration::ZERO))?;
        if events.is_empty() {
            continue;
        }
        last = Instant::now();
        ready.clear();
        for ev in events.iter() {
            if ev.token() == WAKER {
                if let Some(root) = part
                    .root
                    .filter(|_| signals.go.swap(false, Ordering::AcqRel))
                {
                    // A new wave: down every edge of the root.
                    begun += 1;
                    started = Some(Instant::now());
                    let proc = &mut part.procs[root];
                    proc.waiting = proc.down.len();
                    send_to(&mut part.ends, &proc.down)?;
                }
            } else {
                ready.push(ev.token().0);
            }
        }
        for &i in &ready {
            loop {
                let got = match part.ends[i].stream.read(&mut buf) {
                    Ok(0) => return Ok(begun), // the run is over
                    Ok(k) => k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                let end = &mut part.ends[i];
                let whole = (end.partial + got) / MSG;
                end.partial = (end.partial + got) % MSG;
                let (p, from_parent) = (end.proc, end.from_parent);
                for _ in 0..whole {
                    let proc = &mut part.procs[p];
                    if from_parent {
                        // Down: pass it on, or answer at once from a leaf.
                        proc.waiting = proc.down.len();
                        match proc.up {
                            Some(u) if proc.down.is_empty() => send_to(&mut part.ends, &[u])?,
                            _ => send_to(&mut part.ends, &proc.down)?,
                        }
                    } else {
                        // Up: once every child has answered, answer the parent.
                        proc.waiting = proc.waiting.saturating_sub(1);
                        if proc.waiting == 0 {
                            match proc.up {
                                Some(u) => send_to(&mut part.ends, &[u])?,
                                None => {
                                    let t = started.take().map_or(Duration::ZERO, |s| s.elapsed());
                                    let _ = done.send(t);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(begun)
}

/// What the threads are told besides messages: start a wave (the root's), or stop.
#[derive(Clone, Default)]
struct Signals {
    go: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

/// Time `cfg.waves` waves.
pub fn run(cfg: &WaveConfig) -> std::io::Result<WaveRun> {
    if cfg.processes < 2 {
        return Err(std::io::Error::other("a wave needs at least 2 processes"));
    }
    let parts = build(cfg)?;
    let cores = online_cpus();
    let signals = Signals::default();
    let (tx, rx): (Sender<Duration>, Receiver<Duration>) = channel();
    let mut wakers = Vec::new();
    let mut root_waker = None;
    let mut handles = Vec::new();
    for (t, part) in parts.into_iter().enumerate() {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        if part.root.is_some() {
            root_waker = Some(waker.clone());
        }
        wakers.push(waker);
        let (signals, done, wait) = (signals.clone(), tx.clone(), cfg.wait);
        handles.push(std::thread::spawn(move || {
            core_affinity::set_for_current(core_affinity::CoreId { id: t % cores });
            serve(part, poll, wait, signals, done)
        }));
    }
    let root_waker = root_waker.ok_or_else(|| std::io::Error::other("no root"))?;
    let mut out = WaveRun {
        times: Vec::with_capacity(cfg.waves as usize),
        cpu: Vec::with_capacity(cfg.waves as usize),
        messages: 2 * (cfg.processes as u64 - 1),
    };
    let mut failed = None;
    for _ in 0..cfg.waves {
        std::thread::sleep(cfg.gap);
        let cpu = process_cpu();
        signals.go.store(true, Ordering::Release);
        root_waker.wake()?;
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(t) => {
                out.times.push(t);
                out.cpu.push(process_cpu().saturating_sub(cpu));
            }
            Err(_) => {
                failed = Some(std::io::Error::other("a wave did not end within 30 s"));
                break;
            }
        }
    }
    signals.stop.store(true, Ordering::Release);
    for w in &wakers {
        let _ = w.wake();
    }
    let mut begun = 0;
    for h in handles {
        begun += h
            .join()
            .map_err(|_| std::io::Error::other("a wave thread panicked"))??;
    }
    match failed {
        Some(e) => Err(e),
        // Every message counted and timed belongs to a wave that was asked for.
        None if begun as usize != out.times.len() => Err(std::io::Error::other(format!(
            "the root began {begun} waves for {} timed",
            out.times.len()
        ))),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wave_ends_with_the_root_holding_every_ack() {
        for (n, a, wait) in [
            (2, 2, WaitMode::Block),
            (21, 4, WaitMode::Block),
            (63, 4, WaitMode::Adaptive),
            (40, 2, WaitMode::Busy),
        ] {
            let tree = RadixTree::new(n, a).unwrap();
            let run = run(&WaveConfig {
                processes: n,
                radix: a,
                placement: Some(tree.preorder_blocks(2)),
                threads: 2,
                wait,
                waves: 5,
                gap: Duration::from_millis(1),
            })
            .unwrap();
            assert_eq!(run.times.len(), 5, "n={n} a={a}");
            assert_eq!(run.messages, 2 * (n as u64 - 1));
            // A wave is at least the round trip down and up the tree's height.
            assert!(run.times.iter().all(|t| *t > Duration::ZERO), "{run:?}");
        }
    }
}

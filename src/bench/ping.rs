//! `weft ping`: one-way latency and bandwidth between two engine nodes on loopback, pinned to
//! two cores, and the same ping-pong over plain std sockets with busy polling (the peer every
//! figure is compared with, in the same run).

use crate::engine::reactor::NodeEvent;
use crate::engine::{EngineError, StealMeter, StealTally};
use crate::metrics::{histogram, median_interval, summarize, MedianInterval};
use crate::proto::ping::PingPong;
use crate::proto::Event;
use crate::transport::{Cluster, NodeOptions};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// One size's figures (a JSON line of `weft ping --json`).
#[derive(Clone, Debug, Serialize)]
pub struct PingRow {
    /// Payload bytes.
    pub size: usize,
    /// `poll`, `uring`, or `std-busy` for the peer.
    pub backend: String,
    /// How the message went: `tcp`, `inproc` (see [`crate::transport::Transport`]); `tcp`
    /// for the peer.
    pub transport: String,
    /// Wait mode (`busy` for the peer).
    pub wait: String,
    /// One-way latency (RTT / 2), median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// `size / mean one-way time`, MB/s.
    pub mb_per_s: f64,
    /// Timed round trips.
    pub iters: u64,
    /// The TCP congestion control of the row's connections (see `engine::congestion`).
    pub congestion: String,
    /// CPU time the hypervisor stole during this backend's run, % of all CPUs' time.
    pub steal_pct: Option<f64>,
    /// weft's frames carried a MAC (`--bulk-mac`); false for the peer, which has none.
    pub bulk_mac: bool,
    /// With `--compare`, on weft's rows: weft's p50 over the peer's, one ratio per round
    /// (both met the same spell of the host), as their median and its 95% interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ratio: Option<MedianInterval>,
    /// Likewise weft's MB/s over the peer's (higher is better).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mb_ratio: Option<MedianInterval>,
    /// What carried the round trips: `protocol` (a sans-IO ping-pong that answers on the
    /// reactor), `endpoint` (`weft::Endpoint`'s send and receive, answered by the application
    /// thread), or `peer` for the peer's rows. With `--compare-api`, the endpoint rows'
    /// ratios are over the protocol's.
    pub api: &'static str,
}

#[allow(clippy::too_many_arguments)]
fn rows_from(
    rtts: &HashMap<usize, Vec<u64>>,
    sizes: &[usize],
    backend: &str,
    transport: &str,
    wait: &str,
    congestion: &str,
    steal_pct: Option<f64>,
) -> Vec<PingRow> {
    sizes
        .iter()
        .filter_map(|&size| {
            let v = rtts.get(&size)?;
            let mut h = histogram();
            for &rtt in v {
                h.record((rtt / 2).max(1)).ok()?;
            }
            let s = summarize(&h);
            Some(PingRow {
                size,
                backend: backend.into(),
                transport: transport.into(),
                wait: wait.into(),
                p50_us: s.p50_us,
                p99_us: s.p99_us,
                p999_us: s.p999_us,
                mb_per_s: size as f64 / s.mean_us.max(1e-9),
                iters: s.count,
                congestion: congestion.into(),
                steal_pct,
                p50_ratio: None,
                mb_ratio: None,
                bulk_mac: false,
                api: "protocol",
            })
        })
        .collect()
}

/// Ping-pong between two engine nodes, with `opts`' wait mode, backend and zero-copy
/// threshold (pinned, one reactor per node's core).
pub fn engine(sizes: &[usize], iters: u64, opts: NodeOptions) -> Result<Vec<PingRow>, EngineError> {
    let steal = StealMeter::start();
    let (rtts, backend, transport) = engine_rtts(sizes, iters, opts.clone())?;
    let congestion = crate::engine::congestion::resolve(opts.reactor.congestion.as_deref())?;
    let mut rows = rows_from(
        &rtts,
        sizes,
        &backend,
        &transport,
        &opts.reactor.wait.to_string(),
        &congestion,
        steal.pct(),
    );
    rows.iter_mut().for_each(|r| r.bulk_mac = opts.bulk_mac);
    Ok(rows)
}

/// weft and the std peer ([`std_busy_poll_rtts`]) taking turns: `rounds` rounds, each running
/// weft's ping-pong and then the peer's for about `iters / rounds` round trips per size. A
/// shared host's slow and fast spells last from a fraction of a second to seconds, so with
/// turns both sides meet the same ones and their ratio holds; run one after the other, a
/// spell can fall on one side alone. Each round also gives a ratio of its own, and weft's rows
/// carry their median and its interval ([`PingRow::p50_ratio`]): a spell that lasts a round
/// moves one ratio, not the pooled figures of one side. The peer's connections use
/// `peer_congestion` (`None`: the system's default; pass `opts.reactor.congestion` to compare the
/// engines alone). Returns weft's rows and the peer's.
pub fn compare(
    sizes: &[usize],
    iters: u64,
    rounds: u64,
    opts: NodeOptions,
    peer: Peer,
    peer_congestion: Option<&str>,
) -> Result<(Vec<PingRow>, Vec<PingRow>), EngineError> {
    use crate::engine::congestion::resolve;
    let our_cc = resolve(opts.reactor.congestion.as_deref())?;
    let peer_cc = match peer {
        Peer::StdBusy => resolve(peer_congestion)?,
        Peer::Vader => "-".to_string(),
    };
    let vader = match peer {
        Peer::Vader => Some(Vader::build()?),
        Peer::StdBusy => None,
    };
    let (peer_name, peer_transport) = peer.names();
    let rounds = rounds.clamp(1, iters.max(1));
    let (mut ours, mut peers) = (HashMap::new(), HashMap::new());
    let (mut our_steal, mut peer_steal) = (StealTally::default(), StealTally::default());
    let mut per_round: HashMap<usize, (Vec<f64>, Vec<f64>)> = HashMap::new();
    let wait = opts.reactor.wait.to_string();
    // What each round's reactors ran on (the same, unless some fell back to poll).
    let mut ran_on = Vec::new();
    let mut transport = String::new();
    for r in 0..rounds {
        // Spread the remainder so that the rounds add up to `iters`.
        let n = iters / rounds + u64::from(r < iters % rounds);
        let steal = StealMeter::start();
        let (our, backend, went) = engine_rtts(sizes, n, opts.clone())?;
        transport = went;
        our_steal = our_steal.with(&steal);
        let steal = StealMeter::start();
        let peer = match &vader {
            Some(v) => v.rtts(sizes, n)?,
            None => std_busy_poll_rtts(sizes, n, peer_congestion)?,
        };
        peer_steal = peer_steal.with(&steal);
        let ours_now = rows_from(&our, sizes, &backend, &transport, &wait, &our_cc, None);
        ran_on.push(backend);
        let peer_now = rows_from(
            &peer,
            sizes,
            peer_name,
            peer_transport,
            "busy",
            &peer_cc,
            None,
        );
        for (o, p) in ours_now.iter().zip(&peer_now) {
            let (p50, mb) = per_round.entry(o.size).or_default();
            p50.push(o.p50_us / p.p50_us);
            mb.push(o.mb_per_s / p.mb_per_s);
        }
        merge(&mut ours, our);
        merge(&mut peers, peer);
    }
    let backend = crate::transport::backend_name(&ran_on);
    let mut weft = rows_from(
        &ours,
        sizes,
        &backend,
        &transport,
        &wait,
        &our_cc,
        our_steal.pct(),
    );
    for row in &mut weft {
        row.bulk_mac = opts.bulk_mac;
        if let Some((p50, mb)) = per_round.get(&row.size) {
            row.p50_ratio = median_interval(p50);
            row.mb_ratio = median_interval(mb);
        }
    }
    let mut peer_rows = rows_from(
        &peers,
        sizes,
        peer_name,
        peer_transport,
        "busy",
        &peer_cc,
        peer_steal.pct(),
    );
    peer_rows.iter_mut().for_each(|r| r.api = "peer");
    Ok((weft, peer_rows))
}

/// Round trips through two [`crate::transport::endpoint::DrivenEndpoint`]s, each driven by an
/// application thread of its own as an embedding runtime's would be (see `endpoint_rtts`).
pub fn endpoint(
    sizes: &[usize],
    iters: u64,
    opts: NodeOptions,
) -> Result<Vec<PingRow>, EngineError> {
    let steal = StealMeter::start();
    let (rtts, backend, transport) = endpoint_rtts(sizes, iters, opts.clone())?;
    let congestion = crate::engine::congestion::resolve(opts.reactor.congestion.as_deref())?;
    let wait = opts.reactor.wait.to_string();
    let mut rows = rows_from(
        &rtts,
        sizes,
        &backend,
        &transport,
        &wait,
        &congestion,
        steal.pct(),
    );
    rows.iter_mut().for_each(|r| r.api = "endpoint");
    Ok(rows)
}

/// The protocol's ping-pong ([`engine`]) and the endpoint's ([`endpoint`]) taking turns in
/// `rounds` rounds, as [`compare`] does with a peer: the endpoint's rows carry the per-round
/// ratios over the protocol's. Returns the protocol's rows and the endpoint's.
pub fn compare_api(
    sizes: &[usize],
    iters: u64,
    rounds: u64,
    opts: NodeOptions,
) -> Result<(Vec<PingRow>, Vec<PingRow>), EngineError> {
    let cc = crate::engine::congestion::resolve(opts.reactor.congestion.as_deref())?;
    let wait = opts.reactor.wait.to_string();
    let rounds = rounds.clamp(1, iters.max(1));
    let (mut protocol, mut endpoint) = (HashMap::new(), HashMap::new());
    let mut per_round: HashMap<usize, (Vec<f64>, Vec<f64>)> = HashMap::new();
    let (mut ran_on, mut transport) = (Vec::new(), String::new());
    for r in 0..rounds {
        let n = iters / rounds + u64::from(r < iters % rounds);
        let (p, backend, went) = engine_rtts(sizes, n, opts.clone())?;
        let (e, _, _) = endpoint_rtts(sizes, n, opts.clone())?;
        let p_now = rows_from(&p, sizes, &backend, &went, &wait, &cc, None);
        let e_now = rows_from(&e, sizes, &backend, &went, &wait, &cc, None);
        for (p, e) in p_now.iter().zip(&e_now) {
            let (p50, mb) = per_round.entry(p.size).or_default();
            p50.push(e.p50_us / p.p50_us);
            mb.push(e.mb_per_s / p.mb_per_s);
        }
        ran_on.push(backend);
        transport = went;
        merge(&mut protocol, p);
        merge(&mut endpoint, e);
    }
    let backend = crate::transport::backend_name(&ran_on);
    let protocol = rows_from(&protocol, sizes, &backend, &transport, &wait, &cc, None);
    let mut endpoint = rows_from(&endpoint, sizes, &backend, &transport, &wait, &cc, None);
    for row in &mut endpoint {
        row.api = "endpoint";
        if let Some((p50, mb)) = per_round.get(&row.size) {
            row.p50_ratio = median_interval(p50);
            row.mb_ratio = median_interval(mb);
        }
    }
    Ok((protocol, endpoint))
}

/// Round trips between two [`crate::transport::endpoint::DrivenEndpoint`]s, each driven by a
/// thread of its own (pinned to cores 0 and 1) as two processes of a job embedding weft
/// would: rank 0's thread sends `size` bytes to rank 1, whose thread sends them back when it
/// reads them. Every send is routed and acknowledged, as the endpoint's are. The transport is
/// what a node alone in its process would use: shared memory or TCP, as `opts` say.
fn endpoint_rtts(
    sizes: &[usize],
    iters: u64,
    opts: NodeOptions,
) -> Result<(Rtts, String, String), EngineError> {
    use crate::transport::endpoint::{DrivenEndpoint, EndpointConfig};
    use crate::{NodeId, Rank};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let cfg = EndpointConfig {
        node: NodeOptions { pin: false, ..opts },
        guard: false,
        ..EndpointConfig::default()
    };
    let transport = if cfg.node.shm_between_processes()? {
        "shm"
    } else {
        "tcp"
    };
    let ring: Arc<[NodeId]> = [NodeId(0), NodeId(1)].into();
    let warmup = (iters / 10).clamp(10, 1000);
    let done = Arc::new(AtomicBool::new(false));
    let ranks: Vec<_> = crate::transport::loopback_specs(2, &cfg.node)?
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let (cfg, ring, done, sizes) =
                (cfg.clone(), ring.clone(), done.clone(), sizes.to_vec());
            std::thread::spawn(move || -> Result<(Rtts, String), EngineError> {
                pin(i);
                let ep = DrivenEndpoint::spawn(spec, Rank(i as u32), ring, &cfg)?;
                let backend = ep.backend().map_or("unknown".into(), |b| b.to_string());
                let ran = if i == 0 {
                    let r = ping_endpoint(&ep, &sizes, iters, warmup);
                    done.store(true, Ordering::Release);
                    r
                } else {
                    pong_endpoint(&ep, &done).map(|()| HashMap::new())
                };
                ep.stop()?;
                Ok((ran?, backend))
            })
        })
        .collect();
    let mut out = Vec::new();
    for r in ranks {
        out.push(r.join().map_err(|_| EngineError::Panicked)??);
    }
    let backend = crate::transport::backend_name(out.iter().map(|(_, b)| b));
    let rtts = out.swap_remove(0).0;
    Ok((rtts, backend, transport.into()))
}

/// Rank 0 of [`endpoint_rtts`]: each round trip from its send to the echo's `Received`.
fn ping_endpoint(
    ep: &crate::transport::endpoint::DrivenEndpoint,
    sizes: &[usize],
    iters: u64,
    warmup: u64,
) -> Result<Rtts, EngineError> {
    use crate::buf::Payload;
    use crate::proto::endpoint::EndpointEvent;
    let fail = |what: String| EngineError::Io(std::io::Error::other(what));
    let mut rtts: Rtts = HashMap::new();
    for &size in sizes {
        let data = Payload::from(vec![0x5a; size]);
        for i in 0..warmup + iters {
            let start = Instant::now();
            ep.send(crate::Rank(1), data.clone());
            loop {
                match ep.next(Duration::from_secs(60)) {
                    Ok(NodeEvent::Protocol(EndpointEvent::Received { .. })) => break,
                    Ok(NodeEvent::Protocol(EndpointEvent::Failed { to, why, .. })) => {
                        return Err(fail(format!("a ping to {to:?} failed: {why:?}")));
                    }
                    Ok(NodeEvent::Suspect(p)) => return Err(fail(format!("lost {p} during ping"))),
                    Ok(_) => {}
                    Err(e) => return Err(fail(format!("endpoint ping: {e}"))),
                }
            }
            if i >= warmup {
                rtts.entry(size)
                    .or_default()
                    .push(start.elapsed().as_nanos() as u64);
            }
        }
    }
    Ok(rtts)
}

/// Rank 1 of [`endpoint_rtts`]: sends back what it receives until rank 0 is `done`.
fn pong_endpoint(
    ep: &crate::transport::endpoint::DrivenEndpoint,
    done: &std::sync::atomic::AtomicBool,
) -> Result<(), EngineError> {
    use crate::proto::endpoint::EndpointEvent;
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        match ep.next(Duration::from_millis(20)) {
            Ok(NodeEvent::Protocol(EndpointEvent::Received { from, data, .. })) => {
                ep.send(from, data);
            }
            Ok(_) | Err(crate::transport::handle::Silence::Timeout(_)) => {}
            Err(e) => return Err(EngineError::Io(std::io::Error::other(format!("pong: {e}")))),
        }
    }
    Ok(())
}

/// What weft's ping-pong is put beside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// The same ping-pong over std `TcpStream`s, busy-polled ([`std_busy_poll_rtts`]): the
    /// floor of the TCP path.
    StdBusy,
    /// Open MPI's ping-pong between two ranks of this host through its shared-memory BTL
    /// (`tools/peers/vader_pingpong.c`, built with `mpicc`, run with `mpirun -np 2
    /// --bind-to core --mca btl self,vader`): the peer of co-located transports.
    Vader,
}

impl Peer {
    /// The peer rows' `backend` and `transport`.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Peer::StdBusy => ("std-busy", "tcp"),
            Peer::Vader => ("openmpi-vader", "shm"),
        }
    }

    /// Whether Open MPI's compiler wrapper and launcher are on the `PATH` (what
    /// [`Peer::Vader`] needs).
    pub fn vader_available() -> bool {
        ["mpicc", "mpirun"].iter().all(|t| on_path(&open_mpi(t)))
    }
}

/// Open MPI's own name of `tool` where Debian keeps one (`mpicc.openmpi`): with MPICH
/// installed too, `mpicc` and `mpirun` may be either's.
fn open_mpi(tool: &str) -> String {
    let own = format!("{tool}.openmpi");
    if on_path(&own) {
        own
    } else {
        tool.to_string()
    }
}

/// Whether `tool` is an executable on the `PATH`.
fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(d.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The Open MPI ping-pong, built for one comparison in a directory of its own that goes with
/// it.
struct Vader {
    dir: std::path::PathBuf,
}

impl Vader {
    const SOURCE: &'static str = include_str!("../../tools/peers/vader_pingpong.c");

    fn build() -> Result<Self, EngineError> {
        let fail = |what: String| EngineError::Io(std::io::Error::other(what));
        if !Peer::vader_available() {
            return Err(fail(
                "the vader peer needs Open MPI's mpicc and mpirun on the PATH \
                 (Debian: libopenmpi-dev, openmpi-bin)"
                    .into(),
            ));
        }
        let dir = std::env::temp_dir().join(format!("weft-vader-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let v = Vader { dir };
        let src = v.dir.join("vader_pingpong.c");
        std::fs::write(&src, Self::SOURCE)?;
        let out = std::process::Command::new(open_mpi("mpicc"))
            .args(["-O2", "-o"])
            .arg(v.dir.join("vader_pingpong"))
            .arg(&src)
            .output()?;
        if !out.status.success() {
            return Err(fail(format!(
                "mpicc failed on the vader peer: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(v)
    }

    /// Round-trip times in nanoseconds per size: `iters` timed round trips after the same
    /// warm-up as weft's.
    fn rtts(&self, sizes: &[usize], iters: u64) -> Result<Rtts, EngineError> {
        let fail = |what: String| EngineError::Io(std::io::Error::other(what));
        let list: Vec<String> = sizes.iter().map(usize::to_string).collect();
        let out = std::process::Command::new(open_mpi("mpirun"))
            .args(["--allow-run-as-root", "-np", "2", "--bind-to", "core"])
            .args(["--mca", "btl", "self,vader"])
            .arg(self.dir.join("vader_pingpong"))
            .arg(iters.to_string())
            .arg(list.join(","))
            .arg("raw")
            .env("OMPI_MCA_btl", "self,vader")
            .stdin(std::process::Stdio::null())
            .output()?;
        if !out.status.success() {
            return Err(fail(format!(
                "mpirun of the vader peer failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let mut rtts = Rtts::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let (Some(size), Some(samples)) = (v["size"].as_u64(), v["rtt_ns"].as_array()) else {
                continue;
            };
            let samples = samples.iter().filter_map(|x| x.as_f64()).map(|x| x as u64);
            rtts.entry(size as usize).or_default().extend(samples);
        }
        if sizes
            .iter()
            .any(|s| rtts.get(s).is_none_or(|v| v.len() as u64 != iters))
        {
            return Err(fail(format!(
                "the vader peer did not report every size: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            )));
        }
        Ok(rtts)
    }
}

impl Drop for Vader {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn merge(into: &mut HashMap<usize, Vec<u64>>, from: HashMap<usize, Vec<u64>>) {
    for (size, rtts) in from {
        into.entry(size).or_default().extend(rtts);
    }
}

/// Round-trip times in nanoseconds, per payload size.
type Rtts = HashMap<usize, Vec<u64>>;

/// [`engine`]'s raw round-trip times in nanoseconds, per size, what the two nodes ran on
/// ([`Cluster::backend_name`]) and how they reached each other ([`Cluster::transport`]).
fn engine_rtts(
    sizes: &[usize],
    iters: u64,
    opts: NodeOptions,
) -> Result<(Rtts, String, String), EngineError> {
    let opts = NodeOptions { pin: true, ..opts };
    let warmup = (iters / 10).clamp(10, 1000);
    let plan = sizes.to_vec();
    let cluster = Cluster::start(2, opts, move |i, ids| {
        if i == 0 {
            PingPong::pinger(ids[1], plan.clone(), iters, warmup)
        } else {
            PingPong::ponger()
        }
    })?;
    loop {
        match cluster.events.recv_timeout(Duration::from_secs(60)) {
            Ok((_, NodeEvent::Protocol(Event::Done))) => break,
            Ok((_, NodeEvent::Suspect(p))) => {
                return Err(EngineError::Io(std::io::Error::other(format!(
                    "lost {p} during ping"
                ))));
            }
            Ok(_) => {}
            Err(_) => {
                return Err(EngineError::Io(std::io::Error::other(
                    "ping stalled for 60 s",
                )))
            }
        }
    }
    let backend = cluster.backend_name();
    let transport = cluster.transport.to_string();
    let pinger = cluster
        .stop_all()?
        .into_iter()
        .next()
        .ok_or(EngineError::Gone)?;
    let mut rtts: HashMap<usize, Vec<u64>> = HashMap::new();
    for &(size, rtt) in pinger.samples() {
        rtts.entry(size).or_default().push(rtt);
    }
    Ok((rtts, backend, transport))
}

fn pin(core: usize) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

/// A peer's message buffer of `len` bytes of `fill`, starting on a page. On AMD Zen the
/// kernel's copy into user space runs at half speed or worse when the destination is 8..24
/// bytes past the source's page offset (4K aliasing, see `wire::decoder`), and `vec!` puts a
/// large buffer 16 bytes into a page, which is that case. A page start gives the peers their
/// fastest copies, as weft's receive buffers have.
pub fn page_buffer(len: usize, fill: u8) -> rkyv::util::AlignedVec<{ crate::buf::PAGE }> {
    let mut buf = rkyv::util::AlignedVec::with_capacity(len);
    buf.resize(len, fill);
    buf
}

/// Read exactly `buf.len()` bytes from a non-blocking socket, spinning (the peers' receives).
pub fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write all of `buf` to a non-blocking socket, spinning (the peers' sends: no engine, no
/// queue).
pub fn spin_write(s: &mut impl Write, buf: &[u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.write(&buf[at..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The peer: the same ping-pong over std `TcpStream`s, non-blocking and busy-polled, each end
/// pinned like the engine's nodes, with TCP congestion control `congestion` (`None`: the
/// system's default). An 8-byte length prefix frames each message. Returns the round-trip
/// times in nanoseconds, per size.
pub fn std_busy_poll_rtts(
    sizes: &[usize],
    iters: u64,
    congestion: Option<&str>,
) -> std::io::Result<HashMap<usize, Vec<u64>>> {
    let server_cc = congestion.map(str::to_string);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let max = sizes.iter().copied().max().unwrap_or(0);
    let warmup = (iters / 10).clamp(10, 1000);
    let plan: Vec<usize> = sizes.to_vec();
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        pin(1);
        let (mut s, _) = listener.accept()?;
        crate::engine::congestion::apply(&s, server_cc.as_deref());
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let mut buf = page_buffer(max + 8, 0);
        loop {
            let mut len = [0u8; 8];
            match spin_read(&mut s, &mut len) {
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
                r => r?,
            }
            let n = u64::from_le_bytes(len) as usize;
            buf[..8].copy_from_slice(&len);
            spin_read(&mut s, &mut buf[8..8 + n])?;
            spin_write(&mut s, &buf[..8 + n])?;
        }
    });
    pin(0);
    let mut s = TcpStream::connect(addr)?;
    crate::engine::congestion::apply(&s, congestion);
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let mut rtts: HashMap<usize, Vec<u64>> = HashMap::new();
    let mut msg = page_buffer(max + 8, 0x5a);
    let mut back = page_buffer(max + 8, 0);
    for &size in &plan {
        msg[..8].copy_from_slice(&(size as u64).to_le_bytes());
        for i in 0..warmup + iters {
            let t = Instant::now();
            spin_write(&mut s, &msg[..8 + size])?;
            spin_read(&mut s, &mut back[..8 + size])?;
            if i >= warmup {
                rtts.entry(size)
                    .or_default()
                    .push(t.elapsed().as_nanos() as u64);
            }
        }
    }
    drop(s);
    server
        .join()
        .map_err(|_| std::io::Error::other("peer thread panicked"))??;
    Ok(rtts)
}

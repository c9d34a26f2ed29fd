//! `weft node`: one membership node as its own process. It prints `{"listening": ADDR}` first,
//! then a `started` report with the backend it runs on, then one JSON report per event (see
//! `transport::process::Report`), until killed. Every setting and a `--peers` list are checked
//! before it binds or prints anything.

use super::checks;
use super::values::{BackendArg, BootstrapArg, TransportArg, WaitArg};
use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use weft::bootstrap::{stdio, PeerList};
use weft::proto::membership::MembershipConfig;
use weft::transport::endpoint::{join_launched, LaunchedPlace};
use weft::transport::process::{run, Entry, NodeProcess};
use weft::transport::{bind, NodeOptions};
use weft::wire::handshake::JobKey;
use weft::NodeId;

/// Arguments of `weft node`.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// This node's id (with `--bootstrap peers`; a launcher gives the rank).
    #[arg(long)]
    id: Option<u64>,
    /// The job's initial view is ids 0..N (with `--bootstrap peers`; a launcher gives the
    /// size).
    #[arg(long)]
    nodes: Option<u64>,
    /// Where the node learns its rank, the job's size and its peers' addresses. Default:
    /// `peers` when `--peers` or `--peers-stdin` is given, else `auto` (the launcher).
    #[arg(long, value_enum)]
    bootstrap: Option<BootstrapArg>,
    /// Address to listen on (port 0: any free port; the chosen one is printed). Default:
    /// 127.0.0.1:0 with `--peers`; 0.0.0.0:0 under a launcher, the address the others dial
    /// being `WEFT_ADVERTISE`, else the route to the rendezvous host, else the host name's.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Every other member, `ID=ADDR,ID=ADDR,...`: all of 0..N but this node, each once.
    #[arg(long, conflicts_with = "peers_stdin")]
    peers: Option<String>,
    /// Read the `ID=ADDR,...` peer list as one line on stdin, after printing the address
    /// (for launchers that learn the addresses from the nodes themselves).
    #[arg(long)]
    peers_stdin: bool,
    /// Write the event reports to this file instead of standard output (`{rank}` in the path
    /// becomes the node's id): a launcher that stops forwarding output after one process dies
    /// (Hydra) then does not silence the survivors.
    #[arg(long)]
    log: Option<String>,
    /// Run the node in a child process and exit with an error when it dies: a launcher that
    /// ends the whole job when any process dies of a signal (MPICH's `mpiexec.hydra`, even
    /// with `-disable-auto-cleanup`) then keeps the survivors running.
    #[arg(long)]
    supervised: bool,
    /// Job key file (64 hex digits or 32 bytes); default `WEFT_JOB_KEY`.
    #[arg(long)]
    key_file: Option<PathBuf>,
    #[command(flatten)]
    tree: super::TreeArgs,
    /// Probe tree neighbors every this many ms (0: once at start, then rely on lost
    /// connections).
    #[arg(long, default_value_t = 0)]
    probe_ms: u64,
    /// Ring heartbeats (Gendelman et al. 5.1): beat to the next process of the view every
    /// this many µs, and suspect the previous one after --suspect-after periods without a
    /// word from it: what finds a process that hangs with its sockets open (stopped,
    /// swapping). 0: off (a hung process is then found by --probe-ms, or after
    /// --dead-after-ms once unacknowledged data times out).
    #[arg(long, default_value_t = weft::proto::heartbeat::PERIOD.as_micros() as u64)]
    heartbeat_us: u64,
    /// Silence, in heartbeat periods, after which the previous process is suspected.
    #[arg(long, default_value_t = weft::proto::heartbeat::SUSPECT_AFTER)]
    suspect_after: f64,
    /// The root collects failure reports this many µs before starting an epoch (0: at once).
    #[arg(long, default_value_t = 0)]
    batch_us: u64,
    /// Enter as a new process (NewNode) instead of a member of the initial view.
    #[arg(long, conflicts_with = "recover")]
    join: bool,
    /// Enter as a restarted member with its old id (NodeAlive).
    #[arg(long)]
    recover: bool,
    /// I/O backend (default: automatic, or WEFT_BACKEND).
    #[arg(long, value_enum)]
    backend: Option<BackendArg>,
    /// How the node reaches its peers (default: automatic, or WEFT_TRANSPORT): shared memory
    /// to the processes of its host, TCP to the rest.
    #[arg(long, value_enum)]
    transport: Option<TransportArg>,
    /// How the reactor waits.
    #[arg(long, value_enum, default_value = "block")]
    wait: WaitArg,
    /// Suspect a peer whose host has been silent this many ms (TCP keepalive and user
    /// timeout: finds a host that vanished without resetting its connections); 0: the
    /// kernel's defaults (hours). At most 65 534 000 (the kernel's keepalive limit).
    #[arg(long, default_value_t = weft::transport::DEAD_AFTER.as_millis() as u64)]
    dead_after_ms: u64,
    /// TCP congestion control of the node's connections ("system": the machine's default).
    #[arg(long, default_value = weft::engine::congestion::PREFERRED)]
    congestion: String,
    /// Close a connection that has not authenticated this many ms after its accept or dial:
    /// a silent stranger is refused, a peer whose port never answers is suspected.
    #[arg(long, default_value_t = weft::transport::HANDSHAKE_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    handshake_timeout_ms: u64,
    /// Suspect a peer once this many MiB wait to be sent to it (it has stopped reading).
    #[arg(long, default_value_t = (weft::transport::MAX_QUEUED >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_queued_mib: u64,
    /// Authenticate bulk messages too (control messages always are; see README's Security).
    #[arg(long)]
    bulk_mac: bool,
    /// Start-up is not a failure: for this many ms after start, a peer never reached that
    /// refuses a dial (not listening yet) is tried again with backoff instead of suspected.
    /// Default: 60 000 with a fixed `--peers` list (processes started apart), 0 when the list
    /// comes on stdin or from a launcher (everyone listens before the list is handed out) and
    /// for `--join` and `--recover` (the job is running: a peer that refuses is dead).
    /// Under a launcher it also bounds the address exchange (default 60 000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    startup_timeout_ms: Option<u64>,
    /// Most accepted connections waiting for their handshake; past it, the longest-waiting
    /// one that has had a tenth of the handshake timeout is closed.
    #[arg(long, default_value_t = weft::transport::MAX_STRANGERS as u64,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_strangers: u64,
}

/// Where a node's place in the job comes from.
enum Place {
    /// `--id`, `--nodes`, and `--peers` (or the list on stdin, later).
    Given {
        id: u64,
        nodes: u64,
        peers: Option<PeerList>,
    },
    /// A launcher.
    Launched(weft::bootstrap::Launch),
}

/// Read the node's place from the arguments or the launcher, checked before anything binds.
fn place(a: &NodeArgs) -> anyhow::Result<Place> {
    let given_list = a.peers.is_some() || a.peers_stdin;
    let mode = a.bootstrap.unwrap_or(if given_list {
        BootstrapArg::Peers
    } else {
        BootstrapArg::Auto
    });
    let Some(want) = mode.want() else {
        let (Some(id), Some(nodes)) = (a.id, a.nodes) else {
            anyhow::bail!("--bootstrap peers needs --id and --nodes");
        };
        anyhow::ensure!(nodes >= 1, "--nodes must be at least 1");
        anyhow::ensure!(
            nodes <= u64::from(weft::bootstrap::MAX_JOB),
            "--nodes {nodes}: at most {} processes",
            weft::bootstrap::MAX_JOB
        );
        anyhow::ensure!(
            a.join || id < nodes,
            "--id {id} is not in 0..{nodes} (use --join for a new process)"
        );
        anyhow::ensure!(
            given_list || nodes == 1,
            "a job of {nodes} needs its peers' addresses: --peers or --peers-stdin"
        );
        let peers = match &a.peers {
            Some(list) => {
                let peers = PeerList::parse(list, "--peers")?;
                // Before a list of `nodes` members is made: a short list names the first
                // members it lacks at once (a job of 2^20 with one peer listed).
                let listed = peers.len() as u64 + u64::from(peers.get(NodeId(id)).is_none());
                if !a.join && listed < nodes {
                    let lacks = (0..nodes)
                        .filter(|&i| i != id && peers.get(NodeId(i)).is_none())
                        .take(8)
                        .map(|i| format!("n{i}"))
                        .collect::<Vec<_>>();
                    let more = nodes - listed;
                    let more = if more > lacks.len() as u64 {
                        format!(", and {} more", more - lacks.len() as u64)
                    } else {
                        String::new()
                    };
                    anyhow::bail!(
                        "--peers: no address for [{}{more}] (the job is {nodes} processes)",
                        lacks.join(", ")
                    );
                }
                let members: Vec<NodeId> = (0..nodes).map(NodeId).collect();
                peers.check_covers(&members, NodeId(id), "--peers")?;
                Some(peers)
            }
            None => None,
        };
        return Ok(Place::Given { id, nodes, peers });
    };
    anyhow::ensure!(
        !given_list,
        "--peers and --peers-stdin go with --bootstrap peers, not a launcher"
    );
    anyhow::ensure!(
        !a.join && !a.recover,
        "--join and --recover go with --bootstrap peers"
    );
    let launch = weft::bootstrap::detect(want, &weft::bootstrap::ProcessEnv)?;
    if let Some(id) = a.id {
        anyhow::ensure!(
            id == u64::from(launch.rank),
            "--id {id}, but the {} launcher says rank {}",
            launch.launcher,
            launch.rank
        );
    }
    if let Some(n) = a.nodes {
        anyhow::ensure!(
            n == u64::from(launch.size),
            "--nodes {n}, but the {} launcher says {} processes",
            launch.launcher,
            launch.size
        );
    }
    Ok(Place::Launched(launch))
}

/// Run `weft node`.
pub fn run_node(a: NodeArgs) -> anyhow::Result<()> {
    let place = place(&a)?;
    let launched = matches!(place, Place::Launched(_));
    if a.supervised {
        weft::transport::process::supervise()?;
    } else if launched {
        weft::transport::process::die_with_parent()?;
    }
    a.tree.check()?;
    let (id, nodes) = match &place {
        Place::Given { id, nodes, .. } => (*id, *nodes),
        Place::Launched(l) => (u64::from(l.rank), u64::from(l.size)),
    };
    let me = NodeId(id);
    let members: Vec<NodeId> = (0..nodes).map(NodeId).collect();
    let probe = Duration::from_millis(if a.probe_ms == 0 {
        3_600_000
    } else {
        a.probe_ms
    });
    let membership = MembershipConfig {
        radix: a.tree.radix,
        mode: a.tree.mode(),
        probe: Some((probe, probe)),
        warm: true,
        batch: checks::micros("--batch-us", a.batch_us)?,
        collect: a.tree.collect,
        orphan_hold: a.tree.orphan_hold(),
        heartbeat: heartbeat(a.heartbeat_us, a.suspect_after)?,
    };
    let fixed_list = matches!(place, Place::Given { peers: Some(_), .. });
    // A joining or recovered process comes to a job that started long ago: a peer that
    // refuses it is dead, not late (a recovered n0 redialed a dead n1 every second for 60 s,
    // long after its view excluded n1).
    let arriving = a.join || a.recover;
    let startup =
        Duration::from_millis(a.startup_timeout_ms.unwrap_or(if fixed_list && !arriving {
            60_000
        } else {
            0
        }));
    let opts = NodeOptions {
        backend: a.backend.map(Into::into),
        transport: a.transport.map(Into::into),
        pin: false,
        params: membership.params(members.len()),
        bulk_mac: a.bulk_mac,
        reactor: weft::engine::ReactorOptions {
            wait: a.wait.into(),
            dead_after: (a.dead_after_ms > 0).then(|| Duration::from_millis(a.dead_after_ms)),
            congestion: super::congestion_arg(&a.congestion),
            handshake_timeout: Duration::from_millis(a.handshake_timeout_ms),
            max_queued: usize::try_from(a.max_queued_mib << 20).context("--max-queued-mib")?,
            max_strangers: a.max_strangers as usize,
            startup_grace: if matches!(place, Place::Launched(_)) {
                Duration::ZERO
            } else {
                startup
            },
            ..Default::default()
        },
        ..NodeOptions::default()
    };
    opts.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = match &a.key_file {
        Some(path) => Some(JobKey::from_file(path)?),
        None => JobKey::from_env()?,
    };
    if matches!(place, Place::Given { .. }) && key.is_none() {
        anyhow::bail!("a multi-process job needs a key: set WEFT_JOB_KEY or --key-file");
    }
    // Before the node's first socket: the guard takes those open now for inherited ones.
    weft::transport::process::guard(&opts)?;
    let listen = a.listen.unwrap_or(match place {
        Place::Given { .. } => SocketAddr::from(([127, 0, 0, 1], 0)),
        Place::Launched(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
    });
    // The `listening` line always goes to standard output (weft's own launcher reads it); the
    // reports go to `--log` if given.
    let mut out: Box<dyn std::io::Write> = match &a.log {
        Some(path) => {
            let path = path.replace("{rank}", &id.to_string());
            Box::new(std::io::LineWriter::new(
                // Appended: a node restarted with --recover and the same --log keeps the
                // earlier run's events.
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .with_context(|| format!("--log {path}"))?,
            ))
        }
        None => Box::new(std::io::stdout()),
    };
    let (peers, key, listener) = match place {
        Place::Launched(launch) => {
            let deadline = std::time::Instant::now()
                + Duration::from_millis(a.startup_timeout_ms.unwrap_or(60_000));
            let params = membership.params(members.len());
            let LaunchedPlace { joined, listener } =
                join_launched(launch, listen, key, &params, deadline, |mine| {
                    stdio::announce(&mut std::io::stdout(), mine)
                })?;
            use std::io::Write;
            writeln!(
                out,
                "{}",
                serde_json::json!({
                    "node": id,
                    "kind": "bootstrap",
                    "launcher": joined.launch.launcher,
                    "rank": joined.launch.rank,
                    "size": joined.launch.size,
                    "job": joined.launch.job,
                    "pid": std::process::id(),
                    "mono_ns": weft::engine::monotonic_ns(),
                })
            )?;
            (joined.peers, joined.key, listener)
        }
        Place::Given { peers, .. } => {
            let listener = bind(listen)?;
            stdio::announce(&mut std::io::stdout(), listener.local_addr()?)?;
            let peers = match peers {
                Some(p) => p,
                None if a.peers_stdin => {
                    let p = stdio::read_peers(&mut std::io::stdin().lock())?;
                    p.check_covers(&members, me, "the peer list on stdin")?;
                    p
                }
                None => PeerList::default(),
            };
            (peers, key.expect("checked above"), listener)
        }
    };
    let p = NodeProcess {
        id: me,
        members,
        peers: peers.without(me),
        listener,
        key,
        membership,
        entry: if a.join {
            Entry::Join
        } else if a.recover {
            Entry::Recover
        } else {
            Entry::Member
        },
        opts,
    };
    run(p, |r| {
        // A closed stdout ends a node started by weft's own launcher (`bench --procs`); under
        // a real launcher, which may stop forwarding output when another process dies, the
        // node runs on silently.
        let written = serde_json::to_string(r)
            .ok()
            .and_then(|s| writeln!(out, "{s}").and_then(|_| out.flush()).ok())
            .is_some();
        written || launched
    })?;
    Ok(())
}

/// `--heartbeat-us` and `--suspect-after` (`None`: heartbeats off), checked.
fn heartbeat(
    period_us: u64,
    suspect_after: f64,
) -> anyhow::Result<Option<weft::proto::heartbeat::HeartbeatConfig>> {
    if period_us == 0 {
        return Ok(None);
    }
    checks::within("--heartbeat-us", period_us, 10..=60_000_000)?;
    let h = weft::proto::heartbeat::HeartbeatConfig {
        period: Duration::from_micros(period_us),
        suspect_after,
    };
    h.check()
        .map_err(|e| anyhow::anyhow!("--suspect-after / --heartbeat-us: {e}"))?;
    Ok(Some(h))
}

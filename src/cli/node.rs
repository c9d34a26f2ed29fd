//! `weft node`: one membership node as its own process. It prints `{"listening": ADDR}` first,
//! then a `started` report with the backend it runs on, then one JSON report per event (see
//! `transport::process::Report`), until killed.

use anyhow::Context;
use clap::Args;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use weft::engine::{Backend, WaitMode};
use weft::proto::membership::MembershipConfig;
use weft::transport::process::{run, Entry, NodeProcess};
use weft::transport::{bind, NodeOptions};
use weft::wire::handshake::JobKey;
use weft::NodeId;

/// Arguments of `weft node`.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// This node's id.
    #[arg(long)]
    id: u64,
    /// The job's initial view is ids 0..N.
    #[arg(long)]
    nodes: u64,
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The other nodes, `ID=ADDR,ID=ADDR,...`.
    #[arg(long, conflicts_with = "peers_stdin")]
    peers: Option<String>,
    /// Read the `ID=ADDR,...` peer list as one line on stdin, after printing the address
    /// (for launchers that learn the addresses from the nodes themselves).
    #[arg(long)]
    peers_stdin: bool,
    /// Job key file (64 hex digits or 32 bytes); default `WEFT_JOB_KEY`.
    #[arg(long)]
    key_file: Option<PathBuf>,
    #[command(flatten)]
    tree: super::TreeArgs,
    /// Probe tree neighbors every this many ms (0: once at start, then rely on lost
    /// connections).
    #[arg(long, default_value_t = 0)]
    probe_ms: u64,
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
    backend: Option<Backend>,
    /// How the reactor waits.
    #[arg(long, value_enum, default_value_t = WaitMode::Block)]
    wait: WaitMode,
    /// Suspect a peer whose host has been silent this many ms (TCP keepalive and user
    /// timeout: finds a host that vanished without resetting its connections); 0: the
    /// kernel's defaults (hours).
    #[arg(long, default_value_t = weft::transport::DEAD_AFTER.as_millis() as u64)]
    dead_after_ms: u64,
    /// TCP congestion control of the node's connections ("system": the machine's default).
    #[arg(long, default_value = weft::engine::congestion::PREFERRED)]
    congestion: String,
    /// Close a connection that has not authenticated this many ms after its accept or dial:
    /// a silent stranger is refused, a peer whose port never answers is suspected.
    #[arg(long, default_value_t = weft::transport::HANDSHAKE_TIMEOUT.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    handshake_timeout_ms: u64,
    /// Suspect a peer once this many MiB wait to be sent to it (it has stopped reading).
    #[arg(long, default_value_t = (weft::transport::MAX_QUEUED >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_queued_mib: u64,
    /// Most accepted connections waiting for their handshake; past it, the longest-waiting
    /// one that has had a tenth of the handshake timeout is closed.
    #[arg(long, default_value_t = weft::transport::MAX_STRANGERS as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_strangers: u64,
}

fn parse_peers(s: &str) -> anyhow::Result<HashMap<NodeId, SocketAddr>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (id, addr) = p
                .split_once('=')
                .with_context(|| format!("peer {p:?}: expected ID=ADDR"))?;
            Ok((
                NodeId(id.parse().with_context(|| format!("peer id {id:?}"))?),
                addr.parse()
                    .with_context(|| format!("peer address {addr:?}"))?,
            ))
        })
        .collect()
}

/// Run `weft node`.
pub fn run_node(a: NodeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.nodes >= 1, "--nodes must be at least 1");
    anyhow::ensure!(
        a.join || a.id < a.nodes,
        "--id {} is not in 0..{} (use --join for a new process)",
        a.id,
        a.nodes
    );
    let max_queued = usize::try_from(a.max_queued_mib)
        .ok()
        .and_then(|m| m.checked_mul(1 << 20))
        .context("--max-queued-mib is too large")?;
    let key = match &a.key_file {
        Some(path) => JobKey::from_file(path)?,
        None => JobKey::from_env()?
            .context("a multi-process job needs a key: set WEFT_JOB_KEY or --key-file")?,
    };
    let listener = bind(a.listen)?;
    let addr = listener.local_addr()?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "{}",
        serde_json::json!({ "listening": addr.to_string() })
    )?;
    stdout.flush()?;
    let line = if a.peers_stdin {
        let mut l = String::new();
        std::io::stdin().lock().read_line(&mut l)?;
        l
    } else {
        a.peers.clone().unwrap_or_default()
    };
    let mut peers = parse_peers(&line)?;
    peers.remove(&NodeId(a.id));
    let probe = Duration::from_millis(if a.probe_ms == 0 {
        3_600_000
    } else {
        a.probe_ms
    });
    let p = NodeProcess {
        id: NodeId(a.id),
        members: (0..a.nodes).map(NodeId).collect(),
        peers,
        listener,
        key,
        membership: MembershipConfig {
            radix: a.tree.radix,
            mode: a.tree.mode,
            probe: Some((probe, probe)),
            warm: true,
            batch: Duration::from_micros(a.batch_us),
            orphan_hold: a.tree.orphan_hold(),
        },
        entry: if a.join {
            Entry::Join
        } else if a.recover {
            Entry::Recover
        } else {
            Entry::Member
        },
        opts: NodeOptions {
            wait: a.wait,
            backend: a.backend,
            pin: false,
            dead_after: (a.dead_after_ms > 0).then(|| Duration::from_millis(a.dead_after_ms)),
            congestion: super::congestion_arg(&a.congestion),
            handshake_timeout: Duration::from_millis(a.handshake_timeout_ms),
            max_queued,
            max_strangers: a.max_strangers as usize,
            ..NodeOptions::default()
        },
    };
    run(p, |r| {
        // A closed stdout (the launcher went away) ends the node.
        serde_json::to_string(r)
            .ok()
            .and_then(|s| writeln!(stdout, "{s}").and_then(|_| stdout.flush()).ok())
            .is_some()
    })?;
    Ok(())
}

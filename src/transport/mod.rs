//! The public API: start nodes that run a protocol over the engine, and whole in-process
//! clusters on loopback.
//!
//! ```no_run
//! use weft::transport::Cluster;
//! use weft::proto::ping::PingPong;
//! use weft::NodeId;
//! // Two nodes on loopback, pinned to two cores; node 0 pings node 1.
//! let cluster = Cluster::start(2, Default::default(), |i, ids| {
//!     if i == 0 { PingPong::pinger(ids[1], vec![32], 1000, 100) } else { PingPong::ponger() }
//! }).unwrap();
//! ```

pub mod ping;
pub mod stabilize;

use crate::engine::reactor::{Command, NodeEvent, Reactor, ReactorConfig, WAKER};
use crate::engine::{choose_backend, Backend, EngineError, WaitMode};
use crate::proto::Protocol;
use crate::wire::frame::DEFAULT_MAX_BODY;
use crate::wire::handshake::{Identity, JobKey};
use crate::wire::WireMsg;
use crate::NodeId;
use mio::{Poll, Waker};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Bind a listening socket with the options weft wants (SO_REUSEADDR, big buffers).
pub fn bind(addr: SocketAddr) -> Result<TcpListener, EngineError> {
    use socket2::{Domain, Protocol as SockProto, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(SockProto::TCP),
    )?;
    socket.set_reuse_address(true)?;
    // Large buffers keep 1 MiB frames from stalling on window updates; the kernel caps them.
    let _ = socket.set_recv_buffer_size(4 << 20);
    let _ = socket.set_send_buffer_size(4 << 20);
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// A running node.
pub struct NodeHandle<P> {
    /// Its id.
    pub id: NodeId,
    /// Where it listens.
    pub addr: SocketAddr,
    commands: Sender<Command>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<Result<P, EngineError>>>,
}

impl<P> NodeHandle<P> {
    /// Stop the node: its reactor returns and every socket closes (peers see the connection
    /// drop, exactly as when the process dies). Returns the protocol's final state.
    pub fn stop(mut self) -> Result<P, EngineError> {
        let _ = self.commands.send(Command::Stop);
        let _ = self.waker.wake();
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            _ => Err(EngineError::Panicked),
        }
    }

    /// Ask the node to stop without waiting for it (several nodes killed "at once"); a later
    /// [`NodeHandle::stop`] or drop waits.
    pub fn kill(&self) {
        let _ = self.commands.send(Command::Stop);
        let _ = self.waker.wake();
    }

    /// Tell the node about a peer.
    pub fn add_peer(&self, id: NodeId, addr: SocketAddr) {
        let _ = self.commands.send(Command::AddPeer(id, addr));
        let _ = self.waker.wake();
    }
}

impl<P> Drop for NodeHandle<P> {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.commands.send(Command::Stop);
            let _ = self.waker.wake();
            let _ = t.join();
        }
    }
}

/// How to run nodes.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The job every node belongs to.
    pub job_id: u64,
    /// The job key (generated for in-process clusters when `None`).
    pub key: Option<JobKey>,
    /// How reactors wait.
    pub wait: WaitMode,
    /// `None`: automatic (with a logged note when not io_uring).
    pub backend: Option<Backend>,
    /// Pin node `i` to core `i mod cores`.
    pub pin: bool,
    /// Largest frame body accepted.
    pub max_body: u32,
    /// Time zero of the protocols' clocks (`None`: each node's start; a [`Cluster`] gives all
    /// its nodes one, so their reported times compare).
    pub epoch: Option<Instant>,
    /// io_uring receive buffers per node: count (a power of two) and size. Many small nodes
    /// in one process want few small ones.
    pub recv_buffers: (u16, u32),
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            job_id: 1,
            key: None,
            wait: WaitMode::Adaptive,
            backend: None,
            pin: true,
            max_body: DEFAULT_MAX_BODY,
            epoch: None,
            recv_buffers: (256, 16 * 1024),
        }
    }
}

/// One node's place in the job.
#[derive(Debug)]
pub struct NodeSpec {
    /// Its id.
    pub id: NodeId,
    /// Its bound listener (see [`bind`]).
    pub listener: TcpListener,
    /// The peers it knows.
    pub peers: HashMap<NodeId, SocketAddr>,
    /// The job key.
    pub key: JobKey,
    /// Core to pin the reactor to.
    pub core: Option<usize>,
}

/// Start one node on its own reactor thread.
pub fn spawn<P>(
    spec: NodeSpec,
    opts: &NodeOptions,
    proto: P,
    events: Sender<(NodeId, NodeEvent)>,
) -> Result<NodeHandle<P>, EngineError>
where
    P: Protocol + Send + 'static,
    P::Msg: WireMsg,
{
    let NodeSpec {
        id,
        listener,
        peers,
        key,
        core,
    } = spec;
    let backend = choose_backend(opts.backend)?;
    let addr = listener.local_addr()?;
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let (tx, rx) = channel();
    let cfg = ReactorConfig {
        identity: Identity {
            job_id: opts.job_id,
            node_id: id,
            key,
        },
        peers,
        wait: opts.wait,
        max_body: opts.max_body,
        backend,
        epoch: opts.epoch.unwrap_or_else(Instant::now),
        recv_buffers: opts.recv_buffers,
    };
    let thread = std::thread::Builder::new()
        .name(format!("weft-{id}"))
        .spawn(move || {
            if let Some(c) = core {
                core_affinity::set_for_current(core_affinity::CoreId { id: c });
            }
            Reactor::new(cfg, poll, listener, proto, rx, events)?.run()
        })?;
    Ok(NodeHandle {
        id,
        addr,
        commands: tx,
        waker,
        thread: Some(thread),
    })
}

/// N nodes on 127.0.0.1, every node knowing every other, spread over the cores.
pub struct Cluster<P> {
    /// The nodes, node `i` has id `NodeId(i)`.
    pub nodes: Vec<NodeHandle<P>>,
    /// Every node's events.
    pub events: Receiver<(NodeId, NodeEvent)>,
    /// Time zero of every node's protocol clock.
    pub epoch: Instant,
}

impl<P> Cluster<P>
where
    P: Protocol + Send + 'static,
    P::Msg: WireMsg,
{
    /// Start `n` nodes; `make(i, ids)` builds node `i`'s protocol.
    pub fn start(
        n: usize,
        opts: NodeOptions,
        mut make: impl FnMut(usize, &[NodeId]) -> P,
    ) -> Result<Self, EngineError> {
        let mut opts = opts;
        let epoch = *opts.epoch.get_or_insert_with(Instant::now);
        let key = match &opts.key {
            Some(k) => k.clone(),
            None => JobKey::generate()
                .map_err(|e| EngineError::Io(std::io::Error::other(e.to_string())))?,
        };
        let ids: Vec<NodeId> = (0..n as u64).map(NodeId).collect();
        let listeners = (0..n)
            .map(|_| bind("127.0.0.1:0".parse().expect("loopback address")))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: HashMap<NodeId, SocketAddr> = ids
            .iter()
            .zip(&listeners)
            .map(|(&id, l)| Ok((id, l.local_addr()?)))
            .collect::<Result<_, std::io::Error>>()?;
        let cores = crate::engine::online_cpus();
        let (tx, rx) = channel();
        let mut nodes = Vec::with_capacity(n);
        for (i, l) in listeners.into_iter().enumerate() {
            let mut peers = addrs.clone();
            peers.remove(&ids[i]);
            let core = opts.pin.then_some(i % cores);
            let spec = NodeSpec {
                id: ids[i],
                listener: l,
                peers,
                key: key.clone(),
                core,
            };
            nodes.push(spawn(spec, &opts, make(i, &ids), tx.clone())?);
        }
        Ok(Self {
            nodes,
            events: rx,
            epoch,
        })
    }
}

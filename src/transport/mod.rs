//! The embeddable API: start nodes that run a protocol over the engine ([`spawn`]), whole
//! in-process clusters on loopback ([`Cluster`]), and a membership node as its own process
//! ([`process`]). Experiments on top of it live in `bench`.
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

pub mod driven;
pub mod endpoint;
pub mod handle;
pub mod prelude;
pub mod process;
pub mod route;
pub mod storage;

use crate::engine::link::inproc::{self, Place, Port};
use crate::engine::link::shm::Listener;
pub use crate::engine::link::Transport;
pub use crate::engine::reactor::NodeEvent;
use crate::engine::reactor::{Command, HostSpec, ReactorConfig, Started, WAKER};
use crate::engine::{choose_backend, Backend, EngineError};
use crate::proto::Protocol;
use crate::wire::handshake::Identity;
pub use crate::wire::handshake::{incarnation_now, JobKey};
use crate::wire::Framed;
use crate::NodeId;
use mio::{Poll, Waker};
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixListener;
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

/// A reactor thread: stops (every node it hosts with it) and is joined when dropped. `R`: its
/// protocol's requests.
struct ReactorThread<R> {
    commands: Sender<Command<R>>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<Result<(), EngineError>>>,
}

impl<R> ReactorThread<R> {
    fn send(&self, c: Command<R>) {
        let _ = self.commands.send(c);
        let _ = self.waker.wake();
    }

    /// Stop the reactor and wait for it; its error, if it failed.
    fn join(&mut self) -> Result<(), EngineError> {
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        self.send(Command::Stop);
        t.join().map_err(|_| EngineError::Panicked)?
    }
}

impl<R> Drop for ReactorThread<R> {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

/// A running node.
pub struct NodeHandle<P: Protocol> {
    /// Its id.
    pub id: NodeId,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The backend its reactor runs on: the one chosen, or poll where an automatic choice of
    /// io_uring could not have a ring for this reactor (see the reactor's `fallback`).
    pub backend: Backend,
    commands: Sender<Command<P::Request>>,
    waker: Arc<Waker>,
    /// Its protocol, once the node stopped.
    retired: Receiver<P>,
    /// The reactor, when the node has one of its own ([`spawn`]).
    own: Option<ReactorThread<P::Request>>,
    stopped: bool,
}

impl<P: Protocol> NodeHandle<P> {
    /// Stop the node: its sockets close (peers see the connections drop, exactly as when the
    /// process dies). Returns the protocol's final state.
    pub fn stop(&mut self) -> Result<P, EngineError> {
        self.kill();
        if let Some(mut r) = self.own.take() {
            r.join()?;
        }
        self.retired.recv().map_err(|_| EngineError::Gone)
    }

    /// Ask the node to stop without waiting for it (several nodes killed "at once"); a later
    /// [`NodeHandle::stop`] waits.
    pub fn kill(&mut self) {
        if !self.stopped {
            self.stopped = true;
            let _ = self.commands.send(Command::StopNode(self.id));
            let _ = self.waker.wake();
        }
    }

    /// Hand the node's protocol a request ([`crate::proto::Protocol::on_request`]): it runs
    /// on the node's reactor thread, after the requests made before it. Dropped if the node
    /// is stopped.
    pub fn request(&self, req: P::Request) {
        let _ = self.commands.send(Command::Request { node: self.id, req });
        let _ = self.waker.wake();
    }

    /// Wake the node's protocol without a request ([`crate::proto::Protocol::on_wake`]: a
    /// held start, a launcher asking for counters).
    pub fn wake(&self) {
        let _ = self.commands.send(Command::Wake(self.id));
        let _ = self.waker.wake();
    }

    /// Tell the node about a peer.
    pub fn add_peer(&self, id: NodeId, addr: SocketAddr) {
        let _ = self.commands.send(Command::AddPeer {
            node: self.id,
            peer: id,
            addr,
        });
        let _ = self.waker.wake();
    }
}

impl<P: Protocol> Drop for NodeHandle<P> {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How to run nodes.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// The job every node belongs to.
    pub job_id: u64,
    /// The job key (generated for in-process clusters when `None`).
    pub key: Option<JobKey>,
    /// `None`: automatic (with a logged note when not io_uring).
    pub backend: Option<Backend>,
    /// Pin reactor `r` to core `r mod cores`.
    pub pin: bool,
    /// Time zero of the protocols' clocks (`None`: each node's start; a [`Cluster`] gives all
    /// its nodes one, so their reported times compare).
    pub epoch: Option<Instant>,
    /// Reactor threads of a [`Cluster`] (`None`: one per online core, thread per core).
    pub reactors: Option<usize>,
    /// Which reactor of a [`Cluster`] hosts node `i`: `placement[i] mod reactors` (`None`, or
    /// past the map's end: `i mod reactors`, which spreads every neighborhood over all cores).
    /// A launcher's rank mapping: nodes that talk most should share a reactor, where a message
    /// is handled on the core that sent it and wakes no other.
    pub placement: Option<Arc<[u32]>>,
    /// This process's incarnation as each of its nodes (see
    /// [`crate::wire::handshake::Identity::incarnation`]; [`NodeOptions::default`] takes the
    /// start time).
    pub incarnation: u64,
    /// What the job runs, compared with every peer's in the handshake: nodes that disagree
    /// (another size, radix or tree mode) refuse each other, naming both. Empty: nothing to
    /// compare.
    pub params: String,
    /// Authenticate bulk messages (ping-pong payloads) too, not only control messages (see
    /// `wire::mac`; costs a tag over every payload).
    pub bulk_mac: bool,
    /// How the reactors run: waiting, limits, timeouts ([`ReactorOptions`]).
    pub reactor: ReactorOptions,
    /// Which links reach peers (`None`: `WEFT_TRANSPORT`, else [`Transport::Auto`]: nodes of
    /// one [`Cluster`] talk in-process, without the kernel).
    pub transport: Option<Transport>,
}

impl NodeOptions {
    /// Check the settings before any node starts: each wrong one is named.
    pub fn check(&self) -> Result<(), EngineError> {
        self.reactor.check()?;
        self.links()?;
        self.shm_between_processes()?;
        if self.params.len() > crate::wire::handshake::MAX_PARAMS {
            return Err(EngineError::Config(format!(
                "job parameters of {} bytes: at most {}",
                self.params.len(),
                crate::wire::handshake::MAX_PARAMS
            )));
        }
        Ok(())
    }
}

impl NodeOptions {
    /// How the nodes of one [`Cluster`] with these options reach each other:
    /// [`Transport::Inproc`] or [`Transport::Tcp`] (the choice, `WEFT_TRANSPORT` or the
    /// automatic one, resolved against `reconnect` and `own_descriptors`).
    pub fn links(&self) -> Result<Transport, EngineError> {
        let t = Transport::chosen(self.transport).map_err(EngineError::Config)?;
        let (reconnect, own) = (self.reactor.reconnect, self.reactor.own_descriptors);
        let inproc = t.in_process(reconnect, own).map_err(EngineError::Config)?;
        let shm = t
            .shared_memory(reconnect, own, true)
            .map_err(EngineError::Config)?;
        Ok(if inproc {
            Transport::Inproc
        } else if shm {
            Transport::Shm
        } else {
            Transport::Tcp
        })
    }

    /// Whether a node started alone in its process ([`spawn`]) reaches the peers on its host
    /// through shared memory: [`Transport::Shm`], or [`Transport::Auto`] unless connections
    /// are released after every message or reactors have descriptor tables of their own.
    pub fn shm_between_processes(&self) -> Result<bool, EngineError> {
        let t = Transport::chosen(self.transport).map_err(EngineError::Config)?;
        t.shared_memory(self.reactor.reconnect, self.reactor.own_descriptors, false)
            .map_err(EngineError::Config)
    }
}

pub use crate::engine::options::{
    ReactorOptions, DEAD_AFTER, HANDSHAKE_TIMEOUT, MAX_DEAD_AFTER, MAX_QUEUED, MAX_STRANGERS,
    ZEROCOPY_MIN,
};

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            job_id: 1,
            key: None,
            backend: None,
            pin: true,
            epoch: None,
            reactors: None,
            placement: None,
            incarnation: crate::wire::handshake::incarnation_now(),
            params: String::new(),
            bulk_mac: false,
            reactor: ReactorOptions::default(),
            transport: None,
        }
    }
}

/// `n` nodes' places in a job on 127.0.0.1, node `i` with id `NodeId(i)` and every node knowing
/// every other: a job's processes in miniature, for handles that run one node per thread
/// (`storage::Checkpointer`, `route::RouteNode`). The key is `opts.key`, or a fresh one.
pub fn loopback_specs(n: usize, opts: &NodeOptions) -> Result<Vec<NodeSpec>, EngineError> {
    let key = match &opts.key {
        Some(k) => k.clone(),
        None => {
            JobKey::generate().map_err(|e| EngineError::Io(std::io::Error::other(e.to_string())))?
        }
    };
    let listeners = (0..n)
        .map(|_| bind("127.0.0.1:0".parse().expect("loopback address")))
        .collect::<Result<Vec<_>, _>>()?;
    let addrs: HashMap<NodeId, SocketAddr> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| Ok((NodeId(i as u64), l.local_addr()?)))
        .collect::<Result<_, std::io::Error>>()?;
    Ok(listeners
        .into_iter()
        .enumerate()
        .map(|(i, listener)| {
            let id = NodeId(i as u64);
            let mut peers = addrs.clone();
            peers.remove(&id);
            NodeSpec {
                id,
                listener,
                peers,
                key: key.clone(),
                core: None,
            }
        })
        .collect())
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

/// Builds a node's protocol on the reactor thread that will run it.
type Build<P> = Box<dyn FnOnce() -> P + Send>;

/// A started reactor and the handles of the nodes it hosts.
type Reactor<P> = (ReactorThread<<P as Protocol>::Request>, Vec<NodeHandle<P>>);

/// Start a reactor thread hosting `nodes`; returns it and each node's handle.
///
/// Each protocol is built on the reactor thread itself, so its memory comes from that thread's
/// allocator arena. Built elsewhere, the state a node frees on each new view goes back to the
/// other thread's arena, and the reactor takes fresh pages (a page fault each) for the next
/// one: at 1024 in-process nodes that was about a fifth of a stabilization's CPU.
#[allow(clippy::too_many_arguments)]
fn start_reactor<P>(
    nodes: Vec<(NodeSpec, Build<P>)>,
    opts: &NodeOptions,
    backend: Backend,
    epoch: Instant,
    core: Option<usize>,
    events: Sender<(NodeId, NodeEvent<P::Event>)>,
    (poll, waker): (Poll, Arc<Waker>),
    local: Option<Port<P::Msg>>,
    shm: bool,
    shm_bound: &mut HashMap<NodeId, std::io::Result<UnixListener>>,
) -> Result<Reactor<P>, EngineError>
where
    P: Protocol + Send + 'static,
    P::Msg: Framed,
    P::Event: Send + 'static,
    P::Request: Send + 'static,
{
    let (tx, rx) = channel();
    let (cfg, hosts, mut handles) =
        prepare(nodes, opts, backend, epoch, &tx, &waker, shm, shm_bound)?;
    // With a descriptor table of its own, the reactor keeps its poll and listeners and this
    // thread closes its copies of them once the reactor has its table.
    let own = opts.reactor.own_descriptors;
    let handed: Vec<RawFd> = if own {
        std::iter::once(poll.as_raw_fd())
            .chain(hosts.iter().map(|h| h.listener.as_raw_fd()))
            .collect()
    } else {
        Vec::new()
    };
    let handed_here = handed.clone();
    let name = match handles.as_slice() {
        [one] => format!("weft-{}", one.id),
        _ => format!("weft-r{}", core.unwrap_or(0)),
    };
    // The reactor is set up on its thread (its ring belongs there); the start waits for that,
    // so that a reactor that cannot start (no ring, no descriptors left) fails the start
    // instead of leaving handles to a node that never ran.
    let (ready, set_up) = std::sync::mpsc::channel::<(bool, Result<Backend, EngineError>)>();
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        if own {
            if let Err(e) = crate::engine::table::take_own(&handed) {
                let _ = ready.send((false, Err(e.into())));
                return Ok(());
            }
        }
        if let Some(c) = core {
            core_affinity::set_for_current(core_affinity::CoreId { id: c });
        }
        let hosts = hosts.into_iter().map(HostPart::build).collect();
        match Started::new(cfg, poll, hosts, rx, events, local) {
            Ok(reactor) => {
                let _ = ready.send((own, Ok(reactor.backend())));
                reactor.run()
            }
            Err(e) => {
                let _ = ready.send((own, Err(e)));
                Ok(())
            }
        }
    })?;
    let set_up = set_up.recv().map(|(took_own, started)| {
        if took_own {
            crate::engine::table::close_handed(&handed_here);
        }
        started
    });
    match set_up {
        Ok(Ok(runs_on)) => {
            for h in &mut handles {
                h.backend = runs_on;
            }
        }
        Ok(Err(e)) => {
            let _ = thread.join();
            return Err(e);
        }
        Err(_) => {
            let _ = thread.join();
            return Err(EngineError::Panicked);
        }
    }
    Ok((
        ReactorThread {
            commands: tx,
            waker,
            thread: Some(thread),
        },
        handles,
    ))
}

/// A node to host, all but its protocol, which is built where it will run.
struct HostPart<P: Protocol> {
    identity: Identity,
    peers: HashMap<NodeId, SocketAddr>,
    listener: TcpListener,
    build: Build<P>,
    retire: Sender<P>,
    shm_listener: Option<std::io::Result<UnixListener>>,
}

impl<P: Protocol> HostPart<P> {
    /// The node, its protocol built now (on the thread that runs it).
    fn build(self) -> HostSpec<P> {
        HostSpec {
            identity: self.identity,
            peers: self.peers,
            listener: self.listener,
            shm_listener: self.shm_listener,
            proto: (self.build)(),
            retire: self.retire,
        }
    }
}

/// What a reactor hosting `nodes` is set up from, and each node's handle (commands to `tx`,
/// wakes through `waker`).
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn prepare<P: Protocol>(
    nodes: Vec<(NodeSpec, Build<P>)>,
    opts: &NodeOptions,
    backend: Backend,
    epoch: Instant,
    tx: &Sender<Command<P::Request>>,
    waker: &Arc<Waker>,
    shm: bool,
    shm_bound: &mut HashMap<NodeId, std::io::Result<UnixListener>>,
) -> Result<(ReactorConfig, Vec<HostPart<P>>, Vec<NodeHandle<P>>), EngineError> {
    let mut hosts = Vec::with_capacity(nodes.len());
    let mut handles = Vec::with_capacity(nodes.len());
    for (spec, build) in nodes {
        let (retire, retired) = channel();
        handles.push(NodeHandle {
            id: spec.id,
            addr: spec.listener.local_addr()?,
            commands: tx.clone(),
            waker: waker.clone(),
            retired,
            own: None,
            stopped: false,
            backend,
        });
        let identity = Identity {
            incarnation: opts.incarnation,
            params: opts.params.clone(),
            bulk_mac: opts.bulk_mac,
            ..Identity::new(opts.job_id, spec.id, spec.key)
        };
        // Bound before the reactor runs (in a cluster, before any reactor runs: see there).
        let shm_listener = shm.then(|| match shm_bound.remove(&spec.id) {
            Some(l) => l,
            None => Listener::bind(&identity).map(Listener::into_socket),
        });
        hosts.push(HostPart {
            identity,
            peers: spec.peers,
            listener: spec.listener,
            build,
            retire,
            shm_listener,
        });
    }
    let cfg = ReactorConfig {
        options: opts.reactor.clone(),
        backend,
        fallback: crate::engine::forced_backend(opts.backend)?.is_none(),
        epoch,
        shm,
    };
    Ok((cfg, hosts, handles))
}

/// A poll and the waker that interrupts it (token [`WAKER`]), for one reactor.
fn waker_poll() -> Result<(Poll, Arc<Waker>), EngineError> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    Ok((poll, waker))
}

/// What a run ran on, as reports name it, from what each of its parts ran on (a node's
/// [`Backend`], a node process's `started` report, or a name this gave a round or a trial):
/// `uring`, `poll`, or `uring+poll` when an automatic choice had some reactors fall back
/// ([`NodeHandle::backend`]); `unknown` for no parts.
pub fn backend_name<S: AsRef<str>>(parts: impl IntoIterator<Item = S>) -> String {
    let (mut uring, mut poll) = (false, false);
    for p in parts {
        let p = p.as_ref();
        uring |= p.contains("uring");
        poll |= p.contains("poll");
    }
    match (uring, poll) {
        (true, true) => "uring+poll",
        (true, false) => "uring",
        (false, true) => "poll",
        (false, false) => "unknown",
    }
    .to_owned()
}

/// Start one node on a reactor thread of its own. It reports on `events`, which the caller
/// must keep reading: the channel is unbounded. Refusals, the one kind of event strangers can
/// cause, come at most 16 a second per node (the rest are counted: [`NodeEvent::RefusedMore`]).
pub fn spawn<P>(
    spec: NodeSpec,
    opts: &NodeOptions,
    proto: P,
    events: Sender<(NodeId, NodeEvent<P::Event>)>,
) -> Result<NodeHandle<P>, EngineError>
where
    P: Protocol + Send + 'static,
    P::Msg: Framed,
    P::Event: Send + 'static,
    P::Request: Send + 'static,
{
    opts.check()?;
    let backend = choose_backend(opts.backend)?;
    let core = spec.core;
    let epoch = opts.epoch.unwrap_or_else(Instant::now);
    let (reactor, mut handles) = start_reactor(
        vec![(spec, Box::new(|| proto))],
        opts,
        backend,
        epoch,
        core,
        events,
        waker_poll()?,
        None,
        opts.shm_between_processes()?,
        &mut HashMap::new(),
    )?;
    let mut node = handles.pop().ok_or(EngineError::Gone)?;
    node.own = Some(reactor);
    Ok(node)
}

/// N nodes on 127.0.0.1, every node knowing every other, hosted by one reactor per core.
pub struct Cluster<P: Protocol> {
    /// The nodes, node `i` has id `NodeId(i)`.
    pub nodes: Vec<NodeHandle<P>>,
    /// Every node's events. Keep reading them: the channel is unbounded (strangers' refusals
    /// come at most 16 a second per node, see [`spawn`]).
    pub events: Receiver<(NodeId, NodeEvent<P::Event>)>,
    /// Time zero of every node's protocol clock.
    pub epoch: Instant,
    /// How its nodes reach each other: [`Transport::Inproc`] or [`Transport::Tcp`], as the
    /// options chose.
    pub transport: Transport,
    reactors: Vec<ReactorThread<P::Request>>,
}

impl<P> Cluster<P>
where
    P: Protocol + Send + 'static,
    P::Msg: Framed,
    P::Event: Send + 'static,
    P::Request: Send + 'static,
{
    /// Start `n` nodes; `make(i, ids)` builds node `i`'s protocol, on the reactor thread that
    /// will run it (see `start_reactor`).
    pub fn start(
        n: usize,
        opts: NodeOptions,
        make: impl Fn(usize, &[NodeId]) -> P + Send + Sync + 'static,
    ) -> Result<Self, EngineError> {
        opts.check()?;
        let backend = choose_backend(opts.backend)?;
        let epoch = opts.epoch.unwrap_or_else(Instant::now);
        let key = match &opts.key {
            Some(k) => k.clone(),
            None => JobKey::generate()
                .map_err(|e| EngineError::Io(std::io::Error::other(e.to_string())))?,
        };
        let ids: Arc<[NodeId]> = (0..n as u64).map(NodeId).collect();
        let make = Arc::new(make);
        let listeners = (0..n)
            .map(|_| bind("127.0.0.1:0".parse().expect("loopback address")))
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: HashMap<NodeId, SocketAddr> = ids
            .iter()
            .zip(&listeners)
            .map(|(&id, l)| Ok((id, l.local_addr()?)))
            .collect::<Result<_, std::io::Error>>()?;
        let cores = crate::engine::online_cpus();
        let reactors = opts.reactors.unwrap_or(cores).clamp(1, n.max(1));
        let mut groups: Vec<Vec<(NodeSpec, Build<P>)>> =
            (0..reactors).map(|_| Vec::new()).collect();
        let placement = opts.placement.clone();
        let reactor_of = |i: usize| match placement.as_deref().and_then(|m| m.get(i)) {
            Some(&r) => r as usize % reactors,
            None => i % reactors,
        };
        for (i, l) in listeners.into_iter().enumerate() {
            let mut peers = addrs.clone();
            peers.remove(&ids[i]);
            let spec = NodeSpec {
                id: ids[i],
                listener: l,
                peers,
                key: key.clone(),
                core: None,
            };
            let (make, ids) = (make.clone(), ids.clone());
            let build: Build<P> = Box::new(move || make(i, &ids));
            groups[reactor_of(i)].push((spec, build));
        }
        let (tx, rx) = channel();
        let polls = (0..reactors)
            .map(|_| waker_poll())
            .collect::<Result<Vec<_>, _>>()?;
        let transport = opts.links()?;
        let in_process = transport == Transport::Inproc;
        let mut ports: Vec<Option<Port<P::Msg>>> = if in_process {
            // Each reactor's nodes take its slots in id order, as `groups` holds them.
            let mut next = vec![0; reactors];
            let places: Vec<(NodeId, Place)> = (0..n)
                .map(|i| {
                    let reactor = reactor_of(i);
                    next[reactor] += 1;
                    let host = next[reactor] - 1;
                    (ids[i], Place { reactor, host })
                })
                .collect();
            let wakers = polls.iter().map(|(_, w)| w.clone()).collect();
            inproc::ports(&places, wakers)
                .into_iter()
                .map(Some)
                .collect()
        } else {
            (0..reactors).map(|_| None).collect()
        };
        // Every node's link listener is bound before any reactor runs: a node whose reactor
        // starts first finds its peers there, instead of going by TCP.
        let mut shm_bound = HashMap::new();
        if transport == Transport::Shm {
            for &id in ids.iter() {
                let me = Identity::new(opts.job_id, id, key.clone());
                let l = Listener::bind(&me).map(Listener::into_socket);
                shm_bound.insert(id, l);
            }
        }
        let mut threads = Vec::with_capacity(reactors);
        let mut slots: Vec<Vec<NodeHandle<P>>> = Vec::with_capacity(reactors);
        for (r, (group, poll)) in groups.into_iter().zip(polls).enumerate() {
            let core = opts.pin.then_some(r % cores);
            let local = ports[r].take();
            let (thread, handles) = start_reactor(
                group,
                &opts,
                backend,
                epoch,
                core,
                tx.clone(),
                poll,
                local,
                transport == Transport::Shm,
                &mut shm_bound,
            )?;
            threads.push(thread);
            slots.push(handles);
        }
        // Back to id order: each reactor's nodes were added in id order.
        let mut iters: Vec<_> = slots.into_iter().map(Vec::into_iter).collect();
        let nodes = (0..n)
            .map(|i| iters[reactor_of(i)].next().ok_or(EngineError::Gone))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            nodes,
            events: rx,
            epoch,
            transport,
            reactors: threads,
        })
    }

    /// Stop every reactor, and with them every node still running; the first reactor error,
    /// if any. The job is over, so connections are reset rather than closed in order (see
    /// the reactor): a run of many jobs does not fill the port space with TIME_WAIT.
    pub fn shutdown(mut self) -> Result<(), EngineError> {
        let mut result = Ok(());
        for r in &mut self.reactors {
            result = result.and(r.join());
        }
        result
    }

    /// Wake every node's protocol ([`NodeHandle::wake`]): a job whose protocols are held
    /// ([`crate::proto::held::Held`]) starts them all at once.
    pub fn wake_all(&self) {
        for node in &self.nodes {
            node.wake();
        }
    }

    /// What its nodes run on, as reports name it: the backend, or `uring+poll` when some
    /// reactors fell back to poll and others did not ([`NodeHandle::backend`]).
    pub fn backend_name(&self) -> String {
        backend_name(self.nodes.iter().map(|n| n.backend.to_string()))
    }

    /// Stop every reactor (as [`Cluster::shutdown`]) and return every node's protocol, in id
    /// order (nodes stopped earlier have already returned theirs: they are skipped).
    pub fn stop_all(mut self) -> Result<Vec<P>, EngineError> {
        for r in &mut self.reactors {
            r.join()?;
        }
        let mut out = Vec::with_capacity(self.nodes.len());
        for node in self.nodes.iter_mut().filter(|n| !n.stopped) {
            out.push(node.stop()?);
        }
        Ok(out)
    }
}

impl<P: Protocol> Drop for Cluster<P> {
    fn drop(&mut self) {
        // Reactors first: each stops all its nodes at once (dropping the handles one by one
        // would stop the nodes one at a time, in order, each a graceful close).
        for r in &mut self.reactors {
            let _ = r.join();
        }
    }
}

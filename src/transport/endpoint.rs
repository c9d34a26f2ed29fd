//! The front door for a runtime that embeds weft: one [`Endpoint`] per process, at its rank
//! of the job, that sends to any rank and says whether the message arrived, and says who
//! failed, who suspected it and why, and which ranks live on.
//!
//! Start it from whatever launched the process ([`Endpoint::from_launcher`]: `srun`,
//! `mpirun`, `mpiexec.hydra`, or `WEFT_RANK`/`WEFT_SIZE`), from an explicit place in a job
//! ([`Endpoint::spawn`]), or as a whole job in this process ([`Endpoint::on_loopback`]).
//! Each runs the membership and the BMG router of [`crate::proto::endpoint::Service`] on a
//! reactor thread of its own.
//!
//! ```no_run
//! use weft::prelude::*;
//! use std::time::Duration;
//! let job = Endpoint::on_loopback(4, &EndpointConfig::default())?;
//! let tag = job[0].send(Rank(3), b"hello".to_vec());
//! // Rank 3 gets a `Received`, rank 0 a `Delivered` (or a `Failed`) with the same tag.
//! let done = job[0].wait_for(Duration::from_secs(5), |e| match e {
//!     EndpointEvent::Delivered { tag: t, .. } | EndpointEvent::Failed { tag: t, .. } => Some(t),
//!     _ => None,
//! }, |_| {})?;
//! assert_eq!(done, tag);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::driven::{Driven, Signal};
use super::handle::{wait_for_in, Handle, Silence};
use super::{bind, loopback_specs, NodeOptions, NodeSpec};
use crate::bootstrap::{self, BootstrapError, Joined, Launch, ProcessEnv, Want};
use crate::buf::Payload;
use crate::engine::reactor::NodeEvent;
use crate::engine::EngineError;
use crate::proto::endpoint::{EndpointEvent, EndpointRequest, Service, ServiceConfig};
use crate::proto::uniform::AgreeOp;
use crate::wire::handshake::JobKey;
use crate::{NodeId, Rank};
use std::cell::{Cell, RefCell};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How an endpoint runs.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// Its membership and routing.
    pub service: ServiceConfig,
    /// Its node: backend, links, waiting, timeouts (`params` is set from the service).
    pub node: NodeOptions,
    /// Under a launcher: how long the address exchange may take.
    pub exchange_timeout: Duration,
    /// Under a launcher: the address to listen on (`None`: every interface, any port; the
    /// address the others dial is `WEFT_ADVERTISE`, else the route to rank 0's host).
    pub listen: Option<SocketAddr>,
    /// Under a launcher, over io_uring: make this process's death as quick to see as over
    /// epoll (`engine::guard`: one helper process that shuts the sockets down when this one
    /// dies). Sockets open before the endpoint starts are left alone.
    pub guard: bool,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            service: ServiceConfig::default(),
            node: NodeOptions {
                pin: false,
                ..NodeOptions::default()
            },
            exchange_timeout: Duration::from_secs(60),
            listen: None,
            guard: true,
        }
    }
}

/// Why an endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The launcher's environment, or the address exchange, failed (what names the variable).
    #[error(transparent)]
    Launch(#[from] BootstrapError),
    /// The node could not start.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// This process's place in a launched job: its listener bound, every address traded.
pub struct LaunchedPlace {
    /// The launch, the job key and every process's address.
    pub joined: Joined,
    /// Where this process listens.
    pub listener: TcpListener,
}

/// Bind this process's listener on `listen` and trade addresses with the rest of the job
/// `launch` describes (`params`: what every rank must run alike; `key`: the job key, else the
/// environment's or rank 0's). `announce` hears the address the others will dial, before the
/// exchange (weft's own launcher reads it on standard output).
pub fn join_launched(
    launch: Launch,
    listen: SocketAddr,
    key: Option<JobKey>,
    params: &str,
    deadline: Instant,
    announce: impl FnOnce(SocketAddr) -> std::io::Result<()>,
) -> Result<LaunchedPlace, StartError> {
    let env = ProcessEnv;
    let listener = bind(listen)?;
    let mine = bootstrap::exchange::advertised(
        listener.local_addr().map_err(EngineError::Io)?,
        &launch,
        &env,
    )?;
    announce(mine).map_err(EngineError::Io)?;
    let joined = bootstrap::exchange(launch, mine, key, None, params, &env, deadline)?;
    Ok(LaunchedPlace { joined, listener })
}

/// Which thread turns an endpoint's reactor: [`OwnThread`] or [`CallerThread`].
pub trait Drive: sealed::Sealed {}

mod sealed {
    /// What an endpoint needs of its node, on whichever thread it runs.
    pub trait Sealed: Sized {
        #[doc(hidden)]
        fn start(
            spec: super::NodeSpec,
            opts: &super::NodeOptions,
            service: super::Service,
        ) -> Result<Self, super::EngineError>;
        #[doc(hidden)]
        fn request(&self, req: super::EndpointRequest);
        #[doc(hidden)]
        fn next(
            &self,
            timeout: super::Duration,
        ) -> Result<super::NodeEvent<super::EndpointEvent>, super::Silence>;
        #[doc(hidden)]
        fn try_next(&self) -> Option<super::NodeEvent<super::EndpointEvent>>;
        #[doc(hidden)]
        fn stop(self) -> Result<super::Service, super::EngineError>;
    }
}

/// An endpoint's reactor on a thread of its own: events wait in a queue for
/// [`EndpointOf::next`], requests cross to the reactor through one (a thread hop each way);
/// the endpoint can move between threads.
pub struct OwnThread(Handle<Service>);

/// An endpoint's reactor turned by the thread that started it, inside [`EndpointOf::next`]
/// and [`EndpointOf::progress`] (see [`super::driven`]): a request runs the protocol at once
/// and nothing crosses threads. The endpoint stays on that thread (a ring has one issuer).
pub struct CallerThread(RefCell<Driven<Service>>);

impl Drive for OwnThread {}
impl Drive for CallerThread {}

impl sealed::Sealed for OwnThread {
    fn start(spec: NodeSpec, opts: &NodeOptions, service: Service) -> Result<Self, EngineError> {
        Ok(Self(Handle::spawn(spec, opts, service)?))
    }
    fn request(&self, req: EndpointRequest) {
        self.0.request(req);
    }
    fn next(&self, timeout: Duration) -> Result<NodeEvent<EndpointEvent>, Silence> {
        self.0.next_event(timeout)
    }
    fn try_next(&self) -> Option<NodeEvent<EndpointEvent>> {
        self.0.try_event()
    }
    fn stop(self) -> Result<Service, EngineError> {
        self.0.stop()
    }
}

impl sealed::Sealed for CallerThread {
    fn start(spec: NodeSpec, opts: &NodeOptions, service: Service) -> Result<Self, EngineError> {
        Ok(Self(RefCell::new(Driven::start(spec, opts, service)?)))
    }
    /// A request to a node that is gone is dropped (its next wait says [`Silence::Gone`]).
    fn request(&self, req: EndpointRequest) {
        let _ = self.0.borrow_mut().request(req);
    }
    fn next(&self, timeout: Duration) -> Result<NodeEvent<EndpointEvent>, Silence> {
        self.0.borrow_mut().next_event(timeout)
    }
    fn try_next(&self) -> Option<NodeEvent<EndpointEvent>> {
        self.0.borrow_mut().try_event()
    }
    fn stop(self) -> Result<Service, EngineError> {
        self.0.into_inner().stop()
    }
}

/// One process's endpoint at its rank of the job, its reactor on a thread of its own.
pub type Endpoint = EndpointOf<OwnThread>;

/// One process's endpoint at its rank of the job, driven by the thread that started it:
/// [`EndpointOf::next`] turns the reactor, or the application's own event loop does
/// ([`EndpointOf::progress`], [`EndpointOf::arm`], [`EndpointOf::fd`]).
pub type DrivenEndpoint = EndpointOf<CallerThread>;

/// One process's endpoint at its rank of the job, its reactor turned as `D` says (see
/// [`Endpoint`] and [`DrivenEndpoint`]).
pub struct EndpointOf<D: Drive> {
    node: D,
    rank: Rank,
    size: u32,
    next_tag: Cell<u64>,
    next_agree: Cell<u64>,
}

impl<D: Drive> EndpointOf<D> {
    /// Start the endpoint of rank `rank` in a job whose processes are `ring` (sorted ids;
    /// rank `r` is `ring[r]`): `spec` names `ring[rank]` and where the others listen.
    pub fn spawn(
        spec: NodeSpec,
        rank: Rank,
        ring: Arc<[NodeId]>,
        cfg: &EndpointConfig,
    ) -> Result<Self, EngineError> {
        if ring.get(rank.0 as usize) != Some(&spec.id) {
            return Err(EngineError::Config(format!(
                "rank {} of a job of {} is not node {}",
                rank.0,
                ring.len(),
                spec.id
            )));
        }
        if ring.windows(2).any(|w| w[0] >= w[1]) {
            return Err(EngineError::Config(
                "a job's ids must be sorted and distinct: rank r is the r-th".into(),
            ));
        }
        let opts = Self::node_options(cfg, ring.len());
        let service = Service::new(rank, ring.clone(), cfg.service, opts.reactor.startup_grace);
        Ok(Self {
            node: D::start(spec, &opts, service)?,
            rank,
            size: ring.len() as u32,
            next_tag: Cell::new(0),
            next_agree: Cell::new(0),
        })
    }

    /// A whole job of `n` ranks in this process, on loopback (driven endpoints are driven
    /// by this thread, each only while it is waited on or progressed).
    pub fn on_loopback(n: usize, cfg: &EndpointConfig) -> Result<Vec<Self>, EngineError> {
        let ring: Arc<[NodeId]> = (0..n as u64).map(NodeId).collect();
        let opts = Self::node_options(cfg, n);
        let cfg = EndpointConfig {
            node: opts.clone(),
            ..cfg.clone()
        };
        loopback_specs(n, &opts)?
            .into_iter()
            .enumerate()
            .map(|(i, spec)| Self::spawn(spec, Rank(i as u32), ring.clone(), &cfg))
            .collect()
    }

    /// The endpoint of this process, at the rank its launcher gave it: `srun`, `mpirun`,
    /// `mpiexec.hydra` (PMI-1), or `WEFT_RANK`/`WEFT_SIZE`/`WEFT_RENDEZVOUS`. The job key comes
    /// from `WEFT_JOB_KEY` or `WEFT_JOB_SECRET`, else (under PMI) from rank 0. Returns once
    /// every rank's address is known (at most `cfg.exchange_timeout`). A malformed launcher
    /// variable is named in the error.
    pub fn from_launcher(cfg: &EndpointConfig) -> Result<Self, StartError> {
        let launch = bootstrap::detect(Want::Auto, &ProcessEnv)?;
        let size = launch.size as usize;
        let opts = Self::node_options(cfg, size);
        opts.check()?;
        if cfg.guard {
            super::process::guard(&opts)?;
        }
        let key = JobKey::from_env().map_err(|e| BootstrapError::Exchange(e.to_string()))?;
        let listen = cfg.listen.unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let deadline = Instant::now() + cfg.exchange_timeout;
        let place = join_launched(launch, listen, key, &opts.params, deadline, |_| Ok(()))?;
        let me = NodeId(u64::from(place.joined.launch.rank));
        let spec = NodeSpec {
            id: me,
            listener: place.listener,
            peers: place.joined.peers.without(me),
            key: place.joined.key,
            core: None,
        };
        let ring: Arc<[NodeId]> = (0..size as u64).map(NodeId).collect();
        let rank = Rank(me.0 as u32);
        let cfg = EndpointConfig {
            node: opts,
            ..cfg.clone()
        };
        Ok(Self::spawn(spec, rank, ring, &cfg)?)
    }

    /// The node options of a job of `n`: the caller's, with the membership's parameters (a
    /// process that runs another tree, radix or size is refused by the others, named).
    fn node_options(cfg: &EndpointConfig, n: usize) -> NodeOptions {
        NodeOptions {
            params: cfg.service.membership.params(n),
            ..cfg.node.clone()
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// The job's size (ranks `0..size`, live or not).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Send `data` to `to`, routed over the BMG; returns the tag its `Delivered` or `Failed`
    /// (and the destination's `Received`) will carry. Every send ends in exactly one of the
    /// two, also when `to` dies.
    pub fn send(&self, to: Rank, data: impl Into<Payload>) -> u64 {
        let tag = self.next_tag.get();
        self.next_tag.set(tag + 1);
        self.request(EndpointRequest::Send {
            to,
            tag,
            data: data.into(),
        });
        tag
    }

    /// Send `data` to `to` under a tag the caller picks, unique among its sends (a layer on
    /// top that numbers its own sends, as weft's C library does); otherwise as [`Self::send`],
    /// whose numbering it must not mix with.
    pub fn send_as(&self, to: Rank, tag: u64, data: impl Into<Payload>) {
        self.request(EndpointRequest::Send {
            to,
            tag,
            data: data.into(),
        });
    }

    /// Broadcast `data` to every live rank (this one delivers it too).
    pub fn broadcast(&self, data: impl Into<Payload>) {
        self.request(EndpointRequest::Broadcast { data: data.into() });
    }

    /// Leave the job on purpose: the others install a view without this rank, and this rank
    /// reports its own `Left` once that view is in place.
    pub fn leave(&self) {
        self.request(EndpointRequest::Leave);
    }

    /// Agree with every survivor on `op` over each one's `value`, and on who failed: every
    /// live rank calls it, in the same order, once the last call is decided; each hears
    /// `Agreed` with the same value and failed set (ULFM's `MPIX_Comm_agree`, under any
    /// launcher). Returns the instance number its `Agreed` carries.
    pub fn agree(&self, value: u64, op: AgreeOp) -> u64 {
        let k = self.next_agree.get();
        self.next_agree.set(k + 1);
        self.request(EndpointRequest::Agree { value, op });
        k
    }

    /// Revoke (ULFM's `MPIX_Comm_revoke`): every live rank, this one included, reports
    /// `Revoked { by: this rank }` once, carried by a flood over the BMG that goes around the
    /// dead.
    pub fn revoke(&self) {
        self.request(EndpointRequest::Revoke);
    }

    /// Hand the service a request.
    fn request(&self, req: EndpointRequest) {
        self.node.request(req);
    }

    /// The next event: the endpoint's, or the transport's news (a connection refused; a
    /// peer whose connection was lost, before the endpoint's `Suspected`). [`Silence`] says
    /// whether the time ran out or the node is gone. A [`DrivenEndpoint`] is driven until
    /// then.
    pub fn next(&self, timeout: Duration) -> Result<NodeEvent<EndpointEvent>, Silence> {
        self.node.next(timeout)
    }

    /// An event that is already here, without waiting (nor, for a [`DrivenEndpoint`], a
    /// turn: see [`EndpointOf::progress`]).
    pub fn try_next(&self) -> Option<NodeEvent<EndpointEvent>> {
        self.node.try_next()
    }

    /// The next of the endpoint's events that `pick` takes, within `timeout`; the transport's
    /// news on the way goes to `aside`.
    pub fn wait_for<T>(
        &self,
        timeout: Duration,
        pick: impl FnMut(EndpointEvent) -> Option<T>,
        aside: impl FnMut(NodeEvent<EndpointEvent>),
    ) -> Result<T, Silence> {
        wait_for_in(|left| self.next(left), timeout, pick, aside)
    }

    /// Stop the endpoint (the others see this rank fail, as when the process dies); its
    /// service's final state.
    pub fn stop(self) -> Result<Service, EngineError> {
        self.node.stop()
    }
}

impl DrivenEndpoint {
    /// One turn of the endpoint's reactor, without waiting; whether it found work (its
    /// events wait for [`EndpointOf::try_next`]).
    pub fn progress(&self) -> Result<bool, EngineError> {
        self.node.0.borrow_mut().progress()
    }

    /// Get ready to wait on [`Self::fd`]: `true` if this thread may wait (the descriptor
    /// turns readable when there is work), `false` if events or work are pending: take them
    /// first. See [`super::driven`] for the rule.
    pub fn arm(&self) -> Result<bool, EngineError> {
        self.node.0.borrow_mut().arm()
    }

    /// The descriptor to wait on once [`Self::arm`] said yes (`None` once the node is gone).
    pub fn fd(&self) -> Option<RawFd> {
        self.node.0.borrow().fd()
    }

    /// The backend its reactor runs on (`None` once the node is gone).
    pub fn backend(&self) -> Option<crate::engine::Backend> {
        self.node.0.borrow().backend()
    }

    /// What wakes this thread's wait on [`Self::fd`] from another thread.
    pub fn signal(&self) -> Signal {
        self.node.0.borrow().signal()
    }
}

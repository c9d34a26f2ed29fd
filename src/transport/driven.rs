//! A node its application drives from its own thread: no reactor thread, no command queue,
//! no hop between the application and its sockets. A request runs the protocol at once;
//! [`Driven::progress`] is one turn of the reactor that never waits; an application with
//! nothing to do arms the node and waits on its descriptor, in its own event loop if it has
//! one:
//!
//! 1. call [`Driven::progress`] until it answers `false` (and take the events it queued);
//! 2. call [`Driven::arm`]: `false` means work or events are pending, go back to 1;
//! 3. wait until [`Driven::fd`] is readable (epoll, poll, select: it is level-triggered and
//!    stays readable until a turn takes what woke it), then go back to 1.
//!
//! A [`Signal`] wakes that wait from any thread. The ring of an io_uring node has a single
//! issuer: a node is driven from the thread that started it.

use super::handle::Silence;
use super::{prepare, waker_poll, HostPart, NodeOptions, NodeSpec};
use crate::engine::reactor::{self, NodeEvent, Started};
use crate::engine::{choose_backend, Backend, EngineError, WaitMode, SPIN};
use crate::proto::Protocol;
use crate::wire::Framed;
use crate::NodeId;
use mio::Waker;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Wakes a waiter on a driven node's descriptor, from any thread.
#[derive(Clone)]
pub struct Signal(Arc<Waker>);

impl Signal {
    /// Make the descriptor readable (the next turn takes it).
    pub fn raise(&self) -> std::io::Result<()> {
        self.0.wake()
    }
}

/// One node of this process, driven by the thread that started it.
pub struct Driven<P: Protocol> {
    id: NodeId,
    /// `None` once it failed or stopped.
    reactor: Option<reactor::Driven<P>>,
    waker: Arc<Waker>,
    events: Receiver<(NodeId, NodeEvent<P::Event>)>,
    /// An event taken from `events` to see whether one waits, not yet handed out.
    peeked: Option<NodeEvent<P::Event>>,
    retired: Receiver<P>,
    wait: WaitMode,
}

impl<P> Driven<P>
where
    P: Protocol + Send + 'static,
    P::Msg: Framed,
{
    /// Start `proto` as the node `spec` names, on this thread: it runs only when this thread
    /// drives it.
    pub fn start(spec: NodeSpec, opts: &NodeOptions, proto: P) -> Result<Self, EngineError> {
        opts.check()?;
        let backend = choose_backend(opts.backend)?;
        let epoch = opts.epoch.unwrap_or_else(Instant::now);
        let (poll, waker) = waker_poll()?;
        // Nothing sends commands to a driven reactor: requests go straight to it.
        let (tx, commands) = channel();
        let (events_tx, events) = channel();
        let id = spec.id;
        let nodes = vec![(spec, Box::new(|| proto) as super::Build<P>)];
        let shm = opts.shm_between_processes()?;
        let (cfg, hosts, mut handles) = prepare(
            nodes,
            opts,
            backend,
            epoch,
            &tx,
            &waker,
            shm,
            &mut HashMap::new(),
        )?;
        let mut handle = handles.pop().ok_or(EngineError::Gone)?;
        // The handle is taken apart, not dropped as a live node's: its drop would stop it.
        handle.stopped = true;
        let retired = std::mem::replace(&mut handle.retired, channel().1);
        let hosts = hosts.into_iter().map(HostPart::build).collect();
        let reactor = Started::new(cfg, poll, hosts, commands, events_tx, None)?.drive()?;
        Ok(Self {
            id,
            reactor: Some(reactor),
            waker,
            events,
            peeked: None,
            retired,
            wait: opts.reactor.wait,
        })
    }
}

impl<P> Driven<P>
where
    P: Protocol,
    P::Msg: Framed,
{
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The backend it runs on (`None` once it is gone).
    pub fn backend(&self) -> Option<Backend> {
        self.reactor.as_ref().map(|r| r.backend())
    }

    /// The reactor, or `Gone`.
    fn reactor(&mut self) -> Result<&mut reactor::Driven<P>, EngineError> {
        self.reactor.as_mut().ok_or(EngineError::Gone)
    }

    /// `r`, with the node gone if it is an error (a reactor that failed does not run again).
    fn check<T>(&mut self, r: Result<T, EngineError>) -> Result<T, EngineError> {
        if r.is_err() {
            self.reactor = None;
        }
        r
    }

    /// Hand the protocol a request ([`Protocol::on_request`]) and carry out what it asks,
    /// now (what it sends is queued to the kernel by the next turn at the latest).
    pub fn request(&mut self, req: P::Request) -> Result<(), EngineError> {
        let id = self.id;
        let r = self.reactor()?.request(id, req);
        self.check(r)
    }

    /// One turn that never waits; whether it found work.
    pub fn progress(&mut self) -> Result<bool, EngineError> {
        let r = self.reactor()?.progress();
        self.check(r)
    }

    /// Get ready to wait on [`Self::fd`]: `true` if the caller may wait, `false` if events
    /// or work are pending.
    pub fn arm(&mut self) -> Result<bool, EngineError> {
        if self.peeked.is_none() {
            self.peeked = self.take();
        }
        if self.peeked.is_some() {
            return Ok(false);
        }
        let r = self.reactor()?.arm();
        self.check(r)
    }

    /// The descriptor to wait on after [`Self::arm`] (`None` once the node is gone).
    pub fn fd(&self) -> Option<RawFd> {
        self.reactor.as_ref().map(|r| r.fd())
    }

    /// What wakes a waiter on [`Self::fd`] from another thread.
    pub fn signal(&self) -> Signal {
        Signal(self.waker.clone())
    }

    /// An event from the channel, if one waits.
    fn take(&mut self) -> Option<NodeEvent<P::Event>> {
        match self.events.try_recv() {
            Ok((_, e)) => Some(e),
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => None,
        }
    }

    /// The next event the turns so far produced, without a turn.
    pub fn try_event(&mut self) -> Option<NodeEvent<P::Event>> {
        self.peeked.take().or_else(|| self.take())
    }

    /// The next event, driving the node until one comes or `timeout` passes: turns without
    /// waiting while work comes (for [`SPIN`] after the last under the adaptive wait mode,
    /// always under the busy one), then arms and waits on the descriptor.
    pub fn next_event(&mut self, timeout: Duration) -> Result<NodeEvent<P::Event>, Silence> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut last_work = start;
        loop {
            if let Some(e) = self.try_event() {
                return Ok(e);
            }
            let worked = self.progress().map_err(|_| Silence::Gone)?;
            if worked {
                last_work = Instant::now();
                continue;
            }
            if let Some(e) = self.try_event() {
                return Ok(e);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Silence::Timeout(timeout));
            }
            let spin = match self.wait {
                WaitMode::Busy => true,
                WaitMode::Block => false,
                WaitMode::Adaptive => now.duration_since(last_work) < SPIN,
            };
            if spin || !self.arm().map_err(|_| Silence::Gone)? {
                continue;
            }
            let fd = self.fd().ok_or(Silence::Gone)?;
            wait_readable(fd, deadline.saturating_duration_since(now))
                .map_err(|_| Silence::Gone)?;
        }
    }

    /// Stop the node (its peers see it fail, as when the process dies); its protocol's final
    /// state.
    pub fn stop(mut self) -> Result<P, EngineError> {
        if let Some(r) = self.reactor.take() {
            r.end()?;
        }
        self.retired.recv().map_err(|_| EngineError::Gone)
    }
}

/// Wait until `fd` is readable or `within` passes (an interrupted wait just returns).
pub fn wait_readable(fd: RawFd, within: Duration) -> std::io::Result<()> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: within.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: within.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask.
    let r = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

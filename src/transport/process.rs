//! One membership node as its own OS process (`weft node`), for multi-process runs: the
//! launcher gives it its id, the initial view, the peers' addresses and the job key; it reports
//! what happens as it happens, stamped with `CLOCK_MONOTONIC` so a launcher on the same host
//! can put the reports of all its processes on one time line.

use super::{spawn, NodeOptions, NodeSpec};
use crate::engine::reactor::NodeEvent;
use crate::engine::{monotonic_ns, EngineError};
use crate::proto::membership::{MemberEvent, Membership, MembershipConfig};
use crate::proto::Event;
use crate::wire::handshake::JobKey;
use crate::NodeId;
use serde::Serialize;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// How the process enters the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A member of the initial view.
    Member,
    /// A new process asking to join (`NewNode`).
    Join,
    /// A restarted member asking to come back with its old id (`NodeAlive`).
    Recover,
}

/// Everything a node process needs.
pub struct NodeProcess {
    /// Its id.
    pub id: NodeId,
    /// The job's initial view.
    pub members: Vec<NodeId>,
    /// Where the other processes listen.
    pub peers: HashMap<NodeId, SocketAddr>,
    /// Its bound listener.
    pub listener: TcpListener,
    /// The job key.
    pub key: JobKey,
    /// Membership settings.
    pub membership: MembershipConfig,
    /// How it enters.
    pub entry: Entry,
    /// Engine settings.
    pub opts: NodeOptions,
}

/// One report line (`weft node` prints them as JSON lines).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Report {
    /// The reporting node.
    pub node: u64,
    /// `started`, `authenticated`, `suspect`, `refused`, `detected`, `view`, `stabilized`,
    /// `joined` or `left` (a process that left on purpose: at the root, and at itself).
    pub kind: &'static str,
    /// The backend the node runs on (started): `uring`, or `poll` if it was forced or an
    /// automatic choice fell back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// How the node reaches the processes of its host (started): `shm` or `tcp`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// The peer concerned (authenticated, suspect, detected).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<u64>,
    /// The epoch (view, stabilized, joined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The epoch's root (view): with the epoch, the view's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<u64>,
    /// The installed view (view).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub view: Option<Vec<u64>>,
    /// Why (refused: for a line that stands for many, the last one's reason; detected: what
    /// made the node suspect the peer, `lost`, `hung`, `unanswered` or `restarted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// How many refusals the line stands for, when more than one: a node reports 16 a second
    /// one by one and counts the rest ([`NodeEvent::RefusedMore`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// When, `CLOCK_MONOTONIC` ns.
    pub mono_ns: u64,
}

impl Report {
    /// A line of `kind` for node `node`, stamped now, with nothing else said.
    pub fn new(node: NodeId, kind: &'static str) -> Self {
        Self {
            node: node.0,
            kind,
            backend: None,
            transport: None,
            peer: None,
            epoch: None,
            root: None,
            view: None,
            why: None,
            count: None,
            mono_ns: monotonic_ns(),
        }
    }
}

/// Guard this node process's sockets if it will run on io_uring ([`crate::engine::guard`]):
/// killed, it is then seen dead as soon as over epoll. Call before the node's listener is
/// bound (sockets open at that moment are taken for inherited ones and left alone).
/// `WEFT_GUARD=0` leaves them unguarded (the control of the test that measures it). Whether
/// the guard runs.
pub fn guard(opts: &NodeOptions) -> Result<bool, EngineError> {
    let wanted = std::env::var("WEFT_GUARD").map_or(true, |v| v.trim() != "0");
    if !wanted || crate::engine::choose_backend(opts.backend)? != crate::engine::Backend::Uring {
        return Ok(false);
    }
    crate::engine::guard::guard_sockets()?;
    Ok(true)
}

/// End this process when the process that started it ends (a launcher's daemon killed, or
/// gone without cleaning up): `PR_SET_PDEATHSIG` with SIGTERM, and a parent already gone (this
/// process adopted by init) counts as gone. A launched node left running alone would hold
/// its ports and answer its peers forever.
pub fn die_with_parent() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number; getppid has no preconditions.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() == 1 {
            return Err(std::io::Error::other(
                "started by a process that has already ended",
            ));
        }
    }
    Ok(())
}

/// Run the rest of this process as a child, and in this process only wait for it: when the
/// child dies (a crash, SIGKILL), this process exits with status 128 + the signal instead of
/// dying of it. A launcher that ends the whole job when one of its processes dies of a signal
/// (MPICH's Hydra, even with `-disable-auto-cleanup`) then keeps the others running: the node
/// crashed, its process ended with an error. Call before any thread or socket exists. Returns
/// in the child; the supervising process never returns.
pub fn supervise() -> std::io::Result<()> {
    // SAFETY: called while the process has one thread; the child continues as this program.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if child == 0 {
        // The node ends with its supervisor (the launcher's SIGTERM goes to the supervisor).
        return die_with_parent();
    }
    // A terminating signal goes on to the node, which leaves the view and exits 0; this
    // process then exits as it did.
    terminate::catch(false)?;
    let mut forwarded = false;
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(child, &mut status, 0) };
        if r == child {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            std::process::exit(70);
        }
        if !forwarded && terminate::asked() {
            forwarded = true;
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(child, terminate::signal()) };
        }
    }
    let code = if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    };
    std::process::exit(code)
}

/// The report line of node `id`'s event `e`; `epoch_ns` is the `CLOCK_MONOTONIC` time of its
/// protocol clock's zero. `None` for events that have no line.
pub fn report_of(id: NodeId, epoch_ns: u64, e: NodeEvent) -> Option<Report> {
    let base = |kind| Report::new(id, kind);
    Some(match e {
        NodeEvent::Authenticated(peer) => Report {
            peer: Some(peer.0),
            ..base("authenticated")
        },
        NodeEvent::Suspect(peer) => Report {
            peer: Some(peer.0),
            ..base("suspect")
        },
        NodeEvent::Refused(why) => Report {
            why: Some(why.to_string()),
            ..base("refused")
        },
        NodeEvent::RefusedMore { count, last } => Report {
            why: Some(last.to_string()),
            count: Some(count),
            ..base("refused")
        },
        NodeEvent::Protocol(Event::Member(m)) => match m {
            MemberEvent::Detected { peer, at, why } => Report {
                why: Some(format!("{why:?}").to_lowercase()),
                peer: Some(peer.0),
                mono_ns: epoch_ns + at.0,
                ..base("detected")
            },
            MemberEvent::ViewChanged {
                epoch,
                root,
                view,
                at,
            } => Report {
                epoch: Some(epoch),
                root: Some(root.0),
                view: Some(view.iter().map(|i| i.0).collect()),
                mono_ns: epoch_ns + at.0,
                ..base("view")
            },
            MemberEvent::Stabilized { epoch, at } => Report {
                epoch: Some(epoch),
                mono_ns: epoch_ns + at.0,
                ..base("stabilized")
            },
            MemberEvent::Joined { epoch, at } => Report {
                epoch: Some(epoch),
                mono_ns: epoch_ns + at.0,
                ..base("joined")
            },
            MemberEvent::Left { peer, at } => Report {
                peer: Some(peer.0),
                mono_ns: epoch_ns + at.0,
                ..base("left")
            },
        },
        NodeEvent::Protocol(_) => return None,
    })
}

/// Run the node until `report` returns `false` (or forever: a node process normally ends by
/// being killed). Start the [`guard`] first.
pub fn run(p: NodeProcess, mut report: impl FnMut(&Report) -> bool) -> Result<(), EngineError> {
    let epoch = Instant::now();
    let epoch_ns = monotonic_ns();
    let retry = Duration::from_millis(200);
    // SIGTERM and SIGINT (a launcher ending the job, ^C) say goodbye instead of killing.
    terminate::catch(true)?;
    let leave = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let proto = match p.entry {
        Entry::Member => Membership::new(p.id, p.members.clone(), p.membership),
        Entry::Join => Membership::joiner(p.id, p.members.clone(), p.membership, retry),
        Entry::Recover => Membership::recovering(p.id, p.members.clone(), p.membership, retry),
    }
    // The engine's dials and the protocol's deadlines keep one start-up rule.
    .with_startup_grace(p.opts.reactor.startup_grace)
    .with_leave_flag(leave.clone());
    let opts = NodeOptions {
        epoch: Some(epoch),
        params: p.membership.params(p.members.len()),
        ..p.opts
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let spec = NodeSpec {
        id: p.id,
        listener: p.listener,
        peers: p.peers,
        key: p.key,
        core: None,
    };
    let mut node = spawn(spec, &opts, proto, tx)?;
    let shm = opts.shm_between_processes()?;
    let started = Report {
        backend: Some(node.backend.to_string()),
        transport: Some(if shm { "shm" } else { "tcp" }.into()),
        ..Report::new(p.id, "started")
    };
    if !report(&started) {
        return node.stop().map(drop);
    }
    // Asked to terminate: until this process has left (or LEAVE_WAIT has passed).
    let mut leaving: Option<Instant> = None;
    loop {
        if leaving.is_none() && terminate::asked() {
            leave.store(true, std::sync::atomic::Ordering::Release);
            node.wake();
            leaving = Some(Instant::now() + LEAVE_WAIT);
        }
        let e = match rx.recv_timeout(TERMINATE_POLL) {
            Ok((_, e)) => e,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if leaving.is_some_and(|until| Instant::now() >= until) {
                    break;
                }
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let Some(r) = report_of(p.id, epoch_ns, e) else {
            continue;
        };
        let gone = r.kind == "left" && r.peer == Some(p.id.0);
        if !report(&r) || gone {
            break;
        }
    }
    node.stop().map(drop)
}

/// How often the run loop looks whether a terminating signal came.
const TERMINATE_POLL: Duration = Duration::from_millis(50);

/// How long a terminated node waits for the view without it before it goes anyway (its
/// peers then see a failure).
const LEAVE_WAIT: Duration = Duration::from_secs(3);

/// SIGTERM and SIGINT, caught: the node leaves the view and exits 0.
mod terminate {
    use std::sync::atomic::{AtomicI32, Ordering};

    /// The signal that came (0: none).
    static CAUGHT: AtomicI32 = AtomicI32::new(0);

    extern "C" fn on_signal(sig: libc::c_int) {
        // Async-signal-safe: one atomic store.
        CAUGHT.store(sig, Ordering::Release);
    }

    /// Catch SIGTERM and SIGINT from now on; `restart`: interrupted system calls restart
    /// (`SA_RESTART`), else they fail with EINTR (a waiter that must notice).
    pub fn catch(restart: bool) -> std::io::Result<()> {
        for sig in [libc::SIGTERM, libc::SIGINT] {
            // SAFETY: a zeroed sigaction with a handler that only stores an atomic, installed
            // for a signal whose default action would end the process.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                sa.sa_flags = if restart { libc::SA_RESTART } else { 0 };
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    /// Whether a terminating signal came.
    pub fn asked() -> bool {
        CAUGHT.load(Ordering::Acquire) != 0
    }

    /// The signal that came, if any (0: none).
    pub fn signal() -> i32 {
        CAUGHT.load(Ordering::Acquire)
    }
}

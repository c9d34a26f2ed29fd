//! A host that vanishes without a word is suspected within `NodeOptions::dead_after`.
//!
//! A killed process is easy: its kernel resets its connections. A host that loses power or its
//! link sends nothing at all, and by the kernel's defaults an idle connection to it stays up
//! for hours. Here the peer node runs in a network namespace of its own, reached over a veth
//! pair (two hosts on one machine); once the two nodes have talked, the peer's end of the link
//! goes down, so nothing it would send arrives and nothing is sent back: no reset, no ICMP.
//!
//! Needs root (network namespaces); without them the test says so and passes vacuously.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use weft::engine::reactor::NodeEvent;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::proto::Event;
use weft::transport::{bind, spawn, NodeHandle, NodeOptions, NodeSpec};
use weft::wire::handshake::JobKey;
use weft::NodeId;

/// How long a silent host may go unnoticed, in this test.
const DEAD_AFTER: Duration = Duration::from_secs(2);

/// Run `ip` with `args`; whether it succeeded.
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A network namespace with one end of a veth pair in it; deleted (with both ends) on drop.
struct Host {
    ns: String,
    near: String,
    far: String,
}

impl Host {
    /// Namespace `ns`, reached at `10.201.<net>.2` from `10.201.<net>.1`; `None` if this
    /// machine will not make one (not root, no `ip`).
    fn new(tag: &str, net: u8) -> Option<Host> {
        let id = std::process::id() % 100_000;
        let host = Host {
            ns: format!("weft-dh-{id}-{tag}"),
            near: format!("wdh{id}{tag}a"),
            far: format!("wdh{id}{tag}b"),
        };
        let (near_ip, far_ip) = (format!("10.201.{net}.1/24"), format!("10.201.{net}.2/24"));
        let (ns, near, far) = (&host.ns[..], &host.near[..], &host.far[..]);
        let made = ip(&["netns", "add", ns])
            && ip(&["link", "add", near, "type", "veth", "peer", "name", far])
            && ip(&["link", "set", far, "netns", ns])
            && ip(&["addr", "add", &near_ip, "dev", near])
            && ip(&["link", "set", near, "up"])
            && ip(&["-n", ns, "addr", "add", &far_ip, "dev", far])
            && ip(&["-n", ns, "link", "set", far, "up"])
            && ip(&["-n", ns, "link", "set", "lo", "up"]);
        made.then_some(host)
    }

    /// Run `f` on a thread inside the namespace (threads it starts stay inside).
    fn inside<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.ns);
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let file = std::fs::File::open(&path).expect("the namespace's file");
            // SAFETY: a valid namespace fd; only this thread changes namespace.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("the thread inside the namespace")
    }

    /// The host vanishes: its end of the link goes down, so nothing reaches it any more and
    /// nothing comes back.
    fn vanish(&self) {
        assert!(ip(&["-n", &self.ns, "link", "set", &self.far, "down"]));
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        ip(&["netns", "del", &self.ns]);
        ip(&["link", "del", &self.near]);
    }
}

fn opts(backend: Backend) -> NodeOptions {
    NodeOptions {
        pin: false,
        backend: Some(backend),
        reactor: weft::engine::ReactorOptions {
            wait: WaitMode::Block,
            dead_after: Some(DEAD_AFTER),
            ..Default::default()
        },
        ..NodeOptions::default()
    }
}

/// Wait until `want` is seen or `secs` pass; returns when, if it was seen.
fn wait_for(
    events: &Receiver<(NodeId, NodeEvent)>,
    secs: u64,
    want: &(NodeId, NodeEvent),
) -> Option<Instant> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if let Ok(e) = events.recv_timeout(Duration::from_millis(20)) {
            if &e == want {
                return Some(Instant::now());
            }
        }
    }
    None
}

/// `talking`: the host vanishes while the nodes exchange messages (data in flight, never
/// acknowledged: the user timeout's case) instead of after they are done (an idle
/// connection: keepalive's).
fn vanished_host_is_suspected(backend: Backend, tag: &str, net: u8, talking: bool) {
    let Some(host) = Host::new(tag, net) else {
        common::skip::skip("cannot make a network namespace here (needs root and `ip`)");
        return;
    };
    let (a, b) = (NodeId(1), NodeId(2));
    let key = JobKey::generate().unwrap();
    let (tx, events) = channel();
    let a_listener = bind(format!("10.201.{net}.1:0").parse().unwrap()).unwrap();
    let a_addr = a_listener.local_addr().unwrap();
    let (b_key, b_tx, b_opts) = (key.clone(), tx.clone(), opts(backend));
    let node_b: NodeHandle<PingPong> = host.inside(move || {
        let listener = bind(format!("10.201.{net}.2:0").parse().unwrap()).unwrap();
        let spec = NodeSpec {
            id: b,
            listener,
            peers: HashMap::from([(a, a_addr)]),
            key: b_key,
            core: None,
        };
        spawn(spec, &b_opts, PingPong::ponger(), b_tx).unwrap()
    });
    let spec = NodeSpec {
        id: a,
        listener: a_listener,
        peers: HashMap::from([(b, node_b.addr)]),
        key,
        core: None,
    };
    let rounds = if talking { u64::MAX / 2 } else { 20 };
    let pinger = PingPong::pinger(b, vec![32], rounds, 2);
    let _node_a = spawn(spec, &opts(backend), pinger, tx).unwrap();
    let talked = if talking {
        let up = wait_for(&events, 10, &(a, NodeEvent::Authenticated(b)));
        std::thread::sleep(Duration::from_millis(200));
        up
    } else {
        wait_for(&events, 10, &(a, NodeEvent::Protocol(Event::Done)))
    };
    assert!(
        talked.is_some(),
        "{backend:?}: the nodes talked across the link"
    );
    let gone = Instant::now();
    host.vanish();
    let seen = wait_for(
        &events,
        3 * DEAD_AFTER.as_secs() + 4,
        &(a, NodeEvent::Suspect(b)),
    );
    let after = seen.map(|t| t - gone);
    eprintln!("{backend:?}, talking {talking}: suspected {after:?} after its host vanished");
    assert!(
        after.is_some_and(|d| d >= DEAD_AFTER / 2 && d <= 2 * DEAD_AFTER),
        "{backend:?}, talking {talking}: the silent host must be suspected within about \
         {DEAD_AFTER:?}, by silence and not by a reset; after {after:?}"
    );
    drop(node_b);
}

#[test]
fn a_vanished_host_is_suspected_within_dead_after() {
    for talking in [false, true] {
        // A subnet of this run's own, so that two test runs on one machine do not meet.
        let net = (std::process::id() % 125 * 2) as u8;
        vanished_host_is_suspected(Backend::Poll, "p", net, talking);
        vanished_host_is_suspected(Backend::Uring, "u", net + 1, talking);
    }
}

//! One process hosts more nodes' sockets than its descriptor limit allows once each reactor
//! takes a descriptor table of its own (`ReactorOptions::own_descriptors`): the BMG of a job
//! that does not fit under the limit converges with every finger right, a killed node's
//! listener stops listening, no reactor keeps the caller's pipes open, and a sandbox that
//! refuses `unshare` is named. A test file of its own because it lowers this process's hard
//! limit, which it cannot raise again.

mod common;

use std::io::ErrorKind;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;
use weft::bench::bmg::{self, BmgBenchConfig};
use weft::bench::route::plan_descriptors;
use weft::bench::stabilize::job_options;
use weft::engine::{Backend, WaitMode};
use weft::proto::ping::PingPong;
use weft::sim::tree::TreeKind;
use weft::transport::{Cluster, NodeOptions};

/// The limit this process runs under: 64 BMG nodes need about 830 descriptors, 450 on each of
/// two reactors.
const LIMIT: u64 = 700;

/// Drop `CAP_SYS_RESOURCE` from this thread's capabilities, so that the limit lowered below
/// stays lowered (a CI runner's root may raise it again, and the plan would then never need
/// tables of their own).
fn drop_cap_sys_resource() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_SYS_RESOURCE: u32 = 24;
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // SAFETY: capget and capset read and write the header and the two data structs given.
    unsafe {
        assert_eq!(libc::syscall(libc::SYS_capget, &mut h, d.as_mut_ptr()), 0);
        let bit = 1u32 << CAP_SYS_RESOURCE;
        d[0].effective &= !bit;
        d[0].permitted &= !bit;
        assert_eq!(libc::syscall(libc::SYS_capset, &mut h, d.as_ptr()), 0);
    }
}

/// Lower this process's soft and hard limits on open descriptors to `n`.
fn limit_descriptors(n: u64) {
    let lim = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

fn opts(backend: Option<Backend>, reactors: usize) -> NodeOptions {
    NodeOptions {
        reactors: Some(reactors),
        pin: false,
        ..job_options(WaitMode::Block, backend)
    }
}

#[test]
fn reactors_with_tables_of_their_own_host_more_than_the_process_limit() {
    drop_cap_sys_resource();
    limit_descriptors(LIMIT);

    // One reactor cannot hold the job; two with tables of their own can.
    let e = plan_descriptors(64, &opts(None, 1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("descriptors"), "{e}");
    let planned = plan_descriptors(64, &opts(None, 2)).unwrap();
    assert!(planned.reactor.own_descriptors);

    for backend in Backend::ALL {
        if backend == Backend::Uring && weft::engine::uring_unavailable().is_some() {
            common::skip::skip("io_uring unavailable");
            continue;
        }
        bmg_past_the_limit_on(backend);
        a_killed_node_stops_listening_on(backend);
        pipes_stay_the_callers_on(backend);
    }
}

/// The BMG of 64 in-process nodes, more than the limit allows in one table, converges with
/// every process's fingers right.
fn bmg_past_the_limit_on(backend: Backend) {
    let cfg = BmgBenchConfig {
        tree: TreeKind::Binomial,
        degree: 0,
        seed: 1,
        period: Duration::from_micros(1000),
        backoff: 5,
        settle: Duration::from_millis(50),
        opts: opts(Some(backend), 2),
        timeout: Duration::from_secs(60),
        repeat: 1,
        procs: None,
    };
    let row = bmg::run(64, &cfg).unwrap();
    assert!(row.converged, "{backend}: {row:?}");
    assert_eq!(row.wrong, 0, "{backend}: {row:?}");
}

/// A node killed on a reactor with a table of its own closes its listener: the caller's copy
/// is gone too, so a dial is refused instead of waiting in a backlog nobody accepts from.
fn a_killed_node_stops_listening_on(backend: Backend) {
    let mut o = opts(Some(backend), 2);
    o.reactor.own_descriptors = true;
    let mut c = Cluster::start(4, o, |_, _| PingPong::ponger()).unwrap();
    let addr = c.nodes[1].addr;
    TcpStream::connect(addr).expect("a live node listens");
    c.nodes[1].stop().unwrap();
    let e = TcpStream::connect(addr).expect_err("a killed node still listens");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{backend}: {e}");
    c.shutdown().unwrap();
}

/// A sandbox that refuses `unshare` (Docker's default seccomp profile, without
/// CAP_SYS_ADMIN) fails the start with an error that names the call, not a bare EPERM.
#[test]
fn a_refused_unshare_is_named() {
    let e = std::thread::spawn(|| {
        common::seccomp::refuse_in_this_thread(libc::SYS_unshare, libc::EPERM).unwrap();
        let mut o = opts(Some(Backend::Poll), 2);
        o.reactor.own_descriptors = true;
        Cluster::start(4, o, |_, _| PingPong::ponger()).map(|_| ())
    })
    .join()
    .unwrap()
    .expect_err("unshare is refused")
    .to_string();
    assert!(
        e.contains("unshare(CLONE_FILES)") && e.contains("descriptor table"),
        "{e}"
    );
}

/// A reactor's table, a copy of the process's, does not keep the caller's pipes open: a child
/// whose input the caller closes sees its end while the reactors run.
fn pipes_stay_the_callers_on(backend: Backend) {
    let mut child = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run cat");
    let mut o = opts(Some(backend), 2);
    o.reactor.own_descriptors = true;
    let c = Cluster::start(4, o, |_, _| PingPong::ponger()).unwrap();
    drop(child.stdin.take());
    let (tx, rx) = channel();
    std::thread::spawn(move || tx.send(child.wait()));
    let ended = rx.recv_timeout(Duration::from_secs(10));
    assert!(
        matches!(ended, Ok(Ok(_))),
        "{backend}: cat never saw its input end: a reactor holds the pipe"
    );
    c.shutdown().unwrap();
}

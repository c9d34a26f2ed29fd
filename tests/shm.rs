//! Shared-memory links between real processes (`engine::link::shm`): the peer is this test
//! binary run again as a child (`peer_process`, chosen by `WEFT_SHM_PEER`), so every test
//! crosses a real process boundary, a real memfd passed with SCM_RIGHTS, and a real pidfd.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use weft::engine::link::shm::blocking::{Ended, Wait};
use weft::engine::link::shm::{self, Listener, ShmError};
use weft::wire::handshake::{Identity, JobKey};
use weft::NodeId;

const T: Duration = Duration::from_secs(10);

fn identity(job: u64, node: u64, key: u8) -> Identity {
    Identity::new(job, NodeId(node), JobKey::from_bytes([key; 32]))
}

/// This binary again, running only `peer_process` with `role` (and the job in `job`).
fn spawn_peer(role: &str, job: u64) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "peer_process", "--nocapture", "--test-threads=1"])
        .env("WEFT_SHM_PEER", role)
        .env("WEFT_SHM_JOB", job.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn peer");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    // The peer says when it listens: the event the dial waits for, not a sleep.
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("peer output") > 0,
            "peer ended before it listened"
        );
        if line.trim().ends_with("listening") {
            break;
        }
    }
    (child, out)
}

/// A job id no other test of this run uses (abstract addresses are per network namespace).
fn job(n: u64) -> u64 {
    (std::process::id() as u64) << 8 | n
}

/// How many mappings of weft's segments this process holds.
/// One link-making test at a time in this process: [`segments_mapped`] counts every test's
/// mappings, so a test that drops its link while another counts would move that count (seen
/// in CI: a segment unmapped between the count before a refused dial and the count after).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LINKS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LINKS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn segments_mapped() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("maps")
        .lines()
        .filter(|l| l.contains("memfd:weft-shm"))
        .count()
}

/// The peer side: node 1 of the job, listening; `echo` sends back everything it receives
/// until its peer goes; `refuse` reports how its one accept ended and whether it mapped
/// anything.
#[test]
fn peer_process() {
    let Ok(role) = std::env::var("WEFT_SHM_PEER") else {
        return; // Run as a test of its own: nothing to do.
    };
    let job: u64 = std::env::var("WEFT_SHM_JOB")
        .expect("job")
        .parse()
        .expect("job id");
    let node = if role == "dial" { 0 } else { 1 };
    let me = identity(job, node, 7);
    let listener = Listener::bind(&me).expect("bind");
    println!("listening");
    match role.as_str() {
        "dial" => {
            let mut link = shm::dial(&me, NodeId(1), 4096, T).expect("dial");
            println!("linked");
            let mut buf = vec![0u8; 4096];
            loop {
                link.send_all(&[9u8; 1000], Wait::Sleep, T).expect("send");
                link.recv_some(&mut buf, Wait::Sleep, T).expect("echo");
            }
        }
        "echo" => {
            let mut link = listener.accept(&me, T).expect("accept");
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match link.recv_some(&mut buf, Wait::Sleep, Duration::from_secs(60)) {
                    Ok(n) => link.send_all(&buf[..n], Wait::Sleep, T).expect("echo"),
                    Err(Ended::PeerGone) => break,
                    Err(e) => panic!("echo: {e}"),
                }
            }
            println!("peer gone");
        }
        "refuse" => {
            let r = listener.accept(&me, T);
            println!(
                "accept: {} mapped: {}",
                match r {
                    Ok(_) => "ok".to_string(),
                    Err(ShmError::Handshake(e)) => format!("refused ({e})"),
                    Err(e) => format!("other ({e})"),
                },
                segments_mapped()
            );
        }
        _ => panic!("unknown role {role}"),
    }
}

#[test]
fn a_link_to_another_process_carries_bytes_in_order_both_ways_and_pushes_back() {
    let _one = one_at_a_time();
    let job = job(1);
    let (mut child, mut out) = spawn_peer("echo", job);
    // A ring of one page: a mebibyte wraps it 256 times, and the echo's full ring pushes back
    // on us while we still send (a reader that does not read stalls its writer, never loses).
    let mut link = shm::dial(&identity(job, 0, 7), NodeId(1), 4096, T).expect("dial");
    assert_eq!(link.peer.id, NodeId(1));
    assert_eq!(link.pid, child.id());
    for wait in [Wait::Sleep, Wait::Spin] {
        let data: Vec<u8> = (0..(1u32 << 20))
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let mut back = Vec::with_capacity(data.len());
        let mut buf = vec![0u8; 3000];
        let mut sent = 0;
        while back.len() < data.len() {
            if sent < data.len() {
                let k = (data.len() - sent).min(1500);
                let n = link.writer.write(&data[sent..sent + k]).expect("write");
                sent += n;
                if n > 0 && link.writer.must_ring() {
                    link.peer_bell.ring();
                }
                if n > 0 {
                    continue;
                }
            }
            let n = link.recv_some(&mut buf, wait, T).expect("echo");
            back.extend_from_slice(&buf[..n]);
        }
        assert!(back == data, "the echo differs ({wait:?})");
    }
    drop(link);
    let mut line = String::new();
    out.read_line(&mut line).expect("peer output");
    assert_eq!(
        line.trim(),
        "peer gone",
        "closing the link ends it at the peer"
    );
    assert!(child.wait().expect("wait").success());
}

#[test]
fn a_killed_peer_process_is_seen_through_its_pidfd() {
    let _one = one_at_a_time();
    let job = job(2);
    let (mut child, _out) = spawn_peer("echo", job);
    let mut link = shm::dial(&identity(job, 0, 7), NodeId(1), 4096, T).expect("dial");
    link.send_all(b"ping", Wait::Sleep, T).expect("send");
    let mut buf = [0u8; 4];
    assert_eq!(link.recv_some(&mut buf, Wait::Sleep, T).expect("echo"), 4);
    assert!(!link.peer_gone());
    // SAFETY: plain call on our child's pid.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) },
        0
    );
    // The pidfd becomes readable when the process is gone: wait on it, not on a clock.
    let mut p = libc::pollfd {
        fd: link.pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, 10_000) };
    assert_eq!(r, 1, "the pidfd of a killed peer did not become readable");
    assert!(link.peer_gone());
    let e = link.recv_some(&mut buf, Wait::Sleep, T).unwrap_err();
    assert!(matches!(e, Ended::PeerGone), "{e}");
    // Its segment is still mapped here and stays valid: no SIGBUS on touching it.
    link.send_all(&[0u8; 100], Wait::Spin, T)
        .expect("the ring outlives its peer");
    child.wait().expect("reap");
}

#[test]
fn a_wrong_job_key_is_refused_before_any_segment_is_mapped() {
    let _one = one_at_a_time();
    let job = job(3);
    let (mut child, mut out) = spawn_peer("refuse", job);
    let before = segments_mapped();
    // At the peer's address (listed in /proc/net/unix for anyone), with another key.
    let at = shm::address(&identity(job, 0, 7), NodeId(1)).expect("address");
    let e = shm::dial_at(&at, &identity(job, 0, 8), NodeId(1), 4096, T).unwrap_err();
    assert!(
        matches!(e, ShmError::Handshake(_) | ShmError::Io(_)),
        "a wrong key must fail the handshake: {e}"
    );
    assert_eq!(
        segments_mapped(),
        before,
        "the dialer made a segment for a stranger"
    );
    let mut line = String::new();
    out.read_line(&mut line).expect("peer output");
    assert!(line.starts_with("accept: refused"), "{line}");
    assert!(line.trim().ends_with("mapped: 0"), "{line}");
    assert!(child.wait().expect("wait").success());
}

#[test]
fn a_node_nobody_listens_as_is_not_reached() {
    let _one = one_at_a_time();
    let e = shm::dial(&identity(job(4), 0, 7), NodeId(9), 4096, T).unwrap_err();
    match e {
        ShmError::Io(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            ),
            "{e}"
        ),
        e => panic!("{e}"),
    }
}

/// After `kill -9` of both ends at once, with a link up and bytes in flight, nothing of weft's
/// is left where segments and sockets usually are.
#[test]
fn killed_processes_leave_nothing_behind() {
    let _one = one_at_a_time();
    let debris = || -> Vec<String> {
        let mut names = Vec::new();
        for dir in ["/dev/shm", "/tmp", "/run"] {
            if let Ok(rd) = std::fs::read_dir(dir) {
                for e in rd.flatten() {
                    let n = e.file_name().to_string_lossy().into_owned();
                    if n.contains("weft-shm") {
                        names.push(format!("{dir}/{n}"));
                    }
                }
            }
        }
        let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
        names.extend(
            unix.lines()
                .filter(|l| l.contains(&format!("weft-shm.{:x}.", job(5))))
                .map(str::to_string),
        );
        names
    };
    let before = debris();
    let (mut echo, _a) = spawn_peer("echo", job(5));
    let (mut dialer, mut out) = spawn_peer("dial", job(5));
    let mut line = String::new();
    out.read_line(&mut line).expect("dialer output");
    assert_eq!(line.trim(), "linked");
    // Both ends die at once with bytes in flight, nothing closed in order.
    for c in [&echo, &dialer] {
        // SAFETY: plain call on our child's pid.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGKILL) };
    }
    echo.wait().expect("reap");
    dialer.wait().expect("reap");
    assert_eq!(
        debris(),
        before,
        "a killed job left something of weft's behind"
    );
}

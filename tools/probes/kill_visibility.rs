//! How soon a peer sees a SIGKILLed process's connection end, by what the dead process's
//! io_uring had armed on the socket. A child connects to us, arms one kind of request (or
//! none), says it is ready, and is killed; we time the kill to the end of our read.
//!
//! With a request armed, the ring holds a reference to the socket. At exit the process closes
//! its descriptors at once, but the ring's requests are cancelled later, by the ring's exit
//! work in a kernel worker, whose last reference to the socket is dropped through the delayed
//! `fput` (a jiffy later), after deferred task work that falls back to a delayed work item of
//! its own: the socket closes, and its peer learns of the death, milliseconds late.
//!
//! With weft's guard (`engine::guard`, a process sharing the descriptor table that shuts the
//! sockets down when its parent dies), the death shows as soon as with no ring at all.
//!
//! `cargo run --release --example kill_visibility -- [trials]`

use io_uring::{opcode, types, IoUring};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

const VARIANTS: &[&str] = &[
    "none",
    "recv-defer",
    "recv-coop",
    "poll-defer",
    "recv-defer+guard",
];

fn child(variant: &str, addr: &str) -> ! {
    if variant.ends_with("+guard") {
        weft::engine::guard::guard_sockets().expect("guard");
    }
    let mut s = TcpStream::connect(addr).expect("connect");
    let fd = s.as_raw_fd();
    let mut buf = vec![0u8; 4096];
    let ring: Option<IoUring> = match variant {
        "none" => None,
        "recv-coop" => Some(
            IoUring::builder()
                .setup_coop_taskrun()
                .setup_taskrun_flag()
                .build(8)
                .expect("ring"),
        ),
        _ => Some(
            IoUring::builder()
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_taskrun_flag()
                .build(8)
                .expect("ring"),
        ),
    };
    if let Some(mut ring) = ring {
        let sqe = if variant.starts_with("poll") {
            opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
                .multi(true)
                .build()
        } else {
            opcode::Recv::new(types::Fd(fd), buf.as_mut_ptr(), buf.len() as u32).build()
        };
        // SAFETY: the buffer lives until the process dies, which is how this ends.
        unsafe { ring.submission().push(&sqe.user_data(1)).expect("push") };
        ring.submit().expect("submit");
        std::mem::forget(ring);
    }
    s.write_all(b"R").expect("ready");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        child(&args[2], &args[3]);
    }
    let trials: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    println!("kill -> the peer's read ends, ms (p50, max over {trials} trials)");
    for variant in VARIANTS {
        let mut took = Vec::new();
        for _ in 0..trials {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let mut c = Command::new(&args[0])
                .args(["child", variant, &addr])
                .spawn()
                .unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            let t0 = Instant::now();
            c.kill().unwrap();
            let mut rest = [0u8; 64];
            let _ = s.read(&mut rest);
            took.push(t0.elapsed().as_secs_f64() * 1e3);
            let _ = c.wait();
        }
        took.sort_by(f64::total_cmp);
        println!(
            "{variant:>36}  {:6.2}  {:6.2}",
            took[took.len() / 2],
            took[took.len() - 1]
        );
    }
}

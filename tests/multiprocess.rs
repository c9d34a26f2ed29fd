//! Membership across real OS processes: every node is a `weft node` process on loopback, the
//! victim is killed with SIGKILL, and every survivor must install the same view, exactly the
//! survivors, with the root reporting the stabilization (`transport::launch`).

mod common;

use std::process::Command;
use std::time::Duration;
use weft::bench::scenario::Fail;
use weft::bench::stabilize::{job_options, run, BenchConfig};
use weft::engine::{Backend, WaitMode};
use weft::proto::membership::TreeMode;

#[test]
fn killed_processes_are_excluded_by_every_survivor() {
    for backend in Backend::ALL {
        for fail in [Fail::Inner, Fail::Root] {
            let opts = job_options(WaitMode::Block, Some(backend));
            let cfg = BenchConfig {
                timeout: Duration::from_secs(20),
                procs: Some(env!("CARGO_BIN_EXE_weft").into()),
                ..BenchConfig::new(8, 4, TreeMode::Patch, fail.clone(), 11, opts)
            };
            let mut trials = 0;
            let r = run(&cfg, 2, |_, t| {
                assert!(t.views_agree, "{backend} {fail}: {t:?}");
                assert_eq!(t.victims.len(), 1);
                trials += 1;
            })
            .unwrap_or_else(|e| panic!("{backend} {fail}: {e}"));
            assert_eq!(trials, 2);
            assert!(r.views_agree && r.ts_p50_us > 0.0, "{r:?}");
            // What the processes said they ran on (their `started` reports).
            assert_eq!(r.backend, backend.to_string(), "{r:?}");
        }
    }
}

#[test]
fn a_node_without_a_key_refuses_to_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "node",
            "--id",
            "0",
            "--nodes",
            "2",
            "--peers",
            "1=127.0.0.1:9",
        ])
        .env_remove("WEFT_JOB_KEY")
        .output()
        .expect("run weft");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("WEFT_JOB_KEY"));
}

/// A node process killed on io_uring is seen dead as soon as one on epoll: its sockets are
/// guarded (`engine::guard`), so they end at its death, not when the ring's exit work lets
/// go of them 5–10 ms later. Measured against the unguarded control (`WEFT_GUARD=0`) in the
/// same run: the guarded detection must take less than half as long, over the medians of
/// several kills.
#[test]
fn a_killed_node_on_io_uring_is_seen_dead_at_once() {
    if let Some(why) = weft::engine::uring_unavailable() {
        common::skip::skip(&format!("io_uring unavailable ({why})"));
        return;
    }
    let median = |guard: bool| {
        let mut took: Vec<u64> = (0..7).map(|_| kill_to_suspicion(guard)).collect();
        took.sort_unstable();
        took[took.len() / 2]
    };
    let (guarded, control) = (median(true), median(false));
    eprintln!("kill to suspicion, median: guarded {guarded} ns, unguarded {control} ns");
    assert!(
        guarded * 2 < control,
        "kill to suspicion, median ns: guarded {guarded}, unguarded {control}"
    );
}

/// Start a two-node job of `weft node` processes on io_uring, kill node 1 with SIGKILL, and
/// return how long node 0 took to suspect it (both stamp CLOCK_MONOTONIC).
fn kill_to_suspicion(guard: bool) -> u64 {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let key = weft::transport::JobKey::generate().unwrap();
    let mut children = Vec::new();
    let mut addrs = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel::<(u64, serde_json::Value)>();
    for id in 0..2u64 {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args([
                "node",
                "--id",
                &id.to_string(),
                "--nodes",
                "2",
                "--peers-stdin",
            ])
            // The guard is for sockets: over TCP (a link's end is the pidfd's, `shm_peers.rs`).
            .args([
                "--backend",
                "uring",
                "--wait",
                "block",
                "--transport",
                "tcp",
            ])
            .env("WEFT_JOB_KEY", key.to_hex())
            .env("WEFT_GUARD", if guard { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run weft node");
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        addrs.push(format!(
            "{id}={}",
            weft::bootstrap::stdio::parse_listening(first.trim()).unwrap()
        ));
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&l) {
                    let _ = tx.send((id, v));
                }
            }
        });
        children.push(c);
    }
    for c in &mut children {
        writeln!(c.stdin.as_mut().unwrap(), "{}", addrs.join(",")).unwrap();
    }
    let next = || {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a report from the nodes")
    };
    let mut up = 0;
    while up < 2 {
        let (_, r) = next();
        up += usize::from(r["kind"] == "authenticated");
    }
    let killed_at = weft::engine::monotonic_ns();
    children[1].kill().unwrap();
    let _ = children[1].wait();
    let seen = loop {
        let (who, r) = next();
        if who == 0 && r["kind"] == "suspect" && r["peer"] == 1 {
            break r["mono_ns"].as_u64().unwrap();
        }
    };
    let _ = children[0].kill();
    let _ = children[0].wait();
    seen.saturating_sub(killed_at)
}

/// A node process's guard shuts down only the node's own sockets: one its launcher leaked
/// into it (inherited without close-on-exec) still works after the node is killed and its
/// guard is gone.
#[test]
fn the_guard_leaves_inherited_sockets_alone() {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    if weft::engine::uring_unavailable().is_some() {
        common::skip::skip("io_uring unavailable");
        return;
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut leaked = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut ours, _) = l.accept().unwrap();
    // Leak it: the child inherits it.
    // SAFETY: fcntl on an fd we own, clearing only its close-on-exec flag.
    unsafe { libc::fcntl(leaked.as_raw_fd(), libc::F_SETFD, 0) };
    let key = weft::transport::JobKey::generate().unwrap();
    let (mut child, _addr, _lines) = common::node_process::start_node(&key, Some("uring"));
    let guard = children_of(child.id());
    assert_eq!(guard.len(), 1, "one guard process: {guard:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    // The guard shuts down what it shuts down, then exits: wait for it to be gone.
    let proc_dir = format!("/proc/{}", guard[0]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&proc_dir).exists()
        && std::fs::read_to_string(format!("{proc_dir}/stat")).is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the guard did not exit"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    leaked.write_all(b"still").unwrap();
    let mut got = [0u8; 5];
    ours.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    ours.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still");
    ours.write_all(b"back").unwrap();
    let mut back = [0u8; 4];
    leaked.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"back");
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: the fields after the last ')'.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        if after
            .split_whitespace()
            .nth(1)
            .and_then(|pp| pp.parse::<u32>().ok())
            == Some(pid)
        {
            out.push(p);
        }
    }
    out
}

/// `bench stabilize --procs` stopped by SIGINT, SIGTERM or SIGKILL takes its node processes
/// with it (they die with their launcher), instead of leaving them listening.
#[test]
fn node_processes_die_with_their_bench() {
    use std::os::unix::process::CommandExt;
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGKILL] {
        let mut bench = Command::new(env!("CARGO_BIN_EXE_weft"));
        // A shell's background job inherits SIGINT ignored (POSIX, without job control), and
        // so would the bench: give it the default ends, which this test is about.
        // SAFETY: signal() is async-signal-safe, and the child only resets dispositions.
        unsafe {
            bench.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let mut bench = bench
            .args([
                "bench",
                "stabilize",
                "--procs",
                "--nodes",
                "6",
                "--repeat",
                "100000",
            ])
            .args(["--backend", "poll", "--json"])
            .env_remove("WEFT_BACKEND")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let nodes = loop {
            let c = children_of(bench.id());
            if c.len() >= 6 {
                break c;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the bench started no nodes"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        // SAFETY: kill of our own child's pid.
        unsafe { libc::kill(bench.id() as libc::pid_t, signal) };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while bench.try_wait().ok().flatten().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = bench.kill();
                panic!("signal {signal}: the bench did not end");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let alive: Vec<u32> = nodes
                .iter()
                .copied()
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/stat"))
                        .is_ok_and(|s| !s.contains(") Z "))
                })
                .collect();
            if alive.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "signal {signal}: node processes {alive:?} outlived their bench"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A node process killed while `bench bmg --procs` starts its job ends the bench with an
/// error that names the node and how it ended, not a bare "Broken pipe".
#[test]
fn a_bmg_node_killed_at_the_start_is_named() {
    let bench = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "bmg", "--procs", "--nodes-list", "64"])
        .env_remove("WEFT_BACKEND")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // The first node process up: its id is on its command line.
    let (victim, id) = loop {
        let found = children_of(bench.id()).into_iter().find_map(|p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let at = args.iter().position(|a| a == "--id")?;
            Some((p, args.get(at + 1)?.clone()))
        });
        if let Some(f) = found {
            break f;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the bench started no nodes"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    // SAFETY: kill of our own child's child, whose pid we just read.
    unsafe { libc::kill(victim as libc::pid_t, libc::SIGKILL) };
    let out = bench.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("node {id}")) && err.contains("SIGKILL"),
        "{err}"
    );
}

//! Membership across real OS processes: every node is a `weft node` process on loopback, one
//! is killed with SIGKILL, and every survivor must install the same view, exactly the
//! survivors, with the root reporting the stabilization.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const KEY: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct Job {
    children: Vec<Option<Child>>,
    lines: Receiver<(u64, serde_json::Value)>,
}

impl Drop for Job {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Start `n` node processes and give each the others' addresses.
fn start(n: u64, backend: &str) -> Job {
    let mut children = Vec::new();
    let mut addrs = Vec::new();
    let (tx, rx) = channel();
    for id in 0..n {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args([
                "node",
                "--id",
                &id.to_string(),
                "--nodes",
                &n.to_string(),
                "--peers-stdin",
                "--backend",
                backend,
            ])
            .env("WEFT_JOB_KEY", KEY)
            .env_remove("WEFT_BACKEND")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start weft node");
        let mut out = BufReader::new(c.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("listening line");
        let v: serde_json::Value = serde_json::from_str(&first).expect("JSON");
        addrs.push(v["listening"].as_str().expect("address").to_string());
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    if tx.send((id, v)).is_err() {
                        break;
                    }
                }
            }
        });
        children.push(Some(c));
    }
    let peers: Vec<String> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{i}={a}"))
        .collect();
    for c in children.iter_mut().flatten() {
        let stdin = c.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{}", peers.join(",")).expect("send peers");
    }
    Job {
        children,
        lines: rx,
    }
}

#[test]
fn a_killed_process_is_excluded_by_every_survivor() {
    for backend in ["poll", "uring"] {
        let n = 8;
        let mut job = start(n, backend);
        // Radix 4 over 8: 0 -> 1..4, 1 -> 5..7. Wait until node 1 is connected to its parent
        // and its children, then kill it (an inner node).
        let victim = 1u64;
        let mut seen = std::collections::HashSet::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.len() < 4 {
            let left = deadline.saturating_duration_since(Instant::now());
            let (id, v) = job.lines.recv_timeout(left).expect("tree connections");
            if id == victim && v["kind"] == "authenticated" {
                seen.insert(v["peer"].as_u64().unwrap_or(u64::MAX));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        let mut c = job.children[victim as usize].take().expect("victim");
        c.kill().expect("SIGKILL");
        c.wait().expect("reaped");
        let survivors: Vec<u64> = (0..n).filter(|&i| i != victim).collect();
        let mut last_view = std::collections::HashMap::new();
        let mut stabilized = false;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(stabilized
            && survivors
                .iter()
                .all(|s| last_view.get(s) == Some(&survivors)))
        {
            let left = deadline.saturating_duration_since(Instant::now());
            let (id, v) = job
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("{backend}: views {last_view:?}"));
            match v["kind"].as_str() {
                Some("view") => {
                    let view: Vec<u64> = serde_json::from_value(v["view"].clone()).unwrap();
                    last_view.insert(id, view);
                }
                Some("stabilized") => {
                    stabilized |= last_view.get(&id) == Some(&survivors);
                }
                _ => {}
            }
        }
    }
}

#[test]
fn a_node_without_a_key_refuses_to_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["node", "--id", "0", "--nodes", "2", "--peers", ""])
        .env_remove("WEFT_JOB_KEY")
        .output()
        .expect("run weft");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("WEFT_JOB_KEY"));
}

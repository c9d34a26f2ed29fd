//! Start-up is not a failure: `weft node` processes given a fixed `--peers` list and started
//! one after another (as a shell loop or a launcher does) form one job, instead of each
//! excluding the ones that were not listening yet when it dialed them.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use weft::wire::handshake::JobKey;

/// One `weft node` of a job of `n` whose members listen on `ports`, with its report lines.
fn start(id: usize, ports: &[u16], key: &JobKey, extra: &[&str]) -> (Child, Receiver<String>) {
    let peers: Vec<String> = (0..ports.len())
        .filter(|&i| i != id)
        .map(|i| format!("{i}=127.0.0.1:{}", ports[i]))
        .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args([
            "node",
            "--id",
            &id.to_string(),
            "--nodes",
            &ports.len().to_string(),
        ])
        .args(["--listen", &format!("127.0.0.1:{}", ports[id])])
        .args(["--peers", &peers.join(",")])
        .args(extra)
        .env("WEFT_JOB_KEY", key.to_hex())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run weft node");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Free loopback ports (bound and let go: another process could take one meanwhile, which
/// would fail the start loudly, not pass the test).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// Wait until n0 (whose reports `rx` gives) has authenticated `others` distinct peers: the
/// job has formed.
fn n0_hears_all(rx: &Receiver<String>, others: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut heard = std::collections::HashSet::new();
    read_until(rx, deadline, |v| {
        if v["kind"] == "authenticated" {
            heard.insert(v["peer"].as_u64().unwrap());
        }
        heard.len() == others
    });
    assert_eq!(heard.len(), others, "n0 never heard from everyone");
}

/// The report lines of `rx` until `until` says stop or `deadline` passes.
fn read_until(
    rx: &Receiver<String>,
    deadline: Instant,
    mut until: impl FnMut(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let stop = until(&v);
        seen.push(v);
        if stop {
            break;
        }
    }
    seen
}

/// Five nodes started last first, each once the one before it listens: every early dial to a
/// later-started member is refused. Each node must then reach its tree neighbors without
/// suspecting anyone, and a kill afterwards must give one view of the four survivors at every
/// survivor. With the grace off (`--startup-timeout-ms 0`) the first started suspect the
/// others at once: the control.
#[test]
fn nodes_started_apart_form_one_job() {
    let key = JobKey::generate().unwrap();
    for (grace, forms) in [(None, true), (Some("0"), false)] {
        let ports = free_ports(5);
        let extra: Vec<&str> = match grace {
            Some(ms) => vec!["--startup-timeout-ms", ms],
            None => vec![],
        };
        let mut nodes: Vec<Option<(Child, Receiver<String>)>> = (0..5).map(|_| None).collect();
        for id in (0..5).rev() {
            let (child, rx) = start(id, &ports, &key, &extra);
            let first = rx.recv_timeout(Duration::from_secs(10)).expect("listening");
            assert!(first.contains("listening"), "{first}");
            nodes[id] = Some((child, rx));
        }
        // n0, started last, hears from its four children: the job has formed.
        let deadline = Instant::now() + Duration::from_secs(10);
        let (_, rx0) = nodes[0].as_ref().unwrap();
        let mut children = std::collections::HashSet::new();
        let seen = read_until(rx0, deadline, |v| {
            if v["kind"] == "authenticated" {
                children.insert(v["peer"].as_u64().unwrap());
            }
            children.len() == 4 || v["kind"] == "detected"
        });
        let suspected: Vec<_> = nodes
            .iter()
            .flatten()
            .flat_map(|(_, rx)| rx.try_iter().collect::<Vec<_>>())
            .chain(seen.iter().map(|v| v.to_string()))
            .filter(|l| l.contains("\"detected\""))
            .collect();
        eprintln!(
            "grace {grace:?}: n0 saw {} lines, suspicions {}",
            seen.len(),
            suspected.len()
        );
        if !forms {
            assert!(
                !suspected.is_empty(),
                "without the grace, early refused dials are suspicions"
            );
            for (mut c, _) in nodes.into_iter().flatten() {
                let _ = c.kill();
                let _ = c.wait();
            }
            continue;
        }
        assert_eq!(children.len(), 4, "n0 reached by its children: {seen:?}");
        assert!(suspected.is_empty(), "nobody failed yet: {suspected:?}");
        // Kill n3: the four survivors agree on a view without it.
        let (mut victim, _) = nodes[3].take().unwrap();
        victim.kill().unwrap();
        victim.wait().unwrap();
        let want = serde_json::json!([0, 1, 2, 4]);
        for (id, node) in nodes.iter().enumerate() {
            let Some((_, rx)) = node else { continue };
            let deadline = Instant::now() + Duration::from_secs(10);
            let seen = read_until(rx, deadline, |v| v["kind"] == "view" && v["view"] == want);
            assert!(
                seen.iter().any(|v| v["view"] == want),
                "n{id} never installed {want}: {seen:?}"
            );
        }
        for (mut c, _) in nodes.into_iter().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Eight nodes started 200 ms apart, first to last, with ring heartbeats on (100 ms, suspected
/// after 2.5 periods): n0 watches n7, which starts 1.4 s after it, and each exclusion moved the
/// ring on to the next process not started yet (34 views lacking a process before anything
/// failed). Within the start-up grace a peer never heard from is not suspected: no node
/// detects anyone or installs a view lacking a process until one is killed, and then all
/// seven survivors install the view without it.
#[test]
fn heartbeats_do_not_exclude_processes_that_have_not_started_yet() {
    let key = JobKey::generate().unwrap();
    let ports = free_ports(8);
    let mut nodes: Vec<(Child, Receiver<String>)> = Vec::new();
    for id in 0..8 {
        let (child, rx) = start(id, &ports, &key, &[]);
        let first = rx.recv_timeout(Duration::from_secs(10)).expect("listening");
        assert!(first.contains("listening"), "{first}");
        nodes.push((child, rx));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Every node has heard from its ring predecessor once n0 (whose predecessor came last)
    // is reached by n7: until then nobody may be suspected.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen: Vec<Vec<serde_json::Value>> = vec![Vec::new(); 8];
    seen[0] = read_until(&nodes[0].1, deadline, |v| {
        v["kind"] == "authenticated" && v["peer"] == 7
    });
    assert!(
        seen[0].iter().any(|v| v["peer"] == 7),
        "n7 never reached n0: {:?}",
        seen[0]
    );
    // A further three heartbeat deadlines for a late suspicion to show.
    std::thread::sleep(Duration::from_millis(800));
    let all = serde_json::json!([0, 1, 2, 3, 4, 5, 6, 7]);
    for (id, (_, rx)) in nodes.iter().enumerate() {
        seen[id].extend(rx.try_iter().map(|l| serde_json::from_str(&l).unwrap()));
        let wrong: Vec<_> = seen[id]
            .iter()
            .filter(|v| v["kind"] == "detected" || (v["kind"] == "view" && v["view"] != all))
            .collect();
        assert!(wrong.is_empty(), "n{id} before any failure: {wrong:?}");
    }
    // The detectors still work: kill n3.
    let (mut victim, _) = nodes.remove(3);
    victim.kill().unwrap();
    victim.wait().unwrap();
    let want = serde_json::json!([0, 1, 2, 4, 5, 6, 7]);
    for (_, rx) in &nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = read_until(rx, deadline, |v| v["kind"] == "view" && v["view"] == want);
        assert!(
            got.iter().any(|v| v["view"] == want),
            "never {want}: {got:?}"
        );
    }
    for (mut c, _) in nodes {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// `--log` appends: a node restarted (as with `--recover`) with the README's
/// `--log /tmp/weft-{rank}.jsonl` keeps the earlier run's events instead of erasing them.
#[test]
fn a_restarted_node_appends_to_its_log() {
    let key = JobKey::generate().unwrap();
    let ports = free_ports(2);
    let dir = std::env::temp_dir().join(format!("weft-log-append-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pattern = dir.join("weft-{rank}.jsonl");
    let log = dir.join("weft-0.jsonl");
    let started = |log: &std::path::Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"started\""))
            .count()
    };
    for run in 1..=2 {
        let (mut child, _rx) = start(0, &ports, &key, &["--log", pattern.to_str().unwrap()]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while started(&log) < run && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            started(&log),
            run,
            "run {run}: {:?}",
            std::fs::read_to_string(&log)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// SIGTERM (and SIGINT) end a node with a goodbye: it leaves the view, its peers see a leave
/// (`left` at the root, no `detected`), and it exits 0. The same for the root, which hands the
/// tree to the next in line, and for a `--supervised` node, whose supervisor passes the signal
/// on and exits as the node did.
#[test]
fn a_terminated_node_leaves_the_view_and_exits_0() {
    let key = JobKey::generate().unwrap();
    let ports = free_ports(5);
    let mut nodes: Vec<Option<(Child, Receiver<String>)>> = Vec::new();
    for id in 0..5 {
        let extra: &[&str] = if id == 3 { &["--supervised"] } else { &[] };
        nodes.push(Some(start(id, &ports, &key, extra)));
    }
    // Formed: n0 heard from its four children.
    n0_hears_all(&nodes[0].as_ref().unwrap().1, 4);
    let term = |c: &Child, sig| {
        // SAFETY: a signal to a child this test started.
        assert_eq!(unsafe { libc::kill(c.id() as i32, sig) }, 0);
    };
    let mut live: Vec<u64> = (0..5).collect();
    // A leaf, the supervised one, then the root.
    for (victim, sig) in [
        (2usize, libc::SIGTERM),
        (3, libc::SIGINT),
        (0, libc::SIGTERM),
    ] {
        let (mut child, rx) = nodes[victim].take().unwrap();
        term(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "n{victim} ended with {status:?}");
        let own: Vec<String> = rx.try_iter().collect();
        assert!(
            own.iter().any(|l| l.contains("\"left\"")),
            "n{victim} never saw itself leave: {own:?}"
        );
        live.retain(|&i| i != victim as u64);
        let want = serde_json::json!(live);
        for (id, node) in nodes.iter().enumerate() {
            let Some((_, rx)) = node else { continue };
            let deadline = Instant::now() + Duration::from_secs(10);
            let seen = read_until(rx, deadline, |v| v["kind"] == "view" && v["view"] == want);
            assert!(
                seen.iter().any(|v| v["view"] == want),
                "n{id} never installed {want} after n{victim} left: {seen:?}"
            );
            let detected: Vec<_> = seen.iter().filter(|v| v["kind"] == "detected").collect();
            assert!(
                detected.is_empty(),
                "n{id} took a leave for a failure: {detected:?}"
            );
        }
    }
    for (mut c, _) in nodes.into_iter().flatten() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A recovered process comes to a running job: a peer that refuses it is dead, not late. n0
/// and n1 of four die; n0 comes back with `--recover`, asks n1 (dead) on its way round the
/// list, and is welcomed by the view of n2 and n3. It used to keep redialing n1 with the
/// start-up backoff for the whole 60 s grace, a `refused n1` line a second; now n1 is one
/// refused dial and then a suspicion.
#[test]
fn a_recovered_node_does_not_keep_dialing_a_dead_peer() {
    let key = JobKey::generate().unwrap();
    let ports = free_ports(4);
    // n2 and n3 need not have reached n1 before it dies (nothing they run has to talk to it
    // first), and a peer never reached is late, not dead, for the start-up grace: theirs is
    // short, so that they settle on [2, 3] within the wait below. The recovered n0's grace is
    // what this test is about, and it keeps the default.
    let grace: &[&str] = &["--startup-timeout-ms", "3000"];
    let mut nodes: Vec<Option<(Child, Receiver<String>)>> = (0..4)
        .map(|id| Some(start(id, &ports, &key, if id >= 2 { grace } else { &[] })))
        .collect();
    n0_hears_all(&nodes[0].as_ref().unwrap().1, 3);
    for victim in [0, 1] {
        let (mut c, _) = nodes[victim].take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }
    // The survivors settle on [2, 3] before n0 comes back.
    let want = serde_json::json!([2, 3]);
    for id in [2, 3] {
        let deadline = Instant::now() + Duration::from_secs(10);
        let rx = &nodes[id].as_ref().unwrap().1;
        let seen = read_until(rx, deadline, |v| v["kind"] == "view" && v["view"] == want);
        assert!(seen.iter().any(|v| v["view"] == want), "n{id}: {seen:?}");
    }
    let (mut back, rx) = start(0, &ports, &key, &["--recover"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let seen = read_until(&rx, deadline, |v| v["kind"] == "joined");
    assert!(
        seen.iter().any(|v| v["kind"] == "joined"),
        "n0 never got back in: {seen:?}"
    );
    // Two seconds after it is back: the start-up backoff would have dialed n1 four times more.
    let after = read_until(&rx, Instant::now() + Duration::from_secs(2), |_| false);
    let redials = seen
        .iter()
        .chain(&after)
        .filter(|v| {
            v["kind"] == "refused" && v["why"].as_str().is_some_and(|w| w.starts_with("n1:"))
        })
        .count();
    assert!(redials <= 1, "n0 kept dialing dead n1: {redials} refusals");
    let _ = back.kill();
    let _ = back.wait();
    for (mut c, _) in nodes.into_iter().flatten() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

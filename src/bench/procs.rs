//! The stabilization trial with one OS process per node: `weft node` processes on loopback,
//! a victim killed with SIGKILL, Ts from the processes' own CLOCK_MONOTONIC-stamped reports.
//!
//! The launcher starts N copies of the `weft` executable, reads the address each one bound,
//! hands every one the peer list on stdin, waits until both ends of every tree edge and
//! standby pair report `authenticated`, lets the start-up traffic drain, kills, and reads
//! reports until the root reports the stabilization of a view equal to the survivors.

use super::scenario::Plan;
use super::stabilize::{plan, BenchConfig, BenchError, Trial};
use crate::bootstrap::{stdio, PeerList};
use crate::engine::{forced_backend, monotonic_ns};
use crate::transport::JobKey;
use crate::NodeId;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// The node processes of one trial; all killed when dropped.
pub(crate) struct Job {
    pub(crate) children: Vec<Option<Child>>,
    /// Every process's reports, as `(id, line)`.
    pub(crate) reports: Receiver<(u64, serde_json::Value)>,
    /// Where each listens, until the peer list is handed out.
    addrs: HashMap<NodeId, std::net::SocketAddr>,
}

impl Drop for Job {
    fn drop(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn failed(what: impl std::fmt::Display) -> BenchError {
    BenchError::Config(format!("node processes: {what}"))
}

/// How `child` ended, if it did within a moment, for an error about it: " (it ended, signal:
/// 9 (SIGKILL))"; empty if it still runs. A pipe closes as its process dies, a moment before
/// the process can be waited for.
fn ended(child: &mut Child) -> String {
    for _ in 0..100 {
        if let Ok(Some(status)) = child.try_wait() {
            return format!(" (it ended, {status})");
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    String::new()
}

/// Have the child die with its launcher, however the launcher ends (SIGINT, SIGTERM, SIGKILL:
/// `Job`'s drop runs only for the first two, and only if they unwind): the kernel sends it
/// SIGKILL when the thread that started it exits (`PR_SET_PDEATHSIG`). A launcher that died
/// before the child got that far is noticed by the parent id having changed.
pub(crate) fn dies_with_launcher(cmd: &mut Command) {
    // SAFETY: getpid has no preconditions.
    let launcher = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec, and makes only
    // async-signal-safe calls (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != launcher {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Start the processes (`weft node` with `cfg`'s tree and engine, and `extra` flags) and give
/// each the others' addresses.
pub(crate) fn start(
    exe: &Path,
    cfg: &BenchConfig,
    backend: Option<&str>,
    extra: &[String],
) -> Result<Job, BenchError> {
    // A chosen transport is handed to every process; otherwise each takes WEFT_TRANSPORT or
    // the automatic choice, and says what it uses in its `started` report.
    let transport = cfg.opts.transport.map(|t| t.to_string());
    let mut job = spawn(exe, cfg.nodes, |id, cmd| {
        cmd.args(["node", "--id", &id.to_string(), "--nodes"])
            .arg(cfg.nodes.to_string())
            .args(["--peers-stdin", "--radix", &cfg.radix.to_string()])
            .args(backend.map(|b| ["--backend", b]).into_iter().flatten())
            .args(transport.iter().flat_map(|t| ["--transport", t.as_str()]))
            .args(["--wait", &cfg.opts.reactor.wait.to_string()])
            .args(["--mode", &format!("{:?}", cfg.mode).to_lowercase()])
            .args(["--batch-us", &cfg.batch.as_micros().to_string()])
            .args(["--orphan-hold-us", &cfg.orphan_hold.as_micros().to_string()])
            .args(cfg.collect.then_some("--collect"))
            .args(extra);
    })?;
    job.hand_out_peers()?;
    Ok(job)
}

/// Start `n` copies of `exe`, `args` giving process `id` its arguments, each with the job key
/// and a pipe on stdin and stdout; read where each listens (its first line), and forward every
/// later JSON line to [`Job::reports`]. The peer list is not handed out yet
/// ([`Job::hand_out_peers`]).
pub(crate) fn spawn(
    exe: &Path,
    n: u32,
    args: impl Fn(u64, &mut Command),
) -> Result<Job, BenchError> {
    let key = JobKey::generate().map_err(failed)?;
    let (tx, rx) = channel();
    let mut job = Job {
        children: Vec::new(),
        reports: rx,
        addrs: HashMap::new(),
    };
    for id in 0..u64::from(n) {
        let mut cmd = Command::new(exe);
        args(id, &mut cmd);
        cmd.env("WEFT_JOB_KEY", key.to_hex())
            .env_remove("WEFT_BACKEND")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        dies_with_launcher(&mut cmd);
        let mut c = cmd
            .spawn()
            .map_err(|e| failed(format!("start {}: {e}", exe.display())))?;
        let stdout = c.stdout.take().ok_or_else(|| failed("no stdout"))?;
        let mut out = BufReader::new(stdout);
        let mut first = String::new();
        let listening = out
            .read_line(&mut first)
            .map_err(|e| e.to_string())
            .and_then(|_| stdio::parse_listening(first.trim()).map_err(|e| e.to_string()));
        let how = match listening {
            Ok(_) => String::new(),
            Err(_) => ended(&mut c),
        };
        // In the job before anything can fail: its drop kills what it started.
        job.children.push(Some(c));
        let addr = listening.map_err(|why| failed(format!("node {id}: {why}{how}")))?;
        job.addrs.insert(NodeId(id), addr);
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    if tx.send((id, v)).is_err() {
                        return;
                    }
                }
            }
            // Its stdout closed: it ended (or is about to). A launcher waiting for a report
            // only it would send learns so now, not when its wait runs out.
            let _ = tx.send((id, serde_json::json!({"kind": ENDED})));
        });
    }
    Ok(job)
}

/// The report the launcher's side adds when a process's stdout closes.
pub(crate) const ENDED: &str = "ended";

impl Job {
    /// The next report of any process, or `None` once `deadline` passed.
    pub(crate) fn report_by(&self, deadline: Instant) -> Option<(u64, serde_json::Value)> {
        self.reports
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .ok()
    }

    /// Why process `id` ended, for an error that names it (`""` if it still runs).
    pub(crate) fn how_ended(&mut self, id: u64) -> String {
        self.children
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .map_or(String::new(), ended)
    }

    /// Write the job's peer list to every process.
    pub(crate) fn hand_out_peers(&mut self) -> Result<(), BenchError> {
        let peers = PeerList::from_map(std::mem::take(&mut self.addrs));
        self.each_stdin(|stdin| stdio::send_peers(stdin, &peers))
    }

    /// Write `line` to every process still running.
    pub(crate) fn tell_all(&mut self, line: &str) -> Result<(), BenchError> {
        use std::io::Write;
        self.each_stdin(|stdin| writeln!(stdin, "{line}").and_then(|()| stdin.flush()))
    }

    fn each_stdin(
        &mut self,
        mut write: impl FnMut(&mut std::process::ChildStdin) -> std::io::Result<()>,
    ) -> Result<(), BenchError> {
        for (id, c) in self.children.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            let stdin = c
                .stdin
                .as_mut()
                .ok_or_else(|| failed(format!("node {id} has no stdin")))?;
            if let Err(e) = write(stdin) {
                // Most often the process is gone: say which, and how it ended.
                return Err(failed(format!("writing to node {id}: {e}{}", ended(c))));
            }
        }
        Ok(())
    }
}

/// Run one trial with a process per node, the `weft` executable at `exe`.
pub fn trial(exe: &Path, cfg: &BenchConfig, rep: u32) -> Result<Trial, BenchError> {
    let plan = plan(cfg, rep)?;
    let survivors: Vec<u64> = plan.survivors().iter().map(|i| i.0).collect();
    let Plan {
        victims,
        mut missing,
        ..
    } = plan;
    let n = cfg.nodes;
    // A forced backend is handed to every process; otherwise each chooses (and may fall
    // back) on its own, and says what it runs on in its `started` report.
    let forced = forced_backend(cfg.opts.backend)?.map(|b| b.to_string());
    // No heartbeats: the in-process nodes this run is set beside have none.
    let mut job = start(
        exe,
        cfg,
        forced.as_deref(),
        &["--heartbeat-us".into(), "0".into()],
    )?;
    let (mut ran_on, mut went) = (Vec::new(), Vec::new());

    let deadline = Instant::now() + cfg.timeout;
    while !missing.is_empty() {
        let Some((who, r)) = job.report_by(deadline) else {
            return Err(BenchError::Timeout(
                cfg.timeout,
                format!(
                    "{} connections between node processes missing",
                    missing.len()
                ),
            ));
        };
        started(&r, &mut ran_on, &mut went);
        if r["kind"] == "authenticated" {
            if let Some(p) = r["peer"].as_u64() {
                missing.remove(&(NodeId(who), NodeId(p)));
            }
        }
    }
    std::thread::sleep(Duration::from_millis(20) + Duration::from_micros(200) * n);
    // Start-up chatter.
    while let Ok((_, r)) = job.reports.try_recv() {
        started(&r, &mut ran_on, &mut went);
    }

    let killed_at = monotonic_ns();
    for v in &victims {
        if let Some(c) = job.children[v.0 as usize].as_mut() {
            let _ = c.kill(); // SIGKILL
        }
    }
    let mut detected: Option<u64> = None;
    // Each process's last view: its name (epoch, root) and its ids.
    let mut last_view: HashMap<u64, ((u64, u64), Vec<u64>)> = HashMap::new();
    let view_of = |r: &serde_json::Value| {
        let view: Vec<u64> = serde_json::from_value(r["view"].clone()).unwrap_or_default();
        let name = (
            r["epoch"].as_u64().unwrap_or(0),
            r["root"].as_u64().unwrap_or(u64::MAX),
        );
        (name, view)
    };
    let deadline = Instant::now() + cfg.timeout;
    let (epoch, stable_at) = loop {
        let Some((who, r)) = job.report_by(deadline) else {
            return Err(BenchError::Timeout(
                cfg.timeout,
                format!("no stabilization after killing processes {victims:?}"),
            ));
        };
        let at = r["mono_ns"].as_u64().unwrap_or(0);
        match r["kind"].as_str() {
            Some("detected") => detected = Some(detected.map_or(at, |d| d.min(at))),
            Some("view") => {
                last_view.insert(who, view_of(&r));
            }
            Some("stabilized") => {
                let e = (r["epoch"].as_u64().unwrap_or(0), who);
                if last_view
                    .get(&who)
                    .is_some_and(|(x, v)| *x == e && *v == survivors)
                {
                    break (e, at);
                }
            }
            _ => {}
        }
    };
    // Each survivor's view report was written before its acknowledgment left it, but the
    // reports of different processes come through different pipes: give them a moment. The
    // first detection may be among them too: the root's `stabilized` can overtake the
    // detector's report on another pipe (Ts read as 0). A detector wrote its `detected`
    // before its `view`, on the same pipe, so once every survivor's view is in, so is every
    // detection that came before the new view.
    let deadline = Instant::now() + Duration::from_millis(200);
    while survivors
        .iter()
        .any(|s| last_view.get(s).is_none_or(|(e, _)| *e != epoch))
    {
        let Some((who, r)) = job.report_by(deadline) else {
            break;
        };
        let at = r["mono_ns"].as_u64().unwrap_or(0);
        match r["kind"].as_str() {
            Some("view") => {
                last_view.insert(who, view_of(&r));
            }
            Some("detected") => detected = Some(detected.map_or(at, |d| d.min(at))),
            _ => {}
        }
    }
    let views_agree = survivors.iter().all(|s| {
        last_view
            .get(s)
            .is_some_and(|(e, v)| *e == epoch && *v == survivors)
    });
    let epoch = epoch.0;
    let detected = detected.unwrap_or(stable_at);
    Ok(Trial {
        victims,
        ts: Duration::from_nanos(stable_at.saturating_sub(detected)),
        detect: Duration::from_nanos(detected.saturating_sub(killed_at)),
        epochs: epoch,
        views_agree,
        // Other processes' CPU is not this process's to read.
        cpu: None,
        backend: crate::transport::backend_name(&ran_on),
        // One node per process: over links or TCP, as the processes said.
        transport: {
            went.sort();
            went.dedup();
            if went.is_empty() {
                "tcp".into()
            } else {
                went.join("+")
            }
        },
        clock_err: None,
    })
}

/// If `r` is a process's `started` report, note the backend it runs on in `ran_on`.
fn started(r: &serde_json::Value, ran_on: &mut Vec<String>, went: &mut Vec<String>) {
    if r["kind"] != "started" {
        return;
    }
    if let Some(b) = r["backend"].as_str() {
        ran_on.push(b.to_owned());
    }
    if let Some(t) = r["transport"].as_str() {
        went.push(t.to_owned());
    }
}

//! A real Slurm cluster on this machine, for the tests that start weft with `srun`: Debian's
//! `slurmctld`, one `slurmd` per host of a network-namespace cluster
//! ([`weft::bench::hosts::Cluster`]), and `munged` for their credentials, all under a scratch
//! directory and all stopped when the [`Slurm`] is dropped (and killed with the test's thread
//! if the test process dies: parent-death signal).
//!
//! Each daemon runs in its host's network namespace but in the machine's mount namespace
//! (`nsenter --net`, not `ip netns exec`, whose fresh `/sys` has no cgroup tree and slurmd
//! will not start without one), in a private mount namespace of its own where a hosts file
//! names the Slurm nodes `h0`, `h1`, … (so `SLURM_STEP_NODELIST=h[0-3]`, and weft resolves
//! its rendezvous host `h0` as on a real cluster). `srun` runs on host 0, beside slurmctld.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use weft::bench::hosts::Cluster;

/// The Debian programs a Slurm cluster needs.
const PROGRAMS: [&str; 6] = [
    "munged",
    "slurmctld",
    "slurmd",
    "srun",
    "nsenter",
    "unshare",
];

/// Whether Slurm's daemons are installed (Debian: slurmctld, slurmd, slurm-client, munge);
/// skips (fails under CI) if not.
pub fn available() -> bool {
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let found = |p: &&str| {
        dirs.iter()
            .map(PathBuf::as_path)
            .chain([Path::new("/usr/sbin"), Path::new("/sbin")])
            .any(|d| d.join(p).is_file())
    };
    let missing: Vec<&str> = PROGRAMS.iter().copied().filter(|p| !found(p)).collect();
    if !missing.is_empty() {
        super::skip::skip(&format!(
            "Slurm not installed ({missing:?} missing; Debian's slurmctld, slurmd, \
             slurm-client and munge)"
        ));
        return false;
    }
    true
}

/// A Slurm cluster of one node per namespace host.
pub struct Slurm<'a> {
    hosts: &'a Cluster,
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
}

impl<'a> Slurm<'a> {
    /// munged, slurmctld on host 0 and a slurmd on every host, each node offering `cpus`
    /// (more than the machine has: Slurm is told to trust the configuration); returns once
    /// every node is idle.
    pub fn start(hosts: &'a Cluster, cpus: u32) -> Self {
        let dir = std::env::temp_dir().join(format!("weft-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["state", "spool", "log", "munge", "run"] {
            std::fs::create_dir_all(dir.join(d)).expect("slurm scratch");
        }
        let mut slurm = Slurm {
            hosts,
            conf: dir.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
        };
        slurm.write_files(cpus);
        let d = &slurm.dir;
        // munge refuses a key others may read, and a socket others cannot reach.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d.join("munge"), std::fs::Permissions::from_mode(0o700))
            .expect("munge dir");
        let key: Vec<u8> = (0..1024).map(|i| (i * 131 % 251) as u8 ^ 0x5a).collect();
        std::fs::write(d.join("munge/munge.key"), key).expect("munge key");
        std::fs::set_permissions(
            d.join("munge/munge.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .expect("munge key mode");
        let socket = d.join("run/munge.sock");
        let mut munged = Command::new("munged");
        munged
            .arg("-F")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!(
                "--key-file={}",
                d.join("munge/munge.key").display()
            ))
            .arg(format!("--log-file={}", d.join("log/munged.log").display()))
            .arg(format!(
                "--pid-file={}",
                d.join("munge/munged.pid").display()
            ))
            .arg(format!("--seed-file={}", d.join("munge/seed").display()));
        slurm.spawn(munged);
        slurm.wait("munged's socket", || socket.exists());
        let ctld = slurm.on_host(0, "slurmctld", &["-D", "-c", "-i"]);
        slurm.spawn(ctld);
        for i in 0..hosts.hosts() {
            std::fs::create_dir_all(slurm.dir.join(format!("spool/h{i}"))).expect("spool");
            let slurmd = slurm.on_host(i, "slurmd", &["-D", "-N", &format!("h{i}")]);
            slurm.spawn(slurmd);
        }
        let n = hosts.hosts() as usize;
        slurm.wait("every node idle", || {
            let out = slurm
                .on_host(0, "sinfo", &["-h", "-N", "-o", "%t"])
                .output()
                .ok();
            out.is_some_and(|o| {
                let t = String::from_utf8_lossy(&o.stdout);
                t.lines().filter(|l| l.trim() == "idle").count() == n
            })
        });
        slurm
    }

    /// The configuration and the hosts file the daemons and `srun` see.
    fn write_files(&self, cpus: u32) {
        let d = self.dir.display();
        let ctl_addr = self.hosts.addr(0);
        let me = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let mut nodes = String::new();
        let mut names = format!("127.0.0.1 localhost\n{ctl_addr} {me}\n");
        for i in 0..self.hosts.hosts() {
            let a = self.hosts.addr(i);
            nodes.push_str(&format!(
                "NodeName=h{i} NodeAddr={a} CPUs={cpus} RealMemory=1000 State=UNKNOWN\n"
            ));
            names.push_str(&format!("{a} h{i}\n"));
        }
        let last = self.hosts.hosts() - 1;
        // The controller's host is named as the kernel names this machine (slurmctld checks
        // that it runs where SlurmctldHost says) at host 0's address.
        let conf = format!(
            "ClusterName=weft\n\
             SlurmctldHost={me}({ctl_addr})\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={d}/run/munge.sock\n\
             CredType=cred/munge\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             SlurmctldPort=6817\n\
             SlurmdPort=6818\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/%n\n\
             SlurmctldPidFile={d}/state/slurmctld.pid\n\
             SlurmdPidFile={d}/spool/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             SlurmdParameters=config_overrides\n\
             {nodes}\
             PartitionName=all Nodes=h[0-{last}] Default=YES MaxTime=INFINITE State=UP \
             OverSubscribe=YES\n"
        );
        std::fs::write(&self.conf, conf).expect("slurm.conf");
        std::fs::write(self.dir.join("hosts"), names).expect("hosts file");
    }

    /// `program args` on host `i`: its network namespace, a private mount namespace with the
    /// cluster's hosts file, this cluster's configuration.
    pub fn on_host(&self, i: u32, program: &str, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.hosts.ns(i)))
            .args(["unshare", "--mount", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
            .arg(self.dir.join("hosts"))
            .arg(program)
            .args(args)
            .env("SLURM_CONF", &self.conf);
        c
    }

    /// `srun args` from host 0.
    pub fn srun(&self, args: &[&str]) -> Command {
        self.on_host(0, "srun", args)
    }

    fn spawn(&mut self, mut c: Command) {
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe; the closure runs between fork and exec. The
        // daemons die with the test's thread if the test process is killed.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = c.spawn().expect("start a Slurm daemon");
        self.daemons.push(child);
    }

    /// Poll `done` (a daemon's state, read from files or `sinfo`) until it holds.
    fn wait(&self, what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "Slurm: {what}: not within 60 s\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of every daemon's log, for a failure's message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(entries) = std::fs::read_dir(self.dir.join("log")) {
            for e in entries.flatten() {
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(8).collect();
                out.push_str(&format!("== {}\n", e.path().display()));
                for l in tail.into_iter().rev() {
                    out.push_str(l);
                    out.push('\n');
                }
            }
        }
        out
    }
}

impl Drop for Slurm<'_> {
    fn drop(&mut self) {
        for d in self.daemons.iter_mut().rev() {
            // SAFETY: a plain signal to our own child.
            unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for d in self.daemons.iter_mut().rev() {
            while d.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

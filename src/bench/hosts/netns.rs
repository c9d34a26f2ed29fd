//! K hosts on one machine: network namespaces on a bridge (or linked as a 3-D torus, see
//! [`super::torus`]), each with its own address, its link optionally shaped (`tc … tbf`, the
//! Gigabit of ICS'06 §6), and the two silent failures a real network has: a host whose link goes down, and a link between two hosts that stops
//! carrying anything. Neither says goodbye (no reset, no ICMP): the peers see only silence.
//!
//! Host `i` is namespace `weft-<pid>-h<i>` with device `weft0` at `10.202.<i/250>.<i%250+1>/16`,
//! plugged into bridge `wft<pid>b`. Everything goes when the [`Cluster`] is dropped, and also
//! when this process is killed: a watchdog (`sh`, in a session of its own so a terminal's
//! Ctrl-C reaches it only through us) waits on a pipe whose other end only this process holds,
//! and removes them when it closes. Left-overs of a process that is gone (a machine that
//! rebooted mid-run keeps none: namespaces do not survive it) are swept at the next start.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use crate::topology::torus::Torus;

/// Most hosts one cluster makes (its addresses are one /16).
pub const MAX_HOSTS: u32 = 1000;

/// The device every host has inside its namespace.
const DEV: &str = "weft0";

/// Why the hosts could not be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// Not root: namespaces and bridges need CAP_NET_ADMIN.
    #[error("network namespaces need root (CAP_NET_ADMIN); run as root or without --hosts")]
    NotRoot,
    /// `ip` or `tc` is missing or refused.
    #[error("`{command}` failed: {why}")]
    Command {
        /// The command line.
        command: String,
        /// Its error output, or why it did not run.
        why: String,
    },
    /// A request that makes no sense for this cluster.
    #[error("{0}")]
    Bad(String),
}

/// Run a command; its error output on failure.
fn run(program: &str, args: &[&str]) -> Result<(), NetnsError> {
    let failed = |why: String| NetnsError::Command {
        command: format!("{program} {}", args.join(" ")),
        why,
    };
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed(e.to_string()))?;
    outcome(&out, failed)
}

/// A finished command's outcome: its error output on failure.
fn outcome(
    out: &std::process::Output,
    failed: impl FnOnce(String) -> NetnsError,
) -> Result<(), NetnsError> {
    if out.status.success() {
        Ok(())
    } else {
        Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

/// A link rate for `tc … tbf rate`: digits and a unit `tc` knows (`1gbit`, `100mbit`).
pub fn check_rate(rate: &str) -> Result<(), NetnsError> {
    let digits = rate.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &rate[digits.len()..];
    let units = [
        "bit", "kbit", "mbit", "gbit", "tbit", "bps", "kbps", "mbps", "gbps",
    ];
    if digits.is_empty() || digits.parse::<u64>().map_or(true, |d| d == 0) || !units.contains(&unit)
    {
        return Err(NetnsError::Bad(format!(
            "--shape {rate:?}: expected a rate such as 1gbit or 100mbit"
        )));
    }
    Ok(())
}

/// K hosts on a bridge; removed when dropped.
pub struct Cluster {
    tag: String,
    hosts: u32,
    /// How the hosts are linked: `None`, one bridge; a torus, veth pairs between neighbours.
    torus: Option<Torus>,
    /// The watchdog's pipe: closing it (drop, or this process dying) removes everything.
    watchdog: Option<Child>,
}

impl Cluster {
    /// Make `hosts` hosts on one bridge, every link shaped to `shape` if given (`1gbit`).
    pub fn new(hosts: u32, shape: Option<&str>) -> Result<Self, NetnsError> {
        if hosts == 0 || hosts > MAX_HOSTS {
            return Err(NetnsError::Bad(format!(
                "--hosts {hosts}: between 1 and {MAX_HOSTS}"
            )));
        }
        let cluster = Self::start(hosts, None, shape)?;
        let br = cluster.bridge();
        run("ip", &["link", "add", &br, "type", "bridge"])?;
        run("ip", &["link", "set", &br, "up"])?;
        for i in 0..hosts {
            let (ns, near) = (cluster.ns(i), cluster.near(i));
            let addr = format!("{}/16", cluster.addr(i));
            run("ip", &["netns", "add", &ns])?;
            run(
                "ip",
                &[
                    "link", "add", &near, "type", "veth", "peer", "name", DEV, "netns", &ns,
                ],
            )?;
            run("ip", &["link", "set", &near, "master", &br, "up"])?;
            run("ip", &["-n", &ns, "addr", "add", &addr, "dev", DEV])?;
            run("ip", &["-n", &ns, "link", "set", DEV, "up"])?;
            run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            if let Some(rate) = shape {
                // Both directions: what leaves the host (its device) and what reaches it
                // (the bridge's end of its veth).
                let tbf = [
                    "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms",
                ];
                let mut inside = vec!["-n", &ns, "qdisc", "add", "dev", DEV];
                inside.extend(tbf);
                run("tc", &inside)?;
                let mut outside = vec!["qdisc", "add", "dev", &near];
                outside.extend(tbf);
                run("tc", &outside)?;
            }
        }
        Ok(cluster)
    }

    /// Make one host per node of `torus`, linked as that torus (see [`super::torus`]): host
    /// `i` at `torus.coord(i)`, every link shaped to `shape` on its way out if given.
    pub fn torus(torus: Torus, shape: Option<&str>) -> Result<Self, NetnsError> {
        let hosts = u32::try_from(torus.size())
            .ok()
            .filter(|&k| k <= MAX_HOSTS)
            .ok_or_else(|| {
                NetnsError::Bad(format!("--torus {torus}: at most {MAX_HOSTS} hosts"))
            })?;
        let cluster = Self::start(hosts, Some(torus), shape)?;
        for i in 0..hosts {
            run("ip", &["netns", "add", &cluster.ns(i)])?;
        }
        super::torus::wire(&cluster, &torus, shape)?;
        Ok(cluster)
    }

    /// What every cluster does first: check the rate and the privileges, sweep what dead
    /// harnesses left, and start the watchdog that removes this one's hosts.
    fn start(hosts: u32, torus: Option<Torus>, shape: Option<&str>) -> Result<Self, NetnsError> {
        if let Some(r) = shape {
            check_rate(r)?;
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(NetnsError::NotRoot);
        }
        sweep();
        let mut cluster = Cluster {
            tag: std::process::id().to_string(),
            hosts,
            torus,
            watchdog: None,
        };
        cluster.watchdog = Some(cluster.start_watchdog()?);
        Ok(cluster)
    }

    /// A handle on the cluster that `value` ([`Cluster::env_value`]) names, made by another
    /// process (the harness); dropping it removes nothing.
    pub fn attach(value: &str) -> Result<Self, NetnsError> {
        let bad = || {
            NetnsError::Bad(format!(
                "{value:?} does not name a cluster (TAG,HOSTS or TAG,HOSTS,XxYxZ)"
            ))
        };
        let mut parts = value.split(',');
        let (Some(tag), Some(hosts)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        let hosts: u32 = hosts.parse().map_err(|_| bad())?;
        let torus = parts
            .next()
            .map(|t| t.parse::<Torus>().map_err(|_| bad()))
            .transpose()?;
        if tag.is_empty()
            || !tag.bytes().all(|b| b.is_ascii_digit())
            || hosts == 0
            || parts.next().is_some()
            || torus.is_some_and(|t| t.size() != u64::from(hosts))
        {
            return Err(bad());
        }
        Ok(Cluster {
            tag: tag.into(),
            hosts,
            torus,
            watchdog: None,
        })
    }

    /// What names this cluster to another process ([`Cluster::attach`]).
    pub fn env_value(&self) -> String {
        match self.torus {
            None => format!("{},{}", self.tag, self.hosts),
            Some(t) => format!("{},{},{t}", self.tag, self.hosts),
        }
    }

    /// The host of rank `rank` of a job of `nodes`: on a bridge in blocks ([`super::host_of`],
    /// as `srun -m block`); on a torus rank r on host r mod K, XYZ order as BG/L maps ranks
    /// (and as the distance model lays them out).
    pub fn host_of(&self, rank: u32, nodes: u32) -> u32 {
        match self.torus {
            None => super::host_of(rank, nodes, self.hosts),
            Some(_) => rank % self.hosts,
        }
    }

    /// The torus the hosts are linked as, if they are.
    pub fn torus_shape(&self) -> Option<Torus> {
        self.torus
    }

    /// How many hosts.
    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    /// Host `i`'s namespace name (for `ip netns exec`).
    pub fn ns(&self, i: u32) -> String {
        format!("weft-{}-h{i}", self.tag)
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 202, (i / 250) as u8, (i % 250 + 1) as u8))
    }

    /// A command that runs `program` on host `i`.
    pub fn command(&self, i: u32, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(i)]).arg(program);
        c
    }

    fn bridge(&self) -> String {
        format!("wft{}b", self.tag)
    }

    fn near(&self, i: u32) -> String {
        format!("wft{}v{i}", self.tag)
    }

    /// The watchdog: removes this cluster once our end of its stdin closes.
    fn start_watchdog(&self) -> Result<Child, NetnsError> {
        let script = format!(
            "read _ ; for n in $(ip netns list | cut -d' ' -f1 | grep '^weft-{tag}-h'); do \
             ip netns del \"$n\"; done; ip link del {br} 2>/dev/null; exit 0",
            tag = self.tag,
            br = self.bridge()
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid is async-signal-safe; the closure runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        cmd.spawn().map_err(|e| NetnsError::Command {
            command: "sh (the cluster's watchdog)".into(),
            why: e.to_string(),
        })
    }

    fn host(&self, i: u32) -> Result<(), NetnsError> {
        if i < self.hosts {
            Ok(())
        } else {
            Err(NetnsError::Bad(format!("no host {i} among {}", self.hosts)))
        }
    }

    /// Host `i` vanishes: its link goes down, nothing reaches it and nothing leaves it.
    pub fn down(&self, i: u32) -> Result<(), NetnsError> {
        self.host(i)?;
        if let Some(t) = self.torus {
            return super::torus::down(self, &t, i, false);
        }
        run("ip", &["-n", &self.ns(i), "link", "set", DEV, "down"])
    }

    /// Host `i`'s link comes back.
    pub fn up(&self, i: u32) -> Result<(), NetnsError> {
        self.host(i)?;
        if let Some(t) = self.torus {
            return super::torus::down(self, &t, i, true);
        }
        run("ip", &["-n", &self.ns(i), "link", "set", DEV, "up"])
    }

    /// The link between hosts `a` and `b` stops carrying anything, both ways, silently: each
    /// sends the other's frames to a hardware address nobody has.
    pub fn cut(&self, a: u32, b: u32) -> Result<(), NetnsError> {
        self.pair(a, b)?;
        for (from, to) in [(a, b), (b, a)] {
            let to = self.addr(to).to_string();
            run(
                "ip",
                &[
                    "-n",
                    &self.ns(from),
                    "neigh",
                    "replace",
                    &to,
                    "lladdr",
                    "02:00:00:00:00:00",
                    "dev",
                    DEV,
                    "nud",
                    "permanent",
                ],
            )?;
        }
        Ok(())
    }

    /// The link between `a` and `b` carries again.
    pub fn mend(&self, a: u32, b: u32) -> Result<(), NetnsError> {
        self.pair(a, b)?;
        for (from, to) in [(a, b), (b, a)] {
            let to = self.addr(to).to_string();
            run(
                "ip",
                &["-n", &self.ns(from), "neigh", "del", &to, "dev", DEV],
            )?;
        }
        Ok(())
    }

    fn pair(&self, a: u32, b: u32) -> Result<(), NetnsError> {
        if let Some(t) = self.torus {
            return Err(NetnsError::Bad(format!(
                "a cut between two hosts is made on a bridge, not on the torus {t}"
            )));
        }
        self.host(a)?;
        self.host(b)?;
        if a == b {
            return Err(NetnsError::Bad(format!("host {a} has no link to itself")));
        }
        Ok(())
    }
}

impl Cluster {
    /// Run `f` on a thread of this process that has entered host `i`'s namespace: a socket it
    /// makes belongs to that host, wherever it is used afterwards, and `/proc/sys/net` is the
    /// host's.
    pub fn in_host<R: Send>(
        &self,
        i: u32,
        f: impl FnOnce() -> Result<R, NetnsError> + Send,
    ) -> Result<R, NetnsError> {
        self.host(i)?;
        let path = format!("/run/netns/{}", self.ns(i));
        let failed = |why: String| NetnsError::Command {
            command: format!("setns {path}"),
            why,
        };
        let ns = std::fs::File::open(&path).map_err(|e| failed(e.to_string()))?;
        std::thread::scope(|s| {
            s.spawn(|| {
                use std::os::fd::AsRawFd;
                // SAFETY: a namespace file we hold open; only this thread moves.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(failed(std::io::Error::last_os_error().to_string()));
                }
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }
}

/// `ip [-n ns] -batch -` of `lines`, one command each (nothing to do for none).
pub(super) fn batch(ns: Option<&str>, lines: &[String]) -> Result<(), NetnsError> {
    let mut args = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    piped("ip", &args, lines)
}

/// `tc -n ns -batch -` of `lines`.
pub(super) fn tc_batch(ns: &str, lines: &[String]) -> Result<(), NetnsError> {
    piped("tc", &["-n", ns], lines)
}

fn piped(program: &str, args: &[&str], lines: &[String]) -> Result<(), NetnsError> {
    if lines.is_empty() {
        return Ok(());
    }
    let failed = |why: String| NetnsError::Command {
        command: format!(
            "{program} {} -batch - ({} lines: {} …)",
            args.join(" "),
            lines.len(),
            lines[0]
        ),
        why,
    };
    let mut child = Command::new(program)
        .args(args)
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(e.to_string()))?;
    let mut text = lines.join("\n");
    text.push('\n');
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())
        .map_err(|e| failed(e.to_string()))?;
    let out = child
        .wait_with_output()
        .map_err(|e| failed(e.to_string()))?;
    outcome(&out, failed)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            if let Some(mut stdin) = w.stdin.take() {
                let _ = stdin.write_all(b"\n");
            }
            let _ = w.wait();
        }
    }
}

/// Remove the namespaces and bridges of clusters whose process is gone.
fn sweep() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = name
            .strip_prefix("weft-")
            .and_then(|r| r.split_once("-h"))
            .and_then(|(p, _)| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run("ip", &["netns", "del", name]);
            let _ = run("ip", &["link", "del", &format!("wft{pid}b")]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_that_tc_would_refuse_are_refused_first() {
        assert!(check_rate("1gbit").is_ok());
        assert!(check_rate("100mbit").is_ok());
        for bad in ["", "gbit", "0gbit", "1 gbit", "1gb/s", "fast", "-1gbit"] {
            assert!(check_rate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn host_addresses_are_distinct_and_never_the_network_or_broadcast() {
        let c = Cluster {
            tag: "0".into(),
            hosts: MAX_HOSTS,
            torus: None,
            watchdog: None,
        };
        let all: std::collections::HashSet<_> = (0..MAX_HOSTS).map(|i| c.addr(i)).collect();
        assert_eq!(all.len(), MAX_HOSTS as usize);
        for a in all {
            let IpAddr::V4(v) = a else { unreachable!() };
            assert!(v.octets()[3] != 0 && v.octets()[3] != 255, "{v}");
        }
    }
}

//! `weft bench stabilize --hosts K`: the launched benchmark ([`super::launched`]) on K hosts
//! made of network namespaces on this machine ([`netns`]). Each rank is a `weft bench
//! stabilize --bootstrap env` process started on its host, ranks placed in blocks as Slurm's
//! default distribution does (host `h` holds ranks `h·N/K ..`), rank 0 on host 0 driving the
//! trials. Ranks on other hosts are treated as having clocks of their own (`WEFT_CLOCK_SYNC=
//! always`): their times are put on rank 0's clock by Cristian's round trips, as on a real
//! cluster, and here the true offset is known to be zero.
//!
//! The silent failures need the hosts: `--fail host-down` takes a host's link down, `--fail
//! link` cuts the link between rank 0's host and another, and rank 0 does it through the
//! cluster named in `WEFT_NETNS_CLUSTER`.

pub mod netns;
pub mod torus;

pub use netns::{Cluster, NetnsError};

use super::stabilize::{BenchError, BenchReport};
use crate::transport::JobKey;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

/// Where rank 0's rendezvous listens on host 0 (a fresh namespace: every port is free).
const RENDEZVOUS_PORT: u16 = 7000;

/// The variable that names the cluster to rank 0: `<tag>,<hosts>`.
pub const CLUSTER_VAR: &str = "WEFT_NETNS_CLUSTER";

/// The variable that names a rank's host (its index) under the harness.
pub const HOST_VAR: &str = "WEFT_NETNS_HOST";

/// The host of rank `rank` in a job of `n` ranks on `k` hosts (blocks, as `srun -m block`).
pub fn host_of(rank: u32, n: u32, k: u32) -> u32 {
    (u64::from(rank) * u64::from(k) / u64::from(n)) as u32
}

/// Whether `nodes` ranks can spread over `hosts` hosts (checked before the hosts are made).
pub fn check(nodes: u32, hosts: u32) -> Result<(), BenchError> {
    if nodes < hosts {
        return Err(failed(format!(
            "{nodes} nodes on {hosts} hosts leaves a host empty"
        )));
    }
    Ok(())
}

/// The ranks of one job; all killed when dropped.
struct Ranks(Vec<Child>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn failed(what: impl std::fmt::Display) -> BenchError {
    BenchError::Config(format!("--hosts: {what}"))
}

/// Run `weft bench stabilize <args>` as `nodes` ranks spread over `cluster`'s hosts, the
/// executable at `exe`; rank 0's reports (one per line of its `--json` output), with `hosts`
/// and `shape` filled in. `args` are the benchmark's own flags, without `--hosts`, `--shape`,
/// `--bootstrap` and `--json`.
pub fn run(
    exe: &Path,
    cluster: &Cluster,
    shape: Option<&str>,
    nodes: u32,
    args: &[OsString],
) -> Result<Vec<BenchReport>, BenchError> {
    let lines = launch(exe, cluster, nodes, &["bench", "stabilize"], args)?;
    lines
        .iter()
        .map(|line| {
            let mut r: BenchReport = serde_json::from_str(line)
                .map_err(|e| failed(format!("rank 0 printed {line:?}: {e}")))?;
            r.hosts = Some(cluster.hosts());
            r.shape = shape.map(str::to_owned);
            r.torus = cluster.torus_shape().map(|t| t.to_string());
            Ok(r)
        })
        .collect()
}

/// Run `weft <command> <args> --bootstrap env --json` as `nodes` ranks spread over `cluster`'s
/// hosts, the executable at `exe`, and wait for every rank to end; rank 0's output lines
/// (at least one).
pub fn launch(
    exe: &Path,
    cluster: &Cluster,
    nodes: u32,
    command: &[&str],
    args: &[OsString],
) -> Result<Vec<String>, BenchError> {
    let k = cluster.hosts();
    if cluster.torus_shape().is_none() {
        check(nodes, k)?;
    }
    let key = JobKey::generate().map_err(failed)?;
    let rendezvous = format!("{}:{RENDEZVOUS_PORT}", cluster.addr(0));
    let mut ranks = Ranks(Vec::new());
    let mut out = None;
    for rank in 0..nodes {
        let h = cluster.host_of(rank, nodes);
        let mut cmd = cluster.command(h, exe);
        cmd.args(command)
            .args(args)
            .args(["--bootstrap", "env", "--json"])
            .env("WEFT_RANK", rank.to_string())
            .env("WEFT_SIZE", nodes.to_string())
            .env("WEFT_RENDEZVOUS", &rendezvous)
            .env("WEFT_JOB_KEY", key.to_hex())
            .env("WEFT_CLOCK_SYNC", "always")
            .env(CLUSTER_VAR, cluster.env_value())
            .env(HOST_VAR, h.to_string())
            .stdin(Stdio::null())
            .stdout(if rank == 0 {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        super::procs::dies_with_launcher(&mut cmd);
        let mut c = cmd
            .spawn()
            .map_err(|e| failed(format!("start rank {rank}: {e}")))?;
        if rank == 0 {
            out = c.stdout.take();
        }
        ranks.0.push(c);
    }
    let out = out.ok_or_else(|| failed("rank 0 has no output"))?;
    let lines = BufReader::new(out)
        .lines()
        .collect::<Result<Vec<String>, _>>()
        .map_err(failed)?;
    for (rank, c) in ranks.0.iter_mut().enumerate() {
        let status = c.wait().map_err(failed)?;
        if !status.success() {
            return Err(failed(format!("rank {rank} ended with {status}")));
        }
    }
    if lines.is_empty() {
        return Err(failed("rank 0 reported nothing"));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_fill_every_host_and_keep_rank_0_on_host_0() {
        for k in 1..=8u32 {
            for n in k..=40 {
                let hosts: Vec<u32> = (0..n).map(|r| host_of(r, n, k)).collect();
                assert_eq!(hosts[0], 0);
                assert!(hosts.windows(2).all(|w| w[0] <= w[1]), "blocks");
                for h in 0..k {
                    let here = hosts.iter().filter(|&&x| x == h).count() as u32;
                    assert!(here >= n / k && here <= n.div_ceil(k), "n {n} k {k} h {h}");
                }
            }
        }
    }
}

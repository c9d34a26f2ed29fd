//! weft under real Slurm: `srun` from Debian's slurm-wlm, on a cluster of four hosts made of
//! network namespaces (a slurmd on each, slurmctld and munged beside them;
//! [`common::slurm`]). The ranks read `SLURM_PROCID`, `SLURM_STEP_NODELIST=h[0-3]` and
//! `SLURM_STEP_TASKS_PER_NODE`, meet at the rendezvous on the node list's first host, and
//! cross hosts:
//! - `srun -N 4 -n 8 weft node`: the job agrees on its view, survives a rank's SIGKILL
//!   (`--kill-on-bad-exit=0 --no-kill`), and its ranks end with the step;
//! - `srun -N 4 -n 16 weft bench stabilize --bootstrap auto --fail host`: a host drawn per
//!   trial (by Slurm's node name: the kernels here share one) loses every process at once,
//!   and the views agree.
//!
//! Needs root, iproute2 and Debian's slurmctld, slurmd, slurm-client and munge (`.ci/run`
//! installs them); without them the test says SKIPPED, and fails under `CI=true`.

mod common;

use common::slurm::{self, Slurm};
use weft::bench::hosts::Cluster;

#[test]
fn srun_starts_jobs_across_four_hosts_that_survive_kills() {
    if !slurm::available() {
        return;
    }
    let hosts = match Cluster::new(4, None) {
        Ok(h) => h,
        Err(e) => {
            common::skip::skip(&format!("no namespace hosts: {e}"));
            return;
        }
    };
    let slurm = Slurm::start(&hosts, 16);
    let srun = |n: &str| {
        let mut c = slurm.srun(&["-N", "4", "-n", n, "--kill-on-bad-exit=0", "--no-kill"]);
        c.env("WEFT_JOB_SECRET", "slurm-test")
            .env_remove("WEFT_JOB_KEY");
        c
    };
    common::launched::ranks_survive_a_kill("srun", 8, srun("8"), &[]);
    let r = common::launched::bench_under("srun", 16, srun("16"), &["--fail", "host"]);
    assert_eq!(r["launcher"], "slurm", "{r}\n{}", slurm.logs());
    assert_eq!(r["fail"], "host", "{r}");
}

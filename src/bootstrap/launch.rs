//! Which launcher started this process, and what it says: rank, size, the job's id, and how
//! the job's processes can find each other.
//!
//! - **Slurm** (`srun`): `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, `SLURM_JOB_ID`,
//!   `SLURM_STEP_ID`, the node list (`SLURM_STEP_NODELIST`, else `SLURM_JOB_NODELIST`, in full
//!   host list syntax) and `SLURM_STEP_TASKS_PER_NODE` / `SLURM_TASKS_PER_NODE`. Addresses are
//!   exchanged at a rendezvous run by rank 0 on the first host of the node list.
//! - **Open MPI** (`mpirun`, ORTE or PRRTE): `OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}` (or
//!   `PMIX_RANK`), the job from `PMIX_NAMESPACE`. The rendezvous is on the host `mpirun` runs
//!   on (`OMPI_MCA_orte_hnp_uri`), where Open MPI places rank 0 by default.
//! - **PMI-1** (`mpiexec.hydra`, and other PMI-1 process managers): `PMI_RANK`, `PMI_SIZE`,
//!   `PMI_FD`; addresses go through the process manager's key-value space.
//! - **env**: `WEFT_RANK`, `WEFT_SIZE`, `WEFT_RENDEZVOUS` (`HOST:PORT`), for anything else.
//!
//! `WEFT_RENDEZVOUS` overrides the rendezvous's address under any launcher. The rendezvous port
//! is a formula of the job id ([`rendezvous_port`]), so no file or extra service is needed. An
//! environment that does not make sense (a rank not below the size, a node list that does not
//! parse) is an error naming the variable.

use super::hostlist;
use super::BootstrapError;
use std::collections::HashMap;

/// Where to read variables: the process's environment, or a recorded one (tests).
pub trait Env {
    /// The variable's value, if set.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process's own environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl Env for HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// What started this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Launcher {
    /// Slurm's `srun`.
    Slurm,
    /// Open MPI's `mpirun`.
    Ompi,
    /// A PMI-1 process manager (MPICH's `mpiexec.hydra`).
    Pmi,
    /// `WEFT_RANK` / `WEFT_SIZE` / `WEFT_RENDEZVOUS`.
    Env,
}

impl std::fmt::Display for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launcher::Slurm => "slurm",
            Launcher::Ompi => "ompi",
            Launcher::Pmi => "pmi",
            Launcher::Env => "env",
        })
    }
}

/// How the job's processes learn each other's addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// Through the PMI-1 key-value space on this socket.
    Pmi {
        /// `PMI_FD`.
        fd: i32,
    },
    /// At a rendezvous that rank 0 runs.
    Rendezvous {
        /// Host (name or address) of rank 0.
        host: String,
        /// Its port.
        port: u16,
    },
}

/// This process's place in a launched job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// What launched it.
    pub launcher: Launcher,
    /// Its rank: weft's node id.
    pub rank: u32,
    /// The job's size.
    pub size: u32,
    /// Its rank among the job's processes on this host, if the launcher says.
    pub local_rank: Option<u32>,
    /// The job's id as the launcher names it (with its step, where there is one): unique to
    /// this run, the seed of the rendezvous port and of a key derived from a shared secret.
    pub job: String,
    /// How addresses are exchanged.
    pub exchange: Exchange,
    /// The hosts of the job, in order, where the launcher says (Slurm).
    pub hosts: Vec<String>,
    /// The host this process runs on, as the launcher names it (Slurm's `SLURMD_NODENAME`):
    /// what tells hosts apart where their kernels share a name (containers, namespaces).
    pub node: Option<String>,
}

/// Which launcher to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Whichever the environment shows (Open MPI, then PMI-1, then Slurm, then env).
    Auto,
    /// Only this one.
    Only(Launcher),
}

/// The rendezvous port of `job`: 10 000–29 999, below Linux's ephemeral range, from a hash of
/// the job id (FNV-1a, then mixed), so every process of the job computes the same one.
pub fn rendezvous_port(job: &str) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // FNV's low bits follow the last bytes closely: mix before taking the remainder.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    10_000 + (h % 20_000) as u16
}

/// How many ports of the formula a rendezvous tries: two jobs whose ids hash to one port
/// (Slurm jobs 59 and 118, step 0) started together on one host would otherwise meet at
/// one rendezvous, and the second could not listen at all.
pub const RENDEZVOUS_PORTS: usize = 8;

/// The ports `job`'s rendezvous may take, in the order rank 0 tries to listen on them and
/// the other ranks look for it: [`rendezvous_port`] of the job id, then of `ID#1`, `ID#2`, …
pub fn rendezvous_ports(job: &str) -> Vec<u16> {
    let mut ports = vec![rendezvous_port(job)];
    for k in 1.. {
        if ports.len() == RENDEZVOUS_PORTS {
            break;
        }
        let p = rendezvous_port(&format!("{job}#{k}"));
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    ports
}

fn bad(variable: &str, why: impl Into<String>) -> BootstrapError {
    BootstrapError::Launcher {
        variable: variable.into(),
        why: why.into(),
    }
}

/// A required number (a rank or a size: at most [`super::MAX_JOB`]).
fn number(env: &dyn Env, name: &str) -> Result<u32, BootstrapError> {
    let v = env.var(name).ok_or_else(|| bad(name, "not set"))?;
    let shown: String = v.chars().take(24).collect();
    let n: u64 = v.trim().parse().map_err(|_| {
        let more = if v.chars().count() > 24 { "…" } else { "" };
        bad(name, format!("{shown:?}{more} is not a number"))
    })?;
    if n > u64::from(super::MAX_JOB) {
        return Err(bad(
            name,
            format!(
                "{n} is above the largest job weft runs ({})",
                super::MAX_JOB
            ),
        ));
    }
    Ok(n as u32)
}

/// An optional number (set but malformed is an error).
fn maybe_number(env: &dyn Env, name: &str) -> Result<Option<u32>, BootstrapError> {
    match env.var(name) {
        Some(_) => number(env, name).map(Some),
        None => Ok(None),
    }
}

/// Rank and size, checked against each other.
fn rank_size(env: &dyn Env, rank: &str, size: &str) -> Result<(u32, u32), BootstrapError> {
    let (r, s) = (number(env, rank)?, number(env, size)?);
    if s == 0 {
        return Err(bad(size, "a job of 0 processes"));
    }
    if r >= s {
        return Err(bad(rank, format!("rank {r} is not below {size}={s}")));
    }
    Ok((r, s))
}

/// `WEFT_RENDEZVOUS`, if set: `HOST:PORT`.
fn rendezvous_override(env: &dyn Env) -> Result<Option<Exchange>, BootstrapError> {
    let Some(v) = env.var("WEFT_RENDEZVOUS") else {
        return Ok(None);
    };
    let (host, port) = v
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| bad("WEFT_RENDEZVOUS", format!("{v:?} is not HOST:PORT")))?;
    let port: u16 = port.parse().ok().filter(|&p| p > 0).ok_or_else(|| {
        bad(
            "WEFT_RENDEZVOUS",
            format!("{v:?}: the port is not 1 to 65535"),
        )
    })?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad("WEFT_RENDEZVOUS", format!("{v:?} names no host")));
    }
    Ok(Some(Exchange::Rendezvous {
        host: host.to_string(),
        port,
    }))
}

fn slurm(env: &dyn Env) -> Result<Launch, BootstrapError> {
    let size_var = if env.var("SLURM_NTASKS").is_some() {
        "SLURM_NTASKS"
    } else {
        "SLURM_NPROCS"
    };
    let (rank, size) = rank_size(env, "SLURM_PROCID", size_var)?;
    let job_id = number(env, "SLURM_JOB_ID")?;
    let step = env.var("SLURM_STEP_ID").unwrap_or_else(|| "0".into());
    let job = format!("slurm-{job_id}.{}", step.trim());
    let list_var = if env.var("SLURM_STEP_NODELIST").is_some() {
        "SLURM_STEP_NODELIST"
    } else {
        "SLURM_JOB_NODELIST"
    };
    let list = env.var(list_var).ok_or_else(|| bad(list_var, "not set"))?;
    let hosts = hostlist::expand(&list).map_err(|e| bad(list_var, e.to_string()))?;
    for tasks_var in ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"] {
        if let Some(v) = env.var(tasks_var) {
            let per = hostlist::tasks_per_node(&v).map_err(|e| bad(tasks_var, e.to_string()))?;
            if per.len() != hosts.len() {
                return Err(bad(
                    tasks_var,
                    format!(
                        "{} hosts' counts for {} hosts in {list_var}",
                        per.len(),
                        hosts.len()
                    ),
                ));
            }
            break;
        }
    }
    let exchange = match rendezvous_override(env)? {
        Some(x) => x,
        None => Exchange::Rendezvous {
            host: hosts[0].clone(),
            port: rendezvous_port(&job),
        },
    };
    Ok(Launch {
        launcher: Launcher::Slurm,
        rank,
        size,
        local_rank: maybe_number(env, "SLURM_LOCALID")?,
        job,
        exchange,
        hosts,
        node: env.var("SLURMD_NODENAME").filter(|n| !n.trim().is_empty()),
    })
}

/// The host of `mpirun` from ORTE's `jobid.vpid;tcp://HOST:PORT;...` URI.
fn hnp_host(uri: &str) -> Option<String> {
    uri.split(';').find_map(|part| {
        let rest = part.strip_prefix("tcp://")?;
        let (host, _) = rest.rsplit_once(':')?;
        (!host.is_empty()).then(|| host.to_string())
    })
}

fn ompi(env: &dyn Env) -> Result<Launch, BootstrapError> {
    let rank_var = if env.var("OMPI_COMM_WORLD_RANK").is_some() {
        "OMPI_COMM_WORLD_RANK"
    } else {
        "PMIX_RANK"
    };
    let (rank, size) = rank_size(env, rank_var, "OMPI_COMM_WORLD_SIZE")?;
    let ns = env
        .var("PMIX_NAMESPACE")
        .or_else(|| env.var("OMPI_MCA_ess_base_jobid"))
        .ok_or_else(|| bad("PMIX_NAMESPACE", "not set (nor OMPI_MCA_ess_base_jobid)"))?;
    let job = format!("ompi-{}", ns.trim());
    let exchange = match rendezvous_override(env)? {
        Some(x) => x,
        None => {
            let uri = env.var("OMPI_MCA_orte_hnp_uri").ok_or_else(|| {
                bad(
                    "WEFT_RENDEZVOUS",
                    "not set, and no OMPI_MCA_orte_hnp_uri to find mpirun's host: \
                     set it to HOST:PORT of rank 0's host",
                )
            })?;
            let host = hnp_host(&uri).ok_or_else(|| {
                bad(
                    "OMPI_MCA_orte_hnp_uri",
                    format!("{uri:?} names no tcp:// host"),
                )
            })?;
            Exchange::Rendezvous {
                host,
                port: rendezvous_port(&job),
            }
        }
    };
    Ok(Launch {
        launcher: Launcher::Ompi,
        rank,
        size,
        local_rank: maybe_number(env, "OMPI_COMM_WORLD_LOCAL_RANK")?,
        job,
        exchange,
        hosts: Vec::new(),
        node: None,
    })
}

fn pmi(env: &dyn Env) -> Result<Launch, BootstrapError> {
    let (rank, size) = rank_size(env, "PMI_RANK", "PMI_SIZE")?;
    let fd = number(env, "PMI_FD")? as i32;
    Ok(Launch {
        launcher: Launcher::Pmi,
        rank,
        size,
        local_rank: maybe_number(env, "MPI_LOCALRANKID")?,
        // The key-value space's name, which names the job, comes with PMI's init.
        job: String::new(),
        exchange: Exchange::Pmi { fd },
        hosts: Vec::new(),
        node: None,
    })
}

fn plain(env: &dyn Env) -> Result<Launch, BootstrapError> {
    let (rank, size) = rank_size(env, "WEFT_RANK", "WEFT_SIZE")?;
    let exchange = rendezvous_override(env)?.ok_or_else(|| {
        bad(
            "WEFT_RENDEZVOUS",
            "not set: HOST:PORT of rank 0's rendezvous",
        )
    })?;
    Ok(Launch {
        launcher: Launcher::Env,
        rank,
        size,
        local_rank: None,
        job: env.var("WEFT_JOB").unwrap_or_else(|| "weft".into()),
        exchange,
        hosts: Vec::new(),
        node: None,
    })
}

/// This process's place in the job, as `want` says to read it.
pub fn detect(want: Want, env: &dyn Env) -> Result<Launch, BootstrapError> {
    let seen = |v: &str| env.var(v).is_some();
    let launcher =
        match want {
            Want::Only(l) => l,
            Want::Auto if seen("OMPI_COMM_WORLD_RANK") || seen("PMIX_RANK") => Launcher::Ompi,
            // srun's own PMI_FD speaks PMI-2 (`--mpi=pmi2`): under Slurm, the rendezvous.
            Want::Auto if seen("PMI_FD") && !seen("SLURM_PROCID") => Launcher::Pmi,
            Want::Auto if seen("SLURM_PROCID") => Launcher::Slurm,
            Want::Auto if seen("WEFT_RANK") => Launcher::Env,
            Want::Auto => return Err(BootstrapError::NoLauncher(
                "none of OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_FD, SLURM_PROCID, WEFT_RANK is set"
                    .into(),
            )),
        };
    match launcher {
        Launcher::Slurm => slurm(env),
        Launcher::Ompi => ompi(env),
        Launcher::Pmi => pmi(env),
        Launcher::Env => plain(env),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// What `srun -N 3 -n 7` sets on the third task (recorded, trimmed to what weft reads).
    fn srun() -> HashMap<String, String> {
        env(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "7"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_JOB_ID", "41200"),
            ("SLURM_STEP_ID", "3"),
            ("SLURM_STEP_NODELIST", "gnode[010,020-021]"),
            ("SLURM_JOB_NODELIST", "gnode[010,020-022]"),
            ("SLURM_STEP_TASKS_PER_NODE", "3,2(x2)"),
            ("SLURMD_NODENAME", "gnode010"),
        ])
    }

    #[test]
    fn slurm_as_srun_sets_it() {
        let l = detect(Want::Auto, &srun()).unwrap();
        assert_eq!(
            (l.launcher, l.rank, l.size, l.local_rank),
            (Launcher::Slurm, 2, 7, Some(0))
        );
        assert_eq!(l.job, "slurm-41200.3");
        assert_eq!(l.hosts, ["gnode010", "gnode020", "gnode021"]);
        assert_eq!(l.node.as_deref(), Some("gnode010"));
        assert_eq!(
            l.exchange,
            Exchange::Rendezvous {
                host: "gnode010".into(),
                port: rendezvous_port("slurm-41200.3")
            }
        );
    }

    #[test]
    fn a_malformed_environment_names_its_variable() {
        let with = |k: &str, v: &str| {
            let mut e = srun();
            e.insert(k.into(), v.into());
            e
        };
        for (k, v) in [
            ("SLURM_PROCID", "7"),
            ("SLURM_PROCID", "two"),
            ("SLURM_NTASKS", "0"),
            ("SLURM_STEP_NODELIST", "gnode[010,020-"),
            ("SLURM_STEP_TASKS_PER_NODE", "3,2"),
            ("SLURM_LOCALID", "x"),
        ] {
            let e = detect(Want::Auto, &with(k, v)).unwrap_err();
            assert!(e.to_string().contains(k), "{k}={v}: {e}");
        }
        let mut e = srun();
        e.remove("SLURM_JOB_ID");
        assert!(detect(Want::Auto, &e)
            .unwrap_err()
            .to_string()
            .contains("SLURM_JOB_ID"));
    }

    #[test]
    fn open_mpi_as_mpirun_sets_it() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("PMIX_RANK", "1"),
            ("PMIX_NAMESPACE", "2105475073"),
            (
                "OMPI_MCA_orte_hnp_uri",
                "2105475072.0;tcp://192.0.2.2:60197;tcp6://[fd00::2]:50683",
            ),
        ]);
        let l = detect(Want::Auto, &e).unwrap();
        assert_eq!((l.launcher, l.rank, l.size), (Launcher::Ompi, 1, 2));
        assert_eq!(
            l.exchange,
            Exchange::Rendezvous {
                host: "192.0.2.2".into(),
                port: rendezvous_port("ompi-2105475073")
            }
        );
        // WEFT_RENDEZVOUS wins; without it or the URI, the error says what to set.
        let mut o = e.clone();
        o.insert("WEFT_RENDEZVOUS".into(), "[::1]:5000".into());
        assert_eq!(
            detect(Want::Auto, &o).unwrap().exchange,
            Exchange::Rendezvous {
                host: "::1".into(),
                port: 5000
            }
        );
        let mut n = e;
        n.remove("OMPI_MCA_orte_hnp_uri");
        assert!(detect(Want::Auto, &n)
            .unwrap_err()
            .to_string()
            .contains("WEFT_RENDEZVOUS"));
    }

    #[test]
    fn hydra_is_pmi_and_srun_with_a_pmi_fd_is_slurm() {
        let hydra = env(&[("PMI_RANK", "0"), ("PMI_SIZE", "8"), ("PMI_FD", "6")]);
        let l = detect(Want::Auto, &hydra).unwrap();
        assert_eq!(
            (l.launcher, l.exchange),
            (Launcher::Pmi, Exchange::Pmi { fd: 6 })
        );
        let mut s = srun();
        s.insert("PMI_FD".into(), "9".into());
        assert_eq!(detect(Want::Auto, &s).unwrap().launcher, Launcher::Slurm);
        let bad = env(&[("PMI_RANK", "8"), ("PMI_SIZE", "8"), ("PMI_FD", "6")]);
        assert!(detect(Want::Auto, &bad)
            .unwrap_err()
            .to_string()
            .contains("PMI_RANK"));
    }

    #[test]
    fn nothing_to_read_is_an_error_and_a_forced_launcher_reads_only_its_own() {
        assert!(matches!(
            detect(Want::Auto, &env(&[])),
            Err(BootstrapError::NoLauncher(_))
        ));
        let e = detect(Want::Only(Launcher::Slurm), &env(&[("PMI_RANK", "0")])).unwrap_err();
        assert!(e.to_string().contains("SLURM_PROCID"), "{e}");
        let plain = env(&[
            ("WEFT_RANK", "3"),
            ("WEFT_SIZE", "4"),
            ("WEFT_RENDEZVOUS", "h:9"),
        ]);
        let l = detect(Want::Auto, &plain).unwrap();
        assert_eq!((l.launcher, l.rank, l.size), (Launcher::Env, 3, 4));
        for v in ["h", "h:0", ":9", "h:x"] {
            let mut p = plain.clone();
            p.insert("WEFT_RENDEZVOUS".into(), v.into());
            assert!(detect(Want::Auto, &p).is_err(), "{v}");
        }
    }

    #[test]
    fn the_rendezvous_port_is_the_jobs_own_and_below_the_ephemeral_range() {
        let ports: std::collections::HashSet<u16> = (0..1000)
            .map(|i| rendezvous_port(&format!("slurm-{i}.0")))
            .collect();
        assert!(ports.len() > 950, "spread: {}", ports.len());
        assert!(ports.iter().all(|p| (10_000..30_000).contains(p)));
        // Jobs 59 and 118 of Slurm (step 0) share the first port and part ways after it.
        let (a, b) = (
            rendezvous_ports("slurm-59.0"),
            rendezvous_ports("slurm-118.0"),
        );
        assert_eq!(a.len(), RENDEZVOUS_PORTS);
        assert_eq!(a[0], rendezvous_port("slurm-59.0"));
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        assert_eq!(distinct.len(), a.len());
        assert!(a.iter().zip(&b).skip(1).any(|(x, y)| x != y));
    }
}

//! The `weft` command line: argument types and one module per subcommand. Subcommands parse,
//! call the library and print; no protocol or measurement logic lives here.

/// `println!`, except that a closed stdout ends the program instead of panicking: quietly
/// (status 0) when the reader went away, as in `weft bench stabilize --json | head -1`, with
/// the reason otherwise.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::cli::stdout_failed(e)
        }
    }};
}

pub mod bench_agree;
pub mod bench_bmg;
pub mod bench_bmg_node;
pub mod bench_broadcast;
pub mod bench_checkpoint;
pub mod bench_heartbeat;
pub mod bench_route;
pub mod bench_stabilize;
pub mod bsp_run;
pub mod checks;
pub mod ida;
pub mod model_validate;
pub mod node;
pub mod ping;
pub mod plot;
pub mod sim_bmg;
pub mod sim_broadcast;
pub mod sim_bsp;
pub mod sim_faults;
pub mod sim_stabilize;
pub mod values;

use clap::{Args, Parser, Subcommand};
use values::{BackendArg, TransportArg, TreeModeArg, WaitArg};
use weft::bench::scenario::{parse_victims, Fail};
use weft::bench::stabilize::{job_options, BenchConfig};
use weft::proto::membership::{TreeMode, ORPHAN_HOLD};

/// weft: a resilient communication layer for HPC runtime environments.
#[derive(Parser, Debug)]
#[command(name = "weft", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The membership tree and its rules, shared by the commands that run membership.
#[derive(Args, Debug)]
pub struct TreeArgs {
    /// Children per node (a power of two).
    #[arg(long, default_value_t = 4)]
    pub radix: u32,
    /// Paper's local patching, or recompute the balanced tree.
    #[arg(long, value_enum, default_value = "patch")]
    pub mode: TreeModeArg,
    /// A process whose parent failed leaves the report to that parent's own parent for this
    /// many µs, and makes it only if none came (0: at once, as in the paper).
    #[arg(long, default_value_t = ORPHAN_HOLD.as_micros() as u64)]
    pub orphan_hold_us: u64,
    /// Failures the root learns while an epoch is on its way wait for it and go into the
    /// next one together (ICS'06's rule), instead of restarting it.
    #[arg(long)]
    pub collect: bool,
}

impl TreeArgs {
    /// Check the tree's settings (before anything runs).
    pub fn check(&self) -> anyhow::Result<()> {
        checks::radix(self.radix)?;
        checks::micros("--orphan-hold-us", self.orphan_hold_us)?;
        Ok(())
    }

    /// The tree mode.
    pub fn mode(&self) -> TreeMode {
        self.mode.into()
    }

    /// The orphan hold as a duration (checked by [`Self::check`]).
    pub fn orphan_hold(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.orphan_hold_us)
    }

    /// A stabilization benchmark of `n` in-process nodes with this tree, `engine`'s settings
    /// and the usual rest ([`BenchConfig::new`]).
    pub fn bench(&self, n: u32, fail: Fail, seed: u64, engine: &EngineArgs) -> BenchConfig {
        BenchConfig {
            orphan_hold: self.orphan_hold(),
            collect: self.collect,
            ..BenchConfig::new(n, self.radix, self.mode(), fail, seed, engine.job_options())
        }
    }
}

/// Which processes fail, shared by the commands that kill some.
#[derive(Args, Debug)]
pub struct FailArgs {
    /// leaf, inner, root, multi:K (K random non-root processes), root+K (the root and K
    /// others), or with processes on several hosts (--hosts, a launcher) host (every process
    /// of a host crashes), and on --hosts host-down (its link goes down) or link (the link
    /// between it and the root's host carries nothing; both see --dead-after-ms).
    #[arg(long, default_value = "inner")]
    pub fail: Fail,
    /// Kill these processes, in this order, instead of a --fail draw: n0,n1 (the root, then
    /// the next in line).
    #[arg(long, conflicts_with = "fail")]
    pub victims: Option<String>,
}

impl FailArgs {
    /// The failure case: the named victims, or the --fail draw.
    pub fn fail(&self) -> anyhow::Result<Fail> {
        Ok(match &self.victims {
            Some(v) => Fail::Named(parse_victims(v).map_err(anyhow::Error::msg)?),
            None => self.fail.clone(),
        })
    }
}

/// How engine nodes run, shared by the commands that start them.
#[derive(Args, Debug)]
pub struct EngineArgs {
    /// I/O backend (default: automatic, or WEFT_BACKEND).
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// How reactors wait. Many nodes share the cores here, so blocking is the default.
    #[arg(long, value_enum, default_value = "block")]
    pub wait: WaitArg,
    /// How nodes reach their peers (default: automatic, or WEFT_TRANSPORT): nodes of one
    /// process in-process, processes of one host through shared memory, others over TCP.
    /// `weft bench stabilize` takes several (tcp,inproc,shm) and prints a row for each.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub transport: Vec<TransportArg>,
}

impl EngineArgs {
    /// The engine settings of a job these flags start ([`job_options`]), with the first
    /// `--transport` (see [`Self::one_transport`]).
    pub fn job_options(&self) -> weft::transport::NodeOptions {
        weft::transport::NodeOptions {
            transport: self.transport.first().copied().map(Into::into),
            ..job_options(self.wait.into(), self.backend.map(Into::into))
        }
    }

    /// Every `--transport` asked for, or the automatic choice alone.
    pub fn transports(&self) -> Vec<Option<weft::transport::Transport>> {
        match self.transport.as_slice() {
            [] => vec![None],
            t => t.iter().map(|&t| Some(t.into())).collect(),
        }
    }

    /// Refuse several `--transport`s, for a command that runs one.
    pub fn one_transport(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.transport.len() <= 1,
            "--transport: this command runs one transport (weft bench stabilize takes several)"
        );
        Ok(())
    }
}

/// Top-level subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Measure protocols on real sockets.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// One membership node as its own process (multi-process jobs).
    Node(node::NodeArgs),
    /// Latency models against measurements.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Run protocols in the deterministic simulator.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Ping-pong latency and bandwidth between two nodes on loopback.
    Ping(ping::PingArgs),
    /// Rabin's information dispersal: robust storage of files as pieces.
    #[command(subcommand)]
    Ida(ida::IdaCommand),
    /// Robust-BSP programs on real nodes.
    #[command(subcommand)]
    Bsp(BspCommand),
}

/// `weft bsp ...`
#[derive(Subcommand, Debug)]
pub enum BspCommand {
    /// A BSP program (prefix-sum, jacobi) on in-process engine nodes, checkpointed in IDA
    /// neighborhoods after every superstep, with nodes killed while it runs; the result
    /// checked against a fault-free run, the time beside a run without kills.
    Run(bsp_run::BspRunArgs),
}

/// `weft bench ...`
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Radix-tree membership: Ts after a real failure on in-process nodes (the main job).
    Stabilize(bench_stabilize::BenchStabilizeArgs),
    /// In-memory checkpoints: every node protects a state, some are killed, survivors rebuild
    /// them; weft's IDA neighborhoods beside partner copy and SCR-style XOR sets.
    Checkpoint(bench_checkpoint::BenchCheckpointArgs),
    /// The endpoint's uniform agreement (ULFM's agree) with nodes killed during the call,
    /// beside the membership's Ts in the same trials.
    Agree(bench_agree::BenchAgreeArgs),
    /// Routing over the BMG: messages to any rank and a broadcast around killed nodes, a hop's
    /// cost beside the engine's one-way latency.
    Route(bench_route::BenchRouteArgs),
    /// The BMG built from a launch tree on real nodes, timed and checked, beside the
    /// simulator's projection with the costs measured in the same run.
    Bmg(bench_bmg::BenchBmgArgs),
    /// One node process of `weft bench bmg --procs` (started by that command).
    #[command(hide = true)]
    BmgNode(bench_bmg_node::BenchBmgNodeArgs),
    /// The Process Order broadcast (Gendelman et al. section 2): central coordinator (C),
    /// hierarchy with reconnection (H1) and without (H2), beside a grid application, with a
    /// failure in the middle of the stream if asked.
    Broadcast(bench_broadcast::BenchBroadcastArgs),
    /// Ring heartbeats (Gendelman et al. section 5.1): how fast a hung process is suspected,
    /// and how often a live one is, with both cores busy.
    Heartbeat(bench_heartbeat::BenchHeartbeatArgs),
}

/// `weft model ...`
#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Measure L, Ocp and c here, run the real sweep, compare the base, distance and
    /// contention models with it (ICS'06 section 7).
    Validate(model_validate::ValidateArgs),
}

/// `weft sim ...`
#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Build a ring and a binomial graph from a launch tree (Bosilca et al. 2009).
    Bmg(sim_bmg::BmgArgs),
    /// Radix-tree membership: tree stabilization after failures (Varma et al., ICS'06).
    Stabilize(sim_stabilize::StabilizeArgs),
    /// Process Order total-order broadcast under random failures, joins, recoveries, leaves
    /// and hangs, every schedule checked (Gendelman et al. 2000).
    Broadcast(sim_broadcast::SimBroadcastArgs),
    /// Robust-BSP: virtual processors on real ones that die, the result checked against a
    /// fault-free run (Kontogiannis et al.).
    Bsp(sim_bsp::SimBspArgs),
    /// Random fault schedules (loss, duplication, reordering, delay, partitions, hangs,
    /// crashes) for a protocol, each checked once its faults are over; a failing one is
    /// shrunk to a short reproduction.
    Faults(sim_faults::SimFaultsArgs),
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    // In-process jobs hold a few descriptors per node; where the soft limit cannot be raised
    // the job runs with what there is, and says so if it runs out.
    let _ = weft::engine::raise_descriptor_limit();
    match cli.command {
        Command::Bench(BenchCommand::Stabilize(args)) => bench_stabilize::run(args),
        Command::Bench(BenchCommand::Checkpoint(args)) => bench_checkpoint::run(args),
        Command::Bench(BenchCommand::Agree(args)) => bench_agree::run(args),
        Command::Bench(BenchCommand::Route(args)) => bench_route::run(args),
        Command::Bench(BenchCommand::Bmg(args)) => bench_bmg::run(args),
        Command::Bench(BenchCommand::BmgNode(args)) => bench_bmg_node::run(args),
        Command::Bench(BenchCommand::Broadcast(args)) => bench_broadcast::run(args),
        Command::Bench(BenchCommand::Heartbeat(args)) => bench_heartbeat::run(args),
        Command::Model(ModelCommand::Validate(args)) => model_validate::run(args),
        Command::Node(args) => node::run_node(args),
        Command::Sim(SimCommand::Bmg(args)) => sim_bmg::run(args),
        Command::Sim(SimCommand::Stabilize(args)) => sim_stabilize::run(args),
        Command::Sim(SimCommand::Broadcast(args)) => sim_broadcast::run_cmd(args),
        Command::Sim(SimCommand::Bsp(args)) => sim_bsp::run_cmd(args),
        Command::Sim(SimCommand::Faults(args)) => sim_faults::run_cmd(args),
        Command::Ida(cmd) => ida::run(cmd),
        Command::Bsp(BspCommand::Run(args)) => bsp_run::run(args),
        Command::Ping(args) => ping::run(args),
    }
}

/// A `--congestion` argument: "system" leaves the machine's default.
pub(crate) fn congestion_arg(name: &str) -> Option<String> {
    (name != "system").then(|| name.to_string())
}

/// Stdout cannot be written: see [`say!`].
pub(crate) fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("weft: error: cannot write to stdout: {e}");
    std::process::exit(1);
}

/// A command's own flags, for the ranks it starts on `--hosts` (`weft <…> after <flags>`):
/// what follows `after`, less what only the harness reads (`--hosts`, `--shape`, the sizes,
/// `--json`, and `also` with their values).
pub(crate) fn forwarded(
    args: impl Iterator<Item = std::ffi::OsString>,
    after: &str,
    also: &[&str],
) -> Vec<std::ffi::OsString> {
    let valued: Vec<&str> = ["--hosts", "--shape", "--nodes", "--nodes-list"]
        .iter()
        .chain(also)
        .copied()
        .collect();
    let mut out = Vec::new();
    let mut args = args.skip_while(|a| a != after).skip(1);
    while let Some(a) = args.next() {
        let s = a.to_string_lossy();
        if valued.contains(&s.as_ref()) {
            args.next();
        } else if s == "--json" || valued.iter().any(|f| s.starts_with(&format!("{f}="))) {
        } else {
            out.push(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::forwarded;

    #[test]
    fn the_harness_keeps_the_trial_flags_and_drops_its_own() {
        let args = "weft bench stabilize --hosts 4 --nodes-list 8,16 --fail host-down \
                    --shape=1gbit --json --nodes=8 --repeat 3 --seed 7";
        let got: Vec<String> = forwarded(args.split_whitespace().map(Into::into), "stabilize", &[])
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(got, ["--fail", "host-down", "--repeat", "3", "--seed", "7"]);
        let args = "weft model validate --hosts 2 --plot v.svg --nodes-list 4 --radix 2";
        let got: Vec<String> = forwarded(
            args.split_whitespace().map(Into::into),
            "validate",
            &["--plot"],
        )
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
        assert_eq!(got, ["--radix", "2"]);
    }
}

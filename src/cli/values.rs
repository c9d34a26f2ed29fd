//! The command line's names for library choices. The library's enums know nothing of clap;
//! each one here is the CLI's own, with the help text a user sees, mapped onto the library's.

/// A CLI value enum `$arg` mapped variant for variant onto the library enum `$lib`.
macro_rules! value_enum {
    ($(#[$meta:meta])* $arg:ident => $lib:ty { $($(#[$vmeta:meta])* $v:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
        pub enum $arg {
            $($(#[$vmeta])* $v),+
        }

        impl From<$arg> for $lib {
            fn from(a: $arg) -> Self {
                match a {
                    $($arg::$v => <$lib>::$v),+
                }
            }
        }
    };
}

value_enum! {
    /// How the membership tree follows failures.
    TreeModeArg => weft::proto::membership::TreeMode {
        /// The paper's local recalculation: a failed node's children move to its parent.
        Patch,
        /// Recompute the balanced radix tree over the live view.
        Rebalance,
        /// Rebalance over the view sorted by id: the lowest live id is always the root, a
        /// recovered process with a lower id takes the root back (ICS'06).
        Lowest,
    }
}

value_enum! {
    /// How a reactor waits for work.
    WaitArg => weft::engine::WaitMode {
        /// Poll with a zero timeout, forever: lowest latency, one core at 100%.
        Busy,
        /// Sleep in the kernel until an event or a timer: no CPU when idle.
        Block,
        /// Spin for 200 µs after the last event, then block: busy-like latency under load,
        /// idle when idle.
        Adaptive,
    }
}

value_enum! {
    /// The engine's I/O backend.
    BackendArg => weft::engine::Backend {
        /// io_uring: accepts, connects, receives and sends through the ring.
        Uring,
        /// epoll readiness, then `recv` and `writev`.
        Poll,
    }
}

value_enum! {
    /// How nodes reach their peers.
    TransportArg => weft::transport::Transport {
        /// The fastest that reaches each peer: in-process between nodes of one process,
        /// shared memory between processes of one host, TCP otherwise (TCP for all with
        /// reconnection).
        Auto,
        /// TCP for every peer, loopback included.
        Tcp,
        /// In-process between nodes of one process, TCP to the rest.
        Inproc,
        /// Shared-memory rings to every peer on this host (nodes of one process included),
        /// TCP to the rest.
        Shm,
    }
}

value_enum! {
    /// How in-process nodes are spread over the reactors (one per core).
    PlacementArg => weft::bench::stabilize::Placement {
        /// Whole subtrees of the initial radix tree per reactor: most tree edges stay on one
        /// core.
        Subtree,
        /// Node i on reactor i mod reactors: every parent's children spread over all cores.
        RoundRobin,
    }
}

value_enum! {
    /// The simulator's latency model.
    NetArg => weft::sim::stabilize::NetKind {
        /// Base model: every message takes L.
        Constant,
        /// Distance model: hops on a BG/L torus partition (XYZ order; --torus) × L.
        Torus,
        /// Constant L plus `send` CPU per message sent, so a parent's k-th child hears k × send
        /// later.
        Contention,
    }
}

value_enum! {
    /// The simulator's scheduler.
    SchedulerArg => weft::sim::Scheduler {
        /// Phases: every process fires its due rules, then consumes every message it has.
        Sync,
        /// Steps: each process fires one rule or consumes one message.
        Async,
    }
}

/// What an asynchronous step does when a process could both fire a rule and take a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AsyncPolicyArg {
    /// The message (the policy under which the paper's figures reproduce).
    MsgFirst,
    /// Alternate between the two.
    Alternate,
    /// A seeded coin, and seeded per-message delays up to --max-delay steps.
    Random,
}

impl AsyncPolicyArg {
    /// The library's policy, with `max_delay` for the random one.
    pub fn policy(self, max_delay: u32) -> weft::sim::AsyncPolicy {
        match self {
            AsyncPolicyArg::MsgFirst => weft::sim::AsyncPolicy::MsgFirst,
            AsyncPolicyArg::Alternate => weft::sim::AsyncPolicy::Alternate,
            AsyncPolicyArg::Random => weft::sim::AsyncPolicy::Random { max_delay },
        }
    }
}

value_enum! {
    /// The initial configuration of the BMG construction.
    InitArg => weft::sim::bmg::Init {
        /// Every Succ, Pred, CW, CCW is ⊥ and channels are empty (the paper's runs).
        Empty,
        /// Arbitrary: random values everywhere and garbage messages in the channels.
        Random,
    }
}

value_enum! {
    /// The shape of a launch tree.
    TreeKindArg => weft::sim::tree::TreeKind {
        /// Balanced binary tree: 2^(depth+1) - 1 processes.
        Binary,
        /// Binomial tree B_depth: 2^depth processes.
        Binomial,
        /// Random tree of the given depth and maximal degree.
        Random,
    }
}

value_enum! {
    /// An implementation of the GF(2^8) region kernels.
    KernelArg => weft::ida::Kernel {
        /// Portable table lookups.
        Scalar,
        /// x86-64 SSSE3 split-nibble PSHUFB.
        Ssse3,
        /// x86-64 AVX2 split-nibble VPSHUFB.
        Avx2,
        /// x86-64 GFNI affine transform on 256-bit registers.
        Gfni,
        /// x86-64 GFNI affine transform on 512-bit registers.
        Avx512,
        /// aarch64 NEON split-nibble TBL.
        Neon,
    }
}

value_enum! {
    /// How IDA pieces relate to the data.
    IdaModeArg => weft::ida::Mode {
        /// Every piece is a linear combination of all chunks (Rabin 1989).
        Rabin,
        /// Pieces 0..m hold the data; the rest are parity.
        Systematic,
    }
}

/// Where a process learns its rank, the job's size and its peers' addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BootstrapArg {
    /// Whatever launched it: Open MPI, then a PMI-1 process manager, then Slurm, then the
    /// WEFT_RANK / WEFT_SIZE / WEFT_RENDEZVOUS variables.
    Auto,
    /// Slurm's srun (SLURM_PROCID, SLURM_NTASKS, the node list; rendezvous on its first host).
    Slurm,
    /// Open MPI's mpirun (OMPI_COMM_WORLD_*; rendezvous on mpirun's host).
    Ompi,
    /// A PMI-1 process manager such as mpiexec.hydra (PMI_FD; the key-value space).
    Pmi,
    /// WEFT_RANK, WEFT_SIZE and WEFT_RENDEZVOUS=HOST:PORT.
    Env,
    /// --id, --nodes and --peers (or --peers-stdin).
    Peers,
}

impl BootstrapArg {
    /// The launcher to read; `None` for `peers`.
    pub fn want(self) -> Option<weft::bootstrap::Want> {
        use weft::bootstrap::{Launcher, Want};
        Some(match self {
            BootstrapArg::Auto => Want::Auto,
            BootstrapArg::Slurm => Want::Only(Launcher::Slurm),
            BootstrapArg::Ompi => Want::Only(Launcher::Ompi),
            BootstrapArg::Pmi => Want::Only(Launcher::Pmi),
            BootstrapArg::Env => Want::Only(Launcher::Env),
            BootstrapArg::Peers => return None,
        })
    }
}

//! The engine: reactors that move frames between sockets and sans-IO protocols.
//!
//! One reactor thread per core, pinned, hosting many nodes, each with its own listener,
//! connections, timers and protocol, with no locks on the hot path. Two backends behind one
//! reactor ([`reactor`]): `uring` (accept, connect, multishot receive into a provided buffer
//! ring, and gather sends, all through io_uring, [`uring`]) and `poll` (epoll readiness, then
//! `read` and `writev`). The choice is automatic (io_uring unless the
//! kernel or sandbox refuses it, said once on stderr), or forced by `--backend` or
//! `WEFT_BACKEND`. The engine knows frames and timers, never protocol rules.

pub mod clock;
pub mod congestion;
pub mod guard;
pub mod link;
pub mod options;
pub mod reactor;
pub mod table;
pub mod timers;
pub mod uring;

pub use options::ReactorOptions;
use serde::Serialize;
use std::fmt;
use std::sync::Once;
use std::time::Duration;

/// How a reactor waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitMode {
    /// Poll with a zero timeout, forever: lowest latency, one core at 100%.
    Busy,
    /// Sleep in the kernel until an event or a timer: no CPU when idle, a wake-up costs ~50 µs
    /// on this VM.
    Block,
    /// Spin for 200 µs (`SPIN`) after the last event, then block: busy-like latency under
    /// load, idle when idle.
    Adaptive,
}

/// How long an adaptive reactor keeps spinning after its last event (the command line's help
/// for `--wait adaptive` says the number).
pub const SPIN: Duration = Duration::from_micros(200);

impl fmt::Display for WaitMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WaitMode::Busy => "busy",
            WaitMode::Block => "block",
            WaitMode::Adaptive => "adaptive",
        })
    }
}

/// The I/O backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// io_uring: multishot receive into a provided buffer ring.
    Uring,
    /// mio over epoll.
    Poll,
}

impl Backend {
    /// Both backends, for code (and tests) that runs the same thing on each.
    pub const ALL: [Backend; 2] = [Backend::Poll, Backend::Uring];
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Uring => "uring",
            Backend::Poll => "poll",
        })
    }
}

/// Why the engine could not run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A socket or poll call failed. Said in the message, not chained as a source: the
    /// CLI prints error chains, and said twice it read "I/O: X: X".
    #[error("I/O: {0}")]
    Io(std::io::Error),
    /// The requested backend cannot run.
    #[error("backend {0}: {1}")]
    Backend(Backend, String),
    /// `WEFT_BACKEND` names no backend.
    #[error("WEFT_BACKEND={0:?} is neither uring nor poll")]
    BadBackendEnv(String),
    /// The reactor thread panicked.
    #[error("reactor thread panicked")]
    Panicked,
    /// The node's reactor stopped before handing the node back (it failed; see its error).
    #[error("the node's reactor is gone")]
    Gone,
    /// A setting that cannot work.
    #[error("configuration: {0}")]
    Config(String),
}

impl From<std::io::Error> for EngineError {
    fn from(e: std::io::Error) -> Self {
        EngineError::Io(e)
    }
}

static FALLBACK_NOTICE: Once = Once::new();

/// The backend to use: `requested`, else `WEFT_BACKEND`, else io_uring when this kernel and
/// sandbox allow it (probed once: a ring and a provided-buffer ring are set up), else poll,
/// saying once on stderr why. A forced io_uring that cannot run is an error, never a fallback.
///
/// The probe's small ring can pass where a reactor's full-sized one is refused (a locked-memory
/// limit that the probe fits in and every reactor's ring together does not): a reactor of an
/// automatic choice then runs on poll (the reactor's `fallback`).
pub fn choose_backend(requested: Option<Backend>) -> Result<Backend, EngineError> {
    match forced_backend(requested)? {
        Some(Backend::Uring) => match uring_unavailable() {
            None => Ok(Backend::Uring),
            Some(why) => Err(EngineError::Backend(Backend::Uring, why)),
        },
        Some(Backend::Poll) => Ok(Backend::Poll),
        None => match uring_unavailable() {
            None => Ok(Backend::Uring),
            Some(why) => {
                say_fallback(&why, "using the poll (epoll) backend");
                Ok(Backend::Poll)
            }
        },
    }
}

/// The backend `requested`, else the one `WEFT_BACKEND` names; `None` for the automatic
/// choice.
pub fn forced_backend(requested: Option<Backend>) -> Result<Option<Backend>, EngineError> {
    if requested.is_some() {
        return Ok(requested);
    }
    match std::env::var("WEFT_BACKEND") {
        Ok(v) if v.trim().eq_ignore_ascii_case("uring") => Ok(Some(Backend::Uring)),
        Ok(v) if v.trim().eq_ignore_ascii_case("poll") => Ok(Some(Backend::Poll)),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Err(EngineError::BadBackendEnv(v)),
        Err(_) => Ok(None),
    }
}

/// Say on stderr, once per process, that io_uring could not be used (`why`) and what happens
/// instead (`instead`): the fallback is never silent, and a process with a reactor per core
/// does not say it per reactor.
pub(crate) fn say_fallback(why: &str, instead: &str) {
    FALLBACK_NOTICE.call_once(|| notice(&format!("io_uring unavailable ({why}); {instead}")));
}

/// `weft: {what}` on stderr as one line in one write. `eprintln!` writes a formatted line in
/// pieces, and the notices of a job's processes, which share one stderr, came out interleaved
/// mid-line.
pub(crate) fn notice(what: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("weft: {what}\n").as_bytes());
}

/// Why io_uring cannot be used, or `None`. Probed once per process.
pub fn uring_unavailable() -> Option<String> {
    static PROBE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PROBE.get_or_init(uring::unavailable).clone()
}

/// CPUs online on the machine. Not the caller's affinity mask (what `core_affinity` and
/// `available_parallelism` report): a caller pinned to one core would otherwise put every node
/// on that core, where two busy reactors take turns a scheduler tick apart (8 ms per round trip).
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

/// Raise this process's soft limit on open descriptors to its hard limit (at most
/// `fs.nr_open`), as Go's runtime does for every program; returns the soft limit now in
/// force. A process hosting many nodes needs it: each node holds a listener and its
/// connections at both ends, and the default soft limit on Debian, 1024, stopped a 256-node
/// in-process job with "Too many open files".
pub fn raise_descriptor_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The kernel refuses a descriptor limit above fs.nr_open, even when the hard one is
    // "unlimited".
    let ceiling = nr_open().unwrap_or(lim.rlim_max);
    let want = lim.rlim_max.min(ceiling);
    if lim.rlim_cur >= want {
        return Ok(lim.rlim_cur);
    }
    lim.rlim_cur = want;
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(want)
}

/// The kernel's ceiling on any descriptor limit (`fs.nr_open`), if it says.
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
}

/// [`raise_descriptor_limit`], and when `need` descriptors are more than the hard limit,
/// the hard limit raised to `need` too (at most `fs.nr_open`), which a process with
/// `CAP_SYS_RESOURCE` (root) may do; returns the soft limit now in force, below `need` when
/// the kernel refused.
pub fn raise_descriptor_limit_for(need: u64) -> std::io::Result<u64> {
    let now = raise_descriptor_limit()?;
    if now >= need {
        return Ok(now);
    }
    let ceiling = nr_open().unwrap_or(need);
    let want = need.min(ceiling);
    let lim = libc::rlimit {
        rlim_cur: want,
        rlim_max: want,
    };
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Ok(now); // EPERM without CAP_SYS_RESOURCE: the caller says what is missing
    }
    Ok(want)
}

/// User plus system CPU time of this process so far (every reactor thread included): what a
/// benchmark charges to the work between two readings.
pub fn process_cpu() -> Duration {
    // SAFETY: rusage is plain integers, for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given, which outlives the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time the hypervisor gave to others while this machine's CPUs wanted to run (the
/// `steal` column of `/proc/stat`, all CPUs together), since boot; `None` where the kernel
/// does not say. On a shared VM a stolen vCPU stalls whatever runs on it for milliseconds,
/// which shows as latency outliers no code path explains: benchmarks report it beside their
/// figures.
pub fn host_steal() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // SAFETY: sysconf takes no pointers.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    steal_in(&stat, u64::try_from(hz).ok().filter(|&h| h > 0)?)
}

/// Measures the share of the CPUs' time the hypervisor stole between its start and a reading.
#[derive(Clone, Copy, Debug)]
pub struct StealMeter {
    before: Option<Duration>,
    started: std::time::Instant,
}

impl StealMeter {
    /// Start measuring now.
    pub fn start() -> Self {
        StealMeter {
            before: host_steal(),
            started: std::time::Instant::now(),
        }
    }

    /// Stolen CPU time since the start, % of all online CPUs' time; `None` without a reading.
    /// The kernel counts in clock ticks (10 ms), so a run under a second reads 0 or a step.
    pub fn pct(&self) -> Option<f64> {
        StealTally::default().with(self).pct()
    }

    /// Stolen CPU time and wall time since the start; `None` without a reading.
    fn reading(&self) -> Option<(Duration, Duration)> {
        let stolen = host_steal()?.saturating_sub(self.before?);
        Some((stolen, self.started.elapsed()))
    }
}

/// The steal of several measured intervals together (runs that take turns with a peer's).
#[derive(Clone, Copy, Debug, Default)]
pub struct StealTally {
    stolen: Duration,
    wall: Duration,
    unknown: bool,
}

impl StealTally {
    /// Add the interval `m` has measured so far.
    pub fn with(mut self, m: &StealMeter) -> Self {
        match m.reading() {
            Some((stolen, wall)) => {
                self.stolen += stolen;
                self.wall += wall;
            }
            None => self.unknown = true,
        }
        self
    }

    /// Stolen CPU time over all the intervals, % of all online CPUs' time in them.
    pub fn pct(&self) -> Option<f64> {
        let cpus_time = self.wall.as_secs_f64() * online_cpus() as f64;
        (!self.unknown && cpus_time > 0.0).then(|| 100.0 * self.stolen.as_secs_f64() / cpus_time)
    }
}

/// The steal time of a `/proc/stat` text whose clock ticks `hz` times a second.
fn steal_in(stat: &str, hz: u64) -> Option<Duration> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    // cpu user nice system idle iowait irq softirq steal ...
    let ticks: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
    Some(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000 / hz),
    ))
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock `Instant` reads, comparable between the
/// processes of one host (so node processes can timestamp events a launcher compares).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the struct it is given, which outlives the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_limit_is_raised_to_the_need_where_the_kernel_lets_it() {
        let soft = raise_descriptor_limit().unwrap();
        assert!(soft >= 1024, "soft limit raised to the hard one: {soft}");
        assert_eq!(
            raise_descriptor_limit_for(16).unwrap(),
            soft,
            "already enough"
        );
        // Past the hard limit: raised with CAP_SYS_RESOURCE, else unchanged (and the caller
        // names the limit). Either way never lowered.
        let need = soft + 100;
        let now = raise_descriptor_limit_for(need).unwrap();
        assert!(now == need || now == soft, "{now}");
    }

    #[test]
    fn steal_is_the_eighth_number_of_the_cpu_line() {
        let stat = "cpu  3743567 0 566599 2766280 7884 0 75890 119476 0 0\n\
                    cpu0 1916300 0 295742 1327393 4738 0 37284 58263 0 0\n";
        assert_eq!(steal_in(stat, 100), Some(Duration::from_millis(1_194_760)));
        assert_eq!(
            steal_in("cpu0 1 2 3 4 5 6 7 8\n", 100),
            None,
            "no total line"
        );
        assert_eq!(
            steal_in("cpu  1 2 3 4\n", 100),
            None,
            "a kernel without steal"
        );
        assert!(
            host_steal().is_some(),
            "Linux has /proc/stat with a steal column"
        );
    }
}

//! The engine: reactors that move frames between sockets and sans-IO protocols.
//!
//! This first cut has one backend, `poll` (mio over epoll): one reactor thread per node, pinned
//! to a core, owning its listener, its connections, its timers and its protocol, with no locks on
//! the hot path. The io_uring backend (multishot receive into a provided buffer ring, SendZc)
//! is the next step; until it exists, asking for it is an error and the automatic choice says
//! once, on stderr, why it picked `poll`. The engine knows frames and timers, never protocol rules.

pub mod reactor;
pub mod timers;

use serde::Serialize;
use std::fmt;
use std::sync::Once;
use std::time::Duration;

/// How a reactor waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum WaitMode {
    /// Poll with a zero timeout, forever: lowest latency, one core at 100%.
    Busy,
    /// Sleep in the kernel until an event or a timer: no CPU when idle, a wake-up costs ~50 µs
    /// on this VM.
    Block,
    /// Spin for [`SPIN`] after the last event, then block: busy-like latency under load, idle
    /// when idle.
    Adaptive,
}

/// How long an adaptive reactor keeps spinning after its last event.
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// io_uring (not built yet).
    Uring,
    /// mio over epoll.
    Poll,
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
    /// A socket or poll call failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The requested backend cannot run.
    #[error("backend {0}: {1}")]
    Backend(Backend, String),
    /// `WEFT_BACKEND` names no backend.
    #[error("WEFT_BACKEND={0:?} is neither uring nor poll")]
    BadBackendEnv(String),
    /// The reactor thread panicked.
    #[error("reactor thread panicked")]
    Panicked,
}

static FALLBACK_NOTICE: Once = Once::new();

/// The backend to use: `requested`, else `WEFT_BACKEND`, else the best available, saying once
/// on stderr when the automatic choice is not io_uring, and why.
pub fn choose_backend(requested: Option<Backend>) -> Result<Backend, EngineError> {
    let forced = match requested {
        Some(b) => Some(b),
        None => match std::env::var("WEFT_BACKEND") {
            Ok(v) if v.trim().eq_ignore_ascii_case("uring") => Some(Backend::Uring),
            Ok(v) if v.trim().eq_ignore_ascii_case("poll") => Some(Backend::Poll),
            Ok(v) if v.trim().is_empty() => None,
            Ok(v) => return Err(EngineError::BadBackendEnv(v)),
            Err(_) => None,
        },
    };
    match forced {
        Some(Backend::Uring) => Err(EngineError::Backend(
            Backend::Uring,
            "the io_uring backend is not implemented yet; use --backend poll".into(),
        )),
        Some(Backend::Poll) => Ok(Backend::Poll),
        None => {
            FALLBACK_NOTICE.call_once(|| {
                eprintln!(
                    "weft: using the poll (epoll) backend: the io_uring backend is not built yet"
                );
            });
            Ok(Backend::Poll)
        }
    }
}

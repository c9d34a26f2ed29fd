//! What a user may set for the reactors that run nodes, said once: the embeddable API
//! (`transport::NodeOptions::reactor`) carries these, and each reactor runs with them
//! (`reactor::ReactorConfig::options`). The reasons behind the defaults are in
//! `bluegene_notes/engine-latency.md`.

use super::{EngineError, WaitMode};
use crate::wire::frame::DEFAULT_MAX_BODY;
use std::time::Duration;

/// Reactor settings.
#[derive(Clone, Debug)]
pub struct ReactorOptions {
    /// How reactors wait.
    pub wait: WaitMode,
    /// Largest frame body accepted (before authentication, a handshake's 1 KiB at most).
    pub max_body: u32,
    /// io_uring provided buffers per reactor: how many (a power of two) and how large.
    pub recv_buffers: (u16, u32),
    /// io_uring submission queue entries (1 to 32768; the kernel rounds up to a power of
    /// two): requests a turn queues before the ring is entered in the middle of it.
    pub ring_entries: u32,
    /// io_uring sends of at least this many bytes are zero-copy (`SENDMSG_ZC`: the kernel pins
    /// the pages instead of copying them, and reports when it is done with them). See
    /// [`ZEROCOPY_MIN`].
    pub zerocopy_min: usize,
    /// How long a peer's host may stay silent (no answer to TCP keepalive probes, data not
    /// acknowledged) before the connection fails and the protocol hears `on_suspect`: what
    /// finds a host that vanished without resetting its connections. `None`: the kernel's
    /// defaults (hours when idle). See [`DEAD_AFTER`].
    pub dead_after: Option<Duration>,
    /// TCP congestion control of every connection (see [`super::congestion`]: the default,
    /// CUBIC, or Reno where CUBIC is not allowed; not BBR, whose pacing cost a 1 MiB message
    /// 3x over loopback). `None`: the system's default.
    pub congestion: Option<String>,
    /// How long a connection may take to authenticate, from its accept or the start of its
    /// dial (connect included), before it is closed: a stranger that says nothing is refused,
    /// a peer whose port never answers the handshake is suspected. See [`HANDSHAKE_TIMEOUT`].
    pub handshake_timeout: Duration,
    /// Most bytes one connection may have waiting to be sent. A send past it closes the
    /// connection and the peer is suspected: a process that stopped reading (stalled, not
    /// dead, so its kernel still acknowledges) would otherwise make this node queue for it
    /// without bound. See [`MAX_QUEUED`].
    pub max_queued: usize,
    /// Most accepted connections that may wait for their handshake at once. Past it, the
    /// one that has waited longest is closed if it has waited a tenth of
    /// `handshake_timeout`; so is it when no descriptor is free for a new connection. Many
    /// silent connections thus cannot keep real peers out until their deadline. See
    /// [`MAX_STRANGERS`].
    pub max_strangers: usize,
    /// Start-up is not a failure: for this long after a node starts, a dial to a peer it has
    /// never reached that is refused (or finds no route) is tried again with backoff instead
    /// of suspecting the peer, and what the protocol sent it waits. Processes of a job that a
    /// launcher or a shell loop starts milliseconds to seconds apart then form one view
    /// instead of excluding whoever was not listening yet. A peer once reached is suspected
    /// at once, as always. Zero (the default): every refused dial is a suspicion, right for
    /// jobs whose peers all listen before any dials (in-process clusters, an address
    /// exchange that hands out the list only once everyone is bound).
    pub startup_grace: Duration,
    /// Release a connection after every message sent on it: the next message to the same
    /// peer dials a new one, and neither end suspects the other for the close (a goodbye is
    /// exchanged first). The Process Order paper's centralized broadcast and its hierarchy
    /// "with reconnection" ran so, on hosts whose 64 descriptors could not keep one
    /// connection per peer; `weft bench broadcast` measures what it costs. Order per pair of
    /// nodes holds as always. Off by default.
    pub reconnect: bool,
    /// Give each reactor thread a descriptor table of its own ([`super::table`]), so that the
    /// limit on open descriptors bounds each reactor's nodes rather than the whole process's:
    /// what lets one process host more nodes' sockets than its hard limit allows. A
    /// reactor's sockets are then out of reach of every other thread, the process's socket
    /// guard included. Off by default.
    pub own_descriptors: bool,
}

/// Default [`ReactorOptions::max_strangers`]: far more than dial one node at once in a job's
/// overlays (O(log N) each), and a burst larger than it is only cut once it has waited.
pub const MAX_STRANGERS: usize = 256;

/// Default [`ReactorOptions::max_queued`]: 16 frames of the largest default body, far above
/// what a live peer leaves unread (the kernel's socket buffers take megabytes first).
pub const MAX_QUEUED: usize = 16 * DEFAULT_MAX_BODY as usize;

/// Default [`ReactorOptions::handshake_timeout`]: room for a connect's SYN retries (1 s, then
/// 2 s) and a loaded peer, against strangers that hold a socket without a word.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Default [`ReactorOptions::dead_after`]. Keepalive costs one bare ACK each way per idle
/// connection every few seconds, nothing for a busy one; a job's node holds O(log N) of them.
pub const DEAD_AFTER: Duration = Duration::from_secs(10);

/// Longest [`ReactorOptions::dead_after`]: the kernel takes keepalive idle times up to
/// 32 767 s, and weft probes from half the bound on.
pub const MAX_DEAD_AFTER: Duration = Duration::from_secs(2 * 32_767);

/// Default [`ReactorOptions::zerocopy_min`]: off. Over loopback and veth the kernel copies the
/// pages anyway when it delivers them locally, so zero-copy only adds pinning and a second
/// completion (`bluegene_notes/engine-latency.md#zero-copy-sends-off-by-default`). Set it
/// (64 KiB is the usual start) when peers are behind a real NIC.
pub const ZEROCOPY_MIN: usize = usize::MAX;

/// Longest [`ReactorOptions::startup_grace`].
pub const MAX_STARTUP_GRACE: Duration = Duration::from_secs(86_400);

impl Default for ReactorOptions {
    fn default() -> Self {
        Self {
            wait: WaitMode::Adaptive,
            max_body: DEFAULT_MAX_BODY,
            recv_buffers: (256, 16 * 1024),
            ring_entries: 256,
            zerocopy_min: ZEROCOPY_MIN,
            dead_after: Some(DEAD_AFTER),
            congestion: Some(super::congestion::PREFERRED.to_string()),
            handshake_timeout: HANDSHAKE_TIMEOUT,
            max_queued: MAX_QUEUED,
            max_strangers: MAX_STRANGERS,
            startup_grace: Duration::ZERO,
            reconnect: false,
            own_descriptors: false,
        }
    }
}

impl ReactorOptions {
    /// Check the settings before any reactor starts: each wrong one is named. (A `dead_after`
    /// the kernel refuses used to fail every connection's socket options instead, and each
    /// node ended alone in its own view.)
    pub fn check(&self) -> Result<(), EngineError> {
        let bad = |what: String| Err(EngineError::Config(what));
        let (count, size) = self.recv_buffers;
        if !count.is_power_of_two() || size == 0 {
            return bad(format!(
                "{count} receive buffers of {size} bytes: need a power of two of non-empty buffers"
            ));
        }
        if !(1..=32768).contains(&self.ring_entries) {
            return bad(format!(
                "{} submission queue entries: need 1 to 32768",
                self.ring_entries
            ));
        }
        if let Some(d) = self.dead_after {
            if d.is_zero() || d > MAX_DEAD_AFTER {
                return bad(format!(
                    "dead-after {} ms: need 1 ms to {} s",
                    d.as_millis(),
                    MAX_DEAD_AFTER.as_secs()
                ));
            }
        }
        if self.handshake_timeout.is_zero() || self.handshake_timeout > Duration::from_secs(86_400)
        {
            return bad(format!(
                "handshake timeout {} ms: need 1 ms to a day",
                self.handshake_timeout.as_millis()
            ));
        }
        if self.max_queued == 0 || self.max_strangers == 0 {
            return bad("max queued bytes and max strangers must be at least 1".into());
        }
        if self.startup_grace > MAX_STARTUP_GRACE {
            return bad(format!(
                "start-up grace {} s: at most a day",
                self.startup_grace.as_secs()
            ));
        }
        Ok(())
    }
}

//! Crossing dials: two nodes that send each other a first message at about the same time
//! each dial the other, and each connection becomes its dialer's route. Both used to stay
//! open: a BMG construction, where every process first speaks to its fingers at once,
//! authenticated 1.45–1.7× as many connections as pairs of processes that spoke, each one a
//! handshake's CPU and two descriptors (`bluegene_notes/bmg-routing.md`).
//!
//! The connection dialed by the lower id is kept. When it authenticates at the higher end
//! while that end's own dial to the lower one is still in its handshake, nothing has gone
//! over the dial yet (what the node sent meanwhile waits for its session): the waiting
//! messages go on the lower id's connection, in their order, which becomes the route, and
//! the dial is closed without a word. The lower end takes the end of that connection for
//! no failure: it routes to the peer over its own dial, whose end would be one. A dial that
//! authenticated first has carried messages, and both connections stay (FIFO per pair
//! forbids moving what follows to another connection while the first may still be read).
//!
//! Most crossings are settled before either side authenticates: when the higher id's Hello
//! reaches the lower end while the lower end's own dial to it is under way (in its handshake
//! or up), the lower end answers with Defer instead of Auth (`Kind::Defer`). The dialer then
//! authenticates nothing and sends nothing on that connection: it closes it, and what waits
//! for the peer waits for the lower id's connection (`startup.rs`'s redial: after
//! [`DEFER_WAIT`] it dials again, and once the peer has deferred for a handshake timeout, the
//! longest its own dial can live, the dial fails as any other). The Defer is
//! unauthenticated, like everything before Auth; what a stranger can do with one (delay a
//! dial by a handshake timeout) it could do by holding the connection without a word.

use super::conn::Conn;
use super::dispatch::push;
use super::driver::Driver;
use super::error::ConnError;
use super::Reactor;
use crate::proto::Protocol;
use crate::wire::Framed;
use std::time::Duration;

/// How long a deferred dialer waits for the peer's own connection before it dials again:
/// the peer's dial was under way when it deferred, and authenticates within a handshake's
/// round trips unless a SYN was lost (retried after 1 s) or the peer failed.
pub(super) const DEFER_WAIT: Duration = Duration::from_secs(1);

impl<P: Protocol, B: Driver> Reactor<P, B>
where
    P::Msg: Framed,
{
    /// The lower id's connection `kept` authenticated while our dial `own` to it may still
    /// be in its handshake: if so, move what waits for `own` onto `kept`, route over `kept`
    /// and close `own` quietly. Whether anything was queued on `kept`.
    pub(super) fn yield_dial(&mut self, own: usize, kept: usize) -> Result<bool, ConnError> {
        let Some(peer) = self.conns.get(kept).and_then(|c| c.peer) else {
            return Ok(false);
        };
        let pending = self
            .conns
            .get(own)
            .is_some_and(|c| c.peer.is_none() && c.dialed == Some(peer));
        if !pending {
            return Ok(false);
        }
        let Some(dial) = self.detach(own) else {
            return Ok(false);
        };
        self.lost.push(dial.stream);
        let waiting = self.held.remove(&own).unwrap_or_default();
        if let Some(host) = self.hosts.get_mut(dial.host).and_then(|x| x.as_mut()) {
            host.route.insert(peer, kept);
        }
        let Some(conn) = self.conns.get_mut(kept) else {
            return Ok(false);
        };
        for msg in &waiting {
            push(conn, msg)?;
        }
        Ok(!waiting.is_empty())
    }

    /// Answer the Hello that came on `slot` from a higher id, whose route here was `dial`
    /// when it came: Defer if `dial` is our own dial to the id the Hello claims, still in its
    /// handshake or authenticated with the incarnation the Hello claims; else the Auth the
    /// handshake wrote (another incarnation is an impostor or a restart, judged once it has
    /// proved the key).
    pub(super) fn answer_hello(
        &mut self,
        slot: usize,
        dial: usize,
        auth: Vec<u8>,
    ) -> Result<(), ConnError> {
        let claimed = self
            .conns
            .get(slot)
            .and_then(|c| c.handshake.claimed_peer());
        let ours = claimed.is_some_and(|p| {
            self.conns.get(dial).is_some_and(|d| {
                d.dialed == Some(p.id) && (d.peer.is_none() || d.incarnation == p.incarnation)
            })
        });
        let Some(conn) = self.conns.get_mut(slot) else {
            return Ok(());
        };
        if ours {
            let mut defer = Vec::new();
            conn.handshake.defer(&mut defer)?;
            conn.out.push_bytes(&defer);
        } else {
            conn.out.push_bytes(&auth);
        }
        Ok(())
    }

    /// A stranger's connection fails (a reset, a write into its closed socket) with its
    /// Hello perhaps still unread in the socket, as a crossing dial that yielded before this
    /// end accepted it does: read it, so that the end is judged knowing who it was
    /// ([`Self::yielded_to_us`]). Epoll reports the error before the bytes, and a write at
    /// the accept can fail before any read; a ring has delivered them already.
    pub(super) fn read_hello_before_failing(&mut self, slot: usize) {
        if self.conns.get(slot).is_some_and(|c| c.peer.is_none()) {
            // What it said, or why the socket says no more: the caller's reason stands.
            let _ = self.read(slot);
        }
    }

    /// Whether `conn` (in `slot`), ending for `why`, is a higher id's dial that may have
    /// yielded to ours (see [`Self::yield_dial`]), or that we deferred (see
    /// [`Self::answer_hello`]). A yielded dial's end as a stream (the end of it, a reset, a
    /// write into the closed socket) is no failure: the node routes to the peer over its
    /// own dial, whose end would be one. A deferred dial's end is none either, however it
    /// comes (its dialer closes it, or its handshake times out). Anything a connection said
    /// wrong (a forged frame, an impostor, frames out of order) is refused as ever. Both
    /// are told by the Hello, which the reactor reads before it judges an end (`close`).
    pub(super) fn yielded_to_us(&self, conn: &Conn, slot: usize, why: &ConnError) -> bool {
        if conn.peer.is_none() && conn.handshake.is_deferred() {
            let said_wrong = matches!(
                why,
                ConnError::Handshake(_) | ConnError::Wire(_) | ConnError::Chatty(..)
            );
            return !said_wrong;
        }
        let ended = match why {
            ConnError::ClosedByPeer => true,
            ConnError::Io(io) => matches!(io.errno, Some(libc::EPIPE | libc::ECONNRESET)),
            _ => false,
        };
        if !ended || conn.dialed.is_some() {
            return false;
        }
        if self.cfg.options.reconnect {
            return false;
        }
        let Some(peer) = conn.peer.or_else(|| conn.handshake.claimed()) else {
            return false;
        };
        let Some(host) = self.hosts.get(conn.host).and_then(|x| x.as_ref()) else {
            return false;
        };
        let routed_elsewhere = host.route.get(&peer).is_some_and(|&s| s != slot);
        peer > host.identity.node_id && routed_elsewhere
    }
}

//! The io_uring half of the reactor: what each completion means (receives into provided
//! buffers or straight into a frame's buffer, sends, connects, accepts) and how receives are
//! armed again. The readiness half (epoll) and everything both share live in the parent.

use super::conn::Conn;
use super::{EngineError, Reactor, HOT_MAX};
use crate::proto::Protocol;
use crate::wire::handshake::Role;
use crate::wire::WireMsg;
use mio::net::TcpStream;

/// io_uring `user_data`: the kind of request in the top four bits. A connection's receive and
/// connect carry its slot and generation, a send its entry in the reactor's send table, an
/// accept its hosted node.
pub(super) const OP_SHIFT: u32 = 60;
pub(super) const OP_RECV: u64 = 0;
pub(super) const OP_SEND: u64 = 1;
pub(super) const OP_CONNECT: u64 = 2;
pub(super) const OP_ACCEPT: u64 = 3;
pub(super) const OP_RECV_DIRECT: u64 = 4;
pub(super) const OP_CANCEL: u64 = 5;

/// A frame missing at least this many bytes is received straight into the decoder's buffer
/// (one receive of exactly that much) instead of through the provided buffers and a copy.
pub(super) const DIRECT_MIN: usize = 64 * 1024;

/// Generations are kept to 28 bits so that slot, generation and kind fit one `user_data`.
pub(super) const GEN_MASK: u32 = (1 << 28) - 1;

/// The connection open in `slot` if it is still the one of `generation` (an io_uring completion
/// can arrive after its connection closed and the slot was reused).
pub(super) fn live(conns: &mut [Option<Conn>], slot: usize, generation: u32) -> Option<&mut Conn> {
    conns
        .get_mut(slot)
        .and_then(|c| c.as_mut())
        .filter(|c| c.generation == generation)
}

/// The io_uring `user_data` of a connection's request `op`: kind, generation and slot.
pub(super) fn tag(op: u64, slot: usize, generation: u32) -> u64 {
    op << OP_SHIFT | ((generation & GEN_MASK) as u64) << 32 | slot as u64
}

impl<P: Protocol> Reactor<P>
where
    P::Msg: WireMsg,
{
    /// A completion of hosted node `h`'s multishot accept: `raw` is the new connection's fd or
    /// a negative errno; `more` false means the accept must be armed again (unless the node
    /// stopped, which is what ended it).
    pub(super) fn accepted(&mut self, h: usize, raw: i32, more: bool) -> Result<(), EngineError> {
        let alive = self.hosts.get(h).is_some_and(|x| x.is_some());
        if raw >= 0 {
            use std::os::fd::FromRawFd;
            // SAFETY: a successful accept returns a new connected socket that nothing else
            // owns; wrapping it gives it exactly one owner, which closes it when dropped.
            let stream = unsafe { std::net::TcpStream::from_raw_fd(raw) };
            if alive {
                self.accepted_one(h);
                stream.set_nonblocking(true)?;
                self.open(h, TcpStream::from_std(stream), Role::Responder, None, false)?;
            }
        } else if raw != -libc::ECANCELED && alive {
            let e = std::io::Error::from_raw_os_error(-raw);
            if super::accept::classify(&e) == super::accept::AcceptFailure::Rest
                && !self.make_room(h, &e)?
            {
                // Armed again at once, the accept would fail again at once, every turn.
                self.rest_listener(h, &e, !more);
                return Ok(());
            }
        }
        if !more && alive {
            if let (Some(u), Some(host)) = (self.uring.as_mut(), self.hosts[h].as_ref()) {
                use std::os::fd::AsRawFd;
                u.arm_accept(host.listener.as_raw_fd(), OP_ACCEPT << OP_SHIFT | h as u64)?;
            }
        }
        Ok(())
    }

    /// io_uring: send `id` completed: `res` bytes went out (or the error). What it did not
    /// send goes back to the front of the queue and the next send starts. A zero-copy send's
    /// buffers are kept until its notification (`notif`); `more` says one is still coming.
    pub(super) fn sent(
        &mut self,
        id: u64,
        res: i32,
        more: bool,
        notif: bool,
    ) -> Result<(), EngineError> {
        let Some(op) = self.sends.get(&id) else {
            return Ok(());
        };
        let slot = op.slot;
        // What the connection does next: nothing (closed meanwhile, or this is only the
        // notification), send on, or close.
        let mut next = None;
        if let (false, Some(conn)) = (notif, live(&mut self.conns, slot, op.generation)) {
            conn.sending = false;
            next = Some(if res < 0 {
                Err(std::io::Error::from_raw_os_error(-res).to_string())
            } else if res == 0 && op.len() > 0 {
                Err("the socket took no bytes".to_string())
            } else {
                conn.out.unshift(op.unsent(res as usize).into_iter());
                Ok(())
            });
        }
        if !more {
            if let Some(mut op) = self.sends.remove(&id) {
                op.chunks.clear();
                self.spare_sends.push(op);
            }
        }
        match next {
            Some(Ok(())) => self.flush(slot),
            Some(Err(why)) => self.close(slot, why),
            None => Ok(()),
        }
    }

    /// io_uring: the connect of `slot` finished with `res` (0 or a negative errno).
    pub(super) fn connected(
        &mut self,
        tagged: u64,
        slot: usize,
        res: i32,
    ) -> Result<(), EngineError> {
        let addr = self.connects.remove(&tagged);
        let generation = (tagged >> 32) as u32 & GEN_MASK;
        let Some(conn) = live(&mut self.conns, slot, generation) else {
            return Ok(()); // closed while connecting
        };
        if res < 0 {
            let to = addr.and_then(|a| a.as_socket());
            let e = std::io::Error::from_raw_os_error(-res);
            return self.close(slot, format!("connect {to:?}: {e}"));
        }
        conn.connecting = false;
        if let Some(u) = self.uring.as_mut() {
            use std::os::fd::AsRawFd;
            u.arm(conn.stream.as_raw_fd(), tag(OP_RECV, slot, generation))?;
        }
        self.flush(slot)
    }

    /// io_uring path: run pending completion work, feed received bytes to decoders, re-arm
    /// receives that stopped. Returns whether anything arrived.
    pub(super) fn uring_step(&mut self) -> Result<bool, EngineError> {
        let Some(u) = self.uring.as_mut() else {
            return Ok(false);
        };
        u.poke()?;
        // Most turns of a spinning reactor find nothing: skip the lists below (about 250
        // instructions a turn, and a turn's length is how late a spinning reactor notices a
        // message, on average by half).
        if !u.has_completions() {
            return Ok(false);
        }
        // Reused lists (this runs on every spin of a busy reactor). Connections are named by
        // slot and generation: a slot closed and reused within the turn is not confused.
        let mut touched = std::mem::take(&mut self.touched);
        let mut rearm = std::mem::take(&mut self.rearm);
        let mut failed: Vec<(usize, u32, String)> = Vec::new();
        let mut accepted: Vec<(usize, i32, bool)> = Vec::new();
        let mut sent: Vec<(u64, i32, bool, bool)> = Vec::new();
        let mut connected: Vec<(u64, usize, i32)> = Vec::new();
        let mut direct: Vec<(u64, usize, u32, i32)> = Vec::new();
        let mut cancel: Vec<u64> = Vec::new();
        let conns = &mut self.conns;
        let (limited, mut unlimit) = (u.recv_limit().is_some(), false);
        // A spinning reactor reads active connections itself (see `read_hot`): their
        // multishot receives are ended, and the final completion hands them over.
        let take_over = self.spinning && self.hot.len() < HOT_MAX;
        u.drain(|c| {
            let low = c.user_data & ((1 << OP_SHIFT) - 1);
            let (slot, generation) = ((low & 0xffff_ffff) as usize, (low >> 32) as u32);
            match c.user_data >> OP_SHIFT {
                OP_RECV => {}
                OP_RECV_DIRECT => return direct.push((c.user_data, slot, generation, c.raw)),
                OP_SEND => return sent.push((low, c.raw, c.more, c.notif)),
                OP_CONNECT => return connected.push((c.user_data, slot, c.raw)),
                OP_ACCEPT => return accepted.push((low as usize, c.raw, c.more)),
                _ => return, // a cancellation's own completion
            }
            let Some(conn) = live(conns, slot, generation) else {
                return; // a closed connection's last word
            };
            match c.result {
                Ok([]) => failed.push((slot, generation, "closed by peer".into())),
                Ok(bytes) => {
                    conn.decoder.push(bytes);
                    touched.push((slot, generation));
                    if !c.more {
                        rearm.push((slot, generation));
                    } else if !conn.ending && (take_over || conn.decoder.missing() >= DIRECT_MIN) {
                        // A large frame is under way (the rest can go straight into the
                        // decoder), or the reactor will read the socket itself: end the
                        // multishot receive (see `rearm` below).
                        conn.ending = true;
                        cancel.push(c.user_data);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => rearm.push((slot, generation)),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && limited => {
                    // A kernel without multishot receive limits (before 6.16): arm without.
                    unlimit = true;
                    rearm.push((slot, generation))
                }
                Err(e) if conn.ending && e.raw_os_error() == Some(libc::ECANCELED) => {
                    rearm.push((slot, generation))
                }
                Err(e) => failed.push((slot, generation, e.to_string())),
            }
        });
        let any = !touched.is_empty()
            || !failed.is_empty()
            || !accepted.is_empty()
            || !sent.is_empty()
            || !connected.is_empty()
            || !direct.is_empty();
        if let Some(u) = self.uring.as_mut() {
            if unlimit {
                u.set_recv_limit(None);
            }
            for target in cancel {
                u.cancel(target, OP_CANCEL << OP_SHIFT)?;
            }
        }
        for (h, raw, more) in accepted {
            self.accepted(h, raw, more)?;
        }
        for (tagged, slot, res) in connected {
            self.connected(tagged, slot, res)?;
        }
        for (id, res, more, notif) in sent {
            self.sent(id, res, more, notif)?;
        }
        for (tagged, slot, generation, res) in direct {
            let lent = self.lent.remove(&tagged);
            let Some(conn) = live(&mut self.conns, slot, generation) else {
                continue; // closed meanwhile; the loan's memory goes now
            };
            let why = match (res, lent) {
                (n, Some(lent)) if n > 0 => {
                    // SAFETY: the receive completed and wrote `n` bytes at the loan's start.
                    match unsafe { conn.decoder.commit(lent, n as usize) } {
                        Ok(()) => {
                            touched.push((slot, generation));
                            rearm.push((slot, generation));
                            continue;
                        }
                        Err(e) => e.to_string(),
                    }
                }
                (0, _) => "closed by peer".into(),
                (n, _) if n < 0 => std::io::Error::from_raw_os_error(-n).to_string(),
                _ => "a receive completed without its buffer".into(),
            };
            failed.push((slot, generation, why));
        }
        touched.sort_unstable();
        touched.dedup();
        let mut result = Ok(());
        for &(slot, generation) in &touched {
            if self.generation_of(slot) != Some(generation) {
                continue;
            }
            if let Err(why) = self.frames(slot) {
                result = result.and(self.close(slot, why));
            }
        }
        // Re-arm after the frames are cut, so a loan is taken on a buffer no frame shares.
        // A spinning reactor reads the connection itself instead, until it cools.
        for &(slot, generation) in &rearm {
            if self.generation_of(slot) == Some(generation) {
                if self.spinning {
                    if let Some(conn) = live(&mut self.conns, slot, generation) {
                        conn.ending = false;
                    }
                    result = result.and(self.heat(slot, generation));
                } else if let Err(e) = self.arm_receive(slot) {
                    result = result.and(self.close(slot, e.to_string()));
                }
            }
        }
        touched.clear();
        rearm.clear();
        self.touched = touched;
        self.rearm = rearm;
        result?;
        for (slot, generation, why) in failed {
            if self.generation_of(slot) == Some(generation) {
                let _ = self.frames(slot);
                self.close(slot, why)?;
            }
        }
        Ok(any)
    }

    /// The generation of the connection in `slot`, if one is open there.
    pub(super) fn generation_of(&self, slot: usize) -> Option<u32> {
        self.conns
            .get(slot)
            .and_then(|c| c.as_ref())
            .map(|c| c.generation)
    }

    /// io_uring: arm `slot`'s next receive. While a frame of [`DIRECT_MIN`] or more bytes is
    /// still missing, one receive of exactly that much straight into the decoder's buffer
    /// (no copy out of the provided buffers); otherwise the multishot receive again.
    pub(super) fn arm_receive(&mut self, slot: usize) -> std::io::Result<()> {
        let (Some(u), Some(conn)) = (
            self.uring.as_mut(),
            self.conns.get_mut(slot).and_then(|c| c.as_mut()),
        ) else {
            return Ok(());
        };
        use std::os::fd::AsRawFd;
        let fd = conn.stream.as_raw_fd();
        conn.ending = false;
        if conn.decoder.missing() >= DIRECT_MIN {
            if let Some(lent) = conn.decoder.lend() {
                let tagged = tag(OP_RECV_DIRECT, slot, conn.generation);
                let len = u32::try_from(lent.len).unwrap_or(u32::MAX);
                // SAFETY: the loan keeps its allocation alive in `lent` until the completion,
                // even if the connection closes first, and the decoder is not written until it
                // comes back (`ending` stays false and no multishot is armed meanwhile).
                unsafe { u.recv_into(fd, lent.ptr, len, tagged) }?;
                self.lent.insert(tagged, lent);
                return Ok(());
            }
        }
        u.arm(fd, tag(OP_RECV, slot, conn.generation))
    }
}

//! Routing over the binomial graph: application messages to any rank, forwarded along the BMG
//! fingers, and a reliable broadcast that floods them.
//!
//! The BMG links position `p` to `p ± 2^k` (Bosilca et al., section 3.4.1), so a greedy relay
//! that always moves to the live finger nearest the target along the ring at least halves the
//! remaining distance: at most `⌈log2 N⌉` hops when no one is dead. Around dead processes it
//! takes the nearest live finger that still gets closer; when none does, a live finger other
//! than the one the message came from (a sideways step), and a message that has made
//! [`RouteConfig::max_hops`] hops is dropped. A process is dead for the router when its local
//! detector suspected it (a lost or refused connection, [`Protocol::on_suspect`]) or the
//! membership view leaves it out ([`RouteRequest::View`]); a message from it brings it back.
//!
//! The guarantee, end to end: the sender keeps every message until its destination's
//! acknowledgement comes back (routed the same way) and sends it again every
//! [`RouteConfig::retry`]; a relay that finds the destination dead answers `Unreachable`.
//! So each [`RouteRequest::Send`] ends in exactly one event at the sender:
//! [`RouteEvent::Delivered`] once the destination has handed the message to its application
//! (exactly once: the destination drops copies by their sequence number), or
//! [`RouteEvent::Failed`] when the destination is dead for the sender or a relay, or after
//! [`RouteConfig::tries`] sends without an answer. A destination may have delivered a message
//! whose sender reports it failed (the acknowledgement was lost with its relay): as with any
//! timeout-based detector, "failed" means "not confirmed".
//!
//! Frames are authenticated hop by hop (the job key), not end to end: a relay is a member of
//! the job and is trusted with what passes through it, as in ULFM. What any member can make a
//! process remember is bounded (sequence windows: [`SEEN_MAX`]; custody: [`CUSTODY`]).
//!
//! The broadcast is the one ULFM runs over the same graph: the origin sends to its live
//! fingers, every process delivers a broadcast the first time it sees it and forwards it to its
//! live fingers but the one it came from; copies are dropped. Every live process delivers it as
//! long as the live processes' fingers connect them (the BMG stays connected with up to
//! `2⌈log2 N⌉ − 1` failures, more in practice); no order between broadcasts of different origins.

use super::{Outbox, Protocol, Time, TimerId};
use crate::buf::Payload;
use crate::topology::bmg;
use crate::{NodeId, Rank};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub use self::wire_form::RouteMsg;

/// A module of its own for the archived form: rkyv derives a resolver enum whose variant
/// fields carry no docs, and kept private it stays out of the public API.
mod wire_form {
    use super::*;

    /// Messages of the router. Ranks are positions on the ring (`0..N`).
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub enum RouteMsg {
        /// Application data on its way from `src` to `dst`.
        Data {
            /// Sender's rank.
            src: u32,
            /// Destination's rank.
            dst: u32,
            /// The sender's sequence number toward `dst` (copies are dropped by it).
            seq: u64,
            /// The application's tag, echoed in every event about this message.
            tag: u64,
            /// Hops made so far.
            hops: u32,
            /// The data.
            payload: Payload,
        },
        /// `dst` has delivered `src`'s message `seq`: on its way back to `src`.
        Ack {
            /// The original sender's rank (this message's target).
            src: u32,
            /// The destination's rank.
            dst: u32,
            /// The acknowledged sequence number.
            seq: u64,
            /// Hops the data made.
            there: u32,
            /// Hops this acknowledgement made so far.
            hops: u32,
        },
        /// A relay found `dst` dead: on its way back to `src`.
        Unreachable {
            /// The original sender's rank (this message's target).
            src: u32,
            /// The dead destination's rank.
            dst: u32,
            /// The sequence number of the message that could not go on.
            seq: u64,
            /// Hops this answer made so far.
            hops: u32,
        },
        /// A broadcast from `origin`, flooded over the fingers.
        Flood {
            /// The origin's rank.
            origin: u32,
            /// The origin's broadcast number.
            seq: u64,
            /// Hops made so far.
            hops: u32,
            /// The data.
            payload: Payload,
        },
    }
}

impl super::Message for RouteMsg {
    const TAG: super::Tag = 8;
    const NAME: &'static str = "route";
    /// The application's data (`Data`, `Flood`) is bulk, as ping-pong payloads are: its
    /// frames carry a MAC only under bulk integrity (`NodeOptions::bulk_mac`), since hashing
    /// a megabyte costs more than moving it. Acknowledgements and `Unreachable` keep theirs.
    const BULK_TAG: Option<super::Tag> = Some(12);

    fn is_bulk(&self) -> bool {
        matches!(self, RouteMsg::Data { .. } | RouteMsg::Flood { .. })
    }

    fn payload(&self) -> Option<&Payload> {
        match self {
            RouteMsg::Data { payload, .. } | RouteMsg::Flood { payload, .. } => Some(payload),
            _ => None,
        }
    }
}

impl RouteMsg {
    /// Where a routed message is going: a `Data`'s destination, an answer's original sender;
    /// a broadcast's origin (a broadcast is flooded, not routed).
    fn target(&self) -> u32 {
        match self {
            RouteMsg::Data { dst, .. } => *dst,
            RouteMsg::Ack { src, .. } | RouteMsg::Unreachable { src, .. } => *src,
            RouteMsg::Flood { origin, .. } => *origin,
        }
    }

    /// Hops made so far.
    fn hops(&self) -> u32 {
        match self {
            RouteMsg::Data { hops, .. }
            | RouteMsg::Ack { hops, .. }
            | RouteMsg::Unreachable { hops, .. }
            | RouteMsg::Flood { hops, .. } => *hops,
        }
    }
}

/// The retransmission timer.
pub const RETRY_TIMER: TimerId = TimerId(50);

/// What the application asks of its router ([`Protocol::on_request`]).
#[derive(Clone, Debug)]
pub enum RouteRequest {
    /// Send `data` to the process at ring position `to`; `tag` comes back in the events.
    Send {
        /// Destination rank.
        to: Rank,
        /// The application's tag.
        tag: u64,
        /// The data.
        data: Payload,
    },
    /// Broadcast `data` to every live process.
    Broadcast {
        /// The data.
        data: Payload,
    },
    /// The membership view: processes outside it are dead for routing, those in it alive.
    View(Vec<NodeId>),
}

/// Why a message was not confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteFailure {
    /// The destination is dead for the sender's detector or view, or for a relay's.
    Dead,
    /// No acknowledgement after every try.
    Timeout,
    /// The destination is not a rank of the job.
    NoSuchRank,
}

/// What a router reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteEvent {
    /// A message for this process (delivered once, whatever the copies).
    Received {
        /// Its sender.
        from: NodeId,
        /// The sender's tag.
        tag: u64,
        /// Hops it made.
        hops: u32,
        /// The data.
        data: Payload,
    },
    /// A message this process sent reached its destination's application.
    Delivered {
        /// Its destination.
        to: NodeId,
        /// Its tag.
        tag: u64,
        /// Hops the message made.
        there: u32,
        /// Hops the acknowledgement made.
        back: u32,
        /// From the last send to the acknowledgement.
        rtt: Duration,
        /// Sends it took (1 without retransmission).
        tries: u32,
    },
    /// A message this process sent is not confirmed (see the module doc).
    Failed {
        /// Its destination.
        to: NodeId,
        /// Its tag.
        tag: u64,
        /// Why.
        why: RouteFailure,
    },
    /// A broadcast, delivered once (the origin delivers its own, with 0 hops).
    Broadcast {
        /// Its origin.
        origin: NodeId,
        /// The origin's broadcast number.
        seq: u64,
        /// Hops it made to get here.
        hops: u32,
        /// The data.
        data: Payload,
    },
}

/// Settings.
#[derive(Clone, Copy, Debug)]
pub struct RouteConfig {
    /// A message without an answer for this long is sent again, and after twice as long the
    /// next time (exponential backoff, as TCP's retransmission timer).
    pub retry: Duration,
    /// Sends before a message fails with [`RouteFailure::Timeout`].
    pub tries: u32,
    /// Hops after which a routed message is dropped (its sender's retry covers it); `0`: twice
    /// the BMG's diameter bound plus 4.
    pub max_hops: u32,
}

impl Default for RouteConfig {
    /// Retry after 250 ms, then 0.5, 1, 2 and 4 s: 7.75 s of silence before a message fails,
    /// under the engine's 10 s `dead_after`. Over TCP a message is lost only with a process
    /// that dies holding it (a refused first hop is retried at once, see `on_suspect`), so
    /// retries are rare and can wait; the first one waits longer than 256 in-process nodes on
    /// 2 cores take to open their fingers' connections (about 180 ms), so a cold start is not
    /// sent twice.
    fn default() -> Self {
        Self {
            retry: Duration::from_millis(250),
            tries: 5,
            max_hops: 0,
        }
    }
}

/// Which sequence numbers of one sender were seen: all below `below`, and those in `above`.
#[derive(Clone, Debug, Default)]
struct Seen {
    below: u64,
    above: BTreeSet<u64>,
}

impl Seen {
    /// Record `seq`; whether it is new.
    fn insert(&mut self, seq: u64) -> bool {
        if seq < self.below || !self.above.insert(seq) {
            return false;
        }
        if self.above.len() > SEEN_MAX {
            // Give up the oldest gap: everything up to the first number held counts as seen.
            if let Some(first) = self.above.first().copied() {
                self.below = first;
            }
        }
        while self.above.remove(&self.below) {
            self.below += 1;
        }
        true
    }
}

/// A message waiting for its acknowledgement.
#[derive(Clone, Debug)]
struct Pending {
    tag: u64,
    payload: Payload,
    last_sent: Time,
    tries: u32,
    /// The finger it last left through: if that one fails, the message goes again at once.
    first_hop: Option<u32>,
}

/// Counters of one router, read after the node stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteStats {
    /// Routed messages this process passed on for others.
    pub forwarded: u64,
    /// Messages dropped for having made `max_hops` hops, or with no live finger to take.
    pub dropped: u64,
    /// Messages sent again after a retry timeout or a failed first hop.
    pub resent: u64,
    /// Broadcast copies sent.
    pub flood_sent: u64,
}

/// One process's router.
#[derive(Debug)]
pub struct Route {
    me: u32,
    ring: Arc<[NodeId]>,
    ranks: HashMap<NodeId, u32>,
    dead: Vec<bool>,
    fingers: Vec<u32>,
    cfg: RouteConfig,
    max_hops: u32,
    next_seq: HashMap<u32, u64>,
    pending: BTreeMap<(u32, u64), Pending>,
    received: HashMap<u32, Seen>,
    flood_seq: u64,
    flooded: HashMap<u32, Seen>,
    retry_armed: bool,
    stats: RouteStats,
    /// Peers a message came from since they were last suspected: they were alive after their
    /// connection formed.
    heard: Vec<bool>,
    /// Routed messages passed to peers not heard from yet (at most [`CUSTODY`] each): if the
    /// dial to one is refused, they go on another way at once instead of waiting for their
    /// senders' retries.
    custody: HashMap<u32, Vec<RouteMsg>>,
}

/// Messages kept per unheard peer (older ones are left to their senders' retries).
pub const CUSTODY: usize = 64;

/// Sequence numbers above the first gap remembered per sender. Past it, the oldest gap is
/// given up (its messages, if they ever come, count as copies and their senders see no
/// acknowledgement): what a sender, or a member forging senders' numbers, can make a process
/// keep is bounded, about 80 KiB per sender.
pub const SEEN_MAX: usize = 4096;

/// The distance from `a` to `b` along the ring, the shorter way round.
fn ring_dist(a: u32, b: u32, n: u32) -> u32 {
    let d = (b as u64 + n as u64 - a as u64) % n as u64;
    d.min(n as u64 - d) as u32
}

impl Route {
    /// The router of the process at position `me` of `ring` (rank `r` is `ring[r]`).
    pub fn new(me: Rank, ring: Arc<[NodeId]>, cfg: RouteConfig) -> Self {
        let n = ring.len() as u32;
        assert!(me.0 < n, "rank {} outside a ring of {n}", me.0);
        let ranks = ring
            .iter()
            .enumerate()
            .map(|(r, &id)| (id, r as u32))
            .collect();
        let fingers = bmg::neighbors(me, n).into_iter().map(|r| r.0).collect();
        let max_hops = match cfg.max_hops {
            0 => 2 * bmg::diameter_bound(n) + 4,
            h => h,
        };
        Self {
            me: me.0,
            ring,
            ranks,
            dead: vec![false; n as usize],
            fingers,
            cfg,
            max_hops,
            next_seq: HashMap::new(),
            pending: BTreeMap::new(),
            received: HashMap::new(),
            flood_seq: 0,
            flooded: HashMap::new(),
            retry_armed: false,
            stats: RouteStats::default(),
            heard: vec![false; n as usize],
            custody: HashMap::new(),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        Rank(self.me)
    }

    /// The counters so far.
    pub fn stats(&self) -> RouteStats {
        self.stats
    }

    /// Messages still waiting for an answer.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The wait after the `tries`-th send.
    fn backoff(&self, tries: u32) -> Duration {
        self.cfg.retry * (1u32 << tries.saturating_sub(1).min(16))
    }

    fn n(&self) -> u32 {
        self.ring.len() as u32
    }

    fn id(&self, rank: u32) -> NodeId {
        self.ring[rank as usize]
    }

    /// Carry out one request of the application.
    pub fn request(
        &mut self,
        now: Time,
        req: RouteRequest,
        out: &mut Outbox<RouteMsg, RouteEvent>,
    ) {
        match req {
            RouteRequest::Send { to, tag, data } => self.send(now, to, tag, data, out),
            RouteRequest::Broadcast { data } => {
                self.broadcast(data, out);
            }
            RouteRequest::View(live) => {
                self.dead.iter_mut().for_each(|d| *d = true);
                for id in live {
                    if let Some(&r) = self.ranks.get(&id) {
                        self.dead[r as usize] = false;
                    }
                }
                self.dead[self.me as usize] = false;
                let gone: Vec<u32> = (0..self.n()).filter(|&r| self.dead[r as usize]).collect();
                for r in gone {
                    self.fail_toward(r, out);
                }
            }
        }
    }

    /// Send `data` to rank `to`; the answer is a `Delivered` or `Failed` event with `tag`.
    pub fn send(
        &mut self,
        now: Time,
        to: Rank,
        tag: u64,
        data: Payload,
        out: &mut Outbox<RouteMsg, RouteEvent>,
    ) {
        let dst = to.0;
        if dst >= self.n() {
            let why = RouteFailure::NoSuchRank;
            let to = NodeId(u64::from(dst));
            out.report(RouteEvent::Failed { to, tag, why });
            return;
        }
        if dst == self.me {
            let me = self.id(dst);
            out.report(RouteEvent::Received {
                from: me,
                tag,
                hops: 0,
                data,
            });
            out.report(RouteEvent::Delivered {
                to: me,
                tag,
                there: 0,
                back: 0,
                rtt: Duration::ZERO,
                tries: 1,
            });
            return;
        }
        if self.dead[dst as usize] {
            let to = self.id(dst);
            let why = RouteFailure::Dead;
            out.report(RouteEvent::Failed { to, tag, why });
            return;
        }
        let seq = self.next_seq.entry(dst).or_insert(0);
        let key = (dst, *seq);
        *seq += 1;
        self.pending.insert(
            key,
            Pending {
                tag,
                payload: data,
                last_sent: now,
                tries: 0,
                first_hop: None,
            },
        );
        self.transmit(now, key, out);
        if !self.retry_armed {
            self.retry_armed = true;
            out.set_timer(RETRY_TIMER, self.cfg.retry);
        }
    }

    /// Send (again) the pending message `key`.
    fn transmit(&mut self, now: Time, key: (u32, u64), out: &mut Outbox<RouteMsg, RouteEvent>) {
        let (dst, seq) = key;
        let hop = self.next_hop(dst, None);
        let Some(p) = self.pending.get_mut(&key) else {
            return;
        };
        p.tries += 1;
        p.last_sent = now;
        p.first_hop = hop;
        if let Some(h) = hop {
            let msg = RouteMsg::Data {
                src: self.me,
                dst,
                seq,
                tag: p.tag,
                hops: 0,
                payload: p.payload.clone(),
            };
            out.send(self.ring[h as usize], msg);
        }
    }

    /// Broadcast `data` to every live process; returns its broadcast number.
    pub fn broadcast(&mut self, data: Payload, out: &mut Outbox<RouteMsg, RouteEvent>) -> u64 {
        let seq = self.flood_seq;
        self.flood_seq += 1;
        self.flooded.entry(self.me).or_default().insert(seq);
        out.report(RouteEvent::Broadcast {
            origin: self.id(self.me),
            seq,
            hops: 0,
            data: data.clone(),
        });
        self.flood(self.me, seq, 0, &data, None, out);
        seq
    }

    fn flood(
        &mut self,
        origin: u32,
        seq: u64,
        hops: u32,
        data: &Payload,
        from: Option<u32>,
        out: &mut Outbox<RouteMsg, RouteEvent>,
    ) {
        for &f in &self.fingers {
            if self.dead[f as usize] || Some(f) == from || f == origin {
                continue;
            }
            self.stats.flood_sent += 1;
            let msg = RouteMsg::Flood {
                origin,
                seq,
                hops,
                payload: data.clone(),
            };
            out.send(self.ring[f as usize], msg);
        }
    }

    /// The live finger to pass a message for `target` to: the one nearest the target that is
    /// nearer than this process; failing that, the nearest other than `from` (a sideways step).
    fn next_hop(&self, target: u32, from: Option<u32>) -> Option<u32> {
        let n = self.n();
        let here = ring_dist(self.me, target, n);
        let live = self.fingers.iter().filter(|&&f| !self.dead[f as usize]);
        let nearest = |it: &mut dyn Iterator<Item = &u32>| {
            it.min_by_key(|&&f| (ring_dist(f, target, n), f)).copied()
        };
        let closer = nearest(&mut live.clone().filter(|&&f| ring_dist(f, target, n) < here));
        closer.or_else(|| nearest(&mut live.filter(|&&f| Some(f) != from)))
    }

    /// Pass on a routed message that came from `from` (dropped, and counted, when it has made
    /// `max_hops` hops, its target is dead or no live finger is left).
    fn relay(&mut self, from: u32, msg: RouteMsg, out: &mut Outbox<RouteMsg, RouteEvent>) {
        let target = msg.target();
        // Nothing reaches a dead target (a `Data`'s sender was answered before this).
        let hop = if msg.hops() >= self.max_hops || self.dead[target as usize] {
            None
        } else {
            self.next_hop(target, Some(from))
        };
        let Some(h) = hop else {
            self.stats.dropped += 1;
            return;
        };
        self.stats.forwarded += 1;
        if !self.heard[h as usize] {
            let kept = self.custody.entry(h).or_default();
            if kept.len() < CUSTODY {
                kept.push(msg.clone());
            }
        }
        out.send(self.ring[h as usize], msg);
    }

    /// Every pending message to `dst` fails: it is dead.
    fn fail_toward(&mut self, dst: u32, out: &mut Outbox<RouteMsg, RouteEvent>) {
        let keys: Vec<(u32, u64)> = self
            .pending
            .range((dst, 0)..=(dst, u64::MAX))
            .map(|(&k, _)| k)
            .collect();
        for k in keys {
            if let Some(p) = self.pending.remove(&k) {
                out.report(RouteEvent::Failed {
                    to: self.id(dst),
                    tag: p.tag,
                    why: RouteFailure::Dead,
                });
            }
        }
    }

    fn on_data(
        &mut self,
        now: Time,
        from: u32,
        mut msg: RouteMsg,
        out: &mut Outbox<RouteMsg, RouteEvent>,
    ) {
        let RouteMsg::Data {
            src,
            dst,
            seq,
            tag,
            hops,
            ..
        } = &mut msg
        else {
            return;
        };
        *hops += 1;
        let (src, dst, seq, tag, hops) = (*src, *dst, *seq, *tag, *hops);
        if dst != self.me {
            if self.dead[dst as usize] {
                self.unreachable(now, src, dst, seq, from, out);
            } else {
                self.relay(from, msg, out);
            }
            return;
        }
        let RouteMsg::Data { payload, .. } = msg else {
            return;
        };
        if self.received.entry(src).or_default().insert(seq) {
            out.report(RouteEvent::Received {
                from: self.id(src),
                tag,
                hops,
                data: payload,
            });
        }
        // Every copy is acknowledged: an earlier acknowledgement may have been lost.
        let ack = RouteMsg::Ack {
            src,
            dst,
            seq,
            there: hops,
            hops: 0,
        };
        self.answer(now, src, from, ack, out);
    }

    /// Tell `src` that `dst`, the destination of its message `seq` (which came from `from`),
    /// is dead for this process.
    fn unreachable(
        &mut self,
        now: Time,
        src: u32,
        dst: u32,
        seq: u64,
        from: u32,
        out: &mut Outbox<RouteMsg, RouteEvent>,
    ) {
        let back = RouteMsg::Unreachable {
            src,
            dst,
            seq,
            hops: 0,
        };
        self.answer(now, src, from, back, out);
    }

    /// Start an answer toward `src` (this process itself when a message came back round).
    fn answer(
        &mut self,
        now: Time,
        src: u32,
        from: u32,
        msg: RouteMsg,
        out: &mut Outbox<RouteMsg, RouteEvent>,
    ) {
        if src == self.me {
            self.on_answer(now, self.me, msg, out);
        } else {
            self.relay(from, msg, out);
        }
    }

    /// An `Ack` or `Unreachable` (its `hops` not yet counting the hop that brought it): for
    /// this process, or passed on.
    fn on_answer(
        &mut self,
        now: Time,
        from: u32,
        mut msg: RouteMsg,
        out: &mut Outbox<RouteMsg, RouteEvent>,
    ) {
        let (src, hops) = match &mut msg {
            RouteMsg::Ack { src, hops, .. } | RouteMsg::Unreachable { src, hops, .. } => {
                if from != self.me {
                    *hops += 1;
                }
                (*src, *hops)
            }
            RouteMsg::Data { .. } | RouteMsg::Flood { .. } => return,
        };
        if src != self.me {
            self.relay(from, msg, out);
            return;
        }
        match msg {
            RouteMsg::Ack {
                dst, seq, there, ..
            } => {
                if let Some(p) = self.pending.remove(&(dst, seq)) {
                    out.report(RouteEvent::Delivered {
                        to: self.id(dst),
                        tag: p.tag,
                        there,
                        back: hops,
                        rtt: now.since(p.last_sent),
                        tries: p.tries,
                    });
                }
            }
            RouteMsg::Unreachable { dst, .. } => {
                self.dead[dst as usize] = true;
                self.fail_toward(dst, out);
            }
            RouteMsg::Data { .. } | RouteMsg::Flood { .. } => {}
        }
    }

    fn on_flood(&mut self, from: u32, msg: RouteMsg, out: &mut Outbox<RouteMsg, RouteEvent>) {
        let RouteMsg::Flood {
            origin,
            seq,
            hops,
            payload,
        } = msg
        else {
            return;
        };
        if origin >= self.n() || !self.flooded.entry(origin).or_default().insert(seq) {
            return;
        }
        let hops = hops + 1;
        out.report(RouteEvent::Broadcast {
            origin: self.id(origin),
            seq,
            hops,
            data: payload.clone(),
        });
        self.flood(origin, seq, hops, &payload, Some(from), out);
    }
}

impl Protocol for Route {
    type Msg = RouteMsg;
    type Event = RouteEvent;
    type Request = RouteRequest;

    fn on_start(&mut self, _now: Time, _out: &mut Outbox<RouteMsg, RouteEvent>) {}

    fn on_request(&mut self, now: Time, req: RouteRequest, out: &mut Outbox<RouteMsg, RouteEvent>) {
        self.request(now, req, out);
    }

    fn on_message(
        &mut self,
        now: Time,
        from: NodeId,
        msg: RouteMsg,
        out: &mut Outbox<RouteMsg, RouteEvent>,
    ) {
        let Some(&from) = self.ranks.get(&from) else {
            return;
        };
        // A message is proof of life.
        self.dead[from as usize] = false;
        if !self.heard[from as usize] {
            self.heard[from as usize] = true;
            self.custody.remove(&from);
        }
        let n = self.n();
        let in_range = match &msg {
            RouteMsg::Data { src, dst, .. }
            | RouteMsg::Ack { src, dst, .. }
            | RouteMsg::Unreachable { src, dst, .. } => *src < n && *dst < n,
            RouteMsg::Flood { origin, .. } => *origin < n,
        };
        if !in_range {
            self.stats.dropped += 1;
            return;
        }
        match msg {
            RouteMsg::Data { .. } => self.on_data(now, from, msg, out),
            RouteMsg::Ack { .. } | RouteMsg::Unreachable { .. } => {
                self.on_answer(now, from, msg, out)
            }
            RouteMsg::Flood { .. } => self.on_flood(from, msg, out),
        }
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<RouteMsg, RouteEvent>) {
        if timer != RETRY_TIMER {
            return;
        }
        self.retry_armed = false;
        let due: Vec<(u32, u64)> = self
            .pending
            .iter()
            .filter(|(_, p)| now.since(p.last_sent) >= self.backoff(p.tries))
            .map(|(&k, _)| k)
            .collect();
        for key in due {
            let (dst, _) = key;
            let Some(p) = self.pending.get(&key) else {
                continue;
            };
            if p.tries >= self.cfg.tries || self.dead[dst as usize] {
                let why = if self.dead[dst as usize] {
                    RouteFailure::Dead
                } else {
                    RouteFailure::Timeout
                };
                let tag = p.tag;
                self.pending.remove(&key);
                let to = self.id(dst);
                out.report(RouteEvent::Failed { to, tag, why });
            } else {
                self.stats.resent += 1;
                self.transmit(now, key, out);
            }
        }
        if !self.pending.is_empty() {
            self.retry_armed = true;
            out.set_timer(RETRY_TIMER, self.cfg.retry);
        }
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut Outbox<RouteMsg, RouteEvent>) {
        let Some(&r) = self.ranks.get(&peer) else {
            return;
        };
        if r == self.me {
            return;
        }
        self.dead[r as usize] = true;
        self.heard[r as usize] = false;
        self.fail_toward(r, out);
        // What this process relayed to it, unheard, goes on another way.
        for msg in self.custody.remove(&r).unwrap_or_default() {
            match msg {
                RouteMsg::Data { src, dst, seq, .. } if self.dead[dst as usize] => {
                    self.unreachable(now, src, dst, seq, self.me, out);
                }
                _ => {
                    self.relay(self.me, msg, out);
                }
            }
        }
        // What left through the lost finger may be lost with it: send it again now.
        let through: Vec<(u32, u64)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.first_hop == Some(r))
            .map(|(&k, _)| k)
            .collect();
        for key in through {
            self.stats.resent += 1;
            self.transmit(now, key, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job member that sends sequence numbers with gaps (a hostile one, or one whose
    /// messages got far out of order) cannot make a destination remember them without bound.
    #[test]
    fn sparse_sequence_numbers_keep_bounded_memory() {
        let ring: Arc<[NodeId]> = (0..4u64).map(NodeId).collect();
        let mut r = Route::new(Rank(0), ring, RouteConfig::default());
        let mut out = Outbox::new();
        for i in 0..100_000u64 {
            let msg = RouteMsg::Data {
                src: 1 + (i % 3) as u32,
                dst: 0,
                seq: 2 * i,
                tag: i,
                hops: 0,
                payload: Payload::default(),
            };
            r.on_message(Time::ZERO, NodeId(1), msg, &mut out);
            out.drain().for_each(drop);
        }
        for (src, seen) in &r.received {
            assert!(
                seen.above.len() <= SEEN_MAX,
                "{} sequence numbers kept for {src}",
                seen.above.len()
            );
        }
    }

    /// Within the window, every sequence number is taken once, in any order.
    #[test]
    fn seen_takes_each_number_once_in_any_order() {
        let mut s = Seen::default();
        for seq in [3, 0, 2, 2, 1, 0, 5, 4, 3] {
            s.insert(seq);
        }
        assert_eq!((s.below, s.above.len()), (6, 0));
        assert!(!s.insert(4));
        assert!(s.insert(6));
    }
}

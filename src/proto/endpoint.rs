//! What a runtime needs from its transport, as one protocol: membership and routing on one
//! node ([`Service`]), spoken in ranks.
//!
//! The radix-tree membership ([`Membership`], ICS'06) finds failures and installs views; the
//! BMG router ([`Route`], Bosilca et al.) carries the application's messages to any rank and
//! says of each whether it arrived. The service joins them without the application's help:
//! each view the membership installs goes to the router at once (its routes avoid the
//! excluded), and what both report comes out as one [`EndpointEvent`], in ranks, with the
//! view's changes spelled out (who joined, who left) and every suspicion with its detector.
//!
//! A rank is a process's position in the job's initial view, which is sorted: the ids of a
//! launched job are its ranks. The service serves the processes of the initial view; a
//! process that joins later is seen in the views but cannot be sent to by rank.

use super::membership::{MemberEvent, MemberMsg, Membership, MembershipConfig, Suspicion};
use super::pair::{Either, Pair, PairOutbox};
use super::revoke::Revocations;
use super::route::{Route, RouteConfig, RouteEvent, RouteFailure, RouteMsg, RouteRequest};
use super::uniform::{AgreeOp, Decision, Uniform, UniformMsg};
use super::{Action, Event, Outbox, Protocol, Time, TimerId};
use crate::buf::Payload;
use crate::{NodeId, Rank};
use std::sync::Arc;
use std::time::Duration;

/// What an endpoint reports to its application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointEvent {
    /// A message for this rank (handed over once, whatever copies the network made).
    Received {
        /// Its sender.
        from: Rank,
        /// The sender's tag.
        tag: u64,
        /// The data.
        data: Payload,
    },
    /// A message this rank sent reached its destination's application.
    Delivered {
        /// Its destination.
        to: Rank,
        /// The tag [`EndpointRequest::Send`] gave it.
        tag: u64,
        /// From its last send to the acknowledgement.
        rtt: Duration,
    },
    /// A message this rank sent is not confirmed: its destination is dead (for this rank's
    /// detector or view, or a relay's), or every try went unanswered. Every send ends in
    /// exactly one `Delivered` or `Failed`, also when its destination dies.
    Failed {
        /// Its destination.
        to: Rank,
        /// Its tag.
        tag: u64,
        /// Why.
        why: RouteFailure,
    },
    /// A broadcast (the origin delivers its own too).
    Broadcast {
        /// Its origin.
        origin: Rank,
        /// The data.
        data: Payload,
    },
    /// `by` suspects `who` has failed, for the reason `why`. This rank reports its own
    /// suspicions (`by` is itself); what others suspected it learns as the view that
    /// excludes the suspect ([`EndpointEvent::Left`]).
    Suspected {
        /// The suspect.
        who: Rank,
        /// Who suspects it.
        by: Rank,
        /// Which detector fired.
        why: Suspicion,
        /// When, on this node's protocol clock.
        at: Time,
    },
    /// A new view: the live ranks every member agrees on, named by its epoch and root.
    ViewInstalled {
        /// Its epoch (grows with each view).
        epoch: u64,
        /// Its root.
        root: Rank,
        /// The live ranks, ascending.
        members: Arc<[Rank]>,
        /// When, on this node's protocol clock.
        at: Time,
    },
    /// `who` is in the view just installed and was not in the one before (it recovered).
    Joined {
        /// The rank.
        who: Rank,
    },
    /// `who` was in the view before and is not in the one just installed: it failed, or left
    /// on purpose. Reported once per view change, after its [`EndpointEvent::ViewInstalled`].
    Left {
        /// The rank (this rank itself, once it has left).
        who: Rank,
    },
    /// Instance `k` of [`EndpointRequest::Agree`] is decided: the same `value` and `failed`
    /// at every rank that reports it (uniform agreement among the view's survivors).
    Agreed {
        /// The instance: this rank's `k`-th agreement, counted from 0.
        k: u64,
        /// The operation folded over every survivor's value.
        value: u64,
        /// The job's ranks outside the view it was decided in (failed, or left), ascending.
        failed: Vec<Rank>,
    },
    /// `by` revoked (ULFM's `MPIX_Comm_revoke`): reported once at every live rank, the one
    /// that revoked included, for each of its revocations.
    Revoked {
        /// The rank that revoked.
        by: Rank,
    },
    /// At the view's root: every member acknowledged the view of `epoch`.
    Stabilized {
        /// The epoch.
        epoch: u64,
        /// When, on this node's protocol clock.
        at: Time,
    },
}

/// What an application asks of its endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointRequest {
    /// Send `data` to `to`; the outcome comes back as `Delivered` or `Failed` with `tag`.
    Send {
        /// The destination.
        to: Rank,
        /// The application's tag for it.
        tag: u64,
        /// The data.
        data: Payload,
    },
    /// Broadcast `data` to every live rank, over the BMG.
    Broadcast {
        /// The data.
        data: Payload,
    },
    /// Leave the job on purpose: the others install a view without this rank, and this rank
    /// reports its own [`EndpointEvent::Left`].
    Leave,
    /// Agree with every survivor on `op` over each one's `value`, and on who failed
    /// (ULFM's `MPIX_Comm_agree`): every live rank makes the call, in the same order, and
    /// each hears [`EndpointEvent::Agreed`] once; it completes despite failures during it.
    /// Make the next call once the last is decided.
    Agree {
        /// This rank's value.
        value: u64,
        /// How the values combine.
        op: AgreeOp,
    },
    /// Tell every live rank, once, that this rank revoked (a reliable broadcast over the
    /// BMG, as ULFM's revoke): each reports [`EndpointEvent::Revoked`].
    Revoke,
}

/// How an endpoint's membership and routing run.
#[derive(Clone, Copy, Debug)]
pub struct ServiceConfig {
    /// The membership's tree, probes and heartbeats.
    pub membership: MembershipConfig,
    /// The router's retries.
    pub route: RouteConfig,
}

impl Default for ServiceConfig {
    /// What `weft node` runs: radix 4, patched trees, ring heartbeats every 100 ms, and the
    /// router's usual retries.
    fn default() -> Self {
        Self {
            membership: MembershipConfig::default(),
            route: RouteConfig::default(),
        }
    }
}

/// Membership and routing on one node, for the process at one rank of the job.
pub struct Service {
    both: Pair<Membership, Route>,
    /// What the pair asked for in the current call, before it is spoken in ranks.
    inner: PairOutbox<Membership, Route>,
    /// The agreements, fed the membership's views.
    uniform: Uniform,
    /// What they asked for in the current call.
    agreed: Outbox<UniformMsg, Decision>,
    /// The revocations seen, and the flood that carries them.
    revoked: Revocations,
    /// The job's ranks: rank `r` is `ring[r]` (sorted).
    ring: Arc<[NodeId]>,
    me: Rank,
    /// The live ranks of the last view installed (at first, the whole job).
    view: Arc<[Rank]>,
    /// This rank has reported itself gone (a leave ends with both the membership's `Left`
    /// and a view without it; one report).
    gone: bool,
}

/// The service's messages: the membership's and the router's, and the agreements', each
/// read by its tag.
pub type ServiceMsg = Either<Either<MemberMsg, RouteMsg>, UniformMsg>;

impl Service {
    /// The service of rank `me` in a job whose processes are `ring` (sorted ids; rank `r` is
    /// `ring[r]`). `startup`: how long a peer never heard from is late, not dead (the
    /// engine's start-up grace: the two detectors keep one rule).
    pub fn new(me: Rank, ring: Arc<[NodeId]>, cfg: ServiceConfig, startup: Duration) -> Self {
        debug_assert!(ring.windows(2).all(|w| w[0] < w[1]), "ranks are sorted ids");
        let id = ring[me.0 as usize];
        let member = Membership::new(id, ring.to_vec(), cfg.membership).with_startup_grace(startup);
        let route = Route::new(me, ring.clone(), cfg.route);
        let view = (0..ring.len() as u32).map(Rank).collect();
        Self {
            both: Pair::new(member, route),
            inner: Outbox::new(),
            uniform: Uniform::new(id, ring.to_vec()),
            agreed: Outbox::new(),
            revoked: Revocations::new(me, ring.to_vec()),
            ring,
            me,
            view,
            gone: false,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.me
    }

    /// The live ranks of the view last installed.
    pub fn view(&self) -> &Arc<[Rank]> {
        &self.view
    }

    /// The membership (its epoch, root, tree).
    pub fn membership(&self) -> &Membership {
        &self.both.first
    }

    /// The router (its counters, what is in flight).
    pub fn router(&self) -> &Route {
        &self.both.second
    }

    /// The rank of `id`, if it is one of the job's processes.
    fn rank_of(&self, id: NodeId) -> Option<Rank> {
        rank_in(&self.ring, id)
    }

    /// Move what the pair asked for into `out`: messages and timers as they are, events in
    /// ranks. A view goes to the router before anything else happens, which may ask for more
    /// (it fails what it held for the excluded): that is taken too, in order.
    fn speak(&mut self, now: Time, out: &mut Outbox<ServiceMsg, EndpointEvent>) {
        while !self.inner.is_empty() || !self.agreed.is_empty() {
            let actions: Vec<_> = self.inner.drain().collect();
            for a in actions {
                match a {
                    Action::Send { to, msg } => out.send(to, Either::First(msg)),
                    Action::SetTimer { timer, after } => out.set_timer(timer, after),
                    Action::CancelTimer(t) => out.cancel_timer(t),
                    Action::Report(Either::First(e)) => self.member_news(now, e, out),
                    Action::Report(Either::Second(e)) => self.route_news(e, out),
                }
            }
            for a in self.agreed.drain() {
                match a {
                    Action::Send { to, msg } => out.send(to, Either::Second(msg)),
                    Action::Report(d) => out.report(EndpointEvent::Agreed {
                        k: d.k,
                        value: d.value,
                        failed: d
                            .failed
                            .iter()
                            .filter_map(|&i| rank_in(&self.ring, i))
                            .collect(),
                    }),
                    // The agreements arm no timers: a view change is what moves them on.
                    Action::SetTimer { .. } | Action::CancelTimer(_) => {}
                }
            }
        }
    }

    fn member_news(&mut self, now: Time, e: Event, out: &mut Outbox<ServiceMsg, EndpointEvent>) {
        let Event::Member(m) = e else {
            return; // counters, quiet: the launcher's business, not the application's
        };
        match m {
            MemberEvent::Detected { peer, at, why } => {
                if let Some(who) = self.rank_of(peer) {
                    out.report(EndpointEvent::Suspected {
                        who,
                        by: self.me,
                        why,
                        at,
                    });
                }
            }
            MemberEvent::ViewChanged {
                epoch,
                root,
                view,
                at,
            } => {
                let live: Vec<NodeId> = view.to_vec();
                self.both.on_request(
                    now,
                    Either::Second(RouteRequest::View(live)),
                    &mut self.inner,
                );
                self.uniform.on_view(&view[..], root, &mut self.agreed);
                let members: Arc<[Rank]> = view.iter().filter_map(|&i| self.rank_of(i)).collect();
                let old = std::mem::replace(&mut self.view, members.clone());
                out.report(EndpointEvent::ViewInstalled {
                    epoch,
                    root: self.rank_of(root).unwrap_or(Rank(u32::MAX)),
                    members: members.clone(),
                    at,
                });
                for &who in members.iter().filter(|r| old.binary_search(r).is_err()) {
                    out.report(EndpointEvent::Joined { who });
                }
                for &who in old.iter().filter(|r| members.binary_search(r).is_err()) {
                    self.gone |= who == self.me;
                    out.report(EndpointEvent::Left { who });
                }
            }
            MemberEvent::Left { peer, .. } if peer == self.ring[self.me.0 as usize] => {
                if !std::mem::replace(&mut self.gone, true) {
                    out.report(EndpointEvent::Left { who: self.me });
                }
            }
            MemberEvent::Stabilized { epoch, at } => {
                out.report(EndpointEvent::Stabilized { epoch, at });
            }
            // A root's note that a process left (its view follows) and a joiner's welcome.
            MemberEvent::Left { .. } | MemberEvent::Joined { .. } => {}
        }
    }

    fn route_news(&mut self, e: RouteEvent, out: &mut Outbox<ServiceMsg, EndpointEvent>) {
        // The router speaks of the job's own processes only.
        let rank = |id| self.rank_of(id).unwrap_or(Rank(u32::MAX));
        out.report(match e {
            RouteEvent::Received {
                from, tag, data, ..
            } => EndpointEvent::Received {
                from: rank(from),
                tag,
                data,
            },
            RouteEvent::Delivered { to, tag, rtt, .. } => EndpointEvent::Delivered {
                to: rank(to),
                tag,
                rtt,
            },
            RouteEvent::Failed { to, tag, why } => EndpointEvent::Failed {
                to: rank(to),
                tag,
                why,
            },
            RouteEvent::Broadcast { origin, data, .. } => EndpointEvent::Broadcast {
                origin: rank(origin),
                data,
            },
        });
    }
}

/// The rank of `id` in a job of `ring` (sorted ids).
fn rank_in(ring: &[NodeId], id: NodeId) -> Option<Rank> {
    ring.binary_search(&id).ok().map(|r| Rank(r as u32))
}

impl Protocol for Service {
    type Msg = ServiceMsg;
    type Event = EndpointEvent;
    type Request = EndpointRequest;

    fn on_start(&mut self, now: Time, out: &mut Outbox<ServiceMsg, EndpointEvent>) {
        self.both.on_start(now, &mut self.inner);
        self.speak(now, out);
    }

    fn on_message(
        &mut self,
        now: Time,
        from: NodeId,
        msg: ServiceMsg,
        out: &mut Outbox<ServiceMsg, EndpointEvent>,
    ) {
        match msg {
            Either::First(m) => self.both.on_message(now, from, m, &mut self.inner),
            Either::Second(UniformMsg::Revoke { origin, seq }) => {
                let view = self.both.first.view();
                if self
                    .revoked
                    .on_notice(from, origin, seq, view, &mut self.agreed)
                {
                    out.report(EndpointEvent::Revoked { by: Rank(origin) });
                }
            }
            Either::Second(m) => {
                let (view, root) = (self.both.first.view(), self.both.first.root());
                self.uniform
                    .on_message(from, m, view, root, &mut self.agreed);
            }
        }
        self.speak(now, out);
    }

    fn on_timer(&mut self, now: Time, timer: TimerId, out: &mut Outbox<ServiceMsg, EndpointEvent>) {
        self.both.on_timer(now, timer, &mut self.inner);
        self.speak(now, out);
    }

    fn on_suspect(&mut self, now: Time, peer: NodeId, out: &mut Outbox<ServiceMsg, EndpointEvent>) {
        self.both.on_suspect(now, peer, &mut self.inner);
        self.speak(now, out);
    }

    fn on_request(
        &mut self,
        now: Time,
        req: EndpointRequest,
        out: &mut Outbox<ServiceMsg, EndpointEvent>,
    ) {
        let req = match req {
            EndpointRequest::Send { to, tag, data } => RouteRequest::Send { to, tag, data },
            EndpointRequest::Broadcast { data } => RouteRequest::Broadcast { data },
            EndpointRequest::Leave => {
                self.both.with_first(|m, o| m.leave(o), &mut self.inner);
                return self.speak(now, out);
            }
            EndpointRequest::Revoke => {
                let view = self.both.first.view();
                self.revoked.revoke(view, &mut self.agreed);
                out.report(EndpointEvent::Revoked { by: self.me });
                return self.speak(now, out);
            }
            EndpointRequest::Agree { value, op } => {
                let (view, root) = (self.both.first.view(), self.both.first.root());
                self.uniform.agree(value, op, view, root, &mut self.agreed);
                return self.speak(now, out);
            }
        };
        self.both
            .on_request(now, Either::Second(req), &mut self.inner);
        self.speak(now, out);
    }

    fn on_wake(&mut self, now: Time, out: &mut Outbox<ServiceMsg, EndpointEvent>) {
        self.both.on_wake(now, &mut self.inner);
        self.speak(now, out);
    }

    fn state_version(&self) -> u64 {
        self.both.state_version()
    }

    fn prefetch(&self) {
        self.both.prefetch();
    }
}

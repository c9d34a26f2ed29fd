//! Algorithm 2 of Bosilca et al. (2009): a self-stabilizing binomial graph built from a ring
//! whose size `N` is known.
//!
//! Inputs are the ring's `Pred` and `Succ`; outputs the finger tables `CW` and `CCW`, where
//! `CW[k]` is the process `2^k` steps clockwise and `CCW[k]` the one `2^k` steps back, for every
//! `k` with `2^k < N`. The rules, numbered as in the paper:
//!
//! 1. `→` `CW[0] = Succ`, `CCW[0] = Pred`, send `Up(CCW[0], 1)` to `Succ` and
//!    `Dn(CW[0], 1)` to `Pred`.
//! 2. recv `Up(ident, h)` `→` `CCW[h] = ident`; if `2^(h+1) < N` send `Up(ident, h+1)` to
//!    `CW[h]` and `Dn(CW[h], h+1)` to `ident`.
//! 3. recv `Dn(ident, h)` `→` `CW[h] = ident`; if `2^(h+1) < N` send `Dn(ident, h+1)` to
//!    `CCW[h]` and `Up(CCW[h], h+1)` to `ident`.
//!
//! A process thus introduces its two neighbors at distance `2^h` to each other, who are at
//! distance `2^(h+1)`: level `h+1` is built from level `h`.
//!
//! Departures from the paper:
//! - Rules 2 and 3 both send the same pair of introductions (they only differ in which half of
//!   the pair was just learned), and the first of the two to arrive would send with the other
//!   half still `⊥` or stale. Read literally, every received message sends two, so a single
//!   firing of rule 1 costs `2^h` messages at level `h`. weft sends the level-`h+1` pair once per
//!   pair of `Up`/`Dn` received at level `h` (when both have been heard since the last send),
//!   which is also the count the paper quotes: `2 log2 N` messages per process.
//! - The paper's rule 3 tests `2^(h+1) ≤ N`, which for `N = 2^(h+1)` would build a level whose
//!   jump is the whole ring. weft uses `<` in both rules, matching the BMG's definition.
//! - Messages with a level out of range (`h = 0` or `2^h ≥ N`) can only be corrupt; they are
//!   dropped.
//! - Rule 1 is enabled only when `Succ` and `Pred` are known, and goes quiet once it has fired
//!   with the current `Succ` and `Pred` (section 4's quiet nodes).

use super::spontaneous::{Rules, SpontaneousConfig, Standalone};
use super::{Outbox, TimerId};
use crate::topology;
use crate::{NodeId, PackedId};

pub use self::wire_form::BmgMsg;

/// A module of its own for the archived form: rkyv derives a resolver enum whose variant
/// fields carry no docs, and kept private it stays out of the public API.
mod wire_form {
    use super::*;

    /// Messages of Algorithm 2.
    #[derive(
        Clone, Copy, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
    )]
    pub enum BmgMsg {
        /// `UP(ident, nb_hop)`: `ident` is `2^nb_hop` steps counterclockwise of the receiver.
        Up {
            /// The process being introduced.
            ident: NodeId,
            /// The level `nb_hop`.
            hop: u8,
        },
        /// `DN(ident, nb_hop)`: `ident` is `2^nb_hop` steps clockwise of the receiver.
        Dn {
            /// The process being introduced.
            ident: NodeId,
            /// The level `nb_hop`.
            hop: u8,
        },
    }
}

/// Marks an unset finger. Fingers are ranks of a job of fewer than `u32::MAX` processes,
/// stored in 32 bits; an id at or above `UNSET` names nobody, and a message naming one leaves
/// its finger unset.
const UNSET: u32 = u32::MAX;

/// The BMG rules of one process.
#[derive(Clone, Debug)]
pub struct Bmg {
    /// 32 bits, as the fingers: with `levels` in its padding, a simulated process is 8 bytes
    /// smaller.
    id: PackedId,
    levels: u8,
    /// The inputs, in 32 bits as the fingers are.
    succ: PackedId,
    pred: PackedId,
    /// `CW` then `CCW` in one allocation (one cache miss per message, not two), 32-bit ranks
    /// with `UNSET` for `⊥`: a quarter of the memory of `Option<NodeId>`, which is most of a
    /// process's state at 2^24 processes.
    fingers: Box<[u32]>,
    /// Levels whose `Up` (`Dn`) was heard since the level's introductions were last sent
    /// (`levels` is at most 32).
    heard_up: u32,
    heard_dn: u32,
    /// The inputs rule 1 last fired with (`NONE` twice: never).
    fired_with: (PackedId, PackedId),
    version: u64,
}

impl Bmg {
    /// A process of a ring of `n` processes, with empty finger tables.
    ///
    /// # Panics
    /// When `id` is not a rank below `u32::MAX` (fingers are stored in 32 bits).
    pub fn new(id: NodeId, n: u32) -> Self {
        let levels = topology::bmg::levels(n) as usize;
        Self {
            id: PackedId::new(id).expect("BMG ids are ranks below u32::MAX"),
            levels: levels as u8,
            succ: PackedId::NONE,
            pred: PackedId::NONE,
            fingers: vec![UNSET; 2 * levels].into_boxed_slice(),
            heard_up: 0,
            heard_dn: 0,
            fired_with: (PackedId::NONE, PackedId::NONE),
            version: 0,
        }
    }

    /// This process.
    pub fn id(&self) -> NodeId {
        self.id.get().expect("set at construction")
    }

    /// Number of levels: `k` with `2^k < N`.
    pub fn levels(&self) -> usize {
        self.levels as usize
    }

    /// `CW[k]`: the process `2^k` steps clockwise.
    pub fn cw(&self, k: usize) -> Option<NodeId> {
        Self::get(self.fingers[k])
    }

    /// `CCW[k]`: the process `2^k` steps counterclockwise.
    pub fn ccw(&self, k: usize) -> Option<NodeId> {
        Self::get(self.fingers[self.levels as usize + k])
    }

    fn get(raw: u32) -> Option<NodeId> {
        (raw != UNSET).then_some(NodeId(raw as u64))
    }

    fn raw(v: Option<NodeId>) -> u32 {
        v.and_then(|v| u32::try_from(v.0).ok()).unwrap_or(UNSET)
    }

    /// Start loading the finger table into cache (see [`super::Protocol::prefetch`]).
    pub fn prefetch(&self) {
        super::prefetch_bytes(self.fingers.as_ptr(), std::mem::size_of_val(&*self.fingers));
    }

    /// Counter bumped whenever a finger changes value.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Overwrite the finger tables: an arbitrary initial configuration.
    pub fn corrupt(&mut self, mut value: impl FnMut() -> Option<NodeId>) {
        for f in self.fingers.iter_mut() {
            *f = Self::raw(value());
        }
        self.heard_up = 0;
        self.heard_dn = 0;
    }

    /// Feed the ring's outputs (the algorithm's inputs). Returns whether they changed, in which
    /// case rule 1 must fire again.
    pub fn set_ring(&mut self, succ: Option<NodeId>, pred: Option<NodeId>) -> bool {
        let (succ, pred) = (PackedId::pack(succ), PackedId::pack(pred));
        let changed = (self.succ, self.pred) != (succ, pred);
        self.succ = succ;
        self.pred = pred;
        changed
    }

    /// Whether rule 1 has fired with the current inputs.
    pub fn settled(&self) -> bool {
        if self.levels == 0 {
            return true;
        }
        match (self.succ.get(), self.pred.get()) {
            (Some(s), Some(p)) => {
                self.fired_with == (self.succ, self.pred)
                    && self.cw(0) == Some(s)
                    && self.ccw(0) == Some(p)
            }
            _ => false,
        }
    }

    /// Set `CW[k]` (or `CCW[k]` when `!clockwise`).
    fn set(&mut self, clockwise: bool, k: usize, v: NodeId) {
        let at = if clockwise {
            k
        } else {
            self.levels as usize + k
        };
        let v = Self::raw(Some(v));
        if self.fingers[at] != v {
            self.fingers[at] = v;
            self.version += 1;
        }
    }

    /// Rule 1.
    pub fn fire<M: From<BmgMsg>>(&mut self, out: &mut Outbox<M>) {
        let (Some(succ), Some(pred)) = (self.succ.get(), self.pred.get()) else {
            return;
        };
        self.fired_with = (self.succ, self.pred);
        if self.levels == 0 {
            return;
        }
        self.set(true, 0, succ);
        self.set(false, 0, pred);
        if self.levels > 1 {
            out.send(
                succ,
                BmgMsg::Up {
                    ident: pred,
                    hop: 1,
                },
            );
            out.send(
                pred,
                BmgMsg::Dn {
                    ident: succ,
                    hop: 1,
                },
            );
        }
    }

    /// Rules 2 and 3.
    pub fn handle<M: From<BmgMsg>>(&mut self, msg: BmgMsg, out: &mut Outbox<M>) {
        let (up, ident, hop) = match msg {
            BmgMsg::Up { ident, hop } => (true, ident, hop),
            BmgMsg::Dn { ident, hop } => (false, ident, hop),
        };
        if hop == 0 || hop >= self.levels {
            return;
        }
        let h = hop as usize;
        let bit = 1u32 << h;
        if up {
            self.set(false, h, ident);
            self.heard_up |= bit;
        } else {
            self.set(true, h, ident);
            self.heard_dn |= bit;
        }
        if self.heard_up & self.heard_dn & bit == 0 {
            return;
        }
        self.heard_up &= !bit;
        self.heard_dn &= !bit;
        if hop + 1 >= self.levels {
            return;
        }
        if let (Some(cw), Some(ccw)) = (self.cw(h), self.ccw(h)) {
            out.send(
                cw,
                BmgMsg::Up {
                    ident: ccw,
                    hop: hop + 1,
                },
            );
            out.send(
                ccw,
                BmgMsg::Dn {
                    ident: cw,
                    hop: hop + 1,
                },
            );
        }
    }
}

/// Timer of rule 1 when the BMG runs alone.
pub const BMG_TIMER: TimerId = TimerId(2);

impl Rules for Bmg {
    type Msg = BmgMsg;
    const TIMER: TimerId = BMG_TIMER;

    fn fire(&mut self, out: &mut Outbox<BmgMsg>) {
        Bmg::fire(self, out);
    }

    /// Messages only fill fingers; they never change the inputs rule 1 fires with, so they
    /// never wake a quiet node.
    fn handle(&mut self, _from: NodeId, msg: BmgMsg, out: &mut Outbox<BmgMsg>) -> bool {
        Bmg::handle(self, msg, out);
        false
    }

    fn settled(&self) -> bool {
        Bmg::settled(self)
    }

    fn version(&self) -> u64 {
        Bmg::version(self)
    }
}

/// Algorithm 2 as a standalone protocol over a ring given as input.
pub type BmgNode = Standalone<Bmg>;

impl Standalone<Bmg> {
    /// A process of an `n`-process ring with the given neighbors.
    pub fn over_ring(
        id: NodeId,
        n: u32,
        succ: NodeId,
        pred: NodeId,
        cfg: SpontaneousConfig,
    ) -> Self {
        let mut bmg = Bmg::new(id, n);
        bmg.set_ring(Some(succ), Some(pred));
        Standalone::new(bmg, cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Action;

    fn sends(out: &mut Outbox<BmgMsg>) -> Vec<(NodeId, BmgMsg)> {
        out.drain()
            .filter_map(|a| match a {
                Action::Send { to, msg } => Some((to, msg)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn introduces_level_h_neighbors_once_both_are_heard() {
        // Ring of 16 with ids = positions; look at position 5.
        let id = NodeId;
        let mut b = Bmg::new(id(5), 16);
        b.set_ring(Some(id(6)), Some(id(4)));
        let mut out = Outbox::new();
        b.fire(&mut out);
        assert_eq!(
            sends(&mut out),
            vec![
                (
                    id(6),
                    BmgMsg::Up {
                        ident: id(4),
                        hop: 1
                    }
                ),
                (
                    id(4),
                    BmgMsg::Dn {
                        ident: id(6),
                        hop: 1
                    }
                )
            ]
        );
        // Level 1: hearing only one side sends nothing yet.
        b.handle(
            BmgMsg::Up {
                ident: id(3),
                hop: 1,
            },
            &mut out,
        );
        assert!(sends(&mut out).is_empty());
        b.handle(
            BmgMsg::Dn {
                ident: id(7),
                hop: 1,
            },
            &mut out,
        );
        assert_eq!(
            sends(&mut out),
            vec![
                (
                    id(7),
                    BmgMsg::Up {
                        ident: id(3),
                        hop: 2
                    }
                ),
                (
                    id(3),
                    BmgMsg::Dn {
                        ident: id(7),
                        hop: 2
                    }
                )
            ]
        );
        assert_eq!(b.cw(1), Some(id(7)));
        assert_eq!(b.ccw(1), Some(id(3)));
        // The top level (2^3 = 8 < 16, 2^4 = 16 is not) stores and forwards nothing.
        b.handle(
            BmgMsg::Up {
                ident: id(13),
                hop: 3,
            },
            &mut out,
        );
        b.handle(
            BmgMsg::Dn {
                ident: id(13),
                hop: 3,
            },
            &mut out,
        );
        assert!(sends(&mut out).is_empty());
        // A corrupt level is dropped.
        b.handle(
            BmgMsg::Up {
                ident: id(1),
                hop: 9,
            },
            &mut out,
        );
        assert!(sends(&mut out).is_empty());
    }
}

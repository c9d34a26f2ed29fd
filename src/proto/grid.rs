//! The background application of the Process Order paper's experiment (Gendelman et al., 2000,
//! section 2): processes form a 2-D grid, and each, in a loop, modifies an array of doubles,
//! sends a message to its four nearest neighbours and waits for theirs. It keeps the cores and
//! the network busy while the broadcasts it shares them with are timed.
//!
//! The grid wraps around (a torus), so every process has four neighbours whatever its place;
//! in a grid of two rows or columns, one neighbour is met twice, and counted twice. A process
//! moves to round `r + 1` once every neighbour's round-`r` message is in; a neighbour is at
//! most one round ahead (it waits for this process's message), so two counters suffice. A
//! neighbour that fails is no longer waited for.

use super::{Outbox, Protocol, Time};
use crate::buf::Payload;
use crate::NodeId;

pub use self::wire_form::GridMsg;

mod wire_form {
    use super::*;

    /// A neighbour's message of one round.
    #[derive(Clone, Debug, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    pub struct GridMsg {
        /// The sender's round.
        pub round: u64,
        /// The exchanged values.
        pub data: Payload,
    }
}

impl super::Message for GridMsg {
    const TAG: super::Tag = 9;
    const NAME: &'static str = "grid";
    const BULK: bool = true;

    fn payload(&self) -> Option<&Payload> {
        Some(&self.data)
    }
}

/// The grid's shape for `n` processes: `(rows, cols)` with `rows * cols >= n` and the rows as
/// close to the columns as `n` allows (15: 3 × 5, 16: 4 × 4, 63: 7 × 9); the last row may be
/// short, and its missing places are skipped.
pub fn shape(n: usize) -> (usize, usize) {
    let n = n.max(1);
    let rows = (1..=n.isqrt())
        .rev()
        .find(|&r| n.is_multiple_of(r))
        .unwrap_or(1);
    // A prime (or nearly) count would make one long row: take the square's side instead.
    let rows = if rows * rows * 4 < n { n.isqrt() } else { rows };
    (rows, n.div_ceil(rows))
}

/// The four neighbours of place `i` of `n` on the wrapped grid (fewer when places of a short
/// last row are missing; itself never).
pub fn neighbours(i: usize, n: usize) -> Vec<usize> {
    let (rows, cols) = shape(n);
    let (r, c) = (i / cols, i % cols);
    let mut out = Vec::with_capacity(4);
    let places = [
        ((r + rows - 1) % rows, c),
        ((r + 1) % rows, c),
        (r, (c + cols - 1) % cols),
        (r, (c + 1) % cols),
    ];
    for (rr, cc) in places {
        let j = rr * cols + cc;
        if j < n && j != i {
            out.push(j);
        }
    }
    out
}

/// One process of the grid.
#[derive(Debug)]
pub struct Grid {
    neighbours: Vec<NodeId>,
    values: Vec<f64>,
    round: u64,
    /// Messages in for this round and for the next.
    have: [usize; 2],
    rounds_done: u64,
}

impl Grid {
    /// Place `i` of `ids`, exchanging `doubles` values a round.
    pub fn new(i: usize, ids: &[NodeId], doubles: usize) -> Self {
        Self {
            neighbours: neighbours(i, ids.len())
                .into_iter()
                .map(|j| ids[j])
                .collect(),
            values: (0..doubles).map(|k| k as f64).collect(),
            round: 0,
            have: [0, 0],
            rounds_done: 0,
        }
    }

    /// Rounds completed.
    pub fn rounds(&self) -> u64 {
        self.rounds_done
    }

    /// The section's "simple arithmetic modification to each array element", then the
    /// round's messages.
    fn step(&mut self, out: &mut Outbox<GridMsg>) {
        for v in &mut self.values {
            *v = *v * 0.5 + 1.0;
        }
        let bytes: Vec<u8> = self.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let data = Payload::from(bytes);
        for &p in &self.neighbours {
            out.send(
                p,
                GridMsg {
                    round: self.round,
                    data: data.clone(),
                },
            );
        }
    }

    /// Move on while every neighbour's message of the round is in.
    fn advance(&mut self, out: &mut Outbox<GridMsg>) {
        while !self.neighbours.is_empty() && self.have[0] >= self.neighbours.len() {
            self.have = [self.have[1], 0];
            self.round += 1;
            self.rounds_done += 1;
            self.step(out);
        }
    }
}

impl Protocol for Grid {
    type Msg = GridMsg;
    type Event = crate::proto::Event;
    type Request = crate::proto::NoRequest;

    fn on_start(&mut self, _now: Time, out: &mut Outbox<GridMsg>) {
        self.step(out);
    }

    fn on_message(&mut self, _now: Time, _from: NodeId, msg: GridMsg, out: &mut Outbox<GridMsg>) {
        match msg.round.checked_sub(self.round) {
            Some(0) => self.have[0] += 1,
            Some(1) => self.have[1] += 1,
            _ => {} // a neighbour cannot be further ahead; an old round is a duplicate
        }
        self.advance(out);
    }

    fn on_timer(&mut self, _now: Time, _timer: super::TimerId, _out: &mut Outbox<GridMsg>) {}

    fn on_suspect(&mut self, _now: Time, peer: NodeId, out: &mut Outbox<GridMsg>) {
        self.neighbours.retain(|&p| p != peer);
        self.advance(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Action;

    #[test]
    fn shapes_are_near_square() {
        assert_eq!(shape(15), (3, 5));
        assert_eq!(shape(16), (4, 4));
        assert_eq!(shape(63), (7, 9));
        assert_eq!(shape(1), (1, 1));
        // 13 is prime: not one row of 13.
        assert_eq!(shape(13), (3, 5));
    }

    #[test]
    fn every_place_has_four_neighbours_on_a_full_torus_and_they_are_mutual() {
        for n in [15, 16, 63] {
            for i in 0..n {
                let nb = neighbours(i, n);
                assert_eq!(nb.len(), 4, "place {i} of {n}");
                for j in nb {
                    assert!(neighbours(j, n).contains(&i), "{i} and {j} of {n}");
                }
            }
        }
        // A short last row: missing places are skipped, the rest stay mutual.
        for i in 0..13 {
            for j in neighbours(i, 13) {
                assert!(j < 13 && neighbours(j, 13).contains(&i));
            }
        }
    }

    fn sends(out: &mut Outbox<GridMsg>) -> Vec<(NodeId, u64)> {
        out.drain()
            .filter_map(|a| match a {
                Action::Send { to, msg } => Some((to, msg.round)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_round_ends_when_every_neighbour_has_sent_and_an_early_one_counts_for_the_next() {
        let ids: Vec<NodeId> = (0..16).map(NodeId).collect();
        let mut g = Grid::new(5, &ids, 4);
        let mut out = Outbox::new();
        g.on_start(Time::ZERO, &mut out);
        let first = sends(&mut out);
        assert_eq!(first.len(), 4);
        assert!(first.iter().all(|&(_, r)| r == 0));
        let nb: Vec<NodeId> = first.iter().map(|&(p, _)| p).collect();
        // One neighbour is a round ahead already.
        g.on_message(
            Time::ZERO,
            nb[0],
            GridMsg {
                round: 1,
                data: Payload::from(vec![]),
            },
            &mut out,
        );
        for &p in &nb[..3] {
            g.on_message(
                Time::ZERO,
                p,
                GridMsg {
                    round: 0,
                    data: Payload::from(vec![]),
                },
                &mut out,
            );
            assert!(sends(&mut out).is_empty(), "round 0 is not over");
        }
        g.on_message(
            Time::ZERO,
            nb[3],
            GridMsg {
                round: 0,
                data: Payload::from(vec![]),
            },
            &mut out,
        );
        assert_eq!(g.rounds(), 1);
        assert!(sends(&mut out).iter().all(|&(_, r)| r == 1));
        // A failed neighbour is no longer waited for: three of round 1 end it.
        g.on_suspect(Time::ZERO, nb[3], &mut out);
        for &p in &nb[1..3] {
            g.on_message(
                Time::ZERO,
                p,
                GridMsg {
                    round: 1,
                    data: Payload::from(vec![]),
                },
                &mut out,
            );
        }
        assert_eq!(g.rounds(), 2, "nb[0]'s early message counted for round 1");
        assert_eq!(sends(&mut out).len(), 3);
    }
}

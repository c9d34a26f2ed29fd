//! What the timed simulator's network may do to a message besides delay it: lose it,
//! deliver it twice, let it overtake earlier ones, hold it far longer than usual, or drop it
//! at a partition.
//!
//! weft's engine runs over TCP, so within one connection nothing is lost, duplicated or
//! reordered; these faults stand for what happens around connections: a reset connection
//! that is dialed again loses what was in its buffers without anyone noticing (loss), a
//! sender that re-sends after such a reset may deliver twice (duplication), and the new
//! connection's messages may overtake the old one's (reordering). A partition cuts every
//! connection across it: what is sent across is lost and both ends notice, as a failed dial or
//! a reset does. A protocol that survives these survives the engine's worst days.

use crate::rng::SimRng;
use std::time::Duration;

/// Per-message fault rates, the same on every link.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkFaults {
    /// Probability that a message is lost and nobody notices.
    pub loss: f64,
    /// Probability that a message is delivered twice.
    pub dup: f64,
    /// Probability that a message ignores the pair's FIFO order.
    pub reorder: f64,
    /// Probability that a message is held up to `tail_max` longer (the long tail of a
    /// latency distribution: a retransmission timeout, a descheduled receiver).
    pub tail: f64,
    /// Most extra delay of a message in the tail.
    #[serde(rename = "tail_max_us", with = "micros")]
    pub tail_max: Duration,
}

/// A duration as whole microseconds, in a schedule's JSON.
mod micros {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_micros() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_micros)
    }
}

/// What the network does to one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fate {
    /// Lost.
    pub lost: bool,
    /// Delivered a second time, this much after the first.
    pub dup: Option<u64>,
    /// Not held behind the pair's earlier messages.
    pub reordered: bool,
    /// Extra delay, ns.
    pub extra: u64,
}

impl Fate {
    /// The fate of a message on a faultless network.
    pub const CLEAN: Fate = Fate {
        lost: false,
        dup: None,
        reordered: false,
        extra: 0,
    };
}

/// Counts of what the network did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FaultCounts {
    /// Messages lost.
    pub lost: u64,
    /// Messages delivered twice.
    pub duplicated: u64,
    /// Messages that ignored FIFO.
    pub reordered: u64,
    /// Messages held in the tail.
    pub delayed: u64,
    /// Messages dropped at a partition.
    pub cut: u64,
}

impl LinkFaults {
    /// No faults.
    pub const NONE: LinkFaults = LinkFaults {
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        tail: 0.0,
        tail_max: Duration::ZERO,
    };

    /// Draw one message's fate.
    pub fn draw(&self, rng: &mut SimRng, counts: &mut FaultCounts) -> Fate {
        if *self == Self::NONE {
            return Fate::CLEAN;
        }
        if rng.chance(self.loss) {
            counts.lost += 1;
            return Fate {
                lost: true,
                ..Fate::CLEAN
            };
        }
        let max = self.tail_max.as_nanos() as u64;
        let mut fate = Fate::CLEAN;
        if rng.chance(self.tail) {
            counts.delayed += 1;
            fate.extra = rng.below(max + 1);
        }
        if rng.chance(self.reorder) {
            counts.reordered += 1;
            fate.reordered = true;
        }
        if rng.chance(self.dup) {
            counts.duplicated += 1;
            fate.dup = Some(rng.below(max + 1));
        }
        fate
    }
}

/// Which side of a partition each process is on (`None`: no partition). A process on
/// [`Sides::BRIDGE`] reaches every side: a cut that is not transitive, as when the link
/// between two hosts goes down and a third host still reaches both.
#[derive(Clone, Debug, Default)]
pub struct Sides(Option<Vec<u8>>);

impl Sides {
    /// The side that no partition separates from any other.
    pub const BRIDGE: u8 = u8::MAX;

    /// Whether a partition separates `a` from `b`.
    pub fn cut(&self, a: u32, b: u32) -> bool {
        self.0.as_ref().is_some_and(|s| {
            let (x, y) = (s.get(a as usize), s.get(b as usize));
            x != y && x != Some(&Self::BRIDGE) && y != Some(&Self::BRIDGE)
        })
    }

    /// Form a partition: process `i` is on side `side[i]`.
    pub fn form(&mut self, side: Vec<u8>) {
        self.0 = Some(side);
    }

    /// Heal it.
    pub fn heal(&mut self) {
        self.0 = None;
    }

    /// Whether a partition stands.
    pub fn standing(&self) -> bool {
        self.0.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_honoured_and_none_draws_nothing() {
        let f = LinkFaults {
            loss: 0.1,
            dup: 0.2,
            reorder: 0.3,
            tail: 0.05,
            tail_max: Duration::from_micros(100),
        };
        let mut rng = SimRng::new(7);
        let mut c = FaultCounts::default();
        let n = 100_000u64;
        for _ in 0..n {
            let fate = f.draw(&mut rng, &mut c);
            assert!(fate.extra <= 100_000);
        }
        let near = |got: u64, p: f64| (got as f64 / n as f64 - p).abs() < 0.01;
        assert!(near(c.lost, 0.1), "{c:?}");
        // The others are drawn only for messages not lost.
        assert!(near(c.duplicated, 0.9 * 0.2), "{c:?}");
        assert!(near(c.reordered, 0.9 * 0.3), "{c:?}");
        assert!(near(c.delayed, 0.9 * 0.05), "{c:?}");
        let mut none = FaultCounts::default();
        for _ in 0..1000 {
            assert_eq!(LinkFaults::NONE.draw(&mut rng, &mut none), Fate::CLEAN);
        }
        assert_eq!(none, FaultCounts::default());
    }

    #[test]
    fn a_partition_cuts_only_across_its_sides() {
        let mut s = Sides::default();
        assert!(!s.cut(0, 1));
        s.form(vec![0, 0, 1]);
        assert!(!s.cut(0, 1) && s.cut(0, 2) && s.cut(2, 1));
        s.heal();
        assert!(!s.cut(0, 2) && !s.standing());
    }

    #[test]
    fn a_bridge_reaches_both_sides_of_a_cut() {
        let mut s = Sides::default();
        s.form(vec![0, 1, Sides::BRIDGE]);
        assert!(s.cut(0, 1) && s.cut(1, 0));
        assert!(!s.cut(0, 2) && !s.cut(2, 1) && !s.cut(2, 0));
    }
}

//! The 3-D torus of BlueGene/L (ICS'06, section 6): coordinates of a rank and hop distance.
//!
//! Ranks are mapped to coordinates in XYZ order (x varies fastest), the default mapping of a
//! BG/L partition; a midplane is 8×8×8, and larger partitions join midplanes (8×8×16 is two).
//! Every dimension wraps around, so the distance along one axis is the shorter way round.

use super::TopologyError;
use crate::Rank;

/// An X×Y×Z torus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torus {
    /// Extent in x, y and z.
    pub dims: [u32; 3],
}

/// A position on the torus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coord {
    /// x, y, z
    pub xyz: [u32; 3],
}

impl Torus {
    /// One BlueGene/L midplane.
    pub const MIDPLANE: Torus = Torus { dims: [8, 8, 8] };

    /// A torus with the given extents, each at least 1.
    pub fn new(x: u32, y: u32, z: u32) -> Result<Self, TopologyError> {
        if x == 0 || y == 0 || z == 0 {
            return Err(TopologyError::Torus([x, y, z]));
        }
        Ok(Self { dims: [x, y, z] })
    }

    /// The smallest BlueGene/L torus partition that holds `n` nodes: one midplane up to 512,
    /// then each doubling doubles one dimension, z first (8×8×16 holds 1024 on two
    /// midplanes, 8×16×16 2048, 16×16×16 4096, …).
    pub fn partition(n: u64) -> Torus {
        let mut t = Self::MIDPLANE;
        let mut axis = 2;
        while !t.holds(n) {
            t.dims[axis] *= 2;
            axis = (axis + 2) % 3;
        }
        t
    }

    /// Whether `n` ranks fit, one per node (beyond, [`Self::coord`] would fold them).
    pub fn holds(&self, n: u64) -> bool {
        n <= self.size()
    }

    /// Number of nodes.
    pub fn size(&self) -> u64 {
        self.dims.iter().map(|&d| d as u64).product()
    }

    /// Coordinates of `r` in XYZ order. Ranks beyond one torus wrap onto it.
    pub fn coord(&self, r: Rank) -> Coord {
        let [x, y, z] = self.dims;
        let i = r.0 as u64 % self.size();
        let (x, y, z) = (x as u64, y as u64, z as u64);
        Coord {
            xyz: [
                (i % x) as u32,
                ((i / x) % y) as u32,
                ((i / (x * y)) % z) as u32,
            ],
        }
    }

    /// The rank at a coordinate (inverse of [`Self::coord`]).
    pub fn rank(&self, c: Coord) -> Rank {
        let [x, y, _] = self.dims;
        Rank(c.xyz[0] + x * (c.xyz[1] + y * c.xyz[2]))
    }

    /// Minimal number of links between two ranks, wrapping in every dimension.
    pub fn hops(&self, a: Rank, b: Rank) -> u32 {
        let (ca, cb) = (self.coord(a), self.coord(b));
        (0..3)
            .map(|i| {
                let d = ca.xyz[i].abs_diff(cb.xyz[i]);
                d.min(self.dims[i] - d)
            })
            .sum()
    }

    /// The largest possible hop distance: half of each dimension, rounded down.
    pub fn diameter(&self) -> u32 {
        self.dims.iter().map(|d| d / 2).sum()
    }
}

impl std::str::FromStr for Torus {
    type Err = TopologyError;

    /// `XxYxZ`, e.g. `8x8x16`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || TopologyError::TorusSpec(s.to_string());
        let dims: Vec<u32> = s
            .split(['x', 'X'])
            .map(|d| d.trim().parse::<u32>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let [x, y, z] = dims[..] else {
            return Err(bad());
        };
        let t = Torus::new(x, y, z)?;
        if t.size() > u32::MAX as u64 {
            return Err(bad());
        }
        Ok(t)
    }
}

impl std::fmt::Display for Torus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [x, y, z] = self.dims;
        write!(f, "{x}x{y}x{z}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn midplane_corners() {
        let t = Torus::MIDPLANE;
        assert_eq!(t.hops(Rank(0), Rank(1)), 1);
        assert_eq!(t.hops(Rank(0), Rank(7)), 1, "x wraps around");
        assert_eq!(t.hops(Rank(0), Rank(4 + 8 * 4 + 64 * 4)), 12);
        assert_eq!(t.diameter(), 12);
        assert!(Torus::new(0, 8, 8).is_err());
    }

    /// 1024 ranks lie on two midplanes, not folded onto one: rank 512 is a z-neighbour of
    /// rank 0's plane, not rank 0 itself.
    #[test]
    fn partitions_grow_by_midplanes() {
        assert_eq!(Torus::partition(1), Torus::MIDPLANE);
        assert_eq!(Torus::partition(512), Torus::MIDPLANE);
        let two = Torus::partition(1024);
        assert_eq!(two.dims, [8, 8, 16]);
        assert_eq!(Torus::partition(513), two);
        assert_eq!(Torus::partition(2048).dims, [8, 16, 16]);
        assert_eq!(Torus::partition(4096).dims, [16, 16, 16]);
        assert_eq!(Torus::partition(8192).dims, [16, 16, 32]);
        assert_eq!(two.hops(Rank(0), Rank(512)), 8);
        assert_eq!(
            Torus::MIDPLANE.hops(Rank(0), Rank(512)),
            0,
            "one midplane folds"
        );
        assert_eq!(two.diameter(), 16);
    }

    #[test]
    fn shapes_parse_and_print() {
        let t: Torus = "8x8x16".parse().unwrap();
        assert_eq!(t.dims, [8, 8, 16]);
        assert_eq!(t.to_string(), "8x8x16");
        assert_eq!("4X2X1".parse::<Torus>().unwrap().dims, [4, 2, 1]);
        for bad in [
            "",
            "8x8",
            "8x8x8x8",
            "8xx8",
            "0x8x8",
            "ax8x8",
            "-1x8x8",
            "65536x65536x2",
        ] {
            assert!(bad.parse::<Torus>().is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn hops_is_a_bounded_metric(x in 1u32..12, y in 1u32..12, z in 1u32..12,
                                    a in any::<u32>(), b in any::<u32>(), c in any::<u32>()) {
            let t = Torus::new(x, y, z).unwrap();
            let n = t.size() as u32;
            let (a, b, c) = (Rank(a % n), Rank(b % n), Rank(c % n));
            prop_assert_eq!(t.rank(t.coord(a)), a);
            prop_assert_eq!(t.hops(a, b), t.hops(b, a));
            prop_assert!(t.hops(a, b) <= t.diameter());
            prop_assert_eq!(t.hops(a, b) == 0, a == b);
            prop_assert!(t.hops(a, c) <= t.hops(a, b) + t.hops(b, c));
        }
    }
}

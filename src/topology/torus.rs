//! The 3-D torus of BlueGene/L (ICS'06, section 6): coordinates of a rank and hop distance.
//!
//! Ranks are mapped to coordinates in XYZ order (x varies fastest), the default mapping of a
//! BG/L partition; a midplane is 8×8×8. Every dimension wraps around, so the distance along one
//! axis is the shorter way round.

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

//! Where the pieces of a state go: neighborhoods of the live view (LOCALSTORAGE, section
//! 3.5.3) and the two schemes users know from SCR, partner copy and XOR sets.
//!
//! The paper partitions the `n` real processors into `n / N_u` neighborhoods of size `N_u` by
//! a random hash `H`, with `N_0 = log n` and `N_u` doubled by each BACKTRACK; a state is
//! dispersed with `m = N_u / 2` over the neighborhood of its virtual processor's physical
//! destination. weft draws `H` from a seed agreed by all processes (`proto::agreement`'s
//! BSPRANDOMCHOICE) over the *live* view at checkpoint time, so neighborhoods adapt to who
//! is alive, and keeps that view with the checkpoint so that any process finds the pieces.
//!
//! Departure: when `n` is not a multiple of `N_u` the groups hold `N_u` to `2 N_u − 1`
//! members (sizes differ by at most one), each coded with `n` = its size and `m` = half of
//! it rounded up, so each tolerates `⌊size / 2⌋` losses. GF(2^8) allows at most 255 pieces:
//! a neighborhood larger than that is split into groups of at most 255.

use super::Scheme;
use crate::NodeId;
use std::sync::Arc;

/// The largest IDA group GF(2^8) allows.
pub const MAX_GROUP: usize = 255;

/// `N_0 = ⌈log2 n⌉` (at least 2: one piece tolerates nothing).
pub fn n_0(n: usize) -> usize {
    (usize::BITS - n.saturating_sub(1).leading_zeros()).max(2) as usize
}

/// `N_u = 2^u · N_0` after `u` BACKTRACKs.
pub fn n_u(n: usize, u: u32) -> usize {
    n_0(n).saturating_mul(1usize.checked_shl(u).unwrap_or(usize::MAX))
}

/// The neighborhood size of a view of `n` processes after `u` BACKTRACKs: `N_u`, at most
/// the whole view.
pub fn size_for(n: usize, u: u32) -> usize {
    n_u(n, u).min(n.max(1))
}

/// A stable 64-bit mix (splitmix64's finalizer): the hash `H` of a seed and an id.
pub fn mix(seed: u64, x: u64) -> u64 {
    let mut z = seed ^ x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Where a checkpoint's pieces went: the scheme, the view it was taken over and the hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// How states are coded.
    pub scheme: Scheme,
    /// The live view at checkpoint time, sorted.
    pub view: Arc<[NodeId]>,
    /// The agreed seed of `H`.
    pub seed: u64,
    /// Neighborhood size `N_u` (IDA), or the set size (XOR).
    pub size: usize,
    /// The groups: IDA neighborhoods, XOR sets, or the whole view in ring order (partner).
    groups: Vec<Vec<NodeId>>,
}

impl Placement {
    /// The placement of `scheme` over `view` (sorted, deduplicated here), with `backtracks`
    /// doublings of the neighborhoods (IDA) and the seed of `H`.
    pub fn new(scheme: Scheme, view: &[NodeId], seed: u64, backtracks: u32) -> Self {
        let mut sorted = view.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let len = sorted.len();
        let (size, groups) = match scheme {
            Scheme::Ida => {
                let size = size_for(len, backtracks);
                // Each BACKTRACK draws a new hash (section 3.5.2), the first one is the seed's.
                let h = if backtracks == 0 {
                    seed
                } else {
                    mix(seed, u64::from(backtracks))
                };
                let mut order = sorted.clone();
                order.sort_by_key(|id| (mix(h, id.0), id.0));
                let g = (len / size.max(1)).max(len.div_ceil(MAX_GROUP)).max(1);
                let groups = (0..g)
                    .map(|i| order[i * len / g..(i + 1) * len / g].to_vec())
                    .collect();
                (size, groups)
            }
            Scheme::Partner => (2, vec![sorted.clone()]),
            Scheme::Xor { set } => {
                let set = set.clamp(2, MAX_GROUP);
                let mut groups: Vec<Vec<NodeId>> = sorted.chunks(set).map(<[_]>::to_vec).collect();
                // A last set of one could rebuild nothing: it joins the one before.
                if groups.len() > 1 && groups.last().is_some_and(|g| g.len() < 2) {
                    let last = groups.pop().unwrap_or_default();
                    if let Some(prev) = groups.last_mut() {
                        prev.extend(last);
                    }
                }
                (set, groups)
            }
        };
        Self {
            scheme,
            view: sorted.into(),
            seed,
            size,
            groups,
        }
    }

    /// The groups (neighborhoods, sets).
    pub fn groups(&self) -> &[Vec<NodeId>] {
        &self.groups
    }

    /// The physical destination of virtual processor `vid`: the process of that id when it
    /// is in the view (the paper's initial 1–1 mapping), else one chosen by `H`.
    pub fn home(&self, vid: u64) -> Option<NodeId> {
        if self.view.is_empty() {
            return None;
        }
        if self.view.binary_search(&NodeId(vid)).is_ok() {
            return Some(NodeId(vid));
        }
        let i = mix(self.seed, vid) % self.view.len() as u64;
        Some(self.view[i as usize])
    }

    /// The group holding `vid`'s pieces, and the home's position in it.
    pub fn group_of(&self, vid: u64) -> Option<(&[NodeId], usize)> {
        let home = self.home(vid)?;
        self.groups
            .iter()
            .find_map(|g| g.iter().position(|&x| x == home).map(|p| (&g[..], p)))
    }

    /// The holders of `vid`'s pieces, slot by slot, and the pieces needed (`m`): the
    /// neighborhood for IDA, the next process of the view for partner copy, the other
    /// members of the set for XOR (whose rebuild needs every survivor of the set).
    pub fn holders(&self, vid: u64) -> Option<(Vec<NodeId>, usize)> {
        let (group, pos) = self.group_of(vid)?;
        Some(match self.scheme {
            Scheme::Ida => (group.to_vec(), group.len().div_ceil(2)),
            Scheme::Partner => {
                let partner = group[(pos + 1) % group.len()];
                (vec![partner], 1)
            }
            Scheme::Xor { .. } => {
                let others: Vec<NodeId> =
                    group.iter().copied().filter(|&x| x != group[pos]).collect();
                let m = others.len();
                (others, m)
            }
        })
    }

    /// The replicas a SafeState can have (GLOBALSTORAGE): one per other neighborhood; none
    /// for the SCR schemes, which have no neighborhoods to copy into.
    pub fn max_replicas(&self) -> usize {
        match self.scheme {
            Scheme::Ida => self.groups.len().saturating_sub(1),
            Scheme::Partner | Scheme::Xor { .. } => 0,
        }
    }

    /// The holders of replica `r` of `vid`'s pieces (GLOBALSTORAGE, Figure 9), slot by slot:
    /// replica 0 is the neighborhood itself ([`Placement::holders`]), replica `r` the `r`-th
    /// neighborhood after it (modulo their number), slot `i` on its member `i` modulo its
    /// size (neighborhoods differ in size by at most one, so at most one member holds two
    /// slots). The pieces are the same bytes in every replica: a rebuild takes any `m`
    /// distinct slots from any replicas. `None` past [`Placement::max_replicas`].
    pub fn replica_holders(&self, vid: u64, r: usize) -> Option<Vec<NodeId>> {
        let (holders, _) = self.holders(vid)?;
        if r == 0 {
            return Some(holders);
        }
        if r > self.max_replicas() {
            return None;
        }
        let home = self.home(vid)?;
        let g = self.groups.iter().position(|g| g.contains(&home))?;
        let target = &self.groups[(g + r) % self.groups.len()];
        Some(
            (0..holders.len())
                .map(|i| target[i % target.len()])
                .collect(),
        )
    }

    /// Whether `vid`'s state survives the loss of the processes `dead`: its own process is
    /// counted dead when listed (a recovery is for a state whose process died).
    pub fn tolerates(&self, vid: u64, dead: &[NodeId]) -> bool {
        let Some((holders, m)) = self.holders(vid) else {
            return false;
        };
        let alive = holders.iter().filter(|h| !dead.contains(h)).count();
        match self.scheme {
            // XOR folds every survivor's share with the parities: one loss per set, and the
            // home's own loss is that one.
            Scheme::Xor { .. } => alive == holders.len(),
            _ => alive >= m,
        }
    }

    /// Whether `vid`'s SafeState with `replicas` replicas survives the loss of `dead`: some
    /// `m` slots each have a live holder in some replica.
    pub fn survives(&self, vid: u64, replicas: usize, dead: &[NodeId]) -> bool {
        let Some((holders, m)) = self.holders(vid) else {
            return false;
        };
        if replicas == 0 || self.scheme != Scheme::Ida {
            return self.tolerates(vid, dead);
        }
        let copies: Vec<Vec<NodeId>> = (0..=replicas.min(self.max_replicas()))
            .filter_map(|r| self.replica_holders(vid, r))
            .collect();
        let live_slots = (0..holders.len())
            .filter(|&i| copies.iter().any(|c| !dead.contains(&c[i])))
            .count();
        live_slots >= m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u64) -> Vec<NodeId> {
        (0..n).map(NodeId).collect()
    }

    #[test]
    fn n_0_is_log2_rounded_up_and_doubles_per_backtrack() {
        assert_eq!(n_0(16), 4);
        assert_eq!(n_0(17), 5);
        assert_eq!(n_0(1000), 10);
        assert_eq!(n_0(1), 2);
        assert_eq!(n_u(16, 2), 16);
    }

    #[test]
    fn neighborhoods_partition_the_view_evenly() {
        for n in [1u64, 2, 5, 16, 17, 100, 1000] {
            let p = Placement::new(Scheme::Ida, &ids(n), 7, 0);
            let mut all: Vec<NodeId> = p.groups().iter().flatten().copied().collect();
            all.sort();
            assert_eq!(all, ids(n), "n = {n}: every process in exactly one group");
            let sizes: Vec<usize> = p.groups().iter().map(Vec::len).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "n = {n}: sizes {sizes:?}");
            assert!(*hi <= MAX_GROUP);
            if n >= 4 {
                assert!(*lo >= p.size, "n = {n}: a group below N_u");
            }
        }
    }

    #[test]
    fn a_neighborhood_above_255_is_split() {
        let p = Placement::new(Scheme::Ida, &ids(600), 1, 9);
        assert!(p.groups().iter().all(|g| g.len() <= MAX_GROUP));
        assert_eq!(p.groups().len(), 3);
    }

    #[test]
    fn the_seed_changes_the_neighborhoods_and_the_same_seed_does_not() {
        let a = Placement::new(Scheme::Ida, &ids(64), 1, 0);
        let b = Placement::new(Scheme::Ida, &ids(64), 2, 0);
        assert_ne!(a.groups(), b.groups());
        assert_eq!(a, Placement::new(Scheme::Ida, &ids(64), 1, 0));
    }

    #[test]
    fn ida_tolerates_half_a_neighborhood_and_xor_one_per_set() {
        let p = Placement::new(Scheme::Ida, &ids(16), 3, 0);
        let (h, m) = p.holders(5).unwrap();
        assert_eq!((h.len(), m), (4, 2));
        assert!(h.contains(&NodeId(5)));
        let others: Vec<NodeId> = h.iter().copied().filter(|&x| x != NodeId(5)).collect();
        assert!(p.tolerates(5, &[NodeId(5), others[0]]));
        assert!(!p.tolerates(5, &[NodeId(5), others[0], others[1]]));
        let x = Placement::new(Scheme::Xor { set: 8 }, &ids(16), 0, 0);
        assert!(x.tolerates(3, &[NodeId(3), NodeId(12)]));
        assert!(!x.tolerates(3, &[NodeId(3), NodeId(4)]));
        let p = Placement::new(Scheme::Partner, &ids(16), 0, 0);
        assert_eq!(p.holders(15).unwrap().0, vec![NodeId(0)]);
    }

    #[test]
    fn replicas_go_to_the_next_neighborhoods_and_outlive_a_corrupted_one() {
        let p = Placement::new(Scheme::Ida, &ids(16), 3, 0);
        assert_eq!(p.max_replicas(), 3);
        assert_eq!(p.replica_holders(5, 4), None);
        let (own, m) = p.holders(5).unwrap();
        let groups = p.groups();
        let g = groups.iter().position(|g| g.contains(&NodeId(5))).unwrap();
        let next = p.replica_holders(5, 1).unwrap();
        assert_eq!(next.len(), own.len(), "one holder per slot");
        assert!(next.iter().all(|h| groups[(g + 1) % 4].contains(h)));
        // Three of the four in 5's neighborhood dead: corrupted alone, whole with a replica.
        let dead: Vec<NodeId> = own.iter().copied().take(3).collect();
        assert!(!p.survives(5, 0, &dead));
        assert!(p.survives(5, 1, &dead));
        // Every holder of a slot in both copies dead, and one more slot gone: below m.
        let mut worse = dead.clone();
        worse.extend(next.iter().copied().take(own.len() - m + 1));
        assert!(!p.survives(5, 1, &worse));
        // A backtrack draws other neighborhoods, not only larger ones.
        let q = Placement::new(Scheme::Ida, &ids(64), 3, 1);
        let r = Placement::new(Scheme::Ida, &ids(64), 3, 0);
        assert_eq!(q.size, 2 * r.size);
        let first_of = |p: &Placement| p.groups()[0].clone();
        assert_ne!(first_of(&q)[..r.size], first_of(&r)[..]);
    }

    #[test]
    fn a_vid_that_is_no_process_gets_a_home_by_hash() {
        let p = Placement::new(Scheme::Ida, &ids(8), 3, 0);
        let home = p.home(1_000_000).unwrap();
        assert!(p.view.contains(&home));
        assert_eq!(p.home(1_000_000), Some(home));
    }
}

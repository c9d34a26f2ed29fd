//! The XOR-set arithmetic of the SCR-style peer (see [`super::Scheme::Xor`]).
//!
//! In a set of `k` processes, stripe `s` of member `j` is cut into `k − 1` segments of
//! `seg = ⌈stripe_len / (k − 1)⌉` bytes (zero beyond the stripe's end); segment `t_j(i)` goes
//! to member `i`, where `t_j(i)` is `i`'s rank among the members other than `j`. Member `i`
//! keeps `P_i = ⊕_{j ≠ i} seg_j[t_j(i)]`. For a lost member `l`, `seg_l[t_l(i)] = P_i ⊕
//! ⊕_{j ∉ {i, l}} seg_j[t_j(i)]`, so every survivor `j` contributes, at `l`'s segment `t_l(i)`,
//! its parity when `i = j` and its own segment for `i` otherwise, and the XOR of all the
//! contributions is `l`'s stripe.

use crate::NodeId;
use std::ops::Range;

/// Bytes per segment for a set of `k` members and stripes of `stripe_len` bytes.
pub fn seg_len(stripe_len: usize, k: usize) -> usize {
    stripe_len.div_ceil(k.saturating_sub(1).max(1))
}

/// `t_j(i)`: `i`'s rank among the set's members other than `j`.
pub fn rank_without(set: &[NodeId], j: NodeId, i: NodeId) -> Option<usize> {
    set.iter().filter(|&&x| x != j).position(|&x| x == i)
}

/// Bytes `t · seg ..` of a stripe of `len` bytes, clipped to it (empty past its end).
pub fn segment(t: usize, seg: usize, len: usize) -> Range<usize> {
    let start = (t * seg).min(len);
    start..((t + 1) * seg).min(len)
}

/// `acc ^= src`, over `src`'s length (`acc` at least as long).
pub fn xor_into(acc: &mut [u8], src: &[u8]) {
    for (a, b) in acc.iter_mut().zip(src) {
        *a ^= b;
    }
}

/// Survivor `me`'s contribution to the rebuild of member `lost`'s stripe of `lost_len` bytes,
/// XORed into `acc` (`lost_len` bytes): its `parity` at `lost`'s segment for `me`, and its own
/// stripe's segment for every other survivor.
pub fn fold(
    acc: &mut [u8],
    set: &[NodeId],
    me: NodeId,
    lost: NodeId,
    seg: usize,
    parity: &[u8],
    my_stripe: &[u8],
) {
    let lost_len = acc.len();
    for &i in set.iter().filter(|&&i| i != lost) {
        let Some(t) = rank_without(set, lost, i) else {
            continue;
        };
        let at = segment(t, seg, lost_len);
        let dst = &mut acc[at.clone()];
        if i == me {
            xor_into(dst, &parity[..parity.len().min(dst.len())]);
        } else if let Some(u) = rank_without(set, me, i) {
            let mine = segment(u, seg, my_stripe.len());
            let src = &my_stripe[mine];
            let n = src.len().min(dst.len());
            xor_into(&mut dst[..n], &src[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every member's segments folded into parities, then any one member rebuilt from the
    /// others' folds: the arithmetic the protocol runs, without the messages.
    #[test]
    fn any_one_member_is_rebuilt_from_the_others_folds() {
        let set: Vec<NodeId> = (0..5).map(NodeId).collect();
        let k = set.len();
        let stripe_len = 1000;
        let seg = seg_len(stripe_len, k);
        let lens = [1000usize, 1000, 999, 10, 0];
        let stripes: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(j, &l)| (0..l).map(|b| (b * 7 + j * 13 + 1) as u8).collect())
            .collect();
        let mut parity = vec![Vec::<u8>::new(); k];
        for (j, s) in stripes.iter().enumerate() {
            for (i, p) in parity.iter_mut().enumerate().filter(|&(i, _)| i != j) {
                let t = rank_without(&set, set[j], set[i]).unwrap();
                let part = &s[segment(t, seg, s.len())];
                if p.len() < part.len() {
                    p.resize(part.len(), 0);
                }
                xor_into(p, part);
            }
        }
        for lost in 0..k {
            let mut acc = vec![0u8; lens[lost]];
            for me in (0..k).filter(|&me| me != lost) {
                fold(
                    &mut acc,
                    &set,
                    set[me],
                    set[lost],
                    seg,
                    &parity[me],
                    &stripes[me],
                );
            }
            assert_eq!(acc, stripes[lost], "member {lost}");
        }
    }
}

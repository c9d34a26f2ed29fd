//! A small seeded PRNG (SplitMix64) so that a seed gives the same run on every platform and
//! every version of weft's dependencies.

/// SplitMix64 (Steele, Lea and Flood): tiny, fast, statistically fine for simulation choices.
#[derive(Clone, Debug)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Generator number `stream` of a family drawn from one seed (one per process). Its state
    /// is a hash of both: seeding with `seed + stream * γ` makes SplitMix64's sequences
    /// shifted copies of one another (the state advances by γ: process `i + 1` draws
    /// what process `i` drew one step earlier), and `seed ^ stream * γ` nearly so.
    pub fn stream(seed: u64, stream: u64) -> Self {
        let h = Self::new(seed).next_u64();
        Self::new(Self::new(h ^ stream).next_u64() ^ stream.rotate_left(29))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift (Lemire), bias below 2^-32 for `n < 2^32`.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p
    }

    /// A seed from the clock, for runs that were not given one (the run prints it).
    pub fn fresh_seed() -> u64 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        SimRng::new(t ^ (std::process::id() as u64).rotate_left(32)).next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_below_is_in_range() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.below(7);
            b.below(7);
            assert!(x < 7);
        }
        let mut c = SimRng::new(43);
        assert_ne!(SimRng::new(42).next_u64(), c.next_u64());
    }

    #[test]
    fn below_covers_its_range() {
        let mut r = SimRng::new(1);
        let mut seen = [0u32; 5];
        for _ in 0..5000 {
            seen[r.below(5) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
    }

    #[test]
    fn streams_of_one_seed_are_not_shifted_copies_of_each_other() {
        // What seeding with `seed + i * γ` gives: stream i + 1 starts where stream i's second
        // draw was. Streams must share no draws in their first steps.
        let firsts: std::collections::HashSet<u64> =
            (0..1000).map(|i| SimRng::stream(7, i).next_u64()).collect();
        assert_eq!(firsts.len(), 1000);
        let seconds = (0..1000).filter(|&i| {
            let mut r = SimRng::stream(7, i);
            r.next_u64();
            firsts.contains(&r.next_u64())
        });
        assert_eq!(seconds.count(), 0);
        let mut shifted = SimRng::new(7u64.wrapping_add(0x9e37_79b9_7f4a_7c15));
        let mut base = SimRng::new(7);
        base.next_u64();
        assert_eq!(
            base.next_u64(),
            shifted.next_u64(),
            "the pitfall this avoids"
        );
    }
}

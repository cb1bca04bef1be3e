//! The tests' random source: SplitMix64, seeded, so that a seed replays a workload's
//! choices (the simulation's, the no-loss run's).

/// SplitMix64 over its state.
pub struct Rng(pub u64);

impl Rng {
    /// The stream of actor `n` of a run of `seed`: actors draw apart, each replayable.
    pub fn of(seed: u64, n: u64) -> Self {
        let mut rng = Rng(seed ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03));
        rng.next();
        rng
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// One of `of`, uniformly.
    pub fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[self.below(of.len() as u64) as usize]
    }
}

//! Deterministic random routings for tests, the self-test and the bench: a seed names a
//! routing, so every rank can rebuild every other rank's inputs (and the whole CPU model)
//! without exchanging them.

use std::ops::Range;

/// SplitMix64: small, fast, and the same on every platform.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// A float in `[-1, 1)` with 24 random bits.
    pub fn signed_unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// What a random routing looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingSpec {
    /// Tokens.
    pub tokens: usize,
    /// Top-k slots per token.
    pub topk: usize,
    /// Experts a slot may name: distinct per token, uniformly drawn (fewer than `topk`
    /// leaves the remaining slots -1). Experts outside receive nothing.
    pub experts: Range<usize>,
    /// One slot in this many is dropped (-1); 0: none.
    pub drop_one_in: usize,
}

/// The `[tokens][topk]` expert indices and weights of `spec` under `seed`. Weights are
/// positive, like a softmax's.
pub fn random_routing(seed: u64, spec: &RoutingSpec) -> (Vec<i64>, Vec<f32>) {
    let mut rng = SplitMix::new(seed);
    let mut idx = Vec::with_capacity(spec.tokens * spec.topk);
    let mut weights = Vec::with_capacity(spec.tokens * spec.topk);
    let mut pool = Vec::new();
    for _ in 0..spec.tokens {
        pool.clear();
        pool.extend(spec.experts.clone());
        for _ in 0..spec.topk {
            let dropped = spec.drop_one_in > 0 && rng.below(spec.drop_one_in) == 0;
            if dropped || pool.is_empty() {
                idx.push(-1);
            } else {
                idx.push(pool.swap_remove(rng.below(pool.len())) as i64);
            }
            weights.push(0.5 + rng.signed_unit().abs());
        }
    }
    (idx, weights)
}

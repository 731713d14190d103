//! The host mirror of the device test pattern (`pattern_word` in `device/kernels/selftest.cu`).

/// Word `word` of the pattern of (`seed`, `rank`).
pub fn pattern_word(seed: u32, rank: u32, word: u64) -> u32 {
    let mut x = seed.wrapping_mul(0x9E37_79B1)
        ^ rank.wrapping_add(1).wrapping_mul(0x85EB_CA77)
        ^ (word as u32).wrapping_mul(0xC2B2_AE3D)
        ^ ((word >> 32) as u32).wrapping_mul(0x27D4_EB2F);
    x ^= x >> 15;
    x = x.wrapping_mul(0x2C1B_3C6D);
    x ^= x >> 12;
    x = x.wrapping_mul(0x297A_2D39);
    x ^= x >> 15;
    x
}

/// `len` bytes of the pattern starting at byte `start`.
pub fn pattern_bytes(seed: u32, rank: u32, start: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern_byte(seed, rank, start + i)).collect()
}

/// Byte `index` of the pattern.
pub fn pattern_byte(seed: u32, rank: u32, index: u64) -> u8 {
    (pattern_word(seed, rank, index / 4) >> (8 * (index % 4))) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_differs_by_seed_rank_and_position() {
        let a = pattern_bytes(1, 0, 0, 64);
        assert_ne!(a, pattern_bytes(2, 0, 0, 64));
        assert_ne!(a, pattern_bytes(1, 1, 0, 64));
        assert_ne!(a[..32], a[32..]);
        assert_eq!(pattern_bytes(1, 0, 5, 3), a[5..8].to_vec());
    }
}

//! The host mirror of the device test pattern (`pattern_word` in `device/tests/selftest.cu`).

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

/// `len` bytes of the pattern starting at byte `start`; large buffers are filled by several
/// threads (the suite generates hundreds of MiB per case).
pub fn pattern_bytes(seed: u32, rank: u32, start: u64, len: usize) -> Vec<u8> {
    const CHUNK: usize = 4 << 20;
    let mut out = vec![0u8; len];
    let fill = |offset: usize, chunk: &mut [u8]| {
        let mut word = 0;
        for (i, byte) in chunk.iter_mut().enumerate() {
            let index = start + (offset + i) as u64;
            if i == 0 || index.is_multiple_of(4) {
                word = pattern_word(seed, rank, index / 4);
            }
            *byte = (word >> (8 * (index % 4))) as u8;
        }
    };
    if len <= CHUNK {
        fill(0, &mut out);
        return out;
    }
    std::thread::scope(|scope| {
        for (n, chunk) in out.chunks_mut(CHUNK).enumerate() {
            scope.spawn(move || fill(n * CHUNK, chunk));
        }
    });
    out
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
        let big = pattern_bytes(7, 2, 1, (9 << 20) + 3);
        for i in [0usize, 3, 4 << 20, (4 << 20) + 1, (9 << 20) + 2] {
            assert_eq!(big[i], pattern_byte(7, 2, 1 + i as u64), "byte {i}");
        }
    }
}

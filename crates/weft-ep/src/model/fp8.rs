//! FP8 E4M3 (the `fn` variant: no infinities, largest finite 448) with one f32 scale per 128
//! consecutive channels of a token, as DeepEP casts tokens.
//!
//! Per block of 128 channels: `amax = max(max |x|, 1e-4)`, `scale = 448 / amax`,
//! `q = e4m3(x * scale)` (nearest, ties to even, saturating to ±448), and the stored
//! `scale_inv = amax / 448`, so `x ≈ q * scale_inv`. With `round_scale`, `scale_inv` is the
//! power of two at or above `amax / 448` (`2^ceil(log2)`, from the bits) and `scale = 1 / scale_inv` (exact). Each
//! operation is one IEEE f32 operation, in this order, as in the kernels.

/// Channels sharing one scale.
pub const CHANNELS_PER_SCALE: usize = 128;
/// Largest finite E4M3 value.
const E4M3_MAX: f32 = 448.0;
/// Smallest amax a block is scaled for (keeps an all-zero block finite).
const AMAX_FLOOR: f32 = 1e-4;

/// One token cast to FP8.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Token {
    /// `[hidden]` E4M3 bytes.
    pub values: Vec<u8>,
    /// `[hidden / 128]` scales: `x ≈ e4m3_to_f32(values[i]) * scales[i / 128]`.
    pub scales: Vec<f32>,
}

/// `x` rounded to E4M3: nearest, ties to even, saturating to ±448; NaN stays NaN (0x7f).
pub fn e4m3_from_f32(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7f;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs();
    if a >= E4M3_MAX {
        return sign | 0x7e;
    }
    // Binade of `a`, at least the smallest normal one (2^-6); its quantum is 2^(e-3).
    let e = (((a.to_bits() >> 23) & 0xff) as i32 - 127).max(-6);
    let quantum = f32::powi(2.0, e - 3);
    // Exact: dividing by a power of two; `m` lies in [0, 16].
    let m = (a / quantum).round_ties_even() as u32;
    let bits = match (e, m) {
        (_, 16) => ((e + 8) as u32) << 3,
        (-6, m) if m < 8 => m,
        (e, m) => (((e + 7) as u32) << 3) | (m - 8),
    };
    // 448 rounds from below to 448 at most (m = 14 in the top binade), never past it.
    sign | bits.min(0x7e) as u8
}

/// The value of E4M3 byte `b`.
pub fn e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0xf);
    let mant = f32::from(b & 7);
    if exp == 0xf && b & 7 == 7 {
        return f32::NAN;
    }
    if exp == 0 { sign * mant * f32::powi(2.0, -9) } else { sign * (1.0 + mant / 8.0) * f32::powi(2.0, exp - 7) }
}

/// `ceil(log2(y))` of a positive normal `y`, exactly (from its bits, as the kernels compute it).
fn ceil_log2(y: f32) -> i32 {
    let bits = y.to_bits();
    let exponent = ((bits >> 23) & 0xff) as i32 - 127;
    exponent + i32::from(bits & 0x7f_ffff != 0)
}

/// The block's `(scale, scale_inv)` for its largest magnitude `amax`.
fn scales(amax: f32, round_scale: bool) -> (f32, f32) {
    let amax = amax.max(AMAX_FLOOR);
    if round_scale {
        let exponent = ceil_log2(amax / E4M3_MAX);
        (f32::powi(2.0, -exponent), f32::powi(2.0, exponent))
    } else {
        (E4M3_MAX / amax, amax / E4M3_MAX)
    }
}

/// Casts one token (`x.len()` a multiple of 128) to FP8 with a scale per 128 channels.
pub fn quantize_token(x: &[f32], round_scale: bool) -> Fp8Token {
    let mut token = Fp8Token { values: Vec::with_capacity(x.len()), scales: Vec::new() };
    for block in x.chunks(CHANNELS_PER_SCALE) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let (scale, scale_inv) = scales(amax, round_scale);
        token.values.extend(block.iter().map(|&v| e4m3_from_f32(v * scale)));
        token.scales.push(scale_inv);
    }
    token
}

/// The f32 values a token cast to FP8 stands for.
pub fn dequantize(token: &Fp8Token) -> Vec<f32> {
    token.values.iter().enumerate().map(|(i, &b)| e4m3_to_f32(b) * token.scales[i / CHANNELS_PER_SCALE]).collect()
}

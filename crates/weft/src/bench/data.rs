//! Bench data: inputs that are a pure function of (seed, rank, index), so every rank can
//! compute the float64 (or exact integer) reference of any element without exchanging data,
//! and the check of the result against it.

use half::{bf16, f16};
use weft_types::{DataType, ReduceOp};

use crate::selftest::pattern_word;

/// Encodes element `index` of `rank`'s input.
pub(super) fn input_element(dtype: DataType, seed: u32, rank: u32, index: u64, out: &mut [u8]) {
    let h = pattern_word(seed, rank, index);
    let k = f64::from((h % 17) as i32 - 8) / 4.0; // multiples of 1/4 in [-2, 2]: exact in every float type
    let small = i64::from((h % 17) as i32 - 8);
    let unsigned = u64::from(h % 9);
    match dtype {
        DataType::I8 => out[0] = small as i8 as u8,
        DataType::U8 => out[0] = unsigned as u8,
        DataType::I32 => out.copy_from_slice(&(small as i32).to_le_bytes()),
        DataType::U32 => out.copy_from_slice(&(unsigned as u32).to_le_bytes()),
        DataType::I64 => out.copy_from_slice(&small.to_le_bytes()),
        DataType::U64 => out.copy_from_slice(&unsigned.to_le_bytes()),
        DataType::F16 => out.copy_from_slice(&f16::from_f64(k).to_le_bytes()),
        DataType::Bf16 => out.copy_from_slice(&bf16::from_f64(k).to_le_bytes()),
        DataType::F32 => out.copy_from_slice(&(k as f32).to_le_bytes()),
        DataType::F64 => out.copy_from_slice(&k.to_le_bytes()),
        // sign | exponent within 2^-1..2^1 | mantissa: |x| < 4, products of 4 ranks stay finite.
        DataType::F8E4M3 => out[0] = (((h & 1) << 7) | ((6 + (h >> 1) % 3) << 3) | ((h >> 4) & 7)) as u8,
        DataType::F8E5M2 => out[0] = (((h & 1) << 7) | ((14 + (h >> 1) % 3) << 2) | ((h >> 4) & 3)) as u8,
    }
}

fn fp8_to_f64(byte: u8, exponent_bits: u32, bias: i32, e4m3: bool) -> f64 {
    let mantissa_bits = 7 - exponent_bits;
    let sign = if byte & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((byte >> mantissa_bits) & ((1 << exponent_bits) - 1) as u8);
    let m = f64::from(byte & ((1 << mantissa_bits) - 1) as u8);
    let max_e = (1 << exponent_bits) - 1;
    let scale = f64::from(1u32 << mantissa_bits);
    if e4m3 && e == max_e && m == scale - 1.0 {
        return f64::NAN;
    }
    if !e4m3 && e == max_e {
        return if m == 0.0 { sign * f64::INFINITY } else { f64::NAN };
    }
    if e == 0 { sign * m / scale * 2f64.powi(1 - bias) } else { sign * (1.0 + m / scale) * 2f64.powi(e - bias) }
}

/// A float element as f64.
pub(super) fn to_f64(dtype: DataType, b: &[u8]) -> f64 {
    match dtype {
        DataType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DataType::Bf16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DataType::F32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DataType::F64 => f64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
        DataType::F8E4M3 => fp8_to_f64(b[0], 4, 7, true),
        DataType::F8E5M2 => fp8_to_f64(b[0], 5, 15, false),
        _ => f64::NAN,
    }
}

/// An integer element as i128 (sign- or zero-extended).
pub(super) fn to_i128(dtype: DataType, b: &[u8]) -> i128 {
    match dtype {
        DataType::I8 => i128::from(b[0] as i8),
        DataType::U8 => i128::from(b[0]),
        DataType::I32 => i128::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DataType::U32 => i128::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DataType::I64 => i128::from(i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
        DataType::U64 => i128::from(u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
        _ => 0,
    }
}

/// Wraps an exact integer into `dtype`'s range, as the device's narrowing does.
fn wrap(dtype: DataType, v: i128) -> i128 {
    let bits = 8 * dtype.size() as u32;
    let modulus = 1i128 << bits;
    let low = v.rem_euclid(modulus);
    let signed = matches!(dtype, DataType::I8 | DataType::I32 | DataType::I64);
    if signed && low >= modulus / 2 { low - modulus } else { low }
}

/// Largest finite magnitude of an FP8 type (results saturate to it).
fn fp8_max(dtype: DataType) -> Option<f64> {
    match dtype {
        DataType::F8E4M3 => Some(448.0),
        DataType::F8E5M2 => Some(57344.0),
        _ => None,
    }
}

/// Relative tolerance of a float result against the float64 reference.
fn tolerance(dtype: DataType) -> f64 {
    match dtype {
        DataType::F64 => 1e-12,
        DataType::F32 => 1e-6,
        DataType::F16 => 2f64.powi(-10),
        DataType::Bf16 => 2f64.powi(-7),
        DataType::F8E4M3 => 2f64.powi(-3),
        _ => 2f64.powi(-2),
    }
}

/// Float64 reference of element `index` (rank-order fold, saturated for FP8) and the scale
/// its tolerance is relative to.
fn float_reference(dtype: DataType, op: ReduceOp, seed: u32, ranks: u32, index: u64) -> (f64, f64) {
    let mut buf = [0u8; 8];
    let b = &mut buf[..dtype.size()];
    let (mut acc, mut scale) = (0f64, 0f64);
    for r in 0..ranks {
        input_element(dtype, seed, r, index, b);
        let x = to_f64(dtype, b);
        acc = if r == 0 { x } else { combine(op, acc, x) };
        scale += x.abs();
    }
    if op == ReduceOp::Avg {
        acc /= f64::from(ranks);
        scale /= f64::from(ranks);
    }
    if let Some(max) = fp8_max(dtype) {
        acc = acc.clamp(-max, max);
    }
    let scale = match op {
        ReduceOp::Sum | ReduceOp::Avg => scale,
        _ => acc.abs(),
    };
    (acc, scale)
}

/// Exact integer reference of element `index`, wrapped into `dtype`.
fn integer_reference(dtype: DataType, op: ReduceOp, seed: u32, ranks: u32, index: u64) -> i128 {
    let mut buf = [0u8; 8];
    let b = &mut buf[..dtype.size()];
    let mut acc = 0i128;
    for r in 0..ranks {
        input_element(dtype, seed, r, index, b);
        let x = to_i128(dtype, b);
        acc = if r == 0 { x } else { combine_int(op, acc, x) };
    }
    if op == ReduceOp::Avg {
        acc /= i128::from(ranks);
    }
    wrap(dtype, acc)
}

/// Whether `got` (one element of the result) is the AllReduce of element `index` over `ranks`.
pub(super) fn element_ok(dtype: DataType, op: ReduceOp, seed: u32, ranks: u32, index: u64, got: &[u8]) -> bool {
    if dtype.is_float() {
        let (want, scale) = float_reference(dtype, op, seed, ranks, index);
        (to_f64(dtype, got) - want).abs() <= tolerance(dtype) * scale.max(1e-30)
    } else {
        to_i128(dtype, got) == integer_reference(dtype, op, seed, ranks, index)
    }
}

fn combine(op: ReduceOp, a: f64, b: f64) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

fn combine_int(op: ReduceOp, a: i128, b: i128) -> i128 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

/// `rank`'s whole input of `count` elements.
pub(super) fn input(dtype: DataType, seed: u32, rank: u32, count: usize) -> Vec<u8> {
    let size = dtype.size();
    let mut out = vec![0u8; count * size];
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(32);
    let per = count.div_ceil(threads).max(1) * size;
    std::thread::scope(|scope| {
        for (part, chunk) in out.chunks_mut(per).enumerate() {
            scope.spawn(move || {
                let first = (part * per / size) as u64;
                for (i, e) in chunk.chunks_mut(size).enumerate() {
                    input_element(dtype, seed, rank, first + i as u64, e);
                }
            });
        }
    });
    out
}

/// Number of elements of `result` that are not the AllReduce of the inputs.
pub(super) fn count_wrong(dtype: DataType, op: ReduceOp, seed: u32, ranks: u32, result: &[u8]) -> u64 {
    let size = dtype.size();
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(32);
    let per = (result.len() / size).div_ceil(threads).max(1) * size;
    std::thread::scope(|scope| {
        let handles: Vec<_> = result
            .chunks(per)
            .enumerate()
            .map(|(part, chunk)| {
                scope.spawn(move || {
                    let first = (part * per / size) as u64;
                    chunk
                        .chunks(size)
                        .enumerate()
                        .filter(|(i, e)| !element_ok(dtype, op, seed, ranks, first + *i as u64, e))
                        .count() as u64
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(u64::MAX)).sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host reference must accept the right answer and reject a wrong one for every type
    /// and operator (the check is only as good as this).
    #[test]
    fn the_check_accepts_exact_results_and_rejects_wrong_ones() {
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                let ranks = 4;
                let mut right = vec![0u8; dtype.size()];
                if dtype.is_float() {
                    encode_float(dtype, float_reference(dtype, op, 11, ranks, 7).0, &mut right);
                } else {
                    let v = integer_reference(dtype, op, 11, ranks, 7) as i64;
                    right.copy_from_slice(&v.to_le_bytes()[..dtype.size()]);
                }
                assert!(element_ok(dtype, op, 11, ranks, 7, &right), "{} {} rejected", dtype.name(), op.name());
                let poison = vec![0x7fu8; dtype.size()];
                let poisoned_is_right = right == poison;
                assert!(
                    poisoned_is_right || !element_ok(dtype, op, 11, ranks, 7, &poison),
                    "{} {}",
                    dtype.name(),
                    op.name()
                );
            }
        }
    }

    fn encode_float(dtype: DataType, v: f64, out: &mut [u8]) {
        match dtype {
            DataType::F16 => out.copy_from_slice(&f16::from_f64(v).to_le_bytes()),
            DataType::Bf16 => out.copy_from_slice(&bf16::from_f64(v).to_le_bytes()),
            DataType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
            DataType::F64 => out.copy_from_slice(&v.to_le_bytes()),
            _ => {
                // FP8: search the byte whose value is nearest (exhaustive, 256 candidates).
                let best = (0u8..=255)
                    .filter(|&c| to_f64(dtype, &[c]).is_finite())
                    .min_by(|&a, &c| (to_f64(dtype, &[a]) - v).abs().total_cmp(&(to_f64(dtype, &[c]) - v).abs()))
                    .unwrap_or(0);
                out[0] = best;
            }
        }
    }

    #[test]
    fn fp8_decoding_matches_known_values() {
        assert_eq!(to_f64(DataType::F8E4M3, &[0x38]), 1.0);
        assert_eq!(to_f64(DataType::F8E4M3, &[0x7e]), 448.0);
        assert!(to_f64(DataType::F8E4M3, &[0x7f]).is_nan());
        assert_eq!(to_f64(DataType::F8E5M2, &[0x3c]), 1.0);
        assert_eq!(to_f64(DataType::F8E5M2, &[0x7b]), 57344.0);
        assert_eq!(wrap(DataType::I8, 200), -56);
        assert_eq!(wrap(DataType::U8, -1), 255);
    }
}

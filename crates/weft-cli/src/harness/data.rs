//! Bench data: inputs that are a pure function of (seed, rank, index), so every rank can
//! compute the float64 (or exact integer) reference of any element without exchanging data,
//! and one check of any collective's output against it (which input element each output
//! element must be comes from [`Collective::source`](super::Collective::source)).
//!
//! The references compute NCCL's semantics: integers bit for bit (the fold in the element type,
//! wrapping; Avg divides the wrapped sum by the rank count, truncating toward zero; PreMulSum
//! is the wrapped sum of each rank's input times that rank's own scalar, each product wrapped),
//! floats in float64 within the type's tolerance. Every rank passes PreMulSum a different
//! scalar ([`premul_scalar`]), as NCCL allows, so a kernel that multiplied by one rank's scalar
//! after the sum, or a peer's contribution by its own, fails the check. One integer element in
//! four spans the type's whole range, so sums, products, averages and PreMulSum products wrap
//! there.

use half::{bf16, f16};
use weft_coll::{Reduction, Scalar};
use weft_types::{DataType, ReduceOp};

use super::Source;
use super::pattern::pattern_word;

/// Bits of rank 0's PreMulSum scalar for integer types (narrowed to each: negative in every
/// signed one, large in every unsigned one, so its products wrap).
const INTEGER_SCALAR: u64 = 0x9e37_79b1_85eb_ca87;
/// Added once per rank to [`INTEGER_SCALAR`]: every rank's scalar differs from every other's
/// (up to 128 ranks) in every integer width and stays negative in every signed one up to 8.
const INTEGER_SCALAR_STEP: u64 = 0x0101_0101_0101_0102;
/// PreMulSum's scalars for float types, rank r taking entry r mod 8: exact in each type (FP8
/// E5M2 included), different for neighbouring ranks, of both signs, and small enough that FP8
/// sums of 8 ranks stay finite. Products with the inputs (multiples of 1/4 in [-2, 2]) are exact
/// in every type but FP8.
const FLOAT_SCALARS: [f64; 8] = [-1.5, 1.25, -0.75, 1.75, 0.5, -1.25, 1.5, -0.5];

/// `rank`'s scalar in every PreMulSum row of `dtype`, as one element of it.
pub(crate) fn premul_scalar(dtype: DataType, rank: u32) -> Vec<u8> {
    let mut out = vec![0u8; dtype.size()];
    if dtype.is_float() {
        encode_float(dtype, FLOAT_SCALARS[rank as usize % FLOAT_SCALARS.len()], &mut out);
    } else {
        let bits = INTEGER_SCALAR.wrapping_add(u64::from(rank).wrapping_mul(INTEGER_SCALAR_STEP));
        out.copy_from_slice(&bits.to_le_bytes()[..dtype.size()]);
    }
    out
}

/// What `rank` reduces a row with `op` on `dtype` with: PreMulSum with the rank's own
/// [`premul_scalar`] as a value.
pub(crate) fn reduction(dtype: DataType, op: ReduceOp, rank: u32) -> Reduction {
    match op {
        ReduceOp::PreMulSum => {
            let bytes = premul_scalar(dtype, rank);
            // `bytes` is one element of `dtype`, so this cannot fail: keep the plain sum if it did.
            Scalar::from_bytes(dtype, &bytes)
                .map_or(Reduction::Op(ReduceOp::Sum), |scalar| Reduction::PreMulSum { dtype, scalar })
        }
        op => Reduction::Op(op),
    }
}

/// A float as the nearest element of `dtype` (FP8: the nearest finite byte).
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

/// Encodes element `index` of `rank`'s input.
pub(super) fn input_element(dtype: DataType, seed: u32, rank: u32, index: u64, out: &mut [u8]) {
    let h = pattern_word(seed, rank, index);
    let k = f64::from((h % 17) as i32 - 8) / 4.0; // multiples of 1/4 in [-2, 2]: exact in every float type
    // Integers: small values, or (one element in four) the type's whole range.
    let wide = h.is_multiple_of(4);
    let bits = u64::from(pattern_word(seed ^ 0x5bd1_e995, rank, index)) << 32 | u64::from(h);
    let small = if wide { bits as i64 } else { i64::from((h % 17) as i32 - 8) };
    let unsigned = if wide { bits } else { u64::from(h % 9) };
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

/// Relative tolerance of a float result of `ranks` ranks reduced with `op` against the float64
/// reference: two unit roundoffs of the type (more for F32 and F64); for Prod and PreMulSum,
/// times `(ranks - 1) / 2` from four ranks on. Rings, chains and plans carry partials in the
/// element type, rounded at each of their `ranks - 1` steps, and where the partials round (a
/// product; PreMulSum's sums of products, which have finer bits than the inputs) the worst case
/// grows with the steps: a product of 16 bf16 inputs rounded 15 times is off by more than 2^-7
/// in about 6% of random cases (up to 1.7%; the bound is 15 × 2^-8), as every bf16 ring
/// computes it, NCCL's included. Sums, averages, minima and maxima of the inputs (multiples of
/// 1/4 in [-2, 2]) are exact or round once at these rank counts, so they keep the tight bound,
/// which a missing contribution of one rank exceeds.
fn tolerance(dtype: DataType, op: ReduceOp, ranks: u32) -> f64 {
    let two_roundoffs = match dtype {
        DataType::F64 => 1e-12,
        DataType::F32 => 1e-6,
        DataType::F16 => 2f64.powi(-10),
        DataType::Bf16 => 2f64.powi(-7),
        DataType::F8E4M3 => 2f64.powi(-3),
        _ => 2f64.powi(-2),
    };
    let rounded_steps = matches!(op, ReduceOp::Prod | ReduceOp::PreMulSum);
    let steps = if rounded_steps { (f64::from(ranks.saturating_sub(1)) / 2.0).max(1.0) } else { 1.0 };
    two_roundoffs * steps
}

/// Float64 reference of element `index` (rank-order fold, saturated for FP8) and the scale
/// its tolerance is relative to. PreMulSum multiplies each rank's input by that rank's scalar
/// exactly; the device rounds each product to the type once (NCCL's multiplication in the
/// type), within the tolerance of the sum of the products' magnitudes.
fn float_reference(dtype: DataType, op: ReduceOp, seed: u32, ranks: u32, index: u64) -> (f64, f64) {
    let mut buf = [0u8; 8];
    let b = &mut buf[..dtype.size()];
    let (mut acc, mut scale) = (0f64, 0f64);
    for r in 0..ranks {
        input_element(dtype, seed, r, index, b);
        let mut x = to_f64(dtype, b);
        if op == ReduceOp::PreMulSum {
            x *= to_f64(dtype, &premul_scalar(dtype, r));
        }
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
        ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => scale,
        _ => acc.abs(),
    };
    (acc, scale)
}

/// Exact integer reference of element `index` as NCCL computes it: PreMulSum's pre-operation
/// (each rank's input times that rank's scalar, wrapped in `dtype`), the rank-order fold in
/// `dtype` (wrapping), then Avg's division of the wrapped sum (truncating toward zero).
fn integer_reference(dtype: DataType, op: ReduceOp, seed: u32, ranks: u32, index: u64) -> i128 {
    let mut buf = [0u8; 8];
    let inputs = (0..ranks).map(|r| {
        let b = &mut buf[..dtype.size()];
        input_element(dtype, seed, r, index, b);
        premultiply(dtype, op, r, to_i128(dtype, b))
    });
    nccl_integer(dtype, op, inputs, ranks)
}

/// NCCL's pre-operation on `rank`'s integer input `x`: PreMulSum's product with the rank's
/// scalar, wrapped in `dtype`; any other operator leaves `x`.
fn premultiply(dtype: DataType, op: ReduceOp, rank: u32, x: i128) -> i128 {
    match op {
        ReduceOp::PreMulSum => wrap(dtype, x.wrapping_mul(to_i128(dtype, &premul_scalar(dtype, rank)))),
        _ => x,
    }
}

/// NCCL's result of reducing `ranks` integer `inputs` of `dtype` (in rank order, PreMulSum's
/// already premultiplied: [`premultiply`]) with `op`.
fn nccl_integer(dtype: DataType, op: ReduceOp, inputs: impl Iterator<Item = i128>, ranks: u32) -> i128 {
    let acc = inputs.reduce(|acc, x| wrap(dtype, combine_int(op, acc, x))).unwrap_or(0);
    match op {
        // i128 division truncates toward zero, as C's does.
        ReduceOp::Avg => acc / i128::from(ranks),
        _ => acc,
    }
}

fn combine(op: ReduceOp, a: f64, b: f64) -> f64 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => a + b,
        ReduceOp::Prod => a * b,
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

/// `a ⊕ b` of two values in a 64-bit type's range, exact modulo 2^128 (then wrapped by the
/// caller).
fn combine_int(op: ReduceOp, a: i128, b: i128) -> i128 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => a.wrapping_add(b),
        ReduceOp::Prod => a.wrapping_mul(b),
        ReduceOp::Max => a.max(b),
        ReduceOp::Min => a.min(b),
    }
}

/// Bytes per thread when `len` bytes of `size`-byte elements are split across threads.
fn chunk_bytes(len: usize, size: usize) -> usize {
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(32);
    (len / size).div_ceil(threads).max(1) * size
}

/// Runs `f(part, chunk)` for every chunk on its own thread and sums what it returns.
fn parallel<T: Send>(chunks: impl Iterator<Item = T>, f: impl Fn(usize, T) -> u64 + Sync) -> u64 {
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = chunks.enumerate().map(|(part, chunk)| scope.spawn(move || f(part, chunk))).collect();
        // A thread that panicked counts as everything wrong.
        handles.into_iter().map(|h| h.join().unwrap_or(u64::MAX)).fold(0, u64::saturating_add)
    })
}

/// The host reference of one row: every rank's input is a pure function of (seed, rank,
/// index), so any rank can compute what any output element must be without exchanging data.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reference {
    /// Element type.
    pub(crate) dtype: DataType,
    /// Operator (for reduced elements).
    pub(crate) op: ReduceOp,
    /// Seed shared by every rank for this row.
    pub(crate) seed: u32,
    /// Number of ranks.
    pub(crate) ranks: u32,
}

impl Reference {
    /// The reference of replay `replay` of a captured call: the same row with inputs of its
    /// own (another seed, the same on every rank), so consecutive replays never see the same
    /// inputs, nor the row's own.
    pub(crate) fn replay(&self, replay: u32) -> Self {
        Self { seed: self.seed ^ 0x9e37_79b9u32.wrapping_mul(replay + 1), ..*self }
    }

    /// `rank`'s whole input of `count` elements.
    pub(super) fn input(&self, rank: u32, count: usize) -> Vec<u8> {
        let size = self.dtype.size();
        let mut out = vec![0u8; count * size];
        let per = chunk_bytes(out.len(), size);
        parallel(out.chunks_mut(per), |part, chunk| {
            let first = (part * per / size) as u64;
            for (i, e) in chunk.chunks_mut(size).enumerate() {
                input_element(self.dtype, self.seed, rank, first + i as u64, e);
            }
            0
        });
        out
    }

    /// Whether `got` is the element `source` names: bitwise for a copy, within the type's
    /// tolerance of the float64 (or exactly the integer) reduction for a reduced element.
    pub(super) fn element_ok(&self, source: Source, got: &[u8]) -> bool {
        let dtype = self.dtype;
        match source {
            Source::Copy { rank, index } => {
                let mut want = [0u8; 8];
                let want = &mut want[..dtype.size()];
                input_element(dtype, self.seed, rank, index, want);
                want == got
            }
            Source::Reduced { index } if dtype.is_float() => {
                let (want, scale) = float_reference(dtype, self.op, self.seed, self.ranks, index);
                (to_f64(dtype, got) - want).abs() <= tolerance(dtype, self.op, self.ranks) * scale.max(1e-30)
            }
            Source::Reduced { index } => {
                to_i128(dtype, got) == integer_reference(dtype, self.op, self.seed, self.ranks, index)
            }
        }
    }

    /// What `source` should hold, in words (for diagnostics).
    pub(super) fn expected(&self, source: Source) -> String {
        let dtype = self.dtype;
        match source {
            Source::Copy { rank, index } => {
                let mut want = [0u8; 8];
                input_element(dtype, self.seed, rank, index, &mut want[..dtype.size()]);
                format!("{:02x?}", &want[..dtype.size()])
            }
            Source::Reduced { index } if dtype.is_float() => {
                format!("{}", float_reference(dtype, self.op, self.seed, self.ranks, index).0)
            }
            Source::Reduced { index } => format!("{}", integer_reference(dtype, self.op, self.seed, self.ranks, index)),
        }
    }

    /// Number of elements of `result` that are not what `source(index)` names.
    pub(super) fn count_wrong(&self, result: &[u8], source: impl Fn(u64) -> Source + Sync) -> u64 {
        let size = self.dtype.size();
        let per = chunk_bytes(result.len(), size);
        parallel(result.chunks(per), |part, chunk| {
            let first = (part * per / size) as u64;
            chunk.chunks(size).enumerate().filter(|(i, e)| !self.element_ok(source(first + *i as u64), e)).count()
                as u64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::{Collective, NcclTests, Shape};

    /// The host reference must accept the right answer and reject a wrong one for every type
    /// and operator (the check is only as good as this).
    #[test]
    fn the_check_accepts_exact_results_and_rejects_wrong_ones() {
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                let reference = Reference { dtype, op, seed: 11, ranks: 4 };
                let source = Source::Reduced { index: 7 };
                let right = reduced(&reference, 7);
                assert!(reference.element_ok(source, &right), "{} {} rejected", dtype.name(), op.name());
                let poison = vec![0x7fu8; dtype.size()];
                assert!(right == poison || !reference.element_ok(source, &poison), "{} {}", dtype.name(), op.name());
            }
        }
    }

    /// The exact result of reducing element `index`, encoded in the row's type.
    fn reduced(reference: &Reference, index: u64) -> Vec<u8> {
        let Reference { dtype, op, seed, ranks } = *reference;
        let mut out = vec![0u8; dtype.size()];
        if dtype.is_float() {
            encode_float(dtype, float_reference(dtype, op, seed, ranks, index).0, &mut out);
        } else {
            let v = integer_reference(dtype, op, seed, ranks, index) as i64;
            out.copy_from_slice(&v.to_le_bytes()[..dtype.size()]);
        }
        out
    }

    /// What `rank` ends with, computed on the host the way each collective is defined (block
    /// moves written out here, independently of `Collective::source`).
    fn simulate(c: Collective, reference: &Reference, shape: &Shape, rank: u32) -> Vec<u8> {
        let size = reference.dtype.size();
        let n = reference.ranks;
        let input = |r: u32| reference.input(r, shape.send_count);
        let all_reduced = || -> Vec<u8> { (0..shape.send_count as u64).flat_map(|i| reduced(reference, i)).collect() };
        let block = shape.count * size;
        let r = rank as usize;
        match c {
            Collective::AllReduce | Collective::Reduce => all_reduced(),
            Collective::AllGather => (0..n).flat_map(input).collect(),
            Collective::ReduceScatter => all_reduced()[r * block..(r + 1) * block].to_vec(),
            Collective::AllToAll => (0..n).flat_map(|p| input(p)[r * block..(r + 1) * block].to_vec()).collect(),
            Collective::Broadcast => input(shape.root),
            Collective::SendRecv => input((rank + n - 1) % n),
        }
    }

    /// For every collective, type and operator (a rooted one at roots 0, 1 and the last rank):
    /// the simulated output of every rank passes the generic check, and it fails when one
    /// element is poisoned or two blocks are swapped.
    #[test]
    fn every_collective_accepts_its_result_and_rejects_wrong_ones() {
        let ranks = 4u32;
        for c in Collective::ALL {
            for dtype in DataType::ALL {
                for op in if c.reduces() { ReduceOp::ALL.to_vec() } else { vec![ReduceOp::Sum] } {
                    for root in if c.rooted() { vec![0, 1, ranks - 1] } else { vec![0] } {
                        let reference = Reference { dtype, op, seed: 0x5eed ^ c as u32, ranks };
                        let shape = c.shape(24 * 4 * dtype.size(), dtype.size(), ranks as usize, root).unwrap();
                        let what = format!("{} {} {} root {root}", c.name(), dtype.name(), op.name());
                        check_every_rank(c, &reference, &shape, &what);
                    }
                }
            }
        }
    }

    /// The simulated output of every rank of `shape` with an output passes the check of
    /// `reference`, and fails with one element poisoned or its halves swapped.
    fn check_every_rank(c: Collective, reference: &Reference, shape: &Shape, what: &str) {
        let (ranks, dtype) = (reference.ranks, reference.dtype);
        for rank in (0..ranks).filter(|r| c.has_output(shape, *r)) {
            let source = |i| c.source(shape, rank, ranks, i);
            let mut out = simulate(c, reference, shape, rank);
            assert_eq!(out.len(), shape.recv_count * dtype.size(), "{what}");
            assert_eq!(reference.count_wrong(&out, source), 0, "{what}: rank {rank} rejected");

            // One poisoned element (unless poison happens to be its right value).
            let e = 5 * dtype.size();
            let right = out[e..e + dtype.size()].to_vec();
            out[e..e + dtype.size()].fill(0x7f);
            let wrong = reference.count_wrong(&out, source);
            assert!(wrong == 1 || out[e..e + dtype.size()] == right[..], "{what}: poison gave {wrong}");
            out[e..e + dtype.size()].copy_from_slice(&right);

            // The first half and the second half of the output swapped: a block
            // mix-up must show in most elements.
            let half = out.len() / 2;
            out.rotate_left(half);
            let wrong = reference.count_wrong(&out, source);
            assert!(wrong >= shape.recv_count as u64 / 4, "{what}: swapped halves gave only {wrong}");
        }
    }

    /// At roots 0, 1 and the last rank: Reduce has an output at the root alone, and Broadcast's
    /// every rank must hold the root's input, which another rank's input fails.
    #[test]
    fn rooted_calls_follow_their_root() {
        let ranks = 4u32;
        for root in [0, 1, ranks - 1] {
            let reduce = Collective::Reduce.shape(64, 4, ranks as usize, root).unwrap();
            let with_output: Vec<u32> = (0..ranks).filter(|r| Collective::Reduce.has_output(&reduce, *r)).collect();
            assert_eq!(with_output, [root]);
            let reference = Reference { dtype: DataType::F32, op: ReduceOp::Sum, seed: 3, ranks };
            let broadcast = Collective::Broadcast.shape(64, 4, ranks as usize, root).unwrap();
            let other = (root + 1) % ranks;
            for rank in 0..ranks {
                let source = |i| Collective::Broadcast.source(&broadcast, rank, ranks, i);
                assert!(Collective::Broadcast.has_output(&broadcast, rank));
                let from_root = reference.input(root, broadcast.send_count);
                assert_eq!(reference.count_wrong(&from_root, source), 0, "root {root}, rank {rank}");
                let from_other = reference.input(other, broadcast.send_count);
                assert!(
                    reference.count_wrong(&from_other, source) > 0,
                    "root {root}, rank {rank}: rank {other}'s input"
                );
            }
        }
    }

    #[test]
    fn identity_is_required_where_defined() {
        let same: Vec<_> = Collective::ALL.into_iter().filter(|c| c.same_output_everywhere()).collect();
        assert_eq!(same, [Collective::AllReduce, Collective::AllGather, Collective::Broadcast]);
    }

    /// NCCL's integer average: the sum wraps in the element type before the division.
    #[test]
    fn integer_averages_divide_the_wrapped_sum() {
        let avg =
            |dtype, inputs: &[i128]| nccl_integer(dtype, ReduceOp::Avg, inputs.iter().copied(), inputs.len() as u32);
        assert_eq!(avg(DataType::I8, &[100, 100]), -28); // 200 wraps to -56
        assert_eq!(avg(DataType::U8, &[200, 200]), 72); // 400 wraps to 144
        assert_eq!(avg(DataType::I8, &[-100, -100]), 28); // -200 wraps to 56
        assert_eq!(avg(DataType::I8, &[-3, 0]), -1); // truncated toward zero, not floored
        assert_eq!(avg(DataType::I8, &[-128, -1, 0]), 42); // -129 wraps to 127
        assert_eq!(avg(DataType::I32, &[i128::from(i32::MAX), 1]), i128::from(i32::MIN) / 2);
        assert_eq!(avg(DataType::U32, &[i128::from(u32::MAX), 3]), 1);
        assert_eq!(avg(DataType::I64, &[i128::from(i64::MAX), i128::from(i64::MAX)]), -1);
        assert_eq!(avg(DataType::U64, &[i128::from(u64::MAX); 4]), (i128::from(u64::MAX) - 3) / 4);
        // No wrap: the plain average.
        assert_eq!(avg(DataType::I32, &[7, -2, 4]), 3);
    }

    /// PreMulSum as NCCL: each rank's input times that rank's own scalar (wrapped), then the
    /// wrapped sum; every rank's scalar differs, so one scalar applied after the sum is wrong.
    #[test]
    fn premulsum_multiplies_each_rank_by_its_own_scalar() {
        for dtype in DataType::ALL {
            let scalars: Vec<_> = (0..8).map(|r| premul_scalar(dtype, r)).collect();
            for (r, s) in scalars.iter().enumerate() {
                assert!(scalars[..r].iter().all(|t| t != s), "{} rank {r}: a scalar repeats", dtype.name());
            }
        }
        // i8: rank 0's scalar -121, rank 1's -119. 100 * -121 = -12100 wraps to -68, 100 * -119
        // = -11900 wraps to -124; their sum -192 wraps to 64. (The sum 200 wraps to -56, which
        // times either scalar gives 120 or 8: neither is right.)
        assert_eq!(to_i128(DataType::I8, &premul_scalar(DataType::I8, 0)), -121);
        assert_eq!(to_i128(DataType::I8, &premul_scalar(DataType::I8, 1)), -119);
        let i8_premul = |inputs: &[i128]| {
            let pre =
                inputs.iter().enumerate().map(|(r, &x)| premultiply(DataType::I8, ReduceOp::PreMulSum, r as u32, x));
            nccl_integer(DataType::I8, ReduceOp::PreMulSum, pre, inputs.len() as u32)
        };
        assert_eq!(i8_premul(&[100, 100]), 64);
        assert_eq!(i8_premul(&[-1, 0]), 121);
        // u64: the products wrap in 64 bits.
        let s1 = to_i128(DataType::U64, &premul_scalar(DataType::U64, 1));
        let want = (i128::from(u64::MAX).wrapping_mul(s1)).rem_euclid(1 << 64);
        assert_eq!(premultiply(DataType::U64, ReduceOp::PreMulSum, 1, i128::from(u64::MAX)), want);
        assert_eq!(premultiply(DataType::U64, ReduceOp::Sum, 1, 7), 7);
        for (r, want) in FLOAT_SCALARS.iter().enumerate() {
            for dtype in DataType::ALL.into_iter().filter(|t| t.is_float()) {
                assert_eq!(to_f64(dtype, &premul_scalar(dtype, r as u32)), *want, "{} rank {r}", dtype.name());
            }
        }
        // Floats: rank 0's input times -1.5 plus rank 1's times 1.25.
        let (x0, x1) = (input_of(DataType::F32, 0, 3), input_of(DataType::F32, 1, 3));
        let (want, _) = float_reference(DataType::F32, ReduceOp::PreMulSum, 3, 2, 0);
        assert_eq!(want, x0 * -1.5 + x1 * 1.25);
        assert_eq!(
            reduction(DataType::F32, ReduceOp::PreMulSum, 0),
            Reduction::PreMulSum { dtype: DataType::F32, scalar: Scalar::Immediate(u64::from((-1.5f32).to_bits())) }
        );
        assert_eq!(
            reduction(DataType::F32, ReduceOp::PreMulSum, 1),
            Reduction::PreMulSum { dtype: DataType::F32, scalar: Scalar::Immediate(u64::from(1.25f32.to_bits())) }
        );
        assert_eq!(reduction(DataType::I8, ReduceOp::Avg, 1), Reduction::Op(ReduceOp::Avg));
    }

    /// Element 0 of `rank`'s input with `seed`, as f64.
    fn input_of(dtype: DataType, rank: u32, seed: u32) -> f64 {
        let mut b = [0u8; 8];
        input_element(dtype, seed, rank, 0, &mut b[..dtype.size()]);
        to_f64(dtype, &b[..dtype.size()])
    }

    #[test]
    fn the_tolerance_grows_with_the_steps_of_partials_in_the_type() {
        let bf16 = |op, ranks| tolerance(DataType::Bf16, op, ranks);
        assert_eq!(bf16(ReduceOp::Prod, 2), 2f64.powi(-7));
        assert_eq!(bf16(ReduceOp::Prod, 3), 2f64.powi(-7));
        assert_eq!(bf16(ReduceOp::Prod, 8), 3.5 * 2f64.powi(-7));
        assert_eq!(bf16(ReduceOp::PreMulSum, 16), 15.0 * 2f64.powi(-8));
        // Sums, averages and extrema stay tight at any rank count.
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
            assert_eq!(bf16(op, 16), 2f64.powi(-7), "{op:?}");
        }
        assert_eq!(tolerance(DataType::F32, ReduceOp::Prod, 1), 1e-6);
        // Ten roundoffs off passes a 16-rank product and fails at 2 ranks; 10% fails everywhere.
        let at = |ranks, got: f64| (got - 1.0).abs() <= bf16(ReduceOp::Prod, ranks);
        assert!(at(16, 1.0 + 2f64.powi(-8) * 10.0) && !at(2, 1.0 + 2f64.powi(-8) * 10.0));
        assert!(!at(16, 1.1));
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

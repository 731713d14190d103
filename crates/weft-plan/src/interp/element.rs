//! Element types and reduction operators the interpreter can compute with.

use std::fmt;

pub use weft_types::ReduceOp;

/// A plain element type the CPU interpreter can move and reduce.
///
/// Elements live in the interpreter's shared memory as `u64` bit patterns (so that concurrent
/// thread blocks can share buffers without `unsafe`); `to_bits`/`from_bits` must round-trip.
pub trait Element: Copy + Send + Sync + PartialEq + fmt::Debug + 'static {
    /// The element's bits, zero-extended to 64 bits.
    fn to_bits(self) -> u64;
    /// Inverse of [`Element::to_bits`].
    fn from_bits(bits: u64) -> Self;
    /// `a ⊕ b` for the operator `op`. Avg and PreMulSum fold as sums (their division and
    /// pre-multiplication are not folds); the interpreter refuses them before it runs
    /// ([`InterpretError::UnsupportedOp`](super::InterpretError::UnsupportedOp)).
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! float_element {
    ($t:ty, $bits:ty) => {
        impl Element for $t {
            fn to_bits(self) -> u64 {
                u64::from(<$t>::to_bits(self))
            }
            fn from_bits(bits: u64) -> Self {
                // Truncation is intended: the value was zero-extended by `to_bits`.
                <$t>::from_bits(bits as $bits)
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $unsigned:ty) => {
        impl Element for $t {
            fn to_bits(self) -> u64 {
                // Reinterpret as unsigned of the same width, then zero-extend.
                u64::from(self as $unsigned)
            }
            fn from_bits(bits: u64) -> Self {
                // Truncation is intended: the value was zero-extended by `to_bits`.
                bits as $unsigned as $t
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
        }
    };
}

float_element!(f32, u32);
float_element!(f64, u64);
int_element!(i32, u32);
int_element!(u32, u32);
int_element!(i64, u64);
int_element!(u64, u64);

//! The operator of a reducing collective with its argument: a plain [`ReduceOp`], or PreMulSum
//! (NCCL's `ncclRedOpCreatePreMulSum`: the sum over ranks of each rank's input times that rank's
//! own scalar; ranks may pass different scalars) with this rank's scalar as a value or as a device address read when the kernel runs. The kernels get either in
//! the launch's copy of the `CollContext` (`scalar`, `scalar_in_device`): no allocation, copy or
//! host synchronisation per call, so PreMulSum calls are capturable in CUDA graphs like any
//! other, and a replay of a call with a device scalar reads the scalar's current value.

use crate::args::ArgError;
use weft_gpu::DevicePtr;
use weft_types::{CollContext, DataType, ReduceOp};

/// PreMulSum's scalar: one element of the call's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    /// The value: the element's little-endian bytes, zero-extended to 64 bits (see
    /// [`Scalar::from_bytes`]). A captured call keeps it.
    Immediate(u64),
    /// Device address of the element on the rank's GPU, read when the kernel runs (by every
    /// replay of a captured call). It must stay valid until the call's work has finished.
    Device(DevicePtr),
}

impl Scalar {
    /// The scalar whose bytes (one element of `dtype`, little-endian) are `bytes`: exactly
    /// `dtype.size()` of them.
    pub fn from_bytes(dtype: DataType, bytes: &[u8]) -> Result<Self, ArgError> {
        if bytes.len() != dtype.size() {
            return Err(ArgError::ScalarBytes { dtype, bytes: bytes.len() });
        }
        let mut word = [0u8; 8];
        word[..bytes.len()].copy_from_slice(bytes);
        Ok(Self::Immediate(u64::from_le_bytes(word)))
    }

    /// An immediate scalar's bytes as one element of `dtype` (`None` for a device scalar).
    pub fn bytes(self, dtype: DataType) -> Option<Vec<u8>> {
        match self {
            Self::Immediate(bits) => Some(bits.to_le_bytes()[..dtype.size()].to_vec()),
            Self::Device(_) => None,
        }
    }
}

/// What a reducing collective computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// An operator without an argument (every [`ReduceOp`] but `PreMulSum`, which needs one).
    Op(ReduceOp),
    /// The sum over ranks of each rank's input times that rank's `scalar` (this one is the
    /// calling rank's; ranks may pass different scalars), each product in the element type;
    /// `dtype` is the scalar's type, which must be the call's (NCCL's rule for its operators).
    PreMulSum {
        /// The scalar's element type.
        dtype: DataType,
        /// The scalar.
        scalar: Scalar,
    },
}

impl From<ReduceOp> for Reduction {
    fn from(op: ReduceOp) -> Self {
        Self::Op(op)
    }
}

impl Reduction {
    /// The operator the kernels are compiled for.
    pub fn op(self) -> ReduceOp {
        match self {
            Self::Op(op) => op,
            Self::PreMulSum { .. } => ReduceOp::PreMulSum,
        }
    }

    /// The scalar of a call on `dtype` elements, checked: `None` for operators without one; an
    /// error names a missing scalar or a type other than the call's.
    pub(crate) fn scalar_for(self, dtype: DataType) -> Result<Option<Scalar>, ArgError> {
        match self {
            Self::Op(ReduceOp::PreMulSum) => Err(ArgError::MissingScalar),
            Self::Op(_) => Ok(None),
            Self::PreMulSum { dtype: scalar, .. } if scalar != dtype => {
                Err(ArgError::ScalarType { scalar, call: dtype })
            }
            Self::PreMulSum { scalar, .. } => Ok(Some(scalar)),
        }
    }
}

/// `context` with the call's scalar in it (zero when there is none).
pub(crate) fn with_scalar(mut context: CollContext, scalar: Option<Scalar>) -> CollContext {
    (context.scalar, context.scalar_in_device) = match scalar {
        None => (0, 0),
        Some(Scalar::Immediate(bits)) => (bits, 0),
        Some(Scalar::Device(ptr)) => (ptr, 1),
    };
    context
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_scalars_hold_one_element_of_the_type_zero_extended() {
        for dtype in DataType::ALL {
            let bytes: Vec<u8> = (1..=dtype.size() as u8).map(|b| b | 0x80).collect();
            let scalar = Scalar::from_bytes(dtype, &bytes).unwrap();
            let Scalar::Immediate(bits) = scalar else { panic!("{scalar:?}") };
            if dtype.size() < 8 {
                assert_eq!(bits >> (8 * dtype.size()), 0, "{}", dtype.name());
            }
            assert_eq!(scalar.bytes(dtype).unwrap(), bytes, "{}", dtype.name());
            assert!(
                Scalar::from_bytes(dtype, &[0; 9][..dtype.size() + 1]).unwrap_err().to_string().contains(dtype.name())
            );
        }
        assert_eq!(Scalar::from_bytes(DataType::F32, &0.5f32.to_le_bytes()), Ok(Scalar::Immediate(0x3f00_0000)));
        assert_eq!(Scalar::Device(0x1000).bytes(DataType::F32), None);
    }

    #[test]
    fn a_premulsum_scalar_must_have_the_calls_type() {
        let half = Reduction::PreMulSum { dtype: DataType::F16, scalar: Scalar::Immediate(0x3800) };
        assert_eq!(half.op(), ReduceOp::PreMulSum);
        assert_eq!(half.scalar_for(DataType::F16), Ok(Some(Scalar::Immediate(0x3800))));
        let wrong = half.scalar_for(DataType::F32).unwrap_err();
        assert_eq!(wrong, ArgError::ScalarType { scalar: DataType::F16, call: DataType::F32 });
        assert!(wrong.to_string().contains("f16 but the call reduces f32"));
        let missing = Reduction::from(ReduceOp::PreMulSum).scalar_for(DataType::F32).unwrap_err();
        assert_eq!(missing, ArgError::MissingScalar);
        assert!(missing.to_string().contains("scalar"));
        assert_eq!(Reduction::from(ReduceOp::Avg).scalar_for(DataType::I8), Ok(None));
    }

    #[test]
    fn the_context_carries_the_scalar_by_value_or_by_address() {
        let base = CollContext { ranks: 2, scalar: 7, scalar_in_device: 1, ..CollContext::default() };
        let c = with_scalar(base, Some(Scalar::Immediate(0x3f00_0000)));
        assert_eq!((c.scalar, c.scalar_in_device, c.ranks), (0x3f00_0000, 0, 2));
        let c = with_scalar(base, Some(Scalar::Device(0xdead_0000)));
        assert_eq!((c.scalar, c.scalar_in_device), (0xdead_0000, 1));
        let c = with_scalar(base, None);
        assert_eq!((c.scalar, c.scalar_in_device), (0, 0));
    }
}

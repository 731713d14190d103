//! Reduction operators from `ncclRedOpCreatePreMulSum`, per communicator, run natively by
//! weft's kernels (weft-coll's `Reduction::PreMulSum`). As NCCL: a host-immediate scalar is read
//! (one element of the operator's type) when the operator is created, a device scalar is read
//! by every call's kernel when it runs (a CUDA-graph replay sees its current value); a call must
//! use the operator's type and the communicator that created it; handles are `ncclNumOps` and
//! up. Handles are unique in the process (not only per communicator), so an operator passed to
//! another communicator is always refused, not taken for one of that communicator's. Where the
//! communicator has a fallback NCCL, the operator is created there as well, for the calls that
//! go there.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use weft_coll::{Reduction, Scalar};
use weft_types::DataType;

use crate::error::NcclError;
use crate::ffi;

/// One PreMulSum operator of a communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserOp {
    /// The handle the application holds.
    pub handle: c_int,
    /// The scalar's element type: every call using the operator must reduce this type.
    pub dtype: DataType,
    /// The scalar.
    pub scalar: Scalar,
    /// The same operator in the fallback's communicator, if the communicator has one.
    pub fallback: Option<c_int>,
}

impl UserOp {
    /// What weft's collectives compute with it.
    pub fn reduction(&self) -> Reduction {
        Reduction::PreMulSum { dtype: self.dtype, scalar: self.scalar }
    }
}

/// The live operators of one communicator, by handle.
#[derive(Debug, Default)]
pub struct UserOps {
    ops: BTreeMap<c_int, UserOp>,
}

/// The next handle to hand out, process-wide: `ncclNumOps` up to `ncclMaxRedOp`, then again
/// from `ncclNumOps` (skipping the handles still live on the communicator).
static NEXT_HANDLE: AtomicI32 = AtomicI32::new(ffi::ncclNumOps);

/// The handle after `h`.
fn following(h: c_int) -> c_int {
    if h == ffi::ncclMaxRedOp { ffi::ncclNumOps } else { h + 1 }
}

fn next_handle() -> c_int {
    // The closure always returns Some, so fetch_update cannot fail; both arms hold the old value.
    NEXT_HANDLE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| Some(following(h))).unwrap_or_else(|h| h)
}

impl UserOps {
    /// Adds an operator; returns its handle.
    pub fn insert(&mut self, dtype: DataType, scalar: Scalar, fallback: Option<c_int>) -> c_int {
        let handle = std::iter::repeat_with(next_handle).find(|h| !self.ops.contains_key(h)).unwrap_or(ffi::ncclNumOps);
        self.ops.insert(handle, UserOp { handle, dtype, scalar, fallback });
        handle
    }

    /// Removes operator `handle` (`ncclRedOpDestroy`); built-in, unknown or already destroyed
    /// operators are `ncclInvalidArgument`.
    pub fn remove(&mut self, handle: c_int) -> Result<UserOp, NcclError> {
        if (0..ffi::ncclNumOps).contains(&handle) {
            return Err(NcclError::invalid_argument(format!(
                "operator {handle} is a built-in NCCL operator: only operators from ncclRedOpCreatePreMulSum are destroyed"
            )));
        }
        self.ops.remove(&handle).ok_or_else(|| unknown(handle))
    }

    /// Operator `handle` for a call reducing `dtype`: unknown operators (never created on this
    /// communicator, or destroyed) and another type than the operator's are
    /// `ncclInvalidArgument`, as in NCCL.
    pub fn get(&self, handle: c_int, dtype: DataType) -> Result<UserOp, NcclError> {
        let op = self.ops.get(&handle).copied().ok_or_else(|| unknown(handle))?;
        if op.dtype != dtype {
            return Err(NcclError::invalid_argument(format!(
                "reduction operator {handle} was created for {} but the call reduces {}: the types must match",
                op.dtype.name(),
                dtype.name()
            )));
        }
        Ok(op)
    }

    /// Live operators.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

fn unknown(handle: c_int) -> NcclError {
    NcclError::invalid_argument(format!(
        "reduction operator {handle} is unknown to this communicator (not made by its ncclRedOpCreatePreMulSum, or \
         destroyed)"
    ))
}

/// The scalar of `ncclRedOpCreatePreMulSum(op, scalar, dtype, residence, comm)`: for
/// `ncclScalarHostImmediate`, the element `scalar` points at, read now; for
/// `ncclScalarDevice`, the address itself (read by the kernels). A null `scalar` or another
/// residence is `ncclInvalidArgument`.
///
/// # Safety
/// A host-immediate `scalar` must point to `dtype.size()` readable bytes (nccl.h contract).
pub unsafe fn read_scalar(
    scalar: *const c_void,
    dtype: DataType,
    residence: ffi::ncclScalarResidence_t,
) -> Result<Scalar, NcclError> {
    if scalar.is_null() {
        return Err(NcclError::invalid_argument("scalar is NULL"));
    }
    match residence {
        ffi::ncclScalarHostImmediate => {
            // SAFETY: `dtype.size()` readable bytes at `scalar` (caller contract); no alignment
            // is assumed.
            let bytes = unsafe { std::slice::from_raw_parts(scalar.cast::<u8>(), dtype.size()) };
            Scalar::from_bytes(dtype, bytes).map_err(|e| NcclError::invalid_argument(e.to_string()))
        }
        ffi::ncclScalarDevice => Ok(Scalar::Device(scalar as u64)),
        other => Err(NcclError::invalid_argument(format!(
            "residence = {other}: expected ncclScalarDevice ({}) or ncclScalarHostImmediate ({})",
            ffi::ncclScalarDevice,
            ffi::ncclScalarHostImmediate
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn host_scalars_are_read_at_creation_in_every_type_and_device_scalars_are_kept_as_addresses() {
        for dtype in DataType::ALL {
            let value: Vec<u8> = (0..dtype.size() as u8).map(|i| 0xa1 + i).collect();
            // Unaligned on purpose: the application's scalar may sit anywhere.
            let mut buffer = vec![0u8; 1];
            buffer.extend_from_slice(&value);
            let ptr = buffer[1..].as_ptr().cast::<c_void>();
            // SAFETY: `ptr` points to dtype.size() bytes of `buffer`.
            let scalar = unsafe { read_scalar(ptr, dtype, ffi::ncclScalarHostImmediate) }.unwrap();
            assert_eq!(scalar.bytes(dtype), Some(value.clone()), "{}", dtype.name());
            // Changing the application's value afterwards changes nothing.
            buffer[1] ^= 0xff;
            assert_eq!(scalar.bytes(dtype), Some(value.clone()));
            // SAFETY: a device scalar is not dereferenced.
            let device = unsafe { read_scalar(0x7000_0010 as *const c_void, dtype, ffi::ncclScalarDevice) };
            assert_eq!(device.unwrap(), Scalar::Device(0x7000_0010));
        }
        let half = 1.5f32.to_le_bytes();
        // SAFETY: four readable bytes.
        let s = unsafe { read_scalar(half.as_ptr().cast(), DataType::F32, ffi::ncclScalarHostImmediate) };
        assert_eq!(s.unwrap(), Scalar::Immediate(u64::from(1.5f32.to_bits())));
    }

    #[test]
    fn null_scalars_and_unknown_residences_are_invalid_arguments() {
        // SAFETY: neither is dereferenced: both are refused first.
        let null = unsafe { read_scalar(std::ptr::null(), DataType::F32, ffi::ncclScalarHostImmediate) };
        assert!(null.unwrap_err().message.contains("scalar is NULL"));
        let x = 1u8;
        // SAFETY: as above.
        let bad = unsafe { read_scalar((&raw const x).cast(), DataType::U8, 2) }.unwrap_err();
        assert_eq!(bad.code, Code::InvalidArgument);
        assert!(bad.message.contains("residence = 2"), "{}", bad.message);
    }

    #[test]
    fn operators_are_per_communicator_typed_and_destroyed_once() {
        let (mut a, mut b) = (UserOps::default(), UserOps::default());
        let scalar = Scalar::Immediate(3);
        let x = a.insert(DataType::I32, scalar, None);
        let y = b.insert(DataType::I32, scalar, Some(9));
        assert!(x >= ffi::ncclNumOps && y >= ffi::ncclNumOps && x != y);
        let op = a.get(x, DataType::I32).unwrap();
        assert_eq!(op.reduction(), Reduction::PreMulSum { dtype: DataType::I32, scalar });
        assert_eq!(b.get(y, DataType::I32).unwrap().fallback, Some(9));
        // Another type than the operator's, and an operator of another communicator.
        let wrong_type = a.get(x, DataType::U32).unwrap_err();
        assert_eq!(wrong_type.code, Code::InvalidArgument);
        assert!(wrong_type.message.contains("created for i32 but the call reduces u32"), "{}", wrong_type.message);
        assert!(a.get(y, DataType::I32).unwrap_err().message.contains("unknown to this communicator"));
        assert!(a.remove(y).is_err() && b.len() == 1);
        // Destroyed once; twice is an error, and so are built-in operators.
        assert_eq!(a.remove(x).unwrap().handle, x);
        assert!(a.is_empty());
        assert!(a.remove(x).unwrap_err().message.contains("destroyed"));
        assert!(a.get(x, DataType::I32).unwrap_err().message.contains("ncclRedOpCreatePreMulSum"));
        for builtin in [ffi::ncclSum, ffi::ncclAvg] {
            assert!(a.remove(builtin).unwrap_err().message.contains("built-in"));
        }
        // Handles are not reused while another one is live.
        let z = a.insert(DataType::F32, scalar, None);
        assert!(z != y && z != x);
    }

    #[test]
    fn handles_wrap_back_to_the_first_user_value() {
        assert_eq!(following(ffi::ncclNumOps), ffi::ncclNumOps + 1);
        assert_eq!(following(ffi::ncclMaxRedOp - 1), ffi::ncclMaxRedOp);
        assert_eq!(following(ffi::ncclMaxRedOp), ffi::ncclNumOps);
    }
}

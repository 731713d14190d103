//! The Rust types a typed device buffer may hold, each tied to the collective element type
//! ([`DataType`]) its bytes are.

use weft_types::DataType;

use crate::module::Pod;

/// An element type of device buffers: plain data whose size and bit layout are those of
/// [`DeviceElement::DTYPE`], so a collective told "`n` elements of `DTYPE`" touches exactly the
/// buffer's `n` elements.
///
/// # Safety
/// `size_of::<Self>()` must equal `Self::DTYPE.size()`, and `Self` must accept every bit
/// pattern (a collective writes whatever the peers' elements combine to).
pub unsafe trait DeviceElement: Pod + Default {
    /// The collective element type of these bytes.
    const DTYPE: DataType;
}

/// FP8 E4M3 (finite, no infinities) as its raw byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);

/// FP8 E5M2 as its raw byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F8E5M2(pub u8);

macro_rules! elements {
    ($($t:ty => $dtype:ident),* $(,)?) => { $(
        // SAFETY: a plain number (or a transparent wrapper of one) of the width of the data type
        // it names; every bit pattern is a value.
        unsafe impl Pod for $t {}
        // SAFETY: as above; `sizes_match_data_types` checks the widths.
        unsafe impl DeviceElement for $t {
            const DTYPE: DataType = DataType::$dtype;
        }
    )* };
}

macro_rules! primitive_elements {
    ($($t:ty => $dtype:ident),* $(,)?) => { $(
        // SAFETY: a primitive number of the width of the data type it names (`Pod` comes from
        // module.rs); `sizes_match_data_types` checks the widths.
        unsafe impl DeviceElement for $t {
            const DTYPE: DataType = DataType::$dtype;
        }
    )* };
}

primitive_elements!(i8 => I8, u8 => U8, i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);
elements!(half::f16 => F16, half::bf16 => Bf16, F8E4M3 => F8E4M3, F8E5M2 => F8E5M2);

/// Something to run for the Rust type of a data type known only at run time (see
/// [`with_element`]).
pub trait ElementFn {
    /// What the run returns.
    type Output;
    /// Runs for element type `T`.
    fn call<T: DeviceElement>(self) -> Self::Output;
}

/// Runs `f` with the Rust type whose elements are `dtype`'s: the bridge from a data type chosen
/// at run time (a command-line flag) to the typed buffer API.
pub fn with_element<F: ElementFn>(dtype: DataType, f: F) -> F::Output {
    match dtype {
        DataType::I8 => f.call::<i8>(),
        DataType::U8 => f.call::<u8>(),
        DataType::I32 => f.call::<i32>(),
        DataType::U32 => f.call::<u32>(),
        DataType::I64 => f.call::<i64>(),
        DataType::U64 => f.call::<u64>(),
        DataType::F16 => f.call::<half::f16>(),
        DataType::F32 => f.call::<f32>(),
        DataType::F64 => f.call::<f64>(),
        DataType::Bf16 => f.call::<half::bf16>(),
        DataType::F8E4M3 => f.call::<F8E4M3>(),
        DataType::F8E5M2 => f.call::<F8E5M2>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Size;
    impl ElementFn for Size {
        type Output = (DataType, usize);
        fn call<T: DeviceElement>(self) -> (DataType, usize) {
            (T::DTYPE, size_of::<T>())
        }
    }

    #[test]
    fn sizes_match_data_types() {
        for dtype in DataType::ALL {
            let (named, size) = with_element(dtype, Size);
            assert_eq!(named, dtype);
            assert_eq!(size, dtype.size(), "{dtype:?}");
        }
    }
}

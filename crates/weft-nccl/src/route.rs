//! Where a call runs: weft's kernels or the fallback NCCL. The choice depends only on values
//! every rank shares (the kind, type and operator, the force list, whether the communicator
//! has a weft side and a fallback), so all ranks of a collective take the same path.

use std::ffi::c_int;

use weft_types::{DataType, ReduceOp};

use crate::env::{ForceSet, Kind};
use crate::error::NcclError;
use crate::ffi;

/// The engine that runs a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// weft's collectives.
    Weft,
    /// The real NCCL's communicator, created beside weft's at init.
    Fallback,
}

/// A reduction operator as the application passed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `ncclSum` .. `ncclAvg`.
    Builtin(ReduceOp),
    /// An operator from `ncclRedOpCreatePreMulSum` (lives in the fallback's communicator).
    Custom(c_int),
}

impl Op {
    /// The value to pass to the fallback.
    pub fn raw(self) -> c_int {
        match self {
            Op::Builtin(op) => op as c_int,
            Op::Custom(raw) => raw,
        }
    }
}

/// `ncclDataType_t` → weft's type (same numbering); anything else is `ncclInvalidArgument`.
pub fn data_type(raw: ffi::ncclDataType_t) -> Result<DataType, NcclError> {
    DataType::ALL
        .iter()
        .copied()
        .find(|&t| t as c_int == raw)
        .ok_or_else(|| NcclError::invalid_argument(format!("invalid datatype {raw} (0..{})", ffi::ncclNumTypes)))
}

/// `ncclRedOp_t` → operator. Values from `ncclNumOps` up are custom operators (the
/// communicator checks it created them); negative values are `ncclInvalidArgument`.
pub fn red_op(raw: ffi::ncclRedOp_t) -> Result<Op, NcclError> {
    if let Some(&op) = ReduceOp::ALL.iter().find(|&&o| o as c_int == raw) {
        return Ok(Op::Builtin(op));
    }
    if raw >= ffi::ncclNumOps {
        return Ok(Op::Custom(raw));
    }
    Err(NcclError::invalid_argument(format!("invalid reduction operator {raw}")))
}

/// What the communicator offers.
#[derive(Clone, Copy, Debug)]
pub struct Engines<'a> {
    /// Why this communicator has no weft side (`None`: it has one).
    pub weft_missing: Option<&'a str>,
    /// Whether a fallback communicator exists.
    pub fallback: bool,
    /// `WEFT_NCCL_FORCE_FALLBACK`.
    pub force: ForceSet,
}

/// Decides where a `kind` call with operator `op` runs. `pattern` is why weft cannot run this
/// particular call (e.g. an in-place all-to-all), if it cannot. Without a fallback, a call weft
/// cannot run is `ncclInvalidUsage`, never a wrong result.
pub fn route(kind: Kind, op: Option<Op>, pattern: Option<&str>, engines: Engines<'_>) -> Result<Route, NcclError> {
    let reason = if engines.force.contains(kind) {
        Some(format!("{kind} is listed in WEFT_NCCL_FORCE_FALLBACK"))
    } else if let Some(why) = engines.weft_missing {
        Some(format!("this communicator has no weft side ({why})"))
    } else if let Some(Op::Custom(raw)) = op {
        Some(format!("custom reduction operator {raw} (weft has no PreMulSum yet)"))
    } else {
        pattern.map(|p| format!("weft cannot run {kind} {p}"))
    };
    match reason {
        None => Ok(Route::Weft),
        Some(reason) if engines.fallback => {
            tracing::debug!(%kind, %reason, "route: fallback NCCL");
            Ok(Route::Fallback)
        }
        Some(reason) => Err(NcclError::invalid_usage(format!(
            "{reason}, and no fallback NCCL is loaded (set WEFT_NCCL_FALLBACK_LIB to a real libnccl.so.2)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    #[test]
    fn types_and_operators_map_with_nccl_numbering() {
        assert_eq!(data_type(ffi::ncclFloat).unwrap(), DataType::F32);
        assert_eq!(data_type(ffi::ncclBfloat16).unwrap(), DataType::Bf16);
        assert_eq!(data_type(ffi::ncclFloat8e5m2).unwrap(), DataType::F8E5M2);
        assert_eq!(data_type(ffi::ncclChar).unwrap(), DataType::I8);
        for raw in [ffi::ncclNumTypes, -1, 1000] {
            assert_eq!(data_type(raw).unwrap_err().code, Code::InvalidArgument);
        }
        assert_eq!(red_op(ffi::ncclAvg).unwrap(), Op::Builtin(ReduceOp::Avg));
        assert_eq!(red_op(ffi::ncclMin).unwrap(), Op::Builtin(ReduceOp::Min));
        assert_eq!(red_op(ffi::ncclNumOps + 3).unwrap(), Op::Custom(8));
        assert_eq!(red_op(-2).unwrap_err().code, Code::InvalidArgument);
        assert_eq!(Op::Custom(9).raw(), 9);
        assert_eq!(Op::Builtin(ReduceOp::Max).raw(), ffi::ncclMax);
    }

    #[test]
    fn routes_follow_support_force_list_and_fallback() {
        let sum = Some(Op::Builtin(ReduceOp::Sum));
        let both = Engines { weft_missing: None, fallback: true, force: ForceSet::default() };
        let weft_only = Engines { fallback: false, ..both };
        assert_eq!(route(Kind::AllReduce, sum, None, both).unwrap(), Route::Weft);
        assert_eq!(route(Kind::AllReduce, sum, None, weft_only).unwrap(), Route::Weft);
        let forced = Engines { force: ForceSet::parse("allreduce").unwrap(), ..both };
        assert_eq!(route(Kind::AllReduce, sum, None, forced).unwrap(), Route::Fallback);
        assert_eq!(route(Kind::AllGather, None, None, forced).unwrap(), Route::Weft);
        let forced_alone = Engines { fallback: false, ..forced };
        let err = route(Kind::AllReduce, sum, None, forced_alone).unwrap_err();
        assert_eq!(err.code, Code::InvalidUsage);
        assert!(err.message.contains("WEFT_NCCL_FALLBACK_LIB"));
        let custom = Some(Op::Custom(5));
        assert_eq!(route(Kind::Reduce, custom, None, both).unwrap(), Route::Fallback);
        assert!(route(Kind::Reduce, custom, None, weft_only).unwrap_err().message.contains("PreMulSum"));
        assert_eq!(route(Kind::AllToAll, None, Some("in place"), both).unwrap(), Route::Fallback);
        assert!(route(Kind::AllToAll, None, Some("in place"), weft_only).is_err());
        let no_weft = Engines { weft_missing: Some("9 ranks"), ..both };
        assert_eq!(route(Kind::SendRecv, None, None, no_weft).unwrap(), Route::Fallback);
    }
}

//! Where a call runs: weft's kernels or the fallback NCCL. The choice depends only on values
//! every rank shares (the kind, type and operator, the force list, whether the communicator
//! has a weft side and a fallback), so all ranks of a collective take the same path.

use std::ffi::c_int;

use weft_coll::Reduction;
use weft_types::{DataType, ReduceOp};

use crate::env::{ForceSet, Kind};
use crate::error::{Code, NcclError};
use crate::ffi;
use crate::ops::UserOp;

/// The engine that runs a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// weft's collectives.
    Weft,
    /// The real NCCL's communicator, created beside weft's at init.
    Fallback,
}

/// A reduction operator of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `ncclSum` .. `ncclAvg`.
    Builtin(ReduceOp),
    /// An operator value from `ncclNumOps` up, as the application passed it: resolved against
    /// the communicator's operators when the call is checked ([`crate::exec::Call::checked_for`]).
    Custom(c_int),
    /// An operator from `ncclRedOpCreatePreMulSum` of the call's communicator.
    PreMulSum(UserOp),
}

impl Op {
    /// The value to pass to the fallback (for a PreMulSum operator, the fallback's own).
    pub fn fallback_raw(self) -> Result<c_int, NcclError> {
        match self {
            Op::Builtin(op) => Ok(op as c_int),
            Op::PreMulSum(UserOp { fallback: Some(raw), .. }) => Ok(raw),
            Op::PreMulSum(UserOp { handle, .. }) | Op::Custom(handle) => Err(NcclError::new(
                Code::InternalError,
                format!("reduction operator {handle} has no counterpart in the fallback NCCL"),
            )),
        }
    }

    /// What weft's collectives compute.
    pub fn reduction(self) -> Result<Reduction, NcclError> {
        match self {
            Op::Builtin(op) => Ok(op.into()),
            Op::PreMulSum(op) => Ok(op.reduction()),
            Op::Custom(raw) => Err(NcclError::new(Code::InternalError, format!("operator {raw} was not resolved"))),
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
    if let Some(&op) = ReduceOp::BUILTIN.iter().find(|&&o| o as c_int == raw) {
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
    /// Whether the communicator's ranks span nodes (hosts or virtual nodes), where weft runs
    /// only AllReduce (and the device API).
    pub spans_nodes: bool,
}

/// Decides where a `kind` call runs (every operator, PreMulSum included, runs on weft).
/// `pattern` is why weft cannot run this particular call (e.g. an in-place all-to-all), if it
/// cannot. Without a fallback, a call weft cannot run is `ncclInvalidUsage`, never a wrong
/// result.
pub fn route(kind: Kind, pattern: Option<&str>, engines: Engines<'_>) -> Result<Route, NcclError> {
    let reason = if engines.force.contains(kind) {
        Some(format!("{kind} is listed in WEFT_NCCL_FORCE_FALLBACK"))
    } else if let Some(why) = engines.weft_missing {
        Some(format!("this communicator has no weft side ({why})"))
    } else if engines.spans_nodes && !matches!(kind, Kind::ALL_REDUCE | Kind::DevComm) {
        Some(format!("{kind} across nodes (weft runs AllReduce and the device API between nodes)"))
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
        // PreMulSum's value in weft's numbering is no ncclRedOp_t: the application's 5 is a
        // custom operator's handle.
        assert_eq!(red_op(ReduceOp::PreMulSum as c_int).unwrap(), Op::Custom(ffi::ncclNumOps));
        assert_eq!(Op::Builtin(ReduceOp::Max).fallback_raw().unwrap(), ffi::ncclMax);
        assert_eq!(Op::Custom(9).fallback_raw().unwrap_err().code, Code::InternalError);
        assert_eq!(Op::Custom(9).reduction().unwrap_err().code, Code::InternalError);
        let scalar = weft_coll::Scalar::Immediate(2);
        let user = UserOp { handle: 7, dtype: DataType::I8, scalar, fallback: None };
        assert_eq!(Op::PreMulSum(user).reduction().unwrap(), Reduction::PreMulSum { dtype: DataType::I8, scalar });
        assert!(Op::PreMulSum(user).fallback_raw().is_err());
        assert_eq!(Op::PreMulSum(UserOp { fallback: Some(11), ..user }).fallback_raw().unwrap(), 11);
        assert_eq!(Op::Builtin(ReduceOp::Avg).reduction().unwrap(), Reduction::Op(ReduceOp::Avg));
    }

    #[test]
    fn routes_follow_support_force_list_and_fallback() {
        let both = Engines { weft_missing: None, fallback: true, force: ForceSet::default(), spans_nodes: false };
        let weft_only = Engines { fallback: false, ..both };
        assert_eq!(route(Kind::ALL_REDUCE, None, both).unwrap(), Route::Weft);
        assert_eq!(route(Kind::ALL_REDUCE, None, weft_only).unwrap(), Route::Weft);
        let forced = Engines { force: ForceSet::parse("allreduce").unwrap(), ..both };
        assert_eq!(route(Kind::ALL_REDUCE, None, forced).unwrap(), Route::Fallback);
        assert_eq!(route(Kind::ALL_GATHER, None, forced).unwrap(), Route::Weft);
        let forced_alone = Engines { fallback: false, ..forced };
        let err = route(Kind::ALL_REDUCE, None, forced_alone).unwrap_err();
        assert_eq!(err.code, Code::InvalidUsage);
        assert!(err.message.contains("WEFT_NCCL_FALLBACK_LIB"));
        // Every operator runs on weft: PreMulSum is no reason to fall back.
        assert_eq!(route(Kind::REDUCE, None, both).unwrap(), Route::Weft);
        assert_eq!(route(Kind::ALL_TO_ALL, Some("in place"), both).unwrap(), Route::Fallback);
        assert!(route(Kind::ALL_TO_ALL, Some("in place"), weft_only).is_err());
        let no_weft = Engines { weft_missing: Some("9 ranks"), ..both };
        assert_eq!(route(Kind::SEND_RECV, None, no_weft).unwrap(), Route::Fallback);
        // Across nodes weft runs AllReduce and the device API; the rest go to the fallback, or
        // are refused without one.
        let across = Engines { spans_nodes: true, ..both };
        assert_eq!(route(Kind::ALL_REDUCE, None, across).unwrap(), Route::Weft);
        assert_eq!(route(Kind::DevComm, None, across).unwrap(), Route::Weft);
        for kind in [Kind::ALL_GATHER, Kind::REDUCE_SCATTER, Kind::BROADCAST, Kind::SEND_RECV, Kind::Gather] {
            assert_eq!(route(kind, None, across).unwrap(), Route::Fallback, "{kind}");
            let err = route(kind, None, Engines { fallback: false, ..across }).unwrap_err();
            assert!(err.message.contains("across nodes"), "{}", err.message);
        }
    }
}

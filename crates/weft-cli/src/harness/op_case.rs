//! The operator of a checked collective call as the self-test matrix and `weft soak` run it:
//! a built-in operator, or PreMulSum with each rank's own scalar passed by value or read from
//! device memory by the kernels.

use weft_coll::Algorithm;
use weft_gpu::DeviceBuffer;
use weft_types::{DataType, ReduceOp};

use super::data::{premul_scalar, reduction};
use super::rank::CallOp;

/// An operator of a checked call, with how PreMulSum's scalar is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpCase {
    /// An operator without a scalar.
    Plain(ReduceOp),
    /// PreMulSum with the scalar as a value (the launch carries it).
    PreMulSumValue,
    /// PreMulSum with the scalar in device memory (the kernels read it).
    PreMulSumDevice,
}

impl OpCase {
    /// The cases of the operators `algorithm` supports.
    pub(crate) fn all(algorithm: Algorithm) -> Vec<OpCase> {
        ReduceOp::ALL
            .into_iter()
            .filter(|&o| algorithm.supports_op(o))
            .flat_map(|o| match o {
                ReduceOp::PreMulSum => vec![OpCase::PreMulSumValue, OpCase::PreMulSumDevice],
                o => vec![OpCase::Plain(o)],
            })
            .collect()
    }

    pub(crate) fn op(self) -> ReduceOp {
        match self {
            OpCase::Plain(o) => o,
            OpCase::PreMulSumValue | OpCase::PreMulSumDevice => ReduceOp::PreMulSum,
        }
    }

    pub(crate) fn name(self) -> String {
        match self {
            OpCase::Plain(o) => o.name().to_string(),
            OpCase::PreMulSumValue => "premulsum (scalar by value)".into(),
            OpCase::PreMulSumDevice => "premulsum (scalar in device memory)".into(),
        }
    }

    /// `rank`'s reduction of a call on `dtype`, PreMulSum with the rank's own scalar (a device
    /// scalar is written into `scalar` first; the previous case's calls are done: every check
    /// waits for the stream).
    pub(crate) fn reduction(self, dtype: DataType, rank: u32, scalar: &DeviceBuffer<u8>) -> Result<CallOp<'_>, String> {
        match self {
            OpCase::PreMulSumDevice => {
                let bytes = premul_scalar(dtype, rank);
                scalar.memory().write(0, &bytes).map_err(|e| format!("the device scalar: {e}"))?;
                Ok(CallOp::DeviceScalar(scalar))
            }
            case => Ok(CallOp::Host(reduction(dtype, case.op(), rank))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn premulsum_runs_with_both_scalars_where_the_algorithm_supports_it() {
        let native = OpCase::all(Algorithm::AllReduceHb);
        assert_eq!(native.len(), ReduceOp::ALL.len() + 1);
        assert!(native.contains(&OpCase::PreMulSumValue) && native.contains(&OpCase::PreMulSumDevice));
        assert!(native.contains(&OpCase::Plain(ReduceOp::Avg)));
        assert!(native.iter().all(|c| *c != OpCase::Plain(ReduceOp::PreMulSum)));
        let plan = Algorithm::from_name(weft_types::Collective::AllReduce, "plan:ring_allreduce").unwrap();
        assert!(OpCase::all(plan).iter().all(|c| plan.supports_op(c.op()) && c.op() != ReduceOp::PreMulSum));
        assert_eq!(OpCase::PreMulSumDevice.op(), ReduceOp::PreMulSum);
        assert!(OpCase::PreMulSumDevice.name().contains("device"));
    }
}

//! The collectives, and the element types and reduction operators they compute with: one
//! vocabulary for the selector, the plans and the NCCL layer. The values are NCCL's
//! (`ncclDataType_t`, `ncclRedOp_t`), so the NCCL ABI maps onto them one to one.

device_enums! {
    /// Element type of a collective's buffers.
    enum DataType {
        /// `int8_t`.
        I8 = 0,
        /// `uint8_t`.
        U8 = 1,
        /// `int32_t`.
        I32 = 2,
        /// `uint32_t`.
        U32 = 3,
        /// `int64_t`.
        I64 = 4,
        /// `uint64_t`.
        U64 = 5,
        /// IEEE half.
        F16 = 6,
        /// IEEE single.
        F32 = 7,
        /// IEEE double.
        F64 = 8,
        /// bfloat16.
        Bf16 = 9,
        /// FP8 E4M3 (finite, no infinities).
        F8E4M3 = 10,
        /// FP8 E5M2.
        F8E5M2 = 11,
    }

    /// Reduction operator. Values 0..=4 are NCCL's `ncclRedOp_t`; PreMulSum (5) is not one:
    /// the C API's operators from `ncclRedOpCreatePreMulSum` map onto it. Integer results are
    /// NCCL's bit for bit: Avg is the sum in the element type (wrapping), then divided by the
    /// rank count in it (truncated toward zero); PreMulSum is NCCL's pre-operation: each rank
    /// multiplies its own input by its own scalar in the element type (integers wrapping), then
    /// the products are summed.
    enum ReduceOp {
        /// Sum.
        Sum = 0,
        /// Product.
        Prod = 1,
        /// Maximum.
        Max = 2,
        /// Minimum.
        Min = 3,
        /// Sum divided by the number of ranks (integers: wrapping sum, then truncating division).
        Avg = 4,
        /// Sum of each rank's input times that rank's own scalar (`ncclRedOpCreatePreMulSum`).
        PreMulSum = 5,
    }
}

/// A collective operation, as every layer names it: weft-coll's selector and tuning tables,
/// the execution plans of weft-plan, `weft bench` and the NCCL layer. With the `serde` feature
/// it is serialised by its [`Collective::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "lowercase"))]
pub enum Collective {
    /// Every rank gets the reduction of every rank's buffer.
    AllReduce,
    /// Every rank gets every rank's block, in rank order.
    AllGather,
    /// Rank r gets the reduction of block r of every rank's buffer.
    ReduceScatter,
    /// Every rank gets the root's buffer.
    Broadcast,
    /// The root gets the reduction of every rank's buffer.
    Reduce,
    /// Rank r gets block r of every rank's buffer.
    AllToAll,
    /// Grouped point-to-point sends and receives.
    SendRecv,
}

impl Collective {
    /// Every collective.
    pub const ALL: [Collective; 7] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllToAll,
        Collective::SendRecv,
    ];

    /// Lower-case name (`allreduce`, `allgather`, `reducescatter`, `broadcast`, `reduce`,
    /// `alltoall`, `sendrecv`), as `weft bench`, the tuning table and the plan format spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::AllReduce => "allreduce",
            Self::AllGather => "allgather",
            Self::ReduceScatter => "reducescatter",
            Self::Broadcast => "broadcast",
            Self::Reduce => "reduce",
            Self::AllToAll => "alltoall",
            Self::SendRecv => "sendrecv",
        }
    }

    /// The collective called `name` ([`Collective::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Parses a name leniently: `all_reduce`, `all-reduce` and `AllReduce` are `allreduce`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let key: String = s.chars().filter(|c| *c != '_' && *c != '-').collect::<String>().to_ascii_lowercase();
        Self::from_name(&key).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|c| c.name()).collect();
            format!("unknown collective {s:?} (one of {})", names.join(", "))
        })
    }

    /// Whether the collective applies a reduction operator.
    pub fn reduces(self) -> bool {
        matches!(self, Self::AllReduce | Self::ReduceScatter | Self::Reduce)
    }
}

impl core::fmt::Display for Collective {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl DataType {
    /// Every type, in NCCL order.
    pub const ALL: [DataType; 12] = [
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::F16,
        DataType::F32,
        DataType::F64,
        DataType::Bf16,
        DataType::F8E4M3,
        DataType::F8E5M2,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 | DataType::F8E4M3 | DataType::F8E5M2 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    /// Whether the type is a floating-point format.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::F16 | DataType::F32 | DataType::F64 | DataType::Bf16 | DataType::F8E4M3 | DataType::F8E5M2
        )
    }

    /// Short lowercase name (`bf16`, `f8e4m3`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
            DataType::F16 => "f16",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::Bf16 => "bf16",
            DataType::F8E4M3 => "f8e4m3",
            DataType::F8E5M2 => "f8e5m2",
        }
    }

    /// The type named `name` ([`DataType::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl ReduceOp {
    /// Every operator.
    pub const ALL: [ReduceOp; 6] =
        [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg, ReduceOp::PreMulSum];

    /// NCCL's built-in operators (`ncclSum` .. `ncclAvg`), whose values are their
    /// `ncclRedOp_t`.
    pub const BUILTIN: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg];

    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
            ReduceOp::PreMulSum => "premulsum",
        }
    }

    /// The operator named `name` ([`ReduceOp::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes_cover_every_type() {
        for t in DataType::ALL {
            assert_eq!(DataType::from_raw(t as u32), Some(t));
            assert!(matches!(t.size(), 1 | 2 | 4 | 8));
        }
        assert_eq!(DataType::Bf16.size(), 2);
        assert_eq!(ReduceOp::from_raw(4), Some(ReduceOp::Avg));
        assert_eq!(ReduceOp::from_raw(5), Some(ReduceOp::PreMulSum));
        assert!(!ReduceOp::BUILTIN.contains(&ReduceOp::PreMulSum));
        assert!(ReduceOp::BUILTIN.iter().enumerate().all(|(i, &o)| o as usize == i));
        for t in DataType::ALL {
            assert_eq!(DataType::from_name(t.name()), Some(t));
        }
        for o in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_name(o.name()), Some(o));
        }
        assert_eq!((DataType::from_name("f128"), ReduceOp::from_name("xor")), (None, None));
        for c in Collective::ALL {
            assert_eq!((Collective::from_name(c.name()), Collective::parse(c.name())), (Some(c), Ok(c)));
        }
        assert_eq!(Collective::parse("Reduce-Scatter"), Ok(Collective::ReduceScatter));
        assert!(Collective::parse("gather").is_err());
    }
}

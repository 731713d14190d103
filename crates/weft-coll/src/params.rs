//! The parameter lists of the collective kernels (`device/kernels/coll/`), declared once: a
//! launch takes one of these structs, and `device/include/weft/generated/kernels/coll.cuh`,
//! generated from them, holds the prototypes the kernel definitions are compiled against.
//! Kernels with the same parameter list share a struct. Every kernel is compiled once per
//! (element type, operator) under the same name, so each is declared once.

use weft_types::{CollContext, DevCommHandle, LlPairs, P2pPlan, PeerBuffers};

weft_gpu::device_kernels! {
    /// Every collective kernel's parameter list.
    pub(crate) fn signatures;

    /// A collective from one input into one output per rank.
    /// `bytes` is the kernel's unit of work: the input of AllReduce, a shard of ReduceScatter,
    /// a block of AllGather.
    pub(crate) struct Flat for [
        "weft_allreduce_ll",
        "weft_allreduce_ll2",
        "weft_allreduce_ll128",
        "weft_allreduce_ring",
        "weft_reduce_scatter_ll",
        "weft_reduce_scatter_ll128",
        "weft_reduce_scatter_hb",
        "weft_allgather_ll",
        "weft_allgather_ll128",
    ] {
        /// The rank's collective context, with the call's scalar.
        c: CollContext => "weft::CollContext",
        /// The call's input.
        input: u64 => "const char*",
        /// The call's output.
        output: u64 => "char*",
        /// Bytes of the unit of work.
        bytes: u64 => "uint64_t",
    }

    /// HB AllReduce through scratch: [`Flat`] plus every rank's output as this GPU addresses
    /// it (set: the results go straight there; all zero: through scratch).
    pub(crate) struct AllReduceHb for ["weft_allreduce_hb"] {
        /// The rank's collective context, with the call's scalar.
        c: CollContext => "weft::CollContext",
        /// The call's input.
        input: u64 => "const char*",
        /// The call's output.
        output: u64 => "char*",
        /// Bytes of the input.
        bytes: u64 => "uint64_t",
        /// Every rank's output, or zeros.
        outputs: PeerBuffers => "weft::PeerBuffers",
    }

    /// HB AllReduce straight between the ranks' windows (the direct two-shot): every rank's
    /// input and output as this GPU addresses them.
    pub(crate) struct AllReduceDirect for ["weft_allreduce_hb_direct"] {
        /// The rank's collective context.
        c: CollContext => "weft::CollContext",
        /// Bytes of the input, a multiple of 16.
        bytes: u64 => "uint64_t",
        /// Every rank's input.
        inputs: PeerBuffers => "weft::PeerBuffers",
        /// Every rank's output.
        outputs: PeerBuffers => "weft::PeerBuffers",
    }

    /// HB AllGather: through scratch, or straight into the peers' registered outputs.
    /// [`Flat`] plus those outputs (all zero: through scratch).
    pub(crate) struct AllGatherHb for ["weft_allgather_hb"] {
        /// The rank's collective context.
        c: CollContext => "weft::CollContext",
        /// The call's input.
        input: u64 => "const char*",
        /// The call's output.
        output: u64 => "char*",
        /// Bytes of a block.
        bytes: u64 => "uint64_t",
        /// Every rank's output as this GPU addresses it, or zeros.
        outputs: PeerBuffers => "weft::PeerBuffers",
    }

    /// A collective with a root (Broadcast, Reduce).
    pub(crate) struct Rooted for [
        "weft_broadcast_ll",
        "weft_broadcast_hb",
        "weft_broadcast_chain",
        "weft_broadcast_ll128",
        "weft_reduce_ll",
        "weft_reduce_hb",
        "weft_reduce_chain",
        "weft_reduce_ll128",
    ] {
        /// The rank's collective context, with the call's scalar.
        c: CollContext => "weft::CollContext",
        /// The call's input (read on the root only by Broadcast).
        input: u64 => "const char*",
        /// The call's output (written on the root only by Reduce).
        output: u64 => "char*",
        /// Bytes of the buffer.
        bytes: u64 => "uint64_t",
        /// The root rank.
        root: u32 => "uint32_t",
    }

    /// Reduce's direct form (`weft_reduce_direct`): [`Rooted`] with every rank's input as
    /// this GPU addresses it in place of this rank's.
    pub(crate) struct ReduceDirect for ["weft_reduce_direct"] {
        /// The rank's collective context, with the call's scalar.
        c: CollContext => "weft::CollContext",
        /// The call's output (written on the root only).
        output: u64 => "char*",
        /// Bytes of the buffer, a multiple of 16.
        bytes: u64 => "uint64_t",
        /// The root rank.
        root: u32 => "uint32_t",
        /// Every rank's input.
        inputs: PeerBuffers => "weft::PeerBuffers",
    }

    /// ReduceScatter's direct form (`weft_reduce_scatter_direct`): rank r folds block r of
    /// every rank's input, read in place, into its output.
    pub(crate) struct ReduceScatterDirect for ["weft_reduce_scatter_direct"] {
        /// The rank's collective context, with the call's scalar.
        c: CollContext => "weft::CollContext",
        /// The call's output (one block).
        output: u64 => "char*",
        /// Bytes of a block, a multiple of 16.
        shard_bytes: u64 => "uint64_t",
        /// Every rank's input.
        inputs: PeerBuffers => "weft::PeerBuffers",
    }

    /// One round of grouped sends and receives (AllToAll, grouped send/receive).
    pub(crate) struct P2p for ["weft_p2p"] {
        /// The rank's collective context.
        c: CollContext => "weft::CollContext",
        /// What goes to and comes from every peer in this round.
        plan: P2pPlan => "weft::P2pPlan",
    }

    /// The small directions of one round of grouped sends and receives, over LL packets.
    pub(crate) struct P2pLl for ["weft_p2p_ll"] {
        /// The rank's collective context.
        c: CollContext => "weft::CollContext",
        /// What goes to and comes from every peer in this round.
        plan: P2pPlan => "weft::P2pPlan",
        /// Where the pairs' lanes keep their flags, packets and tokens.
        pairs: LlPairs => "weft::LlPairs",
    }

    /// AllReduce over a ring of PortChannels.
    pub(crate) struct PortRingParams for ["weft_allreduce_port_ring"] {
        /// The rank's collective context, with the call's scalar.
        c: CollContext => "weft::CollContext",
        /// The call's input.
        input: u64 => "const char*",
        /// The call's output.
        output: u64 => "char*",
        /// Bytes of the input.
        bytes: u64 => "uint64_t",
        /// The channel table: `lanes` to the next rank, then `lanes` from the previous one.
        channels: u64 => "const weft::PortChannelDeviceHandle*",
        /// Channels per ring edge.
        lanes: u32 => "uint32_t",
        /// The registered scratch the peers put into.
        scratch: u64 => "char*",
        /// Bytes of one step slot of the scratch.
        slot_bytes: u64 => "uint64_t",
        /// The launch state the blocks hand work over with.
        state: u64 => "uint64_t*",
    }

    /// AllReduce by puts to every peer over PortChannels.
    pub(crate) struct PortAllPairsParams for ["weft_allreduce_port_allpairs"] {
        /// The rank's collective context, with the call's scalar.
        c: CollContext => "weft::CollContext",
        /// The call's input.
        input: u64 => "const char*",
        /// The call's output.
        output: u64 => "char*",
        /// Bytes of the input.
        bytes: u64 => "uint64_t",
        /// The channel table, entry p the channel to peer p.
        channels: u64 => "const weft::PortChannelDeviceHandle*",
        /// The registered scratch the peers put into.
        scratch: u64 => "char*",
        /// Bytes of one peer's slot of the scratch.
        slot_bytes: u64 => "uint64_t",
        /// The launch state the blocks hand work over with.
        state: u64 => "uint64_t*",
    }

    /// The AllReduces across nodes on a device communicator (GIN), `nvrar` and `2ph`.
    pub(crate) struct GinAllReduceParams for ["weft_allreduce_nvrar", "weft_allreduce_2ph"] {
        /// The rank's collective context, with the call's scalar.
        c: CollContext => "weft::CollContext",
        /// The call's input.
        input: u64 => "const char*",
        /// The call's output.
        output: u64 => "char*",
        /// Bytes of the input.
        bytes: u64 => "uint64_t",
        /// The device communicator: this node's ranks (LSA) and the rail across nodes.
        gin: DevCommHandle => "weft::DevCommHandle",
        /// Most input bytes of one round (the window holds one round per parity).
        round_bytes: u64 => "uint64_t",
        /// Bytes of one slot of the window (a round's shard: `nvrar`'s as LL packets).
        slot_bytes: u64 => "uint64_t",
        /// Per block, the rounds run so far, and the blocks' arrival counters (kept between
        /// launches).
        state: u64 => "uint64_t*",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;

    #[test]
    fn every_native_algorithm_has_one_parameter_list() {
        let signatures = signatures();
        for algorithm in Algorithm::ALL {
            let lists = signatures.iter().filter(|s| s.kernels.contains(&algorithm.kernel())).count();
            assert_eq!(lists, 1, "{} is declared in {lists} parameter lists", algorithm.kernel());
        }
    }
}

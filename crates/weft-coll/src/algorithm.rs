//! The collectives and the algorithms that implement them, by name.

use std::fmt;

use weft_core::env::{Variable, vars};

use crate::plans::PlanId;

pub use weft_types::Collective;

/// What weft-coll knows of each collective ([`Collective`], defined once in weft-types): the
/// algorithms that implement it and how a choice is forced or falls back.
pub trait CollectiveAlgorithms: Copy {
    /// The environment variable that forces an algorithm: `WEFT_ALGO_ALLREDUCE`, ...
    fn override_var(self) -> &'static Variable;
    /// The native algorithm a size-based choice falls back to where its pick cannot run: the
    /// first HB or through-scratch one that handles `dtype` (every collective has one for every
    /// type; all-to-all and send/receive have only direct transfers, and fall back to `p2p`).
    fn fallback(self, dtype: weft_types::DataType) -> Option<Algorithm>;
    /// The algorithms that implement this collective: the native kernels, then the plans of
    /// the registry (shipped, then the user plans of `WEFT_PLAN_DIR`).
    fn algorithms(self) -> impl Iterator<Item = Algorithm>;
}

impl CollectiveAlgorithms for Collective {
    fn override_var(self) -> &'static Variable {
        match self {
            Collective::AllReduce => &vars::WEFT_ALGO_ALLREDUCE,
            Collective::AllGather => &vars::WEFT_ALGO_ALLGATHER,
            Collective::ReduceScatter => &vars::WEFT_ALGO_REDUCESCATTER,
            Collective::Broadcast => &vars::WEFT_ALGO_BROADCAST,
            Collective::Reduce => &vars::WEFT_ALGO_REDUCE,
            Collective::AllToAll => &vars::WEFT_ALGO_ALLTOALL,
            Collective::SendRecv => &vars::WEFT_ALGO_SENDRECV,
        }
    }

    fn fallback(self, dtype: weft_types::DataType) -> Option<Algorithm> {
        self.algorithms().find(|a| matches!(a.protocol(), Protocol::Hb | Protocol::P2p) && a.supports(dtype))
    }

    fn algorithms(self) -> impl Iterator<Item = Algorithm> {
        Algorithm::ALL.into_iter().chain(PlanId::all().map(Algorithm::Plan)).filter(move |a| a.collective() == self)
    }
}

/// How an algorithm moves data (which shared state and launch shape it uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// LL16 packets into the peers' packet buffers; `ll_blocks` x `ll_threads`.
    Ll,
    /// Bulk copies through the peers' scratch with per-block semaphores; `hb_blocks` x `hb_threads`.
    Hb,
    /// Point-to-point transfers through scratch slots with credits; `hb_blocks` x `hb_threads`.
    P2p,
    /// Point-to-point transfers over LL16 packets for every direction of at most
    /// `CollConfig::p2p_ll_bytes` (into a slot of the receiver's packet buffer per sender, one
    /// flag per (direction, peer, part): `2 * ranks * ll_pair_parts` x `ll_threads`, launched
    /// early like [`Protocol::Ll`]), and as [`Protocol::P2p`] for the larger ones. Which of the
    /// two carries a direction depends only on its bytes, which both of its ends know.
    LlP2p,
    /// An execution plan run by weft-exec's interpreter kernel, with its own buffers.
    Plan,
    /// Puts through PortChannels that the proxy executes with the copy engine, into scratch
    /// registered with the proxy (`nvrar`: GIN puts, which are the same within a node's
    /// stores); `port_ring_blocks + 1` x `hb_threads`.
    Port,
}

/// One algorithm of one collective, each a kernel in `device/kernels/coll/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// AllReduce, one-shot all-pairs over LL packets.
    AllReduceLl,
    /// AllReduce, two-shot (reduce-scatter + all-gather) over LL packets.
    AllReduceLl2,
    /// AllReduce, the two-shot in LL128 lines (120 bytes and a flag per 128). Needs NVLink peers.
    AllReduceLl128,
    /// AllReduce, two-shot through scratch with many blocks.
    AllReduceHb,
    /// AllReduce, ring reduce-scatter then ring all-gather through the next rank's scratch.
    AllReduceRing,
    /// AllReduce, the same ring over PortChannels (MSCCL++ "2PR"): the copy engine moves the
    /// data, the GPU only reduces. Chosen by default only across nodes, for large messages.
    AllReducePortRing,
    /// AllReduce, every rank puts its input to every peer over PortChannels and folds them all:
    /// one network crossing. Chosen by default only across nodes, for small messages.
    AllReducePortAllPairs,
    /// AllReduce across nodes, NVRAR: reduce-scatter within each node, recursive doubling
    /// across nodes with LL packets (data and flag in one put), all-gather within each node, on
    /// a device communicator (GIN: stores to the peers of the node, proxy puts to the others).
    AllReduceNvrar,
    /// AllReduce across nodes, 2PH (MSCCL++'s hierarchical two-phase): reduce-scatter within
    /// each node, the shard's partial put to every other node (one crossing, 1/G of the data
    /// per rank), all-gather within each node, in whole vectors, on a device communicator as
    /// `nvrar`'s. For large messages.
    AllReduce2ph,
    /// AllGather over LL packets.
    AllGatherLl,
    /// AllGather in LL128 lines. Needs NVLink peers.
    AllGatherLl128,
    /// AllGather through scratch.
    AllGatherHb,
    /// ReduceScatter over LL packets.
    ReduceScatterLl,
    /// ReduceScatter in LL128 lines. Needs NVLink peers.
    ReduceScatterLl128,
    /// ReduceScatter through scratch.
    ReduceScatterHb,
    /// Broadcast over LL packets.
    BroadcastLl,
    /// Broadcast as scatter + all-gather through scratch.
    BroadcastHb,
    /// Broadcast down a pipelined chain of the ranks from the root, through slots of the next
    /// rank's scratch with credits: no barrier.
    BroadcastChain,
    /// Broadcast down the chain of the ranks from the root as LL128 lines (120 bytes and a flag
    /// per 128), each passed on as it arrives: no fence between ranks. Needs NVLink peers.
    BroadcastLl128,
    /// Reduce over LL packets.
    ReduceLl,
    /// Reduce as two-shot through scratch, results to the root.
    ReduceHb,
    /// Reduce up a pipelined chain of the ranks ending at the root (partials in the element
    /// type, as the ring's), through slots of the next rank's scratch with credits.
    ReduceChain,
    /// Reduce up the chain of the ranks ending at the root as LL128 lines (partials in the
    /// element type). Needs NVLink peers.
    ReduceLl128,
    /// AllToAll as grouped point-to-point transfers, blocks of up to `p2p_ll_bytes` over LL
    /// packets ([`Protocol::LlP2p`]).
    AllToAllLl,
    /// AllToAll as grouped point-to-point transfers through scratch.
    AllToAllP2p,
    /// Grouped sends and receives, those of up to `p2p_ll_bytes` over LL packets.
    SendRecvLl,
    /// Grouped sends and receives through scratch.
    SendRecvP2p,
    /// An execution plan of the registry (named `plan:<name>`).
    Plan(PlanId),
}

impl Algorithm {
    /// Every native algorithm (the plans are [`Collective::algorithms`]' other half).
    pub const ALL: [Algorithm; 27] = [
        Algorithm::AllReduceLl,
        Algorithm::AllReduceLl2,
        Algorithm::AllReduceLl128,
        Algorithm::AllReduceHb,
        Algorithm::AllReduceRing,
        Algorithm::AllReducePortRing,
        Algorithm::AllReducePortAllPairs,
        Algorithm::AllReduceNvrar,
        Algorithm::AllReduce2ph,
        Algorithm::AllGatherLl,
        Algorithm::AllGatherLl128,
        Algorithm::AllGatherHb,
        Algorithm::ReduceScatterLl,
        Algorithm::ReduceScatterLl128,
        Algorithm::ReduceScatterHb,
        Algorithm::BroadcastLl,
        Algorithm::BroadcastHb,
        Algorithm::BroadcastChain,
        Algorithm::BroadcastLl128,
        Algorithm::ReduceLl,
        Algorithm::ReduceHb,
        Algorithm::ReduceChain,
        Algorithm::ReduceLl128,
        Algorithm::AllToAllLl,
        Algorithm::AllToAllP2p,
        Algorithm::SendRecvLl,
        Algorithm::SendRecvP2p,
    ];

    /// Short name within its collective (`ll`, `ll2`, `ll128`, `hb`, `ring`, `chain`, `port_ring`,
    /// `port_allpairs`, `nvrar`, `2ph`, `p2p`, `plan:<name>`), as
    /// `WEFT_ALGO_<COLLECTIVE>` and the tuning table spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plan(id) => id.name(),
            Self::AllReduceLl2 => "ll2",
            Self::AllReduceRing => "ring",
            Self::AllReducePortRing => "port_ring",
            Self::AllReducePortAllPairs => "port_allpairs",
            Self::AllReduceNvrar => "nvrar",
            Self::AllReduce2ph => "2ph",
            Self::AllToAllP2p | Self::SendRecvP2p => "p2p",
            Self::BroadcastChain | Self::ReduceChain => "chain",
            a if a.is_ll128() => "ll128",
            a if matches!(a.protocol(), Protocol::Ll | Protocol::LlP2p) => "ll",
            _ => "hb",
        }
    }

    /// The collective it implements.
    pub fn collective(self) -> Collective {
        match self {
            Self::AllReduceLl
            | Self::AllReduceLl2
            | Self::AllReduceLl128
            | Self::AllReduceHb
            | Self::AllReduceRing
            | Self::AllReducePortRing
            | Self::AllReducePortAllPairs
            | Self::AllReduceNvrar
            | Self::AllReduce2ph => Collective::AllReduce,
            Self::AllGatherLl | Self::AllGatherLl128 | Self::AllGatherHb => Collective::AllGather,
            Self::ReduceScatterLl | Self::ReduceScatterLl128 | Self::ReduceScatterHb => Collective::ReduceScatter,
            Self::BroadcastLl | Self::BroadcastHb | Self::BroadcastChain | Self::BroadcastLl128 => {
                Collective::Broadcast
            }
            Self::ReduceLl | Self::ReduceHb | Self::ReduceChain | Self::ReduceLl128 => Collective::Reduce,
            Self::AllToAllLl | Self::AllToAllP2p => Collective::AllToAll,
            Self::SendRecvLl | Self::SendRecvP2p => Collective::SendRecv,
            Self::Plan(id) => id.collective(),
        }
    }

    /// Its protocol.
    pub fn protocol(self) -> Protocol {
        match self {
            Self::AllReduceLl
            | Self::AllReduceLl2
            | Self::AllReduceLl128
            | Self::AllGatherLl
            | Self::AllGatherLl128
            | Self::ReduceScatterLl
            | Self::ReduceScatterLl128
            | Self::BroadcastLl
            | Self::BroadcastLl128
            | Self::ReduceLl
            | Self::ReduceLl128 => Protocol::Ll,
            Self::AllToAllP2p | Self::SendRecvP2p => Protocol::P2p,
            Self::AllToAllLl | Self::SendRecvLl => Protocol::LlP2p,
            Self::Plan(_) => Protocol::Plan,
            Self::AllReducePortRing | Self::AllReducePortAllPairs | Self::AllReduceNvrar | Self::AllReduce2ph => {
                Protocol::Port
            }
            _ => Protocol::Hb,
        }
    }

    /// Whether it moves LL128 lines (`ll128`): 128 bytes per 120 of payload, into a slot of the
    /// packet buffer per sender, or (Broadcast, Reduce: the chain) into a whole half.
    pub fn is_ll128(self) -> bool {
        matches!(
            self,
            Self::AllReduceLl128
                | Self::AllGatherLl128
                | Self::ReduceScatterLl128
                | Self::BroadcastLl128
                | Self::ReduceLl128
        )
    }

    /// What a size rule's LL128 algorithm gives way to where lines are not known to arrive
    /// whole (some pair of ranks is not NVLink-connected): the algorithm the default rules chose
    /// in its sizes before LL128 (`ll2`, `ll`, the chain). Itself for any other algorithm.
    pub fn without_ll128(self) -> Self {
        match self {
            Self::AllReduceLl128 => Self::AllReduceLl2,
            Self::AllGatherLl128 => Self::AllGatherLl,
            Self::ReduceScatterLl128 => Self::ReduceScatterLl,
            Self::BroadcastLl128 => Self::BroadcastChain,
            Self::ReduceLl128 => Self::ReduceChain,
            other => other,
        }
    }

    /// Whether its kernel reduces (compiled per element type and operator, in
    /// `coll/reductions.cu`) or only moves bytes (`coll/movement.cu`).
    pub fn reduces(self) -> bool {
        matches!(self.collective(), Collective::AllReduce | Collective::ReduceScatter | Collective::Reduce)
    }

    /// Whether it handles `dtype`. The rings, the reduce chains and the reducing plans carry partial results
    /// between ranks in the element type, so in FP8 they would round to 8 bits at every step;
    /// FP8 reductions accumulate in higher precision, so they leave FP8 to the other algorithms.
    pub fn supports(self, dtype: weft_types::DataType) -> bool {
        use weft_types::DataType;
        let partials_in_type = matches!(
            self,
            Self::AllReduceRing
                | Self::AllReducePortRing
                | Self::AllReduceNvrar
                | Self::AllReduce2ph
                | Self::ReduceChain
                | Self::ReduceLl128
        ) || (self.protocol() == Protocol::Plan && self.reduces());
        !partials_in_type || !matches!(dtype, DataType::F8E4M3 | DataType::F8E5M2)
    }

    /// Whether it handles operator `op`: plans have no `avg` and no `premulsum` (see
    /// [`weft_exec::supports_op`]); every native algorithm has every operator.
    pub fn supports_op(self, op: weft_types::ReduceOp) -> bool {
        self.protocol() != Protocol::Plan || weft_exec::supports_op(op)
    }

    /// Whether it can run on `ranks` ranks: a plan's constraints; `port_ring` at any count a
    /// communicator has; every other native kernel at most [`weft_types::MAX_RANKS`] (per-rank
    /// arrays of that size: more ranks only span nodes, where only the AllReduces that cross
    /// nodes run).
    pub fn available(self, ranks: usize) -> bool {
        match self {
            Self::Plan(id) => id.plan(ranks, 0).is_ok(),
            Self::AllReducePortRing => true,
            Self::AllReduceNvrar | Self::AllReduce2ph => ranks <= weft_types::GIN_MAX_RANKS,
            _ => ranks <= weft_types::MAX_RANKS,
        }
    }

    /// The kernel's symbol.
    pub fn kernel(self) -> &'static str {
        match self {
            Self::AllReduceLl => "weft_allreduce_ll",
            Self::AllReduceLl2 => "weft_allreduce_ll2",
            Self::AllReduceLl128 => "weft_allreduce_ll128",
            Self::AllReduceHb => "weft_allreduce_hb",
            Self::AllReduceRing => "weft_allreduce_ring",
            Self::AllReducePortRing => "weft_allreduce_port_ring",
            Self::AllReducePortAllPairs => "weft_allreduce_port_allpairs",
            Self::AllReduceNvrar => "weft_allreduce_nvrar",
            Self::AllReduce2ph => "weft_allreduce_2ph",
            Self::AllGatherLl => "weft_allgather_ll",
            Self::AllGatherLl128 => "weft_allgather_ll128",
            Self::AllGatherHb => "weft_allgather_hb",
            Self::ReduceScatterLl => "weft_reduce_scatter_ll",
            Self::ReduceScatterLl128 => "weft_reduce_scatter_ll128",
            Self::ReduceScatterHb => "weft_reduce_scatter_hb",
            Self::BroadcastLl => "weft_broadcast_ll",
            Self::BroadcastHb => "weft_broadcast_hb",
            Self::BroadcastChain => "weft_broadcast_chain",
            Self::BroadcastLl128 => "weft_broadcast_ll128",
            Self::ReduceLl => "weft_reduce_ll",
            Self::ReduceHb => "weft_reduce_hb",
            Self::ReduceChain => "weft_reduce_chain",
            Self::ReduceLl128 => "weft_reduce_ll128",
            Self::AllToAllP2p | Self::SendRecvP2p => "weft_p2p",
            Self::AllToAllLl | Self::SendRecvLl => "weft_p2p_ll",
            Self::Plan(_) => "weft_execute",
        }
    }

    /// Whether it moves each rank's bytes straight to their receivers, per direction (all-to-all
    /// and send/receive; no plan), and settles with exactly the peers of each launch.
    pub fn is_direct(self) -> bool {
        matches!(self.protocol(), Protocol::P2p | Protocol::LlP2p)
    }

    /// Whether it may run on a communicator whose ranks span nodes: the PortChannel AllReduces,
    /// and plans (each checked against the nodes when it is set up, `Nodes::check`).
    pub fn may_cross_nodes(self) -> bool {
        matches!(
            self,
            Self::AllReducePortRing
                | Self::AllReducePortAllPairs
                | Self::AllReduceNvrar
                | Self::AllReduce2ph
                | Self::Plan(_)
        )
    }

    /// The algorithm of its collective that carries every direction through scratch (itself,
    /// for one that does): what carries the directions of an `ll` launch that do not fit the
    /// packet slots. `None` for a collective without direct transfers.
    pub fn through_scratch(self) -> Option<Algorithm> {
        match self.collective() {
            Collective::AllToAll => Some(Self::AllToAllP2p),
            Collective::SendRecv => Some(Self::SendRecvP2p),
            _ => None,
        }
    }

    /// The algorithm of `collective` called `name`.
    pub fn from_name(collective: Collective, name: &str) -> Option<Self> {
        collective.algorithms().find(|a| a.name() == name)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.collective(), self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique_per_collective() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_name(a.collective(), a.name()), Some(a));
        }
        for c in Collective::ALL {
            assert_eq!(Collective::from_name(c.name()), Some(c));
            assert!(c.algorithms().count() >= 1, "{c} has no algorithm");
        }
        for c in Collective::ALL {
            assert_eq!(c.override_var().name, format!("WEFT_ALGO_{}", c.name().to_ascii_uppercase()));
        }
    }

    #[test]
    fn the_port_ring_is_an_allreduce_named_port_ring_with_its_own_kernel_and_protocol() {
        let a = Algorithm::from_name(Collective::AllReduce, "port_ring").unwrap();
        assert_eq!(a, Algorithm::AllReducePortRing);
        assert_eq!(
            (a.protocol(), a.kernel(), a.to_string()),
            (Protocol::Port, "weft_allreduce_port_ring", "allreduce/port_ring".to_string())
        );
        assert!(a.reduces() && a.available(2) && a.supports_op(weft_types::ReduceOp::Avg));
        assert!(a.supports_op(weft_types::ReduceOp::PreMulSum));
        assert!(Collective::AllReduce.algorithms().any(|x| x == a));
        assert!(Algorithm::from_name(Collective::AllGather, "port_ring").is_none());
        let pairs = Algorithm::from_name(Collective::AllReduce, "port_allpairs").unwrap();
        assert_eq!((pairs.protocol(), pairs.kernel()), (Protocol::Port, "weft_allreduce_port_allpairs"));
        // It folds whole inputs at the receiver, in the accumulator type: FP8 is fine.
        assert!(pairs.supports(weft_types::DataType::F8E4M3) && pairs.supports_op(weft_types::ReduceOp::Avg));
    }

    #[test]
    fn shipped_plans_are_algorithms_named_plan_colon_name() {
        let ring = Algorithm::from_name(Collective::AllReduce, "plan:ring_allreduce").unwrap();
        assert_eq!(
            (ring.protocol(), ring.collective(), ring.name()),
            (Protocol::Plan, Collective::AllReduce, "plan:ring_allreduce")
        );
        assert!(Algorithm::from_name(Collective::AllGather, "plan:ring_allreduce").is_none());
        assert!(Algorithm::from_name(Collective::AllGather, "plan:ring_allgather").is_some());
        assert!(Algorithm::from_name(Collective::Broadcast, "plan:direct_broadcast").is_some());
        use weft_types::{DataType, ReduceOp};
        assert!(!ring.supports(DataType::F8E5M2) && ring.supports(DataType::Bf16));
        assert!(!ring.supports_op(ReduceOp::Avg) && ring.supports_op(ReduceOp::Min));
        assert!(!ring.supports_op(ReduceOp::PreMulSum));
        let gather = Algorithm::from_name(Collective::AllGather, "plan:ring_allgather").unwrap();
        assert!(gather.supports(DataType::F8E5M2) && !gather.reduces());
        assert!(ring.available(4) && ring.available(2));
        for c in Collective::ALL {
            let names: Vec<_> = c.algorithms().map(Algorithm::name).collect();
            let mut unique = names.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(names.len(), unique.len(), "{c}: {names:?}");
        }
    }

    #[test]
    fn every_type_has_an_algorithm_of_every_collective() {
        use weft_types::DataType;
        assert!(!Algorithm::AllReduceRing.supports(DataType::F8E4M3));
        assert!(Algorithm::AllReduceRing.supports(DataType::Bf16));
        for t in DataType::ALL {
            let fp8 = matches!(t, DataType::F8E4M3 | DataType::F8E5M2);
            assert_eq!(Algorithm::AllReducePortRing.supports(t), !fp8, "{}", t.name());
        }
        for c in Collective::ALL {
            for t in DataType::ALL {
                let fallback = c.fallback(t).unwrap_or_else(|| panic!("{c} has no fallback for {}", t.name()));
                assert!(fallback.supports(t) && fallback.collective() == c);
            }
        }
        assert_eq!(Collective::AllReduce.fallback(DataType::F8E4M3), Some(Algorithm::AllReduceHb));
        assert_eq!(Collective::AllToAll.fallback(DataType::Bf16), Some(Algorithm::AllToAllP2p));
        assert_eq!(Collective::SendRecv.fallback(DataType::U8), Some(Algorithm::SendRecvP2p));
    }

    #[test]
    fn all_to_all_and_send_recv_have_ll_and_p2p_both_direct_on_the_two_p2p_kernels() {
        for (c, ll, p2p) in [
            (Collective::AllToAll, Algorithm::AllToAllLl, Algorithm::AllToAllP2p),
            (Collective::SendRecv, Algorithm::SendRecvLl, Algorithm::SendRecvP2p),
        ] {
            assert_eq!(Algorithm::from_name(c, "ll"), Some(ll));
            assert_eq!(Algorithm::from_name(c, "p2p"), Some(p2p));
            assert_eq!(
                (ll.protocol(), ll.kernel(), ll.to_string()),
                (Protocol::LlP2p, "weft_p2p_ll", format!("{c}/ll"))
            );
            assert_eq!((p2p.protocol(), p2p.kernel()), (Protocol::P2p, "weft_p2p"));
            assert!(ll.is_direct() && p2p.is_direct() && !ll.reduces());
            assert_eq!((ll.through_scratch(), p2p.through_scratch()), (Some(p2p), Some(p2p)));
            assert!(weft_types::DataType::ALL.into_iter().all(|t| ll.supports(t)));
        }
        for a in Algorithm::ALL
            .into_iter()
            .filter(|a| !matches!(a.collective(), Collective::AllToAll | Collective::SendRecv))
        {
            assert!(!a.is_direct() && a.through_scratch().is_none(), "{a}");
        }
    }
}

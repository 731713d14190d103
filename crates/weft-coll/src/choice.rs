//! The algorithm of one call: the selector's pick, checked against what the call, its type and
//! operator, and the communicator allow. Pure: what it needs of the communicator is handed in.

use weft_types::{DataType, ReduceOp};

use crate::algorithm::{Algorithm, Collective, CollectiveAlgorithms, Protocol};
use crate::config::CollConfig;
use crate::error::CollError;
use crate::plans::PlanId;

/// What the choice depends on besides the call.
pub(crate) struct Chooser<'a> {
    /// The selector and the LL slot size.
    pub(crate) config: &'a CollConfig,
    pub(crate) rank: usize,
    pub(crate) ranks: usize,
    /// The first peer no kernel can map, and why (see `Resources::unreachable`).
    pub(crate) unreachable: Option<&'a (usize, String)>,
    /// (Virtual) nodes the ranks are in.
    pub(crate) nodes: usize,
    /// Whether every node has the same number of ranks.
    pub(crate) equal_nodes: bool,
    /// What the LL128 algorithms carry.
    pub(crate) ll128: Ll128Room,
}

/// The most bytes an LL128 algorithm carries per sender (lines of 128 bytes per 120): a
/// slot's for AllGather, ReduceScatter and AllReduce's shards; a half's per round for the
/// chain (Broadcast, Reduce), up to [`CHAIN_ROUNDS`] rounds; none where the packet buffers are
/// not 128-aligned. And whether every
/// pair of ranks that maps each other's memory is NVLink-connected (NVML, agreed by every
/// rank): only then do the size rules' LL128 algorithms run (a line may arrive in pieces over
/// PCIe); a forced `ll128` runs regardless.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ll128Room {
    pub(crate) slot: usize,
    pub(crate) half: usize,
    pub(crate) nvlink: bool,
}

/// The most rounds of a half an LL128 chain takes (each waits for the peers' tokens): 32 halves
/// at the default slot size are 63 MB at 2 ranks, past the sizes where lines beat the chain; a
/// much smaller `WEFT_LL_SLOT_BYTES` gives way to the chain instead of many tiny rounds.
const CHAIN_ROUNDS: usize = 32;

/// One call to choose for: `size` is the selector's key (see [`crate::Rule::max_bytes`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub(crate) collective: Collective,
    pub(crate) size: usize,
    pub(crate) dtype: DataType,
    pub(crate) op: ReduceOp,
}

impl Chooser<'_> {
    /// The algorithm for `call`. `ll_payload(a)` is the most one rank puts into one packet slot
    /// under LL algorithm `a` (the whole message for an LL128 chain): when it exceeds what `a`
    /// carries ([`Chooser::ll_capacity`]), a size-based choice falls back
    /// to the collective's native algorithm ([`Collective::fallback`]) and a forced one is an
    /// error. So does a choice that does not support the type or operator, or a plan with no
    /// version for this rank count (`plan_set_up(id)`: plan `id` is set up already, so it has
    /// one). A size rule's LL128 pick that cannot run here (peers not all NVLink, past what
    /// it carries, a type it lacks) first gives way to the algorithm of its sizes before it
    /// ([`Algorithm::without_ll128`]). With peers in other nodes the choice is
    /// [`crate::Selector::across_nodes`]'s.
    pub(crate) fn choose(
        &self,
        call: Call,
        ll_payload: impl Fn(Algorithm) -> usize,
        plan_set_up: impl Fn(PlanId) -> bool,
    ) -> Result<Algorithm, CollError> {
        if let Some(across) = self.across_nodes(call) {
            return across;
        }
        let selector = &self.config.selector;
        let forced = selector.forced(call.collective);
        let fits = |a: Algorithm| a.protocol() != Protocol::Ll || ll_payload(a) <= self.ll_capacity(a);
        let runs = |a: Algorithm| fits(a) && a.supports(call.dtype) && a.supports_op(call.op);
        let picked = selector.select(call.collective, call.dtype, call.size as u64, self.ranks);
        // A size rule's lines give way to the algorithm of their sizes before them where they
        // cannot run: between ranks not all NVLink peers, past what they carry (a smaller
        // WEFT_LL_SLOT_BYTES), for a type or operator they lack. A forced `ll128` does not.
        let algorithm = if picked.is_ll128() && !forced && !(self.ll128.nvlink && runs(picked)) {
            picked.without_ll128()
        } else {
            picked
        };
        let fits = fits(algorithm);
        let supported = algorithm.supports(call.dtype) && algorithm.supports_op(call.op);
        let available = match algorithm {
            Algorithm::Plan(id) => plan_set_up(id) || algorithm.available(self.ranks),
            _ => true,
        };
        if fits && supported && available {
            return Ok(algorithm);
        }
        if forced {
            return Err(self.invalid(if !available {
                format!("{algorithm} has no plan for {} ranks", self.ranks)
            } else if fits {
                format!("{algorithm} does not support {} with {}", call.dtype.name(), call.op.name())
            } else {
                format!(
                    "{algorithm} cannot carry {} bytes: it carries {} (WEFT_LL_SLOT_BYTES sizes its packet slots, now {})",
                    call.size,
                    self.ll_capacity(algorithm),
                    self.config.ll_slot_bytes
                )
            }));
        }
        Ok(call.collective.fallback(call.dtype).unwrap_or(algorithm))
    }

    /// The algorithm of a call only direct transfers can run (all-to-allv: no plan takes
    /// uneven blocks), where every peer is reachable: the selector's pick when it is a direct
    /// one (`ll`, `p2p`), else the collective's native one ([`Collective::fallback`], `p2p`).
    /// `call.size` must be the same on every rank: all-to-allv's blocks differ between ranks,
    /// so it asks at 0 bytes (the rule of the smallest calls), and `ll` chooses per direction.
    pub(crate) fn direct(&self, call: Call) -> Result<Algorithm, CollError> {
        if let Some(across) = self.across_nodes(call) {
            return across;
        }
        let picked = self.config.selector.select(call.collective, call.dtype, call.size as u64, self.ranks);
        if picked.is_direct() {
            return Ok(picked);
        }
        call.collective.fallback(call.dtype).filter(|a| a.is_direct()).ok_or_else(|| {
            self.invalid(format!("{} has no direct-transfer algorithm for {}", call.collective, call.dtype.name()))
        })
    }

    /// [`crate::Selector::across_nodes`]'s choice when some peer is in another node.
    pub(crate) fn across_nodes(&self, call: Call) -> Option<Result<Algorithm, CollError>> {
        let (peer, reason) = self.unreachable?;
        let chosen = self.config.selector.across_nodes(crate::config::AcrossNodes {
            collective: call.collective,
            bytes: call.size as u64,
            dtype: call.dtype,
            op: call.op,
            ranks: self.ranks,
            nodes: self.nodes,
            equal_nodes: self.equal_nodes,
        });
        Some(chosen.map_err(|detail| CollError::Unsupported {
            rank: self.rank,
            detail: format!("{detail}; rank {peer} is in another node: {reason}"),
        }))
    }

    /// The most bytes LL algorithm `a` carries per sender: a slot's payload (LL16:
    /// `ll_slot_bytes`), or for LL128 [`Chooser::ll128`]'s room.
    fn ll_capacity(&self, a: Algorithm) -> usize {
        match a {
            Algorithm::BroadcastLl128 | Algorithm::ReduceLl128 => self.ll128.half.saturating_mul(CHAIN_ROUNDS),
            a if a.is_ll128() => self.ll128.slot,
            _ => self.config.ll_slot_bytes,
        }
    }

    fn invalid(&self, detail: String) -> CollError {
        CollError::InvalidArgument { rank: self.rank, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TuningTable;

    fn call(collective: Collective, size: usize) -> Call {
        Call { collective, size, dtype: DataType::Bf16, op: ReduceOp::Sum }
    }

    fn chooser(config: &CollConfig, ranks: usize) -> Chooser<'_> {
        Chooser { config, rank: 0, ranks, unreachable: None, nodes: 1, equal_nodes: true, ll128: Ll128Room::default() }
    }

    fn table(json: &str) -> CollConfig {
        let mut config = CollConfig::default();
        config.selector.apply(&serde_json::from_str::<TuningTable>(json).unwrap()).unwrap();
        config
    }

    const TWO_STEP: &str = "plan:two_step_alltoall";

    /// A rank count the two-step all-to-all plan has no version for, and one it has.
    fn two_step_ranks() -> (usize, usize) {
        let plan = Algorithm::from_name(Collective::AllToAll, TWO_STEP).unwrap();
        let without = (1..=8).find(|&n| !plan.available(n)).expect("a rank count without the plan");
        let with = (1..=8).find(|&n| plan.available(n)).expect("a rank count with the plan");
        (without, with)
    }

    /// Plans carry partial results in the element type: an average or PreMulSum picked onto
    /// one runs on the collective's native algorithm instead, never with a wrong result.
    #[test]
    fn averages_and_premulsum_never_run_on_a_plan() {
        let config = table(r#"{"collectives": {"allreduce": [{"algorithm": "plan:ring_allreduce"}]}}"#);
        let c = chooser(&config, 2);
        let plan = c.choose(call(Collective::AllReduce, 4096), |_| 0, |_| true).unwrap();
        assert_eq!(plan.name(), "plan:ring_allreduce");
        for op in [ReduceOp::Avg, ReduceOp::PreMulSum] {
            let got = c.choose(Call { op, ..call(Collective::AllReduce, 4096) }, |_| 0, |_| true).unwrap();
            assert_ne!(got.protocol(), Protocol::Plan, "{}", op.name());
            assert!(got.supports_op(op));
        }
    }

    #[test]
    fn an_unavailable_plan_falls_back_to_the_native_algorithm_of_its_collective() {
        let config = table(&format!(r#"{{"collectives": {{"alltoall": [{{"algorithm": "{TWO_STEP}"}}]}}}}"#));
        let (without, with) = two_step_ranks();
        let none = |_| false;
        let c = chooser(&config, without);
        assert_eq!(c.choose(call(Collective::AllToAll, 4096), |_| 0, none).unwrap(), Algorithm::AllToAllP2p);
        // Set up already (by a call of another root or size), the plan runs.
        let plan = c.choose(call(Collective::AllToAll, 4096), |_| 0, |_| true).unwrap();
        assert_eq!(plan.name(), TWO_STEP);
        let c = chooser(&config, with);
        assert_eq!(c.choose(call(Collective::AllToAll, 4096), |_| 0, none).unwrap().name(), TWO_STEP);
    }

    #[test]
    fn a_forced_plan_without_a_version_is_an_error_and_all_to_allv_stays_native() {
        let (without, with) = two_step_ranks();
        let mut config = CollConfig::default();
        config.selector.force(Algorithm::from_name(Collective::AllToAll, TWO_STEP).unwrap());
        let err = chooser(&config, without).choose(call(Collective::AllToAll, 64), |_| 0, |_| false).unwrap_err();
        assert!(err.to_string().contains("has no plan for"), "{err}");
        for ranks in [without, with] {
            assert_eq!(chooser(&config, ranks).direct(call(Collective::AllToAll, 0)).unwrap(), Algorithm::AllToAllP2p);
        }
    }

    /// All-to-all takes `ll` up to 256 KiB and `p2p` above, send/receive `ll` (it asks at 0
    /// bytes), unless one is forced or picked; nothing a rank sees of its own call's sizes
    /// enters the choice of all-to-allv and send/receive (they ask at 0 bytes: the kernels split
    /// per direction, see `transfers.rs`), and a size never makes `ll` fail.
    #[test]
    fn direct_transfers_default_to_ll_when_small_and_follow_a_forced_or_picked_algorithm() {
        let default = CollConfig::default();
        for ranks in [1, 2, 8] {
            let c = chooser(&default, ranks);
            for size in [0, 1, 64 << 10, 256 << 10, (256 << 10) + 1, 1 << 30] {
                let alltoall = if size <= 256 << 10 { Algorithm::AllToAllLl } else { Algorithm::AllToAllP2p };
                assert_eq!(c.choose(call(Collective::AllToAll, size), |_| usize::MAX, |_| false).unwrap(), alltoall);
            }
            assert_eq!(c.direct(call(Collective::SendRecv, 0)).unwrap(), Algorithm::SendRecvLl);
            assert_eq!(c.direct(call(Collective::AllToAll, 0)).unwrap(), Algorithm::AllToAllLl);
        }
        for (collective, p2p, ll) in [
            (Collective::AllToAll, Algorithm::AllToAllP2p, Algorithm::AllToAllLl),
            (Collective::SendRecv, Algorithm::SendRecvP2p, Algorithm::SendRecvLl),
        ] {
            let mut forced = CollConfig::default();
            forced.selector.force(ll);
            let c = chooser(&forced, 4);
            assert_eq!(c.choose(call(collective, 8), |_| 0, |_| false).unwrap(), ll);
            assert_eq!(c.direct(call(collective, 0)).unwrap(), ll);
            assert_eq!(c.choose(call(collective, 1 << 30), |_| usize::MAX, |_| false).unwrap(), ll);
            forced.selector.force(p2p);
            let c = chooser(&forced, 4);
            assert_eq!(c.choose(call(collective, 8), |_| 0, |_| false).unwrap(), p2p);
        }
        let tuned =
            table(r#"{"collectives": {"alltoall": [{"max_bytes": 4096, "algorithm": "ll"}, {"algorithm": "p2p"}]}}"#);
        let c = chooser(&tuned, 2);
        assert_eq!(c.choose(call(Collective::AllToAll, 4096), |_| 0, |_| false).unwrap(), Algorithm::AllToAllLl);
        assert_eq!(c.choose(call(Collective::AllToAll, 4097), |_| 0, |_| false).unwrap(), Algorithm::AllToAllP2p);
        // All-to-allv asks at 0 bytes on every rank, whatever its blocks: the same answer.
        assert_eq!(c.direct(call(Collective::AllToAll, 0)).unwrap(), Algorithm::AllToAllLl);
    }

    #[test]
    fn ll128_carries_a_slot_per_sender_rounds_of_a_half_down_the_chain_and_nothing_unaligned() {
        let room = Ll128Room { slot: 1200, half: 4800, nvlink: false };
        for (collective, a, most) in [
            (Collective::AllGather, Algorithm::AllGatherLl128, room.slot),
            (Collective::AllReduce, Algorithm::AllReduceLl128, room.slot),
            // The chain goes in rounds of a half: a message of many halves still runs.
            (Collective::Broadcast, Algorithm::BroadcastLl128, CHAIN_ROUNDS * room.half),
            (Collective::Reduce, Algorithm::ReduceLl128, CHAIN_ROUNDS * room.half),
        ] {
            let mut forced = CollConfig::default();
            forced.selector.force(a);
            let c = Chooser { ll128: room, ..chooser(&forced, 2) };
            assert_eq!(c.choose(call(collective, 8), |_| most, |_| false).unwrap(), a);
            let err = c.choose(call(collective, 8), |_| most + 1, |_| false).unwrap_err().to_string();
            assert!(err.contains(&format!("it carries {most}")), "{err}");
            // Packet buffers not 128-aligned: no room at all.
            let unaligned = Chooser { ll128: Ll128Room::default(), ..chooser(&forced, 2) };
            assert!(unaligned.choose(call(collective, 8), |_| 1, |_| false).is_err());
        }
    }

    #[test]
    fn the_default_chain_rules_fit_the_rounds_of_the_default_packet_buffers() {
        // At 2 ranks a half is 2 x ranks slots of lines, 120 payload bytes in every 128.
        let config = CollConfig::default();
        let half = 2 * 2 * config.ll_slot_bytes / 128 * 120;
        let room = Ll128Room { slot: config.ll_slot_bytes / 128 * 120, half, nvlink: true };
        let c = Chooser { ll128: room, ..chooser(&config, 2) };
        for (collective, lines) in
            [(Collective::Broadcast, Algorithm::BroadcastLl128), (Collective::Reduce, Algorithm::ReduceLl128)]
        {
            let largest = (1..=64usize)
                .map(|m| m << 20)
                .filter(|&b| c.config.selector.select(collective, DataType::Bf16, b as u64, 2) == lines)
                .max()
                .unwrap();
            assert_eq!(c.choose(call(collective, largest), |_| largest, |_| false).unwrap(), lines, "{collective}");
        }
    }

    #[test]
    fn the_size_rules_lines_run_only_between_nvlink_peers_a_forced_ll128_everywhere() {
        let config = CollConfig::default();
        let room = Ll128Room { slot: 1 << 20, half: 4 << 20, nvlink: true };
        let nvlink = Chooser { ll128: room, ..chooser(&config, 2) };
        let pcie = Chooser { ll128: Ll128Room { nvlink: false, ..room }, ..chooser(&config, 2) };
        for (collective, bytes, lines, before) in [
            (Collective::AllReduce, 1 << 20, Algorithm::AllReduceLl128, Algorithm::AllReduceLl2),
            (Collective::AllGather, 512 << 10, Algorithm::AllGatherLl128, Algorithm::AllGatherLl),
            (Collective::ReduceScatter, 512 << 10, Algorithm::ReduceScatterLl128, Algorithm::ReduceScatterLl),
            (Collective::Broadcast, 1 << 20, Algorithm::BroadcastLl128, Algorithm::BroadcastChain),
            (Collective::Reduce, 2 << 20, Algorithm::ReduceLl128, Algorithm::ReduceChain),
        ] {
            let c = call(collective, bytes);
            assert_eq!(nvlink.choose(c, |_| 1, |_| false).unwrap(), lines, "{collective}");
            assert_eq!(pcie.choose(c, |_| 1, |_| false).unwrap(), before, "{collective}");
            let mut forced = CollConfig::default();
            forced.selector.force(lines);
            let forced_pcie = Chooser { ll128: Ll128Room { nvlink: false, ..room }, ..chooser(&forced, 2) };
            assert_eq!(forced_pcie.choose(c, |_| 1, |_| false).unwrap(), lines, "forced {collective}");
        }
    }

    #[test]
    fn lines_that_do_not_fit_give_way_to_the_algorithm_of_their_sizes_before() {
        let config = CollConfig::default();
        let room = Ll128Room { slot: 1 << 20, half: 1 << 20, nvlink: true };
        let c = Chooser { ll128: room, ..chooser(&config, 2) };
        // A 2 MiB Broadcast past a half of 1 MiB: still lines, in rounds of a half.
        let broadcast = call(Collective::Broadcast, 2 << 20);
        assert_eq!(c.choose(broadcast, |_| 2 << 20, |_| false).unwrap(), Algorithm::BroadcastLl128);
        // Packet buffers not 128-aligned: the chain (which carries any size), not HB.
        let unaligned = Chooser { ll128: Ll128Room { slot: 0, half: 0, nvlink: true }, ..chooser(&config, 2) };
        assert_eq!(unaligned.choose(broadcast, |_| 2 << 20, |_| false).unwrap(), Algorithm::BroadcastChain);
        // A 1 MiB AllReduce whose shard fits neither a slot of lines nor an LL16 slot: HB.
        let allreduce = call(Collective::AllReduce, 1 << 20);
        let payload = |a: Algorithm| if a.is_ll128() { 2 << 20 } else { config.ll_slot_bytes + 1 };
        assert_eq!(c.choose(allreduce, payload, |_| false).unwrap(), Algorithm::AllReduceHb);
    }

    #[test]
    fn ll_falls_back_to_hb_beyond_its_slot_unless_forced() {
        let config = CollConfig::default();
        let c = chooser(&config, 4);
        let slot = config.ll_slot_bytes;
        let small = call(Collective::AllGather, 1024);
        assert_eq!(c.choose(small, |_| slot, |_| false).unwrap(), Algorithm::AllGatherLl);
        assert_eq!(c.choose(small, |_| slot + 1, |_| false).unwrap(), Algorithm::AllGatherHb);
        let mut forced = CollConfig::default();
        forced.selector.force(Algorithm::AllGatherLl);
        let err = chooser(&forced, 4).choose(small, |_| slot + 1, |_| false).unwrap_err();
        assert!(err.to_string().contains("cannot carry"), "{err}");
    }

    #[test]
    fn unsupported_types_fall_back_and_the_selector_sees_type_and_ranks() {
        let config = table(r#"{"collectives": {"allreduce": [{"ranks": 2, "algorithm": "ring"}]}}"#);
        let fp8 = Call { dtype: DataType::F8E4M3, ..call(Collective::AllReduce, 1 << 30) };
        assert_eq!(chooser(&config, 2).choose(fp8, |_| 0, |_| false).unwrap(), Algorithm::AllReduceHb);
        assert_eq!(
            chooser(&config, 2).choose(call(Collective::AllReduce, 8), |_| 0, |_| false).unwrap(),
            Algorithm::AllReduceRing
        );
        assert_eq!(
            chooser(&config, 4).choose(call(Collective::AllReduce, 8), |_| 0, |_| false).unwrap(),
            Algorithm::AllReduceLl
        );
        // A large FP8 Reduce would take the chain, whose partials travel in the element type.
        let reduce = Call { dtype: DataType::F8E5M2, ..call(Collective::Reduce, 1 << 20) };
        let default = CollConfig::default();
        assert_eq!(chooser(&default, 4).choose(reduce, |_| 0, |_| false).unwrap(), Algorithm::ReduceHb);
        let bf16 = Call { dtype: DataType::Bf16, ..reduce };
        assert_eq!(chooser(&default, 4).choose(bf16, |_| 0, |_| false).unwrap(), Algorithm::ReduceChain);
        let mut forced = CollConfig::default();
        forced.selector.force(Algorithm::AllReduceRing);
        let err = chooser(&forced, 2).choose(fp8, |_| 0, |_| false).unwrap_err();
        assert!(err.to_string().contains("does not support f8e4m3"), "{err}");
    }

    #[test]
    fn peers_in_other_nodes_leave_only_the_allreduces_that_cross_nodes() {
        let config = CollConfig::default();
        let far = (1, "another host".to_string());
        let c = Chooser { unreachable: Some(&far), ..chooser(&config, 2) };
        let small = c.choose(call(Collective::AllReduce, 8), |_| 0, |_| false).unwrap();
        assert_eq!(small, Algorithm::AllReduceNvrar);
        // Nodes of different sizes: no NVRAR.
        let ragged = Chooser { equal_nodes: false, ..c };
        let pairs = ragged.choose(call(Collective::AllReduce, 8), |_| 0, |_| false).unwrap();
        assert_eq!(pairs, Algorithm::AllReducePortAllPairs);
        for err in [
            c.choose(call(Collective::AllToAll, 8), |_| 0, |_| false).unwrap_err(),
            c.direct(call(Collective::AllToAll, 8)).unwrap_err(),
        ] {
            assert!(matches!(err, CollError::Unsupported { .. }), "{err}");
            assert!(err.to_string().contains("rank 1 is in another node: another host"), "{err}");
        }
    }
}

//! The state of the AllReduces across nodes on the GIN device API, `nvrar` (kernel
//! `weft_allreduce_nvrar` in `device/kernels/coll/nvrar.cu`) and `2ph` (`weft_allreduce_2ph`
//! in `two_phase.cu`): a device communicator (weft-gin) whose one window holds the kernel's
//! slots, and the blocks' round counts. Set up on the first call that uses it; the
//! communicator's nodes must all have the same number of ranks.

use weft_core::{Communicator, Topology};
use weft_gin::{DevComm, GinError, Requirements};
use weft_gpu::{AllocKind, CaptureModeRelaxed, DeviceMemory, DevicePtr};
use weft_net::PortProxy;
use weft_types::CollContext;

use crate::algorithm::Algorithm;
use crate::error::CollError;
use crate::params::GinAllReduceParams;

/// Most input bytes of one round of `nvrar`: a larger call goes in several rounds.
pub(crate) const ROUND_BYTES: u64 = 4 << 20;
/// Most input bytes of one round of `2ph`, which is for large messages.
pub(crate) const TWO_PHASE_ROUND_BYTES: u64 = 8 << 20;

/// The round of `algorithm` (`nvrar`, `2ph`) where HB rounds move `chunk_bytes`: its own, or
/// the HB round where that is smaller (a communicator configured for little scratch; the
/// self-test's, whose counts then span several rounds), at least 4 KiB and a multiple of 16
/// bytes (the kernels' rounds start on 16-byte boundaries, `CallRounds`).
pub(crate) fn round_bytes(algorithm: Algorithm, chunk_bytes: u64) -> u64 {
    let own = if algorithm == Algorithm::AllReduce2ph { TWO_PHASE_ROUND_BYTES } else { ROUND_BYTES };
    own.min(chunk_bytes).max(1 << 12) & !15
}

/// Bytes an LL packet takes per byte of payload (8 of data and 8 of flag per 16).
const LL_FACTOR: u64 = 2;

/// Where the kernel's slots lie in its window (the kernel's `NvrarPlace` computes the same):
/// per parity, `2G + 2s + 1` slots of one shard's packets (`rs[G]`, `ag[G]`, `recv[s]`,
/// `send[s]`, `done`), s the steps of recursive doubling among the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NvrarLayout {
    /// Ranks per node.
    pub(crate) gpus_per_node: usize,
    /// Nodes.
    pub(crate) nodes: usize,
    /// Steps across nodes: log2 N, or ⌊log2 N⌋ + 2 with the fix-up.
    pub(crate) steps: usize,
    /// Bytes of one slot: a round's shard (a multiple of 8 bytes) as LL packets.
    pub(crate) slot_bytes: u64,
}

impl NvrarLayout {
    /// The layout for `nodes` nodes of `gpus_per_node` ranks and rounds of `round_bytes`.
    pub(crate) fn new(gpus_per_node: usize, nodes: usize, round_bytes: u64) -> Self {
        let shard = weft_model::rounds::shard_bytes(round_bytes, gpus_per_node, 8);
        let steps = weft_model::closed_form::recursive_doubling_steps(nodes);
        Self { gpus_per_node, nodes, steps, slot_bytes: LL_FACTOR * shard }
    }

    /// Slots of one parity.
    pub(crate) fn slots(&self) -> u64 {
        (2 * self.gpus_per_node + 2 * self.steps + 1) as u64
    }

    /// Bytes of the window: two parities.
    pub(crate) fn window_bytes(&self) -> u64 {
        2 * self.slots() * self.slot_bytes
    }
}

/// Groups of blocks the kernel deals a step's puts to (its `kNvrarMaxPuts`, which weft-model's
/// tests check against the kernel).
const PUT_GROUPS: usize = weft_model::rounds::NVRAR_MAX_PUTS;
/// Most steps across nodes the kernel counts arrivals for (its `kNvrarMaxSteps`).
const MAX_STEPS: usize = 8;

/// Words of `nvrar`'s launch state of `blocks` blocks: each block's round count, then an
/// arrival counter per (group, parity, step).
fn state_words(blocks: u32) -> usize {
    blocks as usize + PUT_GROUPS * 2 * MAX_STEPS
}

/// Groups of blocks `2ph` deals a round's puts to, each with its signal (the kernel's
/// `kTwoPhaseMaxPuts`, which weft-model's tests check against the kernel).
const TWO_PHASE_GROUPS: usize = weft_model::rounds::TWO_PHASE_MAX_PUTS;

/// Where `2ph`'s slots lie in its window (the kernel's `TwoPhasePlace` computes the same): per
/// parity, `2G + N` slots of a round's shard padded to 16 bytes (`rs[G]`, `recv[N]`, `ag[G]`),
/// then two flags per (member, block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TwoPhaseLayout {
    /// Ranks per node.
    pub(crate) gpus_per_node: usize,
    /// Nodes.
    pub(crate) nodes: usize,
    /// Blocks of a launch.
    pub(crate) blocks: u32,
    /// Bytes of one slot: a round's shard.
    pub(crate) slot_bytes: u64,
}

impl TwoPhaseLayout {
    /// The layout for `nodes` nodes of `gpus_per_node` ranks, launches of `blocks` blocks and
    /// rounds of `round_bytes`.
    pub(crate) fn new(gpus_per_node: usize, nodes: usize, blocks: u32, round_bytes: u64) -> Self {
        let slot_bytes = weft_model::rounds::shard_bytes(round_bytes, gpus_per_node, 16);
        Self { gpus_per_node, nodes, blocks, slot_bytes }
    }

    /// Bytes of the window: two parities of slots, then the flags.
    pub(crate) fn window_bytes(&self) -> u64 {
        let (g, n) = (self.gpus_per_node as u64, self.nodes as u64);
        2 * (2 * g + n) * self.slot_bytes + 2 * g * u64::from(self.blocks) * 8
    }

    /// Words of the launch state: per block, its rounds and every group's (the kernel's
    /// `kTwoPhaseStateWords`); then an arrival counter per (group, parity).
    fn state_words(&self) -> usize {
        self.blocks as usize * (1 + TWO_PHASE_GROUPS) + TWO_PHASE_GROUPS * 2
    }
}

/// The ranks of every node of `topology` when all nodes have the same number, else `None`.
pub(crate) fn equal_node_size(topology: &Topology) -> Option<usize> {
    let mut sizes = vec![0usize; topology.node_count()];
    for rank in 0..topology.world_size() {
        sizes[topology.node(rank)?] += 1;
    }
    let first = *sizes.first()?;
    sizes.iter().all(|&n| n == first).then_some(first)
}

/// The device communicator, round size and launch state of `nvrar` or `2ph`.
pub(crate) struct GinAllReduce {
    round_bytes: u64,
    slot_bytes: u64,
    state: DeviceMemory,
    // Dropped after the state: the kernels' handle points into it.
    dev: DevComm,
}

impl GinAllReduce {
    /// Sets up `algorithm` (`nvrar` or `2ph`) for launches of `blocks` blocks and rounds of
    /// `round_bytes`, its proxy peers served by `proxy`. Collective: every rank calls it at the
    /// same collective call.
    pub(crate) fn new(
        comm: &Communicator,
        algorithm: Algorithm,
        proxy: PortProxy,
        blocks: u32,
        round_bytes: u64,
    ) -> Result<Self, CollError> {
        let rank = comm.rank();
        let unsupported = |detail: String| CollError::Unsupported { rank, detail };
        let topology = comm.topology();
        let gpus_per_node = equal_node_size(topology)
            .ok_or_else(|| unsupported(format!("{algorithm} needs nodes with the same number of ranks")))?;
        let nodes = topology.node_count();
        let (slot_bytes, window, signals, words) = match algorithm {
            Algorithm::AllReduceNvrar => {
                let layout = NvrarLayout::new(gpus_per_node, nodes, round_bytes);
                (layout.slot_bytes, layout.window_bytes(), 0, state_words(blocks))
            }
            Algorithm::AllReduce2ph => {
                let layout = TwoPhaseLayout::new(gpus_per_node, nodes, blocks, round_bytes);
                (layout.slot_bytes, layout.window_bytes(), TWO_PHASE_GROUPS as u32, layout.state_words())
            }
            other => return Err(unsupported(format!("{other} is no AllReduce on a device communicator"))),
        };
        let requirements = Requirements { windows: vec![window], signals, ..Requirements::default() };
        // A call captured into a graph may get here first (see PortSetup).
        let _relaxed = CaptureModeRelaxed::new().map_err(|source| CollError::Gpu { rank, source })?;
        let dev = DevComm::with_proxy(comm, &requirements, Some(proxy)).map_err(|e| match e {
            GinError::Comm(core) => CollError::Core(core),
            GinError::Gpu { source, .. } => CollError::Gpu { rank, source },
            other => unsupported(format!("{algorithm}: {other}")),
        })?;
        let state = DeviceMemory::alloc(comm.device(), 8 * words, AllocKind::Legacy)
            .and_then(|m| m.write_pod(0, &vec![0u64; words]).map(|()| m))
            .map_err(|source| CollError::Gpu { rank, source })?;
        Ok(Self { round_bytes, slot_bytes, state, dev })
    }

    /// The kernel's parameters for a call on `bytes` of `input` into `output` with context `c`.
    pub(crate) fn params(&self, c: CollContext, input: DevicePtr, output: DevicePtr, bytes: u64) -> GinAllReduceParams {
        GinAllReduceParams {
            c,
            input,
            output,
            bytes,
            gin: self.dev.handle(),
            round_bytes: self.round_bytes,
            slot_bytes: self.slot_bytes,
            state: self.state.ptr(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_holds_two_parities_of_every_slot_of_a_round() {
        let two = NvrarLayout::new(1, 2, ROUND_BYTES);
        assert_eq!((two.steps, two.slot_bytes), (1, 8 << 20));
        assert_eq!(two.window_bytes(), 2 * 5 * (8 << 20));
        // Three nodes: the fold and the hand-back around one exchange.
        let three = NvrarLayout::new(4, 3, ROUND_BYTES);
        assert_eq!((three.steps, three.slot_bytes), (3, 2 << 20));
        assert_eq!(three.slots(), 8 + 6 + 1);
        // Shards are whole 8-byte packets, whatever the rank count.
        let odd = NvrarLayout::new(3, 4, ROUND_BYTES);
        assert_eq!(odd.slot_bytes % 16, 0);
        assert!(odd.slot_bytes / 2 * 3 >= ROUND_BYTES);
        // The largest communicator stays far below the 4 GiB of a proxy offset.
        assert!(NvrarLayout::new(8, 4, ROUND_BYTES).window_bytes() < 1 << 32);
        assert!(NvrarLayout::new(1, 32, ROUND_BYTES).window_bytes() < 1 << 32);
        assert_eq!(state_words(33), 33 + 64);
        // Steps of the largest communicator (32 nodes of one rank) have their counters.
        assert!(NvrarLayout::new(1, weft_types::GIN_MAX_RANKS, ROUND_BYTES).steps < MAX_STEPS);
    }

    #[test]
    fn the_two_phase_window_holds_two_parities_and_the_flags() {
        let two = TwoPhaseLayout::new(1, 2, 33, TWO_PHASE_ROUND_BYTES);
        assert_eq!(two.slot_bytes, 8 << 20);
        assert_eq!(two.window_bytes(), 2 * 4 * (8 << 20) + 2 * 33 * 8);
        assert_eq!(two.state_words(), 33 * 5 + 8);
        // Shards are whole 16-byte vectors, whatever the rank count.
        let odd = TwoPhaseLayout::new(3, 4, 9, TWO_PHASE_ROUND_BYTES);
        assert_eq!(odd.slot_bytes % 16, 0);
        assert!(odd.slot_bytes * 3 >= TWO_PHASE_ROUND_BYTES);
        assert_eq!(odd.window_bytes(), 2 * (6 + 4) * odd.slot_bytes + 2 * 3 * 9 * 8);
        // The largest communicators stay far below the 4 GiB of a proxy offset.
        assert!(TwoPhaseLayout::new(8, 4, 33, TWO_PHASE_ROUND_BYTES).window_bytes() < 1 << 32);
        assert!(TwoPhaseLayout::new(1, weft_types::GIN_MAX_RANKS, 33, TWO_PHASE_ROUND_BYTES).window_bytes() < 1 << 32);
    }

    #[test]
    fn rounds_are_the_algorithms_own_or_the_hb_round_where_smaller() {
        assert_eq!(round_bytes(Algorithm::AllReduceNvrar, 32 << 20), ROUND_BYTES);
        assert_eq!(round_bytes(Algorithm::AllReduce2ph, 32 << 20), TWO_PHASE_ROUND_BYTES);
        assert_eq!(round_bytes(Algorithm::AllReduce2ph, 64 << 10), 64 << 10);
        assert_eq!(round_bytes(Algorithm::AllReduceNvrar, 1), 4096);
        assert_eq!(round_bytes(Algorithm::AllReduce2ph, 100_007), 100_000);
    }
}

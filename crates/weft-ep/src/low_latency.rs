//! The raw layer of the low-latency mode: DeepEP V1's `low_latency_dispatch` and
//! `low_latency_combine` over device addresses, shapes and a stream. Each call is a send kernel
//! and a receive kernel; with `return_recv_hook` only the send is launched ([`LlKernels::Send`])
//! and the same call with [`LlKernels::Recv`] is the hook.
//! Nothing here synchronises with the host or allocates, so calls can be captured in CUDA
//! graphs (the buffer halves and signal tags advance on the device).

use std::sync::atomic::{AtomicUsize, Ordering};

use weft_gpu::{DevicePtr, Stream};
use weft_types::{EpLlCombineArgs, EpLlDispatchArgs};

use crate::buffer::{Buffer, Config};
use crate::error::EpError;
use crate::launch::LlPhase;
use crate::raw::{MAX_TOPK, RoutingShape};
use crate::region::{LL_MAX_EXPERTS, LlPath, LlRegions};

/// The sizes of a low-latency call, the same on every rank but `tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlShape {
    /// This rank's tokens, top-k and the group's experts.
    pub routing: RoutingShape,
    /// Channels per token (a multiple of 128; of 512 with FP8, as DeepEP requires).
    pub hidden: usize,
    /// `num_max_dispatch_tokens_per_rank`: at least every rank's tokens.
    pub max_tokens: usize,
}

/// `low_latency_dispatch`'s tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlDispatchTensors {
    /// `bf16[tokens][hidden]`.
    pub x: DevicePtr,
    /// `int64[tokens][topk]`.
    pub topk_idx: DevicePtr,
    /// Out: `[local experts][ranks * max_tokens][hidden]`, E4M3 with `use_fp8`, else BF16.
    pub recv_x: DevicePtr,
    /// Out with `use_fp8`: `float[local experts][hidden / 128][ranks * max_tokens]` (DeepEP's
    /// column-major scales).
    pub recv_x_scales: Option<DevicePtr>,
    /// Out: `int32[local experts]`.
    pub recv_count: DevicePtr,
    /// Out (handle): `int32[local experts][ranks * max_tokens]` source token of each row.
    pub recv_src_info: DevicePtr,
    /// Out (handle): `int64[local experts][ranks]`, `first row << 32 | rows`.
    pub recv_layout_range: DevicePtr,
    /// In/out: `int32[local experts]` rows received so far.
    pub cumulative_local_expert_recv_stats: Option<DevicePtr>,
}

/// `low_latency_combine`'s tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlCombineTensors {
    /// `bf16[local experts][ranks * max_tokens][hidden]` in the dispatch's packed order.
    pub x: DevicePtr,
    /// `int64[tokens][topk]` (the dispatch's).
    pub topk_idx: DevicePtr,
    /// `float[tokens][topk]`.
    pub topk_weights: DevicePtr,
    /// Handle: the dispatch's `recv_src_info`.
    pub src_info: DevicePtr,
    /// Handle: the dispatch's `recv_layout_range`.
    pub layout_range: DevicePtr,
    /// Out: `bf16[tokens][hidden]`.
    pub combined_x: DevicePtr,
}

/// The expert count of a buffer's low-latency calls between nodes, fixed by the first call:
/// a peer of another node puts the next call's messages into the other half of the regions
/// while this rank may still read this call's, and the halves are laid out from the expert
/// count (a call with fewer experts has its second half where the first one's first half
/// still is). (The signal totals the receive kernels wait for, `(sequence + 1) * 2` for the
/// dispatch and `sequence + 1` for the combine, no longer depend on it. On one node the count
/// words carry their sequence, so calls may differ.)
#[derive(Debug, Default)]
pub(crate) struct PinnedExperts(AtomicUsize);

impl PinnedExperts {
    /// Fixes the count at `experts` on first use; `Err(first)` when an earlier call fixed
    /// another. Every rank makes the same calls, so every rank gets the same answer.
    pub(crate) fn pin(&self, experts: usize) -> Result<(), usize> {
        match self.0.compare_exchange(0, experts, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => Ok(()),
            Err(first) if first == experts => Ok(()),
            Err(first) => Err(first),
        }
    }
}

impl Buffer {
    /// How this buffer's low-latency calls reach their peers.
    fn ll_path(&self) -> LlPath {
        if self.spans_nodes() { LlPath::Net } else { LlPath::Node }
    }

    fn ll_regions(&self, shape: &LlShape) -> Result<LlRegions, EpError> {
        let rank = self.rank();
        let invalid = |argument, detail: String| EpError::InvalidArgument { rank, argument, detail };
        let RoutingShape { tokens, topk, num_experts } = shape.routing;
        if num_experts == 0 || !num_experts.is_multiple_of(self.num_ranks()) || num_experts > LL_MAX_EXPERTS {
            return Err(invalid(
                "num_experts",
                format!("{num_experts} (a multiple of the ranks, at most {LL_MAX_EXPERTS})"),
            ));
        }
        if topk == 0 || topk > MAX_TOPK {
            return Err(invalid("topk_idx", format!("{topk} experts per token (1 to {MAX_TOPK})")));
        }
        if tokens > shape.max_tokens || shape.max_tokens > i32::MAX as usize / self.num_ranks() {
            return Err(invalid(
                "num_max_dispatch_tokens_per_rank",
                format!("{} for {tokens} tokens", shape.max_tokens),
            ));
        }
        if shape.hidden == 0 || !shape.hidden.is_multiple_of(128) {
            return Err(invalid("x", format!("hidden {} (a multiple of 128)", shape.hidden)));
        }
        let regions =
            LlRegions::new(self.layout.ll_offset, shape.max_tokens, shape.hidden, num_experts, self.ll_path());
        if regions.bytes > self.layout.ll_bytes {
            let hint =
                if self.spans_nodes() { " (a group spanning nodes needs low_latency_net_bytes_hint)" } else { "" };
            let detail =
                format!("{} bytes for this call; the buffer has {}{hint}", regions.bytes, self.layout.ll_bytes);
            return Err(invalid("num_rdma_bytes", detail));
        }
        if self.spans_nodes()
            && let Err(first) = self.ll_experts.pin(num_experts)
        {
            let detail = format!(
                "{num_experts}; this buffer spans nodes and its first low-latency call had {first}: peers of other nodes write a call's half of the regions while the call before may still be read, and the halves are laid out for one expert count"
            );
            return Err(invalid("num_experts", detail));
        }
        Ok(regions)
    }

    /// `low_latency_dispatch`: sends every (token, expert) pair to the expert's rank (cast to
    /// FP8 with `use_fp8`, power-of-two scales with `round_scale`) and receives this rank's
    /// rows, or only one of the two kernels (see [`LlKernels`]). Collective: every rank makes
    /// the same low-latency calls in the same order.
    ///
    /// # Safety
    /// Every address must hold a tensor of its documented shape on this rank's GPU, valid until
    /// the work on `stream` is done.
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list
    pub unsafe fn raw_low_latency_dispatch(
        &self,
        t: &LlDispatchTensors,
        shape: &LlShape,
        use_fp8: bool,
        round_scale: bool,
        config: Config,
        kernels: LlKernels,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.settle_after_rail(stream)?;
        for &phase in kernels.phases() {
            // SAFETY: the caller's contract, passed on.
            unsafe { self.ll_dispatch_phase(t, shape, use_fp8, round_scale, config, phase, stream) }?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)] // one phase of the call above
    unsafe fn ll_dispatch_phase(
        &self,
        t: &LlDispatchTensors,
        shape: &LlShape,
        use_fp8: bool,
        round_scale: bool,
        config: Config,
        phase: LlPhase,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let rank = self.rank();
        let regions = self.ll_regions(shape)?;
        if use_fp8 != t.recv_x_scales.is_some() {
            let detail = "given exactly when use_fp8".to_string();
            return Err(EpError::InvalidArgument { rank, argument: "recv_x_scales", detail });
        }
        config.check(rank)?;
        let RoutingShape { tokens, topk, num_experts } = shape.routing;
        let a = EpLlDispatchArgs {
            x: t.x,
            topk_idx: t.topk_idx,
            recv_x: t.recv_x,
            recv_x_scales: t.recv_x_scales.unwrap_or(0),
            recv_count: t.recv_count,
            recv_src_info: t.recv_src_info,
            recv_layout_range: t.recv_layout_range,
            cumulative_recv_stats: t.cumulative_local_expert_recv_stats.unwrap_or(0),
            state_offset: self.layout.ll_state as u64,
            signal_offset: self.layout.ll_signals as u64,
            data_offset: regions.dispatch_offset as u64,
            data_half_bytes: regions.dispatch_half_bytes as u64,
            // Between nodes a run of messages is put as one: no slot padding in it.
            message_bytes: match regions.net {
                Some(_) => crate::region::ll_message_bytes(shape.hidden, use_fp8),
                None => regions.message_bytes,
            } as u64,
            tokens: tokens as u32,
            hidden: shape.hidden as u32,
            topk: topk as u32,
            experts: num_experts as u32,
            max_tokens: shape.max_tokens as u32,
            fp8: u32::from(use_fp8),
            round_scale: u32::from(round_scale),
            reserved: 0,
        };
        // SAFETY: the context addresses this buffer and its peers' (alive as long as `self`), as
        // does the device communicator between nodes; the regions were checked to fit the
        // low-latency area; the rest is the caller's contract.
        unsafe { self.kernels.ll_dispatch(stream, self.context, a, self.ll_net(&regions), config.num_sms, phase) }
            .map_err(|source| EpError::Gpu { rank, source })
    }

    /// `low_latency_combine`: sends every row of `t.x` back to its token's rank, which sums
    /// each token's rows weighted by its top-k weights (`fma` per slot in slot order in f32,
    /// rounded once to BF16), or only one of the two kernels (see [`LlKernels`]). Collective.
    ///
    /// # Safety
    /// As [`Buffer::raw_low_latency_dispatch`].
    pub unsafe fn raw_low_latency_combine(
        &self,
        t: &LlCombineTensors,
        shape: &LlShape,
        config: Config,
        kernels: LlKernels,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.settle_after_rail(stream)?;
        for &phase in kernels.phases() {
            // SAFETY: the caller's contract, passed on.
            unsafe { self.ll_combine_phase(t, shape, config, phase, stream) }?;
        }
        Ok(())
    }

    unsafe fn ll_combine_phase(
        &self,
        t: &LlCombineTensors,
        shape: &LlShape,
        config: Config,
        phase: LlPhase,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let rank = self.rank();
        let regions = self.ll_regions(shape)?;
        config.check(rank)?;
        let RoutingShape { tokens, topk, num_experts } = shape.routing;
        let a = EpLlCombineArgs {
            x: t.x,
            topk_idx: t.topk_idx,
            topk_weights: t.topk_weights,
            src_info: t.src_info,
            layout_range: t.layout_range,
            combined_x: t.combined_x,
            state_offset: self.layout.ll_state as u64,
            signal_offset: (self.layout.ll_signals + 2 * LL_MAX_EXPERTS * 8) as u64,
            data_offset: regions.combine_offset as u64,
            data_half_bytes: regions.combine_half_bytes as u64,
            tokens: tokens as u32,
            hidden: shape.hidden as u32,
            topk: topk as u32,
            experts: num_experts as u32,
            max_tokens: shape.max_tokens as u32,
            reserved: 0,
        };
        // SAFETY: as in `ll_dispatch_phase`.
        unsafe { self.kernels.ll_combine(stream, self.context, a, self.ll_net(&regions), config.num_sms, phase) }
            .map_err(|source| EpError::Gpu { rank, source })
    }
}

/// Which kernels of a low-latency call run: both, or the send kernel alone (DeepEP's
/// `return_recv_hook`) and later the receive kernel alone with the same arguments (the hook).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlKernels {
    /// Send, then receive.
    Both,
    /// The send kernel alone.
    Send,
    /// The receive kernel alone (the hook).
    Recv,
}

impl LlKernels {
    fn phases(self) -> &'static [LlPhase] {
        match self {
            Self::Both => &[LlPhase::Send, LlPhase::Recv],
            Self::Send => &[LlPhase::Send],
            Self::Recv => &[LlPhase::Recv],
        }
    }

    /// Whether the receive kernel runs (it writes the outputs and the handle).
    pub fn receives(self) -> bool {
        self != Self::Send
    }
}

#[cfg(test)]
mod tests {
    use super::PinnedExperts;

    #[test]
    fn the_first_call_fixes_the_experts_and_another_count_is_refused() {
        let pinned = PinnedExperts::default();
        assert_eq!(pinned.pin(256), Ok(()));
        assert_eq!(pinned.pin(256), Ok(()));
        assert_eq!(pinned.pin(128), Err(256));
        assert_eq!(pinned.pin(256), Ok(()), "a refused count leaves the first in place");
    }
}

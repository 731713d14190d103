//! The typed layer of the low-latency mode: DeepEP V1's `low_latency_dispatch` and
//! `low_latency_combine` on views of [`DeviceBuffer`]s, safe to call, as the normal mode's in
//! [`crate::typed`] (whose docs say why such calls are safe). The handle a dispatch writes and
//! its combine follows ([`LlHandle`]) owns its tensors and lends them out read-only, and a
//! combine takes only a handle a dispatch of the same shape has written. Nothing here
//! synchronises with the host, so calls can be captured in CUDA graphs.

use half::bf16;
use weft_gpu::{DeviceBuffer, DeviceSlice, DeviceSliceMut, F8E4M3, Stream};

use crate::buffer::{Buffer, Config};
use crate::error::EpError;
use crate::low_latency::{LlCombineTensors, LlDispatchTensors, LlShape};
use crate::views::{Need, given, need};

/// Where a low-latency dispatch's received rows go: `[local experts][ranks * max_tokens]`
/// rows, BF16, or E4M3 (DeepEP's `use_fp8`) with DeepEP's column-major scales.
#[derive(Debug)]
pub enum LlRowsMut<'a> {
    /// `bf16[local experts][ranks * max_tokens][hidden]`.
    Bf16(DeviceSliceMut<'a, bf16>),
    /// `e4m3[local experts][ranks * max_tokens][hidden]` and its scales.
    Fp8 {
        /// The values.
        x: DeviceSliceMut<'a, F8E4M3>,
        /// `float[local experts][hidden / 128][ranks * max_tokens]`.
        scales: DeviceSliceMut<'a, f32>,
    },
}

/// `low_latency_dispatch`'s inputs.
#[derive(Debug, Clone, Copy)]
pub struct LlDispatchSource<'a> {
    /// `bf16[tokens][hidden]`.
    pub x: DeviceSlice<'a, bf16>,
    /// `int64[tokens][topk]`.
    pub topk_idx: DeviceSlice<'a, i64>,
}

/// `low_latency_dispatch`'s outputs besides the handle.
#[derive(Debug)]
pub struct LlDispatchTarget<'a> {
    /// The received rows.
    pub recv_x: LlRowsMut<'a>,
    /// `int32[local experts]`: rows received per local expert.
    pub recv_count: DeviceSliceMut<'a, i32>,
    /// `int32[local experts]`: rows received so far, incremented by every dispatch.
    pub cumulative_local_expert_recv_stats: Option<DeviceSliceMut<'a, i32>>,
}

/// `low_latency_combine`'s inputs besides the handle.
#[derive(Debug, Clone, Copy)]
pub struct LlCombineSource<'a> {
    /// `bf16[local experts][ranks * max_tokens][hidden]` in the dispatch's packed order.
    pub x: DeviceSlice<'a, bf16>,
    /// `int64[tokens][topk]` (the dispatch's).
    pub topk_idx: DeviceSlice<'a, i64>,
    /// `float[tokens][topk]`.
    pub topk_weights: DeviceSlice<'a, f32>,
}

/// DeepEP's low-latency handle: the source of every received row and the rows of every
/// (local expert, source rank), written by a dispatch and read by its combine. It owns its
/// tensors (allocated by the caller) and lends them out read-only.
#[derive(Debug)]
pub struct LlHandle {
    src_info: DeviceBuffer<i32>,
    layout_range: DeviceBuffer<i64>,
    /// The shape of the last dispatch that wrote the handle.
    dispatched: Option<LlShape>,
}

impl LlHandle {
    /// A handle of `recv_src_info` (`int32[local experts][ranks * max_tokens]`) and
    /// `recv_layout_range` (`int64[local experts][ranks]`), their lengths checked by each
    /// dispatch.
    pub fn new(recv_src_info: DeviceBuffer<i32>, recv_layout_range: DeviceBuffer<i64>) -> Self {
        Self { src_info: recv_src_info, layout_range: recv_layout_range, dispatched: None }
    }

    /// `int32[local experts][ranks * max_tokens]`: each received row's token on its source.
    pub fn recv_src_info(&self) -> DeviceSlice<'_, i32> {
        self.src_info.as_slice()
    }

    /// `int64[local experts][ranks]`: `first row << 32 | rows`.
    pub fn recv_layout_range(&self) -> DeviceSlice<'_, i64> {
        self.layout_range.as_slice()
    }
}

/// The elements of a low-latency call's tensors.
struct LlSizes {
    local: usize,
    /// Rows per local expert: `ranks * max_tokens`.
    slots: usize,
    ranks: usize,
}

impl Buffer {
    fn ll_sizes(&self, shape: &LlShape) -> LlSizes {
        let ranks = self.num_ranks();
        LlSizes { local: shape.routing.num_experts / ranks.max(1), slots: ranks * shape.max_tokens, ranks }
    }

    /// `low_latency_dispatch`: sends every (token, expert) pair to the expert's rank (cast to
    /// FP8 when `target.recv_x` is, with power-of-two scales with `round_scale`) and, unless
    /// `return_recv_hook`, receives this rank's rows at once into `target` and `handle`; with
    /// it, call [`Buffer::low_latency_dispatch_recv`] later with the same arguments (the hook).
    /// Collective: every rank makes the same low-latency calls in the same order.
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list
    pub fn low_latency_dispatch(
        &self,
        source: &LlDispatchSource<'_>,
        target: &mut LlDispatchTarget<'_>,
        handle: &mut LlHandle,
        shape: &LlShape,
        round_scale: bool,
        config: Config,
        return_recv_hook: bool,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.ll_dispatch(source, target, handle, shape, stream, |t, use_fp8| {
            // SAFETY: `ll_dispatch` checked every tensor of `t` against `shape` and has the
            // stream keep them alive.
            unsafe { self.raw_low_latency_dispatch(t, shape, use_fp8, round_scale, config, return_recv_hook, stream) }
        })?;
        if !return_recv_hook {
            handle.dispatched = Some(*shape);
        }
        Ok(())
    }

    /// The receive half of [`Buffer::low_latency_dispatch`] with `return_recv_hook` (DeepEP's
    /// hook), with the same arguments.
    pub fn low_latency_dispatch_recv(
        &self,
        source: &LlDispatchSource<'_>,
        target: &mut LlDispatchTarget<'_>,
        handle: &mut LlHandle,
        shape: &LlShape,
        config: Config,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.ll_dispatch(source, target, handle, shape, stream, |t, use_fp8| {
            // SAFETY: as in `low_latency_dispatch`.
            unsafe { self.raw_low_latency_dispatch_recv(t, shape, use_fp8, config, stream) }
        })?;
        handle.dispatched = Some(*shape);
        Ok(())
    }

    /// Checks a dispatch's tensors against `shape`, then runs `launch` on them (with
    /// `use_fp8`) and has the stream keep them alive.
    fn ll_dispatch(
        &self,
        source: &LlDispatchSource<'_>,
        target: &mut LlDispatchTarget<'_>,
        handle: &LlHandle,
        shape: &LlShape,
        stream: &Stream,
        launch: impl FnOnce(&LlDispatchTensors, bool) -> Result<(), EpError>,
    ) -> Result<(), EpError> {
        let LlSizes { local, slots, ranks } = self.ll_sizes(shape);
        let (tokens, topk, hidden) = (shape.routing.tokens, shape.routing.topk, shape.hidden);
        let (src_info, layout_range) = (handle.recv_src_info(), handle.recv_layout_range());
        let rows = local * slots;
        let (recv_x, recv_x_scales): (Need<'_>, Option<Need<'_>>) = match &target.recv_x {
            LlRowsMut::Bf16(x) => {
                (need("recv_x", x, rows * hidden, "local experts × ranks × max tokens × hidden"), None)
            }
            LlRowsMut::Fp8 { x, scales } => (
                need("recv_x", x, rows * hidden, "local experts × ranks × max tokens × hidden"),
                Some(need(
                    "recv_x_scales",
                    scales,
                    rows * hidden / 128,
                    "local experts × hidden / 128 × ranks × max tokens",
                )),
            ),
        };
        let stats = target.cumulative_local_expert_recv_stats.as_ref();
        let needs = given([
            Some(need("x", &source.x, tokens * hidden, "tokens × hidden")),
            Some(need("topk_idx", &source.topk_idx, tokens * topk, "tokens × topk")),
            Some(recv_x),
            recv_x_scales,
            Some(need("recv_count", &target.recv_count, local, "local experts")),
            stats.map(|v| need("cumulative_local_expert_recv_stats", v, local, "local experts")),
            Some(need("recv_src_info", &src_info, rows, "local experts × ranks × max tokens")),
            Some(need("recv_layout_range", &layout_range, local * ranks, "local experts × ranks")),
        ]);
        self.check_views(&needs)?;
        let (recv_x, recv_x_scales, use_fp8) = match &target.recv_x {
            LlRowsMut::Bf16(x) => (x.ptr(), None, false),
            LlRowsMut::Fp8 { x, scales } => (x.ptr(), Some(scales.ptr()), true),
        };
        let tensors = LlDispatchTensors {
            x: source.x.ptr(),
            topk_idx: source.topk_idx.ptr(),
            recv_x,
            recv_x_scales,
            recv_count: target.recv_count.ptr(),
            recv_src_info: src_info.ptr(),
            recv_layout_range: layout_range.ptr(),
            cumulative_local_expert_recv_stats: stats.map(|v| v.ptr()),
        };
        self.enqueue(stream, &needs, || launch(&tensors, use_fp8))
    }

    /// `low_latency_combine`: sends every row of `source.x` back to its token's rank, which
    /// sums each token's rows weighted by its top-k weights (`fma` per slot in slot order in
    /// f32, rounded once to BF16) into `combined_x` (`bf16[tokens][hidden]`). `handle` is the
    /// one a dispatch of the same `shape` wrote. `return_recv_hook` as in
    /// [`Buffer::low_latency_dispatch`]. Collective.
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list
    pub fn low_latency_combine(
        &self,
        source: &LlCombineSource<'_>,
        combined_x: &mut DeviceSliceMut<'_, bf16>,
        handle: &LlHandle,
        shape: &LlShape,
        config: Config,
        return_recv_hook: bool,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.ll_combine(source, combined_x, handle, shape, stream, |t| {
            // SAFETY: `ll_combine` checked every tensor of `t` against `shape`, and the handle
            // against the dispatch that wrote it, and has the stream keep them alive.
            unsafe { self.raw_low_latency_combine(t, shape, config, return_recv_hook, stream) }
        })
    }

    /// The receive half of [`Buffer::low_latency_combine`] with `return_recv_hook`.
    pub fn low_latency_combine_recv(
        &self,
        source: &LlCombineSource<'_>,
        combined_x: &mut DeviceSliceMut<'_, bf16>,
        handle: &LlHandle,
        shape: &LlShape,
        config: Config,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.ll_combine(source, combined_x, handle, shape, stream, |t| {
            // SAFETY: as in `low_latency_combine`.
            unsafe { self.raw_low_latency_combine_recv(t, shape, config, stream) }
        })
    }

    /// Checks a combine's tensors against `shape` and the handle against its dispatch, then
    /// runs `launch` on them and has the stream keep them alive.
    fn ll_combine(
        &self,
        source: &LlCombineSource<'_>,
        combined_x: &mut DeviceSliceMut<'_, bf16>,
        handle: &LlHandle,
        shape: &LlShape,
        stream: &Stream,
        launch: impl FnOnce(&LlCombineTensors) -> Result<(), EpError>,
    ) -> Result<(), EpError> {
        if handle.dispatched != Some(*shape) {
            let detail = match handle.dispatched {
                None => "no dispatch has written it".to_string(),
                Some(d) => format!("written by a dispatch of {d:?}, combined as {shape:?}"),
            };
            return Err(EpError::InvalidArgument { rank: self.rank(), argument: "handle", detail });
        }
        let LlSizes { local, slots, .. } = self.ll_sizes(shape);
        let (tokens, topk, hidden) = (shape.routing.tokens, shape.routing.topk, shape.hidden);
        let (src_info, layout_range) = (handle.recv_src_info(), handle.recv_layout_range());
        let needs = [
            need("x", &source.x, local * slots * hidden, "local experts × ranks × max tokens × hidden"),
            need("topk_idx", &source.topk_idx, tokens * topk, "tokens × topk"),
            need("topk_weights", &source.topk_weights, tokens * topk, "tokens × topk"),
            need("combined_x", combined_x, tokens * hidden, "tokens × hidden"),
            // Checked by the dispatch that wrote the handle; named to be kept alive.
            need("recv_src_info", &src_info, 0, ""),
            need("recv_layout_range", &layout_range, 0, ""),
        ];
        self.check_views(&needs)?;
        let tensors = LlCombineTensors {
            x: source.x.ptr(),
            topk_idx: source.topk_idx.ptr(),
            topk_weights: source.topk_weights.ptr(),
            src_info: src_info.ptr(),
            layout_range: layout_range.ptr(),
            combined_x: combined_x.ptr(),
        };
        self.enqueue(stream, &needs, || launch(&tensors))
    }
}

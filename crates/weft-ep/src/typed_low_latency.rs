//! The typed layer of the low-latency mode: DeepEP V1's `low_latency_dispatch` and
//! `low_latency_combine` on views of [`DeviceBuffer`]s, safe to call, as the normal mode's in
//! [`crate::typed`] (whose docs say why such calls are safe). The handle a dispatch writes and
//! its combine follows ([`LlHandle`]) owns its tensors and lends them out read-only, and a
//! combine takes only a handle a dispatch of the same shape has written. Nothing here
//! synchronises with the host, so calls can be captured in CUDA graphs.

use half::bf16;
use weft_gpu::{DeviceBuffer, DeviceSlice, DeviceSliceMut, DeviceView, F8E4M3, Stream};

use crate::buffer::{Buffer, Config};
use crate::error::EpError;
use crate::low_latency::{LlCombineTensors, LlDispatchTensors, LlKernels, LlShape};
use crate::views::{given, need};

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
    /// FP8 when `target.recv_x` is, with power-of-two scales with `round_scale`) and receives
    /// this rank's rows into `target` and `handle`, or only one of the two kernels (see
    /// [`LlKernels`]: the hook passes the same arguments). Collective: every rank makes the same
    /// low-latency calls in the same order.
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list
    pub fn low_latency_dispatch(
        &self,
        source: &LlDispatchSource<'_>,
        target: &mut LlDispatchTarget<'_>,
        handle: &mut LlHandle,
        shape: &LlShape,
        round_scale: bool,
        config: Config,
        kernels: LlKernels,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let LlSizes { local, slots, ranks } = self.ll_sizes(shape);
        let (tokens, topk, hidden) = (shape.routing.tokens, shape.routing.topk, shape.hidden);
        let (src_info, layout_range) = (handle.recv_src_info(), handle.recv_layout_range());
        let rows = local * slots;
        let (recv_x, recv_x_scales, use_fp8): (&dyn DeviceView, _, _) = match &target.recv_x {
            LlRowsMut::Bf16(x) => (x, None, false),
            LlRowsMut::Fp8 { x, scales } => (x, Some(scales), true),
        };
        let stats = target.cumulative_local_expert_recv_stats.as_ref();
        let needs = given([
            Some(need("x", &source.x, tokens * hidden, "tokens × hidden")),
            Some(need("topk_idx", &source.topk_idx, tokens * topk, "tokens × topk")),
            Some(need("recv_x", recv_x, rows * hidden, "local experts × ranks × max tokens × hidden")),
            recv_x_scales.map(|v| {
                need("recv_x_scales", v, rows * hidden / 128, "local experts × hidden / 128 × ranks × max tokens")
            }),
            Some(need("recv_count", &target.recv_count, local, "local experts")),
            stats.map(|v| need("cumulative_local_expert_recv_stats", v, local, "local experts")),
            Some(need("recv_src_info", &src_info, rows, "local experts × ranks × max tokens")),
            Some(need("recv_layout_range", &layout_range, local * ranks, "local experts × ranks")),
        ]);
        self.check_views(&needs)?;
        let tensors = LlDispatchTensors {
            x: source.x.ptr(),
            topk_idx: source.topk_idx.ptr(),
            recv_x: match &target.recv_x {
                LlRowsMut::Bf16(x) => x.ptr(),
                LlRowsMut::Fp8 { x, .. } => x.ptr(),
            },
            recv_x_scales: recv_x_scales.map(|v| v.ptr()),
            recv_count: target.recv_count.ptr(),
            recv_src_info: src_info.ptr(),
            recv_layout_range: layout_range.ptr(),
            cumulative_local_expert_recv_stats: stats.map(|v| v.ptr()),
        };
        // SAFETY: every view holds what the shape needs on this GPU (checked) and the stream
        // keeps it alive until the kernels have run (`enqueue`); see `crate::typed`.
        self.enqueue(stream, &needs, || unsafe {
            self.raw_low_latency_dispatch(&tensors, shape, use_fp8, round_scale, config, kernels, stream)
        })?;
        if kernels.receives() {
            handle.dispatched = Some(*shape);
        }
        Ok(())
    }

    /// `low_latency_combine`: sends every row of `source.x` back to its token's rank, which
    /// sums each token's rows weighted by its top-k weights (`fma` per slot in slot order in
    /// f32, rounded once to BF16) into `combined_x` (`bf16[tokens][hidden]`), or only one of
    /// the two kernels (see [`LlKernels`]). `handle` is the one a dispatch of the same `shape`
    /// wrote. Collective.
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list
    pub fn low_latency_combine(
        &self,
        source: &LlCombineSource<'_>,
        combined_x: &mut DeviceSliceMut<'_, bf16>,
        handle: &LlHandle,
        shape: &LlShape,
        config: Config,
        kernels: LlKernels,
        stream: &Stream,
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
        // SAFETY: as in `low_latency_dispatch`; the handle is what a dispatch of this shape
        // wrote (checked above), and nothing else can write it.
        self.enqueue(stream, &needs, || unsafe {
            self.raw_low_latency_combine(&tensors, shape, config, kernels, stream)
        })
    }
}

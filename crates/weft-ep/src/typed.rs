//! The typed layer of the normal mode: DeepEP V1's `get_dispatch_layout`, `dispatch` and
//! `combine` on views of [`DeviceBuffer`]s, safe to call. Each call checks every view's length
//! against the routing's shape and its GPU against the buffer's (`EpError::InvalidArgument`
//! naming the argument), then calls the raw layer ([`crate::raw`]).
//!
//! # Why these calls are safe
//! The raw layer's contract, upheld here:
//! - *Tensors of their documented shapes*: every view holds at least the elements the shape
//!   implies (checked), and the raw call gets the views' own addresses.
//! - *Valid until the stream's work is done*: each call hands the stream a reference to every
//!   buffer it named, the handle's and the layout's included (see weft-gpu's `buffer.rs`).
//! - *A layout and handle that match the routing*: how many rows a rank receives, and where,
//!   follows from the layout and the handle, so a caller must not be able to change them
//!   between the calls. [`DispatchLayout`] and [`DispatchHandle`] therefore own their tensors
//!   and lend them out read-only: a layout is what `get_dispatch_layout` counted, a handle
//!   what its notify exchanged, and its row count is the notify's, read back by the host.
//! - *Matching calls on every rank*: a rank that calls differently from its peers (another
//!   routing, another handle) hangs, until the kernels' bounded waits give up, or receives
//!   wrong rows; weft's API cannot check the peers' arguments.
//!
//! A dispatch without a handle is [`Buffer::get_dispatch_layout`], [`Buffer::notify_dispatch`]
//! (which waits for the counts, DeepEP's host sync) and [`Buffer::dispatch`]; a later dispatch
//! of the same handle is DeepEP's cached mode, chosen by the handle itself.
//!
//! On a group spanning nodes the same calls run the normal mode in two hops (docs/ep.md,
//! "Normal mode between nodes"): the handle then also owns the rail hop's send head and the
//! NVL hop's layout and handle over this rank's node, and the notify writes only the caller's
//! `rank_prefix_matrix` (the group's); `channel_prefix_matrix`, `recv_channel_prefix_matrix`
//! and `send_head` are the NVL hop's own. The received rows come in the order
//! [`crate::model::dispatch_internode`] states (by the source's index in its node, then its
//! node, then token), and `recv_src_idx` is each row's index among its forwarder's rows.

use std::sync::atomic::Ordering;

use half::bf16;
use weft_gpu::{DeviceBuffer, DeviceSlice, DeviceSliceMut, DeviceView, F8E4M3, Stream};

use crate::buffer::{Buffer, Config};
use crate::error::EpError;
use crate::internode::{InternodeHandle, RailCombine, RailDispatch};
use crate::raw::{
    CombineInput, CombineOutput, DispatchInput, DispatchOutput, Handle, LayoutTensors, Payload, RecvCounts,
    RoutingShape, Scales,
};
use crate::views::{Need, given, need};

/// Where the scales of token `t`, block `i` are: element `t * token_stride + i * hidden_stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleStrides {
    /// Elements between tokens.
    pub token_stride: u32,
    /// Elements between the scales of one token.
    pub hidden_stride: u32,
}

impl ScaleStrides {
    /// `[tokens][scales_per_token]`, DeepEP's layout of received scales.
    pub fn row_major(scales_per_token: usize) -> Self {
        Self { token_stride: scales_per_token as u32, hidden_stride: 1 }
    }

    /// `[scales_per_token][tokens]`, as DeepEP's tests pass a dispatch's input scales.
    pub fn column_major(tokens: usize) -> Self {
        Self { token_stride: 1, hidden_stride: tokens as u32 }
    }

    /// Elements the scales of `tokens` rows of `per_token` each reach.
    fn reach(&self, tokens: usize, per_token: usize) -> usize {
        if tokens == 0 || per_token == 0 {
            return 0;
        }
        (tokens - 1) * self.token_stride as usize + (per_token - 1) * self.hidden_stride as usize + 1
    }

    fn at(&self, ptr: weft_gpu::DevicePtr) -> Scales {
        Scales { ptr, token_stride: self.token_stride, hidden_stride: self.hidden_stride }
    }
}

/// Rows of `hidden` channels a dispatch sends: BF16, or E4M3 with a f32 scale per 128
/// channels.
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    /// `bf16[tokens][hidden]`.
    Bf16(DeviceSlice<'a, bf16>),
    /// `e4m3[tokens][hidden]` and its scales.
    Fp8 {
        /// The values.
        x: DeviceSlice<'a, F8E4M3>,
        /// The scales, `hidden / 128` per token.
        scales: DeviceSlice<'a, f32>,
        /// Where a token's scales are.
        strides: ScaleStrides,
    },
}

/// Where a dispatch's received rows go, of the payload's kind.
#[derive(Debug)]
pub enum RowsMut<'a> {
    /// `bf16[received][hidden]`.
    Bf16(DeviceSliceMut<'a, bf16>),
    /// `e4m3[received][hidden]` and its scales.
    Fp8 {
        /// The values.
        x: DeviceSliceMut<'a, F8E4M3>,
        /// The scales, `hidden / 128` per row.
        scales: DeviceSliceMut<'a, f32>,
        /// Where a row's scales go.
        strides: ScaleStrides,
    },
}

/// The views of `rows` rows of `hidden` channels: the values, then the scales.
fn row_needs<'v>(
    (x, scales): (&'v dyn DeviceView, Option<(&'v dyn DeviceView, ScaleStrides)>),
    names: [&'static str; 2],
    rows: usize,
    hidden: usize,
) -> Vec<Need<'v>> {
    let values = Need { argument: names[0], view: x, elements: rows * hidden, of: "rows × hidden" };
    let scales = scales.map(|(view, strides)| Need {
        argument: names[1],
        view,
        elements: strides.reach(rows, hidden.div_ceil(128)),
        of: "the strides over rows × hidden / 128",
    });
    given([Some(values), scales])
}

impl Rows<'_> {
    fn views(&self) -> (&dyn DeviceView, Option<(&dyn DeviceView, ScaleStrides)>) {
        match self {
            Rows::Bf16(x) => (x, None),
            Rows::Fp8 { x, scales, strides } => (x, Some((scales as &dyn DeviceView, *strides))),
        }
    }

    fn payload(&self, hidden: usize) -> Payload {
        match self {
            Rows::Bf16(x) => Payload::Bf16 { x: x.ptr(), hidden },
            Rows::Fp8 { x, scales, strides } => Payload::Fp8 { x: x.ptr(), scales: strides.at(scales.ptr()), hidden },
        }
    }
}

impl RowsMut<'_> {
    fn views(&self) -> (&dyn DeviceView, Option<(&dyn DeviceView, ScaleStrides)>) {
        match self {
            RowsMut::Bf16(x) => (x, None),
            RowsMut::Fp8 { x, scales, strides } => (x, Some((scales as &dyn DeviceView, *strides))),
        }
    }

    fn output(&self) -> (weft_gpu::DevicePtr, Option<Scales>) {
        match self {
            RowsMut::Bf16(x) => (x.ptr(), None),
            RowsMut::Fp8 { x, scales, strides } => (x.ptr(), Some(strides.at(scales.ptr()))),
        }
    }
}

/// `get_dispatch_layout`'s outputs, allocated by the caller and handed over to the layout.
#[derive(Debug)]
pub struct LayoutBuffers {
    /// `int32[ranks]`.
    pub num_tokens_per_rank: DeviceBuffer<i32>,
    /// `int32[experts]`.
    pub num_tokens_per_expert: DeviceBuffer<i32>,
    /// `bool[tokens][ranks]` (a byte each).
    pub is_token_in_rank: DeviceBuffer<u8>,
}

/// A routing's layout as `get_dispatch_layout` counted it. It owns its tensors and lends them
/// out read-only, so a notify reads exactly what the kernel wrote.
#[derive(Debug)]
pub struct DispatchLayout {
    shape: RoutingShape,
    tensors: LayoutBuffers,
}

impl DispatchLayout {
    /// The routing's shape.
    pub fn shape(&self) -> RoutingShape {
        self.shape
    }

    /// `int32[ranks]`: tokens sent to each rank.
    pub fn num_tokens_per_rank(&self) -> DeviceSlice<'_, i32> {
        self.tensors.num_tokens_per_rank.as_slice()
    }

    /// `int32[experts]`: tokens naming each expert.
    pub fn num_tokens_per_expert(&self) -> DeviceSlice<'_, i32> {
        self.tensors.num_tokens_per_expert.as_slice()
    }

    /// `bool[tokens][ranks]`.
    pub fn is_token_in_rank(&self) -> DeviceSlice<'_, u8> {
        self.tensors.is_token_in_rank.as_slice()
    }

    fn raw(&self) -> LayoutTensors {
        LayoutTensors {
            num_tokens_per_rank: self.tensors.num_tokens_per_rank.ptr(),
            num_tokens_per_expert: self.tensors.num_tokens_per_expert.ptr(),
            is_token_in_rank: self.tensors.is_token_in_rank.ptr(),
        }
    }
}

/// The handle's tensors whose sizes are known before the notify, allocated by the caller and
/// handed over to the handle.
#[derive(Debug)]
pub struct HandleBuffers {
    /// `int32[ranks][ranks]`.
    pub rank_prefix_matrix: DeviceBuffer<i32>,
    /// `int32[ranks][channels]`.
    pub channel_prefix_matrix: DeviceBuffer<i32>,
    /// `int32[ranks][channels]`.
    pub recv_channel_prefix_matrix: DeviceBuffer<i32>,
    /// `int32[tokens][ranks]`.
    pub send_head: DeviceBuffer<i32>,
}

/// DeepEP's intranode handle: a notify's layout and prefix matrices with the counts it
/// exchanged, and, once dispatched, the receive layout and `send_head` the combine follows. It
/// owns its tensors (see the module docs).
#[derive(Debug)]
pub struct DispatchHandle {
    layout: DispatchLayout,
    tensors: HandleBuffers,
    counts: RecvCounts,
    config: Config,
    /// The buffer's normal-mode call count right after the notify, and the stream it ran on:
    /// a dispatch straight after on that stream continues it, any other replays it (cached).
    notified: (u64, usize),
    dispatched: bool,
    /// Between nodes: the rail hop's and the NVL hop's tensors.
    internode: Option<Box<InternodeHandle>>,
}

impl DispatchHandle {
    /// The layout the handle was notified with.
    pub fn layout(&self) -> &DispatchLayout {
        &self.layout
    }

    /// What the notify counted for this rank.
    pub fn counts(&self) -> &RecvCounts {
        &self.counts
    }

    /// Rows this rank receives.
    pub fn num_recv_tokens(&self) -> usize {
        self.counts.num_recv_tokens
    }

    /// The SMs of the dispatches and combines of this handle.
    pub fn config(&self) -> Config {
        self.config
    }

    /// `int32[ranks][ranks]`.
    pub fn rank_prefix_matrix(&self) -> DeviceSlice<'_, i32> {
        self.tensors.rank_prefix_matrix.as_slice()
    }

    /// `int32[ranks][channels]`.
    pub fn channel_prefix_matrix(&self) -> DeviceSlice<'_, i32> {
        self.tensors.channel_prefix_matrix.as_slice()
    }

    /// `int32[ranks][channels]` (written by the dispatch).
    pub fn recv_channel_prefix_matrix(&self) -> DeviceSlice<'_, i32> {
        self.tensors.recv_channel_prefix_matrix.as_slice()
    }

    /// `int32[tokens][ranks]` (written by the dispatch).
    pub fn send_head(&self) -> DeviceSlice<'_, i32> {
        self.tensors.send_head.as_slice()
    }

    /// Has `stream` keep every tensor of the handle and its layout until its work has run.
    fn retain_on(&self, stream: &Stream) {
        let layout = &self.layout.tensors;
        for t in [&layout.num_tokens_per_rank, &layout.num_tokens_per_expert] {
            t.as_slice().retain_on(stream);
        }
        layout.is_token_in_rank.as_slice().retain_on(stream);
        let own = &self.tensors;
        for t in [&own.rank_prefix_matrix, &own.channel_prefix_matrix, &own.recv_channel_prefix_matrix, &own.send_head]
        {
            t.as_slice().retain_on(stream);
        }
        if let Some(inter) = &self.internode {
            inter.retain_on(stream);
        }
    }

    /// The raw handle, with `recv_src_idx` (the combine reads none).
    fn raw(&self, recv_src_idx: weft_gpu::DevicePtr) -> Handle {
        Handle {
            rank_prefix_matrix: self.tensors.rank_prefix_matrix.ptr(),
            channel_prefix_matrix: self.tensors.channel_prefix_matrix.ptr(),
            recv_channel_prefix_matrix: self.tensors.recv_channel_prefix_matrix.ptr(),
            recv_src_idx,
            is_token_in_rank: self.layout.tensors.is_token_in_rank.ptr(),
            send_head: self.tensors.send_head.ptr(),
            num_recv_tokens: self.counts.num_recv_tokens,
            channels: self.config.channels(),
        }
    }
}

/// `dispatch`'s inputs.
#[derive(Debug, Clone, Copy)]
pub struct DispatchSource<'a> {
    /// The rows, `[tokens][hidden]`.
    pub x: Rows<'a>,
    /// Channels per token.
    pub hidden: usize,
    /// `int64[tokens][topk]`: with it, the received rows carry their local experts (and the
    /// weights, if given); without, the dispatch is DeepEP's cached one.
    pub topk_idx: Option<DeviceSlice<'a, i64>>,
    /// `float[tokens][topk]`.
    pub topk_weights: Option<DeviceSlice<'a, f32>>,
}

/// `dispatch`'s outputs, `handle.num_recv_tokens()` rows each.
#[derive(Debug)]
pub struct DispatchTarget<'a> {
    /// The received rows, of the payload's kind.
    pub recv_x: RowsMut<'a>,
    /// `int32[received]`: each row's token index on its source.
    pub recv_src_idx: DeviceSliceMut<'a, i32>,
    /// `int64[received][topk]`: local expert indices or -1.
    pub recv_topk_idx: Option<DeviceSliceMut<'a, i64>>,
    /// `float[received][topk]`.
    pub recv_topk_weights: Option<DeviceSliceMut<'a, f32>>,
}

/// `combine`'s inputs.
#[derive(Debug, Clone, Copy)]
pub struct CombineSource<'a> {
    /// `bf16[received][hidden]` in the dispatch's receive order.
    pub x: DeviceSlice<'a, bf16>,
    /// Channels per row.
    pub hidden: usize,
    /// `float[received][topk]` to sum alongside.
    pub topk_weights: Option<DeviceSlice<'a, f32>>,
    /// Up to two `bf16[tokens][hidden]` biases.
    pub bias: [Option<DeviceSlice<'a, bf16>>; 2],
}

/// `combine`'s outputs.
#[derive(Debug)]
pub struct CombineTarget<'a> {
    /// `bf16[tokens][hidden]`.
    pub combined_x: DeviceSliceMut<'a, bf16>,
    /// `float[tokens][topk]`, required with `topk_weights`.
    pub combined_topk_weights: Option<DeviceSliceMut<'a, f32>>,
}

impl Buffer {
    /// `get_dispatch_layout`: tokens per rank and expert and `is_token_in_rank` of `topk_idx`
    /// (`int64[tokens][topk]`, negative: no expert), written into `out`, which the returned
    /// layout owns.
    pub fn get_dispatch_layout(
        &self,
        topk_idx: &DeviceSlice<'_, i64>,
        shape: RoutingShape,
        out: LayoutBuffers,
        stream: &Stream,
    ) -> Result<DispatchLayout, EpError> {
        let (ranks, RoutingShape { tokens, topk, num_experts }) = (self.num_ranks(), shape);
        let layout = DispatchLayout { shape, tensors: out };
        let (per_rank, per_expert, in_rank) =
            (layout.num_tokens_per_rank(), layout.num_tokens_per_expert(), layout.is_token_in_rank());
        let needs = [
            Need { argument: "topk_idx", view: topk_idx, elements: tokens * topk, of: "tokens × topk" },
            Need { argument: "num_tokens_per_rank", view: &per_rank, elements: ranks, of: "ranks" },
            Need { argument: "num_tokens_per_expert", view: &per_expert, elements: num_experts, of: "experts" },
            Need { argument: "is_token_in_rank", view: &in_rank, elements: tokens * ranks, of: "tokens × ranks" },
        ];
        self.check_views(&needs)?;
        // SAFETY: every view holds what the shape needs on this GPU (checked) and the stream
        // keeps it alive until the kernel has run (`enqueue`); see the module docs.
        self.enqueue(stream, &needs, || unsafe {
            self.raw_get_dispatch_layout(topk_idx.ptr(), shape, &layout.raw(), stream)
        })?;
        Ok(layout)
    }

    /// The notify phase of a dispatch without a handle (collective: every rank calls it): the
    /// exchange of `layout`'s counts into `out`'s prefix matrices, then the wait for this
    /// rank's counts (DeepEP's host sync). Returns the handle, ready for [`Buffer::dispatch`].
    pub fn notify_dispatch(
        &self,
        layout: DispatchLayout,
        expert_alignment: usize,
        config: Config,
        out: HandleBuffers,
        stream: &Stream,
    ) -> Result<DispatchHandle, EpError> {
        let (ranks, channels, shape) = (self.num_ranks(), config.channels() as usize, layout.shape);
        let counts = RecvCounts { num_recv_tokens: 0, num_recv_tokens_per_expert: Vec::new() };
        let mut handle = DispatchHandle {
            layout,
            tensors: out,
            counts,
            config,
            notified: (0, stream.raw() as usize),
            dispatched: false,
            internode: None,
        };
        if self.spans_nodes() {
            self.notify_between_nodes_typed(&mut handle, expert_alignment, stream)?;
            return Ok(handle);
        }
        {
            let h = &handle;
            let (per_rank, per_expert, in_rank) =
                (h.layout.num_tokens_per_rank(), h.layout.num_tokens_per_expert(), h.layout.is_token_in_rank());
            let (rank_prefix, channel_prefix, recv_channel_prefix, send_head) =
                (h.rank_prefix_matrix(), h.channel_prefix_matrix(), h.recv_channel_prefix_matrix(), h.send_head());
            let needs = [
                Need { argument: "num_tokens_per_rank", view: &per_rank, elements: ranks, of: "ranks" },
                Need {
                    argument: "num_tokens_per_expert",
                    view: &per_expert,
                    elements: shape.num_experts,
                    of: "experts",
                },
                Need {
                    argument: "is_token_in_rank",
                    view: &in_rank,
                    elements: shape.tokens * ranks,
                    of: "tokens × ranks",
                },
                Need {
                    argument: "rank_prefix_matrix",
                    view: &rank_prefix,
                    elements: ranks * ranks,
                    of: "ranks × ranks",
                },
                Need {
                    argument: "channel_prefix_matrix",
                    view: &channel_prefix,
                    elements: ranks * channels,
                    of: "ranks × channels",
                },
                Need {
                    argument: "recv_channel_prefix_matrix",
                    view: &recv_channel_prefix,
                    elements: ranks * channels,
                    of: "ranks × channels",
                },
                Need { argument: "send_head", view: &send_head, elements: shape.tokens * ranks, of: "tokens × ranks" },
            ];
            self.check_views(&needs)?;
            let layout = h.layout.raw();
            let (rank_prefix, channel_prefix) = (rank_prefix.ptr(), channel_prefix.ptr());
            // SAFETY: as in `get_dispatch_layout`; the layout is what its kernel wrote.
            self.enqueue(stream, &needs, || unsafe {
                self.raw_notify_dispatch(&layout, shape, expert_alignment, config, rank_prefix, channel_prefix, stream)
            })?;
        }
        handle.notified.0 = self.normal_calls.load(Ordering::Relaxed);
        handle.counts = self.recv_counts(stream, shape.num_experts)?;
        Ok(handle)
    }

    /// `dispatch`: sends every token to the ranks holding its experts and receives this rank's
    /// `handle.num_recv_tokens()` rows into `target`. The first dispatch of a handle straight
    /// after its notify, on the same stream, continues it; any other is DeepEP's cached
    /// dispatch (a prologue replaces the notify, no host sync), as is one without `topk_idx`.
    /// Collective.
    pub fn dispatch(
        &self,
        source: &DispatchSource<'_>,
        target: &mut DispatchTarget<'_>,
        handle: &mut DispatchHandle,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let (shape, rows, hidden) = (handle.layout.shape, handle.num_recv_tokens(), source.hidden);
        let (tokens, topk) = (shape.tokens, shape.topk);
        if matches!(source.x, Rows::Fp8 { .. }) != matches!(target.recv_x, RowsMut::Fp8 { .. }) {
            let detail = "of another kind than x (BF16 or FP8)".to_string();
            return Err(EpError::InvalidArgument { rank: self.rank(), argument: "recv_x", detail });
        }
        let mut needs = row_needs(source.x.views(), ["x", "x_scales"], tokens, hidden);
        needs.extend(row_needs(target.recv_x.views(), ["recv_x", "recv_x_scales"], rows, hidden));
        needs.extend(given([
            Some(need("recv_src_idx", &target.recv_src_idx, rows, "received rows")),
            source.topk_idx.as_ref().map(|v| need("topk_idx", v, tokens * topk, "tokens × topk")),
            source.topk_weights.as_ref().map(|v| need("topk_weights", v, tokens * topk, "tokens × topk")),
            target.recv_topk_idx.as_ref().map(|v| need("recv_topk_idx", v, rows * topk, "received rows × topk")),
            target
                .recv_topk_weights
                .as_ref()
                .map(|v| need("recv_topk_weights", v, rows * topk, "received rows × topk")),
        ]));
        self.check_views(&needs)?;
        let cached = handle.dispatched
            || source.topk_idx.is_none()
            || handle.notified != (self.normal_calls.load(Ordering::Relaxed), stream.raw() as usize);
        let input = DispatchInput {
            x: source.x.payload(hidden),
            topk_idx: source.topk_idx.map(|v| v.ptr()),
            topk_weights: source.topk_weights.map(|v| v.ptr()),
        };
        let (recv_x, recv_x_scales) = target.recv_x.output();
        let output = DispatchOutput {
            recv_x,
            recv_x_scales,
            recv_topk_idx: target.recv_topk_idx.as_ref().map(|v| v.ptr()),
            recv_topk_weights: target.recv_topk_weights.as_ref().map(|v| v.ptr()),
        };
        let raw_handle = handle.raw(target.recv_src_idx.ptr());
        let config = handle.config;
        let result = if let Some(inter) = handle.internode.as_deref_mut() {
            let rail = RailDispatch {
                x: input.x,
                hidden,
                topk_idx: input.topk_idx,
                topk_weights: input.topk_weights,
                output,
                recv_src_idx: target.recv_src_idx.ptr(),
            };
            // SAFETY: as below; the handle's tensors between nodes are its notify's, sized by
            // the rows this rank forwards.
            self.enqueue(stream, &needs, || unsafe { self.dispatch_between_nodes(&rail, inter, shape, config, stream) })
        } else {
            // SAFETY: as in `get_dispatch_layout`; the handle's tensors are its notify's
            // (checked there) and its own dispatches', `rows` is what the notify counted, and
            // the stream keeps the handle's tensors alive too.
            self.enqueue(stream, &needs, || unsafe {
                self.raw_dispatch(&input, &output, &raw_handle, shape, config, cached, stream)
            })
        };
        handle.retain_on(stream);
        result?;
        handle.dispatched = true;
        Ok(())
    }

    /// `combine`: sends every received row of `source` back to its token's rank, which sums
    /// each token's rows in increasing rank order (after the biases) in f32 and rounds once to
    /// BF16; the received top-k weights are summed alike. `handle` must have been dispatched.
    /// Collective.
    pub fn combine(
        &self,
        source: &CombineSource<'_>,
        target: &mut CombineTarget<'_>,
        handle: &DispatchHandle,
        stream: &Stream,
    ) -> Result<(), EpError> {
        if !handle.dispatched {
            let detail = "no dispatch has run with it: its receive layout is unwritten".to_string();
            return Err(EpError::InvalidArgument { rank: self.rank(), argument: "handle", detail });
        }
        let (shape, rows, hidden) = (handle.layout.shape, handle.num_recv_tokens(), source.hidden);
        let (tokens, topk) = (shape.tokens, shape.topk);
        let [bias0, bias1] = &source.bias;
        let needs = given([
            Some(need("x", &source.x, rows * hidden, "received rows × hidden")),
            source.topk_weights.as_ref().map(|v| need("topk_weights", v, rows * topk, "received rows × topk")),
            bias0.as_ref().map(|v| need("bias[0]", v, tokens * hidden, "tokens × hidden")),
            bias1.as_ref().map(|v| need("bias[1]", v, tokens * hidden, "tokens × hidden")),
            Some(need("combined_x", &target.combined_x, tokens * hidden, "tokens × hidden")),
            target
                .combined_topk_weights
                .as_ref()
                .map(|v| need("combined_topk_weights", v, tokens * topk, "tokens × topk")),
        ]);
        self.check_views(&needs)?;
        let input = CombineInput {
            x: source.x.ptr(),
            hidden,
            topk_weights: source.topk_weights.map(|w| (w.ptr(), topk)),
            bias: source.bias.map(|b| b.map(|b| b.ptr())),
        };
        let output = CombineOutput {
            combined_x: target.combined_x.ptr(),
            combined_topk_weights: target.combined_topk_weights.as_ref().map(|w| w.ptr()),
        };
        // The combine reads no `recv_src_idx`.
        let raw_handle = handle.raw(0);
        let result = if let Some(inter) = handle.internode.as_deref() {
            let rail = RailCombine {
                x: input.x,
                hidden,
                topk_weights: source.topk_weights.map(|w| w.ptr()),
                bias: input.bias,
                combined_x: output.combined_x,
                combined_topk_weights: output.combined_topk_weights,
            };
            // SAFETY: as below.
            self.enqueue(stream, &needs, || unsafe {
                self.combine_between_nodes(&rail, inter, shape, handle.config, stream)
            })
        } else {
            // SAFETY: as in `dispatch`; the handle's receive layout is a dispatch's (checked above).
            self.enqueue(stream, &needs, || unsafe { self.raw_combine(&input, &output, &raw_handle, tokens, stream) })
        };
        handle.retain_on(stream);
        result
    }
}

impl Buffer {
    /// `notify_dispatch` on a group spanning nodes: the rail layout and the exchange of counts
    /// (`Buffer::notify_between_nodes`), the group's `rank_prefix_matrix` written into the
    /// caller's, and the NVL hop's tensors allocated for the rows this rank forwards.
    fn notify_between_nodes_typed(
        &self,
        handle: &mut DispatchHandle,
        expert_alignment: usize,
        stream: &Stream,
    ) -> Result<(), EpError> {
        let (ranks, shape) = (self.num_ranks(), handle.layout.shape);
        let nodes = self.nodes()?;
        let (per_rank, per_expert, in_rank) = (
            handle.layout.num_tokens_per_rank(),
            handle.layout.num_tokens_per_expert(),
            handle.layout.is_token_in_rank(),
        );
        let rank_prefix = handle.rank_prefix_matrix();
        let needs = [
            Need { argument: "num_tokens_per_rank", view: &per_rank, elements: ranks, of: "ranks" },
            Need { argument: "num_tokens_per_expert", view: &per_expert, elements: shape.num_experts, of: "experts" },
            Need {
                argument: "is_token_in_rank", view: &in_rank, elements: shape.tokens * ranks, of: "tokens × ranks"
            },
            Need { argument: "rank_prefix_matrix", view: &rank_prefix, elements: ranks * ranks, of: "ranks × ranks" },
        ];
        self.check_views(&needs)?;
        let rail_send_head = self.rail_send_head(shape, nodes)?;
        let layout = handle.layout.raw();
        let head = rail_send_head.ptr();
        // SAFETY: the layout's views hold what the shape needs on this GPU (checked above) and
        // `rail_send_head` tokens × nodes entries (the handle keeps it); the host waits for the
        // stream before the exchange.
        let plan = self.enqueue(stream, &needs, || unsafe {
            self.notify_between_nodes(&layout, shape, expert_alignment, head, stream)
        })?;
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        handle.tensors.rank_prefix_matrix.copy_from_host(&plan.rank_prefix_matrix).map_err(gpu)?;
        handle.counts = plan.counts.clone();
        handle.notified.0 = self.normal_calls.load(Ordering::Relaxed);
        handle.internode = Some(Box::new(self.internode_handle(plan, rail_send_head, shape, handle.config)?));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_reach_the_last_tokens_last_block() {
        // Row-major [3][2]: the last scale is element 5.
        assert_eq!(ScaleStrides::row_major(2).reach(3, 2), 6);
        // Column-major [2][3]: the last scale is element 1 * 3 + 2.
        assert_eq!(ScaleStrides::column_major(3).reach(3, 2), 6);
        // A wider token stride leaves gaps the view must still cover.
        assert_eq!(ScaleStrides { token_stride: 4, hidden_stride: 1 }.reach(3, 2), 10);
        assert_eq!(ScaleStrides::row_major(2).reach(0, 2), 0);
    }
}

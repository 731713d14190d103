//! The raw layer: DeepEP V1's `Buffer` calls of the normal mode over device addresses, shapes
//! and a stream, for bindings (weft's Python package) that hold the tensors. Shapes are checked
//! here; what an address points at cannot be, hence `unsafe`.
//!
//! A dispatch without a handle is [`Buffer::raw_get_dispatch_layout`], [`Buffer::raw_notify_dispatch`],
//! [`Buffer::recv_counts`] (the host sync that sizes the outputs) and [`Buffer::raw_dispatch`];
//! with a handle (DeepEP's cached mode) it is [`Buffer::raw_dispatch`] with `cached` alone.

use std::sync::atomic::Ordering;

use weft_gpu::{DevicePtr, Stream};
use weft_types::{EpCombineArgs, EpContext, EpDispatchArgs, EpLayoutArgs, EpNotifyArgs, EpRailArrival};

use crate::buffer::{Buffer, Config};
use crate::error::EpError;
use crate::region::{MAX_LOCAL_EXPERTS, Staging};

/// Most top-k entries per token (a lane of a warp each).
pub const MAX_TOPK: usize = 32;

/// The sizes of one rank's routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutingShape {
    /// Tokens of this rank.
    pub tokens: usize,
    /// Top-k entries per token.
    pub topk: usize,
    /// Experts of the group, split evenly over its ranks.
    pub num_experts: usize,
}

/// `get_dispatch_layout`'s outputs (and `notify_dispatch`'s inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutTensors {
    /// `int32[ranks]`.
    pub num_tokens_per_rank: DevicePtr,
    /// `int32[experts]`.
    pub num_tokens_per_expert: DevicePtr,
    /// `bool[tokens][ranks]`.
    pub is_token_in_rank: DevicePtr,
}

/// The intranode handle, DeepEP's tuple in its order, as device addresses, with the sizes the
/// combine needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    /// `int32[ranks][ranks]`: entry `[s][d]` counts the tokens ranks `0..=s` send to `d`.
    pub rank_prefix_matrix: DevicePtr,
    /// `int32[ranks][channels]`: entry `[d][c]` counts this rank's tokens of channels `0..=c`
    /// sent to `d`.
    pub channel_prefix_matrix: DevicePtr,
    /// `int32[ranks][channels]`: entry `[s][c]` is the first received row of `s`'s channel `c`.
    pub recv_channel_prefix_matrix: DevicePtr,
    /// `int32[received]`: each received row's token index on its source.
    pub recv_src_idx: DevicePtr,
    /// `bool[tokens][ranks]`.
    pub is_token_in_rank: DevicePtr,
    /// `int32[tokens][ranks]`: a token's position among the tokens sent to a rank, or -1.
    pub send_head: DevicePtr,
    /// Rows this rank received.
    pub num_recv_tokens: usize,
    /// Channels of the dispatch (half its SMs); the combine runs on as many.
    pub channels: u32,
}

/// f32 scales of FP8 rows: element `(t, i)` at `ptr + 4 * (t * token_stride + i * hidden_stride)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scales {
    /// Device address.
    pub ptr: DevicePtr,
    /// Elements between tokens.
    pub token_stride: u32,
    /// Elements between scales of one token.
    pub hidden_stride: u32,
}

/// The rows a dispatch sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// `bf16[tokens][hidden]`.
    Bf16 {
        /// Device address (16-byte aligned).
        x: DevicePtr,
        /// Channels per token.
        hidden: usize,
    },
    /// `e4m3[tokens][hidden]` with `hidden / 128` scales per token.
    Fp8 {
        /// Device address (16-byte aligned).
        x: DevicePtr,
        /// The scales.
        scales: Scales,
        /// Channels per token.
        hidden: usize,
    },
}

impl Payload {
    pub(crate) fn x(&self) -> DevicePtr {
        match *self {
            Payload::Bf16 { x, .. } | Payload::Fp8 { x, .. } => x,
        }
    }

    /// Channels of one row.
    pub fn hidden(&self) -> usize {
        match *self {
            Payload::Bf16 { hidden, .. } | Payload::Fp8 { hidden, .. } => hidden,
        }
    }

    /// Bytes of one row.
    pub fn hidden_bytes(&self) -> usize {
        match *self {
            Payload::Bf16 { hidden, .. } => 2 * hidden,
            Payload::Fp8 { hidden, .. } => hidden,
        }
    }

    /// Scales of one row (0 for BF16).
    pub fn num_scales(&self) -> usize {
        match *self {
            Payload::Bf16 { .. } => 0,
            Payload::Fp8 { hidden, .. } => hidden.div_ceil(128),
        }
    }

    pub(crate) fn scales(&self) -> Option<Scales> {
        match *self {
            Payload::Bf16 { .. } => None,
            Payload::Fp8 { scales, .. } => Some(scales),
        }
    }
}

/// `dispatch`'s inputs besides the handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchInput {
    /// The rows.
    pub x: Payload,
    /// `int64[tokens][topk]` (required unless cached).
    pub topk_idx: Option<DevicePtr>,
    /// `float[tokens][topk]`.
    pub topk_weights: Option<DevicePtr>,
}

/// `dispatch`'s outputs besides the handle's (`recv_src_idx`, `recv_channel_prefix_matrix`,
/// `send_head`), each `num_recv_tokens` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DispatchOutput {
    /// Rows of the payload's row size (16-byte aligned).
    pub recv_x: DevicePtr,
    /// The rows' scales (FP8).
    pub recv_x_scales: Option<Scales>,
    /// `int64[received][topk]`: local expert indices or -1.
    pub recv_topk_idx: Option<DevicePtr>,
    /// `float[received][topk]`.
    pub recv_topk_weights: Option<DevicePtr>,
}

/// `combine`'s inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CombineInput {
    /// `bf16[received][hidden]` in dispatch receive order (16-byte aligned).
    pub x: DevicePtr,
    /// Channels per row (a multiple of 8).
    pub hidden: usize,
    /// `float[received][topk]` to sum alongside, and `topk`.
    pub topk_weights: Option<(DevicePtr, usize)>,
    /// Up to two `bf16[tokens][hidden]` biases (16-byte aligned).
    pub bias: [Option<DevicePtr>; 2],
}

/// `combine`'s outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CombineOutput {
    /// `bf16[tokens][hidden]` (16-byte aligned).
    pub combined_x: DevicePtr,
    /// `float[tokens][topk]`, required with `topk_weights`.
    pub combined_topk_weights: Option<DevicePtr>,
}

/// The ranks a normal-mode kernel runs over: the whole group (one node), or this rank's node
/// (the NVL hop between nodes), as the kernels' context addresses them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Group {
    /// The context: the group's buffers, this rank's index among them.
    pub(crate) context: EpContext,
    /// Ranks of the group.
    pub(crate) ranks: usize,
    /// Where a dispatch's input rows arrive from other nodes (the NVL hop's, chunk by chunk
    /// over the rail hop); the default: every row is here.
    pub(crate) arrival: EpRailArrival,
}

/// What a notify counted for this rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvCounts {
    /// Rows this rank receives.
    pub num_recv_tokens: usize,
    /// Rows naming each local expert, rounded up to the expert alignment.
    pub num_recv_tokens_per_expert: Vec<i32>,
}

/// The fields of a dispatch's arguments that describe its rows: the input's payload, scales
/// and top-k arrays, and the outputs they go to (the rest zero).
pub(crate) fn dispatch_rows(input: &DispatchInput, output: &DispatchOutput) -> EpDispatchArgs {
    let (scales, recv_scales) = (input.x.scales(), output.recv_x_scales);
    EpDispatchArgs {
        x: input.x.x(),
        x_scales: scales.map_or(0, |s| s.ptr),
        scale_token_stride: scales.map_or(0, |s| s.token_stride),
        scale_hidden_stride: scales.map_or(0, |s| s.hidden_stride),
        topk_idx: input.topk_idx.unwrap_or(0),
        topk_weights: input.topk_weights.unwrap_or(0),
        recv_x: output.recv_x,
        recv_x_scales: recv_scales.map_or(0, |s| s.ptr),
        recv_scale_token_stride: recv_scales.map_or(0, |s| s.token_stride),
        recv_scale_hidden_stride: recv_scales.map_or(0, |s| s.hidden_stride),
        recv_topk_idx: output.recv_topk_idx.unwrap_or(0),
        recv_topk_weights: output.recv_topk_weights.unwrap_or(0),
        hidden_bytes: input.x.hidden_bytes() as u32,
        num_scales: input.x.num_scales() as u32,
        ..Default::default()
    }
}

impl Buffer {
    pub(crate) fn invalid(&self, argument: &'static str, detail: impl Into<String>) -> EpError {
        EpError::InvalidArgument { rank: self.rank(), argument, detail: detail.into() }
    }

    /// The whole group, every rank's buffer mapped (one node).
    pub(crate) fn whole(&self) -> Group {
        Group { context: self.context, ranks: self.num_ranks(), arrival: EpRailArrival::default() }
    }

    /// Checks `shape` for the experts split over `ranks` ranks (the group's, or a node's between
    /// nodes); returns the experts per rank.
    pub(crate) fn check_routing_over(&self, shape: RoutingShape, ranks: usize) -> Result<usize, EpError> {
        let local = shape.num_experts / ranks.max(1);
        if shape.num_experts == 0 || !shape.num_experts.is_multiple_of(ranks) || local > MAX_LOCAL_EXPERTS {
            let detail = format!(
                "{} (a positive multiple of {ranks} ranks, at most {MAX_LOCAL_EXPERTS} per rank)",
                shape.num_experts
            );
            return Err(self.invalid("num_experts", detail));
        }
        if shape.topk > MAX_TOPK {
            return Err(self.invalid("topk_idx", format!("{} experts per token (at most {MAX_TOPK})", shape.topk)));
        }
        if shape.tokens > i32::MAX as usize {
            return Err(self.invalid("topk_idx", format!("{} tokens", shape.tokens)));
        }
        Ok(local)
    }

    pub(crate) fn check_aligned(&self, argument: &'static str, ptr: DevicePtr) -> Result<(), EpError> {
        if ptr == 0 || !ptr.is_multiple_of(16) {
            return Err(self.invalid(argument, format!("address {ptr:#x} (needs a 16-byte aligned tensor)")));
        }
        Ok(())
    }

    /// `get_dispatch_layout`: tokens per rank and expert and `is_token_in_rank` of `topk_idx`
    /// (`int64[tokens][topk]`, negative: no expert).
    ///
    /// # Safety
    /// Every address must hold a tensor of its documented shape on this rank's GPU, valid until
    /// the work on `stream` is done.
    pub unsafe fn raw_get_dispatch_layout(
        &self,
        topk_idx: DevicePtr,
        shape: RoutingShape,
        out: &LayoutTensors,
        stream: &Stream,
    ) -> Result<(), EpError> {
        // SAFETY: the caller's contract.
        unsafe { self.layout_over(topk_idx, shape, out, self.num_ranks(), stream) }
    }

    /// [`Buffer::raw_get_dispatch_layout`] with the experts split over `ranks` ranks (a node's,
    /// between nodes).
    ///
    /// # Safety
    /// As [`Buffer::raw_get_dispatch_layout`].
    pub(crate) unsafe fn layout_over(
        &self,
        topk_idx: DevicePtr,
        shape: RoutingShape,
        out: &LayoutTensors,
        ranks: usize,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.check_routing_over(shape, ranks)?;
        let args = EpLayoutArgs {
            topk_idx,
            num_tokens_per_rank: out.num_tokens_per_rank,
            num_tokens_per_expert: out.num_tokens_per_expert,
            is_token_in_rank: out.is_token_in_rank,
            tokens: shape.tokens as u32,
            topk: shape.topk as u32,
            experts: shape.num_experts as u32,
            ranks: ranks as u32,
        };
        // SAFETY: shapes checked; addresses are the caller's contract.
        unsafe { self.kernels.layout(stream, args) }.map_err(|source| EpError::Gpu { rank: self.rank(), source })
    }

    /// The notify phase of a dispatch without a handle: barrier with every rank, exchange of
    /// the layout's counts, `rank_prefix_matrix` (`int32[ranks][ranks]`) and
    /// `channel_prefix_matrix` (`int32[ranks][config.channels()]`) written; the counts for
    /// this rank are kept for [`Buffer::recv_counts`]. Collective: every rank calls it.
    ///
    /// # Safety
    /// As [`Buffer::raw_get_dispatch_layout`].
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list
    pub unsafe fn raw_notify_dispatch(
        &self,
        layout: &LayoutTensors,
        shape: RoutingShape,
        expert_alignment: usize,
        config: Config,
        rank_prefix_matrix: DevicePtr,
        channel_prefix_matrix: DevicePtr,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.check_one_node("notify_dispatch")?;
        // SAFETY: the caller's contract.
        unsafe {
            self.notify_in(
                self.whole(),
                layout,
                shape,
                expert_alignment,
                config,
                rank_prefix_matrix,
                channel_prefix_matrix,
                stream,
            )
        }
    }

    /// [`Buffer::raw_notify_dispatch`] over `group`'s ranks (all of them, or a node's).
    ///
    /// # Safety
    /// As [`Buffer::raw_get_dispatch_layout`].
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list and the group
    pub(crate) unsafe fn notify_in(
        &self,
        group: Group,
        layout: &LayoutTensors,
        shape: RoutingShape,
        expert_alignment: usize,
        config: Config,
        rank_prefix_matrix: DevicePtr,
        channel_prefix_matrix: DevicePtr,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.check_routing_over(shape, group.ranks)?;
        config.check(self.rank())?;
        let args = EpNotifyArgs {
            num_tokens_per_rank: layout.num_tokens_per_rank,
            num_tokens_per_expert: layout.num_tokens_per_expert,
            is_token_in_rank: layout.is_token_in_rank,
            rank_prefix_matrix,
            channel_prefix_matrix,
            recv_counts: self.recv_counts.ptr(),
            tokens: shape.tokens as u32,
            experts: shape.num_experts as u32,
            channels: config.channels(),
            expert_alignment: expert_alignment.clamp(1, i32::MAX as usize) as u32,
        };
        self.normal_calls.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the context addresses this buffer and its peers' (alive as long as `self`);
        // `recv_counts` is ours; the rest is the caller's contract.
        unsafe { self.kernels.notify(stream, group.context, args) }
            .map_err(|source| EpError::Gpu { rank: self.rank(), source })
    }

    /// Waits for `stream` and returns what the last [`Buffer::raw_notify_dispatch`] counted for
    /// this rank over `num_experts` experts (the host sync of a dispatch without a handle).
    pub fn recv_counts(&self, stream: &Stream, num_experts: usize) -> Result<RecvCounts, EpError> {
        self.synchronize(stream, "EP notify")?;
        let local = num_experts / self.num_ranks().max(1);
        let mut bytes = vec![0u8; 4 * (1 + local.min(MAX_LOCAL_EXPERTS))];
        self.recv_counts.read(0, &mut bytes).map_err(|source| EpError::Gpu { rank: self.rank(), source })?;
        let counts: Vec<i32> = bytes.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Ok(RecvCounts { num_recv_tokens: counts[0].max(0) as usize, num_recv_tokens_per_expert: counts[1..].to_vec() })
    }

    /// `dispatch`: sends every token to the ranks holding its experts and receives this rank's
    /// rows into `output` and `handle`'s `recv_src_idx`, `recv_channel_prefix_matrix` and
    /// `send_head`. Without `cached`, [`Buffer::raw_notify_dispatch`] must have run on `stream`
    /// just before, filling `handle`'s prefix matrices; with `cached`, `handle` is a previous
    /// dispatch's with the same routing, and a prologue replaces the notify (no host sync).
    /// Collective.
    ///
    /// # Safety
    /// As [`Buffer::raw_get_dispatch_layout`]; output tensors hold `handle.num_recv_tokens` rows.
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list
    pub unsafe fn raw_dispatch(
        &self,
        input: &DispatchInput,
        output: &DispatchOutput,
        handle: &Handle,
        shape: RoutingShape,
        config: Config,
        cached: bool,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.check_one_node("dispatch")?;
        // SAFETY: the caller's contract.
        unsafe { self.dispatch_in(self.whole(), input, output, handle, shape, config, cached, stream) }
    }

    /// [`Buffer::raw_dispatch`] over `group`'s ranks (all of them, or a node's).
    ///
    /// # Safety
    /// As [`Buffer::raw_dispatch`].
    #[allow(clippy::too_many_arguments)] // DeepEP's argument list and the group
    pub(crate) unsafe fn dispatch_in(
        &self,
        group: Group,
        input: &DispatchInput,
        output: &DispatchOutput,
        handle: &Handle,
        shape: RoutingShape,
        config: Config,
        cached: bool,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.check_routing_over(shape, group.ranks)?;
        config.check(self.rank())?;
        if handle.channels != config.channels() {
            let detail = format!("{} SMs, but the handle is of a dispatch on {}", config.num_sms, 2 * handle.channels);
            return Err(self.invalid("config.num_sms", detail));
        }
        let (hidden_bytes, num_scales) = (input.x.hidden_bytes(), input.x.num_scales());
        if hidden_bytes == 0 || !hidden_bytes.is_multiple_of(16) {
            return Err(self.invalid("x", format!("rows of {hidden_bytes} bytes (a positive multiple of 16)")));
        }
        self.check_aligned("x", input.x.x())?;
        self.check_aligned("recv_x", output.recv_x)?;
        if input.x.scales().is_some() != output.recv_x_scales.is_some() {
            return Err(self.invalid("recv_x_scales", "given exactly when x is FP8"));
        }
        let topk = match (input.topk_idx, cached) {
            (Some(_), _) => shape.topk,
            (None, true) => 0,
            (None, false) => return Err(self.invalid("topk_idx", "required without a handle")),
        };
        let staging = Staging::dispatch(self.layout.data_bytes, group.ranks, hidden_bytes, num_scales, topk);
        if shape.tokens > staging.capacity {
            let detail = format!(
                "{} tokens of {hidden_bytes} bytes need {} bytes of staging; the buffer holds {} tokens ({} bytes)",
                shape.tokens,
                group.ranks * shape.tokens * staging.slot_bytes,
                staging.capacity,
                self.layout.data_bytes
            );
            return Err(self.invalid("num_nvl_bytes", detail));
        }
        let args = EpDispatchArgs {
            is_token_in_rank: handle.is_token_in_rank,
            rank_prefix_matrix: handle.rank_prefix_matrix,
            channel_prefix_matrix: handle.channel_prefix_matrix,
            recv_src_idx: handle.recv_src_idx,
            recv_channel_prefix_matrix: handle.recv_channel_prefix_matrix,
            send_head: handle.send_head,
            slot_bytes: staging.slot_bytes as u64,
            region_bytes: staging.region_bytes as u64,
            tokens: shape.tokens as u32,
            topk: topk as u32,
            experts: shape.num_experts as u32,
            channels: config.channels(),
            rail: group.arrival,
            ..dispatch_rows(input, output)
        };
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        self.normal_calls.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the context addresses this buffer and its peers' (alive as long as `self`);
        // shapes and the staging capacity were checked; the rest is the caller's contract.
        unsafe {
            if cached {
                self.kernels.prologue(stream, group.context, true).map_err(gpu)?;
            }
            self.kernels.dispatch(stream, group.context, args).map_err(gpu)
        }
    }

    /// `combine`: sends every received row back to its token's rank, which sums each token's
    /// rows in increasing rank order (after the biases) in f32 and rounds once to BF16; the
    /// received top-k weights are summed alike. `tokens` is this rank's token count of the
    /// dispatch that made `handle`. Collective.
    ///
    /// # Safety
    /// As [`Buffer::raw_get_dispatch_layout`]; `input.x` holds `handle.num_recv_tokens` rows.
    pub unsafe fn raw_combine(
        &self,
        input: &CombineInput,
        output: &CombineOutput,
        handle: &Handle,
        tokens: usize,
        stream: &Stream,
    ) -> Result<(), EpError> {
        self.check_one_node("combine")?;
        // SAFETY: the caller's contract.
        unsafe { self.combine_in(self.whole(), input, output, handle, tokens, stream) }
    }

    /// [`Buffer::raw_combine`] over `group`'s ranks (all of them, or a node's).
    ///
    /// # Safety
    /// As [`Buffer::raw_combine`].
    pub(crate) unsafe fn combine_in(
        &self,
        group: Group,
        input: &CombineInput,
        output: &CombineOutput,
        handle: &Handle,
        tokens: usize,
        stream: &Stream,
    ) -> Result<(), EpError> {
        if input.hidden == 0 || !input.hidden.is_multiple_of(8) {
            return Err(self.invalid("x", format!("{} channels per row (a positive multiple of 8)", input.hidden)));
        }
        self.check_aligned("x", input.x)?;
        self.check_aligned("combined_x", output.combined_x)?;
        for (bias, name) in input.bias.iter().zip(["bias[0]", "bias[1]"]) {
            if let Some(b) = *bias {
                self.check_aligned(name, b)?;
            }
        }
        let topk = input.topk_weights.map_or(0, |(_, k)| k);
        if topk > MAX_TOPK || (topk > 0 && output.combined_topk_weights.is_none()) {
            return Err(self.invalid("topk_weights", format!("{topk} per row (at most {MAX_TOPK}, with an output)")));
        }
        let staging = Staging::combine(self.layout.data_bytes, group.ranks, input.hidden, topk);
        if tokens > staging.capacity {
            let detail = format!("{tokens} tokens need {} bytes of staging", group.ranks * tokens * staging.slot_bytes);
            return Err(self.invalid("num_nvl_bytes", detail));
        }
        Config { num_sms: 2 * handle.channels }.check(self.rank())?;
        let args = EpCombineArgs {
            x: input.x,
            topk_weights: input.topk_weights.map_or(0, |(p, _)| p),
            rank_prefix_matrix: handle.rank_prefix_matrix,
            channel_prefix_matrix: handle.channel_prefix_matrix,
            recv_channel_prefix_matrix: handle.recv_channel_prefix_matrix,
            send_head: handle.send_head,
            bias0: input.bias[0].unwrap_or(0),
            bias1: input.bias[1].unwrap_or(0),
            combined_x: output.combined_x,
            combined_topk_weights: if topk > 0 { output.combined_topk_weights.unwrap_or(0) } else { 0 },
            slot_bytes: staging.slot_bytes as u64,
            region_bytes: staging.region_bytes as u64,
            tokens: tokens as u32,
            hidden: input.hidden as u32,
            topk: topk as u32,
            channels: handle.channels,
        };
        let gpu = |source| EpError::Gpu { rank: self.rank(), source };
        self.normal_calls.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as in `raw_dispatch`.
        unsafe {
            self.kernels.prologue(stream, group.context, false).map_err(gpu)?;
            self.kernels.combine(stream, group.context, args).map_err(gpu)
        }
    }
}

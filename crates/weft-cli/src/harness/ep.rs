//! What `weft selftest --only ep` and `weft bench ep` share: a case's inputs, rebuilt from its
//! seed for any rank (so every rank holds the whole world's CPU model without exchanging
//! data), their upload, and one rank's run of weft-ep's normal-mode calls into device tensors
//! it keeps for checking or timing.

use std::fmt::Debug;
use std::ops::Range;

use half::bf16;
use weft_core::Communicator;
use weft_ep::model::{self, RankRouting, RoutingSpec, SplitMix};
use weft_ep::raw::{
    CombineInput, CombineOutput, DispatchInput, DispatchOutput, Handle, LayoutTensors, Payload, RecvCounts,
    RoutingShape, Scales,
};
use weft_ep::{Buffer, Config, EpError, nvl_bytes_hint};
use weft_gpu::{AllocKind, Device, DeviceMemory, GpuError, Pod, Stream};

/// Byte every output is filled with before a kernel writes it.
pub(crate) const POISON: u8 = 0xA5;

/// One EP case: the same on every rank.
#[derive(Debug, Clone)]
pub(crate) struct EpCase {
    /// Name in reports.
    pub(crate) name: String,
    /// Tokens of each rank.
    pub(crate) tokens: Vec<usize>,
    /// Channels per token.
    pub(crate) hidden: usize,
    /// Top-k slots per token.
    pub(crate) topk: usize,
    /// Experts of the group.
    pub(crate) experts: usize,
    /// Experts tokens may go to (the others, and the ranks holding only them, get nothing).
    pub(crate) hot: Range<usize>,
    /// One top-k slot in this many is -1 (0: none).
    pub(crate) drop_one_in: usize,
    /// FP8 payload (else BF16).
    pub(crate) fp8: bool,
    /// SMs of dispatch and combine.
    pub(crate) num_sms: u32,
    /// Biases added by the combine (0..=2).
    pub(crate) biases: usize,
    /// Per-expert count rounding.
    pub(crate) expert_alignment: usize,
    /// Seed of every input.
    pub(crate) seed: u64,
}

/// One rank's inputs, on the host.
pub(crate) struct RankInputs {
    pub(crate) topk_idx: Vec<i64>,
    pub(crate) topk_weights: Vec<f32>,
    /// `[tokens][hidden]` BF16 rows (the payload, or the source of the FP8 one).
    pub(crate) x: Vec<bf16>,
    /// `[tokens][hidden]` E4M3 bytes and `[tokens][hidden / 128]` scales, when FP8.
    pub(crate) fp8: Option<(Vec<u8>, Vec<f32>)>,
    /// Biases of the combine, `[tokens][hidden]` each.
    pub(crate) bias: Vec<Vec<bf16>>,
}

impl RankInputs {
    /// The payload bytes of token `t` as dispatch sends them.
    pub(crate) fn payload_row(&self, t: usize, hidden: usize) -> Vec<u8> {
        match &self.fp8 {
            Some((values, _)) => values[t * hidden..(t + 1) * hidden].to_vec(),
            None => self.x[t * hidden..(t + 1) * hidden].iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(),
        }
    }
}

impl EpCase {
    fn stream_seed(&self, rank: usize, what: u64) -> u64 {
        self.seed ^ (rank as u64).wrapping_mul(0x1000_0000_01b3) ^ what.wrapping_mul(0x9e37_79b9)
    }

    /// Rank `rank`'s inputs.
    pub(crate) fn inputs(&self, rank: usize) -> RankInputs {
        let tokens = self.tokens[rank];
        let spec = RoutingSpec { tokens, topk: self.topk, experts: self.hot.clone(), drop_one_in: self.drop_one_in };
        let (topk_idx, topk_weights) = model::random_routing(self.stream_seed(rank, 1), &spec);
        let x = self.rows(self.stream_seed(rank, 2), tokens);
        let fp8 = self.fp8.then(|| {
            let (mut values, mut scales) = (Vec::new(), Vec::new());
            for row in x.chunks(self.hidden) {
                let token = model::quantize_token(&row.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), false);
                values.extend(token.values);
                scales.extend(token.scales);
            }
            (values, scales)
        });
        let bias = (0..self.biases).map(|b| self.rows(self.stream_seed(rank, 3 + b as u64), tokens)).collect();
        RankInputs { topk_idx, topk_weights, x, fp8, bias }
    }

    /// `rows` BF16 rows of random values in [-4, 4).
    pub(crate) fn rows(&self, seed: u64, rows: usize) -> Vec<bf16> {
        let mut rng = SplitMix::new(seed);
        (0..rows * self.hidden).map(|_| bf16::from_f32(4.0 * rng.signed_unit())).collect()
    }

    /// The rows rank `rank` hands combine (`received` of them): BF16 values of its own.
    pub(crate) fn combine_rows(&self, rank: usize, received: usize) -> Vec<bf16> {
        self.rows(self.stream_seed(rank, 9), received)
    }

    /// The routing's shape on rank `rank`.
    pub(crate) fn shape(&self, rank: usize) -> RoutingShape {
        RoutingShape { tokens: self.tokens[rank], topk: self.topk, num_experts: self.experts }
    }

    /// The model's shape of the dispatch.
    pub(crate) fn model_shape(&self) -> model::DispatchShape {
        model::DispatchShape {
            ranks: self.tokens.len(),
            experts: self.experts,
            topk: self.topk,
            channels: self.num_sms as usize / 2,
            expert_alignment: self.expert_alignment,
        }
    }

    /// Payload bytes and scales per token.
    pub(crate) fn row_bytes(&self) -> (usize, usize) {
        if self.fp8 { (self.hidden, self.hidden.div_ceil(128)) } else { (2 * self.hidden, 0) }
    }
}

/// A device tensor of `bytes` (at least 16, so empty tensors still have an address).
pub(crate) fn tensor(device: &Device, bytes: usize) -> Result<DeviceMemory, GpuError> {
    DeviceMemory::alloc(device, bytes.max(16), AllocKind::Legacy)
}

/// A poisoned device tensor of `bytes`.
pub(crate) fn poisoned(device: &Device, bytes: usize) -> Result<DeviceMemory, GpuError> {
    let t = tensor(device, bytes)?;
    t.fill(0, t.len(), POISON)?;
    Ok(t)
}

/// `values` on the device.
pub(crate) fn upload<T: Pod>(device: &Device, values: &[T]) -> Result<DeviceMemory, GpuError> {
    let t = tensor(device, size_of_val(values))?;
    t.write_pod(0, values)?;
    Ok(t)
}

/// The first `n` values of type `T` of `memory`.
pub(crate) fn download<T: Pod + Default + Clone>(memory: &DeviceMemory, n: usize) -> Result<Vec<T>, GpuError> {
    let mut values = vec![T::default(); n];
    memory.read_pod_slice(0, &mut values)?;
    Ok(values)
}

/// The bits of BF16 values (what a device tensor of them holds).
pub(crate) fn bf16_bits(values: &[bf16]) -> Vec<u16> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// One rank's inputs on its GPU.
pub(crate) struct DeviceInputs {
    pub(crate) topk_idx: DeviceMemory,
    pub(crate) topk_weights: DeviceMemory,
    pub(crate) x: DeviceMemory,
    /// Column-major (`[hidden / 128][tokens]`), as DeepEP's test passes them.
    pub(crate) scales: Option<DeviceMemory>,
}

impl DeviceInputs {
    pub(crate) fn upload(device: &Device, case: &EpCase, rank: usize, inputs: &RankInputs) -> Result<Self, GpuError> {
        let tokens = case.tokens[rank];
        let (x, scales) = match &inputs.fp8 {
            Some((values, scales)) => {
                let per = case.hidden.div_ceil(128);
                let column_major: Vec<f32> =
                    (0..per * tokens).map(|i| scales[(i % tokens.max(1)) * per + i / tokens.max(1)]).collect();
                (upload(device, values)?, Some(upload(device, &column_major)?))
            }
            None => (upload(device, &bf16_bits(&inputs.x))?, None),
        };
        Ok(Self {
            topk_idx: upload(device, &inputs.topk_idx)?,
            topk_weights: upload(device, &inputs.topk_weights)?,
            x,
            scales,
        })
    }

    pub(crate) fn payload(&self, case: &EpCase, rank: usize) -> Payload {
        match &self.scales {
            Some(s) => Payload::Fp8 {
                x: self.x.ptr(),
                scales: Scales { ptr: s.ptr(), token_stride: 1, hidden_stride: case.tokens[rank] as u32 },
                hidden: case.hidden,
            },
            None => Payload::Bf16 { x: self.x.ptr(), hidden: case.hidden },
        }
    }
}

/// Layout outputs, the handle and the received tensors of one dispatch, on the device.
pub(crate) struct Dispatched {
    pub(crate) num_tokens_per_rank: DeviceMemory,
    pub(crate) num_tokens_per_expert: DeviceMemory,
    pub(crate) is_token_in_rank: DeviceMemory,
    pub(crate) rank_prefix_matrix: DeviceMemory,
    pub(crate) channel_prefix_matrix: DeviceMemory,
    pub(crate) recv_channel_prefix_matrix: DeviceMemory,
    pub(crate) recv_src_idx: DeviceMemory,
    pub(crate) send_head: DeviceMemory,
    pub(crate) recv_x: DeviceMemory,
    /// Row-major `[received][hidden / 128]`.
    pub(crate) recv_x_scales: Option<DeviceMemory>,
    pub(crate) recv_topk_idx: DeviceMemory,
    pub(crate) recv_topk_weights: DeviceMemory,
    pub(crate) counts: RecvCounts,
}

impl Dispatched {
    pub(crate) fn handle(&self, channels: u32) -> Handle {
        Handle {
            rank_prefix_matrix: self.rank_prefix_matrix.ptr(),
            channel_prefix_matrix: self.channel_prefix_matrix.ptr(),
            recv_channel_prefix_matrix: self.recv_channel_prefix_matrix.ptr(),
            recv_src_idx: self.recv_src_idx.ptr(),
            is_token_in_rank: self.is_token_in_rank.ptr(),
            send_head: self.send_head.ptr(),
            num_recv_tokens: self.counts.num_recv_tokens,
            channels,
        }
    }

    pub(crate) fn output(&self, case: &EpCase) -> DispatchOutput {
        let scales = case.hidden.div_ceil(128) as u32;
        DispatchOutput {
            recv_x: self.recv_x.ptr(),
            recv_x_scales: self.recv_x_scales.as_ref().map(|s| Scales {
                ptr: s.ptr(),
                token_stride: scales,
                hidden_stride: 1,
            }),
            recv_topk_idx: Some(self.recv_topk_idx.ptr()),
            recv_topk_weights: Some(self.recv_topk_weights.ptr()),
        }
    }
}

/// Runs layout, notify (with its host sync) and dispatch on rank `rank`, as DeepEP's
/// `get_dispatch_layout` then `dispatch` without a handle do.
pub(crate) fn dispatch(
    buffer: &Buffer,
    case: &EpCase,
    inputs: &DeviceInputs,
    stream: &Stream,
) -> Result<Dispatched, EpError> {
    let (rank, ranks) = (buffer.rank(), buffer.num_ranks());
    let device = buffer.communicator().device();
    let gpu = |source| EpError::Gpu { rank, source };
    let shape = case.shape(rank);
    let channels = (case.num_sms / 2) as usize;
    let t = |bytes: usize| poisoned(device, bytes).map_err(gpu);
    let layout = [t(4 * ranks)?, t(4 * case.experts)?, t(shape.tokens * ranks)?];
    let layout_tensors = LayoutTensors {
        num_tokens_per_rank: layout[0].ptr(),
        num_tokens_per_expert: layout[1].ptr(),
        is_token_in_rank: layout[2].ptr(),
    };
    let handle_tensors =
        [t(4 * ranks * ranks)?, t(4 * ranks * channels)?, t(4 * ranks * channels)?, t(4 * shape.tokens * ranks)?];
    let config = Config { num_sms: case.num_sms };
    buffer.communicator().settle_before_launch()?;
    // SAFETY: every tensor above and in `inputs` has the shape the call documents and lives
    // until the stream is synchronised below.
    unsafe {
        buffer.get_dispatch_layout(inputs.topk_idx.ptr(), shape, &layout_tensors, stream)?;
        buffer.notify_dispatch(
            &layout_tensors,
            shape,
            case.expert_alignment,
            config,
            handle_tensors[0].ptr(),
            handle_tensors[1].ptr(),
            stream,
        )?;
    }
    let counts = buffer.recv_counts(stream, case.experts)?;
    let rows = counts.num_recv_tokens;
    let (row_bytes, scales) = case.row_bytes();
    let [num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank] = layout;
    let [rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix, send_head] = handle_tensors;
    let dispatched = Dispatched {
        num_tokens_per_rank,
        num_tokens_per_expert,
        is_token_in_rank,
        rank_prefix_matrix,
        channel_prefix_matrix,
        recv_channel_prefix_matrix,
        recv_src_idx: t(4 * rows)?,
        send_head,
        recv_x: t(rows * row_bytes)?,
        recv_x_scales: if case.fp8 { Some(t(rows * scales * 4)?) } else { None },
        recv_topk_idx: t(rows * case.topk * 8)?,
        recv_topk_weights: t(rows * case.topk * 4)?,
        counts,
    };
    let input = DispatchInput {
        x: inputs.payload(case, rank),
        topk_idx: Some(inputs.topk_idx.ptr()),
        topk_weights: Some(inputs.topk_weights.ptr()),
    };
    buffer.communicator().settle_before_launch()?;
    // SAFETY: as above; the outputs hold `rows` rows.
    unsafe {
        buffer.dispatch(
            &input,
            &dispatched.output(case),
            &dispatched.handle(config.channels()),
            shape,
            config,
            false,
            stream,
        )?;
    }
    buffer.synchronize(stream, "EP dispatch")?;
    Ok(dispatched)
}

/// A dispatch with `handle` (DeepEP's cached mode, no top-k) into fresh poisoned `recv_x`,
/// `recv_x_scales` and `recv_src_idx`; returns them (synchronised). With `synchronize` false,
/// only launches (for timing).
pub(crate) fn cached_dispatch(
    buffer: &Buffer,
    case: &EpCase,
    inputs: &DeviceInputs,
    dispatched: &Dispatched,
    outputs: Option<&(DeviceMemory, Option<DeviceMemory>, DeviceMemory)>,
    stream: &Stream,
) -> Result<(), EpError> {
    let rank = buffer.rank();
    let config = Config { num_sms: case.num_sms };
    let mut handle = dispatched.handle(config.channels());
    let mut output = dispatched.output(case);
    output.recv_topk_idx = None;
    output.recv_topk_weights = None;
    if let Some((x, scales, src_idx)) = outputs {
        output.recv_x = x.ptr();
        if let (Some(o), Some(s)) = (output.recv_x_scales.as_mut(), scales) {
            o.ptr = s.ptr();
        }
        handle.recv_src_idx = src_idx.ptr();
    }
    let input = DispatchInput { x: inputs.payload(case, rank), topk_idx: None, topk_weights: None };
    // SAFETY: the handle's and outputs' tensors live in `dispatched` / `outputs`, which outlive
    // the caller's synchronisation of `stream`.
    unsafe { buffer.dispatch(&input, &output, &handle, case.shape(rank), config, true, stream) }
}

/// One rank's combine tensors on the device.
pub(crate) struct CombineTensors {
    /// `[received][hidden]` BF16 rows.
    pub(crate) x: DeviceMemory,
    /// The case's biases, `[tokens][hidden]` each.
    pub(crate) bias: Vec<DeviceMemory>,
    /// `[tokens][hidden]` BF16 output.
    pub(crate) out: DeviceMemory,
    /// `[tokens][topk]` f32 output.
    pub(crate) out_weights: DeviceMemory,
}

/// Launches combine of `t.x` with the received top-k weights and the case's biases.
pub(crate) fn combine(
    buffer: &Buffer,
    case: &EpCase,
    dispatched: &Dispatched,
    t: &CombineTensors,
    stream: &Stream,
) -> Result<(), EpError> {
    let input = CombineInput {
        x: t.x.ptr(),
        hidden: case.hidden,
        topk_weights: Some((dispatched.recv_topk_weights.ptr(), case.topk)),
        bias: [t.bias.first().map(|b| b.ptr()), t.bias.get(1).map(|b| b.ptr())],
    };
    let output = CombineOutput { combined_x: t.out.ptr(), combined_topk_weights: Some(t.out_weights.ptr()) };
    // SAFETY: every tensor has the documented shape and outlives the caller's synchronisation.
    unsafe { buffer.combine(&input, &output, &dispatched.handle(case.num_sms / 2), case.tokens[buffer.rank()], stream) }
}

/// `Err` naming the first of `got`'s elements that differs from `want` (placed by `locate`)
/// and how many differ.
pub(crate) fn compare<T: PartialEq + Debug>(
    what: &str,
    got: &[T],
    want: &[T],
    locate: impl Fn(usize) -> String,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, want {}", got.len(), want.len()));
    }
    let mut wrong = got.iter().zip(want).enumerate().filter(|(_, (g, w))| g != w);
    let Some((i, (g, w))) = wrong.next() else { return Ok(()) };
    Err(format!("{what}: {} ({}) is {g:?}, want {w:?}; {} elements differ", i, locate(i), 1 + wrong.count()))
}

fn no_place(_: usize) -> String {
    String::new()
}

/// Runs `case` on this rank and checks, element by element against weft-ep's CPU model: the
/// layout, the notify's counts, the handle, every received row, scale, expert index, weight and
/// source index, a cached-handle dispatch, and the combine, bit for bit, twice (the same bits
/// both times). Every rank rebuilds every rank's inputs from the case's seed, so the whole
/// world's model is computed locally. `Err` names the tensor, the element and where it came from.
pub(crate) fn check_case(comm: &Communicator, case: &EpCase) -> Result<(), String> {
    let (rank, ranks) = (comm.rank(), comm.world_size());
    let device = comm.device();
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let stream = Stream::new(device).map_err(|e| err(&e))?;
    let world: Vec<RankInputs> = (0..ranks).map(|r| case.inputs(r)).collect();
    let routing: Vec<RankRouting<'_>> =
        world.iter().map(|w| RankRouting { topk_idx: &w.topk_idx, topk_weights: &w.topk_weights }).collect();
    let received = model::dispatch(case.model_shape(), &routing);
    let mine = &received[rank];
    let max_tokens = case.tokens.iter().copied().max().unwrap_or(0);
    let buffer =
        Buffer::new(comm, nvl_bytes_hint(max_tokens.max(1), case.hidden, case.topk, ranks), 0).map_err(|e| err(&e))?;
    let inputs = DeviceInputs::upload(device, case, rank, &world[rank]).map_err(|e| err(&e))?;
    let d = dispatch(&buffer, case, &inputs, &stream).map_err(|e| err(&e))?;
    let dl = |m: &DeviceMemory, n: usize| download::<i32>(m, n).map_err(|e| err(&e));

    // Layout and counts.
    let layout = model::dispatch_layout(&world[rank].topk_idx, case.topk, case.experts, ranks);
    compare("num_tokens_per_rank", &dl(&d.num_tokens_per_rank, ranks)?, &layout.tokens_per_rank, |r| {
        format!("rank {r}")
    })?;
    compare("num_tokens_per_expert", &dl(&d.num_tokens_per_expert, case.experts)?, &layout.tokens_per_expert, |e| {
        format!("expert {e}")
    })?;
    let in_rank = download::<u8>(&d.is_token_in_rank, case.tokens[rank] * ranks).map_err(|e| err(&e))?;
    let want_in_rank: Vec<u8> = layout.token_in_rank.iter().map(|&b| u8::from(b)).collect();
    compare("is_token_in_rank", &in_rank, &want_in_rank, |i| format!("token {} rank {}", i / ranks, i % ranks))?;
    compare("num_recv_tokens", &[d.counts.num_recv_tokens], &[mine.len()], no_place)?;
    let local = case.experts / ranks;
    compare(
        "num_recv_tokens_per_expert",
        &d.counts.num_recv_tokens_per_expert[..local],
        &mine.recv_tokens_per_expert,
        |e| format!("local expert {e}"),
    )?;

    // The handle.
    let channels = case.num_sms as usize / 2;
    compare("rank_prefix_matrix", &dl(&d.rank_prefix_matrix, ranks * ranks)?, &mine.rank_prefix_matrix, |i| {
        format!("[{}][{}]", i / ranks, i % ranks)
    })?;
    let by_channel = |i: usize| format!("rank {} channel {}", i / channels, i % channels);
    compare(
        "channel_prefix_matrix",
        &dl(&d.channel_prefix_matrix, ranks * channels)?,
        &mine.channel_prefix_matrix,
        by_channel,
    )?;
    compare(
        "recv_channel_prefix_matrix",
        &dl(&d.recv_channel_prefix_matrix, ranks * channels)?,
        &mine.recv_channel_prefix_matrix,
        by_channel,
    )?;
    compare("send_head", &dl(&d.send_head, case.tokens[rank] * ranks)?, &mine.send_head, |i| {
        format!("token {} rank {}", i / ranks, i % ranks)
    })?;
    let rows = mine.len();
    let row_place =
        |row: usize| format!("row {row}, rank {} token {}", mine.recv_src_rank[row], mine.recv_src_idx[row]);
    let recv_src_idx = dl(&d.recv_src_idx, rows)?;
    compare("recv_src_idx", &recv_src_idx, &mine.recv_src_idx, row_place)?;

    // Every received row, scale, expert index and weight.
    let (row_bytes, num_scales) = case.row_bytes();
    let want_x: Vec<u8> = (0..rows)
        .flat_map(|i| world[mine.recv_src_rank[i]].payload_row(mine.recv_src_idx[i] as usize, case.hidden))
        .collect();
    let recv_x = download::<u8>(&d.recv_x, rows * row_bytes).map_err(|e| err(&e))?;
    compare("recv_x", &recv_x, &want_x, |i| format!("byte {} of {}", i % row_bytes, row_place(i / row_bytes)))?;
    let want_scales: Vec<u32> = (0..rows)
        .flat_map(|i| {
            let scales = world[mine.recv_src_rank[i]].fp8.as_ref().map(|(_, s)| s.as_slice()).unwrap_or_default();
            let t = mine.recv_src_idx[i] as usize;
            scales[t * num_scales..(t + 1) * num_scales].iter().map(|s| s.to_bits()).collect::<Vec<_>>()
        })
        .collect();
    if let Some(scales) = &d.recv_x_scales {
        let got = download::<u32>(scales, rows * num_scales).map_err(|e| err(&e))?;
        compare("recv_x_scales (f32 bits)", &got, &want_scales, |i| {
            format!("scale {} of {}", i % num_scales, row_place(i / num_scales))
        })?;
    }
    let topk_place = |i: usize| format!("slot {} of {}", i % case.topk, row_place(i / case.topk));
    let got_idx = download::<i64>(&d.recv_topk_idx, rows * case.topk).map_err(|e| err(&e))?;
    compare("recv_topk_idx", &got_idx, &mine.recv_topk_idx, topk_place)?;
    let got_w = download::<u32>(&d.recv_topk_weights, rows * case.topk).map_err(|e| err(&e))?;
    let want_w: Vec<u32> = mine.recv_topk_weights.iter().map(|w| w.to_bits()).collect();
    compare("recv_topk_weights (f32 bits)", &got_w, &want_w, topk_place)?;

    // A cached-handle dispatch delivers the same rows.
    let t = |bytes: usize| poisoned(device, bytes).map_err(|e| err(&e));
    let cached = (t(rows * row_bytes)?, if case.fp8 { Some(t(rows * num_scales * 4)?) } else { None }, t(rows * 4)?);
    comm.settle_before_launch().map_err(|e| err(&e))?;
    cached_dispatch(&buffer, case, &inputs, &d, Some(&cached), &stream).map_err(|e| err(&e))?;
    buffer.synchronize(&stream, "EP cached dispatch").map_err(|e| err(&e))?;
    let again = download::<u8>(&cached.0, rows * row_bytes).map_err(|e| err(&e))?;
    compare("cached dispatch recv_x", &again, &want_x, |i| {
        format!("byte {} of {}", i % row_bytes, row_place(i / row_bytes))
    })?;
    compare("cached dispatch recv_src_idx", &dl(&cached.2, rows)?, &mine.recv_src_idx, row_place)?;
    if let Some(scales) = &cached.1 {
        let got = download::<u32>(scales, rows * num_scales).map_err(|e| err(&e))?;
        compare("cached dispatch recv_x_scales", &got, &want_scales, no_place)?;
    }

    // Combine, against the model, twice.
    let combine_rows: Vec<Vec<bf16>> = (0..ranks).map(|r| case.combine_rows(r, received[r].len())).collect();
    let model_inputs: Vec<model::CombineInput<'_>> = (0..ranks)
        .map(|r| model::CombineInput {
            x: &combine_rows[r],
            topk_weights: Some(&received[r].recv_topk_weights),
            bias: [world[r].bias.first().map(|b| b.as_slice()), world[r].bias.get(1).map(|b| b.as_slice())],
        })
        .collect();
    let want = model::combine(&received, &model_inputs, case.hidden, case.topk).swap_remove(rank);
    let want_x: Vec<u16> = bf16_bits(&want.x);
    let want_weights: Vec<u32> = want.topk_weights.unwrap_or_default().iter().map(|w| w.to_bits()).collect();
    let tokens = case.tokens[rank];
    let hidden = case.hidden;
    let mut tensors = CombineTensors {
        x: upload(device, &bf16_bits(&combine_rows[rank])).map_err(|e| err(&e))?,
        bias: world[rank]
            .bias
            .iter()
            .map(|b| upload(device, &bf16_bits(b)))
            .collect::<Result<_, _>>()
            .map_err(|e| err(&e))?,
        out: t(tokens * hidden * 2)?,
        out_weights: t(tokens * case.topk * 4)?,
    };
    let mut first: Option<Vec<u16>> = None;
    for run in ["combine", "second combine"] {
        (tensors.out, tensors.out_weights) = (t(tokens * hidden * 2)?, t(tokens * case.topk * 4)?);
        comm.settle_before_launch().map_err(|e| err(&e))?;
        combine(&buffer, case, &d, &tensors, &stream).map_err(|e| err(&e))?;
        buffer.synchronize(&stream, "EP combine").map_err(|e| err(&e))?;
        let got = download::<u16>(&tensors.out, tokens * hidden).map_err(|e| err(&e))?;
        compare(&format!("{run} combined_x (bf16 bits)"), &got, &want_x, |i| {
            format!("token {} channel {}", i / hidden, i % hidden)
        })?;
        let got_w = download::<u32>(&tensors.out_weights, tokens * case.topk).map_err(|e| err(&e))?;
        compare(&format!("{run} combined_topk_weights (f32 bits)"), &got_w, &want_weights, |i| {
            format!("token {} slot {}", i / case.topk, i % case.topk)
        })?;
        if let Some(previous) = &first {
            compare("combine run to run", &got, previous, no_place)?;
        }
        first = Some(got);
    }
    buffer.check().map_err(|e| err(&e))
}

//! What `weft selftest --only ep` and `weft bench ep` share: a case's inputs, rebuilt from its
//! seed for any rank (so every rank holds the whole world's CPU model without exchanging
//! data), their upload, and one rank's run of weft-ep's normal-mode calls into device tensors
//! it keeps for checking or timing.

use std::fmt::Debug;
use std::ops::Range;

use half::bf16;
use weft_core::Communicator;
use weft_ep::model::{self, RankRouting, RoutingSpec, SplitMix};
use weft_ep::raw::RoutingShape;
use weft_ep::typed::{
    CombineSource, CombineTarget, DispatchHandle, DispatchSource, DispatchTarget, HandleBuffers, LayoutBuffers, Rows,
    RowsMut, ScaleStrides,
};
use weft_ep::{Buffer, Config, EpError, nvl_bytes_hint, nvl_bytes_hint_between_nodes, rdma_bytes_hint};
use weft_gpu::{Device, DeviceBuffer, DeviceElement, DeviceSlice, F8E4M3, GpuError, Stream};

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

/// The routing of an [`EpCase`]: tokens per rank, channels, top-k slots and experts.
#[derive(Clone, Debug)]
pub(crate) struct EpShape {
    pub(crate) tokens: Vec<usize>,
    pub(crate) hidden: usize,
    pub(crate) topk: usize,
    pub(crate) experts: usize,
}

impl EpCase {
    /// A case of `shape` on `num_sms` SMs with every expert hot, no dropped slot, no bias and no
    /// alignment: the cases tighten what they test from here.
    pub(crate) fn plain(name: String, shape: EpShape, fp8: bool, num_sms: u32, seed: u64) -> Self {
        let EpShape { tokens, hidden, topk, experts } = shape;
        Self {
            name,
            tokens,
            hidden,
            topk,
            experts,
            hot: 0..experts,
            drop_one_in: 0,
            fp8,
            num_sms,
            biases: 0,
            expert_alignment: 1,
            seed,
        }
    }
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

/// A device tensor of `len` elements (at least one, so empty tensors still have an address).
pub(crate) fn tensor<T: DeviceElement>(device: &Device, len: usize) -> Result<DeviceBuffer<T>, GpuError> {
    DeviceBuffer::new(device, len.max(1))
}

/// A device tensor of `len` elements, every byte [`POISON`].
pub(crate) fn poisoned<T: DeviceElement>(device: &Device, len: usize) -> Result<DeviceBuffer<T>, GpuError> {
    let mut t = tensor(device, len)?;
    t.as_mut_slice().fill_bytes(POISON)?;
    Ok(t)
}

/// `values` on the device.
pub(crate) fn upload<T: DeviceElement>(device: &Device, values: &[T]) -> Result<DeviceBuffer<T>, GpuError> {
    let mut t = tensor(device, values.len())?;
    t.slice_mut(..values.len())?.copy_from_host(values)?;
    Ok(t)
}

/// The first `n` elements of `view`, as `U`s (a type of the same bits, to compare them).
pub(crate) fn download<T: DeviceElement, U: DeviceElement>(
    view: DeviceSlice<'_, T>,
    n: usize,
) -> Result<Vec<U>, GpuError> {
    view.cast::<U>()?.slice(..n)?.to_vec()
}

/// The bits of BF16 values (what a device tensor of them holds).
pub(crate) fn bf16_bits(values: &[bf16]) -> Vec<u16> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// Rows of a payload on the device: BF16, or E4M3 with f32 scales.
pub(crate) enum PayloadRows {
    Bf16(DeviceBuffer<bf16>),
    Fp8 { x: DeviceBuffer<F8E4M3>, scales: DeviceBuffer<f32>, strides: ScaleStrides },
}

impl PayloadRows {
    /// `rows` poisoned rows of `case`'s payload, scales row-major (as DeepEP returns them).
    pub(crate) fn poisoned(device: &Device, case: &EpCase, rows: usize) -> Result<Self, GpuError> {
        let per = case.hidden.div_ceil(128);
        Ok(if case.fp8 {
            Self::Fp8 {
                x: poisoned(device, rows * case.hidden)?,
                scales: poisoned(device, rows * per)?,
                strides: ScaleStrides::row_major(per),
            }
        } else {
            Self::Bf16(poisoned(device, rows * case.hidden)?)
        })
    }

    pub(crate) fn rows(&self) -> Rows<'_> {
        match self {
            Self::Bf16(x) => Rows::Bf16(x.as_slice()),
            Self::Fp8 { x, scales, strides } => {
                Rows::Fp8 { x: x.as_slice(), scales: scales.as_slice(), strides: *strides }
            }
        }
    }

    pub(crate) fn rows_mut(&mut self) -> RowsMut<'_> {
        match self {
            Self::Bf16(x) => RowsMut::Bf16(x.as_mut_slice()),
            Self::Fp8 { x, scales, strides } => {
                RowsMut::Fp8 { x: x.as_mut_slice(), scales: scales.as_mut_slice(), strides: *strides }
            }
        }
    }

    /// Every byte of the rows and scales [`POISON`].
    pub(crate) fn poison(&mut self) -> Result<(), GpuError> {
        match self {
            Self::Bf16(x) => x.as_mut_slice().fill_bytes(POISON),
            Self::Fp8 { x, scales, .. } => {
                x.as_mut_slice().fill_bytes(POISON)?;
                scales.as_mut_slice().fill_bytes(POISON)
            }
        }
    }

    /// The first `n` bytes of the rows.
    pub(crate) fn bytes(&self, n: usize) -> Result<Vec<u8>, GpuError> {
        match self {
            Self::Bf16(x) => download(x.as_slice(), n),
            Self::Fp8 { x, .. } => download(x.as_slice(), n),
        }
    }

    /// The first `n` scales' bits (FP8 rows only).
    pub(crate) fn scale_bits(&self, n: usize) -> Result<Option<Vec<u32>>, GpuError> {
        match self {
            Self::Bf16(_) => Ok(None),
            Self::Fp8 { scales, .. } => download(scales.as_slice(), n).map(Some),
        }
    }
}

/// One rank's inputs on its GPU.
pub(crate) struct DeviceInputs {
    pub(crate) topk_idx: DeviceBuffer<i64>,
    pub(crate) topk_weights: DeviceBuffer<f32>,
    /// Scales column-major (`[hidden / 128][tokens]`), as DeepEP's test passes them.
    pub(crate) x: PayloadRows,
}

impl DeviceInputs {
    pub(crate) fn upload(device: &Device, case: &EpCase, rank: usize, inputs: &RankInputs) -> Result<Self, GpuError> {
        let tokens = case.tokens[rank];
        let x = match &inputs.fp8 {
            Some((values, scales)) => {
                let per = case.hidden.div_ceil(128);
                let column_major: Vec<f32> =
                    (0..per * tokens).map(|i| scales[(i % tokens.max(1)) * per + i / tokens.max(1)]).collect();
                let values: Vec<F8E4M3> = values.iter().map(|&v| F8E4M3(v)).collect();
                PayloadRows::Fp8 {
                    x: upload(device, &values)?,
                    scales: upload(device, &column_major)?,
                    strides: ScaleStrides::column_major(tokens),
                }
            }
            None => PayloadRows::Bf16(upload(device, &inputs.x)?),
        };
        Ok(Self { topk_idx: upload(device, &inputs.topk_idx)?, topk_weights: upload(device, &inputs.topk_weights)?, x })
    }

    /// The dispatch's inputs, with the routing unless `cached` (DeepEP's cached mode sends none).
    pub(crate) fn source(&self, case: &EpCase, cached: bool) -> DispatchSource<'_> {
        DispatchSource {
            x: self.x.rows(),
            hidden: case.hidden,
            topk_idx: (!cached).then(|| self.topk_idx.as_slice()),
            topk_weights: (!cached).then(|| self.topk_weights.as_slice()),
        }
    }
}

/// What a dispatch receives besides the handle: the rows and their sources, and, without a
/// cached handle, their top-k.
pub(crate) struct Received {
    pub(crate) x: PayloadRows,
    pub(crate) src_idx: DeviceBuffer<i32>,
    pub(crate) topk: Option<(DeviceBuffer<i64>, DeviceBuffer<f32>)>,
}

impl Received {
    /// Poisoned tensors for `rows` rows of `case`, with top-k tensors if `topk`.
    pub(crate) fn poisoned(device: &Device, case: &EpCase, rows: usize, topk: bool) -> Result<Self, GpuError> {
        let topk =
            if topk { Some((poisoned(device, rows * case.topk)?, poisoned(device, rows * case.topk)?)) } else { None };
        Ok(Self { x: PayloadRows::poisoned(device, case, rows)?, src_idx: poisoned(device, rows)?, topk })
    }

    pub(crate) fn target(&mut self) -> DispatchTarget<'_> {
        let (recv_topk_idx, recv_topk_weights) = match &mut self.topk {
            Some((idx, weights)) => (Some(idx.as_mut_slice()), Some(weights.as_mut_slice())),
            None => (None, None),
        };
        DispatchTarget {
            recv_x: self.x.rows_mut(),
            recv_src_idx: self.src_idx.as_mut_slice(),
            recv_topk_idx,
            recv_topk_weights,
        }
    }
}

/// The handle and the received tensors of one dispatch.
pub(crate) struct Dispatched {
    pub(crate) handle: DispatchHandle,
    pub(crate) received: Received,
}

impl Dispatched {
    /// Rows this rank received.
    pub(crate) fn rows(&self) -> usize {
        self.handle.num_recv_tokens()
    }
}

/// Waits for `stream`, then (ranks sharing a GPU: `settle_before_launch`) for every rank's call
/// to be done. A rank sharing this process must not free or allocate memory while a peer's
/// kernel still waits for that peer's proxy: a free waits for every kernel of the GPU and
/// meanwhile holds back the proxy threads' driver calls (docs/ep.md, "Ranks sharing a
/// process").
pub(crate) fn settle(buffer: &Buffer, stream: &Stream, what: &str) -> Result<(), EpError> {
    buffer.synchronize(stream, what)?;
    Ok(buffer.communicator().settle_before_launch()?)
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
    let layout = LayoutBuffers {
        num_tokens_per_rank: poisoned(device, ranks).map_err(gpu)?,
        num_tokens_per_expert: poisoned(device, case.experts).map_err(gpu)?,
        is_token_in_rank: poisoned(device, shape.tokens * ranks).map_err(gpu)?,
    };
    let handle = HandleBuffers {
        rank_prefix_matrix: poisoned(device, ranks * ranks).map_err(gpu)?,
        channel_prefix_matrix: poisoned(device, ranks * channels).map_err(gpu)?,
        recv_channel_prefix_matrix: poisoned(device, ranks * channels).map_err(gpu)?,
        send_head: poisoned(device, shape.tokens * ranks).map_err(gpu)?,
    };
    let config = Config { num_sms: case.num_sms };
    buffer.communicator().settle_before_launch()?;
    let layout = buffer.get_dispatch_layout(&inputs.topk_idx.as_slice(), shape, layout, stream)?;
    let mut handle = buffer.notify_dispatch(layout, case.expert_alignment, config, handle, stream)?;
    let mut received = Received::poisoned(device, case, handle.num_recv_tokens(), true).map_err(gpu)?;
    buffer.communicator().settle_before_launch()?;
    buffer.dispatch(&inputs.source(case, false), &mut received.target(), &mut handle, stream)?;
    settle(buffer, stream, "EP dispatch")?;
    Ok(Dispatched { handle, received })
}

/// A dispatch with `dispatched`'s handle (DeepEP's cached mode, no top-k) into `into`, or into
/// `dispatched`'s own rows if none (for timing). Only launches: the caller synchronises.
pub(crate) fn cached_dispatch(
    buffer: &Buffer,
    case: &EpCase,
    inputs: &DeviceInputs,
    dispatched: &mut Dispatched,
    into: Option<&mut Received>,
    stream: &Stream,
) -> Result<(), EpError> {
    let received = into.unwrap_or(&mut dispatched.received);
    buffer.dispatch(&inputs.source(case, true), &mut received.target(), &mut dispatched.handle, stream)
}

/// One rank's combine tensors on the device.
pub(crate) struct CombineTensors {
    /// `[received][hidden]` BF16 rows.
    pub(crate) x: DeviceBuffer<bf16>,
    /// The case's biases, `[tokens][hidden]` each.
    pub(crate) bias: Vec<DeviceBuffer<bf16>>,
    /// `[tokens][hidden]` BF16 output.
    pub(crate) out: DeviceBuffer<bf16>,
    /// `[tokens][topk]` f32 output.
    pub(crate) out_weights: DeviceBuffer<f32>,
}

impl CombineTensors {
    /// `x` (`rows` received rows, poisoned if none given) and `bias`, poisoned outputs for
    /// `tokens` tokens of `case`.
    pub(crate) fn new(
        device: &Device,
        case: &EpCase,
        (rows, x): (usize, Option<&[bf16]>),
        bias: &[Vec<bf16>],
        tokens: usize,
    ) -> Result<Self, GpuError> {
        Ok(Self {
            x: match x {
                Some(x) => upload(device, x)?,
                None => poisoned(device, rows * case.hidden)?,
            },
            bias: bias.iter().map(|b| upload(device, b)).collect::<Result<_, _>>()?,
            out: poisoned(device, tokens * case.hidden)?,
            out_weights: poisoned(device, tokens * case.topk)?,
        })
    }
}

/// Launches combine of `t.x` with the received top-k weights and the case's biases.
pub(crate) fn combine(
    buffer: &Buffer,
    case: &EpCase,
    dispatched: &Dispatched,
    t: &mut CombineTensors,
    stream: &Stream,
) -> Result<(), EpError> {
    let source = CombineSource {
        x: t.x.as_slice(),
        hidden: case.hidden,
        topk_weights: dispatched.received.topk.as_ref().map(|(_, weights)| weights.as_slice()),
        bias: [t.bias.first().map(|b| b.as_slice()), t.bias.get(1).map(|b| b.as_slice())],
    };
    let mut target =
        CombineTarget { combined_x: t.out.as_mut_slice(), combined_topk_weights: Some(t.out_weights.as_mut_slice()) };
    buffer.combine(&source, &mut target, &dispatched.handle, stream)
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

/// What one rank must receive: the one-node model's rows, or between nodes the two hops'.
struct Want<'a> {
    /// Each row's source rank and its token there.
    src_rank: &'a [usize],
    src_idx: &'a [i32],
    /// What `recv_src_idx` holds: the source token, or between nodes the row's index among
    /// its forwarder's rows.
    recv_src_idx: &'a [i32],
    topk_idx: &'a [i64],
    topk_weights: &'a [f32],
}

impl<'a> Want<'a> {
    fn of(received: &'a [model::Received], two_hop: Option<&'a [model::InternodeReceived]>, rank: usize) -> Self {
        match two_hop {
            Some(t) => {
                let t = &t[rank];
                Self {
                    src_rank: &t.recv_src_rank,
                    src_idx: &t.recv_src_idx,
                    recv_src_idx: &t.nvl.recv_src_idx,
                    topk_idx: &t.nvl.recv_topk_idx,
                    topk_weights: &t.nvl.recv_topk_weights,
                }
            }
            None => {
                let r = &received[rank];
                Self {
                    src_rank: &r.recv_src_rank,
                    src_idx: &r.recv_src_idx,
                    recv_src_idx: &r.recv_src_idx,
                    topk_idx: &r.recv_topk_idx,
                    topk_weights: &r.recv_topk_weights,
                }
            }
        }
    }

    fn rows(&self) -> usize {
        self.src_idx.len()
    }
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
    // Between nodes (`WEFT_RANKS_PER_NODE`, or hosts) the two hops' model: the same rows per
    // rank in another order, with the combine summing each node's partial.
    let per_node = (0..ranks).filter(|&p| comm.topology().same_node(p)).count().max(1);
    let between = comm.topology().spans_nodes();
    let received = model::dispatch(case.model_shape(), &routing);
    let two_hop = between.then(|| model::dispatch_internode(case.model_shape(), per_node, &routing));
    let rows_want = Want::of(&received, two_hop.as_deref(), rank);
    let mine = &received[rank];
    let max_tokens = case.tokens.iter().copied().max().unwrap_or(0).max(1);
    let (nvl_bytes, rdma_bytes) = if between {
        (
            nvl_bytes_hint_between_nodes(max_tokens, case.hidden, case.topk, ranks, per_node),
            rdma_bytes_hint(max_tokens, case.hidden, case.topk, ranks, per_node),
        )
    } else {
        (nvl_bytes_hint(max_tokens, case.hidden, case.topk, ranks), 0)
    };
    let buffer = Buffer::new(comm, nvl_bytes, rdma_bytes).map_err(|e| err(&e))?;
    let inputs = DeviceInputs::upload(device, case, rank, &world[rank]).map_err(|e| err(&e))?;
    let mut d = dispatch(&buffer, case, &inputs, &stream).map_err(|e| err(&e))?;
    let dl = |v: DeviceSlice<'_, i32>, n: usize| download::<i32, i32>(v, n).map_err(|e| err(&e));

    // Layout and counts.
    let (layout, handle) = (d.handle.layout(), &d.handle);
    let want = model::dispatch_layout(&world[rank].topk_idx, case.topk, case.experts, ranks);
    compare("num_tokens_per_rank", &dl(layout.num_tokens_per_rank(), ranks)?, &want.tokens_per_rank, |r| {
        format!("rank {r}")
    })?;
    compare(
        "num_tokens_per_expert",
        &dl(layout.num_tokens_per_expert(), case.experts)?,
        &want.tokens_per_expert,
        |e| format!("expert {e}"),
    )?;
    let in_rank = download::<u8, u8>(layout.is_token_in_rank(), case.tokens[rank] * ranks).map_err(|e| err(&e))?;
    let want_in_rank: Vec<u8> = want.token_in_rank.iter().map(|&b| u8::from(b)).collect();
    compare("is_token_in_rank", &in_rank, &want_in_rank, |i| format!("token {} rank {}", i / ranks, i % ranks))?;
    compare("num_recv_tokens", &[handle.num_recv_tokens()], &[rows_want.rows()], no_place)?;
    let local = case.experts / ranks;
    compare(
        "num_recv_tokens_per_expert",
        &handle.counts().num_recv_tokens_per_expert[..local],
        &mine.recv_tokens_per_expert,
        |e| format!("local expert {e}"),
    )?;

    // The handle (between nodes, the group's rank_prefix_matrix; the NVL hop's own tables
    // live in the handle and are checked through the rows they place).
    let channels = case.num_sms as usize / 2;
    compare("rank_prefix_matrix", &dl(handle.rank_prefix_matrix(), ranks * ranks)?, &mine.rank_prefix_matrix, |i| {
        format!("[{}][{}]", i / ranks, i % ranks)
    })?;
    if !between {
        let by_channel = |i: usize| format!("rank {} channel {}", i / channels, i % channels);
        compare(
            "channel_prefix_matrix",
            &dl(handle.channel_prefix_matrix(), ranks * channels)?,
            &mine.channel_prefix_matrix,
            by_channel,
        )?;
        compare(
            "recv_channel_prefix_matrix",
            &dl(handle.recv_channel_prefix_matrix(), ranks * channels)?,
            &mine.recv_channel_prefix_matrix,
            by_channel,
        )?;
        compare("send_head", &dl(handle.send_head(), case.tokens[rank] * ranks)?, &mine.send_head, |i| {
            format!("token {} rank {}", i / ranks, i % ranks)
        })?;
    }
    let rows = rows_want.rows();
    let row_place =
        |row: usize| format!("row {row}, rank {} token {}", rows_want.src_rank[row], rows_want.src_idx[row]);
    let recv_src_idx = dl(d.received.src_idx.as_slice(), rows)?;
    compare("recv_src_idx", &recv_src_idx, rows_want.recv_src_idx, row_place)?;

    // Every received row, scale, expert index and weight.
    let (row_bytes, num_scales) = case.row_bytes();
    let want_x: Vec<u8> = (0..rows)
        .flat_map(|i| world[rows_want.src_rank[i]].payload_row(rows_want.src_idx[i] as usize, case.hidden))
        .collect();
    let recv_x = d.received.x.bytes(rows * row_bytes).map_err(|e| err(&e))?;
    compare("recv_x", &recv_x, &want_x, |i| format!("byte {} of {}", i % row_bytes, row_place(i / row_bytes)))?;
    let want_scales: Vec<u32> = (0..rows)
        .flat_map(|i| {
            let scales = world[rows_want.src_rank[i]].fp8.as_ref().map(|(_, s)| s.as_slice()).unwrap_or_default();
            let t = rows_want.src_idx[i] as usize;
            scales[t * num_scales..(t + 1) * num_scales].iter().map(|s| s.to_bits()).collect::<Vec<_>>()
        })
        .collect();
    if let Some(got) = d.received.x.scale_bits(rows * num_scales).map_err(|e| err(&e))? {
        compare("recv_x_scales (f32 bits)", &got, &want_scales, |i| {
            format!("scale {} of {}", i % num_scales, row_place(i / num_scales))
        })?;
    }
    let topk_place = |i: usize| format!("slot {} of {}", i % case.topk, row_place(i / case.topk));
    let (recv_topk_idx, recv_topk_weights) = d.received.topk.as_ref().ok_or("the dispatch received no top-k")?;
    let got_idx = download::<i64, i64>(recv_topk_idx.as_slice(), rows * case.topk).map_err(|e| err(&e))?;
    compare("recv_topk_idx", &got_idx, rows_want.topk_idx, topk_place)?;
    let got_w = download::<f32, u32>(recv_topk_weights.as_slice(), rows * case.topk).map_err(|e| err(&e))?;
    let want_w: Vec<u32> = rows_want.topk_weights.iter().map(|w| w.to_bits()).collect();
    compare("recv_topk_weights (f32 bits)", &got_w, &want_w, topk_place)?;

    // A cached-handle dispatch delivers the same rows.
    let mut cached = Received::poisoned(device, case, rows, false).map_err(|e| err(&e))?;
    comm.settle_before_launch().map_err(|e| err(&e))?;
    cached_dispatch(&buffer, case, &inputs, &mut d, Some(&mut cached), &stream).map_err(|e| err(&e))?;
    settle(&buffer, &stream, "EP cached dispatch").map_err(|e| err(&e))?;
    let again = cached.x.bytes(rows * row_bytes).map_err(|e| err(&e))?;
    compare("cached dispatch recv_x", &again, &want_x, |i| {
        format!("byte {} of {}", i % row_bytes, row_place(i / row_bytes))
    })?;
    compare("cached dispatch recv_src_idx", &dl(cached.src_idx.as_slice(), rows)?, rows_want.recv_src_idx, row_place)?;
    if let Some(got) = cached.x.scale_bits(rows * num_scales).map_err(|e| err(&e))? {
        compare("cached dispatch recv_x_scales", &got, &want_scales, no_place)?;
    }

    // Combine, against the model, twice.
    let rows_of = |r: usize| two_hop.as_ref().map_or(received[r].len(), |t| t[r].len());
    let combine_rows: Vec<Vec<bf16>> = (0..ranks).map(|r| case.combine_rows(r, rows_of(r))).collect();
    let model_inputs: Vec<model::CombineInput<'_>> = (0..ranks)
        .map(|r| model::CombineInput {
            x: &combine_rows[r],
            topk_weights: Some(
                two_hop.as_ref().map_or(&received[r].recv_topk_weights, |t| &t[r].nvl.recv_topk_weights),
            ),
            bias: [world[r].bias.first().map(|b| b.as_slice()), world[r].bias.get(1).map(|b| b.as_slice())],
        })
        .collect();
    let want = match &two_hop {
        Some(t) => model::combine_internode(t, per_node, &model_inputs, case.hidden, case.topk),
        None => model::combine(&received, &model_inputs, case.hidden, case.topk),
    }
    .swap_remove(rank);
    let want_x: Vec<u16> = bf16_bits(&want.x);
    let want_weights: Vec<u32> = want.topk_weights.unwrap_or_default().iter().map(|w| w.to_bits()).collect();
    let tokens = case.tokens[rank];
    let hidden = case.hidden;
    let mut first: Option<Vec<u16>> = None;
    for run in ["combine", "second combine"] {
        let mut tensors =
            CombineTensors::new(device, case, (rows, Some(&combine_rows[rank])), &world[rank].bias, tokens)
                .map_err(|e| err(&e))?;
        comm.settle_before_launch().map_err(|e| err(&e))?;
        combine(&buffer, case, &d, &mut tensors, &stream).map_err(|e| err(&e))?;
        settle(&buffer, &stream, "EP combine").map_err(|e| err(&e))?;
        let got = bf16_bits(&download::<bf16, bf16>(tensors.out.as_slice(), tokens * hidden).map_err(|e| err(&e))?);
        compare(&format!("{run} combined_x (bf16 bits)"), &got, &want_x, |i| {
            format!("token {} channel {}", i / hidden, i % hidden)
        })?;
        let got_w = download::<f32, u32>(tensors.out_weights.as_slice(), tokens * case.topk).map_err(|e| err(&e))?;
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

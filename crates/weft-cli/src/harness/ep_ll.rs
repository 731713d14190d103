//! The low-latency half of the EP harness: a case's inputs rebuilt from its seed for any rank,
//! one rank's tensors, and the check of a case against weft-ep's CPU model (`check_ll_case`),
//! shared by `weft selftest --only ep` and `weft bench ep`.

use half::bf16;
use weft_core::Communicator;
use weft_ep::low_latency::{LlKernels, LlShape};
use weft_ep::model::{self, RoutingSpec};
use weft_ep::raw::RoutingShape;
use weft_ep::typed::ScaleStrides;
use weft_ep::typed_low_latency::{LlCombineSource, LlDispatchSource, LlDispatchTarget, LlHandle, LlRowsMut};
use weft_ep::{Buffer, Config, EpError, low_latency_net_bytes_hint, low_latency_rdma_size_hint};
use weft_gpu::{Device, DeviceBuffer, GpuError, Stream};

use super::ep::{POISON, PayloadRows, bf16_bits, compare, download, poisoned, upload};

/// One low-latency case: the same on every rank.
#[derive(Debug, Clone)]
pub(crate) struct LlCase {
    pub(crate) name: String,
    /// Tokens of each rank (each at most `max_tokens`).
    pub(crate) tokens: Vec<usize>,
    pub(crate) hidden: usize,
    pub(crate) topk: usize,
    pub(crate) experts: usize,
    /// `num_max_dispatch_tokens_per_rank`.
    pub(crate) max_tokens: usize,
    pub(crate) fp8: bool,
    pub(crate) round_scale: bool,
    /// One top-k slot in this many is -1 (0: none).
    pub(crate) drop_one_in: usize,
    pub(crate) num_sms: u32,
    pub(crate) seed: u64,
}

/// One rank's host inputs.
pub(crate) struct LlInputs {
    pub(crate) topk_idx: Vec<i64>,
    pub(crate) topk_weights: Vec<f32>,
    pub(crate) x: Vec<bf16>,
}

impl LlCase {
    fn seed_of(&self, rank: usize, what: u64) -> u64 {
        self.seed ^ (rank as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d) ^ what
    }

    fn rows(&self, seed: u64, rows: usize) -> Vec<bf16> {
        let mut rng = model::SplitMix::new(seed);
        (0..rows * self.hidden).map(|_| bf16::from_f32(4.0 * rng.signed_unit())).collect()
    }

    pub(crate) fn inputs(&self, rank: usize) -> LlInputs {
        let spec = RoutingSpec {
            tokens: self.tokens[rank],
            topk: self.topk,
            experts: 0..self.experts,
            drop_one_in: self.drop_one_in,
        };
        let (topk_idx, topk_weights) = model::random_routing(self.seed_of(rank, 1), &spec);
        LlInputs { topk_idx, topk_weights, x: self.rows(self.seed_of(rank, 2), self.tokens[rank]) }
    }

    /// The expert outputs rank `rank` hands the combine: `[local experts][ranks * max_tokens]` rows.
    pub(crate) fn expert_rows(&self, rank: usize) -> Vec<bf16> {
        self.rows(self.seed_of(rank, 3), self.experts / self.tokens.len() * self.tokens.len() * self.max_tokens)
    }

    pub(crate) fn shape(&self, rank: usize) -> LlShape {
        LlShape {
            routing: RoutingShape { tokens: self.tokens[rank], topk: self.topk, num_experts: self.experts },
            hidden: self.hidden,
            max_tokens: self.max_tokens,
        }
    }

    fn model_shape(&self) -> model::LlShape {
        model::LlShape { ranks: self.tokens.len(), experts: self.experts, topk: self.topk, max_tokens: self.max_tokens }
    }

    /// The low-latency bytes a buffer on `comm` needs for this case (more when the group spans
    /// nodes: the send regions of the path between them).
    pub(crate) fn rdma_bytes(&self, comm: &Communicator) -> usize {
        if comm.topology().spans_nodes() {
            low_latency_net_bytes_hint(self.max_tokens, self.hidden, self.experts)
        } else {
            low_latency_rdma_size_hint(self.max_tokens, self.hidden, self.tokens.len(), self.experts)
        }
    }
}

/// The view of received rows a low-latency dispatch takes (its scales' layout is DeepEP's,
/// column-major per local expert).
fn ll_rows_mut(rows: &mut PayloadRows) -> LlRowsMut<'_> {
    match rows {
        PayloadRows::Bf16(x) => LlRowsMut::Bf16(x.as_mut_slice()),
        PayloadRows::Fp8 { x, scales, .. } => LlRowsMut::Fp8 { x: x.as_mut_slice(), scales: scales.as_mut_slice() },
    }
}

/// One rank's low-latency tensors on its GPU.
pub(crate) struct LlTensors {
    pub(crate) x: DeviceBuffer<bf16>,
    pub(crate) topk_idx: DeviceBuffer<i64>,
    pub(crate) topk_weights: DeviceBuffer<f32>,
    pub(crate) recv_x: PayloadRows,
    pub(crate) recv_count: DeviceBuffer<i32>,
    pub(crate) handle: LlHandle,
    pub(crate) stats: DeviceBuffer<i32>,
    pub(crate) expert_x: DeviceBuffer<bf16>,
    pub(crate) combined_x: DeviceBuffer<bf16>,
}

/// A handle of poisoned tensors for `case`.
fn poisoned_handle(device: &Device, case: &LlCase) -> Result<LlHandle, GpuError> {
    let local = case.experts / case.tokens.len();
    let rows = local * case.tokens.len() * case.max_tokens;
    Ok(LlHandle::new(poisoned(device, rows)?, poisoned(device, local * case.tokens.len())?))
}

impl LlTensors {
    pub(crate) fn new(device: &Device, case: &LlCase, rank: usize, inputs: &LlInputs) -> Result<Self, GpuError> {
        let local = case.experts / case.tokens.len();
        let rows = local * case.tokens.len() * case.max_tokens;
        let recv_x = if case.fp8 {
            PayloadRows::Fp8 {
                x: poisoned(device, rows * case.hidden)?,
                scales: poisoned(device, rows * case.hidden / 128)?,
                // Unused: the low-latency scales' layout is fixed (see `ll_rows_mut`).
                strides: ScaleStrides::column_major(rows),
            }
        } else {
            PayloadRows::Bf16(poisoned(device, rows * case.hidden)?)
        };
        Ok(Self {
            x: upload(device, &inputs.x)?,
            topk_idx: upload(device, &inputs.topk_idx)?,
            topk_weights: upload(device, &inputs.topk_weights)?,
            recv_x,
            recv_count: poisoned(device, local)?,
            handle: poisoned_handle(device, case)?,
            stats: upload(device, &vec![0i32; local])?,
            expert_x: upload(device, &case.expert_rows(rank))?,
            combined_x: poisoned(device, case.tokens[rank] * case.hidden)?,
        })
    }
}

/// The launches of one low-latency call: both kernels at once, or with `hook` the send
/// kernel, then the receive kernel (DeepEP's hook).
fn launches(hook: bool) -> &'static [LlKernels] {
    if hook { &[LlKernels::Send, LlKernels::Recv] } else { &[LlKernels::Both] }
}

/// Launches one low-latency dispatch of `t`'s tensors (see [`launches`]).
pub(crate) fn dispatch(
    buffer: &Buffer,
    case: &LlCase,
    t: &mut LlTensors,
    hook: bool,
    stream: &Stream,
) -> Result<(), EpError> {
    let (shape, config) = (case.shape(buffer.rank()), Config { num_sms: case.num_sms });
    let source = LlDispatchSource { x: t.x.as_slice(), topk_idx: t.topk_idx.as_slice() };
    let mut target = LlDispatchTarget {
        recv_x: ll_rows_mut(&mut t.recv_x),
        recv_count: t.recv_count.as_mut_slice(),
        cumulative_local_expert_recv_stats: Some(t.stats.as_mut_slice()),
    };
    for &kernels in launches(hook) {
        let handle = &mut t.handle;
        buffer.low_latency_dispatch(&source, &mut target, handle, &shape, case.round_scale, config, kernels, stream)?;
    }
    Ok(())
}

/// Launches one low-latency combine of `t`'s tensors (see [`launches`]).
pub(crate) fn combine(
    buffer: &Buffer,
    case: &LlCase,
    t: &mut LlTensors,
    hook: bool,
    stream: &Stream,
) -> Result<(), EpError> {
    let (shape, config) = (case.shape(buffer.rank()), Config { num_sms: case.num_sms });
    let source = LlCombineSource {
        x: t.expert_x.as_slice(),
        topk_idx: t.topk_idx.as_slice(),
        topk_weights: t.topk_weights.as_slice(),
    };
    let combined_x = &mut t.combined_x.as_mut_slice();
    for &kernels in launches(hook) {
        buffer.low_latency_combine(&source, combined_x, &t.handle, &shape, config, kernels, stream)?;
    }
    Ok(())
}

/// [`dispatch`] then [`combine`].
pub(crate) fn dispatch_and_combine(
    buffer: &Buffer,
    case: &LlCase,
    t: &mut LlTensors,
    hook: bool,
    stream: &Stream,
) -> Result<(), EpError> {
    dispatch(buffer, case, t, hook, stream)?;
    combine(buffer, case, t, hook, stream)
}

/// Runs `case` on this rank three times (send and receive back to back, with the hook split,
/// and captured in a CUDA graph replayed twice) and checks each run against weft-ep's model:
/// recv_count, layout_range, src_info, every valid received row and scale, the cumulative
/// statistics, and every combined value bit for bit.
pub(crate) fn check_ll_case(comm: &Communicator, case: &LlCase) -> Result<(), String> {
    let (rank, ranks) = (comm.rank(), comm.world_size());
    let device = comm.device();
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let stream = Stream::new(device).map_err(|e| err(&e))?;
    let world: Vec<LlInputs> = (0..ranks).map(|r| case.inputs(r)).collect();
    let idx: Vec<&[i64]> = world.iter().map(|w| w.topk_idx.as_slice()).collect();
    let weights: Vec<&[f32]> = world.iter().map(|w| w.topk_weights.as_slice()).collect();
    let received = model::ll_dispatch(case.model_shape(), &idx);
    let expert_rows: Vec<Vec<bf16>> = (0..ranks).map(|r| case.expert_rows(r)).collect();
    let x: Vec<&[bf16]> = expert_rows.iter().map(|v| v.as_slice()).collect();
    let want_combined =
        bf16_bits(&model::ll_combine(case.model_shape(), &received, &x, &idx, &weights, case.hidden)[rank]);
    let mine = &received[rank];
    let (local, rows) = (case.experts / ranks, ranks * case.max_tokens);
    let buffer = Buffer::new(comm, 0, case.rdma_bytes(comm)).map_err(|e| err(&e))?;
    let mut tensors = LlTensors::new(device, case, rank, &world[rank]).map_err(|e| err(&e))?;
    let row_bytes = if case.fp8 { case.hidden } else { 2 * case.hidden };
    let scales = if case.fp8 { case.hidden / 128 } else { 0 };
    // Captured up front: instantiating a graph may wait for the GPU, which a peer's kernel
    // sharing it could hold while it waits for this rank.
    stream.begin_capture().map_err(|e| err(&e))?;
    let captured = dispatch_and_combine(&buffer, case, &mut tensors, false, &stream);
    let graph = stream.end_capture();
    captured.map_err(|e| err(&e))?;
    let graph = graph.map_err(|e| err(&e))?;
    // The handle is the dispatch's alone (nothing else writes it): the eager runs get poisoned
    // ones of their own, the replays the captured one (the second finds the first's values).
    let poisoned_handle = || poisoned_handle(device, case).map_err(|e| err(&e));
    let mut captured_handle = Some(std::mem::replace(&mut tensors.handle, poisoned_handle()?));
    for (run, how) in ["eager", "hook", "graph replay 1", "graph replay 2"].iter().enumerate() {
        tensors.recv_x.poison().map_err(|e| err(&e))?;
        tensors.combined_x.as_mut_slice().fill_bytes(POISON).map_err(|e| err(&e))?;
        if run < 2 {
            tensors.handle = poisoned_handle()?;
        } else if let Some(handle) = captured_handle.take() {
            tensors.handle = handle;
        }
        comm.settle_before_launch().map_err(|e| err(&e))?;
        match run {
            0 | 1 => dispatch_and_combine(&buffer, case, &mut tensors, run == 1, &stream).map_err(|e| err(&e))?,
            _ => graph.launch(&stream).map_err(|e| err(&e))?,
        }
        super::ep::settle(&buffer, &stream, "EP low-latency dispatch and combine").map_err(|e| err(&e))?;
        let what = |name: &str| format!("{how}: {name}");
        let count = download::<i32, i32>(tensors.recv_count.as_slice(), local).map_err(|e| err(&e))?;
        compare(&what("recv_count"), &count, &mine.recv_count, |e| format!("local expert {e}"))?;
        let stats = download::<i32, i32>(tensors.stats.as_slice(), local).map_err(|e| err(&e))?;
        let want_stats: Vec<i32> = mine.recv_count.iter().map(|c| c * (run as i32 + 1)).collect();
        compare(&what("cumulative_local_expert_recv_stats"), &stats, &want_stats, |e| format!("local expert {e}"))?;
        let ranges = download::<i64, i64>(tensors.handle.recv_layout_range(), local * ranks).map_err(|e| err(&e))?;
        compare(&what("layout_range"), &ranges, &mine.layout_range, |i| {
            format!("local expert {} source rank {}", i / ranks, i % ranks)
        })?;
        let info = download::<i32, i32>(tensors.handle.recv_src_info(), local * rows).map_err(|e| err(&e))?;
        let recv_x = tensors.recv_x.bytes(local * rows * row_bytes).map_err(|e| err(&e))?;
        let recv_scales = tensors.recv_x.scale_bits(local * rows * scales).map_err(|e| err(&e))?.unwrap_or_default();
        for le in 0..local {
            for i in 0..mine.recv_count[le] as usize {
                let (src, t) = (mine.src_rank[le * rows + i], mine.src_info[le * rows + i] as usize);
                let place = format!("local expert {le} row {i} (rank {src} token {t})");
                compare(&what("src_info"), &info[le * rows + i..][..1], &[t as i32], |_| place.clone())?;
                let source = &world[src].x[t * case.hidden..(t + 1) * case.hidden];
                let (want_row, want_scales): (Vec<u8>, Vec<u32>) = if case.fp8 {
                    let q =
                        model::quantize_token(&source.iter().map(|v| v.to_f32()).collect::<Vec<_>>(), case.round_scale);
                    (q.values, q.scales.iter().map(|s| s.to_bits()).collect())
                } else {
                    (source.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect(), Vec::new())
                };
                let got_row = &recv_x[(le * rows + i) * row_bytes..][..row_bytes];
                compare(&what("recv_x"), got_row, &want_row, |b| format!("byte {b} of {place}"))?;
                let got_scales: Vec<u32> = (0..scales).map(|j| recv_scales[(le * scales + j) * rows + i]).collect();
                compare(&what("recv_x_scales (f32 bits)"), &got_scales, &want_scales, |j| {
                    format!("scale {j} of {place}")
                })?;
            }
        }
        let combined = download::<bf16, bf16>(tensors.combined_x.as_slice(), case.tokens[rank] * case.hidden);
        let combined = bf16_bits(&combined.map_err(|e| err(&e))?);
        compare(&what("combined_x (bf16 bits)"), &combined, &want_combined, |i| {
            format!("token {} channel {}", i / case.hidden, i % case.hidden)
        })?;
    }
    buffer.check().map_err(|e| err(&e))
}

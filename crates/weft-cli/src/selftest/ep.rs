//! `weft selftest --only ep`: weft-ep's normal-mode calls on every rank against its CPU model,
//! element by element: the layout, the notify's counts, the handle, every received row, scale,
//! expert index, weight and source index, a cached-handle dispatch, and the combine, bit for
//! bit, run twice (it must give the same bits). Every rank rebuilds every rank's inputs from
//! the case's seed, so the whole world's model is computed locally.

use std::fmt::Debug;

use half::bf16;
use weft_core::Communicator;
use weft_ep::model::{self, RankRouting};
use weft_ep::{Buffer, nvl_bytes_hint};
use weft_gpu::{DeviceMemory, Stream};

use super::report::RankReport;
use crate::harness::ep::{
    self as harness, CombineTensors, DeviceInputs, EpCase, RankInputs, bf16_bits, download, poisoned, upload,
};

/// The cases, for `ranks` ranks: uneven token counts, FP8 with strided scales, routing skewed
/// onto one rank's experts (the other ranks and experts receive nothing), dropped top-k slots,
/// ranks with zero or one token, expert alignment, biases, and SM counts from 6 to 128.
fn cases(ranks: usize) -> Vec<EpCase> {
    let case = |name: &str, tokens: Vec<usize>, hidden, topk, experts: usize, fp8, num_sms| EpCase {
        name: format!("{name} (H={hidden}, top-{topk}, {experts} experts, {num_sms} SMs)"),
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
        seed: 0x5eed_0000 + hidden as u64 * 31 + num_sms as u64,
    };
    let uneven = case(
        "BF16, uneven tokens per rank",
        (0..ranks).map(|r| 256 + 37 * r).collect(),
        7168,
        8,
        32 * ranks,
        false,
        24,
    );
    let mut skewed = case(
        "FP8, skewed onto rank 0's experts, dropped slots, alignment 16",
        (0..ranks).map(|r| 129 + r).collect(),
        2048,
        4,
        8 * ranks,
        true,
        6,
    );
    skewed.hot = 0..8;
    skewed.drop_one_in = 5;
    skewed.biases = 1;
    skewed.expert_alignment = 16;
    let mut tiny = case(
        "BF16, 0 or 1 token per rank, two biases",
        (0..ranks).map(|r| r % 2).collect(),
        256,
        2,
        4 * ranks,
        false,
        32,
    );
    tiny.drop_one_in = 3;
    tiny.biases = 2;
    let experts = if 256 % ranks == 0 { 256 } else { 32 * ranks };
    let wide = case("FP8, DeepEP's shape at 512 tokens", vec![512; ranks], 7168, 8, experts, true, 128);
    vec![uneven, skewed, tiny, wide]
}

/// Runs every case on this rank and records one outcome per case.
pub(crate) fn run(comm: &Communicator, label: &str, report: &mut RankReport) {
    for case in cases(comm.world_size()) {
        let result = run_case(comm, &case);
        report.record(format!("{label}ep: {} on {} ranks", case.name, comm.world_size()), result);
        if let Err(e) = comm.barrier() {
            report.record(format!("{label}ep: barrier after {}", case.name), Err(e.to_string()));
            return;
        }
    }
}

/// `Err` naming the first of `got`'s elements that differs from `want` (placed by `locate`)
/// and how many differ.
fn compare<T: PartialEq + Debug>(
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

fn run_case(comm: &Communicator, case: &EpCase) -> Result<(), String> {
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
        Buffer::new(comm, nvl_bytes_hint(max_tokens.max(1), case.hidden, case.topk, ranks)).map_err(|e| err(&e))?;
    let inputs = DeviceInputs::upload(device, case, rank, &world[rank]).map_err(|e| err(&e))?;
    let d = harness::dispatch(&buffer, case, &inputs, &stream).map_err(|e| err(&e))?;
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
    harness::cached_dispatch(&buffer, case, &inputs, &d, Some(&cached), &stream).map_err(|e| err(&e))?;
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
        harness::combine(&buffer, case, &d, &tensors, &stream).map_err(|e| err(&e))?;
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

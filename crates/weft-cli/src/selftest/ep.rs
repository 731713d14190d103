//! `weft selftest --only ep`: weft-ep's normal-mode calls on every rank against its CPU model,
//! element by element (`harness::ep::check_case`), over cases chosen to reach the corners.

use weft_core::Communicator;

use super::report::RankReport;
use crate::harness::ep::{self as harness, EpCase};

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
        let result = harness::check_case(comm, &case);
        report.record(format!("{label}ep: {} on {} ranks", case.name, comm.world_size()), result);
        if let Err(e) = comm.barrier() {
            report.record(format!("{label}ep: barrier after {}", case.name), Err(e.to_string()));
            return;
        }
    }
}

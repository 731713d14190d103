//! `weft selftest --only ep`: weft-ep's normal-mode calls on every rank against its CPU model,
//! element by element (`harness::ep::check_case`, `harness::ep_ll::check_ll_case`), over cases
//! chosen to reach the corners.

use weft_core::Communicator;

use super::report::RankReport;
use crate::harness::ep::{self as harness, EpCase};
use crate::harness::ep_ll::{LlCase, check_ll_case};

/// The cases, for `ranks` ranks: uneven token counts, FP8 with strided scales, routing skewed
/// onto one rank's experts (the other ranks and experts receive nothing), dropped top-k slots,
/// ranks with zero or one token, expert alignment, biases, and SM counts from 6 to 128.
/// On a GPU shared by several ranks the widest case runs on 24 SMs: every rank's spinning
/// receiver blocks must leave room for the other ranks' senders.
fn cases(ranks: usize, shared_gpu: bool) -> Vec<EpCase> {
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
    let wide_sms = if shared_gpu { 24 } else { 128 };
    let wide = case("FP8, DeepEP's shape at 512 tokens", vec![512; ranks], 7168, 8, experts, true, wide_sms);
    vec![uneven, skewed, tiny, wide]
}

/// The low-latency cases: DeepEP's decoding shape with FP8 and dropped slots, BF16 with a few
/// tokens per rank, and power-of-two scales.
fn ll_cases(ranks: usize) -> Vec<LlCase> {
    let case = |name: &str, tokens: Vec<usize>, hidden, topk, experts: usize, max_tokens, fp8, num_sms| LlCase {
        name: format!(
            "low-latency {name} (H={hidden}, top-{topk}, {experts} experts, {max_tokens} max tokens, {num_sms} SMs)"
        ),
        tokens,
        hidden,
        topk,
        experts,
        max_tokens,
        fp8,
        round_scale: false,
        drop_one_in: 0,
        num_sms,
        seed: 0x11_0000 + hidden as u64 + max_tokens as u64,
    };
    let experts = if 256 % ranks == 0 { 256 } else { 32 * ranks };
    let mut decode =
        case("FP8, dropped slots", (0..ranks).map(|r| 128 - 3 * r).collect(), 7168, 8, experts, 128, true, 24);
    decode.drop_one_in = 100;
    let few = case("BF16, 1 + rank tokens", (0..ranks).map(|r| 1 + r).collect(), 2048, 4, 8 * ranks, 8, false, 4);
    let mut rounded = case("FP8, power-of-two scales", vec![64; ranks], 512, 6, 16 * ranks, 64, true, 8);
    rounded.round_scale = true;
    rounded.drop_one_in = 5;
    vec![decode, few, rounded]
}

/// Runs every case on this rank and records one outcome per case.
pub(crate) fn run(comm: &Communicator, label: &str, report: &mut RankReport) {
    let ranks = comm.world_size();
    let normal = cases(ranks, comm.shares_gpu())
        .into_iter()
        .map(|case| (case.name.clone(), Box::new(move |c: &Communicator| harness::check_case(c, &case)) as Check));
    let low_latency = ll_cases(ranks)
        .into_iter()
        .map(|case| (case.name.clone(), Box::new(move |c: &Communicator| check_ll_case(c, &case)) as Check));
    for (name, check) in normal.chain(low_latency) {
        let result = check(comm);
        let failed = result.is_err();
        report.record(format!("{label}ep: {name} on {ranks} ranks"), result);
        if let Err(e) = comm.barrier() {
            report.record(format!("{label}ep: barrier after {name}"), Err(e.to_string()));
            return;
        }
        // A wait that gave up stays recorded and would end every later wait at once: the
        // failure is reported above, and every rank's kernels have ended (the barrier).
        if failed && let Err(e) = comm.clear_device_failure() {
            report.record(format!("{label}ep: clearing the failure of {name}"), Err(e.to_string()));
            return;
        }
    }
}

/// One case's check on this rank.
type Check = Box<dyn Fn(&Communicator) -> Result<(), String>>;

//! `weft selftest --only ep`: weft-ep's normal-mode calls on every rank against its CPU model,
//! element by element (`harness::ep::check_case`, `harness::ep_ll::check_ll_case`), over cases
//! chosen to reach the corners; then, with the ranks split into two virtual nodes
//! (`WEFT_RANKS_PER_NODE`) joined by the emulated NIC in chaos mode, at three seeds, normal-mode
//! cases (the two hops: `model::dispatch_internode`, `model::combine_internode`) and the
//! low-latency cases again, so the kernels' puts and signals between nodes are checked against
//! the model.

use std::sync::Arc;

use weft_core::env::vars::WEFT_EMU_NET_CHAOS;
use weft_core::{Communicator, Env};

use super::report::RankReport;
use crate::harness::ep::{self as harness, EpCase, EpShape};
use crate::harness::ep_ll::{LlCase, check_ll_case};
use crate::harness::gin_backend::{CHAOS_SEED, GinBackend};

/// The cases, for `ranks` ranks: uneven token counts, FP8 with strided scales, routing skewed
/// onto one rank's experts (the other ranks and experts receive nothing), dropped top-k slots,
/// ranks with zero or one token, expert alignment, biases, and SM counts from 6 to 128.
/// On a GPU shared by several ranks the widest case runs on 24 SMs: every rank's spinning
/// receiver blocks must leave room for the other ranks' senders.
fn cases(ranks: usize, shared_gpu: bool) -> Vec<EpCase> {
    let case = |name: &str, tokens: Vec<usize>, hidden, topk, experts: usize, fp8, num_sms: u32| {
        EpCase::plain(
            format!("{name} (H={hidden}, top-{topk}, {experts} experts, {num_sms} SMs)"),
            EpShape { tokens, hidden, topk, experts },
            fp8,
            num_sms,
            0x5eed_0000 + hidden as u64 * 31 + u64::from(num_sms),
        )
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

/// The normal-mode cases between two nodes: BF16 with uneven tokens, FP8 skewed onto the first
/// node's experts with dropped slots, alignment and a bias, ranks of 0 or 1 token with two
/// biases, and many short rows; smaller than the one-node cases, since every row that crosses
/// goes through the emulated NIC.
fn net_cases(ranks: usize) -> Vec<EpCase> {
    let case = |name: &str, tokens: Vec<usize>, hidden: usize, topk: usize, experts: usize, fp8: bool| {
        EpCase::plain(
            format!("normal mode {name} (H={hidden}, top-{topk}, {experts} experts, 8 SMs)"),
            EpShape { tokens, hidden, topk, experts },
            fp8,
            8,
            0x2e7_0000 + hidden as u64 * 7 + topk as u64,
        )
    };
    let uneven =
        case("BF16, uneven tokens per rank", (0..ranks).map(|r| 64 + 13 * r).collect(), 2048, 8, 8 * ranks, false);
    let mut skewed = case(
        "FP8, skewed onto node 0, dropped slots, alignment 8",
        (0..ranks).map(|r| 33 + r).collect(),
        1024,
        4,
        4 * ranks,
        true,
    );
    skewed.hot = 0..2 * ranks;
    skewed.drop_one_in = 5;
    skewed.biases = 1;
    skewed.expert_alignment = 8;
    let mut tiny =
        case("BF16, 0 or 1 token per rank, two biases", (0..ranks).map(|r| r % 2).collect(), 256, 2, 2 * ranks, false);
    tiny.drop_one_in = 3;
    tiny.biases = 2;
    // Over a thousand short rows cross between each pair of rail peers: the most chunks the
    // rail hop splits a pair's rows into, each read as it lands.
    let many = case("BF16, many short rows", (0..ranks).map(|r| 1100 + 7 * r).collect(), 256, 4, 4 * ranks, false);
    vec![uneven, skewed, tiny, many]
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

/// Runs every case on this rank and records one outcome per case; then, on two virtual nodes,
/// the low-latency cases at each of [`net_seeds`] (see [`between_nodes`]).
pub(crate) fn run(comm: &Communicator, base: &Env, label: &str, report: &mut RankReport) {
    let ranks = comm.world_size();
    let normal = cases(ranks, comm.shares_gpu())
        .into_iter()
        .map(|case| (case.name.clone(), Box::new(move |c: &Communicator| harness::check_case(c, &case)) as Check));
    let low_latency = ll_cases(ranks)
        .into_iter()
        .map(|case| (case.name.clone(), Box::new(move |c: &Communicator| check_ll_case(c, &case)) as Check));
    if !run_checks(comm, &format!("{label}ep: "), normal.chain(low_latency), report) {
        return;
    }
    between_nodes(comm, base, label, report);
}

/// Runs `checks` in order on `comm`, recording `{prefix}{name} on {ranks} ranks` for each, with
/// a barrier after each; false if a barrier or the clearing of a failure failed (the rest of
/// the step cannot run).
fn run_checks(
    comm: &Communicator,
    prefix: &str,
    checks: impl Iterator<Item = (String, Check)>,
    report: &mut RankReport,
) -> bool {
    let ranks = comm.world_size();
    for (name, check) in checks {
        let result = check(comm);
        let failed = result.is_err();
        report.record(format!("{prefix}{name} on {ranks} ranks"), result);
        if let Err(e) = comm.barrier() {
            report.record(format!("{prefix}barrier after {name}"), Err(e.to_string()));
            return false;
        }
        // A wait that gave up stays recorded and would end every later wait at once: the
        // failure is reported above, and every rank's kernels have ended (the barrier).
        if failed && let Err(e) = comm.clear_device_failure() {
            report.record(format!("{prefix}clearing the failure of {name}"), Err(e.to_string()));
            return false;
        }
    }
    true
}

/// The chaos seeds of the runs between nodes: `WEFT_EMU_NET_CHAOS` when set (a number), else
/// [`CHAOS_SEED`], and the next two.
fn net_seeds(base: &Env) -> Vec<u64> {
    let first = base.var(&WEFT_EMU_NET_CHAOS).and_then(|v| v.trim().parse().ok()).unwrap_or(CHAOS_SEED);
    (0..3).map(|i| first.wrapping_add(i)).collect()
}

/// The environment of a run between nodes: `base` with `ranks` split into two virtual nodes
/// joined by the emulated NIC delivering out of order with `seed`.
fn net_env(base: &Env, ranks: usize, seed: u64) -> Env {
    let mut env = GinBackend::Chaos.env(base);
    env.set_var(&WEFT_EMU_NET_CHAOS, seed.to_string());
    env.ranks_per_node = Some(ranks / 2);
    env
}

/// The normal-mode cases of [`net_cases`] and the low-latency cases with the ranks split into
/// two virtual nodes (ranks 0..R/2 and R/2..R; one rank per node on 2 ranks, ranks sharing
/// GPUs as the run has them), over the emulated NIC in chaos mode, once per seed of
/// [`net_seeds`]: each on a sub-communicator of this one's bootstrap and device. Needs an even
/// number of ranks.
fn between_nodes(comm: &Communicator, base: &Env, label: &str, report: &mut RankReport) {
    let ranks = comm.world_size();
    if ranks < 2 || !ranks.is_multiple_of(2) {
        report.skip(format!("{label}ep between 2 nodes: needs an even number of ranks, the run has {ranks}"));
        return;
    }
    for seed in net_seeds(base) {
        let env = net_env(base, ranks, seed);
        let prefix = format!("{label}ep between 2 nodes x {} (emulated NIC, chaos seed {seed}): ", ranks / 2);
        let sub = match Communicator::new(Arc::clone(comm.bootstrap()), comm.device().clone(), env) {
            Ok(sub) => sub,
            Err(e) => {
                report.record(format!("{prefix}communicator set-up"), Err(e));
                return;
            }
        };
        let normal = net_cases(ranks)
            .into_iter()
            .map(|case| (case.name.clone(), Box::new(move |c: &Communicator| harness::check_case(c, &case)) as Check));
        let checks = ll_cases(ranks)
            .into_iter()
            .map(|case| (case.name.clone(), Box::new(move |c: &Communicator| check_ll_case(c, &case)) as Check));
        if !run_checks(&sub, &prefix, normal.chain(checks), report) {
            return;
        }
    }
}

/// One case's check on this rank.
type Check = Box<dyn Fn(&Communicator) -> Result<(), String>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_between_nodes_take_three_seeds_from_the_environment_or_the_fixed_one() {
        assert_eq!(net_seeds(&Env::default()), vec![CHAOS_SEED, CHAOS_SEED + 1, CHAOS_SEED + 2]);
        let mut chosen = Env::default();
        chosen.set_var(&WEFT_EMU_NET_CHAOS, "17");
        assert_eq!(net_seeds(&chosen), vec![17, 18, 19]);
    }

    #[test]
    fn a_run_between_nodes_splits_the_ranks_in_two_over_the_emulated_nic_in_chaos_mode() {
        for (ranks, per_node) in [(2, 1), (4, 2), (8, 4)] {
            let env = net_env(&Env::default(), ranks, 99);
            assert_eq!(env.ranks_per_node, Some(per_node));
            assert!(env.emulated_net.is_some());
            assert_eq!(env.var(&WEFT_EMU_NET_CHAOS), Some("99"));
        }
    }

    /// The normal-mode cases between nodes split their experts evenly over the ranks and the
    /// nodes, and their buffer (staging, rail regions) fits what a proxy command addresses.
    #[test]
    fn the_normal_cases_between_nodes_fit_the_device_communicators_heap() {
        for ranks in [2, 4, 8] {
            for case in net_cases(ranks) {
                assert!(case.experts.is_multiple_of(ranks) && case.tokens.len() == ranks, "{}", case.name);
                let max = case.tokens.iter().copied().max().unwrap_or(0).max(1);
                let nvl = weft_ep::nvl_bytes_hint_between_nodes(max, case.hidden, case.topk, ranks, ranks / 2);
                let rdma = weft_ep::rdma_bytes_hint(max, case.hidden, case.topk, ranks, ranks / 2);
                assert!(rdma > 0 && nvl + rdma < 1 << 30, "{}: {nvl} + {rdma} bytes", case.name);
            }
        }
    }

    /// The low-latency cases between nodes: their experts split evenly over the
    /// ranks, and every shape fits the buffer a proxy command can address (4 GiB).
    #[test]
    fn the_low_latency_cases_fit_the_device_communicators_heap() {
        for ranks in [2, 4, 8] {
            for case in ll_cases(ranks) {
                assert!(case.experts.is_multiple_of(ranks), "{}", case.name);
                let bytes = weft_ep::low_latency_net_bytes_hint(case.max_tokens, case.hidden, case.experts);
                assert!(bytes < 4 << 30, "{}: {bytes} bytes", case.name);
            }
        }
    }
}

//! `weft bench ep`: DeepEP's intranode test shape (4096 tokens of 7168 channels, top-8 of 256
//! experts per rank) through weft-ep's normal mode: FP8 and BF16 dispatch and BF16 combine at
//! several SM counts, one thread per rank of one process. Times are CUDA events around each
//! call with a cached handle (as DeepEP times it), averaged over the timed iterations; GB/s is
//! DeepEP's: received rows (those a rank sends itself included) × 2H bytes for BF16, × (1 +
//! 4/128) / 2 for FP8, and the BF16 figure for combine (DeepEP's `tests/test_intranode.py`). Then DeepEP's
//! low-latency test: `--ll-tokens` (128) tokens per rank, FP8 dispatch and combine each timed
//! as its send and receive kernels together, GB/s over the selected (token, expert) pairs:
//! `H + H/128 * 4 + 16` bytes each for dispatch, `2H` for combine (`tests/test_low_latency.py`),
//! at every SM count too. With `--nodes N` the ranks are N virtual nodes over the emulated NIC
//! (DeepEP's internode test): the normal mode runs in its two hops (docs/ep.md, "Normal mode
//! between nodes") and the low-latency mode through its puts, each row with the bytes the
//! rank's NIC sends and the call's α-β floor ([`super::ep_floor`]).

use std::process::ExitCode;
use std::sync::Arc;

use weft_bootstrap::InProcessBootstrap;
use weft_core::{Communicator, Env, LinkModel};
use weft_ep::{Buffer, nvl_bytes_hint, nvl_bytes_hint_between_nodes, rdma_bytes_hint};
use weft_gpu::{Device, Event, Stream};

use super::ep_floor::{NetRouting, net_floor, rail_floor};
use super::ep_report;
pub use super::ep_report::EpLine;
use crate::harness::ep::{self as harness, CombineTensors, DeviceInputs, EpCase, EpShape};
use crate::harness::ep_ll::{self, LlCase, LlTensors, check_ll_case};
use crate::harness::launch;
use crate::harness::start_line::StartLine;

/// Iterations before timing.
const WARMUPS: usize = 10;
/// Timed iterations.
const ITERATIONS: usize = 30;

/// Options of `weft bench ep`.
#[derive(Clone, Debug)]
pub struct EpBenchOptions {
    /// Tokens per rank.
    pub tokens: usize,
    /// Channels per token.
    pub hidden: usize,
    /// Experts per token.
    pub topk: usize,
    /// Experts of the group.
    pub experts: usize,
    /// SM counts to measure.
    pub sms: Vec<u32>,
    /// Tokens per rank of the low-latency test (0: skip it).
    pub ll_tokens: usize,
    /// Check every element of every configuration against the CPU model first.
    pub check: bool,
    /// GPUs, the ranks placed on them round-robin (threads of this process).
    pub gpus: usize,
    /// Ranks: one per GPU, or more, sharing the GPUs (`WEFT_SHARE_GPUS`): their times then say
    /// little of a machine with a GPU per rank, except where the emulated NIC's pace sets them.
    pub ranks: usize,
    /// Record the traced kernels and write a Chrome trace per line here (`--trace`).
    pub trace: Option<std::path::PathBuf>,
    /// Split the ranks into this many virtual nodes over the emulated NIC (`--nodes`).
    pub nodes: Option<usize>,
}

/// The emulated NIC of `--nodes` where the environment sets none: α = 2 µs, 50 GB/s.
pub const NODES_ALPHA_US: f64 = 2.0;
/// See [`NODES_ALPHA_US`].
pub const NODES_GBPS: f64 = 50.0;

/// `env` with `ranks` split into `nodes` virtual nodes (`WEFT_RANKS_PER_NODE`) over the
/// emulated NIC (`WEFT_EMU_NET_LATENCY_US` / `WEFT_EMU_NET_GBPS` as set, else
/// [`NODES_ALPHA_US`] and [`NODES_GBPS`]). Refuses a node count below 1 or not dividing
/// `ranks`, and a `WEFT_RANKS_PER_NODE` that splits the ranks otherwise.
pub fn virtual_nodes_env(mut env: Env, nodes: usize, ranks: usize) -> Result<Env, String> {
    if nodes == 0 || !ranks.is_multiple_of(nodes) {
        return Err(format!(
            "weft bench ep: --nodes {nodes} does not split {ranks} ranks evenly (a node count from 1 that divides {ranks})"
        ));
    }
    let per_node = ranks / nodes;
    if let Some(set) = env.ranks_per_node.filter(|&set| set != per_node) {
        return Err(format!(
            "weft bench ep: --nodes {nodes} puts {per_node} ranks in a node but WEFT_RANKS_PER_NODE is {set}: \
             unset it or make them agree"
        ));
    }
    env.ranks_per_node = Some(per_node);
    if env.emulated_net.is_none() {
        env.emulated_net = Some(LinkModel::new(NODES_ALPHA_US, Some(NODES_GBPS)));
    }
    Ok(env)
}

/// Runs the benchmark on `options.gpus` GPUs and prints a line per rank, operation and SM
/// count; `json` gets every line, `plot` a figure of them.
pub fn run(
    options: &EpBenchOptions,
    json: Option<&std::path::Path>,
    plot: Option<&std::path::Path>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut env = super::trace::traced_env(Env::from_process()?, options.trace.as_deref(), "ep")?;
    let ranks = options.ranks;
    if ranks == 0 {
        return Err("weft bench ep: --ranks 0: a run has at least 1 rank".into());
    }
    if let Some(nodes) = options.nodes {
        env = virtual_nodes_env(env, nodes, ranks)?;
    }
    if ranks > options.gpus {
        env.share_gpus = true;
        println!(
            "# {ranks} ranks share {} GPU(s) as threads of one process (WEFT_SHARE_GPUS): the kernels compete for SMs and memory",
            options.gpus
        );
    }
    let network = match (env.ranks_per_node, env.emulated_net) {
        (Some(per_node), Some(link)) if per_node < ranks => format!(
            ", {} nodes over the emulated NIC (α {:.1} µs, {})",
            ranks.div_ceil(per_node),
            link.latency.as_secs_f64() * 1e6,
            link.bytes_per_second.map_or("uncapped".to_string(), |b| format!("{:.0} GB/s", b as f64 / 1e9)),
        ),
        (Some(per_node), None) if per_node < ranks => format!(", {} nodes", ranks.div_ceil(per_node)),
        _ => String::new(),
    };
    let shared = Arc::new(options.clone());
    let outcomes = launch::run_rank_threads(ranks, "weft-ep", move |rank, bootstrap| {
        measure_rank(rank, bootstrap, &env, &shared).map_err(|e| e.to_string())
    })?;
    let mut lines = Vec::new();
    let mut failed = false;
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(Ok(mut rank_lines)) => lines.append(&mut rank_lines),
            Ok(Err(e)) => {
                eprintln!("rank {rank}: {e}");
                failed = true;
            }
            Err(_) => {
                eprintln!("rank {rank}: the rank's thread panicked");
                failed = true;
            }
        }
    }
    let title = format!(
        "weft bench ep: {} ranks{network}, {} tokens per rank, hidden {}, top-{}, {} experts (DeepEP's GB/s)",
        ranks, options.tokens, options.hidden, options.topk, options.experts
    );
    ep_report::print_table(&title, &lines);
    if let Some(path) = json {
        ep_report::write_json(path, &lines)?;
    }
    if let Some(path) = plot {
        ep_report::write_plot(path, &title, &lines)?;
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn measure_rank(
    rank: usize,
    bootstrap: Arc<InProcessBootstrap>,
    env: &Env,
    options: &EpBenchOptions,
) -> Result<Vec<EpLine>, Box<dyn std::error::Error>> {
    let device = Device::new(rank % options.gpus)?;
    let comm = Communicator::new(bootstrap, device.clone(), env.clone())?;
    let stream = Stream::new(&device)?;
    let ranks = comm.world_size();
    let start_line = StartLine::new(&comm)?;
    let mut lines = Vec::new();
    let (tokens, hidden, topk) = (options.tokens, options.hidden, options.topk);
    // Between nodes (virtual ones, over the emulated NIC) the normal mode runs its two hops,
    // each row with the α-β floor of its rail hop.
    let link = comm.env().emulated_net.filter(|_| comm.topology().spans_nodes());
    let per_node = (0..ranks).filter(|&p| comm.topology().same_node(p)).count().max(1);
    {
        let buffer = if comm.topology().spans_nodes() {
            let nvl = nvl_bytes_hint_between_nodes(tokens, hidden, topk, ranks, per_node);
            Buffer::new(&comm, nvl, rdma_bytes_hint(tokens, hidden, topk, ranks, per_node))?
        } else {
            Buffer::new(&comm, nvl_bytes_hint(tokens, hidden, topk, ranks), 0)?
        };
        for fp8 in [true, false] {
            for &sms in &options.sms {
                let shape = EpShape {
                    tokens: vec![options.tokens; ranks],
                    hidden: options.hidden,
                    topk: options.topk,
                    experts: options.experts,
                };
                let name = format!("{} {sms} SMs", if fp8 { "FP8" } else { "BF16" });
                let case = EpCase::plain(name, shape, fp8, sms, 0xbe_0000 + u64::from(sms));
                if options.check {
                    harness::check_case(&comm, &case)?;
                }
                let inputs = DeviceInputs::upload(&device, &case, rank, &case.inputs(rank))?;
                // The timed dispatch is a cached one (no top-k travels); the combine sums the
                // received weights.
                let floor = match link {
                    Some(link) => {
                        let topk_idx: Vec<Vec<i64>> = (0..ranks).map(|r| case.inputs(r).topk_idx).collect();
                        let nodes: Vec<usize> = (0..ranks).map(|r| r / per_node).collect();
                        let routing = NetRouting {
                            topk_idx: &topk_idx,
                            topk,
                            experts: options.experts,
                            nodes: &nodes,
                            hidden,
                            fp8,
                        };
                        rail_floor(&routing, rank, link, 0, topk)
                    }
                    None => None,
                };
                let mut dispatched = harness::dispatch(&buffer, &case, &inputs, &stream)?;
                let rows = dispatched.rows();
                let bf16_bytes = (rows * options.hidden * 2) as f64;
                let payload = if fp8 { "fp8" } else { "bf16" };
                buffer.take_trace()?; // the check's and the first dispatch's records
                let us = time(&comm, &stream, &start_line, || {
                    harness::cached_dispatch(&buffer, &case, &inputs, &mut dispatched, None, &stream)
                })?;
                write_trace(options, &comm, &buffer, &format!("ep-{payload}-{sms}sm-dispatch"))?;
                let bytes = if fp8 { bf16_bytes * (1.0 + 4.0 / 128.0) / 2.0 } else { bf16_bytes };
                lines.push(EpLine {
                    rank,
                    op: "dispatch",
                    payload,
                    sms,
                    recv_tokens: rows,
                    us,
                    gbps: bytes / us / 1e3,
                    net_bytes: floor.map(|f| f.dispatch_bytes),
                    floor_us: floor.map(|f| f.dispatch_us),
                });
                if !fp8 {
                    let mut tensors = CombineTensors::new(&device, &case, (rows, None), &[], options.tokens)?;
                    let us = time(&comm, &stream, &start_line, || {
                        harness::combine(&buffer, &case, &dispatched, &mut tensors, &stream)
                    })?;
                    write_trace(options, &comm, &buffer, &format!("ep-{payload}-{sms}sm-combine"))?;
                    lines.push(EpLine {
                        rank,
                        op: "combine",
                        payload,
                        sms,
                        recv_tokens: rows,
                        us,
                        gbps: bf16_bytes / us / 1e3,
                        net_bytes: floor.map(|f| f.combine_bytes),
                        floor_us: floor.map(|f| f.combine_us),
                    });
                }
                comm.barrier()?;
            }
        }
        drop(buffer);
    }
    if options.ll_tokens > 0 {
        lines.extend(measure_low_latency(&comm, &stream, &start_line, options)?);
    }
    Ok(lines)
}

/// The low-latency test at every SM count: FP8 dispatch and BF16 combine, each timed as its
/// send and receive kernels together, in CUDA graphs (as decoding runs them, and close to
/// DeepEP's kernel times: no host launch work or rank skew inside a call).
fn measure_low_latency(
    comm: &Communicator,
    stream: &Stream,
    start_line: &StartLine,
    options: &EpBenchOptions,
) -> Result<Vec<EpLine>, Box<dyn std::error::Error>> {
    let (rank, ranks) = (comm.rank(), comm.world_size());
    let case = |num_sms| LlCase {
        name: format!("low-latency {num_sms} SMs"),
        tokens: vec![options.ll_tokens; ranks],
        hidden: options.hidden,
        topk: options.topk,
        experts: options.experts,
        max_tokens: options.ll_tokens,
        fp8: true,
        round_scale: false,
        drop_one_in: 0,
        num_sms,
        seed: 0x11_be00,
    };
    let mut lines = Vec::new();
    // Between nodes, the α-β floor of each call on the emulated NIC, from every rank's routing
    // (the same at every SM count: the routing's seed does not change).
    let floor = match comm.env().emulated_net.filter(|_| comm.topology().spans_nodes()) {
        Some(link) => {
            let c = case(weft_ep::DEFAULT_NUM_SMS);
            let topk_idx: Vec<Vec<i64>> = (0..ranks).map(|r| c.inputs(r).topk_idx).collect();
            let nodes = (0..ranks)
                .map(|r| comm.topology().node(r).ok_or_else(|| format!("rank {r} has no node")))
                .collect::<Result<Vec<_>, _>>()?;
            let routing = NetRouting {
                topk_idx: &topk_idx,
                topk: options.topk,
                experts: options.experts,
                nodes: &nodes,
                hidden: options.hidden,
                fp8: c.fp8,
            };
            net_floor(&routing, rank, link)
        }
        None => None,
    };
    // The buffer's size does not depend on the SM count.
    let buffer = Buffer::new(comm, 0, case(weft_ep::DEFAULT_NUM_SMS).rdma_bytes(comm))?;
    for &sms in &options.sms {
        let case = case(sms);
        if options.check {
            check_ll_case(comm, &case)?;
        }
        let inputs = case.inputs(rank);
        let pairs = inputs.topk_idx.iter().filter(|&&e| e >= 0).count();
        let mut t = LlTensors::new(comm.device(), &case, rank, &inputs)?;
        buffer.take_trace()?; // the check's records
        let dispatch_us =
            time_captured(comm, stream, start_line, || ep_ll::dispatch(&buffer, &case, &mut t, false, stream))?;
        write_trace(options, comm, &buffer, &format!("ep-{sms}sm-ll-dispatch"))?;
        let combine_us =
            time_captured(comm, stream, start_line, || ep_ll::combine(&buffer, &case, &mut t, false, stream))?;
        write_trace(options, comm, &buffer, &format!("ep-{sms}sm-ll-combine"))?;
        let dispatch_bytes = (pairs * (options.hidden + options.hidden / 128 * 4 + 16)) as f64;
        let combine_bytes = (pairs * options.hidden * 2) as f64;
        let line = |op, payload, us: f64, bytes: f64, net: Option<(u64, f64)>| EpLine {
            rank,
            op,
            payload,
            sms,
            recv_tokens: pairs,
            us,
            gbps: bytes / us / 1e3,
            net_bytes: net.map(|n| n.0),
            floor_us: net.map(|n| n.1),
        };
        let dispatch_net = floor.map(|f| (f.dispatch_bytes, f.dispatch_us));
        let combine_net = floor.map(|f| (f.combine_bytes, f.combine_us));
        lines.push(line("ll-dispatch", "fp8", dispatch_us, dispatch_bytes, dispatch_net));
        lines.push(line("ll-combine", "bf16", combine_us, combine_bytes, combine_net));
        comm.barrier()?;
    }
    Ok(lines)
}

/// With `--trace`, writes what `buffer`'s kernels recorded since the last take as the trace
/// `name` of this rank.
fn write_trace(
    options: &EpBenchOptions,
    comm: &Communicator,
    buffer: &Buffer,
    name: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = &options.trace {
        super::trace::write_row(dir, name, comm.rank(), comm.world_size(), buffer.take_trace()?)?;
    }
    Ok(())
}

/// Calls per graph of [`time_captured`].
const CAPTURED_CALLS: usize = 10;
/// Timed replays of that graph.
const REPLAYS: usize = 3;

/// Average µs of `call` captured [`CAPTURED_CALLS`] times in one CUDA graph, replayed once
/// untimed and then [`REPLAYS`] times between events, after a barrier and behind
/// `start_line`, so the ranks' GPUs start the timed replays together.
fn time_captured(
    comm: &Communicator,
    stream: &Stream,
    start_line: &StartLine,
    mut call: impl FnMut() -> Result<(), weft_ep::EpError>,
) -> Result<f64, Box<dyn std::error::Error>> {
    stream.begin_capture()?;
    // End the capture whatever happened, so the stream is usable for the error's report.
    let captured: Result<(), weft_ep::EpError> = (0..CAPTURED_CALLS).try_for_each(|_| call());
    let graph = stream.end_capture()?;
    captured?;
    graph.launch(stream)?;
    stream.wait_idle(comm.env().device_timeout, "EP bench graph")?;
    comm.barrier()?;
    let us =
        bracket(comm, stream, start_line, || (0..REPLAYS).try_for_each(|_| graph.launch(stream)).map_err(Into::into))?;
    comm.check_device()?;
    Ok(us / (REPLAYS * CAPTURED_CALLS) as f64)
}

/// Average µs of `call` over [`ITERATIONS`] after [`WARMUPS`], each bracketed by events on
/// `stream` behind `start_line`; every rank runs the same iterations.
fn time(
    comm: &Communicator,
    stream: &Stream,
    start_line: &StartLine,
    mut call: impl FnMut() -> Result<(), weft_ep::EpError>,
) -> Result<f64, Box<dyn std::error::Error>> {
    let mut total = 0.0;
    for i in 0..WARMUPS + ITERATIONS {
        comm.settle_before_launch()?;
        let us = bracket(comm, stream, start_line, || call().map_err(Into::into))?;
        if i >= WARMUPS {
            total += us;
        }
    }
    comm.check_device()?;
    Ok(total / ITERATIONS as f64)
}

/// µs between two events recorded on `stream` around what `enqueue` puts on it, once the
/// stream is idle. The first event follows `start_line`: the bracket holds no wait for a
/// rank that launched later.
fn bracket(
    comm: &Communicator,
    stream: &Stream,
    start_line: &StartLine,
    enqueue: impl FnOnce() -> Result<(), Box<dyn std::error::Error>>,
) -> Result<f64, Box<dyn std::error::Error>> {
    let device = comm.device();
    let (start, end) = (Event::new(device)?, Event::new(device)?);
    start_line.enqueue(stream)?;
    start.record(stream)?;
    enqueue()?;
    end.record(stream)?;
    stream.wait_idle(comm.env().device_timeout, "EP bench call")?;
    Ok(f64::from(start.elapsed_ms(&end)?) * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
    }

    #[test]
    fn nodes_split_the_ranks_over_the_issues_nic_unless_the_environment_sets_one() {
        let two = virtual_nodes_env(Env::default(), 2, 8).unwrap();
        assert_eq!(two.ranks_per_node, Some(4));
        assert_eq!(two.emulated_net, Some(LinkModel::new(2.0, Some(50.0))));
        let one = virtual_nodes_env(Env::default(), 1, 2).unwrap();
        assert_eq!(one.ranks_per_node, Some(2));
        let set = env(&[("WEFT_EMU_NET_LATENCY_US", "5"), ("WEFT_EMU_NET_GBPS", "25"), ("WEFT_RANKS_PER_NODE", "1")]);
        let kept = virtual_nodes_env(set, 2, 2).unwrap();
        assert_eq!((kept.ranks_per_node, kept.emulated_net), (Some(1), Some(LinkModel::new(5.0, Some(25.0)))));
    }

    #[test]
    fn nodes_that_do_not_split_the_ranks_or_disagree_with_the_environment_are_refused() {
        for (nodes, ranks) in [(0, 2), (3, 2), (3, 8), (16, 8)] {
            let e = virtual_nodes_env(Env::default(), nodes, ranks).unwrap_err();
            assert!(e.contains(&format!("--nodes {nodes}")) && e.contains(&format!("{ranks} ranks")), "{e}");
        }
        let e = virtual_nodes_env(env(&[("WEFT_RANKS_PER_NODE", "2")]), 2, 2).unwrap_err();
        assert!(e.contains("WEFT_RANKS_PER_NODE is 2"), "{e}");
    }
}

//! The `weft` command: parses the command line and hands each subcommand to its module of
//! [`weft_cli`] (whose charter says what the crate owns).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weft_cli::selftest::{Mode, SelftestOptions, Step};

#[derive(Parser, Debug)]
#[command(name = "weft", version, about = "weft: GPU communication for AI inference and training")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the CUDA installation, GPUs, peer access and kernel cache.
    Info,
    /// Run the GPU suite (on a machine without a GPU: the CPU part, and say so).
    Selftest {
        /// Number of GPUs to use (default: all visible).
        #[arg(long)]
        gpus: Option<usize>,
        /// One process per GPU, one process driving all GPUs with threads, or both.
        #[arg(long, value_enum, default_value_t = Mode::Both)]
        mode: Mode,
        /// Run only these groups of tests (comma-separated; default: every group but
        /// `multinode`, which runs only when named).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<Step>,
        /// Ranks, placed on the GPUs round-robin (default: one per GPU). With more ranks than
        /// GPUs, the thread mode lets ranks share a GPU (`WEFT_SHARE_GPUS=1`: grids shrink so
        /// every rank's kernels are resident at once; a check of correctness, not of speed);
        /// the process mode needs `WEFT_SHARE_GPUS=1` or virtual nodes that keep the ranks
        /// sharing a GPU apart (`WEFT_RANKS_PER_NODE`), and its kernels time-slice.
        #[arg(long)]
        ranks: Option<usize>,
    },
    /// Random collectives for a bounded time, every element checked on every rank: collectives,
    /// counts (odd ones included), types, operators, in and out of place, eager and CUDA-graph
    /// replays, algorithms forced at random through the selector. Ends with one line: calls,
    /// bytes, wrong elements, the slowest call and the seed to replay it; exits nonzero on any
    /// wrong element or failed call. Without a GPU, the calls weft-plan's CPU interpreter can
    /// run run there, and it says so.
    Soak {
        /// Minutes to run for.
        #[arg(long, default_value_t = 1.0)]
        minutes: f64,
        /// Seed of the calls (default: a random one, printed).
        #[arg(long)]
        seed: Option<u64>,
        /// Run only call K of the seed's sequence (what a failure or the slowest call names).
        #[arg(long, value_name = "K")]
        only_call: Option<u64>,
        /// Largest buffer of a call (e.g. 8M).
        #[arg(long, default_value = "8M")]
        max_bytes: String,
        /// Number of GPUs to use (default: all visible).
        #[arg(long)]
        gpus: Option<usize>,
        /// Ranks, placed on the GPUs round-robin (default: one per GPU; without a GPU, 4 host
        /// threads). More ranks than GPUs share them (WEFT_SHARE_GPUS=1).
        #[arg(long)]
        ranks: Option<usize>,
        /// One process per rank, threads of one process, or both one after the other.
        #[arg(long, value_enum, default_value_t = Mode::Processes)]
        mode: Mode,
    },
    /// Measure a collective against NCCL in the same run (nccl-tests style), or the proxy layer:
    /// `fifo` (FIFO pushes per second per GPU and push latency) and `p2p --channel memory|port`
    /// (one-direction bandwidth between GPUs 0 and 1), or weft-gin: `gin` (put + signal latency
    /// and bandwidth over LSA and the emulated NIC, the AllToAll example against its α-β floor;
    /// 2 ranks by default, `--ranks` more, as threads). A collective starts one process per GPU
    /// itself, or runs under torchrun: each process one rank on GPU LOCAL_RANK, rank 0 reporting.
    Bench {
        /// Collective: allreduce, allgather, reducescatter, alltoall, broadcast, reduce (root
        /// --root) or sendrecv (to the next rank, from the previous one); or fifo, or p2p; or ep (MoE
        /// dispatch and combine, DeepEP's intranode test); or gin.
        collective: String,
        #[command(flatten)]
        proxy: Box<ProxyBenchArgs>,
        #[command(flatten)]
        sweep: Sweep,
        /// Time calls captured in CUDA graphs.
        #[arg(long)]
        graph: bool,
        /// Check every element against a float64 reference (NCCL's too with --nccl).
        #[arg(long)]
        check: bool,
        /// Measure NCCL (libnccl.so.2) in the same run.
        #[arg(long)]
        nccl: bool,
        /// Register weft's buffers as windows, so eager calls go zero-copy too.
        #[arg(long)]
        windows: bool,
        /// Also measure NCCL with its buffers from ncclMemAlloc in symmetric windows
        /// (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC), in a column of its own (implies
        /// --nccl).
        #[arg(long)]
        nccl_windows: bool,
        /// Time calls in place (nccl-tests' layout) instead of out of place; --check checks
        /// both either way.
        #[arg(long)]
        in_place: bool,
        /// Also time this weft algorithm of the collective in the same run (e.g. `ring` while
        /// WEFT_ALGO_ALLREDUCE=plan:ring_allreduce picks the plan): a table of both times and
        /// the overhead follows.
        #[arg(long)]
        versus: Option<String>,
        /// Write the rows as JSON.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Plot into this PNG (SVG if it ends in .svg): time and bus bandwidth against size (weft
        /// and NCCL); for ep, GB/s and low-latency µs per operation, a series per SM count.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
        /// Ranks (collectives and ep, default one per GPU; gin, default 2). More ranks than GPUs run as
        /// threads of this process sharing the GPUs round-robin (WEFT_SHARE_GPUS): their times compare the
        /// algorithms of one run (--versus) and nothing else (ep between virtual nodes: the emulated NIC's
        /// pace still holds); NCCL cannot run so.
        #[arg(long)]
        ranks: Option<usize>,
        /// Timed trials per size (collectives and gin; default 7): every contender (weft, NCCL, …) warmed
        /// up, then timed once per round in an order that reverses each round; the table shows
        /// the median and the min-max over the trials.
        #[arg(long)]
        trials: Option<usize>,
        /// Record the traced kernels (WEFT_TRACE) and write one Chrome/Perfetto trace per row
        /// and weft contender into this folder (collectives: `<collective>-<bytes>-<contender>`;
        /// ep: `ep-<sms>sm-<operation>`, one file per rank). The timings are then of the traced
        /// kernels; docs/trace.md.
        #[arg(long)]
        trace: Option<std::path::PathBuf>,
        /// Collectives across nodes: the model column uses the network α and β of this `weft
        /// model calibrate` file (e.g. fitted from `weft bench p2p --channel port` across the
        /// nodes, the proxy's cost per crossing included) instead of the emulated NIC's
        /// variables, and covers a real network (TCP, verbs) too.
        #[arg(long)]
        model: Option<std::path::PathBuf>,
        /// The root of broadcast and reduce, a rank below the ranks (NCCL and the check use it
        /// too).
        #[arg(long, default_value_t = 0)]
        root: u32,
    },
    /// Time every algorithm of the collectives at every size (and HB block counts) on this
    /// machine and write the tuning table the selector reads (WEFT_TUNING_FILE). With
    /// WEFT_RANKS_PER_NODE below the GPU count: the AllReduces across those virtual nodes,
    /// written as rules for that node count.
    Tune {
        /// Collectives (comma-separated; default: all).
        #[arg(long, value_delimiter = ',')]
        collectives: Vec<String>,
        #[command(flatten)]
        sweep: Sweep,
        /// HB block counts to try (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "64,128")]
        hb_blocks: Vec<u32>,
        /// Where to write the table.
        #[arg(short, long, default_value = "weft-tuning.json")]
        out: std::path::PathBuf,
        /// Write rules for every element type (default: only for the type measured, --dtype).
        #[arg(long)]
        any_dtype: bool,
        /// Largest size whose results are checked (every element, every rank) before it is
        /// timed; an algorithm with a wrong element is left out of the table. LL algorithms are
        /// checked at every size. 0: no check.
        #[arg(long, default_value = "16M")]
        check_max: String,
        /// Time the LL128 algorithms (`ll128`) even where the GPUs are not all NVLink peers
        /// (between NVLink peers, as NVML reports them, they are timed anyway).
        #[arg(long)]
        with_ll128: bool,
    },
    /// Compile, verify or show algorithm plans.
    Plan {
        #[command(subcommand)]
        action: PlanAction,
    },
    /// The α-β cost model and event simulator of the multi-node AllReduce algorithms (ring,
    /// all-pairs, 2PH, NVRAR, NCCL's ring and tree): `calibrate` from benchmark JSON, `predict`
    /// for N nodes of G GPUs. No GPU needed.
    Model {
        #[command(subcommand)]
        action: weft_cli::model_cmd::ModelAction,
    },
    /// Internal: one rank of `weft tune`.
    #[command(hide = true)]
    TuneWorker,
    /// Internal: one rank of `weft bench`.
    #[command(hide = true)]
    BenchWorker,
    /// Internal: one rank of `weft bench fifo` / `weft bench p2p`.
    #[command(hide = true)]
    BenchProxyWorker,
    /// Internal: one rank of `weft selftest --mode processes` (reads torchrun variables).
    #[command(hide = true)]
    SelftestWorker,
    /// Internal: one rank of `weft soak --mode processes`.
    #[command(hide = true)]
    SoakWorker,
    /// Write (or with --check, verify) the generated device headers: the shared layouts
    /// (device/include/weft/generated/types.cuh), the trace phases
    /// (device/include/weft/generated/trace.cuh) and every kernel set's prototypes
    /// (device/include/weft/generated/kernels/).
    GenHeader {
        /// Repository root.
        #[arg(long, default_value = ".")]
        root: std::path::PathBuf,
        /// Fail if the checked-in header differs instead of writing it.
        #[arg(long)]
        check: bool,
    },
    /// Join kernel traces (WEFT_TRACE, `weft bench --trace`: one file per rank) into one
    /// Chrome/Perfetto trace, every file moved onto the earliest origin (docs/trace.md).
    TraceMerge {
        /// Where to write the joined trace.
        #[arg(short, long)]
        out: std::path::PathBuf,
        /// The traces to join.
        #[arg(required = true)]
        traces: Vec<std::path::PathBuf>,
    },
}

/// The sizes, type, operator and GPUs of a sweep (`weft bench`, `weft tune`).
#[derive(clap::Args, Debug)]
struct Sweep {
    /// Smallest size (e.g. 1K).
    #[arg(short = 'b', long, default_value = "1K")]
    min_bytes: String,
    /// Largest size (e.g. 1G).
    #[arg(short = 'e', long, default_value = "1G")]
    max_bytes: String,
    /// Size multiplier.
    #[arg(short = 'f', long, default_value_t = 2)]
    factor: usize,
    /// Element type.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Operator (of the reducing collectives).
    #[arg(long, default_value = "sum")]
    op: String,
    /// GPUs (default: all).
    #[arg(long)]
    gpus: Option<usize>,
}

/// The options of `weft bench fifo` and `weft bench p2p`.
#[derive(clap::Args, Debug)]
struct ProxyBenchArgs {
    /// fifo: proxy thread counts to measure, each thread serving a FIFO of its own.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    threads: Vec<usize>,
    /// fifo: pushes per GPU per timed run (default 1048576).
    #[arg(long)]
    pushes: Option<u64>,
    /// fifo: pushing GPU thread counts to measure (default 1,132,1056,4224).
    #[arg(long, value_delimiter = ',')]
    pushers: Option<Vec<u32>>,
    /// fifo: pushing lanes per warp, 1 (lane 0) or 32 (every lane).
    #[arg(long, default_value_t = 1)]
    lanes: u32,
    /// p2p: memory (MemoryChannel put) or port (PortChannel put through the copy engine).
    #[arg(long)]
    channel: Option<String>,
    /// ep: SM counts of the dispatch and combine kernels to measure.
    #[arg(long, value_delimiter = ',', default_value = "24,32,64,128")]
    sms: Vec<u32>,
    /// ep: tokens per rank.
    #[arg(long, default_value_t = 4096)]
    tokens: usize,
    /// ep: channels per token.
    #[arg(long, default_value_t = 7168)]
    hidden: usize,
    /// ep: experts per token.
    #[arg(long, default_value_t = 8)]
    topk: usize,
    /// ep: experts of the group.
    #[arg(long, default_value_t = 256)]
    experts: usize,
    /// ep: tokens per rank of the low-latency test (0: skip it).
    #[arg(long, default_value_t = 128)]
    ll_tokens: usize,
    /// ep: split the ranks into N virtual nodes (WEFT_RANKS_PER_NODE = ranks / N) over the
    /// emulated NIC (WEFT_EMU_NET_LATENCY_US / WEFT_EMU_NET_GBPS, else α = 2 µs and 50 GB/s);
    /// the normal mode runs in two hops and the low-latency mode through its puts, each row
    /// with its α-β floor.
    #[arg(long, value_name = "N")]
    nodes: Option<usize>,
}

/// A parsed [`Sweep`] on `gpus` of the GPUs available here (0: none here).
struct ParsedSweep {
    min_bytes: usize,
    max_bytes: usize,
    factor: usize,
    dtype: weft_types::DataType,
    op: weft_types::ReduceOp,
    gpus: usize,
}

impl Sweep {
    /// Parses the sweep; `gpus` is 0 when no GPU is available here.
    fn parse(&self) -> Result<ParsedSweep, Box<dyn std::error::Error>> {
        use weft_cli::harness::sweep::{parse_dtype, parse_op, parse_size_range};
        let parsed = parse_size_range(&self.min_bytes, &self.max_bytes)?;
        let dtype = parse_dtype(&self.dtype).map_err(|e| format!("--dtype: {e}"))?;
        let op = parse_op(&self.op).map_err(|e| format!("--op: {e}"))?;
        let available = weft_gpu::Device::count().unwrap_or(0);
        Ok(ParsedSweep {
            min_bytes: parsed.0,
            max_bytes: parsed.1,
            factor: self.factor,
            dtype,
            op,
            gpus: if available == 0 { 0 } else { self.gpus.unwrap_or(available).clamp(1, available) },
        })
    }
}

#[derive(Subcommand, Debug)]
enum PlanAction {
    /// Compile a shipped algorithm into a JSON execution plan.
    Compile {
        /// Algorithm name.
        #[arg(value_parser = clap::builder::PossibleValuesParser::new(weft_cli::plan_cmd::algorithm_names()))]
        algorithm: String,
        /// Ranks.
        #[arg(long, default_value_t = 4)]
        ranks: u32,
        /// Ranks per node (hierarchical algorithms).
        #[arg(long, default_value_t = 2)]
        ranks_per_node: u32,
        /// Instances (parallel copies of every chunk's path).
        #[arg(long, default_value_t = 1)]
        instances: u32,
        /// Tiles of a pipelined loop (each instance's part moved in this many steps).
        #[arg(long, default_value_t = 1)]
        tiles: u32,
        /// Root (broadcast).
        #[arg(long, default_value_t = 0)]
        root: u32,
        /// Output file (default: stdout).
        #[arg(short, long)]
        out: Option<std::path::PathBuf>,
    },
    /// Load a plan, validate every limit and verify it computes its collective (and whether it
    /// stays correct in place with peers writing the user buffers).
    Verify {
        /// Plan file.
        plan: std::path::PathBuf,
    },
    /// Print a plan's per-rank, per-thread-block listing, and draw its operation DAG (every
    /// operation by rank, thread block and depth; signal → wait, wait_tb and barrier edges).
    Show {
        /// Plan file.
        plan: std::path::PathBuf,
        /// Write the DAG as Graphviz DOT to this file.
        #[arg(long)]
        dot: Option<std::path::PathBuf>,
        /// Write the DAG as a self-contained SVG drawing to this file.
        #[arg(long)]
        svg: Option<std::path::PathBuf>,
    },
}

/// Gives CUDA its 32 hardware queues unless the user chose a count
/// (`weft_core::cuda_queues_ok` says why), before CUDA starts; worker processes inherit it.
/// Setting a variable of this process is unsound once a second thread may read the
/// environment, so the command runs itself again in its place (`exec`, same process id and
/// arguments) with the variable set; if that fails, it carries on without.
fn raise_cuda_queues() {
    use std::os::unix::process::CommandExt;
    use weft_core::{CUDA_QUEUES_VAR, CUDA_QUEUES_WANTED};
    if std::env::var_os(CUDA_QUEUES_VAR).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let mut again = std::process::Command::new(exe);
    if let Some(name) = args.next() {
        again.arg0(name);
    }
    // Only returns on failure.
    let failed = again.args(args).env(CUDA_QUEUES_VAR, CUDA_QUEUES_WANTED.to_string()).exec();
    eprintln!("weft: could not run again with {CUDA_QUEUES_VAR}={CUDA_QUEUES_WANTED}: {failed}");
}

fn main() -> ExitCode {
    raise_cuda_queues();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Info => weft_cli::info::run(),
        Command::Selftest { gpus, mode, only, ranks } => {
            weft_cli::selftest::run(&SelftestOptions { gpus, mode, only, ranks })
        }
        Command::SelftestWorker => weft_cli::selftest::run_worker(),
        Command::Soak { minutes, seed, only_call, max_bytes, gpus, ranks, mode } => {
            soak(minutes, seed, only_call, &max_bytes, weft_cli::soak::Layout { gpus, ranks, mode })
        }
        Command::SoakWorker => weft_cli::soak::run_worker(),
        Command::BenchWorker => weft_cli::bench::run_worker(),
        Command::BenchProxyWorker => weft_cli::bench::proxy::run_worker(),
        Command::TuneWorker => weft_cli::tune::run_worker(),
        Command::Tune { collectives, sweep, hb_blocks, out, any_dtype, check_max, with_ll128 } => {
            tune(&collectives, &sweep, hb_blocks, &out, any_dtype, &check_max, with_ll128)
        }
        Command::Plan { action } => plan(action),
        Command::Model { action } => weft_cli::model_cmd::run(&action),
        Command::Bench {
            collective,
            proxy,
            sweep,
            graph,
            check,
            nccl,
            windows,
            nccl_windows,
            in_place,
            versus,
            json,
            plot,
            ranks,
            trials,
            trace,
            model,
            root,
        } => match collective.as_str() {
            "gin" | "fifo" | "p2p" | "ep" if model.is_some() => {
                Err("--model is an option of the collective benchmarks".into())
            }
            "gin" => bench_gin(
                &sweep,
                [
                    graph,
                    check,
                    nccl || windows || nccl_windows,
                    in_place,
                    versus.is_some(),
                    plot.is_some(),
                    trace.is_some(),
                ],
                [ranks, trials],
                json,
            ),
            "fifo" | "p2p" if ranks.is_some() => Err("--ranks is an option of the collective and ep benchmarks".into()),
            "fifo" | "p2p" | "ep" if trials.is_some() => {
                Err("--trials is an option of the collective benchmarks".into())
            }
            "ep" => bench_ep(
                &proxy,
                &sweep,
                [graph, nccl || windows || nccl_windows, in_place, versus.is_some()],
                (check, ranks),
                [json, plot, trace],
            ),
            "fifo" | "p2p" if trace.is_some() => Err("--trace is an option of the collective and ep benchmarks".into()),
            "fifo" | "p2p" => bench_proxy(
                &collective,
                &proxy,
                &sweep,
                [graph, check, nccl || windows || nccl_windows, in_place, versus.is_some(), plot.is_some()],
                json,
            ),
            _ => bench(
                &collective,
                &sweep,
                [graph, check, nccl || nccl_windows, in_place, windows, nccl_windows],
                versus,
                [ranks, trials],
                [json, plot, trace, model],
                root,
            ),
        },
        Command::GenHeader { root, check } => gen_header(&root, check),
        Command::TraceMerge { out, traces } => trace_merge(&out, &traces),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weft: {e}");
            ExitCode::FAILURE
        }
    }
}

fn soak(
    minutes: f64,
    seed: Option<u64>,
    only_call: Option<u64>,
    max_bytes: &str,
    layout: weft_cli::soak::Layout,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let max_bytes = weft_cli::harness::sweep::parse_size(max_bytes).map_err(|e| format!("--max-bytes: {e}"))?;
    let options =
        weft_cli::soak::SoakOptions { minutes, seed: seed.unwrap_or_else(rand::random), only_call, max_bytes };
    weft_cli::soak::run(&options, &layout)
}

fn plan(action: PlanAction) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use weft_cli::plan_cmd;
    match action {
        PlanAction::Compile { algorithm, ranks, ranks_per_node, instances, tiles, root, out } => {
            let shape = plan_cmd::Shape { ranks, ranks_per_node, instances, root };
            let program = plan_cmd::program(&algorithm, shape)?.with_pipeline(tiles)?;
            plan_cmd::compile(&program, out.as_deref())?
        }
        PlanAction::Verify { plan } => plan_cmd::verify(&plan)?,
        PlanAction::Show { plan, dot, svg } => plan_cmd::show(&plan, dot.as_deref(), svg.as_deref())?,
    }
    Ok(ExitCode::SUCCESS)
}

fn bench(
    collective: &str,
    sweep: &Sweep,
    [graph, check, nccl, in_place, windows, nccl_windows]: [bool; 6],
    versus: Option<String>,
    [ranks, trials]: [Option<usize>; 2],
    [json, plot, trace, model]: [Option<std::path::PathBuf>; 4],
    root: u32,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if ranks == Some(0) {
        return Err("--ranks 0: a collective needs at least one rank".into());
    }
    if trials == Some(0) {
        return Err("--trials 0: a row needs at least one timed trial".into());
    }
    // `fifo` and `p2p` are benchmarks too (routed before this), so the list of choices names them.
    let collective =
        weft_cli::harness::Collective::parse(collective).map_err(|e| format!("{e}, or fifo, p2p, ep, gin"))?;
    // Under torchrun, its processes are the ranks: one per GPU, whatever this host has.
    let torchrun = torchrun_rank("weft bench")?;
    let world = torchrun.as_ref().map(|t| t.world_size);
    if let (Some(world), Some(n)) = (world, [ranks, sweep.gpus].into_iter().flatten().find(|&n| Some(n) != world)) {
        return Err(
            format!("--ranks/--gpus {n}: under torchrun, the ranks are its WORLD_SIZE={world} processes").into()
        );
    }
    let lead = torchrun.as_ref().is_none_or(|t| t.rank == 0);
    let s = sweep.parse()?;
    let options = weft_cli::bench::BenchOptions {
        collective,
        min_bytes: s.min_bytes,
        max_bytes: s.max_bytes,
        factor: s.factor,
        dtype: s.dtype,
        op: s.op,
        graph,
        check,
        nccl,
        windows,
        nccl_windows,
        in_place,
        versus,
        // Fewer ranks than GPUs: one rank on each of the first `ranks` GPUs.
        gpus: world.unwrap_or_else(|| ranks.map_or(s.gpus, |r| s.gpus.min(r))),
        ranks: if world.is_some() { None } else { ranks },
        trials: trials.unwrap_or(weft_cli::harness::trials::DEFAULT_TRIALS),
        trace,
        model: model.as_deref().map(weft_cli::model_cmd::read_params_file).transpose()?,
        root,
    };
    if s.gpus == 0 {
        // No GPU: the collective's plan on the CPU reference interpreter (4 ranks unless --ranks
        // or --gpus, or torchrun's world).
        let gpu_only = json.is_some()
            || plot.is_some()
            || nccl
            || graph
            || in_place
            || windows
            || options.versus.is_some()
            || trials.is_some()
            || options.trace.is_some();
        if gpu_only && lead {
            println!(
                "# --json, --plot, --nccl, --graph, --in-place, --versus, --trials and --trace measure GPUs: the CPU backend ignores them"
            );
        }
        return match &torchrun {
            Some(t) => weft_cli::bench::cpu::run_torchrun(&options, t),
            None => weft_cli::bench::cpu::run(&options, ranks.or(sweep.gpus).unwrap_or(4).max(1)),
        };
    }
    match &torchrun {
        Some(t) => weft_cli::bench::run_torchrun(&options, t, json.as_deref(), plot.as_deref()),
        None => weft_cli::bench::run(&options, json.as_deref(), plot.as_deref()),
    }
}

/// The torchrun variables when torchrun started this process (`None`: started by hand);
/// `command` refuses to run as a rank of weft's own launcher, which starts its workers only.
fn torchrun_rank(command: &str) -> Result<Option<weft_bootstrap::TorchrunEnv>, String> {
    use weft_cli::harness::launch::Started;
    match weft_cli::harness::launch::started_from_env()? {
        Started::Plain => Ok(None),
        Started::Torchrun(t) => Ok(Some(t)),
        Started::Launcher(_) => Err(format!(
            "{command}: {} is set, as in a rank of weft's own launcher: unset it to run by hand or under torchrun",
            weft_cli::harness::launch::REPORT_DIR
        )),
    }
}

fn bench_proxy(
    kind: &str,
    args: &ProxyBenchArgs,
    sweep: &Sweep,
    collective_flags: [bool; 6],
    json: Option<std::path::PathBuf>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use weft_cli::bench::proxy::{FifoOptions, P2pOptions, ProxyBench};
    if collective_flags.iter().any(|&f| f) {
        return Err(format!(
            "weft bench {kind}: --graph, --check, --nccl, --in-place, --versus and --plot are for collectives"
        )
        .into());
    }
    if torchrun_rank("weft bench")?.is_some() {
        return Err(format!("weft bench {kind} starts its own process per GPU: run it without torchrun").into());
    }
    let s = sweep.parse()?;
    let bench = if kind == "fifo" {
        ProxyBench::Fifo(FifoOptions::new(&args.threads, args.pushers.as_deref(), args.lanes, args.pushes, s.gpus)?)
    } else {
        ProxyBench::P2p(P2pOptions::new(args.channel.as_deref(), s.min_bytes, s.max_bytes, s.factor)?)
    };
    if s.gpus == 0 {
        println!("weft bench {kind}: no GPU is available here; nothing to measure.");
        return Ok(ExitCode::SUCCESS);
    }
    weft_cli::bench::proxy::run(&bench, s.gpus, json.as_deref())
}

fn bench_gin(
    sweep: &Sweep,
    collective_flags: [bool; 7],
    [ranks, trials]: [Option<usize>; 2],
    json: Option<std::path::PathBuf>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use weft_cli::bench::gin::GinBenchOptions;
    if collective_flags.iter().any(|&f| f) {
        return Err("weft bench gin: --graph, --check, --nccl, --in-place, --versus, --plot and --trace are for \
                    collectives"
            .into());
    }
    if torchrun_rank("weft bench")?.is_some() {
        return Err("weft bench gin runs its ranks as threads of one process: run it without torchrun".into());
    }
    let s = sweep.parse()?;
    if s.gpus == 0 {
        println!("weft bench gin: no GPU is available here; nothing to measure.");
        return Ok(ExitCode::SUCCESS);
    }
    let trials = trials.unwrap_or(weft_cli::harness::trials::DEFAULT_TRIALS);
    let options = GinBenchOptions::new((s.min_bytes, s.max_bytes, s.factor), s.gpus, ranks, trials)?;
    weft_cli::bench::gin::run(&options, json.as_deref())
}

fn bench_ep(
    args: &ProxyBenchArgs,
    sweep: &Sweep,
    collective_flags: [bool; 4],
    (check, ranks): (bool, Option<usize>),
    [json, plot, trace]: [Option<std::path::PathBuf>; 3],
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if collective_flags.iter().any(|&f| f) {
        return Err("weft bench ep: --graph, --nccl, --in-place and --versus are for collectives".into());
    }
    if torchrun_rank("weft bench")?.is_some() {
        return Err("weft bench ep runs a thread per GPU itself: run it without torchrun".into());
    }
    if args.nodes == Some(0) {
        return Err("weft bench ep: --nodes 0: a run has at least 1 node".into());
    }
    let s = sweep.parse()?;
    if s.gpus == 0 {
        println!("weft bench ep: no GPU is available here; nothing to measure.");
        return Ok(ExitCode::SUCCESS);
    }
    let options = weft_cli::bench::ep::EpBenchOptions {
        tokens: args.tokens,
        hidden: args.hidden,
        topk: args.topk,
        experts: args.experts,
        sms: args.sms.clone(),
        ll_tokens: args.ll_tokens,
        check,
        gpus: s.gpus,
        ranks: ranks.unwrap_or(s.gpus),
        trace,
        nodes: args.nodes,
    };
    weft_cli::bench::ep::run(&options, json.as_deref(), plot.as_deref())
}

fn tune(
    collectives: &[String],
    sweep: &Sweep,
    hb_blocks: Vec<u32>,
    out: &std::path::Path,
    any_dtype: bool,
    check_max: &str,
    with_ll128: bool,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use weft_cli::harness::Collective;
    let check_max_bytes = weft_cli::harness::sweep::parse_size(check_max).map_err(|e| format!("--check-max: {e}"))?;
    let collectives = if collectives.is_empty() {
        Collective::ALL.to_vec()
    } else {
        collectives.iter().map(|c| Collective::parse(c)).collect::<Result<_, _>>()?
    };
    if hb_blocks.is_empty() || hb_blocks.contains(&0) {
        return Err("--hb-blocks: give one or more positive block counts".into());
    }
    let s = sweep.parse()?;
    if s.gpus == 0 {
        println!("weft tune: no GPU is available here; nothing to measure.");
        return Ok(ExitCode::SUCCESS);
    }
    let options = weft_cli::tune::TuneOptions {
        collectives,
        min_bytes: s.min_bytes,
        max_bytes: s.max_bytes,
        factor: s.factor,
        dtype: s.dtype,
        op: s.op,
        hb_blocks,
        gpus: s.gpus,
        any_dtype,
        check_max_bytes,
        with_ll128,
    };
    weft_cli::tune::run(&options, out)
}

fn trace_merge(out: &std::path::Path, traces: &[std::path::PathBuf]) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let documents = traces
        .iter()
        .map(|path| -> Result<serde_json::Value, Box<dyn std::error::Error>> {
            let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()).into())
        })
        .collect::<Result<Vec<_>, _>>()?;
    std::fs::write(out, serde_json::to_string(&weft_core::trace::merge(&documents))?)?;
    println!("wrote {} ({} traces)", out.display(), documents.len());
    Ok(ExitCode::SUCCESS)
}

fn gen_header(root: &std::path::Path, check: bool) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let sets = [
        &weft_core::device_code::TEST_KERNELS,
        &weft_coll::device_code::KERNELS,
        &weft_exec::device_code::KERNELS,
        &weft_ep::device_code::KERNELS,
        &weft_gin::device_code::KERNELS,
    ];
    let headers =
        std::iter::once((weft_types::cuda::GENERATED_HEADER_PATH.to_string(), weft_types::cuda::generated_header()))
            .chain(std::iter::once((
                weft_core::trace::header::HEADER_PATH.to_string(),
                weft_core::trace::header::generated_header(),
            )))
            .chain(sets.iter().map(|set| (set.prototypes_path(), set.generated_prototypes())));
    let mut stale = false;
    for (path, text) in headers {
        let path = root.join(path);
        if check {
            if std::fs::read_to_string(&path)? != text {
                eprintln!("{} is stale: run `weft gen-header`", path.display());
                stale = true;
            }
        } else {
            std::fs::write(&path, text)?;
            println!("wrote {}", path.display());
        }
    }
    Ok(if stale { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_help_and_errors_list_exactly_what_the_parser_accepts() {
        use clap::CommandFactory;
        let mut cli = Cli::command();
        let plan = cli.find_subcommand_mut("plan").expect("plan subcommand");
        let actions: Vec<String> = plan.get_subcommands().map(|c| c.get_name().to_string()).collect();
        assert_eq!(actions, ["compile", "verify", "show"]);
        let compile = plan.find_subcommand_mut("compile").expect("compile").render_long_help().to_string();
        for name in weft_cli::plan_cmd::algorithm_names() {
            assert!(compile.contains(name), "plan compile --help omits {name}");
            assert!(Cli::try_parse_from(["weft", "plan", "compile", name]).is_ok(), "{name} refused");
        }
        let unknown = Cli::try_parse_from(["weft", "plan", "compile", "ring"]).unwrap_err().to_string();
        assert!(weft_cli::plan_cmd::algorithm_names().all(|n| unknown.contains(n)), "{unknown}");
    }

    #[test]
    fn the_model_commands_parse() {
        let cli = Cli::try_parse_from([
            "weft",
            "model",
            "predict",
            "--nodes",
            "32",
            "--gpus-per-node",
            "4",
            "--algo",
            "nvrar,ring",
            "-b",
            "128K",
            "-e",
            "2M",
            "--sim",
            "--net-alpha-us",
            "2",
            "--net-gbps",
            "50",
            "--ratio",
            "nvrar,ring",
            "--ratio",
            "nvrar,nccl-tree",
        ])
        .unwrap();
        let Command::Model { action: weft_cli::model_cmd::ModelAction::Predict(p) } = cli.command else {
            panic!("not model predict")
        };
        assert_eq!((p.nodes, p.gpus_per_node, p.algo.as_str(), p.sim), (32, 4, "nvrar,ring", true));
        assert_eq!((p.links.net_alpha_us, p.links.net_gbps), (Some(2.0), Some(50.0)));
        assert_eq!(p.ratio, ["nvrar,ring", "nvrar,nccl-tree"]);
        let cli =
            Cli::try_parse_from(["weft", "model", "calibrate", "--nvlink-json", "p2p.json", "-o", "m.json"]).unwrap();
        let Command::Model { action: weft_cli::model_cmd::ModelAction::Calibrate(c) } = cli.command else {
            panic!("not model calibrate")
        };
        assert_eq!((c.nvlink_json.unwrap(), c.out), ("p2p.json".into(), "m.json".into()));
    }

    #[test]
    fn the_soak_parses_and_refuses_a_negative_duration() {
        let cli = Cli::try_parse_from([
            "weft",
            "soak",
            "--minutes",
            "0.5",
            "--seed",
            "3",
            "--only-call",
            "7",
            "--ranks",
            "2",
            "--mode",
            "threads",
        ])
        .unwrap();
        let Command::Soak { minutes, seed, only_call, max_bytes, gpus, ranks, mode } = cli.command else {
            panic!("not soak")
        };
        assert_eq!((minutes, seed, only_call, max_bytes.as_str()), (0.5, Some(3), Some(7), "8M"));
        assert_eq!((gpus, ranks, mode), (None, Some(2), Mode::Threads));
        let layout = weft_cli::soak::Layout { gpus: None, ranks: None, mode: Mode::Processes };
        assert!(soak(-1.0, None, None, "8M", layout).unwrap_err().to_string().contains("--minutes"));
        assert!(soak(1.0, None, None, "lots", layout).unwrap_err().to_string().contains("--max-bytes"));
    }

    #[test]
    fn bench_takes_a_root_of_0_unless_told() {
        let root = |args: &[&str]| match Cli::try_parse_from(args).map(|cli| cli.command) {
            Ok(Command::Bench { root, .. }) => Ok(root),
            Ok(_) => panic!("not bench"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(root(&["weft", "bench", "broadcast"]), Ok(0));
        assert_eq!(root(&["weft", "bench", "reduce", "--root", "3"]), Ok(3));
        assert!(root(&["weft", "bench", "reduce", "--root", "-1"]).is_err());
    }

    #[test]
    fn the_proxy_benchmarks_parse() {
        let cli = Cli::try_parse_from([
            "weft",
            "bench",
            "fifo",
            "--threads",
            "1,2,8",
            "--pushes",
            "1000",
            "--pushers",
            "1,33792",
            "--lanes",
            "32",
        ])
        .unwrap();
        let Command::Bench { collective, proxy, .. } = cli.command else { panic!("not bench") };
        assert_eq!((collective.as_str(), proxy.threads, proxy.pushes), ("fifo", vec![1, 2, 8], Some(1000)));
        assert_eq!((proxy.pushers, proxy.lanes), (Some(vec![1, 33792]), 32));
        let cli = Cli::try_parse_from(["weft", "bench", "p2p", "--channel", "port", "-b", "1K", "-e", "1G", "-f", "4"])
            .unwrap();
        let Command::Bench { collective, proxy, sweep, .. } = cli.command else { panic!("not bench") };
        assert_eq!((collective.as_str(), proxy.channel.as_deref()), ("p2p", Some("port")));
        assert_eq!((sweep.min_bytes.as_str(), sweep.max_bytes.as_str(), sweep.factor), ("1K", "1G", 4));
        let cli = Cli::try_parse_from(["weft", "bench", "allreduce", "--model", "m.json"]).unwrap();
        let Command::Bench { model, .. } = cli.command else { panic!("not bench") };
        assert_eq!(model.as_deref(), Some(std::path::Path::new("m.json")));
        let cli = Cli::try_parse_from(["weft", "bench", "ep", "--sms", "24,64", "--tokens", "128", "--check"]).unwrap();
        let Command::Bench { collective, proxy, check, .. } = cli.command else { panic!("not bench") };
        assert_eq!((collective.as_str(), proxy.sms, proxy.tokens, check), ("ep", vec![24, 64], 128, true));
        assert_eq!((proxy.hidden, proxy.topk, proxy.experts, proxy.nodes), (7168, 8, 256, None));
        let cli = Cli::try_parse_from(["weft", "bench", "ep", "--nodes", "2", "--sms", "24", "--ranks", "2"]).unwrap();
        let Command::Bench { proxy, ranks, .. } = cli.command else { panic!("not bench") };
        assert_eq!((proxy.nodes, ranks), (Some(2), Some(2)));
        assert!(Cli::try_parse_from(["weft", "bench", "ep", "--nodes", "-1"]).is_err());
        let cli = Cli::try_parse_from(["weft", "bench", "fifo"]).unwrap();
        let Command::Bench { proxy, .. } = cli.command else { panic!("not bench") };
        assert_eq!((proxy.threads, proxy.pushes, proxy.channel), (vec![1, 2, 4], None, None));
        assert_eq!((proxy.pushers, proxy.lanes), (None, 1));
    }
}

//! The `weft` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weft::selftest::{Mode, SelftestOptions, Step};

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
        /// Run only these groups of tests (comma-separated; default: all).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<Step>,
    },
    /// Measure a collective against NCCL in the same run (nccl-tests style).
    Bench {
        /// Collective: allreduce, allgather, reducescatter, alltoall, broadcast, reduce (root 0)
        /// or sendrecv (to the next rank, from the previous one).
        collective: String,
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
        /// Operator.
        #[arg(long, default_value = "sum")]
        op: String,
        /// Time calls captured in CUDA graphs.
        #[arg(long)]
        graph: bool,
        /// Check every element against a float64 reference (NCCL's too with --nccl).
        #[arg(long)]
        check: bool,
        /// Measure NCCL (libnccl.so.2) in the same run.
        #[arg(long)]
        nccl: bool,
        /// Write the rows as JSON.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Plot time and bus bandwidth against size (weft and NCCL) into this PNG.
        #[arg(long)]
        plot: Option<std::path::PathBuf>,
        /// GPUs (default: all).
        #[arg(long)]
        gpus: Option<usize>,
    },
    /// Time every algorithm of the collectives at every size (and HB block counts) on this
    /// machine and write the tuning table the selector reads (WEFT_TUNING_FILE).
    Tune {
        /// Collectives (comma-separated; default: all).
        #[arg(long, value_delimiter = ',')]
        collectives: Vec<String>,
        /// Smallest size.
        #[arg(short = 'b', long, default_value = "1K")]
        min_bytes: String,
        /// Largest size.
        #[arg(short = 'e', long, default_value = "1G")]
        max_bytes: String,
        /// Size multiplier.
        #[arg(short = 'f', long, default_value_t = 2)]
        factor: usize,
        /// Element type of the measurements.
        #[arg(long, default_value = "bf16")]
        dtype: String,
        /// Operator of the reducing collectives.
        #[arg(long, default_value = "sum")]
        op: String,
        /// HB block counts to try (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "64,128")]
        hb_blocks: Vec<u32>,
        /// GPUs (default: all).
        #[arg(long)]
        gpus: Option<usize>,
        /// Where to write the table.
        #[arg(short, long, default_value = "weft-tuning.json")]
        out: std::path::PathBuf,
    },
    /// Compile, verify or list algorithm plans.
    Plan {
        #[command(subcommand)]
        action: PlanAction,
    },
    /// Internal: one rank of `weft tune`.
    #[command(hide = true)]
    TuneWorker,
    /// Internal: one rank of `weft bench`.
    #[command(hide = true)]
    BenchWorker,
    /// Internal: one rank of `weft selftest --mode processes` (reads torchrun variables).
    #[command(hide = true)]
    SelftestWorker,
    /// Write (or with --check, verify) device/include/weft/generated/types.cuh.
    GenHeader {
        /// Repository root.
        #[arg(long, default_value = ".")]
        root: std::path::PathBuf,
        /// Fail if the checked-in header differs instead of writing it.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Subcommand, Debug)]
enum PlanAction {
    /// Compile a shipped algorithm (ring-allreduce, allpairs-allreduce, hierarchical-allreduce,
    /// ring-allgather, ring-reduce-scatter, allpairs-reduce-scatter, two-step-alltoall,
    /// alltonext, direct-broadcast) into a JSON execution plan.
    Compile {
        /// Algorithm name.
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
        /// Root (broadcast).
        #[arg(long, default_value_t = 0)]
        root: u32,
        /// Output file (default: stdout).
        #[arg(short, long)]
        out: Option<std::path::PathBuf>,
    },
    /// Load a plan, validate every limit and verify it computes its collective.
    Verify {
        /// Plan file.
        plan: std::path::PathBuf,
    },
    /// Print a plan's per-rank, per-thread-block listing.
    Show {
        /// Plan file.
        plan: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("WEFT_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Info => weft::info::run(),
        Command::Selftest { gpus, mode, only } => weft::selftest::run(&SelftestOptions { gpus, mode, only }),
        Command::SelftestWorker => weft::selftest::run_worker(),
        Command::BenchWorker => weft::bench::run_worker(),
        Command::TuneWorker => weft::tune::run_worker(),
        Command::Tune { collectives, min_bytes, max_bytes, factor, dtype, op, hb_blocks, gpus, out } => {
            tune(&collectives, [&min_bytes, &max_bytes, &dtype, &op], factor, hb_blocks, gpus, &out)
        }
        Command::Plan { action } => plan(action),
        Command::Bench {
            collective,
            min_bytes,
            max_bytes,
            factor,
            dtype,
            op,
            graph,
            check,
            nccl,
            json,
            plot,
            gpus,
        } => bench(&collective, &min_bytes, &max_bytes, factor, &dtype, &op, [graph, check, nccl], [json, plot], gpus),
        Command::GenHeader { root, check } => gen_header(&root, check),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weft: {e}");
            ExitCode::FAILURE
        }
    }
}

fn plan(action: PlanAction) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use weft::plan_cmd;
    match action {
        PlanAction::Compile { algorithm, ranks, ranks_per_node, instances, root, out } => {
            plan_cmd::compile(&plan_cmd::program(&algorithm, ranks, ranks_per_node, instances, root)?, out.as_deref())?
        }
        PlanAction::Verify { plan } => plan_cmd::verify(&plan)?,
        PlanAction::Show { plan } => plan_cmd::show(&plan)?,
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::too_many_arguments)]
fn bench(
    collective: &str,
    min_bytes: &str,
    max_bytes: &str,
    factor: usize,
    dtype: &str,
    op: &str,
    [graph, check, nccl]: [bool; 3],
    [json, plot]: [Option<std::path::PathBuf>; 2],
    gpus: Option<usize>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use weft::bench::{BenchOptions, Collective, parse_dtype, parse_op, parse_size};
    let collective = Collective::parse(collective)?;
    let available = available_gpus();
    if available == 0 {
        println!("weft bench: no GPU is available here; nothing to measure.");
        return Ok(ExitCode::SUCCESS);
    }
    let options = BenchOptions {
        collective,
        min_bytes: parse_size(min_bytes)?,
        max_bytes: parse_size(max_bytes)?,
        factor,
        dtype: parse_dtype(dtype)?,
        op: parse_op(op)?,
        graph,
        check,
        nccl,
        gpus: gpus.unwrap_or(available).clamp(1, available),
    };
    weft::bench::run(&options, json.as_deref(), plot.as_deref())
}

fn tune(
    collectives: &[String],
    [min_bytes, max_bytes, dtype, op]: [&str; 4],
    factor: usize,
    hb_blocks: Vec<u32>,
    gpus: Option<usize>,
    out: &std::path::Path,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use weft::bench::{Collective, parse_dtype, parse_op, parse_size};
    let collectives = if collectives.is_empty() {
        Collective::ALL.to_vec()
    } else {
        collectives.iter().map(|c| Collective::parse(c)).collect::<Result<_, _>>()?
    };
    if hb_blocks.is_empty() || hb_blocks.contains(&0) {
        return Err("--hb-blocks: give one or more positive block counts".into());
    }
    let available = available_gpus();
    if available == 0 {
        println!("weft tune: no GPU is available here; nothing to measure.");
        return Ok(ExitCode::SUCCESS);
    }
    let options = weft::tune::TuneOptions {
        collectives,
        min_bytes: parse_size(min_bytes)?,
        max_bytes: parse_size(max_bytes)?,
        factor,
        dtype: parse_dtype(dtype)?,
        op: parse_op(op)?,
        hb_blocks,
        gpus: gpus.unwrap_or(available).clamp(1, available),
    };
    weft::tune::run(&options, out)
}

/// GPUs visible here (0 without a driver).
fn available_gpus() -> usize {
    weft::gpu::Device::count().unwrap_or(0)
}

fn gen_header(root: &std::path::Path, check: bool) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let path = root.join(weft::types::cuda::GENERATED_HEADER_PATH);
    let text = weft::types::cuda::generated_header();
    if check {
        let current = std::fs::read_to_string(&path)?;
        if current != text {
            eprintln!("{} is stale: run `weft gen-header`", path.display());
            return Ok(ExitCode::FAILURE);
        }
        return Ok(ExitCode::SUCCESS);
    }
    std::fs::write(&path, text)?;
    println!("wrote {}", path.display());
    Ok(ExitCode::SUCCESS)
}

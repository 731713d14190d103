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

//! # 02: a collective from Rust
//!
//! Two ranks, one thread each, on one or two GPUs, AllReduce (sum) `f32` vectors through
//! [`Collectives`]: each rank fills its input, calls `all_reduce` on its stream, and checks
//! every element of the result against the sum computed on the host.
//!
//! ```text
//! cargo run -p weft --example 02_collective
//! ```
//!
//! Without a GPU it prints that it skipped and exits 0 (with `WEFT_REQUIRE_GPU=1`: exits 1).

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use common::BoxError;
use weft::gpu::{Device, Stream};
use weft::{CollConfig, Collectives, Communicator, DataType, Env, ReduceOp};

const RANKS: usize = 2;
const COUNT: usize = 1 << 20;

/// Element `i` of rank `rank`'s input: small integers, so every sum is exact in `f32`.
fn input(rank: usize, i: usize) -> f32 {
    ((rank + 1) * (i % 13)) as f32
}

fn rank_main(
    rank: usize,
    bootstrap: Arc<dyn weft::bootstrap::Bootstrap>,
    gpus: usize,
    env: Env,
) -> Result<(), BoxError> {
    let device = Device::new(rank % gpus)?;
    let comm = Communicator::new(bootstrap, device.clone(), env.clone())?;
    let coll = Collectives::new(&comm, CollConfig::from_env(&env)?)?;
    coll.prepare(DataType::F32, ReduceOp::Sum)?; // compile (or read from the cache) and load the kernels
    let stream = Stream::new(&device)?;

    let bytes = COUNT * std::mem::size_of::<f32>();
    let (send, recv) = (comm.alloc(bytes)?, comm.alloc(bytes)?);
    send.write_pod(0, &(0..COUNT).map(|i| input(rank, i)).collect::<Vec<f32>>())?;
    recv.fill(0, bytes, 0)?;
    // SAFETY: `send` and `recv` are device memory of this rank's GPU holding COUNT f32 each, and
    // they live until wait_idle below returned; every rank makes this same call once.
    let algorithm = unsafe { coll.all_reduce(send.ptr(), recv.ptr(), COUNT, DataType::F32, ReduceOp::Sum, &stream)? };
    stream.wait_idle(env.device_timeout + Duration::from_secs(30), "all_reduce")?;
    comm.check_device()?;

    let mut out = vec![0u8; bytes];
    recv.read(0, &mut out)?;
    for (i, word) in out.chunks_exact(4).enumerate() {
        let got = f32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
        let want: f32 = (0..RANKS).map(|r| input(r, i)).sum();
        if got != want {
            return Err(format!("element {i} is {got}, expected {want}").into());
        }
    }
    println!("rank {rank}: AllReduce of {COUNT} f32 ({algorithm:?}) correct in every element");
    Ok(())
}

fn main() -> Result<ExitCode, BoxError> {
    let Some(gpus) = common::gpus_or_skip("02_collective")? else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut env = Env::from_process()?;
    // With one GPU both ranks run there, side by side.
    env.share_gpus = gpus < RANKS;
    common::run_ranks(RANKS, move |rank, bootstrap| rank_main(rank, bootstrap, gpus.min(RANKS), env.clone()))?;
    println!("02_collective: passed");
    Ok(ExitCode::SUCCESS)
}

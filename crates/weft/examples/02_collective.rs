//! # 02: a collective from Rust
//!
//! Two ranks, one thread each, on one or two GPUs, AllReduce (sum) `f32` vectors through
//! [`Collectives`]' typed API: each rank copies its input into a [`DeviceBuffer`], calls
//! `all_reduce` on views of its buffers and its stream, and checks every element of the
//! result against the sum computed on the host. No `unsafe`: the call checks the lengths, and
//! the stream keeps both buffers alive until its work has run.
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
use weft::gpu::{Device, DeviceBuffer, Stream};
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

    let send = DeviceBuffer::from_host(&device, &(0..COUNT).map(|i| input(rank, i)).collect::<Vec<f32>>())?;
    let mut recv = DeviceBuffer::from_host(&device, &vec![0f32; COUNT])?;
    // Every rank makes this same call once.
    let algorithm = coll.all_reduce(&send.as_slice(), &mut recv.as_mut_slice(), ReduceOp::Sum, &stream)?;
    stream.wait_idle(env.device_timeout + Duration::from_secs(30), "all_reduce")?;
    comm.check_device()?;

    for (i, got) in recv.to_vec()?.into_iter().enumerate() {
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

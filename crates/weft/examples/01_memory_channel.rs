//! # 01: your own kernel over a MemoryChannel
//!
//! Two ranks, one thread each, on one or two GPUs. Each rank compiles a small CUDA kernel of
//! its own with weft's NVRTC path (the kernel includes `weft/weft.cuh`), opens a
//! [`MemoryChannel`] to the other rank over one registered buffer, and launches the kernel: it
//! puts the first half of the local buffer into the second half of the peer's and signals the
//! peer, then waits for the peer's signals. The host checks every byte that arrived.
//!
//! The kernels' parameter lists are declared once, in Rust, with `device_kernels!`: a launch
//! takes the declared struct, and the kernel source includes the prototypes generated from the
//! same declaration, so a definition that disagrees with it does not compile.
//!
//! ```text
//! cargo run -p weft --example 01_memory_channel
//! ```
//!
//! Without a GPU it compiles the kernel (where NVRTC is installed), prints that it skipped and
//! exits 0 (with `WEFT_REQUIRE_GPU=1`: exits 1).

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use common::BoxError;
use weft::core::device_code::{KernelSet, compiled_once};
use weft::core::{KernelLibrary, MemoryChannelConfig};
use weft::gpu::{Device, LaunchConfig, Stream};
use weft::types::MemoryChannelDeviceHandle;
use weft::{Communicator, Env, MemoryChannel};

weft::gpu::device_kernels! {
    /// The example's kernels.
    fn example_kernels;

    /// Puts `bytes` into the peer's buffer and signals it once per block.
    struct PutAndSignal for ["example_put_and_signal"] {
        /// The channel to the peer.
        ch: MemoryChannelDeviceHandle => "weft::MemoryChannelDeviceHandle",
        /// Bytes to put.
        bytes: u64 => "uint64_t",
    }

    /// Waits for `count` signals of the peer.
    struct Wait for ["example_wait"] {
        /// The channel to the peer.
        ch: MemoryChannelDeviceHandle => "weft::MemoryChannelDeviceHandle",
        /// Signals to wait for.
        count: u32 => "uint32_t",
    }
}

/// The user kernel: CUDA C++ compiled at run time, with weft's device headers available by
/// include name, and the prototypes generated from the declarations above as
/// `example_kernels.cuh`.
const KERNEL: &str = r#"
#include "weft/weft.cuh"
#include "example_kernels.cuh"
using namespace weft;

// Grid-wide put of `bytes` from local [0, bytes) into the peer's [bytes, 2*bytes), then one
// signal per block once the block's share is written.
extern "C" __global__ void example_put_and_signal(MemoryChannelDeviceHandle ch, uint64_t bytes) {
  channel_put(ch, bytes, 0, bytes, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
  __syncthreads();
  if (threadIdx.x == 0) channel_signal(ch);
}

// Waits (bounded by the channel's timeout) for `count` signals of the peer.
extern "C" __global__ void example_wait(MemoryChannelDeviceHandle ch, uint32_t count) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  for (uint32_t i = 0; i < count; ++i) {
    if (!channel_wait(ch)) return;
  }
}
"#;

/// The example's kernels as a [`KernelSet`], so a [`KernelLibrary`] compiles, caches and loads
/// them like weft's own.
static KERNELS: KernelSet = KernelSet {
    dir: "crates/weft/examples",
    units: &[("01_memory_channel.cu", KERNEL)],
    includes: &[],
    variants: compiled_once,
    signatures: example_kernels,
    prototypes: "example_kernels.cuh",
};

const BYTES: usize = 1 << 20;
const BLOCKS: u32 = 8;
const THREADS: u32 = 256;

/// The byte rank `rank` sends at `index`.
fn pattern(rank: usize, index: usize) -> u8 {
    (index.wrapping_mul(31) ^ (rank + 1).wrapping_mul(97)) as u8
}

fn rank_main(
    rank: usize,
    bootstrap: Arc<dyn weft::bootstrap::Bootstrap>,
    gpus: usize,
    env: Env,
) -> Result<(), BoxError> {
    let peer = 1 - rank;
    let device = Device::new(rank % gpus)?;
    let loaded = KernelLibrary::new(env.cache_dir.clone(), &KERNELS).load(&device, "01_memory_channel.cu")?;
    let put = loaded.module.kernel("example_put_and_signal")?;
    let wait = loaded.module.kernel("example_wait")?;
    let comm = Communicator::new(bootstrap, device.clone(), env.clone())?;
    let stream = Stream::new(&device)?;

    // One buffer of 2 * BYTES: what this rank sends in the first half, what arrives in the second.
    let buffer = comm.register(comm.alloc(2 * BYTES)?)?;
    let mine: Vec<u8> = (0..BYTES).map(|i| pattern(rank, i)).collect();
    buffer.memory().write(0, &mine)?;
    buffer.memory().fill(BYTES, BYTES, 0)?;
    let channel: MemoryChannel = comm.memory_channel(peer, &buffer, None, MemoryChannelConfig::default())?;
    comm.settle_with(std::iter::once(peer))?;
    comm.barrier()?; // both buffers are initialized before either rank writes into the other's

    let put_params = PutAndSignal { ch: channel.device_handle(), bytes: BYTES as u64 };
    let wait_params = Wait { ch: channel.device_handle(), count: BLOCKS };
    // SAFETY: the put writes [BYTES, 2 * BYTES) of the peer's buffer, which the channel maps and
    // holds, and `channel` and `buffer` outlive the launches: wait_idle below returns only once
    // the stream is idle.
    unsafe {
        put.launch(&stream, LaunchConfig { grid: BLOCKS, block: THREADS, shared_bytes: 0 }, &put_params)?;
        wait.launch(&stream, LaunchConfig { grid: 1, block: 32, shared_bytes: 0 }, &wait_params)?;
    }
    stream.wait_idle(env.device_timeout + Duration::from_secs(30), "put, signal and wait")?;
    comm.check_device()?; // a wait that timed out on the GPU is reported here

    let mut arrived = vec![0u8; BYTES];
    buffer.memory().read(BYTES, &mut arrived)?;
    if let Some(i) = (0..BYTES).find(|&i| arrived[i] != pattern(peer, i)) {
        return Err(
            format!("byte {i} from rank {peer} is {:#04x}, expected {:#04x}", arrived[i], pattern(peer, i)).into()
        );
    }
    println!("rank {rank}: received {BYTES} bytes from rank {peer} through a MemoryChannel, every byte checked");
    comm.barrier()?; // the peer may still read our signals until both are done
    Ok(())
}

fn main() -> Result<ExitCode, BoxError> {
    let mut env = Env::from_process()?;
    let Some(gpus) = common::gpus_or_skip("01_memory_channel")? else {
        // NVRTC needs no GPU: where it is installed, the kernel is still compiled (for sm_90).
        if weft::gpu::nvrtc_version().is_ok() {
            KernelLibrary::new(env.cache_dir.clone(), &KERNELS).compile("01_memory_channel.cu", "sm_90")?;
            println!("01_memory_channel: the kernel compiled for sm_90 with NVRTC");
        }
        return Ok(ExitCode::SUCCESS);
    };
    // With one GPU both ranks run there, side by side.
    env.share_gpus = gpus < 2;
    common::run_ranks(2, move |rank, bootstrap| rank_main(rank, bootstrap, gpus.min(2), env.clone()))?;
    println!("01_memory_channel: passed");
    Ok(ExitCode::SUCCESS)
}

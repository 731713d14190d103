//! PortChannel cases of the GPU suite, for every pair of ranks: both ranks launch a kernel that
//! pushes put-with-signal commands and then spins until the peer's signals arrive (it finishes
//! only if neither proxy blocks behind the running kernels), every received byte is checked; and
//! a kernel waiting for a signal that never comes is released by shutting the proxy down, with
//! `ProxyStopped` in the error record. Pairs run in the same order on every rank.

use std::time::Duration;

use weft_core::{Communicator, Error, KernelLibrary, PortProxy, PortProxyConfig, RegisteredMemory};
use weft_gpu::{KernelArgs, LaunchConfig, PinnedHostMemory, Stream};

use super::report::RankReport;

/// Bytes each rank sends its partner: 8 chunks of 1 MiB + 3 bytes (odd sizes on purpose).
const CHUNK: u32 = (1 << 20) + 3;
const CHUNKS: u32 = 8;
const POISON: u8 = 0x5A;

fn byte(rank: usize, i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (rank * 29 + 7)) as u8
}

/// Runs the PortChannel cases for this rank.
pub(crate) fn run(
    comm: &Communicator,
    library: &KernelLibrary,
    label: &str,
    report: &mut RankReport,
) -> Result<(), Error> {
    let rank = comm.rank();
    let gpu = |source| Error::Gpu { rank, source };
    let module = library.load(comm.device(), "port.cu").map_err(gpu)?.module;
    let exchange = module.kernel("weft_port_exchange").map_err(gpu)?;
    let wait_once = module.kernel("weft_port_wait_once").map_err(gpu)?;
    let stream = Stream::new(comm.device()).map_err(gpu)?;
    let bytes = (CHUNK * CHUNKS) as usize;
    let memory = comm.alloc(2 * bytes)?;
    let mine: Vec<u8> = (0..bytes).map(|i| byte(rank, i)).collect();
    memory.write(0, &mine).map_err(gpu)?;
    let buffer: RegisteredMemory = comm.register(memory)?;
    let proxy = PortProxy::new(comm, PortProxyConfig::default())?;
    let id = proxy.register(&buffer)?;
    let status = PinnedHostMemory::alloc(comm.device(), 8).map_err(gpu)?;
    let host_timeout = comm.env().device_timeout + Duration::from_secs(30);
    for a in 0..comm.world_size() {
        for b in a + 1..comm.world_size() {
            comm.barrier()?;
            let partner = if rank == a {
                b
            } else if rank == b {
                a
            } else {
                continue;
            };
            buffer.memory().fill(bytes, bytes, POISON).map_err(gpu)?;
            let ch = proxy.channel(partner, id, None)?;
            status.write(0, 0u32).map_err(gpu)?;
            let mut args = KernelArgs::new();
            args.push(ch.device_handle()).push(CHUNK).push(CHUNKS).push(bytes as u32).push(status.device_ptr());
            let name = format!("{label}port channel put/signal/wait/flush {rank}<->{partner} ({:?})", ch.route());
            // SAFETY: the arguments match weft_port_exchange; the channel, buffer and status word
            // live until the stream is idle below.
            let launched =
                unsafe { exchange.launch(&stream, LaunchConfig { grid: 1, block: 32, shared_bytes: 0 }, &args) };
            let outcome = launched
                .and_then(|()| stream.wait_idle(host_timeout, "the PortChannel exchange kernel"))
                .map_err(|e| e.to_string())
                .and_then(|()| comm.check_device().map_err(|e| e.to_string()))
                .and_then(|()| match status.read::<u32>(0) {
                    Ok(1) => Ok(()),
                    other => Err(format!("kernel status {other:?}, proxy failure {:?}", proxy.failure())),
                })
                .and_then(|()| {
                    let mut got = vec![0u8; bytes];
                    buffer.memory().read(bytes, &mut got).map_err(|e| e.to_string())?;
                    match got.iter().enumerate().find(|&(i, &v)| v != byte(partner, i)) {
                        None => Ok(()),
                        Some((i, &v)) => Err(format!("byte {i}: {v:#x}, want {:#x}", byte(partner, i))),
                    }
                });
            report.record(name, outcome);
            release_on_shutdown(comm, &buffer, &wait_once, &stream, partner, label, report)?;
        }
    }
    comm.barrier()
}

/// A second proxy whose channel's kernel waits for a signal never sent; shutting the proxy down
/// must end the kernel with `ProxyStopped` recorded. Pairwise (only the two ranks call it).
fn release_on_shutdown(
    comm: &Communicator,
    buffer: &RegisteredMemory,
    wait_once: &weft_gpu::Kernel,
    stream: &Stream,
    partner: usize,
    label: &str,
    report: &mut RankReport,
) -> Result<(), Error> {
    let rank = comm.rank();
    let gpu = |source| Error::Gpu { rank, source };
    let proxy = PortProxy::new(comm, PortProxyConfig::default())?;
    let id = proxy.register(buffer)?;
    let ch = proxy.channel(partner, id, Some(Duration::from_secs(60)))?;
    let status = PinnedHostMemory::alloc(comm.device(), 8).map_err(gpu)?;
    status.write(0, 7u32).map_err(gpu)?;
    let mut args = KernelArgs::new();
    args.push(ch.device_handle()).push(status.device_ptr());
    // SAFETY: the arguments match weft_port_wait_once; everything lives until the stream is idle.
    unsafe { wait_once.launch(stream, LaunchConfig { grid: 1, block: 32, shared_bytes: 0 }, &args) }.map_err(gpu)?;
    std::thread::sleep(Duration::from_millis(200));
    let shutdown = proxy.shutdown();
    let idle = stream.wait_idle(Duration::from_secs(20), "a kernel waiting on a stopped PortChannel proxy");
    let failure = comm.device_failure();
    let outcome = match (shutdown, idle, status.read::<u32>(0), &failure) {
        (Ok(_), Ok(()), Ok(0), Some(f)) if f.op == "semaphore wait" => Ok(()),
        (s, i, st, f) => Err(format!("shutdown {s:?}, stream {i:?}, status {st:?}, record {f:?}")),
    };
    report.record(format!("{label}port channel wait released by proxy shutdown {rank}<->{partner}"), outcome);
    comm.clear_device_failure()
}

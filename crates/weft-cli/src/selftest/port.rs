//! PortChannel cases of the GPU suite, for every pair of ranks: both ranks launch a kernel that
//! pushes put-with-signal commands and then spins until the peer's signals arrive (it finishes
//! only if neither proxy blocks behind the running kernels), every received byte is checked, on
//! one channel and on 40 channels at once (more than CUDA's 32 hardware queues: a copy stream
//! per connection would share one with the spinning kernel's stream and wait behind it); and
//! a kernel waiting for a signal that never comes is released by shutting the proxy down, with
//! `ProxyStopped` in the error record. Pairs run in the same order on every rank.

use std::time::Duration;

use weft_core::{Communicator, Error, KernelLibrary, RegisteredMemory};
use weft_gpu::{AllocKind, DeviceMemory, PinnedHostMemory, Stream};
use weft_net::{PortProxy, PortProxyConfig, test_launchers};
use weft_types::PortChannelDeviceHandle;

use super::report::RankReport;

/// The exchanges: (channels, chunk bytes, chunks, launches back to back). Odd sizes on purpose;
/// every channel of the second carries two chunks per launch, and each launch is enqueued while
/// the previous one may still spin on the proxies' copies.
const EXCHANGES: [(u32, u32, u32, u32); 2] = [(1, (1 << 20) + 3, 8, 1), (40, (64 << 10) + 3, 80, 20)];
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
    let bytes = EXCHANGES.iter().map(|&(_, chunk, chunks, _)| (chunk * chunks) as usize).max().unwrap_or(0);
    let memory = comm.alloc(2 * bytes)?;
    let mine: Vec<u8> = (0..bytes).map(|i| byte(rank, i)).collect();
    memory.write(0, &mine).map_err(gpu)?;
    let buffer: RegisteredMemory = comm.register(memory)?;
    dma_buf_export(comm, &buffer, label, report);
    let proxy = PortProxy::new(comm, PortProxyConfig::default())?;
    let id = proxy.register(&buffer)?;
    let most = EXCHANGES.iter().map(|e| e.0 as usize).max().unwrap_or(1);
    let status = PinnedHostMemory::alloc(comm.device(), 4 * most).map_err(gpu)?;
    let handles = DeviceMemory::alloc(comm.device(), most * size_of::<PortChannelDeviceHandle>(), AllocKind::Legacy)
        .map_err(gpu)?;
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
            for (channels, chunk, chunks, launches) in EXCHANGES {
                buffer.memory().fill(bytes, bytes, POISON).map_err(gpu)?;
                let chs = (0..channels).map(|_| proxy.channel(partner, id, None)).collect::<Result<Vec<_>, _>>()?;
                for b in 0..channels as usize {
                    status.write(4 * b, 0u32).map_err(gpu)?;
                }
                let name = format!(
                    "{label}port channel put/signal/wait/flush {rank}<->{partner} ({:?}, {channels} channel{}, {launches} launch{})",
                    chs[0].route(),
                    if channels == 1 { "" } else { "s at once" },
                    if launches == 1 { "" } else { "es" }
                );
                // Each launch is enqueued while the previous one may still spin.
                let (launched, idle) = stream.launch_scope(host_timeout, "the PortChannel exchange kernel", |scope| {
                    test_launchers::port_exchange(
                        scope,
                        &exchange,
                        &chs,
                        &handles,
                        launches,
                        (chunk, chunks, bytes as u32),
                        &status,
                    )
                });
                let sent = (chunk * chunks) as usize;
                let outcome = launched
                    .and(idle)
                    .map_err(|e| e.to_string())
                    .and_then(|()| comm.check_device().map_err(|e| e.to_string()))
                    .and_then(|()| {
                        let done = (0..channels as usize)
                            .map(|b| status.read::<u32>(4 * b))
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(|e| e.to_string())?;
                        match done.iter().position(|&s| s != 1) {
                            None => Ok(()),
                            Some(b) => Err(format!(
                                "channel {b}: kernel status {}, proxy failure {:?}",
                                done[b],
                                proxy.failure()
                            )),
                        }
                    })
                    .and_then(|()| {
                        let mut got = vec![0u8; sent];
                        buffer.memory().read(bytes, &mut got).map_err(|e| e.to_string())?;
                        match got.iter().enumerate().find(|&(i, &v)| v != byte(partner, i)) {
                            None => Ok(()),
                            Some((i, &v)) => Err(format!("byte {i}: {v:#x}, want {:#x}", byte(partner, i))),
                        }
                    });
                report.record(name, outcome);
            }
            release_on_shutdown(comm, &buffer, &wait_once, &stream, partner, label, report)?;
        }
    }
    comm.barrier()
}

/// What an RDMA NIC needs to register a PortChannel memory without the peer-memory module: the
/// memory exports as a dma-buf covering its pages (`/proc/self/fdinfo` gives the buffer's size).
/// Recorded only where the GPU supports dma-buf export.
fn dma_buf_export(comm: &Communicator, buffer: &RegisteredMemory, label: &str, report: &mut RankReport) {
    use std::os::fd::AsRawFd;
    let exported = weft_gpu::export_dma_buf(comm.device(), buffer.ptr(), buffer.len());
    let outcome = match exported {
        Err(weft_gpu::GpuError::Unsupported { what, .. }) => {
            println!("{label}rank {}: no dma-buf check: {what} unsupported", comm.rank());
            return;
        }
        Err(e) => Err(e.to_string()),
        Ok(buf) => {
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", buf.fd.as_raw_fd())).unwrap_or_default();
            let size = info.lines().find_map(|l| l.strip_prefix("size:")).and_then(|v| v.trim().parse::<u64>().ok());
            let covers = buf.offset + buffer.len() as u64 <= buf.len;
            match size {
                Some(size) if size == buf.len && covers && buf.len % 4096 == 0 => Ok(()),
                other => Err(format!(
                    "dma-buf of {} bytes at offset {} for {} bytes; fdinfo size {other:?}",
                    buf.len,
                    buf.offset,
                    buffer.len()
                )),
            }
        }
    };
    report
        .record(format!("{label}registered memory exports as a dma-buf for RDMA NICs (rank {})", comm.rank()), outcome);
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
    let (launched, idle) =
        stream.launch_scope(Duration::from_secs(20), "a kernel waiting on a stopped PortChannel proxy", |scope| {
            test_launchers::port_wait_once(scope, wait_once, &ch, &status)?;
            std::thread::sleep(Duration::from_millis(200));
            Ok(proxy.shutdown())
        });
    let shutdown = launched.map_err(gpu)?;
    let failure = comm.device_failure();
    let outcome = match (shutdown, idle, status.read::<u32>(0), &failure) {
        (Ok(_), Ok(()), Ok(0), Some(f)) if f.op == "semaphore wait" => Ok(()),
        (s, i, st, f) => Err(format!("shutdown {s:?}, stream {i:?}, status {st:?}, record {f:?}")),
    };
    report.record(format!("{label}port channel wait released by proxy shutdown {rank}<->{partner}"), outcome);
    comm.clear_device_failure()
}

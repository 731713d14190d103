//! One rank of `weft bench fifo` / `weft bench p2p`. Every host wait on a stream is bounded,
//! every device wait is bounded by the FIFO's and channels' `WaitContext`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use weft_bootstrap::{Bootstrap, TcpBootstrap, TorchrunEnv};
use weft_core::selftest_kernels::{PutEngine, SelftestKernels, SelftestRunner};
use weft_core::{Communicator, Env, KernelLibrary, MemoryChannelConfig, RegisteredMemory};
use weft_gpu::{Device, Kernel, LaunchConfig, LaunchScope, PinnedHostMemory, Stream};
use weft_net::fifo::{FifoReader, PinnedFifo};
use weft_net::proxy::{CommandHandler, Handled, ProxyConfig, ProxyError, ProxyService};
use weft_net::test_launchers::{self, FifoTable};
use weft_net::{PortProxy, PortProxyConfig};
use weft_types::FifoCommand;

use super::{ChannelKind, FifoOptions, FifoReport, FifoRow, P2pOptions, P2pRow, ProxyBench, RankReport};
use crate::harness::progress;
use crate::harness::rank::calls_for;
use crate::harness::timed::timed_scope;

type BoxError = Box<dyn std::error::Error>;

/// The op the FIFO benchmark pushes (8–15 are free for other layers; nothing else uses 8 in a
/// proxy of its own).
const BENCH_OP: u8 = 8;
/// `p2p --channel port`: kernels of one put each, timed for a size's latency (odd: a median).
const LATENCY_RUNS: usize = 5;
/// Timed runs per thread count (after one warm-up run of one push per kernel thread).
const RUNS: u32 = 3;
/// Grid sizes the MemoryChannel put is timed with (the self-test's bandwidth step uses these).
const PUT_GRIDS: [u32; 3] = [132, 264, 528];

/// The latency measurement's handler: pops the command, does nothing else.
#[derive(Debug)]
struct Discard;

impl CommandHandler for Discard {
    fn handle(&self, _: &FifoCommand) -> Result<Handled, ProxyError> {
        Ok(Handled::Done)
    }
}

/// The push-rate handler: checks each command against the push kernel's numbering (every
/// pusher's sequence numbers arrive in order, each once, with their check word) and moves no
/// data. One pusher's commands all go through one FIFO, so one proxy thread sees them, in order.
#[derive(Debug)]
struct Check {
    /// The next sequence number of each pusher.
    next: Vec<AtomicU32>,
}

impl Check {
    fn new(pushers: u32) -> Self {
        Self { next: (0..pushers).map(|_| AtomicU32::new(0)).collect() }
    }

    /// The word `weft_fifo_bench_check_word` of port.cu puts in the size field (its width).
    fn check_word(pusher: u32, seq: u32) -> u32 {
        (seq ^ pusher.wrapping_mul(0x9E37_79B1)) & ((1 << weft_types::FIFO_SIZE_BITS) - 1)
    }

    /// Pushers whose count of commands is not `expected`.
    fn short_pushers(&self, expected: u32) -> Vec<(usize, u32)> {
        self.next
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .enumerate()
            .filter(|&(_, n)| n != expected)
            .take(8)
            .collect()
    }
}

impl CommandHandler for Check {
    fn handle(&self, command: &FifoCommand) -> Result<Handled, ProxyError> {
        let f = command.fields();
        let (pusher, seq) = (f.src_offset, f.dst_offset);
        let wrong = |detail: String| Err(ProxyError::Handler { op: BENCH_OP, detail });
        let Some(next) = self.next.get(pusher as usize) else {
            return wrong(format!("a command names pusher {pusher}, beyond the {} pushers", self.next.len()));
        };
        let expected = next.load(Ordering::Relaxed);
        if seq != expected || f.size != Self::check_word(pusher, seq) {
            return wrong(format!(
                "pusher {pusher}: command {seq} (check word {:#x}) where command {expected} (check word {:#x}) was due",
                f.size,
                Self::check_word(pusher, seq)
            ));
        }
        next.store(expected + 1, Ordering::Relaxed);
        Ok(Handled::Done)
    }
}

pub(super) fn run(bench: &ProxyBench, torchrun: &TorchrunEnv) -> Result<RankReport, BoxError> {
    let env = Env::from_process()?;
    let device = Device::new(torchrun.local_rank.unwrap_or(torchrun.rank))?;
    let bootstrap: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::builder().from_env()?);
    let comm = Communicator::new(bootstrap, device.clone(), env.clone())?;
    let gpu = Gpu {
        library: KernelLibrary::new(env.cache_dir.clone(), &weft_core::device_code::TEST_KERNELS),
        stream: Stream::new(&device)?,
        host_timeout: env.device_timeout + Duration::from_secs(30),
        comm,
    };
    let report = match bench {
        ProxyBench::Fifo(o) => RankReport::Fifo(gpu.fifo(o)?),
        ProxyBench::P2p(o) => RankReport::P2p(gpu.p2p(o)?),
    };
    gpu.comm.barrier()?;
    Ok(report)
}

struct Gpu {
    comm: Communicator,
    library: KernelLibrary,
    stream: Stream,
    /// Bound of every wait for the stream.
    host_timeout: Duration,
}

/// `n` FIFOs, each served by a proxy thread of its own (pinned near the GPU), with `handler` for
/// the bench op.
struct Fifos<'comm> {
    service: Option<ProxyService>,
    /// The FIFOs and their device handles; dropped after the service (declared after it).
    table: FifoTable<'comm>,
}

impl<'comm> Fifos<'comm> {
    fn start(
        comm: &'comm Communicator,
        n: usize,
        depth: usize,
        handler: Arc<dyn CommandHandler>,
    ) -> Result<Self, BoxError> {
        let config = ProxyConfig { threads: n, ..ProxyConfig::default() }.near_pci_device(&comm.device().pci_bus_id()?);
        let mut builder = ProxyService::builder(config).handler(BENCH_OP, handler)?;
        let mut fifos = Vec::with_capacity(n);
        for _ in 0..n {
            let fifo = PinnedFifo::new(comm.device(), depth)?;
            builder = builder.fifo(FifoReader::new(fifo.clone())?);
            fifos.push(fifo);
        }
        let table = FifoTable::new(comm, fifos)?;
        Ok(Self { service: Some(builder.start()?), table })
    }

    fn failure(&self) -> Option<String> {
        self.service.as_ref().and_then(ProxyService::failure).map(|e| e.to_string())
    }

    /// Stops the threads; fails unless they popped exactly `expected` commands.
    fn stop(mut self, expected: u64) -> Result<(), BoxError> {
        let Some(service) = self.service.take() else { return Ok(()) };
        let report = service.shutdown()?;
        if report.executed != expected || report.abandoned != 0 {
            return Err(format!("the proxy popped {report:?}, {expected} commands were pushed").into());
        }
        Ok(())
    }
}

impl Gpu {
    fn gpu_failure(&self, what: &str, detail: String) -> BoxError {
        format!("{what}: {detail}; device record {:?}", self.comm.device_failure()).into()
    }

    /// Seconds `launch` took on the stream (CUDA events around it), after a bounded wait.
    /// Runs `launch` between two events on the stream, waits for it and returns the seconds
    /// between the events.
    fn timed<'env>(
        &'env self,
        what: &str,
        launch: impl for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> Result<(), BoxError>,
    ) -> Result<f64, BoxError> {
        Ok(f64::from(timed_scope(&self.comm, &self.stream, self.host_timeout, what, launch)?) / 1e3)
    }

    fn kernel(&self, name: &str) -> Result<Kernel, BoxError> {
        Ok(self.library.load(self.comm.device(), "port.cu")?.module.kernel(name)?)
    }

    fn fifo(&self, o: &FifoOptions) -> Result<FifoReport, BoxError> {
        let push_rate = self.kernel("weft_fifo_push_rate")?;
        let out = PinnedHostMemory::alloc(self.comm.device(), 16)?;
        let mut rows = Vec::new();
        for &threads in &o.threads {
            for &pushers in &o.pushers {
                rows.push(self.push_rate(&push_rate, &out, o, threads, pushers)?);
                if self.comm.rank() == 0 {
                    progress::record(threads);
                }
            }
        }
        let (round_trip_us, host_read_us) = self.fifo_latency(&out, o)?;
        Ok(FifoReport { rows, round_trip_us, host_read_us })
    }

    /// One row of the push-rate table: a warm-up run of one push per pusher, then [`RUNS`] runs.
    fn push_rate(
        &self,
        kernel: &Kernel,
        out: &PinnedHostMemory,
        o: &FifoOptions,
        threads: usize,
        pushers: u32,
    ) -> Result<FifoRow, BoxError> {
        let check = Arc::new(Check::new(pushers));
        let fifos = Fifos::start(&self.comm, threads, o.depth, check.clone())?;
        let grid = o.grid(pushers);
        let launch = LaunchConfig { grid: grid.blocks, block: grid.block_threads, shared_bytes: 0 };
        let run = |per_pusher: u32, first_seq: u32| -> Result<f64, BoxError> {
            out.write(0, 0u64)?;
            let seconds = self.timed("the FIFO push kernel", |scope| {
                let counts = (pushers, o.lanes, per_pusher, first_seq);
                Ok(test_launchers::fifo_push_rate(scope, kernel, launch, &fifos.table, BENCH_OP, counts, out)?)
            })?;
            match out.read::<u64>(0)? {
                0 => Ok(seconds),
                n => Err(self.gpu_failure(
                    "FIFO push kernel",
                    format!("{n} pushers/blocks failed, proxy {:?}", fifos.failure()),
                )),
            }
        };
        let per_pusher = o.per_pusher(pushers);
        run(1, 0)?;
        let mut seconds = 0.0;
        for r in 0..RUNS {
            seconds += run(per_pusher, 1 + r * per_pusher)?;
        }
        let pushes = u64::from(RUNS) * o.pushes_per_run(pushers);
        fifos.stop(u64::from(pushers) + pushes)?;
        let short = check.short_pushers(1 + RUNS * per_pusher);
        if !short.is_empty() {
            return Err(format!("FIFO commands missing: (pusher, commands seen) {short:?}").into());
        }
        Ok(FifoRow { threads, pushers, pushes, seconds })
    }

    /// The push→pop round trip and the latency of one GPU read of host memory, µs: one FIFO, one
    /// proxy thread, one pushing thread.
    fn fifo_latency(&self, out: &PinnedHostMemory, o: &FifoOptions) -> Result<(f64, f64), BoxError> {
        let latency = self.kernel("weft_fifo_latency")?;
        let host_read = self.kernel("weft_host_read_latency")?;
        let fifos = Fifos::start(&self.comm, 1, o.depth, Arc::new(Discard))?;
        let round_trips = |rounds: u32| -> Result<u64, BoxError> {
            out.write(0, 0u64)?;
            out.write(8, 0u64)?;
            self.timed("the FIFO latency kernel", |scope| {
                Ok(test_launchers::fifo_latency(scope, &latency, &fifos.table, BENCH_OP, rounds, out)?)
            })?;
            match (out.read::<u64>(0)?, out.read::<u64>(8)?) {
                (ns, 0) => Ok(ns),
                _ => Err(self.gpu_failure("FIFO latency kernel", format!("proxy {:?}", fifos.failure()))),
            }
        };
        let warm_up = 100;
        round_trips(warm_up)?;
        let ns = round_trips(o.rounds)?;
        self.timed("the host-read latency kernel", |scope| {
            Ok(test_launchers::host_read_latency(scope, &host_read, &fifos.table, o.rounds, out)?)
        })?;
        let read_ns = out.read::<u64>(0)?;
        fifos.stop(u64::from(warm_up + o.rounds))?;
        let per_round_us = |total: u64| total as f64 / f64::from(o.rounds.max(1)) / 1e3;
        Ok((per_round_us(ns), per_round_us(read_ns)))
    }

    fn p2p(&self, o: &P2pOptions) -> Result<Vec<P2pRow>, BoxError> {
        let (comm, rank) = (&self.comm, self.comm.rank());
        if comm.world_size() != 2 {
            return Err(format!("weft bench p2p runs on 2 ranks, not {}", comm.world_size()).into());
        }
        let peer = 1 - rank;
        let data: RegisteredMemory = comm.register(comm.alloc(o.max_bytes)?)?;
        let mut rows = Vec::new();
        match o.channel {
            ChannelKind::Memory | ChannelKind::Bulk => {
                let engine = if o.channel == ChannelKind::Memory { PutEngine::Sm } else { PutEngine::Bulk };
                let loaded = self.library.load(comm.device(), "selftest.cu")?;
                let kernels = SelftestKernels::new(&loaded.module)?;
                let runner = SelftestRunner::new(&kernels, comm, &self.stream, self.host_timeout);
                let ch = comm.memory_channel(peer, &data, None, MemoryChannelConfig::default())?;
                for bytes in o.sizes() {
                    comm.barrier()?;
                    if rank == 0 {
                        let mut best = f64::INFINITY;
                        for grid in PUT_GRIDS {
                            best = best.min(runner.put_timed(engine, &ch, bytes as u64, grid, calls_for(bytes))?);
                        }
                        rows.push(P2pRow { bytes, us: best * 1e6, latency_us: None });
                        progress::record(bytes);
                    }
                }
                comm.barrier()?;
            }
            ChannelKind::Port => {
                let kernel = self.kernel("weft_port_put_bw")?;
                let proxy = PortProxy::new(comm, PortProxyConfig::default())?;
                let id = proxy.register(&data)?;
                let ch = proxy.channel(peer, id, None)?;
                let status = PinnedHostMemory::alloc(comm.device(), 8)?;
                let run = |bytes: usize, count: u32| -> Result<f64, BoxError> {
                    status.write(0, 0u32)?;
                    let seconds = self.timed("the PortChannel put kernel", |scope| {
                        // The options keep sizes below 4 GiB for port.
                        let put = (bytes as u32, count, rank == 0);
                        Ok(test_launchers::port_put_bandwidth(scope, &kernel, &ch, put, &status)?)
                    })?;
                    match status.read::<u32>(0)? {
                        1 => Ok(seconds),
                        s => Err(self
                            .gpu_failure("PortChannel put kernel", format!("status {s}, proxy {:?}", proxy.failure()))),
                    }
                };
                for bytes in o.sizes() {
                    // One put alone, LATENCY_RUNS times (the first also warms up): its median.
                    let mut alone = Vec::with_capacity(LATENCY_RUNS);
                    for _ in 0..LATENCY_RUNS {
                        comm.barrier()?;
                        alone.push(run(bytes, 1)? * 1e6);
                    }
                    alone.sort_by(f64::total_cmp);
                    comm.barrier()?;
                    let count = calls_for(bytes);
                    let seconds = run(bytes, count)?;
                    if rank == 0 {
                        let latency_us = Some(alone[LATENCY_RUNS / 2]);
                        rows.push(P2pRow { bytes, us: seconds * 1e6 / f64::from(count), latency_us });
                        progress::record(bytes);
                    }
                }
                comm.barrier()?;
                drop(ch);
                proxy.shutdown()?;
            }
        }
        Ok(rows)
    }
}

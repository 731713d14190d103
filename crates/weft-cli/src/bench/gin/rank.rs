//! One rank of `weft bench gin`, a thread of this process: the probes over each backend, then
//! the AllToAll on the emulated NIC. Every host wait on a stream is bounded (`LaunchScope`'s
//! timeout), every device wait by the device communicator's.

use std::sync::Arc;
use std::time::Duration;

use weft_bootstrap::Bootstrap;
use weft_core::{Communicator, Env, KernelLibrary};
use weft_gin::examples::{AllToAllWindows, CallSlots, GinExamples, GinProbes, STREAM_LSA_BLOCKS};
use weft_gin::{DevComm, GinError, Requirements};
use weft_gpu::{Device, DeviceBuffer, LaunchScope, Stream};

use crate::harness::timed::timed_scope;

use super::{
    AllToAllRow, BandwidthRow, GinBenchOptions, GinRankReport, LatencyRow, PING_BYTES, PROBE_BACKENDS, ROUNDS,
    stream_messages,
};
use crate::harness::gin_backend::GinBackend;
use crate::harness::launch;

type BoxError = Box<dyn std::error::Error>;

/// Every call's signal and world barrier (one call runs at a time; a put stream of several
/// blocks takes the following ones too).
const SLOTS: CallSlots = CallSlots { signal: 0, barrier: 0 };
/// The windows: the probes' data, or the AllToAll's send and receive windows.
const DATA: u32 = 0;
const ALLTOALL: AllToAllWindows = AllToAllWindows { send: 0, recv: 1 };

/// Every rank's report, in rank order, from `options.ranks` threads on `options.gpus` GPUs.
pub(super) fn run_threads(options: &GinBenchOptions) -> Result<Vec<GinRankReport>, BoxError> {
    let mut env = Env::from_process()?;
    env.share_gpus = options.shares_gpus();
    let (gpus, shared) = (options.gpus.max(1), options.clone());
    let outcomes = launch::run_rank_threads(options.ranks, "weft-gin-bench", move |rank, bootstrap| {
        run_rank(&shared, bootstrap, rank % gpus, &env).map_err(|e| format!("rank {rank}: {e}"))
    })?;
    // Every rank's outcome: the first failure is often what made its peers time out.
    let (mut reports, mut failures) = (Vec::new(), Vec::new());
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push(format!("rank {rank} panicked")),
        }
    }
    if failures.is_empty() { Ok(reports) } else { Err(failures.join("; ").into()) }
}

fn run_rank(
    options: &GinBenchOptions,
    bootstrap: Arc<dyn Bootstrap>,
    gpu: usize,
    env: &Env,
) -> Result<GinRankReport, BoxError> {
    let device = Device::new(gpu)?;
    let library = KernelLibrary::new(env.cache_dir.clone(), &weft_gin::device_code::KERNELS);
    let module = library.load(&device, weft_gin::device_code::UNIT)?.module;
    let comm = Communicator::new(bootstrap, device.clone(), env.clone())?;
    let mut report = GinRankReport::default();
    let probe_window = (options.max_bytes as u64).max(2 * PING_BYTES);
    for backend in PROBE_BACKENDS {
        let rank = Rank::new(&comm, backend, options)?;
        // A signal and a world barrier per block of the put stream.
        let slots = if backend == GinBackend::Lsa { STREAM_LSA_BLOCKS } else { 1 };
        rank.with_dev(vec![probe_window], slots, |dev| {
            let probes = GinProbes::new(dev, &module)?;
            report.latency.push(rank.latency(&probes)?);
            for bytes in options.sizes() {
                report.bandwidth.push(rank.bandwidth(&probes, bytes)?);
            }
            Ok(())
        })?;
    }
    let rank = Rank::new(&comm, GinBackend::EmulatedNic, options)?;
    let world = comm.world_size();
    let alltoall_window = options.max_bytes.max(4 * world) as u64;
    rank.with_dev(vec![alltoall_window; 2], 1, |dev| {
        let examples = GinExamples::new(dev, &module)?;
        for bytes in options.sizes() {
            report.alltoall.push(rank.alltoall(&examples, bytes)?);
        }
        Ok(())
    })?;
    Ok(report)
}

/// A rank on one backend's sub-communicator.
struct Rank<'o> {
    comm: Communicator,
    backend: GinBackend,
    options: &'o GinBenchOptions,
    stream: Stream,
    timeout: Duration,
}

impl<'o> Rank<'o> {
    fn new(comm: &Communicator, backend: GinBackend, options: &'o GinBenchOptions) -> Result<Self, BoxError> {
        let env = backend.env(comm.env());
        // A launch moves at most `STREAM_BYTES` or `ROUNDS` round trips: well within this.
        let timeout = env.device_timeout + Duration::from_secs(30);
        let comm = Communicator::new(Arc::clone(comm.bootstrap()), comm.device().clone(), env)?;
        let stream = Stream::new(comm.device())?;
        Ok(Self { comm, backend, options, stream, timeout })
    }

    /// A device communicator with `windows` and `slots` signals and world barriers, handed to
    /// `body`; every rank leaves `body` before any frees its heap (a peer's kernel may use it
    /// until then).
    fn with_dev(
        &self,
        windows: Vec<u64>,
        slots: u32,
        body: impl FnOnce(&DevComm) -> Result<(), BoxError>,
    ) -> Result<(), BoxError> {
        let requirements = Requirements { signals: slots, world_barriers: slots, windows, ..Default::default() };
        let dev = DevComm::new(&self.comm, &requirements)?;
        let result = body(&dev);
        self.comm.barrier()?;
        result
    }

    /// `launch` between two events on the stream, once the ranks settled; waits for it and
    /// returns its µs.
    fn timed<'env>(
        &'env self,
        launch: impl for<'scope> FnOnce(&'scope LaunchScope<'scope, 'env>) -> Result<(), GinError>,
    ) -> Result<f64, BoxError> {
        self.comm.settle_before_launch()?;
        let ms = timed_scope(&self.comm, &self.stream, self.timeout, "weft bench gin", launch)?;
        Ok(f64::from(ms) * 1e3)
    }

    /// A warm-up launch, then the options' timed trials, each one's µs divided by `per_launch`.
    fn trials<'env>(
        &'env self,
        per_launch: f64,
        mut launch: impl for<'scope> FnMut(&'scope LaunchScope<'scope, 'env>) -> Result<(), GinError>,
    ) -> Result<Vec<f64>, BoxError> {
        self.timed(&mut launch)?;
        (0..self.options.trials).map(|_| self.timed(&mut launch).map(|us| us / per_launch)).collect()
    }

    fn latency(&self, probes: &GinProbes<'_>) -> Result<LatencyRow, BoxError> {
        let trials_us =
            self.trials(2.0 * f64::from(ROUNDS), |scope| probes.ping_pong(scope, (DATA, PING_BYTES), ROUNDS, SLOTS))?;
        Ok(LatencyRow { backend: self.backend, rounds: ROUNDS, trials_us })
    }

    /// The put stream of `bytes` messages: over LSA split over [`STREAM_LSA_BLOCKS`] blocks (one
    /// SM does not fill NVLink), through the proxy from one block (a command per message).
    fn bandwidth(&self, probes: &GinProbes<'_>, bytes: usize) -> Result<BandwidthRow, BoxError> {
        let messages = stream_messages(bytes);
        let blocks = if self.backend == GinBackend::Lsa { STREAM_LSA_BLOCKS } else { 1 };
        let trials_us = self.trials(f64::from(messages), |scope| {
            probes.put_stream(scope, (DATA, bytes as u64), messages, SLOTS, blocks)
        })?;
        Ok(BandwidthRow { backend: self.backend, bytes, messages, blocks, trials_us })
    }

    /// The AllToAll of `bytes` per rank, rounded down to whole `u32` chunks per rank: the
    /// exchange between the windows alone (what the α-β floor bounds), then the safe call
    /// (copy in, exchange, copy out).
    fn alltoall(&self, examples: &GinExamples<'_>, bytes: usize) -> Result<AllToAllRow, BoxError> {
        let world = self.comm.world_size();
        let elements = (bytes / 4 / world).max(1) * world;
        let chunk = (4 * elements / world) as u64;
        let exchange_us = self.trials(1.0, |scope| examples.alltoall_windows(scope, ALLTOALL, SLOTS, chunk))?;
        let device = self.comm.device();
        let input = DeviceBuffer::<u32>::new(device, elements)?;
        let mut output = DeviceBuffer::<u32>::new(device, elements)?;
        let call_us = self.trials(1.0, |scope| {
            examples.alltoall(scope, ALLTOALL, SLOTS, &input.as_slice(), &mut output.as_mut_slice())
        })?;
        Ok(AllToAllRow { bytes: 4 * elements, exchange_us, call_us })
    }
}

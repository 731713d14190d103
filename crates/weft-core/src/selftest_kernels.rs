//! Safe, synchronous launchers of the self-test kernels (`device/tests/selftest.cu`).
//!
//! Each method validates every offset and size against the buffers the channel holds, enqueues
//! its kernels, and returns only after the stream is idle (bounded) and the device error record
//! was checked, so no buffer can be dropped while a kernel uses it. `weft selftest` drives them.

use std::time::Duration;

use weft_gpu::{DeviceMemory, Event, Kernel, KernelParams, LaunchConfig, Module, PinnedHostMemory, Stream};

use crate::channel::MemoryChannel;
use crate::communicator::Communicator;
use crate::error::Error;
use crate::test_kernels::{SelftestGet, SelftestLlRound, SelftestPingpong, SelftestPut, SelftestReduce, SelftestWait};

/// LL packet protocol of a round-trip test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LlProtocol {
    /// 8-byte packets, 4 payload bytes.
    Ll8,
    /// 16-byte packets, 8 payload bytes.
    Ll16,
}

impl LlProtocol {
    /// Payload bytes per packet.
    pub fn payload_bytes(self) -> u64 {
        match self {
            Self::Ll8 => 4,
            Self::Ll16 => 8,
        }
    }

    /// Bytes per packet.
    pub fn packet_bytes(self) -> u64 {
        match self {
            Self::Ll8 => 8,
            Self::Ll16 => 16,
        }
    }
}

/// What moves a put's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutEngine {
    /// The SMs: every thread stores 16-byte vectors into the peer (`weft_selftest_put`).
    Sm,
    /// The TMA: bulk copies through shared memory, one issuing thread per block
    /// (`weft_selftest_bulk_put`); sizes and offsets in multiples of 16.
    Bulk,
}

/// Blocks of an LL round-trip launch; fixed so per-block flags advance in lockstep.
pub const LL_BLOCKS: u32 = 8;
const THREADS: u32 = 512;

/// The self-test kernels of one device.
#[derive(Debug)]
pub struct SelftestKernels {
    pingpong: Kernel,
    put: Kernel,
    bulk_put: Kernel,
    get: Kernel,
    wait: Kernel,
    ll8: Kernel,
    ll16: Kernel,
    reduce: Kernel,
}

impl SelftestKernels {
    /// Looks the kernels up in a module compiled from `selftest.cu`.
    pub fn new(module: &std::sync::Arc<Module>) -> Result<Self, weft_gpu::GpuError> {
        Ok(Self {
            pingpong: module.kernel("weft_selftest_pingpong")?,
            put: module.kernel("weft_selftest_put")?,
            bulk_put: module.kernel("weft_selftest_bulk_put")?,
            get: module.kernel("weft_selftest_get")?,
            wait: module.kernel("weft_selftest_wait")?,
            ll8: module.kernel("weft_selftest_ll8_round")?,
            ll16: module.kernel("weft_selftest_ll16_round")?,
            reduce: module.kernel("weft_selftest_reduce")?,
        })
    }
}

/// Runs self-test kernels for one rank on one stream.
#[derive(Debug)]
pub struct SelftestRunner<'a> {
    kernels: &'a SelftestKernels,
    comm: &'a Communicator,
    stream: &'a Stream,
    /// Host-side bound of every stream wait.
    host_timeout: Duration,
}

/// Threads of a put block: the SMs' stores use every thread, the TMA's one thread issues them.
fn put_threads(engine: PutEngine) -> u32 {
    match engine {
        PutEngine::Sm => THREADS,
        PutEngine::Bulk => 32,
    }
}

fn config(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig { grid, block, shared_bytes: 0 }
}

impl<'a> SelftestRunner<'a> {
    /// A runner; host waits give up after `host_timeout`.
    pub fn new(
        kernels: &'a SelftestKernels,
        comm: &'a Communicator,
        stream: &'a Stream,
        host_timeout: Duration,
    ) -> Self {
        Self { kernels, comm, stream, host_timeout }
    }

    fn invalid(&self, detail: String) -> Error {
        Error::InvalidArgument { rank: self.comm.rank(), detail }
    }

    fn gpu(&self, source: weft_gpu::GpuError) -> Error {
        Error::Gpu { rank: self.comm.rank(), source }
    }

    /// Waits (bounded) for the stream, then reports any failure a kernel recorded.
    fn finish(&self, what: &str) -> Result<(), Error> {
        self.stream.wait_idle(self.host_timeout, what).map_err(|e| self.gpu(e))?;
        self.comm.check_device()
    }

    /// # Safety
    /// The memory `params` reference must outlive the launch.
    unsafe fn launch<P: KernelParams>(&self, kernel: &Kernel, grid: u32, block: u32, params: &P) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { kernel.launch(self.stream, config(grid, block), params) }.map_err(|e| self.gpu(e))
    }

    fn check_range(&self, what: &str, offset: u64, bytes: u64, len: usize) -> Result<(), Error> {
        match offset.checked_add(bytes) {
            Some(end) if end <= len as u64 => Ok(()),
            _ => Err(self.invalid(format!("{what}: {offset}+{bytes} outside {len} bytes"))),
        }
    }

    /// Semaphore ping-pong of `iters` round trips (`relaxed`: relaxed signal/wait); the
    /// initiator returns the nanoseconds they took.
    pub fn pingpong(
        &self,
        ch: &MemoryChannel,
        iters: u32,
        initiator: bool,
        relaxed: bool,
    ) -> Result<Option<u64>, Error> {
        let out = PinnedHostMemory::alloc(self.comm.device(), 8).map_err(|e| self.gpu(e))?;
        self.comm.settle_with(std::iter::once(ch.peer()))?;
        let params = SelftestPingpong {
            ch: ch.device_handle(),
            iters,
            initiator: u32::from(initiator),
            relaxed: u32::from(relaxed),
            elapsed_ns: out.device_ptr(),
        };
        // SAFETY: `ch` and `out` live until finish() returned.
        unsafe { self.launch(&self.kernels.pingpong, 1, 32, &params)? };
        self.finish("semaphore ping-pong")?;
        initiator.then(|| out.read::<u64>(0)).transpose().map_err(|e| self.gpu(e))
    }

    /// The parameters of a get, shared by the put kernel, after checking that `bytes` fit at
    /// `src_offset` of the local buffer and at `dst_offset` of the peer's.
    fn copy_params(
        &self,
        ch: &MemoryChannel,
        dst_offset: u64,
        src_offset: u64,
        bytes: u64,
    ) -> Result<SelftestGet, Error> {
        self.check_range("local range", src_offset, bytes, ch.local_len())?;
        self.check_range("peer range", dst_offset, bytes, ch.remote_len())?;
        Ok(SelftestGet { ch: ch.device_handle(), dst_offset, src_offset, bytes })
    }

    /// [`Self::copy_params`] of a put by `engine`, and its kernel.
    fn put_params(
        &self,
        engine: PutEngine,
        ch: &MemoryChannel,
        dst_offset: u64,
        src_offset: u64,
        bytes: u64,
        signal: bool,
    ) -> Result<(SelftestPut, &Kernel), Error> {
        let SelftestGet { ch, dst_offset, src_offset, bytes } = self.copy_params(ch, dst_offset, src_offset, bytes)?;
        let kernel = match engine {
            PutEngine::Sm => &self.kernels.put,
            PutEngine::Bulk if (bytes | dst_offset | src_offset).is_multiple_of(16) => &self.kernels.bulk_put,
            PutEngine::Bulk => {
                return Err(self.invalid(format!(
                    "a bulk put moves multiples of 16 bytes between 16-byte offsets, not {bytes} B (src+{src_offset}, dst+{dst_offset})"
                )));
            }
        };
        Ok((SelftestPut { ch, dst_offset, src_offset, bytes, signal: u32::from(signal) }, kernel))
    }

    /// Puts `bytes` from local `src_offset` to the peer's `dst_offset` with `grid` blocks of
    /// `engine`; with `signal`, every block signals the peer once (the peer calls [`Self::wait`]
    /// with `grid`).
    #[allow(clippy::too_many_arguments)] // a put's whole description; grouping would only rename it
    pub fn put(
        &self,
        engine: PutEngine,
        ch: &MemoryChannel,
        dst_offset: u64,
        src_offset: u64,
        bytes: u64,
        grid: u32,
        signal: bool,
    ) -> Result<(), Error> {
        let (params, kernel) = self.put_params(engine, ch, dst_offset, src_offset, bytes, signal)?;
        // SAFETY: ranges checked above; the stream is drained by finish() before `ch` can drop.
        unsafe { self.launch(kernel, grid, put_threads(engine), &params)? };
        self.finish("put")
    }

    /// Times `iters` puts of `bytes` by `engine` (after one warm-up) and returns seconds per put.
    pub fn put_timed(
        &self,
        engine: PutEngine,
        ch: &MemoryChannel,
        bytes: u64,
        grid: u32,
        iters: u32,
    ) -> Result<f64, Error> {
        let (params, kernel) = self.put_params(engine, ch, 0, 0, bytes, false)?;
        let threads = put_threads(engine);
        let device = self.comm.device();
        let (start, end) = (Event::new(device).map_err(|e| self.gpu(e))?, Event::new(device).map_err(|e| self.gpu(e))?);
        // SAFETY: as in put().
        unsafe { self.launch(kernel, grid, threads, &params)? };
        start.record(self.stream).map_err(|e| self.gpu(e))?;
        for _ in 0..iters {
            // SAFETY: as above.
            unsafe { self.launch(kernel, grid, threads, &params)? };
        }
        end.record(self.stream).map_err(|e| self.gpu(e))?;
        self.finish("timed put")?;
        let ms = start.elapsed_ms(&end).map_err(|e| self.gpu(e))?;
        Ok(f64::from(ms) / 1e3 / f64::from(iters.max(1)))
    }

    /// Gets `bytes` from the peer's `dst_offset` into local `src_offset`.
    pub fn get(
        &self,
        ch: &MemoryChannel,
        dst_offset: u64,
        src_offset: u64,
        bytes: u64,
        grid: u32,
    ) -> Result<(), Error> {
        let params = self.copy_params(ch, dst_offset, src_offset, bytes)?;
        // SAFETY: ranges checked above; the stream is drained by finish() before `ch` can drop.
        unsafe { self.launch(&self.kernels.get, grid, THREADS, &params)? };
        self.finish("get")
    }

    /// Waits for `count` signals from the peer (bounded by the channel's timeout).
    pub fn wait(&self, ch: &MemoryChannel, count: u32) -> Result<(), Error> {
        let params = SelftestWait { ch: ch.device_handle(), count };
        // SAFETY: the kernel touches only the channel's semaphore, which `ch` keeps alive.
        unsafe { self.launch(&self.kernels.wait, 1, 32, &params)? };
        self.finish("semaphore wait")
    }

    /// Runs `launches` LL round trips of `bytes` with the peer back to back, then (if
    /// `graph_replays` > 0) captures `launches` more in a CUDA graph and replays it that many
    /// times. Returns the number of mismatching bytes the kernels counted. `flags` holds the
    /// per-block flags (LL_BLOCKS u32 words) and must be used with one channel only.
    #[allow(clippy::too_many_arguments)]
    pub fn ll_round_trips(
        &self,
        ch: &MemoryChannel,
        flags: &DeviceMemory,
        protocol: LlProtocol,
        bytes: u64,
        launches: u32,
        graph_replays: u32,
    ) -> Result<u32, Error> {
        let Some((local_packets, remote_packets)) = ch.packet_lens() else {
            return Err(self.invalid("LL round trips need a channel with packet buffers".into()));
        };
        let half = (local_packets.min(remote_packets) / 2) as u64 / 16 * 16;
        let needed = bytes.div_ceil(protocol.payload_bytes()) * protocol.packet_bytes();
        if bytes == 0 || needed > half {
            return Err(self.invalid(format!("{bytes} bytes need {needed} packet bytes per half, have {half}")));
        }
        self.check_range("LL payload", 0, 2 * bytes, ch.local_len())?;
        if flags.len() < 4 * LL_BLOCKS as usize || flags.device().ordinal() != self.comm.device().ordinal() {
            return Err(self.invalid("flag slots too small or on another GPU".into()));
        }
        let errors =
            DeviceMemory::alloc(self.comm.device(), 4, weft_gpu::AllocKind::Legacy).map_err(|e| self.gpu(e))?;
        errors.fill(0, 4, 0).map_err(|e| self.gpu(e))?;
        self.comm.settle_with(std::iter::once(ch.peer()))?;
        let kernel = match protocol {
            LlProtocol::Ll8 => &self.kernels.ll8,
            LlProtocol::Ll16 => &self.kernels.ll16,
        };
        let params = SelftestLlRound {
            ch: ch.device_handle(),
            flag_slots: flags.ptr(),
            bytes,
            half_bytes: half,
            rank: self.comm.rank() as u32,
            peer: ch.peer() as u32,
            errors: errors.ptr(),
        };
        for _ in 0..launches {
            // SAFETY: packet and payload ranges checked above; buffers outlive finish().
            unsafe { self.launch(kernel, LL_BLOCKS, THREADS, &params)? };
        }
        self.finish("LL round trips")?;
        if graph_replays > 0 {
            self.stream.begin_capture().map_err(|e| self.gpu(e))?;
            let mut captured = Ok(());
            for _ in 0..launches {
                // SAFETY: as above; captured launches run only inside finish()-bounded replays.
                captured = unsafe { self.launch(kernel, LL_BLOCKS, THREADS, &params) };
                if captured.is_err() {
                    break;
                }
            }
            let graph = self.stream.end_capture().map_err(|e| self.gpu(e))?;
            captured?;
            for _ in 0..graph_replays {
                graph.launch(self.stream).map_err(|e| self.gpu(e))?;
                self.finish("LL round trips in a CUDA graph")?;
            }
        }
        let mut count = [0u8; 4];
        errors.read(0, &mut count).map_err(|e| self.gpu(e))?;
        Ok(u32::from_le_bytes(count))
    }

    /// Element-wise `op` (0 sum, 1 min, 2 max) of `a` and `b` as `dtype` (0 f32, 1 f16, 2 bf16)
    /// on the device; inputs are whole 16-byte vectors.
    pub fn reduce(&self, a: &[u8], b: &[u8], dtype: u32, op: u32) -> Result<Vec<u8>, Error> {
        if a.len() != b.len() || a.is_empty() || !a.len().is_multiple_of(16) || dtype > 2 || op > 2 {
            return Err(self.invalid(format!("reduce of {} and {} bytes, dtype {dtype}, op {op}", a.len(), b.len())));
        }
        let device = self.comm.device();
        let alloc = || DeviceMemory::alloc(device, a.len(), weft_gpu::AllocKind::Legacy).map_err(|e| self.gpu(e));
        let (da, db, dout) = (alloc()?, alloc()?, alloc()?);
        da.write(0, a).map_err(|e| self.gpu(e))?;
        db.write(0, b).map_err(|e| self.gpu(e))?;
        dout.fill(0, a.len(), 0xff).map_err(|e| self.gpu(e))?;
        let params =
            SelftestReduce { a: da.ptr(), b: db.ptr(), out: dout.ptr(), vectors: (a.len() / 16) as u64, dtype, op };
        // SAFETY: each buffer holds `vectors` 16-byte vectors and lives until finish() returned.
        unsafe { self.launch(&self.kernels.reduce, 64, 256, &params)? };
        self.finish("reduce")?;
        let mut out = vec![0u8; a.len()];
        dout.read(0, &mut out).map_err(|e| self.gpu(e))?;
        Ok(out)
    }
}

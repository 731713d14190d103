//! Safe launchers of the device tests' and benchmarks' kernels over PortChannels and FIFOs
//! (`device/tests/port.cu`, parameter lists in `weft_core::test_kernels`), as
//! `weft_core::test_launchers` does for the others: each takes the owners of what its kernel
//! accesses, borrowed for a [`LaunchScope`], checks their sizes and builds the parameters.
//! What a kernel pushes is checked by the proxy against the registered memories, so only the
//! tables and status words a kernel reads and writes directly are checked here.

use weft_core::Communicator;
use weft_core::test_kernels::{
    FifoLatency, FifoPushRate, HostReadLatency, PortExchange, PortPutBandwidth, PortWaitOnce,
};
use weft_core::test_launchers::{ONE_WARP, require_bytes};
use weft_gpu::{DeviceMemory, DevicePtr, GpuError, Kernel, KernelParams, LaunchConfig, LaunchScope, PinnedHostMemory};
use weft_types::{FifoDeviceHandle, PortChannelDeviceHandle};

use crate::PortChannel;
use crate::fifo::PinnedFifo;

/// FIFOs with their device handles in pinned memory, as the FIFO benchmarks' kernels read them.
/// Holds the FIFOs, and the communicator whose error record their waits report to.
#[derive(Debug)]
pub struct FifoTable<'comm> {
    /// `FifoDeviceHandle[fifos.len()]`.
    handles: PinnedHostMemory,
    fifos: Vec<PinnedFifo>,
    _comm: &'comm Communicator,
}

impl<'comm> FifoTable<'comm> {
    /// The handles of `fifos` (at least one), whose bounded waits name no peer.
    pub fn new(comm: &'comm Communicator, fifos: Vec<PinnedFifo>) -> Result<Self, GpuError> {
        if fifos.is_empty() {
            return Err(GpuError::InvalidArgument("a FIFO table of no FIFO".into()));
        }
        let mut wait = comm.wait_context(0, None);
        wait.peer = -1;
        let size = size_of::<FifoDeviceHandle>();
        let handles = PinnedHostMemory::alloc(comm.device(), fifos.len() * size)?;
        for (i, fifo) in fifos.iter().enumerate() {
            handles.write(i * size, fifo.device_handle(wait))?;
        }
        Ok(Self { handles, fifos, _comm: comm })
    }

    /// The FIFOs.
    pub fn fifos(&self) -> &[PinnedFifo] {
        &self.fifos
    }

    fn first(&self) -> Result<FifoDeviceHandle, GpuError> {
        self.handles.read(0)
    }
}

/// `weft_fifo_push_rate` with `launch`: `pushers` threads push `pushes` commands of `op` each
/// (the first numbered `first_seq`), spread over the table's FIFOs; `out[0]` (a `u64`) counts
/// the failures.
#[allow(clippy::too_many_arguments)] // the kernel's parameters, each named at the call
pub fn fifo_push_rate<'scope>(
    scope: &LaunchScope<'scope, '_>,
    kernel: &Kernel,
    launch: LaunchConfig,
    table: &'scope FifoTable<'_>,
    op: u8,
    (pushers, lanes, pushes, first_seq): (u32, u32, u32, u32),
    out: &'scope PinnedHostMemory,
) -> Result<(), GpuError> {
    require_bytes("the failure count", out.len(), 8)?;
    let params = FifoPushRate {
        fifos: table.handles.device_ptr(),
        nfifos: table.fifos.len() as u32,
        op: u32::from(op),
        pushers,
        lanes,
        pushes,
        first_seq,
        out: out.device_ptr(),
    };
    // SAFETY: the kernel reads the table's `nfifos` handles, pushes into their FIFOs (held by
    // the table) and writes out[0]: all borrowed for the scope, `out` checked above.
    unsafe { scope.launch(kernel, launch, &params) }
}

/// `weft_fifo_latency` (one warp): `rounds` push→completion round trips of `op` on the table's
/// first FIFO; `out[0]` (a `u64`) gets the nanoseconds, `out[1]` the failures.
pub fn fifo_latency<'scope>(
    scope: &LaunchScope<'scope, '_>,
    kernel: &Kernel,
    table: &'scope FifoTable<'_>,
    op: u8,
    rounds: u32,
    out: &'scope PinnedHostMemory,
) -> Result<(), GpuError> {
    first_fifo_launch(scope, kernel, table, out, |fifo, out| FifoLatency { fifo, op: u32::from(op), rounds, out })
}

/// `weft_host_read_latency` (one warp): `rounds` reads of the table's first FIFO's tail;
/// `out[0]` (a `u64`) gets the nanoseconds, `out[1]` the sum read.
pub fn host_read_latency<'scope>(
    scope: &LaunchScope<'scope, '_>,
    kernel: &Kernel,
    table: &'scope FifoTable<'_>,
    rounds: u32,
    out: &'scope PinnedHostMemory,
) -> Result<(), GpuError> {
    first_fifo_launch(scope, kernel, table, out, |fifo, out| HostReadLatency { fifo, rounds, out })
}

/// A one-warp launch of a kernel that drives the table's first FIFO and writes two `u64`s to
/// `out`, with the parameters `params` makes of that FIFO's handle and `out`'s address.
fn first_fifo_launch<'scope, P: KernelParams>(
    scope: &LaunchScope<'scope, '_>,
    kernel: &Kernel,
    table: &'scope FifoTable<'_>,
    out: &'scope PinnedHostMemory,
    params: impl FnOnce(FifoDeviceHandle, DevicePtr) -> P,
) -> Result<(), GpuError> {
    require_bytes("the latency record", out.len(), 16)?;
    let params = params(table.first()?, out.device_ptr());
    // SAFETY: both callers' `params` place only the FIFO's handle (the FIFO is held by the
    // table), `out`'s address (checked above) and plain values; both owners are borrowed for
    // the scope.
    unsafe { scope.launch(kernel, ONE_WARP, &params) }
}

/// `launches` launches of `weft_port_exchange`, back to back, one block per channel of `chs`:
/// block b puts `chunks` chunks of `chunk` bytes with signals over `chs[b]` (to `dst_base` on),
/// waits for the peer's, flushes and stores 1 in `status[b]` (a `u32`). `table` receives the
/// channels' handles first.
#[allow(clippy::too_many_arguments)] // the kernel's parameters, each named at the call
pub fn port_exchange<'scope>(
    scope: &LaunchScope<'scope, '_>,
    kernel: &Kernel,
    chs: &'scope [PortChannel],
    table: &'scope DeviceMemory,
    launches: u32,
    (chunk, chunks, dst_base): (u32, u32, u32),
    status: &'scope PinnedHostMemory,
) -> Result<(), GpuError> {
    require_bytes("the channel table", table.len(), chs.len() * size_of::<PortChannelDeviceHandle>())?;
    require_bytes("the status words", status.len(), 4 * chs.len())?;
    let handles: Vec<PortChannelDeviceHandle> = chs.iter().map(PortChannel::device_handle).collect();
    table.write_pod(0, &handles)?;
    let grid = u32::try_from(chs.len()).map_err(|_| GpuError::InvalidArgument(format!("{} channels", chs.len())))?;
    let params = PortExchange { chs: table.ptr(), chunk, chunks, dst_base, status: status.device_ptr() };
    let config = LaunchConfig { grid, block: 32, shared_bytes: 0 };
    // SAFETY: block b reads table[b] (written above), the channel it names (held by `chs`) and
    // writes status[b]: all borrowed for the scope, the sizes checked above.
    (0..launches).try_for_each(|_| unsafe { scope.launch(kernel, config, &params) })
}

/// `weft_port_wait_once` (one warp): one wait on `ch`; stores 1 in `status[0]` (a `u32`) on
/// success.
pub fn port_wait_once<'scope>(
    scope: &LaunchScope<'scope, '_>,
    kernel: &Kernel,
    ch: &'scope PortChannel,
    status: &'scope PinnedHostMemory,
) -> Result<(), GpuError> {
    require_bytes("the status word", status.len(), 4)?;
    let params = PortWaitOnce { ch: ch.device_handle(), status: status.device_ptr() };
    // SAFETY: the channel and the status word are borrowed for the scope, the size checked.
    unsafe { scope.launch(kernel, ONE_WARP, &params) }
}

/// `weft_port_put_bw` (one warp), one direction of the PortChannel benchmark: the sender puts
/// `bytes` from offset 0 `count` times with signals, the receiver waits for `count` signals;
/// stores 1 in `status[0]` (a `u32`) on success.
pub fn port_put_bandwidth<'scope>(
    scope: &LaunchScope<'scope, '_>,
    kernel: &Kernel,
    ch: &'scope PortChannel,
    (bytes, count, sender): (u32, u32, bool),
    status: &'scope PinnedHostMemory,
) -> Result<(), GpuError> {
    require_bytes("the status word", status.len(), 4)?;
    let params = PortPutBandwidth {
        ch: ch.device_handle(),
        bytes,
        count,
        sender: u32::from(sender),
        status: status.device_ptr(),
    };
    // SAFETY: as port_wait_once; the proxy checks the puts against the registered memories.
    unsafe { scope.launch(kernel, ONE_WARP, &params) }
}

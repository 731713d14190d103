//! Safe launchers of the device tests' and benchmarks' kernels that run alongside host work
//! (the synchronous ones are [`crate::selftest_kernels`]): each takes the owners of what its
//! kernel reads and writes, borrowed for a [`LaunchScope`], checks their sizes, and builds the
//! parameter list itself. The launchers of kernels over weft-net's channels and FIFOs are in
//! `weft_net::test_launchers`, on the checks of this module.

use weft_gpu::{DeviceMemory, GpuError, Kernel, LaunchConfig, LaunchScope, PinnedHostMemory};

use crate::communicator::Communicator;
use crate::test_kernels::WaitToken;

/// One warp in one block: the launch of the kernels that drive a single channel or FIFO.
pub const ONE_WARP: LaunchConfig = LaunchConfig { grid: 1, block: 32, shared_bytes: 0 };

/// `Err` unless `what`, of `have` bytes, holds the `need` bytes its kernel accesses.
pub fn require_bytes(what: &str, have: usize, need: usize) -> Result<(), GpuError> {
    if have < need {
        return Err(GpuError::InvalidArgument(format!("{what} has {have} bytes, the kernel accesses {need}")));
    }
    Ok(())
}

/// `weft_wait_token` (one warp): waits until the 8-byte `token` reaches `value`, bounded by
/// `comm`'s device timeout towards `peer` (a timeout lands in `comm`'s error record), and
/// stores 1 in `status[0]` (a `u32`) on success.
pub fn wait_token<'scope>(
    scope: &LaunchScope<'scope, '_>,
    kernel: &Kernel,
    comm: &'scope Communicator,
    peer: usize,
    token: &'scope DeviceMemory,
    value: u64,
    status: &'scope PinnedHostMemory,
) -> Result<(), GpuError> {
    require_bytes("the token", token.len(), 8)?;
    require_bytes("the status word", status.len(), 4)?;
    let params =
        WaitToken { token: token.ptr(), value, wait: comm.wait_context(peer, None), status: status.device_ptr() };
    // SAFETY: the kernel reads the token's 8 bytes, writes status[0] and the communicator's
    // error record: all owned by what is borrowed for the scope, checked large enough above.
    unsafe { scope.launch(kernel, ONE_WARP, &params) }
}

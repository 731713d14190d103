//! The safe launchers of the example kernels ([`GinExamples`]): each checks its call against
//! the device communicator (`super::plan`), then enqueues a copy of the input into the
//! communicator's window, the kernel, and a copy of the window out into the output.

use std::sync::Arc;

use weft_gpu::{DeviceElement, DevicePtr, DeviceSlice, DeviceSliceMut, Kernel, KernelParams, Module};

use super::plan::{self, AllToAllWindows, Buffers, CallSlots, Geometry, Plan, WindowRange};
use super::target::CallTarget;
use crate::{DevComm, GinError};

/// The example kernels, loaded on the GPU of the device communicator they run on.
#[derive(Debug)]
pub struct GinExamples<'d> {
    dev: &'d DevComm,
    alltoall: Kernel,
    ring_allgather: Kernel,
    halo: Kernel,
}

impl<'d> GinExamples<'d> {
    /// The kernels of `module` (the `device_code::UNIT` of `device_code::KERNELS`, loaded on
    /// `dev`'s GPU), to run on `dev`.
    pub fn new(dev: &'d DevComm, module: &Arc<Module>) -> Result<Self, GinError> {
        let kernel = |name| module.kernel(name).map_err(|source| dev.gpu_error(source));
        Ok(Self {
            dev,
            alltoall: kernel("weft_gin_alltoall")?,
            ring_allgather: kernel("weft_gin_ring_allgather")?,
            halo: kernel("weft_gin_halo")?,
        })
    }

    /// An AllToAll (`device/kernels/gin/alltoall.cu`): `input` is `world` chunks (chunk p for
    /// rank p), copied into window `windows.send`; `output` (as long) receives chunk r from
    /// rank r, out of window `windows.recv`.
    pub fn alltoall<'scope, T: DeviceElement>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        windows: AllToAllWindows,
        slots: CallSlots,
        input: &DeviceSlice<'_, T>,
        output: &mut DeviceSliceMut<'_, T>,
    ) -> Result<(), GinError> {
        let plan = plan::alltoall(&self.geometry(), windows, slots, buffers(input, output))?;
        self.enqueue(target, &self.alltoall, &plan, input, output)
    }

    /// The AllToAll of the windows' contents alone (`device/kernels/gin/alltoall.cu`, no copy
    /// in or out): chunk p of this rank's window `windows.send` (`chunk` bytes each, `world`
    /// chunks) goes to rank p's window `windows.recv` at `rank * chunk`. For callers that write
    /// and read the windows themselves (`GinWindow::ptr`), and what `weft bench gin` times
    /// against the network's floor.
    pub fn alltoall_windows<'scope>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        windows: AllToAllWindows,
        slots: CallSlots,
        chunk: u64,
    ) -> Result<(), GinError> {
        let plan = plan::alltoall_windows(&self.geometry(), windows, slots, chunk)?;
        self.launch(target, &self.alltoall, &plan)
    }

    /// A ring AllGather (`device/kernels/gin/ring_allgather.cu`) in window `data`: `input` is
    /// this rank's chunk, `output` (`world` chunks) every rank's, in rank order.
    pub fn ring_allgather<'scope, T: DeviceElement>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        data: u32,
        slots: CallSlots,
        input: &DeviceSlice<'_, T>,
        output: &mut DeviceSliceMut<'_, T>,
    ) -> Result<(), GinError> {
        let plan = plan::ring_allgather(&self.geometry(), data, slots, buffers(input, output))?;
        self.enqueue(target, &self.ring_allgather, &plan, input, output)
    }

    /// A halo exchange (`device/kernels/gin/halo.cu`) of `halo` elements on each side in window
    /// `field`: `input` is this rank's interior, `output` the field after the exchange,
    /// `[left neighbour's last halo | interior | right neighbour's first halo]`.
    pub fn halo<'scope, T: DeviceElement>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        (field, halo): (u32, usize),
        slots: CallSlots,
        input: &DeviceSlice<'_, T>,
        output: &mut DeviceSliceMut<'_, T>,
    ) -> Result<(), GinError> {
        let plan = plan::halo(&self.geometry(), field, halo, slots, buffers(input, output))?;
        self.enqueue(target, &self.halo, &plan, input, output)
    }

    fn geometry(&self) -> Geometry<'_> {
        Geometry { handle: self.dev.handle(), windows: self.dev.windows() }
    }

    /// This rank's address of `range`, checked inside its window by `plan`.
    fn address(&self, range: WindowRange) -> DevicePtr {
        self.dev.windows()[range.window as usize].ptr + range.offset
    }

    /// Copies `input` in, runs `plan`'s kernel, copies the output out, all on `target`.
    fn enqueue<'scope, T: DeviceElement, P: KernelParams>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        kernel: &'scope Kernel,
        plan: &Plan<P>,
        input: &DeviceSlice<'_, T>,
        output: &mut DeviceSliceMut<'_, T>,
    ) -> Result<(), GinError> {
        let ordinal = self.dev.heap().memory().device().ordinal();
        for (what, device) in [("input", input.device()), ("output", output.device())] {
            if device.ordinal() != ordinal {
                return Err(GinError::Call(format!(
                    "the {what} is on GPU {}, the DevComm on GPU {ordinal}",
                    device.ordinal()
                )));
            }
        }
        let stream = target.stream();
        let gpu = |source| self.dev.gpu_error(source);
        // SAFETY: `plan` checked both window ranges inside windows of `self.dev` and the views'
        // lengths equal to the ranges' bytes; the DevComm (and so its heap) is borrowed for
        // 'scope, which the target's work does not outlive (CallTarget), and the views'
        // allocations are retained by the stream (and any graph captured on it) below.
        unsafe {
            stream.copy_async(self.address(plan.input), input.ptr(), plan.input.bytes as usize).map_err(gpu)?;
            input.retain_on(stream);
        }
        self.launch(target, kernel, plan)?;
        // SAFETY: as for the input above.
        unsafe {
            stream.copy_async(output.ptr(), self.address(plan.output), plan.output.bytes as usize).map_err(gpu)?;
            output.retain_on(stream);
        }
        Ok(())
    }

    /// Launches `plan`'s kernel on `target`.
    fn launch<'scope, P: KernelParams>(
        &'scope self,
        target: &impl CallTarget<'scope>,
        kernel: &'scope Kernel,
        plan: &Plan<P>,
    ) -> Result<(), GinError> {
        // SAFETY: `plan` checked every window range the kernel touches inside windows of
        // `self.dev`; the kernel only touches the DevComm's heap, tables and proxy FIFOs, all
        // held by the DevComm, borrowed for 'scope, which the target's work does not outlive
        // (CallTarget), and its communicator's error record.
        unsafe { kernel.launch(target.stream(), plan.config, &plan.params) }
            .map_err(|source| self.dev.gpu_error(source))
    }
}

fn buffers<T: DeviceElement>(input: &DeviceSlice<'_, T>, output: &DeviceSliceMut<'_, T>) -> Buffers {
    Buffers { element: size_of::<T>(), input: input.len(), output: output.len() }
}

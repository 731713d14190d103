//! Every launch of an EP kernel: grid shapes and parameter lists in one place (the kernels'
//! comments in `device/kernels/ep/` state the same shapes). The parameter lists are declared
//! once, below: a launch takes one of these structs, and
//! `device/include/weft/generated/kernels/ep.cuh`, generated from them, holds the prototypes
//! the kernel definitions are compiled against.

use std::sync::Arc;

use weft_core::KernelLibrary;
use weft_core::trace::Tracer;
use weft_gpu::{Device, GpuError, Kernel, KernelParams, LaunchConfig, Stream};
use weft_types::{
    EpCombineArgs, EpContext, EpDispatchArgs, EpLayoutArgs, EpLlCombineArgs, EpLlDispatchArgs, EpLlNet, EpNotifyArgs,
};

use crate::device_code::{KERNELS, UNIT};

weft_gpu::device_kernels! {
    /// Every EP kernel's parameter list.
    pub(crate) fn signatures;

    /// The per-expert and per-rank token counts of a dispatch.
    pub(crate) struct Layout for ["weft_ep_layout"] {
        /// The routing and where the counts go.
        a: EpLayoutArgs => "weft::EpLayoutArgs",
    }

    /// The exchange of the counts and the receive layout of a dispatch.
    pub(crate) struct Notify for ["weft_ep_notify"] {
        /// The rank's EP buffers and peers.
        c: EpContext => "weft::EpContext",
        /// The counts and where the layout goes.
        a: EpNotifyArgs => "weft::EpNotifyArgs",
    }

    /// The reset of the dispatch counters or the combine tails.
    pub(crate) struct Prologue for ["weft_ep_prologue"] {
        /// The rank's EP buffers and peers.
        c: EpContext => "weft::EpContext",
        /// Nonzero: the dispatch counters; zero: the combine tails.
        dispatch: u32 => "uint32_t",
    }

    /// The normal dispatch.
    pub(crate) struct Dispatch for ["weft_ep_dispatch"] {
        /// The rank's EP buffers and peers.
        c: EpContext => "weft::EpContext",
        /// The call's tokens, layout and outputs.
        a: EpDispatchArgs => "weft::EpDispatchArgs",
    }

    /// The normal combine.
    pub(crate) struct Combine for ["weft_ep_combine"] {
        /// The rank's EP buffers and peers.
        c: EpContext => "weft::EpContext",
        /// The call's tokens, layout and outputs.
        a: EpCombineArgs => "weft::EpCombineArgs",
    }

    /// The two kernels of a low-latency dispatch.
    pub(crate) struct LlDispatch for ["weft_ep_ll_dispatch_send", "weft_ep_ll_dispatch_recv"] {
        /// The rank's EP buffers and peers.
        c: EpContext => "weft::EpContext",
        /// The call's tokens and outputs.
        a: EpLlDispatchArgs => "weft::EpLlDispatchArgs",
        /// The path to the ranks of other nodes.
        n: EpLlNet => "weft::EpLlNet",
    }

    /// The two kernels of a low-latency combine.
    pub(crate) struct LlCombine for ["weft_ep_ll_combine_send", "weft_ep_ll_combine_recv"] {
        /// The rank's EP buffers and peers.
        c: EpContext => "weft::EpContext",
        /// The call's tokens and outputs.
        a: EpLlCombineArgs => "weft::EpLlCombineArgs",
        /// The path to the ranks of other nodes.
        n: EpLlNet => "weft::EpLlNet",
    }
}

/// Threads of a dispatch or combine block (`kChannelThreads`).
pub(crate) const CHANNEL_THREADS: u32 = 512;
/// Threads of a low-latency block (`kLlThreads`).
const LL_THREADS: u32 = 512;

/// Dynamic shared memory of a low-latency launch: the network path's words
/// (`ll_net_words` in `low_latency.cuh`, `LL_MAX_EXPERTS + 1` of them) for a group spanning
/// nodes (its device communicator names proxy peers), none on one node, whose kernels then keep
/// the shared memory they had without the network path.
fn ll_net_shared_bytes(n: &EpLlNet) -> u32 {
    if n.gin.proxy_mask == 0 { 0 } else { 4 * (crate::region::LL_MAX_EXPERTS as u32 + 1) }
}
/// Threads of the layout, notify and prologue blocks (`kSetupThreads`).
const SETUP_THREADS: u32 = 256;
/// Experts one layout block counts (`kLayoutExpertsPerBlock`).
const LAYOUT_EXPERTS_PER_BLOCK: u32 = 64;

/// The EP kernels, loaded on one device.
#[derive(Debug)]
pub(crate) struct Kernels {
    layout: Kernel,
    notify: Kernel,
    prologue: Kernel,
    dispatch: Kernel,
    combine: Kernel,
    ll_dispatch: [Kernel; 2],
    ll_combine: [Kernel; 2],
    /// Whether the low-latency kernels are launched as programmatic dependents of the previous
    /// kernel on the stream (each waits for it on the GPU first: `ll_kernel_begin`).
    ll_early: bool,
}

/// The two kernels of a low-latency call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LlPhase {
    /// Writes into the peers and signals.
    Send = 0,
    /// Waits for the peers' signals and produces the outputs (DeepEP's hook).
    Recv = 1,
}

impl Kernels {
    /// Compiles (or reads from the cache in `cache_dir`) and loads the EP module on `device`:
    /// its traced variant, attached to `tracer`, when there is one. `ll_early`: launch the
    /// low-latency kernels early (`WEFT_EARLY_LAUNCH`).
    pub(crate) fn load(
        device: &Device,
        cache_dir: std::path::PathBuf,
        tracer: Option<&Tracer>,
        ll_early: bool,
    ) -> Result<Self, GpuError> {
        let defines = tracer.map(|t| t.defines(&[])).unwrap_or_default();
        let module = KernelLibrary::new(cache_dir, &KERNELS).load_with(device, UNIT, &defines)?.module;
        if let Some(tracer) = tracer {
            tracer.attach(&module)?;
        }
        let kernel = |name: &str| Arc::clone(&module).kernel(name);
        Ok(Self {
            layout: kernel("weft_ep_layout")?,
            notify: kernel("weft_ep_notify")?,
            prologue: kernel("weft_ep_prologue")?,
            dispatch: kernel("weft_ep_dispatch")?,
            combine: kernel("weft_ep_combine")?,
            ll_dispatch: [kernel("weft_ep_ll_dispatch_send")?, kernel("weft_ep_ll_dispatch_recv")?],
            ll_combine: [kernel("weft_ep_ll_combine_send")?, kernel("weft_ep_ll_combine_recv")?],
            ll_early,
        })
    }

    /// `weft_ep_layout`.
    ///
    /// # Safety
    /// Every address in `a` must be valid for its shape until the kernel ends.
    pub(crate) unsafe fn layout(&self, stream: &Stream, a: EpLayoutArgs) -> Result<(), GpuError> {
        let grid = a.experts.div_ceil(LAYOUT_EXPERTS_PER_BLOCK) + 1;
        let config = LaunchConfig { grid, block: SETUP_THREADS, shared_bytes: 0 };
        // SAFETY: the addresses are the caller's contract.
        unsafe { self.layout.launch(stream, config, &Layout { a }) }
    }

    /// `weft_ep_notify`.
    ///
    /// # Safety
    /// `c` must address live EP buffers of every rank, and every address in `a` be valid for
    /// its shape until the kernel ends.
    pub(crate) unsafe fn notify(&self, stream: &Stream, c: EpContext, a: EpNotifyArgs) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: 1 + c.ranks, block: SETUP_THREADS, shared_bytes: 4 * a.channels };
        // SAFETY: the caller's contract.
        unsafe { self.notify.launch(stream, config, &Notify { c, a }) }
    }

    /// `weft_ep_prologue`, resetting the dispatch counters (`dispatch`) or the combine tails.
    ///
    /// # Safety
    /// `c` must address live EP buffers of every rank.
    pub(crate) unsafe fn prologue(&self, stream: &Stream, c: EpContext, dispatch: bool) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: 1, block: SETUP_THREADS, shared_bytes: 0 };
        // SAFETY: `c` is the caller's contract.
        unsafe { self.prologue.launch(stream, config, &Prologue { c, dispatch: u32::from(dispatch) }) }
    }

    /// `weft_ep_dispatch` on `2 * a.channels` SMs.
    ///
    /// # Safety
    /// As [`Kernels::notify`], for `a`'s addresses.
    pub(crate) unsafe fn dispatch(&self, stream: &Stream, c: EpContext, a: EpDispatchArgs) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: 2 * a.channels, block: CHANNEL_THREADS, shared_bytes: 0 };
        // SAFETY: the caller's contract.
        unsafe { self.dispatch.launch(stream, config, &Dispatch { c, a }) }
    }

    /// `weft_ep_combine` on `2 * a.channels` SMs.
    ///
    /// # Safety
    /// As [`Kernels::notify`], for `a`'s addresses.
    pub(crate) unsafe fn combine(&self, stream: &Stream, c: EpContext, a: EpCombineArgs) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: 2 * a.channels, block: CHANNEL_THREADS, shared_bytes: 0 };
        // SAFETY: the caller's contract.
        unsafe { self.combine.launch(stream, config, &Combine { c, a }) }
    }

    /// `weft_ep_ll_dispatch_send` or `_recv` on `blocks` SMs.
    ///
    /// # Safety
    /// As [`Kernels::notify`], for `a`'s addresses.
    pub(crate) unsafe fn ll_dispatch(
        &self,
        stream: &Stream,
        c: EpContext,
        a: EpLlDispatchArgs,
        n: EpLlNet,
        blocks: u32,
        phase: LlPhase,
    ) -> Result<(), GpuError> {
        let shared = ll_net_shared_bytes(&n);
        // SAFETY: the caller's contract.
        unsafe { self.launch_ll(&self.ll_dispatch[phase as usize], stream, blocks, shared, &LlDispatch { c, a, n }) }
    }

    /// `weft_ep_ll_combine_send` or `_recv` on `blocks` SMs.
    ///
    /// # Safety
    /// As [`Kernels::notify`], for `a`'s addresses.
    pub(crate) unsafe fn ll_combine(
        &self,
        stream: &Stream,
        c: EpContext,
        a: EpLlCombineArgs,
        n: EpLlNet,
        blocks: u32,
        phase: LlPhase,
    ) -> Result<(), GpuError> {
        let shared = ll_net_shared_bytes(&n);
        // SAFETY: the caller's contract.
        unsafe { self.launch_ll(&self.ll_combine[phase as usize], stream, blocks, shared, &LlCombine { c, a, n }) }
    }

    /// Launches a low-latency kernel on `blocks` SMs with `shared_bytes` of dynamic shared
    /// memory, early when configured so.
    ///
    /// # Safety
    /// As [`Kernels::notify`], for the addresses in `params`.
    unsafe fn launch_ll<P: KernelParams>(
        &self,
        kernel: &Kernel,
        stream: &Stream,
        blocks: u32,
        shared_bytes: u32,
        params: &P,
    ) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: blocks, block: LL_THREADS, shared_bytes };
        // SAFETY: the caller's contract; an early launch is sound because every low-latency
        // kernel waits for the previous grid before its first access to memory
        // (`ll_kernel_begin`, checked by a test of `device_code`).
        unsafe {
            if self.ll_early {
                kernel.launch_early(stream, config, params)
            } else {
                kernel.launch(stream, config, params)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_group_spanning_nodes_launches_the_network_paths_shared_words() {
        let mut n = EpLlNet::default();
        assert_eq!(ll_net_shared_bytes(&n), 0);
        n.gin.proxy_mask = 0b10;
        assert_eq!(ll_net_shared_bytes(&n), 4 * (crate::region::LL_MAX_EXPERTS as u32 + 1));
    }
}

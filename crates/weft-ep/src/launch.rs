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
    DevCommHandle, EpCombineArgs, EpContext, EpDispatchArgs, EpLayoutArgs, EpLlCombineArgs, EpLlDispatchArgs, EpLlNet,
    EpNotifyArgs, EpRailArgs,
};

use crate::device_code::{KERNELS, UNIT};
use crate::rail_arrival::RailPhase;

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

    /// The rail hop's layout: `rail_send_head` and the counts the host exchanges.
    pub(crate) struct RailLayout for ["weft_ep_rail_layout"] {
        /// The layout, the outputs and the group's shape.
        a: EpRailArgs => "weft::EpRailArgs",
    }

    /// The rail hop's packing of a dispatch's rows by destination node, and its sum of the
    /// nodes' partials in the combine.
    pub(crate) struct Rail for ["weft_ep_rail_pack", "weft_ep_rail_sum"] {
        /// The call's rows, regions and counts.
        a: EpRailArgs => "weft::EpRailArgs",
    }

    /// The NVL hop of a node of one rank: the forwarded rows copied into the received rows as
    /// they arrive.
    pub(crate) struct RailUnpack for ["weft_ep_rail_unpack"] {
        /// The forwarded rows as the dispatch's input, the outputs, and where the rows arrive.
        d: EpDispatchArgs => "weft::EpDispatchArgs",
    }

    /// The rail hop's puts to the rank of this rail on every other node, and the waits for
    /// theirs.
    pub(crate) struct RailExchange for ["weft_ep_rail_exchange"] {
        /// The call's regions and counts.
        a: EpRailArgs => "weft::EpRailArgs",
        /// The device communicator (its wait context names this rank).
        h: DevCommHandle => "weft::DevCommHandle",
        /// `RailExchange::flags`: the phase, and whether to wait for the peers' puts.
        flags: u32 => "uint32_t",
    }

    /// The kernels of a low-latency dispatch: send and receive, each on one node and `_net`.
    /// A `_net` kernel is built for a group spanning nodes (`LlTopology`).
    pub(crate) struct LlDispatch for [
        "weft_ep_ll_dispatch_send",
        "weft_ep_ll_dispatch_recv",
        "weft_ep_ll_dispatch_send_net",
        "weft_ep_ll_dispatch_recv_net",
    ] {
        /// The rank's EP buffers and peers.
        c: EpContext => "weft::EpContext",
        /// The call's tokens and outputs.
        a: EpLlDispatchArgs => "weft::EpLlDispatchArgs",
        /// The path to the ranks of other nodes.
        n: EpLlNet => "weft::EpLlNet",
    }

    /// The kernels of a low-latency combine: send and receive, each on one node and `_net`.
    /// A `_net` kernel is built for a group spanning nodes (`LlTopology`).
    pub(crate) struct LlCombine for [
        "weft_ep_ll_combine_send",
        "weft_ep_ll_combine_recv",
        "weft_ep_ll_combine_send_net",
        "weft_ep_ll_combine_recv_net",
    ] {
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
/// `weft_ep_rail_exchange`'s flags (`kRailCombine`, `kRailPut`, `kRailAwait`, `kRailFlush`):
/// the combine's partials (else the dispatch's rows); put the call's chunks; wait for the
/// peers' puts of the call; wait for this rank's own puts to complete.
pub(crate) const RAIL_COMBINE: u32 = 1;
pub(crate) const RAIL_PUT: u32 = 2;
pub(crate) const RAIL_AWAIT: u32 = 4;
pub(crate) const RAIL_FLUSH: u32 = 8;

/// What one launch of `weft_ep_rail_exchange` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RailStep {
    /// Puts, waits for the peers' puts, flushes its own: the whole exchange in one kernel.
    Whole,
    /// Only the puts: never waits for another rank (but for the pack beside it, if any).
    Puts,
    /// The puts, then the flush of its own.
    PutsAndFlush,
    /// Only the flush of this rank's puts.
    Flush,
}

impl RailStep {
    fn flags(self) -> u32 {
        match self {
            Self::Whole => RAIL_PUT | RAIL_AWAIT | RAIL_FLUSH,
            Self::Puts => RAIL_PUT,
            Self::PutsAndFlush => RAIL_PUT | RAIL_FLUSH,
            Self::Flush => RAIL_FLUSH,
        }
    }
}
/// The rail phases' signals of the EP device communicator (`kRailDispatchSignal`,
/// `kRailCombineSignal`).
pub(crate) const RAIL_DISPATCH_SIGNAL: u32 = 2;
pub(crate) const RAIL_COMBINE_SIGNAL: u32 = 3;
/// Increments of a rail phase's signal per chunk (`kRailDispatchPuts`, `kRailCombinePuts`):
/// one per field array the chunk's rows carry.
pub(crate) const RAIL_DISPATCH_PUTS: u32 = 5;
pub(crate) const RAIL_COMBINE_PUTS: u32 = 2;
/// Threads of a rail pack or sum block (`kRailThreads`).
pub(crate) const RAIL_THREADS: u32 = 512;
/// Threads of a low-latency block (`kLlThreads`).
const LL_THREADS: u32 = 512;

/// The topology a low-latency kernel is built for: each body (`template <bool kNet>` in
/// `device/kernels/ep/`) is compiled into a kernel per topology, `<false>` into
/// `weft_ep_ll_<phase>` and `<true>` into `weft_ep_ll_<phase>_net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LlTopology {
    /// Every rank of the group is on this node: the kernels hold no network path.
    OneNode = 0,
    /// Some rank is on another node, reached through the proxy (the `_net` kernels).
    SpansNodes = 1,
}

impl LlTopology {
    /// The one place a launch's topology is decided: spanning nodes exactly when its device
    /// communicator names a proxy peer (`n.gin.proxy_mask`, which the `_net` kernels'
    /// `ll_remote` reads per rank).
    fn of(n: &EpLlNet) -> Self {
        if n.gin.proxy_mask == 0 { Self::OneNode } else { Self::SpansNodes }
    }

    /// Dynamic shared memory of a launch: the network path's words (`ll_net_words` in
    /// `low_latency.cuh`, `LL_MAX_EXPERTS + 1` of them) for the `_net` kernels, none for the
    /// one-node kernels, which never read them.
    fn shared_bytes(self) -> u32 {
        match self {
            Self::OneNode => 0,
            Self::SpansNodes => 4 * (crate::region::LL_MAX_EXPERTS as u32 + 1),
        }
    }
}

/// The low-latency dispatch kernels' names, `[topology][phase]` ([`LlTopology`], [`LlPhase`]).
const LL_DISPATCH_KERNELS: [[&str; 2]; 2] = [
    ["weft_ep_ll_dispatch_send", "weft_ep_ll_dispatch_recv"],
    ["weft_ep_ll_dispatch_send_net", "weft_ep_ll_dispatch_recv_net"],
];
/// The low-latency combine kernels' names, `[topology][phase]` ([`LlTopology`], [`LlPhase`]).
const LL_COMBINE_KERNELS: [[&str; 2]; 2] = [
    ["weft_ep_ll_combine_send", "weft_ep_ll_combine_recv"],
    ["weft_ep_ll_combine_send_net", "weft_ep_ll_combine_recv_net"],
];

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
    /// `[topology][phase]`, as [`LL_DISPATCH_KERNELS`].
    ll_dispatch: [[Kernel; 2]; 2],
    /// `[topology][phase]`, as [`LL_COMBINE_KERNELS`].
    ll_combine: [[Kernel; 2]; 2],
    rail_layout: Kernel,
    rail_pack: Kernel,
    rail_exchange: Kernel,
    rail_sum: Kernel,
    rail_unpack: Kernel,
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
        let ll = |names: [[&str; 2]; 2]| -> Result<[[Kernel; 2]; 2], GpuError> {
            let [[send, recv], [send_net, recv_net]] = names;
            Ok([[kernel(send)?, kernel(recv)?], [kernel(send_net)?, kernel(recv_net)?]])
        };
        Ok(Self {
            layout: kernel("weft_ep_layout")?,
            notify: kernel("weft_ep_notify")?,
            prologue: kernel("weft_ep_prologue")?,
            dispatch: kernel("weft_ep_dispatch")?,
            combine: kernel("weft_ep_combine")?,
            ll_dispatch: ll(LL_DISPATCH_KERNELS)?,
            ll_combine: ll(LL_COMBINE_KERNELS)?,
            rail_layout: kernel("weft_ep_rail_layout")?,
            rail_pack: kernel("weft_ep_rail_pack")?,
            rail_exchange: kernel("weft_ep_rail_exchange")?,
            rail_sum: kernel("weft_ep_rail_sum")?,
            rail_unpack: kernel("weft_ep_rail_unpack")?,
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

    /// `weft_ep_rail_layout`.
    ///
    /// # Safety
    /// Every address in `a` must be valid for its shape until the kernel ends.
    pub(crate) unsafe fn rail_layout(&self, stream: &Stream, a: EpRailArgs) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: 1, block: SETUP_THREADS, shared_bytes: 0 };
        // SAFETY: the caller's contract.
        unsafe { self.rail_layout.launch(stream, config, &RailLayout { a }) }
    }

    /// `weft_ep_rail_pack` (`sum` false) or `weft_ep_rail_sum` on `blocks` SMs.
    ///
    /// # Safety
    /// `a.base` must address this rank's live EP buffer, and every address in `a` be valid for
    /// its shape until the kernel ends.
    pub(crate) unsafe fn rail(&self, stream: &Stream, a: EpRailArgs, blocks: u32, sum: bool) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: blocks.max(1), block: RAIL_THREADS, shared_bytes: 0 };
        let kernel = if sum { &self.rail_sum } else { &self.rail_pack };
        // SAFETY: the caller's contract.
        unsafe { kernel.launch(stream, config, &Rail { a }) }
    }

    /// `weft_ep_rail_unpack` on `blocks` SMs.
    ///
    /// # Safety
    /// Every address in `d` must be valid for its shape until the kernel ends.
    pub(crate) unsafe fn rail_unpack(&self, stream: &Stream, d: EpDispatchArgs, blocks: u32) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: blocks.max(1), block: RAIL_THREADS, shared_bytes: 0 };
        // SAFETY: the caller's contract.
        unsafe { self.rail_unpack.launch(stream, config, &RailUnpack { d }) }
    }

    /// `weft_ep_rail_exchange` of `phase`, doing `step`.
    ///
    /// # Safety
    /// As [`Kernels::rail`]; `h` must be the live device communicator whose window 0 is the
    /// buffer.
    pub(crate) unsafe fn rail_exchange(
        &self,
        stream: &Stream,
        a: EpRailArgs,
        h: DevCommHandle,
        phase: RailPhase,
        step: RailStep,
    ) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: 1, block: 32, shared_bytes: 0 };
        let flags = step.flags()
            | match phase {
                RailPhase::Dispatch => 0,
                RailPhase::Combine => RAIL_COMBINE,
            };
        // SAFETY: the caller's contract.
        unsafe { self.rail_exchange.launch(stream, config, &RailExchange { a, h, flags }) }
    }

    /// `weft_ep_ll_dispatch_send` or `_recv` on `blocks` SMs, or its `_net` kernel for a group
    /// spanning nodes ([`LlTopology::of`] `n`).
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
        let topology = LlTopology::of(&n);
        let kernel = &self.ll_dispatch[topology as usize][phase as usize];
        // SAFETY: the caller's contract.
        unsafe { self.launch_ll(kernel, stream, blocks, topology, &LlDispatch { c, a, n }) }
    }

    /// `weft_ep_ll_combine_send` or `_recv` on `blocks` SMs, or its `_net` kernel for a group
    /// spanning nodes ([`LlTopology::of`] `n`).
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
        let topology = LlTopology::of(&n);
        let kernel = &self.ll_combine[topology as usize][phase as usize];
        // SAFETY: the caller's contract.
        unsafe { self.launch_ll(kernel, stream, blocks, topology, &LlCombine { c, a, n }) }
    }

    /// Launches a low-latency kernel built for `topology` on `blocks` SMs with that topology's
    /// dynamic shared memory, early when configured so.
    ///
    /// # Safety
    /// As [`Kernels::notify`], for the addresses in `params`.
    unsafe fn launch_ll<P: KernelParams>(
        &self,
        kernel: &Kernel,
        stream: &Stream,
        blocks: u32,
        topology: LlTopology,
        params: &P,
    ) -> Result<(), GpuError> {
        let config = LaunchConfig { grid: blocks, block: LL_THREADS, shared_bytes: topology.shared_bytes() };
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
    fn only_a_group_spanning_nodes_launches_the_net_kernels_and_their_shared_words() {
        let mut n = EpLlNet::default();
        assert_eq!(LlTopology::of(&n), LlTopology::OneNode);
        assert_eq!(LlTopology::OneNode.shared_bytes(), 0);
        n.gin.proxy_mask = 0b10;
        assert_eq!(LlTopology::of(&n), LlTopology::SpansNodes);
        assert_eq!(LlTopology::SpansNodes.shared_bytes(), 4 * (crate::region::LL_MAX_EXPERTS as u32 + 1));
    }

    /// The names the launches index by `[topology][phase]` are the parameter lists' kernels, the
    /// one-node kernels plain and the kernels spanning nodes `_net`, each phase named for it.
    #[test]
    fn the_low_latency_kernel_tables_match_the_parameter_lists() {
        use weft_gpu::KernelParams;
        for (table, declared) in
            [(LL_DISPATCH_KERNELS, <LlDispatch as KernelParams>::KERNELS), (LL_COMBINE_KERNELS, LlCombine::KERNELS)]
        {
            let mut names: Vec<&str> = table.iter().flatten().copied().collect();
            names.sort_unstable();
            let mut declared = declared.to_vec();
            declared.sort_unstable();
            assert_eq!(names, declared);
            for (topology, suffix) in [(LlTopology::OneNode, ""), (LlTopology::SpansNodes, "_net")] {
                for (phase, name) in [(LlPhase::Send, "_send"), (LlPhase::Recv, "_recv")] {
                    let kernel = table[topology as usize][phase as usize];
                    assert!(kernel.ends_with(&format!("{name}{suffix}")), "{kernel}");
                }
            }
        }
    }
}

//! The collective API of one rank: argument checks, algorithm choice and the launch of the
//! chosen kernel. Every call enqueues one kernel (all-to-all and send/receive: one per round of
//! matched operations, two when a round has directions both over packets and through scratch,
//! see `transfers.rs`) and nothing else: no host
//! synchronisation, no allocation once the kernels are loaded, so calls are capturable in CUDA
//! graphs. A call captured into a graph may first agree with the peers on writing straight
//! into their registered user buffers (`registry.rs`): a host exchange paid once per capture,
//! never per replay.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weft_core::descriptor::MemoryDescriptor;
use weft_core::{Communicator, KernelLibrary, LinkModel, RemoteMemory, UserRegistration};
use weft_exec::{ExecConfig, PlanExecutor};
use weft_gpu::{
    AllocKind, CaptureModeRelaxed, DeviceMemory, DevicePtr, KernelParams, LaunchConfig, Stream, UserAllocation,
};
use weft_net::{PortProxy, PortProxyConfig, PortRoute};

use weft_types::{CollContext, DataType, P2pPlan, PeerBuffers, ReduceOp};

use crate::algorithm::{Algorithm, Collective, Protocol};
use crate::args::{ArgError, Args, Blocked, Buffer, InDevice, p2p_round};
use crate::call_check::{CallSignature, ExchangeError, Verdict};
use crate::choice::{Call, Chooser};
use crate::config::{CollConfig, Selector};
use crate::error::CollError;
use crate::gin_allreduce::GinAllReduce;
use crate::kernels::KernelCache;
use crate::params::{
    AllGatherHb, AllReduceDirect, AllReduceHb, Flat, P2p, P2pLl, ReduceDirect, ReduceScatterDirect, Rooted,
};
use crate::plans::{Nodes, PlanId};
use crate::port_allpairs::PortAllPairs;
use crate::port_ring::PortRing;
use crate::reduction::{Reduction, Scalar, with_scalar};
use crate::registry::Registry;
use crate::resources::Resources;
use crate::window::{Placement, Window, WindowTable};

/// Direction of one point-to-point operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum P2pKind {
    /// Send `count` elements from `ptr` to `peer`.
    Send,
    /// Receive `count` elements from `peer` into `ptr`.
    Recv,
}

/// One send or receive of a group (see [`RawCollectives::send_recv`](crate::RawCollectives::send_recv)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pOp {
    /// Send or receive.
    pub kind: P2pKind,
    /// The other rank (may be this rank: a matched send and receive to self copy locally).
    pub peer: usize,
    /// Source (send) or destination (receive) on this rank's GPU.
    pub ptr: DevicePtr,
    /// Elements.
    pub count: usize,
    /// Element type.
    pub dtype: DataType,
}

/// What the calls that could write straight into the peers' user buffers (AllReduce HB;
/// AllGather HB with blocks of a multiple of 16 bytes; plan launches from
/// `zero_copy_plan_min` bytes whose chunks are whole 16-byte vectors) did: captured calls, and
/// eager calls whose output lies in a window. Other eager calls stage and are not counted, nor
/// are calls a rank declined (in place, with a plan not verified in place).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounts {
    /// Calls that write into the peers' registered buffers (windows included).
    pub zero_copy: u64,
    /// Of those, calls whose output lies in a window (no exchange with the peers).
    pub windowed: u64,
    /// Calls that stage because some rank's buffer could not take part.
    pub refused: u64,
    /// Plan launches (eager or captured) on a kernel with the rank's operations compiled in
    /// ([`CollConfig::plan_specialize`]).
    pub plan_specialized: u64,
    /// Plan launches on the interpreter kernel.
    pub plan_interpreted: u64,
}

/// The collectives of one rank of a communicator.
pub struct Collectives {
    comm: Communicator,
    config: CollConfig,
    resources: Resources,
    kernels: KernelCache,
    /// Plans set up so far, per (plan, root); see [`Collectives::plan_executor`].
    plans: Mutex<HashMap<(PlanId, usize), Arc<PlanExecutor>>>,
    /// Executors replaced by larger ones: kept alive, since launches still queued on some
    /// stream may use their buffers.
    retired: Mutex<Vec<Arc<PlanExecutor>>>,
    registry: Registry,
    /// The PortChannels of AllReduce `port_ring`, set up by its first call.
    port_ring: Mutex<Option<Arc<PortRing>>>,
    /// The PortChannels of AllReduce `port_allpairs`, set up by its first call.
    port_allpairs: Mutex<Option<Arc<PortAllPairs>>>,
    /// The device communicators of AllReduce `nvrar` and `2ph`, each set up by its first call.
    gin_allreduces: Mutex<Vec<(Algorithm, Arc<GinAllReduce>)>>,
    /// The rank's proxy for both, started by the first of them: one polling thread per GPU.
    port_proxy: Mutex<Option<PortProxy>>,
    /// Staging for in-place AllToAll and send/receive calls larger than the scratch's own slot
    /// (see [`Collectives::staging`]): grown by eager calls, never shrunk; the last is the
    /// largest, the others stay alive for graphs captured while they were in use.
    in_place_staging: Mutex<Vec<DeviceMemory>>,
    /// The windows of this rank (see `window.rs`).
    windows: Mutex<WindowTable<MappedWindow>>,
    zero_copy_calls: AtomicU64,
    windowed_calls: AtomicU64,
    refused_calls: AtomicU64,
    /// Plan launches on the interpreter kernel (0) and on specialized kernels (1).
    plan_launches: [AtomicU64; 2],
    /// Calls checked against the peers' so far (`CollConfig::check_calls`).
    checked_calls: AtomicU64,
    /// (Virtual) nodes the ranks are in, for the choice across nodes (the topology is fixed).
    node_count: usize,
    /// Whether every node has as many ranks (`nvrar` needs it); read by every choice, so kept.
    equal_nodes: bool,
}

/// How [`Collectives::map_buffers`] found the peers' buffers.
enum Mapping {
    /// Through the windows: no exchange.
    Windows,
    /// Through a captured call's agreement.
    Agreed,
    /// A willing rank's agreement failed (some rank could not take part).
    Refused,
    /// Not tried, or this rank declined.
    Staged,
}

impl std::fmt::Debug for Collectives {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collectives").field("rank", &self.comm.rank()).field("config", &self.config).finish()
    }
}

impl Collectives {
    /// Sets up the collectives of `comm`. Collective: every rank calls it with the same config.
    pub fn new(comm: &Communicator, mut config: CollConfig) -> Result<Self, CollError> {
        let rank = comm.rank();
        // Every rank must run the same algorithms with the same shapes and limits: checked once
        // here, so a mismatch is an error naming the rank instead of a hang later.
        let mine = format!("{config:?}");
        let all = comm
            .bootstrap()
            .all_gather(mine.as_bytes())
            .map_err(|source| CollError::Core(weft_core::Error::Bootstrap { rank, source }))?;
        if let Some(detail) = crate::config::config_mismatch(&mine, &all) {
            return Err(CollError::InvalidArgument { rank, detail });
        }
        if comm.shares_gpu() {
            config.fit_resident(comm.resident_sms()?);
        }
        if let Some(tuned) = config.tuned_ranks.filter(|&r| r != comm.world_size()) {
            tracing::warn!(
                "the tuning table was measured on {tuned} ranks, this communicator has {}: its switch points may not fit",
                comm.world_size()
            );
        }
        let library = KernelLibrary::new(comm.env().cache_dir.clone(), &crate::device_code::KERNELS);
        let tracer = weft_core::trace::Tracer::from_env(comm.env(), comm.device(), rank, comm.world_size())
            .map_err(|e| CollError::InvalidArgument { rank, detail: format!("tracing: {e}") })?;
        let kernels = KernelCache::new(library, comm.device().clone(), tracer);
        if comm.shares_gpu() {
            // Send/receive groups settle only with their peers, yet a module load anywhere on a
            // shared GPU holds back every kernel there: load theirs now, before the set-up
            // exchanges below let any rank go on to launch.
            kernels
                .get(Algorithm::SendRecvP2p, DataType::U8, ReduceOp::Sum)
                .map_err(|source| CollError::Gpu { rank: comm.rank(), source })?;
        }
        let resources = Resources::new(comm, &config)?;
        Ok(Self {
            comm: comm.clone(),
            kernels,
            config,
            resources,
            plans: Mutex::default(),
            retired: Mutex::default(),
            registry: Registry::default(),
            port_ring: Mutex::default(),
            port_allpairs: Mutex::default(),
            gin_allreduces: Mutex::default(),
            port_proxy: Mutex::default(),
            in_place_staging: Mutex::default(),
            windows: Mutex::default(),
            zero_copy_calls: AtomicU64::new(0),
            windowed_calls: AtomicU64::new(0),
            refused_calls: AtomicU64::new(0),
            plan_launches: [AtomicU64::new(0), AtomicU64::new(0)],
            checked_calls: AtomicU64::new(0),
            node_count: comm.topology().node_count(),
            equal_nodes: crate::gin_allreduce::equal_node_size(comm.topology()).is_some(),
        })
    }

    /// Which path the calls that can go zero-copy took so far.
    pub fn path_counts(&self) -> PathCounts {
        PathCounts {
            zero_copy: self.zero_copy_calls.load(Ordering::Relaxed),
            windowed: self.windowed_calls.load(Ordering::Relaxed),
            refused: self.refused_calls.load(Ordering::Relaxed),
            plan_specialized: self.plan_launches[1].load(Ordering::Relaxed),
            plan_interpreted: self.plan_launches[0].load(Ordering::Relaxed),
        }
    }

    /// What the traced kernels recorded since the last take (waiting for the device to be
    /// idle first), or `None` when tracing is off (`WEFT_TRACE` unset). What is not taken is
    /// written to the `WEFT_TRACE` file when the collectives are dropped.
    pub fn take_trace(&self) -> Result<Option<weft_core::trace::RankTrace>, CollError> {
        let Some(tracer) = self.kernels.tracer() else { return Ok(None) };
        tracer.take().map(Some).map_err(|source| CollError::Gpu { rank: self.comm.rank(), source })
    }

    /// The configuration in force.
    pub fn config(&self) -> &CollConfig {
        &self.config
    }

    /// Whether every peer this rank maps is an NVLink peer (NVML, alike on every rank; ranks
    /// sharing a GPU need no link): where the size rules' LL128 lines and Reduce's direct form
    /// run.
    pub fn nvlink_peers(&self) -> bool {
        self.resources.ll128_room().nvlink
    }

    /// Replaces the selector. Host-only state: the next call uses it (`weft tune` times every
    /// candidate algorithm on one set of resources this way).
    pub fn set_selector(&mut self, selector: Selector) {
        self.config.selector = selector;
    }

    /// The α-β model's time in µs of a call of `algorithm` on `bytes` across nodes: only for
    /// the AllReduces that cross nodes (`port_ring`, `port_allpairs`, `nvrar`, `2ph`; weft-model's
    /// [`weft_model::rounds`], with this communicator's round sizes). The parameters are
    /// `params` when given (measured by `weft model calibrate`, for any route between nodes:
    /// the PortChannel algorithms pay its PortChannel α, `nvrar` and `2ph` its network α and the proxy's
    /// cost per put), else the emulated NIC's `WEFT_EMU_NET_*` variables on a communicator of
    /// one host split into virtual nodes; `None` otherwise (the model has no parameters for TCP
    /// or verbs of its own) and for a communicator within one node.
    pub fn cross_node_model_us(
        &self,
        algorithm: Algorithm,
        bytes: usize,
        params: Option<&weft_model::Params>,
    ) -> Option<f64> {
        let routes: Vec<PortRoute> = self.port_routes().collect();
        let remote = routes.iter().filter(|&&r| r != PortRoute::CopyEngine).count();
        let params = match params {
            Some(params) => params.clone(),
            None if routes.iter().all(|&r| matches!(r, PortRoute::CopyEngine | PortRoute::EmulatedNic)) => {
                // NVLink's link plays no part in these models.
                weft_model::Params::new(LinkModel::new(0.0, None), self.comm.env().emulated_net?)
            }
            None => return None,
        };
        if remote == 0 {
            return None;
        }
        let bytes = bytes as u64;
        let port = params.port_link();
        match algorithm {
            Algorithm::AllReducePortRing => {
                Some(weft_model::rounds::port_ring_us(bytes, self.ranks(), self.resources.context().chunk_bytes, &port))
            }
            Algorithm::AllReducePortAllPairs => {
                Some(weft_model::rounds::port_allpairs_us(bytes, remote, crate::port_allpairs::SLOT_BYTES, &port))
            }
            Algorithm::AllReduceNvrar | Algorithm::AllReduce2ph => {
                let topology = self.comm.topology();
                let gpus_per_node = crate::gin_allreduce::equal_node_size(topology)?;
                let nodes = topology.node_count();
                // Its launch: the port ring's grid (see `gin_allreduce()`); both kernels deal
                // their puts to at most 4 groups of blocks.
                let groups = self.config.port_ring_blocks as usize + 1;
                let (net, proxy) = (&params.net, params.proxy_us);
                let round = crate::gin_allreduce::round_bytes(algorithm, self.resources.context().chunk_bytes);
                let call = weft_model::rounds::GinCall { nodes, gpus_per_node, round_bytes: round, groups };
                Some(if algorithm == Algorithm::AllReduceNvrar {
                    weft_model::rounds::nvrar_us(bytes, call, net, proxy)
                } else {
                    weft_model::rounds::two_phase_us(bytes, call, net, proxy)
                })
            }
            _ => None,
        }
    }

    /// How this rank's PortChannels reach each peer (weft-core's routing), in peer order.
    fn port_routes(&self) -> impl Iterator<Item = PortRoute> + '_ {
        let (topology, env) = (self.comm.topology(), self.comm.env());
        let rank = self.comm.rank();
        (0..self.ranks()).filter(move |&p| p != rank).map(move |p| PortRoute::to(topology, p, env))
    }

    /// The communicator.
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// Compiles (or reads from the cache) and loads every kernel `(dtype, op)` calls can use.
    /// Calls do this on first use; call it before capturing a CUDA graph to keep compilation
    /// out of the capture.
    pub fn prepare(&self, dtype: DataType, op: ReduceOp) -> Result<(), CollError> {
        let rank = self.comm.rank();
        for algorithm in Algorithm::ALL {
            self.kernels.get(algorithm, dtype, op).map_err(|source| CollError::Gpu { rank, source })?;
        }
        Ok(())
    }

    /// AllReduce of `count` elements from `send` into `recv` (equal: in place) with `op` (a
    /// [`ReduceOp`], or a [`Reduction`] such as PreMulSum with its scalar). Captured into
    /// a CUDA graph, a call of the HB algorithm agrees with the peers (a host exchange, once
    /// per capture) on writing the results straight into every rank's `recv`, which it then
    /// registers (once per allocation) and maps on the peers; eager calls stage through
    /// scratch.
    ///
    /// # Safety
    /// `send` and `recv` must stay valid device memory of this rank's GPU for the lengths the
    /// call implies until the work enqueued on `stream` has finished (for a captured call:
    /// while the graph may be replayed), and every rank must make the matching call (same
    /// count, type, operator, root) in the same order, captured on every rank or on none. A
    /// PreMulSum scalar in device memory must stay valid likewise. This holds for every
    /// collective of this type.
    pub(crate) unsafe fn raw_all_reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        let reduction = op.into();
        let call = CallSignature::new(Collective::AllReduce, dtype, reduction.op(), count);
        let checked = self.reduction(reduction, dtype, stream).and_then(|(scalar, op)| {
            let (send, recv) =
                self.args(stream)?.all_reduce(send, recv, count, dtype).map_err(|source| self.refused(source))?;
            Ok((scalar, op, send, recv))
        });
        let (scalar, op, send, recv) = self.agreed(|| call, checked)?;
        let bytes = send.len;
        let shard = bytes.div_ceil(self.ranks()).next_multiple_of(8);
        let algorithm = self.choose(Collective::AllReduce, bytes, dtype, op, |a| match a {
            Algorithm::AllReduceLl => bytes,
            _ => shard,
        })?;
        if let Algorithm::Plan(id) = algorithm {
            // SAFETY: forwarded caller contract; buffers checked above.
            return unsafe { self.run_plan(id, 0, send.ptr, recv.ptr, count, dtype, op, stream) };
        }
        if algorithm.protocol() == Protocol::Port {
            if bytes == 0 {
                return Ok(algorithm);
            }
            let (input, output, bytes64) = (send.ptr, recv.ptr, bytes as u64);
            if matches!(algorithm, Algorithm::AllReduceNvrar | Algorithm::AllReduce2ph) {
                let state = self.gin_allreduce(algorithm)?;
                // SAFETY: the kernel runs on the grid its state was set up for; the device
                // communicator and the state live as long as `self`, the buffers were checked
                // above and are the caller's contract.
                return unsafe {
                    self.launch(algorithm, dtype, op, scalar, stream, bytes, |c| {
                        state.params(c, input, output, bytes64)
                    })
                };
            }
            if algorithm == Algorithm::AllReducePortAllPairs {
                let port = self.port_allpairs()?;
                // SAFETY: the port kernels run on their set-up's blocks; the table, scratch,
                // state and proxy live as long as `self`, the buffers were checked above and
                // are the caller's contract.
                return unsafe {
                    self.launch(algorithm, dtype, op, scalar, stream, bytes, |c| port.params(c, input, output, bytes64))
                };
            }
            let port = self.port_ring()?;
            // SAFETY: as for port_allpairs above.
            return unsafe {
                self.launch(algorithm, dtype, op, scalar, stream, bytes, |c| port.params(c, input, output, bytes64))
            };
        }
        let (input, output, bytes64) = (send.ptr, recv.ptr, bytes as u64);
        if algorithm == Algorithm::AllReduceHb {
            let eligible = bytes <= self.config.zero_copy_allreduce_max;
            let outputs = self.peer_buffers(stream, recv, eligible, true)?;
            if let Some(inputs) = self.direct_inputs(stream, send, op, &outputs)? {
                // SAFETY: every rank's input and output lie in windows, mapped on this GPU
                // while registered (the windows' contract keeps them allocated until then), or
                // are mapped by the registry, valid while the peers' buffers are (their
                // callers' contract).
                return unsafe {
                    self.launch_named("weft_allreduce_hb_direct", algorithm, dtype, op, scalar, stream, bytes, |c| {
                        AllReduceDirect { c, bytes: bytes64, inputs, outputs }
                    })
                };
            }
            // SAFETY: the peers' outputs are mapped by the registry or the windows, valid while
            // the peers' buffers are (their callers' contract); buffers were checked above and
            // are the caller's contract.
            return unsafe {
                self.launch(algorithm, dtype, op, scalar, stream, bytes, |c| AllReduceHb {
                    c,
                    input,
                    output,
                    bytes: bytes64,
                    outputs,
                })
            };
        }
        // SAFETY: buffers were checked above and are the caller's contract.
        unsafe {
            self.launch(algorithm, dtype, op, scalar, stream, bytes, |c| Flat { c, input, output, bytes: bytes64 })
        }
    }

    /// The state of AllReduce `port_ring`, set up on its first call: every rank makes the same
    /// calls (caller contract), so every rank gets here at the same call.
    fn port_ring(&self) -> Result<Arc<PortRing>, CollError> {
        let mut state = self.port_ring.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ring) = state.as_ref() {
            return Ok(Arc::clone(ring));
        }
        let chunk = self.resources.context().chunk_bytes;
        // Alike on every rank: a rank has a network peer (TCP or verbs) exactly when the
        // communicator spans hosts, or virtual nodes without the emulated NIC.
        let over_network = self.port_routes().any(PortRoute::is_network);
        let lanes = self.config.port_ring_channels.unwrap_or_else(|| crate::port_ring::default_lanes(over_network));
        let ring =
            Arc::new(PortRing::new(&self.comm, &self.port_proxy()?, chunk, self.config.port_ring_blocks, lanes)?);
        *state = Some(Arc::clone(&ring));
        Ok(ring)
    }

    /// The state of AllReduce `port_allpairs`, set up on its first call (as `port_ring`'s).
    fn port_allpairs(&self) -> Result<Arc<PortAllPairs>, CollError> {
        let mut state = self.port_allpairs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pairs) = state.as_ref() {
            return Ok(Arc::clone(pairs));
        }
        let pairs = Arc::new(PortAllPairs::new(&self.comm, &self.port_proxy()?, self.config.port_ring_blocks)?);
        *state = Some(Arc::clone(&pairs));
        Ok(pairs)
    }

    /// The state of AllReduce `nvrar` or `2ph`, set up on its first call (as `port_ring`'s),
    /// its proxy peers served by the rank's PortChannel proxy.
    fn gin_allreduce(&self, algorithm: Algorithm) -> Result<Arc<GinAllReduce>, CollError> {
        let mut states = self.gin_allreduces.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, state)) = states.iter().find(|(a, _)| *a == algorithm) {
            return Ok(Arc::clone(state));
        }
        let blocks = self.config.port_ring_blocks + 1;
        let round = crate::gin_allreduce::round_bytes(algorithm, self.resources.context().chunk_bytes);
        let state = Arc::new(GinAllReduce::new(&self.comm, algorithm, self.port_proxy()?, blocks, round)?);
        states.push((algorithm, Arc::clone(&state)));
        Ok(state)
    }

    /// The rank's PortChannel proxy, started on first use (by a call every rank makes).
    fn port_proxy(&self) -> Result<PortProxy, CollError> {
        let mut proxy = self.port_proxy.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = proxy.as_ref() {
            return Ok(p.clone());
        }
        let started = PortProxy::new(&self.comm, PortProxyConfig::default())?;
        *proxy = Some(started.clone());
        Ok(started)
    }

    /// Registers `[base, base + len)` as a window (NCCL's symmetric window): collective, every
    /// rank calls it with a buffer of the same `len`, in the same order of registrations, and
    /// blocks until every rank has mapped every other rank's buffer (host exchanges through
    /// the bootstrap; no stream is used). From then on, a call whose output lies inside the
    /// window at an offset every rank passes alike writes straight into the peers' windows,
    /// eager or captured, with no exchange (see `window.rs`). Any rank's failure (memory
    /// another process cannot map, an overlap with a window of this rank, lengths that differ)
    /// fails the registration on every rank, naming the rank.
    ///
    /// The buffer must lie in one allocation of this GPU made by `cuMemAlloc` or by VMM with
    /// the POSIX-fd handle type (what `ncclMemAlloc` and weft's allocations use), 16-byte
    /// aligned. `memory`, when given, is kept alive as long as the window is registered.
    ///
    /// # Safety
    /// The memory must stay allocated until [`Collectives::raw_deregister_window`] returns on
    /// every rank; peers write into it during the calls that name it.
    pub(crate) unsafe fn raw_register_window(
        &self,
        base: DevicePtr,
        len: usize,
        memory: Option<Arc<DeviceMemory>>,
    ) -> Result<Window, CollError> {
        let rank = self.comm.rank();
        let bootstrap = |source| CollError::Core(weft_core::Error::Bootstrap { rank, source });
        // Exporting memory while this thread's stream captures needs a relaxed capture mode.
        let _relaxed = CaptureModeRelaxed::new()
            .map_err(|e| tracing::debug!("rank {rank}: cannot relax the capture mode: {e}"))
            .ok();
        // Held for the whole registration: the table's ids follow the registration order.
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let len = len as u64;
        let (offer, registration) = match self.window_offer(&windows, base, len) {
            Ok((offer, registration)) => (offer, Some(registration)),
            Err(why) => (crate::window::WindowOffer::Unusable(why), None),
        };
        let gathered = self.comm.bootstrap().all_gather(&offer.encode()).map_err(bootstrap)?;
        let offers: Vec<_> =
            gathered.iter().map(|b| crate::window::WindowOffer::decode(b).map_err(|e| e.to_string())).collect();
        if let Some(why) = crate::window::offers_mismatch(&offers) {
            return Err(self.invalid(format!("window registration: {why}")));
        }
        let mut starts = PeerBuffers::default();
        let mut mapped = Vec::new();
        let mut failure = None;
        for (peer, offer) in offers.iter().enumerate() {
            let Ok(crate::window::WindowOffer::Usable { offset, descriptor, .. }) = offer else {
                failure.get_or_insert_with(|| format!("rank {peer}'s offer vanished"));
                continue;
            };
            if peer == rank {
                starts.ptr[peer] = base;
                continue;
            }
            match self.map_window(peer, *offset, descriptor, len) {
                Ok((start, memory)) => {
                    starts.ptr[peer] = start;
                    mapped.push(memory);
                }
                Err(why) => {
                    failure.get_or_insert(why);
                }
            }
        }
        let answers = self.comm.bootstrap().all_gather(&[u8::from(failure.is_none())]).map_err(bootstrap)?;
        if let Some(bad) = answers.iter().position(|a| a.as_slice() != [1]) {
            let why = failure.unwrap_or_else(|| format!("rank {bad} could not map every peer's window"));
            return Err(self.invalid(format!("window registration: {why}")));
        }
        let entry = MappedWindow { starts, _registration: registration, _mapped: mapped, _memory: memory };
        windows.insert(base, len, entry).map_err(|why| self.invalid(format!("window registration: {why}")))
    }

    /// This rank's offer for a new window, with the allocation's registration.
    fn window_offer(
        &self,
        windows: &WindowTable<MappedWindow>,
        base: DevicePtr,
        len: u64,
    ) -> Result<(crate::window::WindowOffer, UserRegistration), String> {
        windows.check_new(base, len)?;
        let allocation = UserAllocation::containing(self.comm.device(), base).map_err(|e| e.to_string())?;
        let key = allocation.key();
        if !key.contains(base, len) {
            return Err(format!(
                "[{base:#x}, +{len}) is not inside one allocation (the one at {base:#x} ends at {:#x})",
                key.base + key.size
            ));
        }
        let registration = self.comm.register_user(&allocation).map_err(|e| e.to_string())?;
        let descriptor = registration.descriptor().encode().map_err(|e| e.to_string())?;
        let offer = crate::window::WindowOffer::Usable { address: base, len, offset: base - key.base, descriptor };
        Ok((offer, registration))
    }

    /// Maps `peer`'s window: `len` bytes at `offset` of the allocation `descriptor` describes.
    /// Returns where the window starts in this GPU's address space, and the mapping.
    fn map_window(
        &self,
        peer: usize,
        offset: u64,
        descriptor: &[u8],
        len: u64,
    ) -> Result<(DevicePtr, RemoteMemory), String> {
        let theirs = MemoryDescriptor::decode(descriptor).map_err(|e| format!("rank {peer}'s descriptor: {e}"))?;
        if theirs.offset != 0 || offset.checked_add(len).is_none_or(|end| end > theirs.len) {
            return Err(format!("rank {peer}'s window (+{offset}, {len} bytes) does not fit its allocation"));
        }
        let memory = self.comm.import(peer, &theirs).map_err(|e| format!("cannot map rank {peer}'s window: {e}"))?;
        Ok((memory.ptr() + offset, memory))
    }

    /// Deregisters `window`: collective, every rank calls it for the window it registered at
    /// the same position, after every call that used the window has completed on its GPU
    /// (NCCL's contract). The ranks exchange one byte, a barrier: once it completes, every
    /// rank's calls using the window have finished, so no kernel still writes through a
    /// mapping; then each rank drops its mappings and its registration. A window unknown to
    /// any rank fails on every rank, naming that rank.
    pub(crate) fn raw_deregister_window(&self, window: &Window) -> Result<(), CollError> {
        let rank = self.comm.rank();
        let bootstrap = |source| CollError::Core(weft_core::Error::Bootstrap { rank, source });
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let known = windows.contains(window);
        let answers = self.comm.bootstrap().all_gather(&[u8::from(known)]).map_err(bootstrap)?;
        if let Some(bad) = answers.iter().position(|a| a.as_slice() != [1]) {
            return Err(self.invalid(format!(
                "window deregistration: rank {bad} has no window [{:#x}, +{}) (id {}) on this communicator",
                window.base, window.len, window.id
            )));
        }
        // The exchange above is the barrier: every rank's work on the window is done.
        drop(windows.remove(window));
        Ok(())
    }

    /// Every rank's output as this GPU addresses it when `output` lies inside a window; `None`
    /// otherwise. One uncontended lock and a binary search: no allocation, no exchange.
    fn window_outputs(&self, output: Buffer) -> Option<PeerBuffers> {
        let windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        if windows.is_empty() {
            return None;
        }
        match windows.find(output.ptr, output.len as u64) {
            Placement::Inside { window, offset } => {
                let mut buffers = PeerBuffers::default();
                for (dst, start) in buffers.ptr.iter_mut().zip(window.starts.ptr).take(self.ranks()) {
                    *dst = start + offset;
                }
                Some(buffers)
            }
            Placement::Unfit(why) => {
                tracing::debug!("rank {}: {} {:#x} stages: {why}", self.comm.rank(), output.what, output.ptr);
                None
            }
            Placement::Outside => None,
        }
    }

    /// Every rank's `input` as this GPU addresses it when an HB AllReduce can read the inputs
    /// in place (the direct two-shot of `allreduce_hb.cu`): the outputs are zero-copy, the
    /// inputs lie in windows or a captured call's agreement maps them, the message is at most
    /// `direct_allreduce_max` bytes of whole 16-byte vectors at 16-byte aligned addresses, and
    /// the operator has no per-rank pre-operation. Every condition but the inputs' alignment is
    /// alike on every rank; a misaligned rank declines the agreement, so every rank stages
    /// (under the windows' contract, same window and same offset, the alignment is alike too).
    fn direct_inputs(
        &self,
        stream: &Stream,
        input: Buffer,
        op: ReduceOp,
        outputs: &PeerBuffers,
    ) -> Result<Option<PeerBuffers>, CollError> {
        let rank = self.comm.rank();
        // Every rank's `outputs.ptr[rank]` is 16-aligned or none is: the registry agrees only
        // on 16-aligned buffers (`State::offer`), and windows share one offset. So `aligned`
        // differs between ranks only by where the inputs lie, which the agreement settles.
        let aligned = (input.ptr | outputs.ptr[rank]).is_multiple_of(16);
        let eligible = outputs.ptr[rank] != 0
            && op != ReduceOp::PreMulSum
            && self.config.direct_allreduce
            && input.len <= self.config.direct_allreduce_max
            && input.len.is_multiple_of(16);
        let (inputs, _) = self.map_buffers(stream, input, eligible, aligned)?;
        Ok((inputs.ptr[rank] != 0).then_some(inputs))
    }

    /// Every rank's `output` buffer (or, for a kernel that reads the peers in place, the
    /// buffer it reads) as this GPU addresses it when the call can reach it directly
    /// (`eligible`, in windows or captured, and every rank agrees and is `willing`), else all
    /// zero (stage through scratch), counted in the statistics. Every rank reaches it at the
    /// same call with the same `eligible`, captured on all or on none (caller contract);
    /// `willing` may differ by rank.
    fn peer_buffers(
        &self,
        stream: &Stream,
        output: Buffer,
        eligible: bool,
        willing: bool,
    ) -> Result<PeerBuffers, CollError> {
        let (buffers, how) = self.map_buffers(stream, output, eligible, willing)?;
        let counters: &[&AtomicU64] = match how {
            Mapping::Windows => &[&self.zero_copy_calls, &self.windowed_calls],
            Mapping::Agreed => &[&self.zero_copy_calls],
            Mapping::Refused => &[&self.refused_calls],
            Mapping::Staged => &[],
        };
        for counter in counters {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buffers)
    }

    /// [`Collectives::peer_buffers`] uncounted, with how it came about.
    fn map_buffers(
        &self,
        stream: &Stream,
        output: Buffer,
        eligible: bool,
        willing: bool,
    ) -> Result<(PeerBuffers, Mapping), CollError> {
        let rank = self.comm.rank();
        let staged = (PeerBuffers::default(), Mapping::Staged);
        if !eligible || output.len == 0 || self.ranks() == 1 {
            return Ok(staged);
        }
        // Windows first: agreed at registration, so eager calls and one thread capturing every
        // rank in turn need no exchange here. A rank not willing stages, which must then be the
        // same on every rank: under the windows' contract (same window, same offset) every
        // output has the same alignment, and a plan's ranks are willing alike when the plan is
        // verified in place or no rank is in place (`PlanExecutor::direct_output`; a broadcast's
        // non-roots read no input, so where theirs lies does not count). A root willing while a
        // non-root stages deadlocks both: one runs into the outputs, the other stages.
        if willing && let Some(buffers) = self.window_outputs(output) {
            return Ok((buffers, Mapping::Windows));
        }
        if !stream.is_capturing().map_err(|source| CollError::Gpu { rank, source })? {
            return Ok(staged);
        }
        // A rank that declined counts no refusal: that path is its own choice.
        Ok(match (self.registry.agree(&self.comm, output.ptr, output.len, willing)?, willing) {
            (Some(buffers), _) => (buffers, Mapping::Agreed),
            (None, true) => (PeerBuffers::default(), Mapping::Refused),
            (None, false) => staged,
        })
    }

    /// AllGather: `send_count` elements from every rank into `recv` (`ranks * send_count`
    /// elements, rank order). In place when `send == recv + rank * send bytes`. Captured, the
    /// HB algorithm with blocks of a multiple of 16 bytes writes straight into the peers'
    /// `recv`, as [`Collectives::raw_all_reduce`] does.
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`].
    pub(crate) unsafe fn raw_all_gather(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        send_count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.blocked(Collective::AllGather, send, recv, send_count, dtype, ReduceOp::Sum.into(), stream) }
    }

    /// ReduceScatter: block r (`recv_count` elements) of every rank's `send` reduced with `op`
    /// into rank r's `recv`. In place when `recv == send + rank * recv bytes`.
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`].
    pub(crate) unsafe fn raw_reduce_scatter(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        recv_count: usize,
        dtype: DataType,
        op: impl Into<Reduction>,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded caller contract.
        unsafe { self.blocked(Collective::ReduceScatter, send, recv, recv_count, dtype, op.into(), stream) }
    }

    /// AllGather and ReduceScatter: one side holds one block of `count` elements, the other
    /// `ranks` blocks; in place, the single block sits at block `rank` of the other buffer.
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn blocked(
        &self,
        collective: Collective,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: Reduction,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        let call = CallSignature::new(collective, dtype, op.op(), count);
        let gathers = collective == Collective::AllGather;
        let checked = self.reduction(op, dtype, stream).and_then(|(scalar, op)| {
            let checked =
                self.args(stream)?.blocked(gathers, send, recv, count, dtype).map_err(|source| self.refused(source))?;
            Ok((scalar, op, checked))
        });
        let (scalar, op, checked) = self.agreed(|| call, checked)?;
        let (recv_buf, block, total) = (checked.recv, checked.block, checked.total);
        let algorithm = self.choose(collective, total, dtype, op, |_| block)?;
        if let Algorithm::Plan(id) = algorithm {
            let elements = if gathers { count } else { count * self.ranks() };
            // SAFETY: forwarded caller contract; buffers checked above.
            return unsafe { self.run_plan(id, 0, send, recv, elements, dtype, op, stream) };
        }
        if let Some(inputs) = self.direct_reduce_scatter(algorithm, send, &checked, op, stream)? {
            let (output, shard_bytes) = (recv, block as u64);
            // SAFETY: every rank's input is mapped on this GPU (by the windows or the registry)
            // and valid while the peers' are (their callers' contract); the two barriers keep
            // every read within the call on every rank.
            return unsafe {
                self.launch_named("weft_reduce_scatter_direct", algorithm, dtype, op, scalar, stream, total, |c| {
                    ReduceScatterDirect { c, output, shard_bytes, inputs }
                })
            };
        }
        // AllGather HB pushes block `rank` straight into every peer's output when every block
        // starts 16-byte aligned there (the same on every rank: the block size is).
        let outputs = if algorithm == Algorithm::AllGatherHb {
            let eligible = block.is_multiple_of(16) && total <= self.config.zero_copy_allgather_max;
            Some(self.peer_buffers(stream, recv_buf, eligible, true)?)
        } else {
            None
        };
        let (input, output, bytes) = (send, recv, block as u64);
        // SAFETY: the peers' outputs of AllGather HB are mapped by the registry, valid while
        // the peers' buffers are (their callers' contract); buffers checked above, the rest is
        // the caller's contract.
        unsafe {
            match outputs {
                Some(outputs) => self.launch(algorithm, dtype, op, scalar, stream, total, |c| AllGatherHb {
                    c,
                    input,
                    output,
                    bytes,
                    outputs,
                }),
                None => self.launch(algorithm, dtype, op, scalar, stream, total, |c| Flat { c, input, output, bytes }),
            }
        }
    }

    /// Every rank's input when a ReduceScatter runs direct (`weft_reduce_scatter_direct`: rank
    /// r pulls block r of every input in place): `hb` was chosen, on NVLink-connected ranks,
    /// for at most `direct_reduce_scatter_max` bytes of input in blocks of whole 16-byte
    /// vectors, with no per-rank pre-operation, and every input mapped here at a 16-aligned
    /// address (windows, or a captured call's agreement). Every condition but the mapping is
    /// alike on every rank; a rank whose input is misaligned declines the agreement, so every
    /// rank stages (under the windows' contract the alignment is alike too). Each rank's link
    /// carries (n - 1) blocks in, as the pushes through scratch do, but once, with no rounds.
    fn direct_reduce_scatter(
        &self,
        algorithm: Algorithm,
        send: DevicePtr,
        checked: &Blocked,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<Option<PeerBuffers>, CollError> {
        if algorithm != Algorithm::ReduceScatterHb {
            return Ok(None);
        }
        // NVLink (alike on every rank): over PCIe the pull was never measured.
        let eligible = self.nvlink_peers()
            && checked.total <= self.config.direct_reduce_scatter_max
            && checked.block.is_multiple_of(16)
            && op != ReduceOp::PreMulSum;
        let input = Buffer { what: "send", ptr: send, len: checked.total };
        let inputs = self.peer_buffers(stream, input, eligible, send.is_multiple_of(16))?;
        Ok((inputs.ptr[self.comm.rank()] != 0).then_some(inputs))
    }

    /// Broadcast of `count` elements from the root's `send` into every rank's `recv` (`send` is
    /// read on the root only; equal to `recv`: in place).
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`].
    pub(crate) unsafe fn raw_broadcast(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.rooted(Collective::Broadcast, send, recv, count, dtype, ReduceOp::Sum.into(), root, stream)
    }

    /// Reduce with `op` of `count` elements of every rank's `send` into the root's `recv`
    /// (`recv` is written on the root only; equal to `send`: in place).
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn raw_reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: impl Into<Reduction>,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        self.rooted(Collective::Reduce, send, recv, count, dtype, op.into(), root, stream)
    }

    /// Broadcast and Reduce: the root reads or writes a buffer the others ignore.
    #[allow(clippy::too_many_arguments)]
    fn rooted(
        &self,
        collective: Collective,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: Reduction,
        root: usize,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        let call = CallSignature::new(collective, dtype, op.op(), count).rooted(root);
        let broadcasts = collective == Collective::Broadcast;
        let checked = self.reduction(op, dtype, stream).and_then(|(scalar, op)| {
            let bytes = self
                .args(stream)?
                .rooted(broadcasts, send, recv, count, dtype, root)
                .map_err(|source| self.refused(source))?;
            Ok((scalar, op, bytes))
        });
        let (scalar, op, bytes) = self.agreed(|| call, checked)?;
        let algorithm = self.choose(collective, bytes, dtype, op, |_| bytes)?;
        if let Algorithm::Plan(id) = algorithm {
            // SAFETY: forwarded caller contract; buffers checked above (a non-root's send is
            // never read: only the root's plan reads its input).
            return unsafe { self.run_plan(id, root, send, recv, count, dtype, op, stream) };
        }
        if let Some((chain, inputs)) = self.direct_reduce(collective, algorithm, bytes, op, send, stream)? {
            let (output, bytes, root) = (recv, bytes as u64, root as u32);
            // SAFETY: every rank's input is mapped on this GPU (by the windows or the registry)
            // and valid while the peers' are (their callers' contract); the two barriers keep
            // every read within the call on every rank.
            return unsafe {
                self.launch_named("weft_reduce_direct", chain, dtype, op, scalar, stream, bytes as usize, |c| {
                    ReduceDirect { c, output, bytes, root, inputs }
                })
            };
        }
        let (input, output, root) = (send, recv, root as u32);
        // SAFETY: the buffer a non-root does not use is never dereferenced there; checked above.
        unsafe {
            self.launch(algorithm, dtype, op, scalar, stream, bytes, |c| Rooted {
                c,
                input,
                output,
                bytes: bytes as u64,
                root,
            })
        }
    }

    /// The chain algorithm and every rank's input when a Reduce runs direct
    /// (`weft_reduce_direct`: the root pulls the inputs in place): `chain` was chosen, or
    /// `ll128` by the size rules (a forced `ll128` runs as forced), for at least
    /// `direct_reduce_min` bytes of whole 16-byte vectors on two NVLink-connected ranks, with
    /// no per-rank pre-operation, and every input mapped here (windows, or a captured call's
    /// agreement). Every condition but the mapping is alike on every rank, so every rank
    /// agrees, or none tries. Two ranks only: from three, the root would take every peer's
    /// whole input through its own NVLink port (on an NVSwitch machine, (n - 1)× the chain's
    /// bytes into one port). (Broadcast's pull, each rank reading the root's input, measured slower than
    /// the chain from 64 MB on a 2×H100 machine: 3090 against 2899 µs at 1 GB.)
    fn direct_reduce(
        &self,
        collective: Collective,
        algorithm: Algorithm,
        bytes: usize,
        op: ReduceOp,
        send: DevicePtr,
        stream: &Stream,
    ) -> Result<Option<(Algorithm, PeerBuffers)>, CollError> {
        let chain = match algorithm {
            Algorithm::ReduceChain => algorithm,
            Algorithm::ReduceLl128 if !self.config.selector.forced(collective) => algorithm.without_ll128(),
            _ => return Ok(None),
        };
        // NVLink (alike on every rank): over PCIe the pull was never measured.
        let eligible = self.ranks() == 2
            && self.nvlink_peers()
            && bytes >= self.config.direct_reduce_min
            && bytes.is_multiple_of(16)
            && op != ReduceOp::PreMulSum;
        let inputs = self.peer_buffers(stream, Buffer { what: "send", ptr: send, len: bytes }, eligible, true)?;
        Ok((inputs.ptr[self.comm.rank()] != 0).then_some((chain, inputs)))
    }

    /// AllToAll: block p (`count` elements) of `send` goes to rank p, block p of `recv` comes
    /// from rank p. `send` and `recv` are disjoint, or equal (in place: the input is first
    /// copied to staging on `stream`, so the result is the out-of-place one; the call then runs
    /// exactly as an out-of-place one, so ranks in place and ranks out of place mix). Buffers
    /// that overlap without being equal are an error.
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`].
    pub(crate) unsafe fn raw_all_to_all(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        let n = self.ranks();
        let checked = self.args(stream).and_then(|args| {
            let total = args.bytes(count, dtype, n).map_err(|source| self.refused(source))?;
            let in_place = args.all_to_all_in_place(send, recv, total).map_err(|source| self.refused(source))?;
            Ok((args, total, in_place))
        });
        let call = || {
            let block = (count as u64).saturating_mul(dtype.size() as u64);
            CallSignature::new(Collective::AllToAll, dtype, ReduceOp::Sum, count)
                .transferring(&vec![block; n], &vec![block; n])
        };
        let (args, total, in_place) = self.agreed(call, checked)?;
        let send = if in_place {
            // SAFETY: `recv` holds `total` bytes of device memory (checked; caller contract).
            let staged = unsafe { self.stage(&[(recv, total)], stream)? };
            staged.first().copied().ok_or_else(|| self.invalid("no staging for the in-place input".into()))?
        } else {
            send
        };
        // Every rank has the same count: the same pick.
        let algorithm = self.choose(Collective::AllToAll, total, dtype, ReduceOp::Sum, |_| 0)?;
        if let Algorithm::Plan(id) = algorithm {
            args.all_to_all(send, recv, count, dtype).map_err(|source| self.refused(source))?;
            // SAFETY: forwarded caller contract; buffers checked above.
            return unsafe { self.run_plan(id, 0, send, recv, count * n, dtype, ReduceOp::Sum, stream) };
        }
        let (counts, displs) = args.even_blocks(count, dtype).map_err(|source| self.refused(source))?;
        let (counts, displs) = (&counts[..n.min(counts.len())], &displs[..n.min(displs.len())]);
        let plan = args
            .all_to_allv(send, counts, displs, recv, counts, displs, dtype)
            .map_err(|source| self.refused(source))?;
        // SAFETY: every plan buffer was checked above.
        unsafe { self.direct_transfers(algorithm, plan, stream) }
    }

    /// Copies each `(source, bytes)` into staging on `stream`, each at a 16-byte aligned
    /// offset, and returns the copies' addresses. Staging is slot `rank` of this rank's scratch
    /// when they fit: the slot of the scratch that no peer writes into during a send/receive
    /// launch (a sender writes the slot of its own rank in the receiver's scratch), and that
    /// no collective kernel of another call uses while this call's work runs (calls on a
    /// communicator run in stream order). Larger, a buffer of this rank: allocated by an eager
    /// call, reused by later calls (captured ones included); a captured call that needs more
    /// than the largest so far is `CollError::Unsupported`, since allocating is not capturable.
    ///
    /// # Safety
    /// Every source must be device memory of this GPU for its length (checked by the caller).
    unsafe fn stage(&self, sources: &[(DevicePtr, usize)], stream: &Stream) -> Result<Vec<DevicePtr>, CollError> {
        let rank = self.comm.rank();
        let total: usize = sources.iter().map(|&(_, len)| len.next_multiple_of(16)).sum();
        let base = self.staging(total, stream)?;
        let mut copies = Vec::with_capacity(sources.len());
        let mut at = base;
        for &(source, len) in sources {
            // SAFETY: the staging holds `total` bytes from `base`, and this copy's range lies
            // inside it; the source is the caller's contract.
            unsafe { stream.copy_async(at, source, len) }.map_err(|source| CollError::Gpu { rank, source })?;
            copies.push(at);
            at += len.next_multiple_of(16) as u64;
        }
        Ok(copies)
    }

    /// The base of at least `bytes` of staging (see [`Collectives::stage`]).
    fn staging(&self, bytes: usize, stream: &Stream) -> Result<DevicePtr, CollError> {
        let (rank, context) = (self.comm.rank(), self.resources.context());
        // weft_p2p's slot: the same formula as the kernel's.
        let slot = (2 * context.chunk_bytes / context.ranks.max(1) as u64) & !31;
        if bytes as u64 <= slot {
            return Ok(context.scratch + rank as u64 * slot);
        }
        let mut buffers = self.in_place_staging.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = buffers.last().filter(|b| b.len() >= bytes) {
            return Ok(b.ptr());
        }
        if stream.is_capturing().map_err(|source| CollError::Gpu { rank, source })? {
            return Err(CollError::Unsupported {
                rank,
                detail: format!(
                    "an in-place AllToAll or send/receive group staging {bytes} bytes (more than the scratch slot of \
                     {slot}) needs a staging buffer, allocated on first use, and allocating is not capturable: run \
                     the call once before capturing it, or raise WEFT_CHUNK_BYTES"
                ),
            });
        }
        let memory = DeviceMemory::alloc(self.comm.device(), bytes.next_power_of_two(), AllocKind::Legacy)
            .map_err(|source| CollError::Gpu { rank, source })?;
        let ptr = memory.ptr();
        buffers.push(memory);
        Ok(ptr)
    }

    /// AllToAllv: `send_counts[p]` elements at `send + send_displs[p]` go to rank p,
    /// `recv_counts[p]` elements from rank p land at `recv + recv_displs[p]` (displacements in
    /// elements). Rank p's `send_counts[me]` must equal my `recv_counts[p]`.
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn raw_all_to_allv(
        &self,
        send: DevicePtr,
        send_counts: &[usize],
        send_displs: &[usize],
        recv: DevicePtr,
        recv_counts: &[usize],
        recv_displs: &[usize],
        dtype: DataType,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        let checked = self.args(stream).and_then(|args| {
            args.all_to_allv(send, send_counts, send_displs, recv, recv_counts, recv_displs, dtype)
                .map_err(|source| self.refused(source))
        });
        let call = || {
            let bytes = |counts: &[usize]| -> Vec<u64> {
                counts.iter().map(|&c| (c as u64).saturating_mul(dtype.size() as u64)).collect()
            };
            CallSignature::new(Collective::AllToAll, dtype, ReduceOp::Sum, 0)
                .transferring(&bytes(send_counts), &bytes(recv_counts))
        };
        let plan = self.agreed(call, checked)?;
        // Direct transfers whatever the selector names (no plan takes uneven blocks; all_to_all
        // runs the plans), asked at a size every rank passes alike.
        let call = Call { collective: Collective::AllToAll, size: 0, dtype, op: ReduceOp::Sum };
        let algorithm = self.chooser().direct(call)?;
        // SAFETY: every plan buffer was checked above.
        unsafe { self.direct_transfers(algorithm, plan, stream) }
    }

    /// A group of sends and receives that progress together (NCCL's grouped `ncclSend` /
    /// `ncclRecv`): operations with the same peer and direction are matched in order with the
    /// peer's; a send to this rank must be matched by a receive from it of the same size.
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`]; every buffer must stay valid until the stream's
    /// work is done, and the peers must post the matching operations.
    pub(crate) unsafe fn raw_send_recv(&self, ops: &[P2pOp], stream: &Stream) -> Result<Algorithm, CollError> {
        // Every round is checked before any is launched, so a bad group enqueues nothing.
        let in_place = self.args(stream)?.send_recv(ops).map_err(|source| self.refused(source))?;
        // A send from the buffer a receive of the group writes reads a staged copy instead.
        let staged_ops;
        let ops = if in_place.is_empty() {
            ops
        } else {
            let sources: Vec<(DevicePtr, usize)> =
                in_place.iter().map(|&i| (ops[i].ptr, ops[i].count * ops[i].dtype.size())).collect();
            // SAFETY: every source is a send buffer of the group, checked above.
            let copies = unsafe { self.stage(&sources, stream)? };
            let mut moved = ops.to_vec();
            for (&i, ptr) in in_place.iter().zip(copies) {
                moved[i].ptr = ptr;
            }
            staged_ops = moved;
            &staged_ops
        };
        // Point-to-point transfers move bytes: every type is supported. The size is the same on
        // every rank (what each end knows of a direction decides its kernel: transfers.rs).
        let algorithm = self.choose(Collective::SendRecv, 0, DataType::U8, ReduceOp::Sum, |_| 0)?;
        // Round i carries the i-th operation of every (peer, direction), matching the peers'
        // rounds.
        let mut carried = algorithm.through_scratch().unwrap_or(algorithm);
        for plan in (0..).map_while(|r| p2p_round(ops, r)) {
            // SAFETY: every plan buffer was checked above.
            let round = unsafe { self.direct_transfers(algorithm, plan, stream)? };
            if round.protocol() == Protocol::LlP2p {
                carried = round;
            }
        }
        Ok(carried)
    }

    /// Launches one round of direct transfers with `algorithm` (`ll` or `p2p` of all-to-all or
    /// send/receive): under `ll` the directions that fit the pair slots go over LL packets
    /// (`weft_p2p_ll`), then the others (under `p2p`, all) through scratch with credits
    /// (`weft_p2p`). A kernel is launched only where this rank has bytes in it, after settling
    /// with exactly the peers it exchanges them with; both ends of every direction give it to
    /// the same kernel (`transfers.rs`). Returns the algorithm that carried the round: `ll`
    /// when the packet kernel ran.
    ///
    /// # Safety
    /// Every buffer of `plan` must have been checked; the rest is
    /// [`Collectives::raw_all_reduce`]'s contract.
    unsafe fn direct_transfers(
        &self,
        algorithm: Algorithm,
        plan: P2pPlan,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        let me = self.comm.rank();
        let through_scratch = algorithm.through_scratch().unwrap_or(algorithm);
        let packets_max = match algorithm.protocol() {
            Protocol::LlP2p => (self.config.p2p_ll_bytes as u64).min(self.resources.pair_payload()),
            _ => 0,
        };
        let split = crate::transfers::split(&plan, me, packets_max);
        let mut carried = through_scratch;
        let (u8, sum) = (DataType::U8, ReduceOp::Sum);
        let bytes = crate::transfers::bytes(&split.packets);
        if bytes > 0 {
            self.comm.settle_with(crate::transfers::peers(&split.packets, me))?;
            let (plan, pairs) = (split.packets, self.resources.ll_pairs());
            // SAFETY: the pairs' flags and packet buffer live as long as `self`; the buffers
            // are the caller's contract.
            carried = unsafe { self.launch(algorithm, u8, sum, None, stream, bytes, |c| P2pLl { c, plan, pairs })? };
        }
        let bytes = crate::transfers::bytes(&split.scratch);
        if bytes > 0 {
            self.comm.settle_with(crate::transfers::peers(&split.scratch, me))?;
            let plan = split.scratch;
            // SAFETY: as above.
            unsafe { self.launch(through_scratch, u8, sum, None, stream, bytes, |c| P2p { c, plan })? };
        }
        Ok(carried)
    }

    fn ranks(&self) -> usize {
        self.comm.world_size()
    }

    /// With `CollConfig::check_calls`, exchanges `call` (built only then) with every rank and
    /// fails when the ranks' calls disagree; `checked` is this rank's own verdict on its
    /// arguments, which the peers learn too. Without, `checked` as it is.
    fn agreed<T>(&self, call: impl FnOnce() -> CallSignature, checked: Result<T, CollError>) -> Result<T, CollError> {
        if !self.config.check_calls {
            return checked;
        }
        let verdict = self.exchange_call(call(), checked.as_ref().err());
        // A rank that refused its own call reports its own error; the peers learned of it.
        let checked = checked?;
        verdict.map(|()| checked)
    }

    /// One exchange of calls (see `call_check.rs`): `mine`, numbered, refused for `refusal`.
    fn exchange_call(&self, mut mine: CallSignature, refusal: Option<&CollError>) -> Result<(), CollError> {
        let rank = self.comm.rank();
        mine.call = self.checked_calls.fetch_add(1, Ordering::Relaxed);
        mine.refused = refusal.map(|e| e.to_string());
        match crate::call_check::exchange(self.comm.bootstrap().as_ref(), &mine) {
            Ok(Verdict::Agreed) => Ok(()),
            Ok(Verdict::Disagree(detail)) => Err(CollError::Mismatch { rank, detail }),
            Err(ExchangeError::Bootstrap(source)) => Err(CollError::Core(weft_core::Error::Bootstrap { rank, source })),
            Err(malformed) => Err(CollError::Mismatch { rank, detail: malformed.to_string() }),
        }
    }

    /// A call of the typed layer on `dtype` elements. Under `CollConfig::check_calls`, one
    /// refused before it reaches the raw layer (a buffer of the wrong length or on another GPU)
    /// still takes part in the exchange of calls, so its peers fail at once naming it instead
    /// of waiting out the bootstrap timeout.
    pub(crate) fn with_call_check(
        &self,
        collective: Collective,
        dtype: DataType,
        call: impl FnOnce() -> Result<Algorithm, CollError>,
    ) -> Result<Algorithm, CollError> {
        let before = self.checked_calls.load(Ordering::Relaxed);
        let result = call();
        if let Err(refusal) = &result
            && self.config.check_calls
            && self.checked_calls.load(Ordering::Relaxed) == before
        {
            // This rank's own error is what it reports; the exchange tells the peers.
            let _ = self.exchange_call(CallSignature::new(collective, dtype, ReduceOp::Sum, 0), Some(refusal));
        }
        result
    }

    fn invalid(&self, detail: String) -> CollError {
        CollError::InvalidArgument { rank: self.comm.rank(), detail }
    }

    fn refused(&self, source: ArgError) -> CollError {
        CollError::Argument { rank: self.comm.rank(), source }
    }

    /// The scalar (checked: of the call's type, and a device scalar in this GPU's memory) and
    /// the compiled operator of a call on `dtype` elements reducing with `reduction`.
    fn reduction(
        &self,
        reduction: Reduction,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<(Option<Scalar>, ReduceOp), CollError> {
        let scalar = reduction.scalar_for(dtype).map_err(|source| self.refused(source))?;
        if let Some(Scalar::Device(ptr)) = scalar {
            let args = self.args(stream)?;
            (args.in_device)(ptr, dtype.size())
                .map_err(|d| self.invalid(format!("the premulsum scalar (device address {ptr:#x}): {d}")))?;
        }
        Ok((scalar, reduction.op()))
    }

    /// The argument checks of this rank (see `args.rs`), once `stream` is known to be on its
    /// GPU.
    fn args(&self, stream: &Stream) -> Result<Args<impl InDevice + '_>, CollError> {
        if stream.device().ordinal() != self.comm.device().ordinal() {
            return Err(self.invalid("the stream belongs to another GPU".into()));
        }
        let device = self.comm.device();
        Ok(Args {
            rank: self.comm.rank(),
            ranks: self.ranks(),
            in_device: move |ptr, len| weft_gpu::check_device_range(device, ptr, len).map_err(|e| e.to_string()),
        })
    }

    /// Where the ranks span nodes: the algorithm a call of `collective` on `bytes` of `dtype`
    /// with `op` would run, or why none can (the same answer on every rank), without launching
    /// anything. `None` within one node, where every collective runs. For callers with another
    /// engine to send what weft refuses between nodes to (libnccl.so.2's fallback NCCL).
    pub fn across_nodes(
        &self,
        collective: Collective,
        bytes: usize,
        dtype: DataType,
        op: ReduceOp,
    ) -> Option<Result<Algorithm, CollError>> {
        self.chooser().across_nodes(Call { collective, size: bytes, dtype, op })
    }

    fn chooser(&self) -> Chooser<'_> {
        Chooser {
            config: &self.config,
            rank: self.comm.rank(),
            ranks: self.ranks(),
            unreachable: self.resources.unreachable(),
            nodes: self.node_count,
            equal_nodes: self.equal_nodes,
            ll128: self.resources.ll128_room(),
        }
    }

    /// The algorithm for a `collective` of `size` (see [`Chooser::choose`]).
    fn choose(
        &self,
        collective: Collective,
        size: usize,
        dtype: DataType,
        op: ReduceOp,
        ll_payload: impl Fn(Algorithm) -> usize,
    ) -> Result<Algorithm, CollError> {
        let set_up = |id: PlanId| self.plans.lock().unwrap_or_else(|p| p.into_inner()).keys().any(|(p, _)| *p == id);
        self.chooser().choose(Call { collective, size, dtype, op }, ll_payload, set_up)
    }

    /// The executor of plan `id` (for a broadcast's `root`) carrying `bytes` of input per rank:
    /// set up on first use, and again, larger, when a call outgrows it (capacity: the next
    /// power of two, at least [`CollConfig::plan_capacity`]). Set-up is collective: every rank
    /// makes the same calls, so every rank sets up at the same call.
    fn plan_executor(&self, id: PlanId, root: usize, bytes: u64) -> Result<Arc<PlanExecutor>, CollError> {
        let rank = self.comm.rank();
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = plans.get(&(id, root)).filter(|e| e.capacity() >= bytes) {
            return Ok(Arc::clone(e));
        }
        let plan = id.plan_at(&self.nodes(), root).map_err(|detail| CollError::Unsupported { rank, detail })?;
        let capacity = bytes.next_power_of_two().max(self.config.plan_capacity as u64);
        let config = ExecConfig {
            capacity,
            replicas: self.config.plan_replicas,
            specialize: self.config.plan_specialize,
            slice_bytes: self.config.plan_slice_bytes as u64,
            ..ExecConfig::default()
        };
        let executor =
            Arc::new(PlanExecutor::new(&self.comm, &plan, config).map_err(|source| CollError::Exec { rank, source })?);
        if let Some(old) = plans.insert((id, root), Arc::clone(&executor)) {
            self.retired.lock().unwrap_or_else(|p| p.into_inner()).push(old);
        }
        Ok(executor)
    }

    /// The node of every rank, as plans see it.
    fn nodes(&self) -> Nodes {
        let topology = self.comm.topology();
        // Every rank below the world size has a node.
        Nodes::new((0..self.ranks()).map(|r| topology.node(r).unwrap_or_default()).collect())
    }

    /// Runs plan `id` on `count` input elements per rank.
    ///
    /// # Safety
    /// As for [`Collectives::raw_all_reduce`], with `send` and `recv` checked for the collective.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_plan(
        &self,
        id: PlanId,
        root: usize,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<Algorithm, CollError> {
        let rank = self.comm.rank();
        if count == 0 {
            return Ok(Algorithm::Plan(id));
        }
        let executor = self.plan_executor(id, root, (count * dtype.size()) as u64)?;
        // Captured, a launch large enough may run into the ranks' registered outputs (the
        // answer is the same on every rank; whether a rank can take part, in place or not, is
        // agreed).
        let outputs = match executor.direct_output(send, recv, count as u64, dtype.size() as u64) {
            Some(direct) => {
                let len = usize::try_from(direct.len).unwrap_or(usize::MAX);
                let output = Buffer { what: "recv", ptr: recv, len };
                self.peer_buffers(stream, output, len >= self.config.zero_copy_plan_min, direct.willing)?
            }
            None => PeerBuffers::default(),
        };
        // SAFETY: forwarded caller contract; the peers' outputs are mapped by the registry and
        // valid while the peers' buffers are (their callers' contract).
        unsafe { executor.launch(send, recv, count as u64, dtype, op, &outputs, stream) }
            .map_err(|source| CollError::Exec { rank, source })?;
        self.plan_launches[usize::from(executor.specialized())].fetch_add(1, Ordering::Relaxed);
        Ok(Algorithm::Plan(id))
    }

    /// Launches `algorithm`'s kernel with the parameters `params` makes of the collective
    /// context (carrying the call's PreMulSum `scalar`), unless the call moves no bytes. A
    /// parameter list not declared for the kernel is an error (`Kernel::launch`).
    ///
    /// # Safety
    /// The buffers among the parameters must stay valid until the stream's work is done.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch<P: KernelParams>(
        &self,
        algorithm: Algorithm,
        dtype: DataType,
        op: ReduceOp,
        scalar: Option<Scalar>,
        stream: &Stream,
        bytes: usize,
        params: impl FnOnce(CollContext) -> P,
    ) -> Result<Algorithm, CollError> {
        // SAFETY: forwarded contract.
        unsafe { self.launch_named(algorithm.kernel(), algorithm, dtype, op, scalar, stream, bytes, params) }
    }

    /// [`Collectives::launch`] of kernel `name`, a variant of `algorithm`'s kernel in its
    /// module, on `algorithm`'s grid.
    ///
    /// # Safety
    /// As for [`Collectives::launch`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch_named<P: KernelParams>(
        &self,
        name: &'static str,
        algorithm: Algorithm,
        dtype: DataType,
        op: ReduceOp,
        scalar: Option<Scalar>,
        stream: &Stream,
        bytes: usize,
        params: impl FnOnce(CollContext) -> P,
    ) -> Result<Algorithm, CollError> {
        if bytes == 0 {
            return Ok(algorithm);
        }
        let rank = self.comm.rank();
        let kernel =
            self.kernels.get_named(name, algorithm, dtype, op).map_err(|source| CollError::Gpu { rank, source })?;
        // Direct transfers involve only their peers, not every rank (direct_transfers settles
        // with those).
        if !algorithm.is_direct() {
            self.comm.settle_before_launch()?;
        }
        let params = params(with_scalar(self.resources.context(), scalar));
        let (grid, block) = match algorithm.protocol() {
            // LL128 launches run on lanes of their own (CollContext::ll128_lane).
            Protocol::Ll if algorithm.is_ll128() => (self.config.ll128_blocks, self.config.ll_threads),
            Protocol::Ll => (self.config.ll_blocks, self.config.ll_threads),
            Protocol::Hb | Protocol::Plan => (self.config.hb_blocks, self.config.hb_threads),
            Protocol::P2p => {
                let grid = crate::resources::p2p_launch_grid(
                    self.config.hb_blocks,
                    self.ranks(),
                    bytes,
                    self.config.p2p_wide_bytes,
                );
                (grid, self.config.hb_threads)
            }
            // Every (direction, peer) its parts: `weft_p2p_ll` reads their count from LlPairs.
            Protocol::LlP2p => (2 * self.ranks() as u32 * self.resources.ll_pairs().parts, self.config.ll_threads),
            // The workers their state was set up for, and the driver.
            Protocol::Port => (self.config.port_ring_blocks + 1, self.config.hb_threads),
        };
        let config = LaunchConfig { grid, block, shared_bytes: 0 };
        // Every LL kernel starts with `ll_launch_begin`, which waits for the previous grid.
        let early = self.config.early_launch && matches!(algorithm.protocol(), Protocol::Ll | Protocol::LlP2p);
        // SAFETY: the context's tables and buffers live as long as `self`; a device scalar was
        // checked to lie in this GPU's memory; an early launch's kernel waits for the previous
        // grid before its first access; the rest (it and the buffers staying valid) is the
        // caller's contract.
        unsafe {
            if early { kernel.launch_early(stream, config, &params) } else { kernel.launch(stream, config, &params) }
        }
        .map_err(|source| CollError::Gpu { rank, source })?;
        Ok(algorithm)
    }
}

/// One window of this rank: where every rank's buffer starts in this GPU's address space,
/// with the registration and mappings that keep those addresses valid.
struct MappedWindow {
    starts: PeerBuffers,
    _registration: Option<UserRegistration>,
    _mapped: Vec<RemoteMemory>,
    /// The buffer of a window registered through the typed API: peers write into it until
    /// the window is deregistered, whatever becomes of the handle its owner holds.
    _memory: Option<Arc<DeviceMemory>>,
}

//! [`PlanExecutor`]: one plan set up on one rank of a communicator, launched with the
//! interpreter kernel (`device/kernels/exec/executor.cu`) on any stream, any number of times,
//! eagerly or inside a CUDA graph. Setting up is collective; a launch enqueues one kernel and
//! nothing else (no host synchronisation, no allocation once the kernel for the call's type
//! and operator is loaded).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use weft_core::device_code::type_defines;
use weft_core::{Communicator, KernelLibrary};
use weft_gpu::{DevicePtr, Kernel, LaunchConfig, Stream};
use weft_plan::ExecutionPlan;
use weft_plan::dsl::Collective;
use weft_plan::passes::{InPlace, verify_in_place};
use weft_types::{
    DataType, EXEC_BARRIER, EXEC_ENTRY_FENCE, EXEC_EXIT_FENCE, EXEC_INPUT_STAGED, EXEC_OUTPUT_DIRECT,
    EXEC_OUTPUT_STAGED, ExecContext, ExecOp, MAX_RANKS, PeerBuffers, ReduceOp,
};

use crate::device_code::{EXECUTOR, Execute, KERNELS};
use crate::error::ExecError;
use crate::geometry::Sizing;
use crate::lower::{DevicePlan, lower};
use crate::resources::{ExecResources, Shape, all_gather_u64};
use crate::specialize::{specializable, static_ops_defines};
use crate::tables::{RankTables, needs_entry_fence, peers_only_push_signalled, peers_touch_outputs, rank_tables};

/// Most threads of an executor block (the kernel's `__launch_bounds__`).
pub const EXEC_THREADS: u32 = 1024;

// The kernel compares both launch parities' row-cache keys one word per thread: every block
// must have a thread for each word.
const _: () = assert!(EXEC_THREADS / 2 >= 2 * weft_types::EXEC_ROW_CACHE_KEY_WORDS as u32);

/// Threads of the executor blocks of a launch moving `bytes` per rank: whole 1024-thread blocks
/// from 64 MiB, half that below. Measured with ranks sharing one H200 (ring all-reduce plan,
/// 512 against 1024 threads): 1 KiB 25.7 against 32.5 µs, 4 MiB 36.3 against 45.4 µs, 64 MiB
/// 295 against 286-289 µs (16 MiB: 90.7 against 88.1-98.6 µs, within the noise).
pub fn exec_threads(bytes: u64) -> u32 {
    if bytes >= 64 << 20 { EXEC_THREADS } else { EXEC_THREADS / 2 }
}

/// Launch shape and buffer sizes of an executor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecConfig {
    /// Largest input, in bytes per rank, a launch may carry: the stages and scratch are sized
    /// for it.
    pub capacity: u64,
    /// Blocks of the grid when the plan's blocks are fewer: the extra blocks help copy the
    /// stages.
    pub stage_blocks: u32,
    /// Replicas of every plan thread block, each moving a slice of every chunk with its own
    /// links (`None`: as many as the rank's SMs hold, [`replicas_for`]). One replica is the
    /// plan as written: a thread block works through its chunks alone.
    pub replicas: Option<u32>,
    /// Compile this rank's operations into its kernel ([`crate::specialize`]): a kernel per plan
    /// and rank, compiled on first use, instead of the one interpreter kernel every plan shares.
    pub specialize: bool,
    /// A launch runs one replica per this many bytes of a chunk, up to `replicas` ([`active_replicas`];
    /// at least [`PORT_PLAN_SLICE_BYTES`] for plans with port links); 0: every replica at every
    /// size. Ignored for plans with plan barriers: they run every replica.
    pub slice_bytes: u64,
}

impl Default for ExecConfig {
    fn default() -> Self {
        Self { capacity: 1 << 20, stage_blocks: 32, replicas: None, specialize: false, slice_bytes: PLAN_SLICE_BYTES }
    }
}

/// Bytes of a chunk per replica a launch runs ([`ExecConfig::slice_bytes`]). Measured with 2
/// ranks sharing one H200 (specialized, CUDA graph, 33 replicas set up; µs at 1 KB / 16 KB /
/// 256 KB with every replica against one per 2 KiB): all-pairs LL plan 6.57 / 6.82 / 7.11
/// against 6.00 / 6.07 / 7.02, ring plan 10.90 / 10.93 / 10.99 against 9.17 / 9.10 / 11.12;
/// 1 KiB and 4 KiB slices were alike at 1 KB and no better above.
pub const PLAN_SLICE_BYTES: u64 = 2048;

/// The smallest slice of a plan with port links: every replica pushes its own commands to the
/// proxy, whose driver calls cost several µs each, so a replica must carry far more than a
/// thread block's copy would (measured with 2 ranks sharing one H200, `port_allpairs_allreduce`:
/// at 512 KB one replica 142 µs, two 105, four 155; at 4 MB four 276, eight 318).
pub const PORT_PLAN_SLICE_BYTES: u64 = 256 << 10;

/// Replicas a launch runs when its largest chunk has `chunk_bytes` and `replicas` are set up:
/// one per `slice_bytes` of the chunk, at least 1 (every replica when `slice_bytes` is 0).
pub fn active_replicas(chunk_bytes: u64, slice_bytes: u64, replicas: u32) -> u32 {
    if slice_bytes == 0 {
        return replicas;
    }
    let wanted = chunk_bytes.div_ceil(slice_bytes).max(1);
    u32::try_from(wanted).unwrap_or(u32::MAX).min(replicas)
}

/// Replicas of a plan with port links unless the configuration names a count: each replica
/// pushes its own puts to the rank's one proxy thread, whose driver calls cost several µs per
/// command, so replicas add latency at small sizes while they speed up the thread blocks' own
/// copies and folds at large ones. Measured with 2 ranks sharing one H200
/// (`port_allpairs_allreduce`, CUDA graph, µs per call at 1 KB / 4 MB / 32 MB): 1 replica 62 /
/// 797 / 7788, 2: 68 / 438 / 3946, 4: 134 / 276 / 2041, 8: 342 / 318 / 1119.
pub const PORT_PLAN_REPLICAS: u32 = 4;

/// Replicas of each of a plan's `threadblocks` thread blocks on `sms` SMs: every plan block
/// must be resident (they wait for each other), one per SM, so at most `sms / threadblocks`;
/// `wanted` (clamped to that) or else all of it. A plan's thread block works through its
/// chunks one after another, so a single block per thread block moves a few tens of GB/s;
/// the copies of the native kernels fill the GPU.
pub fn replicas_for(threadblocks: u32, sms: u32, wanted: Option<u32>) -> u32 {
    let most = (sms / threadblocks.max(1)).max(1);
    wanted.unwrap_or(most).clamp(1, most)
}

/// Whether the executor runs reductions with `op`: partial results travel in the element type,
/// so an average (a division after the whole sum) has no place to happen, and plans have no
/// step that multiplies a rank's own input by its PreMulSum scalar before it enters the
/// reduction; the selector picks a native algorithm for them.
pub fn supports_op(op: ReduceOp) -> bool {
    !matches!(op, ReduceOp::Avg | ReduceOp::PreMulSum)
}

/// A launch that may run into the ranks' user outputs ([`PlanExecutor::direct_output`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectOutput {
    /// Bytes of this rank's output the launch writes: the length to register.
    pub len: u64,
    /// This rank can take part (out of place, in place in the layout the plan was verified
    /// for, or anywhere when nothing reads its input); every rank must, or none does.
    pub willing: bool,
}

/// A call's user input and output: where they start and how many bytes the plan touches.
struct UserBuffers {
    input: DevicePtr,
    output: DevicePtr,
    in_bytes: u64,
    out_bytes: u64,
}

impl UserBuffers {
    fn new(plan: &DevicePlan, sizing: &Sizing, input: DevicePtr, output: DevicePtr, elem: u64) -> Self {
        let bytes = |chunks: u32| sizing.split().dense_offset(u64::from(chunks)) * elem;
        Self { input, output, in_bytes: bytes(plan.input_chunks), out_bytes: bytes(plan.output_chunks) }
    }

    /// Whether input and output overlap (the call is in place).
    fn in_place(&self) -> bool {
        self.input < self.output + self.out_bytes && self.output < self.input + self.in_bytes
    }

    /// Whether rank `rank` can take part in a launch into the ranks' user outputs with these
    /// buffers: its output is 16-byte aligned, and peers writing it overwrite no input still to
    /// be read. That holds out of place; in place, in the layout `in_place` the plan is verified
    /// for ([`verified_in_place`]); and, on a plan verified in place, wherever the input lies
    /// when no operation, the rank's own or a peer's, reads it (`input_read`: a broadcast's
    /// non-root, whose input the caller may point anywhere, weft-coll's typed API at its
    /// output). Every rank must answer alike: a rank that finds its output in a window goes
    /// direct without asking.
    fn willing(&self, in_place: Option<InPlace>, rank: u64, input_read: bool) -> bool {
        let offsets = in_place.and_then(|layout| layout.byte_offsets(rank, self.in_bytes, self.out_bytes));
        let verified = offsets.is_some_and(|(i, o)| {
            self.input.checked_sub(i).is_some_and(|base| Some(base) == self.output.checked_sub(o))
        });
        // A rank whose input nothing reads may put it anywhere only on a plan verified in
        // place: elsewhere its peers, which read theirs, refuse in place, and it must too.
        let unread = !input_read && in_place.is_some();
        (unread || !self.in_place() || verified) && self.output.is_multiple_of(16)
    }
}

/// The in-place layout in which `plan` is verified race-free and correct ([`verify_in_place`]),
/// if any: the same on every rank.
pub(crate) fn verified_in_place(plan: &ExecutionPlan) -> Option<InPlace> {
    Collective::from_plan(plan).ok().filter(|c| verify_in_place(plan, c).is_ok()).and_then(|_| InPlace::of(plan))
}

/// A plan set up for one rank; see the module documentation.
pub struct PlanExecutor {
    comm: Communicator,
    plan: DevicePlan,
    tables: RankTables,
    /// Some rank's output is read or written by a peer (the same on every rank).
    outputs_shared: bool,
    /// A launch that fences on entry may skip its exit fence (the same on every rank).
    exit_fence_optional: bool,
    /// The in-place layout in which the plan is verified race-free and correct with each
    /// output chunk the same memory as the input chunk it overlaps: in place, peers may then
    /// write the user output directly too.
    in_place: Option<InPlace>,
    resources: ExecResources,
    grid: u32,
    capacity: u64,
    /// The kernel has this rank's operations compiled in ([`ExecConfig::specialize`]).
    specialized: bool,
    /// [`ExecConfig::slice_bytes`], or 0 when the plan has plan barriers (which count every
    /// replica of every launch, so every launch runs all of them): the same on every rank.
    slice_bytes: u64,
    library: KernelLibrary,
    kernels: Mutex<HashMap<(DataType, ReduceOp), Arc<LoadedKernel>>>,
}

/// The kernel of one `(type, operator)`, and whether its first launch met every rank's (see
/// [`PlanExecutor::launch`]).
struct LoadedKernel {
    kernel: Kernel,
    met: AtomicBool,
}

impl std::fmt::Debug for PlanExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanExecutor")
            .field("plan", &self.plan.name)
            .field("rank", &self.comm.rank())
            .field("grid", &self.grid)
            .field("replicas", &self.resources.context.replicas)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl PlanExecutor {
    /// Sets `plan` up on `comm`. Collective: every rank calls it with the same plan and config.
    pub fn new(comm: &Communicator, plan: &ExecutionPlan, config: ExecConfig) -> Result<Self, ExecError> {
        let (rank, ranks) = (comm.rank(), comm.world_size());
        if plan.nranks as usize != ranks {
            return Err(ExecError::Unsupported(format!(
                "plan {} has {} ranks, the communicator {ranks}",
                plan.name, plan.nranks
            )));
        }
        let lowered = lower(plan)?;
        let tables = rank_tables(&lowered, rank)?;
        let threadblocks = (lowered.ranks[rank].tb_starts.len() - 1) as u32;
        let sms = comm.resident_sms()?;
        // Blocks wait for each other (barriers, steps, the fences), so all must be resident.
        if threadblocks > sms {
            return Err(ExecError::Unsupported(format!(
                "rank {rank}: {threadblocks} thread blocks, {sms} SMs of the GPU are this rank's"
            )));
        }
        // Replica r of a thread block moves slice r of a chunk on every rank, and a link's
        // replicas pair up across ranks: every rank runs the same count, the one the rank with
        // the most thread blocks and the fewest SMs can hold.
        let widest = lowered.ranks.iter().map(|r| r.tb_starts.len() as u32 - 1).max().unwrap_or(1);
        let ports = lowered.ranks.iter().any(|r| !r.ports.is_empty());
        let mine = replicas_for(widest, sms, config.replicas.or(ports.then_some(PORT_PLAN_REPLICAS)));
        let fewest = all_gather_u64(comm, mine.into())?.into_iter().min().unwrap_or(1);
        let replicas = u32::try_from(fewest).unwrap_or(1).max(1);
        let grid = (threadblocks * replicas).max(config.stage_blocks).min(sms).max(1);
        let resources =
            ExecResources::new(comm, &lowered, &tables, Shape { capacity: config.capacity, grid, replicas })?;
        let specialized = config.specialize && specializable(&lowered, rank);
        let barriers = lowered.ranks.iter().flat_map(|r| &r.ops).any(|op| op.flags & EXEC_BARRIER != 0);
        // Every rank must pick the same replicas for a call: the smallest slice any rank asks for.
        let slice_bytes = all_gather_u64(comm, config.slice_bytes)?.into_iter().min().unwrap_or(0);
        Ok(Self {
            comm: comm.clone(),
            outputs_shared: peers_touch_outputs(&lowered),
            exit_fence_optional: peers_only_push_signalled(&lowered) && !needs_entry_fence(&lowered),
            in_place: verified_in_place(plan),
            plan: lowered,
            tables,
            resources,
            grid,
            capacity: config.capacity,
            specialized,
            slice_bytes: match slice_bytes {
                _ if barriers => 0,
                0 => 0,
                s if ports => s.max(PORT_PLAN_SLICE_BYTES),
                s => s,
            },
            library: KernelLibrary::new(comm.env().cache_dir.clone(), &KERNELS),
            kernels: Mutex::default(),
        })
    }

    /// The plan's name.
    pub fn name(&self) -> &str {
        &self.plan.name
    }

    /// The largest input (bytes per rank) a launch may carry.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Whether the kernel has this rank's operations compiled in ([`ExecConfig::specialize`]).
    pub fn specialized(&self) -> bool {
        self.specialized
    }

    /// Input chunks per input block: a call's element count must be a multiple of this.
    pub fn blocks(&self) -> u64 {
        u64::from(self.plan.input_chunks / self.plan.size_classes.max(1))
    }

    /// Compiles (or reads from the cache) and loads the kernel for `(dtype, op)`.
    pub fn prepare(&self, dtype: DataType, op: ReduceOp) -> Result<(), ExecError> {
        self.loaded(dtype, op).map(|_| ())
    }

    /// The kernel for `(dtype, op)`, compiled or read from the cache and loaded on first use.
    fn loaded(&self, dtype: DataType, op: ReduceOp) -> Result<Arc<LoadedKernel>, ExecError> {
        let rank = self.comm.rank();
        if !supports_op(op) {
            return Err(ExecError::Unsupported(format!("the {} operator", op.name())));
        }
        // Entries are inserted whole; a poisoned map is still consistent.
        let mut kernels = self.kernels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = kernels.get(&(dtype, op)) {
            return Ok(Arc::clone(k));
        }
        let gpu = |source| ExecError::Gpu { rank, source };
        let mut defines = type_defines(dtype, op);
        if self.specialized {
            defines.extend(static_ops_defines(&self.plan, rank));
        }
        let loaded = self.library.load_with(self.comm.device(), EXECUTOR, &defines).map_err(gpu)?;
        let kernel = loaded.module.kernel("weft_execute").map_err(gpu)?;
        let kernel = Arc::new(LoadedKernel { kernel, met: AtomicBool::new(false) });
        kernels.insert((dtype, op), Arc::clone(&kernel));
        Ok(kernel)
    }

    /// Whether a launch on `count` elements of `elem` bytes per rank may run into the ranks'
    /// user outputs, registered and mapped by the caller (weft-coll's registry): `None` when no
    /// rank's can (the same answer on every rank: peers touch no output, or the chunks are not
    /// whole 16-byte vectors); otherwise how much of `output` to register and whether this
    /// rank can take part. Peers then write the outputs themselves: no output stage, no copy
    /// out, and an entry fence instead.
    pub fn direct_output(&self, input: DevicePtr, output: DevicePtr, count: u64, elem: u64) -> Option<DirectOutput> {
        let sizing = Sizing::new(&self.plan, count)?;
        self.direct(&UserBuffers::new(&self.plan, &sizing, input, output, elem), &sizing, elem)
    }

    /// [`Self::direct_output`] of a call whose sizing is known.
    fn direct(&self, user: &UserBuffers, sizing: &Sizing, elem: u64) -> Option<DirectOutput> {
        // The kernel argument holds MAX_RANKS outputs.
        let fits = self.comm.world_size() <= MAX_RANKS;
        if !self.outputs_shared || !fits || sizing.unit() == 0 || !sizing.split().dense_is_padded(elem) {
            return None;
        }
        // In place, a peer's write could overwrite input this rank has yet to read, unless the
        // plan is verified for exactly this layout (the input and output where it puts them
        // inside one buffer) or nothing reads this rank's input.
        let willing = user.willing(self.in_place, self.comm.rank() as u64, self.tables.input_read);
        Some(DirectOutput { len: user.out_bytes, willing })
    }

    /// The context of a launch on `count` input elements of `elem` bytes per rank, into the
    /// ranks' user outputs when `outputs` names this rank's.
    fn context(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: u64,
        elem: u64,
        outputs: &PeerBuffers,
    ) -> Result<ExecContext, ExecError> {
        let rank = self.comm.rank();
        let fail = |reason: String| ExecError::Count { rank, plan: self.plan.name.clone(), count, reason };
        let sizing = Sizing::new(&self.plan, count)
            .ok_or_else(|| fail(format!("not a multiple of its {} input blocks", self.blocks())))?;
        // The capacity decides alike on every rank (a rank's own buffers may have room to
        // spare where a peer's have none); past it, the buffers may not fit.
        let need = sizing.padded_lengths(&self.plan.ranks[rank], elem);
        let too_large = count.checked_mul(elem).is_none_or(|bytes| bytes > self.capacity);
        if too_large || need.iter().zip(&self.resources.usable).any(|(n, room)| n > room) {
            return Err(fail(format!("more than the executor's capacity of {} bytes", self.capacity)));
        }
        let user = UserBuffers::new(&self.plan, &sizing, input, output, elem);
        let mut flags = self.resources.context.flags;
        // `packet_launches_chain` counts every transfer as an edge; a packet transfer of an
        // empty chunk (fewer elements per block than size classes) waits for nothing, so such a
        // launch fences on entry instead.
        if self.plan.packets && sizing.unit() < sizing.classes() {
            flags |= EXEC_ENTRY_FENCE;
        }
        if self.tables.input_remote {
            flags |= EXEC_INPUT_STAGED;
        }
        let mine = outputs.ptr.get(rank).copied().unwrap_or(0);
        if mine != 0 {
            let usable = self.direct(&user, &sizing, elem).is_some_and(|d| d.willing);
            if !usable || mine != output {
                return Err(fail("user outputs given for a launch that cannot run into them".into()));
            }
            flags |= EXEC_OUTPUT_DIRECT | EXEC_ENTRY_FENCE;
            if self.exit_fence_optional {
                flags &= !EXEC_EXIT_FENCE;
            }
        } else if self.tables.output_remote || user.in_place() {
            flags |= EXEC_OUTPUT_STAGED;
        }
        let replicas = self.resources.context.replicas;
        let chunk_bytes = sizing.unit().div_ceil(sizing.classes().max(1)) * elem;
        let active_replicas = active_replicas(chunk_bytes, self.slice_bytes, replicas);
        Ok(ExecContext { input, output, unit: sizing.unit(), flags, active_replicas, ..self.resources.context })
    }

    /// Runs the plan on `count` input elements per rank (`input`'s length; `output` holds the
    /// plan's output chunks, e.g. `ranks * count` for an all-gather), reducing with `op`.
    /// Input and output may overlap (in place): the output is then assembled in the stage.
    /// `outputs` is every rank's `output` as this GPU maps it, for a launch that runs into
    /// them ([`Self::direct_output`]), else all zero.
    ///
    /// # Safety
    /// `input` and `output` must be device memory of this rank's GPU, valid for the lengths
    /// the plan implies until the work enqueued on `stream` has finished; every rank must make
    /// the matching launch (same count, type, operator, and all or none with `outputs`) in the
    /// same order; `outputs`' entries must stay mapped and valid for as long.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: u64,
        dtype: DataType,
        op: ReduceOp,
        outputs: &PeerBuffers,
        stream: &Stream,
    ) -> Result<(), ExecError> {
        let rank = self.comm.rank();
        let context = self.context(input, output, count, dtype.size() as u64, outputs)?;
        if count == 0 {
            return Ok(());
        }
        let loaded = self.loaded(dtype, op)?;
        // The first launch of a type and operator waits for every rank to have its kernel: a
        // specialized kernel differs per rank and takes seconds to compile, and a rank that
        // launched first would wait that long in the kernel for its peers, past the timeout.
        // Launches are made in the same order on every rank, so this is the same call on all.
        // The kernel counts as met only once the barrier has passed, so a call that failed
        // there meets its peers at the barrier again when retried.
        if !loaded.met.load(Ordering::Acquire) {
            self.comm.barrier()?;
            loaded.met.store(true, Ordering::Release);
        }
        self.comm.settle_before_launch()?;
        let params = Execute { c: context, outputs: *outputs };
        // A specialized kernel reads its operations from the uploaded table, not shared memory.
        let shared_bytes = if self.specialized { 0 } else { self.tables.max_tb_ops * size_of::<ExecOp>() as u32 };
        let block = exec_threads(count.saturating_mul(dtype.size() as u64));
        let config = LaunchConfig { grid: self.grid, block, shared_bytes };
        // SAFETY: the context's tables and buffers live as long as `self`; `input` and
        // `output` and the peers' outputs are the caller's contract.
        unsafe { loaded.kernel.launch(stream, config, &params) }.map_err(|source| ExecError::Gpu { rank, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_runs_one_replica_per_slice_of_its_largest_chunk() {
        assert_eq!(active_replicas(1, 2048, 33), 1);
        assert_eq!(active_replicas(512, 2048, 33), 1);
        assert_eq!(active_replicas(2049, 2048, 33), 2);
        assert_eq!(active_replicas(8 << 10, 2048, 33), 4);
        assert_eq!(active_replicas(1 << 30, 2048, 33), 33);
        // 0: every replica, whatever the size.
        assert_eq!(active_replicas(16, 0, 33), 33);
        assert_eq!(active_replicas(0, 2048, 4), 1);
    }

    /// A launch into the user outputs runs on every rank or on none, and a rank that finds its
    /// output in a window goes direct without asking its peers: every rank of a broadcast plan
    /// must be willing wherever its caller put the buffers it may put them. The root reads its
    /// input, out of place or in place (its own copy then lands on the input it reads); a
    /// non-root reads none, and weft-coll's typed API hands it its output as input.
    #[test]
    fn every_rank_of_a_broadcast_plan_is_willing_to_run_into_the_outputs() {
        // A bf16 call of 2048 elements (whole 16-byte vectors per chunk), as weft-coll sets the
        // plan up (four instances) and with one.
        let (count, elem) = (2048, 2);
        let bytes = count * elem;
        for (ranks, instances) in [(2, 4), (4, 4), (3, 1)] {
            for root in 0..ranks {
                let plan = weft_plan::plans::direct_broadcast(ranks, root, instances).unwrap().compile().unwrap();
                let lowered = lower(&plan).unwrap();
                let sizing = Sizing::new(&lowered, count).unwrap();
                let in_place = verified_in_place(&plan);
                assert_eq!(in_place, Some(InPlace::Same), "root {root}: the plan verifies in place");
                let tables: Vec<RankTables> = (0..ranks).map(|r| rank_tables(&lowered, r as usize).unwrap()).collect();
                // Every rank's answer for its (input, output) of the call at `buffers(rank)`.
                let answers = |buffers: &dyn Fn(u64) -> (DevicePtr, DevicePtr)| -> Vec<bool> {
                    (0..u64::from(ranks))
                        .map(|rank| {
                            let (input, output) = buffers(rank);
                            let user = UserBuffers::new(&lowered, &sizing, input, output, elem);
                            user.willing(in_place, rank, tables[rank as usize].input_read)
                        })
                        .collect()
                };
                let send = |rank: u64| 0x1000_0000 * (rank + 1);
                let recv = |rank: u64| 0x1000_0000 * (rank + 1) + 0x80_0000;
                let root = u64::from(root);
                let what = format!("{ranks} ranks, root {root}");
                let all = vec![true; ranks as usize];
                // Out of place: the root reads `send`; a non-root is given `recv` as its input.
                let out_of_place = answers(&|r| (if r == root { send(r) } else { recv(r) }, recv(r)));
                assert_eq!(out_of_place, all, "{what}: out of place");
                assert_eq!(answers(&|r| (recv(r), recv(r))), all, "{what}: in place");
                // A raw caller's non-root input, never read, anywhere over its output.
                let scattered = answers(&|r| (if r == root { send(r) } else { recv(r) + 16 * r }, recv(r)));
                assert_eq!(scattered, all, "{what}: non-root inputs over their outputs");
                assert_eq!(answers(&|r| (recv(r) + bytes / 2 * u64::from(r != root), recv(r))), all, "{what}");
                // A misaligned output keeps every rank out (the same on all under the windows'
                // contract: same offset in every rank's window).
                assert_eq!(answers(&|r| (send(r) + 2, recv(r) + 2)), vec![false; ranks as usize], "{what}");
                for (rank, t) in tables.iter().enumerate() {
                    assert_eq!(t.input_read, rank as u64 == root, "{what}: rank {rank}");
                }
            }
        }
    }

    /// Every shipped plan, every rank count of the sample: with buffers as the windows'
    /// contract places them (the same offsets on every rank: out of place, or in place in the
    /// collective's nccl-tests layout), and on a plan verified in place also with a rank whose
    /// input nothing reads handed its output as input (weft-coll's typed broadcast), every rank
    /// answers `willing` alike, since a rank that finds its output in a window goes direct
    /// without asking its peers.
    #[test]
    fn every_rank_of_every_shipped_plan_answers_alike_under_the_windows_contract() {
        let elem = 2;
        for plan in weft_plan::plans::samples().unwrap() {
            let lowered = lower(&plan).unwrap();
            let ranks = plan.nranks as u64;
            let tables: Vec<RankTables> =
                (0..plan.nranks).map(|r| rank_tables(&lowered, r as usize).unwrap()).collect();
            let in_place = verified_in_place(&plan);
            let layout = InPlace::of(&plan);
            let mut sized = 0;
            for count in [2048u64, 6144, 1 << 16, 3 << 14, 5 * 7 * 1024] {
                let Some(sizing) = Sizing::new(&lowered, count) else { continue };
                sized += 1;
                let user = |input: u64, output: u64| UserBuffers::new(&lowered, &sizing, input, output, elem);
                let (send, recv) = (|r: u64| 0x1000_0000 * (r + 1), |r: u64| 0x1000_0000 * (r + 1) + 0x400_0000);
                let answers = |place: &dyn Fn(u64) -> (u64, u64)| -> Vec<bool> {
                    (0..ranks)
                        .map(|r| {
                            let (input, output) = place(r);
                            user(input, output).willing(in_place, r, tables[r as usize].input_read)
                        })
                        .collect()
                };
                let alike = |answers: &[bool]| answers.iter().all(|&w| w == answers[0]);
                let what = format!("{} at {ranks} ranks, {count} elements", plan.name);
                let out_of_place = answers(&|r| (send(r), recv(r)));
                assert!(alike(&out_of_place), "{what}, out of place: {out_of_place:?}");
                if in_place.is_some() {
                    let unread_given_output =
                        answers(&|r| (if tables[r as usize].input_read { send(r) } else { recv(r) }, recv(r)));
                    assert!(
                        alike(&unread_given_output),
                        "{what}, unread inputs at the outputs: {unread_given_output:?}"
                    );
                }
                if let Some(layout) = layout {
                    let placed = |r: u64| {
                        let probe = user(0, 0);
                        let (i, o) = layout.byte_offsets(r, probe.in_bytes, probe.out_bytes).unwrap();
                        (recv(0) + i, recv(0) + o)
                    };
                    let in_place_answers = answers(&|r| {
                        let (i, o) = placed(r);
                        (i - recv(0) + recv(r), o - recv(0) + recv(r))
                    });
                    assert!(alike(&in_place_answers), "{what}, in place: {in_place_answers:?}");
                }
            }
            assert!(sized > 0, "{}: no count sized", plan.name);
        }
    }

    /// Where peers could overwrite input the rank still reads, it stays out: in place outside
    /// the verified layout, and in place on a plan not verified in place.
    #[test]
    fn a_rank_whose_input_is_read_runs_into_outputs_only_where_verified() {
        let (count, elem) = (2048u64, 4u64);
        let ring = weft_plan::plans::ring_allgather(2, 1).unwrap().compile().unwrap();
        let lowered = lower(&ring).unwrap();
        let sizing = Sizing::new(&lowered, count).unwrap();
        let layout = verified_in_place(&ring);
        assert_eq!(layout, Some(InPlace::InputInOutput));
        let base = 0x1000_0000;
        let user = |input, output| UserBuffers::new(&lowered, &sizing, input, output, elem);
        // Rank 1's input at block 1 of its output (nccl-tests): verified; at block 0: not.
        assert!(user(base + count * elem, base).willing(layout, 1, true));
        assert!(!user(base, base).willing(layout, 1, true));
        // Out of place, always.
        assert!(user(base, base + 0x100_0000).willing(layout, 1, true));
        // All-to-all is not verified in place: in place, a rank whose input is read stays out.
        let alltoall = weft_plan::plans::two_step_alltoall(2, 1, 1).unwrap().compile().unwrap();
        assert_eq!(verified_in_place(&alltoall), None);
        let lowered = lower(&alltoall).unwrap();
        let sizing = Sizing::new(&lowered, count).unwrap();
        assert!(!UserBuffers::new(&lowered, &sizing, base, base, elem).willing(None, 0, true));
        assert!(UserBuffers::new(&lowered, &sizing, base, base + 0x100_0000, elem).willing(None, 0, true));
    }
}

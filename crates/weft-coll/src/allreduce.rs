//! AllReduce: one-shot LL16 for small messages, two-shot reduce-scatter + all-gather through
//! registered scratch for large ones (`device/kernels/allreduce.cu`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weft_core::{Communicator, KernelLibrary, MemoryChannel, MemoryChannelConfig, RegisteredMemory, Semaphore};
use weft_gpu::{AllocKind, DeviceMemory, DevicePtr, Kernel, KernelArgs, LaunchConfig, Stream};
use weft_types::{DataType, MemoryChannelDeviceHandle, ReduceOp, SemaphoreDeviceHandle};

use crate::error::CollError;

/// Ranks the HB kernel supports (it keeps one pointer per rank in registers).
const MAX_RANKS: usize = 8;

/// Which AllReduce kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllReduceAlgorithm {
    /// One-shot all-pairs over LL16 packets.
    OneShotLl,
    /// Two-shot (reduce-scatter + all-gather) over LL16 packets.
    TwoShotLl,
    /// Two-shot reduce-scatter + all-gather through scratch, many blocks.
    TwoShotHb,
}

impl AllReduceAlgorithm {
    /// Short name (`ll`, `ll2`, `hb`), as `WEFT_ALGO_ALLREDUCE` accepts it.
    pub fn name(self) -> &'static str {
        match self {
            Self::OneShotLl => "ll",
            Self::TwoShotLl => "ll2",
            Self::TwoShotHb => "hb",
        }
    }
}

/// Sizes and limits of the AllReduce state. `from_env` reads the overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllReduceConfig {
    /// Largest message (bytes) the one-shot LL algorithm takes; also sizes the packet buffers.
    pub ll_max_bytes: usize,
    /// Largest message (bytes) the two-shot LL algorithm takes; also sizes the packet buffers.
    pub ll2_max_bytes: usize,
    /// Blocks of an LL launch, one-shot and two-shot alike (fixed: per-block flags advance in
    /// lockstep).
    pub ll_blocks: u32,
    /// Threads per LL block.
    pub ll_threads: u32,
    /// Blocks of an HB launch (fixed: one semaphore per peer and block).
    pub hb_blocks: u32,
    /// Threads per HB block.
    pub hb_threads: u32,
    /// Bytes the HB kernel processes per round; scratch is twice this.
    pub chunk_bytes: usize,
    /// Force one algorithm (`WEFT_ALGO_ALLREDUCE=ll|hb`).
    pub force: Option<AllReduceAlgorithm>,
}

impl Default for AllReduceConfig {
    fn default() -> Self {
        Self {
            // Measured on 4xH200 (docs/perf/collectives.md): one-shot LL wins up to 64 KiB,
            // two-shot LL up to 1 MiB; 64 LL blocks and 128 HB blocks were the best tried.
            ll_max_bytes: 64 << 10,
            ll2_max_bytes: 1 << 20,
            ll_blocks: 64,
            ll_threads: 512,
            hb_blocks: 128,
            hb_threads: 1024,
            chunk_bytes: 32 << 20,
            force: None,
        }
    }
}

impl AllReduceConfig {
    /// Defaults overridden by the communicator's environment: `WEFT_ALGO_ALLREDUCE` (`ll`,
    /// `ll2`, `hb` or `auto`), `WEFT_ALLREDUCE_LL_MAX`, `WEFT_ALLREDUCE_LL2_MAX`,
    /// `WEFT_ALLREDUCE_CHUNK` (bytes), `WEFT_ALLREDUCE_HB_BLOCKS` and `WEFT_ALLREDUCE_LL_BLOCKS`.
    pub fn from_env(env: &weft_core::Env) -> Result<Self, String> {
        Self::from_lookup(|k| env.var(k).map(str::to_string))
    }

    /// [`AllReduceConfig::from_env`] through a lookup function (tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut c = Self::default();
        let number = |name: &str, v: String, max: usize| -> Result<usize, String> {
            v.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0 && n <= max)
                .ok_or_else(|| format!("{name}={v:?}: expected 1..={max}"))
        };
        if let Some(v) = lookup("WEFT_ALGO_ALLREDUCE") {
            c.force = match v.trim() {
                "ll" => Some(AllReduceAlgorithm::OneShotLl),
                "ll2" => Some(AllReduceAlgorithm::TwoShotLl),
                "hb" => Some(AllReduceAlgorithm::TwoShotHb),
                "" | "auto" => None,
                _ => return Err(format!("WEFT_ALGO_ALLREDUCE={v:?}: expected ll, ll2, hb or auto")),
            };
        }
        if let Some(v) = lookup("WEFT_ALLREDUCE_LL_MAX") {
            c.ll_max_bytes = number("WEFT_ALLREDUCE_LL_MAX", v, 16 << 20)?;
        }
        if let Some(v) = lookup("WEFT_ALLREDUCE_HB_BLOCKS") {
            c.hb_blocks = number("WEFT_ALLREDUCE_HB_BLOCKS", v, 1024)? as u32;
        }
        if let Some(v) = lookup("WEFT_ALLREDUCE_LL2_MAX") {
            c.ll2_max_bytes = number("WEFT_ALLREDUCE_LL2_MAX", v, 64 << 20)?;
        }
        if let Some(v) = lookup("WEFT_ALLREDUCE_CHUNK") {
            c.chunk_bytes = number("WEFT_ALLREDUCE_CHUNK", v, 1 << 30)?;
        }
        if let Some(v) = lookup("WEFT_ALLREDUCE_LL_BLOCKS") {
            c.ll_blocks = number("WEFT_ALLREDUCE_LL_BLOCKS", v, 1024)? as u32;
        }
        Ok(c)
    }

    /// The algorithm for a message of `bytes`.
    pub fn select(&self, bytes: usize) -> AllReduceAlgorithm {
        self.force.unwrap_or(if bytes <= self.ll_max_bytes {
            AllReduceAlgorithm::OneShotLl
        } else if bytes <= self.ll2_max_bytes {
            AllReduceAlgorithm::TwoShotLl
        } else {
            AllReduceAlgorithm::TwoShotHb
        })
    }
}

struct Kernels {
    ll: Kernel,
    ll2: Kernel,
    hb: Kernel,
}

/// Packet buffer geometry: two halves (flag parity), each holding either kernel's regions.
#[derive(Clone, Copy, Debug)]
struct PacketLayout {
    half_bytes: u64,
    /// One-shot: one slot per source rank.
    slot_bytes: u64,
    /// Two-shot: one scatter and one gather slot per rank.
    slot2_bytes: u64,
}

impl PacketLayout {
    fn new(config: &AllReduceConfig, ranks: usize) -> Self {
        let packets = |bytes: usize| (bytes.div_ceil(8) * 16) as u64;
        let slot_bytes = packets(config.ll_max_bytes);
        let slot2_bytes = packets(config.ll2_max_bytes.div_ceil(ranks).next_multiple_of(8));
        let ranks = ranks as u64;
        Self { half_bytes: (ranks * slot_bytes).max(2 * ranks * slot2_bytes), slot_bytes, slot2_bytes }
    }
}

/// AllReduce state of one rank: scratch and packet buffers registered with every peer, the
/// channel and semaphore tables on the device, per-block LL flags, and loaded kernels.
pub struct AllReduce {
    comm: Communicator,
    config: AllReduceConfig,
    library: KernelLibrary,
    kernels: Mutex<HashMap<(DataType, ReduceOp), Arc<Kernels>>>,
    scratch: RegisteredMemory,
    channel_table: DeviceMemory,
    semaphore_table: DeviceMemory,
    ll_flags: DeviceMemory,
    layout: PacketLayout,
    _channels: Vec<MemoryChannel>,
    _semaphores: Vec<Semaphore>,
}

impl std::fmt::Debug for AllReduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AllReduce").field("rank", &self.comm.rank()).field("config", &self.config).finish()
    }
}

impl AllReduce {
    /// Sets up AllReduce on `comm`. Collective: every rank calls it with the same config.
    pub fn new(comm: &Communicator, config: AllReduceConfig) -> Result<Self, CollError> {
        let rank = comm.rank();
        let ranks = comm.world_size();
        let gpu = |source| CollError::Gpu { rank, source };
        if ranks > MAX_RANKS {
            return Err(CollError::Unsupported { rank, detail: format!("{ranks} ranks (at most {MAX_RANKS})") });
        }
        if config.ll_blocks == 0 || config.hb_blocks == 0 || config.chunk_bytes < 16 * ranks * config.hb_blocks as usize
        {
            return Err(CollError::InvalidArgument { rank, detail: format!("config {config:?}") });
        }
        let layout = PacketLayout::new(&config, ranks);
        // The HB kernel's slots (ranks x shard) must fit the chunk: a multiple of 16 x ranks.
        let mut config = config;
        config.chunk_bytes -= config.chunk_bytes % (16 * ranks);
        let scratch = comm.register(comm.alloc(2 * config.chunk_bytes)?)?;
        let packets = comm.alloc(2 * layout.half_bytes as usize)?;
        packets.fill(0, packets.len(), 0).map_err(gpu)?;
        let packets = comm.register(packets)?;

        let mut channels = Vec::new();
        let mut handles = vec![MemoryChannelDeviceHandle::default(); ranks];
        let mut semaphores = Vec::new();
        let blocks = config.hb_blocks as usize;
        let mut semaphore_handles = vec![SemaphoreDeviceHandle::default(); ranks * blocks];
        for peer in (0..ranks).filter(|&p| p != rank) {
            let channel = comm.memory_channel(peer, &scratch, Some(&packets), MemoryChannelConfig::default())?;
            handles[peer] = channel.device_handle();
            channels.push(channel);
            for b in 0..blocks {
                let s = comm.semaphore(peer, None)?;
                semaphore_handles[peer * blocks + b] = s.device_handle();
                semaphores.push(s);
            }
        }
        let device = comm.device();
        let table = |bytes: usize| DeviceMemory::alloc(device, bytes.max(1), AllocKind::Legacy).map_err(gpu);
        let channel_table = table(size_of_val(handles.as_slice()))?;
        channel_table.write_pod(0, &handles).map_err(gpu)?;
        let semaphore_table = table(size_of_val(semaphore_handles.as_slice()))?;
        semaphore_table.write_pod(0, &semaphore_handles).map_err(gpu)?;
        let ll_flags = table(4 * config.ll_blocks as usize)?;
        ll_flags.fill(0, ll_flags.len(), 0).map_err(gpu)?;
        comm.barrier()?;
        Ok(Self {
            comm: comm.clone(),
            library: KernelLibrary::new(comm.env().cache_dir.clone()),
            config,
            kernels: Mutex::default(),
            scratch,
            channel_table,
            semaphore_table,
            ll_flags,
            layout,
            _channels: channels,
            _semaphores: semaphores,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &AllReduceConfig {
        &self.config
    }

    /// Compiles (or reads from the cache) and loads the kernels of `(dtype, op)`. Calls do this
    /// on first use; call it before capturing a CUDA graph to keep compilation out of capture.
    pub fn prepare(&self, dtype: DataType, op: ReduceOp) -> Result<(), CollError> {
        self.kernels_for(dtype, op).map(|_| ())
    }

    fn kernels_for(&self, dtype: DataType, op: ReduceOp) -> Result<Arc<Kernels>, CollError> {
        let rank = self.comm.rank();
        let gpu = |source| CollError::Gpu { rank, source };
        // Entries are inserted whole; a poisoned map is still consistent.
        let mut map = self.kernels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = map.get(&(dtype, op)) {
            return Ok(Arc::clone(k));
        }
        let defines = [format!("WEFT_DTYPE={}", dtype as u32), format!("WEFT_REDOP={}", op as u32)];
        let loaded = self.library.load_with(self.comm.device(), "allreduce.cu", &defines).map_err(gpu)?;
        let kernels = Arc::new(Kernels {
            ll: loaded.module.kernel("weft_allreduce_ll").map_err(gpu)?,
            ll2: loaded.module.kernel("weft_allreduce_ll2").map_err(gpu)?,
            hb: loaded.module.kernel("weft_allreduce_hb").map_err(gpu)?,
        });
        map.insert((dtype, op), Arc::clone(&kernels));
        Ok(kernels)
    }

    /// Enqueues an AllReduce of `count` elements of `dtype` from `send` into `recv` (they may be
    /// equal: in place) on `stream`, and returns the algorithm used. No host synchronisation,
    /// no allocation once the `(dtype, op)` kernels are loaded: capturable in a CUDA graph.
    /// Invalid arguments return an error and enqueue nothing.
    ///
    /// # Safety
    /// `send` and `recv` must stay valid device memory of this rank's GPU for `count` elements
    /// until the work enqueued on `stream` has finished, and every rank must make the matching
    /// call (same count, dtype, op) in the same order.
    pub unsafe fn all_reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<AllReduceAlgorithm, CollError> {
        let rank = self.comm.rank();
        let invalid = |detail: String| CollError::InvalidArgument { rank, detail };
        let bytes = count.checked_mul(dtype.size()).ok_or_else(|| invalid(format!("count {count} overflows")))?;
        if stream.device().ordinal() != self.comm.device().ordinal() {
            return Err(invalid("stream belongs to another GPU".into()));
        }
        let algorithm = self.config.select(bytes);
        if bytes == 0 {
            return Ok(algorithm);
        }
        let device = self.comm.device();
        for (what, ptr) in [("send", send), ("recv", recv)] {
            weft_gpu::check_device_range(device, ptr, bytes).map_err(|e| invalid(format!("{what} buffer: {e}")))?;
        }
        let both_ways = send < recv + bytes as u64 && recv < send + bytes as u64;
        if both_ways && send != recv {
            return Err(invalid("send and recv overlap without being the same buffer".into()));
        }
        let limit = match algorithm {
            AllReduceAlgorithm::OneShotLl => self.config.ll_max_bytes,
            AllReduceAlgorithm::TwoShotLl => self.config.ll2_max_bytes,
            AllReduceAlgorithm::TwoShotHb => usize::MAX,
        };
        if bytes > limit {
            return Err(invalid(format!("{bytes} bytes exceed the {} limit of {limit}", algorithm.name())));
        }
        let kernels = self.kernels_for(dtype, op)?;
        let ranks = self.comm.world_size() as u32;
        let mut args = KernelArgs::new();
        args.push(send).push(recv).push(bytes as u64).push(self.channel_table.ptr());
        let (kernel, config) = match algorithm {
            AllReduceAlgorithm::OneShotLl | AllReduceAlgorithm::TwoShotLl => {
                let (kernel, slot) = if algorithm == AllReduceAlgorithm::OneShotLl {
                    (&kernels.ll, self.layout.slot_bytes)
                } else {
                    (&kernels.ll2, self.layout.slot2_bytes)
                };
                args.push(rank as u32).push(ranks).push(self.ll_flags.ptr()).push(self.layout.half_bytes).push(slot);
                (kernel, LaunchConfig { grid: self.config.ll_blocks, block: self.config.ll_threads, shared_bytes: 0 })
            }
            AllReduceAlgorithm::TwoShotHb => {
                args.push(self.semaphore_table.ptr())
                    .push(self.scratch.ptr())
                    .push(self.config.chunk_bytes as u64)
                    .push(rank as u32)
                    .push(ranks);
                (
                    &kernels.hb,
                    LaunchConfig { grid: self.config.hb_blocks, block: self.config.hb_threads, shared_bytes: 0 },
                )
            }
        };
        // SAFETY: the arguments match weft_allreduce_ll / _ll2 (input, output, bytes, channels,
        // rank, ranks, flags, half bytes, slot bytes) and weft_allreduce_hb (input, output, bytes, channels,
        // semaphores, scratch, chunk bytes, rank, ranks); tables, scratch, packets and flags live
        // as long as `self`, which the caller keeps while the stream runs; user buffers are the
        // caller's contract and were range-checked above.
        unsafe { kernel.launch(stream, config, &args) }.map_err(|source| CollError::Gpu { rank, source })?;
        Ok(algorithm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_and_overrides() {
        let mut c = AllReduceConfig::default();
        c.ll2_max_bytes = 4 * c.ll_max_bytes;
        assert_eq!(c.select(1024), AllReduceAlgorithm::OneShotLl);
        assert_eq!(c.select(c.ll_max_bytes + 1), AllReduceAlgorithm::TwoShotLl);
        c.ll2_max_bytes = c.ll_max_bytes;
        assert_eq!(c.select(c.ll_max_bytes + 1), AllReduceAlgorithm::TwoShotHb);
        let forced = AllReduceConfig::from_lookup(|k| (k == "WEFT_ALGO_ALLREDUCE").then(|| "hb".to_string())).unwrap();
        assert_eq!(forced.select(8), AllReduceAlgorithm::TwoShotHb);
        assert!(AllReduceConfig::from_lookup(|k| (k == "WEFT_ALGO_ALLREDUCE").then(|| "ring".to_string())).is_err());
        assert!(AllReduceConfig::from_lookup(|k| (k == "WEFT_ALLREDUCE_LL_MAX").then(|| "0".to_string())).is_err());
        let layout = PacketLayout::new(&AllReduceConfig { ll2_max_bytes: 2 << 20, ..AllReduceConfig::default() }, 4);
        // Both kernels' regions fit one half.
        assert!(layout.half_bytes >= 4 * layout.slot_bytes && layout.half_bytes >= 8 * layout.slot2_bytes);
        assert!(layout.slot2_bytes >= ((2u64 << 20) / 4).div_ceil(8) * 16);
    }
}

//! The table of every environment variable weft reads: the one source of their names, types,
//! defaults, meanings and owners. [`super::Env`] reads them (the layers at or above weft-core
//! look their values up with a [`Variable`] of this table, never by a name of their own), and
//! `docs/env.md` is generated from it ([`super::reference_markdown`]).
//!
//! weft-gpu and weft-bootstrap sit below weft-core and read their own variables where they are
//! needed (CUDA's location before anything else starts, torchrun's launch variables); they are
//! listed here all the same, with their owner, so the reference is complete.

/// What a variable holds: the reference's type column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarType {
    /// Seconds, fractions allowed.
    Seconds,
    /// Microseconds, fractions allowed.
    Microseconds,
    /// GB/s (10^9 bytes per second).
    GbPerSecond,
    /// A size in bytes.
    Bytes,
    /// A whole number.
    Count,
    /// `1` or `0`.
    Flag,
    /// A file or folder.
    Path,
    /// One of a few words (listed in the meaning).
    Choice,
    /// A comma-separated list.
    List,
    /// An IP address.
    Ip,
    /// A `tracing` filter (`warn`, `debug`, `weft_coll=info`, ...).
    LogFilter,
    /// Free text.
    Text,
}

impl VarType {
    /// The type column's words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Seconds => "seconds",
            Self::Microseconds => "µs",
            Self::GbPerSecond => "GB/s",
            Self::Bytes => "bytes",
            Self::Count => "count",
            Self::Flag => "`1`/`0`",
            Self::Path => "path",
            Self::Choice => "choice",
            Self::List => "list",
            Self::Ip => "IP",
            Self::LogFilter => "log filter",
            Self::Text => "text",
        }
    }
}

/// Who a variable is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Configuration of the library (or the `weft` command) a user may set.
    Config,
    /// The test suites and CI: turn a declared skip into a failure, or point at a tool.
    Test,
    /// Set by the `weft` command for its own child processes (worker options as JSON, the
    /// report folder); never set by hand. weft-cli reads these itself: they carry no
    /// configuration, only the parent's instructions to its workers.
    Internal,
}

/// One environment variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// What it holds.
    pub ty: VarType,
    /// Who it is for.
    pub scope: Scope,
    /// The crate that parses it.
    pub owner: &'static str,
    /// What applies when it is unset.
    pub default: &'static str,
    /// What it does (Markdown).
    pub meaning: &'static str,
}

/// Declares each variable once, as a constant named after it, and the table [`ALL`] of them in
/// the order given.
macro_rules! variables {
    ($($name:ident: $ty:ident, $scope:ident, $owner:literal, default $default:literal, $meaning:literal;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: ", $meaning)]
            pub const $name: Variable = Variable {
                name: stringify!($name),
                ty: VarType::$ty,
                scope: Scope::$scope,
                owner: $owner,
                default: $default,
                meaning: $meaning,
            };
        )*
        /// Every variable, grouped by owner from the lowest layer up.
        pub const ALL: &[Variable] = &[$($name),*];
    };
}

variables! {
    WEFT_CUDA_HOME: Path, Config, "weft-gpu", default "unset",
        "CUDA installation searched first for the driver, NVRTC and the CUDA headers";
    CUDA_HOME: Path, Config, "weft-gpu", default "unset",
        "CUDA installation searched after `WEFT_CUDA_HOME`";
    CUDA_PATH: Path, Config, "weft-gpu", default "unset",
        "CUDA installation searched after `CUDA_HOME` (then `/usr/local/cuda`, the repository's `.deps/cuda13` and the `nvidia/cu13` folders of known Python installations)";
    VIRTUAL_ENV: Path, Config, "weft-gpu", default "unset",
        "a Python virtual environment whose `nvidia/cu13` wheels (NVRTC, headers) are searched";
    XDG_CACHE_HOME: Path, Config, "weft-gpu", default "`~/.cache`",
        "parent of the default NVRTC cache folder `weft`";
    HOME: Path, Config, "weft-gpu", default "set by the system",
        "home folder: `~/.cache/weft` and the `~/.local` Python packages";
    RANK: Count, Config, "weft-bootstrap", default "unset: not a torchrun job",
        "torchrun's global rank of this process, below `WORLD_SIZE`";
    WORLD_SIZE: Count, Config, "weft-bootstrap", default "unset: not a torchrun job",
        "torchrun's number of processes in the job";
    LOCAL_RANK: Count, Config, "weft-bootstrap", default "unset",
        "torchrun's index of this process on its host";
    MASTER_ADDR: Text, Config, "weft-bootstrap", default "unset: not a torchrun job",
        "host name or IP of rank 0, which hosts the rendezvous";
    MASTER_PORT: Count, Config, "weft-bootstrap", default "unset: not a torchrun job",
        "port of rank 0's rendezvous, 1 to 65535";
    WEFT_BOOTSTRAP_TIMEOUT: Seconds, Config, "weft-bootstrap", default "`30`",
        "bound of every rendezvous step; a builder's explicit timeout wins";
    WEFT_BOOTSTRAP_SECRET: Text, Config, "weft-bootstrap", default "derived from `MASTER_ADDR:MASTER_PORT` (trusted clusters only)",
        "the job's rendezvous secret, 64 hex digits, the same on every rank";
    WEFT_TIMEOUT: Seconds, Config, "weft-core", default "`5`",
        "bound of every device-side wait, up to 86400";
    WEFT_CACHE_DIR: Path, Config, "weft-core", default "`$XDG_CACHE_HOME/weft` or `~/.cache/weft` (the NVRTC tests: a fresh temporary folder)",
        "folder of the NVRTC kernel cache";
    WEFT_TRACE: Path, Config, "weft-core", default "unset: no tracing",
        "record device timestamps at the phase boundaries of the collective and EP kernels (their traced variants, compiled on first use) and write them as a Chrome/Perfetto trace to this file when the collectives or the EP buffer are dropped; `{rank}` in the path becomes the rank, else with several ranks `.rank<r>` goes before the extension (docs/trace.md)";
    WEFT_TRACE_SAMPLE: Count, Config, "weft-core", default "`1`: every call",
        "with `WEFT_TRACE`: record the calls of each kernel whose number is a multiple of this";
    WEFT_TRACE_RECORDS: Count, Config, "weft-core", default "`1048576` (24 MiB)",
        "with `WEFT_TRACE`: records the device ring keeps (24 bytes each); older ones are overwritten and counted in the trace";
    WEFT_ALLOC: Choice, Config, "weft-core", default "`auto`",
        "device memory kind: `vmm`, `legacy` or `auto`";
    WEFT_RANKS_PER_NODE: Count, Config, "weft-core", default "unset: one node per host",
        "split each host's ranks into virtual nodes of this many (in rank order); peers in other virtual nodes get no peer mappings, as if on another host: PortChannels reach them over the network transport, collectives run AllReduce `port_ring` only";
    WEFT_SHARE_GPUS: Flag, Config, "weft-core", default "`0`",
        "`1`: ranks of one node may share a GPU, to check multi-rank code on fewer GPUs (grids shrink so every sharing rank's kernels are resident at once; launches settle with the other ranks first; timings mean nothing; see docs/shared-gpu.md)";
    WEFT_EMU_NET_LATENCY_US: Microseconds, Config, "weft-core", default "unset: no emulation",
        "emulated NIC between virtual nodes: latency α added to every message of a PortChannel to a peer in another virtual node (which then goes through the copy engine, paced, instead of the network transport)";
    WEFT_EMU_NET_GBPS: GbPerSecond, Config, "weft-core", default "unset: uncapped",
        "emulated NIC: bandwidth cap β per GPU; setting either `WEFT_EMU_NET_*` variable turns the emulation on";
    WEFT_NET: Choice, Config, "weft-core", default "`tcp`",
        "how PortChannels reach peers of other (virtual) nodes that the emulated NIC does not: `tcp`; `ib` (InfiniBand verbs through rdma-core's libibverbs; needs weft-net's `ib` feature, which the `weft` command has); `soft-ib` (the same verbs transport over a software RC fabric joining the ranks of one process, through staged copies: for testing the path without a NIC)";
    CUDA_DEVICE_MAX_CONNECTIONS: Count, Config, "weft-core", default "CUDA's `8`; the `weft` command sets `32`",
        "CUDA's hardware work queues, read when CUDA starts; weft wants 32 so a proxy's copy never queues behind a spinning kernel (`weft_core::cuda_queues_ok`); a program embedding weft should set it before CUDA starts";
    WEFT_EMU_NET_CHAOS: Count, Config, "weft-net", default "unset: in order",
        "emulated NIC: a seed (a whole number) that makes it deliver a connection's operations out of order, each delayed by a further pseudo-random amount of up to 4α (at least 20 µs), the same for the same seed; the proxy still puts every signal after the data before it (docs/proxy.md, \"Chaos\"); needs the emulation on";
    WEFT_PROXY_FIFOS: Count, Config, "weft-net", default "`1`",
        "FIFOs of each rank's PortChannel proxy (GIN's proxy peers and the collectives across nodes included), 1 to 16: channels are dealt over them in the order they are opened, so kernels pushing on different channels contend on different FIFO heads; a channel's commands stay in its one FIFO, in order";
    WEFT_PROXY_THREADS: Count, Config, "weft-net", default "`1`",
        "threads of each rank's PortChannel proxy, 1 to `WEFT_PROXY_FIFOS`: each owns a fixed set of the FIFOs (FIFO i goes to thread i mod threads) and so of the channels dealt to them";
    WEFT_IB_DEVICE: Text, Config, "weft-net", default "the NIC nearest the rank's GPU on the PCI tree (ties spread by GPU ordinal)",
        "the RDMA device for `WEFT_NET=ib`, e.g. `mlx5_0`";
    WEFT_IB_PORT: Count, Config, "weft-net", default "the device's first active port",
        "the RDMA port for `WEFT_NET=ib`";
    WEFT_IB_GID_INDEX: Count, Config, "weft-net", default "on RoCE the first RoCE v2 GID with an IPv4 address, else `0`",
        "the GID index for `WEFT_NET=ib`";
    WEFT_IBVERBS_LIB: Path, Config, "weft-net", default "`libibverbs.so.1` through the dynamic linker's search",
        "the libibverbs to load for `WEFT_NET=ib`";
    WEFT_ALGO_ALLREDUCE: Choice, Config, "weft-coll", default "`auto`",
        "force an AllReduce algorithm: `ll`, `ll2`, `ll128` (the two-shot in LL128 lines; NVLink peers), `hb`, `ring`, `port_allpairs`, `port_ring`, `nvrar`, `2ph` (the four natives that also reach peers of other nodes; `nvrar` and `2ph` need nodes of equal size), an execution plan `plan:<name>` (e.g. `plan:ring_allreduce`; across nodes `plan:nvrar_allreduce`, `plan:hier2ph_allreduce` or another plan whose memory channels stay within nodes) or `auto`";
    WEFT_ALGO_ALLGATHER: Choice, Config, "weft-coll", default "`auto`",
        "force an AllGather algorithm: `ll`, `ll128` (LL128 lines; NVLink peers), `hb`, an execution plan `plan:<name>` or `auto`";
    WEFT_ALGO_REDUCESCATTER: Choice, Config, "weft-coll", default "`auto`",
        "force a ReduceScatter algorithm: `ll`, `ll128` (LL128 lines; NVLink peers), `hb`, an execution plan `plan:<name>` or `auto`";
    WEFT_ALGO_BROADCAST: Choice, Config, "weft-coll", default "`auto`",
        "force a Broadcast algorithm: `ll`, `hb`, `chain`, `ll128` (the chain in LL128 lines; NVLink peers), an execution plan `plan:<name>` or `auto`";
    WEFT_ALGO_REDUCE: Choice, Config, "weft-coll", default "`auto`",
        "force a Reduce algorithm: `ll`, `hb`, `chain`, `ll128` (the chain in LL128 lines; NVLink peers), an execution plan `plan:<name>` or `auto`";
    WEFT_ALGO_ALLTOALL: Choice, Config, "weft-coll", default "`auto`",
        "force an AllToAll algorithm: `p2p`, `ll` (blocks up to `WEFT_P2P_LL_BYTES` over LL packets), an execution plan `plan:<name>` or `auto` (`ll` when small, `p2p` above, unless a tuning table says otherwise)";
    WEFT_ALGO_SENDRECV: Choice, Config, "weft-coll", default "`auto`",
        "force a send/receive algorithm: `p2p`, `ll` (messages up to `WEFT_P2P_LL_BYTES` over LL packets, larger ones through scratch) or `auto` (`ll` unless a tuning table says otherwise)";
    WEFT_PLAN_DIR: Path, Config, "weft-coll", default "unset",
        "folder of user execution plans (`*.json`, as `weft plan compile` writes them), each an algorithm `plan:<name>` of its collective; a bad file is an error naming it";
    WEFT_TUNING_FILE: Path, Config, "weft-coll", default "built-in",
        "JSON tuning table (`weft tune` writes one) replacing the size thresholds and, unless `WEFT_HB_BLOCKS` is set, the HB block count";
    WEFT_LL_BLOCKS: Count, Config, "weft-coll", default "`64`",
        "blocks of every LL16 launch, up to 1024";
    WEFT_LL128_BLOCKS: Count, Config, "weft-coll", default "`128`",
        "blocks of every LL128 launch (`ll128`), up to 1024; the LL128 launches have flags and tokens of their own, so their grid is independent of the LL16 one";
    WEFT_HB_BLOCKS: Count, Config, "weft-coll", default "`128`",
        "blocks of every HB launch, up to 1024";
    WEFT_PLAN_REPLICAS: Count, Config, "weft-coll", default "as many as the SMs hold",
        "replicas of every thread block of an execution plan, each moving a slice of every chunk, up to 1024";
    WEFT_PLAN_SLICE_BYTES: Bytes, Config, "weft-coll", default "`2048`",
        "a plan launch runs one replica of each thread block per this many bytes of its largest chunk, up to the replicas set up (at least 262144 for plans with port links); `0`: all of them at every size (plans with plan barriers always run all)";
    WEFT_PLAN_SPECIALIZE: Flag, Config, "weft-coll", default "`1`",
        "`1`: compile each rank's plan operations into its own executor kernel (straight-line code per operation, compiled on first use per plan, rank, type and operator, cached on disk); `0`: run them on the one interpreter kernel every plan shares";
    WEFT_PORT_RING_BLOCKS: Count, Config, "weft-coll", default "`32`",
        "worker blocks of an AllReduce `port_ring` launch, 1 to 64 (the launch adds its driver block)";
    WEFT_PORT_RING_CHANNELS: Count, Config, "weft-coll", default "`2`; `4` when the ring crosses TCP",
        "PortChannels per ring edge of `port_ring`, 1 to 16: a large step crosses in pieces of at least 512 KiB, at most one per channel";
    WEFT_ZERO_COPY_ALLREDUCE: Bytes, Config, "weft-coll", default "`268435456`",
        "largest CUDA-graph-captured HB AllReduce that writes straight into the peers' registered outputs; `0`: never";
    WEFT_ZERO_COPY_ALLGATHER: Bytes, Config, "weft-coll", default "`67108864`",
        "largest CUDA-graph-captured HB AllGather that writes straight into the peers' registered outputs; `0`: never";
    WEFT_ZERO_COPY_PLAN_MIN: Bytes, Config, "weft-coll", default "`0`",
        "smallest plan launch that runs zero-copy on registered windows; `0`: always";
    WEFT_DIRECT_ALLREDUCE: Flag, Config, "weft-coll", default "`1`",
        "`1`: a zero-copy HB AllReduce whose inputs are mapped too (windows, or a CUDA-graph-captured call's agreement) reads the peers' inputs in place (two barriers, no scratch); `0`: through the scratch";
    WEFT_DIRECT_ALLREDUCE_MAX: Bytes, Config, "weft-coll", default "`67108864`",
        "largest AllReduce that reads the peers' inputs in place when `WEFT_DIRECT_ALLREDUCE` allows it; larger ones push through the scratch (faster from 256 MB on a 2-GPU NVLink machine)";
    WEFT_DIRECT_REDUCE_MIN: Bytes, Config, "weft-coll", default "`16777216`",
        "smallest Reduce on two NVLink-connected ranks taken by `chain` (or by an unforced `ll128`) that runs direct when every rank's input is mapped (windows, or a CUDA-graph-captured call's agreement): the root pulls the peers' inputs straight through NVLink between two barriers; a size above any message: never";
    WEFT_DIRECT_REDUCE_SCATTER_MAX: Bytes, Config, "weft-coll", default "every size",
        "largest ReduceScatter (input bytes) on NVLink-connected ranks taken by `hb` that runs direct when every rank's input is mapped (windows, or a CUDA-graph-captured call's agreement): rank r pulls block r of every input straight through NVLink between two barriers; `0`: never";
    WEFT_EARLY_LAUNCH: Flag, Config, "weft-coll", default "`1`",
        "`1`: LL kernels (and weft-ep's low-latency kernels) are launched as programmatic dependents (they may be scheduled while the previous kernel on the stream finishes, and wait for it on the GPU before touching memory); `0`: plain stream order";
    WEFT_CHECK_CALLS: Flag, Config, "weft-coll", default "`0`",
        "`1`: before each collective (grouped send/receive aside) the ranks exchange the call on the host and compare collective, type, operator, count, root and AllToAll(v) bytes per peer; a mismatch is an error naming both calls on every rank and nothing is launched (one bootstrap all-gather per call: for debugging; a CUDA graph is checked at capture)";
    WEFT_CHUNK_BYTES: Bytes, Config, "weft-coll", default "`33554432`",
        "bytes per HB round, up to 1 GiB; the scratch is twice this";
    WEFT_LL_SLOT_BYTES: Bytes, Config, "weft-coll", default "`524288`",
        "payload one rank sends one peer per LL launch, up to 16 MiB; sizes the packet buffer: 16 x ranks x this per rank, half of it LL16 packets and half LL128 lines (`ll128` carries 15/8 of it per sender)";
    WEFT_P2P_LL_BYTES: Bytes, Config, "weft-coll", default "`262144`",
        "largest message of one direction (an AllToAll block, a send) that AllToAll and send/receive `ll` carry over LL packets, up to 16 MiB; larger ones go through scratch with credits; sizes the pairs' packet slots (4 x ranks x this per rank); `0`: none";
    WEFT_P2P_WIDE_BYTES: Bytes, Config, "weft-coll", default "`1073741824`",
        "smallest direction of a send/receive or AllToAll through scratch (`p2p`) that runs on twice the blocks (64 instead of 32 at 2 ranks: a 1 GB send 1.3% faster on a 2×H200 machine; an AllToAll whose directions are wide, with its local copy, needs more blocks than the SMs hold and is slower); `0`: never";
    WEFT_NCCL_LIB: Path, Config, "weft-coll", default "the dynamic linker's search for `libnccl.so.2`",
        "the real NCCL that `weft bench --nccl` measures against";
    WEFT_NCCL_FALLBACK_LIB: Path, Config, "weft-nccl", default "unset: no fallback",
        "the real `libnccl.so.2` behind weft's own, loaded with `RTLD_DEEPBIND`; every communicator also gets one of its communicators at init";
    WEFT_NCCL_FORCE_FALLBACK: List, Config, "weft-nccl", default "empty",
        "calls weft's `libnccl.so.2` sends to the fallback even when weft can run them: `allreduce`, `allgather`, `reducescatter`, `broadcast`, `reduce`, `alltoall`, `gather`, `scatter`, `sendrecv`, `devcomm` (the device API: `ncclDevCommCreate` and the calls that name a communicator), or `all`";
    WEFT_NCCL_ROOT_IP: Ip, Config, "weft-nccl", default "the address of the default route's interface, else `127.0.0.1`",
        "IP that weft's `ncclGetUniqueId` advertises for rank 0's rendezvous";
    WEFT_NCCL_LOG: LogFilter, Config, "weft-nccl", default "unset: `WEFT_LOG`",
        "filter of weft-nccl's stderr log: at `debug` every call says whether weft or the fallback ran it, at `info` the `ncclConfig_t` hints weft ignores (once per process) and the block limits it applies";
    WEFT_LOG: LogFilter, Config, "weft-cli", default "`warn` (`weft`); unset (weft-nccl)",
        "filter of the `weft` command's log and, unless `WEFT_NCCL_LOG` is set, weft-nccl's";
    WEFT_BENCH_START_LINE: Flag, Config, "weft-cli", default "`1`",
        "`1`: every timed bracket of `weft bench` (collectives, EP) and `weft tune` opens on the GPU behind an untimed one-element AllReduce, so it holds none of the skew between the ranks' exits from the host barrier; `0`: right after the host barrier (how earlier builds timed, to measure that skew)";
    WEFT_SELFTEST_TYPES: List, Config, "weft-cli", default "every type",
        "element types of `weft selftest`'s collective and plan matrices (`bf16,f32,i8`), for a shorter run";
    NCCL_P2P_DISABLE: Flag, Config, "weft-cli", default "unset",
        "NCCL's own; `weft bench --nccl` with virtual nodes (`WEFT_RANKS_PER_NODE`) sets it to `1` for its workers, with `NCCL_SHM_DISABLE=1` and `NCCL_NET`, so NCCL crosses the network as weft's nodes do, unless the user set any of the three";
    NCCL_SHM_DISABLE: Flag, Config, "weft-cli", default "unset",
        "NCCL's own; set to `1` by `weft bench --nccl` with virtual nodes, as `NCCL_P2P_DISABLE`";
    NCCL_NET: Choice, Config, "weft-cli", default "unset",
        "NCCL's own; set by `weft bench --nccl` with virtual nodes to `Socket`, or `IB` under `WEFT_NET=ib`, as `NCCL_P2P_DISABLE`";
    WEFT_REQUIRE_NVRTC: Flag, Test, "weft-core", default "`0`",
        "`1`: the NVRTC compile tests (and `weft selftest`'s CPU part) fail when NVRTC is missing instead of skipping";
    WEFT_REQUIRE_IBVERBS: Flag, Test, "weft-net", default "`0`",
        "`1`: the verbs binding tests fail when `WEFT_IBVERBS_ROOT` is unset instead of skipping";
    WEFT_IBVERBS_ROOT: Path, Test, "weft-net", default "unset: those tests skip",
        "rdma-core's headers and libraries (`scripts/ibverbs.sh` prints it) for the verbs binding tests";
    WEFT_REQUIRE_CC: Flag, Test, "weft-nccl", default "`0`",
        "`1`: the C ABI tests fail when gcc or `nccl.h` is missing instead of skipping";
    WEFT_NCCL_HEADER_DIR: Path, Test, "weft-nccl", default "unset: those tests skip",
        "folder of the real `nccl.h` (`scripts/nccl-header.sh` prints it) for the C ABI tests";
    WEFT_REQUIRE_GPU: Flag, Test, "weft", default "`0`",
        "`1`: the GPU examples fail when no GPU is usable instead of skipping";
    WEFT_KEEP_PLOT: Flag, Test, "weft-cli", default "unset",
        "set: the plot test keeps the PNGs it drew";
    WEFT_REPORT_DIR: Path, Internal, "weft-cli", default "unset",
        "folder where each rank the `weft` command launched writes its report; its presence marks such a rank";
    WEFT_BENCH_OPTIONS: Text, Internal, "weft-cli", default "unset",
        "`weft bench`'s options for its worker ranks (JSON)";
    WEFT_BENCH_PROXY_OPTIONS: Text, Internal, "weft-cli", default "unset",
        "`weft bench proxy`'s options for its worker ranks (JSON)";
    WEFT_TUNE_OPTIONS: Text, Internal, "weft-cli", default "unset",
        "`weft tune`'s options for its worker ranks (JSON)";
    WEFT_SELFTEST_ONLY: List, Internal, "weft-cli", default "unset",
        "the steps a `weft selftest` worker runs";
    WEFT_SELFTEST_GPUS: Count, Internal, "weft-cli", default "unset",
        "the GPUs a `weft selftest` worker's ranks are spread over, round-robin";
    WEFT_SOAK_OPTIONS: Text, Internal, "weft-cli", default "unset",
        "`weft soak`'s options for its worker ranks (JSON)";
    WEFT_SOAK_GPUS: Count, Internal, "weft-cli", default "unset",
        "the GPUs a `weft soak` worker's ranks are spread over, round-robin";
}

//! Every `WEFT_*` environment variable, read once into one typed struct. Explicit builder calls
//! override these defaults.
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `WEFT_TIMEOUT` | bound of every device-side wait, in seconds (fractions allowed) | `5` |
//! | `WEFT_BOOTSTRAP_TIMEOUT` | bound of every rendezvous step, in seconds (read by weft-bootstrap) | `30` |
//! | `WEFT_CACHE_DIR` | folder of the NVRTC kernel cache | `$XDG_CACHE_HOME/weft` or `~/.cache/weft` |
//! | `WEFT_CUDA_HOME` | CUDA installation searched first for NVRTC and headers (read by weft-gpu) | unset |
//! | `WEFT_ALLOC` | device memory kind: `vmm`, `legacy` or `auto` | `auto` |
//! | `WEFT_RANKS_PER_NODE` | split each host's ranks into virtual nodes of this many (in rank order); peers in other virtual nodes get no peer mappings, as if on another host: PortChannels reach them over TCP, collectives run AllReduce `port_ring` only | unset: one node per host |
//! | `WEFT_SHARE_GPUS` | `1`: ranks of one node may share a GPU, to check multi-rank code on fewer GPUs (grids shrink so every sharing rank's kernels are resident at once; launches settle with the other ranks first; timings mean nothing; see docs/shared-gpu.md) | `0` |
//! | `WEFT_ALGO_<COLLECTIVE>` | force an algorithm of `ALLREDUCE`, `ALLGATHER`, `REDUCESCATTER`, `BROADCAST`, `REDUCE`, `ALLTOALL`, `SENDRECV`: `ll`, `ll2`, `hb`, `ring`, `port_ring` (all-reduce; `port_ring` never by size), `p2p`, an execution plan `plan:<name>` (e.g. `plan:ring_allreduce`) or `auto` (read by weft-coll) | `auto` |
//! | `WEFT_PLAN_DIR` | folder of user execution plans (`*.json`, as `weft plan compile` writes them), each an algorithm `plan:<name>` of its collective; a bad file is an error naming it (weft-coll) | unset |
//! | `WEFT_EMU_NET_LATENCY_US` | emulated NIC between virtual nodes: latency α added to every message of a PortChannel to a peer in another virtual node (which then goes through the copy engine, paced, instead of TCP), in microseconds | unset: no emulation |
//! | `WEFT_EMU_NET_GBPS` | emulated NIC: bandwidth cap β per GPU in GB/s (10^9 bytes/s); setting either variable turns the emulation on | unset: uncapped |
//! | `WEFT_NET` | how PortChannels reach peers of other (virtual) nodes that the emulated NIC does not: `tcp`; `ib` (InfiniBand verbs through rdma-core's libibverbs; needs the `ib` feature, which the `weft` command has); `soft-ib` (the same verbs transport over a software RC fabric joining the ranks of one process, through staged copies: for testing the path without a NIC) | `tcp` |
//! | `WEFT_IB_DEVICE`, `WEFT_IB_PORT`, `WEFT_IB_GID_INDEX` | the RDMA device (e.g. `mlx5_0`), its port and GID index for `WEFT_NET=ib` | from sysfs: the NIC nearest the rank's GPU on the PCI tree (ties spread by GPU ordinal), its first active port, on RoCE its first RoCE v2 GID with an IPv4 address (else `0`) |
//! | `WEFT_IBVERBS_LIB` | the `libibverbs.so.1` to load for `WEFT_NET=ib` | the dynamic linker's search |
//! | `WEFT_TUNING_FILE` | JSON tuning table (`weft tune` writes one) replacing the size thresholds and, unless `WEFT_HB_BLOCKS` is set, the HB block count (weft-coll) | built-in |
//! | `WEFT_LL_BLOCKS`, `WEFT_HB_BLOCKS` | blocks of every LL / HB launch (weft-coll) | `64`, `128` |
//! | `WEFT_PLAN_REPLICAS` | replicas of every thread block of an execution plan, each moving a slice of every chunk (weft-coll) | as many as the SMs hold |
//! | `WEFT_SELFTEST_TYPES` | element types of `weft selftest`'s collective and plan matrices, comma-separated (`bf16,f32,i8`), for a shorter run | every type |
//! | `WEFT_PLAN_SLICE_BYTES` | a plan launch runs one replica of each thread block per this many bytes of its largest chunk, up to the replicas set up (at least 262144 for plans with port links); `0`: all of them at every size (plans with plan barriers always run all) (weft-coll) | `2048` |
//! | `WEFT_PLAN_SPECIALIZE` | `1`: compile each rank's plan operations into its own executor kernel (straight-line code per operation, compiled on first use per plan, rank, type and operator, cached on disk); `0`: run them on the one interpreter kernel every plan shares (weft-coll) | `1` |
//! | `WEFT_PORT_RING_BLOCKS` | worker blocks of an AllReduce `port_ring` launch, 1 to 64 (weft-coll; the launch adds its driver block) | `32` |
//! | `WEFT_PORT_RING_CHANNELS` | PortChannels per ring edge of `port_ring`, 1 to 16: a large step crosses in pieces of at least 512 KiB, at most one per channel (weft-coll) | `2`; `4` when the ring crosses TCP |
//! | `WEFT_ZERO_COPY_ALLREDUCE`, `WEFT_ZERO_COPY_ALLGATHER` | largest CUDA-graph-captured HB AllReduce / AllGather (bytes) that writes straight into the peers' registered outputs; 0: never (weft-coll) | `268435456`, `67108864` |
//! | `WEFT_CHUNK_BYTES` | bytes per HB round; the scratch is twice this (weft-coll) | `33554432` |
//! | `WEFT_LL_SLOT_BYTES` | payload one rank sends one peer per LL launch; sizes the packet buffer (weft-coll) | `524288` |
//! | `WEFT_NCCL_LIB` | `libnccl.so.2` that `weft bench --nccl` measures against | search |
//! | `WEFT_NCCL_FALLBACK_LIB` | the real `libnccl.so.2` behind weft's own (crate weft-nccl), loaded with `RTLD_DEEPBIND` | unset: no fallback |
//! | `WEFT_NCCL_FORCE_FALLBACK` | collectives weft's `libnccl.so.2` sends to the fallback: `allreduce,allgather,...` or `all` (weft-nccl) | empty |
//! | `WEFT_NCCL_ROOT_IP` | IP that weft's `ncclGetUniqueId` advertises for rank 0's rendezvous (weft-nccl) | default-route interface, else `127.0.0.1` |
//! | `WEFT_NCCL_LOG` | `tracing` filter for weft-nccl's stderr log, e.g. `debug` (each call's route), `info` (config hints ignored, block limits) | unset: `WEFT_LOG` |
//! | `WEFT_LOG` | `tracing` filter for the `weft` command's log and, unless `WEFT_NCCL_LOG` is set, weft-nccl's | `warn` (`weft`), unset (weft-nccl) |
//!
//! One CUDA variable matters too: `CUDA_DEVICE_MAX_CONNECTIONS` ([`CUDA_QUEUES_VAR`]), see
//! [`cuda_queues_ok`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use weft_gpu::AllocKind;

use crate::link_model::LinkModel;

/// CUDA's variable for the hardware work queues its streams share: 8 unless set, at most 32,
/// read when the process first initialises CUDA.
pub const CUDA_QUEUES_VAR: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

/// The queue count weft wants: the hardware's 32.
pub const CUDA_QUEUES_WANTED: u32 = 32;

/// Whether [`CUDA_QUEUES_VAR`] gives CUDA at least [`CUDA_QUEUES_WANTED`] hardware queues.
///
/// CUDA starts the work of streams that share a hardware queue in order, whatever their
/// streams. A PortChannel proxy's copy that lands behind a launch queued after a kernel spinning
/// on that copy waits for it: a deadlock, cut by the copy's timeout. The copy-engine transport
/// keeps its streams few (one per peer); more queues make the sharing rarer still (it is gone
/// while the process has fewer streams than queues). The `weft` command sets 32 before CUDA
/// starts, and a program embedding weft should set it too.
pub fn cuda_queues_ok() -> bool {
    std::env::var(CUDA_QUEUES_VAR).ok().and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(8) >= CUDA_QUEUES_WANTED
}

/// How PortChannels reach peers of other (virtual) nodes (`WEFT_NET`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Network {
    /// TCP through pinned host memory.
    #[default]
    Tcp,
    /// InfiniBand verbs through rdma-core.
    Ib,
    /// The verbs transport over the in-process software RC fabric (tests).
    SoftIb,
}

/// A malformed environment variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {expected}")]
pub struct EnvError {
    /// Variable name.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What was expected instead.
    pub expected: &'static str,
}

/// weft's configuration from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Env {
    /// `WEFT_TIMEOUT`: bound of every device-side spin.
    pub device_timeout: Duration,
    /// `WEFT_CACHE_DIR`: NVRTC cache folder.
    pub cache_dir: PathBuf,
    /// `WEFT_ALLOC`: how communication buffers are allocated.
    pub alloc: AllocKind,
    /// `WEFT_RANKS_PER_NODE`: ranks per virtual node (`None`: a node is a host).
    pub ranks_per_node: Option<usize>,
    /// `WEFT_EMU_NET_LATENCY_US` / `WEFT_EMU_NET_GBPS`: the emulated NIC of port channels between
    /// virtual nodes (`None`: not emulated).
    pub emulated_net: Option<LinkModel>,
    /// `WEFT_SHARE_GPUS=1`: ranks of one node may share a GPU. For checking multi-rank code on
    /// fewer GPUs only: the sharing ranks' kernels must all be resident at once (collectives
    /// shrink their grids to fit), and their timings say nothing about a machine with one GPU
    /// per rank.
    pub share_gpus: bool,
    /// `WEFT_NET`: the network transport of PortChannels.
    pub network: Network,
    /// Every `WEFT_*` variable as read, for the layers that own the remaining ones
    /// (collective tuning, the NCCL baseline): they parse them from here, so the process
    /// environment is read once, in one place.
    vars: BTreeMap<String, String>,
}

impl Default for Env {
    fn default() -> Self {
        Self {
            device_timeout: Duration::from_secs(5),
            cache_dir: weft_gpu::default_cache_dir(),
            alloc: AllocKind::Auto,
            ranks_per_node: None,
            emulated_net: None,
            share_gpus: false,
            network: Network::Tcp,
            vars: BTreeMap::new(),
        }
    }
}

impl Env {
    /// Reads every `WEFT_*` variable of the process environment.
    pub fn from_process() -> Result<Self, EnvError> {
        Self::from_vars(std::env::vars().filter(|(k, _)| k.starts_with("WEFT_")))
    }

    /// Builds the configuration from `(name, value)` pairs (tests pass their own).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self, EnvError> {
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        let lookup = |name: &str| vars.get(name).cloned();
        let mut env = Self::default();
        if let Some(value) = lookup("WEFT_TIMEOUT") {
            let seconds: f64 = value.trim().parse().map_err(|_| EnvError {
                name: "WEFT_TIMEOUT",
                value: value.clone(),
                expected: "a positive number of seconds",
            })?;
            if !(seconds > 0.0 && seconds <= 86_400.0) {
                return Err(EnvError { name: "WEFT_TIMEOUT", value, expected: "between 0 and 86400 seconds" });
            }
            env.device_timeout = Duration::from_secs_f64(seconds);
        }
        if let Some(value) = lookup("WEFT_CACHE_DIR").filter(|v| !v.is_empty()) {
            env.cache_dir = PathBuf::from(value);
        }
        if let Some(value) = lookup("WEFT_ALLOC") {
            env.alloc = match value.trim() {
                "vmm" => AllocKind::Vmm,
                "legacy" => AllocKind::Legacy,
                "auto" | "" => AllocKind::Auto,
                _ => return Err(EnvError { name: "WEFT_ALLOC", value, expected: "vmm, legacy or auto" }),
            };
        }
        if let Some(value) = lookup("WEFT_RANKS_PER_NODE").filter(|v| !v.trim().is_empty()) {
            let n = value.trim().parse::<usize>().ok().filter(|&n| n > 0).ok_or(EnvError {
                name: "WEFT_RANKS_PER_NODE",
                value: value.clone(),
                expected: "a positive number of ranks",
            })?;
            env.ranks_per_node = Some(n);
        }
        let number = |name: &'static str| -> Result<Option<f64>, EnvError> {
            let Some(value) = lookup(name).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
            match value.trim().parse::<f64>() {
                Ok(x) if x >= 0.0 && x.is_finite() => Ok(Some(x)),
                _ => Err(EnvError { name, value, expected: "a non-negative number" }),
            }
        };
        let latency = number("WEFT_EMU_NET_LATENCY_US")?;
        let gbps = number("WEFT_EMU_NET_GBPS")?;
        if latency.is_some() || gbps.is_some() {
            env.emulated_net = Some(LinkModel::new(latency.unwrap_or(0.0), gbps));
        }
        if let Some(value) = lookup("WEFT_SHARE_GPUS") {
            env.share_gpus = match value.trim() {
                "1" => true,
                "0" | "" => false,
                _ => return Err(EnvError { name: "WEFT_SHARE_GPUS", value, expected: "1 or 0" }),
            };
        }
        if let Some(value) = lookup("WEFT_NET") {
            env.network = match value.trim() {
                "tcp" | "" => Network::Tcp,
                "ib" => Network::Ib,
                "soft-ib" => Network::SoftIb,
                _ => return Err(EnvError { name: "WEFT_NET", value, expected: "tcp, ib or soft-ib" }),
            };
        }
        env.vars = vars;
        Ok(env)
    }

    /// The value of variable `name` as it was read, for the layers that parse their own.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Env, EnvError> {
        Env::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(env(&[]).unwrap().device_timeout, Duration::from_secs(5));
        let e = env(&[("WEFT_TIMEOUT", "0.25"), ("WEFT_ALLOC", "legacy"), ("WEFT_CACHE_DIR", "/x")]).unwrap();
        assert_eq!(e.device_timeout, Duration::from_millis(250));
        assert_eq!(e.alloc, AllocKind::Legacy);
        assert_eq!(e.cache_dir, PathBuf::from("/x"));
        assert_eq!(e.var("WEFT_ALLOC"), Some("legacy"));
        assert_eq!(e.var("WEFT_NOT_SET"), None);
        assert_eq!(e.ranks_per_node, None);
        assert_eq!(env(&[("WEFT_RANKS_PER_NODE", "2")]).unwrap().ranks_per_node, Some(2));
        assert_eq!(e.emulated_net, None);
        assert!(!e.share_gpus);
        assert!(env(&[("WEFT_SHARE_GPUS", "1")]).unwrap().share_gpus);
        assert_eq!(e.network, Network::Tcp);
        assert_eq!(env(&[("WEFT_NET", "ib")]).unwrap().network, Network::Ib);
        assert_eq!(env(&[("WEFT_NET", "soft-ib")]).unwrap().network, Network::SoftIb);
        let net = env(&[("WEFT_EMU_NET_LATENCY_US", "5"), ("WEFT_EMU_NET_GBPS", "25")]).unwrap().emulated_net;
        assert_eq!(net, Some(LinkModel::new(5.0, Some(25.0))));
        let latency_only = env(&[("WEFT_EMU_NET_LATENCY_US", "2.5")]).unwrap().emulated_net.unwrap();
        assert_eq!(latency_only.bytes_per_second, None);
        assert_eq!(latency_only.latency, Duration::from_nanos(2500));
    }

    #[test]
    fn malformed_values_name_the_variable() {
        for (k, v) in [
            ("WEFT_TIMEOUT", "soon"),
            ("WEFT_TIMEOUT", "0"),
            ("WEFT_TIMEOUT", "-1"),
            ("WEFT_ALLOC", "huge"),
            ("WEFT_RANKS_PER_NODE", "0"),
            ("WEFT_RANKS_PER_NODE", "two"),
            ("WEFT_SHARE_GPUS", "yes"),
            ("WEFT_NET", "rdma"),
            ("WEFT_EMU_NET_LATENCY_US", "-3"),
            ("WEFT_EMU_NET_GBPS", "fast"),
        ] {
            let err = env(&[(k, v)]).unwrap_err();
            assert_eq!(err.name, k);
            assert!(err.to_string().contains(k));
        }
    }
}

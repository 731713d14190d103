//! Every environment variable, read once into one typed struct. Explicit builder calls
//! override these defaults.
//!
//! [`vars`] is the table of every variable weft reads (name, type, default, meaning, owner);
//! `docs/env.md` is generated from it ([`reference_markdown`]; a test keeps the checked-in file
//! equal). [`Env`] parses weft-core's own variables into fields and keeps every `WEFT_*` value
//! for the layers above, which look theirs up with [`Env::var`] and a [`Variable`] of the table.
//!
//! One CUDA variable matters too: `CUDA_DEVICE_MAX_CONNECTIONS` ([`CUDA_QUEUES_VAR`]), see
//! [`cuda_queues_ok`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use weft_gpu::AllocKind;

use crate::link_model::LinkModel;

mod reference;
pub mod vars;

pub use reference::reference_markdown;
pub use vars::{Scope, VarType, Variable};

/// CUDA's variable for the hardware work queues its streams share: 8 unless set, at most 32,
/// read when the process first initialises CUDA.
pub const CUDA_QUEUES_VAR: &str = vars::CUDA_DEVICE_MAX_CONNECTIONS.name;

/// The queue count weft wants: the hardware's 32.
pub const CUDA_QUEUES_WANTED: u32 = 32;

/// Whether [`CUDA_QUEUES_VAR`] gives CUDA at least [`CUDA_QUEUES_WANTED`] hardware queues.
///
/// CUDA starts the work of streams that share a hardware queue in order, whatever their
/// streams. A PortChannel proxy's copy that lands behind a launch queued after a kernel spinning
/// on that copy waits for it: a deadlock, cut by the copy's timeout. The copy-engine transport
/// keeps its streams few (one per peer); more queues make the sharing rarer still (it is gone
/// while the process has fewer streams than queues). The `weft` command sets 32 before CUDA
/// starts, and a program embedding weft should set it too. Read from the process environment at
/// the call, not from [`Env`]: what counts is the value CUDA saw when it started.
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
    /// (collective tuning, the NCCL baseline, the network transports): they parse them from
    /// here, looked up by their entry in [`vars`], so the process environment is read once, in
    /// one place, and every name is declared once.
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
        let values: BTreeMap<String, String> = vars.into_iter().collect();
        let lookup = |variable: &Variable| values.get(variable.name).cloned();
        let mut env = Self::default();
        if let Some(value) = lookup(&vars::WEFT_TIMEOUT) {
            let seconds: f64 = value.trim().parse().map_err(|_| EnvError {
                name: vars::WEFT_TIMEOUT.name,
                value: value.clone(),
                expected: "a positive number of seconds",
            })?;
            if !(seconds > 0.0 && seconds <= 86_400.0) {
                return Err(EnvError { name: vars::WEFT_TIMEOUT.name, value, expected: "between 0 and 86400 seconds" });
            }
            env.device_timeout = Duration::from_secs_f64(seconds);
        }
        if let Some(value) = lookup(&vars::WEFT_CACHE_DIR).filter(|v| !v.is_empty()) {
            env.cache_dir = PathBuf::from(value);
        }
        if let Some(value) = lookup(&vars::WEFT_ALLOC) {
            env.alloc = match value.trim() {
                "vmm" => AllocKind::Vmm,
                "legacy" => AllocKind::Legacy,
                "auto" | "" => AllocKind::Auto,
                _ => return Err(EnvError { name: vars::WEFT_ALLOC.name, value, expected: "vmm, legacy or auto" }),
            };
        }
        if let Some(value) = lookup(&vars::WEFT_RANKS_PER_NODE).filter(|v| !v.trim().is_empty()) {
            let n = value.trim().parse::<usize>().ok().filter(|&n| n > 0).ok_or(EnvError {
                name: vars::WEFT_RANKS_PER_NODE.name,
                value: value.clone(),
                expected: "a positive number of ranks",
            })?;
            env.ranks_per_node = Some(n);
        }
        let number = |variable: &Variable| -> Result<Option<f64>, EnvError> {
            let Some(value) = lookup(variable).filter(|v| !v.trim().is_empty()) else { return Ok(None) };
            match value.trim().parse::<f64>() {
                Ok(x) if x >= 0.0 && x.is_finite() => Ok(Some(x)),
                _ => Err(EnvError { name: variable.name, value, expected: "a non-negative number" }),
            }
        };
        let latency = number(&vars::WEFT_EMU_NET_LATENCY_US)?;
        let gbps = number(&vars::WEFT_EMU_NET_GBPS)?;
        if latency.is_some() || gbps.is_some() {
            env.emulated_net = Some(LinkModel::new(latency.unwrap_or(0.0), gbps));
        }
        if let Some(value) = lookup(&vars::WEFT_SHARE_GPUS) {
            env.share_gpus = match value.trim() {
                "1" => true,
                "0" | "" => false,
                _ => return Err(EnvError { name: vars::WEFT_SHARE_GPUS.name, value, expected: "1 or 0" }),
            };
        }
        if let Some(value) = lookup(&vars::WEFT_NET) {
            env.network = match value.trim() {
                "tcp" | "" => Network::Tcp,
                "ib" => Network::Ib,
                "soft-ib" => Network::SoftIb,
                _ => return Err(EnvError { name: vars::WEFT_NET.name, value, expected: "tcp, ib or soft-ib" }),
            };
        }
        env.vars = values;
        Ok(env)
    }

    /// Sets `variable` as if the process environment held `value`: for the variables their
    /// owners read through [`Env::var`] (not the typed fields above), such as `WEFT_TRACE`
    /// for a tool that turns tracing on itself.
    pub fn set_var(&mut self, variable: &Variable, value: impl Into<String>) {
        self.vars.insert(variable.name.to_string(), value.into());
    }

    /// The value of `variable` as it was read, for the layers that parse their own.
    pub fn var(&self, variable: &Variable) -> Option<&str> {
        self.vars.get(variable.name).map(String::as_str)
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
        assert_eq!(e.var(&vars::WEFT_ALLOC), Some("legacy"));
        assert_eq!(e.var(&vars::WEFT_NET), None);
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

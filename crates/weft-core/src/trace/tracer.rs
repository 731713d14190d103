//! A rank's tracing of its kernels, as the environment asks for it (`WEFT_TRACE`,
//! `WEFT_TRACE_SAMPLE`, `WEFT_TRACE_RECORDS`): the traced variant's defines, one
//! [`Recorder`] for every module a crate loads, and the trace file written when it is dropped.

use std::path::PathBuf;
use std::sync::Mutex;

use weft_gpu::{Device, GpuError, Module};

use super::chrome::RankTrace;
use super::recorder::{Recorder, Sampling};
use crate::env::{Env, EnvError, vars};

/// What the environment asks for: where the trace goes and how calls are sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    /// `WEFT_TRACE`, before [`super::rank_path`].
    pub path: PathBuf,
    /// `WEFT_TRACE_SAMPLE` and `WEFT_TRACE_RECORDS`.
    pub sampling: Sampling,
}

impl TraceConfig {
    /// The tracing `env` asks for; `None` when `WEFT_TRACE` is unset or empty.
    pub fn from_env(env: &Env) -> Result<Option<Self>, EnvError> {
        let Some(path) = env.var(&vars::WEFT_TRACE).filter(|p| !p.trim().is_empty()) else { return Ok(None) };
        let positive = |variable: &vars::Variable, default: u32| -> Result<u32, EnvError> {
            match env.var(variable).map(str::trim).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(v) => v.parse::<u32>().ok().filter(|&n| n > 0).ok_or(EnvError {
                    name: variable.name,
                    value: v.to_string(),
                    expected: "a whole number from 1 to 4294967295",
                }),
            }
        };
        let default = Sampling::default();
        let sampling = Sampling {
            every: positive(&vars::WEFT_TRACE_SAMPLE, default.every)?,
            capacity: positive(&vars::WEFT_TRACE_RECORDS, default.capacity)?,
        };
        Ok(Some(Self { path: PathBuf::from(path), sampling }))
    }
}

/// Why a [`Tracer`] could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// A malformed `WEFT_TRACE_*` variable.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The ring could not be allocated.
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

/// One rank's tracing on one device: the modules a crate loads traced write into its ring;
/// what is left in the ring is written to the rank's trace file on drop.
#[derive(Debug)]
pub struct Tracer {
    recorder: Mutex<Recorder>,
    device: Device,
    path: Option<PathBuf>,
    rank: u32,
}

impl Tracer {
    /// The tracer `env` asks for on `device` for rank `rank` of `ranks`; `None` when tracing
    /// is off.
    pub fn from_env(env: &Env, device: &Device, rank: usize, ranks: usize) -> Result<Option<Self>, TraceError> {
        let Some(config) = TraceConfig::from_env(env)? else { return Ok(None) };
        let (rank, ranks) = (rank as u32, ranks as u32);
        let path = super::rank_path(&config.path, rank, ranks);
        Ok(Some(Self::new(device, config.sampling, Some(path), rank)?))
    }

    /// A tracer writing what is left on drop to `path` (none: only [`Tracer::take`] reads it).
    pub fn new(device: &Device, sampling: Sampling, path: Option<PathBuf>, rank: u32) -> Result<Self, GpuError> {
        Ok(Self { recorder: Mutex::new(Recorder::new(device, sampling)?), device: device.clone(), path, rank })
    }

    /// `defines` for the traced variant.
    pub fn defines(&self, defines: &[String]) -> Vec<String> {
        super::with_trace(defines, true)
    }

    /// Points a module loaded with [`Tracer::defines`] at the ring.
    pub fn attach(&self, module: &Module) -> Result<(), GpuError> {
        self.lock().attach(module)
    }

    /// Everything recorded since the last take, after waiting for the device to be idle.
    pub fn take(&self) -> Result<RankTrace, GpuError> {
        self.device.synchronize()?;
        self.lock().take(self.rank)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorder> {
        // The recorder holds no invariant a panic between two calls could break.
        self.recorder.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let Some(path) = self.path.clone() else { return };
        match self.take() {
            Ok(trace) if trace.records.is_empty() && trace.dropped == 0 => {}
            Ok(trace) => match super::write_chrome(&path, &[trace]) {
                Ok(()) => tracing::info!("wrote the kernel trace {}", path.display()),
                Err(e) => tracing::warn!("could not write the kernel trace {}: {e}", path.display()),
            },
            Err(e) => tracing::warn!("could not read the kernel trace for {}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<Option<TraceConfig>, EnvError> {
        TraceConfig::from_env(&Env::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))?)
    }

    #[test]
    fn tracing_is_off_unless_a_path_is_given_and_its_numbers_are_checked() {
        assert_eq!(config(&[]).unwrap(), None);
        assert_eq!(config(&[("WEFT_TRACE", " ")]).unwrap(), None);
        let on = config(&[("WEFT_TRACE", "t.json"), ("WEFT_TRACE_SAMPLE", "8")]).unwrap().unwrap();
        assert_eq!(on.path, PathBuf::from("t.json"));
        assert_eq!(on.sampling, Sampling { every: 8, capacity: Sampling::default().capacity });
        let err = config(&[("WEFT_TRACE", "t.json"), ("WEFT_TRACE_RECORDS", "0")]).unwrap_err();
        assert_eq!(err.name, "WEFT_TRACE_RECORDS");
    }
}

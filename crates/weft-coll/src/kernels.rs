//! Collective kernels, compiled (or read from the NVRTC cache) and loaded on first use:
//! `reductions.cu` once per (type, operator), `movement.cu` once (see [`crate::device_code`]);
//! their traced variants instead when `WEFT_TRACE` is set (weft-core's `trace`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weft_core::KernelLibrary;
use weft_core::device_code::type_defines;
use weft_core::trace::Tracer;
use weft_gpu::{Device, GpuError, Kernel, Module};
use weft_types::{DataType, ReduceOp};

use crate::algorithm::Algorithm;
use crate::device_code::{MOVEMENT, REDUCTIONS};

/// Which compiled module a kernel lives in: `None` for `movement.cu`.
type ModuleKey = Option<(DataType, ReduceOp)>;

/// Loaded modules and kernels of one device.
pub(crate) struct KernelCache {
    library: KernelLibrary,
    device: Device,
    /// Set: every module is loaded traced and attached to it.
    tracer: Option<Tracer>,
    modules: Mutex<HashMap<ModuleKey, Arc<Module>>>,
    kernels: Mutex<HashMap<(&'static str, ModuleKey), Arc<Kernel>>>,
}

impl KernelCache {
    pub(crate) fn new(library: KernelLibrary, device: Device, tracer: Option<Tracer>) -> Self {
        Self { library, device, tracer, modules: Mutex::default(), kernels: Mutex::default() }
    }

    /// The tracer the modules write into, when tracing.
    pub(crate) fn tracer(&self) -> Option<&Tracer> {
        self.tracer.as_ref()
    }

    /// The kernel of `algorithm` for `(dtype, op)` (ignored by algorithms that do not reduce).
    pub(crate) fn get(&self, algorithm: Algorithm, dtype: DataType, op: ReduceOp) -> Result<Arc<Kernel>, GpuError> {
        self.get_named(algorithm.kernel(), algorithm, dtype, op)
    }

    /// Kernel `name` of `algorithm`'s module (a variant of the algorithm's own kernel, such as
    /// the direct HB AllReduce) for `(dtype, op)`.
    pub(crate) fn get_named(
        &self,
        name: &'static str,
        algorithm: Algorithm,
        dtype: DataType,
        op: ReduceOp,
    ) -> Result<Arc<Kernel>, GpuError> {
        let key = algorithm.reduces().then_some((dtype, op));
        // Entries are inserted whole; a poisoned map is still consistent.
        let mut kernels = self.kernels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = kernels.get(&(name, key)) {
            return Ok(Arc::clone(k));
        }
        let kernel = Arc::new(self.module(key)?.kernel(name)?);
        kernels.insert((name, key), Arc::clone(&kernel));
        Ok(kernel)
    }

    fn module(&self, key: ModuleKey) -> Result<Arc<Module>, GpuError> {
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = modules.get(&key) {
            return Ok(Arc::clone(m));
        }
        let (unit, defines) = match key {
            Some((dtype, op)) => (REDUCTIONS, type_defines(dtype, op)),
            None => (MOVEMENT, Vec::new()),
        };
        let defines = match &self.tracer {
            Some(tracer) => tracer.defines(&defines),
            None => defines,
        };
        let loaded = self.library.load_with(&self.device, unit, &defines)?;
        if let Some(tracer) = &self.tracer {
            tracer.attach(&loaded.module)?;
        }
        modules.insert(key, Arc::clone(&loaded.module));
        Ok(loaded.module)
    }
}

//! Collective kernels, compiled (or read from the NVRTC cache) and loaded on first use:
//! `reductions.cu` once per (type, operator), `movement.cu` once (see [`crate::device_code`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weft_core::KernelLibrary;
use weft_core::device_code::type_defines;
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
    modules: Mutex<HashMap<ModuleKey, Arc<Module>>>,
    kernels: Mutex<HashMap<(&'static str, ModuleKey), Arc<Kernel>>>,
}

impl KernelCache {
    pub(crate) fn new(library: KernelLibrary, device: Device) -> Self {
        Self { library, device, modules: Mutex::default(), kernels: Mutex::default() }
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
        let loaded = match key {
            Some((dtype, op)) => self.library.load_with(&self.device, REDUCTIONS, &type_defines(dtype, op))?,
            None => self.library.load(&self.device, MOVEMENT)?,
        };
        modules.insert(key, Arc::clone(&loaded.module));
        Ok(loaded.module)
    }
}

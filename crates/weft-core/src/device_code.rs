//! weft's device sources, embedded in the binary, and their compilation and loading per device.
//!
//! Headers are handed to NVRTC by include name (`weft/semaphore.cuh`, ...), so nothing is read
//! from disk at run time except CUDA's own headers. Every kernel source is compiled to CUBIN for
//! the device's architecture on first use and cached (see `weft_gpu::nvrtc`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_gpu::{CompileOptions, CompiledKernel, Device, GpuError, KernelResources, KernelSource, Module};

/// Every public and internal device header, by include name.
pub const HEADERS: &[(&str, &str)] = &[
    ("weft/weft.cuh", include_str!("../../../device/include/weft/weft.cuh")),
    ("weft/wait.cuh", include_str!("../../../device/include/weft/wait.cuh")),
    ("weft/semaphore.cuh", include_str!("../../../device/include/weft/semaphore.cuh")),
    ("weft/packet.cuh", include_str!("../../../device/include/weft/packet.cuh")),
    ("weft/memory_channel.cuh", include_str!("../../../device/include/weft/memory_channel.cuh")),
    ("weft/reduce.cuh", include_str!("../../../device/include/weft/reduce.cuh")),
    ("weft/elementwise.cuh", include_str!("../../../device/include/weft/elementwise.cuh")),
    ("weft/collective.cuh", include_str!("../../../device/include/weft/collective.cuh")),
    ("weft/fifo.cuh", include_str!("../../../device/include/weft/fifo.cuh")),
    ("weft/port_channel.cuh", include_str!("../../../device/include/weft/port_channel.cuh")),
    ("weft/impl/stdint.cuh", include_str!("../../../device/include/weft/impl/stdint.cuh")),
    ("weft/impl/ptx__funcs.cuh", include_str!("../../../device/include/weft/impl/ptx__funcs.cuh")),
    ("weft/generated/types.cuh", include_str!("../../../device/include/weft/generated/types.cuh")),
];

/// Every kernel source, by file name.
pub const KERNELS: &[(&str, &str)] = &[
    ("selftest.cu", include_str!("../../../device/kernels/selftest.cu")),
    ("reductions.cu", include_str!("../../../device/kernels/reductions.cu")),
    ("movement.cu", include_str!("../../../device/kernels/movement.cu")),
    ("executor.cu", include_str!("../../../device/kernels/executor.cu")),
    ("port.cu", include_str!("../../../device/kernels/port.cu")),
];

/// Every set of defines a kernel source is compiled with (one entry for sources without any):
/// the reducing collectives and the plan executor are specialised per element type and
/// operator (the executor folds partial results in the element type, so it has no `avg` and no
/// `premulsum`).
pub fn variants(name: &str) -> Vec<Vec<String>> {
    use weft_types::{DataType, ReduceOp};
    let ops: &[ReduceOp] = match name {
        "reductions.cu" => &ReduceOp::ALL,
        "executor.cu" => &[ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min],
        _ => return vec![Vec::new()],
    };
    DataType::ALL.iter().flat_map(|&t| ops.iter().map(move |&o| type_defines(t, o))).collect()
}

/// The defines that specialise a kernel source for element type `dtype` and operator `op`.
pub fn type_defines(dtype: weft_types::DataType, op: weft_types::ReduceOp) -> Vec<String> {
    vec![format!("WEFT_DTYPE={}", dtype as u32), format!("WEFT_REDOP={}", op as u32)]
}

/// The embedded source `name` with every header attached.
pub fn source(name: &str) -> Option<KernelSource> {
    let (_, text) = KERNELS.iter().find(|(n, _)| *n == name)?;
    Some(KernelSource {
        name: name.to_string(),
        text: (*text).to_string(),
        headers: HEADERS.iter().map(|(n, t)| ((*n).to_string(), (*t).to_string())).collect(),
    })
}

/// A translation unit that `static_assert`s the size, alignment and every field offset of every
/// `weft-types` struct, with the numbers taken from Rust at run time: compiling it proves the
/// C++ view of each layout (through the generated header) equals the Rust one.
pub fn layout_probe_source() -> KernelSource {
    let mut text = String::from("#include \"weft/generated/types.cuh\"\nnamespace weft {\n");
    for s in weft_types::all_structs() {
        text.push_str(&weft_types::cuda::layout_asserts(&s));
    }
    text.push_str("}  // namespace weft\nextern \"C\" __global__ void weft_layout_probe() {}\n");
    KernelSource {
        name: "layout_probe.cu".into(),
        text,
        headers: HEADERS.iter().map(|(n, t)| ((*n).to_string(), (*t).to_string())).collect(),
    }
}

/// A compile-only translation unit that instantiates every FIFO device function
/// (`fifo_command`, `fifo_push`, `fifo_poll`, `fifo_sync`), so NVRTC and ptxas check their PTX.
/// Nothing launches it.
pub fn fifo_probe_source() -> KernelSource {
    let text = r#"#include "weft/fifo.cuh"
extern "C" __global__ void weft_fifo_probe(weft::FifoDeviceHandle fifo, uint64_t* out) {
  if (threadIdx.x != 0) return;
  uint64_t pos = 0;
  const weft::FifoCommand cmd = weft::fifo_command(weft::FifoOp::PutSignal, 1, 2, 3, 4, 5, 6);
  if (!weft::fifo_push(fifo, cmd, &pos)) {
    out[0] = ~0ull;
    return;
  }
  out[0] = pos;
  out[1] = weft::fifo_poll(fifo, pos) ? 1 : 0;
  out[2] = weft::fifo_sync(fifo, pos) ? 1 : 0;
}
"#;
    KernelSource {
        name: "fifo_probe.cu".into(),
        text: text.into(),
        headers: HEADERS.iter().map(|(n, t)| ((*n).to_string(), (*t).to_string())).collect(),
    }
}

/// A module loaded on a device, with how long getting it took.
#[derive(Debug, Clone)]
pub struct LoadedKernels {
    /// The module.
    pub module: Arc<Module>,
    /// Compile (or cache read) plus module load time.
    pub elapsed: Duration,
    /// Whether the CUBIN came from the on-disk cache.
    pub from_cache: bool,
}

/// Compiles and loads weft's kernel sources, caching CUBINs in one folder.
#[derive(Debug, Clone)]
pub struct KernelLibrary {
    cache_dir: PathBuf,
}

impl KernelLibrary {
    /// A library caching into `cache_dir` (usually `Env::cache_dir`).
    pub fn new(cache_dir: PathBuf) -> Self {
        Self { cache_dir }
    }

    /// Compiles (or reads from cache) source `name` for `arch`; needs NVRTC, not a GPU.
    pub fn compile(&self, name: &str, arch: &str) -> Result<CompiledKernel, GpuError> {
        self.compile_with(name, arch, &[])
    }

    /// Compiles source `name` with preprocessor `defines` (`NAME=value`).
    pub fn compile_with(&self, name: &str, arch: &str, defines: &[String]) -> Result<CompiledKernel, GpuError> {
        let (source, options) = Self::program(name, arch, defines)?;
        weft_gpu::compile(&source, &options, &self.cache_dir)
    }

    /// What ptxas reports for every function of source `name` compiled with `defines`
    /// (compiled again, not read from the cache).
    pub fn resources(&self, name: &str, arch: &str, defines: &[String]) -> Result<Vec<KernelResources>, GpuError> {
        let (source, options) = Self::program(name, arch, defines)?;
        weft_gpu::kernel_resources(&source, &options)
    }

    /// Source `name` and the options compiling it for `arch` with preprocessor `defines`.
    fn program(name: &str, arch: &str, defines: &[String]) -> Result<(KernelSource, CompileOptions), GpuError> {
        let source = source(name).ok_or_else(|| GpuError::InvalidArgument(format!("no kernel source {name}")))?;
        let extra = defines.iter().map(|d| format!("-D{d}")).collect();
        Ok((source, CompileOptions { arch: arch.to_string(), extra }))
    }

    /// Compiles the layout probe for `arch`; an error carries NVRTC's log.
    pub fn compile_layout_probe(&self, arch: &str) -> Result<(), GpuError> {
        let options = CompileOptions { arch: arch.to_string(), extra: vec![] };
        weft_gpu::compile(&layout_probe_source(), &options, &self.cache_dir).map(|_| ())
    }

    /// Compiles source `name` for `device`'s architecture and loads it there.
    pub fn load(&self, device: &Device, name: &str) -> Result<LoadedKernels, GpuError> {
        self.load_with(device, name, &[])
    }

    /// [`KernelLibrary::load`] with preprocessor `defines`.
    pub fn load_with(&self, device: &Device, name: &str, defines: &[String]) -> Result<LoadedKernels, GpuError> {
        let start = Instant::now();
        let compiled = self.compile_with(name, &device.arch()?, defines)?;
        let module = Module::load(device, &compiled.cubin)?;
        Ok(LoadedKernels { module, elapsed: start.elapsed(), from_cache: compiled.from_cache })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_generated_header_is_current() {
        let (_, checked_in) =
            HEADERS.iter().find(|(n, _)| *n == "weft/generated/types.cuh").copied().unwrap_or_default();
        assert_eq!(
            checked_in,
            weft_types::cuda::generated_header(),
            "device/include/weft/generated/types.cuh is stale: run `weft gen-header`"
        );
    }

    #[test]
    fn every_header_in_the_tree_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../device/include");
        let mut on_disk = Vec::new();
        collect(&root, &root, &mut on_disk);
        on_disk.sort();
        let mut embedded: Vec<String> = HEADERS.iter().map(|(n, _)| n.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }

    fn collect(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                collect(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "cuh") {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
}

//! weft's device headers and the kernel sets of the crates that launch kernels, embedded in the
//! binary, and their compilation and loading per device.
//!
//! Every crate that launches kernels embeds its own sources as one [`KernelSet`] (weft-coll the
//! collectives of `device/kernels/coll/`, weft-exec the plan executor of `device/kernels/exec/`)
//! and compiles them through a [`KernelLibrary`] of that set. weft-core embeds the public
//! headers ([`HEADERS`]), handed to every compilation, and [`TEST_KERNELS`] (`device/tests/`),
//! which exercise the device API for `weft selftest` and `weft bench`. Headers and a set's own
//! files are handed to NVRTC by include name, so nothing is read from disk at run time except
//! CUDA's own headers. Every translation unit is compiled to CUBIN for the device's architecture
//! on first use and cached (see `weft_gpu::nvrtc`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_gpu::{CompileOptions, CompiledKernel, Device, GpuError, KernelResources, KernelSource, Module};

use crate::env::{Env, EnvError, vars};

/// Every public and internal device header, by include name.
pub const HEADERS: &[(&str, &str)] = &[
    ("weft/weft.cuh", include_str!("../../../device/include/weft/weft.cuh")),
    ("weft/wait.cuh", include_str!("../../../device/include/weft/wait.cuh")),
    ("weft/semaphore.cuh", include_str!("../../../device/include/weft/semaphore.cuh")),
    ("weft/packet.cuh", include_str!("../../../device/include/weft/packet.cuh")),
    ("weft/memory_channel.cuh", include_str!("../../../device/include/weft/memory_channel.cuh")),
    ("weft/elementwise.cuh", include_str!("../../../device/include/weft/elementwise.cuh")),
    ("weft/collective.cuh", include_str!("../../../device/include/weft/collective.cuh")),
    ("weft/fifo.cuh", include_str!("../../../device/include/weft/fifo.cuh")),
    ("weft/port_channel.cuh", include_str!("../../../device/include/weft/port_channel.cuh")),
    ("weft/ep/buffer.cuh", include_str!("../../../device/include/weft/ep/buffer.cuh")),
    ("weft/ep/sync.cuh", include_str!("../../../device/include/weft/ep/sync.cuh")),
    ("weft/ep/copy.cuh", include_str!("../../../device/include/weft/ep/copy.cuh")),
    ("weft/impl/stdint.cuh", include_str!("../../../device/include/weft/impl/stdint.cuh")),
    ("weft/impl/ptx__funcs.cuh", include_str!("../../../device/include/weft/impl/ptx__funcs.cuh")),
    ("weft/generated/types.cuh", include_str!("../../../device/include/weft/generated/types.cuh")),
];

/// The kernel sources of one crate, embedded in it: the translation units it compiles and
/// loads, the files they include besides [`HEADERS`], and the defines each unit is compiled
/// with. Names are paths relative to [`KernelSet::dir`], so a unit's `#include "file"` of a
/// file beside it finds the embedded copy.
#[derive(Debug, Clone, Copy)]
pub struct KernelSet {
    /// The folder of the sources, relative to the repository root (`device/kernels/coll`).
    pub dir: &'static str,
    /// The translation units, by name: what a [`KernelLibrary`] of this set compiles.
    pub units: &'static [(&'static str, &'static str)],
    /// The files the units include from [`KernelSet::dir`], by include name.
    pub includes: &'static [(&'static str, &'static str)],
    /// Every set of defines unit `name` is compiled with (one entry, empty, for a unit
    /// compiled once).
    pub variants: fn(name: &str) -> Vec<Vec<String>>,
}

impl KernelSet {
    /// Unit `name` with [`HEADERS`] and this set's includes attached.
    pub fn source(&self, name: &str) -> Option<KernelSource> {
        let (_, text) = self.units.iter().find(|(n, _)| *n == name)?;
        Some(KernelSource { name: name.to_string(), text: (*text).to_string(), headers: self.headers() })
    }

    /// Every (unit, defines) pair the set is compiled with: the programs a CPU check compiles.
    pub fn programs(&self) -> Vec<(&'static str, Vec<String>)> {
        self.units.iter().flat_map(|(name, _)| (self.variants)(name).into_iter().map(move |d| (*name, d))).collect()
    }

    /// The names of every embedded file, units and includes, sorted.
    pub fn embedded_files(&self) -> Vec<String> {
        let mut names: Vec<String> = self.units.iter().chain(self.includes).map(|(n, _)| n.to_string()).collect();
        names.sort();
        names
    }

    /// The names of the files in [`KernelSet::dir`] under `repo_root` (and its subfolders),
    /// sorted: a test compares them with [`KernelSet::embedded_files`], so a source added to
    /// the folder but not to the set fails it.
    pub fn files_on_disk(&self, repo_root: &Path) -> std::io::Result<Vec<String>> {
        let root = repo_root.join(self.dir);
        let mut names = Vec::new();
        collect_files(&root, &root, &mut names)?;
        names.sort();
        Ok(names)
    }

    fn headers(&self) -> Vec<(String, String)> {
        HEADERS.iter().chain(self.includes).map(|(n, t)| ((*n).to_string(), (*t).to_string())).collect()
    }
}

/// Appends the path relative to `root` of every file under `dir` to `out`.
fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(root, &path, out)?;
        } else if let Ok(relative) = path.strip_prefix(root) {
            out.push(relative.display().to_string());
        }
    }
    Ok(())
}

/// The variants of a set whose units are each compiled once, without defines.
pub fn compiled_once(_name: &str) -> Vec<Vec<String>> {
    vec![Vec::new()]
}

/// The defines of every (element type, operator) pair with an operator in `ops`: the variants
/// of a unit specialised per element type and operator.
pub fn type_variants(ops: &[weft_types::ReduceOp]) -> Vec<Vec<String>> {
    weft_types::DataType::ALL.iter().flat_map(|&t| ops.iter().map(move |&o| type_defines(t, o))).collect()
}

/// The defines that specialise a kernel source for element type `dtype` and operator `op`.
pub fn type_defines(dtype: weft_types::DataType, op: weft_types::ReduceOp) -> Vec<String> {
    vec![format!("WEFT_DTYPE={}", dtype as u32), format!("WEFT_REDOP={}", op as u32)]
}

/// weft-core's kernels: the self-test and bench kernels of the device API (`device/tests/`),
/// not part of any library: `selftest.cu` (launched by [`crate::selftest_kernels`]) and
/// `port.cu` (PortChannel and FIFO kernels of `weft selftest` and `weft bench`).
pub const TEST_KERNELS: KernelSet = KernelSet {
    dir: "device/tests",
    units: &[
        ("selftest.cu", include_str!("../../../device/tests/selftest.cu")),
        ("port.cu", include_str!("../../../device/tests/port.cu")),
    ],
    includes: &[],
    variants: compiled_once,
};

/// Why [`nvrtc_test_library`] has no library to hand out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestLibraryError {
    /// NVRTC is missing while `WEFT_REQUIRE_NVRTC=1`.
    #[error("NVRTC is required (WEFT_REQUIRE_NVRTC=1): {0}")]
    Nvrtc(#[from] GpuError),
    /// A malformed environment variable.
    #[error(transparent)]
    Env(#[from] EnvError),
}

/// For the NVRTC tests of the crates that embed kernels, which need no GPU: a library of
/// `kernels` caching into `WEFT_CACHE_DIR` (scripts/test.sh sets it, so later steps of the run
/// read what the tests compiled) or else a fresh temporary folder. `Ok(None)` when NVRTC is
/// missing, with the reason on stderr; with `WEFT_REQUIRE_NVRTC=1` (CI installs NVRTC) a
/// missing NVRTC is the error instead.
pub fn nvrtc_test_library(kernels: &'static KernelSet) -> Result<Option<KernelLibrary>, TestLibraryError> {
    let env = Env::from_process()?;
    if let Err(e) = weft_gpu::nvrtc_version() {
        if env.var(&vars::WEFT_REQUIRE_NVRTC) == Some("1") {
            return Err(e.into());
        }
        eprintln!("skipping the NVRTC checks of {}: {e}", kernels.dir);
        return Ok(None);
    }
    let dir = env
        .var(&vars::WEFT_CACHE_DIR)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(format!("weft-nvrtc-test-{}", std::process::id())));
    Ok(Some(KernelLibrary::new(dir, kernels)))
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
    KernelSource { name: "layout_probe.cu".into(), text, headers: public_headers() }
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
    KernelSource { name: "fifo_probe.cu".into(), text: text.into(), headers: public_headers() }
}

fn public_headers() -> Vec<(String, String)> {
    HEADERS.iter().map(|(n, t)| ((*n).to_string(), (*t).to_string())).collect()
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

/// Compiles and loads the units of one crate's [`KernelSet`], caching CUBINs in one folder.
#[derive(Debug, Clone)]
pub struct KernelLibrary {
    cache_dir: PathBuf,
    kernels: &'static KernelSet,
}

impl KernelLibrary {
    /// A library of `kernels` caching into `cache_dir` (usually `Env::cache_dir`).
    pub fn new(cache_dir: PathBuf, kernels: &'static KernelSet) -> Self {
        Self { cache_dir, kernels }
    }

    /// The kernel set this library compiles.
    pub fn kernels(&self) -> &'static KernelSet {
        self.kernels
    }

    /// Compiles (or reads from cache) unit `name` for `arch`; needs NVRTC, not a GPU.
    pub fn compile(&self, name: &str, arch: &str) -> Result<CompiledKernel, GpuError> {
        self.compile_with(name, arch, &[])
    }

    /// Compiles unit `name` with preprocessor `defines` (`NAME=value`).
    pub fn compile_with(&self, name: &str, arch: &str, defines: &[String]) -> Result<CompiledKernel, GpuError> {
        let (source, options) = self.program(name, arch, defines)?;
        weft_gpu::compile(&source, &options, &self.cache_dir)
    }

    /// What ptxas reports for every function of unit `name` compiled with `defines`
    /// (compiled again, not read from the cache).
    pub fn resources(&self, name: &str, arch: &str, defines: &[String]) -> Result<Vec<KernelResources>, GpuError> {
        let (source, options) = self.program(name, arch, defines)?;
        weft_gpu::kernel_resources(&source, &options)
    }

    /// Unit `name` and the options compiling it for `arch` with preprocessor `defines`.
    fn program(&self, name: &str, arch: &str, defines: &[String]) -> Result<(KernelSource, CompileOptions), GpuError> {
        let source = self
            .kernels
            .source(name)
            .ok_or_else(|| GpuError::InvalidArgument(format!("no kernel source {name} in {}", self.kernels.dir)))?;
        let extra = defines.iter().map(|d| format!("-D{d}")).collect();
        Ok((source, CompileOptions { arch: arch.to_string(), extra }))
    }

    /// Compiles every (unit, defines) pair of the set for `arch` on every core (or reads it from
    /// the cache), checks each result is a CUBIN, and returns how many there were; an error
    /// names the unit and its defines.
    pub fn compile_every_variant(&self, arch: &str) -> Result<usize, GpuError> {
        let programs = self.kernels.programs();
        let compile = |(name, defines): &(&str, Vec<String>)| -> Result<(), GpuError> {
            let compiled = self
                .compile_with(name, arch, defines)
                .map_err(|e| GpuError::InvalidArgument(format!("{name} [{}]: {e}", defines.join(" "))))?;
            if !compiled.cubin.starts_with(b"\x7fELF") {
                return Err(GpuError::InvalidArgument(format!("{name} [{}] is not a CUBIN", defines.join(" "))));
            }
            Ok(())
        };
        // NVRTC programs are independent: one thread per core, each taking every n-th program;
        // the first error in program order is the one reported.
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, programs.len().max(1));
        let mut outcomes: Vec<(usize, Result<(), GpuError>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (programs, compile) = (&programs, &compile);
                    scope.spawn(move || {
                        programs.iter().enumerate().skip(t).step_by(threads).map(|(i, p)| (i, compile(p))).collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![(0, Err(GpuError::InvalidArgument("a compile thread panicked".into())))]
                    })
                })
                .collect()
        });
        outcomes.sort_by_key(|(i, _)| *i);
        outcomes.into_iter().try_for_each(|(_, r)| r)?;
        Ok(programs.len())
    }

    /// Compiles the layout probe for `arch`; an error carries NVRTC's log.
    pub fn compile_layout_probe(&self, arch: &str) -> Result<(), GpuError> {
        let options = CompileOptions { arch: arch.to_string(), extra: vec![] };
        weft_gpu::compile(&layout_probe_source(), &options, &self.cache_dir).map(|_| ())
    }

    /// Compiles unit `name` for `device`'s architecture and loads it there.
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
        let headers = KernelSet { dir: "device/include", units: &[], includes: HEADERS, variants: compiled_once };
        assert_eq!(headers.files_on_disk(&repo_root()).unwrap(), headers.embedded_files());
    }

    #[test]
    fn every_test_kernel_in_the_tree_is_embedded() {
        assert_eq!(TEST_KERNELS.files_on_disk(&repo_root()).unwrap(), TEST_KERNELS.embedded_files());
        assert_eq!(TEST_KERNELS.programs().len(), TEST_KERNELS.units.len());
    }

    #[test]
    fn type_variants_cover_every_type_and_operator_once() {
        use weft_types::{DataType, ReduceOp};
        let ops = [ReduceOp::Sum, ReduceOp::Max];
        let variants = type_variants(&ops);
        assert_eq!(variants.len(), DataType::ALL.len() * ops.len());
        let unique: std::collections::HashSet<_> = variants.iter().collect();
        assert_eq!(unique.len(), variants.len());
        assert!(variants.contains(&type_defines(DataType::Bf16, ReduceOp::Max)));
    }

    #[test]
    fn a_library_compiles_only_its_own_set() {
        let library = KernelLibrary::new(std::env::temp_dir(), &TEST_KERNELS);
        let err = library.compile("reductions.cu", "sm_90").unwrap_err().to_string();
        assert!(err.contains("no kernel source reductions.cu in device/tests"), "{err}");
    }

    fn repo_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }
}

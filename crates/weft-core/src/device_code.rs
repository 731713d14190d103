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
//!
//! Every set also carries the parameter lists of its kernels (`weft_gpu::device_kernels!`).
//! The prototypes header generated from them is handed to NVRTC with the set's sources (under
//! [`PROTOTYPES_DIR`], not in [`HEADERS`]) and every unit includes it: NVRTC then rejects a
//! kernel whose definition differs from its declaration. [`KernelSet::prototype_problems`]
//! finds a unit without it or a kernel without a declaration; weft's own sets keep a copy of
//! the header in the tree for readers, which `weft gen-header --check` holds current.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_gpu::{
    CompileOptions, CompiledKernel, Device, GpuError, KernelResources, KernelSignature, KernelSource, Module,
};

use crate::env::{Env, EnvError, vars};

/// Every public and internal device header, by include name.
pub const HEADERS: &[(&str, &str)] = &[
    ("weft/weft.cuh", include_str!("../../../device/include/weft/weft.cuh")),
    ("weft/wait.cuh", include_str!("../../../device/include/weft/wait.cuh")),
    ("weft/semaphore.cuh", include_str!("../../../device/include/weft/semaphore.cuh")),
    ("weft/ll_flags.cuh", include_str!("../../../device/include/weft/ll_flags.cuh")),
    ("weft/packet.cuh", include_str!("../../../device/include/weft/packet.cuh")),
    ("weft/memory_channel.cuh", include_str!("../../../device/include/weft/memory_channel.cuh")),
    ("weft/elementwise.cuh", include_str!("../../../device/include/weft/elementwise.cuh")),
    ("weft/collective.cuh", include_str!("../../../device/include/weft/collective.cuh")),
    ("weft/fifo.cuh", include_str!("../../../device/include/weft/fifo.cuh")),
    ("weft/port_channel.cuh", include_str!("../../../device/include/weft/port_channel.cuh")),
    ("weft/transfer.cuh", include_str!("../../../device/include/weft/transfer.cuh")),
    ("weft/lsa.cuh", include_str!("../../../device/include/weft/lsa.cuh")),
    ("weft/gin.cuh", include_str!("../../../device/include/weft/gin.cuh")),
    ("weft/ep/buffer.cuh", include_str!("../../../device/include/weft/ep/buffer.cuh")),
    ("weft/ep/sync.cuh", include_str!("../../../device/include/weft/ep/sync.cuh")),
    ("weft/ep/copy.cuh", include_str!("../../../device/include/weft/ep/copy.cuh")),
    ("weft/impl/stdint.cuh", include_str!("../../../device/include/weft/impl/stdint.cuh")),
    ("weft/impl/ptx__funcs.cuh", include_str!("../../../device/include/weft/impl/ptx__funcs.cuh")),
    ("weft/impl/kernel_params.cuh", include_str!("../../../device/include/weft/impl/kernel_params.cuh")),
    ("weft/generated/types.cuh", include_str!("../../../device/include/weft/generated/types.cuh")),
    ("weft/trace.cuh", include_str!("../../../device/include/weft/trace.cuh")),
    ("weft/generated/trace.cuh", include_str!("../../../device/include/weft/generated/trace.cuh")),
];

/// The folder, under `device/include`, of the generated prototypes headers of the kernel sets.
pub const PROTOTYPES_DIR: &str = "weft/generated/kernels/";

/// The kernel sources of one crate, embedded in it: the translation units it compiles and
/// loads, the files they include besides [`HEADERS`], the defines each unit is compiled
/// with, and the declared parameter lists of its kernels with their generated prototypes.
/// Names are paths relative to [`KernelSet::dir`], so a unit's `#include "file"` of a file
/// beside it finds the embedded copy.
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
    /// The parameter lists of the set's kernels (a `weft_gpu::device_kernels!` declaration).
    pub signatures: fn() -> Vec<KernelSignature>,
    /// The include name of the prototypes header generated from [`KernelSet::signatures`],
    /// which every unit includes (weft's sets: in [`PROTOTYPES_DIR`]).
    pub prototypes: &'static str,
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

    /// The prototypes header of [`KernelSet::signatures`]: what the units are compiled with.
    pub fn generated_prototypes(&self) -> String {
        weft_gpu::prototypes_header(self.dir, &(self.signatures)())
    }

    /// Where weft's sets keep a copy of the prototypes header, relative to the repository root.
    pub fn prototypes_path(&self) -> String {
        format!("device/include/{}", self.prototypes)
    }

    /// What keeps the prototypes from checking the definitions, one line each: a copy under
    /// `repo_root` that differs from [`KernelSet::generated_prototypes`] (or is missing), a unit
    /// that does not include them, a kernel defined in the set but declared by no parameter
    /// list, or declared but defined nowhere. Empty when the declarations cover the set exactly.
    pub fn prototype_problems(&self, repo_root: &Path) -> Vec<String> {
        let mut problems = Vec::new();
        let copy = std::fs::read_to_string(repo_root.join(self.prototypes_path())).unwrap_or_default();
        if copy != self.generated_prototypes() {
            problems.push(format!("{} is stale: run `weft gen-header`", self.prototypes_path()));
        }
        let directive = format!("#include \"{}\"", self.prototypes);
        for (unit, text) in self.units {
            if !text.contains(&directive) {
                problems.push(format!("{unit} does not include {}", self.prototypes));
            }
        }
        let declared: Vec<&str> = (self.signatures)().iter().flat_map(|s| s.kernels.iter().copied()).collect();
        let defined: Vec<String> =
            self.units.iter().chain(self.includes).flat_map(|(_, text)| defined_kernels(text)).collect();
        for name in &defined {
            if !declared.contains(&name.as_str()) {
                problems.push(format!("kernel {name} of {} has no declared parameter list", self.dir));
            }
        }
        for name in declared {
            if !defined.iter().any(|d| d == name) {
                problems.push(format!("kernel {name} is declared but not defined in {}", self.dir));
            }
        }
        problems
    }

    fn headers(&self) -> Vec<(String, String)> {
        let mut headers: Vec<(String, String)> =
            HEADERS.iter().chain(self.includes).map(|(n, t)| ((*n).to_string(), (*t).to_string())).collect();
        headers.push((self.prototypes.to_string(), self.generated_prototypes()));
        headers
    }
}

/// The names of the `extern "C" __global__` kernels `source` defines (a body follows the
/// parameter list), in order.
pub fn defined_kernels(source: &str) -> Vec<String> {
    const MARKER: &str = "extern \"C\" __global__ void";
    let mut names = Vec::new();
    for (at, _) in source.match_indices(MARKER) {
        let mut rest = source[at + MARKER.len()..].trim_start();
        if let Some(bounds) = rest.strip_prefix("__launch_bounds__") {
            rest = bounds.split_once(')').map_or("", |(_, after)| after).trim_start();
        }
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let (name, after) = rest.split_at(end);
        // The parameter list holds no parentheses, so its end is the first ')'.
        let body = after.split_once(')').map(|(_, tail)| tail.trim_start());
        if !name.is_empty() && body.is_some_and(|tail| tail.starts_with('{')) {
            names.push(name.to_string());
        }
    }
    names
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
    signatures: crate::test_kernels::signatures,
    prototypes: "weft/generated/kernels/tests.cuh",
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

/// A compile-only translation unit checking the device's transfer encoders
/// (`device/include/weft/transfer.cuh`) against the host's: a `static_assert` per sample that
/// the constexpr encoder makes exactly the words `weft_types::TransferCmd::encode` makes (numbers
/// taken from Rust at run time), and a kernel instantiating `transfer_push`. Nothing launches it.
pub fn transfer_probe_source() -> KernelSource {
    use weft_types::{CounterUpdate, Transfer, TransferCmd};
    let samples: [(Transfer, String); 6] = [
        (
            Transfer::Write { connection: 1023, src_offset: u32::MAX, dst_offset: 7, len: (1 << 31) - 1 },
            "transfer_write(1023, 0xffffffffu, 7, 0x7fffffffu)".into(),
        ),
        (
            Transfer::Write { connection: 3, src_offset: 16, dst_offset: 32, len: 4096 },
            "transfer_write(3, 16, 32, 4096)".into(),
        ),
        (
            Transfer::Counter { connection: 513, counter: 511, update: CounterUpdate::Add(-2) },
            "transfer_counter_add(513, 511, static_cast<int16_t>(-2))".into(),
        ),
        (
            Transfer::Counter { connection: 0, counter: 9, update: CounterUpdate::Add(i16::MAX) },
            "transfer_counter_add(0, 9, static_cast<int16_t>(32767))".into(),
        ),
        (
            Transfer::Counter { connection: 7, counter: 0, update: CounterUpdate::Set(u16::MAX) },
            "transfer_counter_set(7, 0, static_cast<uint16_t>(65535))".into(),
        ),
        (Transfer::Quiet { connection: 42 }, "transfer_quiet(42)".into()),
    ];
    let mut text = String::from("#include \"weft/transfer.cuh\"\nnamespace weft {\n");
    for (transfer, call) in samples {
        // The samples are within their fields' widths.
        let Ok(cmd) = TransferCmd::encode(transfer) else { continue };
        for (field, value) in [("len", cmd.len), ("src", cmd.src), ("dst", cmd.dst), ("control", cmd.control)] {
            text.push_str(&format!(
                "static_assert({call}.{field} == {value}u, \"rust: {call}.{field} == {value}\");\n"
            ));
        }
        let fifo = cmd.to_fifo_command();
        text.push_str(&format!(
            "static_assert(transfer_fifo_command({call}).fst == {}ull && transfer_fifo_command({call}).snd == {}ull, \"rust: the FIFO words of {call}\");\n",
            fifo.fst, fifo.snd
        ));
    }
    text.push_str(
        r#"}  // namespace weft
extern "C" __global__ void weft_transfer_probe(weft::FifoDeviceHandle fifo, uint64_t* out) {
  if (threadIdx.x != 0) return;
  uint64_t pos = 0;
  const bool pushed = weft::transfer_push(fifo, weft::transfer_counter_add(1, 2, -3), &pos) &&
                      weft::transfer_push(fifo, weft::transfer_quiet(1), &pos) && weft::fifo_sync(fifo, pos);
  out[0] = pushed ? pos : ~0ull;
}
"#,
    );
    KernelSource { name: "transfer_probe.cu".into(), text, headers: public_headers() }
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
        self.compile_every_variant_with(arch, &[])
    }

    /// [`KernelLibrary::compile_every_variant`] with `extra` defines added to every variant
    /// (the traced variants: `[trace::TRACE_DEFINE]`).
    pub fn compile_every_variant_with(&self, arch: &str, extra: &[String]) -> Result<usize, GpuError> {
        self.for_every_variant(|name, defines| {
            let defines = [defines, extra].concat();
            let compiled = self.compile_with(name, arch, &defines)?;
            if !compiled.cubin.starts_with(b"\x7fELF") {
                return Err(GpuError::InvalidArgument("not a CUBIN".into()));
            }
            Ok(())
        })
    }

    /// Checks that the trace marks compile away: every variant, untraced, compiles for `arch`
    /// to the same CUBIN as its source with every `WEFT_TRACE_*` line removed
    /// ([`crate::trace::without_marks`]). Returns how many variants were compared.
    pub fn check_marks_compile_away(&self, arch: &str) -> Result<usize, GpuError> {
        self.for_every_variant(|name, defines| {
            let (source, options) = self.program(name, arch, defines)?;
            let marked = weft_gpu::compile(&source, &options, &self.cache_dir)?;
            let strip = |(n, t): &(String, String)| (n.clone(), crate::trace::without_marks(t));
            let unmarked = KernelSource {
                name: source.name.clone(),
                text: crate::trace::without_marks(&source.text),
                headers: source.headers.iter().map(strip).collect(),
            };
            if unmarked.text == source.text && unmarked.headers == source.headers {
                return Ok(());
            }
            let unmarked = weft_gpu::compile(&unmarked, &options, &self.cache_dir)?;
            if marked.cubin != unmarked.cubin {
                return Err(GpuError::InvalidArgument("its trace marks change the untraced CUBIN".into()));
            }
            Ok(())
        })
    }

    /// Runs `check` on every (unit, defines) pair of the set on every core and returns how
    /// many there were; the first error in program order is returned, naming the program.
    fn for_every_variant(
        &self,
        check: impl Fn(&str, &[String]) -> Result<(), GpuError> + Sync,
    ) -> Result<usize, GpuError> {
        let programs = self.kernels.programs();
        let compile = |(name, defines): &(&str, Vec<String>)| -> Result<(), GpuError> {
            check(name, defines).map_err(|e| GpuError::InvalidArgument(format!("{name} [{}]: {e}", defines.join(" "))))
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
        let headers = KernelSet {
            dir: "device/include",
            units: &[],
            includes: HEADERS,
            variants: compiled_once,
            signatures: Vec::new,
            prototypes: "",
        };
        // The prototypes headers belong to their kernel sets (each set's test checks its own).
        let mut on_disk = headers.files_on_disk(&repo_root()).unwrap();
        on_disk.retain(|name| !name.starts_with(PROTOTYPES_DIR));
        assert_eq!(on_disk, headers.embedded_files());
    }

    #[test]
    fn the_test_kernels_match_their_declarations() {
        assert_eq!(TEST_KERNELS.prototype_problems(&repo_root()), Vec::<String>::new());
    }

    #[test]
    fn defined_kernels_are_found_with_or_without_launch_bounds() {
        let source = "extern \"C\" __global__ void __launch_bounds__(1024)\n    a_kernel(int x, char* y) {\n}\n\
                      extern \"C\" __global__ void b_kernel(const __grid_constant__ weft::PeerBuffers p) { }\n\
                      extern \"C\" __global__ void declared_only(int x);\n";
        assert_eq!(defined_kernels(source), ["a_kernel", "b_kernel"]);
    }

    #[test]
    fn a_set_with_an_undeclared_kernel_a_unit_without_prototypes_or_no_copy_has_problems() {
        let set = KernelSet { signatures: Vec::new, prototypes: "weft/generated/kernels/other.cuh", ..TEST_KERNELS };
        let problems = set.prototype_problems(&repo_root());
        assert!(problems.iter().any(|p| p.contains("other.cuh is stale")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("selftest.cu does not include")), "{problems:?}");
        assert!(
            problems.iter().any(|p| p.contains("weft_selftest_put of device/tests has no declared")),
            "{problems:?}"
        );
    }

    /// Compiles `body` after including the header `prototypes` for sm_90; `None` when NVRTC is
    /// missing (a declared skip, an error under `WEFT_REQUIRE_NVRTC=1`).
    fn compile_after_prototypes(prototypes: &str, body: &str) -> Option<Result<(), GpuError>> {
        let library = nvrtc_test_library(&TEST_KERNELS).expect("NVRTC required")?;
        let mut headers = public_headers();
        headers.push(("prototypes.cuh".into(), prototypes.into()));
        let text = format!("#include \"prototypes.cuh\"\n{body}");
        let source = KernelSource { name: "prototype_check.cu".into(), text, headers };
        let options = CompileOptions { arch: "sm_90".into(), extra: vec![] };
        Some(weft_gpu::compile(&source, &options, &library.cache_dir).map(|_| ()))
    }

    #[test]
    fn nvrtc_rejects_a_definition_that_differs_from_its_prototype() {
        let prototypes = TEST_KERNELS.generated_prototypes();
        let matching =
            "extern \"C\" __global__ void weft_selftest_wait(weft::MemoryChannelDeviceHandle ch, uint32_t count) {}";
        let Some(compiled) = compile_after_prototypes(&prototypes, matching) else { return };
        compiled.expect("the definition matching its prototype compiles");
        for mismatch in [
            // A wider parameter.
            "extern \"C\" __global__ void weft_selftest_wait(weft::MemoryChannelDeviceHandle ch, uint64_t count) {}",
            // Parameters swapped.
            "extern \"C\" __global__ void weft_selftest_wait(uint32_t count, weft::MemoryChannelDeviceHandle ch) {}",
            // One parameter too many.
            "extern \"C\" __global__ void weft_selftest_wait(weft::MemoryChannelDeviceHandle ch, uint32_t count, uint32_t extra) {}",
        ] {
            let compiled = compile_after_prototypes(&prototypes, mismatch).expect("NVRTC was found above");
            let err = compiled.expect_err(mismatch).to_string();
            assert!(err.contains("more than one instance of overloaded function"), "{err}");
        }
    }

    mod mismatched {
        weft_gpu::device_kernels! {
            /// A declaration whose Rust field is narrower than its C++ type.
            pub(super) fn signatures;

            /// `count` is 4 bytes in Rust, 8 in C++.
            pub(super) struct NarrowCount for ["weft_narrow_count"] {
                count: u32 => "uint64_t",
            }
        }
    }

    #[test]
    fn nvrtc_rejects_a_c_type_of_another_width_than_its_rust_field() {
        let prototypes = weft_gpu::prototypes_header("a test", &mismatched::signatures());
        let definition = "extern \"C\" __global__ void weft_narrow_count(uint64_t count) {}";
        let Some(compiled) = compile_after_prototypes(&prototypes, definition) else { return };
        let err = compiled.expect_err("a parameter wider in C++ than in Rust").to_string();
        assert!(err.contains("weft_narrow_count: count is 4 bytes aligned to 4 in Rust"), "{err}");
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

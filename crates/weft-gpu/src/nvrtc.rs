//! NVRTC compilation to CUBIN with an on-disk cache, and ptxas's per-kernel resource report.
//!
//! The cache key is a SHA-256 over every input of a compilation: the source's name and text,
//! the name and text of every header handed to NVRTC, every option (architecture and include
//! folders among them) and the NVRTC version. A cache entry is written atomically (temporary
//! file, then rename) so concurrent processes never read half a CUBIN.

use std::ffi::{CStr, CString, c_char, c_int};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::sys;
use sha2::{Digest, Sha256};

use crate::error::GpuError;
use crate::loader;

/// A translation unit and the headers it may include (by the names given here).
#[derive(Clone, Debug)]
pub struct KernelSource {
    /// Name used in diagnostics, e.g. `selftest.cu`.
    pub name: String,
    /// CUDA C++ text.
    pub text: String,
    /// `(include name, text)` pairs, e.g. `("weft/semaphore.cuh", ...)`.
    pub headers: Vec<(String, String)>,
}

/// NVRTC options.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Target architecture, e.g. `sm_90`.
    pub arch: String,
    /// Extra options passed verbatim (e.g. `-DWEFT_X=1`).
    pub extra: Vec<String>,
}

/// A CUBIN and where it came from.
#[derive(Clone, Debug)]
pub struct CompiledKernel {
    /// The ELF image.
    pub cubin: Vec<u8>,
    /// True when read from the on-disk cache.
    pub from_cache: bool,
    /// Hex cache key.
    pub key: String,
}

/// What ptxas reported for one function: registers and local memory per thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// The function's (mangled or `extern "C"`) name.
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Local memory per thread for arrays indexed at run time, spills and call frames.
    pub stack_frame_bytes: u32,
    /// Bytes per thread stored to local memory because registers ran out.
    pub spill_store_bytes: u32,
    /// Bytes per thread loaded back from those spills.
    pub spill_load_bytes: u32,
}

fn nvrtc_check(call: &'static str, result: sys::nvrtcResult) -> Result<(), GpuError> {
    if result == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: returns a static NUL-terminated string for any result code.
    let text = unsafe { sys::nvrtcGetErrorString(result) };
    let detail = if text.is_null() {
        format!("{result:?}")
    } else {
        // SAFETY: non-null static C string from NVRTC.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    };
    Err(GpuError::Nvrtc { call, detail })
}

/// NVRTC's `(major, minor)` version; loads NVRTC if needed.
pub fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    loader::load_nvrtc()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: writes two ints.
    nvrtc_check("nvrtcVersion", unsafe { sys::nvrtcVersion(&mut major, &mut minor) })?;
    Ok((major, minor))
}

/// The kernel cache folder: `cache_dir` if given, else `$XDG_CACHE_HOME/weft`, else
/// `~/.cache/weft`, else a folder under the system temporary directory.
pub fn default_cache_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("weft");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".cache/weft");
    }
    std::env::temp_dir().join("weft-cache")
}

/// Every NVRTC option for a compilation: architecture, language, CUDA include folders, extras.
fn full_options(options: &CompileOptions) -> Result<Vec<String>, GpuError> {
    if !options.arch.starts_with("sm_") && !options.arch.starts_with("compute_") {
        return Err(GpuError::InvalidArgument(format!("architecture {:?}", options.arch)));
    }
    let mut all = vec![format!("--gpu-architecture={}", options.arch), "--std=c++17".to_string()];
    for dir in loader::cuda_include_dirs()? {
        all.push(format!("--include-path={}", dir.display()));
    }
    all.extend(options.extra.iter().cloned());
    Ok(all)
}

fn cache_key(source: &KernelSource, options: &[String], version: (i32, i32)) -> String {
    let mut hash = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    field(b"weft-nvrtc-cache-v1");
    field(source.name.as_bytes());
    field(source.text.as_bytes());
    for (name, text) in &source.headers {
        field(name.as_bytes());
        field(text.as_bytes());
    }
    for option in options {
        field(option.as_bytes());
    }
    field(&version.0.to_le_bytes());
    field(&version.1.to_le_bytes());
    hex::encode(hash.finalize())
}

/// Compiles `source`, or reads the CUBIN from `cache_dir` when an identical compilation was
/// cached before. Cache I/O failures are logged and fall back to compiling.
pub fn compile(source: &KernelSource, options: &CompileOptions, cache_dir: &Path) -> Result<CompiledKernel, GpuError> {
    let all_options = full_options(options)?;
    let key = cache_key(source, &all_options, nvrtc_version()?);
    let path = cache_dir.join(format!("{key}.cubin"));
    if let Ok(cubin) = std::fs::read(&path) {
        if cubin.starts_with(b"\x7fELF") {
            return Ok(CompiledKernel { cubin, from_cache: true, key });
        }
        tracing::warn!("ignoring corrupt kernel cache entry {}", path.display());
    }
    let (cubin, _) = compile_uncached(source, &all_options, &options.arch)?;
    if let Err(e) = store(cache_dir, &path, &cubin) {
        tracing::warn!("could not cache kernel: {e}");
    }
    Ok(CompiledKernel { cubin, from_cache: false, key })
}

fn store(dir: &Path, path: &Path, cubin: &[u8]) -> Result<(), GpuError> {
    let io = |source| GpuError::Cache { path: path.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = dir.join(format!(".tmp-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::write(&tmp, cubin).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        let _ = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn c_string(what: &str, s: &str) -> Result<CString, GpuError> {
    CString::new(s).map_err(|_| GpuError::InvalidArgument(format!("{what} contains a NUL byte")))
}

/// Compiles `source` again (never from the cache: the report is ptxas's log of this
/// compilation) and returns what ptxas reported for every function.
pub fn kernel_resources(source: &KernelSource, options: &CompileOptions) -> Result<Vec<KernelResources>, GpuError> {
    let mut all_options = full_options(options)?;
    all_options.push("--ptxas-options=--verbose".to_string());
    // NVRTC caches compiled programs on disk (CUDA 12.9+), and a cache hit runs no ptxas, so
    // its report is empty: seen as every second `weft selftest` of a GPU machine failing this
    // check, also with an unused macro unique to the call (the key is not the options). An
    // empty kernel unique to the call, appended to the source, makes each compile a miss.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut source = source.clone();
    source.text.push_str(&format!(
        "\nextern \"C\" __global__ void weft_ptxas_report_{}_{nanos}_{call}() {{}}\n",
        std::process::id()
    ));
    let source = &source;
    let (_, log) = compile_uncached(source, &all_options, &options.arch)?;
    let kernels = parse_ptxas_info(&log);
    if kernels.is_empty() {
        return Err(GpuError::Compile {
            source_name: source.name.clone(),
            arch: options.arch.clone(),
            log: format!("ptxas reported no function (log: {log:?})"),
        });
    }
    Ok(kernels)
}

/// Parses ptxas's `--verbose` report: a `Function properties for <name>` line, then lines
/// with `N bytes stack frame, N bytes spill stores, N bytes spill loads` and `Used N
/// registers`. Lines it does not know are skipped.
pub fn parse_ptxas_info(log: &str) -> Vec<KernelResources> {
    // The number just before `unit` on `line` (0 if there is none).
    fn number_before(line: &str, unit: &str) -> u32 {
        line.split(unit)
            .next()
            .and_then(|before| before.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
    let mut kernels: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some((_, name)) = line.split_once("Function properties for ") {
            kernels.push(KernelResources { name: name.trim().to_string(), ..KernelResources::default() });
        } else if let Some(k) = kernels.last_mut() {
            if line.contains("bytes stack frame") {
                k.stack_frame_bytes = number_before(line, "bytes stack frame");
                k.spill_store_bytes = number_before(line, "bytes spill stores");
                k.spill_load_bytes = number_before(line, "bytes spill loads");
            } else if line.contains("Used ") && line.contains(" registers") {
                k.registers = number_before(line, "registers");
            }
        }
    }
    kernels
}

fn compile_uncached(source: &KernelSource, options: &[String], arch: &str) -> Result<(Vec<u8>, String), GpuError> {
    let text = c_string("kernel source", &source.text)?;
    let name = c_string("kernel name", &source.name)?;
    let header_texts = source.headers.iter().map(|(_, t)| c_string("header", t)).collect::<Result<Vec<_>, _>>()?;
    let header_names = source.headers.iter().map(|(n, _)| c_string("header name", n)).collect::<Result<Vec<_>, _>>()?;
    let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|c| c.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let c_options = options.iter().map(|o| c_string("option", o)).collect::<Result<Vec<_>, _>>()?;
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|c| c.as_ptr()).collect();

    let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: all strings are NUL-terminated and outlive the program (dropped at function end).
    nvrtc_check("nvrtcCreateProgram", unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            text.as_ptr(),
            name.as_ptr(),
            text_ptrs.len() as c_int,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    })?;
    let program = Program(raw);
    // SAFETY: valid program and option array.
    let compiled = unsafe { sys::nvrtcCompileProgram(program.0, option_ptrs.len() as c_int, option_ptrs.as_ptr()) };
    if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(GpuError::Compile {
            source_name: source.name.clone(),
            arch: arch.to_string(),
            log: log(&program)?,
        });
    }
    let mut size = 0usize;
    // SAFETY: writes one usize.
    nvrtc_check("nvrtcGetCUBINSize", unsafe { sys::nvrtcGetCUBINSize(program.0, &mut size) })?;
    let mut cubin = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes as NVRTC asked for.
    nvrtc_check("nvrtcGetCUBIN", unsafe { sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast()) })?;
    Ok((cubin, log(&program)?))
}

fn log(program: &Program) -> Result<String, GpuError> {
    let mut size = 0usize;
    // SAFETY: writes one usize.
    nvrtc_check("nvrtcGetProgramLogSize", unsafe { sys::nvrtcGetProgramLogSize(program.0, &mut size) })?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: buffer of the size NVRTC reported.
    nvrtc_check("nvrtcGetProgramLog", unsafe { sys::nvrtcGetProgramLog(program.0, buf.as_mut_ptr().cast()) })?;
    Ok(String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_reports_parse_per_function() {
        let log = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'weft_allreduce_hb' for 'sm_90'
ptxas info    : Function properties for weft_allreduce_hb
ptxas         .     656 bytes stack frame, 104 bytes spill stores, 120 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 656 bytes cumulative stack size
ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 72 registers, used 0 barriers
ptxas info    : Compile time = 25.480 ms
";
        let hb = KernelResources {
            name: "weft_allreduce_hb".into(),
            registers: 64,
            stack_frame_bytes: 656,
            spill_store_bytes: 104,
            spill_load_bytes: 120,
        };
        let k = KernelResources { name: "k".into(), registers: 72, ..KernelResources::default() };
        assert_eq!(parse_ptxas_info(log), vec![hb, k]);
        assert!(parse_ptxas_info("nothing to see").is_empty());
    }

    fn source(text: &str) -> KernelSource {
        KernelSource { name: "t.cu".into(), text: text.into(), headers: vec![("h.cuh".into(), "// h".into())] }
    }

    #[test]
    fn cache_key_changes_with_every_input() {
        let base = source("a");
        let opts = vec!["--gpu-architecture=sm_90".to_string()];
        let k = cache_key(&base, &opts, (13, 0));
        let mut header_changed = base.clone();
        header_changed.headers[0].1.push('x');
        assert_ne!(k, cache_key(&header_changed, &opts, (13, 0)));
        assert_ne!(k, cache_key(&source("b"), &opts, (13, 0)));
        assert_ne!(k, cache_key(&base, &["--gpu-architecture=sm_80".to_string()], (13, 0)));
        assert_ne!(k, cache_key(&base, &opts, (13, 1)));
        assert_eq!(k, cache_key(&source("a"), &opts, (13, 0)));
    }

    #[test]
    fn bad_architecture_is_rejected_before_nvrtc() {
        let opts = CompileOptions { arch: "x86".into(), extra: vec![] };
        assert!(matches!(full_options(&opts), Err(GpuError::InvalidArgument(_))));
    }
}

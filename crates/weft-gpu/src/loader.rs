//! Finding CUDA at run time: the driver library, NVRTC and the CUDA headers NVRTC needs.
//!
//! cudarc resolves libraries by name through `dlopen`, and panics when none loads. We check
//! first, and we pre-load NVRTC from known installation folders (including the pip wheel layout
//! `site-packages/nvidia/cu13`) by full path so that cudarc's later `dlopen` by name finds the
//! already-loaded library without `LD_LIBRARY_PATH`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::GpuError;

/// Candidate roots of a CUDA installation, most specific first: `WEFT_CUDA_HOME`, `CUDA_HOME`,
/// `CUDA_PATH`, `/usr/local/cuda`, then every `nvidia/cu13` folder of a Python installation we
/// know how to find (`VIRTUAL_ENV`, `/opt/*/.venv`, `/usr/local/lib/python3*`, `~/.local`).
pub fn cuda_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for var in ["WEFT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            roots.push(PathBuf::from(v));
        }
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    let mut python_prefixes: Vec<PathBuf> = Vec::new();
    if let Some(v) = std::env::var_os("VIRTUAL_ENV") {
        python_prefixes.push(PathBuf::from(v).join("lib"));
    }
    for parent in read_dir_paths(Path::new("/opt")) {
        python_prefixes.push(parent.join(".venv/lib"));
    }
    python_prefixes.push(PathBuf::from("/usr/local/lib"));
    python_prefixes.push(PathBuf::from("/usr/lib"));
    if let Some(home) = std::env::var_os("HOME") {
        python_prefixes.push(PathBuf::from(home).join(".local/lib"));
    }
    for prefix in python_prefixes {
        for py in read_dir_paths(&prefix) {
            let is_python = py.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3"));
            if is_python {
                for packages in ["site-packages", "dist-packages"] {
                    let root = py.join(packages).join("nvidia/cu13");
                    if root.is_dir() {
                        roots.push(root);
                    }
                }
            }
        }
    }
    roots
}

fn read_dir_paths(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths
}

/// Include folders for NVRTC: the first root holding `include/cuda_fp16.h`, plus its
/// `include/cccl` when present (CUDA 13 keeps CCCL there).
pub fn cuda_include_dirs() -> Result<Vec<PathBuf>, GpuError> {
    let roots = cuda_roots();
    for root in &roots {
        let include = root.join("include");
        if include.join("cuda_fp16.h").is_file() {
            let mut dirs = vec![include.clone()];
            if include.join("cccl").is_dir() {
                dirs.push(include.join("cccl"));
            }
            return Ok(dirs);
        }
    }
    Err(GpuError::HeadersMissing { searched: roots.iter().map(|r| r.join("include")).collect() })
}

/// Makes libcuda loadable or returns the names that were tried.
pub(crate) fn load_driver() -> Result<(), Vec<String>> {
    // SAFETY: is_culib_present only tries dlopen on candidate names and drops what it opened.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(cudarc::get_lib_name_candidates("cuda"))
    }
}

/// Makes libnvrtc loadable (pre-loading it from a CUDA root when it is not on the loader's
/// path), once per process.
pub fn load_nvrtc() -> Result<(), GpuError> {
    static LOADED: OnceLock<Result<(), Vec<String>>> = OnceLock::new();
    let outcome = LOADED.get_or_init(|| {
        let mut searched = Vec::new();
        for root in cuda_roots() {
            for lib_dir in ["lib64", "lib"] {
                let dir = root.join(lib_dir);
                let path = dir.join("libnvrtc.so.13");
                searched.push(path.display().to_string());
                if path.is_file() && preload(&dir, &path) {
                    return Ok(());
                }
            }
        }
        // SAFETY: only tries dlopen on candidate names.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Ok(());
        }
        searched.extend(cudarc::get_lib_name_candidates("nvrtc"));
        Err(searched)
    });
    outcome.clone().map_err(|searched| GpuError::LibraryMissing { library: "libnvrtc", searched })
}

/// Loads NVRTC's builtins and NVRTC itself by full path and keeps them loaded for the life of
/// the process, so a later `dlopen("libnvrtc.so.13")` resolves to them.
fn preload(dir: &Path, nvrtc: &Path) -> bool {
    static KEEP: OnceLock<Vec<libloading::Library>> = OnceLock::new();
    let mut libs = Vec::new();
    for entry in read_dir_paths(dir) {
        let is_builtins =
            entry.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libnvrtc-builtins.so.13"));
        if is_builtins {
            // SAFETY: loading NVIDIA's NVRTC builtins runs no initialisers with preconditions.
            if let Ok(lib) = unsafe { libloading::Library::new(&entry) } {
                libs.push(lib);
                break;
            }
        }
    }
    // SAFETY: as above, for libnvrtc itself.
    match unsafe { libloading::Library::new(nvrtc) } {
        Ok(lib) => {
            libs.push(lib);
            KEEP.set(libs).is_ok()
        }
        Err(e) => {
            tracing::debug!("could not load {}: {e}", nvrtc.display());
            false
        }
    }
}

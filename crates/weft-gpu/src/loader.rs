//! Finding CUDA at run time: the driver library, NVRTC and the CUDA headers NVRTC needs.
//!
//! cudarc resolves libraries by name through `dlopen`, and panics when none loads. We check
//! first, and we pre-load NVRTC from known installation folders (including the pip wheel layout
//! `site-packages/nvidia/cu13`) by full path so that cudarc's later `dlopen` by name finds the
//! already-loaded library without `LD_LIBRARY_PATH`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::GpuError;

/// Where the set-up command (`scripts/run.sh`, `scripts/cuda-wheels.sh`) installs NVRTC and the
/// CUDA headers, relative to the repository root.
pub const PROJECT_CUDA_DIR: &str = ".deps/cuda13/nvidia/cu13";

/// Candidate roots of a CUDA installation, most specific first: `WEFT_CUDA_HOME`, `CUDA_HOME`,
/// `CUDA_PATH`, `/usr/local/cuda`, the project's own [`PROJECT_CUDA_DIR`] in a repository that
/// holds the running binary (`target/release/weft`, `target/nccl/libnccl.so.2`, ...) or the
/// working directory, then every `nvidia/cu13` folder of a Python installation we know how to
/// find (`VIRTUAL_ENV`, `/opt/*/.venv`, `/usr/local/lib/python3*`, `~/.local`).
pub fn cuda_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for var in ["WEFT_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            roots.push(PathBuf::from(v));
        }
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    let starts = [loaded_object_path(), std::env::current_exe().ok(), std::env::current_dir().ok()];
    for root in project_cuda_dirs(starts.iter().flatten().map(PathBuf::as_path)) {
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
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

/// The project CUDA folders ([`PROJECT_CUDA_DIR`]) that exist in an ancestor of any of `starts`,
/// nearest first, each once.
pub fn project_cuda_dirs<'a>(starts: impl IntoIterator<Item = &'a Path>) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for start in starts {
        for dir in start.ancestors() {
            let candidate = dir.join(PROJECT_CUDA_DIR);
            if candidate.is_dir() && !found.contains(&candidate) {
                found.push(candidate);
            }
        }
    }
    found
}

/// The file of the shared object (or executable) that holds this code: `libnccl.so.2` when
/// weft runs inside another program, so its repository's `.deps` is found too.
fn loaded_object_path() -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let here = loaded_object_path as *const () as *const libc::c_void;
    // SAFETY: dladdr only reads the address and fills `info`; it returns 0 when the address
    // lies in no loaded object, in which case `info` is not read.
    let found = unsafe { libc::dladdr(here, info.as_mut_ptr()) };
    if found == 0 {
        return None;
    }
    // SAFETY: dladdr succeeded, so `info` is initialised.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a non-null dli_fname is a NUL-terminated path owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes()));
    path.canonicalize().ok()
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
    if unsafe { cudarc::driver::sys::is_culib_present() } { Ok(()) } else { Err(library_names("cuda")) }
}

/// The file names cudarc tries for `lib` on this system, each once: cudarc's list also holds
/// Windows forms (`libcuda64_13.so`), which no Linux installation has and an error should not list.
fn library_names(lib: &str) -> Vec<String> {
    let stem = format!("lib{lib}.so");
    let mut names: Vec<String> = Vec::new();
    for name in cudarc::get_lib_name_candidates(lib) {
        let shared_object = name == stem || name.strip_prefix(&stem).is_some_and(|v| v.starts_with('.'));
        if shared_object && !names.contains(&name) {
            names.push(name);
        }
    }
    names
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
        searched.extend(library_names("nvrtc"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_cuda_dirs_are_found_above_a_binary_nearest_first_and_once() {
        let base = std::env::temp_dir().join(format!("weft-loader-{}", std::process::id()));
        let outer = base.join("outer");
        let repo = outer.join("repo");
        let binary_dir = repo.join("target/release");
        for dir in [outer.join(PROJECT_CUDA_DIR), repo.join(PROJECT_CUDA_DIR), binary_dir.clone()] {
            std::fs::create_dir_all(dir).expect("temp dirs");
        }
        let binary = binary_dir.join("weft");
        let found = project_cuda_dirs([binary.as_path(), repo.as_path(), Path::new("/nonexistent/x")]);
        assert_eq!(found, vec![repo.join(PROJECT_CUDA_DIR), outer.join(PROJECT_CUDA_DIR)]);
        assert!(project_cuda_dirs([base.join("elsewhere").as_path()]).iter().all(|d| !d.starts_with(&outer)));
        std::fs::remove_dir_all(&base).expect("clean up");
    }

    #[test]
    fn missing_library_lists_only_linux_names_once() {
        let names = library_names("cuda");
        assert!(!names.is_empty());
        assert!(names.iter().all(|n| n.contains(".so") && !n.contains("64_")), "{names:?}");
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }

    #[test]
    fn the_object_holding_this_code_is_found() {
        let path = loaded_object_path().expect("dladdr names this test binary");
        assert!(path.is_file(), "{}", path.display());
    }
}

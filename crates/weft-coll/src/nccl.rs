//! The real NCCL, loaded at run time from `libnccl.so.2`, as the baseline `weft bench` measures
//! against in the same run. Only the calls the benchmark needs.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use weft_gpu::{DevicePtr, Stream};
use weft_types::{DataType, ReduceOp};

type Comm = *mut c_void;
type GetUniqueId = unsafe extern "C" fn(*mut [u8; 128]) -> c_int;
type CommInitRank = unsafe extern "C" fn(*mut Comm, c_int, [u8; 128], c_int) -> c_int;
type CommDestroy = unsafe extern "C" fn(Comm) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type AllReduce = unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, *mut c_void) -> c_int;
type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

/// A loaded NCCL library.
pub struct Nccl {
    path: PathBuf,
    get_unique_id: GetUniqueId,
    comm_init_rank: CommInitRank,
    comm_destroy: CommDestroy,
    get_error_string: GetErrorString,
    all_reduce: AllReduce,
    get_version: GetVersion,
    _lib: libloading::Library,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl").field("path", &self.path).finish()
    }
}

/// Where `libnccl.so.2` is looked for: `WEFT_NCCL_LIB` (from `env`), the loader's search
/// path, then the pip package `nvidia-nccl-cu13` of the Python installations weft knows.
pub fn candidates(env: &weft_core::Env) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = env.var("WEFT_NCCL_LIB").filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    out.push(PathBuf::from("libnccl.so.2"));
    for root in weft_gpu::loader::cuda_roots() {
        // .../site-packages/nvidia/cu13 -> .../site-packages/nvidia/nccl/lib
        if let Some(nvidia) = root.parent() {
            out.push(nvidia.join("nccl/lib/libnccl.so.2"));
        }
        out.push(root.join("lib/libnccl.so.2"));
    }
    for prefix in ["/opt/torch/.venv/lib", "/usr/local/lib", "/usr/lib"] {
        if let Ok(entries) = std::fs::read_dir(prefix) {
            for e in entries.flatten() {
                out.push(e.path().join("site-packages/nvidia/nccl/lib/libnccl.so.2"));
            }
        }
    }
    out
}

fn check(nccl: &Nccl, call: &str, result: c_int) -> Result<(), String> {
    if result == 0 {
        return Ok(());
    }
    // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
    let text = unsafe { (nccl.get_error_string)(result) };
    let text = if text.is_null() {
        String::from("unknown")
    } else {
        // SAFETY: non-null static C string.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    };
    Err(format!("{call} failed: {text} ({result})"))
}

impl Nccl {
    /// Loads the first candidate that opens and exports what we need.
    pub fn load(env: &weft_core::Env) -> Result<Self, String> {
        let mut tried = Vec::new();
        for path in candidates(env) {
            match Self::load_from(&path) {
                Ok(n) => return Ok(n),
                Err(e) => tried.push(format!("{}: {e}", path.display())),
            }
        }
        Err(format!("libnccl.so.2 not found (set WEFT_NCCL_LIB); tried {}", tried.join("; ")))
    }

    /// Loads NCCL from `path`.
    pub fn load_from(path: &Path) -> Result<Self, String> {
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($name:literal, $t:ty) => {
                // SAFETY: the symbol has this C signature in nccl.h 2.28 (checked by name).
                *unsafe { lib.get::<$t>($name) }.map_err(|e| e.to_string())?
            };
        }
        Ok(Self {
            path: path.to_path_buf(),
            get_unique_id: sym!(b"ncclGetUniqueId\0", GetUniqueId),
            comm_init_rank: sym!(b"ncclCommInitRank\0", CommInitRank),
            comm_destroy: sym!(b"ncclCommDestroy\0", CommDestroy),
            get_error_string: sym!(b"ncclGetErrorString\0", GetErrorString),
            all_reduce: sym!(b"ncclAllReduce\0", AllReduce),
            get_version: sym!(b"ncclGetVersion\0", GetVersion),
            _lib: lib,
        })
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `ncclGetVersion` (e.g. 22809).
    pub fn version(&self) -> Result<i32, String> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        check(self, "ncclGetVersion", unsafe { (self.get_version)(&mut v) })?;
        Ok(v)
    }

    /// A fresh `ncclUniqueId` (call on one rank, share with the others).
    pub fn unique_id(&self) -> Result<[u8; 128], String> {
        let mut id = [0u8; 128];
        // SAFETY: writes 128 bytes into `id`.
        check(self, "ncclGetUniqueId", unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id)
    }

    /// Joins the communicator of `id` as `rank` of `ranks` on the current CUDA context's device.
    pub fn init_rank(&self, id: [u8; 128], rank: usize, ranks: usize) -> Result<NcclComm<'_>, String> {
        let mut comm: Comm = std::ptr::null_mut();
        let (r, n) =
            (c_int::try_from(rank).map_err(|e| e.to_string())?, c_int::try_from(ranks).map_err(|e| e.to_string())?);
        // SAFETY: out-pointer to a local; id passed by value as the ABI requires.
        check(self, "ncclCommInitRank", unsafe { (self.comm_init_rank)(&mut comm, n, id, r) })?;
        Ok(NcclComm { nccl: self, comm })
    }
}

/// An NCCL communicator; destroyed on drop.
pub struct NcclComm<'a> {
    nccl: &'a Nccl,
    comm: Comm,
}

impl std::fmt::Debug for NcclComm<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclComm").finish()
    }
}

impl NcclComm<'_> {
    /// `ncclAllReduce` on `stream`.
    ///
    /// # Safety
    /// `send`/`recv` must be valid device memory of this rank's GPU for `count` elements until
    /// the stream's work is done.
    pub unsafe fn all_reduce(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count: usize,
        dtype: DataType,
        op: ReduceOp,
        stream: &Stream,
    ) -> Result<(), String> {
        // DataType and ReduceOp use NCCL's numbering.
        // SAFETY: caller contract for the buffers; comm and stream are live.
        let r = unsafe {
            (self.nccl.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                dtype as c_int,
                op as c_int,
                self.comm,
                stream.raw().cast(),
            )
        };
        check(self.nccl, "ncclAllReduce", r)
    }
}

impl Drop for NcclComm<'_> {
    fn drop(&mut self) {
        // SAFETY: the comm was created by ncclCommInitRank and is destroyed once.
        let _ = unsafe { (self.nccl.comm_destroy)(self.comm) };
    }
}

//! The real NCCL, loaded at run time from `libnccl.so.2`: the baseline `weft bench` measures
//! against in the same run, and the fallback of weft's own `libnccl.so.2` (crate `weft-nccl`,
//! which loads it with `RTLD_DEEPBIND` through [`Nccl::load_from_flags`] and resolves the rest
//! of the API with [`Nccl::symbol`]). Safe calls on typed device views for what the benchmark
//! needs ([`NcclComm::run`]: every collective as nccl-tests runs it, AllToAll and SendRecv as
//! groups of sends and receives), memory from `ncclMemAlloc` as a [`DeviceBuffer`], and
//! windows. [`Nccl::symbol`] and [`Nccl::adopt`] are the raw layer weft-nccl builds on.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use weft_gpu::{Device, DeviceBuffer, DeviceMemory, DevicePtr, Stream};
use weft_types::{DataType, ReduceOp};

pub use crate::nccl_typed::{NcclBuffers, NcclCall};

type Comm = *mut c_void;
type GetUniqueId = unsafe extern "C" fn(*mut [u8; 128]) -> c_int;
type CommInitRank = unsafe extern "C" fn(*mut Comm, c_int, [u8; 128], c_int) -> c_int;
type CommDestroy = unsafe extern "C" fn(Comm) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type Group = unsafe extern "C" fn() -> c_int;
type CudaStream = *mut c_void;

/// What failed while loading or calling the real NCCL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NcclLibError {
    /// No candidate library loaded ([`candidates`]).
    #[error("libnccl.so.2 not found (set WEFT_NCCL_LIB); tried {}", .tried.join("; "))]
    NotFound {
        /// Each candidate with why it failed.
        tried: Vec<String>,
    },
    /// `dlopen` refused the library.
    #[error("cannot load {}: {detail}", .path.display())]
    Load {
        /// The library.
        path: PathBuf,
        /// The loader's message.
        detail: String,
    },
    /// The library lacks an entry point.
    #[error("{symbol}: {detail}")]
    MissingSymbol {
        /// The entry point.
        symbol: String,
        /// The loader's message.
        detail: String,
    },
    /// A call returned an error code.
    #[error("{call} failed: {text} ({code})")]
    Call {
        /// The entry point.
        call: &'static str,
        /// Its `ncclResult_t`.
        code: c_int,
        /// `ncclGetErrorString(code)`.
        text: String,
    },
    /// The GPU refused a step around the call (binding the device, adopting memory).
    #[error(transparent)]
    Gpu(#[from] weft_gpu::GpuError),
    /// The buffers do not fit the call (the typed API's length rules).
    #[error(transparent)]
    Arguments(#[from] Box<crate::CollError>),
    /// A rank or count that does not fit NCCL's `int`.
    #[error("{what} {value} does not fit NCCL's int")]
    OutOfRange {
        /// What the number is.
        what: &'static str,
        /// The number.
        value: usize,
    },
    /// An operator NCCL has no built-in for.
    #[error("{} is no built-in NCCL operator (the baseline runs only those)", .0.name())]
    UnsupportedOp(ReduceOp),
}

/// How a Rust argument becomes the C argument of an NCCL call.
trait ToC<C> {
    fn to_c(self) -> Result<C, NcclLibError>;
}

impl ToC<*const c_void> for DevicePtr {
    fn to_c(self) -> Result<*const c_void, NcclLibError> {
        Ok(self as *const c_void)
    }
}

impl ToC<*mut c_void> for DevicePtr {
    fn to_c(self) -> Result<*mut c_void, NcclLibError> {
        Ok(self as *mut c_void)
    }
}

impl ToC<usize> for usize {
    fn to_c(self) -> Result<usize, NcclLibError> {
        Ok(self)
    }
}

/// Ranks (root, peer).
impl ToC<c_int> for usize {
    fn to_c(self) -> Result<c_int, NcclLibError> {
        c_int::try_from(self).map_err(|_| NcclLibError::OutOfRange { what: "rank", value: self })
    }
}

// DataType and NCCL's built-in ReduceOps use NCCL's numbering.
impl ToC<c_int> for DataType {
    fn to_c(self) -> Result<c_int, NcclLibError> {
        Ok(self as c_int)
    }
}

impl ToC<c_int> for ReduceOp {
    fn to_c(self) -> Result<c_int, NcclLibError> {
        if ReduceOp::BUILTIN.contains(&self) { Ok(self as c_int) } else { Err(NcclLibError::UnsupportedOp(self)) }
    }
}

/// Declares the NCCL calls that take `(args..., comm, stream)`, each once: its function pointer
/// in [`Calls`], its symbol lookup, and its raw `unsafe` method on [`NcclComm`] (under the
/// typed [`NcclComm::run`]).
macro_rules! stream_calls {
    ($(
        $(#[$doc:meta])*
        fn $method:ident = $symbol:literal ($($arg:ident: $ty:ty => $c:ty),* $(,)?);
    )*) => {
        /// The stream-ordered NCCL entry points, resolved once.
        struct Calls {
            $($method: unsafe extern "C" fn($($c,)* Comm, CudaStream) -> c_int,)*
        }

        impl Calls {
            fn load(lib: &libloading::Library) -> Result<Self, NcclLibError> {
                Ok(Self {
                    $($method: {
                        let name = concat!($symbol, "\0").as_bytes();
                        // SAFETY: the symbol has this C signature in nccl.h 2.28 (checked by name).
                        *unsafe { lib.get::<unsafe extern "C" fn($($c,)* Comm, CudaStream) -> c_int>(name) }
                            .map_err(|e| NcclLibError::MissingSymbol { symbol: $symbol.into(), detail: e.to_string() })?
                    },)*
                })
            }
        }

        impl NcclComm<'_> {
            $(
                $(#[$doc])*
                ///
                /// # Safety
                /// Every pointer must be device memory of this rank's GPU, valid for the counts
                /// given until the stream's work is done; every rank of the communicator makes
                /// the matching call.
                #[allow(clippy::too_many_arguments, reason = "NCCL's own argument list")]
                pub(crate) unsafe fn $method(&self, $($arg: $ty,)* stream: &Stream) -> Result<(), NcclLibError> {
                    $(let $arg: $c = ToC::<$c>::to_c($arg)?;)*
                    // SAFETY: the caller's contract covers the buffers; comm and stream are live.
                    let r = unsafe { (self.nccl.calls.$method)($($arg,)* self.comm, stream.raw().cast()) };
                    check(self.nccl, $symbol, r)
                }
            )*
        }
    };
}

stream_calls! {
    /// `ncclAllReduce` on `stream`.
    fn all_reduce = "ncclAllReduce"(
        send: DevicePtr => *const c_void, recv: DevicePtr => *mut c_void, count: usize => usize,
        dtype: DataType => c_int, op: ReduceOp => c_int,
    );
    /// `ncclAllGather` on `stream` (`send_count` elements from every rank).
    fn all_gather = "ncclAllGather"(
        send: DevicePtr => *const c_void, recv: DevicePtr => *mut c_void, send_count: usize => usize,
        dtype: DataType => c_int,
    );
    /// `ncclReduceScatter` on `stream` (`recv_count` elements to every rank).
    fn reduce_scatter = "ncclReduceScatter"(
        send: DevicePtr => *const c_void, recv: DevicePtr => *mut c_void, recv_count: usize => usize,
        dtype: DataType => c_int, op: ReduceOp => c_int,
    );
    /// `ncclBroadcast` from `root` on `stream`.
    fn broadcast = "ncclBroadcast"(
        send: DevicePtr => *const c_void, recv: DevicePtr => *mut c_void, count: usize => usize,
        dtype: DataType => c_int, root: usize => c_int,
    );
    /// `ncclReduce` to `root` on `stream`.
    fn reduce = "ncclReduce"(
        send: DevicePtr => *const c_void, recv: DevicePtr => *mut c_void, count: usize => usize,
        dtype: DataType => c_int, op: ReduceOp => c_int, root: usize => c_int,
    );
    /// `ncclSend` to `peer` on `stream` (inside a group when paired with receives).
    fn send = "ncclSend"(send: DevicePtr => *const c_void, count: usize => usize, dtype: DataType => c_int, peer: usize => c_int);
    /// `ncclRecv` from `peer` on `stream` (inside a group when paired with sends).
    fn recv = "ncclRecv"(recv: DevicePtr => *mut c_void, count: usize => usize, dtype: DataType => c_int, peer: usize => c_int);
}

/// A loaded NCCL library.
pub struct Nccl {
    path: PathBuf,
    get_unique_id: GetUniqueId,
    comm_init_rank: CommInitRank,
    comm_destroy: CommDestroy,
    get_error_string: GetErrorString,
    get_version: GetVersion,
    group_start: Group,
    group_end: Group,
    calls: Calls,
    /// Shared with the buffers of `ncclMemAlloc`, whose release calls into it.
    lib: Arc<libloading::Library>,
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
    if let Some(p) = env.var(&weft_core::env::vars::WEFT_NCCL_LIB).filter(|p| !p.is_empty()) {
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

fn check(nccl: &Nccl, call: &'static str, result: c_int) -> Result<(), NcclLibError> {
    if result == 0 {
        return Ok(());
    }
    Err(NcclLibError::Call { call, code: result, text: nccl.error_string(result) })
}

fn load_error(path: &Path, e: &libloading::Error) -> NcclLibError {
    NcclLibError::Load { path: path.to_path_buf(), detail: e.to_string() }
}

impl Nccl {
    /// Loads the first candidate that opens and exports what we need.
    pub fn load(env: &weft_core::Env) -> Result<Self, NcclLibError> {
        let mut tried = Vec::new();
        for path in candidates(env) {
            match Self::load_from(&path) {
                Ok(n) => return Ok(n),
                Err(e) => tried.push(format!("{}: {e}", path.display())),
            }
        }
        Err(NcclLibError::NotFound { tried })
    }

    /// Loads NCCL from `path`.
    pub fn load_from(path: &Path) -> Result<Self, NcclLibError> {
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| load_error(path, &e))?;
        Self::from_library(path, lib)
    }

    /// Loads NCCL from `path` with explicit `dlopen` flags (e.g. `RTLD_NOW | RTLD_LOCAL |
    /// RTLD_DEEPBIND`, so that a library exporting the same names, loaded first, does not
    /// capture NCCL's calls to itself).
    pub fn load_from_flags(path: &Path, flags: c_int) -> Result<Self, NcclLibError> {
        // SAFETY: as for `load_from`; the flags only change symbol resolution.
        let lib =
            unsafe { libloading::os::unix::Library::open(Some(path), flags) }.map_err(|e| load_error(path, &e))?;
        Self::from_library(path, lib.into())
    }

    fn from_library(path: &Path, lib: libloading::Library) -> Result<Self, NcclLibError> {
        macro_rules! sym {
            ($name:literal, $t:ty) => {
                // SAFETY: the symbol has this C signature in nccl.h 2.28 (checked by name).
                *unsafe { lib.get::<$t>(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| NcclLibError::MissingSymbol { symbol: $name.into(), detail: e.to_string() })?
            };
        }
        Ok(Self {
            path: path.to_path_buf(),
            get_unique_id: sym!("ncclGetUniqueId", GetUniqueId),
            comm_init_rank: sym!("ncclCommInitRank", CommInitRank),
            comm_destroy: sym!("ncclCommDestroy", CommDestroy),
            get_error_string: sym!("ncclGetErrorString", GetErrorString),
            get_version: sym!("ncclGetVersion", GetVersion),
            group_start: sym!("ncclGroupStart", Group),
            group_end: sym!("ncclGroupEnd", Group),
            calls: Calls::load(&lib)?,
            lib: Arc::new(lib),
        })
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Resolves the entry point `name` (without the trailing NUL) of the loaded library.
    ///
    /// # Safety
    /// `T` must be the `unsafe extern "C" fn` type that nccl.h declares for `name`.
    pub unsafe fn symbol<T: Copy>(&self, name: &str) -> Result<T, NcclLibError> {
        let mut c_name = Vec::with_capacity(name.len() + 1);
        c_name.extend_from_slice(name.as_bytes());
        c_name.push(0);
        // SAFETY: the caller guarantees `T` matches the symbol's C type; the library outlives
        // `self`, and the copied function pointer is only used while `self` lives.
        unsafe { self.lib.get::<T>(c_name.as_slice()) }
            .map(|s| *s)
            .map_err(|e| NcclLibError::MissingSymbol { symbol: name.into(), detail: e.to_string() })
    }

    /// `ncclGetErrorString(code)`.
    pub fn error_string(&self, code: c_int) -> String {
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
        let text = unsafe { (self.get_error_string)(code) };
        if text.is_null() {
            return String::from("unknown");
        }
        // SAFETY: non-null static C string.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }

    /// Takes ownership of a communicator this library created by another entry point (e.g.
    /// `ncclCommSplit`): it is destroyed on drop.
    ///
    /// # Safety
    /// `comm` must be a live communicator of this library that nothing else destroys.
    pub unsafe fn adopt(&self, comm: *mut c_void) -> NcclComm<'_> {
        NcclComm { nccl: self, comm }
    }

    /// `ncclGetVersion` (e.g. 22809).
    pub fn version(&self) -> Result<i32, NcclLibError> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        check(self, "ncclGetVersion", unsafe { (self.get_version)(&mut v) })?;
        Ok(v)
    }

    /// A fresh `ncclUniqueId` (call on one rank, share with the others).
    pub fn unique_id(&self) -> Result<[u8; 128], NcclLibError> {
        let mut id = [0u8; 128];
        // SAFETY: writes 128 bytes into `id`.
        check(self, "ncclGetUniqueId", unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id)
    }

    /// `ncclGroupStart`: calls until [`Nccl::group_end`] are issued together.
    pub fn group_start(&self) -> Result<(), NcclLibError> {
        // SAFETY: no arguments; NCCL keeps the group depth per thread.
        check(self, "ncclGroupStart", unsafe { (self.group_start)() })
    }

    /// `ncclGroupEnd`: issues the calls made since the matching [`Nccl::group_start`].
    pub fn group_end(&self) -> Result<(), NcclLibError> {
        // SAFETY: no arguments; NCCL reports an unmatched end as an error code.
        check(self, "ncclGroupEnd", unsafe { (self.group_end)() })
    }

    /// Runs `calls` between `ncclGroupStart` and `ncclGroupEnd`; the group is closed even when
    /// `calls` fails.
    pub fn group(&self, calls: impl FnOnce() -> Result<(), NcclLibError>) -> Result<(), NcclLibError> {
        self.group_start()?;
        let result = calls();
        let end = self.group_end();
        result.and(end)
    }

    /// Joins the communicator of `id` as `rank` of `ranks` on the current CUDA context's device.
    pub fn init_rank(&self, id: [u8; 128], rank: usize, ranks: usize) -> Result<NcclComm<'_>, NcclLibError> {
        let mut comm: Comm = std::ptr::null_mut();
        let r = c_int::try_from(rank).map_err(|_| NcclLibError::OutOfRange { what: "rank", value: rank })?;
        let n = c_int::try_from(ranks).map_err(|_| NcclLibError::OutOfRange { what: "ranks", value: ranks })?;
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
    /// The library this communicator belongs to (for [`Nccl::group`]).
    pub fn nccl(&self) -> &Nccl {
        self.nccl
    }

    /// The `ncclComm_t` handle, for entry points called through [`Nccl::symbol`]. It stays
    /// owned by `self`.
    pub fn raw(&self) -> *mut c_void {
        self.comm
    }

    /// AllToAll as nccl-tests runs it: one group with a send of `count_per_peer` elements of
    /// block `p` of `send` to every rank `p` and a receive of block `p` of `recv` from it.
    ///
    /// # Safety
    /// `send` and `recv` must be device memory of this rank's GPU of `ranks × count_per_peer`
    /// elements each, valid until the stream's work is done; every rank of the communicator
    /// makes the matching call.
    pub(crate) unsafe fn all_to_all(
        &self,
        send: DevicePtr,
        recv: DevicePtr,
        count_per_peer: usize,
        dtype: DataType,
        ranks: usize,
        stream: &Stream,
    ) -> Result<(), NcclLibError> {
        let block = (count_per_peer * dtype.size()) as u64;
        self.nccl.group(|| {
            for p in 0..ranks {
                let offset = p as u64 * block;
                // SAFETY: block `p` lies inside `send`/`recv` by the caller's contract.
                unsafe {
                    self.send(send + offset, count_per_peer, dtype, p, stream)?;
                    self.recv(recv + offset, count_per_peer, dtype, p, stream)?;
                }
            }
            Ok(())
        })
    }
}

/// `NCCL_WIN_COLL_SYMMETRIC` (nccl.h 2.27+): the window's buffers sit at the same offset on
/// every rank, so NCCL runs its symmetric kernels on them.
pub const NCCL_WIN_COLL_SYMMETRIC: c_int = 1;

/// A window of the library's (`ncclCommWindowRegister`); deregistered on drop, which must
/// happen on every rank after the work using it completed (nccl.h's contract).
pub struct NcclWindow<'a> {
    comm: &'a NcclComm<'a>,
    win: *mut c_void,
    /// The registered memory, kept until the window is deregistered.
    _memory: Arc<DeviceMemory>,
}

impl std::fmt::Debug for NcclWindow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclWindow").field("win", &self.win).finish()
    }
}

impl Drop for NcclWindow<'_> {
    fn drop(&mut self) {
        type Deregister = unsafe extern "C" fn(Comm, *mut c_void) -> c_int;
        // SAFETY: nccl.h's signature of ncclCommWindowDeregister; the window was registered on
        // this communicator and is deregistered once.
        if let Ok(deregister) = unsafe { self.comm.nccl.symbol::<Deregister>("ncclCommWindowDeregister") } {
            // SAFETY: a window of this live communicator, deregistered once (here).
            let _ = unsafe { deregister(self.comm.comm, self.win) };
        }
    }
}

impl<'a> NcclComm<'a> {
    /// `ncclMemAlloc` of `len` bytes on `device`, the communicator's GPU; `ncclMemFree` once
    /// the buffer and the stream work using it are gone.
    pub fn mem_alloc(&self, device: &Device, len: usize) -> Result<DeviceBuffer<u8>, NcclLibError> {
        type Alloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
        type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
        // SAFETY: nccl.h's signatures of ncclMemAlloc and ncclMemFree.
        let (alloc, free) =
            unsafe { (self.nccl.symbol::<Alloc>("ncclMemAlloc")?, self.nccl.symbol::<Free>("ncclMemFree")?) };
        device.bind()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        check(self.nccl, "ncclMemAlloc", unsafe { alloc(&mut ptr, len) })?;
        let lib = Arc::clone(&self.nccl.lib);
        let release = Box::new(move |ptr: DevicePtr| {
            // The library stays loaded while its memory is alive.
            let _loaded = &lib;
            // SAFETY: a pointer ncclMemAlloc returned, freed once (when its memory drops).
            let _ = unsafe { free(ptr as *mut c_void) };
        });
        // SAFETY: `len` bytes of `device` that ncclMemAlloc returned for this buffer alone,
        // valid until ncclMemFree (`release`).
        let memory = unsafe { DeviceMemory::from_foreign(device, ptr as DevicePtr, len, release) };
        Ok(DeviceBuffer::from_memory(memory)?)
    }

    /// `ncclCommWindowRegister(memory, NCCL_WIN_COLL_SYMMETRIC)`: collective, every rank
    /// registers a buffer of the same length (NCCL 2.27+).
    pub fn window_register(&'a self, memory: &DeviceBuffer<u8>) -> Result<NcclWindow<'a>, NcclLibError> {
        type Register = unsafe extern "C" fn(Comm, *mut c_void, usize, *mut *mut c_void, c_int) -> c_int;
        // SAFETY: nccl.h's signature of ncclCommWindowRegister.
        let register = unsafe { self.nccl.symbol::<Register>("ncclCommWindowRegister") }?;
        let mut win = std::ptr::null_mut();
        let (ptr, len) = (memory.ptr() as *mut c_void, memory.len());
        // SAFETY: device memory the window keeps alive (`_memory`); writes one handle.
        let code = unsafe { register(self.comm, ptr, len, &mut win, NCCL_WIN_COLL_SYMMETRIC) };
        check(self.nccl, "ncclCommWindowRegister", code)?;
        Ok(NcclWindow { comm: self, win, _memory: Arc::clone(memory.shared_memory()) })
    }
}

impl Drop for NcclComm<'_> {
    fn drop(&mut self) {
        // SAFETY: the comm was created by ncclCommInitRank and is destroyed once.
        let _ = unsafe { (self.nccl.comm_destroy)(self.comm) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_and_ranks_convert_checked() {
        assert!(Nccl::load_from(Path::new("/nonexistent/libnccl.so.2")).is_err());
        assert!(Nccl::load_from_flags(Path::new("/nonexistent/libnccl.so.2"), 2).is_err());
        assert_eq!(ToC::<c_int>::to_c(3usize).ok(), Some(3));
        assert!(ToC::<c_int>::to_c(usize::MAX).is_err());
        assert_eq!(ToC::<c_int>::to_c(DataType::Bf16).ok(), Some(9));
    }
}

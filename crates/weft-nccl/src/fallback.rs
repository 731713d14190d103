//! The real NCCL behind weft: loaded once from `WEFT_NCCL_FALLBACK_LIB` with `RTLD_DEEPBIND`
//! (so its calls to its own entry points stay inside it even though this library exports the
//! same names), through weft-coll's loader. Every communicator gets a fallback communicator at
//! init, so sending a call to it costs nothing extra per call.

use std::collections::HashSet;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

use weft_bootstrap::Bootstrap;
use weft_coll::nccl::{Nccl, NcclComm, NcclLibError};
use weft_gpu::Device;

use crate::comm::FallbackConfig;
use crate::error::{Code, NcclError};
use crate::ffi::{cudaStream_t, ncclConfig_t, ncclResult_t, ncclUniqueId, ncclWindow_t};

type Comm = *mut c_void;

/// Declares the entry points of the fallback that weft-nccl forwards to, each resolved once
/// by name (absent in an older NCCL: `None`, and a call that needs it is an error).
macro_rules! api {
    ($($field:ident = $symbol:literal: fn($($arg:ty),*);)*) => {
        /// Entry points of the fallback library.
        #[derive(Debug)]
        pub struct Api {
            $(
                #[doc = concat!("`", $symbol, "`.")]
                pub $field: Option<unsafe extern "C" fn($($arg),*) -> ncclResult_t>,
            )*
            get_last_error: Option<unsafe extern "C" fn(Comm) -> *const c_char>,
        }

        impl Api {
            fn resolve(lib: &Nccl) -> Self {
                Self {
                    $(
                        // SAFETY: the type is the signature nccl.h 2.28 declares for the symbol.
                        $field: unsafe { lib.symbol::<unsafe extern "C" fn($($arg),*) -> ncclResult_t>($symbol) }.ok(),
                    )*
                    // SAFETY: `const char* ncclGetLastError(ncclComm_t)`.
                    get_last_error: unsafe { lib.symbol::<unsafe extern "C" fn(Comm) -> *const c_char>("ncclGetLastError") }.ok(),
                }
            }
        }
    };
}

api! {
    all_reduce = "ncclAllReduce": fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, cudaStream_t);
    all_gather = "ncclAllGather": fn(*const c_void, *mut c_void, usize, c_int, Comm, cudaStream_t);
    reduce_scatter = "ncclReduceScatter": fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, cudaStream_t);
    broadcast = "ncclBroadcast": fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, cudaStream_t);
    reduce = "ncclReduce": fn(*const c_void, *mut c_void, usize, c_int, c_int, c_int, Comm, cudaStream_t);
    all_to_all = "ncclAlltoAll": fn(*const c_void, *mut c_void, usize, c_int, Comm, cudaStream_t);
    gather = "ncclGather": fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, cudaStream_t);
    scatter = "ncclScatter": fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, cudaStream_t);
    send = "ncclSend": fn(*const c_void, usize, c_int, c_int, Comm, cudaStream_t);
    recv = "ncclRecv": fn(*mut c_void, usize, c_int, c_int, Comm, cudaStream_t);
    group_start = "ncclGroupStart": fn();
    group_end = "ncclGroupEnd": fn();
    comm_split = "ncclCommSplit": fn(Comm, c_int, c_int, *mut Comm, *mut ncclConfig_t);
    comm_init_rank_config = "ncclCommInitRankConfig": fn(*mut Comm, c_int, ncclUniqueId, c_int, *mut ncclConfig_t);
    comm_finalize = "ncclCommFinalize": fn(Comm);
    comm_abort = "ncclCommAbort": fn(Comm);
    get_async_error = "ncclCommGetAsyncError": fn(Comm, *mut ncclResult_t);
    red_op_create_pre_mul_sum = "ncclRedOpCreatePreMulSum": fn(*mut c_int, *mut c_void, c_int, c_int, Comm);
    red_op_destroy = "ncclRedOpDestroy": fn(c_int, Comm);
    comm_register = "ncclCommRegister": fn(Comm, *mut c_void, usize, *mut *mut c_void);
    comm_deregister = "ncclCommDeregister": fn(Comm, *mut c_void);
    window_register = "ncclCommWindowRegister": fn(Comm, *mut c_void, usize, *mut ncclWindow_t, c_int);
    window_deregister = "ncclCommWindowDeregister": fn(Comm, ncclWindow_t);
}

/// The loaded fallback.
#[derive(Debug)]
pub struct Fallback {
    /// The library (loader, unique ids, communicator creation).
    pub lib: Nccl,
    /// Its entry points.
    pub api: Api,
}

/// The fallback of this process: `None` without `WEFT_NCCL_FALLBACK_LIB`; an error when it is
/// set but cannot be loaded.
pub fn fallback() -> Result<Option<&'static Fallback>, NcclError> {
    static FALLBACK: OnceLock<Result<Option<Fallback>, NcclLibError>> = OnceLock::new();
    let env = crate::env::env()?;
    let Some(path) = &env.fallback_lib else { return Ok(None) };
    let loaded = FALLBACK.get_or_init(|| {
        let loaded = Fallback::load(path)?;
        tracing::debug!(path = %path.display(), version = ?loaded.lib.version(), "fallback NCCL loaded");
        Ok(Some(loaded))
    });
    match loaded {
        Ok(f) => Ok(f.as_ref()),
        Err(e) => Err(NcclError::system(format!("WEFT_NCCL_FALLBACK_LIB={}: {e}", path.display()))),
    }
}

impl Fallback {
    /// Loads the NCCL at `path` with `RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND` and resolves its
    /// entry points.
    pub fn load(path: &std::path::Path) -> Result<Self, NcclLibError> {
        let flags = libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND;
        let lib = Nccl::load_from_flags(path, flags)?;
        let api = Api::resolve(&lib);
        Ok(Self { lib, api })
    }

    /// Turns a result code of the fallback into an error naming `call` and quoting the
    /// fallback's own last error.
    pub fn check(&self, call: &str, code: ncclResult_t) -> Result<(), NcclError> {
        if code == 0 {
            return Ok(());
        }
        let detail = self.api.get_last_error.map_or(String::new(), |f| {
            // SAFETY: ncclGetLastError ignores its argument (null is fine) and returns a C
            // string or null.
            let p = unsafe { f(std::ptr::null_mut()) };
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: non-null NUL-terminated string owned by the fallback.
                format!(": {}", unsafe { CStr::from_ptr(p) }.to_string_lossy())
            }
        });
        let code_enum = match code {
            1 => Code::UnhandledCudaError,
            2 => Code::SystemError,
            4 => Code::InvalidArgument,
            5 => Code::InvalidUsage,
            6 => Code::RemoteError,
            7 => Code::InProgress,
            _ => Code::InternalError,
        };
        Err(NcclError::new(code_enum, format!("fallback {call}: {}{detail}", self.lib.error_string(code))))
    }

    /// The entry point `f` (named `name` in errors), or an error when this NCCL lacks it.
    pub fn entry<F: Copy>(&self, name: &str, f: Option<F>) -> Result<F, NcclError> {
        f.ok_or_else(|| {
            NcclError::invalid_usage(format!("the fallback NCCL ({}) has no {name}", self.lib.path().display()))
        })
    }
}

/// Raw handles of the fallback's live communicators. The fallback reaches some of its own
/// entry points through the dynamic linker (measured: NCCL 2.28's `ncclCommFinalize` of a
/// non-blocking communicator calls `ncclCommGetAsyncError`), and with this library preloaded
/// such a call can land here, with a handle weft never issued; the entry points forward those.
fn foreign_handles() -> &'static Mutex<HashSet<usize>> {
    static LIVE: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

/// The fallback owning `raw` when `raw` is one of its live communicators.
pub fn owner_of_foreign(raw: *mut c_void) -> Option<&'static Fallback> {
    let live = foreign_handles().lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&(raw as usize));
    live.then(|| fallback().ok().flatten()).flatten()
}

fn track_foreign(raw: Comm, live: bool) {
    let mut set = foreign_handles().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if live {
        set.insert(raw as usize);
    } else {
        set.remove(&(raw as usize));
    }
}

/// A communicator of the fallback, destroyed on drop (or aborted, see [`FallbackComm::abort`]).
#[derive(Debug)]
pub struct FallbackComm {
    comm: Option<NcclComm<'static>>,
    /// The library it belongs to.
    pub fallback: &'static Fallback,
}

// SAFETY: an NCCL communicator may be used from any thread (not from two at once, which the
// NCCL API forbids applications too); the handle is only passed to the library.
unsafe impl Send for FallbackComm {}
// SAFETY: as for Send: `&self` methods only pass the handle to the library.
unsafe impl Sync for FallbackComm {}

impl FallbackComm {
    /// The `ncclComm_t` of the fallback.
    pub fn raw(&self) -> Comm {
        self.comm.as_ref().map_or(std::ptr::null_mut(), NcclComm::raw)
    }

    /// Wraps a communicator the fallback created (e.g. by `ncclCommSplit`).
    ///
    /// # Safety
    /// `raw` must be a live communicator of `fallback` that nothing else destroys.
    pub unsafe fn adopt(fallback: &'static Fallback, raw: Comm) -> Self {
        // SAFETY: forwarded contract.
        Self::tracked(unsafe { fallback.lib.adopt(raw) }, fallback)
    }

    fn tracked(comm: NcclComm<'static>, fallback: &'static Fallback) -> Self {
        track_foreign(comm.raw(), true);
        Self { comm: Some(comm), fallback }
    }

    /// `ncclCommAbort` instead of `ncclCommDestroy`.
    pub fn abort(mut self) -> Result<(), NcclError> {
        let Some(comm) = self.comm.take() else { return Ok(()) };
        let raw = comm.raw();
        track_foreign(raw, false);
        // The abort replaces the destroy the drop would do.
        std::mem::forget(comm);
        let f = self.fallback;
        let abort = f.entry("ncclCommAbort", f.api.comm_abort)?;
        // SAFETY: a live communicator, not used afterwards.
        f.check("ncclCommAbort", unsafe { abort(raw) })
    }
}

/// Creates this rank's fallback communicator: rank 0 asks the fallback for an `ncclUniqueId`
/// and shares it over weft's bootstrap; `ncclCommInitRankConfig` with the application's hints
/// when it set any. `None` without a fallback.
pub fn create(
    bootstrap: &dyn Bootstrap,
    device: &Device,
    rank: usize,
    nranks: usize,
    config: &FallbackConfig,
) -> Result<Option<FallbackComm>, NcclError> {
    let Some(fallback) = self::fallback()? else { return Ok(None) };
    let mut id_error = None;
    let mine = if rank == 0 {
        match fallback.lib.unique_id() {
            Ok(id) => id.to_vec(),
            Err(e) => {
                id_error = Some(e);
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    let shared = bootstrap.broadcast(0, (rank == 0).then_some(mine.as_slice()))?;
    let id: [u8; 128] = shared.try_into().map_err(|_| {
        NcclError::system(
            id_error.map_or_else(|| "rank 0 could not create the fallback NCCL's unique id".into(), |e| e.to_string()),
        )
    })?;
    device.bind()?;
    if config.is_default() {
        let comm = fallback.lib.init_rank(id, rank, nranks)?;
        return Ok(Some(FallbackComm::tracked(comm, fallback)));
    }
    let init = fallback.entry("ncclCommInitRankConfig", fallback.api.comm_init_rank_config)?;
    let to_c = |v: usize| c_int::try_from(v).map_err(|_| NcclError::invalid_argument(format!("{v} exceeds int")));
    let (r, n) = (to_c(rank)?, to_c(nranks)?);
    let unique = ncclUniqueId { internal: id.map(|b| b as c_char) };
    let mut raw: Comm = std::ptr::null_mut();
    // SAFETY: out-pointer to a local, the id by value, a config that lives during the call.
    let code = config.with_c(|c| unsafe { init(&mut raw, n, unique, r, c) });
    fallback.check("ncclCommInitRankConfig", code)?;
    // SAFETY: the fallback just created `raw`; we own it.
    Ok(Some(unsafe { FallbackComm::adopt(fallback, raw) }))
}

impl Drop for FallbackComm {
    fn drop(&mut self) {
        if let Some(comm) = &self.comm {
            track_foreign(comm.raw(), false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_handles_are_tracked_while_live() {
        let raw = 0x1234_5670 as Comm;
        track_foreign(raw, true);
        assert!(foreign_handles().lock().unwrap().contains(&(raw as usize)));
        track_foreign(raw, false);
        assert!(!foreign_handles().lock().unwrap().contains(&(raw as usize)));
        assert!(owner_of_foreign(raw).is_none());
    }

    #[test]
    fn the_real_nccl_loads_deep_bound_with_every_entry_point() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.deps/nccl/nvidia/nccl/lib/libnccl.so.2");
        if !path.is_file() {
            eprintln!("SKIPPED: {} is missing (scripts/nccl-header.sh installs it)", path.display());
            return;
        }
        let f = Fallback::load(&path).unwrap();
        assert_eq!(f.lib.version().unwrap(), crate::ffi::NCCL_VERSION_CODE);
        let a = &f.api;
        let all = [
            a.all_reduce.is_some(),
            a.all_gather.is_some(),
            a.reduce_scatter.is_some(),
            a.broadcast.is_some(),
            a.reduce.is_some(),
            a.all_to_all.is_some(),
            a.gather.is_some(),
            a.scatter.is_some(),
            a.send.is_some(),
            a.recv.is_some(),
            a.group_start.is_some(),
            a.group_end.is_some(),
            a.comm_split.is_some(),
            a.comm_finalize.is_some(),
            a.comm_abort.is_some(),
            a.get_async_error.is_some(),
            a.red_op_create_pre_mul_sum.is_some(),
            a.red_op_destroy.is_some(),
            a.comm_register.is_some(),
            a.comm_deregister.is_some(),
            a.window_register.is_some(),
            a.window_deregister.is_some(),
            a.get_last_error.is_some(),
        ];
        assert!(all.iter().all(|&x| x), "{a:?}");
        let err = f.check("ncclAllReduce", crate::ffi::ncclInvalidArgument).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.starts_with("fallback ncclAllReduce: invalid argument"), "{}", err.message);
        assert!(f.check("x", 0).is_ok());
        // An entry point an older NCCL lacks is an error that names it.
        let missing = f.entry("ncclCommCount", None::<fn()>).unwrap_err();
        assert!(missing.message.contains("has no ncclCommCount"));
    }
}

//! The bodies of the exported entry points (`exports.rs` wraps each in the guard). Checks that
//! need no GPU come first, so bad arguments are reported without touching a device; output
//! pointers are written only when the call succeeds.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void};
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

use weft_bootstrap::{InProcessBootstrap, UniqueId};
use weft_gpu::{AllocKind, Device, DeviceMemory, SavedContext};

use crate::comm::{self, Comm, InitSpec, Rendezvous, lock, lookup, parse_config, publish, unpublish};
use crate::env::env;
use crate::error::{Code, NcclError};
use crate::exec::{self, Call, Coll, Deferred, SetupWork, new_handle};
use crate::ffi::{self, cudaStream_t, ncclComm_t, ncclConfig_t, ncclResult_t, ncclUniqueId, ncclWindow_t};
use crate::group;
use crate::route::{data_type, red_op};

pub(crate) fn non_null<T>(p: *const T, name: &str) -> Result<(), NcclError> {
    if p.is_null() { Err(NcclError::invalid_argument(format!("{name} is NULL"))) } else { Ok(()) }
}

fn index(value: c_int, name: &str) -> Result<usize, NcclError> {
    usize::try_from(value).map_err(|_| NcclError::invalid_argument(format!("{name} = {value} is negative")))
}

fn not_implemented(call: &str, what: &str) -> NcclError {
    NcclError::invalid_usage(format!("{call} is not implemented by weft yet ({what})"))
}

/// `ncclGetVersion`: the version of the NCCL API weft implements (2.28.9 → 22809), so that
/// applications enable exactly the features of that API.
///
/// # Safety
/// `version` is null or writable.
pub unsafe fn get_version(version: *mut c_int) -> Result<(), NcclError> {
    non_null(version, "version")?;
    // SAFETY: non-null, and the application passes a writable int (nccl.h contract).
    unsafe { version.write(ffi::NCCL_VERSION_CODE) };
    Ok(())
}

/// `ncclGetUniqueId`: a weft rendezvous id (root address and secret). The calling process must
/// host rank 0 of the communicator, as with NCCL.
///
/// # Safety
/// `out` is null or writable.
pub unsafe fn get_unique_id(out: *mut ncclUniqueId) -> Result<(), NcclError> {
    non_null(out, "uniqueId")?;
    let id = UniqueId::new(SocketAddr::new(env()?.root_ip(), 0))?;
    let mut c = ncclUniqueId { internal: [0; ffi::NCCL_UNIQUE_ID_BYTES] };
    for (dst, src) in c.internal.iter_mut().zip(id.to_bytes()) {
        *dst = src as c_char;
    }
    // SAFETY: non-null, writable ncclUniqueId (nccl.h contract).
    unsafe { out.write(c) };
    Ok(())
}

fn unique_id(id: &ncclUniqueId) -> Result<UniqueId, NcclError> {
    let bytes: Vec<u8> = id.internal.iter().map(|&b| b as u8).collect();
    UniqueId::from_bytes(&bytes).map_err(|e| NcclError::invalid_argument(format!("commId: {e}")))
}

/// `ncclCommInitRankConfig` (and `ncclCommInitRank` with a null config).
///
/// # Safety
/// `config` is null or a readable config; `out` is checked for null.
pub unsafe fn comm_init_rank_config(
    out: *mut ncclComm_t,
    nranks: c_int,
    id: ncclUniqueId,
    rank: c_int,
    config: *const ncclConfig_t,
) -> Result<(), NcclError> {
    non_null(out, "comm")?;
    if nranks < 1 {
        return Err(NcclError::invalid_argument(format!("nranks = {nranks} (at least 1)")));
    }
    if rank < 0 || rank >= nranks {
        return Err(NcclError::invalid_argument(format!("rank = {rank} out of range for {nranks} ranks")));
    }
    // SAFETY: forwarded contract.
    let config = unsafe { parse_config(config) }?;
    let id = unique_id(&id)?;
    let (rank, nranks) = (rank as usize, nranks as usize);
    let device = {
        let _restore = SavedContext::save();
        Device::current()?.ordinal()
    };
    let spec = InitSpec { rank, nranks, device, rendezvous: Rendezvous::Tcp(id), config };
    if group::with(|g| g.active()) {
        let comm = Comm::pending(rank, nranks, device);
        group::with(|g| g.push(Deferred::Init { comm: std::sync::Arc::clone(&comm), spec: Box::new(spec) }))
            .map_err(|_| NcclError::new(Code::InternalError, "group closed while queueing"))?;
        // SAFETY: non-null, writable (nccl.h contract).
        unsafe { out.write(publish(comm)) };
        return Ok(());
    }
    let _restore = SavedContext::save();
    let outcome = exec::initialise_all(vec![spec]).pop().unwrap_or_else(|| Err(NcclError::system("no outcome")));
    let (ready, rank, nranks) = outcome?.ok_or_else(|| NcclError::new(Code::InternalError, "no communicator"))?;
    // SAFETY: non-null, writable (nccl.h contract).
    unsafe { out.write(new_handle(ready, rank, nranks)) };
    Ok(())
}

/// `ncclCommInitRankScalable`: weft's rendezvous needs one id; it uses `commIds[0]` (every rank
/// holds the same array).
///
/// # Safety
/// `ids` points to `n_id` ids; `config` as for [`comm_init_rank_config`].
pub unsafe fn comm_init_rank_scalable(
    out: *mut ncclComm_t,
    nranks: c_int,
    rank: c_int,
    n_id: c_int,
    ids: *const ncclUniqueId,
    config: *const ncclConfig_t,
) -> Result<(), NcclError> {
    non_null(ids, "commIds")?;
    if n_id < 1 {
        return Err(NcclError::invalid_argument(format!("nId = {n_id} (at least 1)")));
    }
    // SAFETY: non-null, at least one id (checked).
    let id = unsafe { ids.read() };
    // SAFETY: forwarded contract.
    unsafe { comm_init_rank_config(out, nranks, id, rank, config) }
}

/// `ncclCommInitAll`: one communicator per listed GPU, all in this process, initialised
/// concurrently on their own threads. Every handle is written, or none.
///
/// # Safety
/// `comms` has room for `ndev` handles; `devlist` is null or lists `ndev` ordinals.
pub unsafe fn comm_init_all(comms: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> Result<(), NcclError> {
    non_null(comms, "comms")?;
    if ndev < 1 {
        return Err(NcclError::invalid_argument(format!("ndev = {ndev} (at least 1)")));
    }
    let n = ndev as usize;
    let devices: Vec<usize> = if devlist.is_null() {
        (0..n).collect()
    } else {
        // SAFETY: non-null with `ndev` entries (nccl.h contract).
        let list = unsafe { std::slice::from_raw_parts(devlist, n) };
        list.iter().map(|&d| index(d, "devlist entry")).collect::<Result<_, _>>()?
    };
    if devices.iter().collect::<HashSet<_>>().len() != n {
        return Err(NcclError::invalid_argument(format!("devlist {devices:?} names a GPU twice")));
    }
    let group = InProcessBootstrap::group(n)?;
    let specs = group
        .into_iter()
        .zip(&devices)
        .enumerate()
        .map(|(rank, (bs, &device))| InitSpec {
            rank,
            nranks: n,
            device,
            rendezvous: Rendezvous::InProcess(bs),
            config: comm::CommConfig::default(),
        })
        .collect();
    let _restore = SavedContext::save();
    let mut readies = Vec::with_capacity(n);
    for outcome in exec::initialise_all(specs) {
        readies.push(outcome?.ok_or_else(|| NcclError::new(Code::InternalError, "no communicator"))?);
    }
    for (i, (ready, rank, nranks)) in readies.into_iter().enumerate() {
        // SAFETY: room for `ndev` handles (nccl.h contract).
        unsafe { comms.add(i).write(new_handle(ready, rank, nranks)) };
    }
    Ok(())
}

/// `ncclCommSplit`: collective over the parent; the new handle (NULL for
/// `NCCL_SPLIT_NOCOLOR`) is written when the split finishes (at the group's end inside a group).
///
/// # Safety
/// `config` as for [`comm_init_rank_config`].
pub unsafe fn comm_split(
    parent: ncclComm_t,
    color: c_int,
    key: c_int,
    out: *mut ncclComm_t,
    config: *const ncclConfig_t,
) -> Result<(), NcclError> {
    non_null(out, "newcomm")?;
    if color < ffi::NCCL_SPLIT_NOCOLOR {
        return Err(NcclError::invalid_argument(format!("color = {color} (NCCL_SPLIT_NOCOLOR or >= 0)")));
    }
    // SAFETY: forwarded contract.
    let config = unsafe { parse_config(config) }?;
    let parent_comm = lookup(parent)?;
    let ready = parent_comm.ready()?;
    let spec = InitSpec {
        rank: parent_comm.rank,
        nranks: parent_comm.nranks,
        device: parent_comm.device,
        rendezvous: Rendezvous::Split { parent: ready, color, key },
        config,
    };
    let item = Deferred::Split { spec: Box::new(spec), out: out as usize };
    match group::with(|g| g.push(item)) {
        Ok(()) => Ok(()),
        Err(item) => exec::run("ncclCommSplit", vec![item]),
    }
}

/// `ncclCommFinalize`: weft keeps no host-side work in flight (every call has been enqueued on
/// its stream when it returns); the fallback communicator is finalised.
pub fn comm_finalize(handle: ncclComm_t) -> Result<(), NcclError> {
    let ready = lookup(handle)?.ready()?;
    if let Some(fc) = &ready.fallback {
        let f = fc.fallback;
        let finalize = f.entry("ncclCommFinalize", f.api.comm_finalize)?;
        // SAFETY: a live communicator of the fallback.
        f.check("ncclCommFinalize", unsafe { finalize(fc.raw()) })?;
    }
    Ok(())
}

/// `ncclCommDestroy` and `ncclCommAbort`: the handle becomes invalid at once; resources are
/// freed when no queued work refers to them any more.
pub fn comm_destroy(handle: ncclComm_t, abort: bool) -> Result<(), NcclError> {
    let comm = unpublish(handle)?;
    let _restore = SavedContext::save();
    if let Some(ready) = comm.take_ready() {
        match std::sync::Arc::try_unwrap(ready) {
            Ok(mut ready) if abort => {
                if let Some(fc) = ready.fallback.take() {
                    fc.abort()?;
                }
            }
            Ok(ready) => drop(ready),
            Err(shared) => drop(shared),
        }
    }
    Ok(())
}

/// `ncclCommGetAsyncError`: `ncclInProgress` while initialising, the init error if it failed,
/// `ncclRemoteError` when one of weft's bounded device waits gave up on a peer (the last error
/// names it), else the fallback's own state.
///
/// # Safety
/// `out` is checked for null and must be writable.
pub unsafe fn comm_get_async_error(handle: ncclComm_t, out: *mut ncclResult_t) -> Result<(), NcclError> {
    non_null(out, "asyncError")?;
    let comm = match lookup(handle) {
        Ok(comm) => comm,
        Err(e) => {
            let Some(f) = crate::fallback::owner_of_foreign(handle.cast()) else { return Err(e) };
            let get = f.entry("ncclCommGetAsyncError", f.api.get_async_error)?;
            // SAFETY: a live communicator of the fallback and the caller's out-pointer.
            return f.check("ncclCommGetAsyncError", unsafe { get(handle.cast(), out) });
        }
    };
    let code = async_error(&comm)?;
    // SAFETY: non-null, writable (nccl.h contract).
    unsafe { out.write(code) };
    Ok(())
}

fn async_error(comm: &Comm) -> Result<ncclResult_t, NcclError> {
    let report = |e: &NcclError| {
        crate::guard::set_last_error(&e.message);
        comm.record_error(&e.message);
        e.raw()
    };
    if let Some(e) = lock(&comm.async_error).as_ref() {
        return Ok(report(e));
    }
    let ready = match comm.ready() {
        Ok(r) => r,
        Err(e) => return Ok(if e.code == Code::InProgress { ffi::ncclInProgress } else { report(&e) }),
    };
    if let Ok(native) = &ready.weft {
        let _restore = SavedContext::save();
        if let Err(e) = native.comm.check_device() {
            let e = NcclError::from(e);
            *lock(&comm.async_error) = Some(e.clone());
            return Ok(report(&e));
        }
    }
    if let Some(fc) = &ready.fallback {
        let f = fc.fallback;
        let get = f.entry("ncclCommGetAsyncError", f.api.get_async_error)?;
        let mut code = ffi::ncclSuccess;
        // SAFETY: a live communicator; out-pointer to a local.
        f.check("ncclCommGetAsyncError", unsafe { get(fc.raw(), &mut code) })?;
        return Ok(code);
    }
    Ok(ffi::ncclSuccess)
}

/// `ncclCommCount`, `ncclCommCuDevice`, `ncclCommUserRank`.
///
/// # Safety
/// `out` is checked for null and must be writable.
pub unsafe fn comm_query(handle: ncclComm_t, out: *mut c_int, what: fn(&Comm) -> usize) -> Result<(), NcclError> {
    non_null(out, "output")?;
    let comm = lookup(handle)?;
    let value = c_int::try_from(what(&comm)).map_err(|_| NcclError::new(Code::InternalError, "value exceeds int"))?;
    // SAFETY: non-null, writable (nccl.h contract).
    unsafe { out.write(value) };
    Ok(())
}

/// Queues `call` inside a group, or runs it now.
fn enqueue(handle: ncclComm_t, call: Call) -> Result<(), NcclError> {
    call.bytes()?;
    let comm = lookup(handle)?;
    let call = call.checked_for(&comm)?;
    match group::with(|g| g.push(Deferred::Call { comm, call })) {
        Ok(()) => Ok(()),
        Err(Deferred::Call { comm, call }) => exec::run_one(&comm, call),
        Err(other) => exec::run("ncclGroupEnd", vec![other]),
    }
}

/// Arguments of a collective as the C entry points receive them.
#[derive(Debug)]
pub struct Args {
    /// `sendbuff`.
    pub send: *const c_void,
    /// `recvbuff`.
    pub recv: *mut c_void,
    /// `count` (per nccl.h's definition for the call).
    pub count: usize,
    /// `datatype`.
    pub dtype: ffi::ncclDataType_t,
    /// `op` (calls without one pass `ncclSum`, unused).
    pub op: ffi::ncclRedOp_t,
    /// `root` or `peer` (calls without one pass 0, unused).
    pub root: c_int,
    /// `comm`.
    pub comm: ncclComm_t,
    /// `stream`.
    pub stream: cudaStream_t,
}

/// Every collective and point-to-point entry point: `make` builds the call from the operator
/// and root once they are checked. A call refused inside a group also fails the group's end,
/// as in NCCL (whose group then launches nothing).
pub fn collective(
    args: Args,
    uses_op: bool,
    make: impl FnOnce(crate::route::Op, usize) -> Coll,
) -> Result<(), NcclError> {
    let outcome = checked_collective(args, uses_op, make);
    if let Err(e) = &outcome {
        group::with(|g| g.fail(e));
    }
    outcome
}

fn checked_collective(
    args: Args,
    uses_op: bool,
    make: impl FnOnce(crate::route::Op, usize) -> Coll,
) -> Result<(), NcclError> {
    let dtype = data_type(args.dtype)?;
    let op = if uses_op { red_op(args.op)? } else { crate::route::Op::Builtin(weft_types::ReduceOp::Sum) };
    let root = index(args.root, "root/peer")?;
    let call = Call {
        coll: make(op, root),
        send: args.send as u64,
        recv: args.recv as u64,
        count: args.count,
        dtype,
        stream: args.stream as usize,
    };
    enqueue(args.comm, call)
}

/// `ncclGroupStart`.
pub fn group_start() -> Result<(), NcclError> {
    group::with(|g| g.start());
    Ok(())
}

/// `ncclGroupEnd`: at the outermost end, runs the group's initialisations (concurrently) and
/// calls.
pub fn group_end() -> Result<(), NcclError> {
    match group::with(|g| g.end())? {
        Some(group::Released::Run(items)) => exec::run("ncclGroupEnd", items),
        Some(group::Released::Failed(items, error)) => {
            exec::discard(items, &error);
            Err(error.context("a call inside the group failed, so the group launched nothing"))
        }
        None => Ok(()),
    }
}

/// `ncclGroupSimulateEnd`: weft has no performance model behind the C API yet.
pub fn group_simulate_end(sim: *mut ffi::ncclSimInfo_t) -> Result<(), NcclError> {
    non_null(sim, "simInfo")?;
    Err(not_implemented("ncclGroupSimulateEnd", "no cost model; the group stays open"))
}

/// `ncclCommRevoke`.
pub fn comm_revoke(handle: ncclComm_t, flags: c_int) -> Result<(), NcclError> {
    lookup(handle)?;
    if flags != 0 {
        return Err(NcclError::invalid_argument(format!("revokeFlags = {flags} (must be 0)")));
    }
    Err(not_implemented("ncclCommRevoke", "weft cannot stop work already enqueued"))
}

/// `ncclCommShrink`.
pub fn comm_shrink(handle: ncclComm_t, out: *mut ncclComm_t) -> Result<(), NcclError> {
    non_null(out, "newcomm")?;
    lookup(handle)?;
    Err(not_implemented("ncclCommShrink", "use ncclCommSplit"))
}

/// Allocations made by `ncclMemAlloc`, by address.
fn allocations() -> &'static Mutex<HashMap<u64, DeviceMemory>> {
    static ALLOCATIONS: OnceLock<Mutex<HashMap<u64, DeviceMemory>>> = OnceLock::new();
    ALLOCATIONS.get_or_init(Mutex::default)
}

/// `ncclMemAlloc`: device memory on the current GPU (VMM, exportable, when the GPU supports
/// it; `cuMemAlloc` otherwise). Never managed memory, never multicast.
///
/// # Safety
/// `out` is checked for null and must be writable.
pub unsafe fn mem_alloc(out: *mut *mut c_void, size: usize) -> Result<(), NcclError> {
    non_null(out, "ptr")?;
    if size == 0 {
        return Err(NcclError::invalid_argument("size is 0"));
    }
    let _restore = SavedContext::save();
    let device = Device::current()?;
    let memory = DeviceMemory::alloc(&device, size, AllocKind::Auto)?;
    let ptr = memory.ptr();
    lock(allocations()).insert(ptr, memory);
    // SAFETY: non-null, writable (nccl.h contract).
    unsafe { out.write(ptr as *mut c_void) };
    Ok(())
}

/// `ncclMemFree`: only addresses `ncclMemAlloc` returned.
pub fn mem_free(ptr: *mut c_void) -> Result<(), NcclError> {
    non_null(ptr, "ptr")?;
    let _restore = SavedContext::save();
    let memory = lock(allocations()).remove(&(ptr as u64));
    memory.map(drop).ok_or_else(|| NcclError::invalid_argument(format!("{ptr:p} was not allocated by ncclMemAlloc")))
}

/// A registration handle: weft treats registration as a hint for now (it registers or stages
/// user buffers itself); the fallback's registration, if any, is kept with it.
#[derive(Debug)]
struct Registration {
    comm: usize,
    fallback: *mut c_void,
}

fn registrations() -> &'static Mutex<HashMap<usize, Registration>> {
    static REGISTRATIONS: OnceLock<Mutex<HashMap<usize, Registration>>> = OnceLock::new();
    REGISTRATIONS.get_or_init(Mutex::default)
}

// SAFETY: the fallback's handle is an opaque token only passed back to the fallback.
unsafe impl Send for Registration {}

/// `ncclCommRegister`.
///
/// # Safety
/// `handle` is checked for null and must be writable.
pub unsafe fn comm_register(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> Result<(), NcclError> {
    non_null(handle, "handle")?;
    non_null(buff, "buff")?;
    let ready = lookup(comm)?.ready()?;
    let mut fallback = std::ptr::null_mut();
    if let Some(fc) = &ready.fallback {
        let f = fc.fallback;
        let register = f.entry("ncclCommRegister", f.api.comm_register)?;
        // SAFETY: the application's buffer and a local out-pointer, for a live communicator.
        f.check("ncclCommRegister", unsafe { register(fc.raw(), buff, size, &mut fallback) })?;
    }
    let token = Box::into_raw(Box::new(0u8)) as usize;
    lock(registrations()).insert(token, Registration { comm: comm as usize, fallback });
    // SAFETY: non-null, writable (nccl.h contract).
    unsafe { handle.write(token as *mut c_void) };
    Ok(())
}

/// `ncclCommDeregister`.
pub fn comm_deregister(comm: ncclComm_t, handle: *mut c_void) -> Result<(), NcclError> {
    non_null(handle, "handle")?;
    let ready = lookup(comm)?.ready()?;
    let mut table = lock(registrations());
    match table.get(&(handle as usize)) {
        Some(r) if r.comm == comm as usize => {}
        _ => return Err(NcclError::invalid_argument(format!("{handle:p} is not a registration of this comm"))),
    }
    let registration = table.remove(&(handle as usize));
    drop(table);
    // SAFETY: the token was made by Box::into_raw in comm_register and is freed once (removed above).
    drop(unsafe { Box::from_raw(handle as *mut u8) });
    if let (Some(fc), Some(r)) = (&ready.fallback, registration)
        && !r.fallback.is_null()
    {
        let f = fc.fallback;
        let deregister = f.entry("ncclCommDeregister", f.api.comm_deregister)?;
        // SAFETY: a handle the fallback returned for this communicator.
        f.check("ncclCommDeregister", unsafe { deregister(fc.raw(), r.fallback) })?;
    }
    Ok(())
}

/// `ncclCommWindowRegister`: a weft window (every peer maps the buffer once; calls whose
/// buffers lie in it then run zero-copy, eager ones included), and the fallback's window too
/// when there is a fallback, so calls routed there see it as well. Collective: inside a group
/// the registration runs at `ncclGroupEnd`, one thread per communicator, and the handle is
/// written then. Every `winFlags` value is accepted: weft's windows serve every collective
/// (`NCCL_WIN_COLL_SYMMETRIC` is what they always are).
///
/// # Safety
/// `win` is checked for null and must be writable until the registration completes (the end
/// of the group, inside one); the buffer stays allocated until deregistered.
pub unsafe fn window_register(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    win: *mut ncclWindow_t,
    flags: c_int,
) -> Result<(), NcclError> {
    non_null(win, "win")?;
    non_null(buff, "buff")?;
    if size == 0 {
        return Err(NcclError::invalid_argument("size is 0"));
    }
    let comm_ref = lookup(comm)?;
    let work = exec::WindowWork::Register { base: buff as u64, size, flags, out: win as usize };
    exec::setup(comm_ref, SetupWork::Window(work))
}

/// `ncclCommWindowDeregister`: collective, after every call using the window has completed on
/// every rank (nccl.h's contract); inside a group it runs at `ncclGroupEnd`.
///
/// # Safety
/// `win` is a window registered on `comm` (checked: anything else is an invalid argument).
pub unsafe fn window_deregister(comm: ncclComm_t, win: ncclWindow_t) -> Result<(), NcclError> {
    non_null(win, "win")?;
    let comm_ref = lookup(comm)?;
    exec::check_window(comm, win)?;
    let work = exec::WindowWork::Deregister { win: win as usize };
    exec::setup(comm_ref, SetupWork::Window(work))
}

/// `ncclRedOpCreatePreMulSum`: an operator of `comm` that weft runs natively (see
/// [`crate::ops`]), and where the communicator has a fallback, the same operator there.
///
/// # Safety
/// `op` is checked for null; a host-immediate `scalar` must point to one readable element of
/// `dtype` (nccl.h contract); a device `scalar` is read by the calls' kernels.
pub unsafe fn red_op_create(
    op: *mut ffi::ncclRedOp_t,
    scalar: *mut c_void,
    dtype: ffi::ncclDataType_t,
    residence: ffi::ncclScalarResidence_t,
    comm: ncclComm_t,
) -> Result<(), NcclError> {
    non_null(op, "op")?;
    let dtype_raw = dtype;
    let dtype = data_type(dtype)?;
    // SAFETY: forwarded caller contract (null and unknown residences are refused first).
    let value = unsafe { crate::ops::read_scalar(scalar, dtype, residence) }?;
    let comm = lookup(comm)?;
    let ready = comm.ready()?;
    let fallback = match ready.fallback.as_ref() {
        Some(fc) => {
            let f = fc.fallback;
            let create = f.entry("ncclRedOpCreatePreMulSum", f.api.red_op_create_pre_mul_sum)?;
            let mut created = 0;
            // SAFETY: the application's scalar, a local out-pointer, a live communicator.
            f.check("ncclRedOpCreatePreMulSum", unsafe {
                create(&mut created, scalar, dtype_raw, residence, fc.raw())
            })?;
            Some(created)
        }
        None => None,
    };
    let handle = lock(&comm.user_ops).insert(dtype, value, fallback);
    // SAFETY: non-null, writable (nccl.h contract).
    unsafe { op.write(handle) };
    Ok(())
}

/// `ncclRedOpDestroy`: built-in, unknown and already destroyed operators are
/// `ncclInvalidArgument`.
pub fn red_op_destroy(op: ffi::ncclRedOp_t, comm: ncclComm_t) -> Result<(), NcclError> {
    let comm = lookup(comm)?;
    let removed = lock(&comm.user_ops).remove(op)?;
    if let Some(raw) = removed.fallback {
        let ready = comm.ready()?;
        let fc = ready.fallback.as_ref().ok_or_else(|| {
            NcclError::new(Code::InternalError, format!("operator {op} has a fallback twin but no fallback"))
        })?;
        let f = fc.fallback;
        let destroy = f.entry("ncclRedOpDestroy", f.api.red_op_destroy)?;
        // SAFETY: an operator the fallback created on this communicator.
        f.check("ncclRedOpDestroy", unsafe { destroy(raw, fc.raw()) })?;
    }
    Ok(())
}

/// `ncclGetErrorString`.
pub fn error_string(code: ncclResult_t) -> &'static std::ffi::CStr {
    match code {
        ffi::ncclSuccess => c"no error",
        ffi::ncclUnhandledCudaError => c"unhandled cuda error (ncclGetLastError() has the details)",
        ffi::ncclSystemError => c"unhandled system error (ncclGetLastError() has the details)",
        ffi::ncclInternalError => c"internal error - please report this issue to the weft developers",
        ffi::ncclInvalidArgument => c"invalid argument (ncclGetLastError() says which)",
        ffi::ncclInvalidUsage => c"invalid usage (ncclGetLastError() has the details)",
        ffi::ncclRemoteError => c"remote process exited or there was a network error",
        ffi::ncclInProgress => c"NCCL operation in progress",
        _ => c"unknown result code",
    }
}

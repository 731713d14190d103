//! Running what the application asked for: collective and point-to-point calls (on weft or on
//! the fallback, as [`crate::route`] decides), and initialisations, several at once on their
//! own threads when one thread creates several communicators inside a group (or through
//! `ncclCommInitAll`), so that no rank waits for a peer that the same thread has yet to start.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};

use weft_coll::{P2pKind, P2pOp};
use weft_gpu::{DevicePtr, SavedContext, Stream};
use weft_types::DataType;

use crate::comm::{Comm, InitSpec, Ready, initialise, publish};
use crate::device_api::DevCommWork;
use crate::env::{Kind, env};
use crate::error::{Code, NcclError};
use crate::ffi::{ncclComm_t, ncclResult_t, ncclWindow_t};
use crate::group;
use crate::route::{Op, Route, route};

/// A collective or point-to-point call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coll {
    /// `ncclAllReduce`.
    AllReduce(Op),
    /// `ncclAllGather` (`count` per rank).
    AllGather,
    /// `ncclReduceScatter` (`count` per rank).
    ReduceScatter(Op),
    /// `ncclBroadcast`.
    Broadcast {
        /// Root rank.
        root: usize,
    },
    /// `ncclReduce`.
    Reduce {
        /// Operator.
        op: Op,
        /// Root rank.
        root: usize,
    },
    /// `ncclAlltoAll` (`count` per peer).
    AllToAll,
    /// `ncclGather` (`count` per rank).
    Gather {
        /// Root rank.
        root: usize,
    },
    /// `ncclScatter` (`count` per rank).
    Scatter {
        /// Root rank.
        root: usize,
    },
    /// `ncclSend`.
    Send {
        /// Destination rank.
        peer: usize,
    },
    /// `ncclRecv`.
    Recv {
        /// Source rank.
        peer: usize,
    },
}

/// One call with its arguments (pointers as addresses, so calls can be queued and moved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// What to do.
    pub coll: Coll,
    /// Send buffer (`ncclRecv`: unused).
    pub send: DevicePtr,
    /// Receive buffer (`ncclSend`: unused).
    pub recv: DevicePtr,
    /// Elements, as nccl.h counts them for the call.
    pub count: usize,
    /// Element type.
    pub dtype: DataType,
    /// The application's `cudaStream_t`.
    pub stream: usize,
}

impl Call {
    /// The kind routes and the force list use.
    pub fn kind(&self) -> Kind {
        match self.coll {
            Coll::AllReduce(_) => Kind::ALL_REDUCE,
            Coll::AllGather => Kind::ALL_GATHER,
            Coll::ReduceScatter(_) => Kind::REDUCE_SCATTER,
            Coll::Broadcast { .. } => Kind::BROADCAST,
            Coll::Reduce { .. } => Kind::REDUCE,
            Coll::AllToAll => Kind::ALL_TO_ALL,
            Coll::Gather { .. } => Kind::Gather,
            Coll::Scatter { .. } => Kind::Scatter,
            Coll::Send { .. } | Coll::Recv { .. } => Kind::SEND_RECV,
        }
    }

    /// The reduction operator, if the call reduces.
    pub fn op(&self) -> Option<Op> {
        match self.coll {
            Coll::AllReduce(op) | Coll::ReduceScatter(op) | Coll::Reduce { op, .. } => Some(op),
            _ => None,
        }
    }

    fn root(&self) -> Option<usize> {
        match self.coll {
            Coll::Broadcast { root } | Coll::Reduce { root, .. } | Coll::Gather { root } | Coll::Scatter { root } => {
                Some(root)
            }
            Coll::Send { peer } | Coll::Recv { peer } => Some(peer),
            _ => None,
        }
    }

    /// `count` elements in bytes, or `ncclInvalidArgument` when that overflows (checked before
    /// the communicator is looked at).
    pub fn bytes(&self) -> Result<usize, NcclError> {
        self.count.checked_mul(self.dtype.size()).filter(|&b| b <= isize::MAX as usize).ok_or_else(|| {
            NcclError::invalid_argument(format!("count {} of {} overflows", self.count, self.dtype.name()))
        })
    }

    /// The call checked against the communicator: ranks in range, buffers this rank uses not
    /// null, the whole extent addressable, and a custom operator resolved to one of the
    /// communicator's PreMulSum operators of the call's type (read now, as NCCL reads it when
    /// the call is made).
    pub fn checked_for(mut self, comm: &Comm) -> Result<Call, NcclError> {
        let n = comm.nranks;
        let bytes = self.bytes()?;
        if let Some(r) = self.root().filter(|&r| r >= n) {
            let what = if self.kind() == Kind::SEND_RECV { "peer" } else { "root" };
            return Err(NcclError::invalid_argument(format!("{what} {r} out of range for {n} ranks")));
        }
        if bytes.checked_mul(n).is_none_or(|b| b > isize::MAX as usize) {
            return Err(NcclError::invalid_argument(format!("{} x {n} ranks overflows", self.count)));
        }
        if let Some(Op::Custom(raw)) = self.op() {
            let resolved = Op::PreMulSum(crate::comm::lock(&comm.user_ops).get(raw, self.dtype)?);
            match &mut self.coll {
                Coll::AllReduce(op) | Coll::ReduceScatter(op) | Coll::Reduce { op, .. } => *op = resolved,
                _ => {}
            }
        }
        let is_root = self.root() == Some(comm.rank);
        let (uses_send, uses_recv) = match self.coll {
            Coll::Broadcast { .. } | Coll::Scatter { .. } => (is_root, true),
            Coll::Reduce { .. } | Coll::Gather { .. } => (true, is_root),
            Coll::Send { .. } => (true, false),
            Coll::Recv { .. } => (false, true),
            _ => (true, true),
        };
        if bytes > 0 {
            for (used, ptr, name) in [(uses_send, self.send, "sendbuff"), (uses_recv, self.recv, "recvbuff")] {
                if used && ptr == 0 {
                    return Err(NcclError::invalid_argument(format!("{name} is NULL")));
                }
            }
        }
        Ok(self)
    }

    /// Why weft cannot run this call (a pattern its kernels do not cover), if it cannot: an
    /// AllToAll whose buffers overlap without being equal (NCCL defines in place only as
    /// `sendbuff == recvbuff`, which weft runs natively).
    pub fn pattern(&self, nranks: usize) -> Option<&'static str> {
        let total = self.count.saturating_mul(self.dtype.size()).saturating_mul(nranks) as u64;
        let overlaps = self.send < self.recv.saturating_add(total) && self.recv < self.send.saturating_add(total);
        (self.coll == Coll::AllToAll && total > 0 && overlaps && self.send != self.recv)
            .then_some("with partially overlapping send and receive buffers (in place means sendbuff == recvbuff)")
    }
}

/// Work queued inside a group.
#[derive(Debug)]
pub enum Deferred {
    /// Initialise `comm`, whose handle the application already holds.
    Init {
        /// The communicator (pending).
        comm: Arc<Comm>,
        /// How.
        spec: Box<InitSpec>,
    },
    /// `ncclCommSplit`: the handle (or NULL) is written to `out` at the end of the group.
    Split {
        /// How.
        spec: Box<InitSpec>,
        /// The application's `ncclComm_t*`.
        out: usize,
    },
    /// A collective or point-to-point call.
    Call {
        /// The communicator.
        comm: Arc<Comm>,
        /// The call.
        call: Call,
    },
    /// Collective set-up: windows and device communicators.
    Setup {
        /// The communicator.
        comm: Arc<Comm>,
        /// What to do.
        work: SetupWork,
    },
}

/// Collective set-up of a communicator: run for several communicators at once, one thread
/// each, like initialisations (each waits for its peers, and one thread may hold several ranks).
#[derive(Debug)]
pub enum SetupWork {
    /// `ncclCommWindowRegister` / `ncclCommWindowDeregister`.
    Window(WindowWork),
    /// `ncclDevCommCreate` / `ncclDevCommDestroy`.
    DevComm(DevCommWork),
}

/// A window registration or deregistration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowWork {
    /// Register `size` bytes at `base`; the handle goes to the application's `ncclWindow_t*`
    /// at `out`.
    Register {
        /// The buffer.
        base: u64,
        /// Its bytes.
        size: usize,
        /// `winFlags`, passed on to the fallback.
        flags: c_int,
        /// The application's `ncclWindow_t*`.
        out: usize,
    },
    /// Deregister the window whose handle is `win`.
    Deregister {
        /// The handle.
        win: usize,
    },
}

/// A window handle's state: weft's window (none when the communicator has no weft side) and
/// the fallback's (null without a fallback).
#[derive(Debug)]
struct WindowHandle {
    /// The communicator's handle address.
    comm: usize,
    weft: Option<weft_coll::Window>,
    fallback: usize,
}

/// Windows by handle (a boxed byte's address: unique while the window lives).
fn windows() -> &'static Mutex<HashMap<usize, WindowHandle>> {
    static WINDOWS: OnceLock<Mutex<HashMap<usize, WindowHandle>>> = OnceLock::new();
    WINDOWS.get_or_init(Mutex::default)
}

/// `ncclInvalidArgument` unless `win` is a live window of `comm`.
pub fn check_window(comm: ncclComm_t, win: ncclWindow_t) -> Result<(), NcclError> {
    match crate::comm::lock(windows()).get(&(win as usize)) {
        Some(w) if w.comm == comm as usize => Ok(()),
        Some(_) => Err(NcclError::invalid_argument(format!("window {win:p} belongs to another communicator"))),
        None => Err(NcclError::invalid_argument(format!("window {win:p} is not a registered window (deregistered?)"))),
    }
}

/// Runs `work` on `comm` now, or queues it for the end of the open group.
pub fn setup(comm: Arc<Comm>, work: SetupWork) -> Result<(), NcclError> {
    if group::with(|g| g.active()) {
        return group::with(|g| g.push(Deferred::Setup { comm, work }))
            .map_err(|_| NcclError::new(Code::InternalError, "group closed while queueing"));
    }
    run_setup_work(vec![(comm, work)])
}

/// Runs set-up work: one thread per communicator when there are several (a registration waits
/// for every rank, and one thread may hold several ranks), in order within a communicator.
pub fn run_setup_work(items: Vec<(Arc<Comm>, SetupWork)>) -> Result<(), NcclError> {
    let mut per_comm: Vec<(Arc<Comm>, Vec<SetupWork>)> = Vec::new();
    for (comm, work) in items {
        match per_comm.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &comm)) {
            Some((_, list)) => list.push(work),
            None => per_comm.push((comm, vec![work])),
        }
    }
    on_threads(per_comm, |(comm, list)| {
        let mut first = None;
        for work in list {
            if let Err(e) = setup_work(&comm, work) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    })
}

/// One piece of set-up work on `comm`, with its GPU current.
fn setup_work(comm: &Arc<Comm>, work: SetupWork) -> Result<(), NcclError> {
    let _restore = SavedContext::save();
    let ready = comm.ready()?;
    ready.device.bind()?;
    match work {
        SetupWork::Window(work) => window_work(comm, &ready, work),
        SetupWork::DevComm(work) => work.run(&ready),
    }
}

/// One registration or deregistration on `comm`.
fn window_work(comm: &Arc<Comm>, ready: &Ready, work: WindowWork) -> Result<(), NcclError> {
    let handle = Arc::as_ptr(comm) as usize;
    match work {
        WindowWork::Register { base, size, flags, out } => {
            let weft = match &ready.weft {
                // Across nodes weft's window would map buffers of other nodes, and none of the
                // AllReduces that cross nodes reads a window: the fallback's alone.
                Ok(native) if native.spans_nodes => None,
                // SAFETY: the application keeps the buffer allocated until it deregisters the
                // window (nccl.h contract), which drops weft's window first.
                Ok(native) => Some(unsafe { native.coll.raw().register_window(base, size)? }),
                Err(_) => None,
            };
            let mut fallback: ncclWindow_t = std::ptr::null_mut();
            if let Some(fc) = &ready.fallback {
                let f = fc.fallback;
                let register = f.entry("ncclCommWindowRegister", f.api.window_register)?;
                // SAFETY: the application's buffer and flags, a local out-pointer, a live
                // communicator.
                let code = unsafe { register(fc.raw(), base as *mut c_void, size, &mut fallback, flags) };
                if let Err(e) = f.check("ncclCommWindowRegister", code) {
                    if let (Some(w), Ok(native)) = (weft, &ready.weft) {
                        // Every rank's fallback failed alike or the ranks now disagree; either
                        // way this window is unusable. Best effort: the peers' deregistration
                        // is collective too. No call has used the window yet.
                        // SAFETY: registered just above; no call names it.
                        let _ = unsafe { native.coll.raw().deregister_window(&w) };
                    }
                    return Err(e);
                }
            }
            if weft.is_none() && fallback.is_null() {
                return Err(NcclError::invalid_usage(
                    "ncclCommWindowRegister: nothing can register it (weft registers windows on communicators \
                     within one node, and no fallback NCCL is loaded)",
                ));
            }
            let token = Box::into_raw(Box::new(0u8)) as usize;
            crate::comm::lock(windows())
                .insert(token, WindowHandle { comm: handle, weft, fallback: fallback as usize });
            // SAFETY: the application's non-null `ncclWindow_t*`, writable until the
            // registration completes (nccl.h contract).
            unsafe { (out as *mut ncclWindow_t).write(token as ncclWindow_t) };
            Ok(())
        }
        WindowWork::Deregister { win } => {
            check_window(handle as ncclComm_t, win as ncclWindow_t)?;
            let Some(w) = crate::comm::lock(windows()).remove(&win) else {
                return Err(NcclError::invalid_argument(format!("window {win:#x} was deregistered twice")));
            };
            // SAFETY: made by Box::into_raw at registration; removed from the table above, so
            // freed once.
            drop(unsafe { Box::from_raw(win as *mut u8) });
            let mut first = None;
            if let (Some(window), Ok(native)) = (w.weft, &ready.weft) {
                // SAFETY: the application deregisters after every call using the window
                // completed (nccl.h contract).
                let deregistered = unsafe { native.coll.raw().deregister_window(&window) };
                if let Err(e) = deregistered {
                    first.get_or_insert(NcclError::from(e));
                }
            }
            if let Some(fc) = ready.fallback.as_ref().filter(|_| w.fallback != 0) {
                let f = fc.fallback;
                let deregister = f.entry("ncclCommWindowDeregister", f.api.window_deregister)?;
                // SAFETY: a window the fallback created for this communicator.
                if let Err(e) = f.check("ncclCommWindowDeregister", unsafe { deregister(fc.raw(), w.fallback as _) }) {
                    first.get_or_insert(e);
                }
            }
            first.map_or(Ok(()), Err)
        }
    }
}

/// Runs `f` on every job: inline for one, else on one scoped thread each (several ranks of
/// one thread must progress together when `f` waits for the peers). Returns the first error;
/// every job runs.
fn on_threads<J: Send>(jobs: Vec<J>, f: impl Fn(J) -> Result<(), NcclError> + Sync) -> Result<(), NcclError> {
    let run = |job: J| {
        catch_unwind(AssertUnwindSafe(|| f(job))).unwrap_or_else(|_| {
            Err(NcclError::new(Code::InternalError, "internal error (a weft bug) in a rank's thread"))
        })
    };
    let outcomes: Vec<Result<(), NcclError>> = if jobs.len() == 1 {
        jobs.into_iter().map(run).collect()
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = jobs.into_iter().map(|job| s.spawn(|| run(job))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(NcclError::new(Code::InternalError, "rank thread panicked"))))
                .collect()
        })
    };
    outcomes.into_iter().find_map(Result::err).map_or(Ok(()), Err)
}

/// An initialised rank: the state, its rank and ranks (`None`: a split without a color).
pub type InitOutcome = Result<Option<(Ready, usize, usize)>, NcclError>;

/// Runs every initialisation at once, one thread each when there are several.
pub fn initialise_all(specs: Vec<InitSpec>) -> Vec<InitOutcome> {
    let run = |spec: InitSpec| {
        catch_unwind(AssertUnwindSafe(|| initialise(spec))).unwrap_or_else(|_| {
            Err(NcclError::new(Code::InternalError, "internal error (a weft bug) while initialising"))
        })
    };
    if specs.len() == 1 {
        return specs.into_iter().map(run).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = specs.into_iter().map(|spec| s.spawn(move || run(spec))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(NcclError::new(Code::InternalError, "init thread panicked"))))
            .collect()
    })
}

/// A communicator that finished initialising, as a new handle.
pub fn new_handle(ready: Ready, rank: usize, nranks: usize) -> ncclComm_t {
    let comm = Comm::pending(rank, nranks, ready.device.ordinal());
    comm.finish(Ok(ready));
    publish(comm)
}

/// Drops the work of a group that failed before its end (`error`: the call that failed): its
/// pending communicators fail with that error, nothing is launched or registered.
pub fn discard(items: Vec<Deferred>, error: &NcclError) {
    for item in items {
        match item {
            Deferred::Init { comm, .. } => {
                comm.finish(Err(error.clone().context("its group failed before ncclGroupEnd")));
            }
            Deferred::Split { .. } | Deferred::Call { .. } | Deferred::Setup { .. } => {
                tracing::debug!("ncclGroupEnd: discarded queued work of a failed group");
            }
        }
    }
}

/// Runs queued (or immediate) work for the entry point `call` (`ncclGroupEnd`, or the call
/// itself outside a group): initialisations first, then the calls. Returns the first error;
/// everything else still runs. Each failure is also kept as the last error of the
/// communicator it concerns, as `call: message`, so that `ncclGetLastError(comm)` reports it
/// on any thread.
pub fn run(call: &'static str, items: Vec<Deferred>) -> Result<(), NcclError> {
    let _restore = SavedContext::save();
    let mut first: Option<NcclError> = None;
    let mut note = |r: Result<(), NcclError>| {
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    };
    let mut specs = Vec::new();
    let mut targets = Vec::new();
    let mut calls = Vec::new();
    let mut setup_items = Vec::new();
    for item in items {
        match item {
            Deferred::Init { comm, spec } => {
                specs.push(*spec);
                targets.push(Target::Existing(comm));
            }
            Deferred::Split { spec, out } => {
                specs.push(*spec);
                targets.push(Target::Out(out));
            }
            Deferred::Call { comm, call } => calls.push((comm, call)),
            Deferred::Setup { comm, work } => setup_items.push((comm, work)),
        }
    }
    for (target, outcome) in targets.into_iter().zip(initialise_all(specs)) {
        let comm = match &target {
            Target::Existing(comm) => Some(Arc::clone(comm)),
            Target::Out(_) => None,
        };
        let delivered = target.deliver(outcome);
        if let (Some(comm), Err(e)) = (comm, &delivered) {
            comm.record_error(&format!("{call}: {}", e.message));
        }
        note(delivered);
    }
    if !setup_items.is_empty() {
        note(run_setup_work(setup_items));
    }
    note(run_calls(call, calls));
    first.map_or(Ok(()), Err)
}

enum Target {
    Existing(Arc<Comm>),
    Out(usize),
}

impl Target {
    fn deliver(self, outcome: InitOutcome) -> Result<(), NcclError> {
        match (self, outcome) {
            (Target::Existing(comm), Ok(Some((ready, _, _)))) => {
                comm.finish(Ok(ready));
                Ok(())
            }
            (Target::Existing(comm), Ok(None)) => {
                let e = NcclError::new(Code::InternalError, "initialisation produced no communicator");
                comm.finish(Err(e.clone()));
                Err(e)
            }
            (Target::Existing(comm), Err(e)) => {
                comm.finish(Err(e.clone()));
                Err(e)
            }
            (Target::Out(out), Ok(found)) => {
                let handle = found.map_or(std::ptr::null_mut(), |(ready, rank, n)| new_handle(ready, rank, n));
                // SAFETY: `out` is the application's non-null `ncclComm_t*` (checked when the
                // call was queued), valid until the group ends (nccl.h contract).
                unsafe { (out as *mut ncclComm_t).write(handle) };
                Ok(())
            }
            (Target::Out(_), Err(e)) => Err(e),
        }
    }
}

/// Routes and runs calls: the fallback's inside one fallback group, weft's per communicator
/// (collectives in order, then all point-to-point operations as one group).
/// A call outside any group: routed and run at once. The per-call path of an application that
/// does not group its collectives, so it builds no lists (no host allocation for a collective).
pub fn run_one(comm: &Comm, call: Call) -> Result<(), NcclError> {
    let _restore = SavedContext::save();
    let ready = comm.ready()?;
    let refused = ready.refused_across_nodes(&call);
    match route(call.kind(), call.pattern(comm.nranks).or(refused.as_deref()), ready.engines(env()?))? {
        Route::Fallback => fallback_call(&ready, &call),
        Route::Weft => run_weft(comm, &ready, std::slice::from_ref(&call)),
    }
}

fn run_calls(call_name: &'static str, calls: Vec<(Arc<Comm>, Call)>) -> Result<(), NcclError> {
    if calls.is_empty() {
        return Ok(());
    }
    let env = env()?;
    let mut first = None;
    let record = |comm: &Comm, e: &NcclError| comm.record_error(&format!("{call_name}: {}", e.message));
    let mut fallback_calls: Vec<(Arc<Ready>, Call)> = Vec::new();
    let mut fallback_comms: Vec<Arc<Comm>> = Vec::new();
    let mut weft_calls: Vec<(Arc<Comm>, Arc<Ready>, Vec<Call>)> = Vec::new();
    for (comm, call) in calls {
        let routed = comm.ready().and_then(|ready| {
            let refused = ready.refused_across_nodes(&call);
            let r = route(call.kind(), call.pattern(comm.nranks).or(refused.as_deref()), ready.engines(env))?;
            Ok((ready, r))
        });
        match routed {
            Err(e) => {
                let e = e.context(format!("{} on rank {} of {}", call.kind(), comm.rank, comm.nranks));
                record(&comm, &e);
                first.get_or_insert(e);
            }
            Ok((ready, Route::Fallback)) => {
                fallback_calls.push((ready, call));
                fallback_comms.push(comm);
            }
            Ok((ready, Route::Weft)) => match weft_calls.iter_mut().find(|(c, _, _)| Arc::ptr_eq(c, &comm)) {
                Some((_, _, list)) => list.push(call),
                None => weft_calls.push((comm, ready, vec![call])),
            },
        }
    }
    if !fallback_calls.is_empty()
        && let Err(e) = run_fallback(&fallback_calls)
    {
        // The fallback's group fails as a whole: every communicator in it keeps the message.
        for comm in &fallback_comms {
            record(comm, &e);
        }
        first.get_or_insert(e);
    }
    // One thread issuing several ranks' calls that exchange on the host: a captured call may
    // agree with its peers on zero-copy, and under `WEFT_CHECK_CALLS` every call compares
    // itself with its peers' (host exchanges that wait for every rank), so each communicator's
    // calls go on their own thread, in order; other eager calls never wait and stay on this one.
    if weft_calls.len() > 1 && weft_calls.iter().any(|(_, ready, list)| exchanges_on_host(ready, list)) {
        if let Err(e) = on_threads(weft_calls, |(comm, ready, list)| {
            let _restore = SavedContext::save();
            ready.device.bind()?;
            run_weft(&comm, &ready, &list).map_err(|e| {
                let e = e.context(format!("rank {} of {}", comm.rank, comm.nranks));
                record(&comm, &e);
                e
            })
        }) {
            first.get_or_insert(e);
        }
        return first.map_or(Ok(()), Err);
    }
    for (comm, ready, list) in &weft_calls {
        if let Err(e) = run_weft(comm, ready, list) {
            let e = e.context(format!("rank {} of {}", comm.rank, comm.nranks));
            record(comm, &e);
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Whether running `calls` waits on the host for the other ranks: the communicator checks every
/// call against its peers' (`WEFT_CHECK_CALLS`), or a call is captured.
fn exchanges_on_host(ready: &Ready, calls: &[Call]) -> bool {
    ready.weft.as_ref().is_ok_and(|native| native.coll.config().check_calls) || captures(ready, calls)
}

/// Whether any of `calls` is issued to a stream that is capturing a CUDA graph (a query
/// failure counts as capturing: the threaded path is correct either way).
fn captures(ready: &Ready, calls: &[Call]) -> bool {
    calls.iter().any(|call| {
        // SAFETY: the application's stream of this communicator's GPU (nccl.h contract); only
        // queried.
        let stream = unsafe { Stream::borrowed(&ready.device, call.stream as *mut c_void as _) };
        stream.is_capturing().unwrap_or(true)
    })
}

fn run_fallback(calls: &[(Arc<Ready>, Call)]) -> Result<(), NcclError> {
    let Some(f) = calls.first().and_then(|(r, _)| r.fallback.as_ref()).map(|c| c.fallback) else {
        return Err(NcclError::new(Code::InternalError, "routed to a fallback that does not exist"));
    };
    let grouped = calls.len() > 1;
    if grouped {
        let start = f.entry("ncclGroupStart", f.api.group_start)?;
        // SAFETY: no arguments.
        f.check("ncclGroupStart", unsafe { start() })?;
    }
    let mut first = None;
    for (ready, call) in calls {
        if let Err(e) = fallback_call(ready, call) {
            first.get_or_insert(e);
        }
    }
    if grouped {
        let end = f.entry("ncclGroupEnd", f.api.group_end)?;
        // SAFETY: closes the group opened above.
        let r = f.check("ncclGroupEnd", unsafe { end() });
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

fn fallback_call(ready: &Ready, call: &Call) -> Result<(), NcclError> {
    let fc = ready.fallback.as_ref().ok_or_else(|| NcclError::new(Code::InternalError, "no fallback communicator"))?;
    let (f, comm) = (fc.fallback, fc.raw());
    let (send, recv) = (call.send as *const c_void, call.recv as *mut c_void);
    let (count, dtype, stream) = (call.count, call.dtype as i32, call.stream as *mut c_void);
    let api = &f.api;
    let to_c = |r: usize| i32::try_from(r).unwrap_or(i32::MAX);
    ready.device.bind()?;
    tracing::debug!(kind = %call.kind(), count, dtype = call.dtype.name(), "route: fallback NCCL");
    // SAFETY: in every arm, the arguments are the application's, checked as nccl.h requires and
    // passed on unchanged to the same entry point of the real NCCL with its communicator.
    let (name, code): (&str, ncclResult_t) = unsafe {
        match call.coll {
            Coll::AllReduce(op) => (
                "ncclAllReduce",
                f.entry("ncclAllReduce", api.all_reduce)?(send, recv, count, dtype, op.fallback_raw()?, comm, stream),
            ),
            Coll::AllGather => {
                ("ncclAllGather", f.entry("ncclAllGather", api.all_gather)?(send, recv, count, dtype, comm, stream))
            }
            Coll::ReduceScatter(op) => (
                "ncclReduceScatter",
                f.entry("ncclReduceScatter", api.reduce_scatter)?(
                    send,
                    recv,
                    count,
                    dtype,
                    op.fallback_raw()?,
                    comm,
                    stream,
                ),
            ),
            Coll::Broadcast { root } => (
                "ncclBroadcast",
                f.entry("ncclBroadcast", api.broadcast)?(send, recv, count, dtype, to_c(root), comm, stream),
            ),
            Coll::Reduce { op, root } => (
                "ncclReduce",
                f.entry("ncclReduce", api.reduce)?(
                    send,
                    recv,
                    count,
                    dtype,
                    op.fallback_raw()?,
                    to_c(root),
                    comm,
                    stream,
                ),
            ),
            Coll::AllToAll => {
                ("ncclAlltoAll", f.entry("ncclAlltoAll", api.all_to_all)?(send, recv, count, dtype, comm, stream))
            }
            Coll::Gather { root } => {
                ("ncclGather", f.entry("ncclGather", api.gather)?(send, recv, count, dtype, to_c(root), comm, stream))
            }
            Coll::Scatter { root } => (
                "ncclScatter",
                f.entry("ncclScatter", api.scatter)?(send, recv, count, dtype, to_c(root), comm, stream),
            ),
            Coll::Send { peer } => {
                ("ncclSend", f.entry("ncclSend", api.send)?(send, count, dtype, to_c(peer), comm, stream))
            }
            Coll::Recv { peer } => {
                ("ncclRecv", f.entry("ncclRecv", api.recv)?(recv, count, dtype, to_c(peer), comm, stream))
            }
        }
    };
    f.check(name, code)
}

/// The point-to-point operations of a gather, scatter, send or receive on this rank.
pub fn p2p_ops(call: &Call, rank: usize, nranks: usize) -> Vec<P2pOp> {
    let (count, dtype) = (call.count, call.dtype);
    let block = (count * dtype.size()) as u64;
    let op = |kind, peer, ptr| P2pOp { kind, peer, ptr, count, dtype };
    match call.coll {
        Coll::Send { peer } => vec![op(P2pKind::Send, peer, call.send)],
        Coll::Recv { peer } => vec![op(P2pKind::Recv, peer, call.recv)],
        Coll::Gather { root } => {
            let mut ops = vec![op(P2pKind::Send, root, call.send)];
            if rank == root {
                ops.extend((0..nranks).map(|p| op(P2pKind::Recv, p, call.recv + p as u64 * block)));
            }
            ops
        }
        Coll::Scatter { root } => {
            let mut ops = Vec::new();
            if rank == root {
                ops.extend((0..nranks).map(|p| op(P2pKind::Send, p, call.send + p as u64 * block)));
            }
            ops.push(op(P2pKind::Recv, root, call.recv));
            ops
        }
        _ => Vec::new(),
    }
}

fn run_weft(comm: &Comm, ready: &Ready, calls: &[Call]) -> Result<(), NcclError> {
    let native = ready.weft.as_ref().map_err(|why| NcclError::new(Code::InternalError, why.clone()))?;
    let coll = &native.coll;
    let mut p2p: Vec<P2pOp> = Vec::new();
    let mut p2p_stream: Option<usize> = None;
    for call in calls {
        // SAFETY: the application's stream of this communicator's GPU (nccl.h contract); it
        // outlives the call, which only enqueues work on it.
        let stream = unsafe { Stream::borrowed(&ready.device, call.stream as *mut c_void as _) };
        let (s, r, n, t) = (call.send, call.recv, call.count, call.dtype);
        // SAFETY: for every call, nccl.h makes the application keep the buffers valid device
        // memory for the extents the call implies until the stream's work is done, and every
        // rank make the matching call; weft checks the buffers lie in this GPU's memory.
        let algorithm = unsafe {
            match call.coll {
                Coll::AllReduce(op) => Some(coll.raw().all_reduce(s, r, n, t, op.reduction()?, &stream)?),
                Coll::AllGather => Some(coll.raw().all_gather(s, r, n, t, &stream)?),
                Coll::ReduceScatter(op) => Some(coll.raw().reduce_scatter(s, r, n, t, op.reduction()?, &stream)?),
                Coll::Broadcast { root } => Some(coll.raw().broadcast(s, r, n, t, root, &stream)?),
                Coll::Reduce { op, root } => Some(coll.raw().reduce(s, r, n, t, op.reduction()?, root, &stream)?),
                Coll::AllToAll => Some(coll.raw().all_to_all(s, r, n, t, &stream)?),
                Coll::Gather { .. } | Coll::Scatter { .. } | Coll::Send { .. } | Coll::Recv { .. } => None,
            }
        };
        match algorithm {
            Some(a) => tracing::debug!(kind = %call.kind(), count = n, dtype = t.name(), algorithm = %a, "route: weft"),
            None => {
                if p2p_stream.is_some_and(|st| st != call.stream) {
                    return Err(NcclError::invalid_usage(
                        "weft runs the point-to-point operations of one group on one communicator on one stream; \
                         this group uses several",
                    ));
                }
                p2p_stream = Some(call.stream);
                p2p.extend(p2p_ops(call, comm.rank, comm.nranks));
            }
        }
    }
    if let Some(raw) = p2p_stream {
        // SAFETY: as above.
        let stream = unsafe { Stream::borrowed(&ready.device, raw as *mut c_void as _) };
        // SAFETY: as above, for every operation of the group.
        let a = unsafe { coll.raw().send_recv(&p2p, &stream)? };
        tracing::debug!(operations = p2p.len(), algorithm = %a, "route: weft (point-to-point group)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(coll: Coll, count: usize) -> Call {
        Call { coll, send: 0x1000, recv: 0x9000, count, dtype: DataType::F32, stream: 0 }
    }

    #[test]
    fn checks_cover_ranges_nulls_and_overflow() {
        let comm = Comm::pending(1, 4, 0);
        assert!(call(Coll::AllReduce(Op::Builtin(weft_types::ReduceOp::Sum)), 8).checked_for(&comm).is_ok());
        assert!(call(Coll::Broadcast { root: 4 }, 8).checked_for(&comm).unwrap_err().message.contains("root 4"));
        assert!(call(Coll::Send { peer: 9 }, 8).checked_for(&comm).unwrap_err().message.contains("peer 9"));
        assert!(call(Coll::AllGather, usize::MAX / 8).checked_for(&comm).unwrap_err().message.contains("overflows"));
        assert!(call(Coll::AllGather, usize::MAX).bytes().is_err());
        let null_send = Call { send: 0, ..call(Coll::AllGather, 8) };
        assert!(null_send.checked_for(&comm).unwrap_err().message.contains("sendbuff"));
        // A non-root's broadcast send buffer is not used; zero counts need no buffers.
        assert!(Call { send: 0, ..call(Coll::Broadcast { root: 0 }, 8) }.checked_for(&comm).is_ok());
        assert!(Call { send: 0, recv: 0, ..call(Coll::AllGather, 0) }.checked_for(&comm).is_ok());
        let custom = call(Coll::AllReduce(Op::Custom(5)), 8);
        assert!(custom.checked_for(&comm).unwrap_err().message.contains("ncclRedOpCreatePreMulSum"));
    }

    #[test]
    fn custom_operators_resolve_to_the_communicators_premulsum_of_the_calls_type() {
        let comm = Comm::pending(0, 2, 0);
        let scalar = weft_coll::Scalar::Device(0x7000_0000);
        let handle = crate::comm::lock(&comm.user_ops).insert(DataType::F32, scalar, None);
        let want = crate::ops::UserOp { handle, dtype: DataType::F32, scalar, fallback: None };
        for coll in [Coll::AllReduce(Op::Custom(handle)), Coll::ReduceScatter(Op::Custom(handle))] {
            let checked = call(coll, 8).checked_for(&comm).unwrap();
            assert_eq!(checked.op(), Some(Op::PreMulSum(want)));
        }
        let reduce = call(Coll::Reduce { op: Op::Custom(handle), root: 1 }, 8).checked_for(&comm).unwrap();
        assert_eq!(reduce.coll, Coll::Reduce { op: Op::PreMulSum(want), root: 1 });
        // Another type than the operator's; an operator of another communicator.
        let half = Call { dtype: DataType::F16, ..call(Coll::AllReduce(Op::Custom(handle)), 8) };
        assert!(half.checked_for(&comm).unwrap_err().message.contains("created for f32 but the call reduces f16"));
        let other = Comm::pending(0, 2, 0);
        let err = call(Coll::AllReduce(Op::Custom(handle)), 8).checked_for(&other).unwrap_err();
        assert!(err.message.contains("unknown to this communicator"), "{}", err.message);
        // Built-in operators are left alone.
        let sum = call(Coll::AllReduce(Op::Builtin(weft_types::ReduceOp::Sum)), 8).checked_for(&comm).unwrap();
        assert_eq!(sum.op(), Some(Op::Builtin(weft_types::ReduceOp::Sum)));
    }

    #[test]
    fn a_group_failure_is_the_last_error_of_its_communicator_on_every_thread() {
        // A call queued on a communicator whose initialisation has not run fails at the end of
        // the group; the communicator keeps the message, any thread can read it.
        let comm = Comm::pending(1, 2, 0);
        let handle = publish(Arc::clone(&comm));
        let queued = Deferred::Call { comm: Arc::clone(&comm), call: call(Coll::AllGather, 8) };
        let err = run("ncclGroupEnd", vec![queued]).unwrap_err();
        assert!(err.message.contains("allgather on rank 1 of 2"), "{}", err.message);
        let address = handle as usize;
        let from_another_thread = std::thread::spawn(move || {
            let comm = crate::comm::lookup(address as ncclComm_t).unwrap();
            crate::guard::last_error_text(Some(comm.last_error()))
        })
        .join()
        .unwrap();
        assert!(from_another_thread.starts_with("ncclGroupEnd: allgather"), "{from_another_thread}");
        assert!(from_another_thread.contains("still being initialised"), "{from_another_thread}");
        // An entry point naming the communicator records its own failures there too.
        let code = crate::guard::guard_on("ncclCommCount", handle, || Err(NcclError::invalid_argument("count")));
        assert_eq!(code, crate::ffi::ncclInvalidArgument);
        assert_eq!(comm.last_error(), "ncclCommCount: count");
        crate::comm::unpublish(handle).unwrap();
    }

    #[test]
    fn gathers_and_scatters_become_point_to_point_groups() {
        let g = call(Coll::Gather { root: 0 }, 2);
        assert_eq!(p2p_ops(&g, 1, 3).len(), 1);
        let root = p2p_ops(&g, 0, 3);
        assert_eq!(root.len(), 4);
        assert_eq!((root[3].kind, root[3].peer, root[3].ptr), (P2pKind::Recv, 2, 0x9000 + 16));
        let s = p2p_ops(&call(Coll::Scatter { root: 2 }, 2), 2, 3);
        assert_eq!((s[1].kind, s[1].peer, s[1].ptr), (P2pKind::Send, 1, 0x1000 + 8));
        assert_eq!(s.last().map(|o| (o.kind, o.peer)), Some((P2pKind::Recv, 2)));
        let a2a = call(Coll::AllToAll, 4);
        assert_eq!(a2a.pattern(4), None);
        assert!(Call { recv: 0x1010, ..a2a }.pattern(4).unwrap().contains("partially overlapping"));
        // In place (equal buffers) runs on weft, as do disjoint ones and empty calls.
        assert_eq!(Call { recv: 0x1000, ..a2a }.pattern(4), None);
        assert_eq!(Call { recv: 0x1010, ..call(Coll::AllToAll, 0) }.pattern(4), None);
    }
}

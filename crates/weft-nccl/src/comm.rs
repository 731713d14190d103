//! Communicators: the object behind an `ncclComm_t`, the table of live ones, configuration
//! checks, and initialisation (rendezvous, the weft side, the fallback side, and the check
//! that every rank agrees on what the communicator can do).

use std::collections::{BTreeSet, HashMap};
use std::ffi::{CStr, CString, c_int};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use weft_bootstrap::{Bootstrap, InProcessBootstrap, TcpBootstrap, UniqueId};
use weft_coll::{CollConfig, Collectives};
use weft_core::Communicator;
use weft_gpu::Device;
use weft_types::{Collective, ReduceOp};

use crate::dev_comm::DevComms;
use crate::env::{NcclEnv, env};
use crate::error::{Code, NcclError};
use crate::exec::{Call, Coll};
use crate::fallback::{self, FallbackComm};
use crate::ffi::{self, ncclComm, ncclComm_t, ncclConfig_t};
use crate::ops::UserOps;
use crate::route::{Engines, Op};

/// Bootstrap tag of the unique id a split's leader sends its members.
const SPLIT_TAG: u32 = 0x5746_4e01;

/// Locks `m`; a poisoned lock still holds consistent data (entries are replaced whole).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// weft's side of a communicator.
#[derive(Debug)]
pub struct Native {
    /// Device communicators of `ncclDevCommCreate` (declared first: dropped before the
    /// communicator whose memory they use).
    pub dev_comms: DevComms,
    /// The communicator.
    pub comm: Communicator,
    /// Its collectives.
    pub coll: Collectives,
    /// Whether its ranks span nodes (hosts or virtual nodes), where weft runs only AllReduce
    /// and the device API; fixed at init, read by every call's route.
    pub spans_nodes: bool,
}

/// A communicator whose initialisation finished.
#[derive(Debug)]
pub struct Ready {
    /// This rank's GPU.
    pub device: Device,
    /// The rendezvous (splits use it).
    pub bootstrap: Arc<dyn Bootstrap>,
    /// The IP a split's leader hosts the new rendezvous on.
    pub split_ip: IpAddr,
    /// weft's side, or why there is none (then every call goes to the fallback).
    pub weft: Result<Native, String>,
    /// The fallback's communicator, if `WEFT_NCCL_FALLBACK_LIB` is set.
    pub fallback: Option<FallbackComm>,
    /// `ncclConfig_t.commName`.
    pub name: Option<String>,
}

impl Ready {
    /// Why weft refuses `call` between nodes, when the ranks span nodes and weft's choice
    /// across nodes has no algorithm for it (an FP8 AllReduce beyond 8 ranks, say): asked of
    /// weft without launching, the same on every rank. Other kinds across nodes are the route's
    /// rule ([`Engines::spans_nodes`]).
    pub fn refused_across_nodes(&self, call: &Call) -> Option<String> {
        let native = self.weft.as_ref().ok().filter(|n| n.spans_nodes)?;
        let Coll::AllReduce(op) = call.coll else { return None };
        // A custom operator is a PreMulSum (`ncclRedOpCreatePreMulSum`).
        let op = match op {
            Op::Builtin(op) => op,
            Op::PreMulSum(_) | Op::Custom(_) => ReduceOp::PreMulSum,
        };
        let bytes = call.count.saturating_mul(call.dtype.size());
        let chosen = native.coll.across_nodes(Collective::AllReduce, bytes, call.dtype, op)?;
        chosen.err().map(|e| e.to_string())
    }

    /// What this communicator can route to.
    pub fn engines(&self, env: &NcclEnv) -> Engines<'_> {
        Engines {
            weft_missing: self.weft.as_ref().err().map(String::as_str),
            fallback: self.fallback.is_some(),
            force: env.force,
            spans_nodes: self.weft.as_ref().is_ok_and(|n| n.spans_nodes),
        }
    }
}

#[derive(Debug)]
enum State {
    /// Created inside a group; ncclGroupEnd initialises it.
    Pending,
    Ready(Arc<Ready>),
    Failed(NcclError),
}

/// What an `ncclComm_t` points at.
#[derive(Debug)]
pub struct Comm {
    /// This rank.
    pub rank: usize,
    /// Ranks.
    pub nranks: usize,
    /// CUDA ordinal of this rank's GPU.
    pub device: usize,
    state: RwLock<State>,
    /// Operators created by `ncclRedOpCreatePreMulSum`.
    pub user_ops: Mutex<UserOps>,
    /// A failure found after the call that caused it returned (reported by
    /// `ncclCommGetAsyncError`).
    pub async_error: Mutex<Option<NcclError>>,
    /// The message of the last failed call on this communicator (`ncclGetLastError(comm)`).
    last_error: Mutex<String>,
}

impl Comm {
    /// A communicator whose initialisation is still to run.
    pub fn pending(rank: usize, nranks: usize, device: usize) -> Arc<Self> {
        Arc::new(Self {
            rank,
            nranks,
            device,
            state: RwLock::new(State::Pending),
            user_ops: Mutex::default(),
            async_error: Mutex::default(),
            last_error: Mutex::default(),
        })
    }

    /// Keeps `message` as this communicator's last error.
    pub fn record_error(&self, message: &str) {
        *lock(&self.last_error) = message.replace('\0', " ");
    }

    /// The message of the last failed call on this communicator (empty: none).
    pub fn last_error(&self) -> String {
        lock(&self.last_error).clone()
    }

    /// Records the outcome of the initialisation.
    pub fn finish(&self, outcome: Result<Ready, NcclError>) {
        let state = match outcome {
            Ok(ready) => State::Ready(Arc::new(ready)),
            Err(e) => State::Failed(e),
        };
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// The initialised communicator: `ncclInProgress` while pending, the init error if it failed.
    pub fn ready(&self) -> Result<Arc<Ready>, NcclError> {
        match &*self.state.read().unwrap_or_else(|p| p.into_inner()) {
            State::Ready(r) => Ok(Arc::clone(r)),
            State::Pending => Err(NcclError::new(
                Code::InProgress,
                "the communicator is still being initialised (call ncclGroupEnd first)",
            )),
            State::Failed(e) => Err(e.clone().context("the communicator failed to initialise")),
        }
    }

    /// Whether initialisation is still to run.
    pub fn is_pending(&self) -> bool {
        matches!(&*self.state.read().unwrap_or_else(|p| p.into_inner()), State::Pending)
    }

    /// Drops the initialised state (destroy/abort); returns it.
    pub fn take_ready(&self) -> Option<Arc<Ready>> {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, State::Failed(NcclError::invalid_usage("the communicator was destroyed")))
        {
            State::Ready(r) => Some(r),
            _ => None,
        }
    }
}

fn table() -> &'static Mutex<HashMap<usize, Arc<Comm>>> {
    static COMMS: std::sync::OnceLock<Mutex<HashMap<usize, Arc<Comm>>>> = std::sync::OnceLock::new();
    COMMS.get_or_init(Mutex::default)
}

/// Hands `comm` to the application: the handle is its address, valid until [`unpublish`].
pub fn publish(comm: Arc<Comm>) -> ncclComm_t {
    let handle = Arc::as_ptr(&comm) as *mut ncclComm;
    lock(table()).insert(handle as usize, comm);
    handle
}

/// The live communicator behind `handle`; null and unknown handles are `ncclInvalidArgument`.
pub fn lookup(handle: ncclComm_t) -> Result<Arc<Comm>, NcclError> {
    if handle.is_null() {
        return Err(NcclError::invalid_argument("comm is NULL"));
    }
    lock(table()).get(&(handle as usize)).cloned().ok_or_else(|| {
        NcclError::invalid_argument(format!("comm {handle:p} is not a live communicator (destroyed, or never created)"))
    })
}

/// Removes `handle` from the table (destroy/abort).
pub fn unpublish(handle: ncclComm_t) -> Result<Arc<Comm>, NcclError> {
    let comm = lookup(handle)?;
    lock(table()).remove(&(handle as usize));
    Ok(comm)
}

/// The `ncclConfig_t` of a communicator as weft reads it (see [`parse_config`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommConfig {
    /// `commName`.
    pub name: Option<String>,
    /// `blocking == 0`: calls may return before they finish. weft's calls always finish
    /// before returning, which a non-blocking communicator allows.
    pub nonblocking: bool,
    /// `minCTAs`: the fewest thread blocks of one of weft's launches (see
    /// `CollConfig::limit_blocks`).
    pub min_ctas: Option<u32>,
    /// `maxCTAs`: the most thread blocks of one of weft's launches.
    pub max_ctas: Option<u32>,
    /// `splitShare == 1`: a split's child may share its parent's resources. weft's child
    /// always has its own (a hint NCCL may ignore too); passed to the fallback.
    pub split_share: bool,
    /// The hints weft has no equivalent for, set to a value other than their default, as
    /// `field = value` (logged once per process at info level, passed to the fallback).
    pub ignored: Vec<String>,
    /// The fields the fallback's communicator gets (every hint as the application set it).
    pub fallback: FallbackConfig,
}

/// The `ncclConfig_t` hints passed on to the fallback's communicator: the application's values
/// (checked), strings owned. `blocking` is left unset: weft calls the fallback blocking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FallbackConfig {
    ints: [(HintField, c_int); 12],
    net_name: Option<CString>,
    comm_name: Option<CString>,
}

impl Default for FallbackConfig {
    fn default() -> Self {
        Self { ints: HintField::ALL.map(|f| (f, ffi::NCCL_CONFIG_UNDEF_INT)), net_name: None, comm_name: None }
    }
}

impl FallbackConfig {
    /// Whether every hint is unset (the fallback then gets no config at all).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Runs `f` with this configuration as an `ncclConfig_t` (its strings live during `f`).
    pub fn with_c<R>(&self, f: impl FnOnce(*mut ncclConfig_t) -> R) -> R {
        let mut c = ncclConfig_t::default();
        for &(field, value) in &self.ints {
            *field.slot(&mut c) = value;
        }
        c.netName = self.net_name.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        c.commName = self.comm_name.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        f(&mut c)
    }
}

/// The integer hints of `ncclConfig_t` (NCCL 2.28), with the values NCCL 2.28 accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HintField {
    CgaClusterSize,
    MinCtas,
    MaxCtas,
    SplitShare,
    TrafficClass,
    CollnetEnable,
    CtaPolicy,
    ShrinkShare,
    NvlsCtas,
    NChannelsPerNetPeer,
    NvlinkCentricSched,
    /// `blocking` (never passed to the fallback: kept unset there).
    Blocking,
}

impl HintField {
    const ALL: [HintField; 12] = [
        HintField::CgaClusterSize,
        HintField::MinCtas,
        HintField::MaxCtas,
        HintField::SplitShare,
        HintField::TrafficClass,
        HintField::CollnetEnable,
        HintField::CtaPolicy,
        HintField::ShrinkShare,
        HintField::NvlsCtas,
        HintField::NChannelsPerNetPeer,
        HintField::NvlinkCentricSched,
        HintField::Blocking,
    ];

    fn name(self) -> &'static str {
        match self {
            HintField::CgaClusterSize => "cgaClusterSize",
            HintField::MinCtas => "minCTAs",
            HintField::MaxCtas => "maxCTAs",
            HintField::SplitShare => "splitShare",
            HintField::TrafficClass => "trafficClass",
            HintField::CollnetEnable => "collnetEnable",
            HintField::CtaPolicy => "CTAPolicy",
            HintField::ShrinkShare => "shrinkShare",
            HintField::NvlsCtas => "nvlsCTAs",
            HintField::NChannelsPerNetPeer => "nChannelsPerNetPeer",
            HintField::NvlinkCentricSched => "nvlinkCentricSched",
            HintField::Blocking => "blocking",
        }
    }

    fn slot(self, c: &mut ncclConfig_t) -> &mut c_int {
        match self {
            HintField::CgaClusterSize => &mut c.cgaClusterSize,
            HintField::MinCtas => &mut c.minCTAs,
            HintField::MaxCtas => &mut c.maxCTAs,
            HintField::SplitShare => &mut c.splitShare,
            HintField::TrafficClass => &mut c.trafficClass,
            HintField::CollnetEnable => &mut c.collnetEnable,
            HintField::CtaPolicy => &mut c.CTAPolicy,
            HintField::ShrinkShare => &mut c.shrinkShare,
            HintField::NvlsCtas => &mut c.nvlsCTAs,
            HintField::NChannelsPerNetPeer => &mut c.nChannelsPerNetPeer,
            HintField::NvlinkCentricSched => &mut c.nvlinkCentricSched,
            HintField::Blocking => &mut c.blocking,
        }
    }

    /// Whether NCCL 2.28 accepts `value` (set, not `NCCL_CONFIG_UNDEF_INT`), and what it
    /// expects otherwise. `trafficClass` takes any value.
    fn check(self, value: c_int) -> Result<(), &'static str> {
        let ok = match self {
            HintField::CgaClusterSize => value >= 0,
            HintField::MinCtas | HintField::MaxCtas | HintField::NvlsCtas => value > 0,
            HintField::SplitShare
            | HintField::CollnetEnable
            | HintField::ShrinkShare
            | HintField::NvlinkCentricSched
            | HintField::Blocking => value == 0 || value == 1,
            // NCCL_CTA_POLICY_DEFAULT (0), _EFFICIENCY (1), _ZERO (2) and their combination.
            HintField::CtaPolicy => (0..=3).contains(&value),
            // MAXCHANNELS.
            HintField::NChannelsPerNetPeer => (1..=64).contains(&value),
            HintField::TrafficClass => true,
        };
        if ok {
            return Ok(());
        }
        Err(match self {
            HintField::CgaClusterSize => "expected 0 or more",
            HintField::MinCtas | HintField::MaxCtas | HintField::NvlsCtas => "expected 1 or more",
            HintField::CtaPolicy => "expected NCCL_CTA_POLICY_DEFAULT, _EFFICIENCY, _ZERO or a combination (0..=3)",
            HintField::NChannelsPerNetPeer => "expected 1..=64",
            _ => "expected 0 or 1",
        })
    }

    /// The value that changes nothing in NCCL either (its default), if there is one besides
    /// unset.
    fn default_value(self) -> Option<c_int> {
        match self {
            HintField::SplitShare
            | HintField::CollnetEnable
            | HintField::CtaPolicy
            | HintField::ShrinkShare
            | HintField::NvlinkCentricSched => Some(0),
            _ => None,
        }
    }
}

/// Logs each hint of `ignored` (`field = value`) that this process has not logged yet, at info
/// level: once per process and field, not once per communicator.
fn log_ignored_once(ignored: &[String]) {
    static LOGGED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let mut logged = lock(&LOGGED);
    for hint in ignored {
        let field = hint.split(" = ").next().unwrap_or(hint).to_string();
        if logged.insert(field) {
            tracing::info!(
                "ncclConfig_t.{hint}: weft has no equivalent and ignores this hint (the fallback NCCL, if loaded, \
                 gets it); logged once per process"
            );
        }
    }
}

/// Reads `config` (null: defaults), accepting every `ncclConfig_t` hint of NCCL 2.28 with any
/// value NCCL 2.28 accepts, and refusing (`ncclInvalidArgument`, naming the field) exactly the
/// values it refuses: `blocking`, `splitShare`, `shrinkShare`, `collnetEnable`,
/// `nvlinkCentricSched` other than 0 or 1; a negative `cgaClusterSize`; `minCTAs`, `maxCTAs`,
/// `nvlsCTAs` below 1; `minCTAs` above `maxCTAs` (NCCL compares them even when `maxCTAs` is
/// unset, so `minCTAs` needs `maxCTAs`); `CTAPolicy` outside 0..=3; `nChannelsPerNetPeer`
/// outside 1..=64. weft honours `commName`, `blocking`, `minCTAs` and `maxCTAs` (block limits
/// of its launches); `splitShare` and the rest are hints it has no equivalent for: logged once
/// per process at info level ([`log_ignored_once`]) and passed to the fallback.
///
/// # Safety
/// `config` must be null or point to a readable `ncclConfig_t` of at least its `size` bytes.
pub unsafe fn parse_config(config: *const ncclConfig_t) -> Result<CommConfig, NcclError> {
    if config.is_null() {
        return Ok(CommConfig::default());
    }
    // SAFETY: `size` is the first field of every config version (caller contract).
    let size = unsafe { config.cast::<usize>().read_unaligned() };
    let ours = size_of::<ncclConfig_t>();
    if size > ours {
        return Err(NcclError::invalid_argument(format!(
            "ncclConfig_t of {size} bytes is from a newer nccl.h than weft implements ({ours} bytes, NCCL 2.28)"
        )));
    }
    if size < std::mem::offset_of!(ncclConfig_t, blocking) {
        return Err(NcclError::invalid_argument(format!("ncclConfig_t.size = {size} is too small")));
    }
    let mut c = ncclConfig_t::default();
    // SAFETY: copies the `size` bytes the caller provides into a config of at least that size.
    unsafe { std::ptr::copy_nonoverlapping(config.cast::<u8>(), (&mut c as *mut ncclConfig_t).cast::<u8>(), size) };
    if c.magic != ffi::NCCL_CONFIG_MAGIC {
        return Err(NcclError::invalid_argument(format!(
            "ncclConfig_t.magic = {:#x}: initialise the config with NCCL_CONFIG_INITIALIZER",
            c.magic
        )));
    }
    let undef = ffi::NCCL_CONFIG_UNDEF_INT;
    let mut fallback = FallbackConfig::default();
    let mut ignored = Vec::new();
    for (slot, field) in fallback.ints.iter_mut().zip(HintField::ALL) {
        let value = *field.slot(&mut c);
        if value == undef {
            continue;
        }
        field.check(value).map_err(|expected| {
            NcclError::invalid_argument(format!("ncclConfig_t.{} = {value}: {expected}", field.name()))
        })?;
        let honoured = matches!(field, HintField::MinCtas | HintField::MaxCtas | HintField::Blocking);
        if !honoured && field.default_value() != Some(value) {
            ignored.push(format!("{} = {value}", field.name()));
        }
        if field != HintField::Blocking {
            *slot = (field, value);
        }
    }
    if c.minCTAs != undef && c.minCTAs > c.maxCTAs {
        let max = if c.maxCTAs == undef { "unset".to_string() } else { c.maxCTAs.to_string() };
        return Err(NcclError::invalid_argument(format!(
            "ncclConfig_t.minCTAs = {} exceeds maxCTAs = {max} (NCCL refuses minCTAs without a maxCTAs at least as \
             large)",
            c.minCTAs
        )));
    }
    let string = |p: *const std::ffi::c_char| {
        // SAFETY: a non-null netName or commName is a NUL-terminated string (nccl.h contract).
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_owned())
    };
    fallback.net_name = string(c.netName);
    fallback.comm_name = string(c.commName);
    if let Some(net) = &fallback.net_name {
        ignored.push(format!("netName = {:?}", net.to_string_lossy()));
    }
    log_ignored_once(&ignored);
    let positive = |v: c_int| u32::try_from(v).ok().filter(|&v| v > 0);
    Ok(CommConfig {
        name: fallback.comm_name.as_ref().map(|n| n.to_string_lossy().into_owned()),
        nonblocking: c.blocking == 0,
        min_ctas: positive(c.minCTAs),
        max_ctas: positive(c.maxCTAs),
        split_share: c.splitShare == 1,
        ignored,
        fallback,
    })
}

/// How a new communicator finds its peers.
#[derive(Debug)]
pub enum Rendezvous {
    /// An `ncclUniqueId` made by `ncclGetUniqueId` (TCP, rank 0 hosts the root).
    Tcp(UniqueId),
    /// One handle of an in-process group (`ncclCommInitAll`).
    InProcess(InProcessBootstrap),
    /// `ncclCommSplit` of `parent` (every parent rank takes part).
    Split {
        /// The parent.
        parent: Arc<Ready>,
        /// This rank's color (`NCCL_SPLIT_NOCOLOR`: no new communicator).
        color: c_int,
        /// Orders the new ranks (ties: parent rank).
        key: c_int,
    },
}

/// Everything an initialisation needs; runs on any thread ([`initialise`]).
#[derive(Debug)]
pub struct InitSpec {
    /// Rank in the new communicator (for splits: in the parent; recomputed).
    pub rank: usize,
    /// Ranks (for splits: of the parent; recomputed).
    pub nranks: usize,
    /// CUDA ordinal.
    pub device: usize,
    /// Rendezvous.
    pub rendezvous: Rendezvous,
    /// Configuration.
    pub config: CommConfig,
}

/// The members of a split: parent ranks of color `color`, ordered by (key, parent rank).
pub fn split_members(entries: &[(c_int, c_int)], color: c_int) -> Vec<usize> {
    let mut members: Vec<(c_int, usize)> =
        entries.iter().enumerate().filter(|(_, (c, _))| *c == color).map(|(r, (_, k))| (*k, r)).collect();
    members.sort_unstable();
    members.into_iter().map(|(_, r)| r).collect()
}

/// Initialises one rank: rendezvous, fallback communicator, weft side, agreement. `Ok(None)`
/// for a split rank with `NCCL_SPLIT_NOCOLOR`.
pub fn initialise(spec: InitSpec) -> Result<Option<(Ready, usize, usize)>, NcclError> {
    let env = env()?;
    let device = Device::new(spec.device)?;
    let (bootstrap, split_ip, fallback, rank, nranks): (Arc<dyn Bootstrap>, IpAddr, _, usize, usize) = match spec
        .rendezvous
    {
        Rendezvous::Tcp(id) => {
            let bs = TcpBootstrap::builder().connect(&id, spec.rank, spec.nranks)?;
            let ip = bs.listen_addr().ip();
            let bs: Arc<dyn Bootstrap> = Arc::new(bs);
            let fallback = fallback::create(&*bs, &device, spec.rank, spec.nranks, &spec.config.fallback)?;
            (bs, ip, fallback, spec.rank, spec.nranks)
        }
        Rendezvous::InProcess(bs) => {
            let bs: Arc<dyn Bootstrap> = Arc::new(bs);
            let fallback = fallback::create(&*bs, &device, spec.rank, spec.nranks, &spec.config.fallback)?;
            (bs, IpAddr::V4(Ipv4Addr::LOCALHOST), fallback, spec.rank, spec.nranks)
        }
        Rendezvous::Split { parent, color, key } => {
            let fallback = split_fallback(&parent, &device, color, key, &spec.config.fallback)?;
            let mine = [color.to_le_bytes(), key.to_le_bytes()].concat();
            let all = parent.bootstrap.all_gather(&mine)?;
            let entries: Vec<(c_int, c_int)> = all
                .iter()
                .map(|b| {
                    let word = |i: usize| b.get(i..i + 4).and_then(|s| s.try_into().ok()).map(c_int::from_le_bytes);
                    word(0).zip(word(4)).ok_or_else(|| NcclError::system("malformed split exchange"))
                })
                .collect::<Result<_, _>>()?;
            if color == ffi::NCCL_SPLIT_NOCOLOR {
                return Ok(None);
            }
            let members = split_members(&entries, color);
            let me = parent.bootstrap.rank();
            let rank = members.iter().position(|&r| r == me).ok_or_else(|| NcclError::system("split: lost rank"))?;
            let id = if rank == 0 {
                let id = UniqueId::new(SocketAddr::new(parent.split_ip, 0))?;
                for &m in &members[1..] {
                    parent.bootstrap.send(m, SPLIT_TAG, &id.to_bytes())?;
                }
                id
            } else {
                UniqueId::from_bytes(&parent.bootstrap.recv(members[0], SPLIT_TAG)?)?
            };
            let bs = TcpBootstrap::builder().connect(&id, rank, members.len())?;
            let ip = bs.listen_addr().ip();
            (Arc::new(bs), ip, fallback, rank, members.len())
        }
    };
    let native = native(&bootstrap, &device, env, &spec.config);
    let weft = agree(&*bootstrap, native, fallback.is_some(), env)?;
    if let (Err(why), None) = (&weft, &fallback) {
        return Err(NcclError::invalid_usage(format!(
            "weft cannot run this communicator ({why}) and no fallback NCCL is loaded (WEFT_NCCL_FALLBACK_LIB)"
        )));
    }
    tracing::debug!(
        rank,
        nranks,
        device = device.ordinal(),
        weft = weft.is_ok(),
        fallback = fallback.is_some(),
        "communicator ready"
    );
    let ready = Ready { device, bootstrap, split_ip, weft, fallback, name: spec.config.name };
    Ok(Some((ready, rank, nranks)))
}

/// The fallback's `ncclCommSplit` of the parent's fallback communicator.
fn split_fallback(
    parent: &Ready,
    device: &Device,
    color: c_int,
    key: c_int,
    config: &FallbackConfig,
) -> Result<Option<FallbackComm>, NcclError> {
    let Some(pf) = &parent.fallback else { return Ok(None) };
    let f = pf.fallback;
    let split = f.entry("ncclCommSplit", f.api.comm_split)?;
    device.bind()?;
    let mut raw = std::ptr::null_mut();
    let code = if config.is_default() {
        // SAFETY: live parent communicator, out-pointer to a local, null config (the parent's).
        unsafe { split(pf.raw(), color, key, &mut raw, std::ptr::null_mut()) }
    } else {
        // SAFETY: as above, with a config that lives during the call.
        config.with_c(|c| unsafe { split(pf.raw(), color, key, &mut raw, c) })
    };
    f.check("ncclCommSplit", code)?;
    // SAFETY: the fallback just created `raw` (null for NCCL_SPLIT_NOCOLOR); we own it.
    Ok((!raw.is_null()).then(|| unsafe { FallbackComm::adopt(f, raw) }))
}

fn native(
    bootstrap: &Arc<dyn Bootstrap>,
    device: &Device,
    env: &NcclEnv,
    hints: &CommConfig,
) -> Result<Native, NcclError> {
    let comm = Communicator::new(Arc::clone(bootstrap), device.clone(), env.weft.clone())?;
    let mut config = CollConfig::from_env(&env.weft).map_err(NcclError::invalid_usage)?;
    if let Some(change) = config.limit_blocks(hints.min_ctas, hints.max_ctas) {
        tracing::info!(
            min_ctas = ?hints.min_ctas,
            max_ctas = ?hints.max_ctas,
            "ncclConfig_t minCTAs/maxCTAs: blocks per launch {change}"
        );
    }
    let coll = Collectives::new(&comm, config)?;
    let spans_nodes = comm.topology().spans_nodes();
    Ok(Native { dev_comms: DevComms::default(), comm, coll, spans_nodes })
}

/// Every rank learns whether every rank set up weft's side, and checks that all ranks agree on
/// the fallback and the force list (otherwise ranks would route the same call differently).
fn agree(
    bootstrap: &dyn Bootstrap,
    native: Result<Native, NcclError>,
    fallback: bool,
    env: &NcclEnv,
) -> Result<Result<Native, String>, NcclError> {
    let force = env.force.bits().to_le_bytes();
    let mine = [u8::from(native.is_ok()), u8::from(fallback), force[0], force[1]];
    let all = bootstrap.all_gather(&mine)?;
    if all.iter().any(|a| a.get(1..4) != mine.get(1..4)) {
        return Err(NcclError::invalid_usage(
            "ranks disagree on WEFT_NCCL_FALLBACK_LIB or WEFT_NCCL_FORCE_FALLBACK (set them alike on every rank)",
        ));
    }
    let failed = all.iter().position(|a| a.first() != Some(&1));
    Ok(match (native, failed) {
        (Ok(n), None) => Ok(n),
        (Err(e), _) => {
            tracing::debug!(error = %e, "weft side unavailable on this rank");
            Err(e.message)
        }
        (Ok(_), Some(r)) => Err(format!("rank {r} could not set up weft")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// `parse_config` of `c`.
    fn parse(c: &ncclConfig_t) -> Result<CommConfig, NcclError> {
        // SAFETY: a live config of its full size.
        unsafe { parse_config(c) }
    }

    #[test]
    fn every_nccl_2_28_hint_is_accepted_and_the_cta_limits_honoured() {
        // SAFETY: null is allowed.
        assert_eq!(unsafe { parse_config(std::ptr::null()) }.unwrap(), CommConfig::default());
        let (name, net) = (CString::new("tp").unwrap(), CString::new("Socket").unwrap());
        let c = ncclConfig_t {
            blocking: 0,
            commName: name.as_ptr(),
            nvlinkCentricSched: 1,
            CTAPolicy: 1,
            minCTAs: 4,
            maxCTAs: 32,
            cgaClusterSize: 2,
            nChannelsPerNetPeer: 8,
            trafficClass: 3,
            splitShare: 1,
            shrinkShare: 1,
            collnetEnable: 1,
            netName: net.as_ptr(),
            nvlsCTAs: 16,
            ..ncclConfig_t::default()
        };
        let parsed = parse(&c).unwrap();
        assert_eq!(parsed.name.as_deref(), Some("tp"));
        assert!(parsed.nonblocking && parsed.split_share);
        assert_eq!((parsed.min_ctas, parsed.max_ctas), (Some(4), Some(32)));
        for hint in [
            "nvlinkCentricSched = 1",
            "CTAPolicy = 1",
            "cgaClusterSize = 2",
            "nChannelsPerNetPeer = 8",
            "trafficClass = 3",
            "splitShare = 1",
            "shrinkShare = 1",
            "collnetEnable = 1",
            "nvlsCTAs = 16",
            "netName = \"Socket\"",
        ] {
            assert!(parsed.ignored.iter().any(|i| i == hint), "{hint} not in {:?}", parsed.ignored);
        }
        // Honoured fields are not reported as ignored; defaults (0) are not either.
        assert!(!parsed.ignored.iter().any(|i| i.starts_with("minCTAs") || i.starts_with("blocking")));
        let zeros = ncclConfig_t { CTAPolicy: 0, splitShare: 0, collnetEnable: 0, ..ncclConfig_t::default() };
        assert!(parse(&zeros).unwrap().ignored.is_empty());
        // The fallback gets every hint as set, strings included, but not `blocking`.
        assert!(!parsed.fallback.is_default());
        parsed.fallback.with_c(|f| {
            // SAFETY: `f` is live during the closure.
            let f = unsafe { &*f };
            assert_eq!((f.nvlinkCentricSched, f.minCTAs, f.maxCTAs, f.trafficClass), (1, 4, 32, 3));
            assert_eq!(f.blocking, ffi::NCCL_CONFIG_UNDEF_INT);
            // SAFETY: the strings live as long as `parsed`.
            assert_eq!(unsafe { CStr::from_ptr(f.netName) }.to_str().unwrap(), "Socket");
            // SAFETY: as above.
            assert_eq!(unsafe { CStr::from_ptr(f.commName) }.to_str().unwrap(), "tp");
        });
        assert!(CommConfig::default().fallback.is_default());
    }

    #[test]
    fn values_nccl_refuses_are_refused_with_the_field_named() {
        let undef = ffi::NCCL_CONFIG_UNDEF_INT;
        let cases: [(ncclConfig_t, &str); 13] = [
            (ncclConfig_t { blocking: 2, ..ncclConfig_t::default() }, "blocking = 2: expected 0 or 1"),
            (ncclConfig_t { cgaClusterSize: -1, ..ncclConfig_t::default() }, "cgaClusterSize = -1"),
            (ncclConfig_t { minCTAs: 0, maxCTAs: 8, ..ncclConfig_t::default() }, "minCTAs = 0: expected 1 or more"),
            (ncclConfig_t { maxCTAs: -4, ..ncclConfig_t::default() }, "maxCTAs = -4"),
            (ncclConfig_t { minCTAs: 16, maxCTAs: 8, ..ncclConfig_t::default() }, "minCTAs = 16 exceeds maxCTAs = 8"),
            (ncclConfig_t { minCTAs: 4, maxCTAs: undef, ..ncclConfig_t::default() }, "exceeds maxCTAs = unset"),
            (ncclConfig_t { splitShare: 2, ..ncclConfig_t::default() }, "splitShare = 2"),
            (ncclConfig_t { shrinkShare: -1, ..ncclConfig_t::default() }, "shrinkShare = -1"),
            (ncclConfig_t { collnetEnable: 5, ..ncclConfig_t::default() }, "collnetEnable = 5"),
            (ncclConfig_t { CTAPolicy: 4, ..ncclConfig_t::default() }, "CTAPolicy = 4"),
            (ncclConfig_t { nvlsCTAs: 0, ..ncclConfig_t::default() }, "nvlsCTAs = 0"),
            (ncclConfig_t { nChannelsPerNetPeer: 65, ..ncclConfig_t::default() }, "nChannelsPerNetPeer = 65"),
            (ncclConfig_t { nvlinkCentricSched: 2, ..ncclConfig_t::default() }, "nvlinkCentricSched = 2"),
        ];
        for (c, expected) in cases {
            let err = parse(&c).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(err.message.contains(expected), "{:?} does not say {expected:?}", err.message);
        }
        // A maxCTAs alone, and equal limits, are fine.
        assert_eq!(parse(&ncclConfig_t { maxCTAs: 1, ..ncclConfig_t::default() }).unwrap().max_ctas, Some(1));
        assert!(parse(&ncclConfig_t { minCTAs: 8, maxCTAs: 8, ..ncclConfig_t::default() }).is_ok());
        let c = ncclConfig_t { magic: 0, ..ncclConfig_t::default() };
        assert!(parse(&c).unwrap_err().message.contains("NCCL_CONFIG_INITIALIZER"));
        let c = ncclConfig_t { size: size_of::<ncclConfig_t>() + 8, ..ncclConfig_t::default() };
        // parse_config refuses a larger `size` before reading past the struct.
        assert!(parse(&c).unwrap_err().message.contains("newer nccl.h"));
        // An older, shorter config: the missing fields keep their defaults.
        let c =
            ncclConfig_t { size: std::mem::offset_of!(ncclConfig_t, netName), maxCTAs: 2, ..ncclConfig_t::default() };
        assert_eq!(parse(&c).unwrap().max_ctas, Some(2));
    }

    #[test]
    fn split_members_order_by_key_then_parent_rank() {
        let entries = [(1, 5), (0, 0), (1, 2), (1, 5), (-1, 0)];
        assert_eq!(split_members(&entries, 1), vec![2, 0, 3]);
        assert_eq!(split_members(&entries, 0), vec![1]);
        assert!(split_members(&entries, 7).is_empty());
    }

    #[test]
    fn handles_are_checked_against_the_table() {
        assert_eq!(lookup(std::ptr::null_mut()).unwrap_err().code, Code::InvalidArgument);
        let comm = Comm::pending(0, 2, 0);
        let handle = publish(Arc::clone(&comm));
        assert!(Arc::ptr_eq(&lookup(handle).unwrap(), &comm));
        assert_eq!(comm.ready().unwrap_err().code, Code::InProgress);
        comm.finish(Err(NcclError::system("no route")));
        assert!(comm.ready().unwrap_err().message.contains("no route"));
        unpublish(handle).unwrap();
        assert!(lookup(handle).unwrap_err().message.contains("not a live communicator"));
    }
}

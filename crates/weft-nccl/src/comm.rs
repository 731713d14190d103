//! Communicators: the object behind an `ncclComm_t`, the table of live ones, configuration
//! checks, and initialisation (rendezvous, the weft side, the fallback side, and the check
//! that every rank agrees on what the communicator can do).

use std::collections::HashMap;
use std::ffi::{CStr, c_int};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use weft_bootstrap::{Bootstrap, InProcessBootstrap, TcpBootstrap, UniqueId};
use weft_coll::{CollConfig, Collectives};
use weft_core::Communicator;
use weft_gpu::Device;

use crate::env::{NcclEnv, env};
use crate::error::{Code, NcclError};
use crate::fallback::{self, FallbackComm};
use crate::ffi::{self, ncclComm, ncclComm_t, ncclConfig_t};
use crate::ops::UserOps;
use crate::route::Engines;

/// Bootstrap tag of the unique id a split's leader sends its members.
const SPLIT_TAG: u32 = 0x5746_4e01;

/// Locks `m`; a poisoned lock still holds consistent data (entries are replaced whole).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// weft's side of a communicator.
#[derive(Debug)]
pub struct Native {
    /// The communicator.
    pub comm: Communicator,
    /// Its collectives.
    pub coll: Collectives,
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
    /// What this communicator can route to.
    pub fn engines(&self, env: &NcclEnv) -> Engines<'_> {
        Engines {
            weft_missing: self.weft.as_ref().err().map(String::as_str),
            fallback: self.fallback.is_some(),
            force: env.force,
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
        })
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

/// The `ncclConfig_t` fields weft honours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommConfig {
    /// `commName`.
    pub name: Option<String>,
    /// `blocking == 0`: calls may return before they finish. weft's calls always finish
    /// before returning, which a non-blocking communicator allows.
    pub nonblocking: bool,
}

/// Reads `config` (null: defaults). Fields weft does not implement must keep their
/// `NCCL_CONFIG_INITIALIZER` value (or the value NCCL documents as the default, which changes
/// nothing); anything else is `ncclInvalidArgument` naming the field.
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
    let unsupported = |field: &str, value: String| {
        NcclError::invalid_argument(format!(
            "ncclConfig_t.{field} = {value} is not supported by weft (leave it at its NCCL_CONFIG_INITIALIZER value)"
        ))
    };
    let nonblocking = match c.blocking {
        v if v == undef || v == 1 => false,
        0 => true,
        v => return Err(NcclError::invalid_argument(format!("ncclConfig_t.blocking = {v}: expected 0 or 1"))),
    };
    // Performance and placement knobs weft has no equivalent for: only "unset" is accepted.
    for (field, value) in [
        ("cgaClusterSize", c.cgaClusterSize),
        ("minCTAs", c.minCTAs),
        ("maxCTAs", c.maxCTAs),
        ("trafficClass", c.trafficClass),
        ("nvlsCTAs", c.nvlsCTAs),
        ("nChannelsPerNetPeer", c.nChannelsPerNetPeer),
    ] {
        if value != undef {
            return Err(unsupported(field, value.to_string()));
        }
    }
    // Features that are off by default: unset or 0 (NCCL's default) only.
    for (field, value) in [
        ("splitShare", c.splitShare),
        ("collnetEnable", c.collnetEnable),
        ("CTAPolicy", c.CTAPolicy),
        ("shrinkShare", c.shrinkShare),
        ("nvlinkCentricSched", c.nvlinkCentricSched),
    ] {
        if value != undef && value != 0 {
            return Err(unsupported(field, value.to_string()));
        }
    }
    if !c.netName.is_null() {
        // SAFETY: a non-null netName is a NUL-terminated string (nccl.h contract).
        let name = unsafe { CStr::from_ptr(c.netName) }.to_string_lossy().into_owned();
        return Err(unsupported("netName", format!("{name:?}")));
    }
    let name = (!c.commName.is_null())
        // SAFETY: a non-null commName is a NUL-terminated string (nccl.h contract).
        .then(|| unsafe { CStr::from_ptr(c.commName) }.to_string_lossy().into_owned());
    Ok(CommConfig { name, nonblocking })
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
            let fallback = fallback::create(&*bs, &device, spec.rank, spec.nranks)?;
            (bs, ip, fallback, spec.rank, spec.nranks)
        }
        Rendezvous::InProcess(bs) => {
            let bs: Arc<dyn Bootstrap> = Arc::new(bs);
            let fallback = fallback::create(&*bs, &device, spec.rank, spec.nranks)?;
            (bs, IpAddr::V4(Ipv4Addr::LOCALHOST), fallback, spec.rank, spec.nranks)
        }
        Rendezvous::Split { parent, color, key } => {
            let fallback = split_fallback(&parent, &device, color, key)?;
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
    let native = native(&bootstrap, &device, env);
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
) -> Result<Option<FallbackComm>, NcclError> {
    let Some(pf) = &parent.fallback else { return Ok(None) };
    let f = pf.fallback;
    let split = f.entry("ncclCommSplit", f.api.comm_split)?;
    device.bind()?;
    let mut raw = std::ptr::null_mut();
    // SAFETY: live parent communicator, out-pointer to a local, null config (defaults).
    let code = unsafe { split(pf.raw(), color, key, &mut raw, std::ptr::null_mut()) };
    f.check("ncclCommSplit", code)?;
    // SAFETY: the fallback just created `raw` (null for NCCL_SPLIT_NOCOLOR); we own it.
    Ok((!raw.is_null()).then(|| unsafe { FallbackComm::adopt(f, raw) }))
}

fn native(bootstrap: &Arc<dyn Bootstrap>, device: &Device, env: &NcclEnv) -> Result<Native, NcclError> {
    let comm = Communicator::new(Arc::clone(bootstrap), device.clone(), env.weft.clone())?;
    let config = CollConfig::from_env(&env.weft).map_err(NcclError::invalid_usage)?;
    let coll = Collectives::new(&comm, config)?;
    Ok(Native { comm, coll })
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

    #[test]
    fn configs_accept_defaults_and_reject_unsupported_fields() {
        // SAFETY: null is allowed.
        assert_eq!(unsafe { parse_config(std::ptr::null()) }.unwrap(), CommConfig::default());
        let name = CString::new("tp").unwrap();
        let mut c = ncclConfig_t { blocking: 0, commName: name.as_ptr(), splitShare: 0, ..ncclConfig_t::default() };
        // SAFETY: a live config.
        let parsed = unsafe { parse_config(&c) }.unwrap();
        assert_eq!(parsed, CommConfig { name: Some("tp".into()), nonblocking: true });
        c.maxCTAs = 16;
        // SAFETY: a live config.
        let err = unsafe { parse_config(&c) }.unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.contains("maxCTAs = 16"));
        let c = ncclConfig_t { splitShare: 1, ..ncclConfig_t::default() };
        // SAFETY: a live config.
        assert!(unsafe { parse_config(&c) }.unwrap_err().message.contains("splitShare"));
        let c = ncclConfig_t { magic: 0, ..ncclConfig_t::default() };
        // SAFETY: a live config.
        assert!(unsafe { parse_config(&c) }.unwrap_err().message.contains("NCCL_CONFIG_INITIALIZER"));
        let c = ncclConfig_t { size: size_of::<ncclConfig_t>() + 8, ..ncclConfig_t::default() };
        // SAFETY: `size` claims more than the struct, which parse_config refuses before reading more.
        assert!(unsafe { parse_config(&c) }.unwrap_err().message.contains("newer nccl.h"));
        let net = CString::new("IB").unwrap();
        let c = ncclConfig_t { netName: net.as_ptr(), ..ncclConfig_t::default() };
        // SAFETY: a live config.
        assert!(unsafe { parse_config(&c) }.unwrap_err().message.contains("netName"));
        // An older, shorter config: the missing fields keep their defaults.
        let c = ncclConfig_t { size: std::mem::offset_of!(ncclConfig_t, netName), ..ncclConfig_t::default() };
        // SAFETY: a live config, larger than its `size`.
        assert!(unsafe { parse_config(&c) }.is_ok());
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

//! [`Verbs`] over rdma-core's libibverbs, loaded at run time: one device context, protection
//! domain and completion queue per [`RdmaVerbs`], reliable-connected queue pairs brought up from
//! the endpoints two ranks exchange ([`QpEndpoint`], 32 bytes for the bootstrap).
//!
//! **Not run on a NIC.** Our machines have none. The tests check every struct layout and
//! constant against the real verbs.h, and that the library loads and reports the absence of
//! devices; the queue-pair bring-up and the data path have never met hardware.

use std::collections::HashMap;
use std::ffi::{CStr, c_int, c_void};
use std::ptr;
use std::sync::{Mutex, RwLock};

use super::ffi::*;
use super::{
    CompletionError, CompletionKind, Immediate, LocalRegion, RECV_WR_TAG, RemoteRegion, Verbs, VerbsError,
    WorkCompletion, WriteRequest,
};

/// Where libibverbs is found: `WEFT_IBVERBS_LIB`, else the dynamic linker's search.
pub const LIBRARY_ENV: &str = weft_core::env::vars::WEFT_IBVERBS_LIB.name;
const DEFAULT_LIBRARY: &str = "libibverbs.so.1";

/// Failures of the rdma-core binding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RdmaError {
    /// libibverbs could not be loaded or lacks an entry point.
    #[error("cannot load {path} (set {LIBRARY_ENV} to its path): {detail}")]
    Load {
        /// What was loaded.
        path: String,
        /// The loader's message.
        detail: String,
    },
    /// libibverbs found no RDMA device.
    #[error("no RDMA device: libibverbs found none (no NIC, or no provider library for it)")]
    NoDevice,
    /// The requested device does not exist.
    #[error("no RDMA device named {name}; found {available:?}")]
    DeviceNotFound {
        /// The requested name.
        name: String,
        /// The devices found.
        available: Vec<String>,
    },
    /// The port is not active.
    #[error("port {port} of {device} is not active (state {state})")]
    PortDown {
        /// The device.
        device: String,
        /// The port.
        port: u8,
        /// Its `ibv_port_state`.
        state: u32,
    },
    /// A verbs call failed.
    #[error("{call} on {device} failed: {detail}")]
    Call {
        /// The call.
        call: &'static str,
        /// The device.
        device: String,
        /// The error (errno text).
        detail: String,
    },
}

/// Which device and port to use, and the queue sizes.
#[derive(Clone, Debug)]
pub struct RdmaConfig {
    /// Device name (`mlx5_0`); `None`: the first device.
    pub device: Option<String>,
    /// Port number (from 1).
    pub port: u8,
    /// GID table index for RoCE and routed InfiniBand (RoCE v2 is usually 3).
    pub gid_index: u8,
    /// Completion queue entries, shared by the queue pairs: each may hold `send_depth +
    /// recv_depth` of them (a failed queue pair flushes every posted request), so
    /// [`RdmaVerbs::create_qp`] refuses queue pairs beyond that.
    pub cq_depth: u32,
    /// Send work requests per queue pair.
    pub send_depth: u32,
    /// Receive work requests per queue pair.
    pub recv_depth: u32,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout per retry; 18 ≈ 1 s).
    pub timeout: u8,
    /// Retries before a write completes with "transport retry counter exceeded".
    pub retry_count: u8,
}

impl Default for RdmaConfig {
    fn default() -> Self {
        Self {
            device: None,
            port: 1,
            gid_index: 0,
            cq_depth: 262_144,
            send_depth: 1024,
            recv_depth: 512,
            timeout: 18,
            retry_count: 7,
        }
    }
}

/// What registrations and queue pairs allow: local writes, and peers' writes and reads.
const MEMORY_ACCESS: c_int = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

/// What a peer needs to connect a queue pair to ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// Local identifier of the port (InfiniBand without routing).
    pub lid: u16,
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number.
    pub psn: u32,
    /// `ibv_mtu` of the port.
    pub mtu: u32,
    /// Port GID (RoCE, routed InfiniBand); all zero when unused.
    pub gid: [u8; 16],
}

impl QpEndpoint {
    /// Encoded size.
    pub const BYTES: usize = 32;

    /// Little-endian encoding for the bootstrap.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..2].copy_from_slice(&self.lid.to_le_bytes());
        out[4..8].copy_from_slice(&self.qpn.to_le_bytes());
        out[8..12].copy_from_slice(&self.psn.to_le_bytes());
        out[12..16].copy_from_slice(&self.mtu.to_le_bytes());
        out[16..32].copy_from_slice(&self.gid);
        out
    }

    /// Decodes [`QpEndpoint::to_bytes`].
    pub fn from_bytes(bytes: &[u8; Self::BYTES]) -> Self {
        let word = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&bytes[16..32]);
        Self { lid: u16::from_le_bytes([bytes[0], bytes[1]]), qpn: word(4), psn: word(8), mtu: word(12), gid }
    }
}

/// A raw pointer owned by an [`RdmaVerbs`].
struct Owned<T>(*mut T);

impl<T> std::fmt::Debug for Owned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:p}", self.0)
    }
}

// SAFETY: libibverbs objects may be used from any thread (its calls are thread-safe); the
// pointers are only dereferenced while the owning RdmaVerbs is alive.
unsafe impl<T> Send for Owned<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Owned<T> {}

/// The verbs of one device port.
#[derive(Debug)]
pub struct RdmaVerbs {
    api: Api,
    device: String,
    config: RdmaConfig,
    link_layer: u8,
    lid: u16,
    mtu: u32,
    /// The port's largest message.
    max_msg: u32,
    gid: [u8; 16],
    context: Owned<IbvContext>,
    pd: Owned<IbvPd>,
    cq: Owned<IbvCq>,
    qps: RwLock<HashMap<u32, Owned<IbvQp>>>,
    mrs: Mutex<Vec<Owned<IbvMr>>>,
}

fn errno_text() -> String {
    std::io::Error::last_os_error().to_string()
}

/// The library to load: `WEFT_IBVERBS_LIB`, else the soname.
pub fn library_path(env: &weft_core::Env) -> String {
    env.var(&weft_core::env::vars::WEFT_IBVERBS_LIB).filter(|p| !p.is_empty()).unwrap_or(DEFAULT_LIBRARY).into()
}

/// Names of the devices the libibverbs at `library` sees.
pub fn device_names(library: &str) -> Result<Vec<String>, RdmaError> {
    let api = Api::load(library)?;
    with_devices(&api, |devices| devices.iter().map(|&d| device_name(&api, d)).collect())
}

/// Runs `f` over the device list (freed afterwards).
fn with_devices<T>(api: &Api, f: impl FnOnce(&[*mut IbvDevice]) -> T) -> Result<T, RdmaError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out-pointer.
    let list = unsafe { (api.get_device_list)(&mut count) };
    if list.is_null() {
        return Err(RdmaError::NoDevice);
    }
    let len = usize::try_from(count).unwrap_or(0);
    // SAFETY: libibverbs returned an array of `count` device pointers.
    let devices = unsafe { std::slice::from_raw_parts(list, len) };
    let out = f(devices);
    // SAFETY: `list` came from ibv_get_device_list and is freed once; the devices stay valid
    // for contexts opened from them.
    unsafe { (api.free_device_list)(list) };
    Ok(out)
}

fn device_name(api: &Api, device: *mut IbvDevice) -> String {
    // SAFETY: `device` comes from the device list; the name is a NUL-terminated string in it.
    let name = unsafe { (api.get_device_name)(device) };
    if name.is_null() {
        return "?".into();
    }
    // SAFETY: non-null, NUL-terminated (above).
    unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
}

impl RdmaVerbs {
    /// Opens the configured device and port (context, protection domain, completion queue)
    /// through the libibverbs at `library` ([`library_path`]).
    pub fn open(library: &str, config: RdmaConfig) -> Result<Self, RdmaError> {
        let api = Api::load(library)?;
        let (device, context) = with_devices(&api, |devices| {
            let names: Vec<String> = devices.iter().map(|&d| device_name(&api, d)).collect();
            let index = match &config.device {
                None if devices.is_empty() => return Err(RdmaError::NoDevice),
                None => 0,
                Some(name) => names
                    .iter()
                    .position(|n| n == name)
                    .ok_or_else(|| RdmaError::DeviceNotFound { name: name.clone(), available: names.clone() })?,
            };
            // SAFETY: a device of the live list.
            let context = unsafe { (api.open_device)(devices[index]) };
            Ok((names[index].clone(), context))
        })??;
        let call = |call: &'static str| RdmaError::Call { call, device: device.clone(), detail: errno_text() };
        if context.is_null() {
            return Err(call("ibv_open_device"));
        }
        let mut port = IbvPortAttr::default();
        let mut gid = IbvGid::default();
        // SAFETY: `context` is open; `port` and `gid` are valid out-structures (port with room
        // for newer fields).
        let queried = unsafe {
            if (api.query_port)(context, config.port, &mut port) != 0 {
                Err(call("ibv_query_port"))
            } else if (api.query_gid)(context, config.port, c_int::from(config.gid_index), &mut gid) != 0 {
                Err(call("ibv_query_gid"))
            } else {
                Ok(())
            }
        };
        let fail = |e: RdmaError| {
            // SAFETY: closing the context this function opened, once.
            unsafe { (api.close_device)(context) };
            e
        };
        if let Err(e) = queried {
            return Err(fail(e));
        }
        if port.state != IBV_PORT_ACTIVE {
            return Err(fail(RdmaError::PortDown { device, port: config.port, state: port.state }));
        }
        // SAFETY: `context` is open.
        let pd = unsafe { (api.alloc_pd)(context) };
        if pd.is_null() {
            return Err(fail(call("ibv_alloc_pd")));
        }
        let depth = c_int::try_from(config.cq_depth).unwrap_or(c_int::MAX);
        // SAFETY: `context` is open; no completion channel, vector 0.
        let cq = unsafe { (api.create_cq)(context, depth, ptr::null_mut(), ptr::null_mut(), 0) };
        if cq.is_null() {
            let e = call("ibv_create_cq");
            // SAFETY: the protection domain allocated above, released once.
            unsafe { (api.dealloc_pd)(pd) };
            return Err(fail(e));
        }
        Ok(Self {
            device,
            link_layer: port.link_layer,
            lid: port.lid,
            mtu: port.active_mtu,
            max_msg: port.max_msg_sz,
            gid: gid.raw,
            context: Owned(context),
            pd: Owned(pd),
            cq: Owned(cq),
            qps: RwLock::new(HashMap::new()),
            mrs: Mutex::new(Vec::new()),
            config,
            api,
        })
    }

    /// The device name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &RdmaConfig {
        &self.config
    }

    /// The largest RDMA write the port takes (`max_msg_sz`; 1 GiB if it reports none).
    pub fn max_write(&self) -> u64 {
        if self.max_msg == 0 { 1 << 30 } else { u64::from(self.max_msg) }
    }

    fn call_error(&self, call: &'static str, detail: String) -> RdmaError {
        RdmaError::Call { call, device: self.device.clone(), detail }
    }

    /// Registers `len` bytes at `addr` for local reads and remote writes (host memory, or
    /// device memory where the GPU driver's peer-memory module is loaded).
    ///
    /// # Safety
    /// The memory must stay allocated while this `RdmaVerbs` lives: the NIC reads and writes it
    /// without further checks.
    pub(crate) unsafe fn register(&self, addr: u64, len: usize) -> Result<(LocalRegion, RemoteRegion), RdmaError> {
        let access = MEMORY_ACCESS;
        // Relaxed ordering is an optional flag, which only ibv_reg_mr_iova2 drops where the
        // kernel lacks it (verbs.h's ibv_reg_mr macro routes such calls there).
        // SAFETY: the protection domain is alive; the caller keeps the memory allocated.
        let mr = unsafe {
            match self.api.reg_mr_iova2 {
                Some(reg) => {
                    reg(self.pd.0, addr as *mut c_void, len, addr, (access | IBV_ACCESS_RELAXED_ORDERING) as u32)
                }
                None => (self.api.reg_mr)(self.pd.0, addr as *mut c_void, len, access),
            }
        };
        self.keep_registration(mr, addr, len, "ibv_reg_mr")
    }

    /// Registers `len` bytes at device address `iova` through the dma-buf `fd`, in which they
    /// start at `offset` (no peer-memory module needed). Peers address the memory by `iova`.
    ///
    /// # Safety
    /// The memory must stay allocated while this `RdmaVerbs` lives (the descriptor may be
    /// closed once this returns: the registration holds the buffer).
    pub(crate) unsafe fn register_dmabuf(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        iova: u64,
        len: usize,
    ) -> Result<(LocalRegion, RemoteRegion), RdmaError> {
        use std::os::fd::AsRawFd;
        let reg = self.api.reg_dmabuf_mr.ok_or_else(|| {
            self.call_error("ibv_reg_dmabuf_mr", "this libibverbs lacks it (rdma-core 34 or later has it)".into())
        })?;
        let access = MEMORY_ACCESS | IBV_ACCESS_RELAXED_ORDERING;
        // SAFETY: the protection domain is alive; the descriptor is a dma-buf covering
        // [offset, offset + len); the caller keeps the memory allocated.
        let mr = unsafe { reg(self.pd.0, offset, len, iova, fd.as_raw_fd(), access) };
        self.keep_registration(mr, iova, len, "ibv_reg_dmabuf_mr")
    }

    /// Keeps registration `mr` (made by `call`) until drop and returns its regions at `addr`.
    fn keep_registration(
        &self,
        mr: *mut IbvMr,
        addr: u64,
        len: usize,
        call: &'static str,
    ) -> Result<(LocalRegion, RemoteRegion), RdmaError> {
        if mr.is_null() {
            return Err(self.call_error(call, errno_text()));
        }
        // SAFETY: a registration libibverbs returned.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        self.mrs.lock().unwrap_or_else(|p| p.into_inner()).push(Owned(mr));
        Ok((LocalRegion { addr, len: len as u64, lkey }, RemoteRegion { addr, len: len as u64, rkey }))
    }

    /// Releases the registration with local key `lkey` (a memory whose set-up failed later).
    pub fn deregister(&self, lkey: u32) {
        let mut mrs = self.mrs.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: registrations this RdmaVerbs made and still holds.
        if let Some(i) = mrs.iter().position(|m| unsafe { (*m.0).lkey } == lkey) {
            let mr = mrs.swap_remove(i);
            // SAFETY: removed from the list, so released once.
            unsafe { (self.api.dereg_mr)(mr.0) };
        }
    }

    /// Destroys queue pair `qpn` (a channel whose set-up failed).
    pub fn destroy_qp(&self, qpn: u32) {
        if let Some(qp) = self.qps.write().unwrap_or_else(|p| p.into_inner()).remove(&qpn) {
            // SAFETY: removed from the table, so destroyed once; no transport uses it.
            unsafe { (self.api.destroy_qp)(qp.0) };
        }
    }

    /// A new reliable-connected queue pair: the endpoint to send to the peer. Refused when the
    /// shared completion queue could not hold every queue pair's completions.
    pub fn create_qp(&self) -> Result<QpEndpoint, RdmaError> {
        let per_qp = u64::from(self.config.send_depth) + u64::from(self.config.recv_depth);
        let capacity = u64::from(self.config.cq_depth) / per_qp.max(1);
        if self.qps.read().unwrap_or_else(|p| p.into_inner()).len() as u64 >= capacity {
            let detail =
                format!("the completion queue of {} entries holds {capacity} queue pairs", self.config.cq_depth);
            return Err(self.call_error("ibv_create_qp", detail));
        }
        let mut init = IbvQpInitAttr {
            qp_context: ptr::null_mut(),
            send_cq: self.cq.0,
            recv_cq: self.cq.0,
            srq: ptr::null_mut(),
            cap: IbvQpCap {
                max_send_wr: self.config.send_depth,
                max_recv_wr: self.config.recv_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: the protection domain and completion queue are alive; `init` is valid.
        let qp = unsafe { (self.api.create_qp)(self.pd.0, &mut init) };
        if qp.is_null() {
            return Err(self.call_error("ibv_create_qp", errno_text()));
        }
        // SAFETY: a queue pair libibverbs returned.
        let qpn = unsafe { (*qp).qp_num };
        let mut attr = IbvQpAttr {
            qp_state: IBV_QPS_INIT,
            pkey_index: 0,
            port_num: self.config.port,
            qp_access_flags: MEMORY_ACCESS as u32,
            ..IbvQpAttr::default()
        };
        let mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        self.qps.write().unwrap_or_else(|p| p.into_inner()).insert(qpn, Owned(qp));
        self.modify(qpn, &mut attr, mask, "ibv_modify_qp(INIT)")?;
        Ok(QpEndpoint { lid: self.lid, qpn, psn: psn_of(qpn), mtu: self.mtu, gid: self.gid })
    }

    /// Connects local queue pair `qpn` to the peer's `remote` (ready to receive, then to send).
    pub fn connect_qp(&self, qpn: u32, remote: &QpEndpoint) -> Result<(), RdmaError> {
        let global = self.link_layer == IBV_LINK_LAYER_ETHERNET || (remote.gid != [0; 16] && remote.lid == 0);
        let ah = IbvAhAttr {
            grh: IbvGlobalRoute {
                dgid: IbvGid { raw: remote.gid },
                flow_label: 0,
                sgid_index: self.config.gid_index,
                hop_limit: 255,
                traffic_class: 0,
            },
            dlid: remote.lid,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: u8::from(global),
            port_num: self.config.port,
        };
        let mut rtr = IbvQpAttr {
            qp_state: IBV_QPS_RTR,
            path_mtu: self.mtu.min(remote.mtu),
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ah,
            ..IbvQpAttr::default()
        };
        let mask = IBV_QP_STATE
            | IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER;
        self.modify(qpn, &mut rtr, mask, "ibv_modify_qp(RTR)")?;
        let mut rts = IbvQpAttr {
            qp_state: IBV_QPS_RTS,
            sq_psn: psn_of(qpn),
            timeout: self.config.timeout,
            retry_cnt: self.config.retry_count,
            // Receiver not ready retries forever: a peer slow to repost receives is waited for;
            // a peer that never does is the transport's timeout.
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..IbvQpAttr::default()
        };
        let mask = IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(qpn, &mut rts, mask, "ibv_modify_qp(RTS)")
    }

    fn modify(&self, qpn: u32, attr: &mut IbvQpAttr, mask: c_int, call: &'static str) -> Result<(), RdmaError> {
        let qp = self.qp(qpn).map_err(|e| self.call_error(call, e.to_string()))?;
        // SAFETY: a live queue pair of this device; `attr` is valid for the mask.
        let rc = unsafe { (self.api.modify_qp)(qp, attr, mask) };
        if rc != 0 {
            return Err(self.call_error(call, std::io::Error::from_raw_os_error(rc).to_string()));
        }
        Ok(())
    }

    fn qp(&self, qpn: u32) -> Result<*mut IbvQp, VerbsError> {
        self.qps
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&qpn)
            .map(|q| q.0)
            .ok_or_else(|| VerbsError::UnknownQp { qp: qpn, device: self.device.clone() })
    }

    fn status_text(&self, status: u32) -> String {
        // SAFETY: ibv_wc_status_str returns a static string for any value.
        let text = unsafe { (self.api.wc_status_str)(status) };
        if text.is_null() {
            return format!("status {status}");
        }
        // SAFETY: non-null, static and NUL-terminated.
        unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
    }
}

/// A queue pair's first packet sequence number (24 bits, from its number: both sides derive
/// the same without another exchange).
fn psn_of(qpn: u32) -> u32 {
    qpn.wrapping_mul(0x9E37_79B9) & 0xFF_FFFF
}

impl Verbs for RdmaVerbs {
    fn post_write(&self, qp: u32, request: WriteRequest) -> Result<(), VerbsError> {
        let qp = self.qp(qp)?;
        let len = u32::try_from(request.len).map_err(|_| VerbsError::TooLong { len: request.len })?;
        let mut sge = IbvSge { addr: request.local_addr, length: len, lkey: request.lkey };
        // SAFETY: all-zero is a valid ibv_send_wr (null pointers, zero counts).
        let mut wr: IbvSendWr = unsafe { std::mem::zeroed() };
        wr.wr_id = request.wr_id;
        wr.sg_list = if len == 0 { ptr::null_mut() } else { &mut sge };
        wr.num_sge = c_int::from(len != 0);
        wr.send_flags = if request.signaled { IBV_SEND_SIGNALED } else { 0 };
        let (opcode, imm) = match request.imm {
            None => (IBV_WR_RDMA_WRITE, 0),
            Some(Immediate::Write(imm)) => (IBV_WR_RDMA_WRITE_WITH_IMM, imm),
            // A send lands in the peer's next posted receive: no remote address or key.
            Some(Immediate::Send(imm)) => (IBV_WR_SEND_WITH_IMM, imm),
        };
        wr.opcode = opcode;
        wr.imm_data = imm.to_be();
        if opcode != IBV_WR_SEND_WITH_IMM {
            wr.rdma.remote_addr = request.remote_addr;
            wr.rdma.rkey = request.rkey;
        }
        // SAFETY: a live queue pair; its context's ops are the provider's; `wr` and `sge` live
        // across the call (the provider copies them into the send queue).
        let ops = unsafe { &(*(*qp).context).ops };
        post("ibv_post_send", ops.post_send, qp, &mut wr)
    }

    fn post_recv(&self, qp: u32, wr_id: u64) -> Result<(), VerbsError> {
        let qp = self.qp(qp)?;
        let mut wr = IbvRecvWr { wr_id, next: ptr::null_mut(), sg_list: ptr::null_mut(), num_sge: 0 };
        // SAFETY: as in post_write.
        let ops = unsafe { &(*(*qp).context).ops };
        post("ibv_post_recv", ops.post_recv, qp, &mut wr)
    }

    fn close(&self) {
        let qpns: Vec<u32> = self.qps.read().unwrap_or_else(|p| p.into_inner()).keys().copied().collect();
        for qpn in qpns {
            let mut attr = IbvQpAttr { qp_state: IBV_QPS_ERR, ..IbvQpAttr::default() };
            if let Err(e) = self.modify(qpn, &mut attr, IBV_QP_STATE, "ibv_modify_qp(ERR)") {
                tracing::warn!("{e}");
            }
        }
    }

    fn poll_cq(&self, out: &mut Vec<WorkCompletion>) -> Result<(), VerbsError> {
        let mut wcs = [IbvWc::default(); 32];
        loop {
            // SAFETY: the completion queue is alive; `wcs` has room for 32 entries.
            let n = unsafe {
                match (*(*self.cq.0).context).ops.poll_cq {
                    Some(poll_cq) => poll_cq(self.cq.0, wcs.len() as c_int, wcs.as_mut_ptr()),
                    None => return Err(VerbsError::MissingEntryPoint { call: "ibv_poll_cq" }),
                }
            };
            let n = usize::try_from(n)
                .map_err(|_| VerbsError::Call { call: "ibv_poll_cq", detail: format!("returned {n}") })?;
            for wc in &wcs[..n] {
                out.push(completion(wc, |s| self.status_text(s)));
            }
            if n < wcs.len() {
                return Ok(());
            }
        }
    }
}

/// Posts `wr` on `qp` through the provider's `op` (`ibv_post_send` or `ibv_post_recv`).
fn post<W>(
    call: &'static str,
    op: Option<unsafe extern "C" fn(*mut IbvQp, *mut W, *mut *mut W) -> c_int>,
    qp: *mut IbvQp,
    wr: &mut W,
) -> Result<(), VerbsError> {
    let op = op.ok_or(VerbsError::MissingEntryPoint { call })?;
    let mut bad = ptr::null_mut();
    // SAFETY: the callers pass a live queue pair and its provider's entry point for `W`; the
    // request lives across the call (the provider copies it into its queue).
    let rc = unsafe { op(qp, wr, &mut bad) };
    if rc != 0 {
        return Err(VerbsError::Call { call, detail: std::io::Error::from_raw_os_error(rc).to_string() });
    }
    Ok(())
}

/// Translates a verbs work completion. A failed completion's opcode is undefined, so receives
/// are told apart by their id's [`RECV_WR_TAG`].
fn completion(wc: &IbvWc, status_text: impl Fn(u32) -> String) -> WorkCompletion {
    let status = if wc.status == IBV_WC_SUCCESS {
        Ok(())
    } else {
        Err(CompletionError { status: wc.status, text: status_text(wc.status) })
    };
    let kind = if wc.wr_id & RECV_WR_TAG != 0 {
        let imm = (wc.wc_flags & IBV_WC_WITH_IMM != 0).then(|| u32::from_be(wc.imm_data));
        match (wc.status, wc.opcode, imm) {
            (IBV_WC_SUCCESS, IBV_WC_RECV, Some(imm)) => CompletionKind::RecvSendImm { qp: wc.qp_num, imm },
            (IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, Some(imm)) => {
                CompletionKind::RecvWriteImm { qp: wc.qp_num, imm }
            }
            // A failed receive (its opcode undefined) fails its connection whatever its kind;
            // a receive without immediate names no connection: the transport refuses it.
            _ => CompletionKind::RecvWriteImm { qp: wc.qp_num, imm: u32::MAX },
        }
    } else {
        CompletionKind::Write
    };
    WorkCompletion { wr_id: wc.wr_id, kind, status }
}

impl Drop for RdmaVerbs {
    fn drop(&mut self) {
        // SAFETY: every object below was created by this RdmaVerbs and is destroyed once, queue
        // pairs and registrations before the completion queue, protection domain and context.
        unsafe {
            for (_, qp) in self.qps.get_mut().unwrap_or_else(|p| p.into_inner()).drain() {
                (self.api.destroy_qp)(qp.0);
            }
            for mr in self.mrs.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
                (self.api.dereg_mr)(mr.0);
            }
            (self.api.destroy_cq)(self.cq.0);
            (self.api.dealloc_pd)(self.pd.0);
            (self.api.close_device)(self.context.0);
        }
    }
}

#[cfg(all(test, not(weft_loom)))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on failure
mod tests;

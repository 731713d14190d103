//! The parts of rdma-core's `<infiniband/verbs.h>` the binding uses: struct layouts, constants
//! and the entry points, loaded from `libibverbs.so.1` at run time (nothing links against it,
//! so weft builds and runs on machines without rdma-core).
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are inline functions in the header that
//! call through `ibv_context::ops`; the binding does the same. Every layout and constant here is
//! checked against the real header by a C probe ([`abi_facts`], the `ib` tests).

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::rdma::RdmaError;

/// `IBV_WR_RDMA_WRITE`.
pub(crate) const IBV_WR_RDMA_WRITE: c_uint = 0;
/// `IBV_WR_RDMA_WRITE_WITH_IMM`.
pub(crate) const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
/// `IBV_WR_SEND_WITH_IMM`.
pub(crate) const IBV_WR_SEND_WITH_IMM: c_uint = 3;
/// `IBV_SEND_SIGNALED`.
pub(crate) const IBV_SEND_SIGNALED: c_uint = 1 << 1;
/// `IBV_WC_SUCCESS`.
pub(crate) const IBV_WC_SUCCESS: c_uint = 0;
/// `IBV_WC_RDMA_WRITE` (writes are known by their ids; kept for the layout check).
#[cfg(test)]
pub(crate) const IBV_WC_RDMA_WRITE: c_uint = 1;
/// `IBV_WC_RECV` (a receive consumed by a send).
pub(crate) const IBV_WC_RECV: c_uint = 1 << 7;
/// `IBV_WC_RECV_RDMA_WITH_IMM`.
pub(crate) const IBV_WC_RECV_RDMA_WITH_IMM: c_uint = 129;
/// `IBV_WC_WITH_IMM`.
pub(crate) const IBV_WC_WITH_IMM: c_uint = 1 << 1;
/// `IBV_QPT_RC`.
pub(crate) const IBV_QPT_RC: c_uint = 2;
/// `IBV_QPS_INIT`, `IBV_QPS_RTR`, `IBV_QPS_RTS`.
pub(crate) const IBV_QPS_INIT: c_uint = 1;
pub(crate) const IBV_QPS_RTR: c_uint = 2;
pub(crate) const IBV_QPS_RTS: c_uint = 3;
/// `IBV_QPS_ERR`.
pub(crate) const IBV_QPS_ERR: c_uint = 6;
/// `enum ibv_qp_attr_mask` bits.
pub(crate) const IBV_QP_STATE: c_int = 1 << 0;
pub(crate) const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub(crate) const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub(crate) const IBV_QP_PORT: c_int = 1 << 5;
pub(crate) const IBV_QP_AV: c_int = 1 << 7;
pub(crate) const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub(crate) const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub(crate) const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub(crate) const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub(crate) const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub(crate) const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub(crate) const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub(crate) const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub(crate) const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub(crate) const IBV_QP_DEST_QPN: c_int = 1 << 20;
/// `enum ibv_access_flags` bits.
pub(crate) const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub(crate) const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
pub(crate) const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;
pub(crate) const IBV_ACCESS_RELAXED_ORDERING: c_int = 1 << 20;
/// `IBV_LINK_LAYER_ETHERNET` (RoCE: addressing by GID only).
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_PORT_ACTIVE`.
pub(crate) const IBV_PORT_ACTIVE: c_uint = 4;

/// `struct ibv_device` (opaque).
#[repr(C)]
pub(crate) struct IbvDevice {
    _opaque: [u8; 0],
}

/// `struct ibv_pd` (opaque here).
#[repr(C)]
pub(crate) struct IbvPd {
    _opaque: [u8; 0],
}

/// A slot of `ibv_context_ops` the binding does not call.
type Unused = Option<unsafe extern "C" fn()>;
/// `ops.poll_cq`.
pub(crate) type PollCq = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
/// `ops.post_send`.
pub(crate) type PostSend = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
/// `ops.post_recv`.
pub(crate) type PostRecv = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;

/// `struct ibv_context_ops`, up to `post_recv` (the rest is never touched).
#[repr(C)]
pub(crate) struct IbvContextOps {
    _before_poll_cq: [Unused; 11],
    pub(crate) poll_cq: Option<PollCq>,
    _before_post_send: [Unused; 13],
    pub(crate) post_send: Option<PostSend>,
    pub(crate) post_recv: Option<PostRecv>,
}

/// `struct ibv_context`, up to its ops.
#[repr(C)]
pub(crate) struct IbvContext {
    pub(crate) device: *mut IbvDevice,
    pub(crate) ops: IbvContextOps,
}

/// `struct ibv_cq`, up to its context.
#[repr(C)]
pub(crate) struct IbvCq {
    pub(crate) context: *mut IbvContext,
}

/// `struct ibv_qp`, up to `qp_num`.
#[repr(C)]
pub(crate) struct IbvQp {
    pub(crate) context: *mut IbvContext,
    qp_context: *mut c_void,
    pd: *mut IbvPd,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut c_void,
    handle: u32,
    pub(crate) qp_num: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub(crate) struct IbvMr {
    context: *mut IbvContext,
    pd: *mut IbvPd,
    pub(crate) addr: *mut c_void,
    pub(crate) length: usize,
    handle: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
pub(crate) struct IbvSge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`, as its `rdma` member (sized for the largest, `atomic`).
#[repr(C)]
pub(crate) struct IbvSendWrRdma {
    pub(crate) remote_addr: u64,
    pub(crate) rkey: u32,
    _rest_of_union: [u32; 5],
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub(crate) struct IbvSendWr {
    pub(crate) wr_id: u64,
    pub(crate) next: *mut IbvSendWr,
    pub(crate) sg_list: *mut IbvSge,
    pub(crate) num_sge: c_int,
    pub(crate) opcode: c_uint,
    pub(crate) send_flags: c_uint,
    /// Network byte order.
    pub(crate) imm_data: u32,
    pub(crate) rdma: IbvSendWrRdma,
    _qp_type: u32,
    _bind_mw_or_tso: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub(crate) struct IbvRecvWr {
    pub(crate) wr_id: u64,
    pub(crate) next: *mut IbvRecvWr,
    pub(crate) sg_list: *mut IbvSge,
    pub(crate) num_sge: c_int,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvWc {
    pub(crate) wr_id: u64,
    pub(crate) status: c_uint,
    pub(crate) opcode: c_uint,
    pub(crate) vendor_err: u32,
    pub(crate) byte_len: u32,
    /// Network byte order.
    pub(crate) imm_data: u32,
    pub(crate) qp_num: u32,
    pub(crate) src_qp: u32,
    pub(crate) wc_flags: c_uint,
    pub(crate) pkey_index: u16,
    pub(crate) slid: u16,
    pub(crate) sl: u8,
    pub(crate) dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvQpCap {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub(crate) struct IbvQpInitAttr {
    pub(crate) qp_context: *mut c_void,
    pub(crate) send_cq: *mut IbvCq,
    pub(crate) recv_cq: *mut IbvCq,
    pub(crate) srq: *mut c_void,
    pub(crate) cap: IbvQpCap,
    pub(crate) qp_type: c_uint,
    pub(crate) sq_sig_all: c_int,
}

/// `union ibv_gid`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct IbvGid {
    pub(crate) raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvGlobalRoute {
    pub(crate) dgid: IbvGid,
    pub(crate) flow_label: u32,
    pub(crate) sgid_index: u8,
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvAhAttr {
    pub(crate) grh: IbvGlobalRoute,
    pub(crate) dlid: u16,
    pub(crate) sl: u8,
    pub(crate) src_path_bits: u8,
    pub(crate) static_rate: u8,
    pub(crate) is_global: u8,
    pub(crate) port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct IbvQpAttr {
    pub(crate) qp_state: c_uint,
    pub(crate) cur_qp_state: c_uint,
    pub(crate) path_mtu: c_uint,
    pub(crate) path_mig_state: c_uint,
    pub(crate) qkey: u32,
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    pub(crate) dest_qp_num: u32,
    pub(crate) qp_access_flags: c_uint,
    pub(crate) cap: IbvQpCap,
    pub(crate) ah_attr: IbvAhAttr,
    pub(crate) alt_ah_attr: IbvAhAttr,
    pub(crate) pkey_index: u16,
    pub(crate) alt_pkey_index: u16,
    pub(crate) en_sqd_async_notify: u8,
    pub(crate) sq_draining: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) port_num: u8,
    pub(crate) timeout: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retry: u8,
    pub(crate) alt_port_num: u8,
    pub(crate) alt_timeout: u8,
    pub(crate) rate_limit: u32,
}

/// `struct ibv_port_attr`, followed by room for fields newer libraries append (the exported
/// `ibv_query_port` writes the structure of the library's own version).
#[repr(C)]
pub(crate) struct IbvPortAttr {
    pub(crate) state: c_uint,
    pub(crate) max_mtu: c_uint,
    pub(crate) active_mtu: c_uint,
    pub(crate) gid_tbl_len: c_int,
    pub(crate) port_cap_flags: u32,
    pub(crate) max_msg_sz: u32,
    pub(crate) bad_pkey_cntr: u32,
    pub(crate) qkey_viol_cntr: u32,
    pub(crate) pkey_tbl_len: u16,
    pub(crate) lid: u16,
    pub(crate) sm_lid: u16,
    pub(crate) lmc: u8,
    pub(crate) max_vl_num: u8,
    pub(crate) sm_sl: u8,
    pub(crate) subnet_timeout: u8,
    pub(crate) init_type_reply: u8,
    pub(crate) active_width: u8,
    pub(crate) active_speed: u8,
    pub(crate) phys_state: u8,
    pub(crate) link_layer: u8,
    pub(crate) flags: u8,
    pub(crate) port_cap_flags2: u16,
    _newer_fields: [u8; 192],
}

impl Default for IbvPortAttr {
    fn default() -> Self {
        // SAFETY: every field is an integer or an array of them, for which zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

/// The library's exported entry points, resolved when it is loaded.
#[derive(Debug)]
pub(crate) struct Api {
    pub(crate) get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice,
    pub(crate) free_device_list: unsafe extern "C" fn(*mut *mut IbvDevice),
    pub(crate) get_device_name: unsafe extern "C" fn(*mut IbvDevice) -> *const c_char,
    pub(crate) open_device: unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext,
    pub(crate) close_device: unsafe extern "C" fn(*mut IbvContext) -> c_int,
    pub(crate) alloc_pd: unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd,
    pub(crate) dealloc_pd: unsafe extern "C" fn(*mut IbvPd) -> c_int,
    pub(crate) reg_mr: unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, c_int) -> *mut IbvMr,
    pub(crate) dereg_mr: unsafe extern "C" fn(*mut IbvMr) -> c_int,
    pub(crate) create_cq: unsafe extern "C" fn(*mut IbvContext, c_int, *mut c_void, *mut c_void, c_int) -> *mut IbvCq,
    pub(crate) destroy_cq: unsafe extern "C" fn(*mut IbvCq) -> c_int,
    pub(crate) create_qp: unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp,
    pub(crate) modify_qp: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int,
    pub(crate) destroy_qp: unsafe extern "C" fn(*mut IbvQp) -> c_int,
    pub(crate) query_port: unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int,
    pub(crate) query_gid: unsafe extern "C" fn(*mut IbvContext, u8, c_int, *mut IbvGid) -> c_int,
    pub(crate) wc_status_str: unsafe extern "C" fn(c_uint) -> *const c_char,
    /// `ibv_reg_mr_iova2` (rdma-core 28 and later; `None` before).
    pub(crate) reg_mr_iova2: Option<unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, u64, c_uint) -> *mut IbvMr>,
    /// `ibv_reg_dmabuf_mr` (rdma-core 34 and later; `None` before).
    pub(crate) reg_dmabuf_mr: Option<unsafe extern "C" fn(*mut IbvPd, u64, usize, u64, c_int, c_int) -> *mut IbvMr>,
    /// Keeps the entry points valid.
    _library: libloading::Library,
}

impl Api {
    /// Loads `path` (a file name searched by the dynamic linker, or a path) and resolves every
    /// entry point.
    pub(crate) fn load(path: &str) -> Result<Self, RdmaError> {
        let failed = |detail: String| RdmaError::Load { path: path.into(), detail };
        // SAFETY: loading libibverbs runs its initialisers, which only set up its own state.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| failed(e.to_string()))?;
        macro_rules! symbol {
            ($name:literal) => {
                // SAFETY: the symbol has the C signature of the field it is stored in (verbs.h;
                // the exported, versioned symbols keep it).
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| failed(format!("{}: {e}", $name)))?
            };
        }
        Ok(Self {
            get_device_list: symbol!("ibv_get_device_list"),
            free_device_list: symbol!("ibv_free_device_list"),
            get_device_name: symbol!("ibv_get_device_name"),
            open_device: symbol!("ibv_open_device"),
            close_device: symbol!("ibv_close_device"),
            alloc_pd: symbol!("ibv_alloc_pd"),
            dealloc_pd: symbol!("ibv_dealloc_pd"),
            reg_mr: symbol!("ibv_reg_mr"),
            dereg_mr: symbol!("ibv_dereg_mr"),
            create_cq: symbol!("ibv_create_cq"),
            destroy_cq: symbol!("ibv_destroy_cq"),
            create_qp: symbol!("ibv_create_qp"),
            modify_qp: symbol!("ibv_modify_qp"),
            destroy_qp: symbol!("ibv_destroy_qp"),
            query_port: symbol!("ibv_query_port"),
            query_gid: symbol!("ibv_query_gid"),
            wc_status_str: symbol!("ibv_wc_status_str"),
            // SAFETY: as for the symbols above (verbs.h's ibv_reg_mr_iova2 and ibv_reg_dmabuf_mr).
            reg_mr_iova2: unsafe { library.get(b"ibv_reg_mr_iova2\0") }.ok().map(|s| *s),
            // SAFETY: as above.
            reg_dmabuf_mr: unsafe { library.get(b"ibv_reg_dmabuf_mr\0") }.ok().map(|s| *s),
            _library: library,
        })
    }
}

/// Every layout and constant above as (C expression, our value): the `ib` tests print each
/// expression from a C program compiled against the real verbs.h and compare.
#[cfg(test)]
pub(crate) fn abi_facts() -> Vec<(&'static str, u64)> {
    use std::mem::{offset_of, size_of};
    macro_rules! off {
        ($c:literal, $t:ty, $($f:tt).+) => {
            (concat!("offsetof(", $c, ")"), offset_of!($t, $($f).+) as u64)
        };
    }
    macro_rules! size {
        ($c:literal, $t:ty) => {
            (concat!("sizeof(", $c, ")"), size_of::<$t>() as u64)
        };
    }
    vec![
        ("IBV_WR_RDMA_WRITE", u64::from(IBV_WR_RDMA_WRITE)),
        ("IBV_WR_RDMA_WRITE_WITH_IMM", u64::from(IBV_WR_RDMA_WRITE_WITH_IMM)),
        ("IBV_WR_SEND_WITH_IMM", u64::from(IBV_WR_SEND_WITH_IMM)),
        ("IBV_SEND_SIGNALED", u64::from(IBV_SEND_SIGNALED)),
        ("IBV_WC_SUCCESS", u64::from(IBV_WC_SUCCESS)),
        ("IBV_WC_RDMA_WRITE", u64::from(IBV_WC_RDMA_WRITE)),
        ("IBV_WC_RECV", u64::from(IBV_WC_RECV)),
        ("IBV_WC_RECV_RDMA_WITH_IMM", u64::from(IBV_WC_RECV_RDMA_WITH_IMM)),
        ("IBV_WC_WITH_IMM", u64::from(IBV_WC_WITH_IMM)),
        ("IBV_QPT_RC", u64::from(IBV_QPT_RC)),
        ("IBV_QPS_INIT", u64::from(IBV_QPS_INIT)),
        ("IBV_QPS_RTR", u64::from(IBV_QPS_RTR)),
        ("IBV_QPS_RTS", u64::from(IBV_QPS_RTS)),
        ("IBV_QPS_ERR", u64::from(IBV_QPS_ERR)),
        ("IBV_QP_STATE", IBV_QP_STATE as u64),
        ("IBV_QP_ACCESS_FLAGS", IBV_QP_ACCESS_FLAGS as u64),
        ("IBV_QP_PKEY_INDEX", IBV_QP_PKEY_INDEX as u64),
        ("IBV_QP_PORT", IBV_QP_PORT as u64),
        ("IBV_QP_AV", IBV_QP_AV as u64),
        ("IBV_QP_PATH_MTU", IBV_QP_PATH_MTU as u64),
        ("IBV_QP_TIMEOUT", IBV_QP_TIMEOUT as u64),
        ("IBV_QP_RETRY_CNT", IBV_QP_RETRY_CNT as u64),
        ("IBV_QP_RNR_RETRY", IBV_QP_RNR_RETRY as u64),
        ("IBV_QP_RQ_PSN", IBV_QP_RQ_PSN as u64),
        ("IBV_QP_MAX_QP_RD_ATOMIC", IBV_QP_MAX_QP_RD_ATOMIC as u64),
        ("IBV_QP_MIN_RNR_TIMER", IBV_QP_MIN_RNR_TIMER as u64),
        ("IBV_QP_SQ_PSN", IBV_QP_SQ_PSN as u64),
        ("IBV_QP_MAX_DEST_RD_ATOMIC", IBV_QP_MAX_DEST_RD_ATOMIC as u64),
        ("IBV_QP_DEST_QPN", IBV_QP_DEST_QPN as u64),
        ("IBV_ACCESS_LOCAL_WRITE", IBV_ACCESS_LOCAL_WRITE as u64),
        ("IBV_ACCESS_REMOTE_WRITE", IBV_ACCESS_REMOTE_WRITE as u64),
        ("IBV_ACCESS_REMOTE_READ", IBV_ACCESS_REMOTE_READ as u64),
        ("IBV_ACCESS_RELAXED_ORDERING", IBV_ACCESS_RELAXED_ORDERING as u64),
        ("IBV_LINK_LAYER_ETHERNET", u64::from(IBV_LINK_LAYER_ETHERNET)),
        ("IBV_PORT_ACTIVE", u64::from(IBV_PORT_ACTIVE)),
        off!("struct ibv_context, device", IbvContext, device),
        off!("struct ibv_context, ops.poll_cq", IbvContext, ops.poll_cq),
        off!("struct ibv_context, ops.post_send", IbvContext, ops.post_send),
        off!("struct ibv_context, ops.post_recv", IbvContext, ops.post_recv),
        off!("struct ibv_cq, context", IbvCq, context),
        off!("struct ibv_qp, context", IbvQp, context),
        off!("struct ibv_qp, qp_num", IbvQp, qp_num),
        size!("struct ibv_mr", IbvMr),
        off!("struct ibv_mr, addr", IbvMr, addr),
        off!("struct ibv_mr, length", IbvMr, length),
        off!("struct ibv_mr, lkey", IbvMr, lkey),
        off!("struct ibv_mr, rkey", IbvMr, rkey),
        size!("struct ibv_sge", IbvSge),
        off!("struct ibv_sge, lkey", IbvSge, lkey),
        size!("struct ibv_send_wr", IbvSendWr),
        off!("struct ibv_send_wr, sg_list", IbvSendWr, sg_list),
        off!("struct ibv_send_wr, num_sge", IbvSendWr, num_sge),
        off!("struct ibv_send_wr, opcode", IbvSendWr, opcode),
        off!("struct ibv_send_wr, send_flags", IbvSendWr, send_flags),
        off!("struct ibv_send_wr, imm_data", IbvSendWr, imm_data),
        off!("struct ibv_send_wr, wr.rdma.remote_addr", IbvSendWr, rdma.remote_addr),
        off!("struct ibv_send_wr, wr.rdma.rkey", IbvSendWr, rdma.rkey),
        off!("struct ibv_send_wr, qp_type", IbvSendWr, _qp_type),
        off!("struct ibv_send_wr, bind_mw", IbvSendWr, _bind_mw_or_tso),
        size!("struct ibv_recv_wr", IbvRecvWr),
        off!("struct ibv_recv_wr, num_sge", IbvRecvWr, num_sge),
        size!("struct ibv_wc", IbvWc),
        off!("struct ibv_wc, status", IbvWc, status),
        off!("struct ibv_wc, opcode", IbvWc, opcode),
        off!("struct ibv_wc, imm_data", IbvWc, imm_data),
        off!("struct ibv_wc, qp_num", IbvWc, qp_num),
        off!("struct ibv_wc, wc_flags", IbvWc, wc_flags),
        off!("struct ibv_wc, dlid_path_bits", IbvWc, dlid_path_bits),
        size!("struct ibv_qp_init_attr", IbvQpInitAttr),
        off!("struct ibv_qp_init_attr, cap", IbvQpInitAttr, cap),
        off!("struct ibv_qp_init_attr, qp_type", IbvQpInitAttr, qp_type),
        off!("struct ibv_qp_init_attr, sq_sig_all", IbvQpInitAttr, sq_sig_all),
        size!("struct ibv_qp_cap", IbvQpCap),
        size!("union ibv_gid", IbvGid),
        size!("struct ibv_global_route", IbvGlobalRoute),
        off!("struct ibv_global_route, sgid_index", IbvGlobalRoute, sgid_index),
        off!("struct ibv_global_route, hop_limit", IbvGlobalRoute, hop_limit),
        size!("struct ibv_ah_attr", IbvAhAttr),
        off!("struct ibv_ah_attr, dlid", IbvAhAttr, dlid),
        off!("struct ibv_ah_attr, is_global", IbvAhAttr, is_global),
        off!("struct ibv_ah_attr, port_num", IbvAhAttr, port_num),
        size!("struct ibv_qp_attr", IbvQpAttr),
        off!("struct ibv_qp_attr, path_mtu", IbvQpAttr, path_mtu),
        off!("struct ibv_qp_attr, rq_psn", IbvQpAttr, rq_psn),
        off!("struct ibv_qp_attr, sq_psn", IbvQpAttr, sq_psn),
        off!("struct ibv_qp_attr, dest_qp_num", IbvQpAttr, dest_qp_num),
        off!("struct ibv_qp_attr, qp_access_flags", IbvQpAttr, qp_access_flags),
        off!("struct ibv_qp_attr, ah_attr", IbvQpAttr, ah_attr),
        off!("struct ibv_qp_attr, alt_ah_attr", IbvQpAttr, alt_ah_attr),
        off!("struct ibv_qp_attr, pkey_index", IbvQpAttr, pkey_index),
        off!("struct ibv_qp_attr, max_rd_atomic", IbvQpAttr, max_rd_atomic),
        off!("struct ibv_qp_attr, max_dest_rd_atomic", IbvQpAttr, max_dest_rd_atomic),
        off!("struct ibv_qp_attr, min_rnr_timer", IbvQpAttr, min_rnr_timer),
        off!("struct ibv_qp_attr, port_num", IbvQpAttr, port_num),
        off!("struct ibv_qp_attr, timeout", IbvQpAttr, timeout),
        off!("struct ibv_qp_attr, retry_cnt", IbvQpAttr, retry_cnt),
        off!("struct ibv_qp_attr, rnr_retry", IbvQpAttr, rnr_retry),
        off!("struct ibv_qp_attr, rate_limit", IbvQpAttr, rate_limit),
        off!("struct ibv_port_attr, state", IbvPortAttr, state),
        off!("struct ibv_port_attr, active_mtu", IbvPortAttr, active_mtu),
        off!("struct ibv_port_attr, lid", IbvPortAttr, lid),
        off!("struct ibv_port_attr, link_layer", IbvPortAttr, link_layer),
        off!("struct ibv_port_attr, port_cap_flags2", IbvPortAttr, port_cap_flags2),
    ]
}

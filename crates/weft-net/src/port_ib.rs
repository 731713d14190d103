//! The verbs side of a [`crate::PortProxy`] (`WEFT_NET=ib` or `soft-ib`): one NIC per rank,
//! one reliable-connected queue pair per PortChannel, the rank's registered memories registered
//! with the NIC, and a device inbox that raises the channels' GPU tokens when peers signal.
//!
//! - `ib`: rdma-core's libibverbs ([`RdmaVerbs`]). Peers write device memory directly
//!   (GPUDirect RDMA: the GPU driver's peer-memory module must be loaded), and the inbox
//!   flushes those writes to the GPU before each token store. Never run here (no NIC).
//! - `soft-ib`: the same transport over the process's [`SoftFabric`], with device memory
//!   behind staged copies: the whole PortChannel path over verbs (queue-pair exchange, receives,
//!   immediates, tokens) on machines without a NIC, for ranks of one process.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use weft_core::env::{Variable, vars};
use weft_core::{Communicator, Network, RegisteredMemory};
use weft_gpu::{GpuError, RdmaWriteVisibility};

use crate::proxy::transport::ConnectionId;
use crate::proxy::transport::TransportError;
use crate::proxy::transport::ib::discover;
use crate::proxy::transport::ib::rdma::{QpEndpoint, RdmaConfig, RdmaError, RdmaVerbs, library_path};
use crate::proxy::transport::ib::soft::{SoftFabric, SoftNic};
use crate::proxy::transport::ib::{
    IbConfig, IbConnection, IbTransport, LocalRegion, RemoteRegion, Verbs, VerbsError, WorkCompletion, WriteRequest,
};
use crate::proxy::transport::staged::{DEFAULT_STAGING_BYTES, DeviceInbox, StagedDeviceMemory};

/// Setting up the verbs side of a PortProxy failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PortIbError {
    /// A `WEFT_IB_*` number that is not one.
    #[error("{variable}={value}: not a number 0-255")]
    BadNumber {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// A CUDA call (the GPU's PCI id, its RDMA ordering, staging memory, the inbox).
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// rdma-core refused (loading, opening the device, a queue pair).
    #[error(transparent)]
    Rdma(#[from] RdmaError),
    /// Registering a memory with the NIC failed both ways.
    #[error("{by_address} (dma-buf: {by_dma_buf})")]
    Register {
        /// The registration by address.
        by_address: RdmaError,
        /// Why no dma-buf registration was made.
        by_dma_buf: String,
    },
    /// The software fabric refused a queue pair.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The transport refused the connection.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The GPU can neither order nor flush GPUDirect RDMA writes.
    #[error(
        "this GPU neither orders GPUDirect RDMA writes for its kernels nor flushes them from the host, so a signal \
         could overtake its data"
    )]
    NoRdmaWriteOrdering,
    /// The peer's offer is malformed.
    #[error("the peer's queue pair offer: {0}")]
    Offer(#[from] weft_bootstrap::codec::CodecError),
    /// A channel names a memory that was never registered.
    #[error("no memory {0}")]
    UnknownMemory(u8),
}

/// The NIC of a rank: rdma-core's, or one of the process's software fabric.
#[derive(Debug)]
pub(crate) enum Nic {
    Rdma(Box<RdmaVerbs>),
    Soft(SoftNic),
}

/// The software fabric every `soft-ib` rank of this process joins.
fn soft_fabric() -> &'static Arc<SoftFabric> {
    static FABRIC: OnceLock<Arc<SoftFabric>> = OnceLock::new();
    FABRIC.get_or_init(SoftFabric::new)
}

impl Nic {
    /// Opens the NIC `network` asks for: `WEFT_IB_DEVICE`, `WEFT_IB_PORT` and
    /// `WEFT_IB_GID_INDEX` where set, else what sysfs shows (`discover`): the NIC nearest this
    /// rank's GPU, its first active port, and on RoCE its first RoCE v2 IPv4 GID.
    fn open(comm: &Communicator, network: Network) -> Result<Self, PortIbError> {
        if network == Network::SoftIb {
            return Ok(Self::Soft(soft_fabric().nic()));
        }
        let env = comm.env();
        let number = |variable: &Variable| -> Result<Option<u8>, PortIbError> {
            env.var(variable)
                .filter(|v| !v.trim().is_empty())
                .map(|v| {
                    v.trim().parse().map_err(|_| PortIbError::BadNumber { variable: variable.name, value: v.into() })
                })
                .transpose()
        };
        let sysfs = std::path::Path::new("/sys");
        let nics = discover::list_nics(sysfs);
        let bus_id = comm.device().pci_bus_id()?;
        let nearest =
            discover::nearest_nic(&nics, discover::gpu_pci_path(sysfs, &bus_id).as_deref(), comm.device().ordinal());
        let device = env.var(&vars::WEFT_IB_DEVICE).filter(|d| !d.is_empty()).map(str::to_owned);
        let named = device.as_deref().and_then(|d| nics.iter().find(|n| n.name == d));
        let chosen = named.or(if device.is_none() { nearest } else { None });
        let port = number(&vars::WEFT_IB_PORT)?.or_else(|| chosen?.active_ports.first().copied()).unwrap_or(1);
        let device = device.or_else(|| chosen.map(|n| n.name.clone()));
        let gid_index = match number(&vars::WEFT_IB_GID_INDEX)? {
            Some(index) => index,
            None => device.as_deref().and_then(|d| discover::roce_v2_gid_index(sysfs, d, port)).unwrap_or(0),
        };
        tracing::debug!("rank {}: RDMA device {device:?}, port {port}, GID index {gid_index}", comm.rank());
        let config = RdmaConfig { device, port, gid_index, ..RdmaConfig::default() };
        Ok(Self::Rdma(Box::new(RdmaVerbs::open(&library_path(env), config)?)))
    }

    /// Registers `memory` for local reads and peers' writes.
    fn register(
        &self,
        comm: &Communicator,
        memory: &RegisteredMemory,
        timeout: Duration,
    ) -> Result<(LocalRegion, RemoteRegion), PortIbError> {
        match self {
            Self::Rdma(verbs) => {
                // Through a dma-buf where the GPU exports one (no peer-memory module needed),
                // else by address (needs it).
                let by_dma_buf = weft_gpu::export_dma_buf(comm.device(), memory.ptr(), memory.len())
                    .map_err(|e| e.to_string())
                    .and_then(|buf| {
                        use std::os::fd::AsFd;
                        // SAFETY: the PortProxy keeps `memory` registered (its list of
                        // memories) until after its verbs side, and with it this
                        // registration, is dropped.
                        unsafe { verbs.register_dmabuf(buf.fd.as_fd(), buf.offset, memory.ptr(), memory.len()) }
                            .map_err(|e| e.to_string())
                    });
                by_dma_buf.or_else(|dma_buf| {
                    tracing::debug!(
                        "rank {}: no dma-buf registration ({dma_buf}); registering by address",
                        comm.rank()
                    );
                    // SAFETY: as above.
                    unsafe { verbs.register(memory.ptr(), memory.len()) }
                        .map_err(|by_address| PortIbError::Register { by_address, by_dma_buf: dma_buf })
                })
            }
            Self::Soft(nic) => {
                let staged = StagedDeviceMemory::new(
                    comm.device(),
                    memory.ptr(),
                    memory.len(),
                    Arc::new(memory.clone()),
                    DEFAULT_STAGING_BYTES,
                    timeout,
                )?;
                Ok(nic.register(Arc::new(staged)))
            }
        }
    }

    /// Undoes [`Nic::register`] (a memory whose set-up failed later).
    fn unregister(&self, local: &LocalRegion) {
        if let Self::Rdma(verbs) = self {
            verbs.deregister(local.lkey);
        }
        // The software fabric keeps the staged view until the NIC retires: harmless.
    }

    /// Destroys queue pair `qpn` (a channel whose set-up failed).
    fn destroy_qp(&self, qpn: u32) {
        if let Self::Rdma(verbs) = self {
            verbs.destroy_qp(qpn);
        }
    }

    fn create_qp(&self) -> Result<QpEndpoint, PortIbError> {
        match self {
            Self::Rdma(verbs) => Ok(verbs.create_qp()?),
            Self::Soft(nic) => {
                let qpn = soft_fabric().create_qp(nic);
                Ok(QpEndpoint { lid: 0, qpn, psn: 0, mtu: 0, gid: [0; 16] })
            }
        }
    }

    fn connect_qp(&self, qpn: u32, remote: &QpEndpoint) -> Result<(), PortIbError> {
        match self {
            Self::Rdma(verbs) => Ok(verbs.connect_qp(qpn, remote)?),
            Self::Soft(_) => Ok(soft_fabric().connect_qp(qpn, remote.qpn)?),
        }
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        // The process's fabric would otherwise keep this rank's memories alive.
        if let Self::Soft(nic) = self {
            soft_fabric().retire(nic);
        }
    }
}

impl Verbs for Nic {
    fn post_write(&self, qp: u32, request: WriteRequest) -> Result<(), VerbsError> {
        match self {
            Self::Rdma(v) => v.post_write(qp, request),
            Self::Soft(v) => v.post_write(qp, request),
        }
    }
    fn post_recv(&self, qp: u32, wr_id: u64) -> Result<(), VerbsError> {
        match self {
            Self::Rdma(v) => v.post_recv(qp, wr_id),
            Self::Soft(v) => v.post_recv(qp, wr_id),
        }
    }
    fn poll_cq(&self, out: &mut Vec<WorkCompletion>) -> Result<(), VerbsError> {
        match self {
            Self::Rdma(v) => v.poll_cq(out),
            Self::Soft(v) => v.poll_cq(out),
        }
    }
}

/// What one side of a verbs PortChannel tells the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IbChannelOffer {
    /// The sender's connection index (its inbound token).
    pub(crate) connection: ConnectionId,
    /// Its queue pair.
    pub(crate) endpoint: QpEndpoint,
    /// Its memory that the receiver's puts write.
    pub(crate) memory: RemoteRegion,
}

impl IbChannelOffer {
    /// Appends the offer to `w`.
    pub(crate) fn write(&self, w: &mut weft_bootstrap::codec::Writer) {
        w.put_u16(self.connection);
        w.put_bytes(&self.endpoint.to_bytes());
        w.put_u64(self.memory.addr);
        w.put_u64(self.memory.len);
        w.put_u32(self.memory.rkey);
    }

    /// Reads an offer written by [`IbChannelOffer::write`].
    pub(crate) fn read(r: &mut weft_bootstrap::codec::Reader<'_>) -> Result<Self, weft_bootstrap::codec::CodecError> {
        let connection = r.u16()?;
        let bytes: [u8; QpEndpoint::BYTES] = r.array()?;
        let endpoint = QpEndpoint::from_bytes(&bytes);
        let memory = RemoteRegion { addr: r.u64()?, len: r.u64()?, rkey: r.u32()? };
        Ok(Self { connection, endpoint, memory })
    }
}

/// The verbs side of a proxy.
pub(crate) struct IbEndpoint {
    pub(crate) transport: Arc<IbTransport<Nic>>,
    /// Where peers' signals raise this rank's tokens.
    pub(crate) inbox: Arc<DeviceInbox>,
    /// This rank's memories as peers address them, by memory index.
    remote_views: Mutex<Vec<RemoteRegion>>,
    timeout: Duration,
}

impl std::fmt::Debug for IbEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IbEndpoint").field("nic", self.transport.verbs()).finish()
    }
}

impl IbEndpoint {
    /// Opens the rank's NIC for `network`.
    pub(crate) fn open(
        comm: &Communicator,
        network: Network,
        max_in_flight: u64,
        timeout: Duration,
    ) -> Result<Self, PortIbError> {
        let nic = Nic::open(comm, network)?;
        let mut inbox = DeviceInbox::new(comm.device(), crate::proxy::MemoryTable::new())?;
        if matches!(nic, Nic::Rdma(_)) {
            // A NIC writes device memory itself: its writes must be visible before the token.
            match comm.device().rdma_write_visibility()? {
                RdmaWriteVisibility::Ordered => {}
                RdmaWriteVisibility::HostFlush => inbox = inbox.flushing_rdma_writes(),
                RdmaWriteVisibility::Unsupported => return Err(PortIbError::NoRdmaWriteOrdering),
            }
        }
        let inbox = Arc::new(inbox);
        let config = match &nic {
            // Within the queue pairs' depths: a put may take two writes (max_write), and every
            // signal in flight has a receive posted (no receiver-not-ready stalls).
            Nic::Rdma(v) => {
                let rdma = v.config();
                IbConfig {
                    max_in_flight: max_in_flight.min(u64::from(rdma.send_depth / 2)).min(u64::from(rdma.recv_depth)),
                    recv_depth: rdma.recv_depth,
                    timeout,
                    max_write: v.max_write(),
                }
            }
            Nic::Soft(_) => IbConfig { max_in_flight, recv_depth: 512, timeout, ..IbConfig::default() },
        };
        let transport = Arc::new(IbTransport::new(nic, Vec::new(), inbox.clone(), config));
        Ok(Self { transport, inbox, remote_views: Mutex::new(Vec::new()), timeout })
    }

    /// Registers `memory` with the NIC (before the proxy's other tables, so a failure leaves
    /// them unchanged); [`IbEndpoint::add`] then gives it its index.
    pub(crate) fn prepare(
        &self,
        comm: &Communicator,
        memory: &RegisteredMemory,
    ) -> Result<(LocalRegion, RemoteRegion), PortIbError> {
        self.transport.verbs().register(comm, memory, self.timeout)
    }

    /// Undoes [`IbEndpoint::prepare`] when the memory's set-up fails before [`IbEndpoint::add`].
    pub(crate) fn discard(&self, (local, _): (LocalRegion, RemoteRegion)) {
        self.transport.verbs().unregister(&local);
    }

    /// Gives a prepared memory the next index: returned, to check against the other tables.
    pub(crate) fn add(&self, (local, remote): (LocalRegion, RemoteRegion)) -> usize {
        let mut views = self.remote_views.lock().unwrap_or_else(|p| p.into_inner());
        views.push(remote);
        let index = self.transport.add_local(local);
        debug_assert_eq!(index + 1, views.len());
        index
    }

    /// This side's offer for a channel on `connection` whose peer writes memory `local`.
    pub(crate) fn offer(&self, connection: ConnectionId, local: u8) -> Result<(IbChannelOffer, u32), PortIbError> {
        let memory = *self
            .remote_views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(usize::from(local))
            .ok_or(PortIbError::UnknownMemory(local))?;
        let endpoint = self.transport.verbs().create_qp()?;
        Ok((IbChannelOffer { connection, endpoint, memory }, endpoint.qpn))
    }

    /// Connects `connection`'s queue pair `qpn` to the peer's `theirs`: puts go to the peer's
    /// memory index `their_memory`.
    /// Undoes a channel's set-up after [`IbEndpoint::offer`]: forgets `connection` and destroys
    /// queue pair `qpn`.
    pub(crate) fn abandon(&self, connection: ConnectionId, qpn: u32) {
        self.transport.remove_connection(connection);
        self.transport.verbs().destroy_qp(qpn);
    }

    pub(crate) fn connect(
        &self,
        connection: ConnectionId,
        qpn: u32,
        theirs: &IbChannelOffer,
        their_memory: u8,
        peer: &str,
    ) -> Result<(), PortIbError> {
        self.transport.verbs().connect_qp(qpn, &theirs.endpoint)?;
        // Indexed by the peer's memory index; other indices are empty regions (refused).
        let mut remote = vec![RemoteRegion { addr: 0, len: 0, rkey: 0 }; usize::from(their_memory) + 1];
        remote[usize::from(their_memory)] = theirs.memory;
        let conn = IbConnection { qp: qpn, remote_connection: theirs.connection, peer: peer.into(), remote };
        Ok(self.transport.add_connection(connection, conn)?)
    }
}

//! PortChannels: kernels push puts, signals and flushes into their rank's FIFO
//! (`device/include/weft/port_channel.cuh`), and this rank's [`PortProxy`] executes them with the
//! copy-engine transport: `cuMemcpyDtoDAsync` into the peer's memory, then
//! `cuStreamWriteValue64` of the peer's inbound token, on a stream per channel.
//!
//! A [`PortProxy`] owns one FIFO (host-pinned ring, shared by every channel of the rank), the
//! transport and the proxy threads. Memories are registered with it ([`PortProxy::register`]:
//! their index is the `src_memory` of commands and what peers name as `dst_memory`).
//! [`PortProxy::channel`] is pairwise: both ranks exchange the memory index and descriptor of
//! their side and the token slot the other's proxy will store; each then maps the peer's memory
//! for its proxy only (kernels get no pointer to it, so this works across virtual nodes) and
//! opens a connection. A channel to a peer of another virtual node goes through the emulated NIC
//! when `WEFT_EMU_NET_LATENCY_US` / `WEFT_EMU_NET_GBPS` are set.
//!
//! Lifetime: a [`PortChannel`] holds the proxy's shared state, so the FIFO, the transport, the
//! registered memories and the peer mappings live while a handle may be in use. Dropping the
//! last owner (or [`PortProxy::shutdown`]) sets the FIFO's stop word (kernels pushing or waiting
//! give up with `ProxyStopped`), joins the threads and waits (bounded) for the copy queues.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weft_bootstrap::codec::{Reader, Writer};
use weft_types::{FifoDeviceHandle, PortChannelDeviceHandle, SemaphoreDeviceHandle};

use crate::communicator::Communicator;
use crate::descriptor::MemoryDescriptor;
use crate::error::{ConnectError, Error};
use crate::fifo::{FifoReader, PinnedFifo};
use crate::memory::RegisteredMemory;
use crate::proxy::transport::ce::{CopyEngineConfig, CopyEngineTransport, PeerLink};
use crate::proxy::transport::cuda_queue::CudaCopyQueue;
use crate::proxy::transport::{MAX_CONNECTIONS, Transport};
use crate::proxy::{ProxyConfig, ProxyService, ShutdownReport};
use crate::wire::{put_short_bytes, short_bytes};

/// Options of a [`PortProxy`].
#[derive(Clone, Debug)]
pub struct PortProxyConfig {
    /// Slots of the FIFO (a power of two).
    pub fifo_depth: usize,
    /// The proxy threads.
    pub proxy: ProxyConfig,
    /// Operations in flight per channel.
    pub max_in_flight: u64,
    /// Bound of device waits on the FIFO and the channels; `None`: `WEFT_TIMEOUT`.
    pub timeout: Option<Duration>,
}

impl Default for PortProxyConfig {
    fn default() -> Self {
        Self { fifo_depth: 1024, proxy: ProxyConfig::default(), max_in_flight: 512, timeout: None }
    }
}

struct Shared {
    comm: Communicator,
    /// The FIFO's memory, which `fifo_handle` points into.
    _fifo: PinnedFifo,
    fifo_handle: FifoDeviceHandle,
    transport: Arc<CopyEngineTransport<CudaCopyQueue>>,
    service: Mutex<Option<ProxyService>>,
    memories: Mutex<Vec<RegisteredMemory>>,
    next_connection: AtomicU16,
    timeout: Duration,
}

impl Shared {
    fn stop(&self) -> Result<ShutdownReport, Error> {
        let rank = self.comm.rank();
        let service = self.service.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(service) = service else { return Ok(ShutdownReport::default()) };
        let outcome = service.shutdown();
        // Copies already queued read and write registered memory: let them finish before the
        // memory can be freed (host side, not a proxy thread; bounded).
        let mut idle = Ok(());
        self.transport.for_each_queue(|q| {
            if idle.is_ok() {
                idle = q.stream().wait_idle(self.timeout, "a PortChannel copy queue at shutdown");
            }
        });
        idle.map_err(|source| Error::Gpu { rank, source })?;
        outcome.map_err(|e| Error::InvalidArgument { rank, detail: format!("PortChannel proxy: {e}") })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!("PortChannel proxy shutdown: {e}");
        }
    }
}

/// This rank's proxy for PortChannels (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct PortProxy {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PortProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortProxy").field("rank", &self.shared.comm.rank()).finish()
    }
}

/// A memory's index in a [`PortProxy`]'s table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryId(pub u8);

impl PortProxy {
    /// Allocates the FIFO and starts the proxy threads for `comm`'s rank.
    pub fn new(comm: &Communicator, config: PortProxyConfig) -> Result<Self, Error> {
        let rank = comm.rank();
        let invalid = |detail: String| Error::InvalidArgument { rank, detail };
        let fifo = PinnedFifo::new(comm.device(), config.fifo_depth).map_err(|e| invalid(e.to_string()))?;
        let mut wait = comm.wait_context(0, config.timeout);
        wait.peer = -1;
        let fifo_handle = fifo.device_handle(wait);
        let ce = CopyEngineConfig {
            max_in_flight: config.max_in_flight,
            timeout: config.timeout.unwrap_or(comm.env().device_timeout),
            link: comm.env().emulated_net,
        };
        let transport = Arc::new(CopyEngineTransport::new(ce).map_err(|e| invalid(e.to_string()))?);
        let reader = FifoReader::new(fifo.clone()).map_err(|e| invalid(e.to_string()))?;
        let bus_id = comm.device().pci_bus_id().map_err(|source| Error::Gpu { rank, source })?;
        let service = ProxyService::builder(config.proxy.near_pci_device(&bus_id))
            .transport(transport.clone())
            .fifo(reader)
            .start()
            .map_err(|e| invalid(format!("cannot start the PortChannel proxy: {e}")))?;
        Ok(Self {
            shared: Arc::new(Shared {
                comm: comm.clone(),
                _fifo: fifo,
                fifo_handle,
                transport,
                service: Mutex::new(Some(service)),
                memories: Mutex::new(Vec::new()),
                next_connection: AtomicU16::new(0),
                timeout: config.timeout.unwrap_or(comm.env().device_timeout),
            }),
        })
    }

    /// Registers `memory` with the proxy: puts may read it, and peers' channels write into it.
    pub fn register(&self, memory: &RegisteredMemory) -> Result<MemoryId, Error> {
        let rank = self.shared.comm.rank();
        if memory.len() as u64 > u64::from(u32::MAX) + 1 {
            return Err(Error::InvalidArgument {
                rank,
                detail: format!(
                    "a PortChannel memory must be at most 4 GiB (FIFO offsets are 32-bit), not {}",
                    memory.len()
                ),
            });
        }
        let mut memories = self.shared.memories.lock().unwrap_or_else(|p| p.into_inner());
        let id = self
            .shared
            .transport
            .register_local(memory.ptr(), memory.len() as u64, Arc::new(memory.clone()))
            .map_err(|e| Error::InvalidArgument { rank, detail: e.to_string() })?;
        memories.push(memory.clone());
        Ok(MemoryId(id))
    }

    /// The FIFO's device handle (kernels that push their own commands).
    pub fn fifo_handle(&self) -> FifoDeviceHandle {
        self.shared.fifo_handle
    }

    /// The error that stopped the proxy, if one did.
    pub fn failure(&self) -> Option<String> {
        let service = self.shared.service.lock().unwrap_or_else(|p| p.into_inner());
        service.as_ref().and_then(ProxyService::failure).map(|e| e.to_string())
    }

    /// Stops the proxy (kernels still pushing or waiting give up with `ProxyStopped`), joins
    /// its threads and waits (bounded) for queued copies. Channels stay valid objects but their
    /// commands fail from now on.
    pub fn shutdown(&self) -> Result<ShutdownReport, Error> {
        self.shared.stop()
    }

    /// Creates a channel with `peer` whose puts read `local` (registered here) and write the
    /// memory the peer names in its matching call. Pairwise: `peer` must make the matching call.
    pub fn channel(&self, peer: usize, local: MemoryId, timeout: Option<Duration>) -> Result<PortChannel, Error> {
        let comm = &self.shared.comm;
        let rank = comm.rank();
        let invalid = |detail: String| Error::InvalidArgument { rank, detail };
        let descriptor = {
            let memories = self.shared.memories.lock().unwrap_or_else(|p| p.into_inner());
            let memory = memories.get(usize::from(local.0)).ok_or_else(|| invalid(format!("no memory {}", local.0)))?;
            memory.descriptor().encode().map_err(|e| invalid(e.to_string()))?
        };
        let (inbound_slot, inbound) = comm.claim_token()?;
        let (_, expected) = comm.claim_token()?;
        let pool = comm.token_pool().descriptor().encode().map_err(|e| invalid(e.to_string()))?;
        let mut w = Writer::new();
        w.put_u8(local.0);
        put_short_bytes(&mut w, &descriptor).map_err(|e| invalid(e.to_string()))?;
        w.put_u32(u32::try_from(inbound_slot).map_err(|_| invalid("token slot".into()))?);
        put_short_bytes(&mut w, &pool).map_err(|e| invalid(e.to_string()))?;
        let theirs = comm.exchange(peer, &w.into_inner())?;
        let malformed = |source| ConnectError::Descriptor { rank, peer, source };
        let mut r = Reader::new(&theirs);
        let their_id = r.u8().map_err(malformed)?;
        let their_memory = MemoryDescriptor::decode(short_bytes(&mut r).map_err(malformed)?).map_err(malformed)?;
        let their_slot = u64::from(r.u32().map_err(malformed)?);
        let their_pool = MemoryDescriptor::decode(short_bytes(&mut r).map_err(malformed)?).map_err(malformed)?;
        r.finish().map_err(malformed)?;
        if (their_slot + 1) * 8 > their_pool.len {
            return Err(invalid(format!("peer {peer} sent token slot {their_slot} outside its pool")));
        }
        let remote = comm.import_for_proxy(peer, &their_memory)?;
        let remote_pool = comm.import_for_proxy(peer, &their_pool)?;
        let token = remote_pool.ptr() + 8 * their_slot;
        let connection = self.shared.next_connection.fetch_add(1, Ordering::Relaxed);
        if usize::from(connection) >= MAX_CONNECTIONS {
            return Err(invalid(format!("at most {MAX_CONNECTIONS} PortChannels per rank")));
        }
        let gpu = |source| Error::Gpu { rank, source };
        let queue = CudaCopyQueue::new(comm.device()).map_err(gpu)?;
        // One store of the token's current value (0: only this connection writes it) at setup,
        // so the stream's first use, and any lazy initialisation behind it, happens now rather
        // than on a proxy thread while kernels run.
        // SAFETY: `token` is the peer's 8-byte aligned token slot, mapped by `remote_pool`, which
        // lives until the stream is idle (waited for just below).
        unsafe { queue.stream().write_value64(token, 0) }.map_err(gpu)?;
        queue.stream().wait_idle(self.shared.timeout, "the first store of a PortChannel's copy queue").map_err(gpu)?;
        let paced = !comm.topology().same_node(peer) && comm.env().emulated_net.is_some();
        let link = PeerLink {
            peer: format!("rank {peer}"),
            queue,
            token,
            remote: vec![(their_id, remote.ptr(), remote.len() as u64)],
            keep: Arc::new((remote, remote_pool)),
            paced,
        };
        self.shared.transport.connect(connection, link).map_err(|e| invalid(e.to_string()))?;
        let semaphore =
            SemaphoreDeviceHandle { inbound, remote_inbound: 0, expected, wait: comm.wait_context(peer, timeout) };
        let handle = PortChannelDeviceHandle {
            fifo: self.shared.fifo_handle,
            semaphore,
            connection: u32::from(connection),
            src_memory: u32::from(local.0),
            dst_memory: u32::from(their_id),
            reserved: 0,
        };
        Ok(PortChannel { peer, paced, handle, _proxy: self.shared.clone() })
    }
}

/// A PortChannel to one peer. Holding it keeps the proxy, its FIFO and the memories alive.
#[derive(Clone)]
pub struct PortChannel {
    peer: usize,
    paced: bool,
    handle: PortChannelDeviceHandle,
    _proxy: Arc<Shared>,
}

impl std::fmt::Debug for PortChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortChannel").field("peer", &self.peer).field("paced", &self.paced).finish()
    }
}

impl PortChannel {
    /// The peer.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// Whether the channel goes through the emulated NIC.
    pub fn paced(&self) -> bool {
        self.paced
    }

    /// Plain handle for kernels; valid while `self` lives.
    pub fn device_handle(&self) -> PortChannelDeviceHandle {
        self.handle
    }

    /// Operations the proxy completed on this channel (puts and signals applied at the peer).
    pub fn completed(&self) -> Result<u64, String> {
        let connection = u16::try_from(self.handle.connection).map_err(|e| e.to_string())?;
        self._proxy.transport.completed(connection).map_err(|e| e.to_string())
    }
}

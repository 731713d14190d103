//! PortChannels: kernels push puts, signals and flushes into their rank's FIFO
//! (`device/include/weft/port_channel.cuh`), and this rank's [`PortProxy`] executes them with
//! the transport that reaches the peer ([`PortRoute`]):
//!
//! - a peer in this (possibly virtual) node: the copy engine, `cuMemcpyDtoDAsync` into the
//!   peer's memory, then `cuStreamWriteValue64` of the peer's inbound token, on a stream per
//!   channel;
//! - a peer in another virtual node of this host while `WEFT_EMU_NET_LATENCY_US` /
//!   `WEFT_EMU_NET_GBPS` are set: the same copy engine, paced as the emulated NIC;
//! - any other peer (another host, or another virtual node without emulation): TCP, the data
//!   staged through pinned host memory on both sides and the peer's token stored by its
//!   receiver after the data it covers.
//!
//! A [`PortProxy`] owns its FIFOs (host-pinned rings: one unless `WEFT_PROXY_FIFOS` asks for
//! more; channel i pushes into FIFO i mod FIFOs, so a channel's commands stay in one FIFO, in
//! order), the transports (one [`RoutedTransport`] in front of them, so one proxy serves every
//! peer) and the proxy threads (`WEFT_PROXY_THREADS`, each owning a fixed set of the FIFOs).
//! Nothing orders commands of different channels but the kernels' own flushes (GIN flushes
//! every other connection a signal must cover), so dealing channels over FIFOs and threads
//! keeps every guarantee a channel gives. Memories are registered with it
//! ([`PortProxy::register`]: their index is the `src_memory` of commands and what peers name as
//! `dst_memory`, the same in every transport's table). [`PortProxy::channel`] is pairwise: both
//! ranks exchange the memory index and, for the copy engine, the descriptor of their side and
//! the token slot the other's proxy will store (each maps the peer's memory for its proxy only:
//! kernels get no pointer to it, so this works across virtual nodes), or for TCP their
//! listening address and connection index.
//!
//! Lifetime: a [`PortChannel`] holds the proxy's shared state, so the FIFOs, the transports,
//! the registered memories and the peer mappings live while a handle may be in use. Dropping
//! the last owner (or [`PortProxy::shutdown`]) sets every FIFO's stop word (kernels pushing or waiting
//! give up with `ProxyStopped`), joins the threads and waits (bounded) for the copy queues.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weft_bootstrap::codec::{Reader, Writer};
use weft_core::descriptor::MemoryDescriptor;
use weft_core::env::vars;
use weft_core::wire::{put_short_bytes, short_bytes};
use weft_core::{Communicator, ConnectError, Env, Error, Network, RegisteredMemory, Topology};
use weft_types::{FifoDeviceHandle, PortChannelDeviceHandle, SemaphoreDeviceHandle};

use crate::fifo::{FifoReader, PinnedFifo};
use crate::proxy::transport::ce::{CopyEngineConfig, CopyEngineTransport, PeerLink};
use crate::proxy::transport::cuda_queue::CudaCopyQueue;
use crate::proxy::transport::routed::RoutedTransport;
use crate::proxy::transport::staged::{DEFAULT_STAGING_BYTES, DeviceInbox, StagedDeviceMemory};
use crate::proxy::transport::tcp::{TcpConfig, TcpTransport};
use crate::proxy::transport::{ConnectionId, MAX_CONNECTIONS, MemoryTable, Transport, TransportError};
use crate::proxy::{ProxyConfig, ProxyService, ShutdownReport};

/// Options of a [`PortProxy`].
#[derive(Clone, Debug)]
pub struct PortProxyConfig {
    /// Slots of each FIFO (a power of two).
    pub fifo_depth: usize,
    /// FIFOs the channels are dealt over (`WEFT_PROXY_FIFOS` overrides it), 1 to
    /// [`MAX_PROXY_FIFOS`].
    pub fifos: usize,
    /// The proxy threads (`WEFT_PROXY_THREADS` overrides their number), at most `fifos`.
    pub proxy: ProxyConfig,
    /// Operations in flight per channel.
    pub max_in_flight: u64,
    /// Bound of device waits on the FIFO and the channels; `None`: `WEFT_TIMEOUT`.
    pub timeout: Option<Duration>,
    /// Sockets per TCP channel (frames go round-robin over them).
    pub tcp_streams: u16,
}

impl Default for PortProxyConfig {
    fn default() -> Self {
        Self {
            fifo_depth: 1024,
            fifos: 1,
            proxy: ProxyConfig::default(),
            max_in_flight: 512,
            timeout: None,
            tcp_streams: 2,
        }
    }
}

/// Most FIFOs one [`PortProxy`] deals its channels over.
pub const MAX_PROXY_FIFOS: usize = 16;

impl PortProxyConfig {
    /// The FIFO and thread counts this configuration gives under `env`'s `WEFT_PROXY_FIFOS` and
    /// `WEFT_PROXY_THREADS` (each overrides the configuration's), checked: 1 to
    /// [`MAX_PROXY_FIFOS`] FIFOs, 1 thread to as many as FIFOs.
    pub fn layout(&self, env: &Env) -> Result<(usize, usize), String> {
        let count = |variable: &vars::Variable, configured: usize| -> Result<usize, String> {
            match env.var(variable).map(str::trim).filter(|v| !v.is_empty()) {
                None => Ok(configured),
                Some(v) => v.parse().map_err(|_| format!("{}={v:?}: expected a whole number", variable.name)),
            }
        };
        let fifos = count(&vars::WEFT_PROXY_FIFOS, self.fifos)?;
        let threads = count(&vars::WEFT_PROXY_THREADS, self.proxy.threads)?;
        if !(1..=MAX_PROXY_FIFOS).contains(&fifos) {
            return Err(format!("{fifos} proxy FIFOs (WEFT_PROXY_FIFOS): expected 1 to {MAX_PROXY_FIFOS}"));
        }
        if !(1..=fifos).contains(&threads) {
            return Err(format!(
                "{threads} proxy threads (WEFT_PROXY_THREADS) for {fifos} FIFO(s): expected 1 to {fifos} (a thread \
                 without a FIFO would have nothing to do)"
            ));
        }
        Ok((fifos, threads))
    }
}

/// The FIFO of the proxy's `fifos` that the channel of `connection` pushes into: connections
/// are dealt in turn.
fn fifo_of(connection: ConnectionId, fifos: usize) -> usize {
    usize::from(connection) % fifos.max(1)
}

/// How a PortChannel reaches its peer (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortRoute {
    /// The copy engine writes the peer's memory: a peer in this node.
    CopyEngine,
    /// The copy engine paced as the emulated NIC: a peer in another virtual node of this host
    /// while the emulation is on.
    EmulatedNic,
    /// TCP through pinned host memory: a peer on another host, or in another virtual node
    /// without the emulation (`WEFT_NET=tcp`, the default).
    Tcp,
    /// InfiniBand verbs (`WEFT_NET=ib`, or `soft-ib` over the software fabric), where TCP
    /// would be used otherwise.
    Ib,
}

impl PortRoute {
    /// The route from this rank of `topology` to `peer` under `env` (the emulated NIC, the
    /// network).
    pub fn to(topology: &Topology, peer: usize, env: &Env) -> Self {
        if topology.same_node(peer) {
            Self::CopyEngine
        } else if env.emulated_net.is_some() && topology.same_host(peer) {
            Self::EmulatedNic
        } else if env.network == Network::Tcp {
            Self::Tcp
        } else {
            Self::Ib
        }
    }

    /// Whether the route crosses a network transport (TCP or verbs) rather than a copy engine.
    pub fn is_network(self) -> bool {
        matches!(self, Self::Tcp | Self::Ib)
    }

    fn tag(self) -> u8 {
        self as u8
    }

    fn from_tag(tag: u8) -> Option<Self> {
        [Self::CopyEngine, Self::EmulatedNic, Self::Tcp, Self::Ib].into_iter().find(|r| r.tag() == tag)
    }
}

/// Index of each transport in the proxy's [`RoutedTransport`]: the copy engine, and the
/// network transport (TCP or verbs) when some peer needs one.
const COPY_ENGINE: usize = 0;
const NETWORK: usize = 1;

/// The network side of a proxy: whichever transport `WEFT_NET` picks.
enum NetEndpoint {
    Tcp(TcpEndpoint),
    #[cfg(feature = "ib")]
    Ib(crate::port_ib::IbEndpoint),
}

impl NetEndpoint {
    /// Opens the endpoint `route` needs for `comm`'s peers.
    fn open(comm: &Communicator, route: PortRoute, config: &PortProxyConfig, timeout: Duration) -> Result<Self, Error> {
        let rank = comm.rank();
        match route {
            PortRoute::Tcp => {
                let ip = tcp_listen_ip(comm)?;
                TcpEndpoint::bind(comm, ip, config, timeout).map(Self::Tcp)
            }
            #[cfg(feature = "ib")]
            PortRoute::Ib => crate::port_ib::IbEndpoint::open(comm, comm.env().network, config.max_in_flight, timeout)
                .map(Self::Ib)
                .map_err(|e| Error::InvalidArgument { rank, detail: format!("PortChannel verbs endpoint: {e}") }),
            _ => Err(Error::InvalidArgument {
                rank,
                detail: format!(
                    "WEFT_NET={:?} routes peers over {route:?}, which this build lacks (the `ib` cargo feature)",
                    comm.env().network
                ),
            }),
        }
    }

    fn transport(&self) -> Arc<dyn Transport> {
        match self {
            Self::Tcp(tcp) => tcp.transport.clone(),
            #[cfg(feature = "ib")]
            Self::Ib(ib) => ib.transport.clone(),
        }
    }

    fn inbox(&self) -> &DeviceInbox {
        match self {
            Self::Tcp(tcp) => &tcp.inbox,
            #[cfg(feature = "ib")]
            Self::Ib(ib) => &ib.inbox,
        }
    }
}

/// The TCP side of a proxy: an endpoint listening for peers, with staged views of the
/// registered memories (indices equal to their [`MemoryId`]s).
struct TcpEndpoint {
    transport: Arc<TcpTransport>,
    /// What puts read: the registered memories, staged for reading.
    sources: Arc<MemoryTable>,
    /// Where peers' puts and signals land: the registered memories, staged for writing (its own
    /// staging buffers, so sending and receiving do not queue behind each other), and tokens.
    inbox: Arc<DeviceInbox>,
}

impl TcpEndpoint {
    /// Listens at `ip` (any port) for `comm`'s peers.
    fn bind(comm: &Communicator, ip: IpAddr, config: &PortProxyConfig, timeout: Duration) -> Result<Self, Error> {
        let rank = comm.rank();
        let sources = Arc::new(MemoryTable::new());
        let inbox = Arc::new(
            DeviceInbox::new(comm.device(), MemoryTable::new()).map_err(|source| Error::Gpu { rank, source })?,
        );
        let tcp = TcpConfig {
            bind: SocketAddr::new(ip, 0),
            streams: config.tcp_streams,
            max_in_flight: config.max_in_flight,
            timeout,
            ..TcpConfig::default()
        };
        let transport = TcpTransport::bind(tcp, format!("rank {rank}"), sources.clone(), inbox.clone())
            .map_err(|e| Error::InvalidArgument { rank, detail: format!("PortChannel TCP endpoint: {e}") })?;
        Ok(Self { transport: Arc::new(transport), sources, inbox })
    }
}

/// The network route of `comm`'s peers that need one (every such peer gets the same: TCP or
/// verbs, by `WEFT_NET`), if any does.
fn network_route(comm: &Communicator) -> Option<PortRoute> {
    (0..comm.world_size())
        .filter(|&p| p != comm.rank())
        .map(|p| PortRoute::to(comm.topology(), p, comm.env()))
        .find(|r| r.is_network())
}

/// Where this rank's TCP endpoint listens: loopback when every peer reached over TCP is on this
/// host, else the address the bootstrap advertises.
fn tcp_listen_ip(comm: &Communicator) -> Result<IpAddr, Error> {
    let topology = comm.topology();
    let all_local = (0..comm.world_size())
        .filter(|&p| p != comm.rank() && PortRoute::to(topology, p, comm.env()) == PortRoute::Tcp)
        .all(|p| topology.same_host(p));
    if all_local {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    comm.bootstrap().advertised_ip().ok_or_else(|| Error::InvalidArgument {
        rank: comm.rank(),
        detail: "peers on other hosts need a TCP address, and the bootstrap advertises none".into(),
    })
}

struct Shared {
    comm: Communicator,
    /// The FIFOs' memory, which `fifo_handles` point into.
    _fifos: Vec<PinnedFifo>,
    /// Per FIFO, its device handle; channel i's commands go to `fifo_handles[fifo_of(i)]`.
    fifo_handles: Vec<FifoDeviceHandle>,
    copy_engine: Arc<CopyEngineTransport<CudaCopyQueue>>,
    /// Present when some peer is reached over a network (declared before `memories`: a NIC's
    /// registrations end before the memories can be freed).
    net: Option<NetEndpoint>,
    /// Every connection's transport: what the proxy threads submit to.
    routes: Arc<RoutedTransport>,
    service: Mutex<Option<ProxyService>>,
    memories: Mutex<Vec<RegisteredMemory>>,
    /// Per peer, the copy queue whose stream its copy-engine connections share (see
    /// `cuda_queue`: one stream per connection would overflow CUDA's hardware queues).
    peer_queues: Mutex<std::collections::HashMap<usize, CudaCopyQueue>>,
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
        self.copy_engine.for_each_queue(|q| {
            if idle.is_ok() {
                idle = q.stream().wait_idle(self.timeout, "a PortChannel copy queue at shutdown");
            }
        });
        // The network receivers are stopped; token stores they queued write the communicator's
        // pool. Waited for even when a copy queue failed to drain.
        let drained = self.net.as_ref().map_or(Ok(()), |net| net.inbox().drain(self.timeout));
        idle.map_err(|source| Error::Gpu { rank, source })?;
        drained.map_err(|e| Error::InvalidArgument { rank, detail: e.to_string() })?;
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
        if !weft_core::cuda_queues_ok() {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "{}={}: fewer than {} CUDA hardware queues; a proxy copy may queue behind the kernel waiting for it \
                     and time out (set it before CUDA starts)",
                    weft_core::CUDA_QUEUES_VAR,
                    std::env::var(weft_core::CUDA_QUEUES_VAR).unwrap_or_else(|_| "unset".into()),
                    weft_core::CUDA_QUEUES_WANTED
                );
            });
        }
        let invalid = |detail: String| Error::InvalidArgument { rank, detail };
        let (fifo_count, threads) = config.layout(comm.env()).map_err(invalid)?;
        let fifos = (0..fifo_count)
            .map(|_| PinnedFifo::new(comm.device(), config.fifo_depth))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(e.to_string()))?;
        let mut wait = comm.wait_context(0, config.timeout);
        wait.peer = -1;
        let fifo_handles = fifos.iter().map(|f| f.device_handle(wait)).collect();
        let timeout = config.timeout.unwrap_or(comm.env().device_timeout);
        let ce = CopyEngineConfig {
            max_in_flight: config.max_in_flight,
            timeout,
            link: comm.env().emulated_net,
            chaos: chaos_seed(comm.env()).map_err(invalid)?,
        };
        let copy_engine = Arc::new(CopyEngineTransport::new(ce).map_err(|e| invalid(e.to_string()))?);
        let net = network_route(comm).map(|route| NetEndpoint::open(comm, route, &config, timeout)).transpose()?;
        let mut transports: Vec<Arc<dyn Transport>> = vec![copy_engine.clone()];
        if let Some(net) = &net {
            transports.push(net.transport());
        }
        let routes = Arc::new(RoutedTransport::new(transports));
        let bus_id = comm.device().pci_bus_id().map_err(|source| Error::Gpu { rank, source })?;
        let proxy = ProxyConfig { threads, ..config.proxy.clone() };
        let mut builder = ProxyService::builder(proxy.near_pci_device(&bus_id)).transport(routes.clone());
        for fifo in &fifos {
            builder = builder.fifo(FifoReader::new(fifo.clone()).map_err(|e| invalid(e.to_string()))?);
        }
        let service = builder.start().map_err(|e| invalid(format!("cannot start the PortChannel proxy: {e}")))?;
        Ok(Self {
            shared: Arc::new(Shared {
                comm: comm.clone(),
                _fifos: fifos,
                fifo_handles,
                copy_engine,
                net,
                routes,
                service: Mutex::new(Some(service)),
                memories: Mutex::new(Vec::new()),
                peer_queues: Mutex::default(),
                next_connection: AtomicU16::new(0),
                timeout,
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
        let invalid = |detail: String| Error::InvalidArgument { rank, detail };
        let mut memories = self.shared.memories.lock().unwrap_or_else(|p| p.into_inner());
        // Everything that can fail for another reason than a full table is set up first, and
        // every table holds as many memories as `memories`, so the indices stay equal.
        enum Prepared<'a> {
            Tcp(&'a TcpEndpoint, StagedDeviceMemory, StagedDeviceMemory),
            #[cfg(feature = "ib")]
            Ib(
                &'a crate::port_ib::IbEndpoint,
                (crate::proxy::transport::ib::LocalRegion, crate::proxy::transport::ib::RemoteRegion),
            ),
        }
        let prepared = match &self.shared.net {
            #[cfg(feature = "ib")]
            Some(NetEndpoint::Ib(ib)) => {
                Some(Prepared::Ib(ib, ib.prepare(&self.shared.comm, memory).map_err(|e| invalid(e.to_string()))?))
            }
            Some(NetEndpoint::Tcp(tcp)) => {
                let view = || {
                    StagedDeviceMemory::new(
                        self.shared.comm.device(),
                        memory.ptr(),
                        memory.len(),
                        Arc::new(memory.clone()),
                        DEFAULT_STAGING_BYTES,
                        self.shared.timeout,
                    )
                    .map_err(|source| Error::Gpu { rank, source })
                };
                Some(Prepared::Tcp(tcp, view()?, view()?))
            }
            None => None,
        };
        let keep = Arc::new(memory.clone());
        let id = match self.shared.copy_engine.register_local(memory.ptr(), memory.len() as u64, keep) {
            Ok(id) => id,
            Err(e) => {
                // The NIC must not keep a registration of memory the proxy does not hold.
                #[cfg(feature = "ib")]
                if let Some(Prepared::Ib(ib, regions)) = prepared {
                    ib.discard(regions);
                }
                return Err(invalid(e.to_string()));
            }
        };
        match prepared {
            Some(Prepared::Tcp(tcp, read, write)) => {
                let read = tcp.sources.register(Arc::new(read)).map_err(|e| invalid(e.to_string()))?;
                let write = tcp.inbox.memories().register(Arc::new(write)).map_err(|e| invalid(e.to_string()))?;
                if (read, write) != (id, id) {
                    return Err(invalid(format!("memory tables out of step: {id}, {read}, {write}")));
                }
            }
            #[cfg(feature = "ib")]
            Some(Prepared::Ib(ib, regions)) => {
                let index = ib.add(regions);
                if index != usize::from(id) {
                    return Err(invalid(format!("memory tables out of step: {id}, {index}")));
                }
            }
            None => {}
        }
        memories.push(memory.clone());
        Ok(MemoryId(id))
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
        if peer >= comm.world_size() || peer == rank {
            return Err(invalid(format!("peer {peer} (world of {}, self is {rank})", comm.world_size())));
        }
        let route = PortRoute::to(comm.topology(), peer, comm.env());
        let descriptor = {
            let memories = self.shared.memories.lock().unwrap_or_else(|p| p.into_inner());
            let memory = memories.get(usize::from(local.0)).ok_or_else(|| invalid(format!("no memory {}", local.0)))?;
            memory.descriptor().encode().map_err(|e| invalid(e.to_string()))?
        };
        let connection = self.shared.next_connection.fetch_add(1, Ordering::Relaxed);
        if usize::from(connection) >= MAX_CONNECTIONS {
            return Err(invalid(format!("at most {MAX_CONNECTIONS} PortChannels per rank")));
        }
        let (inbound_slot, inbound) = comm.claim_token()?;
        let (_, expected) = comm.claim_token()?;
        // The queue pair this side offers, for a verbs channel.
        #[cfg(feature = "ib")]
        let mut ib_qpn: Option<u32> = None;
        let mut w = Writer::new();
        w.put_u8(route.tag());
        w.put_u8(local.0);
        match route {
            PortRoute::CopyEngine | PortRoute::EmulatedNic => {
                let pool = comm.token_pool().descriptor().encode().map_err(|e| invalid(e.to_string()))?;
                put_short_bytes(&mut w, &descriptor).map_err(|e| invalid(e.to_string()))?;
                w.put_u32(u32::try_from(inbound_slot).map_err(|_| invalid("token slot".into()))?);
                put_short_bytes(&mut w, &pool).map_err(|e| invalid(e.to_string()))?;
            }
            PortRoute::Tcp | PortRoute::Ib => {
                // Signals of the peer's connection land in this channel's inbound token.
                let keep = Arc::new(comm.token_pool().clone());
                let net = self.net(route)?;
                net.inbox().set_token(connection, inbound, keep).map_err(|e| invalid(e.to_string()))?;
                match net {
                    NetEndpoint::Tcp(tcp) => {
                        w.put_u16(connection);
                        w.put_addr(&tcp.transport.local_addr());
                    }
                    #[cfg(feature = "ib")]
                    NetEndpoint::Ib(ib) => {
                        let (offer, qpn) = ib.offer(connection, local.0).map_err(|e| invalid(e.to_string()))?;
                        offer.write(&mut w);
                        ib_qpn = Some(qpn);
                    }
                }
            }
        }
        let theirs = comm.exchange(peer, &w.into_inner())?;
        let malformed = |source| ConnectError::Descriptor { rank, peer, source };
        let mut r = Reader::new(&theirs);
        let their_route = r.u8().map_err(malformed)?;
        if PortRoute::from_tag(their_route) != Some(route) {
            return Err(invalid(format!(
                "this rank reaches peer {peer} through {route:?}, the peer routes tag {their_route} \
                 (WEFT_RANKS_PER_NODE and WEFT_EMU_NET_* must be the same on every rank)"
            )));
        }
        let their_id = r.u8().map_err(malformed)?;
        match route {
            PortRoute::CopyEngine | PortRoute::EmulatedNic => {
                let their_memory =
                    MemoryDescriptor::decode(short_bytes(&mut r).map_err(malformed)?).map_err(malformed)?;
                let their_slot = u64::from(r.u32().map_err(malformed)?);
                let their_pool =
                    MemoryDescriptor::decode(short_bytes(&mut r).map_err(malformed)?).map_err(malformed)?;
                r.finish().map_err(malformed)?;
                let target = CopyEngineTarget { memory: their_memory, slot: their_slot, pool: their_pool };
                self.connect_copy_engine(peer, connection, their_id, target, route == PortRoute::EmulatedNic)?;
            }
            PortRoute::Tcp | PortRoute::Ib => match self.net(route)? {
                NetEndpoint::Tcp(tcp) => {
                    let their_connection = r.u16().map_err(malformed)?;
                    let addr = r.addr().map_err(malformed)?;
                    r.finish().map_err(malformed)?;
                    tcp.transport
                        .connect(connection, addr, their_connection, &format!("rank {peer}"))
                        .map_err(|e| invalid(e.to_string()))?;
                }
                #[cfg(feature = "ib")]
                NetEndpoint::Ib(ib) => {
                    let qpn = ib_qpn.ok_or_else(|| invalid("no queue pair was offered".into()))?;
                    let connected = crate::port_ib::IbChannelOffer::read(&mut r)
                        .and_then(|theirs| r.finish().map(|()| theirs))
                        .map_err(crate::port_ib::PortIbError::from)
                        .and_then(|theirs| ib.connect(connection, qpn, &theirs, their_id, &format!("rank {peer}")));
                    // Both sides report how their half went, whatever happened: neither returns
                    // before the other's queue pair is connected with receives posted (so no
                    // signal meets a queue pair that is not ready), and a failure on either side
                    // fails both without leaving the pair's exchanges out of step.
                    let status = match &connected {
                        Ok(()) => b"connected".to_vec(),
                        Err(e) => format!("failed: {e}").into_bytes(),
                    };
                    let reply = comm.exchange(peer, &status);
                    let failure = match (&connected, &reply) {
                        (Err(e), _) => Some(format!("connecting the queue pair to rank {peer}: {e}")),
                        (Ok(()), Err(e)) => Some(e.to_string()),
                        (Ok(()), Ok(theirs)) if theirs.as_slice() != b"connected" => {
                            Some(format!("rank {peer}: {}", String::from_utf8_lossy(theirs)))
                        }
                        _ => None,
                    };
                    if let Some(detail) = failure {
                        ib.abandon(connection, qpn);
                        return Err(invalid(detail));
                    }
                }
            },
        }
        let transport = if route.is_network() { NETWORK } else { COPY_ENGINE };
        self.shared.routes.route(connection, transport).map_err(|e| invalid(e.to_string()))?;
        let semaphore =
            SemaphoreDeviceHandle { inbound, remote_inbound: 0, expected, wait: comm.wait_context(peer, timeout) };
        let handle = PortChannelDeviceHandle {
            fifo: self.shared.fifo_handles[fifo_of(connection, self.shared.fifo_handles.len())],
            semaphore,
            connection: u32::from(connection),
            src_memory: u32::from(local.0),
            dst_memory: u32::from(their_id),
            reserved: 0,
        };
        Ok(PortChannel { peer, route, connection, handle, _proxy: self.shared.clone() })
    }

    /// The network endpoint, which exists whenever some peer's route is a network one.
    fn net(&self, route: PortRoute) -> Result<&NetEndpoint, Error> {
        self.shared.net.as_ref().ok_or_else(|| Error::InvalidArgument {
            rank: self.shared.comm.rank(),
            detail: format!("no network endpoint for a {route:?} channel"),
        })
    }

    /// Maps the peer's memory and token for this proxy's copy engine and opens `connection`.
    fn connect_copy_engine(
        &self,
        peer: usize,
        connection: ConnectionId,
        their_id: u8,
        target: CopyEngineTarget,
        paced: bool,
    ) -> Result<(), Error> {
        let comm = &self.shared.comm;
        let rank = comm.rank();
        let invalid = |detail: String| Error::InvalidArgument { rank, detail };
        if (target.slot + 1) * 8 > target.pool.len {
            return Err(invalid(format!("peer {peer} sent token slot {} outside its pool", target.slot)));
        }
        let remote = comm.import_for_proxy(peer, &target.memory)?;
        let remote_pool = comm.import_for_proxy(peer, &target.pool)?;
        let token = remote_pool.ptr() + 8 * target.slot;
        let gpu = |source| Error::Gpu { rank, source };
        let queue = {
            use std::collections::hash_map::Entry;
            let mut queues = self.shared.peer_queues.lock().unwrap_or_else(|p| p.into_inner());
            match queues.entry(peer) {
                Entry::Occupied(e) => e.get().sharing(),
                Entry::Vacant(e) => e.insert(CudaCopyQueue::new(comm.device()).map_err(gpu)?).sharing(),
            }
        };
        // One store of the token's current value (0: only this connection writes it) at setup,
        // so the stream's first use, and any lazy initialisation behind it, happens now rather
        // than on a proxy thread while kernels run.
        // SAFETY: `token` is the peer's 8-byte aligned token slot, mapped by `remote_pool`, which
        // lives until the stream is idle (waited for just below).
        unsafe { queue.stream().write_value64(token, 0) }.map_err(gpu)?;
        queue.stream().wait_idle(self.shared.timeout, "the first store of a PortChannel's copy queue").map_err(gpu)?;
        let link = PeerLink {
            peer: format!("rank {peer}"),
            queue,
            token,
            remote: vec![(their_id, remote.ptr(), remote.len() as u64)],
            keep: Arc::new((remote, remote_pool)),
            paced,
        };
        self.shared.copy_engine.connect(connection, link).map_err(|e| invalid(e.to_string()))
    }
}

/// `WEFT_EMU_NET_CHAOS`: the seed of the emulated NIC's chaos (`None`: unset, or no emulation).
fn chaos_seed(env: &Env) -> Result<Option<u64>, String> {
    let variable = &vars::WEFT_EMU_NET_CHAOS;
    let Some(value) = env.var(variable).map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
    let seed = value.parse().map_err(|_| format!("{}={value:?}: expected a whole number (a seed)", variable.name))?;
    if env.emulated_net.is_none() {
        tracing::warn!(
            "{} is set but the emulated NIC is off (no WEFT_EMU_NET_LATENCY_US / _GBPS): ignored",
            variable.name
        );
        return Ok(None);
    }
    Ok(Some(seed))
}

/// What a peer's copy-engine channel writes: its memory, and its token slot in its pool.
struct CopyEngineTarget {
    memory: MemoryDescriptor,
    slot: u64,
    pool: MemoryDescriptor,
}

/// A PortChannel to one peer. Holding it keeps the proxy, its FIFO and the memories alive.
#[derive(Clone)]
pub struct PortChannel {
    peer: usize,
    route: PortRoute,
    /// Its connection in this rank's proxy (also in `handle`, as the device reads it).
    connection: ConnectionId,
    handle: PortChannelDeviceHandle,
    _proxy: Arc<Shared>,
}

impl std::fmt::Debug for PortChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortChannel").field("peer", &self.peer).field("route", &self.route).finish()
    }
}

impl PortChannel {
    /// The peer.
    pub fn peer(&self) -> usize {
        self.peer
    }

    /// How the channel reaches its peer.
    pub fn route(&self) -> PortRoute {
        self.route
    }

    /// Plain handle for kernels; valid while `self` lives.
    pub fn device_handle(&self) -> PortChannelDeviceHandle {
        self.handle
    }

    /// Operations the proxy completed on this channel (puts and signals applied at the peer).
    pub fn completed(&self) -> Result<u64, TransportError> {
        self._proxy.routes.completed(self.connection)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on failure
mod tests {
    use super::*;
    use weft_core::{LinkModel, NodeLayout, PeerInfo, ProcessIdentity};

    fn test_peer(rank: usize, host: u64, pid: u64, bus: &str) -> PeerInfo {
        PeerInfo {
            rank,
            device_ordinal: rank,
            pci_bus_id: bus.into(),
            identity: ProcessIdentity { host_hash: host, pid_hash: pid },
        }
    }

    #[test]
    fn peers_of_other_nodes_go_over_tcp_unless_the_nic_is_emulated_on_one_host() {
        // Host 1 holds ranks 0-3 (virtual nodes {0, 1} and {2, 3}), host 2 holds rank 4.
        let peers: Vec<_> =
            (0..5).map(|r| test_peer(r, if r < 4 { 1 } else { 2 }, r as u64, &format!("gpu{r}"))).collect();
        let t = Topology::new(0, peers.clone(), NodeLayout::default()).unwrap();
        let env = |emulated: bool, network| {
            let mut env = Env::default();
            env.emulated_net = emulated.then(|| LinkModel::new(5.0, None));
            env.network = network;
            env
        };
        let routes = |t: &Topology, emulated, network| {
            (1..5).map(|p| PortRoute::to(t, p, &env(emulated, network))).collect::<Vec<_>>()
        };
        use PortRoute::{CopyEngine as Ce, EmulatedNic as Emu, Ib, Tcp};
        assert_eq!(routes(&t, false, Network::Tcp), [Ce, Ce, Ce, Tcp]);
        assert_eq!(routes(&t, true, Network::Tcp), [Ce, Ce, Ce, Tcp]);
        assert_eq!(routes(&t, false, Network::Ib), [Ce, Ce, Ce, Ib]);
        let v = Topology::new(0, peers, NodeLayout::virtual_nodes(2)).unwrap();
        assert_eq!(routes(&v, false, Network::Tcp), [Ce, Tcp, Tcp, Tcp]);
        assert_eq!(routes(&v, true, Network::Tcp), [Ce, Emu, Emu, Tcp]);
        assert_eq!(routes(&v, false, Network::SoftIb), [Ce, Ib, Ib, Ib]);
        assert_eq!(routes(&v, true, Network::Ib), [Ce, Emu, Emu, Ib]);
        for r in [Ce, Emu, Tcp, Ib] {
            assert_eq!(PortRoute::from_tag(r.tag()), Some(r));
        }
        assert_eq!(PortRoute::from_tag(4), None);
    }

    #[test]
    fn the_chaos_seed_needs_a_whole_number_and_the_emulation() {
        let env = |pairs: &[(&str, &str)]| Env::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let on = ("WEFT_EMU_NET_LATENCY_US", "2");
        assert_eq!(chaos_seed(&env(&[on]).unwrap()), Ok(None));
        assert_eq!(chaos_seed(&env(&[on, ("WEFT_EMU_NET_CHAOS", " 42 ")]).unwrap()), Ok(Some(42)));
        assert_eq!(chaos_seed(&env(&[("WEFT_EMU_NET_CHAOS", "42")]).unwrap()), Ok(None), "no emulation");
        let bad = chaos_seed(&env(&[on, ("WEFT_EMU_NET_CHAOS", "-1")]).unwrap()).unwrap_err();
        assert!(bad.contains("WEFT_EMU_NET_CHAOS=\"-1\""), "{bad}");
    }

    #[test]
    fn the_variables_set_the_fifos_and_threads_within_bounds() {
        let env =
            |pairs: &[(&str, &str)]| Env::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap();
        let config = PortProxyConfig::default();
        assert_eq!(config.layout(&env(&[])), Ok((1, 1)));
        assert_eq!(config.layout(&env(&[("WEFT_PROXY_FIFOS", "4")])), Ok((4, 1)));
        assert_eq!(config.layout(&env(&[("WEFT_PROXY_FIFOS", "4"), ("WEFT_PROXY_THREADS", " 2 ")])), Ok((4, 2)));
        // The variables override the configuration.
        let eight = PortProxyConfig { fifos: 8, proxy: ProxyConfig { threads: 8, ..ProxyConfig::default() }, ..config };
        assert_eq!(eight.layout(&env(&[])), Ok((8, 8)));
        assert_eq!(eight.layout(&env(&[("WEFT_PROXY_THREADS", "3")])), Ok((8, 3)));
        for (pairs, says) in [
            (&[("WEFT_PROXY_FIFOS", "0")][..], "expected 1 to 16"),
            (&[("WEFT_PROXY_FIFOS", "17")][..], "expected 1 to 16"),
            (&[("WEFT_PROXY_FIFOS", "two")][..], "WEFT_PROXY_FIFOS=\"two\""),
            (&[("WEFT_PROXY_THREADS", "2")][..], "expected 1 to 1"),
            (&[("WEFT_PROXY_FIFOS", "2"), ("WEFT_PROXY_THREADS", "0")][..], "expected 1 to 2"),
        ] {
            let err = PortProxyConfig::default().layout(&env(pairs)).unwrap_err();
            assert!(err.contains(says), "{pairs:?}: {err}");
        }
    }

    #[test]
    fn channels_are_dealt_over_the_fifos_in_turn() {
        assert_eq!((0..6).map(|c| fifo_of(c, 1)).collect::<Vec<_>>(), [0; 6]);
        assert_eq!((0..6).map(|c| fifo_of(c, 4)).collect::<Vec<_>>(), [0, 1, 2, 3, 0, 1]);
        // Every FIFO gets a channel before any gets a second, and a connection always maps to
        // the same FIFO (its commands stay in order).
        for fifos in 1..=MAX_PROXY_FIFOS {
            let first: Vec<usize> = (0..fifos as u16).map(|c| fifo_of(c, fifos)).collect();
            assert_eq!(first, (0..fifos).collect::<Vec<_>>());
        }
    }
}
